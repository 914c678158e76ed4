/* kernels/kn_cpu.h — CPU concrete operators on sub-tensor blocks.
 *
 * A kn_block is a dense row-major block of data over its global `box`, in
 * `dtype`. Kernels compute in f32 (f16/bf16 are converted on load and
 * store) and write all of the output block. Block boxes must agree with the
 * operator: for an einsum, every index letter has the same interval in each
 * operand and in the output where it appears (an output letter's interval
 * may be any sub-interval of the full dimension: this is what a function
 * specification is). A kernel checks this and fails with EIN_ESHAPE
 * otherwise. Kernels allocate their own scratch with malloc (CPU only) and
 * free it before returning; they never keep state. GEMM goes through
 * OpenBLAS; the caller decides the thread count (workers use one). */
#ifndef KN_CPU_H
#define KN_CPU_H

#include "common/ein_box.h"
#include "common/ein_dtype.h"
#include "common/ein_error.h"
#include "common/ein_program.h"

typedef struct kn_block {
    void *data;
    ein_dtype dtype;
    ein_box box;
} kn_block;

/* Validate an einsum subscript string for `nin` operands of the given ranks
 * ("ij,jk->ik", "bij,bjk->bik", "ij->j", ...): letters a-z, no repeated
 * letter within one operand, every output letter present in an input, no
 * repeated output letter. At most 2 operands and EIN_MAX_RANK letters each.
 * A malformed string or a wrong operand count fails with EIN_EINVAL, a rank
 * that does not match its letters with EIN_ESHAPE. */
int kn_einsum_check(const char *subscripts, int nin, const int *ranks,
                    int out_rank, ein_error *err);

/* out = einsum(subscripts, a[, b]); b is NULL for one operand. Letters in
 * an input but not in the output are summed over. out must not overlap a
 * or b. The elementwise kernels below allow out to be an input (in place). */
int kn_cpu_einsum(const char *subscripts, const kn_block *a, const kn_block *b,
                  kn_block *out, ein_error *err);

int kn_cpu_unary(ein_unary op, double scalar, const kn_block *x, kn_block *out,
                 ein_error *err);

/* Equal boxes for a, b and out. */
int kn_cpu_binary(ein_binary op, const kn_block *a, const kn_block *b,
                  kn_block *out, ein_error *err);

/* out = srcs[0] (+|max) srcs[1] ...; all the same box and dtype as out. */
int kn_cpu_agg(ein_agg op, const kn_block *srcs, int n, kn_block *out,
               ein_error *err);

/* Threads the CPU kernels may use (OpenBLAS); workers use one each, since
 * every device is its own process. */
void kn_cpu_set_threads(int n);

/* Run one Program KERNEL instruction on its blocks (dispatch on kind). */
int kn_cpu_run(const ein_kernel *k, const kn_block *ins, int nin, kn_block *out,
               ein_error *err);

#endif
