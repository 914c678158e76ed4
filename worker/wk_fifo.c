/* worker/wk_fifo.c — messages between the workers of one host through a
 * FIFO per receiving device (wk_fifo.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "worker/wk_fifo.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PATH_CAP 4096
#define BUF_CAP 65536 /* >= PIPE_BUF: a whole record always fits after compaction */

struct wk_fifo {
    char dir[PATH_CAP];
    char own[PATH_CAP];     /* our FIFO's path, unlinked at free */
    int fd;                 /* ours, read and write */
    int ndevices;
    int *peer_fd;           /* per device: its FIFO open for writing, or -1 */
    unsigned char buf[BUF_CAP];
    size_t head, tail;      /* unread bytes buf[head..tail) */
};

static int fifo_path(char *out, size_t cap, const char *dir, int device)
{
    int n = snprintf(out, cap, "%s/r%d.fifo", dir, device);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

int wk_fifo_open(const char *dir, int device, int ndevices, wk_fifo **out, ein_error *err)
{
    *out = NULL;
    if (!dir || device < 0 || ndevices < 1 || device >= ndevices)
        return ein_fail(err, EIN_EINVAL, "FIFO of device %d of %d", device, ndevices);
    wk_fifo *f = calloc(1, sizeof *f);
    if (!f)
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    f->fd = -1;
    f->ndevices = ndevices;
    if (!(f->peer_fd = malloc((size_t)ndevices * sizeof *f->peer_fd))) {
        free(f);
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    }
    for (int d = 0; d < ndevices; d++)
        f->peer_fd[d] = -1;
    if (strlen(dir) >= sizeof f->dir || fifo_path(f->own, sizeof f->own, dir, device) < 0) {
        wk_fifo_free(f);
        return ein_fail(err, EIN_EINVAL, "FIFO path in %s: too long", dir);
    }
    strcpy(f->dir, dir);
    if (mkfifo(f->own, 0600) < 0) {
        int e = errno;
        f->own[0] = '\0'; /* not ours: never unlinked */
        wk_fifo_free(f);
        return ein_fail(err, EIN_EIO, "mkfifo %s/r%d.fifo: %s", dir, device, strerror(e));
    }
    /* Read and write (Linux): never an end of file, never ENXIO for peers. */
    if ((f->fd = open(f->own, O_RDWR | O_NONBLOCK | O_CLOEXEC)) < 0) {
        int e = errno;
        wk_fifo_free(f);
        return ein_fail(err, EIN_EIO, "open %s/r%d.fifo: %s", dir, device, strerror(e));
    }
    *out = f;
    return 0;
}

int wk_fifo_fd(const wk_fifo *f)
{
    return f->fd;
}

/* write(2) with SIGPIPE blocked, and consumed when the write raised it. */
static ssize_t write_nopipe(int fd, const void *buf, size_t len, int *e)
{
    sigset_t pipe_set, old;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    int pending_before = 0;
    sigset_t pend;
    if (sigpending(&pend) == 0)
        pending_before = sigismember(&pend, SIGPIPE) == 1;
    ssize_t n = write(fd, buf, len);
    *e = n < 0 ? errno : 0;
    if (n < 0 && *e == EPIPE && !pending_before) {
        struct timespec zero = {0, 0};
        while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR)
            ;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return n;
}

int wk_fifo_send(wk_fifo *f, int peer, const void *buf, size_t len, ein_error *err)
{
    if (peer < 0 || peer >= f->ndevices)
        return ein_fail(err, EIN_EINVAL, "FIFO message to device %d of %d", peer, f->ndevices);
    if (len < 1 || len > WK_FIFO_MSG_MAX)
        return ein_fail(err, EIN_EINVAL, "FIFO message of %zu bytes (1 to %d)", len,
                        WK_FIFO_MSG_MAX);
    if (f->peer_fd[peer] < 0) {
        char path[PATH_CAP];
        if (fifo_path(path, sizeof path, f->dir, peer) < 0)
            return ein_fail(err, EIN_EINVAL, "FIFO path in %s: too long", f->dir);
        int fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0) {
            if (errno == ENOENT || errno == ENXIO)
                return 1; /* the peer is gone (or never came): dropped */
            return ein_fail(err, EIN_EIO, "open device %d's FIFO: %s", peer, strerror(errno));
        }
        f->peer_fd[peer] = fd;
    }
    unsigned char rec[PIPE_BUF];
    rec[0] = (unsigned char)(len & 0xff);
    rec[1] = (unsigned char)(len >> 8);
    memcpy(rec + 2, buf, len);
    int e;
    for (;;) {
        ssize_t n = write_nopipe(f->peer_fd[peer], rec, len + 2, &e);
        if (n == (ssize_t)(len + 2))
            return 0;
        if (n >= 0) /* cannot happen: a write of at most PIPE_BUF bytes is whole */
            return ein_fail(err, EIN_EIO, "short write to device %d's FIFO", peer);
        if (e != EINTR)
            break;
    }
    if (e == EAGAIN)
        return 2;
    if (e == EPIPE) {
        close(f->peer_fd[peer]);
        f->peer_fd[peer] = -1;
        return 1;
    }
    return ein_fail(err, EIN_EIO, "write to device %d's FIFO: %s", peer, strerror(e));
}

int wk_fifo_recv(wk_fifo *f, const void **msg, size_t *len, ein_error *err)
{
    for (;;) {
        size_t have = f->tail - f->head;
        if (have >= 2) {
            size_t n = f->buf[f->head] | (size_t)f->buf[f->head + 1] << 8;
            if (n < 1 || n > WK_FIFO_MSG_MAX)
                return ein_fail(err, EIN_EPROTO, "a FIFO record of %zu bytes (1 to %d)", n,
                                WK_FIFO_MSG_MAX);
            if (have >= n + 2) {
                *msg = f->buf + f->head + 2;
                *len = n;
                f->head += n + 2;
                return 1;
            }
        }
        if (f->head > 0) { /* compact: room for at least one whole record */
            memmove(f->buf, f->buf + f->head, have);
            f->head = 0;
            f->tail = have;
        }
        ssize_t r = read(f->fd, f->buf + f->tail, sizeof f->buf - f->tail);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (r < 0)
            return ein_fail(err, EIN_EIO, "read from the FIFO: %s", strerror(errno));
        if (r == 0)
            return 0; /* no writer at all (cannot happen: we hold one) */
        f->tail += (size_t)r;
    }
}

void wk_fifo_free(wk_fifo *f)
{
    if (!f)
        return;
    if (f->fd >= 0)
        close(f->fd);
    if (f->own[0])
        unlink(f->own);
    for (int d = 0; f->peer_fd && d < f->ndevices; d++)
        if (f->peer_fd[d] >= 0)
            close(f->peer_fd[d]);
    free(f->peer_fd);
    free(f);
}
