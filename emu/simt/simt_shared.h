/* simt_shared.h: __shared__ memory in the SIMT emulator, bounds-checked.
 *
 * Kernel code declares shared arrays with BK_SHARED(T, name, n) (one
 * dimension) or BK_SHARED_DYN(T, name) (the launch's dynamic shared memory),
 * and holds pointers into them as BK_SPTR(T) (kernels/cuda/bk_cuda.cuh maps
 * these to __shared__ T name[n] and T * under nvcc). In the emulator a shared
 * "pointer" is an sptr<T>: the array's base, its length and an offset, so
 * every element access checks its index against the whole array and an
 * access out of bounds stops the launch with the array's name, the index and
 * the length. Each block gets fresh arrays, filled with 0xff bytes (NaN for
 * floats) so that reading before writing shows.
 *
 * An element access yields an sref<T>, a proxy reference that tells reads
 * (conversion to T, taking the element's address as const T *) from writes
 * (assignment, compound assignment, ++, --) and reports each to the
 * shared-memory race detector (simt_shared.cc) before it touches the bytes.
 *
 * The plain __shared__ keyword does not compile in the emulator: all shared
 * memory goes through these checked arrays. */
#ifndef BURST_EMU_SIMT_SHARED_H
#define BURST_EMU_SIMT_SHARED_H

#include <stddef.h>
#include <stdint.h>

#include <type_traits>

namespace bk_emu
{

/* The running block's array declared at `site` (first call allocates it). */
void *shared_array(const void *site, const char *name, size_t bytes);
/* The launch's dynamic shared memory (dyn_bytes set at launch). */
void *shared_dynamic(const char *name, size_t *bytes);
[[noreturn]] void shared_oob(const char *name, int64_t index, int64_t count, int64_t n,
                             size_t elem);
[[noreturn]] void shared_misaligned(const char *name, int64_t byte_offset, size_t elem);

/* Why each shared-memory access is reported to the emulator: the race
 * detector runs (BK_EMU_RACECHECK=0 or set_racecheck(0) turn it off), or the
 * schedule is random (it may preempt the thread there). Read inline, so that
 * with neither an access costs a test. */
enum { WATCH_RACES = 1, WATCH_SCHEDULE = 2 };
extern int g_shared_watch;
/* The running thread reads or writes `bytes` bytes at p, inside the shared
 * array whose data starts at base (simt_shared.cc). */
void shared_read(const void *base, const void *p, size_t bytes);
void shared_write(const void *base, const void *p, size_t bytes);

/* The address of one element of a shared array (&tile[i]): handed to a callee
 * that takes a const T *, it counts as a read of the element (when the
 * conversion happens); the atomic functions (simt_atomic.h) take it as is.
 * It converts to no T *: a write through a bare pointer would escape the
 * race detector. */
template <class T> class saddr
{
    T *p_;
    const void *base_;

  public:
    saddr(T *p, const void *base) : p_(p), base_(base) {}
    operator const T *() const
    {
        if (g_shared_watch) shared_read(base_, p_, sizeof(T));
        return p_;
    }
    /* For the atomics, which never race with each other and which the
     * detector does not record. */
    T *atomic_target() const { return p_; }
};

/* A reference to one element of a shared array that reports each read and
 * write to the race detector. Like a reference it is bound once: assigning to
 * it assigns to the element. */
template <class T> class sref
{
    T *p_;
    const void *base_; /* the array's data, which locates the detector's shadow */

    void reading() const
    {
        if (g_shared_watch) shared_read(base_, p_, sizeof(T));
    }
    void writing() const
    {
        if (g_shared_watch) shared_write(base_, p_, sizeof(T));
    }

  public:
    sref(T *p, const void *base) : p_(p), base_(base) {}
    sref(const sref &) = default;

    operator T() const
    {
        reading();
        return *p_;
    }
    saddr<T> operator&() const { return saddr<T>(p_, base_); }
    const T *operator->() const
    {
        reading();
        return p_;
    }
    const sref &operator=(const T &v) const
    {
        writing();
        *p_ = v;
        return *this;
    }
    const sref &operator=(const sref &o) const { return *this = static_cast<T>(o); }
    /* Compound assignments: a read, then a write, of the same thread. */
    template <class U> const sref &operator+=(const U &v) const { return *this = T(T(*this) + v); }
    template <class U> const sref &operator-=(const U &v) const { return *this = T(T(*this) - v); }
    template <class U> const sref &operator*=(const U &v) const { return *this = T(T(*this) * v); }
    template <class U> const sref &operator/=(const U &v) const { return *this = T(T(*this) / v); }
    template <class U> const sref &operator|=(const U &v) const { return *this = T(T(*this) | v); }
    template <class U> const sref &operator&=(const U &v) const { return *this = T(T(*this) & v); }
    template <class U> const sref &operator^=(const U &v) const { return *this = T(T(*this) ^ v); }
    const sref &operator++() const { return *this += 1; }
    const sref &operator--() const { return *this -= 1; }
    T operator++(int) const
    {
        T old = *this;
        *this = T(old + 1);
        return old;
    }
    T operator--(int) const
    {
        T old = *this;
        *this = T(old - 1);
        return old;
    }
};

template <class T> struct sptr {
    T *base;
    int64_t n, off; /* elements in the array; offset of this pointer */
    const char *name;

    sptr() : base(nullptr), n(0), off(0), name("(null shared pointer)") {}
    sptr(T *b, int64_t count, int64_t o, const char *nm) : base(b), n(count), off(o), name(nm) {}
    template <class U, class = typename std::enable_if<std::is_same<const U, T>::value &&
                                                       !std::is_same<U, T>::value>::type>
    sptr(const sptr<U> &p) : base(p.base), n(p.n), off(p.off), name(p.name)
    {
    }

    /* &element i of the array, after checking that elements [i, i + count) exist */
    T *at(int64_t i, int64_t count = 1) const
    {
        if (i < 0 || i + count > n) shared_oob(name, i, count, n, sizeof(T));
        return base + i;
    }
    /* checks [off, off + count) and returns the raw address of element off
     * (for the emulator's own accesses, which report to the race detector
     * themselves) */
    T *range(int64_t count) const { return at(off, count); }
    sref<T> operator[](int64_t i) const { return sref<T>(at(off + i), base); }
    sref<T> operator*() const { return sref<T>(at(off), base); }
    sptr operator+(int64_t i) const { return sptr(base, n, off + i, name); }
    sptr operator-(int64_t i) const { return sptr(base, n, off - i, name); }
    sptr &operator+=(int64_t i)
    {
        off += i;
        return *this;
    }
    sptr &operator-=(int64_t i)
    {
        off -= i;
        return *this;
    }
    sptr &operator++()
    {
        off++;
        return *this;
    }
    int64_t operator-(const sptr &o) const { return off - o.off; }
};

/* The same bytes seen as U: the offset must fall on a U boundary. */
template <class U, class T> sptr<U> sptr_cast(const sptr<T> &p)
{
    int64_t byte_off = p.off * (int64_t)sizeof(T);
    if (byte_off % (int64_t)sizeof(U) != 0) shared_misaligned(p.name, byte_off, sizeof(U));
    return sptr<U>(reinterpret_cast<U *>(p.base), p.n * (int64_t)sizeof(T) / (int64_t)sizeof(U),
                   byte_off / (int64_t)sizeof(U), p.name);
}

template <class T> sptr<T> shared_dyn(const char *name)
{
    size_t bytes = 0;
    T *p = static_cast<T *>(shared_dynamic(name, &bytes));
    return sptr<T>(p, (int64_t)(bytes / sizeof(T)), 0, name);
}

} // namespace bk_emu

#define BK_SHARED(T, name, count)                                                                  \
    static char name##_bk_site;                                                                    \
    const bk_emu::sptr<T> name(static_cast<T *>(bk_emu::shared_array(                              \
                                   &name##_bk_site, #name, sizeof(T) * (size_t)(count))),          \
                               (int64_t)(count), 0, #name)
#define BK_SHARED_DYN(T, name) const bk_emu::sptr<T> name = bk_emu::shared_dyn<T>(#name)
#define BK_SPTR(T)             bk_emu::sptr<T>
#define BK_SPTR_CAST(U, p)     bk_emu::sptr_cast<U>(p)
#define __shared__             bk_emu_shared_memory_must_be_declared_with_BK_SHARED

#endif
