/* kernels/cpu/kn_internal.h — helpers shared by the CPU kernel files.
 *
 * Not a public header: only the files of kernels/cpu include it. Blocks are dense
 * row-major over their box; "element offset" counts elements of the block's
 * own dtype. Rows are converted to f32 on load and back on store. */
#ifndef KN_INTERNAL_H
#define KN_INTERNAL_H

#include "kernels/kn_cpu.h"

#include <stdint.h>

/* Elements per stack buffer when a kernel streams rows through f32. */
#define KN_CHUNK 1024

/* A block is usable: non-NULL, valid dtype, rank `rank` (-1: any rank in
 * 0..EIN_MAX_RANK), lo <= hi in every dimension, data unless empty.
 * kn_blk_check also wants a float dtype (the kernels that compute);
 * kn_blk_check_any takes integers too (layout kernels, embedding ids). */
int kn_blk_check(const char *what, const char *name, const kn_block *k, int rank,
                 ein_error *err);
int kn_blk_check_any(const char *what, const char *name, const kn_block *k, int rank,
                     ein_error *err);
/* src can be copied into dst: same dtype, or both float (converted). */
int kn_dtype_copyable(const char *what, const kn_block *src, const kn_block *dst,
                      ein_error *err);

/* Row-major element strides of a box. */
void kn_box_strides(const ein_box *b, int64_t *st);

/* n elements at element offset `off` of the block, as f32 (and back). */
void kn_load(const kn_block *k, int64_t off, float *dst, int64_t n);
void kn_store(kn_block *k, int64_t off, const float *src, int64_t n);

/* The whole block as f32: the block's own data when it is f32 (*tmp NULL),
 * else a converted malloc'd copy in *tmp for the caller to free. */
int kn_f32_view(const char *what, const kn_block *k, const float **out, float **tmp,
                ein_error *err);

/* malloc of n floats (at least one), failing with EIN_ENOMEM in err. */
float *kn_falloc(const char *what, int64_t n, ein_error *err);

/* Copy `region` (global coordinates of the destination) from src to dst,
 * where src's element for destination coordinate c sits at c + shift (per
 * dimension; shift NULL = 0). Both boxes must contain the region (shifted
 * for src). Converts dtypes when they differ. */
void kn_copy_region(kn_block *dst, const kn_block *src, const ein_box *region,
                    const int64_t *shift);

/* Sequence ends (rope, attention): strictly ascending, the first > 0;
 * n == 0 means one sequence starting at 0. */
int kn_seq_check(const char *what, const int64_t *ends, int n, ein_error *err);
/* Start of the sequence holding global token t: the largest end <= t (0
 * if none). -1 if t is negative or not before the last end (n > 0). */
int64_t kn_seq_start(const int64_t *ends, int n, int64_t t);

/* Element i of an integer block (i32 or i64; kn_pos_check says which). */
static inline int64_t kn_int_at(const kn_block *b, int64_t i)
{
    return b->dtype == EIN_I32 ? (int64_t)((const int32_t *)b->data)[i]
                               : ((const int64_t *)b->data)[i];
}
/* A rank-1 i32/i64 block over [lo, hi) (positions of a batch or tokens). */
int kn_pos_check(const char *what, const kn_block *pos, int64_t lo, int64_t hi, ein_error *err);

/* C[r, j] = sum over i of A[r, i] * B(i, j), r < m, j < n, i < k, computed
 * in f32 and written over C (kernels/cpu/kn_stream.c): A f32 with row r at
 * a + r*lda (contiguous in i); B of dtype bdt (f32, f16 or bf16, widened in
 * registers) stored [n, k] when b_nk (B(i, j) at element j*ldb + i: a
 * checkpoint's [out, in]) or [k, n] (element i*ldb + j); C f32 at c + r*ldc
 * + j. Reads every element of B once from memory (the rows of A and C stay
 * in cache): for a few rows, a decode step's products. Allocates nothing,
 * cannot fail; m <= 0 or n <= 0 does nothing, k == 0 writes zeros. */
void kn_stream_mm(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const void *b,
                  ein_dtype bdt, int b_nk, int64_t ldb, float *c, int64_t ldc);
/* 1 when kn_stream_mm runs its AVX2/FMA/F16C loops on this CPU, 0 for the
 * portable C ones. kn_stream_force_portable(1) makes it use the portable
 * loops (tests compare both paths; not thread-safe, set before use). */
int kn_stream_vector(void);
void kn_stream_force_portable(int on);

/* C[m, n] = A[m, k] B^T for a quantized B (q8_0, q4_0 or f8e4m3, issue 36)
 * stored [n, k] with row j at byte j * ldb of b, k a multiple of the block
 * (32; 128 for f8e4m3)
 * (kernels/cpu/kn_quant.c): every block read once (AVX2/FMA/F16C when
 * kn_stream_vector() and m <= KN_STREAM_MAX_ROWS: the activations rounded
 * per block of 32, to int16 for q8_0 (scale max|x| / 32767) and to int8
 * for q4_0 (max|x| / 127, as llama.cpp's Q8_0 activations), in a malloc'd
 * copy, exact integer products (vpmaddwd, vpmaddubsw); one row: four
 * weight rows per pass; without memory for the copy, or else, dequantised
 * to f32 in registers).
 * f8e4m3 keeps the activations in f32: each weight converted exactly in
 * registers (its byte as an f16 of the value times 2^-8, vcvtph2ps, the
 * 2^8 in the block's scale), f32 products; a weight row holding a NaN
 * code is redone by the portable loop, so it gives NaN as in f32.
 * Cannot fail; a NaN activation gives NaN sums (its block's scale is NaN),
 * an infinite one NaN on the integer paths. */
#define KN_STREAM_MAX_ROWS 16
void kn_stream_mm_q(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                    const void *b, ein_dtype bdt, int64_t ldb, float *c, int64_t ldc);

/* "[0:128, 64:96]" of a block's box, in a caller buffer. */
const char *kn_fmt(const ein_box *b, char *buf, size_t len);

#endif
