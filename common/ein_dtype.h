/* common/ein_dtype.h — element types.
 *
 * f16 and bf16 are stored as such (2 bytes); CPU code computes in f32 and
 * converts on load and store with the functions below (round to nearest
 * even; NaN stays NaN). */
#ifndef EIN_DTYPE_H
#define EIN_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#include "include/einsummable/ein_types.h" /* ein_dtype, ein_dtype_size, ein_dtype_name */

/* Parse "f32" / "f16" / "bf16"; returns 0 or -1. */
int ein_dtype_parse(const char *s, size_t len, ein_dtype *out);
int ein_dtype_valid(int t);

float ein_f16_to_f32(uint16_t h);
uint16_t ein_f32_to_f16(float f);
float ein_bf16_to_f32(uint16_t b);
uint16_t ein_f32_to_bf16(float f);

/* The dtype a kernel accumulates in, and in which partial results that are
 * still to be aggregated are kept until their final cast: f32 for every
 * dtype, so f16/bf16 partial sums neither overflow nor lose precision
 * before the aggregation. */
ein_dtype ein_dtype_accum(ein_dtype t);

/* Convert n elements between a buffer of dtype `t` and f32. */
void ein_dtype_to_f32(ein_dtype t, const void *src, float *dst, size_t n);
void ein_dtype_from_f32(ein_dtype t, const float *src, void *dst, size_t n);

#endif
