/* coordinator/co_run.h — spawn one worker per device, dispatch, supervise.
 *
 * co_run() creates a private run directory (mode 0700) holding every ipc://
 * socket, binds a ROUTER there, starts `ndev` einworker processes, sends
 * each its Program when it first speaks, starts them together once all have
 * loaded, and waits for DONE from all. It watches the workers the whole
 * time: a worker that exits early or dies from a signal (seen through
 * SIGCHLD on a signalfd in the poll loop), that reports an ERROR, that sends
 * a malformed message, or that stays silent past `worker_timeout` ends the
 * run with one message naming the device, pid, instruction and operator.
 * Heartbeats come from identity "w<d>" (the worker's main socket) or
 * "b<d>" (its heartbeat thread, worker/wk_beat.h: HEARTBEAT only).
 * Whatever happens, on return no worker is running and the run directory
 * and every shared-memory segment of the run are gone.
 *
 * `stats` (may be NULL) receives ndev entries, owned by the caller. */
#ifndef CO_RUN_H
#define CO_RUN_H

#include "common/ein_error.h"
#include "common/ein_program.h"

typedef struct co_run_opts {
    const char *worker_path;    /* einworker binary */
    double worker_timeout;      /* seconds of silence before a worker counts as hung */
    double timeout;             /* whole run, seconds; 0 = none */
    double instr_timeout;       /* passed to einworker --instr-timeout (wk_beat.h) */
    int verbose;
    int iterations;             /* runs of the whole plan, warm-up included (>= 1) */
    const char *trace_path;     /* NULL, or where the merged Chrome trace goes */
    const char *log_dir;        /* NULL, or a directory for worker-<d>.log */
    int log_level;              /* 1 events, 2 every instruction */
    const char *wrapper;        /* NULL, or a command (split at spaces) that every
                                   worker runs under (gdb, valgrind, ...) */
    int wrapper_device;         /* -1: all workers; else only this one */
    int debug_device;           /* -1, or a worker started paused for a debugger */
    int manual;                 /* workers are started by hand (see einrun --help) */
    const char *const *cleanup_paths; /* files to remove if the coordinator dies */
    int ncleanup;
    int cuda;                   /* workers use the CUDA backend ... */
    const int *gpu_ids;         /* ... worker d on GPU gpu_ids[d] */
    int graphs;                 /* workers capture local stretches as graphs */
    struct ein_progress *progress; /* NULL, or stepped with the iterations done */
} co_run_opts;

typedef struct co_worker_stats {
    long pid;
    double total, kernel, copy, wait;   /* seconds, last iteration, as the worker measured them */
} co_worker_stats;

/* `iter_s` (may be NULL) receives opts->iterations wall times: from START
 * to the last worker's DONE of each iteration, as the coordinator saw them. */
int co_run(ein_program *const *progs, int ndev, const co_run_opts *opts,
           co_worker_stats *stats, double *iter_s, ein_error *err);

#endif
