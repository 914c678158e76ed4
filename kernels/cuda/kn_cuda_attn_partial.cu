/* kernels/cuda/kn_cuda_attn_partial.cu — one key block's share of causal
 * attention and the log-sum-exp merge of such partials (issue 13; the
 * semantics of kn_cpu_attention_partial and kn_cpu_agg_lse).
 *
 * Partial: one warp per query row (lanes split the head dim), the keys of
 * the block the row sees one at a time with the online softmax; the row is
 * written in f32 as the normalised output then m + log(l) (-inf and zeros
 * when the block holds none of its keys). Merge: one thread per row of
 * d + 1 floats. Both are simple and correct first; the tensor-core path of
 * kn_cuda_attention can be reused for the partial when it matters. Never
 * run on a GPU yet (the project's machines have none): it compiles, and
 * tools/gpu-check runs the kernel tests where a GPU exists. */
#include "kernels/cuda/kn_cuda_attn.cuh"

#include <math.h>
#include <stdint.h>
#include <string.h>

template <typename T>
__global__ void kn_cu_att_part(kn_cu_seqs seqs, kn_cu_ageom g, const T *q, const T *k,
                               const T *v, float *out)
{
    int lane = threadIdx.x & 31;
    for (int64_t row = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32;
         row < g.hq * g.tq; row += (int64_t)gridDim.x * (blockDim.x / 32)) {
        int64_t h = row / g.tq, t = g.t0 + row % g.tq;
        int64_t a = kn_cu_first_key(kn_cu_seq_start(seqs, t), t, g.window), b = t + 1;
        a = a > g.u0 ? a : g.u0;
        b = b < g.u0 + g.tk ? b : g.u0 + g.tk;
        float acc[KN_CU_ATT_NPL], m, l;
        kn_cu_att_row(g, q + row * g.d, k, v, h / g.group, a, b, lane, acc, &m, &l);
        float *orow = out + row * (g.d + 1);
        float inv = l > 0.0f ? 1.0f / l : 0.0f;
        for (int j = 0; j < KN_CU_ATT_NPL; j++) {
            int64_t e = lane + 32 * j;
            if (e < g.d)
                orow[e] = acc[j] * inv;
        }
        if (lane == 0)
            orow[g.d] = l > 0.0f ? m + logf(l) : -INFINITY;
    }
}

/* Rows without keys (no k/v block): zeros and -inf. */
__global__ void kn_cu_att_part_empty(float *out, int64_t rows, int64_t w)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < rows * w;
         i += (int64_t)gridDim.x * blockDim.x)
        out[i] = i % w == w - 1 ? -INFINITY : 0.0f;
}

struct kn_cu_lse_srcs {
    const float *p[16];
};

/* One thread per row: out may alias a source (each thread reads its row
 * of every source before writing it, column by column after the stats). */
__global__ void kn_cu_lse_merge(kn_cu_lse_srcs s, int ns, float *out, int64_t rows, int64_t w)
{
    int64_t d = w - 1;
    for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < rows;
         r += (int64_t)gridDim.x * blockDim.x) {
        float mx = -INFINITY;
        for (int j = 0; j < ns; j++)
            mx = fmaxf(mx, s.p[j][r * w + d]);
        if (mx == -INFINITY) {
            for (int64_t c = 0; c < d; c++)
                out[r * w + c] = 0.0f;
            out[r * w + d] = -INFINITY;
            continue;
        }
        float e[16], sum = 0.0f;
        for (int j = 0; j < ns; j++) {
            float x = s.p[j][r * w + d];
            e[j] = x == -INFINITY ? 0.0f : __expf(x - mx);
            sum += e[j];
        }
        float inv = 1.0f / sum;
        for (int64_t c = 0; c < d; c++) {
            float acc = 0.0f;
            for (int j = 0; j < ns; j++)
                acc += e[j] * s.p[j][r * w + c];
            out[r * w + c] = acc * inv;
        }
        out[r * w + d] = mx + logf(sum);
    }
}

extern "C" int kn_cuda_attention_partial(int64_t group, const int64_t *seq_ends, int nseq,
                                         const kn_block *q, const kn_block *k,
                                         const kn_block *v, kn_block *out, void *stream,
                                         ein_error *err)
{
    return kn_cuda_attention_partial_window(group, 0, seq_ends, nseq, q, k, v, out, stream, err);
}

/* impl as kn_cu_attention_impl's (kn_cuda_attention.cu). */
static int kn_cu_partial_impl(int impl, int64_t group, int64_t window, const int64_t *seq_ends,
                              int nseq, const kn_block *q, const kn_block *k, const kn_block *v,
                              kn_block *out, void *stream, ein_error *err)
{
    const char *what = impl == 2 ? "cuda fa2 attention_partial" : "cuda attention_partial";
    int rc;
    if (window < 0)
        return kn_cu_fail(err, EIN_EINVAL, "%s: window %lld is negative (0 = no window)", what,
                          (long long)window);
    if ((rc = kn_cu_blk(what, "q", q, 3, err)) < 0 || (rc = kn_cu_blk(what, "out", out, 3, err)) < 0)
        return rc;
    if (!k != !v)
        return kn_cu_fail(err, EIN_EINVAL, "%s: k and v must both be given or both be NULL", what);
    kn_cu_seqs seqs;
    if ((rc = kn_cu_seqs_make(what, seq_ends, nseq, &seqs, err)) < 0)
        return rc;
    ein_box want = q->box;
    want.hi[2] += 1;
    if (out->dtype != EIN_F32 || !kn_cu_box_eq(&want, &out->box) || q->box.lo[2] != 0 ||
        q->box.hi[2] < 1)
        return kn_cu_fail(err, EIN_ESHAPE, "%s: out must be f32 over q's box with d + 1 "
                          "columns, d whole", what);
    int64_t d = q->box.hi[2], hq = q->box.hi[0] - q->box.lo[0];
    int64_t tq = q->box.hi[1] - q->box.lo[1], rows = hq * tq;
    cudaStream_t s = (cudaStream_t)stream;
    if (rows == 0)
        return 0;
    if (!k || kn_cu_vol(&k->box) == 0) {
        kn_cu_att_part_empty<<<kn_cu_grid(rows * (d + 1), KN_CU_BLOCK), KN_CU_BLOCK, 0, s>>>(
            (float *)out->data, rows, d + 1);
        return kn_cu_launched(what, err);
    }
    if ((rc = kn_cu_blk(what, "k", k, 3, err)) < 0 || (rc = kn_cu_blk(what, "v", v, 3, err)) < 0)
        return rc;
    if (group < 1 || !kn_cu_box_eq(&k->box, &v->box) || k->box.lo[2] != 0 || k->box.hi[2] != d ||
        q->box.lo[0] != group * k->box.lo[0] || q->box.hi[0] != group * k->box.hi[0])
        return kn_cu_fail(err, EIN_ESHAPE, "%s: boxes do not fit (v = k, whole equal head dim, "
                          "q heads = group * kv heads)", what);
    if (q->dtype != k->dtype || q->dtype != v->dtype)
        return kn_cu_fail(err, EIN_EUNSUPPORTED, "%s: q, k and v must share one dtype", what);
    if (d > 32 * KN_CU_ATT_NPL)
        return kn_cu_fail(err, EIN_EUNSUPPORTED, "%s: head dim %lld above %d", what,
                          (long long)d, 32 * KN_CU_ATT_NPL);
    kn_cu_ageom g = kn_cu_ageom_of(group, q, k);
    g.window = window;
    if (impl > 0) {
        char why[160];
        rc = kn_cu_fa2_run(&seqs, &g, 1, q->dtype, q->data, k->data, v->data, out->data, s, why,
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
    KN_CU_DISPATCH(q->dtype, T,
        kn_cu_att_part<T><<<kn_cu_grid(rows, 8), 256, 0, s>>>(
            seqs, g, (const T *)q->data, (const T *)k->data, (const T *)v->data,
            (float *)out->data));
    return kn_cu_launched(what, err);
}

extern "C" int kn_cuda_attention_partial_window(int64_t group, int64_t window,
                                                const int64_t *seq_ends, int nseq,
                                                const kn_block *q, const kn_block *k,
                                                const kn_block *v, kn_block *out, void *stream,
                                                ein_error *err)
{
    int impl = kn_cuda_attention_impl(err);
    if (impl < 0)
        return impl;
    return kn_cu_partial_impl(impl, group, window, seq_ends, nseq, q, k, v, out, stream, err);
}

extern "C" int kn_cuda_attention_partial_fa2(int64_t group, int64_t window,
                                             const int64_t *seq_ends, int nseq,
                                             const kn_block *q, const kn_block *k,
                                             const kn_block *v, kn_block *out, void *stream,
                                             ein_error *err)
{
    return kn_cu_partial_impl(2, group, window, seq_ends, nseq, q, k, v, out, stream, err);
}

extern "C" int kn_cuda_agg_lse_blk(const kn_block *srcs, int n, kn_block *out, void *stream,
                                   ein_error *err)
{
    const char *what = "cuda agg lse";
    int rc;
    if (n < 1 || !srcs)
        return kn_cu_fail(err, EIN_EINVAL, "%s: needs at least one source, got %d", what, n);
    if ((rc = kn_cu_blk(what, "out", out, -1, err)) < 0)
        return rc;
    int r = out->box.rank;
    if (r < 1 || out->box.lo[r - 1] != 0 || out->box.hi[r - 1] < 2 || out->dtype != EIN_F32)
        return kn_cu_fail(err, EIN_ESHAPE, "%s: out must be f32 rows [0, d + 1), d >= 1", what);
    for (int j = 0; j < n; j++) {
        if ((rc = kn_cu_blk(what, "source", &srcs[j], -1, err)) < 0)
            return rc;
        if (!kn_cu_box_eq(&srcs[j].box, &out->box) || srcs[j].dtype != EIN_F32)
            return kn_cu_fail(err, EIN_ESHAPE, "%s: source %d differs from out in box or dtype",
                              what, j);
    }
    int64_t w = out->box.hi[r - 1], rows = kn_cu_vol(&out->box) / w;
    if (rows == 0)
        return 0;
    /* At most 16 sources a launch: later launches fold into out, which is
     * then their first source (the merge is associative). A source that
     * aliases out must be in the first launch: it is moved there. */
    int first = 0;
    for (int j = 0; j < n; j++)
        if (srcs[j].data == out->data)
            first = j;
    for (int done = 0; done < n;) {
        kn_cu_lse_srcs s;
        memset(&s, 0, sizeof s);
        int ns = 0;
        if (done > 0)
            s.p[ns++] = (const float *)out->data;
        for (; done < n && ns < 16; done++) {
            int j = done == 0 ? first : done == first ? 0 : done;
            s.p[ns++] = (const float *)srcs[j].data;
        }
        kn_cu_lse_merge<<<kn_cu_grid(rows, KN_CU_BLOCK), KN_CU_BLOCK, 0, (cudaStream_t)stream>>>(
            s, ns, (float *)out->data, rows, w);
        if ((rc = kn_cu_launched(what, err)) < 0)
            return rc;
    }
    return 0;
}
