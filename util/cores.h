/* cores.h: the CPUs this process may run on (its affinity mask, which taskset,
 * a cgroup cpuset or Slurm may have narrowed) and a rank's share of them when
 * several ranks run on one machine. */
#ifndef BURST_UTIL_CORES_H
#define BURST_UTIL_CORES_H

#include <stddef.h>

#define BU_MAX_CPUS 1024 /* glibc's CPU_SETSIZE */

typedef struct {
    int n;               /* CPUs in the list */
    int id[BU_MAX_CPUS]; /* their numbers, ascending */
} bu_cpus;

/* This process's affinity mask as a list: 0, or -1 when it cannot be read. */
int bu_cpus_allowed(bu_cpus *out);

/* The share of local rank index (0..n_local-1) of all, and the threads it
 * should run (returned). With n_local <= all->n the share is a contiguous
 * slice of the list, the slices disjoint, covering the list and differing in
 * size by at most one, and the threads are its CPUs. With more ranks than
 * CPUs every rank shares all of them with one thread: the scheduler can then
 * move a rank onto a CPU that another left idle while waiting for data. */
int bu_cpus_share(const bu_cpus *all, int n_local, int index, bu_cpus *share);

/* Restricts this process's calling thread, and the threads it creates later
 * (OpenMP's pool), to cpus: 0, or -1 with errno set. */
int bu_cpus_pin(const bu_cpus *cpus);

/* "0-3,8": the list in ranges, into buf[len] (truncated to fit); returns buf. */
const char *bu_cpus_format(const bu_cpus *cpus, char *buf, size_t len);

#endif
