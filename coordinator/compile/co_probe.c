/* coordinator/compile/co_probe.c — run the GPU probe (co_probe.h). */
#define _GNU_SOURCE /* pipe2 */
#include "coordinator/compile/co_probe.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/base/ein_clock.h"
#include "common/base/ein_knob.h"
#include "common/base/ein_vec.h"

#define OUT_MAX (16u << 20)
#define ERR_MAX 4096

typedef struct sink {
    char *buf;
    size_t len, cap, max;
    int fd;       /* -1 once at end of file */
    int overflow;
} sink;

/* Read what is there; keep at most s->max bytes (stderr: the rest is
 * dropped; stdout: overflow ends the probe). */
static int sink_read(sink *s)
{
    char tmp[65536];
    ssize_t r = read(s->fd, tmp, sizeof tmp);
    if (r < 0)
        return errno == EINTR || errno == EAGAIN ? 0 : -1;
    if (r == 0) {
        close(s->fd);
        s->fd = -1;
        return 0;
    }
    size_t keep = (size_t)r;
    if (s->len + keep > s->max) {
        s->overflow = 1;
        keep = s->max - s->len;
    }
    if (ein_vec_reserve_z(&s->buf, &s->cap, s->len + keep + 1, 1) < 0)
        return -1;
    memcpy(s->buf + s->len, tmp, keep);
    s->len += keep;
    s->buf[s->len] = 0;
    return 0;
}

static double probe_timeout(void)
{
    const char *e = ein_knob_get(EIN_KNOB_PROBE_TIMEOUT_S);
    char *end;
    double v = e && *e ? strtod(e, &end) : 0;
    return e && *e && !*end && v > 0 && v < 1e6 ? v : CO_PROBE_TIMEOUT_S;
}

/* One probe run: the child, the pipe ends this process still holds (-1
 * once closed or handed to a sink) and what the probe printed. */
typedef struct probe {
    const char *worker;
    pid_t pid;
    int po[2], pe[2];
    sink so, se;
    int status, timed_out, reaped;
} probe;

/* Start `worker --probe` in a process group of its own, its stdout and
 * stderr on pipes read by p->so and p->se; 0 or EIN_EIO. */
static int probe_start(probe *p, ein_error *err)
{
    if (pipe2(p->po, O_CLOEXEC) < 0 || pipe2(p->pe, O_CLOEXEC) < 0)
        return ein_fail(err, EIN_EIO, "cannot create a pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0)
        return ein_fail(err, EIN_EIO, "cannot start %s --probe: %s", p->worker, strerror(errno));
    if (pid == 0) {
        /* The probe must not outlive einrun; its own group, so that a
         * timeout kills whatever it started too (a wrapper script). */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        setpgid(0, 0);
        dup2(p->po[1], 1);
        dup2(p->pe[1], 2);
        char *argv[] = {(char *)p->worker, "--probe", NULL};
        execvp(p->worker, argv);
        dprintf(2, "cannot execute: %s\n", strerror(errno));
        _exit(127);
    }
    p->pid = pid;
    setpgid(pid, pid); /* also here: no window where kill(-pid) misses it */
    close(p->po[1]);
    close(p->pe[1]);
    p->po[1] = p->pe[1] = -1;
    p->so.fd = p->po[0];
    p->se.fd = p->pe[0];
    p->po[0] = p->pe[0] = -1;
    return 0;
}

/* Read both pipes until the probe has exited and is reaped (p->reaped) or
 * the timeout passes (p->timed_out); 0, or a negative code on an I/O
 * error or too much output (the probe then still runs). */
static int probe_wait(probe *p, ein_error *err)
{
    sink *so = &p->so, *se = &p->se;
    double deadline = ein_now_s() + probe_timeout();
    while (!p->reaped) {
        double left = deadline - ein_now_s();
        if (left <= 0) {
            p->timed_out = 1;
            return 0;
        }
        if (so->fd >= 0 || se->fd >= 0) {
            struct pollfd fds[2] = {{.fd = so->fd, .events = POLLIN},
                                    {.fd = se->fd, .events = POLLIN}};
            int r = poll(fds, 2, left > 1 ? 1000 : (int)(left * 1000) + 1);
            if (r < 0 && errno != EINTR)
                return ein_fail(err, EIN_EIO, "poll: %s", strerror(errno));
            if ((so->fd >= 0 && fds[0].revents && sink_read(so) < 0) ||
                (se->fd >= 0 && fds[1].revents && sink_read(se) < 0))
                return ein_fail(err, EIN_EIO, "cannot read the output of %s --probe", p->worker);
            if (so->overflow)
                return ein_fail(err, EIN_EPROTO, "%s --probe printed more than %u MiB; not a "
                                "probe", p->worker, OUT_MAX >> 20);
            if (so->fd >= 0 || se->fd >= 0)
                continue;
        }
        /* Both pipes closed: the probe has exited, or is about to. */
        pid_t w = waitpid(p->pid, &p->status, WNOHANG);
        if (w == p->pid)
            p->reaped = 1;
        else if (w < 0 && errno != EINTR)
            return ein_fail(err, EIN_EIO, "waitpid: %s", strerror(errno));
        else
            usleep(10000);
    }
    return 0;
}

/* Kill the probe's group and reap it. */
static void probe_kill(probe *p)
{
    kill(-p->pid, SIGKILL);
    kill(p->pid, SIGKILL);
    while (waitpid(p->pid, &p->status, 0) < 0 && errno == EINTR)
        ;
}

/* How the probe ended, as co_probe_run's result: 0 with its stdout moved
 * to *out, else a negative code with the first line of its stderr. */
static int probe_verdict(probe *p, char **out, ein_error *err)
{
    const char *worker = p->worker;
    char why[512] = "";
    if (p->se.buf) {
        size_t l = strcspn(p->se.buf, "\n");
        snprintf(why, sizeof why, ": %.*s", (int)(l < 480 ? l : 480), p->se.buf);
        if (l == 0)
            why[0] = 0;
    }
    if (p->timed_out)
        return ein_fail(err, EIN_ETIMEOUT, "%s --probe did not finish within %g s%s", worker,
                        probe_timeout(), why);
    if (WIFSIGNALED(p->status))
        return ein_fail(err, EIN_EDEVICE, "%s --probe was killed by signal %d (%s)%s", worker,
                        WTERMSIG(p->status), strsignal(WTERMSIG(p->status)), why);
    if (WEXITSTATUS(p->status) != 0)
        return ein_fail(err, EIN_EDEVICE, "%s --probe exited with status %d%s", worker,
                        WEXITSTATUS(p->status), why);
    if (!p->so.buf)
        return ein_fail(err, EIN_EPROTO, "%s --probe printed nothing", worker);
    *out = p->so.buf;
    p->so.buf = NULL;
    return 0;
}

/* Close every descriptor p still holds and free what it read. */
static void probe_close(probe *p)
{
    for (int i = 0; i < 2; i++) {
        if (p->po[i] >= 0)
            close(p->po[i]);
        if (p->pe[i] >= 0)
            close(p->pe[i]);
    }
    if (p->so.fd >= 0)
        close(p->so.fd);
    if (p->se.fd >= 0)
        close(p->se.fd);
    free(p->so.buf);
    free(p->se.buf);
}

int co_probe_run(const char *worker, char **out, ein_error *err)
{
    probe p = {.worker = worker, .po = {-1, -1}, .pe = {-1, -1},
               .so = {.max = OUT_MAX, .fd = -1}, .se = {.max = ERR_MAX, .fd = -1}};
    int rc = probe_start(&p, err);
    if (rc == 0) {
        rc = probe_wait(&p, err);
        if (!p.reaped)
            probe_kill(&p);
        if (rc == 0)
            rc = probe_verdict(&p, out, err);
    }
    probe_close(&p);
    return rc;
}
