/* planner/rewrite/pl_rewrite.h — graph rewriting by equality saturation
 * (TENSAT, shared/PAPER_NOTES.md §7), the optional first stage before the
 * decomposition planner. See docs/rewrite.md.
 *
 * pl_rewrite() loads the rules (S-expressions under planner/rewrite/rules/),
 * puts `in` into an e-graph, applies every rule until saturation or a limit
 * (iterations, e-nodes, work; the reason is in the stats), extracts the
 * cheapest equivalent graph under a roofline cost and returns it as a new
 * graph in *out (caller frees with pl_graph_free). `in` is not modified.
 * Inputs keep their names and order; saved outputs keep their names.
 * On error returns a negative EIN_E* code, fills `err`, *out untouched. */
#ifndef PL_REWRITE_H
#define PL_REWRITE_H

#include <stddef.h>
#include <stdio.h>

#include "planner/pl_graph.h"
#include "planner/rewrite/rw_rules.h"

typedef struct pl_rewrite_opts {
    const char *rules_path;     /* a .rules file or a folder of them; NULL: the
                                   built-in folder PL_REWRITE_RULES_DIR */
    const char *const *weights; /* NULL-terminated names of the inputs that are
                                   weights (weight-only subgraphs are free) */
    int iter_limit;             /* 0: 30 */
    int node_limit;             /* 0: 100000 live e-nodes */
    long work_limit;            /* saturation work: e-classes scanned plus matches
                                   found, summed over the rules searched; 0:
                                   PL_REWRITE_DEFAULT_WORK. Work, not time, so
                                   the result never depends on the machine's load */
    int k_multi;                /* iterations with multi-pattern rules; 0: 1;
                                   negative: none */
    int match_limit;            /* backoff: matches before a rule is banned; 0: 1000 */
    int ban_length;             /* backoff: iterations banned (doubles); 0: 5 */
    /* Roofline cost of one operator: max(flops/peak, bytes/hbm) + launch.
     * 0 takes the H100 figures (989e12 FLOP/s dense f16, 3.35e12 B/s) and
     * no launch overhead; hbm_bw < 0 means infinite bandwidth (pure FLOPs). */
    double peak_flops;
    double hbm_bw;
    double launch_s;
    int slice_cost;             /* 1: slices cost their bytes; 0: views, free */
    int ilp;                    /* also extract with an ILP (CBC); EIN_EUNSUPPORTED
                                   when built without CBC */
    double ilp_time_s;          /* solver time limit; 0: 1 s */
    int prefer_new;             /* for tests: extract the newest usable e-node of
                                   every class instead of the cheapest, so that
                                   every rewrite's result is what runs */
} pl_rewrite_opts;

typedef enum pl_rewrite_stop {
    PL_RW_SATURATED = 0,
    PL_RW_ITER_LIMIT,
    PL_RW_NODE_LIMIT,
    PL_RW_WORK_LIMIT,
} pl_rewrite_stop;

#define PL_REWRITE_DEFAULT_WORK 20000000L

typedef struct pl_rewrite_stats {
    pl_rewrite_stop stop;
    int iterations;
    long work;                  /* saturation work spent (see work_limit) */
    int nrules;
    int enodes, eclasses;       /* live e-nodes and classes at the end */
    long applied;               /* rule applications that changed the e-graph */
    long rejected;              /* targets that failed their shape check */
    int blacklisted;            /* e-nodes dropped by the cycle filter */
    int ilp_optimal;            /* the ILP proved its solution optimal */
    int ilp_improved;           /* the ILP's choice beat greedy + local search */
    double saturate_s, extract_s;
    double cost_before, cost_after;   /* seconds, roofline, per run */
    double flops_before, flops_after; /* run-time FLOPs (weight-only excluded) */
} pl_rewrite_stats;

const char *pl_rewrite_stop_name(pl_rewrite_stop s);

int pl_rewrite(const pl_graph *in, const pl_rewrite_opts *o, pl_graph **out,
               pl_rewrite_stats *st, ein_error *err);

/* Cost of a graph under o's roofline (weights as in o): seconds and FLOPs
 * of everything that is not weight-only. */
int pl_rewrite_graph_cost(const pl_graph *g, const pl_rewrite_opts *o, double *seconds,
                          double *flops, ein_error *err);

/* The expression computing node `id` down to the inputs, as text: a
 * matmul is "(A B)", any other operator "(op X ...)"; e.g. the order of a
 * chain, "((M1 M2) (M3 M4))". Truncated with "..." to fit `len`. */
int pl_rewrite_expr(const pl_graph *g, int id, char *buf, size_t len);

/* "wq,wk,wv" (ein_compile_options.rewrite_weights) into a NULL-terminated
 * array for pl_rewrite_opts.weights, freed with pl_rewrite_weights_free.
 * (The front ends' report of a rewrite: ein_fe_print_rewrite, coordinator/ein_frontend.h.) */
int pl_rewrite_weights_parse(const char *list, char ***out, ein_error *err);
void pl_rewrite_weights_free(char **w);

/* The rule sets (pl_rw_rules_*): planner/rewrite/rw_rules.h. */

#endif
