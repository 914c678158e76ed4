/* include/einsummable/ein_types.h — the plain types every Einsummable call
 * uses: element types and the error object. Installed with the public
 * header (einsummable.h includes it); the library's own code includes it
 * through common/ir/ein_dtype.h and common/base/ein_error.h, so each type has this
 * one definition. */
#ifndef EINSUMMABLE_EIN_TYPES_H
#define EINSUMMABLE_EIN_TYPES_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element types. f16 and bf16 are stored as such (2 bytes). i32 and i64
 * are integer tensors (token ids, row indices): they can be inputs,
 * outputs, split and moved (slice, concat, copy) and index an embedding,
 * but no arithmetic operator takes them. q8_0 and q4_0 are quantized
 * weights in ggml's block layouts (issue 36): blocks of 32 consecutive
 * elements along the last dimension, each an f16 scale d and then 32 int8
 * (q8_0, 34 bytes: value d*q) or 16 bytes of 4-bit q (q4_0, 18 bytes: element
 * i < 16 in the low nibble of byte i, i + 16 in its high nibble, value
 * (q - 8)*d). f8e4m3 is fp8 weights with a scale per 128 elements (the
 * DeepSeek-V3 / cuBLASLt "1x128" layout): blocks of 128 along the last
 * dimension, each an f32 scale s (little endian) and 128 OCP e4m3fn bytes
 * (1 sign, 4 exponent bits of bias 7, 3 mantissa bits; max 448, no
 * infinity, NaN S.1111.111), 132 bytes, value s * e4m3. They are
 * weight-only: an input that is the second operand of an einsum with its
 * last (contiguous) letter contracted. */
typedef enum ein_dtype {
    EIN_F32 = 0,
    EIN_F16 = 1,
    EIN_BF16 = 2,
    EIN_I32 = 3,
    EIN_I64 = 4,
    EIN_Q8_0 = 5,
    EIN_Q4_0 = 6,
    EIN_F8E4M3 = 7,
} ein_dtype;

#define EIN_DTYPE_COUNT 8

/* Which elements of a head rotary position embedding rotates together, by
 * the same angle p * theta^(-2i/head_dim) for pair i (ein_graph_rope_ex). */
typedef enum ein_rope_style {
    EIN_ROPE_INTERLEAVED = 0,  /* pairs (2i, 2i+1): Meta's LLaMA reference code */
    EIN_ROPE_HALF = 1,         /* pairs (i, i + head_dim/2): Hugging Face's rotate_half */
    EIN_ROPE_STYLE_COUNT
} ein_rope_style;

/* How rotary position embedding rescales its frequencies theta^(-2i/D),
 * as transformers' rope_scaling does (issue 34). NONE leaves them; LINEAR
 * divides every one by `factor`; LLAMA3 (Llama 3.1) divides those of
 * wavelength above original_max_position / low_freq_factor by `factor`,
 * keeps those below original_max_position / high_freq_factor, and
 * interpolates smoothly between (transformers'
 * _compute_llama3_parameters). Fields a type does not use are zero. */
typedef enum ein_rope_scaling_type {
    EIN_ROPE_SCALING_NONE = 0,
    EIN_ROPE_SCALING_LINEAR = 1,
    EIN_ROPE_SCALING_LLAMA3 = 2,
    EIN_ROPE_SCALING_COUNT
} ein_rope_scaling_type;

typedef struct ein_rope_scaling {
    int type;                     /* an ein_rope_scaling_type */
    double factor;                /* LINEAR, LLAMA3: > 0 */
    double low_freq_factor;       /* LLAMA3: > 0 */
    double high_freq_factor;      /* LLAMA3: > low_freq_factor */
    double original_max_position; /* LLAMA3: > 0 */
} ein_rope_scaling;

/* Every fallible call returns 0 on success or one of these negative codes,
 * and fills the caller's ein_error (when not NULL) with a one-line message. */
enum {
    EIN_OK = 0,
    EIN_EINVAL = -1,     /* bad argument or option */
    EIN_ENOMEM = -2,     /* allocation failed */
    EIN_EIO = -3,        /* file or OS call failed */
    EIN_EPARSE = -4,     /* malformed .ein / ExProg / .npy text */
    EIN_ESHAPE = -5,     /* shapes or dtypes do not fit */
    EIN_EPROTO = -6,     /* malformed or unexpected message */
    EIN_ENOPLAN = -7,    /* the planner found no valid decomposition */
    EIN_ETIMEOUT = -8,   /* a deadline passed */
    EIN_EWORKER = -9,    /* a worker failed, crashed or hung */
    EIN_EUNSUPPORTED = -10, /* valid but not implemented yet */
    EIN_EDEVICE = -11,   /* missing or failing device */
    EIN_ELIMIT = -12,    /* valid, but past a documented size limit (bad input) */
    EIN_ECANCELED = -13, /* cancelled by the caller (ein_session_cancel) */
};

#define EIN_ERROR_MSG_MAX 1024

/* Plain data owned by the caller (usually on its stack); nothing in it
 * needs freeing. */
typedef struct ein_error {
    int code;
    char msg[EIN_ERROR_MSG_MAX];
} ein_error;

/* A short name for a code ("parse error", "shape error", ...). */
const char *ein_strerror(int code);
/* Bytes per element (4, 2 or 8), and the name ("f32", "f16", "bf16",
 * "i32", "i64", "q8_0", "q4_0", "f8e4m3"); 0 and "?" for a value that is
 * not an ein_dtype. A block dtype (q8_0, q4_0, f8e4m3) has no whole bytes per element:
 * its size is 0 and its bytes come from ein_dtype_bytes. */
size_t ein_dtype_size(ein_dtype t);
const char *ein_dtype_name(ein_dtype t);
/* Bytes of n elements of dtype t: n * size, or for a block dtype
 * n / block * block bytes (n must be a multiple of the block, 32 or 128
 * (f8e4m3): a caller checks). 0
 * for an invalid dtype. */
uint64_t ein_dtype_bytes(ein_dtype t, uint64_t n);
/* Convert n elements between f32 and dtype t (common/ir/ein_dtype.h states
 * the rounding; q8_0/q4_0: ggml's reference quantizer, n a multiple of
 * 32; f8e4m3: scale max|x| / 448, n a multiple of 128). An invalid dtype converts nothing. */
void ein_dtype_from_f32(ein_dtype t, const float *src, void *dst, size_t n);
void ein_dtype_to_f32(ein_dtype t, const void *src, float *dst, size_t n);

/* The dtype table, for bindings that build their lists from it (Python's
 * einsummable does at import): rows 0 .. ein_dtype_count() - 1 are the
 * ein_dtype values in order. ein_dtype_row fills *out with row i and
 * returns 0, or returns EIN_EINVAL (and leaves *out alone) when i is out of
 * range or out is NULL. The strings are static: valid for the life of the
 * process, never freed by anyone. tests/python/py_abi.c checks the layout. */
typedef struct ein_dtype_entry {
    const char *name;      /* "f32": the name every API and file takes */
    const char *npy;       /* .npy descr written ("<f4"); NULL: none (block dtypes) */
    const char *st;        /* safetensors dtype ("F32"); NULL: none */
    uint64_t size;         /* bytes per element; 0 for a block dtype */
    uint64_t block_bytes;  /* bytes per block (== size when block is 1) */
    int32_t block;         /* elements per block along the last dim; 1: not blocked */
    int32_t is_float;      /* 1: arithmetic operators take it; 0: integer or block */
} ein_dtype_entry;

int ein_dtype_count(void);
int ein_dtype_row(int i, ein_dtype_entry *out);

#ifdef __cplusplus
}
#endif

#endif
