/* common/process/ein_worker_args.c — einworker's command line: the table's rows,
 * defaults, encoder and decoder (ein_worker_args.h). */
#include "common/process/ein_worker_args.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const ein_warg_row rows[EIN_WARG_COUNT] = {
#define EIN_WARG(field, kind, flag, scope, metavar, def, help) \
    {flag, EIN_WARG_KIND_##kind, EIN_WARG_##scope, metavar, help},
#include "common/process/ein_worker_args.def"
#undef EIN_WARG
};

const ein_warg_row *ein_worker_args_row(int i)
{
    return i >= 0 && i < EIN_WARG_COUNT ? &rows[i] : NULL;
}

void ein_worker_args_init(ein_worker_args *a)
{
#define EIN_WARG(field, kind, flag, scope, metavar, def, help) a->field = def;
#include "common/process/ein_worker_args.def"
#undef EIN_WARG
}

/* ---- encoding: is a value its default, and its text ---- */

static int same_INT(int a, int b) { return a == b; }
static int same_LONG(long a, long b) { return a == b; }
static int same_DOUBLE(double a, double b) { return a == b; }
static int same_FLAG(int a, int b) { return !a == !b; }
static int same_BACKEND(const ein_backend_info *a, const ein_backend_info *b) { return a == b; }
static int same_STR(const char *a, const char *b)
{
    return a == b || (a && b && !strcmp(a, b));
}

/* The next free slot of out->num, holding the text snprintf makes. */
static char *num_slot(ein_worker_argv *out)
{
    return out->num[out->argc / 2];
}

static void put(ein_worker_argv *out, const char *flag, const char *value)
{
    out->argv[out->argc++] = (char *)flag;
    if (value)
        out->argv[out->argc++] = (char *)value;
}

static void put_INT(ein_worker_argv *out, const char *flag, int v)
{
    char *s = num_slot(out);
    snprintf(s, sizeof out->num[0], "%d", v);
    put(out, flag, s);
}

static void put_LONG(ein_worker_argv *out, const char *flag, long v)
{
    char *s = num_slot(out);
    snprintf(s, sizeof out->num[0], "%ld", v);
    put(out, flag, s);
}

static void put_DOUBLE(ein_worker_argv *out, const char *flag, double v)
{
    char *s = num_slot(out);
    for (int digits = 6; digits <= 17; digits++) {
        snprintf(s, sizeof out->num[0], "%.*g", digits, v);
        if (strtod(s, NULL) == v)
            break;
    }
    put(out, flag, s);
}

static void put_STR(ein_worker_argv *out, const char *flag, const char *v)
{
    put(out, flag, v ? v : "");
}

static void put_FLAG(ein_worker_argv *out, const char *flag, int v)
{
    (void)v;
    put(out, flag, NULL);
}

static void put_BACKEND(ein_worker_argv *out, const char *flag, const ein_backend_info *v)
{
    put(out, flag, v ? v->name : "");
}

void ein_worker_args_encode(const ein_worker_args *a, int scopes, ein_worker_argv *out)
{
    ein_worker_args d;
    ein_worker_args_init(&d);
    out->argc = 0;
#define EIN_WARG(field, kind, flag, scope, metavar, def, help)                                    \
    if ((scopes & EIN_WARG_##scope) && !same_##kind(a->field, d.field))                           \
        put_##kind(out, "--" flag, a->field);
#include "common/process/ein_worker_args.def"
#undef EIN_WARG
    out->argv[out->argc] = NULL;
}

/* ---- decoding ---- */

int ein_worker_args_options(int scopes, struct option *opts, int base)
{
    int n = 0;
    for (int i = 0; i < EIN_WARG_COUNT; i++)
        if (scopes & rows[i].scope)
            opts[n++] = (struct option){rows[i].flag,
                                        rows[i].kind == EIN_WARG_KIND_FLAG ? no_argument
                                                                            : required_argument,
                                        NULL, base + i};
    return n;
}

static int bad(ein_error *err, const char *flag, const char *arg, const char *what)
{
    return ein_fail(err, EIN_EINVAL, "--%s '%s': expected %s", flag, arg ? arg : "", what);
}

static int set_LONG(long *p, const char *flag, const char *arg, ein_error *err)
{
    char *end;
    errno = 0;
    long v = arg ? strtol(arg, &end, 10) : 0;
    if (!arg || !*arg || *end || errno)
        return bad(err, flag, arg, "an integer");
    *p = v;
    return 0;
}

static int set_INT(int *p, const char *flag, const char *arg, ein_error *err)
{
    long v = 0;
    if (set_LONG(&v, flag, arg, err) < 0 || v < INT_MIN || v > INT_MAX)
        return bad(err, flag, arg, "an integer");
    *p = (int)v;
    return 0;
}

static int set_DOUBLE(double *p, const char *flag, const char *arg, ein_error *err)
{
    char *end;
    double v = arg ? strtod(arg, &end) : 0;
    if (!arg || !*arg || *end || !isfinite(v))
        return bad(err, flag, arg, "a number");
    *p = v;
    return 0;
}

static int set_STR(const char **p, const char *flag, const char *arg, ein_error *err)
{
    if (!arg)
        return bad(err, flag, arg, "a value");
    *p = arg;
    return 0;
}

static int set_FLAG(int *p, const char *flag, const char *arg, ein_error *err)
{
    (void)flag, (void)arg, (void)err;
    *p = 1;
    return 0;
}

static int set_BACKEND(const ein_backend_info **p, const char *flag, const char *arg,
                       ein_error *err)
{
    const ein_backend_info *b = ein_backend_find(arg);
    if (!b)
        return bad(err, flag, arg, ein_backend_names());
    *p = b;
    return 0;
}

int ein_worker_args_set(ein_worker_args *a, int id, const char *arg, ein_error *err)
{
    switch (id) {
#define EIN_WARG(field, kind, flag, scope, metavar, def, help)                                    \
    case EIN_WARG_ID_##field: return set_##kind(&a->field, flag, arg, err);
#include "common/process/ein_worker_args.def"
#undef EIN_WARG
    }
    return ein_fail(err, EIN_EINVAL, "no worker option %d", id);
}

void ein_worker_args_usage(FILE *f, int scopes)
{
    for (int i = 0; i < EIN_WARG_COUNT; i++) {
        const ein_warg_row *r = &rows[i];
        if (!(scopes & r->scope))
            continue;
        int n = fprintf(f, "  --%s%s%s", r->flag, r->metavar ? " " : "",
                        r->metavar ? r->metavar : "");
        fprintf(f, "%*s", n < 16 ? 17 - n : 2, "");
        for (const char *s = r->help; *s; s++) {
            fputc(*s, f);
            if (*s == '\n')
                fprintf(f, "%17s", "");
        }
        fputc('\n', f);
    }
}
