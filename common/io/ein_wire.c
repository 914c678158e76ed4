/* common/io/ein_wire.c — see ein_wire.h.
 *
 * Decoding is three steps, each of which may reject the message: a
 * pre-scan of the raw bytes (so that msgpack-c never allocates more than a
 * small multiple of the message size), msgpack-c's unpacker, and a typed
 * walk of the object that checks every field. Everything a peer sends is
 * treated as hostile: any failure is EIN_EPROTO (or EIN_ENOMEM), never a
 * crash. The pre-scan and the msgpack helpers are ein_mp.c. */
#include "common/io/ein_wire.h"

#include <math.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

/* ---- messages --------------------------------------------------------- */

static const char *const msg_names[EIN_MSG_COUNT] = {
    "hello", "program", "start", "ready", "heartbeat", "done", "error", "shutdown",
    "cancel", "cancelled", "peers",
};

const char *ein_msg_type_name(ein_msg_type t)
{
    return (int)t >= 0 && t < EIN_MSG_COUNT ? msg_names[t] : "?";
}

enum {
    F_TYPE, F_V, F_DEVICE, F_PID, F_BUFFER, F_INSTR, F_CODE, F_OP, F_TEXT,
    F_T_TOTAL, F_T_KERNEL, F_T_COPY, F_T_WAIT, F_PROGRAM, F_STORE, F_RELOAD,
    F_G_CAPTURED, F_G_LAUNCHED, F_G_FAILED, F_G_ERROR, F_T_DEVICE, F_G_SHORT, F_ADDRS, F_ENTRY,
    F_COUNT
};

static const char *const field_names[F_COUNT] = {
    "type", "v", "device", "pid", "buffer", "instr", "code", "op", "text",
    "t_total", "t_kernel", "t_copy", "t_wait", "program", "store", "reload",
    "graphs_captured", "graphs_launched", "graphs_failed", "graph_error", "t_device",
    "graphs_short", "addrs", "entry",
};

#define B(f) (1u << (f))
/* The fields each message type carries (besides type and v); all are
 * required, and no others are allowed but its msg_optional ones. */
static const unsigned msg_fields[EIN_MSG_COUNT] = {
    [EIN_MSG_HELLO] = B(F_DEVICE) | B(F_PID),
    [EIN_MSG_PROGRAM] = B(F_PROGRAM),
    [EIN_MSG_START] = B(F_STORE) | B(F_RELOAD),
    [EIN_MSG_READY] = B(F_DEVICE) | B(F_BUFFER),
    [EIN_MSG_HEARTBEAT] = B(F_DEVICE) | B(F_INSTR),
    [EIN_MSG_DONE] = B(F_DEVICE) | B(F_T_TOTAL) | B(F_T_KERNEL) | B(F_T_COPY) | B(F_T_WAIT),
    [EIN_MSG_ERROR] = B(F_DEVICE) | B(F_INSTR) | B(F_OP) | B(F_CODE) | B(F_TEXT),
    [EIN_MSG_SHUTDOWN] = 0,
    [EIN_MSG_CANCEL] = 0,
    [EIN_MSG_CANCELLED] = B(F_DEVICE),
    [EIN_MSG_PEERS] = B(F_ADDRS),
};

/* Optional fields: allowed, not required; encoded only when set. */
static const unsigned msg_optional[EIN_MSG_COUNT] = {
    [EIN_MSG_DONE] = B(F_G_CAPTURED) | B(F_G_LAUNCHED) | B(F_G_FAILED) | B(F_G_ERROR) |
                     B(F_T_DEVICE) | B(F_G_SHORT),
    [EIN_MSG_HELLO] = B(F_ADDRS),
    [EIN_MSG_START] = B(F_ENTRY),
};

/* Whether optional field i of m carries something. */
static int optional_set(const ein_msg *m, int i)
{
    switch (i) {
    case F_G_CAPTURED: return m->graphs_captured != 0;
    case F_G_LAUNCHED: return m->graphs_launched != 0;
    case F_G_FAILED: return m->graphs_failed != 0;
    case F_G_SHORT: return m->graphs_short != 0;
    case F_G_ERROR: return m->graph_error[0] != '\0';
    case F_T_DEVICE: return m->t_device != 0;
    case F_ADDRS: return m->naddrs > 0;
    case F_ENTRY: return m->entry != 0;
    default: return 0;
    }
}

/* Pack a NUL-terminated field of a fixed array, truncated to cap-1 bytes
 * if the sender left it unterminated. */
static int pack_fixed_str(msgpack_packer *pk, const char *s, size_t cap)
{
    size_t n = strnlen(s, cap - 1);
    if (msgpack_pack_str(pk, n) < 0)
        return -1;
    return msgpack_pack_str_body(pk, s, n);
}

static int pack_msg(msgpack_packer *pk, const ein_msg *m, ein_error *err)
{
    unsigned f = msg_fields[m->type];
    int e = 0;
    for (int i = F_DEVICE; i < F_COUNT; i++)
        if ((msg_optional[m->type] & B(i)) && optional_set(m, i))
            f |= B(i);
    e |= msgpack_pack_map(pk, 2 + (size_t)__builtin_popcount(f));
    e |= ein_mp_pack_cstr(pk, "type");
    e |= ein_mp_pack_cstr(pk, msg_names[m->type]);
    e |= ein_mp_pack_cstr(pk, "v");
    e |= msgpack_pack_int(pk, EIN_PROTOCOL_VERSION);
    for (int i = F_DEVICE; i < F_COUNT && !e; i++) {
        if (!(f & B(i)))
            continue;
        e |= ein_mp_pack_cstr(pk, field_names[i]);
        switch (i) {
        case F_DEVICE: e |= msgpack_pack_int32(pk, m->device); break;
        case F_PID: e |= msgpack_pack_int64(pk, m->pid); break;
        case F_BUFFER: e |= msgpack_pack_int32(pk, m->buffer); break;
        case F_INSTR: e |= msgpack_pack_int32(pk, m->instr); break;
        case F_CODE: e |= msgpack_pack_int32(pk, m->code); break;
        case F_OP: e |= pack_fixed_str(pk, m->op, sizeof m->op); break;
        case F_TEXT: e |= pack_fixed_str(pk, m->text, sizeof m->text); break;
        case F_T_TOTAL: e |= msgpack_pack_double(pk, m->t_total); break;
        case F_T_KERNEL: e |= msgpack_pack_double(pk, m->t_kernel); break;
        case F_T_COPY: e |= msgpack_pack_double(pk, m->t_copy); break;
        case F_T_WAIT: e |= msgpack_pack_double(pk, m->t_wait); break;
        case F_PROGRAM: {
            int rc = ein_program_pack(pk, m->program, err);
            if (rc < 0)
                return rc;
            break;
        }
        case F_STORE: e |= msgpack_pack_int32(pk, m->store ? 1 : 0); break;
        case F_G_CAPTURED: e |= msgpack_pack_int32(pk, m->graphs_captured); break;
        case F_G_LAUNCHED: e |= msgpack_pack_int32(pk, m->graphs_launched); break;
        case F_G_FAILED: e |= msgpack_pack_int32(pk, m->graphs_failed); break;
        case F_G_SHORT: e |= msgpack_pack_int32(pk, m->graphs_short); break;
        case F_G_ERROR: e |= pack_fixed_str(pk, m->graph_error, sizeof m->graph_error); break;
        case F_T_DEVICE: e |= msgpack_pack_int32(pk, m->t_device ? 1 : 0); break;
        case F_ENTRY: e |= msgpack_pack_int32(pk, m->entry); break;
        case F_ADDRS:
            if (m->naddrs < 0 || m->naddrs > EIN_ADDRS_MAX || (m->naddrs && !m->addrs))
                return ein_fail(err, EIN_EINVAL, "%s message: %d addresses (at most %d)",
                                msg_names[m->type], m->naddrs, EIN_ADDRS_MAX);
            e |= msgpack_pack_array(pk, (size_t)m->naddrs);
            for (int a = 0; a < m->naddrs && !e; a++) {
                if (m->addrs[a].len > EIN_ADDR_MAX)
                    return ein_fail(err, EIN_EINVAL, "%s message: an address of %u bytes "
                                    "(at most %d)", msg_names[m->type], m->addrs[a].len,
                                    EIN_ADDR_MAX);
                e |= msgpack_pack_bin(pk, m->addrs[a].len);
                e |= msgpack_pack_bin_body(pk, m->addrs[a].data, m->addrs[a].len);
            }
            break;
        case F_RELOAD:
            if (m->nreload < 0 || m->nreload > EIN_RELOAD_MAX || (m->nreload && !m->reload))
                return ein_fail(err, EIN_EINVAL, "start message: %d inputs to reload (at most %d)",
                                m->nreload, EIN_RELOAD_MAX);
            e |= msgpack_pack_array(pk, (size_t)m->nreload);
            for (int r = 0; r < m->nreload && !e; r++) {
                const char *path = m->reload[r].path ? m->reload[r].path : "";
                if (strlen(path) >= EIN_PATH_MAX)
                    return ein_fail(err, EIN_EINVAL, "start message: a path of %zu bytes (at most %d)",
                                    strlen(path), EIN_PATH_MAX - 1);
                e |= msgpack_pack_array(pk, 4);
                e |= pack_fixed_str(pk, m->reload[r].name, sizeof m->reload[r].name);
                e |= ein_mp_pack_cstr(pk, path);
                e |= msgpack_pack_int32(pk, (int32_t)m->reload[r].format);
                e |= msgpack_pack_uint64(pk, m->reload[r].offset);
            }
            break;
        }
    }
    if (e)
        return ein_fail(err, EIN_ENOMEM, "%s message: out of memory while encoding", msg_names[m->type]);
    return 0;
}

int ein_msg_encode(const ein_msg *m, void **buf, size_t *len, ein_error *err)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int rc;
    if ((int)m->type < 0 || m->type >= EIN_MSG_COUNT)
        return ein_fail(err, EIN_EINVAL, "message: invalid type %d", (int)m->type);
    if (m->type == EIN_MSG_PROGRAM && !m->program)
        return ein_fail(err, EIN_EINVAL, "program message without a program");
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    if ((rc = pack_msg(&pk, m, err)) < 0)
        goto fail;
    if (sb.size > (size_t)EIN_MSG_MAX_BYTES) {
        rc = ein_fail(err, EIN_ELIMIT, "%s message: %zu bytes exceeds the limit of %lld",
                      msg_names[m->type], sb.size, (long long)EIN_MSG_MAX_BYTES);
        goto fail;
    }
    *buf = sb.data;  /* malloc'd by the sbuffer; the caller free()s it */
    *len = sb.size;
    return 0;
fail:
    msgpack_sbuffer_destroy(&sb);
    return rc;
}

static int check_double_field(const msgpack_object *o, double *out, const char *name, ein_error *err)
{
    char what[48];
    snprintf(what, sizeof what, "message: field '%s'", name);
    int rc = ein_mp_get_double(o, out, what, err);
    if (rc < 0)
        return rc;
    if (*out < 0)
        return ein_fail(err, EIN_EPROTO, "%s: negative time", what);
    return 0;
}

static int check_int_field(const msgpack_object *o, int64_t min, int64_t max, int64_t *out,
                           const char *name, ein_error *err)
{
    /* The field's name is formatted only for the error: every READY and
     * START is decoded on a decode step's path. */
    if (ein_mp_get_int(o, min, max, out, "", NULL) == 0)
        return 0;
    char what[48];
    snprintf(what, sizeof what, "message: field '%s'", name);
    return ein_mp_get_int(o, min, max, out, what, err);
}

/* START's reload: an array of [name, path, format, offset] ("" path:
 * generated; then format NPY and offset 0). */
static int unpack_reload(const msgpack_object *o, ein_msg *m, ein_error *err)
{
    if (o->type != MSGPACK_OBJECT_ARRAY)
        return ein_fail(err, EIN_EPROTO, "start message: field 'reload': expected an array");
    if (o->via.array.size > EIN_RELOAD_MAX)
        return ein_fail(err, EIN_EPROTO, "start message: field 'reload': %u entries (at most %d)",
                        o->via.array.size, EIN_RELOAD_MAX);
    if (!o->via.array.size)
        return 0;
    if (!(m->reload = calloc(o->via.array.size, sizeof *m->reload)))
        return ein_fail(err, EIN_ENOMEM, "start message: out of memory");
    for (uint32_t r = 0; r < o->via.array.size; r++) {
        const msgpack_object *e = &o->via.array.ptr[r];
        char path[EIN_PATH_MAX];
        int rc;
        m->nreload = (int32_t)r + 1; /* so that ein_msg_clear frees what is there */
        int64_t fmt;
        uint64_t off;
        if (e->type != MSGPACK_OBJECT_ARRAY || e->via.array.size != 4)
            return ein_fail(err, EIN_EPROTO, "start message: reload entry %u: expected [name, "
                            "path, format, offset]", r);
        if ((rc = ein_mp_get_str(&e->via.array.ptr[0], m->reload[r].name, sizeof m->reload[r].name,
                                 "start message: reload name", err)) < 0 ||
            (rc = ein_mp_get_str(&e->via.array.ptr[1], path, sizeof path,
                                 "start message: reload path", err)) < 0)
            return rc;
        if (!m->reload[r].name[0])
            return ein_fail(err, EIN_EPROTO, "start message: reload entry %u: empty name", r);
        if ((rc = ein_mp_get_int(&e->via.array.ptr[2], 0, EIN_LOAD_FORMAT_COUNT - 1, &fmt,
                                 "start message: reload format", err)) < 0 ||
            (rc = ein_mp_get_uint(&e->via.array.ptr[3], &off, "start message: reload offset",
                                  err)) < 0)
            return rc;
        if ((fmt != EIN_LOAD_NPY || off) && !path[0])
            return ein_fail(err, EIN_EPROTO, "start message: reload entry %u: a generated input "
                            "with a format or offset", r);
        int raw;
        ein_load_file_dtype((ein_load_format)fmt, EIN_F32, &raw);
        if (!raw && off)
            return ein_fail(err, EIN_EPROTO, "start message: reload entry %u: an offset for a "
                            ".npy file", r);
        if (off > (uint64_t)INT64_MAX)
            return ein_fail(err, EIN_EPROTO, "start message: reload entry %u: offset too large", r);
        m->reload[r].format = (ein_load_format)fmt;
        m->reload[r].offset = off;
        if (path[0] && !(m->reload[r].path = strdup(path)))
            return ein_fail(err, EIN_ENOMEM, "start message: out of memory");
    }
    return 0;
}

/* HELLO's or PEERS' addrs: an array of bin, each at most EIN_ADDR_MAX
 * bytes; HELLO carries exactly one. */
static int unpack_addrs(const msgpack_object *o, ein_msg *m, ein_error *err)
{
    const char *what = msg_names[m->type];
    if (o->type != MSGPACK_OBJECT_ARRAY)
        return ein_fail(err, EIN_EPROTO, "%s message: field 'addrs': expected an array", what);
    uint32_t n = o->via.array.size;
    if (n > EIN_ADDRS_MAX || (m->type == EIN_MSG_HELLO && n != 1))
        return ein_fail(err, EIN_EPROTO, "%s message: field 'addrs': %u entries", what, n);
    if (!n)
        return 0;
    if (!(m->addrs = calloc(n, sizeof *m->addrs)))
        return ein_fail(err, EIN_ENOMEM, "%s message: out of memory", what);
    for (uint32_t a = 0; a < n; a++) {
        const msgpack_object *e = &o->via.array.ptr[a];
        m->naddrs = (int32_t)a + 1; /* so that ein_msg_clear frees what is there */
        if (e->type != MSGPACK_OBJECT_BIN || e->via.bin.size > EIN_ADDR_MAX)
            return ein_fail(err, EIN_EPROTO, "%s message: address %u: expected at most %d "
                            "bytes of bin", what, a, EIN_ADDR_MAX);
        m->addrs[a].len = e->via.bin.size;
        if (!e->via.bin.size)
            continue;
        if (!(m->addrs[a].data = malloc(e->via.bin.size)))
            return ein_fail(err, EIN_ENOMEM, "%s message: out of memory", what);
        memcpy(m->addrs[a].data, e->via.bin.ptr, e->via.bin.size);
    }
    return 0;
}

/* The message's type and protocol version: sets m->type; fails on a
 * missing or unknown type or a version other than EIN_PROTOCOL_VERSION. */
static int unpack_header(const msgpack_object *const v[F_COUNT], ein_msg *m, ein_error *err)
{
    int64_t iv;
    int rc;
    if (!v[F_TYPE])
        return ein_fail(err, EIN_EPROTO, "message: missing field 'type'");
    if (v[F_TYPE]->type != MSGPACK_OBJECT_STR)
        return ein_fail(err, EIN_EPROTO, "message: field 'type': expected a string");
    const char *tname = v[F_TYPE]->via.str.ptr;
    uint32_t tlen = v[F_TYPE]->via.str.size;
    int type = -1;
    for (int t = 0; t < EIN_MSG_COUNT; t++)
        if (strlen(msg_names[t]) == tlen && memcmp(msg_names[t], tname, tlen) == 0)
            type = t;
    if (type < 0)
        return ein_fail(err, EIN_EPROTO, "message: unknown type '%.*s'", (int)(tlen > 32 ? 32 : tlen), tname);
    m->type = (ein_msg_type)type;
    if (!v[F_V])
        return ein_fail(err, EIN_EPROTO, "%s message: missing field 'v'", msg_names[type]);
    if ((rc = check_int_field(v[F_V], INT64_MIN, INT64_MAX, &iv, "v", err)) < 0)
        return rc;
    if (iv != EIN_PROTOCOL_VERSION)
        return ein_fail(err, EIN_EPROTO, "%s message: protocol version %lld, expected %d",
                        msg_names[type], (long long)iv, EIN_PROTOCOL_VERSION);
    return 0;
}

/* Every field the type requires is there and none it does not allow. */
static int check_field_set(const msgpack_object *const v[F_COUNT], ein_msg_type type, ein_error *err)
{
    unsigned want = msg_fields[type], may = want | msg_optional[type];
    for (int i = F_DEVICE; i < F_COUNT; i++) {
        if ((want & B(i)) && !v[i])
            return ein_fail(err, EIN_EPROTO, "%s message: missing field '%s'", msg_names[type], field_names[i]);
        if (!(may & B(i)) && v[i])
            return ein_fail(err, EIN_EPROTO, "%s message: unexpected field '%s'", msg_names[type],
                            field_names[i]);
    }
    return 0;
}

/* An optional int32 field: when present, checked against [min, max] and
 * stored in *out; absent leaves *out alone. */
static int unpack_i32(const msgpack_object *o, int64_t min, int64_t max, int32_t *out, const char *name,
                      ein_error *err)
{
    int64_t iv;
    int rc;
    if (!o)
        return 0;
    if ((rc = check_int_field(o, min, max, &iv, name, err)) < 0)
        return rc;
    *out = (int32_t)iv;
    return 0;
}

/* The identifying fields: device, pid, buffer, instr, code (in that order). */
static int unpack_ids(const msgpack_object *const v[F_COUNT], ein_msg *m, ein_error *err)
{
    int64_t iv;
    int rc;
    if ((rc = unpack_i32(v[F_DEVICE], 0, INT32_MAX, &m->device, "device", err)) < 0)
        return rc;
    if (v[F_PID]) {
        if ((rc = check_int_field(v[F_PID], 1, INT64_MAX, &iv, "pid", err)) < 0)
            return rc;
        m->pid = iv;
    }
    if ((rc = unpack_i32(v[F_BUFFER], 0, INT32_MAX, &m->buffer, "buffer", err)) < 0 ||
        (rc = unpack_i32(v[F_INSTR], -1, INT32_MAX, &m->instr, "instr", err)) < 0 ||
        (rc = unpack_i32(v[F_CODE], INT32_MIN, -1, &m->code, "code", err)) < 0)
        return rc;
    return 0;
}

/* op, text and the four times, in that order. */
static int unpack_texts_times(const msgpack_object *const v[F_COUNT], ein_msg *m, ein_error *err)
{
    int rc;
    if (v[F_OP] && (rc = ein_mp_get_str(v[F_OP], m->op, sizeof m->op, "message: field 'op'", err)) < 0)
        return rc;
    if (v[F_TEXT] &&
        (rc = ein_mp_get_str(v[F_TEXT], m->text, sizeof m->text, "message: field 'text'", err)) < 0)
        return rc;
    if (v[F_T_TOTAL] && (rc = check_double_field(v[F_T_TOTAL], &m->t_total, "t_total", err)) < 0)
        return rc;
    if (v[F_T_KERNEL] && (rc = check_double_field(v[F_T_KERNEL], &m->t_kernel, "t_kernel", err)) < 0)
        return rc;
    if (v[F_T_COPY] && (rc = check_double_field(v[F_T_COPY], &m->t_copy, "t_copy", err)) < 0)
        return rc;
    if (v[F_T_WAIT] && (rc = check_double_field(v[F_T_WAIT], &m->t_wait, "t_wait", err)) < 0)
        return rc;
    return 0;
}

/* The program, store, reload, graph counters, t_device and graph_error
 * fields, in that order. */
static int unpack_run_fields(const msgpack_object *const v[F_COUNT], ein_msg *m, ein_error *err)
{
    int rc;
    if (v[F_PROGRAM] && (rc = ein_program_unpack(v[F_PROGRAM], &m->program, err)) < 0)
        return rc;
    if ((rc = unpack_i32(v[F_STORE], 0, 1, &m->store, "store", err)) < 0)
        return rc;
    if (v[F_RELOAD] && (rc = unpack_reload(v[F_RELOAD], m, err)) < 0)
        return rc;
    if ((rc = unpack_i32(v[F_ENTRY], 0, EIN_ENTRY_MAX, &m->entry, "entry", err)) < 0)
        return rc;
    const int gfield[4] = {F_G_CAPTURED, F_G_LAUNCHED, F_G_FAILED, F_G_SHORT};
    int32_t *gval[4] = {&m->graphs_captured, &m->graphs_launched, &m->graphs_failed,
                        &m->graphs_short};
    for (int g = 0; g < 4; g++)
        if ((rc = unpack_i32(v[gfield[g]], 0, INT32_MAX, gval[g], field_names[gfield[g]], err)) < 0)
            return rc;
    if ((rc = unpack_i32(v[F_T_DEVICE], 0, 1, &m->t_device, "t_device", err)) < 0)
        return rc;
    if (v[F_G_ERROR] && (rc = ein_mp_get_str(v[F_G_ERROR], m->graph_error, sizeof m->graph_error,
                                             "message: field 'graph_error'", err)) < 0)
        return rc;
    if (v[F_ADDRS] && (rc = unpack_addrs(v[F_ADDRS], m, err)) < 0)
        return rc;
    return 0;
}

/* Decode the message map root into *m: its type and version, the fields
 * its type allows, then each field's type and range, in field order. */
static int unpack_msg(const msgpack_object *root, ein_msg *m, ein_error *err)
{
    const msgpack_object *v[F_COUNT];
    int rc;
    if ((rc = ein_mp_fields(root, field_names, v, F_COUNT, "message", err)) < 0 ||
        (rc = unpack_header(v, m, err)) < 0 || (rc = check_field_set(v, m->type, err)) < 0 ||
        (rc = unpack_ids(v, m, err)) < 0 || (rc = unpack_texts_times(v, m, err)) < 0 ||
        (rc = unpack_run_fields(v, m, err)) < 0)
        return rc;
    return 0;
}

int ein_msg_decode(const void *buf, size_t len, ein_msg *out, ein_error *err)
{
    msgpack_unpacked up;
    ein_msg m;
    size_t off = 0;
    int rc;
    memset(&m, 0, sizeof m);
    memset(out, 0, sizeof *out);
    if (len > (size_t)EIN_MSG_MAX_BYTES)
        return ein_fail(err, EIN_EPROTO, "message: %zu bytes exceeds the limit of %lld", len,
                        (long long)EIN_MSG_MAX_BYTES);
    if ((rc = ein_msgpack_prescan(buf, len, err)) < 0)
        return rc;
    msgpack_unpacked_init(&up);
    msgpack_unpack_return ur = msgpack_unpack_next(&up, buf, len, &off);
    if (ur == MSGPACK_UNPACK_NOMEM_ERROR) {
        rc = ein_fail(err, EIN_ENOMEM, "message: out of memory while unpacking");
        goto out;
    }
    if (ur != MSGPACK_UNPACK_SUCCESS || off != len) {
        rc = ein_fail(err, EIN_EPROTO, "message: malformed msgpack");
        goto out;
    }
    if ((rc = unpack_msg(&up.data, &m, err)) < 0) {
        ein_msg_clear(&m);
        /* Anything but memory exhaustion is the sender's fault. */
        if (rc != EIN_ENOMEM && rc != EIN_EPROTO) {
            rc = EIN_EPROTO;
            if (err)
                err->code = rc;
        }
        goto out;
    }
    *out = m;
    rc = 0;
out:
    msgpack_unpacked_destroy(&up);
    return rc;
}

void ein_msg_clear(ein_msg *m)
{
    if (!m)
        return;
    ein_program_free(m->program);
    for (int r = 0; m->reload && r < m->nreload; r++)
        free(m->reload[r].path);
    free(m->reload);
    for (int a = 0; m->addrs && a < m->naddrs; a++)
        free(m->addrs[a].data);
    free(m->addrs);
    memset(m, 0, sizeof *m);
}
