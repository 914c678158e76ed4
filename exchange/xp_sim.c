/* exchange/xp_sim.c — the flow-level simulator (see xp_sim.h). */
#include "exchange/xp_sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/io/ein_json.h"
#include "common/base/ein_vec.h"

/* A flow crosses at most 6 resources: hbm(from), the route (at most 4),
 * hbm(to). A latency wait (kind FLOW_WAIT) crosses none: its `rem` is
 * seconds, drained at rate 1. */
#define FLOW_RES_MAX 6
enum { FLOW_WAIT = 2 };

typedef struct flow {
    int act, kind, from, to, span;
    double bytes, rem, rate;
    int res[FLOW_RES_MAX], nres;
} flow;

/* What a site holds: distinct aggregates, each with the parts of the atom
 * held, as sorted disjoint intervals [lo, hi) (adjacent ones merged) in
 * units of 1/L (L: the program's chunk units; [0, 1) when nothing is
 * chunked). */
typedef struct held_set {
    const xp_word *set;
    int fw, lw;          /* its span (xp_set_span) */
    int64_t *iv;         /* 2 * n: lo, hi, lo, hi, ... */
    int n, cap;
} held_set;

/* A part newly held at a site since its last scan: only waiting actions
 * whose set contains it and whose chunk range meets it can have become
 * enabled. */
typedef struct held_new {
    const xp_word *set;
    int fw, lw;
    int64_t lo, hi;
} held_new;

typedef struct site_held {
    held_set *e;
    int n, cap;
    held_new *nw;
    int nnew, capnew;
} site_held;

enum { WAITING, AGG, XFER, DONE };

typedef struct sim {
    const xp_program *p;
    const xp_topology *t;
    ein_error *err;
    double now;
    site_held *held;
    char *dirty;
    int *status, *hop, *outstanding;
    flow *fl;
    int nfl, capfl;
    xp_word **single;        /* IN singletons, in one block: */
    xp_word *single_words;
    char *was;               /* scan scratch */
    held_new *scr;           /* scan scratch: a site's new parts */
    int capscr;
    const xp_word **cand;
    int ncand;
    int *pick;
    double *cap;             /* per resource scratch */
    int *cnt;
    int *used, nused;
    int *start, *fill;       /* per resource: its flows in inc[start .. fill) */
    int64_t *arange;         /* per action: the part it moves, lo, hi (act_range) */
    /* Waiting actions by source site and range: the distinct action
     * ranges are rng[2r], rng[2r+1] (r < nrng, sorted); bucket
     * b = s * nrng + r lists, in program order, the actions of source s
     * and range r not started when last visited: bysrc[srcoff[b] ..
     * srcend[b]). A part newly held at s visits only the buckets whose
     * range it meets. */
    int nrng;
    int64_t *rng;
    int *bysrc, *srcoff, *srcend;
    int *touch;              /* scan scratch: the actions to try, nact */
    int *meet;               /* scan scratch: the new parts meeting a range */
    int capmeet;
    int *inc, capinc;
    xp_timeline *tl;
    double makespan, sum_end;
    long events;
    int64_t L;               /* chunk units */
    /* The chunks of an all-chunks action form a stream: on every hop,
     * chunk c starts once chunk c-1 has finished that hop. */
    int *prevc, *nextc;      /* the previous / next chunk's action, or -1 */
    int *hopdone;            /* hops finished */
    char *blocked;           /* waiting for the previous chunk's hop */
} sim;

static held_set *held_find(const sim *S, int site, const xp_word *x, int fw, int lw)
{
    site_held *h = &S->held[site];
    for (int i = 0; i < h->n; i++)
        if (h->e[i].set == x ||
            (h->e[i].fw == fw && h->e[i].lw == lw && xp_set_equal_span(h->e[i].set, x, fw, lw)))
            return &h->e[i];
    return NULL;
}

/* Is [lo, hi) inside the merged intervals of e? */
static int held_covers(const held_set *e, int64_t lo, int64_t hi)
{
    /* the last interval starting at or before lo (sorted, disjoint) */
    int a = 0, b = e->n;
    while (a < b) {
        int m = (a + b) / 2;
        if (e->iv[2 * m] <= lo)
            a = m + 1;
        else
            b = m;
    }
    return a > 0 && lo < e->iv[2 * (a - 1) + 1] && hi <= e->iv[2 * (a - 1) + 1];
}

/* Do the pieces of x held at the site cover [lo, hi)? */
static int held_has(const sim *S, int site, const xp_word *x, int64_t lo, int64_t hi)
{
    int fw, lw;
    xp_set_span(S->p, x, &fw, &lw);
    const held_set *e = held_find(S, site, x, fw, lw);
    return e && held_covers(e, lo, hi);
}

static int held_add(sim *S, int site, const xp_word *x, int64_t lo, int64_t hi)
{
    site_held *h = &S->held[site];
    int fw, lw;
    xp_set_span(S->p, x, &fw, &lw);
    held_set *e = held_find(S, site, x, fw, lw);
    if (e && held_covers(e, lo, hi))
        return 0;
    if (!e) {
        if (ein_vec_reserve(&h->e, &h->cap, (int64_t)h->n + 1, sizeof *h->e) < 0)
            return ein_fail(S->err, EIN_ENOMEM, "out of memory");
        e = &h->e[h->n++];
        memset(e, 0, sizeof *e);
        e->set = x;
        e->fw = fw;
        e->lw = lw;
    }
    /* iv holds [lo, hi) pairs: the capacity counts pairs */
    if (ein_vec_reserve(&e->iv, &e->cap, (int64_t)e->n + 1, 2 * sizeof *e->iv) < 0)
        return ein_fail(S->err, EIN_ENOMEM, "out of memory");
    /* Insert in order, then merge whatever now touches or overlaps. */
    int k = 0;
    while (k < e->n && e->iv[2 * k] < lo)
        k++;
    memmove(&e->iv[2 * k + 2], &e->iv[2 * k], sizeof(int64_t) * 2 * (size_t)(e->n - k));
    e->iv[2 * k] = lo;
    e->iv[2 * k + 1] = hi;
    e->n++;
    int w = 0;
    for (int r = 1; r < e->n; r++) {
        if (e->iv[2 * r] <= e->iv[2 * w + 1]) {
            if (e->iv[2 * r + 1] > e->iv[2 * w + 1])
                e->iv[2 * w + 1] = e->iv[2 * r + 1];
        } else {
            w++;
            e->iv[2 * w] = e->iv[2 * r];
            e->iv[2 * w + 1] = e->iv[2 * r + 1];
        }
    }
    e->n = w + 1;
    if (ein_vec_reserve(&h->nw, &h->capnew, (int64_t)h->nnew + 1, sizeof *h->nw) < 0)
        return ein_fail(S->err, EIN_ENOMEM, "out of memory");
    h->nw[h->nnew++] = (held_new){.set = x, .fw = fw, .lw = lw, .lo = lo, .hi = hi};
    S->dirty[site] = 1;
    return 0;
}

/* The part of the atom action a moves, in units of 1/L. */
static void act_range(const sim *S, int a, int64_t *lo, int64_t *hi)
{
    if (S->arange) {
        *lo = S->arange[2 * a];
        *hi = S->arange[2 * a + 1];
        return;
    }
    const xp_action *ac = &S->p->act[a];
    int64_t k = ac->nchunks > 0 ? ac->nchunks : 1;
    *lo = S->L / k * ac->chunk;
    *hi = *lo + S->L / k;
}

static double act_bytes(const sim *S, int a)
{
    const xp_action *ac = &S->p->act[a];
    return xp_set_bytes(S->p, ac->set) / (ac->nchunks > 0 ? ac->nchunks : 1);
}

static int span_add(sim *S, const xp_span *sp)
{
    xp_timeline *tl = S->tl;
    if (!tl)
        return -1;
    if (ein_vec_reserve(&tl->span, &tl->cap, (int64_t)tl->nspan + 1, sizeof *tl->span) < 0)
        return -1;
    tl->span[tl->nspan] = *sp;
    return tl->nspan++;
}

/* res[0..nres-1] are what the flow crosses; the span records the first
 * nspan of them (the route without the HBM ends). */
static int flow_add(sim *S, int act, int kind, int from, int to, double bytes, int pieces,
                    const int *res, int nres, int nspan)
{
    if (ein_vec_reserve(&S->fl, &S->capfl, (int64_t)S->nfl + 1, sizeof *S->fl) < 0)
        return ein_fail(S->err, EIN_ENOMEM, "out of memory");
    flow *f = &S->fl[S->nfl++];
    memset(f, 0, sizeof *f);
    f->act = act;
    f->kind = kind;
    f->from = from;
    f->to = to;
    f->bytes = f->rem = bytes;
    f->nres = nres;
    if (nres > 0) /* a latency wait crosses nothing (res may be NULL) */
        memcpy(f->res, res, sizeof(int) * (size_t)nres);
    if (kind == FLOW_WAIT) {
        f->span = -1;
        return 0;
    }
    xp_span sp = {.action = act, .kind = kind, .from = from, .to = to, .pieces = pieces,
                  .bytes = bytes, .start = S->now, .end = S->now, .nres = nspan};
    if (nspan > 0)
        memcpy(sp.res, res, sizeof(int) * (size_t)nspan);
    f->span = span_add(S, &sp);
    return 0;
}

static void act_done(sim *S, int a)
{
    S->status[a] = DONE;
    if (S->tl)
        S->tl->act_end[a] = S->now;
    if (S->now > S->makespan)
        S->makespan = S->now;
    S->sum_end += S->now;
}

/* A hop first waits the topology's latency (alpha: launch, notification,
 * synchronisation), then its flows start (start_flows). */
static int start_flows(sim *S, int a);

static int start_hop(sim *S, int a)
{
    S->status[a] = XFER;
    if (S->prevc && S->prevc[a] >= 0 && S->hopdone[S->prevc[a]] <= S->hop[a]) {
        S->blocked[a] = 1;
        return 0;
    }
    /* Alpha by level: a hop with a destination on another host waits the
     * latency between hosts. */
    const xp_action *ac = &S->p->act[a];
    int h = S->hop[a], from = h == 0 ? ac->src : ac->relay[h - 1];
    const int *to = h < ac->nrelay ? &ac->relay[h] : ac->dst;
    int nto = h < ac->nrelay ? 1 : ac->ndst;
    double alpha = S->t->latency;
    for (int d = 0; d < nto && S->t->nodes > 1; d++) {
        double l = xp_topo_hop_latency(S->t, from, to[d]);
        if (l > alpha)
            alpha = l;
    }
    if (alpha > 0) {
        S->outstanding[a] = 1;
        return flow_add(S, a, FLOW_WAIT, -1, -1, alpha, 0, NULL, 0, 0);
    }
    return start_flows(S, a);
}

static int start_flows(sim *S, int a)
{
    const xp_action *ac = &S->p->act[a];
    int h = S->hop[a];
    int from = h == 0 ? ac->src : ac->relay[h - 1];
    const int *to = h < ac->nrelay ? &ac->relay[h] : ac->dst;
    int nto = h < ac->nrelay ? 1 : ac->ndst;
    double bytes = act_bytes(S, a);
    S->status[a] = XFER;
    S->outstanding[a] = nto;
    for (int d = 0; d < nto; d++) {
        int res[FLOW_RES_MAX];
        int nres = xp_topo_route(S->t, from, to[d], res, S->err);
        if (nres < 0)
            return nres;
        /* A copy reads the source's HBM and writes the destination's. */
        res[nres] = from;
        res[nres + 1] = to[d];
        int rc = flow_add(S, a, XP_SPAN_XFER, from, to[d], bytes, 0, res, nres + 2, nres);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int agg_done(sim *S, int a)
{
    const xp_action *ac = &S->p->act[a];
    int64_t lo, hi;
    act_range(S, a, &lo, &hi);
    int rc = held_add(S, ac->src, ac->set, lo, hi);
    if (rc < 0)
        return rc;
    if (ac->ndst == 0) {
        act_done(S, a);
        return 0;
    }
    S->hop[a] = 0;
    return start_hop(S, a);
}

static int by_size_desc(const void *x, const void *y, void *ctx)
{
    const sim *S = ctx;
    int a = xp_set_count(S->p, *(const xp_word *const *)x);
    int b = xp_set_count(S->p, *(const xp_word *const *)y);
    return b - a;
}

/* Insertion sort (candidates are few), largest aggregates first: the cover
 * search then prefers few pieces. */
static void sort_cand(sim *S, int n)
{
    for (int i = 1; i < n; i++) {
        const xp_word *x = S->cand[i];
        int j = i;
        while (j > 0 && by_size_desc(&S->cand[j - 1], &x, S) > 0) {
            S->cand[j] = S->cand[j - 1];
            j--;
        }
        S->cand[j] = x;
    }
}

static int try_start(sim *S, int a)
{
    const xp_action *ac = &S->p->act[a];
    const site_held *h = &S->held[ac->src];
    if (h->n > S->ncand) {
        free(S->cand);
        S->ncand = 2 * h->n;
        if (!(S->cand = malloc(sizeof *S->cand * (size_t)S->ncand)))
            return ein_fail(S->err, EIN_ENOMEM, "out of memory");
    }
    int nc = 0;
    int64_t lo, hi;
    act_range(S, a, &lo, &hi);
    for (int i = 0; i < h->n; i++)
        if (held_covers(&h->e[i], lo, hi) &&
            xp_set_subset_span(h->e[i].set, ac->set, h->e[i].fw, h->e[i].lw))
            S->cand[nc++] = h->e[i].set;
    if (nc == 0)
        return 0;
    sort_cand(S, nc);
    int m = xp_partition_find(S->p, ac->set, (xp_word *const *)S->cand, nc, S->pick);
    if (m < 0)
        return 0;
    if (S->tl)
        S->tl->act_start[a] = S->now;
    if (m >= 2) {
        double k1 = ac->nchunks > 0 ? ac->nchunks : 1;
        double bytes = xp_set_bytes(S->p, ac->set) / k1;
        for (int k = 0; k < m; k++)
            bytes += xp_set_bytes(S->p, S->cand[S->pick[k]]) / k1;
        int res = ac->src; /* hbm(src) */
        S->status[a] = AGG;
        return flow_add(S, a, XP_SPAN_AGG, ac->src, ac->src, bytes, m, &res, 1, 1);
    }
    return agg_done(S, a) < 0 ? -1 : 1;
}

static int cmp_int(const void *x, const void *y)
{
    int a = *(const int *)x, b = *(const int *)y;
    return (a > b) - (a < b);
}

static int cmp_range(const void *x, const void *y)
{
    const int64_t *a = x, *b = y;
    return a[0] != b[0] ? (a[0] > b[0]) - (a[0] < b[0]) : (a[1] > b[1]) - (a[1] < b[1]);
}

/* Start every waiting action that is enabled now, repeatedly (a start
 * that completes at once may enable more). */
static int scan(sim *S)
{
    const xp_program *p = S->p;
    for (;;) {
        int any = 0;
        for (int s = 0; s < p->ngpus; s++)
            any |= S->dirty[s];
        if (!any)
            return 0;
        char *was = S->was;
        memcpy(was, S->dirty, (size_t)p->ngpus);
        memset(S->dirty, 0, (size_t)p->ngpus);
        for (int s = 0; s < p->ngpus; s++) {
            if (!was[s])
                continue;
            site_held *h = &S->held[s];
            int nn = h->nnew;
            if (ein_vec_reserve(&S->scr, &S->capscr, nn, sizeof *S->scr) < 0 ||
                ein_vec_reserve(&S->meet, &S->capmeet, nn, sizeof *S->meet) < 0)
                return ein_fail(S->err, EIN_ENOMEM, "out of memory");
            memcpy(S->scr, h->nw, sizeof *h->nw * (size_t)nn);
            h->nnew = 0;
            /* The waiting actions of s that a new part may have enabled
             * (its set inside theirs, its range meeting theirs), tried in
             * program order; started ones leave their bucket's list. */
            int nt = 0;
            for (int r = 0; r < S->nrng; r++) {
                int b = s * S->nrng + r, nm = 0;
                if (S->srcend[b] == S->srcoff[b])
                    continue;
                int64_t lo = S->rng[2 * r], hi = S->rng[2 * r + 1];
                for (int k = 0; k < nn; k++)
                    if (S->scr[k].lo < hi && lo < S->scr[k].hi)
                        S->meet[nm++] = k;
                if (!nm)
                    continue;
                int keep = S->srcoff[b];
                for (int j = S->srcoff[b]; j < S->srcend[b]; j++) {
                    int a = S->bysrc[j];
                    if (S->status[a] != WAITING)
                        continue;
                    S->bysrc[keep++] = a;
                    int touched = 0;
                    for (int m = 0; m < nm && !touched; m++) {
                        const held_new *w = &S->scr[S->meet[m]];
                        touched = xp_set_subset_span(w->set, p->act[a].set, w->fw, w->lw);
                    }
                    if (touched)
                        S->touch[nt++] = a;
                }
                S->srcend[b] = keep;
            }
            if (S->nrng > 1)
                qsort(S->touch, (size_t)nt, sizeof(int), cmp_int);
            for (int k = 0; k < nt; k++) {
                int rc = try_start(S, S->touch[k]);
                if (rc < 0)
                    return rc;
            }
        }
    }
}

/* Max-min fair rates by progressive filling. The flows crossing each
 * resource are listed once per call (`inc`, from `start`), so each
 * filling step visits only the bottleneck's flows. */
static int rates(sim *S)
{
    S->nused = 0;
    int ninc = 0;
    for (int i = 0; i < S->nfl; i++) {
        flow *f = &S->fl[i];
        f->rate = f->nres ? -1 : f->kind == FLOW_WAIT ? 1.0 : INFINITY;
        for (int k = 0; k < f->nres; k++) {
            int r = f->res[k];
            if (S->cnt[r] == 0) {
                S->used[S->nused++] = r;
                S->cap[r] = xp_topo_res_bw(S->t, r);
            }
            S->cnt[r]++;
            ninc++;
        }
    }
    if (ein_vec_reserve(&S->inc, &S->capinc, ninc, sizeof *S->inc) < 0)
        return ein_fail(S->err, EIN_ENOMEM, "out of memory");
    int pos = 0;
    for (int u = 0; u < S->nused; u++) {
        int r = S->used[u];
        S->start[r] = pos;
        S->fill[r] = pos;
        pos += S->cnt[r];
    }
    for (int i = 0; i < S->nfl; i++)
        for (int k = 0; k < S->fl[i].nres; k++)
            S->inc[S->fill[S->fl[i].res[k]]++] = i;
    for (;;) {
        int best = -1;
        double share = INFINITY;
        for (int u = 0; u < S->nused; u++) {
            int r = S->used[u];
            if (S->cnt[r] > 0 && S->cap[r] / S->cnt[r] < share) {
                share = S->cap[r] / S->cnt[r];
                best = r;
            }
        }
        if (best < 0)
            break;
        if (share < 0)
            share = 0;
        for (int j = S->start[best]; j < S->fill[best]; j++) {
            flow *f = &S->fl[S->inc[j]];
            if (f->rate >= 0)
                continue;
            f->rate = share;
            for (int k = 0; k < f->nres; k++) {
                S->cap[f->res[k]] -= share;
                S->cnt[f->res[k]]--;
            }
        }
    }
    for (int u = 0; u < S->nused; u++)
        S->cnt[S->used[u]] = 0;
    return 0;
}

static int complete(sim *S, int i)
{
    flow f = S->fl[i];
    S->fl[i] = S->fl[--S->nfl];
    S->events++;
    if (S->tl && f.span >= 0)
        S->tl->span[f.span].end = S->now;
    const xp_action *ac = &S->p->act[f.act];
    if (f.kind == XP_SPAN_AGG)
        return agg_done(S, f.act);
    if (f.kind == FLOW_WAIT)
        return start_flows(S, f.act);
    int64_t lo, hi;
    act_range(S, f.act, &lo, &hi);
    int rc = held_add(S, f.to, ac->set, lo, hi);
    if (rc < 0)
        return rc;
    if (--S->outstanding[f.act] > 0)
        return 0;
    if (S->prevc) {
        int n = S->nextc[f.act];
        S->hopdone[f.act]++;
        if (n >= 0 && S->blocked[n] && S->hopdone[f.act] > S->hop[n]) {
            S->blocked[n] = 0;
            if ((rc = start_hop(S, n)) < 0)
                return rc;
        }
    }
    if (S->hop[f.act] < ac->nrelay) {
        S->hop[f.act]++;
        return start_hop(S, f.act);
    }
    act_done(S, f.act);
    return 0;
}

static void sim_free(sim *S)
{
    if (S->held)
        for (int s = 0; s < S->p->ngpus; s++) {
            for (int i = 0; i < S->held[s].n; i++)
                free(S->held[s].e[i].iv);
            free(S->held[s].e);
            free(S->held[s].nw);
        }
    free(S->held);
    free(S->dirty);
    free(S->status);
    free(S->hop);
    free(S->outstanding);
    free(S->fl);
    free(S->single);
    free(S->single_words);
    free(S->was);
    free(S->scr);
    free(S->cand);
    free(S->pick);
    free(S->cap);
    free(S->cnt);
    free(S->used);
    free(S->start);
    free(S->fill);
    free(S->bysrc);
    free(S->srcoff);
    free(S->srcend);
    free(S->arange);
    free(S->rng);
    free(S->touch);
    free(S->meet);
    free(S->inc);
    free(S->prevc);
    free(S->nextc);
    free(S->hopdone);
    free(S->blocked);
}

void xp_timeline_free(xp_timeline *tl)
{
    if (!tl)
        return;
    free(tl->act_start);
    free(tl->act_end);
    free(tl->span);
    free(tl);
}

int xp_sim_run(const xp_program *p, const xp_topology *t, double *makespan,
               xp_timeline **tl_out, ein_error *err)
{
    return xp_sim_run_ex(p, t, makespan, NULL, tl_out, err);
}

static int sim_core(const xp_program *p, const int *orig, const xp_topology *t,
                    double *makespan, double *mean_end, xp_timeline **tl_out, ein_error *err);

/* A program with all-chunk actions runs expanded; its timeline is mapped
 * back (an action starts with its first chunk and ends with its last). */
int xp_sim_run_ex(const xp_program *p, const xp_topology *t, double *makespan,
                  double *mean_end, xp_timeline **tl_out, ein_error *err)
{
    int all = 0;
    for (int a = 0; a < p->nact && !all; a++)
        all = p->act[a].run > 1;
    if (!all)
        return sim_core(p, NULL, t, makespan, mean_end, tl_out, err);
    xp_program *q = NULL;
    xp_timeline *tq = NULL;
    int *orig = NULL;
    double ms = 0;
    int rc = xp_program_expand_chunks(p, &q, &orig, err);
    if (rc == 0)
        rc = sim_core(q, orig, t, &ms, NULL, &tq, err);
    double *st = NULL, *en = NULL;
    if (rc == 0) {
        st = malloc(sizeof(double) * (size_t)(p->nact + 1));
        en = calloc((size_t)p->nact + 1, sizeof(double));
        if (!st || !en)
            rc = ein_fail(err, EIN_ENOMEM, "out of memory");
    }
    if (rc == 0) {
        for (int a = 0; a < p->nact; a++)
            st[a] = INFINITY;
        for (int a = 0; a < q->nact; a++) {
            int o = orig[a];
            if (tq->act_start[a] < st[o])
                st[o] = tq->act_start[a];
            if (tq->act_end[a] > en[o])
                en[o] = tq->act_end[a];
        }
        double sum = 0;
        for (int a = 0; a < p->nact; a++)
            sum += en[a];
        *makespan = ms;
        if (mean_end)
            *mean_end = p->nact ? sum / p->nact : 0;
        if (tl_out) {
            for (int k = 0; k < tq->nspan; k++)
                tq->span[k].action = orig[tq->span[k].action];
            free(tq->act_start);
            free(tq->act_end);
            tq->act_start = st;
            tq->act_end = en;
            tq->nact = p->nact;
            st = en = NULL;
            *tl_out = tq;
            tq = NULL;
        }
    }
    free(st);
    free(en);
    xp_timeline_free(tq);
    xp_program_free(q);
    free(orig);
    return rc;
}

/* The per-site, per-action and per-resource arrays every run needs. */
static int sim_alloc(sim *S, int nres)
{
    const xp_program *p = S->p;
    S->held = calloc((size_t)p->ngpus, sizeof *S->held);
    S->dirty = calloc((size_t)p->ngpus, 1);
    S->was = calloc((size_t)p->ngpus, 1);
    S->single_words = calloc((size_t)(p->nin + 1) * (size_t)p->nwords, sizeof(xp_word));
    S->status = calloc((size_t)p->nact + 1, sizeof(int));
    S->hop = calloc((size_t)p->nact + 1, sizeof(int));
    S->outstanding = calloc((size_t)p->nact + 1, sizeof(int));
    S->single = calloc((size_t)p->nin + 1, sizeof *S->single);
    S->pick = malloc(sizeof(int) * (size_t)(p->nin + 1));
    S->cap = calloc((size_t)nres, sizeof(double));
    S->cnt = calloc((size_t)nres, sizeof(int));
    S->used = calloc((size_t)nres, sizeof(int));
    S->start = calloc((size_t)nres, sizeof(int));
    S->fill = calloc((size_t)nres, sizeof(int));
    if (!S->held || !S->dirty || !S->status || !S->hop || !S->outstanding || !S->single ||
        !S->pick || !S->cap || !S->cnt || !S->used || !S->was || !S->single_words || !S->start ||
        !S->fill)
        return ein_fail(S->err, EIN_ENOMEM, "out of memory");
    return 0;
}

/* An expanded program (orig: each action's original): consecutive chunks
 * of one original action with destinations form a stream (prevc, nextc). */
static int sim_chain_chunks(sim *S, const int *orig)
{
    const xp_program *p = S->p;
    S->prevc = malloc(sizeof(int) * (size_t)(p->nact + 1));
    S->nextc = malloc(sizeof(int) * (size_t)(p->nact + 1));
    S->hopdone = calloc((size_t)p->nact + 1, sizeof(int));
    S->blocked = calloc((size_t)p->nact + 1, 1);
    if (!S->prevc || !S->nextc || !S->hopdone || !S->blocked)
        return ein_fail(S->err, EIN_ENOMEM, "out of memory");
    for (int a = 0; a < p->nact; a++) {
        int chained = a > 0 && orig[a - 1] == orig[a] && p->act[a].ndst > 0;
        S->prevc[a] = chained ? a - 1 : -1;
        S->nextc[a] = -1;
        if (chained)
            S->nextc[a - 1] = a;
    }
    return 0;
}

/* The timeline the run fills in (S->tl, owned by S until handed out). */
static int sim_timeline_new(sim *S)
{
    S->tl = calloc(1, sizeof *S->tl);
    if (!S->tl || !(S->tl->act_start = calloc((size_t)S->p->nact + 1, sizeof(double))) ||
        !(S->tl->act_end = calloc((size_t)S->p->nact + 1, sizeof(double))))
        return ein_fail(S->err, EIN_ENOMEM, "out of memory");
    S->tl->nact = S->p->nact;
    return 0;
}

/* The distinct action ranges: S->rng sorted, S->nrng of them (needs
 * S->arange). */
static void sim_ranges(sim *S)
{
    const xp_program *p = S->p;
    memcpy(S->rng, S->arange, sizeof(int64_t) * 2 * (size_t)p->nact);
    qsort(S->rng, (size_t)p->nact, 2 * sizeof(int64_t), cmp_range);
    for (int a = 0; a < p->nact; a++)
        if (S->nrng == 0 || cmp_range(&S->rng[2 * a], &S->rng[2 * (S->nrng - 1)]) != 0) {
            S->rng[2 * S->nrng] = S->rng[2 * a];
            S->rng[2 * S->nrng + 1] = S->rng[2 * a + 1];
            S->nrng++;
        }
}

/* Waiting actions by source and range (see the sim struct): each action's
 * range, the distinct ranges, and the buckets bysrc[srcoff .. srcend), in
 * program order within a bucket (the order the scan has always tried them
 * in). */
static int sim_buckets(sim *S)
{
    const xp_program *p = S->p;
    /* act_range reads S->arange once it is set: fill it first. */
    int64_t *arange = malloc(sizeof(int64_t) * 2 * (size_t)(p->nact + 1));
    S->rng = malloc(sizeof(int64_t) * 2 * (size_t)(p->nact + 1));
    S->touch = malloc(sizeof(int) * (size_t)(p->nact + 1));
    S->bysrc = malloc(sizeof(int) * (size_t)(p->nact + 1));
    if (!arange || !S->rng || !S->touch || !S->bysrc) {
        free(arange);
        return ein_fail(S->err, EIN_ENOMEM, "out of memory");
    }
    for (int a = 0; a < p->nact; a++)
        act_range(S, a, &arange[2 * a], &arange[2 * a + 1]);
    S->arange = arange;
    sim_ranges(S);
    size_t nb = (size_t)p->ngpus * (size_t)(S->nrng > 0 ? S->nrng : 1);
    S->srcoff = calloc(nb + 2, sizeof(int));
    S->srcend = calloc(nb + 1, sizeof(int));
    if (!S->srcoff || !S->srcend)
        return ein_fail(S->err, EIN_ENOMEM, "out of memory");
    for (int a = 0; a < p->nact; a++) {
        int lo = 0, hi = S->nrng; /* the action's range: its index in rng */
        while (hi - lo > 1) {
            int m = (lo + hi) / 2;
            if (cmp_range(&S->rng[2 * m], &S->arange[2 * a]) <= 0)
                lo = m;
            else
                hi = m;
        }
        S->touch[a] = p->act[a].src * S->nrng + lo; /* its bucket, for now */
        S->srcoff[S->touch[a] + 2]++;
    }
    for (size_t b = 0; b < nb; b++)
        S->srcoff[b + 2] += S->srcoff[b + 1];
    for (int a = 0; a < p->nact; a++)
        S->bysrc[S->srcoff[S->touch[a] + 1]++] = a;
    for (size_t b = 0; b < nb; b++)
        S->srcend[b] = S->srcoff[b + 1];
    return 0;
}

/* Every IN atom, whole, at its site. */
static int sim_seed_ins(sim *S)
{
    const xp_program *p = S->p;
    int rc;
    for (int i = 0; i < p->nin; i++) {
        S->single[i] = S->single_words + (size_t)i * (size_t)p->nwords;
        xp_set_add(S->single[i], i);
        if ((rc = held_add(S, p->in[i].site, S->single[i], 0, S->L)) < 0)
            return rc;
    }
    return 0;
}

/* Advance to the next flow completion: rates, the step dt, drain every
 * flow and complete those that are done. *xfer_busy grows by dt when a
 * transfer was running. */
static int sim_step(sim *S, double *xfer_busy)
{
    int rc;
    if ((rc = rates(S)) < 0)
        return rc;
    double dt = INFINITY;
    int nx = 0;
    for (int i = 0; i < S->nfl; i++) {
        double d = S->fl[i].rate > 0 ? S->fl[i].rem / S->fl[i].rate : INFINITY;
        if (isinf(S->fl[i].rate))
            d = 0;
        if (d < dt)
            dt = d;
        nx += S->fl[i].kind == XP_SPAN_XFER;
    }
    if (isinf(dt))
        return ein_fail(S->err, EIN_EINVAL, "simulate: a transfer has no bandwidth on %s",
                        S->t->name);
    S->now += dt;
    if (nx)
        *xfer_busy += dt;
    for (int i = 0; i < S->nfl; i++)
        S->fl[i].rem -= isinf(S->fl[i].rate) ? S->fl[i].rem : S->fl[i].rate * dt;
    for (int i = 0; i < S->nfl;) {
        double eps = S->fl[i].kind == FLOW_WAIT ? 1e-15 : 1e-9 * S->fl[i].bytes + 1e-6;
        if (S->fl[i].rem <= eps) {
            if ((rc = complete(S, i)) < 0)
                return rc;
        } else {
            i++;
        }
    }
    return 0;
}

/* After the run: every action done (well-formed), every OUT held (valid). */
static int sim_check_end(const sim *S)
{
    const xp_program *p = S->p;
    for (int a = 0; a < p->nact; a++)
        if (S->status[a] != DONE) {
            char buf[256];
            return ein_fail(S->err, EIN_EINVAL, "not well-formed: action %d (%s) is never enabled",
                            a, xp_action_format(p, a, buf, sizeof buf));
        }
    for (int o = 0; o < p->nout; o++)
        if (!held_has(S, p->out[o].site, p->out[o].set, 0, S->L))
            return ein_fail(S->err, EIN_EINVAL, "not valid: OUT %d is never reached at site %d",
                            o, p->out[o].site);
    return 0;
}

/* Everything before the first scan: checks, arrays, buckets, the INs. */
static int sim_setup(sim *S, const int *orig, int want_tl)
{
    const xp_program *p = S->p;
    int rc;
    if ((rc = sim_alloc(S, xp_topo_nres(S->t))) < 0 ||
        (orig && (rc = sim_chain_chunks(S, orig)) < 0) ||
        (want_tl && (rc = sim_timeline_new(S)) < 0))
        return rc;
    for (int a = 0; a < p->nact; a++)
        if (p->act[a].src < 0)
            return ein_fail(S->err, EIN_EINVAL, "action %d has no site", a);
    if ((rc = sim_buckets(S)) < 0)
        return rc;
    return sim_seed_ins(S);
}

static int sim_core(const xp_program *p, const int *orig, const xp_topology *t,
                    double *makespan, double *mean_end, xp_timeline **tl_out, ein_error *err)
{
    sim S = {0};
    int rc = 0;
    S.p = p;
    S.t = t;
    S.err = err;
    if ((rc = xp_program_chunk_units(p, &S.L, err)) < 0)
        return rc;
    if (p->ngpus > t->ngpus)
        return ein_fail(err, EIN_EINVAL, "the program uses %d sites, %s has %d GPUs", p->ngpus,
                        t->name, t->ngpus);
    if (!xp_program_resolved(p))
        return ein_fail(err, EIN_EINVAL, "simulate: resolve the size-declared partitions first");
    double xfer_busy = 0;
    if ((rc = sim_setup(&S, orig, tl_out != NULL)) < 0)
        goto done;
    for (;;) {
        if ((rc = scan(&S)) < 0)
            goto done;
        if (S.nfl == 0)
            break;
        if ((rc = sim_step(&S, &xfer_busy)) < 0)
            goto done;
    }
    if ((rc = sim_check_end(&S)) < 0)
        goto done;
    *makespan = S.makespan;
    if (mean_end)
        *mean_end = p->nact ? S.sum_end / p->nact : 0;
    if (tl_out) {
        S.tl->makespan = S.makespan;
        S.tl->xfer_busy = xfer_busy;
        S.tl->events = S.events;
        *tl_out = S.tl;
        S.tl = NULL;
    }
done:
    xp_timeline_free(S.tl);
    sim_free(&S);
    return rc;
}

static void route_str(const xp_topology *t, const xp_span *sp, char *buf, int len)
{
    int n = 0;
    buf[0] = 0;
    for (int k = 0; k < sp->nres && n < len; k++) {
        char r[64];
        xp_topo_res_name(t, sp->res[k], r, sizeof r);
        n += snprintf(buf + n, (size_t)(len - n), "%s%s", k ? ", " : "", r);
    }
}

void xp_timeline_print(const xp_program *p, const xp_topology *t, const xp_timeline *tl,
                       FILE *f)
{
    for (int a = 0; a < p->nact; a++) {
        char buf[512];
        fprintf(f, "action %d: %s  [%.3f .. %.3f ms]\n", a,
                xp_action_format(p, a, buf, sizeof buf), tl->act_start[a] * 1e3,
                tl->act_end[a] * 1e3);
        for (int s = 0; s < tl->nspan; s++) {
            const xp_span *sp = &tl->span[s];
            if (sp->action != a)
                continue;
            if (sp->kind == XP_SPAN_AGG) {
                fprintf(f, "  aggregate %d pieces at %d: %.3f .. %.3f ms\n", sp->pieces,
                        sp->from, sp->start * 1e3, sp->end * 1e3);
            } else {
                route_str(t, sp, buf, sizeof buf);
                fprintf(f, "  transfer %d -> %d: %.3f .. %.3f ms via %s\n", sp->from, sp->to,
                        sp->start * 1e3, sp->end * 1e3, buf);
            }
        }
    }
    fprintf(f, "transfers busy: %.3f ms\n", tl->xfer_busy * 1e3);
}

int xp_timeline_write_trace(const xp_program *p, const xp_topology *t,
                            const xp_timeline *tl, FILE *f)
{
    fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
    int first = 1;
    for (int g = 0; g < p->ngpus; g++) {
        fprintf(f, "%s{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": "
                   "{\"name\": \"GPU %d\"}}", first ? "" : ",\n", g, g);
        first = 0;
        fprintf(f, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, "
                   "\"args\": {\"name\": \"aggregate\"}}", g);
        fprintf(f, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 1, "
                   "\"args\": {\"name\": \"send\"}}", g);
    }
    for (int s = 0; s < tl->nspan; s++) {
        const xp_span *sp = &tl->span[s];
        char act[512], name[600], route[256];
        xp_action_format(p, sp->action, act, sizeof act);
        route_str(t, sp, route, sizeof route);
        if (sp->kind == XP_SPAN_AGG)
            snprintf(name, sizeof name, "aggregate %s", act);
        else
            snprintf(name, sizeof name, "%d->%d %s", sp->from, sp->to, act);
        fprintf(f, ",\n{\"name\": ");
        ein_json_str(f, name);
        fprintf(f, ", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": %d, \"tid\": %d, "
                   "\"ts\": %.3f, \"dur\": %.3f, \"args\": {\"action\": %d, \"bytes\": %.0f, "
                   "\"route\": ",
                sp->kind == XP_SPAN_AGG ? "aggregate" : "transfer", sp->from,
                sp->kind == XP_SPAN_AGG ? 0 : 1, sp->start * 1e6, (sp->end - sp->start) * 1e6,
                sp->action, sp->bytes);
        ein_json_str(f, route);
        fprintf(f, "}}");
    }
    fprintf(f, "\n]}\n");
    return ferror(f) ? EIN_EIO : 0;
}
