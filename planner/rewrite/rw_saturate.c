/* planner/rewrite/rw_saturate.c — equality saturation with compiled rules
 * (rw_rules_int.h): e-matching, applying, the backoff scheduler and the
 * saturation loop, bounded by work (docs/rewrite.md). */
#include <stdlib.h>
#include <string.h>

#include "common/base/ein_clock.h"
#include "common/base/ein_vec.h"
#include "planner/rewrite/rw_rules_int.h"

/* ---- e-matching ------------------------------------------------------- */

typedef struct rw_subst {
    int64_t v[RW_MAX_VARS];
    uint32_t bound;
    int root;
} rw_subst;

typedef struct rw_mvec { rw_subst *v; int n, cap; } rw_mvec;

typedef struct rw_mctx {
    rw_egraph *eg;
    const pl_rw_rules *r;
    rw_mvec *out;
    int limit;       /* stop collecting beyond this many */
    int nomem;
} rw_mctx;

#define RW_STACK 64

/* Match the pairs (pats[i], cls[i]) under *s; every full match is added. */
static void ematch(rw_mctx *m, const int *pats, const int *cls, int n, rw_subst *s)
{
    if (m->out->n > m->limit || m->nomem)
        return;
    if (n == 0) {
        if (ein_vec_reserve(&m->out->v, &m->out->cap, (int64_t)m->out->n + 1,
                            sizeof *m->out->v) < 0) {
            m->nomem = 1;
            return;
        }
        m->out->v[m->out->n++] = *s;
        return;
    }
    const rw_pat *pt = &m->r->pats[pats[0]];
    int c = rw_find(m->eg, cls[0]);
    if (pt->var >= 0) {
        if (s->bound & (1u << pt->var)) {
            if (rw_find(m->eg, (int)s->v[pt->var]) == c)
                ematch(m, pats + 1, cls + 1, n - 1, s);
            return;
        }
        s->bound |= 1u << pt->var;
        s->v[pt->var] = c;
        ematch(m, pats + 1, cls + 1, n - 1, s);
        s->bound &= ~(1u << pt->var);
        return;
    }
    if (n - 1 + pt->nch > RW_STACK)
        return;
    int np[RW_STACK], nc[RW_STACK];
    memcpy(np + pt->nch, pats + 1, (size_t)(n - 1) * sizeof *np);
    memcpy(nc + pt->nch, cls + 1, (size_t)(n - 1) * sizeof *nc);
    for (int i = 0; i < pt->nch; i++)
        np[i] = pt->ch[i];
    const rw_ivec *nodes = &m->eg->classes[c].nodes;
    for (int k = 0; k < nodes->n; k++) {
        const rw_node *nd = &m->eg->nodes[nodes->v[k]];
        if (nd->dead || nd->op != pt->op || nd->nch != pt->nch)
            continue;
        uint32_t saved = s->bound;
        int ok = 1;
        for (int i = 0; i < pt->np && ok; i++) {
            const rw_pexpr *e = &m->r->ex[pt->pe[i]];
            if (e->kind == PX_LIT)
                ok = nd->p[i] == e->v;
            else if (s->bound & (1u << e->var))
                ok = nd->p[i] == s->v[e->var];
            else {
                s->bound |= 1u << e->var;
                s->v[e->var] = nd->p[i];
            }
        }
        if (ok) {
            for (int i = 0; i < pt->nch; i++)
                nc[i] = nd->ch[i];
            ematch(m, np, nc, n - 1 + pt->nch, s);
        }
        s->bound = saved;
    }
}

static int search(rw_egraph *eg, const pl_rw_rules *r, int pat, int limit, rw_mvec *out)
{
    rw_mctx m = {.eg = eg, .r = r, .out = out, .limit = limit};
    for (int c = 0; c < eg->nclasses && out->n <= limit && !m.nomem; c++) {
        if (eg->uf[c] != c)
            continue;
        rw_subst s = {.root = c};
        ematch(&m, &pat, &c, 1, &s);
    }
    return m.nomem ? EIN_ENOMEM : 0;
}

/* ---- applying --------------------------------------------------------- */

/* A parameter under a match: DIM reads the shape of the variable's class. */
static int eval_ex_eg(rw_egraph *eg, const pl_rw_rules *r, int ei, const rw_subst *s,
                      int64_t *out)
{
    const rw_pexpr *e = &r->ex[ei];
    int64_t a, b;
    switch (e->kind) {
    case PX_LIT: *out = e->v; return 0;
    case PX_VAR: *out = s->v[e->var]; return 0;
    case PX_RANK: *out = eg->classes[rw_find(eg, (int)s->v[e->var])].rank; return 0;
    case PX_DIM: {
        const rw_class *c = &eg->classes[rw_find(eg, (int)s->v[e->var])];
        if (eval_ex_eg(eg, r, e->a, s, &a) < 0 || a < 0 || a >= c->rank)
            return EIN_ESHAPE;
        *out = c->shape[a];
        return 0;
    }
    default:
        if (eval_ex_eg(eg, r, e->a, s, &a) < 0 || eval_ex_eg(eg, r, e->b, s, &b) < 0)
            return EIN_ESHAPE;
        *out = e->kind == PX_ADD ? a + b : a - b;
        return 0;
    }
}

/* Build a right side under *s; returns its class or a negative code
 * (EIN_ESHAPE: the target does not type-check and is not added). */
static int instantiate(rw_egraph *eg, const pl_rw_rules *r, int pi, const rw_subst *s,
                       ein_error *err)
{
    const rw_pat *pt = &r->pats[pi];
    if (pt->var >= 0)
        return rw_find(eg, (int)s->v[pt->var]);
    rw_node n = {.op = pt->op, .nch = pt->nch};
    for (int i = 0; i < pt->nch; i++) {
        int c = instantiate(eg, r, pt->ch[i], s, err);
        if (c < 0)
            return c;
        n.ch[i] = c;
    }
    for (int i = 0; i < pt->np; i++)
        if (eval_ex_eg(eg, r, pt->pe[i], s, &n.p[i]) < 0)
            return ein_fail(err, EIN_ESHAPE, "rewrite: parameter out of range");
    return rw_add(eg, &n, err);
}

/* Apply one (single or joined) match; counts into *st. */
static int apply_one(rw_egraph *eg, const rw_rule *ru, const pl_rw_rules *r, const rw_subst *s,
                     const int *roots, pl_rewrite_stats *st, ein_error *err)
{
    int n = ru->multi ? 2 : 1, cls[2];
    ein_error scratch = {0};
    for (int i = 0; i < ru->nconds; i++) {
        int64_t a, b;
        const rw_cond *c = &ru->conds[i];
        if (eval_ex_eg(eg, r, c->a, s, &a) < 0 || eval_ex_eg(eg, r, c->b, s, &b) < 0 ||
            !(c->kind == PC_EQ ? a == b : c->kind == PC_LE ? a <= b : a < b))
            return 0; /* the condition does not hold: not a match */
    }
    /* Shape-check every target before adding anything that merges. */
    for (int j = 0; j < n; j++) {
        cls[j] = instantiate(eg, r, ru->rhs[j], s, &scratch);
        if (cls[j] == EIN_ESHAPE) {
            st->rejected++;
            return 0;
        }
        if (cls[j] < 0)
            return ein_fail(err, cls[j], "%s", scratch.msg);
    }
    for (int j = 0; j < n; j++) {
        int rc = rw_union(eg, roots[j], cls[j], err);
        if (rc < 0)
            return ein_error_prefix(err, "rule %s (%s)", ru->name, ru->where);
        st->applied += rc;
    }
    return 0;
}

static uint64_t key_of(rw_egraph *eg, const rw_subst *s, uint32_t shared)
{
    uint64_t h = 1469598103934665603ull;
    for (int v = 0; v < RW_MAX_VARS; v++)
        if (shared & (1u << v))
            h = (h ^ (uint64_t)rw_find(eg, (int)s->v[v])) * 1099511628211ull;
    return h;
}

/* Join the matches of a multi rule on their shared variables (hash join)
 * and apply each pair; *npairs counts the pairs. Stops past `limit`. */
static int apply_multi(rw_egraph *eg, const rw_rule *ru, const pl_rw_rules *r, rw_mvec *ma,
                       rw_mvec *mb, long limit, int dry, long *npairs, pl_rewrite_stats *st,
                       ein_error *err)
{
    uint32_t shared = ru->vars_of[0] & ru->vars_of[1];
    int cap = 1;
    while (cap < 2 * mb->n + 2)
        cap *= 2;
    int *head = malloc((size_t)cap * sizeof *head), *nxt = malloc(((size_t)mb->n + 1) * sizeof *nxt);
    uint64_t *key = malloc(((size_t)mb->n + 1) * sizeof *key);
    int rc = 0;
    if (!head || !nxt || !key) {
        rc = ein_fail(err, EIN_ENOMEM, "rewrite: out of memory");
        goto out;
    }
    memset(head, 0xff, (size_t)cap * sizeof *head);
    for (int i = 0; i < mb->n; i++) {
        key[i] = key_of(eg, &mb->v[i], shared);
        size_t b = key[i] & (size_t)(cap - 1);
        nxt[i] = head[b];
        head[b] = i;
    }
    *npairs = 0;
    for (int i = 0; i < ma->n && rc == 0; i++) {
        uint64_t k = key_of(eg, &ma->v[i], shared);
        for (int j = head[k & (size_t)(cap - 1)]; j >= 0 && rc == 0; j = nxt[j]) {
            if (key[j] != k)
                continue;
            const rw_subst *a = &ma->v[i], *b = &mb->v[j];
            int same = 1;
            for (int v = 0; v < RW_MAX_VARS && same; v++)
                if (shared & (1u << v))
                    same = ru->var_int[v] ? a->v[v] == b->v[v]
                                          : rw_find(eg, (int)a->v[v]) == rw_find(eg, (int)b->v[v]);
            if (!same || rw_find(eg, a->root) == rw_find(eg, b->root))
                continue;
            if (++*npairs > limit)
                goto out;
            if (dry)
                continue;
            rw_subst m = *a;
            for (int v = 0; v < RW_MAX_VARS; v++)
                if (b->bound & (1u << v)) {
                    m.v[v] = b->v[v];
                    m.bound |= 1u << v;
                }
            int roots[2] = {a->root, b->root};
            rc = apply_one(eg, ru, r, &m, roots, st, err);
        }
    }
out:
    free(head);
    free(nxt);
    free(key);
    return rc;
}

/* ---- the saturation loop ---------------------------------------------- */

const char *pl_rewrite_stop_name(pl_rewrite_stop s)
{
    switch (s) {
    case PL_RW_SATURATED: return "saturated";
    case PL_RW_ITER_LIMIT: return "iteration limit";
    case PL_RW_NODE_LIMIT: return "e-node limit";
    case PL_RW_WORK_LIMIT: return "work limit";
    }
    return "?";
}

/* The saturation loop's state, passed explicitly (egg's Runner and
 * BackoffScheduler): its limits and work, and the backoff statistics of
 * each rule, which are the run's, not the rules' (a rule set is read-only
 * here and can be shared between runs). */
typedef struct rw_ban {
    int times_banned, banned_until;
} rw_ban;

typedef struct rw_runner {
    int iter_limit, node_limit, k_multi, match_limit, ban_length;
    long work_limit, work;  /* see pl_rewrite_opts.work_limit */
    double t0;              /* for the report only */
    rw_ban *ban;            /* one per rule */
    rw_mvec *m;             /* the matches of each rule's lhs[0], lhs[1] */
} rw_runner;

static int runner_init(rw_runner *run, const pl_rw_rules *r, const pl_rewrite_opts *o, ein_error *err)
{
    run->iter_limit = o->iter_limit > 0 ? o->iter_limit : 30;
    run->node_limit = o->node_limit > 0 ? o->node_limit : 100000;
    run->work_limit = o->work_limit > 0 ? o->work_limit : PL_REWRITE_DEFAULT_WORK;
    run->work = 0;
    run->k_multi = o->k_multi == 0 ? 1 : o->k_multi < 0 ? 0 : o->k_multi;
    run->match_limit = o->match_limit > 0 ? o->match_limit : 1000;
    run->ban_length = o->ban_length > 0 ? o->ban_length : 5;
    run->t0 = ein_now_s();
    run->m = calloc((size_t)r->n * 2 + 1, sizeof *run->m);
    run->ban = calloc((size_t)r->n + 1, sizeof *run->ban);
    if (!run->m || !run->ban) {
        free(run->m);
        free(run->ban);
        return ein_fail(err, EIN_ENOMEM, "rewrite: out of memory");
    }
    return 0;
}

static void runner_release(rw_runner *run, const pl_rw_rules *r)
{
    for (int i = 0; i < 2 * r->n; i++)
        free(run->m[i].v);
    free(run->m);
    free(run->ban);
}

/* The one limits check: the limit the run has passed (e-nodes, then
 * work), or -1 while it may go on. */
static int runner_limit(const rw_runner *run, const rw_egraph *eg)
{
    if (eg->nlive > run->node_limit)
        return PL_RW_NODE_LIMIT;
    if (run->work > run->work_limit)
        return PL_RW_WORK_LIMIT;
    return -1;
}

/* Search every rule not banned (egg searches all, then applies); a rule
 * whose matches pass its threshold is banned, longer each time. Sets
 * *banned if any rule sits out this iteration. */
static int runner_search(rw_runner *run, rw_egraph *eg, const pl_rw_rules *r, int iter,
                         pl_rewrite_stats *st, int *banned, ein_error *err)
{
    int rc = 0;
    for (int i = 0; i < r->n && rc == 0; i++) {
        const rw_rule *ru = &r->rules[i];
        rw_ban *b = &run->ban[i];
        rw_mvec *m = &run->m[2 * i];
        m[0].n = m[1].n = 0;
        if (ru->multi && iter >= run->k_multi)
            continue;
        if (b->banned_until > iter) {
            *banned = 1;
            continue;
        }
        long threshold = (long)run->match_limit << b->times_banned;
        for (int j = 0; j < (ru->multi ? 2 : 1) && rc == 0; j++)
            rc = search(eg, r, ru->lhs[j], (int)threshold, &m[j]);
        if (rc < 0)
            return ein_fail(err, rc, "rewrite: out of memory");
        long count = m[0].n;
        if (ru->multi && rc == 0)
            rc = apply_multi(eg, ru, r, &m[0], &m[1], threshold, 1, &count, st, err);
        /* The scan of every class, and each match (or joined pair) found. */
        run->work += eg->nclasses + m[0].n + m[1].n + (ru->multi ? count : 0);
        if (count > threshold) { /* backoff: ban, longer each time */
            b->banned_until = iter + (run->ban_length << b->times_banned);
            b->times_banned++;
            m[0].n = m[1].n = 0;
            *banned = 1;
        }
    }
    return rc;
}

/* Apply what runner_search found, until a limit is passed. */
static int runner_apply(rw_runner *run, rw_egraph *eg, const pl_rw_rules *r, pl_rewrite_stats *st,
                        ein_error *err)
{
    int rc = 0;
    for (int i = 0; i < r->n && rc == 0; i++) {
        const rw_rule *ru = &r->rules[i];
        rw_mvec *m = &run->m[2 * i];
        if (ru->multi) {
            long np;
            if (m[0].n > 0)
                rc = apply_multi(eg, ru, r, &m[0], &m[1], 1L << 40, 0, &np, st, err);
        } else
            for (int k = 0; k < m[0].n && rc == 0; k++)
                rc = apply_one(eg, ru, r, &m[0].v[k], &m[0].v[k].root, st, err);
        if (runner_limit(run, eg) >= 0)
            break;
    }
    return rc;
}

int rw_saturate(rw_egraph *eg, const pl_rw_rules *r, const pl_rewrite_opts *o, pl_rewrite_stats *st,
                ein_error *err)
{
    rw_runner run;
    int rc, iter, stop;
    if ((rc = runner_init(&run, r, o, err)) < 0)
        return rc;
    st->stop = PL_RW_ITER_LIMIT;
    for (iter = 0; iter < run.iter_limit;) {
        int nodes0 = eg->nnodes, banned = 0;
        long applied0 = st->applied;
        if ((rc = runner_search(&run, eg, r, iter, st, &banned, err)) < 0 ||
            (rc = runner_apply(&run, eg, r, st, err)) < 0 || (rc = rw_egraph_rebuild(eg, err)) < 0)
            break;
        iter++;
        if ((stop = runner_limit(&run, eg)) >= 0) {
            st->stop = (pl_rewrite_stop)stop;
            break;
        }
        if (eg->nnodes == nodes0 && st->applied == applied0) {
            if (!banned) {
                st->stop = PL_RW_SATURATED;
                break;
            }
            for (int i = 0; i < r->n; i++) /* nothing else to do: lift the bans */
                run.ban[i].banned_until = 0;
        }
    }
    st->iterations = iter;
    st->work = run.work;
    st->saturate_s = ein_now_s() - run.t0;
    runner_release(&run, r);
    return rc;
}
