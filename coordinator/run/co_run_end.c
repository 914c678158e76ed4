/* coordinator/run/co_run_end.c — the end of workers and agents: reaping,
 * stopping, cleaning up, explaining a failure, merging the traces
 * (co_run_int.h). */
#include "coordinator/run/co_run_int.h"

/* The program a worker's process starts with (its wrapper's, if any). */
static const char *o_wrapper_or_worker(const run *r, int d)
{
    if (r->o->sess.wrapper && (r->o->sess.wrapper_device < 0 || r->o->sess.wrapper_device == d))
        return r->o->sess.wrapper;
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
int co_run_reap(run *r, int shutting_down, ein_error *err)
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
    for (int d0 = 0; d0 < r->ndev && !r->o->sess.manual; d0++) {
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
            co_run_describe_instr(r, d, w->instr, where, sizeof where);
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
            /* Its process group (it called setsid; not yet reaped, so the
             * id is still its own): a launch command's children too (a
             * script that runs ssh). Its workers have their own sessions. */
            if (kill(-r->agent[h], SIGTERM) < 0)
                kill(r->agent[h], SIGTERM);
            kill(-r->agent[h], SIGCONT); /* a stopped one ends now, not after 3 s */
            kill(r->agent[h], SIGCONT);
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
                kill(-r->agent[h], SIGKILL);
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

void co_run_stop_all(run *r)
{
    ein_msg sd = {.type = EIN_MSG_SHUTDOWN};
    for (int d = 0; d < r->ndev; d++)
        if (r->w[d].spoke && !r->w[d].exited)
            co_run_send_to(r, d, &sd, NULL);
    if (r->o->nhosts > 0) {
        stop_agents(r);
        return;
    }
    if (r->o->sess.manual) {
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

void co_run_cleanup(run *r)
{
    if (r->router)
        zmq_close(r->router);
    co_curve_stop(r->curve);
    r->curve = NULL;
    if (r->zctx)
        zmq_ctx_term(r->zctx);
    if (r->sfd >= 0)
        close(r->sfd);
    for (int d = 0; r->w && d < r->ndev; d++)
        if (r->w[d].fifo_fd >= 0)
            close(r->w[d].fifo_fd);
    ein_fifo_free(r->ctl); /* unlinks c.fifo before the directory goes */
    r->ctl = NULL;
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
    free(r->host_heard);
    r->host_heard = NULL;
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
        if (co_run_handle_message(r, stats, &late) < 0 && late.code == EIN_EWORKER &&
            (strstr(late.msg, " was killed by ") || strstr(late.msg, " exited with ")) &&
            !strstr(late.msg, "cannot reach device")) {
            *err = late;
            return;
        }
    }
}

void co_run_explain_failure(run *r, co_worker_stats *stats, int shutting_down, ein_error *err)
{
    if (err && r->o->nhosts > 0 && strstr(err->msg, ") failed ") &&
        ((!strstr(err->msg, " was killed by ") && !strstr(err->msg, " exited with ")) ||
         strstr(err->msg, "cannot reach device"))) /* a worker that exited because a
                                                       peer died: that death explains it */
        explain_by_death(r, stats, err);
    if (!err || strstr(err->msg, ") failed ") || strstr(err->msg, "malformed"))
        return;
    int have_death = strstr(err->msg, ") was killed") || strstr(err->msg, ") exited with");
    double until = ein_now_s() + 1.0;
    for (double left = 1.0; left > 0; left = until - ein_now_s()) {
        zmq_pollitem_t it = {.socket = r->router, .events = ZMQ_POLLIN};
        if (zmq_poll(&it, 1, (long)((left < 0.05 ? left : 0.05) * 1000) + 1) > 0) {
            ein_error late = {0};
            if (co_run_handle_message(r, stats, &late) < 0 && late.code == EIN_EWORKER &&
                strstr(late.msg, ") failed ")) {
                *err = late;
                return;
            }
        }
        ein_error death = {0};
        if (!have_death && co_run_reap(r, shutting_down, &death) < 0) {
            *err = death;
            have_death = 1;
        }
    }
}

/* Join the workers' trace files into one Chrome-trace JSON array (a failed
 * run gets a trace too: it shows where each device was). */
int co_run_merge_trace(run *r, ein_error *err)
{
    FILE *out = fopen(r->o->sess.trace_path, "we");
    if (!out)
        return ein_fail(err, EIN_EIO, "cannot write the trace %s: %s", r->o->sess.trace_path,
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
        return ein_fail(err, EIN_EIO, "cannot write the trace %s", r->o->sess.trace_path);
    return 0;
}
