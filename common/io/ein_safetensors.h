/* common/io/ein_safetensors.h — .safetensors files (the format model hubs ship
 * weights in), opened and validated without reading their data.
 *
 * A .safetensors file is an 8-byte little-endian header length N, N bytes
 * of JSON ({"NAME": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]},
 * ..., "__metadata__": {...}}), then the data section: each tensor dense,
 * row-major, little-endian, at bytes [8 + N + b, 8 + N + e) of the file.
 *
 * ein_safetensors_open() reads only the header (never the data) and checks,
 * as the reference implementation does: the file is a regular file
 * (ein_file_open_regular), N is at most EIN_ST_HEADER_MAX and fits in the
 * file, the header is one JSON object (jansson; duplicate keys refused)
 * whose entries are tensors with a known safetensors dtype (F64 F32 F16 BF16
 * I64 I32 I16 I8 U64 U32 U16 U8 BOOL F8_E4M3 F8_E5M2), a shape of at most
 * EIN_MAX_RANK non-negative dimensions, and data_offsets [b, e] with b <= e
 * and e - b == the dtype's size x the shape's volume; the ranges do not
 * overlap, leave no hole and end exactly at the end of the file.
 * "__metadata__" is ignored, as are unknown fields of a tensor entry.
 * Tensors of a dtype that is no ein_dtype (anything but F32, F16, BF16, I32, I64) are
 * kept, with `dtype` -1, so that a checkpoint carrying e.g. an I64 buffer
 * still opens; binding one to an input is refused by name (co_weights.h).
 *
 * Errors: EIN_EIO (cannot open or read), EIN_EPARSE (the header is
 * malformed or lies about the file), EIN_ELIMIT (header over the cap),
 * EIN_ENOMEM; the message is one line naming the file and, where one is at
 * fault, the tensor: "m.safetensors: tensor 'wq': data_offsets [0, 96] hold
 * 96 bytes but F32 [4, 8] needs 128". On error *out is untouched.
 *
 * Ownership: *out is one heap object freed with ein_safetensors_free(); its
 * tensors (sorted by name) and strings live as long as it does. */
#ifndef EIN_SAFETENSORS_H
#define EIN_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "common/ir/ein_box.h"
#include "common/ir/ein_dtype.h"
#include "common/base/ein_error.h"

/* The reference implementation's cap on the JSON header. */
#define EIN_ST_HEADER_MAX ((uint64_t)100000000)

typedef struct ein_st_tensor {
    char *name;
    char dtype_name[12];        /* as written in the file: "F32", "I64", ... */
    int dtype;                  /* an ein_dtype, or -1 (not one we compute in) */
    int rank;
    int64_t shape[EIN_MAX_RANK];
    uint64_t offset;            /* absolute byte offset of the first element */
    uint64_t bytes;             /* size of the data in bytes */
} ein_st_tensor;

typedef struct ein_safetensors {
    char *path;                 /* as given, for messages and for LOADs */
    uint64_t file_bytes;
    uint64_t data_start;        /* 8 + N */
    ein_st_tensor *tensors;     /* sorted by name */
    int ntensors;
} ein_safetensors;

int ein_safetensors_open(const char *path, ein_safetensors **out, ein_error *err);

/* The same checks on a whole file held in memory (`data`, `len` bytes);
 * `path` only names it in messages. For tests and the fuzzer. */
int ein_safetensors_parse(const void *data, size_t len, const char *path,
                          ein_safetensors **out, ein_error *err);

/* The tensor named `name`, or NULL. */
const ein_st_tensor *ein_safetensors_find(const ein_safetensors *st, const char *name);

void ein_safetensors_free(ein_safetensors *st);

/* Write a .safetensors file of `n` tensors (F32, F16 or BF16; data dense
 * row-major in that dtype, laid out in the order given). For tests, tools
 * and users who want to hand the runtime their own weights. */
typedef struct ein_st_write_tensor {
    const char *name;
    ein_dtype dtype;
    int rank;
    const int64_t *shape;
    const void *data;
} ein_st_write_tensor;
int ein_safetensors_write(const char *path, const ein_st_write_tensor *t, int n, ein_error *err);

#endif
