/* common/ir/ein_kernel_cost.h — the FLOPs of a kernel, stated once.
 *
 * The planner prices whole operators (planner/ops: the node's shapes as
 * boxes) and the simulator prices Program blocks (coordinator/predict/co_sim.c:
 * the buffers' boxes); both ask here, so an operator's cost model lives in
 * one place and a new kernel kind adds one case.
 *
 * Pure functions: nothing is allocated, nothing fails (a kernel whose
 * boxes do not fit its formula costs 0 FLOPs). */
#ifndef EIN_KERNEL_COST_H
#define EIN_KERNEL_COST_H

#include <stdint.h>

#include "common/ir/ein_box.h"
#include "common/ir/ein_program.h"

/* How many source boxes ein_kernel_flops reads at most. */
#define EIN_KERNEL_COST_SRCS 3

/* FLOPs of kernel `k` writing `out` from sources whose first
 * min(nsrcs, EIN_KERNEL_COST_SRCS) boxes are srcs[]:
 *   EINSUM     2 per point of the index space with two operands, 1 with
 *              one (letters of extent 0 are left out);
 *   ATTENTION, ATTENTION_PARTIAL (q, k, v of rank 3)  4 per causal
 *              (query, key) pair inside the window, head and dim
 *              (ein_window_pairs);
 *   DECODE_ATTENTION(_PARTIAL) 4 per query row, cached key of the block
 *              (at most the window's W), and dim;
 *   SOFTMAX 5, RMSNORM 4, LAYERNORM 7, ROPE 4, UNARY and BINARY 1 per
 *              output element; REDUCE 1 per input element;
 *   layout kinds (SLICE, CONCAT, heads, EMBEDDING) 0. */
double ein_kernel_flops(const ein_kernel *k, const ein_box *out, const ein_box *const *srcs,
                        int nsrcs);

/* Causal (query, key) pairs: query t attends the keys u in [start(t), t]
 * within [klo, khi), start(t) the first token of t's sequence (sequence
 * ends `ends[0..nends)`, none: one sequence from 0). */
double ein_causal_pairs(const int64_t *ends, int nends, int64_t qlo, int64_t qhi, int64_t klo,
                        int64_t khi);
/* The same inside a sliding window W (window 0: ein_causal_pairs): query t
 * attends the keys u in [max(start(t), t - W + 1), t] within [klo, khi). */
double ein_window_pairs(const int64_t *ends, int nends, int64_t window, int64_t qlo,
                        int64_t qhi, int64_t klo, int64_t khi);

#endif
