/* nccl_emu_ops.cc: the model of NCCL's operations and how they run: the
 * registry of pending operations for reports, point-to-point transfers through
 * the rings of the segment, collectives chunk by chunk through the ranks'
 * slots, and the loop that runs a group's operations to the end. */
#include <string.h>

#include <type_traits>

#include "emu/nccl/nccl_emu_internal.h"

namespace nccl_emu
{

/* ------------------------------------------------------------------ operations */

const char *kind_name(Kind k)
{
    switch (k) {
    case Kind::Send:
        return "send";
    case Kind::Recv:
        return "recv";
    case Kind::AllReduce:
        return "allreduce";
    case Kind::ReduceScatter:
        return "reducescatter";
    case Kind::AllGather:
        return "allgather";
    }
    return "?";
}

Registry &registry()
{
    static Registry *r = new Registry; /* never freed: workers may outlive main */
    return *r;
}

static void report(int rank, const std::string &why)
{
    std::string text = format("nccl-emu: rank %d: ", rank) + why + "; pending: ";
    Registry &reg = registry();
    std::lock_guard<std::mutex> lk(reg.mu);
    for (size_t i = 0; i < reg.ops.size(); i++) text += (i ? "; " : "") + reg.ops[i]->describe();
    if (reg.ops.empty()) text += "none";
    print_line(text);
}

static Step fail_op(Op &op, ncclResult_t code, const std::string &why, bool report_it)
{
    op.result = code;
    op.failure = why;
    op.report = report_it;
    return Step::Failed;
}

/* ------------------------------------------------------------------ point-to-point */

enum { kTurn = 0, kMatch, kCopy, kDelivered, kPublish, kGather, kRelease };

static void ring_write(uint8_t *ring, size_t size, uint64_t pos, const uint8_t *src, size_t n)
{
    size_t at = pos % size, first = std::min(n, size - at);
    memcpy(ring + at, src, first);
    if (n > first) memcpy(ring, src + first, n - first);
}

static void ring_read(const uint8_t *ring, size_t size, uint64_t pos, uint8_t *dst, size_t n)
{
    size_t at = pos % size, first = std::min(n, size - at);
    memcpy(dst, ring + at, first);
    if (n > first) memcpy(dst + first, ring, n - first);
}

static Step size_mismatch(Op &op, uint64_t other)
{
    const char *other_kind = op.kind == Kind::Send ? "receive" : "send";
    return fail_op(op, ncclInvalidUsage,
                   format("%s #%llu of %zu bytes with rank %d matched a %s of %llu bytes",
                          kind_name(op.kind), (unsigned long long)op.seq, op.bytes(), op.peer,
                          other_kind, (unsigned long long)other),
                   true);
}

/* A send and its receive whose ranks issued their launches on the other
 * communicators in different orders before them (OrderCounts). */
static Step order_mismatch(Op &op)
{
    return fail_op(
        op, ncclInvalidUsage,
        format("%s #%llu from rank %d: the two ranks issued their operations on the other "
               "communicators in different orders before it (NCCL requires one order on every "
               "rank); this rank's launches with rank %d before it: %s",
               kind_name(op.kind), (unsigned long long)op.seq, op.peer, op.peer,
               order_text(op.order[(size_t)op.peer]).c_str()),
        true);
}

/* The receiving side: arm when the channel's earlier transfers are done,
 * learn the sender's size, copy out of the ring, then mark it done. */
static Step step_recv(Op &op)
{
    Comm &c = *op.comm;
    ChannelCtl *ch = c.channel(op.peer, c.rank);
    switch (op.state) {
    case kTurn:
        if (load_acquire(&ch->done_seq) != op.seq - 1) return Step::Waiting;
        store_release(&ch->recv_bytes, (uint64_t)op.bytes());
        store_release(&ch->recv_seq, op.seq);
        op.state = kMatch;
        return Step::Progress;
    case kMatch: {
        if (load_acquire(&ch->send_seq) != op.seq) return Step::Waiting;
        uint64_t sent = load_acquire(&ch->send_bytes);
        if (sent != op.bytes()) return size_mismatch(op, sent);
        if (op.peer != c.rank &&
            load_acquire(&ch->send_order) != order_key(op.order[(size_t)op.peer]))
            return order_mismatch(op);
        op.state = kCopy;
        return Step::Progress;
    }
    default: {
        uint64_t tail = load_acquire(&ch->tail);
        size_t n = std::min<size_t>(load_acquire(&ch->head) - tail, op.bytes() - op.moved);
        if (n > 0) {
            ring_read(c.ring(op.peer, c.rank), c.layout.ring_bytes, tail,
                      static_cast<uint8_t *>(op.recvbuf) + op.moved, n);
            store_release(&ch->tail, tail + n);
            op.moved += n;
        }
        if (op.moved == op.bytes()) {
            store_release(&ch->done_seq, op.seq);
            return Step::Done;
        }
        return n > 0 ? Step::Progress : Step::Waiting;
    }
    }
}

/* The sending side: nothing moves before the matching receive is armed. */
static Step step_send(Op &op)
{
    Comm &c = *op.comm;
    ChannelCtl *ch = c.channel(c.rank, op.peer);
    switch (op.state) {
    case kTurn: {
        /* recv_seq reaches n only after transfer n-1 is done */
        if (load_acquire(&ch->recv_seq) != op.seq) return Step::Waiting;
        uint64_t wanted = load_acquire(&ch->recv_bytes);
        store_release(&ch->send_order, order_key(op.order[(size_t)op.peer]));
        store_release(&ch->send_bytes, (uint64_t)op.bytes());
        store_release(&ch->send_seq, op.seq);
        if (wanted != op.bytes()) return size_mismatch(op, wanted);
        op.state = kCopy;
        return Step::Progress;
    }
    case kCopy: {
        uint64_t head = load_acquire(&ch->head);
        size_t space = c.layout.ring_bytes - (size_t)(head - load_acquire(&ch->tail));
        size_t n = std::min(space, op.bytes() - op.moved);
        if (n > 0) {
            ring_write(c.ring(c.rank, op.peer), c.layout.ring_bytes, head,
                       static_cast<const uint8_t *>(op.sendbuf) + op.moved, n);
            store_release(&ch->head, head + n);
            op.moved += n;
        }
        if (op.moved == op.bytes()) {
            op.state = kDelivered;
            return Step::Progress;
        }
        return n > 0 ? Step::Progress : Step::Waiting;
    }
    default:
        return load_acquire(&ch->done_seq) == op.seq ? Step::Done : Step::Waiting;
    }
}

/* ------------------------------------------------------------------ collectives */

template <class T> static T load_elem(const uint8_t *p, size_t i)
{
    T v;
    memcpy(&v, p + i * sizeof(T), sizeof(T));
    return v;
}

template <class T> static T combine(T a, T b, ncclRedOp_t op)
{
    if (op == ncclMax) return std::max(a, b);
    if (op == ncclMin) return std::min(a, b);
    if constexpr (std::is_integral<T>::value) {
        typedef typename std::make_unsigned<T>::type U; /* wraps, as a GPU's add does */
        return (T)(U)((U)a + (U)b);
    } else {
        return a + b;
    }
}

/* out[i] = in[0][i] op in[1][i] op ... in rank order, for i < n. */
template <class T>
static void reduce_typed(uint8_t *out, const std::vector<const uint8_t *> &in, size_t n,
                         ncclRedOp_t op)
{
    for (size_t i = 0; i < n; i++) {
        T acc = load_elem<T>(in[0], i);
        for (size_t q = 1; q < in.size(); q++) acc = combine(acc, load_elem<T>(in[q], i), op);
        memcpy(out + i * sizeof(T), &acc, sizeof(T));
    }
}

bool reducible(ncclDataType_t t)
{
    switch (t) {
    case ncclInt8:
    case ncclUint8:
    case ncclInt32:
    case ncclUint32:
    case ncclInt64:
    case ncclUint64:
    case ncclFloat32:
    case ncclFloat64:
        return true;
    default:
        return false;
    }
}

static void reduce(uint8_t *out, const std::vector<const uint8_t *> &in, size_t n, ncclDataType_t t,
                   ncclRedOp_t op)
{
    switch (t) {
    case ncclInt8:
        reduce_typed<int8_t>(out, in, n, op);
        break;
    case ncclUint8:
        reduce_typed<uint8_t>(out, in, n, op);
        break;
    case ncclInt32:
        reduce_typed<int32_t>(out, in, n, op);
        break;
    case ncclUint32:
        reduce_typed<uint32_t>(out, in, n, op);
        break;
    case ncclInt64:
        reduce_typed<int64_t>(out, in, n, op);
        break;
    case ncclUint64:
        reduce_typed<uint64_t>(out, in, n, op);
        break;
    case ncclFloat32:
        reduce_typed<float>(out, in, n, op);
        break;
    case ncclFloat64:
        reduce_typed<double>(out, in, n, op);
        break;
    default:
        break;
    }
}

/* Elements of chunk op.chunk, which starts at element op.chunk * chunk_elems
 * of every rank's part. */
static size_t chunk_len(const Op &op)
{
    size_t start = op.chunk * op.chunk_elems;
    return std::min(op.chunk_elems, op.count - std::min(op.count, start));
}

static CollDesc desc_of(const Op &op)
{
    CollDesc d{};
    d.seq = op.seq;
    d.count = op.count;
    d.kind = (uint32_t)op.kind;
    d.dtype = (uint32_t)op.dtype;
    d.redop = op.kind == Kind::AllGather ? 0 : (uint32_t)op.redop;
    return d;
}

static std::string desc_text(const CollDesc &d)
{
    return format("%s #%llu of %llu elements of type %u, op %u", kind_name((Kind)d.kind),
                  (unsigned long long)d.seq, (unsigned long long)d.count, d.dtype, d.redop);
}

/* This rank's share of the chunk into its slot (and, first, its description). */
static void publish_chunk(Op &op)
{
    Comm &c = *op.comm;
    if (op.chunk == 0) {
        RankSlot *mine = c.slot(c.rank);
        mine->desc = desc_of(op);
        for (int q = 0; q < std::min<int>(c.nranks, kOrderRanks); q++)
            mine->order[q] = order_key(op.order[(size_t)q]);
    }
    size_t start = op.chunk * op.chunk_elems, n = chunk_len(op), es = op.elem;
    const uint8_t *send = static_cast<const uint8_t *>(op.sendbuf);
    uint8_t *slot = c.coll_slot(c.rank);
    if (n == 0) return;
    if (op.kind == Kind::ReduceScatter) {
        for (int q = 0; q < c.nranks; q++)
            memcpy(slot + (size_t)q * n * es, send + ((size_t)q * op.count + start) * es, n * es);
    } else {
        memcpy(slot, send + start * es, n * es);
    }
}

/* Every rank's slot into this rank's output for the chunk. */
static void combine_chunk(Op &op)
{
    Comm &c = *op.comm;
    size_t start = op.chunk * op.chunk_elems, n = chunk_len(op), es = op.elem;
    uint8_t *recv = static_cast<uint8_t *>(op.recvbuf);
    if (n == 0) return;
    if (op.kind == Kind::AllGather) {
        for (int q = 0; q < c.nranks; q++)
            memcpy(recv + ((size_t)q * op.count + start) * es, c.coll_slot(q), n * es);
        return;
    }
    size_t part = op.kind == Kind::ReduceScatter ? (size_t)c.rank * n * es : 0;
    std::vector<const uint8_t *> in;
    for (int q = 0; q < c.nranks; q++) in.push_back(c.coll_slot(q) + part);
    reduce(recv + start * es, in, n, op.dtype, op.redop);
}

static bool all_reached(Comm &c, uint64_t phase)
{
    for (int q = 0; q < c.nranks; q++)
        if (load_acquire(&c.slot(q)->phase) < phase) return false;
    return true;
}

/* "" when every rank describes the same collective and issued it in the same
 * order as this rank against the other communicators (OrderCounts). */
static std::string desc_disagreement(Comm &c, const Op &op)
{
    const CollDesc &mine = c.slot(c.rank)->desc;
    for (int q = 0; q < c.nranks; q++) {
        const CollDesc &d = c.slot(q)->desc;
        if (memcmp(&d, &mine, sizeof d) != 0)
            return format("ranks disagree on a collective: rank %d issued %s, rank %d %s", c.rank,
                          desc_text(mine).c_str(), q, desc_text(d).c_str());
    }
    for (int q = 0; q < std::min<int>(c.nranks, kOrderRanks) && c.rank < kOrderRanks; q++)
        if (q != c.rank && load_acquire(&c.slot(q)->order[c.rank]) != c.slot(c.rank)->order[q])
            return format("%s: ranks %d and %d issued their operations on the other communicators "
                          "in different orders before it (NCCL requires one order on every "
                          "rank); this rank's launches with rank %d before it: %s",
                          desc_text(mine).c_str(), c.rank, q, q,
                          order_text(op.order[(size_t)q]).c_str());
    return "";
}

/* Each chunk: publish into the own slot, wait until every rank has, combine
 * the slots, wait until every rank has read them (so slots may be reused). */
static Step step_collective(Op &op)
{
    Comm &c = *op.comm;
    uint64_t published = op.phase_base + 2 * op.chunk + 1, read = published + 1;
    switch (op.state) {
    case kTurn:
        if (c.colls_done.load() != op.seq - 1) return Step::Waiting;
        op.state = kPublish;
        return Step::Progress;
    case kPublish:
        publish_chunk(op);
        store_release(&c.slot(c.rank)->phase, published);
        op.state = kGather;
        return Step::Progress;
    case kGather: {
        if (!all_reached(c, published)) return Step::Waiting;
        if (op.chunk == 0) {
            std::string why = desc_disagreement(c, op);
            if (!why.empty()) return fail_op(op, ncclInvalidUsage, why, true);
        }
        combine_chunk(op);
        store_release(&c.slot(c.rank)->phase, read);
        op.state = kRelease;
        return Step::Progress;
    }
    default:
        if (!all_reached(c, read)) return Step::Waiting;
        if (++op.chunk < op.chunks) {
            op.state = kPublish;
            return Step::Progress;
        }
        c.colls_done.store(op.seq);
        return Step::Done;
    }
}

/* ------------------------------------------------------------------ running operations */

/* Starts op unless its communicator is closed or failed. */
static bool start_op(Op &op)
{
    Comm &c = *op.comm;
    std::lock_guard<std::mutex> lk(c.mu);
    if (c.aborted.load() || c.closed.load()) {
        fail_op(op, ncclInvalidUsage, "the communicator was closed", false);
        return false;
    }
    ncclResult_t err = (ncclResult_t)c.async_error.load();
    if (err != ncclSuccess) {
        fail_op(op, err, "the communicator had failed", false);
        return false;
    }
    c.active++;
    op.started.store(true);
    op.last_progress = now_s();
    return true;
}

/* One step of a started op. The peers' state is read before the op's own
 * condition, so a peer that finished its part and then left is not taken
 * for one that failed. */
static Step step_op(Op &op)
{
    Comm &c = *op.comm;
    if (c.aborted.load())
        return fail_op(op, ncclSystemError, "the communicator was aborted", false);
    ncclResult_t err = (ncclResult_t)c.async_error.load();
    if (err != ncclSuccess) return fail_op(op, err, "the communicator failed", false);
    std::string trouble = !op.is_p2p()        ? c.any_peer_trouble()
                          : op.peer != c.rank ? c.peer_trouble(op.peer)
                                              : "";
    Step s = op.kind == Kind::Send   ? step_send(op)
             : op.kind == Kind::Recv ? step_recv(op)
                                     : step_collective(op);
    if (s == Step::Waiting && !trouble.empty()) return fail_op(op, ncclRemoteError, trouble, true);
    return s;
}

static void finish_op(Op &op)
{
    {
        Registry &reg = registry();
        std::lock_guard<std::mutex> lk(reg.mu);
        reg.ops.erase(std::find(reg.ops.begin(), reg.ops.end(), &op));
    }
    Comm &c = *op.comm;
    std::lock_guard<std::mutex> lk(c.mu);
    c.pending--;
    if (op.started.load()) c.active--;
    op.finished = true;
    c.cv.notify_all();
}

/* A failed op fails its communicator; the first failure of one is reported. */
static void conclude_failure(Op &op)
{
    if (op.comm->fail(op.result) && op.report) report(op.comm->rank, op.failure);
    finish_op(op);
}

/* Ops that made no progress for their timeout: one report for them all. */
static void fail_stalled(std::vector<Op *> &stalled)
{
    if (stalled.empty()) return;
    int rank = stalled[0]->comm->rank;
    double timeout = stalled[0]->comm->timeout;
    bool first = false;
    for (Op *op : stalled) {
        op->result = ncclSystemError;
        first |= op->comm->fail(ncclSystemError);
    }
    if (first) report(rank, format("no progress for %g s", timeout));
    for (Op *op : stalled) finish_op(*op);
}

bool run_ops(std::vector<std::unique_ptr<Op>> &ops, bool stream_failed)
{
    bool ok = true;
    size_t left = ops.size();
    for (auto &op : ops) {
        bool started = false;
        if (stream_failed)
            fail_op(*op, ncclUnhandledCudaError,
                    format("an earlier operation on stream %p failed", (void *)op->stream), true);
        else
            started = start_op(*op);
        if (!started) {
            ok = false;
            left--;
            conclude_failure(*op);
        }
    }
    Backoff backoff;
    while (left > 0) {
        bool progressed = false;
        std::vector<Op *> stalled;
        double now = now_s();
        for (auto &op : ops) {
            if (op->finished) continue;
            Step s = step_op(*op);
            if (s == Step::Progress || s == Step::Done) {
                progressed = true;
                op->last_progress = now;
            }
            if (s == Step::Done) finish_op(*op), left--;
            if (s == Step::Failed) conclude_failure(*op), left--, ok = false;
            if (s == Step::Waiting && now - op->last_progress >= op->comm->timeout)
                stalled.push_back(op.get());
        }
        if (!stalled.empty()) ok = false, left -= stalled.size();
        fail_stalled(stalled);
        if (progressed)
            backoff.reset();
        else if (left > 0)
            backoff.pause();
    }
    return ok;
}

} // namespace nccl_emu
