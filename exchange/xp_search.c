/* exchange/xp_search.c — membership choice and guarded local search over
 * program bodies (see xp_search.h): the costs every phase uses, the
 * membership choice, the start phases and the search loop. The body edits
 * are in xp_search_moves.c, the structured starting programs in
 * xp_search_starts.c (xp_search_int.h joins them). */
#include "exchange/xp_search.h"
#include "exchange/xp_search_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/ein_clock.h"
#include "common/io/ein_rand.h"
#include "common/base/ein_vec.h"
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
 * start that matters most there). Every depth up to the chunk limit on
 * 16 x 8 GPUs fits: pipelines 1, 2, 4 and 8 cost 11,265 + 130,049 +
 * 260,097 + 520,193 = 921,604 units (about 0.8 s of CPU); depth 8 is
 * the one that pipelines the three phases of a 1 GB all-reduce there
 * (issue 26). Like the other generators it stops deepening when a depth
 * is no faster (its makespan over depth has one minimum: each sub-piece
 * is a stream, so deeper only trades fill time for alpha per chunk). */
#define CHUNK_HIER_WORK 1000000
#define CLEANUP_WORK 30000

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
double xp_search_sim_cost(const xp_program *p, const xp_topology *t)
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

double xp_search_cost(const xp_program *p, const xp_topology *t)
{
    if (xp_program_check(p, NULL) < 0)
        return INFINITY;
    return xp_search_sim_cost(p, t);
}

static double naive_cost(const xp_program *q, const xp_topology *t)
{
    xp_program *c = xp_program_copy(q);
    double ms = INFINITY;
    if (c && xp_naive_synthesize(c, NULL) == 0)
        ms = xp_search_cost(c, t);
    xp_program_free(c);
    return ms;
}

int xp_search_cmp_int(const void *a, const void *b)
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
        qsort(mem, (size_t)k, sizeof(int), xp_search_cmp_int);
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
        qsort(q->part[g].member, (size_t)q->part[g].size, sizeof(int), xp_search_cmp_int);
        xp_program_assign(q, g, q->part[g].member, NULL);
    }
done:
    free(score);
    free(used);
    free(todo);
    free(mem);
    return rc;
}

/* A membership move: swap one member between two size-declared
 * partitions of p and start over from the naive body for it. NULL if p
 * has fewer than two such partitions (or on failure). */
static xp_program *member_move(const xp_program *p, const xp_topology *t, uint64_t *rng)
{
    int g = -1, h = -1, n = 0;
    for (int i = 0; i < p->npart; i++)
        if (p->part[i].by_size && xp_rnd(rng, ++n) == 0)
            g = i;
    n = 0;
    for (int i = 0; i < p->npart; i++)
        if (i != g && p->part[i].by_size && xp_rnd(rng, ++n) == 0)
            h = i;
    if (g < 0 || h < 0)
        return NULL;
    xp_program *q = xp_search_strip(p);
    if (!q)
        return NULL;
    int *mg = q->part[g].member, *mh = q->part[h].member;
    int i = xp_rnd(rng, q->part[g].size), j = xp_rnd(rng, q->part[h].size), a = mg[i];
    mg[i] = mh[j];
    mh[j] = a;
    qsort(mg, (size_t)q->part[g].size, sizeof(int), xp_search_cmp_int);
    qsort(mh, (size_t)q->part[h].size, sizeof(int), xp_search_cmp_int);
    xp_program_assign(q, g, mg, NULL);
    xp_program_assign(q, h, mh, NULL);
    /* The faster of the naive and the plain structured body for it. */
    xp_program *s = xp_search_structured(q, t, rng, 0);
    if (xp_naive_synthesize(q, NULL) < 0) {
        xp_program_free(q);
        q = NULL;
    }
    if (s && (!q || xp_search_cost(s, t) < (q ? xp_search_sim_cost(q, t) : INFINITY))) {
        xp_program_free(q);
        return s;
    }
    xp_program_free(s);
    return q;
}

int xp_search_naive(const xp_program *preamble, const xp_topology *t, xp_program **out,
                    double *makespan, ein_error *err)
{
    int rc;
    xp_program *q = xp_search_strip(preamble);
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
        for (unsigned i = xp_search_set_hash(p, ac->set, v) & (u->cap - 1); u->slot[i];
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
        unsigned i = xp_search_set_hash(p, p->out[o].set, p->out[o].site) & (u->cap - 1);
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
        xp_program *s = xp_search_structured(cur, t, &srng, v);
        double c = s ? xp_search_cost(s, t) : INFINITY;
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
    xp_program *pre = xp_search_strip(cur);
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
            double c = xp_search_sim_cost(q, t);
            keep_faster(q, c, &cstart, &cbest);
            if (!(c < prev * (1 - 1e-9)))
                break; /* deeper pipelines stopped helping */
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
        keep_faster(q, xp_search_sim_cost(q, t), &cstart, &cbest);
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
        double cc = xp_search_cost(c, t);
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
    xp_late late;               /* the current program's late actions */
} search;

static void search_free(search *S)
{
    free(S->late.flags);
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
    if (!(S->cur = xp_search_strip(preamble)))
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
    xp_search_mark_late(S->cur, S->t, &S->late);
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
    if (xp_search_propose(&S->late, c, S->t, &S->rng) < 0 || !sets_wanted(c)) {
        xp_program_free(c);
        return 1;
    }
    double cms, cc = score(c, S->t, &cms);
    if (isinf(cc)) {
        xp_program_free(c);
        return 1;
    }
    S->st.valid++;
    int uphill = cc <= S->cur_cost * 1.08 && xp_rnd(&S->rng, 16) == 0;
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
        xp_search_mark_late(S->cur, S->t, &S->late);
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
    if (!spent && xp_search_mark_late(S->cur, S->t, &S->late) < 0)
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
    search S = {.t = t, .o = o, .err = err, .t0 = 1e3 * ein_now_s(), .late = {.n = -1}};
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
