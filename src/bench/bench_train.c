/* bench_train.c: `burst bench train`. Runs short `burst train` jobs (a few
 * steps of the tiny and small presets at several sequence lengths on 1 and 2
 * ranks) as children under `burst run`, and prints what a user of the engine
 * wants to know before a long run: tokens/s, achieved GFLOP/s as a fraction of
 * the sgemm rate the child measured in the same run, the exposed communication
 * of the rings, on a device the MFU against a stated bf16 peak, the peak memory
 * of rank 0 against the engine's own estimate; then, for one configuration, how
 * the peak moves with the fused LM head and the checkpoint fraction. Timing
 * comes from the child's JSON-lines metrics with step 1 (warm-up: first
 * touches, page faults, plan setup) left out; memory from its final "done:"
 * line, or on a device from its last arena report (the largest peak of any
 * rank's device arena: device memory is what bounds a run there). With
 * --count, on the emulated device (tests/train/burst_emu), each run's last
 * step is also accounted for: launches, bytes, products, copies and host
 * waits, read from what rank 0 prints (src/bench/bench_account.h). */
#define _GNU_SOURCE
#include "config.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/bench/bench.h"
#include "src/bench/bench_account.h"
#include "src/bench/relaunch.h"
#include "src/train/config.h"
#include "util/parse.h"
#include "util/clock.h"
#include "util/exit_codes.h"
#include "util/options.h"

#define MAX_LIST 8
#define MiB      (1024.0 * 1024.0)

/* One child run: its settings and what was read back. */
typedef struct {
    const char *model, *device, *kernel; /* kernel: [attention] kernel */
    int ranks, steps, fused, keep_layers, zero;
    int layers; /* [model] layers; 0: the preset's */
    long long seq;
    double ckpt;
    int ok, measured;             /* steps counted in the timing */
    double sgemm, seconds, flop;  /* sgemm GFLOP/s; sums over measured steps (s, GFLOP) */
    double exposed;               /* sum over measured steps of the exposed communication (s) */
    double zero_s;                /* sum over measured steps of ZeRO's reductions and gathers (s) */
    double peak, estimate, ratio; /* bytes; ratio = peak / estimate */
    bench_account account;        /* rank 0's account of its last step (--count) */
} run;

/* The MFU's reference: one GPU's dense bf16 peak (TFLOP/s; 0: no MFU) and the
 * GPUs a run's ranks share. */
typedef struct {
    double peak_tflops;
    int gpus;
} mfu_ref;

static double to_bytes(double v, const char *unit)
{
    if (strncmp(unit, "KiB", 3) == 0) return v * 1024.0;
    if (strncmp(unit, "MiB", 3) == 0) return v * MiB;
    if (strncmp(unit, "GiB", 3) == 0) return v * MiB * 1024.0;
    if (strncmp(unit, "TiB", 3) == 0) return v * MiB * MiB;
    return v;
}

/* The number after "key": in a metrics line; 0 when absent. */
static int metric(const char *line, const char *key, double *value)
{
    char quoted[32];
    snprintf(quoted, sizeof quoted, "\"%s\": ", key);
    const char *at = strstr(line, quoted);
    return at && sscanf(at + strlen(quoted), "%lf", value) == 1;
}

/* Reads the metrics file: sums seconds, FLOPs and exposed communication over
 * steps 2..N (or step 1 alone). */
static void read_metrics(const char *path, run *r)
{
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[1024];
    run first = {0};
    while (fgets(line, sizeof line, f)) {
        double step = 0, seconds = 0, gflops = 0, exposed = 0, reduce = 0, gather = 0;
        if (!metric(line, "step", &step) || !metric(line, "seconds", &seconds) ||
            !metric(line, "gflops", &gflops) || !metric(line, "exposed_s", &exposed) ||
            !metric(line, "reduce_s", &reduce) || !metric(line, "gather_s", &gather))
            continue;
        run *into = step == 1 ? &first : r;
        into->seconds += seconds;
        into->flop += gflops * seconds;
        into->exposed += exposed;
        into->zero_s += reduce + gather;
        into->measured++;
    }
    fclose(f);
    if (r->measured == 0 && first.measured == 1) {
        r->seconds = first.seconds;
        r->flop = first.flop;
        r->exposed = first.exposed;
        r->zero_s = first.zero_s;
        r->measured = 1;
    }
}

/* A device run's arena report at the end ("device arena at the end: peak P
 * bytes ... estimated E bytes (..., ratio R)"): 1 with arena = {P, E, R}. */
static int device_arena_line(const char *body, double arena[3])
{
    const char *est = strstr(body, "estimated ");
    double v[3];
    if (sscanf(body, "device arena at the end: peak %lf bytes", &v[0]) != 1 || !est ||
        sscanf(est, "estimated %lf bytes (%*[^,], ratio %lf)", &v[1], &v[2]) != 2)
        return 0;
    memcpy(arena, v, sizeof v);
    return 1;
}

static int launch(const char *self, const run *cfg, run *r, int threads, int verbose)
{
    *r = *cfg;
    char metrics[] = "/tmp/burst-bench-train-XXXXXX";
    int fd = mkstemp(metrics);
    if (fd < 0) return -1;
    close(fd);
    int t = threads > 0 ? threads : (int)(sysconf(_SC_NPROCESSORS_ONLN) / cfg->ranks);
    if (t < 1) t = 1;
    char model_sets[96] = "", layers[32] = ""; /* what the run changes of the preset */
    if (cfg->layers > 0) snprintf(layers, sizeof layers, " --set model.layers=%d", cfg->layers);
    if (cfg->seq > 65536)
        snprintf(model_sets, sizeof model_sets, " --set model.max_seq=%lld%s", cfg->seq, layers);
    else
        snprintf(model_sets, sizeof model_sets, "%s", layers);
    char device[96];
    snprintf(device, sizeof device, " --set train.device=%s --set attention.kernel=%s", cfg->device,
             cfg->kernel);
    FILE *p = bench_relaunch(
        self, cfg->ranks, t, verbose,
        "train --set model.preset=%s%s%s --set data.seq_len=%lld --set data.task=counting "
        "--set parallel.dp=1 --set parallel.cp=%d --set train.steps=%d "
        "--set train.warmup_steps=1 --set train.log_every=1 --set memory.attn_kept_fraction=%g "
        "--set memory.keep_layers=%s --set memory.fused_head=%d --set parallel.zero=%d "
        "--set transport.timeout=3600 --set train.metrics=%s",
        cfg->model, model_sets, device, cfg->seq, cfg->ranks, cfg->steps, cfg->ckpt,
        cfg->keep_layers ? "true" : "false", cfg->fused, cfg->zero, metrics);
    if (!p) {
        unlink(metrics);
        return -1;
    }
    char line[2048];
    int done = 0;
    double arena[3] = {0, 0, 0}; /* on a device: peak, estimate (bytes), ratio */
    while (fgets(line, sizeof line, p)) {
        if (verbose) fputs(line, stderr);
        bench_account_read(&r->account, line);
        char *body = bench_rank_line(line);
        const char *peak = strstr(body, "peak host memory rank 0 ");
        char pu[8], eu[8];
        double pv, ev;
        if (sscanf(body, "sgemm per rank: %lf", &r->sgemm) == 1) continue;
        const char *dev_sgemm = strstr(body, "its sgemm: ");
        if (strncmp(body, "device: ", 8) == 0 && dev_sgemm &&
            sscanf(dev_sgemm, "its sgemm: %lf", &r->sgemm) == 1)
            continue;
        if (device_arena_line(body, arena)) continue;
        if (strncmp(body, "done:", 5) == 0 && peak &&
            sscanf(peak, "peak host memory rank 0 %lf %7s (estimated %lf %7[^,], ratio %lf)", &pv,
                   pu, &ev, eu, &r->ratio) == 5) {
            r->peak = to_bytes(pv, pu);
            r->estimate = to_bytes(ev, eu);
            done = 1;
        }
    }
    int status = pclose(p);
    if (arena[0] > 0) r->peak = arena[0], r->estimate = arena[1], r->ratio = arena[2];
    read_metrics(metrics, r);
    unlink(metrics);
    r->ok = status == 0 && done && r->measured > 0;
    return r->ok ? 0 : -1;
}

static const char *seq_name(long long seq, char *buf, size_t len)
{
    if (seq % 1024 == 0)
        snprintf(buf, len, "%lldK", seq / 1024);
    else
        snprintf(buf, len, "%lld", seq);
    return buf;
}

static void print_run_header(int on_device)
{
    printf(
        "| model | P | seq | s/step | tokens/s | GFLOP/s | sgemm x P | fraction | exposed s/step "
        "| ZeRO s/step | MFU | %s | estimate | peak/est |\n",
        on_device ? "device peak" : "peak rank 0");
    printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- "
           "|\n");
}

static void print_run(const run *r, const mfu_ref *m)
{
    char s[16], p[32], e[32], mfu[16] = "-";
    if (!r->ok) {
        printf("| %s | %d | %s | failed | | | | | | | | | | |\n", r->model, r->ranks,
               seq_name(r->seq, s, sizeof s));
        return;
    }
    double step_s = r->seconds / r->measured, gflops = r->flop / r->seconds;
    double ref = r->sgemm * r->ranks;
    int gpus = r->ranks < m->gpus ? r->ranks : m->gpus;
    if (m->peak_tflops > 0)
        snprintf(mfu, sizeof mfu, "%.1f%%", 100.0 * gflops / (gpus * m->peak_tflops * 1e3));
    printf("| %s | %d | %s | %.2f | %.0f | %.2f | %.1f | %.2f | %.3f | %.3f | %s | %s | %s | %.2f "
           "|\n",
           r->model, r->ranks, seq_name(r->seq, s, sizeof s), step_s, (double)r->seq / step_s,
           gflops, ref, ref > 0 ? gflops / ref : 0, r->exposed / r->measured,
           r->zero_s / r->measured, mfu, bu_human_bytes(r->peak, p, sizeof p),
           bu_human_bytes(r->estimate, e, sizeof e), r->ratio);
}

/* Parses "a,b,c" into values; K suffix multiplies by 1024. Returns the count or -1. */
static int parse_list(const char *arg, long long *out, long long lo, long long hi)
{
    char *list = strdup(arg), *save = NULL;
    int n = 0;
    for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char *end;
        long long v = strtoll(t, &end, 10);
        if (*end == 'K' || *end == 'k') v *= 1024, end++;
        if (*end != '\0' || v < lo || v > hi || n == MAX_LIST) {
            free(list);
            return -1;
        }
        out[n++] = v;
    }
    free(list);
    return n;
}

/* Model presets: names [model] preset knows, copied into names[names_len]
 * (which out[] then points into). */
static int parse_models(const char *arg, char *names, size_t names_len, const char **out)
{
    char *save = NULL;
    int n = 0;
    if (snprintf(names, names_len, "%s", arg) >= (int)names_len) return -1;
    for (char *t = strtok_r(names, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        train_config scratch;
        train_config_default(&scratch);
        if (strcmp(t, "custom") == 0 || train_config_preset(&scratch, t) != 0 || n == MAX_LIST)
            return -1;
        out[n++] = t;
    }
    return n;
}

/* What the command line sets. */
typedef struct {
    const char *models[MAX_LIST], *mem_model, *device, *kernel;
    char model_names[256], mem_model_name[64];
    long long ranks[MAX_LIST], seqs[MAX_LIST], layers[MAX_LIST], mem_seq;
    int n_models, n_ranks, n_seqs, n_layers, steps, threads, verbose, quick, mem_ranks, keep_layers,
        zero;
    int count, skip_arithmetic; /* --count, --skip-arithmetic */
    double ckpt;
    mfu_ref mfu;
} bench_train_opts;

static int set_kernel(void *o, const char *v)
{
    if (strcmp(v, "auto") && strcmp(v, "cudnn") && strcmp(v, "burst")) return -1;
    ((bench_train_opts *)o)->kernel = v;
    return 0;
}

static int set_models(void *o, const char *v)
{
    bench_train_opts *b = o;
    return (b->n_models = parse_models(v, b->model_names, sizeof b->model_names, b->models)) > 0
               ? 0
               : -1;
}

static int set_ranks(void *o, const char *v)
{
    bench_train_opts *b = o;
    return (b->n_ranks = parse_list(v, b->ranks, 1, 64)) > 0 ? 0 : -1;
}

static int set_seqs(void *o, const char *v)
{
    bench_train_opts *b = o;
    return (b->n_seqs = parse_list(v, b->seqs, 16, 1LL << 24)) > 0 ? 0 : -1;
}

static int set_layers(void *o, const char *v)
{
    bench_train_opts *b = o;
    return (b->n_layers = parse_list(v, b->layers, 1, 1024)) > 0 ? 0 : -1;
}

static int set_mem_model(void *o, const char *v)
{
    bench_train_opts *b = o;
    const char *m[MAX_LIST];
    if (parse_models(v, b->mem_model_name, sizeof b->mem_model_name, m) != 1) return -1;
    b->mem_model = m[0];
    return 0;
}

static int set_mem_seq(void *o, const char *v)
{
    return parse_list(v, &((bench_train_opts *)o)->mem_seq, 0, 1LL << 24) == 1 ? 0 : -1;
}

static int set_device(void *o, const char *v)
{
    if (strcmp(v, "cpu") != 0 && strcmp(v, "cuda") != 0) return -1;
    ((bench_train_opts *)o)->device = v;
    return 0;
}

static int set_peak(void *o, const char *v)
{
    char *end;
    double t = strtod(v, &end);
    if (end == v || *end != '\0' || !(t > 0 && t < 1e6)) return -1;
    ((bench_train_opts *)o)->mfu.peak_tflops = t;
    return 0;
}

#define OPT(field) offsetof(bench_train_opts, field)
static const bu_option options[] = {
    {"--models", "LIST", BU_OPT_CUSTOM, 0, 0, 0, set_models,
     "model presets (train's [model] preset: tiny, small ~23M,\n"
     "300m, 1b, 7b, ...) (default tiny,small)"},
    {"--ranks", "LIST", BU_OPT_CUSTOM, 0, 0, 0, set_ranks,
     "rank counts P, each rank one CP rank (default 1,2)"},
    {"--seq", "LIST", BU_OPT_CUSTOM, 0, 0, 0, set_seqs,
     "sequence lengths in tokens, applied to every model; K suffix\n"
     "= 1024 (default: tiny 8K,16K,32K; small 8K)"},
    {"--layers", "LIST", BU_OPT_CUSTOM, 0, 0, 0, set_layers,
     "[model] layers of every run, in place of the presets' (default:\n"
     "the preset's)"},
    {"--steps", "N", BU_OPT_INT, OPT(steps), 1, 1000, NULL, "steps per run (default 3)"},
    {"--mem-model", "M", BU_OPT_CUSTOM, 0, 0, 0, set_mem_model,
     "model of the memory table (default small)"},
    {"--mem-ranks", "P", BU_OPT_INT, OPT(mem_ranks), 1, 64, NULL,
     "rank count of the memory table (default 2)"},
    {"--mem-seq", "N", BU_OPT_CUSTOM, 0, 0, 0, set_mem_seq,
     "sequence length of the memory table (default 8K; 0 = no table)"},
    {"--device", "D", BU_OPT_CUSTOM, 0, 0, 0, set_device,
     "cpu, or cuda: every rank trains on a GPU ([train] device;\n"
     "ranks beyond the node's GPUs share them) (default cpu)"},
    {"--peak-tflops", "T", BU_OPT_CUSTOM, 0, 0, 0, set_peak,
     "the dense bf16 peak of one GPU in TFLOP/s (H100/H200 SXM:\n"
     "989); adds MFU = achieved / (min(P, G) x T) (default: no MFU)"},
    {"--gpus", "G", BU_OPT_INT, OPT(mfu.gpus), 1, 1024, NULL,
     "GPUs the ranks of a run share, for the MFU (default 1)"},
    {"--attn-kept-fraction", "F", BU_OPT_DOUBLE, OPT(ckpt), 0, 1, NULL,
     "[memory] attn_kept_fraction of the throughput runs: the share of\n"
     "attention outputs kept rather than recomputed in the backward,\n"
     "0..1 (default 0.5; 1 recomputes no attention)"},
    {"--ckpt-fraction", "F", BU_OPT_DOUBLE, OPT(ckpt), 0, 1, NULL,
     "the former name of --attn-kept-fraction"},
    {"--keep-layers", NULL, BU_OPT_FLAG, OPT(keep_layers), 0, 0, NULL,
     "[memory] keep_layers in the throughput runs: every layer's\n"
     "intermediates kept, none recomputed but the attention outputs\n"
     "that --attn-kept-fraction does not keep"},
    {"--kernel", "K", BU_OPT_CUSTOM, 0, 0, 0, set_kernel,
     "[attention] kernel of every run: auto, cudnn (cuDNN's fused SDPA)\n"
     "or burst (ours) (default auto)"},
    {"--zero", "S", BU_OPT_INT, OPT(zero), 1, 3, NULL,
     "[parallel] zero of the throughput runs: 1 the optimizer's state\n"
     "sharded, 2 the gradients too, 3 the parameters too (default 1)"},
    {"--threads", "N", BU_OPT_INT, OPT(threads), 1, 1024, NULL,
     "OpenMP/BLAS threads per rank (default: online cores / P)"},
    {"--count", NULL, BU_OPT_FLAG, OPT(count), 0, 0, NULL,
     "on the emulated device (tests/train/burst_emu, --device cuda):\n"
     "after the table, each run's last step accounted for on rank 0:\n"
     "launches, bytes and GEMM FLOPs by class of kernel per token,\n"
     "copies, host waits by call site; with two --layers, what one\n"
     "layer adds (BK_EMU_COUNT, emu/simt/simt_account.h)"},
    {"--skip-arithmetic", NULL, BU_OPT_FLAG, OPT(skip_arithmetic), 0, 0, NULL,
     "with --count: the emulator counts the GEMMs and the attention\n"
     "tiles without running them (BK_EMU_COUNT=skip; the same\n"
     "account, in a fraction of the time; the losses mean nothing)"},
    {"--quick", NULL, BU_OPT_FLAG, OPT(quick), 0, 0, NULL,
     "tiny only, 8K, 2 steps, memory table on tiny (under a minute)"},
    {"--verbose", NULL, BU_OPT_FLAG, OPT(verbose), 0, 0, NULL,
     "copy the children's commands and output to stderr"},
};
#undef OPT
enum { N_OPTIONS = sizeof options / sizeof options[0] };

static void usage(FILE *out)
{
    fprintf(
        out,
        "usage: burst bench train [OPTIONS]\n\n"
        "Runs `burst run -n P -- burst train` for each model, rank count and sequence\n"
        "length (synthetic counting task, N steps, causal zigzag ring, fused head,\n"
        "checkpoint fraction F) and prints, per run: tokens/s and achieved GFLOP/s\n"
        "averaged over steps 2..N (step 1 is warm-up; with N = 1 it is step 1), the\n"
        "fraction of the sgemm rate (the child measures sgemm on rank 0 with the same\n"
        "threads in the same run, or on its device; for P ranks the reference is P times\n"
        "that rate), the exposed communication of the attention rings per step (the most\n"
        "any rank waited for a transfer), with --peak-tflops the MFU, and rank 0's peak\n"
        "resident memory (on a device: the largest peak of any rank's device arena)\n"
        "with the ratio to the engine's estimate. Then a\n"
        "memory table: one configuration with the fused head on and off and checkpoint\n"
        "fraction 0, 0.5 and 1 (one step each, so its time includes warm-up). Rows are\n"
        "printed as each run finishes; a failed run prints 'failed' and the exit status is 1.\n\n");
    bu_options_print(out, options, N_OPTIONS, 19);
    fprintf(out,
            "\nTime: the default run took 12 minutes on a quiet 2-core machine and would take\n"
            "30 or more under heavy load. Attention work grows with the square of the length;\n"
            "one step of small takes about 0.5 minute at 8K quiet and an estimated 2 at 16K,\n"
            "4 at 32K and 15 at 64K (several times that under load), so the small model\n"
            "beyond 8K and 64K for either model are opt-in via --seq (tiny at 64K: an\n"
            "estimated 1 minute per step quiet). The unfused head materialises seq/P x vocab\n"
            "x 4 bytes of logits per rank (small: 1 GiB per rank at 64K on 2 ranks).\n");
}

/* The runs of the throughput table, kept for their accounts (--count). */
typedef struct {
    run *runs;
    int n;
} run_list;

static void keep_run(run_list *kept, const run *r)
{
    run *grown = realloc(kept->runs, (size_t)(kept->n + 1) * sizeof *grown);
    if (!grown) return; /* the account of this run is not printed */
    kept->runs = grown;
    kept->runs[kept->n++] = *r;
}

static void run_title(const run *r, char *buf, size_t len)
{
    char s[16], layers[32] = "the preset's layers";
    if (r->layers > 0)
        snprintf(layers, sizeof layers, "%d layer%s", r->layers, r->layers > 1 ? "s" : "");
    snprintf(buf, len, "%s widths, %s, P=%d, %s tokens", r->model, layers, r->ranks,
             seq_name(r->seq, s, sizeof s));
}

/* Each kept run's account, then what one layer adds: every pair of runs of
 * the same model, P and length, from fewer layers to more. */
static void print_accounts(const run_list *kept)
{
    printf("\n### The device step's account (rank 0's last step; --count)\n");
    for (int i = 0; i < kept->n; i++) {
        char title[128];
        run_title(&kept->runs[i], title, sizeof title);
        bench_account_print(&kept->runs[i].account, title,
                            (double)kept->runs[i].seq / kept->runs[i].ranks);
    }
    for (int i = 0; i < kept->n; i++) {
        const run *a = &kept->runs[i];
        for (int j = i + 1; j < kept->n; j++) {
            const run *b = &kept->runs[j];
            if (strcmp(a->model, b->model) != 0 || a->ranks != b->ranks || a->seq != b->seq ||
                a->layers <= 0 || b->layers <= a->layers)
                continue;
            char title[128];
            run_title(a, title, sizeof title);
            printf("\n%s:\n", title);
            bench_account_print_growth(&a->account, a->layers, &b->account, b->layers,
                                       (double)a->seq / a->ranks);
        }
    }
}

/* One row of the throughput table: the run of cfg, printed (and kept when
 * counting). Returns 1 when it failed. */
static int throughput_row(const bench_train_opts *o, const char *self, const run *cfg,
                          run_list *kept)
{
    run *r = malloc(sizeof *r); /* an account is too large for the stack's comfort */
    if (!r) return 1;
    int failed = launch(self, cfg, r, o->threads, o->verbose) != 0;
    print_run(r, &o->mfu);
    fflush(stdout);
    if (o->count) keep_run(kept, r);
    free(r);
    return failed;
}

/* The throughput table: a row per model x rank count x length x layers,
 * printed as it finishes, then the accounts (--count). Returns the runs that
 * failed. */
static int throughput_rows(const bench_train_opts *o, const char *self)
{
    int failures = 0;
    printf("Throughput and memory (%d steps per run; timing over steps %s; causal zigzag, fused "
           "head, checkpoint fraction %g%s, ZeRO stage %d, attention kernel %s)\n\n",
           o->steps, o->steps > 1 ? "2..N" : "1", o->ckpt, o->keep_layers ? ", layers kept" : "",
           o->zero, o->kernel);
    int on_device = strcmp(o->device, "cpu") != 0;
    print_run_header(on_device);
    fflush(stdout);
    run_list kept = {NULL, 0};
    static const long long preset_layers[] = {0};
    const long long *layers = o->n_layers ? o->layers : preset_layers;
    for (int m = 0; m < o->n_models; m++) {
        /* Default lengths per model: the small model past 8K is opt-in (see --help). */
        static const long long tiny_default[] = {8192, 16384, 32768}, small_default[] = {8192};
        int is_tiny = strcmp(o->models[m], "tiny") == 0;
        const long long *list = o->n_seqs ? o->seqs : is_tiny ? tiny_default : small_default;
        int count = o->n_seqs ? o->n_seqs : is_tiny ? 3 : 1;
        for (int p = 0; p < o->n_ranks; p++)
            for (int s = 0; s < count; s++)
                for (int l = 0; l < (o->n_layers ? o->n_layers : 1); l++) {
                    run cfg = {.model = o->models[m],
                               .device = o->device,
                               .kernel = o->kernel,
                               .ranks = (int)o->ranks[p],
                               .steps = o->steps,
                               .fused = 1,
                               .seq = list[s],
                               .ckpt = o->ckpt,
                               .keep_layers = o->keep_layers,
                               .zero = o->zero,
                               .layers = (int)layers[l]};
                    failures += throughput_row(o, self, &cfg, &kept);
                }
    }
    printf(
        "\nfraction = achieved GFLOP/s / (P x the sgemm rate rank 0 measured in the same run%s); "
        "exposed = the most any rank waited for the rings' transfers per step; ZeRO = the most "
        "any rank spent in ZeRO's gradient reductions and parameter gathers per step, starting "
        "and waiting for them (their exposed time); %s; estimate = "
        "the engine's memory report%s.\n",
        on_device ? " on its device" : "",
        on_device ? "device peak = the largest peak of any rank's device arena"
                  : "peak = rank 0's maximum resident set",
        on_device ? " of the parts on the device" : "");
    if (o->count) print_accounts(&kept);
    free(kept.runs);
    return failures;
}

/* The memory table: fused head on and off x checkpoint fraction 0, 0.5, 1, one
 * step each. Returns the runs that failed. */
static int memory_table(const bench_train_opts *o, const char *self)
{
    static const double fractions[] = {0, 0.5, 1};
    int failures = 0;
    char name[16];
    printf("\nPeak memory, %s, P=%d, seq %s (1 step each)\n\n", o->mem_model, o->mem_ranks,
           seq_name(o->mem_seq, name, sizeof name));
    printf("| head | attn_kept_fraction | s/step | peak rank 0 | estimate | peak/est |\n");
    printf("| --- | --- | --- | --- | --- | --- |\n");
    fflush(stdout);
    for (int f = 1; f >= 0; f--) {
        for (int k = 0; k < 3; k++) {
            run cfg = {.model = o->mem_model,
                       .device = o->device,
                       .kernel = o->kernel,
                       .ranks = o->mem_ranks,
                       .steps = 1,
                       .fused = f,
                       .seq = o->mem_seq,
                       .ckpt = fractions[k],
                       .zero = o->zero};
            run r;
            char p[32], e[32];
            if (launch(self, &cfg, &r, o->threads, o->verbose) != 0) failures++;
            if (r.ok)
                printf("| %s | %g | %.2f | %s | %s | %.2f |\n", f ? "fused" : "unfused",
                       fractions[k], r.seconds, bu_human_bytes(r.peak, p, sizeof p),
                       bu_human_bytes(r.estimate, e, sizeof e), r.ratio);
            else
                printf("| %s | %g | failed | | | |\n", f ? "fused" : "unfused", fractions[k]);
            fflush(stdout);
        }
    }
    return failures;
}

int bench_train(int argc, char **argv)
{
    bench_train_opts o = {.models = {"tiny", "small"},
                          .mem_model = "small",
                          .device = "cpu",
                          .kernel = "auto",
                          .ranks = {1, 2},
                          .mem_seq = 8192,
                          .mem_ranks = 2,
                          .n_models = 2,
                          .n_ranks = 2,
                          .steps = 3,
                          .ckpt = 0.5,
                          .zero = 1,
                          .mfu = {0.0, 1}};
    int parsed = bu_options_parse("burst bench train", options, N_OPTIONS, argc, argv, &o, NULL);
    if (parsed == 1) {
        usage(stdout);
        return 0;
    }
    if (parsed != 0) return EXIT_USAGE;
    if (o.quick) {
        o.models[0] = "tiny", o.n_models = 1;
        o.seqs[0] = 8192, o.n_seqs = 1;
        o.steps = 2;
        o.mem_model = "tiny";
    }

    if (o.skip_arithmetic && !o.count) {
        fprintf(stderr, "burst bench train: --skip-arithmetic needs --count\n");
        return EXIT_USAGE;
    }
    /* the ranks' emulated device prints its account of every step (simt_account.h) */
    if (o.count && setenv("BK_EMU_COUNT", o.skip_arithmetic ? "skip" : "1", 1) != 0)
        return EXIT_RUN_FAILURE;
    char self[4096];
    if (bench_self_path("burst bench train", self, sizeof self) != 0) return EXIT_RUN_FAILURE;
    double t_start = bu_now();
    int failures = throughput_rows(&o, self);
    if (o.mem_seq > 0) failures += memory_table(&o, self);
    printf("\ntotal time %.0f s\n", bu_now() - t_start);
    fflush(stdout);
    if (failures) fprintf(stderr, "burst bench train: %d run(s) failed\n", failures);
    return failures ? EXIT_RUN_FAILURE : 0;
}
