/* coordinator/co_probe.c — run the GPU probe (co_probe.h). */
#define _GNU_SOURCE /* pipe2 */
#include "coordinator/co_probe.h"

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

#include "common/ein_clock.h"
#include "common/ein_vec.h"

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
    const char *e = getenv("EIN_PROBE_TIMEOUT_S");
    char *end;
    double v = e && *e ? strtod(e, &end) : 0;
    return e && *e && !*end && v > 0 && v < 1e6 ? v : CO_PROBE_TIMEOUT_S;
}

int co_probe_run(const char *worker, char **out, ein_error *err)
{
    int po[2] = {-1, -1}, pe[2] = {-1, -1}, rc = 0, status = 0;
    sink so = {.max = OUT_MAX, .fd = -1}, se = {.max = ERR_MAX, .fd = -1};
    if (pipe2(po, O_CLOEXEC) < 0 || pipe2(pe, O_CLOEXEC) < 0) {
        rc = ein_fail(err, EIN_EIO, "cannot create a pipe: %s", strerror(errno));
        goto done;
    }
    pid_t pid = fork();
    if (pid < 0) {
        rc = ein_fail(err, EIN_EIO, "cannot start %s --probe: %s", worker, strerror(errno));
        goto done;
    }
    if (pid == 0) {
        /* The probe must not outlive einrun; its own group, so that a
         * timeout kills whatever it started too (a wrapper script). */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        setpgid(0, 0);
        dup2(po[1], 1);
        dup2(pe[1], 2);
        char *argv[] = {(char *)worker, "--probe", NULL};
        execvp(worker, argv);
        dprintf(2, "cannot execute: %s\n", strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid); /* also here: no window where kill(-pid) misses it */
    close(po[1]);
    close(pe[1]);
    po[1] = pe[1] = -1;
    so.fd = po[0];
    se.fd = pe[0];
    po[0] = pe[0] = -1;
    double deadline = ein_now_s() + probe_timeout();
    int timed_out = 0, reaped = 0;
    while (!reaped) {
        double left = deadline - ein_now_s();
        if (left <= 0) {
            timed_out = 1;
            break;
        }
        if (so.fd >= 0 || se.fd >= 0) {
            struct pollfd fds[2] = {{.fd = so.fd, .events = POLLIN}, {.fd = se.fd, .events = POLLIN}};
            int r = poll(fds, 2, left > 1 ? 1000 : (int)(left * 1000) + 1);
            if (r < 0 && errno != EINTR) {
                rc = ein_fail(err, EIN_EIO, "poll: %s", strerror(errno));
                break;
            }
            if ((so.fd >= 0 && fds[0].revents && sink_read(&so) < 0) ||
                (se.fd >= 0 && fds[1].revents && sink_read(&se) < 0)) {
                rc = ein_fail(err, EIN_EIO, "cannot read the output of %s --probe", worker);
                break;
            }
            if (so.overflow) {
                rc = ein_fail(err, EIN_EPROTO, "%s --probe printed more than %u MiB; not a probe",
                              worker, OUT_MAX >> 20);
                break;
            }
            if (so.fd >= 0 || se.fd >= 0)
                continue;
        }
        /* Both pipes closed: the probe has exited, or is about to. */
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid)
            reaped = 1;
        else if (w < 0 && errno != EINTR) {
            rc = ein_fail(err, EIN_EIO, "waitpid: %s", strerror(errno));
            break;
        } else
            usleep(10000);
    }
    if (!reaped) {
        kill(-pid, SIGKILL);
        kill(pid, SIGKILL);
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
    }
    if (rc < 0)
        goto done;
    /* The probe's own account: its first line on stderr. */
    char why[512] = "";
    if (se.buf) {
        size_t l = strcspn(se.buf, "\n");
        snprintf(why, sizeof why, ": %.*s", (int)(l < 480 ? l : 480), se.buf);
        if (l == 0)
            why[0] = 0;
    }
    if (timed_out)
        rc = ein_fail(err, EIN_ETIMEOUT, "%s --probe did not finish within %g s%s", worker,
                      probe_timeout(), why);
    else if (WIFSIGNALED(status))
        rc = ein_fail(err, EIN_EDEVICE, "%s --probe was killed by signal %d (%s)%s", worker,
                      WTERMSIG(status), strsignal(WTERMSIG(status)), why);
    else if (WEXITSTATUS(status) != 0)
        rc = ein_fail(err, EIN_EDEVICE, "%s --probe exited with status %d%s", worker,
                      WEXITSTATUS(status), why);
    else if (!so.buf)
        rc = ein_fail(err, EIN_EPROTO, "%s --probe printed nothing", worker);
    else {
        *out = so.buf;
        so.buf = NULL;
    }
done:
    for (int i = 0; i < 2; i++) {
        if (po[i] >= 0)
            close(po[i]);
        if (pe[i] >= 0)
            close(pe[i]);
    }
    if (so.fd >= 0)
        close(so.fd);
    if (se.fd >= 0)
        close(se.fd);
    free(so.buf);
    free(se.buf);
    return rc;
}
