/* common/ir/ein_kernel_cost.c — see ein_kernel_cost.h. */
#include "common/ir/ein_kernel_cost.h"

#include <assert.h>

#include "common/ir/ein_einsum.h"

/* Pairs of the queries [a, b) of one sequence whose keys start at `lo`
 * (the later of the sequence's start and klo), keys below khi. */
static double seq_pairs(int64_t a, int64_t b, int64_t lo, int64_t khi)
{
    double pairs = 0;
    /* t < khi: keys [lo, t] — an arithmetic series over t in [t0, t1) */
    int64_t t0 = a > lo ? a : lo, t1 = b < khi ? b : khi;
    if (t1 > t0)
        pairs += (double)(t1 - t0) * (double)((t0 + 1 - lo) + (t1 - lo)) / 2;
    /* t >= khi: keys [lo, khi), each */
    int64_t u0 = a > khi ? a : khi;
    if (b > u0 && khi > lo)
        pairs += (double)(b - u0) * (double)(khi - lo);
    return pairs;
}

double ein_causal_pairs(const int64_t *ends, int nends, int64_t qlo, int64_t qhi, int64_t klo,
                        int64_t khi)
{
    assert(nends >= 0 && (nends == 0 || ends));
    double pairs = 0;
    int64_t start = 0;
    /* sequence j is [start, ends[j]); tokens past the last end belong to
     * one more sequence from there */
    for (int j = 0; j <= nends && start < qhi; j++) {
        int64_t end = j < nends ? ends[j] : INT64_MAX;
        int64_t a = qlo > start ? qlo : start, b = qhi < end ? qhi : end;
        if (b > a)
            pairs += seq_pairs(a, b, start > klo ? start : klo, khi);
        start = end;
    }
    return pairs;
}

double ein_window_pairs(const int64_t *ends, int nends, int64_t window, int64_t qlo,
                        int64_t qhi, int64_t klo, int64_t khi)
{
    double all = ein_causal_pairs(ends, nends, qlo, qhi, klo, khi);
    if (window <= 0)
        return all;
    /* The keys before t's window, u < t - W + 1, are the causal keys of
     * query t - W: subtract the causal pairs of the queries shifted back by
     * W, each kept in its own sequence (its start, not the shifted one). */
    double before = 0;
    int64_t start = 0;
    for (int j = 0; j <= nends && start < qhi; j++) {
        int64_t end = j < nends ? ends[j] : INT64_MAX;
        int64_t a = qlo > start ? qlo : start, b = qhi < end ? qhi : end;
        if (b > a)
            before += seq_pairs(a - window, b - window, start > klo ? start : klo, khi);
        start = end;
    }
    return all - before;
}

static double einsum_flops(const ein_kernel *k, const ein_box *const *srcs, int nsrcs)
{
    ein_einsum_sub sub;
    if (nsrcs < 1 || nsrcs > 2 ||
        ein_einsum_parse_flags(k->subscripts, EIN_EINSUM_SCALARS, &sub, NULL) < 0 ||
        sub.nops != nsrcs)
        return 0;
    double ext[26] = {0};
    for (int op = 0; op < sub.nops; op++) {
        const ein_box *b = srcs[op];
        for (int ax = 0; ax < sub.rank[op] && ax < b->rank; ax++) {
            assert(sub.ops[op][ax] >= 'a' && sub.ops[op][ax] <= 'z'); /* ein_einsum_parse's letters */
            ext[sub.ops[op][ax] - 'a'] = (double)(b->hi[ax] - b->lo[ax]);
        }
    }
    double f = nsrcs == 2 ? 2.0 : 1.0;
    for (int c = 0; c < 26; c++)
        if (ext[c] > 0)
            f *= ext[c];
    return f;
}

double ein_kernel_flops(const ein_kernel *k, const ein_box *out, const ein_box *const *srcs,
                        int nsrcs)
{
    double vol = (double)ein_box_volume(out);
    switch (k->kind) {
    case EIN_KERNEL_EINSUM:
        return einsum_flops(k, srcs, nsrcs);
    case EIN_KERNEL_ATTENTION:
    case EIN_KERNEL_ATTENTION_PARTIAL: {
        if (nsrcs != 3 || srcs[0]->rank != 3 || srcs[1]->rank != 3)
            return 0;
        const ein_box *q = srcs[0], *kb = srcs[1];
        double heads = (double)(q->hi[0] - q->lo[0]), d = (double)(q->hi[2] - q->lo[2]);
        /* QK^T and PV: 2 x 2 FLOPs per pair, head and dim. */
        return 4.0 * heads * d *
               ein_window_pairs(k->list, k->nlist, k->window, q->lo[1], q->hi[1], kb->lo[1],
                                kb->hi[1]);
    }
    case EIN_KERNEL_SOFTMAX:      /* max, subtract, exp, sum, divide */
        return 5.0 * vol;
    case EIN_KERNEL_RMSNORM:
        return 4.0 * vol;
    case EIN_KERNEL_SWIGLU:       /* silu's (counted as one, as UNARY's) and the multiply */
        return 2.0 * vol;
    case EIN_KERNEL_ADD_RMSNORM:  /* out holds both halves: the add and rmsnorm's 4 */
        return 2.5 * vol;
    case EIN_KERNEL_LAYERNORM:
        return 7.0 * vol;
    case EIN_KERNEL_ROPE:         /* per pair: two multiplies and an add, plus the angle */
        return 4.0 * vol;
    case EIN_KERNEL_UNARY:
    case EIN_KERNEL_BINARY:
        return vol;
    case EIN_KERNEL_REDUCE:
        return nsrcs >= 1 ? (double)ein_box_volume(srcs[0]) : 0;
    case EIN_KERNEL_DECODE_ATTENTION:
    case EIN_KERNEL_DECODE_ATTENTION_PARTIAL:
        /* at most every cached key of the block, or of the window if
         * shorter: QK^T and PV, 2 x 2 FLOPs per key, query head and dim
         * (out is q's box [H, B, D]) */
        if (nsrcs < 2 || srcs[1]->rank != 4)
            return 0;
        {
            double keys = (double)(srcs[1]->hi[2] - srcs[1]->lo[2]);
            if (k->window > 0 && (double)k->window < keys)
                keys = (double)k->window;
            return 4.0 * vol * keys;
        }
    case EIN_KERNEL_ROPE_AT:      /* per element: a multiply-add, plus the angle */
        return 3.0 * vol;
    case EIN_KERNEL_CACHE_WRITE:  /* copies only */
    case EIN_KERNEL_EMBEDDING:
    default:
        return 0;
    }
}
