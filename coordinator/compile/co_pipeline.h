/* coordinator/compile/co_pipeline.h — the compile pipeline from a plan, in
 * named steps, the one way a plan becomes per-device Programs (and, when
 * asked, a prediction):
 *
 *   1. physical  co_physical_make: placement and every exchange body,
 *                synthesised on the topology (co_physical.h);
 *   2. lower     co_lower: one Program per device, only emitted
 *                (co_lower.h);
 *   2b. fuse     co_step_fuse: consecutive kernels of a device fused
 *                (co_fuse.h: swiglu, add_rmsnorm) unless lo.no_fuse;
 *   3. memplan   co_step_memplan: buffers placed by liveness (co_memplan.h),
 *                unless the lowering options say no_reuse;
 *   4. validate  co_step_validate: every Program well formed
 *                (ein_program_validate) and small enough for one PROGRAM
 *                message;
 *   5. simulate  with a calibration only: co_sim_run on the same topology
 *                (coordinator/predict/co_sim.h), then, with check_memory,
 *                co_sim_check_memory.
 *
 * ein_compile (ein_compile.c) plans (rewrite, topology, plan: the DP, a
 * strategy or the plan search) and then runs steps 1-4 on its plan; the
 * plan search (co_search.h) and the choice of a plan by predicted time
 * (co_plan_by_time, co_search_fit.h) run steps 1-5 on every candidate
 * through co_plan_predict; a loaded program is derived again through steps
 * 1-4 (co_compiled_rederive). predict/ only simulates Programs: it never
 * lowers.
 *
 * Ownership: a co_pipeline is the caller's value (on the stack); after
 * co_pipeline_run succeeds its results (ph, progs, sim) are the caller's
 * to take (set the field to NULL) or to free with co_pipeline_clear. The
 * inputs (graph, plan, topology, calibration, cache) are only read. Do not
 * copy a co_pipeline between co_pipeline_init and co_pipeline_run
 * (lo.memplan may point at its mo). Failure: a negative EIN_E* code with
 * `err` filled, `step` saying which step failed, and no result kept. */
#ifndef CO_PIPELINE_H
#define CO_PIPELINE_H

#include <stdint.h>

#include "common/base/ein_error.h"
#include "common/ir/ein_program.h"
#include "coordinator/compile/co_lower.h"
#include "coordinator/compile/co_memplan.h"
#include "coordinator/compile/co_physical.h"
#include "coordinator/predict/co_calib.h"
#include "coordinator/predict/co_sim.h"
#include "exchange/xp_topo.h"
#include "include/einsummable/einsummable.h"
#include "planner/pl_graph.h"
#include "planner/pl_optimize.h"

typedef enum co_step {
    CO_STEP_NONE = 0,
    CO_STEP_PHYSICAL,
    CO_STEP_LOWER,
    CO_STEP_FUSE,
    CO_STEP_MEMPLAN,
    CO_STEP_VALIDATE,
    CO_STEP_SIMULATE
} co_step;

typedef struct co_pipeline {
    /* inputs */
    const pl_graph *g;
    const pl_plan *plan;
    co_physical_opts po;        /* step 1 (po.topo: the topology of steps 1 and 5) */
    co_lower_opts lo;           /* steps 2-4 */
    co_memplan_opts mo;         /* lo.memplan points here when the delays were set */
    int progress;               /* show progress of steps 1-3 (ein_progress_wanted) */
    const co_calib *cal;        /* NULL: no step 5 */
    int check_memory;           /* step 5 fails with EIN_ELIMIT past the topology's memory */
    /* results */
    co_physical *ph;
    ein_program **progs;        /* plan->p Programs */
    co_lower_stats ls;
    co_sim_result *sim;         /* step 5's, or NULL */
    co_step step;               /* the step that failed (CO_STEP_NONE: none) */
} co_pipeline;

/* ein_compile's exchange options (o's search budget, cap, seed and chunks)
 * for a compile onto `ndev` devices of `topo`. */
void co_compile_physical_opts(const ein_compile_options *o, int ndev, const xp_topology *topo,
                              co_physical_opts *po);

/* *p for `plan` of `g` on `topo` as ein_compile lowers with `o`: step 1's
 * options from co_compile_physical_opts, steps 2-4's from o's seed and
 * no_reuse with the debugging switches $EIN_NO_REUSE=1 and
 * $EIN_REUSE_DELAY=L,R (co_memplan's delays; malformed: the defaults),
 * fusion unless $EIN_FUSE=0 (co_fuse_knob), no calibration. The caller
 * may change any input before co_pipeline_run. */
void co_pipeline_init(co_pipeline *p, const pl_graph *g, const pl_plan *plan,
                      const xp_topology *topo, const ein_compile_options *o);

/* Steps 1-4, and 5 when p->cal is set. On failure every result is freed. */
int co_pipeline_run(co_pipeline *p, ein_error *err);

/* Free the results still in *p (NULL fields are skipped). */
void co_pipeline_clear(co_pipeline *p);

/* Step 2b on progs[0..ndev): co_fuse unless lo->no_fuse (1); lo->no_fuse
 * -1 (a malformed EIN_FUSE) fails naming the knob. ls->ninstrs (ls may be
 * NULL) loses the instructions fusion removed. */
int co_step_fuse(ein_program **progs, int ndev, const co_lower_opts *lo, co_lower_stats *ls,
                 ein_error *err);
/* Step 3 on progs[0..ndev): co_memplan with lo->memplan unless lo->no_reuse. */
int co_step_memplan(ein_program **progs, int ndev, const co_lower_opts *lo, ein_error *err);

/* Step 4: every Program valid, then each encoded as a PROGRAM message of
 * at most lo->max_program_bytes (<= 0: EIN_MSG_MAX_BYTES); past it
 * EIN_ELIMIT (the input's fault: too many operators for the devices),
 * an invalid Program an internal error. */
int co_step_validate(ein_program *const *progs, int ndev, const co_lower_opts *lo,
                     ein_error *err);

/* Steps 2-4 on a physical plan `ph` the caller made from g and plan
 * (co_lower's arguments): co_lower, co_step_fuse, co_step_memplan,
 * co_step_validate.
 * On success *progs is the caller's (co_programs_free). */
int co_pipeline_programs(const pl_graph *g, const pl_plan *plan, const co_physical *ph,
                         const co_lower_opts *lo, ein_program ***progs, co_lower_stats *ls,
                         ein_error *err);

/* The pipeline for a plan's prediction (the plan search's per-candidate
 * step): steps 1-5 with the options of a default compile but plan seed
 * `seed` and no wall-clock cap on the exchange searches (the work budget
 * alone bounds them), the exchange bodies kept in (and taken from) `xc`
 * (NULL: none; one cache per topology and seed), simulated with `cal` on
 * `topo`, and with `check_memory` failing as co_sim_check_memory does.
 * A failure before the simulation is prefixed "lowering". *progs (ndev
 * Programs, co_programs_free) and *out (co_sim_result_free) are the
 * caller's on success; on failure nothing is returned. */
int co_plan_predict(const pl_graph *g, const pl_plan *plan, const xp_topology *topo,
                    const co_calib *cal, uint64_t seed, int check_memory, co_xcache *xc,
                    ein_program ***progs, co_sim_result **out, ein_error *err);

#endif
