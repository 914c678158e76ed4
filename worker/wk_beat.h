/* worker/wk_beat.h — heartbeats that do not wait for an instruction to end.
 *
 * The main thread of a worker beats between instructions (wk_exec.c). One
 * instruction can take longer than the coordinator's --worker-timeout (a
 * LOAD of a 16 GiB input, a big kernel), so a second thread beats while the
 * main thread is busy. It has its own DEALER socket (identity "b<device>",
 * which the coordinator accepts for HEARTBEAT only): ZeroMQ sockets are not
 * thread safe, and the main thread's socket stays the main thread's.
 *
 * A beat must still mean something, so the thread beats only when:
 *   - the main thread made progress since the last beat (wk_pulse.progress:
 *     an instruction finished, or a slab of a LOAD or STORE was read or
 *     written), or
 *   - the main thread is inside an instruction body that reports no progress
 *     of its own (a kernel, a copy, a graph launch, creating the segment)
 *     and has been inside it for less than `busy_limit_s` (<= 0: no limit).
 * A main thread stuck anywhere else (between instructions, in a LOAD that
 * stopped reading) or stuck in one kernel past busy_limit_s falls silent,
 * and the coordinator reports it after --worker-timeout as before.
 *
 * wk_beat_start() allocates the beater and starts its thread; wk_beat_stop()
 * (NULL is fine) stops and joins it, closes its socket and frees it; it must
 * be called before the ZeroMQ context is terminated. The pulse is owned by
 * the caller and must outlive the beater. On error wk_beat_start returns a
 * negative EIN_E* code, fills `err` and leaves *out NULL. */
#ifndef WK_BEAT_H
#define WK_BEAT_H

#include <stdatomic.h>
#include <stdint.h>

#include "common/ein_error.h"

/* Written by the main thread, read by the beater. */
typedef struct wk_pulse {
    atomic_uint_fast64_t progress; /* bumped on every unit of progress */
    atomic_int instr;              /* instruction being executed, -1 */
    atomic_int busy;               /* 1 inside a body that reports no progress */
    atomic_int_fast64_t busy_since_us; /* ein_now_s() * 1e6 when busy was set */
} wk_pulse;

typedef struct wk_beat wk_beat;

void wk_pulse_init(wk_pulse *p);
static inline void wk_pulse_bump(wk_pulse *p)
{
    atomic_fetch_add_explicit(&p->progress, 1, memory_order_relaxed);
}
/* Enter (busy = 1) or leave (busy = 0) a body that reports no progress. */
void wk_pulse_busy(wk_pulse *p, int busy);

int wk_beat_start(void *zctx, const char *endpoint, int device, double interval_s,
                  double busy_limit_s, wk_pulse *pulse, wk_beat **out, ein_error *err);
void wk_beat_stop(wk_beat *b);

#endif
