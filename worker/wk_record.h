/* worker/wk_record.h — a recorded sequence of device calls, replayed later:
 * the CPU backend's stand-in for a CUDA graph.
 *
 * CPU devices run each call when it is made, so there is nothing for a graph
 * to save but the executor's own dispatch; the recorder exists so that the
 * executor's capture and replay of local stretches (wk_stretch.h) runs, and
 * is tested, on every machine: a stretch captured at the wrong time or with
 * the wrong members replays stale data and the run's results are wrong.
 *
 * A recording keeps copies of the blocks' descriptions (pointers into the
 * device segment, dtypes, boxes) and the kernel pointers it was given: the
 * program and the segment must outlive it, as they outlive every iteration.
 * Ownership: wk_record_new returns a recording freed with wk_record_free. */
#ifndef WK_RECORD_H
#define WK_RECORD_H

#include "worker/wk_backend.h"

typedef struct wk_record wk_record;

wk_record *wk_record_new(void);
void wk_record_free(wk_record *r);

/* Append one call; 0 or EIN_ENOMEM. */
int wk_record_kernel(wk_record *r, const ein_kernel *k, const kn_block *ins, int nin,
                     const kn_block *out, ein_error *err);
int wk_record_agg(wk_record *r, ein_agg op, const kn_block *srcs, int n, const kn_block *out,
                  ein_error *err);
int wk_record_copy(wk_record *r, void *dst, const void *src, size_t bytes, ein_error *err);
int wk_record_copy_box(wk_record *r, void *dst, const ein_box *dst_box, const void *src,
                       const ein_box *src_box, const ein_box *region, size_t elem,
                       ein_error *err);

/* Make every recorded call again, in order, through be's own functions
 * (which must not be recording). Stops at the first failure. */
int wk_record_replay(const wk_record *r, wk_backend *be, ein_error *err);

#endif
