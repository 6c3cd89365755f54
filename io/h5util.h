/* h5util.h: the io wing's one HDF5 error policy, and the attribute, string
 * and open helpers that follow it.
 *
 * The policy: HDF5 itself never prints. Every io entry point that touches
 * HDF5 calls io_h5_quiet first. A failure becomes one message in the caller's
 * err, "<file>: <what we were doing>: <detail>", the detail being the most
 * specific message HDF5 gave (the innermost entry of its error stack), and the
 * stack is cleared, so a call into io/ leaves it empty whether it succeeds or
 * fails. Every helper below that takes err returns 0 (or a valid handle), or
 * -1 with such a message naming the file and the attribute or dataset. Code
 * outside io/ that calls HDF5 directly (tests building files by hand) calls
 * io_h5_quiet too. */
#ifndef BURST_IO_H5UTIL_H
#define BURST_IO_H5UTIL_H

#include <stddef.h>
#include <stdint.h>

#include <hdf5.h>

/* Turns HDF5's automatic error printing off for the calling thread (HDF5
 * keeps that switch, like its error stack, per thread) after initialising the
 * library once for the process; from then on the thread's HDF5 failures are
 * remembered silently for io_h5_detail. Also forgets a detail left from before,
 * so a message never carries the detail of an earlier call. Idempotent and
 * cheap: every io entry point calls it first. */
void io_h5_quiet(void);

/* detail = the innermost (most specific) message of the calling thread's last
 * HDF5 failure, one line, "" when there was none; then forgets it and clears
 * the error stack. (The detail is kept when the failure happens: closing
 * handles after it, as every caller does, would clear the stack itself.)
 * detail may be NULL: the failure is only forgotten (one given up on). */
void io_h5_detail(char *detail, size_t len);

/* err = "<path>: <what, printf-formatted>: <detail>" (io_h5_detail's; just
 * "<path>: <what>" when HDF5 gave none). Returns -1, for `return io_h5_fail`. */
int io_h5_fail(char *err, size_t len, const char *path, const char *what, ...)
    __attribute__((format(printf, 4, 5)));

/* Files and datasets, opened or created with a message on failure. */
hid_t io_h5_open(const char *path, unsigned flags, char *err, size_t len);
hid_t io_h5_create(const char *path, char *err, size_t len); /* truncates */
int io_h5_close(hid_t file, const char *path, char *err, size_t len);
/* name with or without its leading '/'; dapl: H5P_DEFAULT or access settings. */
hid_t io_h5_open_dataset(hid_t file, const char *path, const char *name, hid_t dapl, char *err,
                         size_t len);

/* Scalar attributes of obj (a file or a dataset of the file path). Integers
 * of any width and sign read as int64 (u64 reads the full unsigned range);
 * strings may be fixed or variable length and are cut to out_len - 1 bytes.
 * An attribute of another class, or with more than one value, is refused. */
int io_h5_read_attr_int(hid_t obj, const char *path, const char *name, int64_t *value, char *err,
                        size_t len);
int io_h5_read_attr_u64(hid_t obj, const char *path, const char *name, uint64_t *value, char *err,
                        size_t len);
int io_h5_read_attr_string(hid_t obj, const char *path, const char *name, char *out,
                           size_t out_len, char *err, size_t len);
/* Creates the attribute; file_type is how the integer is stored (e.g.
 * H5T_STD_U32LE). Strings are stored fixed-length and null-terminated. */
int io_h5_write_attr_int(hid_t obj, const char *path, const char *name, hid_t file_type,
                         int64_t value, char *err, size_t len);
int io_h5_write_attr_u64(hid_t obj, const char *path, const char *name, uint64_t value, char *err,
                         size_t len);
int io_h5_write_attr_string(hid_t obj, const char *path, const char *name, const char *value,
                            char *err, size_t len);

/* The "format" (string) and "format_version" (int32) attributes of a file of
 * ours. check refuses another format with "<path>: not a <kind>: ..." and
 * another version naming both. */
int io_h5_write_format(hid_t file, const char *path, const char *format, int version, char *err,
                       size_t len);
int io_h5_check_format(hid_t file, const char *path, const char *format, int version,
                       const char *kind, char *err, size_t len);
/* The same, for a reader of versions oldest..newest: *version (may be NULL)
 * is the file's. */
int io_h5_check_format_versions(hid_t file, const char *path, const char *format, int oldest,
                                int newest, const char *kind, int *version, char *err, size_t len);

/* A scalar string dataset (for text longer than an attribute comfortably
 * holds); read returns it malloc'd (the caller frees) or NULL. */
int io_h5_write_string_dataset(hid_t file, const char *path, const char *name, const char *value,
                               char *err, size_t len);
char *io_h5_read_string_dataset(hid_t file, const char *path, const char *name, char *err,
                                size_t len);

#endif
