/* safetensors.c: see safetensors.h. The header is parsed with jansson; the
 * data are never copied, only mapped; every size is checked for overflow
 * before it is used. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/safetensors.h"
#include "util/fail.h"

/* The format's dtypes: those we convert, and the others we can still size
 * (so that a file holding them is checked and opened). */
static const struct {
    const char *name;
    io_st_dtype dtype;
    size_t size;
} dtypes[] = {
    {"F32", IO_ST_F32, 4},    {"F16", IO_ST_F16, 2},       {"BF16", IO_ST_BF16, 2},
    {"F64", IO_ST_OTHER, 8},  {"I64", IO_ST_OTHER, 8},     {"U64", IO_ST_OTHER, 8},
    {"I32", IO_ST_OTHER, 4},  {"U32", IO_ST_OTHER, 4},     {"I16", IO_ST_OTHER, 2},
    {"U16", IO_ST_OTHER, 2},  {"I8", IO_ST_OTHER, 1},      {"U8", IO_ST_OTHER, 1},
    {"BOOL", IO_ST_OTHER, 1}, {"F8_E4M3", IO_ST_OTHER, 1}, {"F8_E5M2", IO_ST_OTHER, 1},
};
enum { N_DTYPES = sizeof dtypes / sizeof dtypes[0] };

/* The largest header accepted: real ones are kilobytes; this bounds what a
 * corrupt length can make us parse. */
enum { MAX_HEADER_BYTES = 100 << 20 };

size_t io_st_dtype_size(io_st_dtype t)
{
    return t == IO_ST_OTHER ? 0 : dtypes[t].size; /* the first rows are in enum order */
}

const char *io_st_dtype_name(io_st_dtype t)
{
    return t == IO_ST_OTHER ? "other" : dtypes[t].name;
}

typedef struct {
    char *path;
    void *map;
    size_t size;
    json_t *header;
} st_file;

struct io_st_model {
    st_file *files;
    int n_files;
    io_st_tensor *tensors; /* sorted by name */
    int64_t n;
};

/* Maps path whole, read-only. */
static int map_file(st_file *f, const char *path, char *err, size_t err_len)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0) return bu_fail(err, err_len, "%s: %s", path, strerror(errno));
    struct stat sb;
    int rc = fstat(fd, &sb);
    if (rc == 0 && sb.st_size < 8) {
        close(fd);
        return bu_fail(err, err_len, "%s: %lld bytes: too short for a safetensors header length",
                       path, (long long)sb.st_size);
    }
    void *map =
        rc == 0 ? mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
    int saved = errno;
    close(fd);
    if (map == MAP_FAILED) return bu_fail(err, err_len, "%s: %s", path, strerror(saved));
    f->map = map;
    f->size = (size_t)sb.st_size;
    return 0;
}

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static const char *tensor_dtype(const char *name, io_st_dtype *dtype, size_t *size)
{
    for (int i = 0; i < N_DTYPES; i++)
        if (strcmp(name, dtypes[i].name) == 0) {
            *dtype = dtypes[i].dtype;
            *size = dtypes[i].size;
            return dtypes[i].name;
        }
    return NULL;
}

/* The shape of entry e into t; its element count in *count. */
static int read_shape(const char *path, const char *name, json_t *shape, io_st_tensor *t,
                      uint64_t *count, char *err, size_t err_len)
{
    if (!json_is_array(shape) || json_array_size(shape) > IO_ST_MAX_RANK)
        return bu_fail(err, err_len, "%s: tensor '%s': shape is not an array of at most %d sizes",
                       path, name, IO_ST_MAX_RANK);
    t->rank = (int)json_array_size(shape);
    *count = 1;
    for (int i = 0; i < t->rank; i++) {
        json_t *s = json_array_get(shape, (size_t)i);
        if (!json_is_integer(s) || json_integer_value(s) < 0)
            return bu_fail(err, err_len, "%s: tensor '%s': shape[%d] is not a size", path, name, i);
        t->shape[i] = (int64_t)json_integer_value(s);
        uint64_t d = (uint64_t)t->shape[i];
        if (d && *count > UINT64_MAX / d)
            return bu_fail(err, err_len, "%s: tensor '%s': shape overflows", path, name);
        *count *= d;
    }
    return 0;
}

/* One header entry, checked against the data (data_bytes after the header). */
static int read_entry(const st_file *f, const uint8_t *data, size_t data_bytes, const char *name,
                      json_t *e, io_st_tensor *t, char *err, size_t err_len)
{
    const char *path = f->path;
    json_t *dt = json_object_get(e, "dtype"), *off = json_object_get(e, "data_offsets");
    if (!json_is_object(e) || !json_is_string(dt))
        return bu_fail(err, err_len, "%s: tensor '%s': no dtype", path, name);
    size_t item = 0;
    memset(t, 0, sizeof *t);
    t->name = name;
    t->path = f->path;
    t->dtype_name = tensor_dtype(json_string_value(dt), &t->dtype, &item);
    if (!t->dtype_name)
        return bu_fail(err, err_len, "%s: tensor '%s': unknown dtype '%s'", path, name,
                       json_string_value(dt));
    uint64_t count = 0;
    if (read_shape(path, name, json_object_get(e, "shape"), t, &count, err, err_len) != 0)
        return -1;
    json_t *b = json_array_get(off, 0), *en = json_array_get(off, 1);
    if (!json_is_array(off) || json_array_size(off) != 2 || !json_is_integer(b) ||
        !json_is_integer(en) || json_integer_value(b) < 0 ||
        json_integer_value(en) < json_integer_value(b))
        return bu_fail(err, err_len, "%s: tensor '%s': data_offsets is not [begin, end]", path,
                       name);
    uint64_t begin = (uint64_t)json_integer_value(b), end = (uint64_t)json_integer_value(en);
    if (end > data_bytes)
        return bu_fail(err, err_len,
                       "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                       ") past the end of the data (%zu bytes): a truncated file?",
                       path, name, begin, end, data_bytes);
    if (count > UINT64_MAX / item || end - begin != count * item)
        return bu_fail(err, err_len,
                       "%s: tensor '%s': %" PRIu64 " bytes for %" PRIu64 " elements of %s", path,
                       name, end - begin, count, t->dtype_name);
    t->data = data + begin;
    t->bytes = (size_t)(end - begin);
    return 0;
}

/* Parses f's header into t[] (room for json_object_size entries), adding to *n. */
static int read_header(st_file *f, io_st_tensor *t, int64_t *n, char *err, size_t err_len)
{
    const uint8_t *base = f->map;
    uint64_t hlen = le64(base);
    if (hlen > f->size - 8 || hlen > MAX_HEADER_BYTES)
        return bu_fail(err, err_len,
                       "%s: header of %" PRIu64 " bytes past the end of the file (%zu bytes)",
                       f->path, hlen, f->size);
    json_error_t je;
    f->header = json_loadb((const char *)base + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &je);
    if (!f->header) return bu_fail(err, err_len, "%s: header: %s", f->path, je.text);
    if (!json_is_object(f->header))
        return bu_fail(err, err_len, "%s: header is not a JSON object", f->path);
    const uint8_t *data = base + 8 + hlen;
    size_t data_bytes = f->size - 8 - (size_t)hlen;
    const char *name;
    json_t *e;
    json_object_foreach(f->header, name, e)
    {
        if (strcmp(name, "__metadata__") == 0) continue;
        if (read_entry(f, data, data_bytes, name, e, &t[*n], err, err_len) != 0) return -1;
        (*n)++;
    }
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const io_st_tensor *)a)->name, ((const io_st_tensor *)b)->name);
}

/* Opens the files paths[n_files] as one model. */
static io_st_model *open_files(char **paths, int n_files, char *err, size_t err_len)
{
    io_st_model *m = calloc(1, sizeof *m);
    if (m) m->files = calloc((size_t)n_files, sizeof *m->files);
    if (!m || !m->files) {
        free(m);
        bu_fail(err, err_len, "out of memory opening %d safetensors files", n_files);
        return NULL;
    }
    int64_t room = 0;
    int failed = 0;
    for (int i = 0; i < n_files && !failed; i++) {
        st_file *f = &m->files[m->n_files++]; /* closed with the model whatever happens next */
        f->path = strdup(paths[i]);
        failed = !f->path || map_file(f, paths[i], err, err_len) != 0;
        if (failed) break;
        uint64_t hlen = le64(f->map); /* each entry takes more than 8 bytes of header */
        room += (int64_t)((hlen < f->size ? hlen : f->size) / 8 + 1);
    }
    if (!failed && !(m->tensors = calloc((size_t)room, sizeof *m->tensors))) {
        bu_fail(err, err_len, "out of memory for %" PRId64 " tensors", room);
        failed = 1;
    }
    for (int i = 0; i < m->n_files && !failed; i++)
        failed = read_header(&m->files[i], m->tensors, &m->n, err, err_len) != 0;
    if (!failed) {
        qsort(m->tensors, (size_t)m->n, sizeof *m->tensors, by_name);
        for (int64_t i = 1; i < m->n && !failed; i++)
            if (strcmp(m->tensors[i].name, m->tensors[i - 1].name) == 0)
                failed =
                    bu_fail(err, err_len, "tensor '%s' is in both %s and %s", m->tensors[i].name,
                            m->tensors[i - 1].path, m->tensors[i].path) != 0;
    }
    if (failed) {
        io_st_model_close(m);
        return NULL;
    }
    return m;
}

/* The shard files an index names (each once), malloc'd paths inside dir. */
static char **index_files(const char *dir, const char *index, json_t **weight_map, int *n_files,
                          char *err, size_t err_len)
{
    json_error_t je;
    json_t *root = json_load_file(index, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        bu_fail(err, err_len, "%s: %s", index, je.text);
        return NULL;
    }
    json_t *map = json_object_get(root, "weight_map");
    size_t n = json_is_object(map) ? json_object_size(map) : 0;
    char **paths = n ? calloc(n, sizeof *paths) : NULL;
    const char *name;
    json_t *file;
    int k = 0, failed = !paths;
    if (!json_is_object(map))
        bu_fail(err, err_len, "%s: no \"weight_map\" object", index);
    else if (!paths)
        bu_fail(err, err_len, "%s: an empty \"weight_map\"", index);
    json_object_foreach(map, name, file)
    {
        if (failed) break;
        const char *base = json_string_value(file);
        if (!base || strchr(base, '/')) {
            failed =
                bu_fail(err, err_len, "%s: weight_map[\"%s\"] is not a file name in the folder",
                        index, name) != 0;
            break;
        }
        int seen = 0;
        for (int i = 0; i < k && !seen; i++) seen = strcmp(strrchr(paths[i], '/') + 1, base) == 0;
        if (seen) continue;
        size_t len = strlen(dir) + strlen(base) + 2;
        if (!(paths[k] = malloc(len)))
            failed = bu_fail(err, err_len, "out of memory") != 0;
        else
            snprintf(paths[k++], len, "%s/%s", dir, base);
    }
    if (failed || !paths) {
        for (int i = 0; i < k; i++) free(paths[i]);
        free(paths);
        json_decref(root);
        return NULL;
    }
    *weight_map = json_incref(map);
    json_decref(root);
    *n_files = k;
    return paths;
}

/* Every name of the weight map is in the shard it names. */
static int check_weight_map(const io_st_model *m, const char *index, json_t *map, char *err,
                            size_t err_len)
{
    const char *name;
    json_t *file;
    json_object_foreach(map, name, file)
    {
        io_st_tensor t;
        const char *slash;
        if (io_st_find(m, name, &t) != 0 || !(slash = strrchr(t.path, '/')) ||
            strcmp(slash + 1, json_string_value(file)) != 0)
            return bu_fail(err, err_len, "%s: tensor '%s' is not in %s", index, name,
                           json_string_value(file));
    }
    return 0;
}

static int exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

io_st_model *io_st_model_open(const char *path, char *err, size_t err_len)
{
    struct stat sb;
    if (stat(path, &sb) != 0) {
        bu_fail(err, err_len, "%s: %s", path, strerror(errno));
        return NULL;
    }
    char *one = (char *)path;
    if (!S_ISDIR(sb.st_mode)) return open_files(&one, 1, err, err_len);
    char single[PATH_MAX], index[PATH_MAX];
    if (snprintf(index, sizeof index, "%s/model.safetensors.index.json", path) >=
        (int)sizeof index) {
        bu_fail(err, err_len, "%s: path too long", path);
        return NULL;
    }
    snprintf(single, sizeof single, "%s/model.safetensors", path);
    if (!exists(index)) {
        if (exists(single)) return (one = single, open_files(&one, 1, err, err_len));
        bu_fail(err, err_len, "%s: neither model.safetensors nor model.safetensors.index.json",
                path);
        return NULL;
    }
    json_t *map = NULL;
    int n_files = 0;
    char **paths = index_files(path, index, &map, &n_files, err, err_len);
    io_st_model *m = paths ? open_files(paths, n_files, err, err_len) : NULL;
    if (m && check_weight_map(m, index, map, err, err_len) != 0) {
        io_st_model_close(m);
        m = NULL;
    }
    for (int i = 0; i < n_files; i++) free(paths[i]);
    free(paths);
    json_decref(map);
    return m;
}

void io_st_model_close(io_st_model *m)
{
    if (!m) return;
    for (int i = 0; i < m->n_files; i++) {
        if (m->files[i].map) munmap(m->files[i].map, m->files[i].size);
        json_decref(m->files[i].header);
        free(m->files[i].path);
    }
    free(m->files);
    free(m->tensors);
    free(m);
}

int io_st_find(const io_st_model *m, const char *name, io_st_tensor *t)
{
    io_st_tensor key = {.name = name};
    const io_st_tensor *hit =
        m->n ? bsearch(&key, m->tensors, (size_t)m->n, sizeof key, by_name) : NULL;
    if (!hit) return -1;
    *t = *hit;
    return 0;
}

int64_t io_st_count(const io_st_model *m)
{
    return m->n;
}

io_st_tensor io_st_at(const io_st_model *m, int64_t i)
{
    return m->tensors[i];
}

/* ---- writing ---------------------------------------------------------- */

static json_t *entry_json(const io_st_out *t, uint64_t begin, uint64_t end)
{
    json_t *shape = json_array();
    for (int i = 0; i < t->rank; i++) json_array_append_new(shape, json_integer(t->shape[i]));
    json_t *off = json_array();
    json_array_append_new(off, json_integer((json_int_t)begin));
    json_array_append_new(off, json_integer((json_int_t)end));
    return json_pack("{s:s, s:o, s:o}", "dtype", io_st_dtype_name(t->dtype), "shape", shape,
                     "data_offsets", off);
}

static uint64_t out_bytes(const io_st_out *t)
{
    uint64_t n = io_st_dtype_size(t->dtype);
    for (int i = 0; i < t->rank; i++) n *= (uint64_t)t->shape[i];
    return n;
}

/* The header text, padded with spaces to a multiple of 8 bytes (so that the
 * data start aligned); malloc'd, its length in *len. */
static char *header_text(const io_st_out *t, int64_t n, const char *const *metadata, size_t *len)
{
    json_t *h = json_object();
    uint64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        uint64_t bytes = out_bytes(&t[i]);
        json_object_set_new(h, t[i].name, entry_json(&t[i], at, at + bytes));
        at += bytes;
    }
    if (metadata && metadata[0]) {
        json_t *md = json_object();
        for (int i = 0; metadata[i] && metadata[i + 1]; i += 2)
            json_object_set_new(md, metadata[i], json_string(metadata[i + 1]));
        json_object_set_new(h, "__metadata__", md);
    }
    char *text = json_dumps(h, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(h);
    if (!text) return NULL;
    size_t raw = strlen(text), padded = (raw + 7) / 8 * 8;
    char *out = realloc(text, padded + 1);
    if (!out) {
        free(text);
        return NULL;
    }
    memset(out + raw, ' ', padded - raw);
    out[padded] = '\0';
    *len = padded;
    return out;
}

static int write_all(FILE *f, const io_st_out *t, int64_t n, const char *header, size_t hlen)
{
    uint8_t lenbytes[8];
    for (int i = 0; i < 8; i++) lenbytes[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    int ok = fwrite(lenbytes, 1, 8, f) == 8 && fwrite(header, 1, hlen, f) == hlen;
    for (int64_t i = 0; i < n && ok; i++) {
        size_t bytes = (size_t)out_bytes(&t[i]);
        ok = fwrite(t[i].data, 1, bytes, f) == bytes;
    }
    ok = fflush(f) == 0 && ok;
    return ok && fsync(fileno(f)) == 0 ? 0 : -1;
}

int io_st_write(const char *path, const io_st_out *t, int64_t n, const char *const *metadata,
                char *err, size_t err_len)
{
    for (int64_t i = 0; i < n; i++)
        if (t[i].dtype == IO_ST_OTHER || t[i].rank > IO_ST_MAX_RANK)
            return bu_fail(err, err_len, "%s: tensor '%s': cannot be written", path, t[i].name);
    size_t hlen = 0;
    char *header = header_text(t, n, metadata, &hlen);
    if (!header) return bu_fail(err, err_len, "%s: out of memory for the header", path);
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
        free(header);
        return bu_fail(err, err_len, "%s: path too long", path);
    }
    FILE *f = fopen(tmp, "wb");
    int rc = f ? write_all(f, t, n, header, hlen) : -1;
    int saved = errno;
    if (f && fclose(f) != 0 && rc == 0) rc = -1, saved = errno;
    free(header);
    if (rc == 0 && rename(tmp, path) != 0) rc = -1, saved = errno;
    if (rc != 0) {
        unlink(tmp);
        return bu_fail(err, err_len, "%s: %s", f ? path : tmp, strerror(saved));
    }
    return 0;
}
