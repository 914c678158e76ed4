/* tests/api/test_quant.c — quantized weights (q8_0, q4_0, f8e4m3; issue 36)
 * through the public API: y = matmul(x, w) with w declared [out, in]
 * quantized, compiled for 1, 2 and 4 CPU devices (the planner splits w
 * only between its 32- or 128-element blocks) and run against a double
 * reference on the dequantised weights; and the graph's refusals by name. */
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
#include "include/einsummable/einsummable.h"

enum { T = 5, KQ = 96, N = 40, KMAX = 384 };

/* seed 0: the default planner; else the random selector with that plan seed
 * (some split the contraction, K = 3 blocks, at a block boundary). */
static void run_case_k(ein_dtype wt, int ndev, uint64_t plan_seed, int K)
{
    ein_error err = {0};
    ein_graph *g = ein_graph_create();
    ein_tensor x = ein_graph_insert_tensor(g, "x", ein_tensor_desc_2d(T, K, EIN_F32), &err);
    ein_tensor w = ein_graph_insert_tensor(g, "w", ein_tensor_desc_2d(N, K, wt), &err);
    ein_tensor y = ein_graph_matmul(g, "y", x, w, &err);
    if (y < 0)
        fail_msg("%s", err.msg);
    assert_int_equal(ein_graph_save(g, y, &err), 0);
    ein_compiled *c = NULL;
    ein_compile_options o;
    ein_compile_options_init(&o);
    if (plan_seed) {
        o.selector = "random";
        o.plan_seed = plan_seed;
    }
    if (ein_compile(g, ndev, &o, &c, &err) < 0)
        fail_msg("compile: %s", err.msg);
    static float xv[T * KMAX], wv[N * KMAX], got[T * N], deq[N * KMAX];
    static uint8_t wq[N * KMAX / 32 * 34]; /* q8_0: 34 bytes a block of 32 (the most) */
    unsigned seed = 7u + (unsigned)ndev;
    for (int i = 0; i < T * K; i++) {
        seed = seed * 1103515245u + 12345u;
        xv[i] = (float)((seed >> 16) % 2001) / 1000.0f - 1.0f;
    }
    for (int i = 0; i < N * K; i++) {
        seed = seed * 1103515245u + 12345u;
        wv[i] = (float)((seed >> 16) % 2001) / 1000.0f - 1.0f;
    }
    size_t wb = (size_t)ein_dtype_bytes(wt, N * K);
    ein_dtype_from_f32(wt, wv, wq, N * K);
    ein_dtype_to_f32(wt, wq, deq, N * K);
    ein_session *s = NULL;
    if (ein_session_open(c, NULL, &s, &err) < 0)
        fail_msg("open: %s", err.msg);
    assert_int_equal(ein_session_set_input(s, "x", xv, sizeof(float) * T * (size_t)K, &err), 0);
    /* the wrong byte count is refused */
    assert_int_equal(ein_session_set_input(s, "w", wq, wb + 1, &err), EIN_ESHAPE);
    if (ein_session_set_input(s, "w", wq, wb, &err) < 0)
        fail_msg("set w: %s", err.msg);
    ein_run_stats st;
    if (ein_session_run(s, &st, &err) < 0)
        fail_msg("run on %d devices: %s", ndev, err.msg);
    assert_int_equal(ein_session_get_output(s, "y", got, sizeof got, NULL, &err), 0);
    for (int r = 0; r < T; r++)
        for (int j = 0; j < N; j++) {
            /* plus the few-row kernel's rounded activations (kn_quant.c:
             * int16 for q8_0, int8 for q4_0): at most max|x| / 65534
             * (254) per element of a block of 32; f8e4m3 keeps them f32
             * (1e-5 of the products' magnitudes covers f32 sums) */
            double ref = 0, act = 0;
            for (int i0 = 0; i0 < K; i0 += 32) {
                double xm = 0, ws = 0;
                for (int i = i0; i < i0 + 32; i++) {
                    ref += (double)xv[r * K + i] * (double)deq[j * K + i];
                    xm = fabs(xv[r * K + i]) > xm ? fabs(xv[r * K + i]) : xm;
                    ws += fabs(deq[j * K + i]);
                }
                act += wt == EIN_F8E4M3 ? 1e-5 * ws * xm : ws * xm / (wt == EIN_Q8_0 ? 65534 : 254);
            }
            double d = fabs(ref - got[r * N + j]);
            if (!(d <= 1.01 * act + 1e-5))
                fail_msg("%s on %d devices: y[%d, %d] = %g, want %g", ein_dtype_name(wt), ndev,
                         r, j, (double)got[r * N + j], ref);
        }
    assert_int_equal(ein_session_close(s, &err), 0);
    ein_compiled_free(c);
    ein_graph_destroy(g);
}

static void run_case(ein_dtype wt, int ndev, uint64_t plan_seed)
{
    run_case_k(wt, ndev, plan_seed, wt == EIN_F8E4M3 ? KMAX : KQ);
}

static void test_runs(void **state)
{
    (void)state;
    for (int d = 1; d <= 4; d *= 2) {
        run_case(EIN_Q8_0, d, 0);
        run_case(EIN_Q4_0, d, 0);
        run_case(EIN_F8E4M3, d, 0);
    }
    for (uint64_t s = 1; s <= 9; s++)
        run_case(s % 3 == 1 ? EIN_Q8_0 : s % 3 == 2 ? EIN_Q4_0 : EIN_F8E4M3, s <= 3 ? 3 : 4, s);
}

static void test_refusals(void **state)
{
    (void)state;
    ein_error err = {0};
    ein_graph *g = ein_graph_create();
    ein_tensor x = ein_graph_insert_tensor(g, "x", ein_tensor_desc_2d(T, KQ, EIN_F32), &err);
    ein_tensor w = ein_graph_insert_tensor(g, "w", ein_tensor_desc_2d(N, KQ, EIN_Q8_0), &err);
    assert_true(x >= 0 && w >= 0);
    /* a last dim off the blocks */
    assert_true(ein_graph_insert_tensor(g, "odd", ein_tensor_desc_2d(4, 40, EIN_Q8_0), &err) < 0);
    assert_non_null(strstr(err.msg, "multiple of 32"));
    /* f8e4m3's blocks are 128: 96 is refused, naming the input */
    assert_true(ein_graph_insert_tensor(g, "w8", ein_tensor_desc_2d(4, 96, EIN_F8E4M3), &err) < 0);
    assert_non_null(strstr(err.msg, "input w8: f8e4m3 needs a last dim that is a multiple of 128"));
    /* [in, out]: matmul's usual layout is refused for quantized weights */
    ein_tensor v = ein_graph_insert_tensor(g, "v", ein_tensor_desc_2d(KQ, 64, EIN_Q4_0), &err);
    assert_true(v >= 0);
    assert_true(ein_graph_matmul(g, "bad", x, v, &err) < 0);
    assert_non_null(strstr(err.msg, "[out, in]"));
    /* anything but a product */
    assert_true(ein_graph_unary(g, "r", "relu", 0.0, w, &err) < 0);
    assert_non_null(strstr(err.msg, "quantized weights can only be multiplied"));
    /* quantized as the first operand, or contracted on another letter */
    assert_true(ein_graph_einsum(g, "e1", "kj,ij->ik", w, x, &err) < 0);
    assert_true(ein_graph_einsum(g, "e2", "ij,jk->ik", x, v, &err) < 0);
    assert_non_null(strstr(err.msg, "q4_0"));
    /* an input cannot be saved */
    assert_true(ein_graph_save(g, w, &err) < 0);
    ein_graph_destroy(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_runs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
