/* common/ein_error.h — the one error convention of Einsummable-C.
 *
 * Every fallible function returns 0 on success or a negative EIN_E* code,
 * and fills the caller's ein_error with a human-readable message. The error
 * object is plain data owned by the caller (usually on its stack); nothing
 * in it needs freeing. A NULL `err` is allowed everywhere: the message is
 * then dropped and only the code is returned. */
#ifndef EIN_ERROR_H
#define EIN_ERROR_H

#include <stdarg.h>

enum {
    EIN_OK = 0,
    EIN_EINVAL = -1,     /* bad argument or option */
    EIN_ENOMEM = -2,     /* allocation failed */
    EIN_EIO = -3,        /* file or OS call failed */
    EIN_EPARSE = -4,     /* malformed .ein / ExProg / .npy text */
    EIN_ESHAPE = -5,     /* shapes or dtypes do not fit */
    EIN_EPROTO = -6,     /* malformed or unexpected message */
    EIN_ENOPLAN = -7,    /* the planner found no valid decomposition */
    EIN_ETIMEOUT = -8,   /* a deadline passed */
    EIN_EWORKER = -9,    /* a worker failed, crashed or hung */
    EIN_EUNSUPPORTED = -10, /* valid but not implemented yet */
    EIN_EDEVICE = -11,   /* missing or failing device */
    EIN_ELIMIT = -12,    /* valid, but past a documented size limit (bad input) */
};

#define EIN_ERROR_MSG_MAX 1024

typedef struct ein_error {
    int code;
    char msg[EIN_ERROR_MSG_MAX];
} ein_error;

/* Record `code` and a printf-style message; returns `code`. The message is
 * one line: control characters in it (echoed input) are replaced by '?'. */
int ein_fail(ein_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int ein_failv(ein_error *err, int code, const char *fmt, va_list ap);

/* Same, prefixed with a source position: "file:line:col: message". */
int ein_fail_at(ein_error *err, int code, const char *file, int line, int col,
                const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* Prefix the message already in `err` with "what: " (for context while an
 * error travels up); returns err->code. */
int ein_error_prefix(ein_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

void ein_error_clear(ein_error *err);

/* A short name for a code ("parse error", "shape error", ...). */
const char *ein_strerror(int code);

#endif
