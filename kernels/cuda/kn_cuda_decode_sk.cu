/* kernels/cuda/kn_cuda_decode_sk.cu — decode attention split over the keys
 * (FlashDecoding's split-K, issue 33). NEVER RUN ON A GPU YET: compiled for
 * sm_80 and sm_90; tools/gpu-check compares it with the CPU kernels.
 *
 * One thread block (4 warps) per (kv head, sequence, key chunk): it loads
 * the R = group * C query rows of that kv head's GQA group (C query tokens
 * per sequence) into shared memory, then its warps walk the chunk's keys
 * (warp w takes keys w, w + 4, ...): each K and V row is read from memory
 * once and used for all R query rows, each row with its own causal /
 * window visibility (token t of sequence b is at pos[b] + t). Each warp
 * keeps an online softmax per row (lane l holds elements l*PER .. l*PER +
 * PER - 1 of the row, d = 32 * PER); the four warps' states are combined
 * in shared memory and the block writes f32 rows of d + 1 (output
 * normalised over the chunk's keys, then m + log l; no key: 0 and -inf)
 * into chunk j's array of the workspace. The chunks are then merged by the
 * LSE aggregation (kn_cuda_agg_lse_blk, the kernel the worker's AGG of
 * decode_attention_partial blocks runs); for decode_attention (not
 * partial) a last kernel drops the LSE column and converts to out's dtype.
 *
 * The arithmetic per key is the warp kernel's (kn_cuda_generate.cu): the
 * scale folded into q, expf of the running max differences, f32 throughout;
 * the order of the additions differs (per warp, then across warps, then
 * across chunks), so results differ from it by float rounding. */
#include "common/base/ein_knob.h"
#include "kernels/cuda/kn_cuda_common.cuh"

#include <math.h>
#include <string.h>

#define KN_SK_WARPS 4
#define KN_SK_MAXR 16      /* query rows per kv head and sequence: group * C */
#define KN_SK_MAXPER 4     /* d = 32 * PER, PER 1..4: head dims 32, 64, 96, 128 */
#define KN_SK_MAXCH 64     /* key chunks per call */
#define KN_SK_BLOCKS 264   /* blocks to aim for (two per SM of an H100 SXM) */
#define KN_SK_MINCHUNK 64  /* keys per chunk at least */

/* The warp kernel's checks, for every query token (positions p0 ..
 * p0 + c - 1) of sequence b0 + b: a token that sees no key traps, block
 * (0, b, 0) saying why. */
__device__ __forceinline__ void kn_sk_check(int64_t p0, int c, int64_t s0, int64_t ns,
                                            int64_t window, int partial, int64_t j, int64_t h,
                                            int64_t b0, int64_t b)
{
    for (int t = 0; t < c; t++) {
        int64_t p = p0 + t;
        int64_t k0 = window > 0 && p - window + 1 > s0 ? p - window + 1 : s0;
        int64_t n = (p + 1 < s0 + ns ? p + 1 : s0 + ns) - k0;
        if (p < 0 || (!partial && (p < s0 || n <= 0))) {
            if (threadIdx.x == 0 && j == 0 && h == 0)
                printf("decode_attention: sequence %lld is at position %lld, which sees no key\n",
                       (long long)(b0 + b), (long long)p);
            __trap();
        }
    }
}

template <typename TI, typename T, int PER>
__global__ void __launch_bounds__(32 * KN_SK_WARPS)
    kn_cu_dec_sk(const T *q, const T *k, const T *v, const TI *pos, float *ws, T *direct,
                 int64_t nb, int64_t ns, int64_t s0, int group, int c, int64_t chunk, int partial,
                 float scale, int64_t window, int64_t rows, int64_t b0)
{
    const int d = 32 * PER, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int R = group * c;
    const int64_t j = blockIdx.x, b = blockIdx.y, h = blockIdx.z, nt = nb * c;
    __shared__ float qs[KN_SK_MAXR][32 * KN_SK_MAXPER];
    __shared__ float wm[KN_SK_WARPS][KN_SK_MAXR], wl[KN_SK_WARPS][KN_SK_MAXR];
    __shared__ float wo[KN_SK_WARPS][KN_SK_MAXR][32 * KN_SK_MAXPER];
    const int64_t p0 = (int64_t)pos[b];
    kn_sk_check(p0, c, s0, ns, window, partial, j, h, b0, b);
    /* the query rows r = g * c + t: q head h * group + g, token b * c + t */
    for (int i = threadIdx.x; i < R * d; i += blockDim.x) {
        int r = i / d, e = i % d, g = r / c, t = r % c;
        int64_t row = (h * group + g) * nt + b * c + t;
        qs[r][e] = ld<T>(q, row * d + e) * scale;
    }
    __syncthreads();
    /* keys of this chunk that some row sees: [lo, hi) */
    int64_t lo = s0 + j * chunk, hi = lo + chunk < s0 + ns ? lo + chunk : s0 + ns;
    if (hi > p0 + c)
        hi = p0 + c;
    if (window > 0 && lo < p0 - window + 1)
        lo = p0 - window + 1;
    float m[KN_SK_MAXR], l[KN_SK_MAXR], o[KN_SK_MAXR][PER];
#pragma unroll
    for (int r = 0; r < KN_SK_MAXR; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int e = 0; e < PER; e++)
            o[r][e] = 0.0f;
    }
    const int64_t base = (h * nb + b) * ns;
    for (int64_t s = lo + warp; s < hi; s += KN_SK_WARPS) {
        float kr[PER], vr[PER];
        const int64_t at = (base + (s - s0)) * d + lane * PER;
#pragma unroll
        for (int e = 0; e < PER; e++) {
            kr[e] = ld<T>(k, at + e);
            vr[e] = ld<T>(v, at + e);
        }
#pragma unroll
        for (int r = 0; r < KN_SK_MAXR; r++) {
            if (r >= R)
                break;
            float dot = 0.0f;
#pragma unroll
            for (int e = 0; e < PER; e++)
                dot += qs[r][lane * PER + e] * kr[e];
            for (int off = 16; off > 0; off >>= 1)
                dot += __shfl_xor_sync(0xffffffffu, dot, off);
            int64_t p = p0 + r % c;
            if (s > p || (window > 0 && s <= p - window))
                continue;   /* the same for every lane: no divergence */
            float mn = dot > m[r] ? dot : m[r], cf = expf(m[r] - mn), pe = expf(dot - mn);
            l[r] = l[r] * cf + pe;
#pragma unroll
            for (int e = 0; e < PER; e++)
                o[r][e] = o[r][e] * cf + pe * vr[e];
            m[r] = mn;
        }
    }
#pragma unroll
    for (int r = 0; r < KN_SK_MAXR; r++) {
        if (r >= R)
            break;
        if (lane == 0) {
            wm[warp][r] = m[r];
            wl[warp][r] = l[r];
        }
#pragma unroll
        for (int e = 0; e < PER; e++)
            wo[warp][r][lane * PER + e] = o[r][e];
    }
    __syncthreads();
    /* warp w combines rows w, w + 4, ... and writes chunk j's partial */
    const int64_t w1 = d + 1;
    for (int r = warp; r < R; r += KN_SK_WARPS) {
        float mx = -INFINITY;
        for (int x = 0; x < KN_SK_WARPS; x++)
            mx = fmaxf(mx, wm[x][r]);
        float sc[KN_SK_WARPS], sum = 0.0f;
        for (int x = 0; x < KN_SK_WARPS; x++) {
            sc[x] = wm[x][r] == -INFINITY ? 0.0f : expf(wm[x][r] - mx);
            sum += wl[x][r] * sc[x];
        }
        int g = r / c, t = r % c;
        int64_t row = (h * group + g) * nt + b * c + t;
        if (direct) { /* one chunk, decode_attention: out's rows of d */
            for (int e = lane; e < d; e += 32) {
                float acc = 0.0f;
                for (int x = 0; x < KN_SK_WARPS; x++)
                    acc += sc[x] * wo[x][r][e];
                st<T>(direct, row * d + e, sum > 0.0f ? acc / sum : 0.0f);
            }
            continue;
        }
        float *dst = ws + (j * rows + row) * w1;
        for (int e = lane; e < d; e += 32) {
            float acc = 0.0f;
            for (int x = 0; x < KN_SK_WARPS; x++)
                acc += sc[x] * wo[x][r][e];
            dst[e] = sum > 0.0f ? acc / sum : 0.0f;
        }
        if (lane == 0)
            dst[d] = sum > 0.0f ? mx + logf(sum) : -INFINITY;
    }
}

/* decode_attention's out: rows of d + 1 f32 -> rows of d in TY. */
template <typename TY>
__global__ void kn_cu_dec_sk_out(const float *src, TY *out, int64_t rows, int64_t d)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < rows * d;
         i += (int64_t)gridDim.x * blockDim.x)
        st<TY>(out, i, src[(i / d) * (d + 1) + i % d]);
}

extern "C" int kn_cuda_decode_impl(ein_error *err)
{
    const char *m = ein_knob_get(EIN_KNOB_CUDA_DECODE);
    if (!m || !*m || !strcmp(m, "splitk"))
        return 1;
    if (!strcmp(m, "warp"))
        return 0;
    return kn_cu_fail(err, EIN_EINVAL, "EIN_CUDA_DECODE=%s: unknown decode attention kernel "
                      "(splitk, the default, or warp)", m);
}

extern "C" size_t kn_cuda_decode_splitk_plan(int64_t nkvh, int64_t nb, int64_t ns, int64_t rows,
                                             int64_t d, int *nch_out, int64_t *chunk_out)
{
    int64_t base = nkvh * nb > 0 ? nkvh * nb : 1;
    int64_t nch = (KN_SK_BLOCKS + base - 1) / base;
    int64_t most = (ns + KN_SK_MINCHUNK - 1) / KN_SK_MINCHUNK;
    if (nch > most)
        nch = most;
    if (nch > KN_SK_MAXCH)
        nch = KN_SK_MAXCH;
    if (nch < 1)
        nch = 1;
    int64_t chunk = (ns + nch - 1) / nch;
    chunk = (chunk + 31) / 32 * 32;
    if (chunk < 1)
        chunk = 1;
    nch = (ns + chunk - 1) / chunk;
    if (nch < 1)
        nch = 1;
    *nch_out = (int)nch;
    *chunk_out = chunk;
    return (size_t)nch * (size_t)rows * (size_t)(d + 1) * sizeof(float);
}

extern "C" int kn_cuda_decode_attention_splitk(int64_t group, int64_t window, int partial,
                                               const kn_block *q, const kn_block *k,
                                               const kn_block *v, const kn_block *pos,
                                               kn_block *out, void *workspace,
                                               size_t workspace_bytes, void *stream,
                                               ein_error *err)
{
    const char *what = partial ? "cuda decode_attention_partial (split-K)"
                               : "cuda decode_attention (split-K)";
    int rc;
    /* the warp kernel's argument checks, shared */
    if ((rc = kn_cuda_decode_check(what, group, window, partial, q, k, v, pos, out, err)) < 0)
        return rc;
    const ein_box *qb = &q->box, *kx = &k->box;
    int64_t d = qb->hi[2] - qb->lo[2], nqh = qb->hi[0] - qb->lo[0], nb = kx->hi[1] - kx->lo[1];
    int64_t nkvh = kx->hi[0] - kx->lo[0], c = nb > 0 ? (qb->hi[1] - qb->lo[1]) / nb : 0;
    int64_t ns = kx->hi[2] - kx->lo[2], s0 = kx->lo[2], b0 = kx->lo[1];
    if (d % 32 || d < 32 || d > 32 * KN_SK_MAXPER)
        return kn_cu_fail(err, EIN_EUNSUPPORTED, "%s: head dim %lld (takes 32, 64, 96, 128)",
                          what, (long long)d);
    if (group * c > KN_SK_MAXR)
        return kn_cu_fail(err, EIN_EUNSUPPORTED, "%s: %lld query rows per kv head and sequence "
                          "(group %lld x %lld tokens; at most %d)", what, (long long)(group * c),
                          (long long)group, (long long)c, KN_SK_MAXR);
    if (nb > 65535 || nkvh > 65535)
        return kn_cu_fail(err, EIN_EUNSUPPORTED, "%s: %lld sequences, %lld kv heads (at most "
                          "65535 each)", what, (long long)nb, (long long)nkvh);
    if (nqh * nb == 0 || d == 0)
        return 0;
    if (ns == 0) /* no key in the block: the warp kernel writes the identity or traps */
        return kn_cu_fail(err, EIN_EUNSUPPORTED, "%s: no keys in the block", what);
    int64_t rows = nqh * nb * c, chunk;
    int nch;
    size_t need = kn_cuda_decode_splitk_plan(nkvh, nb, ns, rows, d, &nch, &chunk);
    /* one chunk: its rows are out's (partial: f32 rows of d + 1; else
     * rows of d in q's dtype), no workspace and no merge */
    int direct = nch == 1 && (partial || out->dtype == q->dtype);
    if (direct)
        need = 0;
    else if (!workspace || need > workspace_bytes)
        return kn_cu_fail(err, EIN_EUNSUPPORTED, "%s: needs %zu bytes of workspace, has %zu",
                          what, need, workspace ? workspace_bytes : (size_t)0);
    cudaStream_t s = (cudaStream_t)stream;
    float *ws = direct && partial ? (float *)out->data : (float *)workspace;
    float scale = (float)(1.0 / sqrt((double)d));
    void *dout = direct && !partial ? out->data : NULL;
    dim3 grid((unsigned)nch, (unsigned)nb, (unsigned)nkvh);
#define KN_SK_LAUNCH(TI, PER)                                                                \
    kn_cu_dec_sk<TI, T, PER><<<grid, 32 * KN_SK_WARPS, 0, s>>>(                              \
        (const T *)q->data, (const T *)k->data, (const T *)v->data, (const TI *)pos->data, ws, \
        (T *)dout, nb, ns, s0, (int)group, (int)c, chunk, partial, scale, window, rows, b0)
#define KN_SK_PER(TI)                                  \
    switch (d / 32) {                                  \
    case 1: KN_SK_LAUNCH(TI, 1); break;                \
    case 2: KN_SK_LAUNCH(TI, 2); break;                \
    case 3: KN_SK_LAUNCH(TI, 3); break;                \
    default: KN_SK_LAUNCH(TI, 4); break;               \
    }
    KN_CU_DISPATCH(q->dtype, T,
        if (pos->dtype == EIN_I32) {
            KN_SK_PER(int32_t)
        } else {
            KN_SK_PER(int64_t)
        });
#undef KN_SK_PER
#undef KN_SK_LAUNCH
    if ((rc = kn_cu_launched(what, err)) < 0 || direct)
        return rc;
    /* the chunks' partials, merged by the LSE aggregation */
    kn_block src[KN_SK_MAXCH];
    ein_box wb = *qb;
    wb.hi[2] = d + 1;
    for (int x = 0; x < nch; x++)
        src[x] = (kn_block){ws + (size_t)x * (size_t)rows * (size_t)(d + 1), EIN_F32, wb};
    if (partial)
        return kn_cuda_agg_lse_blk(src, nch, out, stream, err);
    if (nch > 1 && (rc = kn_cuda_agg_lse_blk(src, nch, &src[0], stream, err)) < 0)
        return rc;
    KN_CU_DISPATCH(out->dtype, TY,
        kn_cu_dec_sk_out<TY><<<kn_cu_grid(rows * d, KN_CU_BLOCK), KN_CU_BLOCK, 0, s>>>(
            ws, (TY *)out->data, rows, d));
    return kn_cu_launched(what, err);
}
