/* planner/rewrite/pl_rewrite.c — the rewrite stage: graph -> e-graph,
 * saturation, roofline cost, greedy extraction, e-graph -> graph. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>
#include <unistd.h>

#include "common/base/ein_clock.h"
#include "common/base/ein_knob.h"
#include "common/process/ein_self.h"
#include "planner/ops/pl_ops.h"
#include "planner/pl_graph_int.h"
#include "planner/rewrite/pl_rewrite.h"

#include "planner/rewrite/rw_egraph.h"

#ifndef PL_REWRITE_RULES_SRCDIR
#define PL_REWRITE_RULES_SRCDIR "planner/rewrite/rules"
#endif
#ifndef PL_REWRITE_RULES_REL
#define PL_REWRITE_RULES_REL "../share/einsummable-c/rules"
#endif
#ifndef PL_REWRITE_RULES_DIR
#define PL_REWRITE_RULES_DIR PL_REWRITE_RULES_SRCDIR
#endif

typedef struct rw_cost { double run, pre; } rw_cost; /* run time; weight precompute */

static int cost_lt(rw_cost a, rw_cost b)
{
    return a.run < b.run || (a.run == b.run && a.pre < b.pre);
}

typedef struct rw_roof { double peak, bw, launch; int slice_cost; } rw_roof;

static rw_roof roof_of(const pl_rewrite_opts *o)
{
    rw_roof r = {o->peak_flops > 0 ? o->peak_flops : 989e12,
                 o->hbm_bw > 0 ? o->hbm_bw : o->hbm_bw < 0 ? INFINITY : 3.35e12,
                 o->launch_s > 0 ? o->launch_s : 0, o->slice_cost};
    return r;
}

static double vol_bytes(ein_dtype dt, int rank, const int64_t *shape)
{
    double v = ein_dtype_elem_bytes(dt);
    for (int i = 0; i < rank; i++)
        v *= (double)shape[i];
    return v;
}

static double roofline(const rw_roof *r, double flops, double bytes)
{
    double t = flops / r->peak, m = bytes / r->bw;
    return (t > m ? t : m) + r->launch;
}

/* Input `id` of g is a weight (by name, per o). */
static int is_weight_name(const pl_rewrite_opts *o, const char *name)
{
    for (const char *const *w = o->weights; w && *w; w++)
        if (strcmp(*w, name) == 0)
            return 1;
    return 0;
}

/* Per node: seconds and FLOPs of one operator of a pl_graph. */
static void node_cost(const pl_graph *g, const pl_node *n, const rw_roof *r, double *sec,
                      double *flops)
{
    const pl_op_def *d = pl_op_def_of(n->kind);
    double f = d ? d->flops(g, n) : 0;
    double b = vol_bytes(n->dtype, n->rank, n->shape);
    for (int i = 0; i < n->ninputs; i++) {
        const pl_node *x = &g->nodes[n->inputs[i]];
        b += vol_bytes(x->dtype, x->rank, x->shape);
    }
    if (n->kind == PL_SLICE && !r->slice_cost)
        b = 0, f = 0;
    *flops = f;
    *sec = (n->kind == PL_SLICE && !r->slice_cost) ? 0 : roofline(r, f, b);
}

int pl_rewrite_graph_cost(const pl_graph *g, const pl_rewrite_opts *o, double *seconds,
                          double *flops, ein_error *err)
{
    rw_roof r = roof_of(o);
    uint8_t *w = calloc((size_t)g->nnodes + 1, 1);
    if (!w)
        return ein_fail(err, EIN_ENOMEM, "rewrite: out of memory");
    /* Live: operators that some saved output depends on. */
    uint8_t *live = calloc((size_t)g->nnodes + 1, 1);
    if (!live) {
        free(w);
        return ein_fail(err, EIN_ENOMEM, "rewrite: out of memory");
    }
    for (int i = g->nnodes - 1; i >= 0; i--) {
        const pl_node *n = &g->nodes[i];
        if (n->saved)
            live[i] = 1;
        if (live[i])
            for (int k = 0; k < n->ninputs; k++)
                live[n->inputs[k]] = 1;
    }
    double s = 0, f = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const pl_node *n = &g->nodes[i];
        if (n->kind == PL_INPUT) {
            w[i] = is_weight_name(o, n->name);
            continue;
        }
        w[i] = 1;
        for (int k = 0; k < n->ninputs; k++)
            w[i] &= w[n->inputs[k]];
        if (w[i] || !live[i])
            continue;
        double ns, nf;
        node_cost(g, n, &r, &ns, &nf);
        s += ns;
        f += nf;
    }
    free(w);
    free(live);
    if (seconds)
        *seconds = s;
    if (flops)
        *flops = f;
    return 0;
}

/* ---- graph -> e-graph ------------------------------------------------- */

static int is_matmul(const pl_node *n)
{
    return n->kind == PL_EINSUM && n->ninputs == 2 && strcmp(n->kernel.subscripts, "ij,jk->ik") == 0;
}

/* The scalar of a unary operator as an e-node parameter: its bits, with
 * the scalar zeroed for the functions that do not read it (so relu(x) is
 * one e-node whatever the builder left there). */
static int64_t rw_scalar_bits(const pl_node *s)
{
    double v = ein_unary_takes_scalar(s->kernel.unary) ? s->kernel.scalar : 0.0;
    int64_t b;
    if (v == 0.0)
        v = 0.0; /* -0.0 -> 0.0 */
    memcpy(&b, &v, sizeof b);
    return b;
}

static int to_egraph(rw_egraph *eg, const pl_graph *g, int *cls, ein_error *err)
{
    for (int i = 0; i < g->nnodes; i++) {
        const pl_node *s = &g->nodes[i];
        rw_node n = {.nch = s->ninputs};
        for (int k = 0; k < s->ninputs; k++)
            n.ch[k] = cls[s->inputs[k]];
        if (s->kind == PL_INPUT)
            n.op = RW_INPUT, n.p[0] = i;
        else if (is_matmul(s))
            n.op = RW_MATMUL;
        else if (s->kind == PL_BINARY && s->kernel.binary == EIN_BIN_ADD)
            n.op = RW_ADD;
        else if (s->kind == PL_BINARY && (int)s->kernel.binary >= 0 &&
                 s->kernel.binary < EIN_BIN_COUNT)
            n.op = RW_BINARY, n.p[0] = s->kernel.binary;
        else if (s->kind == PL_UNARY && (int)s->kernel.unary >= 0 && s->kernel.unary < EIN_UN_COUNT)
            n.op = RW_UNARY, n.p[0] = s->kernel.unary, n.p[1] = rw_scalar_bits(s);
        else if (s->kind == PL_EINSUM && s->ninputs == 1 && s->rank == 2 &&
                 strcmp(s->kernel.subscripts, "ij->ji") == 0)
            n.op = RW_TRANSPOSE;
        else if (s->kind == PL_CONCAT)
            n.op = RW_CONCAT, n.p[0] = s->kernel.axis;
        else if (s->kind == PL_SLICE)
            n.op = RW_SLICE, n.p[0] = s->kernel.axis, n.p[1] = s->kernel.start,
            n.p[2] = s->kernel.start + s->shape[s->kernel.axis];
        else
            n.op = RW_OPAQUE, n.p[0] = i;
        int c = rw_add(eg, &n, err);
        if (c < 0)
            return ein_error_prefix(err, "rewrite: node %s", s->name);
        cls[i] = c;
    }
    return 0;
}

/* ---- cycle filter (TENSAT §5) --------------------------------------------
 * A DFS over class -> node -> child class; a child class already on the
 * DFS path closes a cycle, and the newest e-node of that cycle (the
 * highest id: the one a rewrite added last) is blacklisted. Repeated until
 * the e-graph without blacklisted nodes is acyclic, so an extraction (and
 * an ILP) need no ordering constraints. Returns the number blacklisted. */
static int cycle_filter(const rw_egraph *eg, uint8_t *black, ein_error *err)
{
    int nc = eg->nclasses, nb = 0;
    int *state = malloc((size_t)nc * sizeof *state);      /* 0 new, 1 on path, 2 done */
    int *pos = malloc((size_t)nc * sizeof *pos);          /* next node index to try */
    int *kid = malloc((size_t)nc * sizeof *kid);          /* next child of that node */
    int *path = malloc((size_t)nc * sizeof *path);
    if (!state || !pos || !kid || !path) {
        nb = ein_fail(err, EIN_ENOMEM, "rewrite: out of memory");
        goto out;
    }
    for (int again = 1; again;) {
        again = 0;
        memset(state, 0, (size_t)nc * sizeof *state);
        for (int r = 0; r < nc && !again; r++) {
            if (eg->uf[r] != r || state[r])
                continue;
            int sp = 0;
            path[sp++] = r;
            state[r] = 1;
            pos[r] = kid[r] = 0;
            while (sp > 0 && !again) {
                int c = path[sp - 1];
                const rw_ivec *ns = &eg->classes[c].nodes;
                if (pos[c] >= ns->n) {
                    state[c] = 2;
                    sp--;
                    continue;
                }
                const rw_node *n = &eg->nodes[ns->v[pos[c]]];
                if (n->dead || black[ns->v[pos[c]]] || kid[c] >= n->nch) {
                    pos[c]++;
                    kid[c] = 0;
                    continue;
                }
                int ch = rw_find_const(eg, n->ch[kid[c]++]);
                if (state[ch] == 0) {
                    state[ch] = 1;
                    pos[ch] = kid[ch] = 0;
                    path[sp++] = ch;
                } else if (state[ch] == 1) {
                    /* the cycle: the current node of every class on the
                     * path from ch to c */
                    int newest = -1;
                    for (int k = sp - 1; k >= 0; k--) {
                        int id = eg->classes[path[k]].nodes.v[pos[path[k]]];
                        if (id > newest)
                            newest = id;
                        if (path[k] == ch)
                            break;
                    }
                    black[newest] = 1;
                    nb++;
                    again = 1;
                }
            }
        }
    }
out:
    free(state);
    free(pos);
    free(kid);
    free(path);
    return nb;
}

/* ---- cost and greedy extraction -------------------------------------- */

static rw_cost enode_cost(const rw_egraph *eg, const rw_node *n, const rw_roof *r)
{
    const rw_class *out = &eg->classes[rw_find_const(eg, n->cls)];
    rw_cost c = {0, 0};
    double flops = 0, bytes = vol_bytes(out->dtype, out->rank, out->shape);
    if (n->op == RW_INPUT)
        return c;
    for (int i = 0; i < n->nch; i++) {
        const rw_class *x = &eg->classes[rw_find_const(eg, n->ch[i])];
        bytes += vol_bytes(x->dtype, x->rank, x->shape);
    }
    if (n->op == RW_MATMUL) {
        const rw_class *a = &eg->classes[rw_find_const(eg, n->ch[0])];
        flops = 2.0 * (double)a->shape[0] * (double)a->shape[1] * (double)out->shape[1];
    } else if (n->op == RW_ADD || n->op == RW_UNARY || n->op == RW_BINARY) {
        flops = vol_bytes(out->dtype, out->rank, out->shape) / (double)ein_dtype_size(out->dtype);
    } else if (n->op == RW_OPAQUE) {
        const pl_node *s = &eg->src->nodes[n->p[0]];
        const pl_op_def *d = pl_op_def_of(s->kind);
        flops = d ? d->flops(eg->src, s) : 0;
    }
    double t = (n->op == RW_SLICE && !r->slice_cost) ? 0 : roofline(r, flops, bytes);
    /* Weight-only: computed once ahead of time; only breaks ties. */
    if (out->weight)
        c.pre = t;
    else
        c.run = t;
    return c;
}

/* best[c]: cheapest node of class c by tree cost (a fixpoint; costs are
 * non-negative and only strict improvements are taken, so the choices
 * form no cycle). */
static int greedy(const rw_egraph *eg, const rw_roof *r, const uint8_t *black, int *best,
                  ein_error *err)
{
    rw_cost *cc = malloc((size_t)eg->nclasses * sizeof *cc);
    rw_cost *nc = malloc((size_t)eg->nnodes * sizeof *nc);
    if (!cc || !nc) {
        free(cc);
        free(nc);
        return ein_fail(err, EIN_ENOMEM, "rewrite: out of memory");
    }
    for (int i = 0; i < eg->nclasses; i++) {
        cc[i].run = cc[i].pre = INFINITY;
        best[i] = -1;
    }
    for (int i = 0; i < eg->nnodes; i++)
        nc[i] = enode_cost(eg, &eg->nodes[i], r);
    for (int changed = 1; changed;) {
        changed = 0;
        for (int i = 0; i < eg->nnodes; i++) {
            const rw_node *n = &eg->nodes[i];
            if (n->dead || black[i])
                continue;
            rw_cost c = nc[i];
            for (int k = 0; k < n->nch && isfinite(c.run); k++) {
                const rw_cost *x = &cc[rw_find_const(eg, n->ch[k])];
                c.run += x->run;
                c.pre += x->pre;
            }
            if (!isfinite(c.run))
                continue;
            int cl = rw_find_const(eg, n->cls);
            if (cost_lt(c, cc[cl])) {
                cc[cl] = c;
                best[cl] = i;
                changed = 1;
            }
        }
    }
    free(cc);
    free(nc);
    return 0;
}

/* ---- sharing-aware improvement of the greedy choice -----------------
 * Greedy prices each class as a tree, so a subexpression shared by two
 * classes (the merged matmul of Q/K/V) is paid twice and never wins. This
 * local search prices the extracted DAG exactly (each class once) and
 * switches one class's choice at a time: improvements always, any other
 * switch once per e-node (so a first switch that only pays off with a
 * second one, like merging Q/K/V, is reachable); the best DAG seen is kept. A switch that closes a cycle
 * prices at infinity, which filters cycles. */

typedef struct rw_dag {
    const rw_egraph *eg;
    rw_cost *nc;          /* per node: enode_cost (owned) */
    int *best;
    int *mark, stamp;     /* visited in this evaluation: mark == stamp */
    int *state;           /* 1 on the DFS stack, 2 done (per evaluation) */
    int *stack;
} rw_dag;

/* Set up d to price the choice best[] of eg under roofline r: scratch and
 * every node's own cost. 0 or EIN_ENOMEM; dag_free() either way. */
static int dag_init(rw_dag *d, const rw_egraph *eg, const rw_roof *r, int *best, ein_error *err)
{
    *d = (rw_dag){.eg = eg, .best = best};
    d->nc = malloc(((size_t)eg->nnodes + 1) * sizeof *d->nc);
    d->mark = calloc((size_t)eg->nclasses + 1, sizeof *d->mark);
    d->state = calloc((size_t)eg->nclasses + 1, sizeof *d->state);
    d->stack = malloc(((size_t)eg->nclasses + 1) * sizeof *d->stack);
    if (!d->nc || !d->mark || !d->state || !d->stack)
        return ein_fail(err, EIN_ENOMEM, "rewrite: out of memory");
    for (int i = 0; i < eg->nnodes; i++)
        d->nc[i] = enode_cost(eg, &eg->nodes[i], r);
    return 0;
}

static void dag_free(rw_dag *d)
{
    free(d->nc);
    free(d->mark);
    free(d->state);
    free(d->stack);
}

static rw_cost dag_cost(rw_dag *d, const int *roots, int nroots)
{
    rw_cost c = {0, 0};
    const rw_egraph *eg = d->eg;
    d->stamp++;
    for (int r = 0; r < nroots; r++) {
        int sp = 0;
        int rc0 = rw_find_const(eg, roots[r]);
        if (d->mark[rc0] == d->stamp)
            continue;
        d->mark[rc0] = d->stamp;
        d->state[rc0] = 1;
        d->stack[sp++] = rc0;
        /* Iterative DFS; state[c] counts the next child to visit + 1. */
        while (sp > 0) {
            int cl = d->stack[sp - 1];
            const rw_node *n = &eg->nodes[d->best[cl]];
            int k = d->state[cl] - 1;
            if (k < n->nch) {
                d->state[cl]++;
                int ch = rw_find_const(eg, n->ch[k]);
                if (d->mark[ch] == d->stamp) {
                    if (d->state[ch] > 0) { /* on the stack: a cycle */
                        c.run = INFINITY;
                        return c;
                    }
                    continue;
                }
                d->mark[ch] = d->stamp;
                d->state[ch] = 1;
                d->stack[sp++] = ch;
                continue;
            }
            d->state[cl] = 0; /* done */
            c.run += d->nc[d->best[cl]].run;
            c.pre += d->nc[d->best[cl]].pre;
            sp--;
        }
    }
    return c;
}

/* Switch one class's choice at a time, up to 8 passes: improvements
 * always, a non-improving switch once per e-node (tie[]). best[] ends as
 * the cheapest choice seen (keep[] is scratch), whose cost is returned. */
static rw_cost switch_singles(rw_dag *d, const uint8_t *black, const int *roots, int nroots,
                              int *keep, uint8_t *tie)
{
    const rw_egraph *eg = d->eg;
    int *best = d->best;
    rw_cost cur = dag_cost(d, roots, nroots), top = cur;
    memcpy(keep, best, (size_t)eg->nclasses * sizeof *keep);
    for (int pass = 0; pass < 8; pass++) {
        int better = 0;
        for (int i = 0; i < eg->nnodes; i++) {
            const rw_node *n = &eg->nodes[i];
            int cl = rw_find_const(eg, n->cls);
            if (n->dead || black[i] || best[cl] == i || best[cl] < 0)
                continue;
            int ok = 1;
            for (int k = 0; k < n->nch && ok; k++)
                ok = best[rw_find_const(eg, n->ch[k])] >= 0;
            if (!ok)
                continue;
            int old = best[cl];
            best[cl] = i;
            rw_cost c = dag_cost(d, roots, nroots);
            if (cost_lt(c, cur)) {
                cur = c;
                better = 1;
            } else if (!tie[i] && isfinite(c.run)) {
                tie[i] = 1; /* a non-improving switch, once per e-node */
                cur = c;
            } else
                best[cl] = old;
            if (cost_lt(cur, top)) {
                top = cur;
                better = 1;
                memcpy(keep, best, (size_t)eg->nclasses * sizeof *keep);
            }
        }
        if (!better)
            break;
    }
    memcpy(best, keep, (size_t)eg->nclasses * sizeof *keep);
    return top;
}

/* in_dag[c]: class c is in the DAG of the current choice. */
static void dag_members(rw_dag *d, const int *roots, int nroots, int *in_dag)
{
    dag_cost(d, roots, nroots);
    for (int c = 0; c < d->eg->nclasses; c++)
        in_dag[c] = d->mark[c] == d->stamp;
}

/* Switch every DAG class with a usable node that reads class x to that
 * node (each class once); the classes go to moved[], their old choices to
 * old[]; returns how many. */
static int switch_readers(rw_dag *d, const uint8_t *black, int x, const int *in_dag, int *moved,
                          int *old)
{
    const rw_egraph *eg = d->eg;
    int *best = d->best;
    const rw_ivec *ps = &eg->classes[x].parents;
    int nm = 0;
    for (int k = 0; k < ps->n; k++) {
        int pn = ps->v[k], cl = rw_find_const(eg, eg->nodes[pn].cls), dup = 0;
        if (eg->nodes[pn].dead || black[pn] || !in_dag[cl] || best[cl] == pn)
            continue;
        for (int j = 0; j < nm && !dup; j++)
            dup = moved[j] == cl;
        if (dup)
            continue;
        moved[nm] = cl;
        old[nm++] = best[cl];
        best[cl] = pn;
    }
    return nm;
}

/* Group switch, up to 4 passes from the choice of cost cur: for a class X
 * outside the DAG, every DAG class with a node that reads X switches to
 * that node at once (two slices of one merged matmul only pay off
 * together); kept when it prices lower. 0 or EIN_ENOMEM. */
static int switch_groups(rw_dag *d, const uint8_t *black, const int *roots, int nroots,
                         rw_cost cur, ein_error *err)
{
    const rw_egraph *eg = d->eg;
    int *in_dag = malloc(((size_t)eg->nclasses + 1) * sizeof *in_dag);
    int *moved = malloc(((size_t)eg->nclasses + 1) * sizeof *moved);
    int *old = malloc(((size_t)eg->nclasses + 1) * sizeof *old);
    int rc = 0;
    if (!in_dag || !moved || !old) {
        rc = ein_fail(err, EIN_ENOMEM, "rewrite: out of memory");
        goto out;
    }
    for (int pass = 0, better = 1; pass < 4 && better; pass++) {
        better = 0;
        dag_members(d, roots, nroots, in_dag);
        for (int x = 0; x < eg->nclasses; x++) {
            if (eg->uf[x] != x || in_dag[x])
                continue;
            int nm = switch_readers(d, black, x, in_dag, moved, old);
            if (nm >= 2) {
                rw_cost c = dag_cost(d, roots, nroots);
                if (cost_lt(c, cur)) {
                    cur = c;
                    better = 1;
                    dag_members(d, roots, nroots, in_dag);
                    continue;
                }
            }
            while (nm > 0) {
                nm--;
                d->best[moved[nm]] = old[nm];
            }
        }
    }
out:
    free(in_dag);
    free(moved);
    free(old);
    return rc;
}

/* Improve the greedy choice best[] by the local search above, then by
 * group switches; 0 or EIN_ENOMEM. */
static int improve(const rw_egraph *eg, const rw_roof *r, const uint8_t *black, int *best,
                   const int *roots, int nroots, ein_error *err)
{
    rw_dag d;
    int rc = dag_init(&d, eg, r, best, err);
    int *keep = malloc(((size_t)eg->nclasses + 1) * sizeof *keep);
    uint8_t *tie = calloc((size_t)eg->nnodes + 1, 1);
    if (rc == 0 && (!keep || !tie))
        rc = ein_fail(err, EIN_ENOMEM, "rewrite: out of memory");
    if (rc == 0) {
        rw_cost top = switch_singles(&d, black, roots, nroots, keep, tie);
        rc = switch_groups(&d, black, roots, nroots, top, err);
    }
    dag_free(&d);
    free(keep);
    free(tie);
    return rc;
}

/* The exact DAG cost of a choice (infinite run time if it has a cycle). */
static int price(const rw_egraph *eg, const rw_roof *r, int *best, const int *roots, int nroots,
                 rw_cost *out, ein_error *err)
{
    rw_dag d;
    int rc = dag_init(&d, eg, r, best, err);
    if (rc == 0)
        *out = dag_cost(&d, roots, nroots);
    dag_free(&d);
    return rc;
}

/* ILP extraction; keeps the solver's choice when it prices lower. */
static int ilp(const rw_egraph *eg, const rw_roof *r, const uint8_t *black, int *best,
               const int *roots, int nroots, double time_s, pl_rewrite_stats *st, ein_error *err)
{
    double *run = malloc(((size_t)eg->nnodes + 1) * sizeof *run);
    double *pre = malloc(((size_t)eg->nnodes + 1) * sizeof *pre);
    int *alt = malloc(((size_t)eg->nclasses + 1) * sizeof *alt);
    int rc = 0, optimal = 0;
    rw_cost a, b;
    if (!run || !pre || !alt) {
        rc = ein_fail(err, EIN_ENOMEM, "rewrite: out of memory");
        goto out;
    }
    for (int i = 0; i < eg->nnodes; i++) {
        rw_cost c = enode_cost(eg, &eg->nodes[i], r);
        run[i] = c.run;
        pre[i] = c.pre;
    }
    memcpy(alt, best, (size_t)eg->nclasses * sizeof *alt);
    if ((rc = rw_ilp_extract(eg, run, pre, black, roots, nroots, time_s, alt, &optimal, err)) < 0)
        goto out;
    if ((rc = price(eg, r, best, roots, nroots, &a, err)) < 0 ||
        (rc = price(eg, r, alt, roots, nroots, &b, err)) < 0)
        goto out;
    st->ilp_optimal = optimal;
    if (isfinite(b.run) && cost_lt(b, a)) {
        memcpy(best, alt, (size_t)eg->nclasses * sizeof *alt);
        st->ilp_improved = 1;
    }
out:
    free(run);
    free(pre);
    free(alt);
    return rc;
}

/* ---- e-graph -> graph -------------------------------------------------- */

typedef struct rw_emit {
    const rw_egraph *eg;
    const pl_graph *src;
    pl_graph *out;
    const int *best;
    int *memo;            /* class -> node id in out, -1 */
    int *name_of;         /* class -> source node whose name it takes, -1 */
    uint8_t *on_stack;
    int fresh;
} rw_emit;

static void fresh_name(rw_emit *e, char *buf, size_t len)
{
    do
        snprintf(buf, len, "rw%d", e->fresh++);
    while (pl_graph_find(e->src, buf) >= 0 || pl_graph_find(e->out, buf) >= 0);
}

static int emit(rw_emit *e, int c, ein_error *err)
{
    c = rw_find_const(e->eg, c);
    if (e->memo[c] >= 0)
        return e->memo[c];
    if (e->on_stack[c])
        return ein_fail(err, EIN_EINVAL, "rewrite: extraction found a cycle at class %d", c);
    if (e->best[c] < 0)
        return ein_fail(err, EIN_EINVAL, "rewrite: class %d has no finite-cost form", c);
    e->on_stack[c] = 1;
    const rw_node *n = &e->eg->nodes[e->best[c]];
    int ins[PL_MAX_INPUTS];
    for (int i = 0; i < n->nch; i++)
        if ((ins[i] = emit(e, n->ch[i], err)) < 0)
            return ins[i];
    char name[EIN_NAME_MAX];
    int nm = e->name_of[c];
    if (nm >= 0 && pl_graph_find(e->out, e->src->nodes[nm].name) < 0)
        snprintf(name, sizeof name, "%s", e->src->nodes[nm].name);
    else
        fresh_name(e, name, sizeof name);
    int id;
    switch (n->op) {
    case RW_INPUT:
        id = pl_graph_find(e->out, e->src->nodes[n->p[0]].name);
        break;
    case RW_MATMUL:
        id = pl_graph_add_matmul(e->out, name, ins[0], ins[1], err);
        break;
    case RW_ADD:
        id = pl_graph_add_binary(e->out, name, EIN_BIN_ADD, ins[0], ins[1], err);
        break;
    case RW_CONCAT:
        id = pl_graph_add_concat(e->out, name, (int)n->p[0], ins, n->nch, err);
        break;
    case RW_UNARY: {
        double v;
        memcpy(&v, &n->p[1], sizeof v);
        id = pl_graph_add_unary(e->out, name, (ein_unary)n->p[0], v, ins[0], err);
        break;
    }
    case RW_BINARY:
        id = pl_graph_add_binary(e->out, name, (ein_binary)n->p[0], ins[0], ins[1], err);
        break;
    case RW_TRANSPOSE:
        id = pl_graph_add_einsum(e->out, name, "ij->ji", ins[0], -1, err);
        break;
    case RW_SLICE:
        id = pl_graph_add_slice(e->out, name, ins[0], (int)n->p[0], n->p[1], n->p[2], err);
        break;
    default: { /* opaque: the source operator on the new inputs */
        pl_node proto = e->src->nodes[n->p[0]];
        proto.saved = 0;
        for (int i = 0; i < n->nch; i++)
            proto.inputs[i] = ins[i];
        if (proto.kernel.list) {
            int32_t cnt = proto.kernel.nlist + (proto.kind == PL_CONCAT);
            int64_t *l = malloc((size_t)(cnt > 0 ? cnt : 1) * sizeof *l);
            if (!l)
                return ein_fail(err, EIN_ENOMEM, "rewrite: out of memory");
            memcpy(l, e->src->nodes[n->p[0]].kernel.list, (size_t)cnt * sizeof *l);
            proto.kernel.list = l;
        }
        id = pl_graph_append(e->out, name, &proto, err);
        if (id < 0)
            free(proto.kernel.list);
        break;
    }
    }
    e->on_stack[c] = 0;
    if (id >= 0)
        e->memo[c] = id;
    return id;
}

static int extract(const rw_egraph *eg, const pl_graph *src, const int *cls, const int *best,
                   pl_graph **out, ein_error *err)
{
    rw_emit e = {.eg = eg, .src = src, .best = best};
    int rc = 0;
    e.out = pl_graph_new();
    e.memo = malloc((size_t)eg->nclasses * sizeof *e.memo);
    e.name_of = malloc((size_t)eg->nclasses * sizeof *e.name_of);
    e.on_stack = calloc((size_t)eg->nclasses, 1);
    if (!e.out || !e.memo || !e.name_of || !e.on_stack) {
        rc = ein_fail(err, EIN_ENOMEM, "rewrite: out of memory");
        goto out;
    }
    memset(e.memo, 0xff, (size_t)eg->nclasses * sizeof *e.memo);
    memset(e.name_of, 0xff, (size_t)eg->nclasses * sizeof *e.name_of);
    /* Names: saved outputs first, then the other operators, source order. */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < src->nnodes; i++) {
            const pl_node *s = &src->nodes[i];
            int c = rw_find_const(eg, cls[i]);
            if (s->kind != PL_INPUT && (pass ? 1 : s->saved) && e.name_of[c] < 0)
                e.name_of[c] = i;
        }
    /* Every input, in order and under its name. */
    for (int i = 0; i < src->nnodes && rc == 0; i++) {
        const pl_node *s = &src->nodes[i];
        if (s->kind != PL_INPUT)
            continue;
        int id = s->state ? pl_graph_add_state(e.out, s->name, s->dtype, s->rank, s->shape, err)
                          : pl_graph_add_input(e.out, s->name, s->dtype, s->rank, s->shape, err);
        if (id < 0) {
            rc = id;
            break;
        }
        for (int a = 0; a < s->rank; a++)
            if (s->axis_name[a][0])
                pl_graph_set_axis_name(e.out, id, a, s->axis_name[a]);
    }
    for (int i = 0; i < src->nnodes && rc == 0; i++) {
        const pl_node *s = &src->nodes[i];
        if (!s->saved)
            continue;
        int id = emit(&e, cls[i], err);
        if (id < 0) {
            rc = id;
            break;
        }
        if (strcmp(e.out->nodes[id].name, s->name) != 0) {
            /* Two saved outputs computed by one class: save an alias. */
            id = pl_graph_add_unary(e.out, s->name, EIN_UN_SCALE, 1.0, id, err);
            if (id < 0) {
                rc = id;
                break;
            }
        }
        rc = pl_graph_save(e.out, id, err);
    }
out:
    free(e.memo);
    free(e.name_of);
    free(e.on_stack);
    if (rc < 0) {
        pl_graph_free(e.out);
        return rc;
    }
    *out = e.out;
    return 0;
}

/* Where the shipped rules are: $EIN_REWRITE_RULES, else the installed
 * folder next to this code (share/einsummable-c/rules beside the lib/ or
 * bin/ it runs from: a moved installation still finds its own), else the
 * configured one, else (a build that was not installed) the source tree's. */
static const char *rules_dir(void)
{
    static _Thread_local char near[4096];
    const char *env = ein_knob_get(EIN_KNOB_REWRITE_RULES);
    struct stat st;
    if (env && *env)
        return env;
    if (ein_self_find(PL_REWRITE_RULES_REL, R_OK | X_OK, near, sizeof near) == 0)
        return near;
    if (stat(PL_REWRITE_RULES_DIR, &st) == 0)
        return PL_REWRITE_RULES_DIR;
    return PL_REWRITE_RULES_SRCDIR;
}

int pl_rewrite(const pl_graph *in, const pl_rewrite_opts *o, pl_graph **out,
               pl_rewrite_stats *st, ein_error *err)
{
    pl_rewrite_opts dflt = {0};
    pl_rewrite_stats dummy;
    if (!o)
        o = &dflt;
    if (!st)
        st = &dummy;
    memset(st, 0, sizeof *st);
    if (!in || !out)
        return ein_fail(err, EIN_EINVAL, "rewrite: NULL graph");
    int rc;
    pl_rw_rules *rules = NULL;
    rw_egraph *eg = NULL;
    int *cls = NULL, *best = NULL, *roots = NULL;
    uint8_t *w = NULL, *black = NULL;
    rw_roof roof = roof_of(o);
    if ((rc = pl_rw_rules_load(o->rules_path ? o->rules_path : rules_dir(), &rules,
                               err)) < 0)
        return rc;
    st->nrules = pl_rw_rules_count(rules);
    if ((rc = pl_rewrite_graph_cost(in, o, &st->cost_before, &st->flops_before, err)) < 0)
        goto out;
    w = calloc((size_t)in->nnodes + 1, 1);
    cls = malloc(((size_t)in->nnodes + 1) * sizeof *cls);
    eg = rw_egraph_new(in, w);
    if (!w || !cls || !eg) {
        rc = ein_fail(err, EIN_ENOMEM, "rewrite: out of memory");
        goto out;
    }
    for (int i = 0; i < in->nnodes; i++)
        w[i] = in->nodes[i].kind == PL_INPUT && is_weight_name(o, in->nodes[i].name);
    if ((rc = to_egraph(eg, in, cls, err)) < 0 || (rc = rw_saturate(eg, rules, o, st, err)) < 0)
        goto out;
    double t0 = ein_now_s();
    best = malloc(((size_t)eg->nclasses + 1) * sizeof *best);
    if (!best) {
        rc = ein_fail(err, EIN_ENOMEM, "rewrite: out of memory");
        goto out;
    }
    pl_graph *res = NULL;
    int nroots = 0;
    roots = malloc(((size_t)in->nnodes + 1) * sizeof *roots);
    if (!roots) {
        rc = ein_fail(err, EIN_ENOMEM, "rewrite: out of memory");
        goto out;
    }
    for (int i = 0; i < in->nnodes; i++)
        if (in->nodes[i].saved)
            roots[nroots++] = cls[i];
    black = calloc((size_t)eg->nnodes + 1, 1);
    if (!black) {
        rc = ein_fail(err, EIN_ENOMEM, "rewrite: out of memory");
        goto out;
    }
    if ((rc = cycle_filter(eg, black, err)) < 0)
        goto out;
    st->blacklisted = rc;
    if ((rc = greedy(eg, &roof, black, best, err)) < 0)
        goto out;
    if (o->prefer_new) /* the filtered e-graph is acyclic: any choice is */
        for (int c = 0; c < eg->nclasses; c++) {
            if (eg->uf[c] != c)
                continue;
            const rw_ivec *v = &eg->classes[c].nodes;
            for (int k = 0; k < v->n; k++)
                if (!eg->nodes[v->v[k]].dead && !black[v->v[k]] && v->v[k] > best[c])
                    best[c] = v->v[k];
        }
    if ((!o->prefer_new && (rc = improve(eg, &roof, black, best, roots, nroots, err)) < 0) ||
        (o->ilp && (rc = ilp(eg, &roof, black, best, roots, nroots, o->ilp_time_s, st, err)) < 0) ||
        (rc = extract(eg, in, cls, best, &res, err)) < 0)
        goto out;
    st->extract_s = ein_now_s() - t0;
    st->enodes = eg->nlive;
    st->eclasses = rw_egraph_nclasses(eg);
    rc = pl_rewrite_graph_cost(res, o, &st->cost_after, &st->flops_after, err);
    if (rc < 0)
        pl_graph_free(res);
    else
        *out = res;
out:
    free(black);
    free(roots);
    free(best);
    free(cls);
    rw_egraph_free(eg);
    free(w);
    pl_rw_rules_free(rules);
    return rc;
}

/* ---- reports ------------------------------------------------------------ */

static void expr_put(char *buf, size_t len, size_t *at, const char *s)
{
    size_t n = strlen(s);
    if (*at + n + 1 < len) {
        memcpy(buf + *at, s, n + 1);
        *at += n;
    } else if (len > 4) {
        memcpy(buf + (len > 4 ? len - 4 : 0), "...", 4);
        *at = len;
    }
}

static void expr_rec(const pl_graph *g, int id, char *buf, size_t len, size_t *at, int depth)
{
    const pl_node *n = &g->nodes[id];
    if (n->kind == PL_INPUT || depth > 64) {
        expr_put(buf, len, at, n->name);
        return;
    }
    expr_put(buf, len, at, "(");
    if (!is_matmul(n)) {
        expr_put(buf, len, at, pl_node_op_name(n));
        expr_put(buf, len, at, " ");
    }
    for (int i = 0; i < n->ninputs; i++) {
        if (i)
            expr_put(buf, len, at, " ");
        expr_rec(g, n->inputs[i], buf, len, at, depth + 1);
    }
    expr_put(buf, len, at, ")");
}

int pl_rewrite_expr(const pl_graph *g, int id, char *buf, size_t len)
{
    size_t at = 0;
    if (!g || id < 0 || id >= g->nnodes || !buf || len == 0)
        return EIN_EINVAL;
    buf[0] = '\0';
    expr_rec(g, id, buf, len, &at, 0);
    return 0;
}
