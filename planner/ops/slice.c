/* planner/ops/slice.c — x[..., start:end, ...] along one axis.
 *
 * Shardable: every output axis (any). A block of the output reads the same
 * box of the input shifted by `start` along the axis. No aggregation. */
#include <stdio.h>
#include <stdlib.h>

#include "planner/ops/pl_ops.h"
#include "planner/pl_graph_int.h"

int pl_graph_add_slice(pl_graph *g, const char *name, int x, int axis, int64_t start,
                       int64_t end, ein_error *err)
{
    int rc;
    if (!g)
        return ein_fail(err, EIN_EINVAL, "slice: NULL graph");
    if ((rc = pl_check_id(g, "slice", x, err)) < 0)
        return rc;
    const pl_node *t = pl_graph_node(g, x);
    int a = axis < 0 ? axis + t->rank : axis;
    if (a < 0 || a >= t->rank)
        return ein_fail(err, EIN_ESHAPE, "slice: axis %d is out of range for %s of rank %d",
                        axis, t->name, t->rank);
    if (start < 0 || end > t->shape[a] || start >= end)
        return ein_fail(err, EIN_ESHAPE, "slice: [%lld, %lld) is not a non-empty part of "
                        "%s's axis %d of size %lld", (long long)start, (long long)end, t->name,
                        a, (long long)t->shape[a]);
    pl_node n;
    pl_node_init_like(&n, g, PL_SLICE, x);
    n.shape[a] = end - start;
    if (n.shape[a] != t->shape[a])
        n.axis_name[a][0] = '\0';
    n.kernel.kind = EIN_KERNEL_SLICE;
    n.kernel.axis = a;
    n.kernel.start = start;
    return pl_graph_append(g, name, &n, err);
}

static void slice_fspec(const pl_graph *g, const pl_node *nd, const pl_index *idx, int nidx,
                        const int64_t *lo, const int64_t *hi, ein_box *in, ein_box *out)
{
    (void)g, (void)idx, (void)nidx;
    *out = pl_box_of_intervals(nd->rank, lo, hi);
    in[0] = *out;
    in[0].lo[nd->kernel.axis] += nd->kernel.start;
    in[0].hi[nd->kernel.axis] += nd->kernel.start;
}

const pl_op_def pl_op_slice = {"slice", pl_indices_every_axis, slice_fspec, pl_agg_none, pl_flops_zero};
