/* coordinator/co_hosts.c — start the agents of a run on several hosts. */
#include "config.h"

#include "coordinator/co_hosts.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

void co_hosts_devices(const co_run_opts *o, int h, int ndev, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int d = 0; d < ndev; d++) {
        if (o->host_of[d] != h)
            continue;
        int e = d;
        while (e + 1 < ndev && o->host_of[e + 1] == h)
            e++;
        int k = e > d ? snprintf(buf + n, len - n, "%s%d-%d", n ? "," : "", d, e)
                      : snprintf(buf + n, len - n, "%s%d", n ? "," : "", d);
        if (k < 0 || (size_t)k >= len - n)
            return;
        n += (size_t)k;
        d = e;
    }
}

int co_hosts_spawn_agent(const co_run_opts *o, int h, int ndev, const char *endpoint,
                         const char *const *env, const sigset_t *mask, pid_t *pid,
                         ein_error *err)
{
    /* The environment, built before fork (nothing after it allocates). */
    int nenv = 0, nextra = 0;
    while (environ[nenv])
        nenv++;
    while (env && env[nextra])
        nextra++;
    char **envp = calloc((size_t)(nenv + nextra + 1), sizeof *envp);
    if (!envp)
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    int k = 0;
    for (int i = 0; i < nenv; i++)
        if (strncmp(environ[i], "EIN_CURVE_", 10) != 0)
            envp[k++] = environ[i];
    for (int i = 0; i < nextra; i++)
        envp[k++] = (char *)env[i];
    envp[k] = NULL;
    char host[16], devs[4096], nd[16], iters[16], itmo[32], ppid[32];
    snprintf(host, sizeof host, "%d", h);
    co_hosts_devices(o, h, ndev, devs, sizeof devs);
    snprintf(nd, sizeof nd, "%d", ndev);
    snprintf(iters, sizeof iters, "%d", o->iterations);
    snprintf(itmo, sizeof itmo, "%g", o->instr_timeout);
    snprintf(ppid, sizeof ppid, "%ld", (long)getpid());
    if (!devs[0]) {
        free(envp);
        return ein_fail(err, EIN_EINVAL, "host %d has no device", h);
    }
    char *argv[] = {(char *)o->node_path, "--coordinator", (char *)endpoint, "--host", host,
                    "--devices", devs, "--ndevices", nd, "--worker", (char *)o->worker_path,
                    "--iterations", iters, "--instr-timeout", itmo, "--parent-pid", ppid,
                    "--fake", o->verbose ? "--verbose" : NULL, NULL};
    pid_t p = fork();
    if (p < 0) {
        free(envp);
        return ein_fail(err, EIN_EIO, "cannot start the agent of host %d: %s", h, strerror(errno));
    }
    if (p == 0) {
        sigset_t m = *mask;
        sigdelset(&m, SIGTERM);
        sigdelset(&m, SIGINT);
        sigdelset(&m, SIGHUP);
        sigdelset(&m, SIGCHLD);
        sigprocmask(SIG_SETMASK, &m, NULL);
        setsid();
        execvpe(argv[0], argv, envp);
        _exit(127);
    }
    free(envp);
    *pid = p;
    return 0;
}
