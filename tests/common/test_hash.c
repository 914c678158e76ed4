/* tests/common/test_hash.c — the one hash combiner (common/base/ein_hash.h):
 * its values against an independent evaluation of its formula (Python's
 * arbitrary-precision integers masked to 64 bits), and no collision over
 * the small keys the optimizers fold into it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/base/ein_hash.h"

static void test_values(void **state)
{
    (void)state;
    /* python3: h ^= (x + 0x9e3779b97f4a7c15 + (h << 6) + (h >> 2)) & M;
     * h = (h * 0xbf58476d1ce4e5b9) & M; h ^= h >> 31 */
    assert_true(ein_hash_mix(0, 0) == 0xd67411c5c06e57a5ULL);
    assert_true(ein_hash_mix(0x77, 3) == 0x4f21d77f3641960dULL);
    assert_true(ein_hash_mix(UINT64_MAX, 1) == 0x458215af451071ULL);
    assert_true(ein_hash_mix(123456789, 987654321) == 0x3266509961d608dcULL);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Every pair (lo, hi) of small box bounds, folded as the optimizers fold
 * them, gives a distinct hash. */
static void test_no_small_collisions(void **state)
{
    (void)state;
    enum { N = 256 };
    uint64_t *h = malloc(sizeof *h * N * N);
    assert_non_null(h);
    for (uint64_t lo = 0; lo < N; lo++)
        for (uint64_t hi = 0; hi < N; hi++)
            h[lo * N + hi] = ein_hash_mix(ein_hash_mix(0x77, lo), hi);
    qsort(h, N * N, sizeof *h, cmp_u64);
    for (size_t i = 1; i < N * N; i++)
        assert_true(h[i] != h[i - 1]);
    free(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_no_small_collisions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
