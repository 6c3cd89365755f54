/* nccl_emu_process.cc: the model of NCCL's utilities (the clock, messages on
 * stderr, its settings from the environment), what it knows of processes (has
 * a peer exited, when did this one start) and where the parts of a
 * communicator's shared-memory segment lie. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "emu/nccl/nccl_emu_internal.h"

namespace nccl_emu
{

/* ------------------------------------------------------------------ utilities */

double now_s()
{
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

std::string format(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return buf;
}

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

/* ------------------------------------------------------------------ processes */

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

static size_t round_up(size_t n, size_t to)
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

} // namespace nccl_emu
