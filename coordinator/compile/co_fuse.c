/* coordinator/compile/co_fuse.c — see co_fuse.h. */
#include "coordinator/compile/co_fuse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/ein_knob.h"

/* One device's Program while it is fused. */
typedef struct fz {
    ein_program *p;
    int *writer;   /* per buffer: the instruction writing it; -1 none, -2 several */
    int *nread;    /* per buffer: sources naming it */
    char *alone;   /* per buffer: no other buffer shares a byte with it */
    char *moved;   /* per buffer: placed on a fused output's bytes here */
    int *into;     /* per instruction: -1, or the one it was fused into */
    co_fuse_stats *st;
    ein_error *err;
} fz;

typedef struct span {
    uint64_t lo, hi;
    int id;
} span;

static int by_lo(const void *a, const void *b)
{
    const span *x = a, *y = b;
    if (x->lo != y->lo)
        return x->lo < y->lo ? -1 : 1;
    return x->id - y->id;
}

/* alone[b]: no earlier-starting buffer reaches into b and the next one in
 * offset order starts at or after b's end (every overlap shows in one of
 * the two). */
static int find_alone(fz *f)
{
    int nb = f->p->nbuffers;
    span *s = malloc(sizeof *s * ((size_t)nb + 1));
    if (!s)
        return ein_fail(f->err, EIN_ENOMEM, "out of memory while fusing kernels");
    for (int b = 0; b < nb; b++)
        s[b] = (span){f->p->buffers[b].offset, f->p->buffers[b].offset + f->p->buffers[b].bytes, b};
    qsort(s, (size_t)nb, sizeof *s, by_lo);
    uint64_t reach = 0;
    for (int k = 0; k < nb; k++) {
        int hit = (k > 0 && reach > s[k].lo) || (k + 1 < nb && s[k + 1].lo < s[k].hi);
        f->alone[s[k].id] = !hit;
        if (s[k].hi > reach)
            reach = s[k].hi;
    }
    free(s);
    return 0;
}

static int has_dep(const ein_instr *ins, int a)
{
    for (int j = 0; j < ins->ndeps; j++)
        if (ins->deps[j] == a)
            return 1;
    return 0;
}

/* Every dependency on `from` becomes one on `to`. */
static void redirect(fz *f, int from, int to)
{
    for (int i = from + 1; i < f->p->ninstrs; i++) {
        ein_instr *ins = &f->p->instrs[i];
        for (int j = 0; j < ins->ndeps; j++)
            if (ins->deps[j] == from)
                ins->deps[j] = to;
    }
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* The union of a's and b's dependencies without a and b, ascending. */
static int *union_deps(const ein_instr *ia, int a, const ein_instr *ib, int b, int *n)
{
    int *d = malloc(sizeof(int) * ((size_t)ia->ndeps + (size_t)ib->ndeps + 1)), k = 0;
    if (!d)
        return NULL;
    for (int j = 0; j < ia->ndeps; j++)
        d[k++] = ia->deps[j];
    for (int j = 0; j < ib->ndeps; j++)
        d[k++] = ib->deps[j];
    qsort(d, (size_t)k, sizeof *d, cmp_int);
    int m = 0;
    for (int j = 0; j < k; j++)
        if (d[j] != a && d[j] != b && (m == 0 || d[m - 1] != d[j]))
            d[m++] = d[j];
    *n = m;
    return d;
}

/* Where the pair (a, b), a < b, may become one instruction: a when b's
 * other dependencies all come before a; b when nothing between them
 * depends on a; -1 when neither. */
static int place_of(const fz *f, int a, int b)
{
    const ein_instr *ib = &f->p->instrs[b];
    int early = 1;
    for (int j = 0; j < ib->ndeps && early; j++)
        early = ib->deps[j] == a || ib->deps[j] < a;
    if (early)
        return a;
    for (int i = a + 1; i < b; i++)
        if (f->into[i] < 0 && has_dep(&f->p->instrs[i], a))
            return -1;
    return b;
}

/* Make instruction k (one of a, b) the fused one: `kernel`, `srcs`, `dst`,
 * the union of both dependencies, the name "a's op+b's op"; the other is
 * dropped and whatever depended on it depends on k. */
static int fuse_pair(fz *f, int a, int b, int k, const ein_kernel *kernel, const int *srcs,
                     int nsrcs, int dst)
{
    ein_instr *ia = &f->p->instrs[a], *ib = &f->p->instrs[b], *ik = &f->p->instrs[k];
    int nd, *deps = union_deps(ia, a, ib, b, &nd);
    int *s = malloc(sizeof(int) * (size_t)nsrcs);
    if (!deps || !s) {
        free(deps);
        free(s);
        return ein_fail(f->err, EIN_ENOMEM, "out of memory while fusing kernels");
    }
    memcpy(s, srcs, sizeof(int) * (size_t)nsrcs);
    char op[EIN_NAME_MAX];
    if ((size_t)snprintf(op, sizeof op, "%s+%s", ia->op, ib->op) >= sizeof op)
        snprintf(op, sizeof op, "%s", ib->op);
    free(ik->deps);
    free(ik->srcs);
    free(ik->kernel.list);
    ik->deps = deps;
    ik->ndeps = nd;
    ik->srcs = s;
    ik->nsrcs = nsrcs;
    ik->dst = dst;
    ik->kernel = *kernel;
    ik->kernel.list = NULL;
    ik->kernel.nlist = 0;
    memcpy(ik->op, op, sizeof op);
    int other = k == a ? b : a;
    f->into[other] = k;
    redirect(f, other, k);
    return 0;
}

static int is_kernel(const ein_instr *ins, ein_kernel_kind kind)
{
    return ins->kind == EIN_I_KERNEL && ins->kernel.kind == kind;
}

/* Instruction b, a multiply, with its silu producer. 1 fused, 0 not, < 0 error. */
static int try_swiglu(fz *f, int b)
{
    ein_program *p = f->p;
    const ein_instr *ib = &p->instrs[b];
    if (!is_kernel(ib, EIN_KERNEL_BINARY) || ib->kernel.binary != EIN_BIN_MUL || ib->nsrcs != 2)
        return 0;
    for (int side = 0; side < 2; side++) {
        int t = ib->srcs[side], u = ib->srcs[1 - side], y = ib->dst, a = f->writer[t];
        if (a < 0 || a >= b || f->into[a] >= 0 || t == u || f->nread[t] != 1 || !f->alone[t])
            continue;
        const ein_instr *ia = &p->instrs[a];
        if (!is_kernel(ia, EIN_KERNEL_UNARY) || ia->kernel.unary != EIN_UN_SILU ||
            ia->nsrcs != 1 || ia->entries != ib->entries)
            continue;
        int g = ia->srcs[0];
        const ein_pbuffer *bt = &p->buffers[t], *by = &p->buffers[y];
        if (!ein_box_equal(&bt->box, &by->box) || !ein_box_equal(&p->buffers[u].box, &by->box) ||
            !ein_box_equal(&p->buffers[g].box, &by->box) || bt->dtype != by->dtype ||
            f->writer[g] == -2 || f->writer[u] == -2)
            continue;
        int k = place_of(f, a, b);
        if (k < 0) {
            f->st->nskipped++;
            return 0;
        }
        ein_kernel kn = {.kind = EIN_KERNEL_SWIGLU};
        int srcs[2] = {g, u}, rc;
        if ((rc = fuse_pair(f, a, b, k, &kn, srcs, 2, y)) < 0)
            return rc;
        /* t is read by nothing now: its bytes are y's */
        p->buffers[t].offset = by->offset;
        f->writer[t] = -1;
        f->nread[t] = 0;
        f->writer[y] = k;
        f->st->nswiglu++;
        return 1;
    }
    return 0;
}

/* Instruction b, an rmsnorm, with its add producer. */
static int try_add_rmsnorm(fz *f, int b)
{
    ein_program *p = f->p;
    const ein_instr *ib = &p->instrs[b];
    if (!is_kernel(ib, EIN_KERNEL_RMSNORM) || ib->nsrcs != 2)
        return 0;
    int h = ib->srcs[0], w = ib->srcs[1], n = ib->dst, a = f->writer[h];
    if (a < 0 || a >= b || f->into[a] >= 0 || !f->alone[h] || !f->alone[n] ||
        f->writer[n] != b || h == w)
        return 0;
    const ein_instr *ia = &p->instrs[a];
    if (!is_kernel(ia, EIN_KERNEL_BINARY) || ia->kernel.binary != EIN_BIN_ADD ||
        ia->nsrcs != 2 || ia->entries != ib->entries)
        return 0;
    int x0 = ia->srcs[0], x1 = ia->srcs[1];
    const ein_pbuffer *bh = &p->buffers[h], *bn = &p->buffers[n];
    if (x0 == h || x1 == h || !ein_box_equal(&p->buffers[x0].box, &bh->box) ||
        !ein_box_equal(&p->buffers[x1].box, &bh->box) || bh->dtype != bn->dtype ||
        bh->box.rank < 1 || bh->box.rank >= EIN_MAX_RANK || f->writer[x0] == -2 ||
        f->writer[x1] == -2 || f->writer[w] == -2)
        return 0;
    int k = place_of(f, a, b);
    if (k < 0) {
        f->st->nskipped++;
        return 0;
    }
    ein_box pb = {.rank = bh->box.rank + 1};
    pb.lo[0] = 0;
    pb.hi[0] = 2;
    for (int d = 0; d < bh->box.rank; d++) {
        pb.lo[d + 1] = bh->box.lo[d];
        pb.hi[d + 1] = bh->box.hi[d];
    }
    int pack = ein_program_add_buffer(p, bh->dtype, &pb, f->err);
    if (pack < 0)
        return pack;
    bh = &p->buffers[h];   /* the array may have moved */
    bn = &p->buffers[n];
    ein_kernel kn = {.kind = EIN_KERNEL_ADD_RMSNORM, .eps = ib->kernel.eps};
    int srcs[3] = {x0, x1, w}, rc;
    if ((rc = fuse_pair(f, a, b, k, &kn, srcs, 3, pack)) < 0)
        return rc;
    p->buffers[h].offset = p->buffers[pack].offset;
    p->buffers[n].offset = p->buffers[pack].offset + p->buffers[h].bytes;
    f->moved[h] = f->moved[n] = 1;
    f->writer[h] = f->writer[n] = -1;
    f->writer[pack] = k;
    f->nread[pack] = 0;
    f->alone[pack] = 0;
    f->moved[pack] = 0;
    f->st->nadd_rmsnorm++;
    return 1;
}

/* Drop the instructions fused into others, renumbering the rest. */
static int compact(fz *f)
{
    ein_program *p = f->p;
    int n = p->ninstrs, *id = malloc(sizeof(int) * ((size_t)n + 1)), m = 0;
    if (!id)
        return ein_fail(f->err, EIN_ENOMEM, "out of memory while fusing kernels");
    for (int i = 0; i < n; i++)
        id[i] = f->into[i] < 0 ? m++ : -1;
    for (int i = 0; i < n; i++) {
        ein_instr *ins = &p->instrs[i];
        if (f->into[i] >= 0) {
            free(ins->deps);
            free(ins->srcs);
            free(ins->path);
            free(ins->kernel.list);
            continue;
        }
        /* never a dropped one (redirected); a dependency on both halves of
         * a pair became two on the fused one: keep the first */
        int nd = 0;
        for (int j = 0; j < ins->ndeps; j++) {
            int d = id[ins->deps[j]], dup = 0;
            for (int q = 0; q < nd && !dup; q++)
                dup = ins->deps[q] == d;
            if (!dup)
                ins->deps[nd++] = d;
        }
        ins->ndeps = nd;
        p->instrs[id[i]] = *ins;
    }
    p->ninstrs = m;
    free(id);
    return 0;
}

static int fuse_device(fz *f)
{
    ein_program *p = f->p;
    int nb = p->nbuffers, n = p->ninstrs, extra = 0, rc = 0;
    for (int i = 0; i < n; i++)
        extra += is_kernel(&p->instrs[i], EIN_KERNEL_RMSNORM);
    size_t cap = (size_t)nb + (size_t)extra + 1;
    f->writer = malloc(sizeof(int) * cap);
    f->nread = calloc(cap, sizeof(int));
    f->alone = calloc(cap, 1);
    f->moved = calloc(cap, 1);
    f->into = malloc(sizeof(int) * ((size_t)n + 1));
    if (!f->writer || !f->nread || !f->alone || !f->moved || !f->into)
        return ein_fail(f->err, EIN_ENOMEM, "out of memory while fusing kernels");
    for (int b = 0; b < nb; b++)
        f->writer[b] = -1;
    for (int i = 0; i < n; i++) {
        const ein_instr *ins = &p->instrs[i];
        f->into[i] = -1;
        for (int s = 0; s < ins->nsrcs; s++)
            f->nread[ins->srcs[s]]++;
        if (ins->dst >= 0)
            f->writer[ins->dst] = f->writer[ins->dst] == -1 ? i : -2;
    }
    if ((rc = find_alone(f)) < 0)
        return rc;
    int fused = 0;
    for (int b = 0; b < n; b++) {
        if (f->into[b] >= 0)
            continue;
        if ((rc = try_swiglu(f, b)) < 0 || (rc == 0 && (rc = try_add_rmsnorm(f, b)) < 0))
            return rc;
        fused += rc;
    }
    return fused ? compact(f) : 0;
}

static void fz_free(fz *f)
{
    free(f->writer);
    free(f->nread);
    free(f->alone);
    free(f->into);
}

int co_fuse(ein_program **progs, int ndev, co_fuse_stats *st, ein_error *err)
{
    co_fuse_stats local;
    if (!st)
        st = &local;
    memset(st, 0, sizeof *st);
    char **moved = calloc((size_t)ndev + 1, sizeof *moved);
    if (!moved)
        return ein_fail(err, EIN_ENOMEM, "out of memory while fusing kernels");
    int rc = 0;
    for (int d = 0; d < ndev && rc == 0; d++) {
        fz f = {.p = progs[d], .st = st, .err = err};
        rc = fuse_device(&f);
        moved[d] = f.moved;
        fz_free(&f);
    }
    /* a peer's COPY of a buffer now on a fused output's bytes reads it there */
    for (int e = 0; e < ndev && rc == 0; e++)
        for (int i = 0; i < progs[e]->ninstrs; i++) {
            ein_instr *c = &progs[e]->instrs[i];
            if (c->kind != EIN_I_COPY || c->peer < 0 || c->peer >= ndev || !moved[c->peer] ||
                c->peer_buf < 0 || c->peer_buf >= progs[c->peer]->nbuffers ||
                !moved[c->peer][c->peer_buf])
                continue;
            c->peer_offset = progs[c->peer]->buffers[c->peer_buf].offset;
        }
    for (int d = 0; d < ndev; d++)
        free(moved[d]);
    free(moved);
    return rc;
}

int co_fuse_knob(int *on, ein_error *err)
{
    const char *v = ein_knob_get(EIN_KNOB_FUSE);
    *on = 1;
    if (!v || !*v || !strcmp(v, "1"))
        return 0;
    if (!strcmp(v, "0")) {
        *on = 0;
        return 0;
    }
    return ein_fail(err, EIN_EINVAL, "EIN_FUSE='%.32s': expected 0 (no kernel fusion) or 1",
                    v);
}
