/* coordinator/compile/co_lower.c — from a physical plan to per-device Programs: the
 * loads, kernels and stores (exchanges: co_lower_exchange.c; the emission
 * helpers both use: co_lower_emit.c). */
#include "coordinator/compile/co_lower.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/ein_invariant.h"
#include "common/process/ein_progress.h"
#include "common/io/ein_rand.h"
#include "common/base/ein_vec.h"
#include "common/io/ein_wire.h"
#include "coordinator/compile/co_lower_int.h"

static int load_block(lw *L, int node, const ein_box *box, int dev)
{
    for (int i = 0; i < L->nloads; i++)
        if (L->loads[i].node == node && L->loads[i].dev == dev &&
            ein_box_equal(&L->loads[i].box, box))
            return L->loads[i].buf;
    const pl_node *nd = pl_graph_node(L->g, node);
    /* A state's blocks are its cache_writes' own buffers: two cache_writes
     * of it (entry points) must write the same blocks, never overlapping
     * ones (pl_spec_enumerate gives them one spec). */
    for (int i = 0; nd->state && i < L->nloads; i++) {
        ein_box common;
        if (L->loads[i].node == node && ein_box_intersect(&L->loads[i].box, box, &common))
            return ein_fail(L->err, EIN_EINVAL, "state %s: its cache_writes tile it differently "
                            "(blocks on devices %d and %d overlap)", nd->name, L->loads[i].dev,
                            dev);
    }
    int buf = co_lw_new_buf(L, dev, nd->dtype, box);
    if (buf < 0)
        return buf;
    ein_instr ins = {.kind = EIN_I_LOAD, .dst = buf};
    co_lw_set_op(&ins, nd->name, NULL);
    ins.path = (char *)(L->o->input_path ? L->o->input_path[node] : NULL);
    if (L->o->input_src && L->o->input_src[node].path) {
        ins.path = (char *)L->o->input_src[node].path;
        ins.format = L->o->input_src[node].format;
        ins.offset = L->o->input_src[node].offset;
    }
    if (nd->state) {
        /* A state: zeros once, then only its cache_write writes it, in
         * place (emit_node_kernel), and no LOAD ever runs again: the buffer
         * lives, with its contents, as long as the session. */
        ins.path = NULL;
        ins.format = EIN_LOAD_ZERO;
        ins.offset = 0;
    }
    ins.seed = L->o->seed;
    ins.key = ein_rand_key(nd->name);
    ins.rank = nd->rank;
    memcpy(ins.shape, nd->shape, sizeof ins.shape);
    int rc = co_lw_emit(L, dev, &ins);
    if (rc < 0)
        return rc;
    if ((rc = co_lw_grow(L, &L->loads, &L->cap_loads, L->nloads, sizeof *L->loads)) < 0)
        return rc;
    L->loads[L->nloads++] = (load_key){.node = node, .dev = dev, .buf = buf, .box = *box};
    return buf;
}

/* The next exchange of the physical plan, which must be node u's for
 * input k of `consumer` (-1: saved) towards n blocks. */
static const co_exchange *next_exchange(lw *L, int u, int consumer, int k, int n)
{
    assert(L->next_ex < L->ph->nex);
    const co_exchange *e = &L->ph->ex[L->next_ex++];
    assert(e->tensor == u && e->consumer == consumer && e->input == k && e->nneed == n);
    (void)u, (void)consumer, (void)k, (void)n;
    return e;
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
    co_lw_set_op(&ins, nd->name, NULL);
    int rc = co_lw_emit(L, dev, &ins);
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
 * (-1: none); need/tup/nbuf, a list of boxes, the specifications that need
 * them and the buffers they arrived in. */
typedef struct node_scratch {
    int *inbuf;
    ein_box *need;
    int *tup, *nbuf;
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
            ns->tup[nn++] = f;
        }
        if (pl_graph_node(L->g, u)->kind == PL_INPUT) {
            for (int i = 0; i < nn; i++) {
                int b = load_block(L, u, &ns->need[i], co_physical_place(L->ph, v, ns->tup[i]));
                if (b < 0)
                    return b;
                ns->inbuf[ns->tup[i] * PL_MAX_INPUTS + k] = b;
            }
            continue;
        }
        if (!nn)
            continue;
        const co_exchange *e = next_exchange(L, u, v, k, nn);
        for (int i = 0; i < nn; i++)
            assert(e->need_site[i] == co_physical_place(L->ph, v, ns->tup[i]) &&
                   ein_box_equal(&e->want[i], &ns->need[i]));
        if ((rc = co_lw_exchange(L, e, ns->nbuf)) < 0)
            return rc;
        for (int i = 0; i < nn; i++)
            ns->inbuf[ns->tup[i] * PL_MAX_INPUTS + k] = ns->nbuf[i];
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
    int dev = co_physical_place(L->ph, v, f);
    int out, rc;
    if (nd->kernel.kind == EIN_KERNEL_CACHE_WRITE) {
        /* In place: the output block is the state's own (persistent) LOAD
         * buffer of that box, so what this run writes the next run reads. */
        out = in[0];
        assert(out >= 0 && c->spec.agg == EIN_AGG_NONE);
    } else
        out = co_lw_new_buf(L, dev, L->xdt[v], &obox);
    if (out < 0)
        return out;
    int32_t srcs[PL_MAX_INPUTS];
    int64_t offsets[PL_MAX_INPUTS];
    int ns = 0;
    ein_instr ins = {.kind = EIN_I_KERNEL, .srcs = srcs, .dst = out, .kernel = nd->kernel};
    if (lse)
        ins.kernel.kind = EIN_KERNEL_ATTENTION_PARTIAL;
    if (c->spec.agg == EIN_AGG_LSE && nd->kernel.kind == EIN_KERNEL_DECODE_ATTENTION)
        ins.kernel.kind = EIN_KERNEL_DECODE_ATTENTION_PARTIAL;
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
    co_lw_set_op(&ins, nd->name, NULL);
    if ((rc = co_lw_emit(L, dev, &ins)) < 0)
        return rc;
    L->partial[v * L->ndev + dev] = out;
    return 0;
}

/* A saved node's output blocks: exchanged to their storing devices and
 * stored. */
static int store_saved(lw *L, int v, node_scratch *ns)
{
    assert(L->next_ex < L->ph->nex);
    const co_exchange *e = next_exchange(L, v, -1, 0, L->ph->ex[L->next_ex].nneed);
    int rc;
    if ((rc = co_lw_exchange(L, e, ns->nbuf)) < 0)
        return rc;
    for (int b = 0; b < e->nneed; b++)
        if ((rc = store_block(L, v, ns->nbuf[b], e->need_site[b])) < 0)
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
        .tup = malloc(sizeof(int) * (size_t)p),
        .nbuf = malloc(sizeof(int) * (size_t)p),
    };
    if (!ns.inbuf || !ns.need || !ns.tup || !ns.nbuf) {
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
    free(ns.tup);
    free(ns.nbuf);
    return rc < 0 ? rc : 0;
}

int co_lower(const pl_graph *g, const pl_plan *plan, const co_physical *ph,
             const co_lower_opts *opts, ein_program ***progs_out, co_lower_stats *stats,
             ein_error *err)
{
    co_lower_stats st_local = {0};
    lw L = {.g = g, .plan = plan, .ph = ph, .o = opts, .ndev = ph->ndev, .err = err,
            .st = stats ? stats : &st_local};
    memset(L.st, 0, sizeof *L.st);
    int rc = 0;
    if (plan->p != ph->ndev || ph->nnodes != g->nnodes)
        return ein_fail(err, EIN_EINVAL, "plan for %d devices lowered onto %d", plan->p, ph->ndev);
    EIN_INVARIANT(co_physical_ok(ph, g, plan));
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
        L.xdt[v] = co_partial_dtype(g, plan, v);
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
    /* Every exchange of the physical plan lowered, in its order. */
    assert(rc < 0 || L.next_ex == ph->nex);
    L.st->nexchanges = ph->st.nexchanges;
    L.st->nlocal = ph->st.nlocal;
    L.st->nsearched = ph->st.nsearched;
    L.st->nreused = ph->st.nreused;
    L.st->nchunked = ph->st.nchunked;
    L.st->naive_s = ph->st.naive_s;
    L.st->synth_s = ph->st.synth_s;
    L.st->search_steps = ph->st.search_steps;
    L.st->search_ms = ph->st.search_ms;
    L.st->ncapped = ph->st.ncapped;
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
