/* coordinator/co_lower.h — lowering a logical plan to one Program per device.
 *
 * Function specification i of every operator runs on device i; an operator
 * with fewer function specifications than devices (too small to split p
 * ways) leaves the other devices idle for it, its output has as many
 * blocks as it has distinct output boxes, and everything below works on
 * those blocks and their sites as on any other. For each
 * operator input produced by another operator, the tensor's exchange is
 * built in three steps: the preamble (atoms of the producer's partial
 * blocks against the blocks this operator needs), the program body (the
 * naive one, or one synthesised on the topology), and its lowering: SLICE (decompose) producer blocks into atoms,
 * NOTIFY + COPY for each transfer (hop by hop through relays, to every
 * destination of a multicast), AGG for each aggregation, CONCAT
 * (recompose) atoms into the blocks the kernel reads. A chunked action
 * moves a range of the atom's rows (its first interval; docs/exprog.md):
 * its COPY and AGG work on views, buffers over those rows of the atom's
 * buffer at the matching byte offset (no extra copy), and whatever reads
 * the whole atom depends on every chunk's writer. Rows a site already
 * holds are never copied or aggregated there again. Graph inputs are
 * loaded directly in the blocks their consumers want. A saved tensor gets
 * the same exchange towards one site per distinct output block, then STORE.
 * An action whose aggregate no OUT contains feeds no OUT and is not lowered.
 * With a work budget in search_opts (the default) the Programs depend only
 * on the graph, the plan and the options, never on the machine's load.
 *
 * Ownership: on success *progs is a malloc'd array of `ndev` Programs, all
 * owned by the caller (co_programs_free). On failure nothing is returned
 * and the code says whose fault it is: EIN_ELIMIT when a device's Program
 * would not fit in one PROGRAM message (the input is too large; einrun
 * exits 2), anything else an internal error or lack of memory.
 *
 * Cost: linear in the operators, plus one exchange search per distinct
 * exchange (an exchange that moves nothing between devices is not searched;
 * one identical to an earlier one, up to its atoms' labels, reuses that
 * body; see co_lower_stats). */
#ifndef CO_LOWER_H
#define CO_LOWER_H

#include <stdint.h>

#include "common/ein_error.h"
#include "common/ein_program.h"
#include "planner/pl_graph.h"
#include "planner/pl_optimize.h"
#include "exchange/xp_search.h"

/* Where a graph input is read from (by node id; path NULL: generated from
 * the seed, or input_path decides). Filled by einrun's --input and by
 * co_weights_bind (.safetensors tensors: RAW at their byte offset). */
typedef struct co_input_src {
    const char *path;
    ein_load_format format;
    uint64_t offset;            /* RAW: byte offset of element 0 in path */
} co_input_src;

/* Synthesised exchange bodies kept across lowerings (the plan search,
 * coordinator/co_search.h, lowers many candidate plans that share most
 * exchanges). A body depends on its preamble, the topology and the search
 * options, so one cache must only serve lowerings with the same `topo`
 * and `search_opts`; then a lowering with the cache gives the same
 * Programs as one without. Allocate with calloc(1, sizeof(co_xcache)),
 * free with co_xcache_free (NULL is fine). Not thread-safe. */
typedef struct co_xcache {
    struct xcache *cache;
    int cap_cache, ncache;
} co_xcache;
void co_xcache_free(co_xcache *c);

typedef struct co_lower_opts {
    int ndev;
    /* Exchange bodies: with `search` and a topology, synthesised by
     * xp_search under search_opts; otherwise the naive program (simulated
     * on `topo`, if given, for the statistics). */
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
     * test lowering a fixed body, a tool printing the bodies. The hook
     * owns what it replaces. A negative EIN_E* return (with `err` filled)
     * stops the lowering. */
    int (*body_hook)(void *ctx, const char *tensor, const char *consumer, xp_program **body,
                     ein_error *err);
    void *body_ctx;
    uint64_t seed;              /* for generated inputs */
    const char *const *input_path;  /* by node id: .npy path, or NULL to generate */
    const char *const *output_path; /* by node id: file STORE writes (saved nodes);
                                       NULL (or a NULL entry): "<name>.npy" */
    const co_input_src *input_src;  /* by node id, or NULL; an entry with a path
                                       overrides input_path */
    long long max_program_bytes;    /* a device's PROGRAM message; <= 0: EIN_MSG_MAX_BYTES.
                                       Past it co_lower fails with EIN_ELIMIT */
    struct ein_progress *progress;  /* NULL, or stepped with the nodes lowered (of nnodes) */
    co_xcache *xcache;              /* NULL, or bodies shared across lowerings (above) */
} co_lower_opts;

typedef struct co_lower_stats {
    int ninstrs, ncopies, nexchanges;
    int nlocal;                 /* exchanges moving nothing between devices: no search */
    int nsearched, nreused;     /* exchanges searched; copied from an identical one */
    int nchunked;               /* exchanges whose body moves chunks */
    double copy_bytes;          /* bytes moved between devices */
    double naive_s, synth_s;    /* simulated exchange time: naive bodies, chosen bodies */
    long search_steps;          /* candidates evaluated by the searches */
    double search_ms;           /* their wall-clock time (reports only) */
    int ncapped;                /* searches stopped by the wall-clock cap (not reproducible) */
} co_lower_stats;

int co_lower(const pl_graph *g, const pl_plan *plan, const co_lower_opts *opts,
             ein_program ***progs, co_lower_stats *stats, ein_error *err);
void co_programs_free(ein_program **progs, int ndev);

/* The value of --exchange-chunks / $EIN_EXCHANGE_CHUNKS: "auto" ->
 * EIN_EXCHANGE_CHUNKS_AUTO (-1), "off" -> 1, a count K from 1 to
 * XP_CHUNKS_MAX -> K (1: off). EIN_EINVAL with a message otherwise. */
int co_exchange_chunks_parse(const char *text, int *chunks, ein_error *err);

/* Devices that store blocks of saved node `node` (a bitmask over the first
 * 64 devices), from the same rule co_lower uses (a saved graph input is cut
 * along its first axis over the first min(ndev, extent) devices). */
uint64_t co_output_devices(const pl_graph *g, const pl_plan *plan, int node);

#endif
