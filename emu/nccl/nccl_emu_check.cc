/* nccl_emu_check.cc: the model's checks of a call's arguments before it
 * becomes an operation: datatypes and reductions, peers, sizes, overlapping
 * buffers, buffers against the SIMT emulator's record of allocations and its
 * stream hazard check (where the program links it); and the operation they
 * make, submitted. */
#include "emu/nccl/nccl_emu_internal.h"

namespace nccl_emu
{

/* ------------------------------------------------------------------ argument checks */

static size_t elem_size(ncclDataType_t t)
{
    switch (t) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
        return 1;
    case ncclFloat16:
    case ncclBfloat16:
        return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
        return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
        return 8;
    default:
        return 0;
    }
}

/* Whether a collective's buffers overlap other than in NCCL's documented
 * in-place forms (undefined in NCCL; refused here). */
static bool overlaps_badly(Kind kind, const void *send, const void *recv, size_t count, size_t es,
                           int rank, int nranks)
{
    size_t part = count * es, n = (size_t)nranks;
    size_t in = kind == Kind::ReduceScatter ? n * part : part;
    size_t out = kind == Kind::AllGather ? n * part : part;
    uintptr_t s = (uintptr_t)send, r = (uintptr_t)recv;
    if (part == 0 || s + in <= r || r + out <= s) return false;
    uintptr_t in_place = kind == Kind::AllReduce       ? s
                         : kind == Kind::ReduceScatter ? s + (size_t)rank * part
                                                       : r + (size_t)rank * part;
    return kind == Kind::AllGather ? s != in_place : r != in_place;
}

/* What is wrong with buffer `which` at p of `bytes` for a communicator on
 * `device`, or "". NCCL's documentation ("Data Pointers") accepts memory the
 * communicator's device can reach: its own memory, page-locked host memory
 * (and managed memory, which we never use); it refuses another device's
 * memory; pageable host memory is not reachable at all. The whole range must
 * lie in one allocation. Unchecked where the program has no record. */
static std::string buffer_problem(const char *which, const void *p, size_t bytes, int device)
{
    bk_emu::allocation a;
    if (!bk_emu::memory_find) return std::string();
    if (!bk_emu::memory_find(p, &a))
        return format("the %s buffer %p is in no live allocation (pageable host memory, or freed)",
                      which, p);
    if (a.kind == bk_emu::MEM_DEVICE && a.device != device)
        return format("the %s buffer %p is memory of device %d; the communicator's device is %d",
                      which, p, a.device, device);
    size_t offset = (size_t)(static_cast<const char *>(p) - a.base);
    if (bytes > a.bytes - offset)
        return format("the %s buffer %p (%zu bytes) runs %zu bytes past the end of its allocation "
                      "(%s of %zu bytes at offset %zu)",
                      which, p, bytes, bytes - (a.bytes - offset), a.call, a.bytes, offset);
    return std::string();
}

/* The bytes an operation of kind reads from send (side 0) or writes to recv
 * (side 1), 0 for a side it has not: `bytes` is the smaller of the two sizes
 * (count elements); the other holds nranks times as many for ReduceScatter's
 * send and AllGather's receive. */
static size_t side_bytes(Kind kind, int side, size_t bytes, int nranks)
{
    if (kind == (side == 0 ? Kind::Recv : Kind::Send)) return 0;
    Kind gathered = side == 0 ? Kind::ReduceScatter : Kind::AllGather;
    return kind == gathered ? bytes * (size_t)nranks : bytes;
}

/* The send and receive buffers' problem (buffer_problem), or "" (sizes:
 * side_bytes). */
static std::string buffers_problem(Kind kind, const void *send, void *recv, size_t bytes,
                                   const Comm &c)
{
    int device = (int)c.slot(c.rank)->device;
    std::string bad;
    if (kind != Kind::Recv)
        bad = buffer_problem("send", send, side_bytes(kind, 0, bytes, c.nranks), device);
    if (bad.empty() && kind != Kind::Send)
        bad = buffer_problem("receive", recv, side_bytes(kind, 1, bytes, c.nranks), device);
    return bad;
}

/* What the SIMT emulator's hazard check says of an operation on stream that
 * reads send and writes recv (sizes: side_bytes), or "": the kernels
 * and copies of the emulator's streams that touch those bytes must be ordered
 * before it, as the host orders them (it waited for their event), and its
 * bytes are the emulator's to check later work against, until the host sees
 * it done (event_seen). Nothing where the program has no SIMT emulator. */
static std::string hazard_problem(const char *name, Kind kind, const void *send, void *recv,
                                  size_t bytes, const Comm &c, cudaStream_t stream)
{
    if (!bk_emu::external_issue || bytes == 0) return std::string();
    bk_emu::access acc[2];
    int n = 0;
    if (kind != Kind::Recv)
        acc[n++] = bk_emu::access{send, 0, side_bytes(kind, 0, bytes, c.nranks)};
    if (kind != Kind::Send)
        acc[n++] = bk_emu::access{recv, 1, side_bytes(kind, 1, bytes, c.nranks)};
    std::lock_guard<std::mutex> lk(stream->mu);
    if (stream->hazard_id < 0 && (stream->hazard_id = bk_emu::external_stream_create()) < 0)
        return "out of memory";
    uint64_t op = 0;
    if (bk_emu::external_issue(stream->hazard_id, name, acc, n, &op) != 0)
        return bk_emu::last_error();
    stream->hazard_ops = op;
    return std::string();
}

void event_seen(const EventState &e)
{
    if (bk_emu::external_seen && e.hazard_id >= 0) bk_emu::external_seen(e.hazard_id, e.hazard_ops);
}

/* The op for a call, or the error it returns (and the reason in why). */
static ncclResult_t make_op(Kind kind, const void *send, void *recv, size_t count, ncclDataType_t t,
                            ncclRedOp_t redop, int peer, ncclComm_t comm, cudaStream_t stream,
                            std::unique_ptr<Op> *out, std::string *why)
{
    const char *name = kind_name(kind);
    auto refused = [why](ncclResult_t code, const std::string &text) {
        *why = text;
        return code;
    };
    if (!comm) return refused(ncclInvalidArgument, format("%s: NULL communicator", name));
    if (!stream)
        return refused(ncclInvalidArgument, format("%s: the NULL stream is not modelled", name));
    Comm &c = *comm->impl;
    size_t es = elem_size(t);
    if (es == 0)
        return refused(ncclInvalidArgument, format("%s: invalid datatype %d", name, (int)t));
    bool reduces = kind == Kind::AllReduce || kind == Kind::ReduceScatter;
    if (reduces && (!reducible(t) || (redop != ncclSum && redop != ncclMax && redop != ncclMin)))
        return refused(
            ncclInvalidArgument,
            format("%s: reduction %d on datatype %d is not modelled", name, (int)redop, (int)t));
    if ((kind == Kind::Send || kind == Kind::Recv) && (peer < 0 || peer >= c.nranks))
        return refused(ncclInvalidArgument,
                       format("%s: peer %d is not a rank of 0..%d", name, peer, c.nranks - 1));
    size_t parts = kind == Kind::ReduceScatter || kind == Kind::AllGather ? (size_t)c.nranks : 1;
    if (count > SIZE_MAX / es / parts)
        return refused(ncclInvalidArgument, format("%s: %zu elements overflow", name, count));
    bool needs_send = kind != Kind::Recv, needs_recv = kind != Kind::Send;
    if (count > 0 && ((needs_send && !send) || (needs_recv && !recv)))
        return refused(ncclInvalidArgument, format("%s: NULL buffer", name));
    std::string bad = count == 0 ? std::string() : buffers_problem(kind, send, recv, count * es, c);
    if (!bad.empty()) return refused(ncclInvalidArgument, format("%s: %s", name, bad.c_str()));
    if (needs_send && needs_recv && overlaps_badly(kind, send, recv, count, es, c.rank, c.nranks))
        return refused(ncclInvalidArgument,
                       format("%s: the buffers overlap other than in place", name));
    ncclResult_t err = (ncclResult_t)c.async_error.load();
    if (err != ncclSuccess)
        return refused(
            err, format("%s on a communicator that failed (%s)", name, ncclGetErrorString(err)));
    std::string hazard = hazard_problem(name, kind, send, recv, count * es, c, stream);
    if (!hazard.empty()) return refused(ncclInvalidUsage, format("%s: %s", name, hazard.c_str()));

    auto op = std::unique_ptr<Op>(new Op);
    op->kind = kind;
    op->comm = comm->impl;
    op->stream = stream;
    op->peer = peer;
    op->sendbuf = send;
    op->recvbuf = recv;
    op->count = count;
    op->dtype = t;
    op->redop = redop;
    op->elem = es;
    if (!op->is_p2p()) {
        size_t slot_elems = c.layout.slot_bytes / es;
        op->chunk_elems = kind == Kind::ReduceScatter ? slot_elems / (size_t)c.nranks : slot_elems;
        op->chunks = std::max<size_t>(1, (count + op->chunk_elems - 1) / op->chunk_elems);
    }
    *out = std::move(op);
    return ncclSuccess;
}

ncclResult_t issue(Kind kind, const void *send, void *recv, size_t count, ncclDataType_t t,
                   ncclRedOp_t redop, int peer, ncclComm_t comm, cudaStream_t stream)
{
    try {
        std::unique_ptr<Op> op;
        std::string why;
        ncclResult_t r = make_op(kind, send, recv, count, t, redop, peer, comm, stream, &op, &why);
        return r == ncclSuccess ? submit(std::move(op)) : refuse(r, why);
    } catch (...) {
        return refuse(ncclSystemError, "out of memory");
    }
}

} // namespace nccl_emu
