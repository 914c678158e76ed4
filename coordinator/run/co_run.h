/* coordinator/run/co_run.h — spawn one worker per device, dispatch, supervise.
 *
 * Processes: every worker runs in its own session (setsid; not under a
 * --worker-wrapper), so a Ctrl-C at the caller's terminal does not reach
 * it, and watches the coordinator's process (einworker --parent-pid), so
 * it ends when that process ends, never when only the thread that started
 * it does (PR_SET_PDEATHSIG would: it is tied to a thread). Descriptors
 * the session opens are close-on-exec.
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

#include "common/base/ein_error.h"
#include "common/ir/ein_program.h"
#include "common/io/ein_wire.h"
#include "include/einsummable/einsummable.h"

#include "coordinator/run/co_run_opts.h"

typedef struct co_worker_stats {
    /* As in ein_run_stats (include/einsummable/einsummable.h), which a
     * session fills with these values as they are: times of the last
     * iteration; graphs since the worker started (its DONE; 0 from a
     * worker without). */
    ein_dev_times t;
    ein_dev_graphs g;
    int device_timed;   /* kernel and copy are device time (CUDA events), not host time */
} co_worker_stats;

/* `iter_s` (may be NULL) receives opts->iterations wall times: from START
 * to the last worker's DONE of each iteration, as the coordinator saw them.
 * co_run is co_session_start, opts->iterations steps (the last one
 * storing), co_session_stop; it always handles signals. */
int co_run(ein_program *const *progs, int ndev, const co_run_opts *opts,
           co_worker_stats *stats, double *iter_s, ein_error *err);

/* A session: the same workers, supervision and clean-up, one step at a
 * time. co_session_start spawns the workers, sends each its Program
 * (`progs` must outlive the session) and returns once all have allocated
 * their memory; on failure nothing is left and *out is untouched.
 * co_session_step runs the program once on every device: STOREs only with
 * `store`, and first the LOADs of the inputs in `reload` again, from their
 * new sources (ein_wire.h: ein_reload). A failure (worker fault, hang,
 * timeout, signal) returns the one-line report, stops every worker and
 * removes the session's files: the session is then dead, later steps fail
 * with EIN_EINVAL, and co_session_stop only frees it. co_session_stop
 * shuts the workers down, merges the trace, removes everything, frees the
 * session (NULL is a no-op) and returns the first failure seen then. */
typedef struct co_session co_session;
int co_session_start(ein_program *const *progs, int ndev, const co_run_opts *opts,
                     co_session **out, ein_error *err);
int co_session_step(co_session *s, int store, const ein_reload *reload, int nreload,
                    co_worker_stats *stats, double *wall_s, ein_error *err);
int co_session_stop(co_session *s, ein_error *err);
/* The entry point the next co_session_step runs (the START's `entry`,
 * common/io/ein_wire.h): 0 every instruction (the default), e >= 1 those of
 * entry e (coordinator/compile/co_entries.h). */
void co_session_set_entry(co_session *s, int entry);
/* Cancel the step running now, if any (else nothing happens): its
 * co_session_step sends CANCEL to every worker, waits until all have
 * stopped that run (wk_exec.c: each says CANCELLED once it and all its
 * peers have stopped), and returns EIN_ECANCELED; the session stays
 * usable, with its inputs resident, and the outputs of a cancelled storing
 * step are undefined. A worker checks for CANCEL between instructions, so
 * a cancel takes effect after the instructions running then. Safe from any
 * thread and from a signal handler (an atomic store and an eventfd write),
 * at any time between co_session_start and co_session_stop. */
void co_session_cancel(co_session *s);
/* The session's private directory (mode 0700, removed with it), or NULL
 * once it is dead. */
const char *co_session_dir(const co_session *s);
int co_session_alive(const co_session *s);

#endif
