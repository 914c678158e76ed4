/* kernels/cuda/kn_qmm_plan.c — see kn_qmm_plan.h. */
#include "kernels/cuda/kn_qmm_plan.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "common/ir/ein_einsum.h"

/* "<A>k,nk-><A>n": the letters of a, b and out, as the CPU kernel takes
 * them (kn_einsum_q). */
static int qmm_form(const ein_einsum_sub *s)
{
    int ra = s->rank[0];
    int ok = s->nops == 2 && s->rank[1] == 2 && ra >= 1 && s->out_rank == ra &&
             s->ops[0][ra - 1] == s->ops[1][1] && s->out[ra - 1] == s->ops[1][0] &&
             s->ops[1][0] != s->ops[1][1];
    for (int d = 0; ok && d < ra - 1; d++)
        ok = s->ops[0][d] == s->out[d] && s->ops[0][d] != s->ops[1][0] &&
             s->ops[0][d] != s->ops[1][1];
    return ok;
}

static int qmm_boxes(const char *subs, const kn_block *a, const kn_block *b, const kn_block *out,
                     int ra, kn_qmm_plan *p, ein_error *err)
{
    if (a->box.rank != ra || b->box.rank != 2 || out->box.rank != ra)
        return ein_fail(err, EIN_ESHAPE, "cuda einsum %s: box ranks do not match the subscripts",
                        subs);
    p->m = 1;
    for (int d = 0; d < ra - 1; d++) {
        if (a->box.lo[d] != out->box.lo[d] || a->box.hi[d] != out->box.hi[d])
            return ein_fail(err, EIN_ESHAPE, "cuda einsum %s: a and out differ in dim %d", subs,
                            d);
        p->m *= a->box.hi[d] - a->box.lo[d];
    }
    p->k = b->box.hi[1] - b->box.lo[1];
    p->n = b->box.hi[0] - b->box.lo[0];
    if (a->box.lo[ra - 1] != b->box.lo[1] || a->box.hi[ra - 1] != b->box.hi[1] ||
        out->box.lo[ra - 1] != b->box.lo[0] || out->box.hi[ra - 1] != b->box.hi[0] ||
        p->m < 0 || p->n < 0 || p->k < 0)
        return ein_fail(err, EIN_ESHAPE, "cuda einsum %s: the boxes of a, b and out disagree "
                        "on k or n", subs);
    if (!ein_dtype_box_ok(b->dtype, &b->box))
        return ein_fail(err, EIN_ESHAPE, "cuda einsum %s: b's k interval [%lld, %lld) is not on "
                        "%d-element %s blocks", subs, (long long)b->box.lo[1],
                        (long long)b->box.hi[1], ein_dtype_block((int)b->dtype),
                        ein_dtype_name(b->dtype));
    return 0;
}

int kn_qmm_plan_make(const char *subs, const kn_block *a, const kn_block *b,
                     const kn_block *out, size_t scratch_cap, kn_qmm_plan *p, ein_error *err)
{
    if (!subs || !a || !b || !out || !p)
        return ein_fail(err, EIN_EINVAL, "cuda einsum: missing subscripts, operand or plan");
    memset(p, 0, sizeof *p);
    if (!ein_dtype_is_block((int)b->dtype))
        return ein_fail(err, EIN_EINVAL, "cuda einsum %s: b is %s, not a quantized dtype", subs,
                        ein_dtype_name(b->dtype));
    const char *bn = ein_dtype_name(b->dtype);
    ein_einsum_sub s;
    int rc = ein_einsum_parse_flags(subs, EIN_EINSUM_SCALARS, &s, err);
    if (rc < 0)
        return rc;
    if (!qmm_form(&s))
        return ein_fail(err, EIN_EUNSUPPORTED, "cuda einsum %s: b is %s; quantized weights are "
                        "read only as b of \"...k,nk->...n\" (weights [out, in], in contracted)",
                        subs, bn);
    if (!ein_dtype_is_float((int)a->dtype) || !ein_dtype_is_float((int)out->dtype))
        return ein_fail(err, EIN_EINVAL, "cuda einsum %s: b is %s but a is %s and out %s; they "
                        "must be %s", subs, bn, ein_dtype_name(a->dtype),
                        ein_dtype_name(out->dtype), ein_dtype_float_names());
    if ((rc = qmm_boxes(subs, a, b, out, s.rank[0], p, err)) < 0)
        return rc;
    if (p->m > INT_MAX || p->n > INT_MAX || p->k > INT_MAX)
        return ein_fail(err, EIN_EUNSUPPORTED, "cuda einsum %s: a dimension of %lld x %lld x "
                        "%lld exceeds INT_MAX", subs, (long long)p->m, (long long)p->n,
                        (long long)p->k);
    p->ldb = (int64_t)ein_dtype_bytes(b->dtype, (uint64_t)p->k);
    if (p->m == 0 || p->n == 0 || p->k == 0)
        return 0;
    if (p->m <= KN_QMM_GEMV_MAX_ROWS) {
        p->path = KN_QMM_GEMV;
        p->rows = p->m <= 1 ? 1 : KN_QMM_GEMV_LAUNCH_ROWS;
        p->launches = (int)((p->m + KN_QMM_GEMV_LAUNCH_ROWS - 1) / KN_QMM_GEMV_LAUNCH_ROWS);
        return 0;
    }
    if (out->dtype != EIN_F32 && out->dtype != a->dtype)
        return ein_fail(err, EIN_EUNSUPPORTED, "cuda einsum %s: %lld rows of %s by %s weights "
                        "into %s: over %d rows out must be f32 or a's dtype (cuBLAS multiplies "
                        "the dequantised tiles)", subs, (long long)p->m, ein_dtype_name(a->dtype),
                        bn, ein_dtype_name(out->dtype), KN_QMM_GEMV_MAX_ROWS);
    const size_t row = (size_t)p->k * ein_dtype_size(a->dtype);
    int64_t t = (int64_t)(scratch_cap / row);
    if (t < 1)
        return ein_fail(err, EIN_EUNSUPPORTED, "cuda einsum %s: %lld rows of %s weights need "
                        "%zu bytes of scratch per dequantised weight row; the context has %zu",
                        subs, (long long)p->m, bn, row, scratch_cap);
    if (t > p->n)
        t = p->n;
    else if (t >= 64)
        t -= t % 64; /* whole tiles of cuBLAS's usual 64/128-wide blocks */
    p->path = KN_QMM_DEQUANT;
    p->tile_rows = t;
    p->tile_bytes = (size_t)t * row;
    if (b->dtype == EIN_F8E4M3) {
        p->f8 = 1;
        snprintf(p->why, sizeof p->why, "f8e4m3 over 16 rows: dequantised tiles and "
                 "cuBLAS (the fp8 path was not asked for)");
    }
    return 0;
}

static size_t fp8_up(size_t x)
{
    return (x + 255) & ~(size_t)255;
}

size_t kn_qmm_fp8_bytes(int64_t mr, int64_t nr, int64_t k)
{
    const size_t kb = (size_t)(k / 128);
    return fp8_up((size_t)mr * (size_t)k) + fp8_up((size_t)mr * kb * 4) +
           fp8_up((size_t)nr * (size_t)k) + fp8_up((size_t)nr * kb * 4);
}

void kn_qmm_plan_fp8(kn_qmm_plan *p, int sm, size_t lt_version, size_t scratch_cap)
{
    if (!p || !p->f8 || p->path != KN_QMM_DEQUANT)
        return;
    const char *pre = "f8e4m3 over 16 rows: dequantised tiles and cuBLAS, not cuBLASLt's fp8 "
                      "products with VEC128_32F scales";
    if (lt_version == 0) {
        snprintf(p->why, sizeof p->why, "%s (built without cuBLASLt)", pre);
        return;
    }
    if (sm < 90) {
        snprintf(p->why, sizeof p->why, "%s (they need sm_90 or newer; this is sm_%d)",
                 pre, sm);
        return;
    }
    if (lt_version < 120900) {
        snprintf(p->why, sizeof p->why, "%s (they need cuBLASLt 12.9 or newer; this is "
                 "%zu)", pre, lt_version);
        return;
    }
    int64_t mr = p->m, nr = p->n;
    if (kn_qmm_fp8_bytes(mr, nr, p->k) > scratch_cap) {
        /* about half the scratch each, whole 128-row tiles */
        const size_t row = (size_t)p->k + (size_t)(p->k / 128) * 4;
        const int64_t half = (int64_t)((scratch_cap / 2 > 1024 ? scratch_cap / 2 - 1024 : 0) / row);
        int64_t t = half >= 128 ? half - half % 128 : half;
        nr = nr < t ? nr : t;
        mr = mr < t ? mr : t;
        while (mr > 16 && kn_qmm_fp8_bytes(mr, nr, p->k) > scratch_cap)
            mr -= 16;
    }
    if (mr < 16 || nr < 16 || kn_qmm_fp8_bytes(mr, nr, p->k) > scratch_cap) {
        snprintf(p->why, sizeof p->why, "%s (the scratch, %zu bytes, holds no tile of 16 "
                 "rows of k %lld)", pre, scratch_cap, (long long)p->k);
        return;
    }
    p->path = KN_QMM_FP8;
    p->fp8_m_rows = mr;
    p->fp8_n_rows = nr;
    p->why[0] = '\0';
}
