/* coordinator/compile/co_memplan.h — place the buffers of lowered Programs by
 * liveness: a buffer's bytes are reused once its last reader is done.
 *
 * The lowering (co_lower.h) appends every buffer at the end of its device's
 * segment, so a device holds every tensor of the run at once. co_memplan()
 * rewrites those Programs in place so that buffers whose lives do not
 * overlap share bytes, as XLA's buffer assignment and TVM's memory planner
 * do, and adds the dependencies that make the sharing safe in the
 * out-of-order DAG the worker runs.
 *
 * What it reads. A root is a buffer not inside another's bytes; a buffer
 * inside a root's bytes (a view over rows of an exchange buffer) is an
 * alias and moves with its root. Buffers that overlap without one
 * containing the other are refused (EIN_EINVAL). A root's life is the
 * instructions, in array order (the lowering's order, a topological order
 * of the DAG), that read or write it or one of its aliases: [first, last].
 *
 * What is never reused (the "pinned" region, at the bottom of the segment,
 * each root in a place of its own): a root any LOAD writes (inputs and
 * weights: they are loaded in a session's first run and stay for every
 * later run), and a root a peer copies from whose copy cannot be
 * acknowledged (below). Outputs need nothing special: STORE writes them to
 * their file during the run, and STORE is a reader like any other.
 * Anything that must survive from one run to the next without a LOAD (a
 * state tensor written in place) must be pinned by extending this rule.
 *
 * The other roots are placed in the region above, in order of `first`,
 * each at the best-fitting free range (the smallest that fits; ties: the
 * lowest offset) among the bytes of roots released before its `first`, or
 * at the top of the region (a linear scan with best fit; every place is
 * EIN_BUFFER_ALIGN-aligned). A root is released `delay_local` instructions
 * after its `last` (`delay_remote` when a peer copies from it): bytes taken
 * the moment they are free make the new writer wait for an instruction
 * that may still run, or for a peer's copy, and the DAG loses overlap.
 * Measured with einplan --simulate (32 blocks of LLaMA 3 8B, 1x8K, bf16,
 * dgx-h100, P = 8; 75.7 ms and 24.9 GB per device without reuse): no
 * delay, 148 ms and 5.15 GB; 20 / 400 (the defaults), 79.1 ms and 5.67 GB;
 * 20 / 1000, 78.6 ms and 6.08 GB.
 *
 * Dependencies. When root B takes bytes that root A held before (A's last
 * < B's first), every instruction that writes B (or an alias of B), and
 * B's first user, depends on every instruction that used A (or an alias):
 * the worker runs any runnable instruction, so array order alone would not
 * keep B's writer behind A's last reader. Only the latest holders of each
 * byte range are named; older ones are ordered before them already.
 * A peer reads A too when a COPY on device e names A (or an alias) as its
 * peer_buf: nothing on A's device knows when that copy is done. The planner
 * then adds an acknowledgement: on e, right after the COPY, a NOTIFY of the
 * COPY's dst back to A's device (it depends on the COPY alone); on A's
 * device, right before B's first user, a WAIT for that READY (EIN_I_WAIT),
 * on which B's writers depend. These are added only where A's bytes are
 * reused. A READY is keyed by (device, buffer), so an acknowledgement whose
 * key another COPY, WAIT or NOTIFY between the two devices already uses
 * would be ambiguous: such an A is pinned instead (counted in `nkept`).
 * The acknowledgement cannot deadlock when, as co_lower emits them, a
 * NOTIFY and the peer's COPY of it are appended one after the other: the
 * emission order stays a topological order of every device's DAG and the
 * READY messages between them.
 *
 * COPYs that read a moved buffer get its new peer_offset. segment_bytes
 * becomes the planned size; unplanned_bytes keeps the size before.
 *
 * Ownership: the Programs stay the caller's; instructions added are owned
 * by them. On failure (EIN_EINVAL as above, EIN_ENOMEM) the Programs may be
 * half rewritten and must be freed, not run. Deterministic: the result
 * depends only on the Programs. Cost: O(buffers x free ranges + added
 * dependencies) per device. */
#ifndef CO_MEMPLAN_H
#define CO_MEMPLAN_H

#include <stdint.h>

#include "common/base/ein_error.h"
#include "common/ir/ein_program.h"

typedef struct co_memplan_dev {
    uint64_t before;    /* segment with every root in a place of its own */
    uint64_t after;     /* segment as planned */
    uint64_t pinned;    /* of which never reused (loaded, or kept for a peer) */
    uint64_t live_peak; /* most bytes of roots alive at one instruction (a lower
                           bound for `after`) */
    int live_peak_at;   /* that instruction (original numbering), -1: none */
    int nwaits;         /* acknowledgements this device waits for */
    int nkept;          /* roots pinned because a peer's read of them could not
                           be acknowledged */
} co_memplan_dev;

#define CO_MEMPLAN_DELAY_LOCAL 20
#define CO_MEMPLAN_DELAY_REMOTE 400

typedef struct co_memplan_opts {
    int delay_local;    /* instructions after its last user before a root's bytes
                           are taken (<= 0: at once) */
    int delay_remote;   /* the same for a root a peer copies from */
} co_memplan_opts;

/* Plan the buffers of progs[0..ndev) (one Program per device, device d's
 * at d) as above; `o` NULL: the default delays. `st` (NULL, or ndev
 * entries) receives each device's numbers. Returns 0 or a negative code
 * with `err` filled. */
int co_memplan(ein_program **progs, int ndev, const co_memplan_opts *o, co_memplan_dev *st,
               ein_error *err);

/* Checker (common/base/ein_invariant.h; asserted by co_memplan once a device's
 * buffers are placed, before the added instructions are spliced in): 1 if
 * p's buffers keep memory planning's postconditions, else 0. root[b] is
 * buffer b's root (itself for a root), first[r] and last[r] root r's life
 * in p's instruction numbering (-1: unused). It holds when every buffer
 * lies inside [0, segment_bytes), every root starts at a multiple of
 * EIN_BUFFER_ALIGN, every alias inside its root, and no two roots whose
 * lives overlap share a byte. Sorts a copy of the roots (no memory: 1). */
int co_memplan_ok(const ein_program *p, const int *root, const int *first, const int *last);

#endif
