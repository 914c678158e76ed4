/* worker/wk_tcp.c — the transport "tcp" (wk_xport.h): blocks between hosts
 * over ZeroMQ PUSH/PULL sockets on TCP, for hosts without UCX.
 *
 * Why ZeroMQ and not plain sockets: every worker already links it (its
 * link to the coordinator, the READY channel); it frames messages, makes
 * the connections, and moves bytes on its own I/O thread, so a send
 * progresses while the worker computes or waits for another block, and
 * two workers each receiving from the other cannot block each other's
 * sends (plain sockets would need that send pump in every wait). Its
 * cost: a received message lands in ZeroMQ's buffer and is copied once
 * into the destination (sends are zero-copy: zmq_msg_init_data).
 *
 * Each worker binds one PULL socket at tcp://A:port (port chosen by the
 * system; A: $EIN_TCP_ADDRESS, an IPv4 address or interface name of this
 * host, as for a separate data network (ZeroMQ resolves a name; the
 * endpoint it reports is numeric), else this host's address on the route to the
 * coordinator, einworker --host-address); that endpoint is its address.
 * PEERS connects one PUSH socket per remote device. A message is two
 * frames: a header (sending device, buffer, kind: a block's chunk or a
 * CANCELLED) and the bytes. ZeroMQ keeps the messages of one sender in
 * order; the receiver keeps those that have arrived and are not yet
 * received in arrival order (no high-water mark on either side: a send
 * never blocks, as UCX's), and a receive takes the first of its (device,
 * buffer). A message whose header is malformed (not 12 bytes, a device
 * out of range) is dropped.
 *
 * Like UCX, the data travels in clear and the PULL socket takes any
 * connection: the network between hosts is the run's. */
#include "worker/wk_xport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "common/base/ein_clock.h"
#include "common/base/ein_knob.h"

enum { KIND_BLOCK = 0, KIND_CANCEL = 1, HDR = 12 };
#define REACH_S 5.0             /* a peer's endpoint must accept within this */

typedef struct tsend {          /* a zero-copy send, until ZeroMQ lets go */
    atomic_int freed;           /* set by ZeroMQ's I/O thread (on_free) */
    void (*done)(void *);
    void *arg;
} tsend;

typedef struct tmsg {           /* arrived, not yet received */
    int peer, buffer, kind;
    zmq_msg_t body;
} tmsg;

typedef struct tcp {
    int ndev, me;
    void *ctx, *pull;
    void **push;                /* per device, NULL: same host */
    char addr[96];              /* our endpoint */
    tsend **inflight;
    int ninflight, cap;
    tmsg *q;
    int nq, capq;
} tcp;

static void tcp_close(void *x);

static int zfail(ein_error *err, const char *what)
{
    return ein_fail(err, EIN_EIO, "transport tcp: %s: %s", what, zmq_strerror(zmq_errno()));
}

static int tcp_open(const wk_xport_params *p, void **out, ein_error *err)
{
    const char *host = ein_knob_get(EIN_KNOB_TCP_ADDRESS);
    if (!host || !*host)
        host = p->host_address;
    if (!host || !*host)
        return ein_fail(err, EIN_EINVAL, "transport tcp: this host's address is unknown "
                        "(einworker --host-address, or EIN_TCP_ADDRESS)");
    tcp *t = calloc(1, sizeof *t);
    if (!t || !(t->push = calloc((size_t)p->ndevices, sizeof *t->push))) {
        free(t);
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    }
    t->ndev = p->ndevices;
    t->me = p->device;
    int zero = 0;
    char ep[128];
    size_t len = sizeof t->addr;
    snprintf(ep, sizeof ep, "tcp://%s:*", host);
    int rc = 0;
    if (!(t->ctx = zmq_ctx_new()) || !(t->pull = zmq_socket(t->ctx, ZMQ_PULL)))
        rc = zfail(err, "a ZeroMQ socket");
    else if (zmq_setsockopt(t->pull, ZMQ_RCVHWM, &zero, sizeof zero) < 0 ||
             zmq_setsockopt(t->pull, ZMQ_LINGER, &zero, sizeof zero) < 0)
        rc = zfail(err, "socket options");
    else if (zmq_bind(t->pull, ep) < 0)
        rc = ein_fail(err, EIN_EIO, "transport tcp: cannot listen at %s: %s", ep,
                      zmq_strerror(zmq_errno()));
    else if (zmq_getsockopt(t->pull, ZMQ_LAST_ENDPOINT, t->addr, &len) < 0)
        rc = zfail(err, "our endpoint");
    if (rc < 0) {
        tcp_close(t);
        return rc;
    }
    *out = t;
    return 0;
}

static void tcp_close(void *x)
{
    tcp *t = x;
    if (!t)
        return;
    for (int i = 0; i < t->nq; i++)
        zmq_msg_close(&t->q[i].body);
    free(t->q);
    for (int d = 0; d < t->ndev; d++)
        if (t->push[d])
            zmq_close(t->push[d]);
    if (t->pull)
        zmq_close(t->pull);
    if (t->ctx)
        zmq_ctx_term(t->ctx); /* linger 0: what was not sent is dropped */
    for (int i = 0; i < t->ninflight; i++)
        free(t->inflight[i]);
    free(t->inflight);
    free(t->push);
    free(t);
}

static void tcp_address(const void *x, const void **addr, size_t *len)
{
    const tcp *t = x;
    *addr = t->addr;
    *len = strlen(t->addr);
}

/* Can we reach endpoint "tcp://A.B.C.D:PORT"? ZeroMQ would retry an
 * unreachable one for ever in silence (no block would ever arrive): one
 * plain connect first, bounded by REACH_S. 0, or an errno value. */
static int reach(const char *ep)
{
    char ip[64];
    const char *h = ep + 6, *colon = strrchr(h, ':');
    struct sockaddr_in sa = {.sin_family = AF_INET};
    if (!colon || (size_t)(colon - h) >= sizeof ip)
        return EINVAL;
    memcpy(ip, h, (size_t)(colon - h));
    ip[colon - h] = '\0';
    long port = strtol(colon + 1, NULL, 10);
    if (inet_pton(AF_INET, ip, &sa.sin_addr) != 1 || port < 1 || port > 65535)
        return EINVAL;
    sa.sin_port = htons((uint16_t)port);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), e = 0;
    if (fd < 0)
        return errno;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        e = errno;
        if (e == EINPROGRESS) {
            struct pollfd pf = {.fd = fd, .events = POLLOUT};
            socklen_t el = sizeof e;
            int k = poll(&pf, 1, (int)(REACH_S * 1000));
            if (k == 0)
                e = ETIMEDOUT;
            else if (k < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) < 0)
                e = errno;
        }
    }
    close(fd);
    return e;
}

static int tcp_connect(void *x, const ein_bytes *addrs, int n, ein_error *err)
{
    tcp *t = x;
    if (n != t->ndev)
        return ein_fail(err, EIN_EPROTO, "peers message: %d addresses for %d devices", n, t->ndev);
    for (int d = 0; d < n; d++) {
        if (!addrs[d].len || t->push[d])
            continue;
        char ep[128];
        if (d == t->me)
            return ein_fail(err, EIN_EPROTO, "peers message: an address for this device");
        if (addrs[d].len >= sizeof ep || memchr(addrs[d].data, 0, addrs[d].len) ||
            addrs[d].len < 6 || memcmp(addrs[d].data, "tcp://", 6))
            return ein_fail(err, EIN_EPROTO, "peers message: device %d's address is not a "
                            "tcp:// endpoint (its worker uses another transport?)", d);
        memcpy(ep, addrs[d].data, addrs[d].len);
        ep[addrs[d].len] = 0;
        int e = reach(ep);
        if (e)
            return ein_fail(err, EIN_EIO, "transport tcp: cannot reach device %d at %s: %s "
                            "(the address its host found on its route to the coordinator; "
                            "EIN_TCP_ADDRESS on that host names another)", d, ep,
                            strerror(e));
        int zero = 0;
        if (!(t->push[d] = zmq_socket(t->ctx, ZMQ_PUSH)) ||
            zmq_setsockopt(t->push[d], ZMQ_SNDHWM, &zero, sizeof zero) < 0 ||
            zmq_setsockopt(t->push[d], ZMQ_LINGER, &zero, sizeof zero) < 0 ||
            zmq_connect(t->push[d], ep) < 0) {
            int rc = ein_fail(err, EIN_EIO, "transport tcp: cannot reach device %d at %s: %s",
                              d, ep, zmq_strerror(zmq_errno()));
            if (t->push[d])
                zmq_close(t->push[d]);
            t->push[d] = NULL;
            return rc;
        }
    }
    return 0;
}

static int tcp_remote(const void *x, int peer)
{
    const tcp *t = x;
    return t && peer >= 0 && peer < t->ndev && t->push[peer] != NULL;
}

static void on_free(void *data, void *hint)
{
    (void)data;
    atomic_store(&((tsend *)hint)->freed, 1);
}

static int send_msg(tcp *t, int peer, int buffer, int kind, const void *buf, size_t len,
                    void (*done)(void *), void *arg, ein_error *err)
{
    if (!tcp_remote(t, peer))
        return ein_fail(err, EIN_EPROTO, "device %d is not reached through transport tcp", peer);
    if (t->ninflight == t->cap) {
        int cap = t->cap ? 2 * t->cap : 16;
        tsend **p = realloc(t->inflight, (size_t)cap * sizeof *p);
        if (!p)
            return ein_fail(err, EIN_ENOMEM, "out of memory");
        t->inflight = p;
        t->cap = cap;
    }
    tsend *s = malloc(sizeof *s);
    if (!s)
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    atomic_init(&s->freed, 0);
    s->done = done;
    s->arg = arg;
    uint32_t h[3] = {(uint32_t)t->me, (uint32_t)buffer, (uint32_t)kind};
    zmq_msg_t m;
    int ok = zmq_send(t->push[peer], h, HDR, ZMQ_SNDMORE | ZMQ_DONTWAIT) == HDR;
    if (ok && len)
        ok = zmq_msg_init_data(&m, (void *)buf, len, on_free, s) == 0;
    else if (ok) {
        zmq_msg_init(&m);
        atomic_store(&s->freed, 1);
    }
    if (ok && zmq_msg_send(&m, t->push[peer], ZMQ_DONTWAIT) < 0) {
        /* (never sent: ZeroMQ let go of nothing) */
        zmq_msg_close(&m);
        ok = 0;
    }
    if (!ok) {
        free(s);
        return ein_fail(err, EIN_EIO, "transport tcp: send to device %d: %s", peer,
                        zmq_strerror(zmq_errno()));
    }
    t->inflight[t->ninflight++] = s;
    return 0;
}

static int tcp_send(void *x, int peer, int buffer, const void *buf, size_t len,
                    void (*done)(void *), void *arg, ein_error *err)
{
    return send_msg(x, peer, buffer, KIND_BLOCK, buf, len, done, arg, err);
}

/* Take every message that has arrived into t->q; 1 when any did. */
static int pump_in(tcp *t)
{
    int any = 0;
    for (;;) {
        uint32_t h[3];
        int more = 0;
        size_t ml = sizeof more;
        int n = zmq_recv(t->pull, h, sizeof h, ZMQ_DONTWAIT);
        if (n < 0)
            return any;
        any = 1;
        if (zmq_getsockopt(t->pull, ZMQ_RCVMORE, &more, &ml) < 0 || !more)
            continue; /* malformed: no body */
        if (t->nq == t->capq) {
            int cap = t->capq ? 2 * t->capq : 16;
            tmsg *q = realloc(t->q, (size_t)cap * sizeof *q);
            if (!q)
                return any; /* left in ZeroMQ: taken later */
            t->q = q;
            t->capq = cap;
        }
        tmsg *m = &t->q[t->nq];
        zmq_msg_init(&m->body);
        if (zmq_msg_recv(&m->body, t->pull, 0) < 0) {
            zmq_msg_close(&m->body);
            continue;
        }
        while (zmq_msg_more(&m->body)) { /* malformed: extra frames */
            zmq_msg_t extra;
            zmq_msg_init(&extra);
            zmq_msg_recv(&extra, t->pull, 0);
            zmq_msg_close(&extra);
            n = -1;
        }
        if (n != HDR || h[0] >= (uint32_t)t->ndev || h[2] > KIND_CANCEL) {
            zmq_msg_close(&m->body);
            continue;
        }
        m->peer = (int)h[0];
        m->buffer = (int)h[1];
        m->kind = (int)h[2];
        t->nq++;
    }
}

/* The first arrived message of (peer, buffer, kind), peer -1: any; -1: none. */
static int find(const tcp *t, int peer, int buffer, int kind)
{
    for (int i = 0; i < t->nq; i++)
        if (t->q[i].kind == kind && (peer < 0 || (t->q[i].peer == peer &&
                                                  t->q[i].buffer == buffer)))
            return i;
    return -1;
}

static void take(tcp *t, int i)
{
    zmq_msg_close(&t->q[i].body);
    memmove(&t->q[i], &t->q[i + 1], (size_t)(t->nq - i - 1) * sizeof *t->q);
    t->nq--;
}

static int tcp_arrived(void *x, int peer, int buffer)
{
    tcp *t = x;
    pump_in(t);
    return find(t, peer, buffer, KIND_BLOCK) >= 0;
}

static int tcp_receive(void *x, int peer, int buffer, void *p, size_t n, double end,
                       ein_error *err)
{
    tcp *t = x;
    int i;
    while (pump_in(t), (i = find(t, peer, buffer, KIND_BLOCK)) < 0) {
        int ms = 10;
        if (end > 0) {
            double left = end - ein_now_s();
            if (!(left > 0))
                return EIN_ETIMEOUT;
            if (left < 0.01)
                ms = 1;
        }
        zmq_pollitem_t it = {.socket = t->pull, .events = ZMQ_POLLIN};
        zmq_poll(&it, 1, ms);
    }
    size_t got = zmq_msg_size(&t->q[i].body);
    if (got != n) {
        take(t, i);
        return ein_fail(err, EIN_EPROTO, "device %d sent a part of %zu bytes of its buffer %d, "
                        "%zu expected", peer, got, buffer, n);
    }
    if (n)
        memcpy(p, zmq_msg_data(&t->q[i].body), n);
    take(t, i);
    return 0;
}

static int tcp_progress(void *x)
{
    tcp *t = x;
    int any = pump_in(t);
    for (int i = 0; i < t->ninflight;) {
        tsend *s = t->inflight[i];
        if (!atomic_load(&s->freed)) {
            i++;
            continue;
        }
        if (s->done)
            s->done(s->arg);
        free(s);
        t->inflight[i] = t->inflight[--t->ninflight];
        any = 1;
    }
    return any;
}

static int tcp_flush(void *x, ein_error *err)
{
    tcp *t = x;
    (void)err;
    for (int idle = 0; t->ninflight > 0;)
        if (tcp_progress(t))
            idle = 0;
        else if (++idle > 50)
            nanosleep(&(struct timespec){.tv_nsec = 20000}, NULL);
    return 0;
}

static int tcp_cancel(void *x, int peer, ein_error *err)
{
    return send_msg(x, peer, 0, KIND_CANCEL, NULL, 0, NULL, NULL, err);
}

static int tcp_cancelled(void *x)
{
    tcp *t = x;
    pump_in(t);
    int i = find(t, -1, 0, KIND_CANCEL);
    if (i < 0)
        return -1;
    int dev = t->q[i].peer;
    take(t, i);
    return dev;
}

static int tcp_drain(void *x, ein_error *err)
{
    tcp *t = x;
    (void)err;
    tcp_progress(t);
    for (int i; (i = find(t, -1, 0, KIND_BLOCK)) >= 0;)
        take(t, i);
    return 0;
}

static int tcp_device_memory(const void *x)
{
    (void)x;
    return 0;
}

const wk_xport_ops wk_xport_tcp = {
    .name = "tcp", .open = tcp_open, .close = tcp_close, .address = tcp_address,
    .connect = tcp_connect, .remote = tcp_remote, .send = tcp_send, .arrived = tcp_arrived,
    .receive = tcp_receive, .progress = tcp_progress, .flush = tcp_flush,
    .cancel = tcp_cancel, .cancelled = tcp_cancelled, .drain = tcp_drain,
    .device_memory = tcp_device_memory,
};
