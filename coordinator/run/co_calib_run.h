/* coordinator/run/co_calib_run.h — einrun --calibrate: measure a
 * calibration table (coordinator/predict/co_calib.h) by running benchmark
 * Programs on worker processes (co_calib_run.c). It runs workers, so it
 * lives with the runtime; predict/ only reads and writes the tables. */
#ifndef CO_CALIB_RUN_H
#define CO_CALIB_RUN_H

#include "common/base/ein_error.h"
#include "coordinator/predict/co_calib.h"
#include "exchange/xp_topo.h"

/* What a measurement was, for the table's comment lines. */
typedef struct co_calib_notes {
    int ndev;                   /* devices used (at most 2) */
    int iterations;             /* best of this many (a warm-up before them) */
    int par;                    /* devices busy at once when measuring the cores */
    double eff_cores;           /* cores they got (other users' load); 0: not measured */
    int ring_per_core;          /* devices per core in the busy ring */
} co_calib_notes;

/* einrun --calibrate (co_calib_run.c): run benchmark Programs on `ndev`
 * CPU devices (at most 2 used: 0 computes, 1 copies) with the einworker
 * at `worker` (NULL: next to this executable) and fill *out with the
 * measured table, relative to `topo`, and *notes. On failure returns a
 * negative EIN_E* code with `err` filled ("run failed: ..." for a run that
 * failed) and leaves *out untouched. */
int co_calib_measure(int ndev, const char *worker, const xp_topology *topo, co_calib *out,
                     co_calib_notes *notes, ein_error *err);

#endif
