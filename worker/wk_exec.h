/* worker/wk_exec.h — one worker's life: receive a Program, run it, report.
 *
 * wk_worker_main() connects to the coordinator, announces itself, receives
 * and validates its Program, creates its device segment, binds its peer
 * socket, says HELLO, waits for START, executes the instruction DAG (peer
 * copies wait for the peer's READY message), reports DONE with timings and
 * waits for SHUTDOWN so peers can still copy from its segment. Any failure
 * is sent to the coordinator as an ERROR naming the instruction and
 * operator, then everything is released. Returns 0 after a clean shutdown,
 * a negative code otherwise (the message is in err, and was sent). */
#ifndef WK_EXEC_H
#define WK_EXEC_H

#include <stdio.h>

#include "common/base/ein_error.h"
#include "common/process/ein_status.h"
#include "common/process/ein_worker_args.h"
#include "worker/wk_backend.h"

typedef struct wk_config {
    /* The command line (common/process/ein_worker_args.def, one row an option):
     * device, ndevices, run_dir, run_id, coordinator, parent_pid,
     * iterations (>= 1, or 0: until SHUTDOWN, a session; LOADs run in the
     * first, and again when START names their input; STOREs when START
     * asks; the coordinator starts each one with START once every worker
     * is DONE), log_path, log_level, trace_path, pause, backend, gpu,
     * graphs (capture each local stretch, wk_stretch.h, as a graph in the
     * second iteration and replay it in later ones, if the backend has
     * graphs), instr_timeout_s (the heartbeat thread stops beating for a
     * main thread inside one kernel, or other body that reports no
     * progress, this long; <= 0: never, wk_beat.h), transport (a run on
     * several hosts, einnode: blocks to and from devices of other hosts
     * move over this transport, wk_xport.h; HELLO carries our address and
     * PEERS, before the first START, the peers'; NULL: one host),
     * host_address (this host's address toward the coordinator,
     * wk_xport_params, or NULL), link_bw and link_lat, control_fifo (the
     * coordinator's FIFO, or NULL: wk_coord_send). One value, as
     * einworker decoded it (args), whose fields are also named directly
     * (cfg->device). */
    union {
        ein_worker_args args;
        struct {
#define EIN_WARG(field, kind, flag, scope, metavar, def, help) EIN_WARG_T_##kind field;
#include "common/process/ein_worker_args.def"
#undef EIN_WARG
        };
    };
    double heartbeat_s;       /* interval between heartbeats */
    FILE *log;                /* NULL: no log; else events (level 1) and every
                                 instruction started/finished (level 2) */
    /* Fault injection for the supervision tests (see einworker --help):
     * NULL, "crash", "hang", "exit", "alloc", "garbage", "peer-garbage" or
     * "slow" (the body takes 4 s: a LOAD or STORE making progress, any
     * other instruction in one call);
     * fired when instruction `fault_instr` starts (-1: the first one). */
    const char *fault;
    int fault_instr;
    ein_status_slot *status;  /* this device's slot of the status page, or NULL */
    size_t slab_bytes;        /* LOAD and STORE move this many bytes (about) at a
                                 time, each a unit of progress; 0: 32 MiB */
    int poison;               /* test hook: before each iteration after the first,
                                 fill every buffer no LOAD fills with NaN, so an
                                 instruction run too early reads NaN, not the
                                 previous iteration's (equal) values */
    double spin_s;            /* before blocking for a message (a peer's READY,
                                 the next START), poll without blocking for
                                 this long first: a message due within it is
                                 seen without the wake-up of a blocked
                                 process (tens of microseconds to
                                 milliseconds on a loaded machine); 0: block
                                 at once. EIN_SPIN_US sets it, else einworker's
                                 default_spin (spin where cores are free) */
    int ready_zmq;            /* READY and CANCELLED to peers of this host
                                 through ZeroMQ, not FIFOs (wk_exec_int.h's
                                 wk_ready_ops); EIN_READY=zmq sets it */
} wk_config;

int wk_worker_main(const wk_config *cfg, wk_backend *be, ein_error *err);

#endif
