/* planner/pl_spec.c — join-agg specs for the version-1 operators.
 *
 * einsum: every letter is a shardable index (any). A function specification
 * takes, for each operand, the intervals of its letters; the output type is
 * the intervals of the output letters. Contracted letters split into k
 * intervals give k function specifications with the same output type, which
 * are summed (the aggregation of Ex. 3.8).
 * unary/binary elementwise: every axis is shardable; inputs and output share
 * the box. */
#include "planner/pl_spec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pl_interval(int64_t size, int count, int part, int64_t *lo, int64_t *hi)
{
    int64_t base = size / count, extra = size % count;
    *lo = part * base + (part < extra ? part : extra);
    *hi = *lo + base + (part < extra ? 1 : 0);
}

/* Letters of an einsum's operands and output; returns 0 or -1 if malformed. */
static int parse_subscripts(const char *s, char ops[PL_MAX_INPUTS][EIN_MAX_RANK + 1],
                            int *nops, char outl[EIN_MAX_RANK + 1])
{
    const char *arrow = strstr(s, "->");
    if (!arrow)
        return -1;
    int n = 0, len = 0;
    for (const char *c = s; c < arrow; c++) {
        if (*c == ',') {
            ops[n][len] = '\0';
            if (++n >= PL_MAX_INPUTS)
                return -1;
            len = 0;
        } else if (*c >= 'a' && *c <= 'z' && len < EIN_MAX_RANK) {
            ops[n][len++] = *c;
        } else {
            return -1;
        }
    }
    ops[n][len] = '\0';
    *nops = n + 1;
    len = 0;
    for (const char *c = arrow + 2; *c; c++) {
        if (*c < 'a' || *c > 'z' || len >= EIN_MAX_RANK)
            return -1;
        outl[len++] = *c;
    }
    outl[len] = '\0';
    return 0;
}

int pl_op_indices(const pl_graph *g, int node, pl_index *idx, ein_error *err)
{
    const pl_node *nd = pl_graph_node(g, node);
    if (!nd || nd->kind == PL_INPUT)
        return ein_fail(err, EIN_EINVAL, "node %d is not an operator", node);
    if (nd->kind != PL_EINSUM) {
        for (int i = 0; i < nd->rank; i++)
            idx[i] = (pl_index){.name = (char)('a' + i), .size = nd->shape[i], .any = 1};
        return nd->rank;
    }
    char ops[PL_MAX_INPUTS][EIN_MAX_RANK + 1], outl[EIN_MAX_RANK + 1];
    int nops, n = 0;
    if (parse_subscripts(nd->kernel.subscripts, ops, &nops, outl) < 0 || nops != nd->ninputs)
        return ein_fail(err, EIN_EINVAL, "%s: malformed einsum '%s'", nd->name,
                        nd->kernel.subscripts);
    for (int k = 0; k < nops; k++) {
        const pl_node *in = pl_graph_node(g, nd->inputs[k]);
        for (int a = 0; ops[k][a]; a++) {
            int seen = 0;
            for (int i = 0; i < n; i++)
                seen |= idx[i].name == ops[k][a];
            if (!seen)
                idx[n++] = (pl_index){.name = ops[k][a], .size = in->shape[a], .any = 1};
        }
    }
    return n;
}

/* Box of the letters `letters` given the interval of each index. */
static ein_box box_of(const char *letters, const pl_index *idx, int nidx,
                      const int64_t *lo, const int64_t *hi)
{
    ein_box b;
    memset(&b, 0, sizeof b);
    b.rank = (int)strlen(letters);
    for (int a = 0; a < b.rank; a++)
        for (int i = 0; i < nidx; i++)
            if (idx[i].name == letters[a]) {
                b.lo[a] = lo[i];
                b.hi[a] = hi[i];
            }
    return b;
}

int pl_spec_make(const pl_graph *g, int node, const int *counts, pl_spec *out,
                 ein_error *err)
{
    pl_index idx[PL_MAX_INDICES];
    int nidx = pl_op_indices(g, node, idx, err);
    if (nidx < 0)
        return nidx;
    const pl_node *nd = pl_graph_node(g, node);
    char ops[PL_MAX_INPUTS][EIN_MAX_RANK + 1], outl[EIN_MAX_RANK + 1];
    int nops = nd->ninputs;
    if (nd->kind == PL_EINSUM) {
        parse_subscripts(nd->kernel.subscripts, ops, &nops, outl);
    } else {
        for (int a = 0; a < nd->rank; a++)
            outl[a] = (char)('a' + a);
        outl[nd->rank] = '\0';
        for (int k = 0; k < nops; k++)
            memcpy(ops[k], outl, sizeof outl);
    }

    int64_t p = 1;
    for (int i = 0; i < nidx; i++) {
        if (counts[i] < 1 || counts[i] > idx[i].size)
            return ein_fail(err, EIN_EINVAL, "%s: index %c of size %lld cannot be split %d ways",
                            nd->name, idx[i].name, (long long)idx[i].size, counts[i]);
        p *= counts[i];
        if (p > (1 << 20))
            return ein_fail(err, EIN_EINVAL, "%s: request of more than 2^20 parts", nd->name);
    }
    memset(out, 0, sizeof *out);
    out->nidx = nidx;
    memcpy(out->counts, counts, sizeof(int) * (size_t)nidx);
    out->nparts = (int)p;
    out->ninputs = nops;
    out->agg = EIN_AGG_NONE;
    for (int i = 0; i < nidx; i++)
        if (counts[i] > 1 && !strchr(outl, idx[i].name))
            out->agg = EIN_AGG_SUM;
    out->f = calloc((size_t)p, sizeof *out->f);
    if (!out->f)
        return ein_fail(err, EIN_ENOMEM, "out of memory for %lld function specifications", (long long)p);

    int part[PL_MAX_INDICES] = {0};
    for (int64_t f = 0; f < p; f++) {
        int64_t lo[PL_MAX_INDICES], hi[PL_MAX_INDICES];
        for (int i = 0; i < nidx; i++)
            pl_interval(idx[i].size, counts[i], part[i], &lo[i], &hi[i]);
        for (int k = 0; k < nops; k++)
            out->f[f].in[k] = box_of(ops[k], idx, nidx, lo, hi);
        out->f[f].out = box_of(outl, idx, nidx, lo, hi);
        for (int i = nidx - 1; i >= 0; i--) {
            if (++part[i] < counts[i])
                break;
            part[i] = 0;
        }
    }
    return 0;
}

void pl_spec_clear(pl_spec *s)
{
    if (s) {
        free(s->f);
        s->f = NULL;
        s->nparts = 0;
    }
}

void pl_spec_array_free(pl_spec *specs, int n)
{
    for (int i = 0; i < n; i++)
        pl_spec_clear(&specs[i]);
    free(specs);
}

int pl_spec_copy(const pl_spec *src, pl_spec *dst)
{
    *dst = *src;
    dst->f = malloc(sizeof *dst->f * (size_t)src->nparts);
    if (!dst->f)
        return EIN_ENOMEM;
    memcpy(dst->f, src->f, sizeof *dst->f * (size_t)src->nparts);
    return 0;
}

typedef struct spec_list {
    pl_spec *v;
    int n, cap;
} spec_list;

/* Recursively assign counts to indices i.. so that their product is `rest`. */
static int enumerate_rec(const pl_graph *g, int node, const pl_index *idx, int nidx,
                         int i, int rest, int *counts, spec_list *list, ein_error *err)
{
    if (i == nidx - 1) {
        if (rest > idx[i].size)
            return 0;
        counts[i] = rest;
        if (list->n == list->cap) {
            int cap = list->cap ? 2 * list->cap : 16;
            pl_spec *v = realloc(list->v, sizeof *v * (size_t)cap);
            if (!v)
                return ein_fail(err, EIN_ENOMEM, "out of memory enumerating specs");
            list->v = v;
            list->cap = cap;
        }
        int rc = pl_spec_make(g, node, counts, &list->v[list->n], err);
        if (rc < 0)
            return rc;
        list->n++;
        return 0;
    }
    for (int c = 1; c <= rest; c++) {
        if (rest % c || c > idx[i].size)
            continue;
        counts[i] = c;
        int rc = enumerate_rec(g, node, idx, nidx, i + 1, rest / c, counts, list, err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int pl_spec_enumerate(const pl_graph *g, int node, int p, pl_spec **specs, int *n,
                      ein_error *err)
{
    pl_index idx[PL_MAX_INDICES];
    int nidx = pl_op_indices(g, node, idx, err);
    if (nidx < 0)
        return nidx;
    if (p < 1)
        return ein_fail(err, EIN_EINVAL, "device count must be at least 1, not %d", p);
    spec_list list = {0};
    int counts[PL_MAX_INDICES];
    int rc = 0;
    if (nidx == 0) {
        /* A scalar operator cannot be split; p == 1 gives the single spec. */
        if (p == 1) {
            list.v = calloc(1, sizeof *list.v);
            if (!list.v)
                return ein_fail(err, EIN_ENOMEM, "out of memory");
            rc = pl_spec_make(g, node, counts, &list.v[0], err);
            list.n = rc < 0 ? 0 : 1;
        }
    } else {
        rc = enumerate_rec(g, node, idx, nidx, 0, p, counts, &list, err);
    }
    if (rc < 0) {
        pl_spec_array_free(list.v, list.n);
        return rc;
    }
    *specs = list.v;
    *n = list.n;
    return 0;
}

char *pl_spec_format(const pl_spec *s, const pl_index *idx, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < s->nidx && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%c:%d", i ? " " : "", idx[i].name, s->counts[i]);
    return buf;
}

static int box_cmp(const void *a, const void *b)
{
    return ein_box_compare(a, b);
}

/* Sorted distinct boxes of a list. */
static int tiling_from(const ein_box *boxes, size_t stride, int n, pl_tiling *out)
{
    out->boxes = malloc(sizeof(ein_box) * (size_t)(n ? n : 1));
    if (!out->boxes)
        return EIN_ENOMEM;
    for (int i = 0; i < n; i++)
        out->boxes[i] = *(const ein_box *)((const char *)boxes + stride * (size_t)i);
    qsort(out->boxes, (size_t)n, sizeof(ein_box), box_cmp);
    int m = 0;
    for (int i = 0; i < n; i++)
        if (m == 0 || !ein_box_equal(&out->boxes[m - 1], &out->boxes[i]))
            out->boxes[m++] = out->boxes[i];
    out->n = m;
    return 0;
}

int pl_tiling_of_outputs(const pl_spec *s, pl_tiling *out)
{
    return tiling_from(&s->f[0].out, sizeof(pl_fspec), s->nparts, out);
}

int pl_tiling_of_input(const pl_spec *s, int k, pl_tiling *out)
{
    return tiling_from(&s->f[0].in[k], sizeof(pl_fspec), s->nparts, out);
}

int pl_tiling_equal(const pl_tiling *a, const pl_tiling *b)
{
    if (a->n != b->n)
        return 0;
    for (int i = 0; i < a->n; i++)
        if (!ein_box_equal(&a->boxes[i], &b->boxes[i]))
            return 0;
    return 1;
}

void pl_tiling_clear(pl_tiling *t)
{
    if (t) {
        free(t->boxes);
        t->boxes = NULL;
        t->n = 0;
    }
}
