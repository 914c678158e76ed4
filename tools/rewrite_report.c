/* tools/rewrite_report.c — see rewrite_report.h. */
#include "tools/rewrite_report.h"

#include <stdio.h>

void rewrite_report(FILE *f, const pl_graph *after, const pl_rewrite_stats *st)
{
    fprintf(f, "rewrite: %s after %d iterations (work %ld), %d e-nodes in %d e-classes, "
               "%.1f ms saturating, %.1f ms extracting%s\n",
            pl_rewrite_stop_name(st->stop), st->iterations, st->work, st->enodes, st->eclasses,
            1e3 * st->saturate_s, 1e3 * st->extract_s,
            st->ilp_optimal ? " (ILP: optimal)" : st->ilp_improved ? " (ILP improved)" : "");
    fprintf(f, "rewrite: roofline cost %.4g ms -> %.4g ms, %.4g -> %.4g GFLOP at run time\n",
            1e3 * st->cost_before, 1e3 * st->cost_after, 1e-9 * st->flops_before,
            1e-9 * st->flops_after);
    for (int v = 0; v < after->nnodes; v++) {
        const pl_node *nd = pl_graph_node(after, v);
        if (!nd->saved)
            continue;
        char expr[512];
        pl_rewrite_expr(after, v, expr, sizeof expr);
        fprintf(f, "rewrite: %s = %s\n", nd->name, expr);
    }
}
