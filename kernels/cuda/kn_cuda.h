/* kernels/cuda/kn_cuda.h — CUDA kernels on device buffers.
 *
 * Every kernel is enqueued on `stream` (a cudaStream_t, NULL for the legacy
 * default stream) and returns without waiting: nothing here allocates or
 * synchronises, so the calls may be captured into a CUDA graph. Pointers are
 * device pointers; the pointer array `srcs` itself is host memory, read
 * before the call returns. Returns 0, EIN_EINVAL for a bad argument, or
 * EIN_EDEVICE when the launch failed; kn_cuda_last_error() then says why.
 * Callable from C and C++. */
#ifndef KN_CUDA_H
#define KN_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "common/base/ein_error.h"
#include "common/ir/ein_program.h"
#include "kernels/kn_block.h"
#include "kernels/cuda/kn_sdpa_graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices; 0 when there is no device or no driver
 * (never an error exit). */
int kn_cuda_device_count(void);

/* The same count, or why there is none: returns the number of devices
 * (> 0), 0 when the runtime reports no device (cudaErrorNoDevice), or
 * EIN_EDEVICE when CUDA itself fails (no driver, a driver too old for this
 * runtime, a broken installation). `why` (may be NULL, cap bytes) receives
 * the CUDA error's name and text, or "" with devices. Clears the error. */
int kn_cuda_device_status(char *why, size_t cap);

/* 1 when the machine shows NVIDIA GPU hardware to this process
 * (/dev/nvidia0.. or /proc/driver/nvidia/gpus/), whatever CUDA says: a
 * test or benchmark that finds no usable device on such a machine is
 * failing, not skipping. EIN_REQUIRE_GPU=1 in the environment forces 1. */
int kn_cuda_gpu_hardware_present(void);

/* y = op(x) elementwise on n floats (y may equal x). */
int kn_cuda_unary(ein_unary op, float scalar, const float *x, float *y, int64_t n,
                  void *stream);

/* dst = srcs[0] (+|max) srcs[1] ... on n floats; dst may equal one
 * source (no other overlap).
 * op is EIN_AGG_SUM or EIN_AGG_MAX; nsrc >= 1 (any number). */
int kn_cuda_agg(ein_agg op, const float *const *srcs, int nsrc, float *dst, int64_t n,
                void *stream);
int kn_cuda_agg_sum(const float *const *srcs, int nsrc, float *dst, int64_t n, void *stream);

/* ---- Block kernels: the semantics of the kn_cpu_* function of the same
 * name (kernels/kn_cpu.h), on blocks whose `data` is a device pointer.
 * Box and argument checks happen on the host before anything is enqueued
 * and fail with the same codes as the CPU kernels (err filled, nothing
 * launched); a failed launch is EIN_EDEVICE. f32/f16/bf16 everywhere,
 * computed in f32. Host arrays (seq_ends, offsets, blocks) are read before
 * the call returns; kernels that need them on the device take them by
 * value (at most KN_CUDA_MAX_SEQ sequence ends, KN_CUDA_MAX_CAT inputs). */
#define KN_CUDA_MAX_SEQ 64
#define KN_CUDA_MAX_CAT 16

int kn_cuda_unary_blk(ein_unary op, double scalar, const kn_block *x, kn_block *out,
                      void *stream, ein_error *err);
int kn_cuda_binary(ein_binary op, const kn_block *a, const kn_block *b, kn_block *out,
                   void *stream, ein_error *err);
int kn_cuda_agg_blk(ein_agg op, const kn_block *srcs, int n, kn_block *out, void *stream,
                    ein_error *err);
/* Issue 13 (kernels/cuda/kn_cuda_attn_partial.cu): one key block's share
 * of attention (k, v both NULL: no keys) and the EIN_AGG_LSE merge (at most
 * 16 sources per call; kn_cuda_agg_blk hands EIN_AGG_LSE to it). */
int kn_cuda_attention_partial(int64_t group, const int64_t *seq_ends, int nseq,
                              const kn_block *q, const kn_block *k, const kn_block *v,
                              kn_block *out, void *stream, ein_error *err);
/* With a sliding window W >= 0 (kn_cpu_attention_partial_window's rule). */
int kn_cuda_attention_partial_window(int64_t group, int64_t window, const int64_t *seq_ends,
                                     int nseq, const kn_block *q, const kn_block *k,
                                     const kn_block *v, kn_block *out, void *stream,
                                     ein_error *err);
int kn_cuda_agg_lse_blk(const kn_block *srcs, int n, kn_block *out, void *stream,
                        ein_error *err);
int kn_cuda_softmax(int axis, const kn_block *x, kn_block *out, void *stream, ein_error *err);
int kn_cuda_rmsnorm(double eps, const kn_block *x, const kn_block *w, kn_block *out,
                    void *stream, ein_error *err);
/* The fused kernels (issue 33), as kn_cpu_swiglu and kn_cpu_add_rmsnorm
 * (kernels/cuda/kn_cuda_fused.cu; f32 statistics, as kn_cuda_rmsnorm). */
int kn_cuda_swiglu(const kn_block *gate, const kn_block *up, kn_block *out, void *stream,
                   ein_error *err);
int kn_cuda_add_rmsnorm(double eps, const kn_block *a, const kn_block *b, const kn_block *w,
                        kn_block *out, void *stream, ein_error *err);
int kn_cuda_layernorm(double eps, const kn_block *x, const kn_block *w, const kn_block *b,
                      kn_block *out, void *stream, ein_error *err);
int kn_cuda_rope(int64_t head_dim, double theta, const int64_t *seq_ends, int nseq,
                 const kn_block *x, kn_block *out, void *stream, ein_error *err);
/* With a pairing style (ein_rope_style), as kn_cpu_rope_style. */
int kn_cuda_rope_style(int style, int64_t head_dim, double theta, const int64_t *seq_ends,
                       int nseq, const kn_block *x, kn_block *out, void *stream, ein_error *err);
/* With rescaled frequencies, as kn_cpu_rope_scaled (sc NULL: none). */
int kn_cuda_rope_scaled(int style, int64_t head_dim, double theta, const ein_rope_scaling *sc,
                        const int64_t *seq_ends, int nseq, const kn_block *x, kn_block *out,
                        void *stream, ein_error *err);
int kn_cuda_concat(int axis, const int64_t *offsets, const kn_block *ins, int n,
                   kn_block *out, void *stream, ein_error *err);
int kn_cuda_slice(int axis, int64_t start, const kn_block *x, kn_block *out, void *stream,
                  ein_error *err);
int kn_cuda_split_heads(int64_t head_dim, const kn_block *x, kn_block *out, void *stream,
                        ein_error *err);
int kn_cuda_merge_heads(int64_t head_dim, const kn_block *x, kn_block *out, void *stream,
                        ein_error *err);
/* kn_cpu_embedding's rules; an id outside [0, rows) traps the kernel (a
 * device error reported at the next synchronisation, after a printf of
 * the token and id) and is never read through. */
int kn_cuda_embedding(int64_t rows, const kn_block *table, const kn_block *ids, kn_block *out,
                      void *stream, ein_error *err);
/* Generation (issue 25): kn_cpu_cache_write, kn_cpu_decode_attention and
 * kn_cpu_rope_at's rules; a position outside the cache traps the kernel (a
 * device error, after a printf naming the sequence). decode_attention
 * takes head dims up to 256. */
int kn_cuda_cache_write(int64_t rows, const kn_block *state, const kn_block *x,
                        const kn_block *pos, kn_block *out, void *stream, ein_error *err);
int kn_cuda_decode_attention(int64_t group, int partial, const kn_block *q, const kn_block *k,
                             const kn_block *v, const kn_block *pos, kn_block *out, void *stream,
                             ein_error *err);
/* With a sliding window W >= 0 (kn_cpu_decode_attention_window's rule). */
int kn_cuda_decode_attention_window(int64_t group, int64_t window, int partial,
                                    const kn_block *q, const kn_block *k, const kn_block *v,
                                    const kn_block *pos, kn_block *out, void *stream,
                                    ein_error *err);
/* Decode attention split over the keys (FlashDecoding's split-K,
 * kernels/cuda/kn_cuda_decode_sk.cu, issue 33; NEVER RUN ON A GPU YET):
 * one thread block per (kv head, sequence, key chunk) reads each K/V row
 * once for all query rows of its GQA group; the chunks' partials (f32
 * rows of d + 1 in `workspace`, device memory the caller owns and that
 * nothing else uses until the call's work on `stream` is done) are merged
 * by kn_cuda_agg_lse_blk. Same checks, semantics and traps as
 * kn_cuda_decode_attention_window. Takes head dims 32, 64, 96 and 128, at
 * most 16 query rows (group x tokens per sequence) per kv head and
 * sequence, a workspace of kn_cuda_decode_splitk_plan's bytes (none when
 * the split is one chunk and out is f32 rows of d + 1 or q's dtype: the
 * chunk writes out directly); anything else is EIN_EUNSUPPORTED saying
 * why (callers then run the warp kernel). */
int kn_cuda_decode_attention_splitk(int64_t group, int64_t window, int partial,
                                    const kn_block *q, const kn_block *k, const kn_block *v,
                                    const kn_block *pos, kn_block *out, void *workspace,
                                    size_t workspace_bytes, void *stream, ein_error *err);
/* The split: *nch chunks of *chunk keys for nkvh kv heads, nb sequences,
 * ns keys, `rows` output rows of head dim d; returns the workspace bytes
 * it needs. Deterministic (no device query): the same blocks give the same
 * split on every GPU. */
size_t kn_cuda_decode_splitk_plan(int64_t nkvh, int64_t nb, int64_t ns, int64_t rows, int64_t d,
                                  int *nch, int64_t *chunk);
/* EIN_CUDA_DECODE: unset, "" or "splitk" -> 1 (kn_cuda_run runs decode
 * attention through the split-K kernel where it applies and the context
 * has the workspace, the warp kernel otherwise), "warp" -> 0 (always the
 * warp kernel); anything else is EIN_EINVAL naming the value. */
int kn_cuda_decode_impl(ein_error *err);
int kn_cuda_rope_at(int style, int64_t head_dim, double theta, const kn_block *x,
                    const kn_block *pos, kn_block *out, void *stream, ein_error *err);
int kn_cuda_rope_at_scaled(int style, int64_t head_dim, double theta, const ein_rope_scaling *sc,
                           const kn_block *x, const kn_block *pos, kn_block *out, void *stream,
                           ein_error *err);

/* Causal GQA attention over packed sequences (kn_cpu_attention). f16 and
 * bf16 with head dim 64 or 128 and all of q, k, v, out in that dtype run a
 * fused tensor-core kernel (FlashAttention-2's scheme: 64 queries per
 * block, 64-key tiles in shared memory, online softmax, masked tiles
 * skipped); anything else runs a one-warp-per-query kernel (head dim up to
 * 256). */
int kn_cuda_attention(int64_t group, const int64_t *seq_ends, int nseq, const kn_block *q,
                      const kn_block *k, const kn_block *v, kn_block *out, void *stream,
                      ein_error *err);
/* With a sliding window W >= 0 (kn_cpu_attention_window's rule; both paths
 * mask each row at its window and start key tiles at the first query's
 * window). cuDNN never runs a windowed attention: kn_cuda_run calls this
 * directly when W > 0. */
int kn_cuda_attention_window(int64_t group, int64_t window, const int64_t *seq_ends, int nseq,
                             const kn_block *q, const kn_block *k, const kn_block *v,
                             kn_block *out, void *stream, ein_error *err);

/* Our FlashAttention-2-style kernel (kernels/cuda/kn_cuda_attn_fa2.cu,
 * issue 33; NEVER RUN ON A GPU YET, so not the default): bf16/f16 with
 * head dim 64 or 128, mma.sync tensor cores with S, P and O in registers,
 * K/V tiles double-buffered with cp.async, causal/packed/window tile
 * skipping, GQA. kn_cuda_attention_window and
 * kn_cuda_attention_partial_window use it when EIN_CUDA_ATTENTION=fa2 and
 * the blocks fit it, today's kernels otherwise (each fallback counted, with
 * its reason, in kn_cuda_attention_fa2_report). The _fa2 entry points run
 * it or nothing: blocks it does not take are EIN_EUNSUPPORTED (err says
 * why; also without an sm_80+ device or build). Same checks and semantics
 * as kn_cuda_attention_window / kn_cuda_attention_partial_window. */
int kn_cuda_attention_fa2(int64_t group, int64_t window, const int64_t *seq_ends, int nseq,
                          const kn_block *q, const kn_block *k, const kn_block *v, kn_block *out,
                          void *stream, ein_error *err);
int kn_cuda_attention_partial_fa2(int64_t group, int64_t window, const int64_t *seq_ends,
                                  int nseq, const kn_block *q, const kn_block *k,
                                  const kn_block *v, kn_block *out, void *stream, ein_error *err);
/* EIN_CUDA_ATTENTION: unset, "" or "wmma" -> 0 (today's kernels), "fa2" ->
 * 1; anything else is EIN_EINVAL naming the value (every call of our
 * attention kernels then fails with it; cuDNN's path does not read it).
 * Reads the environment on each call. */
int kn_cuda_attention_impl(ein_error *err);
/* "fa2 attention: N calls ran, M fell back to the wmma kernel (last: why)"
 * into buf[cap] (process-wide counts of EIN_CUDA_ATTENTION=fa2 calls).
 * Returns 0 or EIN_EINVAL. */
int kn_cuda_attention_fa2_report(char *buf, size_t cap);

/* Per-process setup of the fused attention kernels (their shared-memory
 * opt-in); kn_cuda_ctx_create() calls it. Call it (or create a context)
 * before capturing a graph that contains attention. */
int kn_cuda_attention_prepare(ein_error *err);

/* ---- GEMM through cuBLAS. A context holds the cuBLAS handle and the
 * caller's workspace; create it before any graph capture (it allocates),
 * use it from one thread at a time, and bind it to a stream per call. */
typedef struct kn_cuda_ctx kn_cuda_ctx;

/* workspace: device memory the caller owns (>= 32 MiB recommended on
 * Hopper; may be NULL with 0 bytes). Also prepares the attention kernels. */
int kn_cuda_ctx_create(void *workspace, size_t workspace_bytes, kn_cuda_ctx **out,
                       ein_error *err);
void kn_cuda_ctx_destroy(kn_cuda_ctx *c);

/* Row-major strided batched GEMM, f32 accumulation:
 *   C[b] = alpha * op(A[b]) op(B[b]) + beta * C[b],  b < batch,
 * op(A) is [m, k] (A stored [m, k] with row stride lda, or [k, m] when
 * trans_a), op(B) is [k, n] ([k, n], or [n, k] when trans_b), C [m, n]
 * with row stride ldc; stride_* are element offsets between batches.
 * A and B share one dtype (f32, f16 or bf16); C is f32 or that dtype.
 * f16/bf16 use tensor cores; f32 uses them too (TF32) only if allow_tf32. */
typedef struct kn_cuda_gemm_args {
    int trans_a, trans_b;
    int64_t m, n, k, batch;
    const void *a, *b;
    void *c;
    ein_dtype ab_dtype, c_dtype;
    int64_t lda, ldb, ldc;
    int64_t stride_a, stride_b, stride_c;
    float alpha, beta;
    int allow_tf32;
} kn_cuda_gemm_args;

int kn_cuda_gemm(kn_cuda_ctx *c, const kn_cuda_gemm_args *g, void *stream, ein_error *err);

/* Reduce over axes (kn_cpu_reduce). */
int kn_cuda_reduce(ein_agg op, uint32_t axes, const kn_block *x, kn_block *out, void *stream,
                   ein_error *err);

/* Two-operand einsum as one strided batched GEMM: letters split into
 * batch / M / N / K groups that each merge into one dimension of every
 * operand holding them, operands row- or column-major over their groups,
 * out row-major [batch, M, N]; a and b share a dtype, out is f32 or that
 * dtype. Anything else (one operand, letters summed in one operand only,
 * other layouts) is EIN_EUNSUPPORTED: the caller falls back or re-lays out. */
int kn_cuda_einsum(kn_cuda_ctx *ctx, const char *subscripts, const kn_block *a,
                   const kn_block *b, kn_block *out, void *stream, ein_error *err);

/* A product by quantized weights (issue 36; kernels/cuda/kn_cuda_quant.cu,
 * NEVER RUN ON A GPU YET): kn_cpu_einsum's rules for a q8_0, q4_0 or
 * f8e4m3 b (f8e4m3 over 16 rows: fp8 cuBLASLt products where
 * kn_qmm_plan_fp8 allows, the activations rounded to e4m3),
 * "...k,nk->...n" (weights [out, in]), a and out f32, f16 or bf16,
 * computed in f32. At most 16 rows of a run a GEMV that reads each weight
 * block once per 8 rows; more rows dequantise tiles of weights into the context's
 * scratch and multiply them through cuBLAS (out then f32 or a's dtype).
 * kn_cuda_einsum hands a quantized b here; anything else with quantized
 * operands is refused by name (kernels/cuda/kn_qmm_plan.h). */
int kn_cuda_einsum_q(kn_cuda_ctx *ctx, const char *subscripts, const kn_block *a,
                     const kn_block *b, kn_block *out, void *stream, ein_error *err);
/* What ctx's device offers f8e4m3 prefill (kn_qmm_plan_fp8's inputs): its
 * compute capability as 10 * major + minor (0 unknown) and cuBLASLt's
 * version (cublasLtGetVersion(); 0 when built without cuBLASLt or its
 * handle could not be made). ctx may be NULL (both 0). */
void kn_cuda_ctx_fp8(kn_cuda_ctx *ctx, int *sm, size_t *lt_version);

/* Attention as kn_cuda_run runs it (kernels/cuda/kn_cuda_cudnn.cu; the
 * graph of kn_sdpa_graph.h has not run on a GPU yet): through cuDNN's fused
 * SDPA (cuDNN 9 backend API, one plan per shape, built on first use: so
 * call it once outside a graph capture first; packed sequences in one plan)
 * where cuDNN is built in and covers the blocks — all f16 or all bf16, head
 * dim 64 or 128, q and k/v blocks over the same tokens [0, T), at most 64
 * sequences, 16-byte aligned — and our kn_cuda_attention otherwise or when
 * cuDNN fails (the shape is then remembered as unsupported; the reason is
 * reported once, kn_cuda_ctx_attention_report).
 * EIN_ATTENTION=ours never uses cuDNN; EIN_ATTENTION=cudnn makes "cuDNN
 * did not run" an EIN_EUNSUPPORTED error (tests). ctx may be NULL (ours). */
int kn_cuda_attention_auto(kn_cuda_ctx *ctx, int64_t group, const int64_t *seq_ends, int nseq,
                           const kn_block *q, const kn_block *k, const kn_block *v,
                           kn_block *out, void *stream, ein_error *err);
/* attention_partial as kn_cuda_run runs it: through cuDNN with its
 * statistics as a real output where the key block is the query block
 * (causal) or lies wholly before it (same length, no sequence boundary in
 * the rows), else kn_cuda_attention_partial; EIN_ATTENTION as above. */
int kn_cuda_attention_partial_auto(kn_cuda_ctx *ctx, int64_t group, const int64_t *seq_ends,
                                   int nseq, const kn_block *q, const kn_block *k,
                                   const kn_block *v, kn_block *out, void *stream,
                                   ein_error *err);
/* "attention: N calls through cuDNN SDPA, M through our kernel (cuDNN:
 * available | why not; last: why the last call ran where it did)", then
 * each cuDNN decline not reported before ("cuDNN declined SHAPE: WHY"),
 * once per shape and reason, into buf[cap]. Returns 0 or EIN_EINVAL. */
int kn_cuda_ctx_attention_report(const kn_cuda_ctx *ctx, char *buf, size_t cap);
/* The cuDNN probe of one graph variant (tools/gpu-check): "N ops: graph
 * finalized; engines K of E finalize [..]; heuristics ..; plan cfg ..
 * workspace .. built in .. ms" or the error, into line[cap]. 0 when a
 * plan was built, else EIN_EUNSUPPORTED. */
int kn_cuda_ctx_cudnn_probe(kn_cuda_ctx *ctx, const kn_sg_params *p, char *line, size_t cap);
/* cudnnGetVersion() of the context's cuDNN into *version and "cuDNN N"
 * into line[cap]: 0; without cuDNN EIN_EUNSUPPORTED, line saying why. */
int kn_cuda_cudnn_version(kn_cuda_ctx *ctx, size_t *version, char *line, size_t cap);

/* One Program KERNEL instruction on device blocks (dispatch on kind, the
 * same fields as kn_cpu_run). ctx is needed for EINSUM only, and for
 * attention through cuDNN (kn_cuda_attention_auto). */
int kn_cuda_run(kn_cuda_ctx *ctx, const ein_kernel *k, const kn_block *ins, int nin,
                kn_block *out, void *stream, ein_error *err);

/* The message of the last failure of a kn_cuda_* call in this thread ("" if none). */
const char *kn_cuda_last_error(void);

#ifdef __cplusplus
}
#endif

#endif
