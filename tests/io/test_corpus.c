/* test_corpus.c: the HDF5 corpus of io/corpus.c keeps its promises: what is
 * written reads back exactly (uint16 and uint32, across chunk boundaries, at
 * odd offsets and at the end), document offsets and extra datasets survive,
 * bad files are refused with a message naming the file and the problem, and a
 * writer that is aborted or killed never damages the previous file. */
#include <check.h>
#include <fcntl.h>
#include <hdf5.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io/corpus.h"
#include "io/dataset_int64.h"
#include "io/h5util.h"
#include "tests/lib/check_main.h"
#include "tests/lib/testutil.h"

static char dir[256];

static const char *tmp_path(const char *name)
{
    return test_path_in(dir, name);
}

static void setup(void)
{
    ck_assert_ptr_nonnull(test_make_tmpdir(dir, sizeof dir, "burst-test-corpus"));
}

static void teardown(void)
{
    ck_assert_int_eq(test_remove_tree(dir), 0);
}

static int64_t token_at(int64_t i, uint32_t vocab)
{
    return (i * 7919 + i / 3) % vocab;
}

/* Writes n tokens token_at(i) to path; documents every doc_every tokens when > 0. */
static void write_corpus(const char *path, int bits, uint32_t vocab, int64_t n, int64_t doc_every)
{
    char err[512];
    io_corpus_writer *w = io_corpus_create(path, bits, vocab, "test-tok", err, sizeof err);
    ck_assert_msg(w != NULL, "%s", err);
    int64_t buf[1000];
    for (int64_t at = 0; at < n;) {
        int64_t cnt = n - at < 997 ? n - at : 997; /* odd pieces across chunks */
        if (doc_every > 0) {
            int64_t to_doc = doc_every - at % doc_every;
            if (to_doc < cnt) cnt = to_doc;
        }
        for (int64_t i = 0; i < cnt; i++) buf[i] = token_at(at + i, vocab);
        ck_assert_msg(io_corpus_append(w, buf, cnt, err, sizeof err) == 0, "%s", err);
        at += cnt;
        if (doc_every > 0 && at % doc_every == 0)
            ck_assert_int_eq(io_corpus_mark_document(w, err, sizeof err), 0);
    }
    ck_assert_msg(io_corpus_commit(w, err, sizeof err) == 0, "%s", err);
}

static void check_range(io_corpus *c, int64_t begin, int64_t count)
{
    char err[512];
    int64_t *t = malloc((size_t)(count > 0 ? count : 1) * sizeof *t);
    ck_assert_msg(io_corpus_read(c, begin, count, t, err, sizeof err) == 0, "%s", err);
    for (int64_t i = 0; i < count; i++)
        ck_assert_int_eq(t[i], token_at(begin + i, io_corpus_vocab(c)));
    free(t);
}

static void round_trip(int bits, uint32_t vocab)
{
    const int64_t n = ((int64_t)1 << 20) + 12345; /* more than one chunk */
    const char *p = tmp_path("rt.h5");
    write_corpus(p, bits, vocab, n, 0);
    io_corpus *c = NULL;
    char err[512];
    ck_assert_msg(io_corpus_open(p, &c, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(io_corpus_n_tokens(c), n);
    ck_assert_uint_eq(io_corpus_vocab(c), vocab);
    ck_assert_str_eq(io_corpus_tokenizer(c), "test-tok");
    ck_assert_str_eq(io_corpus_path(c), p);
    ck_assert_int_eq(io_corpus_n_docs(c), 0);
    check_range(c, 0, 1);
    check_range(c, 3, 1001);
    check_range(c, ((int64_t)1 << 20) - 17, 333); /* across the chunk boundary */
    check_range(c, n - 5, 5);                     /* the end */
    check_range(c, n, 0);
    check_range(c, 0, n);
    int64_t t[2];
    ck_assert_int_ne(io_corpus_read(c, n - 1, 2, t, err, sizeof err), 0);
    ck_assert_ptr_nonnull(strstr(err, "outside"));
    ck_assert_int_ne(io_corpus_read(c, -1, 1, t, err, sizeof err), 0);
    io_corpus_close(c);
}

START_TEST(round_trip_uint16)
{
    round_trip(16, 50257);
}
END_TEST

START_TEST(round_trip_uint32)
{
    round_trip(32, 128256);
}
END_TEST

START_TEST(small_and_empty)
{
    const char *p = tmp_path("small.h5");
    write_corpus(p, 16, 256, 7, 0);
    io_corpus *c = NULL;
    char err[512];
    ck_assert_msg(io_corpus_open(p, &c, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(io_corpus_n_tokens(c), 7);
    check_range(c, 2, 5);
    io_corpus_close(c);
    write_corpus(p, 32, 10, 0, 0);
    ck_assert_msg(io_corpus_open(p, &c, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(io_corpus_n_tokens(c), 0);
    io_corpus_close(c);
}
END_TEST

START_TEST(doc_offsets)
{
    const char *p = tmp_path("docs.h5");
    write_corpus(p, 16, 1000, 10000, 1500); /* docs at 0, 1500, ..., 9000; final mark dropped */
    io_corpus *c = NULL;
    char err[512];
    ck_assert_msg(io_corpus_open(p, &c, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(io_corpus_n_docs(c), 7);
    int64_t off[7];
    ck_assert_msg(io_corpus_doc_offsets(c, off, err, sizeof err) == 0, "%s", err);
    for (int i = 0; i < 7; i++) ck_assert_int_eq(off[i], 1500 * i);
    io_corpus_close(c);
}
END_TEST

START_TEST(put_int64)
{
    const char *p = tmp_path("ans.h5");
    char err[512];
    io_corpus_writer *w = io_corpus_create(p, 16, 100, "x", err, sizeof err);
    ck_assert_ptr_nonnull(w);
    int64_t tok[4] = {1, 2, 3, 99}, ans[6] = {0, 5, -7, 1, (int64_t)1 << 40, 3};
    ck_assert_int_eq(io_corpus_append(w, tok, 4, err, sizeof err), 0);
    ck_assert_msg(io_corpus_put_int64(w, "/answers", ans, 2, 3, err, sizeof err) == 0, "%s", err);
    ck_assert_int_ne(io_corpus_put_int64(w, "/answers", ans, 2, 3, err, sizeof err), 0);
    ck_assert_int_ne(io_corpus_put_int64(w, "tokens", ans, 2, 3, err, sizeof err), 0);
    ck_assert_int_eq(io_corpus_commit(w, err, sizeof err), 0);
    int64_t *back = NULL, rows = 0, cols = 0;
    ck_assert_msg(io_read_int64_dataset(p, "/answers", &back, &rows, &cols, err, sizeof err) == 0,
                  "%s", err);
    ck_assert(rows == 2 && cols == 3);
    for (int i = 0; i < 6; i++) ck_assert_int_eq(back[i], ans[i]);
    free(back);
}
END_TEST

/* A hand-made file: attributes as given, /tokens of type ttype (or none). */
static unsigned make_vocab = 100;
static void make_file(const char *path, const char *format, int version, hid_t ttype)
{
    char err[512] = "";
    hid_t f = io_h5_create(path, err, sizeof err);
    ck_assert_msg(f >= 0 && io_h5_write_format(f, path, format, version, err, sizeof err) == 0 &&
                      io_h5_write_attr_string(f, path, "tokenizer", format, err, sizeof err) == 0 &&
                      io_h5_write_attr_int(f, path, "vocab_size", H5T_STD_U32LE, make_vocab, err,
                                           sizeof err) == 0,
                  "%s", err);
    if (ttype >= 0) {
        hsize_t n = 4;
        hid_t s = H5Screate_simple(1, &n, NULL);
        hid_t d = H5Dcreate2(f, "tokens", ttype, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        double v[4] = {1, 2, 3, 4};
        H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
        H5Dclose(d);
        H5Sclose(s);
    }
    H5Fclose(f);
}

static void expect_refusal(const char *path, const char *problem)
{
    io_corpus *c = NULL;
    char err[512] = "";
    ck_assert_int_ne(io_corpus_open(path, &c, err, sizeof err), 0);
    ck_assert_ptr_null(c);
    ck_assert_msg(strstr(err, path) != NULL, "error does not name the file: %s", err);
    ck_assert_msg(strstr(err, problem) != NULL, "error does not say '%s': %s", problem, err);
}

START_TEST(refusals)
{
    io_h5_quiet();
    const char *p = tmp_path("bad.h5");
    make_file(p, IO_CORPUS_FORMAT, 1, H5T_STD_U16LE);
    io_corpus *c = NULL;
    char err[512];
    ck_assert_msg(io_corpus_open(p, &c, err, sizeof err) == 0, "hand-made file: %s", err);
    io_corpus_close(c);
    make_file(p, IO_CORPUS_FORMAT, 1, -1);
    expect_refusal(p, "no dataset /tokens");
    make_file(p, IO_CORPUS_FORMAT, 1, H5T_IEEE_F32LE);
    expect_refusal(p, "not an integer");
    make_file(p, IO_CORPUS_FORMAT, 1, H5T_STD_I32LE);
    expect_refusal(p, "signed");
    make_file(p, IO_CORPUS_FORMAT, 1, H5T_STD_U64LE);
    expect_refusal(p, "64-bit");
    make_file(p, "something-else", 1, H5T_STD_U16LE);
    expect_refusal(p, "format");
    make_file(p, IO_CORPUS_FORMAT, 2, H5T_STD_U16LE);
    expect_refusal(p, "format_version is 2");
    expect_refusal(tmp_path("missing.h5"), "cannot read");

    FILE *g = fopen(p, "w");
    for (int i = 0; i < 5000; i++) fputc((i * 131) & 0xff, g);
    fclose(g);
    expect_refusal(p, "not an HDF5 file");
}
END_TEST

START_TEST(tokens_beyond_vocab)
{
    io_h5_quiet();
    const char *p = tmp_path("beyond.h5");
    make_vocab = 3; /* the tokens are 1 2 3 4 */
    make_file(p, IO_CORPUS_FORMAT, 1, H5T_STD_U32LE);
    make_vocab = 100;
    io_corpus *c = NULL;
    char err[512];
    ck_assert_msg(io_corpus_open(p, &c, err, sizeof err) == 0, "%s", err);
    int64_t t[4];
    ck_assert_int_eq(io_corpus_read(c, 0, 2, t, err, sizeof err), 0);
    ck_assert_int_ne(io_corpus_read(c, 1, 3, t, err, sizeof err), 0);
    ck_assert_msg(strstr(err, "token 3 at position 2 is beyond vocab_size 3") && strstr(err, p),
                  "%s", err);
    io_corpus_close(c);
    const char *burst = getenv("BURST");
    if (burst) { /* burst data validate counts them and fails */
        char cmd[1400];
        snprintf(cmd, sizeof cmd, "'%s' data validate '%s' > '%s' 2>&1", burst, p,
                 tmp_path("out.txt"));
        int st = system(cmd);
        ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1);
        FILE *f = fopen(tmp_path("out.txt"), "r");
        char out[1024] = "";
        size_t got = fread(out, 1, sizeof out - 1, f);
        out[got] = 0;
        fclose(f);
        ck_assert_msg(strstr(out, "2 tokens beyond vocab_size 3 (first at position 2)"), "%s", out);
    }
}
END_TEST

START_TEST(truncated)
{
    const char *p = tmp_path("trunc.h5");
    write_corpus(p, 32, 70000, 300000, 1000);
    int fd = open(p, O_RDONLY);
    off_t size = lseek(fd, 0, SEEK_END);
    close(fd);
    /* Cut at many places: every cut must be refused on open or on read, cleanly. */
    for (int k = 1; k < 16; k++) {
        write_corpus(p, 32, 70000, 300000, 1000);
        ck_assert_int_eq(truncate(p, size * k / 16), 0);
        io_corpus *c = NULL;
        char err[512] = "";
        int64_t *t = malloc(300000 * sizeof *t);
        if (io_corpus_open(p, &c, err, sizeof err) == 0) {
            int rc = io_corpus_read(c, 0, io_corpus_n_tokens(c), t, err, sizeof err);
            io_corpus_close(c);
            ck_assert_msg(rc != 0, "cut at %d/16 read without error", k);
        }
        ck_assert_msg(strstr(err, p) != NULL, "error does not name the file: %s", err);
        free(t);
    }
}
END_TEST

START_TEST(append_beyond_vocab)
{
    const char *p = tmp_path("v.h5");
    char err[512];
    io_corpus_writer *w = io_corpus_create(p, 16, 10, "x", err, sizeof err);
    int64_t tok[3] = {1, 10, 2};
    ck_assert_int_ne(io_corpus_append(w, tok, 3, err, sizeof err), 0);
    ck_assert_ptr_nonnull(strstr(err, "token 10"));
    ck_assert_ptr_nonnull(strstr(err, p));
    io_corpus_abort(w);
    ck_assert_int_ne(access(p, F_OK), 0);
    ck_assert_ptr_null(io_corpus_create(p, 16, 70000, "x", err, sizeof err));
    ck_assert_ptr_null(io_corpus_create(p, 8, 10, "x", err, sizeof err));
}
END_TEST

static void expect_good_previous(const char *p)
{
    io_corpus *c = NULL;
    char err[512];
    ck_assert_msg(io_corpus_open(p, &c, err, sizeof err) == 0, "previous file: %s", err);
    ck_assert_int_eq(io_corpus_n_tokens(c), 5000);
    check_range(c, 0, 5000);
    io_corpus_close(c);
}

START_TEST(atomic_abort_and_kill)
{
    const char *p = tmp_path("atomic.h5");
    write_corpus(p, 16, 1000, 5000, 0);
    char err[512];
    io_corpus_writer *w = io_corpus_create(p, 16, 1000, "other", err, sizeof err);
    int64_t tok[4] = {1, 2, 3, 4};
    io_corpus_append(w, tok, 4, err, sizeof err);
    expect_good_previous(p);
    io_corpus_abort(w);
    expect_good_previous(p);

    /* A commit that fails (its temporary file vanished) leaves the previous file. */
    w = io_corpus_create(p, 16, 1000, "other", err, sizeof err);
    io_corpus_append(w, tok, 4, err, sizeof err);
    char tmp0[600];
    snprintf(tmp0, sizeof tmp0, "%s.tmp.%ld", p, (long)getpid());
    ck_assert_int_eq(unlink(tmp0), 0);
    ck_assert_int_ne(io_corpus_commit(w, err, sizeof err), 0);
    ck_assert_ptr_nonnull(strstr(err, p));
    expect_good_previous(p);

    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        io_corpus_writer *cw = io_corpus_create(p, 32, 100000, "child", err, sizeof err);
        int64_t *big = calloc((size_t)3 << 20, sizeof *big);
        if (cw && big) io_corpus_append(cw, big, (int64_t)3 << 20, err, sizeof err);
        kill(getpid(), SIGKILL);
        _exit(0);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    expect_good_previous(p);
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", p, (long)pid);
    ck_assert_int_eq(access(tmp, F_OK), 0); /* the killed writer's leftovers stay beside it */
    unlink(tmp);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("corpus");
    TCase *tc = check_tcase(s, "corpus", 120);
    tcase_add_checked_fixture(tc, setup, teardown);
    check_add_tests(tc, round_trip_uint16, round_trip_uint32, small_and_empty, doc_offsets,
                    put_int64, refusals, tokens_beyond_vocab, truncated, append_beyond_vocab,
                    atomic_abort_and_kill);
    return check_run(s);
}
