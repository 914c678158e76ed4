/* planner/ops/einsum.c — join-agg specs of einsum (matmul, batched,
 * transposed, one-operand reductions).
 *
 * Every letter is a shardable index (any). A function specification takes,
 * for each operand, the intervals of its letters; its output type is the
 * intervals of the output letters. Contracted letters split k ways give k
 * function specifications with the same output type, summed (Ex. 3.8).
 * Also the builders pl_graph_add_einsum / pl_graph_add_matmul (shape
 * inference). The subscripts are parsed by ein_einsum_parse
 * (common/ir/ein_einsum.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "planner/ops/pl_ops.h"
#include "planner/pl_graph_int.h"

int pl_graph_add_einsum(pl_graph *g, const char *name, const char *subscripts,
                        int a, int b, ein_error *err)
{
    int rc;
    ein_einsum_sub sub;
    if (!g)
        return ein_fail(err, EIN_EINVAL, "einsum: NULL graph");
    if ((rc = ein_einsum_parse(subscripts, &sub, err)) < 0)
        return rc;
    int ids[2] = {a, b};
    int ntensors = b >= 0 ? 2 : 1;
    if (sub.nops != ntensors)
        return ein_fail(err, EIN_EINVAL, "einsum '%s' has %d operand%s but %d tensor%s given",
                        subscripts, sub.nops, sub.nops == 1 ? "" : "s",
                        ntensors, ntensors == 1 ? " was" : "s were");
    for (int k = 0; k < ntensors; k++)
        if ((rc = pl_check_id(g, "einsum", ids[k], err)) < 0)
            return rc;

    int64_t size[26] = {0};
    int from[26];                       /* which operand fixed a letter's size */
    char sbuf[160];
    for (int k = 0; k < ntensors; k++) {
        const pl_node *t = &g->nodes[ids[k]];
        if (t->rank != sub.rank[k])
            return ein_fail(err, EIN_ESHAPE, "einsum '%s': operand %d '%.*s' has %d ind%s but %s "
                            "has rank %d (%s)", subscripts, k + 1, sub.rank[k], sub.ops[k],
                            sub.rank[k], sub.rank[k] == 1 ? "ex" : "ices", t->name, t->rank,
                            pl_shape_str(sbuf, sizeof sbuf, t->rank, t->shape));
        for (int i = 0; i < t->rank; i++) {
            int l = sub.ops[k][i] - 'a';
            if (size[l] == 0) {
                size[l] = t->shape[i];
                from[l] = ids[k];
            } else if (size[l] != t->shape[i]) {
                return ein_fail(err, EIN_ESHAPE, "einsum '%s': %c is %lld in %s but %lld in %s",
                                subscripts, sub.ops[k][i], (long long)size[l],
                                g->nodes[from[l]].name, (long long)t->shape[i], t->name);
            }
        }
    }
    /* Quantized weights (q8_0, q4_0, f8e4m3: issue 36) are b of "<A>k,nk-><A>n":
     * [out, in] with in contracted and contiguous; a is a float tensor. */
    int qa = ein_dtype_is_block((int)g->nodes[a].dtype);
    int qb = ntensors == 2 && ein_dtype_is_block((int)g->nodes[b].dtype);
    if (qa)
        return ein_fail(err, EIN_ESHAPE, "einsum '%s': %s is %s; quantized weights can only be "
                        "the second operand (weights [out, in], in contracted)", subscripts,
                        g->nodes[a].name, ein_dtype_name(g->nodes[a].dtype));
    if (qb) {
        int ra = sub.rank[0], ok = sub.rank[1] == 2 && ra >= 1 && sub.out_rank == ra &&
                                   sub.ops[0][ra - 1] == sub.ops[1][1] &&
                                   sub.out[ra - 1] == sub.ops[1][0] &&
                                   sub.ops[1][0] != sub.ops[1][1];
        for (int d = 0; ok && d < ra - 1; d++)
            ok = sub.ops[0][d] == sub.out[d] && sub.ops[0][d] != sub.ops[1][0] &&
                 sub.ops[0][d] != sub.ops[1][1];
        if (!ok)
            return ein_fail(err, EIN_ESHAPE, "einsum '%s': %s is %s; quantized weights are "
                            "multiplied only as \"...k,nk->...n\" (weights [out, in], the last "
                            "letter of both operands contracted)", subscripts, g->nodes[b].name,
                            ein_dtype_name(g->nodes[b].dtype));
        if (!ein_dtype_is_float((int)g->nodes[a].dtype))
            return ein_fail(err, EIN_ESHAPE, "einsum '%s': %s is %s; a product with %s weights "
                            "takes %s activations", subscripts, g->nodes[a].name,
                            ein_dtype_name(g->nodes[a].dtype), ein_dtype_name(g->nodes[b].dtype),
                            ein_dtype_float_names());
    }
    if (ntensors == 2 && !qb && g->nodes[a].dtype != g->nodes[b].dtype)
        return ein_fail(err, EIN_ESHAPE, "einsum '%s': %s is %s but %s is %s; operands need one dtype",
                        subscripts, g->nodes[a].name, ein_dtype_name(g->nodes[a].dtype),
                        g->nodes[b].name, ein_dtype_name(g->nodes[b].dtype));

    pl_node n;
    memset(&n, 0, sizeof n);
    n.kind = PL_EINSUM;
    n.dtype = g->nodes[a].dtype;
    n.rank = sub.out_rank;
    for (int i = 0; i < sub.out_rank; i++)
        n.shape[i] = size[sub.out[i] - 'a'];
    if ((rc = pl_check_shape("einsum", name ? name : "the result", n.rank, n.shape, err)) < 0)
        return rc;
    n.ninputs = ntensors;
    n.inputs[0] = a;
    n.inputs[1] = ntensors == 2 ? b : -1;
    n.kernel.kind = EIN_KERNEL_EINSUM;
    memcpy(n.kernel.subscripts, subscripts, strlen(subscripts) + 1);
    /* An output letter takes the dim name of the first operand axis it labels. */
    for (int i = 0; i < sub.out_rank; i++)
        for (int k = ntensors - 1; k >= 0; k--)
            for (int j = 0; j < sub.rank[k]; j++)
                if (sub.ops[k][j] == sub.out[i] && g->nodes[ids[k]].axis_name[j][0])
                    memcpy(n.axis_name[i], g->nodes[ids[k]].axis_name[j], PL_AXIS_NAME_MAX);
    return pl_graph_append(g, name, &n, err);
}

int pl_graph_add_matmul(pl_graph *g, const char *name, int a, int b, ein_error *err)
{
    int rc;
    if (!g)
        return ein_fail(err, EIN_EINVAL, "matmul: NULL graph");
    if ((rc = pl_check_id(g, "matmul", a, err)) < 0 || (rc = pl_check_id(g, "matmul", b, err)) < 0)
        return rc;
    const pl_node *ta = &g->nodes[a], *tb = &g->nodes[b];
    char sa[160], sb[160];
    pl_shape_str(sa, sizeof sa, ta->rank, ta->shape);
    pl_shape_str(sb, sizeof sb, tb->rank, tb->shape);
    /* Checked here rather than left to einsum so the message speaks of
     * matrices, which is what the user wrote. */
    if (ta->rank != 2 || tb->rank != 2)
        return ein_fail(err, EIN_ESHAPE, "matmul: %s is %s and %s is %s; matmul takes two "
                        "matrices (use einsum for other ranks)", ta->name, sa, tb->name, sb);
    /* Quantized weights are stored [out, in] (ggml's layout, in contiguous
     * in blocks of 32): matmul(x, w) is then x w^T. */
    if (ein_dtype_is_block((int)tb->dtype)) {
        if (ta->rank != 2 || tb->rank != 2 || ta->shape[1] != tb->shape[1])
            return ein_fail(err, EIN_ESHAPE, "matmul: %s is %s and %s is %s %s; quantized weights "
                            "are declared [out, in] (the transpose of matmul's [in, out]), so "
                            "%s's columns must equal %s's", ta->name, sa, tb->name,
                            ein_dtype_name(tb->dtype), sb, ta->name, tb->name);
        return pl_graph_add_einsum(g, name, "ij,kj->ik", a, b, err);
    }
    if (ta->shape[1] != tb->shape[0])
        return ein_fail(err, EIN_ESHAPE, "matmul: %s is %s but %s is %s; the columns of the "
                        "first must equal the rows of the second", ta->name, sa, tb->name, sb);
    if (ta->dtype != tb->dtype)
        return ein_fail(err, EIN_ESHAPE, "matmul: %s is %s but %s is %s; operands need one dtype",
                        ta->name, ein_dtype_name(ta->dtype), tb->name, ein_dtype_name(tb->dtype));
    return pl_graph_add_einsum(g, name, "ij,jk->ik", a, b, err);
}


static int einsum_indices(const pl_graph *g, const pl_node *nd, pl_index *idx)
{
    ein_einsum_sub sub;
    if (ein_einsum_parse(nd->kernel.subscripts, &sub, NULL) < 0 || sub.nops != nd->ninputs)
        return -1;
    int n = 0;
    for (int k = 0; k < sub.nops; k++) {
        const pl_node *in = pl_graph_node(g, nd->inputs[k]);
        for (int a = 0; a < sub.rank[k]; a++) {
            int seen = 0;
            for (int i = 0; i < n; i++)
                seen |= idx[i].name == sub.ops[k][a];
            if (!seen)
                idx[n++] = pl_index_any(sub.ops[k][a], in->axis_name[a], in->shape[a]);
        }
    }
    /* A quantized operand's last letter splits only between its blocks. */
    for (int k = 0; k < sub.nops; k++) {
        const pl_node *in = pl_graph_node(g, nd->inputs[k]);
        if (!ein_dtype_is_block((int)in->dtype) || sub.rank[k] < 1)
            continue;
        for (int i = 0; i < n; i++)
            if (idx[i].name == sub.ops[k][sub.rank[k] - 1])
                idx[i].step = ein_dtype_block((int)in->dtype);
    }
    return n;
}

static ein_box letters_box(const char *letters, int rank, const pl_index *idx, int nidx,
                           const int64_t *lo, const int64_t *hi)
{
    ein_box b;
    memset(&b, 0, sizeof b);
    b.rank = rank;
    for (int a = 0; a < rank; a++)
        for (int i = 0; i < nidx; i++)
            if (idx[i].name == letters[a]) {
                b.lo[a] = lo[i];
                b.hi[a] = hi[i];
            }
    return b;
}

static void einsum_fspec(const pl_graph *g, const pl_node *nd, const pl_index *idx, int nidx,
                         const int64_t *lo, const int64_t *hi, ein_box *in, ein_box *out)
{
    (void)g;
    ein_einsum_sub sub;
    ein_einsum_parse(nd->kernel.subscripts, &sub, NULL);
    for (int k = 0; k < sub.nops; k++)
        in[k] = letters_box(sub.ops[k], sub.rank[k], idx, nidx, lo, hi);
    *out = letters_box(sub.out, sub.out_rank, idx, nidx, lo, hi);
}

static ein_agg einsum_agg(const pl_graph *g, const pl_node *nd, const pl_index *idx, int nidx,
                          const int *counts)
{
    (void)g;
    ein_einsum_sub sub;
    ein_einsum_parse(nd->kernel.subscripts, &sub, NULL);
    for (int i = 0; i < nidx; i++)
        if (counts[i] > 1 && !memchr(sub.out, idx[i].name, (size_t)sub.out_rank))
            return EIN_AGG_SUM;
    return EIN_AGG_NONE;
}

const pl_op_def pl_op_einsum = {"einsum", einsum_indices, einsum_fspec, einsum_agg, pl_flops_kernel};
