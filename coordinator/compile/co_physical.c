/* coordinator/compile/co_physical.c — the physical plan: placement and every
 * exchange's preamble and body (co_physical.h). */
#include "coordinator/compile/co_physical.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/ein_hash.h"
#include "common/process/ein_progress.h"
#include "common/base/ein_vec.h"
#include "exchange/xp_atoms.h"
#include "exchange/xp_naive.h"
#include "exchange/xp_sim.h"

/* co_physical_make's state. */
typedef struct pb {
    const pl_graph *g;
    const pl_plan *plan;
    const co_physical_opts *o;
    co_physical *ph;
    int cap_ex;
    ein_error *err;
    struct xcache *cache;   /* searched exchanges, by preamble (see xcache_find) */
    int cap_cache, ncache;
} pb;

ein_dtype co_partial_dtype(const pl_graph *g, const pl_plan *plan, int v)
{
    const pl_node *nd = pl_graph_node(g, v);
    if (nd->kind == PL_INPUT || !plan->nodes[v].planned)
        return nd->dtype;
    return pl_partial_dtype(nd->dtype, plan->nodes[v].spec.agg, plan->partials);
}

int co_physical_place(const co_physical *ph, int v, int f)
{
    assert(v >= 0 && v < ph->nnodes);
    assert(f >= 0 && ph->place_at[v] + f < ph->place_at[v + 1]);
    return ph->place[ph->place_at[v] + f];
}

const char *co_exchange_consumer_name(const pl_graph *g, const co_exchange *e)
{
    return e->consumer < 0 ? "save" : pl_graph_node(g, e->consumer)->name;
}

/* ---- searched exchanges, remembered -------------------------------------
 *
 * A model repeats itself (layers, chains): many exchanges have the same
 * preamble up to the atoms' labels (same sites, sizes, OUT sets), so the same
 * search problem. The first search's result is kept and copied for the
 * others, which turns the cost from one search per exchange into one per
 * distinct exchange. The search keeps the preamble's IN and OUT in order,
 * so a copy only needs the new preamble's atom labels. */
#define XCACHE_MAX 4096     /* entries; past this, new exchanges are searched */

typedef struct xcache {
    uint64_t hash;
    xp_program *pre;        /* NULL: empty slot */
    xp_program *synth;
    double naive_s, best_s;
} xcache;

/* Hash of what xp_program_equal compares in a preamble (no actions). */
static uint64_t preamble_hash(const xp_program *p)
{
    uint64_t h = ein_hash_mix(ein_hash_mix(0, (uint64_t)p->ngpus), (uint64_t)p->nin);
    h = ein_hash_mix(h, (uint64_t)p->nout);
    h = ein_hash_mix(h, (uint64_t)p->npart);
    for (int i = 0; i < p->nin; i++) {
        uint64_t b;
        memcpy(&b, &p->in[i].bytes, sizeof b);
        h = ein_hash_mix(ein_hash_mix(h, (uint64_t)p->in[i].site), b);
    }
    for (int o = 0; o < p->nout; o++) {
        h = ein_hash_mix(ein_hash_mix(h, (uint64_t)(int64_t)p->out[o].site),
                         (uint64_t)(int64_t)p->out[o].part);
        for (int w = 0; w < p->nwords; w++)
            h = ein_hash_mix(h, p->out[o].set[w]);
    }
    for (int g = 0; g < p->npart; g++)
        h = ein_hash_mix(ein_hash_mix(h, (uint64_t)p->part[g].size), (uint64_t)p->part[g].by_size);
    return h;
}

static void xcache_free(pb *B)
{
    for (int i = 0; i < B->cap_cache; i++) {
        xp_program_free(B->cache[i].pre);
        xp_program_free(B->cache[i].synth);
    }
    free(B->cache);
}

void co_xcache_free(co_xcache *c)
{
    if (!c)
        return;
    pb B = {.cache = c->cache, .cap_cache = c->cap_cache};
    xcache_free(&B);
    free(c);
}

/* The slot of a preamble equal to `p` (hash h), or of the empty slot where
 * it would go; NULL when there is no table. */
static xcache *xcache_slot(pb *B, const xp_program *p, uint64_t h)
{
    if (!B->cache)
        return NULL;
    uint64_t mask = (uint64_t)B->cap_cache - 1;
    for (uint64_t i = h & mask;; i = (i + 1) & mask) {
        xcache *e = &B->cache[i];
        if (!e->pre || (e->hash == h && xp_program_equal(e->pre, p)))
            return e;
    }
}

/* A copy of the remembered body for preamble `p`, or NULL (none, or out of
 * memory: then the caller searches). */
static xp_program *xcache_find(pb *B, const xp_program *p, uint64_t h, double *naive_s,
                               double *best_s)
{
    xcache *e = xcache_slot(B, p, h);
    if (!e || !e->pre)
        return NULL;
    xp_program *q = xp_program_copy(e->synth);
    if (!q)
        return NULL;
    assert(q->nin == p->nin);
    for (int i = 0; i < p->nin; i++)
        q->in[i].atom = p->in[i].atom;
    *naive_s = e->naive_s;
    *best_s = e->best_s;
    return q;
}

/* Remember `synth` for preamble `p` (copies both); silently skipped when
 * the table is full or memory is short: it is only a shortcut. */
static void xcache_put(pb *B, const xp_program *p, uint64_t h, const xp_program *synth,
                       double naive_s, double best_s)
{
    if (B->ncache >= XCACHE_MAX)
        return;
    if (!B->cache) {
        if (!(B->cache = calloc(2 * XCACHE_MAX, sizeof *B->cache)))
            return;
        B->cap_cache = 2 * XCACHE_MAX;
    }
    xcache *e = xcache_slot(B, p, h);
    if (e->pre)
        return;
    xp_program *a = xp_program_copy(p), *b = xp_program_copy(synth);
    if (!a || !b) {
        xp_program_free(a);
        xp_program_free(b);
        return;
    }
    *e = (xcache){.hash = h, .pre = a, .synth = b, .naive_s = naive_s, .best_s = best_s};
    B->ncache++;
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

/* The body of exchange e (e->body holds its preamble): synthesised on the
 * topology (or reused from the cache) unless the exchange is local or the
 * schedule is naive; then forced chunks (testing), the body hook, and the
 * Def. 5.5 check. */
static int choose_body(pb *B, co_exchange *e)
{
    const char *tensor = pl_graph_node(B->g, e->tensor)->name;
    const char *consumer = co_exchange_consumer_name(B->g, e);
    co_physical_stats *st = &B->ph->st;
    const co_physical_opts *o = B->o;
    int rc = 0;
    if (o->topo && o->search && !e->local) {
        /* Synthesise the body on the machine's topology; the result keeps
         * the preamble's IN and OUT, so the lowering is the same. */
        uint64_t h = preamble_hash(e->body);
        xp_search_stats ss = {0};
        xp_program *synth = xcache_find(B, e->body, h, &ss.naive_s, &ss.best_s);
        if (synth) {
            st->nreused++;
            e->reused = 1;
        } else {
            if ((rc = xp_search(e->body, o->topo, &o->search_opts, &synth, &ss, B->err)) < 0) {
                ein_error_prefix(B->err, "exchange of '%s' for '%s'", tensor, consumer);
                return rc;
            }
            st->nsearched++;
            xcache_put(B, e->body, h, synth, ss.naive_s, ss.best_s);
        }
        xp_program_free(e->body);
        e->body = synth;
        e->naive_s = ss.naive_s;
        e->chosen_s = ss.best_s;
        st->search_steps += ss.steps;
        st->search_ms += ss.elapsed_ms;
        st->ncapped += ss.capped;
    } else if ((rc = xp_naive_synthesize(e->body, B->err)) >= 0 && o->topo) {
        double t = 0;
        if ((rc = xp_sim_run(e->body, o->topo, &t, NULL, B->err)) >= 0)
            e->naive_s = e->chosen_s = t;
    }
    st->naive_s += e->naive_s;
    st->synth_s += e->chosen_s;
    /* Forced chunks (testing): every whole action of a body that moves
     * data becomes a stream of K chunks. */
    for (int a = 0; rc >= 0 && !e->local && o->exchange_chunks > 1 && a < e->body->nact; a++)
        if (e->body->act[a].nchunks == 1)
            rc = xp_action_set_chunk(e->body, a, 0, o->exchange_chunks, o->exchange_chunks,
                                     B->err);
    if (rc >= 0 && o->body_hook)
        rc = o->body_hook(o->body_ctx, tensor, consumer, &e->body, B->err);
    if (rc < 0 || (rc = xp_program_check(e->body, B->err)) < 0) {
        ein_error_prefix(B->err, "exchange of '%s' for '%s'", tensor, consumer);
        return rc;
    }
    return 0;
}

static void exchange_free(co_exchange *e)
{
    free(e->need);
    free(e->want);
    free(e->need_site);
    free(e->atoms);
    xp_program_free(e->body);
}

/* Exchange of node u's partial blocks to the blocks `want` at `site` (n of
 * them) for input k of `consumer` (-1: saved): its preamble and body,
 * appended to B->ph->ex. */
static int add_exchange(pb *B, int u, int consumer, int k, const ein_box *want, const int *site,
                        int n)
{
    const pl_choice *cu = &B->plan->nodes[u];
    co_physical *ph = B->ph;
    int p = cu->spec.nparts, rc;
    if (ein_vec_reserve(&ph->ex, &B->cap_ex, (int64_t)ph->nex + 1, sizeof *ph->ex) < 0)
        return ein_fail(B->err, EIN_ENOMEM, "out of memory while planning exchanges");
    co_exchange *e = &ph->ex[ph->nex];
    *e = (co_exchange){.tensor = u, .consumer = consumer, .input = k, .nneed = n,
                       .dtype = co_partial_dtype(B->g, B->plan, u), .agg = cu->spec.agg};
    e->need = malloc(sizeof *e->need * (size_t)n);
    e->want = malloc(sizeof *e->want * (size_t)n);
    e->need_site = malloc(sizeof *e->need_site * (size_t)n);
    ein_box *have = malloc(sizeof *have * ((size_t)p + 1));
    int *have_site = malloc(sizeof(int) * ((size_t)p + 1));
    if (!e->need || !e->want || !e->need_site || !have || !have_site) {
        rc = ein_fail(B->err, EIN_ENOMEM, "out of memory while planning exchanges");
        goto done;
    }
    /* Partials travel over ein_agg_box (LSE: with their per-row
     * log-sum-exp), so atoms, copies and merges carry it; the blocks the
     * consumer wants are cut out of the merged rows at the end. */
    for (int b = 0; b < n; b++) {
        e->want[b] = want[b];
        e->need[b] = ein_agg_box(e->agg, &want[b]);
        e->need_site[b] = site[b];
    }
    int nh = 0, uncovered = 0;
    for (int j = 0; j < p; j++) {
        int sj = co_physical_place(ph, u, j), used = !cu->spec.replicated;
        /* A replicated producer's copies are equal values: only those on
         * a site that needs something are offered, and each need takes the
         * one on its own site (xp_preamble_make_replicas); never a sum. */
        for (int b = 0; b < n && !used; b++)
            used = site[b] == sj;
        if (!used)
            continue;
        have[nh] = ein_agg_box(e->agg, &cu->spec.f[j].out);
        have_site[nh++] = sj;
    }
    for (int b = 0; b < n && cu->spec.replicated; b++) {
        int covered = 0;
        for (int j = 0; j < nh && !covered; j++)
            covered = have_site[j] == site[b];
        uncovered |= !covered;
    }
    if (cu->spec.replicated && (uncovered || nh == 0)) {
        /* A need on a site without a copy reads copy 0 (moved there). */
        int first = 1;
        for (int j = 0; j < nh && first; j++)
            first = have_site[j] != co_physical_place(ph, u, 0);
        if (first) {
            have[nh] = cu->spec.f[0].out;
            have_site[nh++] = co_physical_place(ph, u, 0);
        }
    }
    /* whole bytes per element: a block dtype's (q8_0 1.06, q4_0 0.56,
     * f8e4m3 1.03) rounded up, for costs */
    size_t eb = (size_t)ceil(ein_dtype_elem_bytes(e->dtype));
    if ((rc = cu->spec.replicated
                  ? xp_preamble_make_replicas(have, have_site, nh, e->need, e->need_site, n, eb,
                                              B->o->ndev, &e->atoms, &e->natoms, &e->body, B->err)
                  : xp_preamble_make(have, have_site, nh, e->need, e->need_site, n, eb,
                                     B->o->ndev, &e->atoms, &e->natoms, &e->body, B->err)) < 0)
        goto done;
    e->local = exchange_is_local(e->body);
    ph->st.nlocal += e->local;
    if ((rc = choose_body(B, e)) < 0)
        goto done;
    ph->st.nexchanges++;
    ph->st.nchunked += xp_program_chunked(e->body);
    ph->nex++;
done:
    if (rc < 0)
        exchange_free(e);
    free(have);
    free(have_site);
    return rc < 0 ? rc : 0;
}

/* Distinct output blocks of a plan node and the device storing each. */
static int output_blocks(const co_physical *ph, int v, const pl_choice *c, ein_box *boxes,
                         int *sites)
{
    int n = 0;
    for (int f = 0; f < c->spec.nparts; f++) {
        int dup = 0;
        for (int i = 0; i < n && !dup; i++)
            dup = ein_box_equal(&boxes[i], &c->spec.f[f].out);
        if (!dup) {
            boxes[n] = c->spec.f[f].out;
            sites[n++] = co_physical_place(ph, v, f);
        }
    }
    return n;
}

/* The exchanges of node v: each operator input's blocks towards the tuples
 * that need them (graph inputs are loaded, not exchanged), then a saved
 * node's output towards one site per distinct block. */
static int node_exchanges(pb *B, int v, ein_box *need, int *site)
{
    const pl_node *nd = pl_graph_node(B->g, v);
    const pl_choice *c = &B->plan->nodes[v];
    int p = c->spec.nparts, rc;
    for (int k = 0; k < nd->ninputs; k++) {
        int u = nd->inputs[k], nn = 0;
        if (pl_graph_node(B->g, u)->kind == PL_INPUT)
            continue;
        /* A function specification may need nothing of an input (a concat
         * block that does not overlap it): no block, no transfer. */
        for (int f = 0; f < p; f++) {
            if (ein_box_empty(&c->spec.f[f].in[k]))
                continue;
            need[nn] = c->spec.f[f].in[k];
            site[nn++] = co_physical_place(B->ph, v, f);
        }
        if (nn && (rc = add_exchange(B, u, v, k, need, site, nn)) < 0)
            return rc;
    }
    if (nd->saved) {
        int n = output_blocks(B->ph, v, c, need, site);
        if ((rc = add_exchange(B, v, -1, 0, need, site, n)) < 0)
            return rc;
    }
    return 0;
}

/* Tuple f of every planned node on device f. */
static int place_tuples(pb *B)
{
    const pl_plan *plan = B->plan;
    co_physical *ph = B->ph;
    int n = 0;
    if (!(ph->place_at = malloc(sizeof(int) * ((size_t)ph->nnodes + 1))))
        return ein_fail(B->err, EIN_ENOMEM, "out of memory while placing tuples");
    for (int v = 0; v < ph->nnodes; v++) {
        ph->place_at[v] = n;
        n += plan->nodes[v].planned ? plan->nodes[v].spec.nparts : 0;
    }
    ph->place_at[ph->nnodes] = n;
    if (!(ph->place = malloc(sizeof(int) * ((size_t)n + 1))))
        return ein_fail(B->err, EIN_ENOMEM, "out of memory while placing tuples");
    for (int v = 0; v < ph->nnodes; v++)
        for (int f = 0; f < ph->place_at[v + 1] - ph->place_at[v]; f++) {
            /* Kernel outputs are kept per (node, device): at most one tuple
             * of a node per device. */
            assert(f < ph->ndev);
            ph->place[ph->place_at[v] + f] = f;
        }
    return 0;
}

int co_physical_make(const pl_graph *g, const pl_plan *plan, const co_physical_opts *o,
                     co_physical **out, ein_error *err)
{
    if (plan->p != o->ndev)
        return ein_fail(err, EIN_EINVAL, "plan for %d devices lowered onto %d", plan->p, o->ndev);
    assert(plan->nnodes == g->nnodes);
    co_physical *ph = calloc(1, sizeof *ph);
    if (!ph)
        return ein_fail(err, EIN_ENOMEM, "out of memory while planning exchanges");
    ph->ndev = o->ndev;
    ph->nnodes = g->nnodes;
    pb B = {.g = g, .plan = plan, .o = o, .ph = ph, .err = err};
    if (o->xcache) { /* the caller's bodies, shared across calls */
        B.cache = o->xcache->cache;
        B.cap_cache = o->xcache->cap_cache;
        B.ncache = o->xcache->ncache;
    }
    ein_box *need = malloc(sizeof *need * ((size_t)o->ndev + 1));
    int *site = malloc(sizeof *site * ((size_t)o->ndev + 1)), rc;
    if (!need || !site) {
        rc = ein_fail(err, EIN_ENOMEM, "out of memory while planning exchanges");
        goto done;
    }
    if ((rc = place_tuples(&B)) < 0)
        goto done;
    for (int v = 0; v < g->nnodes && rc == 0; v++) {
        if (plan->nodes[v].planned) {
            assert(plan->nodes[v].spec.nparts <= o->ndev);
            rc = node_exchanges(&B, v, need, site);
        }
        ein_progress_step(o->progress, v + 1);
    }
done:
    free(need);
    free(site);
    if (o->xcache) {
        o->xcache->cache = B.cache;
        o->xcache->cap_cache = B.cap_cache;
        o->xcache->ncache = B.ncache;
    } else {
        xcache_free(&B);
    }
    if (rc < 0) {
        co_physical_free(ph);
        return rc;
    }
    *out = ph;
    return 0;
}

void co_physical_free(co_physical *ph)
{
    if (!ph)
        return;
    for (int i = 0; i < ph->nex; i++)
        exchange_free(&ph->ex[i]);
    free(ph->ex);
    free(ph->place_at);
    free(ph->place);
    free(ph);
}

/* ---- the checker (common/base/ein_invariant.h) ------------------------------ */

static int exchange_ok(const co_physical *ph, const pl_graph *g, const co_exchange *e)
{
    if (e->tensor < 0 || e->tensor >= ph->nnodes || ph->place_at[e->tensor + 1] <= ph->place_at[e->tensor])
        return 0; /* moves a node that has no tuples */
    if (e->consumer < -1 || e->consumer >= ph->nnodes || e->consumer == e->tensor)
        return 0;
    if (e->consumer < 0 ? e->input != 0
                        : e->input < 0 || e->input >= g->nodes[e->consumer].ninputs ||
                              g->nodes[e->consumer].inputs[e->input] != e->tensor)
        return 0;
    if (!ein_dtype_valid((int)e->dtype) || e->nneed < 0 || e->natoms < 0 || !e->body)
        return 0;
    if (e->nneed && (!e->need || !e->want || !e->need_site))
        return 0;
    for (int b = 0; b < e->nneed; b++)
        if (e->need_site[b] < 0 || e->need_site[b] >= ph->ndev ||
            !ein_box_contains(&e->need[b], &e->want[b]))
            return 0;
    return 1;
}

int co_physical_ok(const co_physical *ph, const pl_graph *g, const pl_plan *plan)
{
    if (!ph || ph->ndev < 1 || ph->ndev != plan->p || ph->nnodes != g->nnodes || !ph->place_at ||
        ph->place_at[0] != 0 || ph->nex < 0 || (ph->nex && !ph->ex))
        return 0;
    for (int v = 0; v < ph->nnodes; v++) {
        int n = ph->place_at[v + 1] - ph->place_at[v];
        if (n != (plan->nodes[v].planned ? plan->nodes[v].spec.nparts : 0) || n > ph->ndev)
            return 0;
        /* at most one tuple of a node per device (kernel outputs are kept
         * per (node, device)) */
        for (int f = 0; f < n; f++) {
            int d = ph->place[ph->place_at[v] + f];
            if (d < 0 || d >= ph->ndev)
                return 0;
            for (int f2 = 0; f2 < f; f2++)
                if (ph->place[ph->place_at[v] + f2] == d)
                    return 0;
        }
    }
    for (int x = 0; x < ph->nex; x++)
        if (!exchange_ok(ph, g, &ph->ex[x]))
            return 0;
    return 1;
}
