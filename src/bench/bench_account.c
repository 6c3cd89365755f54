/* bench_account.c: reading and printing the emulated device's account of a
 * step (bench_account.h). The lines are emu/simt/simt_account.cc's format,
 * "emu account step=N key=value ...", "emu account kernel ... name=NAME",
 * "emu account wait count=N kind=K entry=E caller=C"; the kernels are
 * grouped into classes by their names here, so that a table says where the
 * bytes and launches go (GEMMs, attention, rounding, norms, ...). */
#include "src/bench/bench_account.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- reading */

/* The value of " key=" in line (0 when absent). */
static int64_t field(const char *line, const char *key)
{
    char pattern[40];
    snprintf(pattern, sizeof pattern, " %s=", key);
    const char *at = strstr(line, pattern);
    return at ? strtoll(at + strlen(pattern), NULL, 10) : 0;
}

/* The text of " key=" up to the next space (or the end when last) into buf. */
static void text_field(const char *line, const char *key, int last, char *buf, size_t len)
{
    char pattern[40];
    snprintf(pattern, sizeof pattern, " %s=", key);
    const char *at = strstr(line, pattern);
    buf[0] = '\0';
    if (!at) return;
    at += strlen(pattern);
    size_t n = last ? strcspn(at, "\n") : strcspn(at, " \n");
    snprintf(buf, len, "%.*s", (int)n, at);
}

static void read_step(bench_account *a, const char *line)
{
    memset(a, 0, sizeof *a);
    a->seen = 1;
    a->step = field(line, "step");
    a->undeclared = field(line, "undeclared");
    a->total = (bench_account_cost){field(line, "launches"), field(line, "read"),
                                    field(line, "written"), field(line, "flops")};
    static const char *const dirs[3] = {"h2d", "d2h", "d2d"};
    for (int d = 0; d < 3; d++) {
        char bytes[16];
        snprintf(bytes, sizeof bytes, "%s_bytes", dirs[d]);
        a->copies[d] = field(line, dirs[d]);
        a->copy_bytes[d] = field(line, bytes);
    }
    a->waits = field(line, "waits");
    a->queries = field(line, "queries");
}

static void read_kernel(bench_account *a, const char *line)
{
    if (a->n_kernels == BENCH_ACCOUNT_KERNELS) return;
    bench_account_kernel *k = &a->kernels[a->n_kernels++];
    text_field(line, "name", 1, k->name, sizeof k->name);
    k->cost = (bench_account_cost){field(line, "launches"), field(line, "read"),
                                   field(line, "written"), field(line, "flops")};
}

static void read_wait(bench_account *a, const char *line)
{
    if (a->n_sites == BENCH_ACCOUNT_SITES) return;
    bench_account_site *s = &a->sites[a->n_sites++];
    s->count = field(line, "count");
    text_field(line, "kind", 0, s->kind, sizeof s->kind);
    text_field(line, "entry", 0, s->entry, sizeof s->entry);
    text_field(line, "caller", 0, s->caller, sizeof s->caller);
}

void bench_account_read(bench_account *a, const char *line)
{
    static const char prefix[] = "[0] emu account ";
    if (strncmp(line, prefix, sizeof prefix - 1) != 0) return;
    const char *body = line + sizeof prefix - 2; /* from the space before the first key */
    if (strncmp(body, " step=", 6) == 0)
        read_step(a, body);
    else if (a->seen && strncmp(body, " kernel ", 8) == 0)
        read_kernel(a, body + 7);
    else if (a->seen && strncmp(body, " wait ", 6) == 0)
        read_wait(a, body + 5);
}

/* ---------------------------------------------------------------- classes */

/* The classes of kernels, by the start of their names; the last takes the
 * rest. */
static const struct {
    const char *prefix, *name;
} classes[] = {
    {"cublasLtMatmul", "GEMM (the cuBLASLt model)"},
    {"bk_attn_fwd_kernel", "attention forward tiles"},
    {"bk_attn_bwd_", "attention backward tiles"},
    {"bk_attn_", "attention state (init, finalize, delta, merge)"},
    {"bk_round_bf16", "rounding to bf16"},
    {"bk_widen_bf16", "widening from bf16"},
    {"bk_rmsnorm_", "RMSNorm"},
    {"bk_rope", "RoPE"},
    {"bk_swiglu", "SwiGLU"},
    {"bk_cross_entropy", "cross-entropy"},
    {"bk_embedding", "embedding"},
    {"bk_adamw", "AdamW"},
    {"bk_sqnorm", "gradient norm"},
    {"bk_count_outside", "token and label checks"},
    {"", "fill, axpy, scale"},
};
enum { N_CLASSES = sizeof classes / sizeof classes[0] };

static int class_of(const char *kernel)
{
    for (int c = 0; c < N_CLASSES - 1; c++)
        if (strncmp(kernel, classes[c].prefix, strlen(classes[c].prefix)) == 0) return c;
    return N_CLASSES - 1;
}

static void add_cost(bench_account_cost *into, const bench_account_cost *c, int sign)
{
    into->launches += sign * c->launches;
    into->read += sign * c->read;
    into->written += sign * c->written;
    into->flops += sign * c->flops;
}

/* by[N_CLASSES] = the account's costs by class. */
static void costs_by_class(const bench_account *a, bench_account_cost *by)
{
    memset(by, 0, N_CLASSES * sizeof *by);
    for (int i = 0; i < a->n_kernels; i++)
        add_cost(&by[class_of(a->kernels[i].name)], &a->kernels[i].cost, 1);
}

/* ---------------------------------------------------------------- printing */

static void cost_header(const char *first)
{
    printf("| %s | launches | read B/token | written B/token | GEMM FLOP/token |\n", first);
    printf("| --- | ---: | ---: | ---: | ---: |\n");
}

static void cost_row(const char *name, const bench_account_cost *c, double tokens, double per)
{
    printf("| %s | %.6g | %.0f | %.0f | %.4g |\n", name, (double)c->launches / per,
           (double)c->read / per / tokens, (double)c->written / per / tokens,
           (double)c->flops / per / tokens);
}

static void print_classes(const bench_account_cost *by, const bench_account_cost *all,
                          double tokens, double per)
{
    cost_header("class of kernels");
    for (int c = 0; c < N_CLASSES; c++)
        if (by[c].launches != 0) cost_row(classes[c].name, &by[c], tokens, per);
    cost_row("all", all, tokens, per);
}

static void print_waits(const bench_account *a)
{
    printf("\nhost waits %lld (event queries %lld), by call site:\n\n", (long long)a->waits,
           (long long)a->queries);
    printf("| count | kind | entry point | called from |\n| ---: | --- | --- | --- |\n");
    for (int i = 0; i < a->n_sites; i++)
        printf("| %lld | %s | %s | %s |\n", (long long)a->sites[i].count, a->sites[i].kind,
               a->sites[i].entry, a->sites[i].caller);
}

void bench_account_print(const bench_account *a, const char *title, double tokens)
{
    printf("\n#### %s\n\n", title);
    if (!a->seen) {
        printf("no account: rank 0 printed none (the device is not the emulator; the "
               "account is tests/train/burst_emu's)\n");
        return;
    }
    printf("step %lld on rank 0, %.0f tokens there; bytes are footprints (each operand "
           "counted once)%s\n\n",
           (long long)a->step, tokens, a->undeclared ? ", some launches declared none" : "");
    bench_account_cost by[N_CLASSES];
    costs_by_class(a, by);
    print_classes(by, &a->total, tokens, 1);
    printf("\n");
    cost_header("kernel");
    for (int i = 0; i < a->n_kernels; i++)
        cost_row(a->kernels[i].name, &a->kernels[i].cost, tokens, 1);
    printf("\ncopies: host to device %lld (%lld B), device to host %lld (%lld B), device to "
           "device %lld (%lld B)\n",
           (long long)a->copies[0], (long long)a->copy_bytes[0], (long long)a->copies[1],
           (long long)a->copy_bytes[1], (long long)a->copies[2], (long long)a->copy_bytes[2]);
    print_waits(a);
}

/* The count of the site of a with b's kind, entry and caller; 0 when none. */
static int64_t same_site(const bench_account *a, const bench_account_site *b)
{
    for (int i = 0; i < a->n_sites; i++) {
        const bench_account_site *s = &a->sites[i];
        if (!strcmp(s->kind, b->kind) && !strcmp(s->entry, b->entry) &&
            !strcmp(s->caller, b->caller))
            return s->count;
    }
    return 0;
}

void bench_account_print_growth(const bench_account *a, int layers_a, const bench_account *b,
                                int layers_b, double tokens)
{
    printf("\n#### What one layer adds: (%d layers - %d) / %d, per token\n\n", layers_b, layers_a,
           layers_b - layers_a);
    if (!a->seen || !b->seen) {
        printf("no account of one of the runs\n");
        return;
    }
    bench_account_cost by_a[N_CLASSES], by_b[N_CLASSES], all = b->total;
    costs_by_class(a, by_a);
    costs_by_class(b, by_b);
    for (int c = 0; c < N_CLASSES; c++) add_cost(&by_b[c], &by_a[c], -1);
    add_cost(&all, &a->total, -1);
    print_classes(by_b, &all, tokens, layers_b - layers_a);
    printf("\nhost waits a step: %lld at %d layers, %lld at %d; the call sites that grow:\n\n",
           (long long)a->waits, layers_a, (long long)b->waits, layers_b);
    printf("| at %d | at %d | kind | entry point | called from |\n| ---: | ---: | --- | --- | "
           "--- |\n",
           layers_a, layers_b);
    for (int i = 0; i < b->n_sites; i++) {
        int64_t was = same_site(a, &b->sites[i]);
        if (was != b->sites[i].count)
            printf("| %lld | %lld | %s | %s | %s |\n", (long long)was, (long long)b->sites[i].count,
                   b->sites[i].kind, b->sites[i].entry, b->sites[i].caller);
    }
}
