/* npy.c: see npy.h. The header is a Python dict literal; only the three keys
 * the format requires are read, and only the forms NumPy writes. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "io/npy.h"

/* The magic, the version and the header's length: the header's bytes
 * *hlen and where the data starts, *data_at. */
static int read_preamble(FILE *f, const char *path, size_t *hlen, long *data_at, char *err,
                         size_t len)
{
    unsigned char pre[10];
    if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0) {
        snprintf(err, len, "%s: not a .npy file (no \\x93NUMPY magic)", path);
        return -1;
    }
    int major = pre[6];
    if (major == 1) {
        *hlen = (size_t)pre[8] | (size_t)pre[9] << 8;
        *data_at = 10 + (long)*hlen;
    } else if (major == 2 || major == 3) {
        unsigned char b[2];
        if (fread(b, 1, 2, f) != 2) {
            snprintf(err, len, "%s: .npy file is truncated in its header", path);
            return -1;
        }
        *hlen = (size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)b[0] << 16 | (size_t)b[1] << 24;
        *data_at = 12 + (long)*hlen;
    } else {
        snprintf(err, len, "%s: .npy version %d is not supported (1, 2 or 3)", path, major);
        return -1;
    }
    if (*hlen > 1 << 20) {
        snprintf(err, len, "%s: .npy header of %zu bytes is implausible", path, *hlen);
        return -1;
    }
    return 0;
}

/* The length of the 1-D shape after 'shape' at sh: "(n,)" or "(n)", or -1. */
static long long shape_length(const char *sh)
{
    char *open = strchr(sh, '('), *e = NULL;
    long long n = open ? strtoll(open + 1, &e, 10) : -1;
    if (e) {
        while (*e == ' ') e++;
        if (*e == ',') e++;
        while (*e == ' ') e++;
    }
    return !open || !e || e == open + 1 || *e != ')' || n < 0 ? -1 : n;
}

/* The header dict h: descr (little-endian integers), C order, a 1-D shape. */
static int parse_header(const char *h, const char *path, io_npy_array *in, char *err, size_t len)
{
    const char *d = strstr(h, "'descr'"), *fo = strstr(h, "'fortran_order'"),
               *sh = strstr(h, "'shape'");
    char descr[16] = "";
    if (!d || !fo || !sh) {
        snprintf(err, len, "%s: .npy header lacks descr, fortran_order or shape: %s", path, h);
        return -1;
    }
    if (sscanf(d, "'descr' : '%15[^']'", descr) != 1 &&
        sscanf(d, "'descr': '%15[^']'", descr) != 1) {
        snprintf(err, len, "%s: cannot read descr in the .npy header", path);
        return -1;
    }
    const char *colon = strchr(fo, ':');
    while (colon && (*++colon == ' ')) {
    }
    if (!colon || strncmp(colon, "False", 5) != 0) {
        snprintf(err, len, "%s: .npy array is in Fortran order (C order needed)", path);
        return -1;
    }
    long long n = shape_length(sh);
    if (n < 0) {
        const char *open = strchr(sh, '(');
        snprintf(err, len, "%s: .npy array is not 1-D (shape %.40s)", path, open ? open : "?");
        return -1;
    }
    char order = descr[0], kind = descr[1];
    int size = atoi(descr + 2);
    if ((order != '<' && order != '|' && !(order == '>' && size == 1)) ||
        (kind != 'u' && kind != 'i') || (size != 1 && size != 2 && size != 4 && size != 8)) {
        snprintf(err, len,
                 "%s: .npy dtype '%s' is not supported (little-endian integers: u1 u2 u4 u8 i1 "
                 "i2 i4 i8)",
                 path, descr);
        return -1;
    }
    in->n = n;
    in->itemsize = size;
    in->is_signed = kind == 'i';
    return 0;
}

/* The file holds the n elements after data_at; f left at data_at. */
static int check_data(FILE *f, const char *path, const io_npy_array *in, long data_at, char *err,
                      size_t len)
{
    long long n = in->n, size = in->itemsize;
    if (fseek(f, 0, SEEK_END) != 0) return -1;
    long end = ftell(f);
    /* n * size cannot overflow past this test: n is compared by division. */
    if (end < data_at || (long long)(end - data_at) / size < n) {
        snprintf(err, len, "%s: .npy file is truncated (%lld elements need %lld bytes, %ld there)",
                 path, n, n > (LLONG_MAX - data_at) / size ? LLONG_MAX : (long long)data_at + n * size, end);
        return -1;
    }
    return fseek(f, data_at, SEEK_SET) == 0 ? 0 : -1;
}

int io_npy_open(FILE *f, const char *path, io_npy_array *in, char *err, size_t len)
{
    size_t hlen;
    long data_at;
    if (read_preamble(f, path, &hlen, &data_at, err, len) != 0) return -1;
    char *h = calloc(1, hlen + 1);
    if (!h) return -1;
    int rc = -1;
    if (fread(h, 1, hlen, f) != hlen)
        snprintf(err, len, "%s: .npy file is truncated in its header", path);
    else if (parse_header(h, path, in, err, len) == 0)
        rc = check_data(f, path, in, data_at, err, len);
    free(h);
    return rc;
}
