/* worker/wk_backend_cpu.c — CPU devices: private segments with huge pages,
 * what peers copy in shared memory (EIN_HUGEPAGES=0: shared-memory segments),
 * OpenBLAS. With graphs on, a "graph" is a recording of the calls
 * (wk_record.h). */
#include "worker/wk_staged.h"
#include "worker/wk_backend.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/base/ein_knob.h"
#include "kernels/kn_cpu.h"
#include "worker/wk_peer.h"
#include "worker/wk_record.h"

typedef struct cpu_backend {
    wk_backend be;
    char own_name[128];
    void *own_base;
    size_t own_bytes;
    /* A run of several devices with a private segment: the shared memory
     * peers map (own_name, mapped read-write at pub, pub_bytes), which
     * holds only what publish() copies there and the direct spans; NULL
     * when the segment is itself the shared memory, or has no peers. */
    char *pub;
    size_t pub_bytes;
    wk_span *spans;       /* peers' spans: sorted, disjoint, not touching */
    unsigned char *direct; /* per span: 1 if mapped from the shared memory into
                              the segment (publish then has nothing to do) */
    int nspans;
    wk_peer *peers;
    int npeers;
    wk_record *recording; /* between graph_begin and graph_end */
} cpu_backend;

/* 2 MiB: the huge pages of x86-64 and (with 4 KiB base pages) arm64. */
#define CPU_HUGE ((size_t)2 << 20)
/* A span peers read of at least this many bytes is mapped from the shared
 * memory into the private segment (no copy when it is published: it costs
 * the huge pages of at most the two 2 MiB extents at its ends, a small part
 * of a span this large); a smaller one stays private and publish() copies
 * it (a decode step's exchanged rows: a few KiB, copied in well under a
 * microsecond, where mapping them would cost a 2 MiB extent each). */
#define CPU_DIRECT_MIN ((uint64_t)256 << 10)

/* A segment in private anonymous memory, 2 MiB aligned and
 * advised for transparent huge pages (where the kernel's
 * transparent_hugepage/enabled is madvise or always). Shared memory
 * (shm_open, tmpfs) gets huge pages only where shmem_enabled allows them,
 * which distributions leave at never, and a decode step reads its weights
 * 20-30% faster from 2 MiB pages than from 4 KiB ones (a 4 KiB page is a
 * TLB entry and a stop for the prefetchers every 4 KiB; llama.cpp's
 * weights, a file mapped from the page cache, get 2 MiB folios on ext4 and
 * xfs). No peer maps it: a run of several devices gives peers what they
 * copy through shared memory beside it (cpu_segment_split). */
static int cpu_segment_private(cpu_backend *c, size_t map, void **base, ein_error *err)
{
    size_t len = map < CPU_HUGE ? map : map + CPU_HUGE;
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return ein_fail(err, EIN_ENOMEM, "mmap of %zu bytes: %s", map, strerror(errno));
    char *a = p;
    if (len > map) { /* trim to a 2 MiB aligned start, unmapping both ends */
        a = (char *)(((uintptr_t)p + CPU_HUGE - 1) & ~(uintptr_t)(CPU_HUGE - 1));
        if (a > p)
            munmap(p, (size_t)(a - p));
        if (a + map < p + len)
            munmap(a + map, (size_t)(p + len - (a + map)));
#ifdef MADV_HUGEPAGE
        madvise(a, map, MADV_HUGEPAGE); /* advice: refused where THP is off, harmless */
#endif
    }
    c->own_base = a;
    c->own_bytes = map;
    *base = a;
    return 0;
}

/* EIN_HUGEPAGES=0: every segment in shared memory, as before (to compare);
 * unset or anything else: private memory (a run of several devices gives
 * its peers what they read through publish()). */
static int cpu_private_ok(void)
{
    const char *h = ein_knob_get(EIN_KNOB_HUGEPAGES);
    return !(h && !strcmp(h, "0"));
}

static int span_cmp(const void *a, const void *b)
{
    const wk_span *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

static int cpu_peer_spans(wk_backend *be, const wk_span *spans, int n, ein_error *err)
{
    cpu_backend *c = (cpu_backend *)be;
    free(c->spans);
    free(c->direct);
    c->spans = NULL;
    c->direct = NULL;
    c->nspans = 0;
    if (n <= 0)
        return 0;
    c->spans = malloc(sizeof *c->spans * (size_t)n);
    c->direct = calloc((size_t)n, 1);
    if (!c->spans || !c->direct)
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    int k = 0;
    for (int i = 0; i < n; i++)
        if (spans[i].bytes > 0)
            c->spans[k++] = spans[i];
    qsort(c->spans, (size_t)k, sizeof *c->spans, span_cmp);
    int m = 0; /* merge overlapping and touching spans */
    for (int i = 0; i < k; i++) {
        wk_span s = c->spans[i];
        if (m > 0 && s.off <= c->spans[m - 1].off + c->spans[m - 1].bytes) {
            wk_span *t = &c->spans[m - 1];
            uint64_t end = s.off + s.bytes > t->off + t->bytes ? s.off + s.bytes
                                                                : t->off + t->bytes;
            t->bytes = end - t->off;
        } else {
            c->spans[m++] = s;
        }
    }
    for (int i = 0; i < m; i++)
        c->direct[i] = c->spans[i].bytes >= CPU_DIRECT_MIN;
    c->nspans = m;
    return 0;
}

/* The span that holds offset `off`, or -1. */
static int span_find(const cpu_backend *c, uint64_t off)
{
    int lo = 0, hi = c->nspans;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (c->spans[mid].off + c->spans[mid].bytes <= off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < c->nspans && c->spans[lo].off <= off ? lo : -1;
}

/* The shared memory of `map` bytes peers map: created (sparse: only what
 * is written takes memory), sized, open in *fd for the caller to close. */
static int cpu_shm_open(cpu_backend *c, const char *name, size_t map, int *fd, ein_error *err)
{
    int rc = wk_shm_create(name, c->own_name, sizeof c->own_name, fd, err);
    if (rc < 0)
        return rc;
    if (ftruncate(*fd, (off_t)map) < 0) {
        int e = errno;
        close(*fd);
        return ein_fail(err, EIN_ENOMEM, "cannot size shared memory %s to %zu bytes: %s", name,
                        map, strerror(e));
    }
    return 0;
}

/* A run of several devices, private segment: the segment in private
 * memory (cpu_segment_private), the shared memory peers map beside it
 * (mapped read-write at c->pub for publish()), and each direct span of the
 * shared memory mapped over the same bytes of the segment, so that the
 * kernels write it where peers read it. */
static int cpu_segment_split(cpu_backend *c, const char *name, size_t map, void **base,
                             ein_error *err)
{
    long pg = sysconf(_SC_PAGESIZE);
    size_t page = pg > 0 ? (size_t)pg : 4096;
    size_t file = (map + page - 1) / page * page;
    int fd, rc = cpu_shm_open(c, name, file, &fd, err);
    if (rc < 0)
        return rc;
    char *pub = mmap(NULL, file, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (pub == MAP_FAILED) {
        close(fd);
        return ein_fail(err, EIN_ENOMEM, "mmap of %zu bytes (%s): %s", file, name,
                        strerror(errno));
    }
    c->pub = pub;
    c->pub_bytes = file;
    if ((rc = cpu_segment_private(c, map, base, err)) < 0) {
        close(fd);
        return rc;
    }
    char *seg = *base;
    for (int i = 0; i < c->nspans; i++) {
        if (!c->direct[i])
            continue;
        uint64_t lo = c->spans[i].off / page * page;
        uint64_t hi = c->spans[i].off + c->spans[i].bytes;
        hi = (hi + page - 1) / page * page;
        if (hi > file) {
            close(fd);
            return ein_fail(err, EIN_EINVAL, "bytes %llu..%llu that peers read lie outside the "
                            "segment of %zu bytes", (unsigned long long)c->spans[i].off,
                            (unsigned long long)(c->spans[i].off + c->spans[i].bytes), map);
        }
        if (mmap(seg + lo, (size_t)(hi - lo), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
                 fd, (off_t)lo) == MAP_FAILED) {
            int e = errno;
            close(fd);
            return ein_fail(err, EIN_ENOMEM, "mmap of %s's bytes %llu..%llu into the segment: "
                            "%s", name, (unsigned long long)lo, (unsigned long long)hi,
                            strerror(e));
        }
    }
    close(fd);
    return 0;
}

static int cpu_segment_create(wk_backend *be, const char *name, size_t bytes, void **base,
                              ein_error *err)
{
    cpu_backend *c = (cpu_backend *)be;
    size_t map = bytes ? bytes : 1;
    if (cpu_private_ok())
        return c->npeers <= 1 ? cpu_segment_private(c, map, base, err)
                              : cpu_segment_split(c, name, map, base, err);
    int fd, rc = cpu_shm_open(c, name, map, &fd, err);
    if (rc < 0)
        return rc;
    void *p = mmap(NULL, map, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return ein_fail(err, EIN_ENOMEM, "mmap of %zu bytes (%s): %s", map, name, strerror(errno));
#ifdef MADV_HUGEPAGE
    /* Taken where shmem_enabled is advise (a no-op where it is never). */
    if (map >= CPU_HUGE)
        madvise(p, map, MADV_HUGEPAGE);
#endif
    c->own_base = p;
    c->own_bytes = map;
    *base = p;
    return 0;
}

/* Copy bytes [off, off + bytes) of the private segment into the shared
 * memory peers map, unless peers already read them there (a direct span,
 * or a segment that is itself the shared memory). */
static int cpu_publish(wk_backend *be, uint64_t off, uint64_t bytes, ein_error *err)
{
    cpu_backend *c = (cpu_backend *)be;
    if (!c->pub || bytes == 0)
        return 0;
    if (off > c->own_bytes || bytes > c->own_bytes - off)
        return ein_fail(err, EIN_EINVAL, "publish of bytes %llu..%llu outside the segment of "
                        "%zu bytes", (unsigned long long)off, (unsigned long long)(off + bytes),
                        c->own_bytes);
    int s = span_find(c, off);
    if (s >= 0 && c->direct[s] && off + bytes <= c->spans[s].off + c->spans[s].bytes)
        return 0;
    /* memmove: at the edge of a direct span the two can be the same page */
    memmove(c->pub + off, (const char *)c->own_base + off, (size_t)bytes);
    return 0;
}

static int cpu_peer_open(wk_backend *be, int peer, const char *name, const void **base,
                         size_t *bytes, ein_error *err)
{
    cpu_backend *c = (cpu_backend *)be;
    int fd, rc = wk_peer_lookup(c->peers, c->npeers, peer, name, "memory", base, bytes, &fd, err);
    if (rc != 0)
        return rc < 0 ? rc : 0;
    struct stat st;
    if (fstat(fd, &st) < 0 || st.st_size <= 0) {
        close(fd);
        return ein_fail(err, EIN_EIO, "device %d's memory %s has no size", peer, name);
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return ein_fail(err, EIN_EIO, "mmap of device %d's memory: %s", peer, strerror(errno));
    wk_peer_set(&c->peers[peer], p, (size_t)st.st_size, base, bytes);
    return 0;
}

static int cpu_copy(wk_backend *be, void *dst, const void *src, size_t bytes, ein_error *err)
{
    cpu_backend *c = (cpu_backend *)be;
    if (c->recording)
        return wk_record_copy(c->recording, dst, src, bytes, err);
    memcpy(dst, src, bytes);
    return 0;
}

static int cpu_copy_box(wk_backend *be, void *dst, const ein_box *dst_box, const void *src,
                        const ein_box *src_box, const ein_box *region, size_t elem,
                        ein_error *err)
{
    cpu_backend *c = (cpu_backend *)be;
    if (c->recording)
        return wk_record_copy_box(c->recording, dst, dst_box, src, src_box, region, elem, err);
    ein_box_copy(dst, dst_box, src, src_box, region, elem);
    return 0;
}

static int cpu_upload(wk_backend *be, void *dst, const void *host, size_t bytes, ein_error *err)
{
    memcpy(dst, host, bytes);
    return 0;
}

static int cpu_download(wk_backend *be, void *host, const void *src, size_t bytes,
                        ein_error *err)
{
    memcpy(host, src, bytes);
    return 0;
}

static int cpu_sync(wk_backend *be, ein_error *err)
{
    return 0; /* everything ran when it was called */
}

static int cpu_kernel(wk_backend *be, const ein_kernel *k, const kn_block *ins, int nin,
                      kn_block *out, ein_error *err)
{
    cpu_backend *c = (cpu_backend *)be;
    if (c->recording)
        return wk_record_kernel(c->recording, k, ins, nin, out, err);
    return kn_cpu_run(k, ins, nin, out, err);
}

static int cpu_agg(wk_backend *be, ein_agg op, const kn_block *srcs, int n, kn_block *out,
                   ein_error *err)
{
    cpu_backend *c = (cpu_backend *)be;
    if (c->recording)
        return wk_record_agg(c->recording, op, srcs, n, out, err);
    return kn_cpu_agg(op, srcs, n, out, err);
}

static int cpu_graph_begin(wk_backend *be, ein_error *err)
{
    cpu_backend *c = (cpu_backend *)be;
    if (c->recording)
        return ein_fail(err, EIN_EINVAL, "a graph is already being recorded");
    if (!(c->recording = wk_record_new()))
        return ein_fail(err, EIN_ENOMEM, "out of memory recording a graph");
    return 0;
}

static int cpu_graph_end(wk_backend *be, void **graph, ein_error *err)
{
    cpu_backend *c = (cpu_backend *)be;
    if (!c->recording)
        return ein_fail(err, EIN_EINVAL, "no graph is being recorded");
    *graph = c->recording;
    c->recording = NULL;
    return 0;
}

static int cpu_graph_launch(wk_backend *be, void *graph, ein_error *err)
{
    return wk_record_replay(graph, be, err);
}

static void cpu_graph_free(wk_backend *be, void *graph)
{
    (void)be;
    wk_record_free(graph);
}

static void cpu_destroy(wk_backend *be)
{
    cpu_backend *c = (cpu_backend *)be;
    if (!c)
        return;
    for (int i = 0; i < c->npeers; i++)
        if (c->peers[i].base)
            munmap((void *)c->peers[i].base, c->peers[i].bytes);
    if (c->own_base)
        munmap(c->own_base, c->own_bytes); /* the direct spans' mappings too */
    if (c->pub)
        munmap(c->pub, c->pub_bytes);
    if (c->own_name[0])
        shm_unlink(c->own_name);
    free(c->spans);
    free(c->direct);
    free(c->peers);
    free(c);
}

/* Blocks between hosts staged through host buffers (wk_staged.h), as a
 * GPU's are: only with EIN_UCX_STAGED=1, a test of that path without a
 * GPU (CPU memory needs no staging). The copies are done at once. */
static int cst_copy(void *ctx, int slot, void *dst, const void *src, size_t n, ein_error *err)
{
    (void)ctx, (void)slot, (void)err;
    memcpy(dst, src, n);
    return 0;
}

static int cst_wait(void *ctx, int slot, ein_error *err)
{
    (void)ctx, (void)slot, (void)err;
    return 0;
}

static int cst_alloc(void *ctx, size_t n, void **p, ein_error *err)
{
    (void)ctx;
    return (*p = malloc(n)) ? 0 : ein_fail(err, EIN_ENOMEM, "out of memory");
}

static void cst_free(void *ctx, void *p)
{
    (void)ctx;
    free(p);
}

static int cpu_staged_ops(wk_backend *be, wk_staged_ops *ops, ein_error *err)
{
    (void)err;
    *ops = (wk_staged_ops){.ctx = be, .to_host = cst_copy, .to_device = cst_copy,
                           .wait = cst_wait, .host_alloc = cst_alloc, .host_free = cst_free};
    return 0;
}

wk_backend *wk_backend_cpu_new(int ndevices, int graphs)
{
    cpu_backend *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->peers = calloc((size_t)(ndevices > 0 ? ndevices : 1), sizeof *c->peers);
    if (!c->peers) {
        free(c);
        return NULL;
    }
    c->npeers = ndevices;
    kn_cpu_set_threads(1);
    c->be = (wk_backend){
        .name = "cpu",
        .dev = {.kernel = cpu_kernel, .agg = cpu_agg, .copy = cpu_copy,
                .copy_box = cpu_copy_box},
        .mem = {.host_visible = 1, .peer_spans = cpu_peer_spans,
                .segment_create = cpu_segment_create, .publish = cpu_publish,
                .peer_open = cpu_peer_open, .upload = cpu_upload, .download = cpu_download,
                .staged_ops = cpu_staged_ops},
        .ord = {.sync = cpu_sync},
        .destroy = cpu_destroy,
    };
    if (graphs) {
        c->be.dev.graph_begin = cpu_graph_begin;
        c->be.dev.graph_end = cpu_graph_end;
        c->be.dev.graph_launch = cpu_graph_launch;
        c->be.dev.graph_free = cpu_graph_free;
    }
    return &c->be;
}

wk_backend *wk_backend_cpu_make(const wk_backend_args *a, ein_error *err)
{
    wk_backend *be = wk_backend_cpu_new(a->ndevices, a->graphs);
    if (!be)
        ein_fail(err, EIN_ENOMEM, "out of memory");
    return be;
}
