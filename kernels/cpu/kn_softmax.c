/* kernels/cpu/kn_softmax.c — softmax over one axis of a block.
 *
 * The block is viewed as [outer, n, inner] with n the softmax axis. Each
 * outer slab [n, inner] is loaded into f32 scratch, normalised along n
 * (max-subtracted, in f32) and stored, so out may be x (in place). */
#include "kernels/cpu/kn_internal.h"

#include "common/ir/ein_kernel_rules.h"

#include <math.h>
#include <stdlib.h>

int kn_cpu_softmax(int axis, const kn_block *x, kn_block *out, ein_error *err)
{
    const char *what = "softmax";
    int rc;
    if ((rc = kn_blk_check(what, "x", x, -1, err)) < 0 ||
        (rc = kn_blk_check(what, "out", out, -1, err)) < 0)
        return rc;
    if ((rc = ein_kernel_rules_softmax(axis, &x->box, &out->box, err)) < 0)
        return rc;
    int64_t outer, n, inner;
    ein_box_axis_split(&x->box, axis, &outer, &n, &inner);
    if (outer * n * inner == 0)
        return 0;
    float *s = kn_falloc(what, n * inner + inner, err);
    if (!s)
        return EIN_ENOMEM;
    float *acc = s + n * inner;   /* per-column max, then sum */
    for (int64_t o = 0; o < outer; o++) {
        int64_t off = o * n * inner;
        kn_load(x, off, s, n * inner);
        for (int64_t j = 0; j < inner; j++)
            acc[j] = -INFINITY;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < inner; j++)
                acc[j] = fmaxf(acc[j], s[i * inner + j]);
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < inner; j++)
                s[i * inner + j] = expf(s[i * inner + j] - acc[j]);
        for (int64_t j = 0; j < inner; j++)
            acc[j] = 0.0f;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < inner; j++)
                acc[j] += s[i * inner + j];
        for (int64_t j = 0; j < inner; j++)
            acc[j] = 1.0f / acc[j];
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < inner; j++)
                s[i * inner + j] *= acc[j];
        kn_store(out, off, s, n * inner);
    }
    free(s);
    return 0;
}
