/* common/process/ein_fifo.c — messages through named pipes (ein_fifo.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "common/process/ein_fifo.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PATH_CAP 4096
#define BUF_CAP 65536 /* >= PIPE_BUF: a whole record always fits after compaction */

_Static_assert(EIN_FIFO_MSG_MAX + 2 <= PIPE_BUF, "a record is one atomic write");

struct ein_fifo {
    char path[PATH_CAP]; /* unlinked at free */
    int fd;              /* read and write */
    unsigned char buf[BUF_CAP];
    size_t head, tail;   /* unread bytes buf[head..tail) */
};

int ein_fifo_path(char *out, size_t cap, const char *dir, int device)
{
    int n = device < 0 ? snprintf(out, cap, "%s/c.fifo", dir)
                       : snprintf(out, cap, "%s/r%d.fifo", dir, device);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

int ein_fifo_make(const char *path, ein_fifo **out, ein_error *err)
{
    *out = NULL;
    if (!path || strlen(path) >= PATH_CAP)
        return ein_fail(err, EIN_EINVAL, "FIFO path: %s", path ? "too long" : "none");
    ein_fifo *f = calloc(1, sizeof *f);
    if (!f)
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    f->fd = -1;
    if (mkfifo(path, 0600) < 0) {
        int e = errno;
        free(f); /* not ours: never unlinked */
        return ein_fail(err, EIN_EIO, "mkfifo %s: %s", path, strerror(e));
    }
    strcpy(f->path, path);
    /* Read and write (Linux): never an end of file, never ENXIO for writers. */
    if ((f->fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC)) < 0) {
        int e = errno;
        ein_fifo_free(f);
        return ein_fail(err, EIN_EIO, "open %s: %s", path, strerror(e));
    }
    *out = f;
    return 0;
}

int ein_fifo_fd(const ein_fifo *f)
{
    return f->fd;
}

int ein_fifo_next(ein_fifo *f, const void **msg, size_t *len, ein_error *err)
{
    for (;;) {
        size_t have = f->tail - f->head;
        if (have >= 2) {
            size_t n = f->buf[f->head] | (size_t)f->buf[f->head + 1] << 8;
            if (n < 1 || n > EIN_FIFO_MSG_MAX)
                return ein_fail(err, EIN_EPROTO, "a FIFO record of %zu bytes (1 to %d)", n,
                                EIN_FIFO_MSG_MAX);
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

void ein_fifo_free(ein_fifo *f)
{
    if (!f)
        return;
    if (f->fd >= 0)
        close(f->fd);
    if (f->path[0])
        unlink(f->path);
    free(f);
}

int ein_fifo_open_writer(const char *path, int *fd, ein_error *err)
{
    *fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (*fd >= 0) {
        struct stat st;
        if (fstat(*fd, &st) == 0 && S_ISFIFO(st.st_mode))
            return 0;
        close(*fd);
        *fd = -1;
        return ein_fail(err, EIN_EINVAL, "%s is not a FIFO", path);
    }
    if (errno == ENOENT || errno == ENXIO)
        return 1; /* the reader is gone (or never came) */
    return ein_fail(err, EIN_EIO, "open %s for writing: %s", path, strerror(errno));
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

int ein_fifo_write(int fd, const void *buf, size_t len, ein_error *err)
{
    if (len < 1 || len > EIN_FIFO_MSG_MAX)
        return ein_fail(err, EIN_EINVAL, "FIFO message of %zu bytes (1 to %d)", len,
                        EIN_FIFO_MSG_MAX);
    unsigned char rec[PIPE_BUF];
    rec[0] = (unsigned char)(len & 0xff);
    rec[1] = (unsigned char)(len >> 8);
    memcpy(rec + 2, buf, len);
    int e;
    for (;;) {
        ssize_t n = write_nopipe(fd, rec, len + 2, &e);
        if (n == (ssize_t)(len + 2))
            return 0;
        if (n >= 0) /* cannot happen: a write of at most PIPE_BUF bytes is whole */
            return ein_fail(err, EIN_EIO, "short write to a FIFO");
        if (e != EINTR)
            break;
    }
    if (e == EAGAIN)
        return 2;
    if (e == EPIPE)
        return 1;
    return ein_fail(err, EIN_EIO, "write to a FIFO: %s", strerror(e));
}

int ein_fifo_write_msg(int *fd, const ein_msg *m, ein_error *err)
{
    void *buf = NULL;
    size_t len = 0;
    int rc = ein_msg_encode(m, &buf, &len, err);
    if (rc < 0)
        return rc;
    rc = len <= EIN_FIFO_MSG_MAX ? ein_fifo_write(*fd, buf, len, err) : 2;
    free(buf);
    if (rc == 1) {
        close(*fd);
        *fd = -2;
    }
    return rc;
}
