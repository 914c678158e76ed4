/* exchange/xp_parse_int.h — what the two phases of the ExProg reader
 * share (not a public header): the tokens, the syntax tree and the parser
 * state (xp_parse.c reads the text into them; xp_parse_build.c builds the
 * program from them).
 *
 * Ownership: the parser owns its tree (freed by xp_parse.c). Failure: a
 * negative EIN_E* code with P->err filled, the position named. */
#ifndef XP_PARSE_INT_H
#define XP_PARSE_INT_H

#include "common/base/ein_error.h"
#include "exchange/xp_program.h"

enum { T_EOF, T_NL, T_ID, T_INT, T_NUM, T_AT, T_ARROW, T_COMMA, T_SEMI, T_PLUS, T_LBRACE,
       T_RBRACE, T_LPAREN, T_RPAREN, T_COLON, T_LBRACK, T_RBRACK, T_SLASH, T_STAR, T_DOTS, T_BAD };

typedef struct tok {
    int kind;
    int line, col;
    const char *s;   /* into the text */
    int len;
    double num;
} tok;

typedef struct lexer {
    const char *p;
    int line, col;
} lexer;

/* ---- the syntax tree ---- */

typedef struct target {
    int site;        /* or -1 */
    int part;        /* partition index, or -1 */
    int line, col;
} target;

typedef struct agg {
    int *el;         /* IN indices */
    int n;
    int line, col;
} agg;

typedef struct stmt {
    agg x;
    int chunk, run, nchunks;  /* [c/k] (run 1), [a..b/k]; 0, 1 of 1: whole */
    target *src;     /* nsrc >= 1 */
    int nsrc;
    int *hop;        /* relays */
    int nhop;
    target *dst;
    int ndst;
    int line, col;
} stmt;

typedef struct parser {
    const char *file;
    lexer L;
    tok t, prev;
    tok kw;          /* the keyword of the section being read */
    ein_error *err;
    /* GPUS */
    int *gpus, ngpus_decl, gpus_seen;
    unsigned char gpu_listed[XP_SITES_MAX];  /* GPUS entries seen */
    unsigned char in_part[XP_SITES_MAX];     /* sites named by a partition */
    int gpus_line, gpus_col;
    /* PARTITIONS */
    struct { char name[XP_NAME_MAX]; int size; int *mem; int line, col; } *part;
    int npart;
    int parts_line, parts_col;
    /* IN */
    struct { char name[XP_NAME_MAX]; int site; double bytes; int line, col; } *in;
    int nin, in_seen;
    /* OUT and actions */
    stmt *out;
    int nout;
    stmt *act;
    int nact;
    int maxsite;
} parser;

/* EIN_ENOMEM, "out of memory", into P->err. */
int xp_parse_oom(parser *P);
/* The program of a parsed text (*out new, xp_program_free). */
int xp_parse_build(parser *P, xp_program **out);

#endif
