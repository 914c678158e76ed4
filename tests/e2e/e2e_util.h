/* tests/e2e/e2e_util.h — helpers shared by the end-to-end tests: run einrun
 * in a private directory, and check that a run left nothing behind. */
#ifndef E2E_UTIL_H
#define E2E_UTIL_H

#include <stddef.h>

/* A private scratch directory (mkdtemp under $TMPDIR or /tmp); the runs
 * of this process put their run directories under it through TMPDIR. */
const char *e2e_scratch(void);
void e2e_scratch_remove(void);

/* Path of a built binary ("einrun", "einworker") from $EIN_BUILDDIR. */
const char *e2e_bin(const char *name);

/* Write `text` to scratch/name; returns the full path (static buffer ring). */
const char *e2e_write_file(const char *name, const char *text);

/* Run argv (argv[0] is a path) with cwd = scratch; capture stderr+stdout
 * into `out` (truncated to len); returns the exit status, 128+sig if killed,
 * -1 if it could not start. */
int e2e_run(char *const argv[], char *out, size_t len);

/* Number of leftovers of runs started from this process: worker processes
 * whose command line names the scratch directory, shared-memory segments
 * ein-<pid>-* of einrun pids seen, and einrun.* directories in scratch. A
 * description is written to `what`. */
int e2e_leftovers(char *what, size_t len);

/* The double-precision reference of every e2e test: c[n x m] = a[n x k] b[k x m],
 * row-major, with plain loops. */
void e2e_matmul_ref(const double *a, const double *b, double *c, int n, int k, int m);

#endif
