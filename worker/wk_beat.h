/* worker/wk_beat.h — heartbeats that do not wait for an instruction to end.
 *
 * The main thread of a worker beats between instructions (wk_exec.c). One
 * instruction can take longer than the coordinator's --worker-timeout (a
 * LOAD of a 16 GiB input, a big kernel), so a second thread beats while the
 * main thread is busy. It has its own DEALER socket (identity "b<device>",
 * which the coordinator accepts for HEARTBEAT only): ZeroMQ sockets are not
 * thread safe, and the main thread's socket stays the main thread's.
 *
 * A beat must still mean something, so the thread beats only when the main
 * thread is inside a body (wk_pulse.state) and:
 *   - WK_PULSE_SLABS (a LOAD or STORE, moving slab by slab): it made
 *     progress (wk_pulse.progress) since the thread's last look, or
 *   - WK_PULSE_BUSY (a kernel, a copy, a graph launch, a synchronisation,
 *     creating the segment: nothing that can report progress): it has been
 *     inside for less than `busy_limit_s` (<= 0: no limit).
 * Between instructions (WK_PULSE_MAIN) the main thread beats itself, as
 * before, and the thread is silent. So a main thread stuck between
 * instructions, in a LOAD that stopped reading, or in one kernel past
 * busy_limit_s falls silent, and the coordinator reports it after
 * --worker-timeout.
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

#include "common/base/ein_error.h"

enum { WK_PULSE_MAIN, WK_PULSE_SLABS, WK_PULSE_BUSY };

/* Written by the main thread, read by the beater. */
typedef struct wk_pulse {
    atomic_uint_fast64_t progress; /* bumped on every slab moved */
    atomic_int instr;              /* instruction being executed, -1 */
    atomic_int state;              /* WK_PULSE_* */
    atomic_int_fast64_t busy_since_us; /* ein_now_s() * 1e6 when BUSY began */
} wk_pulse;

typedef struct wk_beat wk_beat;

void wk_pulse_init(wk_pulse *p);
static inline void wk_pulse_bump(wk_pulse *p)
{
    atomic_fetch_add_explicit(&p->progress, 1, memory_order_relaxed);
}
/* Enter a state (WK_PULSE_*); returns the previous one, to restore. */
int wk_pulse_set(wk_pulse *p, int state);

int wk_beat_start(void *zctx, const char *endpoint, int device, double interval_s,
                  double busy_limit_s, wk_pulse *pulse, wk_beat **out, ein_error *err);
void wk_beat_stop(wk_beat *b);

#endif
