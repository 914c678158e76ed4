/* tests/planner/test_optimize.c — Algorithm 1 and the cost model.
 *
 * The 3D-matmul check of the paper's §4.4 is derived here from the cost
 * formula: a spec splitting i, j, k into a, b, c costs (a+c)N^2 for the join
 * and (b-1)N^2 for the aggregation, so the optimum over a*b*c = q^3 is
 * a = b = c = q with cost (3q-1)N^2 (5N^2 at p = 8, 8N^2 at 27, 11N^2 at 64). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "planner/pl_optimize.h"

static pl_graph *matmul_graph(int64_t n)
{
    ein_error err = {0};
    pl_graph *g = pl_graph_new();
    int64_t s[2] = {n, n};
    int a = pl_graph_add_input(g, "A", EIN_F32, 2, s, &err);
    int b = pl_graph_add_input(g, "B", EIN_F32, 2, s, &err);
    int c = pl_graph_add_matmul(g, "C", a, b, &err);
    assert_true(c >= 0);
    assert_int_equal(pl_graph_save(g, c, &err), 0);
    return g;
}

static void check_3d(int64_t n, int p, int q)
{
    pl_graph *g = matmul_graph(n);
    pl_plan *plan = NULL;
    ein_error err = {0};
    assert_int_equal(pl_plan_make(g, p, PL_SELECT_DP, 0, &plan, &err), 0);
    /* The formula's optimum, and the spec that reaches it. */
    double want = (double)(3 * q - 1) * (double)(n * n);
    if (plan->total != want)
        fail_msg("p=%d: cost %.0f, expected (3q-1)N^2 = %.0f", p, plan->total, want);
    const pl_choice *c = &plan->nodes[2];
    for (int i = 0; i < 3; i++)
        assert_int_equal(c->spec.counts[i], q);
    assert_true(c->repart == 0);
    pl_plan_free(plan);
    pl_graph_free(g);
}

static void test_3d_matmul_p8(void **s) { (void)s; check_3d(48, 8, 2); }
static void test_3d_matmul_p27(void **s) { (void)s; check_3d(54, 27, 3); }
static void test_3d_matmul_p64(void **s) { (void)s; check_3d(64, 64, 4); }

/* Cost of a fixed spec, sub-cost by sub-cost, against the formulas. */
static void test_cost_subcosts(void **state)
{
    (void)state;
    pl_graph *g = matmul_graph(60);
    ein_error err = {0};
    int counts[3] = {1, 3, 2};
    pl_spec s;
    assert_int_equal(pl_spec_make(g, 2, counts, &s, &err), 0);
    double rp, jn, ag;
    pl_cost(g, 2, &s, NULL, &rp, &jn, &ag);
    assert_true(rp == 0);
    assert_true(jn == (1 + 2) * 3600.0);
    assert_true(ag == (3 - 1) * 3600.0);
    pl_spec_clear(&s);
    pl_graph_free(g);
}

/* A chain where each operator alone prefers a different tiling: the DP
 * must account for repartitions and never do worse than greedy or random. */
static pl_graph *chain_graph(void)
{
    ein_error err = {0};
    pl_graph *g = pl_graph_new();
    int64_t s1[2] = {512, 16}, s2[2] = {16, 512}, s3[2] = {512, 64};
    int a = pl_graph_add_input(g, "A", EIN_F32, 2, s1, &err);
    int b = pl_graph_add_input(g, "B", EIN_F32, 2, s2, &err);
    int c = pl_graph_add_input(g, "C", EIN_F32, 2, s3, &err);
    int ab = pl_graph_add_matmul(g, "AB", a, b, &err);
    int r = pl_graph_add_unary(g, "R", EIN_UN_RELU, 0, ab, &err);
    int y = pl_graph_add_matmul(g, "Y", r, c, &err);
    assert_true(y >= 0);
    pl_graph_save(g, y, &err);
    return g;
}

static void test_dp_not_worse(void **state)
{
    (void)state;
    pl_graph *g = chain_graph();
    ein_error err = {0};
    for (int p = 1; p <= 8; p++) {
        pl_plan *dp, *gr, *rn;
        assert_int_equal(pl_plan_make(g, p, PL_SELECT_DP, 0, &dp, &err), 0);
        assert_int_equal(pl_plan_make(g, p, PL_SELECT_GREEDY, 0, &gr, &err), 0);
        if (dp->total > gr->total)
            fail_msg("p=%d: dp %.0f worse than greedy %.0f", p, dp->total, gr->total);
        for (uint64_t seed = 1; seed <= 10; seed++) {
            assert_int_equal(pl_plan_make(g, p, PL_SELECT_RANDOM, seed, &rn, &err), 0);
            if (dp->total > rn->total)
                fail_msg("p=%d: dp %.0f worse than random(seed %llu) %.0f", p, dp->total,
                         rn->total, (unsigned long long)seed);
            pl_plan_free(rn);
        }
        /* Every planned op has p function specifications. */
        for (int v = 0; v < g->nnodes; v++)
            if (dp->nodes[v].planned)
                assert_int_equal(dp->nodes[v].spec.nparts, p);
        pl_plan_free(dp);
        pl_plan_free(gr);
    }
    pl_graph_free(g);
}

/* Exhaustive check on the chain at p = 4: no assignment of specs is
 * cheaper than what the DP returns. */
static void test_dp_optimal_exhaustive(void **state)
{
    (void)state;
    pl_graph *g = chain_graph();
    ein_error err = {0};
    int p = 4;
    pl_plan *dp;
    assert_int_equal(pl_plan_make(g, p, PL_SELECT_DP, 0, &dp, &err), 0);
    pl_spec *s[6];
    int n[6];
    for (int v = 3; v < 6; v++)
        assert_int_equal(pl_spec_enumerate(g, v, p, &s[v], &n[v], &err), 0);
    double best = 1e300;
    for (int i = 0; i < n[3]; i++)
        for (int j = 0; j < n[4]; j++)
            for (int k = 0; k < n[5]; k++) {
                pl_tiling t3, t4;
                pl_tiling_of_outputs(&s[3][i], &t3);
                pl_tiling_of_outputs(&s[4][j], &t4);
                const pl_tiling *in3[2] = {NULL, NULL}, *in4[2] = {&t3, NULL}, *in5[2] = {&t4, NULL};
                double total = 0, r, jn, a;
                pl_cost(g, 3, &s[3][i], in3, &r, &jn, &a);
                total += r + jn + a;
                pl_cost(g, 4, &s[4][j], in4, &r, &jn, &a);
                total += r + jn + a;
                pl_cost(g, 5, &s[5][k], in5, &r, &jn, &a);
                total += r + jn + a;
                if (total < best)
                    best = total;
                pl_tiling_clear(&t3);
                pl_tiling_clear(&t4);
            }
    if (dp->total != best)
        fail_msg("dp %.0f, exhaustive optimum %.0f", dp->total, best);
    for (int v = 3; v < 6; v++)
        pl_spec_array_free(s[v], n[v]);
    pl_plan_free(dp);
    pl_graph_free(g);
}

static void test_random_deterministic(void **state)
{
    (void)state;
    pl_graph *g = chain_graph();
    ein_error err = {0};
    pl_plan *a, *b;
    assert_int_equal(pl_plan_make(g, 6, PL_SELECT_RANDOM, 99, &a, &err), 0);
    assert_int_equal(pl_plan_make(g, 6, PL_SELECT_RANDOM, 99, &b, &err), 0);
    assert_true(a->total == b->total);
    for (int v = 0; v < g->nnodes; v++)
        if (a->nodes[v].planned)
            assert_memory_equal(a->nodes[v].spec.counts, b->nodes[v].spec.counts,
                                sizeof(int) * (size_t)a->nodes[v].spec.nidx);
    pl_plan_free(a);
    pl_plan_free(b);
    pl_graph_free(g);
}

static void test_shared_intermediate_refused(void **state)
{
    (void)state;
    ein_error err = {0};
    pl_graph *g = pl_graph_new();
    int64_t s[2] = {8, 8};
    int x = pl_graph_add_input(g, "x", EIN_F32, 2, s, &err);
    int h = pl_graph_add_unary(g, "h", EIN_UN_RELU, 0, x, &err);
    int a = pl_graph_add_unary(g, "a", EIN_UN_EXP, 0, h, &err);
    int b = pl_graph_add_unary(g, "b", EIN_UN_NEG, 0, h, &err);
    int y = pl_graph_add_binary(g, "y", EIN_BIN_ADD, a, b, &err);
    pl_graph_save(g, y, &err);
    pl_plan *plan = NULL;
    assert_int_equal(pl_plan_make(g, 2, PL_SELECT_DP, 0, &plan, &err), EIN_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "tensor 'h' is read by both 'a' and 'b'"));
    assert_null(plan);
    pl_graph_free(g);
}

static void test_no_plan_names_operator(void **state)
{
    (void)state;
    ein_error err = {0};
    pl_graph *g = matmul_graph(1);
    pl_plan *plan = NULL;
    assert_int_equal(pl_plan_make(g, 2, PL_SELECT_DP, 0, &plan, &err), EIN_ENOPLAN);
    assert_non_null(strstr(err.msg, "operator 'C'"));
    pl_graph_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_3d_matmul_p8),
        cmocka_unit_test(test_3d_matmul_p27),
        cmocka_unit_test(test_3d_matmul_p64),
        cmocka_unit_test(test_cost_subcosts),
        cmocka_unit_test(test_dp_not_worse),
        cmocka_unit_test(test_dp_optimal_exhaustive),
        cmocka_unit_test(test_random_deterministic),
        cmocka_unit_test(test_shared_intermediate_refused),
        cmocka_unit_test(test_no_plan_names_operator),
    };
    return cmocka_run_group_tests_name("planner_optimize", tests, NULL, NULL);
}
