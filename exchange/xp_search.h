/* exchange/xp_search.h — synthesis of exchange program bodies by search.
 *
 * xp_search starts from a preamble (IN, OUT, PARTITIONS; any actions it
 * has are dropped) and returns a valid program at least as fast as the
 * naive one on topology `t`:
 *   1. membership: size-declared partitions get members by locality (the
 *      free sites already holding most of the bytes they need), then
 *      pairwise swaps of members between partitions while the naive
 *      program's simulated time improves;
 *   2. start: besides the naive program, a structured one — per OUT
 *      aggregate, copies outside its sites go to the best-connected one,
 *      then its sites merge pairwise like recursive doubling, pairing
 *      blocks of sites over the fastest routes (on the DGX-V100 this is
 *      the paper's Ex. 5.3 program); several tie-breaking variants, the
 *      fastest valid one kept if faster than naive;
 *   2b. with opts.chunks: chunked starts — per OUT aggregate, rings (as
 *      many as the links allow, in proportion to their bandwidth), a
 *      double binary tree and a direct reduce-scatter + all-gather, each
 *      cut into one chunk per target and pipelined into a stream of 1, 2,
 *      4, ... 64 chunks (the depth the α-β simulator finds fastest; deeper
 *      is tried only while it helps, and while the generator's work
 *      stays within a cap of its own); the fastest start is the best
 *      program so far (so the result is never slower than any of these
 *      baselines), but the local search goes on from the fastest
 *      whole-atom start; on machines of several hosts the hierarchical
 *      body (XP_BASE_HIER) comes first, at every depth within its work
 *      share, and above 64 sites the flat ring is not tried;
 *   3. body: starting from the better of naive and structured, apply the guarded
 *      transformations of §5.4 — relay introduction / elimination, source
 *      substitution, aggregation pullup (X@r->s, Y@r->s => X+Y@r->s) and
 *      pushdown, multicast fusion / fission, partial local aggregation,
 *      deletion — to a random action chosen by a seeded generator; every
 *      candidate is checked for validity (Def. 5.5) and costed by the
 *      simulator; a candidate no slower than the current one replaces it,
 *      and the best program seen is kept.
 * The budget counts work, not time: the sequence of candidates, and where
 * it stops (after max_work units of work — a candidate costs one unit per
 * action, what simulating it costs —, max_steps candidates, or patience
 * candidates without a gain), depend only on the preamble, the topology
 * and the seed, so the same inputs give the same program on an idle and on
 * a loaded machine.
 * Every action of a candidate moves part of some OUT aggregate (a set no
 * OUT contains can never be used, and mixes blocks once lowered), so the
 * result needs no clean-up to be lowerable. A wall-clock cap (cap_ms) is
 * only a safety net: when it fires the result depends on the machine's
 * speed, and the stats say so (capped = 1, stop = "cap").
 *
 * Ownership: *out is a new program (xp_program_free). On error returns a
 * negative EIN_E* code and fills `err`. */
#ifndef XP_SEARCH_H
#define XP_SEARCH_H

#include <stdint.h>

#include "common/base/ein_error.h"
#include "exchange/xp_program.h"
#include "exchange/xp_topo.h"

typedef struct xp_search_opts {
    long max_work;       /* the budget: actions of the candidates evaluated; <= 0: none */
    long max_steps;      /* candidates to evaluate; <= 0: none */
    long patience;       /* stop after this many candidates without gain; <= 0: none */
    double cap_ms;       /* wall-clock safety cap; <= 0: none (reported when it fires) */
    uint64_t seed;
    int chunks;          /* 1: also start from chunked, pipelined bodies (rings,
                            trees, direct; pipeline depth chosen on the
                            simulator), so the result may move chunks;
                            0 (default): whole atoms only, as the lowering
                            executes today */
} xp_search_opts;

/* The default work takes 10-70 ms of CPU for 8-GPU preambles of 8 to 64
 * atoms and 8-GPU collectives, and under 1 s for 72-GPU collectives of up
 * to 5,184 atoms (the start phases have work caps of their own;
 * docs/exprog.md); the cap is far above that. */
#define XP_SEARCH_DEFAULT_WORK 30000
#define XP_SEARCH_DEFAULT_STEPS 20000
#define XP_SEARCH_DEFAULT_PATIENCE 3000
#define XP_SEARCH_DEFAULT_CAP_MS 30000.0

typedef struct xp_search_stats {
    double naive_s;      /* the naive program's makespan, same membership */
    double best_s;
    long steps, valid, accepted, improved;
    long work;           /* units spent (see max_work) */
    double elapsed_ms;   /* wall-clock time, for reports only */
    int capped;          /* 1: the wall-clock cap stopped the search */
    const char *stop;    /* why it stopped: "work", "steps", "patience" or "cap" (static) */
} xp_search_stats;

void xp_search_opts_default(xp_search_opts *o);
int xp_search(const xp_program *preamble, const xp_topology *t, const xp_search_opts *o,
              xp_program **out, xp_search_stats *stats, ein_error *err);

/* The naive program for a preamble (membership chosen as in step 1), and
 * its makespan. */
int xp_search_naive(const xp_program *preamble, const xp_topology *t, xp_program **out,
                    double *makespan, ein_error *err);

#endif
