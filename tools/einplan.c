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

#include "include/einsummable/einsummable.h"
#include "coordinator/ein_frontend.h"
#include "common/base/ein_knob.h"

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
            EIN_FE_PLAN_WORK_DEFAULT);
}

/* --simulate's front end: the compiled value's programs simulated
 * (ein_fe_simulate), printed by ein_fe_print_sim. */

/* Compile as `co` and `x` say; on failure print one line prefixed by
 * `prog` (naming `path` for a plan that cannot be made) and return an
 * exit status, else 0. */
static int compile(const char *prog, const char *path, const ein_graph *g, int p,
                   const ein_compile_options *co, const ein_fe_compile_extra *x,
                   ein_compiled **out)
{
    ein_error err = {0};
    if (ein_fe_compile(g, p, co, x, out, &err) == 0)
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
static int simulate_cmd(const char *prog, const char *path, const ein_graph *g, int p,
                        const ein_compile_options *co, const ein_fe_compile_extra *x,
                        ein_compiled **comp, const char *trace_path, int json)
{
    ein_error err = {0}, merr = {0};
    ein_fe_sim *r = NULL;
    ein_compiled *c = *comp, *other = NULL;
    int status = 2;
    ein_fe_info info;
    ein_fe_compiled_info(c, &info);
    if (ein_fe_simulate(c, &r, &err) < 0) {
        if (err.code != EIN_ELIMIT || !info.selector_dp) {
            fprintf(stderr, "%s: --simulate: %s\n", prog, err.msg);
            status = err.code == EIN_EINVAL || err.code == EIN_ELIMIT ? 2 : 1;
            goto done;
        }
        /* Memory is a constraint: try the other objective's program. */
        merr = err;
        ein_compile_options o2 = *co;
        int time = !info.time_objective;
        o2.objective = time ? "time" : "comm";
        if (ein_fe_compile(g, p, &o2, x, &other, &err) < 0 ||
            ein_fe_simulate(other, &r, &err) < 0) {
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
    if (ein_fe_print_sim(stdout, c, r, json) < 0) {
        fprintf(stderr, "%s: cannot write the report\n", prog);
        goto done;
    }
    if (trace_path) {
        FILE *f = fopen(trace_path, "we");
        int rc = f ? ein_fe_write_sim_trace(f, c, r) : EIN_EIO;
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
    ein_fe_sim_free(r);
    ein_compiled_free(other);
    return status;
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
    const char *selector = "dp", *objective = NULL, *partials = "f32";
    int linear_paths = 0;
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
            if (ein_fe_choice_check(EIN_FE_SELECTOR, optarg) < 0) {
                fprintf(stderr, "einplan: --selector '%s': expected dp, greedy or random\n", optarg);
                return 2;
            }
            selector = optarg;
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
        case 'l': linear_paths = 1; break;
        case 'r': rewrite = 1; break;
        case 'w': weights = optarg; break;
        case 'i': ilp = 1; break;
        case 't': topo_arg = optarg; break;
        case 'x': exchanges = 1; break;
        case 0x125: {
            ein_error e = {0};
            if (ein_fe_parse_exchange_chunks(optarg, &chunks, &e) < 0) {
                fprintf(stderr, "einplan: --exchange-chunks %s\n", e.msg);
                return 2;
            }
            break;
        }
        case 0x120: simulate = 1; break;
        case 0x127: setenv("EIN_NO_REUSE", "1", 1); break; /* read by the lowering */
        case 0x129: {
            ein_error e = {0};
            if (ein_fe_parse_memory_limit(optarg, &mem_limit, &e) < 0) {
                fprintf(stderr, "einplan: --memory-limit: %s\n", e.msg);
                return 2;
            }
            break;
        }
        case 0x121: trace_path = optarg; break;
        case 0x122: cal_arg = optarg; break;
        case 0x124:
            if (ein_fe_choice_check(EIN_FE_STRATEGY, optarg) < 0) {
                fprintf(stderr, "einplan: --strategy '%s': expected megatron, ulysses, sequence "
                                "or data\n", optarg);
                return 2;
            }
            strategy = optarg;
            break;
        case 0x123:
            if (ein_fe_choice_check(EIN_FE_OBJECTIVE, optarg) < 0) {
                fprintf(stderr, "einplan: --objective '%s': expected comm or time\n", optarg);
                return 2;
            }
            objective = optarg;
            objective_given = 1;
            break;
        case 0x128:
            if (ein_fe_choice_check(EIN_FE_PARTIALS, optarg) < 0) {
                fprintf(stderr, "einplan: --partials '%s': expected f32 or native\n", optarg);
                return 2;
            }
            partials = optarg;
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
    const char *chunks_env = ein_knob_get(EIN_KNOB_EXCHANGE_CHUNKS);
    if (!chunks && exchanges && chunks_env && *chunks_env) {
        ein_error e = {0};
        if (ein_fe_parse_exchange_chunks(chunks_env, &chunks, &e) < 0) {
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
    ein_graph *g = NULL;
    if (ein_graph_parse_file(path, &g, &err) < 0) {
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
    co.selector = selector;
    co.plan_seed = seed;
    co.linear_paths = linear_paths;
    co.rewrite = rewrite;
    co.rewrite_weights = weights;
    co.ilp = ilp;
    co.topology = topo_arg;
    co.plan_only = !exchanges && !simulate;
    co.exchange_chunks = chunks;
    co.partials = partials;
    co.memory_limit = mem_limit;
    co.strategy = strategy;
    co.calibration = cal_arg;
    if (simulate && !exchanges)
        co.search_cap_ms = -1; /* the simulator's lowering: the work budget alone */
    if (objective_given)
        co.objective = objective;
    ein_fe_compile_extra x = {.plan_work = plan_work, .record = verbose,
                          .predict_only = simulate && !exchanges};
    ein_compiled *comp = NULL;
    if (exchanges && p > EIN_MAX_DEVICES) {
        fprintf(stderr, "einplan: --exchanges: at most %d devices\n", EIN_MAX_DEVICES);
        ein_graph_destroy(g);
        return 2;
    }
    int st = compile("einplan", path, g, p, &co, &x, &comp);
    ein_fe_info info = {0};
    if (st == 0)
        ein_fe_compiled_info(comp, &info);
    if (st == 0 && cal_arg && !simulate && !info.time_objective) {
        fprintf(stderr, "einplan: --trace and --calibration need --simulate (or --objective time)\n");
        st = 2;
    }
    if (st != 0) {
        ein_compiled_free(comp);
        ein_graph_destroy(g);
        return st;
    }
    if (info.rewritten)
        ein_fe_print_rewrite(json || dot ? stderr : stdout, comp);
    if (info.plan_searched && !rewrite && !exchanges)
        ein_fe_print_search(json ? stderr : stdout, comp, seed, verbose);
    if (simulate) {
        st = simulate_cmd("einplan", path, g, p, &co, &x, &comp, trace_path, json);
        ein_compiled_free(comp);
        ein_graph_destroy(g);
        return st;
    }
    ein_graph_destroy(g);
    ein_fe_print_plan(stdout, comp, path,
                      json ? EIN_FE_PLAN_JSON : dot ? EIN_FE_PLAN_DOT : EIN_FE_PLAN_TEXT);
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
