/* planner/ops/pl_ops.h — the operator table (private to the planner).
 *
 * Each abstract operator lives in its own file in planner/ops/ with its
 * builder (shape inference, in pl_graph.h), and fills one pl_op_def:
 *  - indices: its shardable indices, each `any`, split at multiples of a
 *    step, or only at listed positions (pl_index);
 *  - fspec: ONE function specification from the interval of every index
 *    (the generic pl_spec_make enumerates the combinations, so an operator
 *    only says how intervals map onto its input and output boxes). An
 *    input the block does not need gets an empty box (lo == hi);
 *  - agg: how outputs with the same type combine, given the counts;
 *  - flops: the operator's arithmetic, for reports.
 * The optimizer never calls these directly; it goes through pl_spec.h. */
#ifndef PL_OPS_H
#define PL_OPS_H

#include <string.h>

#include "planner/pl_graph.h"
#include "planner/pl_spec.h"

typedef struct pl_op_def {
    const char *name;
    int (*indices)(const pl_graph *g, const pl_node *nd, pl_index *idx);
    void (*fspec)(const pl_graph *g, const pl_node *nd, const pl_index *idx, int nidx,
                  const int64_t *lo, const int64_t *hi, ein_box *in, ein_box *out);
    ein_agg (*agg)(const pl_graph *g, const pl_node *nd, const pl_index *idx, int nidx,
                   const int *counts);
    double (*flops)(const pl_graph *g, const pl_node *nd);
} pl_op_def;

/* One per operator of common/ir/ein_ops.def's EIN_GRAPH_OP list. */
#define EIN_GRAPH_OP(kind, def) extern const pl_op_def pl_op_##def;
#include "common/ir/ein_ops.def"

/* The definition of an operator kind; NULL for inputs. */
const pl_op_def *pl_op_def_of(pl_node_kind kind);

/* An `any` index named by the letter `name`, labelled with the dim name
 * (or the letter when the dim has none). */
static inline pl_index pl_index_any(char name, const char *label, int64_t size)
{
    pl_index ix;
    memset(&ix, 0, sizeof ix);
    ix.name = name;
    if (label && label[0]) {
        size_t n = strnlen(label, sizeof ix.label - 1);
        memcpy(ix.label, label, n);
    } else
        ix.label[0] = name;
    ix.size = size;
    ix.any = 1;
    ix.step = 1;
    return ix;
}

/* The whole zero-bounded box of a node. */
static inline ein_box pl_node_box(const pl_node *n)
{
    return ein_box_of_shape(n->rank, n->shape);
}

/* Shared by the operators with no aggregation. */
ein_agg pl_agg_none(const pl_graph *g, const pl_node *nd, const pl_index *idx, int nidx,
                    const int *counts);
/* 0 flops: data movement only (concat, slice, reshapes). */
double pl_flops_zero(const pl_graph *g, const pl_node *nd);
/* The FLOPs of the node's kernel over its whole shapes: the one cost model
 * the simulator prices blocks with (common/ir/ein_kernel_cost.h). */
double pl_flops_kernel(const pl_graph *g, const pl_node *nd);
/* Every output axis shardable anywhere (elementwise, concat, slice). */
int pl_indices_every_axis(const pl_graph *g, const pl_node *nd, pl_index *idx);
/* The box [lo, hi) of rank `rank` (one interval per index, in order). */
ein_box pl_box_of_intervals(int rank, const int64_t *lo, const int64_t *hi);

#endif
