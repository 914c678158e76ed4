/* kernels/cpu/kn_util.c — see kn_internal.h. */
#include "kernels/cpu/kn_internal.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

const char *kn_fmt(const ein_box *b, char *buf, size_t len)
{
    return ein_box_format(b, buf, len);
}

int kn_blk_check(const char *what, const char *name, const kn_block *k, int rank,
                 ein_error *err)
{
    int rc = kn_blk_check_any(what, name, k, rank, err);
    if (rc == 0 && !ein_dtype_is_float((int)k->dtype))
        return ein_fail(err, EIN_EINVAL, "%s: %s is %s; this kernel computes on %s only", what,
                        name, ein_dtype_name(k->dtype), ein_dtype_float_names());
    return rc;
}

int kn_blk_check_any(const char *what, const char *name, const kn_block *k, int rank,
                     ein_error *err)
{
    if (!k)
        return ein_fail(err, EIN_EINVAL, "%s: missing %s", what, name);
    if (!ein_dtype_valid((int)k->dtype))
        return ein_fail(err, EIN_EINVAL, "%s: %s has invalid dtype %d", what, name,
                        (int)k->dtype);
    if (k->box.rank < 0 || k->box.rank > EIN_MAX_RANK)
        return ein_fail(err, EIN_ESHAPE, "%s: %s has rank %d", what, name, k->box.rank);
    if (rank >= 0 && k->box.rank != rank)
        return ein_fail(err, EIN_ESHAPE, "%s: %s has rank %d, expected %d", what, name,
                        k->box.rank, rank);
    for (int d = 0; d < k->box.rank; d++)
        if (k->box.hi[d] < k->box.lo[d])
            return ein_fail(err, EIN_ESHAPE, "%s: %s has the inverted interval [%" PRId64
                            ":%" PRId64 ") in dimension %d", what, name, k->box.lo[d],
                            k->box.hi[d], d);
    if (!k->data && ein_box_volume(&k->box) > 0)
        return ein_fail(err, EIN_EINVAL, "%s: %s has no data", what, name);
    return 0;
}

int kn_dtype_copyable(const char *what, const kn_block *src, const kn_block *dst,
                      ein_error *err)
{
    if (src->dtype == dst->dtype ||
        (ein_dtype_is_float((int)src->dtype) && ein_dtype_is_float((int)dst->dtype)))
        return 0;
    return ein_fail(err, EIN_EINVAL, "%s: cannot copy %s into %s (integers are never converted)",
                    what, ein_dtype_name(src->dtype), ein_dtype_name(dst->dtype));
}

void kn_box_strides(const ein_box *b, int64_t *st)
{
    int64_t s = 1;
    for (int d = b->rank - 1; d >= 0; d--) {
        st[d] = s;
        s *= b->hi[d] - b->lo[d];
    }
}

void kn_load(const kn_block *k, int64_t off, float *dst, int64_t n)
{
    const char *p = (const char *)k->data + off * (int64_t)ein_dtype_size(k->dtype);
    if (k->dtype == EIN_F32)
        memmove(dst, p, (size_t)n * sizeof *dst);
    else
        ein_dtype_to_f32(k->dtype, p, dst, (size_t)n);
}

void kn_store(kn_block *k, int64_t off, const float *src, int64_t n)
{
    char *p = (char *)k->data + off * (int64_t)ein_dtype_size(k->dtype);
    if (k->dtype == EIN_F32)
        memmove(p, src, (size_t)n * sizeof *src);
    else
        ein_dtype_from_f32(k->dtype, src, p, (size_t)n);
}

float *kn_falloc(const char *what, int64_t n, ein_error *err)
{
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
    if (!p)
        ein_fail(err, EIN_ENOMEM, "%s: out of memory for %" PRId64 " floats of scratch", what,
                 n);
    return p;
}

int kn_f32_view(const char *what, const kn_block *k, const float **out, float **tmp,
                ein_error *err)
{
    *tmp = NULL;
    if (k->dtype == EIN_F32) {
        *out = k->data;
        return 0;
    }
    int64_t n = ein_box_volume(&k->box);
    if (!(*tmp = kn_falloc(what, n, err)))
        return EIN_ENOMEM;
    if (n > 0)
        ein_dtype_to_f32(k->dtype, k->data, *tmp, (size_t)n);
    *out = *tmp;
    return 0;
}

void kn_copy_region(kn_block *dst, const kn_block *src, const ein_box *region,
                    const int64_t *shift)
{
    int r = region->rank;
    if (ein_box_volume(region) <= 0)
        return;
    int64_t sd[EIN_MAX_RANK], ss[EIN_MAX_RANK], idx[EIN_MAX_RANK];
    kn_box_strides(&dst->box, sd);
    kn_box_strides(&src->box, ss);
    int64_t od = 0, os = 0;
    for (int d = 0; d < r; d++) {
        int64_t sh = shift ? shift[d] : 0;
        od += (region->lo[d] - dst->box.lo[d]) * sd[d];
        os += (region->lo[d] + sh - src->box.lo[d]) * ss[d];
        idx[d] = region->lo[d];
    }
    int64_t n = r > 0 ? region->hi[r - 1] - region->lo[r - 1] : 1;
    size_t esz = ein_dtype_size(dst->dtype);
    int same = dst->dtype == src->dtype;
    for (;;) {
        if (same) {
            memmove((char *)dst->data + od * (int64_t)esz,
                    (const char *)src->data + os * (int64_t)esz, (size_t)n * esz);
        } else {
            float buf[KN_CHUNK];
            for (int64_t i = 0; i < n; i += KN_CHUNK) {
                int64_t c = n - i < KN_CHUNK ? n - i : KN_CHUNK;
                kn_load(src, os + i, buf, c);
                kn_store(dst, od + i, buf, c);
            }
        }
        int d = r - 2;
        for (; d >= 0; d--) {
            if (++idx[d] < region->hi[d]) {
                od += sd[d];
                os += ss[d];
                break;
            }
            od -= sd[d] * (region->hi[d] - 1 - region->lo[d]);
            os -= ss[d] * (region->hi[d] - 1 - region->lo[d]);
            idx[d] = region->lo[d];
        }
        if (d < 0)
            return;
    }
}

int kn_seq_check(const char *what, const int64_t *ends, int n, ein_error *err)
{
    if (n < 0 || (n > 0 && !ends))
        return ein_fail(err, EIN_EINVAL, "%s: %d sequence ends but no list", what, n);
    for (int i = 0; i < n; i++)
        if (ends[i] <= (i > 0 ? ends[i - 1] : 0))
            return ein_fail(err, EIN_EINVAL, "%s: sequence end %d (%" PRId64 ") is not after "
                            "the previous one (%" PRId64 ")", what, i, ends[i],
                            i > 0 ? ends[i - 1] : 0);
    return 0;
}

int64_t kn_seq_start(const int64_t *ends, int n, int64_t t)
{
    if (t < 0 || (n > 0 && t >= ends[n - 1]))
        return -1;
    int lo = 0, hi = n;   /* first end > t is in [lo, hi] */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (ends[mid] <= t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo > 0 ? ends[lo - 1] : 0;
}
