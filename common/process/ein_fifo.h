/* common/process/ein_fifo.h — messages between the processes of one host
 * through named pipes (FIFOs): the channel of READY and CANCELLED between
 * workers (worker/wk_fifo.h) and of START and DONE between the coordinator
 * and its local workers (coordinator/run/co_run.c).
 *
 * A FIFO has one reader, which makes it (mkfifo, 0600, in a run's private
 * directory) and holds it open for reading and writing, so that it never
 * sees an end of file and writers can open it at any time while the reader
 * lives. Writers open it for writing on first use and write each message
 * as one record (a 2-byte little-endian length, then the bytes), at most
 * PIPE_BUF bytes in all: one write(2), atomic, so the records of several
 * writers never interleave, and the messages of one writer arrive in the
 * order sent. The reader's descriptor is pollable (zmq_poll takes it beside
 * a ZeroMQ socket). A message costs one system call and one wake-up of the
 * reader, where ZeroMQ hands it to the sender's I/O thread, then to the
 * receiver's, then wakes the receiver.
 *
 * A reader that is gone: a write fails (EPIPE, no SIGPIPE: the signal is
 * blocked and consumed around the write) or finds no FIFO (ENOENT, ENXIO):
 * the writer is told (1) and the message is dropped; whoever supervises the
 * reader reports it. A full pipe: 2, nothing written.
 *
 * Ownership: ein_fifo_make allocates the reader; ein_fifo_free closes its
 * descriptor, unlinks the FIFO and frees. A writer's descriptor is the
 * caller's to close. Not thread-safe: one thread per reader. Failure: a
 * negative EIN_E* code with `err` filled; nothing is left open or made. */
#ifndef EIN_FIFO_H
#define EIN_FIFO_H

#include <stddef.h>

#include "common/base/ein_error.h"
#include "common/io/ein_wire.h"

typedef struct ein_fifo ein_fifo;

/* The largest message of one record (PIPE_BUF less the length). */
#define EIN_FIFO_MSG_MAX 4094

/* "<dir>/r<device>.fifo": the FIFO of a run's worker `device`, which READY
 * and CANCELLED from its peers and START from the coordinator come
 * through; "<dir>/c.fifo" (device -1): the coordinator's, for DONE.
 * 0, or -1 when it does not fit in cap bytes. */
int ein_fifo_path(char *out, size_t cap, const char *dir, int device);

/* Make the FIFO `path` and open it for reading. EIN_EINVAL when the path is
 * too long, EIN_EIO when the FIFO cannot be made (it exists, or the file
 * system has none). */
int ein_fifo_make(const char *path, ein_fifo **out, ein_error *err);
/* The descriptor to poll for reading. */
int ein_fifo_fd(const ein_fifo *f);
/* The next message written to f, if one has come: 1 with *msg (in f's
 * buffer, valid until the next call) and *len, 0 none, or a negative code
 * (EIN_EPROTO for a malformed record). */
int ein_fifo_next(ein_fifo *f, const void **msg, size_t *len, ein_error *err);
/* Close, unlink the FIFO, free; NULL is fine. */
void ein_fifo_free(ein_fifo *f);

/* Open the FIFO `path` for writing (non-blocking): 0 with *fd, 1 when no
 * reader holds it (ENOENT, ENXIO: the reader is gone or never came), or a
 * negative code (EIN_EINVAL when path is something else than a FIFO). */
int ein_fifo_open_writer(const char *path, int *fd, ein_error *err);
/* Write `len` bytes (1..EIN_FIFO_MSG_MAX) as one record on a writer's fd:
 * 0 written, 1 the reader is gone (EPIPE: the caller closes fd), 2 the pipe
 * is full (nothing written), or a negative code. */
int ein_fifo_write(int fd, const void *buf, size_t len, ein_error *err);
/* Message m (ein_msg_encode) as one record on the writer's descriptor *fd:
 * 0 written; 1 the reader is gone (*fd closed and set to -2); 2 nothing
 * written: m is longer than one record, or the pipe is full; or a negative
 * code. The caller sends what was not written another way. */
int ein_fifo_write_msg(int *fd, const ein_msg *m, ein_error *err);

#endif
