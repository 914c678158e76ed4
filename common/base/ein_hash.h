/* common/base/ein_hash.h — the one 64-bit hash combiner of the project's hash
 * tables (the plan search's memo, the DP's tilings, the exchange cache).
 *
 *   h = ein_hash_mix(h, x)   folds the 64-bit value x into the hash h
 *
 * The boost hash_combine step followed by splitmix64's multiply and shift
 * (good avalanche on small integers, which is what the tables hold). Not
 * for anything that must be hard to collide on purpose, and never written
 * out: a value means something only inside one process. The optimizers
 * (pl_optimize.c, co_search.c) match tilings by this hash alone, so a
 * change to it changes a plan only through a collision (about 2^-64 a pair).
 *
 * Header-only (static inline); nothing allocates or fails. */
#ifndef EIN_HASH_H
#define EIN_HASH_H

#include <stdint.h>

static inline uint64_t ein_hash_mix(uint64_t h, uint64_t x)
{
    h ^= x + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    h *= 0xbf58476d1ce4e5b9ULL;
    return h ^ (h >> 31);
}

#endif
