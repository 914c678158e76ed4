/* common/ein_box.c — see ein_box.h. */
#include "common/ein_box.h"

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
    /* Strides (in elements) of both dense blocks. */
    int64_t sst[EIN_MAX_RANK], dst_st[EIN_MAX_RANK];
    sst[r - 1] = dst_st[r - 1] = 1;
    for (int i = r - 2; i >= 0; i--) {
        sst[i] = sst[i + 1] * (src_box->hi[i + 1] - src_box->lo[i + 1]);
        dst_st[i] = dst_st[i + 1] * (dst_box->hi[i + 1] - dst_box->lo[i + 1]);
    }
    /* Merge the innermost run: copy contiguous rows of the last dimension. */
    size_t run = (size_t)(region->hi[r - 1] - region->lo[r - 1]) * elem;
    int64_t idx[EIN_MAX_RANK];
    for (int i = 0; i < r; i++)
        idx[i] = region->lo[i];
    for (;;) {
        int64_t so = 0, dof = 0;
        for (int i = 0; i < r; i++) {
            so += (idx[i] - src_box->lo[i]) * sst[i];
            dof += (idx[i] - dst_box->lo[i]) * dst_st[i];
        }
        memcpy((char *)dst + dof * (int64_t)elem, (const char *)src + so * (int64_t)elem, run);
        int d = r - 2;
        while (d >= 0) {
            if (++idx[d] < region->hi[d])
                break;
            idx[d] = region->lo[d];
            d--;
        }
        if (d < 0)
            break;
    }
}
