/* coordinator/compile/co_fuse.h — fuse consecutive kernels of one device
 * (issue 33): fewer launches and fewer passes over memory where a LLaMA
 * block spends time outside its GEMMs and attention.
 *
 * Runs on the lowered Programs (co_lower.h), before the memory planner.
 * Fusion happens here rather than in the graph because here the pair is
 * known to sit on one device with matching blocks: the planner partitions
 * and exchanges the unfused operators with their own join-agg specs, and
 * whatever way it cut them, a pair is fused only where the lowering put
 * both halves on the same device over the same rows (docs/design.md,
 * "Kernel fusion").
 *
 * Two patterns, each replacing two KERNEL instructions by one:
 *   - swiglu: t = silu(g); y = t * u (or u * t), where only that multiply
 *     reads t and g, u, t and y have one box (no broadcasting) and t has
 *     y's dtype -> y = swiglu(g, u). t's buffer is left unused, placed on
 *     y's bytes (an alias of y) so that it costs nothing.
 *   - add_rmsnorm: h = a + b; n = rmsnorm(h, w), where a, b and h have one
 *     box and h and n one dtype -> one kernel writing a new buffer of box
 *     [0, 2) x h's box whose halves are h and n (both buffers are placed
 *     on those halves, as aliases, so every other reader of h and n reads
 *     them where they were).
 * Only buffers no other buffer overlaps take part, both instructions must
 * run in the same entry points, and the fused instruction takes the place
 * of the first of the two when the second's other dependencies all come
 * before the first, else of the second when nothing between the two
 * depends on the first; otherwise the pair stays unfused (the DAG, the
 * emission order and the peers' acknowledgements stay valid). A peer COPY
 * of a buffer moved onto a fused output gets its new peer_offset.
 *
 * Fused kernels compute bit for bit what the pair computes on CPU devices
 * (kernels/kn_cpu.h), so a run's outputs do not change; the Programs do.
 * Deterministic: the result depends only on the Programs.
 *
 * Ownership: the Programs stay the caller's and are rewritten in place
 * (instructions removed and renumbered, buffers added). On failure
 * (EIN_ENOMEM) they may be half rewritten and must be freed, not run. */
#ifndef CO_FUSE_H
#define CO_FUSE_H

#include "common/base/ein_error.h"
#include "common/ir/ein_program.h"

typedef struct co_fuse_stats {
    int nswiglu;        /* silu + mul pairs fused */
    int nadd_rmsnorm;   /* add + rmsnorm pairs fused */
    int nskipped;       /* pairs that matched but stayed unfused (placement) */
} co_fuse_stats;

/* Fuse in the `ndev` Programs; *st (may be NULL) gets the counts, summed
 * over the devices. 0 or EIN_ENOMEM. */
int co_fuse(ein_program **progs, int ndev, co_fuse_stats *st, ein_error *err);

/* The EIN_FUSE knob: *on = 1 unless it is "0"; a value other than 0 or 1
 * is EIN_EINVAL naming it. */
int co_fuse_knob(int *on, ein_error *err);

#endif
