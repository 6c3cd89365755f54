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
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "src/cli/cli.h"
#include "src/cli/placement.h"
#include "transport/launch.h"
#include "util/clock.h"
#include "util/options.h"

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

/* What the launcher's own options set. */
typedef struct {
    int n, nodes, no_kill;
    const char *timeout; /* seconds, as given (passed on in BURST_TIMEOUT) */
} run_opts;

static int set_timeout(void *o, const char *v)
{
    char *end;
    double t = strtod(v, &end);
    if (end == v || *end || !(t > 0)) return -1;
    ((run_opts *)o)->timeout = v;
    return 0;
}

static const bu_option options[] = {
    {"-n, --ranks", "N", BU_OPT_INT, offsetof(run_opts, n), 1, 1024, NULL,
     "number of ranks (1..1024)"},
    {"--nodes", "M", BU_OPT_INT, offsetof(run_opts, nodes), 1, 1024, NULL,
     "emulate M nodes of N/M ranks each (default 1); ranks are\n"
     "numbered node-major, so ranks 0..N/M-1 share node 0"},
    {"--timeout", "S", BU_OPT_CUSTOM, 0, 0, 0, set_timeout,
     "seconds before a silent rank is declared lost\n"
     "(sets BURST_TIMEOUT; default 60)"},
    {"--no-kill", NULL, BU_OPT_FLAG, offsetof(run_opts, no_kill), 0, 0, NULL,
     "when a rank fails, let the others find out by themselves\n"
     "instead of stopping them (for testing failure handling)"},
};
enum { N_OPTIONS = sizeof options / sizeof options[0] };

static void usage(FILE *out)
{
    fprintf(out,
            "usage: burst run -n N [--nodes M] [--timeout S] [--no-kill] -- PROGRAM [ARGS...]\n\n"
            "Starts N ranks of PROGRAM on this machine and wires them up as one job.\n\n");
    bu_options_print(out, options, N_OPTIONS, 22);
    fprintf(out, "\nEach rank gets an equal share of the CPUs this launcher may use (its affinity\n"
                 "mask): it is pinned to them and OMP_NUM_THREADS is set to their number; with\n"
                 "more ranks than CPUs, every rank runs one thread on all of them. When\n"
                 "OMP_NUM_THREADS is set, every rank runs that many threads and is not pinned.\n\n"
                 "Each output line is prefixed with [rank]. SIGINT and SIGTERM are forwarded to\n"
                 "every rank. Exit status: 0 when every rank succeeded, else the status of the\n"
                 "first rank that failed (128 + signal for a rank killed by a signal), 2 for bad\n"
                 "usage.\n");
}

/* Copies complete lines of one stream to out with the rank's prefix; flushes a
 * trailing partial line when the stream ends. */
static void forward(rank_proc *p, int rank, int stream, const char *data, size_t n, int eof)
{
    FILE *out = stream == 0 ? stdout : stderr;
    char *grown = realloc(p->line[stream], p->line_len[stream] + n + 1);
    if (!grown) { /* no memory to hold a partial line: pass the bytes on as they are */
        fprintf(out, "[%d] %.*s%s", rank, (int)n, data, eof ? "\n" : "");
        fflush(out);
        return;
    }
    p->line[stream] = grown;
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

/* A job while it runs: its ranks and what the launcher knows of them. */
typedef struct {
    rank_proc *procs;
    int n, kill_on_failure;
    int first_failed, running, open_streams;
    double stop_deadline; /* when the ranks told to stop are killed (0: none told) */
} job;

/* Forwards what the ranks wrote (pfds[1..m) are their stdout, stderr pairs). */
static void pump_output(job *j, const struct pollfd *pfds, int m)
{
    static char buf[65536];
    for (int k = 1; k < m; k++) {
        if (!(pfds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        int r = (k - 1) / 2, stream = (k - 1) % 2;
        rank_proc *p = &j->procs[r];
        int *fd = stream == 0 ? &p->out_fd : &p->err_fd;
        ssize_t got = read(*fd, buf, sizeof buf);
        if (got > 0) {
            forward(p, r, stream, buf, (size_t)got, 0);
        } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
            forward(p, r, stream, "", 0, 1);
            close(*fd);
            *fd = -1;
            j->open_streams--;
        }
    }
}

/* Collects the ranks that exited; the first failure is named and, unless
 * --no-kill, stops the others. */
static void reap(job *j)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        for (int r = 0; r < j->n; r++) {
            rank_proc *p = &j->procs[r];
            if (p->pid != pid) continue;
            p->exited = 1;
            p->status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            j->running--;
            /* After the first failure the others fail because we stopped
             * them, unless --no-kill: then every failure is news. */
            if (p->status == 0 || (j->first_failed >= 0 && j->kill_on_failure)) continue;
            const char *then =
                j->first_failed < 0 && j->kill_on_failure ? "; stopping the other ranks" : "";
            if (WIFSIGNALED(status))
                fprintf(stderr, "burst run: rank %d was killed by signal %d%s\n", r,
                        WTERMSIG(status), then);
            else
                fprintf(stderr, "burst run: rank %d exited with status %d%s\n", r, p->status, then);
            if (j->first_failed < 0) {
                j->first_failed = r;
                if (j->kill_on_failure) {
                    signal_all(j->procs, j->n, SIGTERM);
                    j->stop_deadline = bu_now() + 5;
                }
            }
        }
    }
}

/* Runs the job to its end: forwards output and signals, reaps the ranks.
 * pfds has room for 2 n + 1 entries. Returns the job's exit status. */
static int supervise(job *j, struct pollfd *pfds)
{
    double drain_deadline = 0;
    while (j->running > 0 || j->open_streams > 0) {
        int m = 0;
        pfds[m++] = (struct pollfd){signal_pipe[0], POLLIN, 0};
        for (int r = 0; r < j->n; r++) {
            pfds[m++] = (struct pollfd){j->procs[r].out_fd, POLLIN, 0};
            pfds[m++] = (struct pollfd){j->procs[r].err_fd, POLLIN, 0};
        }
        poll(pfds, (nfds_t)m, 100);
        unsigned char sig;
        if (read(signal_pipe[0], &sig, 1) == 1) {
            fprintf(stderr, "burst run: forwarding signal %d to every rank\n", sig);
            signal_all(j->procs, j->n, sig);
            if (!j->stop_deadline) j->stop_deadline = bu_now() + 10;
        }
        pump_output(j, pfds, m);
        reap(j);
        if (j->stop_deadline && bu_now() > j->stop_deadline && j->running > 0) {
            signal_all(j->procs, j->n, SIGKILL);
            j->stop_deadline = bu_now() + 3600;
        }
        /* A rank's descendants may hold its pipes open after it exited. */
        if (j->running == 0 && j->open_streams > 0) {
            if (!drain_deadline) drain_deadline = bu_now() + 2;
            if (bu_now() > drain_deadline) break;
        }
    }
    return j->first_failed >= 0 ? j->procs[j->first_failed].status : 0;
}

/* The launcher's options, then PROGRAM: 0 with *prog set, 1 for help, or
 * EXIT_USAGE (said on stderr). */
static int run_args(int argc, char **argv, run_opts *o, char ***prog)
{
    int rest = argc;
    int parsed = bu_options_parse_prefix("burst run", options, N_OPTIONS, argc, argv, o, &rest);
    if (parsed != 0) return parsed == 1 ? 1 : EXIT_USAGE;
    if (o->n == 0 || rest >= argc) {
        fprintf(stderr, "burst run: %s\n\n", o->n == 0 ? "-n N is required" : "no program to run");
        usage(stderr);
        return EXIT_USAGE;
    }
    if (o->n % o->nodes != 0) {
        fprintf(stderr, "burst run: %d ranks cannot be split evenly over %d nodes\n", o->n,
                o->nodes);
        return EXIT_USAGE;
    }
    *prog = argv + rest;
    return 0;
}

/* The launch socket, its secret and the signal pipe: 0, or EXIT_RUN_FAILURE. */
static int prepare(int *listen_fd, int *port, char secret[33])
{
    char err[256];
    *listen_fd = bt_launch_listen(port, err, sizeof err);
    if (*listen_fd < 0 || bt_launch_secret(secret) != 0) {
        fprintf(stderr, "burst run: %s\n", *listen_fd < 0 ? err : "cannot draw a secret");
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
    return 0;
}

int cmd_run(int argc, char **argv)
{
    run_opts o = {.nodes = 1};
    char **prog;
    int rc = run_args(argc, argv, &o, &prog);
    if (rc == 1) usage(stdout);
    if (rc != 0) return rc == 1 ? 0 : rc;

    char secret[33];
    int port = 0, listen_fd;
    if (prepare(&listen_fd, &port, secret) != 0) return EXIT_RUN_FAILURE;
    static bu_cpus cpus; /* the CPUs the ranks share out (none: no placement) */
    if (bu_cpus_allowed(&cpus) != 0) cpus.n = 0;
    job j = {.n = o.n, .kill_on_failure = !o.no_kill, .first_failed = -1};
    j.procs = calloc((size_t)o.n, sizeof *j.procs);
    struct pollfd *pfds = malloc((2 * (size_t)o.n + 1) * sizeof *pfds);
    if (!j.procs || !pfds) {
        fprintf(stderr, "burst run: no memory for the table of %d ranks\n", o.n);
        free(j.procs);
        free(pfds);
        return EXIT_RUN_FAILURE;
    }
    for (int r = 0; r < o.n; r++) {
        j.procs[r].pid = start_rank(r, o.n, o.nodes, listen_fd, port, secret, o.timeout, &cpus,
                                    prog, &j.procs[r].out_fd, &j.procs[r].err_fd);
        if (j.procs[r].pid < 0) {
            fprintf(stderr, "burst run: cannot start rank %d: %s\n", r, strerror(errno));
            signal_all(j.procs, r, SIGKILL);
            free(j.procs);
            free(pfds);
            return EXIT_RUN_FAILURE;
        }
    }
    close(listen_fd);
    j.running = o.n, j.open_streams = 2 * o.n;
    int result = supervise(&j, pfds);
    for (int r = 0; r < o.n; r++) {
        free(j.procs[r].line[0]);
        free(j.procs[r].line[1]);
        if (j.procs[r].out_fd >= 0) close(j.procs[r].out_fd);
        if (j.procs[r].err_fd >= 0) close(j.procs[r].err_fd);
    }
    free(j.procs);
    free(pfds);
    return result;
}
