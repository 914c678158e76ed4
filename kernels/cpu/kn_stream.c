/* kernels/cpu/kn_stream.c — products of a few rows by a weight matrix that
 * read each weight once, in its own dtype (f32, f16 or bf16), computing in
 * f32 (see kn_internal.h, kn_stream_mm).
 *
 * A decode step multiplies one row (a few: one per sequence) by every
 * weight matrix, so its speed is the memory bandwidth over the weights'
 * bytes. Two loops, one per weight layout:
 *   [n, k] (a checkpoint's [out, in]): four weight rows at a time, each
 *       dotted with every activation row while the four stay in L1;
 *   [k, n] (.ein's matmul, [in, out]): a block of columns at a time, four
 *       weight rows of it added into the output rows (kept in L1) scaled by
 *       the activations.
 * Either way every weight byte comes from memory once, in sequential
 * streams, and f16/bf16 are widened in registers (never a converted copy).
 * With AVX2, FMA and F16C (checked at run time) the loops use 8-wide
 * vectors; otherwise a portable C path computes the same sums. */
#include "kernels/cpu/kn_internal.h"

#include <stdint.h>
#include <string.h>

#include "common/ir/ein_dtype.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define KN_STREAM_X86 1
#endif

/* Columns of a [k, n] block per pass: the output rows' part of it
 * (m x KN_NB floats) stays in L1/L2 while four weight rows stream by
 * (8 KiB segments of each: 512 columns read 64-67% of memcpy's traffic,
 * 2048 and 4096 77-81%, tools/bench-kernels -s on a Zen 1). */
#define KN_NB 2048

static int kn_stream_portable_only;

void kn_stream_force_portable(int on)
{
    kn_stream_portable_only = on;
}

__attribute__((always_inline)) static inline float kn_w(const void *b, ein_dtype dt, int64_t i)
{
    switch (dt) {
    case EIN_F16: return ein_f16_to_f32(((const uint16_t *)b)[i]);
    case EIN_BF16: return ein_bf16_to_f32(((const uint16_t *)b)[i]);
    default: return ((const float *)b)[i];
    }
}

/* ---- portable ---------------------------------------------------------- */

static void kn_nk_portable(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                           const void *b, ein_dtype dt, int64_t ldb, float *c, int64_t ldc)
{
    float w[KN_CHUNK];
    for (int64_t j = 0; j < n; j++) {
        for (int64_t r = 0; r < m; r++)
            c[r * ldc + j] = 0.0f;
        for (int64_t k0 = 0; k0 < k; k0 += KN_CHUNK) {
            int64_t kn = k - k0 < KN_CHUNK ? k - k0 : KN_CHUNK;
            for (int64_t i = 0; i < kn; i++)
                w[i] = kn_w(b, dt, j * ldb + k0 + i);
            for (int64_t r = 0; r < m; r++) {
                const float *x = a + r * lda + k0;
                float s = 0.0f;
                for (int64_t i = 0; i < kn; i++)
                    s += x[i] * w[i];
                c[r * ldc + j] += s;
            }
        }
    }
}

static void kn_kn_portable(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                           const void *b, ein_dtype dt, int64_t ldb, float *c, int64_t ldc)
{
    float w[KN_NB];
    for (int64_t c0 = 0; c0 < n; c0 += KN_NB) {
        int64_t nb = n - c0 < KN_NB ? n - c0 : KN_NB;
        for (int64_t r = 0; r < m; r++)
            memset(c + r * ldc + c0, 0, (size_t)nb * sizeof(float));
        for (int64_t i = 0; i < k; i++) {
            for (int64_t j = 0; j < nb; j++)
                w[j] = kn_w(b, dt, i * ldb + c0 + j);
            for (int64_t r = 0; r < m; r++) {
                float x = a[r * lda + i], *y = c + r * ldc + c0;
                for (int64_t j = 0; j < nb; j++)
                    y[j] += x * w[j];
            }
        }
    }
}

/* ---- AVX2 + FMA + F16C --------------------------------------------------- */

#ifdef KN_STREAM_X86
#define KN_AVX2 __attribute__((target("avx2,fma,f16c")))

/* 8 weights at element i of b, widened to f32. */
KN_AVX2 __attribute__((always_inline)) static inline __m256 kn_ld8(const void *b, ein_dtype dt, int64_t i)
{
    if (dt == EIN_BF16) {
        __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)b + i));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    if (dt == EIN_F16)
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)b + i)));
    return _mm256_loadu_ps((const float *)b + i);
}

KN_AVX2 static inline float kn_hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

#define KN_INL KN_AVX2 __attribute__((always_inline)) static inline
/* Bytes ahead of the current element that a 16-bit weight stream
 * prefetches (f32 streams do better with the hardware's prefetch alone;
 * tools/bench-kernels -s). */
#define KN_PF 4096

KN_INL void kn_pf(const void *b, ein_dtype dt, int64_t i)
{
    if (dt != EIN_F32)
        _mm_prefetch((const char *)b + (size_t)i * 2 + KN_PF, _MM_HINT_T0);
}

/* Rows r, r+1 (R = 2) or r (R = 1) of a dotted with weight rows j..j+3 of
 * an [n, k] weight (Q = 4; fewer at the end: q). The four weight rows are
 * widened once per 8 elements and used for both activation rows. */
KN_INL void kn_nk_tile(const int R, const int q, int64_t k, const float *x0, const float *x1,
                       const void *b, const ein_dtype dt, int64_t ldb, int64_t j, int64_t rs,
                       float *c0, float *c1)
{
    const int64_t k8 = k & ~(int64_t)7, st = rs * ldb;
    const int64_t o0 = j * ldb, o1 = o0 + st, o2 = o1 + st, o3 = o2 + st;
    __m256 s00 = _mm256_setzero_ps(), s01 = s00, s02 = s00, s03 = s00;
    __m256 s10 = s00, s11 = s00, s12 = s00, s13 = s00;
    for (int64_t i = 0; i < k8; i += 8) {
        if ((i & 31) == 0) {
            kn_pf(b, dt, o0 + i);
            if (q > 1)
                kn_pf(b, dt, o1 + i);
            if (q > 2)
                kn_pf(b, dt, o2 + i);
            if (q > 3)
                kn_pf(b, dt, o3 + i);
        }
        __m256 a0 = _mm256_loadu_ps(x0 + i);
        __m256 w0 = kn_ld8(b, dt, o0 + i);
        s00 = _mm256_fmadd_ps(w0, a0, s00);
        __m256 w1 = q > 1 ? kn_ld8(b, dt, o1 + i) : w0;
        if (q > 1)
            s01 = _mm256_fmadd_ps(w1, a0, s01);
        __m256 w2 = q > 2 ? kn_ld8(b, dt, o2 + i) : w0;
        if (q > 2)
            s02 = _mm256_fmadd_ps(w2, a0, s02);
        __m256 w3 = q > 3 ? kn_ld8(b, dt, o3 + i) : w0;
        if (q > 3)
            s03 = _mm256_fmadd_ps(w3, a0, s03);
        if (R > 1) {
            __m256 a1 = _mm256_loadu_ps(x1 + i);
            s10 = _mm256_fmadd_ps(w0, a1, s10);
            if (q > 1)
                s11 = _mm256_fmadd_ps(w1, a1, s11);
            if (q > 2)
                s12 = _mm256_fmadd_ps(w2, a1, s12);
            if (q > 3)
                s13 = _mm256_fmadd_ps(w3, a1, s13);
        }
    }
    float t0[4] = {kn_hsum(s00), kn_hsum(s01), kn_hsum(s02), kn_hsum(s03)};
    float t1[4] = {kn_hsum(s10), kn_hsum(s11), kn_hsum(s12), kn_hsum(s13)};
    const int64_t o[4] = {o0, o1, o2, o3};
    for (int64_t i = k8; i < k; i++)
        for (int u = 0; u < q; u++) {
            float w = kn_w(b, dt, o[u] + i);
            t0[u] += x0[i] * w;
            if (R > 1)
                t1[u] += x1[i] * w;
        }
    for (int u = 0; u < q; u++) {
        c0[u * rs] = t0[u];
        if (R > 1)
            c1[u * rs] = t1[u];
    }
}

/* The bf16 form of kn_nk_tile: 16 weights of a row per load, widened by
 * interleaving zeros below them (no shift): the low half of each 128-bit
 * lane gives elements {0-3, 8-11}, the high half {4-7, 12-15}, and the
 * activations are loaded in the same order (a dot product's terms may
 * come in any order). In cache it widens 10.6 G weights/s against 6.2
 * for kn_ld8's zero-extend and shift (a Zen 1). */
KN_INL void kn_nk_tile_bf16(const int R, const int q, int64_t k, const float *x0,
                            const float *x1, const void *b, int64_t ldb, int64_t j, int64_t rs,
                            float *c0, float *c1)
{
    const uint16_t *w = b;
    const int64_t k16 = k & ~(int64_t)15, st = rs * ldb;
    const int64_t o0 = j * ldb, o1 = o0 + st, o2 = o1 + st, o3 = o2 + st;
    const __m256i z = _mm256_setzero_si256();
    __m256 s00 = _mm256_setzero_ps(), s01 = s00, s02 = s00, s03 = s00;
    __m256 s10 = s00, s11 = s00, s12 = s00, s13 = s00;
#define KN_XLH(x, i, lo, hi)                                                                   \
    __m256 lo = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(x + i)),             \
                                     _mm_loadu_ps(x + i + 8), 1);                              \
    __m256 hi = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(x + i + 4)),         \
                                     _mm_loadu_ps(x + i + 12), 1)
#define KN_ROW(o, s0, s1)                                                                      \
    do {                                                                                       \
        __m256i v = _mm256_loadu_si256((const __m256i *)(w + (o) + i));                        \
        __m256 wl = _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, v));                          \
        __m256 wh = _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, v));                          \
        s0 = _mm256_fmadd_ps(wh, ah, _mm256_fmadd_ps(wl, al, s0));                             \
        if (R > 1)                                                                             \
            s1 = _mm256_fmadd_ps(wh, bh, _mm256_fmadd_ps(wl, bl, s1));                         \
    } while (0)
    for (int64_t i = 0; i < k16; i += 16) {
        if ((i & 31) == 0) {
            kn_pf(b, EIN_BF16, o0 + i);
            if (q > 1)
                kn_pf(b, EIN_BF16, o1 + i);
            if (q > 2)
                kn_pf(b, EIN_BF16, o2 + i);
            if (q > 3)
                kn_pf(b, EIN_BF16, o3 + i);
        }
        KN_XLH(x0, i, al, ah);
        __m256 bl = al, bh = ah;
        if (R > 1) {
            KN_XLH(x1, i, l1, h1);
            bl = l1;
            bh = h1;
        }
        KN_ROW(o0, s00, s10);
        if (q > 1)
            KN_ROW(o1, s01, s11);
        if (q > 2)
            KN_ROW(o2, s02, s12);
        if (q > 3)
            KN_ROW(o3, s03, s13);
    }
#undef KN_ROW
#undef KN_XLH
    float t0[4] = {kn_hsum(s00), kn_hsum(s01), kn_hsum(s02), kn_hsum(s03)};
    float t1[4] = {kn_hsum(s10), kn_hsum(s11), kn_hsum(s12), kn_hsum(s13)};
    const int64_t o[4] = {o0, o1, o2, o3};
    for (int64_t i = k16; i < k; i++)
        for (int u = 0; u < q; u++) {
            float wv = kn_w(b, EIN_BF16, o[u] + i);
            t0[u] += x0[i] * wv;
            if (R > 1)
                t1[u] += x1[i] * wv;
        }
    for (int u = 0; u < q; u++) {
        c0[u * rs] = t0[u];
        if (R > 1)
            c1[u * rs] = t1[u];
    }
}

KN_INL void kn_nk_tile_any(const int R, const int q, int64_t k, const float *x0,
                           const float *x1, const void *b, const ein_dtype dt, int64_t ldb,
                           int64_t j, int64_t rs, float *c0, float *c1)
{
    if (dt == EIN_BF16)
        kn_nk_tile_bf16(R, q, k, x0, x1, b, ldb, j, rs, c0, c1);
    else
        kn_nk_tile(R, q, k, x0, x1, b, dt, ldb, j, rs, c0, c1);
}

/* Every weight row against the rows of a, two at a time. The four rows of
 * a pass are a quarter of the matrix apart (j, j + n/4, j + n/2,
 * j + 3n/4), so that memory sees four long sequential streams: four
 * adjacent rows (four short streams, 3 KiB each for k = 768) read 72-76%
 * of memcpy's traffic here, four far apart 88-90% (tools/bench-kernels
 * -s). The four rows stay in L1 across the pairs of a's rows, so memory
 * sees them once. */
KN_INL void kn_nk_body(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                       const void *b, const ein_dtype dt, int64_t ldb, float *c, int64_t ldc)
{
    const int64_t q4 = n / 4;
    for (int64_t j = 0; j < q4; j++) {
        int64_t r = 0;
        for (; r + 2 <= m; r += 2)
            kn_nk_tile_any(2, 4, k, a + r * lda, a + (r + 1) * lda, b, dt, ldb, j, q4,
                           c + r * ldc + j, c + (r + 1) * ldc + j);
        if (r < m)
            kn_nk_tile_any(1, 4, k, a + r * lda, NULL, b, dt, ldb, j, q4, c + r * ldc + j, NULL);
    }
    for (int64_t j = 4 * q4; j < n; j++)
        for (int64_t r = 0; r < m; r++)
            kn_nk_tile_any(1, 1, k, a + r * lda, NULL, b, dt, ldb, j, 1, c + r * ldc + j, NULL);
}

/* [k, n]: up to KN_KN_ROWS output rows and a block of columns at a time,
 * summed in a contiguous buffer (rows of C a power of two apart would all
 * fall in one set of L1: 16 rows by 2048 columns ran 35x slower), four
 * weight rows of the block (a quarter of k apart: four long streams, as
 * for [n, k]) widened once per 8 columns and added into every buffered
 * row. */
#define KN_KN_ROWS 16
#define KN_KN_BUF 4096
KN_INL void kn_kn_body(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                       const void *b, const ein_dtype dt, int64_t ldb, float *c, int64_t ldc)
{
    float ys[KN_KN_BUF];
    for (int64_t r0 = 0; r0 < m; r0 += KN_KN_ROWS) {
        const int64_t mm = m - r0 < KN_KN_ROWS ? m - r0 : KN_KN_ROWS;
        const int64_t nbm = (KN_KN_BUF / mm & ~(int64_t)7) < KN_NB ? KN_KN_BUF / mm & ~(int64_t)7
                                                                   : KN_NB;
        const float *ar = a + r0 * lda;
        for (int64_t c0 = 0; c0 < n; c0 += nbm) {
            int64_t nb = n - c0 < nbm ? n - c0 : nbm, nb8 = nb & ~(int64_t)7;
            memset(ys, 0, (size_t)(mm * nbm) * sizeof(float));
            const int64_t q4 = k / 4, st = q4 * ldb;
            for (int64_t i = 0; i < q4; i++) {
                const int64_t o0 = i * ldb + c0, o1 = o0 + st, o2 = o1 + st, o3 = o2 + st;
                for (int64_t j = 0; j < nb8; j += 8) {
                    if ((j & 31) == 0) {
                        kn_pf(b, dt, o0 + j);
                        kn_pf(b, dt, o1 + j);
                        kn_pf(b, dt, o2 + j);
                        kn_pf(b, dt, o3 + j);
                    }
                    __m256 w0 = kn_ld8(b, dt, o0 + j), w1 = kn_ld8(b, dt, o1 + j);
                    __m256 w2 = kn_ld8(b, dt, o2 + j), w3 = kn_ld8(b, dt, o3 + j);
                    for (int64_t r = 0; r < mm; r++) {
                        const float *x = ar + r * lda + i;
                        float *y = ys + r * nbm + j;
                        __m256 s = _mm256_loadu_ps(y);
                        s = _mm256_fmadd_ps(w0, _mm256_broadcast_ss(x), s);
                        s = _mm256_fmadd_ps(w1, _mm256_broadcast_ss(x + q4), s);
                        s = _mm256_fmadd_ps(w2, _mm256_broadcast_ss(x + 2 * q4), s);
                        s = _mm256_fmadd_ps(w3, _mm256_broadcast_ss(x + 3 * q4), s);
                        _mm256_storeu_ps(y, s);
                    }
                }
                for (int64_t r = 0; r < mm; r++) {
                    const float *x = ar + r * lda + i;
                    float *y = ys + r * nbm;
                    for (int64_t j = nb8; j < nb; j++)
                        y[j] += x[0] * kn_w(b, dt, o0 + j) + x[q4] * kn_w(b, dt, o1 + j) +
                                x[2 * q4] * kn_w(b, dt, o2 + j) + x[3 * q4] * kn_w(b, dt, o3 + j);
                }
            }
            for (int64_t i = 4 * q4; i < k; i++) {
                const int64_t o0 = i * ldb + c0;
                for (int64_t r = 0; r < mm; r++) {
                    float *y = ys + r * nbm;
                    const float x = ar[r * lda + i];
                    __m256 x0 = _mm256_set1_ps(x);
                    for (int64_t j = 0; j < nb8; j += 8)
                        _mm256_storeu_ps(y + j, _mm256_fmadd_ps(kn_ld8(b, dt, o0 + j), x0,
                                                                _mm256_loadu_ps(y + j)));
                    for (int64_t j = nb8; j < nb; j++)
                        y[j] += x * kn_w(b, dt, o0 + j);
                }
            }
            for (int64_t r = 0; r < mm; r++)
                memcpy(c + (r0 + r) * ldc + c0, ys + r * nbm, (size_t)nb * sizeof(float));
        }
    }
}

/* One copy of each loop per dtype, so that the widening is straight-line. */
#define KN_STREAM_DEF(T, DT)                                                                   \
    KN_AVX2 static void kn_nk_##T(int64_t m, int64_t n, int64_t k, const float *a,            \
                                  int64_t lda, const void *b, int64_t ldb, float *c,          \
                                  int64_t ldc)                                                \
    {                                                                                          \
        kn_nk_body(m, n, k, a, lda, b, DT, ldb, c, ldc);                                       \
    }                                                                                          \
    KN_AVX2 static void kn_kn_##T(int64_t m, int64_t n, int64_t k, const float *a,            \
                                  int64_t lda, const void *b, int64_t ldb, float *c,          \
                                  int64_t ldc)                                                \
    {                                                                                          \
        kn_kn_body(m, n, k, a, lda, b, DT, ldb, c, ldc);                                       \
    }
KN_STREAM_DEF(f32, EIN_F32)
KN_STREAM_DEF(f16, EIN_F16)
KN_STREAM_DEF(bf16, EIN_BF16)

static void kn_stream_avx2(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                           const void *b, ein_dtype dt, int b_nk, int64_t ldb, float *c,
                           int64_t ldc)
{
    if (b_nk)
        (dt == EIN_F16 ? kn_nk_f16 : dt == EIN_BF16 ? kn_nk_bf16 : kn_nk_f32)(m, n, k, a, lda,
                                                                             b, ldb, c, ldc);
    else
        (dt == EIN_F16 ? kn_kn_f16 : dt == EIN_BF16 ? kn_kn_bf16 : kn_kn_f32)(m, n, k, a, lda,
                                                                             b, ldb, c, ldc);
}

static int kn_stream_has_avx2(void)
{
    static int known = -1;
    if (known < 0) {
        __builtin_cpu_init();
        known = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                __builtin_cpu_supports("f16c");
    }
    return known;
}
#endif

int kn_stream_vector(void)
{
#ifdef KN_STREAM_X86
    return !kn_stream_portable_only && kn_stream_has_avx2();
#else
    return 0;
#endif
}

void kn_stream_mm(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const void *b,
                  ein_dtype bdt, int b_nk, int64_t ldb, float *c, int64_t ldc)
{
    if (m <= 0 || n <= 0)
        return;
#ifdef KN_STREAM_X86
    if (kn_stream_vector()) {
        kn_stream_avx2(m, n, k, a, lda, b, bdt, b_nk, ldb, c, ldc);
        return;
    }
#endif
    (b_nk ? kn_nk_portable : kn_kn_portable)(m, n, k, a, lda, b, bdt, ldb, c, ldc);
}
