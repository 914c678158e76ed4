/* tools/einrun.c — the main command: plan a .ein program over N
 * devices, run it with one worker per device, save the results.
 *
 * main() is a driver over named steps: read the options (one table row per
 * option), check them, bind the program's inputs and outputs, compile, run,
 * report. A step prints its own message and returns 0 to go on or the exit
 * status: 1 the run failed, 2 bad usage or bad input. */
#include <errno.h>
#include <getopt.h>
#include <stddef.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "common/ir/ein_box.h"
#include "common/base/ein_clock.h"
#include "common/base/ein_error.h"
#include "common/io/ein_npy.h"
#include "common/process/ein_progress.h"
#include "coordinator/ein_frontend.h"
#include "include/einsummable/einsummable.h"
#include "tools/einrun_int.h"

/* The backend the run takes: CPU devices for --cpu, else --backend's row
 * (run_opts_check resolved it). */
static const ein_backend_info *run_backend(const run_opts *o)
{
    return ein_backend_get(o->use_cpu || o->backend < 0 ? 0 : o->backend);
}

/* Everything about compiling, in the library's terms (einplan and the API
 * compile the same way). */
static void compile_options_from(const run_opts *o, ein_compile_options *co)
{
    ein_compile_options_init(co);
    co->selector = o->selector;
    co->plan_seed = o->plan_seed;
    co->seed = o->seed;
    co->naive_exchanges = !o->search;
    co->search_work = o->search_work;
    co->exchange_chunks = o->exchange_chunks;
    /* Memory reuse's acknowledgements stay on one host so far (ein_session.c) */
    co->no_reuse = o->no_reuse || o->session.fake_hosts > 0 || o->session.hosts_file || o->session.launcher;
    co->memory_limit = o->memory_limit;
    co->search_cap_ms = o->cap_ms > 0 ? o->cap_ms : -1;
    co->topology = o->topo_arg;
    co->gpu_probe = o->probe_file;
    co->backend = run_backend(o)->name;
    co->gpu_ids = o->ids;
    co->worker = o->session.worker;
    co->rewrite = o->rewrite;
    co->rewrite_weights = o->rewrite_weights;
    co->ilp = o->ilp;
    /* NULL: the library's default, time where the topology has a
     * calibration (ein_compile_options) */
    co->objective = o->time_objective < 0 ? NULL : o->time_objective ? "time" : "comm";
    co->partials = o->native_partials ? "native" : "f32";
    co->strategy = o->strategy;
}

/* The flags that name a topology, said after the library's message when
 * it could not detect one (EIN_EDEVICE without --topology). */
static const char *topology_advice(const ein_compile_options *co, int code)
{
    if (code != EIN_EDEVICE || co->topology)
        return "";
    return co->gpu_probe ? "; give --topology NAME|FILE"
                         : "; give --topology NAME|FILE, or --gpu-probe FILE saved from "
                           "einworker-cuda --probe";
}

/* --show-topology: the topology a run would use, as text, on stdout. */
static int show_topology(const ein_compile_options *co, int ndev)
{
    char desc[700] = "", why[512] = "", *text = NULL;
    ein_error err = {0};
    if (ein_fe_topology_text(co, ndev, &text, desc, sizeof desc, why, sizeof why, &err) < 0) {
        fprintf(stderr, "einrun: %s%s\n", err.msg, topology_advice(co, err.code));
        return 2;
    }
    if (why[0])
        fprintf(stderr, "einrun: topology: %s\n", why);
    printf("# topology: %s\n%s", desc, text);
    free(text);
    return fflush(stdout) == 0 ? 0 : 2;
}

/* Prints "einrun: MESSAGE" and returns `status`. */
static int fail(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("einrun: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return status;
}

/* One run: what the steps share, freed by run_state_free. Arrays indexed
 * by node are over the parsed graph `g` (the compiled one may be the
 * rewritten graph). */
typedef struct run_state {
    const run_opts *o;
    ein_error err;
    const ein_graph *g;               /* g_parsed, or the loaded program's */
    ein_graph *g_parsed;
    int nnodes;
    const char **in_path, **out_path; /* --input file / output file of node v */
    char **owned;                     /* default output names */
    const char **tmp_path;            /* temporary of a saved node (owned by outs) */
    const char **store_path;          /* tmp_path by node of the COMPILED graph */
    ein_fe_inputs *inputs;
    ein_fe_outputs *outs;
    ein_compiled *comp;
    ein_session_options so;
    ein_session *sess;
    sigset_t stop_signals;
    int show;                         /* progress lines */
    double *iter_s, t_plan, t_run;
    ein_run_stats rs;
    char generated[700];              /* "generating NAMES from --seed S (why)", or "" */
} run_state;

static void run_state_free(run_state *s)
{
    ein_fe_outputs_free(s->outs);
    for (int v = 0; s->owned && v < s->nnodes; v++)
        free(s->owned[v]);
    free(s->tmp_path);
    free(s->store_path);
    free(s->owned);
    if (s->sess) {
        ein_error ignored;
        ein_session_close(s->sess, &ignored);
    }
    ein_fe_inputs_free(s->inputs);
    ein_compiled_free(s->comp);
    ein_graph_destroy(s->g_parsed);
    free(s->in_path);
    free(s->out_path);
    free(s->iter_s);
}

/* --input NAME=FILE: an input of the program, given once, whose file has
 * the input's dtype and shape. */
static int bind_inputs(run_state *s)
{
    const run_opts *o = s->o;
    for (int i = 0; i < o->inputs.n; i++) {
        const binding *b = &o->inputs.b[i];
        int v = ein_graph_find(s->g, b->name, NULL), is_input = 0, state = 0;
        const char *name = NULL;
        ein_tensor_desc nd;
        if (v >= 0) {
            ein_graph_tensor(s->g, v, &name, &nd, &is_input, NULL);
            state = ein_fe_tensor_is_state(s->g, v);
        }
        if (!is_input)
            return fail(2, "--input %s: %s has no input named '%s'%s", b->name, o->path, b->name,
                        v < 0 ? "" : state ? " (it is a state: zero at the start, then "
                        "written by the program only)" : " (it is computed, not an input)");
        ein_npy_info info;
        if (ein_npy_read_info(b->path, &info, &s->err) < 0)
            return fail(2, "--input %s: %s", b->name, s->err.msg);
        int same = info.rank == nd.rank;
        for (int a = 0; same && a < nd.rank; a++)
            same = info.shape[a] == nd.shape[a];
        if (!same || info.dtype != nd.dtype) {
            char want[256], got[256];
            ein_shape_format(nd.rank, nd.shape, want, sizeof want);
            ein_shape_format(info.rank, info.shape, got, sizeof got);
            return fail(2, "--input %s: %s is %s [%s] but input %s is %s [%s]", b->name, b->path,
                        ein_dtype_name(info.dtype), got, name, ein_dtype_name(nd.dtype),
                        want);
        }
        if (s->in_path[v])
            return fail(2, "--input %s: given twice (%s and %s)", b->name, s->in_path[v], b->path);
        s->in_path[v] = b->path;
    }
    return 0;
}

/* --output NAME=FILE: a tensor the program saves, given once. */
static int bind_outputs(run_state *s)
{
    const run_opts *o = s->o;
    for (int i = 0; i < o->outputs.n; i++) {
        const binding *b = &o->outputs.b[i];
        int v = ein_graph_find(s->g, b->name, NULL), saved = 0;
        if (v >= 0)
            ein_graph_tensor(s->g, v, NULL, NULL, NULL, &saved);
        if (!saved)
            return fail(2, "--output %s: %s saves no tensor named '%s'", b->name, o->path, b->name);
        if (s->out_path[v])
            return fail(2, "--output %s: given twice (%s and %s)", b->name, s->out_path[v], b->path);
        s->out_path[v] = b->path;
    }
    return 0;
}

/* Every output is checked (kind, directory, duplicates) before any work;
 * the temporaries are only named here and created after planning. */
static int prepare_outputs(run_state *s)
{
    int *index = calloc((size_t)s->nnodes + 1, sizeof *index);
    if (!index || ein_fe_outputs_create(s->nnodes, &s->outs, &s->err) < 0) {
        free(index);
        return fail(2, "out of memory");
    }
    for (int v = 0; v < s->nnodes; v++) {
        const char *name;
        ein_tensor_desc nd;
        int saved;
        index[v] = -1;
        ein_graph_tensor(s->g, v, &name, &nd, NULL, &saved);
        if (!saved)
            continue;
        if (!s->out_path[v]) {
            if (!(s->owned[v] = malloc(strlen(name) + 5))) {
                free(index);
                return fail(2, "out of memory");
            }
            sprintf(s->owned[v], "%s.npy", name);
            s->out_path[v] = s->owned[v];
        }
        index[v] = ein_fe_outputs_add(s->outs, name, s->out_path[v], &nd);
    }
    if (ein_fe_outputs_prepare(s->outs, s->o->session.verbose, &s->err) < 0) {
        free(index);
        return fail(2, "%s", s->err.msg);
    }
    for (int v = 0; v < s->nnodes; v++)
        if (index[v] >= 0)
            s->tmp_path[v] = ein_fe_outputs_tmp(s->outs, index[v]);
    free(index);
    return 0;
}

/* The seed of inputs never set: the loaded program's, else --seed. */
static uint64_t compile_seed(const run_state *s)
{
    ein_fe_info info;
    if (!s->comp)
        return s->o->seed;
    ein_fe_compiled_info(s->comp, &info);
    return info.seed;
}

/* Every input has a value, or none has (a demo: all generated from --seed,
 * said in one line), or --generate-missing generates the rest (named). */
static int check_missing_inputs(run_state *s)
{
    const run_opts *o = s->o;
    char missing[600] = "";
    int nin = 0, nmiss = 0;
    for (int v = 0; v < s->nnodes; v++) {
        const char *name;
        int is_input;
        ein_graph_tensor(s->g, v, &name, NULL, &is_input, NULL);
        if (!is_input) /* a state starts at zero */
            continue;
        nin++;
        if (!ein_fe_inputs_has_value(s->inputs, v)) {
            ein_msg_list_add(missing, sizeof missing, name);
            nmiss++;
        }
    }
    if (nmiss == 0)
        return 0;
    if ((nmiss == nin && !o->inputs.n && !o->wfiles.n) || o->session.generate_missing) {
        /* Said once the run starts: an error before it stays one line. */
        snprintf(s->generated, sizeof s->generated, "generating %s from --seed %llu (%s)",
                 missing, (unsigned long long)compile_seed(s),
                 nmiss < nin ? "--generate-missing" : "no input given");
        return 0;
    }
    return fail(2, "%s: input%s %s %s no value: give --input NAME=FILE.npy, a --weights "
                   "tensor of that name (or --map NAME=TENSOR), or --generate-missing to "
                   "generate %s from --seed", o->path, nmiss == 1 ? "" : "s", missing,
                nmiss == 1 ? "has" : "have", nmiss == 1 ? "it" : "them");
}

/* Parse PLAN.ein (or load a saved program: s->comp) and bind its inputs
 * (--input, --weights) and outputs. */
static int load_program(run_state *s, const ein_compile_options *co)
{
    const run_opts *o = s->o;
    int rc;
    if (ein_fe_is_saved_program(o->path)) {
        /* the topology as named, else as when it was compiled */
        int named = o->topo_arg || (run_backend(o)->probed && !o->backend_auto) ||
                    o->probe_file;
        if (ein_compiled_load_ex(o->path, o->ndev, named ? co : NULL, &s->comp, &s->err) < 0)
            return fail(2, "%s", s->err.msg);
        s->g = ein_compiled_graph(s->comp);
        /* Its generated inputs come from the seed it was compiled with. */
        ein_fe_info info;
        ein_fe_compiled_info(s->comp, &info);
        if (run_opts_given(o, "seed") && info.seed != o->seed)
            return fail(2, "--seed: %s is a saved program compiled with seed %llu, not %llu: "
                        "its generated inputs come from that seed (compile it again with "
                        "--seed %llu for others)", o->path, (unsigned long long)info.seed,
                        (unsigned long long)o->seed, (unsigned long long)o->seed);
    } else if (ein_graph_parse_file(o->path, &s->g_parsed, &s->err) < 0) {
        return fail(2, "%s", s->err.msg);
    } else {
        s->g = s->g_parsed;
    }
    s->nnodes = ein_graph_ntensors(s->g);
    size_t n = (size_t)s->nnodes + 1;
    s->in_path = calloc(n, sizeof *s->in_path);
    s->out_path = calloc(n, sizeof *s->out_path);
    s->tmp_path = calloc(n, sizeof *s->tmp_path);
    s->owned = calloc(n, sizeof *s->owned);
    if (!s->in_path || !s->out_path || !s->tmp_path || !s->owned)
        return fail(2, "out of memory");
    if ((rc = bind_inputs(s)))
        return rc;
    if (ein_fe_inputs_create(s->g, &s->inputs, &s->err) < 0)
        return fail(2, "out of memory");
    for (int v = 0; v < s->nnodes; v++)
        ein_fe_inputs_set_npy(s->inputs, v, s->in_path[v]);
    if ((o->wfiles.n || o->wmaps.n) &&
        ein_fe_inputs_load_weights(s->inputs, o->wfiles.v, o->wfiles.n, o->wmaps.v, o->wmaps.n,
                                   o->allow_unused, &s->err) < 0)
        return fail(2, "--weights: %s", s->err.msg);
    if ((rc = check_missing_inputs(s)))
        return rc;
    if ((rc = bind_outputs(s)))
        return rc;
    return prepare_outputs(s);
}

/* The backend asked for exists here; --gpus without --backend cuda runs
 * CPU devices, and says so. Then the worker binary, before the long work. */
static int check_backend(run_state *s)
{
    const run_opts *o = s->o;
    const ein_backend_info *be = ein_backend_get(o->backend);
    char why[64];
    if (be->probed && o->use_cpu)
        return fail(2, "--backend %s needs --gpus, not --cpu", be->name);
    if (!be->built)
        return fail(2, "--backend %s: this einrun was built without %s", be->name, be->label);
    int vis = ein_backend_present(be, why, sizeof why, &s->err);
    if (vis < 0)
        return fail(2, "%s", s->err.msg);
    if (!vis)
        return fail(2, "--backend %s: %s", be->name, why);
    /* cpu_why is set only where ein_backend_auto fell back to CPU devices */
    if (!o->use_cpu && o->cpu_why[0])
        fprintf(stderr, "einrun: %s; running %d CPU device%s for --gpus %s\n", o->cpu_why,
                o->ndev, o->ndev == 1 ? "" : "s", o->gpus_arg);
    char worker[PATH_MAX];
    if (ein_fe_find_worker(be->worker, o->session.worker, worker, sizeof worker, &s->err) < 0)
        return fail(2, "%s", s->err.msg);
    return 0;
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

/* The session's store paths are by tensor of the compiled graph, which
 * after --rewrite is another graph than the parsed one (other nodes, other
 * order): every saved tensor is found there by name. */
static int map_store_paths(run_state *s)
{
    const ein_graph *cg = ein_compiled_graph(s->comp);
    ein_fe_info info;
    ein_fe_compiled_info(s->comp, &info);
    if (!(s->store_path = calloc((size_t)ein_graph_ntensors(cg) + 1, sizeof *s->store_path)))
        return fail(1, "out of memory");
    for (int v = 0; v < s->nnodes; v++) {
        const char *name;
        int saved, csaved = 0;
        ein_graph_tensor(s->g, v, &name, NULL, NULL, &saved);
        if (!saved)
            continue;
        int cv = ein_graph_find(cg, name, NULL);
        if (cv >= 0)
            ein_graph_tensor(cg, cv, NULL, NULL, NULL, &csaved);
        if (!csaved)
            return fail(1, "internal error: saved tensor '%s' is not saved by the compiled "
                           "program%s", name, info.rewritten ? " (after --rewrite)" : "");
        s->store_path[cv] = s->tmp_path[v];
    }
    return 0;
}

/* Plan, synthesise and lower (--rewrite first if asked). */
static int compile_program(run_state *s, ein_compile_options *co)
{
    const run_opts *o = s->o;
    double t0 = ein_now_s();
    s->show = ein_progress_wanted(o->quiet);
    co->progress = s->show;
    if (!s->comp && ein_compile(s->g, o->ndev, co, &s->comp, &s->err) < 0) {
        if (s->err.code == EIN_ENOPLAN)
            fprintf(stderr, "einrun: cannot plan %s for %d devices: %s\n", o->path, o->ndev,
                    s->err.msg);
        else
            fprintf(stderr, "einrun: %s%s\n", s->err.msg, topology_advice(co, s->err.code));
        return compile_status(s->err.code);
    }
    ein_fe_info info;
    ein_fe_compiled_info(s->comp, &info);
    if (info.topo_why[0])
        fprintf(stderr, "einrun: topology: %s\n", info.topo_why);
    int rc = map_store_paths(s);
    if (rc)
        return rc;
    if (info.rewritten && !info.loaded)
        ein_fe_print_rewrite(stderr, s->comp);
    if (o->explain)
        ein_fe_print_plan(stderr, s->comp, o->path, EIN_FE_PLAN_EXPLAIN);
    if (o->save_program && ein_compiled_save(s->comp, o->save_program, &s->err) < 0)
        return fail(2, "--save-program: %s", s->err.msg);
    s->t_plan = ein_now_s() - t0;
    return 0;
}

/* --dump-inputs DIR; then a word if the search's wall-clock cap made the
 * plan depend on the machine's speed. */
static int dump_inputs(run_state *s)
{
    const run_opts *o = s->o;
    ein_fe_lower_stats lstats, *ls = &lstats;
    ein_fe_compiled_lower_stats(s->comp, ls);
    if (o->dump_dir) {
        int ninp = 0, nd = 0;
        ein_progress pg;
        for (int v = 0; v < s->nnodes; v++) {
            int is_input;
            ein_graph_tensor(s->g, v, NULL, NULL, &is_input, NULL);
            ninp += is_input || ein_fe_tensor_is_state(s->g, v);
        }
        ein_progress_begin(&pg, s->show, "writing inputs", ninp);
        int rc = ein_fe_inputs_dump(s->inputs, compile_seed(s), o->dump_dir, &pg, &nd, &s->err);
        ein_progress_end(&pg);
        if (rc < 0)
            return fail(2, "--dump-inputs %s", s->err.msg);
        fprintf(stderr, "einrun: wrote %d input%s to %s/\n", nd, nd == 1 ? "" : "s", o->dump_dir);
    }
    if (ls->ncapped)
        fprintf(stderr, "einrun: the exchange search hit its wall-clock cap (%g ms) in %d of %d "
                        "exchanges: this plan depends on the machine's speed (raise "
                        "--search-cap-ms, or lower --search-work)\n",
                o->cap_ms, ls->ncapped, ls->nexchanges);
    return 0;
}

static void session_options_from(const run_state *s, ein_session_options *so)
{
    const run_opts *o = s->o;
    *so = o->session;
    so->backend = run_backend(o)->name;
    so->gpu_ids = o->ids;
    so->graphs = graphs_mode(o);
    so->handle_signals = 1;
    so->store_paths = s->store_path;
}

/* Create the temporaries, start the workers and give them the input files
 * (by name: the compiled graph may be the rewritten one). */
static int start_session(run_state *s)
{
    const run_opts *o = s->o;
    /* Saved tensors go to temporary files, created only now and renamed
     * only on success. From here to the end a SIGINT, SIGTERM or SIGHUP is held
     * back: the session turns it into a failed run, and einrun removes the
     * temporaries before it dies of one that came afterwards. */
    sigprocmask(SIG_BLOCK, &s->stop_signals, NULL);
    /* Before the workers start (they must find them, and never a link put
     * in their place); the session's guard removes them if einrun is
     * killed from then on. */
    if (ein_fe_outputs_open(s->outs, &s->err) < 0)
        return fail(2, "%s", s->err.msg);
    if (s->generated[0])
        fprintf(stderr, "einrun: %s\n", s->generated);
    if (!(s->iter_s = calloc((size_t)(o->warmup + o->iterations), sizeof *s->iter_s)))
        return fail(1, "out of memory");
    session_options_from(s, &s->so);
    if (ein_session_open(s->comp, &s->so, &s->sess, &s->err) < 0)
        return fail(1, "run failed: %s", s->err.msg);
    ein_tensor bad = -1;
    if (ein_fe_inputs_apply(s->inputs, s->sess, &bad, &s->err) < 0) {
        const char *name = "?";
        ein_graph_tensor(s->g, bad, &name, NULL, NULL, NULL);
        return fail(2, "input %s: %s", name, s->err.msg);
    }
    return 0;
}

/* --warmup and --iterations runs, then the outputs published. */
static int run_program(run_state *s)
{
    const run_opts *o = s->o;
    int n = o->warmup + o->iterations, rc;
    double t1 = ein_now_s();
    ein_progress pg;
    if ((rc = start_session(s)))
        return rc;
    ein_progress_begin(&pg, s->show, "running (iterations)", n);
    for (int i = 0; i < n; i++) {
        rc = ein_session_run_ex(s->sess, i == n - 1, &s->rs, &s->err);
        ein_progress_step(&pg, i + 1);
        if (rc < 0) {
            ein_progress_end(&pg);
            return fail(1, "run failed: %s", s->err.msg);
        }
        s->iter_s[i] = s->rs.wall_s;
    }
    ein_progress_end(&pg);
    rc = ein_session_close(s->sess, &s->err);
    s->sess = NULL;
    if (rc < 0)
        return fail(1, "run failed: %s", s->err.msg);
    s->t_run = ein_now_s() - t1;
    if (ein_fe_outputs_publish(s->outs, &s->err) < 0)
        return fail(1, "%s", s->err.msg);
    return 0;
}

static void devices_text(uint64_t mask, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int d = 0; d < 64 && n < len; d++)
        if (mask & (1ULL << d))
            n += (size_t)snprintf(buf + n, len - n, "%s%d", n ? ", " : "", d);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* On stdout: every saved tensor, the iteration times, the trace. */
static void report_outputs(run_state *s)
{
    const run_opts *o = s->o;
    for (int v = 0; v < s->nnodes; v++) {
        const char *name;
        ein_tensor_desc nd;
        int saved;
        ein_graph_tensor(s->g, v, &name, &nd, NULL, &saved);
        if (!saved)
            continue;
        char shape[256], devs[256];
        ein_shape_format(nd.rank, nd.shape, shape, sizeof shape);
        devices_text(ein_fe_output_devices(s->comp, name), devs, sizeof devs);
        fprintf(stdout, "saved %s [%s] %s to %s (blocks written by device%s %s)\n", name, shape,
                ein_dtype_name(nd.dtype), s->out_path[v], strchr(devs, ',') ? "s" : "", devs);
    }
    if (o->iterations > 1 || o->warmup > 0) {
        double *t = s->iter_s + o->warmup;
        const ein_run_stats *rs = &s->rs;
        qsort(t, (size_t)o->iterations, sizeof *t, cmp_double);
        fprintf(stdout, "%d iterations (after %d warm-up): min %.3f ms, median %.3f ms\n",
                o->iterations, o->warmup, 1e3 * t[0], 1e3 * t[o->iterations / 2]);
        /* Say what the times are: on GPUs without device timing they are
         * only the host's time to enqueue the work (the row's host_times). */
        const char *host_times = run_backend(o)->host_times;
        for (int d = 0; d < o->ndev; d++)
            fprintf(stdout, "  device %d: %.3f ms kernels, %.3f ms copies, %.3f ms waiting (last "
                            "iteration%s%s)\n", d, 1e3 * rs->dev[d].kernel, 1e3 * rs->dev[d].copy,
                    1e3 * rs->dev[d].wait,
                    rs->device_timed[d] ? "; kernels, copies: GPU time (CUDA events); waiting: "
                                          "host time waiting for peers"
                    : host_times ? "; " : "",
                    rs->device_timed[d] || !host_times ? "" : host_times);
    }
    if (o->session.trace_path)
        fprintf(stdout, "trace of every device written to %s\n", o->session.trace_path);
}

/* -v: planning and lowering figures, per-device times, on stderr. */
static void report_verbose(run_state *s)
{
    const run_opts *o = s->o;
    ein_fe_lower_stats lstats, *ls = &lstats;
    const ein_run_stats *rs = &s->rs;
    ein_fe_compiled_lower_stats(s->comp, ls);
    fprintf(stderr, "planned and lowered in %.3f s: %d instructions, %d exchanges, %d copies (%.0f bytes)\n",
            s->t_plan, ls->ninstrs, ls->nexchanges, ls->ncopies, ls->copy_bytes);
    fprintf(stderr, "exchanges on topology %s: simulated %.3f ms with naive bodies, %.3f ms %s\n",
            ein_compiled_topology(s->comp, NULL), 1e3 * ls->naive_s, 1e3 * ls->synth_s,
            o->search ? "as synthesised" : "(naive schedule)");
    if (o->search)
        fprintf(stderr, "exchange search: %ld candidates (work budget %ld per exchange) in "
                        "%.1f ms, wall-clock cap hit in %d of %d exchanges\n",
                ls->search_steps, (long)o->search_work, ls->search_ms, ls->ncapped,
                ls->nexchanges);
    fprintf(stderr, "exchange bodies: %d searched, %d copied from an identical exchange, "
                    "%d local (nothing to move)\n", ls->nsearched, ls->nreused, ls->nlocal);
    fprintf(stderr, "ran in %.3f s\n", s->t_run);
    for (int d = 0; d < o->ndev; d++) {
        fprintf(stderr, "  device %d (pid %ld): %.3f s total, %.3f kernels, %.3f copies, %.3f waiting%s\n",
                d, rs->dev[d].pid, rs->dev[d].total, rs->dev[d].kernel, rs->dev[d].copy,
                rs->dev[d].wait, rs->device_timed[d] ? " (kernels, copies: GPU time)" : "");
        /* Graph counts are what makes "graphs on" checkable: a stretch
         * that silently fell back to one instruction at a time shows. */
        if (graphs_mode(o) > 0 || (graphs_mode(o) < 0 && run_backend(o)->graphs_default))
            fprintf(stderr, "  device %d graphs: %d captured, %d launches, %d not captured, %d too "
                            "short%s%s\n",
                    d, rs->graphs[d].captured, rs->graphs[d].launched, rs->graphs[d].failed,
                    rs->graphs[d].too_short, rs->graphs[d].error[0] ? ": " : "",
                    rs->graphs[d].error);
    }
}

/* SIGINT, SIGTERM and SIGHUP (a closed terminal: a stop like SIGTERM)
 * belong to the main thread. Libraries start threads
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
    sigaction(SIGHUP, &sa, NULL);
}

/* PLAN.ein from file to results: the steps in order, each returning 0 or
 * the exit status; the signal mask is as it was on return. */
static int run_plan(const run_opts *o, ein_compile_options *co)
{
    run_state s = {.o = o};
    sigset_t old_mask;
    sigemptyset(&s.stop_signals);
    sigaddset(&s.stop_signals, SIGINT);
    sigaddset(&s.stop_signals, SIGTERM);
    sigaddset(&s.stop_signals, SIGHUP);
    sigprocmask(SIG_SETMASK, NULL, &old_mask);
    stop_signals_to_main();
    int status = load_program(&s, co);
    if (!status)
        status = check_backend(&s);
    if (!status)
        status = compile_program(&s, co);
    if (!status)
        status = dump_inputs(&s);
    if (!status)
        status = run_program(&s);
    if (!status) {
        report_outputs(&s);
        if (o->session.verbose)
            report_verbose(&s);
    }
    run_state_free(&s);
    sigprocmask(SIG_SETMASK, &old_mask, NULL);
    return status;
}

/* --calibrate [--out FILE]: measure (ein_fe_calibration_measure) against --topology
 * (default host) and write the table with its comment lines. Returns an
 * exit status: 0, 1 (the run failed), 2 (bad input). */
static int calibrate(const run_opts *o)
{
    ein_error err = {0};
    ein_fe_calibration *c = NULL;
    int status = 1;
    FILE *f = NULL;
    if (ein_fe_calibration_create(o->topo_arg, &c, &err) < 0) {
        fprintf(stderr, "einrun: --calibrate: %s\n", err.msg);
        return 2;
    }
    if (ein_fe_calibration_measure(c, o->ndev, o->session.worker, &err) < 0) {
        fprintf(stderr, "einrun: --calibrate: %s%s\n", err.msg,
                o->session.worker ? "" : err.code == EIN_EINVAL ? "; use --worker PATH" : "");
        goto done;
    }
    status = 2;
    if (!(f = o->calib_out ? fopen(o->calib_out, "we") : stdout)) {
        fprintf(stderr, "einrun: --out %s: cannot write it\n", o->calib_out);
        goto done;
    }
    ein_fe_calibration_write(f, c, "einrun --calibrate");
    if (o->calib_out && fclose(f) != 0) {
        fprintf(stderr, "einrun: --out %s: cannot write it\n", o->calib_out);
        goto done;
    }
    status = 0;
done:
    ein_fe_calibration_free(c);
    return status;
}

static int run_command(run_opts *o, int argc, char **argv)
{
    int rc;
    if (o->calibrate)
        return calibrate(o);
    if ((rc = run_opts_check(o, argc, argv)))
        return rc;
    ein_compile_options co;
    compile_options_from(o, &co);
    if (o->show_topo)
        return show_topology(&co, o->ndev);
    if ((rc = run_opts_check_run(o)))
        return rc;
    /* Several hosts: the hosts file and the device counts before planning
     * (usage errors, exit 2). */
    ein_error e = {0};
    if (ein_fe_hosts_check(&o->session, o->ndev, &e) < 0) {
        fprintf(stderr, "einrun: %s\n", e.msg);
        return 2;
    }
    return run_plan(o, &co);
}

int main(int argc, char **argv)
{
    static run_opts o; /* 12 KiB of bindings: not on the stack */
    run_opts_init(&o);
    int status = run_opts_parse(&o, argc, argv);
    if (status == OPT_NEXT)
        status = run_command(&o, argc, argv);
    run_opts_free(&o);
    return status;
}
