/* worker/wk_backend_cuda.c — GPU devices: one cudaMalloc segment per worker
 * exported over CUDA IPC, kernels from kernels/cuda, one stream.
 *
 * STATUS: run on one H200 by tools/gpu-check (2026-12-04): one and two
 * workers on GPU 0 agree with the CPU, CUDA IPC copies at 99% of
 * cudaMemcpy (docs/kernels.md). Never run on several GPUs. einrun uses it
 * only with --backend cuda.
 *
 * The segment's IPC handle is published in a small POSIX shared-memory
 * object under the segment's name ("/ein-<run>-<d>"), so a peer finds it
 * exactly where the CPU backend would find the segment itself, and the
 * coordinator's cleanup removes it the same way. A peer opens each handle
 * once (cudaIpcOpenMemHandle) and caches the mapping. Everything a worker
 * does runs in order on its one stream.
 *
 * Cross-process ordering (docs/runtime.md, "Cross-process ordering"): next
 * to the memory handle the worker publishes the handle of one interprocess
 * event (cudaEventInterprocess | cudaEventDisableTiming). NOTIFY calls
 * signal(), which records that event on the stream and returns; READY is
 * sent after the record call returned, so the peer's cudaStreamWaitEvent,
 * enqueued after READY arrived, sees that record or a later one (a
 * cross-process wait sees only records made before it is enqueued). The
 * peer opens the event once (cudaIpcOpenEventHandle) with the memory.
 * EIN_CUDA_IPC_SYNC=stream, or an event that cannot be created or
 * exported, selects the old path: signal() is a stream synchronisation and
 * the published record says so, so peers wait for nothing on the device.
 *
 * Graphs are CUDA graphs captured from the stream (thread-local capture
 * mode) and instantiated once; nothing in a stretch allocates or
 * synchronises (the cuBLAS workspace is fixed at start, see kn_cuda_gemm.cu),
 * and peer copies, which wait for a peer, are never inside one. */
#include "worker/wk_backend.h"

#include <cuda_runtime_api.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/base/ein_knob.h"
#include "common/base/ein_vec.h"
#include "kernels/cuda/kn_cuda.h"
#include "worker/wk_peer.h"
#include "worker/wk_staged.h"

#define SEGMENT_ALIGN (2u << 20)           /* IPC handles cover whole allocations */
#define WORKSPACE_BYTES (64u << 20)        /* cuBLAS workspace, fixed before capture */
#define HANDLE_MAGIC 0x45494e4350554832ULL /* "EINCPUH2": with the event */

typedef struct published {
    uint64_t magic;
    uint64_t bytes;
    cudaIpcMemHandle_t handle;
    uint64_t has_event;        /* 1: wait for `event`; 0: the owner drains */
    cudaIpcEventHandle_t event;
} published;

/* An event pair around one operation on the stream: its device time. */
typedef struct ev_pair {
    cudaEvent_t start, end;
    int copy;                  /* 0: kernel time, 1: copy time */
} ev_pair;

typedef struct cuda_backend {
    wk_backend be;
    int gpu;
    cudaStream_t stream;
    /* Device timing (device_times): pairs [0, nev) recorded since the
     * last collection, of ncreated created so far (created lazily, never
     * while capturing; reused every iteration). */
    ev_pair *ev;
    int nev, ncreated;
    int evcap;                 /* ev's capacity (common/base/ein_vec.h) */
    int capturing;             /* between graph_begin and graph_end */
    int timing_lost;           /* an event call failed: report no device times */
    void *base;
    size_t bytes;
    /* Cross-process ordering: the event NOTIFY records, or NULL when
     * signal() drains the stream instead (and why, for describe()). */
    cudaEvent_t ipc_event;
    const char *ipc_sync;
    void *workspace;
    kn_cuda_ctx *ctx;
    char own_name[128];
    wk_peer *peers;            /* sync: the peer's imported cudaEvent_t, or NULL */
    int npeers;
    /* Blocks between hosts staged through pinned memory (staged_ops):
     * the mark recorded after each slot's latest copy (made on first use). */
    cudaEvent_t st_ev[WK_STAGED_SLOTS];
} cuda_backend;

static int cu_fail(ein_error *err, cudaError_t e, const char *what)
{
    return ein_fail(err, EIN_EDEVICE, "%s: %s (%s)", what, cudaGetErrorString(e),
                    cudaGetErrorName(e));
}

/* Record the start of a timed operation; returns its pair, or -1 when it
 * is not timed (capturing, or timing already lost). */
static int ev_begin(cuda_backend *c, int copy)
{
    if (c->capturing || c->timing_lost)
        return -1;
    if (c->nev == c->ncreated) {
        /* 256 pairs first, then twice as many each time they run out */
        int want = c->ncreated ? 2 * c->ncreated : 256;
        if (ein_vec_reserve(&c->ev, &c->evcap, want, sizeof *c->ev) < 0) {
            c->timing_lost = 1;
            return -1;
        }
        ev_pair *nv = c->ev;
        for (; c->ncreated < want; c->ncreated++) {
            if (cudaEventCreate(&nv[c->ncreated].start) != cudaSuccess) {
                (void)cudaGetLastError();
                c->timing_lost = 1;
                return -1;
            }
            if (cudaEventCreate(&nv[c->ncreated].end) != cudaSuccess) {
                (void)cudaGetLastError();
                cudaEventDestroy(nv[c->ncreated].start);
                c->timing_lost = 1;
                return -1;
            }
        }
    }
    ev_pair *p = &c->ev[c->nev];
    if (cudaEventRecord(p->start, c->stream) != cudaSuccess) {
        (void)cudaGetLastError();
        c->timing_lost = 1;
        return -1;
    }
    p->copy = copy;
    return c->nev++;
}

static void ev_end(cuda_backend *c, int slot)
{
    if (slot < 0 || c->timing_lost)
        return;
    if (cudaEventRecord(c->ev[slot].end, c->stream) != cudaSuccess) {
        (void)cudaGetLastError();
        c->timing_lost = 1;
    }
}

static int cu_device_times(wk_backend *be, double *kernel_s, double *copy_s, ein_error *err)
{
    cuda_backend *c = (cuda_backend *)be;
    double t[2] = {0, 0};
    cudaError_t e = cudaSuccess;
    for (int i = 0; i < c->nev && e == cudaSuccess && !c->timing_lost; i++) {
        float ms = 0;
        e = cudaEventElapsedTime(&ms, c->ev[i].start, c->ev[i].end);
        t[c->ev[i].copy] += 1e-3 * (double)ms;
    }
    int lost = c->timing_lost;
    c->nev = 0;
    c->timing_lost = 0;
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return cu_fail(err, e, "cudaEventElapsedTime");
    }
    if (lost)
        return ein_fail(err, EIN_EDEVICE, "a CUDA event could not be created or recorded");
    *kernel_s = t[0];
    *copy_s = t[1];
    return 0;
}

static int cu_segment_create(wk_backend *be, const char *name, size_t bytes, void **base,
                             ein_error *err)
{
    cuda_backend *c = (cuda_backend *)be;
    size_t want = (bytes + SEGMENT_ALIGN - 1) / SEGMENT_ALIGN * SEGMENT_ALIGN;
    if (want == 0)
        want = SEGMENT_ALIGN;
    cudaError_t e = cudaMalloc(&c->base, want);
    if (e != cudaSuccess)
        return ein_fail(err, EIN_ENOMEM, "cannot allocate %zu bytes on GPU %d: %s", want, c->gpu,
                        cudaGetErrorString(e));
    c->bytes = want;
    published pub = {.magic = HANDLE_MAGIC, .bytes = want};
    if ((e = cudaIpcGetMemHandle(&pub.handle, c->base)) != cudaSuccess)
        return cu_fail(err, e, "cudaIpcGetMemHandle");
    if (c->ipc_event) {
        if ((e = cudaIpcGetEventHandle(&pub.event, c->ipc_event)) == cudaSuccess) {
            pub.has_event = 1;
        } else {
            /* Fall back to draining, for every peer alike: they read has_event. */
            (void)cudaGetLastError();
            cudaEventDestroy(c->ipc_event);
            c->ipc_event = NULL;
            c->ipc_sync = "stream (cudaIpcGetEventHandle failed)";
        }
    }
    int fd, rc = wk_shm_create(name, c->own_name, sizeof c->own_name, &fd, err);
    if (rc < 0)
        return rc;
    ssize_t n = write(fd, &pub, sizeof pub);
    close(fd);
    if (n != (ssize_t)sizeof pub)
        return ein_fail(err, EIN_EIO, "cannot publish the IPC handle in %s", name);
    *base = c->base;
    return 0;
}

static int cu_peer_open(wk_backend *be, int peer, const char *name, const void **base,
                        size_t *bytes, ein_error *err)
{
    cuda_backend *c = (cuda_backend *)be;
    int fd, rc = wk_peer_lookup(c->peers, c->npeers, peer, name, "IPC handle", base, bytes, &fd,
                                err);
    if (rc != 0)
        return rc < 0 ? rc : 0;
    published pub;
    ssize_t n = read(fd, &pub, sizeof pub);
    close(fd);
    if (n != (ssize_t)sizeof pub || pub.magic != HANDLE_MAGIC)
        return ein_fail(err, EIN_EPROTO, "device %d's IPC handle %s is malformed", peer, name);
    if (pub.has_event > 1)
        return ein_fail(err, EIN_EPROTO, "device %d's IPC handle %s is malformed", peer, name);
    /* The event first: a failure then leaves nothing cached to undo. The
     * peer does not drain before READY when it published an event, so
     * there is no fallback here: without the event nothing orders the copy. */
    cudaEvent_t ev = NULL;
    cudaError_t e;
    if (pub.has_event && (e = cudaIpcOpenEventHandle(&ev, pub.event)) != cudaSuccess) {
        (void)cudaGetLastError();
        return ein_fail(err, EIN_EDEVICE,
                        "cudaIpcOpenEventHandle (device %d's event): %s (%s); "
                        "EIN_CUDA_IPC_SYNC=stream orders peer copies without events",
                        peer, cudaGetErrorString(e), cudaGetErrorName(e));
    }
    void *p = NULL;
    e = cudaIpcOpenMemHandle(&p, pub.handle, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
        if (ev)
            cudaEventDestroy(ev);
        return cu_fail(err, e, "cudaIpcOpenMemHandle");
    }
    c->peers[peer].sync = ev;
    wk_peer_set(&c->peers[peer], p, pub.bytes, base, bytes);
    return 0;
}

static int cu_copy(wk_backend *be, void *dst, const void *src, size_t bytes, ein_error *err)
{
    cuda_backend *c = (cuda_backend *)be;
    int ev = ev_begin(c, 1);
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream);
    ev_end(c, ev);
    return e == cudaSuccess ? 0 : cu_fail(err, e, "peer copy");
}

/* A 2-D copy (rows of the last dimension) per index of the outer ones. */
typedef struct box2d {
    cuda_backend *c;
    char *dst;
    const char *src;
    size_t elem, width, rows, dpitch, spitch;
    cudaError_t e;
} box2d;

static int copy_2d(int64_t dst_off, int64_t src_off, void *ctx)
{
    box2d *b = ctx;
    b->e = cudaMemcpy2DAsync(b->dst + dst_off * (int64_t)b->elem, b->dpitch,
                             b->src + src_off * (int64_t)b->elem, b->spitch, b->width, b->rows,
                             cudaMemcpyDeviceToDevice, b->c->stream);
    return b->e != cudaSuccess;
}

static int cu_copy_box(wk_backend *be, void *dst, const ein_box *db, const void *src,
                       const ein_box *sb, const ein_box *region, size_t elem, ein_error *err)
{
    cuda_backend *c = (cuda_backend *)be;
    int r = region->rank;
    if (ein_box_empty(region))
        return 0;
    int ev = ev_begin(c, 1);
    if (r == 0) {
        cudaError_t e = cudaMemcpyAsync(dst, src, elem, cudaMemcpyDeviceToDevice, c->stream);
        ev_end(c, ev);
        return e == cudaSuccess ? 0 : cu_fail(err, e, "copy");
    }
    int64_t sst[EIN_MAX_RANK], dst_st[EIN_MAX_RANK];
    ein_box_strides(sb, sst);
    ein_box_strides(db, dst_st);
    box2d b = {.c = c, .dst = dst, .src = src, .elem = elem, .e = cudaSuccess};
    b.width = (size_t)(region->hi[r - 1] - region->lo[r - 1]) * elem;
    b.rows = r >= 2 ? (size_t)(region->hi[r - 2] - region->lo[r - 2]) : 1;
    b.spitch = r >= 2 ? (size_t)sst[r - 2] * elem : b.width;
    b.dpitch = r >= 2 ? (size_t)dst_st[r - 2] * elem : b.width;
    ein_box_walk(db, sb, region, r >= 2 ? r - 2 : 0, copy_2d, &b);
    ev_end(c, ev);
    return b.e == cudaSuccess ? 0 : cu_fail(err, b.e, "box copy");
}

static int cu_upload(wk_backend *be, void *dst, const void *host, size_t bytes, ein_error *err)
{
    cuda_backend *c = (cuda_backend *)be;
    int ev = ev_begin(c, 1);
    cudaError_t e = cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, c->stream);
    ev_end(c, ev);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(c->stream);
    return e == cudaSuccess ? 0 : cu_fail(err, e, "upload");
}

static int cu_download(wk_backend *be, void *host, const void *src, size_t bytes, ein_error *err)
{
    cuda_backend *c = (cuda_backend *)be;
    int ev = ev_begin(c, 1);
    cudaError_t e = cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, c->stream);
    ev_end(c, ev);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(c->stream);
    return e == cudaSuccess ? 0 : cu_fail(err, e, "download");
}

static int cu_sync(wk_backend *be, ein_error *err)
{
    cuda_backend *c = (cuda_backend *)be;
    cudaError_t e = cudaStreamSynchronize(c->stream);
    return e == cudaSuccess ? 0 : cu_fail(err, e, "stream");
}

/* NOTIFY: mark the point a peer's copy waits for. The record is enqueued
 * when this returns, so a wait the peer enqueues after READY sees it. */
static int cu_signal(wk_backend *be, ein_error *err)
{
    cuda_backend *c = (cuda_backend *)be;
    if (!c->ipc_event)
        return cu_sync(be, err);
    cudaError_t e = cudaEventRecord(c->ipc_event, c->stream);
    return e == cudaSuccess ? 0 : cu_fail(err, e, "cudaEventRecord (interprocess)");
}

static int cu_peer_wait(wk_backend *be, int peer, ein_error *err)
{
    cuda_backend *c = (cuda_backend *)be;
    if (peer < 0 || peer >= c->npeers || !c->peers[peer].base)
        return ein_fail(err, EIN_EINVAL, "peer %d waited for before it was opened", peer);
    if (!c->peers[peer].sync)
        return 0; /* the peer drained its stream before READY */
    cudaError_t e = cudaStreamWaitEvent(c->stream, (cudaEvent_t)c->peers[peer].sync, 0);
    return e == cudaSuccess ? 0 : cu_fail(err, e, "cudaStreamWaitEvent (peer event)");
}

static int cu_graph_begin(wk_backend *be, ein_error *err)
{
    cuda_backend *c = (cuda_backend *)be;
    cudaError_t e = cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess)
        return cu_fail(err, e, "cudaStreamBeginCapture");
    c->capturing = 1;
    return 0;
}

static int cu_graph_end(wk_backend *be, void **graph, ein_error *err)
{
    cuda_backend *c = (cuda_backend *)be;
    cudaGraph_t g = NULL;
    cudaGraphExec_t x = NULL;
    cudaError_t e = cudaStreamEndCapture(c->stream, &g);
    c->capturing = 0;
    if (e != cudaSuccess) {
        /* An invalidated capture leaves its error pending: clear it, so the
         * stretch can run without a graph. */
        if (g)
            cudaGraphDestroy(g);
        (void)cudaGetLastError();
        return cu_fail(err, e, "cudaStreamEndCapture");
    }
    e = cudaGraphInstantiate(&x, g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return cu_fail(err, e, "cudaGraphInstantiate");
    }
    *graph = (void *)x;
    return 0;
}

static int cu_graph_launch(wk_backend *be, void *graph, ein_error *err)
{
    cuda_backend *c = (cuda_backend *)be;
    int ev = ev_begin(c, 0);
    cudaError_t e = cudaGraphLaunch((cudaGraphExec_t)graph, c->stream);
    ev_end(c, ev);
    return e == cudaSuccess ? 0 : cu_fail(err, e, "cudaGraphLaunch");
}

static void cu_graph_free(wk_backend *be, void *graph)
{
    (void)be;
    if (graph)
        cudaGraphExecDestroy((cudaGraphExec_t)graph);
}

static int cu_kernel(wk_backend *be, const ein_kernel *k, const kn_block *in, int nin,
                     kn_block *out, ein_error *err)
{
    cuda_backend *c = (cuda_backend *)be;
    int ev = ev_begin(c, 0);
    int rc = kn_cuda_run(c->ctx, k, in, nin, out, c->stream, err);
    ev_end(c, ev);
    return rc;
}

static int cu_agg(wk_backend *be, ein_agg op, const kn_block *srcs, int n, kn_block *out,
                  ein_error *err)
{
    cuda_backend *c = (cuda_backend *)be;
    int ev = ev_begin(c, 0);
    int rc = kn_cuda_agg_blk(op, srcs, n, out, c->stream, err);
    ev_end(c, ev);
    return rc;
}

/* LOAD/STORE staging: pinned, so the copies are DMA straight from it. */
static int cu_host_alloc(wk_backend *be, size_t bytes, void **p, ein_error *err)
{
    (void)be;
    cudaError_t e = cudaHostAlloc(p, bytes, cudaHostAllocDefault);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        *p = NULL;
        return cu_fail(err, e, "cudaHostAlloc");
    }
    return 0;
}

static void cu_host_free(wk_backend *be, void *p)
{
    (void)be;
    if (p)
        cudaFreeHost(p);
}

/* Blocks between hosts through pinned host memory (wk_staged.h): copies
 * on the stream, in order after the kernels that wrote the block (a send)
 * and before those that read it (a receive), each followed by its slot's
 * event, which wait() synchronises with. */
static int st_copy(void *ctx, int slot, void *dst, const void *src, size_t n,
                   enum cudaMemcpyKind kind, ein_error *err)
{
    cuda_backend *c = ctx;
    cudaError_t e = cudaSuccess;
    if (slot < 0 || slot >= WK_STAGED_SLOTS)
        return ein_fail(err, EIN_EINVAL, "staging slot %d", slot);
    if (!c->st_ev[slot])
        e = cudaEventCreateWithFlags(&c->st_ev[slot], cudaEventDisableTiming);
    if (e == cudaSuccess) {
        int ev = ev_begin(c, 1);
        e = cudaMemcpyAsync(dst, src, n, kind, c->stream);
        ev_end(c, ev);
    }
    if (e == cudaSuccess)
        e = cudaEventRecord(c->st_ev[slot], c->stream);
    return e == cudaSuccess ? 0 : cu_fail(err, e, kind == cudaMemcpyDeviceToHost
                                                       ? "staging a block to another host"
                                                       : "staging a block from another host");
}

static int st_to_host(void *ctx, int slot, void *host, const void *dev, size_t n, ein_error *err)
{
    return st_copy(ctx, slot, host, dev, n, cudaMemcpyDeviceToHost, err);
}

static int st_to_device(void *ctx, int slot, void *dev, const void *host, size_t n,
                        ein_error *err)
{
    return st_copy(ctx, slot, dev, host, n, cudaMemcpyHostToDevice, err);
}

static int st_wait(void *ctx, int slot, ein_error *err)
{
    cuda_backend *c = ctx;
    if (slot < 0 || slot >= WK_STAGED_SLOTS || !c->st_ev[slot])
        return 0;
    cudaError_t e = cudaEventSynchronize(c->st_ev[slot]);
    return e == cudaSuccess ? 0 : cu_fail(err, e, "staging between hosts");
}

static int st_host_alloc(void *ctx, size_t n, void **p, ein_error *err)
{
    return cu_host_alloc(ctx, n, p, err);
}

static void st_host_free(void *ctx, void *p)
{
    cu_host_free(ctx, p);
}

static int cu_staged_ops(wk_backend *be, wk_staged_ops *ops, ein_error *err)
{
    (void)err;
    *ops = (wk_staged_ops){.ctx = be, .to_host = st_to_host, .to_device = st_to_device,
                           .wait = st_wait, .host_alloc = st_host_alloc,
                           .host_free = st_host_free};
    return 0;
}

static int cu_describe(wk_backend *be, char *buf, size_t cap)
{
    cuda_backend *c = (cuda_backend *)be;
    if (!c->ctx || cap == 0)
        return EIN_EINVAL;
    int rc = kn_cuda_ctx_attention_report(c->ctx, buf, cap);
    size_t n = rc == 0 ? strlen(buf) : 0;
    if (rc != 0)
        buf[0] = '\0';
    snprintf(buf + n, cap - n, "%speer copies ordered by %s", n ? "; " : "",
             c->ipc_event ? "interprocess events" : c->ipc_sync);
    return 0;
}

static void cu_destroy(wk_backend *be)
{
    cuda_backend *c = (cuda_backend *)be;
    if (!c)
        return;
    if (c->stream)
        cudaStreamSynchronize(c->stream);
    for (int i = 0; i < c->npeers; i++) {
        if (c->peers[i].sync)
            cudaEventDestroy((cudaEvent_t)c->peers[i].sync);
        if (c->peers[i].base)
            cudaIpcCloseMemHandle((void *)c->peers[i].base);
    }
    if (c->ipc_event)
        cudaEventDestroy(c->ipc_event);
    for (int i = 0; i < WK_STAGED_SLOTS; i++)
        if (c->st_ev[i])
            cudaEventDestroy(c->st_ev[i]);
    for (int i = 0; i < c->ncreated; i++) {
        cudaEventDestroy(c->ev[i].start);
        cudaEventDestroy(c->ev[i].end);
    }
    free(c->ev);
    if (c->ctx)
        kn_cuda_ctx_destroy(c->ctx);
    if (c->workspace)
        cudaFree(c->workspace);
    if (c->base)
        cudaFree(c->base);
    if (c->own_name[0])
        shm_unlink(c->own_name);
    if (c->stream)
        cudaStreamDestroy(c->stream);
    free(c->peers);
    free(c);
}

wk_backend *wk_backend_cuda_new(int ndevices, int gpu, ein_error *err)
{
    cuda_backend *c = calloc(1, sizeof *c);
    if (!c || !(c->peers = calloc((size_t)(ndevices > 0 ? ndevices : 1), sizeof *c->peers))) {
        free(c);
        ein_fail(err, EIN_ENOMEM, "out of memory");
        return NULL;
    }
    c->npeers = ndevices;
    c->gpu = gpu;
    c->be = (wk_backend){
        .name = "cuda",
        .dev = {.kernel = cu_kernel, .agg = cu_agg, .copy = cu_copy, .copy_box = cu_copy_box,
                .graph_begin = cu_graph_begin, .graph_end = cu_graph_end,
                .graph_launch = cu_graph_launch, .graph_free = cu_graph_free,
                .device_times = cu_device_times, .describe = cu_describe},
        .mem = {.host_visible = 0, .segment_create = cu_segment_create,
                .peer_open = cu_peer_open, .upload = cu_upload, .download = cu_download,
                .host_alloc = cu_host_alloc, .host_free = cu_host_free,
                .staged_ops = cu_staged_ops},
        .ord = {.sync = cu_sync, .signal = cu_signal, .peer_wait = cu_peer_wait},
        .destroy = cu_destroy,
    };
    cudaError_t e;
    if ((e = cudaSetDevice(gpu)) != cudaSuccess) {
        ein_fail(err, EIN_EDEVICE, "GPU %d: %s", gpu, cudaGetErrorString(e));
        goto fail;
    }
    if ((e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        cu_fail(err, e, "cudaStreamCreate");
        goto fail;
    }
    /* The workspace and the cuBLAS context exist before anything could be
     * captured into a graph (nothing allocates later). */
    if ((e = cudaMalloc(&c->workspace, WORKSPACE_BYTES)) != cudaSuccess) {
        cu_fail(err, e, "cudaMalloc (workspace)");
        goto fail;
    }
    if (kn_cuda_ctx_create(c->workspace, WORKSPACE_BYTES, &c->ctx, err) < 0)
        goto fail;
    /* Cross-process ordering: an interprocess event unless told otherwise
     * or unavailable (exported in segment_create, which may still fall back). */
    const char *mode = ein_knob_get(EIN_KNOB_CUDA_IPC_SYNC);
    if (mode && strcmp(mode, "stream") == 0) {
        c->ipc_sync = "stream (EIN_CUDA_IPC_SYNC=stream)";
    } else if (mode && *mode && strcmp(mode, "event") != 0) {
        ein_fail(err, EIN_EINVAL, "EIN_CUDA_IPC_SYNC=%s: expected event or stream", mode);
        goto fail;
    } else if ((e = cudaEventCreateWithFlags(&c->ipc_event, cudaEventDisableTiming |
                                                                cudaEventInterprocess)) !=
               cudaSuccess) {
        (void)cudaGetLastError();
        c->ipc_event = NULL;
        c->ipc_sync = "stream (cudaEventCreateWithFlags(cudaEventInterprocess) failed)";
    }
    return &c->be;
fail:
    cu_destroy(&c->be);
    return NULL;
}

wk_backend *wk_backend_cuda_make(const wk_backend_args *a, ein_error *err)
{
    return wk_backend_cuda_new(a->ndevices, a->gpu, err);
}
