/* worker/wk_peer.h — the shared-memory names both device backends use: this
 * device's own object and the table of peers it has mapped.
 *
 * The CPU backend's object is its segment; the CUDA backend's holds the
 * published IPC handle. Either way a device creates its object under a name
 * ("/ein-<run>-<d>") and a peer opens it read-only by that name, once: the
 * table caches what the backend mapped from it.
 *
 * Ownership: the table (wk_peer[npeers]) belongs to the backend; these
 * calls never allocate or free. Failure: a negative EIN_E* code with `err`
 * filled; nothing is left open. */
#ifndef WK_PEER_H
#define WK_PEER_H

#include <stddef.h>

#include "common/base/ein_error.h"

typedef struct wk_peer {
    const void *base;   /* what the backend mapped of the peer, NULL until then */
    size_t bytes;
    void *sync;         /* the backend's own per-peer object (CUDA: the imported
                           cudaEvent_t), or NULL */
} wk_peer;

/* Create this device's object `name` (exclusive, read-write, 0600) and keep
 * the name in own[cap] for the unlink at destroy. On success *fd is open
 * and the caller closes it. */
int wk_shm_create(const char *name, char *own, size_t cap, int *fd, ein_error *err);

/* Start opening peer `peer` of `npeers`: when the table already maps it,
 * fill *base and *bytes and return 1; otherwise open the peer's object
 * `name` read-only into *fd (the caller closes it) and return 0. `what`
 * names the object in the message ("memory", "IPC handle"). */
int wk_peer_lookup(const wk_peer *peers, int npeers, int peer, const char *name,
                   const char *what, const void **base, size_t *bytes, int *fd, ein_error *err);

/* Record what the backend mapped of a peer and hand it to the caller. */
void wk_peer_set(wk_peer *p, const void *base, size_t bytes, const void **base_out,
                 size_t *bytes_out);

#endif
