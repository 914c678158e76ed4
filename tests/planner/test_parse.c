/* tests/planner/test_parse.c — the .ein parser: what valid programs build,
 * and that every malformed program fails with the right code, at the right
 * line and column, with a message that says what was wrong. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "planner/pl_parse.h"

static const char ffn_text[] =
    "# Two-layer feed-forward network of the paper's section 2.\n"
    "dims tokens=8192 d_model=4096 d_ff=14336\n"
    "dtype f32\n"
    "input x[tokens, d_model]\n"
    "input w1[d_model, d_ff]\n"
    "input w2[d_ff, d_model]\n"
    "act    = matmul(x, w1)\n"
    "hidden = relu(act)\n"
    "y      = matmul(hidden, w2)\n"
    "save y\n";

static pl_graph *parse_ok(const char *text)
{
    ein_error err = {0};
    pl_graph *g = NULL;
    int rc = pl_ein_parse("ok.ein", text, strlen(text), &g, &err);
    if (rc != 0)
        fail_msg("unexpected error %d: %s", rc, err.msg);
    assert_non_null(g);
    return g;
}

static const pl_node *node(const pl_graph *g, const char *name)
{
    int id = pl_graph_find(g, name);
    if (id < 0)
        fail_msg("no node '%s'", name);
    return pl_graph_node(g, id);
}

static void assert_shape(const pl_node *n, int rank, const int64_t *shape)
{
    assert_int_equal(n->rank, rank);
    for (int i = 0; i < rank; i++)
        assert_int_equal(n->shape[i], shape[i]);
}

static void check_ffn(const pl_graph *g)
{
    assert_int_equal(g->nnodes, 6);
    const pl_node *x = node(g, "x"), *w1 = node(g, "w1"), *w2 = node(g, "w2");
    const pl_node *act = node(g, "act"), *hidden = node(g, "hidden"), *y = node(g, "y");
    assert_shape(x, 2, (int64_t[]){8192, 4096});
    assert_shape(w1, 2, (int64_t[]){4096, 14336});
    assert_shape(w2, 2, (int64_t[]){14336, 4096});
    assert_shape(act, 2, (int64_t[]){8192, 14336});
    assert_shape(hidden, 2, (int64_t[]){8192, 14336});
    assert_shape(y, 2, (int64_t[]){8192, 4096});
    assert_int_equal(x->kind, PL_INPUT);
    assert_int_equal(x->dtype, EIN_F32);
    assert_int_equal(act->kind, PL_EINSUM);
    assert_int_equal(act->kernel.kind, EIN_KERNEL_EINSUM);
    assert_string_equal(act->kernel.subscripts, "ij,jk->ik");
    assert_int_equal(act->ninputs, 2);
    assert_int_equal(act->inputs[0], pl_graph_find(g, "x"));
    assert_int_equal(act->inputs[1], pl_graph_find(g, "w1"));
    assert_int_equal(hidden->kind, PL_UNARY);
    assert_int_equal(hidden->kernel.kind, EIN_KERNEL_UNARY);
    assert_int_equal(hidden->kernel.unary, EIN_UN_RELU);
    assert_int_equal(hidden->ninputs, 1);
    assert_int_equal(hidden->inputs[0], pl_graph_find(g, "act"));
    assert_int_equal(y->inputs[0], pl_graph_find(g, "hidden"));
    assert_int_equal(y->inputs[1], pl_graph_find(g, "w2"));
    for (int i = 0; i < g->nnodes; i++)
        assert_int_equal(pl_graph_node(g, i)->saved, i == pl_graph_find(g, "y"));
    /* Positions point at the defining name. */
    assert_int_equal(x->line, 4);
    assert_int_equal(x->col, 7);
    assert_int_equal(hidden->line, 8);
    assert_int_equal(hidden->col, 1);
    assert_int_equal(pl_graph_nconsumers(g, pl_graph_find(g, "act")), 1);
    assert_int_equal(pl_graph_nconsumers(g, pl_graph_find(g, "y")), 0);
}

static void test_ffn_text(void **state)
{
    pl_graph *g = parse_ok(ffn_text);
    check_ffn(g);
    pl_graph_free(g);
}

static void test_ffn_file(void **state)
{
    const char *src = getenv("EIN_SRCDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/examples/ffn.ein", src ? src : "..");
    ein_error err = {0};
    pl_graph *g = NULL;
    int rc = pl_ein_parse_file(path, &g, &err);
    if (rc != 0)
        fail_msg("%s", err.msg);
    check_ffn(g);
    pl_graph_free(g);
}

static void test_features(void **state)
{
    pl_graph *g = parse_ok(
        "\t# leading tab and comment\r\n"
        "dims b=4 m=8\r\n"
        "dims k=16   # a second dims line\r\n"
        "\r\n"
        "input a[b, m, k]\r\n"
        "input c[b, k, 32] # literal dim\r\n"
        "dtype bf16\r\n"
        "input h[m, k]\r\n"
        "input f[m, k] f16\r\n"
        "input g[m,k]f32\r\n"
        "input unused[1099511627776]\r\n"
        "input r8[1, 2, 1, 2, 1, 2, 1, 2]\r\n"
        "dtype f32\r\n"
        "bmm = einsum(\"bij,bjk->bik\", a, c)\r\n"
        "colsum = einsum(\"ij->j\", h)\r\n"
        "tr=einsum(\"ij->ji\",f)\r\n"
        "outer = einsum(\"i,j->ij\", colsum, colsum)\r\n"
        "r1 = relu(g)\r\n"
        "r2 = silu( r1 )\r\n"
        "r3 = gelu(r2)\r\n"
        "r4 = exp(r3)\r\n"
        "r5 = neg(r4)\r\n"
        "s1 = scale(r5, 0.5)\r\n"
        "s2 = scale(s1, -1e-3)\r\n"
        "s3 = scale(s2, .25)\r\n"
        "s4 = scale(s3, +3.)\r\n"
        "s5 = scale(s4, 2E+2)\r\n"
        "s6 = scale(s5, 7)\r\n"
        "ad = add(s6, g)\r\n"
        "sb = sub(ad, g)\r\n"
        "ml = mul(sb, sb)\r\n"
        "hh = mul(h, h)\r\n"
        "ff = matmul(f, tr)\r\n"
        "long_name_0123456789_0123456789_0123456789_0123456789_012345678 = relu(g)\r\n"
        "save bmm, colsum\r\n"
        "save outer,ml , hh\r\n"
        "save ff # trailing comment, caf\xc3\xa9 \xf0\x9f\x98\x80\r\n"
        "save long_name_0123456789_0123456789_0123456789_0123456789_012345678"); /* no final newline */

    assert_shape(node(g, "a"), 3, (int64_t[]){4, 8, 16});
    assert_shape(node(g, "c"), 3, (int64_t[]){4, 16, 32});
    assert_int_equal(node(g, "a")->dtype, EIN_F32);
    assert_int_equal(node(g, "h")->dtype, EIN_BF16);
    assert_int_equal(node(g, "f")->dtype, EIN_F16);
    assert_int_equal(node(g, "g")->dtype, EIN_F32);
    assert_shape(node(g, "unused"), 1, (int64_t[]){(int64_t)1 << 40});
    assert_int_equal(node(g, "r8")->rank, 8);

    const pl_node *bmm = node(g, "bmm");
    assert_int_equal(bmm->kind, PL_EINSUM);
    assert_string_equal(bmm->kernel.subscripts, "bij,bjk->bik");
    assert_shape(bmm, 3, (int64_t[]){4, 8, 32});
    const pl_node *colsum = node(g, "colsum");
    assert_int_equal(colsum->ninputs, 1);
    assert_string_equal(colsum->kernel.subscripts, "ij->j");
    assert_shape(colsum, 1, (int64_t[]){16});
    assert_int_equal(colsum->dtype, EIN_BF16);
    assert_shape(node(g, "tr"), 2, (int64_t[]){16, 8});
    assert_shape(node(g, "outer"), 2, (int64_t[]){16, 16});

    static const struct { const char *name; ein_unary op; } un[] = {
        {"r1", EIN_UN_RELU}, {"r2", EIN_UN_SILU}, {"r3", EIN_UN_GELU},
        {"r4", EIN_UN_EXP}, {"r5", EIN_UN_NEG}, {"s1", EIN_UN_SCALE},
    };
    for (size_t i = 0; i < sizeof un / sizeof un[0]; i++) {
        const pl_node *n = node(g, un[i].name);
        assert_int_equal(n->kind, PL_UNARY);
        assert_int_equal(n->kernel.unary, un[i].op);
        assert_shape(n, 2, (int64_t[]){8, 16});
    }
    assert_true(node(g, "s1")->kernel.scalar == 0.5);
    assert_true(node(g, "s2")->kernel.scalar == -1e-3);
    assert_true(node(g, "s3")->kernel.scalar == 0.25);
    assert_true(node(g, "s4")->kernel.scalar == 3.0);
    assert_true(node(g, "s5")->kernel.scalar == 200.0);
    assert_true(node(g, "s6")->kernel.scalar == 7.0);

    static const struct { const char *name; ein_binary op; } bin[] = {
        {"ad", EIN_BIN_ADD}, {"sb", EIN_BIN_SUB}, {"ml", EIN_BIN_MUL},
    };
    for (size_t i = 0; i < sizeof bin / sizeof bin[0]; i++) {
        const pl_node *n = node(g, bin[i].name);
        assert_int_equal(n->kind, PL_BINARY);
        assert_int_equal(n->kernel.kind, EIN_KERNEL_BINARY);
        assert_int_equal(n->kernel.binary, bin[i].op);
    }
    assert_int_equal(node(g, "hh")->dtype, EIN_BF16);
    const pl_node *ff = node(g, "ff");
    assert_int_equal(ff->dtype, EIN_F16);       /* f and tr = f^T are f16 */
    assert_shape(ff, 2, (int64_t[]){8, 8});

    const char *saved[] = {"bmm", "colsum", "outer", "ml", "hh", "ff",
                           "long_name_0123456789_0123456789_0123456789_0123456789_012345678"};
    int nsaved = 0;
    for (int i = 0; i < g->nnodes; i++)
        nsaved += pl_graph_node(g, i)->saved;
    assert_int_equal(nsaved, (int)(sizeof saved / sizeof saved[0]));
    for (size_t i = 0; i < sizeof saved / sizeof saved[0]; i++)
        assert_true(node(g, saved[i])->saved);
    /* mul(sb, sb) is one consumer of sb; colsum feeds outer once. */
    assert_int_equal(pl_graph_nconsumers(g, pl_graph_find(g, "sb")), 1);
    assert_int_equal(pl_graph_nconsumers(g, pl_graph_find(g, "g")), 4);
    assert_int_equal(node(g, "bmm")->line, 14);
    pl_graph_free(g);
}

/* Inputs take the dtype in force where they are declared; operators take
 * their inputs' dtype. */
static void test_dtype_rules(void **state)
{
    pl_graph *g = parse_ok("dtype f16\ninput a[2, 3]\ninput b[3, 4]\nc = matmul(a, b)\n"
                           "d = relu(c)\ndtype bf16\ninput e[2]\nsave d, e\n");
    assert_int_equal(node(g, "c")->dtype, EIN_F16);
    assert_int_equal(node(g, "d")->dtype, EIN_F16);
    assert_int_equal(node(g, "e")->dtype, EIN_BF16);
    pl_graph_free(g);
    /* integers: inputs, slice, concat, embedding ids */
    g = parse_ok("dims v=9 d=4 t=6\ndtype bf16\ninput ids[t] i64\ninput emb[v, d]\n"
                 "input pos[2] i32\na = slice(ids, 0, 0, 2)\nb = slice(ids, 0, 2, 6)\n"
                 "c = concat(b, a, 0)\nx = embedding(emb, c)\ny = embedding(x, pos)\n"
                 "save c, y\n");
    assert_int_equal(node(g, "c")->dtype, EIN_I64);
    assert_int_equal(node(g, "x")->dtype, EIN_BF16);
    assert_int_equal(node(g, "x")->shape[0], 6);
    assert_int_equal(node(g, "x")->shape[1], 4);
    assert_int_equal(node(g, "y")->shape[0], 2);
    assert_int_equal(node(g, "y")->kernel.rows, 6);
    pl_graph_free(g);
    /* generation (issue 25): states, cache_write, decode_attention, rope_at */
    g = parse_ok("dims kv=2 b=3 s=16 hd=4\ninput pos[b] i32\nstate kc[kv, b, s, hd]\n"
                 "state vc[kv, b, s, hd]\ninput x[b, 16]\ninput q[4, b, hd]\n"
                 "input k[kv, b, hd]\nr = rope_at(x, pos, 4, 500000, style=half)\n"
                 "kw = cache_write(kc, k, pos)\nvw = cache_write(vc, k, pos)\n"
                 "o = decode_attention(q, kw, vw, pos)\nsave o, r\n");
    assert_true(node(g, "kc")->state && node(g, "kc")->kind == PL_INPUT);
    assert_false(node(g, "x")->state);
    assert_int_equal(node(g, "kw")->kernel.rows, 16);
    assert_int_equal(node(g, "o")->kernel.group, 2);
    assert_int_equal(node(g, "o")->kernel.window, 0);
    assert_int_equal(node(g, "r")->kernel.style, EIN_ROPE_HALF);
    assert_true(node(g, "r")->kernel.theta == 500000.0);
    pl_graph_free(g);
    /* sliding windows (issue 34): window=W on attention and decode_attention,
     * an integer or a dim name; 0 is none */
    g = parse_ok("dims kv=2 b=3 s=16 hd=4 w=5\nseqs [6, 10]\ninput pos[b] i32\n"
                 "state kc[kv, b, s, hd]\nstate vc[kv, b, s, hd]\ninput q[4, b, hd]\n"
                 "input k[kv, b, hd]\ninput aq[4, s, hd]\ninput ak[kv, s, hd]\n"
                 "kw = cache_write(kc, k, pos)\nvw = cache_write(vc, k, pos)\n"
                 "o = decode_attention(q, kw, vw, pos, window=7)\n"
                 "a1 = attention(aq, ak, ak, window=w)\na2 = attention(aq, ak, ak, window=0)\n"
                 "a3 = attention(aq, ak, ak)\nsave o, a1, a2, a3\n");
    assert_int_equal(node(g, "o")->kernel.window, 7);
    assert_int_equal(node(g, "a1")->kernel.window, 5);
    assert_int_equal(node(g, "a1")->kernel.nlist, 2);
    assert_int_equal(node(g, "a2")->kernel.window, 0);
    assert_int_equal(node(g, "a3")->kernel.window, 0);
    pl_graph_free(g);
}

/* ---- the operators of a transformer block ---------------------------------- */

static void test_block_ops(void **state)
{
    (void)state;
    pl_graph *g = parse_ok(
        "dims t=12 d=8 hd=4\n"
        "seqs [5, 7]\n"
        "input x[t, d]\ninput w[d]\ninput b[d]\ninput row[d]\n"
        "n1 = rmsnorm(x, w)\n"
        "n2 = layernorm(x, w, b, 1e-6)\n"
        "r  = rope(n1, hd, 500000)\n"
        "qh = split_heads(r, hd)\n"
        "kh = split_heads(n2, 4)\n"
        "kk = slice(kh, 0, 0, 1)\n"
        "at = attention(qh, kk, kk)\n"
        "mh = merge_heads(at)\n"
        "sm = softmax(mh)\n"
        "s0 = softmax(mh, 0)\n"
        "bc = add(sm, row)\n"
        "dv = div(bc, s0)\n"
        "mx = maximum(dv, row)\n"
        "sg = sigmoid(mx)\nth = tanh(sg)\nsq = square(th)\nge = gelu_exact(sq)\nac = addc(ge, -1.5)\n"
        "rs = reduce_sum(ac, 1)\n"
        "rm = reduce_max(kh, 0, 2)\n"
        "cc = concat(x, n1, n2, 0)\n"
        "save cc, rs, rm\n");
    assert_int_equal(node(g, "n1")->kind, PL_RMSNORM);
    assert_true(node(g, "n1")->kernel.eps == 1e-5);
    assert_int_equal(node(g, "n2")->kind, PL_LAYERNORM);
    assert_int_equal(node(g, "n2")->ninputs, 3);
    assert_true(node(g, "n2")->kernel.eps == 1e-6);
    const pl_node *r = node(g, "r");
    assert_int_equal(r->kind, PL_ROPE);
    assert_int_equal(r->kernel.head_dim, 4);
    assert_true(r->kernel.theta == 500000.0);
    assert_int_equal(r->kernel.nlist, 2);
    assert_int_equal(r->kernel.list[0], 5);
    assert_int_equal(r->kernel.list[1], 12);
    assert_shape(node(g, "qh"), 3, (int64_t[]){2, 12, 4});
    assert_shape(node(g, "kk"), 3, (int64_t[]){1, 12, 4});
    const pl_node *at = node(g, "at");
    assert_int_equal(at->kind, PL_ATTENTION);
    assert_int_equal(at->kernel.group, 2);
    assert_int_equal(at->kernel.nlist, 2);
    assert_shape(at, 3, (int64_t[]){2, 12, 4});
    assert_shape(node(g, "mh"), 2, (int64_t[]){12, 8});
    assert_int_equal(node(g, "sm")->kernel.axis, 1);
    assert_int_equal(node(g, "s0")->kernel.axis, 0);
    assert_int_equal(node(g, "bc")->kind, PL_BINARY);
    assert_int_equal(node(g, "dv")->kernel.binary, EIN_BIN_DIV);
    assert_int_equal(node(g, "mx")->kernel.binary, EIN_BIN_MAX);
    assert_int_equal(node(g, "ge")->kernel.unary, EIN_UN_GELU_EXACT);
    assert_int_equal(node(g, "ac")->kernel.unary, EIN_UN_ADDC);
    assert_true(node(g, "ac")->kernel.scalar == -1.5);
    assert_shape(node(g, "rs"), 1, (int64_t[]){12});
    assert_int_equal(node(g, "rs")->kernel.reduce, EIN_AGG_SUM);
    assert_shape(node(g, "rm"), 1, (int64_t[]){12});
    assert_int_equal(node(g, "rm")->kernel.axes, 5u);
    assert_int_equal(node(g, "rm")->kernel.reduce, EIN_AGG_MAX);
    const pl_node *cc = node(g, "cc");
    assert_int_equal(cc->kind, PL_CONCAT);
    assert_int_equal(cc->ninputs, 3);
    assert_shape(cc, 2, (int64_t[]){36, 8});
    assert_int_equal(cc->kernel.list[1], 12);
    assert_int_equal(cc->kernel.list[2], 24);
    /* Dim names label the axes (einplan prints them). */
    assert_string_equal(node(g, "x")->axis_name[0], "t");
    assert_string_equal(node(g, "sm")->axis_name[0], "t");
    pl_graph_free(g);

    /* Examples of the repository parse. */
    static const char *const ex[] = {"llama_block.ein", "chain_a.ein", "chain_b.ein",
                                      "chain_c.ein", "chain_d.ein", "chain_e.ein"};
    for (size_t i = 0; i < sizeof ex / sizeof ex[0]; i++) {
        char path[4096];
        const char *src = getenv("EIN_SRCDIR");
        snprintf(path, sizeof path, "%s/examples/%s", src ? src : ".", ex[i]);
        ein_error err = {0};
        g = NULL;
        if (pl_ein_parse_file(path, &g, &err) < 0)
            fail_msg("%s: %s", path, err.msg);
        pl_graph_free(g);
    }
}

/* ---- malformed programs -------------------------------------------------- */

#define H3 "dims n=8 k=16\ninput x[n, k]\ninput w[k, n]\n"

typedef struct bad_case {
    const char *name;
    const char *text;
    size_t len;             /* 0: strlen(text) */
    int code;
    const char *pos;        /* "line:col" */
    const char *msg;        /* a substring of the message */
} bad_case;

static const bad_case bad[] = {
    {"unknown_op", H3 "y = matmull(x, w)\nsave y\n", 0, EIN_EPARSE, "4:5",
     "unknown operator 'matmull'; expected one of matmul, einsum, relu, silu, gelu, exp, neg, scale, addc, sigmoid, tanh, square, gelu_exact, add, sub, mul, div, maximum, softmax, rmsnorm, layernorm, rope, attention, reduce_sum, reduce_max, concat, slice, split_heads, merge_heads"},
#define HB "dims t=12 d=8 hd=4\nseqs [5, 7]\ninput x[t, d]\ninput w[d]\ninput q[4, t, hd]\n" \
    "input k[2, t, hd]\ninput k3[3, t, hd]\n"
    {"seqs_sum", "dims t=12 d=8\nseqs [5, 6]\ninput x[t, d]\ny = rope(x, 4)\nsave y\n", 0,
     EIN_ESHAPE, "4:5", "rope: the sequences hold 11 tokens but the tensor has 12"},
    {"seqs_syntax", "seqs 5, 6\n", 0, EIN_EPARSE, "1:6", "expected '[' and sequence lengths"},
    {"seqs_zero", "seqs [5, 0]\n", 0, EIN_EPARSE, "1:10", "a sequence length is 0"},
    {"seqs_unclosed", "seqs [5, 6\n", 0, EIN_EPARSE, "1:11", "expected ',' or ']'"},
    {"seqs_reserved", "dims seqs=4\n", 0, EIN_EPARSE, "1:6", "'seqs' is a reserved word"},
    /* sliding windows (issue 34) */
    {"window_negative", HB "y = attention(q, k, k, window=-2)\nsave y\n", 0, EIN_EPARSE, "8:31",
     "attention window '-2' is negative; expected an integer from 0"},
    {"window_float", HB "y = attention(q, k, k, window=1.5)\nsave y\n", 0, EIN_EPARSE, "8:31",
     "bad attention window '1.5'"},
    {"window_twice", HB "y = attention(q, k, k, window=2, window=2)\nsave y\n", 0, EIN_EPARSE,
     "8:34", "window given twice"},
    {"window_unknown_dim", HB "y = attention(q, k, k, window=wide)\nsave y\n", 0, EIN_EPARSE,
     "8:31", "unknown dim 'wide'"},
    {"window_on_rope", HB "y = rope(x, 4, window=2)\nsave y\n", 0, EIN_EPARSE, "8:16",
     "rope takes no keyword argument 'window'"},
    {"window_then_positional", HB "y = attention(q, k, window=2, k)\nsave y\n", 0, EIN_EPARSE,
     "8:31", "a positional argument after window="},
    {"rope_head_dim", HB "y = rope(x, 3)\nsave y\n", 0, EIN_ESHAPE, "8:5",
     "rope: head_dim 3 must be even and divide x's hidden size 8"},
    {"rope_rank", HB "y = rope(q, 4)\nsave y\n", 0, EIN_ESHAPE, "8:5",
     "rope: q is 4x12x4; expected [tokens, heads*head_dim]"},
    {"attention_heads", HB "y = attention(q, k3, k3)\nsave y\n", 0, EIN_ESHAPE, "8:5",
     "attention: 4 query heads (q) are not a multiple of 3 kv heads (k3)"},
    {"attention_args", HB "y = attention(q, k)\nsave y\n", 0, EIN_EPARSE, "8:19",
     "attention takes 3 arguments, got 2"},
    {"rmsnorm_weight", HB "y = rmsnorm(x, x)\nsave y\n", 0, EIN_ESHAPE, "8:5",
     "rmsnorm: x is 12x8 but x's last dim is 8; the weight must be a vector"},
    {"rmsnorm_eps", HB "y = rmsnorm(x, w, 0)\nsave y\n", 0, EIN_EPARSE, "8:5",
     "rmsnorm: eps 0 must be in (0, 1]"},
    {"softmax_axis", HB "y = softmax(x, 2)\nsave y\n", 0, EIN_ESHAPE, "8:5",
     "softmax: axis 2 is out of range for x of rank 2"},
    {"reduce_axis", HB "y = reduce_sum(x, 5)\nsave y\n", 0, EIN_ESHAPE, "8:19",
     "reduce_sum: axis 5 is out of range for 'x' of rank 2"},
    {"reduce_repeated", "dims a=2 b=3 c=4\ninput q[a, b, c]\ny = reduce_sum(q, 1, 1)\nsave y\n",
     0, EIN_ESHAPE, "3:22", "reduce_sum: axis 1 is named twice; expected distinct axes"},
    {"reduce_repeated_3", "dims a=2 b=3 c=4\ninput q[a, b, c]\ny = reduce_max(q, 2, 0, 2)\nsave y\n",
     0, EIN_ESHAPE, "3:25", "reduce_max: axis 2 is named twice; expected distinct axes"},
    {"reduce_all", HB "y = reduce_max(x, 0, 1)\nsave y\n", 0, EIN_ESHAPE, "8:5",
     "reducing every axis of x leaves a scalar"},
    {"concat_shape", HB "y = concat(q, k3, 1)\nsave y\n", 0, EIN_ESHAPE, "8:5",
     "concat: q is 4x12x4 f32 but k3 is 3x12x4 f32"},
    {"slice_range", HB "y = slice(x, 0, 4, 13)\nsave y\n", 0, EIN_ESHAPE, "8:5",
     "slice: [4, 13) is not a non-empty part of x's axis 0 of size 12"},
    {"split_heads_dim", HB "y = split_heads(x, 3)\nsave y\n", 0, EIN_ESHAPE, "8:5",
     "split_heads: x is 12x8; expected [tokens, heads*3]"},
    {"merge_heads_rank", HB "y = merge_heads(x)\nsave y\n", 0, EIN_ESHAPE, "8:5",
     "merge_heads: x is 12x8; expected [heads, tokens, head_dim]"},
    {"broadcast_mismatch", HB "y = add(x, q)\nsave y\n", 0, EIN_ESHAPE, "8:5",
     "add: x is 12x8 but q is 4x12x4; shapes must be equal or broadcast"},
    {"unknown_dim", "dims n=8\ninput x[n, toknes]\nsave x\n", 0, EIN_EPARSE, "2:12",
     "unknown dim 'toknes'"},
    {"matmul_mismatch", H3 "input v[n, n]\ny = matmul(x, v)\nsave y\n", 0, EIN_ESHAPE, "5:5",
     "matmul: x is 8x16 but v is 8x8"},
    {"matmul_rank", "dims n=4\ninput a[n, n, n]\ninput b[n, n]\nc = matmul(a, b)\nsave c\n", 0,
     EIN_ESHAPE, "4:5", "matmul: a is 4x4x4 and b is 4x4; matmul takes two matrices"},
    {"matmul_dtype", "input a[2, 3]\ninput b[3, 2] f16\nc = matmul(a, b)\nsave c\n", 0,
     EIN_ESHAPE, "3:5", "matmul: a is f32 but b is f16"},
    {"einsum_mismatch", H3 "y = einsum(\"ij,jk->ik\", x, x)\nsave y\n", 0, EIN_ESHAPE, "4:5",
     "einsum 'ij,jk->ik': j is 16 in x but 8 in x"},
    {"einsum_rank", H3 "y = einsum(\"ijk,kl->il\", x, w)\nsave y\n", 0, EIN_ESHAPE, "4:5",
     "operand 1 'ijk' has 3 indices but x has rank 2 (8x16)"},
    {"binary_mismatch", H3 "y = add(x, w)\nsave y\n", 0, EIN_ESHAPE, "4:5",
     "add: x is 8x16 but w is 16x8"},
    {"binary_dtype", "input a[4]\ninput b[4] f16\nc = mul(a, b)\nsave c\n", 0, EIN_ESHAPE, "3:5",
     "mul: a is f32 but b is f16"},
    {"int_arith", "input a[4] i32\nc = exp(a)\nsave c\n", 0, EIN_ESHAPE, "2:5",
     "exp: a is i32; exp computes on f32, f16 or bf16"},
    {"int_matmul", "dtype i64\ninput a[4, 4]\nc = matmul(a, a)\nsave c\n", 0, EIN_ESHAPE, "3:5",
     "matmul: a is i64; matmul computes on f32"},
    {"embedding_float_ids", "input t[5, 3]\ninput i[4]\ne = embedding(t, i)\nsave e\n", 0,
     EIN_ESHAPE, "3:5", "embedding: ids i is f32; expected i32 or i64"},
    {"embedding_int_table", "input t[5, 3] i32\ninput i[4] i32\ne = embedding(t, i)\nsave e\n", 0,
     EIN_ESHAPE, "3:5", "embedding: table t is i32; expected f32, f16 or bf16"},
    {"embedding_rank", "input t[5] \ninput i[4] i32\ne = embedding(t, i)\nsave e\n", 0,
     EIN_ESHAPE, "3:5", "embedding: table t is 5; expected a matrix [rows, dim]"},
    {"cache_write_input", "input kc[1, 1, 4, 2]\ninput x[1, 1, 2]\ninput p[1] i32\n"
     "w = cache_write(kc, x, p)\nsave p\n", 0, EIN_EPARSE, "4:5",
     "cache_write: kc is not a state tensor"},
    {"state_int", "state kc[1, 1, 4, 2] i32\nsave kc\n", 0, EIN_EPARSE, "1:7",
     "state kc: i32; expected f32, f16 or bf16"},
    {"decode_pos_float", "state kc[1, 2, 4, 2]\ninput q[2, 2, 2]\ninput p[2]\n"
     "o = decode_attention(q, kc, kc, p)\nsave o\n", 0, EIN_ESHAPE, "4:5",
     "decode_attention: positions p are f32; expected i32 or i64"},
    {"duplicate_name", H3 "x = relu(w)\nsave x\n", 0, EIN_EPARSE, "4:1",
     "duplicate name 'x' (defined at line 2)"},
    {"duplicate_input", "input x[4]\ninput x[5]\nsave x\n", 0, EIN_EPARSE, "2:7",
     "duplicate name 'x'"},
    {"use_before_def", H3 "y = relu(z)\nz = relu(x)\nsave y\n", 0, EIN_EPARSE, "4:10",
     "'z' is not defined; expected a tensor defined on an earlier line"},
    {"dim_as_tensor", "dims n=4\ninput x[n]\ny = relu(n)\nsave y\n", 0, EIN_EPARSE, "3:10",
     "'n' is a dim, not a tensor"},
    {"bad_dtype", "dtype f64\ninput x[4]\nsave x\n", 0, EIN_EPARSE, "1:7",
     "unknown dtype 'f64'; expected f32, f16, bf16, i32, i64, q8_0, q4_0 or f8e4m3"},
    /* quantized weights (issue 36): per input only, [out, in], products only */
    {"dtype_q8_0", "dtype q8_0\ninput x[4]\nsave x\n", 0, EIN_EPARSE, "1:7",
     "dtype q8_0 is for weights only"},
    {"q8_0_in_out", "input x[2, 32]\ninput w[32, 64] q8_0\ny = matmul(x, w)\nsave y\n", 0,
     EIN_ESHAPE, "3:5", "quantized weights are declared [out, in]"},
    {"q4_0_relu", "input w[2, 32] q4_0\ny = relu(w)\nsave y\n", 0, EIN_ESHAPE, "2:5",
     "w is q4_0; quantized weights can only be multiplied"},
    {"q8_0_odd", "input w[2, 48] q8_0\nsave w\n", 0, EIN_ESHAPE, "1:7",
     "needs a last dim that is a multiple of 32"},
    {"f8e4m3_odd", "input w[2, 96] f8e4m3\nsave w\n", 0, EIN_ESHAPE, "1:7",
     "needs a last dim that is a multiple of 128"},
    {"q8_0_save", "input w[2, 32] q8_0\nsave w\n", 0, EIN_EPARSE, "2:6",
     "quantized weights are inputs only"},
    {"dtype_no_value", "dtype\ninput x[4]\nsave x\n", 0, EIN_EPARSE, "1:6",
     "expected a dtype after 'dtype'"},
    {"dtype_no_value_comment", "dtype   # nothing\n", 0, EIN_EPARSE, "1:6",
     "expected a dtype after 'dtype'"},
    {"dtype_extra", "dtype f16 f32\n", 0, EIN_EPARSE, "1:11",
     "unexpected 'f32' after the dtype; expected end of line"},
    {"bad_input_dtype", "input x[4] f64\nsave x\n", 0, EIN_EPARSE, "1:12", "unknown dtype 'f64'"},
    {"truncated_line", H3 "act = matmul(x,\nsave act\n", 0, EIN_EPARSE, "4:16",
     "expected an argument of matmul, got end of line"},
    {"missing_paren", H3 "y = matmul(x, w\nsave y\n", 0, EIN_EPARSE, "4:16",
     "expected ',' or ')' after argument 2 of matmul, got end of line"},
    {"missing_open_paren", "input x[4]\ny = relu x\nsave y\n", 0, EIN_EPARSE, "2:10",
     "expected '(' after 'relu', got 'x'"},
    {"missing_operator", "input x[4]\ny =\nsave y\n", 0, EIN_EPARSE, "2:4",
     "expected an operator call after '='"},
    {"trailing_garbage", H3 "y = relu(x) z\nsave y\n", 0, EIN_EPARSE, "4:13",
     "unexpected 'z' after ')'; expected end of line"},
    {"trailing_after_save", H3 "save x x\n", 0, EIN_EPARSE, "4:8",
     "expected ',' or end of line after 'x', got 'x'"},
    {"huge_number", "dims n=99999999999999999999999999\n", 0, EIN_EPARSE, "1:8",
     "dim size '99999999999999999999999999' is too large; expected at most 2^40"},
    {"dim_over_2_40", "dims n=1099511627777\n", 0, EIN_EPARSE, "1:8", "is too large"},
    {"zero_dim", "dims n=0\n", 0, EIN_EPARSE, "1:8", "dim size is 0"},
    {"zero_literal_dim", "input x[4, 0]\nsave x\n", 0, EIN_EPARSE, "1:12", "dim size is 0"},
    {"negative_dim", "input x[-4]\nsave x\n", 0, EIN_EPARSE, "1:9",
     "dim size '-4' is negative"},
    {"bad_integer", "dims n=12x\n", 0, EIN_EPARSE, "1:8",
     "bad dim size '12x'; expected a positive integer in decimal"},
    /* An axis or a start counts from 0, and the message says so. */
    {"negative_axis", "input x[4, 4]\ny = softmax(x, -1)\nsave y\n", 0, EIN_EPARSE, "2:16",
     "softmax axis '-1' is negative; expected an integer from 0 to 2^40"},
    {"bad_slice_start", "input x[4, 4]\ny = slice(x, 0, 3x, 4)\nsave y\n", 0, EIN_EPARSE,
     "2:17", "bad slice start '3x'; expected a non-negative integer in decimal"},
    {"float_dim", "input x[2.5]\nsave x\n", 0, EIN_EPARSE, "1:9", "bad dim size '2.5'"},
    {"volume_overflow", "dims a=1099511627776\ninput x[a, a]\nsave x\n", 0, EIN_ESHAPE, "2:7",
     "more than 2^63-1 elements"},
    {"invalid_utf8_comment", "input x[4]\n# caf\xff\nsave x\n", 0, EIN_EPARSE, "2:6",
     "invalid UTF-8 byte 0xff"},
    {"truncated_utf8", "input x[4]  # \xc3\nsave x\n", 0, EIN_EPARSE, "1:15",
     "invalid UTF-8 byte 0xc3"},
    {"overlong_utf8", "# \xc0\x80\n", 0, EIN_EPARSE, "1:3", "invalid UTF-8 byte 0xc0"},
    {"surrogate_utf8", "# ok\n#\xed\xa0\x80\n", 0, EIN_EPARSE, "2:2",
     "invalid UTF-8 byte 0xed"},
    {"utf8_outside_comment", "input x\xc3\xa9[4]\n", 0, EIN_EPARSE, "1:8",
     "non-ASCII character outside a comment"},
    {"utf8_in_string", "input x[4]\ny = einsum(\"i\xc3\xa9->i\", x)\n", 0, EIN_EPARSE, "2:14",
     "non-ASCII character in a string"},
    {"nul_byte", "input x[4]\nsave\0 x\n", 19, EIN_EPARSE, "2:5", "NUL byte"},
    {"nul_in_comment", "input x[4] #\0\nsave x\n", 21, EIN_EPARSE, "1:13", "NUL byte"},
    {"bare_cr", "input x[4]\rsave x\n", 0, EIN_EPARSE, "1:11", "unexpected byte 0x0d"},
    {"unexpected_char", "input x[4] @\n", 0, EIN_EPARSE, "1:12", "unexpected character '@'"},
    {"empty_file", "", 0, EIN_EPARSE, "1:1", "empty program; expected at least one 'save"},
    {"only_comments", "# nothing\n\n   # here\n", 0, EIN_EPARSE, "4:1",
     "empty program; expected at least one 'save"},
    {"only_blank_crlf", "\r\n  \t\r\n", 0, EIN_EPARSE, "3:1", "empty program"},
    {"no_save", "input x[4]\ny = relu(x)\n", 0, EIN_EPARSE, "3:1",
     "nothing is saved; expected at least one 'save"},
    {"no_save_no_newline", "input x[4]", 0, EIN_EPARSE, "1:11", "expected at least one 'save"},
    {"save_unknown", "input x[4]\nsave y\n", 0, EIN_EPARSE, "2:6", "'y' is not defined"},
    {"save_twice", "input x[4]\nsave x\nsave x\n", 0, EIN_EPARSE, "3:6", "'x' is already saved"},
    {"save_twice_one_line", "input x[4]\nsave x, x\n", 0, EIN_EPARSE, "2:9",
     "'x' is already saved"},
    {"save_nothing", "input x[4]\nsave\n", 0, EIN_EPARSE, "2:5",
     "expected a tensor name after 'save'"},
    {"save_trailing_comma", "input x[4]\nsave x,\n", 0, EIN_EPARSE, "2:8",
     "expected a tensor name, got end of line"},
    {"einsum_no_arrow", H3 "y = einsum(\"ij,jk\", x, w)\nsave y\n", 0, EIN_EPARSE, "4:12",
     "einsum 'ij,jk': missing '->'"},
    {"einsum_bad_letter", H3 "y = einsum(\"ij,jK->ik\", x, w)\n", 0, EIN_EPARSE, "4:12",
     "unexpected character 'K'"},
    {"einsum_space", H3 "y = einsum(\"ij, jk->ik\", x, w)\n", 0, EIN_EPARSE, "4:12",
     "unexpected character ' '"},
    {"einsum_repeat", H3 "y = einsum(\"ii->i\", x)\n", 0, EIN_EPARSE, "4:12",
     "index i repeated in operand 1"},
    {"einsum_out_unknown", H3 "y = einsum(\"ij,jk->il\", x, w)\n", 0, EIN_EPARSE, "4:12",
     "output index l appears in no operand"},
    {"einsum_out_repeat", H3 "y = einsum(\"ij,jk->ii\", x, w)\n", 0, EIN_EPARSE, "4:12",
     "index i repeated in the output"},
    {"einsum_three_operands", H3 "y = einsum(\"ij,jk,kl->il\", x, w)\n", 0, EIN_EPARSE, "4:12",
     "more than 2 operands"},
    {"einsum_empty_output", H3 "y = einsum(\"ij->\", x)\n", 0, EIN_EPARSE, "4:12",
     "the output has no indices"},
    {"einsum_empty_operand", H3 "y = einsum(\",ij->i\", x, w)\n", 0, EIN_EPARSE, "4:12",
     "operand 1 has no indices"},
    {"einsum_two_arrows", H3 "y = einsum(\"ij->j->j\", x)\n", 0, EIN_EPARSE, "4:12",
     "more than one '->'"},
    {"einsum_empty_string", H3 "y = einsum(\"\", x)\n", 0, EIN_EPARSE, "4:12",
     "einsum subscripts are empty"},
    {"einsum_operand_count", H3 "y = einsum(\"ij,jk->ik\", x)\n", 0, EIN_EPARSE, "4:12",
     "einsum 'ij,jk->ik' has 2 operands but 1 tensor was given"},
    {"einsum_operand_count2", H3 "y = einsum(\"ij->j\", x, w)\n", 0, EIN_EPARSE, "4:12",
     "einsum 'ij->j' has 1 operand but 2 tensors were given"},
    {"einsum_not_string", H3 "y = einsum(x, w)\n", 0, EIN_EPARSE, "4:12",
     "expected the subscripts of einsum as a string"},
    {"einsum_too_many_args", H3 "y = einsum(\"ij->j\", x, w, x)\n", 0, EIN_EPARSE, "4:27",
     "einsum takes at most 3 arguments, got 4"},
    {"unary_two_args", H3 "y = relu(x, w)\n", 0, EIN_EPARSE, "4:13",
     "relu takes 1 argument, got 2"},
    {"matmul_one_arg", H3 "y = matmul(x)\n", 0, EIN_EPARSE, "4:13",
     "matmul takes 2 arguments, got 1"},
    {"no_args", H3 "y = neg()\n", 0, EIN_EPARSE, "4:9", "neg takes 1 argument, got 0"},
    {"string_as_tensor", H3 "y = relu(\"ij\")\n", 0, EIN_EPARSE, "4:10",
     "expected a tensor name, got string \"ij\""},
    {"keyword_as_name", "input dims[4]\nsave dims\n", 0, EIN_EPARSE, "1:7",
     "'dims' is a reserved word"},
    {"op_as_name", "input x[4]\nrelu = relu(x)\nsave relu\n", 0, EIN_EPARSE, "2:1",
     "'relu' is a reserved word"},
    {"keyword_as_dim", "dims save=4\n", 0, EIN_EPARSE, "1:6", "'save' is a reserved word"},
    {"scale_without_number", "input x[4]\ny = scale(x)\nsave y\n", 0, EIN_EPARSE, "2:12",
     "scale takes 2 arguments, got 1"},
    {"scale_name_factor", "input x[4]\ny = scale(x, x)\nsave y\n", 0, EIN_EPARSE, "2:14",
     "expected a number as the scale factor, got 'x'"},
    {"scale_inf", "input x[4]\ny = scale(x, inf)\nsave y\n", 0, EIN_EPARSE, "2:14",
     "scale factor 'inf' is not finite"},
    {"scale_nan", "input x[4]\ny = scale(x, NaN)\nsave y\n", 0, EIN_EPARSE, "2:14",
     "scale factor 'NaN' is not finite"},
    {"scale_overflow", "input x[4]\ny = scale(x, -1e999)\nsave y\n", 0, EIN_EPARSE, "2:14",
     "scale factor '-1e999' is not finite"},
    {"scale_bad_number", "input x[4]\ny = scale(x, 1.2.3)\nsave y\n", 0, EIN_EPARSE, "2:14",
     "bad number '1.2.3'"},
    {"scale_hex", "input x[4]\ny = scale(x, 0x10)\nsave y\n", 0, EIN_EPARSE, "2:14",
     "bad number '0x10'"},
    {"rank_9", "input x[1,1,1,1,1,1,1,1,1]\nsave x\n", 0, EIN_EPARSE, "1:25",
     "too many dims; expected at most 8"},
    {"unterminated_string", H3 "y = einsum(\"ij->i, x)\n", 0, EIN_EPARSE, "4:12",
     "unterminated string"},
    {"dims_redefinition", "dims n=4\ndims m=2 n=5\n", 0, EIN_EPARSE, "2:10",
     "dim 'n' is already defined at line 1"},
    {"dims_empty", "dims\n", 0, EIN_EPARSE, "1:5", "expected NAME=SIZE after 'dims'"},
    {"dims_missing_eq", "dims n 4\n", 0, EIN_EPARSE, "1:8", "expected '=' after dim name 'n'"},
    {"dims_missing_size", "dims n=\n", 0, EIN_EPARSE, "1:8",
     "expected dim size (a positive integer), got end of line"},
    {"unknown_statement", "inptu x[4]\n", 0, EIN_EPARSE, "1:1", "unknown statement 'inptu'"},
    {"statement_punct", "= relu(x)\n", 0, EIN_EPARSE, "1:1", "expected a statement"},
    {"input_no_shape", "input x\nsave x\n", 0, EIN_EPARSE, "1:8",
     "expected '[' and a shape after 'x'"},
    {"input_empty_shape", "input x[]\n", 0, EIN_EPARSE, "1:9",
     "expected a dim name or an integer size, got ']'"},
    {"input_unclosed_shape", "input x[4, 5\n", 0, EIN_EPARSE, "1:13",
     "expected ',' or ']' in the shape of 'x', got end of line"},
    {"input_no_name", "input [4]\n", 0, EIN_EPARSE, "1:7", "expected a tensor name, got '['"},
    {"name_too_long",
     "input aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa[4]\n", 0,
     EIN_EPARSE, "1:7", "is 64 characters long; expected at most 63"},
};

/* Returns 1 if the program fails as `c` says; prints what happened if not. */
static int bad_matches(const bad_case *c, const char *text, size_t len)
{
    char file[128], prefix[160];
    snprintf(file, sizeof file, "%s.ein", c->name);
    snprintf(prefix, sizeof prefix, "%s:%s: ", file, c->pos);
    ein_error err = {0};
    pl_graph *sentinel = (pl_graph *)&err, *g = sentinel;
    int rc = pl_ein_parse(file, text, len, &g, &err);
    /* Every syntax error says what was expected (or shows the usage). */
    int ok = rc == c->code && err.code == c->code &&
             strncmp(err.msg, prefix, strlen(prefix)) == 0 && strstr(err.msg, c->msg) &&
             (c->code != EIN_EPARSE || strstr(err.msg, "expected") || strstr(err.msg, "usage:")) &&
             g == sentinel;                     /* *out untouched on error */
    if (!ok)
        print_error("case %s: got rc %d, message \"%s\"; expected rc %d, prefix \"%s\", "
                    "containing \"%s\"\n", c->name, rc, err.msg, c->code, prefix, c->msg);
    if (g != sentinel && rc == 0)
        pl_graph_free(g);
    return ok;
}

static void check_bad(const bad_case *c, const char *text, size_t len)
{
    assert_true(bad_matches(c, text, len));
}

static void test_malformed_table(void **state)
{
    size_t n = sizeof bad / sizeof bad[0];
    int failures = 0;
    assert_true(n >= 30);
    for (size_t i = 0; i < n; i++)      /* report every mismatch, not just the first */
        failures += !bad_matches(&bad[i], bad[i].text, bad[i].len ? bad[i].len : strlen(bad[i].text));
    assert_int_equal(failures, 0);
}

static void test_long_line(void **state)
{
    size_t pad = 4200;
    char *text = malloc(pad + 64);
    assert_non_null(text);
    strcpy(text, "input x[4]\n# ");
    size_t n = strlen(text);
    memset(text + n, 'a', pad);
    strcpy(text + n + pad, "\nsave x\n");
    bad_case c = {"long_line", NULL, 0, EIN_EPARSE, "2:4097",
                  "line is 4202 bytes long; expected at most 4096 bytes per line"};
    check_bad(&c, text, strlen(text));

    /* Exactly 4096 bytes (plus CRLF) is fine. */
    memset(text + n, 'a', 4096 - 2);
    strcpy(text + n + 4096 - 2, "\r\nsave x\n");
    ein_error err = {0};
    pl_graph *g = NULL;
    assert_int_equal(pl_ein_parse("ok.ein", text, strlen(text), &g, &err), 0);
    pl_graph_free(g);
    free(text);
}

static void test_too_many_nodes(void **state)
{
    int limit = 100000;
    size_t cap = (size_t)(limit + 2) * 24 + 64, n = 0;
    char *text = malloc(cap);
    assert_non_null(text);
    for (int i = 0; i < limit; i++)
        n += (size_t)snprintf(text + n, cap - n, "input t%d[2]\n", i);
    size_t at_limit = n;
    n += (size_t)snprintf(text + n, cap - n, "save t0\n");

    /* 100000 tensors is allowed (and fast: names are hashed). */
    ein_error err = {0};
    pl_graph *g = NULL;
    assert_int_equal(pl_ein_parse("many.ein", text, n, &g, &err), 0);
    assert_int_equal(g->nnodes, limit);
    assert_int_equal(pl_graph_find(g, "t99999"), 99999);
    pl_graph_free(g);

    /* One more is not. */
    n = at_limit + (size_t)snprintf(text + at_limit, cap - at_limit, "extra = relu(t0)\nsave t0\n");
    bad_case c = {"too_many", NULL, 0, EIN_EPARSE, "100001:1",
                  "too many tensors; expected at most 100000"};
    check_bad(&c, text, n);
    free(text);
}

static void test_null_filename(void **state)
{
    ein_error err = {0};
    pl_graph *g = NULL;
    assert_int_equal(pl_ein_parse(NULL, "save x\n", 7, &g, &err), EIN_EPARSE);
    assert_true(strncmp(err.msg, "<input>:1:6: ", 13) == 0);
    assert_null(g);
    assert_int_equal(pl_ein_parse("x.ein", NULL, 0, &g, &err), EIN_EPARSE);   /* empty */
    assert_int_equal(pl_ein_parse("x.ein", NULL, 5, &g, &err), EIN_EINVAL);
    assert_int_equal(pl_ein_parse("x.ein", "", 0, NULL, &err), EIN_EINVAL);
    /* A NULL error object is allowed: only the code comes back. */
    assert_int_equal(pl_ein_parse("x.ein", "save x\n", 7, &g, NULL), EIN_EPARSE);
}

static void test_parse_file_errors(void **state)
{
    ein_error err = {0};
    pl_graph *g = NULL;
    assert_int_equal(pl_ein_parse_file("/nonexistent/dir/prog.ein", &g, &err), EIN_EIO);
    assert_non_null(strstr(err.msg, "/nonexistent/dir/prog.ein"));
    assert_null(g);

    assert_int_equal(pl_ein_parse_file("/", &g, &err), EIN_EIO);
    assert_non_null(strstr(err.msg, "/: a directory, not a regular file"));

    char path[] = "/tmp/test_parse_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *prog = "input x[4]\ny = relu(q)\n";
    assert_int_equal(write(fd, prog, strlen(prog)), (ssize_t)strlen(prog));
    assert_int_equal(pl_ein_parse_file(path, &g, &err), EIN_EPARSE);
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%s:2:10: ", path);
    assert_true(strncmp(err.msg, prefix, strlen(prefix)) == 0);

    /* Over 16 MiB: refused without parsing (sparse file, nothing written). */
    assert_int_equal(ftruncate(fd, (16 << 20) + 1), 0);
    assert_int_equal(pl_ein_parse_file(path, &g, &err), EIN_EPARSE);
    assert_non_null(strstr(err.msg, "16 MiB"));
    assert_null(g);
    close(fd);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ffn_text),
        cmocka_unit_test(test_ffn_file),
        cmocka_unit_test(test_features),
        cmocka_unit_test(test_dtype_rules),
        cmocka_unit_test(test_block_ops),
        cmocka_unit_test(test_malformed_table),
        cmocka_unit_test(test_long_line),
        cmocka_unit_test(test_too_many_nodes),
        cmocka_unit_test(test_null_filename),
        cmocka_unit_test(test_parse_file_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
