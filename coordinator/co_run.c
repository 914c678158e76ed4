/* coordinator/co_run.c — worker processes: spawn, dispatch, supervise, clean. */
#include "coordinator/co_run.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "common/ein_wire.h"

enum { W_SPAWNED, W_PROGRAM_SENT, W_LOADED, W_STARTED, W_DONE };

typedef struct worker {
    pid_t pid;
    int phase;
    int instr;          /* last instruction reported */
    double last_seen;
    int exited;
} worker;

typedef struct run {
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
    int failed;
} run;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* "instruction 17 (KERNEL, operator 'y')", or "startup" before any. */
static void describe_instr(const run *r, int d, int instr, char *buf, size_t len)
{
    if (instr < 0 || instr >= r->progs[d]->ninstrs) {
        snprintf(buf, len, "%s", r->w[d].phase >= W_STARTED ? "between instructions" : "startup");
        return;
    }
    const ein_instr *ins = &r->progs[d]->instrs[instr];
    snprintf(buf, len, "instruction %d (%s, operator '%s')", instr,
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
    if (zmq_send(r->router, id, strlen(id), ZMQ_SNDMORE) < 0 ||
        zmq_send(r->router, buf, len, 0) < 0)
        rc = ein_fail(err, EIN_EWORKER, "device %d (pid %ld): cannot send %s: %s", d,
                      (long)r->w[d].pid, ein_msg_type_name(m->type), zmq_strerror(errno));
    free(buf);
    return rc;
}

static int spawn(run *r, int d, ein_error *err)
{
    char dev[16], nd[16], ppid[32];
    snprintf(dev, sizeof dev, "%d", d);
    snprintf(nd, sizeof nd, "%d", r->ndev);
    snprintf(ppid, sizeof ppid, "%ld", (long)getpid());
    pid_t pid = fork();
    if (pid < 0)
        return ein_fail(err, EIN_EIO, "cannot start worker for device %d: %s", d, strerror(errno));
    if (pid == 0) {
        sigprocmask(SIG_SETMASK, &r->oldmask, NULL);
        char *argv[] = {(char *)r->o->worker_path, "--device", dev, "--ndevices", nd,
                        "--run-dir", r->dir, "--run-id", r->run_id, "--coordinator",
                        r->endpoint, "--parent-pid", ppid, NULL};
        execv(r->o->worker_path, argv);
        fprintf(stderr, "einrun: cannot execute %s: %s\n", r->o->worker_path, strerror(errno));
        _exit(127);
    }
    r->w[d].pid = pid;
    r->w[d].phase = W_SPAWNED;
    r->w[d].instr = -1;
    r->w[d].last_seen = now_s();
    return 0;
}

static int device_of(const run *r, const char *id, size_t len)
{
    if (len < 2 || len > 8 || id[0] != 'w')
        return -1;
    int d = 0;
    for (size_t i = 1; i < len; i++) {
        if (id[i] < '0' || id[i] > '9')
            return -1;
        d = d * 10 + (id[i] - '0');
    }
    return d < r->ndev ? d : -1;
}

/* Handle one waiting message: 1 handled, 0 none waiting, < 0 failure. */
static int handle_message(run *r, co_worker_stats *stats, ein_error *err)
{
    char id[64];
    int n = zmq_recv(r->router, id, sizeof id, ZMQ_DONTWAIT);
    if (n < 0)
        return errno == EAGAIN ? 0 : ein_fail(err, EIN_EIO, "zmq_recv: %s", zmq_strerror(errno));
    int more = 0;
    size_t ml = sizeof more;
    zmq_getsockopt(r->router, ZMQ_RCVMORE, &more, &ml);
    zmq_msg_t zm;
    zmq_msg_init(&zm);
    if (!more || zmq_msg_recv(&zm, r->router, 0) < 0) {
        zmq_msg_close(&zm);
        return ein_fail(err, EIN_EPROTO, "a peer sent a message without a body");
    }
    /* Drop any further frames of a malformed multipart message. */
    int extra = zmq_msg_more(&zm);
    while (zmq_getsockopt(r->router, ZMQ_RCVMORE, &more, &ml) == 0 && more) {
        zmq_msg_t junk;
        zmq_msg_init(&junk);
        zmq_msg_recv(&junk, r->router, 0);
        zmq_msg_close(&junk);
    }
    int d = device_of(r, id, (size_t)(n < (int)sizeof id ? n : (int)sizeof id));
    if (d < 0) {
        zmq_msg_close(&zm);
        return ein_fail(err, EIN_EPROTO, "message from an unknown peer identity");
    }
    ein_msg m;
    int rc = ein_msg_decode(zmq_msg_data(&zm), zmq_msg_size(&zm), &m, err);
    int decoded = rc == 0;
    zmq_msg_close(&zm);
    worker *w = &r->w[d];
    if (rc == 0 && extra)
        rc = ein_fail(err, EIN_EPROTO, "unexpected extra frame");
    if (rc == 0 && m.type != EIN_MSG_HEARTBEAT && m.type != EIN_MSG_HELLO &&
        m.type != EIN_MSG_DONE && m.type != EIN_MSG_ERROR)
        rc = ein_fail(err, EIN_EPROTO, "unexpected %s message", ein_msg_type_name(m.type));
    if (rc == 0 && m.device != d)
        rc = ein_fail(err, EIN_EPROTO, "message claims to come from device %d", m.device);
    if (rc < 0) {
        if (decoded)
            ein_msg_clear(&m);
        return ein_error_prefix(err, "device %d (pid %ld) sent a malformed message", d, (long)w->pid);
    }
    w->last_seen = now_s();
    switch (m.type) {
    case EIN_MSG_HEARTBEAT:
        w->instr = m.instr;
        if (w->phase == W_SPAWNED) {
            ein_msg pm = {.type = EIN_MSG_PROGRAM, .program = r->progs[d]};
            if ((rc = send_to(r, d, &pm, err)) < 0)
                break;
            w->phase = W_PROGRAM_SENT;
        }
        break;
    case EIN_MSG_HELLO:
        if (w->phase != W_PROGRAM_SENT) {
            rc = ein_fail(err, EIN_EPROTO, "device %d (pid %ld) said HELLO out of turn", d, (long)w->pid);
            break;
        }
        w->phase = W_LOADED;
        int all = 1;
        for (int i = 0; i < r->ndev; i++)
            all &= r->w[i].phase == W_LOADED;
        if (all) {
            ein_msg st = {.type = EIN_MSG_START};
            for (int i = 0; i < r->ndev && rc == 0; i++) {
                rc = send_to(r, i, &st, err);
                r->w[i].phase = W_STARTED;
            }
        }
        break;
    case EIN_MSG_DONE:
        if (w->phase != W_STARTED) {
            rc = ein_fail(err, EIN_EPROTO, "device %d (pid %ld) said DONE out of turn", d, (long)w->pid);
            break;
        }
        w->phase = W_DONE;
        if (stats)
            stats[d] = (co_worker_stats){.pid = (long)w->pid, .total = m.t_total,
                                         .kernel = m.t_kernel, .copy = m.t_copy, .wait = m.t_wait};
        break;
    case EIN_MSG_ERROR: {
        char where[200];
        int instr = m.instr >= 0 && m.instr < r->progs[d]->ninstrs ? m.instr : w->instr;
        describe_instr(r, d, instr, where, sizeof where);
        rc = ein_fail(err, EIN_EWORKER, "device %d (pid %ld) failed in %s: %s", d, (long)w->pid,
                      where, m.text);
        break;
    }
    default:
        break;
    }
    ein_msg_clear(&m);
    return rc < 0 ? rc : 1;
}

/* Reap exited workers; an exit before DONE is a failure. */
static int reap(run *r, int shutting_down, ein_error *err)
{
    struct signalfd_siginfo si;
    while (read(r->sfd, &si, sizeof si) == (ssize_t)sizeof si)
        if (si.ssi_signo == SIGINT || si.ssi_signo == SIGTERM)
            return ein_fail(err, EIN_EWORKER, "interrupted by signal %u; stopping all workers",
                            si.ssi_signo);
    int rc = 0, status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        for (int d = 0; d < r->ndev; d++) {
            worker *w = &r->w[d];
            if (w->pid != pid)
                continue;
            w->exited = 1;
            if (rc < 0 || (shutting_down && WIFEXITED(status) && WEXITSTATUS(status) == 0))
                continue;
            char where[200], how[128];
            describe_instr(r, d, w->instr, where, sizeof where);
            if (WIFSIGNALED(status))
                snprintf(how, sizeof how, "was killed by signal %d (%s)", WTERMSIG(status),
                         strsignal(WTERMSIG(status)));
            else
                snprintf(how, sizeof how, "exited with status %d", WEXITSTATUS(status));
            rc = ein_fail(err, EIN_EWORKER, "device %d (pid %ld) %s during %s", d, (long)pid, how,
                          where);
        }
    }
    return rc;
}

static void stop_all(run *r)
{
    for (int d = 0; d < r->ndev; d++)
        if (r->w[d].pid > 0 && !r->w[d].exited)
            kill(r->w[d].pid, SIGTERM);
    double deadline = now_s() + 2.0;
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
        if (now_s() > deadline) {
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
    if (r->zctx)
        zmq_ctx_term(r->zctx);
    if (r->sfd >= 0)
        close(r->sfd);
    for (int d = 0; d < r->ndev && r->run_id[0]; d++) {
        char name[160];
        snprintf(name, sizeof name, "/ein-%s-%d", r->run_id, d);
        shm_unlink(name);
    }
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
    sigprocmask(SIG_SETMASK, &r->oldmask, NULL);
    free(r->w);
}

int co_run(ein_program *const *progs, int ndev, const co_run_opts *o,
           co_worker_stats *stats, ein_error *err)
{
    run r = {.o = o, .progs = progs, .ndev = ndev, .sfd = -1};
    int rc = 0, zero = 0, one = 1;
    int64_t maxsize = EIN_MSG_MAX_BYTES;
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigprocmask(SIG_BLOCK, &mask, &r.oldmask);
    if (!(r.w = calloc((size_t)ndev, sizeof *r.w))) {
        rc = ein_fail(err, EIN_ENOMEM, "out of memory");
        goto out;
    }
    if ((r.sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC)) < 0) {
        rc = ein_fail(err, EIN_EIO, "signalfd: %s", strerror(errno));
        goto out;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(r.dir, sizeof r.dir, "%s/einrun.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(r.dir)) {
        rc = ein_fail(err, EIN_EIO, "cannot create the run directory %s: %s", r.dir, strerror(errno));
        r.dir[0] = '\0';
        goto out;
    }
    snprintf(r.run_id, sizeof r.run_id, "%ld-%s", (long)getpid(), strrchr(r.dir, '.') + 1);
    snprintf(r.endpoint, sizeof r.endpoint, "ipc://%s/coord.sock", r.dir);
    if (!(r.zctx = zmq_ctx_new()) || !(r.router = zmq_socket(r.zctx, ZMQ_ROUTER))) {
        rc = ein_fail(err, EIN_EIO, "zmq: %s", zmq_strerror(errno));
        goto out;
    }
    zmq_setsockopt(r.router, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(r.router, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
    zmq_setsockopt(r.router, ZMQ_MAXMSGSIZE, &maxsize, sizeof maxsize);
    if (zmq_bind(r.router, r.endpoint) < 0) {
        rc = ein_fail(err, EIN_EIO, "bind %s: %s", r.endpoint, zmq_strerror(errno));
        goto out;
    }
    for (int d = 0; d < ndev; d++)
        if ((rc = spawn(&r, d, err)) < 0)
            goto out;

    double t_start = now_s();
    int shutting_down = 0;
    for (;;) {
        zmq_pollitem_t items[2] = {
            {.socket = r.router, .events = ZMQ_POLLIN},
            {.fd = r.sfd, .events = ZMQ_POLLIN},
        };
        if (zmq_poll(items, 2, 100) < 0 && errno != EINTR) {
            rc = ein_fail(err, EIN_EIO, "zmq_poll: %s", zmq_strerror(errno));
            goto out;
        }
        /* Messages first: a worker's ERROR explains its exit better. */
        int got;
        while ((got = handle_message(&r, stats, err)) != 0)
            if (got < 0) {
                rc = got;
                goto out;
            }
        if ((rc = reap(&r, shutting_down, err)) < 0) {
            /* Give a dying worker's last ERROR a moment to arrive. */
            ein_error late = {0};
            zmq_pollitem_t it = {.socket = r.router, .events = ZMQ_POLLIN};
            if (zmq_poll(&it, 1, 200) > 0 && handle_message(&r, stats, &late) < 0 &&
                late.code == EIN_EWORKER && err)
                *err = late;
            goto out;
        }
        double t = now_s();
        if (!shutting_down) {
            int all_done = 1;
            for (int d = 0; d < ndev; d++)
                all_done &= r.w[d].phase == W_DONE;
            if (all_done) {
                ein_msg sd = {.type = EIN_MSG_SHUTDOWN};
                for (int d = 0; d < ndev; d++)
                    send_to(&r, d, &sd, NULL);
                shutting_down = 1;
                t_start = t;
            }
        } else {
            int all_exited = 1;
            for (int d = 0; d < ndev; d++)
                all_exited &= r.w[d].exited;
            if (all_exited)
                break;
            if (t - t_start > 5.0) {
                rc = ein_fail(err, EIN_EWORKER, "workers did not exit within 5 s of shutdown");
                goto out;
            }
            continue;
        }
        for (int d = 0; d < ndev; d++) {
            if (r.w[d].exited || t - r.w[d].last_seen <= o->worker_timeout)
                continue;
            char where[200];
            describe_instr(&r, d, r.w[d].instr, where, sizeof where);
            rc = ein_fail(err, EIN_EWORKER, "device %d (pid %ld) sent no heartbeat for %.0f s; last seen in %s",
                          d, (long)r.w[d].pid, t - r.w[d].last_seen, where);
            goto out;
        }
        if (o->timeout > 0 && t - t_start > o->timeout) {
            rc = ein_fail(err, EIN_ETIMEOUT, "the run took longer than --timeout %.0f s", o->timeout);
            goto out;
        }
    }
out:
    if (r.w)
        stop_all(&r);
    cleanup(&r);
    return rc;
}
