/* simt_memory.h: the emulated CUDA runtime's record of memory: every live
 * allocation with its kind (device, page-locked host), its exact size and the
 * device it belongs to; red zones after each; and the checks built on the
 * record, that a kernel's pointer arguments are device memory and that a copy's
 * pointers agree with its direction.
 *
 * Every allocation is 256-byte aligned (cudaMalloc's guarantee) and followed
 * by a red zone: from its exact end up to RED_ZONE_BYTES past its size rounded
 * up to 256, filled with RED_ZONE_BYTE. A write past the end lands there, and
 * memory_red_zones_intact (at every synchronisation) or memory_free reports
 * it with the allocation's size and the first damaged offset; on a GPU it
 * would corrupt the neighbouring allocation silently.
 *
 * The record is guarded by one mutex; a lookup is a map search. The model of
 * NCCL (emu/nccl/nccl_emu_check.cc) checks its buffers, their kind, device
 * and extent, through memory_find. */
#ifndef BURST_EMU_SIMT_MEMORY_H
#define BURST_EMU_SIMT_MEMORY_H

#include <stddef.h>

#include <tuple>
#include <utility>

namespace bk_emu
{

enum memory_kind {
    MEM_DEVICE,          /* cudaMalloc, cudaMallocAsync */
    MEM_PINNED_HOST,     /* cudaMallocHost, cudaHostAlloc */
    MEM_REGISTERED_HOST, /* cudaHostRegister (not used by our code yet) */
};

/* One live allocation. call is the runtime call that made it ("cudaMalloc"). */
struct allocation {
    const char *base;
    size_t bytes; /* exactly what was asked for */
    memory_kind kind;
    int device; /* the device current when it was made */
    const char *call;
};

/* "device memory", "page-locked host memory", ... */
const char *memory_kind_name(memory_kind kind);

/* A new allocation of bytes > 0 of the kind, recorded under call; NULL when
 * the host has no memory for it. */
void *memory_alloc(size_t bytes, memory_kind kind, const char *call);

/* Frees the allocation at p (its start) of the kind. 0; -1 when its red zone
 * was damaged (freed all the same); -2 when p starts no live allocation of
 * that kind (nothing freed). why[len] says what went wrong. */
int memory_free(const void *p, memory_kind kind, char *why, size_t len);

/* 1 and *out filled when p lies inside a live allocation
 * ([base, base + bytes)); else 0. */
int memory_find(const void *p, allocation *out);

/* What p is, for error messages: "device memory (cudaMalloc of 400 bytes at
 * 0x..., offset 12)" or "in no live allocation (pageable host memory, or
 * freed)". */
void memory_describe(const void *p, char *buf, size_t len);

/* 0 when every live allocation's red zone is intact; else -1 and why[len]
 * names the first damaged one: its kind, size, address and the first bad
 * offset past its end. */
int memory_red_zones_intact(char *why, size_t len);

/* The device that later allocations belong to (cudaSetDevice). */
void memory_set_device(int device);

/* Bytes of live allocations of the kind, rounded up to 256 as the runtime
 * counts them. */
size_t memory_live_bytes(memory_kind kind);

/* ---------------------------------------------------------------- kernel pointers */

/* Whether a launch checks its kernel's pointer arguments (default 1). The
 * emulator's own tests of SIMT semantics hand kernels host arrays and turn it
 * off; nothing else should. */
void set_kernel_pointer_check(int on);

/* 0 when argument arg (from 0) of kernel, p, is NULL or inside a live device
 * allocation; else the launch is refused as launch errors are (refuse_launch,
 * simt_runtime.h) with what p is. A GPU with unified addressing would let a
 * kernel read page-locked host memory over PCIe; our kernels never mean to,
 * so that is refused too. */
int check_kernel_pointer(const char *kernel, int arg, const void *p);

template <class T> inline int check_kernel_argument(const char *, int, const T &)
{
    return 0;
}
template <class T> inline int check_kernel_argument(const char *kernel, int arg, T *const &p)
{
    return check_kernel_pointer(kernel, arg, p);
}

/* A kernel thread reads `bytes` bytes of global memory at p (a vector load,
 * BK_LOAD_GLOBAL, or a cp.async source) at file:line: p must be aligned to
 * `align` and [p, p + bytes) must lie inside one live device allocation, else
 * the launch fails naming the load and what p is. Off with the kernel
 * pointer check (set_kernel_pointer_check(0)). A per-thread cache of the last
 * allocation found keeps the common case free of the record's lock. */
void check_global_read(const void *p, size_t bytes, size_t align, const char *file, int line);

/* 0 when every pointer of args is usable by kernel (check_kernel_pointer). */
template <class... T> int check_kernel_arguments(const char *kernel, const std::tuple<T...> &args)
{
    int arg = 0, rc = 0;
    std::apply(
        [&](const T &...value) {
            ((rc = rc != 0 ? rc : check_kernel_argument(kernel, arg++, value)), ...);
        },
        args);
    return rc;
}

} // namespace bk_emu

#endif
