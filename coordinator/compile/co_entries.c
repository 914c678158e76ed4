/* coordinator/compile/co_entries.c — entry points of one compiled program
 * (co_entries.h), and the public calls that name them
 * (ein_compiled_add_entry; ein_session_run_entry lives in ein_session.c). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/io/ein_wire.h"
#include "coordinator/compile/co_entries.h"
#include "coordinator/compile/ein_compile_int.h"

int co_entries_shared_state(const pl_graph *g)
{
    for (int v = 0; v < g->nnodes; v++) {
        const pl_node *s = pl_graph_node(g, v);
        if (s->kind != PL_INPUT || !s->state)
            continue;
        int writers = 0;
        for (int u = v + 1; u < g->nnodes; u++) {
            const pl_node *w = pl_graph_node(g, u);
            writers += w->kind == PL_CACHE_WRITE && w->inputs[0] == v;
        }
        if (writers > 1)
            return v;
    }
    return -1;
}

typedef struct mark {
    ein_program *const *progs;
    int ndev;
    uint8_t **need;     /* [d][i]: needed by this entry */
    int *stack;         /* pairs (d, i) */
    size_t nstack, cap;
} mark;

static int push(mark *m, int d, int i)
{
    if (m->need[d][i])
        return 0;
    m->need[d][i] = 1;
    if (m->nstack + 2 > m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 256;
        int *s = realloc(m->stack, cap * sizeof *s);
        if (!s)
            return EIN_ENOMEM;
        m->stack = s;
        m->cap = cap;
    }
    m->stack[m->nstack++] = d;
    m->stack[m->nstack++] = i;
    return 0;
}

/* The closure of everything pushed: dependencies, and for a COPY or WAIT
 * the peer's NOTIFY of that buffer to this device. */
static int close_over(mark *m)
{
    while (m->nstack) {
        int i = m->stack[--m->nstack], d = m->stack[--m->nstack];
        const ein_instr *ins = &m->progs[d]->instrs[i];
        /* A cache_write writes its state's buffer in place, so the lowering
         * orders it after the other cache_writes of that state and their
         * readers: deps no run of one entry needs. It needs only what
         * produces its new rows and positions, and the state's LOAD. */
        int cw = ins->kind == EIN_I_KERNEL && ins->kernel.kind == EIN_KERNEL_CACHE_WRITE &&
                 ins->nsrcs == 3;
        for (int k = 0; k < ins->ndeps; k++) {
            const ein_instr *dp = &m->progs[d]->instrs[ins->deps[k]];
            if (cw && dp->kind != EIN_I_LOAD && (dp->dst < 0 || (dp->dst != ins->srcs[1] &&
                                                                 dp->dst != ins->srcs[2])))
                continue;
            if (push(m, d, ins->deps[k]) < 0)
                return EIN_ENOMEM;
        }
        if (ins->kind != EIN_I_COPY && ins->kind != EIN_I_WAIT)
            continue;
        int p = ins->peer;
        if (p < 0 || p >= m->ndev)
            continue;
        const ein_program *pp = m->progs[p];
        for (int j = 0; j < pp->ninstrs; j++) {
            const ein_instr *nt = &pp->instrs[j];
            if (nt->kind == EIN_I_NOTIFY && nt->peer == d && nt->nsrcs == 1 &&
                nt->srcs[0] == ins->peer_buf && push(m, p, j) < 0)
                return EIN_ENOMEM;
        }
    }
    return 0;
}

int co_entries_mark(ein_program *const *progs, int ndev, const pl_graph *g, int e,
                    const char *const *outputs, int n, ein_error *err)
{
    if (e < 1 || e > EIN_ENTRY_MAX)
        return ein_fail(err, EIN_EINVAL, "entry %d: at most %d entry points", e, EIN_ENTRY_MAX);
    mark m = {.progs = progs, .ndev = ndev};
    int rc = 0;
    if (!(m.need = calloc((size_t)ndev, sizeof *m.need)))
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    for (int d = 0; d < ndev; d++)
        if (!(m.need[d] = calloc((size_t)progs[d]->ninstrs + 1, 1))) {
            rc = ein_fail(err, EIN_ENOMEM, "out of memory");
            goto out;
        }
    for (int k = 0; k < n; k++) {
        int v = outputs[k] ? pl_graph_find(g, outputs[k]) : -1;
        if (v < 0 || !pl_graph_node(g, v)->saved) {
            rc = ein_fail(err, EIN_EINVAL, "entry point: %s '%s' is not saved by the program",
                          v < 0 ? "there is no tensor named" : "tensor",
                          outputs[k] ? outputs[k] : "(null)");
            goto out;
        }
        const char *name = pl_graph_node(g, v)->name;
        for (int d = 0; d < ndev; d++)
            for (int i = 0; i < progs[d]->ninstrs; i++) {
                const ein_instr *ins = &progs[d]->instrs[i];
                if (ins->kind == EIN_I_STORE && !strcmp(ins->op, name) && push(&m, d, i) < 0) {
                    rc = ein_fail(err, EIN_ENOMEM, "out of memory");
                    goto out;
                }
            }
    }
    if (close_over(&m) < 0) {
        rc = ein_fail(err, EIN_ENOMEM, "out of memory");
        goto out;
    }
    /* One cache_write per state in one run: two would write it unordered. */
    for (int v = 0; v < g->nnodes; v++) {
        const pl_node *s = pl_graph_node(g, v);
        if (s->kind != PL_INPUT || !s->state)
            continue;
        int first = -1;
        for (int u = v + 1; u < g->nnodes; u++) {
            const pl_node *w = pl_graph_node(g, u);
            if (w->kind != PL_CACHE_WRITE || w->inputs[0] != v)
                continue;
            int used = 0;
            for (int d = 0; d < ndev && !used; d++)
                for (int i = 0; i < progs[d]->ninstrs && !used; i++)
                    used = m.need[d][i] && progs[d]->instrs[i].kind == EIN_I_KERNEL &&
                           !strcmp(progs[d]->instrs[i].op, w->name);
            if (!used)
                continue;
            if (first >= 0) {
                rc = ein_fail(err, EIN_EINVAL, "entry point: its outputs need both %s and %s, "
                              "two cache_writes of state %s (one run may write a state once)",
                              pl_graph_node(g, first)->name, w->name, s->name);
                goto out;
            }
            first = u;
        }
    }
    for (int d = 0; d < ndev; d++)
        for (int i = 0; i < progs[d]->ninstrs; i++)
            if (m.need[d][i] && progs[d]->instrs[i].kind != EIN_I_LOAD)
                progs[d]->instrs[i].entries |= 1u << (e - 1);
out:
    for (int d = 0; d < ndev; d++)
        free(m.need[d]);
    free(m.need);
    free(m.stack);
    return rc;
}

/* The peer's NOTIFY that COPY or WAIT `ins` on device d waits for, or
 * NULL (the rule close_over follows). */
static ein_instr *notify_of(ein_program *const *progs, int ndev, int d, const ein_instr *ins)
{
    int p = ins->peer;
    if ((ins->kind != EIN_I_COPY && ins->kind != EIN_I_WAIT) || p < 0 || p >= ndev)
        return NULL;
    for (int j = 0; j < progs[p]->ninstrs; j++) {
        ein_instr *nt = &progs[p]->instrs[j];
        if (nt->kind == EIN_I_NOTIFY && nt->peer == d && nt->nsrcs == 1 &&
            nt->srcs[0] == ins->peer_buf)
            return nt;
    }
    return NULL;
}

void co_entries_finish(ein_program *const *progs, int ndev)
{
    /* An instruction no entry needs takes its dependencies' entries; a
     * COPY or WAIT no entry needs (a replicated operator's copy that
     * nothing on its device reads, planner/pl_spec.h) takes its peer
     * NOTIFY's, which runs only in those entries: it must not wait in
     * the others for a NOTIFY that never comes. Until nothing changes. */
    uint8_t **fixed = calloc((size_t)ndev, sizeof *fixed);
    for (int d = 0; fixed && d < ndev; d++)
        if (!(fixed[d] = calloc((size_t)progs[d]->ninstrs + 1, 1))) {
            for (int k = 0; k < d; k++)
                free(fixed[k]);
            free(fixed);
            fixed = NULL;
        }
    for (int d = 0; fixed && d < ndev; d++)
        for (int i = 0; i < progs[d]->ninstrs; i++)
            fixed[d][i] = progs[d]->instrs[i].entries != 0 ||
                          progs[d]->instrs[i].kind == EIN_I_LOAD;
    for (int changed = 1; changed;) {
        changed = 0;
        for (int d = 0; d < ndev; d++)
            for (int i = 0; i < progs[d]->ninstrs; i++) {
                ein_instr *ins = &progs[d]->instrs[i];
                if (fixed ? fixed[d][i] : ins->entries || ins->kind == EIN_I_LOAD)
                    continue;
                uint32_t en = 0;
                for (int k = 0; k < ins->ndeps; k++)
                    en |= progs[d]->instrs[ins->deps[k]].entries;
                const ein_instr *nt = notify_of(progs, ndev, d, ins);
                if (nt)
                    en |= nt->entries;
                changed |= (en | ins->entries) != ins->entries;
                ins->entries |= en;
            }
        if (!fixed)
            break; /* out of memory: the one pass of before */
    }
    for (int d = 0; fixed && d < ndev; d++)
        free(fixed[d]);
    free(fixed);
}

/* ---- the public call -------------------------------------------------- */

/* Entry `e`'s saved outputs, as names (owned by c->g). */
static int entry_outputs(const ein_compiled *c, int e, const char **names, int max)
{
    int n = 0;
    for (int k = 0; k < c->entries[e].nout && n < max; k++)
        names[n++] = pl_graph_node(c->g, c->entries[e].out[k])->name;
    return n;
}

int ein_compiled_add_entry(ein_compiled *c, const char *name, const char *const *outputs,
                           int noutputs, ein_error *err)
{
    if (!c || !name || !*name || noutputs < 1 || !outputs)
        return ein_fail(err, EIN_EINVAL, "add_entry: NULL program, no name or no outputs");
    if (!c->progs)
        return ein_fail(err, EIN_EINVAL, "add_entry: this program was compiled with plan_only");
    if (strlen(name) >= sizeof c->entries[0].name)
        return ein_fail(err, EIN_EINVAL, "add_entry: name '%.40s...' longer than %zu bytes", name,
                        sizeof c->entries[0].name - 1);
    if (c->nentries >= EIN_ENTRY_MAX)
        return ein_fail(err, EIN_EINVAL, "add_entry: at most %d entry points", EIN_ENTRY_MAX);
    for (int e = 0; e < c->nentries; e++)
        if (!strcmp(c->entries[e].name, name))
            return ein_fail(err, EIN_EINVAL, "add_entry: entry point '%s' already exists", name);
    int reused = 0;   /* the memory planner ran (co_memplan sets unplanned_bytes) */
    for (int d = 0; d < c->ndev; d++)
        reused |= c->progs[d]->unplanned_bytes != 0;
    if (reused)
        return ein_fail(err, EIN_EINVAL, "add_entry: compile with memory reuse off (no_reuse) "
                        "for entry points");
    int *out = calloc((size_t)noutputs, sizeof *out);
    if (!out)
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    for (int k = 0; k < noutputs; k++) {
        int v = outputs[k] ? pl_graph_find(c->g, outputs[k]) : -1;
        if (v < 0 || !pl_graph_node(c->g, v)->saved) {
            free(out);
            return ein_fail(err, EIN_EINVAL, "add_entry %s: %s '%s' is not saved by the program",
                            name, v < 0 ? "there is no tensor named" : "tensor",
                            outputs[k] ? outputs[k] : "(null)");
        }
        out[k] = v;
    }
    /* Every entry marked again from scratch with the new one: finish's
     * propagation depends on all of them. */
    int ndev = c->ndev, rc = 0;
    uint32_t **saved = calloc((size_t)ndev, sizeof *saved); /* the marks before */
    if (!saved) {
        free(out);
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    }
    for (int d = 0; d < ndev; d++) {
        if (!(saved[d] = calloc((size_t)c->progs[d]->ninstrs + 1, sizeof **saved))) {
            rc = ein_fail(err, EIN_ENOMEM, "out of memory");
            goto done;
        }
        for (int i = 0; i < c->progs[d]->ninstrs; i++) {
            saved[d][i] = c->progs[d]->instrs[i].entries;
            c->progs[d]->instrs[i].entries = 0;
        }
    }
    const char **names = calloc((size_t)EIN_ENTRY_MAX * 64 + (size_t)noutputs, sizeof *names);
    if (!names) {
        rc = ein_fail(err, EIN_ENOMEM, "out of memory");
        goto restore;
    }
    for (int e = 0; e < c->nentries && rc == 0; e++) {
        int n = entry_outputs(c, e, names, EIN_ENTRY_MAX * 64);
        rc = co_entries_mark(c->progs, ndev, c->g, e + 1, names, n, err);
    }
    if (rc == 0)
        rc = co_entries_mark(c->progs, ndev, c->g, c->nentries + 1, outputs, noutputs, err);
    free(names);
    if (rc == 0) {
        co_entries_finish(c->progs, ndev);
        snprintf(c->entries[c->nentries].name, sizeof c->entries[0].name, "%s", name);
        c->entries[c->nentries].out = out;
        c->entries[c->nentries].nout = noutputs;
        c->nentries++;
        out = NULL;
        goto done;
    }
restore:
    for (int d = 0; d < ndev && saved[d]; d++)
        for (int i = 0; i < c->progs[d]->ninstrs; i++)
            c->progs[d]->instrs[i].entries = saved[d][i];
done:
    for (int d = 0; d < ndev; d++)
        free(saved[d]);
    free(saved);
    free(out);
    return rc;
}

int ein_compiled_entry(const ein_compiled *c, const char *name)
{
    for (int e = 0; c && name && e < c->nentries; e++)
        if (!strcmp(c->entries[e].name, name))
            return e + 1;
    return EIN_EINVAL;
}
