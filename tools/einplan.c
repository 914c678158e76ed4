/* tools/einplan.c — explain how a .ein program would be decomposed.
 *
 *   einplan --devices P [--selector dp|greedy|random] [--seed S]
 *           [--linear-paths] [--json] [--dot] plan.ein
 *
 * Prints, per planned operator, its spec as interval counts per index
 * ("tokens:8 d_model:1"), the output tiling, the three sub-costs (in
 * elements, the paper's proxy) and the plan total. --json prints one JSON
 * object (total_cost, ops[] with name, op, line, split, agg, tiling, cost);
 * --dot prints Graphviz with each operator labelled by its split. Exit
 * status, like einrun's: 0 on success; 2 on bad usage or bad input (a file
 * that cannot be read or parsed, shapes that do not fit, no plan for P
 * devices — the message names the operator and its line —, a bad
 * --topology or --rewrite-weights); 1 on any other failure (out of memory, the
 * rewriter failing). */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ein_json.h"
#include "coordinator/compile/co_lower.h"
#include "coordinator/compile/co_search.h"
#include "coordinator/compile/co_search_fit.h"
#include "coordinator/predict/co_sim.h"
#include "exchange/xp_topo.h"
#include "planner/rewrite/pl_rewrite.h"
#include "tools/rewrite_report.h"
#include "planner/pl_optimize.h"
#include "planner/pl_parse.h"
#include "coordinator/compile/ein_compile_int.h"
#include "planner/ein_api_int.h"
#include "planner/pl_strategy.h"

/* Exit status for an error code: bad input is 2, the rest 1. */
static int exit_status(int code)
{
    switch (code) {
    case EIN_EINVAL: case EIN_EIO: case EIN_EPARSE: case EIN_ESHAPE: case EIN_ENOPLAN: return 2;
    default: return 1;
    }
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: einplan --devices P [--selector dp|greedy|random] [--seed S]\n"
            "               [--linear-paths] [--rewrite [--rewrite-weights A,B,...] [--ilp]]\n"
            "               [--topology T] [--exchanges [--exchange-chunks auto|off|K]]\n"
            "               [--json | --dot] plan.ein\n"
            "       einplan --devices P --simulate [--topology T] [--calibration C]\n"
            "               [--objective comm|time] [--strategy S] [--memory-limit SIZE]\n"
            "               [--partials f32|native] [--trace FILE] [--json] plan.ein\n"
            "\n"
            "Prints the plan for P devices: per operator its split (interval counts per\n"
            "dim), the output tiling and the repartition / join / aggregation costs.\n"
            "  --rewrite   first rewrite the graph by equality saturation (matmul order,\n"
            "              merged projections) and plan the cheapest equivalent graph;\n"
            "              --rewrite-weights names the inputs that are weights (weight-only\n"
            "              work is free), --ilp extracts with CBC's ILP, --topology T takes\n"
            "              the roofline's peak and HBM bandwidth from machine T\n"
            "              (default: the `host` machine sized to P, as einrun --cpu P).\n"
            "  --exchanges compile fully, as einrun would (P <= 64): synthesise every\n"
            "              exchange on the topology (--topology T, default host) and\n"
            "              print each device's program size and every exchange body in\n"
            "              ExProg (docs/exprog.md).\n"
            "  --exchange-chunks auto|off|K  with --exchanges: auto lets the synthesis\n"
            "              choose bodies that move chunks of blocks (pipelined relays,\n"
            "              rings), off moves whole blocks only, K makes every action of\n"
            "              every exchange a stream of K chunks (for testing); default off,\n"
            "              or $EIN_EXCHANGE_CHUNKS.\n"
            "  --simulate  predict one iteration on --topology T (default host) with its\n"
            "              calibration (or --calibration FILE): time, per-device compute /\n"
            "              communication / idle, peak memory, critical path; --json,\n"
            "              --trace FILE (docs/simulator.md). Peak memory is with buffers\n"
            "              placed by liveness, and what every buffer in a place of its\n"
            "              own would need.\n"
            "  --no-reuse  lower without reusing buffers' bytes (as $EIN_NO_REUSE=1).\n"
            "  --objective comm|time  time (the default where the topology, default\n"
            "              host, has a calibration: every built-in has one): a plan\n"
            "              search by predicted time (seeds: the DP under both costs,\n"
            "              every --strategy, random plans; then moves, each simulated;\n"
            "              the fastest plan that fits in memory; docs/planner.md);\n"
            "              comm: the paper's DP, minimising the elements moved (the\n"
            "              default otherwise). It prints which objective and work\n"
            "              budget chose the plan; -v also every candidate and its\n"
            "              predicted time.\n"
            "  --plan-work N  the search's budget beyond its seeds, in operators x devices\n"
            "              simulated (0: the default, %d; -1: seeds only).\n"
            "  --partials f32|native  the dtype partial sums of a split contraction are\n"
            "              moved and aggregated in: f32 (default) or native, the tensor's\n"
            "              dtype (half the bytes for bf16/f16); the costs, the simulator\n"
            "              and the search count whichever is chosen (as einrun).\n"

            "  --memory-limit SIZE  memory per device the plan must fit in, e.g. 4.75GB,\n"
            "              5000MiB or bytes (the topology's memory if that is smaller):\n"
            "              the search keeps only plans whose predicted peak fits, checked\n"
            "              on the whole graph; --simulate reports against it.\n",
            CO_SEARCH_WORK_DEFAULT);
}

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

static void print_text(const char *path, const pl_graph *g, const pl_plan *plan)
{
    printf("plan of %s on %d devices (selector %s%s)\n", path, plan->p,
           pl_selector_name(plan->selector),
           plan->partials == PL_PARTIALS_NATIVE ? ", partials native" : "");
    printf("%-14s %-12s %-34s %-10s %14s %14s %14s\n", "operator", "op", "split", "tiling",
           "repartition", "join", "aggregation");
    for (int v = 0; v < g->nnodes; v++) {
        const pl_choice *c = &plan->nodes[v];
        if (!c->planned)
            continue;
        const pl_node *nd = pl_graph_node(g, v);
        pl_index idx[PL_MAX_INDICES];
        char split[512], grid[64];
        pl_op_indices(g, v, idx, NULL);
        pl_spec_format_labels(&c->spec, idx, split, sizeof split);
        if (c->spec.nparts < plan->p) {     /* too small for p devices */
            size_t l = strlen(split);
            snprintf(split + l, sizeof split - l, "%son %d of %d devices", l ? " " : "",
                     c->spec.nparts, plan->p);
        }
        tiling_grid(&c->out_tiling, nd->rank, grid, sizeof grid);
        printf("%-14s %-12s %-34s %-10s %14.0f %14.0f %14.0f%s%s\n", nd->name,
               pl_node_op_name(nd), split, grid, c->repart, c->join, c->agg,
               c->spec.agg != EIN_AGG_NONE ? "  agg " : "",
               c->spec.agg != EIN_AGG_NONE ? ein_agg_name(c->spec.agg) : "");
    }
    printf("total cost: %.0f elements\n", plan->total);
}

static void print_json(const char *path, const pl_graph *g, const pl_plan *plan)
{
    printf("{\"program\": ");
    ein_json_str(stdout, path);
    printf(", \"devices\": %d, \"selector\": \"%s\", \"total_cost\": %.0f, \"ops\": [",
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
        printf("%s\n  {\"name\": ", first ? "" : ",");
        first = 0;
        ein_json_str(stdout, nd->name);
        printf(", \"op\": \"%s\", \"line\": %d, \"split\": {", pl_node_op_name(nd), nd->line);
        for (int i = 0; i < n; i++) {
            printf("%s", i ? ", " : "");
            ein_json_str(stdout, idx[i].label);
            printf(": %d", c->spec.counts[i]);
        }
        printf("}, \"agg\": \"%s\", \"tiling\": {\"blocks\": %d, \"grid\": \"%s\"}, "
               "\"flops\": %.0f, \"cost\": {\"repartition\": %.0f, \"join\": %.0f, "
               "\"aggregation\": %.0f}}",
               c->spec.agg == EIN_AGG_NONE ? "none" : ein_agg_name(c->spec.agg),
               c->out_tiling.n, grid, pl_op_flops(g, v), c->repart, c->join, c->agg);
    }
    printf("\n]}\n");
}

static void print_dot(const pl_graph *g, const pl_plan *plan)
{
    printf("digraph plan {\n  rankdir=TB;\n  node [fontname=\"monospace\"];\n");
    printf("  label=\"%d devices, %s, total cost %.0f\";\n", plan->p,
           pl_selector_name(plan->selector), plan->total);
    for (int v = 0; v < g->nnodes; v++) {
        const pl_node *nd = pl_graph_node(g, v);
        const pl_choice *c = &plan->nodes[v];
        if (nd->kind == PL_INPUT) {
            printf("  n%d [shape=box, style=dashed, label=\"%s\"];\n", v, nd->name);
            continue;
        }
        if (!c->planned)
            continue;
        pl_index idx[PL_MAX_INDICES];
        char split[512];
        pl_op_indices(g, v, idx, NULL);
        pl_spec_format_labels(&c->spec, idx, split, sizeof split);
        printf("  n%d [shape=ellipse, label=\"%s = %s\\n%s\"];\n", v, nd->name,
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
            printf("  n%d -> n%d%s;\n", nd->inputs[k], v, moved ? " [color=red, label=\"repartition\"]" : "");
        }
    }
    printf("}\n");
}

/* --simulate's front end: the compiled value's programs simulated
 * (co_compiled_simulate), printed with co_sim.h. */

/* Compile as `co` and `x` say; on failure print one line prefixed by
 * `prog` (naming `path` for a plan that cannot be made) and return an
 * exit status, else 0. */
static int compile(const char *prog, const char *path, const pl_graph *g, int p,
                   const ein_compile_options *co, const co_compile_extra *x,
                   ein_compiled **out)
{
    ein_error err = {0};
    if (co_compile(g, p, co, x, out, &err) == 0)
        return 0;
    if (err.code == EIN_ENOPLAN || err.code == EIN_ESHAPE)
        fprintf(stderr, "%s: %s: %s\n", prog, path, err.msg);
    else
        fprintf(stderr, "%s: %s\n", prog, err.msg);
    return exit_status(err.code);
}

/* --simulate: simulate the compiled `*comp`, print text, --json or write
 * --trace. Memory is a constraint: if the plan's peak exceeds some
 * device's memory, the DP's program compiled for the other objective is
 * tried (it replaces *comp); if none fits, the memory error. Returns 0, or
 * an exit status (2 bad input, 1 other) after printing one line on stderr
 * prefixed by `prog`. */
static int sim_cli(const char *prog, const char *path, const pl_graph *g, int p,
                   const ein_compile_options *co, const co_compile_extra *x, ein_compiled **comp,
                   const char *trace_path, int json)
{
    ein_error err = {0}, merr = {0};
    co_sim_result *r = NULL;
    ein_compiled *c = *comp, *other = NULL;
    int status = 2;
    if (co_compiled_simulate(c, &r, &err) < 0) {
        if (err.code != EIN_ELIMIT || ein_plan_internal(c->plan)->selector != PL_SELECT_DP) {
            fprintf(stderr, "%s: --simulate: %s\n", prog, err.msg);
            status = err.code == EIN_EINVAL || err.code == EIN_ELIMIT ? 2 : 1;
            goto done;
        }
        /* Memory is a constraint: try the other objective's program. */
        merr = err;
        ein_compile_options o2 = *co;
        int time = !c->time_objective;
        o2.objective = time ? "time" : "comm";
        if (co_compile(g, p, &o2, x, &other, &err) < 0 ||
            co_compiled_simulate(other, &r, &err) < 0) {
            fprintf(stderr, "%s: --simulate: no plan fits: %s\n", prog, merr.msg);
            goto done;
        }
        fprintf(stderr, "%s: the plan of objective %s does not fit (%s); showing objective %s's\n",
                prog, time ? "comm" : "time", merr.msg, time ? "time" : "comm");
        ein_compiled_free(c);
        *comp = c = other;
        other = NULL;
    }
    (void)path;
    status = 1;
    if ((json ? co_sim_json(c->progs, r, &c->topo_limited, &c->cal, stdout)
              : co_sim_print(c->progs, r, &c->topo_limited, &c->cal, stdout)) < 0) {
        fprintf(stderr, "%s: cannot write the report\n", prog);
        goto done;
    }
    if (trace_path) {
        FILE *f = fopen(trace_path, "we");
        int rc = f ? co_sim_trace(c->progs, r, f) : EIN_EIO;
        if (f && fclose(f) != 0)
            rc = EIN_EIO;
        if (rc < 0) {
            fprintf(stderr, "%s: --trace %s: cannot write it\n", prog, trace_path);
            status = 2;
            goto done;
        }
        if (!json)
            printf("predicted timeline written to %s\n", trace_path);
    }
    status = 0;
done:
    co_sim_result_free(r);
    ein_compiled_free(other);
    return status;
}

/* Which objective and budget chose c's plan (the plan search's report). */
static void search_report(FILE *rf, const ein_compiled *c, uint64_t seed, int verbose)
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
}

int main(int argc, char **argv)
{
    static const struct option lopts[] = {
        {"devices", required_argument, NULL, 'p'},
        {"selector", required_argument, NULL, 's'},
        {"seed", required_argument, NULL, 'S'},
        {"json", no_argument, NULL, 'j'},
        {"dot", no_argument, NULL, 'd'},
        {"linear-paths", no_argument, NULL, 'l'},
        {"rewrite", no_argument, NULL, 'r'},
        {"rewrite-weights", required_argument, NULL, 'w'},
        {"weights", required_argument, NULL, 'w'},  /* the old name, kept */
        {"ilp", no_argument, NULL, 'i'},
        {"topology", required_argument, NULL, 't'},
        {"exchanges", no_argument, NULL, 'x'},
        {"exchange-chunks", required_argument, NULL, 0x125},
        {"simulate", no_argument, NULL, 0x120},
        {"trace", required_argument, NULL, 0x121},
        {"calibration", required_argument, NULL, 0x122},
        {"objective", required_argument, NULL, 0x123},
        {"strategy", required_argument, NULL, 0x124},
        {"plan-work", required_argument, NULL, 0x126},
        {"no-reuse", no_argument, NULL, 0x127},
        {"partials", required_argument, NULL, 0x128},
        {"memory-limit", required_argument, NULL, 0x129},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int p = 0, json = 0, dot = 0, rewrite = 0, ilp = 0, exchanges = 0, c;
    const char *weights = NULL, *topo_arg = NULL;
    const char *trace_path = NULL, *cal_arg = NULL;
    int simulate = 0, chunks = 0, verbose = 0;
    long plan_work = 0;
    double mem_limit = 0;
    const char *strategy = NULL;
    int objective_given = 0;
    pl_selector sel = PL_SELECT_DP;
    pl_plan_opts opts = {0};
    uint64_t seed = 1;
    char *end;
    while ((c = getopt_long(argc, argv, "p:s:S:jdlhv", lopts, NULL)) != -1) {
        switch (c) {
        case 'p':
            p = (int)strtol(optarg, &end, 10);
            if (*end || p < 1 || p > 4096) {
                fprintf(stderr, "einplan: --devices '%s': expected an integer from 1 to 4096\n",
                        optarg);
                return 2;
            }
            break;
        case 's':
            if (pl_selector_parse(optarg, &sel) < 0) {
                fprintf(stderr, "einplan: --selector '%s': expected dp, greedy or random\n", optarg);
                return 2;
            }
            break;
        case 'S':
            seed = strtoull(optarg, &end, 10);
            if (*end || !*optarg) {
                fprintf(stderr, "einplan: --seed '%s': expected a non-negative integer\n", optarg);
                return 2;
            }
            break;
        case 'j': json = 1; break;
        case 'd': dot = 1; break;
        case 'l': opts.linear_paths = 1; break;
        case 'r': rewrite = 1; break;
        case 'w': weights = optarg; break;
        case 'i': ilp = 1; break;
        case 't': topo_arg = optarg; break;
        case 'x': exchanges = 1; break;
        case 0x125: {
            ein_error e = {0};
            if (co_exchange_chunks_parse(optarg, &chunks, &e) < 0) {
                fprintf(stderr, "einplan: --exchange-chunks %s\n", e.msg);
                return 2;
            }
            break;
        }
        case 0x120: simulate = 1; break;
        case 0x127: setenv("EIN_NO_REUSE", "1", 1); break; /* read by the lowering */
        case 0x129: {
            ein_error e = {0};
            if (co_memory_limit_parse(optarg, &mem_limit, &e) < 0) {
                fprintf(stderr, "einplan: --memory-limit: %s\n", e.msg);
                return 2;
            }
            break;
        }
        case 0x121: trace_path = optarg; break;
        case 0x122: cal_arg = optarg; break;
        case 0x124:
            if (pl_strategy_set(optarg, &opts) < 0) {
                fprintf(stderr, "einplan: --strategy '%s': expected megatron, ulysses, sequence "
                                "or data\n", optarg);
                return 2;
            }
            strategy = optarg;
            break;
        case 0x123:
            if (pl_objective_parse(optarg, &opts.objective) < 0) {
                fprintf(stderr, "einplan: --objective '%s': expected comm or time\n", optarg);
                return 2;
            }
            objective_given = 1;
            break;
        case 0x128:
            if (pl_partials_parse(optarg, &opts.partials) < 0) {
                fprintf(stderr, "einplan: --partials '%s': expected f32 or native\n", optarg);
                return 2;
            }
            break;
        case 'v': verbose = 1; break;
        case 0x126:
            plan_work = strtol(optarg, &end, 10);
            if (*end || !*optarg || plan_work < -1 || plan_work > 100000000) {
                fprintf(stderr, "einplan: --plan-work '%s': expected -1 (seeds only), 0 (the "
                                "default) or a count up to 100000000\n", optarg);
                return 2;
            }
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (trace_path && !simulate) {
        fprintf(stderr, "einplan: --trace and --calibration need --simulate (or --objective time)\n");
        return 2;
    }
    /* Chunked exchanges: --exchange-chunks, else $EIN_EXCHANGE_CHUNKS
     * (with --exchanges, the only compile that synthesises bodies). */
    const char *chunks_env = getenv("EIN_EXCHANGE_CHUNKS");
    if (!chunks && exchanges && chunks_env && *chunks_env) {
        ein_error e = {0};
        if (co_exchange_chunks_parse(chunks_env, &chunks, &e) < 0) {
            fprintf(stderr, "einplan: $EIN_EXCHANGE_CHUNKS: %s\n", e.msg);
            return 2;
        }
    }
    if (chunks && !exchanges) {
        fprintf(stderr, "einplan: --exchange-chunks needs --exchanges\n");
        return 2;
    }
    if (simulate && dot) {
        fprintf(stderr, "einplan: --simulate and --dot are exclusive\n");
        return 2;
    }
    if (p == 0 || optind != argc - 1 || (json && dot)) {
        usage(stderr);
        if (json && dot)
            fprintf(stderr, "einplan: --json and --dot are exclusive\n");
        return 2;
    }
    const char *path = argv[optind];
    ein_error err = {0};
    pl_graph *g = NULL;
    pl_plan *plan = NULL;
    if (pl_ein_parse_file(path, &g, &err) < 0) {
        fprintf(stderr, "einplan: %s\n", err.msg);
        return exit_status(err.code);
    }
    /* The one compile of einrun and the library (ein_compile's steps): a
     * --rewrite uses the same topology (the `host` machine sized to P
     * unless --topology), the plan is chosen by the objective (the
     * library's default: time where calibrated, comm with a --strategy),
     * and --simulate and --exchanges read the programs it lowered. */
    ein_compile_options co;
    ein_compile_options_init(&co);
    co.selector = pl_selector_name(sel);
    co.plan_seed = seed;
    co.linear_paths = opts.linear_paths;
    co.rewrite = rewrite;
    co.rewrite_weights = weights;
    co.ilp = ilp;
    co.topology = topo_arg;
    co.plan_only = !exchanges && !simulate;
    co.exchange_chunks = chunks;
    co.partials = pl_partials_name(opts.partials);
    co.memory_limit = mem_limit;
    co.strategy = strategy;
    co.calibration = cal_arg;
    if (simulate && !exchanges)
        co.search_cap_ms = -1; /* the simulator's lowering: the work budget alone */
    if (objective_given)
        co.objective = opts.objective == PL_OBJECTIVE_TIME ? "time" : "comm";
    co_compile_extra x = {.plan_work = plan_work, .record = verbose,
                          .predict_only = simulate && !exchanges};
    ein_compiled *comp = NULL;
    if (exchanges && p > EIN_MAX_DEVICES) {
        fprintf(stderr, "einplan: --exchanges: at most %d devices\n", EIN_MAX_DEVICES);
        pl_graph_free(g);
        return 2;
    }
    int st = compile("einplan", path, g, p, &co, &x, &comp);
    if (st == 0 && cal_arg && !simulate && !comp->time_objective) {
        fprintf(stderr, "einplan: --trace and --calibration need --simulate (or --objective time)\n");
        st = 2;
    }
    if (st != 0) {
        ein_compiled_free(comp);
        pl_graph_free(g);
        return st;
    }
    if (comp->rewritten)
        rewrite_report(json || dot ? stderr : stdout, comp->g, &comp->rewrite_stats);
    if (comp->plan_searched && !rewrite && !exchanges)
        search_report(json ? stderr : stdout, comp, seed, verbose);
    if (simulate) {
        st = sim_cli("einplan", path, g, p, &co, &x, &comp, trace_path, json);
        ein_compiled_free(comp);
        pl_graph_free(g);
        return st;
    }
    pl_graph_free(g);
    g = comp->g;
    plan = (pl_plan *)ein_plan_internal(comp->plan);
    if (json)
        print_json(path, g, plan);
    else if (dot)
        print_dot(g, plan);
    else
        print_text(path, g, plan);
    if (exchanges && !json && !dot) {
        char *text = ein_compiled_explain(comp, 1);
        if (!text) {
            fprintf(stderr, "einplan: out of memory\n");
            ein_compiled_free(comp);
            return 1;
        }
        printf("\n%s", text);
        free(text);
    }
    ein_compiled_free(comp);
    return 0;
}
