/* coordinator/compile/co_search_fit.h — the plan search (co_search.h) whose result
 * is checked against the memory on the whole graph, and the user's memory
 * limit (issue 24).
 *
 * co_plan_search on a model of many identical blocks searches a prefix of
 * two blocks, so its memory check is the prefix's: a plan that keeps every
 * weight on every device fits there and not over 32 blocks.
 * co_plan_search_fit runs co_plan_search and, when it searched a prefix,
 * the topology states a memory and a generous bound of a device's bytes
 * (every input twice, the prefix's outputs whole) exceeds it, lowers and
 * simulates the plan it returned on the whole graph; if that does not fit, it searches again on
 * the whole graph (co_search_opts.whole), where every candidate is checked
 * whole, and returns that search's plan (which may still not fit: then the
 * fastest seed, as co_plan_search says). *whole_search (may be NULL) is 1
 * when that second search ran. Same arguments, ownership and failures as
 * co_plan_search.
 *
 * co_memory_limit_parse reads a size as the user writes it: bytes ("5e9",
 * "4750000000") or a number with a unit KB, MB, GB, TB (powers of 1000)
 * or KiB, MiB, GiB, TiB; 0 or a negative, NaN or a bad unit fail with
 * EIN_EINVAL naming the text. co_topo_limit_memory caps topo->memory at
 * `limit` bytes (limit > 0; a topology without `memory` takes the limit). */
#ifndef CO_SEARCH_FIT_H
#define CO_SEARCH_FIT_H

#include "coordinator/compile/co_search.h"

int co_plan_search_fit(const pl_graph *g, int p, const pl_plan_opts *base,
                       const xp_topology *topo, const co_calib *cal, const co_search_opts *so,
                       pl_plan **out, co_search_report *rep, int *whole_search, ein_error *err);

/* --objective time: for the DP without forced specs, the plan search
 * (co_plan_search_fit, its default options and `seed`); for another
 * selector or forced specs (`base`, NULL: none, gives the options), that
 * selector's plan under the DP's time cost (co_calib_objective_rates).
 * Deterministic. Returns 0 or a negative code with `err` filled. */
int co_plan_by_time(const pl_graph *g, int p, int sel, uint64_t seed, const pl_plan_opts *base,
                    const xp_topology *topo, const co_calib *cal, pl_plan **out, ein_error *err);

int co_memory_limit_parse(const char *text, double *bytes, ein_error *err);
void co_topo_limit_memory(xp_topology *topo, double limit);

#endif
