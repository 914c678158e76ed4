/* tests/common/test_npy.c — .npy round trips, box reads and writes
 * (including concurrent writers in separate processes), and a catalogue of
 * malformed files that must each be rejected with the right code and a
 * message naming the file. Files live in a mkdtemp directory removed at
 * the end. */
#define _GNU_SOURCE /* memmem */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/ir/ein_box.h"
#include "common/ir/ein_dtype.h"
#include "common/base/ein_error.h"
#include "common/io/ein_npy.h"

static char tmpdir[256];

static uint64_t rng_state = 0x243f6a8885a308d3ull;
static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static int64_t rnd(int64_t lo, int64_t hi) /* [lo, hi) */
{
    return lo + (int64_t)(rng() % (uint64_t)(hi - lo));
}

static int setup(void **state)
{
    (void)state;
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/ein_npy_XXXXXX", base && *base ? base : "/tmp");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    DIR *d = opendir(tmpdir);
    if (!d)
        return -1;
    struct dirent *e;
    char p[512];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(p, sizeof p, "%s/%s", tmpdir, e->d_name);
        unlink(p);
    }
    closedir(d);
    return rmdir(tmpdir);
}

static void tpath(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/%s", tmpdir, name);
}

static void write_bytes(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n)
        assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* A .npy file of the given version with `dict` as its header text (padded
 * with spaces and '\n' to a 64-byte boundary) followed by `ndata` bytes. */
static void write_npy_raw(const char *path, int major, const char *dict, size_t ndata)
{
    size_t pre = major == 1 ? 10 : 12, dl = strlen(dict);
    size_t total = (pre + dl + 1 + 63) / 64 * 64;
    size_t hlen = total - pre;
    unsigned char *buf = calloc(1, total + ndata + 1);
    assert_non_null(buf);
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)major;
    buf[7] = 0;
    for (size_t k = 0; k < pre - 8; k++)
        buf[8 + k] = (unsigned char)(hlen >> (8 * k));
    memcpy(buf + pre, dict, dl);
    memset(buf + pre + dl, ' ', hlen - dl - 1);
    buf[total - 1] = '\n';
    for (size_t k = 0; k < ndata; k++)
        buf[total + k] = (unsigned char)k;
    write_bytes(path, buf, total + ndata);
    free(buf);
}

static void fill_random(void *buf, size_t n)
{
    unsigned char *b = buf;
    for (size_t k = 0; k < n; k++)
        b[k] = (unsigned char)rng();
}

/* ---- round trips ------------------------------------------------------ */

static void test_roundtrip_each_dtype(void **state)
{
    (void)state;
    static const int64_t shapes[][4] = {{0}, {7}, {3, 5}, {2, 3, 4}, {2, 0, 3}, {1, 1, 1, 9}};
    static const int ranks[] = {0, 1, 2, 3, 3, 4};
    char path[512];
    tpath(path, sizeof path, "rt.npy");
    for (int t = 0; t < EIN_DTYPE_ELEM_COUNT; t++) {   /* block dtypes have no .npy */
        for (size_t s = 0; s < sizeof ranks / sizeof ranks[0]; s++) {
            ein_error err = {0};
            ein_dtype dt = (ein_dtype)t;
            int rank = ranks[s];
            ein_box all = ein_box_of_shape(rank, shapes[s]);
            size_t n = (size_t)ein_box_volume(&all) * ein_dtype_size(dt);
            unsigned char *data = malloc(n + 1);
            assert_non_null(data);
            fill_random(data, n);
            assert_int_equal(ein_npy_save(path, dt, rank, shapes[s], data, &err), 0);
            ein_npy_info info;
            void *back = NULL;
            if (ein_npy_load(path, &info, &back, &err) != 0)
                fail_msg("load: %s", err.msg);
            assert_int_equal(info.dtype, dt);
            assert_int_equal(info.rank, rank);
            for (int d = 0; d < rank; d++)
                assert_int_equal(info.shape[d], shapes[s][d]);
            assert_int_equal(info.data_offset % 64, 0);
            struct stat st;
            assert_int_equal(stat(path, &st), 0);
            assert_int_equal((size_t)st.st_size, info.data_offset + n);
            if (n)
                assert_memory_equal(back, data, n);
            free(back);
            free(data);
        }
    }
}

/* The exact bytes NumPy writes for np.save(f, np.zeros((2, 3), np.float32)). */
static void test_header_matches_numpy(void **state)
{
    (void)state;
    char path[512];
    ein_error err = {0};
    tpath(path, sizeof path, "hdr.npy");
    int64_t shape[2] = {2, 3};
    assert_int_equal(ein_npy_create(path, EIN_F32, 2, shape, &err), 0);
    unsigned char buf[256];
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    assert_int_equal(n, 128 + 24);
    const char *dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    assert_memory_equal(buf, "\x93NUMPY\x01\x00\x76\x00", 10);
    assert_memory_equal(buf + 10, dict, strlen(dict));
    for (size_t k = 10 + strlen(dict); k < 127; k++)
        assert_int_equal(buf[k], ' ');
    assert_int_equal(buf[127], '\n');
    for (size_t k = 128; k < n; k++)
        assert_int_equal(buf[k], 0); /* the created data section reads as zeros */

    /* rank 1 needs the tuple comma, rank 0 is "()", bf16 is '|V2' */
    int64_t s1[1] = {5};
    assert_int_equal(ein_npy_create(path, EIN_BF16, 1, s1, &err), 0);
    f = fopen(path, "rb");
    n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    assert_int_equal(n, 128 + 10);
    assert_non_null(memmem(buf, n, "'descr': '|V2'", 14));
    assert_non_null(memmem(buf, n, "'shape': (5,)", 13));
    assert_int_equal(ein_npy_create(path, EIN_F16, 0, NULL, &err), 0);
    f = fopen(path, "rb");
    n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    assert_int_equal(n, 128 + 2);
    assert_non_null(memmem(buf, n, "'descr': '<f2'", 14));
    assert_non_null(memmem(buf, n, "'shape': ()", 11));
}

/* Headers other writers produce: versions 2.0 and 3.0, keys in any order,
 * double quotes, trailing commas, '<V2', Python 2 longs. */
static void test_read_variants(void **state)
{
    (void)state;
    static const struct {
        int major;
        const char *dict;
        ein_dtype dtype;
        int rank;
        int64_t shape[3];
    } cases[] = {
        {2, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", EIN_F32, 2, {2, 3}},
        {3, "{'descr': '<f2', 'fortran_order': False, 'shape': (4,), }", EIN_F16, 1, {4}},
        {1, "{'shape': (3, 1), 'fortran_order': False, 'descr': '<V2'}", EIN_BF16, 2, {3, 1}},
        {1, "{\"descr\": \"|V2\", \"fortran_order\": False, \"shape\": (2,3,)}", EIN_BF16, 2, {2, 3}},
        {1, "{'descr':'<f4','fortran_order':False,'shape':()}", EIN_F32, 0, {0}},
        {1, "{ 'fortran_order' : False , 'shape' : ( 2 , 2 , 2 ) , 'descr' : '<f4' , }", EIN_F32, 3, {2, 2, 2}},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3L, 2L), }", EIN_F32, 2, {3, 2}},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 5), }", EIN_F32, 2, {0, 5}},
    };
    char path[512];
    tpath(path, sizeof path, "variant.npy");
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        ein_error err = {0};
        int64_t vol = 1;
        for (int d = 0; d < cases[c].rank; d++)
            vol *= cases[c].shape[d];
        size_t n = (size_t)vol * ein_dtype_size(cases[c].dtype);
        write_npy_raw(path, cases[c].major, cases[c].dict, n);
        ein_npy_info info;
        void *data = NULL;
        if (ein_npy_load(path, &info, &data, &err) != 0)
            fail_msg("case %zu (%s): %s", c, cases[c].dict, err.msg);
        assert_int_equal(info.dtype, cases[c].dtype);
        assert_int_equal(info.rank, cases[c].rank);
        for (int d = 0; d < cases[c].rank; d++)
            assert_int_equal(info.shape[d], cases[c].shape[d]);
        for (size_t k = 0; k < n; k++)
            assert_int_equal(((unsigned char *)data)[k], (unsigned char)k);
        free(data);
    }
}

/* ---- box I/O ---------------------------------------------------------- */

static ein_box random_sub_box(int rank, const int64_t *shape)
{
    ein_box b;
    memset(&b, 0, sizeof b);
    b.rank = rank;
    for (int d = 0; d < rank; d++) {
        int mode = (int)(rng() % 3);
        if (mode == 0) { /* full extent: exercises merged runs */
            b.lo[d] = 0;
            b.hi[d] = shape[d];
        } else {
            b.lo[d] = rnd(0, shape[d]);
            b.hi[d] = rnd(b.lo[d] + 1, shape[d] + 1);
        }
    }
    return b;
}

static void test_read_box_random(void **state)
{
    (void)state;
    char path[512];
    tpath(path, sizeof path, "rb.npy");
    for (int iter = 0; iter < 60; iter++) {
        ein_error err = {0};
        int rank = (int)rnd(0, 5);
        int64_t shape[EIN_MAX_RANK];
        for (int d = 0; d < rank; d++)
            shape[d] = rnd(1, 8);
        ein_dtype dt = (ein_dtype)(iter % EIN_DTYPE_ELEM_COUNT);
        size_t elem = ein_dtype_size(dt);
        ein_box all = ein_box_of_shape(rank, shape);
        size_t n = (size_t)ein_box_volume(&all) * elem;
        unsigned char *data = malloc(n);
        assert_non_null(data);
        fill_random(data, n);
        assert_int_equal(ein_npy_save(path, dt, rank, shape, data, &err), 0);
        ein_npy_info info;
        assert_int_equal(ein_npy_read_info(path, &info, &err), 0);
        for (int k = 0; k < 20; k++) {
            ein_box b = random_sub_box(rank, shape);
            size_t bn = (size_t)ein_box_volume(&b) * elem;
            unsigned char *got = malloc(bn), *want = malloc(bn);
            assert_non_null(got);
            assert_non_null(want);
            ein_box_copy(want, &b, data, &all, &b, elem);
            if (ein_npy_read_box(path, &info, &b, got, &err) != 0)
                fail_msg("read_box: %s", err.msg);
            assert_memory_equal(got, want, bn);
            free(got);
            free(want);
        }
        free(data);
    }
}

/* Cut each dim at random points; the blocks of the grid tile the array. */
static int grid_blocks(int rank, const int64_t *shape, ein_box *blocks, int max)
{
    int64_t cuts[EIN_MAX_RANK][5];
    int ncuts[EIN_MAX_RANK];
    int nblocks = 1;
    for (int d = 0; d < rank; d++) {
        int k = 0;
        cuts[d][k++] = 0;
        for (int64_t x = 1; x < shape[d] && k < 4; x++)
            if (rng() % 3 == 0)
                cuts[d][k++] = x;
        cuts[d][k++] = shape[d];
        ncuts[d] = k;
        nblocks *= k - 1;
    }
    assert_true(nblocks <= max);
    for (int bi = 0; bi < nblocks; bi++) {
        int rem = bi;
        blocks[bi].rank = rank;
        for (int d = rank - 1; d >= 0; d--) {
            int c = rem % (ncuts[d] - 1);
            rem /= ncuts[d] - 1;
            blocks[bi].lo[d] = cuts[d][c];
            blocks[bi].hi[d] = cuts[d][c + 1];
        }
    }
    return nblocks;
}

static void write_blocks(const char *path, const ein_box *blocks, int from, int to, int step,
                         const unsigned char *data, const ein_box *all, size_t elem)
{
    for (int bi = from; bi < to; bi += step) {
        ein_error err = {0};
        size_t bn = (size_t)ein_box_volume(&blocks[bi]) * elem;
        unsigned char *blk = malloc(bn ? bn : 1);
        assert_non_null(blk);
        ein_box_copy(blk, &blocks[bi], data, all, &blocks[bi], elem);
        if (ein_npy_write_box(path, &blocks[bi], blk, &err) != 0)
            fail_msg("write_box: %s", err.msg);
        free(blk);
    }
}

static void test_write_box_compose(void **state)
{
    (void)state;
    char path[512];
    tpath(path, sizeof path, "wb.npy");
    ein_box blocks[4096];
    for (int iter = 0; iter < 40; iter++) {
        ein_error err = {0};
        int rank = (int)rnd(1, 5);
        int64_t shape[EIN_MAX_RANK];
        for (int d = 0; d < rank; d++)
            shape[d] = rnd(1, 9);
        ein_dtype dt = (ein_dtype)(iter % EIN_DTYPE_ELEM_COUNT);
        size_t elem = ein_dtype_size(dt);
        ein_box all = ein_box_of_shape(rank, shape);
        size_t n = (size_t)ein_box_volume(&all) * elem;
        unsigned char *data = malloc(n);
        assert_non_null(data);
        fill_random(data, n);
        int nb = grid_blocks(rank, shape, blocks, 4096);
        assert_int_equal(ein_npy_create(path, dt, rank, shape, &err), 0);
        /* Reverse order: nothing may depend on writing front to back. */
        for (int bi = nb - 1; bi >= 0; bi--)
            write_blocks(path, blocks, bi, bi + 1, 1, data, &all, elem);
        ein_npy_info info;
        void *back = NULL;
        assert_int_equal(ein_npy_load(path, &info, &back, &err), 0);
        assert_memory_equal(back, data, n);
        free(back);
        free(data);
    }
}

/* Several processes write disjoint blocks of one file at once. */
static void test_write_box_concurrent(void **state)
{
    (void)state;
    char path[512];
    ein_error err = {0};
    tpath(path, sizeof path, "conc.npy");
    enum { NPROC = 4 };
    int64_t shape[3] = {16, 24, 40};
    ein_box all = ein_box_of_shape(3, shape);
    size_t n = (size_t)ein_box_volume(&all) * 4;
    unsigned char *data = malloc(n);
    assert_non_null(data);
    fill_random(data, n);
    ein_box blocks[64];
    int nb = 0;
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 3; b++) {
            ein_box *bx = &blocks[nb++];
            memset(bx, 0, sizeof *bx);
            bx->rank = 3;
            bx->lo[0] = a * 4, bx->hi[0] = a * 4 + 4;
            bx->lo[1] = b * 8, bx->hi[1] = b * 8 + 8;
            bx->lo[2] = 0, bx->hi[2] = 40;
        }
    assert_int_equal(ein_npy_create(path, EIN_F32, 3, shape, &err), 0);
    pid_t pids[NPROC];
    for (int p = 0; p < NPROC; p++) {
        pids[p] = fork();
        assert_true(pids[p] >= 0);
        if (pids[p] == 0) {
            /* Child: plain library calls only, then _exit with a status. */
            int bad = 0;
            for (int bi = p; bi < nb; bi += NPROC) {
                ein_error e2 = {0};
                size_t bn = (size_t)ein_box_volume(&blocks[bi]) * 4;
                unsigned char *blk = malloc(bn);
                if (!blk) _exit(2);
                ein_box_copy(blk, &blocks[bi], data, &all, &blocks[bi], 4);
                bad |= ein_npy_write_box(path, &blocks[bi], blk, &e2) != 0;
                free(blk);
            }
            _exit(bad);
        }
    }
    for (int p = 0; p < NPROC; p++) {
        int st;
        assert_int_equal(waitpid(pids[p], &st, 0), pids[p]);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 0);
    }
    ein_npy_info info;
    void *back = NULL;
    assert_int_equal(ein_npy_load(path, &info, &back, &err), 0);
    assert_memory_equal(back, data, n);
    free(back);
    free(data);
}

static void test_box_errors(void **state)
{
    (void)state;
    char path[512];
    ein_error err = {0};
    tpath(path, sizeof path, "be.npy");
    int64_t shape[2] = {4, 5};
    float buf[64] = {0};
    assert_int_equal(ein_npy_save(path, EIN_F32, 2, shape, buf, &err), 0);
    ein_npy_info info;
    assert_int_equal(ein_npy_read_info(path, &info, &err), 0);
    ein_box b = ein_box_of_shape(2, shape);
    b.hi[1] = 6;
    assert_int_equal(ein_npy_read_box(path, &info, &b, buf, &err), EIN_ESHAPE);
    assert_non_null(strstr(err.msg, path));
    assert_int_equal(ein_npy_write_box(path, &b, buf, &err), EIN_ESHAPE);
    b = ein_box_of_shape(1, shape);
    assert_int_equal(ein_npy_read_box(path, &info, &b, buf, &err), EIN_ESHAPE);
    b = ein_box_of_shape(2, shape);
    b.lo[0] = -1;
    assert_int_equal(ein_npy_write_box(path, &b, buf, &err), EIN_ESHAPE);

    /* A file truncated after its info was read: the read fails cleanly. */
    assert_int_equal(truncate(path, (off_t)info.data_offset + 8), 0);
    b = ein_box_of_shape(2, shape);
    assert_int_equal(ein_npy_read_box(path, &info, &b, buf, &err), EIN_EIO);
    assert_non_null(strstr(err.msg, path));
    /* ... and writers see the header no longer matches the size. */
    assert_int_equal(ein_npy_write_box(path, &b, buf, &err), EIN_EPARSE);

    /* create: bad rank, negative dim, unwritable place */
    int64_t big[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    assert_int_equal(ein_npy_create(path, EIN_F32, 9, big, &err), EIN_EINVAL);
    int64_t neg[1] = {-2};
    assert_int_equal(ein_npy_create(path, EIN_F32, 1, neg, &err), EIN_EINVAL);
    int64_t huge[3] = {INT64_C(1) << 40, INT64_C(1) << 40, 1};
    assert_int_equal(ein_npy_create(path, EIN_F32, 3, huge, &err), EIN_EINVAL);
    char nodir[600];
    snprintf(nodir, sizeof nodir, "%s/no/such/dir.npy", tmpdir);
    assert_int_equal(ein_npy_create(nodir, EIN_F32, 2, shape, &err), EIN_EIO);
    assert_non_null(strstr(err.msg, nodir));
    assert_int_equal(ein_npy_read_info(nodir, &info, &err), EIN_EIO);
    assert_non_null(strstr(err.msg, nodir));
}

/* ---- malformed files -------------------------------------------------- */

typedef struct bad_case {
    const char *name;
    int major;           /* 0: `raw` bytes verbatim */
    const char *dict;
    long ndata;          /* data bytes after the header */
    const char *raw;
    size_t rawlen;
    int code;
    const char *needle;  /* must appear in the message */
} bad_case;

static void test_malformed(void **state)
{
    (void)state;
    static const char trunc_hdr[] = "\x93NUMPY\x01\x00\x76\x00{'descr': '<f4', 'fortr";
    static const char past_eof[] = "\x93NUMPY\x01\x00\xf6\x00{'descr': '<f4', 'fortran_order': False, 'shape': (), }\n";
    static const char bad_magic[] = "\x93NUMPZ\x01\x00\x36\x00{'descr': '<f4', 'fortran_order': False, 'shape': (), }\n";
    static const char short_magic[] = "\x93NUM";
    static const char v2_short[] = "\x93NUMPY\x02\x00\x10\x00";
    static const char nul_hdr[] = "\x93NUMPY\x01\x00\x04\x00{\0}\n";
    static const bad_case cases[] = {
        {"empty file", 0, NULL, 0, "", 0, EIN_EPARSE, "too short"},
        {"short magic", 0, NULL, 0, short_magic, sizeof short_magic - 1, EIN_EPARSE, "too short"},
        {"bad magic", 0, NULL, 0, bad_magic, sizeof bad_magic - 1, EIN_EPARSE, "magic"},
        {"truncated header", 0, NULL, 0, trunc_hdr, sizeof trunc_hdr - 1, EIN_EPARSE, "past the end"},
        {"v2 truncated length", 0, NULL, 0, v2_short, sizeof v2_short - 1, EIN_EPARSE, "truncated header"},
        {"header length past EOF", 0, NULL, 0, past_eof, sizeof past_eof - 1, EIN_EPARSE, "past the end"},
        {"NUL in header", 0, NULL, 0, nul_hdr, sizeof nul_hdr - 1, EIN_EPARSE, "NUL"},
        {"version 4", 4, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", 4, NULL, 0, EIN_EPARSE,
         "version 4.0"},
        {"unsupported descr", 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", 16, NULL, 0,
         EIN_EPARSE, "dtype '<f8' not supported (want <f4, <f2, bf16 as |V2, <i4 or <i8)"},
        {"big-endian", 1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8, NULL, 0, EIN_EPARSE,
         "'>f4' not supported"},
        {"structured descr", 1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", 8, NULL, 0,
         EIN_EPARSE, "quoted string"},
        {"fortran_order True", 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", 16, NULL, 0,
         EIN_EPARSE, "fortran_order True"},
        {"fortran_order junk", 1, "{'descr': '<f4', 'fortran_order': Falsey, 'shape': (2,), }", 8, NULL, 0,
         EIN_EPARSE, "fortran_order"},
        {"missing shape", 1, "{'descr': '<f4', 'fortran_order': False, }", 4, NULL, 0, EIN_EPARSE,
         "missing key 'shape'"},
        {"missing descr", 1, "{'fortran_order': False, 'shape': (1,), }", 4, NULL, 0, EIN_EPARSE,
         "missing key 'descr'"},
        {"unknown key", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", 4, NULL, 0,
         EIN_EPARSE, "unexpected key 'x'"},
        {"duplicate key", 1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}", 4, NULL, 0,
         EIN_EPARSE, "duplicate key"},
        {"unclosed shape", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3}", 24, NULL, 0, EIN_EPARSE,
         "bad shape"},
        {"shape not a tuple", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3]}", 24, NULL, 0,
         EIN_EPARSE, "'('"},
        {"shape (3) without comma", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3)}", 12, NULL, 0,
         EIN_EPARSE, "not a tuple"},
        {"shape with a name", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, n)}", 8, NULL, 0,
         EIN_EPARSE, "bad shape"},
        {"double comma", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,, 3)}", 24, NULL, 0, EIN_EPARSE,
         "bad shape"},
        {"negative dim", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-3,), }", 0, NULL, 0, EIN_EPARSE,
         "negative"},
        {"overflow dim", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,), }", 0,
         NULL, 0, EIN_EPARSE, "too large"},
        {"overflow product", 1,
         "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4294967296), }", 0, NULL, 0,
         EIN_EPARSE, "too large"},
        {"data too short", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", 47, NULL, 0,
         EIN_EPARSE, "truncated"},
        {"data too long", 1, "{'descr': '<f2', 'fortran_order': False, 'shape': (3, 4), }", 25, NULL, 0,
         EIN_EPARSE, "too long"},
        {"rank 9", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, 1, 1), }", 4, NULL, 0,
         EIN_EPARSE, "rank greater than 8"},
        {"trailing garbage", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), } x", 4, NULL, 0,
         EIN_EPARSE, "trailing"},
        {"not a dict", 1, "('descr', '<f4')", 4, NULL, 0, EIN_EPARSE, "'{'"},
        {"escaped string", 1, "{'descr': '<f\\x34', 'fortran_order': False, 'shape': (1,), }", 4, NULL, 0,
         EIN_EPARSE, "unsupported string"},
    };
    char path[512];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const bad_case *bc = &cases[c];
        char name[64];
        snprintf(name, sizeof name, "bad%02zu.npy", c);
        tpath(path, sizeof path, name);
        if (bc->major == 0)
            write_bytes(path, bc->raw, bc->rawlen);
        else
            write_npy_raw(path, bc->major, bc->dict, (size_t)bc->ndata);
        ein_error err = {0};
        ein_npy_info info;
        int rc = ein_npy_read_info(path, &info, &err);
        if (rc != bc->code)
            fail_msg("%s: rc %d (want %d): %s", bc->name, rc, bc->code, err.msg);
        if (!strstr(err.msg, path))
            fail_msg("%s: message does not name the file: %s", bc->name, err.msg);
        if (!strstr(err.msg, bc->needle))
            fail_msg("%s: message lacks '%s': %s", bc->name, bc->needle, err.msg);
        /* load and write_box go through the same checks */
        void *data = NULL;
        assert_int_equal(ein_npy_load(path, &info, &data, &err), bc->code);
        assert_null(data);
        ein_box b;
        memset(&b, 0, sizeof b);
        float x = 0;
        assert_int_equal(ein_npy_write_box(path, &b, &x, &err), bc->code);
    }
}

/* Random corruptions of a valid file never crash and are either accepted
 * with a consistent size or rejected. */
static void test_header_fuzz(void **state)
{
    (void)state;
    char path[512];
    tpath(path, sizeof path, "fuzz.npy");
    int64_t shape[2] = {3, 5};
    float data[15] = {0};
    ein_error err = {0};
    assert_int_equal(ein_npy_save(path, EIN_F32, 2, shape, data, &err), 0);
    unsigned char orig[256];
    FILE *f = fopen(path, "rb");
    size_t n = fread(orig, 1, sizeof orig, f);
    fclose(f);
    for (int iter = 0; iter < 3000; iter++) {
        unsigned char buf[256];
        memcpy(buf, orig, n);
        size_t len = n;
        int flips = 1 + (int)(rng() % 4);
        for (int k = 0; k < flips; k++)
            buf[rng() % 128] = rng() % 4 ? (unsigned char)rng() : (unsigned char)" ,()'0123456789"[rng() % 15];
        if (rng() % 4 == 0)
            len = (size_t)rnd(0, (int64_t)n + 1);
        write_bytes(path, buf, len);
        ein_npy_info info;
        void *back = NULL;
        int rc = ein_npy_load(path, &info, &back, &err);
        if (rc == 0) {
            ein_box all = ein_box_of_shape(info.rank, info.shape);
            assert_int_equal(info.data_offset + (size_t)ein_box_volume(&all) * ein_dtype_size(info.dtype), len);
            free(back);
        } else {
            assert_int_equal(rc, EIN_EPARSE);
            assert_non_null(strstr(err.msg, path));
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_each_dtype),
        cmocka_unit_test(test_header_matches_numpy),
        cmocka_unit_test(test_read_variants),
        cmocka_unit_test(test_read_box_random),
        cmocka_unit_test(test_write_box_compose),
        cmocka_unit_test(test_write_box_concurrent),
        cmocka_unit_test(test_box_errors),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_header_fuzz),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
