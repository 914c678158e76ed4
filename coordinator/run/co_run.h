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

#include "common/ein_error.h"
#include "common/ein_program.h"
#include "common/ein_wire.h"
#include "include/einsummable/einsummable.h"

struct co_host; /* co_hosts.h */

typedef struct co_run_opts {
    /* The session's options (include/einsummable/einsummable.h), one value
     * passed down as the caller has it, resolved: worker_timeout > 0,
     * log_level 1 or 2, wrapper_device -1 without a wrapper, graphs 0 or 1
     * (not -1). Read here: worker_timeout, run_timeout (the whole run, or
     * each step with per_run_timeout; 0 = none), instr_timeout (passed to
     * einworker --instr-timeout, wk_beat.h), verbose, trace_path, log_dir,
     * log_level, wrapper, wrapper_device, debug_device, manual (workers
     * started by hand, see einrun --help), gpu_ids (worker d runs on device
     * gpu_ids[d] of a probed backend; NULL: d), graphs (workers capture
     * local stretches as graphs), handle_signals (block SIGCHLD/SIGINT/
     * SIGTERM/SIGHUP while the session lives and read them from a
     * signalfd: SIGINT, SIGTERM and SIGHUP end the run (einrun); 0: the
     * caller's signals are left alone and exits are polled (a library)),
     * progress (co_session_step: a step that takes longer than
     * step_progress_after seconds shows "running: E s" on stderr while it
     * lasts, when stderr is a terminal, ein_progress.h), connect_timeout
     * and transport (several hosts, below). The rest of it (backend, worker,
     * store_paths, hosts_file, ...) the caller has resolved into the fields
     * below; co_run ignores it. */
    ein_session_options sess;
    const char *worker_path;    /* einworker binary */
    int per_run_timeout;
    const char *timeout_name;   /* how the caller calls it in errors ("the run timeout") */
    int iterations;             /* co_run: runs of the whole plan, warm-up included
                                   (>= 1); a session's workers get 0 (until SHUTDOWN) */
    const char *const *cleanup_paths; /* files to remove if the coordinator dies */
    int ncleanup;
    const ein_backend_info *backend; /* workers run this backend (NULL: cpu) */
    /* A session: called once its private directory exists (the guard
     * removes it with everything in it if the process dies) and before any
     * worker starts, so that the caller can put its files there and point
     * the Programs at them. A negative return (err filled) fails the start. */
    int (*prepare)(void *ctx, const char *dir, ein_error *err);
    void *prepare_ctx;
    struct ein_progress *progress; /* NULL, or stepped with the iterations done */
    double step_progress_after; /* sess.progress */
    /* A run on several hosts (issue 26; nhosts 0: one host). Device d runs
     * on host host_of[d] (0..nhosts-1), whose agent (einnode at node_path,
     * node/nd_agent.h) starts and watches its workers and relays their
     * messages; the ROUTER is bound on TCP (127.0.0.1 for the pseudo-hosts
     * of einrun --fake-hosts; else the first host's address), messages from an
     * agent carry the worker's identity in a second frame, and before the
     * first START every worker gets PEERS: the transport addresses of the
     * devices of other hosts. The agents are this process's children: one
     * that ends before the run does fails it, naming the host. Not with
     * manual, a wrapper, debug_device or a trace. */
    int nhosts;
    const int *host_of;
    const char *node_path;
    /* The hosts file's hosts (co_hosts.h; NULL: the pseudo-hosts of
     * --fake-hosts): the ROUTER binds on hosts[0].addr, each agent starts
     * with its launch command. */
    const struct co_host *hosts;
    /* Where the ROUTER listens for the hosts' agents (an IPv4 address or
     * interface name of this machine; NULL: hosts[0].addr, co_launch.h). */
    const char *listen;
    /* sess.transport: the transport of blocks between hosts (einnode
     * --transport, which passes it to its workers; worker/wk_xport.h names
     * the rows, and a worker refuses a name it does not know); NULL: the
     * agents' default (ucx). */
    /* Several hosts: a device that has spoken and then stays silent for
     * host_timeout seconds (0: worker_timeout) counts as its host having
     * stopped answering (or the link to it being down). */
    double host_timeout;
    /* Bytes/s between hosts (the topology's nic; 0: none) and the one-way
     * latency between them (latency-inter, seconds): the workers'
     * deadline of a transfer between hosts (worker/wk_xport.h). */
    double link_bw, link_lat;
    /* sess.connect_timeout, several hosts: a host none of whose messages
     * has come this many seconds after its agent was started did not
     * connect; the run fails naming it (0: the default of
     * co_hosts_connect_limit). */
} co_run_opts;

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
 * common/ein_wire.h): 0 every instruction (the default), e >= 1 those of
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
