/* common/ir/ein_ops.h — the enums of the operator table common/ir/ein_ops.def:
 * elementwise unary and binary functions and the kernel kinds. Types only
 * (no functions, nothing owned); apart from ein_program.h so that the
 * dtype table (ein_dtype.c), which names kernel kinds, need not include
 * the Program it sits below. */
#ifndef EIN_OPS_H
#define EIN_OPS_H

/* Elementwise unary and binary functions: one line each in
 * common/ir/ein_ops.def, with their names and formulas. */
typedef enum ein_unary {
#define EIN_UNARY(kind, name, nargs, usage, formula) EIN_UN_##kind,
#include "common/ir/ein_ops.def"
    EIN_UN_COUNT
} ein_unary;

typedef enum ein_binary {
#define EIN_BINARY(kind, name, op, formula) EIN_BIN_##kind,
#include "common/ir/ein_ops.def"
    EIN_BIN_COUNT
} ein_binary;

/* The concrete operators a KERNEL instruction can run, one line each in
 * common/ir/ein_ops.def with their arity and wire fields (the parameters of
 * ein_kernel each uses). The exact block semantics of each (which boxes it
 * accepts, how global positions enter) are stated at the kn_cpu_* function
 * of the same name in kernels/kn_cpu.h; every backend implements the same
 * semantics. */
typedef enum ein_kernel_kind {
#define EIN_KERNEL(kind, name, min_srcs, max_srcs, fields) EIN_KERNEL_##kind,
#include "common/ir/ein_ops.def"
    EIN_KERNEL_COUNT
} ein_kernel_kind;

#endif
