/* relaunch.c: see relaunch.h. */
#define _GNU_SOURCE
#include "src/bench/relaunch.h"

#include <stdarg.h>
#include <string.h>
#include <unistd.h>

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
