/* tests/worker/test_wk_ucx.c — the deadline of a block between hosts
 * (worker/wk_ucx.h): WK_UCX_MARGIN x (latency + bytes / bandwidth) +
 * WK_UCX_SLACK_S, computed here by hand for a few links and sizes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>

#include "worker/wk_ucx.h"

static void near(double got, double want)
{
    if (!(fabs(got - want) <= 1e-9 * (1 + fabs(want))))
        fail_msg("deadline %.12g, expected %.12g", got, want);
}

/* 64 MiB over 1 Gbit/s (125 MB/s) with 50 us: 4 x 0.53692 s + 2 s. */
static void large_block_on_a_slow_link(void **state)
{
    (void)state;
    size_t b = (size_t)64 << 20;
    near(wk_ucx_deadline_for(b, 125e6, 50e-6), 4 * (50e-6 + 67108864.0 / 125e6) + 2.0);
    near(wk_ucx_deadline_for(b, 125e6, 50e-6), 4.147683648); /* by hand */
    /* 256 MiB over one 400 Gbit/s NIC (50 GB/s), 15 us. */
    near(wk_ucx_deadline_for((size_t)256 << 20, 50e9, 15e-6),
         4 * (15e-6 + 268435456.0 / 50e9) + 2.0);
}

/* A small block is the slack and the latency: the heartbeats' margin. */
static void small_block_is_slack(void **state)
{
    (void)state;
    near(wk_ucx_deadline_for(0, 125e6, 0), WK_UCX_SLACK_S);
    near(wk_ucx_deadline_for(4096, 50e9, 15e-6), 2.0 + 4 * (15e-6 + 4096 / 50e9));
}

/* Twice the bytes, twice the model's time (the margin scales it). */
static void scales_with_bytes(void **state)
{
    (void)state;
    double a = wk_ucx_deadline_for((size_t)32 << 20, 117.7e6, 0);
    double b = wk_ucx_deadline_for((size_t)64 << 20, 117.7e6, 0);
    near(b - WK_UCX_SLACK_S, 2 * (a - WK_UCX_SLACK_S));
}

/* No link in the model (0, negative, NaN, infinite bandwidth): no deadline;
 * a latency that is not a non-negative number counts as 0. */
static void no_link_no_deadline(void **state)
{
    (void)state;
    assert_true(wk_ucx_deadline_for(1 << 20, 0, 1e-3) == 0);
    assert_true(wk_ucx_deadline_for(1 << 20, -1, 1e-3) == 0);
    assert_true(wk_ucx_deadline_for(1 << 20, NAN, 1e-3) == 0);
    assert_true(wk_ucx_deadline_for(1 << 20, INFINITY, 1e-3) == 0);
    near(wk_ucx_deadline_for(1 << 20, 1e9, NAN), 4 * (1048576 / 1e9) + 2.0);
    near(wk_ucx_deadline_for(1 << 20, 1e9, -5), 4 * (1048576 / 1e9) + 2.0);
}

/* wk_ucx_set_link sets what wk_ucx_deadline uses; 0 turns it off. */
static void set_link_is_used(void **state)
{
    (void)state;
    wk_ucx_set_link(125e6, 50e-6);
    near(wk_ucx_deadline((size_t)64 << 20), wk_ucx_deadline_for((size_t)64 << 20, 125e6, 50e-6));
    wk_ucx_set_link(0, 50e-6);
    assert_true(wk_ucx_deadline((size_t)64 << 20) == 0);
    wk_ucx_set_link(NAN, NAN);
    assert_true(wk_ucx_deadline(1) == 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(large_block_on_a_slow_link),
        cmocka_unit_test(small_block_is_slack),
        cmocka_unit_test(scales_with_bytes),
        cmocka_unit_test(no_link_no_deadline),
        cmocka_unit_test(set_link_is_used),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
