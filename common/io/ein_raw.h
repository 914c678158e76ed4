/* common/io/ein_raw.h — read a box of a tensor stored raw (dense, row-major,
 * little-endian, no header) at a byte offset of a file: the tensors of a
 * .safetensors file, or any blob a user lays out the same way.
 *
 * ein_raw_read_box() opens `path` with ein_file_open_regular, checks that
 * the file holds the whole tensor (`offset` + volume(shape) x size(dtype)
 * bytes) and that `box` lies inside [0, shape), then memory-maps only the
 * pages from the box's first byte to its last (never the whole file) and
 * copies the box's elements into `dst`, dense row-major over `box`, in the
 * file's dtype. `*mapped` (if not NULL) gets the bytes mapped, for tests
 * that check a block reads no more than its own range. A file truncated
 * while mapped can raise SIGBUS; the worker treats that like any crash.
 *
 * Errors: EIN_EIO (open, mmap), EIN_ESHAPE (the file is too short for the
 * tensor, or the box is outside the shape), EIN_EINVAL (bad dtype or
 * rank), each one line naming the file. `dst` is unspecified on error. */
#ifndef EIN_RAW_H
#define EIN_RAW_H

#include <stddef.h>
#include <stdint.h>

#include "common/ir/ein_box.h"
#include "common/ir/ein_dtype.h"
#include "common/base/ein_error.h"

int ein_raw_read_box(const char *path, uint64_t offset, ein_dtype dtype, int rank,
                     const int64_t *shape, const ein_box *box, void *dst, size_t *mapped,
                     ein_error *err);

#endif
