/* worker/wk_pump.c — what a worker hears while it waits: the heartbeat it
 * sends, the coordinator's messages (SHUTDOWN, CANCEL, PEERS, START), the
 * READY and CANCELLED of its peers and the set of READY received
 * (wk_exec_int.h). Below the executor (wk_exec.c) and the READY channel
 * (wk_ready.c), which both keep the worker alive through it while they
 * wait; it reaches the READY channel only through w->rdy's table. */
#include "worker/wk_exec_int.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/base/ein_clock.h"
#include "common/base/ein_invariant.h"
#include "common/base/ein_vec.h"
#include "common/io/ein_wire.h"
#include "worker/wk_xport.h"

int wk_exec_beat(wk *w, ein_error *err)
{
    ein_msg m = {.type = EIN_MSG_HEARTBEAT, .device = w->cfg->device, .instr = w->current};
    w->last_beat = ein_now_s();
    return wk_coord_send(w, &m, err);
}

int wk_ready_set_ok(const uint64_t *ready, int nready, int cap, int ndevices, int self)
{
    if (nready < 0 || nready > cap || (nready && !ready))
        return 0;
    for (int i = 0; i < nready; i++) {
        uint64_t peer = ready[i] >> 32, buf = ready[i] & 0xffffffffu;
        if (peer >= (uint64_t)ndevices || peer == (uint64_t)self || buf > (uint64_t)INT32_MAX)
            return 0; /* the pump refuses such a READY */
        if (i && ready[i - 1] >= ready[i])
            return 0; /* not a sorted set */
    }
    return 1;
}

int wk_exec_ready_has(const wk *w, uint64_t key)
{
    int lo = 0, hi = w->nready;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (w->ready[mid] < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < w->nready && w->ready[lo] == key;
}

static int ready_add(wk *w, uint64_t key, ein_error *err)
{
    if (wk_exec_ready_has(w, key))
        return 0;
    if (ein_vec_reserve(&w->ready, &w->cap_ready, (int64_t)w->nready + 1, sizeof *w->ready) < 0)
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    int i = w->nready++;
    while (i > 0 && w->ready[i - 1] > key) {
        w->ready[i] = w->ready[i - 1];
        i--;
    }
    w->ready[i] = key;
    EIN_INVARIANT(wk_ready_set_ok(w->ready, w->nready, w->cap_ready, w->cfg->ndevices,
                                  w->cfg->device));
    return 0;
}

/* A START: whether this iteration stores, and the inputs whose LOADs read
 * a new source from now on (the path is replaced; the LOAD runs again
 * before the iteration unless it is the first, which runs every LOAD). */
static int take_start(wk *w, const ein_msg *m, ein_error *err)
{
    w->store_now = m->store;
    w->entry_now = m->entry;
    w->coord_zmq = 0; /* DONE may take the FIFO unless the dealer carries more */
    for (int r = 0; r < m->nreload; r++)
        for (int i = 0; i < w->prog->ninstrs; i++) {
            ein_instr *ins = &w->prog->instrs[i];
            if (ins->kind != EIN_I_LOAD || strcmp(ins->op, m->reload[r].name))
                continue;
            char *path = NULL;
            if (m->reload[r].path && !(path = strdup(m->reload[r].path)))
                return ein_fail(err, EIN_ENOMEM, "out of memory");
            free(ins->path);
            ins->path = path;
            ins->format = m->reload[r].format;
            ins->offset = m->reload[r].offset;
            w->reload[i] = 1;
        }
    return 0;
}

/* The transport (a run on several hosts, wk_xport.h): progress, and a
 * remote peer's CANCELLED. */
static int pump_xport(wk *w, ein_error *err)
{
    int d;
    (void)err;
    w->xp->ops->progress(w->xp->x);
    while ((d = w->xp->ops->cancelled(w->xp->x)) >= 0)
        if (!w->peer_cancelled[d]) {
            w->peer_cancelled[d] = 1;
            w->npeer_cancelled++;
        }
    return 0;
}

/* Wait up to timeout_ms for messages and handle them: READY from peers,
 * START / SHUTDOWN from the coordinator (START sets *started). */
int wk_exec_pump(wk *w, int timeout_ms, int *started, ein_error *err)
{
    zmq_pollitem_t items[2] = {
        {.socket = w->dealer, .events = ZMQ_POLLIN},
        {.events = ZMQ_POLLIN},
    };
    int nitems = w->rdy ? 2 : 1;
    if (w->rdy)
        w->rdy->poll_on(w, &items[1].socket, &items[1].fd);
    /* A transport is polled, briefly (a row's wake-ups may be unreliable,
     * and none has a descriptor here). */
    if (w->xp && timeout_ms > 1)
        timeout_ms = w->xp->ops->progress(w->xp->x) ? 0 : 1;
    /* A bounded spin first (wk_config.spin_s): a READY or START due within
     * it is taken without waking from a blocked poll. Each turn yields, so
     * on a core another process wants the spin gives way to it. */
    int ready = 0;
    if (timeout_ms > 0 && w->cfg->spin_s > 0) {
        double until = ein_now_s() + w->cfg->spin_s;
        while ((ready = zmq_poll(items, nitems, 0)) == 0 && ein_now_s() < until)
            sched_yield();
        if (ready < 0 && errno != EINTR)
            return ein_fail(err, EIN_EIO, "zmq_poll: %s", zmq_strerror(errno));
    }
    /* A look without waiting needs no poll: the reads below return at once
     * (a poll over the socket and the FIFO costs about half a pump). */
    if (ready == 0 && timeout_ms != 0 && zmq_poll(items, nitems, timeout_ms) < 0 && errno != EINTR)
        return ein_fail(err, EIN_EIO, "zmq_poll: %s", zmq_strerror(errno));
    w->last_pump = ein_now_s();
    int rc0;
    if (w->xp && (rc0 = pump_xport(w, err)) < 0)
        return rc0;
    /* The coordinator's socket at most once a millisecond when not waiting
     * (a pump after each pass of the executor: a CANCEL or SHUTDOWN is
     * heard a millisecond later at most, a READY at once). */
    int dealer = timeout_ms != 0 || w->last_pump - w->last_dealer >= 0.001;
    if (dealer)
        w->last_dealer = w->last_pump;
    while (dealer) {
        ein_msg m;
        int got = wk_msg_recv(w->dealer, &m, "the coordinator", err);
        if (got < 0)
            return got;
        if (!got)
            break;
        if (m.type == EIN_MSG_SHUTDOWN)
            w->shutdown = 1;
        else if (m.type == EIN_MSG_CANCEL)
            w->cancel = 1;
        else if (m.type == EIN_MSG_PEERS && w->xp) {
            int rc = w->xp->ops->connect(w->xp->x, m.addrs, m.naddrs, err);
            ein_msg_clear(&m);
            if (rc < 0)
                return rc;
        } else if (m.type == EIN_MSG_START && started) {
            int rc = take_start(w, &m, err);
            w->start_fifo = 0;
            if (rc < 0) {
                ein_msg_clear(&m);
                return rc;
            }
            *started = 1;
        } else {
            int rc = ein_fail(err, EIN_EPROTO, "unexpected %s message from the coordinator",
                              ein_msg_type_name(m.type));
            ein_msg_clear(&m);
            return rc;
        }
        ein_msg_clear(&m);
    }
    for (; w->rdy;) {
        ein_msg m;
        int got = w->rdy->recv(w, &m, err);
        if (got < 0)
            return got;
        if (!got)
            break;
        int rc = 0;
        if (m.type == EIN_MSG_START && started && !*started) {
            /* the coordinator's, through our FIFO (wk_exec_int.h) */
            if ((rc = take_start(w, &m, err)) == 0)
                *started = w->start_fifo = 1;
        } else if (m.type != EIN_MSG_READY && m.type != EIN_MSG_CANCELLED)
            rc = ein_fail(err, EIN_EPROTO, "unexpected %s message%s",
                          ein_msg_type_name(m.type),
                          m.type == EIN_MSG_START ? " through the FIFO (not waiting for one)"
                                                  : " from a peer");
        else if (m.device < 0 || m.device >= w->cfg->ndevices || m.device == w->cfg->device)
            rc = ein_fail(err, EIN_EPROTO, "%s names device %d", ein_msg_type_name(m.type),
                          m.device);
        else if (m.type == EIN_MSG_CANCELLED) {
            if (!w->peer_cancelled[m.device]) {
                w->peer_cancelled[m.device] = 1;
                w->npeer_cancelled++;
            }
        }
        else if (m.buffer < 0)
            rc = ein_fail(err, EIN_EPROTO, "READY names device %d buffer %d", m.device, m.buffer);
        else
            rc = ready_add(w, ((uint64_t)m.device << 32) | (uint32_t)m.buffer, err);
        ein_msg_clear(&m);
        if (rc < 0)
            return rc;
    }
    return 0;
}
