/* planner/pl_parse_lex.c — the .ein parser's lexical layer: a line's bytes
 * checked and cut into tokens; names, dims, numbers and tensors read from
 * tokens (pl_parse_int.h). */
#include "planner/pl_parse_int.h"

/* ---- bytes and tokens of one line ---------------------------------------- */

static int is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_digit(char c) { return c >= '0' && c <= '9'; }
static int is_alnum(char c) { return is_alpha(c) || is_digit(c); }

/* Reject NUL bytes, invalid UTF-8 (overlong forms, surrogates, > U+10FFFF,
 * truncated sequences) and over-long lines. Valid non-ASCII text passes
 * here; the lexer then allows it only in comments. */
int pl_check_line_bytes(parser *p, const unsigned char *b, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned c = b[i];
        if (c == 0)
            return pl_perr(p, EIN_EPARSE, (int)i + 1, "NUL byte; expected text (a .ein program is UTF-8 text)");
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t need = 0;
        uint32_t cp = 0, min = 0;
        if (c >= 0xc2 && c <= 0xdf)
            need = 1, cp = c & 0x1f, min = 0x80;
        else if (c >= 0xe0 && c <= 0xef)
            need = 2, cp = c & 0x0f, min = 0x800;
        else if (c >= 0xf0 && c <= 0xf4)
            need = 3, cp = c & 0x07, min = 0x10000;
        int ok = need > 0;
        for (size_t k = 1; ok && k <= need; k++) {
            if (i + k >= n || (b[i + k] & 0xc0) != 0x80)
                ok = 0;
            else
                cp = (cp << 6) | (b[i + k] & 0x3f);
        }
        if (ok && (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)))
            ok = 0;
        if (!ok)
            return pl_perr(p, EIN_EPARSE, (int)i + 1,
                        "invalid UTF-8 byte 0x%02x; expected valid UTF-8", c);
        i += need + 1;
    }
    if (n > PL_LINE_MAX)
        return pl_perr(p, EIN_EPARSE, PL_LINE_MAX + 1,
                    "line is %zu bytes long; expected at most %d bytes per line", n, PL_LINE_MAX);
    return 0;
}

int pl_lex_line(parser *p, const char *b, int n)
{
    int i = 0, last_end = 0;
    p->ntok = p->pos = 0;
    while (i < n) {
        char c = b[i];
        if (c == ' ' || c == '\t') {
            i++;
            continue;
        }
        if (c == '#')
            break;
        tok *t = &p->toks[p->ntok];
        int j = i + 1;
        t->col = i + 1;
        t->s = b + i;
        if ((unsigned char)c >= 0x80)
            return pl_perr(p, EIN_EPARSE, i + 1, "non-ASCII character outside a comment; "
                        "expected ASCII (only comments may contain other text)");
        if (is_alpha(c)) {
            while (j < n && is_alnum(b[j]))
                j++;
            t->kind = T_IDENT;
        } else if (is_digit(c) || c == '.' ||
                   ((c == '+' || c == '-') && i + 1 < n && (is_digit(b[i + 1]) || b[i + 1] == '.'))) {
            /* Take the whole run, letters included, so "12x" or "1e999" is one
             * token that the integer / number checks reject with its text. */
            while (j < n && (is_alnum(b[j]) || b[j] == '.' ||
                             ((b[j] == '+' || b[j] == '-') && (b[j - 1] == 'e' || b[j - 1] == 'E'))))
                j++;
            t->kind = T_NUM;
        } else if (c == '"') {
            while (j < n && b[j] != '"') {
                unsigned char d = (unsigned char)b[j];
                if (d >= 0x80)
                    return pl_perr(p, EIN_EPARSE, j + 1, "non-ASCII character in a string; "
                                "expected einsum subscripts like \"ij,jk->ik\"");
                if (d < 0x20 || d == 0x7f)
                    return pl_perr(p, EIN_EPARSE, j + 1, "unexpected byte 0x%02x in a string; "
                                "expected einsum subscripts like \"ij,jk->ik\"", d);
                j++;
            }
            if (j >= n)
                return pl_perr(p, EIN_EPARSE, i + 1, "unterminated string; expected a closing '\"' "
                            "on the same line");
            t->kind = T_STR;
            t->s = b + i + 1;
            t->len = j - i - 1;
            j++;
        } else if (strchr("=[](),", c)) {
            t->kind = T_PUNCT;
        } else if (c > ' ' && c < 0x7f) {
            return pl_perr(p, EIN_EPARSE, i + 1, "unexpected character '%c'; expected a name, a "
                        "number, a string or one of = [ ] ( ) ,", c);
        } else {
            return pl_perr(p, EIN_EPARSE, i + 1, "unexpected byte 0x%02x; expected a name, a "
                        "number, a string or one of = [ ] ( ) ,", (unsigned char)c);
        }
        if (t->kind != T_STR)
            t->len = j - i;
        p->ntok++;
        i = last_end = j;
    }
    tok *eol = &p->toks[p->ntok];
    eol->kind = T_EOL;
    eol->s = b + last_end;
    eol->len = 0;
    eol->col = last_end + 1;    /* just after the last token: where more was expected */
    return 0;
}

/* ---- names, dims, numbers ------------------------------------------------ */

static const char *dim_name(const void *p, int k)
{
    return ((const parser *)p)->dims[k].name;
}

int pl_dim_find(const parser *p, const char *name)
{
    return ein_nameidx_find(&p->dim_index, name, dim_name, p);
}

int pl_dim_add(parser *p, const char *name, int64_t size)
{
    if (ein_vec_reserve(&p->dims, &p->capdims, (int64_t)p->ndims + 1, sizeof *p->dims) < 0)
        return ein_fail(p->err, EIN_ENOMEM, "%s: out of memory for dims", p->file);
    dim_def *d = &p->dims[p->ndims];
    snprintf(d->name, sizeof d->name, "%s", name);
    d->size = size;
    d->line = p->line;
    if (ein_nameidx_add(&p->dim_index, dim_name, p) < 0)
        return ein_fail(p->err, EIN_ENOMEM, "%s: out of memory for dims", p->file);
    p->ndims++;
    return 0;
}

/* An integer from `min` (0 or 1) to 2^40, decimal digits only: a dim size
 * (from 1), an axis or a start (from 0). */
static int tok_int_from(parser *p, const tok *t, const char *what, int min, int64_t *out)
{
    const char *kind = min ? "a positive integer" : "a non-negative integer";
    if (t->kind != T_NUM)
        return pl_perr(p, EIN_EPARSE, t->col, "expected %s (%s), got %s", what, kind, DESC(t));
    int neg = t->s[0] == '-', digits = 1, big = 0;
    int64_t v = 0;
    for (int i = neg; i < t->len; i++) {
        if (!is_digit(t->s[i])) {
            digits = 0;
            break;
        }
        v = v * 10 + (t->s[i] - '0');
        if (v > PL_DIM_MAX)
            big = 1, v = PL_DIM_MAX + 1;    /* stop growing: no overflow */
    }
    int shown = t->len > 40 ? 40 : t->len;
    if (!digits || neg == t->len)
        return pl_perr(p, EIN_EPARSE, t->col, "bad %s '%.*s'; expected %s in decimal", what,
                    shown, t->s, kind);
    if (neg)
        return pl_perr(p, EIN_EPARSE, t->col, "%s '%.*s' is negative; expected an integer from %d "
                    "to 2^40", what, shown, t->s, min);
    if (big)
        return pl_perr(p, EIN_EPARSE, t->col, "%s '%.*s%s' is too large; expected at most 2^40 (%lld)",
                    what, shown, t->s, t->len > shown ? "..." : "", (long long)PL_DIM_MAX);
    if (v < min)
        return pl_perr(p, EIN_EPARSE, t->col, "%s is 0; expected an integer from 1 to 2^40", what);
    *out = v;
    return 0;
}

int pl_tok_int(parser *p, const tok *t, const char *what, int64_t *out)
{
    return tok_int_from(p, t, what, 1, out);
}

static int nonfinite_word(const tok *t)
{
    static const char *const words[] = {"inf", "infinity", "nan"};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if ((size_t)t->len == strlen(words[i]) && strncasecmp(t->s, words[i], (size_t)t->len) == 0)
            return 1;
    return 0;
}

/* A finite decimal number: [+-] digits [. digits] [e [+-] digits]. */
int pl_tok_number(parser *p, const tok *t, const char *what, double *out)
{
    if (t->kind == T_IDENT && nonfinite_word(t))
        return pl_perr(p, EIN_EPARSE, t->col, "%s '%.*s' is not finite; expected a "
                    "finite number", what, t->len, t->s);
    if (t->kind != T_NUM)
        return pl_perr(p, EIN_EPARSE, t->col, "expected a number as the %s, got %s",
                    what, DESC(t));
    const char *s = t->s;
    int i = 0, n = t->len, mant = 0;
    if (i < n && (s[i] == '+' || s[i] == '-'))
        i++;
    while (i < n && is_digit(s[i]))
        i++, mant++;
    if (i < n && s[i] == '.') {
        i++;
        while (i < n && is_digit(s[i]))
            i++, mant++;
    }
    int ok = mant > 0;
    if (ok && i < n && (s[i] == 'e' || s[i] == 'E')) {
        int exp = 0;
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-'))
            i++;
        while (i < n && is_digit(s[i]))
            i++, exp++;
        ok = exp > 0;
    }
    if (!ok || i != n)
        return pl_perr(p, EIN_EPARSE, t->col, "bad number '%.*s'; expected a decimal number such "
                    "as 0.125 or -1e-3", t->len > 40 ? 40 : t->len, t->s);
    /* The grammar above is a subset of strtod's in the C locale, which the
     * tools never change; strtod only supplies correct rounding. */
    memcpy(p->scratch, s, (size_t)n);
    p->scratch[n] = '\0';
    double v = strtod(p->scratch, NULL);
    if (!isfinite(v))
        return pl_perr(p, EIN_EPARSE, t->col, "%s '%.*s' is not finite; expected a "
                    "finite number", what, t->len > 40 ? 40 : t->len, t->s);
    *out = v;
    return 0;
}

int pl_tok_float(parser *p, const tok *t, double *out)
{
    return pl_tok_number(p, t, "scale factor", out);
}

/* A non-negative integer argument (axis, start): digits, at most 2^40. */
int pl_tok_index(parser *p, const tok *t, const char *what, int64_t *out)
{
    return tok_int_from(p, t, what, 0, out);
}

int pl_expect_eol(parser *p, const char *after)
{
    const tok *t = pl_peek(p);
    if (t->kind != T_EOL)
        return pl_perr(p, EIN_EPARSE, t->col, "unexpected %s after %s; expected end of line",
                    DESC(t), after);
    return 0;
}

/* A builder failed: give its message the position of the statement. */
int pl_build_error(parser *p, int rc, const ein_error *e, int col)
{
    if (rc == EIN_ENOMEM)
        return ein_fail(p->err, rc, "%s: %s", p->file, e->msg);
    return pl_perr(p, rc == EIN_ESHAPE ? EIN_ESHAPE : EIN_EPARSE, col, "%s", e->msg);
}

int pl_perr(parser *p, int code, int col, const char *fmt, ...)
{
    char msg[EIN_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ein_fail_at(p->err, code, p->file, p->line, col, "%s", msg);
}

/* How a token reads in a message; long tokens are cut. */
const char *pl_tok_desc(const tok *t, char *buf, size_t n)
{
    int len = t->len > 40 ? 40 : t->len;
    const char *more = t->len > 40 ? "..." : "";
    switch (t->kind) {
    case T_EOL: snprintf(buf, n, "end of line"); break;
    case T_IDENT: snprintf(buf, n, "'%.*s%s'", len, t->s, more); break;
    case T_NUM: snprintf(buf, n, "number '%.*s%s'", len, t->s, more); break;
    case T_STR: snprintf(buf, n, "string \"%.*s%s\"", len, t->s, more); break;
    case T_PUNCT: snprintf(buf, n, "'%c'", t->s[0]); break;
    }
    return buf;
}

const tok *pl_peek(const parser *p)
{
    return &p->toks[p->pos];
}
