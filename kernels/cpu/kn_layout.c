/* kernels/cpu/kn_layout.c — data movement between boxes: concat, slice,
 * split and merge of attention heads.
 *
 * All of them are region copies (kn_copy_region): same dtype is a memmove
 * per row, different dtypes convert through f32. */
#include "kernels/cpu/kn_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

int kn_cpu_concat(int axis, const int64_t *offsets, const kn_block *ins, int n,
                  kn_block *out, ein_error *err)
{
    const char *what = "concat";
    char b1[256], b2[256];
    int rc;
    if ((rc = kn_blk_check_any(what, "out", out, -1, err)) < 0)
        return rc;
    if (n < 1 || !ins || !offsets)
        return ein_fail(err, EIN_EINVAL, "%s: needs at least one input and its offset, got %d",
                        what, n);
    int r = out->box.rank;
    if (axis < 0 || axis >= r)
        return ein_fail(err, EIN_EINVAL, "%s: axis %d is outside rank %d", what, axis, r);
    for (int i = 0; i < n; i++)
        if (offsets[i] < 0 || (i > 0 && offsets[i] < offsets[i - 1]))
            return ein_fail(err, EIN_EINVAL, "%s: offset %d (%" PRId64 ") is negative or below "
                            "the previous one", what, i, offsets[i]);
    int64_t covered = 0;
    for (int i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "input %d", i);
        if ((rc = kn_blk_check_any(what, name, &ins[i], r, err)) < 0 ||
            (rc = kn_dtype_copyable(what, &ins[i], out, err)) < 0)
            return rc;
        const ein_box *ib = &ins[i].box;
        int64_t extent = i + 1 < n ? offsets[i + 1] - offsets[i] : INT64_MAX;
        if (ib->hi[axis] > ib->lo[axis] && (ib->lo[axis] < 0 || ib->hi[axis] > extent))
            return ein_fail(err, EIN_ESHAPE, "%s: input %d block %s lies outside its extent "
                            "[0:%" PRId64 ") along axis %d", what, i, kn_fmt(ib, b1, sizeof b1),
                            extent, axis);
        /* Input i in out's coordinates; the part inside out's box is copied. */
        ein_box placed = *ib, region;
        placed.lo[axis] += offsets[i];
        placed.hi[axis] += offsets[i];
        if (!ein_box_intersect(&placed, &out->box, &region))
            continue;
        int64_t shift[EIN_MAX_RANK] = {0};
        shift[axis] = -offsets[i];
        kn_copy_region(out, &ins[i], &region, shift);
        covered += ein_box_volume(&region);
    }
    /* Inputs map to disjoint ranges of the axis, so the pieces are disjoint. */
    if (covered != ein_box_volume(&out->box))
        return ein_fail(err, EIN_ESHAPE, "%s: the inputs cover %" PRId64 " of the %" PRId64
                        " elements of out box %s", what, covered, ein_box_volume(&out->box),
                        kn_fmt(&out->box, b2, sizeof b2));
    return 0;
}

int kn_cpu_slice(int axis, int64_t start, const kn_block *x, kn_block *out, ein_error *err)
{
    const char *what = "slice";
    char b1[256], b2[256], b3[256];
    int rc;
    if ((rc = kn_blk_check_any(what, "x", x, -1, err)) < 0 ||
        (rc = kn_blk_check_any(what, "out", out, x->box.rank, err)) < 0 ||
        (rc = kn_dtype_copyable(what, x, out, err)) < 0)
        return rc;
    if (axis < 0 || axis >= x->box.rank)
        return ein_fail(err, EIN_EINVAL, "%s: axis %d is outside rank %d", what, axis,
                        x->box.rank);
    if (start < 0)
        return ein_fail(err, EIN_EINVAL, "%s: start %" PRId64 " is negative", what, start);
    ein_box need = out->box;
    need.lo[axis] += start;
    need.hi[axis] += start;
    if (ein_box_volume(&out->box) > 0 && !ein_box_contains(&x->box, &need))
        return ein_fail(err, EIN_ESHAPE, "%s: x box %s does not contain %s (out box %s shifted "
                        "by %" PRId64 " along axis %d)", what, kn_fmt(&x->box, b1, sizeof b1),
                        kn_fmt(&need, b2, sizeof b2), kn_fmt(&out->box, b3, sizeof b3), start,
                        axis);
    int64_t shift[EIN_MAX_RANK] = {0};
    shift[axis] = start;
    kn_copy_region(out, x, &out->box, shift);
    return 0;
}

/* The [T, H*D] block t and the [H, T, D] block h correspond. */
static int kn_heads_check(const char *what, int64_t D, const kn_block *t, const kn_block *h,
                          ein_error *err)
{
    char b1[256], b2[256];
    int rc;
    if ((rc = kn_blk_check(what, "[T, H*D] block", t, 2, err)) < 0 ||
        (rc = kn_blk_check(what, "[H, T, D] block", h, 3, err)) < 0)
        return rc;
    if (D <= 0)
        return ein_fail(err, EIN_EINVAL, "%s: head_dim %" PRId64 " is not positive", what, D);
    if (t->box.lo[0] != h->box.lo[1] || t->box.hi[0] != h->box.hi[1] || h->box.lo[2] != 0 ||
        h->box.hi[2] != D || t->box.lo[1] != h->box.lo[0] * D || t->box.hi[1] != h->box.hi[0] * D)
        return ein_fail(err, EIN_ESHAPE, "%s: [T, H*D] box %s and [H, T, D] box %s do not "
                        "correspond (head_dim %" PRId64 ")", what, kn_fmt(&t->box, b1, sizeof b1),
                        kn_fmt(&h->box, b2, sizeof b2), D);
    return 0;
}

/* Copy between the two layouts; to_heads: t -> h, else h -> t. Head j,
 * token i is D contiguous elements in both: at (i*H + j)*D in t and at
 * (j*T + i)*D in h. */
static void kn_heads_copy(int64_t D, kn_block *t, kn_block *h, int to_heads)
{
    int64_t T = h->box.hi[1] - h->box.lo[1], H = h->box.hi[0] - h->box.lo[0];
    size_t esz = ein_dtype_size(t->dtype);
    float buf[KN_CHUNK];
    for (int64_t j = 0; j < H; j++)
        for (int64_t i = 0; i < T; i++) {
            int64_t ot = (i * H + j) * D, oh = (j * T + i) * D;
            if (t->dtype == h->dtype) {
                char *pt = (char *)t->data + ot * (int64_t)esz;
                char *ph = (char *)h->data + oh * (int64_t)esz;
                if (to_heads)
                    memcpy(ph, pt, (size_t)D * esz);
                else
                    memcpy(pt, ph, (size_t)D * esz);
                continue;
            }
            for (int64_t c = 0; c < D; c += KN_CHUNK) {
                int64_t m = D - c < KN_CHUNK ? D - c : KN_CHUNK;
                if (to_heads) {
                    kn_load(t, ot + c, buf, m);
                    kn_store(h, oh + c, buf, m);
                } else {
                    kn_load(h, oh + c, buf, m);
                    kn_store(t, ot + c, buf, m);
                }
            }
        }
}

int kn_cpu_split_heads(int64_t head_dim, const kn_block *x, kn_block *out, ein_error *err)
{
    int rc = kn_heads_check("split_heads", head_dim, x, out, err);
    if (rc < 0)
        return rc;
    kn_block t = *x;   /* read only: to_heads copies t -> out */
    kn_heads_copy(head_dim, &t, out, 1);
    return 0;
}

int kn_cpu_merge_heads(int64_t head_dim, const kn_block *x, kn_block *out, ein_error *err)
{
    int rc = kn_heads_check("merge_heads", head_dim, out, x, err);
    if (rc < 0)
        return rc;
    kn_block h = *x;   /* read only: h -> out */
    kn_heads_copy(head_dim, out, &h, 0);
    return 0;
}
