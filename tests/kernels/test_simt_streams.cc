/* test_simt_streams.cc: the emulator's two stream modes (emu/simt/
 * simt_stream.h, bk_emu::set_streams) against planted ordering bugs, built only
 * here. Eager launches run at once and copies late; deferred launches wait in
 * their stream's queue like copies. Each bug gives the right answer in one
 * mode and old data in the other, or old data in deferred mode, which the
 * right code never does: a kernel on one stream reading what a kernel on
 * another wrote without waiting for its event; an event recorded before the
 * kernel it should cover; a host reading a download it did not wait for. The
 * negative controls (the same work with the waits CUDA requires) give the
 * right answer in both modes and under random run points of every seed. A
 * queued kernel that fails leaves a sticky error that every later call
 * reports, and a bad configuration is refused at the launch, as on a GPU.
 * A buffer noted as parts (bk_device_note_parts) lets kernels on different
 * parts run on different streams, and no more. */
#include <check.h>
#include <string.h>

#include "kernels/cuda/bk_cuda.cuh"
#include "kernels/device.h"
#include "tests/lib/check_main.h"

enum { N = 256 };

/* x[i] = value */
__global__ void k_set(float *x, float value)
{
    x[blockIdx.x * blockDim.x + threadIdx.x] = value;
}

/* y[i] = x[i] + 1 */
__global__ void k_add_one(const float *x, float *y)
{
    int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    y[i] = x[i] + 1.0f;
}

/* The planted fault: thread 0 of each block waits at a barrier its block's
 * other threads never reach. */
__global__ void k_partial_barrier(float *x)
{
    if (threadIdx.x == 0) __syncthreads();
    x[threadIdx.x] = 1.0f;
}

/* Two streams, an event and two device buffers of N floats. */
struct rig {
    void *sa, *sb, *ev;
    float *x, *y;
};

static rig rig_make(void)
{
    rig r;
    ck_assert_int_eq(bk_device_stream_create(&r.sa), BK_OK);
    ck_assert_int_eq(bk_device_stream_create(&r.sb), BK_OK);
    ck_assert_int_eq(bk_device_event_create(&r.ev), BK_OK);
    ck_assert_int_eq(bk_device_malloc(N * sizeof(float), (void **)&r.x), BK_OK);
    ck_assert_int_eq(bk_device_malloc(N * sizeof(float), (void **)&r.y), BK_OK);
    bk_queue q = {BK_DEVICE, NULL, 0, NULL};
    ck_assert_int_eq(BK_LAUNCH(k_set, dim3(N / 64), dim3(64), 0, NULL, r.x, 0.0f), BK_OK);
    ck_assert_int_eq(BK_LAUNCH(k_set, dim3(N / 64), dim3(64), 0, NULL, r.y, 0.0f), BK_OK);
    ck_assert_int_eq(bk_device_sync(&q), BK_OK);
    return r;
}

static void rig_free(rig *r)
{
    ck_assert_int_eq(bk_device_free(r->x), BK_OK);
    ck_assert_int_eq(bk_device_free(r->y), BK_OK);
    ck_assert_int_eq(bk_device_event_destroy(r->ev), BK_OK);
    ck_assert_int_eq(bk_device_stream_destroy(r->sa), BK_OK);
    ck_assert_int_eq(bk_device_stream_destroy(r->sb), BK_OK);
}

static bk_queue on(void *stream)
{
    bk_queue q = {BK_DEVICE, stream, 0, NULL};
    return q;
}

/* d[0], read back on the default stream. */
static float first_of(const float *d)
{
    float v = -1.0f;
    bk_queue q = on(NULL);
    ck_assert_int_eq(bk_device_download(&q, &v, d, sizeof v), BK_OK);
    return v;
}

/* d[0] as a blocking download on stream b reads it; then stream a is waited
 * for and the rig freed. */
static float rig_finish(rig *r, const float *d)
{
    bk_queue a = on(r->sa), b = on(r->sb);
    float v = -1.0f;
    ck_assert_int_eq(bk_device_download(&b, &v, d, sizeof v), BK_OK);
    ck_assert_int_eq(bk_device_sync(&a), BK_OK);
    rig_free(r);
    return v;
}

static void use_mode(const char *mode)
{
    ck_assert_int_eq(bk_emu::set_streams(mode), 0);
    ck_assert_int_eq(bk_emu::streams_deferred(), strcmp(mode, "deferred") == 0);
}

/* x = 5 on stream a; y = x + 1 on stream b; the host syncs b and reads y. With
 * wait, b's kernel waits for a's event: y = 6 in every mode. */
static float cross_stream(int wait)
{
    rig r = rig_make();
    bk_queue a = on(r.sa), b = on(r.sb);
    ck_assert_int_eq(BK_LAUNCH(k_set, dim3(N / 64), dim3(64), 0, r.sa, r.x, 5.0f), BK_OK);
    ck_assert_int_eq(bk_device_event_record(r.ev, &a), BK_OK);
    if (wait) ck_assert_int_eq(bk_device_stream_wait_event(&b, r.ev), BK_OK);
    ck_assert_int_eq(BK_LAUNCH(k_add_one, dim3(N / 64), dim3(64), 0, r.sb, r.x, r.y), BK_OK);
    ck_assert_int_eq(bk_device_sync(&b), BK_OK);
    return rig_finish(&r, r.y);
}

/* With the hazard check, the unordered read is refused at its launch in both
 * modes, naming both kernels and both streams. */
START_TEST(a_cross_stream_read_without_a_wait_is_refused)
{
    for (const char *mode : {"eager", "deferred"}) {
        use_mode(mode);
        rig r = rig_make();
        ck_assert_int_eq(BK_LAUNCH(k_set, dim3(N / 64), dim3(64), 0, r.sa, r.x, 5.0f), BK_OK);
        ck_assert_int_eq(BK_LAUNCH(k_add_one, dim3(N / 64), dim3(64), 0, r.sb, r.x, r.y),
                         BK_ERR_DEVICE);
        const char *why = bk_kernel_error();
        ck_assert_msg(strstr(why, "stream hazard: k_add_one on stream") &&
                          strstr(why, "reads device memory") &&
                          strstr(why, "which k_set on stream") && strstr(why, "wrote"),
                      "%s", why);
        ck_assert_float_eq(rig_finish(&r, r.y), 0.0f); /* it did not run */
    }
}
END_TEST

/* A buffer noted as parts (bk_device_note_parts): kernels on two streams,
 * each on its own half, are no hazard; before the note, and after it is
 * forgotten, the same two are (a kernel is taken to touch its whole buffer);
 * and a kernel on the whole buffer before the note still meets one on a part
 * after it. */
START_TEST(kernels_on_noted_parts_of_a_buffer_are_apart)
{
    use_mode("deferred");
    rig r = rig_make();
    bk_queue a = on(r.sa), b = on(r.sb);
    float *lo = r.x, *hi = r.x + N / 2;
    const size_t half = N / 2 * sizeof(float);
    ck_assert_int_eq(BK_LAUNCH(k_set, dim3(N / 128), dim3(64), 0, r.sa, lo, 1.0f), BK_OK);
    ck_assert_int_eq(BK_LAUNCH(k_set, dim3(N / 128), dim3(64), 0, r.sb, hi, 2.0f), BK_ERR_DEVICE);
    ck_assert_int_eq(bk_device_sync(&a), BK_OK);
    bk_device_note_parts(r.x, half, 2);
    ck_assert_int_eq(BK_LAUNCH(k_set, dim3(N / 128), dim3(64), 0, r.sa, lo, 3.0f), BK_OK);
    ck_assert_int_eq(BK_LAUNCH(k_set, dim3(N / 128), dim3(64), 0, r.sb, hi, 4.0f), BK_OK);
    ck_assert_int_eq(BK_LAUNCH(k_add_one, dim3(N / 128), dim3(64), 0, r.sb, lo, r.y),
                     BK_ERR_DEVICE); /* lo is still a's */
    bk_device_note_parts(r.x, 0, 0);
    ck_assert_int_eq(bk_device_sync(&a), BK_OK);
    ck_assert_int_eq(BK_LAUNCH(k_set, dim3(N / 64), dim3(64), 0, r.sa, r.x, 5.0f),
                     BK_ERR_DEVICE); /* b's kernel on hi, unordered, is in the whole buffer */
    ck_assert_int_eq(bk_device_sync(&b), BK_OK);
    ck_assert_int_eq(BK_LAUNCH(k_set, dim3(N / 64), dim3(64), 0, r.sa, r.x, 5.0f), BK_OK);
    bk_device_note_parts(r.x, half, 2);
    ck_assert_int_eq(BK_LAUNCH(k_set, dim3(N / 128), dim3(64), 0, r.sb, hi, 6.0f), BK_ERR_DEVICE);
    bk_device_note_parts(r.x, 0, 0);
    ck_assert_int_eq(bk_device_sync(&a), BK_OK);
    ck_assert_float_eq(rig_finish(&r, r.x), 5.0f);
}
END_TEST

/* Without the check, the data shows the bug: right eagerly, old deferred. */
START_TEST(a_cross_stream_read_without_a_wait_reads_old_data_when_deferred)
{
    bk_emu::set_hazard_check(0);
    use_mode("eager");
    ck_assert_float_eq(cross_stream(0), 6.0f); /* eager hides the bug */
    ck_assert_float_eq(cross_stream(1), 6.0f);
    use_mode("deferred");
    ck_assert_float_eq(cross_stream(0), 1.0f); /* b's kernel ran before a's */
    ck_assert_float_eq(cross_stream(1), 6.0f); /* the control */
    bk_emu::set_hazard_check(1);
    ck_assert_float_eq(cross_stream(1), 6.0f); /* the control passes the check */
}
END_TEST

/* The event is recorded before the kernel it should cover; the host waits
 * for it and downloads on another stream. */
static float early_event(int right)
{
    rig r = rig_make();
    bk_queue a = on(r.sa);
    if (!right) ck_assert_int_eq(bk_device_event_record(r.ev, &a), BK_OK);
    ck_assert_int_eq(BK_LAUNCH(k_set, dim3(N / 64), dim3(64), 0, r.sa, r.x, 3.0f), BK_OK);
    if (right) ck_assert_int_eq(bk_device_event_record(r.ev, &a), BK_OK);
    ck_assert_int_eq(bk_device_event_sync(r.ev), BK_OK);
    return rig_finish(&r, r.x);
}

START_TEST(an_event_recorded_before_its_kernel_is_caught_when_deferred)
{
    bk_emu::set_hazard_check(0);
    use_mode("eager");
    ck_assert_float_eq(early_event(0), 3.0f);
    use_mode("deferred");
    ck_assert_float_eq(early_event(0), 0.0f);
    ck_assert_float_eq(early_event(1), 3.0f);
}
END_TEST

/* With the check, the download that trusted the early event is refused: the
 * host saw the event, which does not cover the kernel that wrote x. */
START_TEST(an_event_recorded_before_its_kernel_is_refused)
{
    use_mode("eager");
    rig r = rig_make();
    bk_queue a = on(r.sa), b = on(r.sb);
    ck_assert_int_eq(bk_device_event_record(r.ev, &a), BK_OK);
    ck_assert_int_eq(BK_LAUNCH(k_set, dim3(N / 64), dim3(64), 0, r.sa, r.x, 3.0f), BK_OK);
    ck_assert_int_eq(bk_device_event_sync(r.ev), BK_OK);
    float x = -1.0f;
    ck_assert_int_eq(bk_device_download(&b, &x, r.x, sizeof x), BK_ERR_DEVICE);
    ck_assert_msg(strstr(bk_kernel_error(), "stream hazard: cudaMemcpyAsync on stream") &&
                      strstr(bk_kernel_error(), "which k_set on stream"),
                  "%s", bk_kernel_error());
    ck_assert_int_eq(bk_device_sync(&a), BK_OK); /* the host waits for a: now ordered */
    ck_assert_float_eq(rig_finish(&r, r.x), 3.0f);
    ck_assert_float_eq(early_event(1), 3.0f); /* an event recorded after it: ordered too */
}
END_TEST

/* A download queued on a stream behind a kernel, read by the host before it
 * waits for the stream. */
START_TEST(a_download_read_before_its_wait_is_caught_when_deferred)
{
    use_mode("deferred");
    rig r = rig_make();
    bk_queue a = on(r.sa);
    float *h = NULL;
    ck_assert_int_eq(bk_host_pinned_malloc(sizeof(float), (void **)&h), BK_OK);
    h[0] = -1.0f;
    ck_assert_int_eq(BK_LAUNCH(k_set, dim3(N / 64), dim3(64), 0, r.sa, r.x, 7.0f), BK_OK);
    ck_assert_int_eq(bk_device_download_async(&a, h, r.x, sizeof(float)), BK_OK);
    ck_assert_float_eq(h[0], -1.0f); /* neither the kernel nor the copy ran */
    ck_assert_int_eq(bk_device_sync(&a), BK_OK);
    ck_assert_float_eq(h[0], 7.0f);
    ck_assert_int_eq(bk_host_pinned_free(h), BK_OK);
    rig_free(&r);
}
END_TEST

/* The right code under random run points: a chain over two streams with
 * waits both ways gives the same answer for every seed. */
START_TEST(waits_order_streams_under_random_run_points)
{
    use_mode("deferred");
    for (int seed = 1; seed <= 8; seed++) {
        char spec[32];
        snprintf(spec, sizeof spec, "random:%d", seed);
        ck_assert_int_eq(bk_emu::set_schedule(spec), 0);
        rig r = rig_make();
        bk_queue a = on(r.sa), b = on(r.sb);
        void *back;
        ck_assert_int_eq(bk_device_event_create(&back), BK_OK);
        for (int round = 0; round < 4; round++) {
            ck_assert_int_eq(BK_LAUNCH(k_add_one, dim3(N / 64), dim3(64), 0, r.sa, r.y, r.x),
                             BK_OK); /* x = y + 1 */
            ck_assert_int_eq(bk_device_event_record(r.ev, &a), BK_OK);
            ck_assert_int_eq(bk_device_stream_wait_event(&b, r.ev), BK_OK);
            ck_assert_int_eq(BK_LAUNCH(k_add_one, dim3(N / 64), dim3(64), 0, r.sb, r.x, r.y),
                             BK_OK); /* y = x + 1 */
            ck_assert_int_eq(bk_device_event_record(back, &b), BK_OK);
            ck_assert_int_eq(bk_device_stream_wait_event(&a, back), BK_OK);
        }
        ck_assert_int_eq(bk_device_sync(&a), BK_OK);
        ck_assert_int_eq(bk_device_sync(&b), BK_OK);
        ck_assert_msg(first_of(r.y) == 8.0f, "seed %d: y = %g, expected 8", seed,
                      (double)first_of(r.y));
        ck_assert_int_eq(bk_device_event_destroy(back), BK_OK);
        rig_free(&r);
    }
    ck_assert_int_eq(bk_emu::set_schedule("forward"), 0);
}
END_TEST

/* A queued kernel that fails when its stream runs leaves an error that the
 * synchronisation and every later call report. */
START_TEST(a_failed_queued_kernel_leaves_a_sticky_error)
{
    use_mode("deferred");
    bk_emu::set_fatal(0);
    rig r = rig_make();
    bk_queue a = on(r.sa);
    ck_assert_int_eq(BK_LAUNCH(k_partial_barrier, dim3(1), dim3(64), 0, r.sa, r.x), BK_OK);
    ck_assert_int_eq(bk_device_sync(&a), BK_ERR_DEVICE);
    ck_assert_msg(strstr(bk_kernel_error(), "k_partial_barrier") != NULL, "%s", bk_kernel_error());
    void *p = NULL;
    ck_assert_int_eq(bk_device_malloc(64, &p), BK_ERR_DEVICE);
    ck_assert_int_eq(BK_LAUNCH(k_set, dim3(1), dim3(64), 0, r.sb, r.y, 1.0f), BK_ERR_DEVICE);
    ck_assert_msg(strstr(bk_kernel_error(), "queued kernel k_partial_barrier failed") != NULL, "%s",
                  bk_kernel_error());
    ck_assert_int_eq(bk_device_free(r.x), BK_ERR_DEVICE); /* freed all the same */
    ck_assert_int_eq(bk_device_free(r.y), BK_ERR_DEVICE);
    bk_device_event_destroy(r.ev);
    bk_device_stream_destroy(r.sa), bk_device_stream_destroy(r.sb);
}
END_TEST

START_TEST(a_bad_configuration_is_refused_at_the_launch)
{
    use_mode("deferred");
    bk_emu::set_fatal(0);
    rig r = rig_make();
    ck_assert_int_eq(BK_LAUNCH(k_set, dim3(1), dim3(2048), 0, r.sa, r.x, 1.0f), BK_ERR_DEVICE);
    ck_assert_msg(strstr(bk_kernel_error(), "exceeds CUDA's limits") != NULL, "%s",
                  bk_kernel_error());
    bk_queue a = on(r.sa);
    ck_assert_int_eq(bk_device_sync(&a), BK_OK); /* nothing was queued, nothing is sticky */
    rig_free(&r);
}
END_TEST

START_TEST(unknown_modes_are_refused)
{
    const char *bad[] = {"", "lazy", "Deferred", "eager ", NULL};
    for (const char *const *s = bad; *s; s++)
        ck_assert_msg(bk_emu::set_streams(*s) == -1, "'%s' was accepted", *s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("simt_streams");
    TCase *tc = check_tcase(s, "streams", 60);
    tcase_add_test(tc, a_cross_stream_read_without_a_wait_is_refused);
    tcase_add_test(tc, a_cross_stream_read_without_a_wait_reads_old_data_when_deferred);
    tcase_add_test(tc, kernels_on_noted_parts_of_a_buffer_are_apart);
    tcase_add_test(tc, an_event_recorded_before_its_kernel_is_refused);
    tcase_add_test(tc, an_event_recorded_before_its_kernel_is_caught_when_deferred);
    tcase_add_test(tc, a_download_read_before_its_wait_is_caught_when_deferred);
    tcase_add_test(tc, waits_order_streams_under_random_run_points);
    tcase_add_test(tc, a_failed_queued_kernel_leaves_a_sticky_error);
    tcase_add_test(tc, a_bad_configuration_is_refused_at_the_launch);
    tcase_add_test(tc, unknown_modes_are_refused);
    return check_run(s);
}
