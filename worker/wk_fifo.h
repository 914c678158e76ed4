/* worker/wk_fifo.h — messages between the workers of one host through a
 * named pipe (FIFO) per receiving device, the channel of READY and
 * CANCELLED between peers (issue 25: a decode step's exchanges), and of
 * START from the coordinator (issue 36).
 *
 * Each worker makes its FIFO "<dir>/r<device>.fifo" (ein_fifo_path) and
 * holds it open for reading; peers open it for writing on first use. The
 * records, their atomicity and order, the wake-up they cost and what a
 * dead reader or a full pipe does are common/process/ein_fifo.h's. The
 * reader's descriptor is polled beside the coordinator's socket, so the
 * waits, the heartbeats and the timeouts stay as they are.
 *
 * Why not a futex in shared memory: a futex cannot be waited on together
 * with the coordinator's socket (a CANCEL or SHUTDOWN must still be heard
 * while a worker waits for a peer), and an eventfd cannot be opened by
 * name by another process; a FIFO is both.
 *
 * A dead peer: wk_fifo_send says so (1) and the message is dropped, as
 * ZeroMQ dropped it: the coordinator's heartbeat and timeout paths report
 * the dead worker. A full pipe: wk_fifo_send returns 2 without writing;
 * the caller reads its own messages, then tries again.
 *
 * Ownership: wk_fifo_open allocates; wk_fifo_free closes every descriptor,
 * unlinks this worker's FIFO and frees. Not thread-safe (the worker's main
 * thread only). Failure: a negative EIN_E* code with `err` filled; nothing
 * is left open or made. */
#ifndef WK_FIFO_H
#define WK_FIFO_H

#include <stddef.h>

#include "common/base/ein_error.h"
#include "common/process/ein_fifo.h"

typedef struct wk_fifo wk_fifo;

/* The largest message of one record (PIPE_BUF less the length). */
#define WK_FIFO_MSG_MAX EIN_FIFO_MSG_MAX

/* Make and open device `device`'s FIFO in `dir` (of ndevices). EIN_EINVAL
 * when the path is too long, EIN_EIO when the FIFO cannot be made. */
int wk_fifo_open(const char *dir, int device, int ndevices, wk_fifo **out, ein_error *err);
/* The descriptor to poll for reading. */
int wk_fifo_fd(const wk_fifo *f);
/* Send `len` bytes (1..WK_FIFO_MSG_MAX) to device `peer`'s FIFO: 0 sent,
 * 1 the peer is gone (dropped), 2 its pipe is full (nothing written), or
 * a negative code. */
int wk_fifo_send(wk_fifo *f, int peer, const void *buf, size_t len, ein_error *err);
/* The next message sent to this device, if one has come: 1 with *msg (in
 * the FIFO's buffer, valid until the next call) and *len, 0 none, or a
 * negative code (EIN_EPROTO for a malformed record). */
int wk_fifo_recv(wk_fifo *f, const void **msg, size_t *len, ein_error *err);
void wk_fifo_free(wk_fifo *f);

#endif
