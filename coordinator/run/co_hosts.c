/* coordinator/run/co_hosts.c — start the agents of a run on several hosts. */
#include "config.h"
#include "common/process/ein_child.h"

#include "coordinator/run/co_hosts.h"

#include "exchange/xp_topo.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

extern char **environ;

void co_hosts_free(co_host *h, int n)
{
    if (!h)
        return;
    for (int i = 0; i < n; i++) {
        free(h[i].addr);
        for (char **w = h[i].launch; w && *w; w++)
            free(*w);
        free(h[i].launch);
    }
    free(h);
}

/* The blank-separated words of s (changed in place), at most cap. */
static int split_words(char *s, char **w, int cap)
{
    int n = 0;
    for (;;) {
        while (*s == ' ' || *s == '\t')
            s++;
        if (!*s || n == cap)
            return *s ? -1 : n;
        w[n++] = s;
        while (*s && *s != ' ' && *s != '\t')
            s++;
        if (*s)
            *s++ = '\0';
    }
}

int co_hosts_parse(const char *path, co_host **out, int *n, ein_error *err)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return ein_fail(err, EIN_EIO, "hosts file %s: %s", path, strerror(errno));
    co_host *h = NULL;
    int nh = 0, rc = 0, lineno = 0;
    char line[4096];
    while (rc == 0 && fgets(line, sizeof line, f)) {
        lineno++;
        size_t len = strlen(line);
        if (len == sizeof line - 1 && line[len - 1] != '\n') {
            rc = ein_fail(err, EIN_EPARSE, "%s:%d: line longer than %zu characters", path,
                          lineno, sizeof line - 2);
            break;
        }
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        for (char *c = line; *c; c++)
            if (*c == '\n' || *c == '\r')
                *c = ' ';
        char *w[256];
        int nw = split_words(line, w, 256);
        if (nw == 0)
            continue;
        char *end;
        long nd = nw >= 2 ? strtol(w[1], &end, 10) : 0;
        if (nw < 0 || nw < 2 || *end || nd < 1 || nd > 4096) {
            rc = ein_fail(err, EIN_EPARSE, "%s:%d: expected ADDRESS DEVICES [LAUNCH...] "
                          "(DEVICES a count from 1 to 4096)%s", path, lineno,
                          nw < 0 ? ": too many words" : "");
            break;
        }
        for (const char *c = w[0]; *c; c++)
            if (!isalnum((unsigned char)*c) && !strchr(".-_:", *c)) {
                rc = ein_fail(err, EIN_EPARSE, "%s:%d: address '%s': expected a host name "
                              "or IP address", path, lineno, w[0]);
                break;
            }
        if (rc < 0)
            break;
        if (nh == CO_HOSTS_MAX) {
            rc = ein_fail(err, EIN_EPARSE, "%s:%d: more than %d hosts", path, lineno,
                          CO_HOSTS_MAX);
            break;
        }
        co_host *g = realloc(h, sizeof *h * (size_t)(nh + 1));
        if (!g) {
            rc = ein_fail(err, EIN_ENOMEM, "out of memory");
            break;
        }
        h = g;
        co_host *x = &h[nh++];
        *x = (co_host){.ndev = (int)nd, .line = lineno};
        int nl = nw - 2, ssh = nl == 1 && !strcmp(w[2], "ssh");
        if (!(x->addr = strdup(w[0])) ||
            (nl > 0 && !(x->launch = calloc((size_t)(ssh ? 5 : nl + 1), sizeof *x->launch)))) {
            rc = ein_fail(err, EIN_ENOMEM, "out of memory");
            break;
        }
        const char *words[] = {"ssh", "-o", "BatchMode=yes", w[0]};
        for (int i = 0; i < (ssh ? 4 : nl) && rc == 0; i++)
            if (!(x->launch[i] = strdup(ssh ? words[i] : w[2 + i])))
                rc = ein_fail(err, EIN_ENOMEM, "out of memory");
    }
    if (rc == 0 && ferror(f))
        rc = ein_fail(err, EIN_EIO, "hosts file %s: read error", path);
    fclose(f);
    if (rc == 0 && nh < 1)
        rc = ein_fail(err, EIN_EPARSE, "hosts file %s: no host in it", path);
    if (rc < 0) {
        co_hosts_free(h, nh);
        return rc;
    }
    *out = h;
    *n = nh;
    return 0;
}

/* s in single quotes for a POSIX shell ('\'' for each quote), or NULL. */
static char *sh_quote(const char *s)
{
    size_t n = 3;
    for (const char *c = s; *c; c++)
        n += *c == '\'' ? 4 : 1;
    char *q = malloc(n), *o = q;
    if (!q)
        return NULL;
    *o++ = '\'';
    for (const char *c = s; *c; c++) {
        if (*c == '\'') {
            memcpy(o, "'\\''", 4);
            o += 4;
        } else
            *o++ = *c;
    }
    *o++ = '\'';
    *o = '\0';
    return q;
}

void co_hosts_deadlines(const struct xp_topology *t, co_run_opts *o)
{
    int two = t && t->nodes > 1;
    double lat = two ? xp_topo_hop_latency(t, 0, t->local) : 0;
    o->host_timeout = CO_HOSTS_BEATS * CO_HOSTS_BEAT_S + CO_HOSTS_PAUSE_S + 2 * lat;
    o->link_bw = two && t->nic > 0 ? t->nic : 0;
    o->link_lat = two ? lat : 0;
}

double co_hosts_connect_limit(const co_run_opts *o, int h)
{
    if (o->sess.connect_timeout > 0)
        return o->sess.connect_timeout;
    return CO_HOSTS_CONNECT_S + (o->hosts && o->hosts[h].launch ? CO_HOSTS_LAUNCH_S : 0);
}

void co_hosts_interface(const char *endpoint, char *buf, size_t len)
{
    buf[0] = '\0';
    char ip[64];
    const char *a = strncmp(endpoint, "tcp://", 6) ? NULL : endpoint + 6;
    const char *colon = a ? strrchr(a, ':') : NULL;
    if (!colon || (size_t)(colon - a) >= sizeof ip)
        return;
    memcpy(ip, a, (size_t)(colon - a));
    ip[colon - a] = '\0';
    struct in_addr want;
    struct ifaddrs *ifs = NULL;
    if (inet_pton(AF_INET, ip, &want) != 1 || getifaddrs(&ifs) < 0)
        return;
    for (struct ifaddrs *i = ifs; i; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
            ((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr.s_addr == want.s_addr) {
            snprintf(buf, len, "%s", i->ifa_name);
            break;
        }
    freeifaddrs(ifs);
}

void co_hosts_name(const co_run_opts *o, int h, char *buf, size_t len)
{
    if (o->hosts)
        snprintf(buf, len, "host %d (%s)", h, o->hosts[h].addr);
    else
        snprintf(buf, len, "host %d", h);
}

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

/* The agent's environment: ours without EIN_CURVE_*, then `env` (the
 * strings are borrowed); NULL when out of memory. */
static char **agent_environ(const char *const *env)
{
    int nenv = 0, nextra = 0;
    while (environ[nenv])
        nenv++;
    while (env && env[nextra])
        nextra++;
    char **envp = calloc((size_t)(nenv + nextra + 1), sizeof *envp);
    if (!envp)
        return NULL;
    int k = 0;
    for (int i = 0; i < nenv; i++)
        if (strncmp(environ[i], "EIN_CURVE_", 10) != 0)
            envp[k++] = environ[i];
    for (int i = 0; i < nextra; i++)
        envp[k++] = (char *)env[i];
    envp[k] = NULL;
    return envp;
}

/* argv[from..na) replaced by shell-quoted copies (sh_quote); -1 when out
 * of memory, with the copies made so far freed. */
static int agent_quote(char **argv, int from, int na)
{
    for (int i = from; i < na; i++)
        if (!(argv[i] = sh_quote(argv[i]))) {
            for (int j = from; j < i; j++)
                free(argv[j]);
            return -1;
        }
    return 0;
}

/* The keys `env` sent to a launched agent, one a line, over `fd`: 0, or
 * the errno of a send that failed (EIO for a short one). */
static int agent_keys(int fd, const char *const *env)
{
    char buf[256];
    int k = 0;
    for (int i = 0; env && env[i]; i++)
        k += snprintf(buf + k, sizeof buf - (size_t)k, "%s\n", env[i]);
    if (send(fd, buf, (size_t)k, MSG_NOSIGNAL) != k)
        return errno ? errno : EIO;
    return 0;
}

/* The words of the agent's command line that are numbers or lists. */
typedef struct agent_words {
    char host[16], devs[4096], nd[16], iters[16], itmo[32], ppid[32], bw[32], lat[32];
} agent_words;

static void agent_words_fill(agent_words *w, const co_run_opts *o, int h, int ndev)
{
    snprintf(w->host, sizeof w->host, "%d", h);
    co_hosts_devices(o, h, ndev, w->devs, sizeof w->devs);
    snprintf(w->nd, sizeof w->nd, "%d", ndev);
    snprintf(w->iters, sizeof w->iters, "%d", o->iterations);
    snprintf(w->itmo, sizeof w->itmo, "%g", o->sess.instr_timeout);
    snprintf(w->ppid, sizeof w->ppid, "%ld", (long)getpid());
    snprintf(w->bw, sizeof w->bw, "%.6g", o->link_bw > 0 ? o->link_bw : 0.0);
    snprintf(w->lat, sizeof w->lat, "%.6g",
             o->link_bw > 0 && o->link_lat > 0 ? o->link_lat : 0.0);
}

/* In the forked child: the agent itself (stdin from `keys`, when >= 0). */
static void agent_exec(const sigset_t *mask, int keys, char **argv, char **envp)
{
    ein_child_signals(mask);
    setsid();
    if (keys >= 0 && dup2(keys, 0) < 0)
        _exit(127);
    execvpe(argv[0], argv, envp);
    _exit(127);
}

/* GPU devices into gpus[cap] ("" if none): the GPU of each of host h's
 * devices, in order (einrun --gpus; else, on this machine, GPU d, and on a
 * launched host its k-th device on GPU k). */
static void agent_gpus(const co_run_opts *o, int h, int ndev, int launched, char *gpus, size_t cap)
{
    for (int d = 0, k = 0, n = 0; o->backend && o->backend->probed && d < ndev; d++) {
        if (o->host_of[d] != h)
            continue;
        int g = o->sess.gpu_ids ? o->sess.gpu_ids[d] : launched ? k : d;
        int m = snprintf(gpus + n, cap - (size_t)n, "%s%d", n ? "," : "", g);
        if (m < 0 || (size_t)m >= cap - (size_t)n)
            break;
        n += m;
        k++;
    }
}

int co_hosts_spawn_agent(const co_run_opts *o, int h, int ndev, const char *endpoint,
                         const char *const *env, const sigset_t *mask, pid_t *pid,
                         int *keys_fd, ein_error *err)
{
    char *const *launch = o->hosts ? o->hosts[h].launch : NULL;
    int nlaunch = 0;
    while (launch && launch[nlaunch])
        nlaunch++;
    *keys_fd = -1;
    /* The environment, built before fork (nothing after it allocates). */
    char **envp = agent_environ(env);
    if (!envp)
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    agent_words w;
    agent_words_fill(&w, o, h, ndev);
    char *host = w.host, *devs = w.devs, *nd = w.nd, *iters = w.iters, *itmo = w.itmo;
    char *ppid = w.ppid, *bw = w.bw, *lat = w.lat;
    char gpus[4096] = "";
    agent_gpus(o, h, ndev, launch != NULL, gpus, sizeof gpus);
    if (!devs[0]) {
        free(envp);
        return ein_fail(err, EIN_EINVAL, "host %d has no device", h);
    }
    const char *args[] = {o->node_path, "--coordinator", endpoint, "--host", host,
                          "--devices", devs, "--ndevices", nd, "--worker", o->worker_path,
                          "--iterations", iters, "--instr-timeout", itmo, "--link-bw", bw,
                          "--link-latency", lat};
    int nargs = (int)(sizeof args / sizeof *args);
    char **argv = calloc((size_t)(nlaunch + nargs + 11), sizeof *argv);
    int kp[2] = {-1, -1};
    if (!argv || (launch && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, kp) < 0)) {
        int e = errno;
        free(envp);
        free(argv);
        return ein_fail(err, argv ? EIN_EIO : EIN_ENOMEM, "cannot start the agent of host %d: %s",
                        h, strerror(e));
    }
    int na = 0;
    for (int i = 0; i < nlaunch; i++)
        argv[na++] = launch[i];
    for (int i = 0; i < nargs; i++)
        argv[na++] = (char *)args[i];
    if (launch) {
        argv[na++] = "--keys-stdin";
    } else {
        argv[na++] = "--parent-pid";
        argv[na++] = ppid;
    }
    if (o->sess.verbose)
        argv[na++] = "--verbose";
    if (o->sess.transport) {
        argv[na++] = "--transport";
        argv[na++] = (char *)o->sess.transport;
    }
    if (o->backend && ein_backend_index(o->backend) > 0) {
        argv[na++] = "--backend";
        argv[na++] = (char *)o->backend->name;
    }
    if (gpus[0]) {
        argv[na++] = "--gpus";
        argv[na++] = gpus;
    }
    char cwd[4096];
    if (launch && getcwd(cwd, sizeof cwd)) {
        argv[na++] = "--cwd"; /* relative paths mean what they mean here */
        argv[na++] = cwd;
    }
    argv[na] = NULL;
    /* ssh hands its command to the remote user's shell: every word of
     * ours quoted (paths with blanks or quotes stay one word). */
    const char *l0 = launch ? strrchr(launch[0], '/') : NULL;
    int quote = launch && !strcmp(l0 ? l0 + 1 : launch[0], "ssh");
    if (quote && agent_quote(argv, nlaunch, na) < 0) {
        free(envp);
        free(argv);
        close(kp[0]);
        close(kp[1]);
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    }
    pid_t p = fork();
    for (int i = nlaunch; quote && p != 0 && i < na; i++)
        free(argv[i]);
    if (p < 0) {
        int e = errno;
        free(envp);
        free(argv);
        if (launch) {
            close(kp[0]);
            close(kp[1]);
        }
        return ein_fail(err, EIN_EIO, "cannot start the agent of host %d: %s", h, strerror(e));
    }
    if (p == 0)
        agent_exec(mask, launch ? kp[0] : -1, argv, launch ? environ : envp);
    free(argv);
    if (launch) {
        /* The keys, then the socket stays open: its end tells the agent.
         * (A socket, not a pipe: an agent already gone is no SIGPIPE.) */
        close(kp[0]);
        int e = agent_keys(kp[1], env);
        if (e) {
            close(kp[1]);
            free(envp);
            *pid = p;
            return ein_fail(err, EIN_EIO, "cannot hand the agent of host %d its keys: %s", h,
                            strerror(e));
        }
        *keys_fd = kp[1];
    }
    free(envp);
    *pid = p;
    return 0;
}
