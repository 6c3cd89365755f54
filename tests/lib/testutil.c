/* testutil.c: see testutil.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/lib/testutil.h"

const char *test_burst_path(void)
{
    const char *p = getenv("BURST");
    return p ? p : "./burst";
}

const char *test_program_path(const char *path, char *buf, size_t len)
{
    const char *dir = getenv("BURST_TEST_BUILDDIR");
    snprintf(buf, len, "%s/%s", dir ? dir : ".", path);
    return buf;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

test_run_result test_run(char *const argv[], char *const env[])
{
    test_run_result r = {.exit_code = -1, .out = NULL, .seconds = 0};
    int fds[2];
    if (pipe(fds) != 0) return r;
    double t0 = now();
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        for (char *const *e = env; e && *e; e++) putenv(*e);
        execv(argv[0], argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    size_t cap = 4096, len = 0;
    char *out = malloc(cap);
    for (;;) {
        if (len + 1024 > cap) out = realloc(out, cap *= 2);
        ssize_t n = read(fds[0], out + len, cap - len - 1);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        len += (size_t)n;
    }
    out[len] = '\0';
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    r.seconds = now() - t0;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = out;
    return r;
}

void test_run_free(test_run_result *r)
{
    free(r->out);
    r->out = NULL;
}

int test_output_has(const test_run_result *r, const char *needle)
{
    return r->out && strstr(r->out, needle) != NULL;
}

char *test_make_tmpdir(char *buf, size_t len, const char *prefix)
{
    const char *base = getenv("TMPDIR");
    snprintf(buf, len, "%s/%s-XXXXXX", base && *base ? base : "/tmp", prefix);
    return mkdtemp(buf);
}

const char *test_path_in(const char *dir, const char *name)
{
    static char buf[4][1024];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static int remove_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    return remove(path) != 0 && errno != ENOENT ? -1 : 0;
}

int test_remove_tree(const char *path)
{
    if (nftw(path, remove_one, 16, FTW_DEPTH | FTW_PHYS) == 0) return 0;
    return errno == ENOENT ? 0 : -1;
}
