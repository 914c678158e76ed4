/* tests/kernels/test_kn_quant.c — quantized weights (q8_0, q4_0, f8e4m3;
 * issue 36):
 * the einsum kernel reading them against a double reference on weights
 * dequantised by an independent decoder of ggml's block layouts, on the
 * AVX2 path (where the CPU has it) and the portable one, for 1 to 40 rows
 * (stream and dequantise-a-tile + sgemm); byte counts and unit boxes; the
 * refusals (a quantized a, another einsum form, a misaligned k interval).
 * tests/python/test_quant.py checks the quantizers' bytes against NumPy.
 * The AVX2 path rounds the activations per block of 32 to int16 for q8_0
 * (scale max|x| / 32767) and to int8 for q4_0 (max|x| / 127,
 * kernels/cpu/kn_quant.c); the tolerance adds that rounding's bound
 * (act_levels below). f8e4m3 (an f32 scale and 128 OCP e4m3fn bytes per
 * block): its codes against the format's formula, exhaustively; rounding
 * from f32 against a brute-force nearest-code search; its products (f32
 * activations on both paths) against the same double reference. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/ir/ein_dtype.h"
#include "kernels/cpu/kn_internal.h"
#include "common/ir/ein_program_int.h"
#include "kernels/kn_cpu.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static float rnd_unit(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
}

/* f16 bits to double by the bit fields (not the library's decoder). */
static double f16(const uint8_t *p)
{
    unsigned h = (unsigned)p[0] | (unsigned)p[1] << 8;
    int e = (int)(h >> 10 & 31), m = (int)(h & 1023);
    double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return h & 0x8000 ? -v : v;
}

/* Element i of a row of blocks, decoded from ggml's layout. */
static double deq(ein_dtype t, const uint8_t *row, int64_t i)
{
    if (t == EIN_Q8_0) {
        const uint8_t *b = row + (i / 32) * 34;
        return f16(b) * (double)(int8_t)b[2 + i % 32];
    }
    const uint8_t *b = row + (i / 32) * 18;
    int j = (int)(i % 32);
    int q = j < 16 ? (b[2 + j] & 15) : (b[2 + j - 16] >> 4);
    return f16(b) * (q - 8);
}

/* The AVX2 path's activation levels per block of 32 for t. */
static double act_levels(ein_dtype t)
{
    return t == EIN_Q8_0 ? 32767.0 : 127.0;
}

/* The double reference of one output: sum over i < k of x[i] times
 * element i of a quantized row; *mag gets the sum of the products'
 * magnitudes and *act the AVX2 path's bound for its rounded activations
 * (per block of 32, at most half of max|x| / act_levels each, the scale
 * itself f32: 2^-20 relative more, generously). */
static double ref_dot(ein_dtype t, const uint8_t *row, const float *x, int64_t k, double *mag,
                      double *act)
{
    double s = 0;
    *mag = 0;
    *act = 0;
    for (int64_t i0 = 0; i0 < k; i0 += 32) {
        double xmax = 0, wsum = 0;
        for (int64_t i = i0; i < i0 + 32; i++) {
            const double v = deq(t, row, i), xv = x[i];
            s += xv * v;
            *mag += fabs(xv * v);
            xmax = fabs(xv) > xmax ? fabs(xv) : xmax;
            wsum += fabs(v);
        }
        *act += wsum * xmax / act_levels(t) * (0.5 + 0x1p-20);
    }
    return s;
}

static void check_product(ein_dtype t, int64_t m, int64_t n, int64_t k, int portable)
{
    float *x = malloc(sizeof(float) * (size_t)(m * k)), *w = malloc(sizeof(float) * (size_t)(n * k));
    float *y = malloc(sizeof(float) * (size_t)(m * n));
    size_t rb = (size_t)ein_dtype_bytes(t, (uint64_t)k);
    uint8_t *q = malloc(rb * (size_t)n);
    for (int64_t i = 0; i < m * k; i++)
        x[i] = rnd_unit();
    for (int64_t i = 0; i < n * k; i++)
        w[i] = rnd_unit() * (i % 7 == 0 ? 3.0f : 1.0f);
    for (int64_t j = 0; j < n; j++)
        ein_dtype_from_f32(t, w + j * k, q + (size_t)j * rb, (size_t)k);
    kn_block a = {.data = x, .dtype = EIN_F32, .box = {.rank = 2, .lo = {0, 0}, .hi = {m, k}}};
    kn_block b = {.data = q, .dtype = t, .box = {.rank = 2, .lo = {0, 0}, .hi = {n, k}}};
    kn_block o = {.data = y, .dtype = EIN_F32, .box = {.rank = 2, .lo = {0, 0}, .hi = {m, n}}};
    ein_error err = {0};
    kn_stream_force_portable(portable);
    assert_int_equal(kn_cpu_einsum("ij,kj->ik", &a, &b, &o, &err), 0);
    kn_stream_force_portable(0);
    for (int64_t r = 0; r < m; r++)
        for (int64_t j = 0; j < n; j++) {
            /* f32 sums, plus (AVX2 path) the activations' rounding */
            double mag, act;
            const double s = ref_dot(t, q + (size_t)j * rb, x + r * k, k, &mag, &act);
            double d = fabs(s - (double)y[r * n + j]);
            if (!(d <= 1e-5 * mag + (portable ? 0.0 : act) + 1e-6))
                fail_msg("%s m=%lld row %lld col %lld: got %g want %g (portable %d)",
                         ein_dtype_name(t), (long long)m, (long long)r, (long long)j,
                         (double)y[r * n + j], s, portable);
        }
    /* The quantized values are close to the weights: |w - deq| <= d / 2
     * (q8_0; plus |q| <= 127 times the f16 rounding of d, 2^-11 relative)
     * or d (q4_0, whose clamp at 15 costs the largest opposite element up
     * to d) with d the block's scale. */
    for (int64_t j = 0; j < n; j++)
        for (int64_t i = 0; i < k; i++) {
            const uint8_t *blk = q + (size_t)j * rb + (size_t)(i / 32) * (t == EIN_Q8_0 ? 34 : 18);
            double d = fabs(f16(blk)) * (t == EIN_Q8_0 ? 0.5 + 128.0 / 2048 : 1.0 + 9.0 / 2048) + 1e-7;
            double e = fabs(deq(t, q + (size_t)j * rb, i) - (double)w[j * k + i]);
            if (!(e <= d))
                fail_msg("%s: element %lld of row %lld off by %g (scale bound %g)",
                         ein_dtype_name(t), (long long)i, (long long)j, e, d);
        }
    free(x);
    free(w);
    free(y);
    free(q);
}

static void test_products(void **state)
{
    (void)state;
    const ein_dtype ts[2] = {EIN_Q8_0, EIN_Q4_0};
    const int64_t ms[5] = {1, 2, 5, 16, 40};
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 5; b++)
            for (int p = 0; p < 2; p++)
                check_product(ts[a], ms[b], 70, 96, p);
    check_product(EIN_Q8_0, 1, 3, 32, 0);
    check_product(EIN_Q4_0, 3, 130, 320, 0);
}

static void test_bytes(void **state)
{
    (void)state;
    assert_int_equal(ein_dtype_bytes(EIN_Q8_0, 64), 68);
    assert_int_equal(ein_dtype_bytes(EIN_Q4_0, 96), 54);
    assert_int_equal(ein_dtype_bytes(EIN_F32, 3), 12);
    assert_int_equal(ein_dtype_size(EIN_Q8_0), 0);
    assert_int_equal(ein_dtype_block(EIN_Q4_0), 32);
    assert_true(ein_dtype_is_block(EIN_Q8_0) && !ein_dtype_is_block(EIN_BF16));
    assert_false(ein_dtype_is_float(EIN_Q8_0));
    assert_true(ein_dtype_kernel_ok(EIN_Q8_0, EIN_KERNEL_EINSUM));
    assert_false(ein_dtype_kernel_ok(EIN_Q8_0, EIN_KERNEL_SLICE));
    assert_false(ein_dtype_kernel_ok(EIN_Q4_0, EIN_KERNEL_UNARY));
    ein_dtype t;
    assert_int_equal(ein_dtype_parse("q4_0", 4, &t), 0);
    assert_int_equal(t, EIN_Q4_0);
    ein_box b = {.rank = 2, .lo = {3, 32}, .hi = {5, 96}}, u;
    assert_int_equal(ein_dtype_unit_box(EIN_Q8_0, &b, &u), 34);
    assert_int_equal(u.lo[1], 1);
    assert_int_equal(u.hi[1], 3);
    assert_int_equal(u.lo[0], 3);
    b.lo[1] = 16;
    assert_int_equal(ein_dtype_unit_box(EIN_Q8_0, &b, &u), 0);
    uint64_t bytes;
    assert_non_null(ein_buffer_box_bytes(&b, EIN_Q8_0, &bytes));
    b.lo[1] = 0;
    assert_null(ein_buffer_box_bytes(&b, EIN_Q4_0, &bytes));
    assert_int_equal(bytes, 2 * 3 * 18);
}

static void test_refusals(void **state)
{
    (void)state;
    uint8_t q[2 * 68] = {0};
    float x[64] = {0}, y[4] = {0};
    ein_error err = {0};
    kn_block a = {.data = x, .dtype = EIN_F32, .box = {.rank = 2, .lo = {0, 0}, .hi = {1, 64}}};
    kn_block b = {.data = q, .dtype = EIN_Q8_0, .box = {.rank = 2, .lo = {0, 0}, .hi = {2, 64}}};
    kn_block o = {.data = y, .dtype = EIN_F32, .box = {.rank = 2, .lo = {0, 0}, .hi = {1, 2}}};
    assert_int_equal(kn_cpu_einsum("ij,kj->ik", &a, &b, &o, &err), 0);
    /* [in, out] weights: not the quantized form */
    kn_block b2 = {.data = q, .dtype = EIN_Q8_0, .box = {.rank = 2, .lo = {0, 0}, .hi = {64, 32}}};
    kn_block o2 = {.data = y, .dtype = EIN_F32, .box = {.rank = 2, .lo = {0, 0}, .hi = {1, 32}}};
    assert_int_equal(kn_cpu_einsum("ij,jk->ik", &a, &b2, &o2, &err), EIN_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "q8_0"));
    /* a quantized a */
    assert_int_equal(kn_cpu_einsum("kj,ij->ik", &b, &a, &o2, &err), EIN_EUNSUPPORTED);
    /* a k interval off the blocks */
    kn_block a3 = {.data = x, .dtype = EIN_F32, .box = {.rank = 2, .lo = {0, 16}, .hi = {1, 48}}};
    kn_block b3 = {.data = q, .dtype = EIN_Q8_0, .box = {.rank = 2, .lo = {0, 16}, .hi = {2, 48}}};
    assert_int_equal(kn_cpu_einsum("ij,kj->ik", &a3, &b3, &o, &err), EIN_ESHAPE);
    /* a NaN activation stays NaN on both paths */
    x[5] = NAN;
    for (int p = 0; p < 2; p++) {
        kn_stream_force_portable(p);
        assert_int_equal(kn_cpu_einsum("ij,kj->ik", &a, &b, &o, &err), 0);
        assert_true(isnan(y[0]) && isnan(y[1]));
    }
    kn_stream_force_portable(0);
    x[5] = 0;
    /* other kernels refuse it through the dtype table */
    kn_block o4 = {.data = q, .dtype = EIN_Q8_0, .box = b.box};
    assert_true(kn_cpu_unary(EIN_UN_RELU, 0.0, &b, &o4, &err) < 0);
}

/* Edges of the AVX2 path's integer products on 1 and 3 rows: a q8_0
 * weight of -128 (valid bytes, though the quantizer never writes it),
 * q4_0's extreme nibbles 0 and 15, and a NaN or infinite activation
 * giving NaN in its row only (the block's scale is NaN or inf). */
static void test_edges(void **state)
{
    (void)state;
    const ein_dtype ts[2] = {EIN_Q8_0, EIN_Q4_0};
    for (int a = 0; a < 2; a++)
        for (int64_t m = 1; m <= 3; m += 2)
            for (int p = 0; p < 2; p++) {
                const ein_dtype t = ts[a];
                const int64_t n = 5, k = 64;
                const size_t rb = (size_t)ein_dtype_bytes(t, (uint64_t)k), bb = rb / 2;
                uint8_t q[5 * 68];
                float x[3 * 64], y[3 * 5];
                for (int64_t j = 0; j < n; j++)
                    for (int64_t blk = 0; blk < 2; blk++) {
                        uint8_t *b = q + (size_t)j * rb + (size_t)blk * bb;
                        b[0] = 0x00;   /* f16 0.5 (0x3800) */
                        b[1] = 0x38;
                        for (size_t i = 2; i < bb; i++)   /* -128 / 0 and 15 nibbles */
                            b[i] = (uint8_t)((i + (size_t)j) % 3 == 0 ? 0x80 : (i + j) % 3 == 1 ? 0xF0 : 0x7F);
                    }
                for (int64_t i = 0; i < m * k; i++)
                    x[i] = rnd_unit();
                x[k + 40] = m > 1 ? NAN : x[k + 40];
                x[2 * k + 3] = m > 1 ? INFINITY : x[2 * k + 3];
                kn_block ab = {.data = x, .dtype = EIN_F32, .box = {.rank = 2, .lo = {0, 0}, .hi = {m, k}}};
                kn_block bb2 = {.data = q, .dtype = t, .box = {.rank = 2, .lo = {0, 0}, .hi = {n, k}}};
                kn_block ob = {.data = y, .dtype = EIN_F32, .box = {.rank = 2, .lo = {0, 0}, .hi = {m, n}}};
                ein_error err = {0};
                kn_stream_force_portable(p);
                assert_int_equal(kn_cpu_einsum("ij,kj->ik", &ab, &bb2, &ob, &err), 0);
                kn_stream_force_portable(0);
                for (int64_t j = 0; j < n; j++) {
                    double mag, act;
                    const double s = ref_dot(t, q + (size_t)j * rb, x, k, &mag, &act);
                    double d = fabs(s - (double)y[j]);
                    if (!(d <= 1e-5 * fabs(s) + 1e-3 + (p ? 0.0 : act)))
                        fail_msg("%s m=%lld col %lld: got %g want %g (portable %d)", ein_dtype_name(t),
                                 (long long)m, (long long)j, (double)y[j], s, p);
                    if (m > 1)
                        assert_true(isnan(y[n + j]));
                    if (m > 1 && !p)   /* inf: 0 * inf in the integer form, NaN */
                        assert_true(isnan(y[2 * n + j]));
                }
            }
}

/* One activation row (a decode step's kernels, four weight rows per pass
 * and the rows left over): the extremes of the integer sums (q8_0 weights
 * -128 and 127, q4_0 nibbles 0 and 15, against activations all at their
 * block's largest magnitude) give exact results; a NaN activation makes
 * every output NaN; an infinite one NaN on the AVX2 path (its block's
 * scale is inf, every rounded activation 0, and 0 * inf is NaN) and, as in
 * f32, inf of the weights' sign on the portable one. */
static void test_one_row(void **state)
{
    (void)state;
    const ein_dtype ts[2] = {EIN_Q8_0, EIN_Q4_0};
    enum { N = 9, K = 256 };
    for (int a = 0; a < 2; a++)
        for (int p = 0; p < 2; p++)
            for (int bad = 0; bad < 3; bad++) {
                const ein_dtype t = ts[a];
                const size_t rb = (size_t)ein_dtype_bytes(t, K), bb = t == EIN_Q8_0 ? 34 : 18;
                uint8_t q[N * 34 * (K / 32)];
                float x[K], y[N];
                for (int64_t j = 0; j < N; j++)
                    for (int64_t blk = 0; blk < K / 32; blk++) {
                        uint8_t *b = q + (size_t)j * rb + (size_t)blk * bb;
                        b[0] = 0x00;   /* f16 2.0 (0x4000) */
                        b[1] = 0x40;
                        /* row j: every weight the smallest (j even) or the
                         * largest (j odd) of its dtype */
                        memset(b + 2, t == EIN_Q8_0 ? (j % 2 ? 0x7F : 0x80) : (j % 2 ? 0xFF : 0x00),
                               bb - 2);
                    }
                for (int i = 0; i < K; i++)   /* +-3, so every activation is its block's max */
                    x[i] = i % 3 ? 3.0f : -3.0f;
                if (bad == 1)
                    x[200] = NAN;
                if (bad == 2)
                    x[7] = INFINITY;
                kn_block ab = {.data = x, .dtype = EIN_F32, .box = {.rank = 2, .lo = {0, 0}, .hi = {1, K}}};
                kn_block b2 = {.data = q, .dtype = t, .box = {.rank = 2, .lo = {0, 0}, .hi = {N, K}}};
                kn_block ob = {.data = y, .dtype = EIN_F32, .box = {.rank = 2, .lo = {0, 0}, .hi = {1, N}}};
                ein_error err = {0};
                kn_stream_force_portable(p);
                assert_int_equal(kn_cpu_einsum("ij,kj->ik", &ab, &b2, &ob, &err), 0);
                kn_stream_force_portable(0);
                for (int64_t j = 0; j < N; j++) {
                    if (bad == 2 && p) {
                        if (!(isinf(y[j]) && (y[j] > 0) == (j % 2 == 1)))
                            fail_msg("%s portable: column %lld is %g, not %sinf", ein_dtype_name(t),
                                     (long long)j, (double)y[j], j % 2 ? "" : "-");
                        continue;
                    }
                    if (bad) {
                        if (!isnan(y[j]))
                            fail_msg("%s portable %d: column %lld is %g, not NaN (%s activation)",
                                     ein_dtype_name(t), p, (long long)j, (double)y[j],
                                     bad == 1 ? "a NaN" : "an infinite");
                        continue;
                    }
                    /* weight w = 2 * q: q8_0 -128 or 127; q4_0 nibble 0 or 15, -8 or 7 */
                    const double w = 2.0 * (t == EIN_Q8_0 ? (j % 2 ? 127 : -128) : (j % 2 ? 7 : -8));
                    double s = 0;
                    for (int i = 0; i < K; i++)
                        s += w * (double)x[i];
                    if (!(fabs(s - (double)y[j]) <= 1e-6 * fabs(s)))
                        fail_msg("%s portable %d: column %lld is %g, want %g", ein_dtype_name(t), p,
                                 (long long)j, (double)y[j], s);
                }
            }
}

/* ---- f8e4m3 ------------------------------------------------------------ */

/* An OCP e4m3fn code's value from the format's definition (bias 7, 3
 * mantissa bits, exponent field 0 subnormal, S.1111.111 NaN, no infinity). */
static double e4m3_ref(unsigned b)
{
    const int e = (int)(b >> 3 & 15), m = (int)(b & 7);
    if (e == 15 && m == 7)
        return NAN;
    const double v = e == 0 ? m / 8.0 * ldexp(1.0, -6) : (1.0 + m / 8.0) * ldexp(1.0, e - 7);
    return b & 0x80 ? -v : v;
}

/* The e4m3fn code nearest v (ties to the even code, whose mantissa's last
 * bit is 0), by search over every finite code; finite values past 448
 * saturate, NaN and inf give the NaN code of their sign. */
static unsigned e4m3_nearest(double v)
{
    if (isnan(v) || isinf(v))
        return signbit(v) ? 0xff : 0x7f;
    unsigned best = 0;
    double bd = INFINITY;
    for (unsigned c = 0; c < 256; c++) {
        const double r = e4m3_ref(c);
        if (isnan(r) || !signbit(r) != !signbit(v))
            continue;
        const double d = fabs(r - v);
        if (d < bd || (d == bd && !(c & 1))) {
            bd = d;
            best = c;
        }
    }
    return best;
}

static void test_f8_codes(void **state)
{
    (void)state;
    /* every code to f32 */
    for (unsigned c = 0; c < 256; c++) {
        const double want = e4m3_ref(c);
        const float got = ein_e4m3_to_f32((uint8_t)c);
        if (isnan(want) ? !isnan(got) : !((double)got == want && !signbit(got) == !signbit(want)))
            fail_msg("e4m3 code 0x%02x: got %g want %g", c, (double)got, want);
    }
    assert_true(e4m3_ref(0x7e) == 448.0 && e4m3_ref(0x01) == ldexp(1.0, -9));
    /* every finite code's value, the midpoints between neighbours and a
     * hair either side of them, values past 448, and random ones */
    for (unsigned c = 0; c < 0x7e; c++)
        for (int sgn = 0; sgn < 2; sgn++) {
            const double lo = e4m3_ref(c), hi = e4m3_ref(c + 1), mid = (lo + hi) / 2;
            const double vs[5] = {lo, mid, nextafter(mid, 0), nextafter(mid, 1000), hi};
            for (int i = 0; i < 5; i++) {
                const float f = (float)(sgn ? -vs[i] : vs[i]);   /* all exact in f32 */
                const unsigned want = e4m3_nearest((double)f), got = ein_f32_to_e4m3(f);
                if (got != want)
                    fail_msg("e4m3 of %.9g: got 0x%02x want 0x%02x", (double)f, got, want);
            }
        }
    const float big[6] = {448.0f, 449.0f, 464.0f, 1e6f, 3.4e38f, 1e-30f};
    for (int i = 0; i < 6; i++)
        for (int sgn = 0; sgn < 2; sgn++) {
            const float f = sgn ? -big[i] : big[i];
            assert_int_equal(ein_f32_to_e4m3(f), e4m3_nearest((double)f));
        }
    assert_int_equal(ein_f32_to_e4m3(NAN), 0x7f);
    assert_int_equal(ein_f32_to_e4m3(-INFINITY), 0xff);
    assert_int_equal(ein_f32_to_e4m3(-0.0f), 0x80);
    for (int i = 0; i < 20000; i++) {
        const float f = rnd_unit() * (i % 3 == 0 ? 500.0f : i % 3 == 1 ? 1.0f : 0.02f);
        const unsigned want = e4m3_nearest((double)f), got = ein_f32_to_e4m3(f);
        if (got != want)
            fail_msg("e4m3 of %.9g: got 0x%02x want 0x%02x", (double)f, got, want);
    }
}

/* Blocks: the f32 scale first (little endian) and max|x| / 448, the bytes
 * each x / scale rounded as above; zeros; NaN and inf; the byte counts;
 * the unit box on 128-element blocks. */
static void test_f8_blocks(void **state)
{
    (void)state;
    enum { K = 384 };
    float x[K], y[K];
    uint8_t q[3 * 132];
    for (int i = 0; i < K; i++)
        x[i] = rnd_unit() * (float)(1 + i / 128 * 100);
    x[5] = 0.0f;
    x[130] = -250.0f;   /* block 1's largest magnitude, negative */
    x[131] = 1e-6f;     /* a subnormal code */
    assert_int_equal(ein_dtype_bytes(EIN_F8E4M3, K), 3 * 132);
    assert_int_equal(ein_dtype_block(EIN_F8E4M3), 128);
    assert_true(ein_dtype_is_block(EIN_F8E4M3) && !ein_dtype_is_float(EIN_F8E4M3));
    assert_true(ein_dtype_kernel_ok(EIN_F8E4M3, EIN_KERNEL_EINSUM));
    assert_false(ein_dtype_kernel_ok(EIN_F8E4M3, EIN_KERNEL_SLICE));
    ein_dtype t;
    assert_int_equal(ein_dtype_parse("f8e4m3", 6, &t), 0);
    assert_int_equal(t, EIN_F8E4M3);
    ein_dtype_from_f32(EIN_F8E4M3, x, q, K);
    ein_dtype_to_f32(EIN_F8E4M3, q, y, K);
    for (int b = 0; b < 3; b++) {
        float amax = 0.0f, s;
        for (int j = 0; j < 128; j++)
            amax = fmaxf(amax, fabsf(x[b * 128 + j]));
        const uint8_t *p = q + b * 132;
        const uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                           (uint32_t)p[3] << 24;
        memcpy(&s, &u, 4);
        assert_true(s == amax / 448.0f);
        for (int j = 0; j < 128; j++) {
            const unsigned want = e4m3_nearest((double)(x[b * 128 + j] / s));
            if (p[4 + j] != want)
                fail_msg("block %d element %d: code 0x%02x want 0x%02x", b, j, p[4 + j], want);
            const double v = (double)s * e4m3_ref(p[4 + j]);
            if (!((double)y[b * 128 + j] == (double)(float)v))
                fail_msg("block %d element %d: to f32 %g want %g", b, j, (double)y[b * 128 + j], v);
            /* half a step of the code's binade at most (3 mantissa bits) */
            const double e = fabs(v - (double)x[b * 128 + j]);
            if (!(e <= fabs((double)x[b * 128 + j]) / 16 + (double)s * ldexp(1.0, -10)))
                fail_msg("block %d element %d: error %g", b, j, e);
        }
        assert_int_equal(p[4 + (b == 1 ? 2 : 0)] & 0x7f, b == 1 ? 0x7e : p[4] & 0x7f);
    }
    /* an all-zero block: scale 0, zero codes; NaN and inf elements: the
     * NaN code of their sign, the scale from the finite rest */
    float z[128] = {0}, zy[128];
    uint8_t zq[132];
    memset(zq, 0xAA, sizeof zq);
    ein_dtype_from_f32(EIN_F8E4M3, z, zq, 128);
    for (int i = 0; i < 132; i++)
        assert_int_equal(zq[i], 0);
    z[3] = NAN;
    z[4] = -INFINITY;
    z[5] = 2.0f;
    ein_dtype_from_f32(EIN_F8E4M3, z, zq, 128);
    assert_int_equal(zq[4 + 3], 0x7f);
    assert_int_equal(zq[4 + 4], 0xff);
    assert_int_equal(zq[4 + 5], 0x7e);
    ein_dtype_to_f32(EIN_F8E4M3, zq, zy, 128);
    assert_true(isnan(zy[3]) && isnan(zy[4]) && zy[5] == 2.0f && zy[6] == 0.0f);
    /* unit boxes on blocks of 128 */
    ein_box b = {.rank = 2, .lo = {0, 128}, .hi = {4, 384}}, u;
    assert_int_equal(ein_dtype_unit_box(EIN_F8E4M3, &b, &u), 132);
    assert_int_equal(u.lo[1], 1);
    assert_int_equal(u.hi[1], 3);
    b.lo[1] = 32;
    assert_int_equal(ein_dtype_unit_box(EIN_F8E4M3, &b, &u), 0);
    assert_false(ein_dtype_box_ok(EIN_F8E4M3, &b));
}

/* The double reference of one f8e4m3 output from the bytes by the formula. */
static double f8_dot(const uint8_t *row, const float *x, int64_t k, double *mag)
{
    double s = 0;
    *mag = 0;
    for (int64_t i = 0; i < k; i++) {
        const uint8_t *p = row + (i / 128) * 132;
        float sc;
        memcpy(&sc, p, 4);
        const double v = (double)sc * e4m3_ref(p[4 + i % 128]) * (double)x[i];
        s += v;
        *mag += fabs(v);
    }
    return s;
}

/* kn_stream_mm_q on rows longer than the k it reads (ldb of 2k: the first
 * half of each row, as a contraction split would give), 1 and 3
 * activation rows, 10 weight rows (two passes of four and two left over),
 * q8_0, q4_0 and f8e4m3:
 * the loops that prefetch row by row when rows are not contiguous. */
static void test_strided(void **state)
{
    (void)state;
    const ein_dtype ts[3] = {EIN_Q8_0, EIN_Q4_0, EIN_F8E4M3};
    enum { N = 10, K = 128 };
    for (int a = 0; a < 3; a++)
        for (int64_t m = 1; m <= 3; m += 2) {
            const ein_dtype t = ts[a];
            const size_t ldb = (size_t)ein_dtype_bytes(t, 2 * K);
            uint8_t q[N * 34 * (2 * K / 32)];
            float w[2 * K], x[3 * K], y[3 * N];
            for (int64_t j = 0; j < N; j++) {
                for (int i = 0; i < 2 * K; i++)
                    w[i] = rnd_unit();
                ein_dtype_from_f32(t, w, q + (size_t)j * ldb, 2 * K);
            }
            for (int64_t i = 0; i < m * K; i++)
                x[i] = rnd_unit();
            kn_stream_mm_q(m, N, K, x, K, q, t, (int64_t)ldb, y, N);
            for (int64_t r = 0; r < m; r++)
                for (int64_t j = 0; j < N; j++) {
                    /* q8_0/q4_0 round the activations (act bounds it);
                     * f8e4m3 keeps them f32: only the sums' rounding */
                    double mag, act = 0;
                    const double s = t == EIN_F8E4M3
                                         ? f8_dot(q + (size_t)j * ldb, x + r * K, K, &mag)
                                         : ref_dot(t, q + (size_t)j * ldb, x + r * K, K, &mag, &act);
                    const double d = fabs(s - (double)y[r * N + j]);
                    if (!(d <= (t == EIN_F8E4M3 ? 1e-5 * mag + 1e-6 : 1e-5 * fabs(s) + 1e-5 + act)))
                        fail_msg("%s m=%lld row %lld col %lld: got %g want %g", ein_dtype_name(t),
                                 (long long)m, (long long)r, (long long)j, (double)y[r * N + j], s);
                }
        }
}

/* Products on both paths: 1 (four weight rows per pass and the rows left
 * over) to 16 rows streamed, 40 through a dequantised tile and sgemm;
 * activations stay f32, so only the f32 sums' rounding is allowed. */
static void check_f8(int64_t m, int64_t n, int64_t k, int portable)
{
    float *x = malloc(sizeof(float) * (size_t)(m * k)), *w = malloc(sizeof(float) * (size_t)k);
    float *y = malloc(sizeof(float) * (size_t)(m * n));
    const size_t rb = (size_t)ein_dtype_bytes(EIN_F8E4M3, (uint64_t)k);
    uint8_t *q = malloc(rb * (size_t)n);
    for (int64_t i = 0; i < m * k; i++)
        x[i] = rnd_unit();
    for (int64_t j = 0; j < n; j++) {
        for (int64_t i = 0; i < k; i++)   /* subnormal codes too: small weights */
            w[i] = rnd_unit() * (i % 7 == 0 ? 3.0f : i % 5 == 0 ? 0.001f : 1.0f);
        ein_dtype_from_f32(EIN_F8E4M3, w, q + (size_t)j * rb, (size_t)k);
    }
    kn_block a = {.data = x, .dtype = EIN_F32, .box = {.rank = 2, .lo = {0, 0}, .hi = {m, k}}};
    kn_block b = {.data = q, .dtype = EIN_F8E4M3, .box = {.rank = 2, .lo = {0, 0}, .hi = {n, k}}};
    kn_block o = {.data = y, .dtype = EIN_F32, .box = {.rank = 2, .lo = {0, 0}, .hi = {m, n}}};
    ein_error err = {0};
    kn_stream_force_portable(portable);
    assert_int_equal(kn_cpu_einsum("ij,kj->ik", &a, &b, &o, &err), 0);
    kn_stream_force_portable(0);
    for (int64_t r = 0; r < m; r++)
        for (int64_t j = 0; j < n; j++) {
            double mag;
            const double s = f8_dot(q + (size_t)j * rb, x + r * k, k, &mag);
            if (!(fabs(s - (double)y[r * n + j]) <= 1e-5 * mag + 1e-6))
                fail_msg("f8e4m3 m=%lld row %lld col %lld: got %g want %g (portable %d)",
                         (long long)m, (long long)r, (long long)j, (double)y[r * n + j], s,
                         portable);
        }
    free(x);
    free(w);
    free(y);
    free(q);
}

static void test_f8_products(void **state)
{
    (void)state;
    const int64_t ms[5] = {1, 2, 5, 16, 40};
    for (int b = 0; b < 5; b++)
        for (int p = 0; p < 2; p++)
            check_f8(ms[b], 70, 384, p);
    check_f8(1, 3, 128, 0);
}

/* Extremes (every code +-448 and the smallest subnormal, scale 2^-3,
 * exact in f32), a NaN code in one weight row (that column NaN, the
 * others exact, on both paths: the AVX2 loops find it and redo the
 * rows), a NaN activation, and rows longer than the k read (ldb 2k). */
static void test_f8_edges(void **state)
{
    (void)state;
    enum { N = 9, K = 256 };
    const size_t rb = 2 * 132;
    uint8_t q[N * 2 * 132];
    float x[3 * K], y[3 * N];
    for (int64_t m = 1; m <= 3; m += 2)
        for (int p = 0; p < 2; p++)
            for (int bad = 0; bad < 3; bad++) {
                for (int64_t j = 0; j < N; j++)
                    for (int blk = 0; blk < 2; blk++) {
                        uint8_t *b = q + (size_t)j * rb + (size_t)blk * 132;
                        const float s = 0.125f;
                        memcpy(b, &s, 4);
                        memset(b + 4, j % 3 == 0 ? 0x7e : j % 3 == 1 ? 0xfe : 0x01, 128);
                    }
                if (bad == 1)
                    q[4 * rb + 132 + 4 + 77] = 0xff;   /* a NaN code in weight row 4 */
                for (int64_t i = 0; i < m * K; i++)
                    x[i] = (float)((i * 37) % 11) - 5.0f;
                if (bad == 2)
                    x[(m - 1) * K + 9] = NAN;
                kn_block ab = {.data = x, .dtype = EIN_F32, .box = {.rank = 2, .lo = {0, 0}, .hi = {m, K}}};
                kn_block b2 = {.data = q, .dtype = EIN_F8E4M3, .box = {.rank = 2, .lo = {0, 0}, .hi = {N, K}}};
                kn_block ob = {.data = y, .dtype = EIN_F32, .box = {.rank = 2, .lo = {0, 0}, .hi = {m, N}}};
                ein_error err = {0};
                kn_stream_force_portable(p);
                assert_int_equal(kn_cpu_einsum("ij,kj->ik", &ab, &b2, &ob, &err), 0);
                kn_stream_force_portable(0);
                for (int64_t r = 0; r < m; r++)
                    for (int64_t j = 0; j < N; j++) {
                        const double got = (double)y[r * N + j];
                        if ((bad == 1 && j == 4) || (bad == 2 && r == m - 1)) {
                            if (!isnan(got))
                                fail_msg("m=%lld portable %d: [%lld, %lld] is %g, not NaN",
                                         (long long)m, p, (long long)r, (long long)j, got);
                            continue;
                        }
                        const double w = 0.125 * (j % 3 == 0 ? 448.0 : j % 3 == 1 ? -448.0 : ldexp(1.0, -9));
                        double s = 0;
                        for (int i = 0; i < K; i++)
                            s += w * (double)x[r * K + i];
                        if (!(got == s))
                            fail_msg("m=%lld portable %d: [%lld, %lld] is %g, want %g exactly",
                                     (long long)m, p, (long long)r, (long long)j, got, s);
                    }
            }
    /* a k interval off the 128-element blocks (on 32-element ones) */
    kn_block a3 = {.data = x, .dtype = EIN_F32, .box = {.rank = 2, .lo = {0, 32}, .hi = {1, 160}}};
    kn_block b3 = {.data = q, .dtype = EIN_F8E4M3, .box = {.rank = 2, .lo = {0, 32}, .hi = {2, 160}}};
    kn_block o3 = {.data = y, .dtype = EIN_F32, .box = {.rank = 2, .lo = {0, 0}, .hi = {1, 2}}};
    ein_error err = {0};
    assert_int_equal(kn_cpu_einsum("ij,kj->ik", &a3, &b3, &o3, &err), EIN_ESHAPE);
    assert_non_null(strstr(err.msg, "128-element f8e4m3 blocks"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bytes),
        cmocka_unit_test(test_products),
        cmocka_unit_test(test_one_row),
        cmocka_unit_test(test_strided),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_edges),
        cmocka_unit_test(test_f8_codes),
        cmocka_unit_test(test_f8_blocks),
        cmocka_unit_test(test_f8_products),
        cmocka_unit_test(test_f8_edges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
