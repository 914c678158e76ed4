/* planner/rewrite/rw_rules_int.h — compiled rules (patterns, parameter
 * expressions, conditions), shared by rw_rules.c (which parses and checks
 * them) and rw_saturate.c (which matches and applies them); private to the
 * rewriter. A pl_rw_rules owns its arrays (pl_rw_rules_free). */
#ifndef RW_RULES_INT_H
#define RW_RULES_INT_H

#include <stdint.h>

#include "common/io/ein_file.h"
#include "planner/rewrite/pl_rewrite.h"
#include "planner/rewrite/rw_egraph.h"

#define RW_MAX_VARS 16
#define RW_PAT_MAX_NODES 32
#define RW_NAME_MAX 64

#define RW_MAX_CONDS 4
/* Integer variables take the values 0..RW_CHECK_INTS-1 in the shape check
 * (enough for sums of two of the dims 2, 3, 5). */
#define RW_CHECK_INTS 11

enum { PX_LIT, PX_VAR, PX_DIM, PX_ADD, PX_SUB, PX_RANK };
enum { PC_EQ, PC_LE, PC_LT };

typedef struct rw_pexpr {
    int kind;
    int64_t v;   /* LIT: value */
    int var;     /* VAR, DIM, RANK */
    int a, b;    /* ADD, SUB: sub-expressions; DIM: a = the axis expression */
} rw_pexpr;

typedef struct rw_cond {
    int kind;    /* PC_* */
    int a, b;    /* expressions */
} rw_cond;

typedef struct rw_pat {
    int var;                  /* >= 0: a class variable */
    int op, np, nch;
    int pe[RW_MAX_PARAMS];    /* expressions */
    int ch[PL_MAX_INPUTS];    /* patterns */
} rw_pat;

typedef struct rw_rule {
    char name[RW_NAME_MAX];
    char where[EIN_PATH_MAX + 32];   /* "file:line:col" */
    int multi;
    int lhs[2], rhs[2];
    int nvars;
    char var_name[RW_MAX_VARS][RW_NAME_MAX];
    int var_int[RW_MAX_VARS];        /* integer (parameter) variable */
    uint32_t vars_of[2];             /* variables of lhs[0], lhs[1] */
    int nconds;                      /* (if COND...): all must hold to apply */
    rw_cond conds[RW_MAX_CONDS];
} rw_rule;

struct pl_rw_rules {
    rw_rule *rules;
    int n, cap;
    rw_pat *pats;
    int npats, cap_pats;
    rw_pexpr *ex;
    int nex, cap_ex;
};

#endif
