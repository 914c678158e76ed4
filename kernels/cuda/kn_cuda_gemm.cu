/* kernels/cuda/kn_cuda_gemm.cu — row-major strided batched GEMM through
 * cuBLAS (see kn_cuda.h).
 *
 * Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, and a
 * row-major [r, c] matrix with row stride ld is the column-major [c, r]
 * matrix with the same ld: so the call swaps A and B and keeps each
 * operand's transpose flag. cublasGemmStridedBatchedEx with f32 compute
 * picks tensor-core kernels for f16/bf16 by itself (CUDA >= 11); f32
 * inputs use TF32 tensor cores only when asked. cuBLAS gets the caller's
 * workspace, so nothing allocates inside a captured graph; because
 * cublasSetStream resets the handle to cuBLAS's own (lazily allocated)
 * workspace pool, the stream is set only when it changes, and the
 * caller's workspace is set again right after. */
#include "config.h"
#include "kernels/cuda/kn_cuda_common.cuh"
#ifdef HAVE_CUBLASLT
#include <cublasLt.h>
#endif

#include <cublas_v2.h>
#include <limits.h>
#include <stdlib.h>

struct kn_cuda_ctx {
    cublasHandle_t h;
    void *lt;              /* cublasLtHandle_t, or NULL (kn_cuda_ctx_fp8) */
    int sm;                /* 10 * major + minor of the current device */
    void *workspace;
    size_t workspace_bytes;
    cudaStream_t stream;   /* the stream the handle is on */
    int stream_set;
    struct kn_cudnn *dnn;  /* NULL: no cuDNN attention (dnn_status says why) */
    char dnn_status[160];
    long attn_cudnn, attn_ours; /* attention calls through each */
    char attn_note[256];   /* why the last call ran where it did */
    uint64_t declined[64]; /* hashes of the (shape, why) declines reported */
    int ndeclined;
    char declines[1024];   /* new declines, until the next report */
};

static uint64_t kn_cu_hash(uint64_t h, const char *s)
{
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

extern "C" void *kn_cuda_ctx_workspace(kn_cuda_ctx *c, size_t *bytes)
{
    *bytes = c ? c->workspace_bytes : 0;
    return c ? c->workspace : NULL;
}

extern "C" void kn_cuda_ctx_note_decline(kn_cuda_ctx *c, const char *shape, const char *why)
{
    uint64_t h = kn_cu_hash(kn_cu_hash(0xcbf29ce484222325ull, shape), why);
    for (int i = 0; i < c->ndeclined; i++)
        if (c->declined[i] == h)
            return;
    if (c->ndeclined < 64)
        c->declined[c->ndeclined++] = h;
    size_t n = strlen(c->declines);
    if (n + 1 < sizeof c->declines)
        snprintf(c->declines + n, sizeof c->declines - n, "%scuDNN declined %s: %s; our kernel "
                 "runs it", n ? "; " : "", shape, why);
}

extern "C" struct kn_cudnn *kn_cuda_ctx_cudnn(kn_cuda_ctx *c)
{
    return c->dnn;
}

extern "C" const char *kn_cuda_ctx_cudnn_status(kn_cuda_ctx *c)
{
    return c->dnn_status;
}

extern "C" void kn_cuda_ctx_note_attention(kn_cuda_ctx *c, int cudnn, const char *why)
{
    ++*(cudnn ? &c->attn_cudnn : &c->attn_ours);
    snprintf(c->attn_note, sizeof c->attn_note, "%s", why);
}

extern "C" int kn_cuda_ctx_attention_report(const kn_cuda_ctx *c, char *buf, size_t cap)
{
    if (!c || !buf || !cap)
        return EIN_EINVAL;
    int n = snprintf(buf, cap, "attention: %ld calls through cuDNN SDPA, %ld through our kernel "
                     "(cuDNN: %s; last: %s)", c->attn_cudnn, c->attn_ours,
                     c->dnn ? "available" : c->dnn_status,
                     c->attn_note[0] ? c->attn_note : "none yet");
    if (c->declines[0] && n >= 0 && (size_t)n < cap)
        snprintf(buf + n, cap - (size_t)n, "; %s", c->declines);
    ((kn_cuda_ctx *)c)->declines[0] = '\0'; /* each decline reported once */
    return 0;
}

extern "C" int kn_cudnn_probe_variant(struct kn_cudnn *c, const kn_sg_params *p, char *line,
                                      size_t cap);

extern "C" size_t kn_cudnn_get_version(struct kn_cudnn *c);

extern "C" int kn_cuda_cudnn_version(kn_cuda_ctx *c, size_t *version, char *line, size_t cap)
{
    *version = 0;
    if (!c || !c->dnn)
        return snprintf(line, cap, "no cuDNN: %s", c ? c->dnn_status : "no context"),
               EIN_EUNSUPPORTED;
    *version = kn_cudnn_get_version(c->dnn);
    snprintf(line, cap, "cuDNN %zu", *version);
    return 0;
}

extern "C" int kn_cuda_ctx_cudnn_probe(kn_cuda_ctx *c, const kn_sg_params *p, char *line,
                                       size_t cap)
{
    if (!c || !c->dnn)
        return snprintf(line, cap, "no cuDNN: %s", c ? c->dnn_status : "no context"),
               EIN_EUNSUPPORTED;
    return kn_cudnn_probe_variant(c->dnn, p, line, cap);
}

/* cuBLAS's type of a float dtype: 0, or -1 for a dtype cuBLAS is not
 * given here (never another type in its place). */
static int kn_cu_dt(ein_dtype t, cudaDataType *out)
{
    switch (t) {
    case EIN_F32: *out = CUDA_R_32F; return 0;
    case EIN_F16: *out = CUDA_R_16F; return 0;
    case EIN_BF16: *out = CUDA_R_16BF; return 0;
    case EIN_I32:
    case EIN_I64:
    case EIN_Q8_0: /* quantized weights: kn_cuda_einsum_q (kn_cuda_quant.cu) */
    case EIN_Q4_0:
    case EIN_F8E4M3: break;
    }
    return -1;
}

extern "C" int kn_cuda_ctx_create(void *workspace, size_t workspace_bytes, kn_cuda_ctx **out,
                                  ein_error *err)
{
    if (!out || (workspace_bytes > 0 && !workspace))
        return kn_cu_fail(err, EIN_EINVAL, "cuda ctx: bad arguments");
    kn_cuda_ctx *c = (kn_cuda_ctx *)calloc(1, sizeof *c);
    if (!c)
        return kn_cu_fail(err, EIN_ENOMEM, "cuda ctx: out of memory");
    cublasStatus_t st = cublasCreate(&c->h);
    if (st != CUBLAS_STATUS_SUCCESS) {
        free(c);
        return kn_cu_fail(err, EIN_EDEVICE, "cuda ctx: cublasCreate: %s", cublasGetStatusString(st));
    }
    if (workspace_bytes > 0 &&
        (st = cublasSetWorkspace(c->h, workspace, workspace_bytes)) != CUBLAS_STATUS_SUCCESS) {
        cublasDestroy(c->h);
        free(c);
        return kn_cu_fail(err, EIN_EDEVICE, "cuda ctx: cublasSetWorkspace: %s",
                          cublasGetStatusString(st));
    }
    c->workspace = workspace;
    c->workspace_bytes = workspace_bytes;
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess)
        c->sm = 10 * major + minor;
#ifdef HAVE_CUBLASLT
    /* optional: without it f8e4m3 prefill dequantises (kn_qmm_plan_fp8) */
    cublasLtHandle_t lt;
    if (cublasLtCreate(&lt) == CUBLAS_STATUS_SUCCESS)
        c->lt = lt;
#endif
    /* cuDNN is optional: without it (or if its handle cannot be made)
     * attention runs our kernel, and dnn_status says why. */
    if (kn_cudnn_create(&c->dnn, workspace, workspace_bytes, c->dnn_status,
                        sizeof c->dnn_status) < 0)
        c->dnn = NULL;
    int rc = kn_cuda_attention_prepare(err);
    if (rc < 0) {
        kn_cudnn_destroy(c->dnn);
#ifdef HAVE_CUBLASLT
        if (c->lt)
            cublasLtDestroy((cublasLtHandle_t)c->lt);
#endif
        cublasDestroy(c->h);
        free(c);
        return rc;
    }
    *out = c;
    return 0;
}

extern "C" void kn_cuda_ctx_destroy(kn_cuda_ctx *c)
{
    if (!c)
        return;
    kn_cudnn_destroy(c->dnn);
#ifdef HAVE_CUBLASLT
    if (c->lt)
        cublasLtDestroy((cublasLtHandle_t)c->lt);
#endif
    cublasDestroy(c->h);
    free(c);
}

extern "C" void *kn_cuda_ctx_lt(kn_cuda_ctx *c)
{
    return c ? c->lt : NULL;
}

extern "C" void kn_cuda_ctx_fp8(kn_cuda_ctx *c, int *sm, size_t *lt_version)
{
    *sm = c ? c->sm : 0;
    *lt_version = 0;
#ifdef HAVE_CUBLASLT
    if (c && c->lt)
        *lt_version = cublasLtGetVersion();
#endif
}

/* Put the handle on `stream` if it is not there yet, and give cuBLAS the
 * caller's workspace again (cublasSetStream dropped it). */
static int kn_cu_bind(kn_cuda_ctx *c, void *stream, const char *what, ein_error *err)
{
    if (c->stream_set && c->stream == (cudaStream_t)stream)
        return 0;
    cublasStatus_t st = cublasSetStream(c->h, (cudaStream_t)stream);
    if (st != CUBLAS_STATUS_SUCCESS)
        return kn_cu_fail(err, EIN_EDEVICE, "%s: cublasSetStream: %s", what,
                          cublasGetStatusString(st));
    if (c->workspace_bytes > 0 &&
        (st = cublasSetWorkspace(c->h, c->workspace, c->workspace_bytes)) != CUBLAS_STATUS_SUCCESS)
        return kn_cu_fail(err, EIN_EDEVICE, "%s: cublasSetWorkspace: %s", what,
                          cublasGetStatusString(st));
    c->stream = (cudaStream_t)stream;
    c->stream_set = 1;
    return 0;
}

/* The scratch half of the workspace: the first half, 256-byte aligned. */
extern "C" size_t kn_cuda_ctx_scratch_cap(kn_cuda_ctx *c)
{
    return c && c->workspace ? (c->workspace_bytes / 2) & ~(size_t)255 : 0;
}

extern "C" int kn_cuda_ctx_scratch(kn_cuda_ctx *c, size_t bytes, void *stream, void **out,
                                   ein_error *err)
{
    const char *what = "cuda scratch";
    size_t half = kn_cuda_ctx_scratch_cap(c);
    *out = NULL;
    if (bytes > half)
        return kn_cu_fail(err, EIN_EUNSUPPORTED, "%s: %zu bytes asked, the context has %zu", what,
                          bytes, half);
    int rc = kn_cu_bind(c, stream, what, err);
    if (rc < 0)
        return rc;
    cublasStatus_t st = cublasSetWorkspace(c->h, (char *)c->workspace + half,
                                           c->workspace_bytes - half);
    if (st != CUBLAS_STATUS_SUCCESS)
        return kn_cu_fail(err, EIN_EDEVICE, "%s: cublasSetWorkspace: %s", what,
                          cublasGetStatusString(st));
    *out = c->workspace;
    return 0;
}

extern "C" int kn_cuda_ctx_scratch_end(kn_cuda_ctx *c, ein_error *err)
{
    cublasStatus_t st = cublasSetWorkspace(c->h, c->workspace, c->workspace_bytes);
    if (st != CUBLAS_STATUS_SUCCESS)
        return kn_cu_fail(err, EIN_EDEVICE, "cuda scratch: cublasSetWorkspace: %s",
                          cublasGetStatusString(st));
    return 0;
}

extern "C" int kn_cuda_gemm(kn_cuda_ctx *c, const kn_cuda_gemm_args *g, void *stream,
                            ein_error *err)
{
    const char *what = "cuda gemm";
    if (!c || !g)
        return kn_cu_fail(err, EIN_EINVAL, "%s: no context or arguments", what);
    if (!ein_dtype_is_float((int)g->ab_dtype) ||
        (g->c_dtype != EIN_F32 && g->c_dtype != g->ab_dtype))
        return kn_cu_fail(err, EIN_EINVAL, "%s: C must be f32 or A's dtype", what);
    if (g->m < 0 || g->n < 0 || g->k < 0 || g->batch < 0)
        return kn_cu_fail(err, EIN_EINVAL, "%s: negative size", what);
    if (g->m == 0 || g->n == 0 || g->batch == 0)
        return 0;
    if (g->m > INT_MAX || g->n > INT_MAX || g->k > INT_MAX || g->batch > INT_MAX ||
        g->lda > INT_MAX || g->ldb > INT_MAX || g->ldc > INT_MAX)
        return kn_cu_fail(err, EIN_EUNSUPPORTED, "%s: size exceeds cuBLAS int", what);
    int64_t acols = g->trans_a ? g->m : g->k, bcols = g->trans_b ? g->k : g->n;
    if (g->lda < (acols > 1 ? acols : 1) || g->ldb < (bcols > 1 ? bcols : 1) ||
        g->ldc < (g->n > 1 ? g->n : 1))
        return kn_cu_fail(err, EIN_EINVAL, "%s: leading dimension below the row length", what);
    if (!g->a || !g->b || !g->c)
        return kn_cu_fail(err, EIN_EINVAL, "%s: NULL operand", what);
    cudaDataType abt, ctt;
    if (kn_cu_dt(g->ab_dtype, &abt) < 0 || kn_cu_dt(g->c_dtype, &ctt) < 0)
        return kn_cu_fail(err, EIN_EUNSUPPORTED, "%s: %s x %s: not a dtype cuBLAS multiplies here",
                          what, ein_dtype_name(g->ab_dtype), ein_dtype_name(g->c_dtype));
    int rc = kn_cu_bind(c, stream, what, err);
    if (rc < 0)
        return rc;
    cublasStatus_t st;
    cublasComputeType_t ct = CUBLAS_COMPUTE_32F;
    if (g->ab_dtype == EIN_F32 && g->allow_tf32)
        ct = CUBLAS_COMPUTE_32F_FAST_TF32;
    float alpha = g->alpha, beta = g->beta;
    st = cublasGemmStridedBatchedEx(
        c->h, g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
        (int)g->n, (int)g->m, (int)g->k, &alpha, g->b, abt, (int)g->ldb,
        g->stride_b, g->a, abt, (int)g->lda, g->stride_a, &beta, g->c,
        ctt, (int)g->ldc, g->stride_c, (int)g->batch, ct, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS)
        return kn_cu_fail(err, EIN_EDEVICE, "%s: cublasGemmStridedBatchedEx: %s", what,
                          cublasGetStatusString(st));
    return 0;
}
