/* tests/kernels/test_kn_stream.c — kn_stream_mm (a few rows by a weight
 * matrix in f32, f16 or bf16) against a double-precision reference.
 *
 * Both weight layouts ([n, k] and [k, n]), 1 to 17 rows, odd sizes that
 * leave every vector tail, leading dimensions past the row and data that
 * starts one element off alignment. The reference widens f16 and bf16
 * with its own decoder (ldexp of the bit fields), not the library's, and
 * sums in double; C starts as NaN around the written part, which must stay
 * NaN. Each case runs on the vector path (where this CPU has AVX2, FMA and
 * F16C) and on the portable one. EIN_TEST_SEED overrides the seed. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ir/ein_dtype.h"
#include "kernels/cpu/kn_internal.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;

static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static double rnd_unit(void)
{
    return (double)(rnd() >> 11) / (double)(1ull << 53) * 2.0 - 1.0;
}

/* Independent decoders of the 16-bit formats. */
static double ref_f16(uint16_t h)
{
    int s = h >> 15, e = (h >> 10) & 31, f = h & 1023;
    double v = e == 0 ? ldexp(f, -24) : e == 31 ? (f ? NAN : INFINITY) : ldexp(1024 + f, e - 25);
    return s ? -v : v;
}

static double ref_bf16(uint16_t b)
{
    int s = b >> 15, e = (b >> 7) & 255, f = b & 127;
    double v = e == 0 ? ldexp(f, -133) : e == 255 ? (f ? NAN : INFINITY)
                                                  : ldexp(128 + f, e - 134);
    return s ? -v : v;
}

/* A random weight of dtype dt stored at element i of w; its exact value. */
static double put_w(void *w, ein_dtype dt, int64_t i, double v)
{
    if (dt == EIN_F32) {
        ((float *)w)[i] = (float)v;
        return (double)(float)v;
    }
    uint16_t h = dt == EIN_F16 ? ein_f32_to_f16((float)v) : ein_f32_to_bf16((float)v);
    ((uint16_t *)w)[i] = h;
    return dt == EIN_F16 ? ref_f16(h) : ref_bf16(h);
}

static int forced_portable;

static int setup_vector(void **state)
{
    (void)state;
    forced_portable = 0;
    kn_stream_force_portable(0);
    return 0;
}

static int setup_portable(void **state)
{
    (void)state;
    forced_portable = 1;
    kn_stream_force_portable(1);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    kn_stream_force_portable(0);
    return 0;
}

/* One product: m rows of k by a weight of n outputs in dtype dt and layout
 * nk, with padded leading dimensions and an unaligned start. */
static void check_mm(int64_t m, int64_t n, int64_t k, ein_dtype dt, int nk, int pad, int off)
{
    size_t es = ein_dtype_size(dt);
    int64_t lda = k + pad, ldb = (nk ? k : n) + pad, ldc = n + pad;
    int64_t nb = (nk ? n : k) * ldb + off;
    float *a = malloc((size_t)(m * lda + off + 1) * sizeof(float));
    void *wb = malloc((size_t)(nb + 1) * es);
    float *c = malloc((size_t)(m * ldc + off + 1) * sizeof(float));
    double *wv = malloc((size_t)(n * k + 1) * sizeof(double));
    double *av = malloc((size_t)(m * k + 1) * sizeof(double));
    assert_non_null(a);
    assert_non_null(wb);
    assert_non_null(c);
    assert_non_null(wv);
    assert_non_null(av);
    float *a0 = a + off, *c0 = c + off;
    void *b0 = (char *)wb + (size_t)off * es;
    for (int64_t r = 0; r < m; r++)
        for (int64_t i = 0; i < k; i++)
            av[r * k + i] = a0[r * lda + i] = (float)rnd_unit();
    for (int64_t j = 0; j < n; j++)
        for (int64_t i = 0; i < k; i++)
            wv[j * k + i] = put_w(b0, dt, nk ? j * ldb + i : i * ldb + j, rnd_unit() * 4.0);
    for (int64_t i = 0; i < m * ldc + off + 1; i++)
        c[i] = NAN;
    kn_stream_mm(m, n, k, a0, lda, b0, dt, nk, ldb, c0, ldc);
    for (int64_t r = 0; r < m; r++)
        for (int64_t j = 0; j < ldc; j++) {
            float got = c0[r * ldc + j];
            if (j >= n) {   /* the padding is never written */
                if (!isnan(got)) {
                    print_error("m %lld n %lld k %lld: padding [%lld, %lld] written\n",
                                (long long)m, (long long)n, (long long)k, (long long)r,
                                (long long)j);
                    fail();
                }
                continue;
            }
            double want = 0.0, mag = 0.0;
            for (int64_t i = 0; i < k; i++) {
                want += av[r * k + i] * wv[j * k + i];
                mag += fabs(av[r * k + i] * wv[j * k + i]);
            }
            double d = fabs((double)got - want);
            /* f32 sums of k terms: |error| <= (k + 1) u sum |a b|, u = 2^-24 */
            if (!(d <= (double)(k + 1) * 0x1p-24 * mag + 1e-30)) {
                print_error("%s %s m %lld n %lld k %lld pad %d off %d%s: C[%lld, %lld] = %.9g, "
                            "expected %.9g (scale %.3g)\n", ein_dtype_name(dt),
                            nk ? "[n, k]" : "[k, n]", (long long)m, (long long)n,
                            (long long)k, pad, off, forced_portable ? " (portable)" : "",
                            (long long)r, (long long)j, got, want, mag);
                fail();
            }
        }
    if (off > 0 && !isnan(c[0]))
        fail_msg("the element before C written");
    free(a);
    free(wb);
    free(c);
    free(wv);
    free(av);
}

static const ein_dtype dts[] = {EIN_F32, EIN_F16, EIN_BF16};

static void test_sizes(void **state)
{
    (void)state;
    static const int64_t ms[] = {1, 2, 3, 5, 16, 17};
    static const int64_t ns[] = {1, 3, 4, 5, 7, 8, 9, 31, 513, 1031};
    static const int64_t ks[] = {1, 7, 8, 9, 15, 16, 33, 100, 257};
    for (int di = 0; di < 3; di++)
        for (int nk = 0; nk < 2; nk++)
            for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++)
                for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++)
                    for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++) {
                        int pad = (int)(rnd() % 3), off = (int)(rnd() % 2);
                        check_mm(ms[mi], ns[ni], ks[ki], dts[di], nk, pad, off);
                    }
}

/* A decode step's shapes (one and a few rows of 768 by 2048 outputs) and
 * more columns than one block of the [k, n] loop. */
static void test_model_shapes(void **state)
{
    (void)state;
    for (int di = 0; di < 3; di++)
        for (int nk = 0; nk < 2; nk++) {
            check_mm(1, 2048, 768, dts[di], nk, 0, 0);
            check_mm(4, 768, 2048, dts[di], nk, 0, 1);
            /* past one block of columns of a [k, n] weight (2048) */
            check_mm(3, 4111, 13, dts[di], nk, 1, 1);
        }
}

/* k == 0 writes zeros; m or n 0 writes nothing. */
static void test_empty(void **state)
{
    (void)state;
    float a[4] = {1, 2, 3, 4}, c[6];
    uint16_t w[4] = {0};
    for (int nk = 0; nk < 2; nk++) {
        for (int i = 0; i < 6; i++)
            c[i] = NAN;
        kn_stream_mm(2, 3, 0, a, 1, w, EIN_BF16, nk, 1, c, 3);
        for (int i = 0; i < 6; i++)
            assert_true(c[i] == 0.0f);
        c[0] = NAN;
        kn_stream_mm(0, 3, 2, a, 2, w, EIN_BF16, nk, 3, c, 3);
        kn_stream_mm(2, 0, 2, a, 2, w, EIN_BF16, nk, 3, c, 3);
        assert_true(isnan(c[0]));
    }
}

/* Every 16-bit pattern (NaN aside) widened exactly, at positions in both
 * halves of a vector and in the tail: a one-hot row picks the one nonzero
 * weight of each row, so C is its value (subnormals, zeros of both signs,
 * the largest finite values, infinities). */
static void test_widen_exact(void **state)
{
    (void)state;
    enum { N = 1024, K = 17 };   /* 16 in vectors, 1 in the tail */
    static const int picks[] = {0, 5, 10, 15, 16};
    uint16_t *w = malloc((size_t)N * K * sizeof *w);
    float a[K], c[N];
    assert_non_null(w);
    for (int di = 1; di < 3; di++) {
        ein_dtype dt = dts[di];
        for (uint32_t base = 0; base < 65536; base += N) {
            for (size_t pi = 0; pi < sizeof picks / sizeof *picks; pi++) {
                int pick = picks[pi];
                /* row j holds the pattern base + j at `pick`, zeros elsewhere */
                for (int j = 0; j < N; j++)
                    for (int i = 0; i < K; i++)
                        w[j * K + i] = i == pick ? (uint16_t)(base + (uint32_t)j) : 0;
                for (int i = 0; i < K; i++)
                    a[i] = i == pick ? 1.0f : 0.0f;
                kn_stream_mm(1, N, K, a, K, w, dt, 1, K, c, N);
                for (int j = 0; j < N; j++) {
                    uint16_t h = w[j * K + pick];
                    double want = dt == EIN_F16 ? ref_f16(h) : ref_bf16(h);
                    if (isnan(want))
                        continue;
                    /* (a zero's sign is the sum's: +0 + -0 is +0) */
                    if (!((double)c[j] == want) ||
                        (want != 0.0 && !signbit(c[j]) != !signbit(want))) {
                        print_error("%s 0x%04x at %d widened to %.9g, expected %.9g%s\n",
                                    ein_dtype_name(dt), h, pick, c[j], want,
                                    forced_portable ? " (portable)" : "");
                        fail();
                    }
                }
            }
        }
    }
    free(w);
}

int main(void)
{
    const char *seed = getenv("EIN_TEST_SEED");
    if (seed && *seed)
        rng = strtoull(seed, NULL, 0) | 1;
    printf("# seed %#llx; vector path on this CPU: %s\n", (unsigned long long)rng,
           kn_stream_vector() ? "yes (AVX2, FMA, F16C)" : "no (portable only)");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_sizes, setup_vector, teardown),
        cmocka_unit_test_setup_teardown(test_model_shapes, setup_vector, teardown),
        cmocka_unit_test_setup_teardown(test_empty, setup_vector, teardown),
        cmocka_unit_test_setup_teardown(test_widen_exact, setup_vector, teardown),
        cmocka_unit_test_setup_teardown(test_sizes, setup_portable, teardown),
        cmocka_unit_test_setup_teardown(test_model_shapes, setup_portable, teardown),
        cmocka_unit_test_setup_teardown(test_empty, setup_portable, teardown),
        cmocka_unit_test_setup_teardown(test_widen_exact, setup_portable, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
