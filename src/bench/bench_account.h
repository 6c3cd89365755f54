/* bench_account.h: `burst bench train --count`: the emulated device's
 * account of a training step as the ranks print it (the "emu account" lines
 * of emu/simt/simt_account.h, printed under BK_EMU_COUNT by a program that
 * runs the emulator, tests/train/burst_emu), read from rank 0's output, and
 * printed by class of kernel per token, with the host waits by call site and
 * the growth per layer between two runs that differ in their layers only.
 * `burst` itself links no emulator: on a GPU no rank prints an account, and
 * the bench says so. */
#ifndef BURST_BENCH_ACCOUNT_H
#define BURST_BENCH_ACCOUNT_H

#include <stdint.h>

enum { BENCH_ACCOUNT_KERNELS = 64, BENCH_ACCOUNT_SITES = 48 };

/* What a set of launches cost: bytes are the launchers' footprints. */
typedef struct {
    int64_t launches, read, written, flops;
} bench_account_cost;

typedef struct {
    char name[64];
    bench_account_cost cost;
} bench_account_kernel;

/* Host waits (or event queries) of one kind through one entry point from one
 * caller, as printed ("copy", "bk_device_download", "add_losses+0x11a"). */
typedef struct {
    int64_t count;
    char kind[16], entry[64], caller[96];
} bench_account_site;

typedef struct {
    int seen; /* 1 once an account was read */
    int64_t step, undeclared;
    bench_account_cost total;
    int64_t copies[3], copy_bytes[3]; /* host to device, device to host, device to device */
    int64_t waits, queries;
    int n_kernels, n_sites;
    bench_account_kernel kernels[BENCH_ACCOUNT_KERNELS];
    bench_account_site sites[BENCH_ACCOUNT_SITES];
} bench_account;

/* One line of the ranks' output (with the "[R] " `burst run` puts first):
 * rank 0's account lines are kept, a step's first line replacing the account
 * of the step before, so that what remains is the last step's. */
void bench_account_read(bench_account *a, const char *line);
/* The account (title names the run), per token of the tokens rank 0 holds:
 * by class of kernel, the copies, the waits by call site. */
void bench_account_print(const bench_account *a, const char *title, double tokens);
/* (b - a) / (layers_b - layers_a) per token by class of kernel, and the host
 * waits of both: what one more layer adds to a step. */
void bench_account_print_growth(const bench_account *a, int layers_a, const bench_account *b,
                                int layers_b, double tokens);

#endif
