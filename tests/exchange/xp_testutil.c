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

xp_program *xt_collective(xp_coll_kind kind, int n, double S)
{
    xp_program *p = NULL;
    ein_error err = {0};
    if (xp_collective_preamble(kind, n, S, &p, &err) != 0)
        fail_msg("collective: %s", err.msg);
    return p;
}
