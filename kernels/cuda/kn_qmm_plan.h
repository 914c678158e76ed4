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
 *                   For f8e4m3 this is the fallback of KN_QMM_FP8, and
 *                   `why` says why that was not taken.
 *   KN_QMM_FP8      f8e4m3 over 16 rows where the device has sm_90+ and
 *                   cuBLASLt 12.9+ (kn_qmm_plan_fp8): per tile, the
 *                   weight rows repacked into a contiguous e4m3 matrix
 *                   and an f32 scale tensor, the rows of a quantised to
 *                   e4m3 with one f32 scale per 1x128 block (max|x| / 448,
 *                   round to nearest even), and cublasLtMatmul with
 *                   CUDA_R_8F_E4M3 A and B and VEC128_32F scales for both
 *                   ("TN": cuBLAS's A is the weights, op T, cuBLAS's B the
 *                   activations; each scale tensor [k / 128][outer rows],
 *                   the outer dim contiguous); out any float dtype.
 * A plan is a plain value; nothing is allocated. */
#ifndef KN_QMM_PLAN_H
#define KN_QMM_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "common/base/ein_error.h"
#include "kernels/kn_block.h"

#define KN_QMM_GEMV_MAX_ROWS 16
#define KN_QMM_GEMV_LAUNCH_ROWS 8

enum { KN_QMM_GEMV = 1, KN_QMM_DEQUANT = 2, KN_QMM_FP8 = 3 };

typedef struct kn_qmm_plan {
    int path;             /* KN_QMM_GEMV or KN_QMM_DEQUANT; 0: nothing to do */
    int64_t m, n, k;      /* out[m, n] = a[m, k] b[n, k]^T */
    int64_t ldb;          /* bytes per weight row (k / block blocks) */
    int rows;             /* gemv: the kernel's rows, 1 or 8 */
    int launches;         /* gemv: launches of up to 8 rows of a each */
    int64_t tile_rows;    /* dequant: weight rows per tile (<= n) */
    size_t tile_bytes;    /* dequant: scratch bytes a tile takes */
    int f8;               /* b is f8e4m3 */
    int64_t fp8_m_rows;   /* fp8: rows of a per tile (<= m) */
    int64_t fp8_n_rows;   /* fp8: weight rows per tile (<= n) */
    char why[200];        /* f8e4m3 on the dequant path: why not KN_QMM_FP8;
                             "" otherwise */
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

/* Scratch bytes of an fp8 tile of mr rows of a and nr weight rows of k:
 * the four regions (e4m3 a, a's scales, e4m3 weights, their scales), each
 * rounded up to 256 bytes. */
size_t kn_qmm_fp8_bytes(int64_t mr, int64_t nr, int64_t k);

/* After kn_qmm_plan_make: an f8e4m3 plan on the dequant path moves to
 * KN_QMM_FP8 when the device allows it: sm (10 * major + minor) at least
 * 90 and lt_version (cublasLtGetVersion(); 0: built without cuBLASLt) at
 * least 120900, and scratch_cap holds a tile of at least 16 rows of a
 * and 16 weight rows (tiles: all of m and n when they fit, else about
 * half the scratch each, in multiples of 128 rows). Otherwise the plan
 * stays on the dequant path and p->why names the reason. Any other plan
 * is left alone. Cannot fail. */
void kn_qmm_plan_fp8(kn_qmm_plan *p, int sm, size_t lt_version, size_t scratch_cap);

#endif
