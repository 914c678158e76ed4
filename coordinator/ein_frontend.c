/* coordinator/ein_frontend.c — the front ends' calls beyond the public API
 * (see ein_frontend.h): flag values, the compile with extra knobs, and the
 * reports einplan and einrun print about a compiled program. */
#include "coordinator/ein_frontend.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/io/ein_json.h"
#include "coordinator/compile/co_lower.h"
#include "coordinator/compile/co_search.h"
#include "coordinator/compile/co_search_fit.h"
#include "coordinator/compile/ein_compile_int.h"
#include "coordinator/predict/co_sim.h"
#include "exchange/xp_search.h"
#include "planner/ein_api_int.h"
#include "planner/pl_optimize.h"
#include "planner/pl_strategy.h"
#include "planner/rewrite/pl_rewrite.h"

_Static_assert(EIN_FE_PLAN_WORK_DEFAULT == CO_SEARCH_WORK_DEFAULT,
               "ein_frontend.h's plan work default is co_search.h's");
_Static_assert(EIN_FE_SEARCH_WORK_DEFAULT == XP_SEARCH_DEFAULT_WORK,
               "ein_frontend.h's exchange search work default is xp_search.h's");
_Static_assert(EIN_FE_SEARCH_CAP_MS_DEFAULT == XP_SEARCH_DEFAULT_CAP_MS,
               "ein_frontend.h's exchange search cap default is xp_search.h's");

static int written(FILE *f)
{
    return ferror(f) ? EIN_EIO : 0;
}

int ein_fe_parse_exchange_chunks(const char *text, int *chunks, ein_error *err)
{
    return co_exchange_chunks_parse(text, chunks, err);
}

int ein_fe_parse_memory_limit(const char *text, double *bytes, ein_error *err)
{
    return co_memory_limit_parse(text, bytes, err);
}

int ein_fe_choice_check(ein_fe_choice kind, const char *value)
{
    int ok = -1;
    if (!value)
        return EIN_EINVAL;
    switch (kind) {
    case EIN_FE_SELECTOR: { pl_selector s; ok = pl_selector_parse(value, &s); break; }
    case EIN_FE_OBJECTIVE: { pl_objective o; ok = pl_objective_parse(value, &o); break; }
    case EIN_FE_PARTIALS: { pl_partials m; ok = pl_partials_parse(value, &m); break; }
    case EIN_FE_STRATEGY: { pl_plan_opts po = {0}; ok = pl_strategy_set(value, &po); break; }
    }
    return ok < 0 ? EIN_EINVAL : 0;
}

int ein_fe_compile(const ein_graph *g, int ndev, const ein_compile_options *o,
                   const ein_fe_compile_extra *x, ein_compiled **out, ein_error *err)
{
    co_compile_extra cx = {0};
    if (x) {
        cx.plan_work = x->plan_work;
        cx.record = x->record;
        cx.predict_only = x->predict_only;
    }
    return co_compile(g, ndev, o, x ? &cx : NULL, out, err);
}

void ein_fe_compiled_info(const ein_compiled *c, ein_fe_info *out)
{
    memset(out, 0, sizeof *out);
    out->rewritten = c->rewritten;
    out->loaded = c->loaded;
    out->plan_searched = c->plan_searched;
    out->time_objective = c->time_objective;
    out->selector_dp = c->plan && ein_plan_internal(c->plan)->selector == PL_SELECT_DP;
    out->seed = c->seed;
    out->topo_why = c->topo_why;
}

/* ---- the plan ------------------------------------------------------------ */

/* "8x1" grid of the output tiling: distinct intervals per dim. */
static void tiling_grid(const pl_tiling *t, int rank, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int a = 0; a < rank && n < len; a++) {
        int distinct = 0;
        for (int i = 0; i < t->n; i++) {
            int seen = 0;
            for (int j = 0; j < i && !seen; j++)
                seen = t->boxes[j].lo[a] == t->boxes[i].lo[a] &&
                       t->boxes[j].hi[a] == t->boxes[i].hi[a];
            distinct += !seen;
        }
        n += (size_t)snprintf(buf + n, len - n, "%s%d", a ? "x" : "", distinct);
    }
}

/* Node v's split as labels, and "on K of P devices" when it runs on fewer. */
static void split_text(const pl_graph *g, const pl_plan *plan, int v, char *split, size_t len)
{
    const pl_choice *c = &plan->nodes[v];
    pl_index idx[PL_MAX_INDICES];
    pl_op_indices(g, v, idx, NULL);
    pl_spec_format_labels(&c->spec, idx, split, len);
    if (c->spec.nparts < plan->p) {     /* too small for p devices */
        size_t l = strlen(split);
        snprintf(split + l, len - l, "%son %d of %d devices", l ? " " : "", c->spec.nparts,
                 plan->p);
    }
}

static void print_text(FILE *f, const char *path, const pl_graph *g, const pl_plan *plan)
{
    fprintf(f, "plan of %s on %d devices (selector %s%s)\n", path, plan->p,
            pl_selector_name(plan->selector),
            plan->partials == PL_PARTIALS_NATIVE ? ", partials native" : "");
    fprintf(f, "%-14s %-12s %-34s %-10s %14s %14s %14s\n", "operator", "op", "split", "tiling",
            "repartition", "join", "aggregation");
    for (int v = 0; v < g->nnodes; v++) {
        const pl_choice *c = &plan->nodes[v];
        if (!c->planned)
            continue;
        const pl_node *nd = pl_graph_node(g, v);
        char split[512], grid[64];
        split_text(g, plan, v, split, sizeof split);
        tiling_grid(&c->out_tiling, nd->rank, grid, sizeof grid);
        fprintf(f, "%-14s %-12s %-34s %-10s %14.0f %14.0f %14.0f%s%s\n", nd->name,
                pl_node_op_name(nd), split, grid, c->repart, c->join, c->agg,
                c->spec.agg != EIN_AGG_NONE ? "  agg " : "",
                c->spec.agg != EIN_AGG_NONE ? ein_agg_name(c->spec.agg) : "");
    }
    fprintf(f, "total cost: %.0f elements\n", plan->total);
}

static void print_json(FILE *f, const char *path, const pl_graph *g, const pl_plan *plan)
{
    fprintf(f, "{\"program\": ");
    ein_json_str(f, path);
    fprintf(f, ", \"devices\": %d, \"selector\": \"%s\", \"total_cost\": %.0f, \"ops\": [",
            plan->p, pl_selector_name(plan->selector), plan->total);
    int first = 1;
    for (int v = 0; v < g->nnodes; v++) {
        const pl_choice *c = &plan->nodes[v];
        if (!c->planned)
            continue;
        const pl_node *nd = pl_graph_node(g, v);
        pl_index idx[PL_MAX_INDICES];
        int n = pl_op_indices(g, v, idx, NULL);
        char grid[64];
        tiling_grid(&c->out_tiling, nd->rank, grid, sizeof grid);
        fprintf(f, "%s\n  {\"name\": ", first ? "" : ",");
        first = 0;
        ein_json_str(f, nd->name);
        fprintf(f, ", \"op\": \"%s\", \"line\": %d, \"split\": {", pl_node_op_name(nd),
                nd->line);
        for (int i = 0; i < n; i++) {
            fprintf(f, "%s", i ? ", " : "");
            ein_json_str(f, idx[i].label);
            fprintf(f, ": %d", c->spec.counts[i]);
        }
        fprintf(f, "}");
        if (c->spec.replicated) /* only then: other plans' JSON is as it was */
            fprintf(f, ", \"replicas\": %d", c->spec.nparts);
        fprintf(f, ", \"agg\": \"%s\", \"tiling\": {\"blocks\": %d, \"grid\": \"%s\"}, "
                   "\"flops\": %.0f, \"cost\": {\"repartition\": %.0f, \"join\": %.0f, "
                   "\"aggregation\": %.0f}}",
                c->spec.agg == EIN_AGG_NONE ? "none" : ein_agg_name(c->spec.agg),
                c->out_tiling.n, grid, pl_op_flops(g, v), c->repart, c->join, c->agg);
    }
    fprintf(f, "\n]}\n");
}

static void print_dot(FILE *f, const pl_graph *g, const pl_plan *plan)
{
    fprintf(f, "digraph plan {\n  rankdir=TB;\n  node [fontname=\"monospace\"];\n");
    fprintf(f, "  label=\"%d devices, %s, total cost %.0f\";\n", plan->p,
            pl_selector_name(plan->selector), plan->total);
    for (int v = 0; v < g->nnodes; v++) {
        const pl_node *nd = pl_graph_node(g, v);
        const pl_choice *c = &plan->nodes[v];
        if (nd->kind == PL_INPUT) {
            fprintf(f, "  n%d [shape=box, style=dashed, label=\"%s\"];\n", v, nd->name);
            continue;
        }
        if (!c->planned)
            continue;
        pl_index idx[PL_MAX_INDICES];
        char split[512];
        pl_op_indices(g, v, idx, NULL);
        pl_spec_format_labels(&c->spec, idx, split, sizeof split);
        fprintf(f, "  n%d [shape=ellipse, label=\"%s = %s\\n%s\"];\n", v, nd->name,
                pl_node_op_name(nd), split);
        /* Red: the operator wants this input in another tiling (repartition). */
        for (int k = 0; k < nd->ninputs; k++) {
            const pl_choice *u = &plan->nodes[nd->inputs[k]];
            int moved = 0;
            pl_tiling want;
            if (u->planned && pl_tiling_of_input(&c->spec, k, &want) == 0) {
                moved = !pl_tiling_equal(&want, &u->out_tiling);
                pl_tiling_clear(&want);
            }
            fprintf(f, "  n%d -> n%d%s;\n", nd->inputs[k], v,
                    moved ? " [color=red, label=\"repartition\"]" : "");
        }
    }
    fprintf(f, "}\n");
}

static void print_explain(FILE *f, const pl_graph *g, const pl_plan *plan)
{
    fprintf(f, "plan for %d devices (selector %s), cost %.0f elements:\n", plan->p,
            pl_selector_name(plan->selector), plan->total);
    for (int v = 0; v < g->nnodes; v++) {
        const pl_choice *c = &plan->nodes[v];
        if (!c->planned)
            continue;
        char spec[256];
        split_text(g, plan, v, spec, sizeof spec);
        fprintf(f, "  %-12s %-32s repartition %.0f  join %.0f  aggregation %.0f\n",
                pl_graph_node(g, v)->name, spec, c->repart, c->join, c->agg);
    }
}

int ein_fe_print_plan(FILE *f, const ein_compiled *c, const char *path,
                      ein_fe_plan_format format)
{
    const pl_plan *plan = ein_plan_internal(c->plan);
    switch (format) {
    case EIN_FE_PLAN_TEXT: print_text(f, path ? path : "", c->g, plan); break;
    case EIN_FE_PLAN_JSON: print_json(f, path ? path : "", c->g, plan); break;
    case EIN_FE_PLAN_DOT: print_dot(f, c->g, plan); break;
    case EIN_FE_PLAN_EXPLAIN: print_explain(f, c->g, plan); break;
    }
    return written(f);
}

/* ---- the rewrite and the plan search -------------------------------------- */

int ein_fe_print_rewrite(FILE *f, const ein_compiled *c)
{
    const pl_rewrite_stats *st = &c->rewrite_stats;
    const pl_graph *after = c->g;
    fprintf(f, "rewrite: %s after %d iterations (work %ld), %d e-nodes in %d e-classes, "
               "%.1f ms saturating, %.1f ms extracting%s\n",
            pl_rewrite_stop_name(st->stop), st->iterations, st->work, st->enodes, st->eclasses,
            1e3 * st->saturate_s, 1e3 * st->extract_s,
            st->ilp_optimal ? " (ILP: optimal)" : st->ilp_improved ? " (ILP improved)" : "");
    fprintf(f, "rewrite: roofline cost %.4g ms -> %.4g ms, %.4g -> %.4g GFLOP at run time\n",
            1e3 * st->cost_before, 1e3 * st->cost_after, 1e-9 * st->flops_before,
            1e-9 * st->flops_after);
    for (int v = 0; v < after->nnodes; v++) {
        const pl_node *nd = pl_graph_node(after, v);
        if (!nd->saved)
            continue;
        char expr[512];
        pl_rewrite_expr(after, v, expr, sizeof expr);
        fprintf(f, "rewrite: %s = %s\n", nd->name, expr);
    }
    return written(f);
}

int ein_fe_print_search(FILE *rf, const ein_compiled *c, uint64_t seed, int verbose)
{
    const co_search_report *rep = &c->search_rep;
    const xp_topology *t = &c->topo_limited;
    char blocks[48] = "";
    if (rep->period)
        snprintf(blocks, sizeof blocks, ", blocks of %d nodes", rep->period);
    if (c->whole_search)
        fprintf(rf, "objective time: the plan searched on the first two blocks does "
                    "not fit in %.2f %s per device over the whole graph: searched the "
                    "whole graph\n", t->memory * (t->memory < 1e9 ? 1e-6 : 1e-9),
                t->memory < 1e9 ? "MB" : "GB");
    if (rep->prefix_nodes)
        fprintf(rf, "objective time: %d repeated blocks: searched on the first %d nodes "
                    "(up to the second block's end), their choices reused for every "
                    "block; the times below are that prefix's\n",
                rep->nblocks, rep->prefix_nodes);
    fprintf(rf, "objective time: plan search on %s, seed %" PRIu64 ", budget %ld "
                "operator x device simulations beyond the seeds (spent %ld in %d simulations, %d "
                "seeds, %d choices%s); chosen: %s, predicted %.4f ms (best seed %s "
                "%.4f ms)\n",
            t->name, seed, rep->budget, rep->work, rep->nevals, rep->nseeds,
            rep->nclasses, blocks, rep->best_from, 1e3 * rep->best_time, rep->best_seed,
            1e3 * rep->best_seed_time);
    for (int i = 0; verbose && i < rep->ncands; i++)
        fprintf(rf, "  candidate %4d  %10.4f ms  %s\n", i + 1, 1e3 * rep->cands[i].time,
                rep->cands[i].what);
    return written(rf);
}

/* ---- simulating ----------------------------------------------------------- */

int ein_fe_simulate(const ein_compiled *c, ein_fe_sim **out, ein_error *err)
{
    return co_compiled_simulate(c, out, err);
}

int ein_fe_print_sim(FILE *f, const ein_compiled *c, const ein_fe_sim *r, int json)
{
    return json ? co_sim_json(c->progs, r, &c->topo_limited, &c->cal, f)
                : co_sim_print(c->progs, r, &c->topo_limited, &c->cal, f);
}

int ein_fe_write_sim_trace(FILE *f, const ein_compiled *c, const ein_fe_sim *r)
{
    return co_sim_trace(c->progs, r, f);
}

void ein_fe_sim_free(ein_fe_sim *r)
{
    co_sim_result_free(r);
}
