/* test_nccl_emu_memory.c: the model of NCCL (emu/nccl/) checks
 * the buffers it is given against the emulated runtime's record of
 * allocations, as NCCL's documentation of data pointers has it: memory the
 * communicator's device reaches (its own, page-locked host memory) is
 * accepted; pageable host memory, another device's memory and a buffer
 * running past the end of its allocation are refused (ncclInvalidArgument,
 * naming the call and the buffer); and NCCL's operations take part in the
 * emulator's hazard check beside the kernels. One rank on an emulated node of
 * 2 GPUs, the emulator and the model linked together as in the engine's
 * programs. */
#define _GNU_SOURCE
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include "kernels/device.h"
#include "kernels/ops.h"
#include "tests/lib/check_main.h"

enum { COUNT = 100 };

/* A collective on one buffer pair of count floats. */
typedef ncclResult_t (*nccl_call)(ncclComm_t comm, cudaStream_t stream, void *send, void *recv,
                                  size_t count);

static ncclResult_t all_reduce(ncclComm_t comm, cudaStream_t stream, void *send, void *recv,
                               size_t count)
{
    return ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, comm, stream);
}

static ncclResult_t all_gather(ncclComm_t comm, cudaStream_t stream, void *send, void *recv,
                               size_t count)
{
    return ncclAllGather(send, recv, count, ncclFloat32, comm, stream);
}

/* The call's result, with what the model printed on stderr in said[len]. */
static ncclResult_t call_saying(nccl_call call, ncclComm_t comm, cudaStream_t stream, void *send,
                                void *recv, size_t count, char *said, size_t len)
{
    char path[] = "/tmp/burst-nccl-memory-XXXXXX";
    int fd = mkstemp(path), saved = dup(2);
    ck_assert(fd >= 0 && saved >= 0);
    fflush(stderr);
    dup2(fd, 2);
    ncclResult_t r = call(comm, stream, send, recv, count);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ssize_t got = pread(fd, said, len - 1, 0);
    said[got > 0 ? got : 0] = '\0';
    close(fd);
    unlink(path);
    return r;
}

static void *device_floats(int device, size_t n)
{
    int count = 0;
    void *p = NULL;
    ck_assert_int_eq(bk_device_use(device, &count), BK_OK);
    ck_assert_int_eq(count, 2);
    ck_assert_int_eq(bk_device_malloc(n * sizeof(float), &p), BK_OK);
    ck_assert_int_eq(bk_device_use(0, &count), BK_OK);
    return p;
}

/* The call is refused, and the model's message holds `buffer` and `why`. */
static void expect_refused(nccl_call call, ncclComm_t comm, cudaStream_t stream, void *send,
                           void *recv, size_t count, const char *buffer, const char *why)
{
    char said[1024];
    ncclResult_t r = call_saying(call, comm, stream, send, recv, count, said, sizeof said);
    ck_assert_msg(r == ncclInvalidArgument, "result %d, expected ncclInvalidArgument: %s", (int)r,
                  said);
    ck_assert_msg(strstr(said, buffer) && strstr(said, why),
                  "the model said \"%s\", not \"%s\" "
                  "and \"%s\"",
                  said, buffer, why);
    printf("refused as expected: %s", said);
}

/* A communicator of this one rank on device 0, and a stream for it. */
static void open_one_rank(ncclComm_t *comm, cudaStream_t *stream)
{
    ncclUniqueId id;
    ck_assert_int_eq(cudaSetDevice(0), cudaSuccess);
    ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
    ck_assert_int_eq(ncclCommInitRank(comm, 1, id, 0), ncclSuccess);
    ck_assert_int_eq(cudaStreamCreateWithFlags(stream, cudaStreamNonBlocking), cudaSuccess);
}

START_TEST(buffers_are_checked_against_the_record)
{
    ncclComm_t comm;
    cudaStream_t stream;
    open_one_rank(&comm, &stream);

    float *mine = device_floats(0, COUNT), *theirs = device_floats(1, COUNT), pageable[COUNT];
    void *pinned = NULL;
    ck_assert_int_eq(bk_host_pinned_malloc(COUNT * sizeof(float), &pinned), BK_OK);
    char said[1024];
    /* the negative controls: the device's own memory, page-locked host memory */
    ck_assert_int_eq(call_saying(all_reduce, comm, stream, mine, mine, COUNT, said, sizeof said),
                     ncclSuccess);
    ck_assert_int_eq(call_saying(all_reduce, comm, stream, pinned, mine, COUNT, said, sizeof said),
                     ncclSuccess);
    ck_assert_int_eq(cudaStreamSynchronize(stream), cudaSuccess);

    expect_refused(all_reduce, comm, stream, pageable, mine, COUNT, "allreduce: the send buffer",
                   "is in no live allocation");
    expect_refused(all_reduce, comm, stream, mine, theirs, COUNT, "the receive buffer",
                   "is memory of device 1; the communicator's device is 0");
    expect_refused(all_reduce, comm, stream, mine + 1, mine + 1, COUNT, "the send buffer",
                   "runs 4 bytes past the end of its allocation");
    /* one rank's AllGather receives nranks x count: 1 x count fits, the same
     * count from an offset does not */
    ck_assert_int_eq(call_saying(all_gather, comm, stream, mine, mine, COUNT, said, sizeof said),
                     ncclSuccess);
    expect_refused(all_gather, comm, stream, mine + COUNT / 2, mine + COUNT / 2, COUNT,
                   "allgather: the send buffer", "runs 200 bytes past the end");

    ck_assert_int_eq(cudaStreamSynchronize(stream), cudaSuccess);
    ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
    ck_assert_int_eq(cudaStreamDestroy(stream), cudaSuccess);
    ck_assert_int_eq(bk_host_pinned_free(pinned), BK_OK);
    ck_assert_int_eq(bk_device_free(mine), BK_OK);
    ck_assert_int_eq(bk_device_free(theirs), BK_OK);
}
END_TEST

/* NCCL's operations run on its streams, the kernels on the emulator's: a
 * buffer a kernel still writes (queued, kernels deferred) is refused to an
 * NCCL call (ncclInvalidUsage, the stream hazard named), and a buffer an NCCL
 * operation still writes is refused to a kernel, until the host has seen the
 * other side done (a synchronisation of its stream, or of an event behind it;
 * the negative controls). */
START_TEST(nccl_and_kernels_on_one_buffer_are_ordered)
{
    ncclComm_t comm;
    cudaStream_t stream;
    cudaEvent_t done;
    open_one_rank(&comm, &stream);
    ck_assert_int_eq(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), cudaSuccess);
    float *mine = device_floats(0, COUNT);
    bk_queue q = {BK_DEVICE, NULL, 0, NULL};
    char said[1024];

    ck_assert_int_eq(bk_fill(&q, COUNT, mine, 1.0f), BK_OK); /* queued, not run */
    ncclResult_t r = call_saying(all_reduce, comm, stream, mine, mine, COUNT, said, sizeof said);
    ck_assert_msg(r == ncclInvalidUsage && strstr(said, "allreduce") &&
                      strstr(said, "stream hazard"),
                  "result %d: %s", (int)r, said);
    ck_assert_int_eq(bk_device_sync(&q), BK_OK);
    ck_assert_int_eq(call_saying(all_reduce, comm, stream, mine, mine, COUNT, said, sizeof said),
                     ncclSuccess);

    ck_assert_int_ne(bk_fill(&q, COUNT, mine, 2.0f), BK_OK); /* the all-reduce may still run */
    ck_assert_msg(strstr(bk_kernel_error(), "stream hazard") && strstr(bk_kernel_error(), "NCCL"),
                  "%s", bk_kernel_error());
    ck_assert_int_eq(cudaEventRecord(done, stream), cudaSuccess);
    while (cudaEventQuery(done) == cudaErrorNotReady) usleep(100);
    ck_assert_int_eq(bk_fill(&q, COUNT, mine, 2.0f), BK_OK);
    ck_assert_int_eq(bk_device_sync(&q), BK_OK);

    ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
    ck_assert_int_eq(cudaEventDestroy(done), cudaSuccess);
    ck_assert_int_eq(cudaStreamDestroy(stream), cudaSuccess);
    ck_assert_int_eq(bk_device_free(mine), BK_OK);
}
END_TEST

int main(void)
{
    setenv("BK_EMU_GPUS_PER_NODE", "2", 1);
    setenv("BK_EMU_STREAMS", "deferred", 1);
    Suite *s = suite_create("nccl_emu_memory");
    check_add_tests(check_tcase(s, "buffers", 60), buffers_are_checked_against_the_record,
                    nccl_and_kernels_on_one_buffer_are_ordered);
    return check_run(s);
}
