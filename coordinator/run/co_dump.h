/* coordinator/run/co_dump.h — einrun --dump-inputs DIR: write every input of a
 * graph, exactly as the workers will load it, to DIR/NAME.npy, so that a
 * user can check any result with NumPy.
 *
 * co_dump_inputs() creates DIR if it does not exist (one level, mode 0777
 * before the umask) and, for each input node v of `g`, writes DIR/NAME.npy
 * (NAME the node's name; dtype and shape the input's) from its source
 * src[v] (src may be NULL: all generated): generated from (seed, the name's
 * key) by ein_rand_fill_box — the very values the workers generate on any
 * device count —, copied from a .npy, or read from a raw tensor (a
 * .safetensors file). Work is done in slabs of at most 32 MiB along the
 * first axis, so memory stays bounded for any tensor size; `progress`
 * (may be NULL) is stepped once per input. An existing file is replaced
 * (never through a symbolic link).
 *
 * Errors: EIN_EIO (DIR or a file cannot be made or written), EIN_EINVAL (a
 * name that cannot be a file name: empty, '.' or '..', or holding '/'),
 * EIN_ENOMEM, or a source's read error; the message names the file. Files
 * written before the error stay. */
#ifndef CO_DUMP_H
#define CO_DUMP_H

#include <stdint.h>

#include "common/base/ein_error.h"
#include "common/process/ein_progress.h"
#include "coordinator/compile/co_lower.h"
#include "planner/pl_graph.h"

int co_dump_inputs(const pl_graph *g, const co_input_src *src, uint64_t seed, const char *dir,
                   ein_progress *progress, int *ndumped, ein_error *err);

#endif
