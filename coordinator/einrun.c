/* coordinator/einrun.c — the main command: plan a .ein program over N
 * devices, run it with one worker per device, save the results. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "common/ein_clock.h"
#include "common/ein_npy.h"
#include "coordinator/co_calib.h"
#include "coordinator/co_sim.h"
#include "coordinator/co_lower.h"
#include "coordinator/co_output.h"
#include "coordinator/co_dump.h"
#include "coordinator/co_weights.h"
#include "coordinator/ein_compile_int.h"
#include "common/ein_progress.h"
#include "planner/ein_api_int.h"
#include "exchange/xp_topo.h"
#include "planner/pl_optimize.h"
#include "planner/pl_parse.h"
#include "planner/rewrite/pl_rewrite.h"

#define MAX_DEVICES 64
#define MAX_BINDINGS 256

static void usage(FILE *f)
{
    fprintf(f,
"usage: einrun [options] PLAN.ein\n"
"       einrun [options] --show-topology\n"
"\n"
"Plan the computation in PLAN.ein over N devices (join-agg specs chosen by a\n"
"dynamic program, exchanges synthesised per tensor), run it with one worker\n"
"process per device, and write every saved tensor to a .npy file.\n"
"\n"
"Devices:\n"
"  --gpus LIST          devices to use, e.g. 0-3, 0,2,5 or 0-1,4 (default: 0).\n"
"                       Without a visible GPU, or without --backend cuda, the\n"
"                       same number of CPU devices runs instead, and einrun\n"
"                       says so on stderr. An id may repeat (--gpus 0,0) to\n"
"                       run several workers on one GPU.\n"
"  --cpu N              run on N CPU devices (worker processes, shared memory).\n"
"  --backend cpu|cuda   force a backend for --gpus. The CUDA backend (CUDA IPC\n"
"                       peer copies, cuBLAS and our kernels) is built when\n"
"                       nvcc is found but has not been verified on a GPU yet,\n"
"                       so --gpus runs CPU devices unless --backend cuda.\n"
"Data:\n"
"  --input NAME=FILE    read input NAME from FILE.npy (shape and dtype must\n"
"                       match the program). Inputs not given are generated from\n"
"                       --seed, the same values whatever the device count.\n"
"  --output NAME=FILE   write saved tensor NAME to FILE (default: NAME.npy in\n"
"                       the current directory). Files appear only if the run\n"
"                       succeeds, all of them or none; an existing FILE must\n"
"                       be a regular file (not a link, FIFO or device), and\n"
"                       no two outputs may be the same file.\n"
"  --seed S             seed for generated inputs (default: 1).\n"
"  --dump-inputs DIR    write every input, as the workers load it (generated\n"
"                       ones included), to DIR/NAME.npy (DIR is created), so\n"
"                       a result can be checked with NumPy.\n"
"  --weights FILE.safetensors  read every input named like a tensor of FILE\n"
"                       from it (dtype and shape must match); repeat for a\n"
"                       sharded checkpoint. Each device maps only the bytes of\n"
"                       its own blocks. A bad file stops einrun before anything\n"
"                       runs (exit 2). --input wins over a same-named tensor.\n"
"  --map INPUT=TENSOR   read INPUT from the --weights tensor TENSOR, e.g.\n"
"                       --map 'wq=model.layers.0.self_attn.q_proj.weight'\n"
"                       (docs/hf-llama.md: a LLaMA checkpoint's names).\n"
"Planning:\n"
"  --selector dp|greedy|random   how specs are chosen (default: dp).\n"
"  --schedule naive|search  exchange bodies: the naive program, or one\n"
"                       synthesised on the topology (default: search).\n"
"  --topology NAME|FILE the machine the exchanges are synthesised for: a\n"
"                       built-in (dgx-a100, dgx-h100, hgx-h200, dgx-v100,\n"
"                       gb200-nvl72, host) or a topology file. Default: for\n"
"                       CPU devices host, sized to the device count; with\n"
"                       --backend cuda, detected from the GPUs' names and peer\n"
"                       access, as 'einworker-cuda --probe' prints them (never\n"
"                       run on a GPU yet); einrun says what it found.\n"
"  --gpu-probe FILE     detect it for the --gpus list from a probe saved with\n"
"                       'einworker-cuda --probe > FILE' (on the target machine)\n"
"                       instead of running one; the run itself still uses CPU\n"
"                       devices unless --backend cuda.\n"
"  --show-topology      print the topology that would be used, as a topology\n"
"                       file, and exit without running (no PLAN.ein needed).\n"
"  --search-work N      work budget of the synthesis of each exchange: the\n"
"                       actions of the candidates it simulates (default: 30000,\n"
"                       10-60 ms of CPU for 8 devices). It counts work, not\n"
"                       time: the same program, seeds and flags give the same\n"
"                       plan on any machine load.\n"
"  --search-cap-ms N    a wall-clock safety cap per exchange (default: 30000;\n"
"                       0: none). If it stops a search, einrun says so: that\n"
"                       plan depends on the machine's speed.\n"
"  --plan-seed S        seed of the random selector (default: 1).\n"
"  --objective comm|time  the DP minimises the paper's elements moved (comm,\n"
"                       default) or the predicted seconds on the --topology\n"
"                       (default host) with its calibration (docs/simulator.md).\n"
"  --explain            print the chosen spec and costs of every operator.\n"
"  --rewrite            rewrite the graph by equality saturation first (matmul\n"
"                       order, merged projections), then plan the cheapest\n"
"                       equivalent graph; prints what changed on stderr.\n"
"  --rewrite-weights A,B,...  the inputs that are weights, for --rewrite's cost.\n"
"  --ilp                --rewrite extracts with CBC's ILP.\n"
"Measuring:\n"
"  --iterations N       run the plan N times after the warm-up and report the\n"
"                       per-iteration time (min / median) and, per device, the\n"
"                       time in kernels, copies and waiting (default: 1).\n"
"  --warmup W           untimed runs first (default: 0).\n"
"  --trace FILE.json    a Chrome-trace timeline of every device (Perfetto).\n"
"  --calibrate [--out FILE]  measure kernel, copy and dispatch rates on these\n"
"                       devices and write a calibration table for the plan\n"
"                       simulator (einplan --simulate); no PLAN.ein needed.\n"
"  --graphs auto|on|off from the second iteration on, run each local stretch\n"
"                       of a device's program (kernels, aggregations, slices\n"
"                       between waits on peers) as a graph captured once: a\n"
"                       CUDA graph on GPUs; on CPU devices a recording of the\n"
"                       calls, which saves only dispatch (auto: on for\n"
"                       --backend cuda, off for CPU devices).\n"
"Supervision and debugging:\n"
"  --worker-timeout S   a worker silent this long counts as hung (default: 60).\n"
"  --timeout S          stop the whole run after S seconds (default: none).\n"
"  --instr-timeout S    a worker inside one kernel (or copy) this long stops its\n"
"                       heartbeat and counts as hung; 0: never (default: 600).\n"
"                       LOAD and STORE report progress and have no such limit.\n"
"  --log-dir DIR        one log per worker, DIR/worker-<d>.log.\n"
"  --log-level 1|2      1: events; 2: every instruction started and finished.\n"
"  --worker-wrapper [K:]CMD  run every worker (or only worker K) under CMD,\n"
"                       e.g. 'valgrind --error-exitcode=9' or 'gdb -batch -ex run --args'.\n"
"  --debug-worker K     start worker K paused; einrun prints the gdb -p command;\n"
"                       it continues once a debugger attaches (or on SIGUSR1).\n"
"  --manual-workers     start no worker: print each worker's command line and\n"
"                       wait for you to start them (to step through one device).\n"
"  --worker PATH        the einworker binary (default: next to einrun).\n"
"Other:\n"
"  -v, --verbose        per-device timings and lowering statistics.\n"
"  -q, --quiet          no progress lines (they show only when stderr is a\n"
"                       terminal: planning, synthesis, --dump-inputs, runs).\n"
"  -h, --help           this text.   --version   the version.\n"
"\n"
"Exit status: 0 success, 1 the run failed (the message names the device,\n"
"worker pid, instruction and operator), 2 bad usage or bad input.\n");
}

typedef struct binding {
    char *name;
    char *path;
} binding;

/* "0-3", "0,2,5", "0-1,4": returns the device count or -1. */
static int parse_devices(const char *s, int *ids, int max)
{
    int n = 0;
    const char *p = s;
    if (!*p)
        return -1;
    for (;;) {
        char *end;
        if (*p < '0' || *p > '9')
            return -1;
        errno = 0;
        long a = strtol(p, &end, 10), b = a;
        if (errno || a > 1023)
            return -1;
        p = end;
        if (*p == '-') {
            p++;
            if (*p < '0' || *p > '9')
                return -1;
            b = strtol(p, &end, 10);
            if (errno || b > 1023 || b < a)
                return -1;
            p = end;
        }
        for (long i = a; i <= b; i++) {
            if (n >= max)
                return -2;
            ids[n++] = (int)i;
        }
        if (*p == '\0')
            return n;
        if (*p != ',')
            return -1;
        p++;
    }
}

static int parse_binding(const char *arg, binding *b)
{
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg || !eq[1])
        return -1;
    b->name = strndup(arg, (size_t)(eq - arg));
    b->path = strdup(eq + 1);
    return b->name && b->path ? 0 : -1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* --show-topology: the topology a run would use, as text, on stdout. */
static int show_topology(const ein_compile_options *co, int ndev)
{
    xp_topology *t = NULL;
    char desc[700], why[512], *text = NULL;
    ein_error err = {0};
    if (co_topology_for(co, ndev, &t, desc, sizeof desc, why, sizeof why, &err) < 0) {
        fprintf(stderr, "einrun: %s\n", err.msg);
        return 2;
    }
    if (why[0])
        fprintf(stderr, "einrun: topology: %s\n", why);
    int rc = xp_topo_format(t, &text, &err);
    xp_topo_free(t);
    if (rc < 0) {
        fprintf(stderr, "einrun: --show-topology: %s\n", err.msg);
        return 2;
    }
    printf("# topology: %s\n%s", desc, text);
    free(text);
    return fflush(stdout) == 0 ? 0 : 2;
}

/* Exit status for a failure to compile: bad input (the program, its
 * options, a topology, a program too large) is 2, the rest 1. */
static int compile_status(int code)
{
    switch (code) {
    case EIN_EINVAL: case EIN_EIO: case EIN_EPARSE: case EIN_ESHAPE: case EIN_ENOPLAN:
    case EIN_ELIMIT: case EIN_EDEVICE: return 2;
    default: return 1;
    }
}

static void explain(const pl_graph *g, const pl_plan *plan)
{
    fprintf(stderr, "plan for %d devices (selector %s), cost %.0f elements:\n", plan->p,
            pl_selector_name(plan->selector), plan->total);
    for (int v = 0; v < g->nnodes; v++) {
        const pl_choice *c = &plan->nodes[v];
        if (!c->planned)
            continue;
        pl_index idx[PL_MAX_INDICES];
        char spec[256];
        pl_op_indices(g, v, idx, NULL);
        pl_spec_format_labels(&c->spec, idx, spec, sizeof spec);
        if (c->spec.nparts < plan->p) {     /* too small for p devices */
            size_t l = strlen(spec);
            snprintf(spec + l, sizeof spec - l, "%son %d of %d devices", l ? " " : "",
                     c->spec.nparts, plan->p);
        }
        fprintf(stderr, "  %-12s %-32s repartition %.0f  join %.0f  aggregation %.0f\n",
                pl_graph_node(g, v)->name, spec, c->repart, c->join, c->agg);
    }
}

static void devices_text(uint64_t mask, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int d = 0; d < 64 && n < len; d++)
        if (mask & (1ULL << d))
            n += (size_t)snprintf(buf + n, len - n, "%s%d", n ? ", " : "", d);
}

/* SIGINT and SIGTERM belong to the main thread. Libraries start threads
 * before main runs (OpenBLAS, loaded through CBC's LAPACK, starts its pool
 * when it is loaded), and those threads do not block the signals that main
 * blocks while temporaries exist: the kernel would hand a SIGTERM to one of
 * them and kill einrun with its temporaries in place. This handler passes a
 * signal taken by any other thread on to the main thread, where it is held
 * back (and read by the session) or, while nothing needs cleaning up, takes
 * its default action. */
static pthread_t main_thread;

static void stop_signal_to_main(int sig)
{
    if (!pthread_equal(pthread_self(), main_thread)) {
        pthread_kill(main_thread, sig);
        return;
    }
    signal(sig, SIG_DFL);
    raise(sig); /* delivered, with its default action, once this returns */
}

static void stop_signals_to_main(void)
{
    struct sigaction sa = {.sa_handler = stop_signal_to_main, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    main_thread = pthread_self();
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int main(int argc, char **argv)
{
    int ids[MAX_DEVICES], ndev = 1, use_cpu = 0, verbose = 0, do_explain = 0;
    const char *gpus_arg = "0";
    uint64_t seed = 1, plan_seed = 1;
    pl_selector sel = PL_SELECT_DP;
    double worker_timeout = 60, timeout = 0, instr_timeout = 600;
    const char *worker_opt = NULL, *trace_path = NULL, *log_dir = NULL, *wrapper = NULL;
    int iterations = 1, warmup = 0, log_level = 1, wrapper_device = -1, debug_device = -1;
    int calibrate = 0;
    const char *calib_out = NULL, *objective = NULL;
    int manual = 0, search = 1, want_cuda = 0, rewrite = 0, ilp = 0;
    int graphs = -1; /* --graphs: -1 auto, 0 off, 1 on */
    const char *weights = NULL;
    const char *wfiles[MAX_BINDINGS], *wmaps[MAX_BINDINGS];
    int nwfiles = 0, nwmaps = 0;
    ein_safetensors **wopen = NULL;
    co_input_src *in_src = NULL;
    int quiet = 0;
    const char *dump_dir = NULL;
    ein_progress pg;
    const char *topo_arg = NULL, *probe_file = NULL;
    int show_topo = 0;
    long search_work = XP_SEARCH_DEFAULT_WORK;
    double cap_ms = XP_SEARCH_DEFAULT_CAP_MS;
    binding inputs[MAX_BINDINGS], outputs[MAX_BINDINGS];
    int ninputs = 0, noutputs = 0;
    ids[0] = 0;

    static const struct option opts[] = {
        {"gpus", required_argument, 0, 'g'},
        {"cpu", required_argument, 0, 'c'},
        {"input", required_argument, 0, 'i'},
        {"output", required_argument, 0, 'o'},
        {"seed", required_argument, 0, 's'},
        {"selector", required_argument, 0, 'S'},
        {"plan-seed", required_argument, 0, 'P'},
        {"explain", no_argument, 0, 'e'},
        {"worker-timeout", required_argument, 0, 'W'},
        {"timeout", required_argument, 0, 'T'},
        {"instr-timeout", required_argument, 0, 0x103},
        {"worker", required_argument, 0, 'w'},
        {"iterations", required_argument, 0, 'N'},
        {"warmup", required_argument, 0, 'M'},
        {"trace", required_argument, 0, 'R'},
        {"log-dir", required_argument, 0, 'D'},
        {"log-level", required_argument, 0, 'G'},
        {"worker-wrapper", required_argument, 0, 'X'},
        {"debug-worker", required_argument, 0, 'B'},
        {"manual-workers", no_argument, 0, 'U'},
        {"schedule", required_argument, 0, 'H'},
        {"backend", required_argument, 0, 'K'},
        {"rewrite", no_argument, 0, 'Y'},
        {"rewrite-weights", required_argument, 0, 'Z'},
        {"weights", required_argument, 0, 0x110},
        {"map", required_argument, 0, 0x111},
        {"quiet", no_argument, 0, 'q'},
        {"dump-inputs", required_argument, 0, 0x113},
        {"ilp", no_argument, 0, 'L'},
        {"topology", required_argument, 0, 'O'},
        {"gpu-probe", required_argument, 0, 0x101},
        {"show-topology", no_argument, 0, 0x102},
        {"search-work", required_argument, 0, 'Q'},
        {"search-cap-ms", required_argument, 0, 0x105},
        {"search-budget-ms", required_argument, 0, 0x106},
        {"graphs", required_argument, 0, 'J'},
        {"verbose", no_argument, 0, 'v'},
        {"calibrate", no_argument, 0, 0x120},
        {"out", required_argument, 0, 0x121},
        {"objective", required_argument, 0, 0x122},
        {"help", no_argument, 0, 'h'},
        {"version", no_argument, 0, 'V'},
        {0, 0, 0, 0},
    };
    int c;
    char *end;
    while ((c = getopt_long(argc, argv, "vhq", opts, NULL)) != -1) {
        switch (c) {
        case 'g':
            gpus_arg = optarg;
            use_cpu = 0;
            ndev = parse_devices(optarg, ids, MAX_DEVICES);
            if (ndev == -2) {
                fprintf(stderr, "einrun: --gpus '%s': at most %d devices\n", optarg, MAX_DEVICES);
                return 2;
            }
            if (ndev < 0) {
                fprintf(stderr, "einrun: --gpus '%s': expected a device list like 0-3, 0,2,5 or 0-1,4\n",
                        optarg);
                return 2;
            }
            break;
        case 'c':
            errno = 0;
            ndev = (int)strtol(optarg, &end, 10);
            if (errno || *end || end == optarg || ndev < 1 || ndev > MAX_DEVICES) {
                fprintf(stderr, "einrun: --cpu '%s': expected a device count from 1 to %d\n", optarg,
                        MAX_DEVICES);
                return 2;
            }
            use_cpu = 1;
            break;
        case 'i':
        case 'o': {
            binding *b = c == 'i' ? &inputs[ninputs] : &outputs[noutputs];
            if ((c == 'i' ? ninputs : noutputs) >= MAX_BINDINGS || parse_binding(optarg, b) < 0) {
                fprintf(stderr, "einrun: --%s '%s': expected NAME=FILE.npy\n",
                        c == 'i' ? "input" : "output", optarg);
                return 2;
            }
            if (c == 'i')
                ninputs++;
            else
                noutputs++;
            break;
        }
        case 's':
        case 'P':
            errno = 0;
            *(c == 's' ? &seed : &plan_seed) = strtoull(optarg, &end, 10);
            if (errno || *end || end == optarg || optarg[0] == '-') {
                fprintf(stderr, "einrun: --%s '%s': expected a non-negative integer\n",
                        c == 's' ? "seed" : "plan-seed", optarg);
                return 2;
            }
            break;
        case 'S':
            if (pl_selector_parse(optarg, &sel) < 0) {
                fprintf(stderr, "einrun: --selector '%s': expected dp, greedy or random\n", optarg);
                return 2;
            }
            break;
        case 'e': do_explain = 1; break;
        case 'W':
        case 'T':
        case 0x103: {
            double v = strtod(optarg, &end);
            if (*end || end == optarg || !(v >= 0) || v > 1e7) {
                fprintf(stderr, "einrun: --%s '%s': expected seconds\n",
                        c == 'W' ? "worker-timeout" : c == 'T' ? "timeout" : "instr-timeout",
                        optarg);
                return 2;
            }
            if (c == 'W')
                worker_timeout = v;
            else if (c == 'T')
                timeout = v;
            else
                instr_timeout = v;
            break;
        }
        case 'w': worker_opt = optarg; break;
        case 'N':
        case 'M':
        case 'G':
        case 'B': {
            errno = 0;
            long v = strtol(optarg, &end, 10);
            const char *name = c == 'N' ? "iterations" : c == 'M' ? "warmup"
                             : c == 'G' ? "log-level" : "debug-worker";
            long lo = c == 'N' || c == 'G' ? 1 : 0, hi = c == 'G' ? 2 : 100000;
            if (errno || *end || end == optarg || v < lo || v > hi) {
                fprintf(stderr, "einrun: --%s '%s': expected an integer from %ld to %ld\n", name,
                        optarg, lo, hi);
                return 2;
            }
            if (c == 'N') iterations = (int)v;
            else if (c == 'M') warmup = (int)v;
            else if (c == 'G') log_level = (int)v;
            else debug_device = (int)v;
            break;
        }
        case 'R': trace_path = optarg; break;
        case 'D': log_dir = optarg; break;
        case 'X': {
            /* "K:CMD" wraps only worker K. */
            char *colon = strchr(optarg, ':');
            wrapper = optarg;
            if (colon && colon > optarg && strspn(optarg, "0123456789") == (size_t)(colon - optarg)) {
                wrapper_device = atoi(optarg);
                wrapper = colon + 1;
            }
            if (!*wrapper) {
                fprintf(stderr, "einrun: --worker-wrapper '%s': expected [K:]COMMAND\n", optarg);
                return 2;
            }
            break;
        }
        case 'U': manual = 1; break;
        case 'H':
            if (strcmp(optarg, "naive") && strcmp(optarg, "search")) {
                fprintf(stderr, "einrun: --schedule '%s': expected naive or search\n", optarg);
                return 2;
            }
            search = !strcmp(optarg, "search");
            break;
        case 'O': topo_arg = optarg; break;
        case 0x101: probe_file = optarg; break;
        case 0x102: show_topo = 1; break;
        case 'J':
            if (strcmp(optarg, "auto") && strcmp(optarg, "on") && strcmp(optarg, "off")) {
                fprintf(stderr, "einrun: --graphs '%s': expected auto, on or off\n", optarg);
                return 2;
            }
            graphs = !strcmp(optarg, "auto") ? -1 : !strcmp(optarg, "on");
            break;
        case 'Y': rewrite = 1; break;
        case 'Z': weights = optarg; break;
        case 0x110:
        case 0x111:
            if ((c == 0x110 ? nwfiles : nwmaps) >= MAX_BINDINGS) {
                fprintf(stderr, "einrun: --%s: at most %d\n", c == 0x110 ? "weights" : "map",
                        MAX_BINDINGS);
                return 2;
            }
            if (c == 0x110)
                wfiles[nwfiles++] = optarg;
            else
                wmaps[nwmaps++] = optarg;
            break;
        case 'L': ilp = 1; break;
        case 'K':
            if (strcmp(optarg, "cpu") && strcmp(optarg, "cuda")) {
                fprintf(stderr, "einrun: --backend '%s': expected cpu or cuda\n", optarg);
                return 2;
            }
            want_cuda = !strcmp(optarg, "cuda");
            break;
        case 'Q':
            errno = 0;
            search_work = strtol(optarg, &end, 10);
            if (errno || *end || end == optarg || search_work < 1 || search_work > 1000000000) {
                fprintf(stderr, "einrun: --search-work '%s': expected a whole number from 1 to "
                                "1000000000\n", optarg);
                return 2;
            }
            break;
        case 0x105:
            cap_ms = strtod(optarg, &end);
            if (*end || end == optarg || !(cap_ms >= 0) || cap_ms > 1e9) {
                fprintf(stderr, "einrun: --search-cap-ms '%s': expected milliseconds, 0 or more "
                                "(0: no cap)\n", optarg);
                return 2;
            }
            break;
        case 0x106:
            fprintf(stderr, "einrun: --search-budget-ms is gone: the search budget counts "
                            "work (--search-work N, default %d) so that plans are "
                            "reproducible; --search-cap-ms N is a wall-clock safety cap\n",
                    XP_SEARCH_DEFAULT_WORK);
            return 2;
        case 0x120: calibrate = 1; break;
        case 0x121: calib_out = optarg; break;
        case 0x122:
            if (strcmp(optarg, "comm") && strcmp(optarg, "time")) {
                fprintf(stderr, "einrun: --objective '%s': expected comm or time\n", optarg);
                return 2;
            }
            objective = optarg;
            break;
        case 'v': verbose = 1; break;
        case 'q': quiet = 1; break;
        case 0x113: dump_dir = optarg; break;
        case 'h': usage(stdout); return 0;
        case 'V': printf("einrun %s\n", PACKAGE_VERSION); return 0;
        default:
            fprintf(stderr, "Try 'einrun --help'.\n");
            return 2;
        }
    }
    if (calibrate)
        return co_calib_cli(ndev, worker_opt, calib_out, topo_arg);
    if (objective && !strcmp(objective, "comm"))
        objective = NULL; /* the default */
    if (optind != argc - 1 && !(show_topo && optind == argc)) {
        fprintf(stderr, "einrun: %s\nTry 'einrun --help'.\n",
                optind >= argc ? "no program given (expected PLAN.ein)" : "more than one program given");
        return 2;
    }
    if (probe_file && (use_cpu || topo_arg)) {
        fprintf(stderr, "einrun: --gpu-probe %s: %s\n", probe_file,
                use_cpu ? "it describes GPUs: use --gpus, not --cpu"
                        : "give --topology or --gpu-probe, not both");
        return 2;
    }
    /* Everything about compiling, in the library's terms (einplan and the
     * API compile the same way). */
    ein_compile_options co;
    ein_compile_options_init(&co);
    co.selector = pl_selector_name(sel);
    co.plan_seed = plan_seed;
    co.seed = seed;
    co.naive_exchanges = !search;
    co.search_work = search_work;
    co.search_cap_ms = cap_ms > 0 ? cap_ms : -1;
    co.topology = topo_arg;
    co.gpu_probe = probe_file;
    co.cuda = want_cuda && !use_cpu;
    co.gpu_ids = ids;
    co.worker = worker_opt;
    co.rewrite = rewrite;
    co.rewrite_weights = weights;
    co.ilp = ilp;
    co.objective = objective;
    if (show_topo)
        return show_topology(&co, ndev);
    const char *path = argv[optind];
    if ((debug_device >= 0 && debug_device >= ndev) || wrapper_device >= ndev) {
        fprintf(stderr, "einrun: --%s %d: there are only %d devices\n",
                debug_device >= ndev ? "debug-worker" : "worker-wrapper",
                debug_device >= ndev ? debug_device : wrapper_device, ndev);
        return 2;
    }
    if (log_dir) {
        struct stat ls;
        if (stat(log_dir, &ls) < 0 || !S_ISDIR(ls.st_mode)) {
            fprintf(stderr, "einrun: --log-dir %s: not a directory\n", log_dir);
            return 2;
        }
    }
    int status = 2;
    ein_error err = {0};
    pl_graph *g = NULL;
    ein_compiled *comp = NULL;
    ein_session *sess = NULL;
    const char **in_path = NULL, **out_path = NULL;
    char **tmp_path = NULL, **owned = NULL;
    co_output *outs = NULL;
    int nouts = 0;
    sigset_t stop_signals, old_mask;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    sigprocmask(SIG_SETMASK, NULL, &old_mask);
    stop_signals_to_main();
    double *iter_s = NULL;
    ein_run_stats rs = {0};

    if (pl_ein_parse_file(path, &g, &err) < 0) {
        fprintf(stderr, "einrun: %s\n", err.msg);
        goto done;
    }
    in_path = calloc((size_t)g->nnodes, sizeof *in_path);
    out_path = calloc((size_t)g->nnodes, sizeof *out_path);
    tmp_path = calloc((size_t)g->nnodes, sizeof *tmp_path);
    owned = calloc((size_t)g->nnodes, sizeof *owned);
    outs = calloc((size_t)g->nnodes, sizeof *outs);
    if (!in_path || !out_path || !tmp_path || !owned || !outs) {
        fprintf(stderr, "einrun: out of memory\n");
        goto done;
    }
    for (int i = 0; i < ninputs; i++) {
        int v = pl_graph_find(g, inputs[i].name);
        const pl_node *nd = v >= 0 ? pl_graph_node(g, v) : NULL;
        if (!nd || nd->kind != PL_INPUT) {
            fprintf(stderr, "einrun: --input %s: %s has no input named '%s'\n", inputs[i].name, path,
                    inputs[i].name);
            goto done;
        }
        ein_npy_info info;
        if (ein_npy_read_info(inputs[i].path, &info, &err) < 0) {
            fprintf(stderr, "einrun: --input %s: %s\n", inputs[i].name, err.msg);
            goto done;
        }
        int same = info.rank == nd->rank;
        for (int a = 0; same && a < nd->rank; a++)
            same = info.shape[a] == nd->shape[a];
        if (!same || info.dtype != nd->dtype) {
            char want[256] = "", got[256] = "";
            size_t n = 0;
            for (int a = 0; a < nd->rank; a++)
                n += (size_t)snprintf(want + n, sizeof want - n, "%s%lld", a ? ", " : "",
                                      (long long)nd->shape[a]);
            n = 0;
            for (int a = 0; a < info.rank; a++)
                n += (size_t)snprintf(got + n, sizeof got - n, "%s%lld", a ? ", " : "",
                                      (long long)info.shape[a]);
            fprintf(stderr, "einrun: --input %s: %s is %s [%s] but input %s is %s [%s]\n",
                    inputs[i].name, inputs[i].path, ein_dtype_name(info.dtype), got, nd->name,
                    ein_dtype_name(nd->dtype), want);
            goto done;
        }
        if (in_path[v]) {
            fprintf(stderr, "einrun: --input %s: given twice (%s and %s)\n", inputs[i].name,
                    in_path[v], inputs[i].path);
            goto done;
        }
        in_path[v] = inputs[i].path;
    }
    if (!(in_src = calloc((size_t)g->nnodes, sizeof *in_src))) {
        fprintf(stderr, "einrun: out of memory\n");
        goto done;
    }
    for (int v = 0; v < g->nnodes; v++)
        in_src[v].path = in_path[v];
    if ((nwfiles || nwmaps) &&
        co_weights_load(g, wfiles, nwfiles, wmaps, nwmaps, in_src, NULL, &wopen, &err) < 0) {
        fprintf(stderr, "einrun: --weights: %s\n", err.msg);
        goto done;
    }
    for (int i = 0; i < noutputs; i++) {
        int v = pl_graph_find(g, outputs[i].name);
        if (v < 0 || !pl_graph_node(g, v)->saved) {
            fprintf(stderr, "einrun: --output %s: %s saves no tensor named '%s'\n", outputs[i].name,
                    path, outputs[i].name);
            goto done;
        }
        if (out_path[v]) {
            fprintf(stderr, "einrun: --output %s: given twice (%s and %s)\n", outputs[i].name,
                    out_path[v], outputs[i].path);
            goto done;
        }
        out_path[v] = outputs[i].path;
    }
    /* Every output is checked (kind, directory, duplicates) before any
     * work; the temporaries are only named here and created after
     * planning. */
    for (int v = 0; v < g->nnodes; v++) {
        const pl_node *nd = pl_graph_node(g, v);
        if (!nd->saved)
            continue;
        if (!out_path[v]) {
            if (!(owned[v] = malloc(strlen(nd->name) + 5))) {
                fprintf(stderr, "einrun: out of memory\n");
                goto done;
            }
            sprintf(owned[v], "%s.npy", nd->name);
            out_path[v] = owned[v];
        }
        co_output *o = &outs[nouts++];
        o->name = nd->name;
        o->path = out_path[v];
        o->dtype = nd->dtype;
        o->rank = nd->rank;
        for (int a = 0; a < nd->rank; a++)
            o->shape[a] = nd->shape[a];
    }
    if (co_outputs_prepare(outs, nouts, verbose, &err) < 0) {
        fprintf(stderr, "einrun: %s\n", err.msg);
        goto done;
    }
    for (int v = 0, k = 0; v < g->nnodes; v++)
        if (pl_graph_node(g, v)->saved)
            tmp_path[v] = outs[k++].tmp;

    if (want_cuda && use_cpu) {
        fprintf(stderr, "einrun: --backend cuda needs --gpus, not --cpu\n");
        goto done;
    }
#ifndef HAVE_CUDA
    if (want_cuda) {
        fprintf(stderr, "einrun: --backend cuda: this einrun was built without CUDA\n");
        goto done;
    }
#endif
    if (want_cuda && !co_gpu_visible()) {
        fprintf(stderr, "einrun: --backend cuda: no GPU visible\n");
        goto done;
    }
    if (!use_cpu && !want_cuda)
        fprintf(stderr, "einrun: %s; running %d CPU device%s for --gpus %s\n",
                co_gpu_visible() ? "the CUDA backend is not verified yet (--backend cuda to try it)"
                                 : "no GPU visible",
                ndev, ndev == 1 ? "" : "s", gpus_arg);
    ein_session_options so;
    ein_session_options_init(&so);
    so.backend = want_cuda ? "cuda" : "cpu";
    so.gpu_ids = ids;
    so.worker = worker_opt;
    so.worker_timeout = worker_timeout;
    so.run_timeout = timeout;
    so.instr_timeout = instr_timeout;
    so.graphs = graphs;
    so.verbose = verbose;
    so.log_dir = log_dir;
    so.log_level = log_level;
    so.trace_path = trace_path;
    so.wrapper = wrapper;
    so.wrapper_device = wrapper_device;
    so.debug_device = debug_device;
    so.manual = manual;
    so.handle_signals = 1;
    so.store_paths = (const char *const *)tmp_path;
    {
        /* The worker binary is checked before the long work. */
        char worker[PATH_MAX];
        if (co_find_worker(want_cuda ? "einworker-cuda" : "einworker", worker_opt, worker,
                           sizeof worker, &err) < 0) {
            fprintf(stderr, "einrun: %s\n", err.msg);
            goto done;
        }
    }

    double t0 = ein_now_s();
    int show = ein_progress_wanted(quiet);
    co.progress = show;
    if (ein_compile(g, ndev, &co, &comp, &err) < 0) {
        if (err.code == EIN_ENOPLAN)
            fprintf(stderr, "einrun: cannot plan %s for %d devices: %s\n", path, ndev, err.msg);
        else
            fprintf(stderr, "einrun: %s\n", err.msg);
        status = compile_status(err.code);
        goto done;
    }
    if (comp->topo_why[0])
        fprintf(stderr, "einrun: topology: %s\n", comp->topo_why);
    if (comp->rewritten)
        pl_rewrite_report(stderr, comp->g, &comp->rewrite_stats);
    if (do_explain)
        explain(comp->g, ein_plan_internal(comp->plan));
    double t_plan = ein_now_s() - t0;
    status = 1;
    const co_lower_stats *ls = &comp->ls;
    if (dump_dir) {
        int ninp = 0, nd = 0;
        for (int v = 0; v < g->nnodes; v++)
            ninp += pl_graph_node(g, v)->kind == PL_INPUT;
        ein_progress_begin(&pg, show, "writing inputs", ninp);
        int drc = co_dump_inputs(g, in_src, seed, dump_dir, &pg, &nd, &err);
        ein_progress_end(&pg);
        if (drc < 0) {
            fprintf(stderr, "einrun: %s\n", err.msg);
            status = 2;
            goto done;
        }
        fprintf(stderr, "einrun: wrote %d input%s to %s/\n", nd, nd == 1 ? "" : "s", dump_dir);
    }
    if (ls->ncapped)
        fprintf(stderr, "einrun: the exchange search hit its wall-clock cap (%g ms) in %d of %d "
                        "exchanges: this plan depends on the machine's speed (raise "
                        "--search-cap-ms, or lower --search-work)\n",
                cap_ms, ls->ncapped, ls->nexchanges);
    /* Saved tensors go to temporary files, created only now and renamed
     * only on success. From here to the end a SIGINT or SIGTERM is held
     * back: the session turns it into a failed run, and einrun removes the
     * temporaries before it dies of one that came afterwards. */
    sigprocmask(SIG_BLOCK, &stop_signals, NULL);
    /* Before the workers start (they must find them, and never a link put
     * in their place); the session's guard removes them if einrun is
     * killed from then on. */
    if (co_outputs_create(outs, nouts, &err) < 0) {
        fprintf(stderr, "einrun: %s\n", err.msg);
        status = 2;
        goto done;
    }
    if (!(iter_s = calloc((size_t)(warmup + iterations), sizeof *iter_s))) {
        fprintf(stderr, "einrun: out of memory\n");
        goto done;
    }
    double t1 = ein_now_s();
    if (ein_session_open(comp, &so, &sess, &err) < 0) {
        fprintf(stderr, "einrun: run failed: %s\n", err.msg);
        goto done;
    }
    /* --input files and --weights tensors, by name (the compiled graph may
     * be the rewritten one). */
    for (int v = 0; v < g->nnodes; v++)
        if (in_src[v].path &&
            ein_session_set_input_source(sess, pl_graph_node(g, v)->name, in_src[v].path,
                                         in_src[v].format, in_src[v].offset, &err) < 0) {
            fprintf(stderr, "einrun: input %s: %s\n", pl_graph_node(g, v)->name, err.msg);
            status = 2;
            goto done;
        }
    ein_progress_begin(&pg, show, "running (iterations)", warmup + iterations);
    for (int i = 0; i < warmup + iterations; i++) {
        int rrc = ein_session_run_ex(sess, i == warmup + iterations - 1, &rs, &err);
        ein_progress_step(&pg, i + 1);
        if (rrc < 0) {
            ein_progress_end(&pg);
            fprintf(stderr, "einrun: run failed: %s\n", err.msg);
            goto done;
        }
        iter_s[i] = rs.wall_s;
    }
    ein_progress_end(&pg);
    int crc = ein_session_close(sess, &err);
    sess = NULL;
    if (crc < 0) {
        fprintf(stderr, "einrun: run failed: %s\n", err.msg);
        goto done;
    }
    double t_run = ein_now_s() - t1;
    if (co_outputs_publish(outs, nouts, &err) < 0) {
        fprintf(stderr, "einrun: %s\n", err.msg);
        goto done;
    }
    status = 0;
    for (int v = 0; v < g->nnodes; v++) {
        const pl_node *nd = pl_graph_node(g, v);
        if (!nd->saved)
            continue;
        char shape[256] = "", devs[256];
        size_t n = 0;
        for (int a = 0; a < nd->rank; a++)
            n += (size_t)snprintf(shape + n, sizeof shape - n, "%s%lld", a ? ", " : "",
                                  (long long)nd->shape[a]);
        devices_text(co_output_devices(comp->g, ein_plan_internal(comp->plan), v), devs,
                     sizeof devs);
        fprintf(stdout, "saved %s [%s] %s to %s (blocks written by device%s %s)\n", nd->name, shape,
                ein_dtype_name(nd->dtype), out_path[v], strchr(devs, ',') ? "s" : "", devs);
    }
    if (iterations > 1 || warmup > 0) {
        double *t = iter_s + warmup;
        qsort(t, (size_t)iterations, sizeof *t, cmp_double);
        fprintf(stdout, "%d iterations (after %d warm-up): min %.3f ms, median %.3f ms\n",
                iterations, warmup, 1e3 * t[0], 1e3 * t[iterations / 2]);
        /* Say what the times are: on GPUs without device timing they are
         * only the host's time to enqueue the work. */
        for (int d = 0; d < ndev; d++)
            fprintf(stdout, "  device %d: %.3f ms kernels, %.3f ms copies, %.3f ms waiting (last "
                            "iteration%s)\n", d, 1e3 * rs.dev[d].kernel, 1e3 * rs.dev[d].copy,
                    1e3 * rs.dev[d].wait,
                    rs.device_timed[d] ? "; kernels, copies: GPU time (CUDA events); waiting: "
                                         "host time waiting for peers"
                    : want_cuda ? "; host time to enqueue, not GPU time" : "");
    }
    if (trace_path)
        fprintf(stdout, "trace of every device written to %s\n", trace_path);
    if (verbose) {
        fprintf(stderr, "planned and lowered in %.3f s: %d instructions, %d exchanges, %d copies (%.0f bytes)\n",
                t_plan, ls->ninstrs, ls->nexchanges, ls->ncopies, ls->copy_bytes);
        fprintf(stderr, "exchanges on topology %s: simulated %.3f ms with naive bodies, %.3f ms %s\n",
                comp->topo->name, 1e3 * ls->naive_s, 1e3 * ls->synth_s,
                search ? "as synthesised" : "(naive schedule)");
        if (search)
            fprintf(stderr, "exchange search: %ld candidates (work budget %ld per exchange) in "
                            "%.1f ms, wall-clock cap hit in %d of %d exchanges\n",
                    ls->search_steps, search_work, ls->search_ms, ls->ncapped, ls->nexchanges);
        fprintf(stderr, "exchange bodies: %d searched, %d copied from an identical exchange, "
                        "%d local (nothing to move)\n", ls->nsearched, ls->nreused, ls->nlocal);
        fprintf(stderr, "ran in %.3f s\n", t_run);
        for (int d = 0; d < ndev; d++) {
            fprintf(stderr, "  device %d (pid %ld): %.3f s total, %.3f kernels, %.3f copies, %.3f waiting%s\n",
                    d, rs.dev[d].pid, rs.dev[d].total, rs.dev[d].kernel, rs.dev[d].copy,
                    rs.dev[d].wait, rs.device_timed[d] ? " (kernels, copies: GPU time)" : "");
            /* Graph counts are what makes "graphs on" checkable: a stretch
             * that silently fell back to one instruction at a time shows. */
            if (graphs > 0 || (graphs < 0 && want_cuda))
                fprintf(stderr, "  device %d graphs: %d captured, %d launches, %d not captured%s%s\n",
                        d, rs.graphs[d].captured, rs.graphs[d].launched, rs.graphs[d].failed,
                        rs.graphs[d].error[0] ? ": " : "", rs.graphs[d].error);
        }
    }
done:
    if (outs)
        co_outputs_discard(outs, nouts);
    free(outs);
    for (int v = 0; g && owned && v < g->nnodes; v++)
        free(owned[v]);
    free(tmp_path);
    free(owned);
    if (sess) {
        ein_error ignored;
        ein_session_close(sess, &ignored);
    }
    ein_compiled_free(comp);
    pl_graph_free(g);
    free(in_path);
    free(in_src);
    co_weights_files_free(wopen, nwfiles);
    free(out_path);
    free(iter_s);
    for (int i = 0; i < ninputs; i++) {
        free(inputs[i].name);
        free(inputs[i].path);
    }
    for (int i = 0; i < noutputs; i++) {
        free(outputs[i].name);
        free(outputs[i].path);
    }
    sigprocmask(SIG_SETMASK, &old_mask, NULL);
    return status;
}
