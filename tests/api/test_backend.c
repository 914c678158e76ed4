/* tests/api/test_backend.c — the kernel backend registry through the public
 * API (include/einsummable/einsummable.h, "Kernel backends"): the rows
 * and their lookups, presence under $EIN_GPU_VISIBLE (the stand-in for a
 * GPU machine), the automatic choice, and a compile or session that names
 * a backend there is no row for, refused by name. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "config.h"
#include "include/einsummable/einsummable.h"

static void test_rows(void **state)
{
    (void)state;
    int n = ein_backend_count();
    assert_int_equal(n, 2);
    /* Row 0 is the default, CPU devices; its index is saved in programs. */
    const ein_backend_info *cpu = ein_backend_get(0), *cuda = ein_backend_get(1);
    assert_non_null(cpu);
    assert_non_null(cuda);
    assert_string_equal(cpu->name, "cpu");
    assert_string_equal(cpu->worker, "einworker");
    assert_int_equal(cpu->built, 1);
    assert_int_equal(cpu->probed, 0);
    assert_int_equal(cpu->host_visible, 1);
    assert_int_equal(cpu->graphs_default, 0);
    assert_int_equal(cpu->auto_pick, 0);
    assert_null(cpu->host_times);
    assert_string_equal(cuda->name, "cuda");
    assert_string_equal(cuda->worker, "einworker-cuda");
#ifdef HAVE_CUDA
    assert_int_equal(cuda->built, 1);
#else
    assert_int_equal(cuda->built, 0);
#endif
    assert_int_equal(cuda->probed, 1);
    assert_int_equal(cuda->host_visible, 0);
    assert_int_equal(cuda->graphs_default, 1);
    assert_int_equal(cuda->auto_pick, 1);
    assert_non_null(cuda->host_times);
    for (int i = 0; i < n; i++) {
        const ein_backend_info *b = ein_backend_get(i);
        assert_ptr_equal(ein_backend_find(b->name), b);
        assert_int_equal(ein_backend_index(b), i);
        for (int j = 0; j < i; j++)
            assert_string_not_equal(ein_backend_get(j)->name, b->name);
    }
    assert_null(ein_backend_get(-1));
    assert_null(ein_backend_get(n));
    assert_null(ein_backend_find("tpu"));
    assert_null(ein_backend_find("CPU"));
    assert_null(ein_backend_find(NULL));
    ein_backend_info copy = *cpu; /* the same fields, not a row */
    assert_int_equal(ein_backend_index(&copy), -1);
    assert_string_equal(ein_backend_names(), "cpu or cuda");
}

static void test_present(void **state)
{
    (void)state;
    ein_error err = {0};
    char why[64];
    const ein_backend_info *cpu = ein_backend_find("cpu"), *cuda = ein_backend_find("cuda");
    assert_int_equal(setenv("EIN_GPU_VISIBLE", "0", 1), 0);
    assert_int_equal(ein_backend_present(cpu, why, sizeof why, &err), 1);
    assert_int_equal(ein_backend_present(cuda, why, sizeof why, &err), 0);
    assert_string_equal(why, "no GPU visible");
    assert_int_equal(ein_backend_auto(why, sizeof why, &err), 0);
    assert_string_equal(why, "no GPU visible");
    assert_int_equal(setenv("EIN_GPU_VISIBLE", "1", 1), 0);
#ifdef HAVE_CUDA
    assert_int_equal(ein_backend_present(cuda, why, sizeof why, &err), 1);
    assert_string_equal(why, "GPUs visible");
    assert_int_equal(ein_backend_auto(why, sizeof why, &err), 1);
#else
    assert_int_equal(ein_backend_present(cuda, why, sizeof why, &err), 0);
    assert_string_equal(why, "built without CUDA");
    assert_int_equal(ein_backend_auto(why, sizeof why, &err), 0);
#endif
    assert_int_equal(setenv("EIN_GPU_VISIBLE", "maybe", 1), 0);
    assert_int_equal(ein_backend_present(cuda, why, sizeof why, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "$EIN_GPU_VISIBLE 'maybe': expected 0 or 1"));
    assert_int_equal(ein_backend_auto(why, sizeof why, &err), EIN_EINVAL);
    ein_backend_info copy = *cuda;
    assert_int_equal(ein_backend_present(&copy, why, sizeof why, &err), EIN_EINVAL);
    assert_int_equal(setenv("EIN_GPU_VISIBLE", "0", 1), 0);
}

static ein_graph *ffn(void)
{
    ein_error err = {0};
    ein_graph *g = ein_graph_create();
    assert_non_null(g);
    ein_tensor x = ein_graph_insert_tensor(g, "x", ein_tensor_desc_2d(8, 4, EIN_F32), &err);
    ein_tensor w = ein_graph_insert_tensor(g, "w", ein_tensor_desc_2d(4, 8, EIN_F32), &err);
    ein_tensor y = ein_graph_matmul(g, "y", x, w, &err);
    assert_int_equal(ein_graph_save(g, y, &err), 0);
    return g;
}

/* A backend with no row is refused by name; "cpu" compiles as NULL does. */
static void test_compile_names(void **state)
{
    (void)state;
    ein_graph *g = ffn();
    ein_compile_options o;
    ein_compile_options_init(&o);
    o.plan_only = 1;
    ein_compiled *c = NULL;
    ein_error err = {0};
    o.backend = "tpu";
    assert_int_equal(ein_compile(g, 2, &o, &c, &err), EIN_EINVAL);
    assert_null(c);
    assert_non_null(strstr(err.msg, "backend 'tpu' (expected cpu or cuda)"));
    o.backend = "cpu";
    assert_int_equal(ein_compile(g, 2, &o, &c, &err), 0);
    assert_string_equal(ein_compiled_topology(c, NULL), "host");
    ein_compiled_free(c);
    ein_graph_destroy(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows),
        cmocka_unit_test(test_present),
        cmocka_unit_test(test_compile_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
