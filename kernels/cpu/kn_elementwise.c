/* kernels/cpu/kn_elementwise.c — unary, binary and aggregation kernels.
 *
 * All three work on equal boxes, so the blocks are flat arrays of the same
 * length. f32 blocks are processed in place; other dtypes go through
 * KN_CHUNK-element f32 buffers on the stack (no allocation), which also makes
 * out == input (in place) safe for every dtype. */
#include "kernels/kn_cpu.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cpu/kn_vexp.h"

#define KN_CHUNK 1024

/* Our own names, so messages do not depend on the IR's printers; names
 * and formulas come from the registry, common/ir/ein_ops.def. */
static const char *const kn_unary_names[EIN_UN_COUNT] = {
#define EIN_UNARY(kind, name, nargs, usage, formula) [EIN_UN_##kind] = name,
#include "common/ir/ein_ops.def"
};
static const char *const kn_binary_names[EIN_BIN_COUNT] = {
#define EIN_BINARY(kind, name, op, formula) [EIN_BIN_##kind] = name,
#include "common/ir/ein_ops.def"
};

/* One loop per function, so that each is a plain vectorisable loop: the
 * registry's formulas as they are. */
static void kn_unary_ref_f32(ein_unary op, float s, const float *x, float *y, int64_t n)
{
    switch (op) {
#define EIN_UNARY(kind, name, nargs, usage, formula) \
    case EIN_UN_##kind:                               \
        for (int64_t i = 0; i < n; i++) {             \
            float v = x[i];                           \
            y[i] = (formula);                         \
        }                                             \
        break;
#include "common/ir/ein_ops.def"
    case EIN_UN_COUNT:
        break;
    }
}

/* silu and sigmoid 4 lanes at a time with kn_exp_v: the formulas' expf
 * does not vectorise, and at 2 ns an element silu was 2.3% of a
 * 100M-parameter LLaMA's work on CPU devices (tools/bench-model --profile).
 * sigmoid(x) = 1/(1+t) for x >= 0 and t/(1+t) below, with t = exp(-|x|)
 * in (0, 1], so exp only ever sees arguments <= 0. Lanes below -80, where
 * kn_exp_v clamps, and the tail take the registry's formula (NaN and
 * infinities come out as they do there). */
KN_CLONES static void kn_sigmoid_f32(ein_unary op, const float *x, float *y, int64_t n)
{
    const kn_v4i absmask = {0x7fffffff, 0x7fffffff, 0x7fffffff, 0x7fffffff};
    const kn_v4f one = {1.0f, 1.0f, 1.0f, 1.0f};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        kn_v4f v, r;
        memcpy(&v, x + i, sizeof v);
        kn_v4i neg = v < 0.0f;
        kn_v4f t = kn_exp_v(-(kn_v4f)((kn_v4i)v & absmask));
        kn_v4f inv = one / (one + t);
        kn_v4f sg = (kn_v4f)(((kn_v4i)(t * inv) & neg) | ((kn_v4i)inv & ~neg));
        r = op == EIN_UN_SILU ? v * sg : sg;
        memcpy(y + i, &r, sizeof r);
        for (int j = 0; j < 4; j++)
            if (v[j] < -80.0f) {
                float xj = v[j];   /* x may be y: x[i + j] is already overwritten */
                kn_unary_ref_f32(op, 0.0f, &xj, y + i + j, 1);
            }
    }
    if (i < n)
        kn_unary_ref_f32(op, 0.0f, x + i, y + i, n - i);
}

static void kn_unary_f32(ein_unary op, float s, const float *x, float *y, int64_t n)
{
    if (op == EIN_UN_SILU || op == EIN_UN_SIGMOID)
        kn_sigmoid_f32(op, x, y, n);
    else
        kn_unary_ref_f32(op, s, x, y, n);
}

static void kn_binary_f32(ein_binary op, const float *x, const float *w, float *y, int64_t n)
{
    switch (op) {
#define EIN_BINARY(kind, name, opname, formula) \
    case EIN_BIN_##kind:                         \
        for (int64_t i = 0; i < n; i++) {        \
            float a = x[i], b = w[i];            \
            y[i] = (formula);                    \
        }                                        \
        break;
#include "common/ir/ein_ops.def"
    case EIN_BIN_COUNT:
        break;
    }
}

/* Binary on f32 with `y` accumulating (agg): y = y (+|max) x. */
static void kn_agg_f32(ein_agg op, const float *x, float *y, int64_t n)
{
    if (op == EIN_AGG_SUM)
        for (int64_t i = 0; i < n; i++)
            y[i] += x[i];
    else
        for (int64_t i = 0; i < n; i++)
            y[i] = fmaxf(y[i], x[i]);
}

static const void *kn_at(const kn_block *k, int64_t i)
{
    return (const char *)k->data + i * (int64_t)ein_dtype_size(k->dtype);
}

/* Common checks: a float dtype, data present, and the box of `out`. */
static int kn_check(const char *what, const char *name, const kn_block *k, const kn_block *out,
                    ein_error *err)
{
    char b1[256], b2[256];
    if (!k)
        return ein_fail(err, EIN_EINVAL, "%s: missing %s", what, name);
    if (!ein_dtype_valid((int)k->dtype))
        return ein_fail(err, EIN_EINVAL, "%s: %s has invalid dtype %d", what, name,
                        (int)k->dtype);
    if (!ein_dtype_is_float((int)k->dtype))
        return ein_fail(err, EIN_EINVAL, "%s: %s is %s; this kernel computes on f32, f16 or "
                        "bf16 only", what, name, ein_dtype_name(k->dtype));
    if (k != out && !ein_box_equal(&k->box, &out->box))
        return ein_fail(err, EIN_ESHAPE, "%s: out box %s differs from %s box %s", what,
                        ein_box_format(&out->box, b1, sizeof b1), name,
                        ein_box_format(&k->box, b2, sizeof b2));
    if (!k->data && ein_box_volume(&k->box) > 0)
        return ein_fail(err, EIN_EINVAL, "%s: %s has no data", what, name);
    return 0;
}

int kn_cpu_unary(ein_unary op, double scalar, const kn_block *x, kn_block *out,
                 ein_error *err)
{
    if ((int)op < 0 || op >= EIN_UN_COUNT)
        return ein_fail(err, EIN_EINVAL, "unary: unknown op %d", (int)op);
    char what[32];
    snprintf(what, sizeof what, "unary %s", kn_unary_names[op]);
    int rc;
    if (!out)
        return ein_fail(err, EIN_EINVAL, "%s: missing out", what);
    if ((rc = kn_check(what, "out", out, out, err)) < 0 ||
        (rc = kn_check(what, "x", x, out, err)) < 0)
        return rc;
    int64_t n = ein_box_volume(&out->box);
    float s = (float)scalar;
    if (x->dtype == EIN_F32 && out->dtype == EIN_F32) {
        kn_unary_f32(op, s, x->data, out->data, n);
        return 0;
    }
    float buf[KN_CHUNK];
    for (int64_t i = 0; i < n; i += KN_CHUNK) {
        int64_t c = n - i < KN_CHUNK ? n - i : KN_CHUNK;
        ein_dtype_to_f32(x->dtype, kn_at(x, i), buf, (size_t)c);
        kn_unary_f32(op, s, buf, buf, c);
        ein_dtype_from_f32(out->dtype, buf, (void *)kn_at(out, i), (size_t)c);
    }
    return 0;
}

/* silu(gate) * up in KN_CHUNK pieces: silu as kn_cpu_unary computes it (the
 * same 4-lane split: chunks are multiples of 4), rounded through out's
 * dtype, then the registry's MUL formula as kn_cpu_binary computes it. */
int kn_cpu_swiglu(const kn_block *gate, const kn_block *up, kn_block *out, ein_error *err)
{
    const char *what = "swiglu";
    int rc;
    if (!out)
        return ein_fail(err, EIN_EINVAL, "%s: missing out", what);
    if ((rc = kn_check(what, "out", out, out, err)) < 0 ||
        (rc = kn_check(what, "gate", gate, out, err)) < 0 ||
        (rc = kn_check(what, "up", up, out, err)) < 0)
        return rc;
    int64_t n = ein_box_volume(&out->box);
    float bg[KN_CHUNK], bu[KN_CHUNK];
    uint16_t half[KN_CHUNK];
    if (gate->dtype == EIN_F32 && up->dtype == EIN_F32 && out->dtype == EIN_F32) {
        /* no conversions: silu of a chunk on the stack, then the product
         * straight from up into out (either may be out: each chunk of
         * both is read before that chunk of out is written) */
        const float *gf = gate->data, *uf = up->data;
        float *yf = out->data;
        for (int64_t i = 0; i < n; i += KN_CHUNK) {
            int64_t c = n - i < KN_CHUNK ? n - i : KN_CHUNK;
            kn_unary_f32(EIN_UN_SILU, 0.0f, gf + i, bg, c);
            kn_binary_f32(EIN_BIN_MUL, bg, uf + i, yf + i, c);
        }
        return 0;
    }
    for (int64_t i = 0; i < n; i += KN_CHUNK) {
        int64_t c = n - i < KN_CHUNK ? n - i : KN_CHUNK;
        ein_dtype_to_f32(gate->dtype, kn_at(gate, i), bg, (size_t)c);
        kn_unary_f32(EIN_UN_SILU, 0.0f, bg, bg, c);
        if (out->dtype != EIN_F32) {   /* 2-byte floats: the unfused intermediate's rounding */
            ein_dtype_from_f32(out->dtype, bg, half, (size_t)c);
            ein_dtype_to_f32(out->dtype, half, bg, (size_t)c);
        }
        ein_dtype_to_f32(up->dtype, kn_at(up, i), bu, (size_t)c);
        kn_binary_f32(EIN_BIN_MUL, bg, bu, bg, c);
        ein_dtype_from_f32(out->dtype, bg, (void *)kn_at(out, i), (size_t)c);
    }
    return 0;
}

/* Strides of input k over out's index space: its own row-major strides,
 * 0 along broadcast dimensions and the dimensions it lacks (right-aligned
 * ranks). Fails unless every other interval equals out's. */
static int kn_bcast(const char *what, const char *name, const kn_block *k, const kn_block *out,
                    int64_t *st, int *bc, ein_error *err)
{
    char b1[256], b2[256];
    int r = out->box.rank, rk = k->box.rank;
    if (rk < 0 || rk > r)
        return ein_fail(err, EIN_ESHAPE, "%s: %s has rank %d but out has rank %d", what, name,
                        rk, r);
    int64_t s = 1;
    *bc = 0;
    for (int d = r - 1; d >= 0; d--) {
        st[d] = 0;
        int dk = d - (r - rk);
        if (dk < 0) {
            *bc |= out->box.hi[d] - out->box.lo[d] != 1;
            continue;
        }
        int64_t lo = k->box.lo[dk], hi = k->box.hi[dk];
        if (hi < lo)
            return ein_fail(err, EIN_ESHAPE, "%s: %s has an inverted interval in dimension %d",
                            what, name, dk);
        if (lo == out->box.lo[d] && hi == out->box.hi[d]) {
            st[d] = hi - lo == 1 ? 0 : s;
        } else if (hi - lo == 1) {
            *bc = 1;            /* broadcast: its one element along d */
        } else {
            return ein_fail(err, EIN_ESHAPE, "%s: out box %s does not match %s box %s "
                            "(dimension %d is neither equal nor broadcast)", what,
                            ein_box_format(&out->box, b1, sizeof b1), name,
                            ein_box_format(&k->box, b2, sizeof b2), dk);
        }
        s *= hi - lo;
    }
    return 0;
}

/* n elements of k starting at element offset off with element stride inc
 * (0: the same element repeated, 1: contiguous), as f32. */
static void kn_load_inc(const kn_block *k, int64_t off, int64_t inc, float *dst, int64_t n)
{
    if (inc == 1) {
        ein_dtype_to_f32(k->dtype, kn_at(k, off), dst, (size_t)n);
        return;
    }
    float v;
    ein_dtype_to_f32(k->dtype, kn_at(k, off), &v, 1);
    for (int64_t i = 0; i < n; i++)
        dst[i] = v;
}

int kn_cpu_binary(ein_binary op, const kn_block *a, const kn_block *b,
                  kn_block *out, ein_error *err)
{
    if ((int)op < 0 || op >= EIN_BIN_COUNT)
        return ein_fail(err, EIN_EINVAL, "binary: unknown op %d", (int)op);
    char what[32];
    snprintf(what, sizeof what, "binary %s", kn_binary_names[op]);
    int rc;
    if (!out)
        return ein_fail(err, EIN_EINVAL, "%s: missing out", what);
    if (!a || !b)
        return ein_fail(err, EIN_EINVAL, "%s: missing %s", what, a ? "b" : "a");
    if ((rc = kn_check(what, "out", out, out, err)) < 0 ||
        (rc = kn_check(what, "a", a, a, err)) < 0 ||
        (rc = kn_check(what, "b", b, b, err)) < 0)
        return rc;
    int64_t sa[EIN_MAX_RANK], sb[EIN_MAX_RANK];
    int bca, bcb;
    if ((rc = kn_bcast(what, "a", a, out, sa, &bca, err)) < 0 ||
        (rc = kn_bcast(what, "b", b, out, sb, &bcb, err)) < 0)
        return rc;
    int64_t n = ein_box_volume(&out->box);
    if (n <= 0)
        return 0;
    if (!bca && !bcb) {
        /* Equal boxes (up to extent-1 dimensions): flat arrays. */
        if (a->dtype == EIN_F32 && b->dtype == EIN_F32 && out->dtype == EIN_F32) {
            kn_binary_f32(op, a->data, b->data, out->data, n);
            return 0;
        }
        float ba[KN_CHUNK], bb[KN_CHUNK];
        for (int64_t i = 0; i < n; i += KN_CHUNK) {
            int64_t c = n - i < KN_CHUNK ? n - i : KN_CHUNK;
            ein_dtype_to_f32(a->dtype, kn_at(a, i), ba, (size_t)c);
            ein_dtype_to_f32(b->dtype, kn_at(b, i), bb, (size_t)c);
            kn_binary_f32(op, ba, bb, ba, c);
            ein_dtype_from_f32(out->dtype, ba, (void *)kn_at(out, i), (size_t)c);
        }
        return 0;
    }
    /* Broadcasting: walk out row by row (last dimension), each input row
     * contiguous or one repeated element. An input that aliases out has
     * out's box, so it is never broadcast and each chunk is read before it
     * is written. */
    int r = out->box.rank;
    int64_t len = r > 0 ? out->box.hi[r - 1] - out->box.lo[r - 1] : 1;
    int64_t ia = r > 0 ? sa[r - 1] : 0, ib = r > 0 ? sb[r - 1] : 0;
    int64_t idx[EIN_MAX_RANK] = {0}, oa = 0, ob = 0, oy = 0;
    float ba[KN_CHUNK], bb[KN_CHUNK];
    for (;;) {
        for (int64_t i = 0; i < len; i += KN_CHUNK) {
            int64_t c = len - i < KN_CHUNK ? len - i : KN_CHUNK;
            kn_load_inc(a, oa + i * ia, ia, ba, c);
            kn_load_inc(b, ob + i * ib, ib, bb, c);
            kn_binary_f32(op, ba, bb, ba, c);
            ein_dtype_from_f32(out->dtype, ba, (void *)kn_at(out, oy + i), (size_t)c);
        }
        oy += len;
        int d = r - 2;
        for (; d >= 0; d--) {
            int64_t ext = out->box.hi[d] - out->box.lo[d];
            if (++idx[d] < ext) {
                oa += sa[d];
                ob += sb[d];
                break;
            }
            oa -= sa[d] * (ext - 1);
            ob -= sb[d] * (ext - 1);
            idx[d] = 0;
        }
        if (d < 0)
            return 0;
    }
}

int kn_cpu_agg(ein_agg op, const kn_block *srcs, int n, kn_block *out,
               ein_error *err)
{
    if (op == EIN_AGG_LSE)
        return kn_cpu_agg_lse(srcs, n, out, err);
    if (op != EIN_AGG_SUM && op != EIN_AGG_MAX)
        return ein_fail(err, EIN_EINVAL, "agg: op %d is neither sum nor max", (int)op);
    const char *what = op == EIN_AGG_SUM ? "agg sum" : "agg max";
    int rc;
    if (n < 1 || !srcs)
        return ein_fail(err, EIN_EINVAL, "%s: needs at least one source, got %d", what, n);
    if (!out)
        return ein_fail(err, EIN_EINVAL, "%s: missing out", what);
    if ((rc = kn_check(what, "out", out, out, err)) < 0)
        return rc;
    for (int j = 0; j < n; j++) {
        char name[32];
        snprintf(name, sizeof name, "source %d", j);
        if ((rc = kn_check(what, name, &srcs[j], out, err)) < 0)
            return rc;
        if (srcs[j].dtype != out->dtype)
            return ein_fail(err, EIN_ESHAPE, "%s: source %d is %s but out is %s", what, j,
                            ein_dtype_name(srcs[j].dtype), ein_dtype_name(out->dtype));
    }
    int64_t len = ein_box_volume(&out->box);
    if (out->dtype == EIN_F32) {
        /* Sources may alias out, so fold each element left to right in a
         * register before storing. */
        float *y = out->data;
        for (int64_t i = 0; i < len; i += KN_CHUNK) {
            int64_t c = len - i < KN_CHUNK ? len - i : KN_CHUNK;
            float acc[KN_CHUNK];
            memcpy(acc, (const float *)srcs[0].data + i, (size_t)c * sizeof *acc);
            for (int j = 1; j < n; j++)
                kn_agg_f32(op, (const float *)srcs[j].data + i, acc, c);
            memcpy(y + i, acc, (size_t)c * sizeof *acc);
        }
        return 0;
    }
    float acc[KN_CHUNK], buf[KN_CHUNK];
    for (int64_t i = 0; i < len; i += KN_CHUNK) {
        int64_t c = len - i < KN_CHUNK ? len - i : KN_CHUNK;
        ein_dtype_to_f32(out->dtype, kn_at(&srcs[0], i), acc, (size_t)c);
        for (int j = 1; j < n; j++) {
            ein_dtype_to_f32(out->dtype, kn_at(&srcs[j], i), buf, (size_t)c);
            kn_agg_f32(op, buf, acc, c);
        }
        ein_dtype_from_f32(out->dtype, acc, (void *)kn_at(out, i), (size_t)c);
    }
    return 0;
}
