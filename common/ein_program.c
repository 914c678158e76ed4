/* common/ein_program.c — see ein_program.h.
 *
 * Encoding: a Program is a msgpack map
 *   {"device": i, "ndevices": n, "segment_bytes": u,
 *    "buffers": [{"dtype": i, "box": [[lo...], [hi...]], "offset": u, "bytes": u}...],
 *    "instrs": [{"kind": i, "deps": [...], "srcs": [...], "dst": i, "op": s, ...}...]}
 * where each instruction carries only the fields of its kind:
 *   LOAD "path" (str or nil), "seed", "key", "shape", "format", "offset";
 *   STORE "path", "shape";
 *   KERNEL "kernel": {"kind", and the fields of that kind (kernel_fields
 *   below): "subscripts" | "unary","scalar" | "binary" | "axis" | "eps" |
 *   "head_dim","theta","list" | "group","list" | "axes","reduce" |
 *   "axis","list" | "axis","start" | "head_dim"}, "list" an int array;
 *   AGG "agg"; COPY "peer", "peer_buf", "peer_offset"; NOTIFY "peer", "peer_buf".
 * Enums travel as their integer values (the protocol version "v" of the
 * envelope guards their meaning). Unknown or duplicate keys are errors. */
#include "common/ein_program.h"

#include <math.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ein_vec.h"
#include "common/ein_wire.h"

/* Largest buffer we accept: keeps every byte count and offset sum far from
 * 64-bit overflow. */
#define EIN_BUFFER_MAX_BYTES ((uint64_t)1 << 62)
#define EIN_BUFFER_ALIGN 256

/* The wire fields of a kernel (common/ein_ops.def), as bit positions. */
enum {
#define EIN_KFIELD(field, key) K_##field,
#include "common/ein_ops.def"
    K_COUNT
};

static const char *const kind_names[] = {
    "load", "store", "kernel", "slice", "concat", "agg", "copy", "notify",
};
/* Generated from common/ein_ops.def, sized by their initialisers and
 * checked against the enums. */
static const char *const unary_names[] = {
#define EIN_UNARY(kind, name, nargs, usage, formula) [EIN_UN_##kind] = name,
#include "common/ein_ops.def"
};
static const int unary_nargs[] = {
#define EIN_UNARY(kind, name, nargs, usage, formula) [EIN_UN_##kind] = nargs,
#include "common/ein_ops.def"
};
static const char *const binary_names[] = {
#define EIN_BINARY(kind, name, op, formula) [EIN_BIN_##kind] = name,
#include "common/ein_ops.def"
};
static const char *const binary_ops[] = {
#define EIN_BINARY(kind, name, op, formula) [EIN_BIN_##kind] = op,
#include "common/ein_ops.def"
};
static const char *const kernel_kind_names[] = {
#define EIN_KERNEL(kind, name, min_srcs, max_srcs, fields) [EIN_KERNEL_##kind] = name,
#include "common/ein_ops.def"
};
_Static_assert(sizeof kind_names / sizeof *kind_names == EIN_I_COUNT, "an instruction kind lacks a name");
_Static_assert(sizeof unary_names / sizeof *unary_names == EIN_UN_COUNT, "a unary op lacks a name");
_Static_assert(sizeof binary_names / sizeof *binary_names == EIN_BIN_COUNT, "a binary op lacks a name");
_Static_assert(sizeof kernel_kind_names / sizeof *kernel_kind_names == EIN_KERNEL_COUNT,
               "a kernel kind lacks a name");
static const char *const agg_names[] = {"none", "sum", "max", "lse"};

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

/* NULL if `b` is a well-formed buffer box (rank 0..8, 0 <= lo < hi, bytes
 * in range) and *bytes is set; otherwise what is wrong with it. */
static const char *box_bytes(const ein_box *b, ein_dtype t, uint64_t *bytes)
{
    if (b->rank < 0 || b->rank > EIN_MAX_RANK)
        return "rank out of range 0..8";
    uint64_t n = ein_dtype_size(t);
    for (int i = 0; i < b->rank; i++) {
        if (b->lo[i] < 0 || b->hi[i] <= b->lo[i])
            return "bounds not 0 <= lo < hi";
        if (__builtin_mul_overflow(n, (uint64_t)(b->hi[i] - b->lo[i]), &n) || n > EIN_BUFFER_MAX_BYTES)
            return "too large";
    }
    *bytes = n;
    return NULL;
}

int ein_program_add_buffer(ein_program *p, ein_dtype dtype, const ein_box *box, ein_error *err)
{
    uint64_t bytes, offset;
    char b[256];
    if (!ein_dtype_valid((int)dtype))
        return ein_fail(err, EIN_EINVAL, "add_buffer: invalid dtype %d", (int)dtype);
    const char *why = box_bytes(box, dtype, &bytes);
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
    if (ein_vec_reserve(&p->instrs, &p->cap_instrs, (int64_t)p->ninstrs + 1,
                        sizeof *p->instrs) < 0)
        return ein_fail(err, EIN_ENOMEM, "add_instr: out of memory");
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
    if (oom) {
        instr_release(&c);
        return ein_fail(err, EIN_ENOMEM, "add_instr: out of memory");
    }
    p->instrs[p->ninstrs] = c;
    return p->ninstrs++;
}

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
    const char *why = box_bytes(&b->box, b->dtype, &bytes);
    if (why)
        return ein_fail(err, EIN_EPROTO, "program: buffer %d: box %s", id, why);
    if (b->bytes != bytes)
        return ein_fail(err, EIN_EPROTO, "program: buffer %d: %llu bytes but its box and dtype need %llu", id,
                        (unsigned long long)b->bytes, (unsigned long long)bytes);
    /* Kernels access elements directly: a misaligned buffer is UB. */
    if (b->offset % ein_dtype_size(b->dtype) != 0)
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
    if (ins->format == EIN_LOAD_RAW && !ins->path)
        return ifail(err, i, ins, "a raw load needs a path");
    if (ins->format != EIN_LOAD_RAW && ins->offset)
        return ifail(err, i, ins, "offset %llu given to a load that is not raw",
                     (unsigned long long)ins->offset);
    if (ins->format == EIN_LOAD_RAW) {
        uint64_t bytes = ein_dtype_size(p->buffers[ins->dst].dtype), end;
        for (int d = 0; d < ins->rank; d++)
            if (__builtin_mul_overflow(bytes, (uint64_t)ins->shape[d], &bytes))
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

static int letter_index(char c)
{
    if (c >= 'a' && c <= 'z')
        return c - 'a';
    if (c >= 'A' && c <= 'Z')
        return 26 + c - 'A';
    return -1;
}

/* "ab,bc->ac": one operand per source, one letter per dim of its buffer,
 * every letter with one extent; the output's letters appear in the inputs,
 * once each, and match dst's box. Kernels rely on this for bounds. */
static int check_einsum(const ein_program *p, int i, const ein_instr *ins, ein_error *err)
{
    const char *s = ins->kernel.subscripts;
    int64_t ext[52];
    for (int c = 0; c < 52; c++)
        ext[c] = -1;
    if (!memchr(s, '\0', EIN_NAME_MAX))
        return ifail(err, i, ins, "einsum subscripts not NUL-terminated");
    const char *arrow = strstr(s, "->");
    if (!arrow)
        return ifail(err, i, ins, "einsum subscripts '%s' lack '->'", s);
    const char *q = s;
    int k = 0;
    for (;; k++) {
        const char *start = q;
        while (q < arrow && *q != ',')
            q++;
        if (k >= ins->nsrcs)
            return ifail(err, i, ins, "einsum '%s' has more operands than its %d sources", s, ins->nsrcs);
        const ein_box *b = &p->buffers[ins->srcs[k]].box;
        if (q - start != b->rank)
            return ifail(err, i, ins, "einsum '%s': operand %d has %d letters but its buffer rank %d", s, k,
                         (int)(q - start), b->rank);
        for (int d = 0; d < b->rank; d++) {
            int c = letter_index(start[d]);
            if (c < 0)
                return ifail(err, i, ins, "einsum '%s': bad character '%c'", s, start[d]);
            int64_t e = b->hi[d] - b->lo[d];
            if (ext[c] >= 0 && ext[c] != e)
                return ifail(err, i, ins, "einsum '%s': index '%c' has extents %lld and %lld", s, start[d],
                             (long long)ext[c], (long long)e);
            ext[c] = e;
        }
        if (q == arrow)
            break;
        q++; /* ',' */
    }
    if (k + 1 != ins->nsrcs)
        return ifail(err, i, ins, "einsum '%s' has %d operands but %d sources", s, k + 1, ins->nsrcs);
    const char *out = arrow + 2;
    const ein_box *ob = &p->buffers[ins->dst].box;
    if ((int)strlen(out) != ob->rank)
        return ifail(err, i, ins, "einsum '%s': output has %d letters but dst rank %d", s, (int)strlen(out),
                     ob->rank);
    int seen[52] = {0};
    for (int d = 0; d < ob->rank; d++) {
        int c = letter_index(out[d]);
        if (c < 0)
            return ifail(err, i, ins, "einsum '%s': bad character '%c'", s, out[d]);
        if (ext[c] < 0)
            return ifail(err, i, ins, "einsum '%s': output index '%c' is in no input", s, out[d]);
        if (seen[c]++)
            return ifail(err, i, ins, "einsum '%s': output index '%c' repeated", s, out[d]);
        if (ob->hi[d] - ob->lo[d] != ext[c])
            return ifail(err, i, ins, "einsum '%s': output index '%c' has extent %lld, inputs %lld", s, out[d],
                         (long long)(ob->hi[d] - ob->lo[d]), (long long)ext[c]);
    }
    return 0;
}

/* Sources each kernel kind takes, {min, max}. */
static const struct { int lo, hi; } kernel_arity[] = {
#define EIN_KERNEL(kind, name, min_srcs, max_srcs, fields) [EIN_KERNEL_##kind] = {min_srcs, max_srcs},
#include "common/ein_ops.def"
};
_Static_assert(sizeof kernel_arity / sizeof *kernel_arity == EIN_KERNEL_COUNT, "a kernel kind lacks an arity");

static unsigned kernel_fields_of(ein_kernel_kind k);

/* The kinds that carry ein_kernel.list: those with the wire field. */
static int kernel_has_list(ein_kernel_kind k)
{
    return (kernel_fields_of(k) & 1u << K_LIST) != 0;
}

static int same_interval(const ein_box *a, int da, const ein_box *b, int db)
{
    return a->lo[da] == b->lo[db] && a->hi[da] == b->hi[db];
}

/* Sequence ends (ROPE, ATTENTION): positive, strictly ascending, and the
 * last one (the total token count) is beyond every token of the block, so
 * that every token has a sequence. No list: one sequence from 0. */
static int check_seq_ends(int i, const ein_instr *ins, int64_t tok_hi, ein_error *err)
{
    const ein_kernel *k = &ins->kernel;
    for (int32_t j = 0; j < k->nlist; j++)
        if (k->list[j] <= (j ? k->list[j - 1] : 0))
            return ifail(err, i, ins, "%s: sequence ends not positive and strictly ascending at entry %d",
                         ein_kernel_kind_name(k->kind), j);
    if (k->nlist && tok_hi > k->list[k->nlist - 1])
        return ifail(err, i, ins, "%s: tokens up to %lld but the sequences end at %lld",
                     ein_kernel_kind_name(k->kind), (long long)tok_hi, (long long)k->list[k->nlist - 1]);
    return 0;
}

/* First token of the sequence holding token t. */
static int64_t seq_start(const ein_kernel *k, int64_t t)
{
    int64_t s = 0;
    for (int32_t j = 0; j < k->nlist && k->list[j] <= t; j++)
        s = k->list[j];
    return s;
}

/* SPLIT_HEADS/MERGE_HEADS: `flat` [t0,t1) x [h0*D, h1*D) and `heads`
 * [h0,h1) x [t0,t1) x [0,D), D = head_dim. */
static int check_heads(int i, const ein_instr *ins, const ein_box *flat, const ein_box *heads,
                       ein_error *err)
{
    int64_t d = ins->kernel.head_dim, lo, hi;
    const char *name = ein_kernel_kind_name(ins->kernel.kind);
    if (flat->rank != 2 || heads->rank != 3)
        return ifail(err, i, ins, "%s: needs a rank-2 [tokens, hidden] and a rank-3 [heads, tokens, d] box, has "
                     "ranks %d and %d", name, flat->rank, heads->rank);
    if (d <= 0)
        return ifail(err, i, ins, "%s: head_dim %lld not positive", name, (long long)d);
    if (heads->lo[2] != 0 || heads->hi[2] != d)
        return ifail(err, i, ins, "%s: the head box's last axis is not [0, head_dim)", name);
    if (!same_interval(flat, 0, heads, 1))
        return ifail(err, i, ins, "%s: token intervals differ", name);
    if (__builtin_mul_overflow(heads->lo[0], d, &lo) || __builtin_mul_overflow(heads->hi[0], d, &hi) ||
        flat->lo[1] != lo || flat->hi[1] != hi)
        return ifail(err, i, ins, "%s: hidden interval is not the heads' interval times head_dim", name);
    return 0;
}

/* The block rules of a UNARY kernel (arity and kind already checked). */
static int check_unary_kernel(const ein_program *p, int i, const ein_instr *ins, ein_error *err)
{
    const ein_kernel *k = &ins->kernel;
    const ein_box *out = &p->buffers[ins->dst].box;
    const ein_box *x = &p->buffers[ins->srcs[0]].box;
    if ((int)k->unary < 0 || k->unary >= EIN_UN_COUNT)
        return ifail(err, i, ins, "invalid unary op %d", (int)k->unary);
    if (!isfinite(k->scalar))
        return ifail(err, i, ins, "unary scalar is not finite");
    if (!ein_box_equal(x, out))
        return ifail(err, i, ins, "source buffer %d's box differs from dst's", ins->srcs[0]);
    return 0;
}

/* The block rules of a BINARY kernel (arity and kind already checked). */
static int check_binary_kernel(const ein_program *p, int i, const ein_instr *ins, ein_error *err)
{
    const ein_kernel *k = &ins->kernel;
    const ein_box *out = &p->buffers[ins->dst].box;
    if ((int)k->binary < 0 || k->binary >= EIN_BIN_COUNT)
        return ifail(err, i, ins, "invalid binary op %d", (int)k->binary);
    /* numpy broadcasting, right-aligned: each input dim is dst's
     * interval or has extent 1 (its one element is broadcast). */
    for (int j = 0; j < 2; j++) {
        const ein_box *s = &p->buffers[ins->srcs[j]].box;
        if (s->rank > out->rank)
            return ifail(err, i, ins, "binary: source buffer %d has rank %d, above dst's %d", ins->srcs[j],
                         s->rank, out->rank);
        for (int d = 0; d < s->rank; d++) {
            int od = out->rank - s->rank + d;
            if (s->hi[d] - s->lo[d] != 1 && !same_interval(s, d, out, od))
                return ifail(err, i, ins, "binary: source buffer %d's axis %d is neither dst's interval nor "
                             "of extent 1 (broadcast)", ins->srcs[j], d);
        }
    }
    return 0;
}

/* The block rules of a SOFTMAX kernel (arity and kind already checked). */
static int check_softmax_kernel(const ein_program *p, int i, const ein_instr *ins, ein_error *err)
{
    const ein_kernel *k = &ins->kernel;
    const ein_box *out = &p->buffers[ins->dst].box;
    const ein_box *x = &p->buffers[ins->srcs[0]].box;
    if (k->axis < 0 || k->axis >= x->rank)
        return ifail(err, i, ins, "softmax: axis %d out of range for rank %d", k->axis, x->rank);
    if (!ein_box_equal(x, out))
        return ifail(err, i, ins, "softmax: source buffer %d's box differs from dst's", ins->srcs[0]);
    return 0;
}

/* The block rules of an RMSNORM or LAYERNORM kernel (arity, kind checked). */
static int check_norm_kernel(const ein_program *p, int i, const ein_instr *ins, ein_error *err)
{
    const ein_kernel *k = &ins->kernel;
    const ein_box *out = &p->buffers[ins->dst].box;
    const ein_box *x = &p->buffers[ins->srcs[0]].box;
    int n = ins->nsrcs;
    const char *name = ein_kernel_kind_name(ins->kernel.kind);
    if (!isfinite(k->eps) || k->eps < 0)
        return ifail(err, i, ins, "%s: eps %g is not a finite number >= 0", name, k->eps);
    if (x->rank < 1)
        return ifail(err, i, ins, "%s: input has rank 0", name);
    if (!ein_box_equal(x, out))
        return ifail(err, i, ins, "%s: source buffer %d's box differs from dst's", name, ins->srcs[0]);
    /* weight (and bias) and x hold the whole normalised axis [0, d) */
    for (int j = 1; j < n; j++) {
        const ein_box *w = &p->buffers[ins->srcs[j]].box;
        if (w->rank != 1 || w->lo[0] != 0 || !same_interval(w, 0, x, x->rank - 1))
            return ifail(err, i, ins, "%s: %s buffer %d is not rank 1 over x's last interval [0, d)", name,
                         j == 1 ? "weight" : "bias", ins->srcs[j]);
    }
    return 0;
}

/* The block rules of a ROPE kernel (arity and kind already checked). */
static int check_rope_kernel(const ein_program *p, int i, const ein_instr *ins, ein_error *err)
{
    const ein_kernel *k = &ins->kernel;
    const ein_box *out = &p->buffers[ins->dst].box;
    const ein_box *x = &p->buffers[ins->srcs[0]].box;
    int64_t d = k->head_dim;
    if (x->rank != 2)
        return ifail(err, i, ins, "rope: input has rank %d, not 2 [tokens, hidden]", x->rank);
    if (!ein_box_equal(x, out))
        return ifail(err, i, ins, "rope: source buffer %d's box differs from dst's", ins->srcs[0]);
    /* rotated pairs (2i, 2i+1) stay inside a head, heads inside the block */
    if (d <= 0 || d % 2 != 0)
        return ifail(err, i, ins, "rope: head_dim %lld is not positive and even", (long long)d);
    if (x->lo[1] % d != 0 || x->hi[1] % d != 0)
        return ifail(err, i, ins, "rope: hidden interval [%lld, %lld) not at multiples of head_dim %lld",
                     (long long)x->lo[1], (long long)x->hi[1], (long long)d);
    if (!isfinite(k->theta) || k->theta <= 0)
        return ifail(err, i, ins, "rope: theta %g is not a finite number > 0", k->theta);
    if (k->style < 0 || k->style >= EIN_ROPE_STYLE_COUNT)
        return ifail(err, i, ins, "rope: style %d is not interleaved (0) or half (1)", (int)k->style);
    return check_seq_ends(i, ins, x->hi[0], err);
}

/* The block rules of an ATTENTION kernel (arity and kind already checked). */
static int check_attention_kernel(const ein_program *p, int i, const ein_instr *ins, ein_error *err)
{
    const ein_kernel *k = &ins->kernel;
    const ein_box *out = &p->buffers[ins->dst].box;
    const ein_box *x = &p->buffers[ins->srcs[0]].box;
    const ein_box *q = x, *kb = &p->buffers[ins->srcs[1]].box, *vb = &p->buffers[ins->srcs[2]].box;
    int64_t hlo, hhi;
    int rc;
    if (q->rank != 3 || kb->rank != 3 || vb->rank != 3)
        return ifail(err, i, ins, "attention: q, k, v must have rank 3 [heads, tokens, d]");
    if (!ein_box_equal(q, out))
        return ifail(err, i, ins, "attention: q buffer %d's box differs from dst's", ins->srcs[0]);
    if (!ein_box_equal(kb, vb))
        return ifail(err, i, ins, "attention: k and v boxes differ");
    if (k->group < 1)
        return ifail(err, i, ins, "attention: group %lld below 1", (long long)k->group);
    if (__builtin_mul_overflow(kb->lo[0], k->group, &hlo) || __builtin_mul_overflow(kb->hi[0], k->group, &hhi) ||
        q->lo[0] != hlo || q->hi[0] != hhi)
        return ifail(err, i, ins, "attention: q's head interval is not group (%lld) times k's",
                     (long long)k->group);
    if (q->lo[2] != 0 || !same_interval(q, 2, kb, 2))
        return ifail(err, i, ins, "attention: d is not whole and equal in q, k and v");
    if ((rc = check_seq_ends(i, ins, q->hi[1], err)) < 0)
        return rc;
    /* every key of every query: from its sequence's start to itself */
    if (kb->lo[1] > seq_start(k, q->lo[1]) || kb->hi[1] < q->hi[1])
        return ifail(err, i, ins, "attention: k/v tokens [%lld, %lld) miss keys of queries [%lld, %lld)",
                     (long long)kb->lo[1], (long long)kb->hi[1], (long long)q->lo[1], (long long)q->hi[1]);
    return 0;
}

/* The block rules of an ATTENTION_PARTIAL kernel (arity and kind already checked). */
static int check_attention_partial_kernel(const ein_program *p, int i, const ein_instr *ins, ein_error *err)
{
    const ein_kernel *k = &ins->kernel;
    const ein_box *out = &p->buffers[ins->dst].box;
    const ein_box *x = &p->buffers[ins->srcs[0]].box;
    int n = ins->nsrcs;
    /* One key block's share: q as for ATTENTION, k/v any token
     * interval (or none), dst the f32 rows [0, d + 1) of q's box. */
    const ein_box *q = x;
    ein_box want = ein_agg_box(EIN_AGG_LSE, q);
    int rc;
    if (q->rank != 3)
        return ifail(err, i, ins, "attention_partial: q must have rank 3 [heads, tokens, d]");
    if (!ein_box_equal(&want, out) || p->buffers[ins->dst].dtype != EIN_F32)
        return ifail(err, i, ins, "attention_partial: dst is not f32 over q's box with d + 1 columns");
    if (q->lo[2] != 0)
        return ifail(err, i, ins, "attention_partial: d is not whole in q");
    if (n == 2)
        return ifail(err, i, ins, "attention_partial takes q alone or q, k and v");
    if (n == 3) {
        const ein_box *kb = &p->buffers[ins->srcs[1]].box, *vb = &p->buffers[ins->srcs[2]].box;
        int64_t hlo, hhi;
        if (kb->rank != 3 || !ein_box_equal(kb, vb))
            return ifail(err, i, ins, "attention_partial: k and v boxes differ or are not rank 3");
        if (k->group < 1)
            return ifail(err, i, ins, "attention_partial: group %lld below 1", (long long)k->group);
        if (__builtin_mul_overflow(kb->lo[0], k->group, &hlo) ||
            __builtin_mul_overflow(kb->hi[0], k->group, &hhi) || q->lo[0] != hlo || q->hi[0] != hhi)
            return ifail(err, i, ins, "attention_partial: q's head interval is not group (%lld) "
                         "times k's", (long long)k->group);
        if (!same_interval(q, 2, kb, 2))
            return ifail(err, i, ins, "attention_partial: d differs between q and k/v");
        if ((rc = check_seq_ends(i, ins, kb->hi[1], err)) < 0)
            return rc;
    }
    return check_seq_ends(i, ins, q->hi[1], err);
}

/* The block rules of a REDUCE kernel (arity and kind already checked). */
static int check_reduce_kernel(const ein_program *p, int i, const ein_instr *ins, ein_error *err)
{
    const ein_kernel *k = &ins->kernel;
    const ein_box *out = &p->buffers[ins->dst].box;
    const ein_box *x = &p->buffers[ins->srcs[0]].box;
    if (k->reduce != EIN_AGG_SUM && k->reduce != EIN_AGG_MAX)
        return ifail(err, i, ins, "reduce: op %d is not sum or max", (int)k->reduce);
    if (k->axes == 0 || (k->axes >> x->rank) != 0)
        return ifail(err, i, ins, "reduce: axes 0x%x not a non-empty set of axes below rank %d", k->axes,
                     x->rank);
    int od = 0;
    if (out->rank != x->rank - __builtin_popcount(k->axes))
        return ifail(err, i, ins, "reduce: dst rank %d, want %d", out->rank,
                     x->rank - __builtin_popcount(k->axes));
    for (int d = 0; d < x->rank; d++)
        if (!(k->axes >> d & 1u) && !same_interval(x, d, out, od++))
            return ifail(err, i, ins, "reduce: dst's box is not x's without the reduced axes");
    return 0;
}

/* The block rules of a CONCAT kernel (arity and kind already checked). */
static int check_concat_kernel(const ein_program *p, int i, const ein_instr *ins, ein_error *err)
{
    const ein_kernel *k = &ins->kernel;
    const ein_box *out = &p->buffers[ins->dst].box;
    int n = ins->nsrcs;
    if (k->axis < 0 || k->axis >= out->rank)
        return ifail(err, i, ins, "concat: axis %d out of range for rank %d", k->axis, out->rank);
    if (k->nlist != n)
        return ifail(err, i, ins, "concat: %d offsets for %d sources", k->nlist, n);
    for (int j = 0; j < n; j++) {
        const ein_box *s = &p->buffers[ins->srcs[j]].box;
        int64_t end;
        if (s->rank != out->rank)
            return ifail(err, i, ins, "concat: source buffer %d has rank %d, dst %d", ins->srcs[j], s->rank,
                         out->rank);
        if (j ? k->list[j] <= k->list[j - 1] : k->list[j] < 0)
            return ifail(err, i, ins, "concat: offsets not non-negative and strictly ascending at entry %d", j);
        /* input j spans [list[j], list[j+1]) of dst's axis */
        if (__builtin_add_overflow(k->list[j], s->hi[k->axis], &end) || (j + 1 < n && end > k->list[j + 1]))
            return ifail(err, i, ins, "concat: source buffer %d runs past its part of the axis", ins->srcs[j]);
    }
    return 0;
}

/* The block rules of a SLICE kernel (arity and kind already checked). */
static int check_slice_kernel(const ein_program *p, int i, const ein_instr *ins, ein_error *err)
{
    const ein_kernel *k = &ins->kernel;
    const ein_box *out = &p->buffers[ins->dst].box;
    const ein_box *x = &p->buffers[ins->srcs[0]].box;
    ein_box shifted = *out;
    if (k->axis < 0 || k->axis >= x->rank)
        return ifail(err, i, ins, "slice: axis %d out of range for rank %d", k->axis, x->rank);
    if (k->start < 0)
        return ifail(err, i, ins, "slice: negative start %lld", (long long)k->start);
    if (out->rank != x->rank)
        return ifail(err, i, ins, "slice: dst rank %d differs from the source's %d", out->rank, x->rank);
    if (__builtin_add_overflow(out->lo[k->axis], k->start, &shifted.lo[k->axis]) ||
        __builtin_add_overflow(out->hi[k->axis], k->start, &shifted.hi[k->axis]) ||
        !ein_box_contains(x, &shifted))
        return ifail(err, i, ins, "slice: source buffer %d does not contain dst's box shifted by %lld",
                     ins->srcs[0], (long long)k->start);
    return 0;
}

static int check_kernel(const ein_program *p, int i, const ein_instr *ins, ein_error *err)
{
    const ein_kernel *k = &ins->kernel;
    const ein_box *out = &p->buffers[ins->dst].box;
    const ein_box *x = &p->buffers[ins->srcs[0]].box; /* the instruction arity guarantees a source */
    int n = ins->nsrcs;
    if ((int)k->kind < 0 || k->kind >= EIN_KERNEL_COUNT)
        return ifail(err, i, ins, "invalid kernel kind %d", (int)k->kind);
    const char *name = ein_kernel_kind_name(k->kind);
    if (n < kernel_arity[k->kind].lo || n > kernel_arity[k->kind].hi) {
        if (kernel_arity[k->kind].lo == kernel_arity[k->kind].hi)
            return ifail(err, i, ins, "%s kernel takes %d source%s, has %d", name, kernel_arity[k->kind].lo,
                         kernel_arity[k->kind].lo == 1 ? "" : "s", n);
        return ifail(err, i, ins, "%s kernel takes %d to %d sources, has %d", name, kernel_arity[k->kind].lo,
                     kernel_arity[k->kind].hi, n);
    }
    /* nlist's range and list's presence were checked for every instruction. */
    if (k->nlist && !kernel_has_list(k->kind))
        return ifail(err, i, ins, "%s kernel takes no list, has %d entries", name, k->nlist);

    switch (k->kind) {
    case EIN_KERNEL_EINSUM:
        return check_einsum(p, i, ins, err);
    case EIN_KERNEL_UNARY:
        return check_unary_kernel(p, i, ins, err);
    case EIN_KERNEL_BINARY:
        return check_binary_kernel(p, i, ins, err);
    case EIN_KERNEL_SOFTMAX:
        return check_softmax_kernel(p, i, ins, err);
    case EIN_KERNEL_RMSNORM:
    case EIN_KERNEL_LAYERNORM:
        return check_norm_kernel(p, i, ins, err);
    case EIN_KERNEL_ROPE:
        return check_rope_kernel(p, i, ins, err);
    case EIN_KERNEL_ATTENTION:
        return check_attention_kernel(p, i, ins, err);
    case EIN_KERNEL_ATTENTION_PARTIAL:
        return check_attention_partial_kernel(p, i, ins, err);
    case EIN_KERNEL_REDUCE:
        return check_reduce_kernel(p, i, ins, err);
    case EIN_KERNEL_CONCAT:
        return check_concat_kernel(p, i, ins, err);
    case EIN_KERNEL_SLICE:
        return check_slice_kernel(p, i, ins, err);
    case EIN_KERNEL_SPLIT_HEADS:
        return check_heads(i, ins, x, out, err);
    case EIN_KERNEL_MERGE_HEADS:
        return check_heads(i, ins, out, x, err);
    case EIN_KERNEL_COUNT:
        break;
    }
    return ifail(err, i, ins, "invalid kernel kind %d", (int)k->kind);
}

static int check_instr(const ein_program *p, int i, ein_error *err)
{
    const ein_instr *ins = &p->instrs[i];
    int rc;
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

    /* Source count and dst presence per kind: {min srcs, max srcs, has dst}. */
    static const struct { int lo, hi, dst; } arity[EIN_I_COUNT] = {
        [EIN_I_LOAD] = {0, 0, 1},   [EIN_I_STORE] = {1, 1, 0},
        [EIN_I_KERNEL] = {1, EIN_KERNEL_MAX_INPUTS, 1}, [EIN_I_SLICE] = {1, 1, 1},
        [EIN_I_CONCAT] = {1, INT32_MAX, 1}, [EIN_I_AGG] = {1, INT32_MAX, 1},
        [EIN_I_COPY] = {0, 0, 1},   [EIN_I_NOTIFY] = {1, 1, 0},
    };
    if (ins->nsrcs < arity[ins->kind].lo || ins->nsrcs > arity[ins->kind].hi)
        return ifail(err, i, ins, "%d sources (want %d..%d)", ins->nsrcs, arity[ins->kind].lo,
                     arity[ins->kind].hi);
    if (arity[ins->kind].dst && ins->dst < 0)
        return ifail(err, i, ins, "needs a dst buffer");
    if (!arity[ins->kind].dst && ins->dst != -1)
        return ifail(err, i, ins, "dst must be -1, is %d", ins->dst);

    const ein_pbuffer *dst = ins->dst >= 0 ? &p->buffers[ins->dst] : NULL;
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
    case EIN_I_SLICE: {
        const ein_pbuffer *s = &p->buffers[ins->srcs[0]];
        if (!ein_box_contains(&s->box, &dst->box))
            return ifail(err, i, ins, "source buffer %d's box does not contain dst's", ins->srcs[0]);
        if (s->dtype != dst->dtype)
            return ifail(err, i, ins, "source and dst dtypes differ");
        return 0;
    }
    case EIN_I_CONCAT:
        for (int j = 0; j < ins->nsrcs; j++) {
            const ein_pbuffer *s = &p->buffers[ins->srcs[j]];
            if (!ein_box_contains(&dst->box, &s->box))
                return ifail(err, i, ins, "source buffer %d's box is not inside dst's", ins->srcs[j]);
            if (s->dtype != dst->dtype)
                return ifail(err, i, ins, "source buffer %d's dtype differs from dst's", ins->srcs[j]);
        }
        return 0;
    case EIN_I_AGG:
        if (ins->agg != EIN_AGG_SUM && ins->agg != EIN_AGG_MAX && ins->agg != EIN_AGG_LSE)
            return ifail(err, i, ins, "invalid aggregation %d", (int)ins->agg);
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
    case EIN_I_COPY:
    case EIN_I_NOTIFY:
        if (ins->peer < 0 || ins->peer >= p->ndevices)
            return ifail(err, i, ins, "peer %d out of range (%d devices)", ins->peer, p->ndevices);
        if (ins->peer == p->device)
            return ifail(err, i, ins, "peer %d is this device", ins->peer);
        if (ins->kind == EIN_I_COPY && ins->peer_buf < 0)
            return ifail(err, i, ins, "negative peer buffer id %d", ins->peer_buf);
        return 0;
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

/* ---- encoding --------------------------------------------------------- */

/* A kernel travels as a map of "kind" and the fields of its kind, no
 * others; the decoder requires exactly those (common/ein_ops.def names
 * both). */
static const char *const kernel_keys[K_COUNT] = {
#define EIN_KFIELD(field, key) [K_##field] = key,
#include "common/ein_ops.def"
};
#define EIN_KF(f) (1u << K_##f)
static const unsigned kernel_fields[] = {
#define EIN_KERNEL(kind, name, min_srcs, max_srcs, fields) [EIN_KERNEL_##kind] = (fields),
#include "common/ein_ops.def"
};
#undef EIN_KF
_Static_assert(sizeof kernel_fields / sizeof *kernel_fields == EIN_KERNEL_COUNT, "a kernel kind lacks its fields");

/* The wire fields of kernel kind k (none for an invalid kind: only "kind"
 * is sent, and the decoder rejects it). */
static unsigned kernel_fields_of(ein_kernel_kind k)
{
    return (int)k >= 0 && k < EIN_KERNEL_COUNT ? kernel_fields[k] : 0;
}

static int pack_ids(msgpack_packer *pk, const int32_t *ids, int32_t n)
{
    int e = msgpack_pack_array(pk, (size_t)n);
    for (int32_t j = 0; j < n; j++)
        e |= msgpack_pack_int32(pk, ids[j]);
    return e;
}

static int pack_i64s(msgpack_packer *pk, const int64_t *v, int n)
{
    int e = msgpack_pack_array(pk, (size_t)n);
    for (int j = 0; j < n; j++)
        e |= msgpack_pack_int64(pk, v[j]);
    return e;
}

static int pack_bounded_str(msgpack_packer *pk, const char *s, size_t cap)
{
    size_t n = strnlen(s, cap);
    int e = msgpack_pack_str(pk, n);
    return e | msgpack_pack_str_body(pk, s, n);
}

#define KEY(name) (e |= ein_mp_pack_cstr(pk, name))

static int pack_kernel(msgpack_packer *pk, const ein_kernel *k)
{
    int e = 0;
    unsigned f = kernel_fields_of(k->kind);
    e |= msgpack_pack_map(pk, 1 + (size_t)__builtin_popcount(f));
    KEY("kind"); e |= msgpack_pack_int(pk, (int)k->kind);
    for (int key = K_KIND + 1; key < K_COUNT; key++) {
        if (!(f & 1u << key))
            continue;
        KEY(kernel_keys[key]);
        switch (key) {
        case K_SUBSCRIPTS: e |= pack_bounded_str(pk, k->subscripts, EIN_NAME_MAX); break;
        case K_UNARY: e |= msgpack_pack_int(pk, (int)k->unary); break;
        case K_SCALAR: e |= msgpack_pack_double(pk, k->scalar); break;
        case K_BINARY: e |= msgpack_pack_int(pk, (int)k->binary); break;
        case K_AXIS: e |= msgpack_pack_int32(pk, k->axis); break;
        case K_AXES: e |= msgpack_pack_uint32(pk, k->axes); break;
        case K_REDUCE: e |= msgpack_pack_int(pk, (int)k->reduce); break;
        case K_START: e |= msgpack_pack_int64(pk, k->start); break;
        case K_EPS: e |= msgpack_pack_double(pk, k->eps); break;
        case K_THETA: e |= msgpack_pack_double(pk, k->theta); break;
        case K_HEAD_DIM: e |= msgpack_pack_int64(pk, k->head_dim); break;
        case K_GROUP: e |= msgpack_pack_int64(pk, k->group); break;
        case K_STYLE: e |= msgpack_pack_int32(pk, k->style); break;
        case K_LIST:
            e |= msgpack_pack_array(pk, (size_t)k->nlist);
            for (int32_t j = 0; j < k->nlist; j++)
                e |= msgpack_pack_int64(pk, k->list[j]);
            break;
        default: break;
        }
    }
    return e;
}

static int pack_instr(msgpack_packer *pk, const ein_instr *ins)
{
    int e = 0;
    size_t extra;
    switch (ins->kind) {
    case EIN_I_LOAD: extra = 6; break;
    case EIN_I_STORE: extra = 2; break;
    case EIN_I_KERNEL: extra = 1; break;
    case EIN_I_AGG: extra = 1; break;
    case EIN_I_COPY: extra = 3; break;
    case EIN_I_NOTIFY: extra = 2; break;
    default: extra = 0; break;
    }
    e |= msgpack_pack_map(pk, 5 + extra);
    KEY("kind"); e |= msgpack_pack_int(pk, (int)ins->kind);
    KEY("deps"); e |= pack_ids(pk, ins->deps, ins->ndeps);
    KEY("srcs"); e |= pack_ids(pk, ins->srcs, ins->nsrcs);
    KEY("dst"); e |= msgpack_pack_int32(pk, ins->dst);
    KEY("op"); e |= pack_bounded_str(pk, ins->op, EIN_NAME_MAX);
    switch (ins->kind) {
    case EIN_I_LOAD:
    case EIN_I_STORE:
        KEY("path");
        if (ins->path)
            e |= pack_bounded_str(pk, ins->path, EIN_PATH_MAX);
        else
            e |= msgpack_pack_nil(pk);
        KEY("shape"); e |= pack_i64s(pk, ins->shape, ins->rank);
        if (ins->kind == EIN_I_LOAD) {
            KEY("seed"); e |= msgpack_pack_uint64(pk, ins->seed);
            KEY("key"); e |= msgpack_pack_uint64(pk, ins->key);
            KEY("format"); e |= msgpack_pack_int(pk, (int)ins->format);
            KEY("offset"); e |= msgpack_pack_uint64(pk, ins->offset);
        }
        break;
    case EIN_I_KERNEL:
        KEY("kernel");
        e |= pack_kernel(pk, &ins->kernel);
        break;
    case EIN_I_AGG:
        KEY("agg"); e |= msgpack_pack_int(pk, (int)ins->agg);
        break;
    case EIN_I_COPY:
    case EIN_I_NOTIFY:
        KEY("peer"); e |= msgpack_pack_int32(pk, ins->peer);
        KEY("peer_buf"); e |= msgpack_pack_int32(pk, ins->peer_buf);
        if (ins->kind == EIN_I_COPY) {
            KEY("peer_offset"); e |= msgpack_pack_uint64(pk, ins->peer_offset);
        }
        break;
    default:
        break;
    }
    return e;
}

int ein_program_pack(msgpack_packer *pk, const ein_program *p, ein_error *err)
{
    int e = 0;
    /* Encoding does not validate (the receiver does, and tests encode
     * invalid programs on purpose); it only refuses what it cannot read
     * safely. */
    if (!p || p->nbuffers < 0 || p->ninstrs < 0 || (p->nbuffers && !p->buffers) || (p->ninstrs && !p->instrs))
        return ein_fail(err, EIN_EINVAL, "program: bad buffer or instruction arrays");
    for (int32_t b = 0; b < p->nbuffers; b++)
        if (p->buffers[b].box.rank < 0 || p->buffers[b].box.rank > EIN_MAX_RANK)
            return ein_fail(err, EIN_EINVAL, "program: buffer %d: rank %d out of range", b, p->buffers[b].box.rank);
    for (int32_t i = 0; i < p->ninstrs; i++) {
        const ein_instr *ins = &p->instrs[i];
        if (ins->ndeps < 0 || ins->nsrcs < 0 || (ins->ndeps && !ins->deps) || (ins->nsrcs && !ins->srcs))
            return ein_fail(err, EIN_EINVAL, "program: instr %d: bad deps/srcs arrays", i);
        if ((ins->kind == EIN_I_LOAD || ins->kind == EIN_I_STORE) && (ins->rank < 0 || ins->rank > EIN_MAX_RANK))
            return ein_fail(err, EIN_EINVAL, "program: instr %d: rank %d out of range", i, ins->rank);
        if (ins->kind == EIN_I_KERNEL && (kernel_fields_of(ins->kernel.kind) & 1u << K_LIST) &&
            (ins->kernel.nlist < 0 || (ins->kernel.nlist && !ins->kernel.list)))
            return ein_fail(err, EIN_EINVAL, "program: instr %d: bad kernel list (%d entries)", i,
                            ins->kernel.nlist);
    }
    e |= msgpack_pack_map(pk, 5);
    KEY("device"); e |= msgpack_pack_int32(pk, p->device);
    KEY("ndevices"); e |= msgpack_pack_int32(pk, p->ndevices);
    KEY("segment_bytes"); e |= msgpack_pack_uint64(pk, p->segment_bytes);
    KEY("buffers");
    e |= msgpack_pack_array(pk, (size_t)p->nbuffers);
    for (int32_t b = 0; b < p->nbuffers && !e; b++) {
        const ein_pbuffer *pb = &p->buffers[b];
        e |= msgpack_pack_map(pk, 4);
        KEY("dtype"); e |= msgpack_pack_int(pk, (int)pb->dtype);
        KEY("box");
        e |= msgpack_pack_array(pk, 2);
        e |= pack_i64s(pk, pb->box.lo, pb->box.rank);
        e |= pack_i64s(pk, pb->box.hi, pb->box.rank);
        KEY("offset"); e |= msgpack_pack_uint64(pk, pb->offset);
        KEY("bytes"); e |= msgpack_pack_uint64(pk, pb->bytes);
    }
    KEY("instrs");
    e |= msgpack_pack_array(pk, (size_t)p->ninstrs);
    for (int32_t i = 0; i < p->ninstrs && !e; i++)
        e |= pack_instr(pk, &p->instrs[i]);
    if (e)
        return ein_fail(err, EIN_ENOMEM, "program: out of memory while encoding");
    return 0;
}

#undef KEY

int ein_program_encode(const ein_program *p, void **buf, size_t *len, ein_error *err)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    int rc = ein_program_pack(&pk, p, err);
    if (rc < 0) {
        msgpack_sbuffer_destroy(&sb);
        return rc;
    }
    *buf = sb.data; /* malloc'd by the sbuffer; the caller free()s it */
    *len = sb.size;
    return 0;
}

/* ---- decoding --------------------------------------------------------- */

static const char *fmt_what(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static const char *fmt_what(char *buf, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
    return buf;
}

static int missing(ein_error *err, const char *what, const char *field)
{
    return ein_fail(err, EIN_EPROTO, "%s: missing field '%s'", what, field);
}

static int unpack_int32(const msgpack_object *o, int64_t min, int32_t *out, const char *what, ein_error *err)
{
    int64_t v;
    int rc = ein_mp_get_int(o, min, INT32_MAX, &v, what, err);
    if (rc == 0)
        *out = (int32_t)v;
    return rc;
}

/* An array of int32 ids; *out is malloc'd (NULL when empty). */
static int unpack_ids(const msgpack_object *o, int32_t **out, int32_t *n, const char *what, ein_error *err)
{
    char w[128];
    if (o->type != MSGPACK_OBJECT_ARRAY)
        return ein_fail(err, EIN_EPROTO, "%s: expected an array", what);
    uint32_t cnt = o->via.array.size;
    if (cnt > INT32_MAX)
        return ein_fail(err, EIN_EPROTO, "%s: too many entries", what);
    *n = 0;
    *out = NULL;
    if (cnt == 0)
        return 0;
    int32_t *ids = malloc((size_t)cnt * sizeof *ids);
    if (!ids)
        return ein_fail(err, EIN_ENOMEM, "%s: out of memory", what);
    for (uint32_t j = 0; j < cnt; j++) {
        int rc = unpack_int32(&o->via.array.ptr[j], INT32_MIN, &ids[j],
                              fmt_what(w, sizeof w, "%s[%u]", what, j), err);
        if (rc < 0) {
            free(ids);
            return rc;
        }
    }
    *out = ids;
    *n = (int32_t)cnt;
    return 0;
}

/* An array of at most EIN_MAX_RANK int64; returns the count in *n. */
static int unpack_dims(const msgpack_object *o, int64_t *v, int *n, int64_t min, const char *what, ein_error *err)
{
    char w[128];
    if (o->type != MSGPACK_OBJECT_ARRAY)
        return ein_fail(err, EIN_EPROTO, "%s: expected an array", what);
    if (o->via.array.size > EIN_MAX_RANK)
        return ein_fail(err, EIN_EPROTO, "%s: rank %u exceeds %d", what, o->via.array.size, EIN_MAX_RANK);
    for (uint32_t j = 0; j < o->via.array.size; j++) {
        int rc = ein_mp_get_int(&o->via.array.ptr[j], min, INT64_MAX, &v[j],
                                fmt_what(w, sizeof w, "%s[%u]", what, j), err);
        if (rc < 0)
            return rc;
    }
    *n = (int)o->via.array.size;
    return 0;
}

static int unpack_buffer(const msgpack_object *o, ein_pbuffer *b, int id, ein_error *err)
{
    static const char *const keys[] = {"dtype", "box", "offset", "bytes"};
    const msgpack_object *v[4];
    char what[64], w[96];
    int64_t iv;
    int rc, nlo, nhi;
    fmt_what(what, sizeof what, "program: buffers[%d]", id);
    if ((rc = ein_mp_fields(o, keys, v, 4, what, err)) < 0)
        return rc;
    for (int k = 0; k < 4; k++)
        if (!v[k])
            return missing(err, what, keys[k]);
    if ((rc = ein_mp_get_int(v[0], 0, EIN_DTYPE_COUNT - 1, &iv, fmt_what(w, sizeof w, "%s.dtype", what), err)) < 0)
        return rc;
    b->dtype = (ein_dtype)iv;
    fmt_what(w, sizeof w, "%s.box", what);
    if (v[1]->type != MSGPACK_OBJECT_ARRAY || v[1]->via.array.size != 2)
        return ein_fail(err, EIN_EPROTO, "%s: expected [lo, hi]", w);
    if ((rc = unpack_dims(&v[1]->via.array.ptr[0], b->box.lo, &nlo, INT64_MIN, w, err)) < 0 ||
        (rc = unpack_dims(&v[1]->via.array.ptr[1], b->box.hi, &nhi, INT64_MIN, w, err)) < 0)
        return rc;
    if (nlo != nhi)
        return ein_fail(err, EIN_EPROTO, "%s: lo and hi differ in rank", w);
    b->box.rank = nlo;
    if ((rc = ein_mp_get_uint(v[2], &b->offset, fmt_what(w, sizeof w, "%s.offset", what), err)) < 0)
        return rc;
    return ein_mp_get_uint(v[3], &b->bytes, fmt_what(w, sizeof w, "%s.bytes", what), err);
}

/* Fill *k (zeroed by the caller; k->list is the caller's to free even on
 * failure). */
static int unpack_kernel(const msgpack_object *o, ein_kernel *k, const char *what, ein_error *err)
{
    const msgpack_object *v[K_COUNT];
    char w[128];
    int64_t iv;
    int rc;
    if ((rc = ein_mp_fields(o, kernel_keys, v, K_COUNT, what, err)) < 0)
        return rc;
    if (!v[K_KIND])
        return missing(err, what, "kind");
    if ((rc = ein_mp_get_int(v[K_KIND], 0, EIN_KERNEL_COUNT - 1, &iv, fmt_what(w, sizeof w, "%s.kind", what),
                             err)) < 0)
        return rc;
    k->kind = (ein_kernel_kind)iv;
    unsigned need = kernel_fields_of(k->kind);
    for (int key = K_KIND + 1; key < K_COUNT; key++) {
        if ((need & 1u << key) && !v[key])
            return missing(err, what, kernel_keys[key]);
        if (!(need & 1u << key) && v[key])
            return ein_fail(err, EIN_EPROTO, "%s: field '%s' not expected in a %s kernel", what, kernel_keys[key],
                            ein_kernel_kind_name(k->kind));
    }
    for (int key = K_KIND + 1; key < K_COUNT; key++) {
        if (!v[key])
            continue;
        fmt_what(w, sizeof w, "%s.%s", what, kernel_keys[key]);
        switch (key) {
        case K_SUBSCRIPTS: rc = ein_mp_get_str(v[key], k->subscripts, sizeof k->subscripts, w, err); break;
        case K_UNARY:
            if ((rc = ein_mp_get_int(v[key], 0, EIN_UN_COUNT - 1, &iv, w, err)) == 0)
                k->unary = (ein_unary)iv;
            break;
        case K_SCALAR: rc = ein_mp_get_double(v[key], &k->scalar, w, err); break;
        case K_BINARY:
            if ((rc = ein_mp_get_int(v[key], 0, EIN_BIN_COUNT - 1, &iv, w, err)) == 0)
                k->binary = (ein_binary)iv;
            break;
        case K_AXIS:
            if ((rc = ein_mp_get_int(v[key], INT32_MIN, INT32_MAX, &iv, w, err)) == 0)
                k->axis = (int32_t)iv;
            break;
        case K_AXES:
            if ((rc = ein_mp_get_int(v[key], 0, UINT32_MAX, &iv, w, err)) == 0)
                k->axes = (uint32_t)iv;
            break;
        case K_REDUCE:
            if ((rc = ein_mp_get_int(v[key], 0, EIN_AGG_MAX, &iv, w, err)) == 0)
                k->reduce = (ein_agg)iv;
            break;
        case K_START: rc = ein_mp_get_int(v[key], INT64_MIN, INT64_MAX, &k->start, w, err); break;
        case K_EPS: rc = ein_mp_get_double(v[key], &k->eps, w, err); break;
        case K_THETA: rc = ein_mp_get_double(v[key], &k->theta, w, err); break;
        case K_HEAD_DIM: rc = ein_mp_get_int(v[key], INT64_MIN, INT64_MAX, &k->head_dim, w, err); break;
        case K_GROUP: rc = ein_mp_get_int(v[key], INT64_MIN, INT64_MAX, &k->group, w, err); break;
        case K_STYLE:
            if ((rc = ein_mp_get_int(v[key], INT32_MIN, INT32_MAX, &iv, w, err)) == 0)
                k->style = (int32_t)iv;
            break;
        case K_LIST: {
            /* The pre-scan bounded the count by the bytes that remain. */
            const msgpack_object *a = v[key];
            if (a->type != MSGPACK_OBJECT_ARRAY)
                return ein_fail(err, EIN_EPROTO, "%s: expected an array", w);
            if (a->via.array.size > EIN_KERNEL_LIST_MAX)
                return ein_fail(err, EIN_EPROTO, "%s: %u entries exceed %d", w, a->via.array.size,
                                EIN_KERNEL_LIST_MAX);
            if (a->via.array.size == 0)
                break;
            if (!(k->list = malloc((size_t)a->via.array.size * sizeof *k->list)))
                return ein_fail(err, EIN_ENOMEM, "%s: out of memory", w);
            for (uint32_t j = 0; j < a->via.array.size; j++) {
                char wj[160];
                if ((rc = ein_mp_get_int(&a->via.array.ptr[j], INT64_MIN, INT64_MAX, &k->list[j],
                                         fmt_what(wj, sizeof wj, "%s[%u]", w, j), err)) < 0)
                    return rc;
            }
            k->nlist = (int32_t)a->via.array.size;
            break;
        }
        default: break;
        }
        if (rc < 0)
            return rc;
    }
    return 0;
}

enum {
    I_KIND, I_DEPS, I_SRCS, I_DST, I_OP, I_KERNEL, I_AGG, I_PATH, I_SEED, I_KEY, I_SHAPE,
    I_PEER, I_PEER_BUF, I_PEER_OFFSET, I_FORMAT, I_OFFSET, I_COUNT
};
static const char *const instr_keys[I_COUNT] = {
    "kind", "deps", "srcs", "dst", "op", "kernel", "agg", "path", "seed", "key", "shape",
    "peer", "peer_buf", "peer_offset", "format", "offset",
};

/* Fill *ins (zeroed by the caller; its arrays are the caller's to free
 * even on failure). */
static int unpack_instr(const msgpack_object *o, ein_instr *ins, int id, ein_error *err)
{
    const msgpack_object *v[I_COUNT];
    char what[64], w[96];
    int64_t iv;
    int rc;
    fmt_what(what, sizeof what, "program: instrs[%d]", id);
    if ((rc = ein_mp_fields(o, instr_keys, v, I_COUNT, what, err)) < 0)
        return rc;
    for (int k = I_KIND; k <= I_OP; k++)
        if (!v[k])
            return missing(err, what, instr_keys[k]);
    if ((rc = ein_mp_get_int(v[I_KIND], 0, EIN_I_COUNT - 1, &iv, fmt_what(w, sizeof w, "%s.kind", what), err)) < 0)
        return rc;
    ins->kind = (ein_instr_kind)iv;
    /* The fields this kind needs. */
    unsigned need = 0;
    switch (ins->kind) {
    case EIN_I_LOAD:
        need = 1u << I_PATH | 1u << I_SEED | 1u << I_KEY | 1u << I_SHAPE | 1u << I_FORMAT | 1u << I_OFFSET;
        break;
    case EIN_I_STORE: need = 1u << I_PATH | 1u << I_SHAPE; break;
    case EIN_I_KERNEL: need = 1u << I_KERNEL; break;
    case EIN_I_AGG: need = 1u << I_AGG; break;
    case EIN_I_COPY: need = 1u << I_PEER | 1u << I_PEER_BUF | 1u << I_PEER_OFFSET; break;
    case EIN_I_NOTIFY: need = 1u << I_PEER | 1u << I_PEER_BUF; break;
    default: break;
    }
    for (int k = I_KERNEL; k < I_COUNT; k++) {
        if ((need & 1u << k) && !v[k])
            return missing(err, what, instr_keys[k]);
        if (!(need & 1u << k) && v[k])
            return ein_fail(err, EIN_EPROTO, "%s: field '%s' not expected in a %s instruction", what,
                            instr_keys[k], ein_instr_kind_name(ins->kind));
    }
    if ((rc = unpack_ids(v[I_DEPS], &ins->deps, &ins->ndeps, fmt_what(w, sizeof w, "%s.deps", what), err)) < 0)
        return rc;
    if ((rc = unpack_ids(v[I_SRCS], &ins->srcs, &ins->nsrcs, fmt_what(w, sizeof w, "%s.srcs", what), err)) < 0)
        return rc;
    if ((rc = unpack_int32(v[I_DST], -1, &ins->dst, fmt_what(w, sizeof w, "%s.dst", what), err)) < 0)
        return rc;
    if ((rc = ein_mp_get_str(v[I_OP], ins->op, sizeof ins->op, fmt_what(w, sizeof w, "%s.op", what), err)) < 0)
        return rc;
    if (v[I_KERNEL] && (rc = unpack_kernel(v[I_KERNEL], &ins->kernel, fmt_what(w, sizeof w, "%s.kernel", what),
                                           err)) < 0)
        return rc;
    if (v[I_AGG]) {
        if ((rc = ein_mp_get_int(v[I_AGG], 0, EIN_AGG_LAST, &iv, fmt_what(w, sizeof w, "%s.agg", what), err)) < 0)
            return rc;
        ins->agg = (ein_agg)iv;
    }
    if (v[I_PATH] && v[I_PATH]->type != MSGPACK_OBJECT_NIL) {
        fmt_what(w, sizeof w, "%s.path", what);
        if (v[I_PATH]->type != MSGPACK_OBJECT_STR)
            return ein_fail(err, EIN_EPROTO, "%s: expected a string or nil", w);
        if (v[I_PATH]->via.str.size >= EIN_PATH_MAX)
            return ein_fail(err, EIN_EPROTO, "%s: longer than %d bytes", w, EIN_PATH_MAX - 1);
        if (!(ins->path = malloc((size_t)v[I_PATH]->via.str.size + 1)))
            return ein_fail(err, EIN_ENOMEM, "%s: out of memory", w);
        if ((rc = ein_mp_get_str(v[I_PATH], ins->path, EIN_PATH_MAX, w, err)) < 0)
            return rc;
    }
    if (v[I_SEED] && (rc = ein_mp_get_uint(v[I_SEED], &ins->seed, fmt_what(w, sizeof w, "%s.seed", what), err)) < 0)
        return rc;
    if (v[I_KEY] && (rc = ein_mp_get_uint(v[I_KEY], &ins->key, fmt_what(w, sizeof w, "%s.key", what), err)) < 0)
        return rc;
    if (v[I_SHAPE] &&
        (rc = unpack_dims(v[I_SHAPE], ins->shape, &ins->rank, 0, fmt_what(w, sizeof w, "%s.shape", what), err)) < 0)
        return rc;
    if (v[I_PEER] && (rc = unpack_int32(v[I_PEER], 0, &ins->peer, fmt_what(w, sizeof w, "%s.peer", what), err)) < 0)
        return rc;
    if (v[I_PEER_BUF] &&
        (rc = unpack_int32(v[I_PEER_BUF], 0, &ins->peer_buf, fmt_what(w, sizeof w, "%s.peer_buf", what), err)) < 0)
        return rc;
    if (v[I_FORMAT]) {
        if ((rc = ein_mp_get_int(v[I_FORMAT], 0, EIN_LOAD_FORMAT_COUNT - 1, &iv,
                                 fmt_what(w, sizeof w, "%s.format", what), err)) < 0)
            return rc;
        ins->format = (ein_load_format)iv;
    }
    if (v[I_OFFSET] &&
        (rc = ein_mp_get_uint(v[I_OFFSET], &ins->offset, fmt_what(w, sizeof w, "%s.offset", what), err)) < 0)
        return rc;
    if (v[I_PEER_OFFSET] &&
        (rc = ein_mp_get_uint(v[I_PEER_OFFSET], &ins->peer_offset, fmt_what(w, sizeof w, "%s.peer_offset", what),
                              err)) < 0)
        return rc;
    return 0;
}

int ein_program_unpack(const msgpack_object *o, ein_program **out, ein_error *err)
{
    static const char *const keys[] = {"device", "ndevices", "segment_bytes", "buffers", "instrs"};
    const msgpack_object *v[5];
    ein_program *p = NULL;
    int64_t device, ndevices;
    int rc;
    if ((rc = ein_mp_fields(o, keys, v, 5, "program", err)) < 0)
        return rc;
    for (int k = 0; k < 5; k++)
        if (!v[k])
            return missing(err, "program", keys[k]);
    if ((rc = ein_mp_get_int(v[0], 0, INT32_MAX, &device, "program.device", err)) < 0 ||
        (rc = ein_mp_get_int(v[1], 1, INT32_MAX, &ndevices, "program.ndevices", err)) < 0)
        return rc;
    if (v[3]->type != MSGPACK_OBJECT_ARRAY || v[3]->via.array.size > INT32_MAX)
        return ein_fail(err, EIN_EPROTO, "program.buffers: expected an array");
    if (v[4]->type != MSGPACK_OBJECT_ARRAY || v[4]->via.array.size > INT32_MAX)
        return ein_fail(err, EIN_EPROTO, "program.instrs: expected an array");
    if (!(p = ein_program_new((int32_t)device, (int32_t)ndevices)))
        return ein_fail(err, EIN_ENOMEM, "program: out of memory");
    if ((rc = ein_mp_get_uint(v[2], &p->segment_bytes, "program.segment_bytes", err)) < 0)
        goto fail;
    uint32_t nb = v[3]->via.array.size, ni = v[4]->via.array.size;
    if (nb) {
        /* The pre-scan bounded nb by the message size. */
        if (!(p->buffers = calloc(nb, sizeof *p->buffers))) {
            rc = ein_fail(err, EIN_ENOMEM, "program: out of memory for %u buffers", nb);
            goto fail;
        }
        p->cap_buffers = p->nbuffers = (int32_t)nb;
        for (uint32_t b = 0; b < nb; b++)
            if ((rc = unpack_buffer(&v[3]->via.array.ptr[b], &p->buffers[b], (int)b, err)) < 0)
                goto fail;
    }
    if (ni) {
        if (!(p->instrs = calloc(ni, sizeof *p->instrs))) {
            rc = ein_fail(err, EIN_ENOMEM, "program: out of memory for %u instructions", ni);
            goto fail;
        }
        p->cap_instrs = (int32_t)ni;
        for (uint32_t i = 0; i < ni; i++) {
            /* Counted before filling so that ein_program_free releases a
             * half-decoded instruction's arrays. */
            p->ninstrs++;
            if ((rc = unpack_instr(&v[4]->via.array.ptr[i], &p->instrs[i], (int)i, err)) < 0)
                goto fail;
        }
    }
    if ((rc = ein_program_validate(p, err)) < 0)
        goto fail;
    *out = p;
    return 0;
fail:
    ein_program_free(p);
    return rc;
}

int ein_program_decode(const void *buf, size_t len, ein_program **out, ein_error *err)
{
    msgpack_unpacked up;
    size_t off = 0;
    int rc;
    if ((rc = ein_msgpack_prescan(buf, len, err)) < 0)
        return rc;
    msgpack_unpacked_init(&up);
    msgpack_unpack_return ur = msgpack_unpack_next(&up, buf, len, &off);
    if (ur == MSGPACK_UNPACK_NOMEM_ERROR)
        rc = ein_fail(err, EIN_ENOMEM, "program: out of memory while unpacking");
    else if (ur != MSGPACK_UNPACK_SUCCESS || off != len)
        rc = ein_fail(err, EIN_EPROTO, "program: malformed msgpack");
    else
        rc = ein_program_unpack(&up.data, out, err);
    msgpack_unpacked_destroy(&up);
    return rc;
}
