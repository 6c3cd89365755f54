/* test_placement.c: each rank's share of the machine's cores
 * (src/cli/placement.c). `burst run` gives its ranks disjoint CPUs of its own
 * affinity mask and as many OpenMP threads, or one thread each on CPUs they
 * share when they outnumber the CPUs; OMP_NUM_THREADS set by the user wins; a
 * task under srun takes its share by SLURM_LOCALID, or SLURM_CPUS_PER_TASK
 * threads. Each rank reports its setting with `burst version --verbose`, and
 * the expectations come from this test's own affinity mask, narrowed with
 * sched_setaffinity where a case needs a known number of CPUs. */
#define _GNU_SOURCE
#include <check.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/lib/check_main.h"
#include "tests/lib/testutil.h"

enum { MAX_RANKS = 8 };

typedef struct {
    int threads;   /* OpenMP threads the rank reported, -1 when it did not */
    cpu_set_t cpus; /* the CPUs it runs on */
} report;

/* "0-3,8" into set: 0, or -1 when the text is not such a list. */
static int parse_cpus(const char *s, cpu_set_t *set)
{
    CPU_ZERO(set);
    for (;;) {
        char *end;
        long lo = strtol(s, &end, 10), hi = lo;
        if (end == s || lo < 0) return -1;
        if (*end == '-') {
            s = end + 1;
            hi = strtol(s, &end, 10);
            if (end == s || hi < lo) return -1;
        }
        for (long c = lo; c <= hi && c < CPU_SETSIZE; c++) CPU_SET((int)c, set);
        if (*end != ',') return *end == '\0' || *end == '\n' ? 0 : -1;
        s = end + 1;
    }
}

/* The "openmp: T thread(s) on CPUs L" line after text; 0 or -1. */
static int parse_report(const char *text, report *rep)
{
    const char *p = strstr(text, "openmp: ");
    if (!p || sscanf(p, "openmp: %d thread", &rep->threads) != 1) return -1;
    const char *list = strstr(p, " on CPUs ");
    return list ? parse_cpus(list + 9, &rep->cpus) : -1;
}

/* `burst run -n ranks -- burst version --verbose`, OMP_NUM_THREADS unset unless
 * omp is given; each rank's report into reps[ranks]. */
static void run_ranks(int ranks, const char *omp, report *reps)
{
    char n[16], omp_env[64];
    snprintf(n, sizeof n, "%d", ranks);
    char *burst = (char *)test_burst_path();
    char *argv[] = {"/usr/bin/env", "-u", "OMP_NUM_THREADS", burst, "run", "-n", n, "--",
                    burst, "version", "--verbose", NULL};
    snprintf(omp_env, sizeof omp_env, "OMP_NUM_THREADS=%s", omp ? omp : "");
    char *env[] = {omp_env, NULL};
    test_run_result r = omp ? test_run(argv + 3, env) : test_run(argv, NULL);
    ck_assert_msg(r.exit_code == 0, "burst run -n %d exited %d:\n%s", ranks, r.exit_code, r.out);
    for (int k = 0; k < ranks; k++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "[%d] openmp: ", k);
        const char *line = strstr(r.out, prefix);
        ck_assert_msg(line && parse_report(line, &reps[k]) == 0, "rank %d did not report:\n%s", k,
                      r.out);
    }
    test_run_free(&r);
}

/* One `burst version --verbose` with the variables of env (NULL-terminated),
 * OMP_NUM_THREADS unset. */
static report run_task(char *const *env)
{
    char *argv[] = {"/usr/bin/env", "-u", "OMP_NUM_THREADS", (char *)test_burst_path(),
                    "version", "--verbose", NULL};
    test_run_result r = test_run(argv, env);
    report rep;
    ck_assert_msg(r.exit_code == 0 && parse_report(r.out, &rep) == 0, "exit %d:\n%s",
                  r.exit_code, r.out);
    test_run_free(&r);
    return rep;
}

static cpu_set_t my_cpus(void)
{
    cpu_set_t set;
    ck_assert(sched_getaffinity(0, sizeof set, &set) == 0);
    return set;
}

static cpu_set_t saved_cpus; /* the mask before narrow_to, for restore_cpus */

/* Narrows this process (and what it starts) to the first k CPUs of its mask;
 * returns how many it has now (fewer than k on a smaller machine). */
static int narrow_to(int k)
{
    cpu_set_t all = my_cpus(), some;
    saved_cpus = all;
    CPU_ZERO(&some);
    int got = 0;
    for (int c = 0; c < CPU_SETSIZE && got < k; c++)
        if (CPU_ISSET(c, &all)) CPU_SET(c, &some), got++;
    ck_assert(sched_setaffinity(0, sizeof some, &some) == 0);
    return got;
}

/* Undoes narrow_to, for the next test when check does not fork (CK_FORK=no). */
static void restore_cpus(void) { ck_assert(sched_setaffinity(0, sizeof saved_cpus, &saved_cpus) == 0); }

/* The i-th CPU (from 0) of set. */
static int nth_cpu(const cpu_set_t *set, int i)
{
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, set) && i-- == 0) return c;
    return -1;
}

START_TEST(ranks_get_disjoint_shares_of_the_launchers_cpus)
{
    cpu_set_t mine = my_cpus();
    int m = CPU_COUNT(&mine);
    for (int n = 1; n <= m && n <= MAX_RANKS; n *= 2) {
        report reps[MAX_RANKS];
        run_ranks(n, NULL, reps);
        cpu_set_t seen;
        CPU_ZERO(&seen);
        for (int k = 0; k < n; k++) {
            int size = CPU_COUNT(&reps[k].cpus);
            ck_assert_msg(size == m / n || size == (m + n - 1) / n,
                          "-n %d: rank %d has %d of %d CPUs", n, k, size, m);
            ck_assert_msg(reps[k].threads == size, "-n %d: rank %d runs %d threads on %d CPUs",
                          n, k, reps[k].threads, size);
            cpu_set_t both;
            CPU_AND(&both, &seen, &reps[k].cpus);
            ck_assert_msg(CPU_COUNT(&both) == 0, "-n %d: rank %d shares a CPU with another", n, k);
            CPU_OR(&seen, &seen, &reps[k].cpus);
        }
        ck_assert_msg(CPU_EQUAL(&seen, &mine), "-n %d: the ranks do not cover the launcher's CPUs",
                      n);
    }
}
END_TEST

START_TEST(a_narrowed_launcher_shares_out_only_its_cpus)
{
    int m = narrow_to(2);
    cpu_set_t mine = my_cpus();
    report reps[MAX_RANKS];
    run_ranks(1, NULL, reps);
    ck_assert_int_eq(reps[0].threads, m);
    ck_assert_msg(CPU_EQUAL(&reps[0].cpus, &mine), "one rank does not get all the CPUs");
    /* More ranks than CPUs: one thread each, all CPUs shared. */
    run_ranks(m + 1, NULL, reps);
    for (int k = 0; k <= m; k++) {
        ck_assert_msg(reps[k].threads == 1, "rank %d of %d on %d CPUs runs %d threads", k, m + 1,
                      m, reps[k].threads);
        ck_assert_msg(CPU_EQUAL(&reps[k].cpus, &mine), "rank %d does not share the CPUs", k);
    }
    restore_cpus();
}
END_TEST

START_TEST(omp_num_threads_set_by_the_user_wins)
{
    cpu_set_t mine = my_cpus();
    report reps[MAX_RANKS];
    run_ranks(2, "3", reps);
    for (int k = 0; k < 2; k++) {
        ck_assert_int_eq(reps[k].threads, 3);
        ck_assert_msg(CPU_EQUAL(&reps[k].cpus, &mine), "rank %d was pinned", k);
    }
}
END_TEST

START_TEST(srun_task_takes_its_share_by_local_id)
{
    int m = narrow_to(2);
    cpu_set_t mine = my_cpus();
    /* "3,2(x2)": node 0 runs three tasks, nodes 1 and 2 two each. */
    for (int local = 0; local < 2; local++) {
        char id[32];
        snprintf(id, sizeof id, "SLURM_LOCALID=%d", local);
        char *env[] = {"SLURM_PROCID=4", id, "SLURM_NODEID=2", "SLURM_STEP_TASKS_PER_NODE=3,2(x2)",
                       NULL};
        report rep = run_task(env);
        ck_assert_int_eq(rep.threads, 1);
        int want = m == 2 ? nth_cpu(&mine, local) : nth_cpu(&mine, 0);
        ck_assert_msg(CPU_COUNT(&rep.cpus) == (m == 2 ? 1 : m) && CPU_ISSET(want, &rep.cpus),
                      "task %d of 2 is not on CPU %d", local, want);
    }
    /* Three tasks on node 0 outnumber the CPUs: one thread each, CPUs shared. */
    char *three[] = {"SLURM_PROCID=1", "SLURM_LOCALID=1", "SLURM_NODEID=0",
                     "SLURM_STEP_TASKS_PER_NODE=3,2(x2)", NULL};
    report rep = run_task(three);
    ck_assert_int_eq(rep.threads, 1);
    ck_assert_msg(CPU_EQUAL(&rep.cpus, &mine), "a task of three on %d CPUs was pinned", m);
    restore_cpus();
}
END_TEST

START_TEST(srun_cpus_per_task_sets_the_threads)
{
    cpu_set_t mine = my_cpus();
    /* Bound by Slurm (SLURM_CPU_BIND_TYPE): the mask is the task's own. */
    char *bound[] = {"SLURM_PROCID=1", "SLURM_LOCALID=1", "SLURM_NODEID=0",
                     "SLURM_STEP_TASKS_PER_NODE=2", "SLURM_CPU_BIND_TYPE=mask_cpu:",
                     "SLURM_CPUS_PER_TASK=3", NULL};
    report rep = run_task(bound);
    ck_assert_int_eq(rep.threads, 3);
    ck_assert_msg(CPU_EQUAL(&rep.cpus, &mine), "a task Slurm bound was pinned again");
    char *single[] = {"SLURM_PROCID=0", "SLURM_CPUS_PER_TASK=5", NULL};
    rep = run_task(single);
    ck_assert_int_eq(rep.threads, 5);
}
END_TEST

START_TEST(burst_run_inside_slurm_places_its_own_ranks)
{
    cpu_set_t mine = my_cpus();
    char *burst = (char *)test_burst_path();
    char *argv[] = {"/usr/bin/env", "-u", "OMP_NUM_THREADS", burst, "run", "-n", "1", "--",
                    burst, "version", "--verbose", NULL};
    char *env[] = {"SLURM_PROCID=0", "SLURM_CPUS_PER_TASK=5", NULL};
    test_run_result r = test_run(argv, env);
    report rep;
    ck_assert_msg(r.exit_code == 0 && parse_report(r.out, &rep) == 0, "%s", r.out);
    ck_assert_int_eq(rep.threads, CPU_COUNT(&mine));
    test_run_free(&r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("placement");
    TCase *tc = check_tcase(s, "placement", 60);
    check_add_tests(tc, ranks_get_disjoint_shares_of_the_launchers_cpus,
                    a_narrowed_launcher_shares_out_only_its_cpus,
                    omp_num_threads_set_by_the_user_wins, srun_task_takes_its_share_by_local_id,
                    srun_cpus_per_task_sets_the_threads,
                    burst_run_inside_slurm_places_its_own_ranks);
    return check_run(s);
}
