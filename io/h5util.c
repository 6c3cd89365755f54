/* h5util.c: the HDF5 error policy of the io wing (see h5util.h).
 *
 * HDF5 clears its error stack at the start of every API call, so by the time
 * a function has closed the handles of a failed operation the stack that
 * said why is gone. The policy therefore replaces HDF5's automatic error
 * handler (the one that prints) with remember_failure, which HDF5 calls as
 * soon as an API call fails: it prints nothing and keeps the innermost message
 * of the stack (where the library noticed the problem, e.g. "file signature
 * not found") for io_h5_detail. HDF5 keeps the handler, like the stack, per
 * thread in its thread-safe builds, so io_h5_quiet installs it once per thread
 * (a thread-local flag) after initialising the library once (pthread_once): a
 * corpus read by the prefetch thread of the HDF5 token source is as quiet as
 * one read by the main thread. Every message is built by one formatter. */
#include "config.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/h5util.h"

#define DETAIL_LEN 256

/* ------------------------------------------------------------ the policy */

static pthread_once_t h5_once = PTHREAD_ONCE_INIT;
static _Thread_local int h5_quiet_here;
static _Thread_local char h5_last[DETAIL_LEN]; /* detail of the last failure */

typedef struct {
    char *buf;
    size_t len;
} detail_sink;

/* Walking upward, entry 0 is the innermost: the most specific message. */
static herr_t innermost(unsigned n, const H5E_error2_t *e, void *data)
{
    detail_sink *d = data;
    if (n != 0) return 0;
    if (e->desc && e->desc[0])
        snprintf(d->buf, d->len, "%s", e->desc);
    else
        H5Eget_msg(e->min_num, NULL, d->buf, d->len);
    d->buf[strcspn(d->buf, "\n")] = '\0'; /* some descriptions run over lines */
    return 0;
}

static void innermost_of(hid_t stack, char *buf, size_t len)
{
    buf[0] = '\0';
    detail_sink d = {buf, len};
    H5Ewalk2(stack, H5E_WALK_UPWARD, innermost, &d);
}

/* HDF5's automatic handler, called when an API call fails: keeps, prints nothing. */
static herr_t remember_failure(hid_t stack, void *unused)
{
    (void)unused;
    innermost_of(stack, h5_last, sizeof h5_last);
    return 0;
}

/* Initialises the library exactly once, so two threads starting at the same
 * moment do not race on it (a build without thread-safety has no lock). */
static void h5_init(void)
{
    H5open();
}

void io_h5_quiet(void)
{
    pthread_once(&h5_once, h5_init);
    h5_last[0] = '\0';
    if (h5_quiet_here) return;
    H5Eset_auto2(H5E_DEFAULT, remember_failure, NULL);
    h5_quiet_here = 1;
}

void io_h5_detail(char *detail, size_t len)
{
    if (detail && len > 0) {
        if (h5_last[0])
            snprintf(detail, len, "%s", h5_last);
        else /* a failure the handler did not see (printing was never off here) */
            innermost_of(H5E_DEFAULT, detail, len);
    }
    h5_last[0] = '\0';
    H5Eclear2(H5E_DEFAULT);
}

/* err = "<path>: <what>: <detail>" (the one shape of every message here;
 * "<path>: <what>" when HDF5 left no detail). */
static int vfail(char *err, size_t len, const char *path, const char *detail, const char *what,
                 va_list ap)
{
    if (!err || len == 0) return -1;
    char doing[512];
    vsnprintf(doing, sizeof doing, what, ap);
    snprintf(err, len, "%s: %s%s%s", path, doing, detail[0] ? ": " : "", detail);
    return -1;
}

int io_h5_fail(char *err, size_t len, const char *path, const char *what, ...)
{
    char detail[DETAIL_LEN];
    io_h5_detail(detail, sizeof detail);
    va_list ap;
    va_start(ap, what);
    vfail(err, len, path, detail, what, ap);
    va_end(ap);
    return -1;
}

/* io_h5_fail with a detail already in hand (ours, or HDF5's taken earlier). */
static int fail_with(char *err, size_t len, const char *path, const char *detail,
                     const char *what, ...) __attribute__((format(printf, 5, 6)));
static int fail_with(char *err, size_t len, const char *path, const char *detail,
                     const char *what, ...)
{
    io_h5_detail(NULL, 0);
    va_list ap;
    va_start(ap, what);
    vfail(err, len, path, detail, what, ap);
    va_end(ap);
    return -1;
}

/* name without its leading '/', for messages that print "/%s". */
static const char *bare(const char *name)
{
    return name[0] == '/' ? name + 1 : name;
}

/* ---------------------------------------------------- files and datasets */

hid_t io_h5_open(const char *path, unsigned flags, char *err, size_t len)
{
    io_h5_quiet();
    hid_t f = H5Fopen(path, flags, H5P_DEFAULT);
    if (f < 0) io_h5_fail(err, len, path, "opening as HDF5");
    return f;
}

hid_t io_h5_create(const char *path, char *err, size_t len)
{
    io_h5_quiet();
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) io_h5_fail(err, len, path, "creating an HDF5 file");
    return f;
}

int io_h5_close(hid_t file, const char *path, char *err, size_t len)
{
    if (H5Fclose(file) < 0) return io_h5_fail(err, len, path, "closing");
    return 0;
}

hid_t io_h5_open_dataset(hid_t file, const char *path, const char *name, hid_t dapl, char *err,
                         size_t len)
{
    hid_t d = H5Dopen2(file, name, dapl);
    if (d < 0) io_h5_fail(err, len, path, "opening dataset /%s", bare(name));
    return d;
}

/* ------------------------------------------------------------ reading */

static const char *class_name(H5T_class_t k)
{
    switch (k) {
    case H5T_INTEGER: return "an integer";
    case H5T_FLOAT: return "a float";
    case H5T_STRING: return "a string";
    default: return "another kind of value";
    }
}

/* 0 when type t and space s hold one value of class want; else -1 and detail
 * says what they hold (or what HDF5 said when they could not be read). */
static int check_scalar(hid_t t, hid_t s, H5T_class_t want, char *detail, size_t dlen)
{
    if (t < 0 || s < 0) {
        io_h5_detail(detail, dlen);
        return -1;
    }
    H5T_class_t k = H5Tget_class(t);
    hssize_t n = H5Sget_simple_extent_npoints(s);
    if (k != want)
        snprintf(detail, dlen, "holds %s, not %s", class_name(k), class_name(want));
    else if (n != 1)
        snprintf(detail, dlen, "holds %lld values, not one", (long long)n);
    return k == want && n == 1 ? 0 : -1;
}

/* Reads the one value of attribute name of class want as mem_type. */
static int read_attr_value(hid_t obj, const char *name, H5T_class_t want, hid_t mem_type,
                           void *out, char *detail, size_t dlen)
{
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0) {
        io_h5_detail(detail, dlen);
        return -1;
    }
    hid_t t = H5Aget_type(a), s = H5Aget_space(a);
    int rc = check_scalar(t, s, want, detail, dlen);
    if (rc == 0 && H5Aread(a, mem_type, out) < 0) {
        io_h5_detail(detail, dlen);
        rc = -1;
    }
    if (s >= 0) H5Sclose(s);
    if (t >= 0) H5Tclose(t);
    H5Aclose(a);
    return rc;
}

static int read_attr_number(hid_t obj, const char *path, const char *name, hid_t mem_type,
                            void *out, char *err, size_t len)
{
    char detail[DETAIL_LEN] = "";
    if (read_attr_value(obj, name, H5T_INTEGER, mem_type, out, detail, sizeof detail) == 0)
        return 0;
    return fail_with(err, len, path, detail, "reading attribute \"%s\"", name);
}

int io_h5_read_attr_int(hid_t obj, const char *path, const char *name, int64_t *value, char *err,
                        size_t len)
{
    return read_attr_number(obj, path, name, H5T_NATIVE_INT64, value, err, len);
}

int io_h5_read_attr_u64(hid_t obj, const char *path, const char *name, uint64_t *value, char *err,
                        size_t len)
{
    return read_attr_number(obj, path, name, H5T_NATIVE_UINT64, value, err, len);
}

static herr_t read_raw(hid_t h, int is_attr, hid_t mem_type, void *buf)
{
    return is_attr ? H5Aread(h, mem_type, buf)
                   : H5Dread(h, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
}

/* A fixed-length, null-terminated C string type of size bytes. */
static hid_t string_type(size_t size)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t < 0) return -1;
    if (H5Tset_size(t, size) < 0 || H5Tset_strpad(t, H5T_STR_NULLTERM) < 0) {
        H5Tclose(t);
        return -1;
    }
    return t;
}

/* The string of h as a malloc'd copy; file type ft (fixed or variable). */
static char *read_string_of(hid_t h, int is_attr, hid_t ft)
{
    int variable = H5Tis_variable_str(ft) > 0;
    size_t size = variable ? 0 : H5Tget_size(ft);
    hid_t mt = string_type(variable ? H5T_VARIABLE : size + 1);
    char *out = NULL, *v = NULL;
    if (mt >= 0 && variable) {
        if (read_raw(h, is_attr, mt, &v) >= 0 && v) out = strdup(v);
        if (v) H5free_memory(v);
    } else if (mt >= 0 && (out = calloc(size + 1, 1)) && read_raw(h, is_attr, mt, out) < 0) {
        free(out);
        out = NULL;
    }
    if (mt >= 0) H5Tclose(mt);
    return out;
}

/* The one string held by h (an attribute when is_attr, else a dataset). */
static char *read_string_value(hid_t h, int is_attr, char *detail, size_t dlen)
{
    hid_t t = is_attr ? H5Aget_type(h) : H5Dget_type(h);
    hid_t s = is_attr ? H5Aget_space(h) : H5Dget_space(h);
    char *out = NULL;
    if (check_scalar(t, s, H5T_STRING, detail, dlen) == 0 &&
        !(out = read_string_of(h, is_attr, t)))
        io_h5_detail(detail, dlen);
    if (s >= 0) H5Sclose(s);
    if (t >= 0) H5Tclose(t);
    return out;
}

/* The string attribute name of obj, malloc'd; NULL with detail. */
static char *read_attr_string(hid_t obj, const char *name, char *detail, size_t dlen)
{
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0) {
        io_h5_detail(detail, dlen);
        return NULL;
    }
    char *s = read_string_value(a, 1, detail, dlen);
    H5Aclose(a);
    return s;
}

int io_h5_read_attr_string(hid_t obj, const char *path, const char *name, char *out,
                           size_t out_len, char *err, size_t len)
{
    char detail[DETAIL_LEN] = "";
    char *s = read_attr_string(obj, name, detail, sizeof detail);
    if (!s) return fail_with(err, len, path, detail, "reading attribute \"%s\"", name);
    snprintf(out, out_len, "%s", s);
    free(s);
    return 0;
}

char *io_h5_read_string_dataset(hid_t file, const char *path, const char *name, char *err,
                                size_t len)
{
    hid_t d = io_h5_open_dataset(file, path, name, H5P_DEFAULT, err, len);
    if (d < 0) return NULL;
    char detail[DETAIL_LEN] = "";
    char *s = read_string_value(d, 0, detail, sizeof detail);
    H5Dclose(d);
    if (!s) fail_with(err, len, path, detail, "reading dataset /%s", bare(name));
    return s;
}

/* ------------------------------------------------------------ writing */

/* A scalar attribute of file_type, written from value of mem_type. */
static int write_attr_value(hid_t obj, const char *name, hid_t file_type, hid_t mem_type,
                            const void *value)
{
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = s < 0 ? -1 : H5Acreate2(obj, name, file_type, s, H5P_DEFAULT, H5P_DEFAULT);
    int rc = a >= 0 && H5Awrite(a, mem_type, value) >= 0 ? 0 : -1;
    if (a >= 0 && H5Aclose(a) < 0) rc = -1;
    if (s >= 0) H5Sclose(s);
    return rc;
}

int io_h5_write_attr_int(hid_t obj, const char *path, const char *name, hid_t file_type,
                         int64_t value, char *err, size_t len)
{
    if (write_attr_value(obj, name, file_type, H5T_NATIVE_INT64, &value) == 0) return 0;
    return io_h5_fail(err, len, path, "writing attribute \"%s\"", name);
}

int io_h5_write_attr_u64(hid_t obj, const char *path, const char *name, uint64_t value, char *err,
                         size_t len)
{
    if (write_attr_value(obj, name, H5T_NATIVE_UINT64, H5T_NATIVE_UINT64, &value) == 0) return 0;
    return io_h5_fail(err, len, path, "writing attribute \"%s\"", name);
}

int io_h5_write_attr_string(hid_t obj, const char *path, const char *name, const char *value,
                            char *err, size_t len)
{
    hid_t t = string_type(strlen(value) + 1);
    int rc = t < 0 ? -1 : write_attr_value(obj, name, t, t, value);
    if (t >= 0) H5Tclose(t);
    if (rc == 0) return 0;
    return io_h5_fail(err, len, path, "writing attribute \"%s\"", name);
}

int io_h5_write_string_dataset(hid_t file, const char *path, const char *name, const char *value,
                               char *err, size_t len)
{
    hid_t t = string_type(strlen(value) + 1);
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t d = t < 0 || s < 0
                  ? -1
                  : H5Dcreate2(file, name, t, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int rc = d >= 0 && H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, value) >= 0 ? 0 : -1;
    if (d >= 0 && H5Dclose(d) < 0) rc = -1;
    if (s >= 0) H5Sclose(s);
    if (t >= 0) H5Tclose(t);
    if (rc == 0) return 0;
    return io_h5_fail(err, len, path, "writing dataset /%s", bare(name));
}

/* ------------------------------------------------------------ formats */

int io_h5_write_format(hid_t file, const char *path, const char *format, int version, char *err,
                       size_t len)
{
    if (io_h5_write_attr_string(file, path, "format", format, err, len) != 0) return -1;
    return io_h5_write_attr_int(file, path, "format_version", H5T_STD_I32LE, version, err, len);
}

int io_h5_check_format_versions(hid_t file, const char *path, const char *format, int oldest,
                                int newest, const char *kind, int *version, char *err, size_t len)
{
    char detail[DETAIL_LEN] = "";
    char *got = read_attr_string(file, "format", detail, sizeof detail);
    if (!got) return fail_with(err, len, path, detail, "not a %s: reading attribute \"format\"", kind);
    if (strcmp(got, format) != 0) {
        snprintf(detail, sizeof detail, "it is \"%s\", not \"%s\"", got, format);
        free(got);
        return fail_with(err, len, path, detail, "not a %s: attribute \"format\"", kind);
    }
    free(got);
    int64_t v = 0;
    if (io_h5_read_attr_int(file, path, "format_version", &v, err, len) != 0) return -1;
    if (v >= oldest && v <= newest) {
        if (version) *version = (int)v;
        return 0;
    }
    if (oldest == newest)
        snprintf(detail, sizeof detail, "this program reads version %d", newest);
    else
        snprintf(detail, sizeof detail, "this program reads versions %d to %d", oldest, newest);
    return fail_with(err, len, path, detail, "format_version is %lld", (long long)v);
}

int io_h5_check_format(hid_t file, const char *path, const char *format, int version,
                       const char *kind, char *err, size_t len)
{
    return io_h5_check_format_versions(file, path, format, version, version, kind, NULL, err, len);
}
