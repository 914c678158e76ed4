/* worker/wk_fifo.c — messages between the workers of one host through a
 * FIFO per receiving device (wk_fifo.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "worker/wk_fifo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/process/ein_fifo.h"

#define PATH_CAP 4096

struct wk_fifo {
    char dir[PATH_CAP];
    ein_fifo *own;          /* ours, read (made and unlinked by ein_fifo) */
    int ndevices;
    int *peer_fd;           /* per device: its FIFO open for writing, or -1 */
};

int wk_fifo_open(const char *dir, int device, int ndevices, wk_fifo **out, ein_error *err)
{
    *out = NULL;
    if (!dir || device < 0 || ndevices < 1 || device >= ndevices)
        return ein_fail(err, EIN_EINVAL, "FIFO of device %d of %d", device, ndevices);
    wk_fifo *f = calloc(1, sizeof *f);
    if (!f)
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    f->ndevices = ndevices;
    if (!(f->peer_fd = malloc((size_t)ndevices * sizeof *f->peer_fd))) {
        free(f);
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    }
    for (int d = 0; d < ndevices; d++)
        f->peer_fd[d] = -1;
    char own[PATH_CAP];
    if (strlen(dir) >= sizeof f->dir || ein_fifo_path(own, sizeof own, dir, device) < 0) {
        wk_fifo_free(f);
        return ein_fail(err, EIN_EINVAL, "FIFO path in %s: too long", dir);
    }
    strcpy(f->dir, dir);
    int rc = ein_fifo_make(own, &f->own, err);
    if (rc < 0) {
        wk_fifo_free(f);
        return rc;
    }
    *out = f;
    return 0;
}

int wk_fifo_fd(const wk_fifo *f)
{
    return ein_fifo_fd(f->own);
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
        if (ein_fifo_path(path, sizeof path, f->dir, peer) < 0)
            return ein_fail(err, EIN_EINVAL, "FIFO path in %s: too long", f->dir);
        int rc = ein_fifo_open_writer(path, &f->peer_fd[peer], err);
        if (rc != 0) {
            f->peer_fd[peer] = -1;
            return rc < 0 ? ein_error_prefix(err, "device %d's FIFO", peer) : 1;
        }
    }
    int rc = ein_fifo_write(f->peer_fd[peer], buf, len, err);
    if (rc == 1) {
        close(f->peer_fd[peer]);
        f->peer_fd[peer] = -1;
    }
    return rc < 0 ? ein_error_prefix(err, "device %d", peer) : rc;
}

int wk_fifo_recv(wk_fifo *f, const void **msg, size_t *len, ein_error *err)
{
    return ein_fifo_next(f->own, msg, len, err);
}

void wk_fifo_free(wk_fifo *f)
{
    if (!f)
        return;
    ein_fifo_free(f->own);
    for (int d = 0; f->peer_fd && d < f->ndevices; d++)
        if (f->peer_fd[d] >= 0)
            close(f->peer_fd[d]);
    free(f->peer_fd);
    free(f);
}
