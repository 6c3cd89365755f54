/* test_safetensors.c: io/safetensors.c. What io_st_write writes reads back
 * byte for byte (one file and shards under an index); hand-made files with a
 * header past the end, a header that is not JSON, offsets past the data, a
 * byte count that is not the shape's, an unknown dtype, a tensor in two
 * shards, or an index naming a tensor its shard lacks, are refused with the
 * file and the tensor named; a failed write leaves nothing behind. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/safetensors.h"
#include "tests/lib/check_main.h"
#include "tests/lib/testutil.h"

static char tmpdir[256];

static void setup(void)
{
    ck_assert_ptr_nonnull(test_make_tmpdir(tmpdir, sizeof tmpdir, "burst-st"));
}

static void teardown(void)
{
    test_remove_tree(tmpdir);
}

static const char *at(const char *name)
{
    static char path[2][512];
    static int k;
    k ^= 1;
    snprintf(path[k], sizeof path[k], "%s/%s", tmpdir, name);
    return path[k];
}

/* A file of an 8-byte header length, the header text and `data` bytes. */
static void hand_made(const char *name, uint64_t hlen, const char *header, size_t data)
{
    FILE *f = fopen(at(name), "wb");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < 8; i++) fputc((int)(hlen >> (8 * i)) & 0xff, f);
    fputs(header, f);
    for (size_t i = 0; i < data; i++) fputc((int)i & 0xff, f);
    fclose(f);
}

/* Opening name is refused with a message holding needle. */
static void refused(const char *name, const char *needle)
{
    char err[512] = "";
    io_st_model *m = io_st_model_open(at(name), err, sizeof err);
    ck_assert_msg(m == NULL, "%s opened", name);
    ck_assert_msg(strstr(err, needle) != NULL, "'%s' lacks '%s'", err, needle);
}

START_TEST(written_tensors_read_back)
{
    float a[6] = {1, -2, 3.5f, 0, -0.0f, 1e30f};
    uint16_t b[4] = {0x3f80, 0xbf80, 0x7f80, 1};
    io_st_out t[2] = {
        {.name = "a.weight", .dtype = IO_ST_F32, .rank = 2, .shape = {2, 3}, .data = a},
        {.name = "b", .dtype = IO_ST_BF16, .rank = 1, .shape = {4}, .data = b}};
    const char *const md[] = {"format", "pt", NULL};
    char err[512] = "";
    ck_assert_msg(io_st_write(at("x.safetensors"), t, 2, md, err, sizeof err) == 0, "%s", err);
    struct stat sb;
    ck_assert(stat(at("x.safetensors.tmp"), &sb) != 0);
    io_st_model *m = io_st_model_open(at("x.safetensors"), err, sizeof err);
    ck_assert_msg(m != NULL, "%s", err);
    ck_assert_int_eq(io_st_count(m), 2);
    io_st_tensor r;
    ck_assert_int_eq(io_st_find(m, "a.weight", &r), 0);
    ck_assert_int_eq(r.dtype, IO_ST_F32);
    ck_assert_int_eq(r.rank, 2);
    ck_assert(r.shape[0] == 2 && r.shape[1] == 3 && r.bytes == sizeof a);
    ck_assert(memcmp(r.data, a, sizeof a) == 0);
    ck_assert_int_eq(io_st_find(m, "b", &r), 0);
    ck_assert(r.dtype == IO_ST_BF16 && memcmp(r.data, b, sizeof b) == 0);
    ck_assert_int_eq(io_st_find(m, "c", &r), -1);
    io_st_model_close(m);
}
END_TEST

START_TEST(bad_files_are_refused_naming_what_is_wrong)
{
    hand_made("short", 0, "", 0);
    FILE *f = fopen(at("short"), "wb");
    fputs("abc", f);
    fclose(f);
    refused("short", "too short");
    hand_made("long_header", 1000, "{}", 0);
    refused("long_header", "past the end of the file");
    hand_made("not_json", 5, "{abc}", 0);
    refused("not_json", "header");
    const char *past = "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}";
    hand_made("truncated", strlen(past), past, 12);
    refused("truncated", "tensor 'w': data_offsets [0, 16) past the end");
    const char *count = "{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,16]}}";
    hand_made("count", strlen(count), count, 16);
    refused("count", "tensor 'w': 16 bytes for 3 elements of F32");
    const char *dtype = "{\"w\":{\"dtype\":\"Q4\",\"shape\":[4],\"data_offsets\":[0,4]}}";
    hand_made("dtype", strlen(dtype), dtype, 4);
    refused("dtype", "tensor 'w': unknown dtype 'Q4'");
    const char *shape = "{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}";
    hand_made("shape", strlen(shape), shape, 4);
    refused("shape", "tensor 'w': shape[0] is not a size");
    /* another dtype opens (it is checked), and says which it is */
    const char *i64 = "{\"w\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]}}";
    hand_made("i64", strlen(i64), i64, 16);
    char err[512] = "";
    io_st_model *m = io_st_model_open(at("i64"), err, sizeof err);
    ck_assert_msg(m != NULL, "%s", err);
    io_st_tensor t;
    ck_assert_int_eq(io_st_find(m, "w", &t), 0);
    ck_assert(t.dtype == IO_ST_OTHER && strcmp(t.dtype_name, "I64") == 0);
    io_st_model_close(m);
}
END_TEST

static void write_one(const char *name, const char *tensor)
{
    float v[2] = {1, 2};
    io_st_out t = {.name = tensor, .dtype = IO_ST_F32, .rank = 1, .shape = {2}, .data = v};
    char err[512] = "";
    ck_assert_msg(io_st_write(at(name), &t, 1, NULL, err, sizeof err) == 0, "%s", err);
}

static void write_index(const char *json)
{
    FILE *f = fopen(at("model.safetensors.index.json"), "w");
    fputs(json, f);
    fclose(f);
}

START_TEST(shards_open_through_their_index)
{
    write_one("s1.safetensors", "a");
    write_one("s2.safetensors", "b");
    write_index("{\"weight_map\": {\"a\": \"s1.safetensors\", \"b\": \"s2.safetensors\"}}");
    char err[512] = "";
    io_st_model *m = io_st_model_open(tmpdir, err, sizeof err);
    ck_assert_msg(m != NULL, "%s", err);
    io_st_tensor t;
    ck_assert(io_st_find(m, "a", &t) == 0 && strstr(t.path, "s1.safetensors"));
    ck_assert(io_st_find(m, "b", &t) == 0 && strstr(t.path, "s2.safetensors"));
    io_st_model_close(m);
    /* an index naming a tensor its shard lacks */
    write_index("{\"weight_map\": {\"a\": \"s1.safetensors\", \"c\": \"s2.safetensors\"}}");
    ck_assert_ptr_null(io_st_model_open(tmpdir, err, sizeof err));
    ck_assert_msg(strstr(err, "tensor 'c' is not in s2.safetensors"), "%s", err);
    /* one tensor in two shards */
    write_one("s3.safetensors", "a");
    write_index("{\"weight_map\": {\"a\": \"s1.safetensors\", \"b\": \"s3.safetensors\"}}");
    ck_assert_ptr_null(io_st_model_open(tmpdir, err, sizeof err));
    ck_assert_msg(strstr(err, "tensor 'a' is in both"), "%s", err);
    /* a folder with neither */
    remove(at("model.safetensors.index.json"));
    ck_assert_ptr_null(io_st_model_open(tmpdir, err, sizeof err));
    ck_assert_msg(strstr(err, "neither model.safetensors"), "%s", err);
}
END_TEST

START_TEST(a_failed_write_leaves_nothing)
{
    float v[2] = {1, 2};
    io_st_out t = {.name = "a", .dtype = IO_ST_OTHER, .rank = 1, .shape = {2}, .data = v};
    char err[512] = "";
    ck_assert_int_eq(io_st_write(at("bad.safetensors"), &t, 1, NULL, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "tensor 'a': cannot be written"), "%s", err);
    struct stat sb;
    ck_assert(stat(at("bad.safetensors"), &sb) != 0 && stat(at("bad.safetensors.tmp"), &sb) != 0);
    /* into a folder that does not exist */
    t.dtype = IO_ST_F32;
    ck_assert_int_eq(io_st_write(at("no/such/x.safetensors"), &t, 1, NULL, err, sizeof err), -1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("safetensors");
    TCase *tc = check_tcase(s, "safetensors", 0);
    tcase_add_checked_fixture(tc, setup, teardown);
    check_add_tests(tc, written_tensors_read_back, bad_files_are_refused_naming_what_is_wrong,
                    shards_open_through_their_index, a_failed_write_leaves_nothing);
    return check_run(s);
}
