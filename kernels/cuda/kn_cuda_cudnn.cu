/* kernels/cuda/kn_cuda_cudnn.cu — attention through cuDNN's fused
 * scaled-dot-product attention (cuDNN 9 backend API), with our own kernels
 * as the fallback; see kn_cuda.h.
 *
 * The graph is data: kn_sdpa_graph.h describes it (the canonical op list
 * of cuDNN's frontend, with the softmax statistics LOG + ADD, P in the I/O
 * dtype, pointwise alpha 1 and NaN propagation, the -inf fill from cuDNN
 * 9.10), kn_sdpa_emit.h turns the description into backend descriptors
 * through a table of functions; this file fills that table with cuDNN's
 * functions and keeps the plans. Unit tests cover both without a GPU
 * (tests/kernels/test_kn_sdpa_graph, test_kn_sdpa_emit).
 *
 * STATUS: the graph before issue 33 (no LOG/ADD, P in f32) finalized but
 * found no engine on an H200 with cuDNN 9.19 ("tag_mha_graph: Dropout set
 * of ops not configured correctly"); the canonical graph here has not run
 * on a GPU yet (tools/gpu-check probes it first, variant by variant).
 *
 * Runtime: a plan per shape (kn_sg_params: dtype, heads, head dim, block
 * tokens, sequence bucket, number of packed sequences, causal, stats),
 * built on first use outside graph capture and cached (KN_DNN_SHAPES,
 * replaced round-robin, except those holding a partial's buffers). Packed sequences run as ONE plan per block: the
 * padding mask over SEQ_LEN_Q / SEQ_LEN_KV and ragged offsets, whose
 * int32 values live in device memory uploaded once per layout (never
 * freed while the context lives, so captured CUDA graphs replay them).
 * Key-block partials (attention_partial) run on cuDNN with Stats as a real
 * output when the key block is the query block (causal) or lies wholly
 * before it (no mask), then a small kernel writes our f32 [O | lse] rows.
 * Anything else, and any cuDNN error, falls back to our kernel: the
 * reason is kept per shape and reported once (kn_cuda_ctx_note_decline).
 * EIN_ATTENTION=ours turns cuDNN off, EIN_ATTENTION=cudnn makes a cuDNN
 * decline an error (tests). */
#include "kernels/cuda/kn_cuda_common.cuh"
#include "common/base/ein_knob.h"

#include "config.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cuda/kn_sdpa_graph.h"

#ifdef HAVE_CUDNN
#include <cudnn.h>

#include "kernels/cuda/kn_sdpa_emit.h"

#define KN_DNN_SHAPES 16   /* plans cached per context */
#define KN_DNN_SEGS 64     /* packed sequences in one block, at most */
#define KN_DNN_LAYOUTS 32  /* packed layouts whose lengths/offsets live on the device */
#define KN_DNN_BUCKET 128  /* the longest sequence rounds up to this (plans per bucket) */

typedef struct kn_dnn_plan {
    int used;
    kn_sg_params key;
    int ok;             /* 1: plan built; 0: unsupported (why) */
    char why[256];
    kn_sdpa_graph g;
    kn_sdpa_built b;
    void *tmp;          /* partials: O in the I/O dtype, then Stats f32 (cudaMalloc) */
    size_t tmp_stats;   /* byte offset of Stats in tmp */
} kn_dnn_plan;

typedef struct kn_dnn_layout {
    int64_t T, d;
    int n;
    int64_t seg[KN_DNN_SEGS + 1];
    int32_t *dev;       /* seq[n], off[n + 1] (seg * d), off_stats[n + 1] (seg) */
} kn_dnn_layout;

struct kn_cudnn {
    cudnnHandle_t h;
    size_t version;
    void *workspace;
    size_t workspace_bytes;
    kn_dnn_plan *plans; /* KN_DNN_SHAPES */
    int next;           /* round-robin replacement */
    kn_dnn_layout layouts[KN_DNN_LAYOUTS];
    int nlayouts;
};

static void dnn_last_error(char *buf, size_t cap)
{
    cudnnGetLastErrorString(buf, cap);
}

static const kn_dnn_api dnn_api = {
    cudnnBackendCreateDescriptor, cudnnBackendDestroyDescriptor, cudnnBackendSetAttribute,
    cudnnBackendGetAttribute,     cudnnBackendFinalize,          cudnnBackendExecute,
    cudnnGetErrorString,          dnn_last_error};

static void dnn_plan_clear(kn_dnn_plan *p)
{
    kn_sdpa_built_free(&dnn_api, &p->b);
    if (p->tmp)
        cudaFree(p->tmp);
    memset(p, 0, sizeof *p);
}

static int dnn_capturing(void *stream)
{
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing((cudaStream_t)stream, &st) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return st != cudaStreamCaptureStatusNone;
}

extern "C" int kn_cudnn_create(struct kn_cudnn **out, void *workspace, size_t workspace_bytes,
                               char *why, size_t cap)
{
    *out = NULL;
    struct kn_cudnn *c = (struct kn_cudnn *)calloc(1, sizeof *c);
    if (c)
        c->plans = (kn_dnn_plan *)calloc(KN_DNN_SHAPES, sizeof *c->plans);
    if (!c || !c->plans) {
        free(c);
        snprintf(why, cap, "out of memory");
        return EIN_ENOMEM;
    }
    cudnnStatus_t st = cudnnCreate(&c->h);
    if (st != CUDNN_STATUS_SUCCESS) {
        snprintf(why, cap, "cudnnCreate: %s", cudnnGetErrorString(st));
        free(c->plans);
        free(c);
        (void)cudaGetLastError();
        return EIN_EDEVICE;
    }
    c->workspace = workspace;
    c->workspace_bytes = workspace_bytes;
    c->version = cudnnGetVersion();
    snprintf(why, cap, "cuDNN %zu", c->version);
    *out = c;
    return 0;
}

extern "C" size_t kn_cudnn_get_version(struct kn_cudnn *c)
{
    return c ? c->version : 0;
}

extern "C" void kn_cudnn_destroy(struct kn_cudnn *c)
{
    if (!c)
        return;
    for (int i = 0; i < KN_DNN_SHAPES; i++)
        dnn_plan_clear(&c->plans[i]);
    for (int i = 0; i < c->nlayouts; i++)
        cudaFree(c->layouts[i].dev);
    free(c->plans);
    cudnnDestroy(c->h);
    free(c);
}

/* The cached plan of `key`, built on first use (never inside a graph
 * capture: NULL then, with why). */
static kn_dnn_plan *dnn_plan_for(struct kn_cudnn *c, const kn_sg_params *key, void *stream,
                                 char *why, size_t cap)
{
    for (int i = 0; i < KN_DNN_SHAPES; i++) {
        kn_dnn_plan *p = &c->plans[i];
        if (p->used && !memcmp(&p->key, key, sizeof *key))
            return p;
    }
    if (dnn_capturing(stream)) {
        snprintf(why, cap, "no cuDNN plan for this shape before the graph capture");
        return NULL;
    }
    /* Round-robin replacement, but never of a plan holding the partials'
     * buffers: a captured graph may still write them. */
    kn_dnn_plan *p = NULL;
    for (int i = 0; i < KN_DNN_SHAPES && !p; i++) {
        kn_dnn_plan *x = &c->plans[(c->next + i) % KN_DNN_SHAPES];
        if (!x->tmp)
            p = x, c->next = (c->next + i + 1) % KN_DNN_SHAPES;
    }
    if (!p) {
        snprintf(why, cap, "no room for another cuDNN plan (%d kept)", KN_DNN_SHAPES);
        return NULL;
    }
    dnn_plan_clear(p);
    p->used = 1;
    p->key = *key;
    p->b.cfg = -1;
    if (kn_sdpa_graph_build(key, &p->g, p->why, sizeof p->why) < 0)
        return p;
    if (kn_sdpa_emit_graph(&dnn_api, c->h, &p->g, &p->b) < 0 ||
        kn_sdpa_emit_plan(&dnn_api, c->h, &p->b, CUDNN_HEUR_MODE_A,
                          (int64_t)c->workspace_bytes) < 0) {
        snprintf(p->why, sizeof p->why, "%s", p->b.why);
        (void)cudaGetLastError();
        return p;
    }
    if (key->stats) { /* partials: O and Stats land here first */
        size_t esz = 2, o = (size_t)(key->hq * key->t * key->d) * esz;
        p->tmp_stats = (o + 255) / 256 * 256;
        if (cudaMalloc(&p->tmp, p->tmp_stats + (size_t)(key->hq * key->t) * sizeof(float)) !=
            cudaSuccess) {
            (void)cudaGetLastError();
            p->tmp = NULL;
            snprintf(p->why, sizeof p->why, "no device memory for the partial's O and Stats");
            return p;
        }
    }
    p->ok = 1;
    return p;
}

/* The sequences inside tokens [0, T): seg[0] = 0 < seg[1] < ... <
 * seg[n] = T, sequence i over [seg[i], seg[i+1]) (a token after the last
 * end belongs to a sequence starting there, as in kn_cpu_attention).
 * Returns n, or -1 when there are more than KN_DNN_SEGS. */
static int dnn_segments(const int64_t *seq_ends, int nseq, int64_t T, int64_t *seg)
{
    int n = 0;
    seg[0] = 0;
    for (int i = 0; i < nseq; i++)
        if (seq_ends[i] > seg[n] && seq_ends[i] < T) {
            if (n + 1 >= KN_DNN_SEGS)
                return -1;
            seg[++n] = seq_ends[i];
        }
    seg[++n] = T;
    return n;
}

/* The device copy of a packed layout's lengths and offsets: uploaded once,
 * outside graph capture, and kept. */
static const kn_dnn_layout *dnn_layout_for(struct kn_cudnn *c, int64_t T, int64_t d,
                                           const int64_t *seg, int n, void *stream, char *why,
                                           size_t cap)
{
    for (int i = 0; i < c->nlayouts; i++) {
        kn_dnn_layout *l = &c->layouts[i];
        if (l->T == T && l->d == d && l->n == n &&
            !memcmp(l->seg, seg, sizeof *seg * (size_t)(n + 1)))
            return l;
    }
    if (dnn_capturing(stream))
        return snprintf(why, cap, "packed lengths not on the device before the graph capture"),
               (const kn_dnn_layout *)NULL;
    if (c->nlayouts >= KN_DNN_LAYOUTS)
        return snprintf(why, cap, "more than %d packed layouts", KN_DNN_LAYOUTS),
               (const kn_dnn_layout *)NULL;
    int32_t host[3 * KN_DNN_SEGS + 2];
    for (int i = 0; i < n; i++)
        host[i] = (int32_t)(seg[i + 1] - seg[i]);
    for (int i = 0; i <= n; i++) {
        host[n + i] = (int32_t)(seg[i] * d);
        host[2 * n + 1 + i] = (int32_t)seg[i];
    }
    kn_dnn_layout *l = &c->layouts[c->nlayouts];
    size_t bytes = sizeof(int32_t) * (size_t)(3 * n + 2);
    if (cudaMalloc((void **)&l->dev, bytes) != cudaSuccess ||
        cudaMemcpy(l->dev, host, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
        (void)cudaGetLastError();
        if (l->dev)
            cudaFree(l->dev);
        l->dev = NULL;
        return snprintf(why, cap, "cannot put the packed lengths on the device"),
               (const kn_dnn_layout *)NULL;
    }
    l->T = T, l->d = d, l->n = n;
    memcpy(l->seg, seg, sizeof *seg * (size_t)(n + 1));
    c->nlayouts++;
    return l;
}

/* The checks every cuDNN call makes, one line each: 0 when cuDNN may take
 * these blocks, else EIN_EUNSUPPORTED with the reason. The graph itself
 * declines more (kn_sdpa_graph_build: dtypes, head dims, GQA ratio). */
static int dnn_covers(int64_t group, const kn_block *q, const kn_block *k, const kn_block *v,
                      const kn_block *out, char *why, size_t cap)
{
#define KN_DNN_DECLINE(...) return snprintf(why, cap, __VA_ARGS__), EIN_EUNSUPPORTED
    ein_dtype dt = q->dtype;
    if ((dt != EIN_F16 && dt != EIN_BF16) || k->dtype != dt || v->dtype != dt)
        KN_DNN_DECLINE("dtypes other than all f16 or all bf16");
    if (q->box.rank != 3 || k->box.rank != 3 || v->box.rank != 3 || out->box.rank != 3)
        KN_DNN_DECLINE("blocks not of rank 3");
    int64_t d = q->box.hi[2] - q->box.lo[2];
    if (q->box.lo[2] != 0 || k->box.lo[2] != 0 || k->box.hi[2] != d || v->box.hi[2] != d)
        KN_DNN_DECLINE("head dims not whole and equal");
    int64_t hq = q->box.hi[0] - q->box.lo[0], hkv = k->box.hi[0] - k->box.lo[0];
    if (group < 1 || hq != group * hkv || q->box.lo[0] != group * k->box.lo[0] ||
        v->box.lo[0] != k->box.lo[0] || v->box.hi[0] != k->box.hi[0] ||
        v->box.lo[1] != k->box.lo[1] || v->box.hi[1] != k->box.hi[1])
        KN_DNN_DECLINE("heads or boxes that do not line up");
    if (((uintptr_t)q->data | (uintptr_t)k->data | (uintptr_t)v->data | (uintptr_t)out->data) &
        15)
        KN_DNN_DECLINE("pointers not 16-byte aligned");
    return 0;
#undef KN_DNN_DECLINE
}

static kn_sg_dtype dnn_io(ein_dtype t)
{
    return t == EIN_F16 ? KN_SG_F16 : t == EIN_BF16 ? KN_SG_BF16 : KN_SG_F32;
}

/* The plan key of a block of T tokens holding sequences seg[0..n]. */
static void dnn_key(struct kn_cudnn *c, ein_dtype dt, int64_t hq, int64_t hkv, int64_t d,
                    int64_t T, const int64_t *seg, int n, int causal, int stats,
                    kn_sg_params *key)
{
    memset(key, 0, sizeof *key); /* compared with memcmp */
    key->io = dnn_io(dt);
    key->hq = hq, key->hkv = hkv, key->d = d, key->t = T;
    key->causal = causal;
    key->stats = stats;
    key->cudnn_version = c->version;
    if (n <= 1) {
        key->s = T;
        return;
    }
    int64_t longest = 0;
    for (int i = 0; i < n; i++)
        longest = seg[i + 1] - seg[i] > longest ? seg[i + 1] - seg[i] : longest;
    longest = (longest + KN_DNN_BUCKET - 1) / KN_DNN_BUCKET * KN_DNN_BUCKET;
    key->s = longest < T ? longest : T;
    key->nseq = n;
}

/* Plan (and packed layout) for the call, then its execution. */
static int dnn_run(struct kn_cudnn *c, const kn_sg_params *key, const int64_t *seg, int nseg,
                   void *q, void *k, void *v, void *o, void *stats, void *stream,
                   kn_dnn_plan **used, char *why, size_t cap)
{
    kn_dnn_plan *p = dnn_plan_for(c, key, stream, why, cap);
    if (!p)
        return EIN_EUNSUPPORTED;
    if (!p->ok)
        return snprintf(why, cap, "%s", p->why), EIN_EUNSUPPORTED;
    kn_sdpa_ptrs ptr;
    memset(&ptr, 0, sizeof ptr);
    ptr.q = q, ptr.k = k, ptr.v = v, ptr.o = o, ptr.stats = stats;
    if (key->nseq > 0) {
        const kn_dnn_layout *l = dnn_layout_for(c, key->t, key->d, seg, nseg, stream, why, cap);
        if (!l)
            return EIN_EUNSUPPORTED;
        ptr.seq_q = ptr.seq_kv = l->dev;
        ptr.off = l->dev + nseg;
        ptr.off_stats = l->dev + 2 * nseg + 1;
    }
    cudnnStatus_t st = cudnnSetStream(c->h, (cudaStream_t)stream);
    if (st != CUDNN_STATUS_SUCCESS)
        return snprintf(why, cap, "cudnnSetStream: %s", cudnnGetErrorString(st)), EIN_EDEVICE;
    int rc = kn_sdpa_execute(&dnn_api, c->h, &p->g, &p->b, &ptr, c->workspace, why, cap);
    if (rc < 0) { /* later calls of this shape go to our kernel directly */
        p->ok = 0;
        snprintf(p->why, sizeof p->why, "%s", why);
        (void)cudaGetLastError();
        return rc;
    }
    *used = p;
    return 0;
}

extern "C" int kn_cudnn_attention(struct kn_cudnn *c, int64_t group, const int64_t *seq_ends,
                                  int nseq, const kn_block *q, const kn_block *k,
                                  const kn_block *v, kn_block *out, void *stream, char *why,
                                  size_t cap)
{
    if (!c)
        return snprintf(why, cap, "no cuDNN context"), EIN_EUNSUPPORTED;
    int rc = dnn_covers(group, q, k, v, out, why, cap);
    if (rc < 0)
        return rc;
    int64_t T = q->box.hi[1] - q->box.lo[1];
    if (out->dtype != q->dtype)
        return snprintf(why, cap, "an output dtype other than the inputs'"), EIN_EUNSUPPORTED;
    for (int i = 0; i < 3; i++)
        if (out->box.lo[i] != q->box.lo[i] || out->box.hi[i] != q->box.hi[i])
            return snprintf(why, cap, "an output box other than q's"), EIN_EUNSUPPORTED;
    if (q->box.lo[1] != 0 || k->box.lo[1] != 0 || k->box.hi[1] != T)
        return snprintf(why, cap, "token blocks other than q, k, v all over [0, T)"),
               EIN_EUNSUPPORTED;
    int64_t seg[KN_DNN_SEGS + 1];
    int nseg = dnn_segments(seq_ends, nseq, T, seg);
    if (nseg < 0)
        return snprintf(why, cap, "more than %d packed sequences", KN_DNN_SEGS),
               EIN_EUNSUPPORTED;
    kn_sg_params key;
    dnn_key(c, q->dtype, q->box.hi[0] - q->box.lo[0], k->box.hi[0] - k->box.lo[0], q->box.hi[2],
            T, seg, nseg, 1, 0, &key);
    kn_dnn_plan *p = NULL;
    if ((rc = dnn_run(c, &key, seg, nseg, q->data, k->data, v->data, out->data, NULL, stream, &p,
                      why, cap)) < 0)
        return rc;
    snprintf(why, cap, "cuDNN SDPA (%d sequence%s in one plan, engine config %d, workspace "
             "%lld bytes)", nseg, nseg == 1 ? "" : "s", p->b.cfg, (long long)p->b.workspace);
    return 0;
}

/* out[r, 0..d) = O[r, ..] (io dtype), out[r, d] = stats[r]: our partial
 * rows from cuDNN's outputs. */
template <typename T>
__global__ void kn_dnn_part_rows(const T *o, const float *stats, float *out, int64_t rows,
                                 int64_t d)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < rows * (d + 1);
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / (d + 1), e = i % (d + 1);
        out[i] = e < d ? ld<T>(o, r * d + e) : stats[r];
    }
}

extern "C" int kn_cudnn_attention_partial(struct kn_cudnn *c, int64_t group,
                                          const int64_t *seq_ends, int nseq, const kn_block *q,
                                          const kn_block *k, const kn_block *v, kn_block *out,
                                          void *stream, char *why, size_t cap)
{
    if (!c)
        return snprintf(why, cap, "no cuDNN context"), EIN_EUNSUPPORTED;
    if (!k || !v)
        return snprintf(why, cap, "a partial without keys"), EIN_EUNSUPPORTED;
    int rc = dnn_covers(group, q, k, v, out, why, cap);
    if (rc < 0)
        return rc;
    int64_t t0 = q->box.lo[1], tq = q->box.hi[1] - t0, u0 = k->box.lo[1];
    int64_t tk = k->box.hi[1] - u0, d = q->box.hi[2], hq = q->box.hi[0] - q->box.lo[0];
    if (out->dtype != EIN_F32 || out->box.hi[2] != d + 1)
        return snprintf(why, cap, "partial rows other than f32 [O | lse]"), EIN_EUNSUPPORTED;
    int causal = t0 == u0 && tq == tk;
    if (!causal && !(tq == tk && u0 + tk <= t0))
        return snprintf(why, cap, "a key block that is neither the query block nor wholly "
                        "before it, or of another length"), EIN_EUNSUPPORTED;
    for (int i = 0; i < nseq; i++) /* every row's sequence starts at or before u0 */
        if (seq_ends[i] > u0 && seq_ends[i] < t0 + tq)
            return snprintf(why, cap, "a sequence boundary inside the partial's rows"),
                   EIN_EUNSUPPORTED;
    kn_sg_params key;
    dnn_key(c, q->dtype, hq, k->box.hi[0] - k->box.lo[0], d, tq, NULL, 1, causal, 1, &key);
    kn_dnn_plan *p = dnn_plan_for(c, &key, stream, why, cap);
    if (!p)
        return EIN_EUNSUPPORTED;
    if (!p->ok)
        return snprintf(why, cap, "%s", p->why), EIN_EUNSUPPORTED;
    float *stats = (float *)((char *)p->tmp + p->tmp_stats);
    if ((rc = dnn_run(c, &key, NULL, 1, q->data, k->data, v->data, p->tmp, stats, stream, &p,
                      why, cap)) < 0)
        return rc;
    int64_t rows = hq * tq;
    cudaStream_t s = (cudaStream_t)stream;
    if (q->dtype == EIN_F16)
        kn_dnn_part_rows<__half><<<kn_cu_grid(rows * (d + 1), KN_CU_BLOCK), KN_CU_BLOCK, 0, s>>>(
            (const __half *)p->tmp, stats, (float *)out->data, rows, d);
    else
        kn_dnn_part_rows<__nv_bfloat16>
            <<<kn_cu_grid(rows * (d + 1), KN_CU_BLOCK), KN_CU_BLOCK, 0, s>>>(
                (const __nv_bfloat16 *)p->tmp, stats, (float *)out->data, rows, d);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return snprintf(why, cap, "partial rows: %s", cudaGetErrorString(e)), EIN_EDEVICE;
    snprintf(why, cap, "cuDNN SDPA partial (%s key block, Stats as output)",
             causal ? "diagonal" : "earlier");
    return 0;
}

/* ---- the probe (tools/gpu-check, bench-kernels-cuda -P): one line per
 * graph variant ---- */

/* line[cap] += printf(fmt, ...), never past cap (*n: its length so far). */
static void dnn_append(char *line, size_t cap, size_t *n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void dnn_append(char *line, size_t cap, size_t *n, const char *fmt, ...)
{
    if (*n + 1 >= cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(line + *n, cap - *n, fmt, ap);
    va_end(ap);
    if (k > 0)
        *n = *n + (size_t)k < cap ? *n + (size_t)k : cap - 1;
}

static double dnn_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

extern "C" int kn_cudnn_probe_variant(struct kn_cudnn *c, const kn_sg_params *p, char *line,
                                      size_t cap)
{
    kn_sdpa_graph g;
    static kn_sdpa_built b; /* large: not on the stack */
    char why[256] = "";
    if (!cap)
        return EIN_EINVAL;
    line[0] = '\0';
    if (kn_sdpa_graph_build(p, &g, why, sizeof why) < 0)
        return snprintf(line, cap, "graph: %s", why), EIN_EUNSUPPORTED;
    size_t n = 0;
    double t0 = dnn_now_ms();
    int rc = kn_sdpa_emit_graph(&dnn_api, c->h, &g, &b);
    dnn_append(line, cap, &n, "%d ops: graph %s (%.1f ms)", g.nop,
               rc < 0 ? "REJECTED" : "finalized", dnn_now_ms() - t0);
    if (rc == 0) {
        int ok[16];
        int64_t count = -1;
        int nok = kn_sdpa_engines(&dnn_api, &b, ok, 16, &count);
        dnn_append(line, cap, &n, "; engines %d of %lld finalize [", nok, (long long)count);
        for (int i = 0; i < nok; i++)
            dnn_append(line, cap, &n, "%s%d", i ? " " : "", ok[i]);
        dnn_append(line, cap, &n, "]");
        double t1 = dnn_now_ms();
        rc = kn_sdpa_emit_plan(&dnn_api, c->h, &b, CUDNN_HEUR_MODE_A,
                               (int64_t)c->workspace_bytes);
        if (rc == 0)
            dnn_append(line, cap, &n, "; heuristics %lld configs; plan cfg %d workspace %lld "
                       "bytes, built in %.1f ms", (long long)b.ncfg, b.cfg,
                       (long long)b.workspace, dnn_now_ms() - t1);
    }
    if (rc < 0)
        dnn_append(line, cap, &n, "; error: %s", b.why);
    kn_sdpa_built_free(&dnn_api, &b);
    (void)cudaGetLastError();
    return rc < 0 ? EIN_EUNSUPPORTED : 0;
}

#else /* !HAVE_CUDNN */

extern "C" int kn_cudnn_create(struct kn_cudnn **out, void *workspace, size_t workspace_bytes,
                               char *why, size_t cap)
{
    (void)workspace, (void)workspace_bytes;
    *out = NULL;
    snprintf(why, cap, "built without cuDNN");
    return EIN_EUNSUPPORTED;
}

extern "C" void kn_cudnn_destroy(struct kn_cudnn *c)
{
    (void)c;
}

extern "C" int kn_cudnn_attention(struct kn_cudnn *c, int64_t group, const int64_t *seq_ends,
                                  int nseq, const kn_block *q, const kn_block *k,
                                  const kn_block *v, kn_block *out, void *stream, char *why,
                                  size_t cap)
{
    (void)c, (void)group, (void)seq_ends, (void)nseq, (void)q, (void)k, (void)v, (void)out;
    (void)stream;
    snprintf(why, cap, "built without cuDNN");
    return EIN_EUNSUPPORTED;
}

extern "C" int kn_cudnn_attention_partial(struct kn_cudnn *c, int64_t group,
                                          const int64_t *seq_ends, int nseq, const kn_block *q,
                                          const kn_block *k, const kn_block *v, kn_block *out,
                                          void *stream, char *why, size_t cap)
{
    return kn_cudnn_attention(c, group, seq_ends, nseq, q, k, v, out, stream, why, cap);
}

extern "C" size_t kn_cudnn_get_version(struct kn_cudnn *c)
{
    (void)c;
    return 0;
}

extern "C" int kn_cudnn_probe_variant(struct kn_cudnn *c, const kn_sg_params *p, char *line,
                                      size_t cap)
{
    (void)c, (void)p;
    snprintf(line, cap, "built without cuDNN");
    return EIN_EUNSUPPORTED;
}

#endif

/* ---- the runtime choice --------------------------------------------- */

/* EIN_ATTENTION: "ours" (never cuDNN), "cudnn" (a cuDNN failure is an
 * error), anything else or unset: cuDNN where it applies, else ours. */
static int kn_attention_mode(void)
{
    const char *m = ein_knob_get(EIN_KNOB_ATTENTION);
    if (m && !strcmp(m, "ours"))
        return 0;
    if (m && !strcmp(m, "cudnn"))
        return 2;
    return 1;
}

/* "q [Hq, T, d] dtype, k [..]": the shape a decline is reported for. */
static void kn_attention_shape(const char *what, const kn_block *q, const kn_block *k, int nseq,
                               char *buf, size_t cap)
{
    snprintf(buf, cap, "%s %s q [%lld, %lld, %lld] at token %lld, kv heads %lld over %lld tokens "
             "at %lld, %d sequence end%s", what, ein_dtype_name(q->dtype),
             (long long)(q->box.hi[0] - q->box.lo[0]), (long long)(q->box.hi[1] - q->box.lo[1]),
             (long long)(q->box.hi[2] - q->box.lo[2]), (long long)q->box.lo[1],
             k ? (long long)(k->box.hi[0] - k->box.lo[0]) : 0LL,
             k ? (long long)(k->box.hi[1] - k->box.lo[1]) : 0LL, k ? (long long)k->box.lo[1] : 0LL,
             nseq, nseq == 1 ? "" : "s");
}

/* Our kernel ran: count it, and report a cuDNN decline once per shape. */
static void kn_attention_ours(kn_cuda_ctx *ctx, int mode, const char *what, const kn_block *q,
                              const kn_block *k, int nseq, const char *why)
{
    if (!ctx)
        return;
    kn_cuda_ctx_note_attention(ctx, 0, why);
    if (mode > 0 && kn_cuda_ctx_cudnn(ctx)) {
        char shape[256];
        kn_attention_shape(what, q, k, nseq, shape, sizeof shape);
        kn_cuda_ctx_note_decline(ctx, shape, why);
    }
}

extern "C" int kn_cuda_attention_auto(kn_cuda_ctx *ctx, int64_t group, const int64_t *seq_ends,
                                      int nseq, const kn_block *q, const kn_block *k,
                                      const kn_block *v, kn_block *out, void *stream,
                                      ein_error *err)
{
    int mode = kn_attention_mode();
    char why[256] = "EIN_ATTENTION=ours";
    struct kn_cudnn *dnn = ctx ? kn_cuda_ctx_cudnn(ctx) : NULL;
    if (mode > 0 && !dnn)
        snprintf(why, sizeof why, "%s", ctx ? kn_cuda_ctx_cudnn_status(ctx) : "no context");
    if (mode > 0 && dnn) {
        int rc = kn_cudnn_attention(dnn, group, seq_ends, nseq, q, k, v, out, stream, why,
                                    sizeof why);
        if (rc == 0) {
            kn_cuda_ctx_note_attention(ctx, 1, why);
            return 0;
        }
    }
    if (mode == 2)
        return kn_cu_fail(err, EIN_EUNSUPPORTED, "cuda attention: EIN_ATTENTION=cudnn: %s", why);
    kn_attention_ours(ctx, mode, "attention", q, k, nseq, why);
    return kn_cuda_attention(group, seq_ends, nseq, q, k, v, out, stream, err);
}

extern "C" int kn_cuda_attention_partial_auto(kn_cuda_ctx *ctx, int64_t group,
                                              const int64_t *seq_ends, int nseq,
                                              const kn_block *q, const kn_block *k,
                                              const kn_block *v, kn_block *out, void *stream,
                                              ein_error *err)
{
    int mode = kn_attention_mode();
    char why[256] = "EIN_ATTENTION=ours";
    struct kn_cudnn *dnn = ctx ? kn_cuda_ctx_cudnn(ctx) : NULL;
    if (mode > 0 && !dnn)
        snprintf(why, sizeof why, "%s", ctx ? kn_cuda_ctx_cudnn_status(ctx) : "no context");
    /* A partial without keys is ours (it writes -inf and zeros): no decline */
    if (!k || kn_cu_vol(&k->box) == 0)
        return kn_cuda_attention_partial(group, seq_ends, nseq, q, k, v, out, stream, err);
    if (mode > 0 && dnn) {
        int rc = kn_cudnn_attention_partial(dnn, group, seq_ends, nseq, q, k, v, out, stream,
                                            why, sizeof why);
        if (rc == 0) {
            kn_cuda_ctx_note_attention(ctx, 1, why);
            return 0;
        }
    }
    if (mode == 2)
        return kn_cu_fail(err, EIN_EUNSUPPORTED, "cuda attention_partial: EIN_ATTENTION=cudnn: %s",
                          why);
    kn_attention_ours(ctx, mode, "attention_partial", q, k, nseq, why);
    return kn_cuda_attention_partial(group, seq_ends, nseq, q, k, v, out, stream, err);
}
