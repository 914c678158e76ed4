/* tests/planner/test_api.c — the public C API (include/einsummable/einsummable.h).
 *
 * The FFN built through the API plans exactly like examples/ffn.ein (the
 * parser is built on the same calls); errors come back as codes with
 * messages; a transformer block can be built and planned. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "include/einsummable/einsummable.h"

static ein_graph *ffn(void)
{
    ein_error err = {0};
    ein_graph *g = ein_graph_create();
    ein_tensor x = ein_graph_insert_tensor(g, "x", ein_tensor_desc_2d(8192, 4096, EIN_F32), &err);
    ein_tensor w1 = ein_graph_insert_tensor(g, "w1", ein_tensor_desc_2d(4096, 14336, EIN_F32), &err);
    ein_tensor w2 = ein_graph_insert_tensor(g, "w2", ein_tensor_desc_2d(14336, 4096, EIN_F32), &err);
    ein_tensor act = ein_graph_matmul(g, "act", x, w1, &err);
    ein_tensor h = ein_graph_unary(g, "hidden", "relu", 0.0, act, &err);
    ein_tensor y = ein_graph_matmul(g, "y", h, w2, &err);
    assert_true(y >= 0);
    assert_int_equal(ein_graph_save(g, y, &err), 0);
    return g;
}

static void test_ffn_matches_parser(void **state)
{
    (void)state;
    ein_error err = {0};
    char path[4096];
    const char *src = getenv("EIN_SRCDIR");
    snprintf(path, sizeof path, "%s/examples/ffn.ein", src ? src : "..");
    ein_graph *a = ffn(), *b = NULL;
    assert_int_equal(ein_graph_parse_file(path, &b, &err), 0);
    for (int p = 1; p <= 8; p++) {
        ein_plan *pa, *pb;
        assert_int_equal(ein_graph_plan(a, p, NULL, &pa, &err), 0);
        assert_int_equal(ein_graph_plan(b, p, NULL, &pb, &err), 0);
        assert_true(ein_plan_total_cost(pa) == ein_plan_total_cost(pb));
        assert_int_equal(ein_plan_nops(pa), 3);
        assert_int_equal(ein_plan_nops(pb), 3);
        for (int i = 0; i < 3; i++) {
            const char *na, *nb;
            double ra, rb;
            assert_int_equal(ein_plan_op(pa, i, &na, NULL, NULL, 0, &ra, NULL, NULL), 0);
            assert_int_equal(ein_plan_op(pb, i, &nb, NULL, NULL, 0, &rb, NULL, NULL), 0);
            assert_string_equal(na, nb);
            assert_true(ra == rb);
        }
        assert_int_equal(ein_plan_op(pa, 3, NULL, NULL, NULL, 0, NULL, NULL, NULL), EIN_EINVAL);
        ein_plan_free(pa);
        ein_plan_free(pb);
    }
    ein_graph_destroy(a);
    ein_graph_destroy(b);
}

/* The exported tables (ein_dtype_row, ein_op_row): every dtype row agrees
 * with the per-dtype calls, every op row is a name the graph API takes,
 * and rows out of range are refused. */
static void test_tables(void **state)
{
    (void)state;
    ein_error err = {0};
    ein_dtype_entry d;
    assert_int_equal(ein_dtype_count(), EIN_DTYPE_COUNT);
    for (int i = 0; i < ein_dtype_count(); i++) {
        assert_int_equal(ein_dtype_row(i, &d), 0);
        assert_string_equal(d.name, ein_dtype_name((ein_dtype)i));
        assert_int_equal(d.size, ein_dtype_size((ein_dtype)i));
        assert_int_equal(ein_dtype_bytes((ein_dtype)i, 256), 256 / d.block * d.block_bytes);
    }
    assert_int_equal(ein_dtype_row(EIN_Q4_0, &d), 0);
    assert_int_equal(d.block, 32); /* ggml's block_q4_0: f16 scale, 16 bytes of nibbles */
    assert_int_equal(d.block_bytes, 2 + 16);
    assert_int_equal(ein_dtype_row(EIN_F8E4M3, &d), 0);
    assert_int_equal(d.block, 128); /* f32 scale, 128 e4m3 bytes */
    assert_int_equal(d.block_bytes, 4 + 128);
    assert_int_equal(ein_dtype_row(-1, &d), EIN_EINVAL);
    assert_int_equal(ein_dtype_row(ein_dtype_count(), &d), EIN_EINVAL);
    assert_int_equal(ein_dtype_row(0, NULL), EIN_EINVAL);

    ein_graph *g = ein_graph_create();
    ein_tensor x = ein_graph_insert_tensor(g, NULL, ein_tensor_desc_2d(4, 6, EIN_F32), &err);
    int seen[3] = {0};
    ein_op_entry o;
    for (int i = 0; i < ein_op_count(); i++) {
        assert_int_equal(ein_op_row(i, &o), 0);
        ein_tensor y = o.op_class == EIN_OP_UNARY ? ein_graph_unary(g, NULL, o.name, 2, x, &err)
                       : o.op_class == EIN_OP_BINARY ? ein_graph_binary(g, NULL, o.name, x, x, &err)
                                                     : ein_graph_reduce(g, NULL, o.name, 1, x, &err);
        assert_true(y > 0);
        assert_true(o.op_class >= 0 && o.op_class < 3);
        seen[o.op_class]++;
        assert_int_equal(o.takes_c, !strcmp(o.name, "scale") || !strcmp(o.name, "addc"));
    }
    assert_true(seen[EIN_OP_UNARY] >= 11);
    assert_int_equal(seen[EIN_OP_BINARY], 5);
    assert_int_equal(seen[EIN_OP_REDUCE], 2);
    assert_int_equal(ein_op_row(-1, &o), EIN_EINVAL);
    assert_int_equal(ein_op_row(ein_op_count(), &o), EIN_EINVAL);
    assert_int_equal(ein_op_row(0, NULL), EIN_EINVAL);
    ein_graph_destroy(g);
}

static void test_errors(void **state)
{
    (void)state;
    ein_error err = {0};
    ein_graph *g = ein_graph_create();
    ein_tensor x = ein_graph_insert_tensor(g, NULL, ein_tensor_desc_2d(4, 6, EIN_F32), &err);
    assert_int_equal(x, 0);
    assert_int_equal(ein_graph_unary(g, NULL, "relux", 0, x, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "unknown operator 'relux'"));
    assert_int_equal(ein_graph_binary(g, NULL, "pow", x, x, &err), EIN_EINVAL);
    assert_int_equal(ein_graph_reduce(g, NULL, "mean", 1, x, &err), EIN_EINVAL);
    assert_int_equal(ein_graph_matmul(g, NULL, x, x, &err), EIN_ESHAPE);
    ein_tensor y = ein_graph_unary(g, NULL, "scale", 0.5, x, &err);
    assert_true(y > 0);
    assert_int_equal(ein_graph_save(g, y, &err), 0);
    ein_plan *plan = NULL;
    ein_plan_options o = {.selector = "best"};
    assert_int_equal(ein_graph_plan(g, 2, &o, &plan, &err), EIN_EINVAL);
    o.selector = "random";
    o.seed = 7;
    assert_int_equal(ein_graph_plan(g, 2, &o, &plan, &err), 0);
    ein_plan_free(plan);
    /* 4x6 cannot be split 25 ways: 24 of the devices (issue 15). */
    assert_int_equal(ein_graph_plan(g, 25, NULL, &plan, &err), 0);
    ein_plan_free(plan);
    ein_graph_destroy(g);
}

/* One LLaMA-shaped block, small, through the API. */
static void test_block(void **state)
{
    (void)state;
    ein_error err = {0};
    ein_graph *g = ein_graph_create();
    int64_t T = 64, D = 32, HD = 8, ends[2] = {32, 64};
    ein_tensor x = ein_graph_insert_tensor(g, "x", ein_tensor_desc_2d(T, D, EIN_F16), &err);
    ein_tensor w = ein_graph_insert_tensor(g, "w", ein_tensor_desc_1d(D, EIN_F16), &err);
    ein_tensor wq = ein_graph_insert_tensor(g, "wq", ein_tensor_desc_2d(D, D, EIN_F16), &err);
    ein_tensor wk = ein_graph_insert_tensor(g, "wk", ein_tensor_desc_2d(D, D / 2, EIN_F16), &err);
    ein_tensor xn = ein_graph_rmsnorm(g, "xn", x, w, 1e-5, &err);
    ein_tensor q = ein_graph_matmul(g, "q", xn, wq, &err);
    ein_tensor k = ein_graph_matmul(g, "k", xn, wk, &err);
    ein_tensor qr = ein_graph_rope(g, "qr", q, HD, 10000, ends, 2, &err);
    ein_tensor kr = ein_graph_rope_ex(g, "kr", k, HD, 10000, ends, 2, EIN_ROPE_HALF, &err);
    assert_true(kr >= 0);
    /* Only the two styles exist. */
    assert_int_equal(ein_graph_rope_ex(g, "kz", k, HD, 10000, ends, 2, (ein_rope_style)2, &err),
                     EIN_EINVAL);
    assert_non_null(strstr(err.msg, "style 2"));
    ein_tensor qh = ein_graph_split_heads(g, "qh", qr, HD, &err);
    ein_tensor kh = ein_graph_split_heads(g, "kh", kr, HD, &err);
    ein_tensor at = ein_graph_attention(g, "at", qh, kh, kh, ends, 2, &err);
    ein_tensor m = ein_graph_merge_heads(g, "m", at, &err);
    ein_tensor y = ein_graph_binary(g, "y", "add", x, m, &err);
    assert_true(y >= 0);
    assert_int_equal(ein_graph_save(g, y, &err), 0);
    for (int p = 1; p <= 4; p++) {
        ein_plan *plan = NULL;
        /* At p = 3 attention (heads_kv <= 2, 2 sequences) takes 2 devices. */
        assert_int_equal(ein_graph_plan(g, p, NULL, &plan, &err), 0);
        assert_int_equal(ein_plan_nops(plan), 10);
        ein_plan_free(plan);
    }
    ein_graph_destroy(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ffn_matches_parser),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_tables),
        cmocka_unit_test(test_block),
    };
    return cmocka_run_group_tests_name("planner_api", tests, NULL, NULL);
}
