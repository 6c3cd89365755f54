/* profile.h: a device profile, the rates `burst plan time` prices a step
 * with, read from JSON files of rows (doc/TRAINING.md, "Device profiles"):
 *
 *   {"profile": "h100-sxm", "device": "...", "rows": [
 *     {"row": "gemm", "gflops": 610000, "measured": {"command": "...", "machine": "...",
 *                                                    "commit": "..."}},
 *     {"row": "attention", "pass": "forward", "d": 128, "mask": "causal", "block": 4096,
 *      "gflops": 72000, "measured": {...}},
 *     {"row": "link", "path": "inter", "gbps": 25, "latency_us": 5, "per_node": 4,
 *      "derived": "ConnectX-7 datasheet: 200 Gb/s per port"}, ...]}
 *
 * Every row says where its number comes from: "measured" (the command, the
 * machine and the commit) or "derived" (the datasheet or paper). A row the
 * price of a step needs and the profile lacks is an error naming it, never a
 * guess. Several files may make one profile (kernels and links measured
 * apart); a row given twice is an error naming both files.
 *
 * Rows and their keys (units: GFLOP/s, GB/s = 1e9 bytes/s, microseconds):
 *   peak         gflops                   dense peak of one device, for the MFU
 *   gemm         gflops                   matrix products (bf16 on a GPU, fp32 sgemm on a CPU)
 *   elementwise  gbps                     passes over memory (norms, RoPE, adds, AdamW)
 *   attention    pass d mask block gflops a block of `block` query rows against as many keys:
 *                                         pass forward|backward, mask full|causal, FLOPs
 *                                         counted as `burst bench kernels` counts them
 *   link         path gbps latency_us     path intra (between ranks of a node), inter (the
 *                [per_node]               network; per_node: links a node has, shared by
 *                                         its ranks' concurrent hops), host (device <->
 *                                         host copies, for collectives staged through it) */
#ifndef BURST_PLAN_PROFILE_H
#define BURST_PLAN_PROFILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum {
    PROFILE_PEAK = 0,
    PROFILE_GEMM,
    PROFILE_ELEMENTWISE,
    PROFILE_ATTENTION,
    PROFILE_LINK,
    PROFILE_ROW_KINDS
} profile_row_kind;

typedef enum {
    PROFILE_LINK_INTRA = 0,
    PROFILE_LINK_INTER,
    PROFILE_LINK_HOST,
    PROFILE_LINKS
} profile_link;

typedef struct {
    profile_row_kind kind;
    /* attention's key */
    int backward, d, causal;
    int64_t block;
    /* link's key */
    profile_link path;
    /* the values */
    double gflops, gbps, latency_us;
    int per_node;
    /* where it comes from */
    int measured;     /* 1 measured, 0 derived */
    char source[512]; /* measured: "command; machine; commit"; derived: the document */
    char file[256];   /* the file it was read from */
} profile_row;

typedef struct {
    char name[128]; /* the profiles' names, joined */
    char device[256];
    profile_row *rows;
    int n_rows;
} plan_profile;

/* Appends the rows of a profile file to p (zeroed the first time). 0, or -1
 * with err naming the file and the row. */
int plan_profile_load(plan_profile *p, const char *path, char *err, size_t err_len);
void plan_profile_free(plan_profile *p);

/* The row of each kind that has one key; NULL with err naming the row. */
const profile_row *plan_profile_get(const plan_profile *p, profile_row_kind kind, char *err,
                                    size_t err_len);
const profile_row *plan_profile_link(const plan_profile *p, profile_link path, char *err,
                                     size_t err_len);
/* The attention rate (GFLOP/s) for query blocks of `block` rows: the row of
 * that length, or between the two nearest lengths, log-linearly; a length
 * outside the rows' range, a head dim, pass or mask without rows is an error
 * naming the row wanted (-1). */
double plan_profile_attention(const plan_profile *p, int backward, int d, int causal, int64_t block,
                              char *err, size_t err_len);

const char *plan_profile_link_name(profile_link path);

/* Writing a profile: the header, rows, the end (each row after the first
 * gets its comma). source is "measured" rows' {"command", "machine",
 * "commit"}. */
typedef struct {
    FILE *out;
    int rows;
    char command[1024], machine[256], commit[64];
} profile_writer;
/* Opens path for writing (a temporary beside it, renamed at the end, so a
 * failed run leaves no partial profile). 0, or -1 with err. */
int profile_writer_open(profile_writer *w, const char *path, const char *name, const char *device,
                        const char *command, char *err, size_t err_len);
void profile_write_row(profile_writer *w, const profile_row *row);
/* An attention row (profile_row's key and rate) written. */
void profile_write_attention(profile_writer *w, int backward, int d, int causal, int64_t block,
                             double gflops);
/* The command a measured row names: OMP_NUM_THREADS when set, then prefix
 * and argv [argc] joined by spaces, into buf [len]. */
void profile_command_line(char *buf, size_t len, const char *prefix, int argc, char **argv);
/* Ends the file and puts it in place: 0, or -1 with err (then nothing is
 * left behind). With ok = 0 it only removes the temporary. */
int profile_writer_close(profile_writer *w, const char *path, int ok, char *err, size_t err_len);

#endif
