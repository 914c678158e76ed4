/* planner/pl_strategy.h — hand-written parallelisation strategies as
 * forced plans, the baselines the paper compares against (§6).
 *
 * A strategy ranks index labels (the dims of the .ein program, as
 * einplan prints them); every operator takes the spec with the most
 * intervals on the first label it has, then on the next, and so on, and
 * the fewest split indices outside the list (pl_plan_opts.force):
 *  - megatron: Megatron-LM tensor parallelism with sequence parallelism
 *    for the norms and residual adds: attention and its projections by
 *    heads (heads_kv, heads, d_q, d_kv), the FFN by d_ff (w1/w3 by
 *    columns, w2 by rows: an aggregation after it, and after wo, whose
 *    contraction `hidden` is split), everything else by tokens; an
 *    einsum without tokens to split (a decode step's head) by `vocab`;
 *  - ulysses: DeepSpeed-Ulysses: everything by tokens except attention,
 *    by heads (an all-to-all before and after it);
 *  - sequence: everything by tokens (attention too: each device its
 *    queries, with the keys they need);
 *  - data: by tokens, but only where every attention's batch has at
 *    least p sequences (replicated weights, each device whole sequences);
 *    otherwise pl_strategy_check fails.
 * The labels are those of eingen's LLaMA programs (tokens, d_model, d_q,
 * d_kv, d_ff, heads, heads_kv, hidden); on other programs an operator
 * with none of them takes its first spec with fewest split indices.
 *
 * Ownership: strategies are static tables; nothing to free. */
#ifndef PL_STRATEGY_H
#define PL_STRATEGY_H

#include "common/base/ein_error.h"
#include "planner/pl_optimize.h"

/* Set opts->force and force_ctx for strategy `name`; -1 if unknown. */
int pl_strategy_set(const char *name, pl_plan_opts *opts);
/* Whether strategy `name` applies to g on p devices (EIN_EINVAL naming the
 * operator that prevents it). */
int pl_strategy_check(const char *name, const pl_graph *g, int p, ein_error *err);
extern const char *const pl_strategy_names[]; /* NULL-terminated */

#endif
