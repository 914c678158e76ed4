/* common/base/ein_vec.h — the one way an array grows.
 *
 * A growing array is a pointer, a count and a capacity. Most structs here
 * keep the three as their own fields (g->nodes, g->nnodes, g->cap);
 * ein_vec_reserve() grows such an array in place:
 *
 *     if (ein_vec_reserve(&g->nodes, &g->cap, (int64_t)g->nnodes + 1, sizeof *g->nodes) < 0)
 *         return ein_fail(err, EIN_ENOMEM, "graph: out of memory");
 *     g->nodes[g->nnodes++] = node;
 *
 * New code may declare the three together, EIN_VEC(int) ids = {0}, and use
 * ein_vec_push(&ids, x), which reserves and appends in one step.
 *
 * Growth: to at least `need` elements, doubling from at least
 * EIN_VEC_MIN_CAP, so n pushes cost O(n). The new elements past the count
 * are uninitialised.
 *
 * Ownership and lifetime: the array belongs to the caller's struct; it is
 * allocated with realloc() and freed with free() (ein_vec_free for an
 * EIN_VEC). Growing may move it: pointers into it are valid until the next
 * reserve or push.
 *
 * Failure: a plain negative code, no ein_error (the caller knows what it
 * was growing and says so): EIN_ENOMEM when the allocation fails or the
 * size does not fit (need * elem past SIZE_MAX, or an int capacity past
 * INT_MAX); EIN_EINVAL for elem 0 or a NULL array. On failure the array,
 * its elements and the capacity are unchanged. */
#ifndef EIN_VEC_H
#define EIN_VEC_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "include/einsummable/ein_types.h" /* EIN_ENOMEM */

#define EIN_VEC_MIN_CAP 4

/* `arrp` is the address of the array pointer (a T **, given as void * so
 * that any element type fits), `cap` its capacity in elements of `elem`
 * bytes. Returns 0 once *cap >= need (need <= *cap: nothing to do). */
int ein_vec_reserve(void *arrp, int *cap, int64_t need, size_t elem);

/* The same for a capacity counted in size_t (byte buffers, large arrays). */
int ein_vec_reserve_z(void *arrp, size_t *cap, size_t need, size_t elem);

/* A typed array: EIN_VEC(double) xs = {0};  The macros below evaluate
 * their `vec` argument more than once. */
#define EIN_VEC(T) struct { T *v; int n, cap; }

/* Append x; 0 or EIN_ENOMEM (nothing appended). */
#define ein_vec_push(vec, x)                                                              \
    (ein_vec_reserve(&(vec)->v, &(vec)->cap, (int64_t)(vec)->n + 1, sizeof *(vec)->v) < 0 \
         ? EIN_ENOMEM                                                                     \
         : ((vec)->v[(vec)->n++] = (x), 0))

/* Free the elements' storage and empty the array (usable again). */
#define ein_vec_free(vec) (free((vec)->v), (vec)->v = NULL, (vec)->n = (vec)->cap = 0)

#endif
