/* common/ir/ein_program_wire.c — a Program on the wire (see ein_program.h).
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
 *   "head_dim","theta","list" | "group","list","window" | "group","window" | "axes","reduce" |
 *   "axis","list" | "axis","start" | "head_dim"}, "list" an int array;
 *   AGG "agg"; COPY "peer", "peer_buf", "peer_offset"; NOTIFY and WAIT "peer", "peer_buf";
 *   any kind "entries" (u32), only when non-zero (entry points).
 * Enums travel as their integer values (the protocol version "v" of the
 * envelope guards their meaning). Unknown or duplicate keys are errors. */
#include "common/ir/ein_program.h"

#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ir/ein_program_int.h"
#include "common/base/ein_mp.h"

/* ---- encoding --------------------------------------------------------- */

/* A kernel travels as a map of "kind" and the fields of its kind, no
 * others; the decoder requires exactly those (common/ir/ein_ops.def names
 * both). */
static const char *const kernel_keys[K_COUNT] = {
#define EIN_KFIELD(field, key) [K_##field] = key,
#include "common/ir/ein_ops.def"
};

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
    unsigned f = ein_kernel_fields_of(k->kind);
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
        case K_ROWS: e |= msgpack_pack_int64(pk, k->rows); break;
        case K_WINDOW: e |= msgpack_pack_int64(pk, k->window); break;
        case K_SCALING:
            e |= msgpack_pack_array(pk, 5);
            e |= msgpack_pack_double(pk, (double)k->scaling.type);
            e |= msgpack_pack_double(pk, k->scaling.factor);
            e |= msgpack_pack_double(pk, k->scaling.low_freq_factor);
            e |= msgpack_pack_double(pk, k->scaling.high_freq_factor);
            e |= msgpack_pack_double(pk, k->scaling.original_max_position);
            break;
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
    case EIN_I_WAIT: extra = 2; break;
    default: extra = 0; break;
    }
    if (ins->entries)
        extra++;
    e |= msgpack_pack_map(pk, 5 + extra);
    KEY("kind"); e |= msgpack_pack_int(pk, (int)ins->kind);
    KEY("deps"); e |= pack_ids(pk, ins->deps, ins->ndeps);
    KEY("srcs"); e |= pack_ids(pk, ins->srcs, ins->nsrcs);
    KEY("dst"); e |= msgpack_pack_int32(pk, ins->dst);
    KEY("op"); e |= pack_bounded_str(pk, ins->op, EIN_NAME_MAX);
    if (ins->entries) {
        KEY("entries"); e |= msgpack_pack_uint32(pk, ins->entries);
    }
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
    case EIN_I_WAIT:
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
        if (ins->kind == EIN_I_KERNEL && (ein_kernel_fields_of(ins->kernel.kind) & 1u << K_LIST) &&
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
    unsigned need = ein_kernel_fields_of(k->kind);
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
        case K_ROWS: rc = ein_mp_get_int(v[key], INT64_MIN, INT64_MAX, &k->rows, w, err); break;
        case K_WINDOW: rc = ein_mp_get_int(v[key], INT64_MIN, INT64_MAX, &k->window, w, err); break;
        case K_STYLE:
            if ((rc = ein_mp_get_int(v[key], INT32_MIN, INT32_MAX, &iv, w, err)) == 0)
                k->style = (int32_t)iv;
            break;
        case K_SCALING: {
            const msgpack_object *a = v[key];
            double d[5];
            if (a->type != MSGPACK_OBJECT_ARRAY || a->via.array.size != 5)
                return ein_fail(err, EIN_EPROTO, "%s: expected an array of 5 numbers", w);
            for (int j = 0; j < 5 && rc == 0; j++)
                rc = ein_mp_get_double(&a->via.array.ptr[j], &d[j], w, err);
            if (rc == 0 && !(d[0] >= 0 && d[0] < EIN_ROPE_SCALING_COUNT && d[0] == (int)d[0]))
                return ein_fail(err, EIN_EPROTO, "%s: type %g is not a rope scaling type", w, d[0]);
            if (rc == 0)
                k->scaling = (ein_rope_scaling){(int)d[0], d[1], d[2], d[3], d[4]};
            break;
        }
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
    I_PEER, I_PEER_BUF, I_PEER_OFFSET, I_FORMAT, I_OFFSET, I_ENTRIES, I_COUNT
};
static const char *const instr_keys[I_COUNT] = {
    "kind", "deps", "srcs", "dst", "op", "kernel", "agg", "path", "seed", "key", "shape",
    "peer", "peer_buf", "peer_offset", "format", "offset", "entries",
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
    case EIN_I_WAIT: need = 1u << I_PEER | 1u << I_PEER_BUF; break;
    default: break;
    }
    for (int k = I_KERNEL; k < I_COUNT; k++) {
        if (k == I_ENTRIES) /* optional for every kind */
            continue;
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
    if (v[I_ENTRIES]) {
        uint64_t ev;
        if ((rc = ein_mp_get_uint(v[I_ENTRIES], &ev, fmt_what(w, sizeof w, "%s.entries", what), err)) < 0)
            return rc;
        if (ev > UINT32_MAX)
            return ein_fail(err, EIN_EPROTO, "%s: entries %llu above 32 bits", w,
                            (unsigned long long)ev);
        ins->entries = (uint32_t)ev;
    }
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

int ein_kernel_pack(msgpack_packer *pk, const ein_kernel *k)
{
    return pack_kernel(pk, k);
}

int ein_kernel_unpack(const msgpack_object *o, ein_kernel *k, const char *what, ein_error *err)
{
    return unpack_kernel(o, k, what, err);
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
