/* coordinator/compile/co_pipeline.c — the compile pipeline from a plan:
 * physical plan, lowering, memory planning, validation, simulation (see
 * co_pipeline.h). */
#include "coordinator/compile/co_pipeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/ein_knob.h"
#include "common/process/ein_progress.h"
#include "common/io/ein_wire.h"
#include "coordinator/compile/co_fuse.h"

/* The compile's defaults (einsummable.h); here, with the pipeline they
 * configure, so that the pipeline depends on nothing of ein_compile.c. */
void ein_compile_options_init(ein_compile_options *o)
{
    memset(o, 0, sizeof *o);
    o->plan_seed = 1;
    o->seed = 1;
}

void co_compile_physical_opts(const ein_compile_options *o, int ndev, const xp_topology *topo,
                              co_physical_opts *po)
{
    *po = (co_physical_opts){.ndev = ndev, .topo = topo, .search = !o->naive_exchanges};
    xp_search_opts_default(&po->search_opts);
    if (o->search_work > 0)
        po->search_opts.max_work = o->search_work;
    if (o->search_cap_ms > 0)
        po->search_opts.cap_ms = o->search_cap_ms;
    else if (o->search_cap_ms < 0)
        po->search_opts.cap_ms = 0;
    po->search_opts.seed = o->plan_seed;
    po->search_opts.chunks = o->exchange_chunks == EIN_EXCHANGE_CHUNKS_AUTO;
    po->exchange_chunks = o->exchange_chunks > 1 ? o->exchange_chunks : 0;
}

void co_pipeline_init(co_pipeline *p, const pl_graph *g, const pl_plan *plan,
                      const xp_topology *topo, const ein_compile_options *o)
{
    memset(p, 0, sizeof *p);
    p->g = g;
    p->plan = plan;
    p->progress = o->progress;
    co_compile_physical_opts(o, plan->p, topo, &p->po);
    const char *nr = ein_knob_get(EIN_KNOB_NO_REUSE);
    p->lo = (co_lower_opts){.seed = o->seed,
                            .no_reuse = o->no_reuse || (nr && *nr && strcmp(nr, "0") != 0)};
    const char *rd = ein_knob_get(EIN_KNOB_REUSE_DELAY);
    if (rd && sscanf(rd, "%d,%d", &p->mo.delay_local, &p->mo.delay_remote) == 2)
        p->lo.memplan = &p->mo;
    int fuse = 1;
    ein_error fe = {0};
    p->lo.no_fuse = co_fuse_knob(&fuse, &fe) < 0 ? -1 : !fuse;
}

void co_pipeline_clear(co_pipeline *p)
{
    co_physical_free(p->ph);
    p->ph = NULL;
    co_programs_free(p->progs, p->plan ? p->plan->p : 0);
    p->progs = NULL;
    co_sim_result_free(p->sim);
    p->sim = NULL;
}

int co_step_fuse(ein_program **progs, int ndev, const co_lower_opts *lo, co_lower_stats *ls,
                 ein_error *err)
{
    int rc = 0;
    if (lo->no_fuse < 0)
        return co_fuse_knob(&(int){0}, err);
    if (lo->no_fuse)
        return 0;
    co_fuse_stats fs;
    if ((rc = co_fuse(progs, ndev, &fs, err)) < 0)
        return ein_error_prefix(err, "internal error");
    if (ls)
        ls->ninstrs -= fs.nswiglu + fs.nadd_rmsnorm;
    return 0;
}

int co_step_memplan(ein_program **progs, int ndev, const co_lower_opts *lo, ein_error *err)
{
    int rc = 0;
    if (!lo->no_reuse && (rc = co_memplan(progs, ndev, lo->memplan, NULL, err)) < 0)
        ein_error_prefix(err, "internal error");
    return rc;
}

int co_step_validate(ein_program *const *progs, int ndev, const co_lower_opts *lo,
                     ein_error *err)
{
    int rc = 0;
    for (int d = 0; d < ndev && rc == 0; d++)
        if ((rc = ein_program_validate(progs[d], err)) < 0)
            ein_error_prefix(err, "internal error: program of device %d", d);
    long long max = lo->max_program_bytes > 0 ? lo->max_program_bytes : EIN_MSG_MAX_BYTES;
    for (int d = 0; d < ndev && rc == 0; d++) {
        ein_msg m = {.type = EIN_MSG_PROGRAM, .program = progs[d]};
        ein_error e = {0};
        void *buf = NULL;
        size_t len = 0;
        rc = ein_msg_encode(&m, &buf, &len, &e);
        free(buf);
        if (rc == EIN_ELIMIT || (rc == 0 && (long long)len > max))
            return ein_fail(err, EIN_ELIMIT,
                            "the program of device %d (%d instructions, %d buffers) does not "
                            "fit in one message of at most %lld bytes; expected fewer "
                            "operators", d, progs[d]->ninstrs, progs[d]->nbuffers, max);
        if (rc < 0)
            return ein_fail(err, rc, "internal error: program of device %d: %s", d, e.msg);
    }
    return rc;
}

/* Steps 2-4 on a physical plan; *step says which one failed. */
static int programs(const pl_graph *g, const pl_plan *plan, const co_physical *ph,
                    const co_lower_opts *lo, ein_program ***progs_out, co_lower_stats *ls,
                    co_step *step, ein_error *err)
{
    ein_program **progs = NULL;
    *step = CO_STEP_LOWER;
    int rc = co_lower(g, plan, ph, lo, &progs, ls, err);
    if (rc < 0)
        return rc;
    *step = CO_STEP_FUSE;
    rc = co_step_fuse(progs, plan->p, lo, ls, err);
    if (rc == 0) {
        *step = CO_STEP_MEMPLAN;
        rc = co_step_memplan(progs, plan->p, lo, err);
    }
    if (rc == 0) {
        *step = CO_STEP_VALIDATE;
        rc = co_step_validate(progs, plan->p, lo, err);
    }
    if (rc < 0) {
        co_programs_free(progs, plan->p);
        return rc;
    }
    *progs_out = progs;
    return 0;
}

int co_pipeline_programs(const pl_graph *g, const pl_plan *plan, const co_physical *ph,
                         const co_lower_opts *lo, ein_program ***progs, co_lower_stats *ls,
                         ein_error *err)
{
    co_step step;
    return programs(g, plan, ph, lo, progs, ls, &step, err);
}

/* Steps 1-4 (the progress bars as ein_compile has always shown them). */
static int pipeline_lower(co_pipeline *p, ein_error *err)
{
    ein_progress pg;
    ein_progress_begin(&pg, p->progress && ein_progress_wanted(0),
                       "lowering, synthesising exchanges", p->g->nnodes);
    p->po.progress = &pg;
    p->step = CO_STEP_PHYSICAL;
    int rc = co_physical_make(p->g, p->plan, &p->po, &p->ph, err);
    ein_progress_end(&pg);
    p->po.progress = NULL;
    if (rc < 0)
        return rc;
    ein_progress_begin(&pg, p->progress && ein_progress_wanted(0), "lowering", p->g->nnodes);
    p->lo.progress = &pg;
    rc = programs(p->g, p->plan, p->ph, &p->lo, &p->progs, &p->ls, &p->step, err);
    ein_progress_end(&pg);
    p->lo.progress = NULL;
    return rc;
}

int co_pipeline_run(co_pipeline *p, ein_error *err)
{
    p->ph = NULL;
    p->progs = NULL;
    p->sim = NULL;
    int rc = pipeline_lower(p, err);
    if (rc == 0 && p->cal) {
        p->step = CO_STEP_SIMULATE;
        rc = co_sim_run(p->progs, p->plan->p, p->po.topo, p->cal, &p->sim, err);
        if (rc == 0 && p->check_memory)
            rc = co_sim_check_memory(p->progs, p->sim, p->po.topo, err);
    }
    if (rc < 0) {
        co_pipeline_clear(p);
        return rc;
    }
    p->step = CO_STEP_NONE;
    return 0;
}

int co_plan_predict(const pl_graph *g, const pl_plan *plan, const xp_topology *topo,
                    const co_calib *cal, uint64_t seed, int check_memory, co_xcache *xc,
                    ein_program ***progs, co_sim_result **out, ein_error *err)
{
    int ndev = plan->p;
    if (topo->ngpus < ndev)
        return ein_fail(err, EIN_EINVAL, "topology %s has %d GPUs but the plan has %d devices",
                        topo->name, topo->ngpus, ndev);
    /* Lowered as ein_compile lowers (STOREs take no time and write nothing
     * here), the work budget alone bounding the searches. */
    ein_compile_options o;
    ein_compile_options_init(&o);
    o.plan_seed = seed;
    o.search_cap_ms = -1;
    co_pipeline p;
    co_pipeline_init(&p, g, plan, topo, &o);
    p.po.xcache = xc;
    p.cal = cal;
    p.check_memory = check_memory;
    int rc = co_pipeline_run(&p, err);
    if (rc < 0)
        return p.step < CO_STEP_SIMULATE ? ein_error_prefix(err, "lowering") : rc;
    co_physical_free(p.ph);
    *progs = p.progs;
    *out = p.sim;
    return 0;
}
