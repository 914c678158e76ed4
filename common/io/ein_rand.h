/* common/io/ein_rand.h — the seeded generator for inputs not given as files.
 *
 * A value depends only on (seed, tensor key, global flat index), never on
 * how the tensor is decomposed, so every worker can fill its own boxes and
 * any test can recompute the same tensor. Values are uniform in [-1, 1)
 * (integer dtypes: 0 or 1, valid ids of any table of 2 rows or more). */
#ifndef EIN_RAND_H
#define EIN_RAND_H

#include <stdint.h>

#include "common/ir/ein_box.h"
#include "common/ir/ein_dtype.h"

uint64_t ein_rand_key(const char *tensor_name);   /* FNV-1a of the name */

/* The splitmix64 sequence: advances *state and returns the next value. The
 * one generator of every seeded choice (the exchange search, the random
 * selector); its state lives with the caller, never in a static. */
uint64_t ein_rand_next(uint64_t *state);
float ein_rand_value(uint64_t seed, uint64_t key, uint64_t flat_index);

/* Fill `dst` (dense over `box`, in `dtype`) with the values of a tensor of
 * shape `shape` (rank = box->rank). */
void ein_rand_fill_box(uint64_t seed, uint64_t key, const int64_t *shape,
                       const ein_box *box, ein_dtype dtype, void *dst);

#endif
