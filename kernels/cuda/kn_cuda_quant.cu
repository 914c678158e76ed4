/* kernels/cuda/kn_cuda_quant.cu — products of rows by quantized weights
 * (q8_0, q4_0: ggml's blocks; f8e4m3: an f32 scale and 128 e4m3 bytes;
 * issue 36) on the GPU, weight-only: the weights stay quantized in device
 * memory and the products run in f32. NEVER RUN ON A GPU YET
 * (docs/kernels.md).
 *
 * kn_qmm_plan.h has the checks and picks the path:
 *  - GEMV (at most 16 rows of a, 8 per launch: decode). One warp per
 *    weight row, four
 *    warps per thread block. A pass stages 32 consecutive blocks of the
 *    row (1088 bytes for q8_0, 576 for q4_0, 4224 for f8e4m3) into the
 *    warp's shared memory
 *    with 16-byte streaming loads (__ldcs: each weight byte is read once,
 *    evict-first), then each lane dequantises one block in registers and
 *    takes its dot product with every row of a (f32 sums, one scale
 *    multiply per block, as ggml's dequantize then dot; an f8e4m3 lane
 *    takes its 128 weights 32 at a time, each e4m3 byte converted exactly
 *    by cuda_fp8.h's __nv_cvt_fp8_to_halfraw); a warp shuffle sums the
 *    lanes. A weight row that is not 16-byte aligned (its bytes not a
 *    multiple of 16, or a misaligned buffer) stages with 2-byte loads.
 *  - DEQUANT (more rows: prefill), a first version: tiles of weight rows
 *    are dequantised to a's dtype in the context's scratch (half its
 *    workspace) and cuBLAS multiplies a by each tile (tensor cores for
 *    f16/bf16); no quantized tensor-core kernel yet.
 *  - FP8 (f8e4m3 over 16 rows on sm_90+ with cuBLASLt 12.9+; else the
 *    tiles above, kn_qmm_plan.why saying why): per tile of the scratch,
 *    the weight rows repacked as a contiguous e4m3 matrix and an f32 scale
 *    tensor, the rows of a quantised to e4m3 per 1x128 block (one warp a
 *    block), then cublasLtMatmul with VEC128_32F scales on both. */
#include "config.h"
#include "kernels/cuda/kn_cuda_common.cuh"

#include <cuda_fp8.h>
#ifdef HAVE_CUBLASLT
#include <cublasLt.h>
#endif

extern "C" {
#include "kernels/cuda/kn_qmm_plan.h"
}

#include <string.h>

#define KN_QW 4   /* warps per thread block of the GEMV */
#define KN_QCH 32 /* blocks a warp stages per pass: one per lane */

#define KN_QF8 88 /* the template tag of f8e4m3 (8 and 4: q8_0 and q4_0) */

template <int QT> struct kn_qb;
template <> struct kn_qb<8> { /* f16 scale, 32 int8 */
    static constexpr int bytes = 34, blk = 32;
};
template <> struct kn_qb<4> { /* f16 scale, 16 bytes of nibbles */
    static constexpr int bytes = 18, blk = 32;
};
template <> struct kn_qb<KN_QF8> { /* f32 scale, 128 e4m3 bytes */
    static constexpr int bytes = 132, blk = 128;
};

/* Weights 32 * sub .. 32 * sub + 31 of the block at p (2-byte aligned;
 * f8e4m3 4-byte), before its scale: q8_0 int8 in order; q4_0 low nibbles
 * are elements 0-15, high 16-31, each minus 8 (ggml's dequantize_row_q8_0
 * / q4_0; sub is 0 for both); f8e4m3 its e4m3 bytes' values (exact: every
 * e4m3 value is an f16, NaN codes NaN). */
template <int QT> __device__ __forceinline__ void kn_q_unpack(const uint8_t *p, int sub, float *w);
template <> __device__ __forceinline__ void kn_q_unpack<8>(const uint8_t *p, int sub, float *w)
{
    (void)sub;
    const uint16_t *q = reinterpret_cast<const uint16_t *>(p + 2);
#pragma unroll
    for (int t = 0; t < 16; t++) {
        const uint16_t v = q[t];
        w[2 * t] = (float)(int8_t)(v & 0xff);
        w[2 * t + 1] = (float)(int8_t)(v >> 8);
    }
}
template <> __device__ __forceinline__ void kn_q_unpack<4>(const uint8_t *p, int sub, float *w)
{
    (void)sub;
    const uint16_t *q = reinterpret_cast<const uint16_t *>(p + 2);
#pragma unroll
    for (int t = 0; t < 8; t++) {
        const uint16_t v = q[t];
        const int b0 = v & 0xff, b1 = v >> 8;
        w[2 * t] = (float)((b0 & 15) - 8);
        w[2 * t + 16] = (float)((b0 >> 4) - 8);
        w[2 * t + 1] = (float)((b1 & 15) - 8);
        w[2 * t + 17] = (float)((b1 >> 4) - 8);
    }
}

__device__ __forceinline__ float kn_f8_val(unsigned b)
{
    return __half2float(__half(__nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)b, __NV_E4M3)));
}
template <>
__device__ __forceinline__ void kn_q_unpack<KN_QF8>(const uint8_t *p, int sub, float *w)
{
    const uint32_t *q = reinterpret_cast<const uint32_t *>(p + 4 + 32 * sub);
#pragma unroll
    for (int t = 0; t < 8; t++) {
        const uint32_t v = q[t];
#pragma unroll
        for (int b = 0; b < 4; b++)
            w[4 * t + b] = kn_f8_val((v >> (8 * b)) & 0xffu);
    }
}

/* The block's scale: q8_0's and q4_0's f16, f8e4m3's f32 (4-byte aligned). */
template <int QT> __device__ __forceinline__ float kn_q_scale(const uint8_t *p)
{
    return __half2float(__ushort_as_half(*reinterpret_cast<const uint16_t *>(p)));
}
template <> __device__ __forceinline__ float kn_q_scale<KN_QF8>(const uint8_t *p)
{
    return *reinterpret_cast<const float *>(p);
}

/* Eight activations from p as f32; vec: p is 16-byte aligned (one or two
 * 16-byte loads), else element loads. */
template <typename T> __device__ __forceinline__ void kn_q_ld8(const T *p, float *x, bool vec)
{
#pragma unroll
    for (int t = 0; t < 8; t++)
        x[t] = ld<T>(p, t);
    (void)vec;
}
template <> __device__ __forceinline__ void kn_q_ld8<float>(const float *p, float *x, bool vec)
{
    if (vec) {
        const float4 a = reinterpret_cast<const float4 *>(p)[0];
        const float4 b = reinterpret_cast<const float4 *>(p)[1];
        x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w;
        x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
        return;
    }
#pragma unroll
    for (int t = 0; t < 8; t++)
        x[t] = p[t];
}
/* The low and high 16-bit halves of u as f32 (f16 or bf16 bits). */
template <typename T> __device__ __forceinline__ float kn_q_lo(uint32_t u);
template <typename T> __device__ __forceinline__ float kn_q_hi(uint32_t u);
template <> __device__ __forceinline__ float kn_q_lo<__half>(uint32_t u)
{
    return __half2float(__ushort_as_half((unsigned short)(u & 0xffff)));
}
template <> __device__ __forceinline__ float kn_q_hi<__half>(uint32_t u)
{
    return __half2float(__ushort_as_half((unsigned short)(u >> 16)));
}
template <> __device__ __forceinline__ float kn_q_lo<__nv_bfloat16>(uint32_t u)
{
    return __uint_as_float(u << 16);
}
template <> __device__ __forceinline__ float kn_q_hi<__nv_bfloat16>(uint32_t u)
{
    return __uint_as_float(u & 0xffff0000u);
}
template <typename T> __device__ __forceinline__ void kn_q_ld8_16(const T *p, float *x, bool vec)
{
    if (vec) {
        const uint4 u = *reinterpret_cast<const uint4 *>(p);
        x[0] = kn_q_lo<T>(u.x), x[1] = kn_q_hi<T>(u.x);
        x[2] = kn_q_lo<T>(u.y), x[3] = kn_q_hi<T>(u.y);
        x[4] = kn_q_lo<T>(u.z), x[5] = kn_q_hi<T>(u.z);
        x[6] = kn_q_lo<T>(u.w), x[7] = kn_q_hi<T>(u.w);
        return;
    }
#pragma unroll
    for (int t = 0; t < 8; t++)
        x[t] = ld<T>(p, t);
}
template <> __device__ __forceinline__ void kn_q_ld8<__half>(const __half *p, float *x, bool vec)
{
    kn_q_ld8_16<__half>(p, x, vec);
}
template <> __device__ __forceinline__ void kn_q_ld8<__nv_bfloat16>(const __nv_bfloat16 *p,
                                                                   float *x, bool vec)
{
    kn_q_ld8_16<__nv_bfloat16>(p, x, vec);
}

/* Stage `bytes` (even) of the weight row at src into the warp's sm:
 * 16-byte streaming loads when wvec (src 16-byte aligned), else 2-byte. */
__device__ __forceinline__ void kn_q_stage(uint8_t *sm, const uint8_t *src, int bytes, int lane,
                                           bool wvec)
{
    if (wvec) {
        const int n16 = bytes >> 4;
        for (int u = lane; u < n16; u += 32)
            reinterpret_cast<uint4 *>(sm)[u] = __ldcs(reinterpret_cast<const uint4 *>(src) + u);
        for (int t = (n16 << 4) + 2 * lane; t < bytes; t += 64)
            *reinterpret_cast<uint16_t *>(sm + t) =
                __ldcs(reinterpret_cast<const unsigned short *>(src + t));
    } else {
        for (int t = 2 * lane; t < bytes; t += 64)
            *reinterpret_cast<uint16_t *>(sm + t) =
                __ldcs(reinterpret_cast<const unsigned short *>(src + t));
    }
}

/* y[r, j] = sum_i x[r, i] w[j, i] for r < m (m <= MR), one warp per j. */
template <int QT, typename AT, typename OT, int MR>
__global__ void __launch_bounds__(KN_QW * 32)
    kn_cu_qgemv(const AT *__restrict__ x, const uint8_t *__restrict__ w, int64_t ldb,
                OT *__restrict__ y, int m, int n, int k, int wvec, int xvec)
{
    constexpr int BB = kn_qb<QT>::bytes, BK = kn_qb<QT>::blk;
    __shared__ __align__(16) uint8_t stage[KN_QW][KN_QCH * BB];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int j = blockIdx.x * KN_QW + warp;
    if (j >= n)
        return; /* warp-uniform; no block-wide barrier below */
    const int nb = k / BK;
    const uint8_t *row = w + (int64_t)j * ldb;
    uint8_t *sm = stage[warp];
    float acc[MR];
#pragma unroll
    for (int r = 0; r < MR; r++)
        acc[r] = 0.0f;
    for (int c = 0; c < nb; c += KN_QCH) {
        const int nblk = min(KN_QCH, nb - c);
        kn_q_stage(sm, row + (int64_t)c * BB, nblk * BB, lane, wvec);
        __syncwarp();
        if (lane < nblk) {
            const uint8_t *p = sm + lane * BB;
            const float d = kn_q_scale<QT>(p);
            const int64_t i0 = (int64_t)(c + lane) * BK;
            float s[MR];
#pragma unroll
            for (int r = 0; r < MR; r++)
                s[r] = 0.0f;
            for (int sub = 0; sub < BK / 32; sub++) {
                float wv[32];
                kn_q_unpack<QT>(p, sub, wv);
#pragma unroll
                for (int r = 0; r < MR; r++) {
                    if (r < m) {
                        const AT *xr = x + (int64_t)r * k + i0 + 32 * sub;
#pragma unroll
                        for (int g = 0; g < 4; g++) {
                            float xv[8];
                            kn_q_ld8<AT>(xr + 8 * g, xv, xvec);
#pragma unroll
                            for (int t = 0; t < 8; t++)
                                s[r] = fmaf(wv[8 * g + t], xv[t], s[r]);
                        }
                    }
                }
            }
#pragma unroll
            for (int r = 0; r < MR; r++)
                if (r < m)
                    acc[r] = fmaf(d, s[r], acc[r]);
        }
        __syncwarp();
    }
#pragma unroll
    for (int r = 0; r < MR; r++)
        for (int off = 16; off > 0; off >>= 1)
            acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], off);
    if (lane == 0) {
#pragma unroll
        for (int r = 0; r < MR; r++)
            if (r < m)
                st<OT>(y, (int64_t)r * n + j, acc[r]);
    }
}

/* Two f32 as the 32 bits of two T (f16/bf16, round to nearest even). */
template <typename T> __device__ __forceinline__ uint32_t kn_q_pack2(float a, float b);
template <> __device__ __forceinline__ uint32_t kn_q_pack2<__half>(float a, float b)
{
    return (uint32_t)__half_as_ushort(__float2half_rn(a)) |
           (uint32_t)__half_as_ushort(__float2half_rn(b)) << 16;
}
template <> __device__ __forceinline__ uint32_t kn_q_pack2<__nv_bfloat16>(float a, float b)
{
    return (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(a)) |
           (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(b)) << 16;
}

/* The 32 dequantised weights v into o (16-byte aligned) as T. */
template <typename T> __device__ __forceinline__ void kn_q_put32(T *o, const float *v)
{
    uint4 *o4 = reinterpret_cast<uint4 *>(o);
#pragma unroll
    for (int q = 0; q < 4; q++)
        o4[q] = make_uint4(kn_q_pack2<T>(v[8 * q], v[8 * q + 1]),
                           kn_q_pack2<T>(v[8 * q + 2], v[8 * q + 3]),
                           kn_q_pack2<T>(v[8 * q + 4], v[8 * q + 5]),
                           kn_q_pack2<T>(v[8 * q + 6], v[8 * q + 7]));
}
template <> __device__ __forceinline__ void kn_q_put32<float>(float *o, const float *v)
{
    float4 *o4 = reinterpret_cast<float4 *>(o);
#pragma unroll
    for (int q = 0; q < 8; q++)
        o4[q] = make_float4(v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3]);
}

/* dst[r, :] = the weight row r dequantised to T (q * d rounded to f32,
 * then to T), 32 weights per thread (nu of them a row: k / 32); dst dense
 * [rows, nu * 32]. */
template <int QT, typename T>
__global__ void kn_cu_qdeq(const uint8_t *__restrict__ w, int64_t ldb, int nu, int64_t nunits,
                           T *__restrict__ dst)
{
    constexpr int BB = kn_qb<QT>::bytes, S = kn_qb<QT>::blk / 32;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < nunits;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int u = (int)(i % nu);
        const uint8_t *p = w + (i / nu) * ldb + (int64_t)(u / S) * BB;
        float v[32];
        kn_q_unpack<QT>(p, u % S, v);
        const float d = kn_q_scale<QT>(p);
#pragma unroll
        for (int t = 0; t < 32; t++)
            v[t] *= d;
        kn_q_put32<T>(dst + i * 32, v);
    }
}

template <int QT, typename AT, typename OT>
static void kn_cu_qgemv_go(const kn_qmm_plan *p, const void *x, const void *w, void *y,
                           cudaStream_t s)
{
    const int wvec = (uintptr_t)w % 16 == 0 && p->ldb % 16 == 0;
    const unsigned grid = (unsigned)((p->n + KN_QW - 1) / KN_QW);
    if (p->rows == 1) {
        kn_cu_qgemv<QT, AT, OT, 1><<<grid, KN_QW * 32, 0, s>>>(
            (const AT *)x, (const uint8_t *)w, p->ldb, (OT *)y, 1, (int)p->n, (int)p->k, wvec,
            (uintptr_t)x % 16 == 0);
        return;
    }
    for (int l = 0; l < p->launches; l++) {
        /* rows [r0, r0 + mr) of a and out: the weights are read once per launch */
        const int64_t r0 = (int64_t)l * KN_QMM_GEMV_LAUNCH_ROWS;
        const int mr = (int)(p->m - r0 < KN_QMM_GEMV_LAUNCH_ROWS ? p->m - r0
                                                                 : KN_QMM_GEMV_LAUNCH_ROWS);
        const AT *xr = (const AT *)x + r0 * p->k;
        kn_cu_qgemv<QT, AT, OT, KN_QMM_GEMV_LAUNCH_ROWS><<<grid, KN_QW * 32, 0, s>>>(
            xr, (const uint8_t *)w, p->ldb, (OT *)y + r0 * p->n, mr, (int)p->n, (int)p->k,
            wvec, (uintptr_t)xr % 16 == 0);
    }
}

template <int QT>
static void kn_cu_qgemv_dt(const kn_qmm_plan *p, const kn_block *a, const kn_block *b,
                           kn_block *out, cudaStream_t s)
{
    KN_CU_DISPATCH(a->dtype, AT,
                   KN_CU_DISPATCH(out->dtype, OT,
                                  kn_cu_qgemv_go<QT, AT, OT>(p, a->data, b->data, out->data, s)));
}

/* The dequant path: tile by tile, dequantise then cuBLAS. */
template <int QT>
static int kn_cu_qmm_tiles(kn_cuda_ctx *ctx, const kn_qmm_plan *p, const kn_block *a,
                           const kn_block *b, kn_block *out, void *stream, ein_error *err)
{
    void *tile;
    int rc = kn_cuda_ctx_scratch(ctx, p->tile_bytes, stream, &tile, err);
    if (rc < 0)
        return rc;
    const int nb = (int)(p->k / 32); /* 32-weight units of a row */
    for (int64_t j0 = 0; j0 < p->n && rc == 0; j0 += p->tile_rows) {
        const int64_t w = p->n - j0 < p->tile_rows ? p->n - j0 : p->tile_rows;
        const int64_t nblocks = w * nb;
        const uint8_t *src = (const uint8_t *)b->data + j0 * p->ldb;
        KN_CU_DISPATCH(a->dtype, T,
                       kn_cu_qdeq<QT, T><<<kn_cu_grid(nblocks, KN_CU_BLOCK), KN_CU_BLOCK, 0,
                                           (cudaStream_t)stream>>>(src, p->ldb, nb, nblocks,
                                                                   (T *)tile));
        if ((rc = kn_cu_launched("cuda einsum: dequantise", err)) < 0)
            break;
        kn_cuda_gemm_args g;
        memset(&g, 0, sizeof g);
        g.m = p->m, g.n = w, g.k = p->k, g.batch = 1;
        g.a = a->data, g.b = tile;
        g.c = (char *)out->data + (size_t)j0 * ein_dtype_size(out->dtype);
        g.ab_dtype = a->dtype, g.c_dtype = out->dtype;
        g.trans_b = 1, g.lda = p->k, g.ldb = p->k, g.ldc = p->n;
        g.alpha = 1.0f, g.beta = 0.0f;
        rc = kn_cuda_gemm(ctx, &g, stream, err);
    }
    int rc2 = kn_cuda_ctx_scratch_end(ctx, rc < 0 ? NULL : err);
    return rc < 0 ? rc : rc2;
}

#ifdef HAVE_CUBLASLT
/* Rows [h, k] of x (AT) as e4m3 bytes q [h, k] and f32 scales
 * s[kb * h + r] (the outer dim contiguous: cuBLASLt's VEC128_32F layout),
 * one warp per 128-element block, four elements a lane: s = max|x| / 448
 * over the finite elements, q = x / s rounded to nearest even and
 * saturated (__NV_SATFINITE), NaN and inf the NaN code (the CPU's
 * ein_dtype_from_f32 rule); an all-zero block s = 0 and zero codes. */
template <typename AT>
__global__ void kn_cu_f8_quant_a(const AT *__restrict__ x, int64_t k, int h,
                                 uint8_t *__restrict__ q, float *__restrict__ s)
{
    const int nkb = (int)(k / 128), lane = threadIdx.x & 31;
    const int64_t nw = (int64_t)h * nkb;
    for (int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; w < nw;
         w += ((int64_t)gridDim.x * blockDim.x) >> 5) {
        const int64_t r = w / nkb, kb = w % nkb;
        const AT *p = x + r * k + kb * 128 + 4 * lane;
        float v[4], amax = 0.0f;
#pragma unroll
        for (int t = 0; t < 4; t++) {
            v[t] = ld<AT>(p, t);
            const float a = fabsf(v[t]);
            amax = a <= 3.402823466e38f && a > amax ? a : amax; /* finite only */
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1)
            amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
        const float sc = amax / 448.0f;
        uint32_t word = 0;
#pragma unroll
        for (int t = 0; t < 4; t++) {
            const float y = sc != 0.0f || v[t] != v[t] || fabsf(v[t]) > 3.402823466e38f
                                ? __fdiv_rn(v[t], sc) : 0.0f;
            const uint32_t b = (v[t] != v[t] || fabsf(v[t]) > 3.402823466e38f)
                                   ? (signbit(v[t]) ? 0xffu : 0x7fu)
                                   : (uint32_t)__nv_cvt_float_to_fp8(y, __NV_SATFINITE, __NV_E4M3);
            word |= b << (8 * t);
        }
        reinterpret_cast<uint32_t *>(q + r * k + kb * 128)[lane] = word;
        if (lane == 0)
            s[kb * h + r] = sc;
    }
}

/* Weight rows [w, k] of f8e4m3 blocks at b (row stride ldb) as e4m3 bytes
 * q [w, k] and scales s[kb * w + j]; a thread per 16 bytes of a block. */
__global__ void kn_cu_f8_repack_b(const uint8_t *__restrict__ b, int64_t ldb, int64_t k, int w,
                                  uint8_t *__restrict__ q, float *__restrict__ s)
{
    const int nkb = (int)(k / 128);
    const int64_t nt = (int64_t)w * nkb * 8;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < nt;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int c = (int)(i % 8);
        const int64_t blk = i / 8, j = blk / nkb, kb = blk % nkb;
        const uint8_t *p = b + j * ldb + kb * 132;
        const uint32_t *src = reinterpret_cast<const uint32_t *>(p + 4 + 16 * c);
        reinterpret_cast<uint4 *>(q + j * k + kb * 128)[c] =
            make_uint4(src[0], src[1], src[2], src[3]);
        if (c == 0)
            s[kb * w + j] = *reinterpret_cast<const float *>(p);
    }
}

static size_t kn_cu_up256(size_t x)
{
    return (x + 255) & ~(size_t)255;
}

/* cuBLASLt's type of out's dtype. */
static cudaDataType kn_cu_f8_out(ein_dtype t)
{
    return t == EIN_F16 ? CUDA_R_16F : t == EIN_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

/* One fp8 tile product: out rows [r0, r0 + h) x columns [j0, j0 + w) =
 * (qa, sa) (qb, sb)^T through cublasLtMatmul: "TN" in cuBLAS's column-major
 * terms, A = the weights (k x w, op T), B = the activations (k x h, op N),
 * D = out^T (w x h, ld n). 1: cuBLASLt found no algorithm for it (nothing
 * launched), 0 done, or a negative code. */
static int kn_cu_f8_lt(cublasLtHandle_t lt, const kn_qmm_plan *p, ein_dtype odt,
                       const uint8_t *qa, const float *sa, int64_t h, const uint8_t *qb,
                       const float *sb, int64_t w, void *d, uint32_t dalign, void *ws,
                       size_t wsb, cudaStream_t s, ein_error *err)
{
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    const cudaDataType dt = kn_cu_f8_out(odt);
    cublasStatus_t st = cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode,
                                            sizeof mode);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode,
                                            sizeof mode);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sb,
                                            sizeof sb);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sa,
                                            sizeof sa);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, (uint64_t)p->k, (uint64_t)w, p->k);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, (uint64_t)p->k, (uint64_t)h, p->k);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatrixLayoutCreate(&ld, dt, (uint64_t)w, (uint64_t)h, p->n);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceCreate(&pref);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                  &wsb, sizeof wsb);
    /* out's tiles are not all 256-byte aligned (the default assumed) */
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                  &dalign, sizeof dalign);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                  &dalign, sizeof dalign);
    int rc = 0;
    if (st != CUBLAS_STATUS_SUCCESS) {
        rc = kn_cu_fail(err, EIN_EDEVICE, "cuda einsum: fp8: cuBLASLt descriptors: %s",
                        cublasGetStatusString(st));
    } else {
        cublasLtMatmulHeuristicResult_t res;
        int nres = 0;
        st = cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 1, &res, &nres);
        if (st != CUBLAS_STATUS_SUCCESS || nres < 1) {
            rc = 1;
        } else {
            const float alpha = 1.0f, beta = 0.0f;
            st = cublasLtMatmul(lt, op, &alpha, qb, la, qa, lb, &beta, d, ld, d, ld, &res.algo,
                                ws, wsb, s);
            if (st != CUBLAS_STATUS_SUCCESS)
                rc = kn_cu_fail(err, EIN_EDEVICE, "cuda einsum: fp8: cublasLtMatmul: %s",
                                cublasGetStatusString(st));
        }
    }
    if (pref)
        cublasLtMatmulPreferenceDestroy(pref);
    if (ld)
        cublasLtMatrixLayoutDestroy(ld);
    if (lb)
        cublasLtMatrixLayoutDestroy(lb);
    if (la)
        cublasLtMatrixLayoutDestroy(la);
    if (op)
        cublasLtMatmulDescDestroy(op);
    return rc;
}

/* The fp8 path: for each tile of weight rows, repack it; for each tile of
 * rows of a, quantise it and multiply. 1: cuBLASLt declined the first
 * tile (nothing written to out: the caller dequantises instead). */
static int kn_cu_qmm_fp8(kn_cuda_ctx *ctx, const kn_qmm_plan *p, const kn_block *a,
                         const kn_block *b, kn_block *out, void *stream, ein_error *err)
{
    const cudaStream_t s = (cudaStream_t)stream;
    const int64_t k = p->k, kb = k / 128, MR = p->fp8_m_rows, NR = p->fp8_n_rows;
    void *scratch;
    int rc = kn_cuda_ctx_scratch(ctx, kn_qmm_fp8_bytes(MR, NR, k), stream, &scratch, err);
    if (rc < 0)
        return rc;
    uint8_t *qa = (uint8_t *)scratch;
    float *sa = (float *)(qa + kn_cu_up256((size_t)(MR * k)));
    uint8_t *qb = (uint8_t *)sa + kn_cu_up256((size_t)(MR * kb) * 4);
    float *sb = (float *)(qb + kn_cu_up256((size_t)(NR * k)));
    size_t wsall, half = kn_cuda_ctx_scratch_cap(ctx);
    char *ws = (char *)kn_cuda_ctx_workspace(ctx, &wsall) + half;
    const cublasLtHandle_t lt = (cublasLtHandle_t)kn_cuda_ctx_lt(ctx);
    const size_t osz = ein_dtype_size(out->dtype);
    /* the alignment every tile of out has: of its base and the steps */
    uintptr_t steps = (uintptr_t)out->data | (uintptr_t)(NR * osz) |
                      (uintptr_t)((size_t)(MR * p->n) * osz);
    uint32_t dalign = 256;
    while (dalign > 1 && steps % dalign)
        dalign >>= 1;
    int first = 1;
    for (int64_t j0 = 0; j0 < p->n && rc == 0; j0 += NR) {
        const int64_t w = p->n - j0 < NR ? p->n - j0 : NR;
        kn_cu_f8_repack_b<<<kn_cu_grid(w * kb * 8, KN_CU_BLOCK), KN_CU_BLOCK, 0, s>>>(
            (const uint8_t *)b->data + j0 * p->ldb, p->ldb, k, (int)w, qb, sb);
        if ((rc = kn_cu_launched("cuda einsum: fp8 repack", err)) < 0)
            break;
        for (int64_t r0 = 0; r0 < p->m && rc == 0; r0 += MR) {
            const int64_t h = p->m - r0 < MR ? p->m - r0 : MR;
            KN_CU_DISPATCH(a->dtype, AT,
                           kn_cu_f8_quant_a<AT><<<kn_cu_grid(h * kb * 32, KN_CU_BLOCK),
                                                  KN_CU_BLOCK, 0, s>>>(
                               (const AT *)a->data + r0 * k, k, (int)h, qa, sa));
            if ((rc = kn_cu_launched("cuda einsum: fp8 quantise", err)) < 0)
                break;
            void *d = (char *)out->data + ((size_t)(r0 * p->n + j0)) * osz;
            rc = kn_cu_f8_lt(lt, p, out->dtype, qa, sa, h, qb, sb, w, d, dalign, ws,
                             wsall - half, s, err);
            if (rc == 1 && !first)
                rc = kn_cu_fail(err, EIN_EDEVICE, "cuda einsum: fp8: cuBLASLt found no "
                                "algorithm for a %lld x %lld x %lld tile after taking the "
                                "first", (long long)w, (long long)h, (long long)k);
            first = 0;
        }
    }
    int rc2 = kn_cuda_ctx_scratch_end(ctx, rc < 0 ? NULL : err);
    return rc != 0 ? rc : rc2;
}
#endif

extern "C" int kn_cuda_einsum_q(kn_cuda_ctx *ctx, const char *subscripts, const kn_block *a,
                                const kn_block *b, kn_block *out, void *stream, ein_error *err)
{
    const char *what = "cuda einsum";
    int rc;
    if ((rc = kn_cu_blk_any(what, "a", a, -1, err)) < 0 ||
        (rc = kn_cu_blk_any(what, "b", b, 2, err)) < 0 ||
        (rc = kn_cu_blk_any(what, "out", out, -1, err)) < 0)
        return rc;
    kn_qmm_plan p;
    ein_error e2 = {0, {0}};
    if ((rc = kn_qmm_plan_make(subscripts, a, b, out, kn_cuda_ctx_scratch_cap(ctx), &p, &e2)) < 0)
        return kn_cu_fail(err, rc, "%s", e2.msg);
    int sm;
    size_t ltv;
    kn_cuda_ctx_fp8(ctx, &sm, &ltv);
    kn_qmm_plan_fp8(&p, sm, ltv, kn_cuda_ctx_scratch_cap(ctx));
    /* a and out are float dtypes (the plan checked): KN_CU_DISPATCH has
     * their cases */
    if (kn_cu_vol(&out->box) == 0)
        return 0;
    const cudaStream_t s = (cudaStream_t)stream;
    if (p.path == 0) {
        /* k == 0: every sum is empty */
        cudaError_t ce = cudaMemsetAsync(out->data, 0, (size_t)kn_cu_vol(&out->box) *
                                         ein_dtype_size(out->dtype), s);
        return ce == cudaSuccess ? 0 : kn_cu_fail(err, EIN_EDEVICE, "%s: %s", what,
                                                  cudaGetErrorString(ce));
    }
    const int q8 = b->dtype == EIN_Q8_0, f8 = b->dtype == EIN_F8E4M3;
    if (p.path == KN_QMM_GEMV) {
        if (q8)
            kn_cu_qgemv_dt<8>(&p, a, b, out, s);
        else if (f8)
            kn_cu_qgemv_dt<KN_QF8>(&p, a, b, out, s);
        else
            kn_cu_qgemv_dt<4>(&p, a, b, out, s);
        return kn_cu_launched("cuda einsum: quantized gemv", err);
    }
#ifdef HAVE_CUBLASLT
    if (p.path == KN_QMM_FP8) {
        rc = kn_cu_qmm_fp8(ctx, &p, a, b, out, stream, err);
        if (rc != 1)
            return rc;
        /* cuBLASLt found no algorithm for these shapes and dtypes:
         * dequantised tiles instead (the same product, f32 activations) */
    }
#endif
    return q8   ? kn_cu_qmm_tiles<8>(ctx, &p, a, b, out, stream, err)
           : f8 ? kn_cu_qmm_tiles<KN_QF8>(ctx, &p, a, b, out, stream, err)
                : kn_cu_qmm_tiles<4>(ctx, &p, a, b, out, stream, err);
}
