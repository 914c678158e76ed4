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
#include <msgpack.h>

#include "planner/pl_optimize.h"
#include "planner/pl_spec.h"
#include "planner/pl_wire.h"

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

/* Replicated specs (pl_spec.replicated): the whole operator on each of p
 * devices, equal copies that nothing aggregates; offered for cheap
 * operators only; "rep:P" in reports. */
static void test_replicated(void **state)
{
    (void)state;
    ein_error err = {0};
    pl_graph *g = pl_graph_new();
    int64_t sx[2] = {1, 768}, sw[1] = {768}, sm[2] = {768, 512};
    int x = pl_graph_add_input(g, "x", EIN_F32, 2, sx, &err);
    int w = pl_graph_add_input(g, "w", EIN_F32, 1, sw, &err);
    int m = pl_graph_add_input(g, "m", EIN_F32, 2, sm, &err);
    int n = pl_graph_add_norm(g, "n", x, w, -1, 1e-5, &err);
    int a = pl_graph_add_binary(g, "a", EIN_BIN_ADD, x, n, &err);
    int y = pl_graph_add_matmul(g, "y", a, m, &err);
    assert_true(n >= 0 && a >= 0 && y >= 0);
    assert_true(pl_spec_replicable(g, n, 2) && pl_spec_replicable(g, a, 3));
    assert_false(pl_spec_replicable(g, n, 1));  /* one device: nothing to replicate */
    assert_false(pl_spec_replicable(g, y, 2));  /* a contraction of 768 per output */
    assert_false(pl_spec_replicable(g, x, 2));  /* an input */
    pl_spec s;
    ein_error e2 = {0};
    assert_int_equal(pl_spec_make_replicated(g, y, 2, &s, &e2), EIN_EINVAL);
    assert_non_null(strstr(e2.msg, "y: no replicated spec"));
    for (int p = 2; p <= 4; p++) {
        assert_int_equal(pl_spec_make_replicated(g, n, p, &s, &err), 0);
        assert_int_equal(s.nparts, p);
        assert_true(s.replicated);
        assert_int_equal(s.agg, EIN_AGG_NONE);
        for (int i = 0; i < s.nidx; i++)
            assert_int_equal(s.counts[i], 1);
        ein_box whole = {.rank = 2, .lo = {0, 0}, .hi = {1, 768}};
        for (int f = 0; f < p; f++) {
            assert_true(ein_box_equal(&s.f[f].out, &whole));
            assert_true(ein_box_equal(&s.f[f].in[0], &whole));
            assert_int_equal(s.f[f].in[1].hi[0], 768);
        }
        /* the output tiling is the one whole box */
        pl_tiling t;
        assert_int_equal(pl_tiling_of_outputs(&s, &t), 0);
        assert_int_equal(t.n, 1);
        assert_true(ein_box_equal(&t.boxes[0], &whole));
        pl_tiling_clear(&t);
        /* copies are not partials: no aggregation; every copy reads */
        double r, j, ag;
        pl_cost(g, n, &s, NULL, &r, &j, &ag);
        assert_true(ag == 0 && r == 0);
        assert_true(j == (double)p * (768 + 768));
        pl_index idx[PL_MAX_INDICES];
        char buf[64];
        pl_op_indices(g, n, idx, &err);
        assert_string_equal(pl_spec_format(&s, idx, buf, sizeof buf), p == 2 ? "rep:2" : p == 3 ? "rep:3" : "rep:4");
        assert_string_equal(pl_spec_format_labels(&s, idx, buf, sizeof buf), pl_spec_format(&s, idx, buf + 32, 32));
        /* a copy keeps the flag */
        pl_spec c;
        assert_int_equal(pl_spec_copy(&s, &c), 0);
        assert_true(c.replicated && c.nparts == p);
        pl_spec_clear(&c);
        pl_spec_clear(&s);
        assert_false(s.replicated);
    }
    /* the enumeration never offers it (the plan search asks for it) */
    pl_spec *all;
    int nall;
    assert_int_equal(pl_spec_enumerate(g, a, 2, &all, &nall, &err), 0);
    for (int i = 0; i < nall; i++)
        assert_false(all[i].replicated);
    pl_spec_array_free(all, nall);
    /* a spec made after a replicated one into the same struct is plain */
    assert_int_equal(pl_spec_make_replicated(g, a, 2, &s, &err), 0);
    int counts[2] = {1, 2};
    assert_int_equal(pl_spec_remake(g, a, counts, &s, &err), 0);
    assert_false(s.replicated);
    pl_spec_clear(&s);
    pl_graph_free(g);
}

/* node v's entry of a packed plan's "nodes" */
static msgpack_object *plan_entry(msgpack_object *plan, int v)
{
    for (uint32_t i = 0; i < plan->via.map.size; i++) {
        const msgpack_object *k = &plan->via.map.ptr[i].key;
        if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == 5 &&
            !memcmp(k->via.str.ptr, "nodes", 5))
            return &plan->via.map.ptr[i].val.via.array.ptr[v];
    }
    return NULL;
}

/* A plan with a replicated spec in a saved program (planner/pl_wire.h):
 * [counts, r, j, a, replicas] round-trips; replicas other than p, and an
 * entry of another length, are refused by name; without the fifth element
 * (an older file) the node loads as the plain one-device spec. */
static void test_replicated_wire(void **state)
{
    (void)state;
    ein_error err = {0};
    pl_graph *g = pl_graph_new();
    int64_t sx[2] = {1, 768}, sw[1] = {768};
    int x = pl_graph_add_input(g, "x", EIN_F32, 2, sx, &err);
    int w = pl_graph_add_input(g, "w", EIN_F32, 1, sw, &err);
    int n = pl_graph_add_norm(g, "n", x, w, -1, 1e-5, &err);
    int a = pl_graph_add_binary(g, "a", EIN_BIN_ADD, x, n, &err);
    assert_int_equal(pl_graph_save(g, a, &err), 0);
    pl_plan *plan;
    assert_int_equal(pl_plan_make(g, 2, PL_SELECT_DP, 1, &plan, &err), 0);
    pl_choice *c = &plan->nodes[n];
    assert_false(c->spec.replicated);
    pl_spec_clear(&c->spec);
    pl_tiling_clear(&c->out_tiling);
    assert_int_equal(pl_spec_make_replicated(g, n, 2, &c->spec, &err), 0);
    assert_int_equal(pl_tiling_of_outputs(&c->spec, &c->out_tiling), 0);
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    assert_int_equal(pl_plan_pack(&pk, g, plan, &err), 0);
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    size_t off = 0;
    assert_int_equal(msgpack_unpack_next(&up, sb.data, sb.size, &off), MSGPACK_UNPACK_SUCCESS);
    pl_plan *back = NULL;
    assert_int_equal(pl_plan_unpack(&up.data, g, &back, &err), 0);
    assert_true(back->nodes[n].spec.replicated && back->nodes[n].spec.nparts == 2);
    assert_int_equal(back->nodes[n].out_tiling.n, 1);
    assert_false(back->nodes[a].spec.replicated);
    pl_plan_free(back);
    back = NULL;
    msgpack_object *e = plan_entry(&up.data, n);
    assert_non_null(e);
    assert_int_equal(e->via.array.size, 5);
    assert_int_equal(plan_entry(&up.data, a)->via.array.size, 4);
    /* replicas 3 on 2 devices */
    e->via.array.ptr[4].via.u64 = 3;
    assert_int_equal(pl_plan_unpack(&up.data, g, &back, &err), EIN_EPROTO);
    assert_null(back);
    assert_non_null(strstr(err.msg, "plan: node 2 ('n'): replicas: 3 replicas on 2 devices"));
    e->via.array.ptr[4].via.u64 = 2;
    /* six elements: refused, naming the two forms */
    msgpack_object six[6];
    memcpy(six, e->via.array.ptr, sizeof(msgpack_object) * 5);
    six[5].type = MSGPACK_OBJECT_NIL;
    msgpack_object *five = e->via.array.ptr;
    e->via.array.ptr = six;
    e->via.array.size = 6;
    assert_int_equal(pl_plan_unpack(&up.data, g, &back, &err), EIN_EPROTO);
    assert_non_null(strstr(err.msg, "expected [counts, repartition, join, aggregation] or "
                                    "[counts, repartition, join, aggregation, replicas]"));
    /* four (an older file): the one-device spec */
    e->via.array.ptr = five;
    e->via.array.size = 4;
    assert_int_equal(pl_plan_unpack(&up.data, g, &back, &err), 0);
    assert_false(back->nodes[n].spec.replicated);
    assert_int_equal(back->nodes[n].spec.nparts, 1);
    pl_plan_free(back);
    msgpack_unpacked_destroy(&up);
    msgpack_sbuffer_destroy(&sb);
    pl_plan_free(plan);
    pl_graph_free(g);
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
        cmocka_unit_test(test_replicated),
        cmocka_unit_test(test_replicated_wire),
    };
    return cmocka_run_group_tests_name("planner_spec", tests, NULL, report);
}
