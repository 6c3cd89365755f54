/* resume.c (tests/train/test_train): a resume continues bit for bit
 * (synthetic data, a shuffled corpus) and refuses a checkpoint of another
 * configuration or sampler, naming what differs. */
#include "config.h"

#include <check.h>
#include <hdf5.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "io/h5util.h"
#include "tests/lib/check_main.h"
#include "tests/train/engine/fixture.h"

/* Swaps the 8-byte attribute `name` of file (of HDF5 type `type`) with *value,
 * in place: a test's tampering, which io/ never does to a checkpoint. */
static void swap_attribute(const char *file, const char *name, hid_t type, void *value)
{
    char err[512];
    hid_t f = io_h5_open(file, H5F_ACC_RDWR, err, sizeof err);
    ck_assert_msg(f >= 0, "%s", err);
    hid_t a = H5Aopen(f, name, H5P_DEFAULT);
    if (a < 0) io_h5_fail(err, sizeof err, file, "opening attribute \"%s\"", name);
    ck_assert_msg(a >= 0, "%s", err);
    unsigned char old[8];
    ck_assert(H5Aread(a, type, old) >= 0 && H5Awrite(a, type, value) >= 0);
    memcpy(value, old, sizeof old);
    ck_assert(H5Aclose(a) >= 0 && H5Fclose(f) >= 0);
}

START_TEST(resume_continues_bit_for_bit)
{
    char dir[512], dir_set[600], model[600];
    checkpoint_dir("ckpt", dir, dir_set);
    snprintf(model, sizeof model, "%s/step-3/model.h5", dir);
    /* keys that change the numbers are refused, each named with both values;
     * the checkpoint is left whole by every refusal */
    const char *const refused[][2] = {
        {"model.d_model=128", "was written with [model] d_model = 64, this run has 128"},
        {"data.data_seed=7", "was written with [data] data_seed = 1, this run has 7"},
        {"train.steps=8", "was written with [train] steps = 6, this run has 8"},
        {"train.lr=0.02", "was written with [train] lr = 0.01, this run has 0.02"},
        {NULL, NULL}};
    const char *sets[] = {"parallel.cp=2", dir_set, "train.keep_checkpoints=1", NULL};
    expect_resume_bit_for_bit(2, sets, dir, refused);
    /* another split of the world, and another world */
    const char *contiguous[] = {"parallel.cp=2", dir_set, "parallel.layout=contiguous",
                                "memory.attn_kept_fraction=1", NULL};
    expect_resume_refused(2, contiguous, "[parallel] layout = auto, this run has contiguous");
    const char *one[] = {"parallel.cp=1", dir_set, NULL};
    expect_resume_refused(1, one, "was written with [parallel] cp = 2, this run has 1");
    /* a sampler position or an RNG state that this configuration does not
     * reach after step 6 is refused, naming it */
    int64_t position = 0;
    uint64_t state = 99;
    snprintf(model, sizeof model, "%s/step-6/model.h5", dir);
    swap_attribute(model, "sample_position", H5T_NATIVE_INT64, &position);
    ck_assert_int_eq(position, 6); /* (step 7 - 1) * dp 1 * micro-batches 1 */
    const char *again[] = {"parallel.cp=2", dir_set, "train.steps=6", NULL};
    expect_resume_refused(2, again, "sample_position = 0, this run continues at sample 6");
    swap_attribute(model, "sample_position", H5T_NATIVE_INT64, &position);
    swap_attribute(model, "rng_state", H5T_NATIVE_UINT64, &state);
    ck_assert_uint_eq(state, 1); /* [data] data_seed */
    expect_resume_refused(2, again, "rng_state = 99, this run has [data] data_seed = 1");
    swap_attribute(model, "rng_state", H5T_NATIVE_UINT64, &state);
    ck_assert_int_eq(test_remove_tree(dir), 0);
}
END_TEST

/* Shuffled windows of a corpus, two data-parallel groups of two micro-batches:
 * the resumed run reads the samples the uninterrupted one read at steps 4..6
 * (a sampler restarted at sample 0 would not), and a resume under another
 * sampling or data seed is refused. */
START_TEST(resume_continues_a_shuffled_corpus_bit_for_bit)
{
    char corpus[512], path_set[600], dir[512], dir_set[600];
    snprintf(corpus, sizeof corpus, "%s/resume.h5", train_tmpdir);
    synth("passkey", "256", "40", "3", corpus);
    snprintf(path_set, sizeof path_set, "data.path=%s", corpus);
    checkpoint_dir("ckpt-corpus", dir, dir_set);
    const char *const refused[][2] = {
        {"data.sampling=sequential", "was written with [data] sampling = shuffled, this run has "
                                     "sequential"},
        {"data.data_seed=1", "was written with [data] data_seed = 123456789, this run has 1"},
        {"train.micro_batches=1", "was written with [train] micro_batches = 2, this run has 1"},
        {NULL, NULL}};
    const char *sets[] = {"parallel.dp=2",
                          "parallel.cp=1",
                          "train.micro_batches=2",
                          "data.source=hdf5",
                          path_set,
                          "data.sampling=shuffled",
                          "data.data_seed=123456789",
                          dir_set,
                          NULL};
    expect_resume_bit_for_bit(2, sets, dir, refused);
    ck_assert_int_eq(test_remove_tree(dir), 0);
    unlink(corpus);
}
END_TEST

void add_resume_tests(TCase *tc)
{
    check_add_tests(tc, resume_continues_bit_for_bit,
                    resume_continues_a_shuffled_corpus_bit_for_bit);
}
