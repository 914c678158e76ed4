/* planner/pl_wire.c — see pl_wire.h. */
#include "planner/pl_wire.h"

#include <math.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/io/ein_wire.h"

#define KEY(name) (e |= ein_mp_pack_cstr(pk, name))

static int pack_i64s(msgpack_packer *pk, const int64_t *v, int n)
{
    int e = msgpack_pack_array(pk, (size_t)n);
    for (int j = 0; j < n; j++)
        e |= msgpack_pack_int64(pk, v[j]);
    return e;
}

int pl_graph_pack(msgpack_packer *pk, const pl_graph *g, ein_error *err)
{
    int e = msgpack_pack_array(pk, (size_t)g->nnodes);
    for (int v = 0; v < g->nnodes && !e; v++) {
        const pl_node *nd = &g->nodes[v];
        e |= msgpack_pack_map(pk, 10);
        KEY("name"); e |= ein_mp_pack_cstr(pk, nd->name);
        KEY("kind"); e |= msgpack_pack_int(pk, (int)nd->kind);
        KEY("dtype"); e |= msgpack_pack_int(pk, (int)nd->dtype);
        KEY("shape"); e |= pack_i64s(pk, nd->shape, nd->rank);
        KEY("inputs");
        e |= msgpack_pack_array(pk, (size_t)nd->ninputs);
        for (int i = 0; i < nd->ninputs; i++)
            e |= msgpack_pack_int(pk, nd->inputs[i]);
        KEY("kernel");
        e |= nd->kind == PL_INPUT ? msgpack_pack_nil(pk) : ein_kernel_pack(pk, &nd->kernel);
        KEY("axes");
        e |= msgpack_pack_array(pk, (size_t)nd->rank);
        for (int a = 0; a < nd->rank; a++) {
            size_t n = strnlen(nd->axis_name[a], PL_AXIS_NAME_MAX - 1);
            e |= msgpack_pack_str(pk, n) | msgpack_pack_str_body(pk, nd->axis_name[a], n);
        }
        KEY("saved"); e |= msgpack_pack_int(pk, nd->saved ? 1 : 0);
        KEY("state"); e |= msgpack_pack_int(pk, nd->state ? 1 : 0);
        KEY("pos");
        e |= msgpack_pack_array(pk, 2) | msgpack_pack_int(pk, nd->line) |
             msgpack_pack_int(pk, nd->col);
    }
    return e ? ein_fail(err, EIN_ENOMEM, "graph: out of memory while encoding") : 0;
}

/* ---- decoding --------------------------------------------------------- */

enum { N_NAME, N_KIND, N_DTYPE, N_SHAPE, N_INPUTS, N_KERNEL, N_AXES, N_SAVED, N_STATE, N_POS,
       N_COUNT };
static const char *const node_keys[N_COUNT] = {
    "name", "kind", "dtype", "shape", "inputs", "kernel", "axes", "saved", "state", "pos",
};

/* The operator saved as kind/inputs/kernel, added to g through its
 * builder. Returns the new id or a negative code. */
static int rebuild(pl_graph *g, const char *name, pl_node_kind kind, const int *in, int nin,
                   const ein_kernel *k, const int64_t *shape, int rank, ein_dtype dt,
                   int state, ein_error *err)
{
    /* Inputs each kind takes (the builders read only that many). */
    int want = -1;
    switch (kind) {
    case PL_EINSUM: if (nin == 1 || nin == 2) want = nin; break;
    case PL_UNARY: case PL_SOFTMAX: case PL_ROPE: case PL_REDUCE: case PL_SLICE:
    case PL_SPLIT_HEADS: case PL_MERGE_HEADS: want = 1; break;
    case PL_BINARY: case PL_RMSNORM: case PL_EMBEDDING: case PL_ROPE_AT: want = 2; break;
    case PL_LAYERNORM: case PL_ATTENTION: case PL_CACHE_WRITE: want = 3; break;
    case PL_DECODE_ATTENTION: want = 4; break;
    case PL_CONCAT: if (nin >= 1) want = nin; break;
    case PL_INPUT:
        return state ? pl_graph_add_state(g, name, dt, rank, shape, err)
                     : pl_graph_add_input(g, name, dt, rank, shape, err);
    default: break;
    }
    if (want < 0 || nin != want)
        return ein_fail(err, EIN_EPROTO, "graph: node '%s': %d inputs for a %s", name, nin,
                        kind == PL_CONCAT || kind == PL_EINSUM ? "concat or einsum"
                                                               : "node of its kind");
    switch (kind) {
    case PL_EINSUM:
        return pl_graph_add_einsum(g, name, k->subscripts, in[0], nin == 2 ? in[1] : -1, err);
    case PL_UNARY: return pl_graph_add_unary(g, name, k->unary, k->scalar, in[0], err);
    case PL_BINARY: return pl_graph_add_binary(g, name, k->binary, in[0], in[1], err);
    case PL_SOFTMAX: return pl_graph_add_softmax(g, name, in[0], k->axis, err);
    case PL_RMSNORM: return pl_graph_add_norm(g, name, in[0], in[1], -1, k->eps, err);
    case PL_LAYERNORM: return pl_graph_add_norm(g, name, in[0], in[1], in[2], k->eps, err);
    case PL_ROPE: {
        int v = pl_graph_add_rope_style(g, name, in[0], k->head_dim, k->theta, k->list, k->nlist,
                                        k->style, err);
        int rc = v < 0 ? v : pl_graph_set_rope_scaling(g, v, &k->scaling, err);
        return rc < 0 ? rc : v;
    }
    case PL_ATTENTION:
        return pl_graph_add_attention(g, name, in[0], in[1], in[2], k->list, k->nlist, k->window,
                                      err);
    case PL_REDUCE: return pl_graph_add_reduce(g, name, k->reduce, k->axes, in[0], err);
    case PL_CONCAT: return pl_graph_add_concat(g, name, k->axis, in, nin, err);
    case PL_SLICE:
        if (k->axis < 0 || k->axis >= rank || k->start < 0 || k->start > PL_DIM_MAX)
            return ein_fail(err, EIN_EPROTO, "graph: node '%s': slice axis or start out of range",
                            name);
        return pl_graph_add_slice(g, name, in[0], k->axis, k->start, k->start + shape[k->axis],
                                  err);
    case PL_SPLIT_HEADS: return pl_graph_add_split_heads(g, name, in[0], k->head_dim, err);
    case PL_MERGE_HEADS: return pl_graph_add_merge_heads(g, name, in[0], err);
    case PL_EMBEDDING: return pl_graph_add_embedding(g, name, in[0], in[1], err);
    case PL_CACHE_WRITE: return pl_graph_add_cache_write(g, name, in[0], in[1], in[2], err);
    case PL_DECODE_ATTENTION:
        return pl_graph_add_decode_attention(g, name, in[0], in[1], in[2], in[3], k->window,
                                             err);
    case PL_ROPE_AT: {
        int v = pl_graph_add_rope_at(g, name, in[0], in[1], k->head_dim, k->theta, k->style, err);
        int rc = v < 0 ? v : pl_graph_set_rope_scaling(g, v, &k->scaling, err);
        return rc < 0 ? rc : v;
    }
    default: return ein_fail(err, EIN_EPROTO, "graph: node '%s': unknown kind", name);
    }
}

/* Whether two kernels encode to the same bytes. */
static int kernel_same(const ein_kernel *a, const ein_kernel *b)
{
    msgpack_sbuffer sa, sb;
    msgpack_packer pa, pb;
    msgpack_sbuffer_init(&sa);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pa, &sa, msgpack_sbuffer_write);
    msgpack_packer_init(&pb, &sb, msgpack_sbuffer_write);
    int same = ein_kernel_pack(&pa, a) == 0 && ein_kernel_pack(&pb, b) == 0 &&
               sa.size == sb.size && memcmp(sa.data, sb.data, sa.size) == 0;
    msgpack_sbuffer_destroy(&sa);
    msgpack_sbuffer_destroy(&sb);
    return same;
}

static int unpack_node(pl_graph *g, const msgpack_object *o, int v, ein_error *err)
{
    const msgpack_object *f[N_COUNT];
    char what[96], w[128], name[EIN_NAME_MAX];
    int64_t iv, shape[EIN_MAX_RANK];
    int rc, in[PL_MAX_INPUTS];
    ein_kernel k;
    memset(&k, 0, sizeof k);
    snprintf(what, sizeof what, "graph: node %d", v);
    if ((rc = ein_mp_fields(o, node_keys, f, N_COUNT, what, err)) < 0)
        return rc;
    for (int i = 0; i < N_COUNT; i++)
        if (!f[i])
            return ein_fail(err, EIN_EPROTO, "%s: missing field '%s'", what, node_keys[i]);
    if ((rc = ein_mp_get_str(f[N_NAME], name, sizeof name, what, err)) < 0)
        return rc;
    snprintf(what, sizeof what, "graph: node %d ('%s')", v, name);
    if ((rc = ein_mp_get_int(f[N_KIND], 0, PL_NODE_KIND_COUNT - 1, &iv, what, err)) < 0)
        return rc;
    pl_node_kind kind = (pl_node_kind)iv;
    if ((rc = ein_mp_get_int(f[N_DTYPE], 0, EIN_DTYPE_COUNT - 1, &iv, what, err)) < 0)
        return rc;
    ein_dtype dt = (ein_dtype)iv;
    const msgpack_object *a = f[N_SHAPE];
    if (a->type != MSGPACK_OBJECT_ARRAY || a->via.array.size > EIN_MAX_RANK)
        return ein_fail(err, EIN_EPROTO, "%s: shape: expected at most %d sizes", what,
                        EIN_MAX_RANK);
    int rank = (int)a->via.array.size;
    for (int i = 0; i < rank; i++)
        if ((rc = ein_mp_get_int(&a->via.array.ptr[i], 0, PL_DIM_MAX, &shape[i], what, err)) < 0)
            return rc;
    a = f[N_INPUTS];
    if (a->type != MSGPACK_OBJECT_ARRAY || a->via.array.size > PL_MAX_INPUTS)
        return ein_fail(err, EIN_EPROTO, "%s: inputs: expected at most %d ids", what,
                        PL_MAX_INPUTS);
    int nin = (int)a->via.array.size;
    for (int i = 0; i < nin; i++) {
        /* An operator reads only earlier nodes (pl_graph.h). */
        if ((rc = ein_mp_get_int(&a->via.array.ptr[i], 0, v - 1, &iv, what, err)) < 0)
            return ein_error_prefix(err, "input %d", i);
        in[i] = (int)iv;
    }
    if (kind == PL_INPUT) {
        if (nin || f[N_KERNEL]->type != MSGPACK_OBJECT_NIL)
            return ein_fail(err, EIN_EPROTO, "%s: an input with inputs or a kernel", what);
    } else {
        snprintf(w, sizeof w, "%s: kernel", what);
        if ((rc = ein_kernel_unpack(f[N_KERNEL], &k, w, err)) < 0)
            goto out;
    }
    int64_t state;
    if ((rc = ein_mp_get_int(f[N_STATE], 0, 1, &state, what, err)) < 0)
        goto out;
    if (state && kind != PL_INPUT) {
        rc = ein_fail(err, EIN_EPROTO, "%s: a state that is not an input", what);
        goto out;
    }
    int id = rebuild(g, name, kind, in, nin, &k, shape, rank, dt, (int)state, err);
    if (id < 0) {
        rc = id;
        ein_error_prefix(err, "saved graph");
        goto out;
    }
    const pl_node *nd = pl_graph_node(g, id);
    if (id != v || nd->kind != kind || nd->dtype != dt || nd->rank != rank ||
        memcmp(nd->shape, shape, (size_t)rank * sizeof *shape) != 0 ||
        (kind != PL_INPUT && !kernel_same(&nd->kernel, &k))) {
        rc = ein_fail(err, EIN_EPROTO, "%s: the saved node is not what its operator makes "
                      "of its inputs", what);
        goto out;
    }
    a = f[N_AXES];
    if (a->type != MSGPACK_OBJECT_ARRAY || (int)a->via.array.size != rank) {
        rc = ein_fail(err, EIN_EPROTO, "%s: axes: expected %d names", what, rank);
        goto out;
    }
    for (int i = 0; i < rank; i++) {
        char ax[PL_AXIS_NAME_MAX];
        if ((rc = ein_mp_get_str(&a->via.array.ptr[i], ax, sizeof ax, what, err)) < 0)
            goto out;
        pl_graph_set_axis_name(g, id, i, ax);
    }
    if ((rc = ein_mp_get_int(f[N_SAVED], 0, 1, &iv, what, err)) < 0)
        goto out;
    if (iv && (rc = pl_graph_save(g, id, err)) < 0)
        goto out;
    a = f[N_POS];
    int64_t line, col;
    if (a->type != MSGPACK_OBJECT_ARRAY || a->via.array.size != 2) {
        rc = ein_fail(err, EIN_EPROTO, "%s: pos: expected [line, col]", what);
        goto out;
    }
    if ((rc = ein_mp_get_int(&a->via.array.ptr[0], 0, INT32_MAX, &line, what, err)) < 0 ||
        (rc = ein_mp_get_int(&a->via.array.ptr[1], 0, INT32_MAX, &col, what, err)) < 0)
        goto out;
    pl_graph_set_pos(g, id, (int)line, (int)col);
    rc = 0;
out:
    free(k.list);
    return rc;
}

int pl_graph_unpack(const msgpack_object *o, pl_graph **out, ein_error *err)
{
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size == 0)
        return ein_fail(err, EIN_EPROTO, "graph: expected an array of nodes");
    pl_graph *g = pl_graph_new();
    if (!g)
        return ein_fail(err, EIN_ENOMEM, "graph: out of memory");
    for (uint32_t v = 0; v < o->via.array.size; v++) {
        int rc = unpack_node(g, &o->via.array.ptr[v], (int)v, err);
        if (rc < 0) {
            pl_graph_free(g);
            return rc;
        }
    }
    *out = g;
    return 0;
}

/* ---- plans ------------------------------------------------------------ */

int pl_plan_pack(msgpack_packer *pk, const pl_graph *g, const pl_plan *plan, ein_error *err)
{
    int e = 0;
    if (plan->nnodes != g->nnodes)
        return ein_fail(err, EIN_EINVAL, "plan: %d nodes for a graph of %d", plan->nnodes,
                        g->nnodes);
    /* "partials" only when native: files of f32 plans stay as they were. */
    int native = plan->partials == PL_PARTIALS_NATIVE;
    e |= msgpack_pack_map(pk, 4 + (size_t)native);
    KEY("p"); e |= msgpack_pack_int(pk, plan->p);
    KEY("selector"); e |= msgpack_pack_int(pk, (int)plan->selector);
    if (native) {
        KEY("partials"); e |= msgpack_pack_int(pk, (int)plan->partials);
    }
    KEY("total"); e |= msgpack_pack_double(pk, plan->total);
    KEY("nodes");
    e |= msgpack_pack_array(pk, (size_t)plan->nnodes);
    for (int v = 0; v < plan->nnodes && !e; v++) {
        const pl_choice *c = &plan->nodes[v];
        if (!c->planned) {
            e |= msgpack_pack_nil(pk);
            continue;
        }
        /* A fifth element, the copies, only for a replicated spec: files
         * of other plans stay as they were. */
        e |= msgpack_pack_array(pk, c->spec.replicated ? 5 : 4);
        e |= msgpack_pack_array(pk, (size_t)c->spec.nidx);
        for (int i = 0; i < c->spec.nidx; i++)
            e |= msgpack_pack_int(pk, c->spec.counts[i]);
        e |= msgpack_pack_double(pk, c->repart) | msgpack_pack_double(pk, c->join) |
             msgpack_pack_double(pk, c->agg);
        if (c->spec.replicated)
            e |= msgpack_pack_int(pk, c->spec.nparts);
    }
    return e ? ein_fail(err, EIN_ENOMEM, "plan: out of memory while encoding") : 0;
}

static int get_cost(const msgpack_object *o, double *out, const char *what, ein_error *err)
{
    int rc = ein_mp_get_double(o, out, what, err);
    if (rc == 0 && !(*out >= 0))
        return ein_fail(err, EIN_EPROTO, "%s: a negative cost", what);
    return rc;
}

/* Node v's choice from [counts, repart, join, agg] (counts must be a row
 * pl_spec_requests offers) or [counts, repart, join, agg, replicas] (a
 * replicated spec: every count 1, replicas = p, an operator
 * pl_spec_replicable accepts). */
static int unpack_choice(const msgpack_object *o, const pl_graph *g, int v, int p,
                         pl_choice *c, ein_error *err)
{
    char what[96];
    const pl_node *nd = pl_graph_node(g, v);
    snprintf(what, sizeof what, "plan: node %d ('%s')", v, nd->name);
    if (nd->kind == PL_INPUT)
        return ein_fail(err, EIN_EPROTO, "%s: an input is not planned", what);
    if (o->type != MSGPACK_OBJECT_ARRAY ||
        (o->via.array.size != 4 && o->via.array.size != 5) ||
        o->via.array.ptr[0].type != MSGPACK_OBJECT_ARRAY)
        return ein_fail(err, EIN_EPROTO, "%s: expected [counts, repartition, join, aggregation] "
                        "or [counts, repartition, join, aggregation, replicas]", what);
    const msgpack_object *a = &o->via.array.ptr[0];
    int counts[PL_MAX_INDICES] = {0}, *rows = NULL, nrows = 0, nidx = 0, rc;
    if (a->via.array.size > PL_MAX_INDICES)
        return ein_fail(err, EIN_EPROTO, "%s: too many counts", what);
    for (uint32_t i = 0; i < a->via.array.size; i++) {
        int64_t iv;
        if ((rc = ein_mp_get_int(&a->via.array.ptr[i], 1, p, &iv, what, err)) < 0)
            return rc;
        counts[i] = (int)iv;
    }
    if (o->via.array.size == 5) {
        int64_t reps;
        char w[128];
        snprintf(w, sizeof w, "%s: replicas", what);
        if ((rc = ein_mp_get_int(&o->via.array.ptr[4], 1, 4096, &reps, w, err)) < 0)
            return rc;
        if (reps != p)
            return ein_fail(err, EIN_EPROTO, "%s: %lld replicas on %d devices (a replicated "
                            "spec has one per device)", w, (long long)reps, p);
        int ones = 1;
        for (uint32_t i = 0; i < a->via.array.size; i++)
            ones &= counts[i] == 1;
        if (!ones || !pl_spec_replicable(g, v, p))
            return ein_fail(err, EIN_EPROTO, "%s: the operator has no replicated spec with "
                            "these counts on %d devices", w, p);
        if ((rc = get_cost(&o->via.array.ptr[1], &c->repart, what, err)) < 0 ||
            (rc = get_cost(&o->via.array.ptr[2], &c->join, what, err)) < 0 ||
            (rc = get_cost(&o->via.array.ptr[3], &c->agg, what, err)) < 0)
            return rc;
        if ((rc = pl_spec_make_replicated(g, v, p, &c->spec, err)) < 0)
            return ein_error_prefix(err, "%s", what);
        if ((int)a->via.array.size != c->spec.nidx) {
            pl_spec_clear(&c->spec);
            return ein_fail(err, EIN_EPROTO, "%s: %u counts for %d indices", w,
                            a->via.array.size, c->spec.nidx);
        }
        c->planned = 1;
        if (pl_tiling_of_outputs(&c->spec, &c->out_tiling) < 0)
            return ein_fail(err, EIN_ENOMEM, "%s: out of memory", what);
        return 0;
    }
    if ((rc = pl_spec_requests(g, v, p, &rows, &nrows, &nidx, err)) < 0)
        return ein_error_prefix(err, "%s", what);
    int found = 0;
    for (int r = 0; r < nrows && !found && nidx == (int)a->via.array.size; r++)
        found = memcmp(&rows[(size_t)r * (size_t)nidx], counts, (size_t)nidx * sizeof *counts) == 0;
    free(rows);
    if (!found)
        return ein_fail(err, EIN_EPROTO, "%s: the saved split is not one of the operator's on %d "
                        "devices", what, p);
    if ((rc = get_cost(&o->via.array.ptr[1], &c->repart, what, err)) < 0 ||
        (rc = get_cost(&o->via.array.ptr[2], &c->join, what, err)) < 0 ||
        (rc = get_cost(&o->via.array.ptr[3], &c->agg, what, err)) < 0)
        return rc;
    c->planned = 1;
    if ((rc = pl_spec_make(g, v, counts, &c->spec, err)) < 0)
        return ein_error_prefix(err, "%s", what);
    if (pl_tiling_of_outputs(&c->spec, &c->out_tiling) < 0)
        return ein_fail(err, EIN_ENOMEM, "%s: out of memory", what);
    return 0;
}

int pl_plan_unpack(const msgpack_object *o, const pl_graph *g, pl_plan **out, ein_error *err)
{
    static const char *const keys[] = {"p", "selector", "total", "nodes", "partials"};
    const msgpack_object *f[5];
    int64_t p, sel, partials = PL_PARTIALS_F32;
    double total;
    int rc;
    if ((rc = ein_mp_fields(o, keys, f, 5, "plan", err)) < 0)
        return rc;
    if (f[4] && (rc = ein_mp_get_int(f[4], PL_PARTIALS_F32, PL_PARTIALS_NATIVE, &partials,
                                     "plan.partials", err)) < 0)
        return rc;
    for (int i = 0; i < 4; i++)
        if (!f[i])
            return ein_fail(err, EIN_EPROTO, "plan: missing field '%s'", keys[i]);
    if ((rc = ein_mp_get_int(f[0], 1, 4096, &p, "plan.p", err)) < 0 ||
        (rc = ein_mp_get_int(f[1], PL_SELECT_DP, PL_SELECT_RANDOM, &sel, "plan.selector",
                             err)) < 0 ||
        (rc = get_cost(f[2], &total, "plan.total", err)) < 0)
        return rc;
    if (f[3]->type != MSGPACK_OBJECT_ARRAY || (int64_t)f[3]->via.array.size != g->nnodes)
        return ein_fail(err, EIN_EPROTO, "plan.nodes: expected one entry per node of the graph "
                        "(%d)", g->nnodes);
    pl_plan *plan = calloc(1, sizeof *plan);
    if (!plan || !(plan->nodes = calloc((size_t)g->nnodes, sizeof *plan->nodes))) {
        free(plan);
        return ein_fail(err, EIN_ENOMEM, "plan: out of memory");
    }
    plan->p = (int)p;
    plan->nnodes = g->nnodes;
    plan->selector = (pl_selector)sel;
    plan->partials = (pl_partials)partials;
    plan->total = total;
    for (int v = 0; v < g->nnodes; v++) {
        const msgpack_object *c = &f[3]->via.array.ptr[v];
        if (c->type == MSGPACK_OBJECT_NIL)
            continue;
        if ((rc = unpack_choice(c, g, v, (int)p, &plan->nodes[v], err)) < 0) {
            pl_plan_free(plan);
            return rc;
        }
    }
    *out = plan;
    return 0;
}
