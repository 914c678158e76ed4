/* kernels/cuda/kn_cuda_ops.cu — elementwise, aggregation, softmax, norms,
 * rope and the layout copies on device blocks (see kn_cuda.h).
 *
 * Every kernel is a grid-stride loop or one block per row; boxes are
 * checked on the host, and the index arithmetic the device needs (strides,
 * offsets, broadcast) travels by value in the launch parameters, so nothing
 * is allocated or copied to the device. */
#include "kernels/cuda/kn_cuda_common.cuh"

extern "C" {
#include "common/ir/ein_kernel_rules.h"
}

#include <math.h>
#include <string.h>

/* ---- unary and binary ---------------------------------------------------- */

/* The formulas are the registry's (common/ir/ein_ops.def); op was checked on
 * the host. */
__device__ __forceinline__ float kn_cu_unary_f(int op, float s, float v)
{
    switch (op) {
#define EIN_UNARY(kind, name, nargs, usage, formula) \
    case EIN_UN_##kind: return (formula);
#include "common/ir/ein_ops.def"
    default: return v;
    }
}

template <typename TX, typename TY, typename I>
__global__ void kn_cu_unary_k(int op, float s, const TX *x, TY *y, I n)
{
    for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x)
        st(y, i, kn_cu_unary_f(op, s, ld(x, i)));
}

/* The flat vectorised paths: one dtype, 16-byte aligned operands over one
 * dense box; each step moves one uint4 (16 / sizeof(T) elements) per
 * operand, the tail (fewer than one vector) goes element by element. The
 * arithmetic per element is the scalar path's, so the results are too. */
template <typename T, typename I>
__global__ void kn_cu_unary_vec_k(int op, float s, const T *x, T *y, I n)
{
    const int V = 16 / (int)sizeof(T);
    I nv = n / V, tid = blockIdx.x * (I)blockDim.x + threadIdx.x, step = (I)gridDim.x * blockDim.x;
    for (I i = tid; i < nv; i += step) {
        uint4 a = reinterpret_cast<const uint4 *>(x)[i], o = make_uint4(0, 0, 0, 0);
        const T *ae = reinterpret_cast<const T *>(&a);
        T *oe = reinterpret_cast<T *>(&o);
#pragma unroll
        for (int k = 0; k < V; k++)
            st(oe, k, kn_cu_unary_f(op, s, ld(ae, k)));
        reinterpret_cast<uint4 *>(y)[i] = o;
    }
    for (I i = nv * V + tid; i < n; i += step)
        st(y, i, kn_cu_unary_f(op, s, ld(x, i)));
}

template <typename TX, typename TY>
static void kn_cu_unary_go(int op, float sc, const void *x, void *y, int64_t n, cudaStream_t s)
{
    const int64_t V = 16 / (int64_t)sizeof(TX);
    int vec = sizeof(TX) == sizeof(TY) && kn_cu_same<TX, TY>::value && kn_cu_aligned16(x) &&
              kn_cu_aligned16(y);
    if (vec && kn_cu_fits32(n))
        kn_cu_unary_vec_k<TX, uint32_t><<<kn_cu_grid((n + V - 1) / V, KN_CU_BLOCK), KN_CU_BLOCK, 0,
                                          s>>>(op, sc, (const TX *)x, (TX *)y, (uint32_t)n);
    else if (vec)
        kn_cu_unary_vec_k<TX, int64_t><<<kn_cu_grid((n + V - 1) / V, KN_CU_BLOCK), KN_CU_BLOCK, 0,
                                         s>>>(op, sc, (const TX *)x, (TX *)y, n);
    else if (kn_cu_fits32(n))
        kn_cu_unary_k<TX, TY, uint32_t><<<kn_cu_grid(n, KN_CU_BLOCK), KN_CU_BLOCK, 0, s>>>(
            op, sc, (const TX *)x, (TY *)y, (uint32_t)n);
    else
        kn_cu_unary_k<TX, TY, int64_t><<<kn_cu_grid(n, KN_CU_BLOCK), KN_CU_BLOCK, 0, s>>>(
            op, sc, (const TX *)x, (TY *)y, n);
}

extern "C" int kn_cuda_unary_blk(ein_unary op, double scalar, const kn_block *x, kn_block *out,
                                 void *stream, ein_error *err)
{
    const char *what = "cuda unary";
    int rc;
    if ((int)op < 0 || op >= EIN_UN_COUNT)
        return kn_cu_fail(err, EIN_EINVAL, "%s: unknown op %d", what, (int)op);
    if ((rc = kn_cu_blk(what, "x", x, -1, err)) < 0 ||
        (rc = kn_cu_blk(what, "out", out, -1, err)) < 0)
        return rc;
    if (!kn_cu_box_eq(&x->box, &out->box))
        return kn_cu_fail(err, EIN_ESHAPE, "%s: out box differs from x box", what);
    int64_t n = kn_cu_vol(&out->box);
    if (n == 0)
        return 0;
    cudaStream_t s = (cudaStream_t)stream;
    KN_CU_DISPATCH(x->dtype, TX, KN_CU_DISPATCH(out->dtype, TY,
        kn_cu_unary_go<TX, TY>((int)op, (float)scalar, x->data, out->data, n, s)));
    return kn_cu_launched(what, err);
}

__device__ __forceinline__ float kn_cu_binary_f(int op, float a, float b)
{
    switch (op) {
#define EIN_BINARY(kind, name, opname, formula) \
    case EIN_BIN_##kind: return (formula);
#include "common/ir/ein_ops.def"
    default: return a;
    }
}

template <typename TA, typename TB, typename TY, typename I>
__global__ void kn_cu_binary_k(int op, kn_cu_walk w, const TA *a, const TB *b, TY *y, I n)
{
    for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
        I oa, ob, oy;
        kn_cu_offsets_i<I>(w, i, &oa, &ob, &oy);
        st(y, oy, kn_cu_binary_f(op, ld(a, oa), ld(b, ob)));
    }
}

/* a, b and y over one box, one dtype, 16-byte aligned (see kn_cu_unary_vec_k). */
template <typename T, typename I>
__global__ void kn_cu_binary_vec_k(int op, const T *a, const T *b, T *y, I n)
{
    const int V = 16 / (int)sizeof(T);
    I nv = n / V, tid = blockIdx.x * (I)blockDim.x + threadIdx.x, step = (I)gridDim.x * blockDim.x;
    for (I i = tid; i < nv; i += step) {
        uint4 va = reinterpret_cast<const uint4 *>(a)[i], vb = reinterpret_cast<const uint4 *>(b)[i];
        uint4 o = make_uint4(0, 0, 0, 0);
        const T *ae = reinterpret_cast<const T *>(&va), *be = reinterpret_cast<const T *>(&vb);
        T *oe = reinterpret_cast<T *>(&o);
#pragma unroll
        for (int k = 0; k < V; k++)
            st(oe, k, kn_cu_binary_f(op, ld(ae, k), ld(be, k)));
        reinterpret_cast<uint4 *>(y)[i] = o;
    }
    for (I i = nv * V + tid; i < n; i += step)
        st(y, i, kn_cu_binary_f(op, ld(a, i), ld(b, i)));
}

/* flat: a and b over out's box (no broadcast); every offset then lies in
 * [0, n), and with broadcast each input's volume is at most n, so n
 * decides 32-bit indexing for all three. */
template <typename TA, typename TB, typename TY>
static void kn_cu_binary_go(int op, const kn_cu_walk &w, int flat, const void *a, const void *b,
                            void *y, int64_t n, cudaStream_t s)
{
    const int64_t V = 16 / (int64_t)sizeof(TY);
    int vec = flat && kn_cu_same<TA, TY>::value && kn_cu_same<TB, TY>::value &&
              kn_cu_aligned16(a) && kn_cu_aligned16(b) && kn_cu_aligned16(y);
    if (vec && kn_cu_fits32(n))
        kn_cu_binary_vec_k<TY, uint32_t><<<kn_cu_grid((n + V - 1) / V, KN_CU_BLOCK), KN_CU_BLOCK,
                                           0, s>>>(op, (const TY *)a, (const TY *)b, (TY *)y,
                                                   (uint32_t)n);
    else if (vec)
        kn_cu_binary_vec_k<TY, int64_t><<<kn_cu_grid((n + V - 1) / V, KN_CU_BLOCK), KN_CU_BLOCK,
                                          0, s>>>(op, (const TY *)a, (const TY *)b, (TY *)y, n);
    else if (kn_cu_fits32(n))
        kn_cu_binary_k<TA, TB, TY, uint32_t><<<kn_cu_grid(n, KN_CU_BLOCK), KN_CU_BLOCK, 0, s>>>(
            op, w, (const TA *)a, (const TB *)b, (TY *)y, (uint32_t)n);
    else
        kn_cu_binary_k<TA, TB, TY, int64_t><<<kn_cu_grid(n, KN_CU_BLOCK), KN_CU_BLOCK, 0, s>>>(
            op, w, (const TA *)a, (const TB *)b, (TY *)y, n);
}

/* Strides of input k over out's index space (0 where broadcast), as in
 * kn_cpu_binary. */
static int kn_cu_bcast(const char *what, const char *name, const kn_block *k, const kn_block *out,
                       int64_t *st, ein_error *err)
{
    int r = out->box.rank, rk = k->box.rank;
    if (rk > r)
        return kn_cu_fail(err, EIN_ESHAPE, "%s: %s has rank %d but out has rank %d", what, name,
                          rk, r);
    int64_t s = 1;
    for (int d = r - 1; d >= 0; d--) {
        st[d] = 0;
        int dk = d - (r - rk);
        if (dk < 0)
            continue;
        int64_t lo = k->box.lo[dk], hi = k->box.hi[dk];
        if (lo == out->box.lo[d] && hi == out->box.hi[d])
            st[d] = hi - lo == 1 ? 0 : s;
        else if (hi - lo != 1)
            return kn_cu_fail(err, EIN_ESHAPE, "%s: %s dimension %d is neither equal to out's "
                              "nor broadcast", what, name, dk);
        s *= hi - lo;
    }
    return 0;
}

extern "C" int kn_cuda_binary(ein_binary op, const kn_block *a, const kn_block *b, kn_block *out,
                              void *stream, ein_error *err)
{
    const char *what = "cuda binary";
    int rc;
    if ((int)op < 0 || op >= EIN_BIN_COUNT)
        return kn_cu_fail(err, EIN_EINVAL, "%s: unknown op %d", what, (int)op);
    if ((rc = kn_cu_blk(what, "a", a, -1, err)) < 0 || (rc = kn_cu_blk(what, "b", b, -1, err)) < 0 ||
        (rc = kn_cu_blk(what, "out", out, -1, err)) < 0)
        return rc;
    kn_cu_walk w;
    memset(&w, 0, sizeof w);
    w.rank = out->box.rank;
    if ((rc = kn_cu_bcast(what, "a", a, out, w.s0, err)) < 0 ||
        (rc = kn_cu_bcast(what, "b", b, out, w.s1, err)) < 0)
        return rc;
    kn_cu_strides(&out->box, w.s2);
    for (int d = 0; d < w.rank; d++)
        w.ext[d] = out->box.hi[d] - out->box.lo[d];
    int64_t n = kn_cu_vol(&out->box);
    if (n == 0)
        return 0;
    cudaStream_t s = (cudaStream_t)stream;
    int flat = a->box.rank == out->box.rank && b->box.rank == out->box.rank &&
               kn_cu_box_eq(&a->box, &out->box) && kn_cu_box_eq(&b->box, &out->box);
    KN_CU_DISPATCH(a->dtype, TA, KN_CU_DISPATCH(b->dtype, TB, KN_CU_DISPATCH(out->dtype, TY,
        kn_cu_binary_go<TA, TB, TY>((int)op, w, flat, a->data, b->data, out->data, n, s))));
    return kn_cu_launched(what, err);
}

/* ---- aggregation ----------------------------------------------------------- */

struct kn_cu_ptrs {
    const void *p[KN_CUDA_MAX_CAT];
};

template <typename T, int MAX>
__global__ void kn_cu_agg_k(kn_cu_ptrs s, int ns, T *y, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float v = ld((const T *)s.p[0], i);
        for (int j = 1; j < ns; j++) {
            float x = ld((const T *)s.p[j], i);
            v = MAX ? fmaxf(v, x) : v + x;
        }
        st(y, i, v);
    }
}

extern "C" int kn_cuda_agg_blk(ein_agg op, const kn_block *srcs, int n, kn_block *out,
                               void *stream, ein_error *err)
{
    const char *what = "cuda agg";
    int rc;
    if (op == EIN_AGG_LSE)
        return kn_cuda_agg_lse_blk(srcs, n, out, stream, err);
    if (op != EIN_AGG_SUM && op != EIN_AGG_MAX)
        return kn_cu_fail(err, EIN_EINVAL, "%s: op %d is neither sum nor max", what, (int)op);
    if (n < 1 || !srcs)
        return kn_cu_fail(err, EIN_EINVAL, "%s: needs at least one source, got %d", what, n);
    if ((rc = kn_cu_blk(what, "out", out, -1, err)) < 0)
        return rc;
    int alias = -1;
    for (int j = 0; j < n; j++) {
        if ((rc = kn_cu_blk(what, "source", &srcs[j], -1, err)) < 0)
            return rc;
        if (!kn_cu_box_eq(&srcs[j].box, &out->box) || srcs[j].dtype != out->dtype)
            return kn_cu_fail(err, EIN_ESHAPE, "%s: source %d differs from out in box or dtype",
                              what, j);
        if (srcs[j].data == out->data && alias < 0)
            alias = j;
    }
    int64_t len = kn_cu_vol(&out->box);
    if (len == 0)
        return 0;
    cudaStream_t s = (cudaStream_t)stream;
    /* KN_CUDA_MAX_CAT sources per launch; a source that is out is read in
     * the first launch, later launches fold into the running result. */
    int next = 0, first = 1;
    while (next < n) {
        kn_cu_ptrs p;
        int ns = 0;
        if (!first || alias >= 0)
            p.p[ns++] = out->data;
        first = 0;
        for (; ns < KN_CUDA_MAX_CAT && next < n; next++)
            if (next != alias)
                p.p[ns++] = srcs[next].data;
        if (next < n && next == alias)
            next++;
        KN_CU_DISPATCH(out->dtype, T,
            if (op == EIN_AGG_MAX)
                kn_cu_agg_k<T, 1><<<kn_cu_grid(len, KN_CU_BLOCK), KN_CU_BLOCK, 0, s>>>(
                    p, ns, (T *)out->data, len);
            else
                kn_cu_agg_k<T, 0><<<kn_cu_grid(len, KN_CU_BLOCK), KN_CU_BLOCK, 0, s>>>(
                    p, ns, (T *)out->data, len));
        if ((rc = kn_cu_launched(what, err)) < 0)
            return rc;
    }
    return 0;
}

/* ---- softmax and norms: block reductions ---------------------------------- */

template <int MAX>
__device__ float kn_cu_block_reduce(float v, float *sh)
{
    for (int o = 16; o > 0; o >>= 1) {
        float x = __shfl_xor_sync(0xffffffffu, v, o);
        v = MAX ? fmaxf(v, x) : v + x;
    }
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    __syncthreads();   /* sh may still be read from a previous reduction */
    if (lane == 0)
        sh[wid] = v;
    __syncthreads();
    float r = sh[0];
    for (int i = 1; i < nw; i++)
        r = MAX ? fmaxf(r, sh[i]) : r + sh[i];
    return r;
}

/* One block per row of a contiguous last-axis softmax. */
template <typename TX, typename TY>
__global__ void kn_cu_softmax_rows(const TX *x, TY *y, int64_t n)
{
    __shared__ float sh[32];
    const TX *xr = x + blockIdx.x * n;
    TY *yr = y + blockIdx.x * n;
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        m = fmaxf(m, ld(xr, i));
    m = kn_cu_block_reduce<1>(m, sh);
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        s += expf(ld(xr, i) - m);
    s = kn_cu_block_reduce<0>(s, sh);
    float inv = 1.0f / s;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        st(yr, i, expf(ld(xr, i) - m) * inv);
}

/* One thread per (outer, inner) column of a strided softmax. */
template <typename TX, typename TY>
__global__ void kn_cu_softmax_cols(const TX *x, TY *y, int64_t outer, int64_t n, int64_t inner)
{
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < outer * inner;
         c += (int64_t)gridDim.x * blockDim.x) {
        int64_t base = (c / inner) * n * inner + c % inner;
        float m = -INFINITY, s = 0.0f;
        for (int64_t i = 0; i < n; i++)
            m = fmaxf(m, ld(x, base + i * inner));
        for (int64_t i = 0; i < n; i++)
            s += expf(ld(x, base + i * inner) - m);
        float inv = 1.0f / s;
        for (int64_t i = 0; i < n; i++)
            st(y, base + i * inner, expf(ld(x, base + i * inner) - m) * inv);
    }
}

extern "C" int kn_cuda_softmax(int axis, const kn_block *x, kn_block *out, void *stream,
                               ein_error *err)
{
    const char *what = "cuda softmax";
    int rc;
    if ((rc = kn_cu_blk(what, "x", x, -1, err)) < 0 ||
        (rc = kn_cu_blk(what, "out", out, -1, err)) < 0)
        return rc;
    ein_error re = {0, {0}};
    if ((rc = ein_kernel_rules_softmax(axis, &x->box, &out->box, &re)) < 0)
        return kn_cu_fail(err, rc, "cuda %s", re.msg);
    int64_t outer, n, inner;
    ein_box_axis_split(&x->box, axis, &outer, &n, &inner);
    if (outer * n * inner == 0)
        return 0;
    if (inner == 1 && outer > (int64_t)0x7fffffff)
        return kn_cu_fail(err, EIN_EUNSUPPORTED, "%s: too many rows", what);
    cudaStream_t s = (cudaStream_t)stream;
    KN_CU_DISPATCH(x->dtype, TX, KN_CU_DISPATCH(out->dtype, TY,
        if (inner == 1)
            kn_cu_softmax_rows<TX, TY><<<(unsigned)outer, KN_CU_BLOCK, 0, s>>>(
                (const TX *)x->data, (TY *)out->data, n);
        else
            kn_cu_softmax_cols<TX, TY><<<kn_cu_grid(outer * inner, KN_CU_BLOCK), KN_CU_BLOCK, 0,
                                         s>>>((const TX *)x->data, (TY *)out->data, outer, n,
                                              inner)));
    return kn_cu_launched(what, err);
}

/* One block per row; LAYER: subtract the mean and add the bias. */
template <typename TX, typename TW, typename TY, int LAYER>
__global__ void kn_cu_norm_k(const TX *x, const TW *w, const TW *b, TY *y, int64_t d, float eps)
{
    __shared__ float sh[32];
    const TX *xr = x + blockIdx.x * d;
    TY *yr = y + blockIdx.x * d;
    float mean = 0.0f;
    if (LAYER) {
        float s = 0.0f;
        for (int64_t i = threadIdx.x; i < d; i += blockDim.x)
            s += ld(xr, i);
        mean = kn_cu_block_reduce<0>(s, sh) / (float)d;
    }
    float q = 0.0f;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
        float c = ld(xr, i) - mean;
        q += c * c;
    }
    float r = rsqrtf(kn_cu_block_reduce<0>(q, sh) / (float)d + eps);
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
        float v = (ld(xr, i) - mean) * r * ld(w, i);
        if (LAYER)
            v += ld(b, i);
        st(yr, i, v);
    }
}

static int kn_cu_norm(const char *what, int layer, double eps, const kn_block *x,
                      const kn_block *w, const kn_block *b, kn_block *out, void *stream,
                      ein_error *err)
{
    int rc;
    if ((rc = kn_cu_blk(what, "x", x, -1, err)) < 0 ||
        (rc = kn_cu_blk(what, "weight", w, 1, err)) < 0 ||
        (layer && (rc = kn_cu_blk(what, "bias", b, 1, err)) < 0) ||
        (rc = kn_cu_blk(what, "out", out, -1, err)) < 0)
        return rc;
    int r = x->box.rank;
    if (r < 1 || !kn_cu_box_eq(&x->box, &out->box) || w->box.lo[0] != 0 ||
        x->box.lo[r - 1] != 0 || x->box.hi[r - 1] != w->box.hi[0] ||
        (layer && (!kn_cu_box_eq(&b->box, &w->box) || b->dtype != w->dtype)))
        return kn_cu_fail(err, EIN_ESHAPE, "%s: boxes do not fit (x and out equal, weight and "
                          "bias [0, d) with x's whole last axis [0, d))", what);
    int64_t d = w->box.hi[0], rows = d > 0 ? kn_cu_vol(&x->box) / d : 0;
    if (rows == 0)
        return 0;
    if (rows > (int64_t)0x7fffffff)
        return kn_cu_fail(err, EIN_EUNSUPPORTED, "%s: too many rows", what);
    cudaStream_t s = (cudaStream_t)stream;
    const void *bd = layer ? b->data : w->data;
    KN_CU_DISPATCH(x->dtype, TX, KN_CU_DISPATCH(w->dtype, TW, KN_CU_DISPATCH(out->dtype, TY,
        if (layer)
            kn_cu_norm_k<TX, TW, TY, 1><<<(unsigned)rows, KN_CU_BLOCK, 0, s>>>(
                (const TX *)x->data, (const TW *)w->data, (const TW *)bd, (TY *)out->data, d,
                (float)eps);
        else
            kn_cu_norm_k<TX, TW, TY, 0><<<(unsigned)rows, KN_CU_BLOCK, 0, s>>>(
                (const TX *)x->data, (const TW *)w->data, (const TW *)bd, (TY *)out->data, d,
                (float)eps))));
    return kn_cu_launched(what, err);
}

extern "C" int kn_cuda_rmsnorm(double eps, const kn_block *x, const kn_block *w, kn_block *out,
                               void *stream, ein_error *err)
{
    return kn_cu_norm("cuda rmsnorm", 0, eps, x, w, NULL, out, stream, err);
}

extern "C" int kn_cuda_layernorm(double eps, const kn_block *x, const kn_block *w,
                                 const kn_block *b, kn_block *out, void *stream, ein_error *err)
{
    if (!b)
        return kn_cu_fail(err, EIN_EINVAL, "cuda layernorm: missing bias");
    return kn_cu_norm("cuda layernorm", 1, eps, x, w, b, out, stream, err);
}

/* ---- rope -------------------------------------------------------------------- */

/* The frequency of each pair, theta^(-2j/head_dim), computed on the host
 * with the CPU kernel's expression (kn_rope.c), so the angles are the CPU's
 * bit for bit; passed by value (1 KiB), for head_dim up to 2 * this
 * (pairs past it, head_dim > 256, compute theirs on the device as before). */
#define KN_CU_ROPE_PAIRS 128
struct kn_cu_freqs {
    double f[KN_CU_ROPE_PAIRS];
};

/* One thread per rotated pair. Angles in double, as on the CPU: position
 * times the pair's precomputed frequency (no pow per element), one sincos
 * (cos and sin in double, rounded to float, as on the CPU). Pair j of a
 * head is elements (2j, 2j+1) (interleaved) or (j, j + head_dim/2) (half). */
template <typename TX, typename TY>
__global__ void kn_cu_rope_k(kn_cu_seqs seqs, kn_cu_freqs fr, int64_t t0, int64_t ntok, int64_t w,
                             int64_t head_dim, double theta, ein_rope_scaling sc, int half_style,
                             const TX *x, TY *y)
{
    int64_t npair = ntok * (w / 2), hh = head_dim / 2;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < npair;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t row = i / (w / 2), q = i % (w / 2), t = t0 + row;
        int64_t pair = q % hh, c = (q / hh) * head_dim + (half_style ? pair : 2 * pair);
        int64_t c1 = half_style ? c + hh : c + 1;
        double p = (double)(t - kn_cu_seq_start(seqs, t));
        double f = pair < KN_CU_ROPE_PAIRS ? fr.f[pair] : ein_rope_freq(theta, pair, head_dim, &sc);
        double a = p * f, sd, cd;
        sincos(a, &sd, &cd);
        float cs = (float)cd, sn = (float)sd;
        int64_t o = row * w + c, o1 = row * w + c1;
        float x0 = ld(x, o), x1 = ld(x, o1);
        st(y, o, x0 * cs - x1 * sn);
        st(y, o1, x0 * sn + x1 * cs);
    }
}

extern "C" int kn_cuda_rope(int64_t head_dim, double theta, const int64_t *seq_ends, int nseq,
                            const kn_block *x, kn_block *out, void *stream, ein_error *err)
{
    return kn_cuda_rope_style(EIN_ROPE_INTERLEAVED, head_dim, theta, seq_ends, nseq, x, out,
                              stream, err);
}

extern "C" int kn_cuda_rope_style(int style, int64_t head_dim, double theta,
                                  const int64_t *seq_ends, int nseq, const kn_block *x,
                                  kn_block *out, void *stream, ein_error *err)
{
    return kn_cuda_rope_scaled(style, head_dim, theta, NULL, seq_ends, nseq, x, out, stream, err);
}

extern "C" int kn_cuda_rope_scaled(int style, int64_t head_dim, double theta,
                                   const ein_rope_scaling *scp, const int64_t *seq_ends, int nseq,
                                   const kn_block *x, kn_block *out, void *stream, ein_error *err)
{
    const char *what = "cuda rope";
    ein_rope_scaling sc;
    memset(&sc, 0, sizeof sc);
    if (scp)
        sc = *scp;
    if (ein_rope_scaling_invalid(&sc))
        return kn_cu_fail(err, EIN_EINVAL, "%s: scaling: %s", what, ein_rope_scaling_invalid(&sc));
    if (style != EIN_ROPE_INTERLEAVED && style != EIN_ROPE_HALF)
        return kn_cu_fail(err, EIN_EINVAL, "%s: style %d is not interleaved or half", what, style);
    kn_cu_seqs seqs;
    int rc;
    if ((rc = kn_cu_blk(what, "x", x, 2, err)) < 0 || (rc = kn_cu_blk(what, "out", out, 2, err)) < 0 ||
        (rc = kn_cu_seqs_make(what, seq_ends, nseq, &seqs, err)) < 0)
        return rc;
    if (head_dim <= 0 || head_dim % 2 || !(theta > 0.0))
        return kn_cu_fail(err, EIN_EINVAL, "%s: head_dim must be positive and even, theta positive",
                          what);
    kn_cu_freqs fr;
    memset(&fr, 0, sizeof fr);
    for (int64_t j = 0; j < head_dim / 2 && j < KN_CU_ROPE_PAIRS; j++)
        fr.f[j] = ein_rope_freq(theta, j, head_dim, &sc);
    if (!kn_cu_box_eq(&x->box, &out->box))
        return kn_cu_fail(err, EIN_ESHAPE, "%s: out box differs from x box", what);
    int64_t t0 = x->box.lo[0], t1 = x->box.hi[0], c0 = x->box.lo[1], c1 = x->box.hi[1];
    if (c0 % head_dim || c1 % head_dim)
        return kn_cu_fail(err, EIN_ESHAPE, "%s: hidden interval not at head boundaries", what);
    if (t1 > t0 && (t0 < 0 || (nseq > 0 && t1 > seq_ends[nseq - 1])))
        return kn_cu_fail(err, EIN_ESHAPE, "%s: tokens outside the sequences", what);
    int64_t n = (t1 - t0) * (c1 - c0) / 2;
    if (n == 0)
        return 0;
    cudaStream_t s = (cudaStream_t)stream;
    KN_CU_DISPATCH(x->dtype, TX, KN_CU_DISPATCH(out->dtype, TY,
        kn_cu_rope_k<TX, TY><<<kn_cu_grid(n, KN_CU_BLOCK), KN_CU_BLOCK, 0, s>>>(
            seqs, fr, t0, t1 - t0, c1 - c0, head_dim, theta, sc, style == EIN_ROPE_HALF,
            (const TX *)x->data, (TY *)out->data)));
    return kn_cu_launched(what, err);
}

/* ---- layout copies ------------------------------------------------------------ */

template <typename TX, typename TY, typename I>
__global__ void kn_cu_copy_k(kn_cu_walk w, const TX *x, TY *y, I n)
{
    for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
        I ox, oy, unused;
        kn_cu_offsets_i<I>(w, i, &ox, &oy, &unused);
        st(y, oy, ld(x, ox));
    }
}

template <typename TX, typename TY>
static void kn_cu_copy_go(const kn_cu_walk &w, int narrow, const void *x, void *y, int64_t n,
                          cudaStream_t s)
{
    if (narrow)
        kn_cu_copy_k<TX, TY, uint32_t><<<kn_cu_grid(n, KN_CU_BLOCK), KN_CU_BLOCK, 0, s>>>(
            w, (const TX *)x, (TY *)y, (uint32_t)n);
    else
        kn_cu_copy_k<TX, TY, int64_t><<<kn_cu_grid(n, KN_CU_BLOCK), KN_CU_BLOCK, 0, s>>>(
            w, (const TX *)x, (TY *)y, n);
}

/* Same-dtype copies of 16-byte units (uint4): the walk is in those units. */
template <typename I>
__global__ void kn_cu_copy16_k(kn_cu_walk w, const uint4 *x, uint4 *y, I n)
{
    for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
        I ox, oy, unused;
        kn_cu_offsets_i<I>(w, i, &ox, &oy, &unused);
        y[oy] = x[ox];
    }
}

/* The copy walk w (strides s0 of x, s1 of y) with dimensions of extent 1
 * dropped and each dimension merged into the one outside it where both x
 * and y step through the pair as through one (outer stride = inner stride
 * x inner extent): a SLICE of whole rows becomes one run, a SLICE of parts
 * of rows two dimensions (rows of a run each). At least rank 1. */
static kn_cu_walk kn_cu_walk_merged(const kn_cu_walk &w)
{
    kn_cu_walk m;
    memset(&m, 0, sizeof m);
    m.o0 = w.o0, m.o1 = w.o1;
    for (int d = 0; d < w.rank; d++) {
        if (w.ext[d] == 1)
            continue;
        int l = m.rank - 1;
        if (l >= 0 && m.s0[l] == w.s0[d] * w.ext[d] && m.s1[l] == w.s1[d] * w.ext[d]) {
            m.ext[l] *= w.ext[d];
            m.s0[l] = w.s0[d];
            m.s1[l] = w.s1[d];
            continue;
        }
        m.ext[m.rank] = w.ext[d];
        m.s0[m.rank] = w.s0[d];
        m.s1[m.rank] = w.s1[d];
        m.rank++;
    }
    if (m.rank == 0) {
        m.rank = 1;
        m.ext[0] = m.s0[0] = m.s1[0] = 1;
    }
    return m;
}

/* The merged walk m in 16-byte units, when every offset and stride and the
 * innermost run (stride 1 in both) are whole units and the data aligned;
 * 0 if not. */
static int kn_cu_walk16(const kn_cu_walk &m, size_t es, const void *x, const void *y,
                        kn_cu_walk *v)
{
    int r = m.rank - 1;
    int64_t u = (int64_t)(16 / es);
    if (es > 16 || 16 % es || m.s0[r] != 1 || m.s1[r] != 1 || m.ext[r] % u ||
        m.o0 % u || m.o1 % u || !kn_cu_aligned16(x) || !kn_cu_aligned16(y))
        return 0;
    for (int d = 0; d < r; d++)
        if (m.s0[d] % u || m.s1[d] % u)
            return 0;
    *v = m;
    v->ext[r] /= u;
    for (int d = 0; d < r; d++) {
        v->s0[d] /= u;
        v->s1[d] /= u;
    }
    v->o0 /= u;
    v->o1 /= u;
    return 1;
}

/* x can be copied into y: same dtype, or both float (converted). */
static int kn_cu_copyable(const char *what, const kn_block *x, const kn_block *y, ein_error *err)
{
    if (x->dtype == y->dtype || (ein_dtype_is_float((int)x->dtype) && ein_dtype_is_float((int)y->dtype)))
        return 0;
    return kn_cu_fail(err, EIN_EINVAL, "%s: cannot copy %s into %s (integers are never converted)",
                      what, ein_dtype_name(x->dtype), ein_dtype_name(y->dtype));
}

static int kn_cu_copy(const char *what, const kn_cu_walk &w, const kn_block *x, kn_block *y,
                      cudaStream_t s, ein_error *err)
{
    int64_t n = 1;
    for (int d = 0; d < w.rank; d++)
        n *= w.ext[d];
    if (n <= 0)
        return 0;
    if (x->dtype == y->dtype) {
        /* Same dtype, bytes unchanged: one run each is a plain device copy,
         * rows of a run each a 2-D copy (memcpy nodes when captured), any
         * other walk whose innermost run is whole 16-byte units a uint4
         * kernel. */
        size_t es = ein_dtype_size(x->dtype);
        kn_cu_walk m = kn_cu_walk_merged(w), v;
        char *yb = (char *)y->data + (size_t)m.o1 * es;
        const char *xb = (const char *)x->data + (size_t)m.o0 * es;
        cudaError_t e = cudaSuccess;
        const char *call = NULL;
        if (m.rank == 1 && m.s0[0] == 1 && m.s1[0] == 1) {
            call = "cudaMemcpyAsync";
            e = cudaMemcpyAsync(yb, xb, (size_t)n * es, cudaMemcpyDeviceToDevice, s);
        } else if (m.rank == 2 && m.s0[1] == 1 && m.s1[1] == 1 && m.s0[0] >= m.ext[1] &&
                   m.s1[0] >= m.ext[1] &&
                   kn_cu_fits32(m.s0[0] * (int64_t)es) && kn_cu_fits32(m.s1[0] * (int64_t)es)) {
            call = "cudaMemcpy2DAsync";
            e = cudaMemcpy2DAsync(yb, (size_t)m.s1[0] * es, xb, (size_t)m.s0[0] * es,
                                  (size_t)m.ext[1] * es, (size_t)m.ext[0],
                                  cudaMemcpyDeviceToDevice, s);
        } else if (kn_cu_walk16(m, es, x->data, y->data, &v)) {
            int64_t n16 = (int64_t)((size_t)n * es / 16);
            int narrow16 = kn_cu_fits32(n16) &&
                           kn_cu_fits32((int64_t)((size_t)kn_cu_vol(&x->box) * es / 16)) &&
                           kn_cu_fits32((int64_t)((size_t)kn_cu_vol(&y->box) * es / 16));
            if (narrow16)
                kn_cu_copy16_k<uint32_t><<<kn_cu_grid(n16, KN_CU_BLOCK), KN_CU_BLOCK, 0, s>>>(
                    v, (const uint4 *)x->data, (uint4 *)y->data, (uint32_t)n16);
            else
                kn_cu_copy16_k<int64_t><<<kn_cu_grid(n16, KN_CU_BLOCK), KN_CU_BLOCK, 0, s>>>(
                    v, (const uint4 *)x->data, (uint4 *)y->data, n16);
            return kn_cu_launched(what, err);
        }
        if (call && e != cudaSuccess)
            return kn_cu_fail(err, EIN_EDEVICE, "%s: %s: %s", what, call, cudaGetErrorString(e));
        if (call)
            return 0;
    }
    /* Offsets lie inside x and y: their volumes decide 32-bit indexing. */
    int narrow = kn_cu_fits32(n) && kn_cu_fits32(kn_cu_vol(&x->box)) &&
                 kn_cu_fits32(kn_cu_vol(&y->box));
    KN_CU_DISPATCH(x->dtype, TX, KN_CU_DISPATCH(y->dtype, TY,
        kn_cu_copy_go<TX, TY>(w, narrow, x->data, y->data, n, s)));
    return kn_cu_launched(what, err);
}

/* The walk copying `region` (out's coordinates) from x (x coordinate =
 * out coordinate + shift) into out. */
static void kn_cu_region_walk(const kn_block *x, const kn_block *out, const ein_box *region,
                              const int64_t *shift, kn_cu_walk *w)
{
    int64_t sx[EIN_MAX_RANK], so[EIN_MAX_RANK];
    memset(w, 0, sizeof *w);
    kn_cu_strides(&x->box, sx);
    kn_cu_strides(&out->box, so);
    w->rank = region->rank;
    for (int d = 0; d < region->rank; d++) {
        w->ext[d] = region->hi[d] - region->lo[d];
        w->s0[d] = sx[d];
        w->s1[d] = so[d];
        w->o0 += (region->lo[d] + shift[d] - x->box.lo[d]) * sx[d];
        w->o1 += (region->lo[d] - out->box.lo[d]) * so[d];
    }
}

extern "C" int kn_cuda_slice(int axis, int64_t start, const kn_block *x, kn_block *out,
                             void *stream, ein_error *err)
{
    const char *what = "cuda slice";
    int rc;
    if ((rc = kn_cu_blk_any(what, "x", x, -1, err)) < 0 ||
        (rc = kn_cu_blk_any(what, "out", out, x->box.rank, err)) < 0 ||
        (rc = kn_cu_copyable(what, x, out, err)) < 0)
        return rc;
    if (axis < 0 || axis >= x->box.rank || start < 0)
        return kn_cu_fail(err, EIN_EINVAL, "%s: bad axis %d or start", what, axis);
    int64_t shift[EIN_MAX_RANK] = {0};
    shift[axis] = start;
    if (kn_cu_vol(&out->box) == 0)
        return 0;
    for (int d = 0; d < x->box.rank; d++)
        if (out->box.lo[d] + shift[d] < x->box.lo[d] || out->box.hi[d] + shift[d] > x->box.hi[d])
            return kn_cu_fail(err, EIN_ESHAPE, "%s: x box does not contain the shifted out box",
                              what);
    kn_cu_walk w;
    kn_cu_region_walk(x, out, &out->box, shift, &w);
    return kn_cu_copy(what, w, x, out, (cudaStream_t)stream, err);
}

extern "C" int kn_cuda_concat(int axis, const int64_t *offsets, const kn_block *ins, int n,
                              kn_block *out, void *stream, ein_error *err)
{
    const char *what = "cuda concat";
    int rc;
    if ((rc = kn_cu_blk_any(what, "out", out, -1, err)) < 0)
        return rc;
    if (n < 1 || !ins || !offsets || axis < 0 || axis >= out->box.rank)
        return kn_cu_fail(err, EIN_EINVAL, "%s: bad inputs, offsets or axis", what);
    for (int i = 0; i < n; i++)
        if (offsets[i] < 0 || (i > 0 && offsets[i] < offsets[i - 1]))
            return kn_cu_fail(err, EIN_EINVAL, "%s: offsets are not ascending", what);
    int64_t covered = 0;
    for (int i = 0; i < n; i++) {
        if ((rc = kn_cu_blk_any(what, "input", &ins[i], out->box.rank, err)) < 0 ||
            (rc = kn_cu_copyable(what, &ins[i], out, err)) < 0)
            return rc;
        const ein_box *ib = &ins[i].box;
        int64_t extent = i + 1 < n ? offsets[i + 1] - offsets[i] : INT64_MAX;
        if (ib->hi[axis] > ib->lo[axis] && (ib->lo[axis] < 0 || ib->hi[axis] > extent))
            return kn_cu_fail(err, EIN_ESHAPE, "%s: input %d lies outside its extent", what, i);
        ein_box region = out->box;
        int empty = 0;
        for (int d = 0; d < region.rank; d++) {
            int64_t off = d == axis ? offsets[i] : 0;
            region.lo[d] = region.lo[d] > ib->lo[d] + off ? region.lo[d] : ib->lo[d] + off;
            region.hi[d] = region.hi[d] < ib->hi[d] + off ? region.hi[d] : ib->hi[d] + off;
            empty |= region.hi[d] <= region.lo[d];
        }
        if (empty)
            continue;
        int64_t shift[EIN_MAX_RANK] = {0};
        shift[axis] = -offsets[i];
        kn_cu_walk w;
        kn_cu_region_walk(&ins[i], out, &region, shift, &w);
        if ((rc = kn_cu_copy(what, w, &ins[i], out, (cudaStream_t)stream, err)) < 0)
            return rc;
        covered += kn_cu_vol(&region);
    }
    if (covered != kn_cu_vol(&out->box))
        return kn_cu_fail(err, EIN_ESHAPE, "%s: the inputs do not cover out's box", what);
    return 0;
}

/* [T, H*D] block t <-> [H, T, D] block h; to_heads: t -> h. */
static int kn_cu_heads(const char *what, int64_t D, const kn_block *t, const kn_block *h,
                       int to_heads, cudaStream_t s, ein_error *err)
{
    int rc;
    if ((rc = kn_cu_blk(what, "[T, H*D] block", t, 2, err)) < 0 ||
        (rc = kn_cu_blk(what, "[H, T, D] block", h, 3, err)) < 0)
        return rc;
    if (D <= 0)
        return kn_cu_fail(err, EIN_EINVAL, "%s: head_dim is not positive", what);
    if (t->box.lo[0] != h->box.lo[1] || t->box.hi[0] != h->box.hi[1] || h->box.lo[2] != 0 ||
        h->box.hi[2] != D || t->box.lo[1] != h->box.lo[0] * D || t->box.hi[1] != h->box.hi[0] * D)
        return kn_cu_fail(err, EIN_ESHAPE, "%s: the boxes do not correspond", what);
    int64_t H = h->box.hi[0] - h->box.lo[0], T = h->box.hi[1] - h->box.lo[1];
    kn_cu_walk w;
    memset(&w, 0, sizeof w);
    w.rank = 3;   /* walk [H, T, D] */
    w.ext[0] = H, w.ext[1] = T, w.ext[2] = D;
    int64_t st_t[3] = {D, H * D, 1}, st_h[3] = {T * D, D, 1};
    for (int d = 0; d < 3; d++) {
        w.s0[d] = to_heads ? st_t[d] : st_h[d];
        w.s1[d] = to_heads ? st_h[d] : st_t[d];
    }
    return to_heads ? kn_cu_copy(what, w, t, (kn_block *)h, s, err)
                    : kn_cu_copy(what, w, h, (kn_block *)t, s, err);
}

extern "C" int kn_cuda_split_heads(int64_t head_dim, const kn_block *x, kn_block *out,
                                   void *stream, ein_error *err)
{
    return kn_cu_heads("cuda split_heads", head_dim, x, out, 1, (cudaStream_t)stream, err);
}

extern "C" int kn_cuda_merge_heads(int64_t head_dim, const kn_block *x, kn_block *out,
                                   void *stream, ein_error *err)
{
    return kn_cu_heads("cuda merge_heads", head_dim, out, x, 0, (cudaStream_t)stream, err);
}

/* ---- reduce ------------------------------------------------------------------- */

/* One thread per output element, looping over the reduced sub-box. The walk
 * maps an output index to x's base offset (s0); ext/st describe the
 * reduced dimensions in x, adjacent ones merged (so a reduction over the
 * trailing axes is one run of stride 1: no division per element). Index
 * type I as in kn_cu_offsets_i (uint32_t when x's volume fits). */
struct kn_cu_red {
    int nr;
    int64_t ext[EIN_MAX_RANK], st[EIN_MAX_RANK];
    int64_t count;
};

template <typename TX, typename TY, int MAX, typename I>
__global__ void kn_cu_reduce_k(kn_cu_walk w, kn_cu_red r, const TX *x, TY *y, I n)
{
    for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
        I base, unused1, unused2;
        kn_cu_offsets_i<I>(w, i, &base, &unused1, &unused2);
        float acc = MAX ? -INFINITY : 0.0f;
        if (r.nr == 1) {
            I stride = (I)r.st[0], cnt = (I)r.count;
            for (I j = 0; j < cnt; j++) {
                float v = ld(x, base + j * stride);
                acc = MAX ? fmaxf(acc, v) : acc + v;
            }
        } else {
            for (I j = 0; j < (I)r.count; j++) {
                I o = base, q = j;
                for (int d = r.nr - 1; d >= 0; d--) {
                    o += (q % (I)r.ext[d]) * (I)r.st[d];
                    q /= (I)r.ext[d];
                }
                float v = ld(x, o);
                acc = MAX ? fmaxf(acc, v) : acc + v;
            }
        }
        st(y, i, acc);
    }
}

template <typename TX, typename TY, int MAX>
static void kn_cu_reduce_go(const kn_cu_walk &w, const kn_cu_red &r, int narrow, const void *x,
                            void *y, int64_t n, cudaStream_t s)
{
    if (narrow)
        kn_cu_reduce_k<TX, TY, MAX, uint32_t><<<kn_cu_grid(n, KN_CU_BLOCK), KN_CU_BLOCK, 0, s>>>(
            w, r, (const TX *)x, (TY *)y, (uint32_t)n);
    else
        kn_cu_reduce_k<TX, TY, MAX, int64_t><<<kn_cu_grid(n, KN_CU_BLOCK), KN_CU_BLOCK, 0, s>>>(
            w, r, (const TX *)x, (TY *)y, n);
}

extern "C" int kn_cuda_reduce(ein_agg op, uint32_t axes, const kn_block *x, kn_block *out,
                              void *stream, ein_error *err)
{
    const char *what = "cuda reduce";
    int rc;
    if (op != EIN_AGG_SUM && op != EIN_AGG_MAX)
        return kn_cu_fail(err, EIN_EINVAL, "%s: op %d is neither sum nor max", what, (int)op);
    if ((rc = kn_cu_blk(what, "x", x, -1, err)) < 0 ||
        (rc = kn_cu_blk(what, "out", out, -1, err)) < 0)
        return rc;
    int r = x->box.rank;
    if (r < 32 && (axes >> r))
        return kn_cu_fail(err, EIN_EINVAL, "%s: axes 0x%x beyond rank %d", what, (unsigned)axes, r);
    int64_t sx[EIN_MAX_RANK];
    kn_cu_strides(&x->box, sx);
    kn_cu_walk w;
    kn_cu_red red;
    memset(&w, 0, sizeof w);
    memset(&red, 0, sizeof red);
    red.count = 1;
    for (int d = 0; d < r; d++) {
        int64_t e = x->box.hi[d] - x->box.lo[d];
        if ((axes & (1u << d)) && d > 0 && (axes & (1u << (d - 1)))) {
            /* x is dense: axis d - 1's stride is axis d's times its extent */
            red.ext[red.nr - 1] *= e;
            red.st[red.nr - 1] = sx[d];
            red.count *= e;
        } else if (axes & (1u << d)) {
            red.ext[red.nr] = e;
            red.st[red.nr] = sx[d];
            red.nr++;
            red.count *= e;
        } else {
            if (w.rank >= out->box.rank || out->box.lo[w.rank] != x->box.lo[d] ||
                out->box.hi[w.rank] != x->box.hi[d])
                return kn_cu_fail(err, EIN_ESHAPE, "%s: out box is not x's box without the axes",
                                  what);
            w.ext[w.rank] = e;
            w.s0[w.rank] = sx[d];
            w.rank++;
        }
    }
    if (w.rank != out->box.rank)
        return kn_cu_fail(err, EIN_ESHAPE, "%s: out box is not x's box without the axes", what);
    int64_t n = kn_cu_vol(&out->box);
    if (n == 0)
        return 0;
    cudaStream_t s = (cudaStream_t)stream;
    int narrow = kn_cu_fits32(kn_cu_vol(&x->box)); /* every offset lies inside x */
    KN_CU_DISPATCH(x->dtype, TX, KN_CU_DISPATCH(out->dtype, TY,
        if (op == EIN_AGG_MAX)
            kn_cu_reduce_go<TX, TY, 1>(w, red, narrow, x->data, out->data, n, s);
        else
            kn_cu_reduce_go<TX, TY, 0>(w, red, narrow, x->data, out->data, n, s)));
    return kn_cu_launched(what, err);
}
