/* simt_stream.cc: see simt_stream.h. */
#include "kernels/emu/simt_stream.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

namespace bk_emu
{
namespace
{

struct queued_copy {
    void *dst;
    const void *src;
    size_t bytes;
};

/* A stream: copies [done, enqueued) wait in ops[done - base ...]. Every
 * stream is on the list that starts at the default stream. */
struct emu_stream {
    queued_copy *ops;
    size_t cap;
    uint64_t base, done, enqueued; /* ops[0] is copy number base */
    emu_stream *next;
};

struct emu_event {
    emu_stream *stream; /* NULL: never recorded */
    uint64_t point;     /* the stream's enqueued count when recorded */
    int asked;          /* a query answered "pending" since the record */
};

pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
emu_stream g_default_stream;

emu_stream *stream_of(void *stream)
{
    return stream ? static_cast<emu_stream *>(stream) : &g_default_stream;
}

/* Runs s's copies up to number point (the lock held). */
void run_until(emu_stream *s, uint64_t point)
{
    while (s->done < point && s->done < s->enqueued) {
        queued_copy *c = &s->ops[s->done - s->base];
        if (c->bytes) memmove(c->dst, c->src, c->bytes);
        s->done++;
    }
    if (s->done == s->enqueued) s->base = s->done; /* empty: reuse the array from the start */
}

} // namespace

void *stream_create(void)
{
    emu_stream *s = static_cast<emu_stream *>(calloc(1, sizeof(emu_stream)));
    if (s == NULL) return NULL;
    pthread_mutex_lock(&g_lock);
    s->next = g_default_stream.next;
    g_default_stream.next = s;
    pthread_mutex_unlock(&g_lock);
    return s;
}

void stream_destroy(void *stream)
{
    if (stream == NULL) return;
    pthread_mutex_lock(&g_lock);
    emu_stream *s = static_cast<emu_stream *>(stream);
    run_until(s, s->enqueued);
    for (emu_stream *p = &g_default_stream; p != NULL; p = p->next)
        if (p->next == s) p->next = s->next;
    pthread_mutex_unlock(&g_lock);
    free(s->ops);
    free(s);
}

void flush_all(void)
{
    pthread_mutex_lock(&g_lock);
    for (emu_stream *s = &g_default_stream; s != NULL; s = s->next) run_until(s, s->enqueued);
    pthread_mutex_unlock(&g_lock);
}

int stream_enqueue_copy(void *stream, void *dst, const void *src, size_t bytes)
{
    pthread_mutex_lock(&g_lock);
    emu_stream *s = stream_of(stream);
    size_t used = (size_t)(s->enqueued - s->base);
    if (used == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        void *grown = realloc(s->ops, cap * sizeof(queued_copy));
        if (grown == NULL) {
            pthread_mutex_unlock(&g_lock);
            return -1;
        }
        s->ops = static_cast<queued_copy *>(grown), s->cap = cap;
    }
    s->ops[used] = queued_copy{dst, src, bytes};
    s->enqueued++;
    pthread_mutex_unlock(&g_lock);
    return 0;
}

void stream_flush(void *stream)
{
    pthread_mutex_lock(&g_lock);
    emu_stream *s = stream_of(stream);
    run_until(s, s->enqueued);
    pthread_mutex_unlock(&g_lock);
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
    pthread_mutex_lock(&g_lock);
    emu_event *e = static_cast<emu_event *>(event);
    e->stream = stream_of(stream);
    e->point = e->stream->enqueued;
    e->asked = 0;
    pthread_mutex_unlock(&g_lock);
}

void event_flush(void *event)
{
    pthread_mutex_lock(&g_lock);
    emu_event *e = static_cast<emu_event *>(event);
    if (e->stream != NULL) run_until(e->stream, e->point);
    pthread_mutex_unlock(&g_lock);
}

int event_query(void *event)
{
    pthread_mutex_lock(&g_lock);
    emu_event *e = static_cast<emu_event *>(event);
    int done = e->stream == NULL || e->stream->done >= e->point;
    if (!done && e->asked) {
        run_until(e->stream, e->point);
        done = 1;
    }
    e->asked = !done;
    pthread_mutex_unlock(&g_lock);
    return done;
}

} // namespace bk_emu
