/* kernels/cpu/kn_quant.c — products of rows by quantized weights (q8_0,
 * q4_0: ggml's blocks; f8e4m3; common/ir/ein_dtype.h), computing in f32
 * (issue 36).
 *
 * The weight is [n, k] (a checkpoint's [out, in]), k contiguous in blocks
 * of 32: each row of it is k / 32 blocks of an f16 scale and 32 int8 (q8_0)
 * or 16 bytes of nibbles (q4_0); or (f8e4m3) k / 128 blocks of an f32
 * scale and 128 e4m3 bytes, whose products keep the activations in f32.
 * A few rows of activations (a decode step, at most KN_STREAM_ROWS) go
 * through kn_stream_mm_q, which reads every weight block once and
 * dequantises it in registers; more rows dequantise a tile of weight rows
 * to f32 and call sgemm on it (prefill), so no f32 copy of the whole
 * weight ever exists. */
#include "kernels/cpu/kn_internal.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/ir/ein_dtype.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define KN_Q_X86 1
#endif

#define KN_QK 32
#define KN_F8K 128   /* f8e4m3's block */

/* ---- portable ---------------------------------------------------------- */

static void kn_q_portable(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                          const uint8_t *b, ein_dtype dt, int64_t ldb, float *c, int64_t ldc)
{
    const int qk = ein_dtype_block((int)dt);   /* 32, or 128 for f8e4m3 */
    const size_t bb = ein_dtype_bytes(dt, (uint64_t)qk);
    float w[KN_F8K];
    for (int64_t j = 0; j < n; j++) {
        const uint8_t *row = b + j * ldb;
        for (int64_t r = 0; r < m; r++)
            c[r * ldc + j] = 0.0f;
        for (int64_t i = 0; i < k; i += qk) {
            ein_dtype_to_f32(dt, row + (size_t)(i / qk) * bb, w, (size_t)qk);
            for (int64_t r = 0; r < m; r++) {
                const float *x = a + r * lda + i;
                float s = 0.0f;
                for (int t = 0; t < qk; t++)
                    s += x[t] * w[t];
                c[r * ldc + j] += s;
            }
        }
    }
}

/* ---- AVX2 + FMA + F16C --------------------------------------------------- */

#ifdef KN_Q_X86
#define KN_QAVX2 __attribute__((target("avx2,fma,f16c")))

KN_QAVX2 static inline float kn_q_hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* The 32 weights of one block as four vectors of 8 f32 (before the scale)
 * and the scale. */
KN_QAVX2 __attribute__((always_inline)) static inline float
kn_q_block(const uint8_t *p, ein_dtype dt, __m256 *w)
{
    uint16_t h;
    memcpy(&h, p, 2);
    if (dt == EIN_Q8_0) {
        for (int g = 0; g < 4; g++)
            w[g] = _mm256_cvtepi32_ps(
                _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p + 2 + 8 * g))));
    } else {
        const __m128i v = _mm_loadu_si128((const __m128i *)(p + 2));
        const __m128i lo15 = _mm_set1_epi8(15), eight = _mm_set1_epi8(8);
        const __m128i lo = _mm_sub_epi8(_mm_and_si128(v, lo15), eight);
        const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(v, 4), lo15), eight);
        w[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo));
        w[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)));
        w[2] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi));
        w[3] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)));
    }
    return _cvtsh_ss(h);
}

/* Prefetch distance of the loops below: the same block KN_Q_PF weight rows
 * on (the hardware prefetcher alone left them waiting on memory: 1.2-1.4x
 * with it, bench-kernels -s). */
#define KN_Q_PF 8

/* The one-row loops' prefetch, per block of a pass over four weight rows
 * r0..r0 + 4 ldb of blocks of bb bytes. Rows of exactly nb blocks (ldb =
 * nb * bb: lin, the usual case) lie one after another, so the pass
 * KN_Q_PF rows on is the contiguous 4 ldb bytes at r0 + KN_Q_PF ldb: each
 * block prefetches the next 4 bb of them from a cursor *pf, `lines` lines
 * (3 for q8_0's 136 bytes, 2 for q4_0's 72: every line once; 1.1-1.16x
 * the per-row prefetch, bench-kernels -s). Longer rows (the contraction
 * split, ldb > nb * bb) would prefetch bytes the pass never reads: the
 * same block KN_Q_PF rows on in each row, every `every`-th block, instead. */
KN_QAVX2 __attribute__((always_inline)) static inline void
kn_q_pf4(const char **pf, int lin, int lines, size_t bb, const uint8_t *p, int64_t bi, int every,
         int64_t ldb)
{
    if (lin) {
        for (int l = 0; l < lines; l++)
            _mm_prefetch(*pf + 64 * l, _MM_HINT_T0);
        *pf += 4 * bb;
    } else if (bi % every == 0) {
        for (int r = 0; r < 4; r++)
            _mm_prefetch((const char *)p + (KN_Q_PF + r) * ldb, _MM_HINT_T0);
    }
}

/* One block of 32 activations x as integers of magnitude at most levels:
 * x ~= s * q with s = max|x| / levels, q = round(x / s) (each off by at
 * most s / 2); returns s. A NaN (or infinite) activation makes s NaN (inf,
 * with every q 0), so the sums the block enters are NaN, as in f32. The one
 * rule of both activation forms below (int16 for q8_0, int8 for q4_0). */
static float kn_q_round(const float *x, float levels, int32_t *q)
{
    float amax = 0.0f;
    int nan = 0;
    for (int t = 0; t < KN_QK; t++) {
        amax = fabsf(x[t]) > amax ? fabsf(x[t]) : amax;
        nan |= x[t] != x[t];
    }
    const float s = nan ? NAN : amax / levels;
    const float inv = s != 0.0f && !nan && !isinf(s) ? levels / amax : 0.0f;
    for (int t = 0; t < KN_QK; t++) {
        const long v = lrintf(x[t] * inv);
        q[t] = (int32_t)(v > (long)levels ? (long)levels : v < -(long)levels ? -(long)levels : v);
    }
    return s;
}

/* The activations as int16 per block of 32 (kn_q_round with 32767 levels:
 * relative error at most 2^-16 of the block's largest |x|, far below the
 * weights' own quantization error). */
static void kn_q_acts(int64_t m, int64_t k, const float *a, int64_t lda, int16_t *xq, float *xs)
{
    const int64_t nb = k / KN_QK;
    int32_t q[KN_QK];
    for (int64_t r = 0; r < m; r++)
        for (int64_t b = 0; b < nb; b++) {
            xs[r * nb + b] = kn_q_round(a + r * lda + b * KN_QK, 32767.0f, q);
            for (int t = 0; t < KN_QK; t++)
                xq[(r * nb + b) * KN_QK + t] = (int16_t)q[t];
        }
}

/* The integer form: per block, the weights widened to int16 (exact), two
 * vpmaddwd with the int16 activations give eight exact int32 partial sums,
 * converted once and scaled by d * s_b. A quarter of the float form's
 * int-to-float conversions, which bound it (one pipe on Zen 1: 4 G
 * weights/s against the memory's 10+; docs/kernels.md). */
KN_QAVX2 static void kn_q_avx2_i16(int64_t m, int64_t n, int64_t k, const uint8_t *b,
                                   ein_dtype dt, int64_t ldb, const int16_t *xq,
                                   const float *xs, float *c, int64_t ldc)
{
    const size_t bb = ein_dtype_bytes(dt, KN_QK);
    const int64_t nb = k / KN_QK;
    const __m128i lo15 = _mm_set1_epi8(15), eight = _mm_set1_epi8(8);
    __m256 acc[KN_STREAM_MAX_ROWS];
    for (int64_t j = 0; j < n; j++) {
        const uint8_t *row = b + j * ldb;
        for (int64_t r = 0; r < m; r++)
            acc[r] = _mm256_setzero_ps();
        for (int64_t bi = 0; bi < nb; bi++) {
            const uint8_t *p = row + (size_t)bi * bb;
            _mm_prefetch((const char *)p + KN_Q_PF * ldb, _MM_HINT_T0);
            __m256i w0, w1;
            if (dt == EIN_Q8_0) {
                w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(p + 2)));
                w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(p + 18)));
            } else {
                const __m128i v = _mm_loadu_si128((const __m128i *)(p + 2));
                w0 = _mm256_cvtepi8_epi16(_mm_sub_epi8(_mm_and_si128(v, lo15), eight));
                w1 = _mm256_cvtepi8_epi16(
                    _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(v, 4), lo15), eight));
            }
            uint16_t h;
            memcpy(&h, p, 2);
            const float d = _cvtsh_ss(h);
            for (int64_t r = 0; r < m; r++) {
                const int16_t *x = xq + (r * nb + bi) * KN_QK;
                __m256i s = _mm256_add_epi32(
                    _mm256_madd_epi16(w0, _mm256_loadu_si256((const __m256i *)x)),
                    _mm256_madd_epi16(w1, _mm256_loadu_si256((const __m256i *)(x + 16))));
                acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(d * xs[r * nb + bi]),
                                         acc[r]);
            }
        }
        for (int64_t r = 0; r < m; r++)
            c[r * ldc + j] = kn_q_hsum(acc[r]);
    }
}

/* Four weight rows' f16 scales at p, p + ldb, p + 2 ldb, p + 3 ldb,
 * times sx, in both halves of a vector (lanes 0-3 and 4-7). */
KN_QAVX2 __attribute__((always_inline)) static inline __m256 kn_q_d4(const uint8_t *p, int64_t ldb,
                                                                     float sx)
{
    uint16_t h0, h1, h2, h3;
    memcpy(&h0, p, 2);
    memcpy(&h1, p + ldb, 2);
    memcpy(&h2, p + 2 * ldb, 2);
    memcpy(&h3, p + 3 * ldb, 2);
    const __m128i v = _mm_insert_epi16(
        _mm_insert_epi16(_mm_insert_epi16(_mm_cvtsi32_si128(h0), h1, 1), h2, 2), h3, 3);
    const __m128 d = _mm_mul_ps(_mm_cvtph_ps(v), _mm_set1_ps(sx));
    return _mm256_set_m128(d, d);
}

/* A q8_0 block's 32 int8 weights at p (after its scale) times the int16
 * activations x0 (elements 0-15) and x1 (16-31): eight exact int32 sums. */
KN_QAVX2 __attribute__((always_inline)) static inline __m256i kn_q8_dot16(const uint8_t *p,
                                                                          __m256i x0, __m256i x1)
{
    const __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(p + 2)));
    const __m256i w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(p + 18)));
    return _mm256_add_epi32(_mm256_madd_epi16(w0, x0), _mm256_madd_epi16(w1, x1));
}

/* Four rows' int32 partial sums (eight each) folded into one vector whose
 * lanes r and 4 + r hold row r's (three vphaddd): then one conversion and
 * one multiply-add per block serve the four rows, and one horizontal sum
 * per four rows at the end. */
KN_QAVX2 __attribute__((always_inline)) static inline __m256i kn_q_fold4(__m256i s0, __m256i s1,
                                                                         __m256i s2, __m256i s3)
{
    return _mm256_hadd_epi32(_mm256_hadd_epi32(s0, s1), _mm256_hadd_epi32(s2, s3));
}

/* Rows j..j+3 of c from the per-row lanes of acc (kn_q_fold4's order). */
KN_QAVX2 __attribute__((always_inline)) static inline void kn_q_store4(__m256 acc, float *c)
{
    _mm_storeu_ps(c, _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1)));
}

/* One activation row (a decode step): four weight rows per pass, sharing
 * the activations' loads, their partial sums folded (kn_q_fold4) so one
 * conversion and multiply-add per block serve all four (1.1-1.2x two rows
 * per pass, each with its own, bench-kernels -s); prefetch every other
 * block (34 bytes: about one line per row). */
KN_QAVX2 static void kn_q8_i16_1(int64_t n, int64_t k, const uint8_t *b, int64_t ldb,
                                 const int16_t *xq, const float *xs, float *c)
{
    const size_t bb = ein_dtype_bytes(EIN_Q8_0, KN_QK);
    const int64_t nb = k / KN_QK;
    const int lin = ldb == nb * (int64_t)bb;
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
        const uint8_t *r0 = b + j * ldb;
        const char *pf = (const char *)r0 + KN_Q_PF * ldb;
        __m256 acc = _mm256_setzero_ps();
        for (int64_t bi = 0; bi < nb; bi++) {
            const uint8_t *p0 = r0 + (size_t)bi * bb, *p1 = p0 + ldb, *p2 = p1 + ldb,
                          *p3 = p2 + ldb;
            kn_q_pf4(&pf, lin, 3, 34, p0, bi, 2, ldb);
            const __m256i x0 = _mm256_loadu_si256((const __m256i *)(xq + bi * KN_QK));
            const __m256i x1 = _mm256_loadu_si256((const __m256i *)(xq + bi * KN_QK + 16));
            const __m256i t = kn_q_fold4(kn_q8_dot16(p0, x0, x1), kn_q8_dot16(p1, x0, x1),
                                         kn_q8_dot16(p2, x0, x1), kn_q8_dot16(p3, x0, x1));
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), kn_q_d4(p0, ldb, xs[bi]), acc);
        }
        kn_q_store4(acc, c + j);
    }
    if (j < n)
        kn_q_avx2_i16(1, n - j, k, b + j * ldb, EIN_Q8_0, ldb, xq, xs, c + j, 1);
}

/* One weight row at a time; per block, each activation row's dot with the
 * four weight vectors, scaled once per block. */
KN_QAVX2 static void kn_q_avx2(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                               const uint8_t *b, ein_dtype dt, int64_t ldb, float *c,
                               int64_t ldc)
{
    const size_t bb = ein_dtype_bytes(dt, KN_QK);
    __m256 acc[KN_STREAM_MAX_ROWS];
    for (int64_t j = 0; j < n; j++) {
        const uint8_t *row = b + j * ldb;
        for (int64_t r = 0; r < m; r++)
            acc[r] = _mm256_setzero_ps();
        for (int64_t i = 0; i < k; i += KN_QK) {
            const uint8_t *p = row + (size_t)(i / KN_QK) * bb;
            _mm_prefetch((const char *)p + 1024, _MM_HINT_T0);
            __m256 w[4];
            const __m256 d = _mm256_set1_ps(kn_q_block(p, dt, w));
            for (int64_t r = 0; r < m; r++) {
                const float *x = a + r * lda + i;
                __m256 t = _mm256_mul_ps(w[0], _mm256_loadu_ps(x));
                t = _mm256_fmadd_ps(w[1], _mm256_loadu_ps(x + 8), t);
                t = _mm256_fmadd_ps(w[2], _mm256_loadu_ps(x + 16), t);
                t = _mm256_fmadd_ps(w[3], _mm256_loadu_ps(x + 24), t);
                acc[r] = _mm256_fmadd_ps(d, t, acc[r]);
            }
        }
        for (int64_t r = 0; r < m; r++)
            c[r * ldc + j] = kn_q_hsum(acc[r]);
    }
}

/* For q4_0 (whose 4-bit weights add far more error than int8 activations:
 * bench model 38.4% -> 38.6%, docs/kernels.md), the activations as int8
 * per block of 32, as llama.cpp's Q8_0 activations (kn_q_round with 127
 * levels), and x8 = the 16 pair sums 8 * (xq[2t] + xq[2t+1]) that remove
 * the nibbles' offset of 8. */
static void kn_q_acts8(int64_t m, int64_t k, const float *a, int64_t lda, int8_t *xq, float *xs,
                       int16_t *x8)
{
    const int64_t nb = k / KN_QK;
    int32_t q[KN_QK];
    for (int64_t r = 0; r < m; r++)
        for (int64_t b = 0; b < nb; b++) {
            xs[r * nb + b] = kn_q_round(a + r * lda + b * KN_QK, 127.0f, q);
            for (int t = 0; t < KN_QK; t++)
                xq[(r * nb + b) * KN_QK + t] = (int8_t)q[t];
            for (int t = 0; t < KN_QK / 2; t++)
                x8[(r * nb + b) * (KN_QK / 2) + t] = (int16_t)(8 * (q[2 * t] + q[2 * t + 1]));
        }
}

/* A q4_0 block's 32 nibbles as bytes 0..15 in element order (the low
 * nibbles are elements 0-15, the high ones 16-31). */
KN_QAVX2 __attribute__((always_inline)) static inline __m256i kn_q_n4(const uint8_t *p)
{
    const __m128i v = _mm_loadu_si128((const __m128i *)(p + 2));
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(15));
}

/* sum over the block of (w - 8) * x as eight exact int32 sums, in f32:
 * vpmaddubsw of the nibbles (unsigned) by x (signed), pair sums at most
 * 2 * 15 * 127 in magnitude, minus the precomputed 8 * x pair sums; one
 * vpmaddwd by ones widens to int32. */
KN_QAVX2 __attribute__((always_inline)) static inline __m256 kn_q_dot4(__m256i w, __m256i x,
                                                                       const int16_t *x8)
{
    const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(w, x),
                                       _mm256_loadu_si256((const __m256i *)x8));
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}

KN_QAVX2 __attribute__((always_inline)) static inline float kn_q_d(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* One activation row (a decode step): four weight rows per pass sharing
 * each activation block's loads. Each row's 16 int16 sums (each at most
 * 2 * 8 * 127 in magnitude) fold with the others' by three vphaddw (sums
 * of four: at most 8128, no overflow) and one vpmaddwd by ones into
 * kn_q_fold4's order: one conversion and multiply-add per block for the
 * four rows (1.15-1.2x one each, bench-kernels -s); prefetch every fourth
 * block (18 bytes: about one line per row). */
KN_QAVX2 static void kn_q4_i8_1(int64_t n, int64_t k, const uint8_t *b, int64_t ldb,
                                const int8_t *xq, const float *xs, const int16_t *x8, float *c)
{
    const size_t bb = ein_dtype_bytes(EIN_Q4_0, KN_QK);
    const int64_t nb = k / KN_QK;
    const int lin = ldb == nb * (int64_t)bb;
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
        const uint8_t *r0 = b + j * ldb;
        const char *pf = (const char *)r0 + KN_Q_PF * ldb;
        __m256 acc = _mm256_setzero_ps();
        for (int64_t bi = 0; bi < nb; bi++) {
            const uint8_t *p = r0 + (size_t)bi * bb;
            kn_q_pf4(&pf, lin, 2, 18, p, bi, 4, ldb);
            const __m256i x = _mm256_loadu_si256((const __m256i *)(xq + bi * KN_QK));
            const __m256i e = _mm256_loadu_si256((const __m256i *)(x8 + bi * (KN_QK / 2)));
            const __m256i s0 = _mm256_sub_epi16(_mm256_maddubs_epi16(kn_q_n4(p), x), e);
            const __m256i s1 = _mm256_sub_epi16(_mm256_maddubs_epi16(kn_q_n4(p + ldb), x), e);
            const __m256i s2 = _mm256_sub_epi16(_mm256_maddubs_epi16(kn_q_n4(p + 2 * ldb), x), e);
            const __m256i s3 = _mm256_sub_epi16(_mm256_maddubs_epi16(kn_q_n4(p + 3 * ldb), x), e);
            const __m256i t = _mm256_madd_epi16(
                _mm256_hadd_epi16(_mm256_hadd_epi16(s0, s1), _mm256_hadd_epi16(s2, s3)),
                _mm256_set1_epi16(1));
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), kn_q_d4(p, ldb, xs[bi]), acc);
        }
        kn_q_store4(acc, c + j);
    }
    for (; j < n; j++) {
        const uint8_t *r0 = b + j * ldb;
        __m256 a0 = _mm256_setzero_ps();
        for (int64_t bi = 0; bi < nb; bi++) {
            const uint8_t *p0 = r0 + (size_t)bi * bb;
            const __m256i x = _mm256_loadu_si256((const __m256i *)(xq + bi * KN_QK));
            a0 = _mm256_fmadd_ps(kn_q_dot4(kn_q_n4(p0), x, x8 + bi * (KN_QK / 2)),
                                 _mm256_set1_ps(kn_q_d(p0) * xs[bi]), a0);
        }
        c[j] = kn_q_hsum(a0);
    }
}

/* Several activation rows: two weight rows per pass, each weight block
 * unpacked once and used by every row. */
KN_QAVX2 static void kn_q4_i8(int64_t m, int64_t n, int64_t k, const uint8_t *b, int64_t ldb,
                              const int8_t *xq, const float *xs, const int16_t *x8, float *c,
                              int64_t ldc)
{
    const size_t bb = ein_dtype_bytes(EIN_Q4_0, KN_QK);
    const int64_t nb = k / KN_QK;
    __m256 acc[2 * KN_STREAM_MAX_ROWS];
    for (int64_t j = 0; j < n; j += 2) {
        const int two = j + 1 < n;
        const uint8_t *r0 = b + j * ldb, *r1 = two ? r0 + ldb : r0;
        for (int64_t r = 0; r < 2 * m; r++)
            acc[r] = _mm256_setzero_ps();
        for (int64_t bi = 0; bi < nb; bi++) {
            const uint8_t *p0 = r0 + (size_t)bi * bb, *p1 = r1 + (size_t)bi * bb;
            _mm_prefetch((const char *)p0 + KN_Q_PF * ldb, _MM_HINT_T0);
            _mm_prefetch((const char *)p1 + KN_Q_PF * ldb, _MM_HINT_T0);
            const __m256i w0 = kn_q_n4(p0), w1 = kn_q_n4(p1);
            const float d0 = kn_q_d(p0), d1 = kn_q_d(p1);
            for (int64_t r = 0; r < m; r++) {
                const int64_t xb = r * nb + bi;
                const __m256i x = _mm256_loadu_si256((const __m256i *)(xq + xb * KN_QK));
                const int16_t *x8b = x8 + xb * (KN_QK / 2);
                acc[2 * r] = _mm256_fmadd_ps(kn_q_dot4(w0, x, x8b), _mm256_set1_ps(d0 * xs[xb]),
                                             acc[2 * r]);
                acc[2 * r + 1] = _mm256_fmadd_ps(kn_q_dot4(w1, x, x8b),
                                                 _mm256_set1_ps(d1 * xs[xb]), acc[2 * r + 1]);
            }
        }
        for (int64_t r = 0; r < m; r++) {
            c[r * ldc + j] = kn_q_hsum(acc[2 * r]);
            if (two)
                c[r * ldc + j + 1] = kn_q_hsum(acc[2 * r + 1]);
        }
    }
}
/* ---- f8e4m3: fp8 weights with an f32 scale per 128 ----------------------- */

/* 16 e4m3 bytes as 16 f16 bit patterns equal to each value times 2^-8:
 * ((b & 0x7f) << 7) | ((b & 0x80) << 8) puts e4m3's 4 exponent and 3
 * mantissa bits in f16's exponent and mantissa fields, and f16's bias (15)
 * is e4m3's (7) plus 8, normals and subnormals alike. Computed as the byte
 * sign-extended to 16 bits, shifted left 7 and masked with 0xbf80 (the
 * extension's copies of the sign land in bits 14 and 15; bit 14 cleared).
 * The NaN codes (S.1111.111) would read as +-480 * 2^-8: the callers check
 * for them (kn_f8_nan). */
KN_QAVX2 __attribute__((always_inline)) static inline __m256i kn_f8_h16(__m128i v)
{
    return _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(v), 7),
                            _mm256_set1_epi16((short)0xbf80));
}

/* Running check for NaN codes: byte b doubled (b << 1, the sign dropped) is
 * 0xfe exactly when b & 0x7f == 0x7f, and 0xfe is the largest doubled
 * byte, so an unsigned byte max of them reaches 0xfe iff a NaN code was
 * seen. */
KN_QAVX2 __attribute__((always_inline)) static inline __m128i kn_f8_nan(__m128i seen, __m128i v)
{
    return _mm_max_epu8(seen, _mm_add_epi8(v, v));
}

KN_QAVX2 __attribute__((always_inline)) static inline int kn_f8_any_nan(__m128i seen)
{
    return _mm_movemask_epi8(_mm_cmpeq_epi8(seen, _mm_set1_epi8((char)0xfe))) != 0;
}

KN_QAVX2 __attribute__((always_inline)) static inline float kn_f8_scale(const uint8_t *p)
{
    float s;
    memcpy(&s, p, 4);
    return s * 256.0f; /* the 2^8 the f16 form leaves out */
}

/* 16 weights at p times 16 activations at x, added to t (8 lanes). */
KN_QAVX2 __attribute__((always_inline)) static inline __m256 kn_f8_fma16(__m128i v, const float *x,
                                                                         __m256 t)
{
    const __m256i h = kn_f8_h16(v);
    t = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(h)), _mm256_loadu_ps(x), t);
    return _mm256_fmadd_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)),
                           _mm256_loadu_ps(x + 8), t);
}

/* One activation row (a decode step): four weight rows per pass sharing
 * the activations' loads; per block each row's 128 products summed in 8
 * lanes, then scaled once. Rows with a NaN code are redone exactly by the
 * portable loop (which gives NaN, as f32 would). */
KN_QAVX2 static void kn_f8_1(int64_t n, int64_t k, const float *x, const uint8_t *b, int64_t ldb,
                             float *c)
{
    const size_t bb = ein_dtype_bytes(EIN_F8E4M3, KN_F8K);
    const int64_t nb = k / KN_F8K;
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
        const uint8_t *r0 = b + j * ldb;
        __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
        __m128i seen = _mm_setzero_si128();
        for (int64_t bi = 0; bi < nb; bi++) {
            const uint8_t *p0 = r0 + (size_t)bi * bb, *p1 = p0 + ldb, *p2 = p1 + ldb,
                          *p3 = p2 + ldb;
            for (int l = 0; l < 3; l++)   /* 132 bytes: three lines a row */
                for (int r = 0; r < 4; r++)
                    _mm_prefetch((const char *)p0 + (KN_Q_PF + r) * ldb + 64 * l, _MM_HINT_T0);
            const float *xb = x + bi * KN_F8K;
            __m256 t0 = _mm256_setzero_ps(), t1 = t0, t2 = t0, t3 = t0;
            for (int g = 0; g < KN_F8K; g += 16) {
                const __m128i v0 = _mm_loadu_si128((const __m128i *)(p0 + 4 + g));
                const __m128i v1 = _mm_loadu_si128((const __m128i *)(p1 + 4 + g));
                const __m128i v2 = _mm_loadu_si128((const __m128i *)(p2 + 4 + g));
                const __m128i v3 = _mm_loadu_si128((const __m128i *)(p3 + 4 + g));
                seen = kn_f8_nan(kn_f8_nan(seen, v0), v1);
                seen = kn_f8_nan(kn_f8_nan(seen, v2), v3);
                t0 = kn_f8_fma16(v0, xb + g, t0);
                t1 = kn_f8_fma16(v1, xb + g, t1);
                t2 = kn_f8_fma16(v2, xb + g, t2);
                t3 = kn_f8_fma16(v3, xb + g, t3);
            }
            acc0 = _mm256_fmadd_ps(t0, _mm256_set1_ps(kn_f8_scale(p0)), acc0);
            acc1 = _mm256_fmadd_ps(t1, _mm256_set1_ps(kn_f8_scale(p1)), acc1);
            acc2 = _mm256_fmadd_ps(t2, _mm256_set1_ps(kn_f8_scale(p2)), acc2);
            acc3 = _mm256_fmadd_ps(t3, _mm256_set1_ps(kn_f8_scale(p3)), acc3);
        }
        if (kn_f8_any_nan(seen)) {
            kn_q_portable(1, 4, k, x, k, r0, EIN_F8E4M3, ldb, c + j, 1);
            continue;
        }
        c[j] = kn_q_hsum(acc0);
        c[j + 1] = kn_q_hsum(acc1);
        c[j + 2] = kn_q_hsum(acc2);
        c[j + 3] = kn_q_hsum(acc3);
    }
    if (j < n)
        kn_q_portable(1, n - j, k, x, k, b + j * ldb, EIN_F8E4M3, ldb, c + j, 1);
}

/* Several activation rows: one weight row at a time, each block's 128
 * weights converted once (times 2^-8, in a cache-resident buffer) and used
 * by every row. */
KN_QAVX2 static void kn_f8_m(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                             const uint8_t *b, int64_t ldb, float *c, int64_t ldc)
{
    const size_t bb = ein_dtype_bytes(EIN_F8E4M3, KN_F8K);
    const int64_t nb = k / KN_F8K;
    __m256 acc[KN_STREAM_MAX_ROWS];
    float w[KN_F8K] __attribute__((aligned(32)));
    for (int64_t j = 0; j < n; j++) {
        const uint8_t *row = b + j * ldb;
        __m128i seen = _mm_setzero_si128();
        for (int64_t r = 0; r < m; r++)
            acc[r] = _mm256_setzero_ps();
        for (int64_t bi = 0; bi < nb; bi++) {
            const uint8_t *p = row + (size_t)bi * bb;
            for (int l = 0; l < 3; l++)
                _mm_prefetch((const char *)p + KN_Q_PF * ldb + 64 * l, _MM_HINT_T0);
            for (int g = 0; g < KN_F8K; g += 16) {
                const __m128i v = _mm_loadu_si128((const __m128i *)(p + 4 + g));
                seen = kn_f8_nan(seen, v);
                const __m256i h = kn_f8_h16(v);
                _mm256_store_ps(w + g, _mm256_cvtph_ps(_mm256_castsi256_si128(h)));
                _mm256_store_ps(w + g + 8, _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)));
            }
            const __m256 d = _mm256_set1_ps(kn_f8_scale(p));
            for (int64_t r = 0; r < m; r++) {
                const float *x = a + r * lda + bi * KN_F8K;
                __m256 t0 = _mm256_setzero_ps(), t1 = t0;
                for (int g = 0; g < KN_F8K; g += 16) {
                    t0 = _mm256_fmadd_ps(_mm256_load_ps(w + g), _mm256_loadu_ps(x + g), t0);
                    t1 = _mm256_fmadd_ps(_mm256_load_ps(w + g + 8), _mm256_loadu_ps(x + g + 8),
                                         t1);
                }
                acc[r] = _mm256_fmadd_ps(_mm256_add_ps(t0, t1), d, acc[r]);
            }
        }
        if (kn_f8_any_nan(seen))
            kn_q_portable(m, 1, k, a, lda, row, EIN_F8E4M3, ldb, c + j, ldc);
        else
            for (int64_t r = 0; r < m; r++)
                c[r * ldc + j] = kn_q_hsum(acc[r]);
    }
}
#endif

void kn_stream_mm_q(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                    const void *b, ein_dtype bdt, int64_t ldb, float *c, int64_t ldc)
{
    if (m <= 0 || n <= 0)
        return;
#ifdef KN_Q_X86
    if (kn_stream_vector() && m <= KN_STREAM_MAX_ROWS) {
        if (bdt == EIN_F8E4M3) {
            if (m == 1)
                kn_f8_1(n, k, a, b, ldb, c);
            else
                kn_f8_m(m, n, k, a, lda, b, ldb, c, ldc);
            return;
        }
        if (bdt == EIN_Q4_0) {
            const int64_t nb = k / KN_QK;
            int8_t *xq = malloc((size_t)(m * k) + 32);
            float *xs = malloc(sizeof(float) * (size_t)(m * nb) + 4);
            int16_t *x8 = malloc(sizeof(int16_t) * (size_t)(m * nb * (KN_QK / 2)) + 32);
            const int ok = xq && xs && x8;
            if (ok) {
                kn_q_acts8(m, k, a, lda, xq, xs, x8);
                if (m == 1)
                    kn_q4_i8_1(n, k, b, ldb, xq, xs, x8, c);
                else
                    kn_q4_i8(m, n, k, b, ldb, xq, xs, x8, c, ldc);
            }
            free(xq);
            free(xs);
            free(x8);
            if (ok)
                return;
        } else {
            int16_t *xq = malloc(sizeof(int16_t) * (size_t)(m * k) + 32);
            float *xs = malloc(sizeof(float) * (size_t)(m * (k / KN_QK)) + 4);
            const int ok = xq && xs;
            if (ok) {
                kn_q_acts(m, k, a, lda, xq, xs);
                if (m == 1)
                    kn_q8_i16_1(n, k, b, ldb, xq, xs, c);
                else
                    kn_q_avx2_i16(m, n, k, b, bdt, ldb, xq, xs, c, ldc);
            }
            free(xq);
            free(xs);
            if (ok)
                return;
        }
        /* no memory for the rounded activations: the float form */
        kn_q_avx2(m, n, k, a, lda, b, bdt, ldb, c, ldc);
        return;
    }
#endif
    kn_q_portable(m, n, k, a, lda, b, bdt, ldb, c, ldc);
}
