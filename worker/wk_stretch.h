/* worker/wk_stretch.h — local stretches of a device's program: the units
 * the executor captures once as a graph (a CUDA graph on GPUs) and replays
 * on later iterations.
 *
 * A stretch is a set of local device instructions (KERNEL, AGG, SLICE,
 * CONCAT) that run back to back, in array order, as soon as the first one
 * (the head) can run. It never contains a LOAD or STORE (host work), a COPY
 * or WAIT (they wait for a peer's READY; a WAIT also ends the collection
 * like a COPY) or a NOTIFY (the buffer must be finished
 * before a peer hears of it); it is collected from the head up to the next
 * COPY, over NOTIFY, LOAD and STORE instructions, which then run after the
 * stretch. An instruction k joins the stretch of head i only if
 *  (1) each of its dependencies is a member or an ancestor of i: when i can
 *      run, k's inputs are final; and
 *  (2) it depends on a member, or every dependency of i is one of k's: in
 *      the one-by-one order k could not run before i either, so grouping
 *      never holds k back while i waits for a peer; nothing a peer waits for
 *      is delayed past anything it did not already wait behind, and no
 *      deadlock can appear. (NOTIFYs between members do run later: after
 *      the stretch instead of between its members.)
 * Stretches run only from the second iteration on, when every LOAD has
 * run (LOADs run in the first iteration only: inputs stay in device
 * memory), so a dependency on a LOAD counts as met in both conditions.
 * Ancestors come from a depth-first walk from i bounded to WK_STRETCH_WALK
 * instructions, and the collection looks at most WK_STRETCH_SPAN
 * instructions past i; past either bound an instruction is simply left
 * out, which only makes stretches smaller. */
#ifndef WK_STRETCH_H
#define WK_STRETCH_H

#include "common/base/ein_error.h"
#include "common/ir/ein_program.h"

#define WK_STRETCH_WALK 4096
#define WK_STRETCH_SPAN 1024
#define WK_STRETCH_NONE (-1)

/* For every instruction k (both arrays caller-allocated, p->ninstrs
 * entries): head[k] = the head of k's stretch (k itself for a head), or
 * WK_STRETCH_NONE if k is not local work; next[k] = the next member of its
 * stretch in array order, or -1. Returns the number of stretches, or a
 * negative code (out of memory) with err filled. */
int wk_stretch_find(const ein_program *p, int *head, int *next, ein_error *err);

#endif
