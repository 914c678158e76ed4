/* common/base/ein_nameidx.c — see ein_nameidx.h. Open addressing with linear
 * probing over FNV-1a hashes. */
#include "common/base/ein_nameidx.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "include/einsummable/ein_types.h" /* EIN_ENOMEM */

static uint32_t name_hash(const char *s)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

int ein_nameidx_find(const ein_nameidx *x, const char *name, ein_name_fn name_of,
                     const void *ctx)
{
    if (!x->slot || !name)
        return -1;
    uint32_t mask = (uint32_t)x->cap - 1;
    for (uint32_t i = name_hash(name) & mask;; i = (i + 1) & mask) {
        int s = x->slot[i];
        if (s == 0)
            return -1;
        if (strcmp(name_of(ctx, s - 1), name) == 0)
            return s - 1;
    }
}

static void put(ein_nameidx *x, int id, ein_name_fn name_of, const void *ctx)
{
    uint32_t mask = (uint32_t)x->cap - 1;
    uint32_t i = name_hash(name_of(ctx, id)) & mask;
    while (x->slot[i] != 0)
        i = (i + 1) & mask;
    x->slot[i] = id + 1;
}

int ein_nameidx_rebuild(ein_nameidx *x, int n, int room, ein_name_fn name_of, const void *ctx)
{
    assert(n >= 0 && room >= 0);
    int64_t want = ((int64_t)n + room) * 2;
    int64_t cap = 64;
    while (cap < want)
        cap *= 2;
    if (cap > INT32_MAX / 2)
        return EIN_ENOMEM;
    int *slot = calloc((size_t)cap, sizeof *slot);
    if (!slot)
        return EIN_ENOMEM;
    free(x->slot);
    x->slot = slot;
    x->cap = (int)cap;
    x->n = 0;
    for (int id = 0; id < n; id++)
        put(x, id, name_of, ctx);
    x->n = n;
    return 0;
}

int ein_nameidx_add(ein_nameidx *x, ein_name_fn name_of, const void *ctx)
{
    if ((int64_t)(x->n + 1) * 2 > x->cap) {
        int rc = ein_nameidx_rebuild(x, x->n, x->n + 1, name_of, ctx);
        if (rc < 0)
            return rc;
    }
    put(x, x->n, name_of, ctx);
    x->n++;
    return 0;
}

void ein_nameidx_free(ein_nameidx *x)
{
    free(x->slot);
    x->slot = NULL;
    x->cap = x->n = 0;
}
