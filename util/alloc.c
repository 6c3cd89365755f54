/* alloc.c: see alloc.h. */
#include <stdio.h>
#include <stdlib.h>

#include "util/alloc.h"
#include "util/parse.h"

void bu_no_memory(char *err, size_t err_len, size_t bytes, const char *what)
{
    char human[32];
    snprintf(err, err_len, "out of memory: cannot allocate %zu bytes (%s) for %s", bytes,
             bu_human_bytes((double)bytes, human, sizeof human), what);
}

void *bu_calloc(size_t bytes, const char *what, char *err, size_t err_len)
{
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) bu_no_memory(err, err_len, bytes, what);
    return p;
}
