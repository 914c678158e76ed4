/* coordinator/compile/co_memplan.c — buffer placement by liveness (see the header
 * for the contract): roots and aliases, lives, the pinned region, a linear
 * scan with best fit, then the dependencies and acknowledgements that make
 * the reuse safe, and the Programs rebuilt with them. */
#include "coordinator/compile/co_memplan.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/ein_invariant.h"
#include "common/base/ein_vec.h"

/* Every place is a multiple of this (ein_program_add_buffer's alignment,
 * EIN_BUFFER_ALIGN in common/ir/ein_program_int.h). */
#define MP_ALIGN 256u

static uint64_t align_up(uint64_t x)
{
    return (x + MP_ALIGN - 1) / MP_ALIGN * MP_ALIGN;
}

/* A COPY on device `dev`, instruction `instr`, that reads a root here. */
typedef struct rcopy {
    int dev, instr;
} rcopy;

/* An instruction added to a Program: before (after = 0) or after original
 * instruction `at`, depending on original instruction `dep` (-1: none). */
typedef struct extra {
    ein_instr ins;
    int at, after, dep;
} extra;

/* A dependency added to original instruction `instr`: on original
 * instruction ref (>= 0) or on extra -ref - 1. */
typedef struct adddep {
    int instr, ref;
} adddep;

/* A free or held range of the dynamic region. */
typedef struct range {
    uint64_t lo, hi;
    int root;
} range;

typedef struct mdev {
    ein_program *p;
    int nb, n;
    int *root;              /* [nb] the root of each buffer (itself for a root) */
    uint64_t *oldoff;       /* [nb] offsets before planning */
    int *first, *last;      /* [nb] per root: its life, -1 if unused */
    int *rel;               /* [nb] per root: when its bytes may be taken (last + delay) */
    char *pinned;           /* [nb] per root */
    int *acc_at, *acc;      /* per root: instructions using it (CSR over roots) */
    int *wr_at, *wr;        /* per root: instructions writing it */
    int *rc_at;             /* per root: its remote copies in rc[] */
    rcopy *rc;
    int *wait_at;           /* per root: its first WAIT extra, -1 none yet */
    extra *x;
    int nx, capx;
    adddep *ad;
    int nad, capad;
} mdev;

typedef struct mp {
    mdev *d;
    int ndev;
    ein_error *err;
} mp;

static int oom(mp *m)
{
    return ein_fail(m->err, EIN_ENOMEM, "out of memory while planning memory");
}

static void mdev_free(mdev *v)
{
    free(v->root);
    free(v->oldoff);
    free(v->first);
    free(v->last);
    free(v->rel);
    free(v->pinned);
    free(v->acc_at);
    free(v->acc);
    free(v->wr_at);
    free(v->wr);
    free(v->rc_at);
    free(v->rc);
    free(v->wait_at);
    for (int k = 0; k < v->nx; k++) {
        free(v->x[k].ins.srcs);
        free(v->x[k].ins.deps);
    }
    free(v->x);
    free(v->ad);
}

/* ---- roots and aliases ------------------------------------------------ */

/* qsort contexts: per thread (compiles may run in several threads). */
static _Thread_local const ein_program *sort_prog;
static int by_offset(const void *a, const void *b)
{
    const ein_pbuffer *x = &sort_prog->buffers[*(const int *)a];
    const ein_pbuffer *y = &sort_prog->buffers[*(const int *)b];
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    if (x->bytes != y->bytes)
        return x->bytes > y->bytes ? -1 : 1; /* the larger one is the root */
    return *(const int *)a - *(const int *)b;
}

static int find_roots(mp *m, mdev *v)
{
    int nb = v->nb, *ord = malloc(sizeof(int) * ((size_t)nb + 1));
    if (!ord)
        return oom(m);
    for (int b = 0; b < nb; b++)
        ord[b] = b;
    sort_prog = v->p;
    qsort(ord, (size_t)nb, sizeof *ord, by_offset);
    int cur = -1;
    uint64_t end = 0;
    for (int k = 0; k < nb; k++) {
        const ein_pbuffer *pb = &v->p->buffers[ord[k]];
        if (cur < 0 || pb->offset >= end) {
            cur = ord[k];
            end = pb->offset + pb->bytes;
        } else if (pb->offset + pb->bytes > end) {
            int bad = ord[k];
            free(ord);
            return ein_fail(m->err, EIN_EINVAL, "memory plan: device %d: buffer %d overlaps "
                            "buffer %d without lying inside it", v->p->device, bad, cur);
        }
        v->root[ord[k]] = cur;
    }
    free(ord);
    return 0;
}

/* ---- lives, users, writers -------------------------------------------- */

/* Count (pass 0) or fill (pass 1) the users and writers of each root;
 * `seen` has room for the most buffers an instruction names. */
static void scan_users(mdev *v, int pass, int *acc_n, int *wr_n, int *seen)
{
    for (int i = 0; i < v->n; i++) {
        const ein_instr *ins = &v->p->instrs[i];
        int ns = 0;
        for (int s = -1; s < ins->nsrcs; s++) {
            int b = s < 0 ? ins->dst : ins->srcs[s];
            if (b < 0)
                continue;
            int r = v->root[b], dup = 0;
            for (int j = 0; j < ns && !dup; j++)
                dup = seen[j] == r;
            if (dup)
                continue;
            seen[ns++] = r;
            if (pass)
                v->acc[v->acc_at[r] + acc_n[r]] = i;
            acc_n[r]++;
            if (v->first[r] < 0)
                v->first[r] = i;
            v->last[r] = i;
        }
        if (ins->dst >= 0) {
            int r = v->root[ins->dst];
            if (pass)
                v->wr[v->wr_at[r] + wr_n[r]] = i;
            wr_n[r]++;
            if (ins->kind == EIN_I_LOAD)
                v->pinned[r] = 1;
        }
    }
}

static int find_users(mp *m, mdev *v)
{
    int nb = v->nb;
    int *acc_n = calloc((size_t)nb + 1, sizeof(int)), *wr_n = calloc((size_t)nb + 1, sizeof(int));
    int most = 0, *seen = NULL;
    for (int i = 0; i < v->n; i++)
        if (v->p->instrs[i].nsrcs > most)
            most = v->p->instrs[i].nsrcs;
    if (!acc_n || !wr_n || !(seen = malloc(sizeof(int) * ((size_t)most + 2))))
        goto fail;
    for (int b = 0; b < nb; b++)
        v->first[b] = v->last[b] = -1;
    scan_users(v, 0, acc_n, wr_n, seen);
    int ta = 0, tw = 0;
    for (int b = 0; b < nb; b++) {
        v->acc_at[b] = ta;
        v->wr_at[b] = tw;
        ta += acc_n[b];
        tw += wr_n[b];
        acc_n[b] = wr_n[b] = 0;
    }
    v->acc_at[nb] = ta;
    v->wr_at[nb] = tw;
    if (!(v->acc = malloc(sizeof(int) * ((size_t)ta + 1))) ||
        !(v->wr = malloc(sizeof(int) * ((size_t)tw + 1))))
        goto fail;
    for (int b = 0; b < nb; b++)
        v->first[b] = v->last[b] = -1;
    scan_users(v, 1, acc_n, wr_n, seen);
    free(acc_n);
    free(wr_n);
    free(seen);
    return 0;
fail:
    free(acc_n);
    free(wr_n);
    free(seen);
    return oom(m);
}

/* Remote copies: every COPY of every device, filed under the root it reads. */
static int find_remote(mp *m)
{
    for (int d = 0; d < m->ndev; d++) {
        mdev *v = &m->d[d];
        if (!(v->rc_at = calloc((size_t)v->nb + 2, sizeof(int))))
            return oom(m);
    }
    for (int pass = 0; pass < 2; pass++) {
        for (int e = 0; e < m->ndev; e++) {
            const ein_program *q = m->d[e].p;
            for (int i = 0; i < q->ninstrs; i++) {
                const ein_instr *c = &q->instrs[i];
                if (c->kind != EIN_I_COPY)
                    continue;
                if (c->peer < 0 || c->peer >= m->ndev || c->peer_buf < 0 ||
                    c->peer_buf >= m->d[c->peer].nb)
                    return ein_fail(m->err, EIN_EINVAL, "memory plan: device %d instruction %d "
                                    "copies buffer %d of device %d, which has no such buffer",
                                    e, i, c->peer_buf, c->peer);
                mdev *v = &m->d[c->peer];
                int r = v->root[c->peer_buf];
                if (pass == 0)
                    v->rc_at[r + 1]++;
                else
                    v->rc[v->rc_at[r]++] = (rcopy){.dev = e, .instr = i};
            }
        }
        for (int d = 0; d < m->ndev; d++) {
            mdev *v = &m->d[d];
            if (pass == 0) {
                for (int b = 0; b < v->nb; b++)
                    v->rc_at[b + 1] += v->rc_at[b];
                if (!(v->rc = malloc(sizeof *v->rc * ((size_t)v->rc_at[v->nb] + 1))))
                    return oom(m);
            } else {
                /* filling advanced each start to the next root's: shift back */
                for (int b = v->nb; b > 0; b--)
                    v->rc_at[b] = v->rc_at[b - 1];
                v->rc_at[0] = 0;
            }
        }
    }
    return 0;
}

/* A READY key: (device told about, sender, buffer). */
typedef struct rkey {
    uint64_t key;
    int root;   /* the root whose acknowledgement would use it, -1: in use already */
} rkey;

static int by_key(const void *a, const void *b)
{
    const rkey *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return x->root - y->root;
}

static uint64_t key_of(int at, int from, int buf)
{
    return (uint64_t)at << 48 | (uint64_t)from << 32 | (uint32_t)buf;
}

/* Roots whose acknowledgement's READY key (the acknowledging device, the
 * COPY's dst, told to the root's device) is used by another COPY, WAIT or
 * NOTIFY, or would be by another acknowledgement, are pinned. */
static int pin_ambiguous(mp *m, int *nkept)
{
    rkey *k = NULL;
    int n = 0, cap = 0;
    for (int e = 0; e < m->ndev; e++) {
        const ein_program *q = m->d[e].p;
        for (int i = 0; i < q->ninstrs; i++) {
            const ein_instr *c = &q->instrs[i];
            rkey r = {.root = -1};
            if (c->kind == EIN_I_COPY || c->kind == EIN_I_WAIT)
                r.key = key_of(e, c->peer, c->peer_buf);
            else if (c->kind == EIN_I_NOTIFY)
                r.key = key_of(c->peer, e, c->srcs[0]);
            else
                continue;
            if (ein_vec_reserve(&k, &cap, (int64_t)n + 2, sizeof *k) < 0)
                goto fail;
            k[n++] = r;
            if (c->kind == EIN_I_COPY) {
                mdev *v = &m->d[c->peer];
                int root = v->root[c->peer_buf];
                if (!v->pinned[root])
                    k[n++] = (rkey){.key = key_of(c->peer, e, c->dst), .root = root};
            }
        }
    }
    if (n > 1)
        qsort(k, (size_t)n, sizeof *k, by_key);
    for (int a = 0, b; a < n; a = b) {
        for (b = a + 1; b < n && k[b].key == k[a].key; b++)
            ;
        if (b - a < 2)
            continue;
        for (int j = a; j < b; j++) {
            int dev = (int)(k[j].key >> 48);
            if (k[j].root >= 0 && !m->d[dev].pinned[k[j].root]) {
                m->d[dev].pinned[k[j].root] = 1;
                nkept[dev]++;
            }
        }
    }
    free(k);
    return 0;
fail:
    free(k);
    return oom(m);
}

/* ---- placement: a linear scan with best fit ---------------------------- */

typedef struct heap {
    int *id;
    int n;
    const int *key;   /* last[] */
} heap;

static int heap_less(const heap *h, int a, int b)
{
    int x = h->id[a], y = h->id[b];
    return h->key[x] != h->key[y] ? h->key[x] < h->key[y] : x < y;
}

static void heap_push(heap *h, int r)
{
    int i = h->n++;
    h->id[i] = r;
    while (i > 0 && heap_less(h, i, (i - 1) / 2)) {
        int t = h->id[i];
        h->id[i] = h->id[(i - 1) / 2];
        h->id[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
}

static int heap_pop(heap *h)
{
    int top = h->id[0], i = 0;
    h->id[0] = h->id[--h->n];
    for (;;) {
        int l = 2 * i + 1, r = l + 1, s = i;
        if (l < h->n && heap_less(h, l, s))
            s = l;
        if (r < h->n && heap_less(h, r, s))
            s = r;
        if (s == i)
            break;
        int t = h->id[i];
        h->id[i] = h->id[s];
        h->id[s] = t;
        i = s;
    }
    return top;
}

/* Give [lo, hi) back to the sorted free list, merged with its neighbours. */
static int free_put(range **fl, int *n, int *cap, uint64_t lo, uint64_t hi)
{
    int k = 0;
    while (k < *n && (*fl)[k].lo < lo)
        k++;
    if (k > 0 && (*fl)[k - 1].hi == lo) {
        (*fl)[k - 1].hi = hi;
        if (k < *n && (*fl)[k].lo == hi) {
            (*fl)[k - 1].hi = (*fl)[k].hi;
            memmove(&(*fl)[k], &(*fl)[k + 1], sizeof **fl * (size_t)(*n - k - 1));
            --*n;
        }
        return 0;
    }
    if (k < *n && (*fl)[k].lo == hi) {
        (*fl)[k].lo = lo;
        return 0;
    }
    if (ein_vec_reserve(fl, cap, (int64_t)*n + 1, sizeof **fl) < 0)
        return -1;
    memmove(&(*fl)[k + 1], &(*fl)[k], sizeof **fl * (size_t)(*n - k));
    (*fl)[k] = (range){.lo = lo, .hi = hi, .root = -1};
    ++*n;
    return 0;
}

static int by_first(const void *a, const void *b, const mdev *v)
{
    int x = *(const int *)a, y = *(const int *)b;
    if (v->first[x] != v->first[y])
        return v->first[x] < v->first[y] ? -1 : 1;
    return x - y;
}
static _Thread_local const mdev *sort_dev;
static int by_first_q(const void *a, const void *b)
{
    return by_first(a, b, sort_dev);
}

/* The dynamic roots of v in order of first use (unused ones first). */
static int *dynamic_order(mdev *v, int *count)
{
    int *ord = malloc(sizeof(int) * ((size_t)v->nb + 1)), n = 0;
    if (!ord)
        return NULL;
    for (int b = 0; b < v->nb; b++)
        if (v->root[b] == b && !v->pinned[b])
            ord[n++] = b;
    sort_dev = v;
    qsort(ord, (size_t)n, sizeof *ord, by_first_q);
    *count = n;
    return ord;
}

/* New offsets of the roots (in newoff[]), and the segment's size. */
static int place(mp *m, mdev *v, uint64_t *newoff, co_memplan_dev *st)
{
    uint64_t top = 0;
    for (int b = 0; b < v->nb; b++)
        if (v->root[b] == b && v->pinned[b]) {
            newoff[b] = top;
            top = align_up(top + v->p->buffers[b].bytes);
            st->pinned = top;
        }
    uint64_t base = top, dtop = 0;
    int n, nfl = 0, capfl = 0, rc = 0;
    int *ord = dynamic_order(v, &n);
    range *fl = NULL;
    heap h = {.id = malloc(sizeof(int) * ((size_t)v->nb + 1)), .key = v->rel};
    if (!ord || !h.id) {
        rc = oom(m);
        goto done;
    }
    for (int k = 0; k < n; k++) {
        int r = ord[k];
        uint64_t need = align_up(v->p->buffers[r].bytes);
        while (h.n > 0 && v->rel[h.id[0]] < v->first[r]) {
            int f = heap_pop(&h);
            if (free_put(&fl, &nfl, &capfl, newoff[f] - base,
                         newoff[f] - base + align_up(v->p->buffers[f].bytes)) < 0) {
                rc = oom(m);
                goto done;
            }
        }
        int best = -1;
        for (int j = 0; j < nfl; j++)
            if (fl[j].hi - fl[j].lo >= need &&
                (best < 0 || fl[j].hi - fl[j].lo < fl[best].hi - fl[best].lo))
                best = j;
        uint64_t at;
        if (best >= 0) {
            at = fl[best].lo;
            fl[best].lo += need;
            if (fl[best].lo == fl[best].hi) {
                memmove(&fl[best], &fl[best + 1], sizeof *fl * (size_t)(nfl - best - 1));
                nfl--;
            }
        } else if (nfl > 0 && fl[nfl - 1].hi == dtop) {
            at = fl[nfl - 1].lo; /* the free range at the top, grown */
            dtop = at + need;
            nfl--;
        } else {
            at = dtop;
            dtop += need;
        }
        newoff[r] = base + at;
        heap_push(&h, r);
    }
    st->after = base + dtop;
done:
    free(ord);
    free(h.id);
    free(fl);
    return rc;
}

/* ---- dependencies ------------------------------------------------------- */

static int add_dep(mp *m, mdev *v, int instr, int ref)
{
    if (ein_vec_reserve(&v->ad, &v->capad, (int64_t)v->nad + 1, sizeof *v->ad) < 0)
        return oom(m);
    v->ad[v->nad++] = (adddep){.instr = instr, .ref = ref};
    return 0;
}

static int add_extra(mp *m, mdev *v, const ein_instr *ins, int at, int after, int dep)
{
    if (ein_vec_reserve(&v->x, &v->capx, (int64_t)v->nx + 1, sizeof *v->x) < 0)
        return oom(m);
    extra *x = &v->x[v->nx];
    *x = (extra){.ins = *ins, .at = at, .after = after, .dep = dep};
    x->ins.deps = NULL;
    x->ins.ndeps = 0;
    x->ins.srcs = NULL;
    if (ins->nsrcs) {
        if (!(x->ins.srcs = malloc(sizeof(int32_t) * (size_t)ins->nsrcs)))
            return oom(m);
        memcpy(x->ins.srcs, ins->srcs, sizeof(int32_t) * (size_t)ins->nsrcs);
    }
    return v->nx++;
}

/* The acknowledgements of root r of device d (made once): a NOTIFY back
 * after each remote COPY of it, and a WAIT for each before instruction
 * `at` here. Returns the first WAIT's extra index (they are consecutive),
 * or a negative code. */
static int acks_of(mp *m, int d, int r, int at)
{
    mdev *v = &m->d[d];
    if (v->wait_at[r] >= 0)
        return v->wait_at[r];
    int firstw = -1;
    for (int k = v->rc_at[r]; k < v->rc_at[r + 1]; k++) {
        rcopy rc = v->rc[k];
        mdev *u = &m->d[rc.dev];
        const ein_instr *c = &u->p->instrs[rc.instr];
        int32_t src = c->dst;
        ein_instr note = {.kind = EIN_I_NOTIFY, .srcs = &src, .nsrcs = 1, .dst = -1,
                          .peer = d, .peer_buf = c->dst};
        memcpy(note.op, c->op, sizeof note.op);
        int x = add_extra(m, u, &note, rc.instr, 1, rc.instr);
        if (x < 0)
            return x;
        ein_instr wait = {.kind = EIN_I_WAIT, .dst = -1, .peer = rc.dev, .peer_buf = c->dst};
        memcpy(wait.op, c->op, sizeof wait.op);
        if ((x = add_extra(m, v, &wait, at, 0, -1)) < 0)
            return x;
        if (firstw < 0)
            firstw = x;
    }
    v->wait_at[r] = firstw;
    return firstw;
}

/* Root b takes over bytes: its writers and first user depend on every user
 * (and acknowledgement) of the previous holder p. */
static int order_after(mp *m, int d, int b, int p)
{
    mdev *v = &m->d[d];
    int nw = v->rc_at[p + 1] - v->rc_at[p], w0 = -1;
    assert(v->last[p] < v->first[b]);
    if (nw > 0 && (w0 = acks_of(m, d, p, v->first[b])) < 0)
        return w0;
    for (int t = -1; t < v->wr_at[b + 1] - v->wr_at[b]; t++) {
        int who = t < 0 ? v->first[b] : v->wr[v->wr_at[b] + t];
        if (t >= 0 && who == v->first[b])
            continue;
        for (int k = v->acc_at[p]; k < v->acc_at[p + 1]; k++) {
            int rc = add_dep(m, v, who, v->acc[k]);
            if (rc < 0)
                return rc;
        }
        for (int k = 0; k < nw; k++) {
            int rc = add_dep(m, v, who, -(w0 + k) - 1);
            if (rc < 0)
                return rc;
        }
    }
    return 0;
}

/* Walk the dynamic roots in order of first use over a map of the latest
 * holder of each byte range (sorted, disjoint ranges); order each after
 * the holders it displaces. */
static int order_reuse(mp *m, int d, const uint64_t *newoff)
{
    mdev *v = &m->d[d];
    int n, nmap = 0, cap = 0, rc = 0, *prev = NULL, nprev;
    int *ord = dynamic_order(v, &n);
    range *map = NULL;
    if (!ord || !(prev = malloc(sizeof(int) * ((size_t)v->nb + 1)))) {
        rc = oom(m);
        goto done;
    }
    for (int k = 0; k < n && rc == 0; k++) {
        int b = ord[k];
        if (v->first[b] < 0)
            continue; /* never used: holds nothing anyone waits for */
        uint64_t lo = newoff[b], hi = lo + align_up(v->p->buffers[b].bytes);
        /* the ranges [j0, j1) of the map that meet [lo, hi) */
        int j0 = 0, j1, top = nmap;
        while (j0 < top) {
            int mid = (j0 + top) / 2;
            if (map[mid].hi <= lo)
                j0 = mid + 1;
            else
                top = mid;
        }
        for (j1 = j0; j1 < nmap && map[j1].lo < hi; j1++)
            ;
        nprev = 0;
        for (int j = j0; j < j1; j++) {
            int dup = 0;
            for (int q = 0; q < nprev && !dup; q++)
                dup = prev[q] == map[j].root;
            if (!dup)
                prev[nprev++] = map[j].root;
        }
        /* replace them by: the part before lo, b, the part after hi */
        range rep[3];
        int nrep = 0;
        if (j0 < j1 && map[j0].lo < lo)
            rep[nrep++] = (range){.lo = map[j0].lo, .hi = lo, .root = map[j0].root};
        rep[nrep++] = (range){.lo = lo, .hi = hi, .root = b};
        if (j0 < j1 && map[j1 - 1].hi > hi)
            rep[nrep++] = (range){.lo = hi, .hi = map[j1 - 1].hi, .root = map[j1 - 1].root};
        int nn = nmap - (j1 - j0) + nrep;
        if (ein_vec_reserve(&map, &cap, (int64_t)nn + 1, sizeof *map) < 0) {
            rc = oom(m);
            break;
        }
        memmove(&map[j0 + nrep], &map[j1], sizeof *map * (size_t)(nmap - j1));
        memcpy(&map[j0], rep, sizeof *rep * (size_t)nrep);
        nmap = nn;
        for (int q = 0; q < nprev && rc == 0; q++)
            rc = order_after(m, d, b, prev[q]);
    }
done:
    free(ord);
    free(prev);
    free(map);
    return rc;
}

/* ---- rebuilding ---------------------------------------------------------- */

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static _Thread_local const extra *sort_x;
static int by_place(const void *a, const void *b)
{
    const extra *x = &sort_x[*(const int *)a], *y = &sort_x[*(const int *)b];
    if (x->at != y->at)
        return x->at - y->at;
    if (x->after != y->after)
        return x->after - y->after;
    return *(const int *)a - *(const int *)b;
}

static int by_instr(const void *a, const void *b)
{
    const adddep *x = a, *y = b;
    return x->instr != y->instr ? x->instr - y->instr : x->ref - y->ref;
}

/* The Program of v with its extras inserted and its added dependencies. */
static int rebuild(mp *m, mdev *v)
{
    ein_program *p = v->p;
    int n = p->ninstrs, nn = n + v->nx, rc = 0;
    int *newid = malloc(sizeof(int) * ((size_t)n + 1));
    int *xid = malloc(sizeof(int) * ((size_t)v->nx + 1));
    int *xo = malloc(sizeof(int) * ((size_t)v->nx + 1));
    ein_instr *out = malloc(sizeof *out * ((size_t)nn + 1));
    if (!newid || !xid || !xo || !out) {
        rc = oom(m);
        goto done;
    }
    for (int k = 0; k < v->nx; k++)
        xo[k] = k;
    sort_x = v->x;
    qsort(xo, (size_t)v->nx, sizeof *xo, by_place);
    int pos = 0, k = 0;
    for (int i = 0; i < n; i++) {
        for (; k < v->nx && v->x[xo[k]].at == i && !v->x[xo[k]].after; k++)
            xid[xo[k]] = pos++;
        newid[i] = pos++;
        for (; k < v->nx && v->x[xo[k]].at == i; k++)
            xid[xo[k]] = pos++;
    }
    assert(k == v->nx && pos == nn);
    if (v->nad > 1)
        qsort(v->ad, (size_t)v->nad, sizeof *v->ad, by_instr);
    for (int i = 0, a = 0; i < n; i++) {
        ein_instr *ins = &p->instrs[i];
        int na = 0;
        while (a + na < v->nad && v->ad[a + na].instr == i)
            na++;
        int32_t *deps = malloc(sizeof(int32_t) * ((size_t)ins->ndeps + (size_t)na + 1));
        if (!deps) {
            rc = oom(m);
            goto done;
        }
        int nd = 0;
        for (int t = 0; t < ins->ndeps; t++)
            deps[nd++] = newid[ins->deps[t]];
        for (int t = 0; t < na; t++) {
            int ref = v->ad[a + t].ref;
            deps[nd++] = ref >= 0 ? newid[ref] : xid[-ref - 1];
        }
        a += na;
        qsort(deps, (size_t)nd, sizeof *deps, cmp_int);
        int u = 0;
        for (int t = 0; t < nd; t++)
            if (u == 0 || deps[u - 1] != deps[t])
                deps[u++] = deps[t];
        free(ins->deps); /* the Program keeps the renumbered ones even on failure */
        ins->deps = deps;
        ins->ndeps = u;
    }
    for (int i = 0; i < n; i++)
        out[newid[i]] = p->instrs[i];
    for (int x = 0; x < v->nx; x++) {
        extra *e = &v->x[x];
        if (e->dep >= 0 && !e->ins.deps) {
            if (!(e->ins.deps = malloc(sizeof(int32_t)))) {
                rc = oom(m);
                goto done;
            }
            e->ins.deps[0] = newid[e->dep];
            e->ins.ndeps = 1;
        }
    }
    for (int x = 0; x < v->nx; x++) {
        out[xid[x]] = v->x[x].ins;
        v->x[x].ins.srcs = NULL; /* now the Program's */
        v->x[x].ins.deps = NULL;
    }
    free(p->instrs);
    p->instrs = out;
    p->ninstrs = nn;
    p->cap_instrs = nn + 1;
    out = NULL;
done:
    free(out);
    free(newid);
    free(xid);
    free(xo);
    return rc;
}

/* ---- the pass ------------------------------------------------------------ */

static void live_peak(const mdev *v, co_memplan_dev *st)
{
    int64_t *delta = calloc((size_t)v->n + 2, sizeof *delta);
    uint64_t always = 0;
    st->live_peak = 0;
    st->live_peak_at = -1;
    if (!delta)
        return;
    for (int b = 0; b < v->nb; b++) {
        if (v->root[b] != b)
            continue;
        int64_t sz = (int64_t)v->p->buffers[b].bytes;
        if (v->pinned[b])
            always += (uint64_t)sz;
        else if (v->first[b] >= 0) {
            delta[v->first[b]] += sz;
            delta[v->last[b] + 1] -= sz;
        }
    }
    int64_t cur = 0;
    for (int i = 0; i < v->n; i++) {
        cur += delta[i];
        if (st->live_peak_at < 0 || always + (uint64_t)cur > st->live_peak) {
            st->live_peak = always + (uint64_t)cur;
            st->live_peak_at = i;
        }
    }
    if (v->n == 0)
        st->live_peak = always;
    free(delta);
}

/* ---- the checker (common/base/ein_invariant.h) ------------------------------ */

int co_memplan_ok(const ein_program *p, const int *root, const int *first, const int *last)
{
    int nb = p->nbuffers, nr = 0;
    for (int b = 0; b < nb; b++) {
        const ein_pbuffer *x = &p->buffers[b];
        int r = root[b];
        uint64_t end;
        if (__builtin_add_overflow(x->offset, x->bytes, &end) || end > p->segment_bytes)
            return 0; /* outside the segment */
        if (r < 0 || r >= nb || root[r] != r)
            return 0;
        if (r == b && x->offset % MP_ALIGN != 0)
            return 0; /* a root off the alignment */
        if (r != b && (x->offset < p->buffers[r].offset ||
                       end > p->buffers[r].offset + p->buffers[r].bytes))
            return 0; /* an alias outside its root */
        nr += r == b && first[b] >= 0;
    }
    int *ord = malloc(sizeof(int) * ((size_t)nr + 1)), k = 0;
    if (!ord)
        return 1; /* a checker does not fail for want of memory */
    for (int b = 0; b < nb; b++)
        if (root[b] == b && first[b] >= 0)
            ord[k++] = b;
    sort_prog = p;
    qsort(ord, (size_t)nr, sizeof *ord, by_offset);
    /* Two live roots sharing a byte: in offset order, each root against
     * those that start inside it. */
    int ok = 1;
    for (int i = 0; i < nr && ok; i++) {
        const ein_pbuffer *a = &p->buffers[ord[i]];
        for (int j = i + 1; j < nr && p->buffers[ord[j]].offset < a->offset + a->bytes; j++)
            if (first[ord[j]] <= last[ord[i]] && first[ord[i]] <= last[ord[j]]) {
                ok = 0;
                break;
            }
    }
    free(ord);
    return ok;
}

int co_memplan(ein_program **progs, int ndev, const co_memplan_opts *o, co_memplan_dev *st_out,
               ein_error *err)
{
    mp m = {.ndev = ndev, .err = err};
    co_memplan_dev *st = calloc((size_t)ndev + 1, sizeof *st);
    int *nkept = calloc((size_t)ndev + 1, sizeof(int)), rc = 0;
    uint64_t **newoff = calloc((size_t)ndev + 1, sizeof *newoff);
    if (!(m.d = calloc((size_t)ndev + 1, sizeof *m.d)) || !st || !nkept || !newoff) {
        rc = oom(&m);
        goto done;
    }
    for (int d = 0; d < ndev && rc == 0; d++) {
        mdev *v = &m.d[d];
        v->p = progs[d];
        v->nb = v->p->nbuffers;
        v->n = v->p->ninstrs;
        size_t nb = (size_t)v->nb + 1;
        if (!(v->root = malloc(sizeof(int) * nb)) || !(v->oldoff = malloc(sizeof(uint64_t) * nb)) ||
            !(v->first = malloc(sizeof(int) * nb)) || !(v->last = malloc(sizeof(int) * nb)) ||
            !(v->pinned = calloc(nb, 1)) || !(v->acc_at = malloc(sizeof(int) * (nb + 1))) ||
            !(v->wr_at = malloc(sizeof(int) * (nb + 1))) ||
            !(v->wait_at = malloc(sizeof(int) * nb)) || !(newoff[d] = calloc(nb, sizeof(uint64_t)))) {
            rc = oom(&m);
            break;
        }
        for (int b = 0; b < v->nb; b++) {
            v->oldoff[b] = v->p->buffers[b].offset;
            v->wait_at[b] = -1;
        }
        if ((rc = find_roots(&m, v)) == 0)
            rc = find_users(&m, v);
        if (rc == 0 && !(v->rel = malloc(sizeof(int) * nb)))
            rc = oom(&m);
    }
    if (rc == 0)
        rc = find_remote(&m);
    if (rc == 0)
        rc = pin_ambiguous(&m, nkept);
    co_memplan_opts def = {.delay_local = CO_MEMPLAN_DELAY_LOCAL,
                           .delay_remote = CO_MEMPLAN_DELAY_REMOTE};
    if (!o)
        o = &def;
    int delay_local = o->delay_local > 0 ? o->delay_local : 0;
    int delay_remote = o->delay_remote > 0 ? o->delay_remote : 0;
    for (int d = 0; d < ndev && rc == 0; d++) {
        mdev *v = &m.d[d];
        for (int b = 0; b < v->nb; b++)
            v->rel[b] = v->last[b] < 0 ? v->last[b]
                        : v->last[b] + (v->rc_at[b + 1] > v->rc_at[b] ? delay_remote : delay_local);
        st[d].before = v->p->unplanned_bytes ? v->p->unplanned_bytes : v->p->segment_bytes;
        st[d].nkept = nkept[d];
        live_peak(v, &st[d]);
        if ((rc = place(&m, v, newoff[d], &st[d])) == 0)
            rc = order_reuse(&m, d, newoff[d]);
    }
    for (int d = 0; d < ndev && rc == 0; d++) {
        mdev *v = &m.d[d];
        for (int b = 0; b < v->nb; b++) {
            int r = v->root[b];
            v->p->buffers[b].offset = newoff[d][r] + (v->oldoff[b] - v->oldoff[r]);
        }
        v->p->unplanned_bytes = st[d].before;
        v->p->segment_bytes = st[d].after;
        EIN_INVARIANT(co_memplan_ok(v->p, v->root, v->first, v->last));
    }
    /* Copies read their peers' buffers at the new places. */
    for (int e = 0; e < ndev && rc == 0; e++)
        for (int i = 0; i < m.d[e].p->ninstrs; i++) {
            ein_instr *c = &m.d[e].p->instrs[i];
            if (c->kind == EIN_I_COPY)
                c->peer_offset = m.d[c->peer].p->buffers[c->peer_buf].offset;
        }
    for (int d = 0; d < ndev && rc == 0; d++) {
        for (int k = 0; k < m.d[d].nx; k++)
            st[d].nwaits += m.d[d].x[k].ins.kind == EIN_I_WAIT;
        rc = rebuild(&m, &m.d[d]);
    }
    if (rc == 0 && st_out)
        memcpy(st_out, st, sizeof *st * (size_t)ndev);
done:
    for (int d = 0; m.d && d < ndev; d++) {
        mdev_free(&m.d[d]);
        if (newoff)
            free(newoff[d]);
    }
    free(m.d);
    free(newoff);
    free(st);
    free(nkept);
    return rc;
}
