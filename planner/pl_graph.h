/* planner/pl_graph.h — the graph IR: abstract operators over named tensors.
 *
 * Every node produces exactly one tensor, so a node id is also a tensor id.
 * Nodes are appended in a topological order (an operator's inputs always
 * have smaller ids). The builder functions check shapes and dtypes and fail
 * with EIN_ESHAPE / EIN_EINVAL and a message naming the operator; the
 * public C API (include/einsummable/einsummable.h), and through it the .ein parser, is
 * built on them. Inputs and save are here (pl_graph.c); each operator's
 * builder lives in its file under planner/ops/.
 *
 * Ownership: a pl_graph owns its nodes; pl_graph_free releases everything.
 * Pointers returned by pl_graph_node stay valid until the next add. */
#ifndef PL_GRAPH_H
#define PL_GRAPH_H

#include <stdint.h>

#include "common/ir/ein_box.h"
#include "common/ir/ein_dtype.h"
#include "common/ir/ein_einsum.h"
#include "common/base/ein_error.h"
#include "common/base/ein_nameidx.h"
#include "common/ir/ein_program.h"

/* The largest size of one dimension (2^40): far above any real tensor, and
 * low enough that sums and products of a few sizes stay well inside int64. */
#define PL_DIM_MAX ((int64_t)1 << 40)

/* Most tensor inputs of one operator (concat takes up to this many). */
#define PL_MAX_INPUTS 16
/* Longest axis label kept on a node (dim names of the program). */
#define PL_AXIS_NAME_MAX 24

/* An input, then the operators of common/ir/ein_ops.def's EIN_GRAPH_OP list
 * (PL_EINSUM, PL_UNARY, ..., PL_MERGE_HEADS; what each keeps in
 * pl_node.kernel is said there). */
typedef enum pl_node_kind {
    PL_INPUT = 0,
#define EIN_GRAPH_OP(kind, def) PL_##kind,
#include "common/ir/ein_ops.def"
    PL_NODE_KIND_COUNT
} pl_node_kind;

typedef struct pl_node {
    char name[EIN_NAME_MAX];
    pl_node_kind kind;
    ein_dtype dtype;
    int rank;
    int64_t shape[EIN_MAX_RANK];
    int ninputs;
    int inputs[PL_MAX_INPUTS]; /* node ids */
    ein_kernel kernel;      /* what the operator computes (kind matches);
                               kernel.list is owned by the node */
    char axis_name[EIN_MAX_RANK][PL_AXIS_NAME_MAX]; /* dim names, "" unknown */
    int saved;              /* `save NAME` seen */
    int state;              /* PL_INPUT only: a state tensor (issue 25): zeros when a
                               session starts, never loaded, written in place by
                               its one cache_write, kept across runs */
    int line, col;          /* source position, 0 when built through the API */
} pl_node;

typedef struct pl_graph {
    pl_node *nodes;
    int nnodes, cap;
    /* Name index (private to pl_graph.c; common/base/ein_nameidx.h), covering
     * nodes[0..index.n). Rebuilt when stale, so a graph zero-initialised or
     * extended by hand still works; node names must not change once added. */
    ein_nameidx index;
} pl_graph;

/* Einsum subscripts are parsed by ein_einsum_parse (common/ir/ein_einsum.h). */

pl_graph *pl_graph_new(void);               /* NULL on allocation failure */
void pl_graph_free(pl_graph *g);
/* A deep copy (its own kernel lists and name index), or NULL when out of
 * memory. */
pl_graph *pl_graph_copy(const pl_graph *g);
/* A copy of nodes 0..n-1 only (n clamped to the graph; inputs of a node
 * always have lower ids, so the prefix is a graph); NULL on allocation
 * failure. Nodes keep their `saved` flags and no other is saved. */
pl_graph *pl_graph_copy_prefix(const pl_graph *g, int n);

const pl_node *pl_graph_node(const pl_graph *g, int id);
int pl_graph_find(const pl_graph *g, const char *name);   /* id or -1 */

/* Each add returns the new node id (>= 0) or a negative EIN_E* code.
 * Names must be unique and non-empty (EIN_EINVAL otherwise). */
int pl_graph_add_input(pl_graph *g, const char *name, ein_dtype dtype, int rank,
                       const int64_t *shape, ein_error *err);
/* Two-operand (b >= 0) or one-operand (b == -1) contraction. */
int pl_graph_add_einsum(pl_graph *g, const char *name, const char *subscripts,
                        int a, int b, ein_error *err);
/* Sugar for einsum "ij,jk->ik" on matrices. */
int pl_graph_add_matmul(pl_graph *g, const char *name, int a, int b, ein_error *err);
int pl_graph_add_unary(pl_graph *g, const char *name, ein_unary op, double scalar,
                       int x, ein_error *err);
int pl_graph_add_binary(pl_graph *g, const char *name, ein_binary op, int a, int b,
                        ein_error *err);
int pl_graph_save(pl_graph *g, int id, ein_error *err);
/* A state tensor (a key/value cache): an input the session keeps on the
 * devices, zero at the start, written only by one cache_write. */
int pl_graph_add_state(pl_graph *g, const char *name, ein_dtype dtype, int rank,
                       const int64_t *shape, ein_error *err);

/* ---- The operators of a transformer block (planner/ops/). ----------
 * Each checks its inputs' shapes and dtypes and fails with EIN_ESHAPE and
 * a message naming the operator; the graph is unchanged on failure.
 * `seq_ends` (sorted, strictly increasing, the last equal to the tokens
 * dim) is copied into the node; nseq == 0 means one sequence. */
/* softmax over `axis` (negative counts from the end). */
int pl_graph_add_softmax(pl_graph *g, const char *name, int x, int axis, ein_error *err);
/* x [..., d], w [d] (and b [d] for layernorm, b = -1 for rmsnorm). */
int pl_graph_add_norm(pl_graph *g, const char *name, int x, int w, int b, double eps,
                      ein_error *err);
/* x [tokens, H*head_dim]; interleaved pairs. */
int pl_graph_add_rope(pl_graph *g, const char *name, int x, int64_t head_dim, double theta,
                      const int64_t *seq_ends, int nseq, ein_error *err);
/* The same with a pairing style (ein_rope_style; others are EIN_EINVAL). */
int pl_graph_add_rope_style(pl_graph *g, const char *name, int x, int64_t head_dim, double theta,
                            const int64_t *seq_ends, int nseq, int style, ein_error *err);
/* q [Hq, S, D], k and v [Hkv, S, D], Hq a multiple of Hkv; window W >= 0
 * (0: full causal; else query t sees keys u with t - W < u <= t;
 * negative: EIN_EINVAL). */
int pl_graph_add_attention(pl_graph *g, const char *name, int q, int k, int v,
                           const int64_t *seq_ends, int nseq, int64_t window, ein_error *err);
/* Reduce with EIN_AGG_SUM or EIN_AGG_MAX over the axes in mask `axes`
 * (at least one axis must remain). */
int pl_graph_add_reduce(pl_graph *g, const char *name, ein_agg op, uint32_t axes, int x,
                        ein_error *err);
int pl_graph_add_concat(pl_graph *g, const char *name, int axis, const int *xs, int n,
                        ein_error *err);
/* x[..., start:end, ...] along `axis`. */
int pl_graph_add_slice(pl_graph *g, const char *name, int x, int axis, int64_t start,
                       int64_t end, ein_error *err);
/* [T, H*D] -> [H, T, D] and back. */
int pl_graph_add_split_heads(pl_graph *g, const char *name, int x, int64_t head_dim,
                             ein_error *err);
int pl_graph_add_merge_heads(pl_graph *g, const char *name, int x, ein_error *err);
/* out[t, :] = table[ids[t], :]: table [rows, dim] f32/f16/bf16, ids [tokens]
 * i32 or i64; out [tokens, dim] in the table's dtype. */
int pl_graph_add_embedding(pl_graph *g, const char *name, int table, int ids, ein_error *err);
/* Generation (planner/ops/generate.c). cache_write: state [KVH, B, S, D]
 * (pl_graph_add_state, not yet written by another cache_write), x [KVH, B,
 * D], pos [B] (i32/i64): the state with x[:, b] at row pos[b] of sequence
 * b; the output IS the state (same buffers). decode_attention: q [H, B, D],
 * k, v [KVH, B, S, D], pos [B]: query b attends to keys [0, pos[b]], or
 * [pos[b] - W + 1, pos[b]] with a window W > 0 (negative: EIN_EINVAL).
 * rope_at: x [T, H*head_dim] rotated at positions pos [T]. */
int pl_graph_add_cache_write(pl_graph *g, const char *name, int state, int x, int pos,
                             ein_error *err);
int pl_graph_add_decode_attention(pl_graph *g, const char *name, int q, int k, int v, int pos,
                                  int64_t window, ein_error *err);
int pl_graph_add_rope_at(pl_graph *g, const char *name, int x, int pos, int64_t head_dim,
                         double theta, int style, ein_error *err);
/* Set the frequency scaling (common/ir/ein_rope.h) of rope or rope_at node id:
 * 0, or EIN_EINVAL (another kind, an invalid scaling; the node unchanged). */
int pl_graph_set_rope_scaling(pl_graph *g, int id, const ein_rope_scaling *s, ein_error *err);

/* Name the axes of node `id` (labels for reports; NULL entries skipped). */
void pl_graph_set_axis_name(pl_graph *g, int id, int axis, const char *name);
/* A short name of the operator ("matmul"-like einsums say "einsum"). */
const char *pl_node_op_name(const pl_node *n);

/* Set the source position of node `id` (used by the parser for messages). */
void pl_graph_set_pos(pl_graph *g, int id, int line, int col);

/* Number of operators that read node `id` (a save does not count). */
int pl_graph_nconsumers(const pl_graph *g, int id);

#endif
