/* planner/ops/rope.c — rotary position embedding (LLaMA): interleaved
 * pairs, or halves (style=half, Hugging Face's rotate_half). Both pair
 * elements inside one head, so the specs are the same.
 *
 * x is [tokens, H*head_dim]. Shardable: tokens (any: a block rotates by
 * the true positions of its global token bounds, which kn_cpu_rope derives
 * from the sequence ends) and hidden only at head boundaries (multiples of
 * head_dim). No aggregation. */
#include <stdio.h>
#include <stdlib.h>

#include "planner/ops/pl_ops.h"
#include "planner/pl_graph_int.h"

int pl_graph_add_rope(pl_graph *g, const char *name, int x, int64_t head_dim, double theta,
                      const int64_t *seq_ends, int nseq, ein_error *err)
{
    return pl_graph_add_rope_style(g, name, x, head_dim, theta, seq_ends, nseq,
                                   EIN_ROPE_INTERLEAVED, err);
}

int pl_graph_add_rope_style(pl_graph *g, const char *name, int x, int64_t head_dim, double theta,
                            const int64_t *seq_ends, int nseq, int style, ein_error *err)
{
    int rc;
    if (!g)
        return ein_fail(err, EIN_EINVAL, "rope: NULL graph");
    if (style != EIN_ROPE_INTERLEAVED && style != EIN_ROPE_HALF)
        return ein_fail(err, EIN_EINVAL, "rope: style %d is not interleaved (%d) or half (%d)",
                        style, EIN_ROPE_INTERLEAVED, EIN_ROPE_HALF);
    if ((rc = pl_check_id(g, "rope", x, err)) < 0)
        return rc;
    const pl_node *t = pl_graph_node(g, x);
    char sb[160];
    if (t->rank != 2)
        return ein_fail(err, EIN_ESHAPE, "rope: %s is %s; expected [tokens, heads*head_dim]",
                        t->name, pl_shape_str(sb, sizeof sb, t->rank, t->shape));
    if (head_dim < 2 || head_dim % 2 || t->shape[1] % head_dim)
        return ein_fail(err, EIN_ESHAPE, "rope: head_dim %lld must be even and divide %s's "
                        "hidden size %lld", (long long)head_dim, t->name, (long long)t->shape[1]);
    if (!(theta > 1) || theta > 1e12)
        return ein_fail(err, EIN_EINVAL, "rope: theta %g must be in (1, 1e12]; expected the "
                        "rotary base of the model, e.g. 10000 (LLaMA 2) or 500000 (LLaMA 3)", theta);
    pl_node n;
    pl_node_init_like(&n, g, PL_ROPE, x);   /* rank 2, checked above */
    if ((rc = pl_seq_ends_copy("rope", seq_ends, nseq, t->shape[0], &n.kernel.list, err)) < 0)
        return rc;
    n.kernel.kind = EIN_KERNEL_ROPE;
    n.kernel.head_dim = head_dim;
    n.kernel.theta = theta;
    n.kernel.style = style;
    n.kernel.nlist = nseq;
    int id = pl_graph_append(g, name, &n, err);
    if (id < 0)
        free(n.kernel.list);
    return id;
}

int pl_graph_set_rope_scaling(pl_graph *g, int id, const ein_rope_scaling *s, ein_error *err)
{
    if (!g || !s || id < 0 || id >= g->nnodes ||
        (g->nodes[id].kind != PL_ROPE && g->nodes[id].kind != PL_ROPE_AT))
        return ein_fail(err, EIN_EINVAL, "rope scaling: tensor %d is not a rope or rope_at", id);
    const char *why = ein_rope_scaling_invalid(s);
    if (why)
        return ein_fail(err, EIN_EINVAL, "rope scaling of %s: %s", g->nodes[id].name, why);
    g->nodes[id].kernel.scaling = *s;
    return 0;
}

static int rope_indices(const pl_graph *g, const pl_node *nd, pl_index *idx)
{
    (void)g;
    idx[0] = pl_index_any('a', nd->axis_name[0][0] ? nd->axis_name[0] : "tokens", nd->shape[0]);
    idx[1] = pl_index_any('b', nd->axis_name[1][0] ? nd->axis_name[1] : "hidden", nd->shape[1]);
    idx[1].step = nd->kernel.head_dim;
    return 2;
}

static void rope_fspec(const pl_graph *g, const pl_node *nd, const pl_index *idx, int nidx,
                       const int64_t *lo, const int64_t *hi, ein_box *in, ein_box *out)
{
    (void)g, (void)idx, (void)nidx;
    *out = pl_node_box(nd);
    for (int i = 0; i < 2; i++) {
        out->lo[i] = lo[i];
        out->hi[i] = hi[i];
    }
    in[0] = *out;
}

const pl_op_def pl_op_rope = {"rope", rope_indices, rope_fspec, pl_agg_none, pl_flops_kernel};
