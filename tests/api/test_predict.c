/* tests/api/test_predict.c — ein_compiled_predict (einsummable.h): the
 * simulator's prediction of a compiled program, through the public API
 * only. Per device, compute + communication + idle is the makespan and
 * the peak memory is its program's segment; the prediction is the same
 * every time; splitting a large FFN over 4 devices cuts each device's
 * compute; bad calls fail with a message. Nothing runs (no worker). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "include/einsummable/einsummable.h"

static ein_graph *ffn(int64_t t, int64_t d, int64_t f)
{
    ein_error err = {0};
    ein_graph *g = ein_graph_create();
    assert_non_null(g);
    ein_tensor x = ein_graph_insert_tensor(g, "x", ein_tensor_desc_2d(t, d, EIN_F32), &err);
    ein_tensor w1 = ein_graph_insert_tensor(g, "w1", ein_tensor_desc_2d(d, f, EIN_F32), &err);
    ein_tensor w2 = ein_graph_insert_tensor(g, "w2", ein_tensor_desc_2d(f, d, EIN_F32), &err);
    ein_tensor h = ein_graph_matmul(g, "h", x, w1, &err);
    ein_tensor r = ein_graph_unary(g, "r", "relu", 0.0, h, &err);
    ein_tensor y = ein_graph_matmul(g, "y", r, w2, &err);
    assert_true(y >= 0);
    assert_int_equal(ein_graph_save(g, y, &err), 0);
    return g;
}

static ein_compiled *compile(const ein_graph *g, int ndev, int plan_only)
{
    ein_error err = {0};
    ein_compile_options o;
    ein_compile_options_init(&o);
    o.naive_exchanges = 1;
    o.plan_only = plan_only;
    ein_compiled *c = NULL;
    if (ein_compile(g, ndev, &o, &c, &err) < 0)
        fail_msg("compile for %d devices: %s", ndev, err.msg);
    return c;
}

static void check_consistent(const ein_compiled *c, const ein_prediction *p)
{
    int ndev = ein_compiled_ndevices(c);
    assert_int_equal(p->ndev, ndev);
    assert_true(p->makespan > 0 && p->time >= p->makespan);
    assert_true(p->calibration[0] != '\0');
    for (int d = 0; d < ndev; d++) {
        double sum = p->dev[d].compute + p->dev[d].comm + p->dev[d].idle;
        if (!(fabs(sum - p->makespan) <= 1e-9 + 1e-9 * p->makespan))
            fail_msg("device %d: compute %g + comm %g + idle %g != makespan %g", d,
                     p->dev[d].compute, p->dev[d].comm, p->dev[d].idle, p->makespan);
        assert_true(p->dev[d].compute > 0 && p->dev[d].comm >= 0 && p->dev[d].idle >= 0);
        assert_true(p->dev[d].end <= p->makespan * (1 + 1e-12));
        uint64_t seg = 0;
        assert_int_equal(ein_compiled_program(c, d, NULL, NULL, &seg), 0);
        assert_true(seg > 0);
        if (p->dev[d].peak_bytes != seg)
            fail_msg("device %d: peak %llu bytes, its program's segment %llu", d,
                     (unsigned long long)p->dev[d].peak_bytes, (unsigned long long)seg);
    }
}

static void test_prediction_is_consistent_and_deterministic(void **state)
{
    (void)state;
    ein_graph *g = ffn(64, 32, 96);
    for (int ndev = 1; ndev <= 4; ndev++) {
        ein_compiled *c = compile(g, ndev, 0);
        ein_prediction a, b;
        ein_error err = {0};
        memset(&a, 0x55, sizeof a);
        memset(&b, 0xaa, sizeof b);
        assert_int_equal(ein_compiled_predict(c, NULL, &a, &err), 0);
        assert_int_equal(ein_compiled_predict(c, NULL, &b, &err), 0);
        check_consistent(c, &a);
        assert_memory_equal(&a, &b, sizeof a);
        ein_compiled_free(c);
    }
    ein_graph_destroy(g);
}

/* A large FFN split 4 ways: every device computes less than one device
 * computing all of it. */
static void test_four_devices_share_the_compute(void **state)
{
    (void)state;
    ein_graph *g = ffn(512, 256, 1024);
    ein_compiled *c1 = compile(g, 1, 0), *c4 = compile(g, 4, 0);
    ein_prediction p1, p4;
    ein_error err = {0};
    assert_int_equal(ein_compiled_predict(c1, "host", &p1, &err), 0);
    assert_int_equal(ein_compiled_predict(c4, "host", &p4, &err), 0);
    check_consistent(c4, &p4);
    for (int d = 0; d < 4; d++)
        if (!(p4.dev[d].compute < p1.dev[0].compute))
            fail_msg("device %d of 4 computes %g s, one device alone %g s", d,
                     p4.dev[d].compute, p1.dev[0].compute);
    ein_compiled_free(c1);
    ein_compiled_free(c4);
    ein_graph_destroy(g);
}

static void test_bad_calls(void **state)
{
    (void)state;
    ein_graph *g = ffn(16, 8, 16);
    ein_compiled *c = compile(g, 2, 0), *planned = compile(g, 2, 1);
    ein_prediction p;
    ein_error err = {0};
    assert_int_equal(ein_compiled_predict(NULL, NULL, &p, &err), EIN_EINVAL);
    assert_int_equal(ein_compiled_predict(c, NULL, NULL, &err), EIN_EINVAL);
    err = (ein_error){0};
    assert_int_equal(ein_compiled_predict(planned, NULL, &p, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "plan_only"));
    err = (ein_error){0};
    assert_true(ein_compiled_predict(c, "/nonexistent/calibration.cal", &p, &err) < 0);
    assert_non_null(strstr(err.msg, "predict"));
    ein_compiled_free(c);
    ein_compiled_free(planned);
    ein_graph_destroy(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prediction_is_consistent_and_deterministic),
        cmocka_unit_test(test_four_devices_share_the_compute),
        cmocka_unit_test(test_bad_calls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
