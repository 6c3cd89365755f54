/* proc_memory.h: this process's memory and the machine's, as Linux reports
 * them (bytes; 0 where the figure cannot be read). */
#ifndef BURST_UTIL_PROC_MEMORY_H
#define BURST_UTIL_PROC_MEMORY_H

/* The resident set now (/proc/self/statm) and at its peak (getrusage). */
double bu_rss_bytes(void);
double bu_peak_rss_bytes(void);
/* The memory the machine can still give without swapping (MemAvailable of
 * /proc/meminfo). */
double bu_available_bytes(void);

#endif
