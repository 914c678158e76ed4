/* tests/exchange/xp_testutil.c — set-up shared by the exchange tests (see
 * xp_testutil.h). */
#include "tests/exchange/xp_testutil.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

xp_program *xt_parse(const char *text)
{
    xp_program *p = NULL;
    ein_error err = {0};
    if (xp_program_parse(text, "t.xp", &p, &err) != 0)
        fail_msg("parse failed: %s\n%s", err.msg, text);
    return p;
}

xp_topology *xt_topo(const char *name, double latency)
{
    xp_topology *t = NULL;
    ein_error err = {0};
    if (xp_topo_load(name, &t, &err) != 0)
        fail_msg("topology %s: %s", name, err.msg);
    if (latency >= 0)
        t->latency = latency;
    return t;
}

xp_program *xt_collective(xt_kind kind, int n, double S)
{
    int nin = kind == XT_ALLREDUCE      ? n
              : kind == XT_REDUCESCATTER ? n * n
              : kind == XT_ALLGATHER     ? n
                                         : n * (n - 1);
    xp_program *p = xp_program_new(n, nin);
    xp_word *x = p ? xp_set_new(p) : NULL;
    ein_error err = {0};
    int rc = 0, k = 0;
    if (!x)
        fail_msg("collective: out of memory");
    if (kind == XT_ALLREDUCE) {
        for (int g = 0; g < n; g++) {
            rc |= xp_program_add_in(p, 0, g, S, &err);
            xp_set_add(x, g);
        }
        for (int g = 0; g < n; g++)
            rc |= xp_program_add_out(p, x, g, &err);
    } else if (kind == XT_REDUCESCATTER) {
        for (int a = 0; a < n; a++)
            for (int g = 0; g < n; g++)
                rc |= xp_program_add_in(p, a, g, S / n, &err);
        for (int a = 0; a < n; a++) {
            memset(x, 0, sizeof(xp_word) * (size_t)p->nwords);
            for (int g = 0; g < n; g++)
                xp_set_add(x, a * n + g);
            rc |= xp_program_add_out(p, x, a, &err);
        }
    } else if (kind == XT_ALLGATHER) {
        for (int a = 0; a < n; a++)
            rc |= xp_program_add_in(p, a, a, S / n, &err);
        for (int a = 0; a < n; a++) {
            memset(x, 0, sizeof(xp_word) * (size_t)p->nwords);
            xp_set_add(x, a);
            for (int g = 0; g < n; g++)
                rc |= xp_program_add_out(p, x, g, &err);
        }
    } else {
        for (int s = 0; s < n; s++)
            for (int d = 0; d < n; d++)
                if (s != d)
                    rc |= xp_program_add_in(p, k++, s, S / n, &err);
        k = 0;
        for (int s = 0; s < n; s++)
            for (int d = 0; d < n; d++)
                if (s != d) {
                    memset(x, 0, sizeof(xp_word) * (size_t)p->nwords);
                    xp_set_add(x, k++);
                    rc |= xp_program_add_out(p, x, d, &err);
                }
    }
    free(x);
    if (rc < 0)
        fail_msg("collective: %s", err.msg);
    return p;
}
