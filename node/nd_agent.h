/* node/nd_agent.h — einnode: the agent that runs one host's part of a run
 * on several hosts (issue 26).
 *
 * The coordinator (einrun) is the rendezvous: it binds a ROUTER on TCP and
 * starts one agent per host (itself for --fake-hosts; through the launch
 * command of each host of einrun --hosts, such as ssh; later through
 * srun or mpirun). nd_agent_run() then does on its host what co_run.c
 * does on one machine, with the same pieces: a private run directory
 * (mode 0700), the guard process (coordinator/run/co_guard.h) that removes
 * everything if the agent dies, the status page (common/process/ein_status.h),
 * one einworker per device of the host (--transport: blocks from and to
 * other hosts move over the transport, worker/wk_xport.h; --host-address:
 * this host's IPv4 address on the route to the coordinator: 127.0.0.1
 * for pseudo-hosts, whose coordinator listens there), watched through
 * SIGCHLD on a
 * signalfd. Its workers connect to the agent's ROUTER on ipc:// in the run
 * directory exactly as they connect to einrun on one host; the agent
 * relays every message between them and the coordinator unchanged, over
 * one DEALER (identity "n<host>") whose frames carry the worker's identity
 * ("w<d>", "b<d>"). So the Program of a worker comes from the coordinator
 * through its agent, and the coordinator validates every message as for
 * one host.
 *
 * A worker that dies is reported to the coordinator as an ERROR from that
 * worker, naming this host, the worker's pid, how it ended, and the
 * instruction on the status page (from which the coordinator names the
 * operator). The agent ends once every worker has ended, on SIGTERM
 * (stopping them), when the coordinator's process is gone (--parent-pid,
 * fake hosts), or when its standard input ends (--keys-stdin: a launcher
 * such as ssh forwards the end of the coordinator's socket, so the agent
 * stops when the coordinator or the launcher's connection is gone) — and
 * whatever happens, no worker, segment, status page or
 * run directory of its own is left.
 *
 * Returns the agent's exit status: 0 when every worker ended cleanly
 * (after the coordinator's SHUTDOWN), 1 otherwise (the reason on stderr
 * and, where it could be sent, to the coordinator). */
#ifndef ND_AGENT_H
#define ND_AGENT_H

typedef struct nd_config {
    const char *coordinator;    /* the coordinator's endpoint (tcp://host:port) */
    int host;                   /* this host's index */
    int ndevices;               /* devices of the whole run */
    const int *devices;         /* this host's devices */
    int ndev_here;
    const char *worker_path;    /* einworker */
    int iterations;             /* passed to einworker --iterations */
    double instr_timeout;       /* passed to einworker --instr-timeout */
    long parent;                /* the coordinator's pid (fake hosts), 0: not watched */
    const char *transport;      /* blocks between hosts (einworker --transport) */
    int keys_stdin;             /* the CURVE keys come on stdin (a launcher's), whose end
                                   then means the coordinator is gone */
    double link_bw;             /* bytes/s between hosts, 0: none (einworker --link-bw) */
    double link_lat;            /* seconds, one way (einworker --link-latency) */
    const char *backend;        /* NULL: CPU devices; else the workers' --backend (a
                                   row of common/ir/ein_backend.c; worker_path is then its
                                   worker binary) */
    const int *gpus;            /* with a probed backend: the device id of each of
                                   devices[] (einworker --gpu G) */
    int verbose;
} nd_config;

int nd_agent_run(const nd_config *cfg);

#endif
