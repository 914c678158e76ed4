/* kernels/cuda/kn_sdpa_graph.h — the scaled-dot-product attention graph
 * we hand to cuDNN, as plain data: tensors (uid, dtype, dims, strides,
 * virtual / by value, ragged offsets) and operations (kind, mode, compute
 * type, inputs, outputs, attributes). Plain C with its own small enums: it
 * compiles and is tested without CUDA or cuDNN. kn_sdpa_emit.h turns a
 * description into cuDNN backend descriptors.
 *
 * The graph is the one cuDNN's frontend lowers SDPA forward to on cuDNN
 * 9.19 (../shared/notes/gpu-attention.md §2, "the canonical 14-op list"):
 *   S = Q K^T ; S1 = S * scale ; [padding mask] ; [causal mask] ;
 *   M = max S2 ; E = exp(S2 - M) ; Z = sum E ; Stats = M + log Z ;
 *   P = E / Z (in the I/O dtype) ; O = P V
 * every pointwise op with alpha1 = alpha2 = 1 and NaN propagation.
 *
 * Layout: our blocks are head-major, Q [Hq, T, d], K and V [Hkv, T, d],
 * O [Hq, T, d], Stats f32 [Hq, T] (T the block's tokens, the row pitch).
 * One sequence: 4-D views [1, H, S, d] with S = T. Packed sequences: the
 * batch is the sequences, [b, H, S_max, d] with ragged offsets (element
 * offset of sequence i's first row: seg[i] * d, seg[i] for Stats) and the
 * padding mask over SEQ_LEN_Q / SEQ_LEN_KV int32 [b, 1, 1, 1] tensors, as
 * PyTorch's nested-tensor path builds it (there token-major; ours is
 * head-major, which the first GPU run must confirm).
 *
 * Ownership: a kn_sdpa_graph is a plain value (no pointers into the
 * heap); build fills the caller's. */
#ifndef KN_SDPA_GRAPH_H
#define KN_SDPA_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { KN_SG_F32, KN_SG_BF16, KN_SG_F16, KN_SG_I32, KN_SG_BOOL } kn_sg_dtype;
typedef enum { KN_SG_MATMUL, KN_SG_POINTWISE, KN_SG_REDUCTION } kn_sg_opkind;
typedef enum {
    KN_SG_PW_MUL, KN_SG_PW_ADD, KN_SG_PW_SUB, KN_SG_PW_DIV, KN_SG_PW_EXP, KN_SG_PW_LOG,
    KN_SG_PW_GEN_INDEX, KN_SG_PW_CMP_GE, KN_SG_PW_CMP_LT, KN_SG_PW_LOGICAL_AND,
    KN_SG_PW_BINARY_SELECT
} kn_sg_pwmode;
typedef enum { KN_SG_RED_MAX, KN_SG_RED_ADD } kn_sg_redop;

/* Real tensors' uids; virtual ones are KN_SG_UID_VIRTUAL and up. */
enum {
    KN_SG_UID_Q = 1, KN_SG_UID_K, KN_SG_UID_V, KN_SG_UID_O, KN_SG_UID_SCALE, KN_SG_UID_FILL,
    KN_SG_UID_STATS, KN_SG_UID_SEQ_Q, KN_SG_UID_SEQ_KV, KN_SG_UID_OFF_Q, KN_SG_UID_OFF_K,
    KN_SG_UID_OFF_V, KN_SG_UID_OFF_O, KN_SG_UID_OFF_STATS, KN_SG_UID_PAD_FILL,
    KN_SG_UID_VIRTUAL = 101
};

#define KN_SG_MAX_TENSORS 48
#define KN_SG_MAX_OPS 24
#define KN_SG_NONE (-1)

typedef struct kn_sg_tensor {
    int64_t uid;
    kn_sg_dtype dtype;
    int64_t dims[4], strides[4];
    int is_virtual, by_value;
    int ragged;           /* index of its ragged-offset tensor, or KN_SG_NONE */
    const char *name;     /* static text, for messages and tests */
} kn_sg_tensor;

typedef struct kn_sg_op {
    kn_sg_opkind kind;
    int mode;             /* kn_sg_pwmode or kn_sg_redop */
    kn_sg_dtype prec;     /* compute type */
    int64_t axis;         /* GEN_INDEX: the axis; else -1 */
    /* tensor indices (KN_SG_NONE when absent). Pointwise: y = mode(x, b, t)
     * (BINARY_SELECT: t ? x : b). Reduction: y = red(x). Matmul: y = x b. */
    int x, b, t, y;
    /* matmul: the tensors overriding M, N, K (SEQ_LEN_Q / KV), or NONE */
    int m_override, n_override, k_override;
    float alpha1, alpha2; /* pointwise */
    int nan_propagate;    /* pointwise: 1 = propagate NaN */
} kn_sg_op;

typedef struct kn_sg_params {
    kn_sg_dtype io;       /* KN_SG_BF16 or KN_SG_F16 */
    int64_t hq, hkv, d;
    int64_t t;            /* tokens of the block: the row pitch of every head */
    int64_t s;            /* one sequence: == t; packed: the longest sequence (bucket) */
    int nseq;             /* 0: one sequence [0, t); > 0: nseq packed sequences */
    int causal;           /* 1: row i sees keys <= i (of its own sequence) */
    int stats;            /* 1: Stats (m + log sum exp, f32) is a real output */
    size_t cudnn_version; /* cudnnGetVersion(): -inf fill from 91000, lowest before */
    /* Variants for the probe (tools/gpu-check); 0 in production:
     * no_stats_ops: leave out LOG and ADD (the graph before issue 33);
     * p_f32: P in f32 instead of the I/O dtype; gen_index_f32: GEN_INDEX
     * computed in f32 (INT32 output). */
    int no_stats_ops, p_f32, gen_index_f32;
} kn_sg_params;

typedef struct kn_sdpa_graph {
    kn_sg_params p;
    kn_sg_tensor t[KN_SG_MAX_TENSORS];
    int nt;
    kn_sg_op op[KN_SG_MAX_OPS];
    int nop;
    float scale, fill, pad_fill; /* the by-value tensors' values */
    /* indices into t of the real tensors (KN_SG_NONE when absent) */
    int q, k, v, o, stats, scale_t, fill_t, pad_fill_t, seq_q, seq_kv;
    int off_q, off_k, off_v, off_o, off_stats;
} kn_sdpa_graph;

/* The description for p into *g. 0, or EIN_EUNSUPPORTED with why (a
 * shape the graph does not describe: dtypes other than bf16/f16, head dims
 * other than 64 and 128, Hq not a multiple of Hkv, s > t, sizes out of
 * int32 range) or EIN_EINVAL (a malformed p). */
int kn_sdpa_graph_build(const kn_sg_params *p, kn_sdpa_graph *g, char *why, size_t cap);

/* The uid-less names of the enums, for messages and tests. */
const char *kn_sg_dtype_name(kn_sg_dtype t);
const char *kn_sg_pwmode_name(kn_sg_pwmode m);

#ifdef __cplusplus
}
#endif

#endif
