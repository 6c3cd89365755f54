/* test_simt_memory.cc: the emulated runtime's checks of global memory and
 * launch limits (emu/simt/simt_memory.h, simt_runtime.h), each with a
 * planted bug it must catch and a negative control that must pass: a host
 * pointer given to a kernel, a kernel writing one element past the end of its
 * allocation, misaligned and out-of-bounds vector loads from global memory, a copy whose pointers
 * disagree with its direction, and dynamic shared memory over what the architecture allows. The
 * planted kernels live here, never in kernels/cuda. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/bk_cuda.cuh"
#include "kernels/device.h"
#include "tests/lib/check_main.h"

enum { N = 100 };

/* x[i] = value for i < n: the negative control */
__global__ void k_fill(float *x, int n, float value)
{
    int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) x[i] = value;
}

/* The planted off-by-one: i <= n writes x[n], one element past the end. */
__global__ void k_fill_one_past_the_end(float *x, int n, float value)
{
    int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i <= n) x[i] = value;
}

/* out[i] = sum of the float4 at x + 4 i + shift, for i < n4: shift 0 is the
 * negative control; shift 1 plants both a misaligned vector load and, at the
 * last i, a read one float past the end. */
__global__ void k_sum4(const float *x, int n4, int shift, float *out)
{
    int i = (int)threadIdx.x;
    if (i >= n4) return;
    float4 v = BK_LOAD_GLOBAL(float4, x + 4 * i + shift);
    out[i] = v.x + v.y + v.z + v.w;
}

/* Thread 0 reads the float4 at x + at (16-byte aligned for at % 4 == 0). */
__global__ void k_load4_at(const float *x, int at, float *out)
{
    float4 v = BK_LOAD_GLOBAL(float4, x + at);
    if (threadIdx.x == 0) out[0] = v.x;
}

static void expect_in(const char *msg, const char *what)
{
    ck_assert_msg(strstr(msg, what) != NULL, "message lacks \"%s\": %s", what, msg);
}

static float *device_floats(int n)
{
    void *p = NULL;
    ck_assert_int_eq(bk_device_malloc((size_t)n * sizeof(float), &p), BK_OK);
    return static_cast<float *>(p);
}

/* A kernel given a host pointer (pageable or page-locked) is refused before it
 * runs, with the kernel, the argument and what the pointer is named. */
START_TEST(a_host_pointer_given_to_a_kernel_is_refused)
{
    bk_emu::set_fatal(0);
    float pageable[N];
    void *pinned = NULL;
    ck_assert_int_eq(bk_host_pinned_malloc(N * sizeof(float), &pinned), BK_OK);
    float *dev = device_floats(N);

    ck_assert_int_eq(BK_LAUNCH(k_fill, dim3(1), dim3(128), 0, NULL, dev, N, 1.0f), BK_OK);
    ck_assert_int_eq(BK_LAUNCH(k_fill, dim3(1), dim3(128), 0, NULL, dev + N / 2, N / 2, 1.0f),
                     BK_OK);

    ck_assert_int_eq(BK_LAUNCH(k_fill, dim3(1), dim3(128), 0, NULL, pageable, N, 1.0f),
                     BK_ERR_DEVICE);
    const char *msg = bk_emu::last_error();
    expect_in(msg, "kernel k_fill");
    expect_in(msg, "pointer argument 0");
    expect_in(msg, "in no live allocation");
    printf("detected as expected: %s\n", msg);

    ck_assert_int_eq(
        BK_LAUNCH(k_fill, dim3(1), dim3(128), 0, NULL, static_cast<float *>(pinned), N, 1.0f),
        BK_ERR_DEVICE);
    msg = bk_emu::last_error();
    expect_in(msg, "page-locked host memory (cudaMallocHost of 400 bytes");
    printf("detected as expected: %s\n", msg);

    ck_assert_int_eq(bk_device_free(dev), BK_OK); /* freed memory is no device memory either */
    ck_assert_int_eq(BK_LAUNCH(k_fill, dim3(1), dim3(128), 0, NULL, dev, N, 1.0f), BK_ERR_DEVICE);
    expect_in(bk_emu::last_error(), "in no live allocation");
    ck_assert_int_eq(bk_host_pinned_free(pinned), BK_OK);
}
END_TEST

/* One element written past the end of an exact-size allocation lands in its
 * red zone: the next synchronisation and the free report it with the
 * allocation's size and the first bad offset. */
START_TEST(a_write_one_past_the_end_is_caught_by_the_red_zone)
{
    bk_queue q = {BK_DEVICE, NULL, 0, NULL};
    float *dev = device_floats(N);
    ck_assert_int_eq(BK_LAUNCH(k_fill, dim3(1), dim3(128), 0, NULL, dev, N, 1.0f), BK_OK);
    ck_assert_int_eq(bk_device_sync(&q), BK_OK);

    ck_assert_int_eq(BK_LAUNCH(k_fill_one_past_the_end, dim3(1), dim3(128), 0, NULL, dev, N, 1.0f),
                     BK_OK);
    ck_assert_int_eq(bk_device_sync(&q), BK_ERR_DEVICE);
    const char *msg = bk_kernel_error();
    expect_in(msg, "cudaStreamSynchronize");
    expect_in(msg, "past the end of an allocation of 400 bytes");
    expect_in(msg, "(offset 400)");
    printf("detected as expected: %s\n", msg);

    void *event = NULL;
    ck_assert_int_eq(bk_device_event_create(&event), BK_OK);
    ck_assert_int_eq(bk_device_event_sync(event), BK_ERR_DEVICE);
    expect_in(bk_kernel_error(), "cudaEventSynchronize");
    ck_assert_int_eq(bk_device_event_destroy(event), BK_OK);

    ck_assert_int_eq(bk_device_free(dev), BK_ERR_DEVICE);
    expect_in(bk_kernel_error(), "cudaFree");
    ck_assert_int_eq(bk_device_sync(&q), BK_OK); /* freed: nothing left to report */
}
END_TEST

/* A vector load from global memory must be aligned to its size and lie inside
 * one live device allocation: a misaligned one and one running past the end
 * fail the launch, naming the load's source line. */
START_TEST(a_global_vector_read_is_checked)
{
    bk_emu::set_fatal(0);
    float *x = device_floats(N), *out = device_floats(N);
    ck_assert_int_eq(BK_LAUNCH(k_fill, dim3(1), dim3(128), 0, NULL, x, N, 1.0f), BK_OK);
    ck_assert_int_eq(BK_LAUNCH(k_sum4, dim3(1), dim3(32), 0, NULL, x, N / 4, 0, out), BK_OK);

    ck_assert_int_eq(BK_LAUNCH(k_sum4, dim3(1), dim3(32), 0, NULL, x, N / 4, 1, out),
                     BK_ERR_DEVICE);
    const char *msg = bk_kernel_error();
    expect_in(msg, "k_sum4");
    expect_in(msg, "global read of 16 bytes at ");
    expect_in(msg, "test_simt_memory.cc:");
    expect_in(msg, "is not 16-byte aligned");
    printf("detected as expected: %s\n", msg);

    /* 408 bytes: the float4 at float 100 (byte 400) is aligned, and runs 8
     * bytes past the end; the one at float 104 starts past it */
    float *y = device_floats(N + 2);
    ck_assert_int_eq(BK_LAUNCH(k_load4_at, dim3(1), dim3(32), 0, NULL, y, N - 4, out), BK_OK);
    ck_assert_int_eq(BK_LAUNCH(k_load4_at, dim3(1), dim3(32), 0, NULL, y, N, out), BK_ERR_DEVICE);
    msg = bk_kernel_error();
    expect_in(msg, "k_load4_at");
    expect_in(msg, "runs 8 bytes past the end of device memory (cudaMalloc of 408 bytes");
    printf("detected as expected: %s\n", msg);
    ck_assert_int_eq(BK_LAUNCH(k_load4_at, dim3(1), dim3(32), 0, NULL, y, N + 4, out),
                     BK_ERR_DEVICE);
    expect_in(bk_kernel_error(), "which is in no live allocation");
    ck_assert_int_eq(bk_device_free(y), BK_OK);
    ck_assert_int_eq(bk_device_free(x), BK_OK);
    ck_assert_int_eq(bk_device_free(out), BK_OK);
}
END_TEST

/* A copy whose pointers disagree with its direction is refused (the CUDA
 * runtime documents it as undefined behaviour); so is one running past the
 * end of a device allocation. Pageable host memory is fine for a blocking
 * copy. */
START_TEST(a_copy_in_the_wrong_direction_is_refused)
{
    bk_queue q = {BK_DEVICE, NULL, 0, NULL};
    float host[N] = {0}, back[N];
    float *dev = device_floats(N), *other = device_floats(N);
    ck_assert_int_eq(bk_device_upload(&q, dev, host, sizeof host), BK_OK);
    ck_assert_int_eq(bk_device_copy(&q, other, dev, sizeof host), BK_OK);
    ck_assert_int_eq(bk_device_download(&q, back, other, sizeof back), BK_OK);

    ck_assert_int_eq(bk_device_upload(&q, host, dev, sizeof host), BK_ERR_DEVICE);
    const char *msg = bk_kernel_error();
    expect_in(msg, "cudaMemcpyHostToDevice");
    expect_in(msg, "the destination");
    expect_in(msg, "in no live allocation");
    printf("detected as expected: %s\n", msg);

    ck_assert_int_eq(bk_device_download(&q, dev, other, sizeof host), BK_ERR_DEVICE);
    msg = bk_kernel_error();
    expect_in(msg, "cudaMemcpyDeviceToHost");
    expect_in(msg, "is device memory (cudaMalloc of 400 bytes");
    expect_in(msg, "not host memory");
    printf("detected as expected: %s\n", msg);

    ck_assert_int_eq(bk_device_copy(&q, other, host, sizeof host), BK_ERR_DEVICE);
    expect_in(bk_kernel_error(), "cudaMemcpyDeviceToDevice");

    ck_assert_int_eq(bk_device_upload(&q, dev + 1, host, sizeof host), BK_ERR_DEVICE);
    msg = bk_kernel_error();
    expect_in(msg, "has 396 bytes of it left, not 400");
    printf("detected as expected: %s\n", msg);

    ck_assert_int_eq(bk_device_sync(&q), BK_OK);
    ck_assert_int_eq(bk_device_free(dev), BK_OK);
    ck_assert_int_eq(bk_device_free(other), BK_OK);
    ck_assert_int_eq(bk_device_free(host), BK_ERR_DEVICE); /* not a device allocation */
    expect_in(bk_kernel_error(), "not the start of a live allocation of device memory");
}
END_TEST

/* Uses every byte of its dynamic shared memory. */
__global__ void k_dynamic_smem(size_t bytes, unsigned *last)
{
    BK_SHARED_DYN(unsigned char, buf);
    for (size_t i = threadIdx.x; i < bytes; i += blockDim.x) buf[i] = 1;
    __syncthreads();
    if (threadIdx.x == 0) *last = buf[bytes - 1];
}

/* 64 KiB of dynamic shared memory without cudaFuncSetAttribute is refused as
 * on a GPU; the attribute is refused above the architecture's limit (sm_80:
 * 163 KiB, sm_90: 227 KiB). */
START_TEST(dynamic_shared_memory_is_held_to_the_architecture)
{
    bk_emu::set_fatal(0);
    const void *kernel = reinterpret_cast<const void *>(k_dynamic_smem);
    unsigned *last = NULL;
    ck_assert_int_eq(bk_device_malloc(sizeof *last, (void **)&last), BK_OK);
    const size_t big = 64 * 1024;
    ck_assert_int_eq(BK_LAUNCH(k_dynamic_smem, dim3(1), dim3(64), big, NULL, big, last),
                     BK_ERR_DEVICE);
    expect_in(bk_emu::last_error(), "over the 48 KiB");
    printf("detected as expected: %s\n", bk_emu::last_error());
    ck_assert_int_eq(bk_allow_dynamic_smem(kernel, big), BK_OK);
    ck_assert_int_eq(BK_LAUNCH(k_dynamic_smem, dim3(1), dim3(64), big, NULL, big, last), BK_OK);

    ck_assert_int_eq(bk_emu::set_arch(80), 0);
    ck_assert_int_eq(bk_allow_dynamic_smem(kernel, 163 * 1024), BK_OK);
    ck_assert_int_eq(bk_allow_dynamic_smem(kernel, 164 * 1024), BK_ERR_DEVICE);
    expect_in(bk_kernel_error(), "sm_80's 163 KiB");
    const size_t sm90 = 200 * 1024; /* over sm_80's block limit, within sm_90's */
    ck_assert_int_eq(BK_LAUNCH(k_dynamic_smem, dim3(1), dim3(64), sm90, NULL, sm90, last),
                     BK_ERR_DEVICE);
    ck_assert_int_eq(bk_emu::set_arch(90), 0);
    ck_assert_int_eq(bk_allow_dynamic_smem(kernel, 227 * 1024), BK_OK);
    ck_assert_int_eq(BK_LAUNCH(k_dynamic_smem, dim3(1), dim3(64), sm90, NULL, sm90, last), BK_OK);
    ck_assert_int_eq(bk_allow_dynamic_smem(kernel, 228 * 1024), BK_ERR_DEVICE);
    expect_in(bk_kernel_error(), "sm_90's 227 KiB");
    ck_assert_int_eq(bk_emu::set_arch(70), -1);
    ck_assert_int_eq(bk_device_free(last), BK_OK);
}
END_TEST

int main(void)
{
    static const TTest *const planted_and_controls[] = {
        a_host_pointer_given_to_a_kernel_is_refused,
        a_write_one_past_the_end_is_caught_by_the_red_zone,
        a_global_vector_read_is_checked,
        a_copy_in_the_wrong_direction_is_refused,
        dynamic_shared_memory_is_held_to_the_architecture,
        NULL,
    };
    Suite *s = suite_create("simt_memory");
    check_add_test_list(check_tcase(s, "memory", 60), 0, 1, planted_and_controls);
    return check_run(s);
}
