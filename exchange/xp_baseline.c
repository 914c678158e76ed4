/* exchange/xp_baseline.c — ring, double binary tree and direct collectives
 * as ExProg bodies (see xp_baseline.h). */
#include "exchange/xp_baseline.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exchange/xp_sim.h"

#define RINGS_MAX 8   /* 4 on link machines; one per rail across hosts */
#define XP_BASE_SITES 128   /* sites one aggregate may span */

/* One distinct OUT aggregate and where its copies and targets are. */
typedef struct group {
    const xp_word *set;
    int *node, nnode;    /* H ∪ D, ascending */
    char *dst;           /* per site: a target */
    int ndst, nheld;     /* |D|, |H| */
} group;

typedef struct gen {
    const xp_program *pre;
    const xp_topology *t;
    xp_program *p;
    ein_error *err;
    xp_word *tmp;        /* scratch set */
    int pipe;
} gen;

static const char *const kind_names[] = {"ring", "tree", "direct", "hier"};

const char *xp_base_name(xp_base_kind kind)
{
    return kind >= XP_BASE_RING && kind <= XP_BASE_HIER ? kind_names[kind] : "?";
}

int xp_base_parse(const char *name)
{
    for (int k = 0; k < 4; k++)
        if (strcmp(name, kind_names[k]) == 0)
            return k;
    return -1;
}

/* The copies of X held at site s, into g->tmp-like `out` (cleared). */
static void copies_at(const xp_program *p, const xp_word *x, int s, xp_word *out)
{
    memset(out, 0, sizeof(xp_word) * (size_t)p->nwords);
    for (int w = 0; w < p->nwords; w++) /* the atoms of x only */
        for (xp_word m = x[w]; m; m &= m - 1) {
            int i = w * 64 + __builtin_ctzll(m);
            if (i < p->nin && p->in[i].site == s)
                xp_set_add(out, i);
        }
}

static int set_empty(const xp_program *p, const xp_word *x)
{
    for (int w = 0; w < p->nwords; w++)
        if (x[w])
            return 0;
    return 1;
}

static int emit(gen *G, const xp_word *set, int src, const int *relay, int nrelay,
                const int *dst, int ndst, int chunk, int run, int nchunks)
{
    int rc = xp_program_add_relay(G->p, set, src, relay, nrelay, dst, ndst, G->err);
    if (rc < 0)
        return rc;
    return xp_action_set_chunk(G->p, G->p->nact - 1, chunk, run, nchunks, G->err);
}

/* ---- rings ---- */

typedef struct ring {
    int order[XP_BASE_SITES];
    int n;
    int weight;
} ring;

/* A Hamiltonian cycle over node[0..n-1] using only pairs with bw >= th
 * (depth-first, first node fixed); 1 if found. */
static int ham(const double *bw, int nsites, const int *node, int n, double th, int *ord,
               char *used, int k)
{
    if (k == n)
        return bw[ord[n - 1] * nsites + ord[0]] >= th;
    for (int i = 1; i < n; i++) {
        if (used[i] || bw[ord[k - 1] * nsites + node[i]] < th)
            continue;
        used[i] = 1;
        ord[k] = node[i];
        if (ham(bw, nsites, node, n, th, ord, used, k + 1))
            return 1;
        used[i] = 0;
    }
    return 0;
}

/* Rings over the nodes: on a machine of point-to-point links, the cycle of
 * the largest bottleneck and its reverse, then again on what the links
 * have left (at most RINGS_MAX); on a switch machine (or when no cycle of
 * links exists) one ring in site order. Weights: bandwidth in units of
 * the smallest ring's. */
/* Several hosts: one ring per rail (NCCL's rings on rail-optimised
 * machines): ring q goes through the hosts in order and visits a host's
 * sites by local rank from q on (so it leaves the host from rank q - 1,
 * and every ring uses other NICs). 0 when the nodes are on one host. */
static int rail_rings(const xp_topology *t, const int *node, int n, ring *r)
{
    int G = t->local, nr = G < RINGS_MAX ? G : RINGS_MAX;
    if (t->nodes <= 1 || xp_topo_same_host(t, node[0], node[n - 1]))
        return 0;
    for (int q = 0; q < nr; q++) {
        int k = 0;
        for (int i = 0; i < n;) { /* node[] ascends: hosts are runs */
            int j = i;
            while (j < n && xp_topo_same_host(t, node[i], node[j]))
                j++;
            for (int off = 0; off < G; off++)
                for (int m = i; m < j; m++)
                    if (node[m] % G == (q + off) % G)
                        r[q].order[k++] = node[m];
            i = j;
        }
        r[q].n = n;
        r[q].weight = 1;
    }
    return nr;
}

static int make_rings(const xp_topology *t, const int *node, int n, ring *r)
{
    int ns = t->ngpus, nr = rail_rings(t, node, n, r);
    if (nr > 0)
        return nr;
    int has_links = 0;
    for (int i = 0; i < ns * ns && !has_links; i++)
        has_links = t->link[i] > 0;
    double bwr[RINGS_MAX] = {0};
    if (has_links && t->port <= 0 && n >= 3 && n <= 16) {
        double *bw = malloc(sizeof(double) * (size_t)ns * (size_t)ns);
        if (!bw)
            return -1;
        memcpy(bw, t->link, sizeof(double) * (size_t)ns * (size_t)ns);
        while (nr + 2 <= RINGS_MAX) {
            /* Thresholds: every distinct positive bandwidth, largest first. */
            double best = 0;
            int ord[XP_BASE_SITES];
            for (int a = 0; a < n; a++)
                for (int b = 0; b < n; b++) {
                    double th = bw[node[a] * ns + node[b]];
                    if (!(th > best))
                        continue;
                    char used[XP_BASE_SITES] = {0};
                    ord[0] = node[0];
                    used[0] = 1;
                    if (ham(bw, ns, node, n, th, ord, used, 1))
                        best = th;
                }
            if (!(best > 0))
                break;
            char used[XP_BASE_SITES] = {0};
            ord[0] = node[0];
            used[0] = 1;
            ham(bw, ns, node, n, best, ord, used, 1);
            for (int k = 0; k < n; k++) {
                int s = ord[k], d = ord[(k + 1) % n];
                bw[s * ns + d] -= best;
                bw[d * ns + s] -= best;
                r[nr].order[k] = s;
                r[nr + 1].order[k] = ord[(n - k) % n];
            }
            r[nr].n = r[nr + 1].n = n;
            bwr[nr] = bwr[nr + 1] = best;
            nr += 2;
        }
        free(bw);
    }
    if (nr == 0) {
        for (int k = 0; k < n; k++)
            r[0].order[k] = node[k];
        r[0].n = n;
        r[0].weight = 1;
        return 1;
    }
    double lo = bwr[0];
    for (int i = 1; i < nr; i++)
        if (bwr[i] < lo)
            lo = bwr[i];
    for (int i = 0; i < nr; i++) {
        int w = (int)lround(bwr[i] / lo);
        r[i].weight = w < 1 ? 1 : w > 8 ? 8 : w;
    }
    return nr;
}

static int pos_in(const ring *r, int site)
{
    for (int k = 0; k < r->n; k++)
        if (r->order[k] == site)
            return k;
    return -1;
}

/* Chunks [c, c+run) of X: reduced along ring r to `owner`, then relayed on
 * around the ring to every other target (reduce: skipped with one holder
 * at the owner; relay: skipped with one target). */
static int ring_piece(gen *G, const group *g, const ring *r, int owner, int c, int run, int K)
{
    const xp_program *p = G->p;
    int n = r->n, q = pos_in(r, owner), rc;
    xp_word *y = xp_set_new(p), *own = xp_set_new(p);
    if (!y || !own) {
        free(y);
        free(own);
        return ein_fail(G->err, EIN_ENOMEM, "out of memory");
    }
    for (int j = 1; j < n; j++) {
        int s = r->order[(q + j) % n], next = r->order[(q + j + 1) % n];
        copies_at(p, g->set, s, own);
        for (int w = 0; w < p->nwords; w++)
            y[w] |= own[w];
        if (set_empty(p, y))
            continue;
        if ((rc = emit(G, y, s, NULL, 0, &next, 1, c, run, K)) < 0)
            goto done;
    }
    /* All-gather: from the owner on around the ring, to the last target. */
    int last = -1, relay[XP_BASE_SITES], nrelay = 0;
    for (int j = 1; j < n; j++)
        if (g->dst[r->order[(q + j) % n]])
            last = j;
    if (last < 0) {
        rc = emit(G, g->set, owner, NULL, 0, NULL, 0, c, run, K);
        goto done;
    }
    for (int j = 1; j < last; j++)
        relay[nrelay++] = r->order[(q + j) % n];
    int d = r->order[(q + last) % n];
    rc = emit(G, g->set, owner, relay, nrelay, &d, 1, c, run, K);
done:
    free(y);
    free(own);
    return rc;
}

static int gen_ring(gen *G, const group *g)
{
    ring r[RINGS_MAX];
    int nr = make_rings(G->t, g->node, g->nnode, r);
    if (nr < 0)
        return ein_fail(G->err, EIN_ENOMEM, "out of memory");
    int sumw = 0;
    for (int i = 0; i < nr; i++)
        sumw += r[i].weight;
    /* One holder: no reduction, the owner is the holder; else one owner
     * per target. */
    int owners[XP_BASE_SITES], no = 0;
    if (g->nheld == 1) {
        for (int k = 0; k < g->nnode; k++) {
            xp_word *own = G->tmp;
            copies_at(G->p, g->set, g->node[k], own);
            if (!set_empty(G->p, own))
                owners[no++] = g->node[k];
        }
    } else {
        for (int k = 0; k < g->nnode && no < XP_BASE_SITES; k++)
            if (g->dst[g->node[k]])
                owners[no++] = g->node[k];
    }
    long K = (long)sumw * no * G->pipe;
    if (K > XP_CHUNKS_MAX)
        return ein_fail(G->err, EIN_EUNSUPPORTED, "ring: %ld chunks, over %d", K,
                        XP_CHUNKS_MAX);
    int base = 0;
    for (int i = 0; i < nr; i++) {
        int run = r[i].weight * G->pipe;
        for (int o = 0; o < no; o++) {
            int rc = ring_piece(G, g, &r[i], owners[o], base, run, (int)K);
            if (rc < 0)
                return rc;
            base += run;
        }
    }
    return 0;
}

/* ---- double binary tree ---- */

/* Tree over ord[0..n-1] in heap order (parent of k is (k-1)/2): the part
 * of X in each subtree goes up to its parent, the root has X, then every
 * interior node multicasts X to its children. */
static int tree_piece(gen *G, const group *g, const int *ord, int n, int c, int run, int K)
{
    const xp_program *p = G->p;
    xp_word **sub = calloc((size_t)n, sizeof *sub);
    int rc = 0;
    if (!sub)
        return ein_fail(G->err, EIN_ENOMEM, "out of memory");
    for (int k = 0; k < n; k++)
        if (!(sub[k] = xp_set_new(p))) {
            rc = ein_fail(G->err, EIN_ENOMEM, "out of memory");
            goto done;
        }
    for (int k = n - 1; k >= 0; k--) {
        copies_at(p, g->set, ord[k], G->tmp);
        for (int w = 0; w < p->nwords; w++)
            sub[k][w] |= G->tmp[w];
        if (k == 0 || set_empty(p, sub[k]))
            continue;
        int parent = (k - 1) / 2;
        for (int w = 0; w < p->nwords; w++)
            sub[parent][w] |= sub[k][w];
        if ((rc = emit(G, sub[k], ord[k], NULL, 0, &ord[parent], 1, c, run, K)) < 0)
            goto done;
    }
    int any = 0;
    for (int k = 0; k < n; k++) {
        int kids[2], nk = 0;
        for (int j = 2 * k + 1; j <= 2 * k + 2 && j < n; j++)
            kids[nk++] = ord[j];
        if (nk == 0)
            continue;
        any = 1;
        if ((rc = emit(G, g->set, ord[k], NULL, 0, kids, nk, c, run, K)) < 0)
            goto done;
    }
    if (!any)
        rc = emit(G, g->set, ord[0], NULL, 0, NULL, 0, c, run, K);
done:
    for (int k = 0; k < n; k++)
        free(sub[k]);
    free(sub);
    return rc;
}

static int gen_tree(gen *G, const group *g)
{
    int n = g->nnode, ord[2][XP_BASE_SITES];
    if (n > XP_BASE_SITES)
        return ein_fail(G->err, EIN_EUNSUPPORTED, "tree: more than %d sites", XP_BASE_SITES);
    /* Roots: a target (the first; the last for the second tree). */
    int r0 = -1, r1 = -1;
    for (int k = 0; k < n; k++)
        if (g->dst[g->node[k]]) {
            if (r0 < 0)
                r0 = k;
            r1 = k;
        }
    int m = 0;
    ord[0][m++] = g->node[r0];
    for (int k = 0; k < n; k++)
        if (k != r0)
            ord[0][m++] = g->node[k];
    m = 0;
    ord[1][m++] = g->node[r1];
    for (int k = n - 1; k >= 0; k--)
        if (k != r1)
            ord[1][m++] = g->node[k];
    int ntree = n >= 3 ? 2 : 1, K = ntree * G->pipe;
    for (int i = 0; i < ntree; i++) {
        int rc = tree_piece(G, g, ord[i], n, i * G->pipe, G->pipe, K);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* ---- hierarchical ---- */

/* Whether site s holds a copy of X. */
static int holds(gen *G, const group *g, int s)
{
    copies_at(G->p, g->set, s, G->tmp);
    return !set_empty(G->p, G->tmp);
}

/* The sites of g on each host: host[h] (nh hosts), m sites each,
 * loc[h * m + k] ascending. EIN_EUNSUPPORTED when the hosts have
 * different numbers of them. */
static int hier_layout(gen *G, const group *g, int *hostv, int *nh, int *m, int *loc)
{
    const xp_topology *t = G->t;
    int h = 0, mm = -1;
    for (int i = 0; i < g->nnode;) {
        int j = i;
        while (j < g->nnode && xp_topo_same_host(t, g->node[i], g->node[j]))
            j++;
        if (mm >= 0 && j - i != mm)
            return ein_fail(G->err, EIN_EUNSUPPORTED, "hier: hosts with %d and %d of the "
                            "aggregate's sites", mm, j - i);
        mm = j - i;
        hostv[h] = xp_topo_host(t, g->node[i]);
        for (int k = 0; k < mm; k++)
            loc[h * mm + k] = g->node[i + k];
        h++;
        i = j;
    }
    *nh = h;
    *m = mm;
    return 0;
}

static int gen_hier(gen *G, const group *g)
{
    const xp_program *p = G->p;
    int hostv[XP_BASE_SITES], loc[XP_BASE_SITES], nh = 0, m = 0, rc, P = G->pipe;
    if ((rc = hier_layout(G, g, hostv, &nh, &m, loc)) < 0)
        return rc;
    long K = (long)m * nh * P;
    if (K > XP_CHUNKS_MAX)
        return ein_fail(G->err, EIN_EUNSUPPORTED, "hier: %ld chunks, over %d", K, XP_CHUNKS_MAX);
    /* xh[h]: the copies on host h (what its k-th GPU holds after phase 1). */
    xp_word *xh = calloc((size_t)nh * (size_t)p->nwords, sizeof(xp_word));
    char *full = calloc((size_t)nh, 1);
    if (!xh || !full) {
        rc = ein_fail(G->err, EIN_ENOMEM, "out of memory");
        goto done;
    }
    for (int h = 0; h < nh; h++) {
        xp_word *x = xh + (size_t)h * (size_t)p->nwords;
        for (int k = 0; k < m; k++) {
            copies_at(p, g->set, loc[h * m + k], G->tmp);
            for (int w = 0; w < p->nwords; w++)
                x[w] |= G->tmp[w];
        }
        full[h] = xp_set_equal(p, x, g->set);
    }
    /* Chunk c = k * nh * P + j * P + r of the aggregate (r < P): the r-th
     * of the P chunks of sub-piece j of piece k, which host j sums (its
     * k-th site) and multicasts on rail k. A sub-piece moves as a stream
     * on every phase, so its chunks land in order: chunk r of every
     * sub-piece is summed, multicast and gathered while chunk r + 1 is
     * still crossing the NICs (the phases overlap), rather than all of
     * them sharing the NICs until the end. Pipeline 1: phases 1 and 3 move
     * a piece in one go (no alpha per chunk). */
    /* Phase 1: reduce-scatter inside each host, piece k to its k-th site:
     * per (sender, piece), one stream per sub-piece (all sub-pieces
     * advance together, so every host's NIC has work from the start). */
    for (int h = 0; h < nh; h++)
        for (int k = 0; k < m; k++) {
            int own = loc[h * m + k];
            for (int i = 0; i < m; i++) {
                int s = loc[h * m + i];
                if (s == own || !holds(G, g, s))
                    continue;
                copies_at(p, g->set, s, G->tmp);
                if (P == 1) {
                    if ((rc = emit(G, G->tmp, s, NULL, 0, &own, 1, k, 1, m)) < 0)
                        goto done;
                    continue;
                }
                for (int j = 0; j < nh; j++)
                    if ((rc = emit(G, G->tmp, s, NULL, 0, &own, 1, (k * nh + j) * P, P,
                                   (int)K)) < 0)
                        goto done;
            }
        }
    /* Phase 2: across hosts on rail k. Sub-piece j of piece k is summed at
     * host j's k-th site (every other host sends it its copy, a stream of
     * P chunks), which multicasts the sum, chunk by chunk, to the hosts
     * that lack it. */
    for (int k = 0; k < m; k++)
        for (int j = 0; j < nh; j++) {
            int c = (k * nh + j) * P, oj = loc[j * m + k];
            for (int h = 0; h < nh; h++) {
                const xp_word *x = xh + (size_t)h * (size_t)p->nwords;
                if (h == j || set_empty(p, x) || full[j])
                    continue;
                int oh = loc[h * m + k];
                if ((rc = emit(G, x, oh, NULL, 0, &oj, 1, c, P, (int)K)) < 0)
                    goto done;
            }
            int dst[XP_BASE_SITES], nd = 0;
            for (int h = 0; h < nh; h++)
                if (h != j && !full[h])
                    dst[nd++] = loc[h * m + k];
            if (nd && (rc = emit(G, g->set, oj, NULL, 0, dst, nd, c, P, (int)K)) < 0)
                goto done;
        }
    /* Phase 3: all-gather inside each host, one stream per sub-piece (in
     * the order its chunks come off the NICs); a target that is the k-th
     * site itself aggregates there. */
    for (int h = 0; h < nh; h++)
        for (int k = 0; k < m; k++) {
            int own = loc[h * m + k], dst[XP_BASE_SITES], nd = 0;
            for (int i = 0; i < m; i++)
                if (i != k && g->dst[loc[h * m + i]])
                    dst[nd++] = loc[h * m + i];
            if (!nd && !g->dst[own])
                continue;
            if (P == 1) {
                if ((rc = emit(G, g->set, own, NULL, 0, dst, nd, k, 1, m)) < 0)
                    goto done;
                continue;
            }
            for (int j = 0; j < nh; j++)
                if ((rc = emit(G, g->set, own, NULL, 0, dst, nd, (k * nh + j) * P, P,
                               (int)K)) < 0)
                    goto done;
        }
    rc = 0;
done:
    free(xh);
    free(full);
    return rc;
}

/* ---- direct ---- */

static int gen_direct(gen *G, const group *g)
{
    const xp_program *p = G->p;
    int owners[XP_BASE_SITES], no = 0, rc = 0;
    if (g->nheld == 1) {
        for (int k = 0; k < g->nnode; k++) {
            copies_at(p, g->set, g->node[k], G->tmp);
            if (!set_empty(p, G->tmp))
                owners[no++] = g->node[k];
        }
    } else {
        for (int k = 0; k < g->nnode && no < XP_BASE_SITES; k++)
            if (g->dst[g->node[k]])
                owners[no++] = g->node[k];
    }
    long K = (long)no * G->pipe;
    if (K > XP_CHUNKS_MAX)
        return ein_fail(G->err, EIN_EUNSUPPORTED, "direct: %ld chunks, over %d", K,
                        XP_CHUNKS_MAX);
    for (int o = 0; o < no; o++) {
        int c = o * G->pipe, own = owners[o];
        if (g->nheld > 1)
            for (int k = 0; k < g->nnode; k++) {
                int s = g->node[k];
                if (s == own)
                    continue;
                copies_at(p, g->set, s, G->tmp);
                if (!set_empty(p, G->tmp) &&
                    (rc = emit(G, G->tmp, s, NULL, 0, &own, 1, c, G->pipe, (int)K)) < 0)
                    return rc;
            }
        int dst[XP_BASE_SITES], nd = 0;
        for (int k = 0; k < g->nnode; k++)
            if (g->dst[g->node[k]] && g->node[k] != own)
                dst[nd++] = g->node[k];
        if ((rc = emit(G, g->set, own, NULL, 0, dst, nd, c, G->pipe, (int)K)) < 0)
            return rc;
    }
    return 0;
}

static int baseline(const xp_program *pre, const xp_topology *t, xp_base_kind kind, int pipe,
                    int check, xp_program **out, ein_error *err);

int xp_baseline(const xp_program *pre, const xp_topology *t, xp_base_kind kind, int pipe,
                xp_program **out, ein_error *err)
{
    return baseline(pre, t, kind, pipe, 1, out, err);
}

int xp_baseline_unchecked(const xp_program *pre, const xp_topology *t, xp_base_kind kind,
                          int pipe, xp_program **out, ein_error *err)
{
    return baseline(pre, t, kind, pipe, 0, out, err);
}

static int baseline(const xp_program *pre, const xp_topology *t, xp_base_kind kind, int pipe,
                    int check, xp_program **out, ein_error *err)
{
    if (!xp_program_resolved(pre))
        return ein_fail(err, EIN_EINVAL, "baseline: resolve the size-declared partitions first");
    if (pre->ngpus > t->ngpus)
        return ein_fail(err, EIN_EINVAL, "baseline: the program uses %d sites, %s has %d GPUs",
                        pre->ngpus, t->name, t->ngpus);
    if (pipe < 1 || pipe > XP_CHUNKS_MAX)
        return ein_fail(err, EIN_EINVAL, "baseline: pipeline depth %d", pipe);
    gen G = {.pre = pre, .t = t, .err = err, .pipe = pipe};
    int rc = 0, ns = pre->ngpus;
    G.p = xp_program_copy(pre);
    char *flags = calloc((size_t)ns, 2);
    int *node = malloc(sizeof(int) * (size_t)(ns + 1));
    if (!G.p || !flags || !node || !(G.tmp = xp_set_new(pre))) {
        rc = ein_fail(err, EIN_ENOMEM, "out of memory");
        goto done;
    }
    while (G.p->nact)
        xp_program_remove_action(G.p, G.p->nact - 1);
    for (int o = 0; o < pre->nout; o++) {
        int first = 1;
        for (int e = 0; e < o && first; e++)
            first = !xp_set_equal(pre, pre->out[e].set, pre->out[o].set);
        if (!first)
            continue;
        group g = {.set = pre->out[o].set, .dst = flags, .node = node};
        char *in = flags + ns;
        memset(flags, 0, (size_t)ns * 2);
        for (int e = o; e < pre->nout; e++)
            if (xp_set_equal(pre, pre->out[e].set, g.set) && !g.dst[pre->out[e].site]) {
                g.dst[pre->out[e].site] = 1;
                g.ndst++;
            }
        for (int i = 0; i < pre->nin; i++)
            if (xp_set_has(g.set, i) && !in[pre->in[i].site]) {
                in[pre->in[i].site] = 1;
                g.nheld++;
            }
        for (int s = 0; s < ns; s++)
            if (g.dst[s] || in[s])
                node[g.nnode++] = s;
        if (g.nnode > XP_BASE_SITES) {
            rc = ein_fail(err, EIN_EUNSUPPORTED, "baseline: an aggregate over more than %d "
                          "sites", XP_BASE_SITES);
            goto done;
        }
        if (g.nnode == 1) { /* everything already there */
            if ((rc = emit(&G, g.set, node[0], NULL, 0, NULL, 0, 0, 1, 1)) < 0)
                goto done;
            continue;
        }
        rc = kind == XP_BASE_RING ? gen_ring(&G, &g)
             : kind == XP_BASE_TREE ? gen_tree(&G, &g)
             : kind == XP_BASE_HIER ? gen_hier(&G, &g) : gen_direct(&G, &g);
        if (rc < 0)
            goto done;
    }
    if (check && (rc = xp_program_check(G.p, err)) < 0)
        goto done;
    *out = G.p;
    G.p = NULL;
done:
    xp_program_free(G.p);
    free(G.tmp);
    free(flags);
    free(node);
    return rc;
}

int xp_baseline_best(const xp_program *pre, const xp_topology *t, xp_base_kind kind,
                     xp_program **out, double *seconds, int *best_pipe, ein_error *err)
{
    xp_program *best = NULL;
    double best_s = INFINITY;
    int bp = 0, rc = 0;
    for (int pipe = 1; pipe <= 64; pipe *= 2) {
        xp_program *q = NULL;
        ein_error e;
        double s;
        rc = xp_baseline(pre, t, kind, pipe, &q, &e);
        if (rc == EIN_EUNSUPPORTED)
            break; /* more pipelining only adds chunks */
        if (rc < 0) {
            xp_program_free(best);
            *err = e;
            return rc;
        }
        if ((rc = xp_sim_run(q, t, &s, NULL, &e)) < 0) {
            xp_program_free(q);
            xp_program_free(best);
            *err = e;
            return rc;
        }
        if (s < best_s) {
            xp_program_free(best);
            best = q;
            best_s = s;
            bp = pipe;
        } else {
            xp_program_free(q);
            break; /* deeper pipelines stopped helping */
        }
    }
    if (!best)
        return ein_fail(err, EIN_EUNSUPPORTED, "%s: no program within %d chunks",
                        xp_base_name(kind), XP_CHUNKS_MAX);
    *out = best;
    *seconds = best_s;
    if (best_pipe)
        *best_pipe = bp;
    return 0;
}

/* ---- multi-path routing ---- */

/* Resource of a hop s -> d for the load balance: the directed link, or
 * the shared resource of `rest via`, or -1 (direct, no contention). */
static int hop_res(const xp_topology *t, int s, int d)
{
    int n = t->ngpus;
    if (t->link[s * n + d] > 0)
        return s * n + d;
    return t->rest >= 0 ? n * n + t->rest : -1;
}

static double res_bw(const xp_topology *t, int r)
{
    int n = t->ngpus;
    return r < n * n ? t->link[r] : t->shared_bw[r - n * n];
}

/* xp_multipath's preconditions: a link machine (no port), a resolved
 * preamble, 1..XP_CHUNKS_MAX chunks, every OUT one copy with one target. */
static int multipath_check(const xp_program *pre, const xp_topology *t, int k, ein_error *err)
{
    if (t->port > 0)
        return ein_fail(err, EIN_EUNSUPPORTED, "multipath: a switch machine");
    if (!xp_program_resolved(pre) || pre->ngpus > t->ngpus || k < 1 || k > XP_CHUNKS_MAX)
        return ein_fail(err, EIN_EINVAL, "multipath: a resolved preamble on %s, 1 to %d chunks",
                        t->name, XP_CHUNKS_MAX);
    for (int o = 0; o < pre->nout; o++) {
        if (xp_set_count(pre, pre->out[o].set) != 1)
            return ein_fail(err, EIN_EUNSUPPORTED, "multipath: an aggregate of several copies");
        for (int e = 0; e < pre->nout; e++)
            if (e != o && xp_set_equal(pre, pre->out[e].set, pre->out[o].set))
                return ein_fail(err, EIN_EUNSUPPORTED, "multipath: an atom with two targets");
    }
    return 0;
}

/* The path from s to d that finishes `bytes` soonest given the load (s
 * per resource) so far: n for the direct hop, r < n through site r. */
static int multipath_best(const xp_topology *t, const double *load, int s, int d, double bytes)
{
    int n = t->ngpus, best = -1;
    double best_max = INFINITY;
    for (int r = n; r >= 0; r--) {
        int r1, r2 = -1;
        if (r == n) {
            r1 = hop_res(t, s, d);
        } else {
            if (r == s || r == d || !(t->link[s * n + r] > 0) || !(t->link[r * n + d] > 0))
                continue;
            r1 = s * n + r;
            r2 = r * n + d;
        }
        double m = r1 >= 0 ? load[r1] + bytes / res_bw(t, r1) : 0;
        if (r2 >= 0 && load[r2] + bytes / res_bw(t, r2) > m)
            m = load[r2] + bytes / res_bw(t, r2);
        if (m < best_max * (1 - 1e-12)) {
            best_max = m;
            best = r;
        }
    }
    return best;
}

/* Add `bytes` over path `best` (as multipath_best) to the load. */
static void multipath_load(const xp_topology *t, double *load, int s, int d, int best,
                           double bytes)
{
    int n = t->ngpus;
    if (best == n) {
        int r1 = hop_res(t, s, d);
        if (r1 >= 0)
            load[r1] += bytes / res_bw(t, r1);
    } else {
        load[s * n + best] += bytes / res_bw(t, s * n + best);
        load[best * n + d] += bytes / res_bw(t, best * n + d);
    }
}

/* The actions for OUT o of pre into p: a local one when its copy is
 * there already, else per path its run of chunks (cnt: chunks per path,
 * n + 1 of them). */
static int multipath_emit(xp_program *p, const xp_program *pre, int o, int s, const int *cnt,
                          int n, int k, ein_error *err)
{
    const xp_word *x = pre->out[o].set;
    int d = pre->out[o].site, c0 = 0, rc;
    if (s == d)
        return xp_program_add_action(p, x, d, NULL, 0, err);
    for (int r = n; r >= 0; r--) {
        int m = cnt[r];
        if (!m)
            continue;
        if (r == n)
            rc = xp_program_add_action(p, x, s, &d, 1, err);
        else
            rc = xp_program_add_relay(p, x, s, &r, 1, &d, 1, err);
        if (rc < 0 || (rc = xp_action_set_chunk(p, p->nact - 1, c0, m, k, err)) < 0)
            return rc;
        c0 += m;
    }
    return 0;
}

int xp_multipath(const xp_program *pre, const xp_topology *t, int k, xp_program **out,
                 ein_error *err)
{
    int n = t->ngpus, nres = n * n + XP_TOPO_MAX_SHARED, rc = 0;
    if ((rc = multipath_check(pre, t, k, err)) < 0)
        return rc;
    double *load = calloc((size_t)nres, sizeof(double));
    /* chunks per (OUT, path); path n: direct, r < n: through r */
    int *cnt = calloc((size_t)(pre->nout + 1) * (size_t)(n + 1), sizeof(int));
    int *src = malloc(sizeof(int) * (size_t)(pre->nout + 1));
    xp_program *p = xp_program_copy(pre);
    if (!load || !cnt || !src || !p) {
        rc = ein_fail(err, EIN_ENOMEM, "out of memory");
        goto done;
    }
    while (p->nact)
        xp_program_remove_action(p, p->nact - 1);
    for (int o = 0; o < pre->nout; o++)
        for (int i = 0; i < pre->nin; i++)
            if (xp_set_has(pre->out[o].set, i))
                src[o] = pre->in[i].site;
    /* Round by round (chunk c of every atom), so that no atom takes the
     * good paths before the others have had a chance. */
    for (int c = 0; c < k; c++)
        for (int o = 0; o < pre->nout; o++) {
            int s = src[o], d = pre->out[o].site;
            if (s == d)
                continue;
            double bytes = xp_set_bytes(pre, pre->out[o].set) / k;
            int best = multipath_best(t, load, s, d, bytes);
            multipath_load(t, load, s, d, best, bytes);
            cnt[(size_t)o * (size_t)(n + 1) + (size_t)best]++;
        }
    for (int o = 0; o < pre->nout; o++)
        if ((rc = multipath_emit(p, pre, o, src[o], &cnt[(size_t)o * (size_t)(n + 1)], n, k,
                                 err)) < 0)
            goto done;
    if ((rc = xp_program_check(p, err)) < 0)
        goto done;
    *out = p;
    p = NULL;
done:
    xp_program_free(p);
    free(load);
    free(cnt);
    free(src);
    return rc < 0 ? rc : 0;
}

int xp_collective_preamble(xp_coll_kind kind, int n, double S, xp_program **out,
                           ein_error *err)
{
    if (n < 1 || n > 256 || !(S > 0))
        return ein_fail(err, EIN_EINVAL, "collective: %d GPUs of %g bytes", n, S);
    int nin = kind == XP_COLL_ALLREDUCE      ? n
              : kind == XP_COLL_REDUCESCATTER ? n * n
              : kind == XP_COLL_ALLGATHER     ? n
                                              : n * (n - 1);
    xp_program *p = xp_program_new(n, nin > 0 ? nin : 1);
    xp_word *x = p ? xp_set_new(p) : NULL;
    int rc = 0, k = 0;
    if (!x) {
        xp_program_free(p);
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    }
    if (kind == XP_COLL_ALLREDUCE) {
        for (int g = 0; g < n && rc >= 0; g++) {
            rc = xp_program_add_in(p, 0, g, S, err);
            xp_set_add(x, g);
        }
        for (int g = 0; g < n && rc >= 0; g++)
            rc = xp_program_add_out(p, x, g, err);
    } else if (kind == XP_COLL_REDUCESCATTER) {
        for (int a = 0; a < n; a++)
            for (int g = 0; g < n && rc >= 0; g++)
                rc = xp_program_add_in(p, a, g, S / n, err);
        for (int a = 0; a < n && rc >= 0; a++) {
            memset(x, 0, sizeof(xp_word) * (size_t)p->nwords);
            for (int g = 0; g < n; g++)
                xp_set_add(x, a * n + g);
            rc = xp_program_add_out(p, x, a, err);
        }
    } else if (kind == XP_COLL_ALLGATHER) {
        for (int a = 0; a < n && rc >= 0; a++)
            rc = xp_program_add_in(p, a, a, S / n, err);
        for (int a = 0; a < n; a++) {
            memset(x, 0, sizeof(xp_word) * (size_t)p->nwords);
            xp_set_add(x, a);
            for (int g = 0; g < n && rc >= 0; g++)
                rc = xp_program_add_out(p, x, g, err);
        }
    } else {
        for (int s = 0; s < n; s++)
            for (int d = 0; d < n && rc >= 0; d++)
                if (s != d)
                    rc = xp_program_add_in(p, k++, s, S / n, err);
        k = 0;
        for (int s = 0; s < n; s++)
            for (int d = 0; d < n && rc >= 0; d++)
                if (s != d) {
                    memset(x, 0, sizeof(xp_word) * (size_t)p->nwords);
                    xp_set_add(x, k++);
                    rc = xp_program_add_out(p, x, d, err);
                }
    }
    free(x);
    if (rc < 0) {
        xp_program_free(p);
        return rc;
    }
    *out = p;
    return 0;
}
