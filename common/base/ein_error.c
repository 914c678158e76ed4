/* common/base/ein_error.c — see ein_error.h. */
#include "common/base/ein_error.h"

#include <stdio.h>
#include <string.h>

/* Length of the valid UTF-8 sequence at s (n bytes left), or 0. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    size_t len;
    unsigned min;
    if (s[0] >= 0xc2 && s[0] <= 0xdf)
        len = 2, min = 0x80;
    else if (s[0] >= 0xe0 && s[0] <= 0xef)
        len = 3, min = 0x800;
    else if (s[0] >= 0xf0 && s[0] <= 0xf4)
        len = 4, min = 0x10000;
    else
        return 0;
    if (len > n)
        return 0;
    unsigned cp = s[0] & (0x7f >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

size_t ein_escape(char *out, size_t size, const char *in, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *s = (const unsigned char *)in;
    size_t o = 0, i = 0;
    if (size == 0)
        return 0;
    while (i < len) {
        size_t u = s[i] >= 0x80 ? utf8_len(s + i, len - i) : 0;
        if (u) {
            if (o + u >= size)
                break;
            memcpy(out + o, s + i, u);
            o += u, i += u;
        } else if (s[i] < 0x20 || s[i] >= 0x7f) {
            if (o + 4 >= size)
                break;
            out[o++] = '\\';
            out[o++] = 'x';
            out[o++] = hex[s[i] >> 4];
            out[o++] = hex[s[i] & 15];
            i++;
        } else {
            if (o + 1 >= size)
                break;
            out[o++] = (char)s[i++];
        }
    }
    out[o] = '\0';
    return i;
}

/* A message is one line of text: control bytes and bytes that are not
 * UTF-8, come in with echoed input (a field name from a message, a token
 * of a damaged file), are shown escaped as \xNN, never raw. */
static void one_line(char *s)
{
    char tmp[EIN_ERROR_MSG_MAX];
    ein_escape(tmp, sizeof tmp, s, strlen(s));
    memcpy(s, tmp, strlen(tmp) + 1);
}

int ein_failv(ein_error *err, int code, const char *fmt, va_list ap)
{
    if (err) {
        err->code = code;
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        one_line(err->msg);
    }
    return code;
}

int ein_fail(ein_error *err, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ein_failv(err, code, fmt, ap);
    va_end(ap);
    return code;
}

int ein_fail_at(ein_error *err, int code, const char *file, int line, int col,
                const char *fmt, ...)
{
    if (!err)
        return code;
    int n = snprintf(err->msg, sizeof err->msg, "%s:%d:%d: ", file ? file : "<input>", line, col);
    if (n < 0 || (size_t)n >= sizeof err->msg)
        n = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg + n, sizeof err->msg - (size_t)n, fmt, ap);
    va_end(ap);
    one_line(err->msg);
    err->code = code;
    return code;
}

int ein_error_prefix(ein_error *err, const char *fmt, ...)
{
    if (!err)
        return EIN_EINVAL;
    char old[EIN_ERROR_MSG_MAX];
    memcpy(old, err->msg, sizeof old);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    if ((size_t)n + 2 < sizeof err->msg) {
        memcpy(err->msg + n, ": ", 2);
        size_t room = sizeof err->msg - (size_t)n - 2;
        size_t len = strnlen(old, sizeof old - 1);
        if (len >= room)
            len = room - 1;
        memcpy(err->msg + n + 2, old, len);
        err->msg[n + 2 + len] = '\0';
    }
    one_line(err->msg);
    return err->code;
}

void ein_error_clear(ein_error *err)
{
    if (err) {
        err->code = 0;
        err->msg[0] = '\0';
    }
}

const char *ein_strerror(int code)
{
    switch (code) {
    case EIN_OK: return "success";
    case EIN_EINVAL: return "invalid argument";
    case EIN_ENOMEM: return "out of memory";
    case EIN_EIO: return "I/O error";
    case EIN_EPARSE: return "parse error";
    case EIN_ESHAPE: return "shape error";
    case EIN_EPROTO: return "protocol error";
    case EIN_ENOPLAN: return "no valid plan";
    case EIN_ETIMEOUT: return "timed out";
    case EIN_EWORKER: return "worker failed";
    case EIN_EUNSUPPORTED: return "not supported";
    case EIN_EDEVICE: return "device error";
    case EIN_ELIMIT: return "past a size limit";
    case EIN_ECANCELED: return "cancelled";
    default: return "unknown error";
    }
}

void ein_msg_list_add(char *buf, size_t size, const char *item)
{
    size_t len = strlen(buf), n = strlen(item);
    if (len >= 3 && !strcmp(buf + len - 3, "..."))
        return;
    const char *sep = len ? ", " : "";
    if (len + strlen(sep) + n + 6 <= size)   /* room for ", ..." after it */
        snprintf(buf + len, size - len, "%s%s", sep, item);
    else
        snprintf(buf + len, size - len, "%s...", sep);
}
