/* common/ir/ein_program_int.h — what the three parts of the Program module
 * share (not a public header): ein_program.c (names, building),
 * ein_program_check.c (validation) and ein_program_wire.c (encoding).
 *
 * Nothing here allocates or keeps state; the functions have no failure
 * beyond what they return. */
#ifndef EIN_PROGRAM_INT_H
#define EIN_PROGRAM_INT_H

#include <stdint.h>

#include "common/ir/ein_program.h"

/* Largest buffer we accept: keeps every byte count and offset sum far from
 * 64-bit overflow. Buffers start at multiples of EIN_BUFFER_ALIGN bytes. */
#define EIN_BUFFER_MAX_BYTES ((uint64_t)1 << 62)
#define EIN_BUFFER_ALIGN 256

/* The wire fields of a kernel (common/ir/ein_ops.def), as bit positions. */
enum {
#define EIN_KFIELD(field, key) K_##field,
#include "common/ir/ein_ops.def"
    K_COUNT
};

/* NULL and *bytes = the size of a buffer of dtype t over box b, or why
 * that box is not a buffer's (rank, bounds, size past the maximum). */
const char *ein_buffer_box_bytes(const ein_box *b, ein_dtype t, uint64_t *bytes);

/* The wire fields (bits 1 << K_*) of kernel kind k; 0 for an invalid kind. */
unsigned ein_kernel_fields_of(ein_kernel_kind k);

#endif
