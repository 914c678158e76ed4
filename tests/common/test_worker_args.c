/* tests/common/test_worker_args.c — einworker's command line as one value
 * (common/process/ein_worker_args.h): what the encoder writes, written by hand
 * here; the decoder reading it back to the same value; the decoder's
 * refusals (by flag and argument); and every row in --help. */
#include <getopt.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/process/ein_worker_args.h"

/* argv[0..argc) joined by blanks. */
static void joined(const ein_worker_argv *v, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < v->argc; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", i ? " " : "", v->argv[i]);
    assert_null(v->argv[v->argc]);
}

static void test_defaults_are_not_written(void **state)
{
    (void)state;
    ein_worker_args a;
    ein_worker_argv v;
    ein_worker_args_init(&a);
    ein_worker_args_encode(&a, EIN_WARG_ALL, &v);
    assert_int_equal(v.argc, 0);
    assert_int_equal(a.device, -1);
    assert_int_equal(a.iterations, 1);
    assert_true(a.instr_timeout_s == 600);
    assert_ptr_equal(a.backend, ein_backend_get(0));
}

static void test_encode_by_scope(void **state)
{
    (void)state;
    ein_worker_args a;
    ein_worker_argv v;
    char s[1024];
    ein_worker_args_init(&a);
    a.device = 2;
    a.ndevices = 4;
    a.run_dir = "/tmp/r";
    a.run_id = "x1";
    a.coordinator = "ipc:///tmp/r/c";
    a.iterations = 0;
    a.pause = 1;
    a.link_bw = 1.0 / 3;
    a.instr_timeout_s = 2.5;
    a.transport = "tcp";
    ein_worker_args_encode(&a, EIN_WARG_ALL, &v);
    joined(&v, s, sizeof s);
    assert_string_equal(s, "--device 2 --ndevices 4 --run-dir /tmp/r --run-id x1 "
                           "--coordinator ipc:///tmp/r/c --iterations 0 --pause "
                           "--instr-timeout 2.5 --transport tcp --link-bw 0.3333333333333333");
    ein_worker_args_encode(&a, EIN_WARG_RUN, &v);
    joined(&v, s, sizeof s);
    assert_string_equal(s, "--ndevices 4 --iterations 0 --instr-timeout 2.5 --transport tcp "
                           "--link-bw 0.3333333333333333");
    ein_worker_args_encode(&a, EIN_WARG_DEVICE, &v);
    joined(&v, s, sizeof s);
    assert_string_equal(s, "--device 2 --run-dir /tmp/r --run-id x1 --coordinator "
                           "ipc:///tmp/r/c --pause");
}

/* Decode v (after a program name) with getopt, as einworker does. */
static int decode(const ein_worker_argv *v, ein_worker_args *out, ein_error *err)
{
    struct option opts[EIN_WARG_COUNT + 1];
    int n = ein_worker_args_options(EIN_WARG_ALL, opts, 0x100);
    assert_int_equal(n, EIN_WARG_COUNT);
    opts[n] = (struct option){0, 0, 0, 0};
    char *argv[2 * EIN_WARG_COUNT + 2];
    argv[0] = "einworker";
    for (int i = 0; i <= v->argc; i++)
        argv[i + 1] = v->argv[i];
    ein_worker_args_init(out);
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(v->argc + 1, argv, "", opts, NULL)) != -1) {
        if (c < 0x100)
            return -1;
        if (ein_worker_args_set(out, c - 0x100, optarg, err) < 0)
            return -2;
    }
    return 0;
}

static void test_round_trip(void **state)
{
    (void)state;
    ein_worker_args a, b;
    ein_worker_argv v;
    ein_error err = {0};
    ein_worker_args_init(&a);
    a.device = 0;
    a.ndevices = 3;
    a.run_dir = "/r";
    a.run_id = "id";
    a.coordinator = "tcp://127.0.0.1:5";
    a.parent_pid = 4242;
    a.log_path = "w.log";
    a.log_level = 2;
    a.trace_path = "t.json";
    a.backend = ein_backend_get(ein_backend_count() - 1);
    a.gpu = 7;
    a.graphs = 1;
    a.instr_timeout_s = 0;
    a.host_address = "10.0.0.2";
    a.link_bw = 12.5e9;
    a.link_lat = 2.7e-6;
    ein_worker_args_encode(&a, EIN_WARG_ALL, &v);
    assert_int_equal(decode(&v, &b, &err), 0);
#define EIN_WARG(field, kind, flag, scope, metavar, def, help) EQ_##kind(a.field, b.field);
#define EQ_INT(x, y) assert_int_equal(x, y)
#define EQ_LONG(x, y) assert_int_equal(x, y)
#define EQ_FLAG(x, y) assert_int_equal(x, y)
#define EQ_DOUBLE(x, y) assert_true((x) == (y))
#define EQ_BACKEND(x, y) assert_ptr_equal(x, y)
#define EQ_STR(x, y) ((x) ? assert_string_equal(x, y) : assert_null(y))
#include "common/process/ein_worker_args.def"
#undef EIN_WARG
}

static void test_refusals(void **state)
{
    (void)state;
    ein_worker_args a;
    ein_error err = {0};
    ein_worker_args_init(&a);
    assert_int_equal(ein_worker_args_set(&a, EIN_WARG_ID_device, "2x", &err), EIN_EINVAL);
    assert_string_equal(err.msg, "--device '2x': expected an integer");
    assert_int_equal(ein_worker_args_set(&a, EIN_WARG_ID_device, "", &err), EIN_EINVAL);
    assert_int_equal(ein_worker_args_set(&a, EIN_WARG_ID_device, "99999999999", &err),
                     EIN_EINVAL);
    assert_int_equal(ein_worker_args_set(&a, EIN_WARG_ID_link_bw, "nan", &err), EIN_EINVAL);
    assert_string_equal(err.msg, "--link-bw 'nan': expected a number");
    assert_int_equal(ein_worker_args_set(&a, EIN_WARG_ID_instr_timeout_s, "1s", &err),
                     EIN_EINVAL);
    assert_int_equal(ein_worker_args_set(&a, EIN_WARG_ID_backend, "tpu", &err), EIN_EINVAL);
    char want[200];
    snprintf(want, sizeof want, "--backend 'tpu': expected %s", ein_backend_names());
    assert_string_equal(err.msg, want);
    assert_int_equal(ein_worker_args_set(&a, EIN_WARG_COUNT, "1", &err), EIN_EINVAL);
    /* nothing refused was stored */
    assert_int_equal(a.device, -1);
    assert_true(a.link_bw == 0 && a.instr_timeout_s == 600);
    assert_ptr_equal(a.backend, ein_backend_get(0));
}

static void test_usage_names_every_row(void **state)
{
    (void)state;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    fputc('\n', f);
    ein_worker_args_usage(f, EIN_WARG_ALL);
    fclose(f);
    for (int i = 0; i < EIN_WARG_COUNT; i++) {
        const ein_warg_row *r = ein_worker_args_row(i);
        char head[64];
        snprintf(head, sizeof head, "\n  --%s%s%s ", r->flag, r->metavar ? " " : "",
                 r->metavar ? r->metavar : "");
        assert_non_null(strstr(text, head));
    }
    assert_null(ein_worker_args_row(EIN_WARG_COUNT));
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_are_not_written),
        cmocka_unit_test(test_encode_by_scope),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_usage_names_every_row),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
