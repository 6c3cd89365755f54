/* checkpoint.c: training checkpoints in HDF5 (see checkpoint.h and
 * doc/CHECKPOINTS.md). A checkpoint is built in DIR/step-S.tmp by three
 * phases: begin (rank 0 recreates the temporary directory), write_rank (every
 * rank writes its optimizer shard, rank 0 also the model; each file is fsync'd
 * once closed) and commit (rank 0 fsyncs the temporary directory, renames it
 * to DIR/step-S, replaces DIR/latest through latest.tmp + rename, fsyncs DIR,
 * then prunes old checkpoints). The only steps that change what a reader sees
 * are the two renames, each atomic, and DIR/latest is replaced last, so a
 * crash at any moment leaves the checkpoint DIR/latest names whole. A step
 * written again (DIR/step-S exists) is swapped in with
 * renameat2(RENAME_EXCHANGE); where the file system cannot, the old directory
 * is first renamed to DIR/step-S.old, which the readers fall back to when
 * DIR/step-S is missing.
 *
 * Errors follow io/h5util.h: HDF5 prints nothing, and every failure is
 * reported in err, naming the file. */
#define _GNU_SOURCE /* renameat2 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hdf5.h>

#include "io/checkpoint.h"
#include "io/h5util.h"

#define CKPT_FORMAT         "burstengine-checkpoint"
#define CKPT_FORMAT_VERSION 2 /* 1: the parameters whole in model.h5, the moments in optim-R.h5 */
#define CKPT_OLDEST_VERSION 1
#define CKPT_CHUNK          ((hsize_t)1 << 20) /* elements per chunk of a float dataset */
#define CKPT_PATH_MAX       4096

static void set_err(char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t err_len, const char *fmt, ...)
{
    if (!err || err_len == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
}

/* ---- Paths and the file system. ---- */

static int step_path(char *out, size_t len, const char *dir, int64_t step, const char *suffix,
                     const char *file, char *err, size_t err_len)
{
    int n;
    if (file)
        n = snprintf(out, len, "%s/step-%" PRId64 "%s/%s", dir, step, suffix, file);
    else
        n = snprintf(out, len, "%s/step-%" PRId64 "%s", dir, step, suffix);
    if (n < 0 || (size_t)n >= len) {
        set_err(err, err_len, "checkpoint directory path too long: %s", dir);
        return -1;
    }
    return 0;
}

static int fsync_path(const char *path, int is_dir, char *err, size_t err_len)
{
    int fd = open(path, O_RDONLY | (is_dir ? O_DIRECTORY : 0));
    if (fd < 0) {
        set_err(err, err_len, "cannot open %s for fsync: %s", path, strerror(errno));
        return -1;
    }
    if (fsync(fd) != 0 && errno != EINVAL) {
        set_err(err, err_len, "cannot fsync %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    close(fd);
    return 0;
}

/* Removes path and, if it is a directory, everything below it (symbolic
 * links are removed, not followed). A missing path is not an error. */
static int remove_tree(const char *path, char *err, size_t err_len)
{
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT) return 0;
        set_err(err, err_len, "cannot stat %s: %s", path, strerror(errno));
        return -1;
    }
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (!d) {
            set_err(err, err_len, "cannot open directory %s: %s", path, strerror(errno));
            return -1;
        }
        struct dirent *e;
        int rc = 0;
        while (rc == 0 && (e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            char child[CKPT_PATH_MAX];
            int n = snprintf(child, sizeof child, "%s/%s", path, e->d_name);
            if (n < 0 || (size_t)n >= sizeof child) {
                set_err(err, err_len, "path too long below %s", path);
                rc = -1;
                break;
            }
            rc = remove_tree(child, err, err_len);
        }
        closedir(d);
        if (rc != 0) return rc;
        if (rmdir(path) != 0 && errno != ENOENT) {
            set_err(err, err_len, "cannot remove directory %s: %s", path, strerror(errno));
            return -1;
        }
        return 0;
    }
    if (unlink(path) != 0 && errno != ENOENT) {
        set_err(err, err_len, "cannot remove %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* mkdir -p. */
static int make_dirs(const char *path, char *err, size_t err_len)
{
    char buf[CKPT_PATH_MAX];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) {
        set_err(err, err_len, "bad checkpoint directory name '%s'", path);
        return -1;
    }
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0') continue;
        char saved = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST) {
            set_err(err, err_len, "cannot create directory %s: %s", buf, strerror(errno));
            return -1;
        }
        buf[i] = saved;
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        set_err(err, err_len, "checkpoint directory %s is not a directory", path);
        return -1;
    }
    return 0;
}

static int path_exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* ---- HDF5 helpers: writing. ---- */

/* A 1-D float32 dataset of n elements, chunked when not empty. */
static int write_floats(hid_t file, const char *path, const char *name, const float *x, int64_t n,
                        char *err, size_t err_len)
{
    hsize_t dims[1] = {(hsize_t)n};
    hid_t space = H5Screate_simple(1, dims, NULL);
    if (space < 0) return io_h5_fail(err, err_len, path, "writing dataset /%s", name);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    int rc = -1;
    if (dcpl >= 0) {
        hsize_t chunk[1] = {dims[0] < CKPT_CHUNK ? dims[0] : CKPT_CHUNK};
        if (n == 0 || H5Pset_chunk(dcpl, 1, chunk) >= 0) {
            hid_t d = H5Dcreate2(file, name, H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
            if (d >= 0) {
                rc = 0;
                if (n > 0 && H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x) < 0)
                    rc = -1;
                if (H5Dclose(d) < 0) rc = -1;
            }
        }
        H5Pclose(dcpl);
    }
    H5Sclose(space);
    if (rc == 0) return 0;
    return io_h5_fail(err, err_len, path, "writing dataset /%s", name);
}

/* ---- HDF5 helpers: reading. ---- */

/* Reads [begin, begin + count) of the 1-D float dataset name, which must hold
 * exactly n elements (`what` says which attribute gives n, for the message
 * when it holds another number); out may be NULL to check the shape only. 0,
 * or -1 with err. */
static int read_floats_at(hid_t file, const char *path, const char *name, float *out, int64_t begin,
                          int64_t count, int64_t n, const char *what, char *err, size_t err_len)
{
    hid_t d = io_h5_open_dataset(file, path, name, H5P_DEFAULT, err, err_len);
    if (d < 0) return -1;
    int rc = -1;
    hid_t space = H5Dget_space(d), mem = -1;
    hsize_t dims[1] = {0};
    if (space >= 0) {
        hsize_t start[1] = {(hsize_t)begin}, len[1] = {(hsize_t)count};
        if (H5Sget_simple_extent_ndims(space) == 1 &&
            H5Sget_simple_extent_dims(space, dims, NULL) == 1) {
            if ((int64_t)dims[0] != n) {
                rc = -2;
            } else if (!out || count == 0) {
                rc = 0;
            } else if ((mem = H5Screate_simple(1, len, NULL)) >= 0 &&
                       H5Sselect_hyperslab(space, H5S_SELECT_SET, start, NULL, len, NULL) >= 0) {
                rc = H5Dread(d, H5T_NATIVE_FLOAT, mem, space, H5P_DEFAULT, out) < 0 ? -1 : 0;
            }
        }
        if (mem >= 0) H5Sclose(mem);
        H5Sclose(space);
    }
    H5Dclose(d);
    if (rc == -1) io_h5_fail(err, err_len, path, "reading the 1-D dataset /%s", name);
    if (rc == -2)
        set_err(err, err_len, "%s: /%s holds %" PRId64 " values, %s says %" PRId64, path, name,
                (int64_t)dims[0], what, n);
    return rc == 0 ? 0 : -1;
}

/* The whole dataset: exactly n elements. */
static int read_floats(hid_t file, const char *path, const char *name, float *out, int64_t n,
                       const char *what, char *err, size_t err_len)
{
    return read_floats_at(file, path, name, out, 0, n, n, what, err, err_len);
}

/* Closes a file written for a checkpoint and fsyncs it. */
static int close_and_sync(hid_t file, const char *path, char *err, size_t err_len)
{
    if (io_h5_close(file, path, err, err_len) != 0) return -1;
    return fsync_path(path, 0, err, err_len);
}

/* Closes a file that was read: a failure to close is the error only when
 * nothing failed before (rc == 0), whose message it would otherwise hide. */
static int close_read(hid_t file, const char *path, int rc, char *err, size_t err_len)
{
    if (file < 0) return rc;
    if (rc == 0) return io_h5_close(file, path, err, err_len);
    H5Fclose(file);
    io_h5_detail(NULL, 0);
    return rc;
}

/* A file written for a checkpoint that failed: closed, the stack cleared. */
static int give_up_write(hid_t file)
{
    H5Fclose(file);
    io_h5_detail(NULL, 0);
    return -1;
}

/* ---- Phase 1: begin. ---- */

int io_checkpoint_begin(const char *dir, int64_t step, char *err, size_t err_len)
{
    char tmp[CKPT_PATH_MAX];
    if (step < 0) {
        set_err(err, err_len, "checkpoint step %" PRId64 " is negative", step);
        return -1;
    }
    if (step_path(tmp, sizeof tmp, dir, step, ".tmp", NULL, err, err_len) != 0) return -1;
    if (remove_tree(tmp, err, err_len) != 0) return -1;
    if (make_dirs(dir, err, err_len) != 0) return -1;
    if (mkdir(tmp, 0777) != 0) {
        set_err(err, err_len, "cannot create directory %s: %s", tmp, strerror(errno));
        return -1;
    }
    return 0;
}

/* ---- Phase 2: write_rank. ---- */

static int write_model(const char *path, const io_ckpt_meta *meta, char *err, size_t err_len)
{
    hid_t f = io_h5_create(path, err, err_len);
    if (f < 0) return -1;
    int bad =
        io_h5_write_format(f, path, CKPT_FORMAT, CKPT_FORMAT_VERSION, err, err_len) ||
        io_h5_write_attr_int(f, path, "step", H5T_NATIVE_INT64, meta->step, err, err_len) ||
        io_h5_write_attr_int(f, path, "sample_position", H5T_NATIVE_INT64, meta->sample_position,
                             err, err_len) ||
        io_h5_write_attr_u64(f, path, "rng_state", meta->rng_state, err, err_len) ||
        io_h5_write_attr_int(f, path, "world_size", H5T_NATIVE_INT, meta->world_size, err,
                             err_len) ||
        io_h5_write_attr_int(f, path, "n_params", H5T_NATIVE_INT64, meta->n_params, err, err_len) ||
        io_h5_write_attr_int(f, path, "weights_only", H5T_NATIVE_INT, !!meta->weights_only, err,
                             err_len) ||
        io_h5_write_string_dataset(f, path, "config", meta->config_text ? meta->config_text : "",
                                   err, err_len);
    if (bad) return give_up_write(f);
    return close_and_sync(f, path, err, err_len);
}

/* shard-R.h5: the rank's parameters, and its moments unless m is NULL. */
static int write_shard(const char *path, int rank, int64_t shard_begin, int64_t shard_len,
                       const float *params, const float *m, const float *v, char *err,
                       size_t err_len)
{
    hid_t f = io_h5_create(path, err, err_len);
    if (f < 0) return -1;
    int bad =
        io_h5_write_format(f, path, CKPT_FORMAT, CKPT_FORMAT_VERSION, err, err_len) ||
        io_h5_write_attr_int(f, path, "rank", H5T_NATIVE_INT, rank, err, err_len) ||
        io_h5_write_attr_int(f, path, "shard_begin", H5T_NATIVE_INT64, shard_begin, err, err_len) ||
        io_h5_write_attr_int(f, path, "shard_len", H5T_NATIVE_INT64, shard_len, err, err_len) ||
        write_floats(f, path, "params", params, shard_len, err, err_len) ||
        (m && (write_floats(f, path, "m", m, shard_len, err, err_len) ||
               write_floats(f, path, "v", v, shard_len, err, err_len)));
    if (bad) return give_up_write(f);
    return close_and_sync(f, path, err, err_len);
}

/* The arguments of write_rank, named in err when they cannot be written. */
static int shard_args_ok(const char *tmp, int rank, const io_ckpt_meta *meta, int weights_only,
                         int64_t shard_begin, int64_t shard_len, const float *params,
                         const float *m, const float *v, char *err, size_t err_len)
{
    if (rank < 0 || shard_begin < 0 || shard_len < 0 ||
        (shard_len > 0 && (!params || (!weights_only && (!m || !v))))) {
        set_err(err, err_len, "checkpoint %s: bad shard of rank %d ([%" PRId64 ", +%" PRId64 ")",
                tmp, rank, shard_begin, shard_len);
        return 0;
    }
    if (rank != 0) return 1;
    if (!meta || meta->n_params <= 0 || meta->world_size <= 0) {
        set_err(err, err_len, "checkpoint %s: rank 0 needs the metadata", tmp);
        return 0;
    }
    return 1;
}

int io_checkpoint_write_rank(const char *dir, int64_t step, int rank, const io_ckpt_meta *meta,
                             int64_t shard_begin, int64_t shard_len, const float *params,
                             const float *m, const float *v, char *err, size_t err_len)
{
    char tmp[CKPT_PATH_MAX], path[CKPT_PATH_MAX + 32];
    if (step_path(tmp, sizeof tmp, dir, step, ".tmp", NULL, err, err_len) != 0) return -1;
    int weights_only = meta ? meta->weights_only : !m;
    if (!shard_args_ok(tmp, rank, meta, weights_only, shard_begin, shard_len, params, m, v, err,
                       err_len))
        return -1;
    if (rank == 0 && meta->step != step) {
        set_err(err, err_len,
                "checkpoint %s: metadata says step %" PRId64 ", written as step %" PRId64, tmp,
                meta->step, step);
        return -1;
    }
    struct stat st;
    if (stat(tmp, &st) != 0 || !S_ISDIR(st.st_mode)) {
        set_err(err, err_len, "checkpoint directory %s does not exist (phase begin missing?)", tmp);
        return -1;
    }
    io_h5_quiet();
    int rc = 0;
    if (rank == 0) {
        snprintf(path, sizeof path, "%s/model.h5", tmp);
        rc = write_model(path, meta, err, err_len);
    }
    if (rc == 0) {
        snprintf(path, sizeof path, "%s/shard-%d.h5", tmp, rank);
        rc = write_shard(path, rank, shard_begin, shard_len, params, weights_only ? NULL : m,
                         weights_only ? NULL : v, err, err_len);
    }
    return rc;
}

/* ---- Phase 3: commit. ---- */

/* Parses "step-N" (decimal N) followed by exactly suffix; -1 otherwise. */
static int64_t parse_step_suffix(const char *name, const char *suffix)
{
    if (strncmp(name, "step-", 5) != 0) return -1;
    const char *p = name + 5;
    if (*p < '0' || *p > '9') return -1;
    int64_t v = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (INT64_MAX - 9) / 10) return -1;
        v = v * 10 + (*p - '0');
    }
    return strcmp(p, suffix) == 0 ? v : -1;
}

static int64_t parse_step_name(const char *name)
{
    return parse_step_suffix(name, "");
}

static int cmp_desc(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x < y) - (x > y);
}

/* Removes the step directories of dir except the newest keep_last (by step
 * number; all when keep_last <= 0) and except keep (the one just written),
 * and the debris of interrupted writes (step-N.tmp, step-N.old). */
static int prune(const char *dir, int64_t keep, int keep_last, char *err, size_t err_len)
{
    DIR *d = opendir(dir);
    if (!d) {
        set_err(err, err_len, "cannot open directory %s: %s", dir, strerror(errno));
        return -1;
    }
    int64_t *steps = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d)) != NULL) {
        if (rc == 0 && (parse_step_suffix(e->d_name, ".tmp") >= 0 ||
                        parse_step_suffix(e->d_name, ".old") >= 0)) {
            char path[CKPT_PATH_MAX];
            int n1 = snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            if (n1 > 0 && (size_t)n1 < sizeof path) rc = remove_tree(path, err, err_len);
            continue;
        }
        int64_t s = parse_step_name(e->d_name);
        if (s < 0) continue;
        if (n == cap) {
            size_t nc = cap ? 2 * cap : 16;
            int64_t *ns = realloc(steps, nc * sizeof *ns);
            if (!ns) {
                free(steps);
                closedir(d);
                set_err(err, err_len, "out of memory listing %s", dir);
                return -1;
            }
            steps = ns;
            cap = nc;
        }
        steps[n++] = s;
    }
    closedir(d);
    qsort(steps, n, sizeof *steps, cmp_desc);
    for (size_t i = (size_t)keep_last; keep_last > 0 && i < n && rc == 0; i++) {
        if (steps[i] == keep) continue;
        char path[CKPT_PATH_MAX];
        rc = step_path(path, sizeof path, dir, steps[i], "", NULL, err, err_len);
        if (rc == 0) rc = remove_tree(path, err, err_len);
    }
    free(steps);
    return rc;
}

int io_checkpoint_commit(const char *dir, int64_t step, int keep_last, char *err, size_t err_len)
{
    char tmp[CKPT_PATH_MAX], final[CKPT_PATH_MAX], old[CKPT_PATH_MAX];
    char latest[CKPT_PATH_MAX], latest_tmp[CKPT_PATH_MAX];
    if (step_path(tmp, sizeof tmp, dir, step, ".tmp", NULL, err, err_len) != 0 ||
        step_path(final, sizeof final, dir, step, "", NULL, err, err_len) != 0 ||
        step_path(old, sizeof old, dir, step, ".old", NULL, err, err_len) != 0)
        return -1;
    int n1 = snprintf(latest, sizeof latest, "%s/latest", dir);
    int n2 = snprintf(latest_tmp, sizeof latest_tmp, "%s/latest.tmp", dir);
    if (n1 < 0 || n2 < 0 || (size_t)n2 >= sizeof latest_tmp) {
        set_err(err, err_len, "checkpoint directory path too long: %s", dir);
        return -1;
    }

    /* The complete temporary directory is durable before it gets its name. */
    char model[CKPT_PATH_MAX + 32];
    snprintf(model, sizeof model, "%s/model.h5", tmp);
    if (!path_exists(model)) {
        set_err(err, err_len, "checkpoint %s is incomplete: no model.h5", tmp);
        return -1;
    }
    if (fsync_path(tmp, 1, err, err_len) != 0) return -1;

    /* A checkpoint of the same step (written again, e.g. at the end of a run
     * resumed from it) is exchanged with the new one in one atomic step, or
     * else moved aside (the readers fall back to step-S.old), never removed
     * before latest is durable. */
    int swapped = 0, had_old = 0;
    if (path_exists(final)) {
#ifdef RENAME_EXCHANGE
        if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE) == 0) {
            swapped = 1;
        } else if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP) {
            set_err(err, err_len, "cannot exchange %s and %s: %s", tmp, final, strerror(errno));
            return -1;
        }
#endif
        if (!swapped) {
            if (remove_tree(old, err, err_len) != 0) return -1;
            if (rename(final, old) != 0) {
                set_err(err, err_len, "cannot rename %s to %s: %s", final, old, strerror(errno));
                return -1;
            }
            had_old = 1;
        }
    }
    if (!swapped && rename(tmp, final) != 0) {
        set_err(err, err_len, "cannot rename %s to %s: %s", tmp, final, strerror(errno));
        return -1;
    }
    if (fsync_path(dir, 1, err, err_len) != 0) return -1;

    /* latest is replaced last, through a durable temporary file. */
    FILE *f = fopen(latest_tmp, "w");
    if (!f) {
        set_err(err, err_len, "cannot create %s: %s", latest_tmp, strerror(errno));
        return -1;
    }
    int bad = fprintf(f, "step-%" PRId64 "\n", step) < 0;
    bad |= fflush(f) != 0;
    bad |= fsync(fileno(f)) != 0;
    bad |= fclose(f) != 0;
    if (bad) {
        set_err(err, err_len, "cannot write %s: %s", latest_tmp, strerror(errno));
        unlink(latest_tmp);
        return -1;
    }
    if (rename(latest_tmp, latest) != 0) {
        set_err(err, err_len, "cannot rename %s to %s: %s", latest_tmp, latest, strerror(errno));
        return -1;
    }
    if (fsync_path(dir, 1, err, err_len) != 0) return -1;

    if (swapped && remove_tree(tmp, err, err_len) != 0) return -1;
    if (had_old && remove_tree(old, err, err_len) != 0) return -1;
    return prune(dir, step, keep_last, err, err_len);
}

/* ---- Reading. ---- */

int64_t io_checkpoint_latest(const char *dir, char *err, size_t err_len)
{
    char path[CKPT_PATH_MAX];
    int n = snprintf(path, sizeof path, "%s/latest", dir);
    if (n < 0 || (size_t)n >= sizeof path) {
        set_err(err, err_len, "checkpoint directory path too long: %s", dir);
        return -1;
    }
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT)
            set_err(err, err_len, "no checkpoint in %s", dir);
        else
            set_err(err, err_len, "cannot read %s: %s", path, strerror(errno));
        return -1;
    }
    char line[128] = {0};
    int ok = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    size_t len = ok ? strlen(line) : 0;
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r' || line[len - 1] == ' '))
        line[--len] = '\0';
    int64_t step = -1;
    if (len > 0) {
        if (line[0] >= '0' && line[0] <= '9') {
            char buf[140];
            snprintf(buf, sizeof buf, "step-%s", line);
            step = parse_step_name(buf);
        } else {
            step = parse_step_name(line);
        }
    }
    if (step < 0) {
        set_err(err, err_len, "%s does not name a checkpoint ('%s')", path, line);
        return -1;
    }
    return step;
}

/* The directory of committed checkpoint step: DIR/step-S, or DIR/step-S.old
 * when a commit writing the same step again was interrupted between its two
 * renames (only where RENAME_EXCHANGE is unavailable). */
static int committed_dir(char *out, size_t len, const char *dir, int64_t step, char *err,
                         size_t err_len)
{
    if (step_path(out, len, dir, step, "", NULL, err, err_len) != 0) return -1;
    if (path_exists(out)) return 0;
    char old[CKPT_PATH_MAX];
    if (step_path(old, sizeof old, dir, step, ".old", NULL, err, err_len) == 0 && path_exists(old))
        snprintf(out, len, "%s", old);
    return 0;
}

/* Opens a checkpoint file for reading and checks its format; *version is
 * the file's. */
static hid_t open_checked(const char *path, int *version, char *err, size_t err_len)
{
    if (!path_exists(path)) {
        set_err(err, err_len, "checkpoint file %s does not exist", path);
        return -1;
    }
    hid_t f = io_h5_open(path, H5F_ACC_RDONLY, err, err_len);
    if (f < 0) return -1;
    if (io_h5_check_format_versions(f, path, CKPT_FORMAT, CKPT_OLDEST_VERSION, CKPT_FORMAT_VERSION,
                                    "burstengine checkpoint", version, err, err_len) != 0)
        return close_read(f, path, -1, err, err_len);
    return f;
}

/* The attributes of model.h5. */
static int read_model_meta(hid_t f, const char *path, int version, io_ckpt_meta *got, char *err,
                           size_t err_len)
{
    int64_t world = 0, weights_only = 0;
    if (io_h5_read_attr_int(f, path, "step", &got->step, err, err_len) ||
        io_h5_read_attr_int(f, path, "sample_position", &got->sample_position, err, err_len) ||
        io_h5_read_attr_u64(f, path, "rng_state", &got->rng_state, err, err_len) ||
        io_h5_read_attr_int(f, path, "world_size", &world, err, err_len) ||
        io_h5_read_attr_int(f, path, "n_params", &got->n_params, err, err_len) ||
        (version >= 2 && io_h5_read_attr_int(f, path, "weights_only", &weights_only, err, err_len)))
        return -1;
    got->world_size = (int)world;
    got->weights_only = weights_only != 0;
    return 0;
}

/* The attributes of a rank's file (shard-R.h5, or optim-R.h5 of version 1):
 * the rank that wrote it and its shard [*begin, *begin + *len). */
static int read_shard_attrs(hid_t f, const char *path, int64_t *rank, int64_t *begin, int64_t *len,
                            char *err, size_t err_len)
{
    return io_h5_read_attr_int(f, path, "rank", rank, err, err_len) ||
                   io_h5_read_attr_int(f, path, "shard_begin", begin, err, err_len) ||
                   io_h5_read_attr_int(f, path, "shard_len", len, err, err_len)
               ? -1
               : 0;
}

/* A rank's file must name this rank and this run's shard. */
static int check_shard(hid_t f, const char *path, int rank, int64_t shard_begin, int64_t shard_len,
                       char *err, size_t err_len)
{
    int64_t stored_rank = -1, begin = -1, len = -1;
    if (read_shard_attrs(f, path, &stored_rank, &begin, &len, err, err_len) != 0) return -1;
    if (stored_rank != rank) {
        set_err(err, err_len, "%s belongs to rank %" PRId64 ", not %d", path, stored_rank, rank);
        return -1;
    }
    if (begin != shard_begin || len != shard_len) {
        set_err(err, err_len,
                "%s holds the shard [%" PRId64 ", %" PRId64 "), this run expects [%" PRId64
                ", %" PRId64 ") (no resharding)",
                path, begin, begin + len, shard_begin, shard_begin + shard_len);
        return -1;
    }
    return 0;
}

/* Parameters [begin, begin + count) of a checkpoint of version 2 into out,
 * from the shards that hold them: the shards must follow each other in rank
 * order and cover all n_params, which is checked as far as the range reaches
 * (and to the end when it is the whole). */
static int read_shards(const char *ck, const io_ckpt_meta *got, int64_t begin, int64_t count,
                       float *out, char *err, size_t err_len)
{
    char path[CKPT_PATH_MAX + 32];
    int64_t next = 0, end = begin + count;
    for (int r = 0; r < got->world_size && (next < end || count == got->n_params); r++) {
        snprintf(path, sizeof path, "%s/shard-%d.h5", ck, r);
        int version = 0, rc = -1;
        int64_t stored_rank = -1, at = -1, len = -1;
        hid_t f = open_checked(path, &version, err, err_len);
        if (f >= 0 && read_shard_attrs(f, path, &stored_rank, &at, &len, err, err_len) == 0) {
            if (stored_rank != r || at != next || len < 0 || len > got->n_params - next) {
                set_err(err, err_len,
                        "%s holds rank %" PRId64 "'s shard [%" PRId64 ", +%" PRId64
                        "), expected rank %d's, from %" PRId64 " within %" PRId64 " parameters",
                        path, stored_rank, at, len, r, next, got->n_params);
            } else {
                /* the part of [begin, end) this shard holds */
                int64_t lo = begin > at ? begin : at, hi = end < at + len ? end : at + len;
                rc = read_floats_at(f, path, "params", hi > lo ? out + (lo - begin) : NULL,
                                    hi > lo ? lo - at : 0, hi > lo ? hi - lo : 0, len, "shard_len",
                                    err, err_len);
            }
        }
        if (close_read(f, path, rc == 0 ? 0 : -1, err, err_len) != 0) return -1;
        next += len;
    }
    if (next >= end && (count != got->n_params || next == got->n_params)) return 0;
    set_err(err, err_len, "the shards of %s hold %" PRId64 " of its %" PRId64 " parameters", ck,
            next, got->n_params);
    return -1;
}

/* model.h5 against what the caller expects. */
static int check_expected(const char *ck, const char *path, int64_t step, const io_ckpt_meta *got,
                          const io_ckpt_meta *expect, char *err, size_t err_len)
{
    if (got->step != step) {
        set_err(err, err_len, "%s says step %" PRId64 ", expected %" PRId64, path, got->step, step);
        return -1;
    }
    if (expect && expect->n_params > 0 && expect->n_params != got->n_params) {
        set_err(err, err_len, "checkpoint %s has %" PRId64 " parameters, this run %" PRId64, ck,
                got->n_params, expect->n_params);
        return -1;
    }
    if (expect && expect->world_size > 0 && expect->world_size != got->world_size) {
        set_err(err, err_len,
                "checkpoint %s was written by %d ranks, this run has %d (no resharding)", ck,
                got->world_size, expect->world_size);
        return -1;
    }
    return 0;
}

int io_checkpoint_read_model(const char *dir, int64_t step, const io_ckpt_meta *expect,
                             io_ckpt_meta *meta, float *params, char *err, size_t err_len)
{
    char ck[CKPT_PATH_MAX], path[CKPT_PATH_MAX + 32];
    if (committed_dir(ck, sizeof ck, dir, step, err, err_len) != 0) return -1;
    snprintf(path, sizeof path, "%s/model.h5", ck);
    io_ckpt_meta got = {0};
    io_h5_quiet();
    int rc = -1, version = 0;
    char *config = NULL;
    hid_t f = open_checked(path, &version, err, err_len);
    if (f >= 0 && read_model_meta(f, path, version, &got, err, err_len) == 0 &&
        check_expected(ck, path, step, &got, expect, err, err_len) == 0 &&
        (version >= 2 || !params ||
         read_floats(f, path, "params", params, got.n_params, "n_params", err, err_len) == 0))
        config = io_h5_read_string_dataset(f, path, "config", err, err_len);
    rc = close_read(f, path, config ? 0 : -1, err, err_len);
    if (rc == 0 && version >= 2 && params)
        rc = read_shards(ck, &got, 0, got.n_params, params, err, err_len);
    if (rc != 0) {
        free(config);
        return -1;
    }
    got.config_text = config;
    if (meta)
        *meta = got;
    else
        free(config);
    return 0;
}

/* The moments of rank's shard from FILE (shard-R.h5, or optim-R.h5 of version
 * 1), which a checkpoint of weights only lacks. */
static int read_moments(hid_t f, const char *path, int64_t shard_len, float *m, float *v, char *err,
                        size_t err_len)
{
    if (H5Lexists(f, "m", H5P_DEFAULT) <= 0) {
        set_err(err, err_len,
                "%s holds weights only, no optimizer state: a run may start from it "
                "([model] init_from), not resume it",
                path);
        return -1;
    }
    return read_floats(f, path, "m", m, shard_len, "shard_len", err, err_len) ||
                   read_floats(f, path, "v", v, shard_len, "shard_len", err, err_len)
               ? -1
               : 0;
}

int io_checkpoint_read_params(const char *dir, int64_t step, const io_ckpt_meta *expect,
                              int64_t begin, int64_t count, float *out, char *err, size_t err_len)
{
    char ck[CKPT_PATH_MAX], path[CKPT_PATH_MAX + 32];
    if (committed_dir(ck, sizeof ck, dir, step, err, err_len) != 0) return -1;
    snprintf(path, sizeof path, "%s/model.h5", ck);
    io_h5_quiet();
    int version = 0, rc = -1;
    io_ckpt_meta got = {0};
    hid_t f = open_checked(path, &version, err, err_len);
    if (f >= 0 && read_model_meta(f, path, version, &got, err, err_len) == 0 &&
        check_expected(ck, path, step, &got, expect, err, err_len) == 0) {
        if (begin < 0 || count < 0 || count > got.n_params - begin || (count > 0 && !out))
            set_err(err, err_len,
                    "checkpoint %s: no parameters [%" PRId64 ", %" PRId64 ") among its %" PRId64,
                    ck, begin, begin + count, got.n_params);
        else if (version >= 2)
            rc = 0;
        else
            rc = read_floats_at(f, path, "params", out, begin, count, got.n_params, "n_params", err,
                                err_len);
    }
    rc = close_read(f, path, rc, err, err_len);
    if (rc == 0 && version >= 2) rc = read_shards(ck, &got, begin, count, out, err, err_len);
    return rc;
}

int io_checkpoint_read_rank(const char *dir, int64_t step, int rank, int64_t shard_begin,
                            int64_t shard_len, float *params, float *m, float *v, char *err,
                            size_t err_len)
{
    char ck[CKPT_PATH_MAX], path[CKPT_PATH_MAX + 32];
    if (committed_dir(ck, sizeof ck, dir, step, err, err_len) != 0) return -1;
    io_h5_quiet();
    /* shard-R.h5, or else the optim-R.h5 of version 1 */
    snprintf(path, sizeof path, "%s/shard-%d.h5", ck, rank);
    if (!path_exists(path)) {
        char old[CKPT_PATH_MAX + 32];
        snprintf(old, sizeof old, "%s/optim-%d.h5", ck, rank);
        if (path_exists(old)) snprintf(path, sizeof path, "%s", old);
    }
    int version = 0;
    hid_t f = open_checked(path, &version, err, err_len);
    int rc = f < 0 ? -1 : check_shard(f, path, rank, shard_begin, shard_len, err, err_len);
    if (rc == 0 && params && version >= 2)
        rc = read_floats(f, path, "params", params, shard_len, "shard_len", err, err_len);
    if (rc == 0 && (m || v)) rc = read_moments(f, path, shard_len, m, v, err, err_len);
    rc = close_read(f, path, rc, err, err_len);
    if (rc == 0 && params && version == 1) /* from model.h5's whole /params */
        rc = io_checkpoint_read_params(dir, step, NULL, shard_begin, shard_len, params, err,
                                       err_len);
    return rc;
}
