/* planner/pl_spec.h — join-agg specs, produced by each operator from a request.
 *
 * An operator names its shardable indices (pl_op_indices). A request gives
 * an interval count per shardable index; pl_spec_make returns exactly
 * prod(counts) function specifications, one per combination of intervals
 * (row-major over the indices, the last index fastest), with near-equal
 * intervals. For p devices that is p of them, or fewer for an operator too
 * small to split p ways (see pl_spec_enumerate). The optimizer never looks inside an operator: it only asks for
 * specs and reads their boxes.
 *
 * Ownership: pl_spec_make / pl_spec_enumerate fill caller-provided structs
 * whose arrays are malloc'd; release with pl_spec_clear (or
 * pl_spec_array_free for an enumerated array).
 *
 * Replicated specs (pl_spec_make_replicated) are the one exception to
 * "nothing is computed twice": the whole operator on each of the p
 * devices, its output on all of them (a residual add or an rmsnorm of one
 * token, computed where the next projections read it, as Megatron does). */
#ifndef PL_SPEC_H
#define PL_SPEC_H

#include <stdint.h>

#include "common/ir/ein_box.h"
#include "common/base/ein_error.h"
#include "common/ir/ein_program.h"
#include "planner/pl_graph.h"

#define PL_MAX_INDICES 26

/* A shardable index. `any` indices split anywhere into near-equal
 * intervals; a `step` > 1 allows splits only at multiples of step (rope's
 * hidden dim at head boundaries); `pos` lists the only allowed split
 * points (sorted, strictly inside (0, size): attention's sequence ends).
 * With positions, split points are taken from the list as close as
 * possible to the equal split; a count above npos + 1 has no spec. */
typedef struct pl_index {
    char name;          /* einsum letter, or 'a'+i for other operators */
    char label[PL_AXIS_NAME_MAX]; /* dim name for reports ("tokens") */
    int64_t size;
    int any;            /* 1: no position list */
    int64_t step;       /* split points at multiples of step (1: anywhere) */
    const int64_t *pos; /* allowed split points (owned by the node) */
    int npos;
    int maxcount;       /* > 0: at most this many intervals (0: no cap) */
} pl_index;

/* One function specification: the projected input types and output type.
 * in[k] points into the spec's storage; an input the function does not
 * read has an empty box (lo == hi in some dim; concat only). */
typedef struct pl_fspec {
    ein_box *in;
    ein_box out;
} pl_fspec;

typedef struct pl_spec {
    int nidx;
    int counts[PL_MAX_INDICES]; /* the request: intervals per shardable index */
    int nparts;                 /* prod(counts) */
    int ninputs;
    pl_fspec *f;                /* nparts function specifications */
    ein_box *in_boxes;          /* storage of f[i].in: nparts * ninputs boxes */
    ein_agg agg;                /* how outputs with the same type combine */
    int cap;                    /* parts the arrays can hold (pl_spec_remake) */
    /* 1: a replicated spec (pl_spec_make_replicated): every index count 1,
     * the whole operator computed by each of the nparts devices, all
     * f[i] identical, its output held on every one of them. Its copies
     * are equal values, never partials: agg is EIN_AGG_NONE and nothing
     * aggregates them. 0: every other spec (each box computed once, or a
     * partial of an aggregation). */
    int replicated;
} pl_spec;

/* A tiling: the distinct non-empty boxes of a spec, sorted (canonical form). */
typedef struct pl_tiling {
    int n;
    ein_box *boxes;
} pl_tiling;

/* The shardable indices of operator `node` (not an input); returns count. */
int pl_op_indices(const pl_graph *g, int node, pl_index *idx, ein_error *err);

/* [lo, hi) of interval `part` when [0, size) is split into `count`
 * near-equal intervals (the first size % count get one more element). */
void pl_interval(int64_t size, int count, int part, int64_t *lo, int64_t *hi);

/* The operator's aggregation if its indices were split by `counts`. */
ein_agg pl_op_agg(const pl_graph *g, int node, const int *counts);
/* The same for indices `idx` (nidx of them) pl_op_indices gave for the
 * operator `node`, and its function specification for the intervals
 * [lo[i], hi[i]) of those indices: its input boxes in[ninputs] and output
 * box (the operator's fspec, planner/ops/pl_ops.h). */
ein_agg pl_op_agg_idx(const pl_graph *g, int node, const pl_index *idx, int nidx,
                      const int *counts);
void pl_op_fspec(const pl_graph *g, int node, const pl_index *idx, int nidx, const int64_t *lo,
                 const int64_t *hi, ein_box *in, ein_box *out);

int pl_spec_make(const pl_graph *g, int node, const int *counts, pl_spec *out,
                 ein_error *err);
/* The replicated spec of `node` on p >= 2 devices (see pl_spec.replicated):
 * nparts = p function specifications, each the whole operator (the
 * request of every count 1), function specification i on device i. Fails
 * (EIN_EINVAL) for p < 2 or an operator pl_spec_replicable refuses. The
 * enumerations (pl_spec_enumerate, pl_spec_requests) never include it:
 * the plan search (coordinator/compile/co_search.h) asks for it. */
int pl_spec_make_replicated(const pl_graph *g, int node, int p, pl_spec *out, ein_error *err);
/* 1 when `node` may be replicated on p devices: p >= 2 and a cheap
 * operator whose whole inputs are small beside its output (elementwise
 * operators, rmsnorm, softmax, reshapes, reductions: at most
 * PL_REP_MAX_FANIN input elements and 2 x PL_REP_MAX_FANIN FLOPs per
 * output element, at most PL_REP_MAX_ELEMS output elements),
 * not a cache_write (its output is a state's buffers) nor an operator
 * without shardable indices; else 0. */
#define PL_REP_MAX_FANIN 8
#define PL_REP_MAX_ELEMS ((int64_t)1 << 22)
int pl_spec_replicable(const pl_graph *g, int node, int p);
/* Every spec of `node` for p devices: one per ordered factorisation of p
 * over its shardable indices with no count above the index size (the
 * paper's exactly-p specs). When the operator cannot be split p ways, the
 * specs of the largest k < p it can be split into instead (k = 1, the
 * whole operator on one device, always exists): function specification i
 * still runs on device i, devices k..p-1 do nothing for this operator,
 * and its output tiling has k blocks. So *n >= 1 and every spec has the
 * same nparts <= p. */
int pl_spec_enumerate(const pl_graph *g, int node, int p, pl_spec **specs, int *n,
                      ein_error *err);
/* pl_spec_make into a spec that already holds arrays (zero-initialised or
 * from an earlier make): reuses them when large enough. */
int pl_spec_remake(const pl_graph *g, int node, const int *counts, pl_spec *s,
                   ein_error *err);
/* The requests pl_spec_enumerate would build (the same fallback to k < p
 * parts), as *n rows of `nidx` counts (malloc'd, free()), without
 * building the specs. */
int pl_spec_requests(const pl_graph *g, int node, int p, int **counts, int *n, int *nidx,
                     ein_error *err);
void pl_spec_clear(pl_spec *s);
void pl_spec_array_free(pl_spec *specs, int n);
int pl_spec_copy(const pl_spec *src, pl_spec *dst);

/* "i:2 j:1 k:2" into buf; a replicated spec is "rep:P" (its P = nparts
 * copies), under either format. */
char *pl_spec_format(const pl_spec *s, const pl_index *idx, char *buf, size_t len);
/* "tokens:8 d_model:1" (index labels) into buf. */
char *pl_spec_format_labels(const pl_spec *s, const pl_index *idx, char *buf, size_t len);

/* The largest interval count index `ix` allows (size, size/step, npos+1). */
int pl_index_max_count(const pl_index *ix);
/* The count+1 split points of `ix` into `count` intervals (splits[0] = 0,
 * splits[count] = size). Returns 0, or -1 when the index cannot be split
 * `count` ways. */
int pl_index_splits(const pl_index *ix, int count, int64_t *splits);

/* The operator's arithmetic (floating-point operations, for reports). */
double pl_op_flops(const pl_graph *g, int node);
/* Attention node `nd`: the causal (query, key) pairs, summed over query
 * heads, with queries in q's box and keys in kv's token interval (the
 * work of one function specification; 0 for an empty box). */
double pl_attention_pairs(const pl_node *nd, const ein_box *q, const ein_box *kv);

int pl_tiling_of_outputs(const pl_spec *s, pl_tiling *out);
/* The distinct boxes of input k of s (what the spec asks its producer for). */
int pl_tiling_of_input(const pl_spec *s, int k, pl_tiling *out);
int pl_tiling_equal(const pl_tiling *a, const pl_tiling *b);
void pl_tiling_clear(pl_tiling *t);

#endif
