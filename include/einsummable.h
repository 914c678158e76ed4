/* include/einsummable.h — the public C API of Einsummable (paper §2).
 *
 * A program builds a graph of abstract operators over zero-bounded tensors,
 * marks its outputs, and asks for a plan on P devices; it never says how an
 * operator is split or where data moves. The paper's Python example
 *
 *     graph = es.createGraph()
 *     x  = graph.insertTensor(es.tensorDesc([tokens, d_model], dtype))
 *     ...
 *     act = graph.matmul(x, w1); hidden = graph.unary(act, "relu", 0.0)
 *     graph.save(y); es.compileGraph(graph, device=[0, 1, 2, 3])
 *
 * reads in C (examples/ffn_api.c):
 *
 *     ein_graph *g = ein_graph_create();
 *     ein_tensor x = ein_graph_insert_tensor(g, "x", ein_tensor_desc_2d(T, D, EIN_F32), &err);
 *     ...
 *     ein_tensor act = ein_graph_matmul(g, "act", x, w1, &err);
 *     ein_tensor hid = ein_graph_unary(g, "hidden", "relu", 0.0, act, &err);
 *     ein_graph_save(g, y, &err);
 *     ein_graph_plan(g, 4, NULL, &plan, &err);
 *
 * Conventions: every function that can fail takes an ein_error (may be
 * NULL) and returns a negative EIN_E* code on failure (common/ein_error.h),
 * leaving the graph unchanged. Tensors are small integer handles (>= 0)
 * valid for the graph that made them. Names are unique, 1..63 characters;
 * NULL asks for a generated name ("t17"). The .ein parser
 * (planner/pl_parse.c) is built on these calls.
 *
 * Ownership: ein_graph_destroy frees a graph and everything in it;
 * ein_plan_free frees a plan (which does not reference the graph after it
 * is made, except for names read through ein_plan_op). */
#ifndef EINSUMMABLE_H
#define EINSUMMABLE_H

#include <stddef.h>
#include <stdint.h>

#include "common/ein_dtype.h"
#include "common/ein_error.h"
#include "common/ein_rope.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pl_graph ein_graph;     /* the planner's graph IR, opaque here */
typedef struct ein_plan ein_plan;
typedef int ein_tensor;

#define EIN_DESC_MAX_RANK 8

/* A zero-bounded tensor type: [shape[0], ..., shape[rank-1]] of dtype; each
 * axis may carry the name of its dim ("tokens") for reports. */
typedef struct ein_tensor_desc {
    int rank;
    int64_t shape[EIN_DESC_MAX_RANK];
    ein_dtype dtype;
    const char *dim_names[EIN_DESC_MAX_RANK];  /* NULL entries: unnamed */
} ein_tensor_desc;

ein_tensor_desc ein_tensor_desc_1d(int64_t n, ein_dtype dtype);
ein_tensor_desc ein_tensor_desc_2d(int64_t rows, int64_t cols, ein_dtype dtype);
ein_tensor_desc ein_tensor_desc_3d(int64_t a, int64_t b, int64_t c, ein_dtype dtype);

/* ---- graphs ---------------------------------------------------------- */
ein_graph *ein_graph_create(void);                 /* NULL when out of memory */
void ein_graph_destroy(ein_graph *g);

/* A graph input. */
ein_tensor ein_graph_insert_tensor(ein_graph *g, const char *name, ein_tensor_desc desc,
                                   ein_error *err);
/* Mark a tensor as an output (each at most once). */
int ein_graph_save(ein_graph *g, ein_tensor t, ein_error *err);

/* ---- abstract operators ---------------------------------------------- */
ein_tensor ein_graph_matmul(ein_graph *g, const char *name, ein_tensor a, ein_tensor b,
                            ein_error *err);
/* Explicit subscripts ("bij,bjk->bik", "ij->j"); b = -1 for one operand. */
ein_tensor ein_graph_einsum(ein_graph *g, const char *name, const char *subscripts,
                            ein_tensor a, ein_tensor b, ein_error *err);
/* op: relu, silu, gelu, exp, neg, sigmoid, tanh, square, scale (x*c),
 * addc (x+c); c is ignored by the others. */
ein_tensor ein_graph_unary(ein_graph *g, const char *name, const char *op, double c,
                           ein_tensor x, ein_error *err);
/* op: add, sub, mul, div, maximum; numpy broadcasting. */
ein_tensor ein_graph_binary(ein_graph *g, const char *name, const char *op, ein_tensor a,
                            ein_tensor b, ein_error *err);
ein_tensor ein_graph_softmax(ein_graph *g, const char *name, ein_tensor x, int axis,
                             ein_error *err);
ein_tensor ein_graph_rmsnorm(ein_graph *g, const char *name, ein_tensor x, ein_tensor w,
                             double eps, ein_error *err);
ein_tensor ein_graph_layernorm(ein_graph *g, const char *name, ein_tensor x, ein_tensor w,
                               ein_tensor b, double eps, ein_error *err);
/* seq_ends: sorted ends of the packed sequences, the last = tokens
 * (nseq = 0: one sequence). */
ein_tensor ein_graph_rope(ein_graph *g, const char *name, ein_tensor x, int64_t head_dim,
                          double theta, const int64_t *seq_ends, int nseq, ein_error *err);
/* The same with the pairing of a head's elements: EIN_ROPE_INTERLEAVED
 * (what ein_graph_rope does: pairs 2i, 2i+1, Meta's LLaMA code) or
 * EIN_ROPE_HALF (pairs i, i + head_dim/2: Hugging Face's rotate_half, what
 * transformers checkpoints expect; docs/hf-llama.md). Another style is
 * EIN_EINVAL. */
ein_tensor ein_graph_rope_ex(ein_graph *g, const char *name, ein_tensor x, int64_t head_dim,
                             double theta, const int64_t *seq_ends, int nseq,
                             ein_rope_style style, ein_error *err);
ein_tensor ein_graph_attention(ein_graph *g, const char *name, ein_tensor q, ein_tensor k,
                               ein_tensor v, const int64_t *seq_ends, int nseq,
                               ein_error *err);
/* op: "sum" or "max"; axes: bit i = axis i. */
ein_tensor ein_graph_reduce(ein_graph *g, const char *name, const char *op, uint32_t axes,
                            ein_tensor x, ein_error *err);
ein_tensor ein_graph_concat(ein_graph *g, const char *name, int axis, const ein_tensor *xs,
                            int n, ein_error *err);
ein_tensor ein_graph_slice(ein_graph *g, const char *name, ein_tensor x, int axis,
                           int64_t start, int64_t end, ein_error *err);
ein_tensor ein_graph_split_heads(ein_graph *g, const char *name, ein_tensor x,
                                 int64_t head_dim, ein_error *err);
ein_tensor ein_graph_merge_heads(ein_graph *g, const char *name, ein_tensor x,
                                 ein_error *err);

/* ---- planning (the logical half of the paper's compileGraph) ---------- */
typedef struct ein_plan_options {
    const char *selector;   /* "dp" (default), "greedy" or "random" */
    uint64_t seed;          /* for "random" */
    int linear_paths;       /* the linear-path tactic (paper §4.5) */
} ein_plan_options;

/* Choose one join-agg spec per operator for `devices` devices (opts may be
 * NULL). An operator too small to split `devices` ways runs on fewer (the
 * largest count it allows, at least one device). */
int ein_graph_plan(const ein_graph *g, int devices, const ein_plan_options *opts,
                   ein_plan **out, ein_error *err);
double ein_plan_total_cost(const ein_plan *plan);
int ein_plan_nops(const ein_plan *plan);
/* Operator i (0 <= i < nops, in graph order): its name, operator kind,
 * split ("tokens:8 d_model:1") and sub-costs (any pointer may be NULL).
 * Returns 0, or EIN_EINVAL for i out of range. */
int ein_plan_op(const ein_plan *plan, int i, const char **name, const char **op,
                char *split, size_t split_len, double *repartition, double *join,
                double *aggregation);
void ein_plan_free(ein_plan *plan);

/* Parse a .ein program (docs/ein-language.md) into a graph. */
int ein_graph_parse_file(const char *path, ein_graph **out, ein_error *err);

#ifdef __cplusplus
}
#endif

#endif
