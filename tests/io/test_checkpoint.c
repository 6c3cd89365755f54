/* test_checkpoint.c: HDF5 training checkpoints (io/checkpoint.c). A
 * checkpoint written by two ranks (called one after the other here) reads back
 * bit for bit, configuration text and metadata included; keep_last prunes all
 * but the newest; a writer killed with SIGKILL before its commit, in the
 * middle of a shard, between the rename and the new `latest`, or at a random
 * moment of a loop of checkpoints leaves the checkpoint `latest` names whole,
 * and a later write of the same step over the debris succeeds; checkpoints of
 * another parameter count or world size, or another shard, are refused with
 * messages naming both values; a missing `latest` and truncated or garbage
 * files give clean errors naming the file (and HDF5 prints nothing); every
 * rank's shard reads back alone, and the parameters whole from all of them;
 * a checkpoint of weights only refuses to give moments, and one of format
 * version 1 (the parameters whole in model.h5) still reads. Every
 * test works in a fresh temporary directory, removed afterwards. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hdf5.h>

#include "io/checkpoint.h"
#include "io/h5util.h"
#include "tests/lib/check_main.h"
#include "tests/lib/testutil.h"
#include "util/rng.h"

static char tmpdir[256];
static char ckdir[320]; /* tmpdir/ckpt: the checkpoint directory (created by begin) */

static void setup(void)
{
    ck_assert_ptr_nonnull(test_make_tmpdir(tmpdir, sizeof tmpdir, "burst-ckpt"));
    snprintf(ckdir, sizeof ckdir, "%s/ckpt", tmpdir);
}

static void teardown(void)
{
    test_remove_tree(tmpdir);
}

static int exists(const char *fmt, const char *a, long long b)
{
    char path[1024];
    snprintf(path, sizeof path, fmt, a, b);
    struct stat st;
    return lstat(path, &st) == 0;
}

/* Deterministic float bit patterns (never NaN) with -0, a denormal and huge
 * values among them, different for every (step, salt). */
static void fill(float *x, int64_t n, int64_t step, uint32_t salt)
{
    uint64_t s = bu_splitmix64(((uint64_t)step << 32) ^ salt); /* unrelated streams */
    for (int64_t i = 0; i < n; i++) {
        uint32_t bits = (uint32_t)(bu_rng_next(&s) >> 32);
        if (((bits >> 23) & 0xff) == 0xff) bits &= ~(1u << 23); /* no Inf/NaN */
        if (i == 1) bits = 0x80000000u;                         /* -0.0 */
        if (i == 2) bits = 0x00000001u;                         /* smallest denormal */
        memcpy(&x[i], &bits, sizeof bits);
    }
}

static uint64_t rng_of(int64_t step)
{
    return 0xfedcba9876543210ull ^ (uint64_t)step;
}

/* The configuration text of a step: a few KB (more than any small buffer). */
static char *config_of(int64_t step)
{
    size_t cap = 12000;
    char *c = malloc(cap);
    ck_assert_ptr_nonnull(c);
    size_t n = (size_t)snprintf(c, cap, "# step %lld\n[model]\nd_model = 64\n", (long long)step);
    for (int i = 0; n + 64 < cap; i++)
        n += (size_t)snprintf(c + n, cap - n, "key_%04d = value %d ; comment\n", i, i * 7);
    return c;
}

/* Writes a complete checkpoint of step as `world` ranks (one after the other)
 * and commits it; the contents are fill(step, salt). */
static void write_ckpt(int64_t step, int world, int64_t n, int keep_last, uint32_t salt)
{
    char err[512] = "";
    float *p = malloc((size_t)n * sizeof *p), *m = malloc((size_t)n * sizeof *m),
          *v = malloc((size_t)n * sizeof *v);
    ck_assert(p && m && v);
    fill(p, n, step, salt);
    fill(m, n, step, salt + 1);
    fill(v, n, step, salt + 2);
    char *config = config_of(step);
    io_ckpt_meta meta = {.step = step,
                         .sample_position = step * 8 + 3,
                         .rng_state = rng_of(step),
                         .world_size = world,
                         .n_params = n,
                         .config_text = config};
    ck_assert_msg(io_checkpoint_begin(ckdir, step, err, sizeof err) == 0, "%s", err);
    for (int r = 0; r < world; r++) {
        int64_t b = n * r / world, e = n * (r + 1) / world;
        ck_assert_msg(io_checkpoint_write_rank(ckdir, step, r, &meta, b, e - b, p + b, m + b, v + b,
                                               err, sizeof err) == 0,
                      "%s", err);
    }
    ck_assert_msg(io_checkpoint_commit(ckdir, step, keep_last, err, sizeof err) == 0, "%s", err);
    free(config);
    free(p);
    free(m);
    free(v);
}

/* Reads checkpoint step back and checks it equals what write_ckpt wrote. */
static void check_ckpt(int64_t step, int world, int64_t n, uint32_t salt)
{
    char err[512] = "";
    float *p = malloc((size_t)n * sizeof *p), *q = malloc((size_t)n * sizeof *q);
    float *m = malloc((size_t)n * sizeof *m), *v = malloc((size_t)n * sizeof *v);
    ck_assert(p && q && m && v);
    io_ckpt_meta expect = {.world_size = world, .n_params = n}, meta;
    memset(&meta, 0, sizeof meta);
    ck_assert_msg(io_checkpoint_read_model(ckdir, step, &expect, &meta, p, err, sizeof err) == 0,
                  "%s", err);
    ck_assert_int_eq(meta.step, step);
    ck_assert_int_eq(meta.sample_position, step * 8 + 3);
    ck_assert_uint_eq(meta.rng_state, rng_of(step));
    ck_assert_int_eq(meta.world_size, world);
    ck_assert_int_eq(meta.n_params, n);
    char *config = config_of(step);
    ck_assert_ptr_nonnull(meta.config_text);
    ck_assert_str_eq(meta.config_text, config);
    free((char *)meta.config_text);
    free(config);
    fill(q, n, step, salt);
    ck_assert_msg(memcmp(p, q, (size_t)n * sizeof *p) == 0, "params of step %lld differ",
                  (long long)step);
    /* each rank's shard alone: the same parameters */
    memset(p, 0xff, (size_t)n * sizeof *p);
    for (int r = 0; r < world; r++) {
        int64_t b = n * r / world, e = n * (r + 1) / world;
        ck_assert_msg(io_checkpoint_read_rank(ckdir, step, r, b, e - b, p + b, m + b, v + b, err,
                                              sizeof err) == 0,
                      "%s", err);
    }
    ck_assert_msg(memcmp(p, q, (size_t)n * sizeof *p) == 0, "shards of step %lld differ",
                  (long long)step);
    fill(p, n, step, salt + 1);
    fill(q, n, step, salt + 2);
    ck_assert_msg(memcmp(m, p, (size_t)n * sizeof *m) == 0, "m of step %lld differs",
                  (long long)step);
    ck_assert_msg(memcmp(v, q, (size_t)n * sizeof *v) == 0, "v of step %lld differs",
                  (long long)step);
    free(p);
    free(q);
    free(m);
    free(v);
}

static int64_t latest(void)
{
    char err[512] = "";
    int64_t s = io_checkpoint_latest(ckdir, err, sizeof err);
    ck_assert_msg(s >= 0, "%s", err);
    return s;
}

START_TEST(round_trip_is_bitwise)
{
    /* More than one 1M-element chunk, split unevenly over 2 ranks. */
    const int64_t n = (1 << 20) + 1237;
    write_ckpt(20, 2, n, 0, 5);
    ck_assert_int_eq(latest(), 20);
    ck_assert(exists("%s/step-%lld/model.h5", ckdir, 20));
    ck_assert(exists("%s/step-%lld/shard-1.h5", ckdir, 20));
    ck_assert(!exists("%s/step-%lld/optim-1.h5", ckdir, 20));
    ck_assert(!exists("%s/step-%lld.tmp", ckdir, 20));
    ck_assert(!exists("%s/latest.tmp%.0lld", ckdir, 0));
    check_ckpt(20, 2, n, 5);

    /* The latest file is one line naming the step directory. */
    char path[1024], line[64] = "";
    snprintf(path, sizeof path, "%s/latest", ckdir);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
    fclose(f);
    ck_assert_str_eq(line, "step-20\n");

    /* Metadata only (params NULL), with no expectations. */
    char err[512] = "";
    io_ckpt_meta meta;
    ck_assert_msg(io_checkpoint_read_model(ckdir, 20, NULL, &meta, NULL, err, sizeof err) == 0,
                  "%s", err);
    ck_assert_int_eq(meta.n_params, n);
    ck_assert_int_eq(meta.world_size, 2);
    free((char *)meta.config_text);
}
END_TEST

START_TEST(one_rank_and_small_shards)
{
    /* World 3 over 2 parameters: one rank holds an empty shard. */
    write_ckpt(0, 3, 2, 1, 9);
    ck_assert_int_eq(latest(), 0);
    check_ckpt(0, 3, 2, 9);
    write_ckpt(1, 1, 7, 1, 9);
    ck_assert_int_eq(latest(), 1);
    check_ckpt(1, 1, 7, 9);
    ck_assert(!exists("%s/step-%lld", ckdir, 0));
}
END_TEST

/* The names in ckdir, sorted, joined by spaces. */
static void list_dir(char *out, size_t len)
{
    struct dirent **names = NULL;
    int n = scandir(ckdir, &names, NULL, alphasort);
    ck_assert_int_ge(n, 0);
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (names[i]->d_name[0] != '.') {
            if (out[0]) strncat(out, " ", len - strlen(out) - 1);
            strncat(out, names[i]->d_name, len - strlen(out) - 1);
        }
        free(names[i]);
    }
    free(names);
}

START_TEST(keep_last_keeps_the_newest)
{
    char names[512];
    for (int64_t s = 10; s <= 40; s += 10) write_ckpt(s, 2, 100, 2, 1);
    list_dir(names, sizeof names);
    ck_assert_str_eq(names, "latest step-30 step-40");
    ck_assert_int_eq(latest(), 40);
    check_ckpt(40, 2, 100, 1);
    check_ckpt(30, 2, 100, 1);

    /* keep_last <= 0 keeps everything. */
    write_ckpt(50, 2, 100, 0, 1);
    write_ckpt(60, 2, 100, -1, 1);
    list_dir(names, sizeof names);
    ck_assert_str_eq(names, "latest step-30 step-40 step-50 step-60");

    /* The checkpoint just written survives even when it is not the newest
     * (a run resumed from an earlier step); others' files are left alone. */
    char path[1024];
    snprintf(path, sizeof path, "%s/notes.txt", ckdir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    write_ckpt(5, 2, 100, 1, 1);
    list_dir(names, sizeof names);
    ck_assert_str_eq(names, "latest notes.txt step-5 step-60");
    ck_assert_int_eq(latest(), 5);
    check_ckpt(5, 2, 100, 1);
}
END_TEST

/* Runs fn in a child process that must die of SIGKILL. */
static void run_killed_child(void (*fn)(void))
{
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        fn();
        _exit(0); /* not reached when fn kills itself */
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
                  "child did not die of SIGKILL (status %d)", status);
}

static const int64_t N_ATOM = 5000;

/* In a child: step 2 written by both ranks, not committed (exits 2, 3, 4 when
 * that fails). */
static void write_step_2(void)
{
    char err[512];
    float *p = calloc((size_t)N_ATOM, sizeof *p);
    if (!p) _exit(2);
    io_ckpt_meta meta = {.step = 2, .world_size = 2, .n_params = N_ATOM, .config_text = "x"};
    if (io_checkpoint_begin(ckdir, 2, err, sizeof err) != 0) _exit(3);
    int64_t h = N_ATOM / 2;
    if (io_checkpoint_write_rank(ckdir, 2, 1, NULL, h, N_ATOM - h, p + h, p + h, p + h, err,
                                 sizeof err) != 0 ||
        io_checkpoint_write_rank(ckdir, 2, 0, &meta, 0, h, p, p, p, err, sizeof err) != 0)
        _exit(4);
    free(p);
}

static void die_before_commit(void)
{
    write_step_2();
    raise(SIGKILL);
}

static void die_inside_a_shard(void)
{
    char err[512], path[1024];
    float *p = calloc((size_t)N_ATOM, sizeof *p);
    if (!p) _exit(2);
    if (io_checkpoint_begin(ckdir, 2, err, sizeof err) != 0) _exit(3);
    int64_t h = N_ATOM / 2;
    if (io_checkpoint_write_rank(ckdir, 2, 1, NULL, h, N_ATOM - h, p + h, p + h, p + h, err,
                                 sizeof err) != 0)
        _exit(4);
    /* What rank 0 does, cut short: the file exists, half of /params is
     * written and flushed, the file is never closed. */
    snprintf(path, sizeof path, "%s/step-2.tmp/shard-0.h5", ckdir);
    hid_t f = io_h5_create(path, err, sizeof err);
    hsize_t dims[1] = {(hsize_t)N_ATOM}, start[1] = {0}, count[1] = {(hsize_t)h};
    hid_t space = H5Screate_simple(1, dims, NULL);
    hid_t d = H5Dcreate2(f, "params", H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hid_t mem = H5Screate_simple(1, count, NULL);
    H5Sselect_hyperslab(space, H5S_SELECT_SET, start, NULL, count, NULL);
    if (f < 0 || d < 0 || H5Dwrite(d, H5T_NATIVE_FLOAT, mem, space, H5P_DEFAULT, p) < 0) _exit(5);
    H5Fflush(f, H5F_SCOPE_GLOBAL);
    raise(SIGKILL);
}

/* Commit cut short after the step directory got its name: latest.tmp holds
 * half a line and latest is untouched. */
static void die_inside_commit(void)
{
    char from[1024], to[1024];
    write_step_2();
    snprintf(from, sizeof from, "%s/step-2.tmp", ckdir);
    snprintf(to, sizeof to, "%s/step-2", ckdir);
    if (rename(from, to) != 0) _exit(5);
    snprintf(to, sizeof to, "%s/latest.tmp", ckdir);
    FILE *f = fopen(to, "w");
    if (!f) _exit(6);
    fputs("ste", f);
    fflush(f);
    raise(SIGKILL);
}

START_TEST(killed_writer_leaves_previous_checkpoint)
{
    write_ckpt(1, 2, N_ATOM, 3, 7);

    run_killed_child(die_before_commit);
    ck_assert(exists("%s/step-%lld.tmp/shard-1.h5", ckdir, 2));
    ck_assert(!exists("%s/step-%lld", ckdir, 2));
    ck_assert_int_eq(latest(), 1);
    check_ckpt(1, 2, N_ATOM, 7);

    run_killed_child(die_inside_a_shard);
    ck_assert(exists("%s/step-%lld.tmp/shard-0.h5", ckdir, 2));
    ck_assert_int_eq(latest(), 1);
    check_ckpt(1, 2, N_ATOM, 7);

    /* A later successful write of step 2 over the stale temporary directory. */
    write_ckpt(2, 2, N_ATOM, 3, 8);
    ck_assert_int_eq(latest(), 2);
    ck_assert(!exists("%s/step-%lld.tmp", ckdir, 2));
    check_ckpt(2, 2, N_ATOM, 8);
    check_ckpt(1, 2, N_ATOM, 7);
}
END_TEST

START_TEST(killed_commit_then_same_step_again)
{
    write_ckpt(1, 2, N_ATOM, 3, 7);
    run_killed_child(die_inside_commit);
    ck_assert(exists("%s/step-%lld", ckdir, 2));
    ck_assert(exists("%s/latest.tmp%.0lld", ckdir, 0));
    ck_assert_int_eq(latest(), 1);
    check_ckpt(1, 2, N_ATOM, 7);

    /* Step 2 again: the orphaned step-2 is replaced, latest names it. */
    write_ckpt(2, 2, N_ATOM, 3, 8);
    ck_assert_int_eq(latest(), 2);
    check_ckpt(2, 2, N_ATOM, 8);
    char names[512];
    list_dir(names, sizeof names);
    ck_assert_str_eq(names, "latest step-1 step-2");
}
END_TEST

START_TEST(same_step_written_again)
{
    char names[512], from[1024], to[1024];
    write_ckpt(3, 2, N_ATOM, 2, 1);
    write_ckpt(4, 2, N_ATOM, 2, 1);
    /* The step latest names, written again (end of a run resumed from it). */
    write_ckpt(4, 2, N_ATOM, 2, 2);
    ck_assert_int_eq(latest(), 4);
    check_ckpt(4, 2, N_ATOM, 2);
    list_dir(names, sizeof names);
    ck_assert_str_eq(names, "latest step-3 step-4");

    /* Where the directories cannot be exchanged, a crash between moving the
     * old one aside and renaming the new one leaves step-4.old: readers use
     * it, and the next commit cleans it up. */
    snprintf(from, sizeof from, "%s/step-4", ckdir);
    snprintf(to, sizeof to, "%s/step-4.old", ckdir);
    ck_assert_int_eq(rename(from, to), 0);
    ck_assert_int_eq(latest(), 4);
    check_ckpt(4, 2, N_ATOM, 2);
    write_ckpt(5, 2, N_ATOM, 2, 1);
    list_dir(names, sizeof names);
    ck_assert_str_eq(names, "latest step-3 step-5");
}
END_TEST

/* A child writing checkpoint after checkpoint, killed at a random moment:
 * whatever latest names is whole and holds the data of its step. */
static const int64_t N_LOOP = 100000;

START_TEST(killed_at_a_random_moment)
{
    write_ckpt(1, 2, N_LOOP, 2, 3);
    srand((unsigned)time(NULL) ^ (unsigned)getpid());
    for (int round = 0; round < 10; round++) {
        int64_t first = latest() + 1;
        fflush(NULL);
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            for (int64_t s = first;; s++) write_ckpt(s, 2, N_LOOP, 2, 3);
        }
        usleep((useconds_t)(20000 + rand() % 60000));
        kill(pid, SIGKILL);
        int status = 0;
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert_msg(WIFSIGNALED(status), "writer ended by itself (status %d)", status);
        int64_t s = latest();
        ck_assert_int_ge(s, first - 1);
        check_ckpt(s, 2, N_LOOP, 3);
    }
    /* The next commit removes the debris of the killed writers. */
    int64_t next = latest() + 1;
    write_ckpt(next, 2, N_LOOP, 2, 3);
    char names[512];
    list_dir(names, sizeof names);
    ck_assert_msg(!strstr(names, ".tmp") && !strstr(names, ".old"), "debris left: %s", names);
    ck_assert(exists("%s/step-%lld", ckdir, next - 1));
    ck_assert(exists("%s/step-%lld", ckdir, next));
    check_ckpt(next, 2, N_LOOP, 3);
}
END_TEST

START_TEST(mismatches_are_refused)
{
    write_ckpt(20, 4, 115008, 0, 2);
    char err[512] = "", want[1024];
    float *p = malloc(230016 * sizeof *p);
    ck_assert_ptr_nonnull(p);
    io_ckpt_meta meta;

    io_ckpt_meta expect = {.n_params = 230016, .world_size = 4};
    ck_assert_int_eq(io_checkpoint_read_model(ckdir, 20, &expect, &meta, p, err, sizeof err), -1);
    snprintf(want, sizeof want, "checkpoint %s/step-20 has 115008 parameters, this run 230016",
             ckdir);
    ck_assert_str_eq(err, want);

    expect = (io_ckpt_meta){.n_params = 115008, .world_size = 2};
    ck_assert_int_eq(io_checkpoint_read_model(ckdir, 20, &expect, &meta, p, err, sizeof err), -1);
    snprintf(want, sizeof want,
             "checkpoint %s/step-20 was written by 4 ranks, this run has 2 (no resharding)", ckdir);
    ck_assert_str_eq(err, want);

    /* Zero fields are not checked. */
    expect = (io_ckpt_meta){0};
    ck_assert_msg(io_checkpoint_read_model(ckdir, 20, &expect, &meta, p, err, sizeof err) == 0,
                  "%s", err);
    free((char *)meta.config_text);

    /* Another shard of the optimizer state, another rank's file, no such step. */
    ck_assert_int_eq(io_checkpoint_read_rank(ckdir, 20, 1, 28000, 28752, p, p, p, err, sizeof err),
                     -1);
    ck_assert_ptr_nonnull(strstr(err, "shard-1.h5"));
    ck_assert_ptr_nonnull(strstr(err, "[28752, 57504)"));
    ck_assert_ptr_nonnull(strstr(err, "[28000, 56752)"));
    ck_assert_int_eq(io_checkpoint_read_rank(ckdir, 20, 4, 0, 10, p, p, p, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "shard-4.h5"));
    ck_assert_int_eq(io_checkpoint_read_model(ckdir, 21, NULL, &meta, p, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "step-21/model.h5"));
    free(p);
}
END_TEST

START_TEST(missing_or_bad_latest)
{
    char err[512] = "", want[1024];
    ck_assert_int_eq(io_checkpoint_latest(ckdir, err, sizeof err), -1);
    snprintf(want, sizeof want, "no checkpoint in %s", ckdir);
    ck_assert_str_eq(err, want);

    ck_assert_int_eq(mkdir(ckdir, 0777), 0);
    err[0] = '\0';
    ck_assert_int_eq(io_checkpoint_latest(ckdir, err, sizeof err), -1);
    ck_assert_str_eq(err, want);

    const char *bad[] = {"", "step-\n", "step-x\n", "steps-3\n", "step-3 4\n"};
    char path[1024];
    snprintf(path, sizeof path, "%s/latest", ckdir);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        FILE *f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        fputs(bad[i], f);
        fclose(f);
        ck_assert_int_eq(io_checkpoint_latest(ckdir, err, sizeof err), -1);
        ck_assert_msg(strstr(err, path) != NULL, "'%s' gave: %s", bad[i], err);
    }
    /* The bare number is accepted too. */
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("17\n", f);
    fclose(f);
    ck_assert_int_eq(latest(), 17);
}
END_TEST

static void truncate_file(const char *path, off_t size)
{
    ck_assert_int_eq(truncate(path, size), 0);
}

/* Reads step 1's model and rank 1's shard and expects a failure naming file. */
static void expect_clean_error(int model, const char *file)
{
    char err[512] = "";
    float *p = malloc((size_t)N_ATOM * sizeof *p);
    ck_assert_ptr_nonnull(p);
    io_ckpt_meta meta, expect = {.n_params = N_ATOM, .world_size = 2};
    int rc = model ? io_checkpoint_read_model(ckdir, 1, &expect, &meta, p, err, sizeof err)
                   : io_checkpoint_read_rank(ckdir, 1, 1, N_ATOM / 2, N_ATOM - N_ATOM / 2, p, p, p,
                                             err, sizeof err);
    ck_assert_int_eq(rc, -1);
    ck_assert_msg(strstr(err, file) != NULL, "error does not name %s: %s", file, err);
    ck_assert_int_eq(H5Eget_num(H5E_DEFAULT), 0); /* nothing left on HDF5's error stack */
    free(p);
}

START_TEST(corrupt_files_give_clean_errors)
{
    /* HDF5 must print nothing: stderr goes to a file that must stay empty. */
    char errfile[512];
    snprintf(errfile, sizeof errfile, "%s/stderr.txt", tmpdir);
    fflush(stderr);
    int saved = dup(2);
    int fd = open(errfile, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert_int_ge(fd, 0);
    dup2(fd, 2);
    close(fd);

    write_ckpt(1, 2, N_ATOM, 0, 4);
    char model[1024], optim[1024];
    snprintf(model, sizeof model, "%s/step-1/model.h5", ckdir);
    snprintf(optim, sizeof optim, "%s/step-1/shard-1.h5", ckdir);
    struct stat st;
    ck_assert_int_eq(stat(model, &st), 0);

    truncate_file(model, st.st_size / 2);
    expect_clean_error(1, model);
    truncate_file(model, 100);
    expect_clean_error(1, model);
    truncate_file(model, 0);
    expect_clean_error(1, model);
    FILE *f = fopen(model, "w");
    ck_assert_ptr_nonnull(f);
    fputs("this is not an HDF5 file\n", f);
    fclose(f);
    expect_clean_error(1, model);
    unlink(model);
    expect_clean_error(1, model);

    ck_assert_int_eq(stat(optim, &st), 0);
    truncate_file(optim, st.st_size - 4000);
    expect_clean_error(0, optim);

    /* An HDF5 file that is not a checkpoint. */
    char err[512];
    hid_t h = io_h5_create(model, err, sizeof err);
    ck_assert_msg(h >= 0, "%s", err);
    H5Fclose(h);
    expect_clean_error(1, model);
    float x = 0;
    io_ckpt_meta meta;
    ck_assert_int_eq(io_checkpoint_read_model(ckdir, 1, NULL, &meta, &x, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "not a burstengine checkpoint"));

    /* Phases out of order fail cleanly too. */
    ck_assert_int_eq(io_checkpoint_commit(ckdir, 9, 0, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "step-9.tmp"));
    ck_assert_int_eq(io_checkpoint_write_rank(ckdir, 9, 1, NULL, 0, 1, &x, &x, &x, err, sizeof err),
                     -1);
    ck_assert_ptr_nonnull(strstr(err, "step-9.tmp"));

    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ck_assert_int_eq(stat(errfile, &st), 0);
    ck_assert_msg(st.st_size == 0, "something was printed on stderr (%s)", errfile);
}
END_TEST

/* A 1-D float dataset of a file built by hand. */
static void h5_floats(hid_t f, const char *name, const float *x, int64_t n)
{
    hsize_t dims[1] = {(hsize_t)n};
    hid_t space = H5Screate_simple(1, dims, NULL);
    hid_t d = H5Dcreate2(f, name, H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    ck_assert(d >= 0 && H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x) >= 0);
    ck_assert(H5Dclose(d) >= 0 && H5Sclose(space) >= 0);
}

/* Step 5 of 2 ranks in format version 1, built by hand: the parameters [n]
 * whole in model.h5, each rank's moments in optim-R.h5, its halves. */
static void write_version_1(int64_t n, const float *p, const float *m, const float *v)
{
    char dir[1024], path[1200], err[512] = "";
    snprintf(dir, sizeof dir, "%s/step-5", ckdir);
    ck_assert(mkdir(ckdir, 0777) == 0 && mkdir(dir, 0777) == 0);
    io_h5_quiet();
    snprintf(path, sizeof path, "%s/model.h5", dir);
    hid_t f = io_h5_create(path, err, sizeof err);
    ck_assert_msg(f >= 0, "%s", err);
    int bad =
        io_h5_write_format(f, path, "burstengine-checkpoint", 1, err, sizeof err) ||
        io_h5_write_attr_int(f, path, "step", H5T_NATIVE_INT64, 5, err, sizeof err) ||
        io_h5_write_attr_int(f, path, "sample_position", H5T_NATIVE_INT64, 43, err, sizeof err) ||
        io_h5_write_attr_u64(f, path, "rng_state", rng_of(5), err, sizeof err) ||
        io_h5_write_attr_int(f, path, "world_size", H5T_NATIVE_INT, 2, err, sizeof err) ||
        io_h5_write_attr_int(f, path, "n_params", H5T_NATIVE_INT64, n, err, sizeof err) ||
        io_h5_write_string_dataset(f, path, "config", "[model]\n", err, sizeof err);
    ck_assert_msg(!bad, "%s", err);
    h5_floats(f, "params", p, n);
    ck_assert(H5Fclose(f) >= 0);
    for (int r = 0; r < 2; r++) {
        int64_t b = n * r / 2, e = n * (r + 1) / 2;
        snprintf(path, sizeof path, "%s/optim-%d.h5", dir, r);
        f = io_h5_create(path, err, sizeof err);
        ck_assert_msg(f >= 0, "%s", err);
        bad = io_h5_write_format(f, path, "burstengine-checkpoint", 1, err, sizeof err) ||
              io_h5_write_attr_int(f, path, "rank", H5T_NATIVE_INT, r, err, sizeof err) ||
              io_h5_write_attr_int(f, path, "shard_begin", H5T_NATIVE_INT64, b, err, sizeof err) ||
              io_h5_write_attr_int(f, path, "shard_len", H5T_NATIVE_INT64, e - b, err, sizeof err);
        ck_assert_msg(!bad, "%s", err);
        h5_floats(f, "m", m + b, e - b);
        h5_floats(f, "v", v + b, e - b);
        ck_assert(H5Fclose(f) >= 0);
    }
    snprintf(path, sizeof path, "%s/latest", ckdir);
    FILE *l = fopen(path, "w");
    ck_assert(l && fputs("step-5\n", l) >= 0 && fclose(l) == 0);
}

START_TEST(version_1_is_read)
{
    enum { N = 1001 };
    static float p[N], m[N], v[N], got[N], gm[N], gv[N];
    fill(p, N, 5, 1), fill(m, N, 5, 2), fill(v, N, 5, 3);
    write_version_1(N, p, m, v);
    char err[512] = "";
    io_ckpt_meta meta, expect = {.n_params = N, .world_size = 2};
    ck_assert_msg(io_checkpoint_read_model(ckdir, latest(), &expect, &meta, got, err, sizeof err) ==
                      0,
                  "%s", err);
    ck_assert_int_eq(meta.sample_position, 43);
    ck_assert_int_eq(meta.weights_only, 0);
    ck_assert_str_eq(meta.config_text, "[model]\n");
    free((char *)meta.config_text);
    ck_assert(memcmp(got, p, sizeof p) == 0);
    memset(got, 0, sizeof got);
    ck_assert_msg(
        io_checkpoint_read_rank(ckdir, 5, 1, N / 2, N - N / 2, got, gm, gv, err, sizeof err) == 0,
        "%s", err);
    ck_assert(memcmp(got, p + N / 2, (N - N / 2) * sizeof *p) == 0);
    ck_assert(memcmp(gm, m + N / 2, (N - N / 2) * sizeof *m) == 0);
    ck_assert(memcmp(gv, v + N / 2, (N - N / 2) * sizeof *v) == 0);
}
END_TEST

START_TEST(weights_only_and_missing_shards)
{
    enum { N = 777 };
    static float p[N], got[N];
    fill(p, N, 0, 4);
    char err[512] = "", path[1024];
    io_ckpt_meta meta = {.world_size = 1, .n_params = N, .config_text = "", .weights_only = 1};
    ck_assert_msg(io_checkpoint_begin(ckdir, 0, err, sizeof err) == 0 &&
                      io_checkpoint_write_rank(ckdir, 0, 0, &meta, 0, N, p, NULL, NULL, err,
                                               sizeof err) == 0 &&
                      io_checkpoint_commit(ckdir, 0, 0, err, sizeof err) == 0,
                  "%s", err);
    ck_assert_msg(io_checkpoint_read_model(ckdir, 0, NULL, &meta, got, err, sizeof err) == 0, "%s",
                  err);
    free((char *)meta.config_text);
    ck_assert_int_eq(meta.weights_only, 1);
    ck_assert(memcmp(got, p, sizeof p) == 0);
    ck_assert_msg(io_checkpoint_read_rank(ckdir, 0, 0, 0, N, got, NULL, NULL, err, sizeof err) == 0,
                  "%s", err);
    ck_assert_int_eq(io_checkpoint_read_rank(ckdir, 0, 0, 0, N, got, got, got, err, sizeof err),
                     -1);
    ck_assert_msg(strstr(err, "shard-0.h5 holds weights only, no optimizer state"), "%s", err);

    /* a checkpoint missing a rank's shard: its parameters cannot be whole */
    write_ckpt(1, 3, N_ATOM, 0, 6);
    snprintf(path, sizeof path, "%s/step-1/shard-2.h5", ckdir);
    ck_assert_int_eq(unlink(path), 0);
    float *full = malloc((size_t)N_ATOM * sizeof *full);
    ck_assert_ptr_nonnull(full);
    ck_assert_int_eq(io_checkpoint_read_model(ckdir, 1, NULL, &meta, full, err, sizeof err), -1);
    ck_assert_msg(strstr(err, path), "%s", err);
    ck_assert_msg(io_checkpoint_read_model(ckdir, 1, NULL, &meta, NULL, err, sizeof err) == 0, "%s",
                  err);
    free((char *)meta.config_text);
    free(full);
}
END_TEST

/* Any range of the parameters reads back, across the shards of another world
 * (3 ranks here) and from a checkpoint of version 1; past the end, or from a
 * checkpoint of another parameter count than expected, is refused. */
START_TEST(any_range_of_the_parameters_reads_back)
{
    enum { N = 1000 };
    static float p[N], got[N + 1];
    fill(p, N, 7, 11);
    write_ckpt(7, 3, N, 0, 11); /* shards [0, 333), [333, 666), [666, 1000) */
    char err[512] = "";
    const int64_t ranges[][2] = {{0, N},   {0, 1},   {332, 2}, {333, 333}, {100, 800},
                                 {999, 1}, {500, 0}, {0, 0},   {666, 334}};
    for (size_t i = 0; i < sizeof ranges / sizeof *ranges; i++) {
        int64_t b = ranges[i][0], c = ranges[i][1];
        memset(got, 0xff, sizeof got);
        ck_assert_msg(io_checkpoint_read_params(ckdir, 7, NULL, b, c, got, err, sizeof err) == 0,
                      "[%lld, +%lld): %s", (long long)b, (long long)c, err);
        ck_assert_msg(memcmp(got, p + b, (size_t)c * sizeof *p) == 0, "[%lld, +%lld) differs",
                      (long long)b, (long long)c);
        uint32_t past;
        memcpy(&past, &got[c], sizeof past);
        ck_assert_msg(past == 0xffffffffu, "[%lld, +%lld) wrote past its end", (long long)b,
                      (long long)c);
    }
    ck_assert_int_eq(io_checkpoint_read_params(ckdir, 7, NULL, 990, 11, got, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "no parameters [990, 1001) among its 1000"), "%s", err);
    io_ckpt_meta other = {.n_params = 999};
    ck_assert_int_eq(io_checkpoint_read_params(ckdir, 7, &other, 0, 1, got, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "has 1000 parameters, this run 999"), "%s", err);

    static float m[N], v[N];
    fill(m, N, 5, 2), fill(v, N, 5, 3), fill(p, N, 5, 1);
    test_remove_tree(ckdir);
    write_version_1(N, p, m, v);
    ck_assert_msg(io_checkpoint_read_params(ckdir, 5, NULL, 250, 600, got, err, sizeof err) == 0,
                  "%s", err);
    ck_assert(memcmp(got, p + 250, 600 * sizeof *p) == 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("checkpoint");
    TCase *tc = check_tcase(s, "checkpoint", 120);
    tcase_add_checked_fixture(tc, setup, teardown);
    check_add_tests(tc, round_trip_is_bitwise, one_rank_and_small_shards,
                    keep_last_keeps_the_newest, killed_writer_leaves_previous_checkpoint,
                    killed_commit_then_same_step_again, same_step_written_again,
                    killed_at_a_random_moment, mismatches_are_refused, missing_or_bad_latest,
                    corrupt_files_give_clean_errors, version_1_is_read,
                    weights_only_and_missing_shards, any_range_of_the_parameters_reads_back);
    return check_run(s);
}
