/* coordinator/predict/co_sim.c — plan simulator (model in co_sim.h). */
#include "coordinator/predict/co_sim.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/ir/ein_einsum.h"
#include "common/io/ein_json.h"
#include "common/ir/ein_kernel_cost.h"
#include "common/base/ein_vec.h"

enum { ST_FREE = 0, ST_RUN, ST_WAIT, ST_DONE };

typedef struct sim_msg {
    double at;
    int from;       /* device */
    int buf;        /* buffer on `from` */
    int notify;     /* global id of the NOTIFY that sent it */
} sim_msg;

typedef struct sim_dev {
    const ein_program *p;
    int state;
    int cur;            /* running instruction (local id) */
    double lat, rem;    /* running: fixed phase left (s); work left (s at full speed, or bytes) */
    double rem0;        /* the work at the start */
    double rate;        /* current work rate */
    int is_copy;
    int res[4], nres;   /* copy route */
    int pos, first, progress;
    unsigned char *done;
    unsigned char *ready; /* [global buffer id of a peer] */
    /* Ready queue (the worker's scan without scanning): need[i] counts
     * what instruction i still waits for (unfinished deps, and for a COPY
     * the peer's READY); rq holds the instructions not yet started whose
     * need is 0, a bitset with a summary level so that the first one from
     * a position is found in a few word operations. */
    int *need;
    uint64_t *rq, *rq2;
    int *rdep_at, *rdep;  /* CSR: the instructions that depend on i */
    int *cw_buf, *cw_ins; /* COPYs and WAITs by the global peer buffer they wait for, sorted */
    int ncw;
    sim_msg *inbox;
    int ninbox, capinbox;
    double last_at;     /* the latest arrival of an oversubscribed READY */
    int pred;           /* global id that let the next instruction start */
    double wait_from;
} sim_dev;

typedef struct sim {
    int ndev;
    sim_dev *d;
    const xp_topology *topo;
    const co_calib *cal;
    int *bufbase;       /* [ndev + 1] global buffer ids */
    co_sim_result *r;
    int *pred;          /* per global instruction */
    double t;
    int oversub;        /* more devices than the calibration's cores */
    int capwaits;
    double *left;       /* [nres]: bandwidth not yet given out (rates) */
    int *users;         /* [nres]: unfrozen copies crossing each resource (0 between calls) */
    int *tres;          /* [4 ndev]: the resources the running copies cross */
    int dirty;          /* an instruction started or finished since the last rates() */
} sim;

/* FLOPs and bytes of an instruction, and its kind of work. */
static co_work instr_work(const ein_program *p, const ein_instr *ins, double *flops,
                          double *bytes)
{
    *flops = 0;
    *bytes = 0;
    const ein_pbuffer *dst = ins->dst >= 0 ? &p->buffers[ins->dst] : NULL;
    for (int s = 0; s < ins->nsrcs; s++)
        *bytes += (double)p->buffers[ins->srcs[s]].bytes;
    if (dst)
        *bytes += (double)dst->bytes;
    if (ins->kind == EIN_I_SLICE || ins->kind == EIN_I_CONCAT)
        *bytes = dst ? 2.0 * (double)dst->bytes : 0; /* reads only what it writes */
    if (ins->kind == EIN_I_COPY) {
        *bytes = dst ? (double)dst->bytes : 0;
        return CO_WORK_COPY;
    }
    if (ins->kind == EIN_I_SLICE || ins->kind == EIN_I_CONCAT)
        return CO_WORK_LAYOUT;
    if (ins->kind != EIN_I_KERNEL)
        return CO_WORK_ELEMENTWISE;
    const ein_kernel *k = &ins->kernel;
    if (k->kind == EIN_KERNEL_UNARY)
        return CO_WORK_UNARY;
    if (k->kind == EIN_KERNEL_SLICE || k->kind == EIN_KERNEL_CONCAT ||
        k->kind == EIN_KERNEL_SPLIT_HEADS || k->kind == EIN_KERNEL_MERGE_HEADS)
        return CO_WORK_LAYOUT;
    if (k->kind == EIN_KERNEL_EMBEDDING && ins->nsrcs == 2 && dst) {
        /* reads only the rows it gathers (and the ids), not the table */
        *bytes = 2.0 * (double)dst->bytes + (double)p->buffers[ins->srcs[1]].bytes;
        return CO_WORK_LAYOUT;
    }
    /* The FLOPs are the registry's (common/ir/ein_kernel_cost.h); only GEMMs
     * and attention are priced by them, the rest by bytes. */
    assert(dst); /* a validated KERNEL has one */
    const ein_box *src[EIN_KERNEL_COST_SRCS];
    for (int j = 0; j < ins->nsrcs && j < EIN_KERNEL_COST_SRCS; j++)
        src[j] = &p->buffers[ins->srcs[j]].box;
    ein_einsum_sub sub;
    if (k->kind == EIN_KERNEL_EINSUM && ins->nsrcs == 2 &&
        ein_einsum_parse_flags(k->subscripts, EIN_EINSUM_SCALARS, &sub, NULL) == 0) {
        *flops = ein_kernel_flops(k, &dst->box, src, ins->nsrcs);
        return CO_WORK_GEMM;
    }
    /* ATTENTION_PARTIAL (a key block, log-sum-exp partials) does the same
     * work per pair; before issue 21 it was priced as elementwise, which
     * the plan search found and exploited (1x128K at P = 8 predicted 2.7x
     * faster with key blocks). */
    if ((k->kind == EIN_KERNEL_ATTENTION || k->kind == EIN_KERNEL_ATTENTION_PARTIAL) &&
        ins->nsrcs == 3 && src[0]->rank == 3 && src[1]->rank == 3) {
        *flops = ein_kernel_flops(k, &dst->box, src, ins->nsrcs);
        return CO_WORK_ATTENTION;
    }
    return CO_WORK_ELEMENTWISE;
}

/* Seconds at full speed of a non-copy instruction's work. */
static double work_time(const sim *s, const ein_program *p, const ein_instr *ins)
{
    double flops, bytes;
    co_work w = instr_work(p, ins, &flops, &bytes);
    double hbm = s->topo->hbm, peak = s->topo->peak > 0 ? s->topo->peak : 1e15;
    if (w == CO_WORK_GEMM || w == CO_WORK_ATTENTION) {
        double tc = flops / (peak * co_calib_eff(s->cal, w, flops)), tb = bytes / hbm;
        if (w == CO_WORK_GEMM && s->cal->gemm_operand_bw > 0) {
            /* A CPU BLAS packs both operands before it multiplies
             * (co_calib.h, gemm-operands): their bytes add to the FLOPs. */
            double ops = 0;
            for (int k = 0; k < ins->nsrcs; k++)
                ops += (double)p->buffers[ins->srcs[k]].bytes;
            return tc + ops / s->cal->gemm_operand_bw;
        }
        return tc > tb ? tc : tb;
    }
    return bytes / (hbm * co_calib_eff(s->cal, w, bytes));
}

static int gid(const sim *s, int d, int i)
{
    return s->r->first[d] + i;
}

static void rq_set(sim_dev *v, int i)
{
    v->rq[i >> 6] |= 1ULL << (i & 63);
    v->rq2[i >> 12] |= 1ULL << ((i >> 6) & 63);
}

static void rq_clear(sim_dev *v, int i)
{
    if (!(v->rq[i >> 6] &= ~(1ULL << (i & 63))))
        v->rq2[i >> 12] &= ~(1ULL << ((i >> 6) & 63));
}

/* The first queued instruction at or after pos, or n. */
static int rq_next(const sim_dev *v, int pos)
{
    int n = v->p->ninstrs;
    if (pos >= n)
        return n;
    int w = pos >> 6;
    uint64_t m = v->rq[w] & (~0ULL << (pos & 63));
    if (m)
        return (w << 6) + __builtin_ctzll(m);
    /* the next non-empty word from the summary */
    int nw = (n + 63) >> 6;
    for (int w2 = w + 1; w2 < nw;) {
        int sw = w2 >> 6;
        uint64_t sm = v->rq2[sw] & (~0ULL << (w2 & 63));
        if (sm) {
            int wi = (sw << 6) + __builtin_ctzll(sm);
            return (wi << 6) + __builtin_ctzll(v->rq[wi]);
        }
        w2 = (sw + 1) << 6;
    }
    return n;
}

/* One thing instruction i waited for is there. */
static void need_dec(sim_dev *v, int i)
{
    if (--v->need[i] == 0)
        rq_set(v, i);
}

/* The peer buffer `gb` is READY on v: the COPYs waiting for it. */
static void ready_set(sim_dev *v, int gb)
{
    if (v->ready[gb])
        return;
    v->ready[gb] = 1;
    int lo = 0, hi = v->ncw;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (v->cw_buf[mid] < gb)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (int k = lo; k < v->ncw && v->cw_buf[k] == gb; k++)
        need_dec(v, v->cw_ins[k]);
}

static void pump(sim *s, sim_dev *v)
{
    int k = 0;
    for (int m = 0; m < v->ninbox; m++) {
        if (v->inbox[m].at <= s->t)
            ready_set(v, s->bufbase[v->inbox[m].from] + v->inbox[m].buf);
        else
            v->inbox[k++] = v->inbox[m];
    }
    v->ninbox = k;
}

static int finish(sim *s, int d, int i, ein_error *err);

/* Device v uses a core now: it runs a kernel, a layout instruction or a
 * copy. A NOTIFY does not: its time beyond the overhead is spent waiting
 * for the message to be taken (and, oversubscribed, for a core). */
static int computing(const sim_dev *v)
{
    return v->state == ST_RUN && v->p->instrs[v->cur].kind != EIN_I_NOTIFY;
}

/* The busy figures (latency-busy, notify-busy) apply when a message must
 * wait for a core: the run has more devices than cores and, now, as many
 * devices compute as there are cores. When fewer compute, a woken device
 * finds a core free and the quiet figures apply (the calibration measures
 * the busy ones with every core taken, a ring of 3 devices per core). */
static int cores_taken(const sim *s)
{
    if (!s->oversub)
        return 0;
    int busy = 0;
    for (int d = 0; d < s->ndev; d++)
        busy += computing(&s->d[d]);
    return busy >= s->cal->cores;
}

/* Start instruction i of device d now. Zero-time instructions finish at once. */
static int start(sim *s, int d, int i, ein_error *err)
{
    sim_dev *v = &s->d[d];
    const ein_instr *ins = &v->p->instrs[i];
    int g = gid(s, d, i);
    s->r->start[g] = s->t;
    s->pred[g] = v->pred;
    v->cur = i;
    v->is_copy = 0;
    v->lat = s->cal->overhead;
    v->rem = 0;
    switch (ins->kind) {
    case EIN_I_LOAD:
    case EIN_I_STORE:
    case EIN_I_WAIT: /* the READY is there: nothing more to wait for */
        return finish(s, d, i, err);
    case EIN_I_NOTIFY:
        v->lat += cores_taken(s) ? s->cal->notify_busy : s->cal->notify;
        break;
    case EIN_I_COPY: {
        int rc = xp_topo_route(s->topo, ins->peer, d, v->res, err);
        if (rc < 0)
            return ein_error_prefix(err, "device %d instruction %d (%s): copy from device %d", d,
                                    i, ins->op, ins->peer);
        v->nres = rc;
        v->is_copy = 1;
        v->rem = (double)v->p->buffers[ins->dst].bytes;
        break;
    }
    default:
        v->rem = work_time(s, v->p, ins);
        break;
    }
    v->rem0 = v->rem;
    v->state = ST_RUN;
    s->dirty = 1;
    return 0;
}

/* Device d is free at s->t: run the worker's scan until something starts,
 * the device waits for a message, or it has nothing left. */
static int schedule(sim *s, int d, ein_error *err)
{
    sim_dev *v = &s->d[d];
    int n = v->p->ninstrs, rc;
    for (;;) {
        /* The worker's scan from pos: the first runnable instruction. */
        for (int i = rq_next(v, v->pos); i < n; i = rq_next(v, v->pos)) {
            v->pos = i + 1;
            v->progress = 1;
            rq_clear(v, i);
            if ((rc = start(s, d, i, err)) < 0)
                return rc;
            if (v->state == ST_RUN)
                return 0;
            /* finished at once: the scan goes on */
        }
        pump(s, v);
        while (v->first < n && v->done[v->first])
            v->first++;
        if (v->first == n) {
            v->state = ST_DONE;
            s->r->dev[d].end = s->t;
            return 0;
        }
        v->pos = v->first;
        if (v->progress) {
            v->progress = 0;
            continue;
        }
        v->state = ST_WAIT;
        v->wait_from = s->t;
        return 0;
    }
}

static int finish(sim *s, int d, int i, ein_error *err)
{
    sim_dev *v = &s->d[d];
    const ein_instr *ins = &v->p->instrs[i];
    int g = gid(s, d, i);
    double dur = s->t - s->r->start[g];
    s->r->end[g] = s->t;
    v->done[i] = 1;
    s->dirty = 1;
    for (int k = v->rdep_at[i]; k < v->rdep_at[i + 1]; k++)
        need_dec(v, v->rdep[k]);
    v->pred = g;
    v->state = ST_FREE;
    if (ins->kind == EIN_I_COPY || ins->kind == EIN_I_NOTIFY)
        s->r->dev[d].comm += dur;
    else if (ins->kind != EIN_I_LOAD && ins->kind != EIN_I_STORE)
        s->r->dev[d].compute += dur;
    if (ins->kind == EIN_I_NOTIFY) {
        sim_dev *u = &s->d[ins->peer];
        if (ein_vec_reserve(&u->inbox, &u->capinbox, (int64_t)u->ninbox + 1, sizeof *u->inbox) < 0)
            return ein_fail(err, EIN_ENOMEM, "out of memory");
        double at = s->t + s->cal->latency;
        if (!xp_topo_same_host(s->topo, d, ins->peer) && s->topo->latency_inter > s->cal->latency)
            at = s->t + s->topo->latency_inter; /* between hosts: the topology's alpha */
        if (cores_taken(s)) {
            /* The receiver takes in one message per wake-up, each a wait
             * for a core: its READYs arrive one after another. */
            at = (u->last_at > s->t ? u->last_at : s->t) + s->cal->latency_busy;
            u->last_at = at;
        }
        u->inbox[u->ninbox++] = (sim_msg){.at = at, .from = d,
                                          .buf = ins->srcs[0], .notify = g};
    }
    return 0;
}

/* Rates of the running instructions at s->t: processor sharing over the
 * cores, then max-min fair bandwidth for the copies (progressive filling
 * over the topology's resources, each copy capped by the calibration's
 * copy rate times its processor share). */
static void rates(sim *s)
{
    /* The rates depend only on which instructions run: unchanged since
     * the last call unless one started or finished. */
    if (!s->dirty)
        return;
    s->dirty = 0;
    int busy = 0;
    for (int d = 0; d < s->ndev; d++)
        busy += computing(&s->d[d]);
    double share = s->cal->cores > 0 && busy > s->cal->cores ? s->cal->cores / busy : 1.0;
    double *left = s->left;
    int *users = s->users, *tres = s->tres, ntres = 0;
    int nflows = 0;
    for (int d = 0; d < s->ndev; d++) {
        sim_dev *v = &s->d[d];
        if (v->state != ST_RUN)
            continue;
        v->rate = v->is_copy ? -1 : share; /* -1: copy not yet frozen */
        nflows += v->is_copy;
    }
    if (nflows > 0) {
        /* The resources the copies cross, in increasing order (the
         * tightest is the first of the lowest fair share, as over all). */
        for (int d = 0; d < s->ndev; d++) {
            sim_dev *v = &s->d[d];
            if (v->state != ST_RUN || !v->is_copy)
                continue;
            for (int k = 0; k < v->nres; k++) {
                int r = v->res[k], j = ntres;
                if (users[r] < 0)
                    continue;
                users[r] = -1; /* listed */
                while (j > 0 && tres[j - 1] > r) {
                    tres[j] = tres[j - 1];
                    j--;
                }
                tres[j] = r;
                ntres++;
            }
        }
        for (int j = 0; j < ntres; j++)
            left[tres[j]] = xp_topo_res_bw(s->topo, tres[j]);
        double cap = s->cal->copy_bw > 0 ? s->cal->copy_bw * share : INFINITY;
        for (;;) {
            /* The tightest resource (or cap) among unfrozen flows. */
            for (int j = 0; j < ntres; j++)
                users[tres[j]] = 0;
            int unfrozen = 0;
            for (int d = 0; d < s->ndev; d++) {
                sim_dev *v = &s->d[d];
                if (v->state == ST_RUN && v->is_copy && v->rate < 0) {
                    unfrozen++;
                    for (int k = 0; k < v->nres; k++)
                        users[v->res[k]]++;
                }
            }
            if (!unfrozen)
                break;
            double fair = cap;
            int tight = -1;
            for (int j = 0; j < ntres; j++) {
                int r = tres[j];
                if (users[r] && left[r] / users[r] < fair) {
                    fair = left[r] / users[r];
                    tight = r;
                }
            }
            for (int d = 0; d < s->ndev; d++) {
                sim_dev *v = &s->d[d];
                if (!(v->state == ST_RUN && v->is_copy && v->rate < 0))
                    continue;
                int hit = tight < 0;
                for (int k = 0; k < v->nres && !hit; k++)
                    hit = v->res[k] == tight;
                if (!hit)
                    continue;
                v->rate = fair;
                for (int k = 0; k < v->nres; k++)
                    left[v->res[k]] -= fair;
            }
        }
        for (int j = 0; j < ntres; j++)
            users[tres[j]] = 0;
        for (int d = 0; d < s->ndev; d++) {
            sim_dev *v = &s->d[d];
            if (v->state == ST_RUN && v->is_copy) {
                double bytes = (double)v->p->buffers[v->p->instrs[v->cur].dst].bytes;
                v->rate *= co_calib_eff(s->cal, CO_WORK_COPY, bytes > 1 ? bytes : 1);
                if (!(v->rate > 0))
                    v->rate = 1e-300;
            }
        }
    }
}

static int add_wait(sim *s, int d, double from, double to)
{
    if (!(to > from))
        return 0;
    co_sim_result *r = s->r;
    /* a wait is three doubles: device, from, to */
    if (ein_vec_reserve(&r->waits, &s->capwaits, (int64_t)r->nwaits + 1, 3 * sizeof *r->waits) < 0)
        return EIN_ENOMEM;
    r->waits[3 * r->nwaits] = d;
    r->waits[3 * r->nwaits + 1] = from;
    r->waits[3 * r->nwaits + 2] = to;
    r->nwaits++;
    return 0;
}

static int loop(sim *s, ein_error *err)
{
    int rc;
    for (int d = 0; d < s->ndev; d++)
        if ((rc = schedule(s, d, err)) < 0)
            return rc;
    for (;;) {
        int live = 0;
        for (int d = 0; d < s->ndev; d++)
            live += s->d[d].state != ST_DONE;
        if (!live)
            return 0;
        rates(s);
        double dt = INFINITY;
        for (int d = 0; d < s->ndev; d++) {
            sim_dev *v = &s->d[d];
            if (v->state == ST_RUN) {
                double x = v->lat > 0 ? v->lat : v->rem / v->rate;
                if (x < dt)
                    dt = x;
            } else if (v->state == ST_WAIT) {
                for (int m = 0; m < v->ninbox; m++)
                    if (v->inbox[m].at - s->t < dt)
                        dt = v->inbox[m].at - s->t;
            }
        }
        if (dt == INFINITY) {
            for (int d = 0; d < s->ndev; d++)
                if (s->d[d].state == ST_WAIT)
                    return ein_fail(err, EIN_EINVAL,
                                    "device %d waits forever at instruction %d (%s): no peer "
                                    "will send the READY it needs",
                                    d, s->d[d].first, s->d[d].p->instrs[s->d[d].first].op);
            return ein_fail(err, EIN_EINVAL, "simulation stalled");
        }
        if (dt < 0)
            dt = 0;
        s->t += dt;
        for (int d = 0; d < s->ndev; d++) {
            sim_dev *v = &s->d[d];
            if (v->state != ST_RUN)
                continue;
            if (v->lat > 0) {
                double step = dt < v->lat ? dt : v->lat;
                v->lat -= step;
                if (v->lat <= 1e-15)
                    v->lat = 0;
                /* a phase ending mid-step never happens: dt is the minimum */
            } else {
                v->rem -= v->rate * dt;
            }
            if (v->lat == 0 && v->rem <= 1e-9 * v->rem0)
                v->rem = 0;
        }
        for (int d = 0; d < s->ndev; d++) {
            sim_dev *v = &s->d[d];
            if (v->state == ST_RUN && v->lat == 0 && v->rem == 0) {
                if ((rc = finish(s, d, v->cur, err)) < 0)
                    return rc;
            } else if (v->state == ST_WAIT) {
                int woke = -1;
                double at = INFINITY;
                for (int m = 0; m < v->ninbox; m++)
                    if (v->inbox[m].at <= s->t && v->inbox[m].at < at) {
                        at = v->inbox[m].at;
                        woke = v->inbox[m].notify;
                    }
                if (woke >= 0) {
                    if (add_wait(s, d, v->wait_from, s->t) < 0)
                        return ein_fail(err, EIN_ENOMEM, "out of memory");
                    v->pred = woke;
                    v->state = ST_FREE;
                    pump(s, v); /* the worker's pump returns with the message */
                }
            }
        }
        for (int d = 0; d < s->ndev; d++)
            if (s->d[d].state == ST_FREE && (rc = schedule(s, d, err)) < 0)
                return rc;
    }
}

/* The largest buffers alive where the most bytes are: a buffer lives from
 * its first to its last user (a loaded one always); views count twice,
 * which only shifts the instruction chosen. Out of memory: none listed. */
static void largest(const ein_program *p, int *out, uint64_t *live)
{
    *live = 0;
    for (int k = 0; k < CO_SIM_LARGEST; k++)
        out[k] = -1;
    int n = p->ninstrs, nb = p->nbuffers, at = -1;
    int *first = malloc(sizeof(int) * ((size_t)nb + 1)), *last = malloc(sizeof(int) * ((size_t)nb + 1));
    double *delta = calloc((size_t)n + 2, sizeof *delta);
    if (!first || !last || !delta)
        goto done;
    for (int b = 0; b < nb; b++)
        first[b] = last[b] = -1;
    for (int i = 0; i < n; i++) {
        const ein_instr *ins = &p->instrs[i];
        for (int s = -1; s < ins->nsrcs; s++) {
            int b = s < 0 ? ins->dst : ins->srcs[s];
            if (b < 0)
                continue;
            if (first[b] < 0)
                first[b] = ins->kind == EIN_I_LOAD ? 0 : i;
            last[b] = ins->kind == EIN_I_LOAD ? n - 1 : i > last[b] ? i : last[b];
        }
    }
    for (int b = 0; b < nb; b++)
        if (first[b] >= 0) {
            delta[first[b]] += (double)p->buffers[b].bytes;
            delta[last[b] + 1] -= (double)p->buffers[b].bytes;
        }
    double cur = 0, most = -1;
    for (int i = 0; i < n; i++) {
        cur += delta[i];
        if (cur > most) {
            most = cur;
            at = i;
        }
    }
    *live = most > 0 ? (uint64_t)(most + 0.5) : 0;
    for (int b = 0; b < nb; b++) {
        if (at >= 0 && !(first[b] <= at && at <= last[b]))
            continue;
        for (int k = 0; k < CO_SIM_LARGEST; k++) {
            if (out[k] < 0 || p->buffers[b].bytes > p->buffers[out[k]].bytes) {
                for (int j = CO_SIM_LARGEST - 1; j > k; j--)
                    out[j] = out[j - 1];
                out[k] = b;
                break;
            }
        }
    }
done:
    free(first);
    free(last);
    free(delta);
}

static int critical_path(sim *s)
{
    co_sim_result *r = s->r;
    int total = r->first[r->ndev], last = -1, n = 0;
    for (int g = 0; g < total; g++)
        if (r->end[g] >= 0 && (last < 0 || r->end[g] > r->end[last]))
            last = g;
    for (int g = last; g >= 0; g = s->pred[g])
        n++;
    r->path = calloc((size_t)(n > 0 ? n : 1), sizeof *r->path);
    if (!r->path)
        return EIN_ENOMEM;
    r->npath = n;
    int k = n;
    for (int g = last; g >= 0; g = s->pred[g]) {
        int d = 0;
        while (r->first[d + 1] <= g)
            d++;
        co_sim_step *st = &r->path[--k];
        st->device = d;
        st->instr = g - r->first[d];
        st->start = r->start[g];
        st->end = r->end[g];
        const ein_instr *ins = &s->d[d].p->instrs[st->instr];
        if (ins->kind == EIN_I_COPY || ins->kind == EIN_I_NOTIFY)
            r->path_comm += st->end - st->start;
        else
            r->path_compute += st->end - st->start;
    }
    r->path_wait = r->makespan - r->path_compute - r->path_comm;
    if (r->path_wait < 0)
        r->path_wait = 0;
    return 0;
}

static int cw_cmp(const void *a, const void *b)
{
    const int *x = a, *y = b;
    return x[0] != y[0] ? (x[0] < y[0] ? -1 : 1) : (x[1] > y[1]) - (x[1] < y[1]);
}

/* v's ready queue: need counts, reverse deps, COPYs by peer buffer, and
 * the instructions runnable at the start. 0 or EIN_ENOMEM. */
static int queue_init(sim *s, sim_dev *v)
{
    const ein_program *p = v->p;
    int n = p->ninstrs, nw = (n + 63) / 64, ndeps = 0, ncopy = 0;
    for (int i = 0; i < n; i++) {
        ndeps += p->instrs[i].ndeps;
        ncopy += p->instrs[i].kind == EIN_I_COPY || p->instrs[i].kind == EIN_I_WAIT;
    }
    int *pairs = NULL;
    if (!(v->need = calloc((size_t)n + 1, sizeof *v->need)) ||
        !(v->rq = calloc((size_t)nw + 1, sizeof *v->rq)) ||
        !(v->rq2 = calloc((size_t)nw / 64 + 2, sizeof *v->rq2)) ||
        !(v->rdep_at = calloc((size_t)n + 2, sizeof *v->rdep_at)) ||
        !(v->rdep = malloc(sizeof *v->rdep * ((size_t)ndeps + 1))) ||
        !(v->cw_buf = malloc(sizeof *v->cw_buf * ((size_t)ncopy + 1))) ||
        !(v->cw_ins = malloc(sizeof *v->cw_ins * ((size_t)ncopy + 1))) ||
        !(pairs = malloc(2 * sizeof *pairs * ((size_t)ncopy + 1))))
        return EIN_ENOMEM;
    for (int i = 0; i < n; i++) {
        const ein_instr *ins = &p->instrs[i];
        for (int k = 0; k < ins->ndeps; k++)
            v->rdep_at[ins->deps[k] + 1]++;
        v->need[i] = ins->ndeps;
        if (ins->kind == EIN_I_COPY || ins->kind == EIN_I_WAIT) {
            pairs[2 * v->ncw] = s->bufbase[ins->peer] + ins->peer_buf;
            pairs[2 * v->ncw + 1] = i;
            v->ncw++;
            v->need[i]++;
        }
    }
    for (int i = 0; i < n; i++)
        v->rdep_at[i + 1] += v->rdep_at[i];
    int *fill = v->rdep_at; /* filled from the back, restoring the offsets */
    for (int i = n - 1; i >= 0; i--) {
        const ein_instr *ins = &p->instrs[i];
        for (int k = ins->ndeps - 1; k >= 0; k--)
            v->rdep[--fill[ins->deps[k] + 1]] = i;
    }
    /* fill[j + 1] now holds rdep_at[j]: shift back */
    for (int i = 0; i < n; i++)
        v->rdep_at[i] = v->rdep_at[i + 1];
    v->rdep_at[n] = ndeps;
    qsort(pairs, (size_t)v->ncw, 2 * sizeof *pairs, cw_cmp);
    for (int k = 0; k < v->ncw; k++) {
        v->cw_buf[k] = pairs[2 * k];
        v->cw_ins[k] = pairs[2 * k + 1];
    }
    free(pairs);
    for (int i = 0; i < n; i++)
        if (v->need[i] == 0)
            rq_set(v, i);
    return 0;
}

/* The simulation's own memory (not the result). */
static void sim_free(sim *s)
{
    for (int d = 0; s->d && d < s->ndev; d++) {
        free(s->d[d].done);
        free(s->d[d].ready);
        free(s->d[d].need);
        free(s->d[d].rq);
        free(s->d[d].rq2);
        free(s->d[d].rdep_at);
        free(s->d[d].rdep);
        free(s->d[d].cw_buf);
        free(s->d[d].cw_ins);
        free(s->d[d].inbox);
    }
    free(s->d);
    free(s->bufbase);
    free(s->pred);
    free(s->left);
    free(s->users);
    free(s->tres);
}

int co_sim_run(ein_program *const *progs, int ndev, const xp_topology *topo,
               const co_calib *cal, co_sim_result **out, ein_error *err)
{
    if (ndev < 1 || !progs)
        return ein_fail(err, EIN_EINVAL, "simulate: no devices");
    if (topo->ngpus < ndev)
        return ein_fail(err, EIN_EINVAL, "simulate: topology %s has %d GPUs but the plan has %d "
                                         "devices", topo->name, topo->ngpus, ndev);
    sim s = {.ndev = ndev, .topo = topo, .cal = cal,
             .oversub = cal->cores > 0 && ndev > cal->cores};
    int rc = EIN_ENOMEM, total = 0, tbuf = 0;
    co_sim_result *r = calloc(1, sizeof *r);
    s.r = r;
    s.d = calloc((size_t)ndev, sizeof *s.d);
    s.bufbase = calloc((size_t)ndev + 1, sizeof *s.bufbase);
    if (!r || !s.d || !s.bufbase || !(r->first = calloc((size_t)ndev + 1, sizeof *r->first)) ||
        !(r->dev = calloc((size_t)ndev, sizeof *r->dev)))
        goto fail;
    r->ndev = ndev;
    for (int d = 0; d < ndev; d++) {
        r->first[d] = total;
        s.bufbase[d] = tbuf;
        total += progs[d]->ninstrs;
        tbuf += progs[d]->nbuffers;
    }
    r->first[ndev] = total;
    s.bufbase[ndev] = tbuf;
    if (!(s.left = malloc(sizeof *s.left * ((size_t)xp_topo_nres(topo) + 1))) ||
        !(s.users = calloc((size_t)xp_topo_nres(topo) + 1, sizeof *s.users)) ||
        !(s.tres = malloc(sizeof *s.tres * (4 * (size_t)ndev + 1))) ||
        !(r->start = malloc(sizeof *r->start * ((size_t)total + 1))) ||
        !(r->end = malloc(sizeof *r->end * ((size_t)total + 1))) ||
        !(s.pred = malloc(sizeof *s.pred * ((size_t)total + 1))))
        goto fail;
    for (int g = 0; g < total; g++) {
        r->start[g] = r->end[g] = -1;
        s.pred[g] = -1;
    }
    for (int d = 0; d < ndev; d++) {
        sim_dev *v = &s.d[d];
        v->p = progs[d];
        v->pred = -1;
        if (!(v->done = calloc((size_t)progs[d]->ninstrs + 1, 1)) ||
            !(v->ready = calloc((size_t)tbuf + 1, 1)))
            goto fail;
        if (queue_init(&s, v) < 0)
            goto fail;
    }
    if ((rc = loop(&s, err)) < 0)
        goto fail_msg;
    for (int d = 0; d < ndev; d++)
        if (r->dev[d].end > r->makespan)
            r->makespan = r->dev[d].end;
    r->time = r->makespan + cal->iteration;
    for (int d = 0; d < ndev; d++) {
        co_sim_device *dv = &r->dev[d];
        dv->idle = r->makespan - dv->compute - dv->comm;
        if (dv->idle < 0)
            dv->idle = 0;
        dv->peak = progs[d]->segment_bytes;
        dv->unplanned = progs[d]->unplanned_bytes ? progs[d]->unplanned_bytes : dv->peak;
        for (int i = 0; i < progs[d]->ninstrs; i++)
            if (progs[d]->instrs[i].kind == EIN_I_LOAD && progs[d]->instrs[i].dst >= 0)
                dv->loaded += progs[d]->buffers[progs[d]->instrs[i].dst].bytes;
        largest(progs[d], dv->largest, &dv->live);
    }
    if (critical_path(&s) < 0)
        goto fail;
    sim_free(&s);
    *out = r;
    return 0;
fail:
    rc = ein_fail(err, EIN_ENOMEM, "simulate: out of memory");
fail_msg:
    sim_free(&s);
    co_sim_result_free(r);
    return rc;
}

void co_sim_result_free(co_sim_result *r)
{
    if (!r)
        return;
    free(r->dev);
    free(r->path);
    free(r->first);
    free(r->start);
    free(r->end);
    free(r->waits);
    free(r);
}

int co_sim_calib_of(const xp_topology *topo, const char *fallback, co_calib *out,
                    ein_error *err)
{
    const char *name = topo->calibration[0] ? topo->calibration : fallback;
    int rc = co_calib_load(name, out, err);
    if (rc < 0)
        return ein_error_prefix(err, "calibration %s of topology %s", name, topo->name);
    return 0;
}
