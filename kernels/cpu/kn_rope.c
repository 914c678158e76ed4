/* kernels/cpu/kn_rope.c — rotary position embedding on a [tokens,
 * H*head_dim] block: interleaved pairs (Meta's LLaMA) or halves (Hugging
 * Face's rotate_half).
 *
 * Positions come from the block's global token bounds and the sequence
 * ends, so any token interval of a packed batch rotates exactly as it would
 * inside the whole tensor. Angles are computed in double: p * theta^(-2i/D)
 * reaches 1e5 radians, where f32 would lose the phase. One token row at a
 * time through f32 scratch, so out may be x. */
#include "kernels/cpu/kn_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>

int kn_cpu_rope(int64_t head_dim, double theta, const int64_t *seq_ends, int nseq,
                const kn_block *x, kn_block *out, ein_error *err)
{
    return kn_cpu_rope_style(EIN_ROPE_INTERLEAVED, head_dim, theta, seq_ends, nseq, x, out, err);
}

/* The angles p * freq[i] of one row, as cos and sin in double: computed
 * (`exact`), or from those of position p - 1 by one rotation by freq[i]
 * (cf, sf: its cos and sin), which costs no trigonometry. The rotations
 * drift by about 1e-16 each; rope_run computes exactly at every sequence
 * start and every KN_ROPE_EXACT rows, far below f32's 6e-8. The sin and
 * cos of the whole position were 1.3% of a 100M-parameter LLaMA's work on
 * CPU devices (tools/bench-model --profile), nearly all of rope's. */
#define KN_ROPE_EXACT 64
static void rope_angles(int exact, int64_t half, double p, const double *freq, const double *cf,
                        const double *sf, double *cd, double *sd)
{
    for (int64_t i = 0; i < half; i++) {
        if (exact) {
            sd[i] = sin(p * freq[i]);
            cd[i] = cos(p * freq[i]);
        } else {
            double c = cd[i] * cf[i] - sd[i] * sf[i];
            sd[i] = sd[i] * cf[i] + cd[i] * sf[i];
            cd[i] = c;
        }
    }
}

/* Rotate one token row: x's row at element offset `off` (w values)
 * through the f32 scratch s into out, by the angles' cos and sin cs, sn. */
static void rope_row(int style, int64_t head_dim, const float *cs, const float *sn,
                     const kn_block *x, kn_block *out, int64_t off, int64_t w, float *s)
{
    int64_t half = head_dim / 2;
    kn_load(x, off, s, w);
    for (int64_t h = 0; h < w && style == EIN_ROPE_HALF; h += head_dim) {
        float *v = s + h;
        for (int64_t i = 0; i < half; i++) {
            float x0 = v[i], x1 = v[i + half];
            v[i] = x0 * cs[i] - x1 * sn[i];
            v[i + half] = x1 * cs[i] + x0 * sn[i];
        }
    }
    for (int64_t h = 0; h < w && style == EIN_ROPE_INTERLEAVED; h += head_dim) {
        float *v = s + h;
        for (int64_t i = 0; i < half; i++) {
            float x0 = v[2 * i], x1 = v[2 * i + 1];
            v[2 * i] = x0 * cs[i] - x1 * sn[i];
            v[2 * i + 1] = x0 * sn[i] + x1 * cs[i];
        }
    }
    kn_store(out, off, s, w);
}

/* Positions from the sequence ends, or (pos non-NULL, checked by the
 * caller) pos[t]. */
static int rope_run(const char *what, int style, int64_t head_dim, double theta,
                    const ein_rope_scaling *sc, const int64_t *seq_ends, int nseq,
                    const kn_block *pos, const kn_block *x, kn_block *out, ein_error *err)
{
    char b1[256], b2[256];
    int rc;
    if ((rc = kn_blk_check(what, "x", x, 2, err)) < 0 ||
        (rc = kn_blk_check(what, "out", out, 2, err)) < 0 ||
        (rc = kn_seq_check(what, seq_ends, nseq, err)) < 0)
        return rc;
    if (head_dim <= 0 || head_dim % 2)
        return ein_fail(err, EIN_EINVAL, "%s: head_dim %" PRId64 " is not a positive even number",
                        what, head_dim);
    if (style != EIN_ROPE_INTERLEAVED && style != EIN_ROPE_HALF)
        return ein_fail(err, EIN_EINVAL, "%s: style %d is not interleaved or half", what, style);
    if (!(theta > 0.0))
        return ein_fail(err, EIN_EINVAL, "%s: theta %g is not positive", what, theta);
    if (sc && ein_rope_scaling_invalid(sc))
        return ein_fail(err, EIN_EINVAL, "%s: scaling: %s", what, ein_rope_scaling_invalid(sc));
    if (!ein_box_equal(&x->box, &out->box))
        return ein_fail(err, EIN_ESHAPE, "%s: out box %s differs from x box %s", what,
                        kn_fmt(&out->box, b1, sizeof b1), kn_fmt(&x->box, b2, sizeof b2));
    int64_t t0 = x->box.lo[0], t1 = x->box.hi[0], c0 = x->box.lo[1], c1 = x->box.hi[1];
    if (c0 % head_dim || c1 % head_dim)
        return ein_fail(err, EIN_ESHAPE, "%s: hidden interval [%" PRId64 ":%" PRId64 ") is not "
                        "at head boundaries (head_dim %" PRId64 ")", what, c0, c1, head_dim);
    if (!pos && t1 > t0 && (kn_seq_start(seq_ends, nseq, t0) < 0 || kn_seq_start(seq_ends, nseq, t1 - 1) < 0))
        return ein_fail(err, EIN_ESHAPE, "%s: tokens [%" PRId64 ":%" PRId64 ") are outside the "
                        "sequences (last end %" PRId64 ")", what, t0, t1,
                        nseq > 0 ? seq_ends[nseq - 1] : 0);
    int64_t w = c1 - c0, half = head_dim / 2;
    if (w == 0 || t1 == t0)
        return 0;
    float *s = kn_falloc(what, w + 2 * half, err);
    double *freq = malloc((size_t)half * 5 * sizeof *freq);
    if (!s || !freq) {
        free(s);
        free(freq);
        return s ? ein_fail(err, EIN_ENOMEM, "%s: out of memory", what) : EIN_ENOMEM;
    }
    float *cs = s + w, *sn = cs + half;
    double *cf = freq + half, *sf = cf + half, *cd = sf + half, *sd = cd + half;
    /* cf, sf: the rotation by one position, for the rows after the first
     * (a decode step's block has one row: no trigonometry for them). */
    for (int64_t i = 0; i < half; i++) {
        freq[i] = ein_rope_freq(theta, i, head_dim, sc);
        cf[i] = t1 - t0 > 1 ? cos(freq[i]) : 1.0;
        sf[i] = t1 - t0 > 1 ? sin(freq[i]) : 0.0;
    }
    double prev = -2.0;
    int64_t since = 0;
    for (int64_t t = t0; t < t1; t++) {
        double p = pos ? (double)kn_int_at(pos, t - t0)
                       : (double)(t - kn_seq_start(seq_ends, nseq, t));
        int exact = p != prev + 1.0 || since >= KN_ROPE_EXACT;
        rope_angles(exact, half, p, freq, cf, sf, cd, sd);
        since = exact ? 1 : since + 1;
        prev = p;
        for (int64_t i = 0; i < half; i++) {
            cs[i] = (float)cd[i];
            sn[i] = (float)sd[i];
        }
        rope_row(style, head_dim, cs, sn, x, out, (t - t0) * w, w, s);
    }
    free(s);
    free(freq);
    return 0;
}

int kn_cpu_rope_style(int style, int64_t head_dim, double theta, const int64_t *seq_ends,
                      int nseq, const kn_block *x, kn_block *out, ein_error *err)
{
    return kn_cpu_rope_scaled(style, head_dim, theta, NULL, seq_ends, nseq, x, out, err);
}

int kn_cpu_rope_scaled(int style, int64_t head_dim, double theta, const ein_rope_scaling *sc,
                       const int64_t *seq_ends, int nseq, const kn_block *x, kn_block *out,
                       ein_error *err)
{
    return rope_run("rope", style, head_dim, theta, sc, seq_ends, nseq, NULL, x, out, err);
}

int kn_cpu_rope_at(int style, int64_t head_dim, double theta, const kn_block *x,
                   const kn_block *pos, kn_block *out, ein_error *err)
{
    return kn_cpu_rope_at_scaled(style, head_dim, theta, NULL, x, pos, out, err);
}

int kn_cpu_rope_at_scaled(int style, int64_t head_dim, double theta, const ein_rope_scaling *sc,
                          const kn_block *x, const kn_block *pos, kn_block *out, ein_error *err)
{
    int rc = kn_blk_check("rope_at", "x", x, 2, err);
    if (rc < 0 || (rc = kn_pos_check("rope_at", pos, x->box.lo[0], x->box.hi[0], err)) < 0)
        return rc;
    for (int64_t t = 0; t < x->box.hi[0] - x->box.lo[0]; t++)
        if (kn_int_at(pos, t) < 0)
            return ein_fail(err, EIN_EINVAL, "rope_at: token %" PRId64 " has the negative "
                            "position %" PRId64, x->box.lo[0] + t, kn_int_at(pos, t));
    return rope_run("rope_at", style, head_dim, theta, sc, NULL, 0, pos, x, out, err);
}
