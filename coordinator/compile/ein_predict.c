/* coordinator/compile/ein_predict.c — ein_compiled_predict (einsummable.h): the
 * simulator of einplan --simulate (coordinator/predict/co_sim.h) run on a
 * compiled program's own per-device programs and topology. It reads the
 * compiled value, so it sits in compile/, above predict/. */
#include <stdio.h>
#include <string.h>

#include "coordinator/compile/ein_compile_int.h"
#include "coordinator/predict/co_sim.h"

int ein_compiled_predict(const ein_compiled *c, const char *calibration, ein_prediction *out,
                         ein_error *err)
{
    if (!c || !out)
        return ein_fail(err, EIN_EINVAL, "predict: NULL compiled program or output");
    if (!c->progs)
        return ein_fail(err, EIN_EINVAL, "predict: the program was compiled with plan_only "
                        "(no per-device programs to simulate)");
    if (c->ndev > EIN_MAX_DEVICES)
        return ein_fail(err, EIN_ELIMIT, "predict: %d devices; at most %d", c->ndev,
                        EIN_MAX_DEVICES);
    co_calib cal;
    int rc = calibration && *calibration ? co_calib_load(calibration, &cal, err)
                                         : co_sim_calib_of(c->topo, "host", &cal, err);
    if (rc < 0)
        return ein_error_prefix(err, "predict");
    co_sim_result *r = NULL;
    if ((rc = co_sim_run(c->progs, c->ndev, c->topo, &cal, &r, err)) < 0)
        return ein_error_prefix(err, "predict");
    memset(out, 0, sizeof *out);
    out->time = r->time;
    out->makespan = r->makespan;
    out->path_compute = r->path_compute;
    out->path_comm = r->path_comm;
    out->path_wait = r->path_wait;
    out->ndev = r->ndev;
    snprintf(out->calibration, sizeof out->calibration, "%s", cal.name);
    for (int d = 0; d < r->ndev; d++) {
        out->dev[d].compute = r->dev[d].compute;
        out->dev[d].comm = r->dev[d].comm;
        out->dev[d].idle = r->dev[d].idle;
        out->dev[d].end = r->dev[d].end;
        out->dev[d].peak_bytes = r->dev[d].peak;
    }
    co_sim_result_free(r);
    return 0;
}

int co_compiled_simulate(const ein_compiled *c, co_sim_result **out, ein_error *err)
{
    if (!c || !c->progs || !c->have_cal)
        return ein_fail(err, EIN_EINVAL, "simulate: a program compiled without per-device "
                        "programs or a calibration");
    co_sim_result *r = NULL;
    int rc = co_sim_run(c->progs, c->ndev, &c->topo_limited, &c->cal, &r, err);
    if (rc == 0)
        rc = co_sim_check_memory(c->progs, r, &c->topo_limited, err);
    if (rc < 0) {
        co_sim_result_free(r);
        return rc;
    }
    *out = r;
    return 0;
}
