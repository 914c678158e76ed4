/* kernels/cuda/kn_qmm_plan.h — how the CUDA backend multiplies rows by
 * quantized weights (q8_0, q4_0: ggml's blocks; f8e4m3: fp8 with an f32
 * scale per 128; common/ir/ein_dtype.h; issue 36): the host-side checks
 * and the choice of kernel, in plain C, so that make check tests them
 * without CUDA or a GPU (tests/kernels/test_kn_qmm_plan).
 * kernels/cuda/kn_cuda_quant.cu runs the plan.
 *
 * The one form quantized weights take is the CPU kernel's
 * (kernels/cpu/kn_einsum.c): b is the weight [n, k] ([out, in], k
 * contiguous in blocks of 32, or 128 for f8e4m3), "<A>k,nk-><A>n" with <A> a's other letters
 * in order, a and out of a float dtype (f32, f16, bf16), out = a b^T
 * computed in f32. Two paths:
 *   KN_QMM_GEMV     m <= KN_QMM_GEMV_MAX_ROWS rows of a (decode): one warp
 *                   per weight row streams its blocks once, dequantising in
 *                   registers, for up to KN_QMM_GEMV_LAUNCH_ROWS rows of a
 *                   per launch (`launches` launches: 16 rows read the
 *                   weights twice, still fewer bytes than a dequantised
 *                   bf16 tile's write and read); any float dtypes of a and
 *                   out.
 *   KN_QMM_DEQUANT  more rows (prefill): tiles of tile_rows weight rows
 *                   are dequantised to a's dtype in scratch (device memory
 *                   of scratch_cap bytes), then cuBLAS multiplies a by each
 *                   tile; out must be f32 or a's dtype (cuBLAS's rule).
 *                   For f8e4m3 this is the fallback of a path not built:
 *                   cuBLASLt's fp8 products (CUDA_R_8F_E4M3 with
 *                   VEC128_32F scales, sm_90+) are not wired, and `why`
 *                   says so.
 * A plan is a plain value; nothing is allocated. */
#ifndef KN_QMM_PLAN_H
#define KN_QMM_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "common/base/ein_error.h"
#include "kernels/kn_block.h"

#define KN_QMM_GEMV_MAX_ROWS 16
#define KN_QMM_GEMV_LAUNCH_ROWS 8

enum { KN_QMM_GEMV = 1, KN_QMM_DEQUANT = 2 };

typedef struct kn_qmm_plan {
    int path;             /* KN_QMM_GEMV or KN_QMM_DEQUANT; 0: nothing to do */
    int64_t m, n, k;      /* out[m, n] = a[m, k] b[n, k]^T */
    int64_t ldb;          /* bytes per weight row (k / block blocks) */
    int rows;             /* gemv: the kernel's rows, 1 or 8 */
    int launches;         /* gemv: launches of up to 8 rows of a each */
    int64_t tile_rows;    /* dequant: weight rows per tile (<= n) */
    size_t tile_bytes;    /* dequant: scratch bytes a tile takes */
    const char *why;      /* dequant of f8e4m3: why not fp8 tensor cores (a
                             static string); NULL otherwise */
} kn_qmm_plan;

/* Checks the einsum (b a block dtype) and fills *p. m == 0, n == 0 or
 * k == 0 leave path 0 (k == 0: the caller writes zeros). scratch_cap is
 * the scratch the dequant path may use (0: none, then more than
 * KN_QMM_GEMV_MAX_ROWS rows are EIN_EUNSUPPORTED). Returns 0, or
 * EIN_EUNSUPPORTED (a form or size the CUDA kernels do not take, said by
 * name), EIN_EINVAL (a or out not a float dtype) or EIN_ESHAPE (boxes
 * that disagree with the subscripts or off the dtype's blocks), with
 * err filled. */
int kn_qmm_plan_make(const char *subscripts, const kn_block *a, const kn_block *b,
                     const kn_block *out, size_t scratch_cap, kn_qmm_plan *p, ein_error *err);

#endif
