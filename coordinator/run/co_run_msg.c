/* coordinator/run/co_run_msg.c — the workers' and agents' messages to the
 * coordinator: received, checked and acted on (co_run_int.h). */
#include "coordinator/run/co_run_int.h"

/* "w<d>" (a worker's main socket) or "b<d>" (its heartbeat thread) */
static int device_of(const run *r, const char *id, size_t len)
{
    if (len < 2 || len > 8 || (id[0] != 'w' && id[0] != 'b'))
        return -1;
    int d = 0;
    for (size_t i = 1; i < len; i++) {
        if (id[i] < '0' || id[i] > '9')
            return -1;
        d = d * 10 + (id[i] - '0');
    }
    return d < r->ndev ? d : -1;
}

/* Receive one message from the router without waiting: the sender's
 * identity into id[0..*idlen) (at most idcap bytes) and the body into *zm
 * (initialised; the caller closes it), dropping any frames after the
 * body; *extra is set when there were such frames. Returns 1 when a
 * message came, 0 when none was waiting (*zm then untouched), or a
 * negative code. */
static int recv_message(run *r, char *id, size_t idcap, size_t *idlen, zmq_msg_t *zm, int *extra,
                        int *host, ein_error *err)
{
    int more = 0;
    size_t ml = sizeof more;
    *host = -1;
    if (r->o->nhosts > 0) {
        /* From an agent: its identity "n<h>" first (node/nd_agent.h). */
        char aid[16];
        zmq_msg_t am;
        zmq_msg_init(&am);
        if (zmq_msg_recv(&am, r->router, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&am);
            return errno == EAGAIN ? 0 : ein_fail(err, EIN_EIO, "zmq_recv: %s", zmq_strerror(errno));
        }
        size_t an = zmq_msg_size(&am) < sizeof aid - 1 ? zmq_msg_size(&am) : sizeof aid - 1;
        memcpy(aid, zmq_msg_data(&am), an);
        aid[an] = '\0';
        more = zmq_msg_more(&am);
        char *end = aid;
        long h = aid[0] == 'n' ? strtol(aid + 1, &end, 10) : -1;
        zmq_msg_close(&am);
        if (h < 0 || h >= r->o->nhosts || *end || !more) {
            while (more && zmq_getsockopt(r->router, ZMQ_RCVMORE, &more, &ml) == 0 && more) {
                zmq_msg_t junk;
                zmq_msg_init(&junk);
                zmq_msg_recv(&junk, r->router, 0);
                zmq_msg_close(&junk);
            }
            fprintf(stderr, "einsummable: dropped a message from a peer that is not the agent it "
                            "claims to be ('%s')\n", aid);
            return 0;
        }
        *host = (int)h;
    }
    int n = zmq_recv(r->router, id, idcap, r->o->nhosts > 0 ? 0 : ZMQ_DONTWAIT);
    if (n < 0)
        return errno == EAGAIN ? 0 : ein_fail(err, EIN_EIO, "zmq_recv: %s", zmq_strerror(errno));
    zmq_getsockopt(r->router, ZMQ_RCVMORE, &more, &ml);
    zmq_msg_init(zm);
    if (!more || zmq_msg_recv(zm, r->router, 0) < 0) {
        zmq_msg_close(zm);
        return ein_fail(err, EIN_EPROTO, "a peer sent a message without a body");
    }
    /* Drop any further frames of a malformed multipart message. */
    *extra = zmq_msg_more(zm);
    while (zmq_getsockopt(r->router, ZMQ_RCVMORE, &more, &ml) == 0 && more) {
        zmq_msg_t junk;
        zmq_msg_init(&junk);
        zmq_msg_recv(&junk, r->router, 0);
        zmq_msg_close(&junk);
    }
    /* Several hosts: the sender's CURVE key must be that host's agent's
     * (its ZAP User-Id, co_curve.h), whatever identity it claims. */
    if (*host >= 0 && !co_curve_user_ok(zm, *host)) {
        zmq_msg_close(zm);
        fprintf(stderr, "einsummable: dropped a message from a peer that is not the agent of "
                        "host %d it claims to be\n", *host);
        return 0;
    }
    if (*host >= 0 && r->host_heard)
        r->host_heard[*host] = 1;
    *idlen = (size_t)n < idcap ? (size_t)n : idcap;
    return 1;
}

/* A decoded message from device d's socket `sock` ('w' main, 'b' the
 * heartbeat thread) is one the coordinator accepts: no extra frame, a
 * worker-to-coordinator type, d's own device, only HEARTBEATs from 'b'. */
static int check_message(const ein_msg *m, int d, char sock, int extra, ein_error *err)
{
    if (extra)
        return ein_fail(err, EIN_EPROTO, "unexpected extra frame");
    if (m->type != EIN_MSG_HEARTBEAT && m->type != EIN_MSG_HELLO && m->type != EIN_MSG_DONE &&
        m->type != EIN_MSG_ERROR && m->type != EIN_MSG_CANCELLED)
        return ein_fail(err, EIN_EPROTO, "unexpected %s message", ein_msg_type_name(m->type));
    if (m->device != d)
        return ein_fail(err, EIN_EPROTO, "message claims to come from device %d", m->device);
    if (sock == 'b' && m->type != EIN_MSG_HEARTBEAT)
        return ein_fail(err, EIN_EPROTO, "%s message from the heartbeat thread",
                        ein_msg_type_name(m->type));
    return 0;
}

/* HEARTBEAT: note the instruction; the first one from the main socket of
 * a spawned worker gets it its program. */
static int on_heartbeat(run *r, int d, char sock, const ein_msg *m, ein_error *err)
{
    worker *w = &r->w[d];
    int rc;
    w->instr = m->instr;
    if (w->phase == W_SPAWNED && sock == 'w') {
        ein_msg pm = {.type = EIN_MSG_PROGRAM, .program = r->progs[d]};
        if ((rc = co_run_send_to(r, d, &pm, err)) < 0)
            return rc;
        w->phase = W_PROGRAM_SENT;
    }
    return 0;
}

/* HELLO: the worker loaded its program (a manual worker tells its pid). */
static int on_hello(run *r, int d, const ein_msg *m, ein_error *err)
{
    worker *w = &r->w[d];
    if (w->phase != W_PROGRAM_SENT)
        return ein_fail(err, EIN_EPROTO, "device %d (pid %ld) said HELLO out of turn", d, (long)w->pid);
    w->phase = W_LOADED;
    if (r->o->nhosts > 0) {
        /* Not our child (its agent's): its pid names it in reports. */
        w->pid = (pid_t)m->pid;
        if (m->naddrs != 1 || !m->addrs[0].len)
            return ein_fail(err, EIN_EPROTO, "device %d (pid %ld) said HELLO without its transport "
                            "address", d, (long)w->pid);
        r->addr[d] = m->addrs[0];
        ((ein_msg *)m)->addrs[0] = (ein_bytes){0}; /* taken */
        return 0;
    }
    if (r->o->sess.manual && m->pid > 0) {
        w->pid = (pid_t)m->pid;
        co_guard_add_pid(&r->guard, w->pid);
    }
    return 0;
}

/* DONE: the worker ran its program; its figures go to stats[d] if asked. */
static int on_done(run *r, int d, const ein_msg *m, co_worker_stats *stats, ein_error *err)
{
    worker *w = &r->w[d];
    if (w->phase != W_STARTED)
        return ein_fail(err, EIN_EPROTO, "device %d (pid %ld) said DONE out of turn", d, (long)w->pid);
    w->phase = W_DONE;
    if (w->start_seq && w->start_seq == w->zmq_sent)
        w->zmq_acked = 1; /* its START was the last ZeroMQ message to it */
    if (stats) {
        stats[d] = (co_worker_stats){
            .t = {.pid = (long)w->pid, .total = m->t_total, .kernel = m->t_kernel,
                  .copy = m->t_copy, .wait = m->t_wait},
            .g = {.captured = m->graphs_captured, .launched = m->graphs_launched,
                  .failed = m->graphs_failed, .too_short = m->graphs_short},
            .device_timed = m->t_device};
        snprintf(stats[d].g.error, sizeof stats[d].g.error, "%s", m->graph_error);
    }
    return 0;
}

/* CANCELLED: the worker has stopped the run CANCEL abandoned (or had
 * finished it: then its DONE came first), and so have all its peers. */
static int on_cancelled(run *r, int d, ein_error *err)
{
    worker *w = &r->w[d];
    if (!r->cancelling || (w->phase != W_STARTED && w->phase != W_DONE))
        return ein_fail(err, EIN_EPROTO, "device %d (pid %ld) said CANCELLED out of turn", d,
                        (long)w->pid);
    w->phase = W_CANCELLED;
    return 0;
}

/* ERROR: always fails, EIN_EWORKER naming the instruction that failed. */
static int on_error(run *r, int d, const ein_msg *m, ein_error *err)
{
    worker *w = &r->w[d];
    char where[200];
    int instr = m->instr >= 0 && m->instr < r->progs[d]->ninstrs ? m->instr : w->instr;
    co_run_describe_instr(r, d, instr, where, sizeof where);
    /* Several hosts: a transfer from another host that failed (its
     * deadline, worker/wk_xport.h) names both hosts. */
    const char *from = r->o->nhosts > 0 ? strstr(m->text, "from device ") : NULL;
    int p = -1;
    if (from && sscanf(from, "from device %d (another host", &p) == 1 && p >= 0 &&
        p < r->ndev && strstr(from, "(another host")) {
        char hp[300], hd[300];
        co_hosts_name(r->o, r->o->host_of[p], hp, sizeof hp);
        co_hosts_name(r->o, r->o->host_of[d], hd, sizeof hd);
        return ein_fail(err, EIN_EWORKER, "device %d (pid %ld, %s) failed %s: %s [device %d is "
                        "on %s]", d, (long)w->pid, hd, where, m->text, p, hp);
    }
    return ein_fail(err, EIN_EWORKER, "device %d (pid %ld) failed %s: %s", d, (long)w->pid, where,
                    m->text);
}

/* Handle one waiting message: 1 handled, 0 none waiting, < 0 failure. */
int co_run_handle_message(run *r, co_worker_stats *stats, ein_error *err)
{
    char id[64];
    size_t idlen = 0;
    zmq_msg_t zm;
    int extra = 0, host = -1;
    int rc = recv_message(r, id, sizeof id, &idlen, &zm, &extra, &host, err);
    if (rc <= 0)
        return rc;
    int d = device_of(r, id, idlen);
    if (d < 0 || (r->o->nhosts > 0 && r->o->host_of[d] != host)) {
        zmq_msg_close(&zm);
        if (d >= 0)
            return ein_fail(err, EIN_EPROTO, "the agent of host %d relayed a message of device %d "
                            "(on host %d)", host, d, r->o->host_of[d]);
        return ein_fail(err, EIN_EPROTO, "message from an unknown peer identity");
    }
    ein_msg m;
    rc = ein_msg_decode(zmq_msg_data(&zm), zmq_msg_size(&zm), &m, err);
    int decoded = rc == 0;
    zmq_msg_close(&zm);
    worker *w = &r->w[d];
    if (rc == 0)
        rc = check_message(&m, d, id[0], extra, err);
    if (rc < 0) {
        if (decoded)
            ein_msg_clear(&m);
        return ein_error_prefix(err, "device %d (pid %ld) sent a malformed message", d, (long)w->pid);
    }
    w->last_seen = ein_now_s();
    w->spoke = 1;
    switch (m.type) {
    case EIN_MSG_HEARTBEAT: rc = on_heartbeat(r, d, id[0], &m, err); break;
    case EIN_MSG_HELLO: rc = on_hello(r, d, &m, err); break;
    case EIN_MSG_DONE: rc = on_done(r, d, &m, stats, err); break;
    case EIN_MSG_ERROR: rc = on_error(r, d, &m, err); break;
    case EIN_MSG_CANCELLED: rc = on_cancelled(r, d, err); break;
    default: break;
    }
    ein_msg_clear(&m);
    return rc < 0 ? rc : 1;
}

/* "in instruction 17 (KERNEL, operator 'y')", "at startup", ...: where
 * device d was, from the status page if it says, else the last heartbeat. */
void co_run_describe_instr(const run *r, int d, int instr, char *buf, size_t len)
{
    if (r->status && r->status[d].instr >= 0)
        instr = r->status[d].instr;
    if (instr < 0 || instr >= r->progs[d]->ninstrs) {
        snprintf(buf, len, "%s", r->w[d].phase >= W_STARTED ? "between instructions" : "at startup");
        return;
    }
    const ein_instr *ins = &r->progs[d]->instrs[instr];
    snprintf(buf, len, "in instruction %d (%s, operator '%s')", instr,
             ein_instr_kind_name(ins->kind), ins->op);
}

int co_run_send_to(run *r, int d, const ein_msg *m, ein_error *err)
{
    char id[32];
    void *buf = NULL;
    size_t len = 0;
    int rc = ein_msg_encode(m, &buf, &len, err);
    if (rc < 0)
        return rc;
    snprintf(id, sizeof id, "w%d", d);
    /* Several hosts: through the agent of d's host ("n<h>", then d's identity). */
    char aid[16];
    snprintf(aid, sizeof aid, "n%d", r->o->nhosts > 0 ? r->o->host_of[d] : 0);
    if (r->o->nhosts > 0 && zmq_send(r->router, aid, strlen(aid), ZMQ_SNDMORE) < 0)
        rc = ein_fail(err, EIN_EWORKER, "device %d: cannot reach the agent of host %d: %s", d,
                      r->o->host_of[d], zmq_strerror(errno));
    else if (zmq_send(r->router, id, strlen(id), ZMQ_SNDMORE) < 0 ||
             zmq_send(r->router, buf, len, 0) < 0)
        rc = ein_fail(err, EIN_EWORKER, "device %d (pid %ld): cannot send %s: %s", d,
                      (long)r->w[d].pid, ein_msg_type_name(m->type), zmq_strerror(errno));
    free(buf);
    r->w[d].zmq_sent++;
    r->w[d].zmq_acked = 0;
    return rc;
}

int co_run_send_start(run *r, int d, const ein_msg *m, ein_error *err)
{
    worker *w = &r->w[d];
    if (r->ctl && w->zmq_acked && w->fifo_fd != -2) {
        int rc = 0;
        if (w->fifo_fd == -1) {
            char path[sizeof r->dir + 32];
            if (ein_fifo_path(path, sizeof path, r->dir, d) < 0 ||
                (rc = ein_fifo_open_writer(path, &w->fifo_fd, err)) != 0) {
                w->fifo_fd = -2; /* none (EIN_READY=zmq there): ZeroMQ from now on */
                if (rc < 0)
                    return rc;
            }
        }
        /* too long for one record, a full pipe, or a worker gone (ZeroMQ
         * then fails or the reaper tells): ZeroMQ */
        if (w->fifo_fd >= 0) {
            if ((rc = ein_fifo_write_msg(&w->fifo_fd, m, err)) < 0)
                return rc;
            if (rc == 0) {
                w->start_seq = 0;
                return 0;
            }
        }
    }
    int rc = co_run_send_to(r, d, m, err);
    w->start_seq = w->zmq_sent;
    return rc;
}

int co_run_handle_fifo(run *r, co_worker_stats *stats, ein_error *err)
{
    const void *p;
    size_t n;
    ein_msg m;
    int got = r->ctl ? ein_fifo_next(r->ctl, &p, &n, err) : 0;
    if (got <= 0)
        return got < 0 ? ein_error_prefix(err, "the coordinator's FIFO") : 0;
    if (ein_msg_decode(p, n, &m, err) < 0)
        return ein_error_prefix(err, "a malformed message through the coordinator's FIFO");
    int d = m.device, rc;
    if (m.type != EIN_MSG_DONE || d < 0 || d >= r->ndev)
        rc = ein_fail(err, EIN_EPROTO, "a %s message of device %d through the coordinator's FIFO "
                      "(only DONE of devices 0..%d come through it)", ein_msg_type_name(m.type), d,
                      r->ndev - 1);
    else {
        r->w[d].last_seen = ein_now_s();
        r->w[d].spoke = 1;
        rc = on_done(r, d, &m, stats, err);
    }
    ein_msg_clear(&m);
    return rc < 0 ? rc : 1;
}
