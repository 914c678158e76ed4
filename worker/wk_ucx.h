/* worker/wk_ucx.h — blocks between hosts: UCX tagged send and receive.
 *
 * A run on several hosts (einnode, einrun --fake-hosts) moves a block
 * between devices of different hosts this way; devices of one host keep
 * shared memory. A cross-host NOTIFY of buffer B to device D becomes
 * wk_ucx_send (a tagged send of the whole block, tag = (this device, B)),
 * and the matching COPY on D becomes wk_ucx_recv into its destination
 * buffer, runnable once wk_ucx_arrived says the block (or, for a large
 * one, its rendezvous request) is there: the arrival is the READY.
 * A CANCELLED to a remote peer is a tagged message too (wk_ucx_send_cancelled,
 * seen by wk_ucx_poll_cancelled).
 *
 * On the wire a block is ceil(bytes / WK_STAGED_CHUNK) tagged messages of
 * one tag (at least one; worker/wk_staged.h), received in the order sent,
 * whatever memory either end keeps it in. Device memory (GPU) that this
 * UCX cannot read or write itself (wk_ucx_cuda 0: Debian's UCX has no CUDA
 * support) goes through pinned host buffers: wk_ucx_send_staged and
 * wk_ucx_recv_staged, with the backend's copies (wk_staged.h).
 *
 * Progress: UCX's wake-ups on small messages are unreliable over TCP (UCX
 * 1.13: missed wake-ups), so nothing here waits on one: every call that
 * waits drives ucp_worker_progress itself in a bounded loop, and the
 * executor calls wk_ucx_progress from its poll loop, which then polls
 * with a short timeout.
 *
 * Ordering: UCX matches messages of one tag from one sender in the order
 * they were sent, and the coordinator's barrier between iterations
 * (START only once every device is DONE, and a device is DONE only once
 * its sends completed: wk_ucx_flush) keeps iterations apart.
 *
 * Ownership: wk_ucx_new returns a context freed with wk_ucx_free (which
 * cancels what is still in flight). Functions return 0 or a negative
 * EIN_E* code with err filled. Without UCX (configure found no
 * libucx-dev) wk_ucx_new fails with EIN_EUNSUPPORTED and saying so. */
#ifndef WK_UCX_H
#define WK_UCX_H

#include <stddef.h>

#include "common/ein_error.h"
#include "common/ein_wire.h"

typedef struct wk_ucx wk_ucx;

int wk_ucx_new(int ndevices, int device, wk_ucx **out, ein_error *err);
/* Deadlines (a link that goes down mid-transfer, which UCX over TCP does
 * not report for about 100 s, and which the heartbeats do not see when
 * control and data take different links): the link between hosts of the
 * topology model, its bytes/s (the topology's nic, per device and
 * direction: einworker --link-bw; 0, the default: no deadline) and its
 * one-way latency (latency-inter: --link-latency), for every context of
 * this process. A receive whose block has begun to arrive must end
 * within
 *
 *     wk_ucx_deadline(bytes) = WK_UCX_MARGIN x (latency + bytes / bytes_per_s)
 *                              + WK_UCX_SLACK_S
 *
 * — the model's transfer time with room for a link shared by a few
 * transfers at once (the margin), plus four heartbeats (a loaded
 * machine's pauses, the slack) — else it is cancelled and fails with
 * EIN_ETIMEOUT naming the peer device, the bytes, the deadline and the
 * model's time. A 64 MiB block at 125 MB/s (1 Gbit/s) gets 4 x 0.537 s +
 * 2 s = 4.1 s; a 1 MiB one 2.03 s. Only receives: a send waits for its
 * receiver, which may be busy. wk_ucx_deadline_for is the formula itself
 * (0 when bytes_per_s is not a positive number; a latency that is not a
 * non-negative number counts as 0). */
enum { WK_UCX_MARGIN = 4 };
#define WK_UCX_SLACK_S 2.0
double wk_ucx_deadline_for(size_t bytes, double bytes_per_s, double latency_s);
void wk_ucx_set_link(double bytes_per_s, double latency_s);
double wk_ucx_deadline(size_t bytes);
void wk_ucx_free(wk_ucx *u);
/* This worker's address, for HELLO (owned by u). */
void wk_ucx_address(const wk_ucx *u, const void **addr, size_t *len);
/* PEERS: connect to every device with a non-empty address (a remote one). */
int wk_ucx_set_peers(wk_ucx *u, const ein_bytes *addrs, int n, ein_error *err);
/* Is `peer` on another host (reached through UCX)? */
int wk_ucx_remote(const wk_ucx *u, int peer);
/* Start sending buf[0..len) as (this device, buffer) to peer; the memory
 * must stay unchanged until wk_ucx_flush returns. */
int wk_ucx_send(wk_ucx *u, int peer, int buffer, const void *buf, size_t len, ein_error *err);
/* The same from and into device memory, through s's pinned buffers
 * (wk_staged_send/recv): a staged send's buffer is held until its chunks'
 * sends complete (wk_ucx_progress, wk_ucx_flush); a staged receive returns
 * once the block is in device memory. The receive's deadline is the
 * block's, as for wk_ucx_recv. s must outlive u's sends (free u first). */
struct wk_staged;
int wk_ucx_send_staged(wk_ucx *u, int peer, int buffer, struct wk_staged *s, const void *dev,
                       size_t len, ein_error *err);
int wk_ucx_recv_staged(wk_ucx *u, int peer, int buffer, struct wk_staged *s, void *dev,
                       size_t len, ein_error *err);
/* The size of a block's messages on the wire: WK_STAGED_CHUNK, or
 * $EIN_UCX_CHUNK bytes (64 to 1 GiB; a test hook: every worker of the run
 * must see the same), read once. */
size_t wk_ucx_chunk(void);
/* 1 when this UCX reads and writes CUDA memory itself (built with CUDA
 * support: ucp_context_query's memory types), so device memory needs no
 * staging. */
int wk_ucx_cuda(const wk_ucx *u);
/* Has peer's block `buffer` arrived (or begun to)? */
int wk_ucx_arrived(wk_ucx *u, int peer, int buffer);
/* Receive peer's block `buffer` into buf[0..len): returns once it is
 * there; a block of another size is an error. */
int wk_ucx_recv(wk_ucx *u, int peer, int buffer, void *buf, size_t len, ein_error *err);
/* Drive UCX a bounded number of steps; completed sends are released.
 * Returns 1 when something progressed. */
int wk_ucx_progress(wk_ucx *u);
/* Wait until every send has completed. */
int wk_ucx_flush(wk_ucx *u, ein_error *err);
/* Something is in flight (a send not yet complete). */
int wk_ucx_busy(const wk_ucx *u);
/* CANCELLED to a remote peer, and: which peer's CANCELLED has come (-1:
 * none). While cancelling, wk_ucx_drain drops every block that arrives
 * (they belong to the abandoned run). */
int wk_ucx_send_cancelled(wk_ucx *u, int peer, ein_error *err);
int wk_ucx_poll_cancelled(wk_ucx *u);
int wk_ucx_drain(wk_ucx *u, ein_error *err);

#endif
