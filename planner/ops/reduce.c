/* planner/ops/reduce.c — sum or max over a set of axes.
 *
 * Shardable: every input axis (any). A block that holds part of a reduced
 * axis yields a partial result over the output block (the input's box
 * without the reduced axes); partials of the same output block combine
 * with the reduction's own op (+ for sum, max for max). */
#include <stdio.h>
#include <stdlib.h>

#include "planner/ops/pl_ops.h"
#include "planner/pl_graph_int.h"

int pl_graph_add_reduce(pl_graph *g, const char *name, ein_agg op, uint32_t axes, int x,
                        ein_error *err)
{
    int rc;
    if (!g)
        return ein_fail(err, EIN_EINVAL, "reduce: NULL graph");
    if (op != EIN_AGG_SUM && op != EIN_AGG_MAX)
        return ein_fail(err, EIN_EINVAL, "reduce: op must be sum or max");
    const char *what = op == EIN_AGG_SUM ? "reduce_sum" : "reduce_max";
    if ((rc = pl_check_id(g, what, x, err)) < 0)
        return rc;
    const pl_node *t = pl_graph_node(g, x);
    if (axes == 0 || axes >> t->rank)
        return ein_fail(err, EIN_ESHAPE, "%s: axes mask 0x%x does not name axes of %s (rank %d)",
                        what, axes, t->name, t->rank);
    pl_node n;
    memset(&n, 0, sizeof n);
    n.kind = PL_REDUCE;
    n.dtype = t->dtype;
    for (int i = 0; i < t->rank; i++)
        if (!(axes >> i & 1)) {
            memcpy(n.axis_name[n.rank], t->axis_name[i], PL_AXIS_NAME_MAX);
            n.shape[n.rank++] = t->shape[i];
        }
    if (n.rank == 0)
        return ein_fail(err, EIN_ESHAPE, "%s: reducing every axis of %s leaves a scalar; "
                        "rank-0 results are not supported (keep one axis)", what, t->name);
    n.ninputs = 1;
    n.inputs[0] = x;
    n.kernel.kind = EIN_KERNEL_REDUCE;
    n.kernel.axes = axes;
    n.kernel.reduce = op;
    return pl_graph_append(g, name, &n, err);
}

static int reduce_indices(const pl_graph *g, const pl_node *nd, pl_index *idx)
{
    const pl_node *t = pl_graph_node(g, nd->inputs[0]);
    for (int i = 0; i < t->rank; i++)
        idx[i] = pl_index_any((char)('a' + i), t->axis_name[i], t->shape[i]);
    return t->rank;
}

static void reduce_fspec(const pl_graph *g, const pl_node *nd, const pl_index *idx, int nidx,
                         const int64_t *lo, const int64_t *hi, ein_box *in, ein_box *out)
{
    (void)g, (void)idx;
    memset(&in[0], 0, sizeof in[0]);
    memset(out, 0, sizeof *out);
    in[0].rank = nidx;
    for (int i = 0; i < nidx; i++) {
        in[0].lo[i] = lo[i];
        in[0].hi[i] = hi[i];
        if (!(nd->kernel.axes >> i & 1)) {
            out->lo[out->rank] = lo[i];
            out->hi[out->rank++] = hi[i];
        }
    }
}

static ein_agg reduce_agg(const pl_graph *g, const pl_node *nd, const pl_index *idx, int nidx,
                          const int *counts)
{
    (void)g, (void)idx;
    for (int i = 0; i < nidx; i++)
        if (counts[i] > 1 && (nd->kernel.axes >> i & 1))
            return nd->kernel.reduce;
    return EIN_AGG_NONE;
}

const pl_op_def pl_op_reduce = {"reduce", reduce_indices, reduce_fspec, reduce_agg, pl_flops_kernel};
