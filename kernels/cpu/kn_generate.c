/* kernels/cpu/kn_generate.c — the kernels of generation (issue 25): a
 * key/value cache written at run-time positions, and one new token per
 * sequence attending to the cache. The block rules are stated in
 * kernels/kn_cpu.h. Every position is checked before anything is written. */
#include "kernels/cpu/kn_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int kn_pos_check(const char *what, const kn_block *pos, int64_t lo, int64_t hi, ein_error *err)
{
    char b1[256];
    int rc = kn_blk_check_any(what, "pos", pos, 1, err);
    if (rc < 0)
        return rc;
    if (pos->dtype != EIN_I32 && pos->dtype != EIN_I64)
        return ein_fail(err, EIN_EINVAL, "%s: positions are %s; expected i32 or i64", what,
                        ein_dtype_name(pos->dtype));
    if (pos->box.lo[0] != lo || pos->box.hi[0] != hi)
        return ein_fail(err, EIN_ESHAPE, "%s: positions %s are not the block's [%" PRId64 ":%"
                        PRId64 ")", what, kn_fmt(&pos->box, b1, sizeof b1), lo, hi);
    return 0;
}

int kn_cpu_cache_write(int64_t rows, const kn_block *state, const kn_block *x,
                       const kn_block *pos, kn_block *out, ein_error *err)
{
    const char *what = "cache_write";
    char b1[256], b2[256];
    int rc;
    if ((rc = kn_blk_check(what, "state", state, 4, err)) < 0 ||
        (rc = kn_blk_check(what, "x", x, 3, err)) < 0 ||
        (rc = kn_blk_check(what, "out", out, 4, err)) < 0)
        return rc;
    const ein_box *ob = &out->box;
    if (!ein_box_equal(&state->box, ob) || state->dtype != out->dtype)
        return ein_fail(err, EIN_ESHAPE, "%s: out %s %s differs from state %s %s", what,
                        ein_dtype_name(out->dtype), kn_fmt(ob, b1, sizeof b1),
                        ein_dtype_name(state->dtype), kn_fmt(&state->box, b2, sizeof b2));
    int64_t nh = ob->hi[0] - ob->lo[0], nb = ob->hi[1] - ob->lo[1];
    int64_t ns = ob->hi[2] - ob->lo[2], d = ob->hi[3] - ob->lo[3];
    int64_t nt = x->box.hi[1] - x->box.lo[1], c = nb > 0 ? nt / nb : 0; /* tokens per sequence */
    if (x->box.lo[0] != ob->lo[0] || x->box.hi[0] != ob->hi[0] || c < 1 || nt != c * nb ||
        x->box.lo[1] != c * ob->lo[1] || x->box.lo[2] != ob->lo[3] || x->box.hi[2] != ob->hi[3])
        return ein_fail(err, EIN_ESHAPE, "%s: x %s is not the state's heads, sequences (times "
                        "the tokens per sequence) and dim (%s)", what,
                        kn_fmt(&x->box, b1, sizeof b1), kn_fmt(ob, b2, sizeof b2));
    if ((rc = kn_pos_check(what, pos, ob->lo[1], ob->hi[1], err)) < 0)
        return rc;
    for (int64_t b = 0; b < nb; b++) {
        int64_t p = kn_int_at(pos, b);
        if (p < 0 || p > rows - c)
            return ein_fail(err, EIN_EINVAL, "%s: sequence %" PRId64 " is at position %" PRId64
                            "%s, outside the cache [0, %" PRId64 ")", what, ob->lo[1] + b, p,
                            c > 1 ? " (the first of a chunk of several tokens)" : "", rows);
    }
    if (out->data != state->data && ein_box_volume(ob) > 0)
        memcpy(out->data, state->data, (size_t)ein_box_volume(ob) * ein_dtype_size(out->dtype));
    float buf[KN_CHUNK];
    for (int64_t bt = 0; bt < nt; bt++) {
        int64_t b = bt / c, p = kn_int_at(pos, b) + bt % c;
        if (p < ob->lo[2] || p >= ob->hi[2])
            continue;
        for (int64_t h = 0; h < nh; h++) {
            int64_t xo = (h * nt + bt) * d, oo = ((h * nb + b) * ns + (p - ob->lo[2])) * d;
            for (int64_t j = 0; j < d; j += KN_CHUNK) {
                int64_t c = d - j < KN_CHUNK ? d - j : KN_CHUNK;
                kn_load(x, xo + j, buf, c);
                kn_store(out, oo + j, buf, c);
            }
        }
    }
    return 0;
}

int kn_cpu_decode_attention(int64_t group, int partial, const kn_block *q, const kn_block *k,
                            const kn_block *v, const kn_block *pos, kn_block *out,
                            ein_error *err)
{
    return kn_cpu_decode_attention_window(group, 0, partial, q, k, v, pos, out, err);
}

int kn_cpu_decode_attention_window(int64_t group, int64_t window, int partial, const kn_block *q,
                                   const kn_block *k, const kn_block *v, const kn_block *pos,
                                   kn_block *out, ein_error *err)
{
    const char *what = partial ? "decode_attention_partial" : "decode_attention";
    char b1[256], b2[256];
    int rc;
    if ((rc = kn_blk_check(what, "q", q, 3, err)) < 0 ||
        (rc = kn_blk_check(what, "k", k, 4, err)) < 0 ||
        (rc = kn_blk_check(what, "v", v, 4, err)) < 0 ||
        (rc = kn_blk_check(what, "out", out, 3, err)) < 0)
        return rc;
    if (group < 1)
        return ein_fail(err, EIN_EINVAL, "%s: group %" PRId64 " < 1", what, group);
    if (window < 0)
        return ein_fail(err, EIN_EINVAL, "%s: window %" PRId64 " is negative (0 = no window)",
                        what, window);
    const ein_box *qb = &q->box, *kb = &k->box;
    int64_t d = qb->hi[2] - qb->lo[2];
    int64_t nb = kb->hi[1] - kb->lo[1], nt = qb->hi[1] - qb->lo[1];
    int64_t c = nb > 0 ? nt / nb : 0;   /* query tokens per sequence */
    if (!ein_box_equal(kb, &v->box) || qb->lo[0] != group * kb->lo[0] ||
        qb->hi[0] != group * kb->hi[0] || c < 1 || nt != c * nb || qb->lo[1] != c * kb->lo[1] ||
        qb->lo[2] != 0 || kb->lo[3] != 0 || kb->hi[3] != d)
        return ein_fail(err, EIN_ESHAPE, "%s: q %s and k %s (group %" PRId64 ") do not match, or "
                        "v differs from k", what, kn_fmt(qb, b1, sizeof b1),
                        kn_fmt(kb, b2, sizeof b2), group);
    ein_box want = partial ? ein_agg_box(EIN_AGG_LSE, qb) : *qb;
    if (!ein_box_equal(&out->box, &want) || (partial && out->dtype != EIN_F32))
        return ein_fail(err, EIN_ESHAPE, "%s: out %s %s; expected %s%s", what,
                        ein_dtype_name(out->dtype), kn_fmt(&out->box, b1, sizeof b1),
                        kn_fmt(&want, b2, sizeof b2), partial ? " in f32" : "");
    if ((rc = kn_pos_check(what, pos, kb->lo[1], kb->hi[1], err)) < 0)
        return rc;
    int64_t nqh = qb->hi[0] - qb->lo[0];
    int64_t s0 = kb->lo[2], ns = kb->hi[2] - kb->lo[2];
    for (int64_t b = 0; b < nb; b++) {
        int64_t p = kn_int_at(pos, b);
        if (p < 0 || (!partial && p < s0))
            return ein_fail(err, EIN_EINVAL, "%s: sequence %" PRId64 " is at position %" PRId64
                            ", which sees no key of [%" PRId64 ", %" PRId64 ")", what,
                            kb->lo[1] + b, p, s0, s0 + ns);
    }
    int64_t w = partial ? d + 1 : d;
    float *qs = kn_falloc(what, 3 * d + (ns > 0 ? ns : 1), err);
    if (!qs)
        return EIN_ENOMEM;
    float *ks = qs + d, *o = ks + d, *sc = o + d;
    float scale = (float)(1.0 / sqrt((double)d));
    for (int64_t qh = 0; qh < nqh; qh++) {
        int64_t h = qh / group;
        for (int64_t bt = 0; bt < nt; bt++) {
            int64_t b = bt / c, p = kn_int_at(pos, b) + bt % c; /* token bt % c of the chunk */
            /* keys seen in this block: [k0, k0 + n), inside the window */
            int64_t k0 = window > 0 && p - window + 1 > s0 ? p - window + 1 : s0;
            int64_t n = (p + 1 < s0 + ns ? p + 1 : s0 + ns) - k0;
            int64_t row = (qh * nt + bt) * w;
            memset(o, 0, sizeof(float) * (size_t)d);
            if (n <= 0 && !partial) {
                free(qs);
                return ein_fail(err, EIN_EINVAL, "%s: sequence %" PRId64 " at position %" PRId64
                                " sees no key of [%" PRId64 ", %" PRId64 ") (window %" PRId64 ")",
                                what, kb->lo[1] + b, p, s0, s0 + ns, window);
            }
            if (n <= 0) {   /* skipped: the identity of the merge (partial only) */
                kn_store(out, row, o, d);
                float ninf = -INFINITY;
                kn_store(out, row + d, &ninf, 1);
                continue;
            }
            kn_load(q, (qh * nt + bt) * d, qs, d);
            float m = -INFINITY;
            int64_t kbase = ((h * nb + b) * ns + (k0 - s0)) * d;
            for (int64_t s = 0; s < n; s++) {
                kn_load(k, kbase + s * d, ks, d);
                float dot = 0;
                for (int64_t j = 0; j < d; j++)
                    dot += qs[j] * ks[j];
                sc[s] = dot * scale;
                m = sc[s] > m ? sc[s] : m;
            }
            double l = 0;
            for (int64_t s = 0; s < n; s++) {
                float e = expf(sc[s] - m);
                l += e;
                kn_load(v, kbase + s * d, ks, d);
                for (int64_t j = 0; j < d; j++)
                    o[j] += e * ks[j];
            }
            for (int64_t j = 0; j < d; j++)
                o[j] = (float)(o[j] / l);
            kn_store(out, row, o, d);
            if (partial) {
                float lse = m + (float)log(l);
                kn_store(out, row + d, &lse, 1);
            }
        }
    }
    free(qs);
    return 0;
}
