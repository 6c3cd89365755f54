/* test_train.c: the training engine, with real ranks under `burst run`, one
 * suite in parts by concern (tests/train/engine/): the ranks (ranks.c:
 * gradients against finite differences, and the same losses on any number of
 * ranks, under every mask, ring and backward), the steps (steps.c:
 * non-finite gradients, a loss that falls, settings refused before any work),
 * resumes (resume.c), HDF5 corpora (corpus.c) and the ZeRO stages (zero.c:
 * gradients sharded train as they are not), on the runs and expectations of
 * fixture.h; the device's parts (device*.c) are the test_train_device*
 * programs'. Losses, labelled
 * tokens, ring bytes, attention pairs and FLOPs are read from the JSON-lines
 * metrics each run writes. Every rank runs one OpenMP thread: more threads
 * than cores, spinning, would make a multi-rank run crawl. */
#include "config.h"

#include <check.h>

#include "tests/lib/check_main.h"
#include "tests/train/engine/fixture.h"

static void add_train_tests(Suite *s)
{
    TCase *tc = check_tcase(s, "train", 900);
    add_rank_tests(tc);
    add_step_tests(tc);
    add_resume_tests(tc);
    add_corpus_tests(tc);
    add_zero_tests(tc);
    add_ulysses_tests(check_tcase(s, "ulysses", 900));
}

int main(void)
{
    return train_suite_main("train", "burst-train", add_train_tests);
}
