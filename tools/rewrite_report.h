/* tools/rewrite_report.h — what the front ends (einplan, einrun) print
 * after a --rewrite: stop reason, e-graph size, times, cost and FLOPs
 * before and after, and each saved tensor's expression, one "rewrite:"
 * line each, on f. Reads only; nothing to free; output errors are f's. */
#ifndef TOOLS_REWRITE_REPORT_H
#define TOOLS_REWRITE_REPORT_H

#include <stdio.h>

#include "planner/rewrite/pl_rewrite.h"

void rewrite_report(FILE *f, const pl_graph *after, const pl_rewrite_stats *st);

#endif
