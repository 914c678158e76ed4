/* planner/ops/reshape.c — the reshapes of a transformer:
 * split_heads [T, H*D] -> [H, T, D] and merge_heads [H, T, D] -> [T, H*D].
 *
 * Shardable: tokens (any) and heads (any, i.e. the hidden dim at multiples
 * of D). A block maps box to box: [h0,h1) x [t0,t1) x [0,D) of the
 * head-major side is [t0,t1) x [h0*D, h1*D) of the token-major side. */
#include <stdio.h>
#include <stdlib.h>

#include "planner/ops/pl_ops.h"
#include "planner/pl_graph_int.h"

int pl_graph_add_split_heads(pl_graph *g, const char *name, int x, int64_t head_dim,
                             ein_error *err)
{
    int rc;
    if (!g)
        return ein_fail(err, EIN_EINVAL, "split_heads: NULL graph");
    if ((rc = pl_check_id(g, "split_heads", x, err)) < 0)
        return rc;
    const pl_node *t = pl_graph_node(g, x);
    char sb[160];
    if (t->rank != 2 || head_dim < 1 || t->shape[1] % head_dim)
        return ein_fail(err, EIN_ESHAPE, "split_heads: %s is %s; expected [tokens, heads*%lld]",
                        t->name, pl_shape_str(sb, sizeof sb, t->rank, t->shape),
                        (long long)head_dim);
    pl_node n;
    memset(&n, 0, sizeof n);
    n.kind = PL_SPLIT_HEADS;
    n.dtype = t->dtype;
    n.rank = 3;
    n.shape[0] = t->shape[1] / head_dim;
    n.shape[1] = t->shape[0];
    n.shape[2] = head_dim;
    memcpy(n.axis_name[1], t->axis_name[0], PL_AXIS_NAME_MAX);
    n.ninputs = 1;
    n.inputs[0] = x;
    n.kernel.kind = EIN_KERNEL_SPLIT_HEADS;
    n.kernel.head_dim = head_dim;
    return pl_graph_append(g, name, &n, err);
}

int pl_graph_add_merge_heads(pl_graph *g, const char *name, int x, ein_error *err)
{
    int rc;
    if (!g)
        return ein_fail(err, EIN_EINVAL, "merge_heads: NULL graph");
    if ((rc = pl_check_id(g, "merge_heads", x, err)) < 0)
        return rc;
    const pl_node *t = pl_graph_node(g, x);
    char sb[160];
    if (t->rank != 3)
        return ein_fail(err, EIN_ESHAPE, "merge_heads: %s is %s; expected [heads, tokens, "
                        "head_dim]", t->name, pl_shape_str(sb, sizeof sb, t->rank, t->shape));
    pl_node n;
    memset(&n, 0, sizeof n);
    n.kind = PL_MERGE_HEADS;
    n.dtype = t->dtype;
    n.rank = 2;
    n.shape[0] = t->shape[1];
    n.shape[1] = t->shape[0] * t->shape[2];
    memcpy(n.axis_name[0], t->axis_name[1], PL_AXIS_NAME_MAX);
    memcpy(n.axis_name[1], "hidden", sizeof "hidden");
    if ((rc = pl_check_shape("merge_heads", name ? name : "the result", 2, n.shape, err)) < 0)
        return rc;
    n.ninputs = 1;
    n.inputs[0] = x;
    n.kernel.kind = EIN_KERNEL_MERGE_HEADS;
    n.kernel.head_dim = t->shape[2];
    return pl_graph_append(g, name, &n, err);
}

/* Index 0 = tokens, 1 = heads, for both directions. */
static int reshape_indices(const pl_graph *g, const pl_node *nd, pl_index *idx)
{
    (void)g;
    int split = nd->kind == PL_SPLIT_HEADS;
    int64_t tokens = split ? nd->shape[1] : nd->shape[0];
    int64_t heads = split ? nd->shape[0] : nd->shape[1] / nd->kernel.head_dim;
    const char *tn = nd->axis_name[split ? 1 : 0];
    idx[0] = pl_index_any('a', tn[0] ? tn : "tokens", tokens);
    idx[1] = pl_index_any('b', "heads", heads);
    return 2;
}

static void reshape_fspec(const pl_graph *g, const pl_node *nd, const pl_index *idx, int nidx,
                          const int64_t *lo, const int64_t *hi, ein_box *in, ein_box *out)
{
    (void)g, (void)idx, (void)nidx;
    int64_t d = nd->kernel.head_dim;
    ein_box tm, hm;     /* token-major [T, H*D] and head-major [H, T, D] */
    memset(&tm, 0, sizeof tm);
    memset(&hm, 0, sizeof hm);
    tm.rank = 2;
    tm.lo[0] = lo[0];
    tm.hi[0] = hi[0];
    tm.lo[1] = lo[1] * d;
    tm.hi[1] = hi[1] * d;
    hm.rank = 3;
    hm.lo[0] = lo[1];
    hm.hi[0] = hi[1];
    hm.lo[1] = lo[0];
    hm.hi[1] = hi[0];
    hm.hi[2] = d;
    if (nd->kind == PL_SPLIT_HEADS) {
        in[0] = tm;
        *out = hm;
    } else {
        in[0] = hm;
        *out = tm;
    }
}

const pl_op_def pl_op_split_heads = {"split_heads", reshape_indices, reshape_fspec, pl_agg_none,
                                     pl_flops_zero};
const pl_op_def pl_op_merge_heads = {"merge_heads", reshape_indices, reshape_fspec, pl_agg_none,
                                     pl_flops_zero};
