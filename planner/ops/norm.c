/* planner/ops/norm.c — RMSNorm and LayerNorm over the last axis.
 *
 * Shardable: every axis but the last (any). The normalised axis stays
 * whole, and the weight (and bias) blocks are the whole vector [0, d):
 * every function specification reads them entirely (replicated). */
#include <stdio.h>
#include <stdlib.h>

#include "planner/ops/pl_ops.h"
#include "planner/pl_graph_int.h"

int pl_graph_add_norm(pl_graph *g, const char *name, int x, int w, int b, double eps,
                      ein_error *err)
{
    int rc;
    const char *what = b >= 0 ? "layernorm" : "rmsnorm";
    if (!g)
        return ein_fail(err, EIN_EINVAL, "%s: NULL graph", what);
    if ((rc = pl_check_id(g, what, x, err)) < 0 || (rc = pl_check_id(g, what, w, err)) < 0 ||
        (b >= 0 && (rc = pl_check_id(g, what, b, err)) < 0))
        return rc;
    if (!(eps > 0) || eps > 1)
        return ein_fail(err, EIN_EINVAL, "%s: eps %g must be in (0, 1]; expected a small positive number such "
                        "as 1e-5", what, eps);
    const pl_node *t = pl_graph_node(g, x);
    int64_t d = t->shape[t->rank - 1];
    int ids[2] = {w, b};
    for (int k = 0; k < (b >= 0 ? 2 : 1); k++) {
        const pl_node *p = pl_graph_node(g, ids[k]);
        char sb[160];
        if (p->rank != 1 || p->shape[0] != d)
            return ein_fail(err, EIN_ESHAPE, "%s: %s is %s but %s's last dim is %lld; the %s "
                            "must be a vector of that size", what, p->name,
                            pl_shape_str(sb, sizeof sb, p->rank, p->shape), t->name,
                            (long long)d, k ? "bias" : "weight");
        if (p->dtype != t->dtype)
            return ein_fail(err, EIN_ESHAPE, "%s: %s is %s but %s is %s; operands need one dtype",
                            what, t->name, ein_dtype_name(t->dtype), p->name,
                            ein_dtype_name(p->dtype));
    }
    pl_node n;
    pl_node_init_like(&n, g, b >= 0 ? PL_LAYERNORM : PL_RMSNORM, x);
    n.ninputs = b >= 0 ? 3 : 2;
    n.inputs[1] = w;
    n.inputs[2] = b;
    n.kernel.kind = b >= 0 ? EIN_KERNEL_LAYERNORM : EIN_KERNEL_RMSNORM;
    n.kernel.eps = eps;
    return pl_graph_append(g, name, &n, err);
}

static int norm_indices(const pl_graph *g, const pl_node *nd, pl_index *idx)
{
    (void)g;
    for (int i = 0; i < nd->rank - 1; i++)
        idx[i] = pl_index_any((char)('a' + i), nd->axis_name[i], nd->shape[i]);
    return nd->rank - 1;
}

static void norm_fspec(const pl_graph *g, const pl_node *nd, const pl_index *idx, int nidx,
                       const int64_t *lo, const int64_t *hi, ein_box *in, ein_box *out)
{
    (void)g, (void)idx;
    *out = pl_node_box(nd);
    for (int i = 0; i < nidx; i++) {
        out->lo[i] = lo[i];
        out->hi[i] = hi[i];
    }
    in[0] = *out;
    int64_t d = nd->shape[nd->rank - 1];
    for (int k = 1; k < nd->ninputs; k++)
        in[k] = ein_box_of_shape(1, &d);
}

const pl_op_def pl_op_rmsnorm = {"rmsnorm", norm_indices, norm_fspec, pl_agg_none, pl_flops_kernel};
const pl_op_def pl_op_layernorm = {"layernorm", norm_indices, norm_fspec, pl_agg_none, pl_flops_kernel};
