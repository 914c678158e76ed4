/* coordinator/run/co_launch.h — the hosts of a run on several hosts and the
 * command that starts each host's agent, for each launcher (issue 26):
 * einrun --launcher ssh|srun|mpirun, ein_session_options.launcher.
 *
 * - ssh (the default): the hosts file (co_hosts.h), each host with its own
 *   LAUNCH (`ssh`, `ip netns exec NS`, ...).
 * - srun: inside a Slurm allocation ($SLURM_JOB_ID and
 *   $SLURM_JOB_NODELIST set; refused with a message outside one). The hosts
 *   are the allocation's nodes, in its order ($SLURM_JOB_NODELIST, expanded
 *   by `scontrol show hostnames` when it has ranges such as `n[1-4]`), each
 *   with `per_host` devices (0: the run's devices shared evenly). Each
 *   host's agent is one job step of one task on that node:
 *       srun --nodes=1 --ntasks=1 --nodelist=NODE --overlap --cpu-bind=none
 *            --kill-on-bad-exit=1 --job-name=einnode  einnode ...
 *   The step asks for no GPUs (no --gpus-per-task, no --gres): Slurm then
 *   gives it every GPU the job has on that node, which is what one agent
 *   per node needs: per-task GPU binding would hide the other GPUs of the
 *   node from each task (CUDA_VISIBLE_DEVICES per task, or a device
 *   cgroup), and CUDA IPC between the host's workers needs them all
 *   visible. One step per node, not one step of N tasks: each node's
 *   launcher is its own child process of the coordinator, so a node whose
 *   step ends is reported by name at once (as an ssh launcher is), and the
 *   run's keys go down that step's standard input to that node's agent
 *   only.
 * - mpirun (Open MPI): the hosts of the hosts file (ADDRESS DEVICES, no
 *   LAUNCH) or, without one, of the Slurm allocation as for srun; each
 *   host's agent is `mpirun -np 1 --host NODE --bind-to none
 *   [--allow-run-as-root when root] einnode ...` (mpirun forwards its
 *   standard input to rank 0, the agent).
 * The command before the options, `srun` or `mpirun`, is $EIN_SRUN or
 * $EIN_MPIRUN when set (split on blanks: such as a wrapper in a test, or
 * `mpirun --mca plm_rsh_agent /path/rsh`).
 *
 * co_launch_hosts fills *out (co_hosts_free; *n hosts, at least 2) for a
 * program on `ndev` devices. It fails (err filled) with EIN_EINVAL for an
 * unknown launcher, srun outside an allocation, a device count that does
 * not fit the hosts, or a LAUNCH in the hosts file of mpirun; with the
 * codes of co_hosts_parse for a bad hosts file.
 *
 * co_launch_listen: where the coordinator listens, into buf (an IPv4
 * address or interface name of this machine): `listen` when given, else
 * the first host's ADDRESS when it is an address or interface of this
 * machine, or one its name resolves to; else EIN_EINVAL saying to give
 * one (--listen).
 */
#ifndef CO_LAUNCH_H
#define CO_LAUNCH_H

#include <stddef.h>

#include "common/base/ein_error.h"
#include "coordinator/run/co_hosts.h"

int co_launch_hosts(const char *launcher, const char *hosts_file, int ndev, int per_host,
                    co_host **out, int *n, ein_error *err);

int co_launch_listen(const char *listen, const co_host *first, char *buf, size_t len,
                     ein_error *err);

#endif
