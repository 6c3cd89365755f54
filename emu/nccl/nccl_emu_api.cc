/* nccl_emu_api.cc: the entry points of the model of NCCL: the NCCL API
 * (nccl.h's signatures) and the CUDA runtime calls around it (cuda_runtime.h's),
 * extern "C", in place of libnccl and libcudart. */
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <new>

#include "emu/nccl/nccl_emu_internal.h"

using namespace nccl_emu;

/* ------------------------------------------------------------------ NCCL API */

extern "C" ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId)
{
    if (!uniqueId) return ncclInvalidArgument;
    unsigned char random[16];
    if (getrandom(random, sizeof random, 0) != (ssize_t)sizeof random) {
        uint64_t mix[2] = {(uint64_t)getpid() * 0x9e3779b97f4a7c15ULL, (uint64_t)(now_s() * 1e9)};
        memcpy(random, mix, sizeof random);
    }
    IdLayout idl;
    memset(&idl, 0, sizeof idl);
    memcpy(idl.tag, kIdTag, sizeof kIdTag);
    int n = snprintf(idl.name, sizeof idl.name, "/burst-nccl-");
    for (unsigned char b : random)
        n += snprintf(idl.name + n, sizeof idl.name - (size_t)n, "%02x", b);
    memset(uniqueId, 0, sizeof *uniqueId);
    memcpy(uniqueId->internal, &idl, sizeof idl);
    return ncclSuccess;
}

extern "C" ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId,
                                         int rank)
{
    try {
        return init_rank(comm, nranks, commId, rank);
    } catch (...) {
        return ncclSystemError;
    }
}

extern "C" ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    if (!comm) return ncclSuccess;
    Comm &c = *comm->impl;
    c.aborted.store(true);
    store_release(&c.slot(c.rank)->state, (uint32_t)kAborted);
    wait_quiet(c, false, 10.0);
    delete comm;
    return ncclSuccess;
}

extern "C" ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    if (!comm) return ncclSuccess;
    Comm &c = *comm->impl;
    wait_quiet(c, true, 0);
    c.closed.store(true);
    if (c.async_error.load() == ncclSuccess) store_release(&c.slot(c.rank)->state, (uint32_t)kLeft);
    delete comm;
    return ncclSuccess;
}

extern "C" ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
    if (!comm || !asyncError) return ncclInvalidArgument;
    *asyncError = (ncclResult_t)comm->impl->async_error.load();
    return ncclSuccess;
}

extern "C" const char *ncclGetErrorString(ncclResult_t result)
{
    switch (result) {
    case ncclSuccess:
        return "no error";
    case ncclUnhandledCudaError:
        return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
        return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
        return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
        return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
        return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
        return "remote process exited or there was a network error";
    case ncclInProgress:
        return "NCCL operation in progress";
    default:
        return "unknown result code";
    }
}

extern "C" ncclResult_t ncclGroupStart()
{
    group_state().depth++;
    return ncclSuccess;
}

extern "C" ncclResult_t ncclGroupEnd()
{
    GroupState &g = group_state();
    if (g.depth == 0) {
        print_line("nccl-emu: ncclGroupEnd without ncclGroupStart");
        return ncclInvalidUsage;
    }
    if (--g.depth > 0) return ncclSuccess;
    std::vector<std::unique_ptr<Op>> ops = std::move(g.ops);
    g.ops.clear();
    ncclResult_t err = g.error;
    g.error = ncclSuccess;
    if (err != ncclSuccess) return err; /* none of the group's ops is launched */
    try {
        launch_group(std::move(ops));
    } catch (...) {
        return ncclSystemError;
    }
    return ncclSuccess;
}

extern "C" ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype,
                                 int peer, ncclComm_t comm, cudaStream_t stream)
{
    return issue(Kind::Send, sendbuff, nullptr, count, datatype, ncclSum, peer, comm, stream);
}

extern "C" ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                                 ncclComm_t comm, cudaStream_t stream)
{
    return issue(Kind::Recv, nullptr, recvbuff, count, datatype, ncclSum, peer, comm, stream);
}

extern "C" ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                      ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                      cudaStream_t stream)
{
    return issue(Kind::AllReduce, sendbuff, recvbuff, count, datatype, op, -1, comm, stream);
}

extern "C" ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                          ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                          cudaStream_t stream)
{
    return issue(Kind::ReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, -1, comm,
                 stream);
}

extern "C" ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                      ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
    return issue(Kind::AllGather, sendbuff, recvbuff, sendcount, datatype, ncclSum, -1, comm,
                 stream);
}

/* ------------------------------------------------------------------ CUDA runtime API */

extern "C" cudaError_t cudaSetDevice(int device)
{
    if (!runtime_usable()) return cudaErrorInitializationError;
    if (device < 0 || device >= device_count()) return cudaErrorInvalidDevice;
    t_device = device;
    return cudaSuccess;
}

extern "C" cudaError_t cudaGetDevice(int *device)
{
    if (!runtime_usable()) return cudaErrorInitializationError;
    if (!device) return cudaErrorInvalidValue;
    *device = t_device;
    return cudaSuccess;
}

/* The documented form, domain:bus:device.function, one bus per device. */
extern "C" cudaError_t cudaDeviceGetPCIBusId(char *pciBusId, int len, int device)
{
    if (!runtime_usable()) return cudaErrorInitializationError;
    if (device < 0 || device >= device_count()) return cudaErrorInvalidDevice;
    char id[32];
    int n = snprintf(id, sizeof id, "0000:%02x:00.0", device + 1);
    if (!pciBusId || len <= n) return cudaErrorInvalidValue;
    memcpy(pciBusId, id, (size_t)n + 1);
    return cudaSuccess;
}

extern "C" cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
    if (!runtime_usable()) return cudaErrorInitializationError;
    if (!pStream || (flags != cudaStreamDefault && flags != cudaStreamNonBlocking))
        return cudaErrorInvalidValue;
    CUstream_st *s = new (std::nothrow) CUstream_st;
    if (!s) return cudaErrorMemoryAllocation;
    try {
        s->worker = std::thread(stream_worker, s);
    } catch (...) {
        delete s;
        return cudaErrorMemoryAllocation;
    }
    *pStream = s;
    return cudaSuccess;
}

/* Returns at once; the worker finishes the queued work, then frees the
 * stream, as CUDA documents. */
extern "C" cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    if (!runtime_usable()) return cudaErrorInitializationError;
    if (!stream) return cudaErrorInvalidResourceHandle;
    std::thread worker = std::move(stream->worker);
    worker.detach();
    std::lock_guard<std::mutex> lk(stream->mu);
    stream->closing = true;
    stream->cv.notify_all(); /* under the lock: the worker may free the stream after */
    return cudaSuccess;
}

extern "C" cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    if (!runtime_usable()) return cudaErrorInitializationError;
    if (!stream) return cudaErrorInvalidResourceHandle;
    std::unique_lock<std::mutex> lk(stream->mu);
    stream->cv.wait(lk, [stream] { return stream->queue.empty() && !stream->busy; });
    if (bk_emu::external_seen && stream->hazard_id >= 0)
        bk_emu::external_seen(stream->hazard_id, stream->hazard_ops);
    return stream->failed.load() ? cudaErrorLaunchFailure : cudaSuccess;
}

extern "C" cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
    if (!runtime_usable()) return cudaErrorInitializationError;
    if (!event || (flags & ~(unsigned)(cudaEventBlockingSync | cudaEventDisableTiming)) != 0)
        return cudaErrorInvalidValue;
    CUevent_st *e = new (std::nothrow) CUevent_st;
    if (!e) return cudaErrorMemoryAllocation;
    try {
        e->state = std::make_shared<EventState>();
    } catch (...) {
        delete e;
        return cudaErrorMemoryAllocation;
    }
    *event = e;
    return cudaSuccess;
}

extern "C" cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    if (!runtime_usable()) return cudaErrorInitializationError;
    if (!event || !stream) return cudaErrorInvalidResourceHandle;
    uint64_t record;
    {
        std::lock_guard<std::mutex> sk(stream->mu), lk(event->state->mu);
        record = ++event->state->recorded;
        event->state->hazard_id = stream->hazard_id;
        event->state->hazard_ops = stream->hazard_ops;
    }
    try {
        enqueue(stream, QueueItem{nullptr, event->state, record});
    } catch (...) {
        return cudaErrorMemoryAllocation;
    }
    return cudaSuccess;
}

extern "C" cudaError_t cudaEventQuery(cudaEvent_t event)
{
    if (!runtime_usable()) return cudaErrorInitializationError;
    if (!event) return cudaErrorInvalidResourceHandle;
    EventState &e = *event->state;
    std::lock_guard<std::mutex> lk(e.mu);
    if (e.completed != e.recorded) return cudaErrorNotReady;
    event_seen(e);
    return e.status;
}

/* The event's pending record, if any, still completes; nobody looks. */
extern "C" cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    if (!runtime_usable()) return cudaErrorInitializationError;
    if (!event) return cudaErrorInvalidResourceHandle;
    delete event;
    return cudaSuccess;
}

extern "C" const char *cudaGetErrorString(cudaError_t error)
{
    switch (error) {
    case cudaSuccess:
        return "no error";
    case cudaErrorInvalidValue:
        return "invalid argument";
    case cudaErrorMemoryAllocation:
        return "out of memory";
    case cudaErrorInitializationError:
        return "initialization error";
    case cudaErrorInvalidDevice:
        return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle:
        return "invalid resource handle";
    case cudaErrorNotReady:
        return "device not ready";
    case cudaErrorLaunchFailure:
        return "unspecified launch failure";
    default:
        return "unrecognized error code";
    }
}
