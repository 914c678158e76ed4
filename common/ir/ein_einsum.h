/* common/ir/ein_einsum.h — einsum subscripts ("bij,bjk->bik") checked and
 * split into letters: the one parser the planner, the Program validator,
 * the kernels and the simulator read subscripts through.
 *
 * Ownership and lifetime: the parse reads the caller's string only while it
 * runs and fills the caller's ein_einsum_sub, which holds no pointers.
 *
 * Failure: EIN_EINVAL with a message quoting the subscripts (err may be
 * NULL); *out is then untouched. No allocation, no global state. */
#ifndef EIN_EINSUM_H
#define EIN_EINSUM_H

#include "common/ir/ein_box.h"   /* EIN_MAX_RANK */
#include "common/base/ein_error.h"

/* Einsum subscripts split into letters. */
typedef struct ein_einsum_sub {
    int nops;                       /* 1 or 2 operands */
    int rank[2];                    /* letters per operand (0 for a missing one) */
    char ops[2][EIN_MAX_RANK];      /* 'a'..'z', not NUL-terminated */
    int out_rank;
    char out[EIN_MAX_RANK];
} ein_einsum_sub;

/* Flags of ein_einsum_parse_flags. */
enum {
    /* Operands and outputs with no letters (rank 0, a scalar) are allowed:
     * kernels and Programs run them; the planner's graphs do not have them. */
    EIN_EINSUM_SCALARS = 1u << 0,
};

/* Check and split subscripts: explicit "->", letters a-z only (no spaces),
 * 1 or 2 operands of 1..EIN_MAX_RANK letters, no letter repeated within an
 * operand or within the output, every output letter in some operand, and
 * 1..EIN_MAX_RANK output letters (rank-0 results are not supported); at
 * most EIN_NAME_MAX - 1 characters. */
int ein_einsum_parse(const char *subscripts, ein_einsum_sub *out, ein_error *err);

/* The same with flags (EIN_EINSUM_*): with EIN_EINSUM_SCALARS, operands
 * and the output may have 0 letters. */
int ein_einsum_parse_flags(const char *subscripts, unsigned flags, ein_einsum_sub *out,
                           ein_error *err);

#endif
