/* planner/rewrite/pl_rewrite_weights.c — the rewriter's weights list
 * ("wq,wk,wv", ein_compile_options.rewrite_weights) as pl_rewrite_opts takes
 * it (pl_rewrite.h). */
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
