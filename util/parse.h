/* parse.h: reading numbers and byte counts from command lines, configuration
 * values and the environment, and writing byte counts for people. */
#ifndef BURST_UTIL_PARSE_H
#define BURST_UTIL_PARSE_H

#include <stddef.h>
#include <stdint.h>

/* A whole decimal integer: an optional sign, digits, nothing before or after.
 * Returns 0, or -1 when s is not one. A value outside int64 is an error when
 * overflow is NULL; otherwise *overflow = 1, *out is clamped and 0 returned,
 * so that the caller can say "out of range" rather than "not an integer". */
int bu_parse_i64(const char *s, int64_t *out, int *overflow);
/* An integer of at least lo (a count, a size on a command line): 0 or -1. */
int bu_parse_i64_min(const char *s, int64_t lo, int64_t *out);
/* The same for uint64 (an optional '+', no '-'). */
int bu_parse_u64(const char *s, uint64_t *out, int *overflow);
/* A byte count: decimal digits and an optional binary suffix K, M or G
 * (either case: KiB, MiB, GiB), nothing before or after ("64K", "1M",
 * "4096"). Returns 0, or -1 when s is not one or the count passes uint64. */
int bu_parse_bytes(const char *s, uint64_t *out);

/* "12.3 MiB": bytes in the largest binary unit under 1024 (B to TiB), into
 * buf[len]; returns buf. */
const char *bu_human_bytes(double bytes, char *buf, size_t len);

#endif
