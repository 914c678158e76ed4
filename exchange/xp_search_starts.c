/* exchange/xp_search_starts.c — structured starting programs for the
 * exchange search (see xp_search_int.h). */
#include "exchange/xp_search_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/ein_vec.h"
#include "exchange/xp_naive.h"
#include "exchange/xp_sim.h"

/* Sites a structured program handles (more: it is skipped). */
#define XP_STRUCT_MAXS 256

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
xp_program *xp_search_structured(const xp_program *q, const xp_topology *t, uint64_t *rng,
                                 int variant)
{
    if (q->ngpus > XP_STRUCT_MAXS)
        return NULL;
    double amp = variant == 0 ? 0 : 1e-6;
    xp_program *c = xp_search_strip(q);
    char *done = calloc((size_t)q->nout + 1, 1);
    int *D = malloc(sizeof(int) * (size_t)(q->nout + 1));
    unsigned *hs = malloc(sizeof(unsigned) * (size_t)(q->nout + 1)); /* OUT sets, hashed */
    int ok = c && done && D && hs;
    for (int o = 0; o < q->nout && ok; o++)
        hs[o] = xp_search_set_hash(q, q->out[o].set, 0);
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

/* A hash of an aggregate at a site (for tables of sets). */
unsigned xp_search_set_hash(const xp_program *p, const xp_word *x, int site)
{
    uint64_t h = 0x9e3779b97f4a7c15ULL * (uint64_t)(site + 1);
    for (int w = 0; w < p->nwords; w++)
        h = (h ^ x[w]) * 0x100000001b3ULL;
    return (unsigned)(h ^ (h >> 29));
}

xp_program *xp_search_strip(const xp_program *pre)
{
    xp_program *q = xp_program_copy(pre);
    while (q && q->nact)
        xp_program_remove_action(q, q->nact - 1);
    return q;
}
