/* kernels/cuda/kn_cuda.h — CUDA kernels on f32 device buffers.
 *
 * Every kernel is enqueued on `stream` (a cudaStream_t, NULL for the legacy
 * default stream) and returns without waiting: nothing here allocates or
 * synchronises, so the calls may be captured into a CUDA graph. Pointers are
 * device pointers; the pointer array `srcs` itself is host memory, read
 * before the call returns. Returns 0, EIN_EINVAL for a bad argument, or
 * EIN_EDEVICE when the launch failed; kn_cuda_last_error() then says why.
 * Callable from C and C++. */
#ifndef KN_CUDA_H
#define KN_CUDA_H

#include <stdint.h>

#include "common/ein_program.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices; 0 when there is no device or no driver
 * (never an error exit). */
int kn_cuda_device_count(void);

/* y = op(x) elementwise on n floats (y may equal x). */
int kn_cuda_unary(ein_unary op, float scalar, const float *x, float *y, int64_t n,
                  void *stream);

/* dst = srcs[0] (+|max) srcs[1] ... on n floats; dst may equal one
 * source (no other overlap).
 * op is EIN_AGG_SUM or EIN_AGG_MAX; nsrc >= 1 (any number). */
int kn_cuda_agg(ein_agg op, const float *const *srcs, int nsrc, float *dst, int64_t n,
                void *stream);
int kn_cuda_agg_sum(const float *const *srcs, int nsrc, float *dst, int64_t n, void *stream);

/* The message of the last failure of a kn_cuda_* call in this thread ("" if none). */
const char *kn_cuda_last_error(void);

#ifdef __cplusplus
}
#endif

#endif
