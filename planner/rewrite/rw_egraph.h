/* planner/rewrite/rw_egraph.h — the e-graph of the rewrite stage (private).
 *
 * An e-node is an operator of the rewrite language (rw_op), up to
 * RW_MAX_PARAMS integer parameters and up to PL_MAX_INPUTS children, which
 * are e-class ids. E-classes are kept in a union-find (path compression,
 * union by size); e-nodes are hash-consed on their canonical form (children
 * replaced by their class roots). Every class keeps its nodes and its
 * parents (the nodes that use it as a child).
 *
 * Rebuilding is deferred, as in egg: rw_union only records the merged root
 * in a worklist; rw_egraph_rebuild restores the invariants (hash-cons of
 * canonical nodes, congruence closure, analysis) before the next search.
 *
 * The analysis of a class: rank, shape, dtype, and `weight` (every input the
 * class depends on, in at least one of its forms, is a weight: it can be
 * precomputed once and costs nothing at run time). Merged classes must agree
 * on shape and dtype (rules are shape-checked, so a mismatch is a bug and
 * rw_union reports it); `weight` is the OR of both sides.
 *
 * Ownership: rw_egraph owns everything; rw_egraph_free releases it. Node and
 * class arrays grow, so never keep pointers into them across an add. */
#ifndef RW_EGRAPH_H
#define RW_EGRAPH_H

#include <stdint.h>

#include "common/base/ein_vec.h"
#include "planner/pl_graph.h"

#define RW_MAX_PARAMS 3

typedef enum rw_op {
    RW_INPUT = 0, /* p[0] = node id in the source graph */
    RW_OPAQUE,    /* an operator the rules do not know; p[0] = source node id */
    RW_MATMUL,    /* [m,k] x [k,n] -> [m,n] */
    RW_ADD,       /* elementwise add, numpy broadcasting */
    RW_CONCAT,    /* p[0] = axis; 1..PL_MAX_INPUTS children */
    RW_SLICE,     /* p[0] = axis, p[1] = start, p[2] = end */
    RW_UNARY,     /* p[0] = ein_unary, p[1] = the scalar's bits (double) */
    RW_BINARY,    /* p[0] = ein_binary other than add; numpy broadcasting */
    RW_TRANSPOSE, /* one-operand einsum "ij->ji" */
    RW_OP_COUNT
} rw_op;

typedef struct rw_node {
    int op;                       /* rw_op */
    int nch;
    int64_t p[RW_MAX_PARAMS];
    int ch[PL_MAX_INPUTS];        /* class ids (canonical after rebuild) */
    int cls;                      /* the class it was added to (find() it) */
    int dead;                     /* congruent duplicate of a live node */
} rw_node;

typedef EIN_VEC(int) rw_ivec; /* common/base/ein_vec.h: ein_vec_push, ein_vec_free */

typedef struct rw_class {
    rw_ivec nodes;                /* node ids (live and dead) */
    rw_ivec parents;              /* node ids that use this class as a child */
    int size;                     /* union-find size, roots only */
    /* analysis */
    ein_dtype dtype;
    int rank;
    int64_t shape[EIN_MAX_RANK];
    int weight;
} rw_class;

typedef struct rw_egraph {
    const pl_graph *src;          /* the graph the inputs/opaque nodes come from */
    const uint8_t *is_weight;     /* per source node id: input that is a weight */
    rw_node *nodes;
    int nnodes, cap_nodes;
    int *uf;                      /* union-find parent per class id */
    rw_class *classes;
    int nclasses, cap_classes;
    int *table;                   /* hash-cons: node id, -1 empty, -2 deleted */
    int table_cap, table_used;    /* used counts deleted slots too */
    rw_ivec pending;              /* merged roots to repair */
    int nlive;                    /* live (non-dead) nodes */
} rw_egraph;


rw_egraph *rw_egraph_new(const pl_graph *src, const uint8_t *is_weight);
void rw_egraph_free(rw_egraph *eg);

int rw_find(rw_egraph *eg, int c);
int rw_find_const(const rw_egraph *eg, int c);

/* The shape/dtype a node would have; EIN_ESHAPE (message in err) when its
 * children do not fit the operator. Children may be non-canonical. */
int rw_node_infer(const rw_egraph *eg, const rw_node *n, rw_class *out, ein_error *err);

/* The same on the analyses of the children (operators of the rules only). */
int rw_infer(int op, const int64_t *p, int nch, const rw_class *const *c, rw_class *out,
             ein_error *err);

/* Add a node (children canonicalised here), or find it: returns its class
 * root (>= 0) or a negative code (EIN_ESHAPE if it does not type-check). */
int rw_add(rw_egraph *eg, const rw_node *n, ein_error *err);
/* Merge two classes: returns 1 if they were different, 0 if already one,
 * or a negative code (shape mismatch: a rule is unsound). */
int rw_union(rw_egraph *eg, int a, int b, ein_error *err);
/* Restore the invariants; returns 0 or a negative code. */
int rw_egraph_rebuild(rw_egraph *eg, ein_error *err);

/* After a rebuild: the number of live nodes that are not canonical or not
 * in the hash-cons (0 when the invariants hold; for tests). */
int rw_egraph_check(rw_egraph *eg);

/* Number of nodes (live) and classes (roots). */
int rw_egraph_nclasses(const rw_egraph *eg);

/* Equality saturation with the rules (rw_rules.c); fills stop, iterations,
 * applied, rejected and saturate_s of *st. The rules are only read: the
 * run's state (limits, clock, backoff statistics) is its own. Limits are
 * checked after each iteration (and between rules while applying), so at
 * least one iteration runs. */
struct pl_rw_rules;
struct pl_rewrite_opts;
struct pl_rewrite_stats;
int rw_saturate(rw_egraph *eg, const struct pl_rw_rules *rules, const struct pl_rewrite_opts *o,
                struct pl_rewrite_stats *st, ein_error *err);

/* ILP extraction (rw_ilp.c): run[]/pre[] per node; best[] per class holds
 * the MIP start and receives the solution's choice where the solver found
 * one. EIN_EUNSUPPORTED when built without CBC; EIN_ENOPLAN when the
 * solver found no feasible solution in time. */
int rw_ilp_extract(const rw_egraph *eg, const double *run, const double *pre,
                   const uint8_t *black, const int *roots, int nroots, double time_limit_s,
                   int *best, int *optimal, ein_error *err);

const char *rw_op_name(int op);
int rw_op_by_name(const char *s);

#endif
