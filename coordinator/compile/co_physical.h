/* coordinator/compile/co_physical.h — the physical plan: where every tuple runs and
 * how every exchange moves its blocks, as a value between the logical plan
 * and the per-device Programs (co_lower.h emits them from it).
 *
 * Tuple f (function specification f) of a planned node runs on device
 * place(v, f); today that is device f, and no two tuples of a node share a
 * device (asserted). For each operator input produced by another operator,
 * and for each saved operator's output, in the order co_lower emits them
 * (nodes in id order; a node's inputs in order, then its saved output),
 * co_physical_make builds one exchange: the preamble (the atoms of the
 * producer's partial blocks against the blocks the consumer needs, on
 * their devices; xp_atoms.h) and its body, the ExProg that moves them —
 * synthesised on the topology (xp_search, reused for an exchange identical
 * to an earlier one up to its atoms' labels) unless the exchange moves
 * nothing between devices or the schedule is naive. An operator input
 * whose consumer needs nothing of it has no exchange; graph inputs are
 * loaded in place, never exchanged.
 *
 * Ownership: *out is the caller's (co_physical_free), and owns every body,
 * box array and site array in it; tensor/consumer are node ids of the graph
 * it was made from. On failure nothing is returned: a negative EIN_E* code
 * with `err` filled ("exchange of 'T' for 'C': ..." for a body that cannot
 * be made).
 *
 * Determinism: with a work budget in search_opts (the default, cap_ms 0)
 * the value depends only on the graph, the plan and the options. */
#ifndef CO_PHYSICAL_H
#define CO_PHYSICAL_H

#include "common/ir/ein_box.h"
#include "common/base/ein_error.h"
#include "common/ir/ein_program.h"
#include "exchange/xp_program.h"
#include "exchange/xp_search.h"
#include "exchange/xp_topo.h"
#include "planner/pl_graph.h"
#include "planner/pl_optimize.h"

struct ein_progress;

/* Synthesised exchange bodies kept across physical plans (the plan search,
 * coordinator/compile/co_search.h, plans many candidates that share most
 * exchanges). A body depends on its preamble, the topology and the search
 * options, so one cache must only serve co_physical_make calls with the
 * same `topo` and `search_opts`; then a plan made with the cache is the
 * same as one made without. Allocate with calloc(1, sizeof(co_xcache)),
 * free with co_xcache_free (NULL is fine). Not thread-safe. */
typedef struct co_xcache {
    struct xcache *cache;
    int cap_cache, ncache;
} co_xcache;
void co_xcache_free(co_xcache *c);

typedef struct co_physical_opts {
    int ndev;
    /* Exchange bodies: with `search` and a topology, synthesised by
     * xp_search under search_opts; otherwise the naive program (simulated
     * on `topo`, if given, for the predicted times). */
    const xp_topology *topo;
    int search;
    xp_search_opts search_opts;     /* .chunks: the search may pick chunked bodies */
    /* K >= 2: every whole action of every body that moves data between
     * devices (searched or naive) is made a stream of K chunks (`[0..K-1/K]`)
     * before body_hook sees it (tests of the chunked lowering); 0 or 1:
     * the bodies as chosen. */
    int exchange_chunks;
    /* Optional: called with each exchange's body once chosen (`tensor` is
     * moved for `consumer`, or "save"); it may replace *body with another
     * program over the same preamble (IN and OUT in the same order) — a
     * test lowering a fixed body. The hook owns what it replaces. A
     * negative EIN_E* return (with `err` filled) stops co_physical_make. */
    int (*body_hook)(void *ctx, const char *tensor, const char *consumer, xp_program **body,
                     ein_error *err);
    void *body_ctx;
    struct ein_progress *progress;  /* NULL, or stepped with the nodes done (of nnodes) */
    co_xcache *xcache;              /* NULL, or bodies shared across calls (above) */
} co_physical_opts;

/* One exchange: node `tensor`'s partial blocks (over ein_agg_box of the
 * producer's spec aggregation) moved and aggregated into the `nneed`
 * blocks need[b] at device need_site[b]; the consumer reads want[b] (need[b]
 * itself, or for an LSE aggregation its data columns). */
typedef struct co_exchange {
    int tensor;                 /* producing node */
    int consumer;               /* consuming node, -1: the tensor is saved */
    int input;                  /* which input of `consumer` (0 when saved) */
    ein_dtype dtype;            /* of its blocks (the accumulation dtype of partials) */
    ein_agg agg;                /* the producer's aggregation */
    int nneed;
    ein_box *need, *want;       /* nneed each */
    int *need_site;             /* nneed */
    ein_box *atoms;             /* natoms: the preamble's atoms (IN .atom indexes them) */
    int natoms;
    /* The body: the preamble's IN and OUT (xp_preamble_make order) with the
     * chosen actions; passed xp_program_check. Chunked actions are kept as
     * streams (co_lower expands them). */
    xp_program *body;
    int local;                  /* nothing crosses devices: not searched */
    int reused;                 /* body copied from an identical earlier exchange */
    double naive_s, chosen_s;   /* predicted time of the naive and the chosen body
                                   (0 without a topology) */
} co_exchange;

typedef struct co_physical_stats {
    int nexchanges;
    int nlocal;                 /* exchanges moving nothing between devices: no search */
    int nsearched, nreused;     /* exchanges searched; copied from an identical one */
    int nchunked;               /* exchanges whose body moves chunks */
    double naive_s, synth_s;    /* predicted exchange time: naive bodies, chosen bodies */
    long search_steps;          /* candidates evaluated by the searches */
    double search_ms;           /* their wall-clock time (reports only) */
    int ncapped;                /* searches stopped by the wall-clock cap (not reproducible) */
} co_physical_stats;

typedef struct co_physical {
    int ndev, nnodes;
    int *place_at;              /* nnodes + 1: tuples of node v are place[place_at[v] ..
                                   place_at[v + 1]) (none for an unplanned node) */
    int *place;                 /* the device of each tuple */
    co_exchange *ex;            /* nex, in emission order */
    int nex;
    co_physical_stats st;
} co_physical;

int co_physical_make(const pl_graph *g, const pl_plan *plan, const co_physical_opts *o,
                     co_physical **out, ein_error *err);
void co_physical_free(co_physical *ph);

/* The device of tuple f of node v (assert: planned, f in range). */
int co_physical_place(const co_physical *ph, int v, int f);

/* Name of exchange e's consumer in messages and listings: the consumer
 * node's name, or "save". Owned by `g`. */
const char *co_exchange_consumer_name(const pl_graph *g, const co_exchange *e);

/* The dtype node v's kernel outputs and exchange buffers are in: when its
 * spec aggregates partials, pl_partial_dtype under the plan's partials
 * (the accumulation dtype with f32 partials, cast to the node's dtype once
 * aggregated; the node's own with native ones, LSE excepted), else the
 * node's own. */
ein_dtype co_partial_dtype(const pl_graph *g, const pl_plan *plan, int v);

/* Checker (common/base/ein_invariant.h; asserted at co_lower's entry): 1 if ph
 * is a consistent physical plan of g under plan, else 0. It holds when
 * ph has plan's devices and g's nodes; a planned node has its spec's
 * tuples, an unplanned one none, each on a device in range, no two of a
 * node on one device; every exchange moves a node that has tuples, for
 * "save" (input 0) or for a consumer whose input it is, in a valid dtype,
 * with a body, its needed blocks on devices in range, each containing the
 * block the consumer reads. Allocates nothing; O(tuples x devices +
 * needed blocks). */
int co_physical_ok(const co_physical *ph, const pl_graph *g, const pl_plan *plan);

#endif
