/* exchange/xp_search_moves.c — the local search's body edits (on a private
 * copy of the program; the caller checks validity) and the late actions
 * they favour (see xp_search_int.h). */
#include "exchange/xp_search_int.h"

#include <stdlib.h>
#include <string.h>

#include "common/base/ein_vec.h"
#include "exchange/xp_sim.h"

static void forget_parts(xp_action *a)
{
    a->src_part = a->src_slot = -1;
    for (int d = 0; d < a->ndst; d++)
        a->dst_part[d] = a->dst_slot[d] = -1;
}

static void dst_remove(xp_action *a, int k)
{
    for (int d = k; d + 1 < a->ndst; d++) {
        a->dst[d] = a->dst[d + 1];
        a->dst_part[d] = a->dst_part[d + 1];
        a->dst_slot[d] = a->dst_slot[d + 1];
    }
    a->ndst--;
}

static int dst_index(const xp_action *a, int site)
{
    for (int d = 0; d < a->ndst; d++)
        if (a->dst[d] == site)
            return d;
    return -1;
}

static int dst_add(xp_action *a, int site)
{
    if (dst_index(a, site) >= 0 || site == a->src)
        return 0;
    /* The three arrays are allocated to ndst entries (the program keeps
     * no capacity for them): each grows by one. */
    int cd = a->ndst, cp = a->ndst, cs = a->ndst;
    if (ein_vec_reserve(&a->dst, &cd, (int64_t)a->ndst + 1, sizeof *a->dst) < 0 ||
        ein_vec_reserve(&a->dst_part, &cp, (int64_t)a->ndst + 1, sizeof *a->dst_part) < 0 ||
        ein_vec_reserve(&a->dst_slot, &cs, (int64_t)a->ndst + 1, sizeof *a->dst_slot) < 0)
        return -1;
    a->dst[a->ndst] = site;
    a->dst_part[a->ndst] = a->dst_slot[a->ndst] = -1;
    a->ndst++;
    return 0;
}

/* An action of c satisfying ok, at random: half of the time among the
 * late ones when their flags are c's; -1 if none. */
static int pick_action(const xp_late *late, xp_program *c, uint64_t *rng,
                       int (*ok)(const xp_program *, int))
{
    int n = c->nact, start = xp_rnd(rng, n);
    if (late->n == n && xp_rnd(rng, 2)) {
        for (int k = 0; k < n; k++) {
            int a = (start + k) % n;
            if (late->flags[a] && ok(c, a))
                return a;
        }
    }
    for (int k = 0; k < n; k++) {
        int a = (start + k) % n;
        if (ok(c, a))
            return a;
    }
    return -1;
}

static int is_direct1(const xp_program *c, int a)
{
    return c->act[a].ndst == 1 && c->act[a].nrelay == 0;
}
static int is_relay(const xp_program *c, int a) { return c->act[a].nrelay > 0; }
static int is_xfer(const xp_program *c, int a) { return c->act[a].ndst > 0; }
static int is_direct(const xp_program *c, int a)
{
    return c->act[a].ndst > 0 && c->act[a].nrelay == 0;
}
static int is_multi(const xp_program *c, int a) { return c->act[a].ndst > 1; }
static int is_big(const xp_program *c, int a) { return xp_set_count(c, c->act[a].set) >= 3; }
static int is_split(const xp_program *c, int a)
{
    return is_direct(c, a) && xp_set_count(c, c->act[a].set) >= 2;
}
static int any(const xp_program *c, int a) { (void)c, (void)a; return 1; }

static int shared_route(const xp_topology *t, int s, int d)
{
    return t->link[s * t->ngpus + d] == 0 && t->rest >= 0;
}

/* Relay introduction: X @ s -> d  =>  X @ s -> r -> d. */
static int mv_relay(const xp_late *L, xp_program *c, const xp_topology *t, uint64_t *rng)
{
    int a = -1;
    if (xp_rnd(rng, 4) != 0) { /* mostly: a transfer over a shared resource */
        int n = c->nact, start = xp_rnd(rng, n);
        for (int k = 0; k < n && a < 0; k++) {
            int b = (start + k) % n;
            if (is_direct1(c, b) && shared_route(t, c->act[b].src, c->act[b].dst[0]))
                a = b;
        }
    }
    if (a < 0)
        a = pick_action(L, c, rng, is_direct1);
    if (a < 0)
        return -1;
    xp_action *ac = &c->act[a];
    int s = ac->src, d = ac->dst[0], n = c->ngpus, nr = 0;
    int *cand = malloc(sizeof(int) * (size_t)n);
    if (!cand)
        return -1;
    for (int r = 0; r < n; r++) {
        if (r == s || r == d || (c->gpu_ok && !c->gpu_ok[r]))
            continue;
        if (t->rest >= 0 && (t->link[s * t->ngpus + r] == 0 || t->link[r * t->ngpus + d] == 0))
            continue;
        cand[nr++] = r;
    }
    int r = nr ? cand[xp_rnd(rng, nr)] : -1;
    free(cand);
    if (r < 0 || !(ac->relay = malloc(sizeof(int))))
        return -1;
    ac->relay[0] = r;
    ac->nrelay = 1;
    forget_parts(ac);
    return 0;
}

static int mv_unrelay(const xp_late *L, xp_program *c, uint64_t *rng)
{
    int a = pick_action(L, c, rng, is_relay);
    if (a < 0)
        return -1;
    xp_action *ac = &c->act[a];
    /* Drop one hop (the last, or all when there is one). */
    ac->nrelay--;
    if (ac->nrelay == 0) {
        free(ac->relay);
        ac->relay = NULL;
    }
    int k = dst_index(ac, ac->nrelay ? ac->relay[ac->nrelay - 1] : ac->src);
    if (k >= 0)
        dst_remove(ac, k);
    return ac->ndst ? 0 : -1;
}

/* Source substitution: X @ s -> D  =>  X @ h -> D, where h holds X by
 * another action (or as an IN copy). */
static int mv_src(const xp_late *L, xp_program *c, uint64_t *rng)
{
    int a = pick_action(L, c, rng, is_xfer);
    if (a < 0)
        return -1;
    xp_action *ac = &c->act[a];
    int n = c->ngpus, nh = 0;
    int *h = malloc(sizeof(int) * (size_t)(n + 1));
    char *seen = calloc((size_t)n, 1);
    if (!h || !seen) {
        free(h), free(seen);
        return -1;
    }
    seen[ac->src] = 1;
    if (xp_set_count(c, ac->set) == 1)
        for (int i = 0; i < c->nin; i++)
            if (xp_set_has(ac->set, i) && !seen[c->in[i].site])
                seen[c->in[i].site] = 1, h[nh++] = c->in[i].site;
    for (int b = 0; b < c->nact; b++) {
        const xp_action *bc = &c->act[b];
        if (b == a || !xp_set_equal(c, bc->set, ac->set))
            continue;
        if (!seen[bc->src])
            seen[bc->src] = 1, h[nh++] = bc->src;
        for (int r = 0; r < bc->nrelay; r++)
            if (!seen[bc->relay[r]])
                seen[bc->relay[r]] = 1, h[nh++] = bc->relay[r];
        for (int d = 0; d < bc->ndst; d++)
            if (!seen[bc->dst[d]])
                seen[bc->dst[d]] = 1, h[nh++] = bc->dst[d];
    }
    int ns = nh ? h[xp_rnd(rng, nh)] : -1;
    free(h), free(seen);
    if (ns < 0)
        return -1;
    ac->src = ns;
    for (int r = 0; r < ac->nrelay; r++)
        if (ac->relay[r] == ns) { /* the hops before the new source are moot */
            memmove(ac->relay, ac->relay + r + 1, sizeof(int) * (size_t)(ac->nrelay - r - 1));
            ac->nrelay -= r + 1;
            r = -1;
        }
    int k = dst_index(ac, ns);
    if (k >= 0)
        dst_remove(ac, k);
    forget_parts(ac);
    if (ac->ndst == 0)
        xp_program_remove_action(c, a);
    return 0;
}

/* Aggregation pullup: X @ r -> d and Y @ r' -> d  =>  X+Y @ r -> d.
 * With r' = r this is the paper's pullup; with r' != r it also
 * substitutes r as Y's source (guarded: valid only if Y reaches r). */
static int mv_fuse(const xp_late *L, xp_program *c, uint64_t *rng)
{
    int a = pick_action(L, c, rng, is_direct);
    if (a < 0)
        return -1;
    const xp_action *ac = &c->act[a];
    int same = xp_rnd(rng, 2);
    int nb = 0, *cand = malloc(sizeof(int) * (size_t)c->nact);
    if (!cand)
        return -1;
    for (int b = 0; b < c->nact; b++) {
        const xp_action *bc = &c->act[b];
        if (b == a || bc->ndst == 0 || (same && (bc->src != ac->src || bc->nrelay)) ||
            !xp_set_disjoint(c, bc->set, ac->set))
            continue;
        int common = 0;
        for (int d = 0; d < bc->ndst; d++)
            common |= dst_index(ac, bc->dst[d]) >= 0;
        if (common)
            cand[nb++] = b;
    }
    int b = nb ? cand[xp_rnd(rng, nb)] : -1;
    free(cand);
    if (b < 0)
        return -1;
    xp_action *A = &c->act[a], *B = &c->act[b];
    int nd = 0, dd[64];
    for (int d = 0; d < B->ndst && nd < 64; d++)
        if (dst_index(A, B->dst[d]) >= 0)
            dd[nd++] = B->dst[d];
    int d = dd[xp_rnd(rng, nd)], src = A->src;
    xp_word *u = xp_set_new(c);
    if (!u)
        return -1;
    for (int w = 0; w < c->nwords; w++)
        u[w] = A->set[w] | B->set[w];
    dst_remove(A, dst_index(A, d));
    dst_remove(B, dst_index(B, d));
    int ea = A->ndst == 0, eb = B->ndst == 0;
    if (eb)
        xp_program_remove_action(c, b);
    if (ea)
        xp_program_remove_action(c, b < a && eb ? a - 1 : a);
    int rc = xp_program_add_action(c, u, src, &d, 1, NULL);
    free(u);
    return rc < 0 ? -1 : 0;
}

/* Relay elimination into two actions: X @ s -> r -> D  =>  X @ s -> r;
 * X @ r -> D (the same movement, now open to the other moves). */
static int mv_relay_split(const xp_late *L, xp_program *c, uint64_t *rng)
{
    int a = pick_action(L, c, rng, is_relay);
    if (a < 0)
        return -1;
    xp_action *A = &c->act[a];
    int r = A->relay[A->nrelay - 1], nd = A->ndst;
    int *dst = malloc(sizeof(int) * (size_t)nd);
    xp_word *x = xp_set_new(c);
    if (!dst || !x) {
        free(dst), free(x);
        return -1;
    }
    memcpy(dst, A->dst, sizeof(int) * (size_t)nd);
    memcpy(x, A->set, sizeof(xp_word) * (size_t)c->nwords);
    A->nrelay--;
    A->ndst = 1;
    A->dst[0] = r;
    forget_parts(A);
    int rc = xp_program_add_action(c, x, r, dst, nd, NULL);
    free(dst), free(x);
    return rc < 0 ? -1 : 0;
}

/* Aggregation pushdown: X+Y @ r -> D  =>  X @ r -> D; Y @ r -> D. */
static int mv_split(const xp_late *L, xp_program *c, uint64_t *rng)
{
    int a = pick_action(L, c, rng, is_split);
    if (a < 0)
        return -1;
    xp_word *x = xp_set_new(c), *y = xp_set_new(c);
    if (!x || !y) {
        free(x), free(y);
        return -1;
    }
    int nx = 0, ny = 0;
    for (int i = 0; i < c->nin; i++) {
        if (!xp_set_has(c->act[a].set, i))
            continue;
        if (nx == 0 || (ny > 0 && xp_rnd(rng, 2)))
            xp_set_add(x, i), nx++;
        else
            xp_set_add(y, i), ny++;
    }
    int rc = -1;
    if (nx && ny) {
        int src = c->act[a].src, nd = c->act[a].ndst;
        int *dst = malloc(sizeof(int) * (size_t)nd);
        if (dst) {
            memcpy(dst, c->act[a].dst, sizeof(int) * (size_t)nd);
            xp_program_remove_action(c, a);
            rc = xp_program_add_action(c, x, src, dst, nd, NULL) < 0 ||
                         xp_program_add_action(c, y, src, dst, nd, NULL) < 0
                     ? -1
                     : 0;
            free(dst);
        }
    }
    free(x), free(y);
    return rc;
}

/* Multicast fusion: X @ s -> D1; X @ s -> D2  =>  X @ s -> D1, D2. */
static int mv_mfuse(const xp_late *L, xp_program *c, uint64_t *rng)
{
    int a = pick_action(L, c, rng, is_direct);
    if (a < 0)
        return -1;
    for (int k = 0, n = c->nact, st = xp_rnd(rng, n); k < n; k++) {
        int b = (st + k) % n;
        xp_action *A = &c->act[a], *B = &c->act[b];
        if (b == a || B->nrelay || B->ndst == 0 || B->src != A->src ||
            !xp_set_equal(c, A->set, B->set))
            continue;
        for (int d = 0; d < B->ndst; d++)
            if (dst_add(A, B->dst[d]) < 0)
                return -1;
        forget_parts(A);
        xp_program_remove_action(c, b);
        return 0;
    }
    return -1;
}

/* Multicast fission: X @ s -> d1, d2  =>  X @ s -> d1; X @ s -> d2. */
static int mv_mfission(const xp_late *L, xp_program *c, uint64_t *rng)
{
    int a = pick_action(L, c, rng, is_multi);
    if (a < 0)
        return -1;
    xp_action *A = &c->act[a];
    int k = xp_rnd(rng, A->ndst), d = A->dst[k], src = A->src;
    dst_remove(A, k);
    forget_parts(A);
    xp_word *x = xp_set_new(c);
    if (!x)
        return -1;
    memcpy(x, A->set, sizeof(xp_word) * (size_t)c->nwords);
    int rc = xp_program_add_action(c, x, src, &d, 1, NULL);
    free(x);
    return rc < 0 ? -1 : 0;
}

/* Partial local aggregation: where X (3+ atoms) is formed at s, first
 * form Y1+Y2 there from two of the pieces that reach s. */
static int mv_local(const xp_late *L, xp_program *c, uint64_t *rng)
{
    int a = pick_action(L, c, rng, is_big);
    if (a < 0)
        return -1;
    int s = c->act[a].src, np = 0;
    const xp_word *x = c->act[a].set;
    const xp_word **pc = malloc(sizeof *pc * (size_t)(c->nact + c->nin + 1));
    xp_word **single = calloc((size_t)c->nin + 1, sizeof *single);
    int rc = -1;
    if (!pc || !single)
        goto out;
    for (int i = 0; i < c->nin; i++)
        if (c->in[i].site == s && xp_set_has(x, i)) {
            if (!(single[i] = xp_set_new(c)))
                goto out;
            xp_set_add(single[i], i);
            pc[np++] = single[i];
        }
    for (int b = 0; b < c->nact; b++) {
        const xp_action *bc = &c->act[b];
        int here = bc->src == s || dst_index(bc, s) >= 0;
        for (int r = 0; r < bc->nrelay; r++)
            here |= bc->relay[r] == s;
        if (here && xp_set_subset(c, bc->set, x) && !xp_set_equal(c, bc->set, x))
            pc[np++] = bc->set;
    }
    if (np < 2)
        goto out;
    int i = xp_rnd(rng, np), j = xp_rnd(rng, np - 1);
    if (j >= i)
        j++;
    if (!xp_set_disjoint(c, pc[i], pc[j]))
        goto out;
    xp_word *u = xp_set_new(c);
    if (!u)
        goto out;
    for (int w = 0; w < c->nwords; w++)
        u[w] = pc[i][w] | pc[j][w];
    int dup = xp_set_equal(c, u, x);
    for (int b = 0; b < c->nact && !dup; b++)
        dup = c->act[b].src == s && xp_set_equal(c, c->act[b].set, u);
    if (!dup)
        rc = xp_program_add_action(c, u, s, NULL, 0, NULL) < 0 ? -1 : 0;
    free(u);
out:
    if (single)
        for (int k = 0; k < c->nin; k++)
            free(single[k]);
    free(single);
    free(pc);
    return rc;
}

static int mv_delete(const xp_late *L, xp_program *c, uint64_t *rng)
{
    int a = pick_action(L, c, rng, any);
    if (a < 0)
        return -1;
    xp_program_remove_action(c, a);
    return 0;
}

int xp_search_propose(const xp_late *L, xp_program *c, const xp_topology *t, uint64_t *rng)
{
    static const int w[] = {3, 1, 4, 5, 1, 1, 1, 2, 2, 2};
    int total = 0;
    for (size_t i = 0; i < sizeof w / sizeof *w; i++)
        total += w[i];
    int r = xp_rnd(rng, total), k = 0;
    while (r >= w[k])
        r -= w[k++];
    switch (k) {
    case 0: return mv_relay(L, c, t, rng);
    case 1: return mv_unrelay(L, c, rng);
    case 2: return mv_src(L, c, rng);
    case 3: return mv_fuse(L, c, rng);
    case 4: return mv_split(L, c, rng);
    case 5: return mv_mfuse(L, c, rng);
    case 6: return mv_mfission(L, c, rng);
    case 7: return mv_local(L, c, rng);
    case 8: return mv_relay_split(L, c, rng);
    default: return mv_delete(L, c, rng);
    }
}

/* Flag the actions of p that complete in the last third of its makespan
 * (xp_search_int.h). */
int xp_search_mark_late(const xp_program *p, const xp_topology *t, xp_late *late)
{
    xp_timeline *tl = NULL;
    double ms;
    late->n = -1;
    if (ein_vec_reserve(&late->flags, &late->cap, (int64_t)p->nact + 1, 1) < 0)
        return -1;
    if (xp_sim_run(p, t, &ms, &tl, NULL) < 0)
        return 0;
    for (int a = 0; a < p->nact; a++)
        late->flags[a] = tl->act_end[a] >= ms * (2.0 / 3.0);
    xp_timeline_free(tl);
    late->n = p->nact;
    return 0;
}
