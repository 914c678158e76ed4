/* common/base/ein_mp.h — MessagePack below the wire formats: the pre-scan that
 * guards msgpack-c's unpacker, and checked readers of unpacked objects.
 * Used by the messages (ein_wire.h) and the Program's encoding
 * (ein_program_wire.c). No allocation: every function only reads its
 * arguments (and writes the outputs it names); failures are EIN_EPROTO
 * with a message in *err. */
#ifndef EIN_MP_H
#define EIN_MP_H

#include <stddef.h>
#include <stdint.h>

#include "common/base/ein_error.h"

/* Reject any msgpack whose declared counts exceed the bytes that remain,
 * that nests deeper than 32, or that has trailing bytes. */
int ein_msgpack_prescan(const void *buf, size_t len, ein_error *err);

/* Helpers for decoders of unpacked msgpack objects, shared by ein_wire.c
 * and ein_program_wire.c. Each checks the object's type and range and
 * fails with EIN_EPROTO naming `what`. Integers are accepted whether they arrive as
 * POSITIVE_INTEGER or NEGATIVE_INTEGER (msgpack-c decodes any non-negative
 * value as POSITIVE_INTEGER even when it was packed signed). */
struct msgpack_object;
struct msgpack_packer;
int ein_mp_get_int(const struct msgpack_object *o, int64_t min, int64_t max,
                   int64_t *out, const char *what, ein_error *err);
int ein_mp_get_uint(const struct msgpack_object *o, uint64_t *out,
                    const char *what, ein_error *err);
/* A finite number (float or integer). */
int ein_mp_get_double(const struct msgpack_object *o, double *out,
                      const char *what, ein_error *err);
/* A str of fewer than `cap` bytes without NUL bytes, copied into dst[cap]
 * and NUL-terminated. */
int ein_mp_get_str(const struct msgpack_object *o, char *dst, size_t cap,
                   const char *what, ein_error *err);
/* Look up the keys `names[0..n)` of a map whose keys must all be distinct
 * strings among them: vals[i] is the value or NULL if absent. Unknown or
 * duplicate keys are errors. */
int ein_mp_fields(const struct msgpack_object *map, const char *const *names,
                  const struct msgpack_object **vals, int n,
                  const char *what, ein_error *err);
/* Pack a str. Returns msgpack's 0 / -1. */
int ein_mp_pack_cstr(struct msgpack_packer *pk, const char *s);

#endif
