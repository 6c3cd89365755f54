/* launcher.c: `burst run`, the local launcher. It forks N ranks of a program,
 * tells each who it is through the variables of transport/launch.h (with a
 * listening socket that rank 0 inherits and a fresh secret, so no port is
 * raced for and no stranger can join), gives each rank its share of this
 * machine's CPUs (src/cli/placement.h), prefixes every output line with the
 * rank, forwards SIGINT/SIGTERM, and when a rank fails stops the others and
 * exits with that rank's status. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "src/cli/cli.h"
#include "src/cli/placement.h"
#include "transport/launch.h"
#include "util/clock.h"

typedef struct {
    pid_t pid;
    int out_fd, err_fd;    /* read ends of the rank's stdout / stderr, -1 once closed */
    char *line[2];         /* partial line per stream */
    size_t line_len[2];
    int exited, status;    /* status: exit code, or 128 + signal */
} rank_proc;

static int signal_pipe[2] = {-1, -1};

static void on_signal(int sig)
{
    unsigned char s = (unsigned char)sig;
    if (write(signal_pipe[1], &s, 1) < 0) {}
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: burst run -n N [--nodes M] [--timeout S] [--no-kill] -- PROGRAM [ARGS...]\n\n"
            "Starts N ranks of PROGRAM on this machine and wires them up as one job.\n\n"
            "  -n, --ranks N     number of ranks (1..1024)\n"
            "  --nodes M         emulate M nodes of N/M ranks each (default 1); ranks are\n"
            "                    numbered node-major, so ranks 0..N/M-1 share node 0\n"
            "  --timeout S       seconds before a silent rank is declared lost\n"
            "                    (sets BURST_TIMEOUT; default 60)\n"
            "  --no-kill         when a rank fails, let the others find out by themselves\n"
            "                    instead of stopping them (for testing failure handling)\n\n"
            "Each rank gets an equal share of the CPUs this launcher may use (its affinity\n"
            "mask): it is pinned to them and OMP_NUM_THREADS is set to their number; with\n"
            "more ranks than CPUs, every rank runs one thread on all of them. When\n"
            "OMP_NUM_THREADS is set, every rank runs that many threads and is not pinned.\n\n"
            "Each output line is prefixed with [rank]. SIGINT and SIGTERM are forwarded to\n"
            "every rank. Exit status: 0 when every rank succeeded, else the status of the\n"
            "first rank that failed (128 + signal for a rank killed by a signal), 2 for bad\n"
            "usage.\n");
}

static int parse_count(const char *s, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || errno || *end || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

/* Copies complete lines of one stream to out with the rank's prefix; flushes a
 * trailing partial line when the stream ends. */
static void forward(rank_proc *p, int rank, int stream, const char *data, size_t n, int eof)
{
    FILE *out = stream == 0 ? stdout : stderr;
    p->line[stream] = realloc(p->line[stream], p->line_len[stream] + n + 1);
    memcpy(p->line[stream] + p->line_len[stream], data, n);
    p->line_len[stream] += n;
    size_t start = 0;
    for (size_t i = 0; i < p->line_len[stream]; i++) {
        if (p->line[stream][i] != '\n') continue;
        fprintf(out, "[%d] %.*s\n", rank, (int)(i - start), p->line[stream] + start);
        start = i + 1;
    }
    if (eof && start < p->line_len[stream]) {
        fprintf(out, "[%d] %.*s\n", rank, (int)(p->line_len[stream] - start),
                p->line[stream] + start);
        start = p->line_len[stream];
    }
    memmove(p->line[stream], p->line[stream] + start, p->line_len[stream] - start);
    p->line_len[stream] -= start;
    fflush(out);
}

static pid_t start_rank(int rank, int n, int nodes, int listen_fd, int port, const char *secret,
                        const char *timeout, const bu_cpus *cpus, char **argv, int *out_fd,
                        int *err_fd)
{
    int out_pipe[2], err_pipe[2];
    if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        char buf[64];
        dup2(out_pipe[1], 1);
        dup2(err_pipe[1], 2);
        snprintf(buf, sizeof buf, "%d", rank);
        setenv(BURST_ENV_RANK, buf, 1);
        snprintf(buf, sizeof buf, "%d", n);
        setenv(BURST_ENV_SIZE, buf, 1);
        snprintf(buf, sizeof buf, "127.0.0.1:%d", port);
        setenv(BURST_ENV_ROOT, buf, 1);
        setenv(BURST_ENV_SECRET, secret, 1);
        if (nodes > 1) {
            snprintf(buf, sizeof buf, "%d", rank / (n / nodes));
            setenv(BURST_ENV_NODE_ID, buf, 1);
        }
        if (timeout) setenv(BURST_ENV_TIMEOUT, timeout, 1);
        cli_place_launched_rank(cpus, n, rank);
        if (rank == 0) {
            /* Rank 0 inherits the listening socket, so no other process can
             * take the port between the launcher choosing it and rank 0 using it. */
            int fd = dup(listen_fd); /* dup drops FD_CLOEXEC */
            snprintf(buf, sizeof buf, "%d", fd);
            setenv(BURST_ENV_ROOT_FD, buf, 1);
        } else {
            unsetenv(BURST_ENV_ROOT_FD);
        }
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        execvp(argv[0], argv);
        fprintf(stderr, "burst run: cannot start %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(out_pipe[1]);
    close(err_pipe[1]);
    *out_fd = out_pipe[0];
    *err_fd = err_pipe[0];
    return pid;
}

static void signal_all(rank_proc *procs, int n, int sig)
{
    for (int r = 0; r < n; r++)
        if (!procs[r].exited && procs[r].pid > 0) {
            kill(procs[r].pid, sig);
            if (sig == SIGTERM) kill(procs[r].pid, SIGCONT); /* a stopped rank must see it */
        }
}

int cmd_run(int argc, char **argv)
{
    int n = 0, nodes = 1, kill_on_failure = 1, i;
    const char *timeout = NULL;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if ((strcmp(a, "-n") == 0 || strcmp(a, "--ranks") == 0) && i + 1 < argc) {
            if (parse_count(argv[++i], 1, 1024, &n) != 0) {
                fprintf(stderr, "burst run: -n '%s': expected a rank count in 1..1024\n", argv[i]);
                return EXIT_USAGE;
            }
        } else if (strcmp(a, "--nodes") == 0 && i + 1 < argc) {
            if (parse_count(argv[++i], 1, 1024, &nodes) != 0) {
                fprintf(stderr, "burst run: --nodes '%s': expected a node count in 1..1024\n",
                        argv[i]);
                return EXIT_USAGE;
            }
        } else if (strcmp(a, "--timeout") == 0 && i + 1 < argc) {
            timeout = argv[++i];
            char *end;
            double t = strtod(timeout, &end);
            if (*end || !(t > 0)) {
                fprintf(stderr, "burst run: --timeout '%s': expected seconds > 0\n", timeout);
                return EXIT_USAGE;
            }
        } else if (strcmp(a, "--no-kill") == 0) {
            kill_on_failure = 0;
        } else if (a[0] != '-') {
            break; /* the program, without a "--" */
        } else {
            fprintf(stderr, "burst run: unknown option '%s'\n\n", a);
            usage(stderr);
            return EXIT_USAGE;
        }
    }
    if (n <= 0 || n > 1024 || i >= argc) {
        fprintf(stderr, "burst run: %s\n\n", n == 0 ? "-n N is required" : "no program to run");
        usage(stderr);
        return EXIT_USAGE;
    }
    if (n % nodes != 0) {
        fprintf(stderr, "burst run: %d ranks cannot be split evenly over %d nodes\n", n, nodes);
        return EXIT_USAGE;
    }
    char **prog = argv + i;

    char err[256], secret[33];
    int port = 0;
    int listen_fd = bt_launch_listen(&port, err, sizeof err);
    if (listen_fd < 0 || bt_launch_secret(secret) != 0) {
        fprintf(stderr, "burst run: %s\n", listen_fd < 0 ? err : "cannot draw a secret");
        return EXIT_RUN_FAILURE;
    }
    if (pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
        fprintf(stderr, "burst run: pipe: %s\n", strerror(errno));
        return EXIT_RUN_FAILURE;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    static bu_cpus cpus; /* the CPUs the ranks share out (none: no placement) */
    if (bu_cpus_allowed(&cpus) != 0) cpus.n = 0;
    rank_proc *procs = calloc((size_t)n, sizeof *procs);
    for (int r = 0; r < n; r++) {
        procs[r].pid = start_rank(r, n, nodes, listen_fd, port, secret, timeout, &cpus, prog,
                                  &procs[r].out_fd, &procs[r].err_fd);
        if (procs[r].pid < 0) {
            fprintf(stderr, "burst run: cannot start rank %d: %s\n", r, strerror(errno));
            signal_all(procs, r, SIGKILL);
            return EXIT_RUN_FAILURE;
        }
    }
    close(listen_fd);

    int first_failed = -1, running = n, open_streams = 2 * n;
    double stop_deadline = 0;
    struct pollfd *pfds = malloc((2 * (size_t)n + 1) * sizeof *pfds);
    char buf[65536];
    while (running > 0 || open_streams > 0) {
        int m = 0;
        pfds[m++] = (struct pollfd){signal_pipe[0], POLLIN, 0};
        for (int r = 0; r < n; r++) {
            pfds[m++] = (struct pollfd){procs[r].out_fd, POLLIN, 0};
            pfds[m++] = (struct pollfd){procs[r].err_fd, POLLIN, 0};
        }
        poll(pfds, (nfds_t)m, 100);
        unsigned char sig;
        if (read(signal_pipe[0], &sig, 1) == 1) {
            fprintf(stderr, "burst run: forwarding signal %d to every rank\n", sig);
            signal_all(procs, n, sig);
            if (!stop_deadline) stop_deadline = bu_now() + 10;
        }
        for (int k = 1; k < m; k++) {
            if (!(pfds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            int r = (k - 1) / 2, stream = (k - 1) % 2;
            int *fd = stream == 0 ? &procs[r].out_fd : &procs[r].err_fd;
            ssize_t got = read(*fd, buf, sizeof buf);
            if (got > 0) {
                forward(&procs[r], r, stream, buf, (size_t)got, 0);
            } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
                forward(&procs[r], r, stream, "", 0, 1);
                close(*fd);
                *fd = -1;
                open_streams--;
            }
        }
        int status;
        pid_t pid;
        while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
            for (int r = 0; r < n; r++) {
                if (procs[r].pid != pid) continue;
                procs[r].exited = 1;
                procs[r].status =
                    WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
                running--;
                /* After the first failure the others fail because we stopped
                 * them, unless --no-kill: then every failure is news. */
                if (procs[r].status == 0 || (first_failed >= 0 && kill_on_failure)) continue;
                const char *then = first_failed < 0 && kill_on_failure ? "; stopping the other ranks" : "";
                if (WIFSIGNALED(status))
                    fprintf(stderr, "burst run: rank %d was killed by signal %d%s\n", r,
                            WTERMSIG(status), then);
                else
                    fprintf(stderr, "burst run: rank %d exited with status %d%s\n", r,
                            procs[r].status, then);
                if (first_failed < 0) {
                    first_failed = r;
                    if (kill_on_failure) {
                        signal_all(procs, n, SIGTERM);
                        stop_deadline = bu_now() + 5;
                    }
                }
            }
        }
        if (stop_deadline && bu_now() > stop_deadline && running > 0) {
            signal_all(procs, n, SIGKILL);
            stop_deadline = bu_now() + 3600;
        }
        /* A rank's descendants may hold its pipes open after it exited. */
        if (running == 0 && open_streams > 0) {
            static double drain_deadline;
            if (!drain_deadline) drain_deadline = bu_now() + 2;
            if (bu_now() > drain_deadline) break;
        }
    }
    int result = first_failed >= 0 ? procs[first_failed].status : 0;
    for (int r = 0; r < n; r++) {
        free(procs[r].line[0]);
        free(procs[r].line[1]);
        if (procs[r].out_fd >= 0) close(procs[r].out_fd);
        if (procs[r].err_fd >= 0) close(procs[r].err_fd);
    }
    free(procs);
    free(pfds);
    return result;
}
