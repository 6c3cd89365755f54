/* clock.h: wall-clock seconds from a monotonic clock, for timing steps,
 * transfers and benchmarks. */
#ifndef BURST_UTIL_CLOCK_H
#define BURST_UTIL_CLOCK_H

/* Seconds since an arbitrary fixed point; never goes backwards. */
double bu_now(void);

#endif
