/* common/ein_program.c — see ein_program.h.
 *
 * Encoding: a Program is a msgpack map
 *   {"device": i, "ndevices": n, "segment_bytes": u,
 *    "buffers": [{"dtype": i, "box": [[lo...], [hi...]], "offset": u, "bytes": u}...],
 *    "instrs": [{"kind": i, "deps": [...], "srcs": [...], "dst": i, "op": s, ...}...]}
 * where each instruction carries only the fields of its kind:
 *   LOAD "path" (str or nil), "seed", "key", "shape"; STORE "path", "shape";
 *   KERNEL "kernel": {"kind", and "subscripts" | "unary","scalar" | "binary"};
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

#include "common/ein_wire.h"

/* Largest buffer we accept: keeps every byte count and offset sum far from
 * 64-bit overflow. */
#define EIN_BUFFER_MAX_BYTES ((uint64_t)1 << 62)
#define EIN_BUFFER_ALIGN 256

static const char *const kind_names[EIN_I_COUNT] = {
    "load", "store", "kernel", "slice", "concat", "agg", "copy", "notify",
};
static const char *const unary_names[EIN_UN_COUNT] = {
    "relu", "silu", "gelu", "exp", "neg", "scale",
};
static const char *const binary_names[EIN_BIN_COUNT] = {"add", "sub", "mul"};
static const char *const kernel_kind_names[EIN_KERNEL_COUNT] = {"einsum", "unary", "binary"};
static const char *const agg_names[] = {"none", "sum", "max"};

const char *ein_instr_kind_name(ein_instr_kind k)
{
    return (int)k >= 0 && k < EIN_I_COUNT ? kind_names[k] : "?";
}

const char *ein_unary_name(ein_unary u)
{
    return (int)u >= 0 && u < EIN_UN_COUNT ? unary_names[u] : "?";
}

const char *ein_binary_name(ein_binary b)
{
    return (int)b >= 0 && b < EIN_BIN_COUNT ? binary_names[b] : "?";
}

const char *ein_kernel_kind_name(ein_kernel_kind k)
{
    return (int)k >= 0 && k < EIN_KERNEL_COUNT ? kernel_kind_names[k] : "?";
}

const char *ein_agg_name(ein_agg a)
{
    return (int)a >= 0 && a <= EIN_AGG_MAX ? agg_names[a] : "?";
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

/* Make room for one more element; returns 0 or -1. */
static int grow(void **arr, int32_t *cap, int32_t n, size_t elem)
{
    if (n < *cap)
        return 0;
    if (n == INT32_MAX)
        return -1;
    int32_t ncap = *cap < 16 ? 16 : (*cap > INT32_MAX / 2 ? INT32_MAX : *cap * 2);
    void *q = realloc(*arr, (size_t)ncap * elem);
    if (!q)
        return -1;
    *arr = q;
    *cap = ncap;
    return 0;
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
    if (grow((void **)&p->buffers, &p->cap_buffers, p->nbuffers, sizeof *p->buffers) < 0)
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
    if (grow((void **)&p->instrs, &p->cap_instrs, p->ninstrs, sizeof *p->instrs) < 0)
        return ein_fail(err, EIN_ENOMEM, "add_instr: out of memory");
    ein_instr c = *ins;
    c.deps = dup_ids(ins->deps, ins->ndeps, &oom);
    c.srcs = dup_ids(ins->srcs, ins->nsrcs, &oom);
    c.path = NULL;
    if (ins->path && !(c.path = strdup(ins->path)))
        oom = 1;
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

static int check_kernel(const ein_program *p, int i, const ein_instr *ins, ein_error *err)
{
    const ein_kernel *k = &ins->kernel;
    const ein_pbuffer *dst = &p->buffers[ins->dst];
    switch (k->kind) {
    case EIN_KERNEL_EINSUM:
        if (ins->nsrcs < 1 || ins->nsrcs > 2)
            return ifail(err, i, ins, "einsum takes 1 or 2 sources, has %d", ins->nsrcs);
        return check_einsum(p, i, ins, err);
    case EIN_KERNEL_UNARY:
        if (ins->nsrcs != 1)
            return ifail(err, i, ins, "unary kernel takes 1 source, has %d", ins->nsrcs);
        if ((int)k->unary < 0 || k->unary >= EIN_UN_COUNT)
            return ifail(err, i, ins, "invalid unary op %d", (int)k->unary);
        if (!isfinite(k->scalar))
            return ifail(err, i, ins, "unary scalar is not finite");
        break;
    case EIN_KERNEL_BINARY:
        if (ins->nsrcs != 2)
            return ifail(err, i, ins, "binary kernel takes 2 sources, has %d", ins->nsrcs);
        if ((int)k->binary < 0 || k->binary >= EIN_BIN_COUNT)
            return ifail(err, i, ins, "invalid binary op %d", (int)k->binary);
        break;
    default:
        return ifail(err, i, ins, "invalid kernel kind %d", (int)k->kind);
    }
    for (int j = 0; j < ins->nsrcs; j++)
        if (!ein_box_equal(&p->buffers[ins->srcs[j]].box, &dst->box))
            return ifail(err, i, ins, "source buffer %d's box differs from dst's", ins->srcs[j]);
    return 0;
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

    /* Source count and dst presence per kind: {min srcs, max srcs, has dst}. */
    static const struct { int lo, hi, dst; } arity[EIN_I_COUNT] = {
        [EIN_I_LOAD] = {0, 0, 1},   [EIN_I_STORE] = {1, 1, 0},
        [EIN_I_KERNEL] = {1, 2, 1}, [EIN_I_SLICE] = {1, 1, 1},
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
        return check_file_shape(p, i, ins, ins->dst, err);
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
        if (ins->agg != EIN_AGG_SUM && ins->agg != EIN_AGG_MAX)
            return ifail(err, i, ins, "invalid aggregation %d", (int)ins->agg);
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

static int pack_instr(msgpack_packer *pk, const ein_instr *ins)
{
    int e = 0;
    size_t extra;
    switch (ins->kind) {
    case EIN_I_LOAD: extra = 4; break;
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
        }
        break;
    case EIN_I_KERNEL: {
        const ein_kernel *k = &ins->kernel;
        KEY("kernel");
        size_t nk = k->kind == EIN_KERNEL_UNARY ? 3
                    : (k->kind == EIN_KERNEL_EINSUM || k->kind == EIN_KERNEL_BINARY) ? 2 : 1;
        e |= msgpack_pack_map(pk, nk);
        KEY("kind"); e |= msgpack_pack_int(pk, (int)k->kind);
        if (k->kind == EIN_KERNEL_EINSUM) {
            KEY("subscripts"); e |= pack_bounded_str(pk, k->subscripts, EIN_NAME_MAX);
        } else if (k->kind == EIN_KERNEL_UNARY) {
            KEY("unary"); e |= msgpack_pack_int(pk, (int)k->unary);
            KEY("scalar"); e |= msgpack_pack_double(pk, k->scalar);
        } else if (k->kind == EIN_KERNEL_BINARY) {
            KEY("binary"); e |= msgpack_pack_int(pk, (int)k->binary);
        }
        break;
    }
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

static int unpack_kernel(const msgpack_object *o, ein_kernel *k, const char *what, ein_error *err)
{
    static const char *const keys[] = {"kind", "subscripts", "unary", "scalar", "binary"};
    const msgpack_object *v[5];
    char w[128];
    int64_t iv;
    int rc;
    if ((rc = ein_mp_fields(o, keys, v, 5, what, err)) < 0)
        return rc;
    if (!v[0])
        return missing(err, what, "kind");
    if ((rc = ein_mp_get_int(v[0], 0, EIN_KERNEL_COUNT - 1, &iv, fmt_what(w, sizeof w, "%s.kind", what), err)) < 0)
        return rc;
    k->kind = (ein_kernel_kind)iv;
    if (k->kind == EIN_KERNEL_EINSUM && !v[1])
        return missing(err, what, "subscripts");
    if (k->kind == EIN_KERNEL_UNARY && (!v[2] || !v[3]))
        return missing(err, what, !v[2] ? "unary" : "scalar");
    if (k->kind == EIN_KERNEL_BINARY && !v[4])
        return missing(err, what, "binary");
    if (v[1] && (rc = ein_mp_get_str(v[1], k->subscripts, sizeof k->subscripts,
                                     fmt_what(w, sizeof w, "%s.subscripts", what), err)) < 0)
        return rc;
    if (v[2]) {
        if ((rc = ein_mp_get_int(v[2], 0, EIN_UN_COUNT - 1, &iv, fmt_what(w, sizeof w, "%s.unary", what), err)) < 0)
            return rc;
        k->unary = (ein_unary)iv;
    }
    if (v[3] && (rc = ein_mp_get_double(v[3], &k->scalar, fmt_what(w, sizeof w, "%s.scalar", what), err)) < 0)
        return rc;
    if (v[4]) {
        if ((rc = ein_mp_get_int(v[4], 0, EIN_BIN_COUNT - 1, &iv, fmt_what(w, sizeof w, "%s.binary", what), err)) < 0)
            return rc;
        k->binary = (ein_binary)iv;
    }
    return 0;
}

enum {
    I_KIND, I_DEPS, I_SRCS, I_DST, I_OP, I_KERNEL, I_AGG, I_PATH, I_SEED, I_KEY, I_SHAPE,
    I_PEER, I_PEER_BUF, I_PEER_OFFSET, I_COUNT
};
static const char *const instr_keys[I_COUNT] = {
    "kind", "deps", "srcs", "dst", "op", "kernel", "agg", "path", "seed", "key", "shape",
    "peer", "peer_buf", "peer_offset",
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
    case EIN_I_LOAD: need = 1u << I_PATH | 1u << I_SEED | 1u << I_KEY | 1u << I_SHAPE; break;
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
        if ((rc = ein_mp_get_int(v[I_AGG], 0, EIN_AGG_MAX, &iv, fmt_what(w, sizeof w, "%s.agg", what), err)) < 0)
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
