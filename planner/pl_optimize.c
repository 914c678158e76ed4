/* planner/pl_optimize.c — Algorithm 1 with the paper's cut rule for shared
 * tensors, greedy and random selectors. See pl_optimize.h. */
#include "planner/pl_optimize.h"

#include <assert.h>
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/ein_hash.h"
#include "common/io/ein_rand.h"
#include "planner/pl_graph_int.h"

int pl_selector_parse(const char *s, pl_selector *out)
{
    if (!strcmp(s, "dp")) *out = PL_SELECT_DP;
    else if (!strcmp(s, "greedy")) *out = PL_SELECT_GREEDY;
    else if (!strcmp(s, "random")) *out = PL_SELECT_RANDOM;
    else return -1;
    return 0;
}

const char *pl_selector_name(pl_selector s)
{
    return s == PL_SELECT_DP ? "dp" : s == PL_SELECT_GREEDY ? "greedy" : "random";
}

int pl_partials_parse(const char *s, pl_partials *out)
{
    if (!strcmp(s, "f32")) *out = PL_PARTIALS_F32;
    else if (!strcmp(s, "native")) *out = PL_PARTIALS_NATIVE;
    else return -1;
    return 0;
}

const char *pl_partials_name(pl_partials m)
{
    return m == PL_PARTIALS_NATIVE ? "native" : "f32";
}

ein_dtype pl_partial_dtype(ein_dtype dt, ein_agg agg, pl_partials m)
{
    if (agg == EIN_AGG_NONE || (m == PL_PARTIALS_NATIVE && agg != EIN_AGG_LSE))
        return dt;
    return ein_dtype_accum(dt);
}

/* Elements of node v (the DP asks for it in its inner loops: no box). */
static double node_volume(const pl_graph *g, int v)
{
    const pl_node *n = pl_graph_node(g, v);
    int64_t vol = 1;
    for (int a = 0; a < n->rank; a++)
        vol *= n->shape[a] > 0 ? n->shape[a] : 0;
    return (double)vol;
}

#define PL_SEEN_SLOTS 1024

static uint64_t box_hash(const ein_box *b)
{
    uint64_t h = 0xcbf29ce484222325ULL ^ (uint64_t)b->rank;
    for (int i = 0; i < b->rank; i++) {
        h = (h ^ (uint64_t)b->lo[i]) * 0x100000001b3ULL;
        h = (h ^ (uint64_t)b->hi[i]) * 0x100000001b3ULL;
    }
    return h ^ (h >> 29);
}

/* Whether function specification f's output equals an earlier one's. With
 * nseen > 0, `seen` is an open-addressing set (nseen slots, a power of
 * two) of the outputs of 0..f-1, to which f's is added; called for f = 0,
 * 1, ... in order. Else the earlier outputs are compared one by one. */
static int repeats_earlier(const pl_spec *s, int f, int *seen, int nseen)
{
    const ein_box *b = &s->f[f].out;
    if (nseen == 0) {
        for (int e = 0; e < f; e++)
            if (ein_box_equal(&s->f[e].out, b))
                return 1;
        return 0;
    }
    size_t mask = (size_t)nseen - 1, i = (size_t)box_hash(b) & mask;
    for (; seen[i]; i = (i + 1) & mask)
        if (ein_box_equal(&s->f[seen[i] - 1].out, b))
            return 1;
    seen[i] = f + 1;
    return 0;
}

void pl_cost(const pl_graph *g, int node, const pl_spec *s,
             const pl_tiling *const *in_tilings, double *repart, double *join,
             double *agg)
{
    pl_cost_partials(g, node, s, in_tilings, PL_PARTIALS_F32, repart, join, agg);
}

void pl_cost_partials(const pl_graph *g, int node, const pl_spec *s,
                      const pl_tiling *const *in_tilings, pl_partials m, double *repart,
                      double *join, double *agg)
{
    const pl_node *nd = pl_graph_node(g, node);
    *repart = *join = *agg = 0;
    for (int k = 0; k < s->ninputs; k++) {
        if (!in_tilings || !in_tilings[k])
            continue;
        pl_tiling want;
        if (pl_tiling_of_input(s, k, &want) < 0)
            continue;
        if (!pl_tiling_equal(&want, in_tilings[k]))
            *repart += node_volume(g, nd->inputs[k]);
        pl_tiling_clear(&want);
    }
    for (int f = 0; f < s->nparts; f++)
        for (int k = 0; k < s->ninputs; k++)
            *join += (double)ein_box_volume(&s->f[f].in[k]);
    /* Each distinct output type appearing m times costs (m-1) x its size.
     * With f32 partials (the default) partials are kept in the
     * accumulation dtype until aggregated, so for an f16/bf16 tensor each
     * partial element weighs as much as ein_dtype_accum's element over the
     * tensor's own (twice); native partials weigh one. */
    double partial = ein_dtype_elem_bytes(pl_partial_dtype(nd->dtype, s->agg, m)) /
                     ein_dtype_elem_bytes(nd->dtype);
    /* Which outputs repeat an earlier one: a hash set of the outputs seen
     * (function specification indices + 1, 0 empty) where it fits on the
     * stack, else the pairwise comparison. */
    int seen[PL_SEEN_SLOTS], nseen = 0;
    if (s->nparts > 8 && 2 * s->nparts <= PL_SEEN_SLOTS) {
        for (nseen = 16; nseen < 2 * s->nparts; nseen *= 2)
            ;
        memset(seen, 0, sizeof(int) * (size_t)nseen);
    }
    /* A replicated spec's copies are equal values, not partials. */
    for (int f = 0; f < s->nparts && !s->replicated; f++) {
        if (!repeats_earlier(s, f, seen, nseen))
            continue;
        /* A partial is stored over ein_agg_box: LSE partials carry one
         * log-sum-exp per row beside the row's d values. */
        ein_box pb = ein_agg_box(s->agg, &s->f[f].out);
        *agg += partial * (double)ein_box_volume(&pb);
    }
}

/* ---- compact per-node state ---------------------------------------------- */

static uint64_t tiling_hash(const pl_tiling *t)
{
    uint64_t h = ein_hash_mix(0x1234567u, (uint64_t)t->n);
    for (int i = 0; i < t->n; i++) {
        h = ein_hash_mix(h, (uint64_t)t->boxes[i].rank);
        for (int a = 0; a < t->boxes[i].rank; a++)
            h = ein_hash_mix(ein_hash_mix(h, (uint64_t)t->boxes[i].lo[a]),
                             (uint64_t)t->boxes[i].hi[a]);
    }
    return h;
}

/* A DP table entry: the cheapest way to produce a node's output in one tiling. */
typedef struct entry {
    uint64_t h;
    double cost;
    int spec;
    int *in_entry;      /* per input: chosen entry of an in-piece producer, else -1 */
} entry;

typedef struct nstate {
    int nspecs, nidx, nin;
    int *counts;        /* nspecs x nidx */
    double *local;      /* join + aggregation of each spec */
    uint64_t *out_h;    /* output tiling hash of each spec */
    uint64_t *in_h;     /* nspecs x nin: input tiling hashes */
    entry *e;
    int ne;
    int *in_store;
    int chosen;         /* spec index once fixed, else -1 */
    int parent;         /* the in-piece consumer, or -1 (a piece root) */
    int piece;          /* root of the node's piece */
} nstate;

static void nstate_clear(nstate *s)
{
    free(s->counts);
    free(s->local);
    free(s->out_h);
    free(s->in_h);
    free(s->e);
    free(s->in_store);
}

/* Enumerate node v's requests and keep only what the DP needs; the specs
 * are built one at a time into one reused buffer. */
/* Seconds for `bytes` between p devices over the network: inside one
 * host at p x net_bw; over H hosts (pl_plan_opts.host_gpus) (H-1)/H of
 * them through the NICs at p x nic_bw, the rest inside, whichever is
 * longer. */
static double net_time(double bytes, int p, const pl_plan_opts *o)
{
    int hosts = o->host_gpus > 0 ? (p + o->host_gpus - 1) / o->host_gpus : 1;
    if (hosts <= 1 || !(o->nic_bw > 0))
        return bytes / ((double)p * o->net_bw);
    double inter = bytes * (hosts - 1) / hosts / ((double)p * o->nic_bw);
    double intra = bytes / hosts / ((double)p * o->net_bw);
    return inter > intra ? inter : intra;
}

/* Seconds to move all of node v's tensor once (PL_OBJECTIVE_TIME). */
static double move_time(const pl_graph *g, int v, int p, const pl_plan_opts *o)
{
    const pl_node *n = pl_graph_node(g, v);
    double bytes = node_volume(g, v) * ein_dtype_elem_bytes(n->dtype);
    return net_time(bytes, p, o) + 2 * bytes / ((double)p * o->hbm_bw);
}

/* PL_OBJECTIVE_TIME's join + aggregation of node v under spec s, from its
 * join and aggregation in elements. */
static double spec_time(const pl_graph *g, int v, int p, const pl_spec *s, double join,
                        double agg, const pl_plan_opts *o)
{
    const pl_node *n = pl_graph_node(g, v);
    double esize = ein_dtype_elem_bytes(n->dtype), parts = s->nparts > 0 ? s->nparts : 1;
    if (s->replicated) {
        /* Every device does the whole operator: its busiest device's time
         * is one copy's (join counts every copy's reads). */
        join /= parts;
        parts = 1;
    }
    double tc = pl_op_flops(g, v) / parts / o->peak_flops;
    if (n->kind == PL_EINSUM && n->ninputs == 2 && o->gemm_operand_bw > 0)
        tc += join * esize / parts / o->gemm_operand_bw; /* packed operands (co_calib.h) */
    double tm = (join + node_volume(g, v)) * esize / parts / o->hbm_bw;
    return (tc > tm ? tc : tm) + net_time(agg * esize, p, o) +
           2 * agg * esize / ((double)p * o->hbm_bw);
}

static int nstate_fill(const pl_graph *g, int v, int p, nstate *s, pl_spec *buf,
                       const pl_plan_opts *o, ein_error *err)
{
    int n = 0, rc;
    const pl_node *nd = pl_graph_node(g, v);
    if ((rc = pl_spec_requests(g, v, p, &s->counts, &n, &s->nidx, err)) < 0)
        return rc;
    s->nspecs = n;
    s->nin = nd->ninputs;
    s->local = malloc(sizeof(double) * (size_t)(n + 1));
    s->out_h = malloc(sizeof(uint64_t) * (size_t)(n + 1));
    s->in_h = malloc(sizeof(uint64_t) * (size_t)(n * s->nin + 1));
    s->e = calloc((size_t)(n + 1), sizeof *s->e);
    s->in_store = malloc(sizeof(int) * (size_t)(n * s->nin + 1));
    if (!s->local || !s->out_h || !s->in_h || !s->e || !s->in_store)
        return ein_fail(err, EIN_ENOMEM, "out of memory in the optimizer");
    pl_tiling t = {0};
    for (int i = 0; i < n; i++) {
        double r, j, a;
        if ((rc = pl_spec_remake(g, v, s->counts + i * s->nidx, buf, err)) < 0)
            return rc;
        pl_cost_partials(g, v, buf, NULL, o ? o->partials : PL_PARTIALS_F32, &r, &j, &a);
        s->local[i] = o && o->objective == PL_OBJECTIVE_TIME ? spec_time(g, v, p, buf, j, a, o)
                                                             : j + a;
        if (pl_tiling_of_outputs(buf, &t) < 0)
            return ein_fail(err, EIN_ENOMEM, "out of memory in the optimizer");
        s->out_h[i] = tiling_hash(&t);
        pl_tiling_clear(&t);
        for (int k = 0; k < s->nin; k++) {
            if (pl_tiling_of_input(buf, k, &t) < 0)
                return ein_fail(err, EIN_ENOMEM, "out of memory in the optimizer");
            s->in_h[i * s->nin + k] = tiling_hash(&t);
            pl_tiling_clear(&t);
        }
    }
    return 0;
}

/* Mark the nodes some saved tensor depends on. */
static void mark_live(const pl_graph *g, char *live)
{
    memset(live, 0, (size_t)g->nnodes);
    for (int v = g->nnodes - 1; v >= 0; v--) {
        const pl_node *nd = pl_graph_node(g, v);
        if (nd->saved)
            live[v] = 1;
        if (live[v])
            for (int k = 0; k < nd->ninputs; k++)
                live[nd->inputs[k]] = 1;
    }
}

typedef struct ctx {
    const pl_graph *g;
    nstate *st;
    pl_selector sel;
    int *consumers;     /* CSR of live operator consumers (distinct) */
    int *cons_off;
    const pl_plan_opts *o; /* NULL: defaults */
    int p;
} ctx;

/* What repartitioning node v costs: its elements (the paper's proxy), or
 * seconds under PL_OBJECTIVE_TIME. */
static double move_cost(const ctx *C, int v)
{
    if (C->o && C->o->objective == PL_OBJECTIVE_TIME)
        return move_time(C->g, v, C->p, C->o);
    return node_volume(C->g, v);
}

/* Fill node v's DP entries; in-piece producers have theirs already. Cannot
 * fail: the entry storage was sized for nspecs entries when v's specs were
 * enumerated, and each spec adds at most one entry. */
static void dp_node(ctx *C, int v)
{
    const pl_graph *g = C->g;
    const pl_node *nd = pl_graph_node(g, v);
    nstate *me = &C->st[v];
    int charge = C->sel == PL_SELECT_DP;
    me->ne = 0;
    for (int s = 0; s < me->nspecs; s++) {
        entry cand = {.h = me->out_h[s], .cost = me->local[s], .spec = s,
                      .in_entry = me->in_store + (size_t)me->ne * (size_t)me->nin};
        const uint64_t *want = me->in_h + (size_t)s * (size_t)me->nin;
        for (int k = 0; k < me->nin; k++)
            cand.in_entry[k] = -1;
        for (int k = 0; k < me->nin; k++) {
            int u = nd->inputs[k], dup = 0;
            for (int kk = 0; kk < k; kk++)
                dup |= nd->inputs[kk] == u;
            if (dup || pl_graph_node(g, u)->kind == PL_INPUT)
                continue;
            double size = move_cost(C, u);
            nstate *us = &C->st[u];
            if (us->parent == v) {
                /* In-piece producer: its cheapest entry, repartitions included. */
                double best = DBL_MAX;
                int best_e = -1;
                for (int e = 0; e < us->ne; e++) {
                    double c = us->e[e].cost;
                    if (charge)
                        for (int kk = k; kk < me->nin; kk++)
                            if (nd->inputs[kk] == u && want[kk] != us->e[e].h)
                                c += size;
                    if (c < best) {
                        best = c;
                        best_e = e;
                    }
                }
                cand.cost += best;
                for (int kk = k; kk < me->nin; kk++)
                    if (nd->inputs[kk] == u)
                        cand.in_entry[kk] = best_e;
            } else if (us->chosen >= 0 && charge) {
                /* Fixed by an earlier piece: charge the repartition. */
                for (int kk = k; kk < me->nin; kk++)
                    if (nd->inputs[kk] == u && want[kk] != us->out_h[us->chosen])
                        cand.cost += size;
            }
        }
        int found = -1;
        for (int i = 0; i < me->ne && found < 0; i++)
            if (me->e[i].h == cand.h)
                found = i;
        if (found < 0) {
            assert(me->ne < me->nspecs);
            me->e[me->ne++] = cand;
        } else if (cand.cost < me->e[found].cost) {
            memcpy(me->e[found].in_entry, cand.in_entry, sizeof(int) * (size_t)me->nin);
            me->e[found].cost = cand.cost;
            me->e[found].spec = cand.spec;
        }
    }
}

/* Walk back down from entry e of node v, fixing each in-piece node's spec. */
static void assign(ctx *C, int v, int e)
{
    nstate *s = &C->st[v];
    const pl_node *nd = pl_graph_node(C->g, v);
    if (s->chosen >= 0)
        return;
    s->chosen = s->e[e].spec;
    for (int k = 0; k < s->nin; k++)
        if (s->e[e].in_entry[k] >= 0 && C->st[nd->inputs[k]].parent == v)
            assign(C, nd->inputs[k], s->e[e].in_entry[k]);
}

/* The root's entry: its own cost plus the repartitions of consumers that
 * earlier pieces fixed, plus a lookahead for the consumers still open. */
static int pick_root(ctx *C, int r)
{
    nstate *s = &C->st[r];
    double size = move_cost(C, r);
    int best = 0;
    double bestc = DBL_MAX;
    for (int e = 0; e < s->ne; e++) {
        double c = s->e[e].cost;
        if (C->sel == PL_SELECT_DP)
            for (int i = C->cons_off[r]; i < C->cons_off[r + 1]; i++) {
                int c2 = C->consumers[i];
                nstate *cs = &C->st[c2];
                const pl_node *cn = pl_graph_node(C->g, c2);
                if (cs->chosen >= 0) {
                    for (int k = 0; k < cn->ninputs; k++)
                        if (cn->inputs[k] == r && cs->in_h[cs->chosen * cs->nin + k] != s->e[e].h)
                            c += size;
                    continue;
                }
                /* A consumer not fixed yet: one step of lookahead, the best
                 * it could do alone given this tiling (ties between root
                 * tilings otherwise fall on tilings no consumer can use). */
                double la = DBL_MAX;
                for (int sc = 0; sc < cs->nspecs; sc++) {
                    double x = cs->local[sc];
                    for (int k = 0; k < cn->ninputs; k++)
                        if (cn->inputs[k] == r && cs->in_h[sc * cs->nin + k] != s->e[e].h)
                            x += size;
                    la = x < la ? x : la;
                }
                if (la < DBL_MAX)
                    c += la;
            }
        if (c < bestc) {
            bestc = c;
            best = e;
        }
    }
    return best;
}

static int no_spec_error(const pl_graph *g, int v, int p, ein_error *err)
{
    const pl_node *nd = pl_graph_node(g, v);
    pl_index idx[PL_MAX_INDICES];
    int n = pl_op_indices(g, v, idx, NULL);
    char shape[256], allow[512];
    size_t len = 0;
    allow[0] = '\0';
    for (int i = 0; i < n && len < sizeof allow; i++)
        len += (size_t)snprintf(allow + len, sizeof allow - len, "%s%s <= %d", i ? ", " : "",
                                idx[i].label, pl_index_max_count(&idx[i]));
    pl_shape_str(shape, sizeof shape, nd->rank, nd->shape);
    char where[64] = "";
    if (nd->line > 0)
        snprintf(where, sizeof where, " at line %d", nd->line);
    return ein_fail(err, EIN_ENOPLAN,
                    "operator '%s' (%s%s, shape %s) has no join-agg spec for %d devices: the "
                    "interval counts of its shardable indices (%s) must multiply to %d",
                    nd->name, pl_node_op_name(nd), where, shape, p, n ? allow : "none", p);
}

typedef struct piece {
    int root, size;
} piece;

static int piece_cmp(const void *a, const void *b)
{
    const piece *x = a, *y = b;
    if (x->size != y->size)
        return y->size - x->size;
    return y->root - x->root;
}

/* Cost of node v under spec s given every other node's chosen spec: its own
 * join + aggregation, the repartitions of its inputs, and the repartitions
 * its output tiling causes at its consumers. */
static double local_cost(ctx *C, int v, int s)
{
    nstate *me = &C->st[v];
    const pl_node *nd = pl_graph_node(C->g, v);
    double c = me->local[s];
    for (int k = 0; k < me->nin; k++) {
        nstate *us = &C->st[nd->inputs[k]];
        if (us->chosen >= 0 && us->out_h[us->chosen] != me->in_h[s * me->nin + k])
            c += move_cost(C, nd->inputs[k]);
    }
    double size = move_cost(C, v);
    for (int i = C->cons_off[v]; i < C->cons_off[v + 1]; i++) {
        nstate *cs = &C->st[C->consumers[i]];
        const pl_node *cn = pl_graph_node(C->g, C->consumers[i]);
        if (cs->chosen < 0)
            continue;
        for (int k = 0; k < cn->ninputs; k++)
            if (cn->inputs[k] == v && cs->in_h[cs->chosen * cs->nin + k] != me->out_h[s])
                c += size;
    }
    return c;
}

/* Node v's own sub-costs under spec s (its inputs' repartitions, join,
 * aggregation), as the hashes see them. */
static double own_cost(ctx *C, int v, int s)
{
    nstate *me = &C->st[v];
    const pl_node *nd = pl_graph_node(C->g, v);
    double c = me->local[s];
    if (C->sel != PL_SELECT_DP)
        return c;
    for (int k = 0; k < me->nin; k++) {
        nstate *us = &C->st[nd->inputs[k]];
        if (us->chosen >= 0 && us->out_h[us->chosen] != me->in_h[s * me->nin + k])
            c += move_cost(C, nd->inputs[k]);
    }
    return c;
}

/* The cut rule is optimal per piece, not across pieces: improve the whole
 * plan by changing one operator's spec at a time while that lowers the
 * total (a DAG's pieces then agree on the tilings of shared tensors). On a
 * tree the DP is already optimal and nothing changes. */
static void refine(ctx *C, int n, const char *live)
{
    for (int pass = 0; pass < 32; pass++) {
        int changed = 0;
        for (int v = 0; v < n; v++) {
            nstate *me = &C->st[v];
            if (!live[v] || pl_graph_node(C->g, v)->kind == PL_INPUT || me->chosen < 0)
                continue;
            double best = local_cost(C, v, me->chosen);
            int best_s = me->chosen;
            for (int s = 0; s < me->nspecs; s++) {
                double c = local_cost(C, v, s);
                if (c < best - 1e-9 * (best > 1 ? best : 1)) {
                    best = c;
                    best_s = s;
                }
            }
            if (best_s != me->chosen) {
                me->chosen = best_s;
                changed = 1;
            }
        }
        if (!changed)
            break;
    }
}

static int piece_cmp_topo(const void *a, const void *b)
{
    return ((const piece *)a)->root - ((const piece *)b)->root;
}

static int piece_cmp_rtopo(const void *a, const void *b)
{
    return ((const piece *)b)->root - ((const piece *)a)->root;
}

int pl_objective_parse(const char *s, pl_objective *out)
{
    if (strcmp(s, "comm") == 0)
        *out = PL_OBJECTIVE_COMM;
    else if (strcmp(s, "time") == 0)
        *out = PL_OBJECTIVE_TIME;
    else
        return -1;
    return 0;
}

int pl_plan_make(const pl_graph *g, int p, pl_selector sel, uint64_t seed,
                 pl_plan **out, ein_error *err)
{
    return pl_plan_make_opts(g, p, sel, seed, NULL, out, err);
}

/* An operator: a live node that is not an input. */
static int is_op(const pl_graph *g, const char *live, int v)
{
    return live[v] && pl_graph_node(g, v)->kind != PL_INPUT;
}

/* The distinct live operator consumers of every node, as CSR:
 * consumers of v are (*consumers)[cons_off[v] .. cons_off[v + 1]). */
static int consumers_build(const pl_graph *g, const char *live, int n, int *cons_off, int **consumers,
                           ein_error *err)
{
    for (int c = 0; c < n; c++) {
        if (!is_op(g, live, c))
            continue;
        const pl_node *cn = pl_graph_node(g, c);
        for (int k = 0; k < cn->ninputs; k++) {
            int dup = 0;
            for (int kk = 0; kk < k; kk++)
                dup |= cn->inputs[kk] == cn->inputs[k];
            if (!dup)
                cons_off[cn->inputs[k] + 1]++;
        }
    }
    for (int v = 0; v < n; v++)
        cons_off[v + 1] += cons_off[v];
    *consumers = malloc(sizeof(int) * (size_t)(cons_off[n] + 1));
    int *fill = calloc((size_t)n + 1, sizeof(int));
    if (!*consumers || !fill) {
        free(fill);
        return ein_fail(err, EIN_ENOMEM, "out of memory in the optimizer");
    }
    for (int c = 0; c < n; c++) {
        if (!is_op(g, live, c))
            continue;
        const pl_node *cn = pl_graph_node(g, c);
        for (int k = 0; k < cn->ninputs; k++) {
            int u = cn->inputs[k], dup = 0;
            for (int kk = 0; kk < k; kk++)
                dup |= cn->inputs[kk] == u;
            if (!dup)
                (*consumers)[cons_off[u] + fill[u]++] = c;
        }
    }
    free(fill);
    return 0;
}

/* Everything nstate_fill reads about node v: its kind, dtype, shape and
 * kernel (the list by value), and per input the input's shape and dtype
 * and which earlier input it repeats. Two nodes equal under node_same get
 * identical spec tables (the 32 blocks of a model: issue 21). */
static uint64_t node_sig(const pl_graph *g, int v)
{
    const pl_node *nd = pl_graph_node(g, v);
    const ein_kernel *k = &nd->kernel;
    uint64_t h = ein_hash_mix(ein_hash_mix(0x51u, (uint64_t)nd->kind), (uint64_t)nd->dtype);
    h = ein_hash_mix(h, (uint64_t)nd->rank);
    for (int a = 0; a < nd->rank; a++)
        h = ein_hash_mix(h, (uint64_t)nd->shape[a]);
    for (const char *c = k->subscripts; *c; c++)
        h = ein_hash_mix(h, (uint64_t)(unsigned char)*c);
    h = ein_hash_mix(ein_hash_mix(h, (uint64_t)k->axis), (uint64_t)k->axes);
    h = ein_hash_mix(ein_hash_mix(h, (uint64_t)k->start), (uint64_t)k->head_dim);
    h = ein_hash_mix(ein_hash_mix(h, (uint64_t)k->group), (uint64_t)k->nlist);
    h = ein_hash_mix(h, (uint64_t)k->window);
    for (int i = 0; i < k->nlist; i++)
        h = ein_hash_mix(h, (uint64_t)k->list[i]);
    h = ein_hash_mix(h, (uint64_t)nd->ninputs);
    for (int i = 0; i < nd->ninputs; i++) {
        const pl_node *u = pl_graph_node(g, nd->inputs[i]);
        h = ein_hash_mix(ein_hash_mix(h, (uint64_t)u->rank), (uint64_t)u->dtype);
        for (int a = 0; a < u->rank; a++)
            h = ein_hash_mix(h, (uint64_t)u->shape[a]);
    }
    return h;
}

static int kernel_same(const ein_kernel *a, const ein_kernel *b)
{
    if (a->kind != b->kind || strcmp(a->subscripts, b->subscripts) || a->unary != b->unary ||
        memcmp(&a->scalar, &b->scalar, sizeof a->scalar) || a->binary != b->binary ||
        a->axis != b->axis || a->axes != b->axes || a->reduce != b->reduce ||
        a->start != b->start || memcmp(&a->eps, &b->eps, sizeof a->eps) ||
        memcmp(&a->theta, &b->theta, sizeof a->theta) || a->head_dim != b->head_dim ||
        a->group != b->group || a->window != b->window || a->style != b->style ||
        a->nlist != b->nlist || memcmp(&a->scaling, &b->scaling, sizeof a->scaling))
        return 0;
    /* CONCAT's list holds nlist offsets and the total after them. */
    int nl = a->nlist + (a->kind == EIN_KERNEL_CONCAT && a->nlist > 0);
    return nl == 0 || memcmp(a->list, b->list, sizeof *a->list * (size_t)nl) == 0;
}

static int node_same(const pl_graph *g, int u, int v)
{
    const pl_node *a = pl_graph_node(g, u), *b = pl_graph_node(g, v);
    if (a->kind != b->kind || a->dtype != b->dtype || a->rank != b->rank ||
        a->ninputs != b->ninputs || memcmp(a->shape, b->shape, sizeof a->shape[0] * (size_t)a->rank) ||
        !kernel_same(&a->kernel, &b->kernel))
        return 0;
    for (int i = 0; i < a->ninputs; i++) {
        const pl_node *x = pl_graph_node(g, a->inputs[i]), *y = pl_graph_node(g, b->inputs[i]);
        if (x->rank != y->rank || x->dtype != y->dtype ||
            memcmp(x->shape, y->shape, sizeof x->shape[0] * (size_t)x->rank))
            return 0;
        for (int j = 0; j < i; j++)
            if ((a->inputs[j] == a->inputs[i]) != (b->inputs[j] == b->inputs[i]))
                return 0;
    }
    return 1;
}

/* nstate u's spec tables copied into the empty nstate s. */
static int nstate_copy(const nstate *u, nstate *s, ein_error *err)
{
    int n = u->nspecs;
    s->nspecs = n;
    s->nidx = u->nidx;
    s->nin = u->nin;
    s->counts = malloc(sizeof(int) * (size_t)(n * u->nidx + 1));
    s->local = malloc(sizeof(double) * (size_t)(n + 1));
    s->out_h = malloc(sizeof(uint64_t) * (size_t)(n + 1));
    s->in_h = malloc(sizeof(uint64_t) * (size_t)(n * s->nin + 1));
    s->e = calloc((size_t)(n + 1), sizeof *s->e);
    s->in_store = malloc(sizeof(int) * (size_t)(n * s->nin + 1));
    if (!s->counts || !s->local || !s->out_h || !s->in_h || !s->e || !s->in_store)
        return ein_fail(err, EIN_ENOMEM, "out of memory in the optimizer");
    memcpy(s->counts, u->counts, sizeof(int) * (size_t)(n * u->nidx));
    memcpy(s->local, u->local, sizeof(double) * (size_t)n);
    memcpy(s->out_h, u->out_h, sizeof(uint64_t) * (size_t)n);
    memcpy(s->in_h, u->in_h, sizeof(uint64_t) * (size_t)(n * s->nin));
    return 0;
}

/* The specs of every live operator (none chosen yet). An operator equal
 * (node_same) to an earlier one copies its tables instead of enumerating:
 * a model's identical blocks are enumerated once. */
static int specs_fill(const pl_graph *g, const char *live, int n, int p, nstate *st,
                      const pl_plan_opts *opts, ein_error *err)
{
    int rc = 0;
    pl_spec buf = {0};
    uint64_t *sig = malloc(sizeof *sig * ((size_t)n + 1));
    if (!sig)
        return ein_fail(err, EIN_ENOMEM, "out of memory in the optimizer");
    for (int v = 0; v < n && rc == 0; v++) {
        st[v].chosen = -1;
        st[v].parent = -1;
        if (!is_op(g, live, v))
            continue;
        sig[v] = node_sig(g, v);
        int twin = -1;
        for (int u = 0; u < v && twin < 0; u++)
            if (is_op(g, live, u) && sig[u] == sig[v] && node_same(g, u, v))
                twin = u;
        if (twin >= 0)
            rc = nstate_copy(&st[twin], &st[v], err);
        else if ((rc = nstate_fill(g, v, p, &st[v], &buf, opts, err)) == 0 && st[v].nspecs == 0)
            rc = no_spec_error(g, v, p, err);
    }
    free(sig);
    pl_spec_clear(&buf);
    return rc;
}

/* Choice by the caller's scoring (opts->force): the best-scored spec of
 * every operator. */
static void choose_forced(const pl_graph *g, const char *live, int n, nstate *st,
                          const pl_plan_opts *opts)
{
    for (int v = 0; v < n; v++) {
        if (!is_op(g, live, v))
            continue;
        pl_index idx[PL_MAX_INDICES];
        int ni = pl_op_indices(g, v, idx, NULL);
        double best = -DBL_MAX;
        for (int i = 0; i < st[v].nspecs; i++) {
            double sc = opts->force(opts->force_ctx, g, v, idx, ni, st[v].counts + i * st[v].nidx);
            if (sc > best) {
                best = sc;
                st[v].chosen = i;
            }
        }
    }
}

/* Pieces: an operator with exactly one consumer belongs to its consumer's
 * piece (with linear paths: only the consumer's largest such input); every
 * other operator roots a piece. Fills st[].parent/piece and pieces[]. */
static int pieces_build(const pl_graph *g, const char *live, int n, nstate *st, const int *cons_off,
                        const pl_plan_opts *opts, piece *pieces)
{
    int npieces = 0;
    for (int c = 0; c < n; c++) {
        if (!is_op(g, live, c))
            continue;
        const pl_node *cn = pl_graph_node(g, c);
        int keep = -1;
        for (int k = 0; k < cn->ninputs; k++) {
            int u = cn->inputs[k];
            if (pl_graph_node(g, u)->kind == PL_INPUT || cons_off[u + 1] - cons_off[u] != 1)
                continue;
            if (opts && opts->linear_paths) {
                if (keep < 0 || node_volume(g, u) > node_volume(g, keep))
                    keep = u;
            } else {
                st[u].parent = c;
            }
        }
        if (keep >= 0)
            st[keep].parent = c;
    }
    for (int v = n - 1; v >= 0; v--) {
        if (!is_op(g, live, v))
            continue;
        st[v].piece = st[v].parent < 0 ? v : st[st[v].parent].piece;
        if (st[v].parent < 0)
            pieces[npieces++] = (piece){.root = v, .size = 0};
    }
    for (int i = 0; i < npieces; i++)
        for (int v = 0; v <= pieces[i].root; v++)
            if (is_op(g, live, v) && st[v].piece == pieces[i].root)
                pieces[i].size++;
    return npieces;
}

/* Choice by dynamic programming (or greedily) over the pieces. The paper's
 * order (decreasing size) first; on graphs with shared tensors also
 * producers-first and consumers-first orders, keeping the cheapest plan: a
 * piece optimised before the producer of one of its inputs sees that input
 * as free. */
static int choose_by_pieces(ctx *C, const char *live, int n, piece *pieces, int npieces,
                            ein_error *err)
{
    nstate *st = C->st;
    int norders = C->sel == PL_SELECT_DP && npieces > 1 ? 3 : 1;
    double best_total = DBL_MAX;
    int *best = malloc(sizeof(int) * ((size_t)n + 1));
    if (!best)
        return ein_fail(err, EIN_ENOMEM, "out of memory in the optimizer");
    for (int order = 0; order < norders; order++) {
        qsort(pieces, (size_t)npieces, sizeof *pieces,
              order == 0 ? piece_cmp : order == 1 ? piece_cmp_topo : piece_cmp_rtopo);
        for (int v = 0; v < n; v++)
            st[v].chosen = -1;
        for (int i = 0; i < npieces; i++) {
            int r = pieces[i].root;
            for (int v = 0; v <= r; v++)
                if (is_op(C->g, live, v) && st[v].piece == r)
                    dp_node(C, v);
            assign(C, r, pick_root(C, r));
        }
        if (C->sel == PL_SELECT_DP)
            refine(C, n, live);
        double total = 0;
        for (int v = 0; v < n; v++)
            if (st[v].chosen >= 0)
                total += own_cost(C, v, st[v].chosen);
        if (total < best_total) {
            best_total = total;
            for (int v = 0; v < n; v++)
                best[v] = st[v].chosen;
        }
    }
    for (int v = 0; v < n; v++)
        st[v].chosen = best[v];
    free(best);
    return 0;
}

/* Record each choice and its true sub-costs under the final
 * assignment. */
static int plan_record(const pl_graph *g, int n, const nstate *st, pl_plan *plan, ein_error *err)
{
    int rc;
    for (int v = 0; v < n; v++) {
        if (st[v].chosen < 0)
            continue;
        pl_choice *c = &plan->nodes[v];
        if ((rc = pl_spec_make(g, v, st[v].counts + st[v].chosen * st[v].nidx, &c->spec, err)) < 0)
            return rc;
        if (pl_tiling_of_outputs(&c->spec, &c->out_tiling) < 0)
            return ein_fail(err, EIN_ENOMEM, "out of memory in the optimizer");
        c->planned = 1;
        const pl_node *nd = pl_graph_node(g, v);
        const pl_tiling *tin[PL_MAX_INPUTS] = {NULL};
        for (int k = 0; k < nd->ninputs; k++)
            if (plan->nodes[nd->inputs[k]].planned)
                tin[k] = &plan->nodes[nd->inputs[k]].out_tiling;
        pl_cost_partials(g, v, &c->spec, tin, plan->partials, &c->repart, &c->join, &c->agg);
        plan->total += c->repart + c->join + c->agg;
    }
    return 0;
}

int pl_plan_make_opts(const pl_graph *g, int p, pl_selector sel, uint64_t seed,
                      const pl_plan_opts *opts, pl_plan **out, ein_error *err)
{
    int rc = 0, n = g ? g->nnodes : 0;
    if (!g || !out)
        return ein_fail(err, EIN_EINVAL, "pl_plan_make: NULL graph or output");
    if (p < 1)
        return ein_fail(err, EIN_EINVAL, "device count must be at least 1, not %d", p);
    if (opts && opts->objective == PL_OBJECTIVE_TIME &&
        !(opts->peak_flops > 0 && opts->hbm_bw > 0 && opts->net_bw > 0))
        return ein_fail(err, EIN_EINVAL, "objective time needs peak FLOP/s, HBM and network "
                                         "bandwidths above 0 (got %g, %g, %g)",
                        opts->peak_flops, opts->hbm_bw, opts->net_bw);
    char *live = malloc((size_t)n + 1);
    nstate *st = calloc((size_t)n + 1, sizeof *st);
    int *cons_off = calloc((size_t)n + 2, sizeof(int));
    int *consumers = NULL;
    piece *pieces = malloc(sizeof *pieces * ((size_t)n + 1));
    pl_plan *plan = calloc(1, sizeof *plan);
    if (plan)
        plan->nodes = calloc((size_t)n + 1, sizeof *plan->nodes);
    if (!live || !st || !cons_off || !pieces || !plan || !plan->nodes) {
        rc = ein_fail(err, EIN_ENOMEM, "out of memory in the optimizer");
        goto done;
    }
    plan->p = p;
    plan->nnodes = n;
    plan->selector = sel;
    plan->partials = opts ? opts->partials : PL_PARTIALS_F32;
    mark_live(g, live);
    if ((rc = consumers_build(g, live, n, cons_off, &consumers, err)) < 0 ||
        (rc = specs_fill(g, live, n, p, st, opts, err)) < 0)
        goto done;
    if (opts && opts->force) {
        choose_forced(g, live, n, st, opts);
    } else if (sel == PL_SELECT_RANDOM) {
        for (int v = 0; v < n; v++)
            if (is_op(g, live, v))
                st[v].chosen = (int)(ein_rand_next(&seed) % (uint64_t)st[v].nspecs);
    } else {
        int npieces = pieces_build(g, live, n, st, cons_off, opts, pieces);
        ctx C = {.g = g, .st = st, .sel = sel, .consumers = consumers, .cons_off = cons_off,
                 .o = opts, .p = p};
        if ((rc = choose_by_pieces(&C, live, n, pieces, npieces, err)) < 0)
            goto done;
    }
    rc = plan_record(g, n, st, plan, err);
done:
    if (st)
        for (int v = 0; v < n; v++)
            nstate_clear(&st[v]);
    free(st);
    free(live);
    free(cons_off);
    free(consumers);
    free(pieces);
    if (rc < 0) {
        pl_plan_free(plan);
        return rc;
    }
    *out = plan;
    return 0;
}

void pl_plan_free(pl_plan *plan)
{
    if (!plan)
        return;
    if (plan->nodes)
        for (int v = 0; v < plan->nnodes; v++) {
            pl_spec_clear(&plan->nodes[v].spec);
            pl_tiling_clear(&plan->nodes[v].out_tiling);
        }
    free(plan->nodes);
    free(plan);
}
