/* planner/pl_parse_int.h — the .ein parser's state, shared by pl_parse.c
 * (statements, operator calls, entry points) and pl_parse_lex.c (a line's
 * bytes and tokens; names, dims and numbers); private to those two files.
 * Functions return 0 or a negative EIN_E* code with the parser's error
 * filled (at the line and column at fault) unless said otherwise. */
#ifndef PL_PARSE_INT_H
#define PL_PARSE_INT_H

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

#define PL_LINE_MAX 4096                    /* bytes per line, newline excluded */
#define PL_PROGRAM_NODES_MAX 100000         /* tensors per program */
#define PL_TEXT_MAX ((size_t)16 << 20)      /* bytes per program */
#define PL_ARGS_MAX 24                      /* more than any operator takes */

typedef enum tok_kind { T_EOL, T_IDENT, T_NUM, T_STR, T_PUNCT } tok_kind;

typedef struct tok {
    tok_kind kind;
    const char *s;      /* the text; for T_STR the contents, quotes excluded */
    int len;
    int col;            /* 1-based column of the first byte (the quote of a string) */
} tok;

typedef struct dim_def {
    char name[EIN_NAME_MAX];
    int64_t size;
    int line;
} dim_def;

typedef struct parser {
    const char *file;
    ein_error *err;
    pl_graph *g;
    int line;
    tok *toks;          /* the current line: at most one token per byte, then T_EOL */
    int ntok, pos;
    dim_def *dims;      /* dims table, indexed by name in dim_index */
    int ndims, capdims;
    ein_nameidx dim_index; /* names -> dims[] (common/base/ein_nameidx.h) */
    ein_dtype dtype;    /* for later inputs, set by `dtype` */
    int64_t *seq_ends;  /* set by `seqs`, for later rope/attention */
    int nseq;
    int nstatements, nsaves;
    char scratch[PL_LINE_MAX + 1];
} parser;

int pl_perr(parser *p, int code, int col, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define DESC(t) pl_tok_desc((t), (char[64]){0}, 64)

/* Defined in one file of the module, used in another. */
const char *pl_tok_desc(const tok *t, char *buf, size_t n);
const tok *pl_peek(const parser *p);
int pl_is_reserved(const tok *t);
int pl_check_line_bytes(parser *p, const unsigned char *b, size_t n);
int pl_lex_line(parser *p, const char *b, int n);
int pl_tok_name(parser *p, const tok *t, const char *what, char *buf);
int pl_dim_find(const parser *p, const char *name);
int pl_dim_add(parser *p, const char *name, int64_t size);
int pl_tok_int(parser *p, const tok *t, const char *what, int64_t *out);
int pl_tok_number(parser *p, const tok *t, const char *what, double *out);
int pl_tok_float(parser *p, const tok *t, double *out);
int pl_tok_index(parser *p, const tok *t, const char *what, int64_t *out);
int pl_tok_size(parser *p, const tok *t, const char *what, int64_t *out);
int pl_tok_tensor(parser *p, const tok *t, int *id);
int pl_tok_new_tensor(parser *p, const tok *t, char *name);
int pl_expect_eol(parser *p, const char *after);
int pl_build_error(parser *p, int rc, const ein_error *e, int col);

#endif
