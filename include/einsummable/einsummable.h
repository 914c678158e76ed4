/* include/einsummable/einsummable.h — the public C API of Einsummable (paper §2).
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
 * NULL) and returns a negative EIN_E* code on failure (common/base/ein_error.h),
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

#include "ein_types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pl_graph ein_graph;     /* the planner's graph IR, opaque here */
typedef struct ein_plan ein_plan;
typedef int ein_tensor;

#define EIN_DESC_MAX_RANK 8
#define EIN_MAX_DEVICES 64

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
/* The operator table, for bindings that build their lists from it
 * (Python's einsummable does at import): every name ein_graph_unary,
 * ein_graph_binary and ein_graph_reduce take, rows 0 .. ein_op_count() - 1
 * (unary functions, then binary, then reductions; common/ir/ein_ops.def's
 * order). ein_op_row fills *out with row i and returns 0, or returns
 * EIN_EINVAL (and leaves *out alone) when i is out of range or out is NULL.
 * The strings are static: valid for the life of the process, never freed.
 * tests/python/py_abi.c checks the layout. */
typedef enum ein_op_class {
    EIN_OP_UNARY = 0,   /* ein_graph_unary's op */
    EIN_OP_BINARY = 1,  /* ein_graph_binary's op */
    EIN_OP_REDUCE = 2,  /* ein_graph_reduce's op */
} ein_op_class;

typedef struct ein_op_entry {
    const char *name;   /* "relu", "maximum", "sum": the op argument */
    int32_t op_class;   /* ein_op_class */
    int32_t takes_c;    /* 1: a unary function that uses the constant c (scale, addc) */
} ein_op_entry;

int ein_op_count(void);
int ein_op_row(int i, ein_op_entry *out);

/* op: relu, silu, gelu (tanh approximation), gelu_exact (erf), exp, neg,
 * sigmoid, tanh, square, scale (x*c), addc (x+c); c is ignored by the
 * others (the list is common/ir/ein_ops.def's). */
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
/* ein_graph_attention with a sliding window (Mistral's and Qwen2's
 * `sliding_window`, issue 34): window W >= 1 lets query t attend only keys
 * u of its sequence with t - W < u <= t (exactly transformers' rule: key u
 * is masked when t - u >= W, so a query sees at most W keys, itself
 * included). window 0 is full causal attention (ein_graph_attention); a
 * negative window is EIN_EINVAL. */
ein_tensor ein_graph_attention_window(ein_graph *g, const char *name, ein_tensor q, ein_tensor k,
                                      ein_tensor v, const int64_t *seq_ends, int nseq,
                                      int64_t window, ein_error *err);
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
/* Row gather out[t, :] = table[ids[t], :]: table [rows, dim] (f32, f16 or
 * bf16), ids [tokens] (EIN_I32 or EIN_I64); out [tokens, dim] in the
 * table's dtype. A token embedding (table = the embedding weights, ids =
 * token ids) or a pick of activation rows (table = hidden states, ids =
 * positions). An id outside [0, rows) fails the run with a message naming
 * the tensor, the token and the id. */
ein_tensor ein_graph_embedding(ein_graph *g, const char *name, ein_tensor table, ein_tensor ids,
                               ein_error *err);

/* ---- generation (issue 25; docs/generation.md) ------------------------ */
/* A state tensor (a key/value cache) [heads_kv, batch, len, d] in a float
 * dtype: a session keeps it on the devices for its whole life, it is zero
 * when the session opens, never set or loaded, and only its cache_write
 * changes it, in place, run after run. A state may have several
 * cache_writes (a prefill chunk's and a decode step's, sharing the cache):
 * then each run must be an entry point (ein_compiled_add_entry) that needs
 * at most one of them, and the planner gives all of them one tiling (the
 * first of cache_write's specs), so that they write the same blocks on the
 * same devices. */
ein_tensor ein_graph_state(ein_graph *g, const char *name, ein_tensor_desc desc,
                           ein_error *err);
/* The state with x [heads_kv, batch*C, d] written: C >= 1 new tokens per
 * sequence (C = 1: a decode step; C > 1: a prefill chunk), token t of
 * sequence b (row b*C + t of x) at row pos[b] + t of sequence b (pos
 * [batch], EIN_I32 or EIN_I64, given at each run); what reads the result
 * reads the cache as of after the write. A pos[b] outside [0, len - C]
 * fails the run naming the sequence. */
ein_tensor ein_graph_cache_write(ein_graph *g, const char *name, ein_tensor state, ein_tensor x,
                                 ein_tensor pos, ein_error *err);
/* C >= 1 new tokens per sequence: q [heads_q, batch*C, d], row b*C + t
 * (token t of sequence b, at position pos[b] + t) attends to the keys and
 * values [0, pos[b] + t] of caches k, v [heads_kv, batch, len, d] (causal
 * within the chunk; heads_q a multiple of heads_kv, grouped as in
 * ein_graph_attention; scale 1/sqrt(d)); out [heads_q, batch*C, d]. */
ein_tensor ein_graph_decode_attention(ein_graph *g, const char *name, ein_tensor q,
                                      ein_tensor k, ein_tensor v, ein_tensor pos,
                                      ein_error *err);
/* The same with a sliding window W >= 1: the token at position p attends
 * the cached keys [max(0, p - W + 1), p] only (the rule of
 * ein_graph_attention_window); 0: none (ein_graph_decode_attention);
 * negative: EIN_EINVAL. The cache keeps every position (it is not a ring
 * of W rows). */
ein_tensor ein_graph_decode_attention_window(ein_graph *g, const char *name, ein_tensor q,
                                             ein_tensor k, ein_tensor v, ein_tensor pos,
                                             int64_t window, ein_error *err);
/* Rotary embedding of x [tokens, H*head_dim] with token t at position
 * pos[t] (pos [tokens], EIN_I32 or EIN_I64, given at each run). */
ein_tensor ein_graph_rope_at(ein_graph *g, const char *name, ein_tensor x, ein_tensor pos,
                             int64_t head_dim, double theta, ein_rope_style style,
                             ein_error *err);
/* Rescale the frequencies of rope or rope_at tensor t as transformers'
 * rope_scaling does (ein_rope_scaling, ein_types.h; issue 34): 0, or
 * EIN_EINVAL for another operator or invalid factors (t unchanged). */
int ein_graph_rope_scaling(ein_graph *g, ein_tensor t, const ein_rope_scaling *s,
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

/* ---- reading a graph back ------------------------------------------- */
/* Tensors are numbered 0 .. ein_graph_ntensors(g)-1 in creation order. */
int ein_graph_ntensors(const ein_graph *g);
/* The tensor named `name`, or EIN_EINVAL (message names it) if none. */
ein_tensor ein_graph_find(const ein_graph *g, const char *name, ein_error *err);
/* Tensor t's name (owned by the graph), type, and whether it is a graph
 * input (1) or an operator's result or a state (0) and saved (any
 * pointer may be NULL). Returns 0, or EIN_EINVAL for a t out of range. */
int ein_graph_tensor(const ein_graph *g, ein_tensor t, const char **name, ein_tensor_desc *desc,
                     int *is_input, int *is_saved);

/* ---- compiling (the paper's compileGraph) ----------------------------
 * Compiling plans the graph for `ndev` devices (one join-agg spec per
 * operator), synthesises every exchange on a topology and lowers each
 * device's part to a Program. The result is a value that can be printed,
 * inspected and run any number of times in a session; it does not refer
 * to the graph (it keeps its own copy). Same graph and options give the
 * same compiled program (the search budgets count work, not time). */
typedef struct ein_compiled ein_compiled;

typedef struct ein_compile_options {
    const char *selector;     /* "dp" (default), "greedy" or "random" */
    uint64_t plan_seed;       /* random selector and exchange search (default 1) */
    int linear_paths;         /* the planner's linear-path tactic (paper §4.5) */
    const char *objective;    /* "time": a plan search by the plan simulator's
                                 prediction on the topology with its calibration
                                 (docs/planner.md); "comm": the paper's DP
                                 (elements moved); NULL (default): time where the
                                 topology has a calibration (every built-in has
                                 one), the selector is dp and ndev <= 128, else
                                 comm */
    int plan_only;            /* stop after planning: no exchanges, no programs
                                 (einplan; such a value cannot be run) */
    int naive_exchanges;      /* 1: the naive exchange bodies, no synthesis */
    long search_work;         /* exchange search budget in candidates (0: default) */
    double search_cap_ms;     /* wall-clock safety cap per search (0: default; < 0: none) */
    const char *topology;     /* built-in name or .topo file; NULL: "host" sized to ndev
                                 (CPU devices) or, for a probed backend, detected by
                                 probing */
    const char *backend;      /* a row's name (ein_backend_find); NULL: "cpu". For a
                                 row with `probed` ("cuda"): probe the devices in
                                 gpu_ids. Another name: EIN_EINVAL */
    const int *gpu_ids;       /* ndev ids (NULL: 0..ndev-1), for a probed backend */
    const char *worker;       /* the backend's worker binary to probe with (NULL: found) */
    const char *gpu_probe;    /* a probe saved from `einworker-cuda --probe` to detect
                                 the topology from instead of probing */
    int rewrite;              /* improve the graph by equality saturation first */
    const char *rewrite_weights; /* "a,b": the inputs that are weights, for the rewriter */
    int ilp;                  /* the rewriter extracts with CBC's ILP */
    uint64_t seed;            /* values of inputs never set (default 1) */
    int progress;             /* 1: progress on stderr when it is a terminal */
    int exchange_chunks;      /* exchanges moving chunks of blocks (docs/exprog.md):
                                 0 the default (off; einrun, einplan and Python
                                 read $EIN_EXCHANGE_CHUNKS), EIN_EXCHANGE_CHUNKS_AUTO: the
                                 synthesis may choose chunked bodies, 1 off: whole
                                 blocks only, K in 2..1024: every action of every
                                 exchange that moves data is a stream of K chunks
                                 (for testing) */
    int no_reuse;             /* 1: every buffer of a device in a place of its own for
                                 the whole run (debugging; also $EIN_NO_REUSE=1);
                                 0: buffers placed by liveness, their bytes reused
                                 after their last reader (docs/runtime.md) */
    const char *partials;     /* partial sums of a split contraction or reduction are
                                 moved and aggregated in "f32" (NULL, the default:
                                 f16/bf16 results rounded once, as on one device) or
                                 "native" (the tensor's dtype: half the bytes for
                                 f16/bf16, each partial and aggregation step rounded);
                                 the planner and its search count whichever it is */
    double memory_limit;      /* bytes per device the plan must fit in (0: none): the
                                 plan search with the time objective counts a plan
                                 whose predicted peak (ein_compiled_predict) exceeds
                                 it, or the topology's memory if smaller, as not
                                 fitting, and checks the whole graph, not only a
                                 prefix of repeated blocks (docs/planner.md). The
                                 comm objective ignores it. Negative or NaN:
                                 EIN_EINVAL */
    const char *strategy;     /* NULL, or a hand-written strategy the planner follows
                                 ("megatron", "ulysses", "sequence" or "data",
                                 docs/planner.md); the objective then defaults to
                                 comm. Unknown: EIN_EINVAL; one that does not
                                 apply to the graph: EIN_ENOPLAN */
    const char *calibration;  /* a calibration file (einrun --calibrate) the time
                                 objective predicts with; NULL: the topology's own,
                                 else host's. A topology without one counts as
                                 calibrated when this is given */
} ein_compile_options;

#define EIN_EXCHANGE_CHUNKS_AUTO (-1)

/* Defaults (everything above as documented). */
void ein_compile_options_init(ein_compile_options *o);

/* Compile `g` for `ndev` devices (1..EIN_MAX_DEVICES; 1..4096 with
 * plan_only); o may be NULL (defaults).
 * Failure: EIN_EINVAL (options), EIN_ENOPLAN (no plan), EIN_ELIMIT (a
 * device's program is too large), EIN_EDEVICE (topology detection),
 * EIN_EIO (a topology file), EIN_ENOMEM; *out is untouched. On success
 * *out is owned by the caller (ein_compiled_free). */
int ein_compile(const ein_graph *g, int ndev, const ein_compile_options *o, ein_compiled **out,
                ein_error *err);
void ein_compiled_free(ein_compiled *c);

int ein_compiled_ndevices(const ein_compiled *c);
/* The graph compiled (after --rewrite, if asked), owned by `c`. */
const ein_graph *ein_compiled_graph(const ein_compiled *c);
/* The logical plan (owned by `c`): ein_plan_* reads it. */
const ein_plan *ein_compiled_plan(const ein_compiled *c);
/* The topology's name and where it came from ("host (built in), sized
 * to 4 CPU devices"); owned by `c`. */
const char *ein_compiled_topology(const ein_compiled *c, const char **description);
/* Exchanges: how many, and exchange i's tensor, consumer ("save" for an
 * output) and body as ExProg text (docs/exprog.md), all owned by `c`.
 * Returns 0 or EIN_EINVAL for i out of range. */
int ein_compiled_nexchanges(const ein_compiled *c);
int ein_compiled_exchange(const ein_compiled *c, int i, const char **tensor,
                          const char **consumer, const char **body);
/* Device d's Program: instruction and buffer counts and segment bytes
 * (any pointer may be NULL); EIN_EINVAL for d out of range. */
int ein_compiled_program(const ein_compiled *c, int d, int *ninstrs, int *nbuffers,
                         uint64_t *segment_bytes);
/* Simulated exchange time (seconds) with the chosen and with naive bodies. */
void ein_compiled_exchange_time(const ein_compiled *c, double *chosen_s, double *naive_s);
/* The whole compiled program as text: plan (one line per operator),
 * devices' programs (sizes), and with `exchanges` every exchange body.
 * Returns a malloc'd string the caller free()s, or NULL (out of memory). */
char *ein_compiled_explain(const ein_compiled *c, int exchanges);

/* Predict one iteration of `c` with the simulator of einplan --simulate
 * (docs/simulator.md): its per-device programs replayed as the workers
 * order them on c's topology, with the roofline `calibration` (a built-in
 * name such as "host", or a file written by einrun --calibrate; NULL: the
 * topology's own `calibration`, else "host"). Times in seconds. Fills *out
 * and returns 0; EIN_EINVAL for a plan_only program, EIN_EIO / EIN_EPARSE
 * for a calibration that cannot be read, EIN_ENOMEM. Deterministic. */
typedef struct ein_prediction {
    double time;               /* the iteration: makespan + calibration's per-iteration cost */
    double makespan;
    double path_compute, path_comm, path_wait; /* the critical path's split */
    int ndev;
    struct {
        double compute;        /* kernels, aggregations, slices, concats */
        double comm;           /* copies and notifications */
        double idle;           /* makespan - compute - comm */
        double end;            /* when its last instruction ends */
        uint64_t peak_bytes;   /* its memory: every buffer of its program */
    } dev[EIN_MAX_DEVICES];
    char calibration[64];      /* the calibration's name */
} ein_prediction;
int ein_compiled_predict(const ein_compiled *c, const char *calibration, ein_prediction *out,
                         ein_error *err);

/* ---- saved programs ---------------------------------------------------
 * A compiled program written to a file holds everything a session needs
 * to run it without compiling again: the graph, the plan, every exchange
 * body, each device's program, the topology it was compiled for (and how
 * that topology was found), a format magic and version and the library
 * version. The file is a few header bytes and one msgpack map
 * (coordinator/compile/ein_compiled_file.c); the same compiled program always
 * gives the same bytes.
 *
 * ein_compiled_save writes `c` to `path` (a temporary file next to it,
 * renamed over it: a failed save leaves an older file untouched).
 * Failure: EIN_EINVAL (a plan_only program), EIN_EUNSUPPORTED (a topology
 * the text format cannot describe: an asymmetric link), EIN_EIO, EIN_ENOMEM.
 *
 * ein_compiled_load reads one back and checks, in this order: that it is
 * a saved program of this format (EIN_EPARSE "not a saved einsummable
 * program", or EIN_EINVAL for another format version), made by this
 * library version (EIN_EINVAL "library version differs: saved by X, this
 * is Y"), for as many devices as asked (ein_compiled_load_ex's ndev > 0:
 * EIN_EINVAL "device count differs"), that every part is well formed
 * (EIN_EPARSE naming the part: a truncated or damaged file, garbage, a
 * graph its operators would not make), and last that this machine's
 * topology is the one the program was compiled for (EIN_EDEVICE
 * "topology differs: ... compiled for A (...), this machine is B (...):
 * the first differing statement"). The machine's topology is found as `o`
 * says (its topology, cuda, gpu_ids, worker and gpu_probe fields, as for
 * ein_compile; the others are ignored), or with o NULL (and always with
 * ein_compiled_load) the way the program's own compile found it: the
 * same --topology name or file, the same GPUs probed, or `host` sized to
 * its device count. A FIFO, device node or directory in place of the file
 * is refused unread (EIN_EIO). On success *out is the caller's
 * (ein_compiled_free) and behaves like the compiled original: same
 * explain text, plan, exchanges, prediction, and a session on it gives
 * the same outputs. On failure *out is untouched. */
int ein_compiled_save(const ein_compiled *c, const char *path, ein_error *err);
int ein_compiled_load(const char *path, ein_compiled **out, ein_error *err);
int ein_compiled_load_ex(const char *path, int ndev, const ein_compile_options *o,
                         ein_compiled **out, ein_error *err);

/* ---- entry points ----------------------------------------------------
 * One compiled program may hold several computations over the same weights
 * and state tensors, for example a prefill chunk and a decode step whose
 * cache_writes write the same key/value caches (docs/generation.md). An
 * entry point `name` is the set of saved `outputs`: a run of it
 * (ein_session_run_entry) runs, on every device, only what those outputs
 * need (and loads what changed), so the caches one entry writes are what
 * the other reads, on the same devices, with no copy. Outputs of other
 * entries keep what their last run stored.
 *
 * Add entry points before opening a session on c (a session copies the
 * program when it opens). The program must be compiled with no_reuse.
 * Failure: EIN_EINVAL (no such saved output, a name used twice, more than
 * 32 entries, memory reuse on, an entry that needs two cache_writes of one
 * state), EIN_ENOMEM. A program saved with entry points (ein_compiled_save)
 * loads without their names. */
int ein_compiled_add_entry(ein_compiled *c, const char *name, const char *const *outputs,
                           int noutputs, ein_error *err);

/* The library's version ("0.1.0"), static. */
const char *ein_version(void);

/* ---- sessions: workers kept alive across runs -------------------------
 * A session starts one worker process per device for a compiled program
 * and keeps them, with every input resident in device memory, until it is
 * closed: inputs that did not change are not sent again. Inputs never set
 * are generated from the compile seed (einrun's default). A worker fault
 * during a run ends the run with a one-line report naming the device,
 * process, instruction and operator (EIN_EWORKER / EIN_ETIMEOUT), stops
 * every worker and removes everything of the session's (the session is
 * then closed: every later call fails with EIN_EINVAL until
 * ein_session_close); a call never hangs past the timeouts below.
 *
 * Several sessions: any number may be open in one process, of the same
 * compiled program or of others, and be closed in any order. Every
 * descriptor the library opens is close-on-exec, and each session's
 * watchdog (its guard process) keeps none of another session's, so
 * closing one never waits for another, for a child the caller started,
 * or for a fork of the caller.
 *
 * Threads: a session may be used from any thread, and from several. Each
 * session has one lock: a call made while another thread's call on the
 * same session runs waits for it (runs are never interleaved); calls on
 * different sessions run in parallel. Nothing of a session belongs to the
 * thread that opened it: that thread may end and the session lives on
 * (its workers watch the process, not the thread). Two exceptions:
 * ein_session_cancel takes no lock (it is how another thread, or a signal
 * handler, stops a run in progress), and ein_session_close must not race
 * any other call on the same session (it frees it). A forked child cannot
 * use its parent's sessions (EIN_EINVAL); its ein_session_close only frees
 * its copy's memory.
 *
 * Signals: the library installs no signal handler and leaves the caller's
 * signals alone (unless handle_signals). Workers run in their own session
 * (setsid), so a Ctrl-C at the caller's terminal reaches the caller only:
 * an interactive program turns it into ein_session_cancel (the Python
 * package does) and the session stays usable. Workers end when the
 * caller's process ends, however it ends. */
typedef struct ein_session ein_session;

typedef struct ein_session_options {
    const char *backend;      /* a row's name (ein_backend_find: "cpu", "cuda"), or
                                 NULL (default): ein_backend_auto's ("cuda" when this
                                 library was built with CUDA and GPUs are visible,
                                 else "cpu") */
    const int *gpu_ids;       /* a probed backend (cuda): the device of each device
                                 (NULL: 0..ndev-1) */
    const char *worker;       /* worker binary; NULL: $EINWORKER, next to the program,
                                 or the installed one */
    double worker_timeout;    /* seconds of silence before a worker counts as hung
                                 (0: the default, 60) */
    double run_timeout;       /* seconds per run, 0 = none (default) */
    double instr_timeout;     /* one instruction, seconds (600; 0: no limit).
                                 A negative or NaN time is refused (EIN_EINVAL) */
    int graphs;               /* -1 auto (the row's graphs_default: cuda), 0 off, 1 on */
    int verbose;              /* worker events on stderr */
    const char *log_dir;      /* NULL, or a directory for worker-<d>.log */
    int log_level;            /* 1 events (default), 2 every instruction */
    const char *trace_path;   /* NULL, or a Chrome trace written at close */
    const char *wrapper;      /* a command every worker runs under (gdb, valgrind) */
    int wrapper_device;       /* -1 all, else only that device */
    int debug_device;         /* -1, or a worker started paused for a debugger */
    int manual;               /* the user starts the workers (printed commands) */
    int handle_signals;       /* SIGINT/SIGTERM/SIGHUP during a run end it and close
                                 the session (einrun: blocks them while the session
                                 lives and reads them from a signalfd; the calling
                                 thread's mask, so for single-threaded programs) */
    const char *const *store_paths; /* NULL, or by tensor id OF THE COMPILED
                                 GRAPH (ein_compiled_graph(c): after a rewrite
                                 not the graph given to ein_compile; find
                                 tensors there by name), one entry per tensor
                                 of it: the .npy file a saved tensor is
                                 written to (NULL entries: the session's
                                 private directory) */
    int generate_missing;     /* 1: an input never set is generated from the
                                 compile seed. 0 (default): generated only
                                 while NO input of the program has been set
                                 (a demo run); once one is set, a run with
                                 another never set fails with EIN_EINVAL
                                 naming it, so a misspelt name or a weights
                                 file that binds too little never runs on
                                 made-up values */
    int progress;             /* 1: a run that takes longer than a second shows
                                 "running: 2.3 s" on stderr, redrawn in place and
                                 erased when it ends, when stderr is a terminal
                                 (never into a file or pipe); 0 (default): silent.
                                 $EIN_PROGRESS_AFTER (seconds) changes the second */
    int fake_hosts;           /* 0: one host (default). N >= 2: split the devices
                                 into N pseudo-hosts of this machine (contiguous,
                                 as equal as can be), each with its own agent
                                 (einnode), blocks between them over the
                                 transport on the loopback: a test of runs on
                                 several hosts */
    const char *hosts_file;   /* NULL: one host (default). A file of one line
                                 per host, "ADDRESS DEVICES [LAUNCH...]"
                                 (docs/runtime.md): each host's agent (einnode)
                                 is started with LAUNCH (such as `ssh` or
                                 `ip netns exec NS`), the coordinator listens
                                 on the first ADDRESS. Not with fake_hosts */
    double connect_timeout;   /* several hosts: seconds from starting a host's
                                 agent until its first message must reach the
                                 coordinator, else the run fails naming the
                                 host (0: the default, 10, plus 10 for an agent
                                 started by a launch command such as ssh).
                                 A negative or NaN time is refused */
    const char *launcher;     /* how the hosts' agents start (docs/runtime.md,
                                 "Launchers"): NULL or "ssh" (default): each
                                 with the LAUNCH of its hosts_file line;
                                 "srun": inside a Slurm allocation, one job
                                 step per node of it (no hosts_file; refused
                                 with EIN_EINVAL outside one); "mpirun": Open
                                 MPI's, one per host of hosts_file (lines
                                 without LAUNCH) or of the Slurm allocation.
                                 $EIN_SRUN / $EIN_MPIRUN replace the command */
    int devices_per_host;     /* srun, mpirun over an allocation: devices of
                                 each node; 0 (default): the program's devices
                                 shared evenly among the nodes */
    const char *listen;       /* NULL: the coordinator listens on the first
                                 host's address; else an IPv4 address or
                                 interface name of this machine that every
                                 host reaches */
    const char *transport;    /* several hosts: how blocks move between them,
                                 NULL or "ucx" (default; a worker built without
                                 UCX, libucx-dev, fails saying so) or "tcp"
                                 (ZeroMQ over TCP). Another name fails the run
                                 naming it (the workers refuse it); on one
                                 host EIN_EINVAL */
} ein_session_options;

void ein_session_options_init(ein_session_options *o);
/* ---- Kernel backends (docs/design.md, "The backend seam") ------------
 * One row per backend this library knows, built or not, in a fixed order:
 * row 0 is "cpu", the default; rows are only appended (a row's index is
 * saved in compiled programs). Callers branch on a row's fields, never on
 * its name. The rows are static: never freed, valid for the process. */
typedef struct ein_backend_info {
    const char *name;         /* "cpu", "cuda": the value of a backend option */
    const char *label;        /* for messages: "CPU", "CUDA" */
    const char *device;       /* what one device is, for messages: "CPU device", "GPU" */
    const char *worker;       /* the worker binary that runs it: "einworker",
                                 "einworker-cuda" */
    int built;                /* 1: this library was built with it */
    int probed;               /* 1: devices are hardware named by id (gpu_ids, the
                                 worker's --gpu), and a compile without a topology
                                 detects it from `worker --probe`; 0: devices are
                                 processes, as many as asked for */
    int host_visible;         /* 1: device memory is host memory */
    int graphs_default;       /* 1: a session captures graphs unless told not to */
    int auto_pick;            /* 1: ein_backend_auto takes it where present */
    const char *host_times;   /* what a device's kernel and copy times are when the
                                 device did not time itself ("host time to enqueue,
                                 not GPU time"), or NULL: they are exact */
} ein_backend_info;

/* The number of rows, and row i (NULL out of range). */
int ein_backend_count(void);
const ein_backend_info *ein_backend_get(int i);
/* The index of row b, or -1 if b is not a row. */
int ein_backend_index(const ein_backend_info *b);
/* The row named `name`, or NULL (also for NULL). */
const ein_backend_info *ein_backend_find(const char *name);
/* Every row's name for messages ("cpu or cuda"; "a, b or c"): static storage,
 * built once (safe from any thread). */
const char *ein_backend_names(void);
/* 1 when b's devices can be used here (built into this library and its
 * devices visible), else 0; `why` (cap bytes, may be NULL) gets the
 * reason: "GPUs visible", "no GPU visible" or "built without CUDA" (for
 * CUDA). The CUDA row's GPUs are visible when $EIN_GPU_VISIBLE is 1 (0:
 * none; a stand-in for tests), else unless CUDA_VISIBLE_DEVICES names none
 * ("" or "-1"), when /dev/nvidia0 or /dev/nvidiactl exists. EIN_EINVAL for
 * a $EIN_GPU_VISIBLE other than 0 or 1, or a b that is not a row. */
int ein_backend_present(const ein_backend_info *b, char *why, size_t cap, ein_error *err);
/* The backend a session takes when ein_session_options.backend is NULL
 * (einrun --gpus without --backend, Python's backend=None): the index of
 * the first row with auto_pick that is present (1, "cuda", on a CUDA build
 * that sees GPUs), else 0 ("cpu"); `why` gets ein_backend_present's reason
 * for the last auto_pick row tried. A negative code as
 * ein_backend_present's. */
int ein_backend_auto(char *why, size_t cap, ein_error *err);

/* Start the workers for `c` and send each its program; returns once all
 * have allocated their memory. `c` must outlive the session. On failure
 * nothing is left running and *out is untouched. */
int ein_session_open(const ein_compiled *c, const ein_session_options *o, ein_session **out,
                     ein_error *err);

/* Set input `name` for the next run: from memory (row-major, exactly the
 * input's shape and dtype: `bytes` must match), or from a .npy file (read
 * by the workers at the next run, each its own blocks; its shape and dtype
 * are checked now). EIN_EINVAL names an unknown input; EIN_ESHAPE a size,
 * shape or dtype that does not fit. */
int ein_session_set_input(ein_session *s, const char *name, const void *data, size_t bytes,
                          ein_error *err);
int ein_session_set_input_npy(ein_session *s, const char *name, const char *path,
                              ein_error *err);

/* Bind the tensors of a .safetensors file to inputs for the next run:
 * `map` holds nmap "INPUT=TENSOR" strings, and every other input named like
 * a tensor of the file is bound to it (docs/hf-llama.md for a LLaMA
 * checkpoint's names). dtype and shape must match the input exactly. Each
 * worker then maps only the bytes of its own blocks; the file must stay in
 * place while the session may load it. *nbound (may be NULL) gets the
 * number of inputs bound. Errors (EIN_EIO, EIN_EPARSE for a bad file;
 * EIN_EINVAL, EIN_ESHAPE for a bad binding; EIN_EINVAL for a file of which
 * no tensor binds to any input: a misspelt map or the wrong file) are one
 * line naming the file and the tensor, and bind nothing that the error
 * concerns. */
int ein_session_load_safetensors(ein_session *s, const char *path, const char *const *map,
                                 int nmap, int *nbound, ein_error *err);

/* One device's times of a run, in seconds, as its worker measured them. */
typedef struct ein_dev_times {
    long pid;
    double total, kernel, copy, wait;
} ein_dev_times;

/* One worker's graphs since the session started (--graphs): local
 * stretches captured (CUDA graphs; recordings on CPU devices), graph
 * launches, stretches that could not be captured and so run one
 * instruction at a time, and why the first of those failed (for CUDA, the
 * instructions and the CUDA error; "" if none); too_short: stretches not
 * captured on purpose, being shorter than capture pays for (they also run
 * one instruction at a time, and are not failures). */
typedef struct ein_dev_graphs {
    int captured, launched, failed;
    char error[512];
    int too_short;
} ein_dev_graphs;

typedef struct ein_run_stats {
    double wall_s;                 /* START to the last DONE, as the caller saw it */
    int ndev;
    ein_dev_times dev[64];
    ein_dev_graphs graphs[64];
    /* 1: dev[d].kernel and .copy are the GPU's own time (CUDA events around
     * each operation); 0: the host's time running (CPU devices) or
     * enqueueing them. dev[d].wait is always the host's time waiting for
     * peers. */
    int device_timed[64];
} ein_run_stats;

/* Whether input `name` has a value set (1), or would be generated from
 * the compile seed at the next run (0); EIN_EINVAL if the program has no
 * input of that name. Front ends use it to say what they generate. */
int ein_session_input_is_set(const ein_session *s, const char *name);

/* Run the program once (stats may be NULL). With `store` 0 the outputs are
 * not written back (warm-up and timing runs); ein_session_run stores.
 * EIN_ECANCELED: ein_session_cancel stopped it; the session stays open and
 * usable, with its inputs resident, but the outputs of a cancelled storing
 * run are unset (ein_session_get_output fails until a run stores again). */
int ein_session_run(ein_session *s, ein_run_stats *stats, ein_error *err);
int ein_session_run_ex(ein_session *s, int store, ein_run_stats *stats, ein_error *err);

/* Cancel the run in progress on `s`, if any; nothing happens when none is
 * (a run that starts later is not cancelled). Every worker stops between
 * two instructions (within about 50 ms of the instruction it is in, on
 * CPU devices; a CUDA worker waits for what it queued) and its
 * ein_session_run returns EIN_ECANCELED. Takes no lock and only stores a
 * flag and writes an eventfd: safe from any thread and from a signal
 * handler, at any time while `s` is open (not during or after
 * ein_session_close). */
void ein_session_cancel(ein_session *s);

/* Run entry point `entry` (ein_compiled_add_entry) once, as
 * ein_session_run_ex. EIN_EINVAL for no such entry. A program with a
 * state written by several cache_writes runs only this way (plain runs
 * fail with EIN_EINVAL). */
int ein_session_run_entry(ein_session *s, const char *entry, int store, ein_run_stats *stats,
                          ein_error *err);

/* ---- generation through a session (docs/generation.md) ----------------
 * On a session whose program has es.llama's entry points and names: entry
 * "decode" with inputs ids [B] and pos [B] (i32) and output logits [B, V]
 * (f32); entry "prefill" with inputs ids_p [B*C], pos_p [B] (each
 * sequence's first position) and, if the program has it, rpos_p [B*C]
 * (the rotary positions, pos_p[b] + t: filled here), and output logits_p
 * [B*C, V]; the key/value caches are states. B, C and V are read from
 * the program. Weights are the caller's to bind (ein_session_load_safetensors).
 * Failures: EIN_EINVAL naming what does not match, or the run's error.
 *
 * ein_session_decode_step: one token per sequence, ids[b] at pos[b];
 * logits [B*V] (nlogits = B*V) receive the step's logits.
 * ein_session_prefill: ids [B*C] (token t of sequence b at b*C + t, at
 * position pos[b] + t); logits [B*C*V] (nlogits = B*C*V), or NULL not to
 * store them.
 * ein_session_generate: es.llama's generate. Every prompt token but the
 * last is prefilled in chunks, then each sequence decodes at its own
 * position until max_new_tokens or an eos id (kept); out[b] (room for
 * max_new_tokens ids) receives prompt b's nout[b] new ids. Greedy at
 * temperature 0, else sampled from softmax(logits / temperature) over the
 * top_k most likely (0: all) with ein's splitmix64 from `seed` (the same
 * seed gives the same ids). Prompt plus new tokens must fit the cache. */
typedef struct ein_generate_options {
    int max_new_tokens;     /* default 32 */
    double temperature;     /* 0 (default): greedy */
    int top_k;              /* 0 (default): every id */
    uint64_t seed;
    const int32_t *eos;     /* end-of-sequence ids (neos of them; NULL: none) */
    int neos;
} ein_generate_options;
void ein_generate_options_init(ein_generate_options *o);
int ein_session_decode_step(ein_session *s, const int32_t *ids, const int32_t *pos, int batch,
                            float *logits, size_t nlogits, ein_error *err);
int ein_session_prefill(ein_session *s, const int32_t *ids, const int32_t *pos, int batch,
                        float *logits, size_t nlogits, ein_error *err);
int ein_session_generate(ein_session *s, const int32_t *const *prompts, const int *lens,
                         int batch, const ein_generate_options *o, int32_t *const *out,
                         int *nout, ein_error *err);

/* Copy saved tensor `name`, as of the last storing run, into dst (bytes =
 * its size), or learn its size with dst NULL (*bytes_out). EIN_EINVAL if no
 * run stored it yet or it is not saved. */
int ein_session_get_output(ein_session *s, const char *name, void *dst, size_t bytes,
                           size_t *bytes_out, ein_error *err);
/* Where the last storing run wrote output `name` (a .npy in the session's
 * private directory, valid until the next run or close), or NULL. */
const char *ein_session_output_path(const ein_session *s, const char *name);

/* Stop the workers and remove the session's files; frees s. Returns 0, or
 * the error of a worker that failed while stopping (s is freed anyway). */
int ein_session_close(ein_session *s, ein_error *err);

/* ---- model configs (issue 34) ------------------------------------------
 * A transformers config.json, read by the one reader that eingen --config,
 * es.llama and C callers share (docs/hf-llama.md lists the keys): every key
 * is implemented, known not to change the logits (transformers_version,
 * use_cache, bos_token_id, ...), or refused (EIN_EUNSUPPORTED) by a message
 * naming the key, its value and what is supported. Keys a config leaves out
 * take transformers' defaults for its model_type ("llama", "mistral",
 * "qwen2"). Nothing to free. */
#define EIN_MODEL_MAX_EOS 8
typedef struct ein_model_config {
    char model_type[16];        /* "llama", "mistral" or "qwen2" */
    int64_t hidden_size, intermediate_size, heads, kv_heads, head_dim, layers, vocab;
    int64_t max_position_embeddings;
    double rms_norm_eps, rope_theta;
    ein_rope_scaling rope_scaling;
    char act[16];               /* the MLP's unary: "silu", "gelu" (tanh
                                   approximation), "gelu_exact" or "relu" */
    int tied;                   /* lm_head is the embedding */
    int qkv_bias, o_bias, mlp_bias; /* which projections carry a .bias */
    int64_t sliding_window;     /* 0: none; else every layer's attention sees
                                   at most this many keys (window=, issue 34) */
    int has_dtype;              /* torch_dtype given: */
    ein_dtype dtype;            /*   its dtype (F32, F16 or BF16) */
    int neos;                   /* eos_token_id: none, one or a list */
    int64_t eos[EIN_MODEL_MAX_EOS];
} ein_model_config;

/* Read config.json at `path`, or the JSON `text` when path is NULL, into
 * *out. EIN_EIO (unreadable), EIN_EPARSE (not JSON), EIN_EUNSUPPORTED (a
 * key or value not implemented), EIN_EINVAL (inconsistent sizes). */
int ein_model_config_read(const char *path, const char *text, ein_model_config *out,
                          ein_error *err);
/* The same as ein_model_config_read, returning the resolved config as a
 * malloc'd JSON object the caller free()s (the struct's fields by name;
 * rope_scaling as {"type": "none"|"linear"|"llama3", ...}, dtype as
 * "f32"/"f16"/"bf16" or null), or NULL with err set. */
char *ein_model_config_json(const char *path, const char *text, ein_error *err);

#ifdef __cplusplus
}
#endif

#endif
