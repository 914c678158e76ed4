/* node/nd_agent.c — einnode's work: start, relay, supervise, clean (nd_agent.h). */
#include "node/nd_agent.h"
#include "common/process/ein_child.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "common/base/ein_clock.h"
#include "common/base/ein_error.h"
#include "common/base/ein_knob.h"
#include "common/process/ein_status.h"
#include "common/io/ein_wire.h"
#include "coordinator/run/co_guard.h"

/* A launched agent's link to the coordinator: silent this long, it is
 * down (ZeroMQ heartbeats, every sixth of it). */
#define ND_LINK_TIMEOUT_MS 3000

typedef struct nd_worker {
    int device;
    pid_t pid;
    int exited, status;
} nd_worker;

typedef struct nd {
    const nd_config *cfg;
    char dir[256], run_id[64], endpoint[320], ident[16];
    char host_addr[64];         /* this host's address toward the coordinator, or "" */
    co_guard guard;
    ein_status_slot *status;
    void *zctx, *router, *dealer;
    void *mon;          /* --keys-stdin: the dealer's connection events */
    int connected;      /* the dealer has been connected (mon) */
    int sfd;
    sigset_t oldmask;
    nd_worker *w;
    int failed;
} nd;

static void say(const nd *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const nd *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "einnode (host %d): ", a->cfg->host);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* Tell the coordinator, as an ERROR of device d's worker. */
static void report(nd *a, int d, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void report(nd *a, int d, const char *fmt, ...)
{
    ein_msg m = {.type = EIN_MSG_ERROR, .device = d, .code = EIN_EWORKER, .instr = -1};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m.text, sizeof m.text, fmt, ap);
    va_end(ap);
    if (a->status && a->status[d].instr >= 0)
        m.instr = a->status[d].instr;
    if (a->cfg->verbose || !a->dealer)
        say(a, "%s", m.text);
    void *buf = NULL;
    size_t len = 0;
    char id[16];
    snprintf(id, sizeof id, "w%d", d);
    /* Never blocking: a DEALER that was never connected (setup failed
     * before its zmq_connect) would block a send for ever. */
    if (a->dealer && ein_msg_encode(&m, &buf, &len, NULL) == 0 &&
        zmq_send(a->dealer, id, strlen(id), ZMQ_SNDMORE | ZMQ_DONTWAIT) == (int)strlen(id))
        zmq_send(a->dealer, buf, len, ZMQ_DONTWAIT);
    free(buf);
}

static int spawn(nd *a, nd_worker *w, ein_error *err)
{
    const nd_config *c = a->cfg;
    char dev[16], nd_[16], ppid[32], iters[16], itmo[32], bw[32], lat[32], gpu[16];
    snprintf(dev, sizeof dev, "%d", w->device);
    snprintf(nd_, sizeof nd_, "%d", c->ndevices);
    snprintf(ppid, sizeof ppid, "%ld", (long)getpid());
    snprintf(iters, sizeof iters, "%d", c->iterations);
    snprintf(itmo, sizeof itmo, "%g", c->instr_timeout);
    snprintf(bw, sizeof bw, "%.6g", c->link_bw);
    snprintf(lat, sizeof lat, "%.6g", c->link_lat);
    char *argv[] = {(char *)c->worker_path, "--device", dev, "--ndevices", nd_, "--run-dir",
                    a->dir, "--run-id", a->run_id, "--coordinator", a->endpoint,
                    "--iterations", iters, "--parent-pid", ppid, "--instr-timeout", itmo,
                    "--transport", (char *)c->transport, "--link-bw", bw, "--link-latency", lat,
                    NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    int na = 0;
    while (argv[na])
        na++;
    if (a->host_addr[0]) {
        argv[na++] = "--host-address";
        argv[na++] = a->host_addr;
    }
    if (c->backend) { /* a backend besides CPU devices, with this device's id */
        argv[na++] = "--backend";
        argv[na++] = (char *)c->backend;
        if (c->gpus) {
            snprintf(gpu, sizeof gpu, "%d", c->gpus[w - a->w]);
            argv[na++] = "--gpu";
            argv[na] = gpu;
        }
    }
    pid_t pid = fork();
    if (pid < 0)
        return ein_fail(err, EIN_EIO, "cannot start the worker of device %d: %s", w->device,
                        strerror(errno));
    if (pid == 0) {
        ein_child_signals(&a->oldmask);
        setsid();
        execvp(argv[0], argv);
        _exit(127);
    }
    w->pid = pid;
    co_guard_add_pid(&a->guard, pid);
    return 0;
}

/* Relay every message waiting on `from` to `to`, all frames unchanged.
 * From the coordinator, only to one of our workers ("w<d>"/"b<d>" of a
 * device of this host); anything else is dropped and reported. */
static void relay(nd *a, void *from, void *to, int check)
{
    for (;;) {
        zmq_msg_t part;
        zmq_msg_init(&part);
        if (zmq_msg_recv(&part, from, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&part);
            return;
        }
        int first = 1, drop = 0, more;
        do {
            more = zmq_msg_more(&part);
            if (first && check) {
                const char *id = zmq_msg_data(&part);
                size_t n = zmq_msg_size(&part);
                int d = -1;
                if (n >= 2 && n < 10 && id[0] == 'w') {
                    d = 0;
                    for (size_t i = 1; i < n && d >= 0; i++)
                        d = id[i] >= '0' && id[i] <= '9' ? d * 10 + (id[i] - '0') : -1;
                }
                int ours = 0;
                for (int k = 0; k < a->cfg->ndev_here && d >= 0; k++)
                    ours |= a->w[k].device == d;
                if (!ours) {
                    drop = 1;
                    say(a, "dropped a message from the coordinator for an identity that is "
                           "not a worker of this host");
                }
            }
            first = 0;
            if (drop || zmq_msg_send(&part, to, more ? ZMQ_SNDMORE : 0) < 0)
                zmq_msg_close(&part);
            if (!more)
                break;
            zmq_msg_init(&part);
            if (zmq_msg_recv(&part, from, 0) < 0) {
                zmq_msg_close(&part);
                break;
            }
        } while (1);
    }
}

/* Reap what ended; report a worker that failed. Returns the workers left. */
static int reap(nd *a)
{
    int left = 0;
    for (int k = 0; k < a->cfg->ndev_here; k++) {
        nd_worker *w = &a->w[k];
        if (w->pid <= 0 || w->exited)
            continue;
        int st = 0;
        pid_t got = waitpid(w->pid, &st, WNOHANG);
        if (got == 0) {
            left++;
            continue;
        }
        w->exited = 1;
        w->status = st;
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
            continue;
        a->failed = 1;
        int d = w->device;
        char how[160];
        if (WIFSIGNALED(st))
            snprintf(how, sizeof how, "was killed by signal %d (%s)", WTERMSIG(st),
                     strsignal(WTERMSIG(st)));
        else if (WEXITSTATUS(st) == 127)
            snprintf(how, sizeof how, "exited with status 127 (could not execute %s)",
                     a->cfg->worker_path);
        else
            snprintf(how, sizeof how, "exited with status %d", WEXITSTATUS(st));
        if (a->status && a->status[d].error[0])
            report(a, d, "on host %d, einworker pid %ld %s: %.*s", a->cfg->host, (long)w->pid, how,
                   EIN_STATUS_ERROR_MAX - 1, a->status[d].error);
        else
            report(a, d, "on host %d, einworker pid %ld %s", a->cfg->host, (long)w->pid, how);
    }
    return left;
}

/* Stop every worker still running: SIGTERM, then SIGKILL after 2 s. */
static void stop_workers(nd *a)
{
    for (int k = 0; k < a->cfg->ndev_here; k++)
        if (a->w[k].pid > 0 && !a->w[k].exited)
            kill(a->w[k].pid, SIGTERM);
    double deadline = ein_now_s() + 2.0;
    for (;;) {
        int alive = 0;
        for (int k = 0; k < a->cfg->ndev_here; k++) {
            nd_worker *w = &a->w[k];
            if (w->pid <= 0 || w->exited)
                continue;
            if (waitpid(w->pid, NULL, WNOHANG) == w->pid)
                w->exited = 1;
            else if (ein_now_s() > deadline) {
                kill(w->pid, SIGKILL);
                waitpid(w->pid, NULL, 0);
                w->exited = 1;
            } else
                alive++;
        }
        if (!alive)
            return;
        usleep(10000);
    }
}

static void cleanup(nd *a)
{
    if (a->router)
        zmq_close(a->router);
    if (a->dealer)
        zmq_close(a->dealer);
    if (a->mon)
        zmq_close(a->mon);
    if (a->zctx)
        zmq_ctx_term(a->zctx);
    if (a->sfd >= 0)
        close(a->sfd);
    char name[160];
    for (int d = 0; d < a->cfg->ndevices && a->run_id[0]; d++) {
        ein_segment_name(name, sizeof name, a->run_id, d);
        shm_unlink(name);
    }
    if (a->run_id[0]) {
        ein_status_name(name, sizeof name, a->run_id);
        shm_unlink(name);
    }
    if (a->status)
        munmap(a->status, sizeof(ein_status_slot) * (size_t)a->cfg->ndevices);
    if (a->dir[0]) {
        DIR *dp = opendir(a->dir);
        struct dirent *de;
        while (dp && (de = readdir(dp))) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                continue;
            char p[600];
            snprintf(p, sizeof p, "%s/%s", a->dir, de->d_name);
            unlink(p);
        }
        if (dp)
            closedir(dp);
        rmdir(a->dir);
    }
    co_guard_stop(&a->guard);
}

/* --keys-stdin: three lines NAME=VALUE (the EIN_CURVE_ variables) into
 * the environment, read byte by byte so that nothing after them is
 * consumed; standard input then stays open (its end: nd_agent_run). */
static int keys_from_stdin(ein_error *err)
{
    for (int k = 0; k < 3; k++) {
        char line[128];
        size_t n = 0;
        for (;;) {
            char ch;
            ssize_t got = read(0, &ch, 1);
            if (got < 0 && errno == EINTR)
                continue;
            if (got <= 0)
                return ein_fail(err, EIN_EIO, "--keys-stdin: standard input ended before the "
                                "three CURVE keys (is einnode started by einrun?)");
            if (ch == '\n')
                break;
            if (n + 1 >= sizeof line)
                return ein_fail(err, EIN_EINVAL, "--keys-stdin: a line longer than %zu bytes",
                                sizeof line - 1);
            line[n++] = ch;
        }
        line[n] = '\0';
        char *eq = strchr(line, '=');
        if (!eq || strncmp(line, "EIN_CURVE_", 10) != 0)
            return ein_fail(err, EIN_EINVAL, "--keys-stdin: expected EIN_CURVE_NAME=KEY lines");
        *eq = '\0';
        setenv(line, eq + 1, 1);
    }
    return 0;
}

/* The connection events waiting on a->mon: 1 once the connection to the
 * coordinator, made before, is lost. */
static int link_lost(nd *a)
{
    int lost = 0;
    for (;;) {
        zmq_msg_t ev, addr;
        zmq_msg_init(&ev);
        if (zmq_msg_recv(&ev, a->mon, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&ev);
            return lost;
        }
        uint16_t what = 0;
        if (zmq_msg_size(&ev) >= 2)
            memcpy(&what, zmq_msg_data(&ev), 2);
        int more = zmq_msg_more(&ev);
        zmq_msg_close(&ev);
        if (more) {
            zmq_msg_init(&addr);
            zmq_msg_recv(&addr, a->mon, 0);
            zmq_msg_close(&addr);
        }
        if (what == ZMQ_EVENT_CONNECTED)
            a->connected = 1;
        else if (what == ZMQ_EVENT_DISCONNECTED && a->connected)
            lost = 1;
    }
}

/* This host's IPv4 address on the route to the coordinator's endpoint
 * ("tcp://10.0.0.1:40123"): the source address the kernel picks for a UDP
 * socket connected there (nothing is sent). "" when the endpoint is not a
 * numeric IPv4 one or no route is known. */
static void route_address(const char *endpoint, char *buf, size_t len)
{
    char ip[64];
    const char *h = strncmp(endpoint, "tcp://", 6) ? NULL : endpoint + 6;
    const char *colon = h ? strrchr(h, ':') : NULL;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(9)}, me;
    socklen_t ml = sizeof me;
    buf[0] = '\0';
    if (!colon || (size_t)(colon - h) >= sizeof ip)
        return;
    memcpy(ip, h, (size_t)(colon - h));
    ip[colon - h] = '\0';
    int fd = inet_pton(AF_INET, ip, &sa.sin_addr) == 1 ? socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0) : -1;
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
        getsockname(fd, (struct sockaddr *)&me, &ml) == 0)
        inet_ntop(AF_INET, &me.sin_addr, buf, (socklen_t)len);
    if (fd >= 0)
        close(fd);
}

static int setup(nd *a, ein_error *err)
{
    const nd_config *c = a->cfg;
    int zero = 0, one = 1, linger = 1000;
    int64_t maxsize = EIN_MSG_MAX_BYTES;
    int rc;
    /* The run's CURVE keys (coordinator/run/co_curve.h), from the launcher,
     * first: until they are read nothing exists to clean up, so a SIGTERM
     * (not yet blocked for the signalfd) ends einnode at once, and an input
     * that ends before them ends it with that message. The workers never
     * see them. */
    if (c->keys_stdin && (rc = keys_from_stdin(err)) < 0)
        return rc;
    sigset_t mask;
    ein_run_signals(&mask);
    sigprocmask(SIG_BLOCK, &mask, &a->oldmask);
    if ((a->sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC)) < 0)
        return ein_fail(err, EIN_EIO, "signalfd: %s", strerror(errno));
    const char *tmp = ein_knob_get(EIN_KNOB_TMPDIR);
    tmp = tmp && *tmp ? tmp : "/tmp";
    co_guard_sweep_stale(tmp);
    snprintf(a->dir, sizeof a->dir, "%s/einrun.%ld.XXXXXX", tmp, (long)getpid());
    if (!mkdtemp(a->dir)) {
        a->dir[0] = '\0';
        return ein_fail(err, EIN_EIO, "cannot create a run directory in %s: %s", tmp,
                        strerror(errno));
    }
    snprintf(a->run_id, sizeof a->run_id, "%ld-%s", (long)getpid(), strrchr(a->dir, '.') + 1);
    snprintf(a->endpoint, sizeof a->endpoint, "ipc://%s/coord.sock", a->dir);
    if ((rc = co_guard_start(&a->guard, a->dir, a->run_id, c->ndevices, NULL, 0, err)) < 0)
        return rc;
    if ((rc = ein_status_create(a->run_id, a->cfg->ndevices, &a->status, err)) < 0)
        return rc;
    if (!(a->zctx = zmq_ctx_new()) || !(a->router = zmq_socket(a->zctx, ZMQ_ROUTER)) ||
        !(a->dealer = zmq_socket(a->zctx, ZMQ_DEALER)))
        return ein_fail(err, EIN_EIO, "zmq: %s", zmq_strerror(errno));
    zmq_setsockopt(a->router, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(a->router, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
    zmq_setsockopt(a->router, ZMQ_MAXMSGSIZE, &maxsize, sizeof maxsize);
    if (zmq_bind(a->router, a->endpoint) < 0)
        return ein_fail(err, EIN_EIO, "bind %s: %s", a->endpoint, zmq_strerror(errno));
    snprintf(a->ident, sizeof a->ident, "n%d", c->host);
    zmq_setsockopt(a->dealer, ZMQ_ROUTING_ID, a->ident, strlen(a->ident));
    zmq_setsockopt(a->dealer, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(a->dealer, ZMQ_MAXMSGSIZE, &maxsize, sizeof maxsize);
    const char *srv = ein_knob_get(EIN_KNOB_CURVE_SERVER);
    const char *pub = ein_knob_get(EIN_KNOB_CURVE_PUBLIC);
    const char *sec = ein_knob_get(EIN_KNOB_CURVE_SECRET);
    if (srv && pub && sec) {
        if (strlen(srv) != 40 || strlen(pub) != 40 || strlen(sec) != 40 ||
            zmq_setsockopt(a->dealer, ZMQ_CURVE_SERVERKEY, srv, 40) < 0 ||
            zmq_setsockopt(a->dealer, ZMQ_CURVE_PUBLICKEY, pub, 40) < 0 ||
            zmq_setsockopt(a->dealer, ZMQ_CURVE_SECRETKEY, sec, 40) < 0)
            return ein_fail(err, EIN_EINVAL, "the CURVE keys in the environment are not valid");
    } else {
        return ein_fail(err, EIN_EINVAL, "no CURVE keys (EIN_CURVE_SERVER, EIN_CURVE_PUBLIC, "
                        "EIN_CURVE_SECRET): the coordinator's launcher passes them");
    }
    unsetenv("EIN_CURVE_SERVER");
    unsetenv("EIN_CURVE_PUBLIC");
    unsetenv("EIN_CURVE_SECRET");
    /* A launched agent (another host): ZeroMQ heartbeats on the link to
     * the coordinator, so that a link that goes down (which TCP and ssh
     * may not see for minutes) ends the connection within
     * ND_LINK_TIMEOUT_MS, and the monitor tells us (nd_agent_run). */
    if (c->keys_stdin) {
        int ivl = ND_LINK_TIMEOUT_MS / 6, tmo = ND_LINK_TIMEOUT_MS;
        char mon_ep[64];
        snprintf(mon_ep, sizeof mon_ep, "inproc://nd-mon-%p", (void *)a);
        if (zmq_setsockopt(a->dealer, ZMQ_HEARTBEAT_IVL, &ivl, sizeof ivl) < 0 ||
            zmq_setsockopt(a->dealer, ZMQ_HEARTBEAT_TIMEOUT, &tmo, sizeof tmo) < 0 ||
            zmq_socket_monitor(a->dealer, mon_ep, ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED) < 0 ||
            !(a->mon = zmq_socket(a->zctx, ZMQ_PAIR)) || zmq_connect(a->mon, mon_ep) < 0)
            return ein_fail(err, EIN_EIO, "watching the link to the coordinator: %s",
                            zmq_strerror(errno));
    }
    if (zmq_connect(a->dealer, c->coordinator) < 0)
        return ein_fail(err, EIN_EIO, "connect to the coordinator at %s: %s", c->coordinator,
                        zmq_strerror(errno));
    /* (127.0.0.1 for pseudo-hosts, whose coordinator listens there) */
    route_address(c->coordinator, a->host_addr, sizeof a->host_addr);
    for (int k = 0; k < c->ndev_here; k++)
        if ((rc = spawn(a, &a->w[k], err)) < 0)
            return rc;
    return 0;
}

int nd_agent_run(const nd_config *c)
{
    nd a = {.cfg = c, .sfd = -1, .guard = {.fd = -1, .pid = -1}};
    ein_error err = {0};
    int rc = 0, stop = 0;
    if (!(a.w = calloc((size_t)c->ndev_here, sizeof *a.w)))
        return 1;
    for (int k = 0; k < c->ndev_here; k++)
        a.w[k].device = c->devices[k];
    if ((rc = setup(&a, &err)) < 0) {
        say(&a, "%s", err.msg);
        for (int k = 0; k < c->ndev_here && a.dealer; k++)
            if (!a.w[k].pid)
                report(&a, a.w[k].device, "on host %d: %s", c->host, err.msg);
        a.failed = 1;
        stop = 1;
    }
    while (!stop) {
        zmq_pollitem_t it[5] = {{.socket = a.router, .events = ZMQ_POLLIN},
                                {.socket = a.dealer, .events = ZMQ_POLLIN},
                                {.fd = a.sfd, .events = ZMQ_POLLIN},
                                {.fd = 0, .events = ZMQ_POLLIN},
                                {.socket = a.mon, .events = ZMQ_POLLIN}};
        if (zmq_poll(it, c->keys_stdin ? 5 : 3, 100) < 0 && errno != EINTR)
            break;
        if (a.mon && link_lost(&a)) {
            say(&a, "lost the coordinator at %s (no answer for %.1f s, or it closed): stopping",
                c->coordinator, ND_LINK_TIMEOUT_MS / 1e3);
            a.failed = stop = 1;
        }
        /* --keys-stdin: the end of standard input is the coordinator's. */
        char junk[64];
        if (c->keys_stdin && (it[3].revents & (ZMQ_POLLIN | ZMQ_POLLERR)) &&
            read(0, junk, sizeof junk) <= 0) {
            say(&a, "the coordinator's connection ended: stopping");
            a.failed = stop = 1;
        }
        relay(&a, a.router, a.dealer, 0);
        relay(&a, a.dealer, a.router, 1);
        struct signalfd_siginfo si;
        while (read(a.sfd, &si, sizeof si) == (ssize_t)sizeof si)
            if (si.ssi_signo != SIGCHLD) {
                if (c->verbose)
                    say(&a, "stopping on signal %u", si.ssi_signo);
                stop = 1;
            }
        if (c->parent > 0 && getppid() != (pid_t)c->parent) {
            say(&a, "the coordinator (pid %ld) is gone: stopping", c->parent);
            a.failed = stop = 1;
        }
        if (reap(&a) == 0)
            break;
    }
    /* A last word of the workers (their DONE, ERROR) still goes out. */
    relay(&a, a.router, a.dealer, 0);
    stop_workers(&a);
    cleanup(&a);
    free(a.w);
    return a.failed ? 1 : 0;
}
