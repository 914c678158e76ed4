/* planner/ops/binary.c — elementwise binary operators with numpy
 * broadcasting (add, sub, mul, div, maximum).
 *
 * Every output axis is shardable (any). An input's block is its projection
 * on its own axes: aligned to the right of the output, the output's
 * interval where the input has the output's size, and [0, 1) along an axis
 * it broadcasts (size 1 where the output is larger); this is exactly what
 * kn_cpu_binary accepts. Also the builder pl_graph_add_binary (shape
 * inference). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "planner/ops/pl_ops.h"
#include "planner/pl_graph_int.h"

int pl_graph_add_binary(pl_graph *g, const char *name, ein_binary op, int a, int b,
                        ein_error *err)
{
    int rc;
    if (!g)
        return ein_fail(err, EIN_EINVAL, "binary: NULL graph");
    if ((int)op < 0 || op >= EIN_BIN_COUNT)
        return ein_fail(err, EIN_EINVAL, "binary: invalid operator %d", (int)op);
    const char *what = ein_binary_op_name(op);
    if ((rc = pl_check_id(g, what, a, err)) < 0 || (rc = pl_check_id(g, what, b, err)) < 0)
        return rc;
    const pl_node *ta = &g->nodes[a], *tb = &g->nodes[b];
    /* numpy broadcasting: align to the right; sizes equal or one of them 1. */
    int rank = ta->rank > tb->rank ? ta->rank : tb->rank;
    int64_t shape[EIN_MAX_RANK];
    for (int i = 0; i < rank; i++) {
        int ia = i - (rank - ta->rank), ib = i - (rank - tb->rank);
        int64_t sa = ia >= 0 ? ta->shape[ia] : 1, sb = ib >= 0 ? tb->shape[ib] : 1;
        if (sa != sb && sa != 1 && sb != 1) {
            char b1[160], b2[160];
            return ein_fail(err, EIN_ESHAPE, "%s: %s is %s but %s is %s; shapes must be equal "
                            "or broadcast (numpy rules: aligned right, each dim equal or 1)",
                            what, ta->name, pl_shape_str(b1, sizeof b1, ta->rank, ta->shape),
                            tb->name, pl_shape_str(b2, sizeof b2, tb->rank, tb->shape));
        }
        shape[i] = sa == 1 ? sb : sa;
    }
    if (ta->dtype != tb->dtype)
        return ein_fail(err, EIN_ESHAPE, "%s: %s is %s but %s is %s; operands need one dtype",
                        what, ta->name, ein_dtype_name(ta->dtype),
                        tb->name, ein_dtype_name(tb->dtype));
    pl_node n;
    memset(&n, 0, sizeof n);
    n.kind = PL_BINARY;
    n.dtype = ta->dtype;
    n.rank = rank;
    memcpy(n.shape, shape, sizeof shape[0] * (size_t)rank);
    for (int i = 0; i < rank; i++) {
        int ia = i - (rank - ta->rank), ib = i - (rank - tb->rank);
        const char *nm = ia >= 0 && ta->shape[ia] == shape[i] && ta->axis_name[ia][0] ? ta->axis_name[ia]
                       : ib >= 0 && tb->shape[ib] == shape[i] ? tb->axis_name[ib] : "";
        memcpy(n.axis_name[i], nm, strlen(nm) + 1);
    }
    n.ninputs = 2;
    n.inputs[0] = a;
    n.inputs[1] = b;
    n.kernel.kind = EIN_KERNEL_BINARY;
    n.kernel.binary = op;
    return pl_graph_append(g, name, &n, err);
}


static void binary_fspec(const pl_graph *g, const pl_node *nd, const pl_index *idx, int nidx,
                         const int64_t *lo, const int64_t *hi, ein_box *in, ein_box *out)
{
    (void)idx, (void)nidx;
    *out = pl_box_of_intervals(nd->rank, lo, hi);
    for (int k = 0; k < 2; k++) {
        const pl_node *u = pl_graph_node(g, nd->inputs[k]);
        int shift = nd->rank - u->rank;
        memset(&in[k], 0, sizeof in[k]);
        in[k].rank = u->rank;
        for (int a = 0; a < u->rank; a++) {
            if (u->shape[a] == 1 && nd->shape[a + shift] != 1) {
                in[k].lo[a] = 0;
                in[k].hi[a] = 1;
            } else {
                in[k].lo[a] = lo[a + shift];
                in[k].hi[a] = hi[a + shift];
            }
        }
    }
}

const pl_op_def pl_op_binary = {"binary", pl_indices_every_axis, binary_fspec, pl_agg_none, pl_flops_kernel};
