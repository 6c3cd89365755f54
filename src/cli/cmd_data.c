/* cmd_data.c: `burst data`, the corpus tools. import turns raw bytes, flat
 * uint16 .bin files and NumPy .npy arrays into HDF5 corpora (doc/CORPUS.md),
 * streaming in blocks and checking every input before anything is written;
 * synth writes synthetic long-range tasks (passkey retrieval, copy) whose
 * answers' positions are stored so accuracy can be measured; info and
 * validate describe and check corpora. Bad input found before work exits 2,
 * a failure while writing exits 1. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/corpus.h"
#include "io/corpus_inspect.h"
#include "io/npy.h"
#include "src/cli/cli.h"
#include "util/rng.h"
#include "util/options.h"
#include "util/parse.h"

#define BLOCK ((size_t)1 << 20)

/* Tokens below SYNTH_FIRST are markers of the synthetic tasks. */
enum { SYNTH_FILL = 0, SYNTH_KEY = 1, SYNTH_QUERY = 2, SYNTH_SEP = 3, SYNTH_FIRST = 4 };

/* ------------------------------------------------------------------ import */

typedef enum { FROM_TEXT, FROM_BIN, FROM_NPY } import_kind;

/* An opened input: where its tokens start, how many, how wide, signed or not. */
typedef struct {
    FILE *f;
    const char *path;
    int64_t n;
    int itemsize;
    int is_signed;
} input;

/* Opens an input and positions it at its first token; bin_width is the
 * bytes of a .bin token. */
static int open_input(import_kind kind, int bin_width, const char *path, input *in, char *err,
                      size_t len)
{
    memset(in, 0, sizeof *in);
    in->path = path;
    in->f = fopen(path, "rb");
    if (!in->f) {
        snprintf(err, len, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    if (kind == FROM_NPY) {
        io_npy_array a;
        if (io_npy_open(in->f, path, &a, err, len) != 0) {
            fclose(in->f);
            return -1;
        }
        in->n = a.n;
        in->itemsize = a.itemsize;
        in->is_signed = a.is_signed;
        return 0;
    }
    fseek(in->f, 0, SEEK_END);
    long size = ftell(in->f);
    rewind(in->f);
    in->itemsize = kind == FROM_TEXT ? 1 : bin_width;
    if (size < 0 || size % in->itemsize) {
        snprintf(err, len, "%s: %ld bytes is not a whole number of uint%d tokens", path, size,
                 8 * in->itemsize);
        fclose(in->f);
        return -1;
    }
    in->n = size / in->itemsize;
    return 0;
}

/* Reads up to max tokens; returns how many (0 at the end), -1 on error. */
static int64_t read_block(input *in, unsigned char *raw, int64_t *out, int64_t max, char *err,
                          size_t len)
{
    size_t got = fread(raw, (size_t)in->itemsize, (size_t)max, in->f);
    if (got == 0 && ferror(in->f)) {
        snprintf(err, len, "%s: read error", in->path);
        return -1;
    }
    for (size_t i = 0; i < got; i++) {
        const unsigned char *p = raw + i * (size_t)in->itemsize;
        uint64_t u = 0;
        for (int b = in->itemsize - 1; b >= 0; b--) u = u << 8 | p[b];
        if (in->is_signed && in->itemsize < 8 && (u >> (in->itemsize * 8 - 1)) & 1)
            u |= ~(uint64_t)0 << (in->itemsize * 8);
        out[i] = (int64_t)u;
    }
    return (int64_t)got;
}

/* What the import's command line sets. */
typedef struct {
    int kind; /* import_kind; -1 until --from */
    const char *from, *outp, *tokenizer;
    int64_t vocab, doc_sep; /* 0: from the tokens; the token that ends a document, -1: none */
    int per_line, per_file, bin_width;
    const char **inputs; /* [argc] */
    int n_in;
} import_opts;

static int set_from(void *o, const char *v)
{
    import_opts *im = o;
    im->kind = strcmp(v, "text") == 0  ? FROM_TEXT
               : strcmp(v, "bin") == 0 ? FROM_BIN
               : strcmp(v, "npy") == 0 ? FROM_NPY
                                       : -1;
    im->from = v;
    return im->kind < 0 ? -1 : 0;
}

static int set_dtype(void *o, const char *v)
{
    int width = strcmp(v, "uint16") == 0 ? 2 : strcmp(v, "uint32") == 0 ? 4 : 0;
    ((import_opts *)o)->bin_width = width;
    return width ? 0 : -1;
}

static int take_input(void *o, const char *arg)
{
    import_opts *im = o;
    im->inputs[im->n_in++] = arg;
    return 0;
}

#define OPT(field) offsetof(import_opts, field)
static const bu_option import_options[] = {
    {"--from", "text|bin|npy", BU_OPT_CUSTOM, 0, 0, 0, set_from,
     "text: raw bytes as byte-level tokens (vocab 256,\n"
     "tokenizer \"bytes\"); bin: flat little-endian tokens,\n"
     "uint16 (the common .bin format) or --dtype uint32;\n"
     "npy: a NumPy .npy 1-D integer array (u1 u2 u4 u8 i1\n"
     "i2 i4 i8, little-endian, C order); negative values\n"
     "are refused"},
    {"-o, --output", "F", BU_OPT_STRING, OPT(outp), 0, 0, NULL, "the corpus to write"},
    {"--vocab", "V", BU_OPT_I64, OPT(vocab), 1, 4294967295.0, NULL,
     "vocabulary size, 1..2^32-1 (default: 256 for text,\n"
     "else max token + 1); a token >= V is refused"},
    {"--tokenizer", "NAME", BU_OPT_STRING, OPT(tokenizer), 0, 0, NULL,
     "tokenizer name stored in the file (default \"bytes\"\n"
     "for text, else \"unknown\")"},
    {"--docs-per-line", NULL, BU_OPT_FLAG, OPT(per_line), 0, 0, NULL,
     "text: every line (with its newline) is a document"},
    {"--doc-sep", "ID", BU_OPT_I64, OPT(doc_sep), 0, 9.2e18, NULL,
     "token ID ends a document (it belongs to the document\n"
     "it ends): a tokenizer's end-of-text, e.g. 128001"},
    {"--docs-per-file", NULL, BU_OPT_FLAG, OPT(per_file), 0, 0, NULL,
     "every input file is a document"},
    {"--dtype", "uint16|uint32", BU_OPT_CUSTOM, 0, 0, 0, set_dtype,
     "bin: the width of a token (default uint16)"},
};
#undef OPT
enum { N_IMPORT_OPTIONS = sizeof import_options / sizeof import_options[0] };

static void usage_import(FILE *out)
{
    fprintf(out, "usage: burst data import --from text|bin|npy INPUT... -o OUT.h5 [OPTIONS]\n\n"
                 "Imports token files into one corpus; every input is read twice in blocks\n"
                 "(checked, then written), never loaded whole.\n\n");
    bu_options_print(out, import_options, N_IMPORT_OPTIONS, 25);
    fprintf(out, "\nTokens are stored as uint16 when V <= 65536, else uint32.\n");
}

/* Parses and checks the import's arguments: 0, or -1 (said on stderr). */
static int import_args(int argc, char **argv, import_opts *o)
{
    if (bu_options_parse("burst data import", import_options, N_IMPORT_OPTIONS, argc, argv, o,
                         take_input) != 0)
        return -1;
    const char *why = NULL;
    if (o->kind < 0 || !o->outp || o->n_in == 0) {
        usage_import(stderr);
        return -1;
    }
    if (o->per_line && o->kind != FROM_TEXT)
        why = "--docs-per-line applies to --from text only";
    else if (o->per_line && o->doc_sep >= 0 && o->doc_sep != '\n')
        why = "--docs-per-line and --doc-sep name two separators";
    else if (o->bin_width != 2 && o->kind != FROM_BIN)
        why = "--dtype applies to --from bin only";
    if (why) {
        fprintf(stderr, "burst data import: %s\n", why);
        return -1;
    }
    if (o->per_line) o->doc_sep = '\n';
    if (o->kind == FROM_TEXT && o->vocab == 0) o->vocab = 256;
    if (!o->tokenizer) o->tokenizer = o->kind == FROM_TEXT ? "bytes" : "unknown";
    return 0;
}

/* Pass 1: every input opens, parses and holds tokens within the vocabulary;
 * *max is the largest token, *total the count. 0, or -1 (said on stderr). */
static int check_inputs(const import_opts *o, unsigned char *raw, int64_t *tok, int64_t *max,
                        int64_t *total)
{
    char err[768];
    *max = -1, *total = 0;
    for (int k = 0; k < o->n_in; k++) {
        input in;
        if (open_input(o->kind, o->bin_width, o->inputs[k], &in, err, sizeof err) != 0) {
            fprintf(stderr, "burst data import: %s\n", err);
            return -1;
        }
        int64_t got, pos = 0;
        while ((got = read_block(&in, raw, tok, (int64_t)BLOCK, err, sizeof err)) > 0) {
            for (int64_t i = 0; i < got; i++) {
                if (tok[i] < 0 || (o->vocab > 0 && tok[i] >= o->vocab) ||
                    tok[i] > (int64_t)UINT32_MAX - 1) {
                    fprintf(stderr,
                            "burst data import: %s: token %" PRId64 " at position %" PRId64
                            " is %s\n",
                            in.path, tok[i], pos + i,
                            tok[i] < 0     ? "negative"
                            : o->vocab > 0 ? "beyond --vocab"
                                           : "too large");
                    fclose(in.f);
                    return -1;
                }
                if (tok[i] > *max) *max = tok[i];
            }
            pos += got;
            if (pos >= in.n) break;
        }
        fclose(in.f);
        if (got < 0 || pos < in.n) {
            fprintf(stderr, "burst data import: %s: %s\n", in.path,
                    got < 0 ? err : "input ended early");
            return -1;
        }
        *total += pos;
    }
    return 0;
}

/* Appends got tokens to the corpus, marking a document after each doc_sep
 * (-1: none). 0, or -1 with err set. */
static int append_tokens(io_corpus_writer *w, const int64_t *tok, int64_t got, int64_t doc_sep,
                         char *err, size_t err_len)
{
    int64_t start = 0;
    for (int64_t i = 0; doc_sep >= 0 && i < got; i++)
        if (tok[i] == doc_sep) {
            if (io_corpus_append(w, tok + start, i + 1 - start, err, err_len) ||
                io_corpus_mark_document(w, err, err_len))
                return -1;
            start = i + 1;
        }
    return io_corpus_append(w, tok + start, got - start, err, err_len);
}

/* Pass 2: every input into w. 0, or -1 with err set. */
static int write_inputs(const import_opts *o, io_corpus_writer *w, unsigned char *raw, int64_t *tok,
                        char *err, size_t err_len)
{
    for (int k = 0; k < o->n_in; k++) {
        input in;
        if (open_input(o->kind, o->bin_width, o->inputs[k], &in, err, err_len) != 0) return -1;
        int64_t got, pos = 0;
        while (pos < in.n && (got = read_block(&in, raw, tok, (int64_t)BLOCK, err, err_len)) > 0) {
            if (got > in.n - pos) got = in.n - pos;
            if (append_tokens(w, tok, got, o->doc_sep, err, err_len) != 0) {
                fclose(in.f);
                return -1;
            }
            pos += got;
        }
        fclose(in.f);
        if (pos < in.n) {
            snprintf(err, err_len, "%s: changed while importing", o->inputs[k]);
            return -1;
        }
        if ((o->per_file || o->doc_sep >= 0) && io_corpus_mark_document(w, err, err_len)) return -1;
    }
    return 0;
}

/* Both passes; the corpus is renamed into place only when whole. */
static int import_corpus(import_opts *o, unsigned char *raw, int64_t *tok)
{
    int64_t max, total;
    if (check_inputs(o, raw, tok, &max, &total) != 0) return EXIT_USAGE;
    if (o->vocab == 0) o->vocab = max + 1 > 0 ? max + 1 : 1;
    int bits = o->vocab <= 65536 ? 16 : 32;
    char err[768];
    io_corpus_writer *w =
        io_corpus_create(o->outp, bits, (uint32_t)o->vocab, o->tokenizer, err, sizeof err);
    if (!w) {
        fprintf(stderr, "burst data import: %s\n", err);
        return EXIT_RUN_FAILURE;
    }
    if (write_inputs(o, w, raw, tok, err, sizeof err) != 0) {
        fprintf(stderr, "burst data import: %s\n", err);
        io_corpus_abort(w);
        return EXIT_RUN_FAILURE;
    }
    if (io_corpus_commit(w, err, sizeof err) != 0) {
        fprintf(stderr, "burst data import: %s\n", err);
        return EXIT_RUN_FAILURE;
    }
    printf("%s: %" PRId64 " tokens, vocab %" PRId64 ", uint%d, from %d %s file%s\n", o->outp, total,
           o->vocab, bits, o->n_in, o->from, o->n_in == 1 ? "" : "s");
    return 0;
}

static int cmd_import(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        usage_import(stdout);
        return 0;
    }
    import_opts o = {.kind = -1, .doc_sep = -1, .bin_width = 2};
    o.inputs = calloc((size_t)argc, sizeof *o.inputs);
    unsigned char *raw = malloc(BLOCK * 8);
    int64_t *tok = malloc(BLOCK * sizeof *tok);
    int rc = EXIT_RUN_FAILURE;
    if (o.inputs && raw && tok)
        rc = import_args(argc, argv, &o) != 0 ? EXIT_USAGE : import_corpus(&o, raw, tok);
    free(o.inputs);
    free(raw);
    free(tok);
    return rc;
}

/* ------------------------------------------------------------------- synth */

/* What the synth's command line sets. */
typedef struct {
    const char *task, *outp, *dist;
    int64_t N, S, V, pairs, seed;
    /* from them, by check_synth: */
    int passkey;        /* the task: passkey, or copy */
    int64_t dmin, dmax; /* passkey: the distances of the answer from its pair */
} synth_opts;

#define OPT(field) offsetof(synth_opts, field)
static const bu_option synth_options[] = {
    {"--task", "passkey|copy", BU_OPT_STRING, OPT(task), 0, 0, NULL, "the task (see above)"},
    {"--seq-len", "N", BU_OPT_I64, OPT(N), 1, 1e15, NULL, "tokens of input per sample"},
    {"--samples", "S", BU_OPT_I64, OPT(S), 1, 1e15, NULL, "samples to write"},
    {"--vocab", "V", BU_OPT_I64, OPT(V), 8, 4294967295.0, NULL,
     "vocabulary, 8..2^32-1 (default 256)"},
    {"--distance", "MIN:MAX", BU_OPT_STRING, OPT(dist), 0, 0, NULL,
     "passkey distance range (default 3(N-2)/4:N-2)"},
    {"--pairs", "P", BU_OPT_I64, OPT(pairs), 1, 1e15, NULL,
     "key-value pairs per passkey sample (default 1)"},
    {"--seed", "X", BU_OPT_I64, OPT(seed), -9.2e18, 9.2e18, NULL, "random seed (default 1)"},
    {"-o, --output", "F", BU_OPT_STRING, OPT(outp), 0, 0, NULL, "the corpus to write"},
};
#undef OPT
enum { N_SYNTH_OPTIONS = sizeof synth_options / sizeof synth_options[0] };

static void usage_synth(FILE *out)
{
    fprintf(out, "usage: burst data synth --task passkey|copy --seq-len N --samples S -o OUT.h5 "
                 "[OPTIONS]\n\n"
                 "Writes S samples of N + 1 tokens each (sample i starts at token i*(N+1); its\n"
                 "last token is the label of input N-1), and /answers int64 [S, 3]: the sample's\n"
                 "start offset, the position of the answer token within the sample (always N),\n"
                 "and the answer token. Tokens 0-3 are markers (0 fill, 1 KEY, 2 QUERY, 3 SEP);\n"
                 "content tokens are drawn from [4, V).\n"
                 "  passkey: random filler, with 'KEY k v' placed so that the value v sits\n"
                 "           DISTANCE tokens before the answer, and the sample ends 'QUERY k v':\n"
                 "           predicting the final v needs attention across DISTANCE tokens.\n"
                 "           --pairs P adds P-1 distractor pairs with other keys.\n"
                 "  copy:    the first half is random, then SEP, then the first half again; the\n"
                 "           answer is the last token (its copy is about N/2 tokens back).\n\n");
    bu_options_print(out, synth_options, N_SYNTH_OPTIONS, 25);
}

/* What the options mean together: 0, or EXIT_USAGE after saying why. Sets
 * passkey, dmin and dmax. */
static int check_synth(synth_opts *o)
{
    const int64_t N = o->N;
    o->passkey = strcmp(o->task, "passkey") == 0;
    if (!o->passkey && strcmp(o->task, "copy") != 0) {
        fprintf(stderr, "burst data synth: --task %s: must be passkey or copy\n", o->task);
        return EXIT_USAGE;
    }
    o->dmin = 3 * (N - 2) / 4, o->dmax = N - 2;
    if (o->dist && sscanf(o->dist, "%" SCNd64 ":%" SCNd64, &o->dmin, &o->dmax) != 2) {
        fprintf(stderr, "burst data synth: --distance %s: expected MIN:MAX\n", o->dist);
        return EXIT_USAGE;
    }
    if (!o->passkey) {
        if (N >= 4) return 0;
        fprintf(stderr, "burst data synth: copy needs --seq-len >= 4\n");
        return EXIT_USAGE;
    }
    /* The pair KEY k v at p, p+1, p+2 with p >= 0; the answer at N: distance N - (p+2). */
    if (N < 8 || o->dmin < 1 || o->dmin > o->dmax || o->dmax > N - 2) {
        fprintf(stderr,
                "burst data synth: passkey needs --seq-len N >= 8 and --distance MIN:MAX with "
                "1 <= MIN <= MAX <= N-2 (N %" PRId64 ", distance %" PRId64 ":%" PRId64 ")\n",
                N, o->dmin, o->dmax);
        return EXIT_USAGE;
    }
    if (o->pairs < 1 || o->pairs > o->V - SYNTH_FIRST || 3 * o->pairs + 3 > N) {
        fprintf(stderr,
                "burst data synth: --pairs %" PRId64 " does not fit (at most V-4 keys and "
                "N/3 - 1 pairs)\n",
                o->pairs);
        return EXIT_USAGE;
    }
    return 0;
}

/* The memory of one sample and of the answers. */
typedef struct {
    int64_t *seq;        /* [N + 1] the sample */
    int64_t *answers;    /* [S][3] */
    int64_t *keys;       /* [pairs] passkey: the sample's keys, distinct */
    unsigned char *used; /* [N + 1] passkey: the positions taken by pairs */
} synth_buffers;

/* pairs distinct content tokens into keys. */
static void draw_keys(const synth_opts *o, int64_t *keys, uint64_t *rng)
{
    const int64_t C = o->V - SYNTH_FIRST; /* content tokens */
    for (int64_t k = 0; k < o->pairs; k++) {
        int64_t key, dup;
        do {
            key = SYNTH_FIRST + bu_rng_range(rng, 0, C - 1);
            dup = 0;
            for (int64_t j = 0; j < k; j++) dup |= keys[j] == key;
        } while (dup);
        keys[k] = key;
    }
}

/* Turns the random sample into a passkey one: 'KEY k v' at a distance from
 * the end drawn in [dmin, dmax], distractor pairs, the closing 'QUERY k v'.
 * Returns the answer, v. */
static int64_t passkey_sample(const synth_opts *o, synth_buffers *b, uint64_t *rng)
{
    const int64_t N = o->N, C = o->V - SYNTH_FIRST;
    int64_t *seq = b->seq;
    memset(b->used, 0, (size_t)N + 1);
    draw_keys(o, b->keys, rng);
    int64_t d = bu_rng_range(rng, o->dmin, o->dmax), p = N - d - 2;
    int64_t value = SYNTH_FIRST + bu_rng_range(rng, 0, C - 1);
    seq[p] = SYNTH_KEY, seq[p + 1] = b->keys[0], seq[p + 2] = value;
    memset(b->used + p, 1, 3);
    memset(b->used + N - 2, 1, 3);
    for (int64_t k = 1; k < o->pairs; k++) { /* distractors anywhere free before the query */
        int64_t q;
        do q = bu_rng_range(rng, 0, N - 5);
        while (b->used[q] || b->used[q + 1] || b->used[q + 2]);
        seq[q] = SYNTH_KEY, seq[q + 1] = b->keys[k];
        seq[q + 2] = SYNTH_FIRST + bu_rng_range(rng, 0, C - 1);
        memset(b->used + q, 1, 3);
    }
    /* Marker-free filler: a KEY or QUERY only where placed. */
    seq[N - 2] = SYNTH_QUERY, seq[N - 1] = b->keys[0], seq[N] = value;
    return value;
}

/* Turns the random sample into a copy one: [0,h) random, SEP at h, then
 * copies, seq[h+1+i] = seq[i]. Returns the answer, the last token. */
static int64_t copy_sample(const synth_opts *o, int64_t *seq)
{
    int64_t h = o->N / 2;
    seq[h] = SYNTH_SEP;
    for (int64_t i = h + 1; i <= o->N; i++) seq[i] = seq[i - h - 1];
    return seq[o->N];
}

/* Draws the S samples into w, a document each, and the answers into b. */
static int write_samples(const synth_opts *o, io_corpus_writer *w, synth_buffers *b, char *err,
                         size_t err_len)
{
    const int64_t L = o->N + 1, C = o->V - SYNTH_FIRST;
    uint64_t rng = (uint64_t)o->seed;
    for (int64_t s = 0; s < o->S; s++) {
        for (int64_t i = 0; i < L; i++) b->seq[i] = SYNTH_FIRST + bu_rng_range(&rng, 0, C - 1);
        int64_t answer = o->passkey ? passkey_sample(o, b, &rng) : copy_sample(o, b->seq);
        b->answers[3 * s] = s * L, b->answers[3 * s + 1] = o->N, b->answers[3 * s + 2] = answer;
        if (io_corpus_append(w, b->seq, L, err, err_len) != 0 ||
            io_corpus_mark_document(w, err, err_len) != 0)
            return -1;
    }
    return 0;
}

/* The corpus: the samples, /answers and /synth_params. 0, or -1 (err) with
 * nothing left behind. */
static int write_synth(const synth_opts *o, synth_buffers *b, char *err, size_t err_len)
{
    char tokenizer[64];
    snprintf(tokenizer, sizeof tokenizer, "synthetic-%s", o->task);
    io_corpus_writer *w =
        io_corpus_create(o->outp, o->V <= 65536 ? 16 : 32, (uint32_t)o->V, tokenizer, err, err_len);
    if (!w) return -1;
    const int64_t N = o->N, copy_distance = N / 2 + 1;
    int64_t params[6] = {N,
                         o->S,
                         o->passkey ? o->dmin : copy_distance,
                         o->passkey ? o->dmax : copy_distance,
                         o->passkey ? o->pairs : 0,
                         o->seed};
    if (write_samples(o, w, b, err, err_len) != 0 ||
        io_corpus_put_int64(w, "/answers", b->answers, o->S, 3, err, err_len) != 0 ||
        io_corpus_put_int64(w, "/synth_params", params, 1, 6, err, err_len) != 0) {
        io_corpus_abort(w);
        return -1;
    }
    return io_corpus_commit(w, err, err_len);
}

static int cmd_synth(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        usage_synth(stdout);
        return 0;
    }
    synth_opts o = {.V = 256, .pairs = 1, .seed = 1};
    if (bu_options_parse("burst data synth", synth_options, N_SYNTH_OPTIONS, argc, argv, &o,
                         NULL) != 0)
        return EXIT_USAGE;
    if (!o.task || !o.outp || o.N <= 0 || o.S <= 0) {
        usage_synth(stderr);
        return EXIT_USAGE;
    }
    if (check_synth(&o) != 0) return EXIT_USAGE;
    const size_t L = (size_t)o.N + 1;
    synth_buffers b = {.seq = malloc(L * sizeof *b.seq),
                       .answers = malloc((size_t)o.S * 3 * sizeof *b.answers),
                       .keys = malloc((size_t)o.pairs * sizeof *b.keys),
                       .used = malloc(L)};
    char err[768];
    int rc = EXIT_RUN_FAILURE;
    if (!b.seq || !b.answers || !b.keys || !b.used)
        fprintf(stderr, "burst data synth: out of memory\n");
    else if (write_synth(&o, &b, err, sizeof err) != 0)
        fprintf(stderr, "burst data synth: %s\n", err);
    else
        rc = 0;
    if (rc == 0)
        printf("%s: %s, %" PRId64 " samples of %" PRId64 " + 1 tokens, vocab %" PRId64 "\n", o.outp,
               o.task, o.S, o.N, o.V);
    free(b.seq), free(b.answers), free(b.keys), free(b.used);
    return rc;
}

/* -------------------------------------------------------- info and validate */

/* What the command lines of info and validate set: the corpora, and the
 * sequence a corpus must hold (validate). */
typedef struct {
    const char **files;
    int n_files;
    int64_t seq_len;
} corpora_opts;

static int take_file(void *o, const char *arg)
{
    corpora_opts *c = o;
    c->files[c->n_files++] = arg;
    return 0;
}

static const bu_option validate_options[] = {
    {"--seq-len", "N", BU_OPT_I64, offsetof(corpora_opts, seq_len), 1, 9.2e18, NULL,
     "a corpus must hold at least N + 1 tokens (one sequence and\n"
     "its shifted label)"},
};
enum { N_VALIDATE_OPTIONS = sizeof validate_options / sizeof validate_options[0] };

static void usage_info(FILE *out)
{
    fprintf(out, "usage: burst data info FILE...\n\n"
                 "Prints, per corpus: tokens, vocabulary, tokenizer, token type, documents,\n"
                 "chunking and compression of /tokens, and every dataset. Reads metadata only.\n"
                 "A file that is not a valid corpus is named with its problem (exit 2).\n");
}

static void usage_validate(FILE *out)
{
    fprintf(out, "usage: burst data validate [--seq-len N] FILE...\n\n"
                 "Checks each corpus fully: its metadata, every token against vocab_size (read\n"
                 "in blocks), and /doc_offsets (starts at 0, strictly ascending, in range).\n"
                 "Prints 'FILE: OK' or each problem; exit 1 on problems.\n\n");
    bu_options_print(out, validate_options, N_VALIDATE_OPTIONS, 16);
}

/* The options and the corpora of info or validate into *o (files: argc
 * entries, the caller's to free): 0 to go on, -1 after --help, or EXIT_USAGE. */
static int corpora_args(const char *cmd, const bu_option *opts, int n_opts,
                        void (*print_usage)(FILE *), int argc, char **argv, corpora_opts *o)
{
    int parsed = bu_options_parse(cmd, opts, n_opts, argc, argv, o, take_file);
    if (parsed == 1) print_usage(stdout);
    if (parsed != 0) return parsed == 1 ? -1 : EXIT_USAGE;
    if (o->n_files == 0) {
        print_usage(stderr);
        return EXIT_USAGE;
    }
    return 0;
}

/* Describes one corpus: 0, or EXIT_USAGE when it is not a valid one. */
static int describe_corpus(const char *path)
{
    char err[768];
    io_corpus *c = NULL;
    io_corpus_layout lay;
    if (io_corpus_open(path, &c, err, sizeof err) != 0 ||
        io_corpus_inspect(path, &lay, err, sizeof err) != 0) {
        fprintf(stderr, "burst data info: %s\n", err);
        io_corpus_close(c);
        return EXIT_USAGE;
    }
    printf("%s\n  tokens:      %" PRId64 "\n  vocab_size:  %u\n  tokenizer:   %s\n"
           "  dtype:       uint%d\n  documents:   %" PRId64 "%s\n",
           path, io_corpus_n_tokens(c), io_corpus_vocab(c), io_corpus_tokenizer(c), lay.bits,
           io_corpus_n_docs(c), io_corpus_n_docs(c) ? "" : " (no /doc_offsets)");
    if (lay.chunk_tokens)
        printf("  chunks:      %" PRId64 " tokens\n", lay.chunk_tokens);
    else
        printf("  chunks:      contiguous\n");
    if (lay.deflate_level >= 0)
        printf("  compression: deflate level %d%s\n", lay.deflate_level,
               lay.shuffle ? " + shuffle" : "");
    else
        printf("  compression: none\n");
    printf("  datasets:\n");
    for (char *line = lay.datasets; *line;) {
        char *nl = strchr(line, '\n');
        printf("    %.*s\n", nl ? (int)(nl - line) : (int)strlen(line), line);
        line = nl ? nl + 1 : line + strlen(line);
    }
    io_corpus_close(c);
    return 0;
}

static int cmd_info(int argc, char **argv)
{
    corpora_opts o = {.files = calloc((size_t)argc, sizeof *o.files)};
    if (!o.files) return EXIT_RUN_FAILURE;
    int rc = corpora_args("burst data info", NULL, 0, usage_info, argc, argv, &o);
    int invalid = 0; /* every corpus is described, the invalid ones too */
    for (int i = 0; rc == 0 && i < o.n_files; i++) invalid |= describe_corpus(o.files[i]) != 0;
    free(o.files);
    if (rc != 0) return rc < 0 ? 0 : rc;
    return invalid ? EXIT_USAGE : 0;
}

/* Counts tokens beyond the vocabulary in [begin, begin + count) by halving the
 * ranges io_corpus_read refuses, up to BEYOND_CAP of them. 0, or -1 on another
 * error (in err). */
#define BEYOND_CAP 1000
static int count_beyond(io_corpus *c, int64_t begin, int64_t count, int64_t *buf, int64_t *bad,
                        int64_t *first, char *err, size_t len)
{
    if (count == 0 || *bad >= BEYOND_CAP) return 0;
    if (io_corpus_read(c, begin, count, buf, err, len) == 0) return 0;
    if (!strstr(err, "beyond vocab_size")) return -1;
    if (count == 1) {
        if ((*bad)++ == 0) *first = begin;
        return 0;
    }
    int64_t half = count / 2;
    if (count_beyond(c, begin, half, buf, bad, first, err, len) != 0) return -1;
    return count_beyond(c, begin + half, count - half, buf, bad, first, err, len);
}

static int validate_one(const char *path, int64_t seq_len, int64_t *buf, size_t buf_len)
{
    char err[768];
    io_corpus *c = NULL;
    if (io_corpus_open(path, &c, err, sizeof err) != 0) {
        printf("%s\n", err);
        return 1;
    }
    int problems = 0;
    const int64_t n = io_corpus_n_tokens(c), V = io_corpus_vocab(c);
    int64_t beyond = 0, first_beyond = -1;
    for (int64_t at = 0; at < n;) {
        int64_t cnt = n - at < (int64_t)buf_len ? n - at : (int64_t)buf_len;
        if (count_beyond(c, at, cnt, buf, &beyond, &first_beyond, err, sizeof err) != 0) {
            printf("%s\n", err);
            problems++;
            break;
        }
        at += cnt;
    }
    if (beyond) {
        printf("%s: %s%" PRId64 " token%s beyond vocab_size %" PRId64 " (first at position %" PRId64
               ")\n",
               path, beyond >= BEYOND_CAP ? "at least " : "", beyond, beyond == 1 ? "" : "s", V,
               first_beyond);
        problems++;
    }
    int64_t nd = io_corpus_n_docs(c);
    if (nd > 0) {
        int64_t *off = malloc((size_t)nd * sizeof *off);
        if (!off || io_corpus_doc_offsets(c, off, err, sizeof err) != 0) {
            printf("%s\n", off ? err : "out of memory");
            problems++;
        }
        free(off);
    }
    if (seq_len > 0 && n < seq_len + 1) {
        printf("%s: %" PRId64 " tokens, fewer than one sequence of %" PRId64 " + 1\n", path, n,
               seq_len);
        problems++;
    }
    if (!problems)
        printf("%s: OK (%" PRId64 " tokens, vocab %" PRId64 ", %" PRId64 " documents)\n", path, n,
               V, nd);
    io_corpus_close(c);
    return problems ? 1 : 0;
}

static int cmd_validate(int argc, char **argv)
{
    corpora_opts o = {.files = calloc((size_t)argc, sizeof *o.files)};
    int64_t *buf = malloc(BLOCK * sizeof *buf);
    int rc = EXIT_RUN_FAILURE;
    if (o.files && buf)
        rc = corpora_args("burst data validate", validate_options, N_VALIDATE_OPTIONS,
                          usage_validate, argc, argv, &o);
    int bad = 0;
    for (int i = 0; rc == 0 && i < o.n_files; i++)
        bad |= validate_one(o.files[i], o.seq_len, buf, BLOCK);
    free(o.files);
    free(buf);
    if (rc != 0) return rc < 0 ? 0 : rc;
    return bad ? EXIT_RUN_FAILURE : 0;
}

static const cli_subcommand subcommands[] = {
    {"import", cmd_import, "token files (text, binary, .npy) into one corpus"},
    {"synth", cmd_synth, "a synthetic corpus (passkey, copy)"},
    {"info", cmd_info, "what a corpus holds"},
    {"validate", cmd_validate, "checks corpora against the format"},
};
enum { N_SUBCOMMANDS = sizeof subcommands / sizeof subcommands[0] };

static void usage(FILE *out)
{
    fprintf(out, "usage: burst data SUBCOMMAND [OPTIONS]\n\n");
    cli_print_subcommands(out, subcommands, N_SUBCOMMANDS, 12);
    fprintf(out,
            "\nTools for tokenized corpora in HDF5 (format: doc/CORPUS.md). Files are written\n"
            "under a temporary name and renamed when complete. 'burst data SUBCOMMAND --help'\n"
            "describes each. Exit status: 0 success, 1 failure while writing or problems\n"
            "found by validate, 2 bad usage or bad input found before work.\n");
}

int cmd_data(int argc, char **argv)
{
    return cli_dispatch("burst data", subcommands, N_SUBCOMMANDS, usage, argc, argv);
}
