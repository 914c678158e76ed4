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
 * (recompose) atoms into the blocks the kernel reads. Graph inputs are
 * loaded directly in the blocks their consumers want. A saved tensor gets
 * the same exchange towards one site per distinct output block, then STORE.
 *
 * Ownership: on success *progs is a malloc'd array of `ndev` Programs, all
 * owned by the caller (co_programs_free). */
#ifndef CO_LOWER_H
#define CO_LOWER_H

#include <stdint.h>

#include "common/ein_error.h"
#include "common/ein_program.h"
#include "planner/pl_graph.h"
#include "planner/pl_optimize.h"
#include "exchange/xp_search.h"

typedef struct co_lower_opts {
    int ndev;
    /* Exchange bodies: with `search` and a topology, synthesised by
     * xp_search under search_opts; otherwise the naive program (simulated
     * on `topo`, if given, for the statistics). */
    const xp_topology *topo;
    int search;
    xp_search_opts search_opts;
    uint64_t seed;              /* for generated inputs */
    const char *const *input_path;  /* by node id: .npy path, or NULL to generate */
    const char *const *output_path; /* by node id: file STORE writes (saved nodes) */
} co_lower_opts;

typedef struct co_lower_stats {
    int ninstrs, ncopies, nexchanges;
    double copy_bytes;          /* bytes moved between devices */
    double naive_s, synth_s;    /* simulated exchange time: naive bodies, chosen bodies */
} co_lower_stats;

int co_lower(const pl_graph *g, const pl_plan *plan, const co_lower_opts *opts,
             ein_program ***progs, co_lower_stats *stats, ein_error *err);
void co_programs_free(ein_program **progs, int ndev);

/* Devices that store blocks of saved node `node` (a bitmask over the first
 * 64 devices), from the same rule co_lower uses. */
uint64_t co_output_devices(const pl_plan *plan, int node);

#endif
