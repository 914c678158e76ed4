/* coordinator/predict/co_sim_plan.c — from a plan to a prediction: lowering through
 * ein_compile's own steps (co_compile_lower), then co_sim_run; the
 * choice of a plan by predicted time (ein_compile's compile_plan). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/compile/co_lower.h"
#include "coordinator/compile/co_search.h"
#include "coordinator/compile/co_search_fit.h"
#include "coordinator/predict/co_sim.h"
#include "coordinator/compile/ein_compile_int.h"
#include "planner/pl_graph.h"
#include "planner/pl_optimize.h"

int co_sim_plan(const pl_graph *g, const pl_plan *plan, const xp_topology *topo,
                const co_calib *cal, uint64_t seed, int check_memory, ein_program ***progs,
                co_sim_result **out, ein_error *err)
{
    return co_sim_plan_cached(g, plan, topo, cal, seed, check_memory, NULL, progs, out, err);
}

int co_sim_plan_cached(const pl_graph *g, const pl_plan *plan, const xp_topology *topo,
                       const co_calib *cal, uint64_t seed, int check_memory, co_xcache *xc,
                       ein_program ***progs, co_sim_result **out, ein_error *err)
{
    int ndev = plan->p, rc;
    if (topo->ngpus < ndev)
        return ein_fail(err, EIN_EINVAL, "topology %s has %d GPUs but the plan has %d devices",
                        topo->name, topo->ngpus, ndev);
    /* Lowered as ein_compile lowers (STOREs take no time and write nothing
     * here), the work budget alone bounding the searches. */
    ein_compile_options o;
    ein_compile_options_init(&o);
    o.plan_seed = seed;
    o.search_cap_ms = -1;
    ein_program **p = NULL;
    co_physical *ph = NULL;
    co_sim_result *r = NULL;
    rc = co_compile_lower(g, plan, topo, &o, xc, &ph, &p, NULL, err);
    co_physical_free(ph);
    if (rc < 0)
        return ein_error_prefix(err, "lowering");
    if ((rc = co_sim_run(p, ndev, topo, cal, &r, err)) == 0 && check_memory)
        rc = co_sim_check_memory(p, r, topo, err);
    if (rc < 0) {
        co_sim_result_free(r);
        co_programs_free(p, ndev);
        return rc;
    }
    *progs = p;
    *out = r;
    return 0;
}

void co_sim_objective_rates(const xp_topology *topo, const co_calib *cal, pl_plan_opts *o)
{
    double peak = topo->peak > 0 ? topo->peak : 1e15;
    o->peak_flops = peak * co_calib_eff(cal, CO_WORK_GEMM, 1e9);
    o->hbm_bw = topo->hbm * co_calib_eff(cal, CO_WORK_ELEMENTWISE, 1e7);
    o->gemm_operand_bw = cal->gemm_operand_bw;
    double net = INFINITY;
    int res[4], n = topo->ngpus > 1 ? xp_topo_route(topo, 0, 1, res, NULL) : 0;
    for (int k = 0; k < n; k++)
        if (xp_topo_res_bw(topo, res[k]) < net)
            net = xp_topo_res_bw(topo, res[k]);
    if (!(net < INFINITY))
        net = topo->hbm;
    if (cal->copy_bw > 0 && cal->copy_bw < net)
        net = cal->copy_bw;
    o->net_bw = net * co_calib_eff(cal, CO_WORK_COPY, 1e7);
    if (topo->nodes > 1) { /* bytes between hosts at the NIC rate */
        o->host_gpus = topo->local;
        o->nic_bw = topo->nic * co_calib_eff(cal, CO_WORK_COPY, 1e7);
    }
}

/* Predicted iteration time of `plan`; EIN_ELIMIT when it does not fit. */
static int predict(const pl_graph *g, const pl_plan *plan, const xp_topology *topo,
                   const co_calib *cal, uint64_t seed, double *time, ein_error *err)
{
    ein_program **progs = NULL;
    co_sim_result *r = NULL;
    int rc = co_sim_plan(g, plan, topo, cal, seed, 1, &progs, &r, err);
    if (rc < 0)
        return rc;
    *time = r->time;
    co_sim_result_free(r);
    co_programs_free(progs, plan->p);
    return 0;
}

int co_sim_plan_time(const pl_graph *g, int p, int sel, uint64_t seed, const pl_plan_opts *base,
                     const xp_topology *topo, const co_calib *cal, pl_plan **out, ein_error *err)
{
    pl_plan_opts o = base ? *base : (pl_plan_opts){0};
    if (sel == PL_SELECT_DP && !o.force) {
        /* The plan search (issue 21): seeds, moves, the simulator. */
        co_search_opts so = {.seed = seed};
        return co_plan_search_fit(g, p, &o, topo, cal, &so, out, NULL, NULL, err);
    }
    o.objective = PL_OBJECTIVE_TIME;
    co_sim_objective_rates(topo, cal, &o);
    pl_plan *t = NULL, *c = NULL;
    int rc = pl_plan_make_opts(g, p, (pl_selector)sel, seed, &o, &t, err);
    if (rc < 0 || sel != PL_SELECT_DP || o.force) {
        *out = t;
        return rc;
    }
    o.objective = PL_OBJECTIVE_COMM;
    if ((rc = pl_plan_make_opts(g, p, (pl_selector)sel, seed, &o, &c, err)) < 0) {
        pl_plan_free(t);
        return rc;
    }
    /* The candidates by predicted time; one that does not fit is out. */
    double tt = INFINITY, tc = INFINITY;
    ein_error e2 = {0};
    if ((rc = predict(g, t, topo, cal, seed, &tt, err)) < 0 && rc != EIN_ELIMIT)
        goto fail;
    if ((rc = predict(g, c, topo, cal, seed, &tc, &e2)) < 0 && rc != EIN_ELIMIT) {
        if (err)
            *err = e2;
        goto fail;
    }
    if (tc < tt) {
        pl_plan_free(t);
        t = c;
        c = NULL;
    }
    pl_plan_free(c);
    *out = t; /* neither fits: einplan --simulate and einrun report the memory */
    return 0;
fail:
    pl_plan_free(t);
    pl_plan_free(c);
    return rc;
}
