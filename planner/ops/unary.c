/* planner/ops/unary.c — elementwise unary operators (relu, silu, gelu, exp,
 * neg, sigmoid, tanh, square, gelu_exact, scale and add by a constant: the
 * list in common/ir/ein_ops.def): the builder
 * pl_graph_add_unary (shape inference) and the specs.
 *
 * Every axis is shardable (any); the input block is the output block. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "planner/ops/pl_ops.h"
#include "planner/pl_graph_int.h"

int pl_graph_add_unary(pl_graph *g, const char *name, ein_unary op, double scalar,
                       int x, ein_error *err)
{
    int rc;
    if (!g)
        return ein_fail(err, EIN_EINVAL, "unary: NULL graph");
    if ((int)op < 0 || op >= EIN_UN_COUNT)
        return ein_fail(err, EIN_EINVAL, "unary: invalid operator %d", (int)op);
    if ((rc = pl_check_id(g, ein_unary_name(op), x, err)) < 0)
        return rc;
    if (ein_unary_takes_scalar(op) && !isfinite(scalar))
        return ein_fail(err, EIN_EINVAL, "%s: constant %g is not finite", ein_unary_name(op), scalar);
    pl_node n;
    pl_node_init_like(&n, g, PL_UNARY, x);
    n.inputs[1] = -1;
    n.kernel.kind = EIN_KERNEL_UNARY;
    n.kernel.unary = op;
    /* Only scale and addc have a constant; 0 elsewhere keeps equal operators
     * bitwise equal. */
    n.kernel.scalar = ein_unary_takes_scalar(op) ? scalar : 0.0;
    return pl_graph_append(g, name, &n, err);
}


static void unary_fspec(const pl_graph *g, const pl_node *nd, const pl_index *idx, int nidx,
                        const int64_t *lo, const int64_t *hi, ein_box *in, ein_box *out)
{
    (void)g, (void)idx, (void)nidx;
    *out = pl_box_of_intervals(nd->rank, lo, hi);
    in[0] = *out;
}

const pl_op_def pl_op_unary = {"unary", pl_indices_every_axis, unary_fspec, pl_agg_none, pl_flops_kernel};
