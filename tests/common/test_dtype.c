/* tests/common/test_dtype.c — f16 / bf16 conversions against independent
 * references: exact decoding by formula, and round-to-nearest-even
 * encoding by searching the neighbouring representable values. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/ir/ein_dtype.h"
#include "common/ir/ein_program.h"

static uint64_t rng_state = 0x1234567887654321ull;
static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* Value of a finite half by formula (exact in double). */
static double ref_f16_value(uint16_t h)
{
    int sign = h >> 15, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    double v = exp == 0 ? ldexp(man, -24) : ldexp(1024 + man, exp - 25);
    return sign ? -v : v;
}

/* Round-to-nearest-even encoding of a finite float: find the two
 * neighbouring magnitudes among all halves (the pattern order is the
 * magnitude order) and pick the nearer, ties to the even pattern. The
 * pattern after the largest finite one (0x7c00, infinity) stands for 2^16,
 * which makes overflow follow the same rule as IEEE. */
static uint16_t ref_f32_to_f16(float f)
{
    double x = fabs((double)f);
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    int lo = 0, hi = 0x7c00; /* invariant: value(lo) <= x < value(hi) */
    if (x >= 65536.0)
        return sign | 0x7c00;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (ref_f16_value((uint16_t)mid) <= x)
            lo = mid;
        else
            hi = mid;
    }
    double vlo = ref_f16_value((uint16_t)lo), vhi = hi == 0x7c00 ? 65536.0 : ref_f16_value((uint16_t)hi);
    double dlo = x - vlo, dhi = vhi - x;
    int pick = dlo < dhi ? lo : dhi < dlo ? hi : (lo & 1 ? hi : lo);
    return sign | (uint16_t)pick;
}

/* The same for bf16, whose values are the floats with 16 zero low bits. */
static uint16_t ref_f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)(u >> 16) & 0x8000;
    uint32_t mag = u & 0x7fffffff;
    uint32_t lo = mag >> 16, hi = lo + 1;
    double x = fabs((double)f);
    double vlo = (double)bits_f32(lo << 16);
    double vhi = hi == 0x7f80 ? ldexp(1.0, 128) : (double)bits_f32(hi << 16);
    double dlo = x - vlo, dhi = vhi - x;
    uint32_t pick = dlo < dhi ? lo : dhi < dlo ? hi : (lo & 1 ? hi : lo);
    return sign | (uint16_t)pick;
}

static void test_f16_decode_all(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = ein_f16_to_f32((uint16_t)h);
        int exp = (h >> 10) & 0x1f, man = h & 0x3ff;
        if (exp == 31 && man) {
            assert_true(isnan(f));
        } else if (exp == 31) {
            assert_true(isinf(f));
            assert_int_equal(!!signbit(f), h >> 15);
        } else {
            assert_true((double)f == ref_f16_value((uint16_t)h));
            assert_int_equal(!!signbit(f), h >> 15); /* -0 stays -0 */
        }
    }
}

static void test_f16_roundtrip_all(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = ein_f16_to_f32((uint16_t)h);
        uint16_t back = ein_f32_to_f16(f);
        if (isnan(f)) {
            assert_int_equal(back & 0x7c00, 0x7c00);
            assert_true((back & 0x3ff) != 0);
        } else {
            assert_int_equal(back, h);
        }
    }
}

static void test_f16_known(void **state)
{
    (void)state;
    assert_int_equal(ein_f32_to_f16(1.0f), 0x3c00);
    assert_int_equal(ein_f32_to_f16(-2.0f), 0xc000);
    assert_int_equal(ein_f32_to_f16(0.0f), 0x0000);
    assert_int_equal(ein_f32_to_f16(-0.0f), 0x8000);
    assert_int_equal(ein_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(ein_f32_to_f16(65519.99f), 0x7bff);   /* below the midpoint */
    assert_int_equal(ein_f32_to_f16(65520.0f), 0x7c00);    /* tie rounds to even = inf */
    assert_int_equal(ein_f32_to_f16(1e10f), 0x7c00);
    assert_int_equal(ein_f32_to_f16(-1e10f), 0xfc00);
    assert_int_equal(ein_f32_to_f16(INFINITY), 0x7c00);
    assert_int_equal(ein_f32_to_f16(-INFINITY), 0xfc00);
    uint16_t n = ein_f32_to_f16(NAN);
    assert_int_equal(n & 0x7c00, 0x7c00);
    assert_true(n & 0x3ff);
    assert_true(isnan(ein_f16_to_f32(n)));
    /* rounding ties: 1 + 2^-11 is halfway between 0x3c00 and 0x3c01 */
    assert_int_equal(ein_f32_to_f16(1.0f + ldexpf(1, -11)), 0x3c00);
    assert_int_equal(ein_f32_to_f16(1.0f + 3 * ldexpf(1, -11)), 0x3c02);
    assert_int_equal(ein_f32_to_f16(1.0f + ldexpf(1, -11) + ldexpf(1, -20)), 0x3c01);
    /* subnormals */
    assert_int_equal(ein_f32_to_f16(ldexpf(1, -24)), 0x0001);
    assert_int_equal(ein_f32_to_f16(ldexpf(1, -25)), 0x0000);           /* tie to even */
    assert_int_equal(ein_f32_to_f16(ldexpf(3, -26)), 0x0001);           /* 1.5 * 2^-25 */
    assert_int_equal(ein_f32_to_f16(ldexpf(3, -25)), 0x0002);           /* tie 1.5 -> 2 */
    assert_int_equal(ein_f32_to_f16(ldexpf(1023, -24)), 0x03ff);        /* largest subnormal */
    assert_int_equal(ein_f32_to_f16(ldexpf(2047, -25)), 0x0400);        /* rounds up to normal */
    assert_int_equal(ein_f32_to_f16(-ldexpf(1, -24)), 0x8001);
    assert_int_equal(ein_f32_to_f16(ldexpf(1, -30)), 0x0000);
    assert_int_equal(ein_f32_to_f16(bits_f32(1)), 0x0000);               /* f32 subnormal */
    assert_true(ein_f16_to_f32(0x0001) == ldexpf(1, -24));
    assert_true(ein_f16_to_f32(0x7bff) == 65504.0f);
}

static void test_f16_encode_vs_reference(void **state)
{
    (void)state;
    /* Random bit patterns cover every exponent; patterns near the f16
     * range and near ties stress the rounding. */
    for (int i = 0; i < 300000; i++) {
        uint32_t u = (uint32_t)rng();
        if (i % 3 == 1) /* exponents around the half range */
            u = (u & 0x807fffff) | (uint32_t)(100 + rng() % 45) << 23;
        if (i % 3 == 2) /* exact ties and their neighbours */
            u = ((u & 0x807fe000) | (uint32_t)(100 + rng() % 45) << 23 | 0x1000) + (uint32_t)(rng() % 3) - 1;
        float f = bits_f32(u);
        if (isnan(f) || isinf(f))
            continue;
        uint16_t got = ein_f32_to_f16(f), want = ref_f32_to_f16(f);
        if (got != want)
            fail_msg("f32 %a (0x%08x): got 0x%04x want 0x%04x", (double)f, u, got, want);
    }
}

static void test_bf16_all(void **state)
{
    (void)state;
    for (uint32_t b = 0; b < 0x10000; b++) {
        float f = ein_bf16_to_f32((uint16_t)b);
        assert_int_equal(f32_bits(f), b << 16);
        uint16_t back = ein_f32_to_bf16(f);
        if (isnan(f))
            assert_true(isnan(ein_bf16_to_f32(back)));
        else
            assert_int_equal(back, b);
    }
}

static void test_bf16_known(void **state)
{
    (void)state;
    assert_int_equal(ein_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(ein_f32_to_bf16(-1.0f), 0xbf80);
    assert_int_equal(ein_f32_to_bf16(INFINITY), 0x7f80);
    assert_int_equal(ein_f32_to_bf16(-INFINITY), 0xff80);
    assert_int_equal(ein_f32_to_bf16(bits_f32(0x3f808000)), 0x3f80); /* tie to even */
    assert_int_equal(ein_f32_to_bf16(bits_f32(0x3f818000)), 0x3f82); /* tie to even (up) */
    assert_int_equal(ein_f32_to_bf16(bits_f32(0x3f808001)), 0x3f81);
    assert_int_equal(ein_f32_to_bf16(bits_f32(0x7f7fffff)), 0x7f80); /* FLT_MAX overflows */
    assert_int_equal(ein_f32_to_bf16(bits_f32(0x00018000)), 0x0002); /* subnormal tie */
    assert_int_equal(ein_f32_to_bf16(bits_f32(0x00008000)), 0x0000);
    assert_true(isnan(ein_bf16_to_f32(ein_f32_to_bf16(NAN))));
    /* a NaN whose payload lies only in the low bits must stay a NaN */
    assert_true(isnan(ein_bf16_to_f32(ein_f32_to_bf16(bits_f32(0x7f800001)))));
    assert_true(isnan(ein_bf16_to_f32(ein_f32_to_bf16(bits_f32(0xff800001)))));
}

static void test_bf16_encode_vs_reference(void **state)
{
    (void)state;
    for (int i = 0; i < 300000; i++) {
        uint32_t u = (uint32_t)rng();
        if (i % 2 == 1)
            u = ((u & 0xffff0000) | 0x8000) + (uint32_t)(rng() % 3) - 1;
        float f = bits_f32(u);
        if (isnan(f) || isinf(f))
            continue;
        uint16_t got = ein_f32_to_bf16(f), want = ref_f32_to_bf16(f);
        if (got != want)
            fail_msg("f32 %a (0x%08x): got 0x%04x want 0x%04x", (double)f, u, got, want);
    }
}

static void test_bulk_conversions(void **state)
{
    (void)state;
    float src[257], back[257];
    int64_t h[257]; /* room for any dtype */
    for (int i = 0; i < 257; i++)
        src[i] = (float)(i - 128) * 0.37f;
    for (int t = 0; t < EIN_DTYPE_ELEM_COUNT; t++) {   /* blocks: test_kn_quant, test_quant.py */
        ein_dtype dt = (ein_dtype)t;
        void *buf = dt == EIN_F32 ? (void *)back : (void *)h;
        ein_dtype_from_f32(dt, src, buf, 257);
        ein_dtype_to_f32(dt, buf, back, 257);
        for (int i = 0; i < 257; i++) {
            float want = dt == EIN_F32 ? src[i]
                         : dt == EIN_F16 ? ein_f16_to_f32(ein_f32_to_f16(src[i]))
                         : dt == EIN_BF16 ? ein_bf16_to_f32(ein_f32_to_bf16(src[i]))
                                          : nearbyintf(src[i]);
            assert_true(back[i] == want);
        }
    }
    assert_int_equal(ein_dtype_size(EIN_F32), 4);
    assert_int_equal(ein_dtype_size(EIN_F16), 2);
    assert_int_equal(ein_dtype_size(EIN_BF16), 2);
    assert_int_equal(ein_dtype_size(EIN_I32), 4);
    assert_int_equal(ein_dtype_size(EIN_I64), 8);
    assert_int_equal(ein_dtype_size((ein_dtype)EIN_DTYPE_COUNT), 0);
    ein_dtype d;
    assert_int_equal(ein_dtype_parse("bf16", 4, &d), 0);
    assert_int_equal(d, EIN_BF16);
    assert_int_equal(ein_dtype_parse("i64", 3, &d), 0);
    assert_int_equal(d, EIN_I64);
    assert_int_equal(ein_dtype_parse("f64", 3, &d), -1);
    assert_string_equal(ein_dtype_name(EIN_F16), "f16");
    assert_string_equal(ein_dtype_name((ein_dtype)EIN_DTYPE_COUNT), "?");
    assert_true(ein_dtype_valid(2));
    assert_true(ein_dtype_valid(4));
    assert_false(ein_dtype_valid(EIN_DTYPE_COUNT));
    assert_false(ein_dtype_valid(-1));
}

/* The table: every row complete, codes unique and found again, integers
 * only in layout kernels and embedding, nothing for an invalid dtype. */
static void test_table(void **state)
{
    (void)state;
    for (int t = EIN_DTYPE_ELEM_COUNT; t < EIN_DTYPE_COUNT; t++) {
        /* block dtypes (issue 36): no element size or file codes, einsum only */
        const ein_dtype_info *r = ein_dtype_info_of(t);
        assert_non_null(r);
        assert_true(r->size == 0 && !r->npy && !r->st && !r->is_float);
        /* ggml's q8_0 (f16 scale, 32 int8) and q4_0 (f16, 16 bytes of
         * nibbles); f8e4m3 an f32 scale and 128 e4m3 bytes */
        assert_int_equal(r->block, t == EIN_F8E4M3 ? 128 : 32);
        assert_int_equal(r->block_bytes, t == EIN_Q8_0 ? 34 : t == EIN_Q4_0 ? 18 : 132);
        for (int k = 0; k < EIN_KERNEL_COUNT; k++)
            assert_int_equal(ein_dtype_kernel_ok(t, k), k == EIN_KERNEL_EINSUM);
    }
    for (int t = 0; t < EIN_DTYPE_ELEM_COUNT; t++) {
        const ein_dtype_info *r = ein_dtype_info_of(t);
        assert_non_null(r);
        assert_non_null(r->name);
        assert_true(r->size == 2 || r->size == 4 || r->size == 8);
        ein_dtype d;
        assert_int_equal(ein_dtype_from_npy(r->npy, strlen(r->npy), &d), 0);
        assert_int_equal(d, t);
        assert_int_equal(ein_dtype_from_safetensors(r->st, strlen(r->st), &d), 0);
        assert_int_equal(d, t);
        assert_int_equal(ein_dtype_accum((ein_dtype)t), r->is_float ? EIN_F32 : (ein_dtype)t);
        for (int k = 0; k < EIN_KERNEL_COUNT; k++) {
            /* integers: layout, embedding ids, and the positions of the
             * generation kernels (issue 25) */
            int want = r->is_float || k == EIN_KERNEL_SLICE || k == EIN_KERNEL_CONCAT ||
                       k == EIN_KERNEL_EMBEDDING || k == EIN_KERNEL_CACHE_WRITE ||
                       k == EIN_KERNEL_DECODE_ATTENTION ||
                       k == EIN_KERNEL_DECODE_ATTENTION_PARTIAL || k == EIN_KERNEL_ROPE_AT;
            assert_int_equal(ein_dtype_kernel_ok(t, k), want);
        }
    }
    /* ein_dtype_names() lists every row, in order */
    char names[128] = "";
    for (int t = 0; t < EIN_DTYPE_COUNT; t++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
                 t == 0 ? "" : t + 1 == EIN_DTYPE_COUNT ? " or " : ", ", ein_dtype_info_of(t)->name);
    assert_string_equal(ein_dtype_names(), names);
    /* the lists for messages: the float rows; the integer rows an
     * embedding reads ids in; the safetensors and .npy codes */
    char buf[128];
    assert_string_equal(ein_dtype_float_names(), "f32, f16 or bf16");
    assert_string_equal(ein_dtype_list(buf, sizeof buf, 0, EIN_KERNEL_EMBEDDING, EIN_DTYPE_BY_NAME),
                        "i32 or i64");
    assert_string_equal(ein_dtype_list(buf, sizeof buf, 0, EIN_KERNEL_EINSUM, EIN_DTYPE_BY_NAME),
                        "q8_0, q4_0 or f8e4m3");
    assert_string_equal(ein_dtype_list(buf, sizeof buf, -1, -1, EIN_DTYPE_BY_ST),
                        "F32, F16, BF16, I32 or I64");
    assert_string_equal(ein_dtype_list(buf, sizeof buf, -1, -1, EIN_DTYPE_BY_NPY),
                        "<f4, <f2, bf16 as |V2, <i4 or <i8");
    assert_string_equal(ein_dtype_list(buf, 8, -1, -1, EIN_DTYPE_BY_NAME), "f32, f1"); /* cut */
    assert_null(ein_dtype_info_of(EIN_DTYPE_COUNT));
    assert_null(ein_dtype_info_of(-1));
    assert_false(ein_dtype_kernel_ok(EIN_DTYPE_COUNT, EIN_KERNEL_SLICE));
    assert_false(ein_dtype_kernel_ok(EIN_F32, EIN_KERNEL_COUNT));
    assert_false(ein_dtype_is_float(EIN_I32));
    assert_true(ein_dtype_is_float(EIN_BF16));
    ein_dtype d;
    assert_int_equal(ein_dtype_from_npy("<V2", 3, &d), 0);
    assert_int_equal(d, EIN_BF16);
    assert_int_equal(ein_dtype_from_npy("<f8", 3, &d), -1);
    assert_int_equal(ein_dtype_from_safetensors("U8", 2, &d), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_decode_all),
        cmocka_unit_test(test_f16_roundtrip_all),
        cmocka_unit_test(test_f16_known),
        cmocka_unit_test(test_f16_encode_vs_reference),
        cmocka_unit_test(test_bf16_all),
        cmocka_unit_test(test_bf16_known),
        cmocka_unit_test(test_bf16_encode_vs_reference),
        cmocka_unit_test(test_bulk_conversions),
        cmocka_unit_test(test_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
