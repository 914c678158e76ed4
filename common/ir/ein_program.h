/* common/ir/ein_program.h — the device Program IR: what one worker executes.
 *
 * A Program is typed buffers plus an instruction DAG for one device. The
 * coordinator builds it (lowering), encodes it with ein_program_encode(),
 * and the worker decodes and validates it before running anything. Every
 * dependency is explicit: no instruction implies an order the DAG does not
 * state. Instruction ids equal their index and every dependency points to an
 * earlier instruction, so the array order is a valid topological order.
 *
 * Buffers live in one segment per device (POSIX shared memory on CPU, one
 * cudaMalloc region exported over IPC on GPU) at byte `offset`; their data
 * is dense row-major over `box` (global bounds), in `dtype`.
 *
 * Ownership: a Program and everything it points to is one heap object
 * graph freed by ein_program_free(). Builders fill the arrays with
 * ein_program_add_buffer()/ein_program_add_instr(), which copy their
 * arguments' arrays. */
#ifndef EIN_PROGRAM_H
#define EIN_PROGRAM_H

#include <stddef.h>
#include <stdint.h>

#include "common/ir/ein_box.h"
#include "common/ir/ein_dtype.h"
#include "common/base/ein_error.h"
#include "common/ir/ein_ops.h"
#include "common/ir/ein_rope.h"

#define EIN_PROTOCOL_VERSION 6   /* 4: attention kernels carry "window" (issue 34);
                                    5: rope kernels carry "scaling" (issue 34);
                                    6: fused kinds swiglu, add_rmsnorm (issue 33) */
#define EIN_NAME_MAX 64         /* operator names, einsum subscripts */
#define EIN_PATH_MAX 4096

typedef enum ein_agg {
    EIN_AGG_NONE = 0,
    EIN_AGG_SUM = 1,
    EIN_AGG_MAX = 2,
    /* Log-sum-exp merge of partial attention outputs (issue 13). A block of
     * box B under LSE is stored over ein_agg_box(EIN_AGG_LSE, B): B with its
     * last interval [0, d) widened to [0, d + 1); each row holds the
     * normalised partial output (d values) and then its log-sum-exp (the
     * log of the softmax denominator, scores included). Merging rows
     * (o_i, s_i): s = log(sum exp(s_i)), o = sum o_i exp(s_i - s); a row
     * that saw no key (s_i = -inf, o_i = 0) is the identity. Associative
     * and commutative like SUM and MAX. */
    EIN_AGG_LSE = 3,
} ein_agg;
#define EIN_AGG_LAST EIN_AGG_LSE

/* The box a block of box `b` is stored over while it is a partial of
 * aggregation `a`: `b` itself, except for EIN_AGG_LSE, whose last interval
 * must be [0, d) and becomes [0, d + 1) (the per-row log-sum-exp). */
ein_box ein_agg_box(ein_agg a, const ein_box *b);
/* The inverse: the box of the data rows of a stored partial (LSE: last
 * interval [0, d + 1) -> [0, d)). */
ein_box ein_agg_data_box(ein_agg a, const ein_box *b);

/* ein_unary, ein_binary, ein_kernel_kind: common/ir/ein_ops.h. */

#define EIN_KERNEL_MAX_INPUTS 16   /* CONCAT may have up to this many inputs */
#define EIN_KERNEL_LIST_MAX 65536  /* entries of ein_kernel.list */

/* What a kernel computes, independent of the blocks it runs on. Fields not
 * used by a kind are zero. `list` is owned by whoever owns the kernel (the
 * graph node, or the Program instruction, which deep-copies it). */
typedef struct ein_kernel {
    ein_kernel_kind kind;
    char subscripts[EIN_NAME_MAX]; /* EINSUM */
    ein_unary unary;               /* UNARY */
    double scalar;                 /* UNARY scale / addc */
    ein_binary binary;             /* BINARY */
    int32_t axis;                  /* SOFTMAX, CONCAT, SLICE */
    uint32_t axes;                 /* REDUCE: bit i set = axis i reduced */
    ein_agg reduce;                /* REDUCE: EIN_AGG_SUM or EIN_AGG_MAX */
    int64_t start;                 /* SLICE: first index taken along axis */
    double eps;                    /* RMSNORM, LAYERNORM, ADD_RMSNORM */
    double theta;                  /* ROPE base (10000 for LLaMA) */
    int64_t head_dim;              /* ROPE, SPLIT_HEADS, MERGE_HEADS */
    int64_t group;                 /* ATTENTION: query heads per kv head */
    int64_t window;                /* ATTENTION(_PARTIAL), DECODE_ATTENTION(_PARTIAL):
                                      sliding window W >= 0; 0 = none. Query at
                                      position i attends keys j of its sequence
                                      with i - W < j <= i (transformers' rule:
                                      masked when i - j >= W) */
    int32_t style;                 /* ROPE: an ein_rope_style */
    ein_rope_scaling scaling;      /* ROPE, ROPE_AT: frequency rescaling
                                      (common/ir/ein_rope.h; zero: none) */
    int64_t rows;                  /* EMBEDDING: rows of the whole table (ids
                                      outside [0, rows) are an error) */
    int64_t *list;                 /* ROPE/ATTENTION: sorted sequence ends, the
                                      last = total tokens (none: one sequence);
                                      CONCAT: offset of input i along axis */
    int32_t nlist;
} ein_kernel;

typedef struct ein_pbuffer {
    ein_dtype dtype;
    ein_box box;
    uint64_t offset;     /* bytes into the device segment */
    uint64_t bytes;      /* == volume(box) * dtype size */
} ein_pbuffer;

/* Where a LOAD with a path reads its tensor from. */
typedef enum ein_load_format {
    EIN_LOAD_NPY = 0,   /* `path` is a .npy file of the tensor's dtype and shape */
    EIN_LOAD_RAW = 1,   /* dense row-major little-endian at byte `offset` of `path`
                           (a tensor of a .safetensors file): read by mmap of the
                           block's own bytes (ein_raw_read_box) */
    EIN_LOAD_ZERO = 2,  /* no path: zeros (a state tensor, issue 25: loaded once,
                           then written in place by the program's cache_write
                           KERNEL, whose dst IS that LOAD's dst (== srcs[0]).
                           Like every buffer a LOAD fills, it lives as long as
                           the session: a memory planner never reuses its bytes) */
    /* Like RAW, but the file holds f32 (F16_QUANT: f16, BF16_QUANT: bf16)
     * elements that the load quantizes into the buffer's block dtype
     * (q8_0, q4_0: issue 36), each device its own block: einrun --weights
     * and load_safetensors binding a float tensor to a quantized input. */
    EIN_LOAD_RAW_F32_QUANT = 3,
    EIN_LOAD_RAW_F16_QUANT = 4,
    EIN_LOAD_RAW_BF16_QUANT = 5,
    EIN_LOAD_FORMAT_COUNT
} ein_load_format;

/* The dtype of the elements a LOAD of format f reads from its file into a
 * buffer of dtype t: t itself for RAW (and NPY), the float dtype a
 * *_QUANT format names; 1 in *raw when the format reads raw bytes at an
 * offset. */
ein_dtype ein_load_file_dtype(ein_load_format f, ein_dtype t, int *raw);

typedef enum ein_instr_kind {
    EIN_I_LOAD = 0, /* dst <- box of an input: `path` (.npy or raw at `offset`), or generated from (seed, key) */
    EIN_I_STORE,    /* srcs[0] -> its box of the output .npy `path` */
    EIN_I_KERNEL,   /* dst <- kernel(srcs...) */
    EIN_I_SLICE,    /* dst <- the part of srcs[0] inside dst's box (decompose) */
    EIN_I_CONCAT,   /* dst <- srcs stitched; each src box lies in dst's box (recompose) */
    EIN_I_AGG,      /* dst <- agg(srcs), all of dst's box */
    EIN_I_COPY,     /* dst <- buffer `peer_buf` of device `peer`, once the peer said ready */
    EIN_I_NOTIFY,   /* tell device `peer` that buffer srcs[0] is ready to be copied */
    EIN_I_WAIT,     /* wait until device `peer` said its buffer `peer_buf` is ready (a
                       NOTIFY of it); moves nothing. The memory planner
                       (coordinator/compile/co_memplan.h) uses it as the acknowledgement
                       that a peer's COPY from this device is complete: the peer
                       NOTIFYs the COPY's dst back, and what overwrites the copied
                       bytes here depends on this WAIT. A backend orders the
                       device work after it behind the peer's completed work, as
                       for a COPY */
    EIN_I_COUNT
} ein_instr_kind;

typedef struct ein_instr {
    ein_instr_kind kind;
    int32_t *deps;          /* earlier instruction ids */
    int32_t ndeps;
    int32_t *srcs;          /* local buffer ids read */
    int32_t nsrcs;
    int32_t dst;            /* local buffer id written, -1 if none */
    char op[EIN_NAME_MAX];  /* the graph operator this belongs to, for reports */
    ein_kernel kernel;      /* KERNEL */
    ein_agg agg;            /* AGG */
    char *path;             /* LOAD (NULL: generate) and STORE */
    uint64_t seed, key;     /* LOAD generated: value = ein_rand_value(seed, key, flat index) */
    ein_load_format format; /* LOAD: how `path` holds the tensor (NPY when generated) */
    uint64_t offset;        /* LOAD RAW: byte offset of the tensor's first element; else 0 */
    int rank;               /* LOAD/STORE: shape of the whole tensor in the file */
    int64_t shape[EIN_MAX_RANK];
    int32_t peer;           /* COPY: source device; NOTIFY: device told */
    int32_t peer_buf;       /* COPY / NOTIFY: buffer id on the source device */
    uint64_t peer_offset;   /* COPY: byte offset of that buffer in the peer's segment */
    /* Entry points (coordinator/compile/co_entries.h): bit e set = a run of entry
     * e + 1 runs this instruction; 0 (every program without entry points)
     * = every run runs it. A run of entry 0 runs everything. */
    uint32_t entries;
} ein_instr;

typedef struct ein_program {
    int32_t device;         /* this worker's device index, 0..ndevices-1 */
    int32_t ndevices;
    uint64_t segment_bytes; /* size of this device's buffer segment */
    uint64_t unplanned_bytes; /* the segment every buffer would need in a place of
                                 its own (the memory planner's "before"; reports
                                 only, not on the wire; 0: not planned) */
    ein_pbuffer *buffers;
    int32_t nbuffers;
    ein_instr *instrs;
    int32_t ninstrs;
    int32_t cap_buffers, cap_instrs; /* builder bookkeeping */
} ein_program;

const char *ein_instr_kind_name(ein_instr_kind k);
/* Names from common/ir/ein_ops.def; "?" for a value out of range. */
const char *ein_unary_name(ein_unary u);
const char *ein_binary_name(ein_binary b);
/* The operator name of a binary function in .ein, the C API and Python
 * ("maximum" where ein_binary_name says "max"). */
const char *ein_binary_op_name(ein_binary b);
/* 1 if unary function u takes a constant (scale, addc), else 0. */
int ein_unary_takes_scalar(ein_unary u);
/* The unary function named `name` / the binary one whose operator name is
 * `op` (ein_binary_op_name); -1 for none (NULL included). */
int ein_unary_by_name(const char *name);
int ein_binary_by_op_name(const char *op);
const char *ein_kernel_kind_name(ein_kernel_kind k);
const char *ein_agg_name(ein_agg a);

/* The one arity check of a kernel (the validator and both kernel sets use
 * it): `n` sources for kind k, as the registry (common/ir/ein_ops.def) says;
 * ATTENTION_PARTIAL takes q alone or q, k, v. Returns 0, or EIN_EINVAL with
 * "<kind> kernel takes N source(s), has M" in `err` (an unknown kind too). */
int ein_kernel_check_arity(ein_kernel_kind k, int n, ein_error *err);

/* Builders. ein_program_new returns NULL on allocation failure. */
ein_program *ein_program_new(int32_t device, int32_t ndevices);
void ein_program_free(ein_program *p);
/* Append a buffer at the end of the segment (256-byte aligned); returns its
 * id (>= 0) or a negative code. */
int ein_program_add_buffer(ein_program *p, ein_dtype dtype, const ein_box *box,
                           ein_error *err);
/* Append a copy of *ins (deps, srcs, path and kernel.list are copied; the
 * Program owns and frees its copies); returns its id. A kernel list with
 * nlist < 0, nlist > EIN_KERNEL_LIST_MAX or a NULL list for nlist > 0 is
 * EIN_EINVAL. */
int ein_program_add_instr(ein_program *p, const ein_instr *ins, ein_error *err);

/* Structural validation: ids and dependencies in range and earlier, buffer
 * extents inside the segment, byte sizes matching boxes, source counts and
 * box containment per kind, strings terminated, peers in range. Everything
 * the worker relies on is checked here, so a decoded Program that passes
 * cannot make the worker read or write out of bounds. Returns 0 or
 * EIN_EPROTO with a message naming the instruction or buffer.
 *
 * Per kind (beyond ids in range): buffer boxes have rank 0..8 and
 * 0 <= lo < hi; offsets are multiples of the element size;
 * LOAD: no srcs, a dst inside [0, shape), format NPY or RAW, RAW only with
 * a path, offset 0 unless RAW and offset + the tensor's bytes below 2^63;
 * STORE: one src inside [0, shape),
 * dst -1, a non-empty path; KERNEL: a dst, the source count and dtypes
 * the registry gives its kind (ein_kernel_check_arity,
 * ein_dtype_kernel_ok), and its kind's block rules: one row per kind in
 * common/ir/ein_kernel_rules.c (ein_kernel_rules_of(kind)->rules says them
 * in words; the message names the kind and the rule broken).
 * Every instruction: kernel nlist in 0..EIN_KERNEL_LIST_MAX, list NULL iff
 * nlist == 0, non-zero only for ROPE/ATTENTION/CONCAT kernels.
 * Instruction SLICE: one src whose box contains dst's, same
 * dtype; CONCAT: >= 1 srcs inside dst's box, same dtype; AGG: agg SUM or
 * MAX or LSE, >= 1 srcs with dst's box and dtype (LSE: rank >= 1, last
 * interval [0, w) with w >= 2, f32); COPY: no srcs, a dst, peer in
 * range and not this device, peer_buf >= 0 (peer_offset is checked by the
 * worker against the peer's exported segment); NOTIFY: one src, dst -1,
 * peer in range and not this device; WAIT: no srcs, dst -1, peer in range
 * and not this device, peer_buf >= 0. Buffers may share bytes (a view of
 * a buffer's rows, or buffers the memory planner placed in the same bytes
 * at different times): nothing here checks which overlap, the DAG orders
 * their users. */
int ein_program_validate(const ein_program *p, ein_error *err);

/* msgpack encoding (a map; see ein_wire.h for the envelope). The encoded
 * bytes are malloc'd and owned by the caller (free()). Encoding does not
 * validate (call ein_program_validate first; tests encode invalid programs
 * on purpose): it refuses, with EIN_EINVAL, only what it cannot read
 * safely (negative counts, NULL arrays, ranks outside 0..8). */
int ein_program_encode(const ein_program *p, void **buf, size_t *len, ein_error *err);
/* Pre-scan, decode and validate; on success *out is a new Program owned by
 * the caller. Malformed input is EIN_EPROTO (*out untouched). */
int ein_program_decode(const void *buf, size_t len, ein_program **out, ein_error *err);

/* The same, one level down, for a Program nested in a message (ein_wire.c):
 * ein_program_pack appends the Program's map to `pk` (EIN_ENOMEM if the
 * packer's buffer cannot grow); ein_program_unpack builds a Program from an
 * unpacked object (of pre-scanned bytes), checks every field's type and
 * range, validates it, and returns 0 or EIN_EPROTO / EIN_ENOMEM. */
struct msgpack_packer;
struct msgpack_object;
int ein_program_pack(struct msgpack_packer *pk, const ein_program *p, ein_error *err);
int ein_program_unpack(const struct msgpack_object *o, ein_program **out, ein_error *err);

/* One kernel the same way (a graph node's kernel in a saved program,
 * coordinator/compile/ein_compiled_file.c): ein_kernel_pack appends its map
 * ("kind" and the fields of that kind) and returns msgpack's 0 / -1;
 * ein_kernel_unpack fills *k (zeroed by the caller; k->list is the
 * caller's to free, even on failure) and returns 0 or EIN_EPROTO /
 * EIN_ENOMEM naming `what`. */
int ein_kernel_pack(struct msgpack_packer *pk, const ein_kernel *k);
int ein_kernel_unpack(const struct msgpack_object *o, ein_kernel *k, const char *what,
                      ein_error *err);

#endif
