/* tests/exchange/test_exchange.c — atoms, preamble, naive program, validity. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "exchange/xp_atoms.h"
#include "exchange/xp_naive.h"

static ein_box box2(int64_t r0, int64_t r1, int64_t c0, int64_t c1)
{
    ein_box b;
    memset(&b, 0, sizeof b);
    b.rank = 2;
    b.lo[0] = r0, b.hi[0] = r1, b.lo[1] = c0, b.hi[1] = c1;
    return b;
}

/* Example 5.4: matmul F11, F12, F21, F22 on GPUs 0..3 (rows [0,128) partial
 * on 0 and 1, rows [128,256) partial on 2 and 3); softmax wants four row
 * blocks of 64. Expected: four atoms, IN X1 @ 0; X2 @ 0; Y1 @ 1; Y2 @ 1;
 * X3 @ 2; X4 @ 2; Y3 @ 3; Y4 @ 3, OUT Xj+Yj @ Sj. */
static void test_example_5_4(void **state)
{
    (void)state;
    ein_box have[4] = {box2(0, 128, 0, 256), box2(0, 128, 0, 256), box2(128, 256, 0, 256),
                       box2(128, 256, 0, 256)};
    int have_site[4] = {0, 1, 2, 3};
    ein_box need[4] = {box2(0, 64, 0, 256), box2(64, 128, 0, 256), box2(128, 192, 0, 256),
                       box2(192, 256, 0, 256)};
    int need_site[4] = {0, 1, 2, 3};
    ein_box *atoms;
    int natoms;
    xp_program *p;
    ein_error err = {0};
    assert_int_equal(xp_preamble_make(have, have_site, 4, need, need_site, 4, 2, 4, &atoms,
                                      &natoms, &p, &err), 0);
    assert_int_equal(natoms, 4);
    for (int a = 0; a < 4; a++)
        assert_true(ein_box_equal(&atoms[a], &need[a]));
    assert_int_equal(p->nin, 8);
    /* Atom j has one copy on each GPU of its producer pair. */
    int count[4][4] = {{0}};
    for (int i = 0; i < p->nin; i++) {
        count[p->in[i].atom][p->in[i].site]++;
        assert_true(p->in[i].bytes == 64.0 * 256 * 2);
    }
    for (int a = 0; a < 4; a++)
        for (int s = 0; s < 4; s++)
            assert_int_equal(count[a][s], (a < 2) == (s < 2) ? 1 : 0);
    assert_int_equal(p->nout, 4);
    for (int o = 0; o < 4; o++) {
        assert_int_equal(xp_set_count(p, p->out[o].set), 2);
        for (int i = 0; i < p->nin; i++)
            if (xp_set_has(p->out[o].set, i))
                assert_int_equal(p->in[i].atom, o);
        assert_int_equal(p->out[o].site, o);
    }
    /* Without actions the OUTs are not reached; the naive body reaches them. */
    assert_int_equal(xp_program_check(p, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "never reached"));
    assert_int_equal(xp_naive_synthesize(p, &err), 0);
    assert_int_equal(xp_program_check(p, &err), 0);
    /* Each OUT needs one transfer (the other copy) and one local aggregation. */
    assert_int_equal(p->nact, 8);
    free(atoms);
    xp_program_free(p);
}

/* Overlay in two dimensions: 2x1 producer blocks against 1x3 consumer
 * blocks give 2x3 atoms, each inside exactly one block of each family. */
static void test_overlay_grid(void **state)
{
    (void)state;
    ein_box have[2] = {box2(0, 5, 0, 9), box2(5, 11, 0, 9)};
    ein_box need[3] = {box2(0, 11, 0, 3), box2(0, 11, 3, 6), box2(0, 11, 6, 9)};
    ein_box *atoms;
    int n;
    ein_error err = {0};
    assert_int_equal(xp_atoms_overlay(have, 2, need, 3, &atoms, &n, &err), 0);
    assert_int_equal(n, 6);
    int64_t vol = 0;
    for (int a = 0; a < n; a++) {
        vol += ein_box_volume(&atoms[a]);
        int in_have = 0, in_need = 0;
        for (int h = 0; h < 2; h++)
            in_have += ein_box_contains(&have[h], &atoms[a]);
        for (int b = 0; b < 3; b++)
            in_need += ein_box_contains(&need[b], &atoms[a]);
        assert_int_equal(in_have, 1);
        assert_int_equal(in_need, 1);
    }
    assert_int_equal(vol, 11 * 9);
    free(atoms);
}

/* Only cells inside a required block are atoms. */
static void test_overlay_only_needed(void **state)
{
    (void)state;
    ein_box have[1] = {box2(0, 10, 0, 10)};
    ein_box need[1] = {box2(2, 4, 0, 10)};
    ein_box *atoms;
    int n;
    ein_error err = {0};
    assert_int_equal(xp_atoms_overlay(have, 1, need, 1, &atoms, &n, &err), 0);
    assert_int_equal(n, 1);
    assert_true(ein_box_equal(&atoms[0], &need[0]));
    free(atoms);
}

static xp_program *swap_program(void)
{
    /* Ex. 5.1's preamble: A @ 0, B @ 1, OUT A+B @ 0 and @ 1. */
    ein_error err = {0};
    xp_program *p = xp_program_new(2, 2);
    xp_program_add_in(p, 0, 0, 1e9, &err);
    xp_program_add_in(p, 0, 1, 1e9, &err);
    xp_word *ab = xp_set_new(p);
    xp_set_add(ab, 0);
    xp_set_add(ab, 1);
    xp_program_add_out(p, ab, 0, &err);
    xp_program_add_out(p, ab, 1, &err);
    free(ab);
    return p;
}

static void test_validity_def_5_5(void **state)
{
    (void)state;
    ein_error err = {0};
    xp_program *p = swap_program();
    xp_word *a = xp_set_new(p), *b = xp_set_new(p), *ab = xp_set_new(p);
    xp_set_add(a, 0);
    xp_set_add(b, 1);
    xp_set_add(ab, 0);
    xp_set_add(ab, 1);
    int to1 = 1, to0 = 0;
    /* The swap: A @ 0 -> 1; B @ 1 -> 0; A+B @ 0; A+B @ 1. Valid. */
    xp_program_add_action(p, a, 0, &to1, 1, &err);
    xp_program_add_action(p, b, 1, &to0, 1, &err);
    xp_program_add_action(p, ab, 0, NULL, 0, &err);
    assert_int_equal(xp_program_check(p, &err), EIN_EINVAL); /* OUT @ 1 missing */
    xp_program_add_action(p, ab, 1, NULL, 0, &err);
    assert_int_equal(xp_program_check(p, &err), 0);
    xp_program_free(p);

    /* Not well-formed: A+B @ 0 -> 1 before B ever reaches 0. */
    p = swap_program();
    xp_program_add_action(p, ab, 0, &to1, 1, &err);
    assert_int_equal(xp_program_check(p, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "never enabled"));
    /* Adding B @ 1 -> 0 enables it; firing materialises A+B at its source
     * and its destination, so both OUTs are reached. */
    xp_program_add_action(p, b, 1, &to0, 1, &err);
    assert_int_equal(xp_program_check(p, &err), 0);
    xp_program_free(p);
    free(a), free(b), free(ab);
}

static void test_bad_sites_rejected(void **state)
{
    (void)state;
    ein_error err = {0};
    xp_program *p = xp_program_new(2, 1);
    assert_true(xp_program_add_in(p, 0, 5, 1, &err) < 0);
    assert_non_null(strstr(err.msg, "site 5"));
    xp_program_free(p);
}

static void test_naive_random_layouts(void **state)
{
    (void)state;
    srand(7);
    for (int rep = 0; rep < 200; rep++) {
        int ngpu = 1 + rand() % 8, nh = 1 + rand() % 6, nn = 1 + rand() % 6;
        int64_t rows = 1 + rand() % 40;
        ein_box have[6], need[6];
        int hs[6], ns[6];
        /* Producer: nh row blocks, possibly duplicated (partial copies). */
        for (int i = 0; i < nh; i++) {
            int64_t lo = rows * (i % 3) / 3, hi = rows * (i % 3 + 1) / 3;
            if (hi <= lo) { lo = 0; hi = rows; }
            have[i] = box2(lo, hi, 0, 4);
            hs[i] = rand() % ngpu;
        }
        /* Make sure the producer covers everything. */
        have[0] = box2(0, rows, 0, 4);
        for (int i = 0; i < nn; i++) {
            int64_t lo = rows * i / nn, hi = rows * (i + 1) / nn;
            need[i] = box2(lo, hi > lo ? hi : lo + 1 > rows ? rows : lo + 1, 0, 4);
            if (ein_box_empty(&need[i]))
                need[i] = box2(0, rows, 0, 4);
            ns[i] = rand() % ngpu;
        }
        ein_box *atoms;
        int natoms;
        xp_program *p;
        ein_error err = {0};
        assert_int_equal(xp_preamble_make(have, hs, nh, need, ns, nn, 4, ngpu, &atoms, &natoms,
                                          &p, &err), 0);
        assert_int_equal(xp_naive_synthesize(p, &err), 0);
        if (xp_program_check(p, &err) != 0)
            fail_msg("rep %d: naive program invalid: %s", rep, err.msg);
        free(atoms);
        xp_program_free(p);
    }
}

/* A replicated producer (planner/pl_spec.h): the whole tensor on sites 0
 * and 1, equal copies. Each need takes ONE copy, its own site's (nothing
 * moves, nothing is summed); a need on site 2, which has no copy, takes
 * the first copy (moved). xp_preamble_make on the same blocks sums both
 * copies (partials): the difference the replicas variant exists for. */
static void test_preamble_replicas(void **state)
{
    (void)state;
    ein_box have[2] = {box2(0, 4, 0, 8), box2(0, 4, 0, 8)};
    int have_site[2] = {0, 1};
    ein_box need[3] = {box2(0, 4, 0, 8), box2(0, 4, 0, 4), box2(0, 2, 0, 8)};
    int need_site[3] = {0, 1, 2};
    ein_box *atoms;
    int natoms;
    xp_program *p;
    ein_error err = {0};
    assert_int_equal(xp_preamble_make_replicas(have, have_site, 2, need, need_site, 3, 4, 3,
                                               &atoms, &natoms, &p, &err), 0);
    assert_int_equal(p->nin, 2 * natoms);
    for (int o = 0; o < p->nout; o++) {
        assert_int_equal(xp_set_count(p, p->out[o].set), 1);
        for (int i = 0; i < p->nin; i++)
            if (xp_set_has(p->out[o].set, i))
                assert_int_equal(p->in[i].site, p->out[o].site == 2 ? 0 : p->out[o].site);
    }
    assert_int_equal(xp_naive_synthesize(p, &err), 0);
    assert_int_equal(xp_program_check(p, &err), 0);
    /* Only site 2's atoms cross devices: one transfer each, from site 0. */
    int moves = 0;
    for (int a = 0; a < p->nact; a++)
        for (int d = 0; d < p->act[a].ndst; d++) {
            assert_int_equal(p->act[a].dst[d], 2);
            assert_int_equal(p->act[a].src, 0);
            moves++;
        }
    int atoms2 = 0;
    for (int a = 0; a < natoms; a++)
        atoms2 += ein_box_contains(&need[2], &atoms[a]);
    assert_int_equal(moves, atoms2);
    free(atoms);
    xp_program_free(p);
    /* The sum of copies, for contrast: every OUT aggregates both. */
    assert_int_equal(xp_preamble_make(have, have_site, 2, need, need_site, 3, 4, 3, &atoms,
                                      &natoms, &p, &err), 0);
    for (int o = 0; o < p->nout; o++)
        assert_int_equal(xp_set_count(p, p->out[o].set), 2);
    free(atoms);
    xp_program_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_example_5_4),
        cmocka_unit_test(test_preamble_replicas),
        cmocka_unit_test(test_overlay_grid),
        cmocka_unit_test(test_overlay_only_needed),
        cmocka_unit_test(test_validity_def_5_5),
        cmocka_unit_test(test_bad_sites_rejected),
        cmocka_unit_test(test_naive_random_layouts),
    };
    return cmocka_run_group_tests_name("exchange", tests, NULL, NULL);
}
