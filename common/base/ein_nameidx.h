/* common/base/ein_nameidx.h — an index of names to ids 0..n-1 kept in the
 * caller's own array (graph nodes, parsed dims): a hash table of ids that
 * asks the caller for an id's name, so names are stored once.
 *
 * Ownership and lifetime: the index owns its slot table only; the names
 * stay the caller's, read through `name` (name(ctx, id) for 0 <= id < the
 * count indexed) whenever the index looks up or grows. A zeroed
 * ein_nameidx is empty and valid; ein_nameidx_free empties it again.
 *
 * Failure: ein_nameidx_add / _rebuild return 0 or EIN_ENOMEM (the index is
 * then unchanged); lookups have none. Not thread-safe for writers. */
#ifndef EIN_NAMEIDX_H
#define EIN_NAMEIDX_H

typedef const char *(*ein_name_fn)(const void *ctx, int id);

typedef struct ein_nameidx {
    int *slot; /* id + 1, or 0 for an empty slot; cap a power of two */
    int cap;
    int n;     /* ids 0..n-1 are indexed */
} ein_nameidx;

/* The id named `name`, or -1. Ids with equal names: the first added. */
int ein_nameidx_find(const ein_nameidx *x, const char *name, ein_name_fn name_of,
                     const void *ctx);

/* Index id x->n (the next one), growing the table to keep its load at most
 * one half. */
int ein_nameidx_add(ein_nameidx *x, ein_name_fn name_of, const void *ctx);

/* Index ids 0..n-1 afresh, with room for `room` more at load <= 1/2. */
int ein_nameidx_rebuild(ein_nameidx *x, int n, int room, ein_name_fn name_of, const void *ctx);

void ein_nameidx_free(ein_nameidx *x);

#endif
