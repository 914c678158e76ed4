/* planner/ops/embedding.c — row gather: out[t, :] = table[ids[t], :].
 *
 * table [V, D] (f32/f16/bf16), ids [T] (i32 or i64) -> out [T, D] in the
 * table's dtype. The same operator gathers rows of an activation (the last
 * token of each packed sequence: table = hidden states [T, D], ids = the
 * positions).
 *
 * Shardable: the tokens t (ids and out split, table replicated), the
 * model dim d (table columns and out split), and the vocabulary v (each
 * block of table rows gathers the ids it holds and writes zeros for the
 * others; the blocks are summed, Megatron's vocabulary-parallel
 * embedding). */
#include <stdio.h>
#include <stdlib.h>

#include "planner/ops/pl_ops.h"
#include "planner/pl_graph_int.h"

int pl_graph_add_embedding(pl_graph *g, const char *name, int table, int ids, ein_error *err)
{
    int rc;
    char sb[160];
    if (!g)
        return ein_fail(err, EIN_EINVAL, "embedding: NULL graph");
    if ((rc = pl_check_id(g, "embedding", table, err)) < 0 ||
        (rc = pl_check_id(g, "embedding", ids, err)) < 0)
        return rc;
    const pl_node *t = pl_graph_node(g, table), *x = pl_graph_node(g, ids);
    if (t->rank != 2)
        return ein_fail(err, EIN_ESHAPE, "embedding: table %s is %s; expected a matrix [rows, dim]",
                        t->name, pl_shape_str(sb, sizeof sb, t->rank, t->shape));
    if (!ein_dtype_is_float((int)t->dtype))
        return ein_fail(err, EIN_ESHAPE, "embedding: table %s is %s; expected %s",
                        t->name, ein_dtype_name(t->dtype), ein_dtype_float_names());
    if (x->rank != 1)
        return ein_fail(err, EIN_ESHAPE, "embedding: ids %s is %s; expected a vector [tokens]",
                        x->name, pl_shape_str(sb, sizeof sb, x->rank, x->shape));
    /* ids: the integer dtypes the table lets an embedding read */
    if (ein_dtype_is_float((int)x->dtype) || !ein_dtype_kernel_ok((int)x->dtype, EIN_KERNEL_EMBEDDING))
        return ein_fail(err, EIN_ESHAPE, "embedding: ids %s is %s; expected %s",
                        x->name, ein_dtype_name(x->dtype),
                        ein_dtype_list((char[64]){0}, 64, 0, EIN_KERNEL_EMBEDDING, EIN_DTYPE_BY_NAME));
    pl_node n;
    pl_node_init_like(&n, g, PL_EMBEDDING, table);
    n.ninputs = 2;
    n.inputs[1] = ids;
    n.shape[0] = x->shape[0];
    snprintf(n.axis_name[0], sizeof n.axis_name[0], "%s", x->axis_name[0]);
    n.kernel.kind = EIN_KERNEL_EMBEDDING;
    n.kernel.rows = t->shape[0];
    return pl_graph_append(g, name, &n, err);
}

/* Indices in order: tokens, model dim, vocabulary. */
static int embedding_indices(const pl_graph *g, const pl_node *nd, pl_index *idx)
{
    const pl_node *t = pl_graph_node(g, nd->inputs[0]);
    idx[0] = pl_index_any('t', nd->axis_name[0], nd->shape[0]);
    idx[1] = pl_index_any('d', nd->axis_name[1], nd->shape[1]);
    idx[2] = pl_index_any('v', t->axis_name[0], t->shape[0]);
    return 3;
}

static void embedding_fspec(const pl_graph *g, const pl_node *nd, const pl_index *idx, int nidx,
                            const int64_t *lo, const int64_t *hi, ein_box *in, ein_box *out)
{
    (void)g, (void)idx, (void)nidx, (void)nd;
    *out = pl_box_of_intervals(2, (int64_t[]){lo[0], lo[1]}, (int64_t[]){hi[0], hi[1]});
    in[0] = pl_box_of_intervals(2, (int64_t[]){lo[2], lo[1]}, (int64_t[]){hi[2], hi[1]});
    in[1] = pl_box_of_intervals(1, &lo[0], &hi[0]);
}

static ein_agg embedding_agg(const pl_graph *g, const pl_node *nd, const pl_index *idx, int nidx,
                             const int *counts)
{
    (void)g, (void)nd, (void)idx, (void)nidx;
    return counts[2] > 1 ? EIN_AGG_SUM : EIN_AGG_NONE;
}

const pl_op_def pl_op_embedding = {"embedding", embedding_indices, embedding_fspec, embedding_agg,
                                   pl_flops_zero};
