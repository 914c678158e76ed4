/* common/ir/ein_box.c — see ein_box.h. */
#include "common/ir/ein_box.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

ein_box ein_box_of_shape(int rank, const int64_t *shape)
{
    ein_box b;
    memset(&b, 0, sizeof b);
    b.rank = rank;
    for (int i = 0; i < rank; i++)
        b.hi[i] = shape[i];
    return b;
}

int64_t ein_box_volume(const ein_box *b)
{
    int64_t v = 1;
    for (int i = 0; i < b->rank; i++)
        v *= b->hi[i] > b->lo[i] ? b->hi[i] - b->lo[i] : 0;
    return v;
}

int ein_box_equal(const ein_box *a, const ein_box *b)
{
    if (a->rank != b->rank)
        return 0;
    for (int i = 0; i < a->rank; i++)
        if (a->lo[i] != b->lo[i] || a->hi[i] != b->hi[i])
            return 0;
    return 1;
}

int ein_box_empty(const ein_box *b)
{
    for (int i = 0; i < b->rank; i++)
        if (b->hi[i] <= b->lo[i])
            return 1;
    return 0;
}

int ein_box_contains(const ein_box *outer, const ein_box *inner)
{
    if (outer->rank != inner->rank)
        return 0;
    for (int i = 0; i < outer->rank; i++)
        if (inner->lo[i] < outer->lo[i] || inner->hi[i] > outer->hi[i])
            return 0;
    return 1;
}

int ein_box_intersect(const ein_box *a, const ein_box *b, ein_box *out)
{
    ein_box r;
    memset(&r, 0, sizeof r);
    r.rank = a->rank;
    if (a->rank != b->rank)
        return 0;
    for (int i = 0; i < a->rank; i++) {
        r.lo[i] = a->lo[i] > b->lo[i] ? a->lo[i] : b->lo[i];
        r.hi[i] = a->hi[i] < b->hi[i] ? a->hi[i] : b->hi[i];
        if (r.hi[i] <= r.lo[i])
            return 0;
    }
    if (out)
        *out = r;
    return 1;
}

int ein_box_compare(const ein_box *a, const ein_box *b)
{
    if (a->rank != b->rank)
        return a->rank < b->rank ? -1 : 1;
    for (int i = 0; i < a->rank; i++) {
        if (a->lo[i] != b->lo[i])
            return a->lo[i] < b->lo[i] ? -1 : 1;
        if (a->hi[i] != b->hi[i])
            return a->hi[i] < b->hi[i] ? -1 : 1;
    }
    return 0;
}

char *ein_box_format(const ein_box *b, char *buf, size_t len)
{
    size_t n = 0;
    if (len == 0)
        return buf;
    buf[0] = '\0';
    n += (size_t)snprintf(buf + n, len - n, "[");
    for (int i = 0; i < b->rank && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%lld:%lld", i ? ", " : "",
                              (long long)b->lo[i], (long long)b->hi[i]);
    if (n < len)
        snprintf(buf + n, len - n, "]");
    return buf;
}

char *ein_shape_format(int rank, const int64_t *shape, char *buf, size_t len)
{
    size_t n = 0;
    if (len == 0)
        return buf;
    buf[0] = '\0';
    for (int i = 0; i < rank && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    return buf;
}

void ein_box_strides(const ein_box *b, int64_t *st)
{
    if (b->rank == 0)
        return;
    st[b->rank - 1] = 1;
    for (int i = b->rank - 2; i >= 0; i--)
        st[i] = st[i + 1] * (b->hi[i + 1] - b->lo[i + 1]);
}

int ein_box_walk(const ein_box *dst_box, const ein_box *src_box, const ein_box *region,
                 int outer, ein_box_run_fn fn, void *ctx)
{
    int r = region->rank;
    if (ein_box_empty(region))
        return 0;
    /* The callers' contract (ein_box.h): offsets outside a block would
     * read or write another buffer's memory. */
    assert(r >= 0 && r <= EIN_MAX_RANK && outer >= 0 && outer <= r);
    assert(ein_box_contains(dst_box, region) && ein_box_contains(src_box, region));
    int64_t sst[EIN_MAX_RANK], dst_st[EIN_MAX_RANK], idx[EIN_MAX_RANK];
    ein_box_strides(src_box, sst);
    ein_box_strides(dst_box, dst_st);
    for (int i = 0; i < r; i++)
        idx[i] = region->lo[i];
    for (;;) {
        int64_t so = 0, dof = 0;
        for (int i = 0; i < r; i++) {
            so += (idx[i] - src_box->lo[i]) * sst[i];
            dof += (idx[i] - dst_box->lo[i]) * dst_st[i];
        }
        int rc = fn(dof, so, ctx);
        if (rc)
            return rc;
        int d = outer - 1;
        while (d >= 0) {
            if (++idx[d] < region->hi[d])
                break;
            idx[d] = region->lo[d];
            d--;
        }
        if (d < 0)
            return 0;
    }
}

typedef struct copy_ctx {
    char *dst;
    const char *src;
    size_t elem, run;
} copy_ctx;

static int copy_run(int64_t dst_off, int64_t src_off, void *ctx)
{
    copy_ctx *c = ctx;
    memcpy(c->dst + dst_off * (int64_t)c->elem, c->src + src_off * (int64_t)c->elem, c->run);
    return 0;
}

void ein_box_copy(void *dst, const ein_box *dst_box, const void *src,
                  const ein_box *src_box, const ein_box *region, size_t elem)
{
    int r = region->rank;
    if (ein_box_empty(region))
        return;
    if (r == 0) {
        memcpy(dst, src, elem);
        return;
    }
    /* Runs of the last dimension are contiguous in both blocks. */
    copy_ctx c = {.dst = dst, .src = src, .elem = elem,
                  .run = (size_t)(region->hi[r - 1] - region->lo[r - 1]) * elem};
    ein_box_walk(dst_box, src_box, region, r - 1, copy_run, &c);
}

void ein_box_axis_split(const ein_box *b, int axis, int64_t *outer, int64_t *n, int64_t *inner)
{
    assert(axis >= 0 && axis < b->rank);
    int64_t o = 1, i = 1;
    for (int d = 0; d < axis; d++)
        o *= b->hi[d] - b->lo[d];
    for (int d = axis + 1; d < b->rank; d++)
        i *= b->hi[d] - b->lo[d];
    *outer = o;
    *n = b->hi[axis] - b->lo[axis];
    *inner = i;
}
