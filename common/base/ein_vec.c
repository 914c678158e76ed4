/* common/base/ein_vec.c — see ein_vec.h. */
#include "common/base/ein_vec.h"

#include <limits.h>
#include <string.h>

/* The capacity that holds `need` (> cap) elements: doubling from at least
 * EIN_VEC_MIN_CAP, at most `max`; 0 if need > max. */
static size_t next_cap(size_t cap, size_t need, size_t max)
{
    if (need > max)
        return 0;
    size_t c = cap < EIN_VEC_MIN_CAP ? EIN_VEC_MIN_CAP : cap;
    while (c < need)
        c = c > max / 2 ? max : 2 * c;
    return c < max ? c : max;
}

/* Reallocate the T * at `arrp` to ncap elements. arrp is a T **: its
 * pointer is read and written as bytes, since void * and T * share a
 * representation on every POSIX system. */
static int regrow(void *arrp, size_t ncap, size_t elem)
{
    void *p, *q;
    memcpy(&p, arrp, sizeof p);
    if (!ncap || !(q = realloc(p, ncap * elem)))
        return EIN_ENOMEM;
    memcpy(arrp, &q, sizeof q);
    return 0;
}

int ein_vec_reserve_z(void *arrp, size_t *cap, size_t need, size_t elem)
{
    if (!arrp || !cap || !elem)
        return EIN_EINVAL;
    if (need <= *cap)
        return 0;
    size_t n = next_cap(*cap, need, SIZE_MAX / elem);
    int rc = regrow(arrp, n, elem);
    if (rc == 0)
        *cap = n;
    return rc;
}

int ein_vec_reserve(void *arrp, int *cap, int64_t need, size_t elem)
{
    if (!arrp || !cap || *cap < 0 || !elem)
        return EIN_EINVAL;
    if (need <= *cap)
        return 0;
    size_t max = SIZE_MAX / elem < (size_t)INT_MAX ? SIZE_MAX / elem : (size_t)INT_MAX;
    size_t n = (uint64_t)need <= max ? next_cap((size_t)*cap, (size_t)need, max) : 0;
    int rc = regrow(arrp, n, elem);
    if (rc == 0)
        *cap = (int)n;
    return rc;
}
