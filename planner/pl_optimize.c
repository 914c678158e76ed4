/* planner/pl_optimize.c — Algorithm 1 on trees, greedy and random selectors. */
#include "planner/pl_optimize.h"

#include <float.h>
#include <stdlib.h>
#include <string.h>

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

void pl_cost(const pl_graph *g, int node, const pl_spec *s,
             const pl_tiling *const *in_tilings, double *repart, double *join,
             double *agg)
{
    const pl_node *nd = pl_graph_node(g, node);
    *repart = *join = *agg = 0;
    for (int k = 0; k < s->ninputs; k++) {
        if (!in_tilings || !in_tilings[k])
            continue;
        pl_tiling want;
        if (pl_tiling_of_input(s, k, &want) < 0)
            continue;
        if (!pl_tiling_equal(&want, in_tilings[k])) {
            const pl_node *in = pl_graph_node(g, nd->inputs[k]);
            ein_box whole = ein_box_of_shape(in->rank, in->shape);
            *repart += (double)ein_box_volume(&whole);
        }
        pl_tiling_clear(&want);
    }
    for (int f = 0; f < s->nparts; f++)
        for (int k = 0; k < s->ninputs; k++)
            *join += (double)ein_box_volume(&s->f[f].in[k]);
    /* Each distinct output type appearing m times costs (m-1) x its size. */
    for (int f = 0; f < s->nparts; f++) {
        int first = 1;
        for (int e = 0; e < f && first; e++)
            first = !ein_box_equal(&s->f[e].out, &s->f[f].out);
        if (!first)
            *agg += (double)ein_box_volume(&s->f[f].out);
    }
}

/* A DP table entry: the cheapest way to produce node's output in tiling t. */
typedef struct entry {
    pl_tiling t;
    double cost;
    int spec;
    int in_entry[PL_MAX_INPUTS]; /* chosen entry of each producer, -1 for graph inputs */
} entry;

typedef struct node_state {
    pl_spec *specs;
    int nspecs;
    entry *e;
    int ne;
} node_state;

static void states_free(node_state *st, int n)
{
    for (int v = 0; v < n; v++) {
        pl_spec_array_free(st[v].specs, st[v].nspecs);
        for (int i = 0; i < st[v].ne; i++)
            pl_tiling_clear(&st[v].e[i].t);
        free(st[v].e);
    }
    free(st);
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

static int check_tree(const pl_graph *g, const char *live, ein_error *err)
{
    for (int v = 0; v < g->nnodes; v++) {
        const pl_node *nd = pl_graph_node(g, v);
        if (!live[v] || nd->kind == PL_INPUT)
            continue;
        int first = -1;
        for (int c = v + 1; c < g->nnodes; c++) {
            const pl_node *cn = pl_graph_node(g, c);
            if (!live[c])
                continue;
            for (int k = 0; k < cn->ninputs; k++)
                if (cn->inputs[k] == v) {
                    if (first >= 0 && first != c)
                        return ein_fail(err, EIN_EUNSUPPORTED,
                                        "tensor '%s' is read by both '%s' and '%s'; version 1 of the "
                                        "planner plans trees only (shared intermediate tensors come "
                                        "with the planner issue)",
                                        nd->name, pl_graph_node(g, first)->name, cn->name);
                    first = c;
                }
        }
    }
    return 0;
}

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Fill one node's DP entries from its producers' entries. */
static int dp_node(const pl_graph *g, int v, node_state *st, pl_selector sel, ein_error *err)
{
    const pl_node *nd = pl_graph_node(g, v);
    node_state *me = &st[v];
    me->e = calloc((size_t)me->nspecs, sizeof *me->e);
    if (!me->e)
        return ein_fail(err, EIN_ENOMEM, "out of memory in the optimizer");
    for (int s = 0; s < me->nspecs; s++) {
        const pl_spec *sp = &me->specs[s];
        double rp, jn, ag;
        pl_cost(g, v, sp, NULL, &rp, &jn, &ag);
        entry cand = {.cost = jn + ag, .spec = s, .in_entry = {-1, -1}};
        int same = nd->ninputs == 2 && nd->inputs[0] == nd->inputs[1];
        for (int k = 0; k < nd->ninputs; k++) {
            int u = nd->inputs[k];
            if (pl_graph_node(g, u)->kind == PL_INPUT)
                continue;
            if (same && k == 1) {
                cand.in_entry[1] = cand.in_entry[0];
                continue;
            }
            double best = DBL_MAX;
            int best_e = -1;
            for (int e = 0; e < st[u].ne; e++) {
                double c = st[u].e[e].cost;
                if (sel == PL_SELECT_DP) {
                    for (int kk = k; kk < (same ? 2 : k + 1); kk++) {
                        pl_tiling want;
                        if (pl_tiling_of_input(sp, kk, &want) < 0)
                            return ein_fail(err, EIN_ENOMEM, "out of memory in the optimizer");
                        if (!pl_tiling_equal(&want, &st[u].e[e].t)) {
                            ein_box whole = ein_box_of_shape(pl_graph_node(g, u)->rank,
                                                             pl_graph_node(g, u)->shape);
                            c += (double)ein_box_volume(&whole);
                        }
                        pl_tiling_clear(&want);
                    }
                }
                if (c < best) {
                    best = c;
                    best_e = e;
                }
            }
            cand.cost += best;
            cand.in_entry[k] = best_e;
        }
        if (pl_tiling_of_outputs(sp, &cand.t) < 0)
            return ein_fail(err, EIN_ENOMEM, "out of memory in the optimizer");
        int found = -1;
        for (int i = 0; i < me->ne; i++)
            if (pl_tiling_equal(&me->e[i].t, &cand.t))
                found = i;
        if (found < 0) {
            me->e[me->ne++] = cand;
        } else {
            if (cand.cost < me->e[found].cost) {
                pl_tiling_clear(&me->e[found].t);
                me->e[found] = cand;
            } else {
                pl_tiling_clear(&cand.t);
            }
        }
    }
    return 0;
}

/* Walk back down from entry e of node v, recording each node's spec. */
static void assign(const pl_graph *g, node_state *st, int v, int e, int *chosen)
{
    const pl_node *nd = pl_graph_node(g, v);
    if (chosen[v] >= 0)
        return;
    chosen[v] = st[v].e[e].spec;
    for (int k = 0; k < nd->ninputs; k++)
        if (st[v].e[e].in_entry[k] >= 0)
            assign(g, st, nd->inputs[k], st[v].e[e].in_entry[k], chosen);
}

int pl_plan_make(const pl_graph *g, int p, pl_selector sel, uint64_t seed,
                 pl_plan **out, ein_error *err)
{
    int rc = 0, n = g->nnodes;
    char *live = malloc((size_t)n + 1);
    int *chosen = malloc(sizeof(int) * ((size_t)n + 1));
    node_state *st = calloc((size_t)n + 1, sizeof *st);
    pl_plan *plan = calloc(1, sizeof *plan);
    if (plan)
        plan->nodes = calloc((size_t)n + 1, sizeof *plan->nodes);
    if (!live || !chosen || !st || !plan || !plan->nodes) {
        rc = ein_fail(err, EIN_ENOMEM, "out of memory in the optimizer");
        goto done;
    }
    plan->p = p;
    plan->nnodes = n;
    plan->selector = sel;
    mark_live(g, live);
    if ((rc = check_tree(g, live, err)) < 0)
        goto done;

    for (int v = 0; v < n; v++) {
        chosen[v] = -1;
        const pl_node *nd = pl_graph_node(g, v);
        if (!live[v] || nd->kind == PL_INPUT)
            continue;
        if ((rc = pl_spec_enumerate(g, v, p, &st[v].specs, &st[v].nspecs, err)) < 0)
            goto done;
        if (st[v].nspecs == 0) {
            char shape[256];
            ein_box whole = ein_box_of_shape(nd->rank, nd->shape);
            rc = ein_fail(err, EIN_ENOPLAN,
                          "operator '%s' (shape %s) cannot be split into %d parts: its "
                          "indices are too small for %d function specifications",
                          nd->name, ein_box_format(&whole, shape, sizeof shape), p, p);
            goto done;
        }
        if (sel == PL_SELECT_RANDOM) {
            chosen[v] = (int)(rng_next(&seed) % (uint64_t)st[v].nspecs);
        } else if ((rc = dp_node(g, v, st, sel, err)) < 0) {
            goto done;
        }
    }
    if (sel != PL_SELECT_RANDOM) {
        /* Roots: live operators that no live operator reads. */
        for (int v = n - 1; v >= 0; v--) {
            if (!live[v] || pl_graph_node(g, v)->kind == PL_INPUT || chosen[v] >= 0)
                continue;
            int best = 0;
            for (int e = 1; e < st[v].ne; e++)
                if (st[v].e[e].cost < st[v].e[best].cost)
                    best = e;
            assign(g, st, v, best, chosen);
        }
    }

    /* Record the choice and its true sub-costs under the final assignment. */
    for (int v = 0; v < n; v++) {
        if (chosen[v] < 0)
            continue;
        pl_choice *c = &plan->nodes[v];
        if (pl_spec_copy(&st[v].specs[chosen[v]], &c->spec) < 0 ||
            pl_tiling_of_outputs(&c->spec, &c->out_tiling) < 0) {
            rc = ein_fail(err, EIN_ENOMEM, "out of memory in the optimizer");
            goto done;
        }
        c->planned = 1;
        const pl_node *nd = pl_graph_node(g, v);
        const pl_tiling *tin[PL_MAX_INPUTS] = {NULL, NULL};
        for (int k = 0; k < nd->ninputs; k++)
            if (plan->nodes[nd->inputs[k]].planned)
                tin[k] = &plan->nodes[nd->inputs[k]].out_tiling;
        pl_cost(g, v, &c->spec, tin, &c->repart, &c->join, &c->agg);
        plan->total += c->repart + c->join + c->agg;
    }
done:
    states_free(st, st ? n : 0);
    free(live);
    free(chosen);
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
