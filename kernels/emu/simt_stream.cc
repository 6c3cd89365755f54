/* simt_stream.cc: see simt_stream.h. */
#include "kernels/emu/simt_stream.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <deque>
#include <new>
#include <utility>

#include "kernels/emu/simt_runtime.h"

namespace bk_emu
{
namespace
{

struct emu_stream;

/* One piece of a stream's work: a copy (work empty, after NULL), a kernel
 * (work), or a wait for another stream's work up to its op number point
 * (after). */
struct queued_op {
    void *dst;
    const void *src;
    size_t bytes;
    std::function<int()> work;
    const char *name; /* of work, for its error */
    emu_stream *after;
    uint64_t point;
};

/* A stream: op number done is ops.front(). Every stream is on the list that
 * starts at the default stream. */
struct emu_stream {
    std::deque<queued_op> ops;
    uint64_t done, enqueued;
    emu_stream *next;
};

struct emu_event {
    emu_stream *stream; /* NULL: never recorded */
    uint64_t point;     /* the stream's enqueued count when recorded */
    int asked;          /* a query answered "pending" since the record */
};

pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
emu_stream g_default_stream;
int g_mode = -1;     /* 1 deferred, 0 eager, -1 not read from the environment yet */
char g_sticky[1024]; /* the error queued work left, "" when none */
uint64_t g_rng;      /* random run points (deferred under a random schedule) */
bool g_rng_seeded = false;

emu_stream *stream_of(void *stream)
{
    return stream ? static_cast<emu_stream *>(stream) : &g_default_stream;
}

bool is_live(const emu_stream *s)
{
    for (const emu_stream *p = &g_default_stream; p != NULL; p = p->next)
        if (p == s) return true;
    return false;
}

/* The mode from BK_EMU_STREAMS, once (the lock held). */
void read_mode(void)
{
    if (g_mode >= 0) return;
    const char *spec = getenv("BK_EMU_STREAMS");
    g_mode = 0;
    if (spec == NULL || strcmp(spec, "eager") == 0) return;
    if (strcmp(spec, "deferred") == 0) {
        g_mode = 1;
        return;
    }
    fprintf(stderr, "bk_emu: BK_EMU_STREAMS=%s: expected eager or deferred\n", spec);
    abort();
}

void run_until(emu_stream *s, uint64_t point);

/* Runs op, s's next (the lock held); a failed kernel leaves the sticky error. */
void run_op(queued_op &op)
{
    if (op.after != NULL) {
        if (is_live(op.after)) run_until(op.after, op.point);
    } else if (op.work) {
        if (g_sticky[0] == '\0' && op.work() != 0)
            snprintf(g_sticky, sizeof g_sticky,
                     "unspecified launch failure: queued kernel %s failed: %s", op.name,
                     last_error());
    } else if (op.bytes) {
        memmove(op.dst, op.src, op.bytes);
    }
}

/* Runs s's work up to op number point (the lock held). */
void run_until(emu_stream *s, uint64_t point)
{
    while (s->done < point && !s->ops.empty()) {
        queued_op op = std::move(s->ops.front());
        s->ops.pop_front();
        s->done++;
        run_op(op);
    }
}

int status(void)
{
    return g_sticky[0] == '\0' ? 0 : -1;
}

/* splitmix64, seeded from the schedule's seed (the lock held). */
uint64_t draw(void)
{
    if (!g_rng_seeded) g_rng = random_schedule_seed(), g_rng_seeded = true;
    g_rng += 0x9e3779b97f4a7c15ull;
    uint64_t x = g_rng;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Deferred under a random schedule: one call in RUN_ONE_IN runs the oldest
 * work of a stream drawn at random (the lock held). */
enum { RUN_ONE_IN = 4 };
void maybe_run_some(void)
{
    if (g_mode != 1 || !random_schedule() || draw() % RUN_ONE_IN != 0) return;
    size_t n = 0;
    for (emu_stream *p = &g_default_stream; p != NULL; p = p->next) n++;
    size_t pick = (size_t)(draw() % n);
    emu_stream *s = &g_default_stream;
    while (pick-- > 0) s = s->next;
    if (!s->ops.empty()) run_until(s, s->done + 1);
}

/* Appends op to the stream's queue (the lock held; the deque aborts when out
 * of memory, as allocations do without exceptions); 0, or -1 when queued work
 * has failed. */
int push(emu_stream *s, queued_op &&op)
{
    s->ops.push_back(std::move(op));
    s->enqueued++;
    maybe_run_some();
    return status();
}

struct lock_guard {
    lock_guard() { pthread_mutex_lock(&g_lock); }
    ~lock_guard() { pthread_mutex_unlock(&g_lock); }
};

} // namespace

int set_streams(const char *spec)
{
    lock_guard hold;
    if (strcmp(spec, "eager") == 0 || strcmp(spec, "deferred") == 0) {
        g_mode = spec[0] == 'd';
        return 0;
    }
    return -1;
}

int streams_deferred(void)
{
    lock_guard hold;
    read_mode();
    return g_mode;
}

void *stream_create(void)
{
    emu_stream *s = new (std::nothrow) emu_stream();
    if (s == NULL) return NULL;
    lock_guard hold;
    s->next = g_default_stream.next;
    g_default_stream.next = s;
    return s;
}

void stream_destroy(void *stream)
{
    if (stream == NULL) return;
    lock_guard hold;
    emu_stream *s = static_cast<emu_stream *>(stream);
    run_until(s, s->enqueued);
    for (emu_stream *p = &g_default_stream; p != NULL; p = p->next)
        if (p->next == s) p->next = s->next;
    delete s;
}

int flush_all(void)
{
    lock_guard hold;
    for (emu_stream *s = &g_default_stream; s != NULL; s = s->next) run_until(s, s->enqueued);
    return status();
}

int stream_enqueue_copy(void *stream, void *dst, const void *src, size_t bytes)
{
    lock_guard hold;
    read_mode();
    return push(stream_of(stream), queued_op{dst, src, bytes, {}, NULL, NULL, 0});
}

int stream_enqueue_work(void *stream, const char *name, std::function<int()> work)
{
    lock_guard hold;
    read_mode();
    return push(stream_of(stream), queued_op{NULL, NULL, 0, std::move(work), name, NULL, 0});
}

int stream_flush(void *stream)
{
    lock_guard hold;
    emu_stream *s = stream_of(stream);
    run_until(s, s->enqueued);
    return status();
}

void *event_create(void)
{
    return calloc(1, sizeof(emu_event));
}

void event_destroy(void *event)
{
    free(event);
}

void event_record(void *event, void *stream)
{
    lock_guard hold;
    emu_event *e = static_cast<emu_event *>(event);
    e->stream = stream_of(stream);
    e->point = e->stream->enqueued;
    e->asked = 0;
}

int event_flush(void *event)
{
    lock_guard hold;
    emu_event *e = static_cast<emu_event *>(event);
    if (e->stream != NULL && is_live(e->stream)) run_until(e->stream, e->point);
    return status();
}

int stream_wait_event(void *stream, void *event)
{
    lock_guard hold;
    read_mode();
    emu_event *e = static_cast<emu_event *>(event);
    if (e->stream == NULL || !is_live(e->stream)) return status();
    if (g_mode != 1) {
        run_until(e->stream, e->point);
        return status();
    }
    return push(stream_of(stream), queued_op{NULL, NULL, 0, {}, NULL, e->stream, e->point});
}

int event_query(void *event)
{
    lock_guard hold;
    emu_event *e = static_cast<emu_event *>(event);
    int done = e->stream == NULL || !is_live(e->stream) || e->stream->done >= e->point;
    if (!done && e->asked) {
        run_until(e->stream, e->point);
        done = 1;
    }
    e->asked = !done;
    return status() == 0 ? done : -1;
}

int sticky_error(char *why, size_t len)
{
    lock_guard hold;
    if (g_sticky[0] == '\0') return 0;
    snprintf(why, len, "%s", g_sticky);
    return 1;
}

} // namespace bk_emu
