/* relaunch.c: see relaunch.h. */
#define _GNU_SOURCE
#include "src/bench/relaunch.h"

#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "util/parse.h"

int bench_self_path(const char *who, char *self, size_t len)
{
    ssize_t n = readlink("/proc/self/exe", self, len - 1);
    if (n <= 0) {
        fprintf(stderr, "%s: cannot find this program's path\n", who);
        return -1;
    }
    self[n] = '\0';
    return 0;
}

FILE *bench_relaunch(const char *self, int ranks, int threads, int verbose, const char *fmt, ...)
{
    char cmd[8192], args[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    int n = 0;
    if (threads > 0)
        n = snprintf(cmd, sizeof cmd, "OMP_NUM_THREADS=%d OPENBLAS_NUM_THREADS=%d ", threads,
                     threads);
    snprintf(cmd + n, sizeof cmd - (size_t)n, "'%s' run -n %d -- '%s' %s", self, ranks, self, args);
    if (verbose) fprintf(stderr, "+ %s\n", cmd);
    return popen(cmd, "r");
}

char *bench_rank_line(char *line)
{
    char *body = strchr(line, ']');
    return body ? body + 2 : line;
}

int bench_parse_rank_counts(const char *list, int *counts, int *n, int max)
{
    int read[64], n_read = 0;
    for (const char *at = list;; at++) {
        char count[16];
        size_t len = strcspn(at, ",");
        int64_t v;
        if (len >= sizeof count || n_read == max || n_read == 64) return -1;
        memcpy(count, at, len);
        count[len] = '\0';
        if (bu_parse_i64(count, &v, NULL) != 0 || v < 2 || v > 64) return -1;
        read[n_read++] = (int)v;
        at += len;
        if (*at == '\0') break;
    }
    memcpy(counts, read, (size_t)n_read * sizeof *read);
    *n = n_read;
    return 0;
}
