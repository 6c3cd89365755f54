/* fail.c: see fail.h. */
#include <stdarg.h>
#include <stdio.h>

#include "util/fail.h"

int bu_fail(char *err, size_t err_len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (err_len) vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
    return -1;
}
