/* worker/wk_peer.c — see wk_peer.h. */
#include "worker/wk_peer.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

int wk_shm_create(const char *name, char *own, size_t cap, int *fd, ein_error *err)
{
    int f = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (f < 0)
        return ein_fail(err, EIN_EIO, "shm_open %s: %s", name, strerror(errno));
    snprintf(own, cap, "%s", name);
    *fd = f;
    return 0;
}

int wk_peer_lookup(const wk_peer *peers, int npeers, int peer, const char *name,
                   const char *what, const void **base, size_t *bytes, int *fd, ein_error *err)
{
    if (peer < 0 || peer >= npeers)
        return ein_fail(err, EIN_EINVAL, "peer %d out of range", peer);
    if (peers[peer].base) {
        *base = peers[peer].base;
        *bytes = peers[peer].bytes;
        return 1;
    }
    int f = shm_open(name, O_RDONLY, 0);
    if (f < 0)
        return ein_fail(err, EIN_EIO, "cannot open device %d's %s %s: %s", peer, what, name,
                        strerror(errno));
    *fd = f;
    return 0;
}

void wk_peer_set(wk_peer *p, const void *base, size_t bytes, const void **base_out,
                 size_t *bytes_out)
{
    p->base = base;
    p->bytes = bytes;
    *base_out = base;
    *bytes_out = bytes;
}
