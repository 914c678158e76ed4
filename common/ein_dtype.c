/* common/ein_dtype.c — see ein_dtype.h. */
#include "common/ein_dtype.h"

#include <string.h>

size_t ein_dtype_size(ein_dtype t)
{
    return t == EIN_F32 ? 4 : 2;
}

ein_dtype ein_dtype_accum(ein_dtype t)
{
    (void)t;
    return EIN_F32;
}

const char *ein_dtype_name(ein_dtype t)
{
    switch (t) {
    case EIN_F32: return "f32";
    case EIN_F16: return "f16";
    case EIN_BF16: return "bf16";
    }
    return "?";
}

int ein_dtype_valid(int t)
{
    return t >= 0 && t < EIN_DTYPE_COUNT;
}

int ein_dtype_parse(const char *s, size_t len, ein_dtype *out)
{
    static const char *names[] = {"f32", "f16", "bf16"};
    for (int i = 0; i < EIN_DTYPE_COUNT; i++)
        if (strlen(names[i]) == len && memcmp(names[i], s, len) == 0) {
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

void ein_dtype_to_f32(ein_dtype t, const void *src, float *dst, size_t n)
{
    const uint16_t *h = src;
    switch (t) {
    case EIN_F32: memmove(dst, src, n * 4); break;
    case EIN_F16: for (size_t i = 0; i < n; i++) dst[i] = ein_f16_to_f32(h[i]); break;
    case EIN_BF16: for (size_t i = 0; i < n; i++) dst[i] = ein_bf16_to_f32(h[i]); break;
    }
}

void ein_dtype_from_f32(ein_dtype t, const float *src, void *dst, size_t n)
{
    uint16_t *h = dst;
    switch (t) {
    case EIN_F32: memmove(dst, src, n * 4); break;
    case EIN_F16: for (size_t i = 0; i < n; i++) h[i] = ein_f32_to_f16(src[i]); break;
    case EIN_BF16: for (size_t i = 0; i < n; i++) h[i] = ein_f32_to_bf16(src[i]); break;
    }
}
