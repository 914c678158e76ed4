/* tools/einrun_opts.c — einrun's command line: --help, one table row per
 * option, the parsing and the checks no single option can make
 * (einrun_int.h). */
#include "tools/einrun_int.h"
#include "common/base/ein_knob.h"

static void usage_planning(FILE *f);
static void usage_debugging(FILE *f);

/* --help: what einrun does, devices and data; then the sections below. */
static void usage(FILE *f)
{
    fprintf(f,
"usage: einrun [options] PLAN.ein\n"
"       einrun [options] SAVED.einprog\n"
"       einrun [options] --show-topology\n"
"\n"
"Plan the computation in PLAN.ein over N devices (join-agg specs chosen by a\n"
"dynamic program, exchanges synthesised per tensor), run it with one worker\n"
"process per device, and write every saved tensor to a .npy file.\n"
"A program saved with --save-program runs without compiling again: the\n"
"library version, the device count and the topology must be its own (found\n"
"as --topology / --backend cuda say, else as when it was compiled); without\n"
"--cpu/--gpus it runs on the devices it was compiled for, and options that\n"
"only steer compiling (--rewrite, --objective, ...; --seed other than its\n"
"own) are refused.\n"
"\n"
"Devices:\n"
"  --gpus LIST          devices to use, e.g. 0-3, 0,2,5 or 0-1,4 (default: 0).\n"
"                       They run the CUDA backend (CUDA IPC peer copies,\n"
"                       cuBLAS, cuDNN and our kernels) when einrun was built\n"
"                       with CUDA and GPUs are visible; else the same number\n"
"                       of CPU devices runs instead, and einrun says why on\n"
"                       stderr. An id may repeat (--gpus 0,0) to run several\n"
"                       workers on one GPU.\n"
"  --cpu N              run on N CPU devices (worker processes, shared memory).\n"
"  --backend cpu|cuda   force a backend for --gpus: cpu runs CPU devices even\n"
"                       where there are GPUs; cuda is an error (exit 2) without\n"
"                       a visible GPU or CUDA. GPUs are visible unless\n"
"                       CUDA_VISIBLE_DEVICES names none or no /dev/nvidia*\n"
"                       exists ($EIN_GPU_VISIBLE=0|1 overrides, for tests).\n"
"Data:\n"
"  --input NAME=FILE    read input NAME from FILE.npy (shape and dtype must\n"
"                       match the program). Every input needs a value (from\n"
"                       --input or --weights) unless none is given at all:\n"
"                       then all are generated from --seed (a demo run, and\n"
"                       einrun says so), the same values whatever the device\n"
"                       count.\n"
"  --generate-missing   generate, from --seed, the inputs that neither --input\n"
"                       nor --weights gives (einrun names them); without it\n"
"                       such an input is an error (exit 2).\n"
"  --output NAME=FILE   write saved tensor NAME to FILE (default: NAME.npy in\n"
"                       the current directory). Files appear only if the run\n"
"                       succeeds, all of them or none; an existing FILE must\n"
"                       be a regular file (not a link, FIFO or device), and\n"
"                       no two outputs may be the same file.\n"
"  --seed S             seed for generated inputs (default: 1).\n"
"  --save-program FILE  write the compiled program to FILE (conventionally\n"
"                       .einprog), to be run later as einrun FILE.\n"
"  --dump-inputs DIR    write every input, as the workers load it (generated\n"
"                       ones included), to DIR/NAME.npy (DIR is created), so\n"
"                       a result can be checked with NumPy.\n"
"  --weights FILE.safetensors  read every input named like a tensor of FILE\n"
"                       from it (dtype and shape must match; a file that binds\n"
"                       no input is an error); repeat for a\n"
"                       sharded checkpoint. Each device maps only the bytes of\n"
"                       its own blocks. A bad file stops einrun before anything\n"
"                       runs (exit 2). --input wins over a same-named tensor.\n"
"  --map INPUT=TENSOR   read INPUT from the --weights tensor TENSOR, e.g.\n"
"                       --map 'wq=model.layers.0.self_attn.q_proj.weight'\n"
"                       (docs/hf-llama.md: a LLaMA checkpoint's names).\n"
"  --allow-unused-weights  run although a --weights file holds tensors that\n"
"                       no input is named like and no --map names (an error\n"
"                       otherwise: a program that does not match its\n"
"                       checkpoint, e.g. fewer layers, a missing bias).\n"
);
    usage_planning(f);
    usage_debugging(f);
}

/* --help, continued: planning and measuring. */
static void usage_planning(FILE *f)
{
    fprintf(f,
"Planning:\n"
"  --selector dp|greedy|random   how specs are chosen (default: dp).\n"
"  --schedule naive|search  exchange bodies: the naive program, or one\n"
"                       synthesised on the topology (default: search).\n"
"  --topology NAME|FILE the machine the exchanges are synthesised for: a\n"
"                       built-in (dgx-a100, dgx-h100, hgx-h200, dgx-v100,\n"
"                       gb200-nvl72, host) or a topology file. Default: for\n"
"                       CPU devices host, sized to the device count; with\n"
"                       the CUDA backend, detected from the GPUs' names and\n"
"                       peer access, as 'einworker-cuda --probe' prints them;\n"
"                       einrun says what it found.\n"
"  --gpu-probe FILE     detect it for the --gpus list from a probe saved with\n"
"                       'einworker-cuda --probe > FILE' (on the target machine)\n"
"                       instead of running one; the run itself takes the\n"
"                       backend --gpus takes (CPU devices where no GPU is\n"
"                       visible).\n"
"  --show-topology      print the topology that would be used, as a topology\n"
"                       file, and exit without running (no PLAN.ein needed).\n"
"  --exchange-chunks auto|off|K  exchanges that move chunks of blocks\n"
"                       (docs/exprog.md): auto lets the synthesis choose them\n"
"                       (pipelined relays, rings), off moves whole blocks\n"
"                       only (default; or $EIN_EXCHANGE_CHUNKS), K makes every\n"
"                       action of every exchange a stream of K chunks (tests).\n"
"  --no-reuse           give every buffer a place of its own for the whole run\n"
"                       (debugging; or $EIN_NO_REUSE=1). By default a buffer's\n"
"                       bytes are reused after its last reader (docs/runtime.md).\n"
"  --memory-limit SIZE  memory per device the plan must fit in, e.g. 4.75GB,\n"
"                       5000MiB or bytes (the topology's memory if smaller):\n"
"                       the plan search (--objective time) keeps only plans\n"
"                       whose predicted peak fits, checked on the whole graph\n"
"                       (docs/planner.md).\n"
"  --search-work N      work budget of the synthesis of each exchange: the\n"
"                       actions of the candidates it simulates (default: 30000,\n"
"                       10-60 ms of CPU for 8 devices). It counts work, not\n"
"                       time: the same program, seeds and flags give the same\n"
"                       plan on any machine load.\n"
"  --search-cap-ms N    a wall-clock safety cap per exchange (default: 30000;\n"
"                       0: none). If it stops a search, einrun says so: that\n"
"                       plan depends on the machine's speed.\n"
"  --plan-seed S        seed of the random selector (default: 1).\n"
"  --objective comm|time  time (the default where the --topology, default\n"
"                       host, has a calibration; every built-in has one): a\n"
"                       plan search by the plan simulator's prediction with\n"
"                       that calibration, from the DP's plans, every strategy\n"
"                       and random plans, under a work budget\n"
"                       (docs/planner.md); comm: the paper's DP, minimising\n"
"                       the elements moved (the default otherwise).\n"
"  --strategy S         follow a hand-written strategy instead of planning:\n"
"                       megatron, ulysses, sequence or data (as einplan's;\n"
"                       the objective is then comm unless --objective is given).\n"
"  --partials f32|native  the dtype partial sums of a split contraction are\n"
"                       moved and aggregated in: f32 (default; bf16/f16 results\n"
"                       rounded once, as on one device) or native, the tensor's\n"
"                       dtype (half the bytes, rounded at each step, as\n"
"                       NCCL-based systems do). The planner counts either.\n"
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
);
}

/* --help, continued: supervision, debugging and the rest. */
static void usage_debugging(FILE *f)
{
    fprintf(f,
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
"Several hosts:\n"
"  --fake-hosts N       split the devices into N pseudo-hosts of this machine,\n"
"                       each with its own agent (einnode): blocks between them\n"
"                       move over the transport on the loopback, as between hosts.\n"
"  --transport NAME     how blocks move between hosts: ucx (default; needs UCX,\n"
"                       libucx-dev, at build time) or tcp (ZeroMQ over TCP, no\n"
"                       other library; EIN_TCP_ADDRESS picks a data network).\n"
"                       The workers refuse another name.\n"
"  --hosts FILE         run on the hosts FILE lists, one line each:\n"
"                       ADDRESS DEVICES [LAUNCH...] (docs/runtime.md); LAUNCH\n"
"                       starts that host's agent (`ssh`, `ip netns exec NS`,\n"
"                       ...; none: this machine); einrun listens on the first\n"
"                       ADDRESS. A host silent for ~3 s is reported.\n"
"  --connect-timeout S  a host none of whose messages has reached einrun S s\n"
"                       after its agent was started is reported by name\n"
"                       (default: 10; 20 for one started by a LAUNCH command).\n"
"  --launcher L         how the hosts' agents start: ssh (default: the LAUNCH\n"
"                       of each --hosts line); srun (inside a Slurm allocation,\n"
"                       salloc/sbatch: one job step per node, which sees all\n"
"                       the node's GPUs; no --hosts); mpirun (Open MPI, one per\n"
"                       host of --hosts, lines without LAUNCH, or of the Slurm\n"
"                       allocation). $EIN_SRUN / $EIN_MPIRUN replace the command.\n"
"  --devices-per-host K srun/mpirun over an allocation: devices of each node\n"
"                       (default: the devices shared evenly among the nodes).\n"
"  --listen ADDR        the address or interface of this machine the hosts\n"
"                       reach the coordinator at (default: the first host's).\n"
"Other:\n"
"  -v, --verbose        per-device timings and lowering statistics.\n"
"  -q, --quiet          no progress lines (they show only when stderr is a\n"
"                       terminal: planning, synthesis, --dump-inputs, runs).\n"
"  -h, --help           this text.   --version   the version.\n"
"  --help-env           every environment variable einsummable reads, a table.\n"
"\n"
"Exit status: 0 success, 1 the run failed (the message names the device,\n"
"worker pid, instruction and operator), 2 bad usage or bad input.\n");
}


void run_opts_init(run_opts *o)
{
    memset(o, 0, sizeof *o);
    o->ndev = 1;
    o->gpus_arg = "0";
    for (int d = 0; d < MAX_DEVICES; d++)
        o->ids[d] = d; /* a saved program's devices without --gpus */
    o->seed = o->plan_seed = 1;
    o->selector = "dp";
    ein_session_options_init(&o->session); /* worker_timeout 60, instr_timeout 600, ... */
    o->cap_ms = EIN_FE_SEARCH_CAP_MS_DEFAULT;
    o->search_work = EIN_FE_SEARCH_WORK_DEFAULT;
    o->iterations = 1;
    o->search = 1;
    o->time_objective = -1; /* unset: the library's default (time where calibrated) */
    o->backend = -1;        /* unset: GPUs where there are GPUs (run_opts_check) */
}

void run_opts_free(run_opts *o)
{
    for (int k = 0; k < 2; k++) {
        bindings *l = k ? &o->outputs : &o->inputs;
        for (int i = 0; i < l->n; i++) {
            free(l->b[i].name);
            free(l->b[i].path);
        }
    }
}

/* --graphs as the session takes it: -1 auto, 0 off, 1 on. */
int graphs_mode(const run_opts *o)
{
    return o->graphs == 0 ? -1 : o->graphs == 1;
}

/* One row per option, in the style of Redis's command table. set() reads
 * `arg` into the field of `o` at `off` and returns OPT_NEXT, or prints why
 * not and returns the exit status (0 after --help, --help-env and --version). */
typedef struct run_opt run_opt;
typedef int opt_set(run_opts *o, const run_opt *d, const char *arg);
struct run_opt {
    const char *name;
    char letter;        /* the short form (-v), or 0 */
    int has_arg;
    opt_set *set;
    size_t off;         /* the field of run_opts that set() writes */
    double lo, hi;      /* the range of a number */
    const char *expect; /* the words of a choice ("naive|search"), or what a
                           bad value should have been */
};

#define FIELD(o, d, T) ((T *)(void *)((char *)(o) + (d)->off))

static int bad_value(const run_opt *d, const char *arg, const char *expect)
{
    fprintf(stderr, "einrun: --%s '%s': expected %s\n", d->name, arg, expect);
    return 2;
}

static int opt_flag(run_opts *o, const run_opt *d, const char *arg)
{
    (void)arg;
    *FIELD(o, d, int) = 1;
    return OPT_NEXT;
}

static int opt_string(run_opts *o, const run_opt *d, const char *arg)
{
    *FIELD(o, d, const char *) = arg;
    return OPT_NEXT;
}

/* --launcher: ssh, srun or mpirun (co_launch.h). */
static int opt_launcher(run_opts *o, const run_opt *d, const char *arg)
{
    if (strcmp(arg, "ssh") && strcmp(arg, "srun") && strcmp(arg, "mpirun"))
        return bad_value(d, arg, d->expect);
    *FIELD(o, d, const char *) = arg;
    return OPT_NEXT;
}

static int opt_int(run_opts *o, const run_opt *d, const char *arg)
{
    char *end;
    errno = 0;
    long v = strtol(arg, &end, 10);
    if (errno || *end || end == arg || v < d->lo || v > d->hi) {
        if (d->expect)
            return bad_value(d, arg, d->expect);
        fprintf(stderr, "einrun: --%s '%s': expected an integer from %ld to %ld\n", d->name, arg,
                (long)d->lo, (long)d->hi);
        return 2;
    }
    *FIELD(o, d, int) = (int)v;
    return OPT_NEXT;
}

static int opt_double(run_opts *o, const run_opt *d, const char *arg)
{
    char *end;
    double v = strtod(arg, &end);
    if (*end || end == arg || !(v >= d->lo) || v > d->hi)
        return bad_value(d, arg, d->expect);
    *FIELD(o, d, double) = v;
    return OPT_NEXT;
}

static int opt_u64(run_opts *o, const run_opt *d, const char *arg)
{
    char *end;
    errno = 0;
    uint64_t v = strtoull(arg, &end, 10);
    if (errno || *end || end == arg || arg[0] == '-')
        return bad_value(d, arg, d->expect);
    *FIELD(o, d, uint64_t) = v;
    return OPT_NEXT;
}

/* A backend's name (common/ir/ein_backend.c): the field is its row's index. */
static int opt_backend(run_opts *o, const run_opt *d, const char *arg)
{
    const ein_backend_info *b = ein_backend_find(arg);
    if (!b)
        return bad_value(d, arg, ein_backend_names());
    *FIELD(o, d, int) = ein_backend_index(b);
    return OPT_NEXT;
}

/* One of the words of d->expect: the field is its index. */
static int opt_choice(run_opts *o, const run_opt *d, const char *arg)
{
    const char *w = d->expect;
    char words[128];
    size_t n = 0;
    for (int i = 0;; i++) {
        size_t len = strcspn(w, "|");
        if (strlen(arg) == len && !strncmp(arg, w, len)) {
            *FIELD(o, d, int) = i;
            return OPT_NEXT;
        }
        /* "a|b|c" reads "a, b or c" */
        n += (size_t)snprintf(words + n, sizeof words - n, "%s%.*s",
                              !i ? "" : w[len] ? ", " : " or ", (int)len, w);
        if (!w[len] || n >= sizeof words)
            return bad_value(d, arg, words);
        w += len + 1;
    }
}

static int opt_selector(run_opts *o, const run_opt *d, const char *arg)
{
    if (ein_fe_choice_check(EIN_FE_SELECTOR, arg) < 0)
        return bad_value(d, arg, d->expect);
    *FIELD(o, d, const char *) = arg;
    return OPT_NEXT;
}

static int parse_binding(const char *arg, binding *b)
{
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg || !eq[1])
        return -1;
    b->name = strndup(arg, (size_t)(eq - arg));
    b->path = strdup(eq + 1);
    if (b->name && b->path)
        return 0;
    free(b->name);
    free(b->path);
    return -1;
}

static int opt_binding(run_opts *o, const run_opt *d, const char *arg)
{
    bindings *l = FIELD(o, d, bindings);
    if (l->n >= MAX_BINDINGS || parse_binding(arg, &l->b[l->n]) < 0)
        return bad_value(d, arg, d->expect);
    l->n++;
    return OPT_NEXT;
}

static int opt_name(run_opts *o, const run_opt *d, const char *arg)
{
    names *l = FIELD(o, d, names);
    if (l->n >= MAX_BINDINGS) {
        fprintf(stderr, "einrun: --%s: at most %d\n", d->name, MAX_BINDINGS);
        return 2;
    }
    l->v[l->n++] = arg;
    return OPT_NEXT;
}

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

static int opt_gpus(run_opts *o, const run_opt *d, const char *arg)
{
    o->gpus_arg = arg;
    o->use_cpu = 0;
    o->ndev_given = 1;
    o->ndev = parse_devices(arg, o->ids, MAX_DEVICES);
    if (o->ndev == -2) {
        fprintf(stderr, "einrun: --gpus '%s': at most %d devices\n", arg, MAX_DEVICES);
        return 2;
    }
    return o->ndev < 0 ? bad_value(d, arg, d->expect) : OPT_NEXT;
}

static int opt_cpu(run_opts *o, const run_opt *d, const char *arg)
{
    int rc = opt_int(o, d, arg);
    if (rc == OPT_NEXT)
        o->use_cpu = o->ndev_given = 1;
    return rc;
}

/* "K:CMD" wraps only worker K. */
static int opt_wrapper(run_opts *o, const run_opt *d, const char *arg)
{
    const char *colon = strchr(arg, ':');
    o->session.wrapper = arg;
    if (colon && colon > arg && strspn(arg, "0123456789") == (size_t)(colon - arg)) {
        o->session.wrapper_device = atoi(arg);
        o->session.wrapper = colon + 1;
    }
    return *o->session.wrapper ? OPT_NEXT : bad_value(d, arg, d->expect);
}

static int opt_chunks(run_opts *o, const run_opt *d, const char *arg)
{
    ein_error e = {0};
    (void)d;
    if (ein_fe_parse_exchange_chunks(arg, &o->exchange_chunks, &e) < 0) {
        fprintf(stderr, "einrun: --exchange-chunks %s\n", e.msg);
        return 2;
    }
    return OPT_NEXT;
}

static int opt_memory(run_opts *o, const run_opt *d, const char *arg)
{
    ein_error e = {0};
    (void)d;
    if (ein_fe_parse_memory_limit(arg, &o->memory_limit, &e) < 0) {
        fprintf(stderr, "einrun: --memory-limit: %s\n", e.msg);
        return 2;
    }
    return OPT_NEXT;
}

static int opt_gone(run_opts *o, const run_opt *d, const char *arg)
{
    (void)o, (void)d, (void)arg;
    fprintf(stderr, "einrun: --search-budget-ms is gone: the search budget counts "
                    "work (--search-work N, default %d) so that plans are "
                    "reproducible; --search-cap-ms N is a wall-clock safety cap\n",
            EIN_FE_SEARCH_WORK_DEFAULT);
    return 2;
}

static int opt_help(run_opts *o, const run_opt *d, const char *arg)
{
    (void)o, (void)d, (void)arg;
    usage(stdout);
    return 0;
}

static int opt_help_env(run_opts *o, const run_opt *d, const char *arg)
{
    (void)o, (void)d, (void)arg;
    ein_knob_print(stdout);
    return 0;
}

static int opt_version(run_opts *o, const run_opt *d, const char *arg)
{
    (void)o, (void)d, (void)arg;
    printf("einrun %s\n", PACKAGE_VERSION);
    return 0;
}

#define F(field) offsetof(run_opts, field)
#define S(field) offsetof(run_opts, session.field) /* ein_session_options */
static const run_opt run_opt_table[] = {
    /* name           short arg  set        field               lo  hi   expect */
    {"gpus",             0, 1, opt_gpus,     0,                  0, 0,
     "a device list like 0-3, 0,2,5 or 0-1,4"},
    {"cpu",              0, 1, opt_cpu,      F(ndev),            1, MAX_DEVICES,
     "a device count from 1 to " STR(MAX_DEVICES)},
    {"input",            0, 1, opt_binding,  F(inputs),          0, 0, "NAME=FILE.npy"},
    {"output",           0, 1, opt_binding,  F(outputs),         0, 0, "NAME=FILE.npy"},
    {"seed",             0, 1, opt_u64,      F(seed),            0, 0, "a non-negative integer"},
    {"selector",         0, 1, opt_selector, F(selector),        0, 0, "dp, greedy or random"},
    {"plan-seed",        0, 1, opt_u64,      F(plan_seed),       0, 0, "a non-negative integer"},
    {"explain",          0, 0, opt_flag,     F(explain),         0, 0, NULL},
    {"worker-timeout",   0, 1, opt_double,   S(worker_timeout),  0, 1e7, "seconds"},
    {"timeout",          0, 1, opt_double,   S(run_timeout),     0, 1e7, "seconds"},
    {"instr-timeout",    0, 1, opt_double,   S(instr_timeout),   0, 1e7, "seconds"},
    {"worker",           0, 1, opt_string,   S(worker),          0, 0, NULL},
    {"iterations",       0, 1, opt_int,      F(iterations),      1, 100000, NULL},
    {"warmup",           0, 1, opt_int,      F(warmup),          0, 100000, NULL},
    {"trace",            0, 1, opt_string,   S(trace_path),      0, 0, NULL},
    {"log-dir",          0, 1, opt_string,   S(log_dir),         0, 0, NULL},
    {"log-level",        0, 1, opt_int,      S(log_level),       1, 2, NULL},
    {"worker-wrapper",   0, 1, opt_wrapper,  0,                  0, 0, "[K:]COMMAND"},
    {"debug-worker",     0, 1, opt_int,      S(debug_device),    0, 100000, NULL},
    {"manual-workers",   0, 0, opt_flag,     S(manual),          0, 0, NULL},
    {"schedule",         0, 1, opt_choice,   F(search),          0, 0, "naive|search"},
    {"backend",          0, 1, opt_backend,  F(backend),         0, 0, NULL},
    {"rewrite",          0, 0, opt_flag,     F(rewrite),         0, 0, NULL},
    {"rewrite-weights",  0, 1, opt_string,   F(rewrite_weights), 0, 0, NULL},
    {"weights",          0, 1, opt_name,     F(wfiles),          0, 0, NULL},
    {"map",              0, 1, opt_name,     F(wmaps),           0, 0, NULL},
    {"allow-unused-weights", 0, 0, opt_flag, F(allow_unused),     0, 0, NULL},
    {"quiet",          'q', 0, opt_flag,     F(quiet),           0, 0, NULL},
    {"dump-inputs",      0, 1, opt_string,   F(dump_dir),        0, 0, NULL},
    {"save-program",     0, 1, opt_string,   F(save_program),    0, 0, NULL},
    {"generate-missing", 0, 0, opt_flag,     S(generate_missing),0, 0, NULL},
    {"ilp",              0, 0, opt_flag,     F(ilp),             0, 0, NULL},
    {"topology",         0, 1, opt_string,   F(topo_arg),        0, 0, NULL},
    {"gpu-probe",        0, 1, opt_string,   F(probe_file),      0, 0, NULL},
    {"show-topology",    0, 0, opt_flag,     F(show_topo),       0, 0, NULL},
    {"exchange-chunks",  0, 1, opt_chunks,   0,                  0, 0, NULL},
    {"no-reuse",         0, 0, opt_flag,     F(no_reuse),        0, 0, NULL},
    {"memory-limit",     0, 1, opt_memory,   0,                  0, 0, NULL},
    {"search-work",      0, 1, opt_int,      F(search_work),     1, 1e9,
     "a whole number from 1 to 1000000000"},
    {"search-cap-ms",    0, 1, opt_double,   F(cap_ms),          0, 1e9,
     "milliseconds, 0 or more (0: no cap)"},
    {"search-budget-ms", 0, 1, opt_gone,     0,                  0, 0, NULL},
    {"graphs",           0, 1, opt_choice,   F(graphs),          0, 0, "auto|on|off"},
    {"verbose",        'v', 0, opt_flag,     S(verbose),         0, 0, NULL},
    {"calibrate",        0, 0, opt_flag,     F(calibrate),       0, 0, NULL},
    {"out",              0, 1, opt_string,   F(calib_out),       0, 0, NULL},
    {"objective",        0, 1, opt_choice,   F(time_objective),  0, 0, "comm|time"},
    {"partials",         0, 1, opt_choice,   F(native_partials), 0, 0, "f32|native"},
    {"strategy",         0, 1, opt_string,   F(strategy),        0, 0, NULL},
    {"fake-hosts",       0, 1, opt_int,      S(fake_hosts),      2, MAX_DEVICES, NULL},
    {"hosts",            0, 1, opt_string,   S(hosts_file),      0, 0, NULL},
    {"connect-timeout",  0, 1, opt_double,   S(connect_timeout), 0, 1e7, "seconds"},
    {"launcher",         0, 1, opt_launcher, S(launcher),        0, 0, "ssh, srun or mpirun"},
    {"listen",           0, 1, opt_string,   S(listen),          0, 0, NULL},
    {"transport",        0, 1, opt_string,   S(transport),       0, 0, NULL},
    {"devices-per-host", 0, 1, opt_int,      S(devices_per_host),1, MAX_DEVICES, NULL},
    {"help",           'h', 0, opt_help,     0,                  0, 0, NULL},
    {"help-env",         0, 0, opt_help_env, 0,                  0, 0, NULL},
    {"version",          0, 0, opt_version,  0,                  0, 0, NULL},
};
#undef F
#undef S
#define NOPTS ((int)(sizeof run_opt_table / sizeof *run_opt_table))
#define OPT_VAL 0x100 /* getopt's value for row i: OPT_VAL + i */
_Static_assert(NOPTS <= (int)sizeof ((run_opts *)0)->given, "run_opts.given is too small");

/* Options that only steer compiling: a saved program was compiled
 * already, so each is refused by name with one (never ignored). --seed is
 * checked against the program's own once it is loaded (einrun.c). */
static const char *const compile_only[] = {
    "selector", "plan-seed", "schedule", "rewrite", "rewrite-weights", "ilp",
    "exchange-chunks", "no-reuse", "memory-limit", "search-work", "search-cap-ms",
    "objective", "partials", "strategy",
};

int run_opts_given(const run_opts *o, const char *name)
{
    for (int i = 0; i < NOPTS; i++)
        if (o->given[i] && !strcmp(run_opt_table[i].name, name))
            return 1;
    return 0;
}

/* A saved program given with a compile-time option: exit 2 naming it. */
static int check_saved_flags(const run_opts *o)
{
    for (size_t k = 0; k < sizeof compile_only / sizeof *compile_only; k++)
        for (int i = 0; i < NOPTS; i++)
            if (o->given[i] && !strcmp(run_opt_table[i].name, compile_only[k])) {
                fprintf(stderr, "einrun: --%s: %s is a saved program, compiled already; "
                        "--%s only applies when compiling (give it with --save-program "
                        "when compiling PLAN.ein)\n", compile_only[k], o->path,
                        compile_only[k]);
                return 2;
            }
    const char *chunks = ein_knob_get(EIN_KNOB_EXCHANGE_CHUNKS);
    if (chunks && *chunks)
        fprintf(stderr, "einrun: $EIN_EXCHANGE_CHUNKS is not used: %s is a saved program, "
                "compiled already\n", o->path);
    return 0;
}

/* The options, in order, through the table; PLAN.ein is left at optind.
 * Returns OPT_NEXT or the exit status. */
int run_opts_parse(run_opts *o, int argc, char **argv)
{
    struct option longopts[NOPTS + 1];
    char letters[NOPTS + 1];
    int nletters = 0, c;
    for (int i = 0; i < NOPTS; i++) {
        const run_opt *d = &run_opt_table[i];
        longopts[i] = (struct option){d->name, d->has_arg ? required_argument : no_argument,
                                      NULL, OPT_VAL + i};
        if (d->letter)
            letters[nletters++] = d->letter; /* short forms take no argument */
    }
    longopts[NOPTS] = (struct option){0, 0, 0, 0};
    letters[nletters] = '\0';
    while ((c = getopt_long(argc, argv, letters, longopts, NULL)) != -1) {
        const run_opt *d = NULL;
        for (int i = 0; i < NOPTS && !d; i++)
            if (c == OPT_VAL + i || (c == run_opt_table[i].letter && c))
                d = &run_opt_table[i];
        if (!d) {
            fprintf(stderr, "Try 'einrun --help'.\n");
            return 2;
        }
        int rc = d->set(o, d, optarg);
        if (rc != OPT_NEXT)
            return rc;
        o->given[d - run_opt_table] = 1;
    }
    return OPT_NEXT;
}

/* What no single option can check: one PLAN.ein (none with
 * --show-topology), --gpu-probe without --cpu or --topology. */
int run_opts_check(run_opts *o, int argc, char **argv)
{
    if (optind != argc - 1 && !(o->show_topo && optind == argc)) {
        fprintf(stderr, "einrun: %s\nTry 'einrun --help'.\n",
                optind >= argc ? "no program given (expected PLAN.ein)" : "more than one program given");
        return 2;
    }
    o->path = argv[optind];
    int saved = o->path && ein_fe_is_saved_program(o->path);
    if (saved) {
        int rc = check_saved_flags(o);
        if (rc)
            return rc;
        /* Without --gpus or --cpu, the devices it was compiled for. */
        ein_error e = {0};
        if (!o->ndev_given && ein_fe_saved_program_ndev(o->path, &o->ndev, &e) < 0) {
            fprintf(stderr, "einrun: %s\n", e.msg);
            return 2;
        }
        if (!o->ndev_given) {
            static char ids[32];
            snprintf(ids, sizeof ids, o->ndev == 1 ? "0" : "0-%d", o->ndev - 1);
            o->gpus_arg = ids;
            /* as --cpu N, or --gpus 0-(N-1) with a probed --backend (cuda) or none */
            o->use_cpu = o->backend >= 0 && !ein_backend_get(o->backend)->probed;
        }
    }
    /* Chunked exchanges: --exchange-chunks, else $EIN_EXCHANGE_CHUNKS. */
    const char *env = ein_knob_get(EIN_KNOB_EXCHANGE_CHUNKS);
    ein_error e = {0};
    if (!saved && !o->exchange_chunks && env && *env &&
        ein_fe_parse_exchange_chunks(env, &o->exchange_chunks, &e) < 0) {
        fprintf(stderr, "einrun: $EIN_EXCHANGE_CHUNKS: %s\n", e.msg);
        return 2;
    }
    /* No --backend: --gpus runs the CUDA backend on a CUDA build that
     * sees GPUs, else CPU devices (check_backend says so); --cpu is CPU. */
    if (o->backend < 0) {
        o->backend = 0;
        o->backend_auto = 1;
        if (!o->use_cpu) {
            int rc = ein_backend_auto(o->cpu_why, sizeof o->cpu_why, &e);
            if (rc < 0) {
                fprintf(stderr, "einrun: %s\n", e.msg);
                return 2;
            }
            o->backend = rc;
            if (rc)
                o->cpu_why[0] = '\0';
        }
    }
    if (o->probe_file && (o->use_cpu || o->topo_arg)) {
        fprintf(stderr, "einrun: --gpu-probe %s: %s\n", o->probe_file,
                o->use_cpu ? "it describes GPUs: use --gpus, not --cpu"
                           : "give --topology or --gpu-probe, not both");
        return 2;
    }
    return 0;
}

/* The checks of a run, not needed by --show-topology. */
int run_opts_check_run(const run_opts *o)
{
    if ((o->session.debug_device >= 0 && o->session.debug_device >= o->ndev) || o->session.wrapper_device >= o->ndev) {
        fprintf(stderr, "einrun: --%s %d: there are only %d devices\n",
                o->session.debug_device >= o->ndev ? "debug-worker" : "worker-wrapper",
                o->session.debug_device >= o->ndev ? o->session.debug_device : o->session.wrapper_device, o->ndev);
        return 2;
    }
    if (o->session.log_dir) {
        struct stat ls;
        if (stat(o->session.log_dir, &ls) < 0 || !S_ISDIR(ls.st_mode)) {
            fprintf(stderr, "einrun: --log-dir %s: not a directory\n", o->session.log_dir);
            return 2;
        }
    }
    return 0;
}
