/* planner/pl_graph.c — see pl_graph.h.
 *
 * Every builder checks everything it needs (ids, name, ranks, sizes,
 * dtypes) before touching the graph, so a failed add leaves the graph
 * exactly as it was. Messages name the operator and the tensors involved,
 * without a source position: the parser adds "file:line:col: " in front. */
#include "planner/pl_graph.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Keep ids (int) and the index arithmetic far from overflow. */
#define PL_GRAPH_NODES_MAX (INT_MAX / 4)

static const char *const unary_names[EIN_UN_COUNT] = {
    "relu", "silu", "gelu", "exp", "neg", "scale",
};
static const char *const binary_names[EIN_BIN_COUNT] = {"add", "sub", "mul"};

pl_graph *pl_graph_new(void)
{
    return calloc(1, sizeof(pl_graph));
}

void pl_graph_free(pl_graph *g)
{
    if (!g)
        return;
    free(g->nodes);
    free(g->index);
    free(g);
}

const pl_node *pl_graph_node(const pl_graph *g, int id)
{
    if (!g || id < 0 || id >= g->nnodes)
        return NULL;
    return &g->nodes[id];
}

/* ---- name index ---------------------------------------------------------- */

static uint32_t name_hash(const char *s)
{
    uint32_t h = 2166136261u;           /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

static int index_fresh(const pl_graph *g)
{
    return g->index && g->index_n == g->nnodes;
}

int pl_graph_find(const pl_graph *g, const char *name)
{
    if (!g || !name)
        return -1;
    if (index_fresh(g)) {
        uint32_t mask = (uint32_t)g->index_cap - 1;
        for (uint32_t i = name_hash(name) & mask;; i = (i + 1) & mask) {
            int slot = g->index[i];
            if (slot == 0)
                return -1;
            if (strcmp(g->nodes[slot - 1].name, name) == 0)
                return slot - 1;
        }
    }
    /* Index missing or stale (graph built by hand): a linear scan is right. */
    for (int i = 0; i < g->nnodes; i++)
        if (strcmp(g->nodes[i].name, name) == 0)
            return i;
    return -1;
}

static void index_put(pl_graph *g, int id)
{
    uint32_t mask = (uint32_t)g->index_cap - 1;
    uint32_t i = name_hash(g->nodes[id].name) & mask;
    while (g->index[i] != 0)
        i = (i + 1) & mask;
    g->index[i] = id + 1;
}

/* Make the index cover every node and leave room for one more at load <= 1/2. */
static int index_reserve(pl_graph *g, ein_error *err)
{
    if (index_fresh(g) && (int64_t)(g->nnodes + 1) * 2 <= g->index_cap)
        return 0;
    int cap = 64;
    while (cap < (g->nnodes + 1) * 2)
        cap *= 2;
    int *idx = calloc((size_t)cap, sizeof *idx);
    if (!idx)
        return ein_fail(err, EIN_ENOMEM, "graph: out of memory for the name index");
    free(g->index);
    g->index = idx;
    g->index_cap = cap;
    for (int i = 0; i < g->nnodes; i++)
        index_put(g, i);
    g->index_n = g->nnodes;
    return 0;
}

/* ---- helpers ------------------------------------------------------------- */

/* "8x16x4" */
static const char *shape_str(char *buf, size_t len, int rank, const int64_t *shape)
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
static int check_shape(const char *what, const char *name, int rank,
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

static int check_id(const pl_graph *g, const char *what, int id, ein_error *err)
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
static int append(pl_graph *g, const char *name, const pl_node *proto, ein_error *err)
{
    int rc;
    if ((rc = check_name(g, name, err)) < 0)
        return rc;
    if (g->nnodes >= PL_GRAPH_NODES_MAX)
        return ein_fail(err, EIN_EINVAL, "graph: too many nodes (at most %d)", PL_GRAPH_NODES_MAX);
    if ((rc = index_reserve(g, err)) < 0)
        return rc;
    if (g->nnodes == g->cap) {
        int cap = g->cap ? g->cap * 2 : 16;
        pl_node *nodes = realloc(g->nodes, (size_t)cap * sizeof *nodes);
        if (!nodes)
            return ein_fail(err, EIN_ENOMEM, "graph: out of memory for %d nodes", cap);
        g->nodes = nodes;
        g->cap = cap;
    }
    int id = g->nnodes;
    pl_node *n = &g->nodes[id];
    *n = *proto;
    memset(n->name, 0, sizeof n->name);
    memcpy(n->name, name, strlen(name));
    n->saved = 0;
    n->line = n->col = 0;
    g->nnodes++;
    index_put(g, id);
    g->index_n = g->nnodes;
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
    if ((rc = check_shape("input", name ? name : "?", rank, shape, err)) < 0)
        return rc;
    pl_node n;
    memset(&n, 0, sizeof n);
    n.kind = PL_INPUT;
    n.dtype = dtype;
    n.rank = rank;
    memcpy(n.shape, shape, (size_t)rank * sizeof shape[0]);
    return append(g, name, &n, err);
}

int pl_einsum_parse(const char *s, pl_einsum_sub *out, ein_error *err)
{
    if (!s || !s[0])
        return ein_fail(err, EIN_EINVAL, "einsum subscripts are empty; expected e.g. 'ij,jk->ik'");
    size_t len = strnlen(s, EIN_NAME_MAX);
    if (len >= EIN_NAME_MAX)
        return ein_fail(err, EIN_EINVAL, "einsum subscripts '%.32s...' are too long (at most %d characters)",
                        s, EIN_NAME_MAX - 1);
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if ((c >= 'a' && c <= 'z') || c == ',')
            continue;
        if (c == '-' && s[i + 1] == '>') {
            i++;
            continue;
        }
        if (c >= ' ' && c < 127)
            return ein_fail(err, EIN_EINVAL,
                            "einsum '%s': unexpected character '%c' at position %zu; expected "
                            "letters a-z, ',' and '->'", s, c, i + 1);
        return ein_fail(err, EIN_EINVAL,
                        "einsum '%s': unexpected byte 0x%02x at position %zu; expected "
                        "letters a-z, ',' and '->'", s, (unsigned char)c, i + 1);
    }
    const char *arrow = strstr(s, "->");
    if (!arrow)
        return ein_fail(err, EIN_EINVAL, "einsum '%s': missing '->'; expected an explicit output "
                        "such as 'ij,jk->ik'", s);
    if (strstr(arrow + 2, "->"))
        return ein_fail(err, EIN_EINVAL, "einsum '%s': more than one '->'", s);
    if (strchr(arrow + 2, ','))
        return ein_fail(err, EIN_EINVAL, "einsum '%s': ',' after '->'; the output is one operand", s);

    pl_einsum_sub r;
    memset(&r, 0, sizeof r);
    const char *p = s;
    for (;;) {
        const char *end = p;
        while (end < arrow && *end != ',')
            end++;
        if (r.nops == 2)
            return ein_fail(err, EIN_EINVAL, "einsum '%s': more than 2 operands; expected 1 or 2", s);
        int k = r.nops++;
        int n = (int)(end - p);
        if (n == 0)
            return ein_fail(err, EIN_EINVAL, "einsum '%s': operand %d has no indices "
                            "(rank-0 tensors are not supported)", s, k + 1);
        if (n > EIN_MAX_RANK)
            return ein_fail(err, EIN_EINVAL, "einsum '%s': operand %d has %d indices; at most %d",
                            s, k + 1, n, EIN_MAX_RANK);
        for (int i = 0; i < n; i++) {
            if (memchr(p, p[i], (size_t)i))
                return ein_fail(err, EIN_EINVAL, "einsum '%s': index %c repeated in operand %d "
                                "(diagonals are not supported)", s, p[i], k + 1);
            r.ops[k][i] = p[i];
        }
        r.rank[k] = n;
        if (end == arrow)
            break;
        p = end + 1;
    }
    const char *o = arrow + 2;
    int n = (int)strlen(o);
    if (n == 0)
        return ein_fail(err, EIN_EINVAL, "einsum '%s': the output has no indices "
                        "(rank-0 results are not supported)", s);
    if (n > EIN_MAX_RANK)
        return ein_fail(err, EIN_EINVAL, "einsum '%s': the output has %d indices; at most %d",
                        s, n, EIN_MAX_RANK);
    for (int i = 0; i < n; i++) {
        if (memchr(o, o[i], (size_t)i))
            return ein_fail(err, EIN_EINVAL, "einsum '%s': index %c repeated in the output", s, o[i]);
        int found = 0;
        for (int k = 0; k < r.nops; k++)
            found |= memchr(r.ops[k], o[i], (size_t)r.rank[k]) != NULL;
        if (!found)
            return ein_fail(err, EIN_EINVAL, "einsum '%s': output index %c appears in no operand",
                            s, o[i]);
        r.out[i] = o[i];
    }
    r.out_rank = n;
    *out = r;
    return 0;
}

int pl_graph_add_einsum(pl_graph *g, const char *name, const char *subscripts,
                        int a, int b, ein_error *err)
{
    int rc;
    pl_einsum_sub sub;
    if (!g)
        return ein_fail(err, EIN_EINVAL, "einsum: NULL graph");
    if ((rc = pl_einsum_parse(subscripts, &sub, err)) < 0)
        return rc;
    int ids[2] = {a, b};
    int ntensors = b >= 0 ? 2 : 1;
    if (sub.nops != ntensors)
        return ein_fail(err, EIN_EINVAL, "einsum '%s' has %d operand%s but %d tensor%s given",
                        subscripts, sub.nops, sub.nops == 1 ? "" : "s",
                        ntensors, ntensors == 1 ? " was" : "s were");
    for (int k = 0; k < ntensors; k++)
        if ((rc = check_id(g, "einsum", ids[k], err)) < 0)
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
                            shape_str(sbuf, sizeof sbuf, t->rank, t->shape));
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
    if (ntensors == 2 && g->nodes[a].dtype != g->nodes[b].dtype)
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
    if ((rc = check_shape("einsum", name ? name : "the result", n.rank, n.shape, err)) < 0)
        return rc;
    n.ninputs = ntensors;
    n.inputs[0] = a;
    n.inputs[1] = ntensors == 2 ? b : -1;
    n.kernel.kind = EIN_KERNEL_EINSUM;
    memcpy(n.kernel.subscripts, subscripts, strlen(subscripts) + 1);
    return append(g, name, &n, err);
}

int pl_graph_add_matmul(pl_graph *g, const char *name, int a, int b, ein_error *err)
{
    int rc;
    if (!g)
        return ein_fail(err, EIN_EINVAL, "matmul: NULL graph");
    if ((rc = check_id(g, "matmul", a, err)) < 0 || (rc = check_id(g, "matmul", b, err)) < 0)
        return rc;
    const pl_node *ta = &g->nodes[a], *tb = &g->nodes[b];
    char sa[160], sb[160];
    shape_str(sa, sizeof sa, ta->rank, ta->shape);
    shape_str(sb, sizeof sb, tb->rank, tb->shape);
    /* Checked here rather than left to einsum so the message speaks of
     * matrices, which is what the user wrote. */
    if (ta->rank != 2 || tb->rank != 2)
        return ein_fail(err, EIN_ESHAPE, "matmul: %s is %s and %s is %s; matmul takes two "
                        "matrices (use einsum for other ranks)", ta->name, sa, tb->name, sb);
    if (ta->shape[1] != tb->shape[0])
        return ein_fail(err, EIN_ESHAPE, "matmul: %s is %s but %s is %s; the columns of the "
                        "first must equal the rows of the second", ta->name, sa, tb->name, sb);
    if (ta->dtype != tb->dtype)
        return ein_fail(err, EIN_ESHAPE, "matmul: %s is %s but %s is %s; operands need one dtype",
                        ta->name, ein_dtype_name(ta->dtype), tb->name, ein_dtype_name(tb->dtype));
    return pl_graph_add_einsum(g, name, "ij,jk->ik", a, b, err);
}

int pl_graph_add_unary(pl_graph *g, const char *name, ein_unary op, double scalar,
                       int x, ein_error *err)
{
    int rc;
    if (!g)
        return ein_fail(err, EIN_EINVAL, "unary: NULL graph");
    if ((int)op < 0 || op >= EIN_UN_COUNT)
        return ein_fail(err, EIN_EINVAL, "unary: invalid operator %d", (int)op);
    if ((rc = check_id(g, unary_names[op], x, err)) < 0)
        return rc;
    if (op == EIN_UN_SCALE && !isfinite(scalar))
        return ein_fail(err, EIN_EINVAL, "scale: factor %g is not finite", scalar);
    const pl_node *t = &g->nodes[x];
    pl_node n;
    memset(&n, 0, sizeof n);
    n.kind = PL_UNARY;
    n.dtype = t->dtype;
    n.rank = t->rank;
    memcpy(n.shape, t->shape, sizeof n.shape);
    n.ninputs = 1;
    n.inputs[0] = x;
    n.inputs[1] = -1;
    n.kernel.kind = EIN_KERNEL_UNARY;
    n.kernel.unary = op;
    /* Only scale has a factor; 0 elsewhere keeps equal operators bitwise equal. */
    n.kernel.scalar = op == EIN_UN_SCALE ? scalar : 0.0;
    return append(g, name, &n, err);
}

int pl_graph_add_binary(pl_graph *g, const char *name, ein_binary op, int a, int b,
                        ein_error *err)
{
    int rc;
    if (!g)
        return ein_fail(err, EIN_EINVAL, "binary: NULL graph");
    if ((int)op < 0 || op >= EIN_BIN_COUNT)
        return ein_fail(err, EIN_EINVAL, "binary: invalid operator %d", (int)op);
    const char *what = binary_names[op];
    if ((rc = check_id(g, what, a, err)) < 0 || (rc = check_id(g, what, b, err)) < 0)
        return rc;
    const pl_node *ta = &g->nodes[a], *tb = &g->nodes[b];
    int same = ta->rank == tb->rank;
    for (int i = 0; same && i < ta->rank; i++)
        same = ta->shape[i] == tb->shape[i];
    if (!same) {
        char sa[160], sb[160];
        return ein_fail(err, EIN_ESHAPE, "%s: %s is %s but %s is %s; shapes must be equal",
                        what, ta->name, shape_str(sa, sizeof sa, ta->rank, ta->shape),
                        tb->name, shape_str(sb, sizeof sb, tb->rank, tb->shape));
    }
    if (ta->dtype != tb->dtype)
        return ein_fail(err, EIN_ESHAPE, "%s: %s is %s but %s is %s; operands need one dtype",
                        what, ta->name, ein_dtype_name(ta->dtype),
                        tb->name, ein_dtype_name(tb->dtype));
    pl_node n;
    memset(&n, 0, sizeof n);
    n.kind = PL_BINARY;
    n.dtype = ta->dtype;
    n.rank = ta->rank;
    memcpy(n.shape, ta->shape, sizeof n.shape);
    n.ninputs = 2;
    n.inputs[0] = a;
    n.inputs[1] = b;
    n.kernel.kind = EIN_KERNEL_BINARY;
    n.kernel.binary = op;
    return append(g, name, &n, err);
}

int pl_graph_save(pl_graph *g, int id, ein_error *err)
{
    int rc;
    if (!g)
        return ein_fail(err, EIN_EINVAL, "save: NULL graph");
    if ((rc = check_id(g, "save", id, err)) < 0)
        return rc;
    if (g->nodes[id].saved)
        return ein_fail(err, EIN_EINVAL, "save: '%s' is already saved", g->nodes[id].name);
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
        for (int k = 0; k < n->ninputs && k < 2; k++)
            if (n->inputs[k] == id) {
                count++;
                break;
            }
    }
    return count;
}
