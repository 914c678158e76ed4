/* kernels/cpu/kn_norm.c — RMSNorm and LayerNorm over the last axis.
 *
 * Rows of the last axis are loaded into f32 scratch one at a time (so out
 * may be x), reduced in double (a row can hold 8K+ elements) and written
 * back. The weight and bias are rank-1 blocks over the whole axis [0, d),
 * and x's block must hold that whole axis too: a row statistic over part of
 * a row would be wrong, not partial. */
#include "kernels/cpu/kn_internal.h"
#include "kernels/cpu/kn_vexp.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Sums in double over 8 lanes (GCC vector extensions, no target flags):
 * one running double sum is a chain of dependent adds that no compiler may
 * reorder, which made rmsnorm 1.3% of a 100M-parameter LLaMA's work on CPU
 * devices (tools/bench-model --profile). sum(s[i] - c) and sum((s[i] - c)^2). */
typedef float kn_norm_v4f __attribute__((vector_size(16)));
typedef double kn_norm_v4d __attribute__((vector_size(32)));

KN_CLONES static void kn_norm_sums(const float *s, int64_t d, double c, double *sum, double *sq)
{
    kn_norm_v4d a0 = {0}, a1 = {0}, q0 = {0}, q1 = {0};
    const kn_norm_v4d cv = {c, c, c, c};
    int64_t i = 0;
    for (; i + 8 <= d; i += 8) {
        kn_norm_v4f x0, x1;
        memcpy(&x0, s + i, sizeof x0);
        memcpy(&x1, s + i + 4, sizeof x1);
        kn_norm_v4d y0 = __builtin_convertvector(x0, kn_norm_v4d) - cv;
        kn_norm_v4d y1 = __builtin_convertvector(x1, kn_norm_v4d) - cv;
        a0 += y0;
        a1 += y1;
        q0 += y0 * y0;
        q1 += y1 * y1;
    }
    a0 += a1;
    q0 += q1;
    double su = (a0[0] + a0[1]) + (a0[2] + a0[3]), sqs = (q0[0] + q0[1]) + (q0[2] + q0[3]);
    for (; i < d; i++) {
        double y = (double)s[i] - c;
        su += y;
        sqs += y * y;
    }
    *sum = su;
    *sq = sqs;
}

static int kn_norm_check(const char *what, const kn_block *x, const kn_block *w,
                         const kn_block *b, const kn_block *out, ein_error *err)
{
    char b1[256], b2[256];
    int rc;
    if ((rc = kn_blk_check(what, "x", x, -1, err)) < 0 ||
        (rc = kn_blk_check(what, "weight", w, 1, err)) < 0 ||
        (b && (rc = kn_blk_check(what, "bias", b, 1, err)) < 0) ||
        (rc = kn_blk_check(what, "out", out, -1, err)) < 0)
        return rc;
    if (x->box.rank < 1)
        return ein_fail(err, EIN_ESHAPE, "%s: x has rank 0 (no last axis)", what);
    if (!ein_box_equal(&x->box, &out->box))
        return ein_fail(err, EIN_ESHAPE, "%s: out box %s differs from x box %s", what,
                        kn_fmt(&out->box, b1, sizeof b1), kn_fmt(&x->box, b2, sizeof b2));
    int r = x->box.rank;
    if (w->box.lo[0] != 0)
        return ein_fail(err, EIN_ESHAPE, "%s: weight block %s is not the whole axis [0, d)",
                        what, kn_fmt(&w->box, b1, sizeof b1));
    if (x->box.lo[r - 1] != 0 || x->box.hi[r - 1] != w->box.hi[0])
        return ein_fail(err, EIN_ESHAPE, "%s: x block %s does not hold the whole last axis "
                        "[0:%" PRId64 ") of the weight", what, kn_fmt(&x->box, b1, sizeof b1),
                        w->box.hi[0]);
    if (b && !ein_box_equal(&b->box, &w->box))
        return ein_fail(err, EIN_ESHAPE, "%s: bias box %s differs from weight box %s", what,
                        kn_fmt(&b->box, b1, sizeof b1), kn_fmt(&w->box, b2, sizeof b2));
    return 0;
}

static int kn_norm(const char *what, int layer, double eps, const kn_block *x,
                   const kn_block *w, const kn_block *b, kn_block *out, ein_error *err)
{
    int rc = kn_norm_check(what, x, w, b, out, err);
    if (rc < 0)
        return rc;
    int64_t d = w->box.hi[0];
    int64_t rows = d > 0 ? ein_box_volume(&x->box) / d : 0;
    if (rows == 0)
        return 0;
    float *s = kn_falloc(what, 3 * d, err);
    if (!s)
        return EIN_ENOMEM;
    float *wf = s + d, *bf = s + 2 * d;
    kn_load(w, 0, wf, d);
    if (b)
        kn_load(b, 0, bf, d);
    for (int64_t r = 0; r < rows; r++) {
        kn_load(x, r * d, s, d);
        if (layer) {
            double sum, sq;
            kn_norm_sums(s, d, 0.0, &sum, &sq);
            double mean = sum / (double)d;
            kn_norm_sums(s, d, mean, &sum, &sq);
            float rstd = (float)(1.0 / sqrt(sq / (double)d + eps)), m = (float)mean;
            for (int64_t i = 0; i < d; i++)
                s[i] = (s[i] - m) * rstd * wf[i] + (b ? bf[i] : 0.0f);
        } else {
            double sum, sq;
            kn_norm_sums(s, d, 0.0, &sum, &sq);
            float rstd = (float)(1.0 / sqrt(sq / (double)d + eps));
            for (int64_t i = 0; i < d; i++)
                s[i] = s[i] * rstd * wf[i];
        }
        kn_store(out, r * d, s, d);
    }
    free(s);
    return 0;
}

int kn_cpu_rmsnorm(double eps, const kn_block *x, const kn_block *w, kn_block *out,
                   ein_error *err)
{
    return kn_norm("rmsnorm", 0, eps, x, w, NULL, out, err);
}

int kn_cpu_layernorm(double eps, const kn_block *x, const kn_block *w, const kn_block *b,
                     kn_block *out, ein_error *err)
{
    if (!b)
        return ein_fail(err, EIN_EINVAL, "layernorm: missing bias");
    return kn_norm("layernorm", 1, eps, x, w, b, out, err);
}

/* One row at a time: h = a + b (the registry's ADD formula, as
 * kn_cpu_binary computes it) stored into out's first half, read back (so
 * the norm sees h rounded to out's dtype, as the unfused rmsnorm reads it)
 * and normalised as kn_norm does into the second half. */
int kn_cpu_add_rmsnorm(double eps, const kn_block *a, const kn_block *b, const kn_block *w,
                       kn_block *out, ein_error *err)
{
    const char *what = "add_rmsnorm";
    char b1[256], b2[256];
    int rc;
    if ((rc = kn_blk_check(what, "a", a, -1, err)) < 0 ||
        (rc = kn_blk_check(what, "b", b, -1, err)) < 0 ||
        (rc = kn_blk_check(what, "out", out, -1, err)) < 0)
        return rc;
    if (!ein_box_equal(&a->box, &b->box))
        return ein_fail(err, EIN_ESHAPE, "%s: b box %s differs from a box %s", what,
                        kn_fmt(&b->box, b1, sizeof b1), kn_fmt(&a->box, b2, sizeof b2));
    int r = a->box.rank;
    int ok = r >= 1 && out->box.rank == r + 1 && out->box.lo[0] == 0 && out->box.hi[0] == 2;
    for (int i = 0; ok && i < r; i++)
        ok = out->box.lo[i + 1] == a->box.lo[i] && out->box.hi[i + 1] == a->box.hi[i];
    if (!ok)
        return ein_fail(err, EIN_ESHAPE, "%s: out box %s is not [0, 2) x the a box %s", what,
                        kn_fmt(&out->box, b1, sizeof b1), kn_fmt(&a->box, b2, sizeof b2));
    /* the norm's own rules on a's box (kn_norm_check wants out's box == x's) */
    kn_block half = {.data = out->data, .dtype = out->dtype, .box = a->box};
    if ((rc = kn_norm_check(what, a, w, NULL, &half, err)) < 0)
        return rc;
    int64_t d = w->box.hi[0];
    int64_t n = ein_box_volume(&a->box), rows = d > 0 ? n / d : 0;
    if (rows == 0)
        return 0;
    float *s = kn_falloc(what, 3 * d, err);
    if (!s)
        return EIN_ENOMEM;
    float *wf = s + d, *t = s + 2 * d;
    kn_load(w, 0, wf, d);
    if (a->dtype == EIN_F32 && b->dtype == EIN_F32 && out->dtype == EIN_F32) {
        /* no copies: the sum straight into out's first half, the norm
         * from there into its second */
        const float *af = a->data, *bf = b->data;
        float *hf = out->data, *nf = hf + n;
        for (int64_t row = 0; row < rows; row++) {
            const float *ar = af + row * d, *br = bf + row * d;
            float *hr = hf + row * d, *nr = nf + row * d;
            for (int64_t i = 0; i < d; i++)
                hr[i] = ar[i] + br[i];
            double sum, sq;
            kn_norm_sums(hr, d, 0.0, &sum, &sq);
            float rstd = (float)(1.0 / sqrt(sq / (double)d + eps));
            for (int64_t i = 0; i < d; i++)
                nr[i] = hr[i] * rstd * wf[i];
        }
        free(s);
        return 0;
    }
    for (int64_t row = 0; row < rows; row++) {
        kn_load(a, row * d, s, d);
        kn_load(b, row * d, t, d);
        for (int64_t i = 0; i < d; i++)
            s[i] = s[i] + t[i];
        kn_store(out, row * d, s, d);
        if (out->dtype != EIN_F32)
            kn_load(out, row * d, s, d);
        double sum, sq;
        kn_norm_sums(s, d, 0.0, &sum, &sq);
        float rstd = (float)(1.0 / sqrt(sq / (double)d + eps));
        for (int64_t i = 0; i < d; i++)
            s[i] = s[i] * rstd * wf[i];
        kn_store(out, n + row * d, s, d);
    }
    free(s);
    return 0;
}
