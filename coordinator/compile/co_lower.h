/* coordinator/compile/co_lower.h — lowering a physical plan (co_physical.h) to one
 * Program per device: it only emits what the physical plan decided.
 *
 * Function specification i of every operator runs on the device the
 * physical plan places it on (device i); an operator with fewer function
 * specifications than devices (too small to split p ways) leaves the other
 * devices idle for it, its output has as many blocks as it has distinct
 * output boxes, and everything below works on those blocks and their sites
 * as on any other. For each operator input produced by another operator,
 * the tensor's exchange (its preamble and body, from the physical plan) is
 * lowered: SLICE (decompose) producer blocks into atoms,
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
 * Every buffer is appended at the end of its device's segment: placing
 * buffers by liveness (co_memplan.h), fusing kernels (co_fuse.h),
 * validating the Programs and checking their size are the next steps of
 * the pipeline (co_pipeline.h: co_step_fuse, co_step_memplan,
 * co_step_validate), not co_lower's.
 * The Programs depend only on the graph, the plans and the options.
 *
 * Ownership: on success *progs is a malloc'd array of `ndev` Programs, all
 * owned by the caller (co_programs_free). On failure nothing is returned:
 * an internal error or lack of memory.
 *
 * Cost: linear in the operators and the exchange bodies' actions. `ph` must
 * have been made from the same graph and plan (asserted). */
#ifndef CO_LOWER_H
#define CO_LOWER_H

#include <stdint.h>

#include "common/base/ein_error.h"
#include "common/ir/ein_program.h"
#include "planner/pl_graph.h"
#include "planner/pl_optimize.h"
#include "coordinator/compile/co_physical.h"

/* Where a graph input is read from (by node id; path NULL: generated from
 * the seed, or input_path decides). Filled by einrun's --input and by
 * co_weights_bind (.safetensors tensors: RAW at their byte offset). */
typedef struct co_input_src {
    const char *path;
    ein_load_format format;
    uint64_t offset;            /* RAW: byte offset of element 0 in path */
} co_input_src;

typedef struct co_lower_opts {
    uint64_t seed;              /* for generated inputs */
    const char *const *input_path;  /* by node id: .npy path, or NULL to generate */
    const char *const *output_path; /* by node id: file STORE writes (saved nodes);
                                       NULL (or a NULL entry): "<name>.npy" */
    const co_input_src *input_src;  /* by node id, or NULL; an entry with a path
                                       overrides input_path */
    long long max_program_bytes;    /* a device's PROGRAM message; <= 0: EIN_MSG_MAX_BYTES.
                                       Past it co_step_validate fails with EIN_ELIMIT */
    struct ein_progress *progress;  /* NULL, or stepped with the nodes lowered (of nnodes) */
    int no_reuse;                   /* co_step_memplan: 1: every buffer in a place of its
                                       own for the whole run (debugging); 0: buffers placed
                                       by liveness (co_memplan.h), the default */
    const struct co_memplan_opts *memplan; /* co_step_memplan; NULL: co_memplan's defaults */
    int no_fuse;                    /* co_step_fuse: 0: consecutive kernels fused
                                       (co_fuse.h) before the memory plan, the default;
                                       1: not; -1: the EIN_FUSE knob was malformed (the
                                       step fails, naming it) */
} co_lower_opts;

/* What co_lower emitted, and (copied from the physical plan's
 * co_physical_stats) what its exchanges are. */
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

int co_lower(const pl_graph *g, const pl_plan *plan, const co_physical *ph,
             const co_lower_opts *opts, ein_program ***progs, co_lower_stats *stats,
             ein_error *err);
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
