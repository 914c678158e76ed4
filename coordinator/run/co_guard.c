/* coordinator/run/co_guard.c — see co_guard.h. */
#include "config.h"

#include "coordinator/run/co_guard.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/process/ein_status.h"

#define GUARD_DONE ((int64_t)-1)

static void remove_run(const char *run_dir, const char *run_id, int ndev,
                       const char *const *paths, int npaths)
{
    char name[200];
    for (int d = 0; d < ndev; d++) {
        ein_segment_name(name, sizeof name, run_id, d);
        shm_unlink(name);
    }
    ein_status_name(name, sizeof name, run_id);
    shm_unlink(name);
    DIR *dp = opendir(run_dir);
    if (dp) {
        struct dirent *de;
        while ((de = readdir(dp))) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                continue;
            char p[4400];
            snprintf(p, sizeof p, "%s/%s", run_dir, de->d_name);
            unlink(p);
        }
        closedir(dp);
    }
    rmdir(run_dir);
    for (int i = 0; i < npaths; i++)
        if (paths[i])
            unlink(paths[i]);
}

/* The guard process: collect pids until the pipe closes, or until the
 * coordinator's process is gone while the pipe is still open somewhere
 * else (a child the owner forked without exec, a multiprocessing worker,
 * holds a copy of the write end): then this process is re-parented, and
 * getppid() no longer names `owner` (a thread of the owner that forks
 * and ends does not count: the thread group keeps its children). */
static void guard_main(int fd, pid_t owner, const char *run_dir, const char *run_id, int ndev,
                       const char *const *paths, int npaths)
{
    pid_t pids[4096];
    int npids = 0;
    int64_t v;
    for (;;) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int ready = poll(&pf, 1, 200);
        if (ready < 0 && errno != EINTR)
            break;
        if (ready <= 0) {
            if (getppid() != owner)
                break;
            continue;
        }
        ssize_t n = read(fd, &v, sizeof v);
        if (n < 0 && errno == EINTR)
            continue;
        if (n != (ssize_t)sizeof v)
            break;
        /* The coordinator cleaned up: leave at once, not at EOF, which a
         * child the owner forked without exec may hold back for long. */
        if (v == GUARD_DONE)
            _exit(0);
        if (npids < 4096)
            pids[npids++] = (pid_t)v;
    }
    for (int i = 0; i < npids; i++)
        kill(pids[i], SIGKILL);
    usleep(100000); /* let the kernel tear their mappings down */
    remove_run(run_dir, run_id, ndev, paths, npaths);
    _exit(0);
}

/* In the guard, just after fork: keep only `keep` of the descriptors the
 * owner had (its other sessions' guard pipes, sockets and files), with
 * stdin, stdout and stderr on /dev/null: a guard that held a copy of a
 * pipe's write end would keep its reader (another session's guard, or a
 * caller waiting for our output to end) waiting. */
static void guard_close_inherited(int keep)
{
    int null = open("/dev/null", O_RDWR);
    for (int i = 0; i < 3 && null >= 0; i++)
        if (i != keep)
            dup2(null, i);
    int lo = 3;
#ifdef SYS_close_range
    if ((keep < lo || syscall(SYS_close_range, lo, keep - 1, 0) == 0) &&
        syscall(SYS_close_range, keep + 1 > lo ? keep + 1 : lo, ~0U, 0) == 0)
        return;
#endif
    long max = sysconf(_SC_OPEN_MAX);
    if (max < 0 || max > 65536)
        max = 65536;
    for (int f = lo; f < max; f++)
        if (f != keep)
            close(f);
}

int co_guard_start(co_guard *g, const char *run_dir, const char *run_id, int ndev,
                   const char *const *paths, int npaths, ein_error *err)
{
    int p[2];
    g->fd = -1;
    g->pid = -1;
    /* Close-on-exec: a worker (of this or another session) or any program
     * the caller runs must never hold the write end, or this guard would
     * never see it close (and a session's close waits for its guard). */
    if (pipe2(p, O_CLOEXEC) < 0)
        return ein_fail(err, EIN_EIO, "pipe: %s", strerror(errno));
    pid_t owner = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        return ein_fail(err, EIN_EIO, "cannot start the run's guard: %s", strerror(errno));
    }
    if (pid == 0) {
        /* Its own session: a Ctrl-C aimed at einrun (or at a Python
         * prompt) must not kill the guard before the owner has had the
         * chance to clean up or die. */
        setsid();
        guard_close_inherited(p[0]);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        guard_main(p[0], owner, run_dir, run_id, ndev, paths, npaths);
    }
    close(p[0]);
    g->fd = p[1];
    g->pid = pid;
    return 0;
}

void co_guard_add_pid(co_guard *g, pid_t pid)
{
    int64_t v = pid;
    if (g->fd >= 0 && write(g->fd, &v, sizeof v) != (ssize_t)sizeof v) {
        /* A guard that died early cannot help; the run goes on without it. */
    }
}

void co_guard_stop(co_guard *g)
{
    if (g->fd < 0)
        return;
    int64_t v = GUARD_DONE;
    if (write(g->fd, &v, sizeof v) != (ssize_t)sizeof v) {
        /* nothing to do: the guard is gone */
    }
    close(g->fd);
    g->fd = -1;
    waitpid(g->pid, NULL, 0);
}

int co_guard_pid_gone(long pid)
{
    return pid > 0 && pid != (long)getpid() && kill((pid_t)pid, 0) < 0 && errno == ESRCH;
}

/* The pid in `name` if it is `prefix` "<pid>" followed by `sep`, else -1. */
static long name_pid(const char *name, const char *prefix, char sep)
{
    size_t n = strlen(prefix);
    if (strncmp(name, prefix, n))
        return -1;
    long pid = 0;
    const char *p = name + n, *q = p;
    for (; *q >= '0' && *q <= '9' && q - p < 10; q++)
        pid = pid * 10 + (*q - '0');
    return q > p && *q == sep ? pid : -1;
}

static int mine(int dirfd, const char *name, int want_dir)
{
    struct stat st;
    return fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_uid == geteuid() &&
           (want_dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode));
}

int co_guard_sweep_stale(const char *tmpdir)
{
    int removed = 0;
    struct dirent *de;
    DIR *dp = opendir(tmpdir);
    while (dp && (de = readdir(dp))) {
        long pid = name_pid(de->d_name, "einrun.", '.');
        if (pid <= 0 || !co_guard_pid_gone(pid) || !mine(dirfd(dp), de->d_name, 1))
            continue;
        int fd = openat(dirfd(dp), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        DIR *run = fd >= 0 ? fdopendir(fd) : NULL;
        struct dirent *e;
        while (run && (e = readdir(run)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
                unlinkat(fd, e->d_name, 0);
        if (run)
            closedir(run);
        else if (fd >= 0)
            close(fd);
        removed += unlinkat(dirfd(dp), de->d_name, AT_REMOVEDIR) == 0;
    }
    if (dp)
        closedir(dp);
    if (!(dp = opendir("/dev/shm")))
        return removed;
    while ((de = readdir(dp))) {
        char name[300];
        long pid = name_pid(de->d_name, "ein-", '-');
        if (pid <= 0 || !co_guard_pid_gone(pid) || !mine(dirfd(dp), de->d_name, 0))
            continue;
        snprintf(name, sizeof name, "/%s", de->d_name);
        removed += shm_unlink(name) == 0;
    }
    closedir(dp);
    return removed;
}
