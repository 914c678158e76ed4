/* planner/ein_api.c — the public C API (include/einsummable/einsummable.h) over the
 * planner's graph builders and optimizer. */
#include "include/einsummable/einsummable.h"
#include "planner/ein_api_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/pl_graph.h"
#include "planner/pl_optimize.h"
#include "planner/pl_spec.h"

typedef struct ein_plan_op_info {
    char name[EIN_NAME_MAX];
    const char *op;
    char split[256];
    double repart, join, agg;
} ein_plan_op_info;

struct ein_plan {
    pl_plan *plan;
    int nops;
    ein_plan_op_info *ops;
};

static ein_tensor_desc desc_of(int rank, const int64_t *shape, ein_dtype dtype)
{
    ein_tensor_desc d;
    memset(&d, 0, sizeof d);
    d.rank = rank;
    d.dtype = dtype;
    memcpy(d.shape, shape, sizeof(int64_t) * (size_t)rank);
    return d;
}

ein_tensor_desc ein_tensor_desc_1d(int64_t n, ein_dtype dtype)
{
    return desc_of(1, (int64_t[]){n}, dtype);
}

ein_tensor_desc ein_tensor_desc_2d(int64_t rows, int64_t cols, ein_dtype dtype)
{
    return desc_of(2, (int64_t[]){rows, cols}, dtype);
}

ein_tensor_desc ein_tensor_desc_3d(int64_t a, int64_t b, int64_t c, ein_dtype dtype)
{
    return desc_of(3, (int64_t[]){a, b, c}, dtype);
}

ein_graph *ein_graph_create(void)
{
    return pl_graph_new();
}

void ein_graph_destroy(ein_graph *g)
{
    pl_graph_free(g);
}

/* NULL names get "t<id>" (made unique if a user took it). */
static const char *name_or_default(const ein_graph *g, const char *name, char *buf)
{
    if (name)
        return name;
    int n = g ? g->nnodes : 0;
    do
        snprintf(buf, EIN_NAME_MAX, "t%d", n++);
    while (g && pl_graph_find(g, buf) >= 0);
    return buf;
}
#define NAME(g, name) name_or_default((g), (name), (char[EIN_NAME_MAX]){0})

ein_tensor ein_graph_insert_tensor(ein_graph *g, const char *name, ein_tensor_desc desc,
                                   ein_error *err)
{
    int id = pl_graph_add_input(g, NAME(g, name), desc.dtype, desc.rank, desc.shape, err);
    if (id >= 0)
        for (int i = 0; i < desc.rank && i < EIN_DESC_MAX_RANK; i++)
            if (desc.dim_names[i])
                pl_graph_set_axis_name(g, id, i, desc.dim_names[i]);
    return id;
}

int ein_graph_save(ein_graph *g, ein_tensor t, ein_error *err)
{
    return pl_graph_save(g, t, err);
}

ein_tensor ein_graph_matmul(ein_graph *g, const char *name, ein_tensor a, ein_tensor b,
                            ein_error *err)
{
    return pl_graph_add_matmul(g, NAME(g, name), a, b, err);
}

ein_tensor ein_graph_einsum(ein_graph *g, const char *name, const char *subscripts,
                            ein_tensor a, ein_tensor b, ein_error *err)
{
    return pl_graph_add_einsum(g, NAME(g, name), subscripts, a, b, err);
}

static const char *unary_at(int i) { return ein_unary_name((ein_unary)i); }
static const char *binary_at(int i) { return ein_binary_op_name((ein_binary)i); }
/* What ein_graph_reduce takes, by ein_agg_name. */
static const ein_agg reduce_ops[] = {EIN_AGG_SUM, EIN_AGG_MAX};
#define NREDUCE ((int)(sizeof reduce_ops / sizeof *reduce_ops))
static const char *reduce_at(int i) { return ein_agg_name(reduce_ops[i]); }

int ein_op_count(void)
{
    return EIN_UN_COUNT + EIN_BIN_COUNT + NREDUCE;
}

int ein_op_row(int i, ein_op_entry *out)
{
    if (!out || i < 0 || i >= ein_op_count())
        return EIN_EINVAL;
    if (i < EIN_UN_COUNT)
        *out = (ein_op_entry){unary_at(i), EIN_OP_UNARY, ein_unary_takes_scalar((ein_unary)i)};
    else if (i < EIN_UN_COUNT + EIN_BIN_COUNT)
        *out = (ein_op_entry){binary_at(i - EIN_UN_COUNT), EIN_OP_BINARY, 0};
    else
        *out = (ein_op_entry){reduce_at(i - EIN_UN_COUNT - EIN_BIN_COUNT), EIN_OP_REDUCE, 0};
    return 0;
}

/* "a, b, c or d" from the registry's names (common/ir/ein_ops.def); returns buf. */
static const char *name_list(char *buf, size_t cap, const char *(*name)(int), int n)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%s", i == 0 ? "" : i == n - 1 ? " or " : ", ",
                               name(i));
    return buf;
}

ein_tensor ein_graph_unary(ein_graph *g, const char *name, const char *op, double c,
                           ein_tensor x, ein_error *err)
{
    char list[256];
    int u = ein_unary_by_name(op);
    if (u >= 0)
        return pl_graph_add_unary(g, NAME(g, name), (ein_unary)u, c, x, err);
    return ein_fail(err, EIN_EINVAL, "unary: unknown operator '%s'; expected %s", op ? op : "(null)",
                    name_list(list, sizeof list, unary_at, EIN_UN_COUNT));
}

ein_tensor ein_graph_binary(ein_graph *g, const char *name, const char *op, ein_tensor a,
                            ein_tensor b, ein_error *err)
{
    char list[256];
    int bin = ein_binary_by_op_name(op);
    if (bin >= 0)
        return pl_graph_add_binary(g, NAME(g, name), (ein_binary)bin, a, b, err);
    return ein_fail(err, EIN_EINVAL, "binary: unknown operator '%s'; expected %s", op ? op : "(null)",
                    name_list(list, sizeof list, binary_at, EIN_BIN_COUNT));
}

ein_tensor ein_graph_softmax(ein_graph *g, const char *name, ein_tensor x, int axis,
                             ein_error *err)
{
    return pl_graph_add_softmax(g, NAME(g, name), x, axis, err);
}

ein_tensor ein_graph_rmsnorm(ein_graph *g, const char *name, ein_tensor x, ein_tensor w,
                             double eps, ein_error *err)
{
    return pl_graph_add_norm(g, NAME(g, name), x, w, -1, eps, err);
}

ein_tensor ein_graph_layernorm(ein_graph *g, const char *name, ein_tensor x, ein_tensor w,
                               ein_tensor b, double eps, ein_error *err)
{
    if (b < 0)
        return ein_fail(err, EIN_EINVAL, "layernorm: bias id %d does not exist", b);
    return pl_graph_add_norm(g, NAME(g, name), x, w, b, eps, err);
}

ein_tensor ein_graph_rope(ein_graph *g, const char *name, ein_tensor x, int64_t head_dim,
                          double theta, const int64_t *seq_ends, int nseq, ein_error *err)
{
    return pl_graph_add_rope(g, NAME(g, name), x, head_dim, theta, seq_ends, nseq, err);
}

ein_tensor ein_graph_rope_ex(ein_graph *g, const char *name, ein_tensor x, int64_t head_dim,
                             double theta, const int64_t *seq_ends, int nseq,
                             ein_rope_style style, ein_error *err)
{
    return pl_graph_add_rope_style(g, NAME(g, name), x, head_dim, theta, seq_ends, nseq,
                                   (int)style, err);
}

ein_tensor ein_graph_attention(ein_graph *g, const char *name, ein_tensor q, ein_tensor k,
                               ein_tensor v, const int64_t *seq_ends, int nseq,
                               ein_error *err)
{
    return pl_graph_add_attention(g, NAME(g, name), q, k, v, seq_ends, nseq, 0, err);
}

ein_tensor ein_graph_attention_window(ein_graph *g, const char *name, ein_tensor q, ein_tensor k,
                                      ein_tensor v, const int64_t *seq_ends, int nseq,
                                      int64_t window, ein_error *err)
{
    return pl_graph_add_attention(g, NAME(g, name), q, k, v, seq_ends, nseq, window, err);
}

ein_tensor ein_graph_reduce(ein_graph *g, const char *name, const char *op, uint32_t axes,
                            ein_tensor x, ein_error *err)
{
    char list[64];
    for (int i = 0; op && i < NREDUCE; i++)
        if (!strcmp(op, ein_agg_name(reduce_ops[i])))
            return pl_graph_add_reduce(g, NAME(g, name), reduce_ops[i], axes, x, err);
    return ein_fail(err, EIN_EINVAL, "reduce: unknown operator '%s'; expected %s",
                    op ? op : "(null)", name_list(list, sizeof list, reduce_at, NREDUCE));
}

ein_tensor ein_graph_concat(ein_graph *g, const char *name, int axis, const ein_tensor *xs,
                            int n, ein_error *err)
{
    return pl_graph_add_concat(g, NAME(g, name), axis, xs, n, err);
}

ein_tensor ein_graph_slice(ein_graph *g, const char *name, ein_tensor x, int axis,
                           int64_t start, int64_t end, ein_error *err)
{
    return pl_graph_add_slice(g, NAME(g, name), x, axis, start, end, err);
}

ein_tensor ein_graph_split_heads(ein_graph *g, const char *name, ein_tensor x,
                                 int64_t head_dim, ein_error *err)
{
    return pl_graph_add_split_heads(g, NAME(g, name), x, head_dim, err);
}

ein_tensor ein_graph_merge_heads(ein_graph *g, const char *name, ein_tensor x, ein_error *err)
{
    return pl_graph_add_merge_heads(g, NAME(g, name), x, err);
}

ein_tensor ein_graph_embedding(ein_graph *g, const char *name, ein_tensor table, ein_tensor ids,
                               ein_error *err)
{
    return pl_graph_add_embedding(g, NAME(g, name), table, ids, err);
}

ein_tensor ein_graph_state(ein_graph *g, const char *name, ein_tensor_desc desc, ein_error *err)
{
    int id = pl_graph_add_state(g, NAME(g, name), desc.dtype, desc.rank, desc.shape, err);
    if (id >= 0)
        for (int i = 0; i < desc.rank && i < EIN_DESC_MAX_RANK; i++)
            if (desc.dim_names[i])
                pl_graph_set_axis_name(g, id, i, desc.dim_names[i]);
    return id;
}

ein_tensor ein_graph_cache_write(ein_graph *g, const char *name, ein_tensor state, ein_tensor x,
                                 ein_tensor pos, ein_error *err)
{
    return pl_graph_add_cache_write(g, NAME(g, name), state, x, pos, err);
}

ein_tensor ein_graph_decode_attention(ein_graph *g, const char *name, ein_tensor q,
                                      ein_tensor k, ein_tensor v, ein_tensor pos, ein_error *err)
{
    return pl_graph_add_decode_attention(g, NAME(g, name), q, k, v, pos, 0, err);
}

ein_tensor ein_graph_decode_attention_window(ein_graph *g, const char *name, ein_tensor q,
                                             ein_tensor k, ein_tensor v, ein_tensor pos,
                                             int64_t window, ein_error *err)
{
    return pl_graph_add_decode_attention(g, NAME(g, name), q, k, v, pos, window, err);
}

int ein_graph_rope_scaling(ein_graph *g, ein_tensor t, const ein_rope_scaling *s,
                           ein_error *err)
{
    return pl_graph_set_rope_scaling(g, t, s, err);
}

ein_tensor ein_graph_rope_at(ein_graph *g, const char *name, ein_tensor x, ein_tensor pos,
                             int64_t head_dim, double theta, ein_rope_style style,
                             ein_error *err)
{
    return pl_graph_add_rope_at(g, NAME(g, name), x, pos, head_dim, theta, (int)style, err);
}

int ein_graph_plan(const ein_graph *g, int devices, const ein_plan_options *opts,
                   ein_plan **out, ein_error *err)
{
    pl_selector sel = PL_SELECT_DP;
    if (!g || !out)
        return ein_fail(err, EIN_EINVAL, "plan: NULL graph or output");
    if (opts && opts->selector && pl_selector_parse(opts->selector, &sel) < 0)
        return ein_fail(err, EIN_EINVAL, "plan: unknown selector '%s'; expected dp, greedy or "
                        "random", opts->selector);
    pl_plan_opts po = {.linear_paths = opts ? opts->linear_paths : 0};
    pl_plan *pp = NULL;
    int rc = pl_plan_make_opts(g, devices, sel, opts ? opts->seed : 0, &po, &pp, err);
    return rc < 0 ? rc : ein_plan_wrap(g, pp, out, err);
}

int ein_plan_wrap(const pl_graph *g, pl_plan *pp, ein_plan **out, ein_error *err)
{
    ein_plan *p = calloc(1, sizeof *p);
    if (!p) {
        pl_plan_free(pp);
        return ein_fail(err, EIN_ENOMEM, "plan: out of memory");
    }
    p->plan = pp;
    p->ops = calloc((size_t)g->nnodes + 1, sizeof *p->ops);
    if (!p->ops) {
        ein_plan_free(p);
        return ein_fail(err, EIN_ENOMEM, "plan: out of memory");
    }
    for (int v = 0; v < g->nnodes; v++) {
        const pl_choice *c = &p->plan->nodes[v];
        if (!c->planned)
            continue;
        const pl_node *nd = pl_graph_node(g, v);
        ein_plan_op_info *o = &p->ops[p->nops++];
        pl_index idx[PL_MAX_INDICES];
        memcpy(o->name, nd->name, sizeof o->name);
        o->op = pl_node_op_name(nd);
        pl_op_indices(g, v, idx, NULL);
        pl_spec_format_labels(&c->spec, idx, o->split, sizeof o->split);
        o->repart = c->repart;
        o->join = c->join;
        o->agg = c->agg;
    }
    *out = p;
    return 0;
}

double ein_plan_total_cost(const ein_plan *plan)
{
    return plan ? plan->plan->total : 0;
}

int ein_plan_nops(const ein_plan *plan)
{
    return plan ? plan->nops : 0;
}

int ein_plan_op(const ein_plan *plan, int i, const char **name, const char **op,
                char *split, size_t split_len, double *repartition, double *join,
                double *aggregation)
{
    if (!plan || i < 0 || i >= plan->nops)
        return EIN_EINVAL;
    const ein_plan_op_info *o = &plan->ops[i];
    if (name) *name = o->name;
    if (op) *op = o->op;
    if (split && split_len) snprintf(split, split_len, "%s", o->split);
    if (repartition) *repartition = o->repart;
    if (join) *join = o->join;
    if (aggregation) *aggregation = o->agg;
    return 0;
}

void ein_plan_free(ein_plan *plan)
{
    if (!plan)
        return;
    pl_plan_free(plan->plan);
    free(plan->ops);
    free(plan);
}

const pl_plan *ein_plan_internal(const ein_plan *p)
{
    return p ? p->plan : NULL;
}

int ein_graph_ntensors(const ein_graph *g)
{
    return g ? g->nnodes : 0;
}

ein_tensor ein_graph_find(const ein_graph *g, const char *name, ein_error *err)
{
    int v = g && name ? pl_graph_find(g, name) : -1;
    if (v < 0)
        return ein_fail(err, EIN_EINVAL, "no tensor named '%s'", name ? name : "(null)");
    return v;
}

int ein_graph_tensor(const ein_graph *g, ein_tensor t, const char **name, ein_tensor_desc *desc,
                     int *is_input, int *is_saved)
{
    const pl_node *nd = g ? pl_graph_node(g, t) : NULL;
    if (!nd)
        return EIN_EINVAL;
    if (name)
        *name = nd->name;
    if (desc) {
        *desc = desc_of(nd->rank, nd->shape, nd->dtype);
        for (int a = 0; a < nd->rank && a < EIN_DESC_MAX_RANK; a++)
            desc->dim_names[a] = nd->axis_name[a][0] ? nd->axis_name[a] : NULL;
    }
    if (is_input)
        *is_input = nd->kind == PL_INPUT && !nd->state; /* a state is set by nothing */
    if (is_saved)
        *is_saved = nd->saved;
    return 0;
}
