/* exchange/xp_program.c — ExProg programs: building, sets, chunks, copies
 * (validity in xp_program_check.c, printing in xp_program_print.c). */
#include "exchange/xp_program.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/ein_vec.h"

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

xp_word *xp_set_dup(const xp_program *p, const xp_word *s)
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
    xp_word *s = xp_set_dup(p, set);
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
    a.set = xp_set_dup(p, set);
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
