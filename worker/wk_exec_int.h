/* worker/wk_exec_int.h — the executor's state, shared by wk_exec.c (the
 * instruction loop and its synchronisation), wk_io.c (LOAD/STORE and their
 * staging) and wk_msg.c (one message over a socket, the log); private to
 * the worker. Functions return 0 or a negative EIN_E* code with `err`
 * filled unless said otherwise. */
#ifndef WK_EXEC_INT_H
#define WK_EXEC_INT_H

#include <stdio.h>

#include "common/ir/ein_program.h"
#include "common/process/ein_status.h"
#include "common/io/ein_wire.h"
#include "worker/wk_beat.h"
#include "worker/wk_exec.h"

struct wk_ready_ops;

typedef struct wk {
    const wk_config *cfg;
    wk_backend *be;
    ein_program *prog;
    char *base;                 /* this device's segment */
    void *zctx, *dealer;
    const struct wk_ready_ops *rdy; /* READY and CANCELLED to peers of this host */
    void *pull;                 /* zmq channel: ours, bound */
    void **push;                /* zmq channel: per peer, connected on first use */
    struct wk_fifo *fifo;       /* fifo channel (wk_fifo.h) */
    uint64_t *ready;            /* received READY (peer << 32 | buffer), sorted set */
    int nready, cap_ready;
    /* Per instruction, for a NOTIFY to a peer: the first NOTIFY of the
     * program with its peer and buffer (wk_exec_notify_groups), else -1;
     * and per such first one, 1 once this run has sent that READY. A
     * peer's READY set holds (device, buffer) for the whole run, so a
     * second READY of the same buffer tells the peer nothing: it is not
     * sent (a decode step NOTIFYs one row to each of the projections that
     * read it). NULL: every NOTIFY sends. */
    int *notify_first;
    char *notify_sent;
    char *done;
    int current;                /* instruction being executed, -1 */
    double last_beat;
    double t_kernel, t_copy, t_wait, t_start;
    int shutdown;               /* SHUTDOWN received */
    int iter;                   /* current iteration */
    FILE *trace;                /* Chrome-trace events, or NULL */
    int ntrace;
    ein_status_slot *status;    /* our slot of the run's status page, or NULL */
    /* Graphs (cfg->graphs and a backend that has them), else NULL: */
    int *head, *next;           /* wk_stretch_find's stretches */
    void **graph;               /* per head: its stretch's captured graph */
    char *graph_off;            /* per head: capture failed or skipped, run one by one */
    int ncaptured, nlaunched;
    int nfailed;                /* stretches that could not be captured */
    int nskipped;               /* stretches too short to capture (graph_min) */
    int graph_min;              /* fewest instructions worth a graph */
    char graph_error[EIN_MSG_TEXT_MAX]; /* why the first of them failed */
    wk_pulse pulse;             /* progress, for the heartbeat thread */
    wk_beat *beater;            /* the heartbeat thread (wk_beat.h), or NULL */
    int slow_pending, slow_fired; /* EIN_FAULT slow: the next body is slow */
    int garbage_sent;           /* EIN_FAULT peer-garbage: sent once */
    kn_block *blk;              /* operands of the KERNEL/AGG being run (heap, */
    int cap_blk;                /* not 150 KB of stack), grown to the widest */
    int store_now;              /* this iteration's START asked for the STOREs */
    int entry_now;              /* this iteration's entry point (0: everything) */
    char *reload;               /* per instruction: a LOAD to run again before
                                   this iteration (its START named its input) */
    void *stage;                /* LOAD/STORE staging (stage_get), or NULL */
    size_t stage_bytes;
    int stage_pinned;           /* from be->host_alloc, else malloc */
    /* Cancelling (coordinator CANCEL, see cancel_run): */
    int cancel;                 /* CANCEL received: abandon the run */
    char *peer_cancelled;       /* per device: its CANCELLED has arrived */
    int npeer_cancelled;
    double last_pump;           /* when pump() last looked, for execute() */
    double last_dealer;         /* when pump() last read the coordinator's socket */
    struct wk_xport *xp;        /* cfg->transport: peers on other hosts (wk_xport.h), else NULL */
    /* START and DONE over FIFOs (a run on one host, cfg->control_fifo):
     * START may come through our FIFO (wk_fifo.h) as well as the dealer,
     * DONE goes through the coordinator's FIFO unless the dealer carried
     * something since START (then ZeroMQ, behind it, keeps their order). */
    int coord_fd;               /* the coordinator's FIFO open for writing;
                                   -1 not yet, -2 none (ZeroMQ only) */
    int coord_zmq;              /* the dealer carried a message since START */
    int start_fifo, done_fifo;  /* this iteration's START came, its DONE went,
                                   through a FIFO (the log says) */
    struct wk_staged *xstage;   /* device memory to and from other hosts through pinned
                                   buffers (wk_staged.h), made on first use, else NULL */
} wk;

/* The channel of READY and CANCELLED between the workers of one host
 * (wk_ready.c): one FIFO per receiving worker (wk_fifo.h: a system call
 * and a wake-up per message), or ZeroMQ's PUSH/PULL (wk_config.ready_zmq,
 * EIN_READY=zmq; also where a FIFO cannot be made). Messages to one peer
 * arrive in the order sent. Peers on other hosts use the transport
 * (wk_xport.h). */
/* Fill wk.notify_first and wk.notify_sent for w->prog. */
int wk_exec_notify_groups(wk *w, ein_error *err);

typedef struct wk_ready_ops {
    const char *name;                  /* "fifo", "zmq" */
    int (*open)(struct wk *w, ein_error *err);   /* before HELLO */
    /* Send the encoded message buf[len] to device `peer` (a dead peer's
     * message is dropped: the coordinator reports it). */
    int (*send)(struct wk *w, int peer, const void *buf, size_t len, ein_error *err);
    /* The next message from a peer: 1 (in *m), 0 none, or a negative code. */
    int (*recv)(struct wk *w, ein_msg *m, ein_error *err);
    /* What zmq_poll waits on: a socket, or (socket NULL) a descriptor. */
    void (*poll_on)(struct wk *w, void **socket, int *fd);
    void (*close)(struct wk *w);       /* idempotent */
} wk_ready_ops;

/* A message to the coordinator through the dealer (ZeroMQ): HEARTBEAT,
 * HELLO, ERROR, CANCELLED, DONE (wk_coord_done takes the FIFO where it
 * may). 0 or a negative code. */
int wk_coord_send(wk *w, const ein_msg *m, ein_error *err);
/* DONE: through the coordinator's FIFO when cfg->control_fifo names one
 * and the dealer carried nothing since START, else wk_coord_send. */
int wk_coord_done(wk *w, const ein_msg *m, ein_error *err);

/* Checker (common/base/ein_invariant.h; asserted after each READY is added to
 * wk.ready): 1 if ready[0..nready) is the READY set of worker `self` of
 * ndevices: 0 <= nready <= cap, strictly ascending keys (peer << 32 |
 * buffer), each peer another device in range and each buffer a
 * non-negative int32. Else 0. Allocates nothing; O(nready). */
int wk_ready_set_ok(const uint64_t *ready, int nready, int cap, int ndevices, int self);

/* Choose and open w->rdy (the FIFOs unless cfg->ready_zmq). */
int wk_ready_open(struct wk *w, ein_error *err);
/* Encode `m` and send it to `peer` through w->rdy. */
int wk_ready_send(struct wk *w, int peer, const ein_msg *m, ein_error *err);

/* A line on the worker's log (cfg->log) at `level` (cfg->log_level). */
void wk_log(wk *w, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Encode and send `m` on `sock`. */
int wk_msg_send(void *sock, const ein_msg *m, ein_error *err);
/* Receive one message from `sock` if one is waiting: 1 (in *m), 0 (none),
 * or a negative code (a malformed message names `from`). */
int wk_msg_recv(void *sock, ein_msg *m, const char *from, ein_error *err);

/* The block of buffer `buf` of this device's segment. */
kn_block wk_block_of(wk *w, int buf);
/* Run a LOAD / a STORE instruction (wk_io.c): slab by slab, counted as
 * progress for the heartbeat, through a staging buffer where the device
 * memory is not host memory. */
int wk_io_load(wk *w, const ein_instr *ins, ein_error *err);
int wk_io_store(wk *w, const ein_instr *ins, ein_error *err);
/* Release the staging buffer (end of an iteration, teardown). */
void wk_stage_drop(wk *w);

/* The instruction loop (wk_exec.c), used by the worker's life (wk_main.c). */
void wk_exec_trace_event(wk *w, const char *cat, const char *name, const char *op, double t0,
                         double t1);
/* What a worker hears while it waits (wk_pump.c): send a heartbeat; take
 * the coordinator's and the peers' messages for up to timeout_ms (*started
 * set on a START when started is not NULL); whether READY for `key`
 * ((device << 32) | buffer) has come. */
int wk_exec_beat(wk *w, ein_error *err);
int wk_exec_pump(wk *w, int timeout_ms, int *started, ein_error *err);
int wk_exec_ready_has(const wk *w, uint64_t key);
int wk_exec_run_instr_body(wk *w, const ein_instr *ins, ein_error *err);
int wk_exec_execute(wk *w, ein_error *err);
int wk_exec_cancel_run(wk *w, ein_error *err);

#endif
