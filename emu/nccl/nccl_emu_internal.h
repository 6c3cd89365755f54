/* nccl_emu_internal.h: what the files of the model of NCCL (emu/nccl/) share:
 * the segment's layout, the communicator, operations, streams and events,
 * groups, and the functions one file defines for the others, all in namespace
 * nccl_emu (what only one file uses is static there). Private to emu/nccl/: the
 * programs see nccl.h and cuda_runtime.h alone. The files, each one or more of
 * the model's sections:
 *   nccl_emu_process.cc  utilities, processes, segment layout
 *   nccl_emu_comm.cc     order across communicators, communicator, initialisation
 *   nccl_emu_ops.cc      operations, point-to-point, collectives, running operations
 *   nccl_emu_stream.cc   streams and events, groups
 *   nccl_emu_check.cc    argument checks
 *   nccl_emu_api.cc      NCCL API, CUDA runtime API
 *
 * The model of NCCL, and of the few CUDA runtime calls around it,
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
#ifndef BURST_EMU_NCCL_EMU_INTERNAL_H
#define BURST_EMU_NCCL_EMU_INTERNAL_H

#include <cuda_runtime.h>
#include <nccl.h>

#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "emu/simt/simt_memory.h"
#include "emu/simt/simt_stream.h"

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
} // namespace bk_emu

namespace nccl_emu
{

/* ---------------------------------------- utilities (nccl_emu_process.cc) */

double now_s(); /* CLOCK_MONOTONIC, in seconds */
std::string format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* One write, so that lines of different threads and processes do not mix. */
void print_line(const std::string &text);
/* BK_EMU_NCCL_TIMEOUT in seconds (default 120). */
double timeout_from_env();
/* The emulated GPUs of the node: BK_EMU_GPUS_PER_NODE (default 1). */
int device_count();

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

/* ---------------------------------------- processes (nccl_emu_process.cc) */

/* Whether process pid, which started at start_time (clock ticks after boot,
 * /proc/PID/stat field 22), has exited: gone, a zombie, or its pid reused. */
bool process_exited(pid_t pid, uint64_t start_time);
/* This process's start time as process_exited takes it, 0 if unknown. */
uint64_t own_start_time();

/* ---------------------------------------- segment layout (nccl_emu_process.cc) */

inline constexpr char kIdTag[] = "bk-nccl-emu-1";
inline constexpr uint64_t kSegmentReady = 0x6e63636c2d656d75ULL;

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

/* Where the parts of a segment for nranks ranks lie. */
Layout layout_for(int nranks);

/* ---------------------------------------- order across communicators (nccl_emu_comm.cc) */

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

/* The order key of a launch's counts for one peer: equal on both ends
 * when the counts are. */
uint64_t order_key(const OrderList &counts);
/* The counts for a report ("none" when there are none). */
std::string order_text(const OrderList &counts);

/* ---------------------------------------- communicator (nccl_emu_comm.cc) */

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

    ~Comm();

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
    bool fail(ncclResult_t code);
    /* Why rank q can no longer take part, or "" while it can. */
    std::string peer_trouble(int q);
    /* Why some peer can no longer take part, or "". */
    std::string any_peer_trouble();
};

/* ---------------------------------------- operations (nccl_emu_ops.cc) */

enum class Kind { Send, Recv, AllReduce, ReduceScatter, AllGather };

const char *kind_name(Kind k);

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

/* The process's registry. */
Registry &registry();

/* Whether the model reduces datatype t (collectives). */
bool reducible(ncclDataType_t t);
/* Runs a group's ops to the end, all at once (running operations); true when
 * all succeeded. */
bool run_ops(std::vector<std::unique_ptr<Op>> &ops, bool stream_failed);

/* ---------------------------------------- streams and events (nccl_emu_stream.cc) */

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

/* The stream's worker; after cudaStreamDestroy it drains the queue and frees
 * the stream. */
void stream_worker(CUstream_st *s);
void enqueue(CUstream_st *s, QueueItem item);

/* ---------------------------------------- groups (nccl_emu_stream.cc) */

struct GroupState {
    int depth = 0;
    ncclResult_t error = ncclSuccess; /* the first refused call of the group */
    std::vector<std::unique_ptr<Op>> ops;
};

/* Enters communicator c (name: its segment's) in the order book. */
void enter_order_book(Comm &c, const char *name);
void launch_group(std::vector<std::unique_ptr<Op>> ops);
/* The calling thread's group. */
GroupState &group_state();
/* Prints why a call was refused and returns code, the group's error if the
 * first of an open group. */
ncclResult_t refuse(ncclResult_t code, const std::string &why);
/* Holds op for the open group, or launches it alone. */
ncclResult_t submit(std::unique_ptr<Op> op);

/* ---------------------------------------- argument checks (nccl_emu_check.cc) */

/* The host has seen stream's operations up to its event's record done. */
void event_seen(const EventState &e);
/* A call of kind checked and submitted, or the error it returns. */
ncclResult_t issue(Kind kind, const void *send, void *recv, size_t count, ncclDataType_t t,
                   ncclRedOp_t redop, int peer, ncclComm_t comm, cudaStream_t stream);

/* ---------------------------------------- initialisation (nccl_emu_comm.cc) */

extern thread_local int t_device; /* cudaSetDevice is per host thread */
/* Whether this process may use the runtime: not a child forked after its
 * parent used it. */
bool runtime_usable();
ncclResult_t init_rank(ncclComm_t *out, int nranks, const ncclUniqueId &id, int rank);
/* Waits until no op of the communicator is started (abort: they stop at their
 * next step) or launched (destroy), at most max_s seconds. */
void wait_quiet(Comm &c, bool launched_too, double max_s);

} // namespace nccl_emu

/* The handles the headers name. */
struct ncclComm {
    std::shared_ptr<nccl_emu::Comm> impl;
};

struct CUstream_st {
    std::mutex mu;
    std::condition_variable cv; /* queue or busy changed */
    std::deque<nccl_emu::QueueItem> queue;
    bool busy = false, closing = false;
    std::atomic<bool> failed{false}; /* an op on it failed: later work fails */
    std::thread worker;
    /* with the SIMT emulator: the stream's id in its hazard check (-1 before
     * its first operation) and the operations issued there; under mu */
    int hazard_id = -1;
    uint64_t hazard_ops = 0;
};

struct CUevent_st {
    std::shared_ptr<nccl_emu::EventState> state;
};

#endif
