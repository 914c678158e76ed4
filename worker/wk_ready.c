/* worker/wk_ready.c — the channel of READY and CANCELLED between the
 * workers of one host (wk_exec_int.h's wk_ready_ops): FIFOs (wk_fifo.h),
 * or ZeroMQ's PUSH/PULL over the run directory's ipc sockets. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "common/base/ein_clock.h"
#include "worker/wk_exec_int.h"
#include "worker/wk_fifo.h"

/* ---- ZeroMQ: a PULL socket bound by each worker, a PUSH per peer ---- */

static int zmq_open_(wk *w, ein_error *err)
{
    int zero = 0;
    int64_t maxsize = EIN_MSG_MAX_BYTES;
    if (!(w->pull = zmq_socket(w->zctx, ZMQ_PULL)))
        return ein_fail(err, EIN_EIO, "zmq_socket: %s", zmq_strerror(errno));
    zmq_setsockopt(w->pull, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(w->pull, ZMQ_MAXMSGSIZE, &maxsize, sizeof maxsize);
    char ep[EIN_PATH_MAX + 32];
    snprintf(ep, sizeof ep, "ipc://%s/w%d.sock", w->cfg->run_dir, w->cfg->device);
    if (zmq_bind(w->pull, ep) < 0)
        return ein_fail(err, EIN_EIO, "bind %s: %s", ep, zmq_strerror(errno));
    if (!(w->push = calloc((size_t)w->cfg->ndevices, sizeof *w->push)))
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    return 0;
}

/* The PUSH socket to device peer's PULL socket, made on first use; every
 * message to that peer goes through it, so the peer reads them in order. */
static void *peer_socket(wk *w, int peer, ein_error *err)
{
    if (!w->push[peer]) {
        char ep[EIN_PATH_MAX + 32];
        snprintf(ep, sizeof ep, "ipc://%s/w%d.sock", w->cfg->run_dir, peer);
        void *s = zmq_socket(w->zctx, ZMQ_PUSH);
        int zero = 0;
        if (!s) {
            ein_fail(err, EIN_EIO, "zmq_socket: %s", zmq_strerror(errno));
            return NULL;
        }
        zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
        if (zmq_connect(s, ep) < 0) {
            ein_fail(err, EIN_EIO, "connect to device %d: %s", peer, zmq_strerror(errno));
            zmq_close(s);
            return NULL;
        }
        w->push[peer] = s;
    }
    return w->push[peer];
}

static int zmq_send_(wk *w, int peer, const void *buf, size_t len, ein_error *err)
{
    void *s = peer_socket(w, peer, err);
    if (!s)
        return err ? err->code : EIN_EIO;
    if (zmq_send(s, buf, len, 0) < 0)
        return ein_fail(err, EIN_EIO, "cannot send to device %d: %s", peer, zmq_strerror(errno));
    return 0;
}

static int zmq_recv_(wk *w, ein_msg *m, ein_error *err)
{
    return wk_msg_recv(w->pull, m, "a peer", err);
}

static void zmq_poll_on(wk *w, void **socket, int *fd)
{
    *socket = w->pull;
    *fd = -1;
}

static void zmq_close_(wk *w)
{
    if (w->push)
        for (int i = 0; i < w->cfg->ndevices; i++)
            if (w->push[i])
                zmq_close(w->push[i]);
    free(w->push);
    w->push = NULL;
    if (w->pull)
        zmq_close(w->pull);
    w->pull = NULL;
}

static const wk_ready_ops zmq_ops = {
    .name = "zmq", .open = zmq_open_, .send = zmq_send_, .recv = zmq_recv_,
    .poll_on = zmq_poll_on, .close = zmq_close_,
};

/* ---- FIFOs (wk_fifo.h) ---- */

static int fifo_open_(wk *w, ein_error *err)
{
    return wk_fifo_open(w->cfg->run_dir, w->cfg->device, w->cfg->ndevices, &w->fifo, err);
}

/* A full pipe: the peer has not read for a while (it may be waiting to
 * send to us): read ours, hear the coordinator, beat, and try again. */
static int fifo_send_(wk *w, int peer, const void *buf, size_t len, ein_error *err)
{
    for (int tries = 0;; tries++) {
        int rc = wk_fifo_send(w->fifo, peer, buf, len, err);
        if (rc < 0)
            return rc;
        if (rc == 1) {
            wk_log(w, 1, "device %d is gone: a message to it is dropped", peer);
            return 0;
        }
        if (rc == 0)
            return 0;
        if (tries == 0)
            wk_log(w, 1, "device %d's FIFO is full: waiting", peer);
        if ((rc = wk_exec_pump(w, 1, NULL, err)) < 0)
            return rc;
        if (w->shutdown)
            return ein_fail(err, EIN_EWORKER, "stopped by the coordinator");
        if (ein_now_s() - w->last_beat > w->cfg->heartbeat_s && (rc = wk_exec_beat(w, err)) < 0)
            return rc;
    }
}

static int fifo_recv_(wk *w, ein_msg *m, ein_error *err)
{
    const void *p;
    size_t n;
    int got = wk_fifo_recv(w->fifo, &p, &n, err);
    if (got <= 0)
        return got < 0 ? ein_error_prefix(err, "malformed message from a peer") : 0;
    if (ein_msg_decode(p, n, m, err) < 0)
        return ein_error_prefix(err, "malformed message from a peer");
    return 1;
}

static void fifo_poll_on(wk *w, void **socket, int *fd)
{
    *socket = NULL;
    *fd = wk_fifo_fd(w->fifo);
}

static void fifo_close_(wk *w)
{
    wk_fifo_free(w->fifo);
    w->fifo = NULL;
}

static const wk_ready_ops fifo_ops = {
    .name = "fifo", .open = fifo_open_, .send = fifo_send_, .recv = fifo_recv_,
    .poll_on = fifo_poll_on, .close = fifo_close_,
};

int wk_ready_open(wk *w, ein_error *err)
{
    w->rdy = w->cfg->ready_zmq ? &zmq_ops : &fifo_ops;
    int rc = w->rdy->open(w, err);
    if (rc < 0 && w->rdy == &fifo_ops) {
        /* A FIFO that cannot be made (a file system without them): ZeroMQ. */
        wk_log(w, 1, "no FIFO (%s): READY through ZeroMQ", err ? err->msg : "");
        ein_error_clear(err);
        w->rdy = &zmq_ops;
        rc = w->rdy->open(w, err);
    }
    if (rc == 0)
        wk_log(w, 1, "READY between the workers of this host through %s", w->rdy->name);
    return rc;
}

int wk_ready_send(wk *w, int peer, const ein_msg *m, ein_error *err)
{
    void *buf = NULL;
    size_t len = 0;
    int rc = ein_msg_encode(m, &buf, &len, err);
    if (rc < 0)
        return rc;
    rc = w->rdy->send(w, peer, buf, len, err);
    free(buf);
    return rc;
}
