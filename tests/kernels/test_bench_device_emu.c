/* test_bench_device_emu.c: `burst bench kernels --device cuda` (the code of
 * src/bench/bench_kernels_device.c) runs to the end on the emulated device at
 * tiny sizes: every attention configuration on each kernel (ours, and cuDNN's
 * SDPA: the emulator's model of it) and every op gets a row with a
 * positive, finite rate, so a first run on a GPU does not find its first bug
 * there. The rates themselves mean nothing in the emulator and are not checked. */
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

int main(void)
{
    Suite *s = suite_create("bench_device");
    check_add_tests(check_tcase(s, "emulator", 600), device_bench_runs_every_row);
    return dev_test_main(s);
}
