/* worker/wk_exec.c — the executor and its synchronisation (LOAD and
 * STORE: wk_io.c; messages and the log: wk_msg.c; the channel of READY
 * between the workers of one host: wk_ready.c; what it hears while it
 * waits: wk_pump.c). */
#include "worker/wk_exec.h"

#include <assert.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sched.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "common/base/ein_clock.h"
#include "common/base/ein_invariant.h"
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

/* One complete event (Chrome trace "X"): timestamps in microseconds of
 * CLOCK_MONOTONIC, which every process of the machine shares. */
void wk_exec_trace_event(wk *w, const char *cat, const char *name, const char *op, double t0,
                         double t1)
{
    if (!w->trace)
        return;
    char label[160];
    snprintf(label, sizeof label, "%s %s", name, op);
    fprintf(w->trace, "%s{\"name\": ", w->ntrace++ ? ",\n" : "");
    ein_json_str(w->trace, label); /* operator names are the user's: escape them */
    fprintf(w->trace,
            ", \"cat\": \"%s\", \"ph\": \"X\", \"ts\": %.3f, "
            "\"dur\": %.3f, \"pid\": %d, \"tid\": 0, \"args\": {\"iteration\": %d}}",
            cat, t0 * 1e6, (t1 - t0) * 1e6, w->cfg->device, w->iter);
}

/* The test hook EIN_FAULT=DEV:slow: a slow body. A LOAD or STORE is slow
 * but makes progress (slab by slab); any other body is one long call. */
static void slow_down(wk *w, const ein_instr *ins)
{
    w->slow_pending = 0;
    if (ins->kind == EIN_I_LOAD || ins->kind == EIN_I_STORE) {
        for (int i = 0; i < 40; i++) {
            nanosleep(&(struct timespec){.tv_nsec = 100000000}, NULL);
            wk_pulse_bump(&w->pulse);
        }
    } else {
        nanosleep(&(struct timespec){.tv_sec = 4}, NULL);
    }
}

/* Device memory to and from other hosts: 1 staged through pinned host
 * buffers (w->xstage, made here on first use), 0 handed to the transport
 * directly (host memory, or a transport that reads device memory itself,
 * unless EIN_XPORT_STAGED=1 asks for staging), or a negative code. */
static int staged(wk *w, ein_error *err)
{
    const char *f = ein_knob_get(EIN_KNOB_XPORT_STAGED);
    int force = f && !strcmp(f, "1"); /* a test of the staged path on CPU devices too */
    if ((w->be->mem.host_visible || w->xp->ops->device_memory(w->xp->x)) && !force)
        return 0;
    if (w->xstage)
        return 1;
    wk_staged_ops ops;
    if (!w->be->mem.staged_ops)
        return ein_fail(err, EIN_EUNSUPPORTED, "blocks between hosts in %s memory: transport "
                        "%s cannot reach it and the backend cannot stage it", w->be->name,
                        w->xp->ops->name);
    int rc = w->be->mem.staged_ops(w->be, &ops, err);
    if (rc == 0)
        rc = wk_staged_new(&ops, wk_xport_chunk(), &w->xstage, err);
    return rc < 0 ? rc : 1;
}

/* A COPY from a device of another host: the block came by the transport
 * (wk_xport.h); receive it into the destination buffer. */
static int copy_remote(wk *w, const ein_instr *ins, ein_error *err)
{
    const ein_pbuffer *b = &w->prog->buffers[ins->dst];
    int st = staged(w, err);
    if (st < 0)
        return st;
    if (st) /* in stream order: the copies into device memory follow what came before */
        return wk_xport_recv_staged(w->xp, ins->peer, ins->peer_buf, w->xstage,
                                    w->base + b->offset, b->bytes, err);
    int rc = w->be->ord.sync(w->be, err);
    if (rc < 0)
        return rc;
    return wk_xport_recv(w->xp, ins->peer, ins->peer_buf, w->base + b->offset, b->bytes, err);
}

/* A NOTIFY to a device of another host: send it the block itself. */
static int notify_remote(wk *w, const ein_instr *ins, ein_error *err)
{
    int st = staged(w, err);
    if (st < 0)
        return st;
    kn_block blk = wk_block_of(w, ins->srcs[0]);
    size_t bytes = w->prog->buffers[ins->srcs[0]].bytes;
    if (st) /* in stream order: the copies out follow the kernels that wrote it */
        return wk_xport_send_staged(w->xp, ins->peer, ins->srcs[0], w->xstage, blk.data, bytes,
                                    err);
    int rc = w->be->ord.sync(w->be, err);
    if (rc < 0)
        return rc;
    return wk_xport_send(w->xp, ins->peer, ins->srcs[0], blk.data, bytes, err);
}

static int peer_copy(wk *w, const ein_instr *ins, ein_error *err)
{
    char name[160];
    const void *pbase;
    size_t pbytes;
    const ein_pbuffer *b = &w->prog->buffers[ins->dst];
    if (wk_xport_remote(w->xp, ins->peer))
        return copy_remote(w, ins, err);
    ein_segment_name(name, sizeof name, w->cfg->run_id, ins->peer);
    int rc = w->be->mem.peer_open(w->be, ins->peer, name, &pbase, &pbytes, err);
    if (rc < 0)
        return rc;
    if (ins->peer_offset > pbytes || b->bytes > pbytes - ins->peer_offset)
        return ein_fail(err, EIN_EPROTO,
                        "copy of %llu bytes at offset %llu is outside device %d's memory (%zu bytes)",
                        (unsigned long long)b->bytes, (unsigned long long)ins->peer_offset,
                        ins->peer, pbytes);
    /* The peer's READY came after its signal(): order our copy after it. */
    if (w->be->ord.peer_wait && (rc = w->be->ord.peer_wait(w->be, ins->peer, err)) < 0)
        return rc;
    return w->be->dev.copy(w->be, w->base + b->offset, (const char *)pbase + ins->peer_offset,
                       b->bytes, err);
}

/* WAIT: the peer said its buffer is ready (runnable checked it); order
 * what this device does next behind what the peer finished (on CUDA the
 * peer's recorded event, as a COPY does; on CPU that is already so). */
static int peer_ack(wk *w, const ein_instr *ins, ein_error *err)
{
    if (!w->be->ord.peer_wait)
        return 0;
    char name[160];
    const void *pbase;
    size_t pbytes;
    ein_segment_name(name, sizeof name, w->cfg->run_id, ins->peer);
    int rc = w->be->mem.peer_open(w->be, ins->peer, name, &pbase, &pbytes, err);
    return rc < 0 ? rc : w->be->ord.peer_wait(w->be, ins->peer, err);
}

static int notify(wk *w, const ein_instr *ins, ein_error *err)
{
    int peer = ins->peer;
    if (wk_xport_remote(w->xp, peer))
        return notify_remote(w, ins, err); /* each carries the block: every one goes */
    int first = w->notify_first ? w->notify_first[ins - w->prog->instrs] : -1;
    if (first >= 0 && w->notify_sent[first])
        return 0; /* the peer has this READY already (wk.notify_first) */
    if (first >= 0)
        w->notify_sent[first] = 1;
    /* The peer may copy as soon as it hears: the buffer must be complete,
     * or (signal) the peer's copy ordered after what completes it. */
    int rc = w->be->ord.signal ? w->be->ord.signal(w->be, err) : w->be->ord.sync(w->be, err);
    if (rc < 0)
        return rc;
    /* Where the backend keeps its segment private (CPU), the bytes the peer
     * will copy go where it can read them. */
    const ein_pbuffer *b = &w->prog->buffers[ins->srcs[0]];
    if (w->be->mem.publish && (rc = w->be->mem.publish(w->be, b->offset, b->bytes, err)) < 0)
        return rc;
    ein_msg m = {.type = EIN_MSG_READY, .device = w->cfg->device, .buffer = ins->srcs[0]};
    return wk_ready_send(w, peer, &m, err);
}

static void fault_fire(wk *w, ein_error *err);

int wk_exec_run_instr_body(wk *w, const ein_instr *ins, ein_error *err);
static int run_instr_kind(wk *w, const ein_instr *ins, ein_error *err);

static int run_instr(wk *w, int i, ein_error *err)
{
    const ein_instr *ins = &w->prog->instrs[i];
    if ((ins->kind == EIN_I_LOAD && w->iter > 0) || (ins->kind == EIN_I_STORE && !w->store_now))
        return 0; /* inputs stay loaded (reload() refreshes them); outputs are
                     stored when START asks */
    if (w->status) {
        w->status->iteration = w->iter;
        w->status->instr = i;
    }
    atomic_store(&w->pulse.instr, i);
    if (w->cfg->fault && (w->cfg->fault_instr < 0 || w->cfg->fault_instr == i) && w->iter == 0) {
        fault_fire(w, err);
        if (err && err->code)
            return err->code;
    }
    wk_log(w, 2, "start %d %s %s", i, ein_instr_kind_name(ins->kind), ins->op);
    double t0 = ein_now_s();
    int rc = wk_exec_run_instr_body(w, ins, err);
    double t1 = ein_now_s();
    if (w->status && rc == 0)
        w->status->instr = -1; /* between instructions */
    if (rc == 0)
        atomic_store(&w->pulse.instr, -1);
    wk_log(w, 2, "finish %d %s %s%s", i, ein_instr_kind_name(ins->kind), ins->op,
         rc < 0 ? " (failed)" : "");
    const char *cat = ins->kind == EIN_I_KERNEL || ins->kind == EIN_I_AGG ? "kernel" : "copy";
    wk_exec_trace_event(w, cat, ein_instr_kind_name(ins->kind), ins->op, t0, t1);
    return rc;
}

/* The body of one instruction. LOAD and STORE report their own progress;
 * every other kind counts as busy for the heartbeat thread (wk_beat.h). */
int wk_exec_run_instr_body(wk *w, const ein_instr *ins, ein_error *err)
{
    int slabs = ins->kind == EIN_I_LOAD || ins->kind == EIN_I_STORE;
    int prev = wk_pulse_set(&w->pulse, slabs ? WK_PULSE_SLABS : WK_PULSE_BUSY);
    if (w->slow_pending)
        slow_down(w, ins);
    int rc = run_instr_kind(w, ins, err);
    wk_pulse_set(&w->pulse, prev);
    return rc;
}

static int run_instr_kind(wk *w, const ein_instr *ins, ein_error *err)
{
    double t0 = ein_now_s();
    int rc = 0;
    const ein_pbuffer *d = ins->dst >= 0 ? &w->prog->buffers[ins->dst] : NULL;
    switch (ins->kind) {
    case EIN_I_LOAD:
        rc = wk_io_load(w, ins, err);
        break;
    case EIN_I_STORE:
        rc = wk_io_store(w, ins, err);
        break;
    case EIN_I_KERNEL:
    case EIN_I_AGG: {
        if (ins->nsrcs > 1024)
            return ein_fail(err, EIN_EUNSUPPORTED, "more than 1024 operands");
        if (ein_vec_reserve(&w->blk, &w->cap_blk, ins->nsrcs, sizeof *w->blk) < 0)
            return ein_fail(err, EIN_ENOMEM, "out of memory for %d operands", ins->nsrcs);
        kn_block *blk = w->blk;
        /* quantized weights (issue 36): each backend's kernels take them
         * where they have a kernel and refuse the rest by name */
        for (int i = 0; i < ins->nsrcs; i++)
            blk[i] = wk_block_of(w, ins->srcs[i]);
        kn_block out = wk_block_of(w, ins->dst);
        rc = ins->kind == EIN_I_KERNEL
                 ? w->be->dev.kernel(w->be, &ins->kernel, blk, ins->nsrcs, &out, err)
                 : w->be->dev.agg(w->be, ins->agg, blk, ins->nsrcs, &out, err);
        w->t_kernel += ein_now_s() - t0;
        return rc;
    }
    case EIN_I_SLICE:
    case EIN_I_CONCAT:
        for (int i = 0; i < ins->nsrcs && rc == 0; i++) {
            kn_block s = wk_block_of(w, ins->srcs[i]);
            const ein_box *region = ins->kind == EIN_I_SLICE ? &d->box : &s.box;
            /* In storage units: a block dtype moves whole blocks (the
             * program check keeps every box of one on block boundaries). */
            ein_box ud, us, ur;
            size_t unit = ein_dtype_unit_box(d->dtype, &d->box, &ud);
            if (!unit || !ein_dtype_unit_box(d->dtype, &s.box, &us) ||
                !ein_dtype_unit_box(d->dtype, region, &ur))
                return ein_fail(err, EIN_EPROTO, "%s: a %s box off its block boundaries",
                                ein_instr_kind_name(ins->kind), ein_dtype_name(d->dtype));
            rc = w->be->dev.copy_box(w->be, w->base + d->offset, &ud, s.data, &us, &ur, unit, err);
        }
        break;
    case EIN_I_COPY:
        rc = peer_copy(w, ins, err);
        break;
    case EIN_I_NOTIFY:
        rc = notify(w, ins, err);
        break;
    case EIN_I_WAIT:
        rc = peer_ack(w, ins, err);
        break;
    default:
        rc = ein_fail(err, EIN_EPROTO, "unknown instruction kind %d", (int)ins->kind);
    }
    w->t_copy += ein_now_s() - t0;
    return rc;
}

/* Injected faults, for the supervision tests. */
static void fault_fire(wk *w, ein_error *err)
{
    const char *f = w->cfg->fault;
    wk_log(w, 1, "injecting fault '%s'", f);
    if (!strcmp(f, "crash")) {
        raise(SIGSEGV);
    } else if (!strcmp(f, "exit")) {
        _exit(7);
    } else if (!strcmp(f, "nocapture")) {
        /* capture() fails every stretch: each runs one instruction at a time */
    } else if (!strcmp(f, "slow")) {
        w->slow_pending = !w->slow_fired; /* once, even when INSTR is "the first" */
        w->slow_fired = 1;
    } else if (!strcmp(f, "hang")) {
        for (;;)
            pause(); /* no heartbeat from here on */
    } else if (!strcmp(f, "garbage")) {
        static const unsigned char junk[] = {0xdf, 0xff, 0xff, 0xff, 0xff, 0x01};
        /* On the coordinator's socket, so this step's DONE must follow it
         * there (wk_coord_done), never overtake it through the FIFO. */
        w->coord_zmq = 1;
        zmq_send(w->dealer, junk, sizeof junk, 0);
    } else if (!strcmp(f, "peer-garbage")) {
        static const unsigned char junk[] = {0x82, 0xa4, 't', 'y', 'p', 'e', 0xa5, 'r', 'e', 'a',
                                             'd', 'y', 0xa1, 'v', 0xcc};
        /* Once, on the socket that carries this device's READY messages:
         * each peer reads the garbage before any later READY from here, so
         * a peer that waits on this device is sure to see it. */
        if (w->garbage_sent)
            return;
        w->garbage_sent = 1;
        for (int d = 0; d < w->cfg->ndevices; d++) {
            if (d == w->cfg->device)
                continue;
            if (w->rdy->send(w, d, junk, sizeof junk, err) < 0)
                return;
        }
    } else {
        ein_fail(err, EIN_EINVAL, "unknown injected fault '%s'", f);
    }
}

static int stretch_last(const wk *w, int i, int *count)
{
    int last = i;
    *count = 1;
    while (w->next[last] >= 0) {
        last = w->next[last];
        ++*count;
    }
    return last;
}

/* Capture the stretch of head i as a graph; a stretch that cannot be
 * captured is remembered and from then on runs one instruction at a time
 * (which also reports any real error in it the usual way). */
static void capture(wk *w, int i)
{
    ein_error cerr = {0}, ignored = {0};
    void *g = NULL;
    int count, j = stretch_last(w, i, &count);
    if (count < w->graph_min) {
        /* Too short to gain (WK_GRAPH_MIN): not a failure, not counted as one. */
        w->graph_off[i] = 1;
        w->nskipped++;
        wk_log(w, 2, "the %d instructions %d..%d run without a graph: fewer than %d", count, i, j,
             w->graph_min);
        return;
    }
    int rc = w->be->dev.graph_begin(w->be, &cerr), begun = rc == 0;
    if (begun && w->cfg->fault && !strcmp(w->cfg->fault, "nocapture"))
        rc = ein_fail(&cerr, EIN_EDEVICE, "injected capture failure (EIN_FAULT nocapture)");
    if (begun) {
        for (int k = i; k >= 0 && rc == 0; k = w->next[k]) {
            w->current = k;
            if (w->status) {
                w->status->iteration = w->iter;
                w->status->instr = k;
            }
            atomic_store(&w->pulse.instr, k);
            rc = wk_exec_run_instr_body(w, &w->prog->instrs[k], &cerr);
        }
        if (w->status && rc == 0)
            w->status->instr = -1;
        atomic_store(&w->pulse.instr, -1);
        int end = w->be->dev.graph_end(w->be, &g, rc == 0 ? &cerr : &ignored);
        if (rc == 0)
            rc = end;
    }
    w->current = i;
    if (rc < 0) {
        if (g)
            w->be->dev.graph_free(w->be, g);
        w->graph_off[i] = 1;
        if (!w->nfailed++)
            snprintf(w->graph_error, sizeof w->graph_error, "instructions %d..%d: %.*s", i, j,
                     (int)sizeof w->graph_error - 48, cerr.msg);
        wk_log(w, 1, "the %d instructions %d..%d run without a graph: %s", count, i, j, cerr.msg);
        return;
    }
    w->graph[i] = g;
    w->ncaptured++;
    wk_log(w, 1, "captured %d instructions %d..%d (%s .. %s) as a graph", count, i, j,
         w->prog->instrs[i].op, w->prog->instrs[j].op);
}

static int run_stretch(wk *w, int i, ein_error *err)
{
    int count, j = stretch_last(w, i, &count);
    if (!w->graph[i] && !w->graph_off[i])
        capture(w, i);
    if (w->graph_off[i]) {
        for (int k = i; k >= 0; k = w->next[k]) {
            w->current = k;
            int rc = run_instr(w, k, err);
            if (rc < 0)
                return rc;
        }
        return 0;
    }
    if (w->status) {
        w->status->iteration = w->iter;
        w->status->instr = i;
    }
    atomic_store(&w->pulse.instr, i);
    wk_log(w, 2, "start graph %d..%d", i, j);
    double t0 = ein_now_s();
    wk_pulse_set(&w->pulse, WK_PULSE_BUSY);
    int rc = w->be->dev.graph_launch(w->be, w->graph[i], err);
    wk_pulse_set(&w->pulse, WK_PULSE_MAIN);
    double t1 = ein_now_s();
    if (rc == 0)
        atomic_store(&w->pulse.instr, -1);
    w->t_kernel += t1 - t0;
    w->nlaunched++;
    if (w->status && rc == 0)
        w->status->instr = -1;
    wk_log(w, 2, "finish graph %d..%d%s", i, j, rc < 0 ? " (failed)" : "");
    char label[sizeof w->prog->instrs[i].op + 32];
    snprintf(label, sizeof label, "%s +%d", w->prog->instrs[i].op, count - 1);
    wk_exec_trace_event(w, "kernel", "GRAPH", label, t0, t1);
    return rc < 0 ? ein_error_prefix(err, "graph of instructions %d..%d", i, j) : 0;
}

static int runnable(const wk *w, int i)
{
    const ein_instr *ins = &w->prog->instrs[i];
    for (int k = 0; k < ins->ndeps; k++)
        if (!w->done[ins->deps[k]])
            return 0;
    if (ins->kind == EIN_I_COPY && wk_xport_remote(w->xp, ins->peer))
        return w->xp->ops->arrived(w->xp->x, ins->peer, ins->peer_buf);
    if (ins->kind == EIN_I_COPY || ins->kind == EIN_I_WAIT)
        return wk_exec_ready_has(w, ((uint64_t)ins->peer << 32) | (uint32_t)ins->peer_buf);
    return 1;
}

static int notify_cmp(const void *a, const void *b)
{
    const int64_t *x = a, *y = b;
    for (int k = 0; k < 3; k++)
        if (x[k] != y[k])
            return x[k] < y[k] ? -1 : 1;
    return 0;
}

/* wk.notify_first: per NOTIFY, the first NOTIFY of its (peer, buffer). */
int wk_exec_notify_groups(wk *w, ein_error *err)
{
    const ein_program *p = w->prog;
    int n = p->ninstrs, m = 0;
    free(w->notify_first);
    free(w->notify_sent);
    w->notify_first = malloc(sizeof *w->notify_first * (size_t)(n ? n : 1));
    w->notify_sent = calloc((size_t)(n ? n : 1), 1);
    int64_t *key = malloc(sizeof *key * 3 * (size_t)(n ? n : 1));
    if (!w->notify_first || !w->notify_sent || !key) {
        free(key);
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    }
    for (int i = 0; i < n; i++) {
        w->notify_first[i] = -1;
        if (p->instrs[i].kind == EIN_I_NOTIFY) {
            key[3 * m] = p->instrs[i].peer;
            key[3 * m + 1] = p->instrs[i].srcs[0];
            key[3 * m + 2] = i;
            m++;
        }
    }
    qsort(key, (size_t)m, 3 * sizeof *key, notify_cmp);
    for (int k = 0; k < m; k++) { /* sorted by (peer, buffer, instruction) */
        const int64_t *a = &key[3 * k], *prev = k > 0 ? &key[3 * (k - 1)] : NULL;
        int same = prev && a[0] == prev[0] && a[1] == prev[1];
        w->notify_first[a[2]] = same ? w->notify_first[prev[2]] : (int)a[2];
    }
    free(key);
    return 0;
}

/* Run the DAG: any runnable instruction in array order; wait for peers when
 * nothing can run. Returns 0, 1 when a CANCEL came (the run is abandoned
 * between two instructions: cancel_run), or a negative code. */
int wk_exec_execute(wk *w, ein_error *err)
{
    int n = w->prog->ninstrs, left = n, first = 0, rc;
    if (!w->done && !(w->done = calloc((size_t)n + 1, 1)))
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    memset(w->done, 0, (size_t)n + 1);
    if (w->notify_sent)
        memset(w->notify_sent, 0, (size_t)n);
    /* An entry point's run: the instructions of other entries count as done. */
    for (int i = 0; w->entry_now > 0 && i < n; i++) {
        uint32_t en = w->prog->instrs[i].entries;
        if (en && !(en & 1u << (w->entry_now - 1))) {
            w->done[i] = 1;
            left--;
        }
    }
    while (left > 0) {
        int progress = 0;
        if (w->cancel)
            return 1;
        for (int i = first; i < n; i++) {
            /* The first iteration runs one instruction at a time (it also
             * warms up what capture must not do, such as cuBLAS's first
             * calls); later ones run each stretch as a unit. */
            int grouped = w->head && w->iter > 0;
            if (w->done[i] || (grouped && w->head[i] >= 0 && w->head[i] != i) || !runnable(w, i))
                continue;
            w->current = i;
            if (grouped && w->head[i] == i) {
                if ((rc = run_stretch(w, i, err)) < 0)
                    return rc;
                for (int k = i; k >= 0; k = w->next[k], left--)
                    w->done[k] = 1;
            } else {
                if ((rc = run_instr(w, i, err)) < 0)
                    return rc;
                w->done[i] = 1;
                left--;
            }
            progress = 1;
            if (ein_now_s() - w->last_beat > w->cfg->heartbeat_s && (rc = wk_exec_beat(w, err)) < 0)
                return rc;
            /* A long stretch of runnable instructions still hears a CANCEL
             * (or SHUTDOWN) within about 50 ms of an instruction's end. */
            if (ein_now_s() - w->last_pump > 0.05) {
                if ((rc = wk_exec_pump(w, 0, NULL, err)) < 0)
                    return rc;
                if (w->cancel || w->shutdown)
                    break;
            }
        }
        while (first < n && w->done[first])
            first++;
        w->current = -1;
        double t0 = ein_now_s();
        if ((rc = wk_exec_pump(w, progress ? 0 : 50, NULL, err)) < 0)
            return rc;
        if (!progress) {
            double t1 = ein_now_s();
            w->t_wait += t1 - t0;
            wk_exec_trace_event(w, "wait", "wait", "peers", t0, t1);
        }
        if (w->shutdown)
            return ein_fail(err, EIN_EWORKER, "stopped by the coordinator");
        if (w->cancel)
            return 1;
        if (ein_now_s() - w->last_beat > w->cfg->heartbeat_s && (rc = wk_exec_beat(w, err)) < 0)
            return rc;
    }
    return 0;
}

/* After a CANCEL: stop the run where it is, and say CANCELLED once nothing
 * of it can be in flight any more. The device finishes what it started
 * (sync), then says CANCELLED to every peer (on the socket its READYs
 * travel: whatever it sent before comes first) and waits for every peer's
 * CANCELLED; the READYs received until then belong to the abandoned run
 * and are dropped. Then CANCELLED to the coordinator, which starts no new
 * run before every worker has said it, so no peer copies from a buffer
 * that the next run rewrites, and no stale READY is taken for a new one.
 * Returns 1 (cancelled) or a negative code. */
int wk_exec_cancel_run(wk *w, ein_error *err)
{
    int n = w->cfg->ndevices, me = w->cfg->device, rc;
    wk_pulse_set(&w->pulse, WK_PULSE_BUSY);
    rc = w->be->ord.sync(w->be, err);
    wk_pulse_set(&w->pulse, WK_PULSE_MAIN);
    if (rc < 0)
        return rc;
    wk_stage_drop(w);
    w->current = -1;
    if (w->status)
        w->status->instr = -1;
    atomic_store(&w->pulse.instr, -1);
    ein_msg cm = {.type = EIN_MSG_CANCELLED, .device = me};
    for (int p = 0; p < n; p++) {
        if (p == me)
            continue;
        if (wk_xport_remote(w->xp, p)) {
            if ((rc = w->xp->ops->cancel(w->xp->x, p, err)) < 0)
                return rc;
            continue;
        }
        if ((rc = wk_ready_send(w, p, &cm, err)) < 0)
            return rc;
    }
    while (w->npeer_cancelled < n - 1) {
        /* Blocks of the abandoned run still coming from other hosts are dropped. */
        if (w->xp && (rc = w->xp->ops->drain(w->xp->x, err)) < 0)
            return rc;
        if ((rc = wk_exec_pump(w, (int)(w->cfg->heartbeat_s * 1000), NULL, err)) < 0)
            return rc;
        if (w->shutdown)
            return ein_fail(err, EIN_EWORKER, "stopped by the coordinator");
        if (ein_now_s() - w->last_beat > w->cfg->heartbeat_s && (rc = wk_exec_beat(w, err)) < 0)
            return rc;
    }
    if (w->xp && ((rc = w->xp->ops->drain(w->xp->x, err)) < 0 ||
                  (rc = w->xp->ops->flush(w->xp->x, err)) < 0))
        return rc;
    w->nready = 0;
    memset(w->peer_cancelled, 0, (size_t)n);
    w->npeer_cancelled = 0;
    w->cancel = 0;
    wk_log(w, 1, "iteration %d cancelled", w->iter);
    return (rc = wk_coord_send(w, &cm, err)) < 0 ? rc : 1;
}
