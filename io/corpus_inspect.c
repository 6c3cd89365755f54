/* corpus_inspect.c: the storage of a corpus file as `burst data info` shows
 * it: the token width, the chunking and filters of /tokens, and every dataset
 * under the root with its type and shape. Read-only, metadata only; errors
 * follow io/h5util.h. */
#include "config.h"

#include <hdf5.h>
#include <stdio.h>
#include <string.h>

#include "io/corpus.h"
#include "io/corpus_inspect.h"
#include "io/h5util.h"

static void type_name(hid_t t, char *buf, size_t len)
{
    H5T_class_t k = H5Tget_class(t);
    size_t bits = H5Tget_size(t) * 8;
    if (k == H5T_INTEGER)
        snprintf(buf, len, "%sint%zu", H5Tget_sign(t) == H5T_SGN_NONE ? "u" : "", bits);
    else if (k == H5T_FLOAT)
        snprintf(buf, len, "float%zu", bits);
    else if (k == H5T_STRING)
        snprintf(buf, len, "string");
    else
        snprintf(buf, len, "other");
}

static herr_t list_one(hid_t g, const char *name, const H5L_info_t *info, void *data)
{
    (void)info;
    io_corpus_layout *out = data;
    char line[256], type[32] = "?", dims[160] = "";
    hid_t d = H5Dopen2(g, name, H5P_DEFAULT);
    if (d < 0) {
        io_h5_detail(NULL, 0); /* a group or a dangling link: listed, not an error */
        snprintf(line, sizeof line, "/%s (not a dataset)\n", name);
    } else {
        hid_t t = H5Dget_type(d), s = H5Dget_space(d);
        if (t >= 0) type_name(t, type, sizeof type);
        int rank = s >= 0 ? H5Sget_simple_extent_ndims(s) : -1;
        hsize_t dim[8] = {0};
        if (rank > 0 && rank <= 8) {
            H5Sget_simple_extent_dims(s, dim, NULL);
            size_t used = 0;
            for (int i = 0; i < rank && used < sizeof dims; i++)
                used += (size_t)snprintf(dims + used, sizeof dims - used, "%s%llu", i ? ", " : "",
                                         (unsigned long long)dim[i]);
        }
        snprintf(line, sizeof line, "/%s %s [%s]\n", name, type, dims);
        if (s >= 0) H5Sclose(s);
        if (t >= 0) H5Tclose(t);
        H5Dclose(d);
    }
    size_t used = strlen(out->datasets);
    snprintf(out->datasets + used, sizeof out->datasets - used, "%s", line);
    return 0;
}

int io_corpus_inspect(const char *path, io_corpus_layout *out, char *err, size_t err_len)
{
    io_h5_quiet();
    io_corpus *c = NULL;
    if (io_corpus_open(path, &c, err, err_len) != 0) return -1;
    io_corpus_close(c);
    memset(out, 0, sizeof *out);
    out->deflate_level = -1;
    hid_t f = io_h5_open(path, H5F_ACC_RDONLY, err, err_len);
    hid_t d = f < 0 ? -1 : io_h5_open_dataset(f, path, "tokens", H5P_DEFAULT, err, err_len);
    if (d < 0) {
        if (f >= 0) H5Fclose(f);
        return -1;
    }
    hid_t t = H5Dget_type(d);
    out->bits = (int)H5Tget_size(t) * 8;
    H5Tclose(t);
    hid_t dcpl = H5Dget_create_plist(d);
    if (H5Pget_layout(dcpl) == H5D_CHUNKED) {
        hsize_t ch = 0;
        H5Pget_chunk(dcpl, 1, &ch);
        out->chunk_tokens = (int64_t)ch;
    }
    int nf = H5Pget_nfilters(dcpl);
    for (int i = 0; i < nf; i++) {
        unsigned flags = 0, cd[4] = {0};
        size_t ncd = 4;
        H5Z_filter_t id = H5Pget_filter2(dcpl, (unsigned)i, &flags, &ncd, cd, 0, NULL, NULL);
        if (id == H5Z_FILTER_DEFLATE) out->deflate_level = ncd > 0 ? (int)cd[0] : 0;
        if (id == H5Z_FILTER_SHUFFLE) out->shuffle = 1;
    }
    H5Pclose(dcpl);
    H5Dclose(d);
    H5Literate(f, H5_INDEX_NAME, H5_ITER_INC, NULL, list_one, out);
    H5Fclose(f);
    return 0;
}
