/* kernels/cuda/kn_sdpa_graph.c — the SDPA graph as data (kn_sdpa_graph.h).
 * Plain C: no CUDA, no cuDNN. */
#include "kernels/cuda/kn_sdpa_graph.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/base/ein_error.h"

const char *kn_sg_dtype_name(kn_sg_dtype t)
{
    static const char *const n[] = {"f32", "bf16", "f16", "int32", "bool"};
    return (unsigned)t < sizeof n / sizeof *n ? n[t] : "?";
}

const char *kn_sg_pwmode_name(kn_sg_pwmode m)
{
    static const char *const n[] = {"MUL", "ADD", "SUB", "DIV", "EXP", "LOG", "GEN_INDEX",
                                    "CMP_GE", "CMP_LT", "LOGICAL_AND", "BINARY_SELECT"};
    return (unsigned)m < sizeof n / sizeof *n ? n[m] : "?";
}

typedef struct sg_builder {
    kn_sdpa_graph *g;
    int64_t next_virtual;
} sg_builder;

static int sg_tensor(sg_builder *b, int64_t uid, const char *name, kn_sg_dtype dt,
                     const int64_t dims[4], const int64_t strides[4], int is_virtual,
                     int by_value)
{
    kn_sdpa_graph *g = b->g;
    if (g->nt >= KN_SG_MAX_TENSORS)
        return KN_SG_NONE; /* sized so that it cannot happen; build checks */
    kn_sg_tensor *t = &g->t[g->nt];
    memset(t, 0, sizeof *t);
    t->uid = is_virtual ? b->next_virtual++ : uid;
    t->name = name;
    t->dtype = dt;
    memcpy(t->dims, dims, sizeof t->dims);
    memcpy(t->strides, strides, sizeof t->strides);
    t->is_virtual = is_virtual;
    t->by_value = by_value;
    t->ragged = KN_SG_NONE;
    return g->nt++;
}

static kn_sg_op *sg_op(sg_builder *b, kn_sg_opkind kind, int mode, kn_sg_dtype prec, int x,
                       int bb, int t, int y)
{
    kn_sdpa_graph *g = b->g;
    if (g->nop >= KN_SG_MAX_OPS || x < 0 || y < 0)
        return NULL;
    kn_sg_op *o = &g->op[g->nop++];
    memset(o, 0, sizeof *o);
    o->kind = kind;
    o->mode = mode;
    o->prec = prec;
    o->axis = -1;
    o->x = x, o->b = bb, o->t = t, o->y = y;
    o->m_override = o->n_override = o->k_override = KN_SG_NONE;
    if (kind == KN_SG_POINTWISE) {
        o->alpha1 = o->alpha2 = 1.0f;
        o->nan_propagate = 1;
    }
    return o;
}

/* A pointwise op into a new virtual tensor like `like` in dtype dt. */
static int sg_pw(sg_builder *b, kn_sg_pwmode mode, kn_sg_dtype prec, int x, int bb, int t,
                 const char *name, kn_sg_dtype dt, int like, int64_t axis)
{
    const kn_sg_tensor *l = &b->g->t[like];
    int y = sg_tensor(b, 0, name, dt, l->dims, l->strides, 1, 0);
    kn_sg_op *o = y < 0 ? NULL : sg_op(b, KN_SG_POINTWISE, (int)mode, prec, x, bb, t, y);
    if (!o)
        return KN_SG_NONE;
    o->axis = axis;
    return y;
}

/* The sizes and dtypes the graph supports: 0, or a negative code with `why`. */
static int sg_check(const kn_sg_params *p, char *why, size_t cap)
{
    if (p->hq < 1 || p->hkv < 1 || p->t < 1 || p->s < 1 || p->nseq < 0 || p->d < 1)
        return snprintf(why, cap, "attention graph: sizes must be positive"), EIN_EINVAL;
    if (p->io != KN_SG_BF16 && p->io != KN_SG_F16)
        return snprintf(why, cap, "dtype %s (cuDNN here: bf16, f16)", kn_sg_dtype_name(p->io)),
               EIN_EUNSUPPORTED;
    if (p->d != 64 && p->d != 128)
        return snprintf(why, cap, "head dim %lld (cuDNN here: 64, 128)", (long long)p->d),
               EIN_EUNSUPPORTED;
    if (p->hq % p->hkv)
        return snprintf(why, cap, "%lld query heads over %lld kv heads", (long long)p->hq,
                        (long long)p->hkv),
               EIN_EUNSUPPORTED;
    if (p->s > p->t || (!p->nseq && p->s != p->t))
        return snprintf(why, cap, "attention graph: sequence length %lld in a block of %lld "
                        "tokens", (long long)p->s, (long long)p->t),
               EIN_EINVAL;
    /* Every dim and stride, and the offsets, in int32 as cuDNN keeps some */
    if (p->hq * p->t * p->d > INT32_MAX || p->nseq > 65535)
        return snprintf(why, cap, "a block of %lld x %lld x %lld elements (cuDNN here: fewer "
                        "than 2^31)", (long long)p->hq, (long long)p->t, (long long)p->d),
               EIN_EUNSUPPORTED;

    return 0;
}

/* The masks on the scores `cur`: padding of a packed block
 * ((row < seq_q && col < seq_kv) ? S : pad fill), then causal
 * ((row >= col) ? S : fill). The masked scores, or a negative id. */
static int sg_masks(sg_builder *b, const kn_sg_params *p, int cur)
{
    const kn_sg_dtype f = KN_SG_F32, i32 = KN_SG_I32, bo = KN_SG_BOOL;
    kn_sg_dtype gi = p->gen_index_f32 ? f : i32;
    int packed = p->nseq > 0;
    if (packed && cur >= 0) { /* padding: (row < seq_q && col < seq_kv) ? S : pad fill */
        int r = sg_pw(b, KN_SG_PW_GEN_INDEX, gi, cur, KN_SG_NONE, KN_SG_NONE, "pad row", i32,
                      cur, 2);
        int c = sg_pw(b, KN_SG_PW_GEN_INDEX, gi, cur, KN_SG_NONE, KN_SG_NONE, "pad col", i32,
                      cur, 3);
        int rl = r < 0 ? r : sg_pw(b, KN_SG_PW_CMP_LT, bo, r, b->g->seq_q, KN_SG_NONE,
                                   "row < seq_q", bo, cur, -1);
        int cl = c < 0 ? c : sg_pw(b, KN_SG_PW_CMP_LT, bo, c, b->g->seq_kv, KN_SG_NONE,
                                   "col < seq_kv", bo, cur, -1);
        int m = rl < 0 || cl < 0 ? KN_SG_NONE
                                 : sg_pw(b, KN_SG_PW_LOGICAL_AND, bo, rl, cl, KN_SG_NONE,
                                         "padding mask", bo, cur, -1);
        cur = m < 0 ? m : sg_pw(b, KN_SG_PW_BINARY_SELECT, f, cur, b->g->pad_fill_t, m, "padded",
                                f, cur, -1);
    }
    if (p->causal && cur >= 0) { /* (row >= col) ? S : fill */
        int r = sg_pw(b, KN_SG_PW_GEN_INDEX, gi, cur, KN_SG_NONE, KN_SG_NONE, "row", i32, cur,
                      2);
        int c = sg_pw(b, KN_SG_PW_GEN_INDEX, gi, cur, KN_SG_NONE, KN_SG_NONE, "col", i32, cur,
                      3);
        int m = r < 0 || c < 0 ? KN_SG_NONE
                               : sg_pw(b, KN_SG_PW_CMP_GE, bo, r, c, KN_SG_NONE, "row >= col",
                                       bo, cur, -1);
        cur = m < 0 ? m : sg_pw(b, KN_SG_PW_BINARY_SELECT, f, cur, b->g->fill_t, m, "masked", f,
                                cur, -1);
    }
    return cur;
}

int kn_sdpa_graph_build(const kn_sg_params *p, kn_sdpa_graph *g, char *why, size_t cap)
{
    memset(g, 0, sizeof *g);
    g->p = *p;
    g->q = g->k = g->v = g->o = g->stats = g->scale_t = g->fill_t = g->pad_fill_t = KN_SG_NONE;
    g->seq_q = g->seq_kv = g->off_q = g->off_k = g->off_v = g->off_o = g->off_stats = KN_SG_NONE;
    int rc = sg_check(p, why, cap);
    if (rc < 0)
        return rc;

    sg_builder b = {g, KN_SG_UID_VIRTUAL};
    const kn_sg_dtype f = KN_SG_F32, i32 = KN_SG_I32, io = p->io;
    int packed = p->nseq > 0;
    int64_t n = packed ? p->nseq : 1, hq = p->hq, hkv = p->hkv, S = p->s, T = p->t, d = p->d;
    /* The batch stride of a ragged tensor is never used (its offsets say
     * where each sequence starts): INT32_MAX, as PyTorch sets it. */
    int64_t bq = packed ? INT32_MAX : hq * T * d, bk = packed ? INT32_MAX : hkv * T * d;
    const int64_t qd[4] = {n, hq, S, d}, qs[4] = {bq, T * d, d, 1};
    const int64_t ktd[4] = {n, hkv, d, S}, kts[4] = {bk, T * d, 1, d};
    const int64_t vd[4] = {n, hkv, S, d}, vs[4] = {bk, T * d, d, 1};
    const int64_t sd[4] = {n, hq, S, S}, ss[4] = {hq * S * S, S * S, S, 1};
    const int64_t rd[4] = {n, hq, S, 1}, rs[4] = {hq * S, S, 1, 1};
    /* Stats as a real output: f32 [Hq, T] rows of the block */
    const int64_t std_[4] = {n, hq, S, 1}, sts[4] = {packed ? INT32_MAX : hq * T, T, 1, 1};
    const int64_t one[4] = {1, 1, 1, 1};
    const int64_t nd[4] = {n, 1, 1, 1}, od[4] = {n + 1, 1, 1, 1};

    g->scale = (float)(1.0 / sqrt((double)d));
    g->fill = p->cudnn_version >= 91000 ? -INFINITY : -FLT_MAX;
    g->pad_fill = -FLT_MAX;
    /* Offsets before the tensors that name them (descriptors are made in
     * this order) */
    if (packed) {
        g->seq_q = sg_tensor(&b, KN_SG_UID_SEQ_Q, "SEQ_LEN_Q", i32, nd, one, 0, 0);
        g->seq_kv = sg_tensor(&b, KN_SG_UID_SEQ_KV, "SEQ_LEN_KV", i32, nd, one, 0, 0);
        g->off_q = sg_tensor(&b, KN_SG_UID_OFF_Q, "offsets Q", i32, od, one, 0, 0);
        g->off_k = sg_tensor(&b, KN_SG_UID_OFF_K, "offsets K", i32, od, one, 0, 0);
        g->off_v = sg_tensor(&b, KN_SG_UID_OFF_V, "offsets V", i32, od, one, 0, 0);
        g->off_o = sg_tensor(&b, KN_SG_UID_OFF_O, "offsets O", i32, od, one, 0, 0);
        if (p->stats && !p->no_stats_ops)
            g->off_stats = sg_tensor(&b, KN_SG_UID_OFF_STATS, "offsets Stats", i32, od, one, 0,
                                     0);
    }
    g->q = sg_tensor(&b, KN_SG_UID_Q, "Q", io, qd, qs, 0, 0);
    g->k = sg_tensor(&b, KN_SG_UID_K, "K^T", io, ktd, kts, 0, 0);
    g->v = sg_tensor(&b, KN_SG_UID_V, "V", io, vd, vs, 0, 0);
    g->o = sg_tensor(&b, KN_SG_UID_O, "O", io, qd, qs, 0, 0);
    g->scale_t = sg_tensor(&b, KN_SG_UID_SCALE, "scale", f, one, one, 0, 1);
    if (p->causal)
        g->fill_t = sg_tensor(&b, KN_SG_UID_FILL, "fill", f, one, one, 0, 1);
    if (packed) {
        g->pad_fill_t = sg_tensor(&b, KN_SG_UID_PAD_FILL, "pad fill", f, one, one, 0, 1);
        if (g->o >= 0) {
            g->t[g->q].ragged = g->off_q;
            g->t[g->k].ragged = g->off_k;
            g->t[g->v].ragged = g->off_v;
            g->t[g->o].ragged = g->off_o;
        }
    }
    /* 0: S = Q K^T ; 1: S1 = S * scale */
    int S0 = sg_tensor(&b, 0, "S", f, sd, ss, 1, 0);
    kn_sg_op *mm1 = S0 < 0 ? NULL : sg_op(&b, KN_SG_MATMUL, 0, f, g->q, g->k, KN_SG_NONE, S0);
    if (mm1 && packed)
        mm1->m_override = g->seq_q, mm1->n_override = g->seq_kv;
    int cur = sg_pw(&b, KN_SG_PW_MUL, f, S0, g->scale_t, KN_SG_NONE, "S*scale", f, S0, -1);
    cur = sg_masks(&b, p, cur);
    /* softmax with its statistics */
    int M = sg_tensor(&b, 0, "M", f, rd, rs, 1, 0);
    if (cur >= 0 && M >= 0)
        sg_op(&b, KN_SG_REDUCTION, KN_SG_RED_MAX, f, cur, KN_SG_NONE, KN_SG_NONE, M);
    int sub = cur < 0 ? cur : sg_pw(&b, KN_SG_PW_SUB, f, cur, M, KN_SG_NONE, "S-M", f, cur, -1);
    int E = sub < 0 ? sub : sg_pw(&b, KN_SG_PW_EXP, f, sub, KN_SG_NONE, KN_SG_NONE, "E", f,
                                  sub, -1);
    int Z = sg_tensor(&b, 0, "Z", f, rd, rs, 1, 0);
    if (E >= 0 && Z >= 0)
        sg_op(&b, KN_SG_REDUCTION, KN_SG_RED_ADD, f, E, KN_SG_NONE, KN_SG_NONE, Z);
    if (!p->no_stats_ops && Z >= 0) {
        int L = sg_pw(&b, KN_SG_PW_LOG, f, Z, KN_SG_NONE, KN_SG_NONE, "log Z", f, Z, -1);
        if (p->stats) {
            g->stats = sg_tensor(&b, KN_SG_UID_STATS, "Stats", f, std_, sts, 0, 0);
            if (packed && g->stats >= 0)
                g->t[g->stats].ragged = g->off_stats;
        } else {
            g->stats = sg_tensor(&b, 0, "Stats", f, rd, rs, 1, 0);
        }
        if (L >= 0 && g->stats >= 0)
            sg_op(&b, KN_SG_POINTWISE, KN_SG_PW_ADD, f, M, L, KN_SG_NONE, g->stats);
        if (!p->stats)
            g->stats = KN_SG_NONE; /* virtual: not one of the caller's tensors */
    }
    int P = E < 0 || Z < 0 ? KN_SG_NONE
                           : sg_pw(&b, KN_SG_PW_DIV, f, E, Z, KN_SG_NONE, "P",
                                   p->p_f32 ? f : io, E, -1);
    kn_sg_op *mm2 = P < 0 ? NULL : sg_op(&b, KN_SG_MATMUL, 0, f, P, g->v, KN_SG_NONE, g->o);
    if (mm2 && packed)
        mm2->m_override = g->seq_q, mm2->k_override = g->seq_kv;
    if (!mm2 || (p->stats && p->no_stats_ops))
        return snprintf(why, cap, "attention graph: %s",
                        mm2 ? "stats need the LOG and ADD ops" : "too many tensors or ops"),
               EIN_EINVAL;
    return 0;
}
