/* planner/pl_parse.c — the .ein language, version 1; the reference is
 * docs/ein-language.md.
 *
 * The program is read one line at a time: the line's bytes are checked (NUL,
 * UTF-8, length), cut into tokens, and parsed as exactly one statement.
 * A statement never spans lines, so every error has a precise line and the
 * column of the token at fault. Operators are built through the public C
 * API (include/einsummable/einsummable.h) over the pl_graph builders, which own shape
 * inference; their messages are given the
 * position of the operator call. The first error ends the parse. */
#include "planner/pl_parse.h"

#include "include/einsummable/einsummable.h"
#include "common/io/ein_file.h"
#include "common/base/ein_vec.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include "planner/pl_parse_int.h"

typedef enum op_kind {
    OP_MATMUL, OP_EINSUM, OP_UNARY, OP_SCALE, OP_BINARY, OP_SOFTMAX, OP_RMSNORM, OP_LAYERNORM,
    OP_ROPE, OP_ATTENTION, OP_REDUCE, OP_CONCAT, OP_SLICE, OP_SPLIT_HEADS, OP_MERGE_HEADS,
    OP_EMBEDDING, OP_CACHE_WRITE, OP_DECODE_ATTENTION, OP_ROPE_AT
} op_kind;

typedef struct op_def {
    const char *name;
    op_kind kind;
    int code;           /* ein_unary or ein_binary */
    int min_args, max_args;
    const char *usage;
} op_def;

static const op_def ops[] = {
    {"matmul", OP_MATMUL, 0, 2, 2, "matmul(a, b)"},
    {"einsum", OP_EINSUM, 0, 2, 3, "einsum(\"ij,jk->ik\", a, b) or einsum(\"ij->j\", a)"},
    /* the elementwise functions, from the registry (common/ir/ein_ops.def) */
#define EIN_UNARY(kind, name, nargs, usage, formula) \
    {name, (nargs) == 1 ? OP_UNARY : OP_SCALE, EIN_UN_##kind, nargs, nargs, usage},
#define EIN_BINARY(kind, name, op, formula) {op, OP_BINARY, EIN_BIN_##kind, 2, 2, op "(a, b)"},
#include "common/ir/ein_ops.def"
    {"softmax", OP_SOFTMAX, 0, 1, 2, "softmax(x) or softmax(x, AXIS)"},
    {"rmsnorm", OP_RMSNORM, 0, 2, 3, "rmsnorm(x, w) or rmsnorm(x, w, 1e-5)"},
    {"layernorm", OP_LAYERNORM, 0, 3, 4, "layernorm(x, w, b) or layernorm(x, w, b, 1e-5)"},
    {"rope", OP_ROPE, 0, 2, 3, "rope(x, HEAD_DIM) or rope(x, HEAD_DIM, 10000), then optionally "
                               "style=half (Hugging Face's rotate_half) or style=interleaved, "
                               "and scaling=linear, factor=F or scaling=llama3, factor=F, "
                               "low_freq_factor=F, high_freq_factor=F, original_max_position=N"},
    {"attention", OP_ATTENTION, 0, 3, 3, "attention(q, k, v), then optionally window=W (a "
                                         "sliding window of W keys)"},
    {"reduce_sum", OP_REDUCE, EIN_AGG_SUM, 2, 9, "reduce_sum(x, AXIS, ...)"},
    {"reduce_max", OP_REDUCE, EIN_AGG_MAX, 2, 9, "reduce_max(x, AXIS, ...)"},
    {"concat", OP_CONCAT, 0, 2, 17, "concat(a, b, ..., AXIS)"},
    {"slice", OP_SLICE, 0, 4, 4, "slice(x, AXIS, START, END)"},
    {"split_heads", OP_SPLIT_HEADS, 0, 2, 2, "split_heads(x, HEAD_DIM)"},
    {"merge_heads", OP_MERGE_HEADS, 0, 1, 1, "merge_heads(x)"},
    {"embedding", OP_EMBEDDING, 0, 2, 2, "embedding(table, ids)"},
    {"cache_write", OP_CACHE_WRITE, 0, 3, 3, "cache_write(state, x, pos)"},
    {"decode_attention", OP_DECODE_ATTENTION, 0, 4, 4, "decode_attention(q, k, v, pos), then "
                                                       "optionally window=W"},
    {"rope_at", OP_ROPE_AT, 0, 3, 4, "rope_at(x, pos, HEAD_DIM) or rope_at(x, pos, HEAD_DIM, "
                                     "10000), then optionally style=half and rope's scaling= "
                                     "keywords"},
};
#define NOPS ((int)(sizeof ops / sizeof ops[0]))

/* "matmul, einsum, relu, ..., merge_heads": every operator, for messages. */
static const char *op_list(char *buf, size_t cap)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < NOPS && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%s", i ? ", " : "", ops[i].name);
    return buf;
}

static const char *const keywords[] = {"dims", "dtype", "input", "save", "seqs", "state"};

/* ---- errors and tokens --------------------------------------------------- */

static int tok_is(const tok *t, const char *word)
{
    return t->kind == T_IDENT && (size_t)t->len == strlen(word) && memcmp(t->s, word, (size_t)t->len) == 0;
}

static int tok_punct(const tok *t, char c)
{
    return t->kind == T_PUNCT && t->s[0] == c;
}

/* The current token; never moves past the end of the line. */
static const tok *next(parser *p)
{
    const tok *t = &p->toks[p->pos];
    if (t->kind != T_EOL)
        p->pos++;
    return t;
}

int pl_is_reserved(const tok *t)
{
    for (size_t i = 0; i < sizeof keywords / sizeof keywords[0]; i++)
        if (tok_is(t, keywords[i]))
            return 1;
    for (int i = 0; i < NOPS; i++)
        if (tok_is(t, ops[i].name))
            return 1;
    return 0;
}

/* ---- statements ---------------------------------------------------------- */

static int parse_dims(parser *p)
{
    int rc;
    next(p);
    if (pl_peek(p)->kind == T_EOL)
        return pl_perr(p, EIN_EPARSE, pl_peek(p)->col, "expected NAME=SIZE after 'dims', e.g. "
                    "dims rows=1024");
    while (pl_peek(p)->kind != T_EOL) {
        char name[EIN_NAME_MAX];
        int64_t size;
        const tok *t = next(p);
        if ((rc = pl_tok_name(p, t, "a dim name", name)) < 0)
            return rc;
        int k = pl_dim_find(p, name);
        if (k >= 0)
            return pl_perr(p, EIN_EPARSE, t->col, "dim '%s' is already defined at line %d; "
                        "expected a new name", name, p->dims[k].line);
        const tok *eq = next(p);
        if (!tok_punct(eq, '='))
            return pl_perr(p, EIN_EPARSE, eq->col, "expected '=' after dim name '%s', got %s",
                        name, DESC(eq));
        if ((rc = pl_tok_int(p, next(p), "dim size", &size)) < 0)
            return rc;
        if ((rc = pl_dim_add(p, name, size)) < 0)
            return rc;
    }
    return 0;
}

static int parse_dtype(parser *p)
{
    next(p);
    const tok *t = next(p);
    if (t->kind == T_EOL)
        return pl_perr(p, EIN_EPARSE, t->col, "expected a dtype after 'dtype': %s", ein_dtype_names());
    if (t->kind != T_IDENT || ein_dtype_parse(t->s, (size_t)t->len, &p->dtype) < 0)
        return pl_perr(p, EIN_EPARSE, t->col, "unknown dtype %s; expected %s", DESC(t),
                    ein_dtype_names());
    if (ein_dtype_is_block((int)p->dtype))
        return pl_perr(p, EIN_EPARSE, t->col, "dtype %s is for weights only; expected it after "
                       "an input's dims (input w[out, in] %s)", ein_dtype_name(p->dtype),
                       ein_dtype_name(p->dtype));
    return pl_expect_eol(p, "the dtype");
}

/* input NAME[dims] [dtype], or (state) state NAME[dims] [dtype]. */
static int parse_input(parser *p, int state)
{
    int rc, rank = 0;
    int64_t shape[EIN_MAX_RANK];
    char name[EIN_NAME_MAX], axis[EIN_MAX_RANK][EIN_NAME_MAX];
    next(p);
    const tok *nt = next(p);
    if ((rc = pl_tok_new_tensor(p, nt, name)) < 0)
        return rc;
    const tok *lb = next(p);
    if (!tok_punct(lb, '['))
        return pl_perr(p, EIN_EPARSE, lb->col, "expected '[' and a shape after '%s', e.g. "
                    "%s[rows, cols]; got %s", name, name, DESC(lb));
    for (;;) {
        const tok *d = next(p);
        if ((d->kind == T_IDENT || d->kind == T_NUM) && rank == EIN_MAX_RANK)
            return pl_perr(p, EIN_EPARSE, d->col, "too many dims; expected at most %d",
                        EIN_MAX_RANK);
        if (d->kind == T_IDENT) {
            char dn[EIN_NAME_MAX];
            if ((rc = pl_tok_name(p, d, "a dim name or an integer size", dn)) < 0)
                return rc;
            int k = pl_dim_find(p, dn);
            if (k < 0)
                return pl_perr(p, EIN_EPARSE, d->col, "unknown dim '%s'; expected a dim defined "
                            "by 'dims' or an integer size", dn);
            memcpy(axis[rank], dn, sizeof dn);
            shape[rank++] = p->dims[k].size;
        } else if (d->kind == T_NUM) {
            axis[rank][0] = '\0';
            if ((rc = pl_tok_int(p, d, "dim size", &shape[rank++])) < 0)
                return rc;
        } else {
            return pl_perr(p, EIN_EPARSE, d->col, "expected a dim name or an integer size, got %s",
                        DESC(d));
        }
        const tok *sep = next(p);
        if (tok_punct(sep, ']'))
            break;
        if (!tok_punct(sep, ','))
            return pl_perr(p, EIN_EPARSE, sep->col, "expected ',' or ']' in the shape of '%s', "
                        "got %s", name, DESC(sep));
    }
    ein_dtype dtype = p->dtype;
    if (pl_peek(p)->kind == T_IDENT) {
        const tok *t = next(p);
        if (ein_dtype_parse(t->s, (size_t)t->len, &dtype) < 0)
            return pl_perr(p, EIN_EPARSE, t->col, "unknown dtype %s; expected %s",
                        DESC(t), ein_dtype_names());
    }
    if ((rc = pl_expect_eol(p, "the input declaration")) < 0)
        return rc;
    ein_error e;
    ein_tensor_desc desc;
    memset(&desc, 0, sizeof desc);
    desc.rank = rank;
    desc.dtype = dtype;
    for (int i = 0; i < rank; i++) {
        desc.shape[i] = shape[i];
        desc.dim_names[i] = axis[i][0] ? axis[i] : NULL;
    }
    int id = state ? ein_graph_state(p->g, name, desc, &e)
                   : ein_graph_insert_tensor(p->g, name, desc, &e);
    if (id < 0)
        return pl_build_error(p, id, &e, nt->col);
    pl_graph_set_pos(p->g, id, p->line, nt->col);
    return 0;
}

/* seqs [LEN, LEN, ...]: the packed sequences of later rope/attention ops. */
static int parse_seqs(parser *p)
{
    int rc;
    next(p);
    const tok *lb = next(p);
    if (!tok_punct(lb, '['))
        return pl_perr(p, EIN_EPARSE, lb->col, "expected '[' and sequence lengths after 'seqs', "
                    "e.g. seqs [1024, 1024]; got %s", DESC(lb));
    int n = 0;
    int64_t *ends = malloc(sizeof(int64_t) * (PL_LINE_MAX / 2 + 1));
    if (!ends)
        return ein_fail(p->err, EIN_ENOMEM, "%s: out of memory", p->file);
    for (;;) {
        const tok *t = next(p);
        int64_t len;
        if ((rc = pl_tok_size(p, t, "a sequence length", &len)) < 0)
            goto fail;
        ends[n] = (n ? ends[n - 1] : 0) + len;
        if (ends[n] > PL_DIM_MAX) {
            rc = pl_perr(p, EIN_EPARSE, t->col, "the sequences hold more than 2^40 tokens; expected at most 2^40 in all");
            goto fail;
        }
        n++;
        const tok *sep = next(p);
        if (tok_punct(sep, ']'))
            break;
        if (!tok_punct(sep, ',')) {
            rc = pl_perr(p, EIN_EPARSE, sep->col, "expected ',' or ']' in the sequence lengths, "
                      "got %s", DESC(sep));
            goto fail;
        }
    }
    if ((rc = pl_expect_eol(p, "the sequence lengths")) < 0)
        goto fail;
    free(p->seq_ends);
    p->seq_ends = ends;
    p->nseq = n;
    return 0;
fail:
    free(ends);
    return rc;
}

static int parse_save(parser *p)
{
    int rc, id;
    next(p);
    if (pl_peek(p)->kind == T_EOL)
        return pl_perr(p, EIN_EPARSE, pl_peek(p)->col, "expected a tensor name after 'save'");
    for (;;) {
        const tok *t = next(p);
        if ((rc = pl_tok_tensor(p, t, &id)) < 0)
            return rc;
        const pl_node *n = pl_graph_node(p->g, id);
        if (n->saved)
            return pl_perr(p, EIN_EPARSE, t->col, "'%s' is already saved; expected each tensor "
                        "to be saved once", n->name);
        ein_error e;
        if ((rc = ein_graph_save(p->g, id, &e)) < 0)
            return pl_build_error(p, rc, &e, t->col);
        p->nsaves++;
        const tok *sep = next(p);
        if (sep->kind == T_EOL)
            return 0;
        if (!tok_punct(sep, ','))
            return pl_perr(p, EIN_EPARSE, sep->col, "expected ',' or end of line after '%s', got %s",
                        n->name, DESC(sep));
    }
}

static int parse_einsum(parser *p, const char *name, const tok *const *args, int nargs,
                        int *id, ein_error *e)
{
    int rc, a, b = -1;
    const tok *s = args[0];
    char subs[EIN_NAME_MAX];
    ein_einsum_sub sub;
    if (s->kind != T_STR)
        return pl_perr(p, EIN_EPARSE, s->col, "expected the subscripts of einsum as a string like "
                    "\"ij,jk->ik\", got %s", DESC(s));
    if (s->len >= EIN_NAME_MAX)
        return pl_perr(p, EIN_EPARSE, s->col, "einsum subscripts are %d characters long; expected "
                    "at most %d", s->len, EIN_NAME_MAX - 1);
    memcpy(subs, s->s, (size_t)s->len);
    subs[s->len] = '\0';
    if ((rc = ein_einsum_parse(subs, &sub, e)) < 0)
        return pl_perr(p, EIN_EPARSE, s->col, "%s", e->msg);
    if (sub.nops != nargs - 1)
        return pl_perr(p, EIN_EPARSE, s->col, "einsum '%s' has %d operand%s but %d tensor%s given; "
                    "expected one tensor per operand",
                    subs, sub.nops, sub.nops == 1 ? "" : "s", nargs - 1,
                    nargs == 2 ? " was" : "s were");
    if ((rc = pl_tok_tensor(p, args[1], &a)) < 0)
        return rc;
    if (nargs == 3 && (rc = pl_tok_tensor(p, args[2], &b)) < 0)
        return rc;
    *id = ein_graph_einsum(p->g, name, subs, a, b, e);
    return 0;
}

/* One block operator call being parsed: the operator, the name of the
 * node it adds and its arguments args[0..nargs) (their count already
 * checked against op). */
typedef struct block_call {
    parser *p;
    const op_def *op;
    const char *name;
    const tok *const *args;
    int nargs;
    int64_t window;     /* attention's window= (0: none) */
} block_call;

/* The block operators' parsers: each reads c's arguments, adds the node
 * and sets *id to it (negative when the graph builder failed, detail in
 * e); returns 0, or a negative code for an argument that does not parse. */

/* softmax(x[, axis]); the axis defaults to the last. */
static int parse_softmax_op(const block_call *c, int *id, ein_error *e)
{
    parser *p = c->p;
    const tok *const *args = c->args;
    int rc, x;
    int64_t v1;
    if ((rc = pl_tok_tensor(p, args[0], &x)) < 0)
        return rc;
    v1 = pl_graph_node(p->g, x)->rank - 1;
    if (c->nargs == 2 && (rc = pl_tok_index(p, args[1], "softmax axis", &v1)) < 0)
        return rc;
    if (v1 > EIN_MAX_RANK)
        v1 = EIN_MAX_RANK;
    *id = ein_graph_softmax(p->g, c->name, x, (int)v1, e);
    return 0;
}

/* rmsnorm(x, w[, eps]) and layernorm(x, w, b[, eps]). */
static int parse_norm_op(const block_call *c, int *id, ein_error *e)
{
    parser *p = c->p;
    const tok *const *args = c->args;
    int rc, x, w, b = -1;
    double eps = 1e-5;
    int nt = c->op->kind == OP_RMSNORM ? 2 : 3;
    if ((rc = pl_tok_tensor(p, args[0], &x)) < 0 || (rc = pl_tok_tensor(p, args[1], &w)) < 0)
        return rc;
    if (nt == 3 && (rc = pl_tok_tensor(p, args[2], &b)) < 0)
        return rc;
    if (c->nargs > nt && (rc = pl_tok_number(p, args[nt], "eps", &eps)) < 0)
        return rc;
    *id = b >= 0 ? ein_graph_layernorm(p->g, c->name, x, w, b, eps, e)
                 : ein_graph_rmsnorm(p->g, c->name, x, w, eps, e);
    return 0;
}

/* sum/max(x, axis...): distinct axes, each within x's rank. */
static int parse_reduce_op(const block_call *c, int *id, ein_error *e)
{
    parser *p = c->p;
    const tok *const *args = c->args;
    int rc, x;
    int64_t v1;
    uint32_t axes = 0;
    if ((rc = pl_tok_tensor(p, args[0], &x)) < 0)
        return rc;
    for (int i = 1; i < c->nargs; i++) {
        if ((rc = pl_tok_index(p, args[i], "reduced axis", &v1)) < 0)
            return rc;
        if (v1 >= pl_graph_node(p->g, x)->rank)
            return pl_perr(p, EIN_ESHAPE, args[i]->col, "%s: axis %lld is out of range for "
                        "'%s' of rank %d; expected an axis from 0 to %d", c->op->name,
                        (long long)v1, pl_graph_node(p->g, x)->name,
                        pl_graph_node(p->g, x)->rank, pl_graph_node(p->g, x)->rank - 1);
        if (axes >> v1 & 1)
            return pl_perr(p, EIN_ESHAPE, args[i]->col, "%s: axis %lld is named twice; expected "
                        "distinct axes", c->op->name, (long long)v1);
        axes |= 1u << v1;
    }
    *id = ein_graph_reduce(p->g, c->name, c->op->code == EIN_AGG_SUM ? "sum" : "max", axes, x, e);
    return 0;
}

/* concat(x..., axis) and slice(x, axis, start, end). */
static int parse_concat_slice_op(const block_call *c, int *id, ein_error *e)
{
    parser *p = c->p;
    const tok *const *args = c->args;
    int rc, x;
    int64_t v1 = 0, v2 = 0, v3 = 0;
    if (c->op->kind == OP_CONCAT) {
        int xs[PL_MAX_INPUTS];
        for (int i = 0; i < c->nargs - 1; i++)
            if ((rc = pl_tok_tensor(p, args[i], &xs[i])) < 0)
                return rc;
        if ((rc = pl_tok_index(p, args[c->nargs - 1], "concat axis", &v1)) < 0)
            return rc;
        *id = ein_graph_concat(p->g, c->name, (int)(v1 > EIN_MAX_RANK ? EIN_MAX_RANK : v1), xs,
                                  c->nargs - 1, e);
        return 0;
    }
    if ((rc = pl_tok_tensor(p, args[0], &x)) < 0 ||
        (rc = pl_tok_index(p, args[1], "slice axis", &v1)) < 0 ||
        (rc = pl_tok_index(p, args[2], "slice start", &v2)) < 0 ||
        (rc = pl_tok_size(p, args[3], "slice end", &v3)) < 0)
        return rc;
    *id = ein_graph_slice(p->g, c->name, x, (int)(v1 > EIN_MAX_RANK ? EIN_MAX_RANK : v1), v2,
                             v3, e);
    return 0;
}

/* rope(x, head_dim[, theta]), attention(q, k, v), split_heads(x, head_dim),
 * merge_heads(x) and embedding(table, ids). */
static int parse_heads_op(const block_call *c, int *id, ein_error *e)
{
    parser *p = c->p;
    const tok *const *args = c->args;
    int rc, x, w, b;
    int64_t v1 = 0;
    double theta = 10000.0;
    switch (c->op->kind) {
    case OP_ROPE:
        if ((rc = pl_tok_tensor(p, args[0], &x)) < 0 ||
            (rc = pl_tok_size(p, args[1], "the head dim", &v1)) < 0)
            return rc;
        if (c->nargs == 3 && (rc = pl_tok_number(p, args[2], "rope theta", &theta)) < 0)
            return rc;
        *id = ein_graph_rope(p->g, c->name, x, v1, theta, p->seq_ends, p->nseq, e);
        return 0;
    case OP_ATTENTION:
        if ((rc = pl_tok_tensor(p, args[0], &x)) < 0 || (rc = pl_tok_tensor(p, args[1], &w)) < 0 ||
            (rc = pl_tok_tensor(p, args[2], &b)) < 0)
            return rc;
        *id = ein_graph_attention_window(p->g, c->name, x, w, b, p->seq_ends, p->nseq,
                                         c->window, e);
        return 0;
    case OP_SPLIT_HEADS:
        if ((rc = pl_tok_tensor(p, args[0], &x)) < 0 ||
            (rc = pl_tok_size(p, args[1], "the head dim", &v1)) < 0)
            return rc;
        *id = ein_graph_split_heads(p->g, c->name, x, v1, e);
        return 0;
    case OP_EMBEDDING:
        if ((rc = pl_tok_tensor(p, args[0], &x)) < 0 || (rc = pl_tok_tensor(p, args[1], &w)) < 0)
            return rc;
        *id = ein_graph_embedding(p->g, c->name, x, w, e);
        return 0;
    default: /* OP_MERGE_HEADS */
        if ((rc = pl_tok_tensor(p, args[0], &x)) < 0)
            return rc;
        *id = ein_graph_merge_heads(p->g, c->name, x, e);
        return 0;
    }
}

/* The operators of a transformer block (softmax ... merge_heads). */
static int parse_block_op(parser *p, const op_def *op, const char *name, const tok *const *args,
                          int nargs, int64_t window, int *id, ein_error *e)
{
    const block_call c = {.p = p, .op = op, .name = name, .args = args, .nargs = nargs,
                          .window = window};
    switch (op->kind) {
    case OP_SOFTMAX:
        return parse_softmax_op(&c, id, e);
    case OP_RMSNORM:
    case OP_LAYERNORM:
        return parse_norm_op(&c, id, e);
    case OP_REDUCE:
        return parse_reduce_op(&c, id, e);
    case OP_CONCAT:
    case OP_SLICE:
        return parse_concat_slice_op(&c, id, e);
    case OP_ROPE:
    case OP_ATTENTION:
    case OP_SPLIT_HEADS:
    case OP_MERGE_HEADS:
    case OP_EMBEDDING:
        return parse_heads_op(&c, id, e);
    default:
        break;
    }
    return pl_perr(p, EIN_EPARSE, args[0]->col, "internal: operator %s has no parser", op->name);
}

/* An operator call as written: the operator, its positional arguments,
 * rope's style= and attention's window= keywords, each token kept for its
 * column. */
typedef struct op_call {
    const op_def *op;
    const tok *args[PL_ARGS_MAX];
    int nargs;
    const tok *rp;      /* the closing ')' */
    const tok *style;   /* the value of style=, or NULL */
    const tok *kw[5];   /* rope's scaling=, factor=, low_freq_factor=,
                           high_freq_factor=, original_max_position= */
    const tok *wtok;    /* window=, or NULL */
    int64_t window;     /* its value (0: none) */
} op_call;

/* rope's frequency-scaling keywords (ein_rope_scaling), in op_call.kw order. */
static const char *const rope_kw[5] = {"scaling", "factor", "low_freq_factor",
                                       "high_freq_factor", "original_max_position"};

/* The operator named by `ot` (an identifier after '='), into *op. */
static int find_op(parser *p, const tok *ot, const op_def **op)
{
    if (ot->kind == T_EOL)
        return pl_perr(p, EIN_EPARSE, ot->col, "expected an operator call after '=', e.g. relu(x)");
    if (ot->kind != T_IDENT)
        return pl_perr(p, EIN_EPARSE, ot->col, "expected an operator call after '=', e.g. relu(x); "
                    "got %s", DESC(ot));
    *op = NULL;
    for (int i = 0; i < NOPS && !*op; i++)
        if (tok_is(ot, ops[i].name))
            *op = &ops[i];
    if (!*op) {
        char list[512];
        return pl_perr(p, EIN_EPARSE, ot->col, "unknown operator %s; expected one of %s", DESC(ot),
                    op_list(list, sizeof list));
    }
    return 0;
}

/* One argument `a` of the call (its ',' or ')' not yet read): NAME=VALUE
 * (rope's style, attention's window) or a positional one. */
static int call_arg(parser *p, op_call *c, const tok *a)
{
    const op_def *op = c->op;
    if (a->kind != T_IDENT && a->kind != T_NUM && a->kind != T_STR)
        return pl_perr(p, EIN_EPARSE, a->col, "expected an argument of %s, got %s; "
                    "usage: %s", op->name, DESC(a), op->usage);
    if (c->nargs == PL_ARGS_MAX)
        return pl_perr(p, EIN_EPARSE, a->col, "too many arguments; usage: %s", op->usage);
    if (a->kind == T_IDENT && tok_punct(pl_peek(p), '=')) {
        /* NAME=VALUE: rope's style and frequency scaling, attention's window. */
        next(p);
        const tok *v = next(p);
        for (int k = 0; k < 5 && (op->kind == OP_ROPE || op->kind == OP_ROPE_AT); k++)
            if (tok_is(a, rope_kw[k])) {
                if (c->kw[k])
                    return pl_perr(p, EIN_EPARSE, a->col, "%s given twice; usage: %s", rope_kw[k],
                                   op->usage);
                if (k == 0 ? v->kind != T_IDENT || !(tok_is(v, "none") || tok_is(v, "linear") ||
                                                     tok_is(v, "llama3"))
                           : v->kind != T_NUM)
                    return pl_perr(p, EIN_EPARSE, v->col, "rope %s %s; expected %s", rope_kw[k],
                                   DESC(v), k == 0 ? "none, linear or llama3" : "a number");
                c->kw[k] = v;
                return 0;
            }
        if ((op->kind == OP_ATTENTION || op->kind == OP_DECODE_ATTENTION) &&
            tok_is(a, "window")) {
            if (c->wtok)
                return pl_perr(p, EIN_EPARSE, a->col, "window given twice; usage: %s", op->usage);
            int rc = v->kind == T_IDENT ? pl_tok_size(p, v, "attention window", &c->window)
                                        : pl_tok_index(p, v, "attention window", &c->window);
            if (rc < 0)
                return rc;
            c->wtok = v;
            return 0;
        }
        if ((op->kind != OP_ROPE && op->kind != OP_ROPE_AT) || !tok_is(a, "style"))
            return pl_perr(p, EIN_EPARSE, a->col, "%s takes no keyword argument '%.*s'; "
                        "usage: %s", op->name, a->len, a->s, op->usage);
        if (c->style)
            return pl_perr(p, EIN_EPARSE, a->col, "style given twice; usage: %s", op->usage);
        if (v->kind != T_IDENT || !(tok_is(v, "half") || tok_is(v, "interleaved")))
            return pl_perr(p, EIN_EPARSE, v->col, "rope style %s; expected half or "
                        "interleaved", DESC(v));
        c->style = v;
    } else if (c->style || c->wtok || c->kw[0] || c->kw[1] || c->kw[2] || c->kw[3] ||
               c->kw[4]) {
        return pl_perr(p, EIN_EPARSE, a->col, "a positional argument after %s=; usage: %s",
                       c->style ? "style" : c->wtok ? "window" : "a scaling keyword", op->usage);
    } else {
        c->args[c->nargs++] = a;
    }
    return 0;
}

/* The arguments after '(' up to ')' and the end of the line, checked
 * against the operator's arity. */
static int call_args(parser *p, op_call *c)
{
    const op_def *op = c->op;
    int rc;
    if (tok_punct(pl_peek(p), ')')) {
        c->rp = next(p);
    } else {
        for (;;) {
            if ((rc = call_arg(p, c, next(p))) < 0)
                return rc;
            const tok *sep = next(p);
            if (tok_punct(sep, ')')) {
                c->rp = sep;
                break;
            }
            if (!tok_punct(sep, ','))
                return pl_perr(p, EIN_EPARSE, sep->col, "expected ',' or ')' after argument %d of "
                            "%s, got %s", c->nargs, op->name, DESC(sep));
        }
    }
    if ((rc = pl_expect_eol(p, "')'")) < 0)
        return rc;
    if (c->nargs < op->min_args)
        return pl_perr(p, EIN_EPARSE, c->rp->col, "%s takes %d argument%s, got %d; usage: %s",
                    op->name, op->min_args, op->min_args == 1 ? "" : "s", c->nargs, op->usage);
    if (c->nargs > op->max_args)
        return pl_perr(p, EIN_EPARSE, c->args[op->max_args]->col, "%s takes %s%d argument%s, got %d; "
                    "usage: %s", op->name, op->min_args < op->max_args ? "at most " : "",
                    op->max_args, op->max_args == 1 ? "" : "s", c->nargs, op->usage);
    return 0;
}

/* rope's scaling keywords onto node id: scaling=linear|llama3|none and the
 * numbers its type uses (ein_graph_rope_scaling checks them). */
static int rope_scaling(parser *p, const op_call *c, int id, ein_error *e)
{
    ein_rope_scaling s = {0};
    const tok *ty = c->kw[0];
    int rc;
    s.type = !ty || tok_is(ty, "none") ? EIN_ROPE_SCALING_NONE
           : tok_is(ty, "linear") ? EIN_ROPE_SCALING_LINEAR : EIN_ROPE_SCALING_LLAMA3;
    int used = s.type == EIN_ROPE_SCALING_NONE ? 0 : s.type == EIN_ROPE_SCALING_LINEAR ? 1 : 4;
    double *f[4] = {&s.factor, &s.low_freq_factor, &s.high_freq_factor, &s.original_max_position};
    for (int k = 1; k < 5; k++) {
        if (!c->kw[k] && k <= used)
            return pl_perr(p, EIN_EPARSE, (ty ? ty : c->rp)->col, "rope scaling=%s needs %s=",
                           ty ? (s.type == EIN_ROPE_SCALING_LINEAR ? "linear" : "llama3") : "none",
                           rope_kw[k]);
        if (c->kw[k] && k > used)
            return pl_perr(p, EIN_EPARSE, c->kw[k]->col, "rope %s= is not a parameter of "
                           "scaling=%s", rope_kw[k], s.type == EIN_ROPE_SCALING_LINEAR ? "linear"
                           : s.type == EIN_ROPE_SCALING_NONE ? "none" : "llama3");
        if (c->kw[k] && (rc = pl_tok_number(p, c->kw[k], rope_kw[k], f[k - 1])) < 0)
            return rc;
    }
    if ((rc = ein_graph_rope_scaling(p->g, id, &s, e)) < 0)
        return pl_build_error(p, rc, e, (ty ? ty : c->rp)->col);
    return 0;
}

/* Build the call's node `name` in the graph: *id, or -1 with *e set. */
static int build_call(parser *p, const op_call *c, const char *name, int *id, ein_error *e)
{
    const op_def *op = c->op;
    const tok *const *args = c->args;
    int rc, x, y, nargs = c->nargs;
    double factor = 0.0;
    switch (op->kind) {
    case OP_MATMUL:
        if ((rc = pl_tok_tensor(p, args[0], &x)) < 0 || (rc = pl_tok_tensor(p, args[1], &y)) < 0)
            return rc;
        *id = ein_graph_matmul(p->g, name, x, y, e);
        return 0;
    case OP_EINSUM:
        return parse_einsum(p, name, args, nargs, id, e);
    case OP_UNARY:
        if ((rc = pl_tok_tensor(p, args[0], &x)) < 0)
            return rc;
        *id = ein_graph_unary(p->g, name, op->name, 0.0, x, e);
        return 0;
    case OP_SCALE:
        if ((rc = pl_tok_tensor(p, args[0], &x)) < 0 ||
            (rc = op->code == EIN_UN_SCALE ? pl_tok_float(p, args[1], &factor)
                                           : pl_tok_number(p, args[1], "constant", &factor)) < 0)
            return rc;
        *id = ein_graph_unary(p->g, name, op->name, factor, x, e);
        return 0;
    case OP_BINARY:
        if ((rc = pl_tok_tensor(p, args[0], &x)) < 0 || (rc = pl_tok_tensor(p, args[1], &y)) < 0)
            return rc;
        *id = ein_graph_binary(p->g, name, op->name, x, y, e);
        return 0;
    case OP_ROPE:
        if (c->style && tok_is(c->style, "half")) {
            double theta = 10000.0;
            int64_t hd;
            if ((rc = pl_tok_tensor(p, args[0], &x)) < 0 ||
                (rc = pl_tok_size(p, args[1], "the head dim", &hd)) < 0)
                return rc;
            if (nargs == 3 && (rc = pl_tok_number(p, args[2], "rope theta", &theta)) < 0)
                return rc;
            *id = ein_graph_rope_ex(p->g, name, x, hd, theta, p->seq_ends, p->nseq,
                                    EIN_ROPE_HALF, e);
            return 0;
        }
        return parse_block_op(p, op, name, args, nargs, c->window, id, e);
    case OP_ROPE_AT: {
        double theta = 10000.0;
        int64_t hd;
        int pos;
        if ((rc = pl_tok_tensor(p, args[0], &x)) < 0 || (rc = pl_tok_tensor(p, args[1], &pos)) < 0 ||
            (rc = pl_tok_size(p, args[2], "the head dim", &hd)) < 0)
            return rc;
        if (nargs == 4 && (rc = pl_tok_number(p, args[3], "rope theta", &theta)) < 0)
            return rc;
        *id = ein_graph_rope_at(p->g, name, x, pos, hd, theta,
                                c->style && tok_is(c->style, "half") ? EIN_ROPE_HALF
                                                                     : EIN_ROPE_INTERLEAVED, e);
        return 0;
    }
    case OP_CACHE_WRITE:
    case OP_DECODE_ATTENTION: {
        int t[4];
        for (int i = 0; i < nargs; i++)
            if ((rc = pl_tok_tensor(p, args[i], &t[i])) < 0)
                return rc;
        *id = op->kind == OP_CACHE_WRITE
                  ? ein_graph_cache_write(p->g, name, t[0], t[1], t[2], e)
                  : ein_graph_decode_attention_window(p->g, name, t[0], t[1], t[2], t[3],
                                                      c->window, e);
        return 0;
    }
    default:
        return parse_block_op(p, op, name, args, nargs, c->window, id, e);
    }
}

/* NAME = OP(ARGS...): a new tensor from an operator call. */
static int parse_assign(parser *p)
{
    int rc, id = -1;
    char name[EIN_NAME_MAX];
    const tok *nt = next(p);
    if ((rc = pl_tok_new_tensor(p, nt, name)) < 0)
        return rc;
    next(p);                                    /* '=', checked by the caller */
    const tok *ot = next(p);
    op_call c = {0};
    if ((rc = find_op(p, ot, &c.op)) < 0)
        return rc;
    const tok *lp = next(p);
    if (!tok_punct(lp, '('))
        return pl_perr(p, EIN_EPARSE, lp->col, "expected '(' after '%s', got %s", c.op->name, DESC(lp));
    if ((rc = call_args(p, &c)) < 0)
        return rc;
    ein_error e;
    if ((rc = build_call(p, &c, name, &id, &e)) < 0)
        return rc;
    if (id >= 0 && (c.kw[0] || c.kw[1] || c.kw[2] || c.kw[3] || c.kw[4]) &&
        (rc = rope_scaling(p, &c, id, &e)) < 0)
        return rc;
    if (id < 0)
        return pl_build_error(p, id, &e, ot->col);
    pl_graph_set_pos(p->g, id, p->line, nt->col);
    return 0;
}

static int parse_statement(parser *p)
{
    const tok *t = pl_peek(p);
    if (t->kind == T_EOL)
        return 0;                               /* blank or comment-only line */
    p->nstatements++;
    if (t->kind == T_IDENT && tok_punct(&p->toks[1], '='))
        return parse_assign(p);
    if (tok_is(t, "dims"))
        return parse_dims(p);
    if (tok_is(t, "dtype"))
        return parse_dtype(p);
    if (tok_is(t, "input"))
        return parse_input(p, 0);
    if (tok_is(t, "state"))
        return parse_input(p, 1);
    if (tok_is(t, "save"))
        return parse_save(p);
    if (tok_is(t, "seqs"))
        return parse_seqs(p);
    if (t->kind == T_IDENT)
        return pl_perr(p, EIN_EPARSE, t->col, "unknown statement %s; expected dims, dtype, input, "
                    "state, seqs, save or NAME = OP(...)", DESC(t));
    return pl_perr(p, EIN_EPARSE, t->col, "expected a statement (dims, dtype, input, state, save "
                "or NAME = OP(...)), got %s", DESC(t));
}

/* ---- entry points -------------------------------------------------------- */

int pl_ein_parse(const char *filename, const char *text, size_t len,
                 pl_graph **out, ein_error *err)
{
    int rc = 0;
    parser *p = NULL;
    const char *file = filename ? filename : "<input>";
    if (!out || (!text && len))
        return ein_fail(err, EIN_EINVAL, "pl_ein_parse: NULL program text or output");
    /* Also keeps every line and column number comfortably inside an int. */
    if (len > PL_TEXT_MAX)
        return ein_fail_at(err, EIN_EPARSE, file, 1, 1, "program is %zu bytes; expected at "
                           "most 16 MiB", len);
    p = calloc(1, sizeof *p);
    if (!p)
        return ein_fail(err, EIN_ENOMEM, "%s: out of memory", file);
    p->file = file;
    p->err = err;
    p->dtype = EIN_F32;
    p->g = pl_graph_new();
    p->toks = malloc((PL_LINE_MAX + 1) * sizeof *p->toks);
    if (!p->g || !p->toks) {
        rc = ein_fail(err, EIN_ENOMEM, "%s: out of memory", file);
        goto done;
    }
    size_t off = 0, last = 0;
    while (off < len) {
        const char *b = text + off;
        const char *nl = memchr(b, '\n', len - off);
        size_t n = nl ? (size_t)(nl - b) : len - off;
        off += n + (nl != NULL);
        if (n > 0 && b[n - 1] == '\r')          /* CRLF line ends */
            n--;
        p->line++;
        last = n;
        if ((rc = pl_check_line_bytes(p, (const unsigned char *)b, n)) < 0 ||
            (rc = pl_lex_line(p, b, (int)n)) < 0 || (rc = parse_statement(p)) < 0)
            goto done;
    }
    if (p->nsaves == 0) {
        /* Point at the end of the text: where the missing save belongs. */
        int line = len == 0 ? 1 : text[len - 1] == '\n' ? p->line + 1 : p->line;
        int col = len == 0 || text[len - 1] == '\n' ? 1 : (int)last + 1;
        rc = ein_fail_at(err, EIN_EPARSE, file, line, col, p->nstatements ?
                         "nothing is saved; expected at least one 'save NAME'" :
                         "empty program; expected at least one 'save NAME'");
        goto done;
    }
    *out = p->g;
    p->g = NULL;
done:
    pl_graph_free(p->g);
    free(p->seq_ends);
    free(p->toks);
    free(p->dims);
    ein_nameidx_free(&p->dim_index);
    free(p);
    return rc;
}

int pl_ein_parse_file(const char *path, pl_graph **out, ein_error *err)
{
    char *buf = NULL;
    size_t n = 0;
    if (!path)
        return ein_fail(err, EIN_EINVAL, "pl_ein_parse_file: NULL path");
    /* A regular file of at most 16 MiB: a FIFO or a device is refused
     * before anything is read. */
    int rc = ein_file_read_all(path, PL_TEXT_MAX, "a program", &buf, &n, err);
    if (rc == 0)
        rc = pl_ein_parse(path, buf, n, out, err);
    free(buf);
    return rc;
}

/* The C API's entry for .ein files (einsummable.h). */
int ein_graph_parse_file(const char *path, ein_graph **out, ein_error *err)
{
    return pl_ein_parse_file(path, out, err);
}

/* An identifier usable as a tensor or dim name, copied into buf. */
int pl_tok_name(parser *p, const tok *t, const char *what, char *buf)
{
    if (t->kind != T_IDENT)
        return pl_perr(p, EIN_EPARSE, t->col, "expected %s, got %s", what, DESC(t));
    if (pl_is_reserved(t))
        return pl_perr(p, EIN_EPARSE, t->col, "'%.*s' is a reserved word; expected %s (dims, "
                    "dtype, input, save and operator names cannot be names)", t->len, t->s, what);
    if (t->len >= EIN_NAME_MAX)
        return pl_perr(p, EIN_EPARSE, t->col, "name '%.32s...' is %d characters long; expected "
                    "at most %d", t->s, t->len, EIN_NAME_MAX - 1);
    memcpy(buf, t->s, (size_t)t->len);
    buf[t->len] = '\0';
    return 0;
}

/* A size argument: an integer or a dim name. */
int pl_tok_size(parser *p, const tok *t, const char *what, int64_t *out)
{
    if (t->kind == T_IDENT) {
        char dn[EIN_NAME_MAX];
        int rc = pl_tok_name(p, t, what, dn);
        if (rc < 0)
            return rc;
        int k = pl_dim_find(p, dn);
        if (k < 0)
            return pl_perr(p, EIN_EPARSE, t->col, "unknown dim '%s'; expected %s (a dim or an "
                        "integer)", dn, what);
        *out = p->dims[k].size;
        return 0;
    }
    return pl_tok_int(p, t, what, out);
}

/* A reference to an existing tensor. */
int pl_tok_tensor(parser *p, const tok *t, int *id)
{
    char name[EIN_NAME_MAX];
    int rc = pl_tok_name(p, t, "a tensor name", name);
    if (rc < 0)
        return rc;
    *id = pl_graph_find(p->g, name);
    if (*id >= 0)
        return 0;
    if (pl_dim_find(p, name) >= 0)
        return pl_perr(p, EIN_EPARSE, t->col, "'%s' is a dim, not a tensor; expected a tensor name",
                    name);
    return pl_perr(p, EIN_EPARSE, t->col, "'%s' is not defined; expected a tensor defined on an earlier line",
                name);
}

/* A name for a new tensor: not taken, and room for one more node. */
int pl_tok_new_tensor(parser *p, const tok *t, char *name)
{
    int rc = pl_tok_name(p, t, "a tensor name", name);
    if (rc < 0)
        return rc;
    int id = pl_graph_find(p->g, name);
    if (id >= 0)
        return pl_perr(p, EIN_EPARSE, t->col, "duplicate name '%s' (defined at line %d); expected "
                    "a new name", name, pl_graph_node(p->g, id)->line);
    if (p->g->nnodes >= PL_PROGRAM_NODES_MAX)
        return pl_perr(p, EIN_EPARSE, t->col, "too many tensors; expected at most %d",
                    PL_PROGRAM_NODES_MAX);
    return 0;
}
