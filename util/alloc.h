/* alloc.h: allocations whose failure is an error message, not a crash: the
 * message names what the buffer was for and its size, so a run that does not
 * fit says so. */
#ifndef BURST_UTIL_ALLOC_H
#define BURST_UTIL_ALLOC_H

#include <stddef.h>

/* err = "out of memory: cannot allocate N bytes (H) for WHAT". */
void bu_no_memory(char *err, size_t err_len, size_t bytes, const char *what);
/* A zeroed buffer of bytes (at least one, so that NULL always means failure),
 * or NULL with bu_no_memory's message in err. */
void *bu_calloc(size_t bytes, const char *what, char *err, size_t err_len);

#endif
