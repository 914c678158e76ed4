/* planner/rewrite/pl_rewrite_cli.c — what einplan and einrun share for
 * --rewrite: the --rewrite-weights list and the report. */
#include "planner/rewrite/pl_rewrite.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int pl_rewrite_weights_parse(const char *list, char ***out, ein_error *err)
{
    size_t n = 1;
    for (const char *c = list; *c; c++)
        n += *c == ',';
    char **v = calloc(n + 1, sizeof *v);
    char *copy = strdup(list);
    if (!v || !copy) {
        free(v);
        free(copy);
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    }
    size_t k = 0;
    for (char *save = NULL, *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save))
        if (*t && !(v[k++] = strdup(t))) {
            pl_rewrite_weights_free(v);
            free(copy);
            return ein_fail(err, EIN_ENOMEM, "out of memory");
        }
    free(copy);
    *out = v;
    return 0;
}

void pl_rewrite_weights_free(char **w)
{
    for (size_t i = 0; w && w[i]; i++)
        free(w[i]);
    free(w);
}

void pl_rewrite_report(FILE *f, const pl_graph *after, const pl_rewrite_stats *st)
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
