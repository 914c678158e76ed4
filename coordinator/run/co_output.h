/* coordinator/run/co_output.h — einrun's output files: checked before
 * planning, written through temporaries, published all together or not at
 * all.
 *
 * co_outputs_prepare() checks every output before any work is done: it must
 * not exist or be a regular file (a symbolic link, FIFO, device or
 * directory is refused: einrun never renames over them), its directory must
 * exist, and no two outputs may be the same file (same canonical path, or
 * the same inode through a hard link). It removes what dead runs of the
 * same user left in those directories (see co_outputs_sweep) and picks each
 * temporary's name, "PATH.einrun-tmp-<pid>-<random>", next to PATH so that
 * the final rename stays on one filesystem. Nothing is created yet.
 *
 * co_outputs_create() creates the temporaries (O_EXCL | O_NOFOLLOW: a file
 * or link planted at the name is an error, never followed) with a .npy
 * header and a sparse data section, at the last moment before the run.
 *
 * co_outputs_publish() renames every temporary over its output. Before each
 * rename it checks that the temporary is still the file it created and that
 * the output is still absent or a regular file, and keeps an existing
 * output (but the last) as a hard link "PATH.einrun-old-<pid>-<random>".
 * If any step fails, the outputs already renamed are undone (old files put
 * back, new ones removed), so that either all outputs appear or none do;
 * the message says if an undo step itself failed and where the old file
 * was left.
 *
 * co_outputs_discard() removes the temporaries that exist (any exit path)
 * and frees what the others allocated; call it exactly once.
 *
 * Functions return 0 or a negative EIN_E* code with `err` filled:
 * EIN_EINVAL for an output that cannot be used (exit 2), EIN_EIO for a
 * failure to create or publish. */
#ifndef CO_OUTPUT_H
#define CO_OUTPUT_H

#include <stdint.h>
#include <sys/types.h>

#include "common/ir/ein_dtype.h"
#include "common/ir/ein_box.h"
#include "common/base/ein_error.h"

typedef struct co_output {
    /* Set by the caller; borrowed, must outlive the co_output. */
    const char *name;           /* the saved tensor, for messages */
    const char *path;           /* where it goes */
    ein_dtype dtype;
    int rank;
    int64_t shape[EIN_MAX_RANK];
    /* Set by the functions below. */
    char *tmp;                  /* the temporary's name (co_outputs_prepare) */
    char *canon;                /* canonical directory + "/" + file name */
    int created;                /* tmp exists and is ours */
    dev_t tmp_dev;              /* ... this file */
    ino_t tmp_ino;
} co_output;

int co_outputs_prepare(co_output *o, int n, int verbose, ein_error *err);
int co_outputs_create(co_output *o, int n, ein_error *err);
int co_outputs_publish(co_output *o, int n, ein_error *err);
void co_outputs_discard(co_output *o, int n);

/* Remove, in directory `dir`, the temporaries and kept old outputs
 * ("*.einrun-tmp-<pid>-*", "*.einrun-old-<pid>-*") of runs whose process
 * is gone, when they are regular files owned by this user. Returns how many
 * were removed. */
int co_outputs_sweep(const char *dir);

#endif
