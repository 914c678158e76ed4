/* worker/wk_probe.h — `einworker-cuda --probe`: the facts about the
 * visible GPUs that einrun's topology detection needs (coordinator/
 * co_topo.h reads this text; it is the format's reference).
 *
 *   einprobe 1                   format version
 *   gpu <id> <name>              every GPU cudaGetDeviceCount sees, in
 *                                CUDA's numbering (the ids --gpu takes)
 *   peer <a> <b> <0|1> <rank>    every ordered pair of distinct GPUs:
 *                                cudaDeviceCanAccessPeer(a, b) and
 *                                cudaDevP2PAttrPerformanceRank (0 best)
 *
 * wk_probe_cuda gathers everything before writing, so `out` gets the whole
 * text or nothing. Returns 0, or a negative EIN_E* code (no GPU, a CUDA
 * error, a write error) with `err` filled. Built only into einworker-cuda. */
#ifndef WK_PROBE_H
#define WK_PROBE_H

#include <stdio.h>

#include "common/base/ein_error.h"

int wk_probe_cuda(FILE *out, ein_error *err);

#endif
