/* tests/planner/test_spec.c — join-agg specs of the version-1 operators.
 *
 * Soundness, tested generically: for random shapes (odd sizes), every p in
 * 1..8 and every spec an operator produces, run the spec with the CPU
 * kernels (join on the projected blocks, aggregate outputs of equal type
 * with the spec's ⊕, recompose) and compare with the undecomposed operator.
 * Also the tiling condition and the count of function specifications. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kernels/kn_cpu.h"
#include "planner/pl_spec.h"

static long cases_run;

static void test_interval_near_equal(void **state)
{
    (void)state;
    for (int64_t size = 1; size < 70; size++)
        for (int count = 1; count <= size && count <= 9; count++) {
            int64_t prev = 0, mn = size, mx = 0;
            for (int part = 0; part < count; part++) {
                int64_t lo, hi;
                pl_interval(size, count, part, &lo, &hi);
                assert_int_equal(lo, prev);
                assert_true(hi > lo);
                mn = hi - lo < mn ? hi - lo : mn;
                mx = hi - lo > mx ? hi - lo : mx;
                prev = hi;
            }
            assert_int_equal(prev, size);
            assert_true(mx - mn <= 1);
        }
}

/* Example 3.8/3.9: i = k = 256, j = 512, request i:2 j:2 k:1. */
static void test_matmul_example_3_9(void **state)
{
    (void)state;
    ein_error err = {0};
    pl_graph *g = pl_graph_new();
    int64_t sa[2] = {256, 512}, sb[2] = {512, 256};
    int a = pl_graph_add_input(g, "A", EIN_F32, 2, sa, &err);
    int b = pl_graph_add_input(g, "B", EIN_F32, 2, sb, &err);
    int c = pl_graph_add_matmul(g, "C", a, b, &err);
    assert_true(c >= 0);
    pl_index idx[PL_MAX_INDICES];
    assert_int_equal(pl_op_indices(g, c, idx, &err), 3);
    int counts[3] = {2, 2, 1};
    pl_spec s;
    assert_int_equal(pl_spec_make(g, c, counts, &s, &err), 0);
    assert_int_equal(s.nparts, 4);
    assert_int_equal(s.agg, EIN_AGG_SUM);
    /* F(m,n): A block rows m, cols n; B block rows n; C block rows m. */
    for (int m = 0; m < 2; m++)
        for (int n = 0; n < 2; n++) {
            const pl_fspec *f = &s.f[m * 2 + n];
            assert_int_equal(f->in[0].lo[0], 128 * m);
            assert_int_equal(f->in[0].hi[0], 128 * (m + 1));
            assert_int_equal(f->in[0].lo[1], 256 * n);
            assert_int_equal(f->in[1].lo[0], 256 * n);
            assert_int_equal(f->in[1].hi[1], 256);
            assert_int_equal(f->out.lo[0], 128 * m);
            assert_int_equal(f->out.hi[1], 256);
        }
    pl_tiling t;
    assert_int_equal(pl_tiling_of_outputs(&s, &t), 0);
    assert_int_equal(t.n, 2);
    pl_tiling_clear(&t);
    pl_spec_clear(&s);
    pl_graph_free(g);
}

static int64_t rnd(int64_t lo, int64_t hi) { return lo + rand() % (hi - lo + 1); }

static void fill(float *p, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        p[i] = (float)(rand() % 2001 - 1000) / 500.0f;
}

/* Check the tiling condition: distinct output boxes are disjoint and cover. */
static void check_tiling(const pl_spec *s, const ein_box *whole)
{
    pl_tiling t;
    assert_int_equal(pl_tiling_of_outputs(s, &t), 0);
    int64_t vol = 0;
    for (int i = 0; i < t.n; i++) {
        assert_true(ein_box_contains(whole, &t.boxes[i]));
        vol += ein_box_volume(&t.boxes[i]);
        for (int j = i + 1; j < t.n; j++)
            assert_false(ein_box_intersect(&t.boxes[i], &t.boxes[j], NULL));
    }
    assert_int_equal(vol, ein_box_volume(whole));
    pl_tiling_clear(&t);
}

/* Run a spec with the CPU kernels and compare with the whole operator. */
static void check_sound(const pl_graph *g, int node, const pl_spec *s, float *const *in,
                        const float *want)
{
    const pl_node *nd = pl_graph_node(g, node);
    ein_box whole = ein_box_of_shape(nd->rank, nd->shape);
    int64_t nout = ein_box_volume(&whole);
    float *got = calloc((size_t)nout, sizeof(float));
    char *seen = calloc((size_t)nout, 1);
    ein_error err = {0};
    for (int f = 0; f < s->nparts; f++) {
        kn_block ins[2];
        for (int k = 0; k < nd->ninputs; k++) {
            const pl_node *u = pl_graph_node(g, nd->inputs[k]);
            ein_box ub = ein_box_of_shape(u->rank, u->shape);
            ins[k].dtype = EIN_F32;
            ins[k].box = s->f[f].in[k];
            ins[k].data = malloc(sizeof(float) * (size_t)ein_box_volume(&s->f[f].in[k]) + 4);
            ein_box_copy(ins[k].data, &ins[k].box, in[k], &ub, &ins[k].box, 4);
        }
        kn_block out = {.dtype = EIN_F32, .box = s->f[f].out};
        int64_t n = ein_box_volume(&out.box);
        out.data = malloc(sizeof(float) * (size_t)n + 4);
        assert_int_equal(kn_cpu_run(&nd->kernel, ins, nd->ninputs, &out, &err), 0);
        /* Aggregate (+) into the recomposed result at the block's place. */
        float *blk = malloc(sizeof(float) * (size_t)n + 4);
        ein_box_copy(blk, &out.box, got, &whole, &out.box, 4);
        for (int64_t i = 0; i < n; i++)
            blk[i] += ((float *)out.data)[i];
        ein_box_copy(got, &whole, blk, &out.box, &out.box, 4);
        free(blk);
        free(out.data);
        for (int k = 0; k < nd->ninputs; k++)
            free(ins[k].data);
        (void)seen;
    }
    for (int64_t i = 0; i < nout; i++)
        if (!(fabsf(got[i] - want[i]) <= 1e-3f * (1 + fabsf(want[i])))) /* NaN fails too */
            fail_msg("%s spec with %d parts: element %lld is %g, expected %g", nd->name,
                     s->nparts, (long long)i, got[i], want[i]);
    free(got);
    free(seen);
}

static void sound_case(const char *subscripts, int nin, int unary)
{
    ein_error err = {0};
    pl_graph *g = pl_graph_new();
    /* Letters get random odd-ish sizes; operands follow the subscripts. */
    int64_t size[26];
    for (int i = 0; i < 26; i++)
        size[i] = rnd(1, 4) * 2 + 1 + (i % 3);
    char ops[2][9] = {{0}}, outl[9] = {0};
    const char *arrow = strstr(subscripts, "->");
    int k = 0, len = 0;
    for (const char *c = subscripts; c < arrow; c++) {
        if (*c == ',') { k++; len = 0; continue; }
        ops[k][len++] = *c;
    }
    strcpy(outl, arrow + 2);
    int ids[2];
    float *in[2];
    for (int i = 0; i < nin; i++) {
        int64_t shape[8];
        int r = (int)strlen(ops[i]);
        for (int a = 0; a < r; a++)
            shape[a] = size[ops[i][a] - 'a'];
        char name[8];
        snprintf(name, sizeof name, "in%d", i);
        ids[i] = pl_graph_add_input(g, name, EIN_F32, r, shape, &err);
        assert_true(ids[i] >= 0);
        ein_box b = ein_box_of_shape(r, shape);
        in[i] = malloc(sizeof(float) * (size_t)ein_box_volume(&b) + 4);
        fill(in[i], ein_box_volume(&b));
    }
    int node;
    if (unary >= 0)
        node = pl_graph_add_unary(g, "op", (ein_unary)unary, 0.5, ids[0], &err);
    else if (unary == -2)
        node = pl_graph_add_binary(g, "op", EIN_BIN_MUL, ids[0], ids[1], &err);
    else
        node = pl_graph_add_einsum(g, "op", subscripts, ids[0], nin > 1 ? ids[1] : -1, &err);
    if (node < 0)
        fail_msg("cannot add %s: %s", subscripts, err.msg);
    const pl_node *nd = pl_graph_node(g, node);
    ein_box whole = ein_box_of_shape(nd->rank, nd->shape);
    float *want = malloc(sizeof(float) * (size_t)ein_box_volume(&whole) + 4);
    {
        kn_block ins[2], out = {.data = want, .dtype = EIN_F32, .box = whole};
        for (int i = 0; i < nin; i++) {
            const pl_node *u = pl_graph_node(g, ids[i]);
            ins[i] = (kn_block){.data = in[i], .dtype = EIN_F32,
                                .box = ein_box_of_shape(u->rank, u->shape)};
        }
        assert_int_equal(kn_cpu_run(&nd->kernel, ins, nin, &out, &err), 0);
    }
    for (int p = 1; p <= 8; p++) {
        pl_spec *specs;
        int n;
        assert_int_equal(pl_spec_enumerate(g, node, p, &specs, &n, &err), 0);
        assert_true(n >= 1);
        for (int i = 0; i < n; i++) {
            /* p parts, or the same k < p for all when p is too many. */
            assert_true(specs[i].nparts <= p);
            assert_int_equal(specs[i].nparts, specs[0].nparts);
            int prod = 1;
            for (int x = 0; x < specs[i].nidx; x++)
                prod *= specs[i].counts[x];
            assert_int_equal(prod, specs[i].nparts);
            check_tiling(&specs[i], &whole);
            check_sound(g, node, &specs[i], in, want);
            cases_run++;
        }
        pl_spec_array_free(specs, n);
    }
    for (int i = 0; i < nin; i++)
        free(in[i]);
    free(want);
    pl_graph_free(g);
}

static void test_sound_einsum(void **state)
{
    (void)state;
    const char *forms[] = {"ij,jk->ik", "ij,kj->ik", "ji,jk->ik", "bij,bjk->bik", "ij,j->i",
                           "i,j->ij", "ijk,jk->i", "ij->j", "ij->ji", "ijk->ki"};
    for (int rep = 0; rep < 2; rep++)
        for (size_t f = 0; f < sizeof forms / sizeof *forms; f++)
            sound_case(forms[f], strchr(forms[f], ',') ? 2 : 1, -1);
}

static void test_sound_elementwise(void **state)
{
    (void)state;
    for (int u = 0; u < EIN_UN_COUNT; u++)
        sound_case("ijk->ijk", 1, u);
    sound_case("ij,ij->ij", 2, -2);
}

static void test_enumerate_too_many_parts(void **state)
{
    (void)state;
    ein_error err = {0};
    pl_graph *g = pl_graph_new();
    int64_t s[2] = {2, 1};
    int x = pl_graph_add_input(g, "x", EIN_F32, 2, s, &err);
    int y = pl_graph_add_unary(g, "y", EIN_UN_RELU, 0, x, &err);
    pl_spec *specs;
    int n = -1;
    /* 2 elements cannot be split 3 ways: the specs of 2 parts instead. */
    assert_int_equal(pl_spec_enumerate(g, y, 3, &specs, &n, &err), 0);
    assert_int_equal(n, 1);
    assert_int_equal(specs[0].nparts, 2);
    assert_int_equal(specs[0].counts[0], 2);
    assert_int_equal(specs[0].counts[1], 1);
    pl_spec_array_free(specs, n);
    pl_graph_free(g);
}

static int report(void **state)
{
    (void)state;
    printf("# soundness: %ld (operator, shape, p, spec) cases run\n", cases_run);
    return 0;
}

int main(void)
{
    srand(4242);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_interval_near_equal),
        cmocka_unit_test(test_matmul_example_3_9),
        cmocka_unit_test(test_sound_einsum),
        cmocka_unit_test(test_sound_elementwise),
        cmocka_unit_test(test_enumerate_too_many_parts),
    };
    return cmocka_run_group_tests_name("planner_spec", tests, NULL, report);
}
