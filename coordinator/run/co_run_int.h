/* coordinator/run/co_run_int.h — a session's state, shared by co_run.c (spawn,
 * dispatch, wait, the co_session_* calls), co_run_msg.c (the workers'
 * messages) and co_run_end.c (reaping, stopping, cleaning, explaining a
 * failure); private to those files. Functions return 0 or a negative EIN_E*
 * code with `err` filled unless said otherwise. */
#ifndef CO_RUN_INT_H
#define CO_RUN_INT_H

#include "coordinator/run/co_run.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <stdatomic.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "common/process/ein_fifo.h"
#include "common/process/ein_progress.h"
#include "common/base/ein_clock.h"
#include "common/process/ein_status.h"
#include "common/io/ein_wire.h"
#include "coordinator/run/co_guard.h"
#include "coordinator/run/co_curve.h"
#include "coordinator/run/co_hosts.h"

enum { W_SPAWNED, W_PROGRAM_SENT, W_LOADED, W_STARTED, W_DONE, W_CANCELLED };

typedef struct worker {
    pid_t pid;
    int spoke;          /* sent at least one message */
    int phase;
    int instr;          /* last instruction reported */
    double last_seen;
    int exited;
    /* START and DONE through FIFOs (a run on one host, run.ctl): */
    int fifo_fd;        /* its FIFO open for writing; -1 not yet, -2 none */
    unsigned zmq_sent;  /* messages sent to it through ZeroMQ */
    unsigned start_seq; /* zmq_sent just after this step's START went through
                           ZeroMQ; 0: it went through the FIFO */
    int zmq_acked;      /* it has read every ZeroMQ message sent to it: a DONE
                           came for a START that was the last of them */
} worker;

struct co_session {
    co_run_opts o_copy;
    const co_run_opts *o;
    ein_program *const *progs;
    int ndev;
    char dir[256];
    char run_id[64];
    char endpoint[320];
    void *zctx, *router;
    int sfd;
    sigset_t oldmask;
    worker *w;
    int iter;           /* iterations started */
    int entry;          /* the next steps' entry point (co_session_set_entry) */
    double deadline;    /* the current wait's end (opts timeout), 0: none */
    ein_status_slot *status;    /* the run's status page (see ein_status.h) */
    co_guard guard;
    int masked;         /* SIGCHLD/SIGINT/SIGTERM/SIGHUP blocked and read from sfd */
    /* Cancelling (co_session_cancel, from any thread or a signal handler):
     * step `gen` is cancelled once cancel_gen equals it; cfd (an eventfd)
     * wakes the poll. */
    atomic_uint gen, cancel_gen;
    int cfd;
    int cancelling;     /* CANCEL sent: DONE and CANCELLED are both in turn */
    int dead;           /* failed or stopped: nothing runs any more */
    ein_progress *step_pg; /* the step's progress line (NULL: none) */
    ein_error why;      /* why it died */
    /* Several hosts (o->nhosts > 0): the agents, and each device's transport
     * address from its HELLO. */
    pid_t *agent;
    int *agent_fd;      /* co_hosts_spawn_agent's keys_fd (-1: none) */
    char *agent_exited;
    char *host_heard;   /* a message of host h has come (it connected) */
    double t_agents;    /* when the agents were started (connect deadlines) */
    ein_bytes *addr;
    co_curve *curve;    /* the agents' keys (co_curve.h) */
    /* One host: our FIFO (common/process/ein_fifo.h), through which the
     * workers send DONE, or NULL (EIN_READY=zmq, or none could be made).
     * A START goes through the worker's FIFO when the worker has read
     * every ZeroMQ message sent to it (worker.zmq_acked), so it never
     * overtakes one; else, and when it does not fit, through ZeroMQ. */
    ein_fifo *ctl;
    char ctl_path[300];
};
typedef struct co_session run;

/* Defined in one file of the module, used in another. */
void co_run_describe_instr(const run *r, int d, int instr, char *buf, size_t len);
int co_run_send_to(run *r, int d, const ein_msg *m, ein_error *err);
int co_run_handle_message(run *r, co_worker_stats *stats, ein_error *err);
/* START to device d: through its FIFO where it may (run.ctl), else
 * co_run_send_to. 0 or a negative code. */
int co_run_send_start(run *r, int d, const ein_msg *m, ein_error *err);
/* Handle one message waiting in run.ctl (a DONE): 1 handled, 0 none
 * waiting (or no FIFO), < 0 failure. */
int co_run_handle_fifo(run *r, co_worker_stats *stats, ein_error *err);
int co_run_reap(run *r, int shutting_down, ein_error *err);
void co_run_stop_all(run *r);
void co_run_cleanup(run *r);
void co_run_explain_failure(run *r, co_worker_stats *stats, int shutting_down, ein_error *err);
int co_run_merge_trace(run *r, ein_error *err);

#endif
