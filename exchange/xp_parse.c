/* exchange/xp_parse.c — the ExProg text format (§5.2).
 *
 *   # comment (also //)
 *   GPUS: 0, 1, 2, 3
 *   PARTITIONS: G1 {0, 1} G2 {size 2}
 *   IN: A @ 0 (size: 1.0 GB); B @ 1; C @ 2 (size: 64 MB); D @ 3 (size: 512 bytes)
 *   OUT: A+B @ 0, 1; C+D @ G2
 *   A @ 0 -> 1; B @ 1 -> 0
 *   C @ 2 -> 0 -> 3
 *   A+B @ 0, 1; C+D @ G2
 *
 * A section (GPUS, PARTITIONS, IN, OUT) runs to the end of its line, or on
 * to the next line when the line ends with `;` or `,`, or until the next
 * section keyword. Every other line holds actions separated by `;`. GPUS
 * is optional (default: every site from 0 to the largest site named).
 * Sites are 0..XP_SITES_MAX-1. A path (source, relays, destinations) may
 * not visit a site twice. Sizes default to 1 GB; units are GB, MB, KB
 * (powers of 10) and bytes. Parsing is two-phase: the text is read into a
 * small syntax tree, then the program is built, so the IN count (the width
 * of every set) is known before any set is made. Every step is linear in
 * the text, except name lookups (linear in the names declared). */
#include "common/io/ein_file.h"
#include "common/base/ein_vec.h"
#include "exchange/xp_parse_int.h"
#include "exchange/xp_program.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static tok lex(lexer *L)
{
    for (;;) {
        char c = *L->p;
        if (c == ' ' || c == '\t' || c == '\r') {
            L->p++, L->col++;
        } else if (c == '#' || (c == '/' && L->p[1] == '/')) {
            while (*L->p && *L->p != '\n')
                L->p++, L->col++;
        } else {
            break;
        }
    }
    tok t = {.line = L->line, .col = L->col, .s = L->p, .len = 1};
    char c = *L->p;
    if (!c) {
        t.kind = T_EOF;
        t.len = 0;
        return t;
    }
    if (c == '\n') {
        t.kind = T_NL;
        L->p++, L->line++, L->col = 1;
        return t;
    }
    if (isalpha((unsigned char)c) || c == '_') {
        const char *q = L->p;
        while (isalnum((unsigned char)*q) || *q == '_')
            q++;
        t.kind = T_ID;
        t.len = (int)(q - L->p);
    } else if (c == '.' && L->p[1] == '.') {
        t.kind = T_DOTS;
        t.len = 2;
    } else if (isdigit((unsigned char)c) || (c == '.' && isdigit((unsigned char)L->p[1]))) {
        char *end;
        errno = 0;
        t.num = strtod(L->p, &end);
        t.len = (int)(end - L->p);
        if (t.len > 1 && L->p[t.len - 1] == '.' && L->p[t.len] == '.')
            t.len--; /* "0..3": the number is "0", then ".." (same value) */
        t.kind = T_INT;
        for (int i = 0; i < t.len; i++)
            if (!isdigit((unsigned char)L->p[i]))
                t.kind = T_NUM;
        if (errno || t.len > 15)
            t.kind = t.kind == T_INT && t.len > 9 ? T_NUM : t.kind;
    } else if (c == '-' && L->p[1] == '>') {
        t.kind = T_ARROW;
        t.len = 2;
    } else {
        switch (c) {
        case '@': t.kind = T_AT; break;
        case ',': t.kind = T_COMMA; break;
        case ';': t.kind = T_SEMI; break;
        case '+': t.kind = T_PLUS; break;
        case '{': t.kind = T_LBRACE; break;
        case '}': t.kind = T_RBRACE; break;
        case '(': t.kind = T_LPAREN; break;
        case ')': t.kind = T_RPAREN; break;
        case ':': t.kind = T_COLON; break;
        case '[': t.kind = T_LBRACK; break;
        case ']': t.kind = T_RBRACK; break;
        case '/': t.kind = T_SLASH; break;
        case '*': t.kind = T_STAR; break;
        default: t.kind = T_BAD; break;
        }
    }
    L->p += t.len;
    L->col += t.len;
    return t;
}

static void next(parser *P)
{
    P->prev = P->t;
    P->t = lex(&P->L);
}

static int fail_at(parser *P, const tok *t, const char *fmt, const char *what)
{
    char shown[40];
    if (t->kind == T_BAD && strncmp(fmt, "expected %s", 11) == 0)
        return ein_fail_at(P->err, EIN_EPARSE, P->file, t->line, t->col,
                           "unexpected character '%c', expected %s", *t->s, what);
    if (t->kind == T_BAD)
        return ein_fail_at(P->err, EIN_EPARSE, P->file, t->line, t->col,
                           "unexpected character '%c'", *t->s);
    if (t->kind == T_EOF)
        snprintf(shown, sizeof shown, "end of input");
    else if (t->kind == T_NL)
        snprintf(shown, sizeof shown, "end of line");
    else
        snprintf(shown, sizeof shown, "'%.*s'", t->len > 30 ? 30 : t->len, t->s);
    return ein_fail_at(P->err, EIN_EPARSE, P->file, t->line, t->col, fmt, what, shown);
}

static int expect(parser *P, int kind, const char *what)
{
    if (P->t.kind != kind)
        return fail_at(P, &P->t, "expected %s, found %s", what);
    next(P);
    return 0;
}

static int is_section(const parser *P, const tok *t)
{
    static const char *kw[] = {"GPUS", "PARTITIONS", "IN", "OUT"};
    if (t->kind != T_ID || *P->L.p != ':')
        return -1;
    for (int i = 0; i < 4; i++)
        if ((int)strlen(kw[i]) == t->len && strncmp(kw[i], t->s, (size_t)t->len) == 0)
            return i;
    return -1;
}

static int get_int(parser *P, const char *what, int *v)
{
    if (P->t.kind != T_INT || P->t.num > 1e6)
        return fail_at(P, &P->t, "expected %s, found %s", what);
    *v = (int)P->t.num;
    next(P);
    return 0;
}

/* A site number, 0..XP_SITES_MAX-1 (`what`: "a site number", ...). */
static int get_site_what(parser *P, const char *what, int *v)
{
    char w[80];
    snprintf(w, sizeof w, "%s from 0 to %d", what, XP_SITES_MAX - 1);
    if (P->t.kind != T_INT || P->t.num > XP_SITES_MAX - 1)
        return fail_at(P, &P->t, "expected %s, found %s", w);
    return get_int(P, w, v);
}

static int get_site(parser *P, int *v)
{
    int rc = get_site_what(P, "a site number", v);
    if (rc == 0 && *v > P->maxsite)
        P->maxsite = *v;
    return rc;
}

static int find_in(const parser *P, const tok *t)
{
    for (int i = 0; i < P->nin; i++)
        if ((int)strlen(P->in[i].name) == t->len && strncmp(P->in[i].name, t->s, (size_t)t->len) == 0)
            return i;
    return -1;
}

static int find_part(const parser *P, const tok *t)
{
    for (int i = 0; i < P->npart; i++)
        if ((int)strlen(P->part[i].name) == t->len &&
            strncmp(P->part[i].name, t->s, (size_t)t->len) == 0)
            return i;
    return -1;
}

static int copy_name(parser *P, char *dst, const char *what)
{
    if (P->t.kind != T_ID)
        return fail_at(P, &P->t, "expected %s, found %s", what);
    if (P->t.len >= XP_NAME_MAX)
        return fail_at(P, &P->t, "%s too long: %s, expected at most " XP_NAME_MAX_STR " characters",
                       what);
    memcpy(dst, P->t.s, (size_t)P->t.len);
    dst[P->t.len] = 0;
    next(P);
    return 0;
}

/* Grow an array of `n` elements of `sz` bytes by one, through ein_vec;
 * returns the new slot, zeroed, or NULL when out of memory (the array is
 * then unchanged). The syntax tree keeps no capacities: an array only
 * grows by push, so its capacity is the one ein_vec_reserve gave it,
 * push_cap(n); a list of n entries costs O(n), not O(n^2). */
static int push_cap(int n)
{
    int cap = n > 0 ? EIN_VEC_MIN_CAP : 0;
    while (cap < n && cap <= INT_MAX / 2)
        cap *= 2;
    return cap;
}

static void *push(void *arr_p, int *n, size_t sz)
{
    int cap = push_cap(*n);
    if (ein_vec_reserve(arr_p, &cap, (int64_t)*n + 1, sz) < 0)
        return NULL;
    char *na;
    memcpy(&na, arr_p, sizeof na);
    memset(na + sz * (size_t)*n, 0, sz);
    return na + sz * (size_t)(*n)++;
}

static int parse_agg(parser *P, agg *x)
{
    x->line = P->t.line;
    x->col = P->t.col;
    for (;;) {
        if (P->t.kind != T_ID)
            return fail_at(P, &P->t, "expected %s, found %s", "an atom name");
        int i = find_in(P, &P->t);
        if (i < 0)
            return fail_at(P, &P->t, "%s: %s is not declared in IN, expected an IN name",
                           "unknown atom");
        for (int k = 0; k < x->n; k++)
            if (x->el[k] == i)
                return fail_at(P, &P->t, "%s: %s appears twice in one aggregate, expected "
                           "each atom once", "atom");
        int *slot = push(&x->el, &x->n, sizeof(int));
        if (!slot)
            return xp_parse_oom(P);
        *slot = i;
        next(P);
        if (P->t.kind != T_PLUS)
            return 0;
        next(P);
    }
}

static int parse_target(parser *P, target *t)
{
    t->line = P->t.line;
    t->col = P->t.col;
    t->site = t->part = -1;
    if (P->t.kind == T_ID) {
        if ((t->part = find_part(P, &P->t)) < 0)
            return fail_at(P, &P->t, "%s: %s is not a declared partition, expected a "
                           "site number or a PARTITIONS name", "unknown target");
        next(P);
        return 0;
    }
    if (P->t.kind != T_INT)
        return fail_at(P, &P->t, "expected %s, found %s", "a site or a partition");
    return get_site(P, &t->site);
}

static int parse_targets(parser *P, target **ts, int *n)
{
    for (;;) {
        target *t = push(ts, n, sizeof **ts);
        if (!t)
            return xp_parse_oom(P);
        int rc = parse_target(P, t);
        if (rc < 0)
            return rc;
        if (P->t.kind != T_COMMA)
            return 0;
        next(P);
    }
}

/* `[c/k]` (chunk c of k), `[a..b/k]` (chunks a to b, a stream) or the
 * star form (every chunk, a stream). */
static int parse_chunk(parser *P, stmt *s)
{
    int rc, c = 0, last = -1, k = 0;
    tok first;
    next(P);
    first = P->t;
    if (P->t.kind == T_STAR) {
        next(P);
    } else {
        if ((rc = get_int(P, "a chunk number or '*'", &c)) < 0)
            return rc;
        last = c;
    }
    if (P->t.kind == T_DOTS) {
        next(P);
        if ((rc = get_int(P, "the last chunk number", &last)) < 0)
            return rc;
    }
    if ((rc = expect(P, T_SLASH, "'/'")) < 0)
        return rc;
    tok kt = P->t;
    if ((rc = get_int(P, "a chunk count", &k)) < 0)
        return rc;
    if (first.kind == T_STAR)
        last = k - 1;
    if (k < 1 || k > XP_CHUNKS_MAX || last >= k || last < c)
        return ein_fail_at(P->err, EIN_EPARSE, P->file, kt.line, kt.col,
                           "chunks %d..%d of %d: expected a count from 1 to %d and chunks "
                           "from 0 to the count - 1, the first not after the last",
                           c, last, k, XP_CHUNKS_MAX);
    if ((rc = expect(P, T_RBRACK, "']'")) < 0)
        return rc;
    s->chunk = c;
    s->run = last - c + 1;
    s->nchunks = k;
    return 0;
}

/* X @ targets, or X @ s -> [r ->]* targets */
static int parse_stmt(parser *P, stmt *s, int is_out)
{
    int rc;
    s->line = P->t.line;
    s->col = P->t.col;
    s->chunk = 0;
    s->run = 1;
    s->nchunks = 1;
    if ((rc = parse_agg(P, &s->x)) < 0)
        return rc;
    if (P->t.kind == T_LBRACK) {
        if (is_out)
            return fail_at(P, &P->t, "%s: found %s, expected '@' (OUT names whole aggregates)",
                           "no chunk in OUT");
        if ((rc = parse_chunk(P, s)) < 0)
            return rc;
    }
    if ((rc = expect(P, T_AT, "'@'")) < 0)
        return rc;
    tok at = P->t;
    if ((rc = parse_targets(P, &s->src, &s->nsrc)) < 0)
        return rc;
    if (P->t.kind != T_ARROW)
        return 0;
    if (is_out)
        return fail_at(P, &P->t, "%s: found %s, expected ';' or the end of the line "
                       "(OUT lists requirements, not actions)",
                       "no arrow in OUT");
    if (s->nsrc != 1 || s->src[0].part >= 0)
        return fail_at(P, &at, "%s: found %s, expected one site number before '->'",
                       "an action with an arrow needs one site as its source");
    next(P);
    for (;;) {
        tok first = P->t;
        target *d = NULL;
        int nd = 0;
        if ((rc = parse_targets(P, &d, &nd)) < 0) {
            free(d);
            return rc;
        }
        if (P->t.kind != T_ARROW) {
            s->dst = d;
            s->ndst = nd;
            return 0;
        }
        int site = d[0].site;
        free(d);
        if (nd != 1 || site < 0)
            return fail_at(P, &first, "%s: found %s, expected one site number between "
                           "arrows", "each relay hop must be one site");
        int *h = push(&s->hop, &s->nhop, sizeof(int));
        if (!h)
            return xp_parse_oom(P);
        *h = site;
        next(P);
    }
}

/* End of a section entry list: newline (unless after ';' or ','), EOF, or
 * the next section keyword. */
static int section_end(parser *P)
{
    if (P->t.kind == T_EOF || is_section(P, &P->t) >= 0)
        return 1;
    if (P->t.kind == T_NL) {
        int cont = P->prev.kind == T_SEMI || P->prev.kind == T_COMMA;
        while (P->t.kind == T_NL)
            next(P);
        return !cont || P->t.kind == T_EOF || is_section(P, &P->t) >= 0;
    }
    return 0;
}

static int parse_gpus(parser *P)
{
    if (P->gpus_seen)
        return fail_at(P, &P->kw, "%s: found %s, expected one GPUS section",
                       "GPUS declared twice");
    P->gpus_seen = 1;
    P->gpus_line = P->kw.line;
    P->gpus_col = P->kw.col;
    while (!section_end(P)) {
        tok t = P->t;
        int g = 0, rc;
        if ((rc = get_site_what(P, "a GPU number", &g)) < 0)
            return rc;
        if (P->gpu_listed[g])
            return fail_at(P, &t, "%s: %s is listed twice, expected each GPU once", "GPUS");
        P->gpu_listed[g] = 1;
        int *s = push(&P->gpus, &P->ngpus_decl, sizeof(int));
        if (!s)
            return xp_parse_oom(P);
        *s = g;
        if (P->t.kind == T_COMMA)
            next(P);
        else if (!section_end(P))
            return fail_at(P, &P->t, "expected %s, found %s", "',' between GPUs");
        else
            break;
    }
    if (P->ngpus_decl == 0)
        return fail_at(P, &P->t, "%s: found %s, expected a GPU number", "GPUS lists no GPU");
    return 0;
}

static int parse_partitions(parser *P)
{
    int rc;
    if (P->npart)
        return fail_at(P, &P->kw, "%s: found %s, expected one PARTITIONS section",
                       "PARTITIONS declared twice");
    P->parts_line = P->kw.line;
    P->parts_col = P->kw.col;
    while (!section_end(P)) {
        tok name = P->t;
        char nm[XP_NAME_MAX];
        if ((rc = copy_name(P, nm, "a partition name")) < 0)
            return rc;
        if (find_part(P, &name) >= 0)
            return fail_at(P, &name, "%s: %s declared twice, expected a new name",
                           "partition");
        if ((rc = expect(P, T_LBRACE, "'{'")) < 0)
            return rc;
        typeof(P->part) g = push(&P->part, &P->npart, sizeof *P->part);
        if (!g)
            return xp_parse_oom(P);
        strcpy(g->name, nm);
        g->line = name.line;
        g->col = name.col;
        if (P->t.kind == T_ID && P->t.len == 4 && strncmp(P->t.s, "size", 4) == 0) {
            next(P);
            tok k = P->t;
            if (P->t.kind == T_INT && P->t.num > XP_SITES_MAX)
                return fail_at(P, &P->t, "expected %s, found %s",
                               "a partition size of at most " XP_SITES_MAX_STR " sites");
            if ((rc = get_int(P, "a partition size", &g->size)) < 0)
                return rc;
            if (g->size <= 0)
                return fail_at(P, &k, "%s: found %s, expected a positive size",
                               "partition size");
        } else {
            for (;;) {
                tok m = P->t;
                int site = -1;
                if ((rc = get_site(P, &site)) < 0)
                    return rc;
                if (P->in_part[site])
                    return fail_at(P, &m, "%s: site %s is already in a partition, "
                                   "expected each site in one partition",
                                   "partitions must be disjoint");
                P->in_part[site] = 1;
                int *s = push(&g->mem, &g->size, sizeof(int));
                if (!s)
                    return xp_parse_oom(P);
                *s = site;
                if (P->t.kind != T_COMMA)
                    break;
                next(P);
            }
        }
        if ((rc = expect(P, T_RBRACE, "'}'")) < 0)
            return rc;
        if (P->t.kind == T_COMMA || P->t.kind == T_SEMI)
            next(P);
    }
    if (P->npart == 0)
        return fail_at(P, &P->t, "%s: found %s, expected a partition name",
                       "PARTITIONS names no partition");
    return 0;
}

static int parse_size(parser *P, double *bytes)
{
    int rc;
    next(P); /* '(' */
    if (!(P->t.kind == T_ID && P->t.len == 4 && strncmp(P->t.s, "size", 4) == 0))
        return fail_at(P, &P->t, "expected %s, found %s", "'size'");
    next(P);
    if ((rc = expect(P, T_COLON, "':'")) < 0)
        return rc;
    tok n = P->t;
    if (n.kind != T_INT && n.kind != T_NUM)
        return fail_at(P, &n, "expected %s, found %s", "a size");
    next(P);
    static const struct { const char *u; double f; } units[] = {
        {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"bytes", 1}, {"B", 1}};
    double f = 0;
    for (size_t i = 0; i < sizeof units / sizeof *units; i++)
        if (P->t.kind == T_ID && (int)strlen(units[i].u) == P->t.len &&
            strncmp(units[i].u, P->t.s, (size_t)P->t.len) == 0)
            f = units[i].f;
    if (f == 0)
        return fail_at(P, &P->t, "expected %s, found %s", "a unit (GB, MB, KB or bytes)");
    next(P);
    double b = n.num * f;
    if (!(b > 0) || !isfinite(b))
        return fail_at(P, &n, "%s: found %s, expected a positive size",
                           "a size must be positive");
    if (b > XP_SIZE_MAX)
        return fail_at(P, &n, "%s: found %s, expected a size of at most 1e15 bytes "
                       "(1000000 GB)", "size too large");
    if (b >= 1)
        b = nearbyint(b); /* sizes are whole bytes */
    *bytes = b;
    return expect(P, T_RPAREN, "')'");
}

static int parse_in(parser *P)
{
    int rc;
    if (P->in_seen)
        return fail_at(P, &P->kw, "%s: found %s, expected one IN section",
                       "IN declared twice");
    P->in_seen = 1;
    while (!section_end(P)) {
        tok name = P->t;
        char nm[XP_NAME_MAX];
        if ((rc = copy_name(P, nm, "an atom name")) < 0)
            return rc;
        if (find_in(P, &name) >= 0)
            return fail_at(P, &name, "%s: %s declared twice, expected a new name", "atom");
        static const char *kw[] = {"GPUS", "PARTITIONS", "IN", "OUT", "size"};
        int is_kw = 0;
        for (int k = 0; k < 5; k++)
            is_kw |= (int)strlen(kw[k]) == name.len && strncmp(kw[k], name.s, (size_t)name.len) == 0;
        if (is_kw)
            return fail_at(P, &name, "%s: %s is a keyword, expected a name other than "
                           "GPUS, PARTITIONS, IN, OUT and size", "atom name");
        typeof(P->in) e = push(&P->in, &P->nin, sizeof *P->in);
        if (!e)
            return xp_parse_oom(P);
        strcpy(e->name, nm);
        e->line = name.line;
        e->col = name.col;
        e->bytes = 1e9;
        if ((rc = expect(P, T_AT, "'@'")) < 0 || (rc = get_site(P, &e->site)) < 0)
            return rc;
        if (P->t.kind == T_LPAREN && (rc = parse_size(P, &e->bytes)) < 0)
            return rc;
        if (P->t.kind == T_SEMI)
            next(P);
        else if (!section_end(P))
            return fail_at(P, &P->t, "expected %s, found %s", "';' between IN entries");
        else
            break;
    }
    if (P->nin == 0)
        return fail_at(P, &P->t, "%s: found %s, expected an atom name", "IN declares no atom");
    return 0;
}

static int parse_out(parser *P)
{
    if (!P->in_seen)
        return fail_at(P, &P->kw, "%s: found %s, expected the IN section first", "OUT before IN");
    while (!section_end(P)) {
        stmt *s = push(&P->out, &P->nout, sizeof *P->out);
        if (!s)
            return xp_parse_oom(P);
        int rc = parse_stmt(P, s, 1);
        if (rc < 0)
            return rc;
        if (P->t.kind == T_SEMI)
            next(P);
        else if (!section_end(P))
            return fail_at(P, &P->t, "expected %s, found %s", "';' between OUT entries");
        else
            break;
    }
    return 0;
}

static int parse_actions_line(parser *P)
{
    if (!P->in_seen)
        return fail_at(P, &P->t, "%s: found %s, expected the IN section first", "actions before IN");
    for (;;) {
        stmt *s = push(&P->act, &P->nact, sizeof *P->act);
        if (!s)
            return xp_parse_oom(P);
        int rc = parse_stmt(P, s, 0);
        if (rc < 0)
            return rc;
        if (P->t.kind == T_SEMI) {
            next(P);
            if (P->t.kind == T_NL || P->t.kind == T_EOF)
                return 0;
            continue;
        }
        if (P->t.kind == T_NL || P->t.kind == T_EOF)
            return 0;
        return fail_at(P, &P->t, "expected %s, found %s", "';' or the end of the line");
    }
}

static void stmt_free(stmt *s)
{
    free(s->x.el);
    free(s->src);
    free(s->hop);
    free(s->dst);
}

static void parser_free(parser *P)
{
    free(P->gpus);
    for (int i = 0; i < P->npart; i++)
        free(P->part[i].mem);
    free(P->part);
    free(P->in);
    for (int i = 0; i < P->nout; i++)
        stmt_free(&P->out[i]);
    free(P->out);
    for (int i = 0; i < P->nact; i++)
        stmt_free(&P->act[i]);
    free(P->act);
}

int xp_program_parse(const char *text, const char *file, xp_program **out, ein_error *err)
{
    parser P = {0};
    int rc = 0;
    P.file = file ? file : "<input>";
    P.err = err;
    P.L = (lexer){.p = text, .line = 1, .col = 1};
    P.maxsite = -1;
    next(&P);
    while (rc == 0 && P.t.kind != T_EOF) {
        if (P.t.kind == T_NL) {
            next(&P);
            continue;
        }
        if (P.t.kind == T_BAD) {
            rc = fail_at(&P, &P.t, "%s: %s", "unexpected character");
            break;
        }
        int sec = is_section(&P, &P.t);
        if (sec < 0) {
            rc = parse_actions_line(&P);
            continue;
        }
        P.kw = P.t;
        next(&P); /* keyword */
        next(&P); /* ':' */
        switch (sec) {
        case 0: rc = parse_gpus(&P); break;
        case 1: rc = parse_partitions(&P); break;
        case 2: rc = parse_in(&P); break;
        default: rc = parse_out(&P); break;
        }
    }
    if (rc == 0 && !P.in_seen)
        rc = ein_fail_at(err, EIN_EPARSE, P.file, P.t.line, P.t.col, "no IN section, expected 'IN:' and the atoms");
    if (rc == 0)
        rc = xp_parse_build(&P, out);
    parser_free(&P);
    return rc;
}

int xp_program_parse_file(const char *path, xp_program **out, ein_error *err)
{
    char *buf = NULL;
    size_t n = 0;
    int rc = ein_file_read_all(path, XP_FILE_MAX, "an ExProg file", &buf, &n, err);
    if (rc < 0)
        return rc;
    if (strlen(buf) != n) {
        free(buf);
        return ein_fail(err, EIN_EPARSE, "%s: contains a NUL byte, expected text", path);
    }
    rc = xp_program_parse(buf, path, out, err);
    free(buf);
    return rc;
}
