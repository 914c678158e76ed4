/* tests/kernels/test_kn_window.c — sliding-window attention (issue 34) in
 * the CPU kernels: attention, attention_partial merged by log-sum-exp, and
 * decode_attention(_partial) over a cache, each against a naive masked
 * softmax written here in double: query t sees key u of its sequence
 * exactly when t - W < u <= t (transformers' sliding_window_overlay,
 * `kv_idx > q_idx - sliding_window`, and'ed with the causal mask).
 *
 * Windows smaller than, equal to and larger than the sequences; packed
 * sequences; grouped-query heads; blocks with offsets; k/v blocks holding
 * only the windowed keys. Bad windows (negative) are refused by name. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kn_cpu.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static double urand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / (double)(1ull << 53) * 2.0 - 1.0;
}

/* A dense global f32 tensor of rank 3 or 4 with random values. */
typedef struct gten {
    int rank;
    int64_t shape[4];
    float *v;
} gten;

static gten gnew(int rank, const int64_t *shape, double scale)
{
    gten t = {rank, {1, 1, 1, 1}, NULL};
    int64_t n = 1;
    for (int i = 0; i < rank; i++) {
        t.shape[i] = shape[i];
        n *= shape[i];
    }
    t.v = malloc((size_t)n * sizeof *t.v);
    assert_non_null(t.v);
    for (int64_t i = 0; i < n; i++)
        t.v[i] = (float)(urand() * scale);
    return t;
}

static int64_t goff(const gten *t, const int64_t *g)
{
    int64_t o = 0;
    for (int i = 0; i < t->rank; i++)
        o = o * t->shape[i] + g[i];
    return o;
}

static double gat(const gten *t, int64_t a, int64_t b, int64_t c, int64_t d)
{
    int64_t g[4] = {a, b, c, d};
    return t->v[goff(t, g)];
}

/* The block of t over box (f32, row-major over the box). */
static kn_block blk(const gten *t, const ein_box *box)
{
    kn_block b = {NULL, EIN_F32, *box};
    int64_t n = ein_box_volume(box);
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
    assert_non_null(p);
    int64_t g[4] = {0};
    for (int64_t i = 0; i < n; i++) {
        int64_t r = i;
        for (int d = box->rank - 1; d >= 0; d--) {
            int64_t ext = box->hi[d] - box->lo[d];
            g[d] = box->lo[d] + r % ext;
            r /= ext;
        }
        p[i] = t->v[goff(t, g)];
    }
    b.data = p;
    return b;
}

/* An output block filled with NaN (an element never written fails). */
static kn_block outblk(const ein_box *box)
{
    kn_block b = {NULL, EIN_F32, *box};
    int64_t n = ein_box_volume(box);
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
    assert_non_null(p);
    for (int64_t i = 0; i < n; i++)
        p[i] = NAN;
    b.data = p;
    return b;
}

static int64_t seq_start(const int64_t *ends, int nseq, int64_t t)
{
    int64_t s = 0;
    for (int i = 0; i < nseq && ends[i] <= t; i++)
        s = ends[i];
    return s;
}

/* The reference: output row of query head h at token t over visible keys
 * u in [klo, khi) (also restricted to the window and causality), into o[d];
 * returns the log-sum-exp of the scaled scores (-inf: no key). */
static double ref_row(const gten *q, const gten *k, const gten *v, int64_t group, int64_t window,
                      const int64_t *ends, int nseq, int64_t h, int64_t t, int64_t klo,
                      int64_t khi, double *o)
{
    int64_t D = q->shape[2], hk = h / group, s = seq_start(ends, nseq, t);
    double scale = 1.0 / sqrt((double)D), mx = -INFINITY;
    double *sc = malloc((size_t)k->shape[1] * sizeof *sc);
    assert_non_null(sc);
    for (int64_t e = 0; e < D; e++)
        o[e] = 0;
    for (int64_t u = 0; u < k->shape[1]; u++) {
        sc[u] = -INFINITY;
        /* transformers: causal (u <= t) and kv_idx > q_idx - window */
        int vis = u >= s && u <= t && (window == 0 || u > t - window) && u >= klo && u < khi;
        if (!vis)
            continue;
        double dot = 0;
        for (int64_t e = 0; e < D; e++)
            dot += gat(q, h, t, e, 0) * gat(k, hk, u, e, 0);
        sc[u] = dot * scale;
        mx = fmax(mx, sc[u]);
    }
    if (mx == -INFINITY) {
        free(sc);
        return -INFINITY;
    }
    double sum = 0;
    for (int64_t u = 0; u < k->shape[1]; u++)
        if (sc[u] > -INFINITY) {
            double p = exp(sc[u] - mx);
            sum += p;
            for (int64_t e = 0; e < D; e++)
                o[e] += p * gat(v, hk, u, e, 0);
        }
    for (int64_t e = 0; e < D; e++)
        o[e] /= sum;
    free(sc);
    return mx + log(sum);
}

static void check(const char *what, double got, double want, double tol, long long a, long long b,
                  long long c)
{
    if (!(fabs(got - want) <= tol * (1 + fabs(want))))
        fail_msg("%s [%lld, %lld, %lld]: got %.8g, want %.8g", what, a, b, c, got, want);
}

/* One attention case: T tokens in sequences `ends`, kv heads HK, group,
 * dim D, window W; the q block kv heads [ha, hb) x tokens [t0, t1); the
 * k/v block tokens [u0, u1) (u0 < 0: exactly the keys the queries see). */
typedef struct acase {
    int64_t T, HK, group, D, W, ha, hb, t0, t1, u0, u1;
    int64_t ends[6];
    int nseq;
} acase;

static void run_attention(acase c)
{
    int64_t sq[3] = {c.HK * c.group, c.T, c.D}, sk[3] = {c.HK, c.T, c.D};
    gten q = gnew(3, sq, 1.5), k = gnew(3, sk, 1.5), v = gnew(3, sk, 1.0);
    if (c.u0 < 0) {   /* the windowed keys only */
        int64_t s = seq_start(c.ends, c.nseq, c.t0);
        c.u0 = c.W > 0 && c.t0 - c.W + 1 > s ? c.t0 - c.W + 1 : s;
        c.u1 = c.t1;
    }
    ein_box qb = {3, {c.group * c.ha, c.t0, 0}, {c.group * c.hb, c.t1, c.D}};
    ein_box kb = {3, {c.ha, c.u0, 0}, {c.hb, c.u1, c.D}};
    kn_block Q = blk(&q, &qb), K = blk(&k, &kb), V = blk(&v, &kb), Y = outblk(&qb);
    ein_error err = {0};
    int rc = kn_cpu_attention_window(c.group, c.W, c.ends, c.nseq, &Q, &K, &V, &Y, &err);
    if (rc)
        fail_msg("attention W=%lld: %s", (long long)c.W, err.msg);
    double *o = malloc((size_t)c.D * sizeof *o);
    assert_non_null(o);
    const float *y = Y.data;
    for (int64_t h = qb.lo[0]; h < qb.hi[0]; h++)
        for (int64_t t = c.t0; t < c.t1; t++) {
            ref_row(&q, &k, &v, c.group, c.W, c.ends, c.nseq, h, t, 0, c.T, o);
            for (int64_t e = 0; e < c.D; e++)
                check("attention", y[((h - qb.lo[0]) * (c.t1 - c.t0) + (t - c.t0)) * c.D + e],
                      o[e], 1e-4, h, t, e);
        }
    free(o);
    free(Q.data), free(K.data), free(V.data), free(Y.data);
    free(q.v), free(k.v), free(v.v);
}

static void test_attention_window(void **state)
{
    (void)state;
    /* one sequence of 40 tokens; windows 1, 5, 39, 40 (= T), 41, 1000 */
    int64_t ws[] = {1, 2, 5, 17, 39, 40, 41, 1000};
    for (size_t i = 0; i < sizeof ws / sizeof *ws; i++) {
        run_attention((acase){.T = 40, .HK = 2, .group = 1, .D = 8, .W = ws[i], .ha = 0, .hb = 2,
                              .t0 = 0, .t1 = 40, .u0 = 0, .u1 = 40});
        /* GQA, a block of the queries and heads, k/v just the window's keys */
        run_attention((acase){.T = 40, .HK = 3, .group = 4, .D = 16, .W = ws[i], .ha = 1,
                              .hb = 3, .t0 = 13, .t1 = 37, .u0 = -1});
    }
    /* packed sequences 7, 30, 3, 100: windows shorter than some, longer
     * than others; several query and key tiles (300 keys > one tile) */
    int64_t pw[] = {1, 3, 7, 8, 29, 64, 100, 257};
    for (size_t i = 0; i < sizeof pw / sizeof *pw; i++) {
        acase c = {.T = 440, .HK = 2, .group = 2, .D = 8, .W = pw[i], .ha = 0, .hb = 2,
                   .t0 = 0, .t1 = 440, .u0 = 0, .u1 = 440, .ends = {7, 37, 40, 140, 440},
                   .nseq = 5};
        run_attention(c);
        c.t0 = 150;
        c.t1 = 433;
        c.u0 = -1;
        run_attention(c);
    }
}

/* Key blocks as the planner cuts them: the partials of key blocks tiling
 * every row's windowed keys, merged with kn_cpu_agg_lse, equal attention;
 * each partial matches the reference restricted to its keys (rows with no
 * key in the block are 0 with -inf). */
static void test_attention_partial_window(void **state)
{
    (void)state;
    const int64_t T = 96, HK = 2, G = 2, D = 8;
    const int64_t ends[3] = {20, 70, 96};
    int64_t sq[3] = {HK * G, T, D}, sk[3] = {HK, T, D};
    gten q = gnew(3, sq, 1.5), k = gnew(3, sk, 1.5), v = gnew(3, sk, 1.0);
    int64_t ws[] = {1, 6, 19, 50, 200};
    double *o = malloc((size_t)D * sizeof *o);
    assert_non_null(o);
    for (size_t wi = 0; wi < sizeof ws / sizeof *ws; wi++) {
        int64_t W = ws[wi];
        /* queries [30, 96) over key blocks cut at 10, 33, 55, 80 */
        const int64_t t0 = 30, t1 = 96, cuts[] = {0, 10, 33, 55, 80, 96};
        const int nb = 5;
        ein_box qb = {3, {0, t0, 0}, {HK * G, t1, D}};
        ein_box ob = ein_agg_box(EIN_AGG_LSE, &qb);
        kn_block Q = blk(&q, &qb), P[5];
        for (int j = 0; j < nb; j++) {
            ein_box kb = {3, {0, cuts[j], 0}, {HK, cuts[j + 1], D}};
            kn_block K = blk(&k, &kb), V = blk(&v, &kb);
            P[j] = outblk(&ob);
            ein_error err = {0};
            if (kn_cpu_attention_partial_window(G, W, ends, 3, &Q, &K, &V, &P[j], &err) != 0)
                fail_msg("partial W=%lld block %d: %s", (long long)W, j, err.msg);
            const float *y = P[j].data;
            for (int64_t h = 0; h < HK * G; h++)
                for (int64_t t = t0; t < t1; t++) {
                    double lse = ref_row(&q, &k, &v, G, W, ends, 3, h, t, cuts[j], cuts[j + 1], o);
                    const float *row = y + (h * (t1 - t0) + (t - t0)) * (D + 1);
                    for (int64_t e = 0; e < D; e++)
                        check("partial", row[e], o[e], 1e-4, h, t, e);
                    if (lse == -INFINITY) {
                        if (row[D] != -INFINITY)
                            fail_msg("partial W=%lld block %d row %lld,%lld: lse %g, want -inf",
                                     (long long)W, j, (long long)h, (long long)t, row[D]);
                    } else {
                        check("partial lse", row[D], lse, 1e-4, h, t, D);
                    }
                }
            free(K.data), free(V.data);
        }
        kn_block M = outblk(&ob);
        ein_error err = {0};
        assert_int_equal(kn_cpu_agg_lse(P, nb, &M, &err), 0);
        const float *y = M.data;
        for (int64_t h = 0; h < HK * G; h++)
            for (int64_t t = t0; t < t1; t++) {
                ref_row(&q, &k, &v, G, W, ends, 3, h, t, 0, T, o);
                for (int64_t e = 0; e < D; e++)
                    check("merged", y[(h * (t1 - t0) + (t - t0)) * (D + 1) + e], o[e], 1e-4, h,
                          t, e);
            }
        for (int j = 0; j < nb; j++)
            free(P[j].data);
        free(M.data), free(Q.data);
    }
    free(o);
    free(q.v), free(k.v), free(v.v);
}

/* decode_attention over a cache [HK, B, S, D] longer than the window:
 * row (qh, b*C + c) at position p = pos[b] + c sees keys (p - W, p]. Whole
 * cache (partial 0) and key blocks (partial 1, merged) both. */
static void test_decode_window(void **state)
{
    (void)state;
    const int64_t HK = 2, G = 3, B = 3, S = 64, D = 8;
    int64_t sc[4] = {HK, B, S, D};
    gten kc = gnew(4, sc, 1.5), vc = gnew(4, sc, 1.0);
    int64_t cs[] = {1, 4};
    int64_t ws[] = {1, 4, 9, 40, 64, 100};
    int64_t posv[3] = {0, 37, 59};   /* the last with C = 4 ends at 62 < S */
    double *o = malloc((size_t)D * sizeof *o);
    assert_non_null(o);
    for (size_t ci = 0; ci < 2; ci++)
        for (size_t wi = 0; wi < sizeof ws / sizeof *ws; wi++) {
            int64_t C = cs[ci], W = ws[wi];
            int64_t sq[3] = {HK * G, B * C, D};
            gten q = gnew(3, sq, 1.5);
            ein_box qb = {3, {0, 0, 0}, {HK * G, B * C, D}};
            ein_box pb = {1, {0}, {B}};
            int32_t pos32[3] = {(int32_t)posv[0], (int32_t)posv[1], (int32_t)posv[2]};
            kn_block Pos = {pos32, EIN_I32, pb};
            kn_block Q = blk(&q, &qb);
            /* reference on each row: keys of sequence b at [0, S) */
            double *want = malloc((size_t)(HK * G * B * C * D) * sizeof *want);
            assert_non_null(want);
            for (int64_t h = 0; h < HK * G; h++)
                for (int64_t bt = 0; bt < B * C; bt++) {
                    int64_t b = bt / C, p = posv[b] + bt % C, hk = h / G;
                    double mx = -INFINITY, sum = 0, scv[64];
                    for (int64_t u = 0; u < S; u++) {
                        scv[u] = -INFINITY;
                        if (!(u <= p && u > p - W))
                            continue;
                        double dot = 0;
                        for (int64_t e = 0; e < D; e++)
                            dot += gat(&q, h, bt, e, 0) * gat(&kc, hk, b, u, e);
                        scv[u] = dot / sqrt((double)D);
                        mx = fmax(mx, scv[u]);
                    }
                    for (int64_t e = 0; e < D; e++)
                        o[e] = 0;
                    for (int64_t u = 0; u < S; u++)
                        if (scv[u] > -INFINITY) {
                            double pe = exp(scv[u] - mx);
                            sum += pe;
                            for (int64_t e = 0; e < D; e++)
                                o[e] += pe * gat(&vc, hk, b, u, e);
                        }
                    for (int64_t e = 0; e < D; e++)
                        want[(h * B * C + bt) * D + e] = o[e] / sum;
                }
            /* whole cache */
            ein_box kb = {4, {0, 0, 0, 0}, {HK, B, S, D}};
            kn_block K = blk(&kc, &kb), V = blk(&vc, &kb), Y = outblk(&qb);
            ein_error err = {0};
            if (kn_cpu_decode_attention_window(G, W, 0, &Q, &K, &V, &Pos, &Y, &err) != 0)
                fail_msg("decode C=%lld W=%lld: %s", (long long)C, (long long)W, err.msg);
            for (int64_t i = 0; i < HK * G * B * C * D; i++)
                check("decode", ((float *)Y.data)[i], want[i], 1e-4, (long long)C, (long long)W, i);
            /* key blocks [0,16) [16,40) [40,64): partials merged */
            const int64_t cuts[] = {0, 16, 40, 64};
            ein_box ob = ein_agg_box(EIN_AGG_LSE, &qb);
            kn_block P[3];
            for (int j = 0; j < 3; j++) {
                ein_box kj = {4, {0, 0, cuts[j], 0}, {HK, B, cuts[j + 1], D}};
                kn_block Kj = blk(&kc, &kj), Vj = blk(&vc, &kj);
                P[j] = outblk(&ob);
                if (kn_cpu_decode_attention_window(G, W, 1, &Q, &Kj, &Vj, &Pos, &P[j], &err) != 0)
                    fail_msg("decode partial C=%lld W=%lld: %s", (long long)C, (long long)W,
                             err.msg);
                free(Kj.data), free(Vj.data);
            }
            kn_block M = outblk(&ob);
            assert_int_equal(kn_cpu_agg_lse(P, 3, &M, &err), 0);
            for (int64_t r = 0; r < HK * G * B * C; r++)
                for (int64_t e = 0; e < D; e++)
                    check("decode merged", ((float *)M.data)[r * (D + 1) + e], want[r * D + e],
                          1e-4, (long long)W, r, e);
            for (int j = 0; j < 3; j++)
                free(P[j].data);
            free(M.data), free(K.data), free(V.data), free(Y.data), free(Q.data), free(want);
            free(q.v);
        }
    free(o);
    free(kc.v), free(vc.v);
}

/* Through kn_cpu_run: the kernel's window field reaches the kernel, and a
 * negative window is refused by name in every kind. */
static void test_window_refused(void **state)
{
    (void)state;
    int64_t sq[3] = {2, 10, 4};
    gten q = gnew(3, sq, 1.0);
    ein_box b = {3, {0, 0, 0}, {2, 10, 4}};
    kn_block Q = blk(&q, &b), Y = outblk(&b);
    kn_block ins[3] = {Q, Q, Q};
    ein_kernel k = {.kind = EIN_KERNEL_ATTENTION, .group = 1, .window = -1};
    ein_error err = {0};
    assert_int_equal(kn_cpu_run(&k, ins, 3, &Y, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "window"));
    ein_box ob = ein_agg_box(EIN_AGG_LSE, &b);
    kn_block P = outblk(&ob);
    k.kind = EIN_KERNEL_ATTENTION_PARTIAL;
    memset(&err, 0, sizeof err);
    assert_int_equal(kn_cpu_run(&k, ins, 3, &P, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "window"));
    /* window 3 through kn_cpu_run: row t = 9 sees keys 7, 8, 9 only; the
     * same as the direct call */
    k.kind = EIN_KERNEL_ATTENTION;
    k.window = 3;
    assert_int_equal(kn_cpu_run(&k, ins, 3, &Y, &err), 0);
    kn_block Y2 = outblk(&b);
    assert_int_equal(kn_cpu_attention_window(1, 3, NULL, 0, &Q, &Q, &Q, &Y2, &err), 0);
    assert_memory_equal(Y.data, Y2.data, (size_t)ein_box_volume(&b) * sizeof(float));
    kn_block Y3 = outblk(&b);
    assert_int_equal(kn_cpu_attention(1, NULL, 0, &Q, &Q, &Q, &Y3, &err), 0);
    assert_memory_not_equal(Y.data, Y3.data, (size_t)ein_box_volume(&b) * sizeof(float));
    /* decode: negative window */
    int64_t sc[4] = {2, 1, 8, 4};
    gten kc = gnew(4, sc, 1.0);
    ein_box cb = {4, {0, 0, 0, 0}, {2, 1, 8, 4}}, dq = {3, {0, 0, 0}, {2, 1, 4}};
    kn_block K = blk(&kc, &cb), DQ = blk(&q, &dq), DY = outblk(&dq);
    int32_t p = 5;
    kn_block Pos = {&p, EIN_I32, {1, {0}, {1}}};
    kn_block dins[4] = {DQ, K, K, Pos};
    ein_kernel dk = {.kind = EIN_KERNEL_DECODE_ATTENTION, .group = 1, .window = -4};
    memset(&err, 0, sizeof err);
    assert_int_equal(kn_cpu_run(&dk, dins, 4, &DY, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "window -4 is negative"));
    free(Q.data), free(Y.data), free(Y2.data), free(Y3.data), free(P.data), free(K.data),
        free(DQ.data), free(DY.data);
    free(q.v), free(kc.v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention_window),
        cmocka_unit_test(test_attention_partial_window),
        cmocka_unit_test(test_decode_window),
        cmocka_unit_test(test_window_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
