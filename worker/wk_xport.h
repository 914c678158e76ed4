/* worker/wk_xport.h — blocks between hosts: the transport seam.
 *
 * A run on several hosts (einnode, einrun --fake-hosts) moves a block
 * between devices of different hosts through a transport; devices of one
 * host keep shared memory. A transport is one row of wk_xport_ops (one
 * file: wk_ucx.c "ucx", wk_tcp.c "tcp") and one line of the table in
 * wk_xport.c; the worker picks it by name (einworker --transport NAME,
 * from einrun --transport, einnode --transport). Nothing outside a row's
 * file knows which transport runs.
 *
 *   executor (wk_exec.c)     wk_xport_send/recv (chunks, deadlines, staging)
 *          |                          |
 *          +------ wk_xport ----------+--> ops->send/receive/... of the row
 *
 * A cross-host NOTIFY of buffer B to device D becomes wk_xport_send (the
 * whole block, as (this device, B)), and the matching COPY on D becomes
 * wk_xport_recv into its destination buffer, runnable once ops->arrived
 * says the block (its first message) is there: the arrival is the READY.
 * A CANCELLED to a remote peer is a message too (ops->cancel, seen by
 * ops->cancelled).
 *
 * On the wire a block is ceil(bytes / chunk) messages of one (device,
 * buffer) (at least one; worker/wk_staged.h), received in the order sent,
 * whatever memory either end keeps it in (wk_xport_chunk). Device memory
 * (GPU) that the transport cannot read or write itself
 * (ops->device_memory 0) goes through pinned host buffers:
 * wk_xport_send_staged and wk_xport_recv_staged, with the backend's copies
 * (wk_staged.h).
 *
 * Ordering: a row delivers the messages of one (device, buffer) from one
 * sender in the order they were sent, and the coordinator's barrier
 * between iterations (START only once every device is DONE, and a device
 * is DONE only once its sends completed: ops->flush) keeps iterations
 * apart.
 *
 * Ownership: wk_xport_open returns a handle freed with wk_xport_close
 * (which abandons what is still in flight). Functions return 0 or a
 * negative EIN_E* code with err filled. */
#ifndef WK_XPORT_H
#define WK_XPORT_H

#include <stddef.h>

#include "common/base/ein_error.h"
#include "common/io/ein_wire.h"

/* What a row is opened with. */
typedef struct wk_xport_params {
    int ndevices, device;     /* the run's devices, and this worker's */
    const char *host_address; /* this host's IPv4 address on the route to
                                 the coordinator (einworker --host-address),
                                 or NULL: unknown */
} wk_xport_params;

/* One transport. `x` is the row's own context (from open). Each row
 * follows the rules above; in particular: */
typedef struct wk_xport_ops {
    const char *name;
    int (*open)(const wk_xport_params *p, void **x, ein_error *err);
    void (*close)(void *x);
    /* This worker's address for HELLO (owned by x). */
    void (*address)(const void *x, const void **addr, size_t *len);
    /* PEERS: reach every device with a non-empty address (a remote one). */
    int (*connect)(void *x, const ein_bytes *addrs, int n, ein_error *err);
    /* Is `peer` on another host (reached through this transport)? */
    int (*remote)(const void *x, int peer);
    /* Start sending one message buf[0..len) of (this device, buffer) to
     * peer: the memory must stay unchanged until `done(arg)` runs (from
     * send itself, progress or flush; done may be NULL) and at the latest
     * until flush returns. */
    int (*send)(void *x, int peer, int buffer, const void *buf, size_t len,
                void (*done)(void *arg), void *arg, ein_error *err);
    /* Has peer's message of `buffer` arrived (or begun to)? */
    int (*arrived)(void *x, int peer, int buffer);
    /* Receive peer's next message of `buffer` into buf[0..len); a message
     * of another size is EIN_EPROTO. end > 0: not complete at ein_now_s()
     * end is EIN_ETIMEOUT (err need not be filled: wk_xport_recv says). */
    int (*receive)(void *x, int peer, int buffer, void *buf, size_t len, double end,
                   ein_error *err);
    /* Advance what is in flight (bounded); completed sends' done run.
     * Returns 1 when something progressed. */
    int (*progress)(void *x);
    /* Wait until every send has completed. */
    int (*flush)(void *x, ein_error *err);
    /* CANCELLED to a remote peer; which peer's CANCELLED has come (-1:
     * none); while cancelling, drain drops every block message that has
     * arrived (they belong to the abandoned run). */
    int (*cancel)(void *x, int peer, ein_error *err);
    int (*cancelled)(void *x);
    int (*drain)(void *x, ein_error *err);
    /* 1 when the row reads and writes device (CUDA) memory itself. */
    int (*device_memory)(const void *x);
} wk_xport_ops;

typedef struct wk_xport {
    const wk_xport_ops *ops;
    void *x;
    int me;
} wk_xport;

/* The rows, and the names of all, comma-separated ("ucx, tcp"). */
const wk_xport_ops *wk_xport_find(const char *name);
const char *wk_xport_names(void);

/* Open row `name` (unknown: EIN_EINVAL naming it and the rows). */
int wk_xport_open(const char *name, const wk_xport_params *p, wk_xport **out, ein_error *err);
void wk_xport_close(wk_xport *t);
/* Is `peer` on another host? (t may be NULL: one host.) */
int wk_xport_remote(const wk_xport *t, int peer);

/* A whole block, in chunks (host memory, or device memory the row reads
 * itself). The send's memory stays unchanged until ops->flush returns;
 * the receive returns once the block is there, within its deadline. */
int wk_xport_send(wk_xport *t, int peer, int buffer, const void *buf, size_t len,
                  ein_error *err);
int wk_xport_recv(wk_xport *t, int peer, int buffer, void *buf, size_t len, ein_error *err);
/* The same from and into device memory, through s's pinned buffers
 * (wk_staged_send/recv): a staged send's buffer is held until its chunks'
 * sends complete (ops->progress, ops->flush); a staged receive returns
 * once the block is in device memory. s must outlive t's sends (close t
 * first). */
struct wk_staged;
int wk_xport_send_staged(wk_xport *t, int peer, int buffer, struct wk_staged *s,
                         const void *dev, size_t len, ein_error *err);
int wk_xport_recv_staged(wk_xport *t, int peer, int buffer, struct wk_staged *s, void *dev,
                         size_t len, ein_error *err);

/* The size of a block's messages on the wire: WK_STAGED_CHUNK, or
 * $EIN_XPORT_CHUNK bytes (64 to 1 GiB; a test hook: every worker of the
 * run must see the same), read once. */
size_t wk_xport_chunk(void);

/* Deadlines (a link that goes down mid-transfer, which TCP does not report
 * for about 100 s, and which the heartbeats do not see when control and
 * data take different links): the link between hosts of the topology
 * model, its bytes/s (the topology's nic, per device and direction:
 * einworker --link-bw; 0, the default: no deadline) and its one-way
 * latency (latency-inter: --link-latency), for every transport of this
 * process. A receive whose block has begun to arrive must end within
 *
 *     wk_xport_deadline(bytes) = WK_XPORT_MARGIN x (latency + bytes / bytes_per_s)
 *                                + WK_XPORT_SLACK_S
 *
 * — the model's transfer time with room for a link shared by a few
 * transfers at once (the margin), plus four heartbeats (a loaded
 * machine's pauses, the slack) — else it fails with EIN_ETIMEOUT naming
 * the peer device, the bytes, the deadline and the model's time. A 64 MiB
 * block at 125 MB/s (1 Gbit/s) gets 4 x 0.537 s + 2 s = 4.1 s; a 1 MiB one
 * 2.03 s. Only receives: a send waits for its receiver, which may be busy.
 * wk_xport_deadline_for is the formula itself (0 when bytes_per_s is not a
 * positive number; a latency that is not a non-negative number counts as
 * 0). */
enum { WK_XPORT_MARGIN = 4 };
#define WK_XPORT_SLACK_S 2.0
double wk_xport_deadline_for(size_t bytes, double bytes_per_s, double latency_s);
void wk_xport_set_link(double bytes_per_s, double latency_s);
double wk_xport_deadline(size_t bytes);

#endif
