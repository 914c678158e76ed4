/* common/ir/ein_program.c — see ein_program.h: the names of kinds and ops,
 * and building a Program (new, add_buffer, add_instr, free). Validation is
 * in ein_program_check.c, the wire encoding in ein_program_wire.c. */
#include "common/ir/ein_program.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ir/ein_program_int.h"
#include "common/base/ein_vec.h"

static const char *const kind_names[] = {
    "load", "store", "kernel", "slice", "concat", "agg", "copy", "notify", "wait",
};
/* Generated from common/ir/ein_ops.def, sized by their initialisers and
 * checked against the enums. */
static const char *const unary_names[] = {
#define EIN_UNARY(kind, name, nargs, usage, formula) [EIN_UN_##kind] = name,
#include "common/ir/ein_ops.def"
};
static const int unary_nargs[] = {
#define EIN_UNARY(kind, name, nargs, usage, formula) [EIN_UN_##kind] = nargs,
#include "common/ir/ein_ops.def"
};
static const char *const binary_names[] = {
#define EIN_BINARY(kind, name, op, formula) [EIN_BIN_##kind] = name,
#include "common/ir/ein_ops.def"
};
static const char *const binary_ops[] = {
#define EIN_BINARY(kind, name, op, formula) [EIN_BIN_##kind] = op,
#include "common/ir/ein_ops.def"
};
static const char *const kernel_kind_names[] = {
#define EIN_KERNEL(kind, name, min_srcs, max_srcs, fields) [EIN_KERNEL_##kind] = name,
#include "common/ir/ein_ops.def"
};
_Static_assert(sizeof kind_names / sizeof *kind_names == EIN_I_COUNT, "an instruction kind lacks a name");
_Static_assert(sizeof unary_names / sizeof *unary_names == EIN_UN_COUNT, "a unary op lacks a name");
_Static_assert(sizeof binary_names / sizeof *binary_names == EIN_BIN_COUNT, "a binary op lacks a name");
_Static_assert(sizeof kernel_kind_names / sizeof *kernel_kind_names == EIN_KERNEL_COUNT,
               "a kernel kind lacks a name");
static const char *const agg_names[] = {"none", "sum", "max", "lse"};

/* Sources each kernel kind takes, {min, max}. */
static const struct { int lo, hi; } kernel_arity[] = {
#define EIN_KERNEL(kind, name, min_srcs, max_srcs, fields) [EIN_KERNEL_##kind] = {min_srcs, max_srcs},
#include "common/ir/ein_ops.def"
};
_Static_assert(sizeof kernel_arity / sizeof *kernel_arity == EIN_KERNEL_COUNT,
               "a kernel kind lacks an arity");

int ein_kernel_check_arity(ein_kernel_kind k, int n, ein_error *err)
{
    if ((int)k < 0 || k >= EIN_KERNEL_COUNT)
        return ein_fail(err, EIN_EINVAL, "invalid kernel kind %d", (int)k);
    int lo = kernel_arity[k].lo, hi = kernel_arity[k].hi;
    const char *name = kernel_kind_names[k];
    if (lo == hi && n != lo)
        return ein_fail(err, EIN_EINVAL, "%s kernel takes %d source%s, has %d", name, lo,
                        lo == 1 ? "" : "s", n);
    if (n < lo || n > hi)
        return ein_fail(err, EIN_EINVAL, "%s kernel takes %d to %d sources, has %d", name, lo, hi,
                        n);
    if (k == EIN_KERNEL_ATTENTION_PARTIAL && n == 2)
        return ein_fail(err, EIN_EINVAL, "%s kernel takes q alone or q, k, v, has 2 sources",
                        name);
    return 0;
}

const char *ein_instr_kind_name(ein_instr_kind k)
{
    return (int)k >= 0 && k < EIN_I_COUNT ? kind_names[k] : "?";
}

const char *ein_unary_name(ein_unary u)
{
    return (int)u >= 0 && u < EIN_UN_COUNT && unary_names[u] ? unary_names[u] : "?";
}

const char *ein_binary_name(ein_binary b)
{
    return (int)b >= 0 && b < EIN_BIN_COUNT && binary_names[b] ? binary_names[b] : "?";
}

const char *ein_binary_op_name(ein_binary b)
{
    return (int)b >= 0 && b < EIN_BIN_COUNT ? binary_ops[b] : "?";
}

int ein_unary_takes_scalar(ein_unary u)
{
    return (int)u >= 0 && u < EIN_UN_COUNT && unary_nargs[u] == 2;
}

int ein_unary_by_name(const char *name)
{
    for (int u = 0; name && u < EIN_UN_COUNT; u++)
        if (!strcmp(name, unary_names[u]))
            return u;
    return -1;
}

int ein_binary_by_op_name(const char *op)
{
    for (int b = 0; op && b < EIN_BIN_COUNT; b++)
        if (!strcmp(op, binary_ops[b]))
            return b;
    return -1;
}

const char *ein_kernel_kind_name(ein_kernel_kind k)
{
    return (int)k >= 0 && k < EIN_KERNEL_COUNT && kernel_kind_names[k] ? kernel_kind_names[k] : "?";
}

const char *ein_agg_name(ein_agg a)
{
    return (int)a >= 0 && a <= EIN_AGG_LAST ? agg_names[a] : "?";
}

ein_box ein_agg_box(ein_agg a, const ein_box *b)
{
    ein_box r = *b;
    if (a == EIN_AGG_LSE && r.rank > 0)
        r.hi[r.rank - 1] += 1;
    return r;
}

ein_box ein_agg_data_box(ein_agg a, const ein_box *b)
{
    ein_box r = *b;
    if (a == EIN_AGG_LSE && r.rank > 0)
        r.hi[r.rank - 1] -= 1;
    return r;
}

/* ---- builders --------------------------------------------------------- */

ein_program *ein_program_new(int32_t device, int32_t ndevices)
{
    ein_program *p = calloc(1, sizeof *p);
    if (p) {
        p->device = device;
        p->ndevices = ndevices;
    }
    return p;
}

static void instr_release(ein_instr *ins)
{
    free(ins->deps);
    free(ins->srcs);
    free(ins->path);
    free(ins->kernel.list);
}

void ein_program_free(ein_program *p)
{
    if (!p)
        return;
    for (int32_t i = 0; i < p->ninstrs; i++)
        instr_release(&p->instrs[i]);
    free(p->instrs);
    free(p->buffers);
    free(p);
}

ein_dtype ein_load_file_dtype(ein_load_format f, ein_dtype t, int *raw)
{
    if (raw)
        *raw = f == EIN_LOAD_RAW || f == EIN_LOAD_RAW_F32_QUANT || f == EIN_LOAD_RAW_F16_QUANT ||
               f == EIN_LOAD_RAW_BF16_QUANT;
    return f == EIN_LOAD_RAW_F32_QUANT ? EIN_F32 : f == EIN_LOAD_RAW_F16_QUANT ? EIN_F16
           : f == EIN_LOAD_RAW_BF16_QUANT ? EIN_BF16 : t;
}

/* NULL if `b` is a well-formed buffer box (rank 0..8, 0 <= lo < hi, bytes
 * in range) and *bytes is set; otherwise what is wrong with it. */
const char *ein_buffer_box_bytes(const ein_box *b, ein_dtype t, uint64_t *bytes)
{
    if (b->rank < 0 || b->rank > EIN_MAX_RANK)
        return "rank out of range 0..8";
    for (int i = 0; i < b->rank; i++)
        if (b->lo[i] < 0 || b->hi[i] <= b->lo[i])
            return "bounds not 0 <= lo < hi";
    /* A block dtype counts whole blocks (ein_dtype_unit_box). */
    ein_box u;
    uint64_t n = ein_dtype_unit_box(t, b, &u);
    if (n == 0)
        return "last interval not on the dtype's block boundaries";
    for (int i = 0; i < b->rank; i++) {
        if (__builtin_mul_overflow(n, (uint64_t)(u.hi[i] - u.lo[i]), &n) || n > EIN_BUFFER_MAX_BYTES)
            return "too large";
    }
    *bytes = n;
    return NULL;
}

int ein_program_add_buffer(ein_program *p, ein_dtype dtype, const ein_box *boxp, ein_error *err)
{
    uint64_t bytes, offset;
    char b[256];
    /* A copy first: boxp may point into p's own buffers, which may move. */
    const ein_box bx = *boxp, *box = &bx;
    if (!ein_dtype_valid((int)dtype))
        return ein_fail(err, EIN_EINVAL, "add_buffer: invalid dtype %d", (int)dtype);
    const char *why = ein_buffer_box_bytes(box, dtype, &bytes);
    if (why)
        return ein_fail(err, EIN_EINVAL, "add_buffer: box %s: %s",
                        box->rank >= 0 && box->rank <= EIN_MAX_RANK ? ein_box_format(box, b, sizeof b) : "?",
                        why);
    offset = (p->segment_bytes + EIN_BUFFER_ALIGN - 1) / EIN_BUFFER_ALIGN * EIN_BUFFER_ALIGN;
    if (offset < p->segment_bytes || offset + bytes < offset)
        return ein_fail(err, EIN_EINVAL, "add_buffer: segment too large");
    if (ein_vec_reserve(&p->buffers, &p->cap_buffers, (int64_t)p->nbuffers + 1,
                        sizeof *p->buffers) < 0)
        return ein_fail(err, EIN_ENOMEM, "add_buffer: out of memory");
    ein_pbuffer *pb = &p->buffers[p->nbuffers];
    memset(pb, 0, sizeof *pb);
    pb->dtype = dtype;
    pb->box = *box;
    pb->offset = offset;
    pb->bytes = bytes;
    p->segment_bytes = offset + bytes;
    return p->nbuffers++;
}

static int32_t *dup_ids(const int32_t *ids, int32_t n, int *fail)
{
    if (n == 0)
        return NULL;
    int32_t *q = malloc((size_t)n * sizeof *q);
    if (!q)
        *fail = 1;
    else
        memcpy(q, ids, (size_t)n * sizeof *q);
    return q;
}

int ein_program_add_instr(ein_program *p, const ein_instr *ins, ein_error *err)
{
    int oom = 0;
    if (ins->ndeps < 0 || ins->nsrcs < 0 || (ins->ndeps && !ins->deps) || (ins->nsrcs && !ins->srcs))
        return ein_fail(err, EIN_EINVAL, "add_instr: bad deps/srcs arrays (%d, %d)", ins->ndeps, ins->nsrcs);
    if (ins->path && strnlen(ins->path, EIN_PATH_MAX) >= EIN_PATH_MAX)
        return ein_fail(err, EIN_EINVAL, "add_instr: path longer than %d bytes", EIN_PATH_MAX - 1);
    const ein_kernel *k = &ins->kernel;
    if (k->nlist < 0 || k->nlist > EIN_KERNEL_LIST_MAX || (k->nlist && !k->list))
        return ein_fail(err, EIN_EINVAL, "add_instr: bad kernel list (%d entries)", k->nlist);
    /* Everything copied out of *ins before p->instrs may move (ins may
     * point into it). */
    ein_instr c = *ins;
    c.deps = dup_ids(ins->deps, ins->ndeps, &oom);
    c.srcs = dup_ids(ins->srcs, ins->nsrcs, &oom);
    c.path = NULL;
    if (ins->path && !(c.path = strdup(ins->path)))
        oom = 1;
    /* The Program owns its copy; an empty list is NULL (never the caller's
     * pointer, which the Program would otherwise free). */
    c.kernel.list = NULL;
    if (k->nlist) {
        if (!(c.kernel.list = malloc((size_t)k->nlist * sizeof *k->list)))
            oom = 1;
        else
            memcpy(c.kernel.list, k->list, (size_t)k->nlist * sizeof *k->list);
    }
    if (oom || ein_vec_reserve(&p->instrs, &p->cap_instrs, (int64_t)p->ninstrs + 1,
                               sizeof *p->instrs) < 0) {
        instr_release(&c);
        return ein_fail(err, EIN_ENOMEM, "add_instr: out of memory");
    }
    p->instrs[p->ninstrs] = c;
    return p->ninstrs++;
}

/* The wire fields of each kernel kind (common/ir/ein_ops.def): the encoder in
 * ein_program_wire.c and the validator both read them. */
#define EIN_KF(f) (1u << K_##f)
static const unsigned kernel_fields[] = {
#define EIN_KERNEL(kind, name, min_srcs, max_srcs, fields) [EIN_KERNEL_##kind] = (fields),
#include "common/ir/ein_ops.def"
};
#undef EIN_KF
_Static_assert(sizeof kernel_fields / sizeof *kernel_fields == EIN_KERNEL_COUNT, "a kernel kind lacks its fields");

/* The wire fields of kernel kind k (none for an invalid kind: only "kind"
 * is sent, and the decoder rejects it). */
unsigned ein_kernel_fields_of(ein_kernel_kind k)
{
    return (int)k >= 0 && k < EIN_KERNEL_COUNT ? kernel_fields[k] : 0;
}
