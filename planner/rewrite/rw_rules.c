/* planner/rewrite/rw_rules.c — rule files and their compiled patterns,
 * checked for shapes at load (e-matching, the backoff scheduler and the
 * saturation loop: rw_saturate.c).
 *
 * Rule text (docs/rewrite.md):
 *   (rule NAME LHS RHS [(if COND...)])
 *   (multi NAME (LHS1 LHS2) (RHS1 RHS2) [(if COND...)])
 *   pattern := ?var | (OP PARAM... PATTERN...)
 *   OP: matmul (0 params, 2 children), add (0, 2), concat (1: axis, 1..16),
 *       slice (3: axis start end, 1), unary (2: function scalar, 1),
 *       binary (1: function, 2), transpose (0, 1)
 *   PARAM := INT | ?ivar | (dim ?var PARAM) | (rank ?var) | (+ PARAM PARAM)
 *          | (- PARAM PARAM)
 *   COND := (= PARAM PARAM) | (<= PARAM PARAM) | (< PARAM PARAM)
 * `#` or `;` starts a comment. Integer variables are bound on the left;
 * `dim`, `rank` and arithmetic appear on the right and in conditions only.
 * A rule applies to a match only where all its conditions hold. */
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/io/ein_file.h"
#include "common/base/ein_vec.h"
#include "planner/rewrite/rw_rules.h"
#include "planner/rewrite/rw_egraph.h"

#include "planner/rewrite/rw_rules_int.h"

/* ---- tokenizer and parser ------------------------------------------- */

typedef struct rw_parser {
    const char *s, *fname;
    size_t pos;
    int line, col;
    char tok[RW_NAME_MAX];
    int tline, tcol;
    int kind; /* 0 end, '(' ')', 'a' atom */
    pl_rw_rules *r;
    rw_rule *rule;
    ein_error *err;
} rw_parser;

static int perr(rw_parser *p, int code, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static int perr(rw_parser *p, int code, int line, int col, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ein_fail_at(p->err, code, p->fname, line, col, "%s", msg);
}

static int next(rw_parser *p)
{
    for (;;) {
        char c = p->s[p->pos];
        if (c == '\n') {
            p->pos++, p->line++, p->col = 1;
        } else if (c == ' ' || c == '\t' || c == '\r') {
            p->pos++, p->col++;
        } else if (c == '#' || c == ';') {
            while (p->s[p->pos] && p->s[p->pos] != '\n')
                p->pos++;
        } else
            break;
    }
    p->tline = p->line;
    p->tcol = p->col;
    char c = p->s[p->pos];
    if (!c)
        return p->kind = 0;
    if (c == '(' || c == ')') {
        p->pos++, p->col++;
        return p->kind = c;
    }
    size_t n = 0;
    while ((c = p->s[p->pos]) && c != '(' && c != ')' && c != ' ' && c != '\t' && c != '\n' &&
           c != '\r' && c != '#' && c != ';') {
        if ((unsigned char)c < 0x21 || (unsigned char)c > 0x7e) {
            char code[8];
            snprintf(code, sizeof code, "%u", (unsigned char)c);
            return perr(p, EIN_EPARSE, p->line, p->col, "unexpected character (byte %s); expected "
                        "printable ASCII", code);
        }
        if (n + 1 >= sizeof p->tok)
            return perr(p, EIN_EPARSE, p->tline, p->tcol, "token too long; expected at most %d characters",
                            RW_NAME_MAX - 1);
        p->tok[n++] = c;
        p->pos++, p->col++;
    }
    p->tok[n] = '\0';
    return p->kind = 'a';
}

static int expect(rw_parser *p, int kind, const char *what)
{
    int rc = next(p);
    if (rc < 0)
        return rc;
    if (p->kind != kind)
        return perr(p, EIN_EPARSE, p->tline, p->tcol, "expected %s", what);
    return 0;
}

static int parse_int(const char *t, int64_t *v)
{
    char *end;
    if (!t[0])
        return 0;
    long long x = strtoll(t, &end, 10);
    if (*end || ((t[0] < '0' || t[0] > '9') && !(t[0] == '-' && t[1] >= '0' && t[1] <= '9')))
        return 0;
    *v = x;
    return 1;
}

/* Find or (on the left) create variable `name`; `is_int` its kind. */
static int var_ref(rw_parser *p, const char *name, int is_int, int lhs)
{
    rw_rule *ru = p->rule;
    for (int i = 0; i < ru->nvars; i++)
        if (strcmp(ru->var_name[i], name) == 0) {
            if (ru->var_int[i] != is_int)
                return perr(p, EIN_EPARSE, p->tline, p->tcol,
                            "variable %s is used both as a tensor and as an integer; "
                    "expected one kind per variable", name);
            return i;
        }
    if (!lhs)
        return perr(p, EIN_EPARSE, p->tline, p->tcol,
                    "variable %s is not bound by the left side; expected a "
                    "variable of the left side", name);
    if (ru->nvars == RW_MAX_VARS)
        return perr(p, EIN_EPARSE, p->tline, p->tcol, "too many variables (at %s); expected at most %d",
                    name, RW_MAX_VARS);
    snprintf(ru->var_name[ru->nvars], RW_NAME_MAX, "%s", name);
    ru->var_int[ru->nvars] = is_int;
    return ru->nvars++;
}

static int new_ex(rw_parser *p, rw_pexpr e)
{
    if (ein_vec_reserve(&p->r->ex, &p->r->cap_ex, (int64_t)p->r->nex + 1, sizeof *p->r->ex) < 0)
        return ein_fail(p->err, EIN_ENOMEM, "rules: out of memory");
    p->r->ex[p->r->nex] = e;
    return p->r->nex++;
}

/* A tensor variable ("?x") next: its variable id into *var. */
static int expect_tensor_var(rw_parser *p, int *var)
{
    int rc;
    if ((rc = expect(p, 'a', "a tensor variable")) < 0)
        return rc;
    if (p->tok[0] != '?')
        return perr(p, EIN_EPARSE, p->tline, p->tcol, "expected a tensor variable, found %s", p->tok);
    if ((*var = var_ref(p, p->tok, 0, 0)) < 0)
        return *var;
    return 0;
}

/* A parameter; the current token is its first. */
static int parse_param(rw_parser *p, int lhs)
{
    int64_t v;
    if (p->kind == 'a' && parse_int(p->tok, &v))
        return new_ex(p, (rw_pexpr){.kind = PX_LIT, .v = v});
    if (p->kind == 'a' && p->tok[0] == '?') {
        int var = var_ref(p, p->tok, 1, lhs);
        return var < 0 ? var : new_ex(p, (rw_pexpr){.kind = PX_VAR, .var = var});
    }
    if (p->kind != '(')
        return perr(p, EIN_EPARSE, p->tline, p->tcol, "expected a parameter, found '%s'",
                    p->kind == 'a' ? p->tok : ")");
    int rc, line = p->tline, col = p->tcol;
    if ((rc = expect(p, 'a', "dim, rank, + or -")) < 0)
        return rc;
    if (lhs)
        return perr(p, EIN_EPARSE, line, col, "parameter expressions (%s) are for the right "
                    "side; expected an integer variable on the left", p->tok);
    rw_pexpr e = {0};
    if (strcmp(p->tok, "dim") == 0) {
        if ((rc = expect_tensor_var(p, &e.var)) < 0)
            return rc;
        if ((rc = next(p)) < 0)
            return rc;
        int64_t ax;
        if (p->kind == 'a' && parse_int(p->tok, &ax) && (ax < 0 || ax >= EIN_MAX_RANK))
            return perr(p, EIN_EPARSE, p->tline, p->tcol, "bad axis %s; expected 0 to %d", p->tok,
                        EIN_MAX_RANK - 1);
        if ((e.a = parse_param(p, lhs)) < 0)
            return e.a;
        e.kind = PX_DIM;
    } else if (strcmp(p->tok, "rank") == 0) {
        if ((rc = expect_tensor_var(p, &e.var)) < 0)
            return rc;
        e.kind = PX_RANK;
    } else if (strcmp(p->tok, "+") == 0 || strcmp(p->tok, "-") == 0) {
        e.kind = p->tok[0] == '+' ? PX_ADD : PX_SUB;
        if ((rc = next(p)) < 0 || (e.a = parse_param(p, lhs)) < 0)
            return rc < 0 ? rc : e.a;
        if ((rc = next(p)) < 0 || (e.b = parse_param(p, lhs)) < 0)
            return rc < 0 ? rc : e.b;
    } else
        return perr(p, EIN_EPARSE, p->tline, p->tcol, "unknown parameter function %s; expected dim, "
                    "rank, + or -", p->tok);
    if ((rc = expect(p, ')', "')'")) < 0)
        return rc;
    return new_ex(p, e);
}

/* Parameters and operands (-1: 1..16) of an operator of the language. */
static int op_nparams(int op)
{
    switch (op) {
    case RW_CONCAT: case RW_BINARY: return 1;
    case RW_UNARY: return 2;
    case RW_SLICE: return 3;
    default: return 0;
    }
}

static int op_noperands(int op)
{
    switch (op) {
    case RW_CONCAT: return -1;
    case RW_SLICE: case RW_UNARY: case RW_TRANSPOSE: return 1;
    default: return 2;
    }
}

/* A pattern; the current token is its first. Returns its index. */
static int parse_pat(rw_parser *p, int lhs, int *budget)
{
    rw_pat pat = {.var = -1};
    int rc, line = p->tline, col = p->tcol;
    if (--*budget < 0)
        return perr(p, EIN_EPARSE, line, col, "pattern too large; expected at most %d nodes",
                    RW_PAT_MAX_NODES);
    if (p->kind == 'a') {
        if (p->tok[0] != '?')
            return perr(p, EIN_EPARSE, line, col, "expected ?variable or '(', found %s", p->tok);
        if ((pat.var = var_ref(p, p->tok, 0, lhs)) < 0)
            return pat.var;
    } else if (p->kind == '(') {
        if ((rc = expect(p, 'a', "an operator")) < 0)
            return rc;
        pat.op = rw_op_by_name(p->tok);
        if (pat.op < 0)
            return perr(p, EIN_EPARSE, p->tline, p->tcol,
                        "unknown operator %s; expected matmul, add, concat, slice, unary, "
                        "binary or transpose", p->tok);
        pat.np = op_nparams(pat.op);
        for (int i = 0; i < pat.np; i++) {
            if ((rc = next(p)) < 0 || (pat.pe[i] = parse_param(p, lhs)) < 0)
                return rc < 0 ? rc : pat.pe[i];
        }
        for (;;) {
            if ((rc = next(p)) < 0)
                return rc;
            if (p->kind == ')')
                break;
            if (p->kind == 0)
                return perr(p, EIN_EPARSE, line, col, "unclosed '(' of %s", rw_op_name(pat.op));
            if (pat.nch == PL_MAX_INPUTS)
                return perr(p, EIN_EPARSE, p->tline, p->tcol, "too many operands; expected at most %d",
                            PL_MAX_INPUTS);
            int c = parse_pat(p, lhs, budget);
            if (c < 0)
                return c;
            pat.ch[pat.nch++] = c;
        }
        int want = op_noperands(pat.op);
        if ((want > 0 && pat.nch != want) || pat.nch < 1) {
            char m[128];
            snprintf(m, sizeof m, "%s takes %d params and %s operand(s), found %d operand(s); "
                     "expected the operands it takes",
                     rw_op_name(pat.op), pat.np, want > 0 ? (want == 1 ? "1" : "2") : "1..16",
                     pat.nch);
            return perr(p, EIN_EPARSE, line, col, "%s", m);
        }
    } else
        return perr(p, EIN_EPARSE, line, col, "expected a pattern, found %s",
                    p->kind == ')' ? "')'" : "the end of the file");
    if (ein_vec_reserve(&p->r->pats, &p->r->cap_pats, (int64_t)p->r->npats + 1,
                        sizeof *p->r->pats) < 0)
        return ein_fail(p->err, EIN_ENOMEM, "rules: out of memory");
    p->r->pats[p->r->npats] = pat;
    return p->r->npats++;
}

static uint32_t pat_vars(const pl_rw_rules *r, int pi)
{
    const rw_pat *pt = &r->pats[pi];
    if (pt->var >= 0)
        return 1u << pt->var;
    uint32_t m = 0;
    for (int i = 0; i < pt->np; i++)
        if (r->ex[pt->pe[i]].kind == PX_VAR)
            m |= 1u << r->ex[pt->pe[i]].var;
    for (int i = 0; i < pt->nch; i++)
        m |= pat_vars(r, pt->ch[i]);
    return m;
}

/* ---- shape check at load -------------------------------------------- */

static int eval_ex(const pl_rw_rules *r, int ei, const int64_t *vals, const rw_class *shapes,
                   int64_t *out)
{
    const rw_pexpr *e = &r->ex[ei];
    int64_t a, b;
    switch (e->kind) {
    case PX_LIT: *out = e->v; return 0;
    case PX_VAR: *out = vals[e->var]; return 0;
    case PX_RANK: *out = shapes[e->var].rank; return 0;
    case PX_DIM:
        if (eval_ex(r, e->a, vals, shapes, &a) < 0 || a < 0 || a >= shapes[e->var].rank)
            return EIN_ESHAPE;
        *out = shapes[e->var].shape[a];
        return 0;
    default:
        if (eval_ex(r, e->a, vals, shapes, &a) < 0 || eval_ex(r, e->b, vals, shapes, &b) < 0)
            return EIN_ESHAPE;
        *out = e->kind == PX_ADD ? a + b : a - b;
        return 0;
    }
}

static int eval_shape(const pl_rw_rules *r, int pi, const int64_t *vals, const rw_class *shapes,
                      rw_class *out)
{
    const rw_pat *pt = &r->pats[pi];
    if (pt->var >= 0) {
        *out = shapes[pt->var];
        return 0;
    }
    rw_class ch[PL_MAX_INPUTS];
    const rw_class *cp[PL_MAX_INPUTS];
    int64_t prm[RW_MAX_PARAMS] = {0};
    for (int i = 0; i < pt->nch; i++) {
        if (eval_shape(r, pt->ch[i], vals, shapes, &ch[i]) < 0)
            return EIN_ESHAPE;
        cp[i] = &ch[i];
    }
    for (int i = 0; i < pt->np; i++)
        if (eval_ex(r, pt->pe[i], vals, shapes, &prm[i]) < 0)
            return EIN_ESHAPE;
    return rw_infer(pt->op, prm, pt->nch, cp, out, NULL);
}

/* Do the rule's conditions hold? 1 yes, 0 no (or one does not evaluate);
 * `ev` evaluates an expression. */
static int conds_hold_chk(const pl_rw_rules *r, const rw_rule *ru, const int64_t *vals,
                          const rw_class *shapes)
{
    for (int i = 0; i < ru->nconds; i++) {
        int64_t a, b;
        const rw_cond *c = &ru->conds[i];
        if (eval_ex(r, c->a, vals, shapes, &a) < 0 || eval_ex(r, c->b, vals, shapes, &b) < 0)
            return 0;
        if (!(c->kind == PC_EQ ? a == b : c->kind == PC_LE ? a <= b : a < b))
            return 0;
    }
    return 1;
}

/* Integer variables of an expression into *m, those that are just an
 * axis (of dim) into *ax. */
static void ex_vars(const pl_rw_rules *r, int ei, uint32_t *m, uint32_t *ax)
{
    const rw_pexpr *e = &r->ex[ei];
    if (e->kind == PX_VAR)
        *m |= 1u << e->var;
    if (e->kind == PX_DIM) {
        if (r->ex[e->a].kind == PX_VAR)
            *ax |= 1u << r->ex[e->a].var;
        else
            ex_vars(r, e->a, m, ax);
    }
    if (e->kind == PX_ADD || e->kind == PX_SUB) {
        ex_vars(r, e->a, m, ax);
        ex_vars(r, e->b, m, ax);
    }
}

/* Integer variables that can change a shape: all but those that are only
 * the function (or scalar) of a unary/binary operator; those that are
 * only an axis (of concat, slice, dim) go into *ax. */
static void shape_ints(const pl_rw_rules *r, int pi, uint32_t *m, uint32_t *ax)
{
    const rw_pat *pt = &r->pats[pi];
    if (pt->var >= 0)
        return;
    for (int i = 0; i < pt->np; i++) {
        const rw_pexpr *e = &r->ex[pt->pe[i]];
        if ((pt->op == RW_UNARY || pt->op == RW_BINARY) && e->kind == PX_VAR)
            continue;
        if ((pt->op == RW_CONCAT || pt->op == RW_SLICE) && i == 0 && e->kind == PX_VAR)
            *ax |= 1u << e->var;
        else
            ex_vars(r, pt->pe[i], m, ax);
    }
    for (int i = 0; i < pt->nch; i++)
        shape_ints(r, pt->ch[i], m, ax);
}

static int same_shape(const rw_class *a, const rw_class *b)
{
    return a->rank == b->rank && a->dtype == b->dtype &&
           memcmp(a->shape, b->shape, (size_t)a->rank * sizeof a->shape[0]) == 0;
}

/* Every variable a matrix with dims in {2,3,5}, every integer variable in
 * 0..10 (one that is only an axis: 0..2; one that only names the function
 * of a unary/binary operator: 1):
 * where the left side type-checks and the conditions hold, the right side
 * must type-check too, to the same shape, and that must happen at least
 * once. */
static int check_rule(pl_rw_rules *r, rw_rule *ru, ein_error *err)
{
    static const int64_t dims[3] = {2, 3, 5};
    uint32_t sh = 0, ax = 0;
    for (int j = 0; j < (ru->multi ? 2 : 1); j++) {
        shape_ints(r, ru->lhs[j], &sh, &ax);
        shape_ints(r, ru->rhs[j], &sh, &ax);
    }
    for (int i = 0; i < ru->nconds; i++) {
        ex_vars(r, ru->conds[i].a, &sh, &ax);
        ex_vars(r, ru->conds[i].b, &sh, &ax);
    }
    int nval[RW_MAX_VARS];
    double combos = 1;
    for (int i = 0; i < ru->nvars; i++) {
        nval[i] = !ru->var_int[i] ? 9 : (sh & (1u << i)) ? RW_CHECK_INTS
                                      : (ax & (1u << i)) ? 3 : 1;
        combos *= nval[i];
    }
    if (combos > 2e6)
        return ein_fail(err, EIN_ESHAPE, "%s: rule %s: too many variables to shape-check",
                        ru->where, ru->name);
    long total = (long)combos, ok = 0;
    rw_class shapes[RW_MAX_VARS];
    int64_t vals[RW_MAX_VARS];
    for (long k = 0; k < total; k++) {
        long x = k;
        for (int i = 0; i < ru->nvars; i++) {
            memset(&shapes[i], 0, sizeof shapes[i]);
            vals[i] = 0;
            if (ru->var_int[i] && nval[i] == 1) {
                vals[i] = 1;
            } else if (ru->var_int[i]) {
                vals[i] = x % nval[i], x /= nval[i];
            } else {
                shapes[i].rank = 2;
                shapes[i].dtype = EIN_F32;
                shapes[i].shape[0] = dims[x % 3], x /= 3;
                shapes[i].shape[1] = dims[x % 3], x /= 3;
            }
        }
        rw_class l[2], rr;
        int nl = ru->multi ? 2 : 1, lok = 1;
        for (int j = 0; j < nl && lok; j++)
            lok = eval_shape(r, ru->lhs[j], vals, shapes, &l[j]) == 0;
        if (!lok || !conds_hold_chk(r, ru, vals, shapes))
            continue;
        ok++;
        for (int j = 0; j < nl; j++) {
            if (eval_shape(r, ru->rhs[j], vals, shapes, &rr) < 0)
                return ein_fail(err, EIN_ESHAPE, "%s: rule %s: the right side%s does not "
                                "type-check where the left side does", ru->where, ru->name,
                                ru->multi ? (j ? " 2" : " 1") : "");
            if (!same_shape(&l[j], &rr))
                return ein_fail(err, EIN_ESHAPE, "%s: rule %s: the right side%s has shape "
                                "%lldx%lld where the left side has %lldx%lld", ru->where,
                                ru->name, ru->multi ? (j ? " 2" : " 1") : "",
                                (long long)rr.shape[0], (long long)rr.shape[1],
                                (long long)l[j].shape[0], (long long)l[j].shape[1]);
        }
    }
    if (ok == 0)
        return ein_fail(err, EIN_ESHAPE, "%s: rule %s: the left side never type-checks%s",
                        ru->where, ru->name, ru->nconds ? " where the conditions hold" : "");
    return 0;
}

/* (if (= P P) (<= P P) (< P P) ...); the current token is its '('. Leaves
 * the token after it current. */
static int parse_conds(rw_parser *p)
{
    rw_rule *ru = p->rule;
    int rc;
    if ((rc = expect(p, 'a', "if")) < 0)
        return rc;
    if (strcmp(p->tok, "if") != 0)
        return perr(p, EIN_EPARSE, p->tline, p->tcol, "expected (if COND...), found %s", p->tok);
    for (;;) {
        if ((rc = next(p)) < 0)
            return rc;
        if (p->kind == ')')
            break;
        if (p->kind != '(')
            return perr(p, EIN_EPARSE, p->tline, p->tcol, "expected a condition (= P P), "
                        "(<= P P) or (< P P)%s", "");
        if (ru->nconds == RW_MAX_CONDS)
            return perr(p, EIN_EPARSE, p->tline, p->tcol, "too many conditions; expected at most %d",
                        RW_MAX_CONDS);
        if ((rc = expect(p, 'a', "=, <= or <")) < 0)
            return rc;
        rw_cond c = {0};
        if (strcmp(p->tok, "=") == 0)
            c.kind = PC_EQ;
        else if (strcmp(p->tok, "<=") == 0)
            c.kind = PC_LE;
        else if (strcmp(p->tok, "<") == 0)
            c.kind = PC_LT;
        else
            return perr(p, EIN_EPARSE, p->tline, p->tcol, "unknown comparison %s; expected =, <= or <",
                        p->tok);
        if ((rc = next(p)) < 0 || (c.a = parse_param(p, 0)) < 0)
            return rc < 0 ? rc : c.a;
        if ((rc = next(p)) < 0 || (c.b = parse_param(p, 0)) < 0)
            return rc < 0 ? rc : c.b;
        if ((rc = expect(p, ')', "')' closing the condition")) < 0)
            return rc;
        ru->conds[ru->nconds++] = c;
    }
    return next(p);
}

static int parse_rule(rw_parser *p)
{
    int rc, line = p->tline, col = p->tcol, budget = RW_PAT_MAX_NODES;
    pl_rw_rules *r = p->r;
    if (ein_vec_reserve(&r->rules, &r->cap, (int64_t)r->n + 1, sizeof *r->rules) < 0)
        return ein_fail(p->err, EIN_ENOMEM, "rules: out of memory");
    rw_rule *ru = &r->rules[r->n];
    memset(ru, 0, sizeof *ru);
    p->rule = ru;
    snprintf(ru->where, sizeof ru->where, "%s:%d:%d", p->fname, line, col);
    if ((rc = expect(p, 'a', "rule or multi")) < 0)
        return rc;
    if (strcmp(p->tok, "multi") == 0)
        ru->multi = 1;
    else if (strcmp(p->tok, "rule") != 0)
        return perr(p, EIN_EPARSE, p->tline, p->tcol, "expected rule or multi, found %s", p->tok);
    if ((rc = expect(p, 'a', "a rule name")) < 0)
        return rc;
    if (p->tok[0] == '?')
        return perr(p, EIN_EPARSE, p->tline, p->tcol, "expected a rule name, found %s", p->tok);
    snprintf(ru->name, sizeof ru->name, "%s", p->tok);
    for (int i = 0; i < r->n; i++)
        if (strcmp(r->rules[i].name, ru->name) == 0)
            return perr(p, EIN_EPARSE, p->tline, p->tcol, "rule %s defined twice; expected a new name",
                        ru->name);
    for (int side = 0; side < 2; side++) {
        int *dst = side ? ru->rhs : ru->lhs;
        if (ru->multi && (rc = expect(p, '(', "'(' opening two patterns")) < 0)
            return rc;
        for (int j = 0; j < (ru->multi ? 2 : 1); j++) {
            if ((rc = next(p)) < 0)
                return rc;
            if (ru->multi && p->kind == ')')
                return perr(p, EIN_EPARSE, p->tline, p->tcol, "a multi rule needs two patterns "
                            "on each side; expected a second pattern, found ')'%s", "");
            if ((dst[j] = parse_pat(p, !side, &budget)) < 0)
                return dst[j];
        }
        if (ru->multi && (rc = expect(p, ')', "')' after two patterns")) < 0)
            return rc;
    }
    if ((rc = next(p)) < 0)
        return rc;
    if (p->kind == '(' && (rc = parse_conds(p)) < 0)
        return rc;
    if (p->kind != ')')
        return perr(p, EIN_EPARSE, p->tline, p->tcol, "expected ')' closing the rule%s", "");
    for (int j = 0; j < (ru->multi ? 2 : 1); j++)
        if (r->pats[ru->lhs[j]].var >= 0)
            return ein_fail(p->err, EIN_EPARSE, "%s: rule %s: a left side must be an operator, "
                            "not a bare variable; expected (OP ...)", ru->where, ru->name);
    ru->vars_of[0] = pat_vars(r, ru->lhs[0]);
    ru->vars_of[1] = ru->multi ? pat_vars(r, ru->lhs[1]) : 0;
    if ((rc = check_rule(r, ru, p->err)) < 0)
        return rc;
    r->n++;
    return 0;
}

static int parse_into(pl_rw_rules *r, const char *text, const char *fname, ein_error *err)
{
    rw_parser p = {.s = text, .fname = fname, .line = 1, .col = 1, .r = r, .err = err};
    int rc;
    for (;;) {
        if ((rc = next(&p)) < 0)
            return rc;
        if (p.kind == 0)
            return 0;
        if (p.kind != '(')
            return perr(&p, EIN_EPARSE, p.tline, p.tcol, "expected '(' starting a rule%s", "");
        if ((rc = parse_rule(&p)) < 0)
            return rc;
    }
}

int pl_rw_rules_parse(const char *text, const char *fname, pl_rw_rules **out, ein_error *err)
{
    pl_rw_rules *r = calloc(1, sizeof *r);
    if (!r)
        return ein_fail(err, EIN_ENOMEM, "rules: out of memory");
    int rc = parse_into(r, text, fname ? fname : "<rules>", err);
    if (rc < 0) {
        pl_rw_rules_free(r);
        return rc;
    }
    *out = r;
    return 0;
}

#define RW_RULES_FILE_MAX ((size_t)16 << 20)

static int read_file(const char *path, char **out, ein_error *err)
{
    char *buf;
    size_t n;
    int rc = ein_file_read_all(path, RW_RULES_FILE_MAX, "a rule file", &buf, &n, err);
    if (rc < 0)
        return rc;
    if (strlen(buf) != n) {
        free(buf);
        return ein_fail(err, EIN_EPARSE, "%s: rule file contains a NUL byte", path);
    }
    *out = buf;
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int pl_rw_rules_load(const char *path, pl_rw_rules **out, ein_error *err)
{
    pl_rw_rules *r = calloc(1, sizeof *r);
    if (!r)
        return ein_fail(err, EIN_ENOMEM, "rules: out of memory");
    int rc = 0;
    char *text = NULL;
    DIR *d = opendir(path);
    if (!d) {
        if ((rc = read_file(path, &text, err)) == 0)
            rc = parse_into(r, text, path, err);
        free(text);
    } else {
        char **names = NULL;
        int n = 0, cap = 0;
        struct dirent *e;
        while ((e = readdir(d)) && rc == 0) {
            size_t l = strlen(e->d_name);
            if (l < 7 || strcmp(e->d_name + l - 6, ".rules") != 0 || e->d_name[0] == '.')
                continue;
            if (ein_vec_reserve(&names, &cap, (int64_t)n + 1, sizeof *names) < 0 ||
                !(names[n] = malloc(strlen(path) + l + 2)))
                rc = ein_fail(err, EIN_ENOMEM, "rules: out of memory");
            else
                sprintf(names[n++], "%s/%s", path, e->d_name);
        }
        closedir(d);
        if (n > 1)
            qsort(names, (size_t)n, sizeof *names, cmp_str);
        for (int i = 0; i < n && rc == 0; i++) {
            if ((rc = read_file(names[i], &text, err)) == 0)
                rc = parse_into(r, text, names[i], err);
            free(text);
            text = NULL;
        }
        for (int i = 0; i < n; i++)
            free(names[i]);
        free(names);
        if (rc == 0 && n == 0)
            rc = ein_fail(err, EIN_EIO, "%s: no .rules file in this folder", path);
    }
    if (rc < 0) {
        pl_rw_rules_free(r);
        return rc;
    }
    *out = r;
    return 0;
}

int pl_rw_rules_count(const pl_rw_rules *r) { return r ? r->n : 0; }

void pl_rw_rules_free(pl_rw_rules *r)
{
    if (!r)
        return;
    free(r->rules);
    free(r->pats);
    free(r->ex);
    free(r);
}
