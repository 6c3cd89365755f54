/* relaunch.h: how `burst bench attention`, `transport` and `train` measure on
 * several ranks: they start this same program again under `burst run` on this
 * machine and read what the ranks print. */
#ifndef BURST_BENCH_RELAUNCH_H
#define BURST_BENCH_RELAUNCH_H

#include <stddef.h>
#include <stdio.h>

/* This program's path (/proc/self/exe) in self[len]: 0, or -1 after printing
 * "WHO: cannot find this program's path". */
int bench_self_path(const char *who, char *self, size_t len);

/* Starts `SELF run -n RANKS -- SELF ARGS` through the shell, ARGS formatted
 * from fmt (quoting is the caller's), and returns the pipe of the ranks'
 * standard output (pclose gives the launcher's exit status), or NULL. With
 * threads > 0 every rank gets OMP_NUM_THREADS and OPENBLAS_NUM_THREADS =
 * threads; verbose copies the command to stderr. */
FILE *bench_relaunch(const char *self, int ranks, int threads, int verbose, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* The rank counts of the runs, "2,4" (each 2..64), into counts[max] and
 * their number into *n: 0, or -1 (nothing written) when list is not such a
 * list or holds more than max of them. */
int bench_parse_rank_counts(const char *list, int *counts, int *n, int max);

/* A line the ranks printed, without the "[R] " that `burst run` puts first. */
char *bench_rank_line(char *line);

#endif
