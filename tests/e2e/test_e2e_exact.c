/* tests/e2e/test_e2e_exact.c — outputs that must come out exactly right,
 * on any device count (issue: silent wrong results).
 *
 * - A saved graph input comes out byte for byte equal to what went in, in
 *   every dtype, on 1..5 devices, next to a computed output.
 * - f16/bf16 partial sums are kept in f32 until they are aggregated: a
 *   contraction whose halves overflow f16 (but whose total fits) is exact
 *   on 2 and 4 devices as on 1, and a bf16 contraction split 8 ways is as
 *   accurate as the unsplit one (both compared with a double reference);
 *   with --partials native (bf16 partials) it stays within bf16 tolerance.
 * Inputs are written by this test; references are computed here. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/ir/ein_dtype.h"
#include "common/io/ein_npy.h"
#include "tests/e2e/e2e_util.h"

static int run_einrun(int ndev, const char *prog, const char *const *bind, int nbind,
                      char *out, size_t len)
{
    char *argv[32];
    char ndev_s[16];
    int n = 0;
    snprintf(ndev_s, sizeof ndev_s, "%d", ndev);
    argv[n++] = (char *)e2e_bin("einrun");
    argv[n++] = "--cpu";
    argv[n++] = ndev_s;
    for (int i = 0; i < nbind; i++)
        argv[n++] = (char *)bind[i];
    argv[n++] = (char *)prog;
    argv[n] = NULL;
    return e2e_run(argv, out, len);
}

static void assert_clean(void)
{
    char what[512];
    int left = e2e_leftovers(what, sizeof what);
    if (left)
        fail_msg("leftovers: %s", what);
}

static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

/* `input x[5, 6]` saved next to `y = relu(x)`: out.npy == x.npy bytes. */
static void test_saved_input(void **state)
{
    (void)state;
    static const ein_dtype dts[] = {EIN_F32, EIN_F16, EIN_BF16};
    for (size_t t = 0; t < sizeof dts / sizeof dts[0]; t++) {
        char prog[256];
        snprintf(prog, sizeof prog,
                 "dims a=5 b=6\ndtype %s\ninput x[a, b]\ny = relu(x)\nsave x, y\n",
                 ein_dtype_name(dts[t]));
        const char *ein = e2e_write_file("saved.ein", prog);
        float vals[30];
        for (int i = 0; i < 30; i++)
            vals[i] = (float)(i * 37 % 29) - 14.25f; /* distinct, negative and positive */
        unsigned char raw[30 * 4];
        ein_dtype_from_f32(dts[t], vals, raw, 30);
        char xpath[600], opath[600];
        snprintf(xpath, sizeof xpath, "%s/x.npy", e2e_scratch());
        snprintf(opath, sizeof opath, "%s/out.npy", e2e_scratch());
        int64_t shape[2] = {5, 6};
        ein_error err = {0};
        assert_int_equal(ein_npy_save(xpath, dts[t], 2, shape, raw, &err), 0);
        for (int p = 1; p <= 5; p++) {
            unlink(opath);
            const char *bind[] = {"--input", "x=x.npy", "--output", "x=out.npy",
                                  "--output", "y=y.npy"};
            char out[4096];
            int rc = run_einrun(p, ein, bind, 6, out, sizeof out);
            if (rc != 0)
                fail_msg("%s P=%d: einrun exit %d: %s", ein_dtype_name(dts[t]), p, rc, out);
            size_t la, lb;
            unsigned char *a = slurp(xpath, &la), *b = slurp(opath, &lb);
            if (la != lb || memcmp(a, b, la))
                fail_msg("%s P=%d: saved input differs from the input", ein_dtype_name(dts[t]), p);
            free(a);
            free(b);
            if (strstr(out, "written by device )"))
                fail_msg("P=%d: no device named for the saved input: %s", p, out);
            assert_clean();
        }
    }
}

/* y[0, 0] = sum_k a[0, k] * 1 with a = 16 x (+20000) then 16 x (-20000):
 * every half sums to +-320000, far beyond f16's 65504, the total is 0. */
static void test_f16_partials_do_not_overflow(void **state)
{
    (void)state;
    const char *ein = e2e_write_file("f16.ein", "dims m=1 k=32 n=1\ndtype f16\n"
                                                "input a[m, k]\ninput o[k, n]\n"
                                                "y = matmul(a, o)\nsave y\n");
    float a[32], o[32];
    for (int i = 0; i < 32; i++) {
        a[i] = i < 16 ? 20000.0f : -20000.0f;
        o[i] = 1.0f;
    }
    uint16_t ah[32], oh[32];
    ein_dtype_from_f32(EIN_F16, a, ah, 32);
    ein_dtype_from_f32(EIN_F16, o, oh, 32);
    char path[600];
    ein_error err = {0};
    snprintf(path, sizeof path, "%s/a.npy", e2e_scratch());
    assert_int_equal(ein_npy_save(path, EIN_F16, 2, (int64_t[]){1, 32}, ah, &err), 0);
    snprintf(path, sizeof path, "%s/o.npy", e2e_scratch());
    assert_int_equal(ein_npy_save(path, EIN_F16, 2, (int64_t[]){32, 1}, oh, &err), 0);
    for (int p = 1; p <= 4; p *= 2) {
        const char *bind[] = {"--input", "a=a.npy", "--input", "o=o.npy",
                              "--output", "y=y.npy"};
        char out[4096];
        int rc = run_einrun(p, ein, bind, 6, out, sizeof out);
        if (rc != 0)
            fail_msg("P=%d: einrun exit %d: %s", p, rc, out);
        snprintf(path, sizeof path, "%s/y.npy", e2e_scratch());
        ein_npy_info info;
        void *data = NULL;
        assert_int_equal(ein_npy_load(path, &info, &data, &err), 0);
        float y;
        ein_dtype_to_f32(EIN_F16, data, &y, 1);
        free(data);
        if (!(fabs((double)y) <= 0.0))
            fail_msg("P=%d: y = %g, want exactly 0 (f16 partials overflowed?)", p, (double)y);
        assert_clean();
    }
}

/* 64 bf16 dot products of 4096 terms in [-1, 1], unsplit and split 8 ways
 * over the contraction. With f32 partials both round one f32 sum (in a
 * different order) to bf16 once, so they agree except where the sums
 * straddle a rounding midpoint; with bf16 partials (--partials native,
 * the third run) each partial was rounded on its own and many results
 * moved by an ulp, but stay within bf16 tolerance of the f32-partials
 * run. All are also held against a double reference. */
static void test_bf16_split_precision(void **state)
{
    (void)state;
    enum { K = 4096, N = 64 };
    const char *ein = e2e_write_file("bf16.ein", "dims m=1 k=4096 n=64\ndtype bf16\n"
                                                 "input a[m, k]\ninput b[k, n]\n"
                                                 "y = matmul(a, b)\nsave y\n");
    static float a[K], b[K * N];
    static uint16_t ah[K], bh[K * N];
    unsigned s = 12345;
    for (int i = 0; i < K; i++) {
        s = s * 1103515245u + 12345u;
        a[i] = (float)((int)((s >> 16) % 2001) - 1000) / 1000.0f;
    }
    for (int i = 0; i < K * N; i++) {
        s = s * 1103515245u + 12345u;
        b[i] = (float)((int)((s >> 16) % 2001) - 1000) / 1000.0f;
    }
    ein_dtype_from_f32(EIN_BF16, a, ah, K);
    ein_dtype_from_f32(EIN_BF16, b, bh, K * N);
    ein_dtype_to_f32(EIN_BF16, ah, a, K); /* the reference sees what einrun sees */
    ein_dtype_to_f32(EIN_BF16, bh, b, K * N);
    static double ref[N], mag[N];
    for (int j = 0; j < N; j++) {
        ref[j] = mag[j] = 0;
        for (int i = 0; i < K; i++) {
            ref[j] += (double)a[i] * (double)b[i * N + j];
            mag[j] += fabs((double)a[i] * (double)b[i * N + j]);
        }
    }
    char path[600];
    ein_error err = {0};
    snprintf(path, sizeof path, "%s/a.npy", e2e_scratch());
    assert_int_equal(ein_npy_save(path, EIN_BF16, 2, (int64_t[]){1, K}, ah, &err), 0);
    snprintf(path, sizeof path, "%s/b.npy", e2e_scratch());
    assert_int_equal(ein_npy_save(path, EIN_BF16, 2, (int64_t[]){K, N}, bh, &err), 0);
    static float y[3][N];
    double maxerr[3] = {0, 0, 0};
    int ps[3] = {1, 8, 8};
    for (int r = 0; r < 3; r++) {
        /* the paper's plan (comm) splits the contraction; the default
         * (time) need not */
        const char *bind[] = {"--input", "a=a.npy", "--input", "b=b.npy",
                              "--output", "y=y.npy", "--explain", "--objective", "comm",
                              "--partials", r == 2 ? "native" : "f32"};
        char out[8192];
        int rc = run_einrun(ps[r], ein, bind, 11, out, sizeof out);
        if (rc != 0)
            fail_msg("P=%d: einrun exit %d: %s", ps[r], rc, out);
        if (r >= 1 && !strstr(out, "k:8"))
            fail_msg("P=8: the plan does not split the contraction 8 ways: %s", out);
        snprintf(path, sizeof path, "%s/y.npy", e2e_scratch());
        ein_npy_info info;
        void *data = NULL;
        assert_int_equal(ein_npy_load(path, &info, &data, &err), 0);
        ein_dtype_to_f32(EIN_BF16, data, y[r], N);
        free(data);
        for (int j = 0; j < N; j++) {
            /* Relative to the sum of |terms|: sums cancel, partials do not. */
            double e = fabs((double)y[r][j] - ref[j]) / mag[j];
            if (!(e <= 1.0 / 128)) /* NaN or garbage */
                fail_msg("P=%d run %d: y[%d] = %g, reference %g", ps[r], r, j, (double)y[r][j],
                         ref[j]);
            if (e > maxerr[r])
                maxerr[r] = e;
            /* native partials: within bf16 tolerance of the f32-partials
             * run (each of the 8 partials and each aggregation step
             * rounds by at most 2^-9 of what it holds) */
            double d = fabs((double)y[2][j] - (double)y[1][j]) / mag[j];
            if (r == 2 && !(d <= 1.0 / 64))
                fail_msg("native partials: y[%d] = %g, with f32 partials %g", j,
                         (double)y[2][j], (double)y[1][j]);
        }
        assert_clean();
    }
    int differ = 0, native = 0;
    for (int j = 0; j < N; j++) {
        differ += y[0][j] != y[1][j];
        native += y[2][j] != y[1][j];
    }
    print_message("# bf16 relative error: P=1 %.3g, P=8 %.3g, P=8 native partials %.3g; "
                  "of %d results, P=8 differs from P=1 in %d, native from f32 partials in %d\n",
                  maxerr[0], maxerr[1], maxerr[2], N, differ, native);
    if (differ > 2)
        fail_msg("P=8 differs from P=1 in %d of %d results: partials lost precision", differ, N);
    /* bf16 partials really were rounded: some results moved */
    if (native == 0)
        fail_msg("--partials native gives the f32-partials results exactly: not bf16 partials?");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_saved_input),
        cmocka_unit_test(test_f16_partials_do_not_overflow),
        cmocka_unit_test(test_bf16_split_precision),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    e2e_scratch_remove();
    return rc;
}
