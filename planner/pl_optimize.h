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
 * Version 1 plans trees: an intermediate tensor read by two operators is
 * refused with EIN_EUNSUPPORTED (the paper's cut rule comes with the planner
 * issue). Graph inputs may be read by any number of operators. Operators
 * that no saved tensor depends on are not planned (planned == 0).
 *
 * Ownership: *out is a new plan owned by the caller (pl_plan_free). */
#ifndef PL_OPTIMIZE_H
#define PL_OPTIMIZE_H

#include <stdint.h>

#include "common/ein_error.h"
#include "planner/pl_graph.h"
#include "planner/pl_spec.h"

typedef enum pl_selector {
    PL_SELECT_DP = 0,
    PL_SELECT_GREEDY,
    PL_SELECT_RANDOM,
} pl_selector;

typedef struct pl_choice {
    int planned;            /* 1 for every live operator */
    pl_spec spec;           /* the chosen spec; function spec i runs on device i */
    pl_tiling out_tiling;   /* the output tiling the spec induces */
    double repart, join, agg; /* its three sub-costs, in elements */
} pl_choice;

typedef struct pl_plan {
    int p;
    int nnodes;
    pl_selector selector;
    pl_choice *nodes;       /* indexed by node id */
    double total;           /* sum of all sub-costs */
} pl_plan;

int pl_selector_parse(const char *s, pl_selector *out);
const char *pl_selector_name(pl_selector s);

int pl_plan_make(const pl_graph *g, int p, pl_selector sel, uint64_t seed,
                 pl_plan **out, ein_error *err);
void pl_plan_free(pl_plan *plan);

/* Cost(J, T1..Tn) of node `node` using spec `s`, given the output tilings
 * of its producers (NULL for a graph input). */
void pl_cost(const pl_graph *g, int node, const pl_spec *s,
             const pl_tiling *const *in_tilings, double *repart, double *join,
             double *agg);

#endif
