/* kernels/cuda/kn_sdpa_emit.h — a kn_sdpa_graph (kn_sdpa_graph.h) turned
 * into cuDNN backend descriptors, an execution plan and its execution.
 *
 * Every cuDNN call goes through a kn_dnn_api table: kn_cuda_cudnn.cu fills
 * it with the library's cudnnBackend* functions, a test with a recording
 * stand-in, so the emission runs on a CPU and what it sets (every
 * attribute of every descriptor, the finalize order) can be asserted.
 * C with cuDNN's headers only (no CUDA code, no cuDNN library to link).
 *
 * Ownership: a kn_sdpa_built holds every descriptor it made (the tensors,
 * ops, graph, heuristics and configs in keep[], the plan apart);
 * kn_sdpa_built_free destroys them, in reverse order. Failure: functions
 * return 0 or EIN_EUNSUPPORTED with b->why ("what: status: cuDNN's last
 * error"); the first failure stops the build. */
#ifndef KN_SDPA_EMIT_H
#define KN_SDPA_EMIT_H

#include <cudnn.h>

#include "kernels/cuda/kn_sdpa_graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kn_dnn_api {
    cudnnStatus_t (*create)(cudnnBackendDescriptorType_t, cudnnBackendDescriptor_t *);
    cudnnStatus_t (*destroy)(cudnnBackendDescriptor_t);
    cudnnStatus_t (*set)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t,
                         cudnnBackendAttributeType_t, int64_t, const void *);
    cudnnStatus_t (*get)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t,
                         cudnnBackendAttributeType_t, int64_t, int64_t *, void *);
    cudnnStatus_t (*finalize)(cudnnBackendDescriptor_t);
    cudnnStatus_t (*execute)(cudnnHandle_t, cudnnBackendDescriptor_t, cudnnBackendDescriptor_t);
    const char *(*error_string)(cudnnStatus_t);
    void (*last_error)(char *, size_t);
} kn_dnn_api;

#define KN_SDPA_KEEP 192   /* descriptors of one graph: tensors, 2 per op, graph, heuristics, configs */
#define KN_SDPA_CFGS 8     /* heuristics results tried */

typedef struct kn_sdpa_built {
    cudnnBackendDescriptor_t keep[KN_SDPA_KEEP];
    int nkeep;
    cudnnBackendDescriptor_t graph; /* the finalized operation graph (in keep) */
    cudnnBackendDescriptor_t plan;  /* the execution plan, or NULL */
    int64_t workspace;              /* the plan's workspace bytes */
    int64_t ncfg;                   /* configurations heuristics returned */
    int cfg;                        /* the one whose plan finalized, or -1 */
    int failed;
    char why[256];
} kn_sdpa_built;

/* The data of one execution; a pointer the graph lacks is not read. */
typedef struct kn_sdpa_ptrs {
    void *q, *k, *v, *o;
    void *stats;                     /* f32 [Hq, T] when the graph has a real Stats */
    void *seq_q, *seq_kv;            /* packed: device int32 [nseq] */
    void *off, *off_stats;           /* packed: device int32 [nseq + 1] (Q, K, V, O share off) */
} kn_sdpa_ptrs;

/* Tensors, operations and the finalized operation graph of g into *b
 * (zeroed first). */
int kn_sdpa_emit_graph(const kn_dnn_api *api, cudnnHandle_t h, const kn_sdpa_graph *g,
                       kn_sdpa_built *b);
/* Heuristics (mode) over b->graph, then the first configuration whose plan
 * finalizes with a workspace of at most ws_cap bytes into b->plan. */
int kn_sdpa_emit_plan(const kn_dnn_api *api, cudnnHandle_t h, kn_sdpa_built *b,
                      cudnnBackendHeurMode_t mode, int64_t ws_cap);
/* The probe's question: of the graph's engines (ENGINE_GLOBAL_COUNT), the
 * indices whose engine descriptor finalizes, into ok[max]; returns how
 * many, *count the engines (negative: the count failed). */
int kn_sdpa_engines(const kn_dnn_api *api, kn_sdpa_built *b, int *ok, int max,
                    int64_t *count);
/* Enqueue b->plan on the handle's stream: a variant pack of g's real
 * tensors (by uid; the scalars from g, which must outlive the call). 0 or
 * EIN_EDEVICE with why. */
int kn_sdpa_execute(const kn_dnn_api *api, cudnnHandle_t h, const kn_sdpa_graph *g,
                    const kn_sdpa_built *b, const kn_sdpa_ptrs *ptr, void *workspace,
                    char *why, size_t cap);
void kn_sdpa_built_free(const kn_dnn_api *api, kn_sdpa_built *b);

#ifdef __cplusplus
}
#endif

#endif
