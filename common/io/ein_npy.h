/* common/io/ein_npy.h — .npy files (NumPy format 1.0/2.0/3.0), read and written
 * one box at a time, so that each worker touches only its own blocks.
 *
 * Supported: little-endian, C order, dtypes '<f4' (f32), '<f2' (f16),
 * bf16 as '<V2' or '|V2' (raw bfloat16 bits, as ml_dtypes saves them; we
 * write '|V2'), '<i4' (i32) and '<i8' (i64); the codes are the dtype
 * table's (common/ir/ein_dtype.h). Any other header is an EIN_EPARSE error naming the file and
 * what was found. The header parser is strict: it checks the magic, the
 * declared header length against the file size, the dict keys, and that
 * the data section holds exactly prod(shape) elements. */
#ifndef EIN_NPY_H
#define EIN_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "common/ir/ein_box.h"
#include "common/ir/ein_dtype.h"
#include "common/base/ein_error.h"

typedef struct ein_npy_info {
    ein_dtype dtype;
    int rank;
    int64_t shape[EIN_MAX_RANK];
    size_t data_offset;   /* byte offset of the first element */
} ein_npy_info;

/* Readers open `path` with ein_file_open_regular: a FIFO or device is an
 * EIN_EIO error, never a hang. */
int ein_npy_read_info(const char *path, ein_npy_info *out, ein_error *err);

/* Read the elements of `box` (inside the file's shape) into `dst`, dense
 * row-major over `box`, in the file's dtype. */
int ein_npy_read_box(const char *path, const ein_npy_info *info,
                     const ein_box *box, void *dst, ein_error *err);

/* Create (or truncate) `path` with a header for dtype/shape and a data
 * section of the right size (sparse, zero-filled). */
int ein_npy_create(const char *path, ein_dtype dtype, int rank,
                   const int64_t *shape, ein_error *err);
/* Same, into `fd`, a file the caller opened for writing (and closes);
 * `path` only names it in messages. */
int ein_npy_create_fd(int fd, const char *path, ein_dtype dtype, int rank,
                      const int64_t *shape, ein_error *err);

/* Write `src` (dense over `box`, file dtype) into the file's data section.
 * The file must have been made by ein_npy_create (or be a valid .npy whose
 * header matches), and be a regular file reached without a symbolic link as
 * its last component; concurrent writers of disjoint boxes are safe (pwrite). */
int ein_npy_write_box(const char *path, const ein_box *box, const void *src,
                      ein_error *err);

/* Convenience for tests and tools: write/read a whole array. *data from
 * ein_npy_load is malloc'd, owned by the caller. */
int ein_npy_save(const char *path, ein_dtype dtype, int rank,
                 const int64_t *shape, const void *data, ein_error *err);
int ein_npy_load(const char *path, ein_npy_info *info, void **data, ein_error *err);

#endif
