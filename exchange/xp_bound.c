/* exchange/xp_bound.c — the lower bound of xp_bound.h. */
#include "exchange/xp_bound.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Bandwidth into (dir = 0) or out of (dir = 1) GPU g: its port, or the
 * links and the shared resource its routes can use, whichever is less. */
static double gpu_cap(const xp_topology *t, int g, int dir)
{
    int n = t->ngpus, unlinked = 0;
    double sum = 0;
    for (int h = 0; h < n; h++) {
        if (h == g || !xp_topo_same_host(t, g, h))
            continue;
        double bw = dir ? t->link[g * n + h] : t->link[h * n + g];
        if (bw > 0)
            sum += bw;
        else
            unlinked = 1;
    }
    if (unlinked) {
        if (t->rest == -1)
            sum = INFINITY;
        else if (t->rest >= 0)
            sum += t->shared_bw[t->rest];
    }
    if (t->local == 1) /* nothing else on its host */
        sum = 0;
    double in_host = t->port > 0 && t->port < sum ? t->port : sum;
    return in_host + (t->nodes > 1 ? t->nic : 0); /* and its NIC to other hosts */
}

/* Capacity from the sites in `in` (in[g] = 1) to the others. */
static double cut_cap(const xp_topology *t, const char *in, const double *icap,
                      const double *ocap)
{
    int n = t->ngpus, unlinked = 0;
    double out = 0, inn = 0, net = 0;
    if (t->nodes > 1) { /* the GPUs' own capacities bound any cut */
        for (int s = 0; s < n; s++) {
            if (in[s])
                out += ocap[s];
            else
                inn += icap[s];
        }
        return out < inn ? out : inn;
    }
    for (int s = 0; s < n; s++) {
        if (in[s])
            out += ocap[s];
        else
            inn += icap[s];
        for (int d = 0; d < n; d++) {
            if (!in[s] || in[d])
                continue;
            if (t->link[s * n + d] > 0)
                net += t->link[s * n + d];
            else
                unlinked = 1;
        }
    }
    if (unlinked) {
        if (t->rest == -1)
            net = INFINITY;
        else if (t->rest >= 0)
            net += t->shared_bw[t->rest];
    }
    double c = out < inn ? out : inn;
    return net < c ? net : c;
}

/* One distinct OUT aggregate: its copies' sites, its resolved target
 * sites, and the fewest distinct unresolved targets it surely has. */
typedef struct group {
    const xp_word *set;
    int atom;
    double bytes;
    char *dst;       /* ngpus flags: resolved OUT sites */
    int nunres;      /* unresolved entries of one partition, the most */
    int unres_multi; /* some unresolved partition of >= 2 sites */
} group;

static int uf_find(int *up, int i)
{
    while (up[i] != i)
        i = up[i] = up[up[i]];
    return i;
}

/* Classes of IN entries (see xp_bound_compute): cls[i] for entry i, the
 * union of entries some OUT aggregates together. NULL when out of memory. */
static int *atom_classes(const xp_program *p)
{
    int *cls = malloc(sizeof(int) * (size_t)(p->nin + 1));
    if (!cls)
        return NULL;
    for (int i = 0; i < p->nin; i++)
        cls[i] = i;
    for (int o = 0; o < p->nout; o++) {
        int first = -1;
        for (int i = 0; i < p->nin; i++)
            if (xp_set_has(p->out[o].set, i)) {
                if (first < 0)
                    first = i;
                else
                    cls[uf_find(cls, i)] = uf_find(cls, first);
            }
    }
    for (int i = 0; i < p->nin; i++)
        cls[i] = uf_find(cls, i);
    return cls;
}

/* The machine's total transfer rate: the GPUs' summed ingress or egress
 * (the smaller), and no more than its links plus the shared resource
 * every transfer without a link crosses. */
static double total_rate(const xp_topology *t, const double *icap, const double *ocap)
{
    int n = t->ngpus;
    double sum_in = 0, sum_out = 0;
    for (int s = 0; s < n; s++) {
        sum_in += icap[s];
        sum_out += ocap[s];
    }
    double total = sum_in < sum_out ? sum_in : sum_out;
    if (t->nodes > 1) /* icap/ocap already count the host's routes and the NIC */
        return total;
    int unlinked = 0;
    double links = 0;
    for (int s = 0; s < n; s++)
        for (int d = 0; d < n; d++)
            if (s != d) {
                if (t->link[s * n + d] > 0)
                    links += t->link[s * n + d];
                else
                    unlinked = 1;
            }
    if (unlinked)
        links = t->rest == -1 ? INFINITY : t->rest >= 0 ? links + t->shared_bw[t->rest] : links;
    return links < total ? links : total;
}

/* Cuts: each aggregate with a copy on one side and a target on the other
 * crosses the cut at least once (per atom, the largest); the slowest cut
 * of the 2^n - 2 (n <= 16). `in` (n bytes) and `cross` (an atom's worth
 * of doubles) are scratch. */
static double cut_bound(const xp_program *p, const xp_topology *t, const group *g, int ng,
                        char *in, const double *icap, const double *ocap, double *cross)
{
    int n = t->ngpus, natom = p->nin;
    double cut = 0;
    for (unsigned m = 1; m + 1 < (1u << n); m++) {
        for (int s = 0; s < n; s++)
            in[s] = (char)((m >> s) & 1);
        memset(cross, 0, sizeof(double) * (size_t)(natom + 1));
        for (int k = 0; k < ng; k++) {
            const group *x = &g[k];
            if (x->atom < 0)
                continue;
            int from = 0, to = 0;
            for (int i = 0; i < p->nin; i++)
                from |= xp_set_has(x->set, i) && in[p->in[i].site];
            for (int s = 0; s < n; s++)
                to |= x->dst[s] && !in[s];
            if (from && to && x->bytes > cross[x->atom])
                cross[x->atom] = x->bytes;
        }
        double need = 0;
        for (int a = 0; a < natom; a++)
            need += cross[a];
        if (need <= 0)
            continue;
        double c = need / cut_cap(t, in, icap, ocap);
        if (c > cut)
            cut = c;
    }
    return cut;
}

/* The working state of xp_bound_compute: the OUT aggregates (g, ng) and
 * per-site and per-atom tallies. All arrays are owned (bound_free). */
typedef struct bstate {
    const xp_program *p;
    const xp_topology *t;
    int n, natom, ng;
    int *cls;                 /* IN entry -> atom class (atom_classes) */
    group *g;
    char *flags;              /* the groups' dst flags, ng * n */
    char *held, *in;          /* scratch, n */
    double *need_in, *need_out, *icap, *ocap;  /* per site */
    double *atom_vol;         /* per atom: the gossip volume, the largest */
    char *seen_in, *seen_out; /* per (atom, site): counted already */
    int *unres;               /* scratch, per partition */
} bstate;

static void bound_free(bstate *B)
{
    free(B->cls);
    free(B->g);
    free(B->flags);
    free(B->held);
    free(B->in);
    free(B->need_in);
    free(B->need_out);
    free(B->icap);
    free(B->ocap);
    free(B->atom_vol);
    free(B->seen_in);
    free(B->seen_out);
    free(B->unres);
}

static int bound_alloc(bstate *B, ein_error *err)
{
    const xp_program *p = B->p;
    int n = B->n, natom = B->natom;
    /* "Atoms" here are classes of IN entries: entries aggregated together
     * by some OUT are one class (a parsed program gives every IN entry its
     * own atom number, and a valid action's aggregate lies inside an OUT
     * aggregate, so every transfer carries blocks of one class). */
    if (!(B->cls = atom_classes(p)))
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    B->g = calloc((size_t)p->nout + 1, sizeof *B->g);
    B->flags = calloc((size_t)(p->nout + 1) * (size_t)n, 1);
    B->held = calloc((size_t)n, 1);
    B->in = calloc((size_t)n, 1);
    B->need_in = calloc((size_t)n, sizeof(double));
    B->need_out = calloc((size_t)n, sizeof(double));
    B->icap = calloc((size_t)n, sizeof(double));
    B->ocap = calloc((size_t)n, sizeof(double));
    B->atom_vol = calloc((size_t)natom + 1, sizeof(double));
    B->seen_in = calloc((size_t)(natom + 1) * (size_t)n, 1);
    B->seen_out = calloc((size_t)(natom + 1) * (size_t)n, 1);
    B->unres = calloc((size_t)p->npart + 1, sizeof(int));
    if (!B->g || !B->flags || !B->held || !B->in || !B->need_in || !B->need_out || !B->icap ||
        !B->ocap || !B->atom_vol || !B->seen_in || !B->seen_out || !B->unres)
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    return 0;
}

/* Group OUT entries by aggregate: each group's atom class, bytes and
 * resolved target sites. */
static void group_outs(bstate *B)
{
    const xp_program *p = B->p;
    group *g = B->g;
    for (int o = 0; o < p->nout; o++) {
        int k = 0;
        while (k < B->ng && !xp_set_equal(p, g[k].set, p->out[o].set))
            k++;
        if (k == B->ng) {
            g[k].set = p->out[o].set;
            g[k].dst = B->flags + (size_t)k * (size_t)B->n;
            g[k].atom = -1;
            for (int i = 0; i < p->nin; i++)
                if (xp_set_has(g[k].set, i))
                    g[k].atom = B->cls[i];
            g[k].bytes = xp_set_bytes(p, g[k].set);
            B->ng++;
        }
        if (p->out[o].site >= 0)
            g[k].dst[p->out[o].site] = 1;
    }
}

/* Each group's unresolved OUT entries: the most of one partition, and
 * whether some such partition has two sites or more. */
static void group_unresolved(bstate *B)
{
    const xp_program *p = B->p;
    for (int k = 0; k < B->ng; k++) {
        group *x = &B->g[k];
        memset(B->unres, 0, sizeof(int) * (size_t)(p->npart + 1));
        for (int o = 0; o < p->nout; o++)
            if (p->out[o].site < 0 && p->out[o].part >= 0 &&
                xp_set_equal(p, x->set, p->out[o].set)) {
                int c = ++B->unres[p->out[o].part];
                if (c > x->nunres)
                    x->nunres = c;
                if (p->part[p->out[o].part].size >= 2)
                    x->unres_multi = 1;
            }
    }
}

/* Ingress and egress group x needs at each site (held: where its atoms
 * are), each (atom, site) counted once. */
static void group_ports(bstate *B, const group *x)
{
    int n = B->n;
    for (int s = 0; s < n; s++) {
        size_t at = (size_t)x->atom * (size_t)n + (size_t)s;
        /* Ingress: a target missing some copy receives a block. */
        int missing = 0;
        for (int h = 0; h < n; h++)
            missing |= B->held[h] && h != s;
        if (x->dst[s] && missing && !B->seen_in[at]) {
            B->seen_in[at] = 1;
            B->need_in[s] += x->bytes;
        }
        /* Egress: a holder with a target elsewhere sends a block. */
        int elsewhere = x->unres_multi;
        for (int d = 0; d < n; d++)
            elsewhere |= x->dst[d] && d != s;
        if (B->held[s] && elsewhere && !B->seen_out[at]) {
            B->seen_out[at] = 1;
            B->need_out[s] += x->bytes;
        }
    }
}

/* Group x's traffic: its gossip volume (atom_vol) and per-site ports. */
static void group_traffic(bstate *B, const group *x)
{
    const xp_program *p = B->p;
    int n = B->n;
    memset(B->held, 0, (size_t)n);
    int nh = 0, nd = 0, meet = x->nunres > 0;
    for (int i = 0; i < p->nin; i++)
        if (xp_set_has(x->set, i) && !B->held[p->in[i].site]) {
            B->held[p->in[i].site] = 1;
            nh++;
        }
    for (int s = 0; s < n; s++)
        if (x->dst[s]) {
            nd++;
            meet |= B->held[s];
        }
    if (x->nunres > nd)
        nd = x->nunres;
    /* Gossip: every holder but the first site to complete X sends at
     * least one block, every target but that site receives one later. */
    double cnt = nh + nd - (meet ? 2 : 1);
    if (cnt * x->bytes > B->atom_vol[x->atom])
        B->atom_vol[x->atom] = cnt * x->bytes;
    group_ports(B, x);
}

/* The host level (several hosts): each host a site, the NICs the only
 * links. Per group: the hosts holding copies, the hosts of resolved
 * targets (an unresolved target counts as meeting: fewer blocks, still
 * sound). Host volume: per atom the largest gossip count over hosts, over
 * all NICs. Host cuts (at most 16 hosts, bounded work): per split, per
 * atom the largest group with a copy inside and a target outside, over
 * the NICs of the smaller side. */
static void host_terms(bstate *B, xp_bound *b)
{
    const xp_program *p = B->p;
    const xp_topology *t = B->t;
    int H = t->nodes;
    if (H < 2 || B->ng == 0)
        return;
    uint32_t *hm = calloc((size_t)B->ng * 2, sizeof *hm);
    double *vol = calloc((size_t)B->natom + 1, sizeof(double));
    if (!hm || !vol)
        goto done;
    double hv = 0;
    for (int k = 0; k < B->ng; k++) {
        const group *x = &B->g[k];
        if (x->atom < 0)
            continue;
        char held[4096] = {0}, want[4096] = {0};
        int nh = 0, nd = 0, meet = x->nunres > 0;
        for (int i = 0; i < p->nin; i++)
            if (xp_set_has(x->set, i)) {
                int h = xp_topo_host(t, p->in[i].site);
                nh += !held[h];
                held[h] = 1;
                if (h < 32)
                    hm[2 * k] |= 1u << h;
            }
        for (int s = 0; s < B->n; s++)
            if (x->dst[s]) {
                int h = xp_topo_host(t, s);
                nd += !want[h];
                want[h] = 1;
                meet |= held[h];
                if (h < 32)
                    hm[2 * k + 1] |= 1u << h;
            }
        double cnt = nh + nd - (meet ? 2 : 1);
        if (cnt > 0 && cnt * x->bytes > vol[x->atom])
            vol[x->atom] = cnt * x->bytes;
    }
    for (int a = 0; a < B->natom; a++)
        hv += vol[a];
    b->host_volume_bytes = hv;
    b->host_volume = hv > 0 ? hv / ((double)t->ngpus * t->nic) : 0;
    if (H > 16 || (double)B->ng * (double)(1u << H) > 5e7)
        goto done;
    for (uint32_t m = 1; m + 1 < (1u << H); m++) {
        memset(vol, 0, sizeof(double) * (size_t)(B->natom + 1));
        for (int k = 0; k < B->ng; k++) {
            const group *x = &B->g[k];
            if (x->atom >= 0 && (hm[2 * k] & m) && (hm[2 * k + 1] & ~m) &&
                x->bytes > vol[x->atom])
                vol[x->atom] = x->bytes;
        }
        double need = 0;
        for (int a = 0; a < B->natom; a++)
            need += vol[a];
        int inside = __builtin_popcount(m), side = inside < H - inside ? inside : H - inside;
        double c = need / ((double)side * t->local * t->nic);
        if (c > b->host_cut)
            b->host_cut = c;
    }
done:
    free(hm);
    free(vol);
}

/* The bound from the tallies: per GPU, volume, cut, latency. */
static void bound_terms(bstate *B, xp_bound *b)
{
    const xp_topology *t = B->t;
    for (int s = 0; s < B->n; s++) {
        double terms[3] = {B->need_in[s] > 0 ? B->need_in[s] / B->icap[s] : 0,
                           B->need_out[s] > 0 ? B->need_out[s] / B->ocap[s] : 0,
                           (B->need_in[s] + B->need_out[s]) / t->hbm};
        for (int k = 0; k < 3; k++)
            if (terms[k] > b->per_gpu) {
                b->per_gpu = terms[k];
                b->per_gpu_site = s;
            }
    }
    for (int a = 0; a < B->natom; a++)
        b->volume_bytes += B->atom_vol[a];
    b->volume = b->volume_bytes > 0 ? b->volume_bytes / total_rate(t, B->icap, B->ocap) : 0;
    host_terms(B, b);
    if (B->n <= 16 && B->n >= 2)
        b->cut = cut_bound(B->p, t, B->g, B->ng, B->in, B->icap, B->ocap,
                           B->atom_vol /* reused per cut */);
    double best = b->per_gpu;
    if (b->volume > best)
        best = b->volume;
    if (b->cut > best)
        best = b->cut;
    if (b->host_volume > best)
        best = b->host_volume;
    if (b->host_cut > best)
        best = b->host_cut;
    if (best > 0)
        b->latency = b->host_volume_bytes > 0 && t->latency_inter > t->latency
                         ? t->latency_inter : t->latency;
    b->seconds = best + b->latency;
}

int xp_bound_compute(const xp_program *p, const xp_topology *t, xp_bound *out, ein_error *err)
{
    bstate B = {.p = p, .t = t, .n = t->ngpus, .natom = p->nin};
    int rc;
    if (p->ngpus > B.n)
        return ein_fail(err, EIN_EINVAL, "bound: the program uses %d sites, %s has %d GPUs",
                        p->ngpus, t->name, B.n);
    if ((rc = bound_alloc(&B, err)) < 0)
        goto done;
    xp_bound b = {.per_gpu_site = -1};
    group_outs(&B);
    group_unresolved(&B);
    for (int s = 0; s < B.n; s++) {
        B.icap[s] = gpu_cap(t, s, 0);
        B.ocap[s] = gpu_cap(t, s, 1);
    }
    for (int k = 0; k < B.ng; k++)
        if (B.g[k].atom >= 0)
            group_traffic(&B, &B.g[k]);
    bound_terms(&B, &b);
    *out = b;
done:
    bound_free(&B);
    return rc;
}

void xp_bound_print(const xp_bound *b, FILE *f)
{
    if (b->per_gpu_site >= 0)
        fprintf(f, "per-GPU ingress/egress/HBM: %.3f ms (GPU %d)\n", b->per_gpu * 1e3,
                b->per_gpu_site);
    else
        fprintf(f, "per-GPU ingress/egress/HBM: 0 ms\n");
    fprintf(f, "total volume: %.6g GB, %.3f ms\n", b->volume_bytes / 1e9, b->volume * 1e3);
    fprintf(f, "cuts: %.3f ms\n", b->cut * 1e3);
    if (b->host_volume > 0 || b->host_cut > 0) {
        fprintf(f, "host volume: %.6g GB, %.3f ms\n", b->host_volume_bytes / 1e9,
                b->host_volume * 1e3);
        fprintf(f, "host cuts: %.3f ms\n", b->host_cut * 1e3);
    }
    fprintf(f, "latency: %.3f ms\n", b->latency * 1e3);
    fprintf(f, "bound: %.3f ms\n", b->seconds * 1e3);
}
