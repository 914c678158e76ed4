/* common/ein_kernel_rules.h — the block rules of a kernel kind, stated once.
 *
 * What the boxes of a kernel's sources and destination must satisfy beyond
 * its arity (ein_kernel_check_arity) and dtypes (ein_dtype_kernel_ok). The
 * validator (ein_program_check.c) and both kernel sets (kernels/cpu,
 * kernels/cuda) call the same function, so a rule is enforced the same way
 * before a Program is sent and before a kernel runs.
 *
 * Messages name the kind ("softmax: ...") but neither an instruction nor a
 * device: the caller adds those. Each function returns 0, or a negative
 * EIN_E* code with `err` filled (EIN_EINVAL for a parameter, EIN_ESHAPE
 * for a box). Nothing is allocated. */
#ifndef EIN_KERNEL_RULES_H
#define EIN_KERNEL_RULES_H

#include "common/ein_box.h"
#include "common/ein_error.h"

/* SOFTMAX over `axis`: the axis lies in x's rank, and out's box is x's. */
int ein_kernel_rules_softmax(int axis, const ein_box *x, const ein_box *out, ein_error *err);

#endif
