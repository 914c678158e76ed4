/* worker/wk_ucx.c — the transport "ucx" (wk_xport.h): blocks between hosts
 * as UCX tagged messages, tag = (sending device, buffer).
 *
 * Progress: UCX's wake-ups on small messages are unreliable over TCP (UCX
 * 1.13: missed wake-ups), so nothing here waits on one: every call that
 * waits drives ucp_worker_progress itself in a bounded loop, and the
 * executor calls ops->progress from its poll loop, which then polls with
 * a short timeout. UCX matches messages of one tag from one sender in the
 * order they were sent.
 *
 * Environment, set before UCX loads unless already set: UCX_HANDLE_ERRORS
 * none (a worker's crash is the coordinator's to report: UCX's own handler
 * would print a trace instead), and on a pseudo-host (this host's address
 * 127.0.0.1: einrun --fake-hosts) UCX_TLS tcp and UCX_NET_DEVICES lo, over
 * TCP as between hosts, on the loopback only.
 *
 * Without UCX (configure found no libucx-dev) open fails with
 * EIN_EUNSUPPORTED saying so. */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/base/ein_clock.h"
#include "common/base/ein_knob.h"
#include "worker/wk_xport.h"

#ifndef HAVE_UCX

/* Never opened: the other entries are never called. */
static int ucx_open(const wk_xport_params *p, void **out, ein_error *err)
{
    (void)p, (void)out;
    return ein_fail(err, EIN_EUNSUPPORTED, "this einworker was built without UCX "
                    "(libucx-dev): transport ucx is unavailable (einrun --transport tcp "
                    "needs no library)");
}

const wk_xport_ops wk_xport_ucx = {.name = "ucx", .open = ucx_open};

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
#define PROGRESS_STEPS 64   /* ucp_worker_progress calls per ucx_progress */

typedef struct pending {
    void *req;
    void *scratch;          /* a drained block's memory, freed on completion */
    void (*done)(void *);   /* a staged chunk's buffer released on completion */
    void *arg;
} pending;

typedef struct wk_ucx {
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
} wk_ucx;

static void ucx_close(void *x);

static uint64_t tag_of(int dev, int buffer)
{
    return ((uint64_t)(uint32_t)dev << 32) | (uint32_t)buffer;
}

/* UCX's environment (see the top of this file), before libucs loads. */
static void ucx_env(const wk_xport_params *p)
{
    if (!ein_knob_get(EIN_KNOB_UCX_HANDLE_ERRORS))
        setenv("UCX_HANDLE_ERRORS", "none", 1);
    int loop = p->host_address && !strcmp(p->host_address, "127.0.0.1");
    if (loop && !ein_knob_get(EIN_KNOB_UCX_TLS))
        setenv("UCX_TLS", "tcp", 1);
    if (loop && !ein_knob_get(EIN_KNOB_UCX_NET_DEVICES))
        setenv("UCX_NET_DEVICES", "lo", 1);
}

static int ucx_open(const wk_xport_params *par, void **out, ein_error *err)
{
    int ndevices = par->ndevices, device = par->device;
    ucx_env(par);
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
        ucx_close(u);
        return ein_fail(err, EIN_EIO, "UCX configuration: %s", ucs_status_string(st));
    }
    st = ucx.ucp_init_version(UCP_API_MAJOR, UCP_API_MINOR, &p, cfg, &u->ctx);
    ucp_config_release(cfg);
    if (st != UCS_OK) {
        u->ctx = NULL;
        ucx_close(u);
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
        ucx_close(u);
        return ein_fail(err, EIN_EIO, "ucp_worker_create: %s", ucs_status_string(st));
    }
    if ((st = ucp_worker_get_address(u->worker, &u->addr, &u->addr_len)) != UCS_OK) {
        u->addr = NULL;
        ucx_close(u);
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

static void ucx_close(void *x)
{
    wk_ucx *u = x;
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

static void ucx_address(const void *x, const void **addr, size_t *len)
{
    const wk_ucx *u = x;
    *addr = u->addr;
    *len = u->addr_len;
}

static int ucx_connect(void *x, const ein_bytes *addrs, int n, ein_error *err)
{
    wk_ucx *u = x;
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

static int ucx_remote(const void *x, int peer)
{
    const wk_ucx *u = x;
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
    if (!ucx_remote(u, peer))
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

static int ucx_send(void *x, int peer, int buffer, const void *buf, size_t len,
                    void (*done)(void *), void *arg, ein_error *err)
{
    wk_ucx *u = x;
    return send_tagged(u, peer, tag_of(u->me, buffer), buf, len, done, arg, err);
}

static int ucx_arrived(void *x, int peer, int buffer)
{
    wk_ucx *u = x;
    ucp_tag_recv_info_t info;
    return ucp_tag_probe_nb(u->worker, tag_of(peer, buffer), TAG_FULL, 0, &info) != NULL;
}

static int ucx_receive(void *x, int peer, int buffer, void *p, size_t n, double end,
                       ein_error *err)
{
    wk_ucx *u = x;
    uint64_t tag = tag_of(peer, buffer);
    ucp_tag_recv_info_t info;
    ucp_tag_message_h msg = ucp_tag_probe_nb(u->worker, tag, TAG_FULL, 0, &info);
    if (msg && info.length != n)
        return ein_fail(err, EIN_EPROTO, "device %d sent a part of %zu bytes of its buffer %d, "
                        "%zu expected", peer, info.length, buffer, n);
    ucp_request_param_t rp = {.op_attr_mask = 0};
    void *req = ucp_tag_recv_nbx(u->worker, p, n, tag, TAG_FULL, &rp);
    /* Once the block has begun to arrive (ops->arrived), it takes its
     * bytes over the link: a link that went down shows as no end. */
    double left = 0;
    if (end > 0 && !((left = end - ein_now_s()) > 0))
        left = 1e-6;
    ucs_status_t st = wait_req(u, req, left);
    if (st == UCS_ERR_TIMED_OUT)
        return EIN_ETIMEOUT;
    if (st != UCS_OK)
        return ein_fail(err, EIN_EIO, "UCX receive of device %d's buffer %d: %s", peer, buffer,
                        ucs_status_string(st));
    return 0;
}

static int ucx_device_memory(const void *x)
{
    const wk_ucx *u = x;
    return u && u->cuda;
}

static int ucx_progress(void *x)
{
    wk_ucx *u = x;
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

static int ucx_flush(void *x, ein_error *err)
{
    wk_ucx *u = x;
    (void)err;
    for (int idle = 0; u->ninflight > 0;)
        if (ucx_progress(u))
            idle = 0;
        else if (++idle > 50)
            nanosleep(&(struct timespec){.tv_nsec = 20000}, NULL);
    return 0;
}

static int ucx_cancel(void *x, int peer, ein_error *err)
{
    wk_ucx *u = x;
    return send_tagged(u, peer, TAG_CANCEL | tag_of(u->me, 0), &u->cancel_msg,
                       sizeof u->cancel_msg, NULL, NULL, err);
}

static int ucx_cancelled(void *x)
{
    wk_ucx *u = x;
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

static int ucx_drain(void *x, ein_error *err)
{
    wk_ucx *u = x;
    ucp_tag_recv_info_t info;
    ucp_tag_message_h msg;
    ucx_progress(u);
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

const wk_xport_ops wk_xport_ucx = {
    .name = "ucx", .open = ucx_open, .close = ucx_close, .address = ucx_address,
    .connect = ucx_connect, .remote = ucx_remote, .send = ucx_send, .arrived = ucx_arrived,
    .receive = ucx_receive, .progress = ucx_progress, .flush = ucx_flush,
    .cancel = ucx_cancel, .cancelled = ucx_cancelled, .drain = ucx_drain,
    .device_memory = ucx_device_memory,
};

#endif
