/* exchange/xp_baseline.h — the classic collective algorithms as ExProg
 * bodies, the yardstick for synthesis on the same simulator.
 *
 * For every distinct OUT aggregate X of a preamble (copies at sites H,
 * wanted at sites D) a generator writes actions in chunks:
 *   XP_BASE_RING    rings through H ∪ D: X split into one chunk per target,
 *                   each reduced along the ring to its owner (reduce-
 *                   scatter) and relayed on around the ring (all-gather);
 *                   an atom with one holder is only relayed (ring
 *                   all-gather / broadcast), one target only reduced (ring
 *                   reduce-scatter). On machines with point-to-point links
 *                   several rings (a Hamiltonian cycle and its reverse,
 *                   then more on the links left) share the data in
 *                   proportion to their bandwidth, as NCCL's rings do.
 *   XP_BASE_TREE    double binary tree: half of X reduced up one binary
 *                   tree over H ∪ D and broadcast down it, the other half
 *                   on a second tree with the order reversed.
 *   XP_BASE_DIRECT  one-shot: each holder sends its part of chunk i to
 *                   chunk i's owner, which multicasts the sum (direct
 *                   reduce-scatter + all-gather); a single copy goes
 *                   straight to its targets (direct all-to-all, all-gather).
 *   XP_BASE_HIER    hierarchical (UCC's split rail) on a machine of several
 *                   hosts: X cut into one piece per local rank, each
 *                   piece into one sub-piece per host, each sub-piece
 *                   into a stream of `pipe` chunks; reduce-scatter
 *                   inside every host (direct: each GPU sends piece k to
 *                   the host's k-th GPU), all-reduce of piece k across
 *                   the hosts among the k-th GPUs, on rail k (direct:
 *                   sub-piece j reduced at host j's k-th GPU, which
 *                   multicasts the sum to the other hosts' k-th GPUs),
 *                   then all-gather inside every host (each k-th GPU
 *                   multicasts what it has); every phase moves a
 *                   sub-piece as a stream, so its chunks land in order
 *                   and the three phases pipeline chunk by chunk. On one
 *                   host it is direct. Needs the
 *                   same number of the aggregate's sites on every host it
 *                   spans (EIN_EUNSUPPORTED otherwise).
 * On a machine of several hosts XP_BASE_RING is NCCL's multi-ring: one
 * ring per rail (ring r visits each host's sites from local rank r on and
 * leaves the host from rank r - 1), the data shared equally.
 * `pipe` chunks each piece further into a stream of that many chunks
 * (pipelining). The result is a valid program (Def. 5.5) over the same
 * preamble. Partitions must be resolved.
 *
 * xp_baseline_best tries pipe = 1, 2, 4, ..., 64 (within XP_CHUNKS_MAX
 * chunks) while the simulated makespan improves and returns the fastest,
 * its makespan and depth.
 *
 * Ownership: *out is a new program (xp_program_free). On error returns a
 * negative EIN_E* code (EIN_EUNSUPPORTED: too many chunks for the shape)
 * and fills `err`. */
#ifndef XP_BASELINE_H
#define XP_BASELINE_H

#include "common/base/ein_error.h"
#include "exchange/xp_program.h"
#include "exchange/xp_topo.h"

typedef enum xp_base_kind {
    XP_BASE_RING,
    XP_BASE_TREE,
    XP_BASE_DIRECT,
    XP_BASE_HIER
} xp_base_kind;

int xp_baseline(const xp_program *pre, const xp_topology *t, xp_base_kind kind, int pipe,
                xp_program **out, ein_error *err);
/* The same without the final validity check (xp_program_check), for a
 * caller that checks what it keeps (the search simulates every candidate,
 * which fails on an action never enabled or an OUT never reached, and
 * checks the start it adopts). */
int xp_baseline_unchecked(const xp_program *pre, const xp_topology *t, xp_base_kind kind,
                          int pipe, xp_program **out, ein_error *err);
int xp_baseline_best(const xp_program *pre, const xp_topology *t, xp_base_kind kind,
                     xp_program **out, double *seconds, int *best_pipe, ein_error *err);
/* Multi-path routing for preambles whose every OUT aggregate has one
 * holder and one target (all-to-all, permutations) on a machine of
 * point-to-point links: each atom cut into k chunks, each chunk sent
 * directly or relayed through one other GPU, chosen greedily to keep the
 * most loaded link (bytes over bandwidth) lowest; the chunks of one atom
 * on one path form a stream. EIN_EUNSUPPORTED for other shapes and for
 * switch machines (where the direct route is already the best). */
int xp_multipath(const xp_program *pre, const xp_topology *t, int k, xp_program **out,
                 ein_error *err);
/* The preamble of a standard collective over n GPUs, S bytes per GPU (for
 * benchmarks and tests): XP_COLL_ALLREDUCE sums n blocks of S, one per
 * GPU, wanted at every GPU; XP_COLL_REDUCESCATTER sums n blocks of S each
 * split in n atoms, atom j wanted at GPU j; XP_COLL_ALLGATHER gives every
 * GPU the n atoms of S/n held one per GPU; XP_COLL_ALLTOALL sends S/n from
 * every GPU to every other. 1 <= n <= 256. *out is a new program (xp_program_free); on
 * error returns a negative EIN_E* code and fills `err`. */
typedef enum xp_coll_kind {
    XP_COLL_ALLREDUCE,
    XP_COLL_REDUCESCATTER,
    XP_COLL_ALLGATHER,
    XP_COLL_ALLTOALL
} xp_coll_kind;
int xp_collective_preamble(xp_coll_kind kind, int n, double S, xp_program **out,
                           ein_error *err);

/* "ring", "tree", "direct", "hier"; and back (-1: unknown). */
const char *xp_base_name(xp_base_kind kind);
int xp_base_parse(const char *name);

#endif
