/* simt_stream.cc: see simt_stream.h. */
#include "emu/simt/simt_stream.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <deque>
#include <map>
#include <new>
#include <utility>
#include <vector>

#include "emu/simt/simt_memory.h"
#include "emu/simt/simt_runtime.h"

namespace bk_emu
{
namespace
{

struct emu_stream;

/* What each stream's work is ordered after: [stream id] the number of that
 * stream's ops (copies, kernels, waits) that come before, through the
 * stream's own order, events it waited for, and host synchronisations. */
typedef std::vector<uint64_t> vclock;

void join(vclock &into, const vclock &from)
{
    if (into.size() < from.size()) into.resize(from.size(), 0);
    for (size_t i = 0; i < from.size(); i++) into[i] = std::max(into[i], from[i]);
}

uint64_t seen(const vclock &c, int id)
{
    return (size_t)id < c.size() ? c[(size_t)id] : 0;
}

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

/* A stream: op number done + 1 is ops.front(). Every stream is on the list
 * that starts at the default stream (id 0). */
struct emu_stream {
    std::deque<queued_op> ops;
    uint64_t done, enqueued;
    emu_stream *next;
    int id;
    vclock known; /* known[id] == enqueued */
};

struct emu_event {
    emu_stream *stream = NULL; /* NULL: never recorded */
    uint64_t point = 0;        /* the stream's enqueued count when recorded */
    int asked = 0;             /* a query answered "pending" since the record */
    vclock known;              /* the stream's when recorded */
};

/* An access of bytes [lo, hi) of a region by a stream's op number op. */
struct mark {
    int stream;
    uint64_t op;
    const char *what;
    const char *lo, *hi;
    bool write;
};

pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
emu_stream g_default_stream;
int g_next_id = 1;
vclock g_host;                                     /* what the host has seen complete */
std::map<const char *, size_t> g_pieces;           /* arena pieces: base, bytes */
std::map<const char *, std::vector<mark>> g_state; /* by region base: the accesses not
                                                        yet known done to the host */
std::map<int, emu_stream *> g_external;            /* external streams by id: never run */
/* note_parts: by base, the bytes of a part and the parts */
std::map<const char *, std::pair<size_t, int>> g_parts;
int g_hazard_check = 1;
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

/* The mode from BK_EMU_STREAMS and the hazard check from BK_EMU_HAZARDS,
 * once (the lock held). */
void read_mode(void)
{
    if (g_mode >= 0) return;
    const char *hazards = getenv("BK_EMU_HAZARDS"); /* "0": set_hazard_check(0) */
    if (hazards != NULL && strcmp(hazards, "0") == 0) g_hazard_check = 0;
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

/* The region p lies in, [*lo, *hi): its arena piece, else its allocation;
 * false when neither (pageable host memory). */
bool region_of(const void *p, const char **lo, const char **hi)
{
    const char *c = static_cast<const char *>(p);
    auto at = g_pieces.upper_bound(c);
    if (at != g_pieces.begin()) {
        --at;
        if (c < at->first + at->second) {
            *lo = at->first, *hi = at->first + at->second;
            return true;
        }
    }
    allocation a;
    if (!memory_find(p, &a)) return false;
    *lo = a.base, *hi = a.base + a.bytes;
    return true;
}

/* Narrows [*lo, *hi) to the noted part p lies in, if any (the lock held). */
void part_of(const void *p, const char **lo, const char **hi)
{
    const char *c = static_cast<const char *>(p);
    auto at = g_parts.upper_bound(c);
    if (at == g_parts.begin()) return;
    --at;
    size_t part = at->second.first, offset = (size_t)(c - at->first);
    if (part == 0 || offset >= part * (size_t)at->second.second) return;
    *lo = at->first + offset / part * part, *hi = *lo + part;
}

void name_stream(int id, char *buf, size_t len)
{
    if (id == 0)
        snprintf(buf, len, "the default stream");
    else if (g_external.count(id))
        snprintf(buf, len, "NCCL's stream %d", id);
    else
        snprintf(buf, len, "stream %d", id);
}

/* The hazard message, as the call's error: what on s reads or writes at p,
 * where m's access on another stream is unordered with it; -2. */
int report(const emu_stream *s, const char *what, const access &a, const mark &m)
{
    char here[32], there[32], where[400], msg[900];
    name_stream(s->id, here, sizeof here);
    name_stream(m.stream, there, sizeof there);
    memory_describe(a.p, where, sizeof where);
    snprintf(msg, sizeof msg,
             "stream hazard: %s on %s %s %s, which %s on %s %s (its op %llu) with nothing ordering "
             "the two (an event the stream waits for, or a host synchronisation)",
             what, here, a.write ? "writes" : "reads", where, m.what, there,
             m.write ? "wrote" : "reads", (unsigned long long)m.op);
    note_error(msg);
    return -2;
}

/* Records m among its region's marks, dropping those the host has seen done
 * (every later op is ordered after them) and those of m's stream that m
 * covers and stands for: an access of another stream unordered with one of
 * them is unordered with m, which is a write or as weak. */
void record(std::vector<mark> &marks, const mark &m)
{
    marks.erase(std::remove_if(marks.begin(), marks.end(),
                               [&m](const mark &o) {
                                   return seen(g_host, o.stream) >= o.op ||
                                          (o.stream == m.stream && m.lo <= o.lo && o.hi <= m.hi &&
                                           (m.write || !o.write));
                               }),
                marks.end());
    marks.push_back(m);
}

/* 0 when every access of op number op on s (its what) is ordered after the
 * other streams' accesses to the same bytes (a write after every access, a
 * read after every write), and the accesses recorded; else -2 with the first
 * hazard as the error (the lock held). */
int check_accesses(emu_stream *s, uint64_t op, const char *what, const access *acc, int n)
{
    if (!g_hazard_check) return 0;
    std::vector<mark> marks;
    std::vector<const char *> bases;
    for (int i = 0; i < n; i++) {
        const char *lo, *hi;
        if (!region_of(acc[i].p, &lo, &hi)) continue;
        const char *base = lo;
        if (acc[i].bytes)
            lo = static_cast<const char *>(acc[i].p), hi = lo + acc[i].bytes;
        else
            part_of(acc[i].p, &lo, &hi); /* a kernel: its whole region, or part */
        for (const mark &m : g_state[base])
            if (m.stream != s->id && (m.write || acc[i].write) && m.lo < hi && lo < m.hi &&
                seen(s->known, m.stream) < m.op)
                return report(s, what, acc[i], m);
        marks.push_back(mark{s->id, op, what, lo, hi, acc[i].write != 0});
        bases.push_back(base);
    }
    for (size_t i = 0; i < marks.size(); i++) record(g_state[bases[i]], marks[i]);
    return 0;
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

/* Runs all of s's work: the host has seen it (the lock held). */
void run_all(emu_stream *s)
{
    run_until(s, s->enqueued);
    join(g_host, s->known);
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

/* Issues s's next op (what, with its accesses acc[n]): ordered after what
 * the host has seen, its accesses checked and recorded, numbered (the lock
 * held); 0, or -2 for a hazard (nothing issued). */
int issue(emu_stream *s, const char *what, const access *acc, int n)
{
    join(s->known, g_host);
    if (check_accesses(s, s->enqueued + 1, what, acc, n) != 0) return -2;
    s->enqueued++;
    if (s->known.size() <= (size_t)s->id) s->known.resize((size_t)s->id + 1, 0);
    s->known[(size_t)s->id] = s->enqueued;
    return 0;
}

/* Issues op and appends it to the stream's queue (the lock held; the deque
 * aborts when out of memory, as allocations do without exceptions); 0, -1
 * when queued work has failed, -2 for a hazard. */
int push(emu_stream *s, queued_op &&op, const access *acc, int n)
{
    if (issue(s, op.name ? op.name : "cudaMemcpyAsync", acc, n) != 0) return -2;
    s->ops.push_back(std::move(op));
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
    s->id = g_next_id++;
    s->next = g_default_stream.next;
    g_default_stream.next = s;
    return s;
}

void stream_destroy(void *stream)
{
    if (stream == NULL) return;
    lock_guard hold;
    emu_stream *s = static_cast<emu_stream *>(stream);
    run_all(s);
    for (emu_stream *p = &g_default_stream; p != NULL; p = p->next)
        if (p->next == s) p->next = s->next;
    delete s;
}

int flush_all(void)
{
    lock_guard hold;
    for (emu_stream *s = &g_default_stream; s != NULL; s = s->next) run_all(s);
    return status();
}

int stream_enqueue_copy(void *stream, void *dst, const void *src, size_t bytes)
{
    lock_guard hold;
    read_mode();
    const access acc[2] = {{src, 0, bytes}, {dst, 1, bytes}};
    return push(stream_of(stream), queued_op{dst, src, bytes, {}, NULL, NULL, 0}, acc,
                bytes ? 2 : 0);
}

int stream_launch(void *stream, const char *name, const access *acc, int n,
                  std::function<int()> work)
{
    lock_guard hold;
    read_mode();
    emu_stream *s = stream_of(stream);
    if (g_mode == 1)
        return push(s, queued_op{NULL, NULL, 0, std::move(work), name, NULL, 0}, acc, n);
    run_all(s);
    if (status() != 0) return -1;
    if (issue(s, name, acc, n) != 0) return -2;
    s->done++; /* it runs now, on this thread */
    return work() == 0 ? 0 : -2;
}

int stream_flush(void *stream)
{
    lock_guard hold;
    run_all(stream_of(stream));
    return status();
}

void *event_create(void)
{
    return new (std::nothrow) emu_event();
}

void event_destroy(void *event)
{
    delete static_cast<emu_event *>(event);
}

void event_record(void *event, void *stream)
{
    lock_guard hold;
    emu_event *e = static_cast<emu_event *>(event);
    e->stream = stream_of(stream);
    e->point = e->stream->enqueued;
    e->asked = 0;
    e->known = e->stream->known;
}

int event_flush(void *event)
{
    lock_guard hold;
    emu_event *e = static_cast<emu_event *>(event);
    if (e->stream != NULL && is_live(e->stream)) run_until(e->stream, e->point);
    join(g_host, e->known);
    return status();
}

int stream_wait_event(void *stream, void *event)
{
    lock_guard hold;
    read_mode();
    emu_event *e = static_cast<emu_event *>(event);
    emu_stream *s = stream_of(stream);
    join(s->known, e->known);
    if (e->stream == NULL || !is_live(e->stream)) return status();
    if (g_mode != 1) {
        run_until(e->stream, e->point);
        return status();
    }
    return push(s, queued_op{NULL, NULL, 0, {}, NULL, e->stream, e->point}, NULL, 0);
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
    if (done) join(g_host, e->known);
    return status() == 0 ? done : -1;
}

void set_hazard_check(int on)
{
    lock_guard hold;
    g_hazard_check = on;
}

void note_piece(const void *p, size_t bytes)
{
    lock_guard hold;
    const char *base = static_cast<const char *>(p);
    g_state.erase(base);
    if (bytes)
        g_pieces[base] = bytes;
    else
        g_pieces.erase(base);
}

int external_stream_create(void)
{
    emu_stream *s = new (std::nothrow) emu_stream();
    if (s == NULL) return -1;
    lock_guard hold;
    s->id = g_next_id++;
    g_external[s->id] = s; /* kept to the end: its marks may outlive its owner */
    return s->id;
}

int external_issue(int id, const char *what, const access *acc, int n, uint64_t *op)
{
    lock_guard hold;
    read_mode();
    auto at = g_external.find(id);
    if (at == g_external.end()) return -1;
    if (issue(at->second, what, acc, n) != 0) return -2;
    *op = at->second->enqueued;
    return 0;
}

void external_seen(int id, uint64_t op)
{
    lock_guard hold;
    if (g_host.size() <= (size_t)id) g_host.resize((size_t)id + 1, 0);
    g_host[(size_t)id] = std::max(g_host[(size_t)id], op);
}

void note_parts(const void *p, size_t part_bytes, int parts)
{
    lock_guard hold;
    const char *base = static_cast<const char *>(p);
    if (parts > 0)
        g_parts[base] = std::make_pair(part_bytes, parts);
    else
        g_parts.erase(base);
}

int sticky_error(char *why, size_t len)
{
    lock_guard hold;
    if (g_sticky[0] == '\0') return 0;
    snprintf(why, len, "%s", g_sticky);
    return 1;
}

} // namespace bk_emu
