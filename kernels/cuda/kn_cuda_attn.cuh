/* kernels/cuda/kn_cuda_attn.cuh — what causal attention (kn_cuda_attention.cu)
 * and its key-block partial (kn_cuda_attn_partial.cu) share: the block
 * geometry handed to the kernels and the warp-per-query-row online softmax
 * (not a public header; the sequence list is kn_cuda_common.cuh's).
 *
 * Nothing here fails or allocates. */
#ifndef KN_CUDA_ATTN_CUH
#define KN_CUDA_ATTN_CUH

#include "kernels/cuda/kn_cuda_common.cuh"

#include <math.h>

/* Where the blocks are: q/out [hq, tq, d] from token t0, k/v [hk, tk, d]
 * from token u0 (local head indices); q head h reads kv head h / group.
 * window W > 0: query t sees keys u > t - W only (0: none). */
struct kn_cu_ageom {
    int64_t group, d, t0, tq, u0, tk, hq, window;
    float scale;
};

/* The first key query t sees, its sequence starting at s. */
__host__ __device__ __forceinline__ int64_t kn_cu_first_key(int64_t s, int64_t t, int64_t window)
{
    return window > 0 && t - window + 1 > s ? t - window + 1 : s;
}

#define KN_CU_ATT_NPL 8 /* head-dim elements per lane of the warp paths: d <= 256 */

/* One warp, one query row: the online softmax of the scaled row qr against
 * keys [a, b) of kv head kh (absolute token numbers inside [u0, u0 + tk)).
 * Leaves lane's head-dim elements lane + 32 j of the unnormalised output in
 * acc, the running maximum in *m and the sum in *l (-inf and 0: no key). */
template <typename T>
__device__ __forceinline__ void kn_cu_att_row(const kn_cu_ageom &g, const T *qr, const T *k,
                                              const T *v, int64_t kh, int64_t a, int64_t b,
                                              int lane, float acc[KN_CU_ATT_NPL], float *m,
                                              float *l)
{
    float qv[KN_CU_ATT_NPL];
    for (int j = 0; j < KN_CU_ATT_NPL; j++) {
        int64_t e = lane + 32 * j;
        qv[j] = e < g.d ? ld(qr, e) * g.scale : 0.0f;
        acc[j] = 0.0f;
    }
    float mm = -INFINITY, ll = 0.0f;
    for (int64_t u = a; u < b; u++) {
        const T *kr = k + (kh * g.tk + (u - g.u0)) * g.d;
        const T *vr = v + (kh * g.tk + (u - g.u0)) * g.d;
        float s = 0.0f;
        for (int j = 0; j < KN_CU_ATT_NPL; j++) {
            int64_t e = lane + 32 * j;
            if (e < g.d)
                s += qv[j] * ld(kr, e);
        }
        for (int o = 16; o > 0; o >>= 1)
            s += __shfl_xor_sync(0xffffffffu, s, o);
        float mn = fmaxf(mm, s), alpha = __expf(mm - mn), p = __expf(s - mn);
        ll = ll * alpha + p;
        for (int j = 0; j < KN_CU_ATT_NPL; j++) {
            int64_t e = lane + 32 * j;
            acc[j] = acc[j] * alpha + (e < g.d ? p * ld(vr, e) : 0.0f);
        }
        mm = mn;
    }
    *m = mm;
    *l = ll;
}

/* The geometry of blocks q and k (boxes already checked to fit). */
static inline kn_cu_ageom kn_cu_ageom_of(int64_t group, const kn_block *q, const kn_block *k)
{
    kn_cu_ageom g;
    g.group = group;
    g.d = q->box.hi[2];
    g.t0 = q->box.lo[1];
    g.tq = q->box.hi[1] - g.t0;
    g.u0 = k->box.lo[1];
    g.tk = k->box.hi[1] - g.u0;
    g.hq = q->box.hi[0] - q->box.lo[0];
    g.window = 0;
    g.scale = (float)(1.0 / sqrt((double)g.d));
    return g;
}

/* Our FlashAttention-2 kernel (kn_cuda_attn_fa2.cu) on blocks the caller
 * has checked (kn_cuda_attention's or kn_cuda_attention_partial's rules;
 * partial: out f32 rows of d + 1, keys limited to [u0, u0 + tk)). Returns
 * 0, EIN_EUNSUPPORTED with why[cap] filled and nothing launched (dtype,
 * head dim, alignment, a device or build without sm_80), or EIN_EDEVICE.
 * kn_cu_fa2_note counts a call that ran (ran = 1) or fell back with why,
 * for kn_cuda_attention_fa2_report. */
extern "C" int kn_cu_fa2_run(const kn_cu_seqs *seqs, const kn_cu_ageom *g, int partial,
                             ein_dtype dt, const void *q, const void *k, const void *v, void *out,
                             cudaStream_t s, char *why, size_t cap, ein_error *err);
extern "C" void kn_cu_fa2_note(int ran, const char *why);
extern "C" int kn_cu_fa2_prepare(ein_error *err);

#endif
