/* kernels/cuda/kn_cuda_common.cuh — helpers shared by the .cu files of
 * kernels/cuda (not a public header).
 *
 * The CUDA library fills ein_error itself (kn_cu_fail, which also keeps
 * the thread's last message); from libeincommon it calls only the
 * registry's checks (arity, block rules), so it links before it. Device code loads
 * and stores every dtype through ld<T>/st<T> and computes in f32. */
#ifndef KN_CUDA_COMMON_CUH
#define KN_CUDA_COMMON_CUH

extern "C" {
#include <stdint.h>
#include "common/base/ein_error.h"
#include "common/ir/ein_program.h"
#include "kernels/kn_block.h"
}
#include "kernels/cuda/kn_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdarg.h>
#include <stdio.h>

#define KN_CU_BLOCK 256
#define KN_CU_MAXGRID 65535

/* Defined in kn_cuda.cu: the thread's last message (kn_cuda_last_error). */
extern "C" void kn_cuda_set_msg(const char *msg);

/* cuDNN attention (kn_cuda_cudnn.cu), held by a kn_cuda_ctx
 * (kn_cuda_gemm.cu). kn_cudnn_create returns 0, or a negative code with
 * why[cap] filled (also on success: the version); kn_cudnn_attention
 * returns 0, EIN_EUNSUPPORTED (nothing enqueued) or EIN_EDEVICE, with why
 * saying which ran or why not. */
struct kn_cudnn;
extern "C" int kn_cudnn_create(struct kn_cudnn **out, void *workspace, size_t workspace_bytes,
                               char *why, size_t cap);
extern "C" void kn_cudnn_destroy(struct kn_cudnn *c);
extern "C" int kn_cudnn_attention(struct kn_cudnn *c, int64_t group, const int64_t *seq_ends,
                                  int nseq, const kn_block *q, const kn_block *k,
                                  const kn_block *v, kn_block *out, void *stream, char *why,
                                  size_t cap);
extern "C" int kn_cudnn_attention_partial(struct kn_cudnn *c, int64_t group,
                                          const int64_t *seq_ends, int nseq, const kn_block *q,
                                          const kn_block *k, const kn_block *v, kn_block *out,
                                          void *stream, char *why, size_t cap);
extern "C" struct kn_cudnn *kn_cuda_ctx_cudnn(kn_cuda_ctx *ctx);
/* A cuDNN decline of `shape` for `why`: kept for the next attention report
 * the first time this pair is seen (at most 64 pairs remembered). */
extern "C" void kn_cuda_ctx_note_decline(kn_cuda_ctx *ctx, const char *shape, const char *why);
extern "C" const char *kn_cuda_ctx_cudnn_status(kn_cuda_ctx *ctx);
extern "C" void kn_cuda_ctx_note_attention(kn_cuda_ctx *ctx, int cudnn, const char *why);

/* The argument checks of every decode_attention kernel (kn_cuda_generate.cu). */
extern "C" int kn_cuda_decode_check(const char *what, int64_t group, int64_t window, int partial,
                                    const kn_block *q, const kn_block *k, const kn_block *v,
                                    const kn_block *pos, const kn_block *out, ein_error *err);
/* The context's workspace (kn_cuda_gemm.cu): NULL and 0 without a context. */
extern "C" void *kn_cuda_ctx_workspace(kn_cuda_ctx *ctx, size_t *bytes);
/* Scratch for a kernel's own use (kn_cuda_gemm.cu; the dequantised weight
 * tiles of kn_cuda_quant.cu): at most kn_cuda_ctx_scratch_cap bytes (half
 * the workspace; 0 without a context or workspace). kn_cuda_ctx_scratch
 * binds the handle to `stream`, hands cuBLAS the other half and sets *out
 * to the scratch, which the caller may use on `stream` until
 * kn_cuda_ctx_scratch_end gives cuBLAS the whole workspace again (call it
 * after the last cuBLAS call that uses the scratch; stream order keeps the
 * halves apart). Returns 0, EIN_EUNSUPPORTED (too many bytes) or
 * EIN_EDEVICE. */
extern "C" size_t kn_cuda_ctx_scratch_cap(kn_cuda_ctx *ctx);
extern "C" int kn_cuda_ctx_scratch(kn_cuda_ctx *ctx, size_t bytes, void *stream, void **out,
                                   ein_error *err);
extern "C" int kn_cuda_ctx_scratch_end(kn_cuda_ctx *ctx, ein_error *err);
/* The context's cuBLASLt handle (a cublasLtHandle_t; NULL when built
 * without cuBLASLt or its creation failed) for kn_cuda_quant.cu's fp8
 * products, which use the workspace's second half (the scratch is the
 * first) as cuBLASLt's workspace, in stream order like cuBLAS. */
extern "C" void *kn_cuda_ctx_lt(kn_cuda_ctx *ctx);

static inline int kn_cu_fail(ein_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline int kn_cu_fail(ein_error *err, int code, const char *fmt, ...)
{
    char buf[EIN_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    kn_cuda_set_msg(buf);
    if (err) {
        err->code = code;
        snprintf(err->msg, sizeof err->msg, "%s", buf);
    }
    return code;
}

/* After a launch: EIN_EDEVICE with the launch error, if any. */
static inline int kn_cu_launched(const char *what, ein_error *err)
{
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return kn_cu_fail(err, EIN_EDEVICE, "%s: launch failed: %s", what, cudaGetErrorString(e));
    return 0;
}

static inline unsigned kn_cu_grid(int64_t n, int block)
{
    int64_t g = (n + block - 1) / block;
    return (unsigned)(g < 1 ? 1 : g < KN_CU_MAXGRID ? g : KN_CU_MAXGRID);
}

/* ---- host-side box helpers (plain copies of ein_box semantics) ---- */

static inline int64_t kn_cu_vol(const ein_box *b)
{
    int64_t v = 1;
    for (int d = 0; d < b->rank; d++)
        v *= b->hi[d] > b->lo[d] ? b->hi[d] - b->lo[d] : 0;
    return v;
}

static inline int kn_cu_box_eq(const ein_box *a, const ein_box *b)
{
    if (a->rank != b->rank)
        return 0;
    for (int d = 0; d < a->rank; d++)
        if (a->lo[d] != b->lo[d] || a->hi[d] != b->hi[d])
            return 0;
    return 1;
}

static inline void kn_cu_strides(const ein_box *b, int64_t *st)
{
    int64_t s = 1;
    for (int d = b->rank - 1; d >= 0; d--) {
        st[d] = s;
        s *= b->hi[d] - b->lo[d];
    }
}

/* A usable block (kn_blk_check_any's rules): any valid dtype, integers
 * included (layout kernels, embedding ids). */
static inline int kn_cu_blk_any(const char *what, const char *name, const kn_block *k, int rank,
                                ein_error *err)
{
    if (!k)
        return kn_cu_fail(err, EIN_EINVAL, "%s: missing %s", what, name);
    if (!ein_dtype_valid((int)k->dtype))
        return kn_cu_fail(err, EIN_EINVAL, "%s: %s has invalid dtype %d", what, name,
                          (int)k->dtype);
    if (k->box.rank < 0 || k->box.rank > EIN_MAX_RANK || (rank >= 0 && k->box.rank != rank))
        return kn_cu_fail(err, EIN_ESHAPE, "%s: %s has rank %d%s", what, name, k->box.rank,
                          rank >= 0 ? " (unexpected)" : "");
    for (int d = 0; d < k->box.rank; d++)
        if (k->box.hi[d] < k->box.lo[d])
            return kn_cu_fail(err, EIN_ESHAPE, "%s: %s has an inverted interval", what, name);
    if (!k->data && kn_cu_vol(&k->box) > 0)
        return kn_cu_fail(err, EIN_EINVAL, "%s: %s has no data", what, name);
    return 0;
}

/* Run the statements with T the C type of float dtype dt. Callers check
 * their blocks with kn_cu_blk first, which refuses every dtype without a
 * case here (kn_cu_float_ok), so the default is never taken. A float dtype
 * gets its CUDA kernels by a case here. */
#define KN_CU_DISPATCH(dt, T, ...)                                                         \
    do {                                                                                   \
        switch (dt) {                                                                      \
        case EIN_F32: { typedef float T; __VA_ARGS__; } break;                             \
        case EIN_F16: { typedef __half T; __VA_ARGS__; } break;                            \
        case EIN_BF16: { typedef __nv_bfloat16 T; __VA_ARGS__; } break;                    \
        default: break;                                                                    \
        }                                                                                  \
    } while (0)

/* 1 when KN_CU_DISPATCH has a case for dt. */
static inline int kn_cu_float_ok(int dt)
{
    int ok = 0;
    KN_CU_DISPATCH(dt, T, ok = sizeof(T) > 0);
    return ok;
}

/* A usable block of a float dtype that the CUDA kernels implement: what
 * every computing kernel takes, so that KN_CU_DISPATCH only ever sees a
 * dtype it has a case for. */
static inline int kn_cu_blk(const char *what, const char *name, const kn_block *k, int rank,
                            ein_error *err)
{
    int rc = kn_cu_blk_any(what, name, k, rank, err);
    if (rc == 0 && !ein_dtype_is_float((int)k->dtype))
        return kn_cu_fail(err, EIN_EINVAL, "%s: %s is %s; this kernel computes on %s only", what,
                          name, ein_dtype_name(k->dtype), ein_dtype_float_names());
    if (rc == 0 && !kn_cu_float_ok((int)k->dtype))
        return kn_cu_fail(err, EIN_EUNSUPPORTED, "%s: %s is %s, which has no CUDA kernels yet",
                          what, name, ein_dtype_name(k->dtype));
    return rc;
}

/* ---- device dtype access ---- */

template <typename T> __device__ __forceinline__ float ld(const T *p, int64_t i);
template <> __device__ __forceinline__ float ld<float>(const float *p, int64_t i) { return p[i]; }
template <> __device__ __forceinline__ float ld<__half>(const __half *p, int64_t i)
{
    return __half2float(p[i]);
}
template <> __device__ __forceinline__ float ld<__nv_bfloat16>(const __nv_bfloat16 *p, int64_t i)
{
    return __bfloat162float(p[i]);
}
template <typename T> __device__ __forceinline__ void st(T *p, int64_t i, float v);
template <> __device__ __forceinline__ void st<float>(float *p, int64_t i, float v) { p[i] = v; }
template <> __device__ __forceinline__ void st<__half>(__half *p, int64_t i, float v)
{
    p[i] = __float2half_rn(v);
}
template <> __device__ __forceinline__ void st<__nv_bfloat16>(__nv_bfloat16 *p, int64_t i, float v)
{
    p[i] = __float2bfloat16_rn(v);
}


/* A strided walk of up to EIN_MAX_RANK dimensions, passed by value. */
struct kn_cu_walk {
    int rank;
    int64_t ext[EIN_MAX_RANK];
    int64_t s0[EIN_MAX_RANK], s1[EIN_MAX_RANK], s2[EIN_MAX_RANK];
    int64_t o0, o1, o2;
};

/* kn_cu_offsets with index type I: uint32_t (32-bit division, much cheaper
 * than 64-bit on the device) where the host checked kn_cu_fits32 for the
 * element count and for every operand's volume (each offset lies inside
 * its operand), else int64_t. */
template <typename I>
__device__ __forceinline__ void kn_cu_offsets_i(const kn_cu_walk &w, I i, I *a, I *b, I *c)
{
    I oa = (I)w.o0, ob = (I)w.o1, oc = (I)w.o2;
    for (int d = w.rank - 1; d >= 0; d--) {
        I e = (I)w.ext[d], x = i % e;
        i /= e;
        oa += x * (I)w.s0[d];
        ob += x * (I)w.s1[d];
        oc += x * (I)w.s2[d];
    }
    *a = oa;
    *b = ob;
    *c = oc;
}

/* Counts and offsets up to this use 32-bit indexing; the grid-stride step
 * (at most KN_CU_MAXGRID * 1024 < 2^26) added to an index below it stays
 * below 2^32. */
#define KN_CU_MAX32 ((int64_t)0x7fffffff)
static inline int kn_cu_fits32(int64_t v) { return v >= 0 && v <= KN_CU_MAX32; }

/* Packed sequences' ends (ascending), by value into a launch (rope,
 * attention); kn_cu_seq_start(s, t) is the first token of t's sequence. */
struct kn_cu_seqs {
    int n;
    int64_t end[KN_CUDA_MAX_SEQ];
};

__device__ __forceinline__ int64_t kn_cu_seq_start(const kn_cu_seqs &s, int64_t t)
{
    int64_t st = 0;
    for (int i = 0; i < s.n; i++)
        st = s.end[i] <= t ? s.end[i] : st;
    return st;
}

/* Checks a sequence list (n ascending ends, at most KN_CUDA_MAX_SEQ) and
 * copies it into *s: 0, or EIN_EINVAL / EIN_EUNSUPPORTED with err filled. */
static inline int kn_cu_seqs_make(const char *what, const int64_t *ends, int n, kn_cu_seqs *s,
                           ein_error *err)
{
    if (n < 0 || n > KN_CUDA_MAX_SEQ || (n > 0 && !ends))
        return kn_cu_fail(err, n > KN_CUDA_MAX_SEQ ? EIN_EUNSUPPORTED : EIN_EINVAL,
                          "%s: %d sequence ends (at most %d)", what, n, KN_CUDA_MAX_SEQ);
    s->n = n;
    for (int i = 0; i < n; i++) {
        if (ends[i] <= (i > 0 ? ends[i - 1] : 0))
            return kn_cu_fail(err, EIN_EINVAL, "%s: sequence ends are not ascending", what);
        s->end[i] = ends[i];
    }
    return 0;
}

/* The flat vectorised paths move 16 bytes (one uint4) per step. */
template <typename A, typename B> struct kn_cu_same { static const bool value = false; };
template <typename A> struct kn_cu_same<A, A> { static const bool value = true; };
static inline int kn_cu_aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* Offsets of linear index i (row-major over ext) under the three stride sets. */
__device__ __forceinline__ void kn_cu_offsets(const kn_cu_walk &w, int64_t i, int64_t *a,
                                              int64_t *b, int64_t *c)
{
    int64_t oa = w.o0, ob = w.o1, oc = w.o2;
    for (int d = w.rank - 1; d >= 0; d--) {
        int64_t e = w.ext[d], x = i % e;
        i /= e;
        oa += x * w.s0[d];
        ob += x * w.s1[d];
        oc += x * w.s2[d];
    }
    *a = oa;
    *b = ob;
    *c = oc;
}

#endif
