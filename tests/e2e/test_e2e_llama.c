/* tests/e2e/test_e2e_llama.c — one LLaMA block end to end on CPU devices.
 *
 * Small shapes (d_model 256, 8 query heads, 2 kv heads, head dim 32, d_ff
 * 384, 8 packed sequences of uneven length, 64 tokens) on P = 1..8
 * devices: einrun's result must equal a single-process reference computed
 * here in double precision from the same .npy inputs. The reference follows
 * the operator semantics of kernels/kn_cpu.h (RMSNorm, interleaved-pair
 * RoPE with positions restarting at each sequence, causal grouped-query
 * attention within each sequence, SiLU-gated FFN, residuals). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <sys/stat.h>

#include "common/io/ein_npy.h"
#include "tests/e2e/e2e_util.h"

enum { T = 64, DM = 256, HQ = 8, HKV = 2, HD = 32, DKV = HKV * HD, DF = 384, NSEQ = 8 };
static const int seq_len[NSEQ] = {5, 9, 8, 11, 7, 6, 10, 8};
#define THETA 10000.0
#define EPS 1e-5

static const char *PROGRAM =
    "# One LLaMA block, small: 8 packed sequences, GQA 8/2, head dim 32.\n"
    "dims tokens=64 d_model=256 d_q=256 d_kv=64 d_ff=384 head_dim=32\n"
    "seqs [5, 9, 8, 11, 7, 6, 10, 8]\n"
    "input x[tokens, d_model]\n"
    "input attn_norm[d_model]\n"
    "input wq[d_model, d_q]\n"
    "input wk[d_model, d_kv]\n"
    "input wv[d_model, d_kv]\n"
    "input wo[d_q, d_model]\n"
    "input ffn_norm[d_model]\n"
    "input w1[d_model, d_ff]\n"
    "input w3[d_model, d_ff]\n"
    "input w2[d_ff, d_model]\n"
    "xn = rmsnorm(x, attn_norm, 1e-5)\n"
    "q = matmul(xn, wq)\n"
    "k = matmul(xn, wk)\n"
    "v = matmul(xn, wv)\n"
    "qr = rope(q, head_dim, 10000)\n"
    "kr = rope(k, head_dim, 10000)\n"
    "qh = split_heads(qr, head_dim)\n"
    "kh = split_heads(kr, head_dim)\n"
    "vh = split_heads(v, head_dim)\n"
    "att = attention(qh, kh, vh)\n"
    "am = merge_heads(att)\n"
    "o = matmul(am, wo)\n"
    "h = add(x, o)\n"
    "hn = rmsnorm(h, ffn_norm, 1e-5)\n"
    "g1 = matmul(hn, w1)\n"
    "g3 = matmul(hn, w3)\n"
    "sg = silu(g1)\n"
    "ff = mul(sg, g3)\n"
    "f2 = matmul(ff, w2)\n"
    "y = add(h, f2)\n"
    "save y\n";

typedef struct inputs {
    double *x, *attn_norm, *wq, *wk, *wv, *wo, *ffn_norm, *w1, *w3, *w2;
} inputs;

/* Random values of the given scale, written to NAME.npy (f32) and kept in
 * double for the reference; rows == 0 makes a vector of `cols`. */
static double *input(const char *name, int rows, int cols, double scale)
{
    int n = (rows ? rows : 1) * cols;
    double *d = malloc(sizeof(double) * (size_t)n);
    float *f = malloc(sizeof(float) * (size_t)n);
    assert_non_null(d);
    assert_non_null(f);
    for (int i = 0; i < n; i++) {
        f[i] = (float)(scale * ((rand() % 2001) - 1000) / 1000.0);
        d[i] = f[i];
    }
    char path[600];
    int64_t shape[2] = {rows, cols};
    ein_error err = {0};
    snprintf(path, sizeof path, "%s/%s.npy", e2e_scratch(), name);
    if (rows)
        assert_int_equal(ein_npy_save(path, EIN_F32, 2, shape, f, &err), 0);
    else
        assert_int_equal(ein_npy_save(path, EIN_F32, 1, &shape[1], f, &err), 0);
    free(f);
    return d;
}

static void rmsnorm(const double *x, const double *w, double *out)
{
    for (int t = 0; t < T; t++) {
        double ss = 0;
        for (int i = 0; i < DM; i++)
            ss += x[t * DM + i] * x[t * DM + i];
        double r = 1.0 / sqrt(ss / DM + EPS);
        for (int i = 0; i < DM; i++)
            out[t * DM + i] = x[t * DM + i] * r * w[i];
    }
}

static int seq_start(int t)
{
    int s = 0;
    for (int i = 0; i < NSEQ; i++) {
        if (t < s + seq_len[i])
            return s;
        s += seq_len[i];
    }
    return s;
}

static void rope(double *x, int width)
{
    for (int t = 0; t < T; t++) {
        double p = t - seq_start(t);
        for (int h = 0; h < width / HD; h++)
            for (int i = 0; i < HD / 2; i++) {
                double ang = p * pow(THETA, -2.0 * i / HD);
                double *a = &x[t * width + h * HD + 2 * i], *b = a + 1;
                double u = *a, w = *b;
                *a = u * cos(ang) - w * sin(ang);
                *b = u * sin(ang) + w * cos(ang);
            }
    }
}

/* q [T, HQ*HD], k/v [T, HKV*HD] (token-major, before split_heads); out
 * [T, HQ*HD] (after merge_heads). */
static void attention(const double *q, const double *k, const double *v, double *out)
{
    double *s = malloc(sizeof(double) * T);
    for (int h = 0; h < HQ; h++) {
        int g = h / (HQ / HKV);
        for (int t = 0; t < T; t++) {
            int st = seq_start(t);
            double mx = -INFINITY, sum = 0;
            for (int u = st; u <= t; u++) {
                double d = 0;
                for (int e = 0; e < HD; e++)
                    d += q[t * HQ * HD + h * HD + e] * k[u * DKV + g * HD + e];
                s[u] = d / sqrt((double)HD);
                mx = fmax(mx, s[u]);
            }
            for (int u = st; u <= t; u++)
                sum += (s[u] = exp(s[u] - mx));
            for (int e = 0; e < HD; e++) {
                double o = 0;
                for (int u = st; u <= t; u++)
                    o += s[u] * v[u * DKV + g * HD + e];
                out[t * HQ * HD + h * HD + e] = o / sum;
            }
        }
    }
    free(s);
}

static double *reference(const inputs *in)
{
    double *xn = malloc(sizeof(double) * T * DM), *q = malloc(sizeof(double) * T * DM);
    double *k = malloc(sizeof(double) * T * DKV), *v = malloc(sizeof(double) * T * DKV);
    double *att = malloc(sizeof(double) * T * DM), *o = malloc(sizeof(double) * T * DM);
    double *h = malloc(sizeof(double) * T * DM), *hn = malloc(sizeof(double) * T * DM);
    double *g1 = malloc(sizeof(double) * T * DF), *g3 = malloc(sizeof(double) * T * DF);
    double *f2 = malloc(sizeof(double) * T * DM), *y = malloc(sizeof(double) * T * DM);
    rmsnorm(in->x, in->attn_norm, xn);
    e2e_matmul_ref(xn, in->wq, q, T, DM, DM);
    e2e_matmul_ref(xn, in->wk, k, T, DM, DKV);
    e2e_matmul_ref(xn, in->wv, v, T, DM, DKV);
    rope(q, DM);
    rope(k, DKV);
    attention(q, k, v, att);
    e2e_matmul_ref(att, in->wo, o, T, DM, DM);
    for (int i = 0; i < T * DM; i++)
        h[i] = in->x[i] + o[i];
    rmsnorm(h, in->ffn_norm, hn);
    e2e_matmul_ref(hn, in->w1, g1, T, DM, DF);
    e2e_matmul_ref(hn, in->w3, g3, T, DM, DF);
    for (int i = 0; i < T * DF; i++)
        g1[i] = g1[i] / (1 + exp(-g1[i])) * g3[i];
    e2e_matmul_ref(g1, in->w2, f2, T, DF, DM);
    for (int i = 0; i < T * DM; i++)
        y[i] = h[i] + f2[i];
    free(xn), free(q), free(k), free(v), free(att), free(o), free(h), free(hn), free(g1);
    free(g3), free(f2);
    return y;
}

static inputs in;
static double *want;

static int setup(void **state)
{
    (void)state;
    srand(777);
    in.x = input("x", T, DM, 1.0);
    in.attn_norm = input("attn_norm", 0, DM, 1.0);
    in.wq = input("wq", DM, DM, 1.0 / 16);
    in.wk = input("wk", DM, DKV, 1.0 / 16);
    in.wv = input("wv", DM, DKV, 1.0 / 16);
    in.wo = input("wo", DM, DM, 1.0 / 16);
    in.ffn_norm = input("ffn_norm", 0, DM, 1.0);
    in.w1 = input("w1", DM, DF, 1.0 / 16);
    in.w3 = input("w3", DM, DF, 1.0 / 16);
    in.w2 = input("w2", DF, DM, 1.0 / 20);
    want = reference(&in);
    e2e_write_file("llama.ein", PROGRAM);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    free(in.x), free(in.attn_norm), free(in.wq), free(in.wk), free(in.wv), free(in.wo);
    free(in.ffn_norm), free(in.w1), free(in.w3), free(in.w2), free(want);
    e2e_scratch_remove();
    return 0;
}

/* Runs einrun --cpu p with the extra options (NULL-terminated) and checks
 * y against the reference. */
static void run_p_argv(int p, const char *const *extra)
{
    static const char *names[] = {"x", "attn_norm", "wq", "wk", "wv", "wo",
                                  "ffn_norm", "w1", "w3", "w2"};
    char np[16], bind[10][64], out[16384];
    char *argv[40];
    int a = 0;
    snprintf(np, sizeof np, "%d", p);
    argv[a++] = (char *)e2e_bin("einrun");
    argv[a++] = "--cpu";
    argv[a++] = np;
    argv[a++] = "--timeout";
    argv[a++] = "120";
    for (int i = 0; i < 10; i++) {
        snprintf(bind[i], sizeof bind[i], "%s=%s.npy", names[i], names[i]);
        argv[a++] = "--input";
        argv[a++] = bind[i];
    }
    for (int i = 0; extra[i] && a < 37; i++)
        argv[a++] = (char *)extra[i];
    argv[a++] = "llama.ein";
    argv[a] = NULL;
    int rc = e2e_run(argv, out, sizeof out);
    if (rc != 0)
        fail_msg("einrun --cpu %d exited %d:\n%s", p, rc, out);
    char path[600];
    snprintf(path, sizeof path, "%s/y.npy", e2e_scratch());
    ein_npy_info info;
    void *data = NULL;
    ein_error err = {0};
    if (ein_npy_load(path, &info, &data, &err) < 0)
        fail_msg("cannot read y.npy: %s", err.msg);
    assert_int_equal(info.shape[0], T);
    assert_int_equal(info.shape[1], DM);
    const float *y = data;
    double scale = 0;
    for (int i = 0; i < T * DM; i++)
        scale = fmax(scale, fabs(want[i]));
    for (int i = 0; i < T * DM; i++)
        if (!(fabs(y[i] - want[i]) <= 1e-4 * scale + 1e-5)) /* NaN fails too */
            fail_msg("P=%d: y[%d][%d] = %.7g, expected %.7g", p, i / DM, i % DM, y[i], want[i]);
    free(data);
    unlink(path);
    char what[4096];
    if (e2e_leftovers(what, sizeof what))
        fail_msg("leftovers: %s", what);
}

static void run_p_with(int p, const char *opt1, const char *opt2, const char *opt3,
                       const char *opt4)
{
    const char *extra[] = {opt1, opt2, opt3, opt4, NULL};
    int n = 0;
    for (int i = 0; i < 4; i++)
        if (extra[i])
            extra[n++] = extra[i];
    extra[n] = NULL;
    run_p_argv(p, extra);
}

static void run_p(int p)
{
    run_p_with(p, NULL, NULL, NULL, NULL);
}

/* Graphs: three iterations, the second captures every local stretch and
 * the third replays them. EIN_POISON makes every worker fill each buffer
 * no LOAD fills with NaN before iterations 2 and 3, so a stretch that ran
 * before its inputs arrived, or a replay that missed an instruction, shows
 * in y instead of reading the previous iteration's equal values. The
 * device 0 log must show graphs captured and launched. */
static void run_graphs(int p, const char *opt1, const char *opt2)
{
    char logdir[600], log[700], text[65536];
    snprintf(logdir, sizeof logdir, "%s/graphlogs-%d", e2e_scratch(), p);
    mkdir(logdir, 0700);
    const char *extra[] = {"--iterations", "3", "--graphs", "on", "--log-dir", logdir,
                           opt1, opt2, NULL};
    setenv("EIN_POISON", "1", 1);
    run_p_argv(p, extra);
    unsetenv("EIN_POISON");
    snprintf(log, sizeof log, "%s/worker-0.log", logdir);
    FILE *f = fopen(log, "r");
    if (!f)
        fail_msg("no log %s", log);
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    int captured = -1, launches = -1;
    for (const char *q = text; (q = strstr(q, "(graphs: ")); q++)
        sscanf(q, "(graphs: %d captured, %d launches", &captured, &launches);
    if (captured <= 0 || launches < 2 * captured)
        fail_msg("P=%d: device 0 captured %d graphs and launched %d:\n%s", p, captured,
                 launches, text);
    print_message("# P=%d: device 0 captured %d graphs, %d launches\n", p, captured, launches);
}

static void llama_p1_graphs(void **s)
{
    (void)s;
    run_graphs(1, NULL, NULL);
}

static void llama_p4_graphs(void **s)
{
    (void)s;
    run_graphs(4, NULL, NULL);
}

static void llama_p8_graphs_dgx_v100(void **s)
{
    (void)s;
    run_graphs(8, "--topology", "dgx-v100");
}

/* Poisoning alone, without graphs: the iteration barrier and the
 * LOAD-once rule keep the plain executor right too. */
static void llama_p3_poisoned_iterations(void **s)
{
    (void)s;
    const char *extra[] = {"--iterations", "3", NULL};
    setenv("EIN_POISON", "1", 1);
    run_p_argv(3, extra);
    unsetenv("EIN_POISON");
}

#define P(n) static void llama_p##n(void **s) { (void)s; run_p(n); }
P(1) P(2) P(3) P(4) P(5) P(6) P(7) P(8)

/* The naive exchange bodies, and bodies synthesised for the DGX-1V, whose
 * search introduces relays, multicasts and partial aggregations. */
static void llama_p4_naive(void **s)
{
    (void)s;
    run_p_with(4, "--schedule", "naive", NULL, NULL);
}

static void llama_p8_dgx_v100(void **s)
{
    (void)s;
    run_p_with(8, "--topology", "dgx-v100", "--search-work", "10000");
}

static void llama_p6_dgx_h100(void **s)
{
    (void)s;
    run_p_with(6, "--topology", "dgx-h100", NULL, NULL);
}

/* Chunked exchanges (docs/exprog.md): every action of every body moved as
 * a stream of chunks ($EIN_EXCHANGE_CHUNKS, what einrun --exchange-chunks
 * sets), on the DGX-1V bodies with relays and multicasts, 3 poisoned
 * iterations so that a chunk read before it arrived shows as NaN; 3 chunks
 * of atoms whose rows 3 does not divide (uneven chunks, some empty); and
 * what the synthesis picks with chunks allowed. Same reference as above. */
static void run_chunked(int p, const char *chunks, const char *const *extra)
{
    setenv("EIN_EXCHANGE_CHUNKS", chunks, 1);
    setenv("EIN_POISON", "1", 1);
    run_p_argv(p, extra);
    unsetenv("EIN_POISON");
    unsetenv("EIN_EXCHANGE_CHUNKS");
}

static void llama_p8_dgx_v100_chunks4(void **s)
{
    (void)s;
    const char *extra[] = {"--topology", "dgx-v100", "--search-work", "10000", "--iterations",
                           "3", NULL};
    run_chunked(8, "4", extra);
}

static void llama_p4_naive_chunks3(void **s)
{
    (void)s;
    const char *extra[] = {"--schedule", "naive", "--iterations", "3", NULL};
    run_chunked(4, "3", extra);
}

static void llama_p8_dgx_v100_chunks_auto(void **s)
{
    (void)s;
    const char *extra[] = {"--topology", "dgx-v100", "--iterations", "2", NULL};
    run_chunked(8, "auto", extra);
}

int main(void)
{
    e2e_scratch();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(llama_p1), cmocka_unit_test(llama_p2), cmocka_unit_test(llama_p3),
        cmocka_unit_test(llama_p4), cmocka_unit_test(llama_p5), cmocka_unit_test(llama_p6),
        cmocka_unit_test(llama_p7), cmocka_unit_test(llama_p8),
        cmocka_unit_test(llama_p4_naive), cmocka_unit_test(llama_p8_dgx_v100),
        cmocka_unit_test(llama_p6_dgx_h100),
        cmocka_unit_test(llama_p1_graphs), cmocka_unit_test(llama_p4_graphs),
        cmocka_unit_test(llama_p8_graphs_dgx_v100),
        cmocka_unit_test(llama_p3_poisoned_iterations),
        cmocka_unit_test(llama_p8_dgx_v100_chunks4), cmocka_unit_test(llama_p4_naive_chunks3),
        cmocka_unit_test(llama_p8_dgx_v100_chunks_auto),
    };
    return cmocka_run_group_tests_name("e2e_llama", tests, setup, teardown);
}
