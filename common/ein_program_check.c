/* common/ein_program_check.c — ein_program_validate (see ein_program.h):
 * every buffer and instruction of a Program checked before it is run or
 * sent. */
#include "common/ein_program.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/ein_einsum.h"
#include "common/ein_kernel_rules.h"
#include "common/ein_program_int.h"

/* ---- validation ------------------------------------------------------- */

/* Fail with the instruction named: "program: instr 3 (slice 'mm1'): ...". */
static int ifail(ein_error *err, int i, const ein_instr *ins, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int ifail(ein_error *err, int i, const ein_instr *ins, const char *fmt, ...)
{
    if (err) {
        char what[EIN_ERROR_MSG_MAX];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(what, sizeof what, fmt, ap);
        va_end(ap);
        /* op is known to be terminated by the time we name it. */
        ein_fail(err, EIN_EPROTO, "program: instr %d (%s '%s'): %s", i, ein_instr_kind_name(ins->kind),
                 ins->op, what);
    }
    return EIN_EPROTO;
}

static int check_buffer(const ein_program *p, int id, ein_error *err)
{
    const ein_pbuffer *b = &p->buffers[id];
    uint64_t bytes, end;
    if (!ein_dtype_valid((int)b->dtype))
        return ein_fail(err, EIN_EPROTO, "program: buffer %d: invalid dtype %d", id, (int)b->dtype);
    const char *why = ein_buffer_box_bytes(&b->box, b->dtype, &bytes);
    if (why)
        return ein_fail(err, EIN_EPROTO, "program: buffer %d: box %s", id, why);
    if (b->bytes != bytes)
        return ein_fail(err, EIN_EPROTO, "program: buffer %d: %llu bytes but its box and dtype need %llu", id,
                        (unsigned long long)b->bytes, (unsigned long long)bytes);
    /* Kernels access elements directly: a misaligned buffer is UB. */
    size_t align = ein_dtype_size(b->dtype) ? ein_dtype_size(b->dtype) : 2; /* blocks: f16 scale */
    if (b->offset % align != 0)
        return ein_fail(err, EIN_EPROTO, "program: buffer %d: offset %llu not aligned to its dtype", id,
                        (unsigned long long)b->offset);
    if (__builtin_add_overflow(b->offset, b->bytes, &end) || end > p->segment_bytes)
        return ein_fail(err, EIN_EPROTO, "program: buffer %d: [%llu, +%llu) runs past the segment (%llu bytes)",
                        id, (unsigned long long)b->offset, (unsigned long long)b->bytes,
                        (unsigned long long)p->segment_bytes);
    return 0;
}

/* LOAD/STORE: the buffer's box lies inside the whole tensor [0, shape). */
static int check_file_shape(const ein_program *p, int i, const ein_instr *ins, int buf, ein_error *err)
{
    const ein_box *b = &p->buffers[buf].box;
    if (ins->rank < 0 || ins->rank > EIN_MAX_RANK)
        return ifail(err, i, ins, "rank %d out of range 0..%d", ins->rank, EIN_MAX_RANK);
    if (b->rank != ins->rank)
        return ifail(err, i, ins, "buffer %d has rank %d but the tensor has rank %d", buf, b->rank, ins->rank);
    for (int d = 0; d < ins->rank; d++) {
        if (ins->shape[d] < 0)
            return ifail(err, i, ins, "negative dimension in shape");
        if (b->hi[d] > ins->shape[d])
            return ifail(err, i, ins, "buffer %d's box is not inside the tensor's shape", buf);
    }
    return 0;
}

/* LOAD: the format and offset agree with the path, and a raw tensor's last
 * byte is addressable. */
static int check_load_source(const ein_program *p, int i, const ein_instr *ins, ein_error *err)
{
    if ((unsigned)ins->format >= EIN_LOAD_FORMAT_COUNT)
        return ifail(err, i, ins, "load format %d out of range", (int)ins->format);
    int raw;
    ein_dtype t = ein_load_file_dtype(ins->format, p->buffers[ins->dst].dtype, &raw);
    if (raw && !ins->path)
        return ifail(err, i, ins, "a raw load needs a path");
    if (ins->format == EIN_LOAD_ZERO && ins->path)
        return ifail(err, i, ins, "a zero load (a state) takes no path");
    if (!raw && ins->offset)
        return ifail(err, i, ins, "offset %llu given to a load that is not raw",
                     (unsigned long long)ins->offset);
    if (t != p->buffers[ins->dst].dtype && !ein_dtype_is_block((int)p->buffers[ins->dst].dtype))
        return ifail(err, i, ins, "a quantizing load (format %d) into a %s buffer; it fills "
                     "q8_0 or q4_0 buffers only", (int)ins->format,
                     ein_dtype_name(p->buffers[ins->dst].dtype));
    if (raw) {
        uint64_t bytes = ein_dtype_bytes(t, 1), end, blk = (uint64_t)ein_dtype_block((int)t);
        if (blk > 1 && (ins->rank < 1 || ins->shape[ins->rank - 1] % (int64_t)blk != 0))
            return ifail(err, i, ins, "a raw %s tensor's last dim must be a multiple of %llu",
                         ein_dtype_name(t), (unsigned long long)blk);
        if (blk > 1)
            bytes = ein_dtype_bytes(t, blk);
        for (int d = 0; d < ins->rank; d++)
            if (__builtin_mul_overflow(bytes, (uint64_t)(blk > 1 && d == ins->rank - 1 ? ins->shape[d] / (int64_t)blk : ins->shape[d]), &bytes))
                return ifail(err, i, ins, "raw tensor's size overflows");
        if (__builtin_add_overflow(ins->offset, bytes, &end) || end > (uint64_t)INT64_MAX)
            return ifail(err, i, ins, "raw tensor at offset %llu ends past 2^63",
                         (unsigned long long)ins->offset);
    }
    return 0;
}

static int check_path(int i, const ein_instr *ins, int required, ein_error *err)
{
    if (!ins->path)
        return required ? ifail(err, i, ins, "missing path") : 0;
    size_t n = strnlen(ins->path, EIN_PATH_MAX);
    if (n == 0)
        return ifail(err, i, ins, "empty path");
    if (n >= EIN_PATH_MAX)
        return ifail(err, i, ins, "path longer than %d bytes", EIN_PATH_MAX - 1);
    return 0;
}

/* "ab,bc->ac": subscripts that ein_einsum_parse accepts (rank-0 operands
 * and outputs too), one operand per source, one letter per dim of its
 * buffer, every letter with one extent; the output's letters match dst's
 * box. Kernels rely on this for bounds. */
static int check_einsum(const ein_program *p, int i, const ein_instr *ins, ein_error *err)
{
    const char *s = ins->kernel.subscripts;
    if (!memchr(s, '\0', EIN_NAME_MAX))
        return ifail(err, i, ins, "einsum subscripts not NUL-terminated");
    ein_einsum_sub sub;
    ein_error perr = {0};
    if (ein_einsum_parse_flags(s, EIN_EINSUM_SCALARS, &sub, &perr) < 0)
        return ifail(err, i, ins, "%s", perr.msg);
    int64_t ext[26]; /* of letter 'a' + c, -1 until an operand has it */
    for (int c = 0; c < 26; c++)
        ext[c] = -1;
    for (int k = 0; k < sub.nops; k++) {
        if (k >= ins->nsrcs)
            return ifail(err, i, ins, "einsum '%s' has more operands than its %d sources", s, ins->nsrcs);
        const ein_box *b = &p->buffers[ins->srcs[k]].box;
        if (sub.rank[k] != b->rank)
            return ifail(err, i, ins, "einsum '%s': operand %d has %d letters but its buffer rank %d", s, k,
                         sub.rank[k], b->rank);
        for (int d = 0; d < b->rank; d++) {
            char l = sub.ops[k][d];
            int64_t e = b->hi[d] - b->lo[d];
            if (ext[l - 'a'] >= 0 && ext[l - 'a'] != e)
                return ifail(err, i, ins, "einsum '%s': index '%c' has extents %lld and %lld", s, l,
                             (long long)ext[l - 'a'], (long long)e);
            ext[l - 'a'] = e;
        }
    }
    if (sub.nops != ins->nsrcs)
        return ifail(err, i, ins, "einsum '%s' has %d operands but %d sources", s, sub.nops, ins->nsrcs);
    const ein_box *ob = &p->buffers[ins->dst].box;
    if (sub.out_rank != ob->rank)
        return ifail(err, i, ins, "einsum '%s': output has %d letters but dst rank %d", s, sub.out_rank,
                     ob->rank);
    for (int d = 0; d < ob->rank; d++) {
        char l = sub.out[d];
        if (ob->hi[d] - ob->lo[d] != ext[l - 'a'])
            return ifail(err, i, ins, "einsum '%s': output index '%c' has extent %lld, inputs %lld", s, l,
                         (long long)(ob->hi[d] - ob->lo[d]), (long long)ext[l - 'a']);
    }
    return 0;
}


/* The kinds that carry ein_kernel.list: those with the wire field. */
static int kernel_has_list(ein_kernel_kind k)
{
    return (ein_kernel_fields_of(k) & 1u << K_LIST) != 0;
}

static int same_interval(const ein_box *a, int da, const ein_box *b, int db)
{
    return a->lo[da] == b->lo[db] && a->hi[da] == b->hi[db];
}

/* Sequence ends (ROPE, ATTENTION): positive, strictly ascending, and the
 * last one (the total token count) is beyond every token of the block, so
 * that every token has a sequence. No list: one sequence from 0. */
static int check_seq_ends(int i, const ein_instr *ins, int64_t tok_hi, ein_error *err)
{
    const ein_kernel *k = &ins->kernel;
    for (int32_t j = 0; j < k->nlist; j++)
        if (k->list[j] <= (j ? k->list[j - 1] : 0))
            return ifail(err, i, ins, "%s: sequence ends not positive and strictly ascending at entry %d",
                         ein_kernel_kind_name(k->kind), j);
    if (k->nlist && tok_hi > k->list[k->nlist - 1])
        return ifail(err, i, ins, "%s: tokens up to %lld but the sequences end at %lld",
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
static int check_heads(int i, const ein_instr *ins, const ein_box *flat, const ein_box *heads,
                       ein_error *err)
{
    int64_t d = ins->kernel.head_dim, lo, hi;
    const char *name = ein_kernel_kind_name(ins->kernel.kind);
    if (flat->rank != 2 || heads->rank != 3)
        return ifail(err, i, ins, "%s: needs a rank-2 [tokens, hidden] and a rank-3 [heads, tokens, d] box, has "
                     "ranks %d and %d", name, flat->rank, heads->rank);
    if (d <= 0)
        return ifail(err, i, ins, "%s: head_dim %lld not positive", name, (long long)d);
    if (heads->lo[2] != 0 || heads->hi[2] != d)
        return ifail(err, i, ins, "%s: the head box's last axis is not [0, head_dim)", name);
    if (!same_interval(flat, 0, heads, 1))
        return ifail(err, i, ins, "%s: token intervals differ", name);
    if (__builtin_mul_overflow(heads->lo[0], d, &lo) || __builtin_mul_overflow(heads->hi[0], d, &hi) ||
        flat->lo[1] != lo || flat->hi[1] != hi)
        return ifail(err, i, ins, "%s: hidden interval is not the heads' interval times head_dim", name);
    return 0;
}

/* The block rules of a UNARY kernel (arity and kind already checked). */
static int check_unary_kernel(const ein_program *p, int i, const ein_instr *ins, ein_error *err)
{
    const ein_kernel *k = &ins->kernel;
    const ein_box *out = &p->buffers[ins->dst].box;
    const ein_box *x = &p->buffers[ins->srcs[0]].box;
    if ((int)k->unary < 0 || k->unary >= EIN_UN_COUNT)
        return ifail(err, i, ins, "invalid unary op %d", (int)k->unary);
    if (!isfinite(k->scalar))
        return ifail(err, i, ins, "unary scalar is not finite");
    if (!ein_box_equal(x, out))
        return ifail(err, i, ins, "source buffer %d's box differs from dst's", ins->srcs[0]);
    return 0;
}

/* The block rules of a BINARY kernel (arity and kind already checked). */
static int check_binary_kernel(const ein_program *p, int i, const ein_instr *ins, ein_error *err)
{
    const ein_kernel *k = &ins->kernel;
    const ein_box *out = &p->buffers[ins->dst].box;
    if ((int)k->binary < 0 || k->binary >= EIN_BIN_COUNT)
        return ifail(err, i, ins, "invalid binary op %d", (int)k->binary);
    /* numpy broadcasting, right-aligned: each input dim is dst's
     * interval or has extent 1 (its one element is broadcast). */
    for (int j = 0; j < 2; j++) {
        const ein_box *s = &p->buffers[ins->srcs[j]].box;
        if (s->rank > out->rank)
            return ifail(err, i, ins, "binary: source buffer %d has rank %d, above dst's %d", ins->srcs[j],
                         s->rank, out->rank);
        for (int d = 0; d < s->rank; d++) {
            int od = out->rank - s->rank + d;
            if (s->hi[d] - s->lo[d] != 1 && !same_interval(s, d, out, od))
                return ifail(err, i, ins, "binary: source buffer %d's axis %d is neither dst's interval nor "
                             "of extent 1 (broadcast)", ins->srcs[j], d);
        }
    }
    return 0;
}

/* The block rules of a SOFTMAX kernel (arity and kind already checked). */
static int check_softmax_kernel(const ein_program *p, int i, const ein_instr *ins, ein_error *err)
{
    ein_error re = {0};
    if (ein_kernel_rules_softmax(ins->kernel.axis, &p->buffers[ins->srcs[0]].box,
                                 &p->buffers[ins->dst].box, &re) < 0)
        return ifail(err, i, ins, "%s", re.msg);
    return 0;
}

/* The block rules of an RMSNORM or LAYERNORM kernel (arity, kind checked). */
static int check_norm_kernel(const ein_program *p, int i, const ein_instr *ins, ein_error *err)
{
    const ein_kernel *k = &ins->kernel;
    const ein_box *out = &p->buffers[ins->dst].box;
    const ein_box *x = &p->buffers[ins->srcs[0]].box;
    int n = ins->nsrcs;
    const char *name = ein_kernel_kind_name(ins->kernel.kind);
    if (!isfinite(k->eps) || k->eps < 0)
        return ifail(err, i, ins, "%s: eps %g is not a finite number >= 0", name, k->eps);
    if (x->rank < 1)
        return ifail(err, i, ins, "%s: input has rank 0", name);
    if (!ein_box_equal(x, out))
        return ifail(err, i, ins, "%s: source buffer %d's box differs from dst's", name, ins->srcs[0]);
    /* weight (and bias) and x hold the whole normalised axis [0, d) */
    for (int j = 1; j < n; j++) {
        const ein_box *w = &p->buffers[ins->srcs[j]].box;
        if (w->rank != 1 || w->lo[0] != 0 || !same_interval(w, 0, x, x->rank - 1))
            return ifail(err, i, ins, "%s: %s buffer %d is not rank 1 over x's last interval [0, d)", name,
                         j == 1 ? "weight" : "bias", ins->srcs[j]);
    }
    return 0;
}

/* The block rules of the fused kernels (issue 33; arity and kind already
 * checked). SWIGLU: gate, up and dst of one box (no broadcasting).
 * ADD_RMSNORM: a and b of one box of rank 1..EIN_MAX_RANK - 1 holding the
 * whole last axis [0, d), the weight rank 1 over it, eps as RMSNORM's, and
 * dst [0, 2) x that box (the sum, then the normalised rows). */
static int check_fused_kernel(const ein_program *p, int i, const ein_instr *ins, ein_error *err)
{
    const ein_kernel *k = &ins->kernel;
    const ein_box *out = &p->buffers[ins->dst].box;
    const ein_box *a = &p->buffers[ins->srcs[0]].box;
    const ein_box *b = &p->buffers[ins->srcs[1]].box;
    const char *name = ein_kernel_kind_name(k->kind);
    if (!ein_box_equal(a, b))
        return ifail(err, i, ins, "%s: source buffers %d and %d have different boxes", name,
                     ins->srcs[0], ins->srcs[1]);
    if (k->kind == EIN_KERNEL_SWIGLU) {
        if (!ein_box_equal(a, out))
            return ifail(err, i, ins, "%s: source buffer %d's box differs from dst's", name,
                         ins->srcs[0]);
        return 0;
    }
    if (!isfinite(k->eps) || k->eps < 0)
        return ifail(err, i, ins, "%s: eps %g is not a finite number >= 0", name, k->eps);
    if (a->rank < 1 || a->rank >= EIN_MAX_RANK)
        return ifail(err, i, ins, "%s: input has rank %d, not 1..%d", name, a->rank,
                     EIN_MAX_RANK - 1);
    const ein_box *w = &p->buffers[ins->srcs[2]].box;
    if (w->rank != 1 || w->lo[0] != 0 || a->lo[a->rank - 1] != 0 ||
        !same_interval(w, 0, a, a->rank - 1))
        return ifail(err, i, ins, "%s: weight buffer %d is not rank 1 over the sources' whole "
                     "last interval [0, d)", name, ins->srcs[2]);
    int ok = out->rank == a->rank + 1 && out->lo[0] == 0 && out->hi[0] == 2;
    for (int d = 0; ok && d < a->rank; d++)
        ok = out->lo[d + 1] == a->lo[d] && out->hi[d + 1] == a->hi[d];
    if (!ok)
        return ifail(err, i, ins, "%s: dst box is not [0, 2) x the sources' box", name);
    return 0;
}

/* The block rules of a ROPE kernel (arity and kind already checked). */
static int check_rope_kernel(const ein_program *p, int i, const ein_instr *ins, ein_error *err)
{
    const ein_kernel *k = &ins->kernel;
    const ein_box *out = &p->buffers[ins->dst].box;
    const ein_box *x = &p->buffers[ins->srcs[0]].box;
    int64_t d = k->head_dim;
    if (x->rank != 2)
        return ifail(err, i, ins, "rope: input has rank %d, not 2 [tokens, hidden]", x->rank);
    if (!ein_box_equal(x, out))
        return ifail(err, i, ins, "rope: source buffer %d's box differs from dst's", ins->srcs[0]);
    /* rotated pairs (2i, 2i+1) stay inside a head, heads inside the block */
    if (d <= 0 || d % 2 != 0)
        return ifail(err, i, ins, "rope: head_dim %lld is not positive and even", (long long)d);
    if (x->lo[1] % d != 0 || x->hi[1] % d != 0)
        return ifail(err, i, ins, "rope: hidden interval [%lld, %lld) not at multiples of head_dim %lld",
                     (long long)x->lo[1], (long long)x->hi[1], (long long)d);
    if (!isfinite(k->theta) || k->theta <= 0)
        return ifail(err, i, ins, "rope: theta %g is not a finite number > 0", k->theta);
    if (k->style < 0 || k->style >= EIN_ROPE_STYLE_COUNT)
        return ifail(err, i, ins, "rope: style %d is not interleaved (0) or half (1)", (int)k->style);
    if (ein_rope_scaling_invalid(&k->scaling))
        return ifail(err, i, ins, "rope: scaling: %s", ein_rope_scaling_invalid(&k->scaling));
    return check_seq_ends(i, ins, x->hi[0], err);
}

/* The block rules of an ATTENTION kernel (arity and kind already checked). */
static int check_attention_kernel(const ein_program *p, int i, const ein_instr *ins, ein_error *err)
{
    const ein_kernel *k = &ins->kernel;
    const ein_box *out = &p->buffers[ins->dst].box;
    const ein_box *x = &p->buffers[ins->srcs[0]].box;
    const ein_box *q = x, *kb = &p->buffers[ins->srcs[1]].box, *vb = &p->buffers[ins->srcs[2]].box;
    int64_t hlo, hhi;
    int rc;
    if (q->rank != 3 || kb->rank != 3 || vb->rank != 3)
        return ifail(err, i, ins, "attention: q, k, v must have rank 3 [heads, tokens, d]");
    if (!ein_box_equal(q, out))
        return ifail(err, i, ins, "attention: q buffer %d's box differs from dst's", ins->srcs[0]);
    if (!ein_box_equal(kb, vb))
        return ifail(err, i, ins, "attention: k and v boxes differ");
    if (k->group < 1)
        return ifail(err, i, ins, "attention: group %lld below 1", (long long)k->group);
    if (__builtin_mul_overflow(kb->lo[0], k->group, &hlo) || __builtin_mul_overflow(kb->hi[0], k->group, &hhi) ||
        q->lo[0] != hlo || q->hi[0] != hhi)
        return ifail(err, i, ins, "attention: q's head interval is not group (%lld) times k's",
                     (long long)k->group);
    if (q->lo[2] != 0 || !same_interval(q, 2, kb, 2))
        return ifail(err, i, ins, "attention: d is not whole and equal in q, k and v");
    if ((rc = check_seq_ends(i, ins, q->hi[1], err)) < 0)
        return rc;
    if (k->window < 0)
        return ifail(err, i, ins, "attention: window %lld is negative", (long long)k->window);
    /* every key of every query: from its sequence's start (or its window's,
     * if later) to itself */
    int64_t need = seq_start(k, q->lo[1]);
    if (k->window > 0 && q->lo[1] - k->window + 1 > need)
        need = q->lo[1] - k->window + 1;
    if (kb->lo[1] > need || kb->hi[1] < q->hi[1])
        return ifail(err, i, ins, "attention: k/v tokens [%lld, %lld) miss keys of queries [%lld, %lld)",
                     (long long)kb->lo[1], (long long)kb->hi[1], (long long)q->lo[1], (long long)q->hi[1]);
    return 0;
}

/* The block rules of an ATTENTION_PARTIAL kernel (arity and kind already checked). */
static int check_attention_partial_kernel(const ein_program *p, int i, const ein_instr *ins, ein_error *err)
{
    const ein_kernel *k = &ins->kernel;
    const ein_box *out = &p->buffers[ins->dst].box;
    const ein_box *x = &p->buffers[ins->srcs[0]].box;
    int n = ins->nsrcs;
    /* One key block's share: q as for ATTENTION, k/v any token
     * interval (or none), dst the f32 rows [0, d + 1) of q's box. */
    const ein_box *q = x;
    ein_box want = ein_agg_box(EIN_AGG_LSE, q);
    int rc;
    if (q->rank != 3)
        return ifail(err, i, ins, "attention_partial: q must have rank 3 [heads, tokens, d]");
    if (!ein_box_equal(&want, out) || p->buffers[ins->dst].dtype != EIN_F32)
        return ifail(err, i, ins, "attention_partial: dst is not f32 over q's box with d + 1 columns");
    if (q->lo[2] != 0)
        return ifail(err, i, ins, "attention_partial: d is not whole in q");
    if (n == 2)
        return ifail(err, i, ins, "attention_partial takes q alone or q, k and v");
    if (k->window < 0)
        return ifail(err, i, ins, "attention_partial: window %lld is negative",
                     (long long)k->window);
    if (n == 3) {
        const ein_box *kb = &p->buffers[ins->srcs[1]].box, *vb = &p->buffers[ins->srcs[2]].box;
        int64_t hlo, hhi;
        if (kb->rank != 3 || !ein_box_equal(kb, vb))
            return ifail(err, i, ins, "attention_partial: k and v boxes differ or are not rank 3");
        if (k->group < 1)
            return ifail(err, i, ins, "attention_partial: group %lld below 1", (long long)k->group);
        if (__builtin_mul_overflow(kb->lo[0], k->group, &hlo) ||
            __builtin_mul_overflow(kb->hi[0], k->group, &hhi) || q->lo[0] != hlo || q->hi[0] != hhi)
            return ifail(err, i, ins, "attention_partial: q's head interval is not group (%lld) "
                         "times k's", (long long)k->group);
        if (!same_interval(q, 2, kb, 2))
            return ifail(err, i, ins, "attention_partial: d differs between q and k/v");
        if ((rc = check_seq_ends(i, ins, kb->hi[1], err)) < 0)
            return rc;
    }
    return check_seq_ends(i, ins, q->hi[1], err);
}

/* The block rules of a REDUCE kernel (arity and kind already checked). */
static int check_reduce_kernel(const ein_program *p, int i, const ein_instr *ins, ein_error *err)
{
    const ein_kernel *k = &ins->kernel;
    const ein_box *out = &p->buffers[ins->dst].box;
    const ein_box *x = &p->buffers[ins->srcs[0]].box;
    if (k->reduce != EIN_AGG_SUM && k->reduce != EIN_AGG_MAX)
        return ifail(err, i, ins, "reduce: op %d is not sum or max", (int)k->reduce);
    if (k->axes == 0 || (k->axes >> x->rank) != 0)
        return ifail(err, i, ins, "reduce: axes 0x%x not a non-empty set of axes below rank %d", k->axes,
                     x->rank);
    int od = 0;
    if (out->rank != x->rank - __builtin_popcount(k->axes))
        return ifail(err, i, ins, "reduce: dst rank %d, want %d", out->rank,
                     x->rank - __builtin_popcount(k->axes));
    for (int d = 0; d < x->rank; d++)
        if (!(k->axes >> d & 1u) && !same_interval(x, d, out, od++))
            return ifail(err, i, ins, "reduce: dst's box is not x's without the reduced axes");
    return 0;
}

/* The block rules of a CONCAT kernel (arity and kind already checked). */
static int check_concat_kernel(const ein_program *p, int i, const ein_instr *ins, ein_error *err)
{
    const ein_kernel *k = &ins->kernel;
    const ein_box *out = &p->buffers[ins->dst].box;
    int n = ins->nsrcs;
    if (k->axis < 0 || k->axis >= out->rank)
        return ifail(err, i, ins, "concat: axis %d out of range for rank %d", k->axis, out->rank);
    if (k->nlist != n)
        return ifail(err, i, ins, "concat: %d offsets for %d sources", k->nlist, n);
    for (int j = 0; j < n; j++) {
        const ein_box *s = &p->buffers[ins->srcs[j]].box;
        int64_t end;
        if (s->rank != out->rank)
            return ifail(err, i, ins, "concat: source buffer %d has rank %d, dst %d", ins->srcs[j], s->rank,
                         out->rank);
        if (j ? k->list[j] <= k->list[j - 1] : k->list[j] < 0)
            return ifail(err, i, ins, "concat: offsets not non-negative and strictly ascending at entry %d", j);
        /* input j spans [list[j], list[j+1]) of dst's axis */
        if (__builtin_add_overflow(k->list[j], s->hi[k->axis], &end) || (j + 1 < n && end > k->list[j + 1]))
            return ifail(err, i, ins, "concat: source buffer %d runs past its part of the axis", ins->srcs[j]);
    }
    return 0;
}

/* The block rules of a SLICE kernel (arity and kind already checked). */
static int check_slice_kernel(const ein_program *p, int i, const ein_instr *ins, ein_error *err)
{
    const ein_kernel *k = &ins->kernel;
    const ein_box *out = &p->buffers[ins->dst].box;
    const ein_box *x = &p->buffers[ins->srcs[0]].box;
    ein_box shifted = *out;
    if (k->axis < 0 || k->axis >= x->rank)
        return ifail(err, i, ins, "slice: axis %d out of range for rank %d", k->axis, x->rank);
    if (k->start < 0)
        return ifail(err, i, ins, "slice: negative start %lld", (long long)k->start);
    if (out->rank != x->rank)
        return ifail(err, i, ins, "slice: dst rank %d differs from the source's %d", out->rank, x->rank);
    if (__builtin_add_overflow(out->lo[k->axis], k->start, &shifted.lo[k->axis]) ||
        __builtin_add_overflow(out->hi[k->axis], k->start, &shifted.hi[k->axis]) ||
        !ein_box_contains(x, &shifted))
        return ifail(err, i, ins, "slice: source buffer %d does not contain dst's box shifted by %lld",
                     ins->srcs[0], (long long)k->start);
    return 0;
}

/* The block rules of an EMBEDDING kernel: table [v0,v1) x [d0,d1) (float)
 * inside `rows` rows, ids [t0,t1) (i32/i64), dst [t0,t1) x [d0,d1). */
static int check_embedding_kernel(const ein_program *p, int i, const ein_instr *ins, ein_error *err)
{
    const ein_pbuffer *tb = &p->buffers[ins->srcs[0]], *ib = &p->buffers[ins->srcs[1]];
    const ein_pbuffer *ob = &p->buffers[ins->dst];
    if (tb->box.rank != 2 || ib->box.rank != 1 || ob->box.rank != 2)
        return ifail(err, i, ins, "embedding: needs a rank-2 table, rank-1 ids and a rank-2 dst, has "
                     "ranks %d, %d and %d", tb->box.rank, ib->box.rank, ob->box.rank);
    if (!ein_dtype_is_float((int)tb->dtype) || ein_dtype_is_float((int)ib->dtype) ||
        !ein_dtype_is_float((int)ob->dtype))
        return ifail(err, i, ins, "embedding: table %s, ids %s, dst %s; want a float table and dst and "
                     "integer ids", ein_dtype_name(tb->dtype), ein_dtype_name(ib->dtype),
                     ein_dtype_name(ob->dtype));
    if (ins->kernel.rows < 1 || tb->box.hi[0] > ins->kernel.rows)
        return ifail(err, i, ins, "embedding: table rows up to %lld but the table has %lld rows",
                     (long long)tb->box.hi[0], (long long)ins->kernel.rows);
    if (!same_interval(&ib->box, 0, &ob->box, 0) || !same_interval(&tb->box, 1, &ob->box, 1))
        return ifail(err, i, ins, "embedding: dst's box is not the ids' tokens by the table's columns");
    return 0;
}

/* Positions: a rank-1 integer buffer over the interval `ax` of `b`. */
static int pos_ok(const ein_pbuffer *pb, const ein_box *b, int ax)
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
static int check_generate_kernel(const ein_program *p, int i, const ein_instr *ins, ein_error *err)
{
    const ein_kernel *k = &ins->kernel;
    const ein_pbuffer *ob = &p->buffers[ins->dst], *x = &p->buffers[ins->srcs[0]];
    const ein_box *o = &ob->box;
    int ok = ein_dtype_is_float((int)ob->dtype) && ein_dtype_is_float((int)x->dtype);
    if (k->kind == EIN_KERNEL_CACHE_WRITE) {
        const ein_pbuffer *nw = &p->buffers[ins->srcs[1]], *ps = &p->buffers[ins->srcs[2]];
        ok = ok && o->rank == 4 && ein_box_equal(o, &x->box) && x->dtype == ob->dtype &&
             nw->box.rank == 3 && ein_dtype_is_float((int)nw->dtype) &&
             same_interval(&nw->box, 0, o, 0) && chunk_interval(&nw->box, 1, o, 1) &&
             same_interval(&nw->box, 2, o, 3) && pos_ok(ps, o, 1) && k->rows >= o->hi[2];
        return ok ? 0 : ifail(err, i, ins, "cache_write: state, x, pos and dst blocks do not match");
    }
    if (k->kind == EIN_KERNEL_ROPE_AT) {
        const ein_pbuffer *ps = &p->buffers[ins->srcs[1]];
        ok = ok && o->rank == 2 && ein_box_equal(o, &x->box) && pos_ok(ps, o, 0) &&
             k->head_dim > 0 && k->head_dim % 2 == 0 && o->lo[1] % k->head_dim == 0 &&
             o->hi[1] % k->head_dim == 0 && k->theta > 0 && isfinite(k->theta) &&
             (k->style == EIN_ROPE_INTERLEAVED || k->style == EIN_ROPE_HALF) &&
             !ein_rope_scaling_invalid(&k->scaling);
        return ok ? 0 : ifail(err, i, ins, "rope_at: x, pos and dst blocks or parameters do not match");
    }
    /* DECODE_ATTENTION(_PARTIAL): q, k, v, pos. */
    const ein_pbuffer *kb = &p->buffers[ins->srcs[1]], *vb = &p->buffers[ins->srcs[2]];
    const ein_pbuffer *ps = &p->buffers[ins->srcs[3]];
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
    return ok ? 0 : ifail(err, i, ins, "%s: q, k, v, pos and dst blocks do not match",
                          ein_kernel_kind_name(k->kind));
}

static int check_kernel(const ein_program *p, int i, const ein_instr *ins, ein_error *err)
{
    const ein_kernel *k = &ins->kernel;
    const ein_box *out = &p->buffers[ins->dst].box;
    const ein_box *x = &p->buffers[ins->srcs[0]].box; /* the instruction arity guarantees a source */
    int n = ins->nsrcs;
    if ((int)k->kind < 0 || k->kind >= EIN_KERNEL_COUNT)
        return ifail(err, i, ins, "invalid kernel kind %d", (int)k->kind);
    const char *name = ein_kernel_kind_name(k->kind);
    ein_error ae = {0};
    if (ein_kernel_check_arity(k->kind, n, &ae) < 0)
        return ifail(err, i, ins, "%s", ae.msg);
    /* The dtype table says which kinds take which dtypes. */
    for (int j = -1; j < n; j++) {
        int b = j < 0 ? ins->dst : ins->srcs[j];
        if (!ein_dtype_kernel_ok((int)p->buffers[b].dtype, (int)k->kind))
            return ifail(err, i, ins, "%s kernel does not take %s buffer %d", name,
                         ein_dtype_name(p->buffers[b].dtype), b);
    }
    /* nlist's range and list's presence were checked for every instruction. */
    if (k->nlist && !kernel_has_list(k->kind))
        return ifail(err, i, ins, "%s kernel takes no list, has %d entries", name, k->nlist);

    switch (k->kind) {
    case EIN_KERNEL_EINSUM:
        return check_einsum(p, i, ins, err);
    case EIN_KERNEL_UNARY:
        return check_unary_kernel(p, i, ins, err);
    case EIN_KERNEL_BINARY:
        return check_binary_kernel(p, i, ins, err);
    case EIN_KERNEL_SOFTMAX:
        return check_softmax_kernel(p, i, ins, err);
    case EIN_KERNEL_RMSNORM:
    case EIN_KERNEL_LAYERNORM:
        return check_norm_kernel(p, i, ins, err);
    case EIN_KERNEL_ROPE:
        return check_rope_kernel(p, i, ins, err);
    case EIN_KERNEL_ATTENTION:
        return check_attention_kernel(p, i, ins, err);
    case EIN_KERNEL_ATTENTION_PARTIAL:
        return check_attention_partial_kernel(p, i, ins, err);
    case EIN_KERNEL_REDUCE:
        return check_reduce_kernel(p, i, ins, err);
    case EIN_KERNEL_CONCAT:
        return check_concat_kernel(p, i, ins, err);
    case EIN_KERNEL_SLICE:
        return check_slice_kernel(p, i, ins, err);
    case EIN_KERNEL_SPLIT_HEADS:
        return check_heads(i, ins, x, out, err);
    case EIN_KERNEL_MERGE_HEADS:
        return check_heads(i, ins, out, x, err);
    case EIN_KERNEL_EMBEDDING:
        return check_embedding_kernel(p, i, ins, err);
    case EIN_KERNEL_CACHE_WRITE:
    case EIN_KERNEL_DECODE_ATTENTION:
    case EIN_KERNEL_DECODE_ATTENTION_PARTIAL:
    case EIN_KERNEL_ROPE_AT:
        return check_generate_kernel(p, i, ins, err);
    case EIN_KERNEL_SWIGLU:
    case EIN_KERNEL_ADD_RMSNORM:
        return check_fused_kernel(p, i, ins, err);
    case EIN_KERNEL_COUNT:
        break;
    }
    return ifail(err, i, ins, "invalid kernel kind %d", (int)k->kind);
}

/* What holds for every kind: a terminated op name, a known kind, deps on
 * earlier instructions, buffer ids in range and a kernel list only on a
 * KERNEL, of a sane length. */
static int check_instr_common(const ein_program *p, int i, const ein_instr *ins, ein_error *err)
{
    if (!memchr(ins->op, '\0', EIN_NAME_MAX))
        return ein_fail(err, EIN_EPROTO, "program: instr %d: op name not NUL-terminated", i);
    if ((int)ins->kind < 0 || ins->kind >= EIN_I_COUNT)
        return ein_fail(err, EIN_EPROTO, "program: instr %d ('%s'): invalid kind %d", i, ins->op, (int)ins->kind);
    if (ins->ndeps < 0 || (ins->ndeps && !ins->deps))
        return ifail(err, i, ins, "bad deps array");
    if (ins->nsrcs < 0 || (ins->nsrcs && !ins->srcs))
        return ifail(err, i, ins, "bad srcs array");
    for (int j = 0; j < ins->ndeps; j++)
        if (ins->deps[j] < 0 || ins->deps[j] >= i)
            return ifail(err, i, ins, "dependency %d is not an earlier instruction", ins->deps[j]);
    for (int j = 0; j < ins->nsrcs; j++)
        if (ins->srcs[j] < 0 || ins->srcs[j] >= p->nbuffers)
            return ifail(err, i, ins, "source buffer %d out of range (%d buffers)", ins->srcs[j], p->nbuffers);
    if (ins->dst < -1 || ins->dst >= p->nbuffers)
        return ifail(err, i, ins, "dst buffer %d out of range (%d buffers)", ins->dst, p->nbuffers);
    /* Every instruction owns its kernel's list (ein_program_free frees it). */
    if (ins->kernel.nlist < 0 || ins->kernel.nlist > EIN_KERNEL_LIST_MAX)
        return ifail(err, i, ins, "kernel list of %d entries (want 0..%d)", ins->kernel.nlist, EIN_KERNEL_LIST_MAX);
    if (!ins->kernel.nlist != !ins->kernel.list)
        return ifail(err, i, ins, "kernel list is %s but has %d entries", ins->kernel.list ? "set" : "NULL",
                     ins->kernel.nlist);
    if (ins->kind != EIN_I_KERNEL && ins->kernel.nlist)
        return ifail(err, i, ins, "a %s instruction carries a kernel list", ein_instr_kind_name(ins->kind));
    return 0;
}

/* The source count and dst presence the kind calls for (kind is valid). */
static int check_arity(int i, const ein_instr *ins, ein_error *err)
{
    /* Source count and dst presence per kind: {min srcs, max srcs, has dst}. */
    static const struct { int lo, hi, dst; } arity[EIN_I_COUNT] = {
        [EIN_I_LOAD] = {0, 0, 1},   [EIN_I_STORE] = {1, 1, 0},
        [EIN_I_KERNEL] = {1, EIN_KERNEL_MAX_INPUTS, 1}, [EIN_I_SLICE] = {1, 1, 1},
        [EIN_I_CONCAT] = {1, INT32_MAX, 1}, [EIN_I_AGG] = {1, INT32_MAX, 1},
        [EIN_I_COPY] = {0, 0, 1},   [EIN_I_NOTIFY] = {1, 1, 0},
        [EIN_I_WAIT] = {0, 0, 0},
    };
    if (ins->nsrcs < arity[ins->kind].lo || ins->nsrcs > arity[ins->kind].hi)
        return ifail(err, i, ins, "%d sources (want %d..%d)", ins->nsrcs, arity[ins->kind].lo,
                     arity[ins->kind].hi);
    if (arity[ins->kind].dst && ins->dst < 0)
        return ifail(err, i, ins, "needs a dst buffer");
    if (!arity[ins->kind].dst && ins->dst != -1)
        return ifail(err, i, ins, "dst must be -1, is %d", ins->dst);
    return 0;
}

/* SLICE: the source's box contains dst's, same dtype. */
static int check_slice(const ein_program *p, int i, const ein_instr *ins, ein_error *err)
{
    const ein_pbuffer *dst = &p->buffers[ins->dst];
    const ein_pbuffer *s = &p->buffers[ins->srcs[0]];
    if (!ein_box_contains(&s->box, &dst->box))
        return ifail(err, i, ins, "source buffer %d's box does not contain dst's", ins->srcs[0]);
    if (s->dtype != dst->dtype)
        return ifail(err, i, ins, "source and dst dtypes differ");
    return 0;
}

/* CONCAT: every source's box lies inside dst's, same dtype. */
static int check_concat(const ein_program *p, int i, const ein_instr *ins, ein_error *err)
{
    const ein_pbuffer *dst = &p->buffers[ins->dst];
    for (int j = 0; j < ins->nsrcs; j++) {
        const ein_pbuffer *s = &p->buffers[ins->srcs[j]];
        if (!ein_box_contains(&dst->box, &s->box))
            return ifail(err, i, ins, "source buffer %d's box is not inside dst's", ins->srcs[j]);
        if (s->dtype != dst->dtype)
            return ifail(err, i, ins, "source buffer %d's dtype differs from dst's", ins->srcs[j]);
    }
    return 0;
}

/* AGG: a known aggregation (lse on f32 rows [0, d + 1)), sources of dst's
 * box and dtype. */
static int check_agg(const ein_program *p, int i, const ein_instr *ins, ein_error *err)
{
    const ein_pbuffer *dst = &p->buffers[ins->dst];
    if (ins->agg != EIN_AGG_SUM && ins->agg != EIN_AGG_MAX && ins->agg != EIN_AGG_LSE)
        return ifail(err, i, ins, "invalid aggregation %d", (int)ins->agg);
    if (!ein_dtype_is_float((int)dst->dtype))
        return ifail(err, i, ins, "aggregation of %s buffers (only float dtypes aggregate)",
                     ein_dtype_name(dst->dtype));
    if (ins->agg == EIN_AGG_LSE &&
        (dst->box.rank < 1 || dst->box.lo[dst->box.rank - 1] != 0 ||
         dst->box.hi[dst->box.rank - 1] < 2 || dst->dtype != EIN_F32))
        return ifail(err, i, ins, "lse aggregation needs f32 rows [0, d + 1) with d >= 1");
    for (int j = 0; j < ins->nsrcs; j++) {
        const ein_pbuffer *s = &p->buffers[ins->srcs[j]];
        if (!ein_box_equal(&dst->box, &s->box) || s->dtype != dst->dtype)
            return ifail(err, i, ins, "source buffer %d's box or dtype differs from dst's", ins->srcs[j]);
    }
    return 0;
}

/* COPY, NOTIFY and WAIT: another device in range; a COPY or WAIT names a
 * peer buffer. */
static int check_peer(const ein_program *p, int i, const ein_instr *ins, ein_error *err)
{
    if (ins->peer < 0 || ins->peer >= p->ndevices)
        return ifail(err, i, ins, "peer %d out of range (%d devices)", ins->peer, p->ndevices);
    if (ins->peer == p->device)
        return ifail(err, i, ins, "peer %d is this device", ins->peer);
    if ((ins->kind == EIN_I_COPY || ins->kind == EIN_I_WAIT) && ins->peer_buf < 0)
        return ifail(err, i, ins, "negative peer buffer id %d", ins->peer_buf);
    return 0;
}

/* Instruction i of p is well formed for its kind: the common checks, its
 * arity, then the kind's own. */
static int check_instr(const ein_program *p, int i, ein_error *err)
{
    const ein_instr *ins = &p->instrs[i];
    int rc;
    if ((rc = check_instr_common(p, i, ins, err)) < 0 || (rc = check_arity(i, ins, err)) < 0)
        return rc;
    switch (ins->kind) {
    case EIN_I_LOAD:
        if ((rc = check_path(i, ins, 0, err)) < 0)
            return rc;
        if ((rc = check_file_shape(p, i, ins, ins->dst, err)) < 0)
            return rc;
        return check_load_source(p, i, ins, err);
    case EIN_I_STORE:
        if ((rc = check_path(i, ins, 1, err)) < 0)
            return rc;
        return check_file_shape(p, i, ins, ins->srcs[0], err);
    case EIN_I_KERNEL:
        return check_kernel(p, i, ins, err);
    case EIN_I_SLICE:
        return check_slice(p, i, ins, err);
    case EIN_I_CONCAT:
        return check_concat(p, i, ins, err);
    case EIN_I_AGG:
        return check_agg(p, i, ins, err);
    case EIN_I_COPY:
    case EIN_I_NOTIFY:
    case EIN_I_WAIT:
        return check_peer(p, i, ins, err);
    default:
        return 0;
    }
}

int ein_program_validate(const ein_program *p, ein_error *err)
{
    int rc;
    if (!p)
        return ein_fail(err, EIN_EPROTO, "program: missing");
    if (p->ndevices < 1 || p->device < 0 || p->device >= p->ndevices)
        return ein_fail(err, EIN_EPROTO, "program: device %d of %d out of range", p->device, p->ndevices);
    if (p->nbuffers < 0 || p->ninstrs < 0 || (p->nbuffers && !p->buffers) || (p->ninstrs && !p->instrs))
        return ein_fail(err, EIN_EPROTO, "program: bad buffer or instruction arrays");
    for (int b = 0; b < p->nbuffers; b++)
        if ((rc = check_buffer(p, b, err)) < 0)
            return rc;
    for (int i = 0; i < p->ninstrs; i++)
        if ((rc = check_instr(p, i, err)) < 0)
            return rc;
    return 0;
}

