/* tests/rewrite/test_egraph.c — the e-graph core: hash-consing, union-find,
 * deferred rebuild (congruence closure), the shape/dtype/weight analysis. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "planner/rewrite/pl_rewrite.h"
#include "planner/rewrite/rw_egraph.h"

typedef struct fixture {
    pl_graph *g;
    uint8_t w[8];
    rw_egraph *eg;
    int a, b, c, wt; /* input classes: a, b, c [4x4] activations, wt [4x4] weight */
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    ein_error err = {0};
    int64_t s[2] = {4, 4};
    f->g = pl_graph_new();
    const char *names[4] = {"a", "b", "c", "wt"};
    for (int i = 0; i < 4; i++)
        pl_graph_add_input(f->g, names[i], EIN_F32, 2, s, &err);
    f->w[3] = 1;
    f->eg = rw_egraph_new(f->g, f->w);
    int *ids[4] = {&f->a, &f->b, &f->c, &f->wt};
    for (int i = 0; i < 4; i++) {
        rw_node n = {.op = RW_INPUT, .p = {i}};
        *ids[i] = rw_add(f->eg, &n, &err);
        assert_true(*ids[i] >= 0);
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    rw_egraph_free(f->eg);
    pl_graph_free(f->g);
    free(f);
    return 0;
}

static int mm(rw_egraph *eg, int x, int y)
{
    rw_node n = {.op = RW_MATMUL, .nch = 2, .ch = {x, y}};
    return rw_add(eg, &n, NULL);
}

static void test_hashcons(void **state)
{
    fixture *f = *state;
    int ab = mm(f->eg, f->a, f->b);
    int nodes = f->eg->nnodes;
    assert_int_equal(mm(f->eg, f->a, f->b), ab);
    assert_int_equal(f->eg->nnodes, nodes);
    assert_true(mm(f->eg, f->b, f->a) != ab);
}

/* a = b implies f(a) = f(b), and f(f(a)) = f(f(b)), after one rebuild. */
static void test_congruence(void **state)
{
    fixture *f = *state;
    ein_error err = {0};
    int ac = mm(f->eg, f->a, f->c), bc = mm(f->eg, f->b, f->c);
    int acc = mm(f->eg, ac, f->c), bcc = mm(f->eg, bc, f->c);
    assert_true(rw_find(f->eg, acc) != rw_find(f->eg, bcc));
    assert_int_equal(rw_union(f->eg, f->a, f->b, &err), 1);
    assert_int_equal(rw_union(f->eg, f->a, f->b, &err), 0);
    /* Deferred: nothing is merged upstream until rebuild. */
    assert_true(rw_find(f->eg, ac) != rw_find(f->eg, bc));
    assert_int_equal(rw_egraph_rebuild(f->eg, &err), 0);
    assert_int_equal(rw_find(f->eg, ac), rw_find(f->eg, bc));
    assert_int_equal(rw_find(f->eg, acc), rw_find(f->eg, bcc));
    /* Hash-consing sees canonical children after the rebuild. */
    assert_int_equal(mm(f->eg, f->b, f->c), rw_find(f->eg, ac));
    assert_int_equal(f->eg->pending.n, 0);
    assert_int_equal(rw_egraph_check(f->eg), 0);
}

static void test_shapes(void **state)
{
    fixture *f = *state;
    ein_error err = {0};
    rw_node cat = {.op = RW_CONCAT, .nch = 2, .p = {1}, .ch = {f->a, f->b}};
    int ab = rw_add(f->eg, &cat, &err);
    assert_true(ab >= 0);
    assert_int_equal(f->eg->classes[ab].shape[1], 8);
    rw_node sl = {.op = RW_SLICE, .nch = 1, .p = {1, 4, 8}, .ch = {ab}};
    int s = rw_add(f->eg, &sl, &err);
    assert_true(s >= 0);
    assert_int_equal(f->eg->classes[s].shape[1], 4);
    int bad = mm(f->eg, ab, ab); /* 4x8 x 4x8 */
    assert_int_equal(bad, EIN_ESHAPE);
    rw_node sl2 = {.op = RW_SLICE, .nch = 1, .p = {1, 4, 9}, .ch = {ab}};
    assert_int_equal(rw_add(f->eg, &sl2, &err), EIN_ESHAPE);
    /* Merging classes of different shapes is refused. */
    assert_int_equal(rw_union(f->eg, ab, f->a, &err), EIN_ESHAPE);
}

/* weight-only: wt*wt is; a*wt is not, until a is merged with a weight form. */
static void test_weight_analysis(void **state)
{
    fixture *f = *state;
    ein_error err = {0};
    int ww = mm(f->eg, f->wt, f->wt), aw = mm(f->eg, f->a, f->wt);
    int aww = mm(f->eg, aw, f->wt);
    assert_true(f->eg->classes[rw_find(f->eg, ww)].weight);
    assert_false(f->eg->classes[rw_find(f->eg, aw)].weight);
    assert_int_equal(rw_union(f->eg, f->a, ww, &err), 1);
    assert_int_equal(rw_egraph_rebuild(f->eg, &err), 0);
    assert_true(f->eg->classes[rw_find(f->eg, aw)].weight);
    assert_true(f->eg->classes[rw_find(f->eg, aww)].weight); /* propagated upward */
}

/* Many random unions: the union-find agrees with a naive partition. */
static void test_union_find_random(void **state)
{
    fixture *f = *state;
    ein_error err = {0};
    int cls[64], part[64];
    int prev = f->a;
    for (int i = 0; i < 64; i++) {
        cls[i] = mm(f->eg, prev, f->c); /* distinct 4x4 classes */
        prev = cls[i];
        part[i] = i;
    }
    uint64_t h = 99;
    for (int k = 0; k < 40; k++) {
        h ^= h << 13, h ^= h >> 7, h ^= h << 17;
        int i = (int)(h % 64), j = (int)((h >> 20) % 64);
        assert_true(rw_union(f->eg, cls[i], cls[j], &err) >= 0);
        int pi = part[i], pj = part[j];
        for (int t = 0; t < 64; t++)
            if (part[t] == pj)
                part[t] = pi;
    }
    assert_int_equal(rw_egraph_rebuild(f->eg, &err), 0);
    for (int i = 0; i < 64; i++)
        for (int j = 0; j < 64; j++)
            if (part[i] == part[j])
                assert_int_equal(rw_find(f->eg, cls[i]), rw_find(f->eg, cls[j]));
    /* The table holds exactly the live nodes. */
    int live = 0;
    for (int i = 0; i < f->eg->nnodes; i++)
        live += !f->eg->nodes[i].dead;
    assert_int_equal(live, f->eg->nlive);
    assert_int_equal(rw_egraph_check(f->eg), 0);
}

/* Saturating a left-deep chain of n matrices under associativity gives
 * exactly one class per sub-chain (n(n+1)/2) and one e-node per split
 * (n + C(n+1, 3)), with every invariant holding. */
static void test_chain_saturation_size(void **state)
{
    (void)state;
    const char *src = getenv("EIN_SRCDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/planner/rewrite/rules/10-matmul.rules", src ? src : ".");
    for (int n = 2; n <= 10; n++) {
        ein_error err = {0};
        pl_graph *g = pl_graph_new();
        uint8_t w[16] = {0};
        for (int i = 0; i < n; i++) {
            char name[8];
            int64_t s[2] = {2 + i, 3 + i};
            snprintf(name, sizeof name, "M%d", i);
            assert_true(pl_graph_add_input(g, name, EIN_F32, 2, s, &err) >= 0);
        }
        rw_egraph *eg = rw_egraph_new(g, w);
        int acc = -1;
        for (int i = 0; i < n; i++) {
            rw_node in = {.op = RW_INPUT, .p = {i}};
            int c = rw_add(eg, &in, &err);
            acc = i ? mm(eg, acc, c) : c;
        }
        pl_rw_rules *r = NULL;
        if (pl_rw_rules_load(path, &r, &err) < 0)
            fail_msg("%s", err.msg);
        pl_rewrite_opts o = {.work_limit = 2000000000L};
        pl_rewrite_stats st = {0};
        assert_int_equal(rw_saturate(eg, r, &o, &st, &err), 0);
        assert_int_equal(st.stop, PL_RW_SATURATED);
        assert_int_equal(rw_egraph_check(eg), 0);
        assert_int_equal(rw_egraph_nclasses(eg), n * (n + 1) / 2);
        assert_int_equal(eg->nlive, n + (n + 1) * n * (n - 1) / 6);
        pl_rw_rules_free(r);
        rw_egraph_free(eg);
        pl_graph_free(g);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_hashcons, setup, teardown),
        cmocka_unit_test_setup_teardown(test_congruence, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shapes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_weight_analysis, setup, teardown),
        cmocka_unit_test_setup_teardown(test_union_find_random, setup, teardown),
        cmocka_unit_test(test_chain_saturation_size),
    };
    return cmocka_run_group_tests_name("rewrite_egraph", tests, NULL, NULL);
}
