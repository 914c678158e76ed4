/* kernels/cuda/kn_cuda_cudnn.cu — causal GQA attention through cuDNN's fused
 * scaled-dot-product attention (cuDNN 9 backend C API), with our own kernel
 * (kn_cuda_attention) as the fallback; see kn_cuda.h.
 *
 * STATUS: does not work yet. Run on an H200 with cuDNN 9.19.0 (PyTorch's
 * nvidia-cudnn-cu13 wheel; tools/gpu-check, 2026-12-04): the operation
 * graph finalizes, but heuristics return no engine that supports it: the
 * SDPA engines reject it in their pattern tagger ("tag_mha_graph: Dropout
 * set of ops not configured correctly", cuDNN's log at
 * CUDNN_LOGLEVEL_DBG=2). The same answer came with the mask's GEN_INDEX
 * computed in f32 as well as int32, P in bf16 as well as f32, and
 * heuristics mode FALLBACK as well as A. So every call runs our kernel
 * (the attention report says why), and test_kn_cuda's cuDNN cases fail on
 * a GPU. Everything here is behind a runtime check: any cuDNN error while building
 * a plan marks that shape as unsupported (remembered, with the reason) and
 * kn_cuda_attention_auto runs our kernel instead; an error at execution
 * does the same for the call that failed. EIN_ATTENTION=ours turns cuDNN
 * off, EIN_ATTENTION=cudnn makes a cuDNN failure an error (for tests).
 *
 * The operation graph is the one cuDNN's frontend builds for SDPA
 * inference (and which its fused flash-attention engines match), written
 * with backend descriptors:
 *   S = Q K^T (f32) ; S *= scale ; S = (row >= col) ? S : lowest ;
 *   P = exp(S - max S) / sum exp(S - max S) ; O = P V
 * with Q [1, Hq, T, d], K^T a strided view [1, Hkv, d, T] of K, V
 * [1, Hkv, T, d], O [1, Hq, T, d] (GQA by the head dimension's broadcast),
 * every intermediate virtual and f32, the scale and the mask value passed
 * by value. Plans are built once per shape (dtype, Hq, Hkv, T, d) outside
 * graph capture (the first iteration of a worker runs instruction by
 * instruction) and reused; the workspace is the context's (shared with
 * cuBLAS, in stream order).
 *
 * Covered: q, k, v, out all f16 or all bf16; head dim 64 or 128; q and
 * k/v blocks both spanning tokens [0, T) with q's heads [group*a, group*b)
 * over k's [a, b); 16-byte aligned pointers. Packed sequences (ends inside
 * the block) run as one SDPA per sequence: the same graph over S tokens
 * with rows T apart, the pointers moved to the sequence's first row (a plan
 * per distinct length; at most KN_DNN_SEGS sequences and KN_DNN_SHAPES / 2
 * lengths, else our kernel). Not cuDNN's ragged-offset tensors: cuDNN
 * documents them for token-major (THD) packing; ours is head-major.
 * Offset token blocks (q over [t0, t1) with t0 > 0) are left to our kernel. */
#include "kernels/cuda/kn_cuda_common.cuh"
#include "common/ein_knob.h"

#include "config.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_CUDNN
#include <cudnn.h>

#define KN_DNN_SHAPES 16      /* plans cached per context */
#define KN_DNN_DESCS 64       /* descriptors one plan keeps alive */
#define KN_DNN_CFGS 8         /* heuristics results tried */
#define KN_DNN_SEGS 16        /* packed sequences in one block, at most */

typedef struct kn_dnn_plan {
    int used;
    ein_dtype dt;
    int64_t hq, hkv, S, T, d;      /* S tokens of a sequence, rows T apart */
    int ok;                         /* 1: plan built; 0: unsupported (why) */
    char why[200];
    cudnnBackendDescriptor_t plan;
    int64_t workspace;
    cudnnBackendDescriptor_t keep[KN_DNN_DESCS];
    int nkeep;
    float scale, lowest;            /* the by-value tensors' values */
} kn_dnn_plan;

struct kn_cudnn {
    cudnnHandle_t h;
    void *workspace;
    size_t workspace_bytes;
    kn_dnn_plan plans[KN_DNN_SHAPES];
    int next;                       /* round-robin replacement */
};

/* A builder's state: the first failure, and every descriptor made. */
typedef struct dnn_build {
    kn_dnn_plan *p;
    int failed;
} dnn_build;

static void dnn_fail(dnn_build *b, const char *what, cudnnStatus_t st)
{
    if (b->failed)
        return;
    b->failed = 1;
    char last[128] = "";
    cudnnGetLastErrorString(last, sizeof last);
    snprintf(b->p->why, sizeof b->p->why, "%s: %s%s%s", what, cudnnGetErrorString(st),
             last[0] ? ": " : "", last);
}

static cudnnBackendDescriptor_t dnn_make(dnn_build *b, cudnnBackendDescriptorType_t t)
{
    cudnnBackendDescriptor_t d = NULL;
    if (b->failed)
        return NULL;
    if (b->p->nkeep >= KN_DNN_DESCS) {
        b->failed = 1;
        snprintf(b->p->why, sizeof b->p->why, "too many cuDNN descriptors");
        return NULL;
    }
    cudnnStatus_t st = cudnnBackendCreateDescriptor(t, &d);
    if (st != CUDNN_STATUS_SUCCESS) {
        dnn_fail(b, "cudnnBackendCreateDescriptor", st);
        return NULL;
    }
    b->p->keep[b->p->nkeep++] = d;
    return d;
}

static void dnn_set(dnn_build *b, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a,
                    cudnnBackendAttributeType_t t, int64_t n, const void *v, const char *what)
{
    if (b->failed)
        return;
    cudnnStatus_t st = cudnnBackendSetAttribute(d, a, t, n, v);
    if (st != CUDNN_STATUS_SUCCESS)
        dnn_fail(b, what, st);
}

static void dnn_finalize(dnn_build *b, cudnnBackendDescriptor_t d, const char *what)
{
    if (b->failed)
        return;
    cudnnStatus_t st = cudnnBackendFinalize(d);
    if (st != CUDNN_STATUS_SUCCESS)
        dnn_fail(b, what, st);
}

/* A 4-D tensor: real (uid < 100) or virtual, by value or not. */
static cudnnBackendDescriptor_t dnn_tensor(dnn_build *b, int64_t uid, cudnnDataType_t dt,
                                           const int64_t dims[4], const int64_t strides[4],
                                           int is_virtual, int by_value)
{
    cudnnBackendDescriptor_t t = dnn_make(b, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    int64_t align = 16;
    bool virt = is_virtual != 0, byval = by_value != 0;
    dnn_set(b, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, "tensor data type");
    dnn_set(b, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims, "tensor dims");
    dnn_set(b, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides, "tensor strides");
    dnn_set(b, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor uid");
    dnn_set(b, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align,
            "tensor alignment");
    dnn_set(b, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt, "tensor virtual");
    if (byval)
        dnn_set(b, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &byval,
                "tensor by value");
    dnn_finalize(b, t, "tensor finalize");
    return t;
}

/* A pointwise operation y = mode(x[, bb][, t]) computed in `prec`. */
static cudnnBackendDescriptor_t dnn_pointwise(dnn_build *b, cudnnPointwiseMode_t mode,
                                              cudnnDataType_t prec, int64_t axis,
                                              cudnnBackendDescriptor_t x,
                                              cudnnBackendDescriptor_t bb,
                                              cudnnBackendDescriptor_t t,
                                              cudnnBackendDescriptor_t y)
{
    cudnnBackendDescriptor_t pw = dnn_make(b, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    dnn_set(b, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode,
            "pointwise mode");
    dnn_set(b, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec,
            "pointwise precision");
    if (axis >= 0)
        dnn_set(b, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, "pointwise axis");
    dnn_finalize(b, pw, "pointwise finalize");
    cudnnBackendDescriptor_t op = dnn_make(b, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    dnn_set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR,
            1, &pw, "pointwise op descriptor");
    dnn_set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x,
            "pointwise x");
    if (bb)
        dnn_set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                &bb, "pointwise b");
    if (t)
        dnn_set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                &t, "pointwise t");
    dnn_set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y,
            "pointwise y");
    dnn_finalize(b, op, "pointwise op finalize");
    return op;
}

static cudnnBackendDescriptor_t dnn_reduction(dnn_build *b, cudnnReduceTensorOp_t rop,
                                              cudnnBackendDescriptor_t x,
                                              cudnnBackendDescriptor_t y)
{
    cudnnDataType_t f = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t r = dnn_make(b, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    dnn_set(b, r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &rop,
            "reduction operator");
    dnn_set(b, r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f,
            "reduction precision");
    dnn_finalize(b, r, "reduction finalize");
    cudnnBackendDescriptor_t op = dnn_make(b, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    dnn_set(b, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &r,
            "reduction op descriptor");
    dnn_set(b, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x,
            "reduction x");
    dnn_set(b, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y,
            "reduction y");
    dnn_finalize(b, op, "reduction op finalize");
    return op;
}

static cudnnBackendDescriptor_t dnn_matmul(dnn_build *b, cudnnBackendDescriptor_t a,
                                           cudnnBackendDescriptor_t bm,
                                           cudnnBackendDescriptor_t c)
{
    cudnnDataType_t f = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t m = dnn_make(b, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    dnn_set(b, m, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f, "matmul precision");
    dnn_finalize(b, m, "matmul finalize");
    cudnnBackendDescriptor_t op = dnn_make(b, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    dnn_set(b, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a,
            "matmul a");
    dnn_set(b, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &bm,
            "matmul b");
    dnn_set(b, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c,
            "matmul c");
    dnn_set(b, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &m,
            "matmul op descriptor");
    dnn_finalize(b, op, "matmul op finalize");
    return op;
}

enum { UID_Q = 1, UID_K, UID_V, UID_O, UID_SCALE, UID_LOWEST };

/* Build the operation graph and the first plan that finalizes and fits
 * the workspace. On failure p->ok stays 0 and p->why says why. */
static void dnn_build_plan(struct kn_cudnn *c, kn_dnn_plan *p)
{
    dnn_build b = {p, 0};
    int64_t hq = p->hq, hkv = p->hkv, n = p->S, T = p->T, d = p->d;
    cudnnDataType_t io = p->dt == EIN_F16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16;
    cudnnDataType_t f = CUDNN_DATA_FLOAT, i32 = CUDNN_DATA_INT32, bo = CUDNN_DATA_BOOLEAN;
    /* One sequence of n tokens inside blocks of T tokens per head. */
    const int64_t qd[4] = {1, hq, n, d}, qs[4] = {hq * T * d, T * d, d, 1};
    const int64_t ktd[4] = {1, hkv, d, n}, kts[4] = {hkv * T * d, T * d, 1, d};
    const int64_t vd[4] = {1, hkv, n, d}, vs[4] = {hkv * T * d, T * d, d, 1};
    const int64_t sd[4] = {1, hq, n, n}, ss[4] = {hq * n * n, n * n, n, 1};
    const int64_t rd[4] = {1, hq, n, 1}, rs[4] = {hq * n, n, 1, 1};
    const int64_t one[4] = {1, 1, 1, 1};
    p->scale = (float)(1.0 / sqrt((double)d));
    p->lowest = -FLT_MAX;

    cudnnBackendDescriptor_t Q = dnn_tensor(&b, UID_Q, io, qd, qs, 0, 0);
    cudnnBackendDescriptor_t KT = dnn_tensor(&b, UID_K, io, ktd, kts, 0, 0);
    cudnnBackendDescriptor_t V = dnn_tensor(&b, UID_V, io, vd, vs, 0, 0);
    cudnnBackendDescriptor_t O = dnn_tensor(&b, UID_O, io, qd, qs, 0, 0);
    cudnnBackendDescriptor_t SC = dnn_tensor(&b, UID_SCALE, f, one, one, 0, 1);
    cudnnBackendDescriptor_t LO = dnn_tensor(&b, UID_LOWEST, f, one, one, 0, 1);
    cudnnBackendDescriptor_t S = dnn_tensor(&b, 101, f, sd, ss, 1, 0);
    cudnnBackendDescriptor_t S2 = dnn_tensor(&b, 102, f, sd, ss, 1, 0);
    cudnnBackendDescriptor_t ROW = dnn_tensor(&b, 103, i32, sd, ss, 1, 0);
    cudnnBackendDescriptor_t COL = dnn_tensor(&b, 104, i32, sd, ss, 1, 0);
    cudnnBackendDescriptor_t GE = dnn_tensor(&b, 105, bo, sd, ss, 1, 0);
    cudnnBackendDescriptor_t S3 = dnn_tensor(&b, 106, f, sd, ss, 1, 0);
    cudnnBackendDescriptor_t MX = dnn_tensor(&b, 107, f, rd, rs, 1, 0);
    cudnnBackendDescriptor_t SUB = dnn_tensor(&b, 108, f, sd, ss, 1, 0);
    cudnnBackendDescriptor_t EX = dnn_tensor(&b, 109, f, sd, ss, 1, 0);
    cudnnBackendDescriptor_t SUM = dnn_tensor(&b, 110, f, rd, rs, 1, 0);
    cudnnBackendDescriptor_t P = dnn_tensor(&b, 111, f, sd, ss, 1, 0);

    cudnnBackendDescriptor_t ops[12];
    ops[0] = dnn_matmul(&b, Q, KT, S);
    ops[1] = dnn_pointwise(&b, CUDNN_POINTWISE_MUL, f, -1, S, SC, NULL, S2);
    ops[2] = dnn_pointwise(&b, CUDNN_POINTWISE_GEN_INDEX, i32, 2, S2, NULL, NULL, ROW);
    ops[3] = dnn_pointwise(&b, CUDNN_POINTWISE_GEN_INDEX, i32, 3, S2, NULL, NULL, COL);
    ops[4] = dnn_pointwise(&b, CUDNN_POINTWISE_CMP_GE, bo, -1, ROW, COL, NULL, GE);
    ops[5] = dnn_pointwise(&b, CUDNN_POINTWISE_BINARY_SELECT, f, -1, S2, LO, GE, S3);
    ops[6] = dnn_reduction(&b, CUDNN_REDUCE_TENSOR_MAX, S3, MX);
    ops[7] = dnn_pointwise(&b, CUDNN_POINTWISE_SUB, f, -1, S3, MX, NULL, SUB);
    ops[8] = dnn_pointwise(&b, CUDNN_POINTWISE_EXP, f, -1, SUB, NULL, NULL, EX);
    ops[9] = dnn_reduction(&b, CUDNN_REDUCE_TENSOR_ADD, EX, SUM);
    ops[10] = dnn_pointwise(&b, CUDNN_POINTWISE_DIV, f, -1, EX, SUM, NULL, P);
    ops[11] = dnn_matmul(&b, P, V, O);

    cudnnBackendDescriptor_t g = dnn_make(&b, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    dnn_set(&b, g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &c->h,
            "operation graph handle");
    dnn_set(&b, g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 12, ops,
            "operation graph ops");
    dnn_finalize(&b, g, "operation graph finalize (no engine matches this attention graph?)");

    cudnnBackendDescriptor_t heur = dnn_make(&b, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    dnn_set(&b, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
            &g, "heuristics graph");
    dnn_set(&b, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode,
            "heuristics mode");
    dnn_finalize(&b, heur, "heuristics finalize");
    cudnnBackendDescriptor_t cfg[KN_DNN_CFGS];
    for (int i = 0; i < KN_DNN_CFGS; i++)
        cfg[i] = dnn_make(&b, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    int64_t ncfg = 0;
    if (!b.failed) {
        cudnnStatus_t st = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                    CUDNN_TYPE_BACKEND_DESCRIPTOR, KN_DNN_CFGS,
                                                    &ncfg, cfg);
        if (st != CUDNN_STATUS_SUCCESS)
            dnn_fail(&b, "heuristics results", st);
        else if (ncfg <= 0) {
            b.failed = 1;
            snprintf(p->why, sizeof p->why, "cuDNN heuristics found no engine for this shape");
        }
    }
    for (int64_t i = 0; i < ncfg && i < KN_DNN_CFGS && !b.failed; i++) {
        cudnnBackendDescriptor_t plan = NULL;
        if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) !=
            CUDNN_STATUS_SUCCESS)
            break;
        int64_t ws = 0;
        if (cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1,
                                     &c->h) == CUDNN_STATUS_SUCCESS &&
            cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i]) ==
                CUDNN_STATUS_SUCCESS &&
            cudnnBackendFinalize(plan) == CUDNN_STATUS_SUCCESS &&
            cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                     CUDNN_TYPE_INT64, 1, NULL, &ws) == CUDNN_STATUS_SUCCESS &&
            ws >= 0 && (size_t)ws <= c->workspace_bytes) {
            p->plan = plan;
            p->workspace = ws;
            p->ok = 1;
            return;
        }
        cudnnBackendDestroyDescriptor(plan);
    }
    if (!b.failed)
        snprintf(p->why, sizeof p->why, "none of %lld cuDNN engine configurations finalized "
                 "within a %zu-byte workspace", (long long)ncfg, c->workspace_bytes);
}

static void dnn_plan_clear(kn_dnn_plan *p)
{
    if (p->plan)
        cudnnBackendDestroyDescriptor(p->plan);
    for (int i = p->nkeep - 1; i >= 0; i--)
        cudnnBackendDestroyDescriptor(p->keep[i]);
    memset(p, 0, sizeof *p);
}

extern "C" int kn_cudnn_create(struct kn_cudnn **out, void *workspace, size_t workspace_bytes,
                               char *why, size_t cap)
{
    *out = NULL;
    struct kn_cudnn *c = (struct kn_cudnn *)calloc(1, sizeof *c);
    if (!c) {
        snprintf(why, cap, "out of memory");
        return EIN_ENOMEM;
    }
    cudnnStatus_t st = cudnnCreate(&c->h);
    if (st != CUDNN_STATUS_SUCCESS) {
        snprintf(why, cap, "cudnnCreate: %s", cudnnGetErrorString(st));
        free(c);
        (void)cudaGetLastError();
        return EIN_EDEVICE;
    }
    c->workspace = workspace;
    c->workspace_bytes = workspace_bytes;
    snprintf(why, cap, "cuDNN %zu", cudnnGetVersion());
    *out = c;
    return 0;
}

extern "C" void kn_cudnn_destroy(struct kn_cudnn *c)
{
    if (!c)
        return;
    for (int i = 0; i < KN_DNN_SHAPES; i++)
        dnn_plan_clear(&c->plans[i]);
    cudnnDestroy(c->h);
    free(c);
}

/* The cached plan of a shape, built on first use. */
static kn_dnn_plan *dnn_plan_for(struct kn_cudnn *c, ein_dtype dt, int64_t hq, int64_t hkv,
                                 int64_t S, int64_t T, int64_t d)
{
    for (int i = 0; i < KN_DNN_SHAPES; i++) {
        kn_dnn_plan *p = &c->plans[i];
        if (p->used && p->dt == dt && p->hq == hq && p->hkv == hkv && p->S == S && p->T == T &&
            p->d == d)
            return p;
    }
    kn_dnn_plan *p = &c->plans[c->next];
    c->next = (c->next + 1) % KN_DNN_SHAPES;
    dnn_plan_clear(p);
    p->used = 1;
    p->dt = dt, p->hq = hq, p->hkv = hkv, p->S = S, p->T = T, p->d = d;
    dnn_build_plan(c, p);
    return p;
}

/* The sequences inside tokens [0, T): seg[0] = 0 < seg[1] < ... <
 * seg[n] = T, sequence i over [seg[i], seg[i+1]) (a token after the last
 * end belongs to a sequence starting there, as in kn_cpu_attention).
 * Returns n, or -1 when there are more than KN_DNN_SEGS. */
static int dnn_segments(const int64_t *seq_ends, int nseq, int64_t T, int64_t *seg)
{
    int n = 0;
    seg[0] = 0;
    for (int i = 0; i < nseq; i++)
        if (seq_ends[i] > seg[n] && seq_ends[i] < T) {
            if (n + 1 >= KN_DNN_SEGS)
                return -1;
            seg[++n] = seq_ends[i];
        }
    seg[++n] = T;
    return n;
}

/* 0 when cuDNN covers these blocks, else EIN_EUNSUPPORTED with the
 * reason. */
static int dnn_covers(int64_t group, const int64_t *seq_ends, int nseq, const kn_block *q,
                      const kn_block *k, const kn_block *v, const kn_block *out, char *why,
                      size_t cap)
{
    ein_dtype dt = q->dtype;
    if ((dt != EIN_F16 && dt != EIN_BF16) || k->dtype != dt || v->dtype != dt || out->dtype != dt)
        return snprintf(why, cap, "dtypes other than all f16 or all bf16"), EIN_EUNSUPPORTED;
    if (q->box.rank != 3 || k->box.rank != 3 || v->box.rank != 3 || out->box.rank != 3)
        return snprintf(why, cap, "blocks not of rank 3"), EIN_EUNSUPPORTED;
    int64_t d = q->box.hi[2] - q->box.lo[2], T = q->box.hi[1] - q->box.lo[1];
    if ((d != 64 && d != 128) || q->box.lo[2] != 0 || k->box.lo[2] != 0 ||
        k->box.hi[2] != d || v->box.hi[2] != d)
        return snprintf(why, cap, "head dim %lld (cuDNN here: 64, 128)", (long long)d),
               EIN_EUNSUPPORTED;
    if (q->box.lo[1] != 0 || k->box.lo[1] != 0 || k->box.hi[1] != T || v->box.lo[1] != 0 ||
        v->box.hi[1] != T)
        return snprintf(why, cap, "token blocks other than q, k, v all over [0, T)"),
               EIN_EUNSUPPORTED;
    /* Packed sequences run one plan each (a plan per distinct length,
     * built outside graph capture on the first iteration): a few only. */
    int64_t seg[KN_DNN_SEGS + 1], lens[KN_DNN_SEGS];
    int nseg = dnn_segments(seq_ends, nseq, T, seg), nlen = 0;
    if (nseg < 0)
        return snprintf(why, cap, "more than %d packed sequences", KN_DNN_SEGS),
               EIN_EUNSUPPORTED;
    for (int i = 0; i < nseg; i++) {
        int seen = 0;
        for (int j = 0; j < nlen; j++)
            seen |= lens[j] == seg[i + 1] - seg[i];
        if (!seen)
            lens[nlen++] = seg[i + 1] - seg[i];
    }
    if (nlen > KN_DNN_SHAPES / 2)
        return snprintf(why, cap, "%d different sequence lengths (cuDNN here: at most %d)", nlen,
                        KN_DNN_SHAPES / 2),
               EIN_EUNSUPPORTED;
    int64_t hq = q->box.hi[0] - q->box.lo[0], hkv = k->box.hi[0] - k->box.lo[0];
    int same = 1;
    for (int i = 0; i < 3; i++)
        same &= out->box.lo[i] == q->box.lo[i] && out->box.hi[i] == q->box.hi[i];
    if (group < 1 || hq != group * hkv || q->box.lo[0] != group * k->box.lo[0] ||
        v->box.lo[0] != k->box.lo[0] || v->box.hi[0] != k->box.hi[0] || !same)
        return snprintf(why, cap, "heads or boxes that do not line up"), EIN_EUNSUPPORTED;
    if (((uintptr_t)q->data | (uintptr_t)k->data | (uintptr_t)v->data | (uintptr_t)out->data) &
        15)
        return snprintf(why, cap, "pointers not 16-byte aligned"), EIN_EUNSUPPORTED;
    return 0;
}

/* Enqueue plan p on q, k, v, out (the handle's stream). On a cuDNN error
 * the plan is marked unsupported (later calls go to our kernel directly)
 * and EIN_EDEVICE returned with why. */
static int dnn_execute(struct kn_cudnn *c, kn_dnn_plan *p, void *q, void *k, void *v, void *out,
                       char *why, size_t cap)
{
    int64_t uids[6] = {UID_Q, UID_K, UID_V, UID_O, UID_SCALE, UID_LOWEST};
    void *ptrs[6] = {q, k, v, out, &p->scale, &p->lowest};
    void *ws = p->workspace > 0 ? c->workspace : NULL;
    cudnnBackendDescriptor_t vp = NULL;
    cudnnStatus_t st;
    if ((st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp)) !=
            CUDNN_STATUS_SUCCESS ||
        (st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                                       6, uids)) != CUDNN_STATUS_SUCCESS ||
        (st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                                       CUDNN_TYPE_VOID_PTR, 6, ptrs)) != CUDNN_STATUS_SUCCESS ||
        (st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR,
                                       1, &ws)) != CUDNN_STATUS_SUCCESS ||
        (st = cudnnBackendFinalize(vp)) != CUDNN_STATUS_SUCCESS ||
        (st = cudnnBackendExecute(c->h, p->plan, vp)) != CUDNN_STATUS_SUCCESS) {
        char last[128] = "";
        cudnnGetLastErrorString(last, sizeof last);
        snprintf(why, cap, "cuDNN execution: %s%s%s", cudnnGetErrorString(st), last[0] ? ": " : "",
                 last);
        if (vp)
            cudnnBackendDestroyDescriptor(vp);
        p->ok = 0;
        snprintf(p->why, sizeof p->why, "%s", why);
        (void)cudaGetLastError();
        return EIN_EDEVICE;
    }
    cudnnBackendDestroyDescriptor(vp);
    return 0;
}

extern "C" int kn_cudnn_attention(struct kn_cudnn *c, int64_t group, const int64_t *seq_ends,
                                  int nseq, const kn_block *q, const kn_block *k,
                                  const kn_block *v, kn_block *out, void *stream, char *why,
                                  size_t cap)
{
    if (!c)
        return snprintf(why, cap, "no cuDNN context"), EIN_EUNSUPPORTED;
    int rc = dnn_covers(group, seq_ends, nseq, q, k, v, out, why, cap);
    if (rc < 0)
        return rc;
    int64_t hq = q->box.hi[0] - q->box.lo[0], hkv = k->box.hi[0] - k->box.lo[0];
    int64_t T = q->box.hi[1], d = q->box.hi[2], seg[KN_DNN_SEGS + 1];
    int nseg = dnn_segments(seq_ends, nseq, T, seg);
    size_t esz = 2; /* f16 / bf16 */
    /* Every plan first (one per length), so that a shape cuDNN does not
     * take falls back before anything is enqueued. */
    for (int i = 0; i < nseg; i++) {
        kn_dnn_plan *p = dnn_plan_for(c, q->dtype, hq, hkv, seg[i + 1] - seg[i], T, d);
        if (!p->ok)
            return snprintf(why, cap, "%s", p->why), EIN_EUNSUPPORTED;
    }
    cudnnStatus_t st = cudnnSetStream(c->h, (cudaStream_t)stream);
    if (st != CUDNN_STATUS_SUCCESS)
        return snprintf(why, cap, "cudnnSetStream: %s", cudnnGetErrorString(st)), EIN_EDEVICE;
    int64_t ws_max = 0;
    for (int i = 0; i < nseg; i++) {
        kn_dnn_plan *p = dnn_plan_for(c, q->dtype, hq, hkv, seg[i + 1] - seg[i], T, d);
        if (!p->ok) /* evicted and rebuilt, and that failed: ours redoes it all */
            return snprintf(why, cap, "%s", p->why), EIN_EUNSUPPORTED;
        size_t off = (size_t)(seg[i] * d) * esz; /* the sequence's first row, every head */
        if ((rc = dnn_execute(c, p, (char *)q->data + off, (char *)k->data + off,
                              (char *)v->data + off, (char *)out->data + off, why, cap)) < 0)
            return rc;
        ws_max = p->workspace > ws_max ? p->workspace : ws_max;
    }
    snprintf(why, cap, "cuDNN SDPA (%d sequence%s, plan workspace %lld bytes)", nseg,
             nseg == 1 ? "" : "s", (long long)ws_max);
    return 0;
}

#else /* !HAVE_CUDNN */

extern "C" int kn_cudnn_create(struct kn_cudnn **out, void *workspace, size_t workspace_bytes,
                               char *why, size_t cap)
{
    (void)workspace, (void)workspace_bytes;
    *out = NULL;
    snprintf(why, cap, "built without cuDNN");
    return EIN_EUNSUPPORTED;
}

extern "C" void kn_cudnn_destroy(struct kn_cudnn *c)
{
    (void)c;
}

extern "C" int kn_cudnn_attention(struct kn_cudnn *c, int64_t group, const int64_t *seq_ends,
                                  int nseq, const kn_block *q, const kn_block *k,
                                  const kn_block *v, kn_block *out, void *stream, char *why,
                                  size_t cap)
{
    (void)c, (void)group, (void)seq_ends, (void)nseq, (void)q, (void)k, (void)v, (void)out;
    (void)stream;
    snprintf(why, cap, "built without cuDNN");
    return EIN_EUNSUPPORTED;
}

#endif

/* ---- the runtime choice --------------------------------------------- */

/* EIN_ATTENTION: "ours" (never cuDNN), "cudnn" (a cuDNN failure is an
 * error), anything else or unset: cuDNN where it applies, else ours. */
static int kn_attention_mode(void)
{
    const char *m = ein_knob_get(EIN_KNOB_ATTENTION);
    if (m && !strcmp(m, "ours"))
        return 0;
    if (m && !strcmp(m, "cudnn"))
        return 2;
    return 1;
}

extern "C" int kn_cuda_attention_auto(kn_cuda_ctx *ctx, int64_t group, const int64_t *seq_ends,
                                      int nseq, const kn_block *q, const kn_block *k,
                                      const kn_block *v, kn_block *out, void *stream,
                                      ein_error *err)
{
    int mode = kn_attention_mode();
    char why[256] = "EIN_ATTENTION=ours";
    struct kn_cudnn *dnn = ctx ? kn_cuda_ctx_cudnn(ctx) : NULL;
    if (mode > 0 && !dnn)
        snprintf(why, sizeof why, "%s", ctx ? kn_cuda_ctx_cudnn_status(ctx) : "no context");
    if (mode > 0 && dnn) {
        int rc = kn_cudnn_attention(dnn, group, seq_ends, nseq, q, k, v, out, stream, why,
                                    sizeof why);
        if (rc == 0) {
            kn_cuda_ctx_note_attention(ctx, 1, why);
            return 0;
        }
    }
    if (mode == 2)
        return kn_cu_fail(err, EIN_EUNSUPPORTED, "cuda attention: EIN_ATTENTION=cudnn: %s", why);
    if (ctx)
        kn_cuda_ctx_note_attention(ctx, 0, why);
    return kn_cuda_attention(group, seq_ends, nseq, q, k, v, out, stream, err);
}
