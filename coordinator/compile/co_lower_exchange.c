/* coordinator/compile/co_lower_exchange.c — one exchange of the physical plan
 * lowered as its body says (co_lower.h): SLICE producer blocks into atoms,
 * NOTIFY + COPY per transfer (hop by hop, to every destination), AGG per
 * aggregation, CONCAT atoms into the blocks the consumer reads; chunked
 * actions work on views over rows of an atom's buffer. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/compile/co_lower_int.h"

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
    assert(k >= 1 && c >= 0 && c < k && n >= 0);
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
    assert(0 <= r0 && r0 <= r1 && r1 <= n);
    *fresh = 0;
    if (r0 == 0 && r1 == n)
        return parent;
    for (int i = 0; i < L->nviews; i++)
        if (L->views[i].dev == dev && L->views[i].parent == parent && L->views[i].r0 == r0 &&
            L->views[i].r1 == r1)
            return L->views[i].view;
    if (co_lw_grow(L, &L->views, &L->cap_views, L->nviews, sizeof *L->views) < 0)
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
    if ((id = co_lw_track_buf(L, dev, id)) < 0)
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
    const xp_program *p;
    const ein_box *atoms;
    held *h;
    int nh, cap;
} xstate;

/* A new entry (no rows yet); returns its index. */
static int held_add(lw *L, xstate *X, const xp_word *set, int site, int buf, int in)
{
    if (co_lw_grow(L, &X->h, &X->cap, X->nh, sizeof *X->h) < 0)
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
    assert(lo <= hi);
    if (co_lw_grow(L, &h->pc, &h->cap_pc, h->npc, sizeof *h->pc) < 0)
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

/* The atom of the copies in `set`; every set of a checked program names
 * at least one IN (xp_program_check), so never -1 where it indexes atoms. */
static int atom_of(const xstate *X, const xp_word *set)
{
    for (int i = 0; i < X->p->nin; i++)
        if (xp_set_has(set, i))
            return X->p->in[i].atom;
    assert(!"an aggregate of no copies");
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
    int buf = co_lw_new_buf(L, h->site, L->xdt[u], atom);
    if (buf < 0)
        return buf;
    int32_t src = block;
    ein_instr ins = {.kind = EIN_I_SLICE, .srcs = &src, .nsrcs = 1, .dst = buf};
    co_lw_set_op(&ins, opname, nd->name);
    int rc = co_lw_emit(L, h->site, &ins);
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
                     ? co_lw_add_writer(L, site, v, pc->writer) : 0;
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
        rc = co_lw_add_writer(L, h->site, h->buf, id);
    return rc;
}

/* The entry of aggregate `set` at `site`, made (with a new buffer over the
 * atom `box`) if there is none; returns its index. */
static int held_get(lw *L, xstate *X, const xp_word *set, int site, const ein_box *box, int u)
{
    int k = held_find(X, set, site);
    if (k >= 0)
        return k;
    int nb = co_lw_new_buf(L, site, L->xdt[u], box);
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
        co_lw_set_op(&note, opname, nd->name);
        if ((rc = co_lw_emit(L, from, &note)) < 0 ||
            (tk < 0 && (rc = tk = held_get(L, X, set, to, box, u)) < 0))
            break;
        int d = view_of(L, to, X->h[tk].buf, a, b, &fresh);
        if ((rc = d) < 0)
            break;
        ein_instr cp = {.kind = EIN_I_COPY, .dst = d, .peer = from, .peer_buf = s,
                        .peer_offset = L->progs[from]->buffers[s].offset};
        co_lw_set_op(&cp, opname, nd->name);
        if ((rc = co_lw_emit(L, to, &cp)) < 0 || (rc = wrote_rows(L, X, tk, d, a, b, rc)) < 0)
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
        co_lw_set_op(&ins, opname, nd->name);
        if ((rc = co_lw_emit(L, a->src, &ins)) >= 0)
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
    int nb = co_lw_new_buf(L, site, nd->dtype, &L->progs[site]->buffers[*buf].box);
    if (nb < 0)
        return nb;
    int32_t src = *buf;
    ein_instr ins = {.kind = EIN_I_KERNEL, .srcs = &src, .nsrcs = 1, .dst = nb,
                     .kernel = {.kind = EIN_KERNEL_UNARY, .unary = EIN_UN_SCALE, .scalar = 1.0}};
    co_lw_set_op(&ins, opname, nd->name);
    int rc = co_lw_emit(L, site, &ins);
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
    int nb = co_lw_new_buf(L, site, EIN_F32, box);
    if (nb < 0)
        return nb;
    int32_t src = *buf;
    ein_instr ins = {.kind = EIN_I_SLICE, .srcs = &src, .nsrcs = 1, .dst = nb};
    co_lw_set_op(&ins, opname, nd->name);
    int rc = co_lw_emit(L, site, &ins);
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
            int nb = co_lw_new_buf(L, site, L->xdt[u], &need[b]);
            if (nb < 0) {
                rc = nb;
                return rc;
            }
            ein_instr ins = {.kind = EIN_I_CONCAT, .srcs = srcs, .nsrcs = ns, .dst = nb};
            co_lw_set_op(&ins, opname, nd->name);
            if ((rc = co_lw_emit(L, site, &ins)) < 0)
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

/* Lower exchange e (node u's partial blocks to the blocks e->need at
 * e->need_site, aggregating on the way) as its body says; need_buf[b]
 * receives the buffer of the block the consumer reads. */
int co_lw_exchange(lw *L, const co_exchange *e, int *need_buf)
{
    int u = e->tensor, rc = 0;
    const pl_node *nd = pl_graph_node(L->g, u);
    const char *opname = co_exchange_consumer_name(L->g, e);
    /* The body's streams of chunks become their chunks, in order; an
     * unchunked body is lowered as it is (X.p is then not ours). */
    xstate X = {.p = e->body, .atoms = e->atoms};
    xp_program *own = NULL;
    if (xp_program_chunked(e->body)) {
        if ((rc = xp_program_expand_chunks(e->body, &own, NULL, L->err)) < 0)
            return rc;
        X.p = own;
    }
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
    L->nviews = 0;
    if ((rc = fire_all(L, &X, u, nd, opname)) < 0)
        goto done;
    rc = recompose(L, &X, u, e->agg, e->need, e->want, e->need_site, e->nneed, need_buf, opname);
done:
    for (int i = 0; i < X.nh; i++) {
        free(X.h[i].set);
        free(X.h[i].pc);
    }
    free(X.h);
    xp_program_free(own);
    return rc < 0 ? rc : 0;
}
