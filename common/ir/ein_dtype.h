/* common/ir/ein_dtype.h — element types: one table row per dtype.
 *
 * common/ir/ein_dtype.c holds the table (name, size, .npy and safetensors
 * codes, accumulation dtype, which kernel kinds accept it); everything that
 * needs a fact about a dtype asks it here, so adding a dtype is one row
 * plus its kernels, and an invalid dtype is refused (0, NULL, -1), never
 * taken for another.
 *
 * f16 and bf16 are stored as such (2 bytes); CPU code computes in f32 and
 * converts on load and store with the functions below (round to nearest
 * even; NaN stays NaN). i32 and i64 are integers: layout kernels (slice,
 * concat) move them, an embedding reads them as row ids, and no kernel
 * computes on them. */
#ifndef EIN_DTYPE_H
#define EIN_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#include "common/ir/ein_box.h"
#include "include/einsummable/ein_types.h" /* ein_dtype, ein_dtype_size, ein_dtype_name */

/* The element dtypes (whole bytes per element, .npy and safetensors codes)
 * are 0 .. EIN_DTYPE_ELEM_COUNT - 1; the block dtypes (q8_0, q4_0, f8e4m3)
 * follow. */
#define EIN_DTYPE_ELEM_COUNT 5

/* One row of the dtype table. Static storage; never freed. */
typedef struct ein_dtype_info {
    const char *name;     /* "f32": .ein, C API, Python, messages */
    size_t size;          /* bytes per element */
    const char *npy;      /* .npy descr written ("<f4") */
    const char *npy_alt;  /* another descr read as this dtype, or NULL */
    const char *st;       /* safetensors dtype ("F32") */
    ein_dtype accum;      /* what kernels accumulate in (ein_dtype_accum) */
    int is_float;         /* 1: arithmetic kernels accept it */
    uint32_t kernels;     /* bit k set: kernel kind k accepts buffers of it */
    int block;            /* elements per block along the last dim (1: none) */
    size_t block_bytes;   /* bytes per block (block dtypes; else == size) */
} ein_dtype_info;

/* The row of dtype t, or NULL when t is not an ein_dtype. */
const ein_dtype_info *ein_dtype_info_of(int t);

/* Parse a dtype name ("f32", "i32", ...); returns 0 or -1. */
int ein_dtype_parse(const char *s, size_t len, ein_dtype *out);
int ein_dtype_valid(int t);
/* 1 for f32, f16, bf16; 0 for the integer dtypes and invalid values. */
int ein_dtype_is_float(int t);
/* 1 when a KERNEL of kind `kind` (ein_kernel_kind) may read or write a
 * buffer of dtype t: float dtypes every kind; integer dtypes only SLICE,
 * CONCAT and EMBEDDING (whose block rules say which operand; see
 * ein_program_check.c). 0 for an invalid dtype or kind. */
int ein_dtype_kernel_ok(int t, int kind);
/* "f32, f16, bf16, i32 or i64": every name, for messages. */
const char *ein_dtype_names(void);
/* The rows that a message lists, from the table: `floats` 1 the float
 * dtypes, 0 the integer ones, -1 both; `kind` an ein_kernel_kind that must
 * accept them, or -1. `by` says what names a row: EIN_DTYPE_BY_NAME ("f32"),
 * EIN_DTYPE_BY_ST (safetensors "F32") or EIN_DTYPE_BY_NPY (".npy" "<f4"; a
 * row read from two descrs, bf16's raw bits, as "bf16 as |V2"; rows with
 * no such code, the block dtypes, are left out). Written
 * into buf as "a, b or c" (cut to cap); returns buf. */
enum { EIN_DTYPE_BY_NAME, EIN_DTYPE_BY_ST, EIN_DTYPE_BY_NPY };
const char *ein_dtype_list(char *buf, size_t cap, int floats, int kind, int by);
/* "f32, f16 or bf16": the float dtypes, for messages (a static string). */
const char *ein_dtype_float_names(void);
/* The dtype of a .npy descr ("<f4", "<i8", ...) or a safetensors dtype
 * name ("BF16", "I32", ...) of length n; 0, or -1 when no dtype has it. */
int ein_dtype_from_npy(const char *descr, size_t n, ein_dtype *out);
int ein_dtype_from_safetensors(const char *name, size_t n, ein_dtype *out);

/* Average bytes per element, for estimates (cost models, memory bounds):
 * the size, or a block dtype's block bytes / block (q8_0 1.0625, q4_0
 * 0.5625, f8e4m3 1.03125); 0 for an invalid dtype. */
double ein_dtype_elem_bytes(ein_dtype t);
/* 1 for a block dtype (q8_0, q4_0, f8e4m3: issue 36); 0 otherwise. */
int ein_dtype_is_block(int t);
/* Elements per block of t (32 for q8_0/q4_0, 128 for f8e4m3, 1 for the
 * others; 0 invalid). */
int ein_dtype_block(int t);
/* Bytes a unit of storage takes, and the box of a dense buffer over `b` in
 * such units: an element dtype's units are its elements (the box as it
 * is); a block dtype's are its blocks, so the last interval [lo, hi)
 * becomes [lo / B, hi / B) for the block of B elements. Code that moves bytes (box copies, slabs,
 * file reads) works in units and so moves whole blocks. Returns the unit's
 * bytes, or 0 when t is invalid or a block dtype's box has rank 0 or a
 * last interval off block boundaries. */
size_t ein_dtype_unit_box(ein_dtype t, const ein_box *b, ein_box *out);
/* 1 when every partial box of a block-dtype tensor may be cut here: the
 * last interval of b starts and ends on block boundaries (any box of an
 * element dtype). */
int ein_dtype_box_ok(ein_dtype t, const ein_box *b);

float ein_f16_to_f32(uint16_t h);
uint16_t ein_f32_to_f16(float f);
float ein_bf16_to_f32(uint16_t b);
uint16_t ein_f32_to_bf16(float f);

/* The dtype a kernel accumulates in, and in which partial results that are
 * still to be aggregated are kept until their final cast: f32 for every
 * float dtype, so f16/bf16 partial sums neither overflow nor lose
 * precision before the aggregation; an integer dtype is its own (it is
 * never aggregated). An invalid dtype gives f32. */
ein_dtype ein_dtype_accum(ein_dtype t);

/* Convert n elements between a buffer of dtype `t` and f32 (integers:
 * exact below 2^24; from f32 rounded to nearest and saturated). An invalid
 * dtype converts nothing (a caller validates dtypes first). For a block
 * dtype n must be a multiple of its block (32, or 128 for f8e4m3; the
 * elements past the last whole block are left alone). q8_0/q4_0: to f32
 * is ggml's dequantize_row_q8_0/q4_0, from f32 its reference quantizer,
 * round to nearest (quantize_row_q8_0_ref: d = max|x| / 127,
 * q = round(x / d), halves away from 0; quantize_row_q4_0_ref: m = the
 * element of largest magnitude (the first such), d = m / -8,
 * q = min(15, trunc(x / d + 8.5))), so the bytes equal a GGUF's.
 * f8e4m3: per block of 128, s = amax / 448 over the finite elements (f32
 * division), each finite x stored as ein_f32_to_e4m3(x / s) (all zeros
 * when s is 0, also when amax / 448 underflows), a NaN or infinite x as
 * the NaN code of its sign (e4m3fn has no infinity); to f32 is s times
 * ein_e4m3_to_f32 (NaN codes give NaN). */
void ein_dtype_to_f32(ein_dtype t, const void *src, float *dst, size_t n);
void ein_dtype_from_f32(ein_dtype t, const float *src, void *dst, size_t n);

/* One OCP e4m3fn byte (bias 7, max 448, NaN S.1111.111, no infinity) to
 * f32, exactly; and an f32 to the nearest e4m3fn (ties to even mantissa),
 * finite values of magnitude past 448 saturated to +-448 (cuBLASLt's and
 * the __nv_fp8_e4m3 "satfinite" rule), NaN and +-inf to the NaN code of
 * their sign. Pure functions. */
float ein_e4m3_to_f32(uint8_t b);
uint8_t ein_f32_to_e4m3(float f);

#endif
