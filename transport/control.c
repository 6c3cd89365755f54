/* control.c: the control plane that keeps a job from hanging. The rendezvous
 * sockets (a star through rank 0) stay open; a thread on every rank sends
 * heartbeats and watches them. A socket that closes without a "done" means the
 * process died (the kernel closes it even after SIGKILL); a peer silent for
 * half the timeout has stopped answering. Rank 0 tells every rank which rank was lost,
 * so every survivor fails with a message naming it. If the main thread is busy
 * computing and does not pick the error up within a grace period, the thread
 * prints it and exits the process: a lost rank never leaves a rank hanging.
 * Finalize is a handshake: ranks report "done", rank 0 answers "finish" when
 * all have, so a clean exit is never mistaken for a death. */
#define _GNU_SOURCE
#include "config.h"

#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "transport/internal.h"
#include "transport/wire.h"

static pthread_mutex_t ctl_send_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *lost_reason(int why)
{
    switch (why) {
    case BT_LOST_CLOSED: return "its connection closed: the process exited or was killed";
    case BT_LOST_SILENT: return "it stopped answering";
    case BT_LOST_ABORTED: return "it aborted after an error";
    case BT_LOST_LINK: return "its data connection failed";
    }
    return "unknown reason";
}

/* A peer silent for half the timeout is lost: well before any single wait
 * (which allows the whole timeout) gives up, so a stopped rank is reported as
 * such rather than as a slow transfer. */
static double silence_limit(const bt_world *w) { return w->opt.timeout_s / 2; }

static double heartbeat_interval(const bt_world *w)
{
    double t = silence_limit(w) / 4;
    return t < 1.0 ? t : 1.0;
}

static void ctl_send(int fd, uint32_t type, int rank, int arg)
{
    if (fd < 0) return;
    bt_ctl_frame f = {type, rank, arg, 0};
    pthread_mutex_lock(&ctl_send_lock);
    bt_wire_io(fd, &f, sizeof f, 1, bt_now() + 1.0);
    pthread_mutex_unlock(&ctl_send_lock);
}

/* Exits the process when an error stays unnoticed by the main thread. */
static void watchdog(bt_world *w)
{
    if (!atomic_load(&w->failed) || atomic_load(&w->error_seen)) return;
    double grace = 2.0 + 2 * heartbeat_interval(w);
    if (bt_now() - w->failed_at < grace) return;
    pthread_mutex_lock(&w->err_lock);
    fprintf(stderr, "burst: %s; exiting\n", w->err);
    pthread_mutex_unlock(&w->err_lock);
    fflush(NULL);
    _exit(1);
}

static void drain_wake(bt_world *w)
{
    char buf[64];
    while (read(w->ctl_wake[0], buf, sizeof buf) > 0) {}
}

/* Rank 0 tells every rank still connected that rank `lost` is gone.
 * closed: [size], the ranks not to tell (closed[0] is always set). Called
 * before the failure is recorded: the rank's main thread may exit as soon as
 * it sees the failure, taking this thread with it, and the announcement must
 * be out by then. */
static void announce_lost(bt_world *w, const char *closed, int lost, int why)
{
    for (int q = 1; q < w->size; q++)
        if (!closed[q] && q != lost) ctl_send(w->ctl_fds[q], BT_CTL_LOST, lost, why);
}

/* What rank 0's control thread knows of every rank, [size] each. */
typedef struct {
    double *last_seen;   /* when it last heard from the rank */
    char *done;          /* the rank said it is done */
    char *closed;        /* its connection is closed (closed[0]: rank 0 itself) */
    struct pollfd *pfds; /* [size + 1]: the wake pipe, then each open connection */
    int *who;            /* [size + 1]: the rank of each pollfd, -1 the wake pipe */
} root_view;

/* One frame from rank r (or its connection closing), at time now. */
static void root_read_frame(bt_world *w, root_view *v, int r, double now)
{
    bt_ctl_frame f;
    int why = -1;
    if (bt_wire_io(w->ctl_fds[r], &f, sizeof f, 0, now + 1.0) != 0) {
        v->closed[r] = 1;
        if (!v->done[r]) why = BT_LOST_CLOSED;
    } else if (f.type == BT_CTL_DONE) {
        v->done[r] = 1;
    } else if (f.type == BT_CTL_ABORT) {
        v->closed[r] = 1;
        why = BT_LOST_ABORTED;
    } else if (f.type == BT_CTL_LINK_LOST && f.arg > 0 && f.arg < w->size && !v->closed[f.arg]) {
        v->closed[f.arg] = 1; /* reported by r: announce the rank that is gone */
        announce_lost(w, v->closed, f.arg, BT_LOST_LINK);
        bt_fail(w, BT_ERR_PEER_LOST, "lost rank %d (%s; reported by rank %d)", f.arg,
                lost_reason(BT_LOST_LINK), r);
    }
    v->last_seen[r] = now;
    if (why >= 0) {
        announce_lost(w, v->closed, r, why);
        bt_fail(w, BT_ERR_PEER_LOST, "lost rank %d (%s)", r, lost_reason(why));
    }
}

/* Waits up to one heartbeat interval and reads what arrived. */
static void root_poll(bt_world *w, root_view *v, double interval)
{
    int n = 0;
    v->pfds[n] = (struct pollfd){w->ctl_wake[0], POLLIN, 0};
    v->who[n++] = -1;
    for (int r = 1; r < w->size; r++)
        if (!v->closed[r]) {
            v->pfds[n] = (struct pollfd){w->ctl_fds[r], POLLIN, 0};
            v->who[n++] = r;
        }
    poll(v->pfds, (nfds_t)n, (int)(interval * 1000));
    double now = bt_now();
    for (int i = 0; i < n; i++) {
        if (!(v->pfds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        if (v->who[i] < 0)
            drain_wake(w);
        else
            root_read_frame(w, v, v->who[i], now);
    }
}

/* Ranks not heard from for the silence limit are lost. */
static void root_check_silence(bt_world *w, root_view *v)
{
    double now = bt_now();
    for (int r = 1; r < w->size; r++)
        if (!v->closed[r] && !v->done[r] && now - v->last_seen[r] > silence_limit(w)) {
            v->closed[r] = 1;
            announce_lost(w, v->closed, r, BT_LOST_SILENT);
            bt_fail(w, BT_ERR_PEER_LOST, "lost rank %d (%s for %.0f s)", r,
                    lost_reason(BT_LOST_SILENT), now - v->last_seen[r]);
        }
}

/* Finalizing without a failure, once every rank is done: tells them all to
 * finish; 1 then. */
static int root_finish(bt_world *w, const root_view *v)
{
    if (!atomic_load(&w->finalizing) || atomic_load(&w->failed)) return 0;
    for (int r = 1; r < w->size; r++)
        if (!v->done[r]) return 0;
    for (int r = 1; r < w->size; r++) ctl_send(w->ctl_fds[r], BT_CTL_FINISH, 0, 0);
    atomic_store(&w->finished, 1);
    return 1;
}

static void *root_thread(void *arg)
{
    bt_world *w = arg;
    size_t size = (size_t)w->size;
    double interval = heartbeat_interval(w), last_beat = 0;
    root_view v = {.last_seen = bt_calloc(w, size * sizeof(double), "the control thread's view"),
                   .done = bt_calloc(w, size, "the control thread's view"),
                   .closed = bt_calloc(w, size, "the control thread's view"),
                   .pfds = bt_calloc(w, (size + 1) * sizeof(struct pollfd), "its poll set"),
                   .who = bt_calloc(w, (size + 1) * sizeof(int), "its poll set")};
    int ready = v.last_seen && v.done && v.closed && v.pfds && v.who; /* else the world failed */
    for (size_t r = 0; ready && r < size; r++) v.last_seen[r] = bt_now();
    if (ready) v.closed[0] = 1;
    while (ready && atomic_load(&w->ctl_running)) {
        root_poll(w, &v, interval);
        root_check_silence(w, &v);
        if (bt_now() - last_beat >= interval) {
            for (int r = 1; r < w->size; r++)
                if (!v.closed[r]) ctl_send(w->ctl_fds[r], BT_CTL_HEARTBEAT, 0, 0);
            last_beat = bt_now();
        }
        if (root_finish(w, &v)) break;
        watchdog(w);
    }
    free(v.last_seen);
    free(v.done);
    free(v.closed);
    free(v.pfds);
    free(v.who);
    return NULL;
}

static void *client_thread(void *arg)
{
    bt_world *w = arg;
    double interval = heartbeat_interval(w), last_beat = 0, last_seen = bt_now();
    int sent_done = 0, root_gone = 0;
    while (atomic_load(&w->ctl_running)) {
        struct pollfd pfds[2] = {{w->ctl_wake[0], POLLIN, 0}, {w->ctl_fd, POLLIN, 0}};
        poll(pfds, root_gone ? 1 : 2, (int)(interval * 1000));
        double now = bt_now();
        if (pfds[0].revents & POLLIN) drain_wake(w);
        if (!root_gone && (pfds[1].revents & (POLLIN | POLLHUP | POLLERR))) {
            bt_ctl_frame f;
            if (bt_wire_io(w->ctl_fd, &f, sizeof f, 0, now + 1.0) != 0) {
                root_gone = 1;
                bt_fail(w, BT_ERR_PEER_LOST, "lost rank 0 (%s)", lost_reason(BT_LOST_CLOSED));
            } else if (f.type == BT_CTL_LOST) {
                root_gone = f.rank == 0;
                bt_fail(w, BT_ERR_PEER_LOST, "lost rank %d (%s; reported by rank 0)", f.rank,
                        lost_reason(f.arg));
            } else if (f.type == BT_CTL_FINISH) {
                atomic_store(&w->finished, 1);
                break;
            }
            last_seen = now;
        }
        if (!root_gone && now - last_seen > silence_limit(w)) {
            root_gone = 1;
            bt_fail(w, BT_ERR_PEER_LOST, "lost rank 0 (%s for %.0f s)",
                    lost_reason(BT_LOST_SILENT), now - last_seen);
        }
        if (!root_gone && now - last_beat >= interval) {
            ctl_send(w->ctl_fd, BT_CTL_HEARTBEAT, w->rank, 0);
            last_beat = now;
        }
        if (!root_gone && !sent_done && atomic_load(&w->finalizing)) {
            ctl_send(w->ctl_fd, BT_CTL_DONE, w->rank, 0);
            sent_done = 1;
        }
        watchdog(w);
    }
    return NULL;
}

/* Rank 0 decides what a rank learned of a lost rank: a rank that sees a data
 * connection fail reports it and waits (a little over one heartbeat) for rank
 * 0's word, because the peer it sees failing may only be leaving after rank 0
 * announced another rank's loss, and that announcement is the truth to name.
 * Rank 0 itself announces at once. Only without a word from rank 0 does this
 * rank name the peer itself. */
bt_status bt_control_link_lost(bt_world *w, int peer, const char *detail)
{
    if (atomic_load(&w->failed)) return (bt_status)atomic_load(&w->failed);
    if (w->rank == 0 && w->ctl_fds) {
        for (int q = 1; q < w->size; q++)
            if (q != peer) ctl_send(w->ctl_fds[q], BT_CTL_LOST, peer, BT_LOST_LINK);
        return bt_fail(w, BT_ERR_PEER_LOST, "lost rank %d (%s: %s)", peer,
                       lost_reason(BT_LOST_LINK), detail);
    }
    if (w->ctl_fd >= 0 && w->ctl_started) {
        ctl_send(w->ctl_fd, BT_CTL_LINK_LOST, w->rank, peer);
        double until = bt_now() + 2 * heartbeat_interval(w) + 0.5;
        while (!atomic_load(&w->failed) && bt_now() < until) {
            struct timespec nap = {0, 1000 * 1000};
            nanosleep(&nap, NULL);
        }
    }
    return bt_fail(w, BT_ERR_PEER_LOST, "lost rank %d (%s: %s)", peer, lost_reason(BT_LOST_LINK),
                   detail);
}

bt_status bt_control_start(bt_world *w)
{
    if (pipe2(w->ctl_wake, O_NONBLOCK | O_CLOEXEC) != 0)
        return bt_fail(w, BT_ERR_SYS, "control plane: cannot create a pipe");
    atomic_store(&w->ctl_running, 1);
    if (pthread_create(&w->ctl_thread, NULL, w->rank == 0 ? root_thread : client_thread, w) != 0) {
        atomic_store(&w->ctl_running, 0);
        return bt_fail(w, BT_ERR_SYS, "control plane: cannot start its thread");
    }
    w->ctl_started = 1;
    return BT_OK;
}

static void wake(bt_world *w)
{
    if (w->ctl_wake[1] >= 0 && write(w->ctl_wake[1], "w", 1) < 0) {}
}

bt_status bt_control_finalize(bt_world *w)
{
    atomic_store(&w->finalizing, 1);
    wake(w);
    while (!atomic_load(&w->finished) && !atomic_load(&w->failed)) {
        struct timespec nap = {0, 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    bt_status st = (bt_status)atomic_load(&w->failed);
    if (st != BT_OK) atomic_store(&w->error_seen, 1);
    return st;
}

void bt_control_stop(bt_world *w, int abort)
{
    if (abort) atomic_store(&w->error_seen, 1);
    if (abort && w->rank == 0 && w->ctl_fds) {
        for (int r = 1; r < w->size; r++)
            ctl_send(w->ctl_fds[r], BT_CTL_LOST, 0, BT_LOST_ABORTED);
    } else if (abort && w->ctl_fd >= 0) {
        ctl_send(w->ctl_fd, BT_CTL_ABORT, w->rank, atomic_load(&w->failed));
    }
    if (w->ctl_started) {
        atomic_store(&w->ctl_running, 0);
        wake(w);
        pthread_join(w->ctl_thread, NULL);
        w->ctl_started = 0;
    }
    if (w->ctl_fd >= 0) close(w->ctl_fd);
    w->ctl_fd = -1;
    for (int r = 1; w->ctl_fds && r < w->size; r++)
        if (w->ctl_fds[r] >= 0) close(w->ctl_fds[r]);
    for (int i = 0; i < 2; i++)
        if (w->ctl_wake[i] >= 0) close(w->ctl_wake[i]);
    w->ctl_wake[0] = w->ctl_wake[1] = -1;
}
