/* planner/pl_graph_int.h — helpers shared by pl_graph.c and the operator
 * builders in planner/ops/ (private to the planner). */
#ifndef PL_GRAPH_INT_H
#define PL_GRAPH_INT_H

#include <stddef.h>

#include "planner/pl_graph.h"

/* Zero *n, then make it a node of `kind` shaped like node x (dtype, rank,
 * shape, axis names) that reads x alone (ninputs 1, inputs[0] = x); the
 * builder then sets its kernel and any other inputs. x is a valid id. */
void pl_node_init_like(pl_node *n, const pl_graph *g, pl_node_kind kind, int x);

/* "8x16x4" into buf; returns buf. */
const char *pl_shape_str(char *buf, size_t len, int rank, const int64_t *shape);
/* Ranks 1..EIN_MAX_RANK, each dim in 1..PL_DIM_MAX, volume within int64. */
int pl_check_shape(const char *what, const char *name, int rank, const int64_t *shape,
                   ein_error *err);
int pl_check_id(const pl_graph *g, const char *what, int id, ein_error *err);
/* Append *proto under `name` (checked unique); returns the id. The node
 * takes ownership of proto->kernel.list only on success. */
int pl_graph_append(pl_graph *g, const char *name, const pl_node *proto, ein_error *err);
/* Copy and check sequence ends against a token count: strictly increasing,
 * positive, the last equal to `tokens` (an empty list: one sequence). */
int pl_seq_ends_copy(const char *what, const int64_t *ends, int n, int64_t tokens,
                     int64_t **out, ein_error *err);

#endif
