/* kernels/kn_cpu.h — CPU concrete operators on sub-tensor blocks.
 *
 * Kernels take kn_block (kernels/kn_block.h): a dense row-major block of
 * data over its global `box`, in `dtype`. Kernels compute in f32 (f16/bf16
 * are converted on load and store) and write all of the output block.
 * Block boxes must agree with the operator: for an einsum, every index
 * letter has the same interval in each operand and in the output where it
 * appears (an output letter's interval may be any sub-interval of the
 * full dimension: this is what a function specification is). A kernel
 * checks this and fails with EIN_ESHAPE otherwise. Kernels allocate their
 * own scratch with malloc (CPU only) and free it before returning; they
 * never keep state. GEMM goes through OpenBLAS; the caller decides the
 * thread count (workers use one). */
#ifndef KN_CPU_H
#define KN_CPU_H

#include "common/ir/ein_box.h"
#include "common/ir/ein_dtype.h"
#include "common/base/ein_error.h"
#include "common/ir/ein_program.h"
#include "kernels/kn_block.h"

/* Validate an einsum subscript string for `nin` operands of the given ranks
 * ("ij,jk->ik", "bij,bjk->bik", "ij->j", ...): letters a-z, no repeated
 * letter within one operand, every output letter present in an input, no
 * repeated output letter. At most 2 operands and EIN_MAX_RANK letters each.
 * A malformed string or a wrong operand count fails with EIN_EINVAL, a rank
 * that does not match its letters with EIN_ESHAPE. */
int kn_einsum_check(const char *subscripts, int nin, const int *ranks,
                    int out_rank, ein_error *err);

/* out = einsum(subscripts, a[, b]); b is NULL for one operand. Letters in
 * an input but not in the output are summed over. out must not overlap a
 * or b. The elementwise kernels below allow out to be an input (in place). */
int kn_cpu_einsum(const char *subscripts, const kn_block *a, const kn_block *b,
                  kn_block *out, ein_error *err);

int kn_cpu_unary(ein_unary op, double scalar, const kn_block *x, kn_block *out,
                 ein_error *err);

/* Elementwise with numpy broadcasting: an input of lower rank is aligned
 * to the right of out; along a dimension where an input block has extent 1
 * and out's block differs from it (other extent or other position) the
 * input is broadcast (its one element is used); elsewhere the input's
 * interval must equal out's. Equal boxes is the common case. */
int kn_cpu_binary(ein_binary op, const kn_block *a, const kn_block *b,
                  kn_block *out, ein_error *err);

/* out = srcs[0] (+|max) srcs[1] ...; all the same box and dtype as out.
 * EIN_AGG_LSE is kn_cpu_agg_lse. */
int kn_cpu_agg(ein_agg op, const kn_block *srcs, int n, kn_block *out,
               ein_error *err);

/* ---- The operators of the planner issue (LLaMA block). -----------------
 * Each states which boxes it accepts. "whole along an axis" means the
 * block's interval there is the full dimension, which the caller (the
 * planner's spec) guarantees and the kernel checks when it can (it knows
 * full extents only where a parameter states them). */

/* softmax over `axis`: out box == x box; the block must hold the whole
 * axis (every row the kernel normalises is complete). */
int kn_cpu_softmax(int axis, const kn_block *x, kn_block *out, ein_error *err);

/* RMSNorm over the last axis: out = x / sqrt(mean(x^2) + eps) * w, where
 * w is rank 1 over [0, d) (the whole last axis) and x's block holds the
 * whole last axis [0, d). out box == x box. */
int kn_cpu_rmsnorm(double eps, const kn_block *x, const kn_block *w, kn_block *out,
                   ein_error *err);
/* Fused kernels (issue 33): each computes exactly what the pair of kernels
 * it replaces computes, bit for bit on these kernels, because the value
 * between the two is rounded to out's dtype as the unfused pair stores it.
 *
 * out = silu(gate) * up: gate, up and out of one box (no broadcasting);
 * silu's value is rounded to out's dtype before the multiply (the unfused
 * pair's intermediate has out's dtype). out may be gate or up. */
int kn_cpu_swiglu(const kn_block *gate, const kn_block *up, kn_block *out, ein_error *err);
/* Residual add and RMSNorm in one pass over each row: with h = a + b
 * (rounded to out's dtype), out's first half is h and its second half
 * rmsnorm(h, w, eps), as kn_cpu_rmsnorm computes it. a and b have one box
 * holding the whole last axis [0, d), w is rank 1 over [0, d), out's box
 * is [0, 2) x a's box. out must not overlap a or b. */
int kn_cpu_add_rmsnorm(double eps, const kn_block *a, const kn_block *b, const kn_block *w,
                       kn_block *out, ein_error *err);
/* LayerNorm over the last axis with weight w and bias b (both [0, d)). */
int kn_cpu_layernorm(double eps, const kn_block *x, const kn_block *w, const kn_block *b,
                     kn_block *out, ein_error *err);

/* Rotary embedding (LLaMA, interleaved pairs): x is [tokens, H*head_dim];
 * the block's hidden interval starts and ends at multiples of head_dim.
 * For global token t at position p (t minus the start of its sequence:
 * sequences end at seq_ends[0] < seq_ends[1] < ...; nseq == 0 means one
 * sequence starting at 0) and pair i of a head (elements 2i, 2i+1 of the
 * head), angle = p * theta^(-2i/head_dim), and the pair is rotated by it.
 * out box == x box. */
int kn_cpu_rope(int64_t head_dim, double theta, const int64_t *seq_ends, int nseq,
                const kn_block *x, kn_block *out, ein_error *err);
/* The same with a pairing `style` (ein_rope_style): EIN_ROPE_INTERLEAVED
 * is kn_cpu_rope; EIN_ROPE_HALF pairs elements i and i + head_dim/2 of a
 * head (Hugging Face's rotate_half: out = x*cos + rotate_half(x)*sin),
 * with the same angle for pair i. Any other style is EIN_EINVAL. */
int kn_cpu_rope_style(int style, int64_t head_dim, double theta, const int64_t *seq_ends,
                      int nseq, const kn_block *x, kn_block *out, ein_error *err);
/* The same with frequencies rescaled as `sc` says (ein_rope_freq,
 * common/ir/ein_rope.h; NULL or type NONE: unscaled; invalid: EIN_EINVAL). */
int kn_cpu_rope_scaled(int style, int64_t head_dim, double theta, const ein_rope_scaling *sc,
                       const int64_t *seq_ends, int nseq, const kn_block *x, kn_block *out,
                       ein_error *err);

/* Causal attention with grouped-query heads over packed sequences.
 * q and out are [heads_q, seq, d], k and v [heads_kv, seq, d] (global
 * boxes). Query head h uses kv head h / group. The q block's head interval
 * must be [group*a, group*b) when k's and v's is [a, b); d is whole in all.
 * Query at global token t attends keys u with start(t) <= u <= t, where
 * start(t) is the start of t's sequence (seq_ends as for rope); the k/v
 * blocks' token interval must contain every such key of every query of the
 * q block (the kernel checks). Scale 1/sqrt(d); online softmax in tiles
 * (FlashAttention's algorithm). out box == q box. */
int kn_cpu_attention(int64_t group, const int64_t *seq_ends, int nseq, const kn_block *q,
                     const kn_block *k, const kn_block *v, kn_block *out, ein_error *err);

/* One key block's share of causal attention (issue 13): q as for
 * kn_cpu_attention; k and v hold any token interval [u0, u1) (both NULL,
 * or of zero volume: no keys). Each query row attends the keys of the
 * block it would see in kn_cpu_attention. out is f32 over
 * ein_agg_box(EIN_AGG_LSE, q box): per row the output normalised over the
 * keys seen, then their log-sum-exp (of the scaled scores); a row that
 * sees no key is 0 with log-sum-exp -inf. kn_cpu_agg_lse of the partials
 * of key blocks tiling every row's keys, without the last column, is
 * kn_cpu_attention. */
int kn_cpu_attention_partial(int64_t group, const int64_t *seq_ends, int nseq,
                             const kn_block *q, const kn_block *k, const kn_block *v,
                             kn_block *out, ein_error *err);

/* kn_cpu_attention and kn_cpu_attention_partial with a sliding window
 * W >= 0 (issue 34; 0: none, the functions above; negative: EIN_EINVAL):
 * query t attends keys u of its sequence with t - W < u <= t, i.e.
 * max(start(t), t - W + 1) <= u <= t (transformers' Mistral/Qwen2 rule: a
 * key is masked when t - u >= W). kn_cpu_attention_window's k/v blocks
 * need only the keys inside the windows. */
int kn_cpu_attention_window(int64_t group, int64_t window, const int64_t *seq_ends, int nseq,
                            const kn_block *q, const kn_block *k, const kn_block *v,
                            kn_block *out, ein_error *err);
int kn_cpu_attention_partial_window(int64_t group, int64_t window, const int64_t *seq_ends,
                                    int nseq, const kn_block *q, const kn_block *k,
                                    const kn_block *v, kn_block *out, ein_error *err);

/* The EIN_AGG_LSE merge (see ein_program.h): srcs and out f32 over one
 * box whose last interval is [0, d + 1); out may alias a source. Also
 * reached through kn_cpu_agg(EIN_AGG_LSE, ...). */
int kn_cpu_agg_lse(const kn_block *srcs, int n, kn_block *out, ein_error *err);

/* Reduce (EIN_AGG_SUM or EIN_AGG_MAX) over the axes in `axes` (bit i =
 * axis i). The output drops those axes; its box is x's box without them.
 * A block holding part of a reduced axis gives a partial result (the
 * planner aggregates partials with the same op). */
int kn_cpu_reduce(ein_agg op, uint32_t axes, const kn_block *x, kn_block *out,
                  ein_error *err);

/* Concat along `axis`: input i sits at offsets[i] along axis in the
 * output (offsets ascending; input i's global extent along axis is
 * offsets[i+1]-offsets[i]). Each input block (in that input's own global
 * coordinates) is copied where it overlaps out's box; together the inputs
 * must cover out's box. */
int kn_cpu_concat(int axis, const int64_t *offsets, const kn_block *ins, int n,
                  kn_block *out, ein_error *err);

/* Slice along `axis`: out[..., j, ...] = x[..., j + start, ...]; x's box
 * must contain out's box shifted by start. */
int kn_cpu_slice(int axis, int64_t start, const kn_block *x, kn_block *out,
                 ein_error *err);

/* Row gather: out[t, :] = table[ids[t], :]. table [v0,v1) x [d0,d1) is a
 * block of a table of `rows` rows (f32/f16/bf16), ids [t0,t1) (i32 or
 * i64), out [t0,t1) x [d0,d1) in any float dtype. An id in [0, rows) but
 * outside [v0, v1) gives a zero row (the vocabulary-parallel split: the
 * blocks' outputs are summed); an id outside [0, rows) fails with
 * EIN_EINVAL naming the token and the id, before out is written. */
int kn_cpu_embedding(int64_t rows, const kn_block *table, const kn_block *ids, kn_block *out,
                     ein_error *err);

/* Generation (issue 25). Positions `pos` are i32 or i64, one per sequence
 * (batch index) or token, over the same interval as the block's batch or
 * tokens.
 * C >= 1 new tokens per sequence (C = 1: a decode step; C > 1: a prefill
 * chunk): token rows [C*b0, C*b1), token C*b + t of sequence b at position
 * pos[b] + t.
 * cache_write: state and out [h0,h1) x [b0,b1) x [s0,s1) x [0,D) (out may
 * be state: in place; else state is copied first), x [h0,h1) x
 * [C*b0,C*b1) x [0,D), pos [b0,b1): out[h, b, pos[b] + t, :] =
 * x[h, C*b + t, :] where pos[b] + t lies in [s0, s1). A pos[b] outside
 * [0, rows - C] (rows = the cache length) fails with EIN_EINVAL naming the
 * sequence, before out is written.
 * decode_attention: q [g*h0,g*h1) x [C*b0,C*b1) x [0,D) (g = group), k and
 * v [h0,h1) x [b0,b1) x [s0,s1) x [0,D), pos [b0,b1): query row
 * (qh, C*b + t) attends keys [s0, min(s1, pos[b] + t + 1)) of kv head
 * qh / g (causal within the chunk), scale 1/sqrt(D). With partial 0 out is q's box (a row with no key fails);
 * with partial 1 out is f32 over ein_agg_box(EIN_AGG_LSE, q box) as for
 * kn_cpu_attention_partial (a row with no key, a block past pos, is the
 * merge's identity and reads no key). A negative pos fails.
 * rope_at: kn_cpu_rope_style with token t at position pos[t] (x, out
 * [t0,t1) x [c0,c1), pos [t0,t1)); out may be x. */
int kn_cpu_cache_write(int64_t rows, const kn_block *state, const kn_block *x,
                       const kn_block *pos, kn_block *out, ein_error *err);
int kn_cpu_decode_attention(int64_t group, int partial, const kn_block *q, const kn_block *k,
                            const kn_block *v, const kn_block *pos, kn_block *out,
                            ein_error *err);
/* The same with a sliding window W >= 0 (0: none, as above; negative:
 * EIN_EINVAL): row (qh, C*b + t) at position p = pos[b] + t attends keys
 * [max(s0, p - W + 1), min(s1, p + 1)) — transformers' rule, a key j is
 * masked when p - j >= W. With partial 0 a row with no such key fails. */
int kn_cpu_decode_attention_window(int64_t group, int64_t window, int partial, const kn_block *q,
                                   const kn_block *k, const kn_block *v, const kn_block *pos,
                                   kn_block *out, ein_error *err);
int kn_cpu_rope_at(int style, int64_t head_dim, double theta, const kn_block *x,
                   const kn_block *pos, kn_block *out, ein_error *err);
/* kn_cpu_rope_at with frequencies rescaled as `sc` says (kn_cpu_rope_scaled). */
int kn_cpu_rope_at_scaled(int style, int64_t head_dim, double theta, const ein_rope_scaling *sc,
                          const kn_block *x, const kn_block *pos, kn_block *out, ein_error *err);

/* [T, H*D] <-> [H, T, D] with D = head_dim. A block maps box to box:
 * out [h0,h1) x [t0,t1) x [0,D) <- x [t0,t1) x [h0*D, h1*D). */
int kn_cpu_split_heads(int64_t head_dim, const kn_block *x, kn_block *out, ein_error *err);
int kn_cpu_merge_heads(int64_t head_dim, const kn_block *x, kn_block *out, ein_error *err);

/* Threads the CPU kernels may use (OpenBLAS); workers use one each, since
 * every device is its own process. */
void kn_cpu_set_threads(int n);

/* Run one Program KERNEL instruction on its blocks (dispatch on kind). */
int kn_cpu_run(const ein_kernel *k, const kn_block *ins, int nin, kn_block *out,
               ein_error *err);

#endif
