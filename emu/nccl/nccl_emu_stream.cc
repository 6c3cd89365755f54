/* nccl_emu_stream.cc: the model's streams (a FIFO run by a worker thread
 * each) and events (markers in them), and groups: how a group's operations are
 * numbered, ordered across communicators and queued on every stream they
 * use. */
#include "emu/nccl/nccl_emu_internal.h"

namespace nccl_emu
{

/* ------------------------------------------------------------------ streams and events */

static void complete_event(EventState &e, uint64_t record, cudaError_t status)
{
    std::lock_guard<std::mutex> lk(e.mu);
    e.completed = std::max(e.completed, record);
    if (record == e.recorded) e.status = status;
}

static void join_launch(CUstream_st *s, Launch &l)
{
    std::unique_lock<std::mutex> lk(l.mu);
    if (++l.arrived < l.streams.size()) {
        l.cv.wait(lk, [&l] { return l.done; });
    } else {
        lk.unlock();
        bool stream_failed = false;
        for (CUstream_st *other : l.streams) stream_failed |= other->failed.load();
        bool ok = false;
        try {
            ok = run_ops(l.ops, stream_failed);
        } catch (...) {
            /* out of memory: the streams fail, the waiting ones are released */
        }
        lk.lock();
        l.failed = !ok;
        l.done = true;
        l.cv.notify_all();
    }
    if (l.failed) s->failed.store(true);
}

static void run_item(CUstream_st *s, QueueItem &item)
{
    if (item.launch) {
        join_launch(s, *item.launch);
    } else {
        complete_event(*item.event, item.record,
                       s->failed.load() ? cudaErrorLaunchFailure : cudaSuccess);
    }
}

void stream_worker(CUstream_st *s)
{
    std::unique_lock<std::mutex> lk(s->mu);
    for (;;) {
        s->cv.wait(lk, [s] { return !s->queue.empty() || s->closing; });
        if (s->queue.empty()) break;
        QueueItem item = std::move(s->queue.front());
        s->queue.pop_front();
        s->busy = true;
        lk.unlock();
        try {
            run_item(s, item);
        } catch (...) {
            s->failed.store(true); /* out of memory */
        }
        item = QueueItem();
        lk.lock();
        s->busy = false;
        s->cv.notify_all();
    }
    lk.unlock();
    delete s;
}

void enqueue(CUstream_st *s, QueueItem item)
{
    std::lock_guard<std::mutex> lk(s->mu);
    s->queue.push_back(std::move(item));
    s->cv.notify_all();
}

/* ------------------------------------------------------------------ groups */

/* One lock for launching, so that groups over several streams reach them in
 * the same order on all of them. */
static std::mutex &launch_mutex()
{
    static std::mutex *m = new std::mutex;
    return *m;
}

/* Numbers op in its channel or among its communicator's collectives. */
static void assign_order(Op &op)
{
    Comm &c = *op.comm;
    std::lock_guard<std::mutex> lk(c.mu);
    c.pending++;
    if (op.kind == Kind::Send) {
        op.seq = ++c.sends_issued[op.peer];
    } else if (op.kind == Kind::Recv) {
        op.seq = ++c.recvs_issued[op.peer];
    } else {
        op.seq = ++c.colls_issued;
        op.phase_base = c.next_phase;
        c.next_phase += 2 * op.chunks;
    }
}

/* Every communicator this process joined, by uid; under launch_mutex. Kept
 * after a communicator is destroyed: its counts still order the others. */
static std::vector<std::shared_ptr<OrderCounts>> &order_book()
{
    static auto *book = new std::vector<std::shared_ptr<OrderCounts>>;
    return *book;
}

void enter_order_book(Comm &c, const char *name)
{
    auto counts = std::make_shared<OrderCounts>();
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (const char *p = name; *p; p++) h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
    counts->uid = h;
    for (int q = 0; q < c.nranks; q++) {
        counts->pids.push_back(c.slot(q)->pid);
        counts->starts.push_back(c.slot(q)->start_time);
    }
    counts->launches.assign((size_t)c.nranks, 0);
    c.order = counts;
    std::lock_guard<std::mutex> lk(launch_mutex());
    auto &book = order_book();
    auto at = std::find_if(book.begin(), book.end(),
                           [h](const std::shared_ptr<OrderCounts> &b) { return b->uid > h; });
    book.insert(at, counts);
}

/* This process's counts with the process of rank q of a, over the other
 * communicators that process joined too. */
static OrderList counts_with(const OrderCounts &a, int q)
{
    OrderList list;
    for (const auto &b : order_book()) {
        if (b.get() == &a) continue;
        for (size_t r = 0; r < b->pids.size(); r++)
            if (b->pids[r] == a.pids[(size_t)q] && b->starts[r] == a.starts[(size_t)q]) {
                if (b->launches[r] > 0) list.emplace_back(b->uid, b->launches[r]);
                break;
            }
    }
    return list;
}

/* Gives each op its order lists, then counts the launch once per
 * communicator and peer it involves. Under launch_mutex. */
static void take_order(std::vector<std::unique_ptr<Op>> &ops)
{
    std::vector<std::pair<OrderCounts *, int>> involved;
    for (auto &op : ops) {
        Comm &c = *op->comm;
        op->order.assign((size_t)c.nranks, OrderList());
        for (int q = 0; q < c.nranks; q++) {
            if (q == c.rank || (op->is_p2p() && q != op->peer)) continue;
            op->order[(size_t)q] = counts_with(*c.order, q);
            involved.emplace_back(c.order.get(), q);
        }
    }
    std::sort(involved.begin(), involved.end());
    involved.erase(std::unique(involved.begin(), involved.end()), involved.end());
    for (auto &i : involved) i.first->launches[(size_t)i.second]++;
}

void launch_group(std::vector<std::unique_ptr<Op>> ops)
{
    if (ops.empty()) return;
    auto launch = std::make_shared<Launch>();
    std::lock_guard<std::mutex> lk(launch_mutex());
    take_order(ops);
    for (auto &op : ops) {
        assign_order(*op);
        auto &streams = launch->streams;
        if (std::find(streams.begin(), streams.end(), op->stream) == streams.end())
            streams.push_back(op->stream);
    }
    {
        Registry &reg = registry();
        std::lock_guard<std::mutex> rk(reg.mu);
        for (auto &op : ops) reg.ops.push_back(op.get());
    }
    launch->ops = std::move(ops);
    for (CUstream_st *s : launch->streams) enqueue(s, QueueItem{launch, nullptr, 0});
}

GroupState &group_state()
{
    thread_local GroupState g;
    return g;
}

ncclResult_t refuse(ncclResult_t code, const std::string &why)
{
    print_line("nccl-emu: " + why);
    GroupState &g = group_state();
    if (g.depth > 0 && g.error == ncclSuccess) g.error = code;
    return code;
}

ncclResult_t submit(std::unique_ptr<Op> op)
{
    GroupState &g = group_state();
    if (g.depth > 0) {
        g.ops.push_back(std::move(op));
        return ncclSuccess;
    }
    std::vector<std::unique_ptr<Op>> one;
    one.push_back(std::move(op));
    launch_group(std::move(one));
    return ncclSuccess;
}

} // namespace nccl_emu
