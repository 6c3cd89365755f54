/* nccl_emu.cc: a model of NCCL, and of the few CUDA runtime calls around it,
 * between the processes of one machine, for the emulated-device test binaries
 * (linked instead of libnccl and libcudart; the signatures are those of the
 * real nccl.h and cuda_runtime.h). "Device" buffers are the calling process's
 * own memory; the device count is BK_EMU_GPUS_PER_NODE (default 1).
 *
 * What is modelled:
 * - A unique id names a shared-memory segment ("/burst-nccl-<hex>");
 *   ncclCommInitRank attaches every rank to it in any start order, within the
 *   timeout below. The first rank to arrive creates it, the last to attach
 *   unlinks its name, so nothing stays in /dev/shm once init succeeded. As
 *   NCCL does, two ranks of one communicator on the same device are refused.
 * - A stream is a FIFO run by one worker thread; an event is a marker in it.
 *   Every NCCL call outside a group is its own group. At the outermost
 *   ncclGroupEnd (nestable, per thread) a group's operations start together
 *   and progress concurrently, and its streams continue after all of them
 *   completed.
 * - Send/receive match per ordered pair of ranks in issue order and meet in
 *   a ring buffer of the segment; collectives meet in per-rank slots, chunk
 *   by chunk, with any size. AllReduce, ReduceScatter (recvcount per rank)
 *   and AllGather (rank-major output) reduce in rank order, so every rank gets
 *   the same bits; the documented in-place forms work.
 * - Failures: an operation that makes no progress for BK_EMU_NCCL_TIMEOUT
 *   seconds (default 120) fails with ncclSystemError; an operation that
 *   depends on a rank that aborted, failed, destroyed the communicator or
 *   exited fails with ncclRemoteError. A failed operation fails its
 *   communicator (ncclCommGetAsyncError), which the peers see, and its stream:
 *   later operations on the stream fail without running and later events
 *   report cudaErrorLaunchFailure. The first failure of a communicator prints
 *   one line on stderr naming every pending operation of the process.
 *   ncclCommAbort returns once no operation of the communicator is running;
 *   ncclCommDestroy first waits for all of them.
 * - As CUDA documents, a process forked after it used the runtime leaves a
 *   child that cannot: every runtime call there (and ncclCommInitRank) fails.
 * - Buffers, where the program links the SIMT emulator's record of
 *   allocations (buffer_problem): as NCCL documents "data pointers", memory
 *   the communicator's device reaches is accepted; pageable host memory,
 *   another device's memory and a range past its allocation's end are
 *   refused (ncclInvalidArgument).
 *
 * Chosen strictly where NCCL's documentation allows either behaviour:
 * - A send never completes, and never moves data, before its receive runs
 *   (no eager buffering), so ungrouped rings deadlock whichever call comes
 *   first; a send completes only once the receiver has all of its data.
 * - A group over several streams joins them (as if posted on every one, the
 *   documentation says): it starts when all of its streams reached it and
 *   holds them all until it completed, even across communicators.
 * - Matched send and receive of different sizes fail both (ncclInvalidUsage);
 *   so do collectives whose kind, count, type or operation differ by rank.
 *   Collective buffers that overlap other than in place are refused.
 * - An invalid call inside a group makes the outermost ncclGroupEnd return
 *   its error and launch none of the group's operations.
 * - Calls on a communicator that has an asynchronous error return it.
 * - cudaDeviceGetPCIBusId refuses a buffer too small for the whole id.
 *
 * - Operations on several communicators must be issued in one order on
 *   every rank (OrderCounts): a send and its receive, or a collective, whose
 *   ranks issued their other communicators' launches in different orders
 *   before it fail (ncclInvalidUsage), whether or not the model's workers
 *   would have deadlocked.
 *
 * Not modelled: the NULL (legacy default) stream, ncclCommInitRank inside a
 * group, reductions other than sum/max/min or on 16- and 8-bit floats, and
 * other NCCL or CUDA calls. */
#include <cuda_runtime.h>
#include <nccl.h>

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "kernels/emu/simt_memory.h"
#include "kernels/emu/simt_stream.h"

/* The emulated runtime's record of allocations and its hazard check, in the
 * programs that link the SIMT emulator (weak: test_nccl_emu runs the model on
 * host buffers alone). */
namespace bk_emu
{
int memory_find(const void *p, allocation *out) __attribute__((weak));
int external_stream_create(void) __attribute__((weak));
int external_issue(int id, const char *what, const access *acc, int n, uint64_t *op)
    __attribute__((weak));
void external_seen(int id, uint64_t op) __attribute__((weak));
const char *last_error(void) __attribute__((weak)); /* simt_runtime.h's */
}

namespace
{

/* ------------------------------------------------------------------ utilities */

double now_s()
{
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

std::string format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return buf;
}

/* One write, so that lines of different threads and processes do not mix. */
void print_line(const std::string &text)
{
    std::string line = text + "\n";
    ssize_t ignored = write(STDERR_FILENO, line.data(), line.size());
    (void)ignored;
}

double timeout_from_env()
{
    const char *v = getenv("BK_EMU_NCCL_TIMEOUT");
    if (!v || !*v) return 120;
    char *end;
    double t = strtod(v, &end);
    if (*end || !(t > 0) || t > 1e7) {
        print_line(format("nccl-emu: BK_EMU_NCCL_TIMEOUT=%s is not a positive number of seconds; "
                          "using 120",
                          v));
        return 120;
    }
    return t;
}

int device_count()
{
    const char *v = getenv("BK_EMU_GPUS_PER_NODE");
    long n = v && *v ? strtol(v, NULL, 10) : 1;
    return n >= 1 && n <= 256 ? (int)n : 1;
}

/* Waiting by polling: yields first, then sleeps that grow to 1 ms, so that
 * an idle wait costs little and a busy exchange stays fast. */
class Backoff
{
  public:
    void reset() { rounds_ = 0; }
    void pause()
    {
        if (rounds_ < 8) {
            sched_yield();
        } else {
            long ns = std::min(1000000L, 4000L << std::min(rounds_ - 8, 10));
            timespec ts = {0, ns};
            nanosleep(&ts, NULL);
        }
        rounds_++;
    }

  private:
    int rounds_ = 0;
};

/* Shared-memory words are plain integers accessed atomically: they live in a
 * segment that no constructor ran on. */
template <class T> T load_acquire(const T *p)
{
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
template <class T> void store_release(T *p, T v)
{
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
}

/* ------------------------------------------------------------------ processes */

/* Whether process pid, which started at start_time (clock ticks after boot,
 * /proc/PID/stat field 22), has exited: gone, a zombie, or its pid reused. */
bool process_exited(pid_t pid, uint64_t start_time)
{
    if (kill(pid, 0) != 0 && errno == ESRCH) return true;
    char path[64], text[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT;
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0) return false;
    text[n] = 0;
    const char *p = strrchr(text, ')'); /* the command name may hold spaces */
    if (!p) return false;
    char state = 0;
    unsigned long long started = 0;
    /* state is field 3; 18 fields lie between it and starttime */
    if (sscanf(p + 1,
               " %c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu",
               &state, &started) != 2)
        return false;
    return state == 'Z' || state == 'X' || (start_time && started != start_time);
}

uint64_t own_start_time()
{
    char text[1024];
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0) return 0;
    text[n] = 0;
    const char *p = strrchr(text, ')');
    unsigned long long started = 0;
    if (!p ||
        sscanf(p + 1,
               " %*c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu",
               &started) != 1)
        return 0;
    return started;
}

/* ------------------------------------------------------------------ segment layout */

const char kIdTag[] = "bk-nccl-emu-1";
const uint64_t kSegmentReady = 0x6e63636c2d656d75ULL;

/* The unique id: a tag and the segment's name, NUL-terminated. */
struct IdLayout {
    char tag[16];
    char name[64];
};
static_assert(sizeof(IdLayout) <= NCCL_UNIQUE_ID_BYTES, "the id holds the segment name");

enum RankState : uint32_t { kAbsent = 0, kAttached, kLeft, kAborted, kFailed };

struct alignas(64) SegmentHeader {
    uint64_t ready; /* kSegmentReady once the creator filled the header */
    uint64_t total_bytes;
    uint32_t nranks;
    uint32_t attached; /* ranks that joined */
};

/* What a rank says its collective is, checked against the others. */
struct CollDesc {
    uint64_t seq, count;
    uint32_t kind, dtype, redop, unused;
};

enum { kOrderRanks = 64 }; /* peers whose order a collective checks */

struct alignas(64) RankSlot {
    uint32_t claimed, state; /* state: RankState */
    int32_t pid, device;
    uint64_t start_time;
    uint64_t phase; /* collective barriers passed */
    CollDesc desc;
    uint64_t order[kOrderRanks]; /* the collective's order_key for each peer */
};

/* The channel from one rank to another (or itself): the n-th receive is
 * armed by recv_seq = n, the n-th send answers with send_seq = n, the bytes
 * go through the ring (head written by the sender, tail by the receiver),
 * and the receiver sets done_seq = n once it has all of them. */
struct alignas(64) ChannelCtl {
    uint64_t done_seq, recv_seq, send_seq, recv_bytes, send_bytes;
    uint64_t send_order; /* the n-th send's order_key, set before send_seq */
    alignas(64) uint64_t head;
    alignas(64) uint64_t tail;
};

struct Layout {
    size_t slots_at, channels_at, rings_at, coll_at, total;
    size_t ring_bytes; /* per channel */
    size_t slot_bytes; /* per rank, for collectives */
};

size_t round_up(size_t n, size_t to)
{
    return (n + to - 1) / to * to;
}

Layout layout_for(int nranks)
{
    size_t n = (size_t)nranks;
    Layout l;
    l.ring_bytes = 256 << 10;
    while (l.ring_bytes > (16u << 10) && l.ring_bytes * n * n > (16u << 20)) l.ring_bytes /= 2;
    l.slot_bytes = std::max<size_t>(256 << 10, round_up(n * 8 * 64, 4096));
    l.slots_at = round_up(sizeof(SegmentHeader), 4096);
    l.channels_at = round_up(l.slots_at + n * sizeof(RankSlot), 4096);
    l.rings_at = round_up(l.channels_at + n * n * sizeof(ChannelCtl), 4096);
    l.coll_at = l.rings_at + n * n * l.ring_bytes;
    l.total = l.coll_at + n * l.slot_bytes;
    return l;
}

/* ------------------------------------------------------------------ order across communicators */

/* NCCL asks that operations on different communicators be issued in one
 * order on every rank: a kernel waiting for its peer may keep the GPU from
 * running the other communicator's kernel that the peer waits for, so ranks
 * issuing A then B and B then A can deadlock on a GPU, while on the model's
 * workers (a thread per stream) they would not. So the model checks the
 * order, per pair of ranks. Each process counts, for every communicator it
 * joined, its launches (an outermost group, or a call outside one) that
 * involved each peer. A launch's order key for a peer hashes those counts,
 * taken before the launch, over the other communicators both processes
 * joined. The two ends of a send and its receive, and every pair of ranks of
 * a collective, must bring equal keys; otherwise the operation fails with
 * ncclInvalidUsage, naming the counts. Strict where NCCL allows either: a
 * rank that groups two calls which its peer issues apart is refused too.
 * Counts of zero are left out, so a communicator that one rank created
 * before a launch and its peer after it does not count. */
struct OrderCounts {
    uint64_t uid = 0;               /* the segment's name hashed: equal on every rank */
    std::vector<int32_t> pids;      /* the process of each rank */
    std::vector<uint64_t> starts;   /* and its start time */
    std::vector<uint64_t> launches; /* per rank: this process's launches involving it */
};

/* The counts a launch brings for one peer: (uid, launches) by uid. */
typedef std::vector<std::pair<uint64_t, uint64_t>> OrderList;

uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

uint64_t order_key(const OrderList &counts)
{
    uint64_t h = mix64(counts.size());
    for (const auto &c : counts) h = mix64(h ^ mix64(c.first) ^ (c.second * 0x100000001b3ull));
    return h;
}

std::string order_text(const OrderList &counts)
{
    std::string text;
    for (const auto &c : counts)
        text += format("%scomm %08llx: %llu", text.empty() ? "" : ", ",
                       (unsigned long long)(c.first >> 32), (unsigned long long)c.second);
    return text.empty() ? "none" : text;
}

/* ------------------------------------------------------------------ communicator */

struct Comm {
    int rank = 0, nranks = 0;
    double timeout = 120;
    const void *handle = nullptr; /* the user's ncclComm_t, for reports */
    std::shared_ptr<OrderCounts> order;
    void *map = nullptr;
    size_t map_bytes = 0;
    Layout layout{};

    std::mutex mu;
    std::condition_variable cv;         /* pending or active changed */
    std::vector<uint64_t> sends_issued; /* per peer; under mu */
    std::vector<uint64_t> recvs_issued; /* per peer; under mu */
    uint64_t colls_issued = 0;          /* under mu */
    uint64_t next_phase = 0;            /* under mu */
    int pending = 0;                    /* launched, not finished; under mu */
    int active = 0;                     /* started, not finished; under mu */
    double next_liveness_check = 0;     /* under mu */
    std::vector<char> peer_exited;      /* under mu */
    std::atomic<uint64_t> colls_done{0};
    std::atomic<bool> aborted{false}, closed{false};
    std::atomic<int> async_error{ncclSuccess};

    ~Comm()
    {
        if (map) munmap(map, map_bytes);
    }

    uint8_t *base() const { return static_cast<uint8_t *>(map); }
    SegmentHeader *header() const { return reinterpret_cast<SegmentHeader *>(base()); }
    RankSlot *slot(int r) const
    {
        return reinterpret_cast<RankSlot *>(base() + layout.slots_at) + r;
    }
    ChannelCtl *channel(int from, int to) const
    {
        return reinterpret_cast<ChannelCtl *>(base() + layout.channels_at) + from * nranks + to;
    }
    uint8_t *ring(int from, int to) const
    {
        return base() + layout.rings_at + (size_t)(from * nranks + to) * layout.ring_bytes;
    }
    uint8_t *coll_slot(int r) const
    {
        return base() + layout.coll_at + (size_t)r * layout.slot_bytes;
    }

    /* Records the communicator's first error, which its peers see in its
     * slot; true for the first. */
    bool fail(ncclResult_t code)
    {
        int expected = ncclSuccess;
        if (!async_error.compare_exchange_strong(expected, code)) return false;
        if (!aborted.load()) store_release(&slot(rank)->state, (uint32_t)kFailed);
        return true;
    }

    /* Why rank q can no longer take part, or "" while it can. */
    std::string peer_trouble(int q)
    {
        switch (load_acquire(&slot(q)->state)) {
        case kAborted:
            return format("rank %d aborted the communicator", q);
        case kFailed:
            return format("rank %d failed", q);
        case kLeft:
            return format("rank %d destroyed the communicator", q);
        default:
            break;
        }
        std::lock_guard<std::mutex> lk(mu);
        double now = now_s();
        if (now >= next_liveness_check) {
            next_liveness_check = now + 0.2;
            for (int r = 0; r < nranks; r++)
                if (r != rank && !peer_exited[r] && load_acquire(&slot(r)->state) != kAbsent)
                    peer_exited[r] = process_exited(slot(r)->pid, slot(r)->start_time);
        }
        return peer_exited[q] ? format("rank %d (pid %d) exited", q, (int)slot(q)->pid) : "";
    }

    std::string any_peer_trouble()
    {
        for (int q = 0; q < nranks; q++) {
            if (q == rank) continue;
            std::string why = peer_trouble(q);
            if (!why.empty()) return why;
        }
        return "";
    }
};

} // namespace

/* The handles the headers name. */
struct ncclComm {
    std::shared_ptr<Comm> impl;
};

namespace
{

/* ------------------------------------------------------------------ operations */

enum class Kind { Send, Recv, AllReduce, ReduceScatter, AllGather };

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

enum class Step { Waiting, Progress, Done, Failed };

struct Op {
    Kind kind = Kind::Send;
    std::shared_ptr<Comm> comm;
    cudaStream_t stream = nullptr; /* the queue it runs in */
    int peer = -1;                 /* send and recv */
    const void *sendbuf = nullptr;
    void *recvbuf = nullptr;
    size_t count = 0; /* elements: p2p, allreduce; per rank: reducescatter, allgather */
    ncclDataType_t dtype = ncclUint8;
    ncclRedOp_t redop = ncclSum;
    size_t elem = 1;

    /* Order, assigned at launch: the channel's or the collective's number
     * (from 1), and for a collective its first barrier and its chunks. */
    uint64_t seq = 0, phase_base = 0;
    size_t chunk_elems = 0, chunks = 0;
    std::vector<OrderList> order; /* per rank of the communicator: the peers' counts */

    /* Progress, the worker's alone. */
    int state = 0;
    size_t moved = 0, chunk = 0;
    double last_progress = 0;
    ncclResult_t result = ncclSuccess;
    std::string failure; /* why it failed, for the report */
    bool report = false; /* its failure deserves a report */
    bool finished = false;
    std::atomic<bool> started{false};

    size_t bytes() const { return count * elem; }
    bool is_p2p() const { return kind == Kind::Send || kind == Kind::Recv; }

    std::string describe() const
    {
        std::string what = kind == Kind::Send ? format("send %zu bytes to rank %d", bytes(), peer)
                           : kind == Kind::Recv
                               ? format("recv %zu bytes from rank %d", bytes(), peer)
                               : format("%s %zu bytes", kind_name(kind), bytes());
        return what + format(" on comm %p (stream %p%s)", comm->handle, (void *)stream,
                             started.load() ? "" : ", not started");
    }
};

/* Every operation launched and not finished in this process, for reports. */
struct Registry {
    std::mutex mu;
    std::vector<const Op *> ops;
};

Registry &registry()
{
    static Registry *r = new Registry; /* never freed: workers may outlive main */
    return *r;
}

void report(int rank, const std::string &why)
{
    std::string text = format("nccl-emu: rank %d: ", rank) + why + "; pending: ";
    Registry &reg = registry();
    std::lock_guard<std::mutex> lk(reg.mu);
    for (size_t i = 0; i < reg.ops.size(); i++) text += (i ? "; " : "") + reg.ops[i]->describe();
    if (reg.ops.empty()) text += "none";
    print_line(text);
}

Step fail_op(Op &op, ncclResult_t code, const std::string &why, bool report_it)
{
    op.result = code;
    op.failure = why;
    op.report = report_it;
    return Step::Failed;
}

/* ------------------------------------------------------------------ point-to-point */

enum { kTurn = 0, kMatch, kCopy, kDelivered, kPublish, kGather, kRelease };

void ring_write(uint8_t *ring, size_t size, uint64_t pos, const uint8_t *src, size_t n)
{
    size_t at = pos % size, first = std::min(n, size - at);
    memcpy(ring + at, src, first);
    if (n > first) memcpy(ring, src + first, n - first);
}

void ring_read(const uint8_t *ring, size_t size, uint64_t pos, uint8_t *dst, size_t n)
{
    size_t at = pos % size, first = std::min(n, size - at);
    memcpy(dst, ring + at, first);
    if (n > first) memcpy(dst + first, ring, n - first);
}

Step size_mismatch(Op &op, uint64_t other)
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
Step order_mismatch(Op &op)
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
Step step_recv(Op &op)
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
Step step_send(Op &op)
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

template <class T> T load_elem(const uint8_t *p, size_t i)
{
    T v;
    memcpy(&v, p + i * sizeof(T), sizeof(T));
    return v;
}

template <class T> T combine(T a, T b, ncclRedOp_t op)
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
void reduce_typed(uint8_t *out, const std::vector<const uint8_t *> &in, size_t n, ncclRedOp_t op)
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

void reduce(uint8_t *out, const std::vector<const uint8_t *> &in, size_t n, ncclDataType_t t,
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
size_t chunk_len(const Op &op)
{
    size_t start = op.chunk * op.chunk_elems;
    return std::min(op.chunk_elems, op.count - std::min(op.count, start));
}

CollDesc desc_of(const Op &op)
{
    CollDesc d{};
    d.seq = op.seq;
    d.count = op.count;
    d.kind = (uint32_t)op.kind;
    d.dtype = (uint32_t)op.dtype;
    d.redop = op.kind == Kind::AllGather ? 0 : (uint32_t)op.redop;
    return d;
}

std::string desc_text(const CollDesc &d)
{
    return format("%s #%llu of %llu elements of type %u, op %u", kind_name((Kind)d.kind),
                  (unsigned long long)d.seq, (unsigned long long)d.count, d.dtype, d.redop);
}

/* This rank's share of the chunk into its slot (and, first, its description). */
void publish_chunk(Op &op)
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
void combine_chunk(Op &op)
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

bool all_reached(Comm &c, uint64_t phase)
{
    for (int q = 0; q < c.nranks; q++)
        if (load_acquire(&c.slot(q)->phase) < phase) return false;
    return true;
}

/* "" when every rank describes the same collective and issued it in the same
 * order as this rank against the other communicators (OrderCounts). */
std::string desc_disagreement(Comm &c, const Op &op)
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
Step step_collective(Op &op)
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
bool start_op(Op &op)
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
Step step_op(Op &op)
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

void finish_op(Op &op)
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
void conclude_failure(Op &op)
{
    if (op.comm->fail(op.result) && op.report) report(op.comm->rank, op.failure);
    finish_op(op);
}

/* Ops that made no progress for their timeout: one report for them all. */
void fail_stalled(std::vector<Op *> &stalled)
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

/* Runs a group's ops to the end, all at once; true when all succeeded. */
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

/* ------------------------------------------------------------------ streams and events */

struct EventState {
    std::mutex mu;
    uint64_t recorded = 0;  /* records so far */
    uint64_t completed = 0; /* the latest record its stream passed */
    cudaError_t status = cudaSuccess;
    int hazard_id = -1;      /* the latest record's stream in the hazard check, */
    uint64_t hazard_ops = 0; /* and its operations issued before the record */
};

/* A group's ops on all the streams it uses: the last stream to reach it runs
 * them, the others wait, and all continue once it is done. */
struct Launch {
    std::vector<std::unique_ptr<Op>> ops;
    std::vector<CUstream_st *> streams;
    std::mutex mu;
    std::condition_variable cv;
    size_t arrived = 0;
    bool done = false, failed = false;
};

struct QueueItem {
    std::shared_ptr<Launch> launch;
    std::shared_ptr<EventState> event;
    uint64_t record = 0;
};

} // namespace

struct CUstream_st {
    std::mutex mu;
    std::condition_variable cv; /* queue or busy changed */
    std::deque<QueueItem> queue;
    bool busy = false, closing = false;
    std::atomic<bool> failed{false}; /* an op on it failed: later work fails */
    std::thread worker;
    /* with the SIMT emulator: the stream's id in its hazard check (-1 before
     * its first operation) and the operations issued there; under mu */
    int hazard_id = -1;
    uint64_t hazard_ops = 0;
};

struct CUevent_st {
    std::shared_ptr<EventState> state;
};

namespace
{

void complete_event(EventState &e, uint64_t record, cudaError_t status)
{
    std::lock_guard<std::mutex> lk(e.mu);
    e.completed = std::max(e.completed, record);
    if (record == e.recorded) e.status = status;
}

void join_launch(CUstream_st *s, Launch &l)
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

void run_item(CUstream_st *s, QueueItem &item)
{
    if (item.launch) {
        join_launch(s, *item.launch);
    } else {
        complete_event(*item.event, item.record,
                       s->failed.load() ? cudaErrorLaunchFailure : cudaSuccess);
    }
}

/* The stream's worker; after cudaStreamDestroy it drains the queue and frees
 * the stream. */
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
std::mutex &launch_mutex()
{
    static std::mutex *m = new std::mutex;
    return *m;
}

/* Numbers op in its channel or among its communicator's collectives. */
void assign_order(Op &op)
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
std::vector<std::shared_ptr<OrderCounts>> &order_book()
{
    static auto *book = new std::vector<std::shared_ptr<OrderCounts>>;
    return *book;
}

/* Enters communicator c (name: its segment's) in the order book. */
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
OrderList counts_with(const OrderCounts &a, int q)
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
void take_order(std::vector<std::unique_ptr<Op>> &ops)
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

struct GroupState {
    int depth = 0;
    ncclResult_t error = ncclSuccess; /* the first refused call of the group */
    std::vector<std::unique_ptr<Op>> ops;
};

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

/* ------------------------------------------------------------------ argument checks */

size_t elem_size(ncclDataType_t t)
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
bool overlaps_badly(Kind kind, const void *send, const void *recv, size_t count, size_t es,
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
std::string buffer_problem(const char *which, const void *p, size_t bytes, int device)
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
size_t side_bytes(Kind kind, int side, size_t bytes, int nranks)
{
    if (kind == (side == 0 ? Kind::Recv : Kind::Send)) return 0;
    Kind gathered = side == 0 ? Kind::ReduceScatter : Kind::AllGather;
    return kind == gathered ? bytes * (size_t)nranks : bytes;
}

/* The send and receive buffers' problem (buffer_problem), or "" (sizes:
 * side_bytes). */
std::string buffers_problem(Kind kind, const void *send, void *recv, size_t bytes, const Comm &c)
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
std::string hazard_problem(const char *name, Kind kind, const void *send, void *recv, size_t bytes,
                           const Comm &c, cudaStream_t stream)
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

/* The host has seen stream's operations up to its event's record done. */
void event_seen(const EventState &e)
{
    if (bk_emu::external_seen && e.hazard_id >= 0) bk_emu::external_seen(e.hazard_id, e.hazard_ops);
}

/* The op for a call, or the error it returns (and the reason in why). */
ncclResult_t make_op(Kind kind, const void *send, void *recv, size_t count, ncclDataType_t t,
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

/* ------------------------------------------------------------------ initialisation */

thread_local int t_device = 0; /* cudaSetDevice is per host thread */

/* As CUDA documents, a process that used the runtime and then forked leaves
 * a child that cannot: the first call makes its process the owner. */
bool runtime_usable()
{
    static std::atomic<pid_t> owner{0};
    pid_t none = 0, me = getpid();
    return owner.compare_exchange_strong(none, me) || none == me;
}

ncclResult_t init_timeout(const Comm &c, const char *name)
{
    print_line(format("nccl-emu: rank %d: ncclCommInitRank: no communicator %s within %g s", c.rank,
                      name, c.timeout));
    return ncclSystemError;
}

/* Opens or creates the segment and maps it, once its creator filled it. */
ncclResult_t attach_segment(const char *name, int nranks, double deadline, Comm &c)
{
    Layout l = layout_for(nranks);
    Backoff backoff;
    for (;;) {
        int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
        if (fd >= 0) {
            void *map = ftruncate(fd, (off_t)l.total) == 0
                            ? mmap(NULL, l.total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                            : MAP_FAILED;
            close(fd);
            if (map == MAP_FAILED) {
                shm_unlink(name);
                print_line(format("nccl-emu: cannot size %s: %s", name, strerror(errno)));
                return ncclSystemError;
            }
            c.map = map, c.map_bytes = l.total, c.layout = l;
            SegmentHeader *h = c.header();
            h->nranks = (uint32_t)nranks;
            h->total_bytes = l.total;
            store_release(&h->ready, kSegmentReady);
            return ncclSuccess;
        }
        if (errno != EEXIST) {
            print_line(format("nccl-emu: cannot create %s: %s", name, strerror(errno)));
            return ncclSystemError;
        }
        fd = shm_open(name, O_RDWR, 0);
        struct stat st;
        if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size > 0) {
            void *map = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            close(fd);
            if (map == MAP_FAILED) return ncclSystemError;
            c.map = map, c.map_bytes = (size_t)st.st_size, c.layout = l;
            return ncclSuccess;
        }
        if (fd >= 0) close(fd);
        if (now_s() > deadline) return init_timeout(c, name);
        backoff.pause(); /* not created yet, or not sized yet */
    }
}

/* Waits for the creator's header and checks it describes nranks ranks. */
ncclResult_t check_segment(Comm &c, const char *name, int nranks, double deadline)
{
    Backoff backoff;
    while (load_acquire(&c.header()->ready) != kSegmentReady) {
        if (now_s() > deadline) return init_timeout(c, name);
        backoff.pause();
    }
    uint32_t created_for = c.header()->nranks;
    if (created_for != (uint32_t)nranks || c.header()->total_bytes != c.map_bytes) {
        print_line(format("nccl-emu: rank %d: ncclCommInitRank with %d ranks, but the id's "
                          "communicator has %u",
                          c.rank, nranks, created_for));
        return ncclInvalidUsage;
    }
    return ncclSuccess;
}

/* Why a rank that joined already cannot finish joining, or "". */
std::string joined_peer_trouble(Comm &c)
{
    for (int q = 0; q < c.nranks; q++) {
        if (q == c.rank || load_acquire(&c.slot(q)->state) == kAbsent) continue;
        std::string why = c.peer_trouble(q);
        if (!why.empty()) return why;
    }
    return "";
}

/* Claims the rank's slot and waits until every rank did; the last one
 * unlinks the segment's name. */
ncclResult_t join_ranks(Comm &c, const char *name, double deadline)
{
    RankSlot *me = c.slot(c.rank);
    uint32_t unclaimed = 0;
    if (!__atomic_compare_exchange_n(&me->claimed, &unclaimed, 1u, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE)) {
        print_line(format("nccl-emu: rank %d joined the communicator twice", c.rank));
        return ncclInvalidUsage;
    }
    me->pid = (int32_t)getpid();
    me->start_time = own_start_time();
    me->device = t_device;
    store_release(&me->state, (uint32_t)kAttached);
    uint32_t joined = __atomic_add_fetch(&c.header()->attached, 1u, __ATOMIC_ACQ_REL);
    if (joined == (uint32_t)c.nranks) shm_unlink(name);
    Backoff backoff;
    while ((joined = load_acquire(&c.header()->attached)) != (uint32_t)c.nranks) {
        if (now_s() > deadline) {
            store_release(&me->state, (uint32_t)kAborted);
            print_line(
                format("nccl-emu: rank %d: ncclCommInitRank: %u of %d ranks joined within %g s",
                       c.rank, joined, c.nranks, c.timeout));
            return ncclSystemError;
        }
        std::string why = joined_peer_trouble(c);
        if (!why.empty()) {
            store_release(&me->state, (uint32_t)kAborted);
            print_line(format("nccl-emu: rank %d: ncclCommInitRank: %s", c.rank, why.c_str()));
            return ncclRemoteError;
        }
        backoff.pause();
    }
    return ncclSuccess;
}

/* NCCL refuses two ranks of a communicator on one device; every rank reaches
 * the same verdict. */
ncclResult_t check_devices(Comm &c)
{
    for (int q = 0; q < c.nranks; q++)
        for (int p = 0; p < q; p++)
            if (c.slot(p)->device == c.slot(q)->device) {
                print_line(format("nccl-emu: rank %d: ranks %d and %d both use device %d", c.rank,
                                  p, q, (int)c.slot(q)->device));
                store_release(&c.slot(c.rank)->state, (uint32_t)kFailed);
                return ncclInvalidUsage;
            }
    return ncclSuccess;
}

ncclResult_t init_rank(ncclComm_t *out, int nranks, const ncclUniqueId &id, int rank)
{
    IdLayout idl;
    memcpy(&idl, id.internal, sizeof idl);
    if (!out || nranks < 1 || rank < 0 || rank >= nranks ||
        memcmp(idl.tag, kIdTag, sizeof kIdTag) != 0 || !memchr(idl.name, 0, sizeof idl.name)) {
        print_line(
            format("nccl-emu: ncclCommInitRank: invalid arguments (rank %d of %d, or the id)", rank,
                   nranks));
        return ncclInvalidArgument;
    }
    if (group_state().depth > 0) {
        print_line("nccl-emu: ncclCommInitRank inside a group is not modelled");
        return ncclInvalidUsage;
    }
    if (!runtime_usable()) {
        print_line("nccl-emu: ncclCommInitRank: CUDA was used before this process forked");
        return ncclUnhandledCudaError;
    }
    auto c = std::make_shared<Comm>();
    c->rank = rank, c->nranks = nranks, c->timeout = timeout_from_env();
    c->sends_issued.assign((size_t)nranks, 0);
    c->recvs_issued.assign((size_t)nranks, 0);
    c->peer_exited.assign((size_t)nranks, 0);
    double deadline = now_s() + c->timeout;
    ncclResult_t r = attach_segment(idl.name, nranks, deadline, *c);
    if (r == ncclSuccess) r = check_segment(*c, idl.name, nranks, deadline);
    if (r == ncclSuccess) r = join_ranks(*c, idl.name, deadline);
    if (r == ncclSuccess) r = check_devices(*c);
    if (r != ncclSuccess) {
        shm_unlink(idl.name); /* whoever gives up leaves nothing behind */
        return r;
    }
    enter_order_book(*c, idl.name);
    *out = new ncclComm{c};
    c->handle = *out;
    return ncclSuccess;
}

/* Waits until no op of the communicator is started (abort: they stop at their
 * next step) or launched (destroy), at most max_s seconds. */
void wait_quiet(Comm &c, bool launched_too, double max_s)
{
    std::unique_lock<std::mutex> lk(c.mu);
    auto quiet = [&c, launched_too] { return c.active == 0 && (!launched_too || c.pending == 0); };
    if (max_s > 0)
        c.cv.wait_for(lk, std::chrono::duration<double>(max_s), quiet);
    else
        c.cv.wait(lk, quiet);
}

} // namespace

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
