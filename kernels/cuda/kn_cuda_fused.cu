/* kernels/cuda/kn_cuda_fused.cu — the fused kernels of issue 33 on device
 * blocks (see kn_cuda.h): swiglu and add_rmsnorm, each one launch where the
 * unfused pair took two, and each computing what the pair computes (the
 * value between them rounded to out's dtype, as the pair stores it).
 * kn_cpu_swiglu and kn_cpu_add_rmsnorm (kernels/kn_cpu.h) are the CPU
 * twins; tools/gpu-check compares the two on a GPU. */
#include "kernels/cuda/kn_cuda_common.cuh"

#include <math.h>

/* silu as the registry states it (common/ir/ein_ops.def). */
__device__ __forceinline__ float kn_cu_fused_silu(float v)
{
    const float s = 0.0f;
    (void)s;
#define EIN_UNARY(kind, name, nargs, usage, formula) \
    if (EIN_UN_##kind == EIN_UN_SILU)                 \
        return (formula);
#include "common/ir/ein_ops.def"
    return v;
}

/* v rounded to T and back (the stored intermediate of the unfused pair). */
template <typename T> __device__ __forceinline__ float kn_cu_round(float v)
{
    T t;
    st(&t, 0, v);
    return ld(&t, 0);
}

template <typename TG, typename TU, typename TY>
__global__ void kn_cu_swiglu_k(const TG *g, const TU *u, TY *y, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        st(y, i, kn_cu_round<TY>(kn_cu_fused_silu(ld(g, i))) * ld(u, i));
}

extern "C" int kn_cuda_swiglu(const kn_block *gate, const kn_block *up, kn_block *out,
                              void *stream, ein_error *err)
{
    const char *what = "cuda swiglu";
    int rc;
    if ((rc = kn_cu_blk(what, "gate", gate, -1, err)) < 0 ||
        (rc = kn_cu_blk(what, "up", up, -1, err)) < 0 ||
        (rc = kn_cu_blk(what, "out", out, -1, err)) < 0)
        return rc;
    if (!kn_cu_box_eq(&gate->box, &out->box) || !kn_cu_box_eq(&up->box, &out->box))
        return kn_cu_fail(err, EIN_ESHAPE, "%s: gate, up and out boxes differ", what);
    int64_t n = kn_cu_vol(&out->box);
    if (n == 0)
        return 0;
    cudaStream_t s = (cudaStream_t)stream;
    KN_CU_DISPATCH(gate->dtype, TG, KN_CU_DISPATCH(up->dtype, TU, KN_CU_DISPATCH(out->dtype, TY,
        kn_cu_swiglu_k<TG, TU, TY><<<kn_cu_grid(n, KN_CU_BLOCK), KN_CU_BLOCK, 0, s>>>(
            (const TG *)gate->data, (const TU *)up->data, (TY *)out->data, n))));
    return kn_cu_launched(what, err);
}

/* Sum over the block (every thread gets the total). */
__device__ float kn_cu_fused_sum(float v, float *sh)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    if (lane == 0)
        sh[wid] = v;
    __syncthreads();
    float r = sh[0];
    for (int i = 1; i < nw; i++)
        r += sh[i];
    return r;
}

/* One block per row: h = a + b stored in y's first half (rows [0, n)), then
 * rmsnorm(h) in its second half; each thread re-reads the h it stored. */
template <typename TA, typename TB, typename TW, typename TY>
__global__ void kn_cu_add_rmsnorm_k(const TA *a, const TB *b, const TW *w, TY *y, int64_t n,
                                    int64_t d, float eps)
{
    __shared__ float sh[32];
    int64_t r0 = blockIdx.x * d;
    TY *yh = y + r0, *yn = y + n + r0;
    float q = 0.0f;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
        st(yh, i, ld(a, r0 + i) + ld(b, r0 + i));
        float h = ld(yh, i);
        q += h * h;
    }
    float r = rsqrtf(kn_cu_fused_sum(q, sh) / (float)d + eps);
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x)
        st(yn, i, ld(yh, i) * r * ld(w, i));
}

extern "C" int kn_cuda_add_rmsnorm(double eps, const kn_block *a, const kn_block *b,
                                   const kn_block *w, kn_block *out, void *stream, ein_error *err)
{
    const char *what = "cuda add_rmsnorm";
    int rc;
    if ((rc = kn_cu_blk(what, "a", a, -1, err)) < 0 ||
        (rc = kn_cu_blk(what, "b", b, -1, err)) < 0 ||
        (rc = kn_cu_blk(what, "weight", w, 1, err)) < 0 ||
        (rc = kn_cu_blk(what, "out", out, -1, err)) < 0)
        return rc;
    int r = a->box.rank;
    int ok = r >= 1 && kn_cu_box_eq(&a->box, &b->box) && out->box.rank == r + 1 &&
             out->box.lo[0] == 0 && out->box.hi[0] == 2 && w->box.lo[0] == 0 &&
             a->box.lo[r - 1] == 0 && a->box.hi[r - 1] == w->box.hi[0];
    for (int i = 0; ok && i < r; i++)
        ok = out->box.lo[i + 1] == a->box.lo[i] && out->box.hi[i + 1] == a->box.hi[i];
    if (!ok)
        return kn_cu_fail(err, EIN_ESHAPE, "%s: boxes do not fit (a and b equal with the whole "
                          "last axis [0, d), weight [0, d), out [0, 2) x a's box)", what);
    int64_t d = w->box.hi[0], n = kn_cu_vol(&a->box), rows = d > 0 ? n / d : 0;
    if (rows == 0)
        return 0;
    if (rows > (int64_t)0x7fffffff)
        return kn_cu_fail(err, EIN_EUNSUPPORTED, "%s: too many rows", what);
    cudaStream_t s = (cudaStream_t)stream;
    KN_CU_DISPATCH(a->dtype, TA, KN_CU_DISPATCH(b->dtype, TB, KN_CU_DISPATCH(w->dtype, TW,
        KN_CU_DISPATCH(out->dtype, TY,
            kn_cu_add_rmsnorm_k<TA, TB, TW, TY><<<(unsigned)rows, KN_CU_BLOCK, 0, s>>>(
                (const TA *)a->data, (const TB *)b->data, (const TW *)w->data,
                (TY *)out->data, n, d, (float)eps)))));
    return kn_cu_launched(what, err);
}
