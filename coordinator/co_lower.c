/* coordinator/co_lower.c — from a logical plan to per-device Programs. */
#include "coordinator/co_lower.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ein_progress.h"
#include "common/ein_rand.h"
#include "common/ein_vec.h"
#include "common/ein_wire.h"
#include "exchange/xp_atoms.h"
#include "exchange/xp_naive.h"
#include "exchange/xp_search.h"
#include "exchange/xp_sim.h"

typedef struct load_key {
    int node, dev, buf;
    ein_box box;
} load_key;

typedef struct lw {
    const pl_graph *g;
    const pl_plan *plan;
    const co_lower_opts *o;
    ein_program **progs;
    int ndev;
    int **producer;     /* [dev][buf] -> instruction writing it */
    int *cap_producer;
    int *partial;       /* [node * ndev + dev] -> kernel output buffer, -1 */
    ein_dtype *xdt;     /* [node] -> dtype of its partial blocks and exchange */
    load_key *loads;
    int nloads, cap_loads;
    co_lower_stats *st;
    ein_error *err;
    struct xcache *cache;   /* searched exchanges, by preamble (see xcache_find) */
    int cap_cache, ncache;
    struct wset *ws;        /* writer sets (see producer_of) */
    int nws, cap_ws;
    struct vkey *views;     /* this exchange's views (see view_of) */
    int nviews, cap_views;
} lw;

/* A buffer written by several instructions (the chunks of an exchange
 * buffer, each written on its own): producer[dev][buf] is then -2 - i for
 * the writer set ws[i], and a reader depends on all of them. */
typedef struct wset {
    int *id;
    int n, cap;
} wset;

/* A view: rows [r0, r1) of buffer `parent` on `dev` (see view_of). */
typedef struct vkey {
    int dev, parent, view;
    int64_t r0, r1;
} vkey;

/* The dtype node v's kernel outputs and exchange buffers are in: the
 * accumulation dtype when its spec aggregates partials (cast to the node's
 * dtype once aggregated, see lower_exchange), else the node's own. */
static ein_dtype partial_dtype(const pl_graph *g, const pl_plan *plan, int v)
{
    const pl_node *nd = pl_graph_node(g, v);
    if (nd->kind == PL_INPUT || !plan->nodes[v].planned || plan->nodes[v].spec.agg == EIN_AGG_NONE)
        return nd->dtype;
    return ein_dtype_accum(nd->dtype);
}

/* Room for entry n of the array *a (of *cap entries of `size` bytes). */
static int grow(lw *L, void *a, int *cap, int n, size_t size)
{
    if (ein_vec_reserve(a, cap, (int64_t)n + 1, size) < 0)
        return ein_fail(L->err, EIN_ENOMEM, "out of memory while lowering");
    return 0;
}

/* Room in producer[dev] for buffer `id` (no writer yet). */
static int track_buf(lw *L, int dev, int id)
{
    int rc = grow(L, &L->producer[dev], &L->cap_producer[dev], id, sizeof(int));
    if (rc < 0)
        return rc;
    L->producer[dev][id] = -1;
    return id;
}

static int new_buf(lw *L, int dev, ein_dtype dt, const ein_box *box)
{
    int id = ein_program_add_buffer(L->progs[dev], dt, box, L->err);
    if (id < 0)
        return id;
    return track_buf(L, dev, id);
}

/* Instruction `id` writes (part of) buffer `buf` of `dev` too: readers of
 * the whole buffer depend on it as well as on its other writers. */
static int add_writer(lw *L, int dev, int buf, int id)
{
    int *p = &L->producer[dev][buf];
    if (*p == -1 || *p == id) {
        *p = id;
        return 0;
    }
    if (*p >= 0) {
        if (grow(L, &L->ws, &L->cap_ws, L->nws, sizeof *L->ws) < 0)
            return L->err->code;
        L->ws[L->nws] = (wset){0};
        int first = *p;
        *p = -2 - L->nws++;
        if (add_writer(L, dev, buf, first) < 0)
            return L->err->code;
    }
    wset *w = &L->ws[-*p - 2];
    if (grow(L, &w->id, &w->cap, w->n, sizeof *w->id) < 0)
        return L->err->code;
    w->id[w->n++] = id;
    return 0;
}

/* The writers of buffer `buf`: *n of them at *ids (a single one in *one). */
static const int *writers(const lw *L, int dev, int buf, int *one, int *n)
{
    int p = L->producer[dev][buf];
    if (p <= -2) {
        *n = L->ws[-p - 2].n;
        return L->ws[-p - 2].id;
    }
    *one = p;
    *n = p >= 0;
    return one;
}

/* Append an instruction whose dependencies are the writers of its sources. */
static int emit(lw *L, int dev, ein_instr *ins)
{
    int32_t deps[256];
    int32_t *dv = deps;
    int total = 0, one, n;
    for (int i = 0; i < ins->nsrcs; i++) {
        writers(L, dev, ins->srcs[i], &one, &n);
        total += n;
    }
    if (total > 256 && !(dv = malloc(sizeof(int32_t) * (size_t)total)))
        return ein_fail(L->err, EIN_ENOMEM, "out of memory while lowering");
    int nd = 0;
    for (int i = 0; i < ins->nsrcs; i++) {
        const int *w = writers(L, dev, ins->srcs[i], &one, &n);
        for (int k = 0; k < n; k++) {
            int dup = 0;
            for (int j = 0; j < nd && !dup; j++)
                dup = dv[j] == w[k];
            if (!dup)
                dv[nd++] = w[k];
        }
    }
    ins->deps = dv;
    ins->ndeps = nd;
    int id = ein_program_add_instr(L->progs[dev], ins, L->err);
    if (dv != deps)
        free(dv);
    if (id < 0)
        return id;
    if (ins->dst >= 0)
        L->producer[dev][ins->dst] = id;
    L->st->ninstrs++;
    return id;
}

static void set_op(ein_instr *ins, const char *a, const char *b)
{
    if (b)
        snprintf(ins->op, sizeof ins->op, "%.30s<-%.30s", a, b);
    else
        snprintf(ins->op, sizeof ins->op, "%s", a);
}

static int load_block(lw *L, int node, const ein_box *box, int dev)
{
    for (int i = 0; i < L->nloads; i++)
        if (L->loads[i].node == node && L->loads[i].dev == dev &&
            ein_box_equal(&L->loads[i].box, box))
            return L->loads[i].buf;
    const pl_node *nd = pl_graph_node(L->g, node);
    int buf = new_buf(L, dev, nd->dtype, box);
    if (buf < 0)
        return buf;
    ein_instr ins = {.kind = EIN_I_LOAD, .dst = buf};
    set_op(&ins, nd->name, NULL);
    ins.path = (char *)(L->o->input_path ? L->o->input_path[node] : NULL);
    if (L->o->input_src && L->o->input_src[node].path) {
        ins.path = (char *)L->o->input_src[node].path;
        ins.format = L->o->input_src[node].format;
        ins.offset = L->o->input_src[node].offset;
    }
    ins.seed = L->o->seed;
    ins.key = ein_rand_key(nd->name);
    ins.rank = nd->rank;
    memcpy(ins.shape, nd->shape, sizeof ins.shape);
    int rc = emit(L, dev, &ins);
    if (rc < 0)
        return rc;
    if ((rc = grow(L, &L->loads, &L->cap_loads, L->nloads, sizeof *L->loads)) < 0)
        return rc;
    L->loads[L->nloads++] = (load_key){.node = node, .dev = dev, .buf = buf, .box = *box};
    return buf;
}

/* Rows of a buffer's box: its first interval (1 for a scalar). A chunk of
 * an atom is a range of these rows (docs/exprog.md), a contiguous range of
 * the atom's bytes since buffers are dense row-major. */
static int64_t box_rows(const ein_box *b)
{
    return b->rank > 0 ? b->hi[0] - b->lo[0] : 1;
}

/* Rows r0 .. r1-1 of chunk `c` of `k` of n rows (floor; possibly empty
 * when k does not divide n, at most one row apart otherwise). */
static void chunk_rows(int64_t n, int c, int k, int64_t *r0, int64_t *r1)
{
    *r0 = n * c / k;
    *r1 = n * (c + 1) / k;
}

/* A buffer over rows [r0, r1) of buffer `parent` of `dev`: the same bytes
 * (its offset is the parent's plus r0 rows), no copy. `parent` itself for
 * all its rows. Views of this exchange are remembered, so a chunk read
 * twice is one buffer; *fresh says a new one was made. */
static int view_of(lw *L, int dev, int parent, int64_t r0, int64_t r1, int *fresh)
{
    ein_program *p = L->progs[dev];
    ein_pbuffer pb = p->buffers[parent];
    int64_t n = box_rows(&pb.box);
    *fresh = 0;
    if (r0 == 0 && r1 == n)
        return parent;
    for (int i = 0; i < L->nviews; i++)
        if (L->views[i].dev == dev && L->views[i].parent == parent && L->views[i].r0 == r0 &&
            L->views[i].r1 == r1)
            return L->views[i].view;
    if (grow(L, &L->views, &L->cap_views, L->nviews, sizeof *L->views) < 0)
        return L->err->code;
    ein_box box = pb.box;
    box.lo[0] = pb.box.lo[0] + r0;
    box.hi[0] = pb.box.lo[0] + r1;
    /* Appended like any buffer (ids, checks), then pointed into the parent:
     * the segment does not grow. */
    uint64_t seg = p->segment_bytes;
    int id = ein_program_add_buffer(p, pb.dtype, &box, L->err);
    if (id < 0)
        return id;
    p->buffers[id].offset = pb.offset + pb.bytes / (uint64_t)n * (uint64_t)r0;
    p->segment_bytes = seg;
    if ((id = track_buf(L, dev, id)) < 0)
        return id;
    L->views[L->nviews++] = (vkey){.dev = dev, .parent = parent, .view = id, .r0 = r0, .r1 = r1};
    *fresh = 1;
    return id;
}

/* What the lowering holds: aggregate `set` at `site`, in `buf` (buf -1: an
 * IN copy not yet sliced out of its producer block), over the atom's rows
 * listed in `pc` (sorted, disjoint; each with the instruction that wrote
 * it, -1 for an IN copy's). One entry per aggregate and site: rows that
 * arrive again are not copied again. */
typedef struct piece {
    int64_t lo, hi;
    int writer;
} piece;

typedef struct held {
    xp_word *set;
    int site, buf, in;
    piece *pc;
    int npc, cap_pc;
} held;

typedef struct xstate {
    xp_program *p;
    ein_box *atoms;
    held *h;
    int nh, cap;
} xstate;

/* A new entry (no rows yet); returns its index. */
static int held_add(lw *L, xstate *X, const xp_word *set, int site, int buf, int in)
{
    if (grow(L, &X->h, &X->cap, X->nh, sizeof *X->h) < 0)
        return L->err->code;
    xp_word *s = xp_set_new(X->p);
    if (!s)
        return ein_fail(L->err, EIN_ENOMEM, "out of memory while lowering");
    memcpy(s, set, sizeof(xp_word) * (size_t)X->p->nwords);
    X->h[X->nh] = (held){.set = s, .site = site, .buf = buf, .in = in};
    return X->nh++;
}

static int piece_add(lw *L, held *h, int64_t lo, int64_t hi, int writer)
{
    if (grow(L, &h->pc, &h->cap_pc, h->npc, sizeof *h->pc) < 0)
        return L->err->code;
    int k = h->npc;
    while (k > 0 && h->pc[k - 1].lo > lo) {
        h->pc[k] = h->pc[k - 1];
        k--;
    }
    h->pc[k] = (piece){.lo = lo, .hi = hi, .writer = writer};
    h->npc++;
    return 0;
}

/* The entry of aggregate `set` at `site`, or -1. */
static int held_find(const xstate *X, const xp_word *set, int site)
{
    for (int k = 0; k < X->nh; k++)
        if (X->h[k].site == site && xp_set_equal(X->p, X->h[k].set, set))
            return k;
    return -1;
}

/* Does entry h hold every row of [lo, hi)? */
static int held_covers(const held *h, int64_t lo, int64_t hi)
{
    int64_t got = 0;
    for (int i = 0; i < h->npc; i++) {
        int64_t a = h->pc[i].lo > lo ? h->pc[i].lo : lo, b = h->pc[i].hi < hi ? h->pc[i].hi : hi;
        if (b > a)
            got += b - a;
    }
    return got == hi - lo;
}

/* The rows of [lo, hi) that entry k (-1: none) does not hold, as *ngap
 * intervals in gap[] (room for npc + 1). */
static int held_gaps(const xstate *X, int k, int64_t lo, int64_t hi, int64_t **gap, int *ngap,
                     lw *L)
{
    int npc = k >= 0 ? X->h[k].npc : 0, n = 0;
    int64_t *g = malloc(sizeof *g * 2 * (size_t)(npc + 1)), cur = lo;
    if (!g)
        return ein_fail(L->err, EIN_ENOMEM, "out of memory while lowering");
    for (int i = 0; i < npc && cur < hi; i++) {
        const piece *pc = &X->h[k].pc[i];
        if (pc->hi <= cur)
            continue;
        if (pc->lo > cur) {
            g[2 * n] = cur;
            g[2 * n++ + 1] = pc->lo < hi ? pc->lo : hi;
        }
        cur = pc->hi;
    }
    if (cur < hi) {
        g[2 * n] = cur;
        g[2 * n++ + 1] = hi;
    }
    *gap = g;
    *ngap = n;
    return 0;
}

static int atom_of(const xstate *X, const xp_word *set)
{
    for (int i = 0; i < X->p->nin; i++)
        if (xp_set_has(set, i))
            return X->p->in[i].atom;
    return -1;
}

/* Make sure held entry k has a buffer: slice its atom out of the block. */
static int materialise(lw *L, xstate *X, int k, int u, const char *opname)
{
    held *h = &X->h[k];
    if (h->buf >= 0)
        return h->buf;
    const pl_node *nd = pl_graph_node(L->g, u);
    int block = L->partial[u * L->ndev + h->site];
    const ein_box *atom = &X->atoms[X->p->in[h->in].atom];
    const ein_box *bbox = &L->progs[h->site]->buffers[block].box;
    if (ein_box_equal(atom, bbox)) {
        h->buf = block;
        h->pc[0].writer = L->producer[h->site][block];
        return block;
    }
    int buf = new_buf(L, h->site, L->xdt[u], atom);
    if (buf < 0)
        return buf;
    int32_t src = block;
    ein_instr ins = {.kind = EIN_I_SLICE, .srcs = &src, .nsrcs = 1, .dst = buf};
    set_op(&ins, opname, nd->name);
    int rc = emit(L, h->site, &ins);
    if (rc < 0)
        return rc;
    X->h[k].buf = buf;
    X->h[k].pc[0].writer = rc;
    return buf;
}

/* A buffer holding rows [lo, hi) of entry k (which holds them): the
 * entry's buffer, or a view of it that depends on the instructions that
 * wrote those rows. */
static int read_rows(lw *L, xstate *X, int k, int64_t lo, int64_t hi, int u, const char *opname)
{
    int buf = materialise(L, X, k, u, opname), fresh;
    if (buf < 0)
        return buf;
    int site = X->h[k].site, v = view_of(L, site, buf, lo, hi, &fresh);
    for (int i = 0; fresh && i < X->h[k].npc; i++) {
        const piece *pc = &X->h[k].pc[i];
        int rc = pc->lo < hi && pc->hi > lo && pc->writer >= 0
                     ? add_writer(L, site, v, pc->writer) : 0;
        if (rc < 0)
            return rc;
    }
    return v;
}

/* Instruction `id` wrote rows [lo, hi) of entry k through buffer `v` (a
 * view of the entry's buffer, or that buffer itself). */
static int wrote_rows(lw *L, xstate *X, int k, int v, int64_t lo, int64_t hi, int id)
{
    held *h = &X->h[k];
    int rc = piece_add(L, h, lo, hi, id);
    if (rc == 0 && v != h->buf)
        rc = add_writer(L, h->site, h->buf, id);
    return rc;
}

/* The entry of aggregate `set` at `site`, made (with a new buffer over the
 * atom `box`) if there is none; returns its index. */
static int held_get(lw *L, xstate *X, const xp_word *set, int site, const ein_box *box, int u)
{
    int k = held_find(X, set, site);
    if (k >= 0)
        return k;
    int nb = new_buf(L, site, L->xdt[u], box);
    return nb < 0 ? nb : held_add(L, X, set, site, nb, -1);
}

/* One hop of rows [lo, hi) of aggregate `set`: from entry fk (at `from`)
 * to `to`, which copies them once `from` has said they are ready (NOTIFY
 * on the sender, COPY on the receiver); rows `to` holds already are not
 * sent again. Returns the entry at `to`. */
static int send_rows(lw *L, xstate *X, const xp_word *set, int from, int fk, int to,
                     int64_t lo, int64_t hi, const ein_box *box, int u, const char *opname)
{
    const pl_node *nd = pl_graph_node(L->g, u);
    int tk = held_find(X, set, to), ngap, rc = 0;
    int64_t *gap;
    if ((rc = held_gaps(X, tk, lo, hi, &gap, &ngap, L)) < 0)
        return rc;
    for (int i = 0; i < ngap && rc >= 0; i++) {
        int64_t a = gap[2 * i], b = gap[2 * i + 1];
        int s = read_rows(L, X, fk, a, b, u, opname), fresh;
        if (s < 0) {
            rc = s;
            break;
        }
        int32_t s32 = s;
        ein_instr note = {.kind = EIN_I_NOTIFY, .srcs = &s32, .nsrcs = 1, .dst = -1,
                          .peer = to, .peer_buf = s};
        set_op(&note, opname, nd->name);
        if ((rc = emit(L, from, &note)) < 0 ||
            (tk < 0 && (rc = tk = held_get(L, X, set, to, box, u)) < 0))
            break;
        int d = view_of(L, to, X->h[tk].buf, a, b, &fresh);
        if ((rc = d) < 0)
            break;
        ein_instr cp = {.kind = EIN_I_COPY, .dst = d, .peer = from, .peer_buf = s,
                        .peer_offset = L->progs[from]->buffers[s].offset};
        set_op(&cp, opname, nd->name);
        if ((rc = emit(L, to, &cp)) < 0 || (rc = wrote_rows(L, X, tk, d, a, b, rc)) < 0)
            break;
        L->st->ncopies++;
        L->st->copy_bytes += (double)L->progs[to]->buffers[d].bytes;
    }
    free(gap);
    return rc < 0 ? rc : tk;
}

/* Fire action `a` over rows [lo, hi) of its atom (all of them, or one
 * chunk): form the aggregate at the source from the held entries `pick`
 * (which partition it and hold those rows), then send it hop by hop
 * through the relays (each keeps a copy: the aggregate is then held there
 * too) and from the last hop to every destination (a multicast). */
static int fire(lw *L, xstate *X, const xp_action *a, int64_t lo, int64_t hi, const int *pick,
                int npick, int u, const char *opname)
{
    const pl_node *nd = pl_graph_node(L->g, u);
    int32_t srcs[256];
    if (npick > 256)
        return ein_fail(L->err, EIN_EUNSUPPORTED, "%s: aggregation of more than 256 copies", opname);
    const ein_box *box = &X->atoms[atom_of(X, a->set)];
    int xk = npick == 1 ? pick[0] : held_find(X, a->set, a->src), ngap = 0, rc = 0;
    int64_t *gap = NULL;
    if (npick > 1 && (rc = held_gaps(X, xk, lo, hi, &gap, &ngap, L)) < 0)
        return rc;
    for (int g = 0; g < ngap && rc >= 0; g++) {
        int64_t r0 = gap[2 * g], r1 = gap[2 * g + 1];
        int fresh;
        for (int i = 0; i < npick && rc >= 0; i++)
            rc = srcs[i] = read_rows(L, X, pick[i], r0, r1, u, opname);
        if (rc < 0 || (xk < 0 && (rc = xk = held_get(L, X, a->set, a->src, box, u)) < 0))
            break;
        int d = view_of(L, a->src, X->h[xk].buf, r0, r1, &fresh);
        if ((rc = d) < 0)
            break;
        ein_instr ins = {.kind = EIN_I_AGG, .srcs = srcs, .nsrcs = npick, .dst = d,
                         .agg = L->plan->nodes[u].spec.agg ? L->plan->nodes[u].spec.agg : EIN_AGG_SUM};
        set_op(&ins, opname, nd->name);
        if ((rc = emit(L, a->src, &ins)) >= 0)
            rc = wrote_rows(L, X, xk, d, r0, r1, rc);
    }
    free(gap);
    if (rc < 0)
        return rc;
    int at = a->src, k = xk;
    for (int r = 0; r < a->nrelay && k >= 0; r++) {
        k = send_rows(L, X, a->set, at, k, a->relay[r], lo, hi, box, u, opname);
        at = a->relay[r];
    }
    for (int d = 0; d < a->ndst && k >= 0; d++)
        rc = send_rows(L, X, a->set, at, k, a->dst[d], lo, hi, box, u, opname);
    return k < 0 ? k : rc < 0 ? rc : 0;
}

/* The final cast of an aggregated block to its node's dtype (a scale by 1,
 * which every backend computes in f32 and rounds once): *buf is replaced
 * by the new buffer. */
static int cast_block(lw *L, int site, int *buf, const pl_node *nd, const char *opname)
{
    int nb = new_buf(L, site, nd->dtype, &L->progs[site]->buffers[*buf].box);
    if (nb < 0)
        return nb;
    int32_t src = *buf;
    ein_instr ins = {.kind = EIN_I_KERNEL, .srcs = &src, .nsrcs = 1, .dst = nb,
                     .kernel = {.kind = EIN_KERNEL_UNARY, .unary = EIN_UN_SCALE, .scalar = 1.0}};
    set_op(&ins, opname, nd->name);
    int rc = emit(L, site, &ins);
    if (rc < 0)
        return rc;
    *buf = nb;
    return 0;
}

/* The data rows of a merged LSE block (its last column, the log-sum-exp,
 * dropped): *buf is replaced by a buffer over `box`. */
static int lse_rows(lw *L, int site, int *buf, const ein_box *box, const pl_node *nd,
                    const char *opname)
{
    int nb = new_buf(L, site, EIN_F32, box);
    if (nb < 0)
        return nb;
    int32_t src = *buf;
    ein_instr ins = {.kind = EIN_I_SLICE, .srcs = &src, .nsrcs = 1, .dst = nb};
    set_op(&ins, opname, nd->name);
    int rc = emit(L, site, &ins);
    if (rc < 0)
        return rc;
    *buf = nb;
    return 0;
}

/* An action whose set no OUT contains (A+B, A and B copies of different
 * atoms: a valid program may hold such a useless aggregate) feeds no OUT,
 * and neither does anything built from it: every later set containing it
 * is not in an OUT either. It is not lowered (its AGG would sum blocks of
 * different boxes). Every other action must move copies of one atom.
 * Marks the skipped actions fired and counts them off *left. */
static int skip_dead(lw *L, xstate *X, char *fired, int *left, const char *tensor,
                     const char *opname)
{
    const xp_program *p = X->p;
    for (int a = 0; a < p->nact; a++) {
        const xp_action *ac = &p->act[a];
        int wanted = 0;
        for (int o = 0; o < p->nout && !wanted; o++)
            wanted = xp_set_subset(p, ac->set, p->out[o].set);
        if (!wanted) {
            fired[a] = 1;
            (*left)--;
            continue;
        }
        int atom = atom_of(X, ac->set);
        for (int i = 0; i < p->nin; i++)
            if (xp_set_has(ac->set, i) && p->in[i].atom != atom) {
                char buf[256];
                return ein_fail(L->err, EIN_EINVAL, "exchange of '%s' for '%s': action '%s' "
                                "aggregates copies of different blocks (atoms %d and %d)",
                                tensor, opname, xp_action_format(p, a, buf, sizeof buf), atom,
                                p->in[i].atom);
            }
    }
    return 0;
}

/* Move node u's partial blocks to the blocks `need` at `need_site`,
 * aggregating on the way; need_buf[b] receives the buffer of block b. */
/* ---- searched exchanges, remembered -------------------------------------
 *
 * A model repeats itself (layers, chains): many exchanges have the same
 * preamble up to the atoms' labels (same sites, sizes, OUT sets), so the same
 * search problem. The first search's result is kept and copied for the
 * others, which turns the lowering's cost from one search per exchange into
 * one per distinct exchange. The search keeps the preamble's IN and OUT in
 * order, so a copy only needs the new preamble's atom labels. */
#define XCACHE_MAX 4096     /* entries; past this, new exchanges are searched */

typedef struct xcache {
    uint64_t hash;
    xp_program *pre;        /* NULL: empty slot */
    xp_program *synth;
    double naive_s, best_s;
} xcache;

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    return h * 0x100000001b3ULL;
}

/* Hash of what xp_program_equal compares in a preamble (no actions). */
static uint64_t preamble_hash(const xp_program *p)
{
    uint64_t h = mix(mix(mix(0, (uint64_t)p->ngpus), (uint64_t)p->nin), (uint64_t)p->nout);
    h = mix(h, (uint64_t)p->npart);
    for (int i = 0; i < p->nin; i++) {
        uint64_t b;
        memcpy(&b, &p->in[i].bytes, sizeof b);
        h = mix(mix(h, (uint64_t)p->in[i].site), b);
    }
    for (int o = 0; o < p->nout; o++) {
        h = mix(mix(h, (uint64_t)(int64_t)p->out[o].site), (uint64_t)(int64_t)p->out[o].part);
        for (int w = 0; w < p->nwords; w++)
            h = mix(h, p->out[o].set[w]);
    }
    for (int g = 0; g < p->npart; g++)
        h = mix(mix(h, (uint64_t)p->part[g].size), (uint64_t)p->part[g].by_size);
    return h;
}

static void xcache_free(lw *L);

void co_xcache_free(co_xcache *c)
{
    if (!c)
        return;
    lw L = {.cache = c->cache, .cap_cache = c->cap_cache};
    xcache_free(&L);
    free(c);
}

static void xcache_free(lw *L)
{
    for (int i = 0; i < L->cap_cache; i++) {
        xp_program_free(L->cache[i].pre);
        xp_program_free(L->cache[i].synth);
    }
    free(L->cache);
}

/* The slot of a preamble equal to `p` (hash h), or of the empty slot where
 * it would go; NULL when there is no table. */
static xcache *xcache_slot(lw *L, const xp_program *p, uint64_t h)
{
    if (!L->cache)
        return NULL;
    uint64_t mask = (uint64_t)L->cap_cache - 1;
    for (uint64_t i = h & mask;; i = (i + 1) & mask) {
        xcache *e = &L->cache[i];
        if (!e->pre || (e->hash == h && xp_program_equal(e->pre, p)))
            return e;
    }
}

/* A copy of the remembered body for preamble `p`, or NULL (none, or out of
 * memory: then the caller searches). */
static xp_program *xcache_find(lw *L, const xp_program *p, uint64_t h, double *naive_s,
                               double *best_s)
{
    xcache *e = xcache_slot(L, p, h);
    if (!e || !e->pre)
        return NULL;
    xp_program *q = xp_program_copy(e->synth);
    if (!q)
        return NULL;
    for (int i = 0; i < p->nin; i++)
        q->in[i].atom = p->in[i].atom;
    *naive_s = e->naive_s;
    *best_s = e->best_s;
    return q;
}

/* Remember `synth` for preamble `p` (copies both); silently skipped when
 * the table is full or memory is short: it is only a shortcut. */
static void xcache_put(lw *L, const xp_program *p, uint64_t h, const xp_program *synth,
                       double naive_s, double best_s)
{
    if (L->ncache >= XCACHE_MAX)
        return;
    if (!L->cache) {
        if (!(L->cache = calloc(2 * XCACHE_MAX, sizeof *L->cache)))
            return;
        L->cap_cache = 2 * XCACHE_MAX;
    }
    xcache *e = xcache_slot(L, p, h);
    if (e->pre)
        return;
    xp_program *a = xp_program_copy(p), *b = xp_program_copy(synth);
    if (!a || !b) {
        xp_program_free(a);
        xp_program_free(b);
        return;
    }
    *e = (xcache){.hash = h, .pre = a, .synth = b, .naive_s = naive_s, .best_s = best_s};
    L->ncache++;
}

/* 1 if every OUT of the preamble `p` is an aggregate of copies on its own
 * site: nothing crosses devices, the naive program is already the best one,
 * and a search (whose budget is per exchange) would only spend time. A chain
 * of elementwise operators keeping one layout is all such exchanges. */
static int exchange_is_local(const xp_program *p)
{
    for (int o = 0; o < p->nout; o++) {
        if (p->out[o].site < 0)
            return 0;
        for (int w = 0; w < p->nwords; w++)
            for (xp_word x = p->out[o].set[w]; x; x &= x - 1)
                if (p->in[w * 64 + __builtin_ctzll(x)].site != p->out[o].site)
                    return 0;
    }
    return 1;
}

/* The body of exchange X.p: synthesised on the topology (or reused from
 * the cache) unless the exchange is local or the schedule is naive; then
 * forced chunks (testing), the body hook, and the Def. 5.5 check. */
static int choose_body(lw *L, xstate *X, int local, const pl_node *nd, const char *opname)
{
    int rc = 0;
    if (L->o->topo && L->o->search && !local) {
        /* Synthesise the body on the machine's topology; the result keeps
         * the preamble's IN and OUT, so the lowering below is the same. */
        uint64_t h = preamble_hash(X->p);
        xp_search_stats ss = {0};
        xp_program *synth = xcache_find(L, X->p, h, &ss.naive_s, &ss.best_s);
        if (synth) {
            L->st->nreused++;
        } else {
            if ((rc = xp_search(X->p, L->o->topo, &L->o->search_opts, &synth, &ss, L->err)) < 0) {
                ein_error_prefix(L->err, "exchange of '%s' for '%s'", nd->name, opname);
                return rc;
            }
            L->st->nsearched++;
            xcache_put(L, X->p, h, synth, ss.naive_s, ss.best_s);
        }
        xp_program_free(X->p);
        X->p = synth;
        L->st->naive_s += ss.naive_s;
        L->st->synth_s += ss.best_s;
        L->st->search_steps += ss.steps;
        L->st->search_ms += ss.elapsed_ms;
        L->st->ncapped += ss.capped;
    } else if ((rc = xp_naive_synthesize(X->p, L->err)) >= 0 && L->o->topo) {
        double t = 0;
        if ((rc = xp_sim_run(X->p, L->o->topo, &t, NULL, L->err)) >= 0) {
            L->st->naive_s += t;
            L->st->synth_s += t;
        }
    }
    /* Forced chunks (testing): every whole action of a body that moves
     * data becomes a stream of K chunks. */
    for (int a = 0; rc >= 0 && !local && L->o->exchange_chunks > 1 && a < X->p->nact; a++)
        if (X->p->act[a].nchunks == 1)
            rc = xp_action_set_chunk(X->p, a, 0, L->o->exchange_chunks, L->o->exchange_chunks,
                                     L->err);
    if (rc >= 0 && L->o->body_hook)
        rc = L->o->body_hook(L->o->body_ctx, nd->name, opname, &X->p, L->err);
    if (rc < 0 || (rc = xp_program_check(X->p, L->err)) < 0) {
        ein_error_prefix(L->err, "exchange of '%s' for '%s'", nd->name, opname);
        return rc;
    }
    return 0;
}

/* Fire the actions of X->p in an order where each is enabled (the
 * program is a set), emitting their copies and aggregations. */
static int fire_all(lw *L, xstate *X, int u, const pl_node *nd, const char *opname)
{
    int rc = 0;
    char *fired = NULL;
    xp_word **cand = NULL;
    int *cidx = NULL, *pick = NULL;
    int cap = X->p->nin + X->p->nact * (L->ndev + 1) + 1;
    fired = calloc((size_t)X->p->nact + 1, 1);
    cand = malloc(sizeof *cand * (size_t)cap);
    cidx = malloc(sizeof(int) * (size_t)cap);
    pick = malloc(sizeof(int) * (size_t)cap);
    if (!fired || !cand || !cidx || !pick) {
        rc = ein_fail(L->err, EIN_ENOMEM, "out of memory while lowering");
        goto done;
    }
    int left = X->p->nact;
    if ((rc = skip_dead(L, X, fired, &left, nd->name, opname)) < 0)
        goto done;
    for (int progress = 1; left > 0;) {
        if (!progress) {
            rc = ein_fail(L->err, EIN_EINVAL, "exchange of '%s': %d actions never enabled",
                          nd->name, left);
            goto done;
        }
        progress = 0;
        for (int a = 0; a < X->p->nact; a++) {
            const xp_action *ac = &X->p->act[a];
            if (fired[a])
                continue;
            int64_t lo, hi;
            chunk_rows(box_rows(&X->atoms[atom_of(X, ac->set)]), ac->chunk, ac->nchunks, &lo,
                       &hi);
            if (lo == hi) { /* a chunk of no rows: nothing to move */
                fired[a] = 1;
                left--;
                progress = 1;
                continue;
            }
            int nc = 0;
            for (int k = 0; k < X->nh; k++) {
                int sub = X->h[k].site == ac->src;
                for (int w = 0; sub && w < X->p->nwords; w++)
                    sub = !(X->h[k].set[w] & ~ac->set[w]);
                if (sub && held_covers(&X->h[k], lo, hi)) {
                    cand[nc] = X->h[k].set;
                    cidx[nc++] = k;
                }
            }
            int np = xp_partition_find(X->p, ac->set, cand, nc, pick);
            if (np < 0)
                continue;
            for (int i = 0; i < np; i++)
                pick[i] = cidx[pick[i]];
            if ((rc = fire(L, X, ac, lo, hi, pick, np, u, opname)) < 0)
                goto done;
            fired[a] = 1;
            left--;
            progress = 1;
        }
    }

done:
    free(fired);
    free(cand);
    free(cidx);
    free(pick);
    return rc;
}

/* Recompose: each required block from the aggregates at its site (LSE
 * partials cut down to the wanted blocks, cast to the node's dtype). */
static int recompose(lw *L, xstate *X, int u, ein_agg agg, const ein_box *need,
                     const ein_box *want, const int *need_site, int nneed, int *need_buf,
                     const char *opname)
{
    const pl_node *nd = pl_graph_node(L->g, u);
    int rc = 0;
    for (int b = 0; b < nneed; b++) {
        int32_t srcs[1024];
        int ns = 0, site = need_site[b];
        for (int o = 0; o < X->p->nout; o++) {
            const xp_out *out = &X->p->out[o];
            if (out->site != site || !ein_box_contains(&need[b], &X->atoms[atom_of(X, out->set)]))
                continue;
            int k = held_find(X, out->set, site);
            int64_t rows = box_rows(&X->atoms[atom_of(X, out->set)]);
            if (k < 0 || !held_covers(&X->h[k], 0, rows) || ns >= 1024) {
                rc = ein_fail(L->err, EIN_EINVAL, "exchange of '%s': OUT %d not held at %d",
                              nd->name, o, site);
                return rc;
            }
            int buf = read_rows(L, X, k, 0, rows, u, opname);
            if (buf < 0) {
                rc = buf;
                return rc;
            }
            srcs[ns++] = buf;
        }
        if (ns == 1 && ein_box_equal(&L->progs[site]->buffers[srcs[0]].box, &need[b])) {
            need_buf[b] = srcs[0];
        } else {
            int nb = new_buf(L, site, L->xdt[u], &need[b]);
            if (nb < 0) {
                rc = nb;
                return rc;
            }
            ein_instr ins = {.kind = EIN_I_CONCAT, .srcs = srcs, .nsrcs = ns, .dst = nb};
            set_op(&ins, opname, nd->name);
            if ((rc = emit(L, site, &ins)) < 0)
                return rc;
            need_buf[b] = nb;
        }
        if (agg == EIN_AGG_LSE && (rc = lse_rows(L, site, &need_buf[b], &want[b], nd, opname)) < 0)
            return rc;
        if (L->xdt[u] != nd->dtype && (rc = cast_block(L, site, &need_buf[b], nd, opname)) < 0)
            return rc;
    }
    return 0;
}

static int lower_exchange(lw *L, int u, const char *opname, const ein_box *need,
                          const int *need_site, int nneed, int *need_buf)
{
    const pl_choice *cu = &L->plan->nodes[u];
    const pl_node *nd = pl_graph_node(L->g, u);
    int p = cu->spec.nparts, rc = 0, natoms = 0;
    xstate X = {0};
    ein_box *xneed = NULL;
    ein_box *have = malloc(sizeof *have * (size_t)p);
    int *have_site = malloc(sizeof(int) * (size_t)p);
    if (!have || !have_site) {
        rc = ein_fail(L->err, EIN_ENOMEM, "out of memory while lowering");
        goto done;
    }
    /* Partials travel over ein_agg_box (LSE: with their per-row
     * log-sum-exp), so atoms, copies and merges carry it; the blocks the
     * consumer wants are cut out of the merged rows at the end. */
    ein_agg agg = cu->spec.agg;
    const ein_box *want = need;
    if (agg == EIN_AGG_LSE) {
        if (!(xneed = malloc(sizeof *xneed * (size_t)(nneed ? nneed : 1)))) {
            rc = ein_fail(L->err, EIN_ENOMEM, "out of memory while lowering");
            goto done;
        }
        for (int b = 0; b < nneed; b++)
            xneed[b] = ein_agg_box(agg, &need[b]);
        need = xneed;
    }
    for (int j = 0; j < p; j++) {
        have[j] = ein_agg_box(agg, &cu->spec.f[j].out);
        have_site[j] = j;
    }
    if ((rc = xp_preamble_make(have, have_site, p, need, need_site, nneed,
                               ein_dtype_size(L->xdt[u]), L->ndev, &X.atoms, &natoms, &X.p,
                               L->err)) < 0)
        goto done;
    int local = exchange_is_local(X.p);
    L->st->nlocal += local;
    if ((rc = choose_body(L, &X, local, nd, opname)) < 0)
        goto done;
    L->st->nexchanges++;
    L->st->nchunked += xp_program_chunked(X.p);
    xp_word *one = xp_set_new(X.p);
    if (!one) {
        rc = ein_fail(L->err, EIN_ENOMEM, "out of memory while lowering");
        goto done;
    }
    for (int i = 0; i < X.p->nin && rc >= 0; i++) {
        memset(one, 0, sizeof(xp_word) * (size_t)X.p->nwords);
        xp_set_add(one, i);
        if ((rc = held_add(L, &X, one, X.p->in[i].site, -1, i)) >= 0)
            rc = piece_add(L, &X.h[rc], 0, box_rows(&X.atoms[X.p->in[i].atom]), -1);
    }
    free(one);
    if (rc < 0)
        goto done;
    /* Streams of chunks become their chunks, in order. */
    if (xp_program_chunked(X.p)) {
        xp_program *q = NULL;
        if ((rc = xp_program_expand_chunks(X.p, &q, NULL, L->err)) < 0)
            goto done;
        xp_program_free(X.p);
        X.p = q;
    }
    L->nviews = 0;

    if ((rc = fire_all(L, &X, u, nd, opname)) < 0)
        goto done;
    rc = recompose(L, &X, u, agg, need, want, need_site, nneed, need_buf, opname);
done:
    free(xneed);
    for (int i = 0; i < X.nh; i++) {
        free(X.h[i].set);
        free(X.h[i].pc);
    }
    free(X.h);
    free(X.atoms);
    xp_program_free(X.p);
    free(have);
    free(have_site);
    return rc < 0 ? rc : 0;
}

/* Distinct output blocks of a plan node and the device storing each. */
static int output_blocks(const pl_choice *c, ein_box *boxes, int *sites)
{
    int n = 0;
    for (int f = 0; f < c->spec.nparts; f++) {
        int dup = 0;
        for (int i = 0; i < n && !dup; i++)
            dup = ein_box_equal(&boxes[i], &c->spec.f[f].out);
        if (!dup) {
            boxes[n] = c->spec.f[f].out;
            sites[n++] = f;
        }
    }
    return n;
}

/* A saved graph input is never an operator's output, so it has no plan of
 * its own: its first axis is cut into min(ndev, extent) near-equal blocks,
 * block i loaded and stored by device i, so the output equals the input and
 * the work of writing it is spread like any other output's. */
static int input_blocks(const pl_node *nd, int ndev, ein_box *boxes, int *sites)
{
    ein_box whole = ein_box_of_shape(nd->rank, nd->shape);
    int64_t ext = nd->rank > 0 ? nd->shape[0] : 1;
    int n = ext < ndev ? (int)ext : ndev;
    if (nd->rank == 0 || n < 1)
        n = 1;
    for (int i = 0; i < n; i++) {
        boxes[i] = whole;
        if (nd->rank > 0) {
            boxes[i].lo[0] = ext * i / n;
            boxes[i].hi[0] = ext * (i + 1) / n;
        }
        sites[i] = i;
    }
    return n;
}

uint64_t co_output_devices(const pl_graph *g, const pl_plan *plan, int node)
{
    const pl_choice *c = &plan->nodes[node];
    uint64_t mask = 0;
    const pl_node *nd = pl_graph_node(g, node);
    if (nd->kind == PL_INPUT) {
        int n = nd->rank > 0 && nd->shape[0] < plan->p ? (int)nd->shape[0] : plan->p;
        for (int i = 0; i < n && i < 64; i++)
            mask |= 1ULL << i;
        return mask ? mask : 1;
    }
    for (int f = 0; f < c->spec.nparts; f++) {
        int first = 1;
        for (int e = 0; e < f && first; e++)
            first = !ein_box_equal(&c->spec.f[e].out, &c->spec.f[f].out);
        if (first && f < 64)
            mask |= 1ULL << f;
    }
    return mask;
}

static int store_block(lw *L, int v, int buf, int dev)
{
    const pl_node *nd = pl_graph_node(L->g, v);
    int32_t src = buf;
    ein_instr ins = {.kind = EIN_I_STORE, .srcs = &src, .nsrcs = 1, .dst = -1,
                     .rank = nd->rank};
    memcpy(ins.shape, nd->shape, sizeof ins.shape);
    char def[EIN_NAME_MAX + 8];
    snprintf(def, sizeof def, "%s.npy", nd->name);
    ins.path = L->o->output_path && L->o->output_path[v] ? (char *)L->o->output_path[v] : def;
    set_op(&ins, nd->name, NULL);
    int rc = emit(L, dev, &ins);
    return rc < 0 ? rc : 0;
}

static int lower_saved_input(lw *L, int v)
{
    const pl_node *nd = pl_graph_node(L->g, v);
    ein_box *boxes = malloc(sizeof *boxes * (size_t)L->ndev);
    int *sites = malloc(sizeof(int) * (size_t)L->ndev), rc = 0;
    if (!boxes || !sites) {
        rc = ein_fail(L->err, EIN_ENOMEM, "out of memory while lowering");
        goto done;
    }
    int n = input_blocks(nd, L->ndev, boxes, sites);
    for (int i = 0; i < n && rc == 0; i++) {
        int b = load_block(L, v, &boxes[i], sites[i]);
        rc = b < 0 ? b : store_block(L, v, b, sites[i]);
    }
done:
    free(boxes);
    free(sites);
    return rc;
}

/* lower_node's scratch, sized for a node of p function specifications:
 * inbuf[f * PL_MAX_INPUTS + k], the buffer of input k at specification f
 * (-1: none); need/site/nbuf, a list of boxes, the devices that need them
 * and the buffers they arrived in. */
typedef struct node_scratch {
    int *inbuf;
    ein_box *need;
    int *site, *nbuf;
} node_scratch;

/* Fill ns->inbuf for node v: an input's blocks are loaded (a graph input)
 * or exchanged from its producer's partials to the devices that need
 * them. Returns 0 or a negative code. */
static int gather_inputs(lw *L, int v, node_scratch *ns)
{
    const pl_node *nd = pl_graph_node(L->g, v);
    const pl_choice *c = &L->plan->nodes[v];
    int p = c->spec.nparts, rc;
    /* A function specification may need nothing of an input (a concat
     * block that does not overlap it): that input gets no block, no
     * transfer, and is left out of the kernel's operands (-1 below). */
    for (int k = 0; k < nd->ninputs; k++) {
        int u = nd->inputs[k], nn = 0;
        for (int f = 0; f < p; f++) {
            ns->inbuf[f * PL_MAX_INPUTS + k] = -1;
            if (ein_box_empty(&c->spec.f[f].in[k]))
                continue;
            ns->need[nn] = c->spec.f[f].in[k];
            ns->site[nn++] = f;
        }
        if (pl_graph_node(L->g, u)->kind == PL_INPUT) {
            for (int i = 0; i < nn; i++) {
                int b = load_block(L, u, &ns->need[i], ns->site[i]);
                if (b < 0)
                    return b;
                ns->inbuf[ns->site[i] * PL_MAX_INPUTS + k] = b;
            }
            continue;
        }
        if (nn && (rc = lower_exchange(L, u, nd->name, ns->need, ns->site, nn, ns->nbuf)) < 0)
            return rc;
        for (int i = 0; i < nn; i++)
            ns->inbuf[ns->site[i] * PL_MAX_INPUTS + k] = ns->nbuf[i];
    }
    return 0;
}

/* Emit node v's kernel at function specification f over the input
 * buffers in[0..ninputs) into a new partial buffer (L->partial). */
static int emit_node_kernel(lw *L, int v, int f, const int *in)
{
    const pl_node *nd = pl_graph_node(L->g, v);
    const pl_choice *c = &L->plan->nodes[v];
    /* Keys split (EIN_AGG_LSE): each function specification computes one
     * key block's partial, over ein_agg_box; one whose key block is empty
     * gets q alone (its partial is the merge's identity). */
    int lse = c->spec.agg == EIN_AGG_LSE && nd->kernel.kind == EIN_KERNEL_ATTENTION;
    ein_box obox = ein_agg_box(c->spec.agg, &c->spec.f[f].out);
    int out = new_buf(L, f, L->xdt[v], &obox), rc;
    if (out < 0)
        return out;
    int32_t srcs[PL_MAX_INPUTS];
    int64_t offsets[PL_MAX_INPUTS];
    int ns = 0;
    ein_instr ins = {.kind = EIN_I_KERNEL, .srcs = srcs, .dst = out, .kernel = nd->kernel};
    if (lse)
        ins.kernel.kind = EIN_KERNEL_ATTENTION_PARTIAL;
    for (int k = 0; k < nd->ninputs; k++) {
        int b = in[k];
        if (b < 0) {
            if (lse && k > 0 && in[1] < 0 && in[2] < 0)
                continue;
            if (nd->kernel.kind != EIN_KERNEL_CONCAT)
                return ein_fail(L->err, EIN_EINVAL, "%s: function specification %d needs "
                                "nothing of input %d", nd->name, f, k);
            continue;
        }
        if (nd->kernel.kind == EIN_KERNEL_CONCAT)
            offsets[ns] = nd->kernel.list[k];
        srcs[ns++] = b;
    }
    if (nd->kernel.kind == EIN_KERNEL_CONCAT) {
        ins.kernel.list = offsets; /* the kept inputs' offsets; copied by add_instr */
        ins.kernel.nlist = ns;
    }
    ins.nsrcs = ns;
    set_op(&ins, nd->name, NULL);
    if ((rc = emit(L, f, &ins)) < 0)
        return rc;
    L->partial[v * L->ndev + f] = out;
    return 0;
}

/* A saved node's output blocks: exchanged to their storing devices and
 * stored. */
static int store_saved(lw *L, int v, node_scratch *ns)
{
    int n = output_blocks(&L->plan->nodes[v], ns->need, ns->site), rc;
    if ((rc = lower_exchange(L, v, "save", ns->need, ns->site, n, ns->nbuf)) < 0)
        return rc;
    for (int b = 0; b < n; b++)
        if ((rc = store_block(L, v, ns->nbuf[b], ns->site[b])) < 0)
            return rc;
    return 0;
}

/* Lower node v: its inputs' blocks brought to the devices that need
 * them, one kernel per function specification, and a saved node's output
 * stored. Returns 0 or a negative code. */
static int lower_node(lw *L, int v)
{
    const pl_node *nd = pl_graph_node(L->g, v);
    int p = L->plan->nodes[v].spec.nparts, rc = 0;
    node_scratch ns = {
        .inbuf = malloc(sizeof(int) * (size_t)p * PL_MAX_INPUTS),
        .need = malloc(sizeof(ein_box) * (size_t)p),
        .site = malloc(sizeof(int) * (size_t)p),
        .nbuf = malloc(sizeof(int) * (size_t)p),
    };
    if (!ns.inbuf || !ns.need || !ns.site || !ns.nbuf) {
        rc = ein_fail(L->err, EIN_ENOMEM, "out of memory while lowering");
        goto done;
    }
    if ((rc = gather_inputs(L, v, &ns)) < 0)
        goto done;
    for (int f = 0; f < p; f++)
        if ((rc = emit_node_kernel(L, v, f, &ns.inbuf[f * PL_MAX_INPUTS])) < 0)
            goto done;
    if (nd->saved)
        rc = store_saved(L, v, &ns);
done:
    free(ns.inbuf);
    free(ns.need);
    free(ns.site);
    free(ns.nbuf);
    return rc < 0 ? rc : 0;
}

/* A device's Program travels in one message (EIN_MSG_MAX_BYTES): one too
 * large to send is the input's fault (too many operators for the devices),
 * so it fails here with EIN_ELIMIT, before any worker starts. */
static int check_size(lw *L, int d)
{
    long long max = L->o->max_program_bytes > 0 ? L->o->max_program_bytes : EIN_MSG_MAX_BYTES;
    ein_msg m = {.type = EIN_MSG_PROGRAM, .program = L->progs[d]};
    ein_error e = {0};
    void *buf = NULL;
    size_t len = 0;
    int rc = ein_msg_encode(&m, &buf, &len, &e);
    free(buf);
    if (rc == EIN_ELIMIT || (rc == 0 && (long long)len > max))
        return ein_fail(L->err, EIN_ELIMIT,
                        "the program of device %d (%d instructions, %d buffers) does not fit in "
                        "one message of at most %lld bytes; expected fewer operators",
                        d, L->progs[d]->ninstrs, L->progs[d]->nbuffers, max);
    if (rc < 0)
        return ein_fail(L->err, rc, "internal error: program of device %d: %s", d, e.msg);
    return 0;
}

int co_lower(const pl_graph *g, const pl_plan *plan, const co_lower_opts *opts,
             ein_program ***progs_out, co_lower_stats *stats, ein_error *err)
{
    co_lower_stats st_local = {0};
    lw L = {.g = g, .plan = plan, .o = opts, .ndev = opts->ndev, .err = err,
            .st = stats ? stats : &st_local};
    memset(L.st, 0, sizeof *L.st);
    if (opts->xcache) { /* the caller's bodies, shared across lowerings */
        L.cache = opts->xcache->cache;
        L.cap_cache = opts->xcache->cap_cache;
        L.ncache = opts->xcache->ncache;
    }
    int rc = 0;
    if (plan->p != opts->ndev)
        return ein_fail(err, EIN_EINVAL, "plan for %d devices lowered onto %d", plan->p, opts->ndev);
    L.progs = calloc((size_t)L.ndev, sizeof *L.progs);
    L.producer = calloc((size_t)L.ndev, sizeof *L.producer);
    L.cap_producer = calloc((size_t)L.ndev, sizeof(int));
    L.partial = malloc(sizeof(int) * (size_t)g->nnodes * (size_t)L.ndev + 1);
    if (!L.progs || !L.producer || !L.cap_producer || !L.partial) {
        rc = ein_fail(err, EIN_ENOMEM, "out of memory while lowering");
        goto done;
    }
    for (int i = 0; i < g->nnodes * L.ndev; i++)
        L.partial[i] = -1;
    if (!(L.xdt = malloc(sizeof *L.xdt * (size_t)g->nnodes + 1))) {
        rc = ein_fail(err, EIN_ENOMEM, "out of memory while lowering");
        goto done;
    }
    for (int v = 0; v < g->nnodes; v++)
        L.xdt[v] = partial_dtype(g, plan, v);
    for (int d = 0; d < L.ndev; d++)
        if (!(L.progs[d] = ein_program_new(d, L.ndev))) {
            rc = ein_fail(err, EIN_ENOMEM, "out of memory while lowering");
            goto done;
        }
    for (int v = 0; v < g->nnodes && rc == 0; v++) {
        if (plan->nodes[v].planned)
            rc = lower_node(&L, v);
        else if (pl_graph_node(g, v)->kind == PL_INPUT && pl_graph_node(g, v)->saved)
            rc = lower_saved_input(&L, v);
        ein_progress_step(opts->progress, v + 1);
    }
    for (int d = 0; d < L.ndev && rc == 0; d++)
        if ((rc = ein_program_validate(L.progs[d], err)) < 0)
            ein_error_prefix(err, "internal error: program of device %d", d);
    for (int d = 0; d < L.ndev && rc == 0; d++)
        rc = check_size(&L, d);
done:
    if (L.producer)
        for (int d = 0; d < L.ndev; d++)
            free(L.producer[d]);
    free(L.producer);
    free(L.cap_producer);
    free(L.partial);
    free(L.xdt);
    free(L.loads);
    for (int i = 0; i < L.nws; i++)
        free(L.ws[i].id);
    free(L.ws);
    free(L.views);
    if (opts->xcache) {
        opts->xcache->cache = L.cache;
        opts->xcache->cap_cache = L.cap_cache;
        opts->xcache->ncache = L.ncache;
    } else {
        xcache_free(&L);
    }
    if (rc < 0) {
        co_programs_free(L.progs, L.ndev);
        return rc;
    }
    *progs_out = L.progs;
    return 0;
}

void co_programs_free(ein_program **progs, int ndev)
{
    if (!progs)
        return;
    for (int d = 0; d < ndev; d++)
        ein_program_free(progs[d]);
    free(progs);
}

int co_exchange_chunks_parse(const char *text, int *chunks, ein_error *err)
{
    char *end;
    if (!strcmp(text, "auto")) {
        *chunks = -1;
        return 0;
    }
    if (!strcmp(text, "off")) {
        *chunks = 1;
        return 0;
    }
    long k = strtol(text, &end, 10);
    if (end == text || *end || k < 1 || k > XP_CHUNKS_MAX)
        return ein_fail(err, EIN_EINVAL, "'%.64s': expected auto, off or a chunk count from 1 "
                        "to %d", text, XP_CHUNKS_MAX);
    *chunks = (int)k;
    return 0;
}
