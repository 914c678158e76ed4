/* worker/wk_staged.h — blocks of device memory (GPU) to and from other
 * hosts through pinned host buffers, where the transport cannot read or write
 * device memory itself (wk_xport.h; Debian's UCX has no CUDA support).
 *
 * On the wire every block between hosts is a sequence of tagged messages
 * of WK_STAGED_CHUNK bytes (the last shorter; a block of 0 bytes is one
 * empty message), whatever memory either end keeps it in (wk_xport.h), so a
 * CPU device and a GPU device exchange blocks alike. Here:
 *
 * - wk_staged_send: the block's chunks are copied device -> host into one
 *   pinned buffer of the block's size, each chunk's copy enqueued before
 *   the previous chunk is sent (the copy of chunk i+1 runs while chunk i
 *   goes out), every chunk handed to the network once its copy is
 *   complete. The network may keep a chunk's memory until its send
 *   completes: the buffer counts one reference per chunk and returns to
 *   the pool when the network has released them all (wk_staged_release,
 *   the `done` callback given to net->send).
 * - wk_staged_recv: chunks are received in order into two slots of
 *   WK_STAGED_CHUNK bytes, alternately; each is copied host -> device
 *   (enqueued) while the next is received; a slot is reused only once
 *   its previous copy is complete (ops->wait). Returns once the whole
 *   block is in device memory.
 * - Buffers are reused: the pool keeps every buffer it allocated
 *   (ops->host_alloc: pinned) for the life of the wk_staged, and takes the
 *   smallest free one that is large enough before allocating another.
 *
 * The device side is an ops table (the CUDA backend's: cudaMemcpyAsync on
 * its stream and an event per slot; a CPU memcpy one in the unit test,
 * tests/worker/test_wk_staged.c) and the network side another (wk_xport.c's
 * tagged sends and receives), so all of the above is tested without a GPU
 * or a network.
 *
 * Ownership: wk_staged_new returns an object freed with wk_staged_free,
 * which frees every buffer (call it after the network has completed or
 * cancelled its sends). Functions return 0 or a negative EIN_E* code with
 * err filled (an ops or net failure's own). */
#ifndef WK_STAGED_H
#define WK_STAGED_H

#include <stddef.h>

#include "common/base/ein_error.h"

#define WK_STAGED_CHUNK ((size_t)4 << 20)
enum { WK_STAGED_SLOTS = 2 };

/* The device side. Copies are enqueued in one stream order; `slot`
 * (0 or 1) names the mark recorded after the copy: wait(slot) returns
 * once the last copy enqueued with that slot (and so everything enqueued
 * before it) is complete. */
typedef struct wk_staged_ops {
    void *ctx;
    int (*to_host)(void *ctx, int slot, void *host, const void *dev, size_t n, ein_error *err);
    int (*to_device)(void *ctx, int slot, void *dev, const void *host, size_t n,
                     ein_error *err);
    int (*wait)(void *ctx, int slot, ein_error *err);
    int (*host_alloc)(void *ctx, size_t n, void **p, ein_error *err);
    void (*host_free)(void *ctx, void *p);
} wk_staged_ops;

/* The network side, for one block: send starts sending n bytes at p (the
 * next chunk) and calls done(arg) once p may be reused (possibly before
 * it returns; never if it fails); recv receives the next chunk, n bytes,
 * into p and returns once it is there. */
typedef struct wk_staged_net {
    void *ctx;
    int (*send)(void *ctx, const void *p, size_t n, void (*done)(void *arg), void *arg,
                ein_error *err);
    int (*recv)(void *ctx, void *p, size_t n, ein_error *err);
} wk_staged_net;

typedef struct wk_staged wk_staged;

/* chunk 0: WK_STAGED_CHUNK (tests pass a small one). ops is copied. */
int wk_staged_new(const wk_staged_ops *ops, size_t chunk, wk_staged **out, ein_error *err);
void wk_staged_free(wk_staged *s);

/* How many chunks a block of `bytes` travels as (at least 1), and the
 * size of chunk i. */
size_t wk_staged_nchunks(size_t bytes, size_t chunk);
size_t wk_staged_chunk_len(size_t bytes, size_t chunk, size_t i);

int wk_staged_send(wk_staged *s, const void *dev, size_t bytes, const wk_staged_net *net,
                   ein_error *err);
int wk_staged_recv(wk_staged *s, void *dev, size_t bytes, const wk_staged_net *net,
                   ein_error *err);

/* Buffers allocated so far, and of them held (by sends in flight). */
int wk_staged_buffers(const wk_staged *s, int *held);

#endif
