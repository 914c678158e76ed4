/* coordinator/run/co_run.c — worker processes: spawn, dispatch, supervise, clean. */
#include "coordinator/run/co_run.h"
#include "common/process/ein_child.h"

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

#include "common/base/ein_knob.h"
#include "common/process/ein_progress.h"
#include "common/base/ein_clock.h"
#include "common/process/ein_status.h"
#include "common/io/ein_wire.h"
#include "coordinator/run/co_guard.h"
#include "coordinator/run/co_curve.h"
#include "coordinator/run/co_hosts.h"
#include "coordinator/run/co_run_int.h"

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

/* Device d's command line (common/process/ein_worker_args.def): the run's part
 * (co_run_worker_args) and d's own; its numbers' text in *store. */
static void worker_argv(run *r, int d, ein_worker_argv *store, char *logp, size_t nlogp,
                        char *trace, size_t ntrace)
{
    const co_run_opts *o = r->o;
    ein_worker_args a;
    co_run_worker_args(o, r->ndev, &a);
    a.device = d;
    a.run_dir = r->dir;
    a.run_id = r->run_id;
    a.coordinator = r->endpoint;
    if (!o->sess.manual)
        a.parent_pid = (long)getpid();
    if (o->sess.log_dir) {
        snprintf(logp, nlogp, "%s/worker-%d.log", o->sess.log_dir, d);
        a.log_path = logp;
    }
    if (o->sess.trace_path) {
        snprintf(trace, ntrace, "%s/trace-%d.json", r->dir, d);
        a.trace_path = trace;
    }
    if (r->ctl)
        a.control_fifo = r->ctl_path;
    a.pause = o->sess.debug_device == d;
    if (a.backend->probed)
        a.gpu = o->sess.gpu_ids ? o->sess.gpu_ids[d] : d;
    ein_worker_args_encode(&a, EIN_WARG_ALL, store);
}

static int spawn(run *r, int d, ein_error *err)
{
    char logp[600], trace[600], wrap[1024];
    char *argv[40 + 1 + 2 * EIN_WARG_COUNT + 1]; /* wrapper, worker, options */
    int n = 0;
    ein_worker_argv wa;
    if (r->o->sess.wrapper && (r->o->sess.wrapper_device < 0 || r->o->sess.wrapper_device == d)) {
        snprintf(wrap, sizeof wrap, "%s", r->o->sess.wrapper);
        if (split_words(wrap, argv, &n, 40) < 0)
            return ein_fail(err, EIN_EINVAL, "the worker wrapper has too many words");
    }
    argv[n++] = (char *)r->o->worker_path;
    worker_argv(r, d, &wa, logp, sizeof logp, trace, sizeof trace);
    for (int i = 0; i < wa.argc; i++)
        argv[n++] = wa.argv[i];
    argv[n] = NULL;
    r->w[d].phase = W_SPAWNED;
    r->w[d].instr = -1;
    r->w[d].last_seen = ein_now_s();
    if (r->o->sess.manual) {
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
        ein_child_signals(&r->oldmask);
        /* Its own session, out of the terminal's process group: a Ctrl-C
         * at the caller's prompt (Python's) must not kill the workers of
         * its open sessions; the coordinator stops them itself (einrun on
         * SIGINT, a session on close or ein_session_cancel). They still
         * die with the coordinator's process: einworker --parent-pid
         * watches it. A worker under a wrapper (gdb, valgrind) stays in
         * the terminal's session, which an interactive wrapper needs. */
        if (!(r->o->sess.wrapper && (r->o->sess.wrapper_device < 0 || r->o->sess.wrapper_device == d)))
            setsid();
        execvp(argv[0], argv);
        _exit(127); /* reported by the coordinator as "could not execute" */
    }
    r->w[d].pid = pid;
    co_guard_add_pid(&r->guard, pid);
    if (r->o->sess.debug_device == d)
        fprintf(stderr, "einsummable: device %d is paused as pid %ld; attach with:  gdb -p %ld  "
                        "(or cuda-gdb -p %ld); it continues once a debugger is attached "
                        "or after: kill -USR1 %ld\n",
                d, (long)pid, (long)pid, (long)pid, (long)pid);
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

/* Several hosts: the first host that has not connected within its limit
 * (co_hosts_connect_limit), reported by name with the address its agent
 * had to reach; 0 if none. */
static int check_connected(run *r, double t, ein_error *err)
{
    const co_run_opts *o = r->o;
    for (int h = 0; h < o->nhosts && r->host_heard; h++) {
        double limit = co_hosts_connect_limit(o, h);
        if (r->host_heard[h] || r->agent_exited[h] || t - r->t_agents <= limit)
            continue;
        char hn[300], devs[256], ifc[64], how[600];
        co_hosts_devices(o, h, r->ndev, devs, sizeof devs);
        if (o->hosts)
            snprintf(hn, sizeof hn, "host %d (%s; devices %s)", h, o->hosts[h].addr, devs);
        else
            snprintf(hn, sizeof hn, "host %d (devices %s)", h, devs);
        co_hosts_interface(r->endpoint, ifc, sizeof ifc);
        if (o->hosts && o->hosts[h].launch)
            snprintf(how, sizeof how, "its launcher (%s, pid %ld) is still running, but neither "
                     "its agent nor a worker of it has reached the coordinator",
                     o->hosts[h].launch[0], (long)r->agent[h]);
        else
            snprintf(how, sizeof how, "its agent (einnode pid %ld) is still running, but no "
                     "worker of it has reached the coordinator", (long)r->agent[h]);
        return ein_fail(err, EIN_ETIMEOUT, "%s did not connect within %.1f s "
                        "(%s): %s at %s%s%s%s; can that host reach it?", hn, limit,
                        o->sess.connect_timeout > 0 ? "the connect timeout" : "the default connect "
                        "timeout; --connect-timeout sets it", how, r->endpoint,
                        ifc[0] ? " (interface " : "", ifc, ifc[0] ? ")" : "");
    }
    return 0;
}

/* Serve the workers until every one is in `phase`: messages (a worker's
 * ERROR first: it explains its exit best), exits, heartbeats, deadline;
 * with `cancellable`, EIN_ECANCELED as soon as co_session_cancel asks
 * (unless every worker got there first). */
static int wait_all(run *r, int phase, int cancellable, co_worker_stats *stats, ein_error *err)
{
    int rc;
    for (;;) {
        zmq_pollitem_t items[4] = {{.socket = r->router, .events = ZMQ_POLLIN}};
        int nitems = 1;
        if (r->ctl)
            items[nitems++] = (zmq_pollitem_t){.fd = ein_fifo_fd(r->ctl), .events = ZMQ_POLLIN};
        if (r->sfd >= 0)
            items[nitems++] = (zmq_pollitem_t){.fd = r->sfd, .events = ZMQ_POLLIN};
        if (cancellable && r->cfd >= 0)
            items[nitems++] = (zmq_pollitem_t){.fd = r->cfd, .events = ZMQ_POLLIN};
        if (zmq_poll(items, nitems, 100) < 0 && errno != EINTR)
            return ein_fail(err, EIN_EIO, "zmq_poll: %s", zmq_strerror(errno));
        ein_progress_tick(r->step_pg);
        int got;
        while ((got = co_run_handle_message(r, stats, err)) != 0)
            if (got < 0) {
                co_run_explain_failure(r, stats, 0, err);
                return got;
            }
        while ((got = co_run_handle_fifo(r, stats, err)) != 0)
            if (got < 0) {
                co_run_explain_failure(r, stats, 0, err);
                return got;
            }
        if ((rc = co_run_reap(r, 0, err)) < 0) {
            co_run_explain_failure(r, stats, 0, err);
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
        if (r->o->nhosts > 0 && (rc = check_connected(r, t, err)) < 0)
            return rc;
        for (int d = 0; d < r->ndev; d++) {
            /* Several hosts: a host that has not connected yet is
             * check_connected's. */
            if (r->o->nhosts > 0 && r->host_heard && !r->host_heard[r->o->host_of[d]])
                continue;
            /* Several hosts: a host (or its link) that stops answering. */
            double limit = r->o->nhosts > 0 && r->o->host_timeout > 0 && r->w[d].spoke
                               ? r->o->host_timeout : r->o->sess.worker_timeout;
            if (r->w[d].exited || t - r->w[d].last_seen <= limit)
                continue;
            if (limit < r->o->sess.worker_timeout) {
                /* Where each device of that host was last seen. */
                char where[200], hn[300], all[600] = "";
                int h = r->o->host_of[d];
                for (int e = 0; e < r->ndev; e++) {
                    size_t k = strlen(all);
                    if (r->o->host_of[e] != h || r->w[e].exited || k + 1 >= sizeof all)
                        continue;
                    co_run_describe_instr(r, e, r->w[e].instr, where, sizeof where);
                    snprintf(all + k, sizeof all - k, "%sdevice %d %s", k ? "; " : "", e, where);
                }
                co_hosts_name(r->o, h, hn, sizeof hn);
                return ein_fail(err, EIN_EWORKER, "%s stopped answering, or the link to it is "
                                "down: nothing from device %d for %.1f s (limit %.1f s); last "
                                "seen: %s", hn, d, t - r->w[d].last_seen, limit, all);
            }
            /* A worker paused for a debugger, or one the user has not started
             * yet, is not silent until it has spoken once. */
            if (!r->w[d].spoke && (r->o->sess.debug_device == d || r->o->sess.manual))
                continue;
            char where[200];
            co_run_describe_instr(r, d, r->w[d].instr, where, sizeof where);
            return ein_fail(err, EIN_EWORKER, "device %d (pid %ld) sent no heartbeat for %.0f s; last seen %s",
                            d, (long)r->w[d].pid, t - r->w[d].last_seen, where);
        }
        if (r->deadline > 0 && t > r->deadline)
            return ein_fail(err, EIN_ETIMEOUT, "the run took longer than %s %.0f s",
                            r->o->timeout_name ? r->o->timeout_name : "its timeout",
                            r->o->sess.run_timeout);
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
        co_run_stop_all(r);
    if (r->o->sess.trace_path && r->dir[0]) {
        ein_error terr = {0};
        if (co_run_merge_trace(r, &terr) < 0 && rc == 0)
            rc = ein_fail(err, terr.code, "%s", terr.msg);
    }
    co_run_cleanup(r);
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
    if (o->sess.manual || o->sess.wrapper || o->sess.debug_device >= 0 || o->sess.trace_path)
        return ein_fail(err, EIN_EUNSUPPORTED, "a run on several hosts takes no manual workers, "
                        "worker wrapper, debug device or trace yet");
    if (!o->node_path || !o->host_of)
        return ein_fail(err, EIN_EINVAL, "a run on several hosts without its agents");
    for (int d = 0; d < r->ndev; d++)
        if (o->host_of[d] < 0 || o->host_of[d] >= o->nhosts)
            return ein_fail(err, EIN_EINVAL, "device %d is on host %d of %d", d, o->host_of[d],
                            o->nhosts);
    if (!(r->agent = calloc((size_t)o->nhosts, sizeof *r->agent)) ||
        !(r->agent_fd = calloc((size_t)o->nhosts, sizeof *r->agent_fd)) ||
        !(r->agent_exited = calloc((size_t)o->nhosts, 1)) ||
        !(r->host_heard = calloc((size_t)o->nhosts, 1)) ||
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
        if (rc < 0 && r->agent[h] > 0) {
            /* Started, but the keys could not be handed over: a launcher
             * that failed at once has closed its end. Its exit status says
             * more than EPIPE: wait for it a little (2 s at most). */
            co_guard_add_pid(&r->guard, r->agent[h]);
            ein_error why = *err;
            for (double t0 = ein_now_s(); ein_now_s() - t0 < 2;) {
                if (co_run_reap(r, 0, err) < 0)
                    return err->code;
                if (r->agent_exited[h])
                    break;
                usleep(10000);
            }
            *err = why;
            return rc;
        }
        if (rc < 0)
            return rc;
        co_guard_add_pid(&r->guard, r->agent[h]);
    }
    r->t_agents = ein_now_s();
    return 0;
}

/* Several hosts: every worker has loaded; tell each the transport addresses of
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
        rc = co_run_send_to(r, d, &m, err);
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
    if (o->sess.handle_signals) {
        sigset_t mask;
        ein_run_signals(&mask);
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
    for (int d = 0; d < ndev; d++)
        r->w[d].fifo_fd = -1;
    const char *tmp = ein_knob_get(EIN_KNOB_TMPDIR);
    tmp = tmp && *tmp ? tmp : "/tmp";
    /* Runs killed with their guard (a cgroup kill) left their files: the
     * pid in every name says whose they were. */
    int swept = co_guard_sweep_stale(tmp);
    if (swept > 0 && o->sess.verbose)
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
             o->listen ? o->listen : o->hosts ? o->hosts[0].addr : "127.0.0.1");
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
        char ifc[64];
        co_hosts_interface(r->endpoint, ifc, sizeof ifc);
        if (o->sess.verbose || o->hosts)
            fprintf(stderr, "einsummable: coordinator at %s, interface %s, %d hosts\n",
                    r->endpoint, ifc[0] ? ifc : "?", o->nhosts);
    }
    if ((rc = ein_status_create(r->run_id, r->ndev, &r->status, err)) < 0)
        goto out;
    /* One host: START and DONE through FIFOs where they may (co_run_int.h);
     * EIN_READY=zmq keeps every message in ZeroMQ. */
    const char *ready = ein_knob_get(EIN_KNOB_READY);
    if (!o->nhosts && !(ready && !strcmp(ready, "zmq")) &&
        ein_fifo_path(r->ctl_path, sizeof r->ctl_path, r->dir, -1) == 0 &&
        ein_fifo_make(r->ctl_path, &r->ctl, NULL) < 0)
        r->ctl = NULL; /* a file system without FIFOs: ZeroMQ */
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
    r->deadline = o->sess.run_timeout > 0 ? ein_now_s() + o->sess.run_timeout : 0;
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
        rc = co_run_send_to(r, d, &cm, err);
    if (rc < 0)
        co_run_explain_failure(r, NULL, 0, err);
    else
        rc = wait_all(r, W_CANCELLED, 0, NULL, err);
    r->cancelling = 0;
    return rc;
}

void co_session_set_entry(co_session *r, int entry)
{
    r->entry = entry;
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
                  .nreload = nreload, .entry = r->entry};
    double t0 = ein_now_s();
    if (!r->o->per_run_timeout && r->o->sess.run_timeout > 0 && !r->deadline)
        r->deadline = t0 + r->o->sess.run_timeout;
    if (r->o->per_run_timeout)
        r->deadline = r->o->sess.run_timeout > 0 ? t0 + r->o->sess.run_timeout : 0;
    int rc = 0;
    for (int d = 0; d < r->ndev && rc == 0; d++) {
        r->w[d].phase = W_STARTED;
        rc = co_run_send_start(r, d, &st, err);
    }
    if (rc < 0) {
        co_run_explain_failure(r, stats, 0, err);
    } else {
        ein_progress pg;
        ein_progress_begin_after(&pg, r->o->sess.progress && ein_progress_wanted(0), "running",
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
            co_run_send_to(r, d, &sd, NULL);
        double t_end = ein_now_s() + 5.0;
        for (;;) {
            if ((rc = co_run_reap(r, 1, err)) < 0) {
                co_run_explain_failure(r, NULL, 1, err);
                break;
            }
            int all_exited = 1;
            for (int d = 0; d < r->ndev; d++)
                all_exited &= r->w[d].exited || (r->o->sess.manual && kill(r->w[d].pid, 0) < 0);
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
            while (co_run_handle_message(r, NULL, &late) > 0)
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
    ro.sess.handle_signals = 1;
    ro.per_run_timeout = 0;
    if (!ro.timeout_name)
        ro.timeout_name = "the run timeout";
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
