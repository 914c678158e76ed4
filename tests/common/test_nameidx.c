/* tests/common/test_nameidx.c — ein_nameidx: every added name is found at
 * its id through growth, absent names are not, the first of equal names
 * wins, a rebuild indexes a prefix afresh, and the load stays at most one
 * half (checked against the slot table itself). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "common/base/ein_nameidx.h"

#define N 3000
static char names[N][16];

static const char *name_of(const void *ctx, int id)
{
    (void)ctx;
    return names[id];
}

static int used_slots(const ein_nameidx *x)
{
    int u = 0;
    for (int i = 0; i < x->cap; i++)
        u += x->slot[i] != 0;
    return u;
}

static void test_add_find(void **state)
{
    (void)state;
    ein_nameidx x = {0};
    assert_int_equal(ein_nameidx_find(&x, "a", name_of, NULL), -1); /* zeroed: empty */
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "t%d", i * 7);
        assert_int_equal(ein_nameidx_add(&x, name_of, NULL), 0);
        assert_int_equal(x.n, i + 1);
        assert_true((int64_t)x.n * 2 <= x.cap);
        assert_int_equal(x.cap & (x.cap - 1), 0);
    }
    assert_int_equal(used_slots(&x), N);
    for (int i = 0; i < N; i++)
        assert_int_equal(ein_nameidx_find(&x, names[i], name_of, NULL), i);
    assert_int_equal(ein_nameidx_find(&x, "t1", name_of, NULL), -1);   /* not a multiple of 7 */
    assert_int_equal(ein_nameidx_find(&x, "", name_of, NULL), -1);
    assert_int_equal(ein_nameidx_find(&x, NULL, name_of, NULL), -1);
    ein_nameidx_free(&x);
    assert_null(x.slot);
    assert_int_equal(x.cap + x.n, 0);
    assert_int_equal(ein_nameidx_find(&x, "t0", name_of, NULL), -1);
}

static void test_equal_names_first_wins(void **state)
{
    (void)state;
    ein_nameidx x = {0};
    strcpy(names[0], "w");
    strcpy(names[1], "v");
    strcpy(names[2], "w");
    for (int i = 0; i < 3; i++)
        assert_int_equal(ein_nameidx_add(&x, name_of, NULL), 0);
    assert_int_equal(ein_nameidx_find(&x, "w", name_of, NULL), 0);
    assert_int_equal(ein_nameidx_find(&x, "v", name_of, NULL), 1);
    ein_nameidx_free(&x);
}

static void test_rebuild(void **state)
{
    (void)state;
    ein_nameidx x = {0};
    for (int i = 0; i < 100; i++)
        snprintf(names[i], sizeof names[i], "n%d", i);
    assert_int_equal(ein_nameidx_rebuild(&x, 40, 10, name_of, NULL), 0);
    assert_int_equal(x.n, 40);
    assert_true(x.cap >= 100);
    assert_int_equal(used_slots(&x), 40);
    assert_int_equal(ein_nameidx_find(&x, "n39", name_of, NULL), 39);
    assert_int_equal(ein_nameidx_find(&x, "n40", name_of, NULL), -1); /* not indexed yet */
    for (int i = 40; i < 100; i++)
        assert_int_equal(ein_nameidx_add(&x, name_of, NULL), 0);
    for (int i = 0; i < 100; i++)
        assert_int_equal(ein_nameidx_find(&x, names[i], name_of, NULL), i);
    /* a name changed in the caller's array is found under its new text only
     * after a rebuild (the hash places it by the old one) */
    strcpy(names[5], "renamed");
    assert_int_equal(ein_nameidx_rebuild(&x, 100, 0, name_of, NULL), 0);
    assert_int_equal(ein_nameidx_find(&x, "renamed", name_of, NULL), 5);
    assert_int_equal(ein_nameidx_find(&x, "n5", name_of, NULL), -1);
    ein_nameidx_free(&x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_find),
        cmocka_unit_test(test_equal_names_first_wins),
        cmocka_unit_test(test_rebuild),
    };
    return cmocka_run_group_tests_name("nameidx", tests, NULL, NULL);
}
