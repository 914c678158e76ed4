/* coordinator/predict/co_calib.h — calibration tables: how fast a device really
 * runs each kind of work, relative to its topology's roofline.
 *
 * The plan simulator (co_sim.h) times an instruction as a roofline of the
 * topology's `peak` FLOP/s and `hbm` bytes/s, each scaled by an efficiency
 * that depends on the kind of work and its size, plus a fixed overhead.
 * Text format (one statement a line, # comments), the same style as
 * topology files:
 *
 *   name host
 *   cores 2              # optional: the devices share this many cores (CPU
 *                        # devices; may be fractional: what other users'
 *                        # load leaves); a device's work runs at
 *                        # min(1, cores / busy devices) of its speed. 0 or
 *                        # absent: every device has its own processor (GPUs)
 *   overhead 4 us        # fixed cost of every instruction (dispatch, launch)
 *   latency 40 us        # a NOTIFY reaching the peer (its READY message)
 *   notify 20 us         # optional: what a NOTIFY costs its sender beyond
 *                        # `overhead` (encoding, sending, waking the I/O
 *                        # thread); absent: 0
 *   latency-busy 600 us  # optional, with `cores`: `latency` and `notify`
 *   notify-busy 150 us   # with more devices than cores (every wake-up of
 *                        # a worker waits for the scheduler to give it a
 *                        # core; co_sim.h says how they are used); absent:
 *                        # the same as with fewer
 *   iteration 300 us     # fixed cost of one iteration (START/DONE round trip)
 *   copy 6 GB/s          # optional: the most one device's COPY moves, whatever
 *                        # the route allows (a CPU worker's memcpy)
 *   gemm-operands 20 GB/s # optional: a GEMM also streams its two operands
 *                        # through memory at this rate, ON TOP of its FLOPs
 *                        # (a CPU BLAS packs both operands into its own
 *                        # buffers before it multiplies, so a thin GEMM,
 *                        # whose weight is packed for few rows, runs slower
 *                        # than a square one of the same FLOPs); absent: a
 *                        # GEMM costs max(FLOPs, bytes) as on a GPU
 *   eff gemm 1e6 0.25    # KIND SIZE EFFICIENCY: at SIZE (FLOPs for gemm and
 *   eff gemm 1e9 0.8     # attention, bytes for the others) the work runs
 *                        # at EFFICIENCY x peak (gemm, attention), x hbm
 *                        # (unary, layout, elementwise) or x the route (copy)
 *
 * Time units: s, ms, us, ns; rates GB/s, MB/s, TB/s. Points of one kind
 * are given in increasing SIZE (at most CO_CALIB_MAX_POINTS); between them
 * the efficiency is interpolated linearly in log(SIZE), outside them it is
 * the nearest point's. A kind without points has efficiency 1.
 *
 * Kinds of work: gemm (a two-operand EINSUM), attention (ATTENTION; its
 * FLOPs count only the causal pairs it computes), unary (UNARY kernels:
 * on CPU they evaluate a function per element and run far slower than
 * the rest), layout (SLICE and CONCAT instructions and kernels,
 * SPLIT_HEADS, MERGE_HEADS: data movement inside a device), elementwise
 * (every other kernel and AGG), copy (COPY); all but gemm and attention
 * are sized in bytes read + written (copy: bytes moved). Calibrated on
 * CPU with relu (unary), add (elementwise) and a SLICE (layout).
 *
 * Built-in tables are named like topologies' `calibration` statements and
 * belong to the built-in machine that names them (xp_topo.h): `host`
 * (topologies/host.cal, measured on this project's machine with einrun
 * --calibrate) and GPU tables from public figures (a100, h100, h200, v100,
 * b200: `#@ cal` lines of their .topo files; the sources are stated in
 * docs/simulator.md), to be replaced by measured ones.
 *
 * Ownership: a co_calib is plain data (no pointers), the caller's. On error
 * every function returns a negative EIN_E* code, fills `err` and leaves
 * its output untouched. */
#ifndef CO_CALIB_H
#define CO_CALIB_H

#include <stdio.h>

#include "common/base/ein_error.h"
#include "exchange/xp_topo.h"

#define CO_CALIB_MAX_POINTS 16

typedef enum co_work {
    CO_WORK_GEMM = 0,
    CO_WORK_ATTENTION,
    CO_WORK_ELEMENTWISE,
    CO_WORK_COPY,
    CO_WORK_UNARY,
    CO_WORK_LAYOUT,
    CO_WORK_COUNT
} co_work;

typedef struct co_calib {
    char name[64];
    double cores;            /* 0: devices do not share processors */
    double overhead;         /* s per instruction */
    double latency;          /* s from NOTIFY end to the peer's READY */
    double notify;           /* s a NOTIFY costs its sender beyond overhead */
    double latency_busy;     /* latency with the cores oversubscribed */
    double notify_busy;      /* notify with the cores oversubscribed */
    double iteration;        /* s per iteration */
    double copy_bw;          /* bytes/s one device's COPY can move; 0: no cap */
    double gemm_operand_bw;  /* bytes/s a GEMM's operands add to its time; 0: roofline */
    int npts[CO_WORK_COUNT];
    double size[CO_WORK_COUNT][CO_CALIB_MAX_POINTS];
    double eff[CO_WORK_COUNT][CO_CALIB_MAX_POINTS];
} co_calib;

const char *co_work_name(co_work w);
/* Efficiency of work kind w at `size` (FLOPs or bytes); > 0. */
double co_calib_eff(const co_calib *c, co_work w, double size);

int co_calib_parse(const char *text, const char *file, co_calib *out, ein_error *err);
/* A built-in table by name, or else a file (at most 1 MiB). */
int co_calib_load(const char *name_or_path, co_calib *out, ein_error *err);
/* The table as text co_calib_parse reads back (comments not kept). */
void co_calib_write(const co_calib *c, FILE *f);
const char *co_calib_builtin_text(const char *name);

/* The rates --objective time plans with (pl_plan_opts): the topology's
 * peak x the calibration's gemm efficiency at 1 GFLOP, its hbm x the
 * elementwise efficiency at 10 MB, and the bottleneck of the route
 * 0 -> 1 (the calibration's copy cap if lower) x the copy efficiency at
 * 10 MB. A one-GPU topology uses its hbm as the network. */
struct pl_plan_opts;
void co_calib_objective_rates(const xp_topology *topo, const co_calib *cal,
                              struct pl_plan_opts *o);

#endif
