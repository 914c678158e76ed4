/* coordinator/run/co_run_opts.h — the options of a run (co_run_opts), apart
 * from co_run.h so that co_hosts.h can take them without including the
 * supervisor that calls it (no file-to-file circle, issue 35). The struct's
 * pointers are borrowed from the caller for the run's length. */
#ifndef CO_RUN_OPTS_H
#define CO_RUN_OPTS_H

#include "common/base/ein_error.h"
#include "common/ir/ein_program.h"
#include "common/io/ein_wire.h"
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

#endif
