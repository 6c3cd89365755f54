/* corpus.c (tests/train/test_train): training and evaluation from HDF5
 * corpora, with documents; a file that is not a corpus, or one without
 * document boundaries, refused and named; a sample of the eval corpus that
 * one rank cannot read ends every rank with an error naming the file. */
#define _GNU_SOURCE
#include "config.h"

#include <check.h>
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "io/h5util.h"
#include "tests/lib/check_main.h"
#include "tests/train/engine/fixture.h"

START_TEST(trains_from_an_hdf5_corpus)
{
    char corpus[512], eval[512], path_set[600], eval_set[600];
    snprintf(corpus, sizeof corpus, "%s/train.h5", train_tmpdir);
    snprintf(eval, sizeof eval, "%s/eval.h5", train_tmpdir);
    synth("passkey", "256", "12", "1", corpus);
    synth("passkey", "256", "12", "2", eval);
    snprintf(path_set, sizeof path_set, "data.path=%s", corpus);
    snprintf(eval_set, sizeof eval_set, "eval.eval_path=%s", eval);
    const char *sets[] = {"parallel.cp=2",       "data.source=hdf5",       path_set, eval_set,
                          "eval.eval_samples=8", "data.sampling=shuffled", NULL};
    curve c;
    test_run_result r = train_args(2, 1, sets, NULL, &c, NULL, 0);
    ck_assert_msg(r.exit_code == 0 && c.n == 6 && isfinite(c.loss[5]), "%s", r.out);
    ck_assert_msg(test_output_has(&r, "eval: passkey retrieval accuracy "), "%s", r.out);
    ck_assert_msg(test_output_has(&r, "over 8 held-out samples"), "%s", r.out);
    test_run_free(&r);
    /* a file that is not a corpus is refused before any work, and named */
    char bad[512], bad_set[600];
    snprintf(bad, sizeof bad, "%s/not-a-corpus.h5", train_tmpdir);
    FILE *f = fopen(bad, "w");
    fputs("garbage", f);
    fclose(f);
    snprintf(bad_set, sizeof bad_set, "data.path=%s", bad);
    const char *bad_sets[] = {"parallel.cp=2", "data.source=hdf5", bad_set, NULL};
    r = train_args(2, 1, bad_sets, NULL, NULL, NULL, 0);
    ck_assert_msg(r.exit_code == 2 && test_output_has(&r, bad), "%s", r.out);
    test_run_free(&r);
    unlink(bad), unlink(corpus), unlink(eval);
}
END_TEST

/* A corpus of 32-token documents (samples of --seq-len 31): every window of
 * 257 tokens holds 8 document starts after its first token, so 248 of its 256
 * tokens have a label. Two ranks give the single rank's losses, evaluation
 * (within the eval corpus's documents) included; a corpus without document
 * boundaries is refused, and named. */
START_TEST(documents_from_an_hdf5_corpus)
{
    char corpus[512], eval[512], text[512], flat[512], path_set[600], eval_set[600], flat_set[600];
    snprintf(corpus, sizeof corpus, "%s/docs.h5", train_tmpdir);
    snprintf(eval, sizeof eval, "%s/docs-eval.h5", train_tmpdir);
    synth("copy", "31", "64", "1", corpus);
    synth("passkey", "256", "4", "2", eval);
    snprintf(path_set, sizeof path_set, "data.path=%s", corpus);
    snprintf(eval_set, sizeof eval_set, "eval.eval_path=%s", eval);
    const char *docs[] = {"data.source=hdf5",
                          path_set,
                          "parallel.mask=document",
                          "memory.attn_kept_fraction=1",
                          eval_set,
                          "eval.eval_samples=4",
                          NULL};
    curve one, other;
    run_saying(1, 1, with(docs, (const char *[]){"parallel.cp=1", NULL}), "over 4 held-out samples",
               &one);
    for (int i = 0; i < one.n; i++)
        ck_assert_msg(one.tokens[i] == 248, "step %d: %.0f labelled tokens, not 256 - 8", i + 1,
                      one.tokens[i]);
    run_saying(2, 1, with(docs, (const char *[]){"parallel.cp=2", NULL}), "over 4 held-out samples",
               &other);
    expect_same(&one, &other, 1e-4, "HDF5 documents, P=2 vs P=1");

    snprintf(text, sizeof text, "%s/plain.txt", train_tmpdir);
    snprintf(flat, sizeof flat, "%s/plain.h5", train_tmpdir);
    FILE *f = fopen(text, "w");
    for (int i = 0; i < 40; i++) fputs("no documents here\n", f);
    fclose(f);
    char *import[] = {
        (char *)test_burst_path(), "data", "import", "--from", "text", text, "-o", flat, NULL};
    test_run_result r = test_run(import, NULL);
    ck_assert_msg(r.exit_code == 0, "%s", r.out);
    test_run_free(&r);
    snprintf(flat_set, sizeof flat_set, "data.path=%s", flat);
    const char *flat_sets[] = {"data.source=hdf5", flat_set, "parallel.mask=document",
                               "memory.attn_kept_fraction=1", NULL};
    r = train(1, 1, flat_sets, NULL, NULL);
    ck_assert_msg(r.exit_code == 2 && test_output_has(&r, flat) &&
                      test_output_has(&r, "no /doc_offsets"),
                  "exit %d:\n%s", r.exit_code, r.out);
    ck_assert_msg(!test_output_has(&r, "step "), "training started:\n%s", r.out);
    test_run_free(&r);
    unlink(corpus), unlink(eval), unlink(text), unlink(flat);
}
END_TEST

/* Overwrites token pos of the corpus at path with value, through HDF5 itself
 * (the corpus writer refuses a token beyond the vocabulary). */
static void poke_token(const char *path, hsize_t pos, unsigned value)
{
    char err[512] = "";
    hid_t f = io_h5_open(path, H5F_ACC_RDWR, err, sizeof err);
    hid_t d = f < 0 ? -1 : io_h5_open_dataset(f, path, "tokens", H5P_DEFAULT, err, sizeof err);
    hid_t fs = d < 0 ? -1 : H5Dget_space(d);
    hsize_t one = 1;
    hid_t ms = H5Screate_simple(1, &one, NULL);
    if (fs >= 0 && (H5Sselect_hyperslab(fs, H5S_SELECT_SET, &pos, NULL, &one, NULL) < 0 ||
                    H5Dwrite(d, H5T_NATIVE_UINT, ms, fs, H5P_DEFAULT, &value) < 0))
        io_h5_fail(err, sizeof err, path, "writing token %llu", (unsigned long long)pos);
    ck_assert_msg(fs >= 0 && !err[0], "%s", err);
    H5Sclose(ms), H5Sclose(fs), H5Dclose(d), H5Fclose(f);
}

START_TEST(eval_read_failure_on_one_rank_stops_every_rank)
{
    char eval[512], eval_set[600];
    snprintf(eval, sizeof eval, "%s/eval-bad.h5", train_tmpdir);
    synth("passkey", "256", "4", NULL, eval);
    /* zigzag over 2 ranks: rank 0 reads tokens [0, 65) and [192, 257) of a
     * sample, rank 1 [64, 193); token 100 of sample 0 is rank 1's alone */
    poke_token(eval, 100, 256);
    snprintf(eval_set, sizeof eval_set, "eval.eval_path=%s", eval);
    const char *sets[] = {"parallel.cp=2", "parallel.layout=zigzag", eval_set, NULL};
    test_run_result r = train(2, 1, sets, NULL, NULL);
    ck_assert_msg(r.exit_code == 1, "exit %d:\n%s", r.exit_code, r.out);
    ck_assert_msg(test_output_has(&r, "[1] burst train: ") &&
                      test_output_has(&r, "beyond vocab_size"),
                  "rank 1 does not say why it could not read:\n%s", r.out);
    /* every rank ends with an error naming the file; rank 0 names rank 1 */
    for (int k = 0; k < 2; k++) {
        char want[700];
        snprintf(want, sizeof want, "[%d] burst train: rank %d: evaluation: %s: ", k, k, eval);
        const char *line = strstr(r.out, want);
        ck_assert_msg(line, "missing '%s':\n%s", want, r.out);
        if (k == 0) {
            const char *end = strchr(line, '\n');
            ck_assert_msg(end && memmem(line, (size_t)(end - line), "rank 1 ", 7),
                          "rank 0 does not name rank 1:\n%s", r.out);
        }
    }
    ck_assert_msg(!test_output_has(&r, "timed out"), "a transport timeout:\n%s", r.out);
    test_run_free(&r);
    unlink(eval);
}
END_TEST

void add_corpus_tests(TCase *tc)
{
    check_add_tests(tc, trains_from_an_hdf5_corpus, documents_from_an_hdf5_corpus,
                    eval_read_failure_on_one_rank_stops_every_rank);
}
