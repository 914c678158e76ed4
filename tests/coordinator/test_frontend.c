/* tests/coordinator/test_frontend.c — coordinator/ein_frontend.h, the
 * front ends' calls: flag values, the compile with its extra knobs and the
 * reports printed from it (the same text einplan prints), bad arguments
 * refused without a crash, and the input and output helpers' bounds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/ein_frontend.h"

/* A two-operator program, parsed from text. */
static ein_graph *chain(void)
{
    char path[] = "/tmp/ein-fe-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    fputs("dims t=64 d=32 e=16 f=8\ninput x[t, d]\ninput w[d, e]\ninput s[e, f]\n"
          "y = matmul(x, w)\nz = matmul(y, s)\nsave z\n", f);
    fclose(f);
    ein_graph *g = NULL;
    ein_error err = {0};
    int rc = ein_graph_parse_file(path, &g, &err);
    remove(path);
    if (rc < 0)
        fail_msg("parse: %s", err.msg);
    return g;
}

static void test_choices(void **state)
{
    (void)state;
    assert_int_equal(ein_fe_choice_check(EIN_FE_SELECTOR, "greedy"), 0);
    assert_int_equal(ein_fe_choice_check(EIN_FE_SELECTOR, "best"), EIN_EINVAL);
    assert_int_equal(ein_fe_choice_check(EIN_FE_OBJECTIVE, "time"), 0);
    assert_int_equal(ein_fe_choice_check(EIN_FE_OBJECTIVE, "speed"), EIN_EINVAL);
    assert_int_equal(ein_fe_choice_check(EIN_FE_PARTIALS, "native"), 0);
    assert_int_equal(ein_fe_choice_check(EIN_FE_STRATEGY, "megatron"), 0);
    assert_int_equal(ein_fe_choice_check(EIN_FE_STRATEGY, "zero"), EIN_EINVAL);
    assert_int_equal(ein_fe_choice_check(EIN_FE_SELECTOR, NULL), EIN_EINVAL);
    int chunks = 0;
    double bytes = 0;
    ein_error err = {0};
    assert_int_equal(ein_fe_parse_exchange_chunks("auto", &chunks, &err), 0);
    assert_int_equal(chunks, EIN_EXCHANGE_CHUNKS_AUTO);
    assert_int_equal(ein_fe_parse_exchange_chunks("lots", &chunks, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "lots"));
    assert_int_equal(ein_fe_parse_memory_limit("2KiB", &bytes, &err), 0);
    assert_true(bytes == 2048.0);
    assert_int_equal(ein_fe_parse_memory_limit("-1GB", &bytes, &err), EIN_EINVAL);
}

/* Compile plan-only and print the plan every way; the text has the
 * operators and the total; the info says how it was made. */
static void test_compile_and_print(void **state)
{
    (void)state;
    ein_graph *g = chain();
    ein_compile_options co;
    ein_compile_options_init(&co);
    co.plan_only = 1;
    co.objective = "comm";
    ein_fe_compile_extra x = {.plan_work = -1};
    ein_compiled *c = NULL;
    ein_error err = {0};
    if (ein_fe_compile(g, 4, &co, &x, &c, &err) < 0)
        fail_msg("compile: %s", err.msg);
    ein_fe_info info;
    ein_fe_compiled_info(c, &info);
    assert_int_equal(info.rewritten, 0);
    assert_int_equal(info.time_objective, 0);
    assert_int_equal(info.selector_dp, 1);
    char *buf = NULL;
    size_t len = 0;
    for (int fmt = EIN_FE_PLAN_TEXT; fmt <= EIN_FE_PLAN_EXPLAIN; fmt++) {
        FILE *f = open_memstream(&buf, &len);
        assert_non_null(f);
        assert_int_equal(ein_fe_print_plan(f, c, "chain.ein", (ein_fe_plan_format)fmt), 0);
        fclose(f);
        assert_non_null(strstr(buf, "z"));
        if (fmt == EIN_FE_PLAN_TEXT)
            assert_non_null(strstr(buf, "total cost:"));
        if (fmt == EIN_FE_PLAN_JSON)
            assert_non_null(strstr(buf, "\"program\": \"chain.ein\""));
        if (fmt == EIN_FE_PLAN_DOT)
            assert_non_null(strstr(buf, "digraph plan"));
        if (fmt == EIN_FE_PLAN_EXPLAIN)
            assert_non_null(strstr(buf, "plan for 4 devices"));
        free(buf);
        buf = NULL;
    }
    /* A saved tensor's devices; none for a name that is not there. */
    assert_true(ein_fe_output_devices(c, "z") != 0);
    assert_true(ein_fe_output_devices(c, "nothing") == 0);
    ein_compiled_free(c);
    ein_graph_destroy(g);
}

/* Simulate a compiled program and print its report and trace. */
static void test_simulate(void **state)
{
    (void)state;
    ein_graph *g = chain();
    ein_compile_options co;
    ein_compile_options_init(&co);
    co.objective = "comm";
    co.search_cap_ms = -1;
    ein_fe_compile_extra x = {.predict_only = 1};
    ein_compiled *c = NULL;
    ein_error err = {0};
    if (ein_fe_compile(g, 2, &co, &x, &c, &err) < 0)
        fail_msg("compile: %s", err.msg);
    ein_fe_sim *r = NULL;
    if (ein_fe_simulate(c, &r, &err) < 0)
        fail_msg("simulate: %s", err.msg);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_int_equal(ein_fe_print_sim(f, c, r, 1), 0);
    assert_int_equal(ein_fe_write_sim_trace(f, c, r), 0);
    fclose(f);
    assert_non_null(strstr(buf, "\"time_s\": "));
    free(buf);
    ein_fe_sim_free(r);
    ein_fe_sim_free(NULL);
    ein_compiled_free(c);
    ein_graph_destroy(g);
}

/* Bounds: out-of-range tensors and a full output list are refused, not
 * written past; a calibration never measured is not written. */
static void test_bounds(void **state)
{
    (void)state;
    ein_graph *g = chain();
    ein_error err = {0};
    ein_fe_inputs *in = NULL;
    assert_int_equal(ein_fe_inputs_create(g, &in, &err), 0);
    ein_fe_inputs_set_npy(in, -1, "a.npy");
    ein_fe_inputs_set_npy(in, 1000, "a.npy");
    ein_fe_inputs_set_npy(in, 0, "x.npy");
    assert_int_equal(ein_fe_inputs_has_value(in, 0), 1);
    assert_int_equal(ein_fe_inputs_has_value(in, 1), 0);
    assert_int_equal(ein_fe_inputs_has_value(in, 1000), 0);
    assert_int_equal(ein_fe_tensor_is_state(g, 0), 0);
    assert_int_equal(ein_fe_tensor_is_state(g, -3), 0);
    ein_fe_inputs_free(in);
    ein_fe_inputs_free(NULL);

    ein_fe_outputs *o = NULL;
    ein_tensor_desc d = ein_tensor_desc_2d(4, 4, EIN_F32);
    assert_int_equal(ein_fe_outputs_create(1, &o, &err), 0);
    assert_int_equal(ein_fe_outputs_add(o, "z", "/tmp/ein-fe-z.npy", &d), 0);
    assert_int_equal(ein_fe_outputs_add(o, "y", "/tmp/ein-fe-y.npy", &d), EIN_EINVAL);
    assert_null(ein_fe_outputs_tmp(o, 0));  /* named by prepare only */
    assert_null(ein_fe_outputs_tmp(o, 5));
    ein_fe_outputs_free(o);
    ein_fe_outputs_free(NULL);

    ein_fe_calibration *cal = NULL;
    assert_true(ein_fe_calibration_create("no-such-topology", &cal, &err) < 0);
    assert_null(cal);
    assert_int_equal(ein_fe_calibration_create("host", &cal, &err), 0);
    assert_int_equal(ein_fe_calibration_write(stdout, cal, "test"), EIN_EINVAL);
    ein_fe_calibration_free(cal);
    ein_graph_destroy(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_choices),
        cmocka_unit_test(test_compile_and_print),
        cmocka_unit_test(test_simulate),
        cmocka_unit_test(test_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
