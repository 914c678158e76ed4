/* kernels/cpu/kn_attention.c — causal grouped-query attention over packed
 * sequences, FlashAttention's algorithm on the CPU.
 *
 * For each kv head, the `group` query heads that share it are stacked into
 * one tile of group*BQ rows (tokens [qs, qe) of each head), so both GEMMs of
 * a tile (S = Q K^T, then O += P V) go through sgemm with a tall left
 * operand. Key tiles run over [start(qs), qe) only: keys before the first
 * query's sequence start or after the last query are never touched, which
 * is the causal skipping. Inside a tile a mask applies only when the tile
 * straddles the diagonal or a sequence start. The online softmax keeps a
 * running max m and sum l per row and rescales O when m grows; every query
 * sees at least itself, so l > 0 at the end.
 *
 * Q is scaled by 1/sqrt(d) on load. K and V are used in place when f32,
 * else converted once per kv head.
 *
 * Sliding window W > 0 (issue 34; transformers' Mistral/Qwen2 rule): query
 * t sees keys u of its sequence with t - W < u <= t. Key tiles then start
 * at max(start(qs), qs - W + 1), so keys before every query's window are
 * never touched either, and the mask also cuts each row's keys at its
 * window. */
#include "kernels/cpu/kn_internal.h"
#include "kernels/cpu/kn_vexp.h"

#include <cblas.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define KN_ATT_ROWS 128   /* stacked query rows per tile (group * BQ); 256 computed a
                             third more (query, key) pairs than the causal half on
                             512-token heads of dim 64, and was 28% slower there */
#define KN_ATT_BK 256     /* keys per tile */

/* s[i] = exp(s[i] - mx) for i < n; returns the sum. */
KN_CLONES static float kn_exp_row(float *s, int64_t n, float mx)
{
    kn_v4f acc0 = {0}, acc1 = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        kn_v4f v0, v1;
        memcpy(&v0, s + i, sizeof v0);
        memcpy(&v1, s + i + 4, sizeof v1);
        v0 = kn_exp_v(v0 - mx);
        v1 = kn_exp_v(v1 - mx);
        memcpy(s + i, &v0, sizeof v0);
        memcpy(s + i + 4, &v1, sizeof v1);
        acc0 += v0;
        acc1 += v1;
    }
    acc0 += acc1;
    float sum = (acc0[0] + acc0[1]) + (acc0[2] + acc0[3]);
    for (; i < n; i++) {
        s[i] = kn_exp_s(s[i] - mx);
        sum += s[i];
    }
    return sum;
}

/* max(m, s[0..n)); two running maxima, so that consecutive compares do
 * not wait for each other. */
KN_CLONES static float kn_max_row(const float *s, int64_t n, float m)
{
    int64_t i = 0;
    if (n >= 8) {
        kn_v4f a0, a1;
        memcpy(&a0, s, sizeof a0);
        memcpy(&a1, s + 4, sizeof a1);
        for (i = 8; i + 8 <= n; i += 8) {
            kn_v4f v0, v1;
            memcpy(&v0, s + i, sizeof v0);
            memcpy(&v1, s + i + 4, sizeof v1);
            kn_v4i g0 = v0 > a0, g1 = v1 > a1;
            a0 = (kn_v4f)(((kn_v4i)v0 & g0) | ((kn_v4i)a0 & ~g0));
            a1 = (kn_v4f)(((kn_v4i)v1 & g1) | ((kn_v4i)a1 & ~g1));
        }
        for (int j = 0; j < 4; j++) {
            m = a0[j] > m ? a0[j] : m;
            m = a1[j] > m ? a1[j] : m;
        }
    }
    for (; i < n; i++)
        m = s[i] > m ? s[i] : m;
    return m;
}

/* The first key query t of the sequence starting at s sees. */
static inline int64_t kn_att_first_key(int64_t s, int64_t t, int64_t window)
{
    return window > 0 && t - window + 1 > s ? t - window + 1 : s;
}

/* q's and k's head dims whole and equal, and q's heads `group` times k's
 * (both attention kernels and the partial one). */
static int kn_att_heads_check(const char *what, const kn_block *q, const kn_block *k,
                              int64_t group, ein_error *err)
{
    char b1[256], b2[256];
    if (q->box.lo[2] != 0 || k->box.lo[2] != 0 || q->box.hi[2] != k->box.hi[2] ||
        q->box.hi[2] < 1)
        return ein_fail(err, EIN_ESHAPE, "%s: head dim must be whole and equal: q %s, k %s",
                        what, kn_fmt(&q->box, b1, sizeof b1), kn_fmt(&k->box, b2, sizeof b2));
    if (q->box.lo[0] != group * k->box.lo[0] || q->box.hi[0] != group * k->box.hi[0])
        return ein_fail(err, EIN_ESHAPE, "%s: q heads %s are not kv heads %s times group %"
                        PRId64, what, kn_fmt(&q->box, b1, sizeof b1),
                        kn_fmt(&k->box, b2, sizeof b2), group);
    return 0;
}

static int kn_att_check(int64_t group, int64_t window, const int64_t *ends, int nseq,
                        const kn_block *q, const kn_block *k, const kn_block *v,
                        const kn_block *out, ein_error *err)
{
    const char *what = "attention";
    char b1[256], b2[256];
    int rc;
    if ((rc = kn_blk_check(what, "q", q, 3, err)) < 0 ||
        (rc = kn_blk_check(what, "k", k, 3, err)) < 0 ||
        (rc = kn_blk_check(what, "v", v, 3, err)) < 0 ||
        (rc = kn_blk_check(what, "out", out, 3, err)) < 0 ||
        (rc = kn_seq_check(what, ends, nseq, err)) < 0)
        return rc;
    if (group < 1)
        return ein_fail(err, EIN_EINVAL, "%s: group %" PRId64 " is not positive", what, group);
    if (window < 0)
        return ein_fail(err, EIN_EINVAL, "%s: window %" PRId64 " is negative (0 = no window)",
                        what, window);
    if (!ein_box_equal(&q->box, &out->box))
        return ein_fail(err, EIN_ESHAPE, "%s: out box %s differs from q box %s", what,
                        kn_fmt(&out->box, b1, sizeof b1), kn_fmt(&q->box, b2, sizeof b2));
    if (!ein_box_equal(&k->box, &v->box))
        return ein_fail(err, EIN_ESHAPE, "%s: v box %s differs from k box %s", what,
                        kn_fmt(&v->box, b1, sizeof b1), kn_fmt(&k->box, b2, sizeof b2));
    if ((rc = kn_att_heads_check(what, q, k, group, err)) < 0)
        return rc;
    int64_t t0 = q->box.lo[1], t1 = q->box.hi[1];
    if (t1 == t0 || q->box.hi[0] == q->box.lo[0])
        return 0;
    int64_t s0 = kn_seq_start(ends, nseq, t0);
    if (s0 < 0 || kn_seq_start(ends, nseq, t1 - 1) < 0)
        return ein_fail(err, EIN_ESHAPE, "%s: query tokens [%" PRId64 ":%" PRId64 ") are outside "
                        "the sequences (last end %" PRId64 ")", what, t0, t1,
                        nseq > 0 ? ends[nseq - 1] : 0);
    s0 = kn_att_first_key(s0, t0, window);
    if (k->box.lo[1] > s0 || k->box.hi[1] < t1)
        return ein_fail(err, EIN_ESHAPE, "%s: keys %s do not hold [%" PRId64 ":%" PRId64 "), "
                        "the keys the queries %s attend to", what,
                        kn_fmt(&k->box, b1, sizeof b1), s0, t1, kn_fmt(&q->box, b2, sizeof b2));
    return 0;
}

/* One kn_att_core call: the checked blocks, the tile geometry and the
 * scratch. Q, O (rows x d), S (rows x KN_ATT_BK), m and l (rows) are one
 * query tile's; kbuf/vbuf hold one kv head's K and V when they need
 * conversion (conv); start[i] is the sequence start of the tile's query
 * token i. */
typedef struct kn_att {
    const char *what;
    int64_t group;
    int64_t window;             /* 0: none */
    const int64_t *seq_ends;
    int nseq;
    const kn_block *q, *k, *v;
    kn_block *out;
    int lse;
    int64_t d, t0, t1, u0, u1, tk, tq, hk;
    int64_t bq;                 /* query tokens per tile */
    int conv;
    float scale;                /* 1/sqrt(d), applied to Q on load */
    float *mem, *Q, *O, *S, *m, *l, *kbuf, *vbuf;
    int64_t *start;
} kn_att;

/* Choose the tile height and allocate the scratch of *a (blocks and
 * extents set); 0, or a negative code with nothing left allocated. */
static int kn_att_alloc(kn_att *a, ein_error *err)
{
    int64_t bq = KN_ATT_ROWS / a->group;
    if (bq < 16)
        bq = 16;
    if (bq > a->tq)
        bq = a->tq;
    const int64_t rows = a->group * bq, d = a->d, tk = a->tk;
    const int conv = a->k->dtype != EIN_F32 || a->v->dtype != EIN_F32;
    /* Scratch: Q tile, O tile, S/P tile, m, l, per-token starts, and K/V
     * of one head when they need conversion. */
    int64_t nf = rows * d * 2 + rows * KN_ATT_BK + rows * 2 + (conv ? 2 * tk * d : 0);
    float *mem = kn_falloc(a->what, nf, err);
    int64_t *start = malloc((size_t)bq * sizeof *start);
    if (!mem || !start) {
        free(mem);
        free(start);
        return mem ? ein_fail(err, EIN_ENOMEM, "%s: out of memory", a->what) : EIN_ENOMEM;
    }
    a->bq = bq;
    a->conv = conv;
    a->mem = mem;
    a->start = start;
    a->Q = mem;
    a->O = a->Q + rows * d;
    a->S = a->O + rows * d;
    a->m = a->S + rows * KN_ATT_BK;
    a->l = a->m + rows;
    a->kbuf = a->l + rows;
    a->vbuf = a->kbuf + (conv ? tk * d : 0);
    a->scale = (float)(1.0 / sqrt((double)d));
    return 0;
}

/* Start the query tile [qs, qs + nq) of kv head g: the tokens' sequence
 * starts, the group's scaled Q rows stacked head by head, O = 0, m = -inf,
 * l = 0. */
static inline void kn_att_tile_begin(kn_att *a, int64_t g, int64_t qs, int64_t nq)
{
    const int64_t d = a->d, group = a->group, nr = group * nq;
    float *Q = a->Q, *O = a->O, *m = a->m, *l = a->l;
    for (int64_t i = 0; i < nq; i++)
        a->start[i] = kn_seq_start(a->seq_ends, a->nseq, qs + i);
    for (int64_t j = 0; j < group; j++) {
        int64_t h = g * group + j;   /* local q head */
        kn_load(a->q, (h * a->tq + (qs - a->t0)) * d, Q + j * nq * d, nq * d);
    }
    for (int64_t i = 0; i < nr * d; i++)
        Q[i] *= a->scale;
    memset(O, 0, (size_t)(nr * d) * sizeof *O);
    for (int64_t r = 0; r < nr; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
}

/* One key tile [ks, ke) against the query tile [qs, qs + nq): S = Q K^T,
 * the online softmax of every row over its visible keys (S becomes P, m
 * and l advance, O rescales), then O += P V. K and V are the kv head's,
 * starting at token u0. */
static inline void kn_att_key_tile(kn_att *a, const float *K, const float *V, int64_t qs,
                                   int64_t nq, int64_t ks, int64_t ke)
{
    const int64_t d = a->d, nr = a->group * nq, nk = ke - ks, u0 = a->u0;
    const int64_t *start = a->start;
    float *S = a->S, *O = a->O, *m = a->m, *l = a->l;
    const int64_t w = a->window;
    /* No mask when every key is visible to every query (the last query's
     * window included). */
    const int full = ke - 1 <= qs && ks >= start[nq - 1] && (w == 0 || ks > qs + nq - 1 - w);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nr, (int)nk, (int)d,
                1.0f, a->Q, (int)d, K + (ks - u0) * d, (int)d, 0.0f, S, (int)nk);
    for (int64_t r = 0; r < nr; r++) {
        float *s = S + r * nk;
        int64_t i = r % nq, t = qs + i;
        int64_t lo = 0, hi = nk;   /* visible keys [ks+lo, ks+hi) */
        if (!full) {
            int64_t first = kn_att_first_key(start[i], t, w);
            lo = first > ks ? first - ks : 0;
            hi = t + 1 < ke ? t + 1 - ks : nk;
            if (lo > nk)
                lo = nk;
            if (hi < lo)
                hi = lo;
        }
        float mx = kn_max_row(s + lo, hi - lo, m[r]);
        if (mx == -INFINITY) {   /* nothing visible yet */
            memset(s, 0, (size_t)nk * sizeof *s);
            continue;
        }
        float alpha = expf(m[r] - mx);
        for (int64_t c = 0; c < lo; c++)
            s[c] = 0.0f;
        float sum = kn_exp_row(s + lo, hi - lo, mx);
        for (int64_t c = hi; c < nk; c++)
            s[c] = 0.0f;
        m[r] = mx;
        l[r] = l[r] * alpha + sum;
        if (alpha != 1.0f) {
            float *o = O + r * d;
            for (int64_t c = 0; c < d; c++)
                o[c] *= alpha;
        }
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)nr, (int)d, (int)nk,
                1.0f, S, (int)nk, V + (ks - u0) * d, (int)d, 1.0f, O, (int)d);
}

/* Finish the query tile [qs, qs + nq) of kv head g: O /= l, then into out
 * (lse: rows of d + 1 with m + log(l) last; else each head's rows). */
static inline void kn_att_tile_end(kn_att *a, int64_t g, int64_t qs, int64_t nq)
{
    const int64_t d = a->d, group = a->group, nr = group * nq, tq = a->tq, t0 = a->t0;
    float *O = a->O, *m = a->m, *l = a->l;
    for (int64_t r = 0; r < nr; r++) {
        float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
        for (int64_t c = 0; c < d; c++)
            O[r * d + c] *= inv;
    }
    if (a->lse) {
        float *y = a->out->data;
        for (int64_t r = 0; r < nr; r++) {
            int64_t h = g * group + r / nq, t = qs - t0 + r % nq;
            float *row = y + (h * tq + t) * (d + 1);
            memcpy(row, O + r * d, (size_t)d * sizeof *row);
            row[d] = l[r] > 0.0f ? m[r] + logf(l[r]) : -INFINITY;
        }
        return;
    }
    for (int64_t j = 0; j < group; j++) {
        int64_t h = g * group + j;
        kn_store(a->out, (h * tq + (qs - t0)) * d, O + j * nq * d, nq * d);
    }
}

/* The FlashAttention loop over checked blocks. Keys are those of k's
 * token interval [u0, u1) that a query sees; `lse` 0: out is q's box,
 * normalised (every query sees itself, so l > 0); `lse` 1: out is f32 rows
 * of d + 1, the normalised partial output then m + log(l) (scaled
 * scores), a row without keys 0 and -inf. */
static int kn_att_core(const char *what, int64_t group, int64_t window, const int64_t *seq_ends,
                       int nseq, const kn_block *q, const kn_block *k, const kn_block *v,
                       kn_block *out, int lse, ein_error *err)
{
    kn_att a = {.what = what, .group = group, .window = window, .seq_ends = seq_ends, .nseq = nseq,
                .q = q, .k = k, .v = v, .out = out, .lse = lse,
                .d = q->box.hi[2], .t0 = q->box.lo[1], .t1 = q->box.hi[1],
                .u0 = k->box.lo[1], .u1 = k->box.hi[1], .hk = k->box.hi[0] - k->box.lo[0]};
    a.tk = a.u1 - a.u0;
    a.tq = a.t1 - a.t0;
    if (a.tq == 0 || a.hk == 0)
        return 0;
    if (a.d > INT_MAX / KN_ATT_BK || a.tk > INT_MAX)
        return ein_fail(err, EIN_EUNSUPPORTED, "%s: head dim %" PRId64 " too large for BLAS",
                        what, a.d);
    int rc = kn_att_alloc(&a, err);
    if (rc < 0)
        return rc;
    const int64_t d = a.d, tk = a.tk, t1 = a.t1, u0 = a.u0, u1 = a.u1;
    for (int64_t g = 0; g < a.hk; g++) {
        const float *K, *V;
        if (a.conv) {
            kn_load(k, g * tk * d, a.kbuf, tk * d);
            kn_load(v, g * tk * d, a.vbuf, tk * d);
            K = a.kbuf;
            V = a.vbuf;
        } else {
            K = (const float *)k->data + g * tk * d;
            V = (const float *)v->data + g * tk * d;
        }
        for (int64_t qs = a.t0; qs < t1; qs += a.bq) {
            const int64_t qe = qs + a.bq < t1 ? qs + a.bq : t1, nq = qe - qs;
            kn_att_tile_begin(&a, g, qs, nq);
            /* Keys [start(qs), qe) within [u0, u1), from qs's window on:
             * every key of the block some query of the tile sees. */
            const int64_t kend = qe < u1 ? qe : u1;
            const int64_t kbeg = kn_att_first_key(a.start[0], qs, window);
            for (int64_t ks = kbeg > u0 ? kbeg : u0; ks < kend; ks += KN_ATT_BK) {
                const int64_t ke = ks + KN_ATT_BK < kend ? ks + KN_ATT_BK : kend;
                kn_att_key_tile(&a, K, V, qs, nq, ks, ke);
            }
            kn_att_tile_end(&a, g, qs, nq);
        }
    }
    free(a.mem);
    free(a.start);
    return 0;
}

int kn_cpu_attention_window(int64_t group, int64_t window, const int64_t *seq_ends, int nseq,
                            const kn_block *q, const kn_block *k, const kn_block *v,
                            kn_block *out, ein_error *err)
{
    int rc = kn_att_check(group, window, seq_ends, nseq, q, k, v, out, err);
    if (rc < 0)
        return rc;
    return kn_att_core("attention", group, window, seq_ends, nseq, q, k, v, out, 0, err);
}

int kn_cpu_attention(int64_t group, const int64_t *seq_ends, int nseq, const kn_block *q,
                     const kn_block *k, const kn_block *v, kn_block *out, ein_error *err)
{
    return kn_cpu_attention_window(group, 0, seq_ends, nseq, q, k, v, out, err);
}

int kn_cpu_attention_partial(int64_t group, const int64_t *seq_ends, int nseq,
                             const kn_block *q, const kn_block *k, const kn_block *v,
                             kn_block *out, ein_error *err)
{
    return kn_cpu_attention_partial_window(group, 0, seq_ends, nseq, q, k, v, out, err);
}

int kn_cpu_attention_partial_window(int64_t group, int64_t window, const int64_t *seq_ends,
                                    int nseq, const kn_block *q, const kn_block *k,
                                    const kn_block *v, kn_block *out, ein_error *err)
{
    const char *what = "attention_partial";
    char b1[256], b2[256];
    int rc;
    if ((rc = kn_blk_check(what, "q", q, 3, err)) < 0 ||
        (rc = kn_blk_check(what, "out", out, 3, err)) < 0 ||
        (rc = kn_seq_check(what, seq_ends, nseq, err)) < 0)
        return rc;
    if (!k != !v)
        return ein_fail(err, EIN_EINVAL, "%s: k and v must both be given or both be NULL", what);
    if (window < 0)
        return ein_fail(err, EIN_EINVAL, "%s: window %" PRId64 " is negative (0 = no window)",
                        what, window);
    ein_box want = ein_agg_box(EIN_AGG_LSE, &q->box);
    if (out->dtype != EIN_F32 || !ein_box_equal(&want, &out->box))
        return ein_fail(err, EIN_ESHAPE, "%s: out must be f32 over %s (q's box with d + 1 "
                        "columns), is %s %s", what, kn_fmt(&want, b1, sizeof b1),
                        ein_dtype_name(out->dtype), kn_fmt(&out->box, b2, sizeof b2));
    if (q->box.lo[2] != 0 || q->box.hi[2] < 1)
        return ein_fail(err, EIN_ESHAPE, "%s: head dim must be whole: q %s", what,
                        kn_fmt(&q->box, b1, sizeof b1));
    const int64_t d = q->box.hi[2], t0 = q->box.lo[1], t1 = q->box.hi[1];
    if (t1 > t0 && (kn_seq_start(seq_ends, nseq, t0) < 0 || kn_seq_start(seq_ends, nseq, t1 - 1) < 0))
        return ein_fail(err, EIN_ESHAPE, "%s: query tokens [%" PRId64 ":%" PRId64 ") are outside "
                        "the sequences", what, t0, t1);
    int nokeys = !k || ein_box_volume(&k->box) == 0;
    if (!nokeys) {
        if ((rc = kn_blk_check(what, "k", k, 3, err)) < 0 ||
            (rc = kn_blk_check(what, "v", v, 3, err)) < 0)
            return rc;
        if (!ein_box_equal(&k->box, &v->box))
            return ein_fail(err, EIN_ESHAPE, "%s: v box %s differs from k box %s", what,
                            kn_fmt(&v->box, b1, sizeof b1), kn_fmt(&k->box, b2, sizeof b2));
        if (group < 1)
            return ein_fail(err, EIN_EINVAL, "%s: group %" PRId64 " is not positive", what, group);
        if ((rc = kn_att_heads_check(what, q, k, group, err)) < 0) /* d: q's, checked */
            return rc;
        if (k->box.hi[1] > t1 && k->box.hi[1] > 0 && nseq > 0 && k->box.hi[1] > seq_ends[nseq - 1])
            return ein_fail(err, EIN_ESHAPE, "%s: keys %s are outside the sequences", what,
                            kn_fmt(&k->box, b1, sizeof b1));
    }
    /* Every row starts empty (no key seen): output 0, log-sum-exp -inf. */
    int64_t rows = ein_box_volume(&q->box) / d;
    float *y = out->data;
    for (int64_t r = 0; r < rows; r++) {
        memset(y + r * (d + 1), 0, (size_t)d * sizeof *y);
        y[r * (d + 1) + d] = -INFINITY;
    }
    if (nokeys || rows == 0)
        return 0;
    return kn_att_core(what, group, window, seq_ends, nseq, q, k, v, out, 1, err);
}

int kn_cpu_agg_lse(const kn_block *srcs, int n, kn_block *out, ein_error *err)
{
    const char *what = "agg lse";
    char b1[256], b2[256];
    int rc;
    if (n < 1 || !srcs)
        return ein_fail(err, EIN_EINVAL, "%s: needs at least one source, got %d", what, n);
    if (!out || (rc = kn_blk_check(what, "out", out, -1, err)) < 0)
        return out ? rc : ein_fail(err, EIN_EINVAL, "%s: missing out", what);
    int r = out->box.rank;
    if (r < 1 || out->box.lo[r - 1] != 0 || out->box.hi[r - 1] < 2 || out->dtype != EIN_F32)
        return ein_fail(err, EIN_ESHAPE, "%s: out must be f32 rows [0, d + 1) with d >= 1, is "
                        "%s %s", what, ein_dtype_name(out->dtype), kn_fmt(&out->box, b1, sizeof b1));
    for (int j = 0; j < n; j++) {
        if ((rc = kn_blk_check(what, "source", &srcs[j], r, err)) < 0)
            return rc;
        if (!ein_box_equal(&srcs[j].box, &out->box) || srcs[j].dtype != EIN_F32)
            return ein_fail(err, EIN_ESHAPE, "%s: source %d is %s %s, out %s %s", what, j,
                            ein_dtype_name(srcs[j].dtype), kn_fmt(&srcs[j].box, b1, sizeof b1),
                            ein_dtype_name(out->dtype), kn_fmt(&out->box, b2, sizeof b2));
    }
    const int64_t w = out->box.hi[r - 1], d = w - 1;
    const int64_t rows = ein_box_volume(&out->box) / w;
    float *y = out->data;
    float *acc = kn_falloc(what, d, err);
    if (!acc)
        return EIN_ENOMEM;
    /* Sources may alias out: each row is read whole before it is written. */
    for (int64_t i = 0; i < rows; i++) {
        float mx = -INFINITY;
        for (int j = 0; j < n; j++) {
            float s = ((const float *)srcs[j].data)[i * w + d];
            mx = s > mx ? s : mx;
        }
        if (mx == -INFINITY) {
            memset(y + i * w, 0, (size_t)d * sizeof *y);
            y[i * w + d] = -INFINITY;
            continue;
        }
        float sum = 0.0f;
        memset(acc, 0, (size_t)d * sizeof *acc);
        for (int j = 0; j < n; j++) {
            const float *row = (const float *)srcs[j].data + i * w;
            if (row[d] == -INFINITY)
                continue;
            float e = expf(row[d] - mx);
            sum += e;
            for (int64_t c = 0; c < d; c++)
                acc[c] += e * row[c];
        }
        float inv = 1.0f / sum;
        for (int64_t c = 0; c < d; c++)
            y[i * w + c] = acc[c] * inv;
        y[i * w + d] = mx + logf(sum);
    }
    free(acc);
    return 0;
}
