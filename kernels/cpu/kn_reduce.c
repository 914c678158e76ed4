/* kernels/cpu/kn_reduce.c — sum / max over a set of axes.
 *
 * x is walked once in row-major order, each element folded into the output
 * element it maps to (stride 0 along reduced axes), in an f32 accumulator
 * the size of the output. */
#include "kernels/cpu/kn_internal.h"

#include <math.h>
#include <stdlib.h>

int kn_cpu_reduce(ein_agg op, uint32_t axes, const kn_block *x, kn_block *out,
                  ein_error *err)
{
    const char *what = op == EIN_AGG_MAX ? "reduce max" : "reduce sum";
    char b1[256], b2[256];
    int rc;
    if (op != EIN_AGG_SUM && op != EIN_AGG_MAX)
        return ein_fail(err, EIN_EINVAL, "reduce: op %d is neither sum nor max", (int)op);
    if ((rc = kn_blk_check(what, "x", x, -1, err)) < 0 ||
        (rc = kn_blk_check(what, "out", out, -1, err)) < 0)
        return rc;
    int r = x->box.rank;
    if (r < 32 && (axes >> r))
        return ein_fail(err, EIN_EINVAL, "%s: axes mask 0x%x names axes beyond rank %d", what,
                        (unsigned)axes, r);
    ein_box want = {0};
    for (int d = 0; d < r; d++)
        if (!(axes & (1u << d))) {
            want.lo[want.rank] = x->box.lo[d];
            want.hi[want.rank] = x->box.hi[d];
            want.rank++;
        }
    if (!ein_box_equal(&want, &out->box))
        return ein_fail(err, EIN_ESHAPE, "%s: out box %s is not x's box %s without axes 0x%x",
                        what, kn_fmt(&out->box, b1, sizeof b1), kn_fmt(&x->box, b2, sizeof b2),
                        (unsigned)axes);
    int64_t nout = ein_box_volume(&out->box);
    if (nout == 0)
        return 0;
    float *acc = kn_falloc(what, nout, err);
    if (!acc)
        return EIN_ENOMEM;
    float init = op == EIN_AGG_MAX ? -INFINITY : 0.0f;
    for (int64_t i = 0; i < nout; i++)
        acc[i] = init;
    int64_t nx = ein_box_volume(&x->box);
    if (nx > 0) {
        const float *xf;
        float *tmp;
        if ((rc = kn_f32_view(what, x, &xf, &tmp, err)) < 0) {
            free(acc);
            return rc;
        }
        int64_t so[EIN_MAX_RANK], sout[EIN_MAX_RANK], ext[EIN_MAX_RANK];
        kn_box_strides(&out->box, sout);
        for (int d = 0, od = 0; d < r; d++) {
            ext[d] = x->box.hi[d] - x->box.lo[d];
            so[d] = (axes & (1u << d)) ? 0 : sout[od++];
        }
        int64_t n = r > 0 ? ext[r - 1] : 1, inc = r > 0 ? so[r - 1] : 0;
        int64_t idx[EIN_MAX_RANK] = {0}, oo = 0;
        const float *p = xf;
        for (;;) {
            float *y = acc + oo;
            if (op == EIN_AGG_SUM) {
                if (inc == 0) {
                    float s = 0.0f;
                    for (int64_t i = 0; i < n; i++)
                        s += p[i];
                    *y += s;
                } else {
                    for (int64_t i = 0; i < n; i++)
                        y[i * inc] += p[i];
                }
            } else {
                for (int64_t i = 0; i < n; i++)
                    y[i * inc] = fmaxf(y[i * inc], p[i]);
            }
            p += n;
            int d = r - 2;
            for (; d >= 0; d--) {
                if (++idx[d] < ext[d]) {
                    oo += so[d];
                    break;
                }
                oo -= so[d] * (ext[d] - 1);
                idx[d] = 0;
            }
            if (d < 0)
                break;
        }
        free(tmp);
    }
    kn_store(out, 0, acc, nout);
    free(acc);
    return 0;
}
