/* planner/ops/pl_ops.c — the operator table (pl_ops.h) and the calls through
 * it that planner/pl_spec.h declares (pl_op_indices, pl_op_flops, pl_op_agg,
 * pl_op_agg_idx, pl_op_fspec): the planner reaches an operator's code only
 * here, so planner/ includes nothing of planner/ops/. */
#include "planner/ops/pl_ops.h"

#include <string.h>

#include "common/ir/ein_kernel_cost.h"

/* Generated from common/ir/ein_ops.def's EIN_GRAPH_OP list; inputs have none. */
static const pl_op_def *const op_defs[PL_NODE_KIND_COUNT] = {
#define EIN_GRAPH_OP(kind, def) [PL_##kind] = &pl_op_##def,
#include "common/ir/ein_ops.def"
};

const pl_op_def *pl_op_def_of(pl_node_kind kind)
{
    return (int)kind >= 0 && kind < PL_NODE_KIND_COUNT ? op_defs[kind] : NULL;
}

int pl_indices_every_axis(const pl_graph *g, const pl_node *nd, pl_index *idx)
{
    (void)g;
    for (int i = 0; i < nd->rank; i++)
        idx[i] = pl_index_any((char)('a' + i), nd->axis_name[i], nd->shape[i]);
    return nd->rank;
}

ein_box pl_box_of_intervals(int rank, const int64_t *lo, const int64_t *hi)
{
    ein_box b;
    memset(&b, 0, sizeof b);
    b.rank = rank;
    for (int i = 0; i < rank; i++) {
        b.lo[i] = lo[i];
        b.hi[i] = hi[i];
    }
    return b;
}

ein_agg pl_agg_none(const pl_graph *g, const pl_node *nd, const pl_index *idx, int nidx,
                    const int *counts)
{
    (void)g, (void)nd, (void)idx, (void)nidx, (void)counts;
    return EIN_AGG_NONE;
}

double pl_flops_zero(const pl_graph *g, const pl_node *nd)
{
    (void)g, (void)nd;
    return 0;
}

double pl_flops_kernel(const pl_graph *g, const pl_node *nd)
{
    ein_box out = pl_node_box(nd), in[EIN_KERNEL_COST_SRCS];
    const ein_box *src[EIN_KERNEL_COST_SRCS];
    int n = nd->ninputs;
    for (int j = 0; j < n && j < EIN_KERNEL_COST_SRCS; j++) {
        in[j] = pl_node_box(pl_graph_node(g, nd->inputs[j]));
        src[j] = &in[j];
    }
    return ein_kernel_flops(&nd->kernel, &out, src, n);
}

int pl_op_indices(const pl_graph *g, int node, pl_index *idx, ein_error *err)
{
    const pl_node *nd = pl_graph_node(g, node);
    const pl_op_def *def = nd ? pl_op_def_of(nd->kind) : NULL;
    if (!def)
        return ein_fail(err, EIN_EINVAL, "node %d is not an operator", node);
    int n = def->indices(g, nd, idx);
    if (n < 0)
        return ein_fail(err, EIN_EINVAL, "%s: malformed operator %s", nd->name, def->name);
    /* Labels name indices in reports and JSON keys: keep them distinct. */
    for (int i = 1; i < n; i++)
        for (int j = 0, tries = 0; j < i; j++)
            if (!strcmp(idx[i].label, idx[j].label) && tries++ < 4) {
                size_t l = strnlen(idx[i].label, sizeof idx[i].label - 3);
                idx[i].label[l] = '_';
                idx[i].label[l + 1] = idx[i].name;
                idx[i].label[l + 2] = '\0';
                j = -1;     /* check the new label again */
            }
    return n;
}

double pl_op_flops(const pl_graph *g, int node)
{
    const pl_node *nd = pl_graph_node(g, node);
    const pl_op_def *def = nd ? pl_op_def_of(nd->kind) : NULL;
    return def ? def->flops(g, nd) : 0;
}

ein_agg pl_op_agg(const pl_graph *g, int node, const int *counts)
{
    pl_index idx[PL_MAX_INDICES];
    const pl_node *nd = pl_graph_node(g, node);
    const pl_op_def *def = nd ? pl_op_def_of(nd->kind) : NULL;
    if (!def)
        return EIN_AGG_NONE;
    int n = def->indices(g, nd, idx);
    return n < 0 ? EIN_AGG_NONE : def->agg(g, nd, idx, n, counts);
}

ein_agg pl_op_agg_idx(const pl_graph *g, int node, const pl_index *idx, int nidx,
                      const int *counts)
{
    const pl_node *nd = pl_graph_node(g, node);
    return pl_op_def_of(nd->kind)->agg(g, nd, idx, nidx, counts);
}

void pl_op_fspec(const pl_graph *g, int node, const pl_index *idx, int nidx, const int64_t *lo,
                 const int64_t *hi, ein_box *in, ein_box *out)
{
    const pl_node *nd = pl_graph_node(g, node);
    pl_op_def_of(nd->kind)->fspec(g, nd, idx, nidx, lo, hi, in, out);
}
