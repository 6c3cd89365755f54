/* fixture.h: what the parts of tests/train/test_train and of the
 * test_train_device suites share: runs of
 * `burst run ... burst train` on real ranks (or of burst linked with the
 * device emulator), the curve of losses and counts each run's JSON-lines
 * metrics give, and the expectations several parts make of those curves:
 * the same curve, time in the rings, a resume that continues bit for bit. */
#ifndef BURST_TESTS_TRAIN_ENGINE_FIXTURE_H
#define BURST_TESTS_TRAIN_ENGINE_FIXTURE_H

#include <check.h>
#include <stddef.h>

#include "tests/lib/testutil.h"

enum { MAX_STEPS = 64 };

typedef struct {
    int n;
    double loss[MAX_STEPS], grad_norm[MAX_STEPS];
    double tokens[MAX_STEPS], attn_bytes[MAX_STEPS]; /* labelled tokens, ring bytes sent */
    double attn_pairs[MAX_STEPS], flops[MAX_STEPS];  /* pairs the mask allowed, FLOPs counted */
    double attn_s[MAX_STEPS], exposed_s[MAX_STEPS];  /* ring time, exposed communication */
    double reduce_s[MAX_STEPS], gather_s[MAX_STEPS]; /* ZeRO's reductions and gathers */
    double offload_s[MAX_STEPS];                     /* waiting for offloaded activations */
} curve;

/* One OpenMP thread per rank: more threads than cores, spinning, would make
 * a multi-rank run crawl. */
extern char *one_thread[];
/* The environment of the runs: one_thread, and where a test says so,
 * emulated nodes of 4 GPUs (the device index of rank r is its local rank). */
extern char **run_env;
/* The suite's temporary directory (made and removed by main). */
extern char train_tmpdir[256];
/* Set: the runs use burst linked with the device emulator
 * (tests/train/burst_emu), for [train] device = cuda. */
extern int on_emulator;

/* The engine on the (emulated) device: every buffer of the model, the ring
 * and the optimizer in device memory, the transport staging device buffers
 * between ranks. Against the CPU engine, step by step, within what bf16
 * attention moves (the device's tensor cores round Q, K, V, P and dS to bf16;
 * the host computes in fp32). Sequences of 64 tokens: the emulator runs every
 * kernel thread by thread on the CPU, so each comparison is a test of its
 * own, under its own timeout. on_device: the sets of such a run; on_cpu:
 * the CPU engine's run of the same tokens. */
extern const char *const on_device[];
extern const char *const on_cpu[];
/* Kernels queued on their streams like copies (emu/simt/simt_stream.h):
 * work the engine did not order after what it reads would read old data. */
extern char *deferred[];

/* The steps of a run (train_args' base): 6; on the emulated device of the
 * sanitizer build 4, the fewest that still take a run through its warm-up,
 * the decay after it, a stop after step 3 and the resume of step 4. There
 * the emulator runs every kernel several times slower, and the suites look
 * for memory and undefined-behaviour bugs, which 4 steps find as 6 do; the
 * CUDA build runs the 6. */
int run_steps(void);
/* The program the ranks run: burst, or burst_emu under on_emulator. */
const char *train_program(void);
/* burst run -n ranks [--nodes nodes] -- burst train --set ... (sets and args:
 * NULL-terminated); the curve of its metrics into *out and their text into
 * metrics_text when given. */
test_run_result train_args(int ranks, int nodes, const char *const *sets, const char *const *args,
                           curve *out, char *metrics_text, size_t metrics_len);
/* The same, with --inject-nan inject when inject is given. */
test_run_result train(int ranks, int nodes, const char *const *sets, const char *inject,
                      curve *out);
/* Runs a and b logged run_steps() steps of the same labelled tokens and attention pairs,
 * and losses within tol (gradient norms within 10 tol), relative. */
void expect_same(const curve *a, const curve *b, double tol, const char *what);
/* Runs a and b logged the same steps (at least 4), with losses and
 * gradient norms within tol of each other, relative (0: the same bits). */
void expect_close(const curve *a, const curve *b, double tol, const char *what);
/* A run that must succeed; its output must hold `says` when given. */
void run_saying(int ranks, int nodes, const char *const *sets, const char *says, curve *c);
void run_ok(int ranks, int nodes, const char *const *sets, curve *c);
/* The temporary checkpoint directory `name` in the suite's (dir [512]) and
 * the setting that names it (set [600]). */
void checkpoint_dir(const char *name, char *dir, char *set);
/* The sets of a run: base (NULL-terminated) followed by more (idem). */
const char *const *with(const char *const *base, const char *const *more);
/* Every step spent time in the rings and waited for no more than that. */
void expect_ring_times(const curve *c, const char *what);
/* Resuming with sets on `ranks` ranks is refused with exit 2 and want. */
void expect_resume_refused(int ranks, const char *const *sets, const char *want);
/* A stop after step 3 and a resume continue the uninterrupted losses bit for
 * bit (steps 4 to run_steps()); refused: [setting, message] pairs a resume refuses first (NULL-ended). */
void expect_resume_bit_for_bit(int ranks, const char *const *sets, const char *dir,
                               const char *const (*refused)[2]);
/* A run of sets stopped after step 3 (checkpointing where sets say) and
 * resumed with moved (other settings, the same directory) continues whole,
 * the uninterrupted curve of sets, within tol. */
void expect_moved_resume(int ranks, const char *const *sets, const char *const *moved,
                         const curve *whole, double tol, const char *what);
/* burst data synth --task TASK --seq-len N --samples S [--seed SEED] -o OUT
 * (seed NULL: the command's default), which must succeed. */
void synth(const char *task, const char *seq_len, const char *samples, const char *seed,
           const char *out);

/* The tests of each part, added to the suite's test case tc in the order
 * they run: the ranks (ranks.c), the steps (steps.c), resumes (resume.c),
 * HDF5 corpora (corpus.c), the ZeRO stages (zero.c); the device's
 * (device.c), its host keys (device_host.c), its memory (device_memory.c) and
 * the device's over the model of NCCL (device_nccl.c) in suites of their own. */
void add_rank_tests(TCase *tc);
void add_ulysses_tests(TCase *tc); /* [parallel] ulysses: a case of its own (CK_RUN_CASE=ulysses) */
void add_step_tests(TCase *tc);
void add_resume_tests(TCase *tc);
void add_corpus_tests(TCase *tc);
void add_zero_tests(TCase *tc);
void add_device_tests(Suite *s);
void add_device_host_tests(Suite *s);
void add_device_memory_tests(Suite *s);
void add_device_nccl_tests(Suite *s);

/* The main of each suite program: the suite `name` of the tests `add` adds,
 * run in a temporary directory (train_tmpdir) whose name starts with
 * tmp_prefix, removed after; the program's exit status. */
int train_suite_main(const char *name, const char *tmp_prefix, void (*add)(Suite *s));

#endif
