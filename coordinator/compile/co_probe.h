/* coordinator/compile/co_probe.h — run `WORKER --probe` (einworker-cuda's GPU
 * probe, worker/wk_probe.h) and capture what it prints.
 *
 * co_probe_run starts `worker` directly (no shell) in a process group of
 * its own, with its stdout and stderr on pipes, and gives it
 * CO_PROBE_TIMEOUT_S seconds (the test hook EIN_PROBE_TIMEOUT_S=S
 * overrides this) before killing the group. On exit status
 * 0 it returns 0 and the probe text in *out, allocated by the callee and
 * freed by the caller with free(). Otherwise (cannot start, non-zero exit,
 * signal, timeout, more than 16 MiB of output) it returns a negative EIN_E*
 * code and fills `err` with what happened and the first line the probe
 * wrote on stderr; *out is untouched and no process is left behind. */
#ifndef CO_PROBE_H
#define CO_PROBE_H

#include "common/base/ein_error.h"

#define CO_PROBE_TIMEOUT_S 60.0

int co_probe_run(const char *worker, char **out, ein_error *err);

#endif
