/* planner/pl_graph.c — see pl_graph.h.
 *
 * Every builder checks everything it needs (ids, name, ranks, sizes,
 * dtypes) before touching the graph, so a failed add leaves the graph
 * exactly as it was. Messages name the operator and the tensors involved,
 * without a source position: the parser adds "file:line:col: " in front. */
#include "planner/pl_graph.h"
#include "planner/pl_graph_int.h"

#include <assert.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/ein_vec.h"

/* Keep ids (int) and the index arithmetic far from overflow. */
#define PL_GRAPH_NODES_MAX (INT_MAX / 4)

pl_graph *pl_graph_new(void)
{
    return calloc(1, sizeof(pl_graph));
}

void pl_graph_free(pl_graph *g)
{
    if (!g)
        return;
    for (int i = 0; i < g->nnodes; i++)
        free(g->nodes[i].kernel.list);
    free(g->nodes);
    ein_nameidx_free(&g->index);
    free(g);
}

pl_graph *pl_graph_copy(const pl_graph *g)
{
    return pl_graph_copy_prefix(g, g->nnodes);
}

pl_graph *pl_graph_copy_prefix(const pl_graph *g, int n)
{
    if (n < 0 || n > g->nnodes)
        n = g->nnodes;
    pl_graph *c = pl_graph_new();
    if (!c)
        return NULL;
    if (n && !(c->nodes = malloc(sizeof *c->nodes * (size_t)n))) {
        free(c);
        return NULL;
    }
    c->cap = n;
    for (int i = 0; i < n; i++) {
        pl_node *n = &c->nodes[i];
        *n = g->nodes[i];
        n->kernel.list = NULL;
        c->nnodes = i + 1;
        if (g->nodes[i].kernel.nlist > 0) {
            size_t bytes = sizeof *n->kernel.list * (size_t)g->nodes[i].kernel.nlist;
            if (!(n->kernel.list = malloc(bytes))) {
                pl_graph_free(c);
                return NULL;
            }
            memcpy(n->kernel.list, g->nodes[i].kernel.list, bytes);
        }
    }
    return c; /* the name index is rebuilt on first use (pl_graph.h) */
}

const pl_node *pl_graph_node(const pl_graph *g, int id)
{
    if (!g || id < 0 || id >= g->nnodes)
        return NULL;
    return &g->nodes[id];
}

/* ---- name index ---------------------------------------------------------- */

static const char *node_name(const void *g, int id)
{
    return ((const pl_graph *)g)->nodes[id].name;
}

static int index_fresh(const pl_graph *g)
{
    return g->index.slot && g->index.n == g->nnodes;
}

int pl_graph_find(const pl_graph *g, const char *name)
{
    if (!g || !name)
        return -1;
    if (index_fresh(g))
        return ein_nameidx_find(&g->index, name, node_name, g);
    /* Index missing or stale (graph built by hand): a linear scan is right. */
    for (int i = 0; i < g->nnodes; i++)
        if (strcmp(g->nodes[i].name, name) == 0)
            return i;
    return -1;
}

/* Make the index cover every node (rebuilt when stale) with room for one
 * more, so that adding it cannot fail. */
static int index_reserve(pl_graph *g, ein_error *err)
{
    if (index_fresh(g) && (int64_t)(g->nnodes + 1) * 2 <= g->index.cap)
        return 0;
    if (ein_nameidx_rebuild(&g->index, g->nnodes, 1, node_name, g) < 0)
        return ein_fail(err, EIN_ENOMEM, "graph: out of memory for the name index");
    return 0;
}

/* ---- helpers ------------------------------------------------------------- */

void pl_node_init_like(pl_node *n, const pl_graph *g, pl_node_kind kind, int x)
{
    assert(x >= 0 && x < g->nnodes);
    const pl_node *t = &g->nodes[x];
    memset(n, 0, sizeof *n);
    n->kind = kind;
    n->dtype = t->dtype;
    n->rank = t->rank;
    memcpy(n->shape, t->shape, sizeof n->shape);
    memcpy(n->axis_name, t->axis_name, sizeof n->axis_name);
    n->ninputs = 1;
    n->inputs[0] = x;
}

/* "8x16x4" */
const char *pl_shape_str(char *buf, size_t len, int rank, const int64_t *shape)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < rank && n < len; i++) {
        int w = snprintf(buf + n, len - n, "%s%lld", i ? "x" : "", (long long)shape[i]);
        if (w < 0)
            break;
        n += (size_t)w;
    }
    return buf;
}

/* Ranks 1..EIN_MAX_RANK, each dim in 1..PL_DIM_MAX, volume within int64. */
int pl_check_shape(const char *what, const char *name, int rank,
                       const int64_t *shape, ein_error *err)
{
    if (rank < 1 || rank > EIN_MAX_RANK)
        return ein_fail(err, EIN_ESHAPE, "%s: %s has rank %d; expected 1 to %d dims",
                        what, name, rank, EIN_MAX_RANK);
    int64_t vol = 1;
    for (int i = 0; i < rank; i++) {
        if (shape[i] < 1 || shape[i] > PL_DIM_MAX)
            return ein_fail(err, EIN_ESHAPE,
                            "%s: dim %d of %s is %lld; expected 1 to 2^40 (%lld)",
                            what, i, name, (long long)shape[i], (long long)PL_DIM_MAX);
        if (__builtin_mul_overflow(vol, shape[i], &vol))
            return ein_fail(err, EIN_ESHAPE,
                            "%s: %s has more than 2^63-1 elements; expected a smaller shape",
                            what, name);
    }
    return 0;
}

int pl_check_id(const pl_graph *g, const char *what, int id, ein_error *err)
{
    if (id < 0 || id >= g->nnodes)
        return ein_fail(err, EIN_EINVAL, "%s: input id %d does not exist (the graph has %d nodes)",
                        what, id, g->nnodes);
    return 0;
}

static int check_name(const pl_graph *g, const char *name, ein_error *err)
{
    if (!name || !name[0])
        return ein_fail(err, EIN_EINVAL, "tensor name is empty");
    size_t len = strnlen(name, EIN_NAME_MAX);
    if (len >= EIN_NAME_MAX)
        return ein_fail(err, EIN_EINVAL, "tensor name '%.*s...' is too long (at most %d characters)",
                        32, name, EIN_NAME_MAX - 1);
    if (pl_graph_find(g, name) >= 0)
        return ein_fail(err, EIN_EINVAL, "duplicate name '%s'", name);
    return 0;
}

/* Append *proto under `name`; the caller has checked everything else. */
int pl_graph_append(pl_graph *g, const char *name, const pl_node *proto, ein_error *err)
{
    int rc;
    if ((rc = check_name(g, name, err)) < 0)
        return rc;
    /* A state is read and written only by its cache_write (as input 0):
     * anything else would read its buffer unordered with the write. */
    for (int i = 0; i < proto->ninputs; i++) {
        const pl_node *x = pl_graph_node(g, proto->inputs[i]);
        if (x && x->state && (proto->kind != PL_CACHE_WRITE || i != 0))
            return ein_fail(err, EIN_EINVAL, "%s: %s is a state; only its cache_write takes it "
                            "(read the cache_write's result)", pl_node_op_name(proto), x->name);
    }
    /* Integer tensors only move (slice, concat) or index (embedding's ids);
     * the dtype table says which kernel kinds take them. */
    for (int i = 0; i < proto->ninputs; i++) {
        const pl_node *x = pl_graph_node(g, proto->inputs[i]);
        if (x && ein_dtype_is_block((int)x->dtype) &&
            !ein_dtype_kernel_ok((int)x->dtype, (int)proto->kernel.kind))
            return ein_fail(err, EIN_ESHAPE, "%s: %s is %s; quantized weights can only be "
                            "multiplied (matmul or einsum, as weights [out, in])",
                            pl_node_op_name(proto), x->name, ein_dtype_name(x->dtype));
        if (x && !ein_dtype_kernel_ok((int)x->dtype, (int)proto->kernel.kind))
            return ein_fail(err, EIN_ESHAPE, "%s: %s is %s; %s computes on %s "
                            "tensors (integer tensors can only be sliced, concatenated or used "
                            "as embedding ids)", pl_node_op_name(proto), x->name,
                            ein_dtype_name(x->dtype), pl_node_op_name(proto),
                            ein_dtype_float_names());
    }
    if (g->nnodes >= PL_GRAPH_NODES_MAX)
        return ein_fail(err, EIN_EINVAL, "graph: too many nodes (at most %d)", PL_GRAPH_NODES_MAX);
    if ((rc = index_reserve(g, err)) < 0)
        return rc;
    if (ein_vec_reserve(&g->nodes, &g->cap, (int64_t)g->nnodes + 1, sizeof *g->nodes) < 0)
        return ein_fail(err, EIN_ENOMEM, "graph: out of memory for %d nodes", g->nnodes + 1);
    int id = g->nnodes;
    pl_node *n = &g->nodes[id];
    *n = *proto;
    memset(n->name, 0, sizeof n->name);
    memcpy(n->name, name, strlen(name));
    n->saved = 0;
    n->line = n->col = 0;
    g->nnodes++;
    rc = ein_nameidx_add(&g->index, node_name, g);
    assert(rc == 0); /* index_reserve left room: no allocation */
    (void)rc;
    return id;
}

/* ---- builders ------------------------------------------------------------ */

int pl_graph_add_input(pl_graph *g, const char *name, ein_dtype dtype, int rank,
                       const int64_t *shape, ein_error *err)
{
    int rc;
    if (!g || (!shape && rank > 0))
        return ein_fail(err, EIN_EINVAL, "input: NULL graph or shape");
    if (!ein_dtype_valid((int)dtype))
        return ein_fail(err, EIN_EINVAL, "input %s: invalid dtype %d", name ? name : "?", (int)dtype);
    if ((rc = pl_check_shape("input", name ? name : "?", rank, shape, err)) < 0)
        return rc;
    if (ein_dtype_is_block((int)dtype) &&
        (rank < 1 || shape[rank - 1] % ein_dtype_block((int)dtype) != 0))
        return ein_fail(err, EIN_ESHAPE, "input %s: %s needs a last dim that is a multiple of "
                        "%d (its blocks)", name ? name : "?", ein_dtype_name(dtype),
                        ein_dtype_block((int)dtype));
    pl_node n;
    memset(&n, 0, sizeof n);
    n.kind = PL_INPUT;
    n.dtype = dtype;
    n.rank = rank;
    memcpy(n.shape, shape, (size_t)rank * sizeof shape[0]);
    return pl_graph_append(g, name, &n, err);
}

int pl_graph_add_state(pl_graph *g, const char *name, ein_dtype dtype, int rank,
                       const int64_t *shape, ein_error *err)
{
    if (g && !ein_dtype_is_float((int)dtype))
        return ein_fail(err, EIN_EINVAL, "state %s: %s; expected %s (a state holds floats)",
                        name ? name : "?", ein_dtype_name(dtype), ein_dtype_float_names());
    int id = pl_graph_add_input(g, name, dtype, rank, shape, err);
    if (id >= 0)
        g->nodes[id].state = 1;
    return id;
}

int pl_graph_save(pl_graph *g, int id, ein_error *err)
{
    int rc;
    if (!g)
        return ein_fail(err, EIN_EINVAL, "save: NULL graph");
    if ((rc = pl_check_id(g, "save", id, err)) < 0)
        return rc;
    if (g->nodes[id].saved)
        return ein_fail(err, EIN_EINVAL, "save: '%s' is already saved", g->nodes[id].name);
    if (ein_dtype_is_block((int)g->nodes[id].dtype))
        return ein_fail(err, EIN_EINVAL, "save: '%s' is %s; quantized weights are inputs only "
                        "and cannot be saved (expected a computed tensor)", g->nodes[id].name,
                        ein_dtype_name(g->nodes[id].dtype));
    if (g->nodes[id].state || (g->nodes[id].kind == PL_CACHE_WRITE))
        return ein_fail(err, EIN_EINVAL, "save: '%s' is a state (it stays on the devices; "
                        "save what reads it)", g->nodes[id].name);
    g->nodes[id].saved = 1;
    return 0;
}

void pl_graph_set_pos(pl_graph *g, int id, int line, int col)
{
    if (!g || id < 0 || id >= g->nnodes)
        return;
    g->nodes[id].line = line;
    g->nodes[id].col = col;
}

int pl_graph_nconsumers(const pl_graph *g, int id)
{
    int count = 0;
    if (!g || id < 0)
        return 0;
    /* Ids are topological, so only later nodes can read `id`. An operator
     * that reads it twice (mul(x, x)) counts once: it is one consumer. */
    for (int i = id + 1; i < g->nnodes; i++) {
        const pl_node *n = &g->nodes[i];
        for (int k = 0; k < n->ninputs && k < PL_MAX_INPUTS; k++)
            if (n->inputs[k] == id) {
                count++;
                break;
            }
    }
    return count;
}

void pl_graph_set_axis_name(pl_graph *g, int id, int axis, const char *name)
{
    if (!g || id < 0 || id >= g->nnodes || axis < 0 || axis >= EIN_MAX_RANK || !name)
        return;
    char *dst = g->nodes[id].axis_name[axis];
    snprintf(dst, PL_AXIS_NAME_MAX, "%s", name);
}

const char *pl_node_op_name(const pl_node *n)
{
    switch (n->kind) {
    case PL_INPUT: return "input";
    case PL_EINSUM: return strcmp(n->kernel.subscripts, "ij,jk->ik") ? "einsum" : "matmul";
    case PL_UNARY: return ein_unary_name(n->kernel.unary);
    case PL_BINARY: return ein_binary_op_name(n->kernel.binary);
    case PL_REDUCE: return n->kernel.reduce == EIN_AGG_MAX ? "reduce_max" : "reduce_sum";
    default:
        /* the rest are named as their kernel kind (common/ir/ein_ops.def) */
        return (int)n->kind >= 0 && n->kind < PL_NODE_KIND_COUNT ? ein_kernel_kind_name(n->kernel.kind) : "?";
    }
}

int pl_seq_ends_copy(const char *what, const int64_t *ends, int n, int64_t tokens,
                     int64_t **out, ein_error *err)
{
    *out = NULL;
    if (n == 0)
        return 0;
    if (n < 0 || n > EIN_KERNEL_LIST_MAX || !ends)
        return ein_fail(err, EIN_EINVAL, "%s: %d sequences; expected 1 to %d", what, n,
                        EIN_KERNEL_LIST_MAX);
    for (int i = 0; i < n; i++)
        if (ends[i] <= (i ? ends[i - 1] : 0))
            return ein_fail(err, EIN_ESHAPE, "%s: sequence ends must increase (end %d is %lld "
                            "after %lld)", what, i + 1, (long long)ends[i],
                            (long long)(i ? ends[i - 1] : 0));
    if (ends[n - 1] != tokens)
        return ein_fail(err, EIN_ESHAPE, "%s: the sequences hold %lld tokens but the tensor has "
                        "%lld", what, (long long)ends[n - 1], (long long)tokens);
    *out = malloc(sizeof(int64_t) * (size_t)n);
    if (!*out)
        return ein_fail(err, EIN_ENOMEM, "%s: out of memory", what);
    memcpy(*out, ends, sizeof(int64_t) * (size_t)n);
    return 0;
}
