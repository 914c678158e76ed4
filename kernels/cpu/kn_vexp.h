/* kernels/cpu/kn_vexp.h — exp in 4 f32 lanes, for the CPU kernels that
 * need many (attention's online softmax, silu, sigmoid). Plain C with GCC
 * vector extensions, no target flags (16 bytes is the x86-64 and AArch64
 * baseline), so the build stays portable. Pure inline functions: nothing
 * is allocated, nothing fails. Private to kernels/cpu. */
#ifndef KN_VEXP_H
#define KN_VEXP_H

#include <stdint.h>

/* The hot loops of these kernels are also compiled for x86-64-v3 (AVX2,
 * FMA): GCC's target_clones makes both versions and an ifunc picks one by
 * the CPU when the program loads (1.15x on attention's softmax here).
 * Other compilers and architectures get the one portable version. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#define KN_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define KN_CLONES
#endif

/* exp(x) for x <= 0 in 4 lanes with GCC vector extensions (plain C, no
 * target flags; 16 bytes is the x86-64 and AArch64 baseline). Range
 * reduction x = n ln2 + r with |r| <= ln2/2 (round to nearest by the
 * 1.5*2^23 trick), a degree-6 Taylor polynomial (relative error ~2e-7) and
 * 2^n built in the exponent bits. Inputs below -87 are clamped there
 * (exp(-87) ~ 1.6e-38: nothing next to the row maximum's 1). The scalar
 * tail uses the same formula. */
typedef float kn_v4f __attribute__((vector_size(16)));
typedef int32_t kn_v4i __attribute__((vector_size(16)));

static inline kn_v4f kn_exp_v(kn_v4f x)
{
    const kn_v4f lo = {-87.0f, -87.0f, -87.0f, -87.0f};
    kn_v4i below = x < lo;   /* lanes all-ones where true */
    x = (kn_v4f)(((kn_v4i)x & ~below) | ((kn_v4i)lo & below));
    kn_v4f n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    kn_v4f r = x - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    kn_v4f p = r * (1.0f / 720.0f) + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    kn_v4i e = (__builtin_convertvector(n, kn_v4i) + 127) << 23;
    return p * (kn_v4f)e;
}

static inline float kn_exp_s(float x)
{
    kn_v4f v = {x, x, x, x}; /* the same operations as a lane of kn_exp_v */
    return kn_exp_v(v)[0];
}

#endif
