/* planner/pl_wire.h — a graph and its plan in MessagePack, for saved
 * programs (coordinator/compile/ein_compiled_file.c).
 *
 * A graph is an array of nodes, each a map {"name", "kind", "dtype",
 * "shape", "inputs", "kernel" (ein_kernel_pack's map; nil for an input),
 * "axes" (dim names), "saved", "pos" ([line, col])}. Decoding REBUILDS the
 * graph through the pl_graph_add_* builders, so every check they make
 * (ids, shapes, dtypes, operator parameters) applies to a saved graph,
 * and then requires the rebuilt node to equal the saved one (dtype, shape
 * and kernel): a file that does not describe a graph the builders would
 * make is refused, never trusted.
 *
 * A plan is a map {"p", "selector", "total", "nodes"}, each node nil (not
 * planned) or [counts, repartition, join, aggregation]: the interval count
 * per shardable index, and a fifth element p for a replicated spec
 * (pl_spec_make_replicated; the counts all 1). Decoding accepts only a
 * counts row that pl_spec_requests offers for that node on p devices (or,
 * with replicas, every count 1, replicas = p and an operator
 * pl_spec_replicable accepts), and rebuilds the
 * spec and its output tiling with pl_spec_make (the sub-costs are taken as
 * saved: finite and >= 0).
 *
 * Encoding is deterministic: the same graph and plan give the same bytes.
 * Ownership: *out of an unpack is the caller's (pl_graph_free,
 * pl_plan_free); on failure nothing is returned. Failures: EIN_EPROTO
 * (malformed), EIN_ESHAPE / EIN_EINVAL (a builder refused a node; the
 * message names it), EIN_ENOMEM. Pack returns 0 or EIN_ENOMEM. */
#ifndef PL_WIRE_H
#define PL_WIRE_H

#include "common/base/ein_error.h"
#include "planner/pl_graph.h"
#include "planner/pl_optimize.h"

struct msgpack_packer;
struct msgpack_object;

int pl_graph_pack(struct msgpack_packer *pk, const pl_graph *g, ein_error *err);
int pl_graph_unpack(const struct msgpack_object *o, pl_graph **out, ein_error *err);

int pl_plan_pack(struct msgpack_packer *pk, const pl_graph *g, const pl_plan *plan,
                 ein_error *err);
/* `g` is the graph the plan was made for (already unpacked). */
int pl_plan_unpack(const struct msgpack_object *o, const pl_graph *g, pl_plan **out,
                   ein_error *err);

#endif
