/* tests/kernels/test_kn_sdpa_graph.c — the SDPA graph description
 * (kernels/cuda/kn_sdpa_graph.h) against the canonical op list of
 * ../shared/notes/gpu-attention.md §2, written out here by hand: op order
 * (14 causal, 10 without the mask, 6 padding ops more when packed), the
 * statistics ops, P in the I/O dtype, alpha 1 and NaN propagation, the fill
 * by cuDNN version, which tensors are real, the K^T view, ragged offsets,
 * GQA and the shapes it declines. No CUDA or cuDNN needed. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/base/ein_error.h"
#include "kernels/cuda/kn_sdpa_graph.h"

static kn_sg_params base(void)
{
    kn_sg_params p;
    memset(&p, 0, sizeof p);
    p.io = KN_SG_BF16;
    p.hq = 32, p.hkv = 8, p.d = 128, p.t = 8192, p.s = 8192;
    p.causal = 1;
    p.cudnn_version = 91900;
    return p;
}

static void build(const kn_sg_params *p, kn_sdpa_graph *g)
{
    char why[256] = "";
    int rc = kn_sdpa_graph_build(p, g, why, sizeof why);
    if (rc != 0)
        fail_msg("build: %d %s", rc, why);
}

/* An op as written in the list: kind, mode (pointwise / reduction). */
typedef struct want_op {
    kn_sg_opkind kind;
    int mode;
    int64_t axis;
} want_op;

#define MM {KN_SG_MATMUL, 0, -1}
#define PW(m) {KN_SG_POINTWISE, KN_SG_PW_##m, -1}
#define GI(a) {KN_SG_POINTWISE, KN_SG_PW_GEN_INDEX, a}
#define RED(m) {KN_SG_REDUCTION, KN_SG_RED_##m, -1}

static const want_op causal_ops[] = {
    MM, PW(MUL), GI(2), GI(3), PW(CMP_GE), PW(BINARY_SELECT), RED(MAX), PW(SUB), PW(EXP),
    RED(ADD), PW(LOG), PW(ADD), PW(DIV), MM};
static const want_op plain_ops[] = {
    MM, PW(MUL), RED(MAX), PW(SUB), PW(EXP), RED(ADD), PW(LOG), PW(ADD), PW(DIV), MM};
static const want_op packed_causal_ops[] = {
    MM, PW(MUL), GI(2), GI(3), PW(CMP_LT), PW(CMP_LT), PW(LOGICAL_AND), PW(BINARY_SELECT),
    GI(2), GI(3), PW(CMP_GE), PW(BINARY_SELECT), RED(MAX), PW(SUB), PW(EXP), RED(ADD), PW(LOG),
    PW(ADD), PW(DIV), MM};

static void check_ops(const kn_sdpa_graph *g, const want_op *w, int n)
{
    assert_int_equal(g->nop, n);
    for (int i = 0; i < n; i++) {
        const kn_sg_op *o = &g->op[i];
        if (o->kind != w[i].kind || (o->kind != KN_SG_MATMUL && o->mode != w[i].mode) ||
            o->axis != w[i].axis)
            fail_msg("op %d: kind %d mode %d axis %lld, expected kind %d mode %d axis %lld", i,
                     o->kind, o->mode, (long long)o->axis, w[i].kind, w[i].mode,
                     (long long)w[i].axis);
    }
}

static int producer(const kn_sdpa_graph *g, int tensor)
{
    int who = -1, n = 0;
    for (int i = 0; i < g->nop; i++)
        if (g->op[i].y == tensor)
            who = i, n++;
    assert_int_equal(n, 1);
    return who;
}

/* What holds for every graph: uids unique, real uids < 101, virtual >= 101,
 * every op's inputs produced earlier or real, pointwise alpha 1 and NaN
 * propagation, f32 compute where not a mask, the K^T view, reductions to
 * [., ., S, 1], P in the I/O dtype feeding the second matmul, the LSE. */
static void check_common(const kn_sdpa_graph *g)
{
    const kn_sg_params *p = &g->p;
    for (int i = 0; i < g->nt; i++) {
        for (int j = 0; j < i; j++)
            if (g->t[i].uid == g->t[j].uid)
                fail_msg("tensors %d and %d share uid %lld", j, i, (long long)g->t[i].uid);
        assert_int_equal(g->t[i].is_virtual, g->t[i].uid >= KN_SG_UID_VIRTUAL);
        if (g->t[i].by_value) {
            assert_int_equal(g->t[i].dtype, KN_SG_F32);
            assert_false(g->t[i].is_virtual);
        }
    }
    int64_t n = p->nseq ? p->nseq : 1;
    /* Q, K^T, V, O: head-major blocks, rows T apart */
    const kn_sg_tensor *q = &g->t[g->q], *k = &g->t[g->k], *v = &g->t[g->v], *o = &g->t[g->o];
    int64_t qd[4] = {n, p->hq, p->s, p->d}, kd[4] = {n, p->hkv, p->d, p->s};
    int64_t vd[4] = {n, p->hkv, p->s, p->d};
    assert_memory_equal(q->dims, qd, sizeof qd);
    assert_memory_equal(o->dims, qd, sizeof qd);
    assert_memory_equal(k->dims, kd, sizeof kd);
    assert_memory_equal(v->dims, vd, sizeof vd);
    assert_int_equal(q->strides[1], p->t * p->d);
    assert_int_equal(q->strides[2], p->d);
    assert_int_equal(q->strides[3], 1);
    /* K^T is K's layout (V's) with the last two strides swapped */
    assert_int_equal(k->strides[1], v->strides[1]);
    assert_int_equal(k->strides[2], v->strides[3]);
    assert_int_equal(k->strides[3], v->strides[2]);
    assert_int_equal(q->dtype, p->io);
    assert_int_equal(k->dtype, p->io);
    assert_int_equal(o->dtype, p->io);
    assert_int_equal(g->t[g->scale_t].by_value, 1);
    assert_true(fabsf(g->scale - 1.0f / sqrtf((float)p->d)) < 1e-6f);

    int nmm = 0, div = -1;
    for (int i = 0; i < g->nop; i++) {
        const kn_sg_op *op = &g->op[i];
        if (op->kind == KN_SG_POINTWISE) {
            if (!(op->alpha1 == 1.0f) || !(op->alpha2 == 1.0f) || op->nan_propagate != 1)
                fail_msg("op %d: alpha %g %g nan %d", i, op->alpha1, op->alpha2,
                         op->nan_propagate);
            if (op->mode == KN_SG_PW_DIV)
                div = i;
        }
        if (op->kind == KN_SG_REDUCTION) {
            const kn_sg_tensor *y = &g->t[op->y];
            assert_int_equal(y->dims[2], p->s);
            assert_int_equal(y->dims[3], 1);
            assert_int_equal(y->dtype, KN_SG_F32);
            assert_int_equal(op->prec, KN_SG_F32);
        }
        if (op->kind == KN_SG_MATMUL) {
            nmm++;
            assert_int_equal(op->prec, KN_SG_F32);
        }
        int in[3] = {op->x, op->b, op->t};
        for (int j = 0; j < 3; j++)
            if (in[j] >= 0 && g->t[in[j]].is_virtual && producer(g, in[j]) >= i)
                fail_msg("op %d reads tensor %s before it is made", i, g->t[in[j]].name);
    }
    assert_int_equal(nmm, 2);
    assert_int_equal(g->op[0].x, g->q);
    assert_int_equal(g->op[0].b, g->k);
    /* P: the DIV output is the second matmul's A, in the I/O dtype */
    const kn_sg_op *mm2 = &g->op[g->nop - 1];
    assert_int_equal(mm2->kind, KN_SG_MATMUL);
    assert_true(div >= 0);
    assert_int_equal(mm2->x, g->op[div].y);
    assert_int_equal(mm2->b, g->v);
    assert_int_equal(mm2->y, g->o);
    assert_int_equal(g->t[g->op[div].y].dtype, p->p_f32 ? KN_SG_F32 : p->io);
    /* DIV = E / Z with E = exp(S - M) and Z = sum E */
    const kn_sg_op *dv = &g->op[div];
    const kn_sg_op *ex = &g->op[producer(g, dv->x)], *z = &g->op[producer(g, dv->b)];
    assert_int_equal(ex->mode, KN_SG_PW_EXP);
    assert_int_equal(z->kind, KN_SG_REDUCTION);
    assert_int_equal(z->mode, KN_SG_RED_ADD);
    assert_int_equal(z->x, dv->x);
}

/* Exactly one op makes the statistics, ADD(M, LOG(Z)); returns its output. */
static int check_stats_ops(const kn_sdpa_graph *g)
{
    int add = -1, nlog = 0;
    for (int i = 0; i < g->nop; i++) {
        const kn_sg_op *o = &g->op[i];
        if (o->kind == KN_SG_POINTWISE && o->mode == KN_SG_PW_LOG)
            nlog++;
        if (o->kind == KN_SG_POINTWISE && o->mode == KN_SG_PW_ADD) {
            assert_int_equal(add, -1);
            add = i;
        }
    }
    assert_int_equal(nlog, 1);
    assert_true(add >= 0);
    const kn_sg_op *a = &g->op[add];
    const kn_sg_op *m = &g->op[producer(g, a->x)], *l = &g->op[producer(g, a->b)];
    assert_int_equal(m->kind, KN_SG_REDUCTION);
    assert_int_equal(m->mode, KN_SG_RED_MAX);
    assert_int_equal(l->mode, KN_SG_PW_LOG);
    const kn_sg_op *z = &g->op[producer(g, l->x)];
    assert_int_equal(z->kind, KN_SG_REDUCTION);
    assert_int_equal(z->mode, KN_SG_RED_ADD);
    const kn_sg_tensor *st = &g->t[a->y];
    assert_int_equal(st->dtype, KN_SG_F32);
    assert_int_equal(st->dims[2], g->p.s);
    assert_int_equal(st->dims[3], 1);
    return a->y;
}

static int nreal(const kn_sdpa_graph *g)
{
    int n = 0;
    for (int i = 0; i < g->nt; i++)
        n += !g->t[i].is_virtual;
    return n;
}

static void test_causal_canonical(void **state)
{
    (void)state;
    kn_sg_params p = base();
    kn_sdpa_graph g;
    build(&p, &g);
    check_ops(&g, causal_ops, 14);
    check_common(&g);
    int st = check_stats_ops(&g);
    assert_true(g.t[st].is_virtual); /* inference: Stats virtual */
    assert_int_equal(g.stats, KN_SG_NONE);
    /* real: Q, K, V, O, scale, fill */
    assert_int_equal(nreal(&g), 6);
    assert_true(isinf(g.fill) && g.fill < 0);
    assert_int_equal(g.t[g.fill_t].uid, KN_SG_UID_FILL);
    /* the mask: GEN_INDEX in INT32 into INT32, CMP_GE in BOOLEAN, select
     * t ? S1 : fill */
    for (int i = 2; i <= 3; i++) {
        assert_int_equal(g.op[i].prec, KN_SG_I32);
        assert_int_equal(g.t[g.op[i].y].dtype, KN_SG_I32);
    }
    assert_int_equal(g.op[4].prec, KN_SG_BOOL);
    assert_int_equal(g.t[g.op[4].y].dtype, KN_SG_BOOL);
    assert_int_equal(g.op[4].x, g.op[2].y);
    assert_int_equal(g.op[4].b, g.op[3].y);
    assert_int_equal(g.op[5].x, g.op[1].y);
    assert_int_equal(g.op[5].b, g.fill_t);
    assert_int_equal(g.op[5].t, g.op[4].y);
    assert_int_equal(g.op[1].b, g.scale_t);
    /* one sequence: dense batch strides */
    assert_int_equal(g.t[g.q].strides[0], 32 * 8192 * 128);
    assert_int_equal(g.t[g.k].strides[0], 8 * 8192 * 128);
    assert_int_equal(g.t[g.q].ragged, KN_SG_NONE);
}

static void test_not_causal(void **state)
{
    (void)state;
    kn_sg_params p = base();
    p.causal = 0;
    p.io = KN_SG_F16;
    p.d = 64;
    kn_sdpa_graph g;
    build(&p, &g);
    check_ops(&g, plain_ops, 10);
    check_common(&g);
    check_stats_ops(&g);
    assert_int_equal(g.fill_t, KN_SG_NONE);
    assert_int_equal(nreal(&g), 5);
}

static void test_stats_output(void **state)
{
    (void)state;
    kn_sg_params p = base();
    p.stats = 1;
    p.t = p.s = 1000;
    kn_sdpa_graph g;
    build(&p, &g);
    check_ops(&g, causal_ops, 14);
    check_common(&g);
    int st = check_stats_ops(&g);
    assert_int_equal(st, g.stats);
    const kn_sg_tensor *t = &g.t[st];
    assert_false(t->is_virtual);
    assert_int_equal(t->uid, KN_SG_UID_STATS);
    /* f32 [Hq, T] rows: strides [Hq*T, T, 1, 1] */
    int64_t dims[4] = {1, 32, 1000, 1}, strides[4] = {32 * 1000, 1000, 1, 1};
    assert_memory_equal(t->dims, dims, sizeof dims);
    assert_memory_equal(t->strides, strides, sizeof strides);
    assert_int_equal(nreal(&g), 7);
}

static void test_cudnn_versions(void **state)
{
    (void)state;
    kn_sg_params p = base();
    kn_sdpa_graph g;
    p.cudnn_version = 90800;
    build(&p, &g);
    assert_true(g.fill == -FLT_MAX);
    p.cudnn_version = 90999;
    build(&p, &g);
    assert_true(g.fill == -FLT_MAX);
    p.cudnn_version = 91000;
    build(&p, &g);
    assert_true(isinf(g.fill) && g.fill < 0);
    check_ops(&g, causal_ops, 14);
}

static void test_gqa(void **state)
{
    (void)state;
    kn_sg_params p = base();
    kn_sdpa_graph g;
    for (int64_t hkv = 1; hkv <= 32; hkv *= 2) {
        p.hkv = hkv;
        build(&p, &g);
        check_common(&g);
        assert_int_equal(g.t[g.k].dims[1], hkv);
        assert_int_equal(g.t[g.v].dims[1], hkv);
        assert_int_equal(g.t[g.q].dims[1], 32);
        /* S, M, Z: per query head */
        assert_int_equal(g.t[g.op[0].y].dims[1], 32);
    }
}

static void test_packed(void **state)
{
    (void)state;
    kn_sg_params p = base();
    p.nseq = 4;
    p.s = 3072; /* the bucket of 3000, 2500, 1700, 992 */
    p.stats = 1;
    kn_sdpa_graph g;
    build(&p, &g);
    check_ops(&g, packed_causal_ops, 20);
    check_common(&g);
    int st = check_stats_ops(&g);
    /* padding before causal: (row < SEQ_LEN_Q) && (col < SEQ_LEN_KV) */
    assert_int_equal(g.op[4].b, g.seq_q);
    assert_int_equal(g.op[4].x, g.op[2].y);
    assert_int_equal(g.op[5].b, g.seq_kv);
    assert_int_equal(g.op[5].x, g.op[3].y);
    assert_int_equal(g.op[4].prec, KN_SG_BOOL);
    assert_int_equal(g.op[6].x, g.op[4].y);
    assert_int_equal(g.op[6].b, g.op[5].y);
    assert_int_equal(g.op[7].x, g.op[1].y);
    assert_int_equal(g.op[7].b, g.pad_fill_t);
    assert_int_equal(g.op[7].t, g.op[6].y);
    assert_int_equal(g.op[11].x, g.op[7].y); /* the causal select on the padded scores */
    assert_true(g.pad_fill == -FLT_MAX);
    /* SEQ_LEN int32 [b, 1, 1, 1]; offsets int32 [b + 1, 1, 1, 1] */
    int64_t nd[4] = {4, 1, 1, 1}, od[4] = {5, 1, 1, 1};
    const int seqs[2] = {g.seq_q, g.seq_kv};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(g.t[seqs[i]].dtype, KN_SG_I32);
        assert_memory_equal(g.t[seqs[i]].dims, nd, sizeof nd);
        assert_false(g.t[seqs[i]].is_virtual);
    }
    const int ragged[5][2] = {{g.q, g.off_q}, {g.k, g.off_k}, {g.v, g.off_v}, {g.o, g.off_o},
                              {st, g.off_stats}};
    for (int i = 0; i < 5; i++) {
        assert_true(ragged[i][1] >= 0);
        assert_int_equal(g.t[ragged[i][0]].ragged, ragged[i][1]);
        assert_int_equal(g.t[ragged[i][1]].dtype, KN_SG_I32);
        assert_memory_equal(g.t[ragged[i][1]].dims, od, sizeof od);
        assert_true(ragged[i][1] < ragged[i][0]); /* offsets made first */
    }
    /* the batch is the sequences, each up to S_max rows T apart */
    assert_int_equal(g.t[g.q].dims[0], 4);
    assert_int_equal(g.t[g.q].dims[2], 3072);
    assert_int_equal(g.t[g.q].strides[1], 8192 * 128);
    assert_int_equal(g.t[st].strides[1], 8192);
    /* M, N of the first matmul and M, K of the second from the lengths */
    assert_int_equal(g.op[0].m_override, g.seq_q);
    assert_int_equal(g.op[0].n_override, g.seq_kv);
    assert_int_equal(g.op[0].k_override, KN_SG_NONE);
    assert_int_equal(g.op[19].m_override, g.seq_q);
    assert_int_equal(g.op[19].k_override, g.seq_kv);
    assert_int_equal(g.op[19].n_override, KN_SG_NONE);
    /* real: Q K V O scale fill pad-fill seq x2 offsets x5 Stats */
    assert_int_equal(nreal(&g), 15);

    /* packed, not causal, no stats: padding only */
    p.causal = 0;
    p.stats = 0;
    build(&p, &g);
    assert_int_equal(g.nop, 16);
    check_common(&g);
    check_stats_ops(&g);
    assert_int_equal(g.off_stats, KN_SG_NONE);
}

static void test_probe_variants(void **state)
{
    (void)state;
    kn_sg_params p = base();
    kn_sdpa_graph g;
    p.no_stats_ops = 1;
    p.p_f32 = 1; /* V0: the graph before issue 33 */
    build(&p, &g);
    assert_int_equal(g.nop, 12);
    for (int i = 0; i < g.nop; i++)
        assert_false(g.op[i].kind == KN_SG_POINTWISE && g.op[i].mode == KN_SG_PW_LOG);
    check_common(&g);
    p.no_stats_ops = 0; /* V1 */
    build(&p, &g);
    check_ops(&g, causal_ops, 14);
    check_common(&g);
    p.p_f32 = 0;
    p.gen_index_f32 = 1; /* V5 */
    build(&p, &g);
    assert_int_equal(g.op[2].prec, KN_SG_F32);
    assert_int_equal(g.t[g.op[2].y].dtype, KN_SG_I32);
    /* stats without the ops that make them: refused */
    char why[200] = "";
    p.no_stats_ops = 1;
    p.stats = 1;
    assert_int_equal(kn_sdpa_graph_build(&p, &g, why, sizeof why), EIN_EINVAL);
    assert_non_null(strstr(why, "LOG and ADD"));
}

static void test_declines(void **state)
{
    (void)state;
    kn_sdpa_graph g;
    char why[200];
    kn_sg_params p = base();
    p.io = KN_SG_F32;
    assert_int_equal(kn_sdpa_graph_build(&p, &g, why, sizeof why), EIN_EUNSUPPORTED);
    assert_non_null(strstr(why, "dtype f32"));
    p = base();
    p.d = 96;
    assert_int_equal(kn_sdpa_graph_build(&p, &g, why, sizeof why), EIN_EUNSUPPORTED);
    assert_non_null(strstr(why, "head dim 96"));
    p = base();
    p.hkv = 6;
    assert_int_equal(kn_sdpa_graph_build(&p, &g, why, sizeof why), EIN_EUNSUPPORTED);
    p = base();
    p.s = 100; /* one sequence must span the block */
    assert_int_equal(kn_sdpa_graph_build(&p, &g, why, sizeof why), EIN_EINVAL);
    p = base();
    p.hq = 0;
    assert_int_equal(kn_sdpa_graph_build(&p, &g, why, sizeof why), EIN_EINVAL);
    p = base();
    p.hq = 64, p.hkv = 8, p.t = p.s = 1 << 18;
    assert_int_equal(kn_sdpa_graph_build(&p, &g, why, sizeof why), EIN_EUNSUPPORTED);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_causal_canonical), cmocka_unit_test(test_not_causal),
        cmocka_unit_test(test_stats_output),     cmocka_unit_test(test_cudnn_versions),
        cmocka_unit_test(test_gqa),              cmocka_unit_test(test_packed),
        cmocka_unit_test(test_probe_variants),   cmocka_unit_test(test_declines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
