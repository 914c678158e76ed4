/* tests/common/test_box.c — ein_box_copy against a naive per-element loop
 * for random boxes of rank 0..4; intersect / contains / volume / format, shape text. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "common/ir/ein_box.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static int64_t rnd(int64_t lo, int64_t hi) /* [lo, hi) */
{
    return lo + (int64_t)(rng() % (uint64_t)(hi - lo));
}

static ein_box random_box(int rank, int64_t lo_max, int64_t ext_max)
{
    ein_box b;
    memset(&b, 0, sizeof b);
    b.rank = rank;
    for (int d = 0; d < rank; d++) {
        b.lo[d] = rnd(0, lo_max);
        b.hi[d] = b.lo[d] + rnd(1, ext_max + 1);
    }
    return b;
}

/* Offset of global point idx in the dense block over box. */
static int64_t dense_offset(const ein_box *box, const int64_t *idx)
{
    int64_t off = 0;
    for (int d = 0; d < box->rank; d++)
        off = off * (box->hi[d] - box->lo[d]) + (idx[d] - box->lo[d]);
    return off;
}

static int point_in(const ein_box *b, const int64_t *idx)
{
    for (int d = 0; d < b->rank; d++)
        if (idx[d] < b->lo[d] || idx[d] >= b->hi[d])
            return 0;
    return 1;
}

/* Call fn on every point of box (row-major). */
static void for_points(const ein_box *b, void (*fn)(const int64_t *idx, void *ctx), void *ctx)
{
    int64_t idx[EIN_MAX_RANK];
    if (ein_box_empty(b))
        return;
    for (int d = 0; d < b->rank; d++)
        idx[d] = b->lo[d];
    for (;;) {
        fn(idx, ctx);
        int d = b->rank - 1;
        while (d >= 0) {
            if (++idx[d] < b->hi[d])
                break;
            idx[d] = b->lo[d];
            d--;
        }
        if (d < 0)
            return;
    }
}

typedef struct copy_check {
    const ein_box *src_box, *dst_box, *region;
    size_t elem;
    const unsigned char *src_bytes, *dst_bytes;
} copy_check;

static void check_point(const int64_t *idx, void *vctx)
{
    copy_check *c = vctx;
    int64_t doff = dense_offset(c->dst_box, idx);
    const unsigned char *got = c->dst_bytes + doff * (int64_t)c->elem;
    if (point_in(c->region, idx)) {
        const unsigned char *want = c->src_bytes + dense_offset(c->src_box, idx) * (int64_t)c->elem;
        assert_memory_equal(got, want, c->elem);
    } else {
        for (size_t k = 0; k < c->elem; k++)
            assert_int_equal(got[k], 0xAB); /* untouched */
    }
}

static void test_copy_random(void **state)
{
    (void)state;
    static const size_t elems[] = {1, 2, 4, 8};
    for (int iter = 0; iter < 3000; iter++) {
        int rank = (int)rnd(0, 5);
        size_t elem = elems[rng() % 4];
        /* Small extents keep the naive check fast; lo up to 6 makes the
         * two boxes overlap in every way. */
        ein_box sb = random_box(rank, 6, 7), db = random_box(rank, 6, 7), region;
        if (!ein_box_intersect(&sb, &db, &region))
            continue;
        /* Sometimes copy a strict sub-box of the intersection. */
        if (rng() % 2)
            for (int d = 0; d < rank; d++) {
                int64_t lo = rnd(region.lo[d], region.hi[d]);
                int64_t hi = rnd(lo + 1, region.hi[d] + 1);
                region.lo[d] = lo;
                region.hi[d] = hi;
            }
        size_t sn = (size_t)ein_box_volume(&sb) * elem, dn = (size_t)ein_box_volume(&db) * elem;
        unsigned char *src = malloc(sn), *dst = malloc(dn);
        assert_non_null(src);
        assert_non_null(dst);
        for (size_t k = 0; k < sn; k++)
            src[k] = (unsigned char)rng();
        memset(dst, 0xAB, dn);
        ein_box_copy(dst, &db, src, &sb, &region, elem);
        copy_check c = {&sb, &db, &region, elem, src, dst};
        for_points(&db, check_point, &c);
        free(src);
        free(dst);
    }
}

static void test_copy_rank0(void **state)
{
    (void)state;
    ein_box b;
    memset(&b, 0, sizeof b);
    float s = 3.5f, d = 0;
    ein_box_copy(&d, &b, &s, &b, &b, sizeof s);
    assert_true(d == 3.5f);
    assert_int_equal(ein_box_volume(&b), 1);
    assert_false(ein_box_empty(&b));
}

typedef struct isect_check {
    const ein_box *a, *b, *r;
    int nonempty;
    int64_t count;
} isect_check;

static void check_isect_point(const int64_t *idx, void *vctx)
{
    isect_check *c = vctx;
    int in_both = point_in(c->a, idx) && point_in(c->b, idx);
    int in_r = c->nonempty && point_in(c->r, idx);
    assert_int_equal(in_both, in_r);
    c->count += in_both;
}

static void test_intersect_contains_random(void **state)
{
    (void)state;
    for (int iter = 0; iter < 3000; iter++) {
        int rank = (int)rnd(1, 5);
        ein_box a = random_box(rank, 5, 5), b = random_box(rank, 5, 5), r, hull;
        memset(&r, 0, sizeof r);
        int ne = ein_box_intersect(&a, &b, &r);
        /* Walk the bounding hull of both boxes: a point is in r iff it is
         * in both. */
        hull.rank = rank;
        for (int d = 0; d < rank; d++) {
            hull.lo[d] = a.lo[d] < b.lo[d] ? a.lo[d] : b.lo[d];
            hull.hi[d] = a.hi[d] > b.hi[d] ? a.hi[d] : b.hi[d];
        }
        isect_check c = {&a, &b, &r, ne, 0};
        for_points(&hull, check_isect_point, &c);
        assert_int_equal(ne, c.count > 0);
        if (ne) {
            assert_int_equal(ein_box_volume(&r), c.count);
            assert_true(ein_box_contains(&a, &r));
            assert_true(ein_box_contains(&b, &r));
        }
        /* contains(a, b) iff every point of b is in a. */
        int all = 1;
        int64_t idx[EIN_MAX_RANK];
        for (int d = 0; d < rank; d++)
            idx[d] = b.lo[d];
        for (;;) {
            all &= point_in(&a, idx);
            int d = rank - 1;
            while (d >= 0) {
                if (++idx[d] < b.hi[d])
                    break;
                idx[d] = b.lo[d];
                d--;
            }
            if (d < 0)
                break;
        }
        assert_int_equal(ein_box_contains(&a, &b), all);
        assert_true(ein_box_contains(&a, &a));
        assert_true(ein_box_contains(&hull, &a));
    }
}

static void test_box_misc(void **state)
{
    (void)state;
    int64_t shape[3] = {4, 5, 6};
    ein_box b = ein_box_of_shape(3, shape);
    assert_int_equal(ein_box_volume(&b), 120);
    ein_box c = b;
    assert_true(ein_box_equal(&b, &c));
    assert_int_equal(ein_box_compare(&b, &c), 0);
    c.lo[1] = 2;
    assert_false(ein_box_equal(&b, &c));
    assert_true(ein_box_compare(&b, &c) < 0);
    assert_true(ein_box_compare(&c, &b) > 0);
    assert_int_equal(ein_box_volume(&c), 4 * 3 * 6);
    c.hi[2] = 0;
    assert_true(ein_box_empty(&c));
    assert_int_equal(ein_box_volume(&c), 0);
    char buf[64];
    assert_string_equal(ein_box_format(&b, buf, sizeof buf), "[0:4, 0:5, 0:6]");
    assert_string_equal(ein_shape_format(3, shape, buf, sizeof buf), "4, 5, 6");
    assert_string_equal(ein_shape_format(0, shape, buf, sizeof buf), "");
    char small[5];                                /* truncated, terminated */
    assert_string_equal(ein_shape_format(3, shape, small, sizeof small), "4, 5");
    ein_box d = b, e = b, r;
    d.lo[0] = 2;
    e.hi[0] = 2;
    assert_false(ein_box_intersect(&d, &e, &r)); /* touching, not overlapping */
    ein_box r1 = ein_box_of_shape(1, shape);
    assert_false(ein_box_contains(&b, &r1)); /* rank mismatch */
    assert_false(ein_box_intersect(&b, &r1, &r));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_copy_random),
        cmocka_unit_test(test_copy_rank0),
        cmocka_unit_test(test_intersect_contains_random),
        cmocka_unit_test(test_box_misc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
