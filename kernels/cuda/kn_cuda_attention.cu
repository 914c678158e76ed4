/* kernels/cuda/kn_cuda_attention.cu — causal GQA attention over packed
 * sequences on the GPU (semantics of kn_cpu_attention).
 *
 * Tensor-core path (f16/bf16, head dim 64 or 128): FlashAttention-2's
 * decomposition. A block of 4 warps owns 64 queries of one query head; it
 * walks 64-key tiles from the start of its first query's sequence to its
 * last query (tiles outside that range are never loaded: causal skipping),
 * K and V tiles staged in shared memory. Each warp owns 16 query rows:
 * S = Q K^T with WMMA 16x16x16 fragments (f32 accumulation), the online
 * softmax on S in shared memory (two lanes per row, the mask from each
 * row's token and sequence start), P stored in the input
 * dtype, and O += P V with the accumulator kept in shared memory (WMMA
 * leaves the fragment-to-row mapping unspecified, so the per-row rescaling
 * by exp(m_old - m_new) happens there).
 *
 * Fallback (any dtype, head dim up to 256): one warp per query row, lanes
 * split the head dim, keys one at a time with the online softmax. Correct
 * everywhere, slow; it is the reference the fused kernel is tested against
 * on odd shapes. */
#include "kernels/cuda/kn_cuda_attn.cuh"

#include <math.h>
#include <mma.h>
#include <stdint.h>
#include <string.h>

using namespace nvcuda;

/* ---- fallback: one warp per query row ---- */

template <typename T>
__global__ void kn_cu_att_warp(kn_cu_seqs seqs, kn_cu_ageom g, const T *q, const T *k,
                               const T *v, T *out)
{
    int lane = threadIdx.x & 31;
    for (int64_t row = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32;
         row < g.hq * g.tq; row += (int64_t)gridDim.x * (blockDim.x / 32)) {
        int64_t h = row / g.tq, t = g.t0 + row % g.tq;
        float acc[KN_CU_ATT_NPL], m, l;
        kn_cu_att_row(g, q + row * g.d, k, v, h / g.group,
                      kn_cu_first_key(kn_cu_seq_start(seqs, t), t, g.window), t + 1, lane, acc,
                      &m, &l);
        T *orow = out + row * g.d;
        for (int j = 0; j < KN_CU_ATT_NPL; j++) {
            int64_t e = lane + 32 * j;
            if (e < g.d)
                st(orow, e, acc[j] / l);
        }
    }
}

/* ---- tensor-core path ---- */

#define KN_FA_BQ 64
#define KN_FA_BK 64
#define KN_FA_WARPS 4

template <int D> struct kn_fa_layout {
    static const int ldq = D + 8;        /* 16-bit rows, padded against bank conflicts */
    static const int lds = KN_FA_BK + 4; /* f32 S rows */
    static const int ldp = KN_FA_BK + 8; /* 16-bit P rows */
    static const int ldo = D + 4;        /* f32 O rows */
    static const size_t q_off = 0;
    static const size_t k_off = q_off + (size_t)KN_FA_BQ * ldq * 2;
    static const size_t v_off = k_off + (size_t)KN_FA_BK * ldq * 2;
    static const size_t s_off = v_off + (size_t)KN_FA_BK * ldq * 2;
    static const size_t p_off = s_off + (size_t)KN_FA_BQ * lds * 4;
    static const size_t o_off = p_off + (size_t)KN_FA_BQ * ldp * 2;
    static const size_t ml_off = o_off + (size_t)KN_FA_BQ * ldo * 4;
    static const size_t bytes = ml_off + (size_t)KN_FA_BQ * 4 * 2 + (size_t)KN_FA_BQ * 8;
};

/* The K and V tile of keys [kt, kt + nk) (rows >= nk zero) into shared
 * memory, by 16-byte chunks when the global rows allow (vec). */
template <typename T, int D>
__device__ __forceinline__ void kn_fa_load_kv(T *Ks, T *Vs, const T *kb, const T *vb, int64_t kt,
                                              int64_t u0, int64_t nk, bool vec, int tid)
{
    typedef kn_fa_layout<D> L;
    if (vec) {
        /* 16-byte chunks: 8 elements; D and the padded smem rows are
         * multiples of 8 elements, the global rows 16-byte aligned. */
        for (int i = tid; i < KN_FA_BK * D / 8; i += blockDim.x) {
            int r = i / (D / 8), c = (i % (D / 8)) * 8;
            uint4 kz = make_uint4(0, 0, 0, 0), vz = kz;
            if (r < nk) {
                int64_t o = (kt - u0 + r) * D + c;
                kz = *(const uint4 *)(kb + o);
                vz = *(const uint4 *)(vb + o);
            }
            *(uint4 *)(Ks + r * L::ldq + c) = kz;
            *(uint4 *)(Vs + r * L::ldq + c) = vz;
        }
    } else {
        for (int i = tid; i < KN_FA_BK * D; i += blockDim.x) {
            int r = i / D, c = i % D;
            int64_t o = (kt - u0 + r) * D + c;
            Ks[r * L::ldq + c] = r < nk ? kb[o] : T(0.0f);
            Vs[r * L::ldq + c] = r < nk ? vb[o] : T(0.0f);
        }
    }
}

template <typename T, int D>
__global__ void __launch_bounds__(KN_FA_WARPS * 32)
kn_cu_att_fa(kn_cu_seqs seqs, kn_cu_ageom g, const T *q, const T *k, const T *v, T *out)
{
    typedef kn_fa_layout<D> L;
    extern __shared__ __align__(16) unsigned char kn_fa_smem[];
    T *Qs = (T *)(kn_fa_smem + L::q_off), *Ks = (T *)(kn_fa_smem + L::k_off);
    T *Vs = (T *)(kn_fa_smem + L::v_off), *Ps = (T *)(kn_fa_smem + L::p_off);
    float *Ss = (float *)(kn_fa_smem + L::s_off), *Os = (float *)(kn_fa_smem + L::o_off);
    float *Ms = (float *)(kn_fa_smem + L::ml_off), *Ls = Ms + KN_FA_BQ;
    int64_t *Rs = (int64_t *)(Ls + KN_FA_BQ);   /* each row's sequence start */

    const int tid = threadIdx.x, warp = tid / 32, lane = tid & 31;
    const int64_t h = blockIdx.y, kh = h / g.group;
    const int64_t qs = g.t0 + (int64_t)blockIdx.x * KN_FA_BQ;
    const int64_t nq = g.t0 + g.tq - qs < KN_FA_BQ ? g.t0 + g.tq - qs : KN_FA_BQ;
    const T *qh = q + (h * g.tq + (qs - g.t0)) * D;
    const T *kb = k + kh * g.tk * D, *vb = v + kh * g.tk * D;
    const bool vec = ((uintptr_t)kb % 16 == 0) && ((uintptr_t)vb % 16 == 0);

    for (int i = tid; i < KN_FA_BQ * D; i += blockDim.x) {
        int r = i / D, c = i % D;
        Qs[r * L::ldq + c] = r < nq ? qh[(int64_t)r * D + c] : T(0.0f);
    }
    for (int i = tid; i < KN_FA_BQ * L::ldo; i += blockDim.x)
        Os[i] = 0.0f;
    for (int i = tid; i < KN_FA_BQ; i += blockDim.x) {
        Ms[i] = -INFINITY;
        Ls[i] = 0.0f;
        Rs[i] = kn_cu_seq_start(seqs, qs + (i < nq ? i : nq - 1));
    }
    __syncthreads();

    /* keys [kbeg, kend): from the first query's sequence start or window */
    const int64_t kbeg = kn_cu_first_key(Rs[0], qs, g.window), kend = qs + nq;
    const int r0 = warp * 16;
    for (int64_t kt = kbeg; kt < kend; kt += KN_FA_BK) {
        const int64_t nk = kend - kt < KN_FA_BK ? kend - kt : KN_FA_BK;
        kn_fa_load_kv<T, D>(Ks, Vs, kb, vb, kt, g.u0, nk, vec, tid);
        __syncthreads();
        if (r0 < nq) {
            /* S[16 rows, 64 keys] = Q K^T */
            for (int j = 0; j < KN_FA_BK / 16; j++) {
                wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
                wmma::fill_fragment(acc, 0.0f);
                for (int kk = 0; kk < D / 16; kk++) {
                    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
                    wmma::load_matrix_sync(fa, Qs + r0 * L::ldq + kk * 16, L::ldq);
                    wmma::load_matrix_sync(fb, Ks + j * 16 * L::ldq + kk * 16, L::ldq);
                    wmma::mma_sync(acc, fa, fb, acc);
                }
                wmma::store_matrix_sync(Ss + r0 * L::lds + j * 16, acc, L::lds,
                                        wmma::mem_row_major);
            }
            __syncwarp();
            /* Online softmax: lanes 2i and 2i+1 own row r0+i, each half of
             * its 64 keys (interleaved columns, against bank conflicts), so
             * a row's max and sum take one shuffle each. */
            {
                const int r = r0 + (lane >> 1), half = lane & 1;
                const int64_t t = qs + r, rs = Rs[r];
                float sv[KN_FA_BK / 2], mx = -INFINITY;
                for (int j = 0; j < KN_FA_BK / 2; j++) {
                    int c = 2 * j + half;
                    int64_t u = kt + c;
                    int vis = r < nq && c < nk && u >= rs && u <= t &&
                              (g.window <= 0 || u > t - g.window);
                    sv[j] = vis ? Ss[r * L::lds + c] * g.scale : -INFINITY;
                    mx = fmaxf(mx, sv[j]);
                }
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                float mold = Ms[r], mnew = fmaxf(mold, mx);
                float alpha = mnew == -INFINITY ? 1.0f : __expf(mold - mnew), sum = 0.0f;
                for (int j = 0; j < KN_FA_BK / 2; j++) {
                    float p = sv[j] == -INFINITY ? 0.0f : __expf(sv[j] - mnew);
                    Ps[r * L::ldp + 2 * j + half] = T(p);
                    sum += p;
                }
                sum += __shfl_xor_sync(0xffffffffu, sum, 1);
                if (alpha != 1.0f)
                    for (int c = half; c < D; c += 2)
                        Os[r * L::ldo + c] *= alpha;
                __syncwarp();   /* both lanes of the pair have read Ms[r] */
                if (!half) {
                    Ms[r] = mnew;
                    Ls[r] = Ls[r] * alpha + sum;
                }
            }
            __syncwarp();
            /* O[16 rows, D] += P V */
            for (int j = 0; j < D / 16; j++) {
                wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
                wmma::load_matrix_sync(acc, Os + r0 * L::ldo + j * 16, L::ldo, wmma::mem_row_major);
                for (int kk = 0; kk < KN_FA_BK / 16; kk++) {
                    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
                    wmma::load_matrix_sync(fa, Ps + r0 * L::ldp + kk * 16, L::ldp);
                    wmma::load_matrix_sync(fb, Vs + kk * 16 * L::ldq + j * 16, L::ldq);
                    wmma::mma_sync(acc, fa, fb, acc);
                }
                wmma::store_matrix_sync(Os + r0 * L::ldo + j * 16, acc, L::ldo,
                                        wmma::mem_row_major);
            }
        }
        __syncthreads();   /* K/V tiles are overwritten next */
    }
    T *oh = out + (h * g.tq + (qs - g.t0)) * D;
    for (int i = tid; i < nq * D; i += blockDim.x) {
        int r = i / D, c = i % D;
        oh[(int64_t)r * D + c] = T(Os[r * L::ldo + c] / Ls[r]);
    }
}

/* Opting in to more than 48 KiB of shared memory per block is a function
 * attribute of the current device. It is set once per process (a worker
 * drives one device), from kn_cuda_ctx_create() or else the first call:
 * before any graph capture in both cases, since it is not a stream
 * operation and capture mode may refuse it. */
static int kn_cu_att_prepared;

static int kn_cu_att_prepare(ein_error *err)
{
    if (kn_cu_att_prepared)
        return 0;
    cudaError_t e = cudaFuncSetAttribute(kn_cu_att_fa<__nv_bfloat16, 128>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)kn_fa_layout<128>::bytes);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(kn_cu_att_fa<__half, 128>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)kn_fa_layout<128>::bytes);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(kn_cu_att_fa<__nv_bfloat16, 64>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)kn_fa_layout<64>::bytes);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(kn_cu_att_fa<__half, 64>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)kn_fa_layout<64>::bytes);
    if (e != cudaSuccess)
        return kn_cu_fail(err, EIN_EDEVICE, "cuda attention: shared memory opt-in: %s",
                          cudaGetErrorString(e));
    kn_cu_att_prepared = 1;
    return 0;
}

extern "C" int kn_cuda_attention_prepare(ein_error *err)
{
    int rc = kn_cu_att_prepare(err);
    return rc < 0 ? rc : kn_cu_fa2_prepare(err);
}

template <typename T, int D>
static int kn_cu_att_fa_launch(const kn_cu_seqs &seqs, const kn_cu_ageom &g, const kn_block *q,
                               const kn_block *k, const kn_block *v, kn_block *out,
                               cudaStream_t s, ein_error *err)
{
    typedef kn_fa_layout<D> L;
    int rc = kn_cu_att_prepare(err);
    if (rc < 0)
        return rc;
    dim3 grid((unsigned)((g.tq + KN_FA_BQ - 1) / KN_FA_BQ), (unsigned)g.hq);
    kn_cu_att_fa<T, D><<<grid, KN_FA_WARPS * 32, L::bytes, s>>>(
        seqs, g, (const T *)q->data, (const T *)k->data, (const T *)v->data, (T *)out->data);
    return kn_cu_launched("cuda attention", err);
}

extern "C" int kn_cuda_attention(int64_t group, const int64_t *seq_ends, int nseq,
                                 const kn_block *q, const kn_block *k, const kn_block *v,
                                 kn_block *out, void *stream, ein_error *err)
{
    return kn_cuda_attention_window(group, 0, seq_ends, nseq, q, k, v, out, stream, err);
}

/* impl: 0 today's kernels, 1 fa2 where it applies (else today's, noted),
 * 2 fa2 only (EIN_EUNSUPPORTED where it does not apply). */
static int kn_cu_attention_impl(int impl, int64_t group, int64_t window, const int64_t *seq_ends,
                                int nseq, const kn_block *q, const kn_block *k, const kn_block *v,
                                kn_block *out, void *stream, ein_error *err)
{
    const char *what = impl == 2 ? "cuda fa2 attention" : "cuda attention";
    int rc;
    if (window < 0)
        return kn_cu_fail(err, EIN_EINVAL, "%s: window %lld is negative (0 = no window)", what,
                          (long long)window);
    if ((rc = kn_cu_blk(what, "q", q, 3, err)) < 0 || (rc = kn_cu_blk(what, "k", k, 3, err)) < 0 ||
        (rc = kn_cu_blk(what, "v", v, 3, err)) < 0 || (rc = kn_cu_blk(what, "out", out, 3, err)) < 0)
        return rc;
    kn_cu_seqs seqs;
    if ((rc = kn_cu_seqs_make(what, seq_ends, nseq, &seqs, err)) < 0)
        return rc;
    if (group < 1)
        return kn_cu_fail(err, EIN_EINVAL, "%s: group is not positive", what);
    if (!kn_cu_box_eq(&q->box, &out->box) || !kn_cu_box_eq(&k->box, &v->box) ||
        q->box.lo[2] != 0 || k->box.lo[2] != 0 || q->box.hi[2] != k->box.hi[2] || q->box.hi[2] < 1 ||
        q->box.lo[0] != group * k->box.lo[0] || q->box.hi[0] != group * k->box.hi[0])
        return kn_cu_fail(err, EIN_ESHAPE, "%s: boxes do not fit (out = q, v = k, whole equal "
                          "head dim, q heads = group * kv heads)", what);
    if (q->dtype != k->dtype || q->dtype != v->dtype || q->dtype != out->dtype)
        return kn_cu_fail(err, EIN_EUNSUPPORTED, "%s: q, k, v and out must share one dtype",
                          what);
    kn_cu_ageom g = kn_cu_ageom_of(group, q, k);
    g.window = window;
    if (g.tq == 0 || g.hq == 0)
        return 0;
    /* Every query's keys [start(t), t] (inside its window) must be in the
     * k/v block. */
    int64_t s0 = 0, t1 = g.t0 + g.tq;
    for (int i = 0; i < nseq; i++)
        s0 = seq_ends[i] <= g.t0 ? seq_ends[i] : s0;
    s0 = kn_cu_first_key(s0, g.t0, window);
    if (g.t0 < 0 || (nseq > 0 && t1 > seq_ends[nseq - 1]) || g.u0 > s0 || g.u0 + g.tk < t1)
        return kn_cu_fail(err, EIN_ESHAPE, "%s: the k/v block does not hold every key the "
                          "queries attend to", what);
    if (g.hq > 65535)
        return kn_cu_fail(err, EIN_EUNSUPPORTED, "%s: more than 65535 query heads", what);
    cudaStream_t s = (cudaStream_t)stream;
    if (impl > 0) {
        char why[160];
        rc = kn_cu_fa2_run(&seqs, &g, 0, q->dtype, q->data, k->data, v->data, out->data, s, why,
                           sizeof why, err);
        if (rc != EIN_EUNSUPPORTED) {
            if (rc == 0 && impl == 1)
                kn_cu_fa2_note(1, "");
            return rc;
        }
        if (impl == 2)
            return kn_cu_fail(err, EIN_EUNSUPPORTED, "%s: %s", what, why);
        kn_cu_fa2_note(0, why);
    }
    if (q->dtype == EIN_BF16 && g.d == 128)
        return kn_cu_att_fa_launch<__nv_bfloat16, 128>(seqs, g, q, k, v, out, s, err);
    if (q->dtype == EIN_BF16 && g.d == 64)
        return kn_cu_att_fa_launch<__nv_bfloat16, 64>(seqs, g, q, k, v, out, s, err);
    if (q->dtype == EIN_F16 && g.d == 128)
        return kn_cu_att_fa_launch<__half, 128>(seqs, g, q, k, v, out, s, err);
    if (q->dtype == EIN_F16 && g.d == 64)
        return kn_cu_att_fa_launch<__half, 64>(seqs, g, q, k, v, out, s, err);
    if (g.d > 32 * KN_CU_ATT_NPL)
        return kn_cu_fail(err, EIN_EUNSUPPORTED, "%s: head dim %lld above %d outside f16/bf16 "
                          "64/128", what, (long long)g.d, 32 * KN_CU_ATT_NPL);
    int64_t rows = g.hq * g.tq;
    KN_CU_DISPATCH(q->dtype, T,
        kn_cu_att_warp<T><<<kn_cu_grid(rows, 8), 256, 0, s>>>(
            seqs, g, (const T *)q->data, (const T *)k->data, (const T *)v->data,
            (T *)out->data));
    return kn_cu_launched(what, err);
}

extern "C" int kn_cuda_attention_window(int64_t group, int64_t window, const int64_t *seq_ends,
                                        int nseq, const kn_block *q, const kn_block *k,
                                        const kn_block *v, kn_block *out, void *stream,
                                        ein_error *err)
{
    int impl = kn_cuda_attention_impl(err);
    if (impl < 0)
        return impl;
    return kn_cu_attention_impl(impl, group, window, seq_ends, nseq, q, k, v, out, stream, err);
}

extern "C" int kn_cuda_attention_fa2(int64_t group, int64_t window, const int64_t *seq_ends,
                                     int nseq, const kn_block *q, const kn_block *k,
                                     const kn_block *v, kn_block *out, void *stream,
                                     ein_error *err)
{
    return kn_cu_attention_impl(2, group, window, seq_ends, nseq, q, k, v, out, stream, err);
}
