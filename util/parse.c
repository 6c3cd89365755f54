/* parse.c: see parse.h. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "util/parse.h"

/* 0 when the range error may be reported through overflow, else -1. */
static int range_error(int *overflow)
{
    if (!overflow) return -1;
    *overflow = 1;
    return 0;
}

int bu_parse_i64(const char *s, int64_t *out, int *overflow)
{
    if (overflow) *overflow = 0;
    const char *p = s;
    if (*p == '+' || *p == '-') p++;
    if (!isdigit((unsigned char)*p)) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*end != '\0') return -1;
    *out = v;
    return errno == ERANGE ? range_error(overflow) : 0;
}

int bu_parse_i64_min(const char *s, int64_t lo, int64_t *out)
{
    int64_t v;
    if (bu_parse_i64(s, &v, NULL) != 0 || v < lo) return -1;
    *out = v;
    return 0;
}

int bu_parse_u64(const char *s, uint64_t *out, int *overflow)
{
    if (overflow) *overflow = 0;
    const char *p = s;
    if (*p == '+') p++;
    if (!isdigit((unsigned char)*p)) return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(p, &end, 10);
    if (*end != '\0') return -1;
    *out = v;
    return errno == ERANGE ? range_error(overflow) : 0;
}

int bu_parse_bytes(const char *s, uint64_t *out)
{
    if (!isdigit((unsigned char)*s)) return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno == ERANGE) return -1;
    int shift = 0;
    switch (tolower((unsigned char)*end)) {
    case 'k': shift = 10; break;
    case 'm': shift = 20; break;
    case 'g': shift = 30; break;
    }
    if (shift) end++;
    if (*end != '\0' || v > (UINT64_MAX >> shift)) return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

const char *bu_human_bytes(double bytes, char *buf, size_t len)
{
    const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) bytes /= 1024, u++;
    snprintf(buf, len, "%.1f %s", bytes, unit[u]);
    return buf;
}
