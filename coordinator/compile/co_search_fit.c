/* coordinator/compile/co_search_fit.c — the plan search checked against the memory
 * on the whole graph, the choice of a plan by predicted time, and the user's
 * memory limit (co_search_fit.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "coordinator/compile/co_lower.h"
#include "coordinator/compile/co_pipeline.h"
#include "coordinator/compile/co_search_fit.h"
#include "coordinator/predict/co_sim.h"

/* A generous bound of what a device can hold at once: every input twice
 * (a device loads at most the whole of each, and an input read under two
 * tilings is loaded twice) and every operator's whole output in the
 * prefix (two blocks' activations, more than any instant keeps alive).
 * Below the capacity the whole graph is not simulated again: that costs
 * as much as tens of the search's moves at P = 72 (30 s of CPU for 32
 * blocks of LLaMA 8B on gb200-nvl72). */
static double fit_bound(const pl_graph *g, int prefix)
{
    double in = 0, act = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const pl_node *nd = &g->nodes[i];
        double b = ein_dtype_elem_bytes(nd->dtype);
        for (int k = 0; k < nd->rank; k++)
            b *= (double)nd->shape[k];
        if (nd->kind == PL_INPUT)
            in += b;
        else if (i < prefix)
            act += b;
    }
    return 2.0 * in + act;
}

int co_plan_search_fit(const pl_graph *g, int p, const pl_plan_opts *base,
                       const xp_topology *topo, const co_calib *cal, const co_search_opts *so,
                       pl_plan **out, co_search_report *rep, int *whole_search, ein_error *err)
{
    co_search_report own = {0}, *r = rep ? rep : &own;
    co_search_opts o = so ? *so : (co_search_opts){0};
    pl_plan *plan = NULL;
    if (whole_search)
        *whole_search = 0;
    int rc = co_plan_search(g, p, base, topo, cal, &o, &plan, r, err);
    if (rc < 0 || o.whole || r->prefix_nodes == 0 || !(topo->memory > 0) ||
        fit_bound(g, r->prefix_nodes) <= topo->memory)
        goto done;
    ein_program **progs = NULL;
    co_sim_result *sr = NULL;
    ein_error e2 = {0};
    rc = co_plan_predict(g, plan, topo, cal, o.seed, 1, NULL, &progs, &sr, &e2);
    if (rc == 0) {
        co_sim_result_free(sr);
        co_programs_free(progs, p);
        goto done;
    }
    if (rc != EIN_ELIMIT) {
        if (err)
            *err = e2;
        pl_plan_free(plan);
        plan = NULL;
        goto done;
    }
    /* The prefix fitted, the whole graph does not: search it whole. */
    pl_plan_free(plan);
    plan = NULL;
    int prefix = r->prefix_nodes;
    co_search_report_free(r);
    memset(r, 0, sizeof *r);
    o.whole = 1;
    /* The same number of moves as on the prefix: each simulation of the
     * whole graph costs nodes / prefix times more of the budget. */
    if (o.work >= 0) {
        double scale = (double)g->nnodes / (double)prefix;
        double w = (double)(o.work > 0 ? o.work : CO_SEARCH_WORK_DEFAULT) * scale;
        o.work = w < 1e8 ? (long)w : 100000000L;
    }
    if (whole_search)
        *whole_search = 1;
    rc = co_plan_search(g, p, base, topo, cal, &o, &plan, r, err);
done:
    if (!rep)
        co_search_report_free(&own);
    if (rc == 0)
        *out = plan;
    else
        pl_plan_free(plan);
    return rc;
}

int co_memory_limit_parse(const char *text, double *bytes, ein_error *err)
{
    static const struct { const char *unit; double scale; } units[] = {
        {"", 1}, {"B", 1}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
        {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
    char *end = NULL;
    double v = text ? strtod(text, &end) : NAN;
    if (!text || end == text || !(v > 0) || !isfinite(v))
        return ein_fail(err, EIN_EINVAL, "memory limit '%s': expected a positive size such as "
                        "4.75GB or 5000000000", text ? text : "(null)");
    while (*end == ' ')
        end++;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (!strcasecmp(end, units[i].unit)) {
            *bytes = v * units[i].scale;
            return 0;
        }
    return ein_fail(err, EIN_EINVAL, "memory limit '%s': unknown unit '%s' (B, KB, MB, GB, TB, "
                    "KiB, MiB, GiB or TiB)", text, end);
}

void co_topo_limit_memory(xp_topology *topo, double limit)
{
    if (limit > 0 && (!(topo->memory > 0) || limit < topo->memory))
        topo->memory = limit;
}

int co_plan_by_time(const pl_graph *g, int p, int sel, uint64_t seed, const pl_plan_opts *base,
                    const xp_topology *topo, const co_calib *cal, pl_plan **out, ein_error *err)
{
    pl_plan_opts o = base ? *base : (pl_plan_opts){0};
    if (sel == PL_SELECT_DP && !o.force) {
        /* The plan search (issue 21): seeds, moves, the simulator. */
        co_search_opts so = {.seed = seed};
        return co_plan_search_fit(g, p, &o, topo, cal, &so, out, NULL, NULL, err);
    }
    /* Another selector, or forced specs: that plan under the time cost. */
    o.objective = PL_OBJECTIVE_TIME;
    co_calib_objective_rates(topo, cal, &o);
    pl_plan *t = NULL;
    int rc = pl_plan_make_opts(g, p, (pl_selector)sel, seed, &o, &t, err);
    *out = t;
    return rc;
}
