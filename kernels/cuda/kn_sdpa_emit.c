/* kernels/cuda/kn_sdpa_emit.c — a kn_sdpa_graph into cuDNN backend
 * descriptors through a kn_dnn_api table (kn_sdpa_emit.h). */
#include "kernels/cuda/kn_sdpa_emit.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "common/base/ein_error.h"

static void em_fail(const kn_dnn_api *api, kn_sdpa_built *b, const char *what,
                    cudnnStatus_t st)
{
    if (b->failed)
        return;
    b->failed = 1;
    char last[160] = "";
    if (api->last_error)
        api->last_error(last, sizeof last);
    snprintf(b->why, sizeof b->why, "%s: %s%s%s", what,
             api->error_string ? api->error_string(st) : "cuDNN error", last[0] ? ": " : "",
             last);
}

static cudnnBackendDescriptor_t em_make(const kn_dnn_api *api, kn_sdpa_built *b,
                                        cudnnBackendDescriptorType_t t)
{
    cudnnBackendDescriptor_t d = NULL;
    if (b->failed)
        return NULL;
    if (b->nkeep >= KN_SDPA_KEEP) {
        b->failed = 1;
        snprintf(b->why, sizeof b->why, "too many cuDNN descriptors");
        return NULL;
    }
    cudnnStatus_t st = api->create(t, &d);
    if (st != CUDNN_STATUS_SUCCESS) {
        em_fail(api, b, "cudnnBackendCreateDescriptor", st);
        return NULL;
    }
    b->keep[b->nkeep++] = d;
    return d;
}

static void em_set(const kn_dnn_api *api, kn_sdpa_built *b, cudnnBackendDescriptor_t d,
                   cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, int64_t n,
                   const void *v, const char *what)
{
    if (b->failed)
        return;
    cudnnStatus_t st = api->set(d, a, t, n, v);
    if (st != CUDNN_STATUS_SUCCESS)
        em_fail(api, b, what, st);
}

static void em_finalize(const kn_dnn_api *api, kn_sdpa_built *b, cudnnBackendDescriptor_t d,
                        const char *what)
{
    if (b->failed)
        return;
    cudnnStatus_t st = api->finalize(d);
    if (st != CUDNN_STATUS_SUCCESS)
        em_fail(api, b, what, st);
}

static cudnnDataType_t em_dtype(kn_sg_dtype t)
{
    switch (t) {
    case KN_SG_BF16: return CUDNN_DATA_BFLOAT16;
    case KN_SG_F16: return CUDNN_DATA_HALF;
    case KN_SG_I32: return CUDNN_DATA_INT32;
    case KN_SG_BOOL: return CUDNN_DATA_BOOLEAN;
    case KN_SG_F32: break;
    }
    return CUDNN_DATA_FLOAT;
}

static cudnnPointwiseMode_t em_pwmode(int m)
{
    switch ((kn_sg_pwmode)m) {
    case KN_SG_PW_MUL: return CUDNN_POINTWISE_MUL;
    case KN_SG_PW_ADD: return CUDNN_POINTWISE_ADD;
    case KN_SG_PW_SUB: return CUDNN_POINTWISE_SUB;
    case KN_SG_PW_DIV: return CUDNN_POINTWISE_DIV;
    case KN_SG_PW_EXP: return CUDNN_POINTWISE_EXP;
    case KN_SG_PW_LOG: return CUDNN_POINTWISE_LOG;
    case KN_SG_PW_GEN_INDEX: return CUDNN_POINTWISE_GEN_INDEX;
    case KN_SG_PW_CMP_GE: return CUDNN_POINTWISE_CMP_GE;
    case KN_SG_PW_CMP_LT: return CUDNN_POINTWISE_CMP_LT;
    case KN_SG_PW_LOGICAL_AND: return CUDNN_POINTWISE_LOGICAL_AND;
    case KN_SG_PW_BINARY_SELECT: break;
    }
    return CUDNN_POINTWISE_BINARY_SELECT;
}

/* The tensor descriptors, in g's order (a ragged tensor after its offsets:
 * offsets come first in g). */
static void em_tensors(const kn_dnn_api *api, kn_sdpa_built *b, const kn_sdpa_graph *g,
                       cudnnBackendDescriptor_t *td)
{
    for (int i = 0; i < g->nt && !b->failed; i++) {
        const kn_sg_tensor *t = &g->t[i];
        cudnnBackendDescriptor_t d = em_make(api, b, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
        cudnnDataType_t dt = em_dtype(t->dtype);
        int64_t align = 16, uid = t->uid;
        bool virt = t->is_virtual != 0, byval = t->by_value != 0;
        em_set(api, b, d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt,
               "tensor data type");
        em_set(api, b, d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, t->dims,
               "tensor dims");
        em_set(api, b, d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, t->strides,
               "tensor strides");
        em_set(api, b, d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor uid");
        em_set(api, b, d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align,
               "tensor alignment");
        em_set(api, b, d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt,
               "tensor virtual");
        if (byval)
            em_set(api, b, d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &byval,
                   "tensor by value");
        if (t->ragged >= 0) {
            if (t->ragged >= i) {
                b->failed = 1;
                snprintf(b->why, sizeof b->why, "tensor %s before its ragged offsets", t->name);
                return;
            }
            em_set(api, b, d, CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC,
                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &td[t->ragged], "tensor ragged offsets");
        }
        em_finalize(api, b, d, "tensor finalize");
        td[i] = d;
    }
}

static cudnnBackendDescriptor_t em_op(const kn_dnn_api *api, kn_sdpa_built *b,
                                      const kn_sg_op *o, cudnnBackendDescriptor_t *td)
{
    cudnnDataType_t prec = em_dtype(o->prec);
    cudnnBackendDescriptor_t op = NULL;
    if (o->kind == KN_SG_POINTWISE) {
        cudnnPointwiseMode_t mode = em_pwmode(o->mode);
        cudnnBackendDescriptor_t pw = em_make(api, b, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
        em_set(api, b, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode,
               "pointwise mode");
        em_set(api, b, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec,
               "pointwise precision");
        if (o->nan_propagate) {
            cudnnNanPropagation_t nan = CUDNN_PROPAGATE_NAN;
            em_set(api, b, pw, CUDNN_ATTR_POINTWISE_NAN_PROPAGATION,
                   CUDNN_TYPE_NAN_PROPOGATION, 1, &nan, "pointwise NaN propagation");
        }
        if (o->axis >= 0)
            em_set(api, b, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &o->axis,
                   "pointwise axis");
        em_finalize(api, b, pw, "pointwise finalize");
        op = em_make(api, b, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
        em_set(api, b, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR,
               CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw, "pointwise op descriptor");
        em_set(api, b, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR,
               1, &td[o->x], "pointwise x");
        if (o->b >= 0)
            em_set(api, b, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC,
                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &td[o->b], "pointwise b");
        if (o->t >= 0)
            em_set(api, b, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC,
                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &td[o->t], "pointwise t");
        em_set(api, b, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR,
               1, &td[o->y], "pointwise y");
        em_set(api, b, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1,
               &o->alpha1, "pointwise alpha1");
        em_set(api, b, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1,
               &o->alpha2, "pointwise alpha2");
        em_finalize(api, b, op, "pointwise op finalize");
    } else if (o->kind == KN_SG_REDUCTION) {
        cudnnReduceTensorOp_t rop =
            o->mode == KN_SG_RED_MAX ? CUDNN_REDUCE_TENSOR_MAX : CUDNN_REDUCE_TENSOR_ADD;
        cudnnBackendDescriptor_t r = em_make(api, b, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
        em_set(api, b, r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1,
               &rop, "reduction operator");
        em_set(api, b, r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &prec,
               "reduction precision");
        em_finalize(api, b, r, "reduction finalize");
        op = em_make(api, b, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
        em_set(api, b, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
               &r, "reduction op descriptor");
        em_set(api, b, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR,
               1, &td[o->x], "reduction x");
        em_set(api, b, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR,
               1, &td[o->y], "reduction y");
        em_finalize(api, b, op, "reduction op finalize");
    } else {
        cudnnBackendDescriptor_t m = em_make(api, b, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
        em_set(api, b, m, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &prec,
               "matmul precision");
        em_finalize(api, b, m, "matmul finalize");
        op = em_make(api, b, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
        em_set(api, b, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
               &td[o->x], "matmul a");
        em_set(api, b, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
               &td[o->b], "matmul b");
        em_set(api, b, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
               &td[o->y], "matmul c");
        em_set(api, b, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
               &m, "matmul op descriptor");
        if (o->m_override >= 0)
            em_set(api, b, op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC,
                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &td[o->m_override], "matmul M override");
        if (o->n_override >= 0)
            em_set(api, b, op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC,
                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &td[o->n_override], "matmul N override");
        if (o->k_override >= 0)
            em_set(api, b, op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC,
                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &td[o->k_override], "matmul K override");
        em_finalize(api, b, op, "matmul op finalize");
    }
    return op;
}

int kn_sdpa_emit_graph(const kn_dnn_api *api, cudnnHandle_t h, const kn_sdpa_graph *g,
                       kn_sdpa_built *b)
{
    memset(b, 0, sizeof *b);
    b->cfg = -1;
    cudnnBackendDescriptor_t td[KN_SG_MAX_TENSORS], ops[KN_SG_MAX_OPS];
    em_tensors(api, b, g, td);
    for (int i = 0; i < g->nop && !b->failed; i++)
        ops[i] = em_op(api, b, &g->op[i], td);
    cudnnBackendDescriptor_t gr = em_make(api, b, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    em_set(api, b, gr, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h,
           "operation graph handle");
    em_set(api, b, gr, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->nop, ops,
           "operation graph ops");
    em_finalize(api, b, gr, "operation graph finalize");
    b->graph = b->failed ? NULL : gr;
    return b->failed ? EIN_EUNSUPPORTED : 0;
}

int kn_sdpa_emit_plan(const kn_dnn_api *api, cudnnHandle_t h, kn_sdpa_built *b,
                      cudnnBackendHeurMode_t mode, int64_t ws_cap)
{
    if (b->failed || !b->graph)
        return EIN_EUNSUPPORTED;
    cudnnBackendDescriptor_t heur = em_make(api, b, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    em_set(api, b, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
           &b->graph, "heuristics graph");
    em_set(api, b, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode,
           "heuristics mode");
    em_finalize(api, b, heur, "heuristics finalize");
    cudnnBackendDescriptor_t cfg[KN_SDPA_CFGS];
    for (int i = 0; i < KN_SDPA_CFGS; i++)
        cfg[i] = em_make(api, b, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    if (b->failed)
        return EIN_EUNSUPPORTED;
    cudnnStatus_t st = api->get(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, KN_SDPA_CFGS, &b->ncfg, cfg);
    if (st != CUDNN_STATUS_SUCCESS) {
        em_fail(api, b, "heuristics results", st);
        return EIN_EUNSUPPORTED;
    }
    if (b->ncfg <= 0) {
        b->failed = 1;
        snprintf(b->why, sizeof b->why, "cuDNN heuristics found no engine for this graph");
        return EIN_EUNSUPPORTED;
    }
    char first[200] = "";
    for (int64_t i = 0; i < b->ncfg && i < KN_SDPA_CFGS; i++) {
        cudnnBackendDescriptor_t plan = NULL;
        if ((st = api->create(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan)) !=
            CUDNN_STATUS_SUCCESS)
            break;
        int64_t ws = -1;
        if ((st = api->set(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h)) ==
                CUDNN_STATUS_SUCCESS &&
            (st = api->set(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                           CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i])) == CUDNN_STATUS_SUCCESS &&
            (st = api->finalize(plan)) == CUDNN_STATUS_SUCCESS &&
            (st = api->get(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                           NULL, &ws)) == CUDNN_STATUS_SUCCESS &&
            ws >= 0 && ws <= ws_cap) {
            b->plan = plan;
            b->workspace = ws;
            b->cfg = (int)i;
            return 0;
        }
        if (!first[0]) {
            char last[120] = "";
            if (api->last_error)
                api->last_error(last, sizeof last);
            snprintf(first, sizeof first, "%s%s%s",
                     st != CUDNN_STATUS_SUCCESS && api->error_string ? api->error_string(st)
                                                                   : "workspace too large",
                     last[0] ? ": " : "", last);
        }
        api->destroy(plan);
    }
    b->failed = 1;
    snprintf(b->why, sizeof b->why, "none of %lld cuDNN engine configurations finalized within "
             "a %lld-byte workspace (first: %.120s)", (long long)b->ncfg, (long long)ws_cap, first);
    return EIN_EUNSUPPORTED;
}

int kn_sdpa_engines(const kn_dnn_api *api, kn_sdpa_built *b, int *ok, int max, int64_t *count)
{
    *count = -1;
    if (!b->graph || api->get(b->graph, CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT,
                              CUDNN_TYPE_INT64, 1, NULL, count) != CUDNN_STATUS_SUCCESS) {
        *count = -1;
        return 0;
    }
    int n = 0;
    for (int64_t i = 0; i < *count && i < 1000; i++) {
        cudnnBackendDescriptor_t e = NULL;
        if (api->create(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &e) != CUDNN_STATUS_SUCCESS)
            break;
        int64_t idx = i;
        if (api->set(e, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                     &b->graph) == CUDNN_STATUS_SUCCESS &&
            api->set(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &idx) ==
                CUDNN_STATUS_SUCCESS &&
            api->finalize(e) == CUDNN_STATUS_SUCCESS && n < max)
            ok[n++] = (int)i;
        api->destroy(e);
    }
    return n;
}

int kn_sdpa_execute(const kn_dnn_api *api, cudnnHandle_t h, const kn_sdpa_graph *g,
                    const kn_sdpa_built *b, const kn_sdpa_ptrs *ptr, void *workspace,
                    char *why, size_t cap)
{
    int64_t uids[KN_SG_MAX_TENSORS];
    void *ptrs[KN_SG_MAX_TENSORS];
    int n = 0;
    for (int i = 0; i < g->nt; i++) {
        const kn_sg_tensor *t = &g->t[i];
        if (t->is_virtual)
            continue;
        void *p = NULL;
        switch (t->uid) {
        case KN_SG_UID_Q: p = ptr->q; break;
        case KN_SG_UID_K: p = ptr->k; break;
        case KN_SG_UID_V: p = ptr->v; break;
        case KN_SG_UID_O: p = ptr->o; break;
        case KN_SG_UID_SCALE: p = (void *)&g->scale; break;
        case KN_SG_UID_FILL: p = (void *)&g->fill; break;
        case KN_SG_UID_PAD_FILL: p = (void *)&g->pad_fill; break;
        case KN_SG_UID_STATS: p = ptr->stats; break;
        case KN_SG_UID_SEQ_Q: p = ptr->seq_q; break;
        case KN_SG_UID_SEQ_KV: p = ptr->seq_kv; break;
        case KN_SG_UID_OFF_Q: case KN_SG_UID_OFF_K: case KN_SG_UID_OFF_V: case KN_SG_UID_OFF_O:
            p = ptr->off;
            break;
        case KN_SG_UID_OFF_STATS: p = ptr->off_stats; break;
        default: break;
        }
        if (!p)
            return snprintf(why, cap, "cuDNN execution: no data for tensor %s", t->name),
                   EIN_EINVAL;
        uids[n] = t->uid;
        ptrs[n++] = p;
    }
    cudnnBackendDescriptor_t vp = NULL;
    void *ws = b->workspace > 0 ? workspace : NULL;
    cudnnStatus_t st;
    const char *what = "variant pack";
    if ((st = api->create(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp)) == CUDNN_STATUS_SUCCESS &&
        (st = api->set(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids)) ==
            CUDNN_STATUS_SUCCESS &&
        (st = api->set(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n,
                       ptrs)) == CUDNN_STATUS_SUCCESS &&
        (st = api->set(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws)) ==
            CUDNN_STATUS_SUCCESS &&
        (st = api->finalize(vp)) == CUDNN_STATUS_SUCCESS &&
        ((what = "execute"), (st = api->execute(h, b->plan, vp))) == CUDNN_STATUS_SUCCESS) {
        api->destroy(vp);
        return 0;
    }
    char last[128] = "";
    if (api->last_error)
        api->last_error(last, sizeof last);
    snprintf(why, cap, "cuDNN %s: %s%s%s", what,
             api->error_string ? api->error_string(st) : "error", last[0] ? ": " : "", last);
    if (vp)
        api->destroy(vp);
    return EIN_EDEVICE;
}

void kn_sdpa_built_free(const kn_dnn_api *api, kn_sdpa_built *b)
{
    if (b->plan)
        api->destroy(b->plan);
    for (int i = b->nkeep - 1; i >= 0; i--)
        api->destroy(b->keep[i]);
    memset(b, 0, sizeof *b);
    b->cfg = -1;
}
