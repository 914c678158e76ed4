/* tests/coordinator/test_partials.c — --partials f32|native (issue 21).
 *
 * A bf16 matmul y[m, n] = a[m, k] b[k, n] whose contraction is split over
 * P devices (the plan is forced to k:P): each device computes an m x n
 * partial, and the aggregation moves them. With f32 partials every moved
 * element is 4 bytes, with native ones 2 (bf16), so:
 *  - the planner's aggregation cost halves (pl_cost counts the partial's
 *    dtype: f32 weighs 2 bf16 elements);
 *  - the lowered Programs the simulator runs move exactly half the bytes
 *    (every COPY, every AGG's operands and the kernels' outputs are bf16
 *    instead of f32), and the simulator predicts less communication;
 *  - the plan search counts whichever is chosen: with native partials its
 *    plan is predicted no slower than the f32 one's (it could take it).
 * The byte counts are computed here from the Programs' own buffers. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/ir/ein_dtype.h"
#include "coordinator/predict/co_calib.h"
#include "coordinator/compile/co_lower.h"
#include "coordinator/compile/co_pipeline.h"
#include "coordinator/compile/co_search.h"
#include "coordinator/predict/co_sim.h"
#include "planner/pl_optimize.h"
#include "planner/pl_parse.h"

enum { P = 4, M = 256, N = 256 };

static const char prog[] = "dims m=256 k=1024 n=256\ndtype bf16\n"
                           "input a[m, k]\ninput b[k, n]\ny = matmul(a, b)\nsave y\n";

static pl_graph *parse(void)
{
    pl_graph *g = NULL;
    ein_error err = {0};
    if (pl_ein_parse("partials.ein", prog, strlen(prog), &g, &err) < 0)
        fail_msg("parse: %s", err.msg);
    return g;
}

/* The spec with the contraction (dim "k") split the most, and nothing else. */
static double score_k(const void *ctx, const pl_graph *g, int node, const pl_index *idx,
                      int nidx, const int *counts)
{
    (void)ctx;
    (void)g;
    (void)node;
    double s = 0;
    for (int i = 0; i < nidx; i++)
        s += strcmp(idx[i].label, "k") == 0 ? counts[i] : -(double)counts[i];
    return s;
}

static pl_plan *plan_k(const pl_graph *g, pl_partials m)
{
    pl_plan_opts o = {.force = score_k, .partials = m};
    pl_plan *plan = NULL;
    ein_error err = {0};
    if (pl_plan_make_opts(g, P, PL_SELECT_DP, 1, &o, &plan, &err) < 0)
        fail_msg("plan: %s", err.msg);
    return plan;
}

/* Bytes of every COPY's destination, and of every AGG's sources. */
static void moved(ein_program **progs, double *copy, double *agg)
{
    *copy = *agg = 0;
    for (int d = 0; d < P; d++) {
        const ein_program *p = progs[d];
        for (int i = 0; i < p->ninstrs; i++) {
            const ein_instr *ins = &p->instrs[i];
            if (ins->kind == EIN_I_COPY) {
                const ein_pbuffer *b = &p->buffers[ins->dst];
                *copy += (double)ein_box_volume(&b->box) * (double)ein_dtype_size(b->dtype);
            } else if (ins->kind == EIN_I_AGG) {
                for (int s = 0; s < ins->nsrcs; s++) {
                    const ein_pbuffer *b = &p->buffers[ins->srcs[s]];
                    *agg += (double)ein_box_volume(&b->box) * (double)ein_dtype_size(b->dtype);
                }
            }
        }
    }
}

static void test_halves(void **state)
{
    (void)state;
    pl_graph *g = parse();
    xp_topology *t = NULL;
    co_calib cal;
    ein_error err = {0};
    if (xp_topo_load("dgx-a100", &t, &err) < 0 || co_sim_calib_of(t, "host", &cal, &err) < 0)
        fail_msg("dgx-a100: %s", err.msg);
    pl_plan *pf = plan_k(g, PL_PARTIALS_F32), *pn = plan_k(g, PL_PARTIALS_NATIVE);
    int y = pl_graph_find(g, "y");
    assert_true(y >= 0);
    assert_int_equal(pf->nodes[y].spec.nparts, P);
    assert_int_equal(pf->nodes[y].spec.agg, EIN_AGG_SUM);
    assert_int_equal(pn->partials, PL_PARTIALS_NATIVE);
    /* The proxy: P partials of m x n, P - 1 of them aggregated; f32 ones
     * weigh two bf16 elements each. */
    double want = (double)(P - 1) * M * N;
    if (!(fabs(pn->nodes[y].agg - want) <= 0.5) || !(fabs(pf->nodes[y].agg - 2 * want) <= 0.5))
        fail_msg("aggregation cost: native %g, f32 %g; want %g and %g", pn->nodes[y].agg,
                 pf->nodes[y].agg, want, 2 * want);

    double copy[2], agg[2], comm[2];
    for (int r = 0; r < 2; r++) {
        ein_program **progs = NULL;
        co_sim_result *res = NULL;
        if (co_plan_predict(g, r ? pn : pf, t, &cal, 1, 1, NULL, &progs, &res, &err) < 0)
            fail_msg("simulate: %s", err.msg);
        moved(progs, &copy[r], &agg[r]);
        comm[r] = 0;
        for (int d = 0; d < P; d++)
            comm[r] += res->dev[d].comm;
        co_sim_result_free(res);
        co_programs_free(progs, P);
    }
    print_message("# copied %g -> %g bytes, aggregated %g -> %g, comm %.3g -> %.3g s\n",
                  copy[0], copy[1], agg[0], agg[1], comm[0], comm[1]);
    /* At least the P - 1 partials of m x n cross devices. */
    if (!(copy[0] >= (double)(P - 1) * M * N * 4 / P))
        fail_msg("f32 partials: only %g bytes copied", copy[0]);
    if (!(fabs(copy[1] * 2 - copy[0]) <= 0.5) || !(fabs(agg[1] * 2 - agg[0]) <= 0.5))
        fail_msg("native partials move %g / aggregate %g bytes, f32 %g / %g: not half", copy[1],
                 agg[1], copy[0], agg[0]);
    if (!(comm[1] < comm[0]))
        fail_msg("predicted communication %g s native, %g s f32", comm[1], comm[0]);
    pl_plan_free(pf);
    pl_plan_free(pn);
    xp_topo_free(t);
    pl_graph_free(g);
}

/* The search plans with native partials as asked: the result's partials
 * are native, and it is predicted no slower than the f32 search's plan
 * simulated with native partials (that plan is one of its candidates'
 * neighbours at worst; the seeds include the same DP and strategies). */
static void test_search_counts_native(void **state)
{
    (void)state;
    pl_graph *g = parse();
    xp_topology *t = NULL;
    co_calib cal;
    ein_error err = {0};
    if (xp_topo_load("dgx-a100", &t, &err) < 0 || co_sim_calib_of(t, "host", &cal, &err) < 0)
        fail_msg("dgx-a100: %s", err.msg);
    pl_plan_opts o = {.partials = PL_PARTIALS_NATIVE};
    co_search_opts so = {.work = 200, .seed = 1};
    pl_plan *plan = NULL;
    if (co_plan_search(g, P, &o, t, &cal, &so, &plan, NULL, &err) < 0)
        fail_msg("search: %s", err.msg);
    assert_int_equal(plan->partials, PL_PARTIALS_NATIVE);
    /* The forced k-split with native partials is a plan the search could
     * have returned: it must not be predicted faster than the result. */
    pl_plan *pk = plan_k(g, PL_PARTIALS_NATIVE);
    double tt[2];
    for (int r = 0; r < 2; r++) {
        ein_program **progs = NULL;
        co_sim_result *res = NULL;
        if (co_plan_predict(g, r ? pk : plan, t, &cal, 1, 1, NULL, &progs, &res, &err) < 0)
            fail_msg("simulate: %s", err.msg);
        tt[r] = res->time;
        co_sim_result_free(res);
        co_programs_free(progs, P);
    }
    if (!(tt[0] <= tt[1] * (1 + 1e-9)))
        fail_msg("search (native) %.6g s, the native k-split %.6g s", tt[0], tt[1]);
    pl_plan_free(pk);
    pl_plan_free(plan);
    xp_topo_free(t);
    pl_graph_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_halves),
        cmocka_unit_test(test_search_counts_native),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
