/* tests/common/test_vec.c — ein_vec: pushes keep every element, growth
 * doubles from EIN_VEC_MIN_CAP, sizes that overflow and allocations that
 * fail return EIN_ENOMEM with the array untouched, misuse is EIN_EINVAL. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/ein_vec.h"

typedef struct rec { int64_t a; double b; char tag[5]; } rec;

static void test_push_keeps_elements(void **state)
{
    (void)state;
    EIN_VEC(rec) v = {0};
    int grew = 0, last_cap = 0;
    for (int i = 0; i < 10000; i++) {
        rec r = {.a = 3 * (int64_t)i, .b = 0.5 * i};
        snprintf(r.tag, sizeof r.tag, "%d", i % 1000);
        assert_int_equal(ein_vec_push(&v, r), 0);
        assert_int_equal(v.n, i + 1);
        assert_true(v.cap >= v.n);
        if (v.cap != last_cap) {
            /* first EIN_VEC_MIN_CAP, then doubled */
            assert_int_equal(v.cap, last_cap ? 2 * last_cap : EIN_VEC_MIN_CAP);
            last_cap = v.cap;
            grew++;
        }
    }
    assert_int_equal(grew, 13); /* 4, 8, .., 16384: O(log n) reallocations */
    for (int i = 0; i < 10000; i++) {
        char want[5];
        snprintf(want, sizeof want, "%d", i % 1000);
        assert_int_equal(v.v[i].a, 3 * (int64_t)i);
        assert_true(v.v[i].b == 0.5 * i);
        assert_string_equal(v.v[i].tag, want);
    }
    ein_vec_free(&v);
    assert_null(v.v);
    assert_int_equal(v.n, 0);
    assert_int_equal(v.cap, 0);
    assert_int_equal(ein_vec_push(&v, (rec){.a = 7}), 0); /* usable again */
    assert_int_equal(v.v[0].a, 7);
    ein_vec_free(&v);
}

static void test_reserve_fields(void **state)
{
    (void)state;
    int *a = NULL, cap = 0;
    assert_int_equal(ein_vec_reserve(&a, &cap, 0, sizeof *a), 0); /* nothing to do */
    assert_null(a);
    assert_int_equal(cap, 0);
    assert_int_equal(ein_vec_reserve(&a, &cap, 1000, sizeof *a), 0);
    assert_int_equal(cap, 1024);
    for (int i = 0; i < 1000; i++)
        a[i] = i;
    int *before = a;
    assert_int_equal(ein_vec_reserve(&a, &cap, 1024, sizeof *a), 0); /* fits: no move */
    assert_ptr_equal(a, before);
    assert_int_equal(ein_vec_reserve(&a, &cap, 1025, sizeof *a), 0);
    assert_int_equal(cap, 2048);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(a[i], i);
    /* records of several ints: elem is the record's size */
    int nidx = 3, *req = NULL, rcap = 0;
    assert_int_equal(ein_vec_reserve(&req, &rcap, 5, sizeof(int) * (size_t)nidx), 0);
    assert_int_equal(rcap, 8); /* EIN_VEC_MIN_CAP 4, doubled once */
    req[3 * 7 + 2] = 42;       /* the last int of record 7 is ours */
    free(req);
    free(a);
}

static void test_overflow_and_failure(void **state)
{
    (void)state;
    int *a = NULL, cap = 0;
    assert_int_equal(ein_vec_reserve(&a, &cap, 10, sizeof *a), 0);
    a[9] = 99;
    int *before = a;
    /* past what an int capacity can count */
    assert_int_equal(ein_vec_reserve(&a, &cap, (int64_t)INT_MAX + 1, sizeof *a), EIN_ENOMEM);
    assert_ptr_equal(a, before);
    assert_int_equal(cap, 16);
    assert_int_equal(a[9], 99);
    /* need * elem past SIZE_MAX */
    size_t zcap = 16;
    assert_int_equal(ein_vec_reserve_z(&a, &zcap, SIZE_MAX / 2, sizeof *a), EIN_ENOMEM);
    assert_ptr_equal(a, before);
    assert_int_equal(zcap, 16);
    /* a size that fits size_t but no allocator gives: realloc fails */
    assert_int_equal(ein_vec_reserve_z(&a, &zcap, SIZE_MAX / 8, sizeof *a), EIN_ENOMEM);
    assert_ptr_equal(a, before);
    assert_int_equal(zcap, 16);
    assert_int_equal(a[9], 99);
    /* an int capacity near INT_MAX of large elements: SIZE_MAX / elem is the limit */
    assert_int_equal(ein_vec_reserve(&a, &cap, INT_MAX, SIZE_MAX / 4), EIN_ENOMEM);
    assert_int_equal(cap, 16);
    /* misuse */
    assert_int_equal(ein_vec_reserve(&a, &cap, 20, 0), EIN_EINVAL);
    assert_int_equal(ein_vec_reserve(NULL, &cap, 20, 4), EIN_EINVAL);
    assert_int_equal(ein_vec_reserve(&a, NULL, 20, 4), EIN_EINVAL);
    int neg = -1;
    assert_int_equal(ein_vec_reserve(&a, &neg, 20, 4), EIN_EINVAL);
    assert_int_equal(ein_vec_reserve_z(&a, &zcap, 20, 0), EIN_EINVAL);
    assert_int_equal(a[9], 99);
    free(a);
}

static void test_bytes(void **state)
{
    (void)state;
    char *buf = NULL;
    size_t cap = 0, len = 0;
    const char *piece = "0123456789abcdefghij"; /* 20 bytes */
    for (int i = 0; i < 500; i++) {
        assert_int_equal(ein_vec_reserve_z(&buf, &cap, len + 20 + 1, 1), 0);
        memcpy(buf + len, piece, 20);
        len += 20;
        buf[len] = '\0';
    }
    assert_int_equal(strlen(buf), 10000);
    assert_int_equal(cap, 16384);
    for (size_t i = 0; i < len; i++)
        assert_int_equal(buf[i], piece[i % 20]);
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_push_keeps_elements),
        cmocka_unit_test(test_reserve_fields),
        cmocka_unit_test(test_overflow_and_failure),
        cmocka_unit_test(test_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
