/* kernels/kn_block.h — the block every kernel backend computes on.
 *
 * A kn_block is a dense row-major block of data over its global `box`, in
 * `dtype`: host memory for the CPU kernels (kernels/kn_cpu.h), device
 * memory for the CUDA kernels (kernels/cuda/kn_cuda.h). It is the one type
 * the worker's backend seam (worker/wk_backend.h) hands to a backend's
 * kernels, so it belongs to no backend. A block owns nothing: `data` is
 * the caller's, valid for the call it is passed to. */
#ifndef KN_BLOCK_H
#define KN_BLOCK_H

#include "common/ir/ein_box.h"
#include "common/ir/ein_dtype.h"

typedef struct kn_block {
    void *data;
    ein_dtype dtype;
    ein_box box;
} kn_block;

#endif
