/* common/base/ein_mp.c — see ein_mp.h: the pre-scan of raw msgpack and the
 * helpers every decoder of unpacked msgpack objects uses (messages in
 * ein_wire.c, Programs in ein_program_wire.c). */
#include "common/base/ein_mp.h"

#include <math.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#define EIN_MSGPACK_MAX_DEPTH 32

/* ---- pre-scan --------------------------------------------------------- */

static uint64_t be_uint(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

/* One value's header as the type byte and its length field describe it. */
typedef struct mp_head {
    int hdr;        /* bytes of length field after the type byte */
    uint64_t skip;  /* payload bytes after the header */
    uint64_t items; /* contained values, for arrays and maps */
    int container, blob, map;
} mp_head;

/* Classify type byte c (read at byte `at`) into *h; fails on 0xc1 and on
 * the bytes msgpack does not define. */
static int prescan_type(unsigned c, size_t at, mp_head *h, ein_error *err)
{
    *h = (mp_head){0};
    if (c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3) {
        /* fixint, nil, bool: the type byte is the value */
    } else if (c >= 0x80 && c <= 0x8f) {
        h->container = h->map = 1;
        h->items = c & 0x0f;
    } else if (c >= 0x90 && c <= 0x9f) {
        h->container = 1;
        h->items = c & 0x0f;
    } else if (c >= 0xa0 && c <= 0xbf) {
        h->blob = 1;
        h->skip = c & 0x1f;
    } else {
        switch (c) {
        case 0xc1:
            return ein_fail(err, EIN_EPROTO, "msgpack: invalid type byte 0xc1 at byte %zu", at);
        case 0xc4: case 0xd9: h->hdr = 1; h->blob = 1; break;            /* bin8, str8 */
        case 0xc5: case 0xda: h->hdr = 2; h->blob = 1; break;            /* bin16, str16 */
        case 0xc6: case 0xdb: h->hdr = 4; h->blob = 1; break;            /* bin32, str32 */
        case 0xc7: h->hdr = 1; h->blob = 1; h->skip = 1; break;          /* ext8 (+ type) */
        case 0xc8: h->hdr = 2; h->blob = 1; h->skip = 1; break;          /* ext16 */
        case 0xc9: h->hdr = 4; h->blob = 1; h->skip = 1; break;          /* ext32 */
        case 0xca: h->skip = 4; break;                                   /* float32 */
        case 0xcb: h->skip = 8; break;                                   /* float64 */
        case 0xcc: case 0xd0: h->skip = 1; break;
        case 0xcd: case 0xd1: h->skip = 2; break;
        case 0xce: case 0xd2: h->skip = 4; break;
        case 0xcf: case 0xd3: h->skip = 8; break;
        case 0xd4: h->skip = 2; break;                                   /* fixext1 */
        case 0xd5: h->skip = 3; break;
        case 0xd6: h->skip = 5; break;
        case 0xd7: h->skip = 9; break;
        case 0xd8: h->skip = 17; break;                                  /* fixext16 */
        case 0xdc: h->hdr = 2; h->container = 1; break;                  /* array16 */
        case 0xdd: h->hdr = 4; h->container = 1; break;                  /* array32 */
        case 0xde: h->hdr = 2; h->container = h->map = 1; break;         /* map16 */
        case 0xdf: h->hdr = 4; h->container = h->map = 1; break;         /* map32 */
        default:
            return ein_fail(err, EIN_EPROTO, "msgpack: invalid type byte 0x%02x at byte %zu", c, at);
        }
    }
    return 0;
}

/* Read h's length field at *pos and check that what it announces fits in
 * the len - *pos bytes that remain (a container's entries take at least a
 * byte each); advances *pos past the length field and a blob's or
 * scalar's payload. The value's type byte was at `at`. */
static int prescan_length(const unsigned char *b, size_t len, size_t *pos, size_t at, mp_head *h,
                          ein_error *err)
{
    if (h->hdr) {
        if (len - *pos < (size_t)h->hdr)
            return ein_fail(err, EIN_EPROTO, "msgpack: truncated at byte %zu", at);
        uint64_t n = be_uint(b + *pos, h->hdr);
        *pos += (size_t)h->hdr;
        if (h->container)
            h->items = n;
        else
            h->skip += n;
    }
    if (h->container && h->map)
        h->items *= 2;
    if (h->container) {
        /* Every value takes at least one byte. */
        if (h->items > len - *pos)
            return ein_fail(err, EIN_EPROTO,
                            "msgpack: %s of %llu entries at byte %zu exceeds the %zu bytes that remain",
                            h->map ? "map" : "array",
                            (unsigned long long)(h->map ? h->items / 2 : h->items), at, len - *pos);
    } else if (h->skip > len - *pos) {
        return ein_fail(err, EIN_EPROTO,
                        h->blob ? "msgpack: length %llu at byte %zu exceeds the %zu bytes that remain"
                                : "msgpack: value needs %llu bytes at byte %zu, %zu remain",
                        (unsigned long long)h->skip, at, len - *pos);
    } else {
        *pos += (size_t)h->skip;
    }
    return 0;
}

int ein_msgpack_prescan(const void *buf, size_t len, ein_error *err)
{
    const unsigned char *b = buf;
    size_t pos = 0;
    /* left[d]: values still to read at nesting level d; level 0 is the
     * single top-level value. */
    uint64_t left[EIN_MSGPACK_MAX_DEPTH + 1];
    int depth = 0, rc;
    if (len == 0)
        return ein_fail(err, EIN_EPROTO, "msgpack: empty message");
    left[0] = 1;
    while (depth > 0 || left[0] > 0) {
        if (pos >= len)
            return ein_fail(err, EIN_EPROTO, "msgpack: truncated at byte %zu", pos);
        size_t at = pos;
        mp_head h;
        if ((rc = prescan_type(b[pos++], at, &h, err)) < 0 ||
            (rc = prescan_length(b, len, &pos, at, &h, err)) < 0)
            return rc;
        left[depth]--;
        if (h.container) {
            if (depth + 1 > EIN_MSGPACK_MAX_DEPTH)
                return ein_fail(err, EIN_EPROTO, "msgpack: nesting deeper than %d at byte %zu",
                                EIN_MSGPACK_MAX_DEPTH, at);
            if (h.items > 0)
                left[++depth] = h.items;
        }
        while (depth > 0 && left[depth] == 0)
            depth--;
    }
    if (pos != len)
        return ein_fail(err, EIN_EPROTO, "msgpack: %zu trailing bytes after the message", len - pos);
    return 0;
}

/* ---- object helpers --------------------------------------------------- */

int ein_mp_get_int(const msgpack_object *o, int64_t min, int64_t max,
                   int64_t *out, const char *what, ein_error *err)
{
    int64_t v;
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        if (o->via.u64 > (uint64_t)INT64_MAX)
            goto range;
        v = (int64_t)o->via.u64;
    } else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        v = o->via.i64;
    } else {
        return ein_fail(err, EIN_EPROTO, "%s: expected an integer", what);
    }
    if (v < min || v > max)
        goto range;
    *out = v;
    return 0;
range:
    return ein_fail(err, EIN_EPROTO, "%s: integer out of range [%lld, %lld]", what,
                    (long long)min, (long long)max);
}

int ein_mp_get_uint(const msgpack_object *o, uint64_t *out, const char *what, ein_error *err)
{
    if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        return ein_fail(err, EIN_EPROTO, "%s: expected a non-negative integer", what);
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return ein_fail(err, EIN_EPROTO, "%s: expected an integer", what);
    *out = o->via.u64;
    return 0;
}

int ein_mp_get_double(const msgpack_object *o, double *out, const char *what, ein_error *err)
{
    double v;
    switch (o->type) {
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64: v = o->via.f64; break;
    case MSGPACK_OBJECT_POSITIVE_INTEGER: v = (double)o->via.u64; break;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: v = (double)o->via.i64; break;
    default: return ein_fail(err, EIN_EPROTO, "%s: expected a number", what);
    }
    if (!isfinite(v))
        return ein_fail(err, EIN_EPROTO, "%s: number is not finite", what);
    *out = v;
    return 0;
}

int ein_mp_get_str(const msgpack_object *o, char *dst, size_t cap, const char *what, ein_error *err)
{
    if (o->type != MSGPACK_OBJECT_STR)
        return ein_fail(err, EIN_EPROTO, "%s: expected a string", what);
    size_t n = o->via.str.size;
    if (n >= cap)
        return ein_fail(err, EIN_EPROTO, "%s: string of %zu bytes is too long (max %zu)", what, n, cap - 1);
    if (n && memchr(o->via.str.ptr, '\0', n))
        return ein_fail(err, EIN_EPROTO, "%s: string contains a NUL byte", what);
    if (n)
        memcpy(dst, o->via.str.ptr, n);
    dst[n] = '\0';
    return 0;
}

int ein_mp_fields(const msgpack_object *map, const char *const *names,
                  const msgpack_object **vals, int n, const char *what, ein_error *err)
{
    for (int i = 0; i < n; i++)
        vals[i] = NULL;
    if (map->type != MSGPACK_OBJECT_MAP)
        return ein_fail(err, EIN_EPROTO, "%s: expected a map", what);
    for (uint32_t k = 0; k < map->via.map.size; k++) {
        const msgpack_object_kv *kv = &map->via.map.ptr[k];
        if (kv->key.type != MSGPACK_OBJECT_STR)
            return ein_fail(err, EIN_EPROTO, "%s: map key is not a string", what);
        const char *key = kv->key.via.str.ptr;
        uint32_t klen = kv->key.via.str.size;
        int found = -1;
        for (int i = 0; i < n; i++)
            if (strlen(names[i]) == klen && memcmp(names[i], key, klen) == 0) {
                found = i;
                break;
            }
        if (found < 0)
            return ein_fail(err, EIN_EPROTO, "%s: unknown field '%.*s'", what,
                            (int)(klen > 32 ? 32 : klen), key);
        if (vals[found])
            return ein_fail(err, EIN_EPROTO, "%s: duplicate field '%s'", what, names[found]);
        vals[found] = &kv->val;
    }
    return 0;
}

int ein_mp_pack_cstr(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);
    if (msgpack_pack_str(pk, n) < 0)
        return -1;
    return msgpack_pack_str_body(pk, s, n);
}
