/* coordinator/ein_frontend.h — what the project's own front ends (einrun,
 * tools/einrun*.c; einplan, tools/einplan.c) need beyond the
 * public API (include/einsummable/einsummable.h), and nothing else.
 *
 * Who: einrun and einplan only (tests/coordinator/test_frontend_includes.sh
 * fails if they include any other internal header). Why not public: these calls
 * print reports whose wording is the front ends' (and `tools/check-outputs`
 * records it), take the front ends' extra compile knobs (the plan search's
 * budget, recording every candidate, programs made only to be simulated)
 * and parse their flags' values; a library user gets the same facts
 * through the public calls (ein_compiled_explain, ein_compiled_predict,
 * ein_compiled_topology). The header is not installed; like the public
 * one it exposes no internal type: every value is an opaque handle of the
 * public API (ein_graph, ein_compiled) or plain C.
 *
 * Also part of the front-end toolkit, and included by the front ends
 * directly: common/base/ein_clock.h (ein_now_s), common/io/ein_npy.h (reading a
 * .npy header), common/ir/ein_box.h (shapes as text), common/process/ein_progress.h
 * (the progress line) and common/base/ein_knob.h (environment variables, read
 * only through the knob table common/base/ein_knobs.def): small generic utilities of common/ with no
 * planner, exchange or coordinator types.
 *
 * Conventions, as the public API's: a call that can fail returns 0 or a
 * negative EIN_E* code with the message in *err (may be NULL); library
 * messages never name a front end or its flags (the front end prefixes
 * its own name and the flag). Printing calls write to the
 * FILE given and return EIN_EIO when writing failed; they read `c` only.
 * Nothing returned needs freeing unless the call says so. */
#ifndef EIN_FRONTEND_H
#define EIN_FRONTEND_H

#include <stdint.h>
#include <stdio.h>

#include "common/process/ein_progress.h"
#include "include/einsummable/einsummable.h"

/* The plan search's default budget beyond its seeds, in operators x
 * devices simulated (coordinator/compile/co_search.h's
 * CO_SEARCH_WORK_DEFAULT; ein_frontend.c checks they agree). */
#define EIN_FE_PLAN_WORK_DEFAULT 12000
/* The exchange search's defaults: its work budget in candidates per
 * exchange and its wall-clock safety cap (exchange/xp_search.h's
 * XP_SEARCH_DEFAULT_WORK and _CAP_MS; checked the same way). */
#define EIN_FE_SEARCH_WORK_DEFAULT 30000
#define EIN_FE_SEARCH_CAP_MS_DEFAULT 30000.0

/* ---- values of flags -------------------------------------------------- */
/* The value of --exchange-chunks / $EIN_EXCHANGE_CHUNKS: "auto" ->
 * EIN_EXCHANGE_CHUNKS_AUTO, "off" -> 1, a count K -> K (1: off), for
 * ein_compile_options.exchange_chunks. EIN_EINVAL with a message
 * otherwise. */
int ein_fe_parse_exchange_chunks(const char *text, int *chunks, ein_error *err);
/* A size as users write it ("4.75GB", "5000MiB", bytes): EIN_EINVAL naming
 * the text for 0, a negative, NaN or a bad unit. */
int ein_fe_parse_memory_limit(const char *text, double *bytes, ein_error *err);

/* Which names an option of ein_compile_options accepts. */
typedef enum ein_fe_choice {
    EIN_FE_SELECTOR,    /* dp, greedy, random */
    EIN_FE_OBJECTIVE,   /* comm, time */
    EIN_FE_PARTIALS,    /* f32, native */
    EIN_FE_STRATEGY     /* megatron, ulysses, sequence, data */
} ein_fe_choice;
/* 0 if `value` is one of `kind`'s names, else EIN_EINVAL (no message: the
 * front end says what it expected). */
int ein_fe_choice_check(ein_fe_choice kind, const char *value);

/* ---- compiling with the front ends' knobs ----------------------------- */
typedef struct ein_fe_compile_extra {
    long plan_work;    /* the plan search's budget (0: the default, -1: seeds only) */
    int record;        /* keep every candidate for ein_fe_print_search(verbose) */
    int predict_only;  /* programs for the simulator only (never run): up to 4096
                          devices; the calibration is loaded */
} ein_fe_compile_extra;

/* ein_compile with `x` (NULL: exactly ein_compile). Same ownership and
 * failures. */
int ein_fe_compile(const ein_graph *g, int ndev, const ein_compile_options *o,
                   const ein_fe_compile_extra *x, ein_compiled **out, ein_error *err);

/* How `c` was made, for the front ends' decisions and messages. Strings
 * are owned by `c`. */
typedef struct ein_fe_info {
    int rewritten;      /* the graph was rewritten (ein_fe_print_rewrite) */
    int loaded;         /* read by ein_compiled_load */
    int plan_searched;  /* the plan search chose the plan (ein_fe_print_search) */
    int time_objective; /* the plan was chosen by predicted time */
    int selector_dp;    /* the plan's selector is dp */
    uint64_t seed;      /* the compile seed: values of inputs never set */
    const char *topo_why; /* a detected topology: what the probe saw, else "" */
} ein_fe_info;
void ein_fe_compiled_info(const ein_compiled *c, ein_fe_info *out);

/* ---- printing a compiled program ---------------------------------------- */
typedef enum ein_fe_plan_format {
    EIN_FE_PLAN_TEXT,     /* einplan's table: split, tiling, costs, total */
    EIN_FE_PLAN_JSON,     /* einplan --json: one object */
    EIN_FE_PLAN_DOT,      /* einplan --dot: Graphviz */
    EIN_FE_PLAN_EXPLAIN   /* einrun --explain's "plan:" block */
} ein_fe_plan_format;
/* c's logical plan in `format`; `path` is the program's file as the user
 * named it (TEXT, JSON; may be NULL for the others). */
int ein_fe_print_plan(FILE *f, const ein_compiled *c, const char *path,
                      ein_fe_plan_format format);
/* After a rewrite: stop reason, e-graph size, times, cost and FLOPs before
 * and after, each saved tensor's expression, one "rewrite:" line each. */
int ein_fe_print_rewrite(FILE *f, const ein_compiled *c);
/* Which objective and budget chose the plan (the plan search's report;
 * `seed` is the plan seed compiled with); verbose: every candidate too. */
int ein_fe_print_search(FILE *f, const ein_compiled *c, uint64_t seed, int verbose);

/* ---- simulating ----------------------------------------------------------- */
/* One simulated iteration of a compiled program (not plan_only), on its
 * topology with its memory limit and calibration. Opaque; freed by
 * ein_fe_sim_free (NULL is fine). */
typedef struct co_sim_result ein_fe_sim;
/* EIN_ELIMIT (the message names the device, its peak and its largest
 * tensors) when some device's peak exceeds its memory; *out is then
 * untouched. */
int ein_fe_simulate(const ein_compiled *c, ein_fe_sim **out, ein_error *err);
/* The report of einplan --simulate: text or (json) one JSON object. */
int ein_fe_print_sim(FILE *f, const ein_compiled *c, const ein_fe_sim *r, int json);
/* The predicted timeline as a Chrome trace (the form of einrun --trace). */
int ein_fe_write_sim_trace(FILE *f, const ein_compiled *c, const ein_fe_sim *r);
void ein_fe_sim_free(ein_fe_sim *r);

/* ---- what einrun needs around a session ------------------------------- */
/* 1 if `path` is a regular file that starts like a saved program
 * (ein_compiled_save), else 0; never blocks (a FIFO is 0). */
int ein_fe_is_saved_program(const char *path);
/* The device count the saved program at `path` was compiled for;
 * EIN_EPARSE (err filled) for a damaged or foreign file. */
int ein_fe_saved_program_ndev(const char *path, int *ndev, ein_error *err);
/* The hosts a session with `o` would run on (fake_hosts, hosts_file,
 * launcher) for `ndev` devices, checked before any planning: a malformed
 * hosts file, a first host that is not this machine, device counts that
 * do not fit. 0 or a negative code (err filled): all usage errors. */
int ein_fe_hosts_check(const ein_session_options *o, int ndev, ein_error *err);
/* The worker binary `name`: `given`, else $EINWORKER, else next to this
 * program: written to out (len bytes). EIN_EINVAL saying how to name it. */
int ein_fe_find_worker(const char *name, const char *given, char *out, size_t len,
                       ein_error *err);
/* The topology a compile with `o` on `ndev` devices would use, as the
 * text of a .topo file: *text is the caller's (free); `desc` says where it
 * came from, `why` (detected ones) what the probe saw, else "". */
int ein_fe_topology_text(const ein_compile_options *o, int ndev, char **text, char *desc,
                         size_t desclen, char *why, size_t whylen, ein_error *err);
/* 1 if tensor t of g is a state (ein_graph_state), else 0 (also for a t
 * out of range). */
int ein_fe_tensor_is_state(const ein_graph *g, ein_tensor t);
/* Devices that store blocks of c's saved tensor `name` (a bitmask over the
 * first 64 devices); 0 for no such tensor. */
uint64_t ein_fe_output_devices(const ein_compiled *c, const char *name);

/* The lowering's figures of a compiled program (zero for a loaded one). */
typedef struct ein_fe_lower_stats {
    int ninstrs, ncopies, nexchanges;
    int nlocal, nsearched, nreused; /* exchanges: moving nothing, searched, copied */
    double copy_bytes;              /* bytes moved between devices */
    double naive_s, synth_s;        /* simulated exchange time: naive, chosen bodies */
    long search_steps;              /* candidates the exchange searches evaluated */
    double search_ms;               /* their wall-clock time (reports only) */
    int ncapped;                    /* searches stopped by the wall-clock cap */
} ein_fe_lower_stats;
void ein_fe_compiled_lower_stats(const ein_compiled *c, ein_fe_lower_stats *out);

/* Where a run's inputs come from, by tensor of graph `g` (which must
 * outlive it): a .npy file (set_npy; the path is borrowed) or a tensor of
 * an open .safetensors file (load_weights; the files stay open, mapped,
 * until ein_fe_inputs_free). */
typedef struct ein_fe_inputs ein_fe_inputs;
int ein_fe_inputs_create(const ein_graph *g, ein_fe_inputs **out, ein_error *err);
void ein_fe_inputs_free(ein_fe_inputs *in);
void ein_fe_inputs_set_npy(ein_fe_inputs *in, ein_tensor t, const char *path);
/* Bind the inputs named like the tensors of `paths` (and the nmaps
 * "INPUT=TENSOR" strings); on error (naming the file and the tensor)
 * nothing is bound. A tensor of the files that nothing binds is an error
 * unless allow_unused. */
int ein_fe_inputs_load_weights(ein_fe_inputs *in, const char *const *paths, int npaths,
                               const char *const *maps, int nmaps, int allow_unused,
                               ein_error *err);
/* 1 if input t has a file, else 0. */
int ein_fe_inputs_has_value(const ein_fe_inputs *in, ein_tensor t);
/* Give every input with a file to the session (by name). On failure *bad
 * is the tensor whose file was refused. */
int ein_fe_inputs_apply(const ein_fe_inputs *in, ein_session *s, ein_tensor *bad,
                        ein_error *err);
/* Write every graph input to dir/NAME.npy: its file's values, or those
 * generated from `seed`; `progress` may be NULL; *ndumped counts them. */
int ein_fe_inputs_dump(const ein_fe_inputs *in, uint64_t seed, const char *dir,
                       ein_progress *progress, int *ndumped, ein_error *err);

/* Output files written safely: each saved tensor goes to a temporary next
 * to its file, created before the run and renamed over it only when the
 * run succeeded (coordinator/run/co_output.h). Names and paths are
 * borrowed. ein_fe_outputs_free removes temporaries not published. */
typedef struct ein_fe_outputs ein_fe_outputs;
int ein_fe_outputs_create(int max, ein_fe_outputs **out, ein_error *err);
void ein_fe_outputs_free(ein_fe_outputs *o);
/* Add output `name` of type `desc` going to `path`; its index or EIN_EINVAL
 * past `max`. */
int ein_fe_outputs_add(ein_fe_outputs *o, const char *name, const char *path,
                       const ein_tensor_desc *desc);
/* Check every path (kind, directory, duplicates) and name its temporary. */
int ein_fe_outputs_prepare(ein_fe_outputs *o, int verbose, ein_error *err);
/* Output i's temporary (after prepare; owned by o). */
const char *ein_fe_outputs_tmp(const ein_fe_outputs *o, int i);
/* Create the temporaries (before the workers start). */
int ein_fe_outputs_open(ein_fe_outputs *o, ein_error *err);
/* Rename every temporary over its file. */
int ein_fe_outputs_publish(ein_fe_outputs *o, ein_error *err);

/* A calibration measured on this machine against a topology (einrun
 * --calibrate). create loads the topology (a built-in name or .topo file;
 * EIN_E* of a bad one); measure runs `ndev` workers (`worker`: NULL finds
 * it); write prints the table with comment lines saying how it was
 * measured, the first starting "# measured by " + measured_by. */
typedef struct ein_fe_calibration ein_fe_calibration;
int ein_fe_calibration_create(const char *topology, ein_fe_calibration **out, ein_error *err);
int ein_fe_calibration_measure(ein_fe_calibration *c, int ndev, const char *worker,
                               ein_error *err);
int ein_fe_calibration_write(FILE *f, const ein_fe_calibration *c, const char *measured_by);
void ein_fe_calibration_free(ein_fe_calibration *c);

#endif
