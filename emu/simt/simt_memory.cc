/* simt_memory.cc: the emulated runtime's record of live allocations, their
 * red zones, and the checks of kernel pointers (simt_memory.h). */
#include "emu/simt/simt_memory.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <atomic>
#include <map>
#include <mutex>

#include "emu/simt/simt_internal.h"
#include "emu/simt/simt_runtime.h"

namespace bk_emu
{

namespace
{
/* cudaMalloc returns 256-byte aligned memory; the red zone runs from the exact
 * end to RED_ZONE_BYTES past that rounding, so even an overrun of a whole
 * rounding granule's worth lands in it. */
enum { ALIGNMENT = 256, RED_ZONE_BYTES = 256, RED_ZONE_BYTE = 0xdb };

size_t rounded_size(size_t bytes)
{
    return (bytes + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT;
}

/* Allocations of SPARSE_BYTES or more are mapped with MAP_NORESERVE, zero
 * pages until written: only the pages a kernel or a test touches take memory,
 * so a test can hand the kernels the buffers of a 1M-token sequence (16 GiB
 * each) and run a few of their blocks (set_edge_blocks, simt_runtime.h). */
const size_t SPARSE_BYTES = (size_t)1 << 30;

char *take(size_t total)
{
    if (total < SPARSE_BYTES) return static_cast<char *>(aligned_alloc(ALIGNMENT, total));
    void *p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    return p == MAP_FAILED ? NULL : static_cast<char *>(p); /* page-aligned */
}

void give(const char *p, size_t total)
{
    if (total < SPARSE_BYTES)
        free(const_cast<char *>(p));
    else
        munmap(const_cast<char *>(p), total);
}

struct memory_record {
    std::mutex lock;
    std::map<const char *, allocation> live; /* by base, to find the one holding a pointer */
    int device = 0;
};

memory_record &record()
{
    static memory_record *r = new memory_record; /* never destroyed: used at exit */
    return *r;
}

std::atomic<int> g_check_kernel_pointers{1};
/* Counts the frees: a cached allocation (check_global_read) is good while
 * no allocation was freed since it was looked up. */
std::atomic<unsigned long> g_frees{0};

/* The live allocation holding p, or end(); record's lock held. */
std::map<const char *, allocation>::const_iterator holding(const memory_record &r, const void *p)
{
    const char *c = static_cast<const char *>(p);
    auto at = r.live.upper_bound(c);
    if (at == r.live.begin()) return r.live.end();
    --at;
    return c < at->first + at->second.bytes ? at : r.live.end();
}

/* 0, or -1 with why when a's red zone was written. */
int red_zone_intact(const allocation &a, char *why, size_t len)
{
    const unsigned char *zone = reinterpret_cast<const unsigned char *>(a.base) + a.bytes;
    size_t zone_bytes = rounded_size(a.bytes) + RED_ZONE_BYTES - a.bytes;
    for (size_t i = 0; i < zone_bytes; i++) {
        if (zone[i] == RED_ZONE_BYTE) continue;
        snprintf(why, len,
                 "%s written past the end of an allocation of %zu bytes at %p (%s): byte %zu past "
                 "its end (offset %zu) holds 0x%02x",
                 memory_kind_name(a.kind), a.bytes, static_cast<const void *>(a.base), a.call, i,
                 a.bytes + i, zone[i]);
        return -1;
    }
    return 0;
}
} // namespace

const char *memory_kind_name(memory_kind kind)
{
    switch (kind) {
    case MEM_DEVICE:
        return "device memory";
    case MEM_PINNED_HOST:
        return "page-locked host memory";
    case MEM_REGISTERED_HOST:
        return "registered host memory";
    }
    return "?";
}

void *memory_alloc(size_t bytes, memory_kind kind, const char *call)
{
    if (bytes == 0) return NULL;
    size_t total = rounded_size(bytes) + RED_ZONE_BYTES;
    char *p = take(total);
    if (p == NULL) return NULL;
    memset(p + bytes, RED_ZONE_BYTE, total - bytes);
    memory_record &r = record();
    std::lock_guard<std::mutex> hold(r.lock);
    r.live[p] = allocation{p, bytes, kind, r.device, call};
    return p;
}

int memory_free(const void *p, memory_kind kind, char *why, size_t len)
{
    memory_record &r = record();
    allocation a;
    int ours;
    {
        std::lock_guard<std::mutex> hold(r.lock);
        auto at = r.live.find(static_cast<const char *>(p));
        ours = at != r.live.end() && at->second.kind == kind;
        if (ours) {
            a = at->second;
            r.live.erase(at);
            g_frees++;
        }
    }
    if (!ours) {
        char what[240];
        memory_describe(p, what, sizeof what);
        snprintf(why, len, "%p is not the start of a live allocation of %s: it is %s", p,
                 memory_kind_name(kind), what);
        return -2;
    }
    int rc = red_zone_intact(a, why, len);
    give(a.base, rounded_size(a.bytes) + RED_ZONE_BYTES);
    return rc;
}

int memory_find(const void *p, allocation *out)
{
    memory_record &r = record();
    std::lock_guard<std::mutex> hold(r.lock);
    auto at = holding(r, p);
    if (at == r.live.end()) return 0;
    *out = at->second;
    return 1;
}

void memory_describe(const void *p, char *buf, size_t len)
{
    allocation a;
    if (p == NULL)
        snprintf(buf, len, "NULL");
    else if (memory_find(p, &a))
        snprintf(buf, len, "%s (%s of %zu bytes at %p on device %d, offset %zu)",
                 memory_kind_name(a.kind), a.call, a.bytes, static_cast<const void *>(a.base),
                 a.device, (size_t)(static_cast<const char *>(p) - a.base));
    else
        snprintf(buf, len, "in no live allocation (pageable host memory, or memory already freed)");
}

int memory_red_zones_intact(char *why, size_t len)
{
    memory_record &r = record();
    std::lock_guard<std::mutex> hold(r.lock);
    for (const auto &at : r.live)
        if (red_zone_intact(at.second, why, len) != 0) return -1;
    return 0;
}

void memory_set_device(int device)
{
    memory_record &r = record();
    std::lock_guard<std::mutex> hold(r.lock);
    r.device = device;
}

size_t memory_live_bytes(memory_kind kind)
{
    memory_record &r = record();
    std::lock_guard<std::mutex> hold(r.lock);
    size_t sum = 0;
    for (const auto &at : r.live)
        if (at.second.kind == kind) sum += rounded_size(at.second.bytes);
    return sum;
}

void set_kernel_pointer_check(int on)
{
    g_check_kernel_pointers = on;
}

void check_global_read(const void *p, size_t bytes, size_t align, const char *file, int line)
{
    static __thread struct {
        const char *base, *end;
        unsigned long frees;
    } cached;
    if (!g_check_kernel_pointers) return;
    const char *c = static_cast<const char *>(p);
    if ((uintptr_t)p % align != 0)
        fail_thread("global read of %zu bytes at %s:%d: address %p is not %zu-byte aligned", bytes,
                    file, line, p, align);
    if (cached.frees == g_frees && c >= cached.base && c + bytes <= cached.end) return;
    allocation a;
    bool on_device = memory_find(p, &a) && a.kind == MEM_DEVICE;
    if (on_device && c + bytes <= a.base + a.bytes) {
        cached.base = a.base, cached.end = a.base + a.bytes, cached.frees = g_frees;
        return;
    }
    char what[240];
    memory_describe(p, what, sizeof what);
    if (on_device)
        fail_thread("global read of %zu bytes at %s:%d runs %zu bytes past the end of %s", bytes,
                    file, line, (size_t)(c + bytes - (a.base + a.bytes)), what);
    fail_thread("global read of %zu bytes at %s:%d from %p, which is %s", bytes, file, line, p,
                what);
}

int check_kernel_pointer(const char *kernel, int arg, const void *p)
{
    allocation a;
    if (p == NULL || !g_check_kernel_pointers || (memory_find(p, &a) && a.kind == MEM_DEVICE))
        return 0;
    char what[240], detail[400];
    memory_describe(p, what, sizeof what);
    snprintf(detail, sizeof detail,
             "pointer argument %d (%p) is %s; a kernel is given device memory only", arg, p, what);
    return refuse_launch(kernel, detail);
}

} // namespace bk_emu
