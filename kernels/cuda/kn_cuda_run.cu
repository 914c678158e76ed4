/* kernels/cuda/kn_cuda_run.cu — einsum as one strided batched GEMM, and
 * kn_cuda_run: one Program KERNEL instruction on device blocks.
 *
 * Einsum on the GPU covers the contractions a single cuBLAS strided batched
 * GEMM expresses: two operands whose letters (extent-1 letters ignored, as
 * on the CPU) split into batch (a, b, out), M (a, out), N (b, out) and
 * K (a, b) groups, each group merging into one dimension of every operand
 * it appears in (letters adjacent, in out's order; K in a's order), every
 * operand row- or column-major with a leading dimension, out row-major
 * ([M, N] with N innermost). Letters summed in one operand only, and
 * layouts outside that, are EIN_EUNSUPPORTED (the planner's einsums in the
 * LLaMA block all fit). */
#include "kernels/cuda/kn_cuda_common.cuh"

extern "C" {
#include "common/ir/ein_einsum.h"
}

#include <string.h>

#define KN_CU_NLET 26

struct kn_cu_es {
    int rank[3];
    int empty;                 /* some letter has extent 0 */
    int let[3][EIN_MAX_RANK];
    int64_t ext[KN_CU_NLET];
    int64_t st[3][KN_CU_NLET];
    unsigned act[3];
};

/* Subscripts through ein_einsum_parse (no letter repeats within an operand,
 * every output letter in an input), then each letter's interval, stride and
 * activity from the blocks. */
static int kn_cu_es_parse(const char *s, const kn_block *blk[3], kn_cu_es *e, ein_error *err)
{
    memset(e, 0, sizeof *e);
    ein_einsum_sub sub;
    ein_error perr = {0, {0}};
    int rc = ein_einsum_parse_flags(s, EIN_EINSUM_SCALARS, &sub, &perr);
    if (rc < 0)
        return kn_cu_fail(err, rc, "cuda %s", perr.msg);
    if (sub.nops != 2)
        return kn_cu_fail(err, EIN_EUNSUPPORTED, "cuda einsum %s: needs two operands", s);
    for (int x = 0; x < 3; x++) {
        const char *let = x < 2 ? sub.ops[x] : sub.out;
        e->rank[x] = x < 2 ? sub.rank[x] : sub.out_rank;
        for (int d = 0; d < e->rank[x]; d++)
            e->let[x][d] = let[d] - 'a';
    }
    int64_t lo[KN_CU_NLET], hi[KN_CU_NLET];
    int seen[KN_CU_NLET] = {0};
    for (int x = 0; x < 3; x++) {
        const kn_block *k = blk[x];
        if (k->box.rank != e->rank[x])
            return kn_cu_fail(err, EIN_ESHAPE, "cuda einsum %s: operand %d has rank %d", s, x,
                              k->box.rank);
        int64_t stv = 1;
        for (int d = k->box.rank - 1; d >= 0; d--) {
            int L = e->let[x][d];
            if (seen[L] && (lo[L] != k->box.lo[d] || hi[L] != k->box.hi[d]))
                return kn_cu_fail(err, EIN_ESHAPE, "cuda einsum %s: letter %c has different "
                                  "intervals", s, 'a' + L);
            seen[L] = 1;
            lo[L] = k->box.lo[d];
            hi[L] = k->box.hi[d];
            e->ext[L] = hi[L] - lo[L];
            e->empty |= e->ext[L] == 0;
            e->st[x][L] = stv;
            stv *= e->ext[L];
            if (e->ext[L] > 1)
                e->act[x] |= 1u << L;
        }
    }
    return 0;
}

/* The letters of group g (in the order of operand `from`) merge in operand
 * x: returns 1 and the merged stride (0 when the group is empty). */
static int kn_cu_merge(const kn_cu_es *e, unsigned g, int from, int x, int64_t *stride,
                       int64_t *extent)
{
    int L[EIN_MAX_RANK], n = 0;
    for (int d = 0; d < e->rank[from]; d++)
        if (g & (1u << e->let[from][d]))
            L[n++] = e->let[from][d];
    *extent = 1;
    for (int i = 0; i < n; i++)
        *extent *= e->ext[L[i]];
    if (n == 0) {
        *stride = 0;
        return 1;
    }
    for (int i = 0; i + 1 < n; i++)
        if (e->st[x][L[i]] != e->st[x][L[i + 1]] * e->ext[L[i + 1]])
            return 0;
    *stride = e->st[x][L[n - 1]];
    return 1;
}

extern "C" int kn_cuda_einsum(kn_cuda_ctx *ctx, const char *subscripts, const kn_block *a,
                              const kn_block *b, kn_block *out, void *stream, ein_error *err)
{
    const char *what = "cuda einsum";
    int rc;
    /* quantized weights (issue 36): b only, kn_cuda_quant.cu */
    if (b && ein_dtype_is_block((int)b->dtype))
        return kn_cuda_einsum_q(ctx, subscripts, a, b, out, stream, err);
    if (a && ein_dtype_is_block((int)a->dtype))
        return kn_cu_fail(err, EIN_EUNSUPPORTED, "%s %s: a is %s; quantized weights are read "
                          "only as b (weights [out, in])", what, subscripts,
                          ein_dtype_name(a->dtype));
    if ((rc = kn_cu_blk(what, "a", a, -1, err)) < 0 || (rc = kn_cu_blk(what, "b", b, -1, err)) < 0 ||
        (rc = kn_cu_blk(what, "out", out, -1, err)) < 0)
        return rc;
    const kn_block *blk[3] = {a, b, out};
    kn_cu_es e;
    if ((rc = kn_cu_es_parse(subscripts, blk, &e, err)) < 0)
        return rc;
    if (kn_cu_vol(&out->box) == 0)
        return 0;
    unsigned A = e.act[0], B = e.act[1], O = e.act[2];
    unsigned batch = A & B & O, M = (A & O) & ~B, N = (B & O) & ~A, K = (A & B) & ~O;
    if ((A | B) & ~(batch | M | N | K))
        return kn_cu_fail(err, EIN_EUNSUPPORTED, "%s %s: a letter is summed in one operand only",
                          what, subscripts);
    if (a->dtype != b->dtype || (out->dtype != EIN_F32 && out->dtype != a->dtype))
        return kn_cu_fail(err, EIN_EUNSUPPORTED, "%s %s: a and b must share a dtype, out f32 or "
                          "that dtype", what, subscripts);
    int64_t sb[3], sm[3], sn[3], sk[3], nb, nm, nn, nk;
    int ok = 1;
    for (int x = 0; x < 3; x++) {
        ok &= kn_cu_merge(&e, batch, 2, x, &sb[x], &nb);
        ok &= kn_cu_merge(&e, M, 2, x, &sm[x], &nm);
        ok &= kn_cu_merge(&e, N, 2, x, &sn[x], &nn);
        ok &= kn_cu_merge(&e, K, 0, x, &sk[x], &nk);
    }
    if (!ok)
        return kn_cu_fail(err, EIN_EUNSUPPORTED, "%s %s: a letter group does not merge into one "
                          "dimension", what, subscripts);
    if (e.empty) {
        /* out is not empty, so an empty letter is summed over: zeros */
        cudaError_t ce = cudaMemsetAsync(out->data, 0, (size_t)kn_cu_vol(&out->box) *
                                         ein_dtype_size(out->dtype), (cudaStream_t)stream);
        return ce == cudaSuccess ? 0 : kn_cu_fail(err, EIN_EDEVICE, "%s: %s", what,
                                                  cudaGetErrorString(ce));
    }
    kn_cuda_gemm_args g;
    memset(&g, 0, sizeof g);
    g.m = nm, g.n = nn, g.k = nk, g.batch = nb;
    g.a = a->data, g.b = b->data, g.c = out->data;
    g.ab_dtype = a->dtype, g.c_dtype = out->dtype;
    g.alpha = 1.0f, g.beta = 0.0f;
    /* a as [M, K]: K innermost (row-major) or M innermost (transposed). */
    if (!K || sk[0] == 1)
        g.trans_a = 0, g.lda = M ? sm[0] : nk;
    else if (!M || sm[0] == 1)
        g.trans_a = 1, g.lda = K ? sk[0] : nm;
    else
        ok = 0;
    if (!N || sn[1] == 1)
        g.trans_b = 0, g.ldb = K ? sk[1] : nn;
    else if (!K || sk[1] == 1)
        g.trans_b = 1, g.ldb = N ? sn[1] : nk;
    else
        ok = 0;
    if (N && sn[2] != 1)
        ok = 0;
    g.ldc = M ? sm[2] : nn;
    if (!ok)
        return kn_cu_fail(err, EIN_EUNSUPPORTED, "%s %s: an operand is neither row- nor "
                          "column-major over its groups", what, subscripts);
    /* Leading dimensions at least the row length (1-row matrices). */
    int64_t arow = g.trans_a ? nm : nk, brow = g.trans_b ? nk : nn;
    if (g.lda < arow)
        g.lda = arow;
    if (g.ldb < brow)
        g.ldb = brow;
    if (g.ldc < nn)
        g.ldc = nn;
    g.stride_a = sb[0], g.stride_b = sb[1], g.stride_c = sb[2];
    return kn_cuda_gemm(ctx, &g, stream, err);
}

extern "C" int kn_cuda_run(kn_cuda_ctx *ctx, const ein_kernel *k, const kn_block *ins, int nin,
                           kn_block *out, void *stream, ein_error *err)
{
    if (!k || !out || (nin > 0 && !ins))
        return kn_cu_fail(err, EIN_EINVAL, "cuda kernel: missing kernel, inputs or output");
    if ((int)k->kind < 0 || k->kind >= EIN_KERNEL_COUNT)
        return kn_cu_fail(err, EIN_EINVAL, "cuda kernel: unknown kind %d", (int)k->kind);
    /* The registry's arity (ein_kernel_check_arity), as the validator and
     * the CPU kernels check it; an einsum of one operand has no CUDA
     * kernel yet. */
    if (ein_kernel_check_arity(k->kind, nin, err) < 0)
        return EIN_EINVAL;
    if (k->kind == EIN_KERNEL_EINSUM && nin == 1)
        return kn_cu_fail(err, EIN_EUNSUPPORTED, "cuda kernel einsum %s: one operand is not "
                          "supported on CUDA", k->subscripts);
    if (k->nlist < 0 || (k->nlist > 0 && !k->list))
        return kn_cu_fail(err, EIN_EINVAL, "cuda kernel: bad list");
    /* The dtype table says which kinds take which dtypes. */
    for (int i = -1; i < nin; i++) {
        const kn_block *b = i < 0 ? out : &ins[i];
        if (!ein_dtype_kernel_ok((int)b->dtype, (int)k->kind))
            return kn_cu_fail(err, EIN_EINVAL, "cuda kernel %s: %s is %s, which it does not take",
                              ein_kernel_kind_name(k->kind), i < 0 ? "out" : "an input",
                              ein_dtype_name(b->dtype));
    }
    switch (k->kind) {
    case EIN_KERNEL_EINSUM:
        if (!memchr(k->subscripts, '\0', sizeof k->subscripts))
            return kn_cu_fail(err, EIN_EINVAL, "cuda einsum: subscripts are not terminated");
        return kn_cuda_einsum(ctx, k->subscripts, &ins[0], &ins[1], out, stream, err);
    case EIN_KERNEL_UNARY:
        return kn_cuda_unary_blk(k->unary, k->scalar, &ins[0], out, stream, err);
    case EIN_KERNEL_BINARY:
        return kn_cuda_binary(k->binary, &ins[0], &ins[1], out, stream, err);
    case EIN_KERNEL_SOFTMAX:
        return kn_cuda_softmax(k->axis, &ins[0], out, stream, err);
    case EIN_KERNEL_RMSNORM:
        return kn_cuda_rmsnorm(k->eps, &ins[0], &ins[1], out, stream, err);
    case EIN_KERNEL_LAYERNORM:
        return kn_cuda_layernorm(k->eps, &ins[0], &ins[1], &ins[2], out, stream, err);
    case EIN_KERNEL_ROPE:
        return kn_cuda_rope_scaled(k->style, k->head_dim, k->theta, &k->scaling, k->list, k->nlist,
                                   &ins[0], out,
                                  stream, err);
    case EIN_KERNEL_ATTENTION:
        /* cuDNN's SDPA path knows no sliding window: a windowed attention
         * runs our kernel (issue 34). */
        if (k->window != 0)
            return kn_cuda_attention_window(k->group, k->window, k->list, k->nlist, &ins[0],
                                            &ins[1], &ins[2], out, stream, err);
        return kn_cuda_attention_auto(ctx, k->group, k->list, k->nlist, &ins[0], &ins[1],
                                      &ins[2], out, stream, err);
    case EIN_KERNEL_REDUCE:
        return kn_cuda_reduce(k->reduce, k->axes, &ins[0], out, stream, err);
    case EIN_KERNEL_CONCAT:
        if (nin < 1 || (k->nlist != nin && k->nlist != nin + 1))
            return kn_cu_fail(err, EIN_EINVAL, "cuda concat: %d offsets for %d inputs",
                              (int)k->nlist, nin);
        return kn_cuda_concat(k->axis, k->list, ins, nin, out, stream, err);
    case EIN_KERNEL_SLICE:
        return kn_cuda_slice(k->axis, k->start, &ins[0], out, stream, err);
    case EIN_KERNEL_SPLIT_HEADS:
        return kn_cuda_split_heads(k->head_dim, &ins[0], out, stream, err);
    case EIN_KERNEL_MERGE_HEADS:
        return kn_cuda_merge_heads(k->head_dim, &ins[0], out, stream, err);
    case EIN_KERNEL_ATTENTION_PARTIAL:
        if (nin != 1 && nin != 3)
            return kn_cu_fail(err, EIN_EINVAL, "cuda attention_partial: takes q or q, k, v, got "
                              "%d inputs", nin);
        if (k->window != 0)
            return kn_cuda_attention_partial_window(k->group, k->window, k->list, k->nlist,
                                                    &ins[0], nin == 3 ? &ins[1] : NULL,
                                                    nin == 3 ? &ins[2] : NULL, out, stream, err);
        return kn_cuda_attention_partial_auto(ctx, k->group, k->list, k->nlist, &ins[0],
                                              nin == 3 ? &ins[1] : NULL,
                                              nin == 3 ? &ins[2] : NULL, out, stream, err);
    case EIN_KERNEL_EMBEDDING:
        return kn_cuda_embedding(k->rows, &ins[0], &ins[1], out, stream, err);
    case EIN_KERNEL_CACHE_WRITE:
        return kn_cuda_cache_write(k->rows, &ins[0], &ins[1], &ins[2], out, stream, err);
    case EIN_KERNEL_DECODE_ATTENTION:
    case EIN_KERNEL_DECODE_ATTENTION_PARTIAL: {
        /* the split-K kernel where it applies (EIN_CUDA_DECODE), else the
         * warp kernel */
        int impl = kn_cuda_decode_impl(err), partial =
            k->kind == EIN_KERNEL_DECODE_ATTENTION_PARTIAL;
        size_t wsb = 0;
        void *ws = kn_cuda_ctx_workspace(ctx, &wsb);
        if (impl < 0)
            return impl;
        if (impl == 1 && ws && nin == 4) {
            ein_error e2;
            int rc = kn_cuda_decode_attention_splitk(k->group, k->window, partial, &ins[0],
                                                     &ins[1], &ins[2], &ins[3], out, ws, wsb,
                                                     stream, &e2);
            if (rc != EIN_EUNSUPPORTED) {
                if (rc < 0 && err)
                    *err = e2;
                return rc;
            }
        }
    }
        return kn_cuda_decode_attention_window(k->group, k->window,
                                               k->kind == EIN_KERNEL_DECODE_ATTENTION_PARTIAL,
                                               &ins[0], &ins[1], &ins[2], &ins[3], out, stream,
                                               err);
    case EIN_KERNEL_ROPE_AT:
        return kn_cuda_rope_at_scaled(k->style, k->head_dim, k->theta, &k->scaling, &ins[0], &ins[1],
                                      out, stream, err);
    case EIN_KERNEL_SWIGLU:
        return kn_cuda_swiglu(&ins[0], &ins[1], out, stream, err);
    case EIN_KERNEL_ADD_RMSNORM:
        return kn_cuda_add_rmsnorm(k->eps, &ins[0], &ins[1], &ins[2], out, stream, err);
    case EIN_KERNEL_COUNT:
        break;
    }
    return kn_cu_fail(err, EIN_EINVAL, "cuda kernel: unknown kind %d", (int)k->kind);
}
