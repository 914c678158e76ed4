/* worker/wk_stretch.c — find the local stretches of a program (see the
 * header for the two conditions and why they are enough). */
#include "worker/wk_stretch.h"

#include <stdlib.h>

static int local_work(const ein_instr *ins)
{
    return ins->kind == EIN_I_KERNEL || ins->kind == EIN_I_AGG || ins->kind == EIN_I_SLICE ||
           ins->kind == EIN_I_CONCAT;
}

typedef struct finder {
    const ein_program *p;
    int *head;
    int *anc;    /* anc[d] == stamp: d is an ancestor of the current head */
    int *stack;
    int stamp;   /* head + 1 */
    int walked;  /* ancestors of the current head marked */
} finder;

static void mark_ancestors(finder *f, int from)
{
    int top = 0, seen = 0;
    f->stack[top++] = from;
    while (top > 0 && seen < WK_STRETCH_WALK) {
        const ein_instr *ins = &f->p->instrs[f->stack[--top]];
        for (int k = 0; k < ins->ndeps && seen < WK_STRETCH_WALK; k++) {
            int d = ins->deps[k];
            if (f->anc[d] == f->stamp)
                continue;
            f->anc[d] = f->stamp;
            seen++;
            f->stack[top++] = d; /* one push per fresh mark: <= WALK + 1 */
        }
    }
    f->walked = 1;
}

static int has_dep(const ein_instr *ins, int d)
{
    for (int t = 0; t < ins->ndeps; t++)
        if (ins->deps[t] == d)
            return 1;
    return 0;
}

/* Conditions (1) and (2) of the header for k and the stretch of head i. */
static int joins(finder *f, int i, int k)
{
    const ein_instr *ins = &f->p->instrs[k], *hd = &f->p->instrs[i];
    int on_member = 0;
    for (int t = 0; t < ins->ndeps; t++) {
        int d = ins->deps[t];
        if (f->p->instrs[d].kind == EIN_I_LOAD)
            continue; /* done once and for all in the first iteration */
        if (d >= i && f->head[d] == i) {
            on_member = 1;
            continue;
        }
        if (!f->walked)
            mark_ancestors(f, i);
        if (f->anc[d] != f->stamp)
            return 0;
    }
    if (on_member)
        return 1;
    for (int t = 0; t < hd->ndeps; t++)
        if (f->p->instrs[hd->deps[t]].kind != EIN_I_LOAD && !has_dep(ins, hd->deps[t]))
            return 0;
    return 1;
}

int wk_stretch_find(const ein_program *p, int *head, int *next, ein_error *err)
{
    int n = p->ninstrs, count = 0;
    finder f = {.p = p, .head = head};
    f.anc = calloc((size_t)n + 1, sizeof *f.anc);
    f.stack = malloc(sizeof *f.stack * ((size_t)WK_STRETCH_WALK + 1));
    if (!f.anc || !f.stack) {
        free(f.anc);
        free(f.stack);
        return ein_fail(err, EIN_ENOMEM, "out of memory finding local stretches");
    }
    for (int k = 0; k < n; k++) {
        head[k] = local_work(&p->instrs[k]) ? -2 : WK_STRETCH_NONE; /* -2: not placed yet */
        next[k] = -1;
    }
    for (int i = 0; i < n; i++) {
        if (head[i] != -2)
            continue;
        head[i] = i;
        count++;
        f.stamp = i + 1; /* distinct per head: marks never need clearing */
        f.walked = 0;
        int last = i;
        for (int k = i + 1; k < n && k - i <= WK_STRETCH_SPAN; k++) {
            if (p->instrs[k].kind == EIN_I_COPY || p->instrs[k].kind == EIN_I_WAIT)
                break; /* a wait on a peer ends the stretch */
            if (head[k] != -2 || p->instrs[k].entries != p->instrs[i].entries ||
                !joins(&f, i, k))
                continue; /* (a stretch runs for one set of entry points) */
            head[k] = i;
            next[last] = k;
            last = k;
        }
    }
    free(f.anc);
    free(f.stack);
    return count;
}
