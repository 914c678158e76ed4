/* common/process/ein_status.h — names of a run's shared-memory objects, and the
 * status page through which the coordinator learns what a worker was doing
 * when it died.
 *
 * The coordinator creates the status page ("/ein-<run_id>-status", one
 * 64-byte slot per device, every slot -1) before it starts any worker and
 * removes it at the end. Each worker maps it and stores the instruction it
 * is about to execute in its slot, so that even after SIGKILL the
 * coordinator can name the exact instruction; heartbeats carry the same
 * information but only every half second. A worker that fails also leaves
 * its message there. The page is advisory: a worker
 * that cannot map it runs all the same. */
#ifndef EIN_STATUS_H
#define EIN_STATUS_H

#include <stddef.h>
#include <stdint.h>

#define EIN_STATUS_ERROR_MAX 504

typedef struct ein_status_slot {
    volatile int32_t instr;     /* executing, or -1 (written by the worker) */
    volatile int32_t iteration;
    /* A failing worker's message, written before it exits: the coordinator
     * reads it when it reaps the worker, whether or not the ERROR message
     * sent over ZeroMQ arrived first. */
    char error[EIN_STATUS_ERROR_MAX];
} ein_status_slot;

/* "/ein-<run_id>-<device>": a device's buffer segment. */
void ein_segment_name(char *buf, size_t len, const char *run_id, int device);
/* "/ein-<run_id>-status". */
void ein_status_name(char *buf, size_t len, const char *run_id);

struct ein_error;
/* Create the status page of `ndev` slots for run_id (exclusively: an
 * existing page is an error), every slot -1 with no message, and map it
 * into *out. The caller owns the mapping (munmap of ndev slots) and the
 * name (shm_unlink at the end of the run). 0, or EIN_EIO naming the page. */
int ein_status_create(const char *run_id, int ndev, ein_status_slot **out,
                      struct ein_error *err);

#endif
