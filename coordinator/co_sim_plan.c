/* coordinator/co_sim_plan.c — from a plan to a prediction: lowering as
 * einrun does, then co_sim_run; and einplan --simulate's front end. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/co_lower.h"
#include "coordinator/co_search.h"
#include "coordinator/co_sim.h"
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
    const char **paths = malloc(sizeof *paths * (size_t)(g->nnodes + 1));
    if (!paths)
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    for (int v = 0; v < g->nnodes; v++)
        paths[v] = "predicted.npy"; /* STOREs take no time and write nothing here */
    co_lower_opts lo = {.ndev = ndev, .seed = 1, .output_path = paths, .topo = topo,
                        .search = 1};
    xp_search_opts_default(&lo.search_opts);
    lo.search_opts.seed = seed;
    lo.search_opts.cap_ms = 0; /* the work budget alone: deterministic */
    lo.xcache = xc;
    ein_program **p = NULL;
    co_sim_result *r = NULL;
    rc = co_lower(g, plan, &lo, &p, NULL, err);
    free(paths);
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
        return co_plan_search(g, p, &o, topo, cal, &so, out, NULL, err);
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
    *out = t; /* neither fits: co_sim_cli and einrun report the memory */
    return 0;
fail:
    pl_plan_free(t);
    pl_plan_free(c);
    return rc;
}

int co_sim_plan_make(const pl_graph *g, int p, int sel, uint64_t seed, const char *objective,
                     const char *topo_arg, pl_plan **out, ein_error *err)
{
    pl_plan_opts o = {0};
    if (pl_objective_parse(objective, &o.objective) < 0)
        return ein_fail(err, EIN_EINVAL, "objective '%s': expected comm or time", objective);
    if (o.objective == PL_OBJECTIVE_TIME) {
        xp_topology *topo = NULL;
        co_calib cal;
        const char *name = topo_arg ? topo_arg : "host";
        int rc = xp_topo_load(name, &topo, err);
        if (rc == 0)
            rc = co_sim_calib_of(topo, "host", &cal, err);
        if (rc < 0) {
            xp_topo_free(topo);
            ein_error_prefix(err, "--topology %s", name);
            if (err)
                err->code = EIN_EINVAL; /* bad input, whatever the cause */
            return EIN_EINVAL;
        }
        rc = co_sim_plan_time(g, p, sel, seed, &o, topo, &cal, out, err);
        xp_topo_free(topo);
        return rc;
    }
    return pl_plan_make_opts(g, p, (pl_selector)sel, seed, &o, out, err);
}

int co_sim_load(const char *prog, const char *topo_arg, const char *cal_arg, xp_topology **topo,
                co_calib *cal)
{
    ein_error err = {0};
    const char *name = topo_arg ? topo_arg : "host";
    if (xp_topo_load(name, topo, &err) < 0) {
        fprintf(stderr, "%s: --topology %s: %s\n", prog, name, err.msg);
        return 2;
    }
    if ((cal_arg ? co_calib_load(cal_arg, cal, &err) : co_sim_calib_of(*topo, "host", cal, &err)) < 0) {
        fprintf(stderr, "%s: %s%s%s%s\n", prog, cal_arg ? "--calibration " : "",
                cal_arg ? cal_arg : "", cal_arg ? ": " : "", err.msg);
        xp_topo_free(*topo);
        *topo = NULL;
        return 2;
    }
    return 0;
}

int co_sim_cli(const char *prog, const pl_graph *g, const pl_plan *plan,
               const pl_plan_opts *popts, const xp_topology *topo, const co_calib *cal,
               const char *trace_path, int json, uint64_t seed)
{
    ein_error err = {0}, merr = {0};
    ein_program **progs = NULL;
    co_sim_result *r = NULL;
    pl_plan *other = NULL;
    int status = 2;
    if (co_sim_plan(g, plan, topo, cal, seed, 1, &progs, &r, &err) < 0) {
        if (err.code != EIN_ELIMIT || plan->selector != PL_SELECT_DP) {
            fprintf(stderr, "%s: --simulate: %s\n", prog, err.msg);
            status = err.code == EIN_EINVAL || err.code == EIN_ELIMIT ? 2 : 1;
            goto done;
        }
        /* Memory is a constraint: try the other objective's plan. */
        merr = err;
        pl_plan_opts o = popts ? *popts : (pl_plan_opts){0};
        o.objective = o.objective == PL_OBJECTIVE_TIME ? PL_OBJECTIVE_COMM : PL_OBJECTIVE_TIME;
        if (o.objective == PL_OBJECTIVE_TIME)
            co_sim_objective_rates(topo, cal, &o);
        if (pl_plan_make_opts(g, plan->p, plan->selector, seed, &o, &other, &err) < 0 ||
            co_sim_plan(g, other, topo, cal, seed, 1, &progs, &r, &err) < 0) {
            fprintf(stderr, "%s: --simulate: no plan fits: %s\n", prog, merr.msg);
            goto done;
        }
        fprintf(stderr, "%s: the plan of objective %s does not fit (%s); showing objective %s's\n",
                prog, o.objective == PL_OBJECTIVE_TIME ? "comm" : "time", merr.msg,
                o.objective == PL_OBJECTIVE_TIME ? "time" : "comm");
    }
    status = 1;
    if ((json ? co_sim_json(progs, r, topo, cal, stdout)
              : co_sim_print(progs, r, topo, cal, stdout)) < 0) {
        fprintf(stderr, "%s: cannot write the report\n", prog);
        goto done;
    }
    if (trace_path) {
        FILE *f = fopen(trace_path, "w");
        int rc = f ? co_sim_trace(progs, r, f) : EIN_EIO;
        if (f && fclose(f) != 0)
            rc = EIN_EIO;
        if (rc < 0) {
            fprintf(stderr, "%s: --trace %s: cannot write it\n", prog, trace_path);
            status = 2;
            goto done;
        }
        if (!json)
            printf("predicted timeline written to %s\n", trace_path);
    }
    status = 0;
done:
    co_sim_result_free(r);
    if (progs)
        co_programs_free(progs, plan->p);
    pl_plan_free(other);
    return status;
}
