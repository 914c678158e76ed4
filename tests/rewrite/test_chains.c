/* tests/rewrite/test_chains.c — extraction after equality saturation.
 *
 * Each matrix chain A–E of PAPER_NOTES §5, written left-deep, must come
 * out of pl_rewrite at the FLOP count of the classical matrix-chain
 * dynamic program (computed here, independently of the e-graph), and the
 * extracted graph must compute what the input graph computes (both run on
 * the CPU reference kernels, small random shapes). The multi-pattern merge
 * of two matmuls sharing an input is checked the same way. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <unistd.h>
#include <cmocka.h>

#include "planner/pl_parse.h"
#include "planner/rewrite/pl_rewrite.h"
#include "rw_exec.h"

/* ((M1 M2) M3) ... Mn over dims d[0..n]. */
static pl_graph *left_deep(const int64_t *d, int n)
{
    ein_error err = {0};
    pl_graph *g = pl_graph_new();
    int ids[32];
    for (int i = 0; i < n; i++) {
        char name[16];
        int64_t s[2] = {d[i], d[i + 1]};
        snprintf(name, sizeof name, "M%d", i + 1);
        ids[i] = pl_graph_add_input(g, name, EIN_F32, 2, s, &err);
        assert_true(ids[i] >= 0);
    }
    int acc = ids[0];
    for (int i = 1; i < n; i++) {
        char name[16];
        snprintf(name, sizeof name, "P%d", i);
        acc = pl_graph_add_matmul(g, name, acc, ids[i], &err);
        assert_true(acc >= 0);
    }
    assert_int_equal(pl_graph_save(g, acc, &err), 0);
    return g;
}

/* Classical O(n^3) DP: multiply-adds of the best parenthesisation. */
static double chain_dp(const int64_t *d, int n)
{
    double m[32][32];
    for (int i = 0; i < n; i++)
        m[i][i] = 0;
    for (int len = 2; len <= n; len++)
        for (int i = 0; i + len - 1 < n; i++) {
            int j = i + len - 1;
            m[i][j] = INFINITY;
            for (int k = i; k < j; k++) {
                double c = m[i][k] + m[k + 1][j] + (double)d[i] * (double)d[k + 1] * (double)d[j + 1];
                if (c < m[i][j])
                    m[i][j] = c;
            }
        }
    return m[0][n - 1];
}

static double left_deep_madds(const int64_t *d, int n)
{
    double s = 0;
    for (int i = 1; i < n; i++)
        s += (double)d[0] * (double)d[i] * (double)d[i + 1];
    return s;
}

static const pl_rewrite_opts flops_only = {.peak_flops = 1.0, .hbm_bw = -1, .k_multi = -1,
                                           .work_limit = 2000000000L};

static void check_chain(const int64_t *d, int n)
{
    pl_graph *g = left_deep(d, n), *out = NULL;
    pl_rewrite_stats st;
    ein_error err = {0};
    int rc = pl_rewrite(g, &flops_only, &out, &st, &err);
    if (rc < 0)
        fail_msg("pl_rewrite: %s", err.msg);
    if (st.stop != PL_RW_SATURATED)
        fail_msg("stopped by %s after %d iterations", pl_rewrite_stop_name(st.stop),
                 st.iterations);
    double want = 2 * chain_dp(d, n);
    if (st.flops_before != 2 * left_deep_madds(d, n))
        fail_msg("input FLOPs %.0f, expected %.0f", st.flops_before, 2 * left_deep_madds(d, n));
    if (st.flops_after != want)
        fail_msg("extracted %.0f FLOPs, the matrix-chain DP gives %.0f", st.flops_after, want);
    /* n inputs and n-1 matmuls, the output under its name. */
    assert_int_equal(out->nnodes, 2 * n - 1);
    char last[16];
    snprintf(last, sizeof last, "P%d", n - 1);
    int id = pl_graph_find(out, last);
    assert_true(id >= 0 && out->nodes[id].saved);
    pl_graph_free(out);
    pl_graph_free(g);
}

static void test_chain_a(void **s)
{
    (void)s;
    static const int64_t d[] = {10240, 16384, 6144, 16384, 6144, 16384, 6144, 16384, 6144, 10240};
    check_chain(d, 9);
}
static void test_chain_b(void **s)
{
    (void)s;
    static const int64_t d[] = {9216, 20480, 5120, 20480, 5120, 9216};
    check_chain(d, 5);
}
static void test_chain_c(void **s)
{
    (void)s;
    static const int64_t d[] = {10240, 12288, 32768, 2048};
    check_chain(d, 3);
    /* The paper's order for C, reported as text. */
    pl_graph *g = left_deep(d, 3), *out = NULL;
    ein_error err = {0};
    char buf[64];
    assert_int_equal(pl_rewrite(g, &flops_only, &out, NULL, &err), 0);
    assert_int_equal(pl_rewrite_expr(out, pl_graph_find(out, "P2"), buf, sizeof buf), 0);
    assert_string_equal(buf, "(M1 (M2 M3))");
    assert_int_equal(pl_rewrite_expr(g, pl_graph_find(g, "P2"), buf, sizeof buf), 0);
    assert_string_equal(buf, "((M1 M2) M3)");
    assert_int_equal(pl_rewrite_expr(g, pl_graph_find(g, "P2"), buf, 8), 0);
    assert_true(strlen(buf) < 8);
    pl_graph_free(out);
    pl_graph_free(g);
}
static void test_chain_d(void **s)
{
    (void)s;
    static const int64_t d[] = {24576, 1536, 20480, 20480, 20480, 20480, 20480, 20480, 1536, 24576};
    check_chain(d, 9);
}
static void test_chain_e(void **s)
{
    (void)s;
    static const int64_t d[] = {49152, 1024, 20480, 20480, 20480, 20480, 20480, 20480,
                                20480, 20480, 20480, 20480, 1024, 49152};
    check_chain(d, 13);
}

static void assert_same(const pl_graph *a, const pl_graph *b, const char *name, double tol)
{
    int64_t va = 0, vb = 0;
    float *x = rw_exec_run(a, name, 7, &va), *y = rw_exec_run(b, name, 7, &vb);
    assert_non_null(x);
    assert_non_null(y);
    assert_int_equal(va, vb);
    for (int64_t i = 0; i < va; i++)
        if (!(fabsf(x[i] - y[i]) <= tol * (1 + fabsf(x[i])))) /* NaN fails too */
            fail_msg("%s[%lld]: %g before, %g after rewriting", name, (long long)i, x[i], y[i]);
    free(x);
    free(y);
}

/* Random small chains: DP FLOPs, and the same numbers before and after. */
static void test_chain_random_equal(void **s)
{
    (void)s;
    uint64_t h = 12345;
    for (int t = 0; t < 30; t++) {
        int64_t d[10];
        int n = 2 + (int)(t % 8);
        for (int i = 0; i <= n; i++) {
            h ^= h << 13, h ^= h >> 7, h ^= h << 17;
            d[i] = 1 + (int64_t)(h % 12);
        }
        pl_graph *g = left_deep(d, n), *out = NULL;
        pl_rewrite_stats st;
        ein_error err = {0};
        if (pl_rewrite(g, &flops_only, &out, &st, &err) < 0)
            fail_msg("pl_rewrite: %s", err.msg);
        assert_true(st.flops_after == 2 * chain_dp(d, n));
        char last[16];
        snprintf(last, sizeof last, "P%d", n - 1);
        assert_same(g, out, last, 1e-4);
        pl_graph_free(out);
        pl_graph_free(g);
    }
}

/* Gate/up of a gated FFN: two matmuls sharing x merge into one on
 * concat(w1, w3) followed by slices, when kernel launches cost time. */
static void test_merge_shared_input(void **s)
{
    (void)s;
    ein_error err = {0};
    pl_graph *g = pl_graph_new(), *out = NULL;
    int64_t sx[2] = {6, 8}, sw[2] = {8, 5}, sw2[2] = {5, 8};
    int x = pl_graph_add_input(g, "x", EIN_F32, 2, sx, &err);
    int w1 = pl_graph_add_input(g, "w1", EIN_F32, 2, sw, &err);
    int w3 = pl_graph_add_input(g, "w3", EIN_F32, 2, sw, &err);
    int w2 = pl_graph_add_input(g, "w2", EIN_F32, 2, sw2, &err);
    int g1 = pl_graph_add_matmul(g, "g1", x, w1, &err);
    int g3 = pl_graph_add_matmul(g, "g3", x, w3, &err);
    int a = pl_graph_add_unary(g, "a", EIN_UN_SILU, 0, g1, &err);
    int h = pl_graph_add_binary(g, "h", EIN_BIN_MUL, a, g3, &err);
    int y = pl_graph_add_matmul(g, "y", h, w2, &err);
    assert_true(y >= 0);
    assert_int_equal(pl_graph_save(g, y, &err), 0);
    static const char *const weights[] = {"w1", "w2", "w3", NULL};
    pl_rewrite_opts o = {.weights = weights, .launch_s = 5e-6};
    pl_rewrite_stats st;
    if (pl_rewrite(g, &o, &out, &st, &err) < 0)
        fail_msg("pl_rewrite: %s", err.msg);
    int matmuls = 0, concats = 0, slices = 0;
    for (int i = 0; i < out->nnodes; i++) {
        matmuls += out->nodes[i].kind == PL_EINSUM;
        concats += out->nodes[i].kind == PL_CONCAT;
        slices += out->nodes[i].kind == PL_SLICE;
    }
    if (matmuls != 2 || concats != 1 || slices != 2)
        fail_msg("%d matmuls, %d concats, %d slices; expected 2, 1, 2", matmuls, concats, slices);
    assert_true(st.cost_after < st.cost_before);
    assert_same(g, out, "y", 1e-4);
    pl_graph_free(out);
    pl_graph_free(g);
}

/* A small LLaMA block (examples/llama_block.ein at toy sizes, two packed
 * sequences): with k_multi = 1, Q/K/V give one merged pair and gate/up
 * merge; the rewritten block computes the same y. */
static const char llama_small[] =
    "dims tokens=12 d_model=16 d_q=16 d_kv=8 d_ff=24 head_dim=4\n"
    "seqs [5, 7]\n"
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
    "qr = rope(q, head_dim, 500000)\n"
    "kr = rope(k, head_dim, 500000)\n"
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

static void test_llama_block_merge(void **s)
{
    (void)s;
    pl_graph *g = NULL, *out = NULL;
    ein_error err = {0};
    if (pl_ein_parse("llama_small.ein", llama_small, sizeof llama_small - 1, &g, &err) < 0)
        fail_msg("%s", err.msg);
    static const char *const weights[] = {"attn_norm", "wq", "wk", "wv", "wo", "ffn_norm",
                                          "w1", "w3", "w2", NULL};
    pl_rewrite_opts o = {.weights = weights, .launch_s = 5e-6};
    pl_rewrite_stats st;
    if (pl_rewrite(g, &o, &out, &st, &err) < 0)
        fail_msg("pl_rewrite: %s", err.msg);
    int before = 0, after = 0;
    for (int i = 0; i < g->nnodes; i++)
        before += g->nodes[i].kind == PL_EINSUM;
    for (int i = 0; i < out->nnodes; i++)
        after += out->nodes[i].kind == PL_EINSUM;
    if (before != 7 || after != 5)
        fail_msg("%d matmuls before, %d after; expected 7 and 5", before, after);
    assert_true(st.cost_after < st.cost_before);
    assert_same(g, out, "y", 1e-4);
    pl_graph_free(out);
    pl_graph_free(g);
}

/* A rule that puts a class inside itself: M = slice(concat(M, M)). The
 * cycle filter blacklists the new node and extraction keeps the matmul. */
static void test_cycle_filter(void **s)
{
    (void)s;
    char path[] = "/tmp/rw_cycle_XXXXXX.rules";
    int fd = mkstemps(path, 6);
    assert_true(fd >= 0);
    const char *text = "(rule wrap (matmul ?a ?b)\n"
                       "  (slice 1 0 (dim ?b 1) (concat 1 (matmul ?a ?b) (matmul ?a ?b))))\n";
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    ein_error err = {0};
    pl_graph *g = pl_graph_new(), *out = NULL;
    int64_t sa[2] = {3, 4}, sb[2] = {4, 5};
    int a = pl_graph_add_input(g, "a", EIN_F32, 2, sa, &err);
    int b = pl_graph_add_input(g, "b", EIN_F32, 2, sb, &err);
    int y = pl_graph_add_matmul(g, "y", a, b, &err);
    assert_int_equal(pl_graph_save(g, y, &err), 0);
    pl_rewrite_opts o = {.rules_path = path, .slice_cost = 0};
    pl_rewrite_stats st;
    int rc = pl_rewrite(g, &o, &out, &st, &err);
    unlink(path);
    if (rc < 0)
        fail_msg("pl_rewrite: %s", err.msg);
    assert_true(st.blacklisted >= 1);
    assert_int_equal(out->nnodes, 3);
    assert_same(g, out, "y", 1e-5);
    pl_graph_free(out);
    pl_graph_free(g);
}

/* a@b + a@c: factoring saves a matmul (distributivity, backwards). */
static void test_factor(void **s)
{
    (void)s;
    ein_error err = {0};
    pl_graph *g = pl_graph_new(), *out = NULL;
    int64_t sa[2] = {7, 9}, sb[2] = {9, 6};
    int a = pl_graph_add_input(g, "a", EIN_F32, 2, sa, &err);
    int b = pl_graph_add_input(g, "b", EIN_F32, 2, sb, &err);
    int c = pl_graph_add_input(g, "c", EIN_F32, 2, sb, &err);
    int ab = pl_graph_add_matmul(g, "ab", a, b, &err);
    int ac = pl_graph_add_matmul(g, "ac", a, c, &err);
    int y = pl_graph_add_binary(g, "y", EIN_BIN_ADD, ab, ac, &err);
    assert_int_equal(pl_graph_save(g, y, &err), 0);
    pl_rewrite_stats st;
    if (pl_rewrite(g, &flops_only, &out, &st, &err) < 0)
        fail_msg("pl_rewrite: %s", err.msg);
    /* 2*7*9*6 + 9*6 (the add of b and c) */
    assert_true(st.flops_after == 2.0 * 7 * 9 * 6 + 9 * 6);
    char buf[64];
    assert_int_equal(pl_rewrite_expr(out, pl_graph_find(out, "y"), buf, sizeof buf), 0);
    assert_string_equal(buf, "(a (add b c))");
    assert_same(g, out, "y", 1e-4);
    pl_graph_free(out);
    pl_graph_free(g);
}

/* ILP extraction (CBC): on chains it reaches the DP too, and on the small
 * LLaMA block it is never worse than greedy + local search. A build
 * without CBC must say so with EIN_EUNSUPPORTED. */
static void test_ilp(void **s)
{
    (void)s;
    static const int64_t d[] = {9216, 20480, 5120, 20480, 5120, 9216};
    pl_graph *g = left_deep(d, 5), *out = NULL;
    pl_rewrite_opts o = flops_only;
    o.ilp = 1;
    o.ilp_time_s = 5;
    pl_rewrite_stats st;
    ein_error err = {0};
    int rc = pl_rewrite(g, &o, &out, &st, &err);
    if (rc == EIN_EUNSUPPORTED) {
        assert_non_null(strstr(err.msg, "CBC"));
        pl_graph_free(g);
        return;
    }
    if (rc < 0)
        fail_msg("pl_rewrite: %s", err.msg);
    assert_true(st.flops_after == 2 * chain_dp(d, 5));
    pl_graph_free(out);
    pl_graph_free(g);

    if (pl_ein_parse("llama_small.ein", llama_small, sizeof llama_small - 1, &g, &err) < 0)
        fail_msg("%s", err.msg);
    static const char *const weights[] = {"attn_norm", "wq", "wk", "wv", "wo", "ffn_norm",
                                          "w1", "w3", "w2", NULL};
    pl_rewrite_opts o2 = {.weights = weights, .launch_s = 5e-6, .k_multi = 2};
    pl_rewrite_stats greedy_st;
    assert_int_equal(pl_rewrite(g, &o2, &out, &greedy_st, &err), 0);
    pl_graph_free(out);
    o2.ilp = 1;
    o2.ilp_time_s = 5;
    if (pl_rewrite(g, &o2, &out, &st, &err) < 0)
        fail_msg("pl_rewrite: %s", err.msg);
    assert_true(st.cost_after <= greedy_st.cost_after);
    assert_same(g, out, "y", 1e-4);
    pl_graph_free(out);
    pl_graph_free(g);
}

/* Limits and the backoff scheduler: every stop reason is reported, and a
 * stopped run still returns a graph equal to its input. */
static void test_limits(void **s)
{
    (void)s;
    static const int64_t d[] = {5, 2, 7, 3, 9, 2, 6, 4, 8};
    pl_graph *g = left_deep(d, 8), *out = NULL;
    ein_error err = {0};
    pl_rewrite_stats st;
    pl_rewrite_opts o = flops_only;
    o.iter_limit = 1;
    assert_int_equal(pl_rewrite(g, &o, &out, &st, &err), 0);
    assert_int_equal(st.stop, PL_RW_ITER_LIMIT);
    assert_int_equal(st.iterations, 1);
    assert_true(st.flops_after <= st.flops_before);
    assert_same(g, out, "P7", 1e-4);
    pl_graph_free(out);
    o = flops_only;
    o.node_limit = 40;
    assert_int_equal(pl_rewrite(g, &o, &out, &st, &err), 0);
    assert_int_equal(st.stop, PL_RW_NODE_LIMIT);
    assert_same(g, out, "P7", 1e-4);
    pl_graph_free(out);
    o = flops_only;
    o.work_limit = 1;
    assert_int_equal(pl_rewrite(g, &o, &out, &st, &err), 0);
    assert_int_equal(st.stop, PL_RW_WORK_LIMIT);
    assert_int_equal(st.iterations, 1);
    assert_true(st.work > 1);
    pl_graph_free(out);
    /* Backoff: with at most 2 matches before a ban, rules are banned
     * again and again, yet the run still saturates at the DP optimum. */
    o = flops_only;
    o.match_limit = 2;
    o.ban_length = 1;
    o.iter_limit = 1000;
    assert_int_equal(pl_rewrite(g, &o, &out, &st, &err), 0);
    assert_int_equal(st.stop, PL_RW_SATURATED);
    assert_true(st.flops_after == 2 * chain_dp(d, 8));
    assert_int_equal(st.enodes, 8 + 9 * 8 * 7 / 6);
    pl_graph_free(out);
    pl_graph_free(g);
}

/* ---- concat/slice, elementwise-through-concat and transpose rules -------
 * Each case is a small graph whose interesting part is a left side of the
 * rules of 30-concat.rules / 40-transpose.rules. With the shipped rules it
 * is rewritten twice: cheapest extraction (at most `max_ops` operators
 * remain) and `prefer_new` extraction (the newest e-node of every class,
 * i.e. the rewrites' results, is what runs); both must compute what the
 * input computes, and saturation must stop by saturating. */
typedef struct rw_case {
    const char *what, *text;
    int max_ops;
} rw_case;

static const rw_case rw_cases[] = {
    {"slice-concat-first", "input a[3, 4]\ninput b[2, 4]\nc = concat(a, b, 0)\n"
     "s = slice(c, 0, 0, 3)\ny = relu(s)\nsave y\n", 1},
    {"slice-concat-second", "input a[4, 3]\ninput b[4, 2]\nc = concat(a, b, 1)\n"
     "s = slice(c, 1, 3, 5)\ny = relu(s)\nsave y\n", 1},
    {"concat-slices", "input x[5, 4]\ns1 = slice(x, 0, 0, 2)\ns2 = slice(x, 0, 2, 5)\n"
     "c = concat(s1, s2, 0)\ny = neg(c)\nsave y\n", 1},
    {"slice-concat-in", "input a[4, 6]\ninput b[4, 3]\nc = concat(a, b, 1)\n"
     "s1 = slice(c, 1, 1, 4)\ns2 = slice(c, 1, 7, 9)\ny = mul(s1, s1)\nz = exp(s2)\n"
     "save y\nsave z\n", 4},
    {"unary-concat relu", "input a[3, 4]\ninput b[2, 4]\nc = concat(a, b, 0)\n"
     "u = relu(c)\ny = slice(u, 0, 0, 3)\nsave y\n", 1},
    {"unary-concat silu", "input a[3, 4]\ninput b[2, 4]\nc = concat(a, b, 0)\n"
     "u = silu(c)\ny = slice(u, 0, 3, 5)\nsave y\n", 1},
    {"unary-concat gelu", "input a[4, 3]\ninput b[4, 2]\nc = concat(a, b, 1)\n"
     "u = gelu(c)\ny = slice(u, 1, 3, 5)\nsave y\n", 1},
    {"unary-concat exp", "input a[4, 3]\ninput b[4, 2]\nc = concat(a, b, 1)\n"
     "u = exp(c)\ny = slice(u, 1, 0, 3)\nsave y\n", 1},
    {"unary-concat neg", "input a[4, 3]\ninput b[4, 2]\nc = concat(a, b, 1)\n"
     "u = neg(c)\ny = slice(u, 1, 0, 3)\nsave y\n", 1},
    {"unary-concat scale", "input a[4, 3]\ninput b[4, 2]\nc = concat(a, b, 1)\n"
     "u = scale(c, 0.25)\ny = slice(u, 1, 3, 5)\nsave y\n", 1},
    {"concat-unary", "input a[3, 4]\ninput b[2, 4]\nsa = scale(a, 0.5)\nsb = scale(b, 0.5)\n"
     "y = concat(sa, sb, 0)\nsave y\n", 2},
    {"concat-unary different scales stay", "input a[3, 4]\ninput b[2, 4]\n"
     "sa = scale(a, 0.5)\nsb = scale(b, 2)\ny = concat(sa, sb, 0)\nsave y\n", 3},
    {"add-concat", "input a[3, 4]\ninput b[2, 4]\ninput c[3, 4]\ninput d[2, 4]\n"
     "l = concat(a, b, 0)\nr = concat(c, d, 0)\nx = add(l, r)\ny = slice(x, 0, 0, 3)\n"
     "save y\n", 1},
    {"binary-concat mul", "input a[4, 3]\ninput b[4, 2]\ninput c[4, 3]\ninput d[4, 2]\n"
     "l = concat(a, b, 1)\nr = concat(c, d, 1)\nx = mul(l, r)\ny = slice(x, 1, 3, 5)\n"
     "save y\n", 1},
    {"binary-concat sub", "input a[4, 3]\ninput b[4, 2]\ninput c[4, 3]\ninput d[4, 2]\n"
     "l = concat(a, b, 1)\nr = concat(c, d, 1)\nx = sub(l, r)\ny = slice(x, 1, 0, 3)\n"
     "save y\n", 1},
    {"binary-concat unequal pieces stay", "input a[4, 3]\ninput b[4, 2]\ninput c[4, 2]\n"
     "input d[4, 3]\nl = concat(a, b, 1)\nr = concat(c, d, 1)\nx = mul(l, r)\n"
     "y = slice(x, 1, 0, 3)\nsave y\n", 4},
    {"concat-assoc", "input a[4, 3]\ninput b[4, 2]\ninput c[4, 4]\nab = concat(a, b, 1)\n"
     "abc = concat(ab, c, 1)\ns = slice(abc, 1, 3, 9)\ny = relu(s)\nsave y\n", 2},
    {"concat-assoc left", "input a[3, 4]\ninput b[2, 4]\ninput c[4, 4]\nbc = concat(b, c, 0)\n"
     "abc = concat(a, bc, 0)\ns = slice(abc, 0, 0, 5)\ny = relu(s)\nsave y\n", 2},
    {"matmul-concat-rows", "input a[3, 4]\ninput b[2, 4]\ninput w[4, 5]\nc = concat(a, b, 0)\n"
     "m = matmul(c, w)\ny = slice(m, 0, 3, 5)\nsave y\n", 1},
    {"matmul-concat-cols", "input x[3, 4]\ninput w1[4, 2]\ninput w2[4, 5]\n"
     "c = concat(w1, w2, 1)\nm = matmul(x, c)\ny = slice(m, 1, 2, 7)\nsave y\n", 1},
    {"concat-matmul-rows", "input a[3, 4]\ninput b[2, 4]\ninput w[4, 5]\nma = matmul(a, w)\n"
     "mb = matmul(b, w)\ny = concat(ma, mb, 0)\nsave y\n", 2},
    {"concat-matmul-cols", "input x[3, 4]\ninput w1[4, 2]\ninput w2[4, 5]\n"
     "m1 = matmul(x, w1)\nm2 = matmul(x, w2)\ny = concat(m1, m2, 1)\nsave y\n", 2},
    {"matmul-concat-inner", "input a[3, 4]\ninput b[3, 2]\ninput c[4, 5]\ninput d[2, 5]\n"
     "l = concat(a, b, 1)\nr = concat(c, d, 0)\ny = matmul(l, r)\nsave y\n", 3},
    {"transpose-transpose", "input x[3, 4]\nt = einsum(\"ij->ji\", x)\n"
     "tt = einsum(\"ij->ji\", t)\ny = relu(tt)\nsave y\n", 1},
    {"transpose-matmul", "input a[3, 4]\ninput b[4, 5]\nm = matmul(a, b)\n"
     "y = einsum(\"ij->ji\", m)\nsave y\n", 3},
    {"matmul-transposes", "input a[3, 4]\ninput b[4, 5]\nta = einsum(\"ij->ji\", a)\n"
     "tb = einsum(\"ij->ji\", b)\ny = matmul(tb, ta)\nsave y\n", 2},
    {"transpose-add", "input a[3, 4]\ninput b[3, 4]\nta = einsum(\"ij->ji\", a)\n"
     "tb = einsum(\"ij->ji\", b)\nx = add(ta, tb)\ny = einsum(\"ij->ji\", x)\nsave y\n", 1},
    {"transpose-concat", "input a[3, 4]\ninput b[2, 4]\ninput c[5, 3]\ninput d[5, 1]\n"
     "l = concat(a, b, 0)\nr = concat(c, d, 1)\nt = einsum(\"ij->ji\", l)\n"
     "u = einsum(\"ij->ji\", r)\ny = add(t, u)\nsave y\n", 5},
};

static void test_concat_transpose_rules(void **s)
{
    (void)s;
    for (size_t k = 0; k < sizeof rw_cases / sizeof rw_cases[0]; k++) {
        const rw_case *c = &rw_cases[k];
        pl_graph *g = NULL;
        ein_error err = {0};
        if (pl_ein_parse(c->what, c->text, strlen(c->text), &g, &err) < 0)
            fail_msg("%s: %s", c->what, err.msg);
        for (int pn = 0; pn < 2; pn++) {
            pl_rewrite_opts o = {.launch_s = 5e-6, .prefer_new = pn};
            pl_rewrite_stats st;
            pl_graph *out = NULL;
            if (pl_rewrite(g, &o, &out, &st, &err) < 0)
                fail_msg("%s: pl_rewrite: %s", c->what, err.msg);
            if (st.stop != PL_RW_SATURATED)
                fail_msg("%s: stopped by %s", c->what, pl_rewrite_stop_name(st.stop));
            if (st.applied == 0 && !strstr(c->what, "stay"))
                fail_msg("%s: no rule applied", c->what);
            int ops = 0;
            for (int i = 0; i < out->nnodes; i++)
                ops += out->nodes[i].kind != PL_INPUT;
            if (!pn && ops > c->max_ops)
                fail_msg("%s: %d operators after rewriting, expected at most %d", c->what, ops,
                         c->max_ops);
            for (int i = 0; i < g->nnodes; i++)
                if (g->nodes[i].saved)
                    assert_same(g, out, g->nodes[i].name, 1e-5);
            pl_graph_free(out);
        }
        pl_graph_free(g);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chain_a),
        cmocka_unit_test(test_chain_b),
        cmocka_unit_test(test_chain_c),
        cmocka_unit_test(test_chain_d),
        cmocka_unit_test(test_chain_e),
        cmocka_unit_test(test_chain_random_equal),
        cmocka_unit_test(test_merge_shared_input),
        cmocka_unit_test(test_llama_block_merge),
        cmocka_unit_test(test_cycle_filter),
        cmocka_unit_test(test_factor),
        cmocka_unit_test(test_ilp),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_concat_transpose_rules),
    };
    return cmocka_run_group_tests_name("rewrite_extract", tests, NULL, NULL);
}
