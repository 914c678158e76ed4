/* worker/wk_backend.h — what a device backend provides to the executor.
 *
 * The executor (wk_exec.c) runs a Program against this interface and cannot
 * tell which backend it drives. The CPU backend keeps the device segment in
 * private memory and what peers copy in POSIX shared memory (peers map it
 * read-only to copy from it; EIN_HUGEPAGES=0: the whole segment) and runs
 * kernels with OpenBLAS; the CUDA backend exports one cudaMalloc region
 * over IPC instead.
 *
 * A backend is three tables of functions, device (kernels, copies and
 * graphs in stream order), memory (segments and host staging) and ordering
 * (sync, cross-process marks), beside its name; docs/design.md, "The
 * backend seam", draws where it sits.
 *
 * Ownership: wk_backend_*_new return a backend freed with be->destroy(),
 * which also unmaps every segment it created or opened and unlinks the one
 * it created. */
#ifndef WK_BACKEND_H
#define WK_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "common/base/ein_error.h"
#include "common/ir/ein_program.h"
#include "kernels/kn_block.h"

typedef struct wk_backend wk_backend;
struct wk_staged_ops; /* worker/wk_staged.h */

/* Bytes [off, off + bytes) of a device's segment. */
typedef struct wk_span {
    uint64_t off, bytes;
} wk_span;

/* The three parts of a backend, as ggml splits its backend (compute in
 * stream order), buffer (memory) and event (ordering) interfaces. Every
 * function takes the whole backend, its state. */

/* Device: the work a backend enqueues in stream order, and what it says
 * about it. */
typedef struct wk_backend_device {
    int (*kernel)(wk_backend *be, const ein_kernel *k, const kn_block *ins, int nin,
                  kn_block *out, ein_error *err);
    int (*agg)(wk_backend *be, ein_agg op, const kn_block *srcs, int n, kn_block *out,
               ein_error *err);
    /* Device-to-device copy (a peer's memory to ours), in stream order. */
    int (*copy)(wk_backend *be, void *dst, const void *src, size_t bytes, ein_error *err);
    /* Copy `region` between dense blocks over dst_box and src_box (SLICE,
     * CONCAT), in stream order. */
    int (*copy_box)(wk_backend *be, void *dst, const ein_box *dst_box, const void *src,
                    const ein_box *src_box, const ein_box *region, size_t elem, ein_error *err);
    /* Graphs, optional (all four NULL when the backend has none): between
     * graph_begin and graph_end the stream-ordered calls (kernel, agg, copy,
     * copy_box) are captured instead of run. graph_end always ends the
     * capture: it returns the graph, or fails with the capture discarded.
     * graph_launch runs a graph in stream order, as often as wanted;
     * graph_free releases it. */
    int (*graph_begin)(wk_backend *be, ein_error *err);
    int (*graph_end)(wk_backend *be, void **graph, ein_error *err);
    int (*graph_launch)(wk_backend *be, void *graph, ein_error *err);
    void (*graph_free)(wk_backend *be, void *graph);
    /* Optional (NULL: the executor's host clock is all there is): the time
     * the device itself spent in kernels (KERNEL, AGG, graph launches) and
     * in copies (peer and box copies, uploads, downloads) since the last
     * call, in seconds, measured on the device (CUDA: an event pair around
     * every operation enqueued outside a capture). Call it after sync().
     * Fails (and the caller falls back to host times) if any measurement
     * was lost; either way the next call starts from zero. */
    int (*device_times)(wk_backend *be, double *kernel_s, double *copy_s, ein_error *err);
    /* Optional: one line on choices the backend made at run time (CUDA:
     * which attention ran, cuDNN's or ours, and why), into buf[cap], for
     * the worker's log. Returns 0, or negative when there is nothing. */
    int (*describe)(wk_backend *be, char *buf, size_t cap);
} wk_backend_device;

/* Memory: the device segment, peers' segments, and the way between device
 * and host memory. */
typedef struct wk_backend_memory {
    /* 1 if device memory is host memory (CPU devices): LOAD and STORE then
     * read and write it in place instead of staging through the host. */
    int host_visible;
    /* Optional (NULL: peers read the segment as it is): called once,
     * before segment_create, with the spans of the segment that peers of
     * this host may copy from (the buffers this device NOTIFYs; any order,
     * overlaps allowed; the backend copies what it keeps). A backend that
     * keeps the rest of its segment where peers cannot map it (CPU:
     * private memory, which takes huge pages where shared memory does
     * not) gives peers those spans through publish(). */
    int (*peer_spans)(wk_backend *be, const wk_span *spans, int n, ein_error *err);
    /* Create this device's segment of `bytes` under `name` and map it. */
    int (*segment_create)(wk_backend *be, const char *name, size_t bytes, void **base,
                          ein_error *err);
    /* Optional (NULL: nothing to do): make bytes [off, off + bytes) of the
     * segment, as they are now, what a peer of this host reads there.
     * Called before every READY of a local peer, after the work that
     * completes them (sync or signal); the bytes need not lie in a span
     * given to peer_spans. A peer that copies bytes never published reads
     * zeros where the backend keeps its segment private, so every byte a
     * COPY reads must be a NOTIFY's (the programs' rule: a COPY reads
     * exactly the buffer its peer's READY names, at that buffer's
     * offset). */
    int (*publish)(wk_backend *be, uint64_t off, uint64_t bytes, ein_error *err);
    /* Map a peer's segment (read-only), once; later calls return the cache. */
    int (*peer_open)(wk_backend *be, int peer, const char *name, const void **base,
                     size_t *bytes, ein_error *err);
    /* Host <-> device, complete when they return. */
    int (*upload)(wk_backend *be, void *dst, const void *host, size_t bytes, ein_error *err);
    int (*download)(wk_backend *be, void *host, const void *src, size_t bytes, ein_error *err);
    /* Optional (NULL: malloc and free): host memory that LOAD and STORE
     * stage through when host_visible is 0 (CUDA: pinned, cudaHostAlloc,
     * so uploads and downloads are DMA at full speed instead of going
     * through the driver's bounce buffer). The executor keeps one such
     * buffer, grown when a larger one is needed, and releases it at the
     * end of every iteration; it falls back to malloc if this fails. */
    int (*host_alloc)(wk_backend *be, size_t bytes, void **p, ein_error *err);
    void (*host_free)(wk_backend *be, void *p);
    /* Optional (NULL where host_visible, or where there is none): the
     * device side of blocks to and from other hosts staged through pinned
     * host memory (worker/wk_staged.h; CUDA: cudaMemcpyAsync on the stream,
     * an event per slot, cudaHostAlloc), filled into *ops with ctx = be.
     * Used when UCX cannot read device memory itself (wk_ucx_cuda). */
    int (*staged_ops)(wk_backend *be, struct wk_staged_ops *ops, ein_error *err);
} wk_backend_memory;

/* Ordering: when enqueued work is done, and how another process's stream
 * waits for ours. */
typedef struct wk_backend_order {
    /* Wait until everything enqueued has finished: before a peer is told a
     * buffer is ready (unless signal is set), and at the end of an
     * iteration. */
    int (*sync)(wk_backend *be, ein_error *err);
    /* Optional cross-process ordering without draining (NULL: NOTIFY calls
     * sync() and a peer copy waits for nothing on the device). signal()
     * marks, in stream order, the point a peer's copy must wait for: it is
     * called before READY is sent, and must return only once a peer_wait()
     * that starts after it will see the mark. peer_wait(peer) makes this
     * backend's stream wait, on the device, for the latest mark of `peer`
     * (called after peer_open, before the copy from it, and by a WAIT,
     * so that writes after an acknowledged peer copy follow it). A backend may
     * implement signal() as sync() (CUDA with EIN_CUDA_IPC_SYNC=stream);
     * peer_wait() then does nothing. docs/runtime.md, "Cross-process
     * ordering", says why a later mark standing in for an earlier one is
     * safe. */
    int (*signal)(wk_backend *be, ein_error *err);
    int (*peer_wait)(wk_backend *be, int peer, ein_error *err);
} wk_backend_order;

struct wk_backend {
    const char *name;         /* its row's name in common/ir/ein_backend.c */
    wk_backend_device dev;
    wk_backend_memory mem;
    wk_backend_order ord;
    void (*destroy)(wk_backend *be);
};

/* What a worker's command line gives a backend to start from. */
typedef struct wk_backend_args {
    int ndevices;             /* devices of the run (peers to map) */
    int gpu;                  /* --gpu: the hardware device (backends with devices
                                 named by id: ein_backend_info.probed) */
    int graphs;               /* --graphs */
} wk_backend_args;

/* A backend's constructor, one per row of the worker's table (einworker.c):
 * the backend, or NULL with the reason in *err. */
typedef wk_backend *(*wk_backend_make_fn)(const wk_backend_args *a, ein_error *err);

/* CPU devices; `graphs`: offer graphs, as recordings of the calls
 * (wk_record.h), so the executor's capture path runs without a GPU.
 * Returns NULL when out of memory. */
wk_backend *wk_backend_cpu_new(int ndevices, int graphs);
/* The same as a wk_backend_make_fn (fails with EIN_ENOMEM). */
wk_backend *wk_backend_cpu_make(const wk_backend_args *a, ein_error *err);

/* The CUDA backend on GPU `gpu` (built only with CUDA): one cudaMalloc
 * segment exported with cudaIpcGetMemHandle, whose handle is published in a
 * small shared-memory object under the segment's name; peers open it once
 * with cudaIpcOpenMemHandle; everything runs in order on one stream;
 * graphs are CUDA graphs captured from that stream.
 * Returns NULL and fills err if the GPU cannot be used. */
wk_backend *wk_backend_cuda_new(int ndevices, int gpu, ein_error *err);
/* The same as a wk_backend_make_fn. */
wk_backend *wk_backend_cuda_make(const wk_backend_args *a, ein_error *err);

#endif
