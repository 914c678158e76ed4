/* exchange/xp_parse_build.c — the second phase of reading ExProg text:
 * the program built from the syntax tree, with the checks that need the
 * whole of it (sites, partitions, paths; see xp_parse.c). */
#include "exchange/xp_parse_int.h"

#include <stdlib.h>
#include <string.h>

#include "common/base/ein_vec.h"

static int site_ok(const xp_program *p, int s)
{
    return s >= 0 && s < p->ngpus && (!p->gpu_ok || p->gpu_ok[s]);
}

static int check_target(parser *P, const xp_program *p, const target *t)
{
    if (t->part < 0 && !site_ok(p, t->site))
        return ein_fail_at(P->err, EIN_EPARSE, P->file, t->line, t->col,
                           "site %d is not one of the GPUS, expected a site listed in GPUS",
                           t->site);
    return 0;
}

/* The number of sites: one past the largest site named anywhere. */
static int build_ngpus(const parser *P)
{
    int ngpus = P->maxsite + 1;
    for (int i = 0; i < P->ngpus_decl; i++)
        if (P->gpus[i] + 1 > ngpus)
            ngpus = P->gpus[i] + 1;
    return ngpus;
}

/* GPUS: mark the listed sites usable (no GPUS section: every site is). */
static int build_gpus(parser *P, xp_program *p)
{
    if (!P->gpus_seen)
        return 0;
    if (!(p->gpu_ok = calloc((size_t)p->ngpus, 1)))
        return xp_parse_oom(P);
    for (int i = 0; i < P->ngpus_decl; i++)
        p->gpu_ok[P->gpus[i]] = 1;
    return 0;
}

/* PARTITIONS: every member a GPU; together they cover every GPU. */
static int build_partitions(parser *P, xp_program *p)
{
    int rc, ndecl = P->gpus_seen ? P->ngpus_decl : p->ngpus, covered = 0;
    for (int i = 0; i < P->npart; i++) {
        for (int k = 0; P->part[i].mem && k < P->part[i].size; k++)
            if (!site_ok(p, P->part[i].mem[k]))
                return ein_fail_at(P->err, EIN_EPARSE, P->file, P->part[i].line,
                                   P->part[i].col,
                                   "partition %s: site %d is not one of the GPUS, "
                                   "expected a site listed in GPUS",
                                   P->part[i].name, P->part[i].mem[k]);
        if ((rc = xp_program_add_partition(p, P->part[i].name, P->part[i].size, P->part[i].mem,
                                           P->err)) < 0)
            return rc;
        covered += P->part[i].size;
    }
    if (P->npart && covered != ndecl)
        return ein_fail_at(P->err, EIN_EPARSE, P->file, P->parts_line, P->parts_col,
                           "partitions must be disjoint and cover the GPUS: they hold %d sites, "
                           "there are %d GPUs; expected every GPU in one partition", covered,
                           ndecl);
    return 0;
}

/* IN: each atom at a GPU, with its size and name. */
static int build_ins(parser *P, xp_program *p)
{
    int rc;
    for (int i = 0; i < P->nin; i++) {
        if (!site_ok(p, P->in[i].site))
            return ein_fail_at(P->err, EIN_EPARSE, P->file, P->in[i].line, P->in[i].col,
                               "IN %s: site %d is not one of the GPUS, expected a site "
                               "listed in GPUS", P->in[i].name,
                               P->in[i].site);
        if ((rc = xp_program_add_in(p, i, P->in[i].site, P->in[i].bytes, P->err)) < 0 ||
            (rc = xp_program_set_name(p, i, P->in[i].name, P->err)) < 0)
            return rc;
    }
    return 0;
}

/* x := the set of atoms the statement names (x has p->nwords words). */
static void stmt_set(const stmt *s, const xp_program *p, xp_word *x)
{
    memset(x, 0, sizeof(xp_word) * (size_t)p->nwords);
    for (int k = 0; k < s->x.n; k++)
        xp_set_add(x, s->x.el[k]);
}

/* OUT: each statement's set at each of its targets. x is scratch. */
static int build_outs(parser *P, xp_program *p, xp_word *x)
{
    int rc;
    for (int o = 0; o < P->nout; o++) {
        stmt *s = &P->out[o];
        stmt_set(s, p, x);
        for (int k = 0; k < s->nsrc; k++) {
            if ((rc = check_target(P, p, &s->src[k])) < 0)
                return rc;
            rc = s->src[k].part >= 0 ? xp_program_add_out_part(p, x, s->src[k].part, P->err)
                                     : xp_program_add_out(p, x, s->src[k].site, P->err);
            if (rc < 0)
                return rc;
        }
    }
    return 0;
}

/* An action without destinations: a local aggregation of x at each source. */
static int build_local(parser *P, xp_program *p, const stmt *s, const xp_word *x)
{
    int rc;
    for (int k = 0; k < s->nsrc; k++) {
        if ((rc = check_target(P, p, &s->src[k])) < 0)
            return rc;
        rc = s->src[k].part >= 0 ? xp_program_add_local_part(p, x, s->src[k].part, P->err)
                                 : xp_program_add_action(p, x, s->src[k].site, NULL, 0, P->err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* A path may not visit a site twice: every hop is a GPU and differs from
 * the source and from the hops before it. *last := the last site before
 * the destinations (the source when there are no hops). */
static int check_hops(parser *P, const xp_program *p, const stmt *s, int src, int *last)
{
    *last = src;
    for (int h = 0; h < s->nhop; h++) {
        int again = s->hop[h] == src;
        for (int e = 0; e < h; e++)
            again |= s->hop[e] == s->hop[h];
        if (!site_ok(p, s->hop[h]) || again)
            return ein_fail_at(P->err, EIN_EPARSE, P->file, s->line, s->col,
                               "relay hop %d: site %d is %s", h + 1, s->hop[h],
                               !site_ok(p, s->hop[h])
                                   ? "not one of the GPUS, expected a GPU"
                                   : "already on the path, expected a site it has not "
                                     "visited");
        *last = s->hop[h];
    }
    return 0;
}

/* A relay's destinations, partitions expanded to their members: site (or
 * -1 for a partition slot placed later), partition and slot (-1, -1 for a
 * plain site). Owned by build_relay; freed by dests_free. */
typedef struct dests {
    int *site, *part, *slot;
    int n;
} dests;

static void dests_free(dests *d)
{
    free(d->site), free(d->part), free(d->slot);
}

/* Fails when destination n repeats an earlier one or lies on the path. */
static int check_dest(parser *P, const stmt *s, const target *t, const dests *d, int n, int src,
                      int last)
{
    for (int e = 0; e < n; e++)
        if ((d->site[e] >= 0 && d->site[e] == d->site[n]) ||
            (d->part[n] >= 0 && d->part[e] == d->part[n] && d->slot[e] == d->slot[n]))
            return ein_fail_at(P->err, EIN_EPARSE, P->file, t->line, t->col,
                               "destination %d named twice, expected each "
                               "destination once", d->site[n]);
    int again = d->site[n] >= 0 && d->site[n] == src;
    for (int h = 0; h < s->nhop; h++)
        again |= d->site[n] >= 0 && d->site[n] == s->hop[h];
    if (again)
        return ein_fail_at(P->err, EIN_EPARSE, P->file, t->line, t->col,
                           "destination %d is %s, expected a site the path "
                           "has not visited", d->site[n],
                           d->site[n] == last ? "where the data already is"
                                              : "already on the path");
    return 0;
}

/* Expand and check the statement's destinations into d (empty on entry). */
static int expand_dests(parser *P, const xp_program *p, const stmt *s, int src, int last,
                        dests *d)
{
    int rc, cap = 0;
    for (int k = 0; k < s->ndst; k++)
        cap += s->dst[k].part >= 0 ? p->part[s->dst[k].part].size : 1;
    d->site = malloc(sizeof(int) * (size_t)cap);
    d->part = malloc(sizeof(int) * (size_t)cap);
    d->slot = malloc(sizeof(int) * (size_t)cap);
    if (!d->site || !d->part || !d->slot)
        return xp_parse_oom(P);
    for (int k = 0; k < s->ndst; k++) {
        const target *t = &s->dst[k];
        if ((rc = check_target(P, p, t)) < 0)
            return rc;
        int m = t->part >= 0 ? p->part[t->part].size : 1;
        for (int j = 0; j < m; j++) {
            d->site[d->n] = t->part >= 0 ? p->part[t->part].member[j] : t->site;
            d->part[d->n] = t->part >= 0 ? t->part : -1;
            d->slot[d->n] = t->part >= 0 ? j : -1;
            if ((rc = check_dest(P, s, t, d, d->n, src, last)) < 0)
                return rc;
            d->n++;
        }
    }
    return 0;
}

/* Add the relay with placeholder sites for partition slots, then set
 * every destination's site, partition and slot on the new action. */
static int add_relay_dests(parser *P, xp_program *p, const stmt *s, const xp_word *x, int src,
                           const dests *d)
{
    int *tmp = malloc(sizeof(int) * (size_t)d->n);
    if (!tmp)
        return xp_parse_oom(P);
    for (int k = 0; k < d->n; k++)
        tmp[k] = d->site[k] >= 0 ? d->site[k] : src;
    int rc = xp_program_add_relay(p, x, src, s->hop, s->nhop, tmp, d->n, P->err);
    free(tmp);
    if (rc < 0)
        return rc;
    xp_action *ac = &p->act[p->nact - 1];
    for (int k = 0; k < d->n; k++) {
        ac->dst[k] = d->site[k];
        ac->dst_part[k] = d->part[k];
        ac->dst_slot[k] = d->slot[k];
    }
    return 0;
}

/* An action with destinations: x from its source over its hops. */
static int build_relay(parser *P, xp_program *p, const stmt *s, const xp_word *x)
{
    int rc, src = s->src[0].site, last;
    dests d = {0};
    if ((rc = check_target(P, p, &s->src[0])) < 0 || (rc = check_hops(P, p, s, src, &last)) < 0)
        return rc;
    if ((rc = expand_dests(P, p, s, src, last, &d)) == 0)
        rc = add_relay_dests(P, p, s, x, src, &d);
    dests_free(&d);
    return rc;
}

/* The action lines, in order; each new action records its statement's
 * position and chunk. x is scratch. */
static int build_actions(parser *P, xp_program *p, xp_word *x)
{
    int rc;
    for (int a = 0; a < P->nact; a++) {
        stmt *s = &P->act[a];
        int first = p->nact;
        stmt_set(s, p, x);
        rc = s->ndst == 0 ? build_local(P, p, s, x) : build_relay(P, p, s, x);
        if (rc < 0)
            return rc;
        for (int k = first; k < p->nact; k++) {
            p->act[k].line = s->line;
            p->act[k].col = s->col;
            p->act[k].chunk = s->chunk;
            p->act[k].run = s->run;
            p->act[k].nchunks = s->nchunks;
        }
    }
    return 0;
}

int xp_parse_build(parser *P, xp_program **out)
{
    int rc;
    xp_program *p = xp_program_new(build_ngpus(P), P->nin);
    xp_word *x = NULL;
    if (!p)
        return xp_parse_oom(P);
    if ((rc = build_gpus(P, p)) < 0 || (rc = build_partitions(P, p)) < 0 ||
        (rc = build_ins(P, p)) < 0)
        goto fail;
    if (!(x = xp_set_new(p))) {
        rc = xp_parse_oom(P);
        goto fail;
    }
    if ((rc = build_outs(P, p, x)) < 0 || (rc = build_actions(P, p, x)) < 0)
        goto fail;
    rc = 0;
    *out = p;
    p = NULL;
fail:
    free(x);
    xp_program_free(p);
    return rc;
}

int xp_parse_oom(parser *P)
{
    return ein_fail(P->err, EIN_ENOMEM, "out of memory");
}
