/* planner/rewrite/rw_ilp.c — ILP extraction through CBC's C interface
 * (TENSAT §5), compiled only with PL_REWRITE_HAVE_CBC (configure finds
 * `cbc` with pkg-config; Debian coinor-libcbc-dev).
 *
 * One binary x_n per e-node that is live, not blacklisted by the cycle
 * filter and in a class reachable from the outputs. Constraints:
 *   every output class:          sum_{n in class} x_n >= 1
 *   every node n, child class c: x_n - sum_{m in c} x_m <= 0
 * The cycle filter left the e-graph acyclic, so no ordering variables are
 * needed. Objective: run-time cost (weight-only nodes add 1e-3 of their
 * precompute time, as a tie-break), scaled so the largest is 1e4. The caller's choice
 * (greedy + local search) is the solver's MIP start; `best` is replaced
 * only by a feasible solution that the caller then prices and compares. */
#include <stdlib.h>
#include <string.h>

#include "planner/rewrite/rw_egraph.h"

#ifdef PL_REWRITE_HAVE_CBC
#include <coin/Cbc_C_Interface.h>

/* One extraction's model and scratch: col[node] is the node's column (-1:
 * no variable), node_of[column] its node; reach[class] marks the classes
 * reachable from the outputs (queue: their BFS order, later the chosen
 * node per class); idx/val hold one row or the MIP start. */
typedef struct ilp_model {
    const rw_egraph *eg;
    int *col, *node_of, *queue, *idx;
    uint8_t *reach;
    double *val;
    int ncols;
    Cbc_Model *m;
} ilp_model;

/* Allocate the scratch of *s for eg; 0 or EIN_ENOMEM (ilp_free frees
 * what was allocated either way). */
static int ilp_alloc(ilp_model *s, const rw_egraph *eg, ein_error *err)
{
    int nc = eg->nclasses;
    memset(s, 0, sizeof *s);
    s->eg = eg;
    s->col = malloc(((size_t)eg->nnodes + 1) * sizeof *s->col);
    s->node_of = malloc(((size_t)eg->nnodes + 1) * sizeof *s->node_of);
    s->reach = calloc((size_t)nc + 1, 1);
    s->queue = malloc(((size_t)nc + 1) * sizeof *s->queue);
    s->idx = malloc(((size_t)eg->nnodes + 2) * sizeof *s->idx);
    s->val = malloc(((size_t)eg->nnodes + 2) * sizeof *s->val);
    if (!s->col || !s->node_of || !s->reach || !s->queue || !s->idx || !s->val)
        return ein_fail(err, EIN_ENOMEM, "rewrite: out of memory");
    return 0;
}

static void ilp_free(ilp_model *s)
{
    if (s->m)
        Cbc_deleteModel(s->m);
    free(s->col);
    free(s->node_of);
    free(s->reach);
    free(s->queue);
    free(s->idx);
    free(s->val);
}

/* Mark reach[] for the classes reachable from the roots through live,
 * non-blacklisted nodes. */
static void ilp_reach(ilp_model *s, const uint8_t *black, const int *roots, int nroots)
{
    const rw_egraph *eg = s->eg;
    int qh = 0, qt = 0;
    for (int r = 0; r < nroots; r++) {
        int c = rw_find_const(eg, roots[r]);
        if (!s->reach[c])
            s->reach[c] = 1, s->queue[qt++] = c;
    }
    while (qh < qt) {
        const rw_ivec *ns = &eg->classes[s->queue[qh++]].nodes;
        for (int k = 0; k < ns->n; k++) {
            const rw_node *n = &eg->nodes[ns->v[k]];
            if (n->dead || black[ns->v[k]])
                continue;
            for (int j = 0; j < n->nch; j++) {
                int c = rw_find_const(eg, n->ch[j]);
                if (!s->reach[c])
                    s->reach[c] = 1, s->queue[qt++] = c;
            }
        }
    }
}

/* One binary column per usable node of a reachable class, its cost scaled
 * so that the largest is 1e4 (FLOP-only costs of 1e12 would overwhelm the
 * solver's tolerances). */
static void ilp_columns(ilp_model *s, const double *run, const double *pre, const uint8_t *black)
{
    const rw_egraph *eg = s->eg;
    double scale = 0;
    for (int i = 0; i < eg->nnodes; i++)
        if (run[i] + pre[i] > scale)
            scale = run[i] + pre[i];
    scale = scale > 0 ? 1e4 / scale : 1;
    s->ncols = 0;
    for (int i = 0; i < eg->nnodes; i++) {
        const rw_node *n = &eg->nodes[i];
        s->col[i] = -1;
        if (n->dead || black[i] || !s->reach[rw_find_const(eg, n->cls)])
            continue;
        s->col[i] = s->ncols;
        s->node_of[s->ncols++] = i;
        Cbc_addCol(s->m, "", 0.0, 1.0, scale * (run[i] + 1e-3 * pre[i]), 1, 0, NULL, NULL);
    }
}

/* The row coef * x_n for every column n of class cls after the first
 * nz entries of idx/val, then add it as `sense` rhs. */
static void ilp_add_row(ilp_model *s, int nz, int cls, double coef, char sense, double rhs)
{
    const rw_ivec *ns = &s->eg->classes[cls].nodes;
    for (int k = 0; k < ns->n; k++)
        if (s->col[ns->v[k]] >= 0)
            s->idx[nz] = s->col[ns->v[k]], s->val[nz++] = coef;
    Cbc_addRow(s->m, "", nz, s->idx, s->val, sense, rhs);
}

/* Every output class: some node chosen. Every column, each distinct child
 * class: chosen only if a node of the child is. */
static void ilp_rows(ilp_model *s, const int *roots, int nroots)
{
    const rw_egraph *eg = s->eg;
    for (int r = 0; r < nroots; r++)
        ilp_add_row(s, 0, rw_find_const(eg, roots[r]), 1.0, 'G', 1.0);
    for (int c = 0; c < s->ncols; c++) {
        const rw_node *n = &eg->nodes[s->node_of[c]];
        for (int j = 0; j < n->nch; j++) {
            int ch = rw_find_const(eg, n->ch[j]), dup = 0;
            for (int t = 0; t < j && !dup; t++)
                dup = rw_find_const(eg, n->ch[t]) == ch;
            if (dup)
                continue;
            s->idx[0] = c, s->val[0] = 1.0;
            ilp_add_row(s, 1, ch, -1.0, 'L', 0.0);
        }
    }
}

/* MIP start: the caller's choice best[], on every reachable class. */
static void ilp_mip_start(ilp_model *s, const int *best)
{
    const rw_egraph *eg = s->eg;
    int ns0 = 0;
    for (int c = 0; c < s->ncols; c++) {
        int i = s->node_of[c];
        s->idx[ns0] = c;
        s->val[ns0++] = best[rw_find_const(eg, eg->nodes[i].cls)] == i ? 1.0 : 0.0;
    }
    Cbc_setMIPStartI(s->m, ns0, s->idx, s->val);
}

/* The solution x into best[]: per class, its cheapest selected node
 * (queue reused as the map); classes with none keep their choice. */
static void ilp_take(ilp_model *s, const double *x, const double *run, const double *pre,
                     int *best)
{
    const rw_egraph *eg = s->eg;
    int *pick = s->queue;
    for (int cl = 0; cl < eg->nclasses; cl++)
        pick[cl] = -1;
    for (int c = 0; c < s->ncols; c++) {
        int i = s->node_of[c], cl = rw_find_const(eg, eg->nodes[i].cls);
        if (x[c] > 0.5 && (pick[cl] < 0 || run[i] + pre[i] < run[pick[cl]] + pre[pick[cl]]))
            pick[cl] = i;
    }
    for (int cl = 0; cl < eg->nclasses; cl++)
        if (pick[cl] >= 0)
            best[cl] = pick[cl];
}

int rw_ilp_extract(const rw_egraph *eg, const double *run, const double *pre,
                   const uint8_t *black, const int *roots, int nroots, double time_limit_s,
                   int *best, int *optimal, ein_error *err)
{
    ilp_model s;
    int rc = ilp_alloc(&s, eg, err);
    if (rc < 0)
        goto out;
    ilp_reach(&s, black, roots, nroots);
    if (!(s.m = Cbc_newModel())) {
        rc = ein_fail(err, EIN_ENOMEM, "rewrite: CBC could not create a model");
        goto out;
    }
    Cbc_setLogLevel(s.m, 0);
    ilp_columns(&s, run, pre, black);
    ilp_rows(&s, roots, nroots);
    ilp_mip_start(&s, best);
    Cbc_setMaximumSeconds(s.m, time_limit_s > 0 ? time_limit_s : 1.0);
    Cbc_solve(s.m);
    const double *x = Cbc_getColSolution(s.m);
    if (!x || Cbc_numberSavedSolutions(s.m) < 1) {
        rc = ein_fail(err, EIN_ENOPLAN, "rewrite: the ILP found no solution (status %d)",
                      Cbc_status(s.m));
        goto out;
    }
    *optimal = Cbc_isProvenOptimal(s.m);
    ilp_take(&s, x, run, pre, best);
out:
    ilp_free(&s);
    return rc;
}

#else

int rw_ilp_extract(const rw_egraph *eg, const double *run, const double *pre,
                   const uint8_t *black, const int *roots, int nroots, double time_limit_s,
                   int *best, int *optimal, ein_error *err)
{
    return ein_fail(err, EIN_EUNSUPPORTED, "rewrite: ILP extraction needs CBC; this build "
                    "has none (install coinor-libcbc-dev and reconfigure)");
}

#endif
