/* worker/wk_main.c — a worker's life around the instruction loop: the
 * program, the sockets, START, the iterations, DONE and teardown
 * (wk_worker_main; the loop itself: wk_exec.c). */
#include "worker/wk_exec.h"

#include <assert.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "common/base/ein_clock.h"
#include "common/io/ein_json.h"
#include "common/base/ein_knob.h"
#include "common/io/ein_npy.h"
#include "common/io/ein_raw.h"
#include "common/io/ein_rand.h"
#include "common/process/ein_status.h"
#include "common/base/ein_vec.h"
#include "common/io/ein_wire.h"
#include "worker/wk_beat.h"
#include "worker/wk_stretch.h"
#include "worker/wk_exec_int.h"
#include "worker/wk_staged.h"
#include "worker/wk_xport.h"

/* Before an iteration after the first: run again the LOADs whose input
 * START named, and wait for them, so that no stretch (which never waits
 * for a LOAD: wk_stretch.h) reads the old values. */
static int reload(wk *w, ein_error *err)
{
    int any = 0, rc;
    for (int i = 0; i < w->prog->ninstrs; i++) {
        if (!w->reload[i])
            continue;
        w->reload[i] = 0;
        if (w->iter == 0)
            continue; /* the first iteration runs every LOAD anyway */
        w->current = i;
        if (w->status) {
            w->status->iteration = w->iter;
            w->status->instr = i;
        }
        atomic_store(&w->pulse.instr, i);
        double t0 = ein_now_s();
        if ((rc = wk_exec_run_instr_body(w, &w->prog->instrs[i], err)) < 0)
            return rc;
        wk_exec_trace_event(w, "copy", "LOAD", w->prog->instrs[i].op, t0, ein_now_s());
        any = 1;
    }
    w->current = -1;
    if (w->status)
        w->status->instr = -1;
    atomic_store(&w->pulse.instr, -1);
    if (!any)
        return 0;
    int prev = wk_pulse_set(&w->pulse, WK_PULSE_BUSY);
    rc = w->be->ord.sync(w->be, err);
    wk_pulse_set(&w->pulse, prev);
    return rc;
}

/* Wait for a PROGRAM (first message after our announcement). */
static int receive_program(wk *w, ein_error *err)
{
    for (;;) {
        zmq_pollitem_t it = {.socket = w->dealer, .events = ZMQ_POLLIN};
        if (zmq_poll(&it, 1, (long)(w->cfg->heartbeat_s * 1000)) < 0 && errno != EINTR)
            return ein_fail(err, EIN_EIO, "zmq_poll: %s", zmq_strerror(errno));
        ein_msg m;
        int got = wk_msg_recv(w->dealer, &m, "the coordinator", err);
        if (got < 0)
            return got;
        if (!got) {
            int rc = wk_exec_beat(w, err);
            if (rc < 0)
                return rc;
            continue;
        }
        if (m.type == EIN_MSG_SHUTDOWN) {
            ein_msg_clear(&m);
            w->shutdown = 1;
            return ein_fail(err, EIN_EWORKER, "stopped by the coordinator");
        }
        if (m.type != EIN_MSG_PROGRAM) {
            int rc = ein_fail(err, EIN_EPROTO, "expected a program, got %s",
                              ein_msg_type_name(m.type));
            ein_msg_clear(&m);
            return rc;
        }
        w->prog = m.program;
        m.program = NULL;
        if (w->prog->device != w->cfg->device || w->prog->ndevices != w->cfg->ndevices)
            return ein_fail(err, EIN_EPROTO, "program for device %d of %d sent to device %d of %d",
                            w->prog->device, w->prog->ndevices, w->cfg->device,
                            w->cfg->ndevices);
        return 0;
    }
}

static int setup_sockets(wk *w, ein_error *err)
{
    int linger = 1000;
    int64_t maxsize = EIN_MSG_MAX_BYTES;
    char id[32];
    if (!(w->zctx = zmq_ctx_new()))
        return ein_fail(err, EIN_EIO, "zmq_ctx_new: %s", zmq_strerror(errno));
    zmq_ctx_set(w->zctx, ZMQ_BLOCKY, 0);
    if (!(w->dealer = zmq_socket(w->zctx, ZMQ_DEALER)))
        return ein_fail(err, EIN_EIO, "zmq_socket: %s", zmq_strerror(errno));
    snprintf(id, sizeof id, "w%d", w->cfg->device);
    zmq_setsockopt(w->dealer, ZMQ_ROUTING_ID, id, strlen(id));
    /* Bounded linger: the last ERROR or DONE must reach the coordinator, but
     * a dead coordinator must not keep us forever. */
    zmq_setsockopt(w->dealer, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(w->dealer, ZMQ_MAXMSGSIZE, &maxsize, sizeof maxsize);
    if (zmq_connect(w->dealer, w->cfg->coordinator) < 0)
        return ein_fail(err, EIN_EIO, "connect to the coordinator at %s: %s", w->cfg->coordinator,
                        zmq_strerror(errno));
    int rc = wk_ready_open(w, err);
    if (rc < 0)
        return rc;
    w->peer_cancelled = calloc((size_t)w->cfg->ndevices, 1);
    if (!w->peer_cancelled)
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    return 0;
}

/* Test hook (wk_config.poison): before each iteration after the first,
 * fill every buffer that no LOAD fills with 0xff bytes (NaN in every float
 * dtype). Each iteration computes the same values, so an instruction that
 * read a buffer before this iteration wrote it would otherwise go unseen. */
static int poison(wk *w, ein_error *err)
{
    const ein_program *p = w->prog;
    char *loaded = calloc((size_t)p->nbuffers + 1, 1);
    uint64_t most = 0;
    void *stage = NULL;
    int rc = 0;
    if (!loaded)
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    for (int i = 0; i < p->ninstrs; i++)
        if (p->instrs[i].kind == EIN_I_LOAD && p->instrs[i].dst >= 0)
            loaded[p->instrs[i].dst] = 1;
    for (int b = 0; b < p->nbuffers; b++)
        if (!loaded[b] && p->buffers[b].bytes > most)
            most = p->buffers[b].bytes;
    if (!w->be->mem.host_visible && most > 0) {
        if (!(stage = malloc(most)))
            rc = ein_fail(err, EIN_ENOMEM, "out of memory");
        else
            memset(stage, 0xff, most);
    }
    for (int b = 0; b < p->nbuffers && rc == 0; b++) {
        const ein_pbuffer *pb = &p->buffers[b];
        if (loaded[b] || pb->bytes == 0)
            continue;
        if (w->be->mem.host_visible)
            memset(w->base + pb->offset, 0xff, pb->bytes);
        else
            rc = w->be->mem.upload(w->be, w->base + pb->offset, stage, pb->bytes, err);
    }
    free(stage);
    free(loaded);
    return rc;
}

/* Stretches of fewer instructions are not captured. One instruction is
 * one to a few kernel launches; replaying it as a graph replaces those
 * with one cudaGraphLaunch, which costs the host about as much as a
 * kernel launch or two (a few microseconds either way on current drivers,
 * by NVIDIA's published figures, not measured here), so a one-instruction
 * graph saves nothing worth its capture, instantiation and device memory,
 * while from two instructions on every replay saves at least one launch.
 * EIN_GRAPH_MIN=N (N >= 1) overrides it, to measure on a GPU. */
#define WK_GRAPH_MIN 2

/* Find the stretches once the program is known (see wk_stretch.h). */
static int setup_graphs(wk *w, ein_error *err)
{
    int n = w->prog->ninstrs;
    w->graph_min = WK_GRAPH_MIN;
    const char *env = ein_knob_get(EIN_KNOB_GRAPH_MIN);
    if (env && *env) {
        char *end;
        long v = strtol(env, &end, 10);
        if (*end || v < 1 || v > 1000000)
            return ein_fail(err, EIN_EINVAL, "EIN_GRAPH_MIN=%s: expected an integer >= 1", env);
        w->graph_min = (int)v;
    }
    if (!w->cfg->graphs || n == 0)
        return 0;
    if (!w->be->dev.graph_begin) {
        wk_log(w, 1, "the %s backend has no graphs: every instruction runs on its own",
             w->be->name);
        return 0;
    }
    w->head = malloc(sizeof *w->head * (size_t)n);
    w->next = malloc(sizeof *w->next * (size_t)n);
    w->graph = calloc((size_t)n, sizeof *w->graph);
    w->graph_off = calloc((size_t)n, 1);
    if (!w->head || !w->next || !w->graph || !w->graph_off)
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    int count = wk_stretch_find(w->prog, w->head, w->next, err);
    if (count < 0)
        return count;
    wk_log(w, 1, "%d local stretches, captured as graphs in iteration 2 and replayed after "
         "(those of fewer than %d instructions run one by one)", count, w->graph_min);
    return 0;
}

static void teardown(wk *w)
{
    wk_beat_stop(w->beater); /* before the context goes */
    w->beater = NULL;
    wk_stage_drop(w); /* before the backend goes */
    if (w->graph)
        for (int i = 0; i < w->prog->ninstrs; i++)
            if (w->graph[i])
                w->be->dev.graph_free(w->be, w->graph[i]);
    free(w->graph);
    free(w->graph_off);
    free(w->head);
    free(w->next);

    if (w->trace)
        fclose(w->trace);
    wk_xport_close(w->xp);
    wk_staged_free(w->xstage); /* after the transport: its sends held the buffers */
    if (w->rdy)
        w->rdy->close(w);
    if (w->coord_fd >= 0)
        close(w->coord_fd);
    if (w->dealer)
        zmq_close(w->dealer);
    if (w->zctx)
        zmq_ctx_term(w->zctx);
    free(w->peer_cancelled);
    free(w->blk);
    free(w->ready);
    free(w->notify_first);
    free(w->notify_sent);
    free(w->done);
    free(w->reload);
    ein_program_free(w->prog);
}

/* Tell the backend which bytes of its segment peers may copy: the buffers
 * this device NOTIFYs (wk_backend.h, peer_spans). */
static int peer_spans(wk *w, ein_error *err)
{
    const ein_program *p = w->prog;
    wk_backend *be = w->be;
    int n = 0;
    if (!be->mem.peer_spans || w->cfg->ndevices < 2)
        return 0;
    for (int i = 0; i < p->ninstrs; i++)
        n += p->instrs[i].kind == EIN_I_NOTIFY;
    wk_span *s = malloc(sizeof *s * (size_t)(n ? n : 1));
    if (!s)
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    n = 0;
    for (int i = 0; i < p->ninstrs; i++)
        if (p->instrs[i].kind == EIN_I_NOTIFY) {
            const ein_pbuffer *b = &p->buffers[p->instrs[i].srcs[0]];
            s[n++] = (wk_span){b->offset, b->bytes};
        }
    int rc = be->mem.peer_spans(be, s, n, err);
    free(s);
    return rc;
}

/* Everything before the first START: the trace, the sockets, the program,
 * the segment, the graphs' stretches; then HELLO. */
static int worker_start(wk *w, ein_error *err)
{
    const wk_config *cfg = w->cfg;
    wk_backend *be = w->be;
    int rc;
    if (cfg->trace_path && !(w->trace = fopen(cfg->trace_path, "w")))
        return ein_fail(err, EIN_EIO, "cannot write the trace %s: %s", cfg->trace_path,
                        strerror(errno));
    w->t_start = ein_now_s();
    if ((rc = setup_sockets(w, err)) < 0)
        return rc;
    if ((rc = wk_exec_beat(w, err)) < 0 || (rc = receive_program(w, err)) < 0)
        return rc;
    char seg[160];
    ein_segment_name(seg, sizeof seg, cfg->run_id, cfg->device);
    void *base;
    if (cfg->fault && !strcmp(cfg->fault, "alloc"))
        return ein_fail(err, EIN_ENOMEM, "cannot allocate %llu bytes of device memory (injected fault)",
                        (unsigned long long)w->prog->segment_bytes);
    /* From here on one step can outlast --worker-timeout: beat from a thread. */
    if ((rc = wk_beat_start(w->zctx, cfg->coordinator, cfg->device, cfg->heartbeat_s,
                            cfg->instr_timeout_s, &w->pulse, &w->beater, err)) < 0)
        return rc;
    if ((rc = peer_spans(w, err)) < 0 || (rc = wk_exec_notify_groups(w, err)) < 0)
        return rc;
    wk_pulse_set(&w->pulse, WK_PULSE_BUSY);
    rc = be->mem.segment_create(be, seg, w->prog->segment_bytes, &base, err);
    wk_pulse_set(&w->pulse, WK_PULSE_MAIN);
    if (rc < 0)
        return rc;
    w->base = base;
    if (!(w->reload = calloc((size_t)w->prog->ninstrs + 1, 1)))
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    if ((rc = setup_graphs(w, err)) < 0)
        return rc;
    ein_msg hello = {.type = EIN_MSG_HELLO, .device = cfg->device, .pid = (int64_t)getpid()};
    ein_bytes addr;
    if (cfg->transport) {
        const void *a;
        size_t alen;
        wk_xport_params xp = {cfg->ndevices, cfg->device, cfg->host_address};
        if ((rc = wk_xport_open(cfg->transport, &xp, &w->xp, err)) < 0)
            return rc;
        w->xp->ops->address(w->xp->x, &a, &alen);
        addr = (ein_bytes){.data = (void *)a, .len = (uint32_t)alen};
        hello.addrs = &addr;
        hello.naddrs = 1;
    }
    if ((rc = wk_coord_send(w, &hello, err)) < 0)
        return rc;
    wk_log(w, 1, "program of %d instructions, %d buffers, %llu bytes; waiting for START",
         w->prog->ninstrs, w->prog->nbuffers, (unsigned long long)w->prog->segment_bytes);
    return 0;
}

/* Serve messages until START: 0 started, 1 a session's SHUTDOWN (done),
 * or a negative code (a SHUTDOWN in a counted run is a failure). */
static int wait_for_start(wk *w, ein_error *err)
{
    const wk_config *cfg = w->cfg;
    int rc, started = 0;
    while (!started) {
        if ((rc = wk_exec_pump(w, (int)(cfg->heartbeat_s * 1000), &started, err)) < 0)
            return rc;
        if (w->shutdown && !started && !cfg->iterations)
            return 1;
        if (w->shutdown)
            return ein_fail(err, EIN_EWORKER, "stopped by the coordinator");
        /* A CANCEL after our DONE: the peers may still need us to say so.
         * (One that came with the START is execute's.) */
        if (w->cancel && !started && (rc = wk_exec_cancel_run(w, err)) < 0)
            return rc;
        if (ein_now_s() - w->last_beat > cfg->heartbeat_s && (rc = wk_exec_beat(w, err)) < 0)
            return rc;
    }
    return 0;
}

/* DONE for the iteration just run: its times (the device's where the
 * backend measures them) and graph counts. */
static int send_done(wk *w, ein_error *err)
{
    const wk_config *cfg = w->cfg;
    wk_backend *be = w->be;
    /* Kernel and copy times: the device's own where the backend
     * measures them (CUDA events), else the host's. */
    double dk = 0, dc = 0;
    ein_error terr = {0};
    int dev_timed = be->dev.device_times && be->dev.device_times(be, &dk, &dc, &terr) == 0;
    if (be->dev.device_times && !dev_timed)
        wk_log(w, 1, "no device times this iteration (host times sent): %s", terr.msg);
    ein_msg done = {.type = EIN_MSG_DONE, .device = cfg->device,
                    .t_total = ein_now_s() - w->t_start, .t_kernel = w->t_kernel,
                    .t_copy = w->t_copy, .t_wait = w->t_wait,
                    .graphs_captured = w->ncaptured, .graphs_launched = w->nlaunched,
                    .graphs_failed = w->nfailed, .graphs_short = w->nskipped};
    snprintf(done.graph_error, sizeof done.graph_error, "%s", w->graph_error);
    if (dev_timed) {
        done.t_kernel = dk;
        done.t_copy = dc;
        done.t_device = 1;
    }
    int rc = wk_coord_done(w, &done, err);
    wk_log(w, 1, "iteration %d done in %.6f s (graphs: %d captured, %d launches so far, "
         "%d too short; DONE through %s)", w->iter, done.t_total, w->ncaptured, w->nlaunched,
         w->nskipped, w->done_fifo ? "the FIFO" : "ZeroMQ");
    return rc;
}

/* One iteration after its START: poison, reload, execute, sync, DONE.
 * Returns 0, 1 if it was cancelled (cancel_run), or a negative code. */
static int run_iteration(wk *w, ein_error *err)
{
    const wk_config *cfg = w->cfg;
    wk_backend *be = w->be;
    int rc;
    if (cfg->poison && w->iter > 0) {
        wk_pulse_set(&w->pulse, WK_PULSE_BUSY);
        rc = poison(w, err);
        wk_pulse_set(&w->pulse, WK_PULSE_MAIN);
        if (rc < 0)
            return rc;
    }
    wk_log(w, 1, "iteration %d started (START through %s)", w->iter,
           w->start_fifo ? "the FIFO" : "ZeroMQ");
    w->t_start = ein_now_s();
    w->t_kernel = w->t_copy = w->t_wait = 0;
    if ((rc = reload(w, err)) < 0)
        return rc;
    if ((rc = wk_exec_execute(w, err)) < 0)
        return rc;
    if (rc == 1)
        return wk_exec_cancel_run(w, err);
    wk_pulse_set(&w->pulse, WK_PULSE_BUSY);
    rc = be->ord.sync(be, err);
    /* Our blocks to other hosts must be there before DONE (wk_xport.h). */
    if (rc == 0 && w->xp)
        rc = w->xp->ops->flush(w->xp->x, err);
    wk_pulse_set(&w->pulse, WK_PULSE_MAIN);
    if (rc < 0)
        return rc;
    /* LOADs run in the first iteration, STOREs in the last: do not hold
     * (pinned) host memory through the ones between. */
    wk_stage_drop(w);
    /* Every READY of this iteration has been used; the next ones come
     * only after the next START, so the set can be emptied now. */
    w->nready = 0;
    if ((rc = send_done(w, err)) < 0)
        return rc;
    char what[640];
    if (be->dev.describe && (w->iter == 0 || w->iter + 1 == cfg->iterations) &&
        be->dev.describe(be, what, sizeof what) == 0)
        wk_log(w, 1, "%s", what);
    return 0;
}

/* Peers may still copy from our segment: keep it, serving, until SHUTDOWN. */
static int linger_until_shutdown(wk *w, ein_error *err)
{
    int rc;
    while (!w->shutdown) {
        if ((rc = wk_exec_pump(w, (int)(w->cfg->heartbeat_s * 1000), NULL, err)) < 0)
            return rc;
        if (ein_now_s() - w->last_beat > w->cfg->heartbeat_s && (rc = wk_exec_beat(w, err)) < 0)
            return rc;
    }
    return 0;
}

/* Say why we failed: on the status page, and to the coordinator in ERROR
 * unless it already said SHUTDOWN. */
static void report_failure(wk *w, int rc, const ein_error *err)
{
    /* The status page says why, even after SHUTDOWN (a malformed peer message
     * read in the same pump as SHUTDOWN fails us then): the coordinator
     * reads it when it reaps a non-zero exit. */
    if (w->status)
        snprintf(w->status->error, sizeof w->status->error, "%.*s",
                 (int)sizeof w->status->error - 1, err ? err->msg : ein_strerror(rc));
    if (w->dealer && !w->shutdown) {
        const ein_instr *ins = w->prog && w->current >= 0 ? &w->prog->instrs[w->current] : NULL;
        ein_msg m = {.type = EIN_MSG_ERROR, .device = w->cfg->device, .instr = w->current,
                     .code = err ? err->code : rc};
        if (ins)
            snprintf(m.op, sizeof m.op, "%s", ins->op);
        snprintf(m.text, sizeof m.text, "%.*s", (int)sizeof m.text - 1,
                 err ? err->msg : ein_strerror(rc));
        wk_coord_send(w, &m, NULL);
    }
}

int wk_worker_main(const wk_config *cfg, wk_backend *be, ein_error *err)
{
    wk w = {.cfg = cfg, .be = be, .current = -1, .status = cfg->status, .coord_fd = -1};
    int rc;
    wk_pulse_init(&w.pulse);
    if ((rc = worker_start(&w, err)) < 0)
        goto fail;
    /* iterations 0: a session's worker, run until SHUTDOWN */
    for (w.iter = 0; !cfg->iterations || w.iter < cfg->iterations; w.iter++) {
        if ((rc = wait_for_start(&w, err)) < 0)
            goto fail;
        if (rc == 1)
            break;
        if ((rc = run_iteration(&w, err)) < 0)
            goto fail;
        /* A cancelled first iteration may not have run every LOAD: the
         * next one is a first iteration again. */
        if (rc == 1 && w.iter == 0)
            w.iter = -1;
    }
    if ((rc = linger_until_shutdown(&w, err)) < 0)
        goto fail;
    teardown(&w);
    return 0;
fail:
    report_failure(&w, rc, err);
    teardown(&w);
    return rc;
}
