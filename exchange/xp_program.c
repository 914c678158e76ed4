/* exchange/xp_program.c — ExProg programs: building, validity, printing. */
#include "exchange/xp_program.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/ein_vec.h"

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

static void action_free(xp_action *a)
{
    free(a->set);
    free(a->dst);
    free(a->relay);
    free(a->dst_part);
    free(a->dst_slot);
}

void xp_program_free(xp_program *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->nout; i++)
        free(p->out[i].set);
    for (int i = 0; i < p->nact; i++)
        action_free(&p->act[i]);
    if (p->name)
        for (int i = 0; i < p->cap_in; i++)
            free(p->name[i]);
    for (int i = 0; i < p->npart; i++)
        free(p->part[i].member);
    free(p->part);
    free(p->name);
    free(p->gpu_ok);
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

int xp_set_subset(const xp_program *p, const xp_word *a, const xp_word *b)
{
    for (int w = 0; w < p->nwords; w++)
        if (a[w] & ~b[w])
            return 0;
    return 1;
}

void xp_set_span(const xp_program *p, const xp_word *s, int *first, int *last)
{
    int f = 0, l = -1;
    for (int w = 0; w < p->nwords; w++)
        if (s[w]) {
            if (l < 0)
                f = w;
            l = w;
        }
    *first = f;
    *last = l;
}

int xp_set_subset_span(const xp_word *a, const xp_word *b, int first, int last)
{
    for (int w = first; w <= last; w++)
        if (a[w] & ~b[w])
            return 0;
    return 1;
}

int xp_set_equal_span(const xp_word *a, const xp_word *b, int first, int last)
{
    return last < first ||
           memcmp(a + first, b + first, sizeof(xp_word) * (size_t)(last - first + 1)) == 0;
}

int xp_set_disjoint(const xp_program *p, const xp_word *a, const xp_word *b)
{
    for (int w = 0; w < p->nwords; w++)
        if (a[w] & b[w])
            return 0;
    return 1;
}

double xp_set_bytes(const xp_program *p, const xp_word *s)
{
    double b = 0;
    for (int w = 0; w < p->nwords; w++)
        for (xp_word m = s[w]; m; m &= m - 1) {
            int i = w * 64 + __builtin_ctzll(m);
            if (i < p->nin && p->in[i].bytes > b)
                b = p->in[i].bytes;
        }
    return b;
}

static xp_word *set_dup(const xp_program *p, const xp_word *s)
{
    xp_word *d = xp_set_new(p);
    if (d)
        memcpy(d, s, sizeof(xp_word) * (size_t)p->nwords);
    return d;
}

static int *ints_dup(const int *a, int n)
{
    int *d = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    if (d && n > 0)
        memcpy(d, a, sizeof(int) * (size_t)n);
    return d;
}

static int check_site(const xp_program *p, int site, const char *what, ein_error *err)
{
    if (site < 0 || site >= p->ngpus || (p->gpu_ok && !p->gpu_ok[site]))
        return ein_fail(err, EIN_EINVAL, "%s site %d is not one of the GPUs", what, site);
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

int xp_program_set_name(xp_program *p, int in, const char *name, ein_error *err)
{
    if (!p->name && !(p->name = calloc((size_t)p->cap_in, sizeof *p->name)))
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    free(p->name[in]);
    if (!(p->name[in] = strdup(name)))
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    return 0;
}

#define GROW(arr, n, cap)                                                        \
    do {                                                                         \
        if (ein_vec_reserve(&(arr), &(cap), (int64_t)(n) + 1, sizeof *(arr)) < 0) \
            return ein_fail(err, EIN_ENOMEM, "out of memory");                   \
    } while (0)

static int out_push(xp_program *p, const xp_word *set, int site, int part, int slot,
                    ein_error *err)
{
    GROW(p->out, p->nout, p->cap_out);
    xp_word *s = set_dup(p, set);
    if (!s)
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    p->out[p->nout] = (xp_out){.set = s, .site = site, .part = part, .slot = slot};
    return p->nout++;
}

int xp_program_add_out(xp_program *p, const xp_word *set, int site, ein_error *err)
{
    int rc = check_site(p, site, "OUT", err);
    if (rc < 0)
        return rc;
    return out_push(p, set, site, -1, -1, err);
}

int xp_program_add_out_part(xp_program *p, const xp_word *set, int part, ein_error *err)
{
    if (part < 0 || part >= p->npart)
        return ein_fail(err, EIN_EINVAL, "OUT names partition %d of %d", part, p->npart);
    for (int k = 0; k < p->part[part].size; k++) {
        int rc = out_push(p, set, p->part[part].member[k], part, k, err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int act_push(xp_program *p, const xp_word *set, int src, int src_part, int src_slot,
                    const int *relay, int nrelay, const int *dst, int ndst, ein_error *err)
{
    GROW(p->act, p->nact, p->cap_act);
    xp_action a = {0};
    a.set = set_dup(p, set);
    a.src = src;
    a.src_part = src_part;
    a.src_slot = src_slot;
    a.ndst = ndst;
    a.nrelay = nrelay;
    a.dst = ints_dup(dst, ndst);
    a.relay = nrelay ? ints_dup(relay, nrelay) : NULL;
    a.dst_part = malloc(sizeof(int) * (size_t)(ndst ? ndst : 1));
    a.dst_slot = malloc(sizeof(int) * (size_t)(ndst ? ndst : 1));
    if (!a.set || !a.dst || (nrelay && !a.relay) || !a.dst_part || !a.dst_slot) {
        action_free(&a);
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    }
    for (int d = 0; d < ndst; d++)
        a.dst_part[d] = a.dst_slot[d] = -1;
    a.nchunks = 1;
    a.run = 1;
    p->act[p->nact] = a;
    return p->nact++;
}

int xp_program_add_relay(xp_program *p, const xp_word *set, int src, const int *relay,
                         int nrelay, const int *dst, int ndst, ein_error *err)
{
    int rc = check_site(p, src, "action source", err);
    for (int i = 0; rc == 0 && i < nrelay; i++)
        rc = check_site(p, relay[i], "relay", err);
    for (int i = 0; rc == 0 && i < ndst; i++)
        rc = check_site(p, dst[i], "action destination", err);
    if (rc < 0)
        return rc;
    if (nrelay && !ndst)
        return ein_fail(err, EIN_EINVAL, "a relay needs a destination");
    return act_push(p, set, src, -1, -1, relay, nrelay, dst, ndst, err);
}

int xp_program_add_action(xp_program *p, const xp_word *set, int src,
                          const int *dst, int ndst, ein_error *err)
{
    return xp_program_add_relay(p, set, src, NULL, 0, dst, ndst, err);
}

int xp_program_add_local_part(xp_program *p, const xp_word *set, int part, ein_error *err)
{
    if (part < 0 || part >= p->npart)
        return ein_fail(err, EIN_EINVAL, "action names partition %d of %d", part, p->npart);
    for (int k = 0; k < p->part[part].size; k++) {
        int rc = act_push(p, set, p->part[part].member[k], part, k, NULL, 0, NULL, 0, err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int xp_action_set_chunk(xp_program *p, int a, int chunk, int run, int nchunks,
                        ein_error *err)
{
    if (a < 0 || a >= p->nact)
        return ein_fail(err, EIN_EINVAL, "action %d of %d", a, p->nact);
    if (nchunks < 1 || nchunks > XP_CHUNKS_MAX || chunk < 0 || run < 1 ||
        chunk + run > nchunks)
        return ein_fail(err, EIN_EINVAL, "chunks %d..%d of %d: expected a count from 1 to %d "
                        "and chunks from 0 to the count - 1", chunk, chunk + run - 1, nchunks,
                        XP_CHUNKS_MAX);
    p->act[a].chunk = chunk;
    p->act[a].run = run;
    p->act[a].nchunks = nchunks;
    return 0;
}

int xp_program_chunked(const xp_program *p)
{
    for (int a = 0; a < p->nact; a++)
        if (p->act[a].nchunks > 1)
            return 1;
    return 0;
}

static int64_t gcd64(int64_t a, int64_t b)
{
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

int xp_program_chunk_units(const xp_program *p, int64_t *units, ein_error *err)
{
    int64_t L = 1;
    for (int a = 0; a < p->nact; a++) {
        int64_t k = p->act[a].nchunks > 0 ? p->act[a].nchunks : 1;
        L = L / gcd64(L, k) * k;
        if (L > XP_CHUNK_UNITS_MAX)
            return ein_fail(err, EIN_EUNSUPPORTED,
                            "the chunk counts' least common multiple is over %lld; expected "
                            "chunk counts with a smaller common multiple (powers of two, say)",
                            (long long)XP_CHUNK_UNITS_MAX);
    }
    *units = L;
    return 0;
}

int xp_program_expand_chunks(const xp_program *p, xp_program **out, int **orig,
                             ein_error *err)
{
    xp_program *q = xp_program_copy(p);
    int n = 0;
    for (int a = 0; a < p->nact; a++)
        n += p->act[a].run;
    int *map = malloc(sizeof(int) * (size_t)(n + 1));
    if (!q || !map)
        goto oom;
    while (q->nact)
        xp_program_remove_action(q, q->nact - 1);
    n = 0;
    for (int a = 0; a < p->nact; a++) {
        const xp_action *ac = &p->act[a];
        int k = ac->run;
        for (int c = 0; c < k; c++) {
            if (act_push(q, ac->set, ac->src, ac->src_part, ac->src_slot, ac->relay,
                         ac->nrelay, ac->dst, ac->ndst, err) < 0)
                goto oom;
            xp_action *qa = &q->act[q->nact - 1];
            memcpy(qa->dst_part, ac->dst_part, sizeof(int) * (size_t)ac->ndst);
            memcpy(qa->dst_slot, ac->dst_slot, sizeof(int) * (size_t)ac->ndst);
            qa->line = ac->line;
            qa->col = ac->col;
            qa->nchunks = ac->nchunks;
            qa->chunk = ac->chunk + c;
            qa->run = 1;
            map[n++] = a;
        }
    }
    *out = q;
    if (orig)
        *orig = map;
    else
        free(map);
    return 0;
oom:
    xp_program_free(q);
    free(map);
    return ein_fail(err, EIN_ENOMEM, "out of memory");
}

void xp_program_remove_action(xp_program *p, int a)
{
    action_free(&p->act[a]);
    memmove(&p->act[a], &p->act[a + 1], sizeof *p->act * (size_t)(p->nact - a - 1));
    p->nact--;
}

int xp_program_add_partition(xp_program *p, const char *name, int size, const int *members,
                             ein_error *err)
{
    if (size <= 0)
        return ein_fail(err, EIN_EINVAL, "partition %s: size %d", name, size);
    if (strlen(name) >= XP_NAME_MAX)
        return ein_fail(err, EIN_EINVAL, "partition name too long");
    for (int i = 0; i < p->npart; i++)
        if (strcmp(p->part[i].name, name) == 0)
            return ein_fail(err, EIN_EINVAL, "partition %s declared twice", name);
    if (ein_vec_reserve(&p->part, &p->cap_part, (int64_t)p->npart + 1, sizeof *p->part) < 0)
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    xp_partition *g = &p->part[p->npart];
    memset(g, 0, sizeof *g);
    strcpy(g->name, name);
    g->size = size;
    g->by_size = members == NULL;
    if (!(g->member = malloc(sizeof(int) * (size_t)size)))
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    for (int k = 0; k < size; k++)
        g->member[k] = members ? members[k] : -1;
    return p->npart++;
}

int xp_program_assign(xp_program *p, int part, const int *members, ein_error *err)
{
    xp_partition *g = &p->part[part];
    for (int k = 0; k < g->size; k++) {
        if (members) {
            int rc = check_site(p, members[k], "partition member", err);
            if (rc < 0)
                return rc;
        }
        g->member[k] = members ? members[k] : -1;
    }
    for (int o = 0; o < p->nout; o++)
        if (p->out[o].part == part)
            p->out[o].site = g->member[p->out[o].slot];
    for (int a = 0; a < p->nact; a++) {
        xp_action *ac = &p->act[a];
        if (ac->src_part == part)
            ac->src = g->member[ac->src_slot];
        for (int d = 0; d < ac->ndst; d++)
            if (ac->dst_part[d] == part)
                ac->dst[d] = g->member[ac->dst_slot[d]];
    }
    return 0;
}

int xp_program_resolved(const xp_program *p)
{
    for (int i = 0; i < p->npart; i++)
        if (p->part[i].member[0] < 0)
            return 0;
    return 1;
}

xp_program *xp_program_copy(const xp_program *p)
{
    xp_program *q = xp_program_new(p->ngpus, p->cap_in);
    ein_error err;
    if (!q)
        return NULL;
    memcpy(q->in, p->in, sizeof *p->in * (size_t)p->nin);
    q->nin = p->nin;
    q->nwords = p->nwords;
    if (p->gpu_ok) {
        if (!(q->gpu_ok = malloc((size_t)p->ngpus)))
            goto fail;
        memcpy(q->gpu_ok, p->gpu_ok, (size_t)p->ngpus);
    }
    if (p->name)
        for (int i = 0; i < p->nin; i++)
            if (p->name[i] && xp_program_set_name(q, i, p->name[i], &err) < 0)
                goto fail;
    for (int i = 0; i < p->npart; i++) {
        const xp_partition *g = &p->part[i];
        if (xp_program_add_partition(q, g->name, g->size, g->member, &err) < 0)
            goto fail;
        q->part[i].by_size = g->by_size;
    }
    /* Room for everything up front (the search copies programs a lot). */
    if (!(q->out = malloc(sizeof *q->out * (size_t)(p->nout + 1))) ||
        !(q->act = malloc(sizeof *q->act * (size_t)(p->nact + 4))))
        goto fail;
    q->cap_out = p->nout + 1;
    q->cap_act = p->nact + 4;
    for (int o = 0; o < p->nout; o++)
        if (out_push(q, p->out[o].set, p->out[o].site, p->out[o].part, p->out[o].slot, &err) < 0)
            goto fail;
    for (int a = 0; a < p->nact; a++) {
        const xp_action *ac = &p->act[a];
        if (act_push(q, ac->set, ac->src, ac->src_part, ac->src_slot, ac->relay, ac->nrelay,
                     ac->dst, ac->ndst, &err) < 0)
            goto fail;
        xp_action *qa = &q->act[a];
        memcpy(qa->dst_part, ac->dst_part, sizeof(int) * (size_t)ac->ndst);
        memcpy(qa->dst_slot, ac->dst_slot, sizeof(int) * (size_t)ac->ndst);
        qa->line = ac->line;
        qa->col = ac->col;
        qa->chunk = ac->chunk;
        qa->run = ac->run;
        qa->nchunks = ac->nchunks;
    }
    return q;
fail:
    xp_program_free(q);
    return NULL;
}

static int ints_equal(const int *a, const int *b, int n)
{
    return n == 0 || memcmp(a, b, sizeof(int) * (size_t)n) == 0;
}

int xp_program_equal(const xp_program *a, const xp_program *b)
{
    if (a->ngpus != b->ngpus || a->nin != b->nin || a->nout != b->nout ||
        a->nact != b->nact || a->npart != b->npart || a->nwords != b->nwords)
        return 0;
    for (int s = 0; s < a->ngpus; s++)
        if ((a->gpu_ok ? a->gpu_ok[s] : 1) != (b->gpu_ok ? b->gpu_ok[s] : 1))
            return 0;
    for (int i = 0; i < a->nin; i++) {
        if (a->in[i].site != b->in[i].site || a->in[i].bytes != b->in[i].bytes)
            return 0;
        const char *na = a->name ? a->name[i] : NULL, *nb = b->name ? b->name[i] : NULL;
        if ((na == NULL) != (nb == NULL) || (na && strcmp(na, nb) != 0))
            return 0;
    }
    for (int i = 0; i < a->npart; i++) {
        const xp_partition *g = &a->part[i], *h = &b->part[i];
        if (strcmp(g->name, h->name) || g->size != h->size || g->by_size != h->by_size ||
            !ints_equal(g->member, h->member, g->size))
            return 0;
    }
    for (int o = 0; o < a->nout; o++) {
        const xp_out *x = &a->out[o], *y = &b->out[o];
        if (!xp_set_equal(a, x->set, y->set) || x->site != y->site || x->part != y->part ||
            x->slot != y->slot)
            return 0;
    }
    for (int i = 0; i < a->nact; i++) {
        const xp_action *x = &a->act[i], *y = &b->act[i];
        if (!xp_set_equal(a, x->set, y->set) || x->src != y->src || x->ndst != y->ndst ||
            x->nrelay != y->nrelay || x->src_part != y->src_part || x->src_slot != y->src_slot ||
            !ints_equal(x->dst, y->dst, x->ndst) || !ints_equal(x->relay, y->relay, x->nrelay) ||
            !ints_equal(x->dst_part, y->dst_part, x->ndst) ||
            !ints_equal(x->dst_slot, y->dst_slot, x->ndst) || x->chunk != y->chunk ||
            x->run != y->run || x->nchunks != y->nchunks)
            return 0;
    }
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
    xp_word *rest = set_dup(p, x);
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
        if (!(e->set = set_dup(p, x)))
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

/* ---- printing ---- */

static char **print_names(const xp_program *p, const char *(*atom_name)(int, void *),
                          void *ctx)
{
    char **nm = calloc((size_t)p->nin + 1, sizeof *nm);
    if (!nm)
        return NULL;
    for (int i = 0; i < p->nin; i++) {
        char buf[XP_NAME_MAX + 32];
        if (p->name && p->name[i]) {
            snprintf(buf, sizeof buf, "%s", p->name[i]);
        } else {
            const char *base = atom_name ? atom_name(p->in[i].atom, ctx) : NULL;
            if (base)
                snprintf(buf, sizeof buf, "%s_%d", base, p->in[i].site);
            else
                snprintf(buf, sizeof buf, "A%d_%d", p->in[i].atom, p->in[i].site);
            /* Two copies of one atom on one site: keep names unique. */
            int dup = 0;
            for (int j = 0; j < i; j++)
                dup += nm[j] && strncmp(nm[j], buf, strlen(buf)) == 0 &&
                       (nm[j][strlen(buf)] == 0 || nm[j][strlen(buf)] == 'c');
            if (dup) {
                size_t l = strlen(buf);
                snprintf(buf + l, sizeof buf - l, "c%d", dup);
            }
        }
        nm[i] = strdup(buf);
    }
    return nm;
}

static void print_set(const xp_program *p, FILE *f, const xp_word *s, char **nm)
{
    int first = 1;
    for (int i = 0; i < p->nin; i++) {
        if (!xp_set_has(s, i))
            continue;
        fprintf(f, "%s%s", first ? "" : "+", nm[i] ? nm[i] : "?");
        first = 0;
    }
}

/* A list of targets (site, part, slot): a full run of a partition's slots
 * prints as its name. */
static void print_targets(const xp_program *p, FILE *f, const int *site, const int *part,
                          const int *slot, int n)
{
    for (int i = 0; i < n;) {
        fprintf(f, "%s", i ? ", " : "");
        if (part && part[i] >= 0 && slot[i] == 0) {
            const xp_partition *g = &p->part[part[i]];
            int k = 0;
            while (k < g->size && i + k < n && part[i + k] == part[i] && slot[i + k] == k)
                k++;
            if (k == g->size) {
                fprintf(f, "%s", g->name);
                i += k;
                continue;
            }
        }
        fprintf(f, "%d", site[i]);
        i++;
    }
}

static void print_size(FILE *f, double b)
{
    if (b == 1e9)
        return;
    if (b >= 1e9 && fmod(b, 1e7) == 0)
        fprintf(f, " (size: %.15g GB)", b / 1e9);
    else if (b >= 1e6 && fmod(b, 1e4) == 0)
        fprintf(f, " (size: %.15g MB)", b / 1e6);
    else if (b >= 1e3 && fmod(b, 10) == 0)
        fprintf(f, " (size: %.15g KB)", b / 1e3);
    else
        fprintf(f, " (size: %.17g bytes)", b);
}

/* " [c/k]", " [*" "/k]" (every chunk), or nothing for a whole aggregate. */
static void print_chunk(FILE *f, const xp_action *ac)
{
    if (ac->nchunks <= 1)
        return;
    if (ac->run == ac->nchunks)
        fprintf(f, " [*/%d]", ac->nchunks);
    else if (ac->run > 1)
        fprintf(f, " [%d..%d/%d]", ac->chunk, ac->chunk + ac->run - 1, ac->nchunks);
    else
        fprintf(f, " [%d/%d]", ac->chunk, ac->nchunks);
}

void xp_program_print_membership(const xp_program *p, FILE *f)
{
    for (int i = 0; i < p->npart; i++) {
        const xp_partition *g = &p->part[i];
        fprintf(f, "%s%s = {", i ? ", " : "", g->name);
        for (int k = 0; k < g->size; k++)
            if (g->member[k] < 0)
                fprintf(f, "%s?", k ? ", " : "");
            else
                fprintf(f, "%s%d", k ? ", " : "", g->member[k]);
        fprintf(f, "}");
    }
}

void xp_program_print(const xp_program *p, FILE *f,
                      const char *(*atom_name)(int atom, void *ctx), void *ctx)
{
    char **nm = print_names(p, atom_name, ctx);
    if (!nm)
        return;
    fprintf(f, "GPUS: ");
    for (int g = 0, first = 1; g < p->ngpus; g++)
        if (!p->gpu_ok || p->gpu_ok[g]) {
            fprintf(f, "%s%d", first ? "" : ", ", g);
            first = 0;
        }
    fprintf(f, "\n");
    if (p->npart) {
        fprintf(f, "PARTITIONS:");
        for (int i = 0; i < p->npart; i++) {
            const xp_partition *g = &p->part[i];
            if (g->member[0] < 0) {
                fprintf(f, " %s {size %d}", g->name, g->size);
                continue;
            }
            fprintf(f, " %s {", g->name);
            for (int k = 0; k < g->size; k++)
                fprintf(f, "%s%d", k ? ", " : "", g->member[k]);
            fprintf(f, "}");
        }
        fprintf(f, "\n");
    }
    fprintf(f, "IN: ");
    for (int i = 0; i < p->nin; i++) {
        fprintf(f, "%s%s @ %d", i ? "; " : "", nm[i], p->in[i].site);
        print_size(f, p->in[i].bytes);
    }
    fprintf(f, "\nOUT: ");
    int *site = malloc(sizeof(int) * (size_t)(p->nout + p->nact + 1));
    int *part = malloc(sizeof(int) * (size_t)(p->nout + p->nact + 1));
    int *slot = malloc(sizeof(int) * (size_t)(p->nout + p->nact + 1));
    if (!site || !part || !slot)
        goto done;
    for (int o = 0; o < p->nout;) {
        int n = 0;
        /* Consecutive entries of one aggregate print as one target list. */
        while (o + n < p->nout && xp_set_equal(p, p->out[o + n].set, p->out[o].set)) {
            site[n] = p->out[o + n].site;
            part[n] = p->out[o + n].part;
            slot[n] = p->out[o + n].slot;
            n++;
        }
        fprintf(f, "%s", o ? "; " : "");
        print_set(p, f, p->out[o].set, nm);
        fprintf(f, " @ ");
        print_targets(p, f, site, part, slot, n);
        o += n;
    }
    fprintf(f, "\n");
    for (int a = 0; a < p->nact;) {
        const xp_action *ac = &p->act[a];
        print_set(p, f, ac->set, nm);
        print_chunk(f, ac);
        fprintf(f, " @ ");
        if (ac->ndst == 0) {
            int n = 0;
            while (a + n < p->nact && p->act[a + n].ndst == 0 &&
                   p->act[a + n].chunk == ac->chunk && p->act[a + n].run == ac->run &&
                   p->act[a + n].nchunks == ac->nchunks &&
                   xp_set_equal(p, p->act[a + n].set, ac->set)) {
                site[n] = p->act[a + n].src;
                part[n] = p->act[a + n].src_part;
                slot[n] = p->act[a + n].src_slot;
                n++;
            }
            print_targets(p, f, site, part, slot, n);
            a += n;
        } else {
            fprintf(f, "%d", ac->src);
            for (int r = 0; r < ac->nrelay; r++)
                fprintf(f, " -> %d", ac->relay[r]);
            fprintf(f, " -> ");
            print_targets(p, f, ac->dst, ac->dst_part, ac->dst_slot, ac->ndst);
            a++;
        }
        fprintf(f, "\n");
    }
done:
    free(site);
    free(part);
    free(slot);
    for (int i = 0; i < p->nin; i++)
        free(nm[i]);
    free(nm);
}

char *xp_action_format(const xp_program *p, int a, char *buf, int len)
{
    const xp_action *ac = &p->act[a];
    int n = 0, first = 1;
    buf[0] = 0;
#define PUT(...)                                                              \
    do {                                                                      \
        if (n < len)                                                          \
            n += snprintf(buf + n, (size_t)(len - n), __VA_ARGS__);           \
    } while (0)
    for (int i = 0; i < p->nin; i++) {
        if (!xp_set_has(ac->set, i))
            continue;
        if (p->name && p->name[i])
            PUT("%s%s", first ? "" : "+", p->name[i]);
        else
            PUT("%sA%d_%d", first ? "" : "+", p->in[i].atom, p->in[i].site);
        first = 0;
    }
    if (ac->nchunks > 1 && ac->run == ac->nchunks)
        PUT(" [*/%d]", ac->nchunks);
    else if (ac->nchunks > 1 && ac->run > 1)
        PUT(" [%d..%d/%d]", ac->chunk, ac->chunk + ac->run - 1, ac->nchunks);
    else if (ac->nchunks > 1)
        PUT(" [%d/%d]", ac->chunk, ac->nchunks);
    PUT(" @ %d", ac->src);
    for (int r = 0; r < ac->nrelay; r++)
        PUT(" -> %d", ac->relay[r]);
    for (int d = 0; d < ac->ndst; d++)
        PUT("%s%d", d ? ", " : " -> ", ac->dst[d]);
#undef PUT
    return buf;
}
