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

#include "common/ein_error.h"
#include "worker/wk_backend.h"

typedef struct wk_config {
    int device;
    int ndevices;
    const char *run_dir;      /* private directory holding the ipc sockets */
    const char *run_id;       /* names the shared-memory segments */
    const char *coordinator;  /* zmq endpoint of the coordinator's ROUTER */
    double heartbeat_s;       /* interval between heartbeats */
} wk_config;

int wk_worker_main(const wk_config *cfg, wk_backend *be, ein_error *err);

#endif
