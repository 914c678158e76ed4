/* common/base/ein_clock.h — the one clock of the project: CLOCK_MONOTONIC in
 * seconds. Every process of a machine shares it, so timestamps taken by
 * different workers (traces, per-iteration times) line up. */
#ifndef EIN_CLOCK_H
#define EIN_CLOCK_H

double ein_now_s(void);

#endif
