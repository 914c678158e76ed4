/* exchange/xp_program_check.c — ExProg validity: exact covers by
 * partitions, paths, the closure of Def. 5.5 and the membership
 * enumeration (see xp_program.h). */
#include "exchange/xp_program.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/ein_vec.h"

/* Exact cover of `rest` by disjoint candidates; depth-first on the lowest
 * uncovered element (each element lies in few candidates in practice). */
static int cover(const xp_program *p, xp_word *rest, xp_word *const *have, int n,
                 int *pick, int depth)
{
    int first = -1;
    for (int w = 0; w < p->nwords && first < 0; w++)
        if (rest[w])
            first = w * 64 + __builtin_ctzll(rest[w]);
    if (first < 0)
        return depth;
    for (int i = 0; i < n; i++) {
        if (!xp_set_has(have[i], first) || !xp_set_subset(p, have[i], rest))
            continue;
        for (int w = 0; w < p->nwords; w++)
            rest[w] &= ~have[i][w];
        pick[depth] = i;
        int r = cover(p, rest, have, n, pick, depth + 1);
        if (r >= 0)
            return r;
        for (int w = 0; w < p->nwords; w++)
            rest[w] |= have[i][w];
    }
    return -1;
}

int xp_partition_find(const xp_program *p, const xp_word *x, xp_word *const *have,
                      int n, int *pick)
{
    xp_word *rest = xp_set_dup(p, x);
    if (!rest)
        return -1;
    int r = cover(p, rest, have, n, pick, 0);
    free(rest);
    return r;
}

/* The closure of Def. 5.5, per site: the distinct aggregates held there,
 * each with the parts of the atom held as sorted disjoint intervals
 * [lo, hi) (touching ones merged), in units of 1/L (L: the chunk units;
 * [0, 1) with L = 1 when nothing is chunked). */
typedef struct held_set {
    xp_word *set;        /* owned */
    int span[2];         /* its span (xp_set_span) */
    int64_t *iv;         /* 2 * niv bounds, capiv pairs (ein_vec) */
    int niv, capiv;
} held_set;

typedef struct held {
    held_set *e;         /* n sets, cap (ein_vec) */
    int n, cap;
} held;

static int held_find(const xp_program *p, const held *h, const xp_word *x)
{
    int f, l;
    xp_set_span(p, x, &f, &l);
    for (int i = 0; i < h->n; i++)
        if (h->e[i].span[0] == f && h->e[i].span[1] == l &&
            xp_set_equal_span(h->e[i].set, x, f, l))
            return i;
    return -1;
}

static int iv_covers(const int64_t *iv, int n, int64_t lo, int64_t hi)
{
    /* the last interval starting at or before lo (sorted, disjoint) */
    int a = 0, b = n;
    while (a < b) {
        int m = (a + b) / 2;
        if (iv[2 * m] <= lo)
            a = m + 1;
        else
            b = m;
    }
    return a > 0 && lo < iv[2 * (a - 1) + 1] && hi <= iv[2 * (a - 1) + 1];
}

/* 1 if added, 0 if held already, EIN_ENOMEM. */
static int held_add(const xp_program *p, held *h, const xp_word *x, int64_t lo, int64_t hi)
{
    int i = held_find(p, h, x);
    if (i >= 0 && iv_covers(h->e[i].iv, h->e[i].niv, lo, hi))
        return 0;
    if (i < 0) {
        if (ein_vec_reserve(&h->e, &h->cap, (int64_t)h->n + 1, sizeof *h->e) < 0)
            return EIN_ENOMEM;
        i = h->n;
        held_set *e = &h->e[i];
        e->iv = NULL;
        e->niv = e->capiv = 0;
        if (!(e->set = xp_set_dup(p, x)))
            return EIN_ENOMEM;
        xp_set_span(p, x, &e->span[0], &e->span[1]);
        h->n++;
    }
    /* iv[i] holds [lo, hi) pairs: the capacity counts pairs */
    held_set *e = &h->e[i];
    if (ein_vec_reserve(&e->iv, &e->capiv, (int64_t)e->niv + 1, 2 * sizeof *e->iv) < 0)
        return EIN_ENOMEM;
    int64_t *v = e->iv;
    int n = e->niv, k = 0;
    while (k < n && v[2 * k] < lo)
        k++;
    memmove(&v[2 * k + 2], &v[2 * k], sizeof(int64_t) * 2 * (size_t)(n - k));
    v[2 * k] = lo;
    v[2 * k + 1] = hi;
    n++;
    int w = 0;
    for (int r = 1; r < n; r++) {
        if (v[2 * r] <= v[2 * w + 1]) {
            if (v[2 * r + 1] > v[2 * w + 1])
                v[2 * w + 1] = v[2 * r + 1];
        } else {
            w++;
            v[2 * w] = v[2 * r];
            v[2 * w + 1] = v[2 * r + 1];
        }
    }
    e->niv = w + 1;
    return 1;
}

/* Do the pieces of x held cover [lo, hi)? */
static int held_has(const xp_program *p, const held *h, const xp_word *x, int64_t lo,
                    int64_t hi)
{
    int i = held_find(p, h, x);
    return i >= 0 && iv_covers(h->e[i].iv, h->e[i].niv, lo, hi);
}

/* Is [lo, hi) of x partitioned by aggregates held at the site? `cand`,
 * `pick` are scratch arrays of h->n and nin+1 entries. */
static int held_partitions(const xp_program *p, const held *h, const xp_word *x, int64_t lo,
                           int64_t hi, xp_word **cand, int *pick)
{
    int nc = 0;
    for (int i = 0; i < h->n; i++)
        if (iv_covers(h->e[i].iv, h->e[i].niv, lo, hi) &&
            xp_set_subset_span(h->e[i].set, x, h->e[i].span[0], h->e[i].span[1]))
            cand[nc++] = h->e[i].set;
    return nc > 0 && xp_partition_find(p, x, cand, nc, pick) >= 0;
}

/* A path (source, relays, destinations) may not visit a site twice: a
 * relay back through its source, or a destination that already holds the
 * data by this action, is refused. Linear: a per-site stamp of the action
 * that last visited it. */
static int check_paths(const xp_program *p, ein_error *err)
{
    int rc = 0, *seen = malloc(sizeof(int) * (size_t)(p->ngpus + 1));
    if (!seen)
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    for (int s = 0; s < p->ngpus; s++)
        seen[s] = -1;
    for (int a = 0; a < p->nact && rc == 0; a++) {
        const xp_action *ac = &p->act[a];
        for (int k = -1; k < ac->nrelay + ac->ndst && rc == 0; k++) {
            int s = k < 0 ? ac->src : k < ac->nrelay ? ac->relay[k] : ac->dst[k - ac->nrelay];
            if (seen[s] != a) {
                seen[s] = a;
                continue;
            }
            if (ac->line)
                rc = ein_fail(err, EIN_EINVAL,
                              "not well-formed: the action at line %d:%d visits site %d twice "
                              "(a path may not visit a site twice)", ac->line, ac->col, s);
            else
                rc = ein_fail(err, EIN_EINVAL,
                              "not well-formed: action %d visits site %d twice (a path may "
                              "not visit a site twice)", a, s);
        }
    }
    free(seen);
    return rc;
}

static int check_closure(const xp_program *p, const int *orig, ein_error *err);

/* Chunked programs: the closure of the program with its all-chunk actions
 * expanded, messages naming the action as written. */
static int check_resolved(const xp_program *p, ein_error *err)
{
    if (!xp_program_chunked(p))
        return check_closure(p, NULL, err);
    xp_program *q = NULL;
    int *orig = NULL;
    int rc = xp_program_expand_chunks(p, &q, &orig, err);
    if (rc == 0)
        rc = check_closure(q, orig, err);
    xp_program_free(q);
    free(orig);
    return rc;
}

/* The state of one closure check: per site what it holds (st), per
 * action whether it fired and the source version it was last tried at
 * (an action not enabled is tried again only once its source holds more;
 * the closure is the same in any order). All arrays owned (closure_free). */
typedef struct closure {
    const xp_program *p;
    ein_error *err;
    int64_t L;              /* chunk units */
    held *st;
    char *fired;
    long *ver, *tried;
    xp_word *one;           /* scratch set */
    int *pick;              /* held_partitions scratch, nin + 1 */
    xp_word **cand;         /* held_partitions scratch, ncand (ein_vec) */
    int ncand;
} closure;

static void closure_free(closure *C)
{
    if (C->st)
        for (int s = 0; s < C->p->ngpus; s++) {
            for (int i = 0; i < C->st[s].n; i++) {
                free(C->st[s].e[i].set);
                free(C->st[s].e[i].iv);
            }
            free(C->st[s].e);
        }
    free(C->st);
    free(C->cand);
    free(C->pick);
    free(C->fired);
    free(C->ver);
    free(C->tried);
    free(C->one);
}

static int closure_alloc(closure *C)
{
    const xp_program *p = C->p;
    C->st = calloc((size_t)p->ngpus, sizeof *C->st);
    C->fired = calloc((size_t)p->nact + 1, 1);
    C->ver = calloc((size_t)p->ngpus + 1, sizeof(long));
    C->tried = malloc(sizeof(long) * (size_t)(p->nact + 1));
    C->one = xp_set_new(p);
    C->pick = malloc(sizeof(int) * (size_t)(p->nin + 1));
    if (!C->st || !C->fired || !C->one || !C->pick || !C->ver || !C->tried)
        return ein_fail(C->err, EIN_ENOMEM, "out of memory");
    for (int a = 0; a < p->nact; a++)
        C->tried[a] = -1;
    return 0;
}

/* Every action's source and destinations are sites (no unresolved
 * partition). */
static int check_actions_resolved(const xp_program *p, ein_error *err)
{
    for (int a = 0; a < p->nact; a++) {
        const xp_action *ac = &p->act[a];
        int bad = ac->src < 0;
        for (int d = 0; d < ac->ndst; d++)
            bad |= ac->dst[d] < 0;
        if (bad)
            return ein_fail(err, EIN_EINVAL, "action %d names an unresolved partition", a);
    }
    return 0;
}

/* Every IN atom, whole, at its site. */
static int closure_seed_ins(closure *C)
{
    const xp_program *p = C->p;
    for (int i = 0; i < p->nin; i++) {
        memset(C->one, 0, sizeof(xp_word) * (size_t)p->nwords);
        xp_set_add(C->one, i);
        if (held_add(p, &C->st[p->in[i].site], C->one, 0, C->L) < 0)
            return ein_fail(C->err, EIN_ENOMEM, "out of memory");
    }
    return 0;
}

/* Fire action a if its source holds a partition of its part: it and
 * every site on its path then hold the part. 1 fired, 0 not enabled,
 * < 0 failure. */
static int closure_fire(closure *C, int a)
{
    const xp_program *p = C->p;
    const xp_action *ac = &p->act[a];
    C->tried[a] = C->ver[ac->src];
    held *h = &C->st[ac->src];
    if (ein_vec_reserve(&C->cand, &C->ncand, h->n, sizeof *C->cand) < 0)
        return ein_fail(C->err, EIN_ENOMEM, "out of memory");
    int64_t k = ac->nchunks > 0 ? ac->nchunks : 1;
    int64_t lo = C->L / k * ac->chunk, hi = lo + C->L / k;
    if (!held_partitions(p, h, ac->set, lo, hi, C->cand, C->pick))
        return 0;
    C->fired[a] = 1;
    int r = held_add(p, h, ac->set, lo, hi);
    C->ver[ac->src] += r > 0;
    for (int d = 0; r >= 0 && d < ac->nrelay; d++)
        if ((r = held_add(p, &C->st[ac->relay[d]], ac->set, lo, hi)) > 0)
            C->ver[ac->relay[d]]++;
    for (int d = 0; r >= 0 && d < ac->ndst; d++)
        if ((r = held_add(p, &C->st[ac->dst[d]], ac->set, lo, hi)) > 0)
            C->ver[ac->dst[d]]++;
    if (r < 0)
        return ein_fail(C->err, EIN_ENOMEM, "out of memory");
    return 1;
}

/* Closure: fire enabled actions until nothing changes. */
static int closure_run(closure *C)
{
    const xp_program *p = C->p;
    for (int changed = 1; changed;) {
        changed = 0;
        for (int a = 0; a < p->nact; a++) {
            if (C->fired[a] || C->tried[a] == C->ver[p->act[a].src])
                continue;
            int r = closure_fire(C, a);
            if (r < 0)
                return r;
            changed |= r;
        }
    }
    return 0;
}

/* After the closure: every action fired (well-formed), every OUT held
 * (valid). orig: as for check_closure. */
static int closure_verdict(const closure *C, const int *orig)
{
    const xp_program *p = C->p;
    for (int a = 0; a < p->nact; a++)
        if (!C->fired[a]) {
            if (p->act[a].line)
                return ein_fail(C->err, EIN_EINVAL,
                                "not well-formed: the action at line %d:%d (at site %d) is "
                                "never enabled", p->act[a].line, p->act[a].col, p->act[a].src);
            return ein_fail(C->err, EIN_EINVAL,
                            "not well-formed: action %d (at site %d) is never enabled",
                            orig ? orig[a] : a, p->act[a].src);
        }
    for (int o = 0; o < p->nout; o++)
        if (p->out[o].site < 0 || !held_has(p, &C->st[p->out[o].site], p->out[o].set, 0, C->L))
            return ein_fail(C->err, EIN_EINVAL, "not valid: OUT %d is never reached at site %d",
                            o, p->out[o].site);
    return 0;
}

static int check_closure(const xp_program *p, const int *orig, ein_error *err)
{
    closure C = {.p = p, .err = err, .L = 1};
    int rc;
    if ((rc = closure_alloc(&C)) == 0 && (rc = check_actions_resolved(p, err)) == 0 &&
        (rc = check_paths(p, err)) == 0 && (rc = xp_program_chunk_units(p, &C.L, err)) == 0 &&
        (rc = closure_seed_ins(&C)) == 0 && (rc = closure_run(&C)) == 0)
        rc = closure_verdict(&C, orig);
    closure_free(&C);
    return rc;
}

/* Enumerate memberships of the unresolved partitions (in declaration
 * order, members ascending) until one makes the program valid. */
typedef struct enum_ctx {
    xp_program *q;
    int *todo, ntodo;
    unsigned char *used;
    long tried, limit;
    ein_error first;   /* the failure of the first membership tried */
} enum_ctx;

static int enum_members(enum_ctx *c, int t, int k, int from, int *mem)
{
    xp_program *q = c->q;
    if (t == c->ntodo) {
        if (++c->tried > c->limit)
            return EIN_EUNSUPPORTED;
        ein_error e;
        int rc = check_resolved(q, &e);
        if (rc == 0)
            return 1;
        if (c->tried == 1)
            c->first = e;
        return rc == EIN_ENOMEM ? rc : 0;
    }
    xp_partition *g = &q->part[c->todo[t]];
    if (k == g->size) {
        xp_program_assign(q, c->todo[t], mem, NULL);
        int r = enum_members(c, t + 1, 0, 0, mem + g->size);
        if (r != 0)
            return r;
        return 0;
    }
    for (int s = from; s < q->ngpus; s++) {
        if (c->used[s] || (q->gpu_ok && !q->gpu_ok[s]))
            continue;
        c->used[s] = 1;
        mem[k] = s;
        int r = enum_members(c, t, k + 1, s + 1, mem);
        c->used[s] = 0;
        if (r != 0)
            return r;
    }
    return 0;
}

int xp_program_validate(const xp_program *p, xp_program **witness, ein_error *err)
{
    if (xp_program_resolved(p)) {
        int rc = check_resolved(p, err);
        if (rc == 0 && witness && !(*witness = xp_program_copy(p)))
            return ein_fail(err, EIN_ENOMEM, "out of memory");
        return rc;
    }
    enum_ctx c = {0};
    int rc, total = 0;
    c.q = xp_program_copy(p);
    c.todo = malloc(sizeof(int) * (size_t)(p->npart + 1));
    c.used = calloc((size_t)p->ngpus + 1, 1);
    int *mem = malloc(sizeof(int) * (size_t)(p->ngpus + 1));
    c.limit = 200000;
    if (!c.q || !c.todo || !c.used || !mem) {
        rc = ein_fail(err, EIN_ENOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < p->npart; i++) {
        if (p->part[i].member[0] < 0) {
            c.todo[c.ntodo++] = i;
            total += p->part[i].size;
        } else {
            for (int k = 0; k < p->part[i].size; k++)
                c.used[p->part[i].member[k]] = 1;
        }
    }
    int r = enum_members(&c, 0, 0, 0, mem);
    if (r == 1) {
        rc = 0;
        if (witness) {
            *witness = c.q;
            c.q = NULL;
        }
    } else if (r == EIN_EUNSUPPORTED) {
        rc = ein_fail(err, EIN_EUNSUPPORTED,
                      "more than %ld memberships of the size-declared partitions to try",
                      c.limit);
    } else if (r < 0) {
        rc = ein_fail(err, r, "out of memory");
    } else if (c.tried == 0) {
        rc = ein_fail(err, EIN_EINVAL,
                      "not valid: the size-declared partitions (%d sites) do not fit the GPUs",
                      total);
    } else {
        rc = ein_fail(err, EIN_EINVAL,
                      "not valid for any of the %ld memberships of the size-declared "
                      "partitions (first tried: %s)", c.tried, c.first.msg);
    }
done:
    xp_program_free(c.q);
    free(c.todo);
    free(c.used);
    free(mem);
    return rc;
}

int xp_program_check(const xp_program *p, ein_error *err)
{
    return xp_program_validate(p, NULL, err);
}
