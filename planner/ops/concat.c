/* planner/ops/concat.c — concatenation along one axis.
 *
 * Shardable: every output axis (any). Input i sits at offsets[i] along the
 * axis (kernel.list); a block of the output reads, from each input, the
 * part of it that overlaps the block, in the input's own coordinates. An
 * input that does not overlap the block gets an empty box (its interval
 * along the axis is [x, x)): the function specification does not read it,
 * and neither the join nor the repartition cost counts it. */
#include <stdio.h>
#include <stdlib.h>

#include "planner/ops/pl_ops.h"
#include "planner/pl_graph_int.h"

int pl_graph_add_concat(pl_graph *g, const char *name, int axis, const int *xs, int n,
                        ein_error *err)
{
    int rc;
    if (!g || (!xs && n > 0))
        return ein_fail(err, EIN_EINVAL, "concat: NULL graph or inputs");
    if (n < 1 || n > PL_MAX_INPUTS)
        return ein_fail(err, EIN_EINVAL, "concat: %d inputs; expected 1 to %d", n, PL_MAX_INPUTS);
    for (int k = 0; k < n; k++)
        if ((rc = pl_check_id(g, "concat", xs[k], err)) < 0)
            return rc;
    const pl_node *t0 = pl_graph_node(g, xs[0]);
    int a = axis < 0 ? axis + t0->rank : axis;
    if (a < 0 || a >= t0->rank)
        return ein_fail(err, EIN_ESHAPE, "concat: axis %d is out of range for %s of rank %d",
                        axis, t0->name, t0->rank);
    pl_node nd;
    memset(&nd, 0, sizeof nd);
    nd.kernel.list = malloc(sizeof(int64_t) * (size_t)(n + 1));
    if (!nd.kernel.list)
        return ein_fail(err, EIN_ENOMEM, "concat: out of memory");
    int64_t off = 0;
    for (int k = 0; k < n; k++) {
        const pl_node *t = pl_graph_node(g, xs[k]);
        int ok = t->rank == t0->rank && t->dtype == t0->dtype;
        for (int i = 0; ok && i < t->rank; i++)
            ok = i == a || t->shape[i] == t0->shape[i];
        if (!ok) {
            char s1[160], s2[160];
            free(nd.kernel.list);
            return ein_fail(err, EIN_ESHAPE, "concat: %s is %s %s but %s is %s %s; inputs must "
                            "agree in dtype and in every dim but axis %d", t0->name,
                            pl_shape_str(s1, sizeof s1, t0->rank, t0->shape),
                            ein_dtype_name(t0->dtype), t->name,
                            pl_shape_str(s2, sizeof s2, t->rank, t->shape),
                            ein_dtype_name(t->dtype), a);
        }
        nd.kernel.list[k] = off;
        off += t->shape[a];
        nd.inputs[k] = xs[k];
    }
    nd.kernel.list[n] = off;
    nd.kind = PL_CONCAT;
    nd.dtype = t0->dtype;
    nd.rank = t0->rank;
    memcpy(nd.shape, t0->shape, sizeof nd.shape);
    memcpy(nd.axis_name, t0->axis_name, sizeof nd.axis_name);
    nd.axis_name[a][0] = '\0';
    nd.shape[a] = off;
    if ((rc = pl_check_shape("concat", name ? name : "the result", nd.rank, nd.shape, err)) < 0) {
        free(nd.kernel.list);
        return rc;
    }
    nd.ninputs = n;
    nd.kernel.kind = EIN_KERNEL_CONCAT;
    nd.kernel.axis = a;
    /* The kernel (and a Program's validator) take the n offsets; the
     * total after them is kept for the planner (input i spans
     * [list[i], list[i+1]) along the axis) but not counted in nlist. */
    nd.kernel.nlist = n;
    int id = pl_graph_append(g, name, &nd, err);
    if (id < 0)
        free(nd.kernel.list);
    return id;
}

static void concat_fspec(const pl_graph *g, const pl_node *nd, const pl_index *idx, int nidx,
                         const int64_t *lo, const int64_t *hi, ein_box *in, ein_box *out)
{
    (void)idx, (void)nidx;
    int a = nd->kernel.axis;
    *out = pl_box_of_intervals(nd->rank, lo, hi);
    for (int k = 0; k < nd->ninputs; k++) {
        const pl_node *t = pl_graph_node(g, nd->inputs[k]);
        int64_t off = nd->kernel.list[k];
        in[k] = *out;
        int64_t l = lo[a] - off, h = hi[a] - off;
        l = l < 0 ? 0 : l;
        h = h > t->shape[a] ? t->shape[a] : h;
        if (h <= l)     /* not read: an empty box at the nearest edge */
            l = h = l > 0 ? t->shape[a] : 0;
        in[k].lo[a] = l;
        in[k].hi[a] = h;
    }
}

const pl_op_def pl_op_concat = {"concat", pl_indices_every_axis, concat_fspec, pl_agg_none,
                                pl_flops_zero};
