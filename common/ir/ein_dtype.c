/* common/ir/ein_dtype.c — see ein_dtype.h. */
#include "common/ir/ein_dtype.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "common/ir/ein_ops.h"

#define KBIT(kind) (1u << EIN_KERNEL_##kind)
_Static_assert(EIN_KERNEL_COUNT <= 32, "ein_dtype_info.kernels holds one bit per kernel kind");

/* Kernels that take run-time positions (an integer operand) besides float
 * data; each checks which operand may be integer. */
#define GEN_POS (KBIT(CACHE_WRITE) | KBIT(DECODE_ATTENTION) | KBIT(DECODE_ATTENTION_PARTIAL) | \
                 KBIT(ROPE_AT))

/* The dtype table: one row per ein_dtype, in enum order. */
static const ein_dtype_info dtypes[EIN_DTYPE_COUNT] = {
    [EIN_F32] = {"f32", 4, "<f4", NULL, "F32", EIN_F32, 1, ~0u, 1, 4},
    [EIN_F16] = {"f16", 2, "<f2", NULL, "F16", EIN_F32, 1, ~0u, 1, 2},
    /* bf16 has no NumPy dtype: raw bits, as ml_dtypes saves them */
    [EIN_BF16] = {"bf16", 2, "|V2", "<V2", "BF16", EIN_F32, 1, ~0u, 1, 2},
    [EIN_I32] = {"i32", 4, "<i4", NULL, "I32", EIN_I32, 0, KBIT(SLICE) | KBIT(CONCAT) | KBIT(EMBEDDING) | GEN_POS, 1, 4},
    [EIN_I64] = {"i64", 8, "<i8", NULL, "I64", EIN_I64, 0, KBIT(SLICE) | KBIT(CONCAT) | KBIT(EMBEDDING) | GEN_POS, 1, 8},
    /* Quantized weights (issue 36): ggml's block_q8_0 / block_q4_0; no
     * .npy or safetensors code; only an einsum reads them (as b). */
    [EIN_Q8_0] = {"q8_0", 0, NULL, NULL, NULL, EIN_F32, 0, KBIT(EINSUM), 32, 34},
    [EIN_Q4_0] = {"q4_0", 0, NULL, NULL, NULL, EIN_F32, 0, KBIT(EINSUM), 32, 18},
    /* fp8 weights, an f32 scale per 128 (DeepSeek-V3 / cuBLASLt 1x128) */
    [EIN_F8E4M3] = {"f8e4m3", 0, NULL, NULL, NULL, EIN_F32, 0, KBIT(EINSUM), 128, 132},
};

const ein_dtype_info *ein_dtype_info_of(int t)
{
    if (t < 0 || t >= EIN_DTYPE_COUNT)
        return NULL;
    return &dtypes[t];
}

int ein_dtype_count(void)
{
    return EIN_DTYPE_COUNT;
}

int ein_dtype_row(int i, ein_dtype_entry *out)
{
    const ein_dtype_info *d = ein_dtype_info_of(i);
    if (!d || !out)
        return EIN_EINVAL;
    *out = (ein_dtype_entry){.name = d->name, .npy = d->npy, .st = d->st,
                             .size = d->size, .block_bytes = d->block_bytes,
                             .block = d->block, .is_float = d->is_float};
    return 0;
}

int ein_dtype_valid(int t)
{
    return ein_dtype_info_of(t) != NULL;
}

size_t ein_dtype_size(ein_dtype t)
{
    const ein_dtype_info *d = ein_dtype_info_of((int)t);
    return d ? d->size : 0;
}

uint64_t ein_dtype_bytes(ein_dtype t, uint64_t n)
{
    const ein_dtype_info *d = ein_dtype_info_of((int)t);
    if (!d)
        return 0;
    return d->block > 1 ? n / (uint64_t)d->block * d->block_bytes : n * d->size;
}

double ein_dtype_elem_bytes(ein_dtype t)
{
    const ein_dtype_info *d = ein_dtype_info_of((int)t);
    return !d ? 0.0 : d->block > 1 ? (double)d->block_bytes / d->block : (double)d->size;
}

int ein_dtype_is_block(int t)
{
    const ein_dtype_info *d = ein_dtype_info_of(t);
    return d && d->block > 1;
}

int ein_dtype_block(int t)
{
    const ein_dtype_info *d = ein_dtype_info_of(t);
    return d ? d->block : 0;
}

int ein_dtype_box_ok(ein_dtype t, const ein_box *b)
{
    const ein_dtype_info *d = ein_dtype_info_of((int)t);
    if (!d || d->block <= 1)
        return d != NULL;
    if (b->rank < 1)
        return 0;
    return b->lo[b->rank - 1] % d->block == 0 && b->hi[b->rank - 1] % d->block == 0;
}

size_t ein_dtype_unit_box(ein_dtype t, const ein_box *b, ein_box *out)
{
    const ein_dtype_info *d = ein_dtype_info_of((int)t);
    if (!d)
        return 0;
    *out = *b;
    if (d->block <= 1)
        return d->size;
    if (!ein_dtype_box_ok(t, b))
        return 0;
    out->lo[b->rank - 1] /= d->block;
    out->hi[b->rank - 1] /= d->block;
    return d->block_bytes;
}

const char *ein_dtype_name(ein_dtype t)
{
    const ein_dtype_info *d = ein_dtype_info_of((int)t);
    return d ? d->name : "?";
}

ein_dtype ein_dtype_accum(ein_dtype t)
{
    const ein_dtype_info *d = ein_dtype_info_of((int)t);
    return d ? d->accum : EIN_F32;
}

int ein_dtype_is_float(int t)
{
    const ein_dtype_info *d = ein_dtype_info_of(t);
    return d && d->is_float;
}

int ein_dtype_kernel_ok(int t, int kind)
{
    const ein_dtype_info *d = ein_dtype_info_of(t);
    return d && kind >= 0 && kind < EIN_KERNEL_COUNT && (d->kernels >> kind & 1u);
}

const char *ein_dtype_list(char *buf, size_t cap, int floats, int kind, int by)
{
    int pick[EIN_DTYPE_COUNT], n = 0;
    for (int i = 0; i < EIN_DTYPE_COUNT; i++)
        if ((floats < 0 || dtypes[i].is_float == floats) &&
            (kind < 0 || ein_dtype_kernel_ok(i, kind)) &&
            (by != EIN_DTYPE_BY_ST || dtypes[i].st) && (by != EIN_DTYPE_BY_NPY || dtypes[i].npy))
            pick[n++] = i;
    size_t at = 0;
    if (cap)
        buf[0] = '\0';
    for (int k = 0; k < n && at < cap; k++) {
        const ein_dtype_info *d = &dtypes[pick[k]];
        const char *sep = k == 0 ? "" : k + 1 == n ? " or " : ", ";
        int w = by == EIN_DTYPE_BY_ST ? snprintf(buf + at, cap - at, "%s%s", sep, d->st)
                : by == EIN_DTYPE_BY_NPY && d->npy_alt
                    ? snprintf(buf + at, cap - at, "%s%s as %s", sep, d->name, d->npy)
                : by == EIN_DTYPE_BY_NPY ? snprintf(buf + at, cap - at, "%s%s", sep, d->npy)
                                         : snprintf(buf + at, cap - at, "%s%s", sep, d->name);
        at = w < 0 ? cap : at + (size_t)w;
    }
    return buf;
}

/* Built once from the table (tests/common/test_dtype.c checks them). */
static char all_names[128], float_names[128];
static pthread_once_t names_once = PTHREAD_ONCE_INIT;

static void names_make(void)
{
    ein_dtype_list(all_names, sizeof all_names, -1, -1, EIN_DTYPE_BY_NAME);
    ein_dtype_list(float_names, sizeof float_names, 1, -1, EIN_DTYPE_BY_NAME);
}

const char *ein_dtype_names(void)
{
    pthread_once(&names_once, names_make);
    return all_names;
}

const char *ein_dtype_float_names(void)
{
    pthread_once(&names_once, names_make);
    return float_names;
}

static int eq(const char *a, const char *s, size_t n)
{
    return a && strlen(a) == n && memcmp(a, s, n) == 0;
}

int ein_dtype_parse(const char *s, size_t len, ein_dtype *out)
{
    for (int i = 0; i < EIN_DTYPE_COUNT; i++)
        if (eq(dtypes[i].name, s, len)) {
            *out = (ein_dtype)i;
            return 0;
        }
    return -1;
}

int ein_dtype_from_npy(const char *descr, size_t n, ein_dtype *out)
{
    for (int i = 0; i < EIN_DTYPE_COUNT; i++)
        if (eq(dtypes[i].npy, descr, n) || eq(dtypes[i].npy_alt, descr, n)) {
            *out = (ein_dtype)i;
            return 0;
        }
    return -1;
}

int ein_dtype_from_safetensors(const char *name, size_t n, ein_dtype *out)
{
    for (int i = 0; i < EIN_DTYPE_COUNT; i++)
        if (eq(dtypes[i].st, name, n)) {
            *out = (ein_dtype)i;
            return 0;
        }
    return -1;
}
static uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

float ein_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0) {
        if (man == 0)
            return bits_f32(sign);
        /* subnormal: value = man * 2^-24 */
        float v = (float)man * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    if (exp == 31)
        return bits_f32(sign | 0x7f800000u | (man << 13));
    return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t ein_f32_to_f16(float f)
{
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t exp = (u >> 23) & 0xff, man = u & 0x7fffff;
    if (exp == 0xff)
        return sign | 0x7c00 | (man ? 0x200 : 0);
    int e = (int)exp - 127 + 15;
    if (e >= 31)
        return sign | 0x7c00;
    if (e <= 0) {
        if (e < -10)
            return sign;
        /* subnormal half: shift the full mantissa, round to nearest even */
        man |= 0x800000;
        int shift = 14 - e;
        uint32_t half = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1)))
            half++;
        return sign | (uint16_t)half;
    }
    uint32_t half = ((uint32_t)e << 10) | (man >> 13);
    uint32_t rem = man & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (half & 1)))
        half++; /* may carry into the exponent, which is still correct */
    return sign | (uint16_t)half;
}

float ein_bf16_to_f32(uint16_t b)
{
    return bits_f32((uint32_t)b << 16);
}

uint16_t ein_f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffff) > 0x7f800000)
        return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    uint32_t rounding = 0x7fff + ((u >> 16) & 1);
    return (uint16_t)((u + rounding) >> 16);
}

/* ---- ggml's Q8_0 and Q4_0 blocks (see ein_dtype.h) ---------------------- */

#define QK 32

static void q8_0_from_f32(const float *x, uint8_t *y, size_t n)
{
    for (size_t b = 0; b + QK <= n; b += QK, y += 34) {
        float amax = 0.0f;
        for (int j = 0; j < QK; j++) {
            float a = fabsf(x[b + j]);
            amax = amax > a ? amax : a;
        }
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        uint16_t h = ein_f32_to_f16(d);
        memcpy(y, &h, 2);
        for (int j = 0; j < QK; j++)
            y[2 + j] = (uint8_t)(int8_t)roundf(x[b + j] * id);
    }
}

static void q8_0_to_f32(const uint8_t *y, float *x, size_t n)
{
    for (size_t b = 0; b + QK <= n; b += QK, y += 34) {
        uint16_t h;
        memcpy(&h, y, 2);
        const float d = ein_f16_to_f32(h);
        for (int j = 0; j < QK; j++)
            x[b + j] = (float)(int8_t)y[2 + j] * d;
    }
}

static void q4_0_from_f32(const float *x, uint8_t *y, size_t n)
{
    for (size_t b = 0; b + QK <= n; b += QK, y += 18) {
        float amax = 0.0f, m = 0.0f;
        for (int j = 0; j < QK; j++)
            if (amax < fabsf(x[b + j])) {
                amax = fabsf(x[b + j]);
                m = x[b + j];
            }
        const float d = m / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        uint16_t h = ein_f32_to_f16(d);
        memcpy(y, &h, 2);
        for (int j = 0; j < QK / 2; j++) {
            /* two statements: x * id rounded to f32 before the add, as the
             * reference computes it (no fused multiply-add) */
            volatile float t0 = x[b + j] * id, t1 = x[b + QK / 2 + j] * id;
            int q0 = (int)(t0 + 8.5f), q1 = (int)(t1 + 8.5f);
            q0 = q0 < 15 ? q0 : 15;
            q1 = q1 < 15 ? q1 : 15;
            y[2 + j] = (uint8_t)(q0 | q1 << 4);
        }
    }
}

static void q4_0_to_f32(const uint8_t *y, float *x, size_t n)
{
    for (size_t b = 0; b + QK <= n; b += QK, y += 18) {
        uint16_t h;
        memcpy(&h, y, 2);
        const float d = ein_f16_to_f32(h);
        for (int j = 0; j < QK / 2; j++) {
            x[b + j] = (float)((y[2 + j] & 15) - 8) * d;
            x[b + QK / 2 + j] = (float)((y[2 + j] >> 4) - 8) * d;
        }
    }
}

/* ---- f8e4m3: an f32 scale and 128 OCP e4m3fn bytes (see ein_dtype.h) ---- */

#define F8K 128

float ein_e4m3_to_f32(uint8_t b)
{
    const int e = (b >> 3) & 15, m = b & 7;
    float v;
    if (e == 15 && m == 7)
        v = NAN;
    else if (e == 0)
        v = ldexpf((float)m, -9);            /* subnormal: m / 8 * 2^-6 */
    else
        v = ldexpf((float)(8 + m), e - 10);  /* (1 + m / 8) * 2^(e - 7) */
    return b & 0x80 ? -v : v;
}

uint8_t ein_f32_to_e4m3(float f)
{
    const uint8_t sign = signbit(f) ? 0x80 : 0;
    float a = fabsf(f);
    if (a != a || isinf(a))
        return sign | 0x7f;
    if (a >= 448.0f)
        return sign | 0x7e;                  /* saturate: no infinity */
    if (a < 0x1p-6f) {                       /* subnormal, quantum 2^-9 */
        const int q = (int)nearbyintf(a * 0x1p9f); /* 0..8; 8 is 2^-6 (0x08) */
        return sign | (uint8_t)q;
    }
    int e;
    frexpf(a, &e);                           /* a = f * 2^e, f in [0.5, 1) */
    e -= 1;                                  /* a in [2^e, 2^(e+1)), e in -6..8 */
    int q = (int)nearbyintf(ldexpf(a, 3 - e)); /* 8..16 */
    if (q == 16) {
        q = 8;
        e++;
    }
    if (e > 8)
        return sign | 0x7e;
    return sign | (uint8_t)((e + 7) << 3 | (q - 8));
}

static void f8e4m3_from_f32(const float *x, uint8_t *y, size_t n)
{
    for (size_t b = 0; b + F8K <= n; b += F8K, y += 4 + F8K) {
        float amax = 0.0f;
        for (int j = 0; j < F8K; j++) {
            const float a = fabsf(x[b + j]);
            amax = a > amax && !isinf(a) ? a : amax;  /* NaN and inf: NaN codes */
        }
        const float s = amax / 448.0f;
        memcpy(y, &s, 4);
        for (int j = 0; j < F8K; j++) {
            const float v = x[b + j];
            y[4 + j] = v != v || isinf(v) ? (uint8_t)(signbit(v) ? 0xff : 0x7f)
                       : s == 0.0f        ? 0
                                          : ein_f32_to_e4m3(v / s);
        }
    }
}

static void f8e4m3_to_f32(const uint8_t *y, float *x, size_t n)
{
    for (size_t b = 0; b + F8K <= n; b += F8K, y += 4 + F8K) {
        float s;
        memcpy(&s, y, 4);
        for (int j = 0; j < F8K; j++)
            x[b + j] = s * ein_e4m3_to_f32(y[4 + j]);
    }
}

void ein_dtype_to_f32(ein_dtype t, const void *src, float *dst, size_t n)
{
    const uint16_t *h = src;
    switch (t) {
    case EIN_F8E4M3: f8e4m3_to_f32(src, dst, n); break;
    case EIN_Q8_0: q8_0_to_f32(src, dst, n); break;
    case EIN_Q4_0: q4_0_to_f32(src, dst, n); break;
    case EIN_F32: memmove(dst, src, n * 4); break;
    case EIN_F16: for (size_t i = 0; i < n; i++) dst[i] = ein_f16_to_f32(h[i]); break;
    case EIN_BF16: for (size_t i = 0; i < n; i++) dst[i] = ein_bf16_to_f32(h[i]); break;
    case EIN_I32: for (size_t i = 0; i < n; i++) dst[i] = (float)((const int32_t *)src)[i]; break;
    case EIN_I64: for (size_t i = 0; i < n; i++) dst[i] = (float)((const int64_t *)src)[i]; break;
    }
}

/* f32 to an integer of [lo, hi]: rounded to nearest, NaN 0, saturated. */
static double to_int(float f, double lo, double hi)
{
    double v = nearbyint((double)f);
    return v != v ? 0 : v < lo ? lo : v > hi ? hi : v;
}

void ein_dtype_from_f32(ein_dtype t, const float *src, void *dst, size_t n)
{
    uint16_t *h = dst;
    switch (t) {
    case EIN_F8E4M3: f8e4m3_from_f32(src, dst, n); break;
    case EIN_Q8_0: q8_0_from_f32(src, dst, n); break;
    case EIN_Q4_0: q4_0_from_f32(src, dst, n); break;
    case EIN_F32: memmove(dst, src, n * 4); break;
    case EIN_F16: for (size_t i = 0; i < n; i++) h[i] = ein_f32_to_f16(src[i]); break;
    case EIN_BF16: for (size_t i = 0; i < n; i++) h[i] = ein_f32_to_bf16(src[i]); break;
    case EIN_I32:
        for (size_t i = 0; i < n; i++)
            ((int32_t *)dst)[i] = (int32_t)to_int(src[i], INT32_MIN, INT32_MAX);
        break;
    case EIN_I64:
        /* 2^63 is not an int64: saturate below it */
        for (size_t i = 0; i < n; i++)
            ((int64_t *)dst)[i] = (int64_t)to_int(src[i], -9223372036854775808.0, 9223372036854774784.0);
        break;
    }
}
