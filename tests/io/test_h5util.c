/* test_h5util.c: the io wing's one HDF5 error policy (io/h5util.h), through
 * its helpers and through the entry points of io/ that use them. A file that
 * is not HDF5, a missing attribute, an attribute of the wrong type or shape
 * and a missing dataset are each refused with a message "<file>: <what we were
 * doing>: <detail>" that names the attribute or dataset and carries HDF5's own
 * innermost message where HDF5 has one; HDF5 prints nothing on stderr, in the
 * main thread and in a fresh thread alike (HDF5 keeps its printing switch per
 * thread); and the HDF5 error stack is left empty. What the attribute helpers
 * write reads back exactly. */
#include <check.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/checkpoint.h"
#include "io/corpus.h"
#include "io/corpus_inspect.h"
#include "io/dataset_int64.h"
#include "io/h5util.h"
#include "tests/lib/check_main.h"
#include "tests/lib/testutil.h"

static char dir[256], errfile[512];
static int saved_stderr = -1;

static const char *tmp_path(const char *name)
{
    return test_path_in(dir, name);
}

/* Every test runs with stderr sent to a file that must stay empty. */
static void setup(void)
{
    ck_assert_ptr_nonnull(test_make_tmpdir(dir, sizeof dir, "burst-test-h5util"));
    snprintf(errfile, sizeof errfile, "%s/stderr.txt", dir);
    fflush(stderr);
    saved_stderr = dup(2);
    int fd = open(errfile, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert_int_ge(fd, 0);
    dup2(fd, 2);
    close(fd);
}

static void expect_nothing_printed(void)
{
    fflush(stderr);
    char printed[512] = "";
    FILE *f = fopen(errfile, "r");
    ck_assert_ptr_nonnull(f);
    size_t got = fread(printed, 1, sizeof printed - 1, f);
    fclose(f);
    printed[got] = '\0';
    ck_assert_msg(got == 0, "printed on stderr: %s", printed);
}

static void teardown(void)
{
    expect_nothing_printed();
    dup2(saved_stderr, 2);
    close(saved_stderr);
    ck_assert_int_eq(test_remove_tree(dir), 0);
}

/* err reads "<path>: <...what...>: <...detail...>", and the stack is empty. */
static void expect_error(const char *err, const char *path, const char *what, const char *detail)
{
    size_t n = strlen(path);
    ck_assert_msg(strncmp(err, path, n) == 0 && strncmp(err + n, ": ", 2) == 0,
                  "error does not start with the file %s: %s", path, err);
    const char *w = strstr(err + n, what);
    ck_assert_msg(w != NULL, "error does not say '%s': %s", what, err);
    const char *d = strstr(w + strlen(what), ": ");
    ck_assert_msg(d && strstr(d, detail), "error has no detail '%s' after '%s': %s", detail, what,
                  err);
    ck_assert_int_eq(H5Eget_num(H5E_DEFAULT), 0);
}

static void write_garbage(const char *path)
{
    FILE *g = fopen(path, "w");
    ck_assert_ptr_nonnull(g);
    for (int i = 0; i < 5000; i++) fputc((i * 131) & 0xff, g);
    fclose(g);
}

/* A file with the corpus format attributes and nothing else (open for more). */
static hid_t corpus_header(const char *path)
{
    char err[512];
    hid_t f = io_h5_create(path, err, sizeof err);
    ck_assert_msg(f >= 0, "%s", err);
    ck_assert_msg(
        io_h5_write_format(f, path, IO_CORPUS_FORMAT, IO_CORPUS_VERSION, err, sizeof err) == 0,
        "%s", err);
    return f;
}

/* An attribute of two integers: not a scalar. */
static void write_pair_attr(hid_t f, const char *name)
{
    hsize_t two = 2;
    int v[2] = {7, 8};
    hid_t s = H5Screate_simple(1, &two, NULL);
    hid_t a = H5Acreate2(f, name, H5T_STD_I32LE, s, H5P_DEFAULT, H5P_DEFAULT);
    ck_assert(a >= 0 && H5Awrite(a, H5T_NATIVE_INT, v) >= 0);
    H5Aclose(a);
    H5Sclose(s);
}

/* A variable-length string attribute, as h5py writes them. */
static void write_vlen_string_attr(hid_t f, const char *name, const char *value)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
    ck_assert(a >= 0 && H5Awrite(a, t, &value) >= 0);
    H5Aclose(a);
    H5Sclose(s);
    H5Tclose(t);
}

START_TEST(attributes_round_trip)
{
    const char *p = tmp_path("attrs.h5");
    char err[512] = "", s[64], *text;
    hid_t f = corpus_header(p);
    ck_assert_msg(io_h5_write_attr_int(f, p, "i32", H5T_STD_I32LE, -5, err, sizeof err) == 0 &&
                      io_h5_write_attr_int(f, p, "u32", H5T_STD_U32LE, 4000000000LL, err,
                                           sizeof err) == 0 &&
                      io_h5_write_attr_int(f, p, "i64", H5T_NATIVE_INT64, -((int64_t)1 << 40),
                                           err, sizeof err) == 0 &&
                      io_h5_write_attr_u64(f, p, "u64", UINT64_MAX, err, sizeof err) == 0 &&
                      io_h5_write_attr_string(f, p, "str", "hello", err, sizeof err) == 0 &&
                      io_h5_write_attr_string(f, p, "empty", "", err, sizeof err) == 0 &&
                      io_h5_write_string_dataset(f, p, "text", "[a]\nb = 1\n", err, sizeof err) ==
                          0,
                  "%s", err);
    write_vlen_string_attr(f, "vlen", "from h5py");
    ck_assert_int_eq(io_h5_close(f, p, err, sizeof err), 0);

    f = io_h5_open(p, H5F_ACC_RDONLY, err, sizeof err);
    ck_assert_msg(f >= 0, "%s", err);
    int64_t v = 0;
    uint64_t u = 0;
    ck_assert(io_h5_read_attr_int(f, p, "i32", &v, err, sizeof err) == 0 && v == -5);
    ck_assert(io_h5_read_attr_int(f, p, "u32", &v, err, sizeof err) == 0 && v == 4000000000LL);
    ck_assert(io_h5_read_attr_int(f, p, "i64", &v, err, sizeof err) == 0 &&
              v == -((int64_t)1 << 40));
    ck_assert(io_h5_read_attr_u64(f, p, "u64", &u, err, sizeof err) == 0 && u == UINT64_MAX);
    ck_assert(io_h5_read_attr_string(f, p, "str", s, sizeof s, err, sizeof err) == 0);
    ck_assert_str_eq(s, "hello");
    ck_assert(io_h5_read_attr_string(f, p, "empty", s, sizeof s, err, sizeof err) == 0);
    ck_assert_str_eq(s, "");
    ck_assert(io_h5_read_attr_string(f, p, "vlen", s, sizeof s, err, sizeof err) == 0);
    ck_assert_str_eq(s, "from h5py");
    ck_assert(io_h5_read_attr_string(f, p, "str", s, 4, err, sizeof err) == 0);
    ck_assert_str_eq(s, "hel"); /* cut to the buffer */
    ck_assert_ptr_nonnull(text = io_h5_read_string_dataset(f, p, "/text", err, sizeof err));
    ck_assert_str_eq(text, "[a]\nb = 1\n");
    free(text);
    ck_assert_msg(io_h5_check_format(f, p, IO_CORPUS_FORMAT, IO_CORPUS_VERSION, "corpus", err,
                                     sizeof err) == 0,
                  "%s", err);
    ck_assert_int_eq(io_h5_close(f, p, err, sizeof err), 0);
    ck_assert_int_eq(H5Eget_num(H5E_DEFAULT), 0);
}
END_TEST

/* Errors of a file that is not HDF5 at all, from every entry point. */
static void not_hdf5(const char *p, char err[][512])
{
    io_corpus *c = NULL;
    io_corpus_layout lay;
    int64_t *data = NULL, rows, cols;
    write_garbage(p);
    if (io_h5_open(p, H5F_ACC_RDONLY, err[0], 512) >= 0) snprintf(err[0], 512, "opened");
    if (io_corpus_open(p, &c, err[1], 512) == 0) snprintf(err[1], 512, "opened");
    if (io_read_int64_dataset(p, "/answers", &data, &rows, &cols, err[2], 512) == 0)
        snprintf(err[2], 512, "read");
    if (io_corpus_inspect(p, &lay, err[3], 512) == 0) snprintf(err[3], 512, "inspected");
    io_corpus_close(c);
    free(data);
}

static void expect_not_hdf5(const char *p, char err[][512])
{
    expect_error(err[0], p, "opening as HDF5", "signature");
    ck_assert_msg(strstr(err[1], p) && strstr(err[1], "not an HDF5 file"), "%s", err[1]);
    expect_error(err[2], p, "opening as HDF5", "signature");
    ck_assert_msg(strstr(err[3], p) && strstr(err[3], "not an HDF5 file"), "%s", err[3]);
}

START_TEST(not_an_hdf5_file)
{
    const char *p = tmp_path("garbage.h5");
    char err[4][512] = {""};
    not_hdf5(p, err);
    expect_not_hdf5(p, err);
    ck_assert_int_eq(H5Eget_num(H5E_DEFAULT), 0);
}
END_TEST

typedef struct {
    const char *path;
    char err[4][512];
    ssize_t stack_left;
} thread_case;

static void *not_hdf5_in_thread(void *arg)
{
    thread_case *t = arg;
    not_hdf5(t->path, t->err);
    t->stack_left = H5Eget_num(H5E_DEFAULT);
    return NULL;
}

/* A thread other than the one that first called into io/ is as quiet. */
START_TEST(quiet_in_every_thread)
{
    char err[512];
    hid_t f = io_h5_create(tmp_path("first.h5"), err, sizeof err); /* main thread first */
    ck_assert_int_eq(io_h5_close(f, tmp_path("first.h5"), err, sizeof err), 0);
    thread_case t = {.path = tmp_path("garbage.h5"), .stack_left = -1};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, not_hdf5_in_thread, &t), 0);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_int_eq(t.stack_left, 0);
    expect_not_hdf5(t.path, t.err);
}
END_TEST

static void expect_corpus_refused(const char *p, const char *what, const char *detail)
{
    io_corpus *c = NULL;
    char err[512] = "";
    ck_assert_int_ne(io_corpus_open(p, &c, err, sizeof err), 0);
    ck_assert_ptr_null(c);
    expect_error(err, p, what, detail);
}

START_TEST(missing_attribute)
{
    const char *p = tmp_path("no-vocab.h5");
    char err[512];
    hid_t f = corpus_header(p);
    ck_assert_int_eq(io_h5_write_attr_string(f, p, "tokenizer", "t", err, sizeof err), 0);
    int64_t v = 0;
    ck_assert_int_eq(io_h5_read_attr_int(f, p, "vocab_size", &v, err, sizeof err), -1);
    expect_error(err, p, "reading attribute \"vocab_size\"", "can't locate attribute");
    H5Fclose(f);
    expect_corpus_refused(p, "reading attribute \"vocab_size\"", "can't locate attribute");

    f = io_h5_create(p, err, sizeof err); /* no format at all: not ours */
    H5Fclose(f);
    expect_corpus_refused(p, "not a burstengine corpus: reading attribute \"format\"",
                          "can't locate attribute");
}
END_TEST

START_TEST(attribute_of_the_wrong_type)
{
    const char *p = tmp_path("wrong.h5");
    char err[512], s[32];
    hid_t f = corpus_header(p);
    ck_assert_int_eq(io_h5_write_attr_string(f, p, "vocab_size", "100", err, sizeof err), 0);
    ck_assert_int_eq(io_h5_write_attr_int(f, p, "tokenizer", H5T_STD_I32LE, 1, err, sizeof err),
                     0);
    write_pair_attr(f, "pair");
    ck_assert_int_eq(io_h5_read_attr_string(f, p, "tokenizer", s, sizeof s, err, sizeof err), -1);
    expect_error(err, p, "reading attribute \"tokenizer\"", "holds an integer, not a string");
    int64_t v = 0;
    ck_assert_int_eq(io_h5_read_attr_int(f, p, "pair", &v, err, sizeof err), -1);
    expect_error(err, p, "reading attribute \"pair\"", "holds 2 values, not one");
    ck_assert_int_eq(io_h5_write_attr_int(f, p, "pair", H5T_STD_I32LE, 1, err, sizeof err), -1);
    expect_error(err, p, "writing attribute \"pair\"", "already exists");
    H5Fclose(f);
    expect_corpus_refused(p, "reading attribute \"vocab_size\"", "holds a string, not an integer");
}
END_TEST

START_TEST(missing_dataset)
{
    const char *p = tmp_path("c.h5");
    char err[512];
    io_corpus_writer *w = io_corpus_create(p, 16, 10, "t", err, sizeof err);
    ck_assert_msg(w && io_corpus_commit(w, err, sizeof err) == 0, "%s", err);
    int64_t *data = NULL, rows, cols;
    ck_assert_int_eq(io_read_int64_dataset(p, "/answers", &data, &rows, &cols, err, sizeof err),
                     -1);
    expect_error(err, p, "opening dataset /answers", "doesn't exist");
    ck_assert_ptr_null(data);
}
END_TEST

/* DIR/step-1/model.h5 in the checkpoint format whose attribute "step" is
 * missing or a string. */
START_TEST(checkpoint_attributes)
{
    char ck[600], model[700], err[512];
    snprintf(ck, sizeof ck, "%s/step-1", dir);
    snprintf(model, sizeof model, "%s/model.h5", ck);
    ck_assert_int_eq(mkdir(ck, 0777), 0);
    for (int as_string = 0; as_string < 2; as_string++) {
        hid_t f = io_h5_create(model, err, sizeof err);
        ck_assert_msg(f >= 0 &&
                          io_h5_write_format(f, model, "burstengine-checkpoint", 1, err,
                                             sizeof err) == 0 &&
                          (!as_string ||
                           io_h5_write_attr_string(f, model, "step", "1", err, sizeof err) == 0),
                      "%s", err);
        H5Fclose(f);
        io_ckpt_meta meta;
        ck_assert_int_eq(io_checkpoint_read_model(dir, 1, NULL, &meta, NULL, err, sizeof err), -1);
        expect_error(err, model, "reading attribute \"step\"",
                     as_string ? "holds a string, not an integer" : "can't locate attribute");
    }
    write_garbage(model);
    io_ckpt_meta meta;
    ck_assert_int_eq(io_checkpoint_read_model(dir, 1, NULL, &meta, NULL, err, sizeof err), -1);
    expect_error(err, model, "opening as HDF5", "signature");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("h5util");
    TCase *tc = check_tcase(s, "h5util", 60);
    tcase_add_checked_fixture(tc, setup, teardown);
    check_add_tests(tc, attributes_round_trip, not_an_hdf5_file, quiet_in_every_thread,
                    missing_attribute, attribute_of_the_wrong_type, missing_dataset,
                    checkpoint_attributes);
    return check_run(s);
}
