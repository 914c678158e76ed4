/* coordinator/co_run.c — worker processes: spawn, dispatch, supervise, clean. */
#include "coordinator/co_run.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <stdatomic.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "common/ein_progress.h"
#include "common/ein_clock.h"
#include "common/ein_status.h"
#include "common/ein_wire.h"
#include "coordinator/co_guard.h"
#include "coordinator/co_curve.h"
#include "coordinator/co_hosts.h"

enum { W_SPAWNED, W_PROGRAM_SENT, W_LOADED, W_STARTED, W_DONE, W_CANCELLED };

typedef struct worker {
    pid_t pid;
    int spoke;          /* sent at least one message */
    int phase;
    int instr;          /* last instruction reported */
    double last_seen;
    int exited;
} worker;

struct co_session {
    co_run_opts o_copy;
    const co_run_opts *o;
    ein_program *const *progs;
    int ndev;
    char dir[256];
    char run_id[64];
    char endpoint[320];
    void *zctx, *router;
    int sfd;
    sigset_t oldmask;
    worker *w;
    int iter;           /* iterations started */
    double deadline;    /* the current wait's end (opts timeout), 0: none */
    ein_status_slot *status;    /* the run's status page (see ein_status.h) */
    co_guard guard;
    int masked;         /* SIGCHLD/SIGINT/SIGTERM/SIGHUP blocked and read from sfd */
    /* Cancelling (co_session_cancel, from any thread or a signal handler):
     * step `gen` is cancelled once cancel_gen equals it; cfd (an eventfd)
     * wakes the poll. */
    atomic_uint gen, cancel_gen;
    int cfd;
    int cancelling;     /* CANCEL sent: DONE and CANCELLED are both in turn */
    int dead;           /* failed or stopped: nothing runs any more */
    ein_progress *step_pg; /* the step's progress line (NULL: none) */
    ein_error why;      /* why it died */
    /* Several hosts (o->nhosts > 0): the agents, and each device's UCX
     * address from its HELLO. */
    pid_t *agent;
    int *agent_fd;      /* co_hosts_spawn_agent's keys_fd (-1: none) */
    char *agent_exited;
    ein_bytes *addr;
    co_curve *curve;    /* the agents' keys (co_curve.h) */
};
typedef struct co_session run;

/* "instruction 17 (KERNEL, operator 'y')", or "startup" before any. */
/* "in instruction 17 (KERNEL, operator 'y')", "at startup", ...: where
 * device d was, from the status page if it says, else the last heartbeat. */
static void describe_instr(const run *r, int d, int instr, char *buf, size_t len)
{
    if (r->status && r->status[d].instr >= 0)
        instr = r->status[d].instr;
    if (instr < 0 || instr >= r->progs[d]->ninstrs) {
        snprintf(buf, len, "%s", r->w[d].phase >= W_STARTED ? "between instructions" : "at startup");
        return;
    }
    const ein_instr *ins = &r->progs[d]->instrs[instr];
    snprintf(buf, len, "in instruction %d (%s, operator '%s')", instr,
             ein_instr_kind_name(ins->kind), ins->op);
}

static int send_to(run *r, int d, const ein_msg *m, ein_error *err)
{
    char id[32];
    void *buf = NULL;
    size_t len = 0;
    int rc = ein_msg_encode(m, &buf, &len, err);
    if (rc < 0)
        return rc;
    snprintf(id, sizeof id, "w%d", d);
    /* Several hosts: through the agent of d's host ("n<h>", then d's identity). */
    char aid[16];
    snprintf(aid, sizeof aid, "n%d", r->o->nhosts > 0 ? r->o->host_of[d] : 0);
    if (r->o->nhosts > 0 && zmq_send(r->router, aid, strlen(aid), ZMQ_SNDMORE) < 0)
        rc = ein_fail(err, EIN_EWORKER, "device %d: cannot reach the agent of host %d: %s", d,
                      r->o->host_of[d], zmq_strerror(errno));
    else if (zmq_send(r->router, id, strlen(id), ZMQ_SNDMORE) < 0 ||
             zmq_send(r->router, buf, len, 0) < 0)
        rc = ein_fail(err, EIN_EWORKER, "device %d (pid %ld): cannot send %s: %s", d,
                      (long)r->w[d].pid, ein_msg_type_name(m->type), zmq_strerror(errno));
    free(buf);
    return rc;
}

/* Split `cmd` at spaces into argv[*n...] (no quoting: a wrapper command is
 * a tool and its options). Returns -1 if there are too many words. */
static int split_words(char *cmd, char **argv, int *n, int max)
{
    char *save = NULL;
    for (char *t = strtok_r(cmd, " \t", &save); t; t = strtok_r(NULL, " \t", &save)) {
        if (*n >= max)
            return -1;
        argv[(*n)++] = t;
    }
    return 0;
}

static int spawn(run *r, int d, ein_error *err)
{
    char dev[16], nd[16], ppid[32], iters[16], level[16], logp[600], trace[600], wrap[1024];
    char gpu[16], itmo[32];
    char *argv[64];
    int n = 0;
    snprintf(dev, sizeof dev, "%d", d);
    snprintf(nd, sizeof nd, "%d", r->ndev);
    snprintf(ppid, sizeof ppid, "%ld", (long)getpid());
    snprintf(iters, sizeof iters, "%d", r->o->iterations);
    snprintf(level, sizeof level, "%d", r->o->log_level);
    if (r->o->wrapper && (r->o->wrapper_device < 0 || r->o->wrapper_device == d)) {
        snprintf(wrap, sizeof wrap, "%s", r->o->wrapper);
        if (split_words(wrap, argv, &n, 40) < 0)
            return ein_fail(err, EIN_EINVAL, "the worker wrapper has too many words");
    }
    argv[n++] = (char *)r->o->worker_path;
    char *fixed[] = {"--device", dev, "--ndevices", nd, "--run-dir", r->dir, "--run-id",
                     r->run_id, "--coordinator", r->endpoint, "--iterations", iters};
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
        argv[n++] = fixed[i];
    if (!r->o->manual) {
        argv[n++] = "--parent-pid";
        argv[n++] = ppid;
    }
    if (r->o->log_dir) {
        snprintf(logp, sizeof logp, "%s/worker-%d.log", r->o->log_dir, d);
        argv[n++] = "--log";
        argv[n++] = logp;
        argv[n++] = "--log-level";
        argv[n++] = level;
    }
    if (r->o->trace_path) {
        snprintf(trace, sizeof trace, "%s/trace-%d.json", r->dir, d);
        argv[n++] = "--trace";
        argv[n++] = trace;
    }
    if (r->o->debug_device == d)
        argv[n++] = "--pause";
    if (r->o->graphs)
        argv[n++] = "--graphs";
    snprintf(itmo, sizeof itmo, "%g", r->o->instr_timeout);
    argv[n++] = "--instr-timeout";
    argv[n++] = itmo;
    if (r->o->cuda) {
        snprintf(gpu, sizeof gpu, "%d", r->o->gpu_ids ? r->o->gpu_ids[d] : d);
        argv[n++] = "--backend";
        argv[n++] = "cuda";
        argv[n++] = "--gpu";
        argv[n++] = gpu;
    }
    argv[n] = NULL;
    r->w[d].phase = W_SPAWNED;
    r->w[d].instr = -1;
    r->w[d].last_seen = ein_now_s();
    if (r->o->manual) {
        /* The user starts it (under a debugger, say); we only wait for it. */
        fprintf(stderr, "einsummable: start device %d with:\n ", d);
        for (int i = 0; i < n; i++)
            fprintf(stderr, " %s", argv[i]);
        fprintf(stderr, "\n");
        return 0;
    }
    pid_t pid = fork();
    if (pid < 0)
        return ein_fail(err, EIN_EIO, "cannot start worker for device %d: %s", d, strerror(errno));
    if (pid == 0) {
        /* The caller's mask, but a worker must always see SIGTERM (how it
         * is stopped) even if the caller holds it back around the run
         * (einrun does). */
        sigset_t m = r->oldmask;
        sigdelset(&m, SIGTERM);
        sigdelset(&m, SIGINT);
        sigdelset(&m, SIGHUP);
        sigdelset(&m, SIGCHLD);
        sigprocmask(SIG_SETMASK, &m, NULL);
        /* Its own session, out of the terminal's process group: a Ctrl-C
         * at the caller's prompt (Python's) must not kill the workers of
         * its open sessions; the coordinator stops them itself (einrun on
         * SIGINT, a session on close or ein_session_cancel). They still
         * die with the coordinator's process: einworker --parent-pid
         * watches it. A worker under a wrapper (gdb, valgrind) stays in
         * the terminal's session, which an interactive wrapper needs. */
        if (!(r->o->wrapper && (r->o->wrapper_device < 0 || r->o->wrapper_device == d)))
            setsid();
        execvp(argv[0], argv);
        _exit(127); /* reported by the coordinator as "could not execute" */
    }
    r->w[d].pid = pid;
    co_guard_add_pid(&r->guard, pid);
    if (r->o->debug_device == d)
        fprintf(stderr, "einsummable: device %d is paused as pid %ld; attach with:  gdb -p %ld  "
                        "(or cuda-gdb -p %ld); it continues once a debugger is attached "
                        "or after: kill -USR1 %ld\n",
                d, (long)pid, (long)pid, (long)pid, (long)pid);
    return 0;
}

/* "w<d>" (a worker's main socket) or "b<d>" (its heartbeat thread) */
static int device_of(const run *r, const char *id, size_t len)
{
    if (len < 2 || len > 8 || (id[0] != 'w' && id[0] != 'b'))
        return -1;
    int d = 0;
    for (size_t i = 1; i < len; i++) {
        if (id[i] < '0' || id[i] > '9')
            return -1;
        d = d * 10 + (id[i] - '0');
    }
    return d < r->ndev ? d : -1;
}

/* Receive one message from the router without waiting: the sender's
 * identity into id[0..*idlen) (at most idcap bytes) and the body into *zm
 * (initialised; the caller closes it), dropping any frames after the
 * body; *extra is set when there were such frames. Returns 1 when a
 * message came, 0 when none was waiting (*zm then untouched), or a
 * negative code. */
static int recv_message(run *r, char *id, size_t idcap, size_t *idlen, zmq_msg_t *zm, int *extra,
                        int *host, ein_error *err)
{
    int more = 0;
    size_t ml = sizeof more;
    *host = -1;
    if (r->o->nhosts > 0) {
        /* From an agent: its identity "n<h>" first (node/nd_agent.h). */
        char aid[16];
        zmq_msg_t am;
        zmq_msg_init(&am);
        if (zmq_msg_recv(&am, r->router, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&am);
            return errno == EAGAIN ? 0 : ein_fail(err, EIN_EIO, "zmq_recv: %s", zmq_strerror(errno));
        }
        size_t an = zmq_msg_size(&am) < sizeof aid - 1 ? zmq_msg_size(&am) : sizeof aid - 1;
        memcpy(aid, zmq_msg_data(&am), an);
        aid[an] = '\0';
        more = zmq_msg_more(&am);
        char *end = aid;
        long h = aid[0] == 'n' ? strtol(aid + 1, &end, 10) : -1;
        zmq_msg_close(&am);
        if (h < 0 || h >= r->o->nhosts || *end || !more) {
            while (more && zmq_getsockopt(r->router, ZMQ_RCVMORE, &more, &ml) == 0 && more) {
                zmq_msg_t junk;
                zmq_msg_init(&junk);
                zmq_msg_recv(&junk, r->router, 0);
                zmq_msg_close(&junk);
            }
            fprintf(stderr, "einsummable: dropped a message from a peer that is not the agent it "
                            "claims to be ('%s')\n", aid);
            return 0;
        }
        *host = (int)h;
    }
    int n = zmq_recv(r->router, id, idcap, r->o->nhosts > 0 ? 0 : ZMQ_DONTWAIT);
    if (n < 0)
        return errno == EAGAIN ? 0 : ein_fail(err, EIN_EIO, "zmq_recv: %s", zmq_strerror(errno));
    zmq_getsockopt(r->router, ZMQ_RCVMORE, &more, &ml);
    zmq_msg_init(zm);
    if (!more || zmq_msg_recv(zm, r->router, 0) < 0) {
        zmq_msg_close(zm);
        return ein_fail(err, EIN_EPROTO, "a peer sent a message without a body");
    }
    /* Drop any further frames of a malformed multipart message. */
    *extra = zmq_msg_more(zm);
    while (zmq_getsockopt(r->router, ZMQ_RCVMORE, &more, &ml) == 0 && more) {
        zmq_msg_t junk;
        zmq_msg_init(&junk);
        zmq_msg_recv(&junk, r->router, 0);
        zmq_msg_close(&junk);
    }
    /* Several hosts: the sender's CURVE key must be that host's agent's
     * (its ZAP User-Id, co_curve.h), whatever identity it claims. */
    if (*host >= 0 && !co_curve_user_ok(zm, *host)) {
        zmq_msg_close(zm);
        fprintf(stderr, "einsummable: dropped a message from a peer that is not the agent of "
                        "host %d it claims to be\n", *host);
        return 0;
    }
    *idlen = (size_t)n < idcap ? (size_t)n : idcap;
    return 1;
}

/* A decoded message from device d's socket `sock` ('w' main, 'b' the
 * heartbeat thread) is one the coordinator accepts: no extra frame, a
 * worker-to-coordinator type, d's own device, only HEARTBEATs from 'b'. */
static int check_message(const ein_msg *m, int d, char sock, int extra, ein_error *err)
{
    if (extra)
        return ein_fail(err, EIN_EPROTO, "unexpected extra frame");
    if (m->type != EIN_MSG_HEARTBEAT && m->type != EIN_MSG_HELLO && m->type != EIN_MSG_DONE &&
        m->type != EIN_MSG_ERROR && m->type != EIN_MSG_CANCELLED)
        return ein_fail(err, EIN_EPROTO, "unexpected %s message", ein_msg_type_name(m->type));
    if (m->device != d)
        return ein_fail(err, EIN_EPROTO, "message claims to come from device %d", m->device);
    if (sock == 'b' && m->type != EIN_MSG_HEARTBEAT)
        return ein_fail(err, EIN_EPROTO, "%s message from the heartbeat thread",
                        ein_msg_type_name(m->type));
    return 0;
}

/* HEARTBEAT: note the instruction; the first one from the main socket of
 * a spawned worker gets it its program. */
static int on_heartbeat(run *r, int d, char sock, const ein_msg *m, ein_error *err)
{
    worker *w = &r->w[d];
    int rc;
    w->instr = m->instr;
    if (w->phase == W_SPAWNED && sock == 'w') {
        ein_msg pm = {.type = EIN_MSG_PROGRAM, .program = r->progs[d]};
        if ((rc = send_to(r, d, &pm, err)) < 0)
            return rc;
        w->phase = W_PROGRAM_SENT;
    }
    return 0;
}

/* HELLO: the worker loaded its program (a manual worker tells its pid). */
static int on_hello(run *r, int d, const ein_msg *m, ein_error *err)
{
    worker *w = &r->w[d];
    if (w->phase != W_PROGRAM_SENT)
        return ein_fail(err, EIN_EPROTO, "device %d (pid %ld) said HELLO out of turn", d, (long)w->pid);
    w->phase = W_LOADED;
    if (r->o->nhosts > 0) {
        /* Not our child (its agent's): its pid names it in reports. */
        w->pid = (pid_t)m->pid;
        if (m->naddrs != 1 || !m->addrs[0].len)
            return ein_fail(err, EIN_EPROTO, "device %d (pid %ld) said HELLO without its UCX "
                            "address", d, (long)w->pid);
        r->addr[d] = m->addrs[0];
        ((ein_msg *)m)->addrs[0] = (ein_bytes){0}; /* taken */
        return 0;
    }
    if (r->o->manual && m->pid > 0) {
        w->pid = (pid_t)m->pid;
        co_guard_add_pid(&r->guard, w->pid);
    }
    return 0;
}

/* DONE: the worker ran its program; its figures go to stats[d] if asked. */
static int on_done(run *r, int d, const ein_msg *m, co_worker_stats *stats, ein_error *err)
{
    worker *w = &r->w[d];
    if (w->phase != W_STARTED)
        return ein_fail(err, EIN_EPROTO, "device %d (pid %ld) said DONE out of turn", d, (long)w->pid);
    w->phase = W_DONE;
    if (stats) {
        stats[d] = (co_worker_stats){.pid = (long)w->pid, .total = m->t_total,
                                     .kernel = m->t_kernel, .copy = m->t_copy, .wait = m->t_wait,
                                     .graphs_captured = m->graphs_captured,
                                     .graphs_launched = m->graphs_launched,
                                     .graphs_failed = m->graphs_failed,
                                     .graphs_short = m->graphs_short,
                                     .device_timed = m->t_device};
        snprintf(stats[d].graph_error, sizeof stats[d].graph_error, "%s", m->graph_error);
    }
    return 0;
}

/* CANCELLED: the worker has stopped the run CANCEL abandoned (or had
 * finished it: then its DONE came first), and so have all its peers. */
static int on_cancelled(run *r, int d, ein_error *err)
{
    worker *w = &r->w[d];
    if (!r->cancelling || (w->phase != W_STARTED && w->phase != W_DONE))
        return ein_fail(err, EIN_EPROTO, "device %d (pid %ld) said CANCELLED out of turn", d,
                        (long)w->pid);
    w->phase = W_CANCELLED;
    return 0;
}

/* ERROR: always fails, EIN_EWORKER naming the instruction that failed. */
static int on_error(run *r, int d, const ein_msg *m, ein_error *err)
{
    worker *w = &r->w[d];
    char where[200];
    int instr = m->instr >= 0 && m->instr < r->progs[d]->ninstrs ? m->instr : w->instr;
    describe_instr(r, d, instr, where, sizeof where);
    return ein_fail(err, EIN_EWORKER, "device %d (pid %ld) failed %s: %s", d, (long)w->pid, where,
                    m->text);
}

/* Handle one waiting message: 1 handled, 0 none waiting, < 0 failure. */
static int handle_message(run *r, co_worker_stats *stats, ein_error *err)
{
    char id[64];
    size_t idlen = 0;
    zmq_msg_t zm;
    int extra = 0, host = -1;
    int rc = recv_message(r, id, sizeof id, &idlen, &zm, &extra, &host, err);
    if (rc <= 0)
        return rc;
    int d = device_of(r, id, idlen);
    if (d < 0 || (r->o->nhosts > 0 && r->o->host_of[d] != host)) {
        zmq_msg_close(&zm);
        if (d >= 0)
            return ein_fail(err, EIN_EPROTO, "the agent of host %d relayed a message of device %d "
                            "(on host %d)", host, d, r->o->host_of[d]);
        return ein_fail(err, EIN_EPROTO, "message from an unknown peer identity");
    }
    ein_msg m;
    rc = ein_msg_decode(zmq_msg_data(&zm), zmq_msg_size(&zm), &m, err);
    int decoded = rc == 0;
    zmq_msg_close(&zm);
    worker *w = &r->w[d];
    if (rc == 0)
        rc = check_message(&m, d, id[0], extra, err);
    if (rc < 0) {
        if (decoded)
            ein_msg_clear(&m);
        return ein_error_prefix(err, "device %d (pid %ld) sent a malformed message", d, (long)w->pid);
    }
    w->last_seen = ein_now_s();
    w->spoke = 1;
    switch (m.type) {
    case EIN_MSG_HEARTBEAT: rc = on_heartbeat(r, d, id[0], &m, err); break;
    case EIN_MSG_HELLO: rc = on_hello(r, d, &m, err); break;
    case EIN_MSG_DONE: rc = on_done(r, d, &m, stats, err); break;
    case EIN_MSG_ERROR: rc = on_error(r, d, &m, err); break;
    case EIN_MSG_CANCELLED: rc = on_cancelled(r, d, err); break;
    default: break;
    }
    ein_msg_clear(&m);
    return rc < 0 ? rc : 1;
}

/* The program a worker's process starts with (its wrapper's, if any). */
static const char *o_wrapper_or_worker(const run *r, int d)
{
    if (r->o->wrapper && (r->o->wrapper_device < 0 || r->o->wrapper_device == d))
        return r->o->wrapper;
    return r->o->worker_path;
}

/* Several hosts: reap exited agents (a worker's death is its agent's
 * ERROR). An agent that ends before the run is over fails it, naming the
 * host; its workers count as exited with it. */
static int reap_agents(run *r, int shutting_down, ein_error *err)
{
    int rc = 0;
    if (!r->agent)
        return 0;
    for (int h = 0; h < r->o->nhosts; h++) {
        int status = 0;
        if (r->agent[h] <= 0 || r->agent_exited[h])
            continue;
        pid_t got = waitpid(r->agent[h], &status, WNOHANG);
        if (got == 0 || (got < 0 && errno != ECHILD))
            continue;
        r->agent_exited[h] = 1;
        for (int d = 0; d < r->ndev; d++)
            if (r->o->host_of[d] == h)
                r->w[d].exited = 1;
        if (rc < 0 || (shutting_down && got > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0))
            continue;
        char devs[256], how[128];
        co_hosts_devices(r->o, h, r->ndev, devs, sizeof devs);
        if (got > 0 && WIFSIGNALED(status))
            snprintf(how, sizeof how, "was killed by signal %d (%s)", WTERMSIG(status),
                     strsignal(WTERMSIG(status)));
        else if (got > 0 && WEXITSTATUS(status) == 127)
            snprintf(how, sizeof how, "exited with status 127 (could not execute %s)",
                     r->o->node_path);
        else
            snprintf(how, sizeof how, "exited with status %d", got > 0 ? WEXITSTATUS(status) : -1);
        if (r->o->hosts && r->o->hosts[h].launch) /* its launcher's status */
            rc = ein_fail(err, EIN_EWORKER, "host %d (%s; devices %s): its agent ended; its "
                          "launcher (%s, pid %ld) %s", h, r->o->hosts[h].addr, devs,
                          r->o->hosts[h].launch[0], (long)r->agent[h], how);
        else if (r->o->hosts)
            rc = ein_fail(err, EIN_EWORKER, "host %d (%s; agent einnode pid %ld, devices %s) %s",
                          h, r->o->hosts[h].addr, (long)r->agent[h], devs, how);
        else
            rc = ein_fail(err, EIN_EWORKER, "host %d (agent einnode pid %ld, devices %s) %s", h,
                          (long)r->agent[h], devs, how);
    }
    return rc;
}

/* Reap exited workers; an exit before DONE is a failure. */
static int reap(run *r, int shutting_down, ein_error *err)
{
    struct signalfd_siginfo si;
    while (r->sfd >= 0 && read(r->sfd, &si, sizeof si) == (ssize_t)sizeof si)
        if (si.ssi_signo == SIGINT || si.ssi_signo == SIGTERM || si.ssi_signo == SIGHUP)
            return ein_fail(err, EIN_EWORKER, "interrupted by signal %u; stopping all workers",
                            si.ssi_signo);
    int rc = 0, status = 0;
    if (r->o->nhosts > 0)
        return reap_agents(r, shutting_down, err);
    /* Each worker by its pid: a library must not reap its host's children. */
    for (int d0 = 0; d0 < r->ndev && !r->o->manual; d0++) {
        pid_t pid = r->w[d0].pid;
        if (pid <= 0 || r->w[d0].exited)
            continue;
        pid_t got = waitpid(pid, &status, WNOHANG);
        if (got == 0 || (got < 0 && errno != ECHILD))
            continue;
        if (got < 0)
            status = 0; /* reaped by the host (SIGCHLD ignored): status unknown */
        for (int d = d0; d <= d0; d++) { /* one pass: `continue` ends it */
            worker *w = &r->w[d];
            w->exited = 1;
            if (rc < 0 || (shutting_down && WIFEXITED(status) && WEXITSTATUS(status) == 0))
                continue;
            char where[200], how[128];
            describe_instr(r, d, w->instr, where, sizeof where);
            if (r->status && r->status[d].error[0]) {
                /* It said why before exiting (see ein_status.h). */
                rc = ein_fail(err, EIN_EWORKER, "device %d (pid %ld) failed %s: %.*s", d, (long)pid,
                              where, EIN_STATUS_ERROR_MAX - 1, r->status[d].error);
                continue;
            }
            if (WIFSIGNALED(status))
                snprintf(how, sizeof how, "was killed by signal %d (%s)", WTERMSIG(status),
                         strsignal(WTERMSIG(status)));
            else if (WEXITSTATUS(status) == 127 && w->phase == W_SPAWNED && !w->spoke)
                snprintf(how, sizeof how, "exited with status 127 (could not execute %s)",
                         o_wrapper_or_worker(r, d));
            else
                snprintf(how, sizeof how, "exited with status %d", WEXITSTATUS(status));
            rc = ein_fail(err, EIN_EWORKER, "device %d (pid %ld) %s %s", d, (long)pid, how, where);
        }
    }
    return rc;
}

/* Several hosts: SIGTERM to every agent (each stops its workers and
 * cleans its host), SIGKILL after 3 s (their guards clean then). */
static void stop_agents(run *r)
{
    if (!r->agent)
        return; /* none started */
    for (int h = 0; h < r->o->nhosts; h++) {
        if (r->agent_fd[h] >= 0) /* a launched agent stops at its end too */
            close(r->agent_fd[h]);
        r->agent_fd[h] = -1;
        if (r->agent[h] > 0 && !r->agent_exited[h]) {
            kill(r->agent[h], SIGTERM);
            kill(r->agent[h], SIGCONT); /* a stopped one ends now, not after 3 s */
        }
    }
    double deadline = ein_now_s() + 3.0;
    for (;;) {
        int alive = 0;
        for (int h = 0; h < r->o->nhosts; h++) {
            if (r->agent[h] <= 0 || r->agent_exited[h])
                continue;
            if (waitpid(r->agent[h], NULL, WNOHANG) == r->agent[h])
                r->agent_exited[h] = 1;
            else if (ein_now_s() > deadline) {
                kill(r->agent[h], SIGKILL);
                waitpid(r->agent[h], NULL, 0);
                r->agent_exited[h] = 1;
            } else
                alive++;
        }
        if (!alive)
            break;
        usleep(10000);
    }
    for (int d = 0; d < r->ndev; d++)
        r->w[d].exited = 1;
}

static void stop_all(run *r)
{
    ein_msg sd = {.type = EIN_MSG_SHUTDOWN};
    for (int d = 0; d < r->ndev; d++)
        if (r->w[d].spoke && !r->w[d].exited)
            send_to(r, d, &sd, NULL);
    if (r->o->nhosts > 0) {
        stop_agents(r);
        return;
    }
    if (r->o->manual) {
        /* Not our children: ask, then make sure. */
        usleep(200000);
        for (int d = 0; d < r->ndev; d++)
            if (r->w[d].pid > 0)
                kill(r->w[d].pid, SIGKILL);
        return;
    }
    for (int d = 0; d < r->ndev; d++)
        if (r->w[d].pid > 0 && !r->w[d].exited)
            kill(r->w[d].pid, SIGTERM);
    double deadline = ein_now_s() + 2.0;
    for (;;) {
        int alive = 0;
        for (int d = 0; d < r->ndev; d++) {
            if (r->w[d].pid <= 0 || r->w[d].exited)
                continue;
            if (waitpid(r->w[d].pid, NULL, WNOHANG) == r->w[d].pid)
                r->w[d].exited = 1;
            else
                alive++;
        }
        if (!alive)
            break;
        if (ein_now_s() > deadline) {
            for (int d = 0; d < r->ndev; d++)
                if (r->w[d].pid > 0 && !r->w[d].exited) {
                    kill(r->w[d].pid, SIGKILL);
                    waitpid(r->w[d].pid, NULL, 0);
                    r->w[d].exited = 1;
                }
            break;
        }
        usleep(10000);
    }
}

static void cleanup(run *r)
{
    if (r->router)
        zmq_close(r->router);
    co_curve_stop(r->curve);
    r->curve = NULL;
    if (r->zctx)
        zmq_ctx_term(r->zctx);
    if (r->sfd >= 0)
        close(r->sfd);
    /* cfd stays open until the session is freed: co_session_cancel may
     * write to it from another thread at any time before that. */
    for (int d = 0; d < r->ndev && r->run_id[0]; d++) {
        char name[160];
        ein_segment_name(name, sizeof name, r->run_id, d);
        shm_unlink(name);
    }
    if (r->run_id[0]) {
        char name[160];
        ein_status_name(name, sizeof name, r->run_id);
        shm_unlink(name);
    }
    if (r->status)
        munmap(r->status, sizeof(ein_status_slot) * (size_t)r->ndev);
    if (r->dir[0]) {
        DIR *dp = opendir(r->dir);
        if (dp) {
            struct dirent *de;
            while ((de = readdir(dp))) {
                if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                    continue;
                char p[600];
                snprintf(p, sizeof p, "%s/%s", r->dir, de->d_name);
                unlink(p);
            }
            closedir(dp);
        }
        rmdir(r->dir);
    }
    if (r->masked)
        sigprocmask(SIG_SETMASK, &r->oldmask, NULL);
    r->masked = 0;
    free(r->w);
    r->w = NULL;
    for (int d = 0; r->addr && d < r->ndev; d++)
        free(r->addr[d].data);
    free(r->addr);
    free(r->agent);
    free(r->agent_fd);
    free(r->agent_exited);
    r->addr = NULL;
    r->agent = NULL;
    r->agent_fd = NULL;
    r->agent_exited = NULL;
    r->router = r->zctx = NULL;
    r->sfd = -1;
    r->status = NULL;
    r->dir[0] = r->run_id[0] = '\0';
}

/* A run that fails because a worker died, or because a message to one could
 * not be sent (it is going away), is best explained by the worker itself:
 * an ERROR it sent before exiting beats its exit status, and its death
 * beats a failed send. Look for either for up to a second. Failures that
 * already carry a worker's own account are left alone. */
/* Several hosts: a worker's failure that is only the consequence of a
 * peer's death (a peer it cannot reach any more) is explained better by
 * that death, which its agent reports as an ERROR saying how the worker
 * ended ("was killed by", "exited with"): look for one for half a second. */
static void explain_by_death(run *r, co_worker_stats *stats, ein_error *err)
{
    double until = ein_now_s() + 0.5;
    for (double left = 0.5; left > 0; left = until - ein_now_s()) {
        zmq_pollitem_t it = {.socket = r->router, .events = ZMQ_POLLIN};
        if (zmq_poll(&it, 1, (long)((left < 0.05 ? left : 0.05) * 1000) + 1) <= 0)
            continue;
        ein_error late = {0};
        if (handle_message(r, stats, &late) < 0 && late.code == EIN_EWORKER &&
            (strstr(late.msg, " was killed by ") || strstr(late.msg, " exited with "))) {
            *err = late;
            return;
        }
    }
}

static void explain_failure(run *r, co_worker_stats *stats, int shutting_down, ein_error *err)
{
    if (err && r->o->nhosts > 0 && strstr(err->msg, ") failed ") &&
        !strstr(err->msg, " was killed by ") && !strstr(err->msg, " exited with "))
        explain_by_death(r, stats, err);
    if (!err || strstr(err->msg, ") failed ") || strstr(err->msg, "malformed"))
        return;
    int have_death = strstr(err->msg, ") was killed") || strstr(err->msg, ") exited with");
    double until = ein_now_s() + 1.0;
    for (double left = 1.0; left > 0; left = until - ein_now_s()) {
        zmq_pollitem_t it = {.socket = r->router, .events = ZMQ_POLLIN};
        if (zmq_poll(&it, 1, (long)((left < 0.05 ? left : 0.05) * 1000) + 1) > 0) {
            ein_error late = {0};
            if (handle_message(r, stats, &late) < 0 && late.code == EIN_EWORKER &&
                strstr(late.msg, ") failed ")) {
                *err = late;
                return;
            }
        }
        ein_error death = {0};
        if (!have_death && reap(r, shutting_down, &death) < 0) {
            *err = death;
            have_death = 1;
        }
    }
}

/* Join the workers' trace files into one Chrome-trace JSON array (a failed
 * run gets a trace too: it shows where each device was). */
static int merge_trace(run *r, ein_error *err)
{
    FILE *out = fopen(r->o->trace_path, "we");
    if (!out)
        return ein_fail(err, EIN_EIO, "cannot write the trace %s: %s", r->o->trace_path,
                        strerror(errno));
    fprintf(out, "[\n");
    int first = 1;
    for (int d = 0; d < r->ndev; d++) {
        fprintf(out, "%s{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, "
                     "\"args\": {\"name\": \"device %d (pid %ld)\"}}",
                first ? "" : ",\n", d, d, (long)r->w[d].pid);
        first = 0;
        char p[600];
        snprintf(p, sizeof p, "%s/trace-%d.json", r->dir, d);
        FILE *in = fopen(p, "re");
        if (!in)
            continue;
        char buf[65536];
        size_t n, total = 0;
        while ((n = fread(buf, 1, sizeof buf, in)) > 0) {
            if (total == 0)
                fputs(",\n", out);
            fwrite(buf, 1, n, out);
            total += n;
        }
        fclose(in);
    }
    fprintf(out, "\n]\n");
    if (fclose(out) != 0)
        return ein_fail(err, EIN_EIO, "cannot write the trace %s", r->o->trace_path);
    return 0;
}


/* Has co_session_cancel asked to cancel the step now running? */
static int cancel_asked(run *r)
{
    uint64_t v;
    if (r->cfd >= 0)
        while (read(r->cfd, &v, sizeof v) == (ssize_t)sizeof v)
            ; /* drain the wake-ups */
    return atomic_load(&r->cancel_gen) == atomic_load(&r->gen);
}

/* Serve the workers until every one is in `phase`: messages (a worker's
 * ERROR first: it explains its exit best), exits, heartbeats, deadline;
 * with `cancellable`, EIN_ECANCELED as soon as co_session_cancel asks
 * (unless every worker got there first). */
static int wait_all(run *r, int phase, int cancellable, co_worker_stats *stats, ein_error *err)
{
    int rc;
    for (;;) {
        zmq_pollitem_t items[3] = {{.socket = r->router, .events = ZMQ_POLLIN}};
        int nitems = 1;
        if (r->sfd >= 0)
            items[nitems++] = (zmq_pollitem_t){.fd = r->sfd, .events = ZMQ_POLLIN};
        if (cancellable && r->cfd >= 0)
            items[nitems++] = (zmq_pollitem_t){.fd = r->cfd, .events = ZMQ_POLLIN};
        if (zmq_poll(items, nitems, 100) < 0 && errno != EINTR)
            return ein_fail(err, EIN_EIO, "zmq_poll: %s", zmq_strerror(errno));
        ein_progress_tick(r->step_pg);
        int got;
        while ((got = handle_message(r, stats, err)) != 0)
            if (got < 0) {
                explain_failure(r, stats, 0, err);
                return got;
            }
        if ((rc = reap(r, 0, err)) < 0) {
            explain_failure(r, stats, 0, err);
            return rc;
        }
        int all = 1;
        for (int d = 0; d < r->ndev; d++)
            all &= r->w[d].phase == phase;
        if (all)
            return 0;
        if (cancellable && cancel_asked(r))
            return ein_fail(err, EIN_ECANCELED, "the run was cancelled");
        double t = ein_now_s();
        for (int d = 0; d < r->ndev; d++) {
            /* Several hosts: a host (or its link) that stops answering. */
            double limit = r->o->nhosts > 0 && r->o->host_timeout > 0 && r->w[d].spoke
                               ? r->o->host_timeout : r->o->worker_timeout;
            if (r->w[d].exited || t - r->w[d].last_seen <= limit)
                continue;
            if (limit < r->o->worker_timeout) {
                /* Where each device of that host was last seen. */
                char where[200], hn[300], all[600] = "";
                int h = r->o->host_of[d];
                for (int e = 0; e < r->ndev; e++) {
                    size_t k = strlen(all);
                    if (r->o->host_of[e] != h || r->w[e].exited || k + 1 >= sizeof all)
                        continue;
                    describe_instr(r, e, r->w[e].instr, where, sizeof where);
                    snprintf(all + k, sizeof all - k, "%sdevice %d %s", k ? "; " : "", e, where);
                }
                co_hosts_name(r->o, h, hn, sizeof hn);
                return ein_fail(err, EIN_EWORKER, "%s stopped answering, or the link to it is "
                                "down: nothing from device %d for %.1f s (limit %.1f s); last "
                                "seen: %s", hn, d, t - r->w[d].last_seen, limit, all);
            }
            /* A worker paused for a debugger, or one the user has not started
             * yet, is not silent until it has spoken once. */
            if (!r->w[d].spoke && (r->o->debug_device == d || r->o->manual))
                continue;
            char where[200];
            describe_instr(r, d, r->w[d].instr, where, sizeof where);
            return ein_fail(err, EIN_EWORKER, "device %d (pid %ld) sent no heartbeat for %.0f s; last seen %s",
                            d, (long)r->w[d].pid, t - r->w[d].last_seen, where);
        }
        if (r->deadline > 0 && t > r->deadline)
            return ein_fail(err, EIN_ETIMEOUT, "the run took longer than %s %.0f s",
                            r->o->timeout_name ? r->o->timeout_name : "its timeout",
                            r->o->timeout);
    }
}

/* The end of a session, in failure or not: workers stopped, trace merged,
 * files removed. Returns rc, or the trace's failure if rc was 0. */
static int finish(run *r, int rc, ein_error *err)
{
    if (r->dead)
        return rc;
    if (rc < 0 && err)
        r->why = *err;
    if (r->w)
        stop_all(r);
    if (r->o->trace_path && r->dir[0]) {
        ein_error terr = {0};
        if (merge_trace(r, &terr) < 0 && rc == 0)
            rc = ein_fail(err, terr.code, "%s", terr.msg);
    }
    cleanup(r);
    co_guard_stop(&r->guard);
    r->dead = 1;
    if (rc < 0 && !r->why.code)
        r->why.code = rc;
    return rc;
}

/* Several hosts: one agent per host; each worker's program goes out on
 * its first heartbeat, relayed by its agent, as on one host. */
static int start_hosts(run *r, ein_error *err)
{
    const co_run_opts *o = r->o;
    if (o->manual || o->wrapper || o->debug_device >= 0 || o->cuda || o->trace_path)
        return ein_fail(err, EIN_EUNSUPPORTED, "a run on several hosts takes no --manual-workers, "
                        "--worker-wrapper, --debug-device, --trace or CUDA devices yet");
    if (!o->node_path || !o->host_of)
        return ein_fail(err, EIN_EINVAL, "a run on several hosts without its agents");
    for (int d = 0; d < r->ndev; d++)
        if (o->host_of[d] < 0 || o->host_of[d] >= o->nhosts)
            return ein_fail(err, EIN_EINVAL, "device %d is on host %d of %d", d, o->host_of[d],
                            o->nhosts);
    if (!(r->agent = calloc((size_t)o->nhosts, sizeof *r->agent)) ||
        !(r->agent_fd = calloc((size_t)o->nhosts, sizeof *r->agent_fd)) ||
        !(r->agent_exited = calloc((size_t)o->nhosts, 1)) ||
        !(r->addr = calloc((size_t)r->ndev, sizeof *r->addr)))
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    for (int d = 0; d < r->ndev; d++) {
        r->w[d].phase = W_SPAWNED;
        r->w[d].instr = -1;
        r->w[d].last_seen = ein_now_s();
    }
    for (int h = 0; h < o->nhosts; h++)
        r->agent_fd[h] = -1;
    for (int h = 0; h < o->nhosts; h++) {
        char env[3][64];
        co_curve_env(r->curve, h, env[0], env[1], env[2]);
        const char *extra[] = {env[0], env[1], env[2], NULL};
        int rc = co_hosts_spawn_agent(o, h, r->ndev, r->endpoint, extra, &r->oldmask,
                                      &r->agent[h], &r->agent_fd[h], err);
        if (rc < 0)
            return rc;
        co_guard_add_pid(&r->guard, r->agent[h]);
    }
    return 0;
}

/* Several hosts: every worker has loaded; tell each the UCX addresses of
 * the devices of other hosts (empty: same host, shared memory). */
static int send_peers(run *r, ein_error *err)
{
    ein_bytes *a = calloc((size_t)r->ndev, sizeof *a);
    int rc = 0;
    if (!a)
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    for (int d = 0; d < r->ndev && rc == 0; d++) {
        for (int p = 0; p < r->ndev; p++)
            a[p] = r->o->host_of[p] != r->o->host_of[d] ? r->addr[p] : (ein_bytes){0};
        ein_msg m = {.type = EIN_MSG_PEERS, .addrs = a, .naddrs = r->ndev};
        rc = send_to(r, d, &m, err);
    }
    free(a);
    return rc;
}

int co_session_start(ein_program *const *progs, int ndev, const co_run_opts *o,
                     co_session **out, ein_error *err)
{
    run *r = calloc(1, sizeof *r);
    if (!r)
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    r->o_copy = *o;
    r->o = &r->o_copy;
    r->progs = progs;
    r->ndev = ndev;
    r->sfd = -1;
    r->cfd = -1;
    atomic_init(&r->gen, 0);
    atomic_init(&r->cancel_gen, (unsigned)-1);
    r->guard = (co_guard){.fd = -1, .pid = -1};
    int rc = 0, zero = 0, one = 1;
    int64_t maxsize = EIN_MSG_MAX_BYTES;
    if (o->handle_signals) {
        sigset_t mask;
        sigemptyset(&mask);
        sigaddset(&mask, SIGCHLD);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGHUP);
        sigprocmask(SIG_BLOCK, &mask, &r->oldmask);
        r->masked = 1;
        if ((r->sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC)) < 0) {
            rc = ein_fail(err, EIN_EIO, "signalfd: %s", strerror(errno));
            goto out;
        }
    } else {
        sigprocmask(SIG_SETMASK, NULL, &r->oldmask);
    }
    if ((r->cfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) {
        rc = ein_fail(err, EIN_EIO, "eventfd: %s", strerror(errno));
        goto out;
    }
    if (!(r->w = calloc((size_t)ndev, sizeof *r->w))) {
        rc = ein_fail(err, EIN_ENOMEM, "out of memory");
        goto out;
    }
    const char *tmp = getenv("TMPDIR");
    tmp = tmp && *tmp ? tmp : "/tmp";
    /* Runs killed with their guard (a cgroup kill) left their files: the
     * pid in every name says whose they were. */
    int swept = co_guard_sweep_stale(tmp);
    if (swept > 0 && o->verbose)
        fprintf(stderr, "einsummable: removed %d run director%s and shared-memory object%s of runs "
                        "that are gone\n", swept, swept == 1 ? "y" : "ies", swept == 1 ? "" : "s");
    snprintf(r->dir, sizeof r->dir, "%s/einrun.%ld.XXXXXX", tmp, (long)getpid());
    if (!mkdtemp(r->dir)) {
        rc = ein_fail(err, EIN_EIO, "cannot create the run directory %s: %s", r->dir, strerror(errno));
        r->dir[0] = '\0';
        goto out;
    }
    snprintf(r->run_id, sizeof r->run_id, "%ld-%s", (long)getpid(), strrchr(r->dir, '.') + 1);
    snprintf(r->endpoint, sizeof r->endpoint, "tcp://%s:*",
             o->hosts ? o->hosts[0].addr : "127.0.0.1");
    if (!o->nhosts)
        snprintf(r->endpoint, sizeof r->endpoint, "ipc://%s/coord.sock", r->dir);
    if ((rc = co_guard_start(&r->guard, r->dir, r->run_id, ndev, o->cleanup_paths, o->ncleanup,
                             err)) < 0)
        goto out;
    if (!(r->zctx = zmq_ctx_new()) || !(r->router = zmq_socket(r->zctx, ZMQ_ROUTER))) {
        rc = ein_fail(err, EIN_EIO, "zmq: %s", zmq_strerror(errno));
        goto out;
    }
    zmq_setsockopt(r->router, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(r->router, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
    zmq_setsockopt(r->router, ZMQ_MAXMSGSIZE, &maxsize, sizeof maxsize);
    /* Several hosts: TCP, which anyone can reach: only this run's agents
     * may speak (co_curve.h). */
    if (o->nhosts > 0 && (rc = co_curve_start(r->zctx, r->router, o->nhosts, &r->curve, err)) < 0)
        goto out;
    if (zmq_bind(r->router, r->endpoint) < 0) {
        rc = ein_fail(err, EIN_EIO, "bind %s: %s", r->endpoint, zmq_strerror(errno));
        goto out;
    }
    if (o->nhosts > 0) {
        size_t elen = sizeof r->endpoint;
        zmq_getsockopt(r->router, ZMQ_LAST_ENDPOINT, r->endpoint, &elen);
        if (o->verbose || o->hosts)
            fprintf(stderr, "einsummable: coordinator at %s, %d hosts\n", r->endpoint, o->nhosts);
    }
    if ((rc = ein_status_create(r->run_id, r->ndev, &r->status, err)) < 0)
        goto out;
    if (o->prepare && (rc = o->prepare(o->prepare_ctx, r->dir, err)) < 0)
        goto out;
    if (o->nhosts > 0) {
        if ((rc = start_hosts(r, err)) < 0)
            goto out;
    } else {
        for (int d = 0; d < ndev; d++)
            if ((rc = spawn(r, d, err)) < 0)
                goto out;
    }
    r->deadline = o->timeout > 0 ? ein_now_s() + o->timeout : 0;
    rc = wait_all(r, W_LOADED, 0, NULL, err);
    if (rc == 0 && o->nhosts > 0)
        rc = send_peers(r, err);
out:
    if (rc < 0) {
        finish(r, rc, err);
        if (r->cfd >= 0)
            close(r->cfd);
        free(r);
        return rc;
    }
    *out = r;
    return 0;
}

/* The step now running was cancelled: CANCEL to every worker, then wait
 * until each has said CANCELLED (a worker says it once it and all its
 * peers have stopped, so that nothing of the abandoned run is in flight
 * when the next START goes out). The session stays usable. */
static int cancel_step(run *r, ein_error *err)
{
    ein_msg cm = {.type = EIN_MSG_CANCEL};
    int rc = 0;
    r->cancelling = 1;
    for (int d = 0; d < r->ndev && rc == 0; d++)
        rc = send_to(r, d, &cm, err);
    if (rc < 0)
        explain_failure(r, NULL, 0, err);
    else
        rc = wait_all(r, W_CANCELLED, 0, NULL, err);
    r->cancelling = 0;
    return rc;
}

int co_session_step(co_session *r, int store, const ein_reload *reload, int nreload,
                    co_worker_stats *stats, double *wall_s, ein_error *err)
{
    if (r->dead)
        return ein_fail(err, EIN_EINVAL, "the workers are gone (%s)",
                        r->why.code ? r->why.msg : "the session was stopped");
    /* From here co_session_cancel cancels this step (and no other). */
    atomic_fetch_add(&r->gen, 1);
    if (cancel_asked(r))
        return ein_fail(err, EIN_ECANCELED, "the run was cancelled");
    /* A barrier between iterations: START goes out only once every worker
     * is DONE (or loaded), so no buffer is rewritten while a peer may still
     * be copying it. */
    ein_msg st = {.type = EIN_MSG_START, .store = store, .reload = (ein_reload *)reload,
                  .nreload = nreload};
    double t0 = ein_now_s();
    if (!r->o->per_run_timeout && r->o->timeout > 0 && !r->deadline)
        r->deadline = t0 + r->o->timeout;
    if (r->o->per_run_timeout)
        r->deadline = r->o->timeout > 0 ? t0 + r->o->timeout : 0;
    int rc = 0;
    for (int d = 0; d < r->ndev && rc == 0; d++) {
        r->w[d].phase = W_STARTED;
        rc = send_to(r, d, &st, err);
    }
    if (rc < 0) {
        explain_failure(r, stats, 0, err);
    } else {
        ein_progress pg;
        ein_progress_begin_after(&pg, r->o->step_progress && ein_progress_wanted(0), "running",
                                 0, r->o->step_progress_after);
        r->step_pg = &pg;
        rc = wait_all(r, W_DONE, 1, stats, err);
        ein_progress_end(&pg);
        r->step_pg = NULL;
    }
    if (rc == EIN_ECANCELED) {
        ein_error cerr = {0};
        int crc = cancel_step(r, &cerr);
        if (crc < 0) {
            if (err)
                *err = cerr;
            return finish(r, crc, err);
        }
        return rc;
    }
    if (rc < 0)
        return finish(r, rc, err);
    r->iter++;
    if (wall_s)
        *wall_s = ein_now_s() - t0;
    return 0;
}

void co_session_cancel(co_session *r)
{
    if (!r)
        return;
    atomic_store(&r->cancel_gen, atomic_load(&r->gen));
    uint64_t one = 1;
    if (r->cfd >= 0 && write(r->cfd, &one, sizeof one) < 0) {
        /* the counter is full: a wake-up is pending anyway */
    }
}

int co_session_stop(co_session *r, ein_error *err)
{
    if (!r)
        return 0;
    int rc = 0;
    if (!r->dead) {
        ein_msg sd = {.type = EIN_MSG_SHUTDOWN};
        for (int d = 0; d < r->ndev; d++)
            send_to(r, d, &sd, NULL);
        double t_end = ein_now_s() + 5.0;
        for (;;) {
            if ((rc = reap(r, 1, err)) < 0) {
                explain_failure(r, NULL, 1, err);
                break;
            }
            int all_exited = 1;
            for (int d = 0; d < r->ndev; d++)
                all_exited &= r->w[d].exited || (r->o->manual && kill(r->w[d].pid, 0) < 0);
            if (all_exited)
                break;
            if (ein_now_s() > t_end) {
                rc = ein_fail(err, EIN_EWORKER, "workers did not exit within 5 s of shutdown");
                break;
            }
            /* Drain what they still say (an ERROR explains a failing exit). */
            zmq_pollitem_t it = {.socket = r->router, .events = ZMQ_POLLIN};
            zmq_poll(&it, 1, 10);
            ein_error late = {0};
            while (handle_message(r, NULL, &late) > 0)
                ;
        }
        rc = finish(r, rc, err);
    }
    if (r->cfd >= 0)
        close(r->cfd);
    free(r);
    return rc;
}

const char *co_session_dir(const co_session *r)
{
    return r->dead ? NULL : r->dir;
}

int co_session_alive(const co_session *r)
{
    return !r->dead;
}

int co_run(ein_program *const *progs, int ndev, const co_run_opts *o,
           co_worker_stats *stats, double *iter_s, ein_error *err)
{
    co_session *s = NULL;
    co_run_opts ro = *o;
    ro.iterations = 0;
    ro.handle_signals = 1;
    ro.per_run_timeout = 0;
    if (!ro.timeout_name)
        ro.timeout_name = "--timeout";
    int rc = co_session_start(progs, ndev, &ro, &s, err);
    for (int i = 0; rc == 0 && i < o->iterations; i++) {
        rc = co_session_step(s, i == o->iterations - 1, NULL, 0, stats, iter_s ? &iter_s[i] : NULL,
                             err);
        ein_progress_step(o->progress, i + 1);
    }
    if (rc == 0)
        return co_session_stop(s, err);
    if (s) {
        ein_error ignored;
        co_session_stop(s, &ignored);
    }
    return rc;
}
