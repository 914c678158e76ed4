/* tests/api/test_generate.c — state tensors and the decode operators
 * through the public API (issue 25): a key/value cache declared as state,
 * written by cache_write at run-time positions and read by
 * decode_attention, run step after step in one session on 1, 2 and 3 CPU
 * devices, against a reference that keeps its own cache in double; rope_at
 * at the same positions; a state cannot be set. The same with prefill
 * chunks: C = 3 new tokens per sequence and run, each attending causally to
 * the cache and to the chunk's earlier tokens. With a sliding window
 * (issue 34): the token at position p attends only the cached positions
 * (p - W, p], over a cache longer than the window, on 1, 2 and 3 devices
 * and with the keys split (blocks wholly before the window skipped). */
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

enum { BMAX = 3, KVHMAX = 2, D = 8, S = 16, STEPS = 6, CMAX = 3 };
/* The shape of one case: B sequences, KVH kv heads, H = 2 KVH query
 * heads. B = KVH = 1 on 2 devices leaves the cached keys as the only
 * index to split: key blocks merged by log-sum-exp. */
static int B = BMAX, KVH = KVHMAX, H = 2 * KVHMAX, C = 1; /* C: new tokens per sequence */
static int W = 0;   /* decode_attention's sliding window (0: none) */

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
    ein_tensor q = ein_graph_insert_tensor(g, "q", ein_tensor_desc_3d(H, B * C, D, EIN_F32), &err);
    ein_tensor k = ein_graph_insert_tensor(g, "k", ein_tensor_desc_3d(KVH, B * C, D, EIN_F32),
                                           &err);
    ein_tensor v = ein_graph_insert_tensor(g, "v", ein_tensor_desc_3d(KVH, B * C, D, EIN_F32),
                                           &err);
    ein_tensor pos = ein_graph_insert_tensor(g, "pos", ein_tensor_desc_1d(B, EIN_I32), &err);
    ein_tensor x = ein_graph_insert_tensor(g, "x", ein_tensor_desc_2d(B, H * D, EIN_F32), &err);
    ein_tensor kw = ein_graph_cache_write(g, "kw", kc, k, pos, &err);
    ein_tensor vw = ein_graph_cache_write(g, "vw", vc, v, pos, &err);
    if (kw < 0 || vw < 0)
        fail_msg("cache_write: %s", err.msg);
    /* the raw state is not readable: only through its cache_write */
    assert_true(ein_graph_decode_attention(g, "o0", q, kc, vw, pos, &err) < 0);
    assert_non_null(strstr(err.msg, "kc is a state"));
    assert_true(ein_graph_decode_attention_window(g, "o1", q, kw, vw, pos, -2, &err) < 0);
    assert_non_null(strstr(err.msg, "window -2 is negative"));
    ein_tensor o = W ? ein_graph_decode_attention_window(g, "o", q, kw, vw, pos, W, &err)
                     : ein_graph_decode_attention(g, "o", q, kw, vw, pos, &err);
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

static void runs_on(int ndev, int b, int kvh, int chunk)
{
    B = b;
    KVH = kvh;
    H = 2 * kvh;
    C = chunk;
    /* windowed: positions run past the window (and past the first key
     * block's end) within the cache */
    int steps = W ? (C == 1 ? S - 2 * (B - 1) : (S - C - 2 * (B - 1)) / C + 1)
                  : C == 1 ? STEPS : 3;
    ein_error err = {0};
    ein_graph *g = decoder();
    ein_compiled *c = NULL;
    if (ein_compile(g, ndev, NULL, &c, &err) < 0)
        fail_msg("compile on %d devices: %s", ndev, err.msg);
    ein_graph_destroy(g);
    if (b == 1 && kvh == 1 && C == 1) {   /* the keys are split: the LSE merge runs */
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
    for (int step = 0; step < steps; step++) {
        enum { TMAX = BMAX * CMAX };
        float q[2 * KVHMAX * TMAX * D], k[KVHMAX * TMAX * D], v[KVHMAX * TMAX * D];
        float x[BMAX * 2 * KVHMAX * D], o[2 * KVHMAX * TMAX * D], r[BMAX * 2 * KVHMAX * D];
        int32_t pos[BMAX];
        int T = B * C; /* token rows: token t of sequence b is row b*C + t at pos[b] + t */
        size_t nq = sizeof(float) * (size_t)(H * T * D), nk = sizeof(float) * (size_t)(KVH * T * D);
        size_t nx = sizeof(float) * (size_t)(B * H * D);
        fill(q, H * T * D, 100u + (unsigned)step);
        fill(k, KVH * T * D, 200u + (unsigned)step);
        fill(v, KVH * T * D, 300u + (unsigned)step);
        fill(x, B * H * D, 400u + (unsigned)step);
        for (int b = 0; b < B; b++)
            pos[b] = step * C + 2 * b;
        if (ein_session_set_input(s, "q", q, nq, &err) < 0 ||
            ein_session_set_input(s, "k", k, nk, &err) < 0 ||
            ein_session_set_input(s, "v", v, nk, &err) < 0 ||
            ein_session_set_input(s, "x", x, nx, &err) < 0 ||
            ein_session_set_input(s, "pos", pos, sizeof(int32_t) * (size_t)B, &err) < 0)
            fail_msg("set: %s", err.msg);
        if (ein_session_run(s, NULL, &err) < 0)
            fail_msg("step %d on %d devices: %s", step, ndev, err.msg);
        memset(o, 0xff, sizeof o);
        memset(r, 0xff, sizeof r);
        if (ein_session_get_output(s, "o", o, nq, NULL, &err) < 0 ||
            ein_session_get_output(s, "r", r, nx, NULL, &err) < 0)
            fail_msg("get: %s", err.msg);
        for (int h = 0; h < KVH; h++)
            for (int bt = 0; bt < T; bt++)
                for (int j = 0; j < D; j++) {
                    rk[h][bt / C][pos[bt / C] + bt % C][j] = k[(h * T + bt) * D + j];
                    rv[h][bt / C][pos[bt / C] + bt % C][j] = v[(h * T + bt) * D + j];
                }
        for (int qh = 0; qh < H; qh++)
            for (int bt = 0; bt < T; bt++) {
                int h = qh / (H / KVH), b = bt / C, p = pos[b] + bt % C;
                double sc[S], m = -INFINITY, l = 0;
                int t0 = W && p - W + 1 > 0 ? p - W + 1 : 0;   /* transformers: t > p - W */
                for (int t = t0; t <= p; t++) {
                    double dot = 0;
                    for (int j = 0; j < D; j++)
                        dot += q[(qh * T + bt) * D + j] * rk[h][b][t][j];
                    sc[t] = dot / sqrt((double)D);
                    m = sc[t] > m ? sc[t] : m;
                }
                for (int t = t0; t <= p; t++)
                    l += exp(sc[t] - m);
                for (int j = 0; j < D; j++) {
                    double want = 0;
                    for (int t = t0; t <= p; t++)
                        want += exp(sc[t] - m) / l * rv[h][b][t][j];
                    double e = fabs(want - o[(qh * T + bt) * D + j]);
                    if (!(e <= 1e-5))
                        fail_msg("step %d, %d devices, chunk %d, window %d: o[%d, %d, %d] = %g, "
                                 "expected %g", step, ndev, C, W, qh, bt, j,
                                 (double)o[(qh * T + bt) * D + j], want);
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
    /* A position past the cache (a chunk's last token included) fails the
     * run with a message naming it. */
    int32_t bad[BMAX] = {S - C + 1, 0, 1};
    assert_int_equal(ein_session_set_input(s, "pos", bad, sizeof(int32_t) * (size_t)B, &err), 0);
    assert_true(ein_session_run(s, NULL, &err) < 0);
    char want[32];
    snprintf(want, sizeof want, "position %d", S - C + 1);
    if (!strstr(err.msg, want))
        fail_msg("a bad position: %s", err.msg);
    ein_session_close(s, &err);
    ein_compiled_free(c);
}

/* Reference attention of query row (qh, bt) over the double caches (token
 * bt % c of sequence bt / c at pos[b] + bt % c), compared with got. */
static double rk2[KVHMAX][BMAX][S][D], rv2[KVHMAX][BMAX][S][D];

static void ref_write(const float *k, const float *v, const int32_t *pos, int c)
{
    for (int h = 0; h < KVH; h++)
        for (int bt = 0; bt < B * c; bt++)
            for (int j = 0; j < D; j++) {
                rk2[h][bt / c][pos[bt / c] + bt % c][j] = k[(h * B * c + bt) * D + j];
                rv2[h][bt / c][pos[bt / c] + bt % c][j] = v[(h * B * c + bt) * D + j];
            }
}

static void ref_check(const float *q, const float *o, const int32_t *pos, int c, const char *what)
{
    int T = B * c;
    for (int qh = 0; qh < H; qh++)
        for (int bt = 0; bt < T; bt++) {
            int h = qh / (H / KVH), b = bt / c, p = pos[b] + bt % c;
            double sc[S], m = -INFINITY, l = 0;
            for (int t = 0; t <= p; t++) {
                double dot = 0;
                for (int j = 0; j < D; j++)
                    dot += q[(qh * T + bt) * D + j] * rk2[h][b][t][j];
                sc[t] = dot / sqrt((double)D);
                m = sc[t] > m ? sc[t] : m;
            }
            for (int t = 0; t <= p; t++)
                l += exp(sc[t] - m);
            for (int j = 0; j < D; j++) {
                double want = 0;
                for (int t = 0; t <= p; t++)
                    want += exp(sc[t] - m) / l * rv2[h][b][t][j];
                if (!(fabs(want - o[(qh * T + bt) * D + j]) <= 1e-5))
                    fail_msg("%s: o[%d, %d, %d] = %g, expected %g", what, qh, bt, j,
                             (double)o[(qh * T + bt) * D + j], want);
            }
        }
}

/* Entry points: a prefill chunk (C = 3 tokens per sequence) and a decode
 * step writing the same caches in one program; prompts prefilled in two
 * chunks, then decoded one token per run, against the double reference. */
static void entries_on(int ndev)
{
    enum { CC = 3 };
    B = 2;
    KVH = 2;
    H = 4;
    ein_error err = {0};
    ein_graph *g = ein_graph_create();
    ein_tensor_desc cd = {.rank = 4, .shape = {KVH, B, S, D}, .dtype = EIN_F32};
    ein_tensor kc = ein_graph_state(g, "kc", cd, &err), vc = ein_graph_state(g, "vc", cd, &err);
    ein_tensor t[10];
    const char *names[10] = {"q1", "k1", "v1", "pos1", "qp", "kp", "vp", "posp"};
    for (int i = 0; i < 8; i++) {
        int c = i < 4 ? 1 : CC, r = i % 4;
        ein_tensor_desc d = r == 3 ? ein_tensor_desc_1d(B, EIN_I32)
                                   : ein_tensor_desc_3d(r == 0 ? H : KVH, B * c, D, EIN_F32);
        t[i] = ein_graph_insert_tensor(g, names[i], d, &err);
        assert_true(t[i] >= 0);
    }
    ein_tensor kw1 = ein_graph_cache_write(g, "kw1", kc, t[1], t[3], &err);
    ein_tensor vw1 = ein_graph_cache_write(g, "vw1", vc, t[2], t[3], &err);
    ein_tensor o1 = ein_graph_decode_attention(g, "o1", t[0], kw1, vw1, t[3], &err);
    ein_tensor kwp = ein_graph_cache_write(g, "kwp", kc, t[5], t[7], &err);
    ein_tensor vwp = ein_graph_cache_write(g, "vwp", vc, t[6], t[7], &err);
    ein_tensor op = ein_graph_decode_attention(g, "op", t[4], kwp, vwp, t[7], &err);
    if (o1 < 0 || op < 0)
        fail_msg("graph: %s", err.msg);
    assert_int_equal(ein_graph_save(g, o1, &err), 0);
    assert_int_equal(ein_graph_save(g, op, &err), 0);
    ein_compile_options co;
    ein_compile_options_init(&co);
    co.no_reuse = 1;
    ein_compiled *c = NULL;
    if (ein_compile(g, ndev, &co, &c, &err) < 0)
        fail_msg("compile on %d devices: %s", ndev, err.msg);
    ein_graph_destroy(g);
    const char *both[2] = {"op", "o1"}, *dec[1] = {"o1"}, *pre[1] = {"op"}, *none[1] = {"kc"};
    assert_int_equal(ein_compiled_add_entry(c, "both", both, 2, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "two cache_writes"));
    assert_int_equal(ein_compiled_add_entry(c, "x", none, 1, &err), EIN_EINVAL);
    if (ein_compiled_add_entry(c, "decode", dec, 1, &err) < 0 ||
        ein_compiled_add_entry(c, "prefill", pre, 1, &err) < 0)
        fail_msg("add_entry: %s", err.msg);
    assert_int_equal(ein_compiled_add_entry(c, "decode", dec, 1, &err), EIN_EINVAL);
    ein_session *s = NULL;
    if (ein_session_open(c, NULL, &s, &err) < 0)
        fail_msg("open: %s", err.msg);
    memset(rk2, 0, sizeof rk2);
    memset(rv2, 0, sizeof rv2);
    float q[4 * BMAX * CC * D], k[2 * BMAX * CC * D], v[2 * BMAX * CC * D], o[4 * BMAX * CC * D];
    int32_t pos[BMAX];
    /* every input set once (a run needs them all) */
    fill(q, H * B * D, 1);
    fill(k, KVH * B * D, 2);
    int32_t z[BMAX] = {0};
    if (ein_session_set_input(s, "q1", q, sizeof(float) * (size_t)(H * B * D), &err) < 0 ||
        ein_session_set_input(s, "k1", k, sizeof(float) * (size_t)(KVH * B * D), &err) < 0 ||
        ein_session_set_input(s, "v1", k, sizeof(float) * (size_t)(KVH * B * D), &err) < 0 ||
        ein_session_set_input(s, "pos1", z, sizeof(int32_t) * (size_t)B, &err) < 0)
        fail_msg("set: %s", err.msg);
    assert_int_equal(ein_session_run(s, NULL, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "several cache_writes"));
    assert_int_equal(ein_session_run_entry(s, "nope", 1, NULL, &err), EIN_EINVAL);
    char what[64];
    for (int step = 0; step < 5; step++) {
        int cc = step < 2 ? CC : 1;   /* two prefill chunks, then decode steps */
        const char *sfx = step < 2 ? "p" : "1";
        size_t nq = sizeof(float) * (size_t)(H * B * cc * D);
        size_t nk = sizeof(float) * (size_t)(KVH * B * cc * D);
        fill(q, H * B * cc * D, 10u + (unsigned)step);
        fill(k, KVH * B * cc * D, 20u + (unsigned)step);
        fill(v, KVH * B * cc * D, 30u + (unsigned)step);
        for (int b = 0; b < B; b++)  /* sequence 1 a token behind */
            pos[b] = (step < 2 ? step * CC : 2 * CC + step - 2) - (b == 1 && step > 0);
        char nq_[8], nk_[8], nv_[8], np_[8], no_[8];
        snprintf(nq_, sizeof nq_, "q%s", sfx);
        snprintf(nk_, sizeof nk_, "k%s", sfx);
        snprintf(nv_, sizeof nv_, "v%s", sfx);
        snprintf(np_, sizeof np_, "pos%s", sfx);
        snprintf(no_, sizeof no_, "o%s", sfx);
        if (ein_session_set_input(s, nq_, q, nq, &err) < 0 ||
            ein_session_set_input(s, nk_, k, nk, &err) < 0 ||
            ein_session_set_input(s, nv_, v, nk, &err) < 0 ||
            ein_session_set_input(s, np_, pos, sizeof(int32_t) * (size_t)B, &err) < 0)
            fail_msg("set: %s", err.msg);
        if (ein_session_run_entry(s, step < 2 ? "prefill" : "decode", 1, NULL, &err) < 0)
            fail_msg("run %d on %d devices: %s", step, ndev, err.msg);
        memset(o, 0xff, sizeof o);
        if (ein_session_get_output(s, no_, o, nq, NULL, &err) < 0)
            fail_msg("get: %s", err.msg);
        ref_write(k, v, pos, cc);
        snprintf(what, sizeof what, "run %d (%s) on %d devices", step,
                 step < 2 ? "prefill" : "decode", ndev);
        ref_check(q, o, pos, cc, what);
    }
    ein_session_close(s, &err);
    ein_compiled_free(c);
}

static void test_entries_1(void **state) { (void)state; entries_on(1); }
static void test_entries_2(void **state) { (void)state; entries_on(2); }
static void test_entries_3(void **state) { (void)state; entries_on(3); }

static void test_runs_1(void **state) { (void)state; runs_on(1, 3, 2, 1); }
static void test_runs_2(void **state) { (void)state; runs_on(2, 3, 2, 1); }
static void test_runs_3(void **state) { (void)state; runs_on(3, 3, 2, 1); }
static void test_key_blocks(void **state) { (void)state; runs_on(2, 1, 1, 1); }
static void test_chunks_1(void **state) { (void)state; runs_on(1, 3, 2, 3); }
static void test_chunks_2(void **state) { (void)state; runs_on(2, 3, 2, 3); }
static void test_chunk_key_blocks(void **state) { (void)state; runs_on(2, 1, 1, 3); }
/* Sliding window 4 over a cache of 16 (issue 34). */
static void test_window(void **state)
{
    (void)state;
    W = 4;
    for (int nd = 1; nd <= 3; nd++) {
        runs_on(nd, 3, 2, 1);
        runs_on(nd, 3, 2, 3);
    }
    runs_on(2, 1, 1, 1);   /* keys split: a block wholly before the window is skipped */
    runs_on(2, 1, 1, 3);
    W = 1;                 /* each token sees itself only */
    runs_on(3, 3, 2, 1);
    W = 0;
}

int main(void)
{
    setup_env();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_runs_1),
        cmocka_unit_test(test_runs_2),
        cmocka_unit_test(test_runs_3),
        cmocka_unit_test(test_key_blocks),
        cmocka_unit_test(test_chunks_1),
        cmocka_unit_test(test_chunks_2),
        cmocka_unit_test(test_chunk_key_blocks),
        cmocka_unit_test(test_window),
        cmocka_unit_test(test_entries_1),
        cmocka_unit_test(test_entries_2),
        cmocka_unit_test(test_entries_3),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
