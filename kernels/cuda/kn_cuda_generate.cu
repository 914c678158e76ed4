/* kernels/cuda/kn_cuda_generate.cu — the kernels of generation (issue 25)
 * on the device, with the block rules of kn_cpu_cache_write,
 * kn_cpu_decode_attention and kn_cpu_rope_at (kernels/kn_cpu.h).
 *
 * Positions live on the device (a run-time input), so a position outside
 * the cache is never used as an address: the thread prints the sequence
 * and the position and traps (a device error the worker reports at its
 * next synchronisation), as the embedding kernel does for a bad id. */
#include "kernels/cuda/kn_cuda_common.cuh"

#include <math.h>

#define KN_CU_DEC_MAXD 256   /* head dim: 8 values per lane of a warp */

/* ---- cache_write: one thread per element of the new rows ---- */
template <typename TI, typename TX, typename TY>
__global__ void kn_cu_cache_write_k(const TX *x, const TI *pos, TY *out, int64_t nh, int64_t nb,
                                    int64_t ns, int64_t d, int64_t s0, int64_t rows, int64_t b0,
                                    int64_t c)
{
    int64_t nt = nb * c, n = nh * nt * d;   /* c new tokens per sequence */
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t j = i % d, bt = (i / d) % nt, h = i / (d * nt), b = bt / c;
        int64_t p = (int64_t)pos[b];
        if (p < 0 || p > rows - c) {
            if (j == 0 && h == 0 && bt % c == 0)
                printf("cache_write: sequence %lld is at position %lld, outside the cache [0, "
                       "%lld)\n", (long long)(b0 + b), (long long)p, (long long)rows);
            __trap();
        }
        p += bt % c;
        if (p < s0 || p >= s0 + ns)
            continue;
        st<TY>(out, ((h * nb + b) * ns + (p - s0)) * d + j, ld<TX>(x, i));
    }
}

extern "C" int kn_cuda_cache_write(int64_t rows, const kn_block *state, const kn_block *x,
                                   const kn_block *pos, kn_block *out, void *stream,
                                   ein_error *err)
{
    const char *what = "cuda cache_write";
    int rc;
    if ((rc = kn_cu_blk(what, "state", state, 4, err)) < 0 ||
        (rc = kn_cu_blk(what, "x", x, 3, err)) < 0 ||
        (rc = kn_cu_blk_any(what, "pos", pos, 1, err)) < 0 ||
        (rc = kn_cu_blk(what, "out", out, 4, err)) < 0)
        return rc;
    const ein_box *ob = &out->box;
    if (pos->dtype != EIN_I32 && pos->dtype != EIN_I64)
        return kn_cu_fail(err, EIN_EINVAL, "%s: positions are %s; expected i32 or i64", what,
                          ein_dtype_name(pos->dtype));
    int64_t nbs = ob->hi[1] - ob->lo[1], ntx = x->box.hi[1] - x->box.lo[1];
    int64_t c = nbs > 0 ? ntx / nbs : 0;   /* new tokens per sequence */
    if (!kn_cu_box_eq(&state->box, ob) || state->dtype != out->dtype ||
        x->box.lo[0] != ob->lo[0] || x->box.hi[0] != ob->hi[0] || c < 1 || ntx != c * nbs ||
        x->box.lo[1] != c * ob->lo[1] || x->box.lo[2] != ob->lo[3] || x->box.hi[2] != ob->hi[3] ||
        pos->box.lo[0] != ob->lo[1] || pos->box.hi[0] != ob->hi[1])
        return kn_cu_fail(err, EIN_ESHAPE, "%s: state, x, pos and out blocks do not match", what);
    cudaStream_t s = (cudaStream_t)stream;
    size_t bytes = (size_t)kn_cu_vol(ob) * ein_dtype_size(out->dtype);
    if (out->data != state->data && bytes &&
        cudaMemcpyAsync(out->data, state->data, bytes, cudaMemcpyDeviceToDevice, s) != cudaSuccess)
        return kn_cu_launched(what, err);
    int64_t nh = ob->hi[0] - ob->lo[0], nb = ob->hi[1] - ob->lo[1];
    int64_t ns = ob->hi[2] - ob->lo[2], d = ob->hi[3] - ob->lo[3];
    if (nh * nb * c * d == 0)
        return 0;
    unsigned grid = kn_cu_grid(nh * nb * c * d, KN_CU_BLOCK);
    KN_CU_DISPATCH(x->dtype, TX, KN_CU_DISPATCH(out->dtype, TY,
        if (pos->dtype == EIN_I32)
            kn_cu_cache_write_k<int32_t, TX, TY><<<grid, KN_CU_BLOCK, 0, s>>>(
                (const TX *)x->data, (const int32_t *)pos->data, (TY *)out->data, nh, nb, ns, d,
                ob->lo[2], rows, ob->lo[1], c);
        else
            kn_cu_cache_write_k<int64_t, TX, TY><<<grid, KN_CU_BLOCK, 0, s>>>(
                (const TX *)x->data, (const int64_t *)pos->data, (TY *)out->data, nh, nb, ns, d,
                ob->lo[2], rows, ob->lo[1], c)));
    return kn_cu_launched(what, err);
}

/* ---- decode attention: one warp per (query head, sequence) ----
 * Keys one after the other with the online softmax; each lane holds d/32
 * (at most 8) elements of q and of the output. partial: out rows of d + 1
 * (normalised output, then the log-sum-exp), a row with no key the merge's
 * identity (0, -inf). */
template <typename TI, typename T, typename TY>
__global__ void kn_cu_decode_k(const T *q, const T *k, const T *v, const TI *pos, TY *out,
                               int64_t nqh, int64_t nb, int64_t ns, int64_t d, int64_t s0,
                               int64_t group, int partial, float scale, int64_t b0, int64_t c,
                               int64_t window)
{
    int lane = threadIdx.x & 31;
    int64_t row = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5, nt = nb * c;
    if (row >= nqh * nt)
        return;
    /* query row (qh, bt): token bt % c of sequence bt / c, at pos + bt % c */
    int64_t qh = row / nt, bt = row % nt, b = bt / c, h = qh / group;
    int64_t p = (int64_t)pos[b] + bt % c;
    if (p < 0 || (!partial && p < s0)) {
        if (lane == 0)
            printf("decode_attention: sequence %lld is at position %lld, which sees no key\n",
                   (long long)(b0 + b), (long long)p);
        __trap();
    }
    /* keys [k0, k0 + n) of the block, inside the window (window > 0) */
    int64_t k0 = window > 0 && p - window + 1 > s0 ? p - window + 1 : s0;
    int64_t n = (p + 1 < s0 + ns ? p + 1 : s0 + ns) - k0;
    if (n <= 0 && !partial) {
        if (lane == 0)
            printf("decode_attention: sequence %lld is at position %lld, which sees no key\n",
                   (long long)(b0 + b), (long long)p);
        __trap();
    }
    int64_t w = partial ? d + 1 : d;
    float qv[KN_CU_DEC_MAXD / 32], o[KN_CU_DEC_MAXD / 32];
    int per = (int)((d + 31) / 32);
    for (int e = 0; e < per; e++) {
        int64_t j = lane + 32 * (int64_t)e;
        qv[e] = j < d ? ld<T>(q, row * d + j) * scale : 0.0f;
        o[e] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    const int64_t kb = ((h * nb + b) * ns + (k0 - s0)) * d;
    for (int64_t s = 0; s < n; s++) {
        float dot = 0.0f;
        for (int e = 0; e < per; e++) {
            int64_t j = lane + 32 * (int64_t)e;
            if (j < d)
                dot += qv[e] * ld<T>(k, kb + s * d + j);
        }
        for (int off = 16; off > 0; off >>= 1)
            dot += __shfl_xor_sync(0xffffffffu, dot, off);
        float mn = dot > m ? dot : m, c = expf(m - mn), pe = expf(dot - mn);
        l = l * c + pe;
        for (int e = 0; e < per; e++) {
            int64_t j = lane + 32 * (int64_t)e;
            o[e] = o[e] * c + (j < d ? pe * ld<T>(v, kb + s * d + j) : 0.0f);
        }
        m = mn;
    }
    for (int e = 0; e < per; e++) {
        int64_t j = lane + 32 * (int64_t)e;
        if (j < d)
            st<TY>(out, row * w + j, n > 0 ? o[e] / l : 0.0f);
    }
    if (partial && lane == 0)
        st<TY>(out, row * w + d, n > 0 ? m + logf(l) : -INFINITY);
}

extern "C" int kn_cuda_decode_attention(int64_t group, int partial, const kn_block *q,
                                        const kn_block *k, const kn_block *v, const kn_block *pos,
                                        kn_block *out, void *stream, ein_error *err)
{
    return kn_cuda_decode_attention_window(group, 0, partial, q, k, v, pos, out, stream, err);
}

/* The checks of every decode_attention kernel (kn_cuda_common.cuh). */
extern "C" int kn_cuda_decode_check(const char *what, int64_t group, int64_t window, int partial,
                                    const kn_block *q, const kn_block *k, const kn_block *v,
                                    const kn_block *pos, const kn_block *out, ein_error *err)
{
    int rc;
    if (window < 0)
        return kn_cu_fail(err, EIN_EINVAL, "%s: window %lld is negative (0 = no window)", what,
                          (long long)window);
    if ((rc = kn_cu_blk(what, "q", q, 3, err)) < 0 || (rc = kn_cu_blk(what, "k", k, 4, err)) < 0 ||
        (rc = kn_cu_blk(what, "v", v, 4, err)) < 0 ||
        (rc = kn_cu_blk_any(what, "pos", pos, 1, err)) < 0 ||
        (rc = kn_cu_blk(what, "out", out, 3, err)) < 0)
        return rc;
    const ein_box *qb = &q->box, *kx = &k->box;
    int64_t d = qb->hi[2] - qb->lo[2];
    if (pos->dtype != EIN_I32 && pos->dtype != EIN_I64)
        return kn_cu_fail(err, EIN_EINVAL, "%s: positions are %s; expected i32 or i64", what,
                          ein_dtype_name(pos->dtype));
    if (group < 1 || !kn_cu_box_eq(kx, &v->box) || k->dtype != q->dtype || v->dtype != q->dtype ||
        qb->lo[0] != group * kx->lo[0] || qb->hi[0] != group * kx->hi[0] ||
        kx->hi[1] <= kx->lo[1] || (qb->hi[1] - qb->lo[1]) % (kx->hi[1] - kx->lo[1]) ||
        qb->lo[1] != (qb->hi[1] - qb->lo[1]) / (kx->hi[1] - kx->lo[1]) * kx->lo[1] ||
        qb->lo[2] != 0 || kx->lo[3] != 0 ||
        kx->hi[3] != d || pos->box.lo[0] != kx->lo[1] || pos->box.hi[0] != kx->hi[1])
        return kn_cu_fail(err, EIN_ESHAPE, "%s: q, k, v and pos blocks do not match", what);
    if (d > KN_CU_DEC_MAXD)
        return kn_cu_fail(err, EIN_EUNSUPPORTED, "%s: head dim %lld above %d", what,
                          (long long)d, KN_CU_DEC_MAXD);
    ein_box want = *qb;
    if (partial)
        want.hi[2] = d + 1;
    if (!kn_cu_box_eq(&out->box, &want) || (partial && out->dtype != EIN_F32))
        return kn_cu_fail(err, EIN_ESHAPE, "%s: out block does not match q%s", what,
                          partial ? " (f32, d + 1 columns)" : "");
    return 0;
}

extern "C" int kn_cuda_decode_attention_window(int64_t group, int64_t window, int partial,
                                               const kn_block *q, const kn_block *k,
                                               const kn_block *v, const kn_block *pos,
                                               kn_block *out, void *stream, ein_error *err)
{
    const char *what = partial ? "cuda decode_attention_partial" : "cuda decode_attention";
    int rc;
    if ((rc = kn_cuda_decode_check(what, group, window, partial, q, k, v, pos, out, err)) < 0)
        return rc;
    const ein_box *qb = &q->box, *kx = &k->box;
    int64_t d = qb->hi[2] - qb->lo[2];
    int64_t nqh = qb->hi[0] - qb->lo[0], nb = kx->hi[1] - kx->lo[1];
    int64_t c = (qb->hi[1] - qb->lo[1]) / nb;   /* query tokens per sequence */
    if (nqh * nb == 0 || d == 0)
        return 0;
    cudaStream_t s = (cudaStream_t)stream;
    unsigned grid = kn_cu_grid(nqh * nb * c * 32, KN_CU_BLOCK);
    float scale = (float)(1.0 / sqrt((double)d));
    int64_t ns = kx->hi[2] - kx->lo[2], s0 = kx->lo[2], b0 = kx->lo[1];
    KN_CU_DISPATCH(q->dtype, T, KN_CU_DISPATCH(out->dtype, TY,
        if (pos->dtype == EIN_I32)
            kn_cu_decode_k<int32_t, T, TY><<<grid, KN_CU_BLOCK, 0, s>>>(
                (const T *)q->data, (const T *)k->data, (const T *)v->data,
                (const int32_t *)pos->data, (TY *)out->data, nqh, nb, ns, d, s0, group, partial,
                scale, b0, c, window);
        else
            kn_cu_decode_k<int64_t, T, TY><<<grid, KN_CU_BLOCK, 0, s>>>(
                (const T *)q->data, (const T *)k->data, (const T *)v->data,
                (const int64_t *)pos->data, (TY *)out->data, nqh, nb, ns, d, s0, group, partial,
                scale, b0, c, window)));
    return kn_cu_launched(what, err);
}

/* ---- rope at run-time positions: one thread per rotated pair ---- */
#define KN_CU_ROPE_AT_PAIRS 128
struct kn_cu_rope_at_freqs {
    double f[KN_CU_ROPE_AT_PAIRS];
};

template <typename TI, typename TX, typename TY>
__global__ void kn_cu_rope_at_k(const TI *pos, kn_cu_rope_at_freqs fr, int64_t ntok, int64_t w,
                                int64_t head_dim, double theta, ein_rope_scaling sc,
                                int half_style, const TX *x, TY *y)
{
    int64_t npair = ntok * (w / 2), hh = head_dim / 2;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < npair;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t row = i / (w / 2), qq = i % (w / 2);
        int64_t pair = qq % hh, c = (qq / hh) * head_dim + (half_style ? pair : 2 * pair);
        int64_t c1 = half_style ? c + hh : c + 1;
        double p = (double)pos[row];
        double f = pair < KN_CU_ROPE_AT_PAIRS ? fr.f[pair]
                                              : ein_rope_freq(theta, pair, head_dim, &sc);
        double a = p * f, sd, cd;
        sincos(a, &sd, &cd);
        float cs = (float)cd, sn = (float)sd;
        int64_t o = row * w + c, o1 = row * w + c1;
        float x0 = ld(x, o), x1 = ld(x, o1);
        st(y, o, x0 * cs - x1 * sn);
        st(y, o1, x0 * sn + x1 * cs);
    }
}

extern "C" int kn_cuda_rope_at(int style, int64_t head_dim, double theta, const kn_block *x,
                               const kn_block *pos, kn_block *out, void *stream, ein_error *err)
{
    return kn_cuda_rope_at_scaled(style, head_dim, theta, NULL, x, pos, out, stream, err);
}

extern "C" int kn_cuda_rope_at_scaled(int style, int64_t head_dim, double theta,
                                      const ein_rope_scaling *scp, const kn_block *x,
                                      const kn_block *pos, kn_block *out, void *stream,
                                      ein_error *err)
{
    const char *what = "cuda rope_at";
    int rc;
    ein_rope_scaling sc;
    memset(&sc, 0, sizeof sc);
    if (scp)
        sc = *scp;
    if (ein_rope_scaling_invalid(&sc))
        return kn_cu_fail(err, EIN_EINVAL, "%s: scaling: %s", what, ein_rope_scaling_invalid(&sc));
    if ((rc = kn_cu_blk(what, "x", x, 2, err)) < 0 ||
        (rc = kn_cu_blk_any(what, "pos", pos, 1, err)) < 0 ||
        (rc = kn_cu_blk(what, "out", out, 2, err)) < 0)
        return rc;
    if (style != EIN_ROPE_INTERLEAVED && style != EIN_ROPE_HALF)
        return kn_cu_fail(err, EIN_EINVAL, "%s: style %d is not interleaved or half", what, style);
    if (head_dim <= 0 || head_dim % 2 || !(theta > 0.0))
        return kn_cu_fail(err, EIN_EINVAL, "%s: head_dim must be positive and even, theta positive",
                          what);
    if (pos->dtype != EIN_I32 && pos->dtype != EIN_I64)
        return kn_cu_fail(err, EIN_EINVAL, "%s: positions are %s; expected i32 or i64", what,
                          ein_dtype_name(pos->dtype));
    if (!kn_cu_box_eq(&x->box, &out->box) || pos->box.lo[0] != x->box.lo[0] ||
        pos->box.hi[0] != x->box.hi[0])
        return kn_cu_fail(err, EIN_ESHAPE, "%s: x, pos and out blocks do not match", what);
    int64_t c0 = x->box.lo[1], c1 = x->box.hi[1], ntok = x->box.hi[0] - x->box.lo[0];
    if (c0 % head_dim || c1 % head_dim)
        return kn_cu_fail(err, EIN_ESHAPE, "%s: hidden interval not at head boundaries", what);
    kn_cu_rope_at_freqs fr;
    memset(&fr, 0, sizeof fr);
    for (int64_t j = 0; j < head_dim / 2 && j < KN_CU_ROPE_AT_PAIRS; j++)
        fr.f[j] = ein_rope_freq(theta, j, head_dim, &sc);
    int64_t n = ntok * (c1 - c0) / 2;
    if (n == 0)
        return 0;
    cudaStream_t s = (cudaStream_t)stream;
    unsigned grid = kn_cu_grid(n, KN_CU_BLOCK);
    KN_CU_DISPATCH(x->dtype, TX, KN_CU_DISPATCH(out->dtype, TY,
        if (pos->dtype == EIN_I32)
            kn_cu_rope_at_k<int32_t, TX, TY><<<grid, KN_CU_BLOCK, 0, s>>>(
                (const int32_t *)pos->data, fr, ntok, c1 - c0, head_dim, theta, sc,
                style == EIN_ROPE_HALF, (const TX *)x->data, (TY *)out->data);
        else
            kn_cu_rope_at_k<int64_t, TX, TY><<<grid, KN_CU_BLOCK, 0, s>>>(
                (const int64_t *)pos->data, fr, ntok, c1 - c0, head_dim, theta, sc,
                style == EIN_ROPE_HALF, (const TX *)x->data, (TY *)out->data)));
    return kn_cu_launched(what, err);
}
