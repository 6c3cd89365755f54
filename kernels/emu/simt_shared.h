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
 * The plain __shared__ keyword does not compile in the emulator: all shared
 * memory goes through these checked arrays. */
#ifndef BURST_KERNELS_EMU_SIMT_SHARED_H
#define BURST_KERNELS_EMU_SIMT_SHARED_H

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
    /* checks [off, off + count) and returns the raw address of element off */
    T *range(int64_t count) const { return at(off, count); }
    T &operator[](int64_t i) const { return *at(off + i); }
    T &operator*() const { return *at(off); }
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
