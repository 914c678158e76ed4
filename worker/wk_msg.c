/* worker/wk_msg.c — one message over a ZeroMQ socket, the messages to the
 * coordinator (DONE through its FIFO where it may), and the worker's log
 * (wk_exec_int.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <zmq.h>

#include "common/base/ein_clock.h"
#include "common/process/ein_fifo.h"
#include "worker/wk_exec_int.h"

void wk_log(wk *w, int level, const char *fmt, ...)
{
    if (!w->cfg->log || w->cfg->log_level < level)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(w->cfg->log, "%.6f device %d: ", ein_now_s(), w->cfg->device);
    vfprintf(w->cfg->log, fmt, ap);
    fputc('\n', w->cfg->log);
    fflush(w->cfg->log);
    va_end(ap);
}

int wk_msg_send(void *sock, const ein_msg *m, ein_error *err)
{
    void *buf = NULL;
    size_t len = 0;
    int rc = ein_msg_encode(m, &buf, &len, err);
    if (rc < 0)
        return rc;
    if (zmq_send(sock, buf, len, 0) < 0)
        rc = ein_fail(err, EIN_EIO, "cannot send %s: %s", ein_msg_type_name(m->type),
                      zmq_strerror(errno));
    free(buf);
    return rc;
}

/* Receive one message from `sock` if one is waiting (timeout_ms, -1 none). */
int wk_msg_recv(void *sock, ein_msg *m, const char *from, ein_error *err)
{
    zmq_msg_t zm;
    zmq_msg_init(&zm);
    int n = zmq_msg_recv(&zm, sock, ZMQ_DONTWAIT);
    if (n < 0) {
        zmq_msg_close(&zm);
        if (errno == EAGAIN)
            return 0;
        return ein_fail(err, EIN_EIO, "receive from %s: %s", from, zmq_strerror(errno));
    }
    int more = zmq_msg_more(&zm);
    int rc = ein_msg_decode(zmq_msg_data(&zm), zmq_msg_size(&zm), m, err);
    zmq_msg_close(&zm);
    if (rc < 0)
        return ein_error_prefix(err, "malformed message from %s", from);
    if (more)
        return ein_fail(err, EIN_EPROTO, "malformed message from %s: unexpected extra frame", from);
    return 1;
}

int wk_coord_send(wk *w, const ein_msg *m, ein_error *err)
{
    w->coord_zmq = 1;
    return wk_msg_send(w->dealer, m, err);
}

int wk_coord_done(wk *w, const ein_msg *m, ein_error *err)
{
    if (w->coord_fd == -1 && w->cfg->control_fifo) {
        int rc = ein_fifo_open_writer(w->cfg->control_fifo, &w->coord_fd, err);
        if (rc < 0)
            return rc;
        if (rc == 1) {
            w->coord_fd = -2; /* no coordinator FIFO: ZeroMQ from now on */
            wk_log(w, 1, "no coordinator FIFO %s: DONE through ZeroMQ", w->cfg->control_fifo);
        }
    }
    w->done_fifo = 0;
    if (w->coord_fd < 0 || w->coord_zmq)
        return wk_coord_send(w, m, err);
    /* Too long for one record, a full pipe or a coordinator gone: ZeroMQ
     * (which reports the last). */
    int rc = ein_fifo_write_msg(&w->coord_fd, m, err);
    if (rc < 0)
        return rc;
    w->done_fifo = rc == 0;
    return rc == 0 ? 0 : wk_coord_send(w, m, err);
}
