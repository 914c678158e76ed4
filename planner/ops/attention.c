/* planner/ops/attention.c — fused causal attention with grouped-query heads
 * over packed sequences (the paper's Example 3.10).
 *
 * q and the output are [heads_q, seq, d]; k and v are [heads_kv, seq, d];
 * query head h uses kv head h / group with group = heads_q / heads_kv.
 * Shardable: heads_kv (any) and seq only at the sequence ends the program
 * gives (a causal query attends to keys of its own sequence only, so a
 * block of whole sequences holds every key it needs). heads_q follows
 * heads_kv: kv heads [a, b) go with query heads [group*a, group*b). The
 * head dim is never split. No aggregation. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "planner/ops/pl_ops.h"
#include "planner/pl_graph_int.h"

int pl_graph_add_attention(pl_graph *g, const char *name, int q, int k, int v,
                           const int64_t *seq_ends, int nseq, ein_error *err)
{
    int rc;
    if (!g)
        return ein_fail(err, EIN_EINVAL, "attention: NULL graph");
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
    memset(&n, 0, sizeof n);
    if ((rc = pl_seq_ends_copy("attention", seq_ends, nseq, tq->shape[1], &n.kernel.list,
                               err)) < 0)
        return rc;
    n.kind = PL_ATTENTION;
    n.dtype = tq->dtype;
    n.rank = 3;
    memcpy(n.shape, tq->shape, sizeof n.shape);
    memcpy(n.axis_name, tq->axis_name, sizeof n.axis_name);
    n.ninputs = 3;
    n.inputs[0] = q;
    n.inputs[1] = k;
    n.inputs[2] = v;
    n.kernel.kind = EIN_KERNEL_ATTENTION;
    n.kernel.group = tq->shape[0] / tk->shape[0];
    n.kernel.nlist = nseq;
    int id = pl_graph_append(g, name, &n, err);
    if (id < 0)
        free(n.kernel.list);
    return id;
}

static int attention_indices(const pl_graph *g, const pl_node *nd, pl_index *idx)
{
    const pl_node *k = pl_graph_node(g, nd->inputs[1]);
    idx[0] = pl_index_any('a', "heads_kv", k->shape[0]);
    idx[1] = pl_index_any('b', nd->axis_name[1][0] ? nd->axis_name[1] : "seq", nd->shape[1]);
    /* Split points: the sequence ends but the last (the end of the tensor). */
    idx[1].any = 0;
    idx[1].pos = nd->kernel.list;
    idx[1].npos = nd->kernel.nlist > 0 ? nd->kernel.nlist - 1 : 0;
    return 2;
}

static void attention_fspec(const pl_graph *g, const pl_node *nd, const pl_index *idx, int nidx,
                            const int64_t *lo, const int64_t *hi, ein_box *in, ein_box *out)
{
    (void)g, (void)idx, (void)nidx;
    int64_t grp = nd->kernel.group;
    ein_box kv = pl_node_box(pl_graph_node(g, nd->inputs[1]));
    kv.lo[0] = lo[0];
    kv.hi[0] = hi[0];
    kv.lo[1] = lo[1];
    kv.hi[1] = hi[1];
    *out = pl_node_box(nd);
    out->lo[0] = grp * lo[0];
    out->hi[0] = grp * hi[0];
    out->lo[1] = lo[1];
    out->hi[1] = hi[1];
    in[0] = *out;
    in[1] = kv;
    in[2] = kv;
}

/* Causal: per query head, per sequence of length L, about L^2/2 scores and
 * as many weighted values, each 2*d flops. */
static double attention_flops(const pl_graph *g, const pl_node *nd)
{
    (void)g;
    double pairs = 0, prev = 0;
    if (nd->kernel.nlist == 0) {
        double l = (double)nd->shape[1];
        pairs = l * (l + 1) / 2;
    }
    for (int i = 0; i < nd->kernel.nlist; i++) {
        double l = (double)nd->kernel.list[i] - prev;
        pairs += l * (l + 1) / 2;
        prev = (double)nd->kernel.list[i];
    }
    return 4.0 * (double)nd->shape[2] * pairs * (double)nd->shape[0];
}

const pl_op_def pl_op_attention = {"attention", attention_indices, attention_fspec, pl_agg_none,
                                   attention_flops};
