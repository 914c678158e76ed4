/* tests/api/test_session.c — the public compile and session API
 * (include/einsummable/einsummable.h), linked against libeinsummable only:
 * the FFN compiled for 1, 2 and 4 CPU devices and run several times in one
 * session with new inputs (some changed, some resident), against a double
 * reference; bad calls; a worker crash mid-session; nothing left behind. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "include/einsummable/einsummable.h"
#include "tests/e2e/e2e_util.h"

enum { T = 12, D = 8, F = 16 };

static ein_graph *ffn(void)
{
    ein_error err = {0};
    ein_graph *g = ein_graph_create();
    assert_non_null(g);
    ein_tensor x = ein_graph_insert_tensor(g, "x", ein_tensor_desc_2d(T, D, EIN_F32), &err);
    ein_tensor w1 = ein_graph_insert_tensor(g, "w1", ein_tensor_desc_2d(D, F, EIN_F32), &err);
    ein_tensor w2 = ein_graph_insert_tensor(g, "w2", ein_tensor_desc_2d(F, D, EIN_F32), &err);
    ein_tensor h = ein_graph_matmul(g, "h", x, w1, &err);
    ein_tensor r = ein_graph_unary(g, "r", "relu", 0.0, h, &err);
    ein_tensor y = ein_graph_matmul(g, "y", r, w2, &err);
    assert_true(y >= 0);
    assert_int_equal(ein_graph_save(g, y, &err), 0);
    return g;
}

static void fill(float *a, int n, unsigned seed)
{
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        a[i] = (float)((seed >> 16) % 2001) / 1000.0f - 1.0f;
    }
}

/* y = relu(x w1) w2 in double; the largest |y - got|. */
static double ffn_error(const float *x, const float *w1, const float *w2, const float *got)
{
    double dx[T * D], d1[D * F], d2[F * D], h[T * F], y[T * D], worst = 0;
    for (int i = 0; i < T * D; i++) dx[i] = x[i];
    for (int i = 0; i < D * F; i++) d1[i] = w1[i];
    for (int i = 0; i < F * D; i++) d2[i] = w2[i];
    e2e_matmul_ref(dx, d1, h, T, D, F);
    for (int i = 0; i < T * F; i++) h[i] = h[i] > 0 ? h[i] : 0;
    e2e_matmul_ref(h, d2, y, T, F, D);
    for (int i = 0; i < T * D; i++) {
        double e = fabs(y[i] - got[i]);
        if (!(e <= worst))
            worst = e; /* NaN sticks */
    }
    return worst;
}

static void setup_env(void)
{
    setenv("EINWORKER", e2e_bin("einworker"), 1);
    e2e_scratch();
}

static void check_no_leftovers(void)
{
    char what[512];
    int n = e2e_leftovers(what, sizeof what);
    if (n)
        fail_msg("%d leftovers: %s", n, what);
}

static void runs_on(int ndev)
{
    ein_error err = {0};
    ein_graph *g = ffn();
    ein_compiled *c = NULL;
    assert_int_equal(ein_compile(g, ndev, NULL, &c, &err), 0);
    ein_graph_destroy(g); /* the compiled program keeps its own copy */
    assert_int_equal(ein_compiled_ndevices(c), ndev);
    ein_session *s = NULL;
    if (ein_session_open(c, NULL, &s, &err) < 0)
        fail_msg("open: %s", err.msg);
    float x[T * D], w1[D * F], w2[F * D], y[T * D];
    for (int run = 0; run < 4; run++) {
        /* run 0 sets all three; 1 only x; 2 only w2; 3 nothing (same as 2) */
        if (run == 0 || run == 1)
            fill(x, T * D, 11u + (unsigned)run);
        if (run == 0)
            fill(w1, D * F, 7u);
        if (run == 0 || run == 2)
            fill(w2, F * D, 5u + (unsigned)run);
        if ((run == 0 || run == 1) && ein_session_set_input(s, "x", x, sizeof x, &err) < 0)
            fail_msg("set x: %s", err.msg);
        if (run == 0)
            assert_int_equal(ein_session_set_input(s, "w1", w1, sizeof w1, &err), 0);
        if (run == 0 || run == 2)
            assert_int_equal(ein_session_set_input(s, "w2", w2, sizeof w2, &err), 0);
        ein_run_stats st;
        if (ein_session_run(s, &st, &err) < 0)
            fail_msg("run %d on %d devices: %s", run, ndev, err.msg);
        assert_int_equal(st.ndev, ndev);
        memset(y, 0xff, sizeof y); /* NaN until read */
        if (ein_session_get_output(s, "y", y, sizeof y, NULL, &err) < 0)
            fail_msg("get y: %s", err.msg);
        double e = ffn_error(x, w1, w2, y);
        if (!(e <= 1e-4))
            fail_msg("run %d on %d devices: max error %g", run, ndev, e);
    }
    assert_int_equal(ein_session_close(s, &err), 0);
    ein_compiled_free(c);
    check_no_leftovers();
}

static void test_runs_1(void **state) { (void)state; runs_on(1); }
static void test_runs_2(void **state) { (void)state; runs_on(2); }
static void test_runs_4(void **state) { (void)state; runs_on(4); }

static void test_bad_calls(void **state)
{
    (void)state;
    ein_error err = {0};
    ein_graph *g = ffn();
    ein_compiled *c = NULL;
    assert_int_equal(ein_compile(g, 0, NULL, &c, &err), EIN_EINVAL);
    assert_int_equal(ein_compile(g, 2, NULL, &c, &err), 0);
    ein_session *s = NULL;
    assert_int_equal(ein_session_open(c, NULL, &s, &err), 0);
    float x[T * D] = {0};
    assert_int_equal(ein_session_set_input(s, "nope", x, sizeof x, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "nope"));
    assert_int_equal(ein_session_set_input(s, "h", x, sizeof x, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "computed"));
    assert_int_equal(ein_session_set_input(s, "x", x, sizeof x - 4, &err), EIN_ESHAPE);
    assert_non_null(strstr(err.msg, "[12, 8]"));
    assert_int_equal(ein_session_get_output(s, "y", x, sizeof x, NULL, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "no run"));
    assert_int_equal(ein_session_get_output(s, "h", x, sizeof x, NULL, &err), EIN_EINVAL);
    size_t bytes = 0;
    assert_int_equal(ein_session_get_output(s, "y", NULL, 0, &bytes, &err), 0);
    assert_int_equal(bytes, sizeof(float) * T * D);
    /* A .npy of the wrong shape is refused when set, not at the run. */
    const char *p = e2e_write_file("bad.npy", "not an npy");
    assert_int_equal(ein_session_set_input_npy(s, "x", p, &err) < 0, 1);
    /* Inputs never set are generated: two runs give the same output. */
    float y1[T * D], y2[T * D];
    assert_int_equal(ein_session_run(s, NULL, &err), 0);
    assert_int_equal(ein_session_get_output(s, "y", y1, sizeof y1, NULL, &err), 0);
    assert_int_equal(ein_session_run(s, NULL, &err), 0);
    assert_int_equal(ein_session_get_output(s, "y", y2, sizeof y2, NULL, &err), 0);
    assert_memory_equal(y1, y2, sizeof y1);
    int finite = 1, nonzero = 0;
    for (int i = 0; i < T * D; i++) {
        finite &= isfinite(y1[i]);
        nonzero += y1[i] != 0.0f;
    }
    assert_true(finite);
    assert_true(nonzero > 0); /* the inputs were generated, not left zero */
    assert_int_equal(ein_session_close(s, &err), 0);
    /* A transport between hosts on a one-host session means nothing:
     * refused naming it (worker/wk_xport.h). */
    ein_session_options so;
    ein_session_options_init(&so);
    so.transport = "tcp";
    s = NULL;
    assert_int_equal(ein_session_open(c, &so, &s, &err), EIN_EINVAL);
    assert_null(s);
    assert_non_null(strstr(err.msg, "transport tcp"));
    ein_compiled_free(c);
    /* plan_only values cannot run */
    ein_compile_options o;
    ein_compile_options_init(&o);
    o.plan_only = 1;
    assert_int_equal(ein_compile(g, 2, &o, &c, &err), 0);
    assert_int_equal(ein_session_open(c, NULL, &s, &err), EIN_EINVAL);
    ein_compiled_free(c);
    ein_graph_destroy(g);
    check_no_leftovers();
}

static void test_worker_crash(void **state)
{
    (void)state;
    ein_error err = {0};
    ein_graph *g = ffn();
    ein_compiled *c = NULL;
    assert_int_equal(ein_compile(g, 2, NULL, &c, &err), 0);
    ein_session *s = NULL;
    setenv("EIN_FAULT", "1:crash", 1);
    int rc = ein_session_open(c, NULL, &s, &err);
    unsetenv("EIN_FAULT");
    assert_int_equal(rc, 0);
    rc = ein_session_run(s, NULL, &err);
    assert_int_equal(rc, EIN_EWORKER);
    if (!strstr(err.msg, "device 1"))
        fail_msg("the report does not name device 1: %s", err.msg);
    /* The session is closed for runs, with the reason. */
    assert_int_equal(ein_session_run(s, NULL, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "device 1"));
    assert_int_equal(ein_session_close(s, &err), 0);
    ein_compiled_free(c);
    ein_graph_destroy(g);
    check_no_leftovers();
}

static void test_explain(void **state)
{
    (void)state;
    ein_error err = {0};
    ein_graph *g = ffn();
    ein_compiled *c = NULL;
    assert_int_equal(ein_compile(g, 4, NULL, &c, &err), 0);
    char *text = ein_compiled_explain(c, 1);
    assert_non_null(text);
    assert_non_null(strstr(text, "host (built in), sized to 4 CPU devices"));
    /* every exchange body is in the text, and each parses as ExProg */
    assert_true(ein_compiled_nexchanges(c) > 0);
    for (int i = 0; i < ein_compiled_nexchanges(c); i++) {
        const char *t, *k, *body;
        assert_int_equal(ein_compiled_exchange(c, i, &t, &k, &body), 0);
        assert_non_null(strstr(text, body));
        assert_non_null(strstr(body, "GPUS"));
    }
    assert_int_equal(ein_compiled_exchange(c, -1, NULL, NULL, NULL), EIN_EINVAL);
    free(text);
    ein_compiled_free(c);
    ein_graph_destroy(g);
}

int main(void)
{
    setup_env();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_runs_1),
        cmocka_unit_test(test_runs_2),
        cmocka_unit_test(test_runs_4),
        cmocka_unit_test(test_bad_calls),
        cmocka_unit_test(test_worker_crash),
        cmocka_unit_test(test_explain),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    e2e_scratch_remove();
    return rc;
}
