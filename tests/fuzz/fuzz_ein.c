/* tests/fuzz/fuzz_ein.c — the .ein parser, then the planner on small graphs. */
#include "tests/fuzz/fuzz_util.h"

#include "planner/pl_optimize.h"
#include "planner/pl_parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ein_error err = {0};
    pl_graph *g = NULL;
    if (pl_ein_parse("fuzz.ein", (const char *)data, size, &g, &err) < 0) {
        fuzz_check_msg(&err);
        fuzz_check(g == NULL, "graph set on error");
        return 0;
    }
    /* Plan small graphs on a few device counts; the planner's time on big
     * graphs is measured by tools/bench-planner, not here. */
    if (g->nnodes <= 24) {
        static const int devs[] = {1, 4, 6};
        for (int i = 0; i < 3; i++) {
            pl_plan *plan = NULL;
            ein_error e2 = {0};
            if (pl_plan_make(g, devs[i], i == 2 ? PL_SELECT_GREEDY : PL_SELECT_DP, 1, &plan,
                             &e2) < 0)
                fuzz_check_msg(&e2);
            pl_plan_free(plan);
        }
    }
    pl_graph_free(g);
    return 0;
}
