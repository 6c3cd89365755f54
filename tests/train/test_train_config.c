/* test_train_config.c: the configuration of `burst train`. The defaults are
 * valid on one rank; the presets have the shapes they claim (the small one has
 * about 25M parameters); keys next to a preset override it wherever they stand
 * in the file; every kind of bad value, unknown key or section, and syntax
 * error fails with a message naming the key and the file's line; `--set`
 * applies and refuses the same way; the printed configuration loads back to
 * the same struct; and the whole-configuration checks (heads dividing, world
 * size, sequence length and layout, checkpoint fraction, data source, where
 * documents come from, the sparse pattern and its number of blocks, the recall
 * task's shape) catch what they should; configuration text in memory loads as
 * a file does; a resumed run is refused exactly the keys that change the
 * numbers, with both values; the key table of doc/TRAINING.md is the one
 * `burst train --list-keys` prints. Files are written in a fresh temporary
 * directory. */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/train/choices.h"
#include "src/train/config.h"
#include "tests/lib/check_main.h"
#include "tests/lib/testutil.h"

static char tmpdir[256];

static void make_tmpdir(void)
{
    ck_assert_ptr_nonnull(test_make_tmpdir(tmpdir, sizeof tmpdir, "burst-cfg"));
}

static void remove_tmpdir(void)
{
    test_remove_tree(tmpdir);
}

/* Writes text to tmpdir/name and returns the path (static buffer). */
static const char *write_file(const char *name, const char *text)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
    return path;
}

static int64_t params(const train_config *c)
{
    int64_t V = c->vocab, D = c->d_model, L = c->layers, Hq = c->n_heads, Hkv = c->n_kv_heads;
    int64_t hd = D / Hq, F = c->d_ff;
    return V * D * (c->tied_embeddings ? 1 : 2) +
           L * (D * (Hq * hd) + 2 * D * (Hkv * hd) + Hq * hd * D + 3 * D * F + 2 * D) + D;
}

START_TEST(defaults_are_valid_on_one_rank)
{
    train_config c;
    char err[512] = "";
    train_config_default(&c);
    ck_assert_int_eq(train_config_validate(&c, 1, err, sizeof err), 0);
    ck_assert_str_eq(train_config_name("model", "preset", c.preset), "tiny");
    ck_assert_int_eq(c.layers, 2);
    ck_assert_int_eq(c.d_model, 64);
    ck_assert_int_eq(c.seq_len, 4096);
    ck_assert_double_eq(c.attn_kept_fraction, TRAIN_KEPT_AUTO);
    ck_assert_int_eq(c.keep_layers, TRAIN_AUTO);
    ck_assert_int_eq(c.layout, LAYOUT_CHOICE_AUTO);
    ck_assert_int_eq(c.mask, MASK_CHOICE_CAUSAL);
    ck_assert_str_eq(c.metrics, "");
    ck_assert_double_eq(c.lr, 3e-3);
    ck_assert_double_eq(c.timeout, 60.0);
    ck_assert_int_eq(c.piece_rows, 0); /* the ring's own choice (ring_piece_rows) */
    ck_assert_double_eq(c.norm_eps, 1e-5);
    ck_assert_double_eq(c.rope_theta, 10000.0); /* the preset's */
    /* Not valid for two ranks with dp = cp = 1. */
    ck_assert_int_eq(train_config_validate(&c, 2, err, sizeof err), -1);
}
END_TEST

/* Everything between the two markers of doc/TRAINING.md, or NULL. */
static char *doc_key_table(void)
{
    const char *srcdir = getenv("BURST_TEST_SRCDIR");
    char path[512];
    snprintf(path, sizeof path, "%s/doc/TRAINING.md", srcdir ? srcdir : ".");
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot read %s", path);
    static const char begin[] = "<!-- begin: output of burst train with list-keys -->\n",
                      end[] = "<!-- end: output of burst train with list-keys -->";
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    char line[4096];
    int inside = 0, seen = 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, end, sizeof end - 1) == 0) inside = 0;
        if (inside) fputs(line, mem);
        if (strcmp(line, begin) == 0) inside = seen = 1;
    }
    fclose(f);
    fclose(mem);
    if (!seen) free(text), text = NULL;
    return text;
}

START_TEST(the_documented_key_table_is_the_programs)
{
    char *listed = NULL, *documented = doc_key_table();
    size_t len = 0;
    FILE *mem = open_memstream(&listed, &len);
    train_config_list_keys(mem);
    fclose(mem);
    ck_assert_msg(documented != NULL, "doc/TRAINING.md has no key table between its markers");
    ck_assert_msg(strcmp(listed, documented) == 0,
                  "doc/TRAINING.md's key table differs from `burst train --list-keys`; "
                  "paste the command's output between the markers");
    /* one row per key, each with a meaning */
    int rows = 0;
    for (const char *p = listed; (p = strstr(p, "\n| `[")) != NULL; p++) {
        rows++;
        const char *eol = strchr(p + 1, '\n');
        ck_assert(eol && eol - p > 20 && memcmp(eol - 4, " | |", 4) != 0);
    }
    ck_assert_int_ge(rows, 60);
    free(listed), free(documented);
}
END_TEST

START_TEST(presets_set_their_dimensions)
{
    train_config c;
    char err[512];
    train_config_default(&c);
    ck_assert_int_lt(params(&c), 1000000); /* the tiny one is tiny */
    ck_assert_int_eq(c.tied_embeddings, 1);

    ck_assert_int_eq(train_config_preset(&c, "7b"), 0);
    ck_assert_int_eq(c.layers, 32);
    ck_assert_int_eq(c.d_model, 4096);
    ck_assert_int_eq(c.n_heads, 32);
    ck_assert_int_eq(c.n_kv_heads, 32);
    ck_assert_int_eq(c.d_ff, 11008);
    ck_assert_int_eq(c.vocab, 32000);
    ck_assert_str_eq(train_config_name("model", "preset", c.preset), "7b");
    ck_assert_int_eq(train_config_preset(&c, "13b"), 0);
    ck_assert_int_eq(c.layers, 40);
    ck_assert_int_eq(c.d_model, 5120);
    ck_assert_int_eq(c.d_ff, 13824);
    ck_assert_int_eq(train_config_preset(&c, "70b"), 0);
    ck_assert_int_eq(c.layers, 80);
    ck_assert_int_eq(c.n_heads, 64);
    ck_assert_int_eq(c.n_kv_heads, 8);
    ck_assert_int_eq(c.d_ff, 28672);
    ck_assert_int_eq(train_config_preset(&c, "llama3-8b"), 0);
    ck_assert_int_eq(c.n_kv_heads, 8);
    ck_assert_int_eq(c.d_ff, 14336);
    ck_assert_int_eq(c.vocab, 128256);
    ck_assert_double_eq(c.rope_theta, 500000.0);
    /* Every preset is a valid model with 8 ranks of context parallelism. */
    const char *names[] = {"tiny", "small", "300m", "1b", "7b", "13b", "70b", "llama3-8b"};
    for (int i = 0; i < 8; i++) {
        train_config p;
        train_config_default(&p);
        ck_assert_int_eq(train_config_preset(&p, names[i]), 0);
        p.cp = 8;
        ck_assert_msg(train_config_validate(&p, 8, err, sizeof err) == 0, "%s: %s", names[i], err);
    }
    /* custom leaves the dimensions; an unknown name is refused. */
    train_config_preset(&c, "tiny");
    c.layers = 5;
    ck_assert_int_eq(train_config_preset(&c, "custom"), 0);
    ck_assert_int_eq(c.layers, 5);
    ck_assert_str_eq(train_config_name("model", "preset", c.preset), "custom");
    ck_assert_int_eq(train_config_preset(&c, "huge"), -1);
    ck_assert_int_eq(c.layers, 5);
}
END_TEST

START_TEST(small_preset_has_about_25m_parameters)
{
    train_config c;
    train_config_default(&c);
    ck_assert_int_eq(train_config_preset(&c, "small"), 0);
    int64_t n = params(&c);
    ck_assert_msg(n >= 20000000 && n <= 30000000, "small has %lld parameters", (long long)n);
}
END_TEST

START_TEST(file_keys_override_the_preset_wherever_they_stand)
{
    make_tmpdir();
    const char *path = write_file("run.ini", "; a run\n"
                                             "[model]\n"
                                             "layers = 3\n"
                                             "preset = small\n"
                                             "tied_embeddings = no\n"
                                             "[parallel]\n"
                                             "cp = 2\n"
                                             "mask = window\n"
                                             "window = 512\n"
                                             "[train]\n"
                                             "lr = 1e-3\n"
                                             "metrics = run/metrics.jsonl\n"
                                             "[memory]\n"
                                             "attn_kept_fraction = 1/2\n"
                                             "fused_head = FALSE\n");
    train_config c;
    char err[512] = "";
    train_config_default(&c);
    int rc = train_config_load(&c, path, err, sizeof err);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_str_eq(train_config_name("model", "preset", c.preset), "small");
    ck_assert_int_eq(c.layers, 3);    /* given before the preset, still wins */
    ck_assert_int_eq(c.d_model, 512); /* from the preset */
    ck_assert_int_eq(c.vocab, 8192);
    ck_assert_int_eq(c.tied_embeddings, 0);
    ck_assert_int_eq(c.cp, 2);
    ck_assert_int_eq(c.mask, MASK_CHOICE_WINDOW);
    ck_assert_int_eq(c.window, 512);
    ck_assert_double_eq(c.lr, 1e-3);
    ck_assert_str_eq(c.metrics, "run/metrics.jsonl");
    ck_assert_double_eq(c.attn_kept_fraction, 0.5);
    ck_assert_int_eq(c.fused_head, 0);
    ck_assert_int_eq(c.steps, 100); /* untouched keys keep their values */
    /* A missing file is an error naming it. */
    char missing[600];
    snprintf(missing, sizeof missing, "%s/none.ini", tmpdir);
    ck_assert_int_eq(train_config_load(&c, missing, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "none.ini"));
    remove_tmpdir();
}
END_TEST

typedef struct {
    const char *text;
    const char *where; /* "run.ini:LINE:" expected in the message */
    const char *what;  /* and this, naming the key */
} bad_file;

static const bad_file bad_files[] = {
    {"[model]\nlayers = 2\nn_heads = x\n", "run.ini:3:", "[model] n_heads = 'x': not an integer"},
    {"[model]\nn_heads = 4x\n", "run.ini:2:", "[model] n_heads = '4x': not an integer"},
    {"[model]\nlayers = 2.5\n", "run.ini:2:", "[model] layers"},
    {"[model]\nlayers = 0\n", "run.ini:2:", "[model] layers = '0': out of range"},
    {"[model]\nd_model = 99999999999\n", "run.ini:2:", "[model] d_model"},
    {"[data]\nseq_len = -4\n", "run.ini:2:", "[data] seq_len"},
    {"[data]\ndata_seed = -1\n", "run.ini:2:", "[data] data_seed"},
    {"[model]\ntied_embeddings = maybe\n", "run.ini:2:", "[model] tied_embeddings = 'maybe'"},
    {"[model]\npreset = huge\n", "run.ini:2:", "[model] preset = 'huge'"},
    {"[parallel]\nmask = full\n", "run.ini:2:", "[parallel] mask = 'full'"},
    {"[parallel]\ndp = 0\n", "run.ini:2:", "[parallel] dp"},
    {"[train]\nlr = fast\n", "run.ini:2:", "[train] lr = 'fast': not a number"},
    {"[train]\nlr = 0\n", "run.ini:2:", "[train] lr"},
    {"[train]\nlr = inf\n", "run.ini:2:", "[train] lr"},
    {"[train]\nbeta2 = 1\n", "run.ini:2:", "[train] beta2"},
    {"[train]\non_nonfinite = ignore\n", "run.ini:2:", "[train] on_nonfinite"},
    {"[memory]\nattn_kept_fraction = 0.25\n", "run.ini:2:", "[memory] attn_kept_fraction = '0.25'"},
    {"[memory]\nhead_chunk = 0\n", "run.ini:2:", "[memory] head_chunk"},
    {"[transport]\nintra = tcp\n", "run.ini:2:", "[transport] intra"},
    {"[transport]\ntimeout = -1\n", "run.ini:2:", "[transport] timeout"},
    {"[model]\nlayers = 2\nn_head = 4\n", "run.ini:3:", "unknown key [model] n_head"},
    {"[model]\nlayers = 2\n[modle]\nlayers = 2\n", "run.ini:3:", "unknown section [modle]"},
    {"[modle]\n", "run.ini:1:", "unknown section [modle]"},
    {"layers = 2\n", "run.ini:1:", "layers"},
    {"[model]\nlayers 2\n", "run.ini:2:", "syntax error"},
    /* The first error in the file is the one reported. */
    {"[model]\nlayers = x\n[train]\nsteps = y\n", "run.ini:2:", "[model] layers"},
    /* A bad preset is reported even though presets are looked at first. */
    {"[model]\nlayers = 2\n\npreset = big\n", "run.ini:4:", "[model] preset = 'big'"},
};
enum { N_BAD_FILES = sizeof bad_files / sizeof bad_files[0] };

START_TEST(file_errors_name_line_and_key)
{
    make_tmpdir();
    const bad_file *b = &bad_files[_i];
    const char *path = write_file("run.ini", b->text);
    train_config c, before;
    char err[512] = "";
    train_config_default(&c);
    before = c;
    ck_assert_int_eq(train_config_load(&c, path, err, sizeof err), -1);
    ck_assert_msg(strstr(err, b->where) && strstr(err, b->what), "case %d: got '%s'", _i, err);
    ck_assert_msg(strncmp(err, path, strlen(path)) == 0, "case %d: '%s' names no file", _i, err);
    ck_assert_msg(memcmp(&c, &before, sizeof c) == 0, "case %d: a failed load changed the struct",
                  _i);
    remove_tmpdir();
}
END_TEST

START_TEST(long_lines_are_refused)
{
    make_tmpdir();
    char text[1024];
    snprintf(text, sizeof text, "[train]\nmetrics = ");
    size_t n = strlen(text);
    memset(text + n, 'a', 400);
    strcpy(text + n + 400, "\nsteps = 2\n");
    const char *path = write_file("run.ini", text);
    train_config c;
    char err[512] = "";
    train_config_default(&c);
    ck_assert_int_eq(train_config_load(&c, path, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "run.ini:2:") && strstr(err, "too long"), "got '%s'", err);
    remove_tmpdir();
}
END_TEST

START_TEST(set_applies_overrides)
{
    train_config c;
    char err[512] = "";
    train_config_default(&c);
    ck_assert_int_eq(train_config_set(&c, "train.lr=0.01", err, sizeof err), 0);
    ck_assert_double_eq(c.lr, 0.01);
    ck_assert_int_eq(train_config_set(&c, " parallel.mask = window ", err, sizeof err), 0);
    ck_assert_int_eq(c.mask, MASK_CHOICE_WINDOW);
    ck_assert_int_eq(train_config_set(&c, "memory.attn_kept_fraction=1", err, sizeof err), 0);
    ck_assert_double_eq(c.attn_kept_fraction, 1.0);
    ck_assert_int_eq(train_config_set(&c, "train.metrics=", err, sizeof err), 0);
    ck_assert_str_eq(c.metrics, "");
    ck_assert_int_eq(train_config_set(&c, "data.data_seed=18446744073709551615", err, sizeof err),
                     0);
    ck_assert_uint_eq(c.data_seed, UINT64_MAX);
    /* A preset replaces the model keys set before it; keys after it stay. */
    ck_assert_int_eq(train_config_set(&c, "model.layers=7", err, sizeof err), 0);
    ck_assert_int_eq(train_config_set(&c, "model.preset=small", err, sizeof err), 0);
    ck_assert_int_eq(c.layers, 6);
    ck_assert_int_eq(c.d_model, 512);
    ck_assert_int_eq(train_config_set(&c, "model.layers=7", err, sizeof err), 0);
    ck_assert_int_eq(c.layers, 7);
    ck_assert_str_eq(train_config_name("model", "preset", c.preset), "small");
}
END_TEST

/* attn_kept_fraction and keep_layers take auto, their default, which the
 * setup resolves (choose_memory_candidates): the candidates come fastest
 * first, the given values alone where one is given, 0.5 only where the
 * layout and mask allow it, every ZeRO stage from the lowest when zero is
 * auto. */
START_TEST(memory_choices_default_to_auto)
{
    train_config c;
    char err[256];
    train_config_default(&c);
    ck_assert(c.attn_kept_fraction == TRAIN_KEPT_AUTO && c.keep_layers == TRAIN_AUTO);
    ck_assert_int_eq(train_config_set(&c, "memory.keep_layers=yes", err, sizeof err), 0);
    ck_assert_int_eq(c.keep_layers, 1);
    ck_assert_int_eq(train_config_set(&c, "memory.keep_layers=AUTO", err, sizeof err), 0);
    ck_assert_int_eq(c.keep_layers, TRAIN_AUTO);
    ck_assert_int_eq(train_config_set(&c, "memory.attn_kept_fraction=1/2", err, sizeof err), 0);
    ck_assert(c.attn_kept_fraction == 0.5);

    memory_choice m[MEMORY_CHOICES_MAX];
    int n = choose_memory_candidates(1, 1, TRAIN_KEPT_AUTO, TRAIN_AUTO, 1, m);
    ck_assert_int_eq(n, 6);
    static const double kept[] = {1, 1, 0.5, 0.5, 0, 0};
    for (int i = 0; i < n; i++) {
        ck_assert(m[i].kept_fraction == kept[i] && m[i].keep_layers == (i % 2 == 0));
        ck_assert_int_eq(m[i].zero_stage, 1);
    }
    n = choose_memory_candidates(1, 1, TRAIN_KEPT_AUTO, 0, 0, m); /* no half: not zigzag causal */
    ck_assert_int_eq(n, 2);
    ck_assert(m[0].kept_fraction == 1.0 && m[1].kept_fraction == 0.0 && m[1].keep_layers == 0);
    n = choose_memory_candidates(0, 2, 0.5, 1, 1, m); /* zero = auto from stage 2 */
    ck_assert_int_eq(n, 2);
    ck_assert(m[0].zero_stage == 2 && m[1].zero_stage == 3 && m[1].kept_fraction == 0.5);
    ck_assert(m[1].keep_layers == 1);
    ck_assert_int_eq(choose_memory_candidates(0, 1, TRAIN_KEPT_AUTO, TRAIN_AUTO, 1, m),
                     MEMORY_CHOICES_MAX);
    ck_assert(m[0].kept_fraction == 1.0 && m[0].keep_layers == 1 && m[0].zero_stage == 1);
    ck_assert(m[2].zero_stage == 3 && m[3].keep_layers == 0 && m[3].zero_stage == 1);
}
END_TEST

START_TEST(set_errors_name_the_assignment)
{
    static const struct {
        const char *arg, *msg;
    } cases[] = {
        {"model.n_heads=x", "--set model.n_heads=x: not an integer"},
        {"model.n_head=4", "--set model.n_head=4: unknown key [model] n_head"},
        {"modle.layers=4", "--set modle.layers=4: unknown section [modle]"},
        {"layers=4", "--set layers=4: expected section.key=value"},
        {"model.layers", "--set model.layers: expected section.key=value"},
        {"parallel.cp=0", "--set parallel.cp=0: out of range"},
        {"memory.attn_kept_fraction=2", "--set memory.attn_kept_fraction=2: must be 0, 0.5"},
        {"model.preset=huge", "--set model.preset=huge: not one of"},
        {"memory.fused_head=2", "--set memory.fused_head=2: not a boolean"},
        {"memory.keep_layers=maybe", "--set memory.keep_layers=maybe: not a boolean (true, false, "
                                     "yes, no, 1 or 0) or auto"},
        {"parallel.piece_rows=-1", "--set parallel.piece_rows=-1: out of range"},
        {"parallel.mask=full", "--set parallel.mask=full: not one of causal, window, document, "
                               "sparse"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        train_config c, before;
        char err[512] = "";
        train_config_default(&c);
        before = c;
        ck_assert_int_eq(train_config_set(&c, cases[i].arg, err, sizeof err), -1);
        ck_assert_msg(strncmp(err, cases[i].msg, strlen(cases[i].msg)) == 0, "%s: got '%s'",
                      cases[i].arg, err);
        ck_assert(memcmp(&c, &before, sizeof c) == 0);
    }
}
END_TEST

static void assert_same(const train_config *a, const train_config *b)
{
#define SAME_STR(f) ck_assert_str_eq(a->f, b->f)
#define SAME_NUM(f) ck_assert_msg(a->f == b->f, #f " differs")
    SAME_NUM(preset);
    SAME_NUM(layers);
    SAME_NUM(d_model);
    SAME_NUM(n_heads);
    SAME_NUM(n_kv_heads);
    SAME_NUM(d_ff);
    SAME_NUM(vocab);
    SAME_NUM(rope_theta);
    SAME_NUM(rope_scaling);
    SAME_NUM(max_seq);
    SAME_NUM(tied_embeddings);
    SAME_NUM(init_std);
    SAME_NUM(norm_eps);
    SAME_NUM(source);
    SAME_NUM(task);
    SAME_NUM(seq_len);
    SAME_NUM(doc_len);
    SAME_NUM(data_seed);
    SAME_NUM(dp);
    SAME_NUM(cp);
    SAME_NUM(layout);
    SAME_NUM(mask);
    SAME_NUM(window);
    SAME_NUM(sparse_block);
    SAME_STR(sparse_pattern);
    SAME_NUM(backward);
    SAME_NUM(ring);
    SAME_NUM(piece_rows);
    SAME_NUM(steps);
    SAME_NUM(micro_batches);
    SAME_NUM(lr);
    SAME_NUM(min_lr);
    SAME_NUM(warmup_steps);
    SAME_NUM(weight_decay);
    SAME_NUM(beta1);
    SAME_NUM(beta2);
    SAME_NUM(adam_eps);
    SAME_NUM(grad_clip);
    SAME_NUM(seed);
    SAME_NUM(on_nonfinite);
    SAME_NUM(device);
    SAME_NUM(matmul);
    SAME_NUM(log_every);
    SAME_STR(metrics);
    SAME_NUM(attn_kept_fraction);
    SAME_NUM(fused_head);
    SAME_NUM(head_chunk);
    SAME_NUM(z_loss);
    SAME_NUM(limit_bytes);
    SAME_NUM(intra);
    SAME_NUM(timeout);
#undef SAME_STR
#undef SAME_NUM
}

/* Equal values, bit for bit (which keys were given aside). */
static int same_values(const train_config *a, const train_config *b)
{
    train_config x = *a, y = *b;
    memset(x.given, 0, sizeof x.given);
    memset(y.given, 0, sizeof y.given);
    return memcmp(&x, &y, sizeof x) == 0;
}

static void round_trip(const train_config *c, const char *name)
{
    char path[512], err[512] = "";
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    train_config_print(f, c);
    fclose(f);
    train_config back;
    train_config_default(&back);
    int rc = train_config_load(&back, path, err, sizeof err);
    ck_assert_msg(rc == 0, "%s", err);
    assert_same(c, &back);
    ck_assert(same_values(c, &back));
}

START_TEST(printed_configuration_loads_back_the_same)
{
    make_tmpdir();
    train_config c;
    train_config_default(&c);
    round_trip(&c, "default.ini");

    /* A custom model and values whose shortest decimal form is long. */
    char err[512];
    const char *sets[] = {"model.preset=llama3-8b",
                          "model.preset=custom",
                          "model.layers=3",
                          "model.rope_scaling=4.000000000000001",
                          "model.norm_eps=1e-6",
                          "data.task=counting",
                          "data.seq_len=131072",
                          "data.data_seed=18446744073709551615",
                          "parallel.dp=2",
                          "parallel.cp=4",
                          "parallel.ring=double",
                          "parallel.backward=kv",
                          "parallel.mask=sparse",
                          "parallel.sparse_pattern=strided:3+local:2",
                          "parallel.sparse_block=96",
                          "parallel.piece_rows=100",
                          "train.beta2=0.999",
                          "train.seed=42",
                          "train.on_nonfinite=skip",
                          "train.metrics=/tmp/x y/metrics.jsonl",
                          "train.device=cuda",
                          "train.matmul=fp32",
                          "data.recall_pairs=3",
                          "eval.min_accuracy=0.25",
                          "memory.attn_kept_fraction=0",
                          "memory.fused_head=no",
                          "memory.z_loss=0.0001",
                          "memory.limit_bytes=8589934592",
                          "transport.intra=ucx",
                          "transport.timeout=2.5"};
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++)
        ck_assert_msg(train_config_set(&c, sets[i], err, sizeof err) == 0, "%s", err);
    c.lr = 0.1 + 0.2; /* 0.30000000000000004 */
    c.min_lr = 1.0 / 3.0;
    c.init_std = 5e-324; /* the smallest subnormal */
    ck_assert_str_eq(train_config_name("model", "preset", c.preset), "custom");
    ck_assert_int_eq(c.vocab, 128256); /* kept from llama3-8b */
    round_trip(&c, "custom.ini");

    /* The text itself is stable: printing twice gives the same bytes. */
    char *t1 = NULL, *t2 = NULL;
    size_t n1 = 0, n2 = 0;
    FILE *m1 = open_memstream(&t1, &n1), *m2 = open_memstream(&t2, &n2);
    train_config_print(m1, &c);
    train_config_print(m2, &c);
    fclose(m1);
    fclose(m2);
    ck_assert_str_eq(t1, t2);
    static const char *const heads[] = {"[model]", "[data]",   "[parallel]",
                                        "[train]", "[memory]", "[transport]"};
    for (int i = 0; i < 6; i++) ck_assert_ptr_nonnull(strstr(t1, heads[i]));
    ck_assert_ptr_nonnull(strstr(t1, "lr = 0.30000000000000004\n"));
    free(t1);
    free(t2);
    remove_tmpdir();
}
END_TEST

typedef struct {
    const char *sets[4];
    int world;
    const char *what; /* expected in the message */
} bad_whole;

static const bad_whole bad_wholes[] = {
    {{"model.n_kv_heads=3"}, 1, "[model] n_heads"},
    {{"model.d_model=66"}, 1, "[model] d_model"},
    {{"model.d_model=40"}, 1, "head dimension"}, /* 40 / 4 = 10 */
    {{"parallel.dp=2"}, 1, "[parallel] dp"},
    {{"parallel.cp=2"}, 4, "world size is 4"},
    {{"parallel.cp=3", "data.seq_len=4100"}, 3, "[data] seq_len"}, /* 4100 % 6 != 0 */
    {{"parallel.cp=2", "data.seq_len=4098"}, 2, "[data] seq_len"}, /* 4098 % 4 != 0 */
    {{"parallel.layout=contiguous", "parallel.cp=4", "data.seq_len=4098"}, 4, "[data] seq_len"},
    {{"data.seq_len=131072"}, 1, "[model] max_seq"},
    {{"parallel.mask=window", "memory.attn_kept_fraction=0.5"}, 1, "[memory] attn_kept_fraction"},
    {{"parallel.layout=contiguous", "memory.attn_kept_fraction=0.5"},
     1,
     "[memory] attn_kept_fraction"},
    {{"data.source=hdf5"}, 1, "[data] source = hdf5 needs [data] path"},
    {{"parallel.mask=window", "parallel.window=0", "memory.attn_kept_fraction=1"},
     1,
     "[parallel] window"},
    {{"parallel.mask=document", "memory.attn_kept_fraction=1"}, 1, "needs [data] doc_len"},
    {{"parallel.mask=document", "data.doc_len=64", "memory.attn_kept_fraction=0.5"},
     1,
     "[memory] attn_kept_fraction"},
    {{"data.doc_len=64"}, 1, "[data] doc_len = 64 is only used with [parallel] mask = document"},
    {{"parallel.mask=document", "data.doc_len=64", "data.source=hdf5", "data.path=c.h5"},
     1,
     "brings its documents (/doc_offsets)"},
    {{"parallel.mask=sparse", "memory.attn_kept_fraction=1", "parallel.sparse_pattern=local:0"},
     1,
     "[parallel] sparse_pattern = 'local:0'"},
    {{"parallel.mask=sparse", "memory.attn_kept_fraction=1", "parallel.sparse_pattern=banded:2"},
     1,
     "unknown component 'banded'"},
    {{"parallel.mask=sparse", "memory.attn_kept_fraction=1",
      "parallel.sparse_pattern=local:2+local:3"},
     1,
     "'local' is given twice"},
    {{"parallel.mask=sparse", "memory.attn_kept_fraction=1", "parallel.sparse_block=1",
      "data.seq_len=65536"},
     1,
     "[parallel] sparse_block = 1 cuts [data] seq_len = 65536 into 65536 blocks"},
    {{"train.min_lr=0.1"}, 1, "[train] min_lr"},
    {{"train.warmup_steps=101"}, 1, "[train] warmup_steps"},
    {{"data.task=recall", "data.recall_pairs=9"}, 1, "[data] recall_pairs = 9"}, /* 8 keys */
    {{"data.task=recall", "data.recall_values=64"}, 1, "[model] vocab = 256"},   /* 521 tokens */
    {{"data.task=recall", "data.seq_len=128", "data.recall_queries=65"},
     1,
     "[data] recall_queries"},
    {{"data.task=recall", "parallel.mask=document", "data.doc_len=64",
      "memory.attn_kept_fraction=1"},
     1,
     "[data] task = recall"},
    {{"memory.offload_activations=true"}, 1, "[memory] offload_activations = true needs [train]"},
    {{"memory.optimizer=host", "parallel.zero=2"}, 1, "[memory] optimizer = host needs bf16"},
    {{"memory.optimizer=host", "train.device=cuda", "train.matmul=fp32", "parallel.zero=3"},
     1,
     "[memory] optimizer = host needs bf16"},
    {{"memory.optimizer=host", "train.device=cuda"}, 1, "needs [parallel] zero = 2, 3 or auto"},
};
enum { N_BAD_WHOLES = sizeof bad_wholes / sizeof bad_wholes[0] };

START_TEST(validate_catches_inconsistent_configurations)
{
    const bad_whole *b = &bad_wholes[_i];
    train_config c;
    char err[512] = "";
    train_config_default(&c);
    for (int k = 0; k < 4 && b->sets[k]; k++)
        ck_assert_msg(train_config_set(&c, b->sets[k], err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(train_config_validate(&c, b->world, err, sizeof err), -1);
    ck_assert_msg(strstr(err, b->what) != NULL, "case %d: got '%s'", _i, err);
}
END_TEST

START_TEST(validate_accepts_consistent_configurations)
{
    static const char *const cases[][4] = {
        {"parallel.dp=2", "parallel.cp=2"},
        {"parallel.cp=3", "data.seq_len=6144"},
        {"parallel.mask=window", "memory.attn_kept_fraction=1", "parallel.cp=4",
         "data.seq_len=4100"},
        {"parallel.ring=double", "parallel.cp=4", "memory.attn_kept_fraction=0"},
        {"memory.head_chunk=1", "train.warmup_steps=100", "train.min_lr=0.003"},
        {"parallel.mask=document", "data.doc_len=100", "memory.attn_kept_fraction=0",
         "parallel.cp=2"},
        {"parallel.mask=document", "data.source=hdf5", "data.path=c.h5",
         "memory.attn_kept_fraction=1"},
        {"parallel.mask=sparse", "memory.attn_kept_fraction=1", "parallel.sparse_block=1"},
        {"parallel.mask=sparse", "memory.attn_kept_fraction=1",
         "parallel.sparse_pattern=global:2+strided:4+local:8"},
        {"data.task=recall", "eval.min_accuracy=0.9"},
        /* the recall keys matter only for the synthetic task */
        {"data.task=recall", "data.recall_pairs=100", "data.source=hdf5", "data.path=a.h5"},
        {"train.device=cuda", "memory.optimizer=host", "parallel.zero=auto",
         "memory.offload_activations=true"},
    };
    static const int worlds[] = {4, 3, 4, 4, 1, 2, 1, 1, 1, 1, 1, 1};
    for (size_t i = 0; i < sizeof worlds / sizeof worlds[0]; i++) {
        train_config c;
        char err[512] = "";
        train_config_default(&c);
        for (int k = 0; k < 4 && cases[i][k]; k++)
            ck_assert_msg(train_config_set(&c, cases[i][k], err, sizeof err) == 0, "%s", err);
        ck_assert_msg(train_config_validate(&c, worlds[i], err, sizeof err) == 0, "case %zu: %s", i,
                      err);
    }
    /* Fields set in code are held to the parser's rules too. */
    train_config c;
    char err[512] = "";
    train_config_default(&c);
    c.layers = 0;
    ck_assert_int_eq(train_config_validate(&c, 1, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "[model] layers"));
    train_config_default(&c);
    c.mask = (train_mask_choice)(MASK_CHOICE_SPARSE + 1); /* no name */
    ck_assert_int_eq(train_config_validate(&c, 1, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "[parallel] mask"));
}
END_TEST

START_TEST(configuration_text_loads_like_a_file)
{
    train_config c, back;
    char err[512] = "";
    train_config_default(&c);
    ck_assert_int_eq(train_config_set(&c, "model.d_model=128", err, sizeof err), 0);
    ck_assert_int_eq(train_config_set(&c, "data.path=a.h5,b.h5", err, sizeof err), 0);
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    train_config_print(m, &c);
    fclose(m);
    train_config_default(&back);
    ck_assert_msg(train_config_load_text(&back, text, "ck/model.h5:/config", err, sizeof err) == 0,
                  "%s", err);
    ck_assert(same_values(&c, &back));
    free(text);
    /* errors name the text's name and line; the struct is left as it was */
    ck_assert_int_eq(train_config_load_text(&back, "[model]\nlayers = x\n", "ck/model.h5:/config",
                                            err, sizeof err),
                     -1);
    ck_assert_str_eq(err, "ck/model.h5:/config:2: [model] layers = 'x': not an integer");
    ck_assert(same_values(&c, &back));
    /* empty text changes nothing */
    ck_assert_int_eq(train_config_load_text(&back, "", "empty", err, sizeof err), 0);
    ck_assert(same_values(&c, &back));
}
END_TEST

START_TEST(resume_refuses_keys_that_change_the_numbers)
{
    static const char *const refused[][2] = {
        {"model.d_model=128", "[model] d_model = 64, this run has 128"},
        {"model.tied_embeddings=false", "[model] tied_embeddings = true, this run has false"},
        {"data.path=b.h5", "[data] path = '', this run has 'b.h5'"},
        {"data.sampling=shuffled", "[data] sampling = sequential, this run has shuffled"},
        {"data.seq_len=8192", "[data] seq_len = 4096, this run has 8192"},
        {"data.data_seed=7", "[data] data_seed = 1, this run has 7"},
        {"data.doc_len=64", "[data] doc_len = 0, this run has 64"},
        {"data.recall_values=4", "[data] recall_values = 16, this run has 4"},
        {"parallel.dp=2", "[parallel] dp = 1, this run has 2"},
        {"parallel.layout=contiguous", "[parallel] layout = auto, this run has contiguous"},
        {"parallel.mask=window", "[parallel] mask = causal, this run has window"},
        {"parallel.window=512", "[parallel] window = 1024, this run has 512"},
        {"parallel.sparse_block=256", "[parallel] sparse_block = 512, this run has 256"},
        {"parallel.sparse_pattern=local:2",
         "[parallel] sparse_pattern = 'local:4+global:1', this run has 'local:2'"},
        {"train.steps=200", "[train] steps = 100, this run has 200"},
        {"train.micro_batches=2", "[train] micro_batches = 1, this run has 2"},
        {"train.lr=0.001", "[train] lr = 0.003, this run has 0.001"},
        {"train.grad_clip=0", "[train] grad_clip = 1, this run has 0"},
        {"memory.z_loss=0.0001", "[memory] z_loss = 0, this run has 0.0001"},
    };
    static const char *const allowed[] = {"model.preset=custom",
                                          "model.max_seq=8192",
                                          "model.init_std=0.01",
                                          "train.seed=7",
                                          "train.on_nonfinite=skip",
                                          "train.log_every=5",
                                          "train.metrics=m.jsonl",
                                          "train.checkpoint_dir=ck",
                                          "train.checkpoint_every=2",
                                          "train.keep_checkpoints=0",
                                          "eval.eval_samples=8",
                                          "eval.min_accuracy=0.5",
                                          "memory.attn_kept_fraction=1",
                                          "memory.fused_head=no",
                                          "memory.head_chunk=64",
                                          "parallel.backward=kv",
                                          "parallel.ring=flat",
                                          "transport.intra=ucx",
                                          "transport.timeout=5",
                                          "train.device=cuda",
                                          "train.matmul=fp32"};
    train_config was, now;
    char err[512] = "";
    train_config_default(&was);
    ck_assert_int_eq(train_config_resume_check(&was, &was, err, sizeof err), 0);
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        now = was;
        ck_assert_msg(train_config_set(&now, refused[i][0], err, sizeof err) == 0, "%s", err);
        ck_assert_msg(train_config_resume_check(&was, &now, err, sizeof err) == -1,
                      "%s accepted on resume", refused[i][0]);
        ck_assert_str_eq(err, refused[i][1]);
    }
    for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++) {
        now = was;
        ck_assert_msg(train_config_set(&now, allowed[i], err, sizeof err) == 0, "%s", err);
        ck_assert_msg(train_config_resume_check(&was, &now, err, sizeof err) == 0,
                      "%s refused on resume: %s", allowed[i], err);
    }
}
END_TEST

/* init_from: the shape keys come from the source and must match where
 * given; RoPE keys come from it unless given. */
START_TEST(init_from_takes_the_model_and_refuses_another_shape)
{
    char err[512] = "";
    train_config src, c;
    train_config_default(&src);
    src.d_model = 96, src.vocab = 1000, src.rope_theta = 500000.0, src.norm_eps = 1e-6;
    train_config_default(&c);
    ck_assert_int_eq(train_config_set(&c, "model.rope_theta=1e6", err, sizeof err), 0);
    ck_assert_msg(train_config_take_model(&c, &src, "hf", err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(c.d_model, 96);
    ck_assert_int_eq(c.vocab, 1000);
    ck_assert(c.norm_eps == 1e-6);
    ck_assert(c.rope_theta == 1e6); /* given: a later stage's RoPE */
    ck_assert_str_eq(train_config_name("model", "preset", c.preset), "custom");

    train_config_default(&c);
    ck_assert_int_eq(train_config_set(&c, "model.d_model=128", err, sizeof err), 0);
    ck_assert_int_eq(train_config_take_model(&c, &src, "hf", err, sizeof err), -1);
    ck_assert_msg(strstr(err, "d_model = 128") && strstr(err, "hf has 96"), "%s", err);
    ck_assert_int_eq(c.d_model, 128); /* left as it was */
    /* an explicit preset gives its keys: tiny's d_model is 64 */
    train_config_default(&c);
    ck_assert_int_eq(train_config_set(&c, "model.preset=tiny", err, sizeof err), 0);
    ck_assert_int_eq(train_config_take_model(&c, &src, "hf", err, sizeof err), -1);
    ck_assert_msg(strstr(err, "d_model = 64"), "%s", err);
}
END_TEST

/* A renamed key is still read under its former name, from a file and from
 * --set, and the program names the new one. */
START_TEST(renamed_keys_are_read_under_their_former_names)
{
    make_tmpdir();
    const char *path = write_file("old.ini", "[memory]\nckpt_fraction = 0\n");
    train_config c;
    char err[512] = "";
    train_config_default(&c);
    ck_assert_msg(train_config_load(&c, path, err, sizeof err) == 0, "%s", err);
    ck_assert_double_eq(c.attn_kept_fraction, 0.0);
    ck_assert_int_eq(train_config_set(&c, "memory.ckpt_fraction=1", err, sizeof err), 0);
    ck_assert_double_eq(c.attn_kept_fraction, 1.0);
    ck_assert_int_eq(train_config_set(&c, "memory.ckpt_fraction=2", err, sizeof err), -1);
    ck_assert_msg(strstr(err, "must be 0, 0.5"), "%s", err);
    ck_assert_int_eq(train_config_set(&c, "memory.mlp_rows=48", err, sizeof err), 0);
    ck_assert_int_eq(c.chunk_rows, 48);
    remove_tmpdir();

    char *argv[] = {(char *)test_burst_path(), "train",          "--set",
                    "memory.ckpt_fraction=1",  "--print-config", NULL};
    test_run_result r = test_run(argv, NULL);
    ck_assert_msg(r.exit_code == 0, "%s", r.out);
    ck_assert_msg(test_output_has(&r, "[memory] ckpt_fraction is now called [memory] "
                                      "attn_kept_fraction"),
                  "%s", r.out);
    ck_assert_msg(test_output_has(&r, "attn_kept_fraction = 1"), "%s", r.out);
    test_run_free(&r);
}
END_TEST

START_TEST(choice_values_follow_their_names)
{
    /* each key's values (config.h, or the engine's type) in its names' order */
    static const struct {
        const char *section, *key;
        int value;
        const char *name;
    } cases[] = {
        {"model", "preset", 0, "tiny"},
        {"model", "rope_type", BK_ROPE_DYNAMIC, "dynamic"},
        {"model", "rope_type", BK_ROPE_LLAMA3, "llama3"},
        {"data", "source", SOURCE_HDF5, "hdf5"},
        {"data", "task", TASK_COPY, "copy"},
        {"data", "task", TASK_COUNTING, "counting"},
        {"data", "task", TASK_RECALL, "recall"},
        {"data", "sampling", SAMPLING_SHUFFLED, "shuffled"},
        {"parallel", "layout", LAYOUT_CHOICE_ZIGZAG, "zigzag"},
        {"parallel", "layout", LAYOUT_CHOICE_CONTIGUOUS, "contiguous"},
        {"parallel", "mask", MASK_CHOICE_DOCUMENT, "document"},
        {"parallel", "mask", MASK_CHOICE_SPARSE, "sparse"},
        {"parallel", "backward", BWD_AUTO, "auto"},
        {"parallel", "backward", BWD_Q_SIDE, "q"},
        {"parallel", "backward", BWD_KV_SIDE, "kv"},
        {"parallel", "ring", RING_CHOICE_DOUBLE, "double"},
        {"parallel", "zero", ZERO_1, "1"},
        {"parallel", "zero", ZERO_3, "3"},
        {"parallel", "zero", ZERO_AUTO, "auto"},
        {"train", "on_nonfinite", NONFINITE_SKIP, "skip"},
        {"train", "device", TRAIN_DEVICE_CUDA, "cuda"},
        {"train", "matmul", MATMUL_BF16, "bf16"},
        {"train", "matmul", MATMUL_FP32, "fp32"},
        {"memory", "optimizer", OPTIMIZER_ON_HOST, "host"},
        {"transport", "intra", INTRA_UCX, "ucx"},
        {"transport", "intra", INTRA_NCCL, "nccl"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ck_assert_str_eq(train_config_name(cases[i].section, cases[i].key, cases[i].value),
                         cases[i].name);
        ck_assert_int_eq(train_config_value(cases[i].section, cases[i].key, cases[i].name),
                         cases[i].value);
    }
    ck_assert_ptr_null(train_config_name("parallel", "mask", MASK_CHOICE_SPARSE + 1));
    ck_assert_ptr_null(train_config_name("parallel", "mask", -1));
    ck_assert_ptr_null(train_config_name("data", "path", 0));
    ck_assert_int_eq(train_config_value("parallel", "mask", "full"), -1);

    train_config c;
    train_config_default(&c);
    ck_assert_int_eq(train_config_zero_stage(&c), 1);
    for (int stage = 1; stage <= 3; stage++) {
        train_config_set_zero_stage(&c, stage);
        ck_assert_int_eq(train_config_zero_stage(&c), stage);
    }
    c.zero = ZERO_AUTO;
    ck_assert_int_eq(train_config_zero_stage(&c), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("train_config");
    TCase *tc = check_tcase(s, "config", 0);
    check_add_tests(tc, defaults_are_valid_on_one_rank, the_documented_key_table_is_the_programs,
                    presets_set_their_dimensions,
                    small_preset_has_about_25m_parameters,
                    file_keys_override_the_preset_wherever_they_stand);
    tcase_add_loop_test(tc, file_errors_name_line_and_key, 0, N_BAD_FILES);
    check_add_tests(tc, long_lines_are_refused, set_applies_overrides,
                    set_errors_name_the_assignment, printed_configuration_loads_back_the_same,
                    memory_choices_default_to_auto);
    tcase_add_loop_test(tc, validate_catches_inconsistent_configurations, 0, N_BAD_WHOLES);
    tcase_add_test(tc, validate_accepts_consistent_configurations);
    check_add_tests(tc, configuration_text_loads_like_a_file,
                    resume_refuses_keys_that_change_the_numbers,
                    init_from_takes_the_model_and_refuses_another_shape,
                    renamed_keys_are_read_under_their_former_names,
                    choice_values_follow_their_names);
    return check_run(s);
}
