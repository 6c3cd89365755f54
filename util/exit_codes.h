/* exit_codes.h: the exit status every command and rank uses: 0 success,
 * EXIT_RUN_FAILURE for a failure while running (a lost rank, a non-finite
 * loss, an I/O error), EXIT_USAGE for bad usage or input found before work
 * starts. */
#ifndef BURST_UTIL_EXIT_CODES_H
#define BURST_UTIL_EXIT_CODES_H

enum { EXIT_RUN_FAILURE = 1, EXIT_USAGE = 2 };

#endif
