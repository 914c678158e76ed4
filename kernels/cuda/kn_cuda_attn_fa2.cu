/* kernels/cuda/kn_cuda_attn_fa2.cu — our FlashAttention-2-style attention
 * kernel on tensor cores (issue 33), written from the FlashAttention-2 paper
 * (Dao, 2023) and the PTX ISA's fragment layouts. NEVER RUN ON A GPU YET:
 * it compiles for sm_80 and sm_90, and test_kn_cuda's test_attention_fa2
 * checks it against the CPU where a GPU exists. Until that run it is not
 * the default: EIN_CUDA_ATTENTION=fa2 selects it (kn_cuda_attention_impl).
 *
 * Scheme (bf16/f16 in and out, f32 accumulation, head dim 64 or 128):
 * - a block of FA_WARPS warps owns FA_BQ = 128 queries of one query head
 *   (each warp FA_MT x 16 rows), kv head = q head / group (GQA);
 * - the query tile and 64-key K/V tiles are copied to shared memory with
 *   cp.async (16-byte chunks, rows padded by 16 bytes against ldmatrix
 *   bank conflicts), K and V double-buffered: tile i+1 is in flight while
 *   tile i is computed;
 * - S = Q K^T with mma.sync m16n8k16 (operands by ldmatrix), the online
 *   softmax on S in registers (row max across the four lanes of a quad,
 *   row sums lane-local until the end), P converted in registers to the
 *   A operand of O += P V (V by ldmatrix.trans), O in registers;
 * - keys [first key of the block's first query, last query]: tiles before
 *   or after a warp's rows are skipped per warp (causal, packed-sequence
 *   and window skipping), tiles wholly visible to a warp's rows run
 *   unmasked, the others mask each element (sequence start, causal, the
 *   window i - W < j <= i, the key block's end);
 * - query tiles are scheduled last-first (the causally longest first);
 * - the output goes through shared memory for 16-byte stores; the partial
 *   variant writes f32 rows of d + 1 (normalised O, then m + log l; zeros
 *   and -inf for a row that sees no key of the block), the layout
 *   kn_cuda_agg_lse_blk merges. */
#include "common/base/ein_knob.h"
#include "kernels/cuda/kn_cuda_attn.cuh"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FA_BK 64
#define FA_WARPS 4
#define FA_MT 2
#define FA_BQ (FA_WARPS * FA_MT * 16)

template <int D> struct fa2_cfg {
    static const int ld = D + 8; /* padded row, elements */
    static const int q_elems = FA_BQ * ld;
    static const int kv_elems = FA_BK * ld;
    static const size_t bytes = (size_t)(q_elems + 4 * kv_elems) * 2; /* Q, K[2], V[2] */
};

/* ---- PTX wrappers (sm_80+) ---- */

__device__ __forceinline__ uint32_t fa_saddr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16 bytes global -> shared; src_bytes 0 writes zeros (src must still be a
 * valid address). */
__device__ __forceinline__ void fa_cp16(uint32_t dst, const void *src, int src_bytes)
{
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes));
#endif
}

__device__ __forceinline__ void fa_commit()
{
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}

template <int N> __device__ __forceinline__ void fa_wait()
{
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

__device__ __forceinline__ void fa_ldsm4(uint32_t r[4], uint32_t addr)
{
#if __CUDA_ARCH__ >= 800
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
#endif
}

__device__ __forceinline__ void fa_ldsm4_t(uint32_t r[4], uint32_t addr)
{
#if __CUDA_ARCH__ >= 800
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
#endif
}

/* c += a b: A 16x16 (row), B 16x8 (col), C 16x8 f32. */
template <typename T> struct fa_mma;
template <> struct fa_mma<__nv_bfloat16> {
    static __device__ __forceinline__ void run(float c[4], const uint32_t a[4], uint32_t b0,
                                               uint32_t b1)
    {
#if __CUDA_ARCH__ >= 800
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
    }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi)
    {
        __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
        uint32_t u;
        memcpy(&u, &h, 4);
        return u;
    }
};
template <> struct fa_mma<__half> {
    static __device__ __forceinline__ void run(float c[4], const uint32_t a[4], uint32_t b0,
                                               uint32_t b1)
    {
#if __CUDA_ARCH__ >= 800
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
    }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi)
    {
        __half2 h = __floats2half2_rn(lo, hi);
        uint32_t u;
        memcpy(&u, &h, 4);
        return u;
    }
};

/* ROWS rows of D elements from src (row r at src + r * D) into a padded
 * shared tile; rows >= nvalid become zeros (never read from memory). */
template <typename T, int D, int ROWS>
__device__ __forceinline__ void fa_load(T *dst, const T *src, int64_t nvalid, int tid)
{
    const int ch = D / 8;
    for (int i = tid; i < ROWS * ch; i += FA_WARPS * 32) {
        int r = i / ch, c = (i % ch) * 8;
        bool ok = r < nvalid;
        fa_cp16(fa_saddr(dst + r * fa2_cfg<D>::ld + c), ok ? src + (int64_t)r * D + c : src,
                ok ? 16 : 0);
    }
}

/* ---- the phases of kn_cu_fa2, one warp's view (inlined) ---- */

/* Each of this thread's rows: its first key and itself, relative to kbeg
 * (dead rows, r >= nq, see nothing). */
__device__ __forceinline__ void fa2_rows(const kn_cu_seqs &seqs, const kn_cu_ageom &g, int64_t qs,
                                         int64_t nq, int64_t kbeg, int wr0, int gq,
                                         int (&rf)[FA_MT][2], int (&rt)[FA_MT][2])
{
#pragma unroll
    for (int mt = 0; mt < FA_MT; mt++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            int r = wr0 + mt * 16 + gq + 8 * hf;
            int64_t t = qs + r;
            rt[mt][hf] = (int)(t - kbeg);
            rf[mt][hf] = r < nq ? (int)(kn_cu_first_key(kn_cu_seq_start(seqs, t), t, g.window) -
                                        kbeg)
                                : 0x7fffffff;
        }
}

/* O = 0, row maxima -inf, row sums 0. */
template <int D>
__device__ __forceinline__ void fa2_zero(float (&o)[FA_MT][D / 8][4], float (&m)[FA_MT][2],
                                         float (&l)[FA_MT][2])
{
#pragma unroll
    for (int mt = 0; mt < FA_MT; mt++) {
#pragma unroll
        for (int j = 0; j < D / 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                o[mt][j][e] = 0.0f;
        m[mt][0] = m[mt][1] = -INFINITY;
        l[mt][0] = l[mt][1] = 0.0f;
    }
}

/* S = Q K^T for the warp's rows (from wr0) and the key tile Kt. */
template <typename T, int D>
__device__ __forceinline__ void fa2_qk(float (&s)[FA_MT][FA_BK / 8][4], const T *Qs, const T *Kt,
                                       int wr0, int lane)
{
    typedef fa2_cfg<D> C;
    typedef fa_mma<T> M;
#pragma unroll
    for (int mt = 0; mt < FA_MT; mt++)
#pragma unroll
        for (int j = 0; j < FA_BK / 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                s[mt][j][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        uint32_t a[FA_MT][4];
#pragma unroll
        for (int mt = 0; mt < FA_MT; mt++)
            fa_ldsm4(a[mt], fa_saddr(Qs + (wr0 + mt * 16 + (lane & 15)) * C::ld + kk * 16 +
                                     (lane >> 4) * 8));
#pragma unroll
        for (int np = 0; np < FA_BK / 16; np++) {
            uint32_t b[4];
            fa_ldsm4(b, fa_saddr(Kt + (np * 16 + (lane & 7) + (lane >> 4) * 8) * C::ld + kk * 16 +
                                 ((lane >> 3) & 1) * 8));
#pragma unroll
            for (int mt = 0; mt < FA_MT; mt++) {
                M::run(s[mt][2 * np], a[mt], b[0], b[1]);
                M::run(s[mt][2 * np + 1], a[mt], b[2], b[3]);
            }
        }
    }
}

/* The online softmax on S, in registers: mask (unless the tile is full),
 * new row maxima, S becomes P, row sums and O rescaled. kt: the tile's
 * first key from kbeg; sl2: scale * log2(e). */
template <int D>
__device__ __forceinline__ void fa2_softmax(float (&s)[FA_MT][FA_BK / 8][4],
                                            float (&o)[FA_MT][D / 8][4], float (&m)[FA_MT][2],
                                            float (&l)[FA_MT][2], const int (&rf)[FA_MT][2],
                                            const int (&rt)[FA_MT][2], bool full, int kt,
                                            int kend_r, int tq4, float sl2)
{
#pragma unroll
    for (int mt = 0; mt < FA_MT; mt++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            if (!full) {
                const int f = rf[mt][hf], t = rt[mt][hf];
#pragma unroll
                for (int j = 0; j < FA_BK / 8; j++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        int u = kt + j * 8 + tq4 * 2 + e;
                        if (!(u >= f && u <= t && u < kend_r))
                            s[mt][j][2 * hf + e] = -INFINITY;
                    }
            }
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < FA_BK / 8; j++)
                mx = fmaxf(mx, fmaxf(s[mt][j][2 * hf], s[mt][j][2 * hf + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float mnew = fmaxf(m[mt][hf], mx);
            const float mu = mnew == -INFINITY ? 0.0f : mnew * sl2;
            const float alpha = exp2f(m[mt][hf] * sl2 - mu);
            m[mt][hf] = mnew;
            float sum = 0.0f;
#pragma unroll
            for (int j = 0; j < FA_BK / 8; j++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    float p = exp2f(fmaf(s[mt][j][2 * hf + e], sl2, -mu));
                    s[mt][j][2 * hf + e] = p;
                    sum += p;
                }
            l[mt][hf] = l[mt][hf] * alpha + sum;
#pragma unroll
            for (int j = 0; j < D / 8; j++) {
                o[mt][j][2 * hf] *= alpha;
                o[mt][j][2 * hf + 1] *= alpha;
            }
        }
}

/* O += P V: P's accumulator layout is the A operand's. */
template <typename T, int D>
__device__ __forceinline__ void fa2_pv(float (&o)[FA_MT][D / 8][4],
                                       const float (&s)[FA_MT][FA_BK / 8][4], const T *Vt, int lane)
{
    typedef fa2_cfg<D> C;
    typedef fa_mma<T> M;
#pragma unroll
    for (int kk = 0; kk < FA_BK / 16; kk++) {
        uint32_t a[FA_MT][4];
#pragma unroll
        for (int mt = 0; mt < FA_MT; mt++) {
            a[mt][0] = M::pack(s[mt][2 * kk][0], s[mt][2 * kk][1]);
            a[mt][1] = M::pack(s[mt][2 * kk][2], s[mt][2 * kk][3]);
            a[mt][2] = M::pack(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
            a[mt][3] = M::pack(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
        }
#pragma unroll
        for (int dp = 0; dp < D / 16; dp++) {
            uint32_t b[4];
            fa_ldsm4_t(b, fa_saddr(Vt + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * C::ld +
                                   dp * 16 + (lane >> 4) * 8));
#pragma unroll
            for (int mt = 0; mt < FA_MT; mt++) {
                M::run(o[mt][2 * dp], a[mt], b[0], b[1]);
                M::run(o[mt][2 * dp + 1], a[mt], b[2], b[3]);
            }
        }
    }
}

/* Row sums across the quad into l; inv = 1 / l (0 for a row without keys). */
__device__ __forceinline__ void fa2_row_sums(float (&l)[FA_MT][2], float (&inv)[FA_MT][2])
{
#pragma unroll
    for (int mt = 0; mt < FA_MT; mt++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            float x = l[mt][hf];
            x += __shfl_xor_sync(0xffffffffu, x, 1);
            x += __shfl_xor_sync(0xffffffffu, x, 2);
            l[mt][hf] = x;
            inv[mt][hf] = x > 0.0f ? 1.0f / x : 0.0f;
        }
}

/* The partial output: f32 rows of D + 1 at ob (normalised O, then
 * m * scale + log l, or -inf for a row that sees no key). */
template <int D>
__device__ __forceinline__ void fa2_store_partial(float *ob, const float (&o)[FA_MT][D / 8][4],
                                                  const float (&m)[FA_MT][2],
                                                  const float (&l)[FA_MT][2],
                                                  const float (&inv)[FA_MT][2], int64_t nq,
                                                  int wr0, int gq, int tq4, float scale)
{
#pragma unroll
    for (int mt = 0; mt < FA_MT; mt++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            int r = wr0 + mt * 16 + gq + 8 * hf;
            if (r >= nq)
                continue;
            float *orow = ob + (int64_t)r * (D + 1);
#pragma unroll
            for (int j = 0; j < D / 8; j++) {
                orow[j * 8 + tq4 * 2] = o[mt][j][2 * hf] * inv[mt][hf];
                orow[j * 8 + tq4 * 2 + 1] = o[mt][j][2 * hf + 1] * inv[mt][hf];
            }
            if (tq4 == 0)
                orow[D] = l[mt][hf] > 0.0f ? m[mt][hf] * scale + logf(l[mt][hf]) : -INFINITY;
        }
}

/* The output: normalised O through the warp's own query rows of Qs (only
 * it read them) for 16-byte stores to oh. */
template <typename T, int D>
__device__ __forceinline__ void fa2_store(T *oh, T *Qs, const float (&o)[FA_MT][D / 8][4],
                                          const float (&inv)[FA_MT][2], int64_t nq, int wr0,
                                          int gq, int tq4, int lane)
{
    typedef fa2_cfg<D> C;
    typedef fa_mma<T> M;
    __syncwarp();
#pragma unroll
    for (int mt = 0; mt < FA_MT; mt++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            int r = wr0 + mt * 16 + gq + 8 * hf;
            uint32_t *row = (uint32_t *)(Qs + r * C::ld);
#pragma unroll
            for (int j = 0; j < D / 8; j++)
                row[(j * 8 + tq4 * 2) / 2] =
                    M::pack(o[mt][j][2 * hf] * inv[mt][hf], o[mt][j][2 * hf + 1] * inv[mt][hf]);
        }
    __syncwarp();
    const int ch = D / 8;
    int nr = (int)(nq - wr0 < FA_MT * 16 ? nq - wr0 : FA_MT * 16);
    for (int i = lane; i < nr * ch; i += 32) {
        int r = wr0 + i / ch, c = (i % ch) * 8;
        *(uint4 *)(oh + (int64_t)r * D + c) = *(const uint4 *)(Qs + r * C::ld + c);
    }
}

/* PARTIAL: out is f32 [hq, tq, D + 1] and keys are limited to the k/v
 * block [u0, u0 + tk); otherwise out is T [hq, tq, D]. */
template <typename T, int D, bool PARTIAL>
__global__ void __launch_bounds__(FA_WARPS * 32)
kn_cu_fa2(kn_cu_seqs seqs, kn_cu_ageom g, const T *__restrict__ q, const T *__restrict__ k,
          const T *__restrict__ v, void *out)
{
#if __CUDA_ARCH__ >= 800
    typedef fa2_cfg<D> C;
    extern __shared__ __align__(16) unsigned char fa_smem[];
    T *Qs = (T *)fa_smem, *Ks = Qs + C::q_elems, *Vs = Ks + 2 * C::kv_elems;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int gq = lane >> 2, tq4 = lane & 3;
    const int64_t h = blockIdx.y, kh = h / g.group;
    const int64_t tile = (int64_t)gridDim.x - 1 - blockIdx.x;
    const int64_t qs = g.t0 + tile * FA_BQ;
    const int64_t nq = g.t0 + g.tq - qs < FA_BQ ? g.t0 + g.tq - qs : FA_BQ;
    const T *qh = q + (h * g.tq + (qs - g.t0)) * D;
    const T *kb = k + kh * g.tk * D, *vb = v + kh * g.tk * D;

    /* the block's keys [kbeg, kend) */
    int64_t kbeg = kn_cu_first_key(kn_cu_seq_start(seqs, qs), qs, g.window), kend = qs + nq;
    if (PARTIAL) {
        kbeg = kbeg > g.u0 ? kbeg : g.u0;
        kend = kend < g.u0 + g.tk ? kend : g.u0 + g.tk;
    }
    const int ntiles = kend > kbeg ? (int)((kend - kbeg + FA_BK - 1) / FA_BK) : 0;
    const int kend_r = (int)(kend - kbeg);

    /* this warp's rows [wr0, wr0 + 16 FA_MT), live ones [wt0, wt1] */
    const int wr0 = warp * FA_MT * 16;
    const bool wlive = wr0 < nq;
    const int64_t wt0 = qs + wr0;
    const int64_t wt1 = qs + (wr0 + FA_MT * 16 < nq ? wr0 + FA_MT * 16 : nq) - 1;
    /* first keys are nondecreasing in the row: the warp's least and most;
     * from here on tokens are counted from kbeg, in int */
    const int wt0r = (int)(wt0 - kbeg), wt1r = (int)(wt1 - kbeg);
    const int wfirst =
        wlive ? (int)(kn_cu_first_key(kn_cu_seq_start(seqs, wt0), wt0, g.window) - kbeg) : 0;
    const int wlast =
        wlive ? (int)(kn_cu_first_key(kn_cu_seq_start(seqs, wt1), wt1, g.window) - kbeg) : 0;
    int rf[FA_MT][2], rt[FA_MT][2];
    fa2_rows(seqs, g, qs, nq, kbeg, wr0, gq, rf, rt);

    fa_load<T, D, FA_BQ>(Qs, qh, nq, tid);
    if (ntiles > 0) {
        fa_load<T, D, FA_BK>(Ks, kb + (kbeg - g.u0) * D, kend - kbeg, tid);
        fa_load<T, D, FA_BK>(Vs, vb + (kbeg - g.u0) * D, kend - kbeg, tid);
    }
    fa_commit();

    float o[FA_MT][D / 8][4];
    float m[FA_MT][2], l[FA_MT][2];
    fa2_zero<D>(o, m, l);
    const float sl2 = g.scale * 1.4426950408889634f; /* scale * log2(e) */

    for (int it = 0; it < ntiles; it++) {
        const int st = it & 1;
        const int kt = it * FA_BK; /* from kbeg */
        if (it + 1 < ntiles) {
            const int64_t kn = kbeg + kt + FA_BK;
            fa_load<T, D, FA_BK>(Ks + (st ^ 1) * C::kv_elems, kb + (kn - g.u0) * D, kend - kn, tid);
            fa_load<T, D, FA_BK>(Vs + (st ^ 1) * C::kv_elems, vb + (kn - g.u0) * D, kend - kn, tid);
            fa_commit();
            fa_wait<1>();
        } else {
            fa_wait<0>();
        }
        __syncthreads();
        const bool skip = !wlive || kt > wt1r || kt + FA_BK <= wfirst;
        if (!skip) {
            const T *Kt = Ks + st * C::kv_elems, *Vt = Vs + st * C::kv_elems;
            const bool full = kt + FA_BK - 1 <= wt0r && kt >= wlast && kt + FA_BK <= kend_r;
            float s[FA_MT][FA_BK / 8][4];
            fa2_qk<T, D>(s, Qs, Kt, wr0, lane);
            fa2_softmax<D>(s, o, m, l, rf, rt, full, kt, kend_r, tq4, sl2);
            fa2_pv<T, D>(o, s, Vt, lane);
        }
        __syncthreads(); /* the stage computed on is loaded again next */
    }
    fa_wait<0>();

    float inv[FA_MT][2];
    fa2_row_sums(l, inv);
    if (PARTIAL)
        fa2_store_partial<D>((float *)out + (h * g.tq + (qs - g.t0)) * (D + 1), o, m, l, inv, nq,
                             wr0, gq, tq4, g.scale);
    else
        fa2_store<T, D>((T *)out + (h * g.tq + (qs - g.t0)) * D, Qs, o, inv, nq, wr0, gq, tq4,
                        lane);
#else
    (void)seqs;
    (void)g;
    (void)q;
    (void)k;
    (void)v;
    (void)out;
    __trap(); /* never launched: the host checks the kernel's PTX version */
#endif
}

/* ---- host side ---- */

/* Which attention kernel EIN_CUDA_ATTENTION names. */
extern "C" int kn_cuda_attention_impl(ein_error *err)
{
    const char *m = ein_knob_get(EIN_KNOB_CUDA_ATTENTION);
    if (!m || !*m || !strcmp(m, "wmma"))
        return 0;
    if (!strcmp(m, "fa2"))
        return 1;
    return kn_cu_fail(err, EIN_EINVAL, "EIN_CUDA_ATTENTION=%s: unknown attention kernel "
                      "(wmma, the default, or fa2)", m);
}

static pthread_mutex_t fa_mu = PTHREAD_MUTEX_INITIALIZER;
static long long fa_ran, fa_declined;
static char fa_why[200];

extern "C" void kn_cu_fa2_note(int ran, const char *why)
{
    pthread_mutex_lock(&fa_mu);
    if (ran)
        fa_ran++;
    else {
        fa_declined++;
        snprintf(fa_why, sizeof fa_why, "%s", why);
    }
    pthread_mutex_unlock(&fa_mu);
}

extern "C" int kn_cuda_attention_fa2_report(char *buf, size_t cap)
{
    if (!buf || cap == 0)
        return EIN_EINVAL;
    pthread_mutex_lock(&fa_mu);
    snprintf(buf, cap, "fa2 attention: %lld calls ran, %lld fell back to the wmma kernel%s%s%s",
             fa_ran, fa_declined, fa_declined ? " (last: " : "", fa_declined ? fa_why : "",
             fa_declined ? ")" : "");
    pthread_mutex_unlock(&fa_mu);
    return 0;
}

/* Shared-memory opt-in and the PTX version of each instance, once per
 * process (before any graph capture: kn_cuda_attention_prepare). */
static int fa_prepared; /* 0 not yet, 1 usable, -1 not usable (fa_unusable says why) */
static char fa_unusable[160];

template <typename T, int D, bool P> static cudaError_t fa_prep_one(int *ptx)
{
    cudaFuncAttributes a;
    cudaError_t e = cudaFuncGetAttributes(&a, kn_cu_fa2<T, D, P>);
    if (e != cudaSuccess)
        return e;
    if (a.ptxVersion < *ptx)
        *ptx = a.ptxVersion;
    return cudaFuncSetAttribute(kn_cu_fa2<T, D, P>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)fa2_cfg<D>::bytes);
}

extern "C" int kn_cu_fa2_prepare(ein_error *err)
{
    (void)err;
    if (fa_prepared)
        return 0;
    int ptx = 1000;
    cudaError_t e = fa_prep_one<__nv_bfloat16, 128, false>(&ptx);
    if (e == cudaSuccess) e = fa_prep_one<__nv_bfloat16, 64, false>(&ptx);
    if (e == cudaSuccess) e = fa_prep_one<__half, 128, false>(&ptx);
    if (e == cudaSuccess) e = fa_prep_one<__half, 64, false>(&ptx);
    if (e == cudaSuccess) e = fa_prep_one<__nv_bfloat16, 128, true>(&ptx);
    if (e == cudaSuccess) e = fa_prep_one<__nv_bfloat16, 64, true>(&ptx);
    if (e == cudaSuccess) e = fa_prep_one<__half, 128, true>(&ptx);
    if (e == cudaSuccess) e = fa_prep_one<__half, 64, true>(&ptx);
    /* Whatever fails here (no kernel image for this device, more shared
     * memory than it has) makes fa2 unusable in this process, with the
     * reason; it never fails the caller, whose default path needs none of
     * it. */
    if (e != cudaSuccess) {
        cudaGetLastError();
        snprintf(fa_unusable, sizeof fa_unusable, "not usable on this device: %s",
                 cudaGetErrorString(e));
        fa_prepared = -1;
        return 0;
    }
    if (ptx < 80) {
        snprintf(fa_unusable, sizeof fa_unusable, "built for PTX %d.%d (needs sm_80: "
                 "cp.async, ldmatrix, mma.sync bf16)", ptx / 10, ptx % 10);
        fa_prepared = -1;
        return 0;
    }
    fa_prepared = 1;
    return 0;
}

/* Runs the kernel on checked blocks (the callers' checks: kn_cuda_attention
 * and kn_cuda_attention_partial's); 0, EIN_EUNSUPPORTED with why[cap] and
 * nothing launched, or EIN_EDEVICE. */
extern "C" int kn_cu_fa2_run(const kn_cu_seqs *seqs, const kn_cu_ageom *g, int partial,
                             ein_dtype dt, const void *q, const void *k, const void *v, void *out,
                             cudaStream_t s, char *why, size_t cap, ein_error *err)
{
    int rc = kn_cu_fa2_prepare(err);
    if (rc < 0)
        return rc;
    if (fa_prepared < 0) {
        snprintf(why, cap, "%s", fa_unusable);
        return EIN_EUNSUPPORTED;
    }
    if (dt != EIN_BF16 && dt != EIN_F16) {
        snprintf(why, cap, "dtype %s (f16 and bf16 only)", ein_dtype_name(dt));
        return EIN_EUNSUPPORTED;
    }
    if (g->d != 64 && g->d != 128) {
        snprintf(why, cap, "head dim %lld (64 and 128 only)", (long long)g->d);
        return EIN_EUNSUPPORTED;
    }
    if ((uintptr_t)q % 16 || (uintptr_t)k % 16 || (uintptr_t)v % 16 ||
        (!partial && (uintptr_t)out % 16)) {
        snprintf(why, cap, "a block is not 16-byte aligned");
        return EIN_EUNSUPPORTED;
    }
    const int64_t lim = (int64_t)1 << 30;
    if (g->t0 + g->tq > lim || g->u0 + g->tk > lim || g->t0 < 0 || g->u0 < 0) {
        snprintf(why, cap, "token numbers beyond 2^30");
        return EIN_EUNSUPPORTED;
    }
    if (g->hq > 65535) {
        snprintf(why, cap, "more than 65535 query heads");
        return EIN_EUNSUPPORTED;
    }
    dim3 grid((unsigned)((g->tq + FA_BQ - 1) / FA_BQ), (unsigned)g->hq);
    dim3 block(FA_WARPS * 32);
    size_t sm = g->d == 128 ? fa2_cfg<128>::bytes : fa2_cfg<64>::bytes;
#define FA_LAUNCH(T, D, P)                                                                    \
    kn_cu_fa2<T, D, P><<<grid, block, sm, s>>>(*seqs, *g, (const T *)q, (const T *)k,          \
                                               (const T *)v, out)
    if (dt == EIN_BF16 && g->d == 128 && partial)
        FA_LAUNCH(__nv_bfloat16, 128, true);
    else if (dt == EIN_BF16 && g->d == 128)
        FA_LAUNCH(__nv_bfloat16, 128, false);
    else if (dt == EIN_BF16 && partial)
        FA_LAUNCH(__nv_bfloat16, 64, true);
    else if (dt == EIN_BF16)
        FA_LAUNCH(__nv_bfloat16, 64, false);
    else if (g->d == 128 && partial)
        FA_LAUNCH(__half, 128, true);
    else if (g->d == 128)
        FA_LAUNCH(__half, 128, false);
    else if (partial)
        FA_LAUNCH(__half, 64, true);
    else
        FA_LAUNCH(__half, 64, false);
#undef FA_LAUNCH
    return kn_cu_launched(partial ? "cuda fa2 attention_partial" : "cuda fa2 attention", err);
}
