/* common/base/ein_clock.c — see ein_clock.h. */
#include "common/base/ein_clock.h"

#include <time.h>

double ein_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
