/* simt_account.h: the emulated device's account of a stretch of work (a
 * training step): launches by kernel, the global bytes each kernel's
 * launcher declares it reads and writes, the FLOPs of the modelled cuBLASLt
 * products, the copies between host and device by direction, and every host
 * wait with the entry point (bk_*) that waited and the code that called it.
 * What a GPU's profiler would tell, counted exactly and without a GPU, so
 * that a change to the device path is measured by what it removes
 * (doc/BENCHMARKS.md, "The device step's account on the emulator").
 *
 * Bytes are footprints, not measured traffic: each launcher declares, from
 * its arguments, the bytes of its operands it reads and of its results it
 * writes, each counted once (BK_FOOTPRINT, kernels/cuda/bk_cuda.cuh): the
 * least traffic the call needs. A kernel's passes over the same data and the
 * attention kernels' tiles of K and V read again for every query tile are
 * not in it. A launch whose launcher declared nothing is counted in
 * `undeclared` (none of today's do so).
 *
 * The account is the process's (one rank), kept always: counting is a lock
 * and a short search per launch, copy and wait. The trainer marks its steps
 * (bk_device_step_begin/end, kernels/device.h): a step's beginning resets the
 * account, its end keeps it for bk_emu_account_get until the next beginning
 * and, under BK_EMU_COUNT, prints it. BK_EMU_COUNT=1 prints every step's
 * account on stdout; BK_EMU_COUNT=skip also skips the arithmetic that makes
 * the emulator slow: the modelled products (their result is zero, or C kept
 * when beta is not 0) and the attention kernels on tensor cores (their
 * outputs keep what they held) are counted but not run. Every other kernel
 * runs, so that what the host reads back (the valid-token counts, the
 * losses, the gradient norm) is finite and the step takes the same path; the
 * account is then the same as a full step's (tests/train/test_device_account
 * holds both equal). */
#ifndef BURST_EMU_SIMT_ACCOUNT_H
#define BURST_EMU_SIMT_ACCOUNT_H

#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
    BK_EMU_ACCOUNT_KERNELS = 96,    /* distinct kernel names an account holds */
    BK_EMU_ACCOUNT_WAIT_SITES = 96, /* distinct (kind, entry point, caller) of waits */
    BK_EMU_KERNEL_NAME = 64         /* bytes of a kernel's name, with its '\0' */
};

/* One kernel, by the name it was launched under ("bk_rmsnorm_fwd_kernel",
 * "bk_attn_fwd_kernel<64, bf16>"; every modelled product is
 * "cublasLtMatmul"). */
typedef struct {
    char name[BK_EMU_KERNEL_NAME];
    int64_t launches;
    int64_t undeclared;                /* launches without a declared footprint */
    int64_t read_bytes, written_bytes; /* the launchers' footprints, summed */
    int64_t flops;                     /* the products' 2 m n k, summed */
} bk_emu_kernel_count;

/* The host waits for the device, as the CUDA runtime's calls would, and the
 * host's questions whether an event's work is done (cudaEventQuery, which a
 * loop that polls until done turns into a wait; not counted in `waits`). */
typedef enum {
    BK_EMU_WAIT_STREAM, /* cudaStreamSynchronize */
    BK_EMU_WAIT_COPY,   /* a copy to or from the host that returns when done */
    BK_EMU_WAIT_EVENT,  /* cudaEventSynchronize */
    BK_EMU_WAIT_DEVICE, /* the whole device: cudaFree, cudaFreeHost */
    BK_EMU_WAIT_QUERY,  /* cudaEventQuery: a question, not a wait */
    BK_EMU_WAIT_KINDS
} bk_emu_wait_kind;

/* Waits (or queries) of one kind through one entry point from one call site. */
typedef struct {
    bk_emu_wait_kind kind;
    const char *entry;  /* the bk_* entry point the wait happened in ("?": none seen) */
    const void *caller; /* the address that entry point returns to */
    int64_t count;
} bk_emu_wait_site;

/* Copies by direction: kernels/device_ops.h's BK_COPY_* order (host to
 * device, device to host, device to device). */
enum { BK_EMU_COPY_DIRECTIONS = 3 };

typedef struct {
    int64_t step; /* the step it is the account of; -1 outside the steps */
    int64_t launches, undeclared, read_bytes, written_bytes, flops; /* over every kernel */
    int n_kernels;
    bk_emu_kernel_count kernels[BK_EMU_ACCOUNT_KERNELS]; /* in the order first launched */
    int64_t copies[BK_EMU_COPY_DIRECTIONS], copy_bytes[BK_EMU_COPY_DIRECTIONS];
    int64_t waits;                            /* every kind but BK_EMU_WAIT_QUERY */
    int64_t waits_by_kind[BK_EMU_WAIT_KINDS]; /* and the queries */
    int n_wait_sites;
    bk_emu_wait_site wait_sites[BK_EMU_ACCOUNT_WAIT_SITES]; /* in the order first seen */
    int64_t unlisted; /* launches and waits counted in the totals that found no room in
                         the tables (0 unless more than their sizes are distinct) */
} bk_emu_account;

/* Empties the account; later work is counted for step (-1: none). */
void bk_emu_account_reset(int64_t step);
/* The account so far (or as the last step's end left it) into *out. */
void bk_emu_account_get(bk_emu_account *out);
/* Ends the current step's account: later work is no longer counted until the
 * next reset, and under BK_EMU_COUNT the account is printed on stdout. */
void bk_emu_account_close(void);
/* The account as lines "emu account ..." on out (what `burst bench train
 * --count` reads; doc/KERNELS.md shows them), each call site of a wait named
 * by the function holding it and the offset in it, from the program's symbol
 * table (its address when the program has none). */
void bk_emu_account_print(FILE *out, const bk_emu_account *a);
/* Whether the products and the attention kernels on tensor cores are counted
 * without being run (BK_EMU_COUNT=skip, or bk_emu_account_set_skip(1)). */
int bk_emu_account_skipping(void);
void bk_emu_account_set_skip(int on);

#ifdef __cplusplus
}

namespace bk_emu
{
/* What a launcher declares of its next launch on this thread. */
struct footprint {
    int64_t read_bytes, written_bytes, flops;
    int declared;   /* 0: nothing was declared */
    int arithmetic; /* 1: a kernel that BK_EMU_COUNT=skip does not run */
};
/* Declares the next launch's footprint (BK_FOOTPRINT). */
void declare_footprint(int64_t read_bytes, int64_t written_bytes, int64_t flops, int arithmetic);
/* The footprint declared since the last launch, cleared (a launch takes it
 * first, so that one refused before it runs leaves nothing to the next). */
footprint take_footprint(void);
/* A launch of the kernel called name with its footprint. */
void account_launch(const char *name, const footprint &fp);
/* A copy of bytes in direction dir (BK_COPY_*). */
void account_copy(int dir, size_t bytes);
/* A host wait of the kind, in entry point entry called from caller. */
void account_wait(bk_emu_wait_kind kind, const char *entry, const void *caller);
} // namespace bk_emu
#endif

#endif
