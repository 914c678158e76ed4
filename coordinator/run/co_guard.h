/* coordinator/run/co_guard.h — a watchdog process that cleans up after a
 * coordinator that dies (kill -9, OOM) in the middle of a run.
 *
 * co_guard_start forks a small process holding the read end of a pipe.
 * The coordinator sends it each worker's pid as it starts them and, at the
 * end of a run that it cleaned up itself, a "done" mark. If the pipe closes
 * without that mark, the coordinator is gone: the guard kills the workers
 * it was told about and removes the run's shared memory (segments and status
 * page), the run directory with its sockets, and the temporary output files.
 * The guard also watches its parent: once the coordinator's process is
 * gone (the guard is re-parented) it cleans up even if a copy of the
 * pipe's write end lives on in a child the owner forked without exec.
 * Workers also die with their coordinator (einworker watches its parent
 * process), but only the guard sees the whole run, including files no
 * worker knows of.
 *
 * Descriptors: the pipe is close-on-exec, and the guard closes every
 * descriptor it inherited except its read end (stdio goes to /dev/null),
 * so no session's guard or worker keeps another session's pipe open:
 * sessions open and close in any order. It runs in its own session
 * (setsid): a terminal's Ctrl-C or hang-up does not reach it.
 *
 * Fork-safety: the guard calls only async-signal-safe functions and
 * opendir/readdir after fork, so it may be started while other sessions'
 * ZeroMQ contexts exist (it never touches them). */
#ifndef CO_GUARD_H
#define CO_GUARD_H

#include <sys/types.h>

#include "common/base/ein_error.h"

typedef struct co_guard {
    pid_t pid;
    int fd;     /* write end of the pipe, -1 when not started */
} co_guard;

int co_guard_start(co_guard *g, const char *run_dir, const char *run_id, int ndev,
                   const char *const *paths, int npaths, ein_error *err);
void co_guard_add_pid(co_guard *g, pid_t pid);
/* The run ended and was cleaned up by the coordinator: let the guard go. */
void co_guard_stop(co_guard *g);

/* Is process `pid` gone (kill(pid, 0) fails with ESRCH)? A process of
 * another user (EPERM) counts as alive; so does this one. */
int co_guard_pid_gone(long pid);

/* What runs killed together with their guard (kill -9 of a whole process
 * group or cgroup) left behind: run directories "<tmpdir>/einrun.<pid>.*"
 * and shared-memory objects "/dev/shm/ein-<pid>-*" whose coordinator <pid>
 * is gone and which belong to this user are removed. Returns how many
 * were removed; never fails. */
int co_guard_sweep_stale(const char *tmpdir);

#endif
