/* planner/rewrite/rw_egraph.c — union-find, hash-consing, deferred rebuild
 * (congruence closure) and the shape/dtype/weight analysis. */
#include <stdlib.h>
#include <string.h>

#include "common/base/ein_vec.h"
#include "planner/rewrite/rw_egraph.h"

static const char *const op_names[RW_OP_COUNT] = {
    "input", "opaque", "matmul", "add", "concat", "slice", "unary", "binary", "transpose",
};

const char *rw_op_name(int op)
{
    return op >= 0 && op < RW_OP_COUNT ? op_names[op] : "?";
}

int rw_op_by_name(const char *s)
{
    /* Only the operators a rule may name. */
    for (int i = RW_MATMUL; i < RW_OP_COUNT; i++)
        if (strcmp(s, op_names[i]) == 0)
            return i;
    return -1;
}

rw_egraph *rw_egraph_new(const pl_graph *src, const uint8_t *is_weight)
{
    rw_egraph *eg = calloc(1, sizeof *eg);
    if (!eg)
        return NULL;
    eg->src = src;
    eg->is_weight = is_weight;
    eg->table_cap = 1024;
    eg->table = malloc((size_t)eg->table_cap * sizeof *eg->table);
    if (!eg->table) {
        free(eg);
        return NULL;
    }
    memset(eg->table, 0xff, (size_t)eg->table_cap * sizeof *eg->table); /* -1 */
    return eg;
}

void rw_egraph_free(rw_egraph *eg)
{
    if (!eg)
        return;
    for (int i = 0; i < eg->nclasses; i++) {
        free(eg->classes[i].nodes.v);
        free(eg->classes[i].parents.v);
    }
    free(eg->classes);
    free(eg->uf);
    free(eg->nodes);
    free(eg->table);
    free(eg->pending.v);
    free(eg);
}

int rw_find(rw_egraph *eg, int c)
{
    int r = c;
    while (eg->uf[r] != r)
        r = eg->uf[r];
    while (eg->uf[c] != r) { /* path compression */
        int next = eg->uf[c];
        eg->uf[c] = r;
        c = next;
    }
    return r;
}

int rw_find_const(const rw_egraph *eg, int c)
{
    while (eg->uf[c] != c)
        c = eg->uf[c];
    return c;
}

int rw_egraph_nclasses(const rw_egraph *eg)
{
    int n = 0;
    for (int i = 0; i < eg->nclasses; i++)
        n += eg->uf[i] == i;
    return n;
}

/* ---- hash-cons table ------------------------------------------------- */

static uint64_t node_hash(const rw_node *n)
{
    uint64_t h = 1469598103934665603ull;
#define MIX(x) (h = (h ^ (uint64_t)(x)) * 1099511628211ull)
    MIX(n->op);
    MIX(n->nch);
    for (int i = 0; i < RW_MAX_PARAMS; i++)
        MIX(n->p[i]);
    for (int i = 0; i < n->nch; i++)
        MIX(n->ch[i]);
#undef MIX
    return h ^ (h >> 29);
}

static int node_eq(const rw_node *a, const rw_node *b)
{
    if (a->op != b->op || a->nch != b->nch)
        return 0;
    for (int i = 0; i < RW_MAX_PARAMS; i++)
        if (a->p[i] != b->p[i])
            return 0;
    for (int i = 0; i < a->nch; i++)
        if (a->ch[i] != b->ch[i])
            return 0;
    return 1;
}

/* The node id equal to *n, or -1. */
static int table_lookup(const rw_egraph *eg, const rw_node *n)
{
    size_t mask = (size_t)eg->table_cap - 1;
    for (size_t s = node_hash(n) & mask;; s = (s + 1) & mask) {
        int id = eg->table[s];
        if (id == -1)
            return -1;
        if (id >= 0 && node_eq(&eg->nodes[id], n))
            return id;
    }
}

static void table_put(rw_egraph *eg, int id)
{
    size_t mask = (size_t)eg->table_cap - 1;
    size_t s = node_hash(&eg->nodes[id]) & mask;
    while (eg->table[s] >= 0)
        s = (s + 1) & mask;
    if (eg->table[s] == -1)
        eg->table_used++;
    eg->table[s] = id;
}

static int table_insert(rw_egraph *eg, int id)
{
    if ((eg->table_used + 1) * 2 > eg->table_cap) {
        int old_cap = eg->table_cap, *old = eg->table;
        int cap = old_cap;
        int live = 0;
        for (int i = 0; i < old_cap; i++)
            live += old[i] >= 0;
        while ((live + 1) * 4 > cap)
            cap *= 2;
        int *t = malloc((size_t)cap * sizeof *t);
        if (!t)
            return EIN_ENOMEM;
        memset(t, 0xff, (size_t)cap * sizeof *t);
        eg->table = t;
        eg->table_cap = cap;
        eg->table_used = 0;
        for (int i = 0; i < old_cap; i++)
            if (old[i] >= 0)
                table_put(eg, old[i]);
        free(old);
    }
    table_put(eg, id);
    return 0;
}

/* Remove node `id` (by identity) if it is in the table. */
static void table_remove(rw_egraph *eg, int id)
{
    size_t mask = (size_t)eg->table_cap - 1;
    for (size_t s = node_hash(&eg->nodes[id]) & mask;; s = (s + 1) & mask) {
        if (eg->table[s] == -1)
            return;
        if (eg->table[s] == id) {
            eg->table[s] = -2;
            return;
        }
    }
}

/* ---- analysis ---------------------------------------------------------- */

static int infer_fail(ein_error *err, const char *fmt, int64_t a, int64_t b)
{
    return ein_fail(err, EIN_ESHAPE, fmt, (long long)a, (long long)b);
}

int rw_node_infer(const rw_egraph *eg, const rw_node *n, rw_class *out, ein_error *err)
{
    const rw_class *c[PL_MAX_INPUTS];
    for (int i = 0; i < n->nch; i++)
        c[i] = &eg->classes[rw_find_const(eg, n->ch[i])];
    if (n->op == RW_INPUT || n->op == RW_OPAQUE) {
        const pl_node *s = &eg->src->nodes[n->p[0]];
        memset(out, 0, sizeof *out);
        out->dtype = s->dtype;
        out->rank = s->rank;
        memcpy(out->shape, s->shape, sizeof out->shape);
        return 0;
    }
    return rw_infer(n->op, n->p, n->nch, c, out, err);
}

int rw_infer(int op, const int64_t *p, int nch, const rw_class *const *c, rw_class *out,
             ein_error *err)
{
    memset(out, 0, sizeof *out);
    switch (op) {
    case RW_MATMUL:
        if (nch != 2 || c[0]->rank != 2 || c[1]->rank != 2)
            return ein_fail(err, EIN_ESHAPE, "matmul: operands must be two matrices");
        if (c[0]->shape[1] != c[1]->shape[0])
            return infer_fail(err, "matmul: inner dimensions %lld and %lld differ",
                              c[0]->shape[1], c[1]->shape[0]);
        if (c[0]->dtype != c[1]->dtype)
            return ein_fail(err, EIN_ESHAPE, "matmul: operands of different dtypes");
        out->dtype = c[0]->dtype;
        out->rank = 2;
        out->shape[0] = c[0]->shape[0];
        out->shape[1] = c[1]->shape[1];
        break;
    case RW_UNARY:
        if (nch != 1 || p[0] < 0 || p[0] >= EIN_UN_COUNT)
            return ein_fail(err, EIN_ESHAPE, "unary: one operand and a known function");
        out->dtype = c[0]->dtype;
        out->rank = c[0]->rank;
        memcpy(out->shape, c[0]->shape, sizeof out->shape);
        break;
    case RW_TRANSPOSE:
        if (nch != 1 || c[0]->rank != 2)
            return ein_fail(err, EIN_ESHAPE, "transpose: the operand must be a matrix");
        out->dtype = c[0]->dtype;
        out->rank = 2;
        out->shape[0] = c[0]->shape[1];
        out->shape[1] = c[0]->shape[0];
        break;
    case RW_BINARY: /* the shapes are add's */
    case RW_ADD: {
        if (op == RW_BINARY && (p[0] < 0 || p[0] >= EIN_BIN_COUNT || p[0] == EIN_BIN_ADD))
            return ein_fail(err, EIN_ESHAPE, "binary: unknown function (add is its own operator)");
        if (nch != 2 || c[0]->dtype != c[1]->dtype)
            return ein_fail(err, EIN_ESHAPE, "add: needs two operands of one dtype");
        int r = c[0]->rank > c[1]->rank ? c[0]->rank : c[1]->rank;
        out->dtype = c[0]->dtype;
        out->rank = r;
        for (int i = 0; i < r; i++) { /* numpy broadcasting, right-aligned */
            int ia = i - (r - c[0]->rank), ib = i - (r - c[1]->rank);
            int64_t da = ia >= 0 ? c[0]->shape[ia] : 1, db = ib >= 0 ? c[1]->shape[ib] : 1;
            if (da != db && da != 1 && db != 1)
                return infer_fail(err, "add: dimensions %lld and %lld do not broadcast", da, db);
            out->shape[i] = da == 1 ? db : da;
        }
        break;
    }
    case RW_CONCAT: {
        int64_t ax = p[0];
        if (nch < 1 || ax < 0 || ax >= c[0]->rank)
            return ein_fail(err, EIN_ESHAPE, "concat: axis %lld out of range", (long long)ax);
        *out = (rw_class){0};
        out->dtype = c[0]->dtype;
        out->rank = c[0]->rank;
        memcpy(out->shape, c[0]->shape, sizeof out->shape);
        for (int i = 1; i < nch; i++) {
            if (c[i]->rank != c[0]->rank || c[i]->dtype != c[0]->dtype)
                return ein_fail(err, EIN_ESHAPE, "concat: inputs of different ranks or dtypes");
            for (int d = 0; d < c[0]->rank; d++)
                if (d != ax && c[i]->shape[d] != c[0]->shape[d])
                    return infer_fail(err, "concat: sizes %lld and %lld differ off the axis",
                                      c[i]->shape[d], c[0]->shape[d]);
            out->shape[ax] += c[i]->shape[ax];
        }
        break;
    }
    case RW_SLICE: {
        int64_t ax = p[0];
        if (nch != 1 || ax < 0 || ax >= c[0]->rank)
            return ein_fail(err, EIN_ESHAPE, "slice: axis %lld out of range", (long long)ax);
        if (p[1] < 0 || p[1] >= p[2] || p[2] > c[0]->shape[ax])
            return infer_fail(err, "slice: [%lld, %lld) is not a non-empty part of the axis",
                              p[1], p[2]);
        out->dtype = c[0]->dtype;
        out->rank = c[0]->rank;
        memcpy(out->shape, c[0]->shape, sizeof out->shape);
        out->shape[ax] = p[2] - p[1];
        break;
    }
    default:
        return ein_fail(err, EIN_EINVAL, "rewrite: unknown operator %d", op);
    }
    return 0;
}

/* Every input this node depends on is a weight. */
static int node_weight(const rw_egraph *eg, const rw_node *n)
{
    if (n->op == RW_INPUT)
        return eg->is_weight && eg->is_weight[n->p[0]];
    for (int i = 0; i < n->nch; i++)
        if (!eg->classes[rw_find_const(eg, n->ch[i])].weight)
            return 0;
    return 1;
}

/* ---- add, union, rebuild ---------------------------------------------- */

static void canon(rw_egraph *eg, rw_node *n)
{
    for (int i = 0; i < n->nch; i++)
        n->ch[i] = rw_find(eg, n->ch[i]);
}

int rw_add(rw_egraph *eg, const rw_node *proto, ein_error *err)
{
    rw_node n = *proto;
    n.dead = 0;
    canon(eg, &n);
    int found = table_lookup(eg, &n);
    if (found >= 0)
        return rw_find(eg, eg->nodes[found].cls);
    rw_class an;
    int rc = rw_node_infer(eg, &n, &an, err);
    if (rc < 0)
        return rc;
    /* classes and uf grow together: one capacity for both */
    int ccap = eg->cap_classes, ucap = eg->cap_classes;
    if (ein_vec_reserve(&eg->nodes, &eg->cap_nodes, (int64_t)eg->nnodes + 1,
                        sizeof *eg->nodes) < 0 ||
        ein_vec_reserve(&eg->classes, &ccap, (int64_t)eg->nclasses + 1, sizeof *eg->classes) < 0 ||
        ein_vec_reserve(&eg->uf, &ucap, (int64_t)eg->nclasses + 1, sizeof *eg->uf) < 0)
        return ein_fail(err, EIN_ENOMEM, "rewrite: out of memory");
    eg->cap_classes = ccap < ucap ? ccap : ucap;
    int id = eg->nnodes, cid = eg->nclasses;
    n.cls = cid;
    an.weight = node_weight(eg, &n);
    an.size = 1;
    eg->nodes[id] = n;
    eg->classes[cid] = an;
    eg->uf[cid] = cid;
    eg->nnodes++;
    eg->nclasses++;
    eg->nlive++;
    if (ein_vec_push(&eg->classes[cid].nodes, id) < 0 || table_insert(eg, id) < 0)
        return ein_fail(err, EIN_ENOMEM, "rewrite: out of memory");
    for (int i = 0; i < n.nch; i++)
        if (ein_vec_push(&eg->classes[n.ch[i]].parents, id) < 0)
            return ein_fail(err, EIN_ENOMEM, "rewrite: out of memory");
    return cid;
}

static int append(rw_ivec *dst, rw_ivec *src)
{
    for (int i = 0; i < src->n; i++)
        if (ein_vec_push(dst, src->v[i]) < 0)
            return EIN_ENOMEM;
    free(src->v);
    *src = (rw_ivec){0};
    return 0;
}

int rw_union(rw_egraph *eg, int a, int b, ein_error *err)
{
    a = rw_find(eg, a);
    b = rw_find(eg, b);
    if (a == b)
        return 0;
    rw_class *ca = &eg->classes[a], *cb = &eg->classes[b];
    if (ca->rank != cb->rank || ca->dtype != cb->dtype ||
        memcmp(ca->shape, cb->shape, (size_t)ca->rank * sizeof ca->shape[0]) != 0)
        return ein_fail(err, EIN_ESHAPE, "rewrite: merging classes %d and %d of different "
                        "shapes (an unsound rule?)", a, b);
    if (ca->size < cb->size) {
        int t = a; a = b; b = t;
        rw_class *tc = ca; ca = cb; cb = tc;
    }
    eg->uf[b] = a;
    ca->size += cb->size;
    ca->weight |= cb->weight;
    if (append(&ca->nodes, &cb->nodes) < 0 || append(&ca->parents, &cb->parents) < 0 ||
        ein_vec_push(&eg->pending, a) < 0)
        return ein_fail(err, EIN_ENOMEM, "rewrite: out of memory");
    return 1;
}

/* Re-canonicalise the parents of class c (as egg's repair): congruent
 * parents are merged, their duplicates marked dead. */
static int repair(rw_egraph *eg, int c, ein_error *err)
{
    rw_ivec ps = eg->classes[c].parents;
    eg->classes[c].parents = (rw_ivec){0};
    rw_ivec keep = {0};
    int rc = 0;
    for (int i = 0; i < ps.n; i++)
        if (!eg->nodes[ps.v[i]].dead)
            table_remove(eg, ps.v[i]);
    for (int i = 0; i < ps.n; i++) {
        int pn = ps.v[i];
        rw_node *n = &eg->nodes[pn];
        if (n->dead)
            continue;
        canon(eg, n);
        int m = table_lookup(eg, n);
        if (m == pn)
            continue; /* listed twice */
        if (m >= 0) {
            n->dead = 1;
            eg->nlive--;
            if ((rc = rw_union(eg, eg->nodes[m].cls, n->cls, err)) < 0)
                goto out;
            continue;
        }
        if (table_insert(eg, pn) < 0 || ein_vec_push(&keep, pn) < 0) {
            rc = ein_fail(err, EIN_ENOMEM, "rewrite: out of memory");
            goto out;
        }
        int pc = rw_find(eg, n->cls);
        if (!eg->classes[pc].weight && node_weight(eg, n)) {
            eg->classes[pc].weight = 1;
            if (ein_vec_push(&eg->pending, pc) < 0) {
                rc = ein_fail(err, EIN_ENOMEM, "rewrite: out of memory");
                goto out;
            }
        }
    }
    if (append(&eg->classes[rw_find(eg, c)].parents, &keep) < 0)
        rc = ein_fail(err, EIN_ENOMEM, "rewrite: out of memory");
out:
    free(keep.v);
    free(ps.v);
    return rc < 0 ? rc : 0;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

int rw_egraph_rebuild(rw_egraph *eg, ein_error *err)
{
    while (eg->pending.n > 0) {
        rw_ivec todo = eg->pending;
        eg->pending = (rw_ivec){0};
        for (int i = 0; i < todo.n; i++)
            todo.v[i] = rw_find(eg, todo.v[i]);
        qsort(todo.v, (size_t)todo.n, sizeof *todo.v, cmp_int);
        int rc = 0;
        for (int i = 0; i < todo.n && rc == 0; i++)
            if (i == 0 || todo.v[i] != todo.v[i - 1])
                rc = repair(eg, rw_find(eg, todo.v[i]), err);
        free(todo.v);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int rw_egraph_check(rw_egraph *eg)
{
    int bad = 0;
    for (int i = 0; i < eg->nnodes; i++) {
        const rw_node *n = &eg->nodes[i];
        if (n->dead)
            continue;
        for (int k = 0; k < n->nch; k++)
            bad += n->ch[k] != rw_find(eg, n->ch[k]);
        bad += table_lookup(eg, n) != i;
    }
    return bad;
}
