/* exchange/xp_program.c — ExProg programs: building, validity, printing. */
#include "exchange/xp_program.h"

#include <stdlib.h>
#include <string.h>

xp_program *xp_program_new(int ngpus, int nin)
{
    xp_program *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->ngpus = ngpus;
    p->nwords = nin > 0 ? (nin + 63) / 64 : 1;
    p->cap_in = nin > 0 ? nin : 1;
    p->in = calloc((size_t)p->cap_in, sizeof *p->in);
    if (!p->in) {
        free(p);
        return NULL;
    }
    return p;
}

void xp_program_free(xp_program *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->nout; i++)
        free(p->out[i].set);
    for (int i = 0; i < p->nact; i++) {
        free(p->act[i].set);
        free(p->act[i].dst);
    }
    free(p->in);
    free(p->out);
    free(p->act);
    free(p);
}

xp_word *xp_set_new(const xp_program *p)
{
    return calloc((size_t)p->nwords, sizeof(xp_word));
}

void xp_set_add(xp_word *s, int i) { s[i / 64] |= (xp_word)1 << (i % 64); }
int xp_set_has(const xp_word *s, int i) { return (int)((s[i / 64] >> (i % 64)) & 1); }

int xp_set_count(const xp_program *p, const xp_word *s)
{
    int n = 0;
    for (int w = 0; w < p->nwords; w++)
        n += __builtin_popcountll(s[w]);
    return n;
}

int xp_set_equal(const xp_program *p, const xp_word *a, const xp_word *b)
{
    return memcmp(a, b, sizeof(xp_word) * (size_t)p->nwords) == 0;
}

static xp_word *set_dup(const xp_program *p, const xp_word *s)
{
    xp_word *d = xp_set_new(p);
    if (d)
        memcpy(d, s, sizeof(xp_word) * (size_t)p->nwords);
    return d;
}

static int check_site(const xp_program *p, int site, const char *what, ein_error *err)
{
    if (site < 0 || site >= p->ngpus)
        return ein_fail(err, EIN_EINVAL, "%s site %d is not one of the %d GPUs", what, site, p->ngpus);
    return 0;
}

int xp_program_add_in(xp_program *p, int atom, int site, double bytes, ein_error *err)
{
    if (p->nin == p->cap_in)
        return ein_fail(err, EIN_EINVAL, "more IN entries than declared (%d)", p->cap_in);
    int rc = check_site(p, site, "IN", err);
    if (rc < 0)
        return rc;
    p->in[p->nin] = (xp_in){.atom = atom, .site = site, .bytes = bytes};
    return p->nin++;
}

#define GROW(arr, n, cap)                                                   \
    do {                                                                    \
        if ((n) == (cap)) {                                                 \
            int ncap_ = (cap) ? 2 * (cap) : 16;                             \
            void *np_ = realloc((arr), sizeof *(arr) * (size_t)ncap_);      \
            if (!np_)                                                       \
                return ein_fail(err, EIN_ENOMEM, "out of memory");         \
            (arr) = np_;                                                    \
            (cap) = ncap_;                                                  \
        }                                                                   \
    } while (0)

int xp_program_add_out(xp_program *p, const xp_word *set, int site, ein_error *err)
{
    int rc = check_site(p, site, "OUT", err);
    if (rc < 0)
        return rc;
    GROW(p->out, p->nout, p->cap_out);
    xp_word *s = set_dup(p, set);
    if (!s)
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    p->out[p->nout] = (xp_out){.set = s, .site = site};
    return p->nout++;
}

int xp_program_add_action(xp_program *p, const xp_word *set, int src,
                          const int *dst, int ndst, ein_error *err)
{
    int rc = check_site(p, src, "action source", err);
    for (int i = 0; rc == 0 && i < ndst; i++)
        rc = check_site(p, dst[i], "action destination", err);
    if (rc < 0)
        return rc;
    GROW(p->act, p->nact, p->cap_act);
    xp_word *s = set_dup(p, set);
    int *d = malloc(sizeof(int) * (size_t)(ndst ? ndst : 1));
    if (!s || !d) {
        free(s);
        free(d);
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    }
    if (ndst)
        memcpy(d, dst, sizeof(int) * (size_t)ndst);
    p->act[p->nact] = (xp_action){.set = s, .src = src, .ndst = ndst, .dst = d};
    return p->nact++;
}

static int subset(const xp_program *p, const xp_word *a, const xp_word *b)
{
    for (int w = 0; w < p->nwords; w++)
        if (a[w] & ~b[w])
            return 0;
    return 1;
}

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
        if (!xp_set_has(have[i], first) || !subset(p, have[i], rest))
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
    xp_word *rest = set_dup(p, x);
    if (!rest)
        return -1;
    int r = cover(p, rest, have, n, pick, 0);
    free(rest);
    return r;
}

typedef struct state {
    xp_word **set;   /* aggregates held */
    int *site;
    int n, cap;
} state;

static int state_has(const xp_program *p, const state *st, const xp_word *x, int site)
{
    for (int i = 0; i < st->n; i++)
        if (st->site[i] == site && xp_set_equal(p, st->set[i], x))
            return 1;
    return 0;
}

static int state_add(const xp_program *p, state *st, const xp_word *x, int site)
{
    if (state_has(p, st, x, site))
        return 0;
    if (st->n == st->cap) {
        int cap = st->cap ? 2 * st->cap : 64;
        xp_word **s = realloc(st->set, sizeof *s * (size_t)cap);
        if (!s)
            return EIN_ENOMEM;
        st->set = s;
        int *t = realloc(st->site, sizeof *t * (size_t)cap);
        if (!t)
            return EIN_ENOMEM;
        st->site = t;
        st->cap = cap;
    }
    if (!(st->set[st->n] = set_dup(p, x)))
        return EIN_ENOMEM;
    st->site[st->n++] = site;
    return 0;
}

/* Is x partitioned by aggregates held at site? */
static int enabled(const xp_program *p, const state *st, const xp_word *x, int site)
{
    xp_word **cand = malloc(sizeof *cand * (size_t)(st->n + 1));
    int *pick = malloc(sizeof(int) * (size_t)(p->nin + 1));
    int nc = 0, ok = 0;
    if (cand && pick) {
        for (int i = 0; i < st->n; i++)
            if (st->site[i] == site && subset(p, st->set[i], x))
                cand[nc++] = st->set[i];
        ok = xp_partition_find(p, x, cand, nc, pick) >= 0;
    }
    free(cand);
    free(pick);
    return ok;
}

int xp_program_check(const xp_program *p, ein_error *err)
{
    int rc = 0;
    state st = {0};
    char *fired = calloc((size_t)p->nact + 1, 1);
    xp_word *one = xp_set_new(p);
    if (!fired || !one) {
        rc = ein_fail(err, EIN_ENOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < p->nin; i++) {
        memset(one, 0, sizeof(xp_word) * (size_t)p->nwords);
        xp_set_add(one, i);
        if (state_add(p, &st, one, p->in[i].site) < 0) {
            rc = ein_fail(err, EIN_ENOMEM, "out of memory");
            goto done;
        }
    }
    /* Closure: fire enabled actions until nothing changes. */
    for (int changed = 1; changed;) {
        changed = 0;
        for (int a = 0; a < p->nact; a++) {
            const xp_action *ac = &p->act[a];
            if (fired[a] || !enabled(p, &st, ac->set, ac->src))
                continue;
            fired[a] = 1;
            changed = 1;
            int r = state_add(p, &st, ac->set, ac->src);
            for (int d = 0; r == 0 && d < ac->ndst; d++)
                r = state_add(p, &st, ac->set, ac->dst[d]);
            if (r < 0) {
                rc = ein_fail(err, EIN_ENOMEM, "out of memory");
                goto done;
            }
        }
    }
    for (int a = 0; a < p->nact; a++)
        if (!fired[a]) {
            rc = ein_fail(err, EIN_EINVAL,
                          "not well-formed: action %d (at site %d) is never enabled", a,
                          p->act[a].src);
            goto done;
        }
    for (int o = 0; o < p->nout; o++)
        if (!state_has(p, &st, p->out[o].set, p->out[o].site)) {
            rc = ein_fail(err, EIN_EINVAL, "not valid: OUT %d is never reached at site %d", o,
                          p->out[o].site);
            goto done;
        }
done:
    for (int i = 0; i < st.n; i++)
        free(st.set[i]);
    free(st.set);
    free(st.site);
    free(fired);
    free(one);
    return rc;
}

static void print_set(const xp_program *p, FILE *f, const xp_word *s,
                      const char *(*name)(int, void *), void *ctx)
{
    int first = 1;
    for (int i = 0; i < p->nin; i++) {
        if (!xp_set_has(s, i))
            continue;
        if (name)
            fprintf(f, "%s%s_%d", first ? "" : "+", name(p->in[i].atom, ctx), p->in[i].site);
        else
            fprintf(f, "%sA%d_%d", first ? "" : "+", p->in[i].atom, p->in[i].site);
        first = 0;
    }
}

void xp_program_print(const xp_program *p, FILE *f,
                      const char *(*atom_name)(int atom, void *ctx), void *ctx)
{
    fprintf(f, "GPUS: ");
    for (int g = 0; g < p->ngpus; g++)
        fprintf(f, "%s%d", g ? ", " : "", g);
    fprintf(f, "\nIN: ");
    for (int i = 0; i < p->nin; i++) {
        xp_word *one = xp_set_new(p);
        if (!one)
            return;
        xp_set_add(one, i);
        fprintf(f, "%s", i ? "; " : "");
        print_set(p, f, one, atom_name, ctx);
        fprintf(f, " @ %d (size: %.0f bytes)", p->in[i].site, p->in[i].bytes);
        free(one);
    }
    fprintf(f, "\nOUT: ");
    for (int o = 0; o < p->nout; o++) {
        fprintf(f, "%s", o ? "; " : "");
        print_set(p, f, p->out[o].set, atom_name, ctx);
        fprintf(f, " @ %d", p->out[o].site);
    }
    fprintf(f, "\n");
    for (int a = 0; a < p->nact; a++) {
        print_set(p, f, p->act[a].set, atom_name, ctx);
        fprintf(f, " @ %d", p->act[a].src);
        for (int d = 0; d < p->act[a].ndst; d++)
            fprintf(f, "%s%d", d ? ", " : " -> ", p->act[a].dst[d]);
        fprintf(f, "\n");
    }
}
