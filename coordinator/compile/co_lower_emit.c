/* coordinator/compile/co_lower_emit.c — lowering's emission state: growing
 * its arrays, new buffers, the writers of each buffer and appending an
 * instruction with its dependencies (co_lower_int.h). Below co_lower.c and
 * co_lower_exchange.c, which both emit through it. */
#include "coordinator/compile/co_lower_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/ein_vec.h"

/* Room for entry n of the array *a (of *cap entries of `size` bytes). */
int co_lw_grow(lw *L, void *a, int *cap, int n, size_t size)
{
    if (ein_vec_reserve(a, cap, (int64_t)n + 1, size) < 0)
        return ein_fail(L->err, EIN_ENOMEM, "out of memory while lowering");
    return 0;
}

/* Room in producer[dev] for buffer `id` (no writer yet). */
int co_lw_track_buf(lw *L, int dev, int id)
{
    int rc = co_lw_grow(L, &L->producer[dev], &L->cap_producer[dev], id, sizeof(int));
    if (rc < 0)
        return rc;
    L->producer[dev][id] = -1;
    return id;
}

int co_lw_new_buf(lw *L, int dev, ein_dtype dt, const ein_box *box)
{
    int id = ein_program_add_buffer(L->progs[dev], dt, box, L->err);
    if (id < 0)
        return id;
    return co_lw_track_buf(L, dev, id);
}

/* Instruction `id` writes (part of) buffer `buf` of `dev` too: readers of
 * the whole buffer depend on it as well as on its other writers. */
int co_lw_add_writer(lw *L, int dev, int buf, int id)
{
    int *p = &L->producer[dev][buf];
    if (*p == -1 || *p == id) {
        *p = id;
        return 0;
    }
    if (*p >= 0) {
        if (co_lw_grow(L, &L->ws, &L->cap_ws, L->nws, sizeof *L->ws) < 0)
            return L->err->code;
        L->ws[L->nws] = (wset){0};
        int first = *p;
        *p = -2 - L->nws++;
        if (co_lw_add_writer(L, dev, buf, first) < 0)
            return L->err->code;
    }
    wset *w = &L->ws[-*p - 2];
    if (co_lw_grow(L, &w->id, &w->cap, w->n, sizeof *w->id) < 0)
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
int co_lw_emit(lw *L, int dev, ein_instr *ins)
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

void co_lw_set_op(ein_instr *ins, const char *a, const char *b)
{
    if (b)
        snprintf(ins->op, sizeof ins->op, "%.30s<-%.30s", a, b);
    else
        snprintf(ins->op, sizeof ins->op, "%s", a);
}
