/* worker/wk_ucx.c — blocks between hosts over UCX tagged messages (wk_ucx.h). */
#include "config.h"

#include "worker/wk_ucx.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/ein_clock.h"
#include "common/ein_knob.h"
#include "worker/wk_staged.h"

static double link_bw, link_lat; /* wk_ucx_set_link */
static size_t wire_chunk = WK_STAGED_CHUNK; /* wk_ucx_chunk */

size_t wk_ucx_chunk(void)
{
    static int read;
    if (!read) {
        read = 1;
        const char *e = ein_knob_get(EIN_KNOB_UCX_CHUNK);
        char *end;
        unsigned long long v = e && *e ? strtoull(e, &end, 10) : 0;
        if (e && *e && !*end && v >= 64 && v <= ((size_t)1 << 30))
            wire_chunk = (size_t)v;
    }
    return wire_chunk;
}

double wk_ucx_deadline_for(size_t bytes, double bytes_per_s, double latency_s)
{
    if (!(bytes_per_s > 0) || isinf(bytes_per_s))
        return 0;
    double lat = latency_s >= 0 && isfinite(latency_s) ? latency_s : 0;
    return WK_UCX_MARGIN * (lat + (double)bytes / bytes_per_s) + WK_UCX_SLACK_S;
}

void wk_ucx_set_link(double bytes_per_s, double latency_s)
{
    link_bw = bytes_per_s > 0 && isfinite(bytes_per_s) ? bytes_per_s : 0;
    link_lat = latency_s >= 0 && isfinite(latency_s) ? latency_s : 0;
}

double wk_ucx_deadline(size_t bytes)
{
    return wk_ucx_deadline_for(bytes, link_bw, link_lat);
}

#ifndef HAVE_UCX

int wk_ucx_new(int ndevices, int device, wk_ucx **out, ein_error *err)
{
    (void)ndevices, (void)device, (void)out;
    return ein_fail(err, EIN_EUNSUPPORTED, "this einworker was built without UCX "
                    "(libucx-dev): it cannot take part in a run on several hosts");
}
void wk_ucx_free(wk_ucx *u) { (void)u; }
void wk_ucx_address(const wk_ucx *u, const void **a, size_t *n) { (void)u, *a = NULL, *n = 0; }
int wk_ucx_set_peers(wk_ucx *u, const ein_bytes *a, int n, ein_error *err)
{
    (void)u, (void)a, (void)n;
    return ein_fail(err, EIN_EUNSUPPORTED, "no UCX");
}
int wk_ucx_remote(const wk_ucx *u, int peer) { (void)u, (void)peer; return 0; }
int wk_ucx_send(wk_ucx *u, int p, int b, const void *buf, size_t len, ein_error *err)
{
    (void)u, (void)p, (void)b, (void)buf, (void)len;
    return ein_fail(err, EIN_EUNSUPPORTED, "no UCX");
}
int wk_ucx_send_staged(wk_ucx *u, int p, int b, struct wk_staged *s, const void *dev, size_t len,
                       ein_error *err)
{
    (void)u, (void)p, (void)b, (void)s, (void)dev, (void)len;
    return ein_fail(err, EIN_EUNSUPPORTED, "no UCX");
}
int wk_ucx_recv_staged(wk_ucx *u, int p, int b, struct wk_staged *s, void *dev, size_t len,
                       ein_error *err)
{
    (void)u, (void)p, (void)b, (void)s, (void)dev, (void)len;
    return ein_fail(err, EIN_EUNSUPPORTED, "no UCX");
}
int wk_ucx_cuda(const wk_ucx *u) { (void)u; return 0; }
int wk_ucx_arrived(wk_ucx *u, int p, int b) { (void)u, (void)p, (void)b; return 0; }
int wk_ucx_recv(wk_ucx *u, int p, int b, void *buf, size_t len, ein_error *err)
{
    (void)u, (void)p, (void)b, (void)buf, (void)len;
    return ein_fail(err, EIN_EUNSUPPORTED, "no UCX");
}
int wk_ucx_progress(wk_ucx *u) { (void)u; return 0; }
int wk_ucx_flush(wk_ucx *u, ein_error *err) { (void)u, (void)err; return 0; }
int wk_ucx_busy(const wk_ucx *u) { (void)u; return 0; }
int wk_ucx_send_cancelled(wk_ucx *u, int p, ein_error *err)
{
    (void)u, (void)p;
    return ein_fail(err, EIN_EUNSUPPORTED, "no UCX");
}
int wk_ucx_poll_cancelled(wk_ucx *u) { (void)u; return -1; }
int wk_ucx_drain(wk_ucx *u, ein_error *err) { (void)u, (void)err; return 0; }

#else

#include <dlfcn.h>
#include <ucp/api/ucp.h>

/* UCX is loaded (dlopen) by the workers of a run on several hosts only:
 * linked in, its libucs would install its own SIGSEGV handler in every
 * worker (and print a backtrace instead of dying of the signal, which the
 * coordinator reports), and every worker would pay for loading it. */
#define UCX_FUNCS(X)                                                                         \
    X(ucp_cleanup) X(ucp_config_read) X(ucp_context_query) X(ucp_config_release) X(ucp_ep_close_nbx)              \
    X(ucp_ep_create) X(ucp_init_version) X(ucp_request_cancel) X(ucp_request_check_status)  \
    X(ucp_request_free) X(ucp_tag_msg_recv_nbx) X(ucp_tag_probe_nb) X(ucp_tag_recv_nbx)     \
    X(ucp_tag_send_nbx) X(ucp_worker_create) X(ucp_worker_destroy) X(ucp_worker_get_address) \
    X(ucp_worker_progress) X(ucp_worker_release_address) X(ucs_status_string)

static struct {
#define X(f) __typeof__(&f) f;
    UCX_FUNCS(X)
#undef X
} ucx;

/* Load libucp once; fails naming what is missing. */
static int ucx_load(ein_error *err)
{
    static void *lib;
    if (lib)
        return 0;
    void *h = dlopen("libucp.so.0", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return ein_fail(err, EIN_EUNSUPPORTED, "cannot load UCX (libucp.so.0: %s): install "
                        "libucx0 to take part in a run on several hosts", dlerror());
#define X(f)                                                                                 \
    if (!(*(void **)&ucx.f = dlsym(h, #f))) {                                                \
        dlclose(h);                                                                          \
        return ein_fail(err, EIN_EUNSUPPORTED, "UCX (libucp.so.0) has no %s", #f);           \
    }
    UCX_FUNCS(X)
#undef X
    lib = h;
    return 0;
}

#define ucp_cleanup ucx.ucp_cleanup
#define ucp_config_read ucx.ucp_config_read
#define ucp_context_query ucx.ucp_context_query
#define ucp_config_release ucx.ucp_config_release
#define ucp_ep_close_nbx ucx.ucp_ep_close_nbx
#define ucp_ep_create ucx.ucp_ep_create
#define ucp_request_cancel ucx.ucp_request_cancel
#define ucp_request_check_status ucx.ucp_request_check_status
#define ucp_request_free ucx.ucp_request_free
#define ucp_tag_msg_recv_nbx ucx.ucp_tag_msg_recv_nbx
#define ucp_tag_probe_nb ucx.ucp_tag_probe_nb
#define ucp_tag_recv_nbx ucx.ucp_tag_recv_nbx
#define ucp_tag_send_nbx ucx.ucp_tag_send_nbx
#define ucp_worker_create ucx.ucp_worker_create
#define ucp_worker_destroy ucx.ucp_worker_destroy
#define ucp_worker_get_address ucx.ucp_worker_get_address
#define ucp_worker_progress ucx.ucp_worker_progress
#define ucp_worker_release_address ucx.ucp_worker_release_address
#define ucs_status_string ucx.ucs_status_string

/* Tags: bit 63 clear, (device << 32 | buffer) for a block; bit 63 set,
 * (device << 32) for a CANCELLED. */
#define TAG_CANCEL (1ULL << 63)
#define TAG_FULL (~0ULL)
#define PROGRESS_STEPS 64   /* ucp_worker_progress calls per wk_ucx_progress */

typedef struct pending {
    void *req;
    void *scratch;          /* a drained block's memory, freed on completion */
    void (*done)(void *);   /* a staged chunk's buffer released on completion */
    void *arg;
} pending;

struct wk_ucx {
    int ndev, me;
    ucp_context_h ctx;
    ucp_worker_h worker;
    ucp_address_t *addr;
    size_t addr_len;
    ucp_ep_h *ep;           /* per device, NULL: same host */
    pending *inflight;      /* sends (and drained receives) not yet complete */
    int ninflight, cap;
    uint64_t cancel_msg;    /* payload of our CANCELLED (the tag carries all) */
    uint64_t cancel_in;     /* receive buffer for a peer's */
    int cuda;               /* this UCX reads and writes CUDA memory itself */
};

static uint64_t tag_of(int dev, int buffer)
{
    return ((uint64_t)(uint32_t)dev << 32) | (uint32_t)buffer;
}

int wk_ucx_new(int ndevices, int device, wk_ucx **out, ein_error *err)
{
    wk_ucx_chunk();
    int rc = ucx_load(err);
    if (rc < 0)
        return rc;
    wk_ucx *u = calloc(1, sizeof *u);
    ucs_status_t st;
    if (!u || !(u->ep = calloc((size_t)ndevices, sizeof *u->ep))) {
        free(u);
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    }
    u->ndev = ndevices;
    u->me = device;
    ucp_params_t p = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_TAG};
    ucp_config_t *cfg = NULL;
    if ((st = ucp_config_read(NULL, NULL, &cfg)) != UCS_OK) {
        wk_ucx_free(u);
        return ein_fail(err, EIN_EIO, "UCX configuration: %s", ucs_status_string(st));
    }
    st = ucx.ucp_init_version(UCP_API_MAJOR, UCP_API_MINOR, &p, cfg, &u->ctx);
    ucp_config_release(cfg);
    if (st != UCS_OK) {
        u->ctx = NULL;
        wk_ucx_free(u);
        return ein_fail(err, EIN_EIO, "ucp_init: %s", ucs_status_string(st));
    }
    ucp_context_attr_t ca = {.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES};
    if (ucp_context_query(u->ctx, &ca) == UCS_OK &&
        (ca.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)))
        u->cuda = 1;
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    if ((st = ucp_worker_create(u->ctx, &wp, &u->worker)) != UCS_OK) {
        u->worker = NULL;
        wk_ucx_free(u);
        return ein_fail(err, EIN_EIO, "ucp_worker_create: %s", ucs_status_string(st));
    }
    if ((st = ucp_worker_get_address(u->worker, &u->addr, &u->addr_len)) != UCS_OK) {
        u->addr = NULL;
        wk_ucx_free(u);
        return ein_fail(err, EIN_EIO, "ucp_worker_get_address: %s", ucs_status_string(st));
    }
    *out = u;
    return 0;
}

/* Wait for request `req` (from an nbx call) with a bounded progress loop,
 * then release it. With limit_s > 0, a request not complete after that
 * many seconds is cancelled: UCS_ERR_TIMED_OUT. */
static ucs_status_t wait_req(wk_ucx *u, void *req, double limit_s)
{
    if (req == NULL)
        return UCS_OK;
    if (UCS_PTR_IS_ERR(req))
        return UCS_PTR_STATUS(req);
    ucs_status_t st;
    double end = limit_s > 0 ? ein_now_s() + limit_s : 0;
    for (int idle = 0; (st = ucp_request_check_status(req)) == UCS_INPROGRESS;) {
        if (ucp_worker_progress(u->worker))
            idle = 0;
        else if (++idle > 50)
            nanosleep(&(struct timespec){.tv_nsec = 20000}, NULL); /* 20 us: spinning starves the peer on a loaded machine */
        if (end > 0 && (idle & 255) == 0 && ein_now_s() > end) {
            ucp_request_cancel(u->worker, req);
            for (int k = 0; k < 100000 && ucp_request_check_status(req) == UCS_INPROGRESS; k++)
                ucp_worker_progress(u->worker);
            st = UCS_ERR_TIMED_OUT;
            break;
        }
    }
    ucp_request_free(req);
    return st;
}

void wk_ucx_free(wk_ucx *u)
{
    if (!u)
        return;
    for (int i = 0; i < u->ninflight; i++) {
        ucp_request_cancel(u->worker, u->inflight[i].req);
        ucp_request_free(u->inflight[i].req);
        free(u->inflight[i].scratch);
    }
    free(u->inflight);
    for (int d = 0; d < u->ndev; d++)
        if (u->ep[d]) {
            ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                      .flags = UCP_EP_CLOSE_FLAG_FORCE};
            void *r = ucp_ep_close_nbx(u->ep[d], &rp);
            if (r && !UCS_PTR_IS_ERR(r)) {
                /* Bounded: a dead peer must not keep us. */
                for (int k = 0; k < 100000 && ucp_request_check_status(r) == UCS_INPROGRESS; k++)
                    ucp_worker_progress(u->worker);
                ucp_request_free(r);
            }
        }
    free(u->ep);
    if (u->addr)
        ucp_worker_release_address(u->worker, u->addr);
    if (u->worker)
        ucp_worker_destroy(u->worker);
    if (u->ctx)
        ucp_cleanup(u->ctx);
    free(u);
}

void wk_ucx_address(const wk_ucx *u, const void **addr, size_t *len)
{
    *addr = u->addr;
    *len = u->addr_len;
}

int wk_ucx_set_peers(wk_ucx *u, const ein_bytes *addrs, int n, ein_error *err)
{
    if (n != u->ndev)
        return ein_fail(err, EIN_EPROTO, "peers message: %d addresses for %d devices", n, u->ndev);
    for (int d = 0; d < n; d++) {
        if (!addrs[d].len || u->ep[d])
            continue;
        if (d == u->me)
            return ein_fail(err, EIN_EPROTO, "peers message: an address for this device");
        ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS,
                              .address = addrs[d].data};
        ucs_status_t st = ucp_ep_create(u->worker, &ep, &u->ep[d]);
        if (st != UCS_OK) {
            u->ep[d] = NULL;
            return ein_fail(err, EIN_EIO, "cannot reach device %d over UCX: %s", d,
                            ucs_status_string(st));
        }
    }
    return 0;
}

int wk_ucx_remote(const wk_ucx *u, int peer)
{
    return u && peer >= 0 && peer < u->ndev && u->ep[peer] != NULL;
}

static int add_inflight(wk_ucx *u, void *req, void *scratch, void (*done)(void *), void *arg,
                        ein_error *err)
{
    if (u->ninflight == u->cap) {
        int cap = u->cap ? 2 * u->cap : 16;
        pending *p = realloc(u->inflight, (size_t)cap * sizeof *p);
        if (!p)
            return ein_fail(err, EIN_ENOMEM, "out of memory");
        u->inflight = p;
        u->cap = cap;
    }
    u->inflight[u->ninflight++] = (pending){req, scratch, done, arg};
    return 0;
}

static int send_tagged(wk_ucx *u, int peer, uint64_t tag, const void *buf, size_t len,
                       void (*done)(void *), void *arg, ein_error *err)
{
    if (!wk_ucx_remote(u, peer))
        return ein_fail(err, EIN_EPROTO, "device %d is not reached through UCX", peer);
    ucp_request_param_t rp = {.op_attr_mask = 0};
    void *req = ucp_tag_send_nbx(u->ep[peer], buf, len, tag, &rp);
    if (UCS_PTR_IS_ERR(req))
        return ein_fail(err, EIN_EIO, "UCX send to device %d: %s", peer,
                        ucs_status_string(UCS_PTR_STATUS(req)));
    if (!req) {
        if (done)
            done(arg);
        return 0;
    }
    int rc = add_inflight(u, req, NULL, done, arg, err);
    if (rc < 0) { /* still sending: wait here rather than lose track */
        wait_req(u, req, 0);
        if (done)
            done(arg);
    }
    return rc;
}

int wk_ucx_send(wk_ucx *u, int peer, int buffer, const void *buf, size_t len, ein_error *err)
{
    /* On the wire: chunks (wk_staged.h), whatever the memory at either end. */
    size_t n = wk_staged_nchunks(len, wire_chunk);
    for (size_t i = 0; i < n; i++) {
        int rc = send_tagged(u, peer, tag_of(u->me, buffer),
                             (const char *)buf + i * wire_chunk,
                             wk_staged_chunk_len(len, wire_chunk, i), NULL, NULL, err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int wk_ucx_arrived(wk_ucx *u, int peer, int buffer)
{
    ucp_tag_recv_info_t info;
    return ucp_tag_probe_nb(u->worker, tag_of(peer, buffer), TAG_FULL, 0, &info) != NULL;
}

/* One block being received: its chunks in order, against one deadline
 * (the whole block's, from when its first chunk is received). */
typedef struct rblock {
    wk_ucx *u;
    int peer, buffer;
    size_t total;
    double limit, end;      /* wk_ucx_deadline(total), its end (0: none) */
} rblock;

static int recv_chunk(rblock *rb, void *p, size_t n, ein_error *err)
{
    wk_ucx *u = rb->u;
    uint64_t tag = tag_of(rb->peer, rb->buffer);
    ucp_tag_recv_info_t info;
    ucp_tag_message_h msg = ucp_tag_probe_nb(u->worker, tag, TAG_FULL, 0, &info);
    if (msg && info.length != n)
        return ein_fail(err, EIN_EPROTO, "device %d sent a part of %zu bytes of its buffer %d "
                        "(%zu bytes), %zu expected", rb->peer, info.length, rb->buffer, rb->total,
                        n);
    ucp_request_param_t rp = {.op_attr_mask = 0};
    void *req = ucp_tag_recv_nbx(u->worker, p, n, tag, TAG_FULL, &rp);
    /* Once the block has begun to arrive (wk_ucx_arrived), it takes its
     * bytes over the link: a link that went down shows as no end. */
    double left = 0;
    if (rb->end > 0 && !((left = rb->end - ein_now_s()) > 0))
        left = 1e-6;
    ucs_status_t st = wait_req(u, req, left);
    if (st == UCS_ERR_TIMED_OUT)
        return ein_fail(err, EIN_ETIMEOUT, "the block of %zu bytes from device %d (another host, "
                        "its buffer %d) began to arrive but did not end within %.1f s (the "
                        "model's %.3f s at %.3g MB/s and %.3g us between hosts, x %d + %.1f s): "
                        "the link to that host is down or the host stopped answering", rb->total,
                        rb->peer, rb->buffer, rb->limit,
                        link_lat + (double)rb->total / link_bw, link_bw / 1e6, link_lat * 1e6,
                        WK_UCX_MARGIN, WK_UCX_SLACK_S);
    if (st != UCS_OK)
        return ein_fail(err, EIN_EIO, "UCX receive of device %d's buffer %d: %s", rb->peer,
                        rb->buffer, ucs_status_string(st));
    return 0;
}

static int rb_recv(void *ctx, void *p, size_t n, ein_error *err)
{
    return recv_chunk(ctx, p, n, err);
}

static rblock rblock_of(wk_ucx *u, int peer, int buffer, size_t len)
{
    double limit = wk_ucx_deadline(len);
    return (rblock){u, peer, buffer, len, limit, limit > 0 ? ein_now_s() + limit : 0};
}

int wk_ucx_recv(wk_ucx *u, int peer, int buffer, void *buf, size_t len, ein_error *err)
{
    rblock rb = rblock_of(u, peer, buffer, len);
    size_t n = wk_staged_nchunks(len, wire_chunk);
    for (size_t i = 0; i < n; i++) {
        int rc = recv_chunk(&rb, (char *)buf + i * wire_chunk,
                            wk_staged_chunk_len(len, wire_chunk, i), err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

typedef struct sblock {
    wk_ucx *u;
    int peer, buffer;
} sblock;

static int sb_send(void *ctx, const void *p, size_t n, void (*done)(void *), void *arg,
                   ein_error *err)
{
    sblock *sb = ctx;
    return send_tagged(sb->u, sb->peer, tag_of(sb->u->me, sb->buffer), p, n, done, arg, err);
}

int wk_ucx_send_staged(wk_ucx *u, int peer, int buffer, wk_staged *s, const void *dev,
                       size_t len, ein_error *err)
{
    sblock sb = {u, peer, buffer};
    wk_staged_net net = {&sb, sb_send, NULL};
    return wk_staged_send(s, dev, len, &net, err);
}

int wk_ucx_recv_staged(wk_ucx *u, int peer, int buffer, wk_staged *s, void *dev, size_t len,
                       ein_error *err)
{
    rblock rb = rblock_of(u, peer, buffer, len);
    wk_staged_net net = {&rb, NULL, rb_recv};
    return wk_staged_recv(s, dev, len, &net, err);
}

int wk_ucx_cuda(const wk_ucx *u)
{
    return u && u->cuda;
}

int wk_ucx_progress(wk_ucx *u)
{
    int any = 0;
    for (int k = 0; k < PROGRESS_STEPS && ucp_worker_progress(u->worker); k++)
        any = 1;
    for (int i = 0; i < u->ninflight;) {
        ucs_status_t st = ucp_request_check_status(u->inflight[i].req);
        if (st == UCS_INPROGRESS) {
            i++;
            continue;
        }
        /* A failed send surfaces as the peer's failure (the coordinator
         * sees its host or worker go): nothing to add here. */
        ucp_request_free(u->inflight[i].req);
        free(u->inflight[i].scratch);
        if (u->inflight[i].done)
            u->inflight[i].done(u->inflight[i].arg);
        u->inflight[i] = u->inflight[--u->ninflight];
        any = 1;
    }
    return any;
}

int wk_ucx_busy(const wk_ucx *u)
{
    return u && u->ninflight > 0;
}

int wk_ucx_flush(wk_ucx *u, ein_error *err)
{
    (void)err;
    for (int idle = 0; u->ninflight > 0;)
        if (wk_ucx_progress(u))
            idle = 0;
        else if (++idle > 50)
            nanosleep(&(struct timespec){.tv_nsec = 20000}, NULL);
    return 0;
}

int wk_ucx_send_cancelled(wk_ucx *u, int peer, ein_error *err)
{
    return send_tagged(u, peer, TAG_CANCEL | tag_of(u->me, 0), &u->cancel_msg,
                       sizeof u->cancel_msg, NULL, NULL, err);
}

int wk_ucx_poll_cancelled(wk_ucx *u)
{
    ucp_tag_recv_info_t info;
    ucp_worker_progress(u->worker);
    ucp_tag_message_h msg = ucp_tag_probe_nb(u->worker, TAG_CANCEL, TAG_CANCEL, 1, &info);
    if (!msg)
        return -1;
    ucp_request_param_t rp = {.op_attr_mask = 0};
    void *req = ucp_tag_msg_recv_nbx(u->worker, &u->cancel_in, sizeof u->cancel_in, msg, &rp);
    if (wait_req(u, req, 0) != UCS_OK)
        return -1;
    int dev = (int)((info.sender_tag & ~TAG_CANCEL) >> 32);
    return dev >= 0 && dev < u->ndev ? dev : -1;
}

int wk_ucx_drain(wk_ucx *u, ein_error *err)
{
    ucp_tag_recv_info_t info;
    ucp_tag_message_h msg;
    wk_ucx_progress(u);
    while ((msg = ucp_tag_probe_nb(u->worker, 0, TAG_CANCEL, 1, &info))) {
        void *scratch = malloc(info.length ? info.length : 1);
        if (!scratch)
            return ein_fail(err, EIN_ENOMEM, "out of memory");
        ucp_request_param_t rp = {.op_attr_mask = 0};
        void *req = ucp_tag_msg_recv_nbx(u->worker, scratch, info.length, msg, &rp);
        if (UCS_PTR_IS_ERR(req) || !req) {
            free(scratch);
            continue;
        }
        if (add_inflight(u, req, scratch, NULL, NULL, err) < 0) {
            free(scratch);
            return err ? err->code : EIN_ENOMEM;
        }
    }
    return 0;
}

#endif
