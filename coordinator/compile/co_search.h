/* coordinator/compile/co_search.h — plan search by predicted time (issue 21).
 *
 * co_plan_search returns the fastest plan it finds for g on p devices, by
 * the plan simulator (co_plan_predict, co_pipeline.h: the lowering einrun does, exchange
 * bodies synthesised on `topo`, then co_sim_run with `cal`), among the
 * plans that fit in the topology's memory:
 *  - seeds: the DP plan under the time cost and under the comm cost, every
 *    named strategy that applies (planner/pl_strategy.h: megatron,
 *    ulysses, sequence, data), a "<seed>+rep" variant of each of these
 *    with replicated specs (planner/pl_spec.h: the operators it runs on
 *    fewer than p devices and their replicable producers, with their
 *    twins) and `nrandom` random plans (those paid from the budget, while
 *    it lasts); every seed but a random one is simulated, so the result is
 *    never predicted slower than any of them; a replicable operator's
 *    replicated spec is one more of its requests, which the moves pick
 *    like any other;
 *  - moves from the current plan, each simulated: change one operator's
 *    spec; copy a seed's specs onto a connected region of operators that
 *    share one split (every token-split operator between two attentions
 *    becomes head-split in one move); change a producer and its consumer
 *    together so that the edge between them needs no repartition. A move
 *    that is slower is kept with probability exp(-alpha x slowdown)
 *    (Metropolis, as FlexFlow), the fastest plan seen is returned.
 * Identical blocks (a model's layers): operators whose node, kernel,
 * shapes and input offsets repeat with a period of the node ids share one
 * choice in the moves, so the search space is one block's. With at least
 * CO_SEARCH_PREFIX_BLOCKS blocks (and without opts.whole) the whole search
 * (seeds, moves) runs on a prefix of the graph: what comes before the
 * second block and one more block (the boundary between two blocks is in
 * it); the plan takes the prefix's choices and every later block those of
 * the prefix's last block (a node of that block saved only for the next
 * block, its output, those of its twin in the block before); operators
 * after the last block take the time DP's, replicated where they run on
 * fewer than p devices and read a replicated operator. The prefix is simulated, never the whole graph: the predicted
 * times and the memory check are the prefix's.
 * Evaluation cost: the synthesised exchange bodies are kept across
 * candidates (co_xcache, keyed by preamble for this topology and search
 * options), so a move pays only for the exchanges it creates; the
 * simulation itself is cheap beside the synthesis.
 * Phases (co_search.c): seeds (seeds_make, seeds_simulate), memo
 * (memo_find, memo_add: a candidate simulated before costs nothing),
 * moves (moves_project, moves_run), report (the result's times and plan);
 * each candidate goes through the compile pipeline (co_plan_predict).
 * Deterministic: the budget counts work (operators lowered and
 * simulated, summed over candidates), never time, and every random
 * choice comes from `seed`.
 *
 * Ownership: *out is a new plan (pl_plan_free); *rep (optional) is filled
 * and its candidate list freed with co_search_report_free. Failure: a
 * negative EIN_E* with `err` filled; no plan at all fits in memory is not
 * a failure (*out is the fastest seed, rep->fits = 0). */
#ifndef CO_SEARCH_H
#define CO_SEARCH_H

#include <stdint.h>

#include "common/base/ein_error.h"
#include "coordinator/predict/co_calib.h"
#include "exchange/xp_topo.h"
#include "planner/pl_graph.h"
#include "planner/pl_optimize.h"

#define CO_SEARCH_PREFIX_BLOCKS 4 /* blocks from which the search runs on a prefix */
#define CO_SEARCH_WORK_DEFAULT 12000 /* operators x devices simulated beyond the seeds */

typedef struct co_search_opts {
    long work;          /* budget beyond the seeds, in operators x devices simulated; 0: default,
                           < 0: seeds only */
    uint64_t seed;      /* moves and random seeds */
    int nrandom;        /* random seed plans (paid from the budget); < 0: none, 0: 2 */
    double alpha;       /* Metropolis; 0: 20 */
    int record;         /* keep every candidate in the report */
    int whole;          /* search the whole graph even when its blocks repeat (no prefix) */
} co_search_opts;

typedef struct co_search_cand {
    char what[96];      /* "seed dp-time", "move op wq_0", ... */
    double time;        /* predicted s; INFINITY when it does not fit */
} co_search_cand;

typedef struct co_search_report {
    long work, budget;  /* spent, allowed beyond the seeds */
    int nevals, nseeds, naccepted;
    int period;         /* node-id period of the repeated blocks (0: none) */
    int nclasses;       /* choices the moves change */
    double best_time;   /* predicted s of the result */
    double best_seed_time;
    char best_from[96]; /* which candidate the result is */
    char best_seed[48];
    int fits;           /* the result fits in memory */
    co_search_cand *cands;  /* with opts.record */
    int ncands;
    int prefix_nodes;   /* > 0: searched on the graph's first prefix_nodes nodes (the
                           blocks before the first repeated one and two blocks), the
                           times are that prefix's, its choices reused for every block */
    int nblocks;        /* repeated blocks found (0: none) */
} co_search_report;

int co_plan_search(const pl_graph *g, int p, const pl_plan_opts *base, const xp_topology *topo,
                   const co_calib *cal, const co_search_opts *so, pl_plan **out,
                   co_search_report *rep, ein_error *err);
void co_search_report_free(co_search_report *r);

#endif
