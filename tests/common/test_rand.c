/* tests/common/test_rand.c — the seeded generator: deterministic, in
 * range, sensitive to every input, and independent of how a tensor is cut
 * into boxes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/ir/ein_box.h"
#include "common/ir/ein_dtype.h"
#include "common/io/ein_rand.h"

static uint64_t rng_state = 0x13198a2e03707344ull;
static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static int64_t rnd(int64_t lo, int64_t hi)
{
    return lo + (int64_t)(rng() % (uint64_t)(hi - lo));
}

static void test_key_is_fnv1a(void **state)
{
    (void)state;
    /* Reference values of 64-bit FNV-1a. */
    assert_true(ein_rand_key("") == 0xcbf29ce484222325ull);
    assert_true(ein_rand_key("a") == 0xaf63dc4c8601ec8cull);
    assert_true(ein_rand_key("foobar") == 0x85944171f73967e8ull);
    assert_true(ein_rand_key("x") != ein_rand_key("y"));
}

/* ein_rand_next is splitmix64: the published first outputs for state 0. */
static void test_next_is_splitmix64(void **state)
{
    (void)state;
    uint64_t s = 0;
    assert_true(ein_rand_next(&s) == 0xe220a8397b1dcdafULL);
    assert_true(ein_rand_next(&s) == 0x6e789e6aa1b965f4ULL);
    assert_true(ein_rand_next(&s) == 0x06c45d188009454fULL);
    assert_true(s == 3 * 0x9e3779b97f4a7c15ULL);
}

static void test_deterministic_and_sensitive(void **state)
{
    (void)state;
    uint64_t key = ein_rand_key("weights");
    int same_seed = 0, same_key = 0, same_idx = 0;
    for (uint64_t i = 0; i < 10000; i++) {
        float v = ein_rand_value(42, key, i);
        assert_true(v == ein_rand_value(42, key, i));
        same_seed += v == ein_rand_value(43, key, i);
        same_key += v == ein_rand_value(42, key + 1, i);
        same_idx += v == ein_rand_value(42, key, i + 1);
    }
    /* 2^24 possible values: a handful of coincidences at most. */
    assert_true(same_seed < 10);
    assert_true(same_key < 10);
    assert_true(same_idx < 10);
}

static void test_range_and_moments(void **state)
{
    (void)state;
    const int n = 200000;
    double sum = 0, sum2 = 0;
    float mn = 2, mx = -2;
    int buckets[20] = {0};
    for (int i = 0; i < n; i++) {
        float v = ein_rand_value(7, 99, (uint64_t)i * 2654435761u);
        assert_true(v >= -1.0f && v < 1.0f);
        sum += v;
        sum2 += (double)v * v;
        mn = v < mn ? v : mn;
        mx = v > mx ? v : mx;
        buckets[(int)((v + 1.0f) * 10.0f)]++;
    }
    double mean = sum / n, var = sum2 / n - mean * mean;
    assert_true(fabs(mean) < 0.01);
    assert_true(fabs(var - 1.0 / 3.0) < 0.01);
    assert_true(mn < -0.999f && mx > 0.999f);
    for (int b = 0; b < 20; b++) /* expected n/20 = 10000 each */
        assert_true(buckets[b] > 9400 && buckets[b] < 10600);
    /* extreme indices are fine too */
    float v = ein_rand_value(UINT64_MAX, UINT64_MAX, UINT64_MAX);
    assert_true(v >= -1.0f && v < 1.0f);
}

/* Fill the whole tensor at once, then compare with boxes filled one by one
 * (a random grid) and with the per-element definition. */
static void test_box_independence(void **state)
{
    (void)state;
    for (int iter = 0; iter < 60; iter++) {
        int rank = (int)rnd(0, 5);
        int64_t shape[EIN_MAX_RANK];
        for (int d = 0; d < rank; d++)
            shape[d] = rnd(1, 9);
        ein_dtype dt = (ein_dtype)(iter % EIN_DTYPE_ELEM_COUNT); /* blocks: test_kn_quant */
        size_t elem = ein_dtype_size(dt);
        uint64_t seed = rng(), key = rng();
        ein_box all = ein_box_of_shape(rank, shape);
        size_t n = (size_t)ein_box_volume(&all);
        unsigned char *whole = malloc(n * elem), *pieces = malloc(n * elem);
        assert_non_null(whole);
        assert_non_null(pieces);
        ein_rand_fill_box(seed, key, shape, &all, dt, whole);
        /* the definition, element by element */
        for (size_t i = 0; i < n; i++) {
            float v = ein_rand_value(seed, key, i);
            unsigned char want[8];
            if (!ein_dtype_is_float(dt)) /* integers: 0 or 1 (ein_rand.h) */
                v = v >= 0.0f ? 1.0f : 0.0f;
            ein_dtype_from_f32(dt, &v, want, 1);
            assert_memory_equal(whole + i * elem, want, elem);
        }
        /* random sub-boxes: each equals the slice of the whole */
        for (int k = 0; k < 20; k++) {
            ein_box b;
            memset(&b, 0, sizeof b);
            b.rank = rank;
            for (int d = 0; d < rank; d++) {
                b.lo[d] = rnd(0, shape[d]);
                b.hi[d] = rnd(b.lo[d] + 1, shape[d] + 1);
            }
            size_t bn = (size_t)ein_box_volume(&b) * elem;
            unsigned char *got = malloc(bn), *want = malloc(bn);
            assert_non_null(got);
            assert_non_null(want);
            ein_rand_fill_box(seed, key, shape, &b, dt, got);
            ein_box_copy(want, &b, whole, &all, &b, elem);
            assert_memory_equal(got, want, bn);
            free(got);
            free(want);
        }
        /* A grid of halves along every dim tiles the tensor. */
        memset(pieces, 0, n * elem);
        int nb = 1 << rank;
        for (int m = 0; m < nb; m++) {
            ein_box b;
            memset(&b, 0, sizeof b);
            b.rank = rank;
            int empty = 0;
            for (int d = 0; d < rank; d++) {
                int64_t mid = shape[d] / 2;
                b.lo[d] = (m >> d & 1) ? mid : 0;
                b.hi[d] = (m >> d & 1) ? shape[d] : mid;
                empty |= b.hi[d] <= b.lo[d];
            }
            if (empty)
                continue;
            size_t bn = (size_t)ein_box_volume(&b) * elem;
            unsigned char *blk = malloc(bn);
            assert_non_null(blk);
            ein_rand_fill_box(seed, key, shape, &b, dt, blk);
            ein_box_copy(pieces, &all, blk, &b, &b, elem);
            free(blk);
        }
        assert_memory_equal(pieces, whole, n * elem);
        free(whole);
        free(pieces);
    }
}

static void test_long_rows(void **state)
{
    (void)state;
    /* Rows longer than the internal chunk. */
    int64_t shape[2] = {3, 1000};
    ein_box b = ein_box_of_shape(2, shape);
    b.lo[1] = 1;
    b.hi[1] = 999;
    float *v = malloc(3 * 998 * sizeof *v);
    assert_non_null(v);
    ein_rand_fill_box(5, 6, shape, &b, EIN_F32, v);
    for (int r = 0; r < 3; r++)
        for (int c = 1; c < 999; c++)
            assert_true(v[r * 998 + c - 1] == ein_rand_value(5, 6, (uint64_t)(r * 1000 + c)));
    free(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_is_fnv1a),
        cmocka_unit_test(test_next_is_splitmix64),
        cmocka_unit_test(test_deterministic_and_sensitive),
        cmocka_unit_test(test_range_and_moments),
        cmocka_unit_test(test_box_independence),
        cmocka_unit_test(test_long_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
