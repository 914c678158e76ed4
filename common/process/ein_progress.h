/* common/process/ein_progress.h — progress of long work on stderr, for the person at
 * the terminal: "synthesising exchanges: 12/40 (30%), 1.2 s, about 2.8 s
 * left", redrawn in place at most ten times a second and erased when the
 * work ends.
 *
 * It shows only when enabled: ein_progress_wanted(quiet) is true when
 * `quiet` is 0 and stderr is a terminal, so a run whose stderr is a file or
 * a pipe prints exactly what it printed before. A disabled (or NULL)
 * progress makes every call a no-op, so library code can take an optional
 * `ein_progress *` and call it unconditionally. Elapsed time and the
 * estimate are wall-clock, for display only: nothing else reads them.
 *
 * Ownership: an ein_progress is plain data owned by the caller (usually on
 * its stack); nothing to free. Nothing here fails. */
#ifndef EIN_PROGRESS_H
#define EIN_PROGRESS_H

#include <stdint.h>
#include <stdio.h>

typedef struct ein_progress {
    FILE *out;          /* stderr when enabled, NULL when silent */
    char what[64];      /* "planning", "synthesising exchanges", ... */
    int64_t total;      /* 0: unknown (elapsed time only) */
    int64_t done;
    double t0, last;    /* start, last redraw (ein_now_s) */
    double after;       /* nothing is drawn before t0 + after */
    int drawn;          /* something is on the line */
} ein_progress;

/* 1 if progress should show: not quiet, and stderr is a terminal. */
int ein_progress_wanted(int quiet);

/* Start a stretch of work of `total` steps (0: unknown). `enabled` 0 makes
 * it silent. Draws the first line at once when enabled. */
void ein_progress_begin(ein_progress *p, int enabled, const char *what, int64_t total);
/* The same for work that is usually short: nothing shows until it has
 * taken `after` seconds (a run of a session: 1 s), so a quick step never
 * flickers; then as above. */
void ein_progress_begin_after(ein_progress *p, int enabled, const char *what, int64_t total,
                              double after);
/* Redraw with the steps done so far (the elapsed time moves on): for work
 * whose caller wakes up now and then without a step to count. */
void ein_progress_tick(ein_progress *p);
/* `done` steps of `total` are finished; redraws if 0.1 s passed since the
 * last line (or when done == total). */
void ein_progress_step(ein_progress *p, int64_t done);
/* The work is over: erase the line. */
void ein_progress_end(ein_progress *p);

/* The line ein_progress_step would draw, into buf (no control characters):
 * "WHAT: DONE/TOTAL (P%), E s, about R s left" or "WHAT: E s". For tests. */
void ein_progress_format(const ein_progress *p, double now, char *buf, size_t len);

#endif
