/* coordinator/compile/co_search.c — plan search by predicted time (see co_search.h). */
#include "coordinator/compile/co_search.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/ein_hash.h"
#include "common/io/ein_rand.h"
#include "common/base/ein_vec.h"
#include "coordinator/compile/co_lower.h"
#include "coordinator/compile/co_physical.h"
#include "coordinator/compile/co_pipeline.h"
#include "coordinator/predict/co_sim.h"
#include "planner/pl_spec.h"
#include "planner/pl_strategy.h"

#define CO_SEARCH_STALE 300 /* moves in a row that simulate nothing new: the search ends */

/* Per operator: its requests (interval counts per index, as
 * pl_spec_requests enumerates them) and, lazily, each request's tiling
 * hashes (output, and per input). */
typedef struct opreq {
    int nreq, nidx, nin;
    int *counts;            /* nreq x nidx */
    int rep_row;            /* the request that is the replicated spec (pl_spec.h; its
                               counts all 1), the last one; -1: none */
    uint64_t *out_h;        /* nreq, NULL until needed */
    uint64_t *in_h;         /* nreq x nin */
} opreq;

typedef struct srch {
    const pl_graph *g;
    int p, n;
    const xp_topology *topo;
    const co_calib *cal;
    co_xcache *xc;
    uint64_t seed, rng;
    pl_partials partials;   /* the plans' (base->partials) */
    char *live;             /* live operators (planned in the seeds) */
    int nops;
    opreq *req;             /* by node */
    int *cls;               /* by node: the node whose choice it takes */
    int **seeds;            /* choice vectors of the seeds */
    double *seed_t;
    char (*seed_name)[48];
    int nseeds;
    co_search_report *rep;
    const co_search_opts *so;
    ein_error *err;
    /* Candidates already simulated: choice vectors and their times, in
     * an open-addressing table keyed by the vector's hash (a move that
     * returns to a plan seen before costs nothing). */
    int **memo_ch;
    double *memo_t;
    uint64_t *memo_h;
    int nmemo, capmemo;     /* capmemo: a power of two, or 0 */
    /* The walk (seeds, then moves): choice vectors of n + 1 entries. */
    int nfixed;             /* seeds before the random ones (paid from the budget) */
    long start;             /* rep->work when the budget started counting */
    int *cur, *nx, *best;   /* the current plan, a proposal, the fastest seen */
    double cur_t, best_t;
} srch;

static uint64_t tiling_hash(const pl_tiling *t)
{
    uint64_t h = ein_hash_mix(0x77u, (uint64_t)t->n);
    for (int i = 0; i < t->n; i++)
        for (int a = 0; a < t->boxes[i].rank; a++)
            h = ein_hash_mix(ein_hash_mix(h, (uint64_t)t->boxes[i].lo[a]),
                             (uint64_t)t->boxes[i].hi[a]);
    return h;
}

/* Request i of node v's spec (the replicated one for its rep_row). */
static int req_make(srch *S, int v, int i, pl_spec *out)
{
    const opreq *r = &S->req[v];
    if (i == r->rep_row)
        return pl_spec_make_replicated(S->g, v, S->p, out, S->err);
    return pl_spec_make(S->g, v, r->counts + (size_t)i * (size_t)r->nidx, out, S->err);
}

/* Function specifications of request i of node v (p for the replicated
 * one: it runs on every device). */
static int64_t req_parts(const srch *S, int v, int i)
{
    const opreq *r = &S->req[v];
    int64_t parts = 1;
    if (i == r->rep_row)
        return S->p;
    for (int k = 0; k < r->nidx; k++)
        parts *= r->counts[(size_t)i * (size_t)r->nidx + k];
    return parts;
}

/* The request of node v that gives `spec`, or -1. */
static int req_find(const srch *S, int v, const pl_spec *spec)
{
    const opreq *r = &S->req[v];
    if (spec->replicated)
        return r->rep_row;
    for (int i = 0; i < r->nreq; i++)
        if (i != r->rep_row && memcmp(r->counts + (size_t)i * (size_t)r->nidx, spec->counts,
                                      sizeof(int) * (size_t)r->nidx) == 0)
            return i;
    return -1;
}

/* A plan from a choice vector: spec, tiling and sub-costs of every live
 * operator. */
static int plan_build(srch *S, const int *ch, pl_plan **out)
{
    pl_plan *plan = calloc(1, sizeof *plan);
    int rc = 0;
    if (!plan || !(plan->nodes = calloc((size_t)S->n + 1, sizeof *plan->nodes))) {
        free(plan);
        return ein_fail(S->err, EIN_ENOMEM, "out of memory in the plan search");
    }
    plan->p = S->p;
    plan->nnodes = S->n;
    plan->selector = PL_SELECT_DP;
    plan->partials = S->partials;
    for (int v = 0; v < S->n && rc == 0; v++) {
        if (!S->live[v])
            continue;
        pl_choice *c = &plan->nodes[v];
        if ((rc = req_make(S, v, ch[v], &c->spec)) < 0)
            break;
        if (pl_tiling_of_outputs(&c->spec, &c->out_tiling) < 0) {
            rc = ein_fail(S->err, EIN_ENOMEM, "out of memory in the plan search");
            break;
        }
        c->planned = 1;
        const pl_node *nd = pl_graph_node(S->g, v);
        const pl_tiling *tin[PL_MAX_INPUTS] = {NULL};
        for (int k = 0; k < nd->ninputs; k++)
            if (plan->nodes[nd->inputs[k]].planned)
                tin[k] = &plan->nodes[nd->inputs[k]].out_tiling;
        pl_cost_partials(S->g, v, &c->spec, tin, S->partials, &c->repart, &c->join, &c->agg);
        plan->total += c->repart + c->join + c->agg;
    }
    if (rc < 0) {
        pl_plan_free(plan);
        return rc;
    }
    *out = plan;
    return 0;
}

/* The choice vector of a plan (each live operator's request index). */
static int plan_choices(srch *S, const pl_plan *plan, int *ch)
{
    for (int v = 0; v < S->n; v++) {
        ch[v] = 0;
        if (!S->live[v])
            continue;
        int found = req_find(S, v, &plan->nodes[v].spec);
        if (found < 0)
            return ein_fail(S->err, EIN_EINVAL, "internal error: the spec of '%s' is not one "
                            "of its requests", pl_graph_node(S->g, v)->name);
        ch[v] = found;
    }
    return 0;
}

static uint64_t choice_hash(const srch *S, const int *ch)
{
    uint64_t h = 0x21u;
    for (int v = 0; v < S->n; v++)
        if (S->live[v])
            h = ein_hash_mix(h, (uint64_t)ch[v]);
    return h ? h : 1;
}

/* The slot of ch in the memo table: where it is, or the empty one where
 * it goes. */
static int memo_slot(const srch *S, const int *ch, uint64_t h)
{
    int mask = S->capmemo - 1, i = (int)(h & (uint64_t)mask);
    while (S->memo_h[i] &&
           (S->memo_h[i] != h || memcmp(S->memo_ch[i], ch, sizeof(int) * (size_t)S->n)))
        i = (i + 1) & mask;
    return i;
}

/* ch was simulated before: *time set, 1; else 0. */
static int memo_find(const srch *S, const int *ch, double *time)
{
    if (!S->capmemo)
        return 0;
    int i = memo_slot(S, ch, choice_hash(S, ch));
    if (!S->memo_h[i])
        return 0;
    *time = S->memo_t[i];
    return 1;
}

static int memo_add(srch *S, const int *ch, double time)
{
    if (2 * (S->nmemo + 1) > S->capmemo) {
        int cap = S->capmemo ? 2 * S->capmemo : 256;
        int **och = S->memo_ch, ocap = S->capmemo;
        double *ot = S->memo_t;
        uint64_t *oh = S->memo_h;
        S->memo_ch = calloc((size_t)cap, sizeof *S->memo_ch);
        S->memo_t = calloc((size_t)cap, sizeof *S->memo_t);
        S->memo_h = calloc((size_t)cap, sizeof *S->memo_h);
        if (!S->memo_ch || !S->memo_t || !S->memo_h) {
            free(S->memo_ch);
            free(S->memo_t);
            free(S->memo_h);
            S->memo_ch = och;
            S->memo_t = ot;
            S->memo_h = oh;
            return ein_fail(S->err, EIN_ENOMEM, "out of memory in the plan search");
        }
        S->capmemo = cap;
        for (int i = 0; i < ocap; i++)
            if (oh[i]) {
                int j = memo_slot(S, och[i], oh[i]);
                S->memo_h[j] = oh[i];
                S->memo_ch[j] = och[i];
                S->memo_t[j] = ot[i];
            }
        free(och);
        free(ot);
        free(oh);
    }
    uint64_t h = choice_hash(S, ch);
    int i = memo_slot(S, ch, h);
    if (S->memo_h[i])
        return 0;
    if (!(S->memo_ch[i] = malloc(sizeof(int) * ((size_t)S->n + 1))))
        return ein_fail(S->err, EIN_ENOMEM, "out of memory in the plan search");
    memcpy(S->memo_ch[i], ch, sizeof(int) * (size_t)S->n);
    S->memo_h[i] = h;
    S->memo_t[i] = time;
    S->nmemo++;
    return 0;
}

/* Predicted time of choice vector ch (INFINITY when it does not fit);
 * counts the work and records the candidate. A vector simulated before
 * takes its time from the memo: no work, not recorded again. */
static int evaluate(srch *S, const int *ch, const char *what, double *time)
{
    if (memo_find(S, ch, time))
        return 0;
    pl_plan *plan = NULL;
    int rc = plan_build(S, ch, &plan);
    if (rc < 0)
        return rc;
    ein_program **progs = NULL;
    co_sim_result *r = NULL;
    ein_error e2 = {0};
    rc = co_plan_predict(S->g, plan, S->topo, S->cal, S->seed, 1, S->xc, &progs, &r, &e2);
    pl_plan_free(plan);
    if (rc == EIN_ELIMIT) {
        *time = INFINITY;
    } else if (rc < 0) {
        if (S->err)
            *S->err = e2;
        return rc;
    } else {
        *time = r->time;
        co_sim_result_free(r);
        co_programs_free(progs, S->p);
    }
    if ((rc = memo_add(S, ch, *time)) < 0)
        return rc;
    co_search_report *rep = S->rep;
    rep->nevals++;
    rep->work += (long)S->nops * S->p;
    if (S->so->record) {
        co_search_cand *c = realloc(rep->cands, sizeof *c * (size_t)(rep->ncands + 1));
        if (!c)
            return ein_fail(S->err, EIN_ENOMEM, "out of memory in the plan search");
        rep->cands = c;
        snprintf(c[rep->ncands].what, sizeof c[rep->ncands].what, "%s", what);
        c[rep->ncands].time = *time;
        rep->ncands++;
    }
    return 0;
}

/* Tiling hashes of every request of v (computed once). */
static int req_hashes(srch *S, int v)
{
    opreq *r = &S->req[v];
    if (r->out_h)
        return 0;
    r->out_h = malloc(sizeof(uint64_t) * (size_t)(r->nreq + 1));
    r->in_h = malloc(sizeof(uint64_t) * (size_t)(r->nreq * r->nin + 1));
    if (!r->out_h || !r->in_h)
        return ein_fail(S->err, EIN_ENOMEM, "out of memory in the plan search");
    pl_spec sp = {0};
    pl_tiling t = {0};
    int rc = 0;
    for (int i = 0; i < r->nreq && rc == 0; i++) {
        if ((rc = req_make(S, v, i, &sp)) < 0)
            break;
        if (pl_tiling_of_outputs(&sp, &t) < 0) {
            rc = ein_fail(S->err, EIN_ENOMEM, "out of memory in the plan search");
            break;
        }
        r->out_h[i] = tiling_hash(&t);
        pl_tiling_clear(&t);
        for (int k = 0; k < r->nin && rc == 0; k++) {
            if (pl_tiling_of_input(&sp, k, &t) < 0)
                rc = ein_fail(S->err, EIN_ENOMEM, "out of memory in the plan search");
            r->in_h[(size_t)i * (size_t)r->nin + k] = tiling_hash(&t);
            pl_tiling_clear(&t);
        }
        pl_spec_clear(&sp);
    }
    pl_spec_clear(&sp);
    if (rc < 0) {
        free(r->out_h);
        r->out_h = NULL;
    }
    return rc;
}

/* Which indices request i of v splits, as a set of labels (hashed). */
static uint64_t split_sig(srch *S, int v, int i)
{
    pl_index idx[PL_MAX_INDICES];
    int n = pl_op_indices(S->g, v, idx, NULL);
    const opreq *r = &S->req[v];
    uint64_t h = 0;
    if (i == r->rep_row) /* its own kind of layout: whole on every device */
        return ein_hash_mix(0x7265707Fu, 1);
    for (int k = 0; k < n && k < r->nidx; k++)
        if (r->counts[(size_t)i * (size_t)r->nidx + k] > 1)
            for (const char *c = idx[k].label; *c; c++)
                h = ein_hash_mix(h, (uint64_t)(unsigned char)*c);
    return h;
}

/* Set node v's class to request i in ch (every node of the class). */
static void set_class(srch *S, int *ch, int v, int i)
{
    int c = S->cls[v];
    for (int u = 0; u < S->n; u++)
        if (S->live[u] && S->cls[u] == c)
            ch[u] = i;
}

static int rnd(srch *S, int n)
{
    return n > 0 ? (int)(ein_rand_next(&S->rng) % (uint64_t)n) : 0;
}

/* The live operators adjacent to v (producers and consumers). */
static int neighbours(srch *S, int v, int *out, int cap)
{
    int m = 0;
    const pl_node *nd = pl_graph_node(S->g, v);
    for (int k = 0; k < nd->ninputs && m < cap; k++)
        if (S->live[nd->inputs[k]])
            out[m++] = nd->inputs[k];
    for (int u = v + 1; u < S->n && m < cap; u++) {
        if (!S->live[u])
            continue;
        const pl_node *un = pl_graph_node(S->g, u);
        for (int k = 0; k < un->ninputs; k++)
            if (un->inputs[k] == v) {
                out[m++] = u;
                break;
            }
    }
    return m;
}

/* One move from `cur` into `nx`; its description in `what`. 0, or a
 * negative code; *changed 0 when the move changed nothing. */
static int propose(srch *S, const int *cur, int *nx, char *what, size_t wlen, int *changed)
{
    memcpy(nx, cur, sizeof(int) * (size_t)S->n);
    int *ops = malloc(sizeof(int) * (size_t)S->n), nops = 0, rc = 0;
    int *queue = malloc(sizeof(int) * (size_t)S->n);
    char *seen = calloc((size_t)S->n + 1, 1);
    if (!ops || !queue || !seen) {
        rc = ein_fail(S->err, EIN_ENOMEM, "out of memory in the plan search");
        goto done;
    }
    for (int v = 0; v < S->n; v++)
        if (S->live[v] && S->cls[v] == v && S->req[v].nreq > 1)
            ops[nops++] = v;
    if (nops == 0)
        goto done;
    int kind = rnd(S, 10), v = ops[rnd(S, nops)];
    const char *name = pl_graph_node(S->g, v)->name;
    if (kind < 4) {
        /* One operator (its class) to another spec. */
        int i = rnd(S, S->req[v].nreq - 1);
        if (i >= cur[v])
            i++;
        set_class(S, nx, v, i);
        snprintf(what, wlen, "op %.32s", name);
    } else if (kind < 7 && S->nseeds > 0) {
        /* A region sharing v's split takes a seed's specs. */
        int s = rnd(S, S->nseeds);
        uint64_t sig = split_sig(S, v, cur[v]);
        int qh = 0, qt = 0;
        queue[qt++] = v;
        seen[v] = 1;
        while (qh < qt) {
            int u = queue[qh++], nb[64];
            set_class(S, nx, u, S->seeds[s][u]);
            int m = neighbours(S, u, nb, 64);
            for (int j = 0; j < m; j++) {
                int w = nb[j];
                if (seen[w] || !S->live[w] || split_sig(S, w, cur[w]) != sig)
                    continue;
                seen[w] = 1;
                queue[qt++] = w;
            }
        }
        snprintf(what, wlen, "region %.32s (%d ops) from %.16s", name, qt, S->seed_name[s]);
    } else {
        /* A producer/consumer pair: v to another spec, its producer to
         * one whose output tiling is what v now wants (no repartition). */
        const pl_node *nd = pl_graph_node(S->g, v);
        int ins[PL_MAX_INPUTS], nin = 0;
        for (int k = 0; k < nd->ninputs; k++)
            if (S->live[nd->inputs[k]])
                ins[nin++] = k;
        int i = rnd(S, S->req[v].nreq);
        set_class(S, nx, v, i);
        if (nin > 0) {
            int k = ins[rnd(S, nin)], u = nd->inputs[k];
            if ((rc = req_hashes(S, v)) < 0 || (rc = req_hashes(S, u)) < 0)
                goto done;
            uint64_t want = S->req[v].in_h[(size_t)i * (size_t)S->req[v].nin + k];
            int pick = -1, nmatch = 0;
            for (int j = 0; j < S->req[u].nreq; j++)
                if (S->req[u].out_h[j] == want && rnd(S, ++nmatch) == 0)
                    pick = j;
            if (pick >= 0)
                set_class(S, nx, u, pick);
            snprintf(what, wlen, "pair %.32s<-%.32s", name, pl_graph_node(S->g, u)->name);
        } else {
            snprintf(what, wlen, "op %.32s", name);
        }
    }
    *changed = memcmp(nx, cur, sizeof(int) * (size_t)S->n) != 0;
done:
    free(ops);
    free(queue);
    free(seen);
    return rc;
}

/* Repeated blocks: the smallest period T of node ids for which at least
 * half of the operators have a twin T earlier (same node, kernel and
 * shapes; each input either a graph input on both or T apart); cls[v] is
 * the first node of v's chain of twins. */
static int same_node(const pl_graph *g, int u, int v, int T)
{
    const pl_node *a = pl_graph_node(g, u), *b = pl_graph_node(g, v);
    if (a->kind != b->kind || a->dtype != b->dtype || a->rank != b->rank ||
        a->ninputs != b->ninputs || memcmp(a->shape, b->shape, sizeof a->shape[0] * (size_t)a->rank) ||
        a->kernel.kind != b->kernel.kind || strcmp(a->kernel.subscripts, b->kernel.subscripts) ||
        a->kernel.axis != b->kernel.axis || a->kernel.axes != b->kernel.axes ||
        a->kernel.start != b->kernel.start || a->kernel.head_dim != b->kernel.head_dim ||
        a->kernel.group != b->kernel.group || a->kernel.window != b->kernel.window ||
        a->kernel.nlist != b->kernel.nlist ||
        a->kernel.unary != b->kernel.unary || a->kernel.binary != b->kernel.binary)
        return 0;
    if (a->kernel.nlist > 0 && memcmp(a->kernel.list, b->kernel.list,
                                      sizeof *a->kernel.list * (size_t)a->kernel.nlist))
        return 0;
    for (int k = 0; k < a->ninputs; k++) {
        const pl_node *x = pl_graph_node(g, a->inputs[k]), *y = pl_graph_node(g, b->inputs[k]);
        int xi = x->kind == PL_INPUT, yi = y->kind == PL_INPUT;
        if (xi != yi || x->rank != y->rank ||
            memcmp(x->shape, y->shape, sizeof x->shape[0] * (size_t)x->rank))
            return 0;
        if (!xi && b->inputs[k] - a->inputs[k] != T)
            return 0;
    }
    return 1;
}

static int blocks_find(srch *S)
{
    for (int v = 0; v < S->n; v++)
        S->cls[v] = v;
    S->rep->period = 0;
    if (S->nops < 8)
        return 0;
    for (int T = 1; T <= S->n / 2; T++) {
        int tw = 0;
        for (int v = T; v < S->n; v++)
            tw += S->live[v] && S->live[v - T] && same_node(S->g, v - T, v, T);
        if (2 * tw < S->nops)
            continue;
        for (int v = T; v < S->n; v++)
            if (S->live[v] && S->live[v - T] && same_node(S->g, v - T, v, T) &&
                S->req[v].nreq == S->req[v - T].nreq)
                S->cls[v] = S->cls[v - T];
        S->rep->period = T;
        return 0;
    }
    return 0;
}

/* Project a choice vector onto the classes: every node takes its class
 * head's choice. */
static void project(srch *S, int *ch)
{
    for (int v = 0; v < S->n; v++)
        if (S->live[v])
            ch[v] = ch[S->cls[v]];
}

static int add_seed(srch *S, const pl_plan *plan, const char *name)
{
    int *ch = malloc(sizeof(int) * ((size_t)S->n + 1)), rc;
    if (!ch)
        return ein_fail(S->err, EIN_ENOMEM, "out of memory in the plan search");
    if ((rc = plan_choices(S, plan, ch)) < 0) {
        free(ch);
        return rc;
    }
    S->seeds[S->nseeds] = ch;
    snprintf(S->seed_name[S->nseeds], sizeof S->seed_name[0], "%s", name);
    S->nseeds++;
    return 0;
}

/* The search on a prefix of the graph (co_search.h): nodes before
 * v0 + T, where v0 is the first node with a twin T earlier (the start of
 * the second block). Every operator of the prefix read by a later one is
 * saved there, so that it stays planned. The whole graph's choice vector
 * in `ch`: the prefix's, then each later node that of its twin k x T
 * earlier in the prefix's last block, else the time DP's (seed 0); a node
 * of the last block saved only for a later block (the block's output)
 * takes, like its twins, its twin's in the block before, which was
 * planned with the consumers that the whole graph gives it. */
static int prefix_search(srch *S, const pl_plan_opts *base, int *ch)
{
    int v0 = -1, T = S->rep->period;
    for (int v = 0; v < S->n && v0 < 0; v++)
        if (S->live[v] && S->cls[v] != v)
            v0 = v;
    int N = v0 + T, rc;
    pl_graph *gp = pl_graph_copy_prefix(S->g, N);
    if (!gp)
        return ein_fail(S->err, EIN_ENOMEM, "out of memory in the plan search");
    for (int v = N; v < S->n; v++) {
        const pl_node *nd = pl_graph_node(S->g, v);
        for (int k = 0; k < nd->ninputs; k++)
            if (nd->inputs[k] < N && gp->nodes[nd->inputs[k]].kind != PL_INPUT)
                gp->nodes[nd->inputs[k]].saved = 1;
    }
    co_search_opts so = *S->so;
    so.whole = 1;
    co_search_report sub = {0};
    pl_plan *pp = NULL;
    rc = co_plan_search(gp, S->p, base, S->topo, S->cal, &so, &pp, &sub, S->err);
    if (rc == 0) {
        for (int v = 0; v < S->n && rc == 0; v++) {
            ch[v] = S->seeds[0][v];
            if (!S->live[v])
                continue;
            int u = v;
            while (u >= N)
                u -= T;
            if (u != v && (u < 0 || !S->live[u] || S->cls[u] != S->cls[v]))
                continue; /* after the last block: the time DP's */
            /* A node of the prefix's last block that is saved only because
             * a later block reads it (its real consumers are cut off) takes
             * its twin's in the block before, planned with its consumers. */
            if (u >= N - T && u - T >= 0 && gp->nodes[u].saved && !S->g->nodes[u].saved &&
                S->live[u - T] && S->cls[u - T] == S->cls[u] && pp->nodes[u - T].planned)
                u -= T;
            if (!pp->nodes[u].planned)
                continue;
            int found = req_find(S, v, &pp->nodes[u].spec);
            if (found >= 0)
                ch[v] = found;
        }
        /* After the last block (the time DP's choices): an operator run on
         * fewer than p devices that reads a replicated one is replicated
         * too (the final norm after the last residual add: computed where
         * it is read, no copy of the add left unread). */
        for (int v = N; v < S->n; v++) {
            const opreq *r = &S->req[v];
            if (!S->live[v] || r->rep_row < 0 || ch[v] == r->rep_row || S->cls[v] != v)
                continue;
            const pl_node *nd = pl_graph_node(S->g, v);
            int reads_rep = 0;
            for (int k = 0; k < nd->ninputs; k++) {
                int w = nd->inputs[k];
                reads_rep |= S->live[w] && S->req[w].rep_row >= 0 && ch[w] == S->req[w].rep_row;
            }
            if (req_parts(S, v, ch[v]) < S->p && reads_rep)
                ch[v] = r->rep_row;
        }
        co_search_report *rep = S->rep;
        int period = rep->period, nclasses = rep->nclasses;
        co_search_report_free(rep);
        *rep = sub;
        rep->period = period;
        rep->nclasses = nclasses;
        rep->prefix_nodes = N;
        rep->nblocks = 1 + (S->n - v0 + T - 1) / T;
    } else {
        co_search_report_free(&sub);
    }
    pl_plan_free(pp);
    pl_graph_free(gp);
    return rc;
}

/* The search's state for g on p devices (freed by search_free, also after
 * a failure here). */
static int search_alloc(srch *S, int nslots)
{
    size_t n1 = (size_t)S->n + 1;
    S->live = calloc(n1, 1);
    S->req = calloc(n1, sizeof *S->req);
    S->cls = malloc(sizeof(int) * n1);
    S->seeds = calloc((size_t)nslots, sizeof *S->seeds);
    S->seed_t = calloc((size_t)nslots, sizeof *S->seed_t);
    S->seed_name = calloc((size_t)nslots, sizeof *S->seed_name);
    S->xc = calloc(1, sizeof *S->xc);
    S->cur = malloc(sizeof(int) * n1);
    S->nx = malloc(sizeof(int) * n1);
    S->best = malloc(sizeof(int) * n1);
    if (!S->live || !S->req || !S->cls || !S->seeds || !S->seed_t || !S->seed_name || !S->xc ||
        !S->cur || !S->nx || !S->best)
        return ein_fail(S->err, EIN_ENOMEM, "out of memory in the plan search");
    return 0;
}

static void search_free(srch *S)
{
    for (int v = 0; S->req && v < S->n; v++) {
        free(S->req[v].counts);
        free(S->req[v].out_h);
        free(S->req[v].in_h);
    }
    for (int i = 0; S->seeds && i < S->nseeds; i++)
        free(S->seeds[i]);
    free(S->seeds);
    free(S->seed_t);
    free(S->seed_name);
    free(S->req);
    free(S->live);
    free(S->cls);
    co_xcache_free(S->xc);
    for (int i = 0; i < S->capmemo; i++)
        free(S->memo_ch[i]);
    free(S->memo_ch);
    free(S->memo_t);
    free(S->memo_h);
    free(S->cur);
    free(S->nx);
    free(S->best);
}

/* Node v and every live twin of it (its class, once blocks_find ran) to
 * the replicated spec in ch. */
static void set_rep(srch *S, int *ch, int v)
{
    for (int u = 0; u < S->n; u++)
        if (S->live[u] && (u == v || S->cls[u] == S->cls[v]) && S->req[u].rep_row >= 0)
            ch[u] = S->req[u].rep_row;
}

/* Seed i with replicated specs (planner/pl_spec.h) into ch; 1 when that
 * differs from every seed so far: every replicable operator that seed i
 * runs on fewer than p devices (an rmsnorm of one token: the others would
 * wait for it), then, consumers first, each replicable producer of a
 * replicated operator (the residual adds feeding it), each with its twins
 * in the other blocks, so that a layer boundary is one exchange
 * (Megatron's all-reduce). */
static int rep_variant(srch *S, int i, int *ch)
{
    int n = S->n, changed = 0;
    memcpy(ch, S->seeds[i], sizeof(int) * (size_t)n);
    for (int v = 0; v < n; v++) {
        const opreq *r = &S->req[v];
        if (!S->live[v] || r->rep_row < 0 || ch[v] == r->rep_row)
            continue;
        if (req_parts(S, v, ch[v]) < S->p) {
            set_rep(S, ch, v);
            changed = 1;
        }
    }
    for (int again = changed; again;) {
        again = 0;
        for (int v = n - 1; v >= 0; v--) {
            if (!S->live[v] || ch[v] != S->req[v].rep_row)
                continue;
            const pl_node *nd = pl_graph_node(S->g, v);
            for (int k = 0; k < nd->ninputs; k++) {
                int u = nd->inputs[k];
                if (S->live[u] && S->req[u].rep_row >= 0 && ch[u] != S->req[u].rep_row) {
                    set_rep(S, ch, u);
                    again = 1;
                }
            }
        }
    }
    for (int j = 0; j < S->nseeds && changed; j++)
        changed = memcmp(ch, S->seeds[j], sizeof(int) * (size_t)n) != 0;
    return changed;
}

/* After blocks_find: "<name>+rep" (rep_variant) of every seed but the
 * random ones, inserted before those (they stay last: S->nfixed). */
static int rep_seeds_add(srch *S)
{
    int nfixed = S->nfixed;
    for (int i = 0; i < nfixed; i++) {
        int *ch = malloc(sizeof(int) * ((size_t)S->n + 1));
        if (!ch)
            return ein_fail(S->err, EIN_ENOMEM, "out of memory in the plan search");
        if (!rep_variant(S, i, ch)) {
            free(ch);
            continue;
        }
        char name[sizeof S->seed_name[0]];
        snprintf(name, sizeof name, "%.40s+rep", S->seed_name[i]);
        memmove(&S->seeds[S->nfixed + 1], &S->seeds[S->nfixed],
                sizeof *S->seeds * (size_t)(S->nseeds - S->nfixed));
        memmove(&S->seed_name[S->nfixed + 1], &S->seed_name[S->nfixed],
                sizeof *S->seed_name * (size_t)(S->nseeds - S->nfixed));
        S->seeds[S->nfixed] = ch;
        memcpy(S->seed_name[S->nfixed], name, sizeof name);
        S->nfixed++;
        S->nseeds++;
    }
    return 0;
}

/* Phase 1, the seeds: the time DP first (its live operators are every
 * plan's, their requests enumerated here), the comm DP, every strategy
 * that applies, then the random plans (S->nfixed: the seeds before
 * them). */
static int seeds_make(srch *S, const pl_plan_opts *base)
{
    const pl_graph *g = S->g;
    int p = S->p, rc;
    uint64_t seed = S->so->seed;
    pl_plan *dp = NULL;
    pl_plan_opts o = base ? *base : (pl_plan_opts){0};
    o.force = NULL;
    o.objective = PL_OBJECTIVE_TIME;
    co_calib_objective_rates(S->topo, S->cal, &o);
    if ((rc = pl_plan_make_opts(g, p, PL_SELECT_DP, seed, &o, &dp, S->err)) < 0)
        return rc;
    for (int v = 0; v < S->n && rc == 0; v++)
        if (dp->nodes[v].planned) {
            S->live[v] = 1;
            S->nops++;
            opreq *r = &S->req[v];
            r->nin = pl_graph_node(g, v)->ninputs;
            r->rep_row = -1;
            rc = pl_spec_requests(g, v, p, &r->counts, &r->nreq, &r->nidx, S->err);
            if (rc == 0 && pl_spec_replicable(g, v, p)) {
                /* One more request: the replicated spec (counts all 1). */
                int *c = realloc(r->counts, sizeof(int) * (size_t)(r->nreq + 1) *
                                                (size_t)(r->nidx ? r->nidx : 1));
                if (!c) {
                    rc = ein_fail(S->err, EIN_ENOMEM, "out of memory in the plan search");
                    break;
                }
                r->counts = c;
                for (int k = 0; k < r->nidx; k++)
                    c[(size_t)r->nreq * (size_t)r->nidx + k] = 1;
                r->rep_row = r->nreq++;
            }
        }
    if (rc < 0 || (rc = add_seed(S, dp, "dp-time")) < 0)
        goto done;
    pl_plan_free(dp);
    dp = NULL;
    o.objective = PL_OBJECTIVE_COMM;
    if ((rc = pl_plan_make_opts(g, p, PL_SELECT_DP, seed, &o, &dp, S->err)) < 0 ||
        (rc = add_seed(S, dp, "dp-comm")) < 0)
        goto done;
    for (int i = 0; pl_strategy_names[i]; i++) {
        pl_plan_free(dp);
        dp = NULL;
        pl_plan_opts fo = o;
        ein_error e2 = {0};
        if (pl_strategy_check(pl_strategy_names[i], g, p, &e2) < 0)
            continue;
        pl_strategy_set(pl_strategy_names[i], &fo);
        if ((rc = pl_plan_make_opts(g, p, PL_SELECT_DP, seed, &fo, &dp, S->err)) < 0 ||
            (rc = add_seed(S, dp, pl_strategy_names[i])) < 0)
            goto done;
    }
    S->nfixed = S->nseeds;
    for (int i = 0; i < S->so->nrandom; i++) {
        pl_plan_free(dp);
        dp = NULL;
        char name[32];
        snprintf(name, sizeof name, "random-%d", i + 1);
        if ((rc = pl_plan_make_opts(g, p, PL_SELECT_RANDOM, seed + 1000003u * (uint64_t)(i + 1),
                                    &o, &dp, S->err)) < 0 ||
            (rc = add_seed(S, dp, name)) < 0)
            goto done;
    }
done:
    pl_plan_free(dp);
    return rc;
}

/* Whether the search runs on a prefix (co_search.h): blocks repeat, at
 * least CO_SEARCH_PREFIX_BLOCKS of them, and opts.whole is not set. */
static int wants_prefix(const srch *S)
{
    int T = S->rep->period, v0 = -1;
    if (S->so->whole || T <= 0)
        return 0;
    for (int v = 0; v < S->n && v0 < 0; v++)
        if (S->live[v] && S->cls[v] != v)
            v0 = v;
    return v0 >= 0 && (S->n - v0 + T - 1) / T + 1 >= CO_SEARCH_PREFIX_BLOCKS;
}

/* Phase 1, simulated: every seed (a random one only while the budget
 * allows), so the result is never slower than any; the best becomes the
 * walk's start (S->best, S->cur). */
static int seeds_simulate(srch *S)
{
    co_search_report *rep = S->rep;
    long cost = (long)S->nops * S->p;
    double best_t = INFINITY;
    int best_i = 0, nevaluated = 0, n = S->n, rc;
    S->start = 0;
    for (int i = 0; i < S->nseeds; i++) {
        char what[64];
        if (i == S->nfixed)
            S->start = rep->work;
        if (i >= S->nfixed && (rep->work - S->start + cost > rep->budget ||
                               8 * cost > rep->budget)) {
            /* Random seeds only where one costs at most 1/8 of the
             * budget: on a large model the moves use it better. */
            S->seed_t[i] = INFINITY;
            continue;
        }
        nevaluated++;
        snprintf(what, sizeof what, "seed %s", S->seed_name[i]);
        int dup = -1;
        for (int j = 0; j < i && dup < 0; j++)
            if (!memcmp(S->seeds[i], S->seeds[j], sizeof(int) * (size_t)n))
                dup = j;
        if (dup >= 0)
            S->seed_t[i] = S->seed_t[dup];
        else if ((rc = evaluate(S, S->seeds[i], what, &S->seed_t[i])) < 0)
            return rc;
        if (S->seed_t[i] < best_t) {
            best_t = S->seed_t[i];
            best_i = i;
        }
    }
    rep->nseeds = nevaluated;
    if (S->nfixed == S->nseeds)
        S->start = rep->work;
    rep->best_seed_time = best_t;
    snprintf(rep->best_seed, sizeof rep->best_seed, "%s", S->seed_name[best_i]);
    snprintf(rep->best_from, sizeof rep->best_from, "seed %s", S->seed_name[best_i]);
    memcpy(S->best, S->seeds[best_i], sizeof(int) * (size_t)n);
    memcpy(S->cur, S->best, sizeof(int) * (size_t)n);
    S->best_t = S->cur_t = best_t;
    return 0;
}

/* Phase 2, first move: the best seed with one block's choices everywhere
 * (when blocks repeat and the budget allows). */
static int moves_project(srch *S)
{
    size_t bytes = sizeof(int) * (size_t)S->n;
    if (S->rep->period <= 0 || S->rep->work - S->start + (long)S->nops * S->p > S->rep->budget)
        return 0;
    memcpy(S->nx, S->cur, bytes);
    project(S, S->nx);
    if (!memcmp(S->nx, S->cur, bytes))
        return 0;
    double t;
    int rc = evaluate(S, S->nx, "projected best seed", &t);
    if (rc < 0)
        return rc;
    if (t < S->best_t) {
        S->best_t = t;
        memcpy(S->best, S->nx, bytes);
        snprintf(S->rep->best_from, sizeof S->rep->best_from, "projected best seed");
    }
    if (t < INFINITY) {
        memcpy(S->cur, S->nx, bytes);
        S->cur_t = t;
    }
    return 0;
}

/* Phase 2, the moves (Metropolis) until the budget is spent, or until
 * CO_SEARCH_STALE moves in a row found nothing new (a small program's
 * space is exhausted). */
static int moves_run(srch *S)
{
    co_search_report *rep = S->rep;
    size_t bytes = sizeof(int) * (size_t)S->n;
    int tries = 0, stale = 0, rc;
    while (rep->work - S->start + (long)S->nops * S->p <= rep->budget && tries < 100000 &&
           stale < CO_SEARCH_STALE) {
        char what[96];
        int changed = 0, before = rep->nevals;
        tries++;
        stale++;
        if ((rc = propose(S, S->cur, S->nx, what, sizeof what, &changed)) < 0)
            return rc;
        if (!changed)
            continue;
        double t;
        if ((rc = evaluate(S, S->nx, what, &t)) < 0)
            return rc;
        if (rep->nevals > before)
            stale = 0;
        double u = (double)(ein_rand_next(&S->rng) >> 11) / 9007199254740992.0;
        int accept = t < S->cur_t ||
                     (t < INFINITY && u < exp(-S->so->alpha * (t / S->cur_t - 1)));
        if (accept) {
            memcpy(S->cur, S->nx, bytes);
            S->cur_t = t;
            rep->naccepted++;
        }
        if (t < S->best_t) {
            S->best_t = t;
            memcpy(S->best, S->nx, bytes);
            snprintf(rep->best_from, sizeof rep->best_from, "%s", what);
        }
    }
    return 0;
}

int co_plan_search(const pl_graph *g, int p, const pl_plan_opts *base, const xp_topology *topo,
                   const co_calib *cal, const co_search_opts *so_in, pl_plan **out,
                   co_search_report *rep_out, ein_error *err)
{
    co_search_opts so = so_in ? *so_in : (co_search_opts){0};
    if (so.nrandom == 0)
        so.nrandom = 2;
    if (so.alpha <= 0)
        so.alpha = 20;
    co_search_report rep_local = {0}, *rep = rep_out ? rep_out : &rep_local;
    memset(rep, 0, sizeof *rep);
    rep->budget = so.work == 0 ? CO_SEARCH_WORK_DEFAULT : so.work < 0 ? 0 : so.work;
    srch S = {.g = g, .p = p, .n = g->nnodes, .topo = topo, .cal = cal, .seed = so.seed,
              .rng = so.seed * 0x9e3779b97f4a7c15ULL + 21, .rep = rep, .so = &so, .err = err,
              .partials = base ? base->partials : PL_PARTIALS_F32};
    /* seeds: 2 DPs, the strategies, a "+rep" of each, the random ones */
    int rc = search_alloc(&S, 2 * (4 + 4) + (so.nrandom > 0 ? so.nrandom : 0) + 1);
    if (rc == 0 && (rc = seeds_make(&S, base)) == 0 && (rc = blocks_find(&S)) == 0 &&
        (rc = rep_seeds_add(&S)) == 0) {
        for (int v = 0; v < S.n; v++)
            rep->nclasses += S.live[v] && S.cls[v] == v;
        if (wants_prefix(&S)) {
            /* The whole search on a prefix, its choices repeated. */
            if ((rc = prefix_search(&S, base, S.best)) == 0)
                rc = plan_build(&S, S.best, out);
        } else if ((rc = seeds_simulate(&S)) == 0 && (rc = moves_project(&S)) == 0 &&
                   (rc = moves_run(&S)) == 0) {
            /* The report's result. */
            rep->best_time = S.best_t;
            rep->fits = S.best_t < INFINITY;
            rc = plan_build(&S, S.best, out);
        }
    }
    search_free(&S);
    if (rep == &rep_local)
        co_search_report_free(rep);
    return rc;
}

void co_search_report_free(co_search_report *r)
{
    if (!r)
        return;
    free(r->cands);
    r->cands = NULL;
    r->ncands = 0;
}
