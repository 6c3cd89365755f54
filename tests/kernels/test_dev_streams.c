/* test_dev_streams.c: streams, events, queued copies and page-locked memory
 * (kernels/device.h). On any device: work on one stream runs in order, a
 * polled event query ends with the work done, and a wait for an event orders
 * two streams. In the emulator also what makes it a
 * useful check of the engine: a kernel reading what another stream writes
 * with no wait between is refused as a hazard, and queued copies run as late
 * as allowed, so a host buffer changed before its copy ran is what the device
 * gets (emu/simt/simt_stream.h). */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/kernels/dev_util.h"
#include "tests/lib/arrays.h"
#include "tests/lib/check_main.h"

#define N 1000

/* h[i] = i + 1 */
/* 1, 2, ..., N in page-locked memory (queued copies take no other), freed
 * with bk_host_pinned_free. */
static float *counting(void)
{
    float *h = NULL;
    ck_assert_int_eq(bk_host_pinned_malloc(N * sizeof *h, (void **)&h), BK_OK);
    for (int i = 0; i < N; i++) h[i] = (float)(i + 1);
    return h;
}

static bk_queue queue_on(void *stream)
{
    bk_queue q = {BK_DEVICE, stream, 0, NULL};
    return q;
}

static void assert_scaled(const float *got, const float *h, float by)
{
    for (int i = 0; i < N; i++)
        ck_assert_msg(got[i] == by * h[i], "element %d is %g, expected %g", i, got[i], by * h[i]);
}

START_TEST(one_stream_runs_in_order)
{
    void *s, *ev;
    ck_assert_int_eq(bk_device_stream_create(&s), BK_OK);
    ck_assert_int_eq(bk_device_event_create(&ev), BK_OK);
    bk_queue q = queue_on(s);
    float *h = counting(), *out = NULL, *x = NULL;
    ck_assert_int_eq(bk_host_pinned_malloc(N * sizeof *out, (void **)&out), BK_OK);
    memset(out, 0, N * sizeof *out);
    ck_assert_int_eq(bk_device_malloc(N * sizeof *x, (void **)&x), BK_OK);
    ck_assert_int_eq(bk_device_upload_async(&q, x, h, N * sizeof *x), BK_OK);
    ck_assert_int_eq(bk_scale(&q, N, x, 2.0f), BK_OK);
    ck_assert_int_eq(bk_device_download_async(&q, out, x, N * sizeof *x), BK_OK);
    ck_assert_int_eq(bk_device_event_record(ev, &q), BK_OK);
    if (!strcmp(bk_device_backend_name(), "emulator"))
        ck_assert_msg(out[0] == 0.0f, "the emulator ran a queued download before it was needed");
    ck_assert_int_eq(bk_device_event_sync(ev), BK_OK);
    assert_scaled(out, h, 2.0f);
    ck_assert_int_eq(bk_device_free(x), BK_OK);
    ck_assert_int_eq(bk_host_pinned_free(out), BK_OK);
    ck_assert_int_eq(bk_device_event_destroy(ev), BK_OK);
    ck_assert_int_eq(bk_device_stream_destroy(s), BK_OK);
    bk_host_pinned_free(h);
}
END_TEST

/* A query does not wait: polled until it answers 1, the copy has landed. In
 * the emulator the first query of work not yet run answers 0 and leaves the
 * destination as it was. */
START_TEST(an_event_query_polls_without_waiting)
{
    void *s, *ev;
    ck_assert_int_eq(bk_device_stream_create(&s), BK_OK);
    ck_assert_int_eq(bk_device_event_create(&ev), BK_OK);
    ck_assert_int_eq(bk_device_event_query(ev), 1); /* never recorded */
    bk_queue q = queue_on(s);
    float *h = counting(), *out = NULL, *x = dev_put(h, N * sizeof *h);
    ck_assert_int_eq(bk_host_pinned_malloc(N * sizeof *out, (void **)&out), BK_OK);
    memset(out, 0, N * sizeof *out);
    ck_assert_int_eq(bk_scale(&q, N, x, 5.0f), BK_OK);
    ck_assert_int_eq(bk_device_download_async(&q, out, x, N * sizeof *x), BK_OK);
    ck_assert_int_eq(bk_device_event_record(ev, &q), BK_OK);
    int first = bk_device_event_query(ev), polls = 1, answer = first;
    ck_assert_msg(first == 0 || first == 1, "query answered %d", first);
    if (!strcmp(bk_device_backend_name(), "emulator"))
        ck_assert_msg(first == 0 && out[N - 1] == 0.0f,
                      "the emulator's first query ran the pending copy (answer %d)", first);
    while (answer == 0 && polls < 100000000) answer = bk_device_event_query(ev), polls++;
    ck_assert_int_eq(answer, 1);
    assert_scaled(out, h, 5.0f);
    ck_assert_int_eq(bk_device_event_query(ev), 1); /* stays done */
    ck_assert_int_eq(bk_device_event_query(NULL), -(int)BK_ERR_ARG);
    dev_free(x);
    ck_assert_int_eq(bk_host_pinned_free(out), BK_OK);
    ck_assert_int_eq(bk_device_event_destroy(ev), BK_OK);
    ck_assert_int_eq(bk_device_stream_destroy(s), BK_OK);
    bk_host_pinned_free(h);
}
END_TEST

/* A copy on stream a, a kernel on stream b after waiting for a's event. */
START_TEST(an_event_orders_two_streams)
{
    void *sa, *sb, *ev;
    ck_assert_int_eq(bk_device_stream_create(&sa), BK_OK);
    ck_assert_int_eq(bk_device_stream_create(&sb), BK_OK);
    ck_assert_int_eq(bk_device_event_create(&ev), BK_OK);
    bk_queue a = queue_on(sa), b = queue_on(sb);
    float *h = counting(), *out = test_zeros_f(N), *x = dev_put(out, N * sizeof *out);
    ck_assert_int_eq(bk_device_upload_async(&a, x, h, N * sizeof *x), BK_OK);
    ck_assert_int_eq(bk_device_event_record(ev, &a), BK_OK);
    ck_assert_int_eq(bk_device_stream_wait_event(&b, ev), BK_OK);
    ck_assert_int_eq(bk_scale(&b, N, x, 3.0f), BK_OK);
    ck_assert_int_eq(bk_device_download(&b, out, x, N * sizeof *x), BK_OK);
    assert_scaled(out, h, 3.0f);
    dev_free(x);
    ck_assert_int_eq(bk_device_event_destroy(ev), BK_OK);
    ck_assert_int_eq(bk_device_stream_destroy(sa), BK_OK);
    ck_assert_int_eq(bk_device_stream_destroy(sb), BK_OK);
    bk_host_pinned_free(h), free(out);
}
END_TEST

/* Emulator only: stream b's kernel reads x, which a copy queued on stream a
 * writes, with no wait between them: the launch is refused naming both (on a
 * GPU the two race). Once the host has waited for a, the same launch is
 * ordered after the copy and runs. */
START_TEST(a_missing_wait_is_reported)
{
    void *sa, *sb;
    ck_assert_int_eq(bk_device_stream_create(&sa), BK_OK);
    ck_assert_int_eq(bk_device_stream_create(&sb), BK_OK);
    bk_queue a = queue_on(sa), b = queue_on(sb);
    float *h = counting(), *out = test_zeros_f(N), *x = dev_put(out, N * sizeof *out);
    ck_assert_int_eq(bk_device_upload_async(&a, x, h, N * sizeof *x), BK_OK);
    ck_assert_int_eq(bk_scale(&b, N, x, 3.0f), BK_ERR_DEVICE); /* no wait for a */
    const char *why = bk_kernel_error();
    ck_assert_msg(strstr(why, "stream hazard") && strstr(why, "writes") &&
                      strstr(why, "cudaMemcpyAsync on stream"),
                  "%s", why);
    ck_assert_int_eq(bk_device_sync(&a), BK_OK);
    ck_assert_int_eq(bk_scale(&b, N, x, 3.0f), BK_OK);
    ck_assert_int_eq(bk_device_download(&b, out, x, N * sizeof *x), BK_OK);
    assert_scaled(out, h, 3.0f);
    dev_free(x);
    ck_assert_int_eq(bk_device_stream_destroy(sa), BK_OK);
    ck_assert_int_eq(bk_device_stream_destroy(sb), BK_OK);
    bk_host_pinned_free(h), free(out);
}
END_TEST

/* Emulator only: a queued upload reads its host buffer when it runs. */
START_TEST(a_queued_upload_reads_the_host_buffer_late)
{
    void *s;
    ck_assert_int_eq(bk_device_stream_create(&s), BK_OK);
    bk_queue q = queue_on(s);
    float *h = counting(), *out = test_zeros_f(N), *x = dev_put(out, N * sizeof *out);
    ck_assert_int_eq(bk_device_upload_async(&q, x, h, N * sizeof *x), BK_OK);
    h[0] = -7.0f; /* changed before the stream ran the copy */
    ck_assert_int_eq(bk_device_download(&q, out, x, N * sizeof *x), BK_OK);
    ck_assert_float_eq(out[0], -7.0f);
    dev_free(x);
    ck_assert_int_eq(bk_device_stream_destroy(s), BK_OK);
    bk_host_pinned_free(h), free(out);
}
END_TEST

/* Emulator only: a queued copy whose host side is pageable is refused (on a
 * GPU it runs synchronously and overlaps nothing); page-locked memory passes,
 * and so does a part of it. */
START_TEST(a_queued_copy_of_pageable_memory_is_refused)
{
    bk_queue q = queue_on(NULL);
    float *pageable = test_zeros_f(N), *pinned = counting(), *x = dev_put(pageable, N * 4);
    ck_assert_int_eq(bk_device_upload_async(&q, x, pageable, N * sizeof *x), BK_ERR_DEVICE);
    ck_assert_msg(strstr(bk_kernel_error(), "pageable") != NULL, "%s", bk_kernel_error());
    ck_assert_int_eq(bk_device_download_async(&q, pageable, x, N * sizeof *x), BK_ERR_DEVICE);
    ck_assert_int_eq(bk_device_upload_async(&q, x, pinned + 1, (N - 1) * sizeof *x), BK_OK);
    ck_assert_int_eq(bk_device_upload_async(&q, x, pinned + 1, N * sizeof *x), BK_ERR_DEVICE);
    ck_assert_int_eq(bk_device_sync(&q), BK_OK);
    ck_assert_int_eq(bk_host_pinned_free(pageable), BK_ERR_DEVICE); /* not page-locked */
    dev_free(x);
    bk_host_pinned_free(pinned), free(pageable);
}
END_TEST

START_TEST(bad_calls_are_refused)
{
    void *ev, *p = &ev;
    bk_queue host = bk_host_queue(), dev = queue_on(NULL);
    ck_assert_int_eq(bk_device_event_create(NULL), BK_ERR_ARG);
    ck_assert_int_eq(bk_device_stream_create(NULL), BK_ERR_ARG);
    ck_assert_int_eq(bk_device_event_create(&ev), BK_OK);
    ck_assert_int_eq(bk_device_event_record(ev, &host), BK_ERR_ARG);
    ck_assert_int_eq(bk_device_event_record(NULL, &dev), BK_ERR_ARG);
    ck_assert_int_eq(bk_device_stream_wait_event(&dev, NULL), BK_ERR_ARG);
    ck_assert_int_eq(bk_device_event_sync(ev), BK_OK); /* never recorded: complete */
    ck_assert_int_eq(bk_device_upload_async(&dev, NULL, ev, 4), BK_ERR_ARG);
    ck_assert_int_eq(bk_host_pinned_malloc(0, &p), BK_OK);
    ck_assert_ptr_null(p);
    ck_assert_int_eq(bk_host_pinned_malloc(16, NULL), BK_ERR_ARG);
    ck_assert_int_eq(bk_device_event_destroy(ev), BK_OK);
}
END_TEST

/* A rank picks its GPU by its local index: any index is valid (taken modulo
 * the count); the emulator has one device and no memory of its own. */
START_TEST(a_device_is_chosen_by_index)
{
    int count = 0;
    ck_assert_int_eq(bk_device_use(5, &count), BK_OK);
    ck_assert_int_ge(count, 1);
    ck_assert_int_eq(bk_device_use(-1, &count), BK_ERR_ARG);
    size_t free_bytes = 0, total = 0;
    bk_status st = bk_device_memory(&free_bytes, &total);
    if (!strcmp(bk_device_backend_name(), "emulator")) {
        ck_assert_int_eq(count, 1);
        ck_assert_int_eq(st, BK_ERR_UNSUPPORTED);
    } else {
        ck_assert_int_eq(st, BK_OK);
        ck_assert(total > 0 && free_bytes <= total);
    }
    ck_assert_int_eq(bk_device_memory(NULL, &total), BK_ERR_ARG);
}
END_TEST

/* The CUDA runtime documents that a child forked after the parent initialised
 * it cannot use it: every call fails there (cudaErrorInitializationError).
 * The emulated runtime refuses the same, so that code forking after device
 * setup (a test runner, a launcher) fails in make check as on a GPU. */
START_TEST(a_forked_child_cannot_use_the_device)
{
    const uint64_t word = 42;
    void *p = dev_put(&word, sizeof word), *s = NULL; /* the runtime is initialised here */
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        void *q = NULL;
        int refused = bk_device_malloc(64, &q) == BK_ERR_DEVICE &&
                      bk_device_stream_create(&s) == BK_ERR_DEVICE;
        _exit(refused ? 0 : 1);
    }
    int status = -1;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "a forked child could still allocate device memory or a stream");
    ck_assert_int_eq(bk_device_stream_create(&s), BK_OK); /* the parent still can */
    ck_assert_int_eq(bk_device_stream_destroy(s), BK_OK);
    dev_free(p);
}
END_TEST

/* A kernel is given device memory only: a host pointer is refused before the
 * launch, as cudaPointerGetAttributes makes the GPU's check refuse it. */
START_TEST(a_host_pointer_is_refused_by_a_kernel)
{
    bk_queue q = queue_on(NULL);
    float host[64];
    ck_assert_int_eq(bk_fill(&q, 64, host, 1.0f), BK_ERR_UNSUPPORTED);
    float *d = dev_put(host, sizeof host);
    ck_assert_int_eq(bk_fill(&q, 64, d, 1.0f), BK_OK);
    ck_assert_int_eq(bk_fill(&q, 32, d + 32, 1.0f), BK_OK); /* inside the allocation */
    dev_free(d);
}
END_TEST

/* The emulator's red zones: a kernel writing one element past the end of its
 * buffer is reported at the next synchronisation and when the buffer is freed
 * (a GPU may corrupt the neighbouring allocation silently). */
START_TEST(a_write_past_the_end_is_reported)
{
    bk_queue q = queue_on(NULL);
    float host[100] = {0};
    float *d = dev_put(host, sizeof host);
    ck_assert_int_eq(bk_fill(&q, 100, d, 2.0f), BK_OK);
    ck_assert_int_eq(bk_device_sync(&q), BK_OK);
    ck_assert_int_eq(bk_fill(&q, 101, d, 2.0f), BK_OK); /* the planted overrun */
    ck_assert_int_eq(bk_device_sync(&q), BK_ERR_DEVICE);
    ck_assert_msg(strstr(bk_kernel_error(), "past the end of an allocation of 400 bytes"), "%s",
                  bk_kernel_error());
    ck_assert_int_eq(bk_device_free(d), BK_ERR_DEVICE);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("dev_streams");
    TCase *tc = check_tcase(s, "streams", 120);
    check_add_tests(tc, one_stream_runs_in_order, an_event_query_polls_without_waiting,
                    an_event_orders_two_streams, bad_calls_are_refused, a_device_is_chosen_by_index,
                    a_forked_child_cannot_use_the_device, a_host_pointer_is_refused_by_a_kernel);
    /* what only the emulator promises (on a GPU these are races or silent corruption) */
    if (!strcmp(bk_device_backend_name(), "emulator"))
        check_add_tests(check_tcase(s, "emulator", 120), a_missing_wait_is_reported,
                        a_queued_upload_reads_the_host_buffer_late,
                        a_write_past_the_end_is_reported,
                        a_queued_copy_of_pageable_memory_is_refused);
    return dev_test_main(s);
}
