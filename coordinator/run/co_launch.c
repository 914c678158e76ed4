/* coordinator/run/co_launch.c — the hosts and launch commands of srun, mpirun
 * and ssh (co_launch.h). */
#include "config.h"

#include "coordinator/run/co_launch.h"
#include "common/base/ein_knob.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

enum { MAX_WORDS = 64 };

/* The blank-separated words of $var, else def alone, into w (strdup'd,
 * NULL-terminated by the caller): the count, or -1. */
static int command_words(ein_knob_id var, const char *def, char **w, int cap)
{
    const char *v = ein_knob_get(var);
    char *s = strdup(v && *v ? v : def), *save = NULL;
    int n = 0;
    if (!s)
        return -1;
    for (char *t = strtok_r(s, " \t", &save); t; t = strtok_r(NULL, " \t", &save)) {
        if (n == cap || !(w[n] = strdup(t))) {
            while (n > 0)
                free(w[--n]);
            free(s);
            return -1;
        }
        n++;
    }
    free(s);
    return n;
}

/* `scontrol show hostnames LIST`: its output lines into *names. */
static int scontrol_hostnames(const char *list, char ***names, int *n, ein_error *err)
{
    int p[2];
    if (pipe(p) < 0)
        return ein_fail(err, EIN_EIO, "pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        return ein_fail(err, EIN_EIO, "fork: %s", strerror(errno));
    }
    if (pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        close(p[1]);
        execlp("scontrol", "scontrol", "show", "hostnames", list, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    FILE *f = fdopen(p[0], "r");
    char line[1024];
    int rc = 0, status = 0;
    *n = 0;
    *names = NULL;
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = '\0';
        if (!line[0])
            continue;
        char **g = rc == 0 ? realloc(*names, sizeof **names * (size_t)(*n + 1)) : NULL;
        if (!g || !(g[*n] = strdup(line))) {
            if (g)
                *names = g;
            rc = rc ? rc : ein_fail(err, EIN_ENOMEM, "out of memory");
            continue;
        }
        *names = g;
        (*n)++;
    }
    if (f)
        fclose(f);
    else
        close(p[0]);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (rc == 0 && (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || *n == 0))
        rc = ein_fail(err, EIN_EINVAL, "srun: cannot expand $SLURM_JOB_NODELIST '%s': "
                      "`scontrol show hostnames` %s", list,
                      WIFEXITED(status) && WEXITSTATUS(status) == 127 ? "could not be run"
                                                                       : "failed");
    if (rc < 0) {
        for (int i = 0; i < *n; i++)
            free((*names)[i]);
        free(*names);
        *names = NULL;
        *n = 0;
    }
    return rc;
}

/* The nodes of the Slurm allocation this process runs in. */
static int slurm_nodes(const char *who, char ***names, int *n, ein_error *err)
{
    const char *job = ein_knob_get(EIN_KNOB_SLURM_JOB_ID);
    const char *list = ein_knob_get(EIN_KNOB_SLURM_JOB_NODELIST);
    if (!list || !*list)
        list = ein_knob_get(EIN_KNOB_SLURM_NODELIST);
    if (!job || !*job || !list || !*list)
        return ein_fail(err, EIN_EINVAL, "%s: not inside a Slurm allocation ($SLURM_JOB_ID and "
                        "$SLURM_JOB_NODELIST are not set): run from `salloc -N HOSTS` or "
                        "an `sbatch` script%s", who,
                        strcmp(who, "srun") ? ", or give a hosts file" : "");
    int rc;
    if (strchr(list, '[')) {
        if ((rc = scontrol_hostnames(list, names, n, err)) < 0)
            return rc;
    } else {
        /* A plain comma-separated list needs no scontrol. */
        char *s = strdup(list), *save = NULL;
        *n = 0;
        *names = NULL;
        for (char *t = s ? strtok_r(s, ",", &save) : NULL; t; t = strtok_r(NULL, ",", &save)) {
            char **g = realloc(*names, sizeof **names * (size_t)(*n + 1));
            if (!g || !(g[*n] = strdup(t))) {
                if (g)
                    *names = g;
                for (int i = 0; i < *n; i++)
                    free((*names)[i]);
                free(*names);
                free(s);
                return ein_fail(err, EIN_ENOMEM, "out of memory");
            }
            *names = g;
            (*n)++;
        }
        if (!s)
            return ein_fail(err, EIN_ENOMEM, "out of memory");
        free(s);
    }
    const char *nn = ein_knob_get(EIN_KNOB_SLURM_JOB_NUM_NODES);
    if (!nn || !*nn)
        nn = ein_knob_get(EIN_KNOB_SLURM_NNODES);
    if (nn && *nn && atoi(nn) != *n) {
        rc = ein_fail(err, EIN_EINVAL, "%s: $SLURM_JOB_NODELIST '%s' names %d node%s but "
                      "$SLURM_NNODES says %s", who, list, *n, *n == 1 ? "" : "s", nn);
        for (int i = 0; i < *n; i++)
            free((*names)[i]);
        free(*names);
        return rc;
    }
    return 0;
}

/* The launch words of host `node`: the launcher's command, its options. */
static int launch_words(const char *launcher, const char *node, char ***out, ein_error *err)
{
    char *w[MAX_WORDS + 16];
    int srun = !strcmp(launcher, "srun");
    int n = command_words(srun ? EIN_KNOB_SRUN : EIN_KNOB_MPIRUN, srun ? "srun" : "mpirun", w,
                          MAX_WORDS);
    if (n < 1)
        return ein_fail(err, n < 0 ? EIN_ENOMEM : EIN_EINVAL, "%s: $%s is empty", launcher,
                        srun ? "EIN_SRUN" : "EIN_MPIRUN");
    char nodelist[1100];
    snprintf(nodelist, sizeof nodelist, "--nodelist=%s", node);
    /* srun: one task on the node, sharing the job's resources with the
     * other steps, unbound, and with every GPU of the job there (no
     * --gpus-per-task: see co_launch.h). mpirun: one rank on the node,
     * unbound (Open MPI binds a small job to cores by default). */
    const char *srun_opts[] = {"--nodes=1", "--ntasks=1", nodelist, "--overlap",
                               "--cpu-bind=none", "--kill-on-bad-exit=1", "--job-name=einnode"};
    const char *mpi_opts[] = {"-np", "1", "--host", node, "--bind-to", "none",
                              "--allow-run-as-root"};
    const char **opts = srun ? srun_opts : mpi_opts;
    int nopts = srun ? 7 : (getuid() == 0 ? 7 : 6);
    int rc = 0;
    for (int i = 0; i < nopts && rc == 0; i++)
        if (!(w[n++] = strdup(opts[i])))
            rc = ein_fail(err, EIN_ENOMEM, "out of memory"), n--;
    char **l = rc == 0 ? calloc((size_t)n + 1, sizeof *l) : NULL;
    if (!l) {
        for (int i = 0; i < n; i++)
            free(w[i]);
        return rc < 0 ? rc : ein_fail(err, EIN_ENOMEM, "out of memory");
    }
    memcpy(l, w, sizeof *w * (size_t)n);
    *out = l;
    return 0;
}

int co_launch_hosts(const char *launcher, const char *hosts_file, int ndev, int per_host,
                    co_host **out, int *n, ein_error *err)
{
    const char *l = launcher && *launcher ? launcher : "ssh";
    if (strcmp(l, "ssh") && strcmp(l, "srun") && strcmp(l, "mpirun"))
        return ein_fail(err, EIN_EINVAL, "launcher '%s': expected ssh, srun or mpirun", l);
    if (!strcmp(l, "ssh") || (!strcmp(l, "mpirun") && hosts_file)) {
        if (!hosts_file)
            return ein_fail(err, EIN_EINVAL, "launcher ssh: no hosts file given");
        if (per_host)
            return ein_fail(err, EIN_EINVAL, "devices per host: the hosts file gives them");
        int rc = co_hosts_parse(hosts_file, out, n, err);
        if (rc < 0 || !strcmp(l, "ssh"))
            return rc;
        for (int h = 0; h < *n; h++) {
            if ((*out)[h].launch) {
                rc = ein_fail(err, EIN_EINVAL, "%s:%d: a LAUNCH command (%s) with launcher "
                              "mpirun, which starts every host's agent itself", hosts_file,
                              (*out)[h].line, (*out)[h].launch[0]);
                break;
            }
            if ((rc = launch_words(l, (*out)[h].addr, &(*out)[h].launch, err)) < 0)
                break;
        }
        if (rc < 0) {
            co_hosts_free(*out, *n);
            *out = NULL;
        }
        return rc;
    }
    if (hosts_file)
        return ein_fail(err, EIN_EINVAL, "launcher srun: the hosts are the Slurm allocation's; "
                        "no hosts file (%s)", hosts_file);
    char **names = NULL;
    int nn = 0, rc = slurm_nodes(l, &names, &nn, err);
    if (rc < 0)
        return rc;
    int k = per_host > 0 ? per_host : nn > 0 ? ndev / nn : 0;
    co_host *h = NULL;
    if (nn < 2 || k < 1 || (int64_t)k * nn != ndev)
        rc = ein_fail(err, EIN_EINVAL, "%s: %d node%s in the allocation, %s%d devices each, for "
                      "a program on %d devices: at least 2 nodes, %s", l, nn, nn == 1 ? "" : "s",
                      per_host > 0 ? "" : "so ", k, ndev,
                      per_host > 0 ? "nodes x devices per host must be the program's devices"
                                   : "and the devices must divide evenly among the nodes "
                                     "(or give the devices per host)");
    else if (!(h = calloc((size_t)nn, sizeof *h)))
        rc = ein_fail(err, EIN_ENOMEM, "out of memory");
    for (int i = 0; i < nn; i++) {
        if (rc == 0) {
            h[i] = (co_host){.addr = names[i], .ndev = k, .line = i + 1};
            names[i] = NULL;
            rc = launch_words(l, h[i].addr, &h[i].launch, err);
        }
        free(names[i]);
    }
    free(names);
    if (rc < 0) {
        co_hosts_free(h, nn);
        return rc;
    }
    *out = h;
    *n = nn;
    return 0;
}

/* Is a (an IPv4 address) one of this machine's, or an interface name? */
static int local_addr(const char *a)
{
    struct ifaddrs *ifs, *i;
    struct in_addr in;
    int v4 = inet_pton(AF_INET, a, &in) == 1, found = 0;
    if (getifaddrs(&ifs) < 0)
        return 0;
    for (i = ifs; i && !found; i = i->ifa_next) {
        if (!v4 && !strcmp(i->ifa_name, a))
            found = 1;
        else if (v4 && i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
                 ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr == in.s_addr)
            found = 1;
    }
    freeifaddrs(ifs);
    return found;
}

int co_launch_listen(const char *listen, const co_host *first, char *buf, size_t len,
                     ein_error *err)
{
    if (listen && *listen) {
        if (strlen(listen) >= len || !local_addr(listen))
            return ein_fail(err, EIN_EINVAL, "listen address '%s': not an IPv4 address or "
                            "interface of this machine", listen);
        snprintf(buf, len, "%s", listen);
        return 0;
    }
    if (local_addr(first->addr) && strlen(first->addr) < len) {
        snprintf(buf, len, "%s", first->addr);
        return 0;
    }
    struct addrinfo hint = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL, *r;
    if (getaddrinfo(first->addr, NULL, &hint, &res) == 0) {
        for (r = res; r; r = r->ai_next) {
            char a[INET_ADDRSTRLEN];
            inet_ntop(AF_INET, &((struct sockaddr_in *)r->ai_addr)->sin_addr, a, sizeof a);
            if (local_addr(a)) {
                snprintf(buf, len, "%s", a);
                freeaddrinfo(res);
                return 0;
            }
        }
        freeaddrinfo(res);
    }
    return ein_fail(err, EIN_EINVAL, "the coordinator listens on the first host's address, "
                    "but '%s' is no address of this machine: give the address or interface "
                    "the hosts reach this machine at as the listen address", first->addr);
}
