/* common/ir/ein_box.h — tensor types as boxes of global indices.
 *
 * A box is the index set [lo0,hi0) x ... x [lo_{r-1},hi_{r-1}) (hi
 * exclusive). Every sub-tensor in the system carries its global box; a block
 * of data for a box is stored dense, row-major, over exactly that box.
 * Boxes are plain values: copy them freely, nothing to free. */
#ifndef EIN_BOX_H
#define EIN_BOX_H

#include <stddef.h>
#include <stdint.h>

#define EIN_MAX_RANK 8

typedef struct ein_box {
    int rank;
    int64_t lo[EIN_MAX_RANK];
    int64_t hi[EIN_MAX_RANK];
} ein_box;

/* The zero-bounded box of a shape. */
ein_box ein_box_of_shape(int rank, const int64_t *shape);
int64_t ein_box_volume(const ein_box *b);           /* number of elements */
int ein_box_equal(const ein_box *a, const ein_box *b);
int ein_box_empty(const ein_box *b);
/* 1 if `inner` lies inside `outer` (same rank). */
int ein_box_contains(const ein_box *outer, const ein_box *inner);
/* Intersection; returns 1 if non-empty. */
int ein_box_intersect(const ein_box *a, const ein_box *b, ein_box *out);
/* Lexicographic order on (lo, hi), for canonical sorting. */
int ein_box_compare(const ein_box *a, const ein_box *b);
/* "[0:128, 64:96]" into buf; returns buf. */
char *ein_box_format(const ein_box *b, char *buf, size_t len);
/* A shape's extents, "128, 64" (rank 0: ""), into buf, truncated to fit;
 * returns buf. */
char *ein_shape_format(int rank, const int64_t *shape, char *buf, size_t len);

/* Copy the elements of `region` from a dense block over `src_box` into a
 * dense block over `dst_box` (same element size; region inside both). This
 * is the one primitive behind slice (decompose), concat (recompose) and
 * .npy box I/O. */
void ein_box_copy(void *dst, const ein_box *dst_box, const void *src,
                  const ein_box *src_box, const ein_box *region, size_t elem);

/* Row-major element strides of a dense block over `b`. */
void ein_box_strides(const ein_box *b, int64_t *st);
/* The box viewed as [outer, n, inner] around `axis` (0 <= axis < rank):
 * the extents before it, its own, and those after it, multiplied. */
void ein_box_axis_split(const ein_box *b, int axis, int64_t *outer, int64_t *n, int64_t *inner);

/* Visit `region` as runs: for every index of its first `outer` dimensions,
 * call fn with the element offsets, in the dst and src blocks, of the
 * first element of that run (the remaining dimensions form the run). Stops
 * at and returns fn's first non-zero result. Backends use it to copy boxes
 * with their own primitive (memcpy, cudaMemcpy2DAsync). */
typedef int (*ein_box_run_fn)(int64_t dst_off, int64_t src_off, void *ctx);
int ein_box_walk(const ein_box *dst_box, const ein_box *src_box, const ein_box *region,
                 int outer, ein_box_run_fn fn, void *ctx);

#endif
