/* placement.c: see placement.h. Without it every rank starts the OpenMP
 * default of one thread per CPU, so N ranks on a machine run N times as many
 * busy threads as there are CPUs and spend their time waiting for each other. */
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/cli/placement.h"
#include "transport/launch.h"
#include "util/parse.h"

void cli_place_launched_rank(const bu_cpus *all, int n_ranks, int rank)
{
    if (getenv("OMP_NUM_THREADS") || all->n < 1) return;
    static bu_cpus share;
    int threads = bu_cpus_share(all, n_ranks, rank, &share);
    bu_cpus_pin(&share); /* where pinning is refused, the thread count still holds */
    char buf[16];
    snprintf(buf, sizeof buf, "%d", threads);
    setenv("OMP_NUM_THREADS", buf, 1);
}

/* The integer in variable name, at least lo and below 2^20; -1 when the
 * variable is unset or holds something else. */
static int env_int(const char *name, int lo)
{
    const char *s = getenv(name);
    int64_t v;
    return s && bu_parse_i64_min(s, lo, &v) == 0 && v < 1 << 20 ? (int)v : -1;
}

/* Tasks of this step on node `node`, from Slurm's "2(x3),1" (two tasks on
 * each of the first three nodes, one on the fourth); 1 when unknown. */
static int slurm_tasks_on_node(const char *list, int node)
{
    const char *p = list;
    while (p && *p) {
        char *end;
        long tasks = strtol(p, &end, 10), repeat = 1;
        if (end == p || tasks < 1 || tasks >= 1 << 20) return 1;
        p = end;
        if (strncmp(p, "(x", 2) == 0) {
            repeat = strtol(p + 2, &end, 10);
            if (end == p + 2 || *end != ')' || repeat < 1) return 1;
            p = end + 1;
        }
        if (node < repeat) return (int)tasks;
        node -= (int)repeat;
        if (*p == ',') p++;
    }
    return 1;
}

/* True when Slurm bound this task to CPUs of its own (task/affinity,
 * --cpu-bind): its mask is then its share already. */
static int slurm_bound_task(void)
{
    const char *type = getenv("SLURM_CPU_BIND_TYPE");
    return type && *type && strncmp(type, "none", 4) != 0;
}

void cli_place_slurm_task(void)
{
    if (!getenv("SLURM_PROCID") || getenv(BURST_ENV_RANK) || getenv("OMP_NUM_THREADS")) return;
    static bu_cpus all, share;
    if (bu_cpus_allowed(&all) != 0) return;
    const char *list = getenv("SLURM_STEP_TASKS_PER_NODE");
    int node = env_int("SLURM_NODEID", 0), index = env_int("SLURM_LOCALID", 0);
    int tasks = list && node >= 0 ? slurm_tasks_on_node(list, node) : 1, threads = all.n;
    if (!slurm_bound_task() && tasks > 1 && index >= 0 && index < tasks) {
        threads = bu_cpus_share(&all, tasks, index, &share);
        bu_cpus_pin(&share);
    }
    int per_task = env_int("SLURM_CPUS_PER_TASK", 1);
    omp_set_num_threads(per_task > 0 ? per_task : threads);
}

void cli_placement_print(FILE *out)
{
    static bu_cpus cpus;
    static char list[8 * BU_MAX_CPUS]; /* "1000," per CPU at the most */
    snprintf(list, sizeof list, "unknown");
    if (bu_cpus_allowed(&cpus) == 0) bu_cpus_format(&cpus, list, sizeof list);
    int threads = omp_get_max_threads();
    fprintf(out, "%d thread%s on CPUs %s", threads, threads == 1 ? "" : "s", list);
}
