/* planner/pl_optimize.h — the logical optimizer (paper §4, Algorithm 1).
 *
 * pl_plan_make picks one join-agg spec per operator for p devices:
 *  - PL_SELECT_DP: Algorithm 1 — bottom-up over the graph, for every spec
 *    the cheapest input tilings, the cheapest spec per output tiling kept,
 *    then the cheapest root tiling and a walk back down;
 *  - PL_SELECT_GREEDY: the same without the repartition sub-cost;
 *  - PL_SELECT_RANDOM: a uniform choice among each operator's specs.
 * Cost(J, T1..Tn) is the paper's proxy in elements: repartition (the whole
 * input when J's input types differ from the producer's tiling; zero for
 * graph inputs), join (every function specification's input blocks) and
 * aggregation ((m-1) x size for an output type produced m times).
 *
 * Graphs that are not trees (a tensor read by several operators) follow
 * the paper's §4.5: every edge out of a multiply-consumed tensor is cut,
 * and the resulting trees are optimised one at a time in decreasing order
 * of size, each subject to the specs already fixed by earlier trees (a
 * tensor from an optimised tree enters like a graph input but its
 * repartition is charged; a tree whose root feeds operators already fixed
 * charges their repartitions when it picks its root tiling). With
 * opts->linear_paths the same cut is applied inside trees so that every
 * operator keeps at most one in-piece producer (its largest input): the
 * per-operator work drops to O(s * t). Each piece is optimal; the whole
 * plan need not be, so with several pieces dp also (1) lets a piece root
 * whose consumers are still open look one step ahead at them, (2) tries
 * the pieces producers-first and consumers-first besides the paper's
 * order and keeps the cheapest, and (3) finishes with single-operator
 * improvements. On a tree the result is the exact optimum. Graph inputs may be read by any number of operators.
 * Operators that no saved tensor depends on are not planned (planned == 0).
 * An operator that cannot be split p ways gets the specs of the largest
 * k < p it allows (pl_spec_enumerate; k = 1 always exists): it runs on
 * devices 0..k-1 and its output tiling has k blocks, so every graph that
 * plans on one device plans on any p; the cost model needs nothing new (a
 * k-block tiling differs from a p-block one and is charged as a
 * repartition, and the join counts every block a device reads). Where
 * every operator has exactly-p specs the plan is the paper's, unchanged.
 * EIN_ENOPLAN (naming the operator, its line and the most intervals each
 * index allows) remains for an operator with no spec at all.
 *
 * Tilings are compared in the DP through a 64-bit hash of their sorted
 * boxes; the sub-costs recorded in the plan are recomputed exactly.
 *
 * Ownership: *out is a new plan owned by the caller (pl_plan_free). */
#ifndef PL_OPTIMIZE_H
#define PL_OPTIMIZE_H

#include <stdint.h>

#include "common/base/ein_error.h"
#include "planner/pl_graph.h"
#include "planner/pl_spec.h"

typedef enum pl_selector {
    PL_SELECT_DP = 0,
    PL_SELECT_GREEDY,
    PL_SELECT_RANDOM,
} pl_selector;

typedef struct pl_choice {
    int planned;            /* 1 for every live operator */
    pl_spec spec;           /* the chosen spec; function spec i runs on device i
                             * (spec.nparts <= p: devices nparts..p-1 idle) */
    pl_tiling out_tiling;   /* the output tiling the spec induces */
    double repart, join, agg; /* its three sub-costs, in elements */
} pl_choice;

/* The dtype partial sums of a split contraction or reduction are moved
 * and aggregated in (--partials): PL_PARTIALS_F32, the accumulation dtype
 * (ein_dtype_accum: f16/bf16 results rounded once, as on one device), or
 * PL_PARTIALS_NATIVE, the tensor's own dtype (each partial rounded, then
 * every aggregation step: half the bytes of f32 for f16/bf16, as
 * NCCL-based systems move them). Log-sum-exp partials (split attention
 * keys) stay f32 either way; f32 and integer tensors are unaffected. */
typedef enum pl_partials {
    PL_PARTIALS_F32 = 0,
    PL_PARTIALS_NATIVE,
} pl_partials;

int pl_partials_parse(const char *s, pl_partials *out);   /* "f32", "native"; -1 else */
const char *pl_partials_name(pl_partials m);
/* The dtype in which node dtype `dt`'s partials under aggregation `agg`
 * are stored and moved (dt itself for EIN_AGG_NONE). */
ein_dtype pl_partial_dtype(ein_dtype dt, ein_agg agg, pl_partials m);

typedef struct pl_plan {
    int p;
    int nnodes;
    pl_selector selector;
    pl_partials partials;   /* what its aggregations move (set from the options) */
    pl_choice *nodes;       /* indexed by node id */
    double total;           /* sum of all sub-costs */
} pl_plan;

int pl_selector_parse(const char *s, pl_selector *out);
const char *pl_selector_name(pl_selector s);

typedef enum pl_objective {
    PL_OBJECTIVE_COMM = 0,  /* the paper's proxy: elements moved and read */
    PL_OBJECTIVE_TIME,      /* predicted seconds (below) */
} pl_objective;

typedef struct pl_plan_opts {
    int linear_paths;       /* cut trees into linear paths (see above) */
    /* PL_OBJECTIVE_TIME: the same Algorithm 1 with another Cost, in
     * seconds: a spec's join becomes its busiest device's time,
     * max(FLOPs / nparts / peak_flops, bytes of its input blocks / nparts /
     * hbm_bw), its aggregation the partials' bytes over p x net_bw, and a
     * repartition the tensor's bytes over p x net_bw (every device
     * receiving at once); both also pass twice through memory (slices,
     * then concatenation or aggregation) at p x hbm_bw. The rates come from the
     * caller (a topology and its calibration, coordinator/predict/co_sim.h); all
     * three must be > 0. */
    pl_objective objective;
    double peak_flops, hbm_bw, net_bw;
    /* > 0: a two-operand EINSUM's join also streams its input blocks at
     * this rate, added to its FLOPs' time (a CPU BLAS packs both
     * operands; the calibration's gemm-operands, co_calib.h); 0: not. */
    double gemm_operand_bw;
    /* Several hosts (PL_OBJECTIVE_TIME): devices d and e share a host when
     * d / host_gpus == e / host_gpus (host_gpus 0: one host). Devices are
     * numbered hosts x local, and spec i runs on device i, row-major with
     * the last index fastest: the innermost split lands inside a host.
     * The bytes of an aggregation or repartition over the H hosts its p
     * devices span are taken as spread evenly, (H-1)/H of them crossing
     * hosts at p x nic_bw and the rest inside at p x net_bw, whichever
     * takes longer. */
    int host_gpus;
    double nic_bw;
    /* Forced plans (baseline strategies, planner/pl_strategy.h): when set,
     * every operator takes, of its specs, the one `force` scores highest
     * (the first of equals), whatever the selector. */
    double (*force)(const void *ctx, const pl_graph *g, int node, const pl_index *idx,
                    int nidx, const int *counts);
    const void *force_ctx;
    pl_partials partials;   /* counted in the aggregation cost; copied to the plan */
} pl_plan_opts;

int pl_objective_parse(const char *s, pl_objective *out);

int pl_plan_make(const pl_graph *g, int p, pl_selector sel, uint64_t seed,
                 pl_plan **out, ein_error *err);
/* The same with options (NULL: defaults, as pl_plan_make). */
int pl_plan_make_opts(const pl_graph *g, int p, pl_selector sel, uint64_t seed,
                      const pl_plan_opts *opts, pl_plan **out, ein_error *err);
void pl_plan_free(pl_plan *plan);

/* Cost(J, T1..Tn) of node `node` using spec `s`, given the output tilings
 * of its producers (NULL for a graph input), partials in f32. The
 * aggregation is in elements of the node's dtype: a partial element
 * weighs size(pl_partial_dtype) / size(dtype). */
void pl_cost(const pl_graph *g, int node, const pl_spec *s,
             const pl_tiling *const *in_tilings, double *repart, double *join,
             double *agg);
/* The same with partials moved as `m` says. */
void pl_cost_partials(const pl_graph *g, int node, const pl_spec *s,
                      const pl_tiling *const *in_tilings, pl_partials m, double *repart,
                      double *join, double *agg);

#endif
