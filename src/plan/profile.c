/* profile.c: device profiles read from and written to JSON (profile.h). */
#include "config.h"

#include "src/plan/profile.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const kind_names[PROFILE_ROW_KINDS] = {"peak", "gemm", "elementwise",
                                                          "attention", "link"};
static const char *const link_names[PROFILE_LINKS] = {"intra", "inter", "host"};

const char *plan_profile_link_name(profile_link path)
{
    return link_names[path];
}

static int name_index(const char *const *names, int n, const char *s)
{
    for (int i = 0; s && i < n; i++)
        if (strcmp(names[i], s) == 0) return i;
    return -1;
}

/* A row's key in words, for errors: "attention forward d 128 causal block 4096". */
static void row_key(const profile_row *r, char *buf, size_t len)
{
    if (r->kind == PROFILE_ATTENTION)
        snprintf(buf, len, "attention %s d %d %s block %lld", r->backward ? "backward" : "forward",
                 r->d, r->causal ? "causal" : "full", (long long)r->block);
    else if (r->kind == PROFILE_LINK)
        snprintf(buf, len, "link %s", link_names[r->path]);
    else
        snprintf(buf, len, "%s", kind_names[r->kind]);
}

static int same_key(const profile_row *a, const profile_row *b)
{
    if (a->kind != b->kind) return 0;
    if (a->kind == PROFILE_ATTENTION)
        return a->backward == b->backward && a->d == b->d && a->causal == b->causal &&
               a->block == b->block;
    return a->kind != PROFILE_LINK || a->path == b->path;
}

/* A positive number at key, into *v: 0, or -1 with err. */
static int positive(json_t *o, const char *key, double *v, const char *where, char *err,
                    size_t err_len)
{
    json_t *x = json_object_get(o, key);
    if (!json_is_number(x) || !(json_number_value(x) > 0) || !isfinite(json_number_value(x))) {
        snprintf(err, err_len, "%s: \"%s\" must be a positive number", where, key);
        return -1;
    }
    *v = json_number_value(x);
    return 0;
}

/* Where the row comes from: "measured" {command, machine, commit} or
 * "derived" (a string naming the document), exactly one. */
static int row_source(json_t *o, profile_row *r, const char *where, char *err, size_t err_len)
{
    json_t *m = json_object_get(o, "measured"), *d = json_object_get(o, "derived");
    if ((m != NULL) == (d != NULL)) {
        snprintf(err, err_len, "%s: a row is either \"measured\" or \"derived\" (one of them)",
                 where);
        return -1;
    }
    if (d) {
        if (!json_is_string(d) || !json_string_length(d)) {
            snprintf(err, err_len, "%s: \"derived\" names the datasheet or paper (a string)",
                     where);
            return -1;
        }
        snprintf(r->source, sizeof r->source, "%s", json_string_value(d));
        return 0;
    }
    const char *f[3] = {"command", "machine", "commit"}, *v[3];
    for (int i = 0; i < 3; i++) {
        v[i] = json_string_value(json_object_get(m, f[i]));
        if (!v[i] || !v[i][0]) {
            snprintf(err, err_len, "%s: \"measured\" needs \"%s\" (a string)", where, f[i]);
            return -1;
        }
    }
    r->measured = 1;
    snprintf(r->source, sizeof r->source, "%s; %s; %s", v[0], v[1], v[2]);
    return 0;
}

/* The key of an attention row: pass, d, mask, block. */
static int attention_key(json_t *o, profile_row *r, const char *where, char *err, size_t err_len)
{
    static const char *const passes[] = {"forward", "backward"}, *const masks[] = {"full",
                                                                                   "causal"};
    r->backward = name_index(passes, 2, json_string_value(json_object_get(o, "pass")));
    r->causal = name_index(masks, 2, json_string_value(json_object_get(o, "mask")));
    json_t *d = json_object_get(o, "d"), *b = json_object_get(o, "block");
    if (r->backward < 0 || r->causal < 0 || !json_is_integer(d) || json_integer_value(d) < 1 ||
        !json_is_integer(b) || json_integer_value(b) < 1) {
        snprintf(err, err_len,
                 "%s: an attention row has \"pass\" (forward | backward), \"d\", \"mask\" (full | "
                 "causal) and \"block\" (positive integers)",
                 where);
        return -1;
    }
    r->d = (int)json_integer_value(d);
    r->block = (int64_t)json_integer_value(b);
    return 0;
}

static int link_row(json_t *o, profile_row *r, const char *where, char *err, size_t err_len)
{
    r->path = (profile_link)name_index(link_names, PROFILE_LINKS,
                                       json_string_value(json_object_get(o, "path")));
    if ((int)r->path < 0) {
        snprintf(err, err_len, "%s: a link row's \"path\" is intra, inter or host", where);
        return -1;
    }
    json_t *lat = json_object_get(o, "latency_us"), *pn = json_object_get(o, "per_node");
    if (!json_is_number(lat) || json_number_value(lat) < 0) {
        snprintf(err, err_len, "%s: \"latency_us\" must be a number >= 0", where);
        return -1;
    }
    r->latency_us = json_number_value(lat);
    r->per_node = 1;
    if (pn && (!json_is_integer(pn) || json_integer_value(pn) < 1)) {
        snprintf(err, err_len, "%s: \"per_node\" (links a node has) must be a positive integer",
                 where);
        return -1;
    }
    if (pn) r->per_node = (int)json_integer_value(pn);
    return positive(o, "gbps", &r->gbps, where, err, err_len);
}

static int parse_row(json_t *o, profile_row *r, const char *where, char *err, size_t err_len)
{
    memset(r, 0, sizeof *r);
    int kind =
        name_index(kind_names, PROFILE_ROW_KINDS, json_string_value(json_object_get(o, "row")));
    if (!json_is_object(o) || kind < 0) {
        snprintf(err, err_len, "%s: \"row\" is one of peak, gemm, elementwise, attention, link",
                 where);
        return -1;
    }
    r->kind = (profile_row_kind)kind;
    if (row_source(o, r, where, err, err_len) != 0) return -1;
    switch (r->kind) {
    case PROFILE_ATTENTION:
        if (attention_key(o, r, where, err, err_len) != 0) return -1;
        return positive(o, "gflops", &r->gflops, where, err, err_len);
    case PROFILE_LINK:
        return link_row(o, r, where, err, err_len);
    case PROFILE_ELEMENTWISE:
        return positive(o, "gbps", &r->gbps, where, err, err_len);
    default:
        return positive(o, "gflops", &r->gflops, where, err, err_len);
    }
}

/* Appends r, refusing a key p has already. */
static int add_row(plan_profile *p, const profile_row *r, char *err, size_t err_len)
{
    for (int i = 0; i < p->n_rows; i++)
        if (same_key(&p->rows[i], r)) {
            char key[128];
            row_key(r, key, sizeof key);
            snprintf(err, err_len, "the row \"%s\" is given twice: in %s and in %s", key,
                     p->rows[i].file, r->file);
            return -1;
        }
    profile_row *rows = realloc(p->rows, (size_t)(p->n_rows + 1) * sizeof *rows);
    if (!rows) {
        snprintf(err, err_len, "out of memory reading the profile %s", r->file);
        return -1;
    }
    p->rows = rows;
    p->rows[p->n_rows++] = *r;
    return 0;
}

static void append_name(char *buf, size_t len, const char *s)
{
    size_t used = strlen(buf);
    if (s && s[0]) snprintf(buf + used, len - used, "%s%s", used ? " + " : "", s);
}

int plan_profile_load(plan_profile *p, const char *path, char *err, size_t err_len)
{
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) {
        snprintf(err, err_len, "%s: %s (line %d)", path, je.text, je.line);
        return -1;
    }
    json_t *rows = json_object_get(root, "rows");
    const char *name = json_string_value(json_object_get(root, "profile"));
    int status = 0;
    if (!json_is_object(root) || !json_is_array(rows) || !name) {
        snprintf(err, err_len,
                 "%s: a profile is an object with \"profile\" (its name) and \"rows\"", path);
        status = -1;
    }
    for (size_t i = 0; status == 0 && i < json_array_size(rows); i++) {
        char where[400];
        snprintf(where, sizeof where, "%s: row %zu", path, i + 1);
        profile_row r;
        status = parse_row(json_array_get(rows, i), &r, where, err, err_len);
        snprintf(r.file, sizeof r.file, "%s", path);
        if (status == 0) status = add_row(p, &r, err, err_len);
    }
    if (status == 0) {
        append_name(p->name, sizeof p->name, name);
        if (!p->device[0])
            snprintf(p->device, sizeof p->device, "%s",
                     json_string_value(json_object_get(root, "device"))
                         ? json_string_value(json_object_get(root, "device"))
                         : name);
    }
    json_decref(root);
    return status;
}

void plan_profile_free(plan_profile *p)
{
    free(p->rows);
    memset(p, 0, sizeof *p);
}

static const profile_row *find(const plan_profile *p, const profile_row *key, char *err,
                               size_t err_len)
{
    for (int i = 0; i < p->n_rows; i++)
        if (same_key(&p->rows[i], key)) return &p->rows[i];
    char k[128];
    row_key(key, k, sizeof k);
    snprintf(err, err_len, "the profile %s has no row \"%s\"", p->name[0] ? p->name : "(empty)", k);
    return NULL;
}

const profile_row *plan_profile_get(const plan_profile *p, profile_row_kind kind, char *err,
                                    size_t err_len)
{
    profile_row key = {.kind = kind};
    return find(p, &key, err, err_len);
}

const profile_row *plan_profile_link(const plan_profile *p, profile_link path, char *err,
                                     size_t err_len)
{
    profile_row key = {.kind = PROFILE_LINK, .path = path};
    return find(p, &key, err, err_len);
}

double plan_profile_attention(const plan_profile *p, int backward, int d, int causal, int64_t block,
                              char *err, size_t err_len)
{
    const profile_row *below = NULL, *above = NULL; /* the nearest lengths on each side */
    for (int i = 0; i < p->n_rows; i++) {
        const profile_row *r = &p->rows[i];
        if (r->kind != PROFILE_ATTENTION || r->backward != backward || r->d != d ||
            r->causal != causal)
            continue;
        if (r->block <= block && (!below || r->block > below->block)) below = r;
        if (r->block >= block && (!above || r->block < above->block)) above = r;
    }
    if (!below || !above) {
        profile_row key = {.kind = PROFILE_ATTENTION,
                           .backward = backward,
                           .d = d,
                           .causal = causal,
                           .block = block};
        find(p, &key, err, err_len);
        size_t used = strlen(err);
        snprintf(err + used, err_len - used,
                 " (nor rows of this pass, d and mask on both sides of this block length)");
        return -1;
    }
    if (below->block == above->block) return below->gflops;
    double t = log((double)block / (double)below->block) /
               log((double)above->block / (double)below->block);
    return exp((1 - t) * log(below->gflops) + t * log(above->gflops));
}

/* ---- writing -------------------------------------------------------------- */

static void temp_path(const char *path, char *buf, size_t len)
{
    snprintf(buf, len, "%s.tmp.%ld", path, (long)getpid());
}

int profile_writer_open(profile_writer *w, const char *path, const char *name, const char *device,
                        const char *command, char *err, size_t err_len)
{
    char tmp[1100];
    temp_path(path, tmp, sizeof tmp);
    memset(w, 0, sizeof *w);
    if (!(w->out = fopen(tmp, "w"))) {
        snprintf(err, err_len, "cannot write the profile %s", tmp);
        return -1;
    }
    char host[128] = "unknown";
    gethostname(host, sizeof host - 1);
    snprintf(w->command, sizeof w->command, "%s", command);
    snprintf(w->machine, sizeof w->machine, "%s: %s", host, device);
    snprintf(w->commit, sizeof w->commit, "%s", BURST_GIT_COMMIT);
    json_t *n = json_string(name), *dv = json_string(device);
    char *ns = json_dumps(n, JSON_ENCODE_ANY), *ds = json_dumps(dv, JSON_ENCODE_ANY);
    fprintf(w->out, "{\"profile\": %s, \"device\": %s, \"rows\": [\n", ns ? ns : "\"\"",
            ds ? ds : "\"\"");
    free(ns), free(ds);
    json_decref(n), json_decref(dv);
    return 0;
}

void profile_write_row(profile_writer *w, const profile_row *r)
{
    json_t *o = json_pack("{s:s}", "row", kind_names[r->kind]);
    if (r->kind == PROFILE_ATTENTION) {
        json_object_set_new(o, "pass", json_string(r->backward ? "backward" : "forward"));
        json_object_set_new(o, "d", json_integer(r->d));
        json_object_set_new(o, "mask", json_string(r->causal ? "causal" : "full"));
        json_object_set_new(o, "block", json_integer((json_int_t)r->block));
    }
    if (r->kind == PROFILE_LINK) {
        json_object_set_new(o, "path", json_string(link_names[r->path]));
        json_object_set_new(o, "gbps", json_real(r->gbps));
        json_object_set_new(o, "latency_us", json_real(r->latency_us));
        json_object_set_new(o, "per_node", json_integer(r->per_node > 0 ? r->per_node : 1));
    } else if (r->kind == PROFILE_ELEMENTWISE) {
        json_object_set_new(o, "gbps", json_real(r->gbps));
    } else {
        json_object_set_new(o, "gflops", json_real(r->gflops));
    }
    json_object_set_new(o, "measured",
                        json_pack("{s:s, s:s, s:s}", "command", w->command, "machine", w->machine,
                                  "commit", w->commit));
    char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
    fprintf(w->out, "%s  %s", w->rows++ ? ",\n" : "", s ? s : "{}");
    free(s);
    json_decref(o);
}

void profile_write_attention(profile_writer *w, int backward, int d, int causal, int64_t block,
                             double gflops)
{
    profile_row r = {.kind = PROFILE_ATTENTION,
                     .backward = backward,
                     .d = d,
                     .causal = causal,
                     .block = block,
                     .gflops = gflops};
    profile_write_row(w, &r);
}

void profile_command_line(char *buf, size_t len, const char *prefix, int argc, char **argv)
{
    const char *threads = getenv("OMP_NUM_THREADS");
    snprintf(buf, len, "%s%s%s", threads ? "OMP_NUM_THREADS=" : "", threads ? threads : "",
             threads ? " " : "");
    snprintf(buf + strlen(buf), len - strlen(buf), "%s", prefix);
    for (int i = 0; i < argc; i++) snprintf(buf + strlen(buf), len - strlen(buf), " %s", argv[i]);
}

int profile_writer_close(profile_writer *w, const char *path, int ok, char *err, size_t err_len)
{
    char tmp[1100];
    temp_path(path, tmp, sizeof tmp);
    fprintf(w->out, "\n]}\n");
    int bad = ferror(w->out) | (fclose(w->out) != 0);
    if (!ok || bad || rename(tmp, path) != 0) {
        remove(tmp);
        if (ok) snprintf(err, err_len, "cannot write the profile %s", path);
        return -1;
    }
    return 0;
}
