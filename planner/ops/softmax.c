/* planner/ops/softmax.c — softmax over one axis.
 *
 * Shardable: every axis but the normalised one (any); that axis stays
 * whole in every block, as kn_cpu_softmax requires. No aggregation. */
#include <stdio.h>
#include <stdlib.h>

#include "planner/ops/pl_ops.h"
#include "planner/pl_graph_int.h"

int pl_graph_add_softmax(pl_graph *g, const char *name, int x, int axis, ein_error *err)
{
    int rc;
    if (!g)
        return ein_fail(err, EIN_EINVAL, "softmax: NULL graph");
    if ((rc = pl_check_id(g, "softmax", x, err)) < 0)
        return rc;
    const pl_node *t = pl_graph_node(g, x);
    int a = axis < 0 ? axis + t->rank : axis;
    if (a < 0 || a >= t->rank)
        return ein_fail(err, EIN_ESHAPE, "softmax: axis %d is out of range for %s of rank %d",
                        axis, t->name, t->rank);
    pl_node n;
    pl_node_init_like(&n, g, PL_SOFTMAX, x);
    n.kernel.kind = EIN_KERNEL_SOFTMAX;
    n.kernel.axis = a;
    return pl_graph_append(g, name, &n, err);
}

static int softmax_indices(const pl_graph *g, const pl_node *nd, pl_index *idx)
{
    (void)g;
    int n = 0;
    for (int i = 0; i < nd->rank; i++)
        if (i != nd->kernel.axis)
            idx[n++] = pl_index_any((char)('a' + i), nd->axis_name[i], nd->shape[i]);
    return n;
}

/* Axis i of a box: the interval of its index, or whole when not shardable. */
static void softmax_fspec(const pl_graph *g, const pl_node *nd, const pl_index *idx, int nidx,
                          const int64_t *lo, const int64_t *hi, ein_box *in, ein_box *out)
{
    (void)g;
    *out = pl_node_box(nd);
    for (int j = 0; j < nidx; j++) {
        int a = idx[j].name - 'a';
        out->lo[a] = lo[j];
        out->hi[a] = hi[j];
    }
    in[0] = *out;
}

const pl_op_def pl_op_softmax = {"softmax", softmax_indices, softmax_fspec, pl_agg_none,
                                 pl_flops_kernel};
