/* tests/planner/test_graph.c — the graph builder: shape inference, the
 * einsum builder (the subscript rules are tests/common/test_einsum.c), and that every rejected add names what was wrong
 * and leaves the graph unchanged. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/ein_vec.h"
#include "planner/pl_graph.h"

static int setup(void **state)
{
    *state = pl_graph_new();
    return *state ? 0 : -1;
}

static int teardown(void **state)
{
    pl_graph_free(*state);
    return 0;
}

static int input2(pl_graph *g, const char *name, int64_t r, int64_t c, ein_dtype t)
{
    ein_error err = {0};
    int id = pl_graph_add_input(g, name, t, 2, (int64_t[]){r, c}, &err);
    if (id < 0)
        fail_msg("input %s: %s", name, err.msg);
    return id;
}

/* The add must fail with `code`, a message containing `msg`, and no new node. */
#define EXPECT_FAIL(g, call, want_code, want_msg)                                \
    do {                                                                          \
        ein_error err_ = {0};                                                     \
        ein_error *err = &err_;                                                   \
        int before_ = (g)->nnodes;                                                \
        int rc_ = (call);                                                         \
        if (rc_ != (want_code) || err_.code != (want_code) ||                     \
            !strstr(err_.msg, (want_msg)))                                        \
            fail_msg("%s: got %d \"%s\", expected %d containing \"%s\"", #call,   \
                     rc_, err_.msg, (want_code), (want_msg));                     \
        assert_int_equal((g)->nnodes, before_);                                   \
    } while (0)

static void assert_shape(const pl_node *n, int rank, const int64_t *shape)
{
    assert_non_null(n);
    assert_int_equal(n->rank, rank);
    for (int i = 0; i < rank; i++)
        assert_int_equal(n->shape[i], shape[i]);
}

static void test_new_free(void **state)
{
    pl_graph *g = *state;
    assert_int_equal(g->nnodes, 0);
    assert_null(pl_graph_node(g, 0));
    assert_null(pl_graph_node(g, -1));
    assert_int_equal(pl_graph_find(g, "x"), -1);
    assert_int_equal(pl_graph_find(NULL, "x"), -1);
    assert_int_equal(pl_graph_nconsumers(g, 0), 0);
    pl_graph_free(NULL);
}

static void test_input(void **state)
{
    pl_graph *g = *state;
    ein_error err = {0};
    int64_t s8[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    int a = pl_graph_add_input(g, "a", EIN_BF16, 8, s8, &err);
    assert_int_equal(a, 0);
    const pl_node *n = pl_graph_node(g, a);
    assert_string_equal(n->name, "a");
    assert_int_equal(n->kind, PL_INPUT);
    assert_int_equal(n->dtype, EIN_BF16);
    assert_shape(n, 8, s8);
    assert_int_equal(n->ninputs, 0);
    assert_int_equal(n->saved, 0);
    assert_int_equal(n->line, 0);
    int64_t big[1] = {PL_DIM_MAX};
    assert_int_equal(pl_graph_add_input(g, "big", EIN_F32, 1, big, &err), 1);
    /* 2^40 * 2^22 = 2^62 elements still fit in int64. */
    assert_int_equal(pl_graph_add_input(g, "huge", EIN_F32, 2, (int64_t[]){PL_DIM_MAX, 1 << 22}, &err), 2);
    char name63[64];
    memset(name63, 'n', 63);
    name63[63] = '\0';
    assert_int_equal(pl_graph_add_input(g, name63, EIN_F16, 1, (int64_t[]){3}, &err), 3);
    assert_int_equal(pl_graph_find(g, name63), 3);
    assert_int_equal(pl_graph_find(g, "big"), 1);
    assert_int_equal(pl_graph_find(g, "nope"), -1);
}

static void test_input_errors(void **state)
{
    pl_graph *g = *state;
    int64_t s[9] = {4, 4, 4, 4, 4, 4, 4, 4, 4};
    input2(g, "x", 2, 3, EIN_F32);
    char name64[65];
    memset(name64, 'n', 64);
    name64[64] = '\0';
    EXPECT_FAIL(g, pl_graph_add_input(g, "x", EIN_F32, 1, s, err), EIN_EINVAL, "duplicate name 'x'");
    EXPECT_FAIL(g, pl_graph_add_input(g, "", EIN_F32, 1, s, err), EIN_EINVAL, "name is empty");
    EXPECT_FAIL(g, pl_graph_add_input(g, NULL, EIN_F32, 1, s, err), EIN_EINVAL, "name is empty");
    EXPECT_FAIL(g, pl_graph_add_input(g, name64, EIN_F32, 1, s, err), EIN_EINVAL, "too long");
    EXPECT_FAIL(g, pl_graph_add_input(g, "r0", EIN_F32, 0, s, err), EIN_ESHAPE, "r0 has rank 0");
    EXPECT_FAIL(g, pl_graph_add_input(g, "r9", EIN_F32, 9, s, err), EIN_ESHAPE, "r9 has rank 9; expected 1 to 8");
    EXPECT_FAIL(g, pl_graph_add_input(g, "z", EIN_F32, 2, ((int64_t[]){4, 0}), err), EIN_ESHAPE,
                "dim 1 of z is 0");
    EXPECT_FAIL(g, pl_graph_add_input(g, "neg", EIN_F32, 1, ((int64_t[]){-3}), err), EIN_ESHAPE,
                "dim 0 of neg is -3");
    EXPECT_FAIL(g, pl_graph_add_input(g, "b", EIN_F32, 1, ((int64_t[]){PL_DIM_MAX + 1}), err),
                EIN_ESHAPE, "expected 1 to 2^40");
    EXPECT_FAIL(g, pl_graph_add_input(g, "v", EIN_F32, 2, ((int64_t[]){PL_DIM_MAX, PL_DIM_MAX}), err),
                EIN_ESHAPE, "more than 2^63-1 elements");
    EXPECT_FAIL(g, pl_graph_add_input(g, "d", (ein_dtype)EIN_DTYPE_COUNT, 1, s, err), EIN_EINVAL,
                "invalid dtype");
    /* A failed add does not reserve the name. */
    ein_error e = {0};
    assert_int_equal(pl_graph_add_input(g, "z", EIN_F32, 1, s, &e), 1);
}

static void test_einsum(void **state)
{
    pl_graph *g = *state;
    ein_error err = {0};
    int x = input2(g, "x", 8, 64, EIN_F32);
    int w1 = input2(g, "w1", 64, 32, EIN_F32);
    int a = pl_graph_add_input(g, "a", EIN_F16, 3, (int64_t[]){4, 8, 16}, &err);
    int b = pl_graph_add_input(g, "b", EIN_F16, 3, (int64_t[]){4, 16, 2}, &err);
    assert_true(a >= 0 && b >= 0);

    int y = pl_graph_add_einsum(g, "y", "ij,jk->ik", x, w1, &err);
    assert_true(y >= 0);
    const pl_node *n = pl_graph_node(g, y);
    assert_int_equal(n->kind, PL_EINSUM);
    assert_int_equal(n->kernel.kind, EIN_KERNEL_EINSUM);
    assert_string_equal(n->kernel.subscripts, "ij,jk->ik");
    assert_shape(n, 2, (int64_t[]){8, 32});
    assert_int_equal(n->ninputs, 2);
    assert_int_equal(n->inputs[0], x);
    assert_int_equal(n->inputs[1], w1);
    assert_int_equal(n->dtype, EIN_F32);

    int bmm = pl_graph_add_einsum(g, "bmm", "bij,bjk->bik", a, b, &err);
    assert_shape(pl_graph_node(g, bmm), 3, (int64_t[]){4, 8, 2});
    assert_int_equal(pl_graph_node(g, bmm)->dtype, EIN_F16);
    int red = pl_graph_add_einsum(g, "red", "ij->j", x, -1, &err);
    assert_shape(pl_graph_node(g, red), 1, (int64_t[]){64});
    assert_int_equal(pl_graph_node(g, red)->ninputs, 1);
    int tr = pl_graph_add_einsum(g, "tr", "bij->jbi", a, -1, &err);
    assert_shape(pl_graph_node(g, tr), 3, (int64_t[]){16, 4, 8});
    int outer = pl_graph_add_einsum(g, "outer", "i,j->ij", red, red, &err);
    assert_shape(pl_graph_node(g, outer), 2, (int64_t[]){64, 64});
    int gram = pl_graph_add_einsum(g, "gram", "ij,kj->ik", x, x, &err);
    assert_shape(pl_graph_node(g, gram), 2, (int64_t[]){8, 8});

    EXPECT_FAIL(g, pl_graph_add_einsum(g, "e1", "ij,jk->ik", x, x, err), EIN_ESHAPE,
                "einsum 'ij,jk->ik': j is 64 in x but 8 in x");
    EXPECT_FAIL(g, pl_graph_add_einsum(g, "e2", "ij,jk->ik", w1, w1, err), EIN_ESHAPE,
                "j is 32 in w1 but 64 in w1");
    EXPECT_FAIL(g, pl_graph_add_einsum(g, "e3", "ijk,kl->il", x, w1, err), EIN_ESHAPE,
                "operand 1 'ijk' has 3 indices but x has rank 2 (8x64)");
    EXPECT_FAIL(g, pl_graph_add_einsum(g, "e4", "ij,j->i", x, w1, err), EIN_ESHAPE,
                "operand 2 'j' has 1 index but w1 has rank 2 (64x32)");
    EXPECT_FAIL(g, pl_graph_add_einsum(g, "e5", "ij,jk->ik", x, -1, err), EIN_EINVAL,
                "has 2 operands but 1 tensor was given");
    EXPECT_FAIL(g, pl_graph_add_einsum(g, "e6", "ij->i", x, w1, err), EIN_EINVAL,
                "has 1 operand but 2 tensors were given");
    EXPECT_FAIL(g, pl_graph_add_einsum(g, "e7", "ij->i", 99, -1, err), EIN_EINVAL,
                "input id 99 does not exist");
    EXPECT_FAIL(g, pl_graph_add_einsum(g, "e8", "ij,jk->ik", x, 5000, err), EIN_EINVAL,
                "input id 5000 does not exist");
    EXPECT_FAIL(g, pl_graph_add_einsum(g, "e9", "ij->k", x, -1, err), EIN_EINVAL,
                "output index k appears in no operand");
    EXPECT_FAIL(g, pl_graph_add_einsum(g, "e10", "bij,bjk->bik", a, a, err), EIN_ESHAPE,
                "j is 16 in a but 8 in a");
    int xf16 = input2(g, "xh", 64, 4, EIN_F16);
    EXPECT_FAIL(g, pl_graph_add_einsum(g, "e11", "ij,jk->ik", x, xf16, err), EIN_ESHAPE,
                "x is f32 but xh is f16");
    EXPECT_FAIL(g, pl_graph_add_einsum(g, "y", "ij->j", x, -1, err), EIN_EINVAL, "duplicate name 'y'");
    /* Every dim <= 2^40 but the product overflows. */
    int h1 = pl_graph_add_input(g, "h1", EIN_F32, 1, (int64_t[]){PL_DIM_MAX}, &err);
    EXPECT_FAIL(g, pl_graph_add_einsum(g, "e12", "i,j->ij", h1, h1, err), EIN_ESHAPE,
                "more than 2^63-1 elements");
}

static void test_matmul(void **state)
{
    pl_graph *g = *state;
    ein_error err = {0};
    int x = input2(g, "x", 8, 16, EIN_F32);
    int w = input2(g, "w", 32, 4, EIN_F32);
    int v = input2(g, "v", 16, 4, EIN_F32);
    int h = input2(g, "h", 16, 4, EIN_BF16);
    int t = pl_graph_add_input(g, "t", EIN_F32, 3, (int64_t[]){8, 16, 2}, &err);
    int y = pl_graph_add_matmul(g, "y", x, v, &err);
    assert_true(y >= 0);
    const pl_node *n = pl_graph_node(g, y);
    assert_int_equal(n->kind, PL_EINSUM);
    assert_string_equal(n->kernel.subscripts, "ij,jk->ik");
    assert_shape(n, 2, (int64_t[]){8, 4});
    EXPECT_FAIL(g, pl_graph_add_matmul(g, "m1", x, w, err), EIN_ESHAPE, "matmul: x is 8x16 but w is 32x4");
    EXPECT_FAIL(g, pl_graph_add_matmul(g, "m2", t, v, err), EIN_ESHAPE,
                "matmul: t is 8x16x2 and v is 16x4; matmul takes two matrices");
    EXPECT_FAIL(g, pl_graph_add_matmul(g, "m3", x, h, err), EIN_ESHAPE, "matmul: x is f32 but h is bf16");
    EXPECT_FAIL(g, pl_graph_add_matmul(g, "m4", x, 77, err), EIN_EINVAL, "matmul: input id 77 does not exist");
    EXPECT_FAIL(g, pl_graph_add_matmul(g, "m5", -1, x, err), EIN_EINVAL, "input id -1 does not exist");
}

static void test_unary(void **state)
{
    pl_graph *g = *state;
    ein_error err = {0};
    int x = pl_graph_add_input(g, "x", EIN_F16, 3, (int64_t[]){2, 3, 5}, &err);
    static const char *names[] = {"relu", "silu", "gelu", "exp", "neg", "scale", "addc",
                                  "sigmoid", "tanh", "square", "gelu_exact"};
    _Static_assert(sizeof names / sizeof names[0] == EIN_UN_COUNT, "a unary op lacks a name");
    for (int op = 0; op < EIN_UN_COUNT; op++) {
        int id = pl_graph_add_unary(g, names[op], (ein_unary)op, 2.5, x, &err);
        assert_true(id >= 0);
        const pl_node *n = pl_graph_node(g, id);
        assert_int_equal(n->kind, PL_UNARY);
        assert_int_equal(n->kernel.kind, EIN_KERNEL_UNARY);
        assert_int_equal(n->kernel.unary, op);
        assert_int_equal(n->dtype, EIN_F16);
        assert_shape(n, 3, (int64_t[]){2, 3, 5});
        assert_int_equal(n->ninputs, 1);
        assert_int_equal(n->inputs[0], x);
        /* Only scale and addc keep their constant. */
        assert_true(n->kernel.scalar == (op == EIN_UN_SCALE || op == EIN_UN_ADDC ? 2.5 : 0.0));
    }
    EXPECT_FAIL(g, pl_graph_add_unary(g, "s1", EIN_UN_SCALE, INFINITY, x, err), EIN_EINVAL, "not finite");
    EXPECT_FAIL(g, pl_graph_add_unary(g, "s2", EIN_UN_SCALE, NAN, x, err), EIN_EINVAL, "not finite");
    EXPECT_FAIL(g, pl_graph_add_unary(g, "s3", EIN_UN_COUNT, 0, x, err), EIN_EINVAL, "invalid operator");
    EXPECT_FAIL(g, pl_graph_add_unary(g, "s4", (ein_unary)-1, 0, x, err), EIN_EINVAL, "invalid operator");
    EXPECT_FAIL(g, pl_graph_add_unary(g, "s5", EIN_UN_RELU, 0, 42, err), EIN_EINVAL, "relu: input id 42");
    EXPECT_FAIL(g, pl_graph_add_unary(g, "relu", EIN_UN_RELU, 0, x, err), EIN_EINVAL, "duplicate name 'relu'");
    /* NaN is fine for operators that take no factor: it is ignored. */
    assert_true(pl_graph_add_unary(g, "r2", EIN_UN_RELU, NAN, x, &err) >= 0);
}

static void test_binary(void **state)
{
    pl_graph *g = *state;
    ein_error err = {0};
    int a = input2(g, "a", 8, 16, EIN_F32);
    int b = input2(g, "b", 8, 16, EIN_F32);
    int c = input2(g, "c", 16, 8, EIN_F32);
    int d = input2(g, "d", 8, 16, EIN_F16);
    int e = pl_graph_add_input(g, "e", EIN_F32, 3, (int64_t[]){8, 16, 1}, &err);
    static const char *names[] = {"add", "sub", "mul", "div", "maximum"};
    _Static_assert(sizeof names / sizeof names[0] == EIN_BIN_COUNT, "a binary op lacks a name");
    for (int op = 0; op < EIN_BIN_COUNT; op++) {
        int id = pl_graph_add_binary(g, names[op], (ein_binary)op, a, b, &err);
        assert_true(id >= 0);
        const pl_node *n = pl_graph_node(g, id);
        assert_int_equal(n->kind, PL_BINARY);
        assert_int_equal(n->kernel.kind, EIN_KERNEL_BINARY);
        assert_int_equal(n->kernel.binary, op);
        assert_shape(n, 2, (int64_t[]){8, 16});
        assert_int_equal(n->inputs[0], a);
        assert_int_equal(n->inputs[1], b);
    }
    EXPECT_FAIL(g, pl_graph_add_binary(g, "x1", EIN_BIN_ADD, a, c, err), EIN_ESHAPE,
                "add: a is 8x16 but c is 16x8");
    EXPECT_FAIL(g, pl_graph_add_binary(g, "x2", EIN_BIN_SUB, a, e, err), EIN_ESHAPE,
                "sub: a is 8x16 but e is 8x16x1");
    EXPECT_FAIL(g, pl_graph_add_binary(g, "x3", EIN_BIN_MUL, a, d, err), EIN_ESHAPE,
                "mul: a is f32 but d is f16");
    /* numpy broadcasting: [8, 16] with [16], [8, 1] and [1, 8, 1]. */
    int r = pl_graph_add_input(g, "row", EIN_F32, 1, (int64_t[]){16}, &err);
    int col = pl_graph_add_input(g, "col", EIN_F32, 2, (int64_t[]){8, 1}, &err);
    int b3 = pl_graph_add_input(g, "b3", EIN_F32, 3, (int64_t[]){3, 1, 16}, &err);
    int id = pl_graph_add_binary(g, "br", EIN_BIN_ADD, a, r, &err);
    assert_true(id >= 0);
    assert_shape(pl_graph_node(g, id), 2, (int64_t[]){8, 16});
    id = pl_graph_add_binary(g, "bc", EIN_BIN_MUL, col, a, &err);
    assert_true(id >= 0);
    assert_shape(pl_graph_node(g, id), 2, (int64_t[]){8, 16});
    id = pl_graph_add_binary(g, "b3r", EIN_BIN_SUB, b3, a, &err);
    assert_true(id >= 0);
    assert_shape(pl_graph_node(g, id), 3, (int64_t[]){3, 8, 16});
    EXPECT_FAIL(g, pl_graph_add_binary(g, "x4", EIN_BIN_COUNT, a, b, err), EIN_EINVAL, "invalid operator");
    EXPECT_FAIL(g, pl_graph_add_binary(g, "x5", EIN_BIN_ADD, a, 1000, err), EIN_EINVAL,
                "input id 1000 does not exist");
}

static void test_save_and_consumers(void **state)
{
    pl_graph *g = *state;
    ein_error err = {0};
    int x = input2(g, "x", 4, 4, EIN_F32);
    int w = input2(g, "w", 4, 4, EIN_F32);
    int y = pl_graph_add_matmul(g, "y", x, w, &err);
    int z = pl_graph_add_binary(g, "z", EIN_BIN_MUL, y, y, &err);
    int r = pl_graph_add_unary(g, "r", EIN_UN_RELU, 0, y, &err);
    assert_true(z >= 0 && r >= 0);
    assert_int_equal(pl_graph_nconsumers(g, x), 1);
    assert_int_equal(pl_graph_nconsumers(g, y), 2);     /* mul(y, y) is one consumer */
    assert_int_equal(pl_graph_nconsumers(g, z), 0);
    assert_int_equal(pl_graph_nconsumers(g, -1), 0);
    assert_int_equal(pl_graph_nconsumers(g, 999), 0);
    assert_int_equal(pl_graph_save(g, z, &err), 0);
    assert_int_equal(pl_graph_node(g, z)->saved, 1);
    assert_int_equal(pl_graph_nconsumers(g, z), 0);      /* a save is not a consumer */
    assert_int_equal(pl_graph_save(g, x, &err), 0);      /* saving an input is fine */
    EXPECT_FAIL(g, pl_graph_save(g, z, err), EIN_EINVAL, "'z' is already saved");
    EXPECT_FAIL(g, pl_graph_save(g, 12, err), EIN_EINVAL, "input id 12 does not exist");
    pl_graph_set_pos(g, r, 7, 3);
    assert_int_equal(pl_graph_node(g, r)->line, 7);
    assert_int_equal(pl_graph_node(g, r)->col, 3);
    pl_graph_set_pos(g, 999, 1, 1);                      /* ignored */
}

static void test_many_nodes(void **state)
{
    pl_graph *g = *state;
    ein_error err = {0};
    char name[32];
    int prev = input2(g, "n0", 2, 2, EIN_F32);
    for (int i = 1; i < 50000; i++) {
        snprintf(name, sizeof name, "n%d", i);
        prev = pl_graph_add_unary(g, name, EIN_UN_NEG, 0, prev, &err);
        assert_int_equal(prev, i);
    }
    for (int i = 0; i < 50000; i += 997) {
        snprintf(name, sizeof name, "n%d", i);
        assert_int_equal(pl_graph_find(g, name), i);
    }
    assert_int_equal(pl_graph_find(g, "n50000"), -1);
    EXPECT_FAIL(g, pl_graph_add_unary(g, "n123", EIN_UN_NEG, 0, 0, err), EIN_EINVAL, "duplicate name 'n123'");
}

/* A zero-initialised graph (no pl_graph_new) and one extended by hand still
 * find names: the index is rebuilt when it is stale. */
static void test_stale_index(void **state)
{
    pl_graph g = {0};
    ein_error err = {0};
    assert_int_equal(pl_graph_add_input(&g, "a", EIN_F32, 1, (int64_t[]){3}, &err), 0);
    assert_int_equal(pl_graph_add_input(&g, "b", EIN_F32, 1, (int64_t[]){3}, &err), 1);
    /* Append a node by hand, bypassing the builder. */
    assert_int_equal(ein_vec_reserve(&g.nodes, &g.cap, (int64_t)g.nnodes + 1, sizeof *g.nodes), 0);
    g.nodes[g.nnodes] = g.nodes[0];
    strcpy(g.nodes[g.nnodes].name, "c");
    g.nnodes++;
    assert_int_equal(pl_graph_find(&g, "c"), 2);
    assert_int_equal(pl_graph_find(&g, "b"), 1);
    assert_int_equal(pl_graph_add_unary(&g, "c", EIN_UN_RELU, 0, 0, &err), EIN_EINVAL);
    assert_int_equal(pl_graph_add_unary(&g, "d", EIN_UN_RELU, 0, 2, &err), 3);
    assert_int_equal(pl_graph_find(&g, "d"), 3);
    assert_int_equal(pl_graph_find(&g, "c"), 2);
    free(g.nodes);
    ein_nameidx_free(&g.index);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_new_free),
        T(test_input),
        T(test_input_errors),
        T(test_einsum),
        T(test_matmul),
        T(test_unary),
        T(test_binary),
        T(test_save_and_consumers),
        T(test_many_nodes),
        cmocka_unit_test(test_stale_index),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
