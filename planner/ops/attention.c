/* planner/ops/attention.c — fused causal attention with grouped-query heads
 * over packed sequences (the paper's Example 3.10).
 *
 * q and the output are [heads_q, seq, d]; k and v are [heads_kv, seq, d];
 * query head h uses kv head h / group with group = heads_q / heads_kv.
 * Shardable: heads_kv (any) and seq only at the sequence ends the program
 * gives (a causal query attends to keys of its own sequence only, so a
 * block of whole sequences holds every key it needs). heads_q follows
 * heads_kv: kv heads [a, b) go with query heads [group*a, group*b). The
 * head dim is never split. Beyond the paper (issue 13): query blocks and
 * key blocks inside a block of sequences, balanced by causal work, with
 * the log-sum-exp merge when keys are split (see attention_indices).
 *
 * Sliding window W > 0 (issue 34): query t attends only keys u with
 * t - W < u <= t. Work is counted in the window's pairs, so query blocks
 * balance the windowed work, and a query block's keys start at its first
 * query's window (keys before it are never given to the block, the key
 * blocks tile only the windowed keys: a key block wholly outside every
 * window is never formed). */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/ops/pl_ops.h"
#include "planner/pl_graph_int.h"

int pl_graph_add_attention(pl_graph *g, const char *name, int q, int k, int v,
                           const int64_t *seq_ends, int nseq, int64_t window, ein_error *err)
{
    int rc;
    if (!g)
        return ein_fail(err, EIN_EINVAL, "attention: NULL graph");
    if (window < 0)
        return ein_fail(err, EIN_EINVAL, "attention: window %lld is negative; expected a "
                        "sliding window W >= 1 (or 0: none)", (long long)window);
    if ((rc = pl_check_id(g, "attention", q, err)) < 0 ||
        (rc = pl_check_id(g, "attention", k, err)) < 0 ||
        (rc = pl_check_id(g, "attention", v, err)) < 0)
        return rc;
    const pl_node *tq = pl_graph_node(g, q), *tk = pl_graph_node(g, k), *tv = pl_graph_node(g, v);
    char s1[160], s2[160], s3[160];
    pl_shape_str(s1, sizeof s1, tq->rank, tq->shape);
    pl_shape_str(s2, sizeof s2, tk->rank, tk->shape);
    pl_shape_str(s3, sizeof s3, tv->rank, tv->shape);
    if (tq->rank != 3 || tk->rank != 3 || tv->rank != 3)
        return ein_fail(err, EIN_ESHAPE, "attention: %s is %s, %s is %s, %s is %s; expected "
                        "q [heads_q, seq, d] and k, v [heads_kv, seq, d]", tq->name, s1,
                        tk->name, s2, tv->name, s3);
    if (tk->shape[0] != tv->shape[0] || tk->shape[1] != tv->shape[1] ||
        tk->shape[2] != tv->shape[2] || tq->shape[1] != tk->shape[1] ||
        tq->shape[2] != tk->shape[2])
        return ein_fail(err, EIN_ESHAPE, "attention: %s is %s, %s is %s, %s is %s; k and v "
                        "must have one shape and share seq and d with q", tq->name, s1,
                        tk->name, s2, tv->name, s3);
    if (tq->shape[0] % tk->shape[0])
        return ein_fail(err, EIN_ESHAPE, "attention: %lld query heads (%s) are not a multiple "
                        "of %lld kv heads (%s)", (long long)tq->shape[0], tq->name,
                        (long long)tk->shape[0], tk->name);
    if (tq->dtype != tk->dtype || tq->dtype != tv->dtype)
        return ein_fail(err, EIN_ESHAPE, "attention: q, k and v need one dtype");
    pl_node n;
    pl_node_init_like(&n, g, PL_ATTENTION, q);   /* rank 3, checked above */
    if ((rc = pl_seq_ends_copy("attention", seq_ends, nseq, tq->shape[1], &n.kernel.list,
                               err)) < 0)
        return rc;
    n.ninputs = 3;
    n.inputs[1] = k;
    n.inputs[2] = v;
    n.kernel.kind = EIN_KERNEL_ATTENTION;
    n.kernel.group = tq->shape[0] / tk->shape[0];
    n.kernel.window = window;
    n.kernel.nlist = nseq;
    int id = pl_graph_append(g, name, &n, err);
    if (id < 0)
        free(n.kernel.list);
    return id;
}

/* Query and key blocks (issue 13). Inside a block of whole sequences
 * [A, B) (the seq index), the causal (query, key) pairs form one triangle
 * per sequence. q_blocks:nq cuts the queries where the count of pairs
 * reaches i/nq of the block's total, so every query block holds the same
 * work; k_blocks:nk then cuts each query block's keys (from the start of
 * its first query's sequence to its last query) where the pairs of that
 * query block reach j/nk of its total. A function specification is one
 * (query block, key block) rectangle: only pairs below the diagonal are
 * ever in it (the kernel skips the rest), and each holds 1/(nq nk) of the
 * block's pairs up to rounding at whole tokens. With nk > 1 the outputs of
 * one query block's key blocks are partials merged with EIN_AGG_LSE.
 *
 * Both indices are fractions: an `any` index over PL_ATT_FRACTION (= lcm
 * of 1..16) split into at most PL_ATT_MAX_BLOCKS near-equal intervals, so
 * the interval [lo, hi) is exactly part lo/(hi-lo) of M/(hi-lo). */
#define PL_ATT_FRACTION 720720
#define PL_ATT_MAX_BLOCKS 16

static int attention_indices(const pl_graph *g, const pl_node *nd, pl_index *idx)
{
    const pl_node *k = pl_graph_node(g, nd->inputs[1]);
    idx[0] = pl_index_any('a', "heads_kv", k->shape[0]);
    idx[1] = pl_index_any('b', nd->axis_name[1][0] ? nd->axis_name[1] : "seq", nd->shape[1]);
    /* Split points: the sequence ends but the last (the end of the tensor). */
    idx[1].any = 0;
    idx[1].pos = nd->kernel.list;
    idx[1].npos = nd->kernel.nlist > 0 ? nd->kernel.nlist - 1 : 0;
    /* No more query blocks than tokens in the shortest sequence (a block
     * of whole sequences then has a token for each query block). */
    int64_t lmin = nd->kernel.nlist > 0 ? nd->kernel.list[0] : nd->shape[1];
    for (int i = 1; i < nd->kernel.nlist; i++)
        if (nd->kernel.list[i] - nd->kernel.list[i - 1] < lmin)
            lmin = nd->kernel.list[i] - nd->kernel.list[i - 1];
    int cap = lmin < PL_ATT_MAX_BLOCKS ? (int)(lmin > 0 ? lmin : 1) : PL_ATT_MAX_BLOCKS;
    idx[2] = pl_index_any('c', "q_blocks", PL_ATT_FRACTION);
    idx[2].maxcount = cap;
    idx[3] = pl_index_any('d', "k_blocks", PL_ATT_FRACTION);
    idx[3].maxcount = cap;
    return 4;
}

/* The sequence ends as a list (one sequence of the whole tensor if none). */
static void att_seqs(const pl_node *nd, const int64_t **ends, int *n, int64_t *one)
{
    if (nd->kernel.nlist > 0) {
        *ends = nd->kernel.list;
        *n = nd->kernel.nlist;
    } else {
        *one = nd->shape[1];
        *ends = one;
        *n = 1;
    }
}

/* Causal pairs (t, u), t in [qa, qb), u in [s(t), min(y, t + 1)), for one
 * sequence [s, e) (u < y: keys before y). */
static double att_pairs_seq(int64_t s, int64_t e, int64_t qa, int64_t qb, int64_t y)
{
    int64_t a = qa > s ? qa : s, b = qb < e ? qb : e;
    if (a >= b || y <= s)
        return 0;
    /* t in [a, min(b, y)): t + 1 - s each; t in [max(a, y), b): y - s each. */
    double n = 0;
    int64_t m = b < y ? b : y;
    if (m > a)
        n += (double)(m - a) * (double)((a + 1 - s) + (m - s)) / 2.0;
    int64_t c = a > y ? a : y;
    if (b > c)
        n += (double)(b - c) * (double)(y - s);
    return n;
}

/* The same inside a sliding window w (0: none): key u also needs
 * u > t - w. The keys before t's window are the causal keys of query
 * t - w (in t's sequence), so those pairs are subtracted. */
static double att_pairs_seq_w(int64_t s, int64_t e, int64_t w, int64_t qa, int64_t qb, int64_t y)
{
    double n = att_pairs_seq(s, e, qa, qb, y);
    if (w > 0 && e - w > s)
        n -= att_pairs_seq(s, e - w, qa - w, qb - w, y);
    return n;
}

/* Pairs with query in [qa, qb) and key before y, over the sequences
 * meeting [qa, qb), inside window w. */
static double att_pairs(const int64_t *ends, int n, int64_t w, int64_t qa, int64_t qb, int64_t y)
{
    double sum = 0;
    /* The first sequence ending after qa, by bisection (ends increase):
     * with many short sequences a linear scan dominated planning. */
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (ends[mid] <= qa)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (int i = lo; i < n; i++) {
        int64_t s = i ? ends[i - 1] : 0, e = ends[i];
        if (s >= qb)
            break;
        sum += att_pairs_seq_w(s, e, w, qa, qb, y);
    }
    return sum;
}

double pl_attention_pairs(const pl_node *nd, const ein_box *q, const ein_box *kv)
{
    const int64_t *ends;
    int n;
    int64_t one;
    att_seqs(nd, &ends, &n, &one);
    if (ein_box_empty(q) || ein_box_empty(kv))
        return 0;
    double heads = (double)(q->hi[0] - q->lo[0]);
    int64_t w = nd->kernel.window;
    return heads * (att_pairs(ends, n, w, q->lo[1], q->hi[1], kv->hi[1]) -
                    att_pairs(ends, n, w, q->lo[1], q->hi[1], kv->lo[1]));
}

/* Smallest x in [lo, hi] with f(x) >= target, f non-decreasing. */
typedef double (*att_fn)(const int64_t *ends, int n, int64_t w, int64_t a, int64_t b,
                         int64_t x);
static double att_queries_before(const int64_t *ends, int n, int64_t w, int64_t a, int64_t b,
                                 int64_t x)
{
    (void)b;
    return att_pairs(ends, n, w, a, x, x);   /* keys of a query never pass it */
}
static double att_keys_before(const int64_t *ends, int n, int64_t w, int64_t a, int64_t b,
                              int64_t x)
{
    return att_pairs(ends, n, w, a, b, x);
}
static int64_t att_search(att_fn f, const int64_t *ends, int n, int64_t w, int64_t a, int64_t b,
                          int64_t lo, int64_t hi, double target)
{
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (f(ends, n, w, a, b, mid) >= target)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* cut[0..parts]: [lo, hi) cut where f reaches i/parts of its total, kept
 * strictly increasing when hi - lo allows (else non-decreasing). */
static void att_cuts(att_fn f, const int64_t *ends, int n, int64_t w, int64_t a, int64_t b,
                     int64_t lo, int64_t hi, int parts, int64_t *cut)
{
    /* cut[] has room for PL_ATT_MAX_BLOCKS + 1 bounds (attention_fspec). */
    assert(parts >= 1 && parts <= PL_ATT_MAX_BLOCKS);
    assert(lo <= hi && n >= 1);
    double total = f(ends, n, w, a, b, hi) - f(ends, n, w, a, b, lo);
    double base = f(ends, n, w, a, b, lo);
    int strict = hi - lo >= parts;
    cut[0] = lo;
    cut[parts] = hi;
    for (int i = 1; i < parts; i++) {
        int64_t c = att_search(f, ends, n, w, a, b, lo, hi, base + total * i / parts);
        int64_t min = cut[i - 1] + (strict ? 1 : 0), max = hi - (strict ? parts - i : 0);
        cut[i] = c < min ? min : c > max ? max : c;
    }
}

/* att_cuts remembered: every function specification of one spec (and the
 * specs sharing a token block) asks for the same cuts, and with many short
 * sequences recomputing them dominated planning (issue 21: 32 blocks of
 * 128x1K at P = 72). A small direct-mapped table per thread, keyed by
 * everything the cuts depend on (the sequence ends by a hash of their
 * values and their count, never by address), so a hit is exactly the
 * recomputed value. */
#define ATT_MEMO 64
typedef struct att_memo {
    int used, parts, keys;
    int n;
    int64_t w;
    uint64_t ends_h;
    int64_t a, b, lo, hi;
    int64_t cut[PL_ATT_MAX_BLOCKS + 1];
} att_memo;

static _Thread_local att_memo att_memo_tab[ATT_MEMO];

static uint64_t att_ends_hash(const int64_t *ends, int n)
{
    uint64_t h = 1469598103934665603ULL ^ (uint64_t)n;
    for (int i = 0; i < n; i++)
        h = (h ^ (uint64_t)ends[i]) * 1099511628211ULL;
    return h;
}

static void att_cuts_memo(int keys, uint64_t eh, const int64_t *ends, int n, int64_t w,
                          int64_t a, int64_t b, int64_t lo, int64_t hi, int parts, int64_t *cut)
{
    uint64_t k = eh ^ ((uint64_t)a * 0x9e3779b97f4a7c15ULL) ^ ((uint64_t)b * 0xbf58476d1ce4e5b9ULL) ^
                 ((uint64_t)lo * 0x94d049bb133111ebULL) ^ ((uint64_t)hi << 7) ^
                 ((uint64_t)parts << 1) ^ (uint64_t)keys ^ ((uint64_t)w * 0xd6e8feb86659fd93ULL);
    k ^= k >> 29;
    att_memo *m = &att_memo_tab[k % ATT_MEMO];
    if (m->used && m->keys == keys && m->n == n && m->w == w && m->ends_h == eh && m->a == a &&
        m->b == b &&
        m->lo == lo && m->hi == hi && m->parts == parts) {
        memcpy(cut, m->cut, sizeof(int64_t) * (size_t)(parts + 1));
        return;
    }
    att_cuts(keys ? att_keys_before : att_queries_before, ends, n, w, a, b, lo, hi, parts, cut);
    *m = (att_memo){.used = 1, .parts = parts, .keys = keys, .n = n, .w = w, .ends_h = eh,
                    .a = a, .b = b, .lo = lo, .hi = hi};
    memcpy(m->cut, cut, sizeof(int64_t) * (size_t)(parts + 1));
}

static void attention_fspec(const pl_graph *g, const pl_node *nd, const pl_index *idx, int nidx,
                            const int64_t *lo, const int64_t *hi, ein_box *in, ein_box *out)
{
    (void)g, (void)idx, (void)nidx;
    int64_t grp = nd->kernel.group, w = nd->kernel.window;
    const int64_t *ends;
    int n;
    int64_t one, qc[PL_ATT_MAX_BLOCKS + 1], kc[PL_ATT_MAX_BLOCKS + 1];
    att_seqs(nd, &ends, &n, &one);
    int64_t A = lo[1], B = hi[1];
    /* The block indices are `any` fractions of PL_ATT_FRACTION cut into at
     * most PL_ATT_MAX_BLOCKS equal parts (attention_indices' maxcount):
     * interval [lo, hi) is part lo/(hi-lo) of PL_ATT_FRACTION/(hi-lo). */
    for (int x = 2; x < 4; x++) {
        assert(hi[x] > lo[x] && PL_ATT_FRACTION % (hi[x] - lo[x]) == 0);
        assert(lo[x] % (hi[x] - lo[x]) == 0);
    }
    int nq = (int)(PL_ATT_FRACTION / (hi[2] - lo[2])), iq = (int)(lo[2] / (hi[2] - lo[2]));
    int nk = (int)(PL_ATT_FRACTION / (hi[3] - lo[3])), ik = (int)(lo[3] / (hi[3] - lo[3]));
    assert(nq >= 1 && nq <= PL_ATT_MAX_BLOCKS && iq >= 0 && iq < nq);
    assert(nk >= 1 && nk <= PL_ATT_MAX_BLOCKS && ik >= 0 && ik < nk);
    assert(A <= B);
    int64_t qa = A, qb = B, ka, kb;
    uint64_t eh = nq > 1 || nk > 1 ? att_ends_hash(ends, n) : 0;
    if (nq > 1) {
        att_cuts_memo(0, eh, ends, n, w, A, B, A, B, nq, qc);
        qa = qc[iq];
        qb = qc[iq + 1];
    }
    /* Keys of the query block: from its first query's sequence start, or
     * its window's start if later. */
    int64_t s0 = 0;
    for (int i = 0; i < n && ends[i] <= qa; i++)
        s0 = ends[i];
    if (w > 0 && qa - w + 1 > s0)
        s0 = qa - w + 1;
    ka = s0;
    kb = qb;
    if (nk > 1) {
        att_cuts_memo(1, eh, ends, n, w, qa, qb, s0, qb, nk, kc);
        ka = kc[ik];
        kb = kc[ik + 1];
    }
    assert(A <= qa && qa <= qb && qb <= B && ka <= kb);
    ein_box kv = pl_node_box(pl_graph_node(g, nd->inputs[1]));
    kv.lo[0] = lo[0];
    kv.hi[0] = hi[0];
    kv.lo[1] = ka;
    kv.hi[1] = kb;
    *out = pl_node_box(nd);
    out->lo[0] = grp * lo[0];
    out->hi[0] = grp * hi[0];
    out->lo[1] = qa;
    out->hi[1] = qb;
    in[0] = *out;
    if (nq == 1 && nk == 1) {
        /* The paper's spec: every key of the block of sequences. */
        kv.lo[1] = A;
        kv.hi[1] = B;
    }
    in[1] = kv;
    in[2] = kv;
}

static ein_agg attention_agg(const pl_graph *g, const pl_node *nd, const pl_index *idx,
                             int nidx, const int *counts)
{
    (void)g, (void)nd, (void)idx;
    return nidx > 3 && counts[3] > 1 ? EIN_AGG_LSE : EIN_AGG_NONE;
}

const pl_op_def pl_op_attention = {"attention", attention_indices, attention_fspec, attention_agg,
                                   pl_flops_kernel};
