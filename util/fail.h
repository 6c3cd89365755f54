/* fail.h: the one way a function reports an error to its caller: a message
 * formatted into the caller's err buffer, and -1. */
#ifndef BURST_UTIL_FAIL_H
#define BURST_UTIL_FAIL_H

#include <stddef.h>

/* err = the formatted message (truncated to err_len); returns -1. */
int bu_fail(char *err, size_t err_len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
