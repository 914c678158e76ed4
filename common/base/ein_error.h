/* common/base/ein_error.h — the one error convention of Einsummable-C.
 *
 * Every fallible function returns 0 on success or a negative EIN_E* code,
 * and fills the caller's ein_error with a human-readable message. The error
 * object is plain data owned by the caller (usually on its stack); nothing
 * in it needs freeing. A NULL `err` is allowed everywhere: the message is
 * then dropped and only the code is returned. */
#ifndef EIN_ERROR_H
#define EIN_ERROR_H

#include <stdarg.h>
#include <stddef.h>

#include "include/einsummable/ein_types.h" /* ein_error, the EIN_E* codes */

/* Record `code` and a printf-style message; returns `code`. The message is
 * one line of text: control bytes and bytes that are not UTF-8 in it
 * (echoed input, a damaged file's contents) are escaped as \xNN (ein_escape),
 * never written raw. */
int ein_fail(ein_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int ein_failv(ein_error *err, int code, const char *fmt, va_list ap);

/* Same, prefixed with a source position: "file:line:col: message". */
int ein_fail_at(ein_error *err, int code, const char *file, int line, int col,
                const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* Copy `len` bytes of `in` into `out` (a string of capacity `size` > 0) as
 * text safe to print: printable ASCII and valid UTF-8 as they are, every
 * other byte (control characters, DEL, bytes that are not UTF-8) as \xNN.
 * Stops at a byte that would not fit; returns how many bytes of `in` were
 * copied. The one place file contents quoted in messages are escaped. */
size_t ein_escape(char *out, size_t size, const char *in, size_t len);

/* Prefix the message already in `err` with "what: " (for context while an
 * error travels up); returns err->code. */
int ein_error_prefix(ein_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

void ein_error_clear(ein_error *err);

/* Append `item` to the ", "-separated list in `buf` (a string of capacity
 * `size`, "" to start), or ", ..." once when it would not fit: lists of
 * names in messages, cut short rather than overflowing. */
void ein_msg_list_add(char *buf, size_t size, const char *item);


#endif
