/* tests/api/test_generate.c — state tensors and the decode operators
 * through the public API (issue 25): a key/value cache declared as state,
 * written by cache_write at run-time positions and read by
 * decode_attention, run step after step in one session on 1, 2 and 3 CPU
 * devices, against a reference that keeps its own cache in double; rope_at
 * at the same positions; a state cannot be set. */
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

enum { BMAX = 3, KVHMAX = 2, D = 8, S = 12, STEPS = 6 };
/* The shape of one case: B sequences, KVH kv heads, H = 2 KVH query
 * heads. B = KVH = 1 on 2 devices leaves the cached keys as the only
 * index to split: key blocks merged by log-sum-exp. */
static int B = BMAX, KVH = KVHMAX, H = 2 * KVHMAX;

static ein_graph *decoder(void)
{
    ein_error err = {0};
    ein_graph *g = ein_graph_create();
    assert_non_null(g);
    ein_tensor_desc cd = {.rank = 4, .shape = {KVH, B, S, D}, .dtype = EIN_F32};
    ein_error e0 = {0};
    /* a state is float */
    ein_tensor_desc bad = {.rank = 1, .shape = {4}, .dtype = EIN_I32};
    assert_true(ein_graph_state(g, "bad", bad, &e0) < 0);
    ein_tensor kc = ein_graph_state(g, "kc", cd, &err);
    ein_tensor vc = ein_graph_state(g, "vc", cd, &err);
    assert_true(kc >= 0 && vc >= 0);
    ein_tensor q = ein_graph_insert_tensor(g, "q", ein_tensor_desc_3d(H, B, D, EIN_F32), &err);
    ein_tensor k = ein_graph_insert_tensor(g, "k", ein_tensor_desc_3d(KVH, B, D, EIN_F32), &err);
    ein_tensor v = ein_graph_insert_tensor(g, "v", ein_tensor_desc_3d(KVH, B, D, EIN_F32), &err);
    ein_tensor pos = ein_graph_insert_tensor(g, "pos", ein_tensor_desc_1d(B, EIN_I32), &err);
    ein_tensor x = ein_graph_insert_tensor(g, "x", ein_tensor_desc_2d(B, H * D, EIN_F32), &err);
    ein_tensor kw = ein_graph_cache_write(g, "kw", kc, k, pos, &err);
    ein_tensor vw = ein_graph_cache_write(g, "vw", vc, v, pos, &err);
    if (kw < 0 || vw < 0)
        fail_msg("cache_write: %s", err.msg);
    /* one cache_write per state */
    assert_true(ein_graph_cache_write(g, "kw2", kc, k, pos, &err) < 0);
    assert_non_null(strstr(err.msg, "already written"));
    /* the raw state is not readable: only through its cache_write */
    assert_true(ein_graph_decode_attention(g, "o0", q, kc, vw, pos, &err) < 0);
    assert_non_null(strstr(err.msg, "kc is a state"));
    ein_tensor o = ein_graph_decode_attention(g, "o", q, kw, vw, pos, &err);
    ein_tensor r = ein_graph_rope_at(g, "r", x, pos, D, 10000.0, EIN_ROPE_HALF, &err);
    if (o < 0 || r < 0)
        fail_msg("decode ops: %s", err.msg);
    assert_true(ein_graph_save(g, kw, &err) < 0); /* a state stays on the devices */
    assert_int_equal(ein_graph_save(g, o, &err), 0);
    assert_int_equal(ein_graph_save(g, r, &err), 0);
    return g;
}

static void fill(float *a, int n, unsigned seed)
{
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        a[i] = (float)((seed >> 16) % 2001) / 1000.0f - 1.0f;
    }
}

static void setup_env(void)
{
    setenv("EINWORKER", e2e_bin("einworker"), 1);
    e2e_scratch();
}

static void runs_on(int ndev, int b, int kvh)
{
    B = b;
    KVH = kvh;
    H = 2 * kvh;
    ein_error err = {0};
    ein_graph *g = decoder();
    ein_compiled *c = NULL;
    if (ein_compile(g, ndev, NULL, &c, &err) < 0)
        fail_msg("compile on %d devices: %s", ndev, err.msg);
    ein_graph_destroy(g);
    if (b == 1 && kvh == 1) {   /* the keys are split: the LSE merge runs */
        char *ex = ein_compiled_explain(c, 0);
        assert_non_null(ex);
        if (!strstr(ex, "k_blocks:2"))
            fail_msg("decode_attention on 2 devices with one sequence and one kv head does not "
                     "split the keys:\n%s", ex);
        free(ex);
    }
    ein_session *s = NULL;
    if (ein_session_open(c, NULL, &s, &err) < 0)
        fail_msg("open: %s", err.msg);
    static float kz[KVHMAX * BMAX * S * D];
    assert_int_equal(ein_session_set_input(s, "kc", kz, sizeof(float) * KVH * B * S * D, &err),
                     EIN_EINVAL);
    assert_non_null(strstr(err.msg, "state"));
    /* The reference caches start at zero, as the states do; sequence b
     * starts at position 2b, so rows below it are read as zeros. */
    static double rk[KVHMAX][BMAX][S][D], rv[KVHMAX][BMAX][S][D];
    memset(rk, 0, sizeof rk);
    memset(rv, 0, sizeof rv);
    for (int step = 0; step < STEPS; step++) {
        float q[2 * KVHMAX * BMAX * D], k[KVHMAX * BMAX * D], v[KVHMAX * BMAX * D];
        float x[BMAX * 2 * KVHMAX * D], o[2 * KVHMAX * BMAX * D], r[BMAX * 2 * KVHMAX * D];
        int32_t pos[BMAX];
        size_t nq = sizeof(float) * (size_t)(H * B * D), nk = sizeof(float) * (size_t)(KVH * B * D);
        fill(q, H * B * D, 100u + (unsigned)step);
        fill(k, KVH * B * D, 200u + (unsigned)step);
        fill(v, KVH * B * D, 300u + (unsigned)step);
        fill(x, B * H * D, 400u + (unsigned)step);
        for (int b = 0; b < B; b++)
            pos[b] = step + 2 * b;
        if (ein_session_set_input(s, "q", q, nq, &err) < 0 ||
            ein_session_set_input(s, "k", k, nk, &err) < 0 ||
            ein_session_set_input(s, "v", v, nk, &err) < 0 ||
            ein_session_set_input(s, "x", x, nq, &err) < 0 ||
            ein_session_set_input(s, "pos", pos, sizeof(int32_t) * (size_t)B, &err) < 0)
            fail_msg("set: %s", err.msg);
        if (ein_session_run(s, NULL, &err) < 0)
            fail_msg("step %d on %d devices: %s", step, ndev, err.msg);
        memset(o, 0xff, sizeof o);
        memset(r, 0xff, sizeof r);
        if (ein_session_get_output(s, "o", o, nq, NULL, &err) < 0 ||
            ein_session_get_output(s, "r", r, nq, NULL, &err) < 0)
            fail_msg("get: %s", err.msg);
        for (int h = 0; h < KVH; h++)
            for (int b = 0; b < B; b++)
                for (int j = 0; j < D; j++) {
                    rk[h][b][pos[b]][j] = k[(h * B + b) * D + j];
                    rv[h][b][pos[b]][j] = v[(h * B + b) * D + j];
                }
        for (int qh = 0; qh < H; qh++)
            for (int b = 0; b < B; b++) {
                int h = qh / (H / KVH);
                double sc[S], m = -INFINITY, l = 0;
                for (int t = 0; t <= pos[b]; t++) {
                    double dot = 0;
                    for (int j = 0; j < D; j++)
                        dot += q[(qh * B + b) * D + j] * rk[h][b][t][j];
                    sc[t] = dot / sqrt((double)D);
                    m = sc[t] > m ? sc[t] : m;
                }
                for (int t = 0; t <= pos[b]; t++)
                    l += exp(sc[t] - m);
                for (int j = 0; j < D; j++) {
                    double want = 0;
                    for (int t = 0; t <= pos[b]; t++)
                        want += exp(sc[t] - m) / l * rv[h][b][t][j];
                    double e = fabs(want - o[(qh * B + b) * D + j]);
                    if (!(e <= 1e-5))
                        fail_msg("step %d, %d devices: o[%d, %d, %d] = %g, expected %g", step,
                                 ndev, qh, b, j, (double)o[(qh * B + b) * D + j], want);
                }
            }
        /* rope_at, rotate_half pairs (i, i + D/2) at position pos[b] */
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++)
                for (int i = 0; i < D / 2; i++) {
                    double a = pos[b] * pow(10000.0, -2.0 * i / D);
                    const float *xv = &x[b * H * D + h * D];
                    double w0 = xv[i] * cos(a) - xv[i + D / 2] * sin(a);
                    double w1 = xv[i + D / 2] * cos(a) + xv[i] * sin(a);
                    const float *rv2 = &r[b * H * D + h * D];
                    if (!(fabs(w0 - rv2[i]) <= 1e-5) || !(fabs(w1 - rv2[i + D / 2]) <= 1e-5))
                        fail_msg("step %d: rope_at of sequence %d head %d pair %d is off", step,
                                 b, h, i);
                }
    }
    /* A position past the cache fails the run with a message naming it. */
    int32_t bad[BMAX] = {S, 0, 1};
    assert_int_equal(ein_session_set_input(s, "pos", bad, sizeof(int32_t) * (size_t)B, &err), 0);
    assert_true(ein_session_run(s, NULL, &err) < 0);
    assert_non_null(strstr(err.msg, "position 12"));
    ein_session_close(s, &err);
    ein_compiled_free(c);
}

static void test_runs_1(void **state) { (void)state; runs_on(1, 3, 2); }
static void test_runs_2(void **state) { (void)state; runs_on(2, 3, 2); }
static void test_runs_3(void **state) { (void)state; runs_on(3, 3, 2); }
static void test_key_blocks(void **state) { (void)state; runs_on(2, 1, 1); }

int main(void)
{
    setup_env();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_runs_1),
        cmocka_unit_test(test_runs_2),
        cmocka_unit_test(test_runs_3),
        cmocka_unit_test(test_key_blocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
