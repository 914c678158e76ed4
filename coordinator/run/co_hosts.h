/* coordinator/run/co_hosts.h — the coordinator's side of a run on several hosts
 * (issue 26): the hosts file, and starting the agents (einnode,
 * node/nd_agent.h).
 *
 * The hosts file (einrun --hosts FILE, ein_session_options.hosts_file):
 * one line per host, in device order, `#` starts a comment:
 *
 *     ADDRESS DEVICES [LAUNCH...]
 *
 * ADDRESS names the host in every message; the first host's is where the
 * coordinator listens (an IPv4 address or interface name of this machine,
 * port chosen by the system), so every other host must reach it there.
 * DEVICES is how many of the run's devices are that host's (in order: the
 * first host has devices 0..DEVICES-1, ...). LAUNCH, when given, is the
 * command that runs a program on that host, placed before the einnode
 * command line (einnode and einworker at the same paths as here): such as
 * `ip netns exec ns1` or `ssh -p 2222 -i key root@10.0.0.2`; the single
 * word `ssh` means `ssh -o BatchMode=yes ADDRESS`. Without LAUNCH the
 * agent is started directly on this machine. No shell reads LAUNCH here:
 * it is split on blanks (ssh's remote side does run a shell).
 *
 * co_hosts_parse reads it into *out (freed with co_hosts_free; *n hosts):
 * a malformed line, a device count below 1, or more than CO_HOSTS_MAX hosts
 * fails with EIN_EPARSE naming the file and line.
 *
 * co_hosts_spawn_agent starts the agent of host `h`: einnode with the
 * devices d whose host_of[d] is h, connecting to `endpoint`. Without a
 * launch command (o->hosts NULL: einrun --fake-hosts, or no LAUNCH) it
 * runs here, watching this process (--parent-pid), with the variables
 * `env` (NULL-terminated "NAME=VALUE"s: its CURVE keys) added to its
 * environment (never its command line) and *keys_fd set to -1. With one,
 * the keys go down a socket on the agent's standard input (which ssh
 * forwards), whose other end is returned in *keys_fd: the caller keeps it
 * open for the run and closes it at the end; the agent stops when it sees
 * its end (this process gone, or the launcher's connection lost).
 * o->link_bw (bytes/s, 0: none) and o->link_lat (seconds) go to the
 * agent's --link-bw and --link-latency (worker deadlines of transfers
 * between hosts, worker/wk_xport.h). GPU devices (o->backend probed): --gpus, the
 * GPU of each of the host's devices (o->gpu_ids[d]; else d here, or the
 * k-th device of a launched host on its GPU k). The child gets
 * `mask` as its signal mask, SIGTERM/SIGINT/SIGHUP/SIGCHLD unblocked.
 * Returns 0 with *pid set, or a negative code (err filled). */
#ifndef CO_HOSTS_H
#define CO_HOSTS_H

#include <signal.h>
#include <sys/types.h>

#include "common/base/ein_error.h"
#include "coordinator/run/co_run_opts.h"

enum { CO_HOSTS_MAX = 4096 };

typedef struct co_host {
    char *addr;         /* ADDRESS */
    int ndev;           /* DEVICES */
    char **launch;      /* LAUNCH split into words, NULL-terminated; NULL: none */
    int line;           /* its line in the file */
} co_host;

int co_hosts_parse(const char *path, co_host **out, int *n, ein_error *err);
void co_hosts_free(co_host *h, int n);

int co_hosts_spawn_agent(const co_run_opts *o, int h, int ndev, const char *endpoint,
                         const char *const *env, const sigset_t *mask, pid_t *pid,
                         int *keys_fd, ein_error *err);

/* The deadlines of a run on several hosts from the topology model `t`
 * (NULL: none known): o->host_timeout, how long a device that has spoken
 * may stay silent before its host counts as not answering: CO_HOSTS_BEATS
 * heartbeats (einworker beats every CO_HOSTS_BEAT_S, also inside a long
 * instruction: worker/wk_beat.h) + CO_HOSTS_PAUSE_S (a loaded machine's
 * pause) + a round trip between hosts (latency-inter); o->link_bw, the
 * topology's nic bytes/s when it has several hosts (else 0: the workers
 * set no transfer deadline, worker/wk_xport.h), and o->link_lat, its
 * one-way latency between hosts (the deadline of a block of B bytes is
 * then WK_XPORT_MARGIN x (link_lat + B / link_bw) + WK_XPORT_SLACK_S). */
#define CO_HOSTS_BEAT_S 0.5
#define CO_HOSTS_BEATS 4
#define CO_HOSTS_PAUSE_S 1.0
struct xp_topology;
void co_hosts_deadlines(const struct xp_topology *t, co_run_opts *o);

/* How long host h may take to connect (its first message, relayed by its
 * agent, reaching the coordinator) after its agent was started:
 * o->connect_timeout when set (einrun --connect-timeout,
 * ein_session_options.connect_timeout), else CO_HOSTS_CONNECT_S (an agent
 * starting its workers and their transport, on a loaded machine) plus, for an
 * agent started through a launch command, CO_HOSTS_LAUNCH_S (ssh's
 * connection and login, or srun's step on another node). */
#define CO_HOSTS_CONNECT_S 10.0
#define CO_HOSTS_LAUNCH_S 10.0
double co_hosts_connect_limit(const co_run_opts *o, int h);

/* The interface of this machine that holds the address of `endpoint`
 * ("tcp://10.0.0.1:40123"), such as "eth0", into buf ("" when none does:
 * an address of another machine, or getifaddrs failed). */
void co_hosts_interface(const char *endpoint, char *buf, size_t len);

/* "host 1 (10.0.0.2)" or "host 1": how messages name host h. */
void co_hosts_name(const co_run_opts *o, int h, char *buf, size_t len);

/* "2-3" or "0,2": the devices of host h, into buf. */
void co_hosts_devices(const co_run_opts *o, int h, int ndev, char *buf, size_t len);

#endif
