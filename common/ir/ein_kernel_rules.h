/* common/ir/ein_kernel_rules.h — the block rules of every kernel kind, one
 * table row per kind.
 *
 * What the boxes (and, where a kind cares, dtypes) of a kernel's sources
 * and destination must satisfy beyond its arity (ein_kernel_check_arity)
 * and the dtype table (ein_dtype_kernel_ok). The validator
 * (ein_program_check.c) calls ein_kernel_rules_check for every KERNEL
 * instruction, and the kernel sets call the same rows (kernels/cpu,
 * kernels/cuda: ein_kernel_rules_softmax), so a rule is stated once and
 * enforced the same way before a Program is sent and before a kernel runs.
 * A new kind adds one row in ein_kernel_rules.c.
 *
 * Messages start with the kind's name ("softmax: ...", "rope: ...") and
 * name neither an instruction nor a device: the caller adds those. Each
 * function returns 0, or a negative EIN_E* code with `err` filled
 * (EIN_EINVAL for a parameter or an unknown kind, EIN_ESHAPE for a box).
 * Nothing is allocated; the operands are borrowed for the call. */
#ifndef EIN_KERNEL_RULES_H
#define EIN_KERNEL_RULES_H

#include "common/ir/ein_box.h"
#include "common/base/ein_error.h"
#include "common/ir/ein_program.h"

/* One operand block: its box, dtype and buffer id (for messages; -1 if
 * the caller has none). */
typedef struct ein_kernel_operand {
    ein_box box;
    ein_dtype dtype;
    int id;
} ein_kernel_operand;

/* A kernel and its blocks: nsrcs sources (arity already checked, so
 * 1..EIN_KERNEL_MAX_INPUTS) and the destination. */
typedef struct ein_kernel_operands {
    const ein_kernel *k;
    int nsrcs;
    ein_kernel_operand src[EIN_KERNEL_MAX_INPUTS];
    ein_kernel_operand out;
} ein_kernel_operands;

/* A kind's row: its rules in words, and their check. */
typedef struct ein_kernel_rules_row {
    const char *rules;
    int (*check)(const ein_kernel_operands *o, ein_error *err);
} ein_kernel_rules_row;

/* The row of `kind`, or NULL for an invalid kind. Every valid kind has a
 * row (tests/common/test_kernel_rules checks). */
const ein_kernel_rules_row *ein_kernel_rules_of(ein_kernel_kind kind);

/* Check o against its kind's row (o->k->kind must have passed the arity
 * check, so the sources the row reads exist). */
int ein_kernel_rules_check(const ein_kernel_operands *o, ein_error *err);

/* SOFTMAX's row on bare boxes (what the kernels call): the axis lies in x's
 * rank, and out's box is x's. */
int ein_kernel_rules_softmax(int axis, const ein_box *x, const ein_box *out, ein_error *err);

#endif
