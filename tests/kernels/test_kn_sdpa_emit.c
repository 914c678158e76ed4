/* tests/kernels/test_kn_sdpa_emit.c — the cuDNN emission of the SDPA graph
 * (kernels/cuda/kn_sdpa_emit.h) run on a CPU against a recording stand-in
 * of the cudnnBackend* calls: every descriptor's attributes (type, count,
 * values), that each is finalized once and only after what it references,
 * the op list of the operation graph in the canonical order, P's data
 * type, pointwise alpha / NaN propagation, ragged offsets and GEMM
 * overrides, the variant pack, and the failures (a graph cuDNN rejects, no
 * engine, a workspace too large) reported with cuDNN's last error and every
 * descriptor destroyed. Needs cuDNN's headers, not its library. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <float.h>
#include <stdbool.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/ein_error.h"
#include "kernels/cuda/kn_sdpa_emit.h"

/* ---- the recording stand-in ------------------------------------------ */
#define MAXD 512
#define MAXA 24

typedef struct rec_attr {
    cudnnBackendAttributeName_t name;
    cudnnBackendAttributeType_t type;
    int64_t n;
    unsigned char val[8 * KN_SG_MAX_OPS]; /* the first bytes of the values */
} rec_attr;

typedef struct rec_desc {
    int id; /* 1-based creation order */
    cudnnBackendDescriptorType_t type;
    rec_attr a[MAXA];
    int na;
    int finalized; /* order of finalization, 0: not */
    int destroyed;
} rec_desc;

static rec_desc descs[MAXD];
static int ndesc, nfinal, ndestroyed;
static int fail_final_type = -1;  /* finalize of this type fails */
static int64_t heur_results = 3;  /* configurations heuristics return */
static int64_t plan_ws = 1024;    /* each plan's workspace */
static int nexec;
static cudnnBackendDescriptor_t exec_plan, exec_vp;

static rec_desc *D(cudnnBackendDescriptor_t d)
{
    rec_desc *r = (rec_desc *)d;
    assert_true(r >= descs && r < descs + ndesc);
    assert_false(r->destroyed);
    return r;
}

/* A descriptor that may be destroyed already (the variant pack after an
 * execution). */
static rec_desc *R(cudnnBackendDescriptor_t d)
{
    rec_desc *r = (rec_desc *)d;
    assert_true(r >= descs && r < descs + ndesc);
    return r;
}

static cudnnStatus_t r_create(cudnnBackendDescriptorType_t t, cudnnBackendDescriptor_t *out)
{
    assert_true(ndesc < MAXD);
    rec_desc *r = &descs[ndesc];
    memset(r, 0, sizeof *r);
    r->id = ++ndesc;
    r->type = t;
    *out = (cudnnBackendDescriptor_t)r;
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t r_destroy(cudnnBackendDescriptor_t d)
{
    D(d)->destroyed = 1;
    ndestroyed++;
    return CUDNN_STATUS_SUCCESS;
}

static size_t type_size(cudnnBackendAttributeType_t t)
{
    switch (t) {
    case CUDNN_TYPE_INT64: return 8;
    case CUDNN_TYPE_BOOLEAN: return sizeof(bool);
    case CUDNN_TYPE_FLOAT: return 4;
    case CUDNN_TYPE_BACKEND_DESCRIPTOR: case CUDNN_TYPE_HANDLE: case CUDNN_TYPE_VOID_PTR:
        return sizeof(void *);
    default: return 4; /* enums */
    }
}

static cudnnStatus_t r_set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                           cudnnBackendAttributeType_t type, int64_t n, const void *v)
{
    rec_desc *r = D(d);
    assert_false(r->finalized); /* set after finalize */
    assert_true(r->na < MAXA);
    for (int i = 0; i < r->na; i++)
        if (r->a[i].name == name)
            fail_msg("descriptor %d: attribute %d set twice", r->id, (int)name);
    if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR) /* what it references is final */
        for (int64_t i = 0; i < n; i++) {
            rec_desc *x = D(((cudnnBackendDescriptor_t const *)v)[i]);
            if (!x->finalized)
                fail_msg("descriptor %d references descriptor %d before it is finalized",
                         r->id, x->id);
        }
    rec_attr *a = &r->a[r->na++];
    a->name = name;
    a->type = type;
    a->n = n;
    size_t bytes = type_size(type) * (size_t)n;
    memcpy(a->val, v, bytes < sizeof a->val ? bytes : sizeof a->val);
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t r_get(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                           cudnnBackendAttributeType_t type, int64_t req, int64_t *n, void *v)
{
    rec_desc *r = D(d);
    assert_true(r->finalized);
    if (name == CUDNN_ATTR_ENGINEHEUR_RESULTS) {
        assert_int_equal(type, CUDNN_TYPE_BACKEND_DESCRIPTOR);
        *n = heur_results < req ? heur_results : req;
        /* cuDNN fills the caller's engine-config descriptors */
        for (int64_t i = 0; i < *n; i++)
            D(((cudnnBackendDescriptor_t *)v)[i])->finalized = ++nfinal;
        return CUDNN_STATUS_SUCCESS;
    }
    if (name == CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE) {
        *(int64_t *)v = plan_ws;
        return CUDNN_STATUS_SUCCESS;
    }
    if (name == CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT) {
        *(int64_t *)v = 5;
        return CUDNN_STATUS_SUCCESS;
    }
    return CUDNN_STATUS_BAD_PARAM;
}

static cudnnStatus_t r_finalize(cudnnBackendDescriptor_t d)
{
    rec_desc *r = D(d);
    if (r->finalized)
        fail_msg("descriptor %d finalized twice", r->id);
    if ((int)r->type == fail_final_type)
        return CUDNN_STATUS_NOT_SUPPORTED;
    if (r->type == CUDNN_BACKEND_ENGINE_DESCRIPTOR) { /* engines 1 and 3 take the graph */
        int64_t idx = -1;
        for (int i = 0; i < r->na; i++)
            if (r->a[i].name == CUDNN_ATTR_ENGINE_GLOBAL_INDEX)
                memcpy(&idx, r->a[i].val, 8);
        if (idx != 1 && idx != 3)
            return CUDNN_STATUS_NOT_SUPPORTED;
    }
    r->finalized = ++nfinal;
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t r_execute(cudnnHandle_t h, cudnnBackendDescriptor_t plan,
                               cudnnBackendDescriptor_t vp)
{
    (void)h;
    assert_true(D(plan)->finalized && D(vp)->finalized);
    exec_plan = plan;
    exec_vp = vp;
    nexec++;
    return CUDNN_STATUS_SUCCESS;
}

static const char *r_error_string(cudnnStatus_t st)
{
    return st == CUDNN_STATUS_NOT_SUPPORTED ? "CUDNN_STATUS_NOT_SUPPORTED" : "other status";
}

static void r_last_error(char *buf, size_t cap)
{
    snprintf(buf, cap, "stand-in: no engine for this graph");
}

static const kn_dnn_api rec = {r_create, r_destroy, r_set, r_get, r_finalize, r_execute,
                               r_error_string, r_last_error};
static cudnnHandle_t fake_handle = (cudnnHandle_t)(uintptr_t)0x1234;

static int setup(void **state)
{
    (void)state;
    ndesc = nfinal = ndestroyed = nexec = 0;
    fail_final_type = -1;
    heur_results = 3;
    plan_ws = 1024;
    return 0;
}

/* ---- reading the record ---------------------------------------------- */
static const rec_attr *attr(const rec_desc *r, cudnnBackendAttributeName_t name)
{
    for (int i = 0; i < r->na; i++)
        if (r->a[i].name == name)
            return &r->a[i];
    return NULL;
}

static const rec_attr *need(const rec_desc *r, cudnnBackendAttributeName_t name,
                            cudnnBackendAttributeType_t type, int64_t n)
{
    const rec_attr *a = attr(r, name);
    if (!a)
        fail_msg("descriptor %d (type %d): attribute %d not set", r->id, (int)r->type,
                 (int)name);
    if (a->type != type || a->n != n)
        fail_msg("descriptor %d attribute %d: type %d count %lld, expected %d %lld", r->id,
                 (int)name, (int)a->type, (long long)a->n, (int)type, (long long)n);
    return a;
}

static int32_t enum_of(const rec_attr *a)
{
    int32_t v;
    memcpy(&v, a->val, 4);
    return v;
}

static int64_t i64_of(const rec_attr *a, int i)
{
    int64_t v;
    memcpy(&v, a->val + 8 * i, 8);
    return v;
}

static rec_desc *desc_of(const rec_attr *a, int i)
{
    cudnnBackendDescriptor_t d;
    memcpy(&d, a->val + sizeof d * (size_t)i, sizeof d);
    return D(d);
}

static rec_desc *tensor_by_uid(int64_t uid)
{
    for (int i = 0; i < ndesc; i++)
        if (descs[i].type == CUDNN_BACKEND_TENSOR_DESCRIPTOR &&
            i64_of(need(&descs[i], CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1), 0) == uid)
            return &descs[i];
    fail_msg("no tensor of uid %lld", (long long)uid);
    return NULL;
}

static rec_desc *the_graph(void)
{
    rec_desc *g = NULL;
    for (int i = 0; i < ndesc; i++)
        if (descs[i].type == CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR) {
            assert_null(g);
            g = &descs[i];
        }
    assert_non_null(g);
    return g;
}

static kn_sg_params base(void)
{
    kn_sg_params p;
    memset(&p, 0, sizeof p);
    p.io = KN_SG_BF16;
    p.hq = 32, p.hkv = 8, p.d = 128, p.t = p.s = 4096;
    p.causal = 1;
    p.cudnn_version = 91900;
    return p;
}

/* Every tensor descriptor against the description, every op's attributes,
 * the graph's op list in order. */
static void check_emitted(const kn_sdpa_graph *g, const kn_sdpa_built *b)
{
    assert_int_equal(b->failed, 0);
    rec_desc *gr = the_graph();
    assert_ptr_equal((void *)gr, (void *)b->graph);
    assert_true(gr->finalized > 0);
    /* tensors */
    int ntensor = 0;
    for (int i = 0; i < ndesc; i++)
        ntensor += descs[i].type == CUDNN_BACKEND_TENSOR_DESCRIPTOR;
    assert_int_equal(ntensor, g->nt);
    for (int i = 0; i < g->nt; i++) {
        const kn_sg_tensor *t = &g->t[i];
        rec_desc *r = tensor_by_uid(t->uid);
        assert_true(r->finalized > 0);
        cudnnDataType_t want = t->dtype == KN_SG_BF16   ? CUDNN_DATA_BFLOAT16
                               : t->dtype == KN_SG_F16  ? CUDNN_DATA_HALF
                               : t->dtype == KN_SG_I32  ? CUDNN_DATA_INT32
                               : t->dtype == KN_SG_BOOL ? CUDNN_DATA_BOOLEAN
                                                        : CUDNN_DATA_FLOAT;
        assert_int_equal(enum_of(need(r, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1)),
                         want);
        const rec_attr *dims = need(r, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4);
        const rec_attr *str = need(r, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4);
        for (int j = 0; j < 4; j++) {
            assert_int_equal(i64_of(dims, j), t->dims[j]);
            assert_int_equal(i64_of(str, j), t->strides[j]);
        }
        assert_int_equal(i64_of(need(r, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1), 0),
                         16);
        bool virt;
        memcpy(&virt, need(r, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1)->val,
               sizeof virt);
        assert_int_equal(virt, t->is_virtual != 0);
        const rec_attr *bv = attr(r, CUDNN_ATTR_TENSOR_IS_BY_VALUE);
        assert_int_equal(bv != NULL, t->by_value != 0);
        const rec_attr *rg = attr(r, CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC);
        assert_int_equal(rg != NULL, t->ragged >= 0);
        if (rg) {
            rec_desc *off = desc_of(need(r, CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 1), 0);
            assert_int_equal(
                i64_of(need(off, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1), 0),
                g->t[t->ragged].uid);
        }
        /* uid, dtype, dims, strides, alignment, virtual [, by value][, ragged] */
        assert_int_equal(r->na, 6 + (bv != NULL) + (rg != NULL));
    }
    /* the op list, in order */
    const rec_attr *ops = need(gr, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                               g->nop);
    const rec_attr *h = need(gr, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1);
    cudnnHandle_t hv;
    memcpy(&hv, h->val, sizeof hv);
    assert_ptr_equal(hv, fake_handle);
    for (int i = 0; i < g->nop; i++) {
        const kn_sg_op *o = &g->op[i];
        rec_desc *op = desc_of(ops, i);
        assert_true(op->finalized > 0 && op->finalized < gr->finalized);
        /* the tensors it names, by uid */
        cudnnBackendAttributeName_t xa, ya;
        if (o->kind == KN_SG_POINTWISE) {
            assert_int_equal(op->type, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
            rec_desc *pw = desc_of(need(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR,
                                        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1), 0);
            static const cudnnPointwiseMode_t modes[] = {
                CUDNN_POINTWISE_MUL, CUDNN_POINTWISE_ADD, CUDNN_POINTWISE_SUB,
                CUDNN_POINTWISE_DIV, CUDNN_POINTWISE_EXP, CUDNN_POINTWISE_LOG,
                CUDNN_POINTWISE_GEN_INDEX, CUDNN_POINTWISE_CMP_GE, CUDNN_POINTWISE_CMP_LT,
                CUDNN_POINTWISE_LOGICAL_AND, CUDNN_POINTWISE_BINARY_SELECT};
            assert_int_equal(
                enum_of(need(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1)),
                modes[o->mode]);
            assert_int_equal(
                enum_of(need(pw, CUDNN_ATTR_POINTWISE_NAN_PROPAGATION, CUDNN_TYPE_NAN_PROPOGATION,
                             1)),
                CUDNN_PROPAGATE_NAN);
            need(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1);
            const rec_attr *ax = attr(pw, CUDNN_ATTR_POINTWISE_AXIS);
            assert_int_equal(ax != NULL, o->axis >= 0);
            if (ax)
                assert_int_equal(i64_of(ax, 0), o->axis);
            float a1, a2;
            memcpy(&a1, need(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1)->val,
                   4);
            memcpy(&a2, need(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1)->val,
                   4);
            assert_true(a1 == 1.0f && a2 == 1.0f);
            assert_int_equal(attr(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC) != NULL, o->b >= 0);
            assert_int_equal(attr(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC) != NULL, o->t >= 0);
            xa = CUDNN_ATTR_OPERATION_POINTWISE_XDESC;
            ya = CUDNN_ATTR_OPERATION_POINTWISE_YDESC;
        } else if (o->kind == KN_SG_REDUCTION) {
            assert_int_equal(op->type, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
            rec_desc *rd = desc_of(need(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC,
                                        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1), 0);
            assert_int_equal(enum_of(need(rd, CUDNN_ATTR_REDUCTION_OPERATOR,
                                          CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1)),
                             o->mode == KN_SG_RED_MAX ? CUDNN_REDUCE_TENSOR_MAX
                                                      : CUDNN_REDUCE_TENSOR_ADD);
            assert_int_equal(
                enum_of(need(rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1)),
                CUDNN_DATA_FLOAT);
            xa = CUDNN_ATTR_OPERATION_REDUCTION_XDESC;
            ya = CUDNN_ATTR_OPERATION_REDUCTION_YDESC;
        } else {
            assert_int_equal(op->type, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
            rec_desc *m = desc_of(need(op, CUDNN_ATTR_OPERATION_MATMUL_DESC,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 1), 0);
            assert_int_equal(
                enum_of(need(m, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1)),
                CUDNN_DATA_FLOAT);
            rec_desc *bm = desc_of(need(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC,
                                        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1), 0);
            assert_ptr_equal(bm, tensor_by_uid(g->t[o->b].uid));
            const cudnnBackendAttributeName_t ov[3] = {
                CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC,
                CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC,
                CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC};
            const int want[3] = {o->m_override, o->n_override, o->k_override};
            for (int j = 0; j < 3; j++) {
                const rec_attr *a = attr(op, ov[j]);
                assert_int_equal(a != NULL, want[j] >= 0);
                if (a)
                    assert_ptr_equal(desc_of(a, 0), tensor_by_uid(g->t[want[j]].uid));
            }
            xa = CUDNN_ATTR_OPERATION_MATMUL_ADESC;
            ya = CUDNN_ATTR_OPERATION_MATMUL_CDESC;
        }
        assert_ptr_equal(desc_of(need(op, xa, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1), 0),
                         tensor_by_uid(g->t[o->x].uid));
        assert_ptr_equal(desc_of(need(op, ya, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1), 0),
                         tensor_by_uid(g->t[o->y].uid));
    }
}

/* Every descriptor made is finalized exactly once (engine configs by the
 * heuristics: the ones it did not fill stay empty). */
static void check_all_final(void)
{
    int filled = 0;
    for (int i = 0; i < ndesc; i++)
        filled += descs[i].type == CUDNN_BACKEND_ENGINECFG_DESCRIPTOR && descs[i].finalized;
    assert_int_equal(filled, heur_results);
    for (int i = 0; i < ndesc; i++)
        if (!descs[i].finalized && !descs[i].destroyed &&
            descs[i].type != CUDNN_BACKEND_ENGINECFG_DESCRIPTOR)
            fail_msg("descriptor %d (type %d) never finalized", descs[i].id, (int)descs[i].type);
}

static void emit_and_plan(const kn_sg_params *p, kn_sdpa_graph *g, kn_sdpa_built *b)
{
    char why[256];
    assert_int_equal(kn_sdpa_graph_build(p, g, why, sizeof why), 0);
    assert_int_equal(kn_sdpa_emit_graph(&rec, fake_handle, g, b), 0);
    assert_int_equal(kn_sdpa_emit_plan(&rec, fake_handle, b, CUDNN_HEUR_MODE_A, 1 << 20), 0);
}

static void test_canonical(void **state)
{
    (void)state;
    kn_sg_params p = base();
    kn_sdpa_graph g;
    static kn_sdpa_built b;
    emit_and_plan(&p, &g, &b);
    check_emitted(&g, &b);
    check_all_final();
    /* P (the DIV output, virtual uid) is bf16; Stats made by ADD */
    int div = g.nop - 2;
    assert_int_equal(g.op[div].mode, KN_SG_PW_DIV);
    assert_int_equal(enum_of(need(tensor_by_uid(g.t[g.op[div].y].uid),
                                  CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1)),
                     CUDNN_DATA_BFLOAT16);
    /* heuristics after the graph, mode A; the plan (first config) after it */
    rec_desc *heur = NULL, *plan = D(b.plan);
    for (int i = 0; i < ndesc; i++)
        if (descs[i].type == CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR)
            heur = &descs[i];
    assert_non_null(heur);
    assert_int_equal(enum_of(need(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1)),
                     CUDNN_HEUR_MODE_A);
    assert_ptr_equal(desc_of(need(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, 1), 0),
                     the_graph());
    assert_true(heur->finalized > the_graph()->finalized);
    assert_true(plan->finalized > heur->finalized);
    assert_int_equal(b.cfg, 0);
    assert_int_equal(b.ncfg, 3);
    assert_int_equal(b.workspace, 1024);

    /* the execution: a variant pack of the real tensors */
    char q, k, v, o, ws, why[200] = "";
    kn_sdpa_ptrs ptr = {&q, &k, &v, &o, NULL, NULL, NULL, NULL, NULL};
    assert_int_equal(kn_sdpa_execute(&rec, fake_handle, &g, &b, &ptr, &ws, why, sizeof why), 0);
    assert_int_equal(nexec, 1);
    assert_ptr_equal(exec_plan, b.plan);
    rec_desc *vp = R(exec_vp);
    const rec_attr *uids = need(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 6);
    const rec_attr *ptrs = need(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 6);
    for (int i = 0; i < 6; i++) {
        void *pv;
        memcpy(&pv, ptrs->val + sizeof pv * (size_t)i, sizeof pv);
        int64_t uid = i64_of(uids, i);
        if (uid == KN_SG_UID_Q) assert_ptr_equal(pv, &q);
        else if (uid == KN_SG_UID_K) assert_ptr_equal(pv, &k);
        else if (uid == KN_SG_UID_V) assert_ptr_equal(pv, &v);
        else if (uid == KN_SG_UID_O) assert_ptr_equal(pv, &o);
        else if (uid == KN_SG_UID_SCALE) assert_true(*(float *)pv == g.scale);
        else if (uid == KN_SG_UID_FILL) assert_true(isinf(*(float *)pv));
        else fail_msg("uid %lld in the variant pack", (long long)uid);
    }
    void *wsp;
    memcpy(&wsp, need(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1)->val,
           sizeof wsp);
    assert_ptr_equal(wsp, &ws);
    /* no stats pointer for a graph with Stats is refused, not run */
    p.stats = 1;
    kn_sdpa_graph g2;
    assert_int_equal(kn_sdpa_graph_build(&p, &g2, why, sizeof why), 0);
    assert_int_equal(kn_sdpa_execute(&rec, fake_handle, &g2, &b, &ptr, &ws, why, sizeof why),
                     EIN_EINVAL);
    assert_non_null(strstr(why, "Stats"));
    kn_sdpa_built_free(&rec, &b);
    assert_int_equal(ndestroyed, ndesc);
}

static void test_variants(void **state)
{
    (void)state;
    /* not causal f16 d64; packed with stats; V0; V5; GQA 1 kv head */
    for (int v = 0; v < 5; v++) {
        setup(NULL);
        kn_sg_params p = base();
        if (v == 0)
            p.causal = 0, p.io = KN_SG_F16, p.d = 64;
        if (v == 1)
            p.nseq = 3, p.s = 2048, p.stats = 1;
        if (v == 2)
            p.no_stats_ops = 1, p.p_f32 = 1, p.cudnn_version = 90800;
        if (v == 3)
            p.gen_index_f32 = 1;
        if (v == 4)
            p.hkv = 1;
        kn_sdpa_graph g;
        static kn_sdpa_built b;
        emit_and_plan(&p, &g, &b);
        check_emitted(&g, &b);
        check_all_final();
        if (v == 1) { /* the packed execution: lengths, offsets and stats by uid */
            char x, seq, off, offs, why[200];
            kn_sdpa_ptrs ptr = {&x, &x, &x, &x, &x, &seq, &seq, &off, &offs};
            assert_int_equal(kn_sdpa_execute(&rec, fake_handle, &g, &b, &ptr, NULL, why,
                                             sizeof why), 0);
            const rec_attr *uids = attr(R(exec_vp), CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS);
            assert_int_equal(uids->n, 15);
        }
        kn_sdpa_built_free(&rec, &b);
        assert_int_equal(ndestroyed, ndesc);
    }
}

static void test_failures(void **state)
{
    (void)state;
    kn_sg_params p = base();
    kn_sdpa_graph g;
    static kn_sdpa_built b;
    char why[200];
    assert_int_equal(kn_sdpa_graph_build(&p, &g, why, sizeof why), 0);
    /* the operation graph rejected */
    fail_final_type = CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR;
    assert_int_equal(kn_sdpa_emit_graph(&rec, fake_handle, &g, &b), EIN_EUNSUPPORTED);
    assert_non_null(strstr(b.why, "operation graph finalize: CUDNN_STATUS_NOT_SUPPORTED: "
                                  "stand-in: no engine"));
    assert_int_equal(kn_sdpa_emit_plan(&rec, fake_handle, &b, CUDNN_HEUR_MODE_A, 1 << 20),
                     EIN_EUNSUPPORTED);
    kn_sdpa_built_free(&rec, &b);
    assert_int_equal(ndestroyed, ndesc);
    /* no engine */
    setup(NULL);
    heur_results = 0;
    assert_int_equal(kn_sdpa_emit_graph(&rec, fake_handle, &g, &b), 0);
    assert_int_equal(kn_sdpa_emit_plan(&rec, fake_handle, &b, CUDNN_HEUR_MODE_A, 1 << 20),
                     EIN_EUNSUPPORTED);
    assert_non_null(strstr(b.why, "found no engine"));
    kn_sdpa_built_free(&rec, &b);
    assert_int_equal(ndestroyed, ndesc);
    /* every plan's workspace too large */
    setup(NULL);
    plan_ws = 1 << 30;
    assert_int_equal(kn_sdpa_emit_graph(&rec, fake_handle, &g, &b), 0);
    assert_int_equal(kn_sdpa_emit_plan(&rec, fake_handle, &b, CUDNN_HEUR_MODE_A, 1 << 20),
                     EIN_EUNSUPPORTED);
    assert_non_null(strstr(b.why, "none of 3 cuDNN engine configurations"));
    assert_null(b.plan);
    kn_sdpa_built_free(&rec, &b);
    assert_int_equal(ndestroyed, ndesc);
    /* the probe's engine list: 5 engines, 1 and 3 finalize */
    setup(NULL);
    assert_int_equal(kn_sdpa_emit_graph(&rec, fake_handle, &g, &b), 0);
    int ok[8];
    int64_t count;
    assert_int_equal(kn_sdpa_engines(&rec, &b, ok, 8, &count), 2);
    assert_int_equal(count, 5);
    assert_int_equal(ok[0], 1);
    assert_int_equal(ok[1], 3);
    kn_sdpa_built_free(&rec, &b);
    assert_int_equal(ndestroyed, ndesc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_canonical, setup),
        cmocka_unit_test_setup(test_variants, setup),
        cmocka_unit_test_setup(test_failures, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
