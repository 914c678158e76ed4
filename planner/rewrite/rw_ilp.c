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

int rw_ilp_extract(const rw_egraph *eg, const double *run, const double *pre,
                   const uint8_t *black, const int *roots, int nroots, double time_limit_s,
                   int *best, int *optimal, ein_error *err)
{
    int nc = eg->nclasses, rc = 0;
    int *col = malloc(((size_t)eg->nnodes + 1) * sizeof *col);   /* node -> column, -1 */
    int *node_of = malloc(((size_t)eg->nnodes + 1) * sizeof *node_of);
    uint8_t *reach = calloc((size_t)nc + 1, 1);
    int *queue = malloc(((size_t)nc + 1) * sizeof *queue);
    int *idx = malloc(((size_t)eg->nnodes + 2) * sizeof *idx);
    double *val = malloc(((size_t)eg->nnodes + 2) * sizeof *val);
    Cbc_Model *m = NULL;
    if (!col || !node_of || !reach || !queue || !idx || !val) {
        rc = ein_fail(err, EIN_ENOMEM, "rewrite: out of memory");
        goto out;
    }
    /* Classes reachable from the outputs through usable nodes. */
    int qh = 0, qt = 0;
    for (int r = 0; r < nroots; r++) {
        int c = rw_find_const(eg, roots[r]);
        if (!reach[c])
            reach[c] = 1, queue[qt++] = c;
    }
    while (qh < qt) {
        const rw_ivec *ns = &eg->classes[queue[qh++]].nodes;
        for (int k = 0; k < ns->n; k++) {
            const rw_node *n = &eg->nodes[ns->v[k]];
            if (n->dead || black[ns->v[k]])
                continue;
            for (int j = 0; j < n->nch; j++) {
                int c = rw_find_const(eg, n->ch[j]);
                if (!reach[c])
                    reach[c] = 1, queue[qt++] = c;
            }
        }
    }
    m = Cbc_newModel();
    if (!m) {
        rc = ein_fail(err, EIN_ENOMEM, "rewrite: CBC could not create a model");
        goto out;
    }
    Cbc_setLogLevel(m, 0);
    /* Coefficients scaled to at most 1e4: FLOP-only costs (1e12) would
     * overwhelm the solver's tolerances. */
    double scale = 0;
    for (int i = 0; i < eg->nnodes; i++)
        if (run[i] + pre[i] > scale)
            scale = run[i] + pre[i];
    scale = scale > 0 ? 1e4 / scale : 1;
    int ncols = 0;
    for (int i = 0; i < eg->nnodes; i++) {
        const rw_node *n = &eg->nodes[i];
        col[i] = -1;
        if (n->dead || black[i] || !reach[rw_find_const(eg, n->cls)])
            continue;
        col[i] = ncols;
        node_of[ncols++] = i;
        Cbc_addCol(m, "", 0.0, 1.0, scale * (run[i] + 1e-3 * pre[i]), 1, 0, NULL, NULL);
    }
    for (int r = 0; r < nroots; r++) {
        const rw_ivec *ns = &eg->classes[rw_find_const(eg, roots[r])].nodes;
        int nz = 0;
        for (int k = 0; k < ns->n; k++)
            if (col[ns->v[k]] >= 0)
                idx[nz] = col[ns->v[k]], val[nz++] = 1.0;
        Cbc_addRow(m, "", nz, idx, val, 'G', 1.0);
    }
    for (int c = 0; c < ncols; c++) {
        const rw_node *n = &eg->nodes[node_of[c]];
        for (int j = 0; j < n->nch; j++) {
            int ch = rw_find_const(eg, n->ch[j]), dup = 0;
            for (int t = 0; t < j && !dup; t++)
                dup = rw_find_const(eg, n->ch[t]) == ch;
            if (dup)
                continue;
            const rw_ivec *ns = &eg->classes[ch].nodes;
            int nz = 0;
            idx[nz] = c, val[nz++] = 1.0;
            for (int k = 0; k < ns->n; k++)
                if (col[ns->v[k]] >= 0)
                    idx[nz] = col[ns->v[k]], val[nz++] = -1.0;
            Cbc_addRow(m, "", nz, idx, val, 'L', 0.0);
        }
    }
    /* MIP start: the caller's choice, on every reachable class it uses. */
    int ns0 = 0;
    for (int c = 0; c < ncols; c++) {
        int i = node_of[c];
        idx[ns0] = c;
        val[ns0++] = best[rw_find_const(eg, eg->nodes[i].cls)] == i ? 1.0 : 0.0;
    }
    Cbc_setMIPStartI(m, ns0, idx, val);
    Cbc_setMaximumSeconds(m, time_limit_s > 0 ? time_limit_s : 1.0);
    Cbc_solve(m);
    const double *x = Cbc_getColSolution(m);
    if (!x || Cbc_numberSavedSolutions(m) < 1) {
        rc = ein_fail(err, EIN_ENOPLAN, "rewrite: the ILP found no solution (status %d)",
                      Cbc_status(m));
        goto out;
    }
    *optimal = Cbc_isProvenOptimal(m);
    /* Per class, the cheapest selected node (queue reused as the map). */
    for (int cl = 0; cl < nc; cl++)
        queue[cl] = -1;
    for (int c = 0; c < ncols; c++) {
        int i = node_of[c], cl = rw_find_const(eg, eg->nodes[i].cls);
        if (x[c] > 0.5 && (queue[cl] < 0 || run[i] + pre[i] < run[queue[cl]] + pre[queue[cl]]))
            queue[cl] = i;
    }
    for (int cl = 0; cl < nc; cl++)
        if (queue[cl] >= 0)
            best[cl] = queue[cl];
out:
    if (m)
        Cbc_deleteModel(m);
    free(col);
    free(node_of);
    free(reach);
    free(queue);
    free(idx);
    free(val);
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
