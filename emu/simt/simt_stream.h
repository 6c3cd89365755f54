/* simt_stream.h: streams and events in the SIMT emulator, as ordered queues
 * that run as late as the program allows.
 *
 * Copies queued on a stream (bk_device_upload_async and friends) wait in
 * their stream's queue until something needs them: a launch or a blocking
 * copy on the same stream (which first runs everything queued before it), a
 * wait for the stream, or a wait for an event recorded on it (which runs the
 * queue up to the event's point). NULL is the default stream, a stream like
 * the others. The queues are guarded by one mutex.
 *
 * Kernels (and the model of cuBLASLt's products) meet the queues in one of two
 * ways, chosen by set_streams or BK_EMU_STREAMS:
 *   "eager"     (the default) a launch runs what its stream has queued, then
 *               the kernel at once on the calling thread: a kernel never runs
 *               late, a copy always does.
 *   "deferred"  a launch is queued like a copy and runs when the program needs
 *               its stream's work: a wait for the stream or for an event behind
 *               it, a blocking copy on it, a stream that waits for such an
 *               event and is itself run, or freeing memory. Under a random
 *               schedule (BK_EMU_SCHEDULE=random:SEED) one enqueue in four also
 *               runs the oldest work of a stream drawn at random, so that
 *               streams interleave differently with every seed.
 * So a program that uses data another stream brings or computes without
 * waiting for its event reads the old data in one mode or the other, where a
 * GPU would race; and a host buffer reused before its queued copy ran is
 * caught the same way.
 *
 * A queued kernel that fails when it runs leaves a sticky error, as a fault
 * does on a GPU: every later runtime call fails with its message
 * (runtime_owned). */
#ifndef BURST_EMU_SIMT_STREAM_H
#define BURST_EMU_SIMT_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include <functional>
#include <tuple>
#include <type_traits>
#include <vector>

namespace bk_emu
{

/* "eager" or "deferred" (above); 0, or -1 for a spec it does not know. Takes
 * effect at the next launch. */
int set_streams(const char *spec);
/* 1 when launches are queued (deferred), else 0. */
int streams_deferred(void);

void *stream_create(void);
/* Runs what is still queued, then forgets the stream. */
void stream_destroy(void *stream);
/* Queues dst[bytes] = src[bytes] (memmove when it runs); 0, or -1 when queued
 * work has failed (the sticky error says which). */
int stream_enqueue_copy(void *stream, void *dst, const void *src, size_t bytes);
/* Memory a piece of work reads (write 0) or writes (1): bytes [p, p + bytes)
 * (a copy), or with bytes 0 the whole region p lies in (a kernel, whose
 * extent is not known): its arena piece (note_piece), else its allocation.
 * Pageable host memory is no region and not tracked. */
struct access {
    const void *p;
    int write;
    size_t bytes;
};

/* A kernel's accesses from its arguments: a pointer to const is read, any
 * other pointer written (and read). */
template <class T> inline void note_argument(std::vector<access> &, const T &) {}
template <class T> inline void note_argument(std::vector<access> &out, T *const &p)
{
    if (p != NULL) out.push_back(access{p, !std::is_const<T>::value, 0});
}
template <class... T> std::vector<access> accesses_of(const std::tuple<T...> &args)
{
    std::vector<access> out;
    std::apply([&](const T &...value) { (note_argument(out, value), ...); }, args);
    return out;
}

/* Issues work (a kernel, or a modelled library call: 0 on success), named
 * what for errors, with its accesses acc[n]: checked for hazards (below),
 * then run at once after the stream's queue (eager) or queued (deferred).
 * 0; -1 when queued work has failed (sticky_error says which); -2 for a
 * hazard or a failure of the work itself (last_error says which). */
int stream_launch(void *stream, const char *what, const access *acc, int n,
                  std::function<int()> work);

/* Hazards: every copy and launch (in both modes) is checked against the work
 * of other streams on the same bytes (a kernel's: its whole regions). A stream's work is ordered
 * after another's through an event it waits for (stream_wait_event) or a host synchronisation that
 * saw that work done (a stream or event synchronisation, an event query answering done, a blocking
 * copy, freeing memory) before the work was issued. A read or write of a region whose last write,
 * or a write of a region whose reads since, came from another stream and are not so ordered is
 * refused with both named (-2, last_error: "stream hazard: ..."): on a GPU the two may run at the
 * same time. On by default; set_hazard_check(0) or BK_EMU_HAZARDS=0 turns it off. */
void set_hazard_check(int on);
/* The arena tells where its pieces are (bytes > 0: handed out at p; 0: given
 * back): each is a region of its own, its record forgotten when it changes
 * hands. */
void note_piece(const void *p, size_t bytes);
/* kernels/device.h's bk_device_note_parts: a kernel's access (bytes 0)
 * through a pointer into one of the parts [p + i part_bytes, p + (i + 1)
 * part_bytes), i < parts, is that part's, not its whole region's; parts 0
 * forgets the parts noted at p. Marks stay keyed by the region, so earlier
 * accesses of the whole region still meet later ones of a part. */
void note_parts(const void *p, size_t part_bytes, int parts);
/* Runs everything queued on the stream; 0, or -1 when queued work failed
 * (the sticky error says which). */
int stream_flush(void *stream);
/* Runs everything queued on every stream (what freeing device memory does:
 * cudaFree waits for the device); 0 or -1 as stream_flush. */
int flush_all(void);

void *event_create(void);
void event_destroy(void *event);
/* The event stands for what is queued on the stream now. */
void event_record(void *event, void *stream);
/* Runs the recorded stream's queue up to the event (nothing if never
 * recorded); 0 or -1 as stream_flush. */
int event_flush(void *event);
/* cudaStreamWaitEvent: what is queued on stream later runs after the event's
 * work. Eager: that work runs now (the stream's next launch runs at once);
 * deferred: a marker in the stream's queue runs it when the stream gets
 * there. 0 or -1 as stream_flush. */
int stream_wait_event(void *stream, void *event);
/* 1 when the stream ran the event's work (or it was never recorded); else 0
 * the first time it is asked since it was recorded, and the work up to the
 * event is run and 1 returned the next time (kernels/device.h); -1 when that
 * work failed. */
int event_query(void *event);

/* Streams the emulator does not run: the model of NCCL's (emu/nccl/
 * nccl_emu_check.cc), whose operations the hazard check must see beside the
 * kernels and copies. Such a stream has an id among the emulator's; the host
 * issues its operations after what it has seen done, and sees them done itself
 * (an event of that runtime answering done, a stream synchronisation). */
/* A new such stream's id; -1 when out of memory. */
int external_stream_create(void);
/* Issues the next operation of external stream id, named what, with its
 * accesses acc[n] (byte ranges): checked against the other streams' work and
 * recorded as the hazards above; its number (1, 2, ...) in *op. 0, or -2 for
 * a hazard (last_error says which; nothing issued), -1 for an unknown id. */
int external_issue(int id, const char *what, const access *acc, int n, uint64_t *op);
/* The host has seen external stream id's operations up to number op done. */
void external_seen(int id, uint64_t op);

/* The sticky error left by queued work that failed: its message in why (len
 * bytes) and 1, or 0 when none. */
int sticky_error(char *why, size_t len);

} // namespace bk_emu

#endif
