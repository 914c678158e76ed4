/* tests/common/test_safetensors.c — .safetensors headers (good files and
 * every kind of lie a header can tell) and raw box reads by mmap, on files
 * generated here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/ir/ein_program.h"
#include "common/io/ein_raw.h"
#include "common/io/ein_safetensors.h"

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "%s", "/tmp/ein-st-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void path_of(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", dir, name);
}

/* A file with header `json` (length field `hlen`, or its real length when
 * hlen is 0) and `data` bytes of data. */
static void write_raw(const char *path, const char *json, uint64_t hlen, size_t data)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint64_t n = hlen ? hlen : strlen(json);
    unsigned char b8[8];
    for (int i = 0; i < 8; i++)
        b8[i] = (unsigned char)(n >> (8 * i));
    assert_int_equal(fwrite(b8, 1, 8, f), 8);
    assert_int_equal(fwrite(json, 1, strlen(json), f), strlen(json));
    for (size_t i = 0; i < data; i++)
        fputc((int)(i & 0xff), f);
    assert_int_equal(fclose(f), 0);
}

/* Opening `json` + `data` bytes fails with `code` and a one-line message
 * naming the file and containing `what`. */
static void expect_bad(const char *json, size_t data, int code, const char *what)
{
    char p[128];
    path_of(p, sizeof p, "bad.safetensors");
    write_raw(p, json, 0, data);
    ein_safetensors *st = NULL;
    ein_error err = {0};
    int rc = ein_safetensors_open(p, &st, &err);
    if (rc != code || !strstr(err.msg, what) || !strstr(err.msg, p) || strchr(err.msg, '\n'))
        fail_msg("'%s': got %d '%s', want %d and '%s'", json, rc, err.msg, code, what);
    assert_null(st);
}

static void test_good(void **state)
{
    (void)state;
    char p[128];
    path_of(p, sizeof p, "good.safetensors");
    float a[6];
    uint16_t h[4];
    for (int i = 0; i < 6; i++)
        a[i] = (float)i * 0.5f - 1;
    for (int i = 0; i < 4; i++)
        h[i] = ein_f32_to_bf16((float)i + 0.25f);
    int64_t sa[] = {2, 3}, sh[] = {4};
    ein_st_write_tensor t[] = {{"z.w", EIN_F32, 2, sa, a}, {"a.norm", EIN_BF16, 1, sh, h}};
    ein_error err = {0};
    assert_int_equal(ein_safetensors_write(p, t, 2, &err), 0);
    ein_safetensors *st = NULL;
    if (ein_safetensors_open(p, &st, &err) < 0)
        fail_msg("%s", err.msg);
    assert_int_equal(st->ntensors, 2);
    assert_string_equal(st->tensors[0].name, "a.norm");    /* sorted by name */
    const ein_st_tensor *w = ein_safetensors_find(st, "z.w"), *n = ein_safetensors_find(st, "a.norm");
    assert_non_null(w);
    assert_non_null(n);
    assert_null(ein_safetensors_find(st, "nope"));
    assert_int_equal(w->dtype, EIN_F32);
    assert_int_equal(n->dtype, EIN_BF16);
    assert_int_equal(w->rank, 2);
    assert_int_equal(w->shape[1], 3);
    assert_int_equal(w->bytes, 24);
    assert_int_equal(n->offset, w->offset + 24); /* written in order */
    /* Column 1..3 of row 1 of z.w, and all of a.norm. */
    ein_box b = ein_box_of_shape(2, sa);
    b.lo[0] = 1, b.lo[1] = 1;
    float got[2];
    assert_int_equal(ein_raw_read_box(p, w->offset, EIN_F32, 2, w->shape, &b, got, NULL, &err), 0);
    assert_true(got[0] == a[4] && got[1] == a[5]);
    uint16_t gh[4];
    ein_box bn = ein_box_of_shape(1, sh);
    assert_int_equal(ein_raw_read_box(p, n->offset, EIN_BF16, 1, n->shape, &bn, gh, NULL, &err), 0);
    assert_memory_equal(gh, h, sizeof h);
    /* Outside the shape, or a file too short for the tensor. */
    b.hi[1] = 4;
    assert_int_equal(ein_raw_read_box(p, w->offset, EIN_F32, 2, w->shape, &b, got, NULL, &err),
                     EIN_ESHAPE);
    b.hi[1] = 3;
    assert_int_equal(ein_raw_read_box(p, st->file_bytes - 8, EIN_F32, 2, w->shape, &b, got, NULL,
                                      &err), EIN_ESHAPE);
    assert_non_null(strstr(err.msg, "too short"));
    ein_safetensors_free(st);
    /* The same bytes parsed from memory. */
    FILE *f = fopen(p, "rb");
    unsigned char buf[512];
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    assert_int_equal(ein_safetensors_parse(buf, len, p, &st, &err), 0);
    assert_int_equal(st->ntensors, 2);
    ein_safetensors_free(st);
    /* __metadata__ is ignored; an empty file of tensors is fine. */
    path_of(p, sizeof p, "meta.safetensors");
    write_raw(p, "{\"__metadata__\":{\"format\":\"pt\"},\"x\":{\"dtype\":\"F16\",\"shape\":[2],"
                 "\"data_offsets\":[0,4]}}  ", 0, 4);
    assert_int_equal(ein_safetensors_open(p, &st, &err), 0);
    assert_int_equal(st->ntensors, 1);
    ein_safetensors_free(st);
    write_raw(p, "{}", 0, 0);
    assert_int_equal(ein_safetensors_open(p, &st, &err), 0);
    assert_int_equal(st->ntensors, 0);
    ein_safetensors_free(st);
}

/* A row block of a 1 MiB tensor maps about its own rows, not the file. */
static void test_maps_only_the_block(void **state)
{
    (void)state;
    char p[128];
    path_of(p, sizeof p, "big.safetensors");
    int64_t s[] = {256, 1024};
    float *a = malloc(sizeof(float) * 256 * 1024), *got = malloc(sizeof(float) * 16 * 1024);
    for (int i = 0; i < 256 * 1024; i++)
        a[i] = (float)(i % 977);
    ein_st_write_tensor t[] = {{"w", EIN_F32, 2, s, a}};
    ein_error err = {0};
    assert_int_equal(ein_safetensors_write(p, t, 1, &err), 0);
    ein_safetensors *st = NULL;
    assert_int_equal(ein_safetensors_open(p, &st, &err), 0);
    ein_box b = ein_box_of_shape(2, s);
    b.lo[0] = 128, b.hi[0] = 144;
    size_t mapped = 0;
    assert_int_equal(ein_raw_read_box(p, st->tensors[0].offset, EIN_F32, 2, s, &b, got, &mapped,
                                      &err), 0);
    for (int i = 0; i < 16 * 1024; i++)
        if (got[i] != a[128 * 1024 + i])
            fail_msg("element %d: %g, want %g", i, got[i], a[128 * 1024 + i]);
    if (!(mapped >= 16 * 4096 && mapped <= 16 * 4096 + 2 * 4096))
        fail_msg("mapped %zu bytes for a 64 KiB block of a %llu-byte file", mapped,
                 (unsigned long long)st->file_bytes);
    /* A column block: strided runs. */
    b = ein_box_of_shape(2, s);
    b.lo[1] = 1000, b.hi[1] = 1003;
    b.lo[0] = 5, b.hi[0] = 9;
    assert_int_equal(ein_raw_read_box(p, st->tensors[0].offset, EIN_F32, 2, s, &b, got, NULL, &err), 0);
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 3; c++)
            assert_true(got[r * 3 + c] == a[(5 + r) * 1024 + 1000 + c]);
    ein_safetensors_free(st);
    free(a);
    free(got);
}

static void test_bad_files(void **state)
{
    (void)state;
    char p[128];
    /* Truncated: the data, the header, the length itself. */
    path_of(p, sizeof p, "trunc.safetensors");
    int64_t s[] = {4, 8};
    float a[32] = {0};
    ein_st_write_tensor t[] = {{"wq", EIN_F32, 2, s, a}, {"wk", EIN_F32, 2, s, a}};
    ein_error err = {0};
    assert_int_equal(ein_safetensors_write(p, t, 2, &err), 0);
    FILE *f = fopen(p, "rb");
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    ein_safetensors *st = NULL;
    assert_int_equal(truncate(p, size - 1), 0);
    assert_int_equal(ein_safetensors_open(p, &st, &err), EIN_EPARSE);
    assert_non_null(strstr(err.msg, "tensor 'wk'"));
    assert_non_null(strstr(err.msg, "truncated"));
    assert_int_equal(truncate(p, 20), 0);
    assert_int_equal(ein_safetensors_open(p, &st, &err), EIN_EPARSE);
    assert_non_null(strstr(err.msg, "truncated"));
    assert_int_equal(truncate(p, 5), 0);
    assert_int_equal(ein_safetensors_open(p, &st, &err), EIN_EPARSE);
    assert_non_null(strstr(err.msg, "too short"));
    assert_null(st);

    /* The header lies about offsets. */
    expect_bad("{\"wq\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", 20,
               EIN_EPARSE, "tensor 'wq': data_offsets [0, 24] reach past");
    expect_bad("{\"wq\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[24,0]}}", 24,
               EIN_EPARSE, "tensor 'wq': data_offsets [24, 0] end before");
    expect_bad("{\"wq\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 16,
               EIN_EPARSE, "the tensors end at byte");
    expect_bad("{\"wq\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 16,
               EIN_EPARSE, "tensor 'wq': data_offsets begin at 8, leaving a hole");
    /* Overlapping ranges. */
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}", 24,
               EIN_EPARSE, "tensor 'b': data_offsets [8, 24] overlap tensor 'a'");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16,
               EIN_EPARSE, "overlap tensor");
    /* dtype: unknown names are refused by name; F64, which no tensor of a
     * program has, opens (bound inputs refuse it); I64 is an integer dtype. */
    expect_bad("{\"wq\":{\"dtype\":\"Q7\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
               EIN_EPARSE, "tensor 'wq': unknown dtype 'Q7'");
    expect_bad("{\"wq\":{\"dtype\":5,\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
               EIN_EPARSE, "tensor 'wq': dtype is not a string");
    path_of(p, sizeof p, "f64.safetensors");
    write_raw(p, "{\"pos\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}}", 0, 16);
    assert_int_equal(ein_safetensors_open(p, &st, &err), 0);
    assert_int_equal(st->tensors[0].dtype, -1);
    assert_string_equal(st->tensors[0].dtype_name, "F64");
    ein_safetensors_free(st);
    st = NULL;
    path_of(p, sizeof p, "i64.safetensors");
    write_raw(p, "{\"pos\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]}}", 0, 16);
    assert_int_equal(ein_safetensors_open(p, &st, &err), 0);
    assert_int_equal(st->tensors[0].dtype, EIN_I64);
    ein_safetensors_free(st);
    st = NULL;
    /* Shape does not match the bytes. */
    expect_bad("{\"wq\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", 20,
               EIN_EPARSE, "tensor 'wq': data_offsets [0, 20] hold 20 bytes but F32 [2, 3] needs 24");
    expect_bad("{\"wq\":{\"dtype\":\"BF16\",\"shape\":[2,-3],\"data_offsets\":[0,20]}}", 20,
               EIN_EPARSE, "tensor 'wq': shape[1] is not a non-negative integer");
    expect_bad("{\"wq\":{\"dtype\":\"F16\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,2]}}", 2,
               EIN_EPARSE, "tensor 'wq': rank 9");
    expect_bad("{\"wq\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
               "\"data_offsets\":[0,4]}}", 4, EIN_EPARSE, "overflows");
    expect_bad("{\"wq\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, EIN_EPARSE, "tensor 'wq': no shape");
    /* Not JSON, not an object, duplicate names, a header over the cap. */
    expect_bad("{\"wq\":", 0, EIN_EPARSE, "header JSON");
    expect_bad("[1, 2]", 0, EIN_EPARSE, "does not start with '{'");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
               "\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[4,8]}}", 8, EIN_EPARSE,
               "duplicate");
    path_of(p, sizeof p, "huge.safetensors");
    write_raw(p, "{}", (uint64_t)1 << 40, 0);
    assert_int_equal(ein_safetensors_open(p, &st, &err), EIN_ELIMIT);
    assert_non_null(strstr(err.msg, "over the limit"));
    write_raw(p, "{}", 1000, 0);
    assert_int_equal(ein_safetensors_open(p, &st, &err), EIN_EPARSE);
    assert_non_null(strstr(err.msg, "truncated"));
    /* Not a regular file. */
    assert_int_equal(ein_safetensors_open(dir, &st, &err), EIN_EIO);
    assert_null(st);
}

/* A LOAD of a raw tensor: format and offset survive the wire, and the
 * validator refuses the combinations that make no sense. */
static void test_load_raw_wire(void **state)
{
    (void)state;
    ein_error err = {0};
    ein_program *p = ein_program_new(0, 1);
    ein_box b = {.rank = 2, .lo = {0, 0}, .hi = {2, 3}};
    int buf = ein_program_add_buffer(p, EIN_BF16, &b, &err);
    assert_true(buf >= 0);
    ein_instr ins = {.kind = EIN_I_LOAD, .dst = buf, .path = "m.safetensors", .rank = 2,
                     .shape = {4, 3}, .format = EIN_LOAD_RAW, .offset = 4104};
    assert_true(ein_program_add_instr(p, &ins, &err) >= 0);
    assert_int_equal(ein_program_validate(p, &err), 0);
    void *enc = NULL;
    size_t len = 0;
    ein_program *q = NULL;
    assert_int_equal(ein_program_encode(p, &enc, &len, &err), 0);
    if (ein_program_decode(enc, len, &q, &err) < 0)
        fail_msg("%s", err.msg);
    assert_int_equal(q->instrs[0].format, EIN_LOAD_RAW);
    assert_int_equal(q->instrs[0].offset, 4104);
    assert_string_equal(q->instrs[0].path, "m.safetensors");
    free(enc);
    ein_program_free(q);
    /* Raw without a path; an offset on a .npy load; a format out of range;
     * a tensor ending past 2^63. */
    ein_instr *x = &p->instrs[0];
    char *path = x->path;
    x->path = NULL;
    assert_int_equal(ein_program_validate(p, &err), EIN_EPROTO);
    assert_non_null(strstr(err.msg, "raw load needs a path"));
    x->path = path;
    x->format = EIN_LOAD_NPY;
    assert_int_equal(ein_program_validate(p, &err), EIN_EPROTO);
    assert_non_null(strstr(err.msg, "not raw"));
    x->format = (ein_load_format)7;
    assert_int_equal(ein_program_validate(p, &err), EIN_EPROTO);
    x->format = EIN_LOAD_RAW;
    x->offset = (uint64_t)INT64_MAX - 8;
    assert_int_equal(ein_program_validate(p, &err), EIN_EPROTO);
    assert_non_null(strstr(err.msg, "2^63"));
    ein_program_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good),
        cmocka_unit_test(test_maps_only_the_block),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_load_raw_wire),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
