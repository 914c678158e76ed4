/* planner/ops/generate.c — the operators of generation (issue 25): a
 * key/value cache written at run-time positions, attention of one new token
 * per sequence over that cache, and rotary embedding at run-time positions.
 *
 * Layouts: a cache is [heads_kv, batch, len, d] (a state tensor, written in
 * place: pl_graph_add_state); new keys or values are [heads_kv, batch*C, d]
 * (split_heads of [batch*C, heads_kv*d]): C new tokens per sequence, C = 1
 * for a decode step, C > 1 for a prefill chunk, sequence b's tokens at rows
 * [b*C, (b+1)*C); queries [heads_q, batch*C, d]; pos [batch] (i32 or i64)
 * is each sequence's position of its first new token, so token t of the
 * chunk sits at pos + t and its keys are [0, pos + t] after the write
 * (causal within the chunk).
 *
 * cache_write: shardable heads_kv, batch and len (a block writes the new
 * rows only where they fall inside its len interval). Its output is the
 * state's own buffer (co_lower), so the state's tiling on the devices is
 * cache_write's spec; a state with several cache_writes gets one spec for
 * all of them, the first enumerated (pl_spec.c).
 * decode_attention: shardable heads_kv (query heads follow in groups),
 * batch, and the cached keys (FlashDecoding's split-K): key blocks give
 * log-sum-exp partials merged by EIN_AGG_LSE; a block whose keys all lie
 * past a sequence's pos, or before its sliding window (kernel.window W > 0:
 * token at position p sees keys (p - W, p]), is skipped at run time (the
 * merge's identity): positions are run-time values, so the key blocks
 * cannot be cut to the window at plan time.
 * rope_at: shardable tokens (with their pos) and heads. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "planner/ops/pl_ops.h"
#include "planner/pl_graph_int.h"

#define PL_DECODE_MAX_KBLOCKS 16

static int pos_check(const char *what, int kind, const pl_node *p, int64_t batch, ein_error *err)
{
    char sb[160];
    if (p->rank != 1 || p->shape[0] != batch)
        return ein_fail(err, EIN_ESHAPE, "%s: positions %s are %s; expected [%lld] (one per "
                        "sequence)", what, p->name, pl_shape_str(sb, sizeof sb, p->rank, p->shape),
                        (long long)batch);
    /* the integer dtypes the table lets kernel `kind` read positions in */
    if (ein_dtype_is_float((int)p->dtype) || !ein_dtype_kernel_ok((int)p->dtype, kind))
        return ein_fail(err, EIN_ESHAPE, "%s: positions %s are %s; expected %s", what,
                        p->name, ein_dtype_name(p->dtype),
                        ein_dtype_list((char[64]){0}, 64, 0, kind, EIN_DTYPE_BY_NAME));
    return 0;
}

int pl_graph_add_cache_write(pl_graph *g, const char *name, int state, int x, int pos,
                             ein_error *err)
{
    int rc;
    char s1[160], s2[160];
    const char *what = "cache_write";
    if (!g)
        return ein_fail(err, EIN_EINVAL, "%s: NULL graph", what);
    if ((rc = pl_check_id(g, what, state, err)) < 0 || (rc = pl_check_id(g, what, x, err)) < 0 ||
        (rc = pl_check_id(g, what, pos, err)) < 0)
        return rc;
    const pl_node *s = pl_graph_node(g, state), *n = pl_graph_node(g, x);
    if (s->kind != PL_INPUT || !s->state)
        return ein_fail(err, EIN_EINVAL, "%s: %s is not a state tensor; expected one "
                        "declared with `state`", what, s->name);
    /* Several cache_writes of one state (a prefill chunk's and a decode
     * step's) are allowed: each run is then one entry point that needs at
     * most one of them (coordinator/compile/co_entries.h), and they share one
     * tiling (pl_spec_enumerate). */
    if (s->rank != 4 || n->rank != 3 || n->shape[0] != s->shape[0] || s->shape[1] <= 0 ||
        n->shape[1] <= 0 || n->shape[1] % s->shape[1] || n->shape[2] != s->shape[3])
        return ein_fail(err, EIN_ESHAPE, "%s: state %s is %s and new %s is %s; expected "
                        "[heads_kv, batch, len, d] and [heads_kv, batch*C, d] (C new tokens "
                        "per sequence)", what, s->name,
                        pl_shape_str(s1, sizeof s1, s->rank, s->shape), n->name,
                        pl_shape_str(s2, sizeof s2, n->rank, n->shape));
    if (!ein_dtype_is_float((int)n->dtype))
        return ein_fail(err, EIN_ESHAPE, "%s: new %s is %s; expected %s", what,
                        n->name, ein_dtype_name(n->dtype), ein_dtype_float_names());
    if ((rc = pos_check(what, EIN_KERNEL_CACHE_WRITE, pl_graph_node(g, pos), s->shape[1], err)) < 0)
        return rc;
    pl_node nd;
    pl_node_init_like(&nd, g, PL_CACHE_WRITE, state);
    nd.ninputs = 3;
    nd.inputs[1] = x;
    nd.inputs[2] = pos;
    nd.kernel.kind = EIN_KERNEL_CACHE_WRITE;
    nd.kernel.rows = s->shape[2];
    return pl_graph_append(g, name, &nd, err);
}

static int cache_write_indices(const pl_graph *g, const pl_node *nd, pl_index *idx)
{
    (void)g;
    idx[0] = pl_index_any('a', nd->axis_name[0][0] ? nd->axis_name[0] : "heads_kv", nd->shape[0]);
    idx[1] = pl_index_any('b', nd->axis_name[1][0] ? nd->axis_name[1] : "batch", nd->shape[1]);
    idx[2] = pl_index_any('c', nd->axis_name[2][0] ? nd->axis_name[2] : "len", nd->shape[2]);
    return 3;
}

static void cache_write_fspec(const pl_graph *g, const pl_node *nd, const pl_index *idx, int nidx,
                              const int64_t *lo, const int64_t *hi, ein_box *in, ein_box *out)
{
    (void)idx, (void)nidx;
    int64_t d = nd->shape[3];
    int64_t c = pl_graph_node(g, nd->inputs[1])->shape[1] / nd->shape[1]; /* tokens per sequence */
    *out = pl_box_of_intervals(4, (int64_t[]){lo[0], lo[1], lo[2], 0},
                               (int64_t[]){hi[0], hi[1], hi[2], d});
    in[0] = *out;
    in[1] = pl_box_of_intervals(3, (int64_t[]){lo[0], c * lo[1], 0},
                                (int64_t[]){hi[0], c * hi[1], d});
    in[2] = pl_box_of_intervals(1, &lo[1], &hi[1]);
}

const pl_op_def pl_op_cache_write = {"cache_write", cache_write_indices, cache_write_fspec,
                                     pl_agg_none, pl_flops_zero};

int pl_graph_add_decode_attention(pl_graph *g, const char *name, int q, int k, int v, int pos,
                                  int64_t window, ein_error *err)
{
    int rc;
    char s1[160], s2[160], s3[160];
    const char *what = "decode_attention";
    if (!g)
        return ein_fail(err, EIN_EINVAL, "%s: NULL graph", what);
    if (window < 0)
        return ein_fail(err, EIN_EINVAL, "%s: window %lld is negative; expected a sliding "
                        "window W >= 1 (or 0: none)", what, (long long)window);
    if ((rc = pl_check_id(g, what, q, err)) < 0 || (rc = pl_check_id(g, what, k, err)) < 0 ||
        (rc = pl_check_id(g, what, v, err)) < 0 || (rc = pl_check_id(g, what, pos, err)) < 0)
        return rc;
    const pl_node *tq = pl_graph_node(g, q), *tk = pl_graph_node(g, k), *tv = pl_graph_node(g, v);
    int ok = tq->rank == 3 && tk->rank == 4 && tv->rank == 4;
    for (int a = 0; ok && a < 4; a++)
        ok = tk->shape[a] == tv->shape[a];
    ok = ok && tk->shape[1] > 0 && tq->shape[1] > 0 && tq->shape[1] % tk->shape[1] == 0 &&
         tq->shape[2] == tk->shape[3] && tk->shape[0] > 0 && tq->shape[0] % tk->shape[0] == 0;
    if (!ok)
        return ein_fail(err, EIN_ESHAPE, "%s: q %s is %s, k %s is %s, v %s is %s; expected q "
                        "[heads_q, batch*C, d] (C new tokens per sequence) and k, v [heads_kv, "
                        "batch, len, d] with heads_q a multiple of heads_kv", what, tq->name,
                        pl_shape_str(s1, sizeof s1, tq->rank, tq->shape), tk->name,
                        pl_shape_str(s2, sizeof s2, tk->rank, tk->shape), tv->name,
                        pl_shape_str(s3, sizeof s3, tv->rank, tv->shape));
    if (tq->dtype != tk->dtype || tq->dtype != tv->dtype || !ein_dtype_is_float((int)tq->dtype))
        return ein_fail(err, EIN_ESHAPE, "%s: q, k and v need one float dtype", what);
    if ((rc = pos_check(what, EIN_KERNEL_DECODE_ATTENTION, pl_graph_node(g, pos), tk->shape[1],
                        err)) < 0)
        return rc;
    pl_node nd;
    pl_node_init_like(&nd, g, PL_DECODE_ATTENTION, q);
    nd.ninputs = 4;
    nd.inputs[1] = k;
    nd.inputs[2] = v;
    nd.inputs[3] = pos;
    nd.kernel.kind = EIN_KERNEL_DECODE_ATTENTION;
    nd.kernel.group = tq->shape[0] / tk->shape[0];
    nd.kernel.window = window;
    return pl_graph_append(g, name, &nd, err);
}

static int decode_attention_indices(const pl_graph *g, const pl_node *nd, pl_index *idx)
{
    const pl_node *k = pl_graph_node(g, nd->inputs[1]);
    idx[0] = pl_index_any('a', "heads_kv", k->shape[0]);
    /* One token per sequence: q's own name for the batch axis, as before. */
    const char *bn = nd->shape[1] == k->shape[1] && nd->axis_name[1][0] ? nd->axis_name[1] : "batch";
    idx[1] = pl_index_any('b', bn, k->shape[1]);
    idx[2] = pl_index_any('c', "k_blocks", k->shape[2]);
    idx[2].maxcount = PL_DECODE_MAX_KBLOCKS;
    return 3;
}

static void decode_attention_fspec(const pl_graph *g, const pl_node *nd, const pl_index *idx,
                                   int nidx, const int64_t *lo, const int64_t *hi, ein_box *in,
                                   ein_box *out)
{
    (void)idx, (void)nidx;
    int64_t grp = nd->kernel.group, d = nd->shape[2];
    int64_t c = nd->shape[1] / pl_graph_node(g, nd->inputs[1])->shape[1]; /* tokens per sequence */
    *out = pl_box_of_intervals(3, (int64_t[]){grp * lo[0], c * lo[1], 0},
                               (int64_t[]){grp * hi[0], c * hi[1], d});
    in[0] = *out;
    in[1] = pl_box_of_intervals(4, (int64_t[]){lo[0], lo[1], lo[2], 0},
                                (int64_t[]){hi[0], hi[1], hi[2], d});
    in[2] = in[1];
    in[3] = pl_box_of_intervals(1, &lo[1], &hi[1]);
}

static ein_agg decode_attention_agg(const pl_graph *g, const pl_node *nd, const pl_index *idx,
                                    int nidx, const int *counts)
{
    (void)g, (void)nd, (void)idx, (void)nidx;
    return counts[2] > 1 ? EIN_AGG_LSE : EIN_AGG_NONE;
}

const pl_op_def pl_op_decode_attention = {"decode_attention", decode_attention_indices,
                                          decode_attention_fspec, decode_attention_agg,
                                          pl_flops_kernel};

int pl_graph_add_rope_at(pl_graph *g, const char *name, int x, int pos, int64_t head_dim,
                         double theta, int style, ein_error *err)
{
    int rc;
    char sb[160];
    const char *what = "rope_at";
    if (!g)
        return ein_fail(err, EIN_EINVAL, "%s: NULL graph", what);
    if ((rc = pl_check_id(g, what, x, err)) < 0 || (rc = pl_check_id(g, what, pos, err)) < 0)
        return rc;
    const pl_node *t = pl_graph_node(g, x);
    if (t->rank != 2 || head_dim <= 0 || head_dim % 2 || t->shape[1] % head_dim)
        return ein_fail(err, EIN_ESHAPE, "%s: %s is %s with head_dim %lld; expected [tokens, "
                        "heads*head_dim] with an even head_dim", what, t->name,
                        pl_shape_str(sb, sizeof sb, t->rank, t->shape), (long long)head_dim);
    if (!ein_dtype_is_float((int)t->dtype))
        return ein_fail(err, EIN_ESHAPE, "%s: %s is %s; expected %s", what,
                        t->name, ein_dtype_name(t->dtype), ein_dtype_float_names());
    if (!(theta > 0) || !isfinite(theta))
        return ein_fail(err, EIN_EINVAL, "%s: theta %g is not a positive number", what, theta);
    if (style != EIN_ROPE_INTERLEAVED && style != EIN_ROPE_HALF)
        return ein_fail(err, EIN_EINVAL, "%s: unknown style %d", what, style);
    if ((rc = pos_check(what, EIN_KERNEL_ROPE_AT, pl_graph_node(g, pos), t->shape[0], err)) < 0)
        return rc;
    pl_node nd;
    pl_node_init_like(&nd, g, PL_ROPE_AT, x);
    nd.ninputs = 2;
    nd.inputs[1] = pos;
    nd.kernel.kind = EIN_KERNEL_ROPE_AT;
    nd.kernel.head_dim = head_dim;
    nd.kernel.theta = theta;
    nd.kernel.style = style;
    return pl_graph_append(g, name, &nd, err);
}

static int rope_at_indices(const pl_graph *g, const pl_node *nd, pl_index *idx)
{
    (void)g;
    idx[0] = pl_index_any('t', nd->axis_name[0], nd->shape[0]);
    idx[1] = pl_index_any('h', nd->axis_name[1], nd->shape[1]);
    idx[1].step = nd->kernel.head_dim;
    return 2;
}

static void rope_at_fspec(const pl_graph *g, const pl_node *nd, const pl_index *idx, int nidx,
                          const int64_t *lo, const int64_t *hi, ein_box *in, ein_box *out)
{
    (void)g, (void)nd, (void)idx, (void)nidx;
    *out = pl_box_of_intervals(2, lo, hi);
    in[0] = *out;
    in[1] = pl_box_of_intervals(1, &lo[0], &hi[0]);
}

const pl_op_def pl_op_rope_at = {"rope_at", rope_at_indices, rope_at_fspec, pl_agg_none,
                                 pl_flops_kernel};
