/* common/ir/ein_program_check.c — ein_program_validate (see ein_program.h):
 * every buffer and instruction of a Program checked before it is run or
 * sent. */
#include "common/ir/ein_program.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/ir/ein_einsum.h"
#include "common/ir/ein_kernel_rules.h"
#include "common/ir/ein_program_int.h"

/* ---- validation ------------------------------------------------------- */

/* Fail with the instruction named: "program: instr 3 (slice 'mm1'): ...". */
static int ifail(ein_error *err, int i, const ein_instr *ins, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int ifail(ein_error *err, int i, const ein_instr *ins, const char *fmt, ...)
{
    if (err) {
        char what[EIN_ERROR_MSG_MAX];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(what, sizeof what, fmt, ap);
        va_end(ap);
        /* op is known to be terminated by the time we name it. */
        ein_fail(err, EIN_EPROTO, "program: instr %d (%s '%s'): %s", i, ein_instr_kind_name(ins->kind),
                 ins->op, what);
    }
    return EIN_EPROTO;
}

static int check_buffer(const ein_program *p, int id, ein_error *err)
{
    const ein_pbuffer *b = &p->buffers[id];
    uint64_t bytes, end;
    if (!ein_dtype_valid((int)b->dtype))
        return ein_fail(err, EIN_EPROTO, "program: buffer %d: invalid dtype %d", id, (int)b->dtype);
    const char *why = ein_buffer_box_bytes(&b->box, b->dtype, &bytes);
    if (why)
        return ein_fail(err, EIN_EPROTO, "program: buffer %d: box %s", id, why);
    if (b->bytes != bytes)
        return ein_fail(err, EIN_EPROTO, "program: buffer %d: %llu bytes but its box and dtype need %llu", id,
                        (unsigned long long)b->bytes, (unsigned long long)bytes);
    /* Kernels access elements directly: a misaligned buffer is UB. */
    size_t align = ein_dtype_size(b->dtype) ? ein_dtype_size(b->dtype) : 2; /* blocks: f16 scale */
    if (b->offset % align != 0)
        return ein_fail(err, EIN_EPROTO, "program: buffer %d: offset %llu not aligned to its dtype", id,
                        (unsigned long long)b->offset);
    if (__builtin_add_overflow(b->offset, b->bytes, &end) || end > p->segment_bytes)
        return ein_fail(err, EIN_EPROTO, "program: buffer %d: [%llu, +%llu) runs past the segment (%llu bytes)",
                        id, (unsigned long long)b->offset, (unsigned long long)b->bytes,
                        (unsigned long long)p->segment_bytes);
    return 0;
}

/* LOAD/STORE: the buffer's box lies inside the whole tensor [0, shape). */
static int check_file_shape(const ein_program *p, int i, const ein_instr *ins, int buf, ein_error *err)
{
    const ein_box *b = &p->buffers[buf].box;
    if (ins->rank < 0 || ins->rank > EIN_MAX_RANK)
        return ifail(err, i, ins, "rank %d out of range 0..%d", ins->rank, EIN_MAX_RANK);
    if (b->rank != ins->rank)
        return ifail(err, i, ins, "buffer %d has rank %d but the tensor has rank %d", buf, b->rank, ins->rank);
    for (int d = 0; d < ins->rank; d++) {
        if (ins->shape[d] < 0)
            return ifail(err, i, ins, "negative dimension in shape");
        if (b->hi[d] > ins->shape[d])
            return ifail(err, i, ins, "buffer %d's box is not inside the tensor's shape", buf);
    }
    return 0;
}

/* LOAD: the format and offset agree with the path, and a raw tensor's last
 * byte is addressable. */
static int check_load_source(const ein_program *p, int i, const ein_instr *ins, ein_error *err)
{
    if ((unsigned)ins->format >= EIN_LOAD_FORMAT_COUNT)
        return ifail(err, i, ins, "load format %d out of range", (int)ins->format);
    int raw;
    ein_dtype t = ein_load_file_dtype(ins->format, p->buffers[ins->dst].dtype, &raw);
    if (raw && !ins->path)
        return ifail(err, i, ins, "a raw load needs a path");
    if (ins->format == EIN_LOAD_ZERO && ins->path)
        return ifail(err, i, ins, "a zero load (a state) takes no path");
    if (!raw && ins->offset)
        return ifail(err, i, ins, "offset %llu given to a load that is not raw",
                     (unsigned long long)ins->offset);
    if (t != p->buffers[ins->dst].dtype && !ein_dtype_is_block((int)p->buffers[ins->dst].dtype))
        return ifail(err, i, ins, "a quantizing load (format %d) into a %s buffer; it fills "
                     "block (q8_0, q4_0, f8e4m3) buffers only", (int)ins->format,
                     ein_dtype_name(p->buffers[ins->dst].dtype));
    if (raw) {
        uint64_t bytes = ein_dtype_bytes(t, 1), end, blk = (uint64_t)ein_dtype_block((int)t);
        if (blk > 1 && (ins->rank < 1 || ins->shape[ins->rank - 1] % (int64_t)blk != 0))
            return ifail(err, i, ins, "a raw %s tensor's last dim must be a multiple of %llu",
                         ein_dtype_name(t), (unsigned long long)blk);
        if (blk > 1)
            bytes = ein_dtype_bytes(t, blk);
        for (int d = 0; d < ins->rank; d++)
            if (__builtin_mul_overflow(bytes, (uint64_t)(blk > 1 && d == ins->rank - 1 ? ins->shape[d] / (int64_t)blk : ins->shape[d]), &bytes))
                return ifail(err, i, ins, "raw tensor's size overflows");
        if (__builtin_add_overflow(ins->offset, bytes, &end) || end > (uint64_t)INT64_MAX)
            return ifail(err, i, ins, "raw tensor at offset %llu ends past 2^63",
                         (unsigned long long)ins->offset);
    }
    return 0;
}

static int check_path(int i, const ein_instr *ins, int required, ein_error *err)
{
    if (!ins->path)
        return required ? ifail(err, i, ins, "missing path") : 0;
    size_t n = strnlen(ins->path, EIN_PATH_MAX);
    if (n == 0)
        return ifail(err, i, ins, "empty path");
    if (n >= EIN_PATH_MAX)
        return ifail(err, i, ins, "path longer than %d bytes", EIN_PATH_MAX - 1);
    return 0;
}

/* The kinds that carry ein_kernel.list: those with the wire field. */
static int kernel_has_list(ein_kernel_kind k)
{
    return (ein_kernel_fields_of(k) & 1u << K_LIST) != 0;
}

static int check_kernel(const ein_program *p, int i, const ein_instr *ins, ein_error *err)
{
    const ein_kernel *k = &ins->kernel;
    const ein_box *out = &p->buffers[ins->dst].box;
    int n = ins->nsrcs;
    if ((int)k->kind < 0 || k->kind >= EIN_KERNEL_COUNT)
        return ifail(err, i, ins, "invalid kernel kind %d", (int)k->kind);
    const char *name = ein_kernel_kind_name(k->kind);
    ein_error ae = {0};
    if (ein_kernel_check_arity(k->kind, n, &ae) < 0)
        return ifail(err, i, ins, "%s", ae.msg);
    /* The dtype table says which kinds take which dtypes. */
    for (int j = -1; j < n; j++) {
        int b = j < 0 ? ins->dst : ins->srcs[j];
        if (!ein_dtype_kernel_ok((int)p->buffers[b].dtype, (int)k->kind))
            return ifail(err, i, ins, "%s kernel does not take %s buffer %d", name,
                         ein_dtype_name(p->buffers[b].dtype), b);
    }
    /* nlist's range and list's presence were checked for every instruction. */
    if (k->nlist && !kernel_has_list(k->kind))
        return ifail(err, i, ins, "%s kernel takes no list, has %d entries", name, k->nlist);

    /* The kind's block rules: its row in common/ir/ein_kernel_rules.c. */
    ein_kernel_operands o;
    o.k = k;
    o.nsrcs = n;
    for (int j = 0; j < n; j++)
        o.src[j] = (ein_kernel_operand){p->buffers[ins->srcs[j]].box, p->buffers[ins->srcs[j]].dtype,
                                        ins->srcs[j]};
    o.out = (ein_kernel_operand){*out, p->buffers[ins->dst].dtype, ins->dst};
    ein_error re = {0};
    if (ein_kernel_rules_check(&o, &re) < 0)
        return ifail(err, i, ins, "%s", re.msg);
    return 0;
}

/* What holds for every kind: a terminated op name, a known kind, deps on
 * earlier instructions, buffer ids in range and a kernel list only on a
 * KERNEL, of a sane length. */
static int check_instr_common(const ein_program *p, int i, const ein_instr *ins, ein_error *err)
{
    if (!memchr(ins->op, '\0', EIN_NAME_MAX))
        return ein_fail(err, EIN_EPROTO, "program: instr %d: op name not NUL-terminated", i);
    if ((int)ins->kind < 0 || ins->kind >= EIN_I_COUNT)
        return ein_fail(err, EIN_EPROTO, "program: instr %d ('%s'): invalid kind %d", i, ins->op, (int)ins->kind);
    if (ins->ndeps < 0 || (ins->ndeps && !ins->deps))
        return ifail(err, i, ins, "bad deps array");
    if (ins->nsrcs < 0 || (ins->nsrcs && !ins->srcs))
        return ifail(err, i, ins, "bad srcs array");
    for (int j = 0; j < ins->ndeps; j++)
        if (ins->deps[j] < 0 || ins->deps[j] >= i)
            return ifail(err, i, ins, "dependency %d is not an earlier instruction", ins->deps[j]);
    for (int j = 0; j < ins->nsrcs; j++)
        if (ins->srcs[j] < 0 || ins->srcs[j] >= p->nbuffers)
            return ifail(err, i, ins, "source buffer %d out of range (%d buffers)", ins->srcs[j], p->nbuffers);
    if (ins->dst < -1 || ins->dst >= p->nbuffers)
        return ifail(err, i, ins, "dst buffer %d out of range (%d buffers)", ins->dst, p->nbuffers);
    /* Every instruction owns its kernel's list (ein_program_free frees it). */
    if (ins->kernel.nlist < 0 || ins->kernel.nlist > EIN_KERNEL_LIST_MAX)
        return ifail(err, i, ins, "kernel list of %d entries (want 0..%d)", ins->kernel.nlist, EIN_KERNEL_LIST_MAX);
    if (!ins->kernel.nlist != !ins->kernel.list)
        return ifail(err, i, ins, "kernel list is %s but has %d entries", ins->kernel.list ? "set" : "NULL",
                     ins->kernel.nlist);
    if (ins->kind != EIN_I_KERNEL && ins->kernel.nlist)
        return ifail(err, i, ins, "a %s instruction carries a kernel list", ein_instr_kind_name(ins->kind));
    return 0;
}

/* The source count and dst presence the kind calls for (kind is valid). */
static int check_arity(int i, const ein_instr *ins, ein_error *err)
{
    /* Source count and dst presence per kind: {min srcs, max srcs, has dst}. */
    static const struct { int lo, hi, dst; } arity[EIN_I_COUNT] = {
        [EIN_I_LOAD] = {0, 0, 1},   [EIN_I_STORE] = {1, 1, 0},
        [EIN_I_KERNEL] = {1, EIN_KERNEL_MAX_INPUTS, 1}, [EIN_I_SLICE] = {1, 1, 1},
        [EIN_I_CONCAT] = {1, INT32_MAX, 1}, [EIN_I_AGG] = {1, INT32_MAX, 1},
        [EIN_I_COPY] = {0, 0, 1},   [EIN_I_NOTIFY] = {1, 1, 0},
        [EIN_I_WAIT] = {0, 0, 0},
    };
    if (ins->nsrcs < arity[ins->kind].lo || ins->nsrcs > arity[ins->kind].hi)
        return ifail(err, i, ins, "%d sources (want %d..%d)", ins->nsrcs, arity[ins->kind].lo,
                     arity[ins->kind].hi);
    if (arity[ins->kind].dst && ins->dst < 0)
        return ifail(err, i, ins, "needs a dst buffer");
    if (!arity[ins->kind].dst && ins->dst != -1)
        return ifail(err, i, ins, "dst must be -1, is %d", ins->dst);
    return 0;
}

/* SLICE: the source's box contains dst's, same dtype. */
static int check_slice(const ein_program *p, int i, const ein_instr *ins, ein_error *err)
{
    const ein_pbuffer *dst = &p->buffers[ins->dst];
    const ein_pbuffer *s = &p->buffers[ins->srcs[0]];
    if (!ein_box_contains(&s->box, &dst->box))
        return ifail(err, i, ins, "source buffer %d's box does not contain dst's", ins->srcs[0]);
    if (s->dtype != dst->dtype)
        return ifail(err, i, ins, "source and dst dtypes differ");
    return 0;
}

/* CONCAT: every source's box lies inside dst's, same dtype. */
static int check_concat(const ein_program *p, int i, const ein_instr *ins, ein_error *err)
{
    const ein_pbuffer *dst = &p->buffers[ins->dst];
    for (int j = 0; j < ins->nsrcs; j++) {
        const ein_pbuffer *s = &p->buffers[ins->srcs[j]];
        if (!ein_box_contains(&dst->box, &s->box))
            return ifail(err, i, ins, "source buffer %d's box is not inside dst's", ins->srcs[j]);
        if (s->dtype != dst->dtype)
            return ifail(err, i, ins, "source buffer %d's dtype differs from dst's", ins->srcs[j]);
    }
    return 0;
}

/* AGG: a known aggregation (lse on f32 rows [0, d + 1)), sources of dst's
 * box and dtype. */
static int check_agg(const ein_program *p, int i, const ein_instr *ins, ein_error *err)
{
    const ein_pbuffer *dst = &p->buffers[ins->dst];
    if (ins->agg != EIN_AGG_SUM && ins->agg != EIN_AGG_MAX && ins->agg != EIN_AGG_LSE)
        return ifail(err, i, ins, "invalid aggregation %d", (int)ins->agg);
    if (!ein_dtype_is_float((int)dst->dtype))
        return ifail(err, i, ins, "aggregation of %s buffers (only float dtypes aggregate)",
                     ein_dtype_name(dst->dtype));
    if (ins->agg == EIN_AGG_LSE &&
        (dst->box.rank < 1 || dst->box.lo[dst->box.rank - 1] != 0 ||
         dst->box.hi[dst->box.rank - 1] < 2 || dst->dtype != EIN_F32))
        return ifail(err, i, ins, "lse aggregation needs f32 rows [0, d + 1) with d >= 1");
    for (int j = 0; j < ins->nsrcs; j++) {
        const ein_pbuffer *s = &p->buffers[ins->srcs[j]];
        if (!ein_box_equal(&dst->box, &s->box) || s->dtype != dst->dtype)
            return ifail(err, i, ins, "source buffer %d's box or dtype differs from dst's", ins->srcs[j]);
    }
    return 0;
}

/* COPY, NOTIFY and WAIT: another device in range; a COPY or WAIT names a
 * peer buffer. */
static int check_peer(const ein_program *p, int i, const ein_instr *ins, ein_error *err)
{
    if (ins->peer < 0 || ins->peer >= p->ndevices)
        return ifail(err, i, ins, "peer %d out of range (%d devices)", ins->peer, p->ndevices);
    if (ins->peer == p->device)
        return ifail(err, i, ins, "peer %d is this device", ins->peer);
    if ((ins->kind == EIN_I_COPY || ins->kind == EIN_I_WAIT) && ins->peer_buf < 0)
        return ifail(err, i, ins, "negative peer buffer id %d", ins->peer_buf);
    return 0;
}

/* Instruction i of p is well formed for its kind: the common checks, its
 * arity, then the kind's own. */
static int check_instr(const ein_program *p, int i, ein_error *err)
{
    const ein_instr *ins = &p->instrs[i];
    int rc;
    if ((rc = check_instr_common(p, i, ins, err)) < 0 || (rc = check_arity(i, ins, err)) < 0)
        return rc;
    switch (ins->kind) {
    case EIN_I_LOAD:
        if ((rc = check_path(i, ins, 0, err)) < 0)
            return rc;
        if ((rc = check_file_shape(p, i, ins, ins->dst, err)) < 0)
            return rc;
        return check_load_source(p, i, ins, err);
    case EIN_I_STORE:
        if ((rc = check_path(i, ins, 1, err)) < 0)
            return rc;
        return check_file_shape(p, i, ins, ins->srcs[0], err);
    case EIN_I_KERNEL:
        return check_kernel(p, i, ins, err);
    case EIN_I_SLICE:
        return check_slice(p, i, ins, err);
    case EIN_I_CONCAT:
        return check_concat(p, i, ins, err);
    case EIN_I_AGG:
        return check_agg(p, i, ins, err);
    case EIN_I_COPY:
    case EIN_I_NOTIFY:
    case EIN_I_WAIT:
        return check_peer(p, i, ins, err);
    default:
        return 0;
    }
}

int ein_program_validate(const ein_program *p, ein_error *err)
{
    int rc;
    if (!p)
        return ein_fail(err, EIN_EPROTO, "program: missing");
    if (p->ndevices < 1 || p->device < 0 || p->device >= p->ndevices)
        return ein_fail(err, EIN_EPROTO, "program: device %d of %d out of range", p->device, p->ndevices);
    if (p->nbuffers < 0 || p->ninstrs < 0 || (p->nbuffers && !p->buffers) || (p->ninstrs && !p->instrs))
        return ein_fail(err, EIN_EPROTO, "program: bad buffer or instruction arrays");
    for (int b = 0; b < p->nbuffers; b++)
        if ((rc = check_buffer(p, b, err)) < 0)
            return rc;
    for (int i = 0; i < p->ninstrs; i++)
        if ((rc = check_instr(p, i, err)) < 0)
            return rc;
    return 0;
}

