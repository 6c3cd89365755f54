/* placement.h: a rank's share of its machine's cores: how many OpenMP threads
 * it runs and on which CPUs. `burst run` places every rank it starts; a task
 * that srun started places itself. OMP_NUM_THREADS set by the user wins: the
 * rank then runs that many threads and is not pinned. */
#ifndef BURST_CLI_PLACEMENT_H
#define BURST_CLI_PLACEMENT_H

#include <stdio.h>

#include "util/cores.h"

/* In rank `rank` of n_ranks that `burst run` has forked, before exec: unless
 * OMP_NUM_THREADS is set, pins the process to its share of all (the
 * launcher's CPUs, bu_cpus_share) and sets OMP_NUM_THREADS to the share's
 * size. */
void cli_place_launched_rank(const bu_cpus *all, int n_ranks, int rank);

/* First thing in `burst`: under srun (SLURM_PROCID set, not under `burst run`)
 * and unless OMP_NUM_THREADS is set. Unless Slurm bound the task to CPUs of
 * its own (SLURM_CPU_BIND_TYPE other than none), the affinity mask is shared by
 * the step's tasks on this node (SLURM_STEP_TASKS_PER_NODE, SLURM_NODEID), and
 * the task pins itself to its share by SLURM_LOCALID (bu_cpus_share). It runs
 * SLURM_CPUS_PER_TASK threads when set, else its share's threads. */
void cli_place_slurm_task(void);

/* Prints "N thread(s) on CPUs L": this process's OpenMP threads and affinity. */
void cli_placement_print(FILE *out);

#endif
