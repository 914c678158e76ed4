/* tools/einrun_int.h — einrun's command line, shared by einrun.c (the
 * run: bind, compile, run, report) and einrun_opts.c (--help, the option
 * table, its parsing and checks); private to the einrun program. Strings in
 * run_opts point into argv; run_opts_free frees the bindings. A step
 * returns OPT_NEXT (parsing) or 0 to go on, else the exit status: 1 the run
 * failed, 2 bad usage or bad input. */
#ifndef EINRUN_INT_H
#define EINRUN_INT_H

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

#define MAX_DEVICES 64
#define MAX_BINDINGS 256
#define STR_(x) #x
#define STR(x) STR_(x)

typedef struct binding {
    char *name;
    char *path;
} binding;

typedef struct bindings {       /* --input or --output NAME=FILE */
    binding b[MAX_BINDINGS];
    int n;
} bindings;

typedef struct names {          /* --weights FILE or --map INPUT=TENSOR */
    const char *v[MAX_BINDINGS];
    int n;
} names;

/* Everything the command line says; strings point into argv. */
typedef struct run_opts {
    int ids[MAX_DEVICES], ndev, use_cpu;
    const char *gpus_arg;
    uint64_t seed, plan_seed;
    const char *selector; /* --selector: dp, greedy or random */
    /* The session's options (worker, timeouts, logs, wrapper, hosts, ...),
     * filled by the option table directly and handed to ein_session_open
     * as they are; start_session adds only what einrun resolves (backend,
     * devices, graphs, signals, the temporaries). */
    ein_session_options session;
    double cap_ms;
    int search_work, iterations, warmup;
    int exchange_chunks; /* ein_compile_options.exchange_chunks; 0: default */
    int no_reuse;        /* --no-reuse */
    double memory_limit; /* --memory-limit, bytes (0: none) */
    int explain, quiet, rewrite, ilp, calibrate, show_topo;
    const char *strategy; /* --strategy S (planner/pl_strategy.h) */
    int search;         /* --schedule: index in naive|search */
    int backend;        /* --backend: a row's index (ein_backend_get); -1 not given
                           (run_opts_check resolves it: ein_backend_auto's for
                           --gpus, cuda where GPUs are visible) */
    char cpu_why[64];   /* why --gpus runs CPU devices without --backend, else "" */
    int backend_auto;   /* 1: no --backend, chosen by run_opts_check */
    int graphs;         /* --graphs: index in auto|on|off */
    int time_objective; /* --objective: index in comm|time; -1: not given */
    int native_partials; /* --partials: index in f32|native */
    const char *calib_out, *rewrite_weights;
    const char *topo_arg, *probe_file, *dump_dir;
    const char *save_program; /* --save-program */
    names wfiles, wmaps;
    int allow_unused;   /* --allow-unused-weights */
    bindings inputs, outputs;
    const char *path;   /* PLAN.ein */
    int ndev_given;     /* --gpus or --cpu given (else a saved program's count) */
    unsigned char given[128]; /* by row of the option table: given on the line */
} run_opts;

#define OPT_NEXT (-1)

/* Defined in one file of the module, used in another. */
void run_opts_init(run_opts *o);
void run_opts_free(run_opts *o);
int graphs_mode(const run_opts *o);
int run_opts_parse(run_opts *o, int argc, char **argv);
int run_opts_check(run_opts *o, int argc, char **argv);
int run_opts_check_run(const run_opts *o);
/* Option --`name` was given on the command line. */
int run_opts_given(const run_opts *o, const char *name);

#endif
