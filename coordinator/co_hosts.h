/* coordinator/co_hosts.h — the coordinator's side of a run on several hosts
 * (issue 26): starting the agents (einnode, node/nd_agent.h).
 *
 * co_hosts_spawn_agent starts the agent of host `h` on this machine (the
 * pseudo-hosts of einrun --fake-hosts; ssh, srun and mpirun launchers are
 * not written yet): einnode with the devices d whose host_of[d] is h,
 * connecting to `endpoint`, watching this process, with the variables
 * `env` (NULL-terminated "NAME=VALUE"s: its CURVE keys) added to its
 * environment (never its command line). The child gets `mask`
 * as its signal mask, SIGTERM/SIGINT/SIGHUP/SIGCHLD unblocked. Returns 0
 * with *pid set, or a negative code (err filled). */
#ifndef CO_HOSTS_H
#define CO_HOSTS_H

#include <signal.h>
#include <sys/types.h>

#include "common/ein_error.h"
#include "coordinator/co_run.h"

int co_hosts_spawn_agent(const co_run_opts *o, int h, int ndev, const char *endpoint,
                         const char *const *env, const sigset_t *mask, pid_t *pid,
                         ein_error *err);

/* "2-3" or "0,2": the devices of host h, into buf. */
void co_hosts_devices(const co_run_opts *o, int h, int ndev, char *buf, size_t len);

#endif
