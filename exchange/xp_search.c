/* exchange/xp_search.c — membership choice and guarded local search over
 * program bodies (see xp_search.h). */
#include "exchange/xp_search.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/ein_clock.h"
#include "common/ein_rand.h"
#include "common/ein_vec.h"
#include "exchange/xp_baseline.h"
#include "exchange/xp_naive.h"
#include "exchange/xp_sim.h"

/* Candidates without a gain in the current run before it restarts. */
#define SCORE_MEAN_WEIGHT 0.3
#define RESTART_AFTER 300
/* Naive programs costed while choosing members (a work budget: the
 * choice never depends on the machine's speed). */
#define MEMBER_EVALS 2000
/* Structured starting programs built (and simulated) per search. */
#define STRUCT_VARIANTS 16
/* Work (prog_work units, what simulating costs) the start phases may
 * spend, apart from the search's budget, so that a preamble of thousands
 * of atoms is synthesised in seconds: structured variants after the first
 * stop once they have cost STRUCT_WORK; each chunked generator (ring,
 * tree, direct, multi-path) tries deeper pipelines only while its total
 * stays within CHUNK_KIND_WORK; the clean-up pass tries removals while
 * they have cost under CLEANUP_WORK. An 8-GPU preamble stays far below
 * all three. */
#define STRUCT_WORK 8000
#define CHUNK_KIND_WORK 100000
/* The hierarchical start on a machine of several hosts: its share (the
 * start that matters most there; pipeline 2 on 16 x 8 GPUs fits). */
#define CHUNK_HIER_WORK 400000
#define CLEANUP_WORK 30000
/* Sites a structured program handles (more: it is skipped). */
#define XP_STRUCT_MAXS 256

void xp_search_opts_default(xp_search_opts *o)
{
    o->max_work = XP_SEARCH_DEFAULT_WORK;
    o->max_steps = XP_SEARCH_DEFAULT_STEPS;
    o->patience = XP_SEARCH_DEFAULT_PATIENCE;
    o->cap_ms = XP_SEARCH_DEFAULT_CAP_MS;
    o->seed = 1;
    o->chunks = 0;
}

/* Work to evaluate a program: one unit per action, and for a chunked one
 * per chunk and hop, twice with a latency (the simulator runs a wait and
 * a flow for each). */
static long prog_work(const xp_program *p, const xp_topology *t)
{
    long w = 1, per = t->latency > 0 ? 2 : 1;
    for (int a = 0; a < p->nact; a++) {
        const xp_action *ac = &p->act[a];
        long hops = ac->nrelay + (ac->ndst > 0 ? ac->ndst : 1);
        w += ac->nchunks > 1 ? (long)ac->run * hops * per : 1;
    }
    return w;
}

/* A hash of an aggregate at a site (for tables of sets). */
static unsigned set_hash(const xp_program *p, const xp_word *x, int site)
{
    uint64_t h = 0x9e3779b97f4a7c15ULL * (uint64_t)(site + 1);
    for (int w = 0; w < p->nwords; w++)
        h = (h ^ x[w]) * 0x100000001b3ULL;
    return (unsigned)(h ^ (h >> 29));
}

static int rnd(uint64_t *s, int n)
{
    return n > 0 ? (int)(ein_rand_next(s) % (uint64_t)n) : 0;
}

/* Whether every action moves part of an aggregate some OUT wants. An
 * action on a set no OUT contains (A+B where A and B are copies of
 * different atoms) is never needed: nothing built from it can reach an
 * OUT, and the lowering cannot aggregate blocks of different boxes. The
 * moves that union sets (fusion, partial aggregation) are screened here. */
static int sets_wanted(const xp_program *p)
{
    for (int a = 0; a < p->nact; a++) {
        int ok = 0;
        for (int o = 0; o < p->nout && !ok; o++)
            ok = xp_set_subset(p, p->act[a].set, p->out[o].set);
        if (!ok)
            return 0;
    }
    return 1;
}

/* Makespan of a candidate, INFINITY if it is not valid. The simulator
 * fires exactly the closure of Def. 5.5 (it fails on an action never
 * enabled or an OUT never reached), so it screens candidates; every
 * program the search accepts is also checked by xp_program_check. */
static double sim_cost(const xp_program *p, const xp_topology *t)
{
    double ms;
    if (xp_sim_run(p, t, &ms, NULL, NULL) < 0)
        return INFINITY;
    return ms;
}

/* What the local search minimises: the makespan, plus a little of the
 * mean completion time so that speeding up one of several equally late
 * parts counts as progress (the makespan alone is flat there). */
static double score(const xp_program *p, const xp_topology *t, double *ms)
{
    double mean;
    if (xp_sim_run_ex(p, t, ms, &mean, NULL, NULL) < 0)
        return *ms = INFINITY;
    return *ms + SCORE_MEAN_WEIGHT * mean;
}

static double cost(const xp_program *p, const xp_topology *t)
{
    if (xp_program_check(p, NULL) < 0)
        return INFINITY;
    return sim_cost(p, t);
}

static xp_program *strip(const xp_program *pre)
{
    xp_program *q = xp_program_copy(pre);
    while (q && q->nact)
        xp_program_remove_action(q, q->nact - 1);
    return q;
}

static double naive_cost(const xp_program *q, const xp_topology *t)
{
    xp_program *c = xp_program_copy(q);
    double ms = INFINITY;
    if (c && xp_naive_synthesize(c, NULL) == 0)
        ms = cost(c, t);
    xp_program_free(c);
    return ms;
}

static int cmp_int(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

/* Mark the sites taken (not a GPU, or a member of a resolved partition)
 * and the partitions to place (todo); fails when they need more sites
 * than are free. */
static int membership_sites(const xp_program *q, char *used, char *todo, ein_error *err)
{
    int n = q->ngpus, need = 0, avail = 0;
    for (int s = 0; s < n; s++)
        if (q->gpu_ok && !q->gpu_ok[s])
            used[s] = 1;
    for (int g = 0; g < q->npart; g++) {
        if (q->part[g].member[0] >= 0) {
            for (int k = 0; k < q->part[g].size; k++)
                used[q->part[g].member[k]] = 1;
        } else {
            todo[g] = 1;
            need += q->part[g].size;
        }
    }
    for (int s = 0; s < n; s++)
        avail += !used[s];
    if (need > avail)
        return ein_fail(err, EIN_EINVAL, "size-declared partitions need %d sites, %d are free",
                        need, avail);
    return 0;
}

/* Greedy by locality: score[g * n + s] is the bytes partition g's OUT
 * entries find at site s; the partition with the strongest claim takes
 * its best free sites first. mem: scratch, n + 1. */
static void membership_greedy(xp_program *q, char *used, char *todo, double *score, int *mem)
{
    int n = q->ngpus, np = q->npart;
    for (int o = 0; o < q->nout; o++) {
        if (q->out[o].part < 0 || !todo[q->out[o].part])
            continue;
        for (int i = 0; i < q->nin; i++)
            if (xp_set_has(q->out[o].set, i))
                score[q->out[o].part * n + q->in[i].site] += q->in[i].bytes;
    }
    for (;;) {
        int bg = -1;
        double bs = -1;
        for (int g = 0; g < np; g++) {
            if (!todo[g])
                continue;
            for (int s = 0; s < n; s++)
                if (!used[s] && score[g * n + s] > bs) {
                    bs = score[g * n + s];
                    bg = g;
                }
        }
        if (bg < 0)
            break;
        int k = q->part[bg].size;
        for (int j = 0; j < k; j++) {
            int best = -1;
            for (int s = 0; s < n; s++)
                if (!used[s] && (best < 0 || score[bg * n + s] > score[bg * n + best]))
                    best = s;
            used[best] = 1;
            mem[j] = best;
        }
        qsort(mem, (size_t)k, sizeof(int), cmp_int);
        xp_program_assign(q, bg, mem, NULL);
        todo[bg] = 0;
    }
}

/* Try swapping member i of g with member j of h: kept when the naive
 * program gets faster than *cur (within MEMBER_EVALS evaluations). */
static int membership_try_swap(xp_program *q, const xp_topology *t, int g, int i, int h, int j,
                               double *cur, long *evals)
{
    int *mg = q->part[g].member, *mh = q->part[h].member;
    int a = mg[i], b = mh[j];
    mg[i] = b, mh[j] = a;
    xp_program_assign(q, g, mg, NULL);
    xp_program_assign(q, h, mh, NULL);
    double c = (*evals)++ < MEMBER_EVALS ? naive_cost(q, t) : INFINITY;
    if (c < *cur * (1 - 1e-9)) {
        *cur = c;
        return 1;
    }
    mg[i] = a, mh[j] = b;
    xp_program_assign(q, g, mg, NULL);
    xp_program_assign(q, h, mh, NULL);
    return 0;
}

/* Pairwise swaps between size-declared partitions while naive improves. */
static void membership_swaps(xp_program *q, const xp_topology *t)
{
    double cur = naive_cost(q, t);
    long evals = 0;
    for (int improved = 1; improved && evals < MEMBER_EVALS;) {
        improved = 0;
        for (int g = 0; g < q->npart; g++)
            for (int h = g + 1; h < q->npart; h++) {
                if (!q->part[g].by_size || !q->part[h].by_size)
                    continue;
                for (int i = 0; i < q->part[g].size; i++)
                    for (int j = 0; j < q->part[h].size; j++)
                        improved |= membership_try_swap(q, t, g, i, h, j, &cur, &evals);
            }
    }
}

/* Step 1: members for the size-declared partitions: the sites, greedy by
 * locality, then pairwise swaps; members sorted. */
static int choose_membership(xp_program *q, const xp_topology *t, ein_error *err)
{
    int n = q->ngpus, np = q->npart, rc = 0;
    if (xp_program_resolved(q))
        return 0;
    double *score = calloc((size_t)np * (size_t)n + 1, sizeof(double));
    char *used = calloc((size_t)n + 1, 1), *todo = calloc((size_t)np + 1, 1);
    int *mem = malloc(sizeof(int) * (size_t)(n + 1));
    if (!score || !used || !todo || !mem) {
        rc = ein_fail(err, EIN_ENOMEM, "out of memory");
        goto done;
    }
    if ((rc = membership_sites(q, used, todo, err)) < 0)
        goto done;
    membership_greedy(q, used, todo, score, mem);
    membership_swaps(q, t);
    for (int g = 0; g < np; g++) {
        qsort(q->part[g].member, (size_t)q->part[g].size, sizeof(int), cmp_int);
        xp_program_assign(q, g, q->part[g].member, NULL);
    }
done:
    free(score);
    free(used);
    free(todo);
    free(mem);
    return rc;
}

/* ---- body edits (on a private copy; the caller checks validity) ---- */

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

/* Actions of the current program that end late (on or near the critical
 * path): half of the picks are among them. Set per search, per thread. */
static _Thread_local const char *late;
static _Thread_local int nlate_act;

static int pick_action(xp_program *c, uint64_t *rng, int (*ok)(const xp_program *, int))
{
    int n = c->nact, start = rnd(rng, n);
    if (late && nlate_act == n && rnd(rng, 2)) {
        for (int k = 0; k < n; k++) {
            int a = (start + k) % n;
            if (late[a] && ok(c, a))
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
static int mv_relay(xp_program *c, const xp_topology *t, uint64_t *rng)
{
    int a = -1;
    if (rnd(rng, 4) != 0) { /* mostly: a transfer over a shared resource */
        int n = c->nact, start = rnd(rng, n);
        for (int k = 0; k < n && a < 0; k++) {
            int b = (start + k) % n;
            if (is_direct1(c, b) && shared_route(t, c->act[b].src, c->act[b].dst[0]))
                a = b;
        }
    }
    if (a < 0)
        a = pick_action(c, rng, is_direct1);
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
    int r = nr ? cand[rnd(rng, nr)] : -1;
    free(cand);
    if (r < 0 || !(ac->relay = malloc(sizeof(int))))
        return -1;
    ac->relay[0] = r;
    ac->nrelay = 1;
    forget_parts(ac);
    return 0;
}

static int mv_unrelay(xp_program *c, uint64_t *rng)
{
    int a = pick_action(c, rng, is_relay);
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
static int mv_src(xp_program *c, uint64_t *rng)
{
    int a = pick_action(c, rng, is_xfer);
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
    int ns = nh ? h[rnd(rng, nh)] : -1;
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
static int mv_fuse(xp_program *c, uint64_t *rng)
{
    int a = pick_action(c, rng, is_direct);
    if (a < 0)
        return -1;
    const xp_action *ac = &c->act[a];
    int same = rnd(rng, 2);
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
    int b = nb ? cand[rnd(rng, nb)] : -1;
    free(cand);
    if (b < 0)
        return -1;
    xp_action *A = &c->act[a], *B = &c->act[b];
    int nd = 0, dd[64];
    for (int d = 0; d < B->ndst && nd < 64; d++)
        if (dst_index(A, B->dst[d]) >= 0)
            dd[nd++] = B->dst[d];
    int d = dd[rnd(rng, nd)], src = A->src;
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
static int mv_relay_split(xp_program *c, uint64_t *rng)
{
    int a = pick_action(c, rng, is_relay);
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
static int mv_split(xp_program *c, uint64_t *rng)
{
    int a = pick_action(c, rng, is_split);
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
        if (nx == 0 || (ny > 0 && rnd(rng, 2)))
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
static int mv_mfuse(xp_program *c, uint64_t *rng)
{
    int a = pick_action(c, rng, is_direct);
    if (a < 0)
        return -1;
    for (int k = 0, n = c->nact, st = rnd(rng, n); k < n; k++) {
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
static int mv_mfission(xp_program *c, uint64_t *rng)
{
    int a = pick_action(c, rng, is_multi);
    if (a < 0)
        return -1;
    xp_action *A = &c->act[a];
    int k = rnd(rng, A->ndst), d = A->dst[k], src = A->src;
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
static int mv_local(xp_program *c, uint64_t *rng)
{
    int a = pick_action(c, rng, is_big);
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
    int i = rnd(rng, np), j = rnd(rng, np - 1);
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

static int mv_delete(xp_program *c, uint64_t *rng)
{
    int a = pick_action(c, rng, any);
    if (a < 0)
        return -1;
    xp_program_remove_action(c, a);
    return 0;
}

static int propose(xp_program *c, const xp_topology *t, uint64_t *rng)
{
    static const int w[] = {3, 1, 4, 5, 1, 1, 1, 2, 2, 2};
    int total = 0;
    for (size_t i = 0; i < sizeof w / sizeof *w; i++)
        total += w[i];
    int r = rnd(rng, total), k = 0;
    while (r >= w[k])
        r -= w[k++];
    switch (k) {
    case 0: return mv_relay(c, t, rng);
    case 1: return mv_unrelay(c, rng);
    case 2: return mv_src(c, rng);
    case 3: return mv_fuse(c, rng);
    case 4: return mv_split(c, rng);
    case 5: return mv_mfuse(c, rng);
    case 6: return mv_mfission(c, rng);
    case 7: return mv_local(c, rng);
    case 8: return mv_relay_split(c, rng);
    default: return mv_delete(c, rng);
    }
}

/* ---- structured starting programs ----
 *
 * For each distinct OUT aggregate X wanted at the sites D: every copy of an
 * atom of X held outside D is sent (aggregated per source) to the site of D
 * with the best route from it; then the sites of D merge pairwise like
 * recursive doubling: blocks of sites holding the same partial aggregate
 * (at first one block per site), two blocks at a time — the smallest
 * blocks first, then the pair whose sites match over the fastest routes —
 * each site sending its block's aggregate to its partner in the other
 * block; last, X is formed at every site of D. This is the shape of the
 * paper's Ex. 5.3 program (exchange over the best links of a partition,
 * then across), found from the topology alone. Variants break ties at
 * random (and, some, choose a little below the best) so that different
 * pairings of equal local quality are tried; the caller keeps the fastest. */

/* Rough bandwidth of the route s -> d, for ranking pairings only. */
static double route_bw(const xp_topology *t, int s, int d)
{
    double b = t->link[s * t->ngpus + d];
    if (b <= 0) {
        if (t->rest >= 0)
            b = t->shared_bw[t->rest] / 4; /* shared by every such route */
        else if (t->rest == -1)
            b = t->port > 0 ? t->port : 1e15;
        else
            return 0;
    }
    if (t->port > 0 && b > t->port)
        b = t->port;
    return b;
}

static double jitter(uint64_t *rng, double amp)
{
    return amp > 0 ? 1 + amp * (double)(ein_rand_next(rng) >> 11) / 9007199254740992.0 : 1;
}

/* Greedy matching of the sites of block b (kb sites) to those of block a
 * (ka >= kb sites): part[v] for v in b's sites is its partner in a.
 * Returns the bottleneck (slowest route of the pairs, both ways). */
static double match_blocks(const xp_topology *t, const int *sa, int ka, const int *sb, int kb,
                           int *part, uint64_t *rng, double amp)
{
    char used_a[XP_STRUCT_MAXS] = {0}, used_b[XP_STRUCT_MAXS] = {0};
    double neck = INFINITY;
    for (int m = 0; m < kb; m++) {
        int bu = -1, bv = -1;
        double bk = -1, bb = 0;
        for (int v = 0; v < kb; v++) {
            if (used_b[v])
                continue;
            for (int u = 0; u < ka; u++) {
                if (used_a[u])
                    continue;
                double f = route_bw(t, sa[u], sb[v]), g = route_bw(t, sb[v], sa[u]);
                double b = f < g ? f : g, k = b * jitter(rng, amp);
                if (k > bk)
                    bk = k, bb = b, bu = u, bv = v;
            }
        }
        used_a[bu] = used_b[bv] = 1;
        part[bv] = bu;
        if (bb < neck)
            neck = bb;
    }
    return neck;
}

/* The blocks struct_group merges: block b (b < nb) holds the sites
 * bsite[b * nd .. b * nd + bk[b]) and, when ye[b], the aggregate y[b] of
 * the atoms of x gathered there so far. All arrays are owned (sg_free). */
typedef struct sg {
    xp_program *q;
    const xp_topology *t;
    const xp_word *x;         /* the aggregate wanted */
    const int *D;             /* at sites D[0..nd) */
    int nd, nb;
    uint64_t *rng;
    double amp;
    xp_word **y;              /* per block: its aggregate */
    int *bsite, *bk, *ye;
    int *bpart, *best_part;   /* block matchings (match_blocks) */
    int *dst;                 /* scratch: an action's destinations */
    xp_word *z;               /* scratch set */
} sg;

static void sg_free(sg *G)
{
    if (G->y)
        for (int b = 0; b < G->nd; b++)
            free(G->y[b]);
    free(G->y), free(G->bsite), free(G->bk), free(G->ye), free(G->bpart), free(G->best_part);
    free(G->dst), free(G->z);
}

/* One block per site of D, each empty. -1 when out of memory. */
static int sg_alloc(sg *G)
{
    int nd = G->nd;
    G->nb = nd;
    G->y = calloc((size_t)nd, sizeof *G->y);
    G->bsite = malloc(sizeof(int) * (size_t)nd * (size_t)nd);
    G->bk = calloc((size_t)nd, sizeof(int));
    G->ye = calloc((size_t)nd, sizeof(int));
    G->bpart = malloc(sizeof(int) * (size_t)nd);
    G->best_part = malloc(sizeof(int) * (size_t)nd);
    G->dst = malloc(sizeof(int) * (size_t)(nd + 1));
    G->z = xp_set_new(G->q);
    if (!G->y || !G->bsite || !G->bk || !G->ye || !G->bpart || !G->best_part || !G->dst || !G->z)
        return -1;
    for (int b = 0; b < nd; b++) {
        if (!(G->y[b] = xp_set_new(G->q)))
            return -1;
        G->bsite[b * nd] = G->D[b];
        G->bk[b] = 1;
    }
    return 0;
}

/* z := the atoms of x held at site s. */
static void sg_atoms_at(sg *G, int s)
{
    const xp_program *q = G->q;
    memset(G->z, 0, sizeof(xp_word) * (size_t)q->nwords);
    for (int w = 0; w < q->nwords; w++)
        for (xp_word m = G->x[w]; m; m &= m - 1) {
            int i = w * 64 + __builtin_ctzll(m);
            if (i < q->nin && q->in[i].site == s)
                xp_set_add(G->z, i);
        }
}

/* Site s's atoms of x (in z) join block b's aggregate. */
static void sg_join(sg *G, int b)
{
    for (int w = 0; w < G->q->nwords; w++)
        G->y[b][w] |= G->z[w];
    G->ye[b] = 1;
}

/* Copies outside D: per source site, aggregated, to the best site of D
 * (the sites holding atoms of x found from x's atoms, not all INs). */
static int sg_gather(sg *G)
{
    xp_program *q = G->q;
    int n = q->ngpus, rc = -1, *nat = calloc((size_t)n, sizeof(int)); /* atoms of x per site */
    if (!nat)
        return -1;
    for (int w = 0; w < q->nwords; w++)
        for (xp_word m = G->x[w]; m; m &= m - 1) {
            int i = w * 64 + __builtin_ctzll(m);
            if (i < q->nin)
                nat[q->in[i].site]++;
        }
    for (int s = 0; s < n; s++) {
        int inD = -1;
        if (!nat[s])
            continue;
        for (int b = 0; b < G->nd; b++)
            if (G->D[b] == s)
                inD = b;
        sg_atoms_at(G, s);
        if (inD >= 0) {
            sg_join(G, inD);
            continue;
        }
        int bd = -1;
        double bw = 0;
        for (int b = 0; b < G->nd; b++) {
            double k = route_bw(G->t, s, G->D[b]) * jitter(G->rng, G->amp * 0.5) / (1 + G->ye[b]);
            if (k > bw)
                bw = k, bd = b;
        }
        if (bd < 0 || xp_program_add_action(q, G->z, s, &G->D[bd], 1, NULL) < 0)
            goto out;
        sg_join(G, bd);
    }
    rc = 0;
out:
    free(nat);
    return rc;
}

/* The next two blocks to merge (*ba the larger): the smallest pair, ties
 * to the best bottleneck; their matching in best_part. */
static void sg_pick_pair(sg *G, int *ba, int *bb)
{
    int nd = G->nd;
    double bkey = -1;
    long bsz = 0;
    *ba = *bb = -1;
    for (int a = 0; a < G->nb; a++)
        for (int b = 0; b < G->nb; b++) {
            if (a == b || G->bk[a] < G->bk[b] || (G->bk[a] == G->bk[b] && a > b))
                continue;
            long sz = (long)G->bk[a] * 1000 + G->bk[b];
            if (*ba >= 0 && sz > bsz)
                continue;
            double neck = match_blocks(G->t, &G->bsite[a * nd], G->bk[a], &G->bsite[b * nd],
                                       G->bk[b], G->bpart, G->rng, G->amp);
            double key = neck * jitter(G->rng, G->amp);
            if (*ba < 0 || sz < bsz || key > bkey) {
                *ba = a, *bb = b, bkey = key, bsz = sz;
                memcpy(G->best_part, G->bpart, sizeof(int) * (size_t)G->bk[b]);
            }
        }
}

/* a -> b: each site of a sends a's aggregate to its partner(s) in b. */
static int sg_send_ab(sg *G, int ba, int bb)
{
    int *sa = &G->bsite[ba * G->nd], *sb = &G->bsite[bb * G->nd];
    for (int u = 0; u < G->bk[ba]; u++) {
        int k = 0;
        for (int v = 0; v < G->bk[bb]; v++)
            if (G->best_part[v] == u)
                G->dst[k++] = sb[v];
        if (k && xp_program_add_action(G->q, G->y[ba], sa[u], G->dst, k, NULL) < 0)
            return -1;
    }
    return 0;
}

/* b -> a: each site of b to its partner, and the unmatched sites of a
 * from the site of b with the best route to them. */
static int sg_send_ba(sg *G, int ba, int bb)
{
    int *sa = &G->bsite[ba * G->nd], *sb = &G->bsite[bb * G->nd], ka = G->bk[ba], kb = G->bk[bb];
    int rc = 0, *extra = calloc((size_t)ka, sizeof(int));
    char hit[XP_STRUCT_MAXS] = {0};
    if (!extra)
        return -1;
    for (int v = 0; v < kb; v++)
        hit[G->best_part[v]] = 1;
    for (int u = 0; u < ka; u++) {
        extra[u] = -1;
        if (hit[u])
            continue;
        double bw = -1;
        for (int v = 0; v < kb; v++) {
            double k = route_bw(G->t, sb[v], sa[u]);
            if (k > bw)
                bw = k, extra[u] = v;
        }
    }
    for (int v = 0; v < kb && rc == 0; v++) {
        int k = 0;
        G->dst[k++] = sa[G->best_part[v]];
        for (int u = 0; u < ka; u++)
            if (extra[u] == v)
                G->dst[k++] = sa[u];
        if (xp_program_add_action(G->q, G->y[bb], sb[v], G->dst, k, NULL) < 0)
            rc = -1;
    }
    free(extra);
    return rc;
}

/* Block a becomes the union of a and b; block b is removed (the last
 * block takes its place). */
static void sg_merge(sg *G, int ba, int bb)
{
    int nd = G->nd, *sa = &G->bsite[ba * nd], ka = G->bk[ba], kb = G->bk[bb];
    for (int w = 0; w < G->q->nwords; w++)
        G->y[ba][w] |= G->y[bb][w];
    G->ye[ba] |= G->ye[bb];
    memcpy(&sa[ka], &G->bsite[bb * nd], sizeof(int) * (size_t)kb);
    G->bk[ba] = ka + kb;
    int nb = --G->nb;
    if (bb != nb) {
        xp_word *tmp = G->y[bb];
        G->y[bb] = G->y[nb];
        G->y[nb] = tmp;
        memcpy(&G->bsite[bb * nd], &G->bsite[nb * nd], sizeof(int) * (size_t)G->bk[nb]);
        G->bk[bb] = G->bk[nb];
        G->ye[bb] = G->ye[nb];
    }
}

/* Adds to q the structured body for aggregate x wanted at sites D[0..nd):
 * gather the atoms outside D into blocks (one per site of D), merge the
 * blocks two at a time (exchanging their aggregates), then aggregate at
 * each site of D. 0, or -1 on failure. */
static int struct_group(xp_program *q, const xp_topology *t, const xp_word *x, const int *D,
                        int nd, uint64_t *rng, double amp)
{
    sg G = {.q = q, .t = t, .x = x, .D = D, .nd = nd, .rng = rng, .amp = amp};
    int rc = -1;
    if (sg_alloc(&G) < 0 || sg_gather(&G) < 0)
        goto out;
    while (G.nb > 1) {
        int ba, bb;
        sg_pick_pair(&G, &ba, &bb);
        if ((G.ye[ba] && sg_send_ab(&G, ba, bb) < 0) || (G.ye[bb] && sg_send_ba(&G, ba, bb) < 0))
            goto out;
        sg_merge(&G, ba, bb);
    }
    rc = 0;
    if (xp_set_count(q, x) > 1)
        for (int d = 0; d < nd && rc == 0; d++)
            rc = xp_program_add_action(q, x, D[d], NULL, 0, NULL) < 0 ? -1 : 0;
out:
    sg_free(&G);
    return rc;
}

/* The structured body for q's preamble (membership resolved), or NULL
 * (too many sites, no route, or no memory). `variant` 0 is the plain
 * greedy construction; the others break ties with the generator. */
static xp_program *structured(const xp_program *q, const xp_topology *t, uint64_t *rng,
                              int variant)
{
    if (q->ngpus > XP_STRUCT_MAXS)
        return NULL;
    double amp = variant == 0 ? 0 : 1e-6;
    xp_program *c = strip(q);
    char *done = calloc((size_t)q->nout + 1, 1);
    int *D = malloc(sizeof(int) * (size_t)(q->nout + 1));
    unsigned *hs = malloc(sizeof(unsigned) * (size_t)(q->nout + 1)); /* OUT sets, hashed */
    int ok = c && done && D && hs;
    for (int o = 0; o < q->nout && ok; o++)
        hs[o] = set_hash(q, q->out[o].set, 0);
    for (int o = 0; o < q->nout && ok; o++) {
        if (done[o])
            continue;
        int nd = 0;
        for (int p = o; p < q->nout; p++) {
            if (done[p] || hs[p] != hs[o] || !xp_set_equal(q, q->out[p].set, q->out[o].set))
                continue;
            done[p] = 1;
            int dup = 0;
            for (int k = 0; k < nd; k++)
                dup |= D[k] == q->out[p].site;
            if (!dup && q->out[p].site >= 0)
                D[nd++] = q->out[p].site;
        }
        if (nd)
            ok = struct_group(c, t, q->out[o].set, D, nd, rng, amp) == 0;
    }
    free(done), free(D), free(hs);
    if (!ok) {
        xp_program_free(c);
        return NULL;
    }
    return c;
}

/* A membership move: swap one member between two size-declared
 * partitions of p and start over from the naive body for it. NULL if p
 * has fewer than two such partitions (or on failure). */
static xp_program *member_move(const xp_program *p, const xp_topology *t, uint64_t *rng)
{
    int g = -1, h = -1, n = 0;
    for (int i = 0; i < p->npart; i++)
        if (p->part[i].by_size && rnd(rng, ++n) == 0)
            g = i;
    n = 0;
    for (int i = 0; i < p->npart; i++)
        if (i != g && p->part[i].by_size && rnd(rng, ++n) == 0)
            h = i;
    if (g < 0 || h < 0)
        return NULL;
    xp_program *q = strip(p);
    if (!q)
        return NULL;
    int *mg = q->part[g].member, *mh = q->part[h].member;
    int i = rnd(rng, q->part[g].size), j = rnd(rng, q->part[h].size), a = mg[i];
    mg[i] = mh[j];
    mh[j] = a;
    qsort(mg, (size_t)q->part[g].size, sizeof(int), cmp_int);
    qsort(mh, (size_t)q->part[h].size, sizeof(int), cmp_int);
    xp_program_assign(q, g, mg, NULL);
    xp_program_assign(q, h, mh, NULL);
    /* The faster of the naive and the plain structured body for it. */
    xp_program *s = structured(q, t, rng, 0);
    if (xp_naive_synthesize(q, NULL) < 0) {
        xp_program_free(q);
        q = NULL;
    }
    if (s && (!q || cost(s, t) < (q ? sim_cost(q, t) : INFINITY))) {
        xp_program_free(q);
        return s;
    }
    xp_program_free(s);
    return q;
}

/* Flag the actions of p that complete in the last third of its makespan,
 * in *buf (cap bytes, grown as needed; the caller frees it), and publish
 * the flags as `late`. -1 when *buf cannot grow (late is then unset). */
static int mark_late(const xp_program *p, const xp_topology *t, char **buf, int *cap)
{
    xp_timeline *tl = NULL;
    double ms;
    late = NULL;
    nlate_act = 0;
    if (ein_vec_reserve(buf, cap, (int64_t)p->nact + 1, 1) < 0)
        return -1;
    char *nb = *buf;
    if (xp_sim_run(p, t, &ms, &tl, NULL) < 0)
        return 0;
    for (int a = 0; a < p->nact; a++)
        nb[a] = tl->act_end[a] >= ms * (2.0 / 3.0);
    xp_timeline_free(tl);
    late = nb;
    nlate_act = p->nact;
    return 0;
}

int xp_search_naive(const xp_program *preamble, const xp_topology *t, xp_program **out,
                    double *makespan, ein_error *err)
{
    int rc;
    xp_program *q = strip(preamble);
    if (!q)
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    if ((rc = choose_membership(q, t, err)) < 0 || (rc = xp_naive_synthesize(q, err)) < 0 ||
        (rc = xp_program_check(q, err)) < 0 || (rc = xp_sim_run(q, t, makespan, NULL, err)) < 0) {
        xp_program_free(q);
        return rc;
    }
    *out = q;
    return 0;
}

/* The OUT entries of a program by (site, aggregate), with how many
 * places supply each: an IN copy, or an action that holds the aggregate at
 * the site when it has run (its source, where it is formed or sent from;
 * its relays and destinations). The simulator and the checker hold an
 * aggregate at exactly those sites, so an OUT with one supplier is reached
 * only through it. */
typedef struct out_suppliers {
    int *slot;           /* open addressing: OUT index + 1, 0 empty */
    int *nsup;           /* per OUT */
    unsigned cap;        /* power of two */
} out_suppliers;

static void sup_free(out_suppliers *u)
{
    free(u->slot);
    free(u->nsup);
}

/* For each site action a holds its aggregate at, add `delta` to the
 * suppliers of the OUT entries there; with delta 0, whether one of them
 * has a as its only supplier. */
static int sup_visit(out_suppliers *u, const xp_program *p, int a, int delta)
{
    const xp_action *ac = &p->act[a];
    for (int k = -1; k < ac->nrelay + ac->ndst; k++) {
        int v = k < 0 ? ac->src : k < ac->nrelay ? ac->relay[k] : ac->dst[k - ac->nrelay];
        for (unsigned i = set_hash(p, ac->set, v) & (u->cap - 1); u->slot[i];
             i = (i + 1) & (u->cap - 1)) {
            int o = u->slot[i] - 1;
            if (p->out[o].site != v || !xp_set_equal(p, p->out[o].set, ac->set))
                continue;
            if (delta == 0 && u->nsup[o] == 1)
                return 1;
            u->nsup[o] += delta;
        }
    }
    return 0;
}

static int sup_build(out_suppliers *u, const xp_program *p)
{
    u->cap = 16;
    while (u->cap < 2u * (unsigned)p->nout + 2)
        u->cap *= 2;
    u->slot = calloc(u->cap, sizeof(int));
    u->nsup = calloc((size_t)p->nout + 1, sizeof(int));
    if (!u->slot || !u->nsup)
        return -1;
    for (int o = 0; o < p->nout; o++) {
        unsigned i = set_hash(p, p->out[o].set, p->out[o].site) & (u->cap - 1);
        while (u->slot[i])
            i = (i + 1) & (u->cap - 1);
        u->slot[i] = o + 1;
        if (xp_set_count(p, p->out[o].set) == 1)
            for (int n = 0; n < p->nin; n++)
                if (p->in[n].site == p->out[o].site && xp_set_has(p->out[o].set, n))
                    u->nsup[o] += 2; /* an IN copy: never needs an action */
    }
    for (int a = 0; a < p->nact; a++)
        sup_visit(u, p, a, 1);
    return 0;
}

/* A starting program faster than the current one becomes where the search
 * starts (*naive: restarts of kind 0 begin there) and its current and best
 * program; the plain naive program is kept in *plain (restarts of kind 3)
 * the first time, any later start replaced is freed. Takes `start`. */
static int adopt_start(xp_program *start, double start_cost, xp_program **naive,
                       xp_program **plain, xp_program **cur, xp_program **best,
                       double *best_cost, ein_error *err)
{
    if (!*plain)
        *plain = *naive;
    else
        xp_program_free(*naive);
    *naive = start;
    xp_program_free(*cur);
    xp_program_free(*best);
    *cur = *best = NULL;
    if (!(*cur = xp_program_copy(start)) || !(*best = xp_program_copy(start)))
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    *best_cost = start_cost;
    return 0;
}

/* The fastest valid structured starting program (variant 0 the same for
 * every seed, the others from a stream derived from the seed, within
 * STRUCT_WORK), with its cost in *cost_out; NULL (and INFINITY) if none. */
static xp_program *best_structured(const xp_program *cur, const xp_topology *t, uint64_t seed,
                                   double *cost_out)
{
    uint64_t srng = seed * 0x5851f42d4c957f2dULL + 0x14057b7ef767814fULL;
    xp_program *start = NULL;
    double start_cost = INFINITY;
    long swork = 0;
    for (int v = 0; v < STRUCT_VARIANTS && (v == 0 || swork < STRUCT_WORK); v++) {
        xp_program *s = structured(cur, t, &srng, v);
        double c = s ? cost(s, t) : INFINITY;
        swork += s ? prog_work(s, t) : 1;
        if (c < start_cost * (1 - 1e-9)) {
            xp_program_free(start);
            start = s;
            start_cost = c;
        } else {
            xp_program_free(s);
        }
    }
    *cost_out = start_cost;
    return start;
}

/* Keep q as *best (freeing the one before) when it costs c < *best_cost;
 * else free q. */
static void keep_faster(xp_program *q, double c, xp_program **best, double *best_cost)
{
    if (c < *best_cost * (1 - 1e-9)) {
        xp_program_free(*best);
        *best = q;
        *best_cost = c;
    } else {
        xp_program_free(q);
    }
}

/* The fastest chunked start: the collective generators on cur's
 * membership, each at the pipeline depth the simulator prefers (within
 * CHUNK_KIND_WORK a generator), and multi-path routing of single-copy
 * atoms; their work is added to st->work. NULL (and INFINITY) if none. */
static xp_program *best_chunked(const xp_program *cur, const xp_topology *t,
                                xp_search_stats *st, double *cost_out)
{
    xp_program *pre = strip(cur);
    xp_program *cstart = NULL;
    double cbest = INFINITY;
    /* Several hosts: the hierarchical decomposition first. On a large
     * machine (more than 64 sites) no flat ring: its relays through every
     * GPU cost far more work than the per-level program and cannot beat it
     * across the NICs (direct and tree stay: cheap, and for small
     * messages direct may win). */
    int multi = t->nodes > 1, large = multi && cur->ngpus > 64;
    static const int order_flat[] = {XP_BASE_RING, XP_BASE_TREE, XP_BASE_DIRECT};
    static const int order_multi[] = {XP_BASE_HIER, XP_BASE_RING, XP_BASE_TREE, XP_BASE_DIRECT};
    const int *kinds = multi ? order_multi : order_flat;
    static const int order_large[] = {XP_BASE_HIER, XP_BASE_DIRECT, XP_BASE_TREE};
    if (large) /* not the flat rings: 1024 chunks relayed through 128 GPUs */
        kinds = order_large;
    int nkinds = large ? 3 : multi ? 4 : 3;
    for (int ki = 0; pre && ki < nkinds; ki++) {
        int k = kinds[ki];
        double prev = INFINITY;
        long kwork = 0;
        for (int pipe = 1; pipe <= 64; pipe *= 2) {
            xp_program *q = NULL;
            if (xp_baseline_unchecked(pre, t, (xp_base_kind)k, pipe, &q, NULL) < 0)
                break;
            long w = prog_work(q, t);
            if (pipe > 1 && kwork + w > (k == XP_BASE_HIER ? CHUNK_HIER_WORK : CHUNK_KIND_WORK)) {
                xp_program_free(q); /* deeper: beyond this generator's share */
                break;
            }
            kwork += w;
            st->work += w;
            double c = sim_cost(q, t);
            keep_faster(q, c, &cstart, &cbest);
            if (!(c < prev * (1 - 1e-9)) && k != XP_BASE_HIER)
                break; /* deeper pipelines stopped helping (hier's phases
                          may balance again deeper: it goes on to the limit) */
            if (pipe == 1 && c > 1.5 * cbest)
                break; /* far behind: pipelining will not catch up */
            prev = c;
        }
    }
    /* Multi-path routing of single-copy atoms (link machines). */
    long mwork = 0;
    for (int k = 4; pre && k <= 16 && mwork < CHUNK_KIND_WORK; k *= 2) {
        xp_program *q = NULL;
        if (xp_multipath(pre, t, k, &q, NULL) < 0)
            break;
        mwork += prog_work(q, t);
        st->work += prog_work(q, t);
        keep_faster(q, sim_cost(q, t), &cstart, &cbest);
    }
    xp_program_free(pre);
    *cost_out = cbest;
    return cstart;
}

/* Clean-up pass: drop actions best does not need (at most one simulation
 * per action within CLEANUP_WORK: bounded work, never cut by the cap). An
 * action that alone delivers some OUT is needed: it is not tried. Returns
 * the program kept (best itself or a smaller one; best is then freed). */
static xp_program *cleanup_pass(xp_program *best, double *best_cost, const xp_topology *t)
{
    out_suppliers sup = {0};
    int nsup_ok = !xp_program_chunked(best) && sup_build(&sup, best) == 0;
    long cwork = 0;
    for (int a = xp_program_chunked(best) ? -1 : best->nact - 1; a >= 0; a--) {
        if (nsup_ok && sup_visit(&sup, best, a, 0))
            continue;
        if (cwork >= CLEANUP_WORK)
            break;
        cwork += prog_work(best, t);
        xp_program *c = xp_program_copy(best);
        if (!c)
            break;
        xp_program_remove_action(c, a);
        double cc = cost(c, t);
        if (cc <= *best_cost * (1 + 1e-12)) {
            if (nsup_ok)
                sup_visit(&sup, best, a, -1);
            xp_program_free(best);
            best = c;
            *best_cost = cc;
        } else {
            xp_program_free(c);
        }
    }
    sup_free(&sup);
    return best;
}

/* The state of one search: the programs it holds (all owned; freed by
 * search_free), their costs and the run's counters. */
typedef struct search {
    const xp_topology *t;
    const xp_search_opts *o;
    ein_error *err;
    xp_search_stats st;
    double t0;                  /* start, ms */
    xp_program *cur, *best;     /* the current and best programs */
    xp_program *naive, *plain;  /* restart points (see search_restart) */
    double best_cost, cur_cost, naive_score, run_best;
    long since, run_since, restarts;
    int nby_size;               /* size-declared partitions */
    uint64_t rng;
    char *late_buf;             /* mark_late's flags, late_cap bytes */
    int late_cap;
} search;

static void search_free(search *S)
{
    late = NULL;
    nlate_act = 0;
    free(S->late_buf);
    xp_program_free(S->cur);
    xp_program_free(S->naive);
    xp_program_free(S->plain);
    xp_program_free(S->best);
}

/* The naive program for the preamble (membership chosen) is cur, best and
 * naive; st.naive_s its makespan. */
static int search_init(search *S, const xp_program *preamble)
{
    int rc;
    if (!(S->cur = strip(preamble)))
        return ein_fail(S->err, EIN_ENOMEM, "out of memory");
    if ((rc = choose_membership(S->cur, S->t, S->err)) < 0 ||
        (rc = xp_naive_synthesize(S->cur, S->err)) < 0 ||
        (rc = xp_program_check(S->cur, S->err)) < 0 ||
        (rc = xp_sim_run(S->cur, S->t, &S->st.naive_s, NULL, S->err)) < 0)
        return rc;
    S->best_cost = S->st.naive_s;
    /* cur's score: computed once the starts are chosen */
    S->cur_cost = S->naive_score = S->run_best = INFINITY;
    for (int g = 0; g < S->cur->npart; g++)
        S->nby_size += S->cur->part[g].by_size;
    if (!(S->best = xp_program_copy(S->cur)) || !(S->naive = xp_program_copy(S->cur)))
        return ein_fail(S->err, EIN_ENOMEM, "out of memory");
    S->rng = S->o->seed * 0x2545f4914f6cdd1dULL + 0x9e3779b97f4a7c15ULL;
    return 0;
}

/* Structured starting programs (variant 0 the same for every seed, the
 * others from a stream derived from the seed): the fastest valid one, if
 * faster than naive, is where the search starts and restarts. Then the
 * chunked starts: the collective generators on this membership, each at
 * the pipeline depth the simulator prefers. */
static int search_starts(search *S)
{
    int rc;
    double start_cost;
    xp_program *start = best_structured(S->cur, S->t, S->o->seed, &start_cost);
    if (start && start_cost < S->best_cost * (1 - 1e-9)) {
        if ((rc = adopt_start(start, start_cost, &S->naive, &S->plain, &S->cur, &S->best,
                              &S->best_cost, S->err)) < 0)
            return rc;
    } else {
        xp_program_free(start);
    }
    if (S->o->chunks && S->naive->nout <= 4096) {
        double cbest;
        xp_program *cstart = best_chunked(S->cur, S->t, &S->st, &cbest);
        /* A faster chunked start is the best program so far, but the
         * local search goes on from the whole-atom start: its moves
         * rarely improve a pipelined collective, and on a whole-atom
         * body they are cheap (one unit per action) and often win for
         * small transfers. */
        if (cstart && cbest < S->best_cost * (1 - 1e-9) && xp_program_check(cstart, NULL) == 0) {
            xp_program_free(S->best);
            S->best = cstart;
            S->best_cost = cbest;
        } else {
            xp_program_free(cstart);
        }
    }
    return 0;
}

/* Whether a budget is spent (st.stop says which). */
static int search_should_stop(search *S)
{
    const xp_search_opts *o = S->o;
    if (o->max_work > 0 && S->st.work >= o->max_work) {
        S->st.stop = "work";
        return 1;
    }
    if (o->max_steps > 0 && S->st.steps >= o->max_steps) {
        S->st.stop = "steps";
        return 1;
    }
    if (o->patience > 0 && S->since >= o->patience) {
        S->st.stop = "patience";
        return 1;
    }
    /* The safety net: the only stop that depends on the machine. */
    if (o->cap_ms > 0 && (S->st.steps & 7) == 0 && 1e3 * ein_now_s() - S->t0 >= o->cap_ms) {
        S->st.stop = "cap";
        S->st.capped = 1;
        return 1;
    }
    return 0;
}

/* Make c (valid, score cc, makespan cms) the current program; a new best
 * when its makespan is. Takes c. */
static int search_accept(search *S, xp_program *c, double cc, double cms)
{
    S->st.accepted++;
    xp_program_free(S->cur);
    S->cur = c;
    S->cur_cost = cc;
    mark_late(S->cur, S->t, &S->late_buf, &S->late_cap);
    if (cc < S->run_best * (1 - 1e-9)) {
        S->run_best = cc;
        S->run_since = 0;
    }
    if (cms < S->best_cost * (1 - 1e-9)) {
        S->st.improved++;
        S->since = 0;
        S->best_cost = cms;
        xp_program_free(S->best);
        if (!(S->best = xp_program_copy(S->cur)))
            return ein_fail(S->err, EIN_ENOMEM, "out of memory");
    }
    return 0;
}

/* One proposal on a copy of cur: kept when valid and mostly downhill;
 * now and then a step a little uphill, so that two-step rewrites
 * (substitute, then fuse) can pass. 1: the proposal was not usable (the
 * step ends there), 0: judged, < 0: failure. */
static int search_propose(search *S)
{
    S->st.steps++;
    S->st.work += prog_work(S->cur, S->t);
    S->since++;
    xp_program *c = xp_program_copy(S->cur);
    if (!c)
        return ein_fail(S->err, EIN_ENOMEM, "out of memory");
    if (propose(c, S->t, &S->rng) < 0 || !sets_wanted(c)) {
        xp_program_free(c);
        return 1;
    }
    double cms, cc = score(c, S->t, &cms);
    if (isinf(cc)) {
        xp_program_free(c);
        return 1;
    }
    S->st.valid++;
    int uphill = cc <= S->cur_cost * 1.08 && rnd(&S->rng, 16) == 0;
    if ((cc <= S->cur_cost * (1 + 1e-12) || uphill) && xp_program_check(c, NULL) == 0)
        return search_accept(S, c, cc, cms);
    xp_program_free(c);
    return 0;
}

/* Stuck in this run: restart, in turn, from the starting program
 * (`naive`: the structured one when it won), from the best program, and
 * (with size-declared partitions) from the faster of the naive and
 * structured bodies for a membership one swap away from the best one;
 * every fourth restart, when the start was structured, from the plain
 * naive program instead. The best program so far is kept. */
static void search_restart(search *S)
{
    double ignored;
    int kind = (int)(++S->restarts % (S->nby_size >= 2 ? 3 : 2));
    if (S->plain && S->restarts % 4 == 3)
        kind = 3;
    xp_program *b = kind == 3   ? xp_program_copy(S->plain)
                    : kind == 2 ? member_move(S->best, S->t, &S->rng)
                                : xp_program_copy(kind ? S->best : S->naive);
    if (b) {
        xp_program_free(S->cur);
        S->cur = b;
        S->cur_cost = kind == 0 ? S->naive_score : score(S->cur, S->t, &ignored);
        S->run_best = S->cur_cost;
        S->run_since = 0;
        mark_late(S->cur, S->t, &S->late_buf, &S->late_cap);
    }
}

/* The local search from cur until a budget is spent. */
static int search_run(search *S)
{
    int rc;
    double ignored;
    /* The search starts from cur (the start chosen), unless the starts
     * spent the whole budget. */
    int spent = S->o->max_work > 0 && S->st.work >= S->o->max_work;
    if (!spent)
        S->cur_cost = S->naive_score = S->run_best = score(S->cur, S->t, &ignored);
    if (!spent && mark_late(S->cur, S->t, &S->late_buf, &S->late_cap) < 0)
        return ein_fail(S->err, EIN_ENOMEM, "out of memory");
    while (!search_should_stop(S)) {
        if ((rc = search_propose(S)) < 0)
            return rc;
        if (rc == 1)
            continue;
        if (++S->run_since >= RESTART_AFTER)
            search_restart(S);
    }
    return 0;
}

int xp_search(const xp_program *preamble, const xp_topology *t, const xp_search_opts *o,
              xp_program **out, xp_search_stats *stats, ein_error *err)
{
    xp_search_opts def;
    if (!o) {
        xp_search_opts_default(&def);
        o = &def;
    }
    search S = {.t = t, .o = o, .err = err, .t0 = 1e3 * ein_now_s()};
    int rc;
    if (preamble->ngpus > t->ngpus)
        return ein_fail(err, EIN_EINVAL, "the program uses %d sites, %s has %d GPUs",
                        preamble->ngpus, t->name, t->ngpus);
    if (o->max_work <= 0 && o->max_steps <= 0 && o->patience <= 0 && o->cap_ms <= 0)
        return ein_fail(err, EIN_EINVAL, "exchange search without a bound: give a work or "
                                         "step budget, a patience or a wall-clock cap");
    if ((rc = search_init(&S, preamble)) < 0 || (rc = search_starts(&S)) < 0 ||
        (rc = search_run(&S)) < 0) {
        search_free(&S);
        return rc;
    }
    late = NULL;
    nlate_act = 0;
    S.best = cleanup_pass(S.best, &S.best_cost, t);
    S.st.best_s = S.best_cost;
    S.st.elapsed_ms = 1e3 * ein_now_s() - S.t0;
    if (stats)
        *stats = S.st;
    *out = S.best;
    S.best = NULL;
    search_free(&S);
    return 0;
}
