/* test_bench_device_emu.c: `burst bench kernels --device cuda` (the code of
 * src/bench/bench_kernels_device.c) runs to the end on the emulated device at
 * tiny sizes: every attention configuration on each kernel (ours, and cuDNN's
 * SDPA: the emulator's model of it) and every op gets a row with a
 * positive, finite rate, so a first run on a GPU does not find its first bug
 * there; with a profile writer it writes one kernel's attention rows as a
 * profile that loads back. The rates themselves mean nothing in the emulator
 * and are not checked. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/bench/bench.h"
#include "tests/kernels/dev_util.h"
#include "tests/lib/check_main.h"

/* Rows of out whose first word is `first` and whose numbers after the
 * configuration are all finite and positive. */
static int rows_with_rates(const char *out, const char *first, int skip_words)
{
    int n = 0;
    for (const char *line = out; *line;) {
        size_t len = strcspn(line, "\n");
        char row[256] = {0}, word[32];
        memcpy(row, line, len < sizeof row - 1 ? len : sizeof row - 1);
        line += len + (line[len] == '\n');
        if (sscanf(row, " %31s", word) != 1 || strcmp(word, first)) continue;
        const char *p = row;
        for (int w = 0; w < skip_words; w++) p += strspn(p, " "), p += strcspn(p, " ");
        int ok = 1, values = 0;
        char *end;
        for (double v = strtod(p, &end); end != p; p = end, v = strtod(p, &end), values++)
            ok &= isfinite(v) && v > 0;
        n += ok && values > 0;
    }
    return n;
}

START_TEST(device_bench_runs_every_row)
{
    bench_device_opts o = {.seqs = {96}, .n_seq = 1, .hq = 4, .only_d = 64, .only_mask = 1,
                           .gemm_n = 64, .op_bytes = 1 << 20, .ops = 1, .reps = 1, .min_ms = 0};
    char path[] = "/tmp/burst-bench-device-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    fflush(stdout);
    int saved = dup(STDOUT_FILENO);
    dup2(fd, STDOUT_FILENO);
    int rc = bench_kernels_device(&o);
    fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    char out[8192] = {0};
    ck_assert_int_ge(pread(fd, out, sizeof out - 1, 0), 0);
    close(fd);
    unlink(path);
    printf("%s", out);
    fflush(stdout);
    ck_assert_int_eq(rc, 0);
    /* causal, Hkv = 4 and 1, on each kernel: kernel mask seq d hkv, then five rates */
    ck_assert_int_eq(rows_with_rates(out, "burst", 5), 2);
    ck_assert_int_eq(rows_with_rates(out, "cudnn", 5), 2);
    const char *ops[] = {"copy", "rmsnorm", "rope", "swiglu", "embedding", "adamw",
                         "cross-entropy", "grad"};
    const int words[] = {2, 2, 2, 2, 2, 4, 1, 4}, expect[] = {1, 2, 1, 1, 1, 1, 1, 1};
    for (int i = 0; i < 8; i++)
        ck_assert_msg(rows_with_rates(out, ops[i], words[i]) == expect[i], "op rows of %s",
                      ops[i]);
}
END_TEST

/* --profile-out: one kernel's rows at Hkv = Hq, forward and backward, a
 * profile `burst plan time` reads back with their source. */
START_TEST(device_bench_writes_its_attention_rows)
{
    bench_device_opts o = {.seqs = {96},
                           .n_seq = 1,
                           .hq = 4,
                           .only_d = 64,
                           .only_mask = 1,
                           .kernels = BENCH_KERNEL_BURST,
                           .gemm_n = 64,
                           .reps = 1,
                           .min_ms = 0};
    char dir[] = "/tmp/burst-bench-profile-XXXXXX", path[64], err[512] = "";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/attention.json", dir);
    profile_writer w;
    ck_assert_int_eq(
        profile_writer_open(&w, path, "attention-burst", "emulator", "a test", err, sizeof err), 0);
    o.profile = &w;
    int rc = bench_kernels_device(&o);
    ck_assert_int_eq(profile_writer_close(&w, path, rc == 0, err, sizeof err), 0);
    ck_assert_int_eq(rc, 0);
    plan_profile p = {0};
    ck_assert_msg(plan_profile_load(&p, path, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(p.n_rows, 2); /* Hkv = 4 only: the forward and the backward */
    for (int pass = 0; pass < 2; pass++) {
        double rate = plan_profile_attention(&p, pass, 64, 1, 96, err, sizeof err);
        ck_assert_msg(rate > 0 && isfinite(rate), "%s", err);
    }
    ck_assert(p.rows[0].measured && strstr(p.rows[0].source, "a test"));
    plan_profile_free(&p);
    unlink(path);
    rmdir(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("bench_device");
    check_add_tests(check_tcase(s, "emulator", 600), device_bench_runs_every_row,
                    device_bench_writes_its_attention_rows);
    return dev_test_main(s);
}
