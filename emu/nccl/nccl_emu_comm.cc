/* nccl_emu_comm.cc: the model of NCCL's communicators: the check of the order
 * in which ranks issue operations on several communicators (OrderCounts), a
 * communicator's view of its peers, and ncclCommInitRank's joining of the
 * ranks in their shared-memory segment. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>

#include "emu/nccl/nccl_emu_internal.h"

namespace nccl_emu
{

/* ------------------------------------------------------------------ order across communicators */

static uint64_t mix64(uint64_t x)
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

Comm::~Comm()
{
    if (map) munmap(map, map_bytes);
}

bool Comm::fail(ncclResult_t code)
{
    int expected = ncclSuccess;
    if (!async_error.compare_exchange_strong(expected, code)) return false;
    if (!aborted.load()) store_release(&slot(rank)->state, (uint32_t)kFailed);
    return true;
}

std::string Comm::peer_trouble(int q)
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

std::string Comm::any_peer_trouble()
{
    for (int q = 0; q < nranks; q++) {
        if (q == rank) continue;
        std::string why = peer_trouble(q);
        if (!why.empty()) return why;
    }
    return "";
}

/* ------------------------------------------------------------------ initialisation */

thread_local int t_device = 0;

/* As CUDA documents, a process that used the runtime and then forked leaves
 * a child that cannot: the first call makes its process the owner. */
bool runtime_usable()
{
    static std::atomic<pid_t> owner{0};
    pid_t none = 0, me = getpid();
    return owner.compare_exchange_strong(none, me) || none == me;
}

static ncclResult_t init_timeout(const Comm &c, const char *name)
{
    print_line(format("nccl-emu: rank %d: ncclCommInitRank: no communicator %s within %g s", c.rank,
                      name, c.timeout));
    return ncclSystemError;
}

/* Opens or creates the segment and maps it, once its creator filled it. */
static ncclResult_t attach_segment(const char *name, int nranks, double deadline, Comm &c)
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
static ncclResult_t check_segment(Comm &c, const char *name, int nranks, double deadline)
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
static std::string joined_peer_trouble(Comm &c)
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
static ncclResult_t join_ranks(Comm &c, const char *name, double deadline)
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
static ncclResult_t check_devices(Comm &c)
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

void wait_quiet(Comm &c, bool launched_too, double max_s)
{
    std::unique_lock<std::mutex> lk(c.mu);
    auto quiet = [&c, launched_too] { return c.active == 0 && (!launched_too || c.pending == 0); };
    if (max_s > 0)
        c.cv.wait_for(lk, std::chrono::duration<double>(max_s), quiet);
    else
        c.cv.wait(lk, quiet);
}

} // namespace nccl_emu
