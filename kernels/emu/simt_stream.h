/* simt_stream.h: streams and events in the SIMT emulator, as ordered queues
 * that run as late as the program allows.
 *
 * Kernel launches in the emulator run at once, on the calling thread. Copies
 * queued on a stream (bk_device_upload_async and friends) do not: they wait in
 * their stream's queue until something needs them: a launch or a blocking copy
 * on the same stream (which first runs everything queued before it), a wait
 * for the stream, or a wait for an event recorded on it (which runs the queue
 * up to the event's point). So a program that uses data a copy on another
 * stream brings, without waiting for that copy's event, reads the old data in
 * the emulator every time, where a GPU would race; and a host buffer reused
 * before its queued copy ran is caught the same way. NULL is the default
 * stream, a stream like the others. The queues are guarded by one mutex. */
#ifndef BURST_KERNELS_EMU_SIMT_STREAM_H
#define BURST_KERNELS_EMU_SIMT_STREAM_H

#include <stddef.h>

namespace bk_emu
{

void *stream_create(void);
/* Runs what is still queued, then forgets the stream. */
void stream_destroy(void *stream);
/* Queues dst[bytes] = src[bytes] (memmove when it runs). */
int stream_enqueue_copy(void *stream, void *dst, const void *src, size_t bytes);
/* Runs everything queued on the stream. */
void stream_flush(void *stream);
/* Runs everything queued on every stream (what freeing device memory does:
 * cudaFree waits for the device). */
void flush_all(void);

void *event_create(void);
void event_destroy(void *event);
/* The event stands for what is queued on the stream now. */
void event_record(void *event, void *stream);
/* Runs the recorded stream's queue up to the event (nothing if never
 * recorded). */
void event_flush(void *event);
/* 1 when the stream ran the event's work (or it was never recorded); else 0
 * the first time it is asked since it was recorded, and the work up to the
 * event is run and 1 returned the next time (kernels/device.h). */
int event_query(void *event);

} // namespace bk_emu

#endif
