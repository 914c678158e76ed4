/* common/ir/ein_kernel_rules.c — see ein_kernel_rules.h: every kernel kind's
 * block rules, one row each in `rules` at the end of this file. Messages
 * start with the kind's name ("rope: ..."); the caller adds the
 * instruction or device. */
#include "common/ir/ein_kernel_rules.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/ir/ein_einsum.h"

/* Fail with EIN_ESHAPE and a message of the kind's own words. */
static int rfail(ein_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int rfail(ein_error *err, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->code = EIN_ESHAPE;
    }
    return EIN_ESHAPE;
}

int ein_kernel_rules_softmax(int axis, const ein_box *x, const ein_box *out, ein_error *err)
{
    char b1[256], b2[256];
    if (axis < 0 || axis >= x->rank)
        return ein_fail(err, EIN_EINVAL, "softmax: axis %d out of range for rank %d", axis,
                        x->rank);
    if (!ein_box_equal(x, out))
        return ein_fail(err, EIN_ESHAPE, "softmax: out box %s differs from x box %s",
                        ein_box_format(out, b1, sizeof b1), ein_box_format(x, b2, sizeof b2));
    return 0;
}

/* "ab,bc->ac": subscripts that ein_einsum_parse accepts (rank-0 operands
 * and outputs too), one operand per source, one letter per dim of its
 * buffer, every letter with one extent; the output's letters match dst's
 * box. Kernels rely on this for bounds. */
static int check_einsum(const ein_kernel_operands *o, ein_error *err)
{
    const char *s = o->k->subscripts;
    if (!memchr(s, '\0', EIN_NAME_MAX))
        return rfail(err, "einsum: subscripts not NUL-terminated");
    ein_einsum_sub sub;
    ein_error perr = {0};
    if (ein_einsum_parse_flags(s, EIN_EINSUM_SCALARS, &sub, &perr) < 0)
        return rfail(err, "%s", perr.msg); /* "einsum '...': ..." */
    int64_t ext[26]; /* of letter 'a' + c, -1 until an operand has it */
    for (int c = 0; c < 26; c++)
        ext[c] = -1;
    for (int k = 0; k < sub.nops; k++) {
        if (k >= o->nsrcs)
            return rfail(err, "einsum '%s' has more operands than its %d sources", s, o->nsrcs);
        const ein_box *b = &o->src[k].box;
        if (sub.rank[k] != b->rank)
            return rfail(err, "einsum '%s': operand %d has %d letters but its buffer rank %d", s, k,
                         sub.rank[k], b->rank);
        for (int d = 0; d < b->rank; d++) {
            char l = sub.ops[k][d];
            int64_t e = b->hi[d] - b->lo[d];
            if (ext[l - 'a'] >= 0 && ext[l - 'a'] != e)
                return rfail(err, "einsum '%s': index '%c' has extents %lld and %lld", s, l,
                             (long long)ext[l - 'a'], (long long)e);
            ext[l - 'a'] = e;
        }
    }
    if (sub.nops != o->nsrcs)
        return rfail(err, "einsum '%s' has %d operands but %d sources", s, sub.nops, o->nsrcs);
    const ein_box *ob = &o->out.box;
    if (sub.out_rank != ob->rank)
        return rfail(err, "einsum '%s': output has %d letters but dst rank %d", s, sub.out_rank,
                     ob->rank);
    for (int d = 0; d < ob->rank; d++) {
        char l = sub.out[d];
        if (ob->hi[d] - ob->lo[d] != ext[l - 'a'])
            return rfail(err, "einsum '%s': output index '%c' has extent %lld, inputs %lld", s, l,
                         (long long)(ob->hi[d] - ob->lo[d]), (long long)ext[l - 'a']);
    }
    return 0;
}



static int same_interval(const ein_box *a, int da, const ein_box *b, int db)
{
    return a->lo[da] == b->lo[db] && a->hi[da] == b->hi[db];
}

/* Sequence ends (ROPE, ATTENTION): positive, strictly ascending, and the
 * last one (the total token count) is beyond every token of the block, so
 * that every token has a sequence. No list: one sequence from 0. */
static int check_seq_ends(const ein_kernel *k, int64_t tok_hi, ein_error *err)
{
    for (int32_t j = 0; j < k->nlist; j++)
        if (k->list[j] <= (j ? k->list[j - 1] : 0))
            return rfail(err, "%s: sequence ends not positive and strictly ascending at entry %d",
                         ein_kernel_kind_name(k->kind), j);
    if (k->nlist && tok_hi > k->list[k->nlist - 1])
        return rfail(err, "%s: tokens up to %lld but the sequences end at %lld",
                     ein_kernel_kind_name(k->kind), (long long)tok_hi, (long long)k->list[k->nlist - 1]);
    return 0;
}

/* First token of the sequence holding token t. */
static int64_t seq_start(const ein_kernel *k, int64_t t)
{
    int64_t s = 0;
    for (int32_t j = 0; j < k->nlist && k->list[j] <= t; j++)
        s = k->list[j];
    return s;
}

/* SPLIT_HEADS/MERGE_HEADS: `flat` [t0,t1) x [h0*D, h1*D) and `heads`
 * [h0,h1) x [t0,t1) x [0,D), D = head_dim. */
static int check_heads(const ein_kernel_operands *o, const ein_box *flat, const ein_box *heads,
                       ein_error *err)
{
    int64_t d = o->k->head_dim, lo, hi;
    const char *name = ein_kernel_kind_name(o->k->kind);
    if (flat->rank != 2 || heads->rank != 3)
        return rfail(err, "%s: needs a rank-2 [tokens, hidden] and a rank-3 [heads, tokens, d] box, has "
                     "ranks %d and %d", name, flat->rank, heads->rank);
    if (d <= 0)
        return rfail(err, "%s: head_dim %lld not positive", name, (long long)d);
    if (heads->lo[2] != 0 || heads->hi[2] != d)
        return rfail(err, "%s: the head box's last axis is not [0, head_dim)", name);
    if (!same_interval(flat, 0, heads, 1))
        return rfail(err, "%s: token intervals differ", name);
    if (__builtin_mul_overflow(heads->lo[0], d, &lo) || __builtin_mul_overflow(heads->hi[0], d, &hi) ||
        flat->lo[1] != lo || flat->hi[1] != hi)
        return rfail(err, "%s: hidden interval is not the heads' interval times head_dim", name);
    return 0;
}

/* The block rules of a UNARY kernel (arity and kind already checked). */
static int check_unary_kernel(const ein_kernel_operands *o, ein_error *err)
{
    const ein_kernel *k = o->k;
    const ein_box *out = &o->out.box;
    const ein_box *x = &o->src[0].box;
    if ((int)k->unary < 0 || k->unary >= EIN_UN_COUNT)
        return rfail(err, "unary: invalid unary op %d", (int)k->unary);
    if (!isfinite(k->scalar))
        return rfail(err, "unary scalar is not finite");
    if (!ein_box_equal(x, out))
        return rfail(err, "unary: source buffer %d's box differs from dst's", o->src[0].id);
    return 0;
}

/* The block rules of a BINARY kernel (arity and kind already checked). */
static int check_binary_kernel(const ein_kernel_operands *o, ein_error *err)
{
    const ein_kernel *k = o->k;
    const ein_box *out = &o->out.box;
    if ((int)k->binary < 0 || k->binary >= EIN_BIN_COUNT)
        return rfail(err, "binary: invalid binary op %d", (int)k->binary);
    /* numpy broadcasting, right-aligned: each input dim is dst's
     * interval or has extent 1 (its one element is broadcast). */
    for (int j = 0; j < 2; j++) {
        const ein_box *s = &o->src[j].box;
        if (s->rank > out->rank)
            return rfail(err, "binary: source buffer %d has rank %d, above dst's %d", o->src[j].id,
                         s->rank, out->rank);
        for (int d = 0; d < s->rank; d++) {
            int od = out->rank - s->rank + d;
            if (s->hi[d] - s->lo[d] != 1 && !same_interval(s, d, out, od))
                return rfail(err, "binary: source buffer %d's axis %d is neither dst's interval nor "
                             "of extent 1 (broadcast)", o->src[j].id, d);
        }
    }
    return 0;
}

/* The block rules of an RMSNORM or LAYERNORM kernel (arity, kind checked). */
static int check_norm_kernel(const ein_kernel_operands *o, ein_error *err)
{
    const ein_kernel *k = o->k;
    const ein_box *out = &o->out.box;
    const ein_box *x = &o->src[0].box;
    int n = o->nsrcs;
    const char *name = ein_kernel_kind_name(o->k->kind);
    if (!isfinite(k->eps) || k->eps < 0)
        return rfail(err, "%s: eps %g is not a finite number >= 0", name, k->eps);
    if (x->rank < 1)
        return rfail(err, "%s: input has rank 0", name);
    if (!ein_box_equal(x, out))
        return rfail(err, "%s: source buffer %d's box differs from dst's", name, o->src[0].id);
    /* weight (and bias) and x hold the whole normalised axis [0, d) */
    for (int j = 1; j < n; j++) {
        const ein_box *w = &o->src[j].box;
        if (w->rank != 1 || w->lo[0] != 0 || !same_interval(w, 0, x, x->rank - 1))
            return rfail(err, "%s: %s buffer %d is not rank 1 over x's last interval [0, d)", name,
                         j == 1 ? "weight" : "bias", o->src[j].id);
    }
    return 0;
}

/* The block rules of a ROPE kernel (arity and kind already checked). */
static int check_rope_kernel(const ein_kernel_operands *o, ein_error *err)
{
    const ein_kernel *k = o->k;
    const ein_box *out = &o->out.box;
    const ein_box *x = &o->src[0].box;
    int64_t d = k->head_dim;
    if (x->rank != 2)
        return rfail(err, "rope: input has rank %d, not 2 [tokens, hidden]", x->rank);
    if (!ein_box_equal(x, out))
        return rfail(err, "rope: source buffer %d's box differs from dst's", o->src[0].id);
    /* rotated pairs (2i, 2i+1) stay inside a head, heads inside the block */
    if (d <= 0 || d % 2 != 0)
        return rfail(err, "rope: head_dim %lld is not positive and even", (long long)d);
    if (x->lo[1] % d != 0 || x->hi[1] % d != 0)
        return rfail(err, "rope: hidden interval [%lld, %lld) not at multiples of head_dim %lld",
                     (long long)x->lo[1], (long long)x->hi[1], (long long)d);
    if (!isfinite(k->theta) || k->theta <= 0)
        return rfail(err, "rope: theta %g is not a finite number > 0", k->theta);
    if (k->style < 0 || k->style >= EIN_ROPE_STYLE_COUNT)
        return rfail(err, "rope: style %d is not interleaved (0) or half (1)", (int)k->style);
    if (ein_rope_scaling_invalid(&k->scaling))
        return rfail(err, "rope: scaling: %s", ein_rope_scaling_invalid(&k->scaling));
    return check_seq_ends(o->k, x->hi[0], err);
}

/* The block rules of an ATTENTION kernel (arity and kind already checked). */
static int check_attention_kernel(const ein_kernel_operands *o, ein_error *err)
{
    const ein_kernel *k = o->k;
    const ein_box *out = &o->out.box;
    const ein_box *x = &o->src[0].box;
    const ein_box *q = x, *kb = &o->src[1].box, *vb = &o->src[2].box;
    int64_t hlo, hhi;
    int rc;
    if (q->rank != 3 || kb->rank != 3 || vb->rank != 3)
        return rfail(err, "attention: q, k, v must have rank 3 [heads, tokens, d]");
    if (!ein_box_equal(q, out))
        return rfail(err, "attention: q buffer %d's box differs from dst's", o->src[0].id);
    if (!ein_box_equal(kb, vb))
        return rfail(err, "attention: k and v boxes differ");
    if (k->group < 1)
        return rfail(err, "attention: group %lld below 1", (long long)k->group);
    if (__builtin_mul_overflow(kb->lo[0], k->group, &hlo) || __builtin_mul_overflow(kb->hi[0], k->group, &hhi) ||
        q->lo[0] != hlo || q->hi[0] != hhi)
        return rfail(err, "attention: q's head interval is not group (%lld) times k's",
                     (long long)k->group);
    if (q->lo[2] != 0 || !same_interval(q, 2, kb, 2))
        return rfail(err, "attention: d is not whole and equal in q, k and v");
    if ((rc = check_seq_ends(o->k, q->hi[1], err)) < 0)
        return rc;
    if (k->window < 0)
        return rfail(err, "attention: window %lld is negative", (long long)k->window);
    /* every key of every query: from its sequence's start (or its window's,
     * if later) to itself */
    int64_t need = seq_start(k, q->lo[1]);
    if (k->window > 0 && q->lo[1] - k->window + 1 > need)
        need = q->lo[1] - k->window + 1;
    if (kb->lo[1] > need || kb->hi[1] < q->hi[1])
        return rfail(err, "attention: k/v tokens [%lld, %lld) miss keys of queries [%lld, %lld)",
                     (long long)kb->lo[1], (long long)kb->hi[1], (long long)q->lo[1], (long long)q->hi[1]);
    return 0;
}

/* The block rules of an ATTENTION_PARTIAL kernel (arity and kind already checked). */
static int check_attention_partial_kernel(const ein_kernel_operands *o, ein_error *err)
{
    const ein_kernel *k = o->k;
    const ein_box *out = &o->out.box;
    const ein_box *x = &o->src[0].box;
    int n = o->nsrcs;
    /* One key block's share: q as for ATTENTION, k/v any token
     * interval (or none), dst the f32 rows [0, d + 1) of q's box. */
    const ein_box *q = x;
    ein_box want = ein_agg_box(EIN_AGG_LSE, q);
    int rc;
    if (q->rank != 3)
        return rfail(err, "attention_partial: q must have rank 3 [heads, tokens, d]");
    if (!ein_box_equal(&want, out) || o->out.dtype != EIN_F32)
        return rfail(err, "attention_partial: dst is not f32 over q's box with d + 1 columns");
    if (q->lo[2] != 0)
        return rfail(err, "attention_partial: d is not whole in q");
    if (n == 2)
        return rfail(err, "attention_partial takes q alone or q, k and v");
    if (k->window < 0)
        return rfail(err, "attention_partial: window %lld is negative",
                     (long long)k->window);
    if (n == 3) {
        const ein_box *kb = &o->src[1].box, *vb = &o->src[2].box;
        int64_t hlo, hhi;
        if (kb->rank != 3 || !ein_box_equal(kb, vb))
            return rfail(err, "attention_partial: k and v boxes differ or are not rank 3");
        if (k->group < 1)
            return rfail(err, "attention_partial: group %lld below 1", (long long)k->group);
        if (__builtin_mul_overflow(kb->lo[0], k->group, &hlo) ||
            __builtin_mul_overflow(kb->hi[0], k->group, &hhi) || q->lo[0] != hlo || q->hi[0] != hhi)
            return rfail(err, "attention_partial: q's head interval is not group (%lld) "
                         "times k's", (long long)k->group);
        if (!same_interval(q, 2, kb, 2))
            return rfail(err, "attention_partial: d differs between q and k/v");
        if ((rc = check_seq_ends(o->k, kb->hi[1], err)) < 0)
            return rc;
    }
    return check_seq_ends(o->k, q->hi[1], err);
}

/* The block rules of a REDUCE kernel (arity and kind already checked). */
static int check_reduce_kernel(const ein_kernel_operands *o, ein_error *err)
{
    const ein_kernel *k = o->k;
    const ein_box *out = &o->out.box;
    const ein_box *x = &o->src[0].box;
    if (k->reduce != EIN_AGG_SUM && k->reduce != EIN_AGG_MAX)
        return rfail(err, "reduce: op %d is not sum or max", (int)k->reduce);
    if (k->axes == 0 || (k->axes >> x->rank) != 0)
        return rfail(err, "reduce: axes 0x%x not a non-empty set of axes below rank %d", k->axes,
                     x->rank);
    int od = 0;
    if (out->rank != x->rank - __builtin_popcount(k->axes))
        return rfail(err, "reduce: dst rank %d, want %d", out->rank,
                     x->rank - __builtin_popcount(k->axes));
    for (int d = 0; d < x->rank; d++)
        if (!(k->axes >> d & 1u) && !same_interval(x, d, out, od++))
            return rfail(err, "reduce: dst's box is not x's without the reduced axes");
    return 0;
}

/* The block rules of a CONCAT kernel (arity and kind already checked). */
static int check_concat_kernel(const ein_kernel_operands *o, ein_error *err)
{
    const ein_kernel *k = o->k;
    const ein_box *out = &o->out.box;
    int n = o->nsrcs;
    if (k->axis < 0 || k->axis >= out->rank)
        return rfail(err, "concat: axis %d out of range for rank %d", k->axis, out->rank);
    if (k->nlist != n)
        return rfail(err, "concat: %d offsets for %d sources", k->nlist, n);
    for (int j = 0; j < n; j++) {
        const ein_box *s = &o->src[j].box;
        int64_t end;
        if (s->rank != out->rank)
            return rfail(err, "concat: source buffer %d has rank %d, dst %d", o->src[j].id, s->rank,
                         out->rank);
        if (j ? k->list[j] <= k->list[j - 1] : k->list[j] < 0)
            return rfail(err, "concat: offsets not non-negative and strictly ascending at entry %d", j);
        /* input j spans [list[j], list[j+1]) of dst's axis */
        if (__builtin_add_overflow(k->list[j], s->hi[k->axis], &end) || (j + 1 < n && end > k->list[j + 1]))
            return rfail(err, "concat: source buffer %d runs past its part of the axis", o->src[j].id);
    }
    return 0;
}

/* The block rules of a SLICE kernel (arity and kind already checked). */
static int check_slice_kernel(const ein_kernel_operands *o, ein_error *err)
{
    const ein_kernel *k = o->k;
    const ein_box *out = &o->out.box;
    const ein_box *x = &o->src[0].box;
    ein_box shifted = *out;
    if (k->axis < 0 || k->axis >= x->rank)
        return rfail(err, "slice: axis %d out of range for rank %d", k->axis, x->rank);
    if (k->start < 0)
        return rfail(err, "slice: negative start %lld", (long long)k->start);
    if (out->rank != x->rank)
        return rfail(err, "slice: dst rank %d differs from the source's %d", out->rank, x->rank);
    if (__builtin_add_overflow(out->lo[k->axis], k->start, &shifted.lo[k->axis]) ||
        __builtin_add_overflow(out->hi[k->axis], k->start, &shifted.hi[k->axis]) ||
        !ein_box_contains(x, &shifted))
        return rfail(err, "slice: source buffer %d does not contain dst's box shifted by %lld",
                     o->src[0].id, (long long)k->start);
    return 0;
}

/* The block rules of an EMBEDDING kernel: table [v0,v1) x [d0,d1) (float)
 * inside `rows` rows, ids [t0,t1) (i32/i64), dst [t0,t1) x [d0,d1). */
static int check_embedding_kernel(const ein_kernel_operands *o, ein_error *err)
{
    const ein_kernel_operand *tb = &o->src[0], *ib = &o->src[1];
    const ein_kernel_operand *ob = &o->out;
    if (tb->box.rank != 2 || ib->box.rank != 1 || ob->box.rank != 2)
        return rfail(err, "embedding: needs a rank-2 table, rank-1 ids and a rank-2 dst, has "
                     "ranks %d, %d and %d", tb->box.rank, ib->box.rank, ob->box.rank);
    if (!ein_dtype_is_float((int)tb->dtype) || ein_dtype_is_float((int)ib->dtype) ||
        !ein_dtype_is_float((int)ob->dtype))
        return rfail(err, "embedding: table %s, ids %s, dst %s; want a float table and dst and "
                     "integer ids", ein_dtype_name(tb->dtype), ein_dtype_name(ib->dtype),
                     ein_dtype_name(ob->dtype));
    if (o->k->rows < 1 || tb->box.hi[0] > o->k->rows)
        return rfail(err, "embedding: table rows up to %lld but the table has %lld rows",
                     (long long)tb->box.hi[0], (long long)o->k->rows);
    if (!same_interval(&ib->box, 0, &ob->box, 0) || !same_interval(&tb->box, 1, &ob->box, 1))
        return rfail(err, "embedding: dst's box is not the ids' tokens by the table's columns");
    return 0;
}

/* Positions: a rank-1 integer buffer over the interval `ax` of `b`. */
static int pos_ok(const ein_kernel_operand *pb, const ein_box *b, int ax)
{
    return pb->box.rank == 1 && !ein_dtype_is_float((int)pb->dtype) &&
           same_interval(&pb->box, 0, b, ax);
}

/* Token interval `t` of box `a` is C times sequence interval `s` of box
 * `b` for one whole C >= 1 (C new tokens per sequence: kernels/kn_cpu.h). */
static int chunk_interval(const ein_box *a, int t, const ein_box *b, int s)
{
    int64_t nb = b->hi[s] - b->lo[s], nt = a->hi[t] - a->lo[t];
    if (nb <= 0 || nt <= 0 || nt % nb)
        return 0;
    int64_t c = nt / nb;
    return a->lo[t] / c == b->lo[s] && a->lo[t] % c == 0;
}

/* The block rules of the generation kernels (kernels/kn_cpu.h). */
static int check_generate_kernel(const ein_kernel_operands *ops, ein_error *err)
{
    const ein_kernel *k = ops->k;
    const ein_kernel_operand *ob = &ops->out, *x = &ops->src[0];
    const ein_box *o = &ob->box;
    int ok = ein_dtype_is_float((int)ob->dtype) && ein_dtype_is_float((int)x->dtype);
    if (k->kind == EIN_KERNEL_CACHE_WRITE) {
        const ein_kernel_operand *nw = &ops->src[1], *ps = &ops->src[2];
        ok = ok && o->rank == 4 && ein_box_equal(o, &x->box) && x->dtype == ob->dtype &&
             nw->box.rank == 3 && ein_dtype_is_float((int)nw->dtype) &&
             same_interval(&nw->box, 0, o, 0) && chunk_interval(&nw->box, 1, o, 1) &&
             same_interval(&nw->box, 2, o, 3) && pos_ok(ps, o, 1) && k->rows >= o->hi[2];
        return ok ? 0 : rfail(err, "cache_write: state, x, pos and dst blocks do not match");
    }
    if (k->kind == EIN_KERNEL_ROPE_AT) {
        const ein_kernel_operand *ps = &ops->src[1];
        ok = ok && o->rank == 2 && ein_box_equal(o, &x->box) && pos_ok(ps, o, 0) &&
             k->head_dim > 0 && k->head_dim % 2 == 0 && o->lo[1] % k->head_dim == 0 &&
             o->hi[1] % k->head_dim == 0 && k->theta > 0 && isfinite(k->theta) &&
             (k->style == EIN_ROPE_INTERLEAVED || k->style == EIN_ROPE_HALF) &&
             !ein_rope_scaling_invalid(&k->scaling);
        return ok ? 0 : rfail(err, "rope_at: x, pos and dst blocks or parameters do not match");
    }
    /* DECODE_ATTENTION(_PARTIAL): q, k, v, pos. */
    const ein_kernel_operand *kb = &ops->src[1], *vb = &ops->src[2];
    const ein_kernel_operand *ps = &ops->src[3];
    const ein_box *q = &x->box, *kx = &kb->box;
    ok = ok && q->rank == 3 && kx->rank == 4 && ein_box_equal(kx, &vb->box) &&
         ein_dtype_is_float((int)kb->dtype) && ein_dtype_is_float((int)vb->dtype) &&
         k->group >= 1 && k->group <= (int64_t)1 << 32 && k->window >= 0 &&
         q->lo[0] == k->group * kx->lo[0] && q->hi[0] == k->group * kx->hi[0] &&
         chunk_interval(q, 1, kx, 1) && q->lo[2] == 0 && same_interval(q, 2, kx, 3) &&
         pos_ok(ps, kx, 1);
    if (ok) {
        int partial = k->kind == EIN_KERNEL_DECODE_ATTENTION_PARTIAL;
        ein_box want = partial ? ein_agg_box(EIN_AGG_LSE, q) : *q;
        ok = ein_box_equal(o, &want) && (!partial || ob->dtype == EIN_F32);
    }
    return ok ? 0 : rfail(err, "%s: q, k, v, pos and dst blocks do not match",
                          ein_kernel_kind_name(k->kind));
}

static int check_softmax_kernel(const ein_kernel_operands *o, ein_error *err)
{
    return ein_kernel_rules_softmax(o->k->axis, &o->src[0].box, &o->out.box, err);
}

static int check_split_heads(const ein_kernel_operands *o, ein_error *err)
{
    return check_heads(o, &o->src[0].box, &o->out.box, err);
}

static int check_merge_heads(const ein_kernel_operands *o, ein_error *err)
{
    return check_heads(o, &o->out.box, &o->src[0].box, err);
}

/* The block rules of the fused kernels (issue 33; arity and kind already
 * checked). SWIGLU: gate, up and dst of one box (no broadcasting).
 * ADD_RMSNORM: a and b of one box of rank 1..EIN_MAX_RANK - 1 holding the
 * whole last axis [0, d), the weight rank 1 over it, eps as RMSNORM's, and
 * dst [0, 2) x that box (the sum, then the normalised rows). */
static int check_fused_kernel(const ein_kernel_operands *o, ein_error *err)
{
    const ein_kernel *k = o->k;
    const ein_box *out = &o->out.box;
    const ein_box *a = &o->src[0].box;
    const ein_box *b = &o->src[1].box;
    const char *name = ein_kernel_kind_name(k->kind);
    if (!ein_box_equal(a, b))
        return rfail(err, "%s: source buffers %d and %d have different boxes", name, o->src[0].id,
                     o->src[1].id);
    if (k->kind == EIN_KERNEL_SWIGLU) {
        if (!ein_box_equal(a, out))
            return rfail(err, "%s: source buffer %d's box differs from dst's", name, o->src[0].id);
        return 0;
    }
    if (!isfinite(k->eps) || k->eps < 0)
        return rfail(err, "%s: eps %g is not a finite number >= 0", name, k->eps);
    if (a->rank < 1 || a->rank >= EIN_MAX_RANK)
        return rfail(err, "%s: input has rank %d, not 1..%d", name, a->rank, EIN_MAX_RANK - 1);
    const ein_box *w = &o->src[2].box;
    if (w->rank != 1 || w->lo[0] != 0 || a->lo[a->rank - 1] != 0 ||
        !same_interval(w, 0, a, a->rank - 1))
        return rfail(err, "%s: weight buffer %d is not rank 1 over the sources' whole last "
                     "interval [0, d)", name, o->src[2].id);
    int ok = out->rank == a->rank + 1 && out->lo[0] == 0 && out->hi[0] == 2;
    for (int d = 0; ok && d < a->rank; d++)
        ok = out->lo[d + 1] == a->lo[d] && out->hi[d + 1] == a->hi[d];
    if (!ok)
        return rfail(err, "%s: dst box is not [0, 2) x the sources' box", name);
    return 0;
}

/* One row per kind: what its blocks must satisfy, in words, and the
 * function that checks it. At length:
 * EINSUM 1-2 srcs and subscripts
 * "ab,bc->ac" that ein_einsum_parse_flags(EIN_EINSUM_SCALARS) accepts
 * (common/ir/ein_einsum.h: letters a-z, none repeated within an operand or
 * the output) whose letters match the operands' ranks and agree on
 * extents; UNARY 1 src with dst's box;
 * BINARY 2 srcs of rank <= dst's, each right-aligned dim either dst's
 * interval or of extent 1; SOFTMAX 1 src, axis < rank, dst box == src
 * box; RMSNORM 2 / LAYERNORM 3 srcs, eps finite >= 0, x rank >= 1, dst
 * box == x box, weight (and bias) rank 1 over x's last interval, which
 * is whole ([0, d)); ROPE 1
 * src of rank 2, dst box == x box, head_dim > 0 and even dividing both
 * hidden bounds, theta finite > 0, style an ein_rope_style; ATTENTION q, k, v of rank 3, dst box
 * == q box, k box == v box, group >= 1, window >= 0, q heads == group * k
 * heads, d interval equal and starting at 0, k/v tokens covering every key
 * of the q tokens (inside their window when window > 0); ATTENTION_PARTIAL
 * 1 or 3 srcs, the same rules for q, k, v
 * except that the k/v tokens may be any interval (1 src: no keys), and
 * dst box == ein_agg_box(EIN_AGG_LSE, q box) in f32; ROPE/ATTENTION sequence ends positive, strictly ascending, the
 * last >= the block's token end; REDUCE 1 src, reduce SUM or MAX, axes a
 * non-empty mask below rank, dst box == src box without those axes;
 * CONCAT 1..EIN_KERNEL_MAX_INPUTS srcs of dst's rank, axis < rank, nlist
 * == nsrcs, offsets >= 0 strictly ascending, each src's box along axis
 * inside [0, next offset - its offset); SLICE 1 src of dst's rank, axis <
 * rank, start >= 0, src box contains dst box shifted by start; SPLIT_HEADS
 * / MERGE_HEADS rank 2 <-> 3, head_dim > 0, boxes as in kn_cpu_split_heads;
 * SWIGLU 2 srcs with dst's box; ADD_RMSNORM 2 srcs of one box holding the
 * whole last axis, a weight as RMSNORM's, dst [0, 2) x that box.
 */
static const ein_kernel_rules_row rules[EIN_KERNEL_COUNT] = {
    [EIN_KERNEL_EINSUM] = {"subscripts name one letter per operand dim, each letter one extent, "
                           "the output letters dst's box", check_einsum},
    [EIN_KERNEL_UNARY] = {"a known op, a finite scalar, dst's box == x's", check_unary_kernel},
    [EIN_KERNEL_BINARY] = {"a known op; each source right-aligned in dst, each axis dst's interval "
                           "or of extent 1", check_binary_kernel},
    [EIN_KERNEL_SOFTMAX] = {"axis below x's rank, dst's box == x's", check_softmax_kernel},
    [EIN_KERNEL_RMSNORM] = {"eps finite >= 0, dst's box == x's, weight rank 1 over x's whole last "
                            "axis", check_norm_kernel},
    [EIN_KERNEL_LAYERNORM] = {"eps finite >= 0, dst's box == x's, weight and bias rank 1 over x's "
                              "whole last axis", check_norm_kernel},
    [EIN_KERNEL_ROPE] = {"x rank 2, dst's box == x's, head_dim even dividing the hidden bounds, "
                         "theta > 0, a known style and scaling, sequence ends ascending",
                         check_rope_kernel},
    [EIN_KERNEL_ATTENTION] = {"q, k, v rank 3, dst == q, k == v, q heads == group * k heads, d "
                              "whole, k/v tokens cover every key of q's tokens",
                              check_attention_kernel},
    [EIN_KERNEL_ATTENTION_PARTIAL] = {"q rank 3 (alone or with k == v), dst f32 over q's box with "
                                      "d + 1 columns", check_attention_partial_kernel},
    [EIN_KERNEL_REDUCE] = {"sum or max over a non-empty set of x's axes, dst x's box without them",
                           check_reduce_kernel},
    [EIN_KERNEL_CONCAT] = {"axis below rank, one ascending offset per source, each source inside "
                           "its part of the axis", check_concat_kernel},
    [EIN_KERNEL_SLICE] = {"axis below rank, start >= 0, x contains dst's box shifted by start",
                          check_slice_kernel},
    [EIN_KERNEL_SPLIT_HEADS] = {"x [tokens, heads * head_dim] -> dst [heads, tokens, head_dim]",
                                check_split_heads},
    [EIN_KERNEL_MERGE_HEADS] = {"x [heads, tokens, head_dim] -> dst [tokens, heads * head_dim]",
                                check_merge_heads},
    [EIN_KERNEL_EMBEDDING] = {"float rank-2 table inside `rows`, integer rank-1 ids, dst ids' "
                              "tokens by the table's columns", check_embedding_kernel},
    [EIN_KERNEL_CACHE_WRITE] = {"state rank 4 == dst, new tokens a whole multiple per sequence, "
                                "integer positions over the sequences", check_generate_kernel},
    [EIN_KERNEL_DECODE_ATTENTION] = {"q rank 3, k == v rank 4, q heads == group * k heads, "
                                     "positions over the sequences, dst == q",
                                     check_generate_kernel},
    [EIN_KERNEL_DECODE_ATTENTION_PARTIAL] = {"as decode_attention, dst f32 over q's box with d + 1 "
                                             "columns", check_generate_kernel},
    [EIN_KERNEL_ROPE_AT] = {"x rank 2 == dst, integer positions over the tokens, head_dim even "
                            "dividing the hidden bounds, theta > 0", check_generate_kernel},
    [EIN_KERNEL_SWIGLU] = {"gate, up and dst of one box (fused silu(gate) * up)",
                           check_fused_kernel},
    [EIN_KERNEL_ADD_RMSNORM] = {"a and b of one box holding the whole last axis, a weight rank 1 "
                                "over it, eps finite >= 0, dst [0, 2) x that box",
                                check_fused_kernel},
};

const ein_kernel_rules_row *ein_kernel_rules_of(ein_kernel_kind kind)
{
    if ((int)kind < 0 || kind >= EIN_KERNEL_COUNT || !rules[kind].check)
        return NULL;
    return &rules[kind];
}

int ein_kernel_rules_check(const ein_kernel_operands *o, ein_error *err)
{
    const ein_kernel_rules_row *r = ein_kernel_rules_of(o->k->kind);
    if (!r)
        return ein_fail(err, EIN_EINVAL, "kernel rules: invalid kernel kind %d", (int)o->k->kind);
    return r->check(o, err);
}
