/* worker/wk_xport.c — the transports' table, and what every transport
 * shares: blocks as chunks, their deadlines, staging (wk_xport.h). */
#include "worker/wk_xport.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/ein_clock.h"
#include "common/base/ein_knob.h"
#include "worker/wk_staged.h"

/* The rows (each in its own file). */
extern const wk_xport_ops wk_xport_ucx, wk_xport_tcp;
static const wk_xport_ops *const rows[] = {&wk_xport_ucx, &wk_xport_tcp};
enum { NROWS = sizeof rows / sizeof rows[0] };

const wk_xport_ops *wk_xport_find(const char *name)
{
    for (int i = 0; name && i < NROWS; i++)
        if (!strcmp(rows[i]->name, name))
            return rows[i];
    return NULL;
}

const char *wk_xport_names(void)
{
    static char names[128];
    if (!names[0])
        for (int i = 0; i < NROWS; i++) {
            size_t n = strlen(names);
            snprintf(names + n, sizeof names - n, "%s%s", i ? ", " : "", rows[i]->name);
        }
    return names;
}

static double link_bw, link_lat; /* wk_xport_set_link */
static size_t wire_chunk = WK_STAGED_CHUNK; /* wk_xport_chunk */

size_t wk_xport_chunk(void)
{
    static int read;
    if (!read) {
        read = 1;
        const char *e = ein_knob_get(EIN_KNOB_XPORT_CHUNK);
        char *end;
        unsigned long long v = e && *e ? strtoull(e, &end, 10) : 0;
        if (e && *e && !*end && v >= 64 && v <= ((size_t)1 << 30))
            wire_chunk = (size_t)v;
    }
    return wire_chunk;
}

double wk_xport_deadline_for(size_t bytes, double bytes_per_s, double latency_s)
{
    if (!(bytes_per_s > 0) || isinf(bytes_per_s))
        return 0;
    double lat = latency_s >= 0 && isfinite(latency_s) ? latency_s : 0;
    return WK_XPORT_MARGIN * (lat + (double)bytes / bytes_per_s) + WK_XPORT_SLACK_S;
}

void wk_xport_set_link(double bytes_per_s, double latency_s)
{
    link_bw = bytes_per_s > 0 && isfinite(bytes_per_s) ? bytes_per_s : 0;
    link_lat = latency_s >= 0 && isfinite(latency_s) ? latency_s : 0;
}

double wk_xport_deadline(size_t bytes)
{
    return wk_xport_deadline_for(bytes, link_bw, link_lat);
}

int wk_xport_open(const char *name, const wk_xport_params *p, wk_xport **out, ein_error *err)
{
    const wk_xport_ops *ops = wk_xport_find(name);
    if (!ops)
        return ein_fail(err, EIN_EINVAL, "unknown transport '%s' (known: %s)", name ? name : "",
                        wk_xport_names());
    wk_xport_chunk();
    wk_xport *t = calloc(1, sizeof *t);
    if (!t)
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    t->ops = ops;
    t->me = p->device;
    int rc = ops->open(p, &t->x, err);
    if (rc < 0) {
        free(t);
        return rc;
    }
    *out = t;
    return 0;
}

void wk_xport_close(wk_xport *t)
{
    if (!t)
        return;
    t->ops->close(t->x);
    free(t);
}

int wk_xport_remote(const wk_xport *t, int peer)
{
    return t && t->ops->remote(t->x, peer);
}

int wk_xport_send(wk_xport *t, int peer, int buffer, const void *buf, size_t len,
                  ein_error *err)
{
    if (!wk_xport_remote(t, peer))
        return ein_fail(err, EIN_EPROTO, "device %d is not reached through the transport", peer);
    size_t n = wk_staged_nchunks(len, wire_chunk);
    for (size_t i = 0; i < n; i++) {
        int rc = t->ops->send(t->x, peer, buffer, (const char *)buf + i * wire_chunk,
                              wk_staged_chunk_len(len, wire_chunk, i), NULL, NULL, err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* One block being received: its chunks in order, against one deadline
 * (the whole block's, from when its first chunk is received). */
typedef struct rblock {
    wk_xport *t;
    int peer, buffer;
    size_t total;
    double limit, end;      /* wk_xport_deadline(total), its end (0: none) */
} rblock;

static int recv_chunk(void *ctx, void *p, size_t n, ein_error *err)
{
    rblock *rb = ctx;
    int rc = rb->t->ops->receive(rb->t->x, rb->peer, rb->buffer, p, n, rb->end, err);
    if (rc == EIN_ETIMEOUT)
        return ein_fail(err, EIN_ETIMEOUT, "the block of %zu bytes from device %d (another host, "
                        "its buffer %d) began to arrive but did not end within %.1f s (the "
                        "model's %.3f s at %.3g MB/s and %.3g us between hosts, x %d + %.1f s): "
                        "the link to that host is down or the host stopped answering", rb->total,
                        rb->peer, rb->buffer, rb->limit,
                        link_lat + (double)rb->total / link_bw, link_bw / 1e6, link_lat * 1e6,
                        WK_XPORT_MARGIN, WK_XPORT_SLACK_S);
    return rc;
}

static rblock rblock_of(wk_xport *t, int peer, int buffer, size_t len)
{
    double limit = wk_xport_deadline(len);
    return (rblock){t, peer, buffer, len, limit, limit > 0 ? ein_now_s() + limit : 0};
}

int wk_xport_recv(wk_xport *t, int peer, int buffer, void *buf, size_t len, ein_error *err)
{
    rblock rb = rblock_of(t, peer, buffer, len);
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
    wk_xport *t;
    int peer, buffer;
} sblock;

static int sb_send(void *ctx, const void *p, size_t n, void (*done)(void *), void *arg,
                   ein_error *err)
{
    sblock *sb = ctx;
    return sb->t->ops->send(sb->t->x, sb->peer, sb->buffer, p, n, done, arg, err);
}

int wk_xport_send_staged(wk_xport *t, int peer, int buffer, wk_staged *s, const void *dev,
                         size_t len, ein_error *err)
{
    if (!wk_xport_remote(t, peer))
        return ein_fail(err, EIN_EPROTO, "device %d is not reached through the transport", peer);
    sblock sb = {t, peer, buffer};
    wk_staged_net net = {&sb, sb_send, NULL};
    return wk_staged_send(s, dev, len, &net, err);
}

int wk_xport_recv_staged(wk_xport *t, int peer, int buffer, wk_staged *s, void *dev, size_t len,
                         ein_error *err)
{
    rblock rb = rblock_of(t, peer, buffer, len);
    wk_staged_net net = {&rb, NULL, recv_chunk};
    return wk_staged_recv(s, dev, len, &net, err);
}
