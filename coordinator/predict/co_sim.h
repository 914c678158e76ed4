/* coordinator/predict/co_sim.h — predict one iteration of a lowered plan: its time,
 * each device's compute / communication / idle time, the critical path and
 * each device's peak memory.
 *
 * co_sim_run replays the per-device Programs (co_lower.h) the way the
 * workers run them (worker/wk_exec.c), so overlap is what the runtime
 * really gets:
 *  - a device runs one instruction at a time; when free it scans its
 *    instructions onward from the last one it ran and starts the first
 *    runnable one (dependencies done; a COPY also needs the peer's READY);
 *    at the end of a sweep it takes in the READY messages that arrived,
 *    starts a new sweep from its first unfinished instruction if the sweep
 *    ran anything, else waits for the next message;
 *  - a NOTIFY costs its sender `overhead` + `notify`; its READY reaches
 *    the peer `latency` after the NOTIFY ends;
 *  - LOAD and STORE take no time: a steady-state iteration (einrun
 *    --iterations) loads inputs only in the first one and stores only in
 *    the last;
 *  - an instruction costs the calibration's `overhead`, then its work: a
 *    KERNEL max(FLOPs / (peak x eff), bytes / hbm) for gemm and attention
 *    (a gemm with the calibration's `gemm-operands` rate instead costs
 *    FLOPs / (peak x eff) + its two operands' bytes / that rate: a CPU
 *    BLAS packs both operands, so thin GEMMs run slower),
 *    bytes / (hbm x eff) for every other kernel and for AGG, SLICE and
 *    CONCAT (bytes read + written); a COPY is a flow along the topology's
 *    route (xp_topo_route: the resources xp_sim uses), every resource's
 *    bandwidth shared max-min fairly among the copies crossing it, each
 *    copy also capped by the calibration's `copy` rate, its rate times
 *    eff(copy, bytes);
 *  - with `cores` in the calibration (CPU devices) all devices share that
 *    many cores: while k devices compute (any instruction but a NOTIFY)
 *    each runs at min(1, cores/k);
 *  - with more devices than `cores` (oversubscribed: every wake-up of a
 *    worker, its ZeroMQ I/O thread taking a message or its main thread
 *    being woken by one, waits for the scheduler to give it a core, and
 *    the devices do not stay in phase, so this holds whatever the others
 *    are doing) a NOTIFY costs `notify-busy` instead of `notify`, and a
 *    device takes in its READYs one at a time, each `latency-busy` after
 *    it was sent or after the previous one arrived, whichever is later
 *    (the calibration measures both with devices in a ring: einrun
 *    --calibrate);
 *  - the iteration costs the calibration's `iteration` on top of the
 *    makespan.
 * Peak memory: the device segment, which the worker allocates once; the
 * lowering places buffers in it by liveness (coordinator/compile/co_memplan.h: a
 * buffer's bytes are reused after its last reader), so it holds the
 * pinned inputs and weights plus the most bytes the planner needed alive
 * at once. `unplanned` is what the segment would be with every buffer in a
 * place of its own (the Program's unplanned_bytes; the segment itself when
 * it was lowered with --no-reuse). The largest tensors reported are the
 * largest alive at the instruction where the most bytes are.
 *
 * Ownership: *out is allocated by co_sim_run and freed with
 * co_sim_result_free; the Programs, topology and calibration are only
 * read. Failure: a negative EIN_E* code with `err` filled (EIN_EINVAL for
 * a device without a route to a peer it copies from or Programs that
 * deadlock, EIN_ENOMEM), *out untouched. Deterministic: no clock, no
 * randomness. */
#ifndef CO_SIM_H
#define CO_SIM_H

#include <stdint.h>
#include <stdio.h>

#include "common/base/ein_error.h"
#include "common/ir/ein_program.h"
#include "coordinator/predict/co_calib.h"
#include "exchange/xp_topo.h"

#define CO_SIM_LARGEST 3

typedef struct co_sim_device {
    double compute;     /* s in KERNEL, AGG, SLICE, CONCAT */
    double comm;        /* s in COPY, NOTIFY */
    double idle;        /* makespan - compute - comm */
    double end;         /* when its last instruction ended */
    uint64_t peak;      /* bytes: the segment */
    uint64_t unplanned; /* bytes: the segment without reuse */
    uint64_t loaded;    /* bytes: of which inputs and weights (LOAD-written buffers) */
    uint64_t live;      /* bytes alive at the busiest instruction (inputs included;
                           a view of an exchange buffer counts on its own): what
                           any placement needs at least */
    int largest[CO_SIM_LARGEST]; /* its largest buffers, -1 past the last */
} co_sim_device;

typedef struct co_sim_step {
    int device, instr;
    double start, end;
} co_sim_step;

typedef struct co_sim_result {
    double time;        /* predicted iteration: makespan + calibration iteration */
    double makespan;
    int ndev;
    co_sim_device *dev;
    co_sim_step *path;  /* critical path, in time order */
    int npath;
    double path_compute, path_comm, path_wait; /* s along the path */
    int *first;         /* [ndev + 1]: global id of device d's instruction i = first[d] + i */
    double *start, *end; /* per global instruction; -1 if never run */
    double *waits;      /* nwaits x (device, from, to): a device waiting for a peer */
    int nwaits;
} co_sim_result;

int co_sim_run(ein_program *const *progs, int ndev, const xp_topology *topo,
               const co_calib *cal, co_sim_result **out, ein_error *err);
void co_sim_result_free(co_sim_result *r);

/* The calibration a topology names (its `calibration` statement), or
 * `fallback` (a built-in name or file) if it names none. */
int co_sim_calib_of(const xp_topology *topo, const char *fallback, co_calib *out,
                    ein_error *err);

/* Fails with EIN_ELIMIT if some device's peak exceeds the topology's
 * memory (no `memory` statement: never); the message names the device,
 * its predicted peak, the capacity and its largest tensors. */
int co_sim_check_memory(ein_program *const *progs, const co_sim_result *r,
                        const xp_topology *topo, ein_error *err);

/* Reports: a text summary, one JSON object, and the predicted timeline in
 * the Chrome-trace form of einrun --trace (one array of "X" events, pid =
 * device, microseconds from the iteration's start). Each returns 0 or
 * EIN_EIO if writing failed. */
int co_sim_print(ein_program *const *progs, const co_sim_result *r, const xp_topology *topo,
                 const co_calib *cal, FILE *f);
int co_sim_json(ein_program *const *progs, const co_sim_result *r, const xp_topology *topo,
                const co_calib *cal, FILE *f);
int co_sim_trace(ein_program *const *progs, const co_sim_result *r, FILE *f);

#endif
