/* planner/pl_spec.c — generic join-agg spec production.
 *
 * The operator (planner/ops/) names its shardable indices and maps one
 * interval per index onto its input and output boxes; this file turns a
 * request (interval counts) into split points, enumerates the prod(counts)
 * combinations row-major (the last index fastest) and asks the operator for
 * each function specification (through the operator table's calls,
 * planner/ops/pl_ops.c: this file includes nothing of planner/ops/). */
#include "planner/pl_spec.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/ein_vec.h"

void pl_interval(int64_t size, int count, int part, int64_t *lo, int64_t *hi)
{
    assert(size >= 0 && count >= 1 && part >= 0 && part < count);
    int64_t base = size / count, extra = size % count;
    *lo = part * base + (part < extra ? part : extra);
    *hi = *lo + base + (part < extra ? 1 : 0);
}

int pl_index_max_count(const pl_index *ix)
{
    int64_t m;
    if (ix->pos || !ix->any)
        m = (int64_t)ix->npos + 1;
    else if (ix->step > 1)
        m = ix->size / ix->step;
    else
        m = ix->size;
    if (ix->maxcount > 0 && m > ix->maxcount)
        m = ix->maxcount;
    return m > (1 << 20) ? (1 << 20) : (int)m;
}

int pl_index_splits(const pl_index *ix, int count, int64_t *splits)
{
    if (count < 1 || count > pl_index_max_count(ix))
        return -1;
    splits[0] = 0;
    splits[count] = ix->size;
    if (ix->pos || !ix->any) {
        /* Closest allowed position to each equal split point, increasing,
         * leaving enough positions for the split points still to place. */
        int prev = -1, m = count - 1;
        for (int k = 1; k <= m; k++) {
            double target = (double)ix->size * k / count;
            int best = -1;
            double bestd = 0;
            for (int j = prev + 1; j <= ix->npos - (m - k) - 1; j++) {
                double d = (double)ix->pos[j] - target;
                d = d < 0 ? -d : d;
                if (best < 0 || d < bestd) {
                    best = j;
                    bestd = d;
                }
            }
            if (best < 0)
                return -1;
            splits[k] = ix->pos[best];
            prev = best;
        }
        return 0;
    }
    int64_t step = ix->step > 1 ? ix->step : 1;
    for (int k = 0; k < count; k++) {
        int64_t lo, hi;
        pl_interval(ix->size / step, count, k, &lo, &hi);
        splits[k] = lo * step;
    }
    return 0;
}

int pl_spec_make(const pl_graph *g, int node, const int *counts, pl_spec *out,
                 ein_error *err)
{
    memset(out, 0, sizeof *out);
    return pl_spec_remake(g, node, counts, out, err);
}

int pl_spec_remake(const pl_graph *g, int node, const int *counts, pl_spec *out,
                   ein_error *err)
{
    pl_index idx[PL_MAX_INDICES];
    int nidx = pl_op_indices(g, node, idx, err);
    if (nidx < 0)
        return nidx;
    const pl_node *nd = pl_graph_node(g, node);

    int64_t p = 1;
    int64_t *splits[PL_MAX_INDICES];
    int64_t *store = NULL;
    for (int i = 0; i < nidx; i++) {
        if (counts[i] < 1 || counts[i] > pl_index_max_count(&idx[i]))
            return ein_fail(err, EIN_EINVAL, "%s: index %s of size %lld cannot be split %d ways",
                            nd->name, idx[i].label, (long long)idx[i].size, counts[i]);
        p *= counts[i];
        if (p > (1 << 20))
            return ein_fail(err, EIN_EINVAL, "%s: request of more than 2^20 parts", nd->name);
    }
    int64_t total = 0;
    for (int i = 0; i < nidx; i++)
        total += counts[i] + 1;
    store = malloc(sizeof(int64_t) * (size_t)(total ? total : 1));
    if (!store)
        return ein_fail(err, EIN_ENOMEM, "out of memory for split points");
    for (int i = 0, off = 0; i < nidx; off += counts[i] + 1, i++) {
        splits[i] = store + off;
        if (pl_index_splits(&idx[i], counts[i], splits[i]) < 0) {
            free(store);
            return ein_fail(err, EIN_EINVAL, "%s: index %s cannot be split %d ways",
                            nd->name, idx[i].label, counts[i]);
        }
    }
    /* Reuse the arrays when they are large enough for p parts of this op. */
    if (out->cap < p || out->ninputs < nd->ninputs || !out->f || !out->in_boxes) {
        pl_spec_clear(out);
        out->f = malloc(sizeof *out->f * (size_t)p);
        out->in_boxes = malloc(sizeof(ein_box) * (size_t)p *
                               (size_t)(nd->ninputs ? nd->ninputs : 1));
        if (!out->f || !out->in_boxes) {
            free(store);
            pl_spec_clear(out);
            return ein_fail(err, EIN_ENOMEM, "out of memory for %lld function specifications",
                            (long long)p);
        }
        out->cap = (int)p;
    }
    memset(out->counts, 0, sizeof out->counts);
    out->replicated = 0;
    out->nidx = nidx;
    memcpy(out->counts, counts, sizeof(int) * (size_t)nidx);
    out->nparts = (int)p;
    out->ninputs = nd->ninputs;
    out->agg = pl_op_agg_idx(g, node, idx, nidx, counts);
    int part[PL_MAX_INDICES] = {0};
    for (int64_t f = 0; f < p; f++) {
        int64_t lo[PL_MAX_INDICES], hi[PL_MAX_INDICES];
        for (int i = 0; i < nidx; i++) {
            lo[i] = splits[i][part[i]];
            hi[i] = splits[i][part[i] + 1];
        }
        out->f[f].in = out->in_boxes + f * nd->ninputs;
        pl_op_fspec(g, node, idx, nidx, lo, hi, out->f[f].in, &out->f[f].out);
        for (int i = nidx - 1; i >= 0; i--) {
            if (++part[i] < counts[i])
                break;
            part[i] = 0;
        }
    }
    free(store);
    return 0;
}

int pl_spec_replicable(const pl_graph *g, int node, int p)
{
    if (p < 2 || node < 0 || node >= g->nnodes)
        return 0;
    const pl_node *nd = pl_graph_node(g, node);
    if (nd->kind == PL_INPUT || nd->kind == PL_CACHE_WRITE)
        return 0;
    pl_index idx[PL_MAX_INDICES];
    if (pl_op_indices(g, node, idx, NULL) < 1)
        return 0;
    int64_t out = 1;
    for (int a = 0; a < nd->rank; a++)
        out *= nd->shape[a];
    if (out < 1 || out > PL_REP_MAX_ELEMS)
        return 0;
    double in = 0;
    for (int k = 0; k < nd->ninputs; k++) {
        const pl_node *u = pl_graph_node(g, nd->inputs[k]);
        double vol = 1;
        for (int a = 0; a < u->rank; a++)
            vol *= (double)u->shape[a];
        in += vol;
    }
    /* Cheap: a few operations and input elements per output element (no
     * contraction of any size, no lookup into a large table). */
    return in <= (double)PL_REP_MAX_FANIN * (double)out &&
           pl_op_flops(g, node) <= 2.0 * PL_REP_MAX_FANIN * (double)out;
}

int pl_spec_make_replicated(const pl_graph *g, int node, int p, pl_spec *out, ein_error *err)
{
    memset(out, 0, sizeof *out);
    if (!pl_spec_replicable(g, node, p))
        return ein_fail(err, EIN_EINVAL, "%s: no replicated spec on %d devices (an operator too "
                        "large or not elementwise-cheap, or p < 2)",
                        node >= 0 && node < g->nnodes ? pl_graph_node(g, node)->name : "?", p);
    int counts[PL_MAX_INDICES];
    for (int i = 0; i < PL_MAX_INDICES; i++)
        counts[i] = 1;
    pl_spec one = {0};
    int rc = pl_spec_make(g, node, counts, &one, err);
    if (rc < 0)
        return rc;
    assert(one.nparts == 1 && one.agg == EIN_AGG_NONE);
    int nin = one.ninputs ? one.ninputs : 1;
    out->f = malloc(sizeof *out->f * (size_t)p);
    out->in_boxes = malloc(sizeof(ein_box) * (size_t)p * (size_t)nin);
    if (!out->f || !out->in_boxes) {
        pl_spec_clear(&one);
        pl_spec_clear(out);
        return ein_fail(err, EIN_ENOMEM, "out of memory for a replicated spec");
    }
    out->nidx = one.nidx;
    memcpy(out->counts, one.counts, sizeof out->counts);
    out->nparts = out->cap = p;
    out->ninputs = one.ninputs;
    out->agg = EIN_AGG_NONE;
    out->replicated = 1;
    for (int f = 0; f < p; f++) {
        out->f[f].in = out->in_boxes + (size_t)f * (size_t)one.ninputs;
        memcpy(out->f[f].in, one.f[0].in, sizeof(ein_box) * (size_t)one.ninputs);
        out->f[f].out = one.f[0].out;
    }
    pl_spec_clear(&one);
    return 0;
}

void pl_spec_clear(pl_spec *s)
{
    if (s) {
        free(s->f);
        free(s->in_boxes);
        s->f = NULL;
        s->in_boxes = NULL;
        s->nparts = 0;
        s->cap = 0;
        s->replicated = 0;
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
    size_t nin = (size_t)src->nparts * (size_t)(src->ninputs ? src->ninputs : 1);
    *dst = *src;
    dst->f = malloc(sizeof *dst->f * (size_t)(src->nparts ? src->nparts : 1));
    dst->in_boxes = malloc(sizeof(ein_box) * (nin ? nin : 1));
    if (!dst->f || !dst->in_boxes) {
        free(dst->f);
        free(dst->in_boxes);
        dst->f = NULL;
        dst->in_boxes = NULL;
        return EIN_ENOMEM;
    }
    memcpy(dst->in_boxes, src->in_boxes, sizeof(ein_box) * nin);
    dst->cap = src->nparts;
    for (int i = 0; i < src->nparts; i++) {
        dst->f[i].out = src->f[i].out;
        dst->f[i].in = dst->in_boxes + (size_t)i * (size_t)src->ninputs;
    }
    return 0;
}

typedef struct spec_list {
    pl_spec *v;         /* built specs, or NULL when only requests are kept */
    int *req;           /* requests (counts rows) when v is not wanted */
    int n, cap, nidx, want_specs;
} spec_list;

/* Recursively assign counts to indices i.. so that their product is `rest`. */
static int enumerate_rec(const pl_graph *g, int node, const pl_index *idx, int nidx,
                         int i, int rest, int *counts, spec_list *list, ein_error *err)
{
    if (i == nidx - 1) {
        if (rest > pl_index_max_count(&idx[i]))
            return 0;
        counts[i] = rest;
        if (!list->want_specs) {
            if (ein_vec_reserve(&list->req, &list->cap, (int64_t)list->n + 1,
                                sizeof(int) * (size_t)nidx) < 0)
                return ein_fail(err, EIN_ENOMEM, "out of memory enumerating specs");
            memcpy(list->req + (size_t)list->n * (size_t)nidx, counts, sizeof(int) * (size_t)nidx);
            list->n++;
            return 0;
        }
        if (ein_vec_reserve(&list->v, &list->cap, (int64_t)list->n + 1, sizeof *list->v) < 0)
            return ein_fail(err, EIN_ENOMEM, "out of memory enumerating specs");
        int rc = pl_spec_make(g, node, counts, &list->v[list->n], err);
        if (rc < 0)
            return rc;
        list->n++;
        return 0;
    }
    /* Larger counts of the earlier indices first: among plans of equal
     * cost the optimizer keeps the first, which then splits the leading
     * (token) dims and moves data at the operators that need another
     * layout (attention's boundaries), as Ulysses does. */
    int max = pl_index_max_count(&idx[i]);
    for (int c = rest < max ? rest : max; c >= 1; c--) {
        if (rest % c)
            continue;
        counts[i] = c;
        int rc = enumerate_rec(g, node, idx, nidx, i + 1, rest / c, counts, list, err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* Fill `list` with the requests (or specs) of exactly k parts. */
static int enumerate_k(const pl_graph *g, int node, const pl_index *idx, int nidx, int k,
                       spec_list *list, ein_error *err)
{
    int counts[PL_MAX_INDICES] = {0};
    if (nidx > 0)
        return enumerate_rec(g, node, idx, nidx, 0, k, counts, list, err);
    /* An operator without shardable indices runs whole: only k == 1. */
    if (k != 1)
        return 0;
    if (!list->want_specs) {
        if (!(list->req = malloc(sizeof(int))))
            return ein_fail(err, EIN_ENOMEM, "out of memory");
        list->n = 1;
        return 0;
    }
    if (!(list->v = calloc(1, sizeof *list->v)))
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    int rc = pl_spec_make(g, node, counts, &list->v[0], err);
    list->n = rc < 0 ? 0 : 1;
    return rc;
}

/* A cache_write of a state that other cache_writes write too: all of them
 * must write the same blocks on the same devices (the state's buffers are
 * theirs), so each gets only the first spec (the same for all: they have
 * the state's indices). */
static int shared_state_writer(const pl_graph *g, int node)
{
    const pl_node *nd = pl_graph_node(g, node);
    if (nd->kind != PL_CACHE_WRITE)
        return 0;
    for (int v = 0; v < g->nnodes; v++) {
        const pl_node *o = pl_graph_node(g, v);
        if (v != node && o->kind == PL_CACHE_WRITE && o->inputs[0] == nd->inputs[0])
            return 1;
    }
    return 0;
}

/* The paper's exactly-p specs when there are any; otherwise those of the
 * largest k < p the operator allows (k = 1, one device, always exists). */
static int enumerate_fit(const pl_graph *g, int node, int p, spec_list *list, int *nidx_out,
                         ein_error *err)
{
    pl_index idx[PL_MAX_INDICES];
    int nidx = pl_op_indices(g, node, idx, err);
    if (nidx < 0)
        return nidx;
    if (p < 1)
        return ein_fail(err, EIN_EINVAL, "device count must be at least 1, not %d", p);
    *nidx_out = nidx;
    /* No count above the product of the indices' maxima can be met. */
    int64_t most = 1;
    for (int i = 0; i < nidx && most < p; i++)
        most *= pl_index_max_count(&idx[i]);
    for (int k = most < p ? (int)most : p; k >= 1; k--) {
        int rc = enumerate_k(g, node, idx, nidx, k, list, err);
        if (rc < 0 || list->n > 0) {
            if (rc == 0 && list->n > 1 && shared_state_writer(g, node)) {
                for (int i = 1; list->want_specs && i < list->n; i++)
                    pl_spec_clear(&list->v[i]);
                list->n = 1;
            }
            return rc;
        }
    }
    return 0;
}

int pl_spec_enumerate(const pl_graph *g, int node, int p, pl_spec **specs, int *n,
                      ein_error *err)
{
    spec_list list = {.want_specs = 1};
    int nidx = 0;
    int rc = enumerate_fit(g, node, p, &list, &nidx, err);
    if (rc < 0) {
        pl_spec_array_free(list.v, list.n);
        return rc;
    }
    *specs = list.v;
    *n = list.n;
    return 0;
}

int pl_spec_requests(const pl_graph *g, int node, int p, int **counts, int *n, int *nidx,
                     ein_error *err)
{
    spec_list list = {.want_specs = 0};
    int ni = 0;
    int rc = enumerate_fit(g, node, p, &list, &ni, err);
    if (rc < 0) {
        free(list.req);
        return rc;
    }
    *counts = list.req ? list.req : malloc(sizeof(int));
    *n = list.n;
    *nidx = ni;
    return 0;
}

/* "a:4 b:2" (index letters) or "tokens:4 d_model:2" (labels) into buf. */
static char *spec_format(const pl_spec *s, const pl_index *idx, int labels, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    if (s->replicated) {
        snprintf(buf, len, "rep:%d", s->nparts);
        return buf;
    }
    for (int i = 0; i < s->nidx && n < len; i++) {
        char letter[2] = {idx[i].name, '\0'};
        n += (size_t)snprintf(buf + n, len - n, "%s%s:%d", i ? " " : "",
                              labels ? idx[i].label : letter, s->counts[i]);
    }
    return buf;
}

char *pl_spec_format(const pl_spec *s, const pl_index *idx, char *buf, size_t len)
{
    return spec_format(s, idx, 0, buf, len);
}

char *pl_spec_format_labels(const pl_spec *s, const pl_index *idx, char *buf, size_t len)
{
    return spec_format(s, idx, 1, buf, len);
}

static int box_cmp(const void *a, const void *b)
{
    return ein_box_compare(a, b);
}

/* Sorted distinct non-empty boxes of a list. */
static int tiling_from(const ein_box *boxes, size_t stride, int n, pl_tiling *out)
{
    out->boxes = malloc(sizeof(ein_box) * (size_t)(n ? n : 1));
    if (!out->boxes)
        return EIN_ENOMEM;
    int m0 = 0;
    for (int i = 0; i < n; i++) {
        const ein_box *b = (const ein_box *)((const char *)boxes + stride * (size_t)i);
        if (!ein_box_empty(b))
            out->boxes[m0++] = *b;
    }
    /* Function specifications are enumerated row-major, so the boxes
     * often come sorted already: then there is nothing to sort. */
    int sorted = 1;
    for (int i = 1; i < m0 && sorted; i++)
        sorted = ein_box_compare(&out->boxes[i - 1], &out->boxes[i]) <= 0;
    if (!sorted)
        qsort(out->boxes, (size_t)m0, sizeof(ein_box), box_cmp);
    int m = 0;
    for (int i = 0; i < m0; i++)
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
    return tiling_from(&s->in_boxes[k], sizeof(ein_box) * (size_t)s->ninputs, s->nparts, out);
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
