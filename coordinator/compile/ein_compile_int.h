/* coordinator/compile/ein_compile_int.h — the compiled program value inside the
 * library (the public calls are in include/einsummable/einsummable.h),
 * shared by ein_compile.c and ein_session.c; private to the library. */
#ifndef EIN_COMPILE_INT_H
#define EIN_COMPILE_INT_H

#include "common/ir/ein_program.h"
#include "coordinator/predict/co_calib.h"
#include "coordinator/compile/co_lower.h"
#include "coordinator/compile/co_memplan.h"
#include "coordinator/compile/co_search.h"
#include "coordinator/predict/co_sim.h"
#include "exchange/xp_topo.h"
#include "include/einsummable/einsummable.h"
#include "planner/pl_graph.h"
#include "planner/rewrite/pl_rewrite.h"

struct ein_compiled {
    int ndev;
    pl_graph *g;                /* the graph compiled (rewritten, if asked) */
    int rewritten;
    pl_rewrite_stats rewrite_stats;
    ein_plan *plan;
    xp_topology *topo;
    char topo_desc[700];        /* where the topology came from */
    char topo_why[512];         /* a detected topology: what was seen, else "" */
    ein_program **progs;        /* ndev, or NULL (plan_only); LOAD paths NULL
                                   (generated from `seed`), STORE paths
                                   "<name>.npy": a session sets both */
    co_lower_stats ls;
    long search_work;
    double search_cap_ms;
    int searched;
    uint64_t seed;
    co_physical *phys;          /* placement and every exchange body (NULL: plan_only) */
    char **ex_text;             /* nex: phys's bodies as text (ein_compiled_exchange) */
    char **ex_tensor, **ex_consumer; /* nex: each exchange's tensor and consumer names */
    int nex;
    /* How the topology was found (ein_compile_options' topology, cuda,
     * gpu_ids, gpu_probe), so that loading a saved program can find this
     * machine's the same way and compare (ein_compiled_file.c). */
    char *src_topology, *src_gpu_probe;
    int src_backend;            /* ein_backend_index of the compile's backend */
    int src_gpu_ids[EIN_MAX_DEVICES];
    int loaded;                 /* read by ein_compiled_load (co_compiled_rederive) */
    /* How the programs were lowered (co_lower_opts, saved with them): no
     * buffer reuse; co_memplan's delays when reuse_delay_set. */
    int no_reuse, reuse_delay_set;
    co_memplan_opts reuse_delay;
    /* How the plan was chosen (compile_plan): by predicted time with `cal`
     * (time_objective), by the plan search (plan_searched: its report,
     * whole_search when the prefix's plan did not fit the whole graph). */
    int time_objective, plan_searched, whole_search;
    co_search_report search_rep;
    co_calib cal;               /* time_objective or predict_only: the calibration */
    int have_cal;
    xp_topology topo_limited;   /* *topo with the memory limit (a shallow copy,
                                   valid while topo is): what plans must fit in */
    /* Entry points (ein_compiled_add_entry, coordinator/compile/co_entries.h):
     * entry e + 1 is entries[e], the saved outputs out[0..nout) (node ids). */
    struct {
        char name[64];
        int *out, nout;
    } entries[32];
    int nentries;
};

/* What a front end asks of a compile beyond the public options (einplan,
 * through ein_fe_compile in coordinator/ein_frontend.h: the one compile of
 * einrun and the library, with these). */
typedef struct co_compile_extra {
    long plan_work;    /* the plan search's budget (co_search_opts.work: 0 the
                          default, -1 seeds only) */
    int record;        /* keep every candidate in c->search_rep */
    int predict_only;  /* per-device programs for the simulator only (never run):
                          up to 4096 devices; the calibration is loaded (c->cal) */
} co_compile_extra;

/* ein_compile with `x` (NULL: ein_compile). Same ownership and failures. */
int co_compile(const ein_graph *g, int ndev, const ein_compile_options *o,
               const co_compile_extra *x, ein_compiled **out, ein_error *err);

/* Simulate c's programs (not plan_only) on its topology with its memory
 * limit (topo_limited) and calibration (c->cal, loaded by the compile):
 * co_sim_run, then co_sim_check_memory (EIN_ELIMIT). *out is the
 * caller's (co_sim_result_free). */
int co_compiled_simulate(const ein_compiled *c, co_sim_result **out, ein_error *err);

/* 1 if `path` is a regular file that starts like a saved program
 * (ein_compiled_save), else 0; never blocks (a FIFO is 0). */
int co_saved_program_is(const char *path);
/* The device count of the saved program at `path` (its magic and digest
 * checked first); EIN_EPARSE for a damaged or foreign file. */
int co_saved_program_ndev(const char *path, int *ndev, ein_error *err);

/* The hosts of a session opened with `o` for a program on `ndev` devices
 * (fake_hosts, hosts_file, launcher), checked as ein_session_open checks
 * them (the hosts file parsed, the first host this machine, the device
 * counts), without opening anything: 0, or EIN_EINVAL / EIN_EPARSE /
 * EIN_EUNSUPPORTED with err filled. */
int co_session_hosts_check(const ein_session_options *o, int ndev, ein_error *err);

/* The compiled program a session runs (NULL for NULL). */
const ein_compiled *ein_session_compiled(const ein_session *s);

/* Entry point `name` of c (ein_compiled_add_entry): its number (>= 1), or
 * EIN_EINVAL for none. */
int ein_compiled_entry(const ein_compiled *c, const char *name);

/* Fill c's exchange texts and names from c->phys (ein_compile), or NULL
 * arrays of `n` entries for a loaded program to fill. */
int co_compiled_exchanges_alloc(ein_compiled *c, int n, ein_error *err);

/* A loaded program's exchanges, physical plan and per-device programs
 * derived again from its graph, plan, seed and lowering options, with the
 * saved exchange bodies (each parsed, over exactly the preamble of its
 * exchange, and checked: xp_program_check) in place of a search; the
 * derived programs, texts and lowering counts replace what was read.
 * EIN_EPROTO (the file's fault) when a saved body does not fit. */
int co_compiled_rederive(ein_compiled *c, ein_error *err);

/* The worker binary `name`: `given`, else $EINWORKER, else next to this
 * program or library (ein_self.h): NAME, ../NAME, ../bin/NAME. Fails with
 * EIN_EINVAL and a message saying how to name it. */
int co_find_worker(const char *name, const char *given, char *out, size_t len, ein_error *err);
/* The topology a compile uses (see ein_compile_options.topology); `desc`
 * says where it came from, `why` (detected ones) what the probe saw.
 * *out is the caller's (xp_topo_free). */
int co_topology_for(const ein_compile_options *o, int ndev, xp_topology **out, char *desc,
                    size_t desclen, char *why, size_t whylen, ein_error *err);

/* A session input read from `path` in `format` (NPY, or RAW at byte
 * `offset`: a .safetensors tensor, coordinator/run/co_weights.h) from the next
 * run on. The file is checked by the workers when they read it. */
int ein_session_set_input_source(ein_session *s, const char *name, const char *path,
                                 ein_load_format format, uint64_t offset, ein_error *err);

#endif
