/* tests/common/test_kernel_cost.c — ein_kernel_cost: the closed-form causal
 * pair count agrees with counting pair by pair (random sequences, query and
 * key intervals), a whole causal sequence of L tokens has L(L+1)/2 pairs,
 * and the FLOPs of an einsum, an attention block and the per-element kinds
 * follow the formulas in ein_kernel_cost.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "common/ir/ein_kernel_cost.h"
#include "common/io/ein_rand.h"

/* Pair by pair: query t sees keys [start(t), t] within [klo, khi). */
static double brute_pairs(const int64_t *ends, int n, int64_t qlo, int64_t qhi, int64_t klo,
                          int64_t khi)
{
    double pairs = 0;
    for (int64_t t = qlo; t < qhi; t++) {
        int64_t start = 0;
        for (int j = 0; j < n && ends[j] <= t; j++)
            start = ends[j];
        for (int64_t u = start; u <= t; u++)
            pairs += u >= klo && u < khi;
    }
    return pairs;
}

/* The same inside a sliding window w (0: none): also u > t - w. */
static double brute_window(const int64_t *ends, int n, int64_t w, int64_t qlo, int64_t qhi,
                           int64_t klo, int64_t khi)
{
    double pairs = 0;
    for (int64_t t = qlo; t < qhi; t++) {
        int64_t start = 0;
        for (int j = 0; j < n && ends[j] <= t; j++)
            start = ends[j];
        for (int64_t u = start; u <= t; u++)
            pairs += u >= klo && u < khi && (w == 0 || u > t - w);
    }
    return pairs;
}

/* Issue 34: ein_window_pairs against the count pair by pair, windows from
 * 1 to past the sequences; a window's FLOPs in ein_kernel_flops. */
static void test_window_pairs(void **state)
{
    (void)state;
    uint64_t rng = 777;
    for (int trial = 0; trial < 3000; trial++) {
        int64_t ends[6];
        int n = (int)(ein_rand_next(&rng) % 5);
        int64_t at = 0;
        for (int j = 0; j < n; j++)
            ends[j] = at += 1 + (int64_t)(ein_rand_next(&rng) % 12);
        int64_t total = at + (int64_t)(ein_rand_next(&rng) % 6) + 1;
        int64_t w = (int64_t)(ein_rand_next(&rng) % 16);
        int64_t q0 = (int64_t)(ein_rand_next(&rng) % (uint64_t)total);
        int64_t q1 = q0 + (int64_t)(ein_rand_next(&rng) % (uint64_t)(total - q0 + 1));
        int64_t k0 = (int64_t)(ein_rand_next(&rng) % (uint64_t)total);
        int64_t k1 = k0 + (int64_t)(ein_rand_next(&rng) % (uint64_t)(total - k0 + 1));
        double want = brute_window(ends, n, w, q0, q1, k0, k1);
        double got = ein_window_pairs(ends, n, w, q0, q1, k0, k1);
        if (!(fabs(got - want) <= 0))
            fail_msg("trial %d: %d ends, window %lld, q [%lld, %lld), k [%lld, %lld): %g pairs, "
                     "want %g", trial, n, (long long)w, (long long)q0, (long long)q1,
                     (long long)k0, (long long)k1, got, want);
    }
    /* one sequence of 10, window 3: 1 + 2 + 3 * 8 pairs */
    int64_t sq[3] = {4, 10, 8};
    ein_box q = ein_box_of_shape(3, sq);
    const ein_box *qkv[3] = {&q, &q, &q};
    ein_kernel k;
    memset(&k, 0, sizeof k);
    k.kind = EIN_KERNEL_ATTENTION;
    k.window = 3;
    assert_true(ein_kernel_flops(&k, &q, qkv, 3) == 4.0 * 4 * 8 * 27);
    k.kind = EIN_KERNEL_ATTENTION_PARTIAL;
    assert_true(ein_kernel_flops(&k, &q, qkv, 3) == 4.0 * 4 * 8 * 27);
    /* decode: at most the window's keys of a 40-row cache block */
    int64_t dq[3] = {4, 2, 8}, dk[4] = {2, 2, 40, 8};
    ein_box qb = ein_box_of_shape(3, dq), kb = ein_box_of_shape(4, dk);
    const ein_box *dsrc[3] = {&qb, &kb, &kb};
    k.kind = EIN_KERNEL_DECODE_ATTENTION;
    k.window = 0;
    assert_true(ein_kernel_flops(&k, &qb, dsrc, 3) == 4.0 * 64 * 40);
    k.window = 5;
    assert_true(ein_kernel_flops(&k, &qb, dsrc, 3) == 4.0 * 64 * 5);
}

static void test_pairs_match_brute_force(void **state)
{
    (void)state;
    uint64_t rng = 12345;
    for (int trial = 0; trial < 2000; trial++) {
        int64_t ends[6];
        int n = (int)(ein_rand_next(&rng) % 5);
        int64_t at = 0;
        for (int j = 0; j < n; j++)
            ends[j] = at += 1 + (int64_t)(ein_rand_next(&rng) % 9);
        int64_t total = at + (int64_t)(ein_rand_next(&rng) % 6) + 1;
        int64_t q0 = (int64_t)(ein_rand_next(&rng) % (uint64_t)total);
        int64_t q1 = q0 + (int64_t)(ein_rand_next(&rng) % (uint64_t)(total - q0 + 1));
        int64_t k0 = (int64_t)(ein_rand_next(&rng) % (uint64_t)total);
        int64_t k1 = k0 + (int64_t)(ein_rand_next(&rng) % (uint64_t)(total - k0 + 1));
        double want = brute_pairs(ends, n, q0, q1, k0, k1);
        double got = ein_causal_pairs(ends, n, q0, q1, k0, k1);
        if (!(fabs(got - want) <= 0))
            fail_msg("trial %d: %d ends, q [%lld, %lld), k [%lld, %lld): %g pairs, want %g",
                     trial, n, (long long)q0, (long long)q1, (long long)k0, (long long)k1, got,
                     want);
    }
    int64_t ends[2] = {100, 300};
    assert_true(ein_causal_pairs(NULL, 0, 0, 1000, 0, 1000) == 1000.0 * 1001 / 2);
    assert_true(ein_causal_pairs(ends, 2, 0, 300, 0, 300) == 100.0 * 101 / 2 + 200.0 * 201 / 2);
}

static void test_flops(void **state)
{
    (void)state;
    int64_t sa[2] = {8, 16}, sb[2] = {16, 4}, so[2] = {8, 4};
    ein_box a = ein_box_of_shape(2, sa), b = ein_box_of_shape(2, sb), o = ein_box_of_shape(2, so);
    const ein_box *src[3] = {&a, &b, NULL};
    ein_kernel k;
    memset(&k, 0, sizeof k);
    k.kind = EIN_KERNEL_EINSUM;
    strcpy(k.subscripts, "ij,jk->ik");
    assert_true(ein_kernel_flops(&k, &o, src, 2) == 2.0 * 8 * 16 * 4);
    strcpy(k.subscripts, "ij->i");
    assert_true(ein_kernel_flops(&k, &o, src, 1) == 8.0 * 16);
    /* attention: 4 heads x 10 tokens x d 8, causal, one sequence */
    int64_t sq[3] = {4, 10, 8};
    ein_box q = ein_box_of_shape(3, sq);
    const ein_box *qkv[3] = {&q, &q, &q};
    memset(&k, 0, sizeof k);
    k.kind = EIN_KERNEL_ATTENTION;
    assert_true(ein_kernel_flops(&k, &q, qkv, 3) == 4.0 * 4 * 8 * 55);
    k.kind = EIN_KERNEL_SOFTMAX;
    assert_true(ein_kernel_flops(&k, &o, src, 1) == 5.0 * 32);
    k.kind = EIN_KERNEL_LAYERNORM;
    assert_true(ein_kernel_flops(&k, &o, src, 1) == 7.0 * 32);
    k.kind = EIN_KERNEL_REDUCE;
    assert_true(ein_kernel_flops(&k, &o, src, 1) == 8.0 * 16);
    k.kind = EIN_KERNEL_SLICE;
    assert_true(ein_kernel_flops(&k, &o, src, 1) == 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pairs_match_brute_force),
        cmocka_unit_test(test_flops),
        cmocka_unit_test(test_window_pairs),
    };
    return cmocka_run_group_tests_name("kernel_cost", tests, NULL, NULL);
}
