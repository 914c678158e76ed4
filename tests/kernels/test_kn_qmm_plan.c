/* tests/kernels/test_kn_qmm_plan.c — the host side of the CUDA products by
 * quantized weights (kernels/cuda/kn_qmm_plan.c, issue 36), without CUDA:
 * which path a shape takes (GEMV up to 16 rows, 8 a launch, dequantised tiles +
 * cuBLAS above), the tile size from the scratch, and every refusal by
 * name (another einsum form, non-float a or out, boxes that disagree or
 * leave the 32-element blocks (128 for f8e4m3), out in a third dtype on
 * the cuBLAS path, no scratch); f8e4m3's plans and the reason its dequant
 * path records. The kernels themselves are compared with the CPU kernels
 * in tests/kernels/test_kn_cuda (GPU only). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "kernels/cuda/kn_qmm_plan.h"

static char dummy[16];

static kn_block blk(ein_dtype t, int rank, const int64_t *lo, const int64_t *hi)
{
    kn_block b = {.data = dummy, .dtype = t, .box = {.rank = rank}};
    for (int d = 0; d < rank; d++)
        b.box.lo[d] = lo[d], b.box.hi[d] = hi[d];
    return b;
}

/* a [m, k] adt, b [n, k] bdt, out [m, n] odt planned with scratch cap. */
static int plan2(int64_t m, int64_t n, int64_t k, ein_dtype adt, ein_dtype bdt, ein_dtype odt,
                 size_t cap, kn_qmm_plan *p, ein_error *err)
{
    kn_block a = blk(adt, 2, (int64_t[]){0, 0}, (int64_t[]){m, k});
    kn_block b = blk(bdt, 2, (int64_t[]){0, 0}, (int64_t[]){n, k});
    kn_block o = blk(odt, 2, (int64_t[]){0, 0}, (int64_t[]){m, n});
    memset(err, 0, sizeof *err);
    return kn_qmm_plan_make("ti,oi->to", &a, &b, &o, cap, p, err);
}

static void test_paths(void **state)
{
    (void)state;
    kn_qmm_plan p;
    ein_error err;
    const ein_dtype q[2] = {EIN_Q8_0, EIN_Q4_0};
    const int64_t rows[] = {1, 2, 7, 8, 9, 16};
    const int want_rows[] = {1, 8, 8, 8, 8, 8}, want_launches[] = {1, 1, 1, 1, 2, 2};
    for (int t = 0; t < 2; t++) {
        for (int r = 0; r < 6; r++) {
            assert_int_equal(plan2(rows[r], 4096, 4096, EIN_BF16, q[t], EIN_F16, 0, &p, &err), 0);
            assert_int_equal(p.path, KN_QMM_GEMV);
            assert_int_equal(p.rows, want_rows[r]);
            assert_int_equal(p.launches, want_launches[r]);
            assert_int_equal(p.m, rows[r]);
            assert_int_equal(p.n, 4096);
            assert_int_equal(p.k, 4096);
            assert_int_equal(p.ldb, 128 * (t == 0 ? 34 : 18));
        }
        /* 17 rows: dequantised tiles of a's dtype in the scratch */
        assert_int_equal(plan2(17, 14336, 4096, EIN_BF16, q[t], EIN_F32, 32u << 20, &p, &err), 0);
        assert_int_equal(p.path, KN_QMM_DEQUANT);
        assert_int_equal(p.tile_rows, 4096);          /* 32 MiB / (4096 * 2 bytes) */
        assert_int_equal(p.tile_bytes, (size_t)4096 * 4096 * 2);
        assert_int_equal(plan2(64, 4096, 14336, EIN_F32, q[t], EIN_F32, 32u << 20, &p, &err), 0);
        assert_int_equal(p.tile_rows, 576);           /* 585 rows fit, in whole 64-row tiles */
        assert_true(p.tile_bytes <= 32u << 20);
        /* a small n: one tile of all of it */
        assert_int_equal(plan2(64, 40, 64, EIN_F16, q[t], EIN_F16, 32u << 20, &p, &err), 0);
        assert_int_equal(p.tile_rows, 40);
    }
    /* f8e4m3: blocks of 128 (132 bytes), the same paths; the dequant one
     * says why it is not fp8 tensor cores */
    for (int r = 0; r < 6; r++) {
        assert_int_equal(plan2(rows[r], 4096, 4096, EIN_BF16, EIN_F8E4M3, EIN_F32, 0, &p, &err),
                         0);
        assert_int_equal(p.path, KN_QMM_GEMV);
        assert_int_equal(p.rows, want_rows[r]);
        assert_int_equal(p.launches, want_launches[r]);
        assert_int_equal(p.ldb, 32 * 132);
        assert_string_equal(p.why, "");
        kn_qmm_plan_fp8(&p, 90, 130100, 32u << 20);   /* the GEMV stays */
        assert_int_equal(p.path, KN_QMM_GEMV);
    }
    assert_int_equal(plan2(4096, 4096, 4096, EIN_BF16, EIN_F8E4M3, EIN_BF16, 32u << 20, &p, &err),
                     0);
    assert_int_equal(p.path, KN_QMM_DEQUANT);
    assert_int_equal(p.tile_rows, 4096);
    assert_non_null(strstr(p.why, "not asked for"));
    /* the fp8 path: sm_90+, cuBLASLt 12.9+, a tile in the scratch */
    kn_qmm_plan f = p;
    kn_qmm_plan_fp8(&f, 80, 130100, 32u << 20);
    assert_int_equal(f.path, KN_QMM_DEQUANT);
    assert_non_null(strstr(f.why, "need sm_90 or newer; this is sm_80"));
    f = p;
    kn_qmm_plan_fp8(&f, 90, 120805, 32u << 20);
    assert_int_equal(f.path, KN_QMM_DEQUANT);
    assert_non_null(strstr(f.why, "cuBLASLt 12.9 or newer; this is 120805"));
    f = p;
    kn_qmm_plan_fp8(&f, 90, 0, 32u << 20);
    assert_non_null(strstr(f.why, "built without cuBLASLt"));
    f = p;
    kn_qmm_plan_fp8(&f, 90, 120900, 32u << 20);   /* 4096 + 4096 rows of 4224 bytes: tiles */
    assert_int_equal(f.path, KN_QMM_FP8);
    assert_string_equal(f.why, "");
    assert_int_equal(f.fp8_n_rows, 3968);          /* (16 MiB - 1 KiB) / 4224 = 3971, whole 128s */
    assert_int_equal(f.fp8_m_rows, 3968);
    assert_true(kn_qmm_fp8_bytes(f.fp8_m_rows, f.fp8_n_rows, 4096) <= 32u << 20);
    f = p;
    kn_qmm_plan_fp8(&f, 100, 130100, 100u << 10); /* 16 + 16 rows need 132 KiB */
    assert_int_equal(f.path, KN_QMM_DEQUANT);
    assert_non_null(strstr(f.why, "holds no tile of 16 rows"));
    /* small: all of m and n in one tile */
    assert_int_equal(plan2(64, 40, 256, EIN_F16, EIN_F8E4M3, EIN_F32, 32u << 20, &p, &err), 0);
    kn_qmm_plan_fp8(&p, 90, 120900, 32u << 20);
    assert_int_equal(p.path, KN_QMM_FP8);
    assert_int_equal(p.fp8_m_rows, 64);
    assert_int_equal(p.fp8_n_rows, 40);
    assert_int_equal(kn_qmm_fp8_bytes(64, 40, 256), 16384 + 512 + 10240 + 512);
    /* other dtypes are left alone */
    assert_int_equal(plan2(17, 64, 64, EIN_F32, EIN_Q8_0, EIN_F32, 1u << 20, &p, &err), 0);
    kn_qmm_plan_fp8(&p, 90, 130100, 1u << 20);
    assert_int_equal(p.path, KN_QMM_DEQUANT);
    assert_string_equal(p.why, "");
    /* nothing to do: path 0 (k == 0: the caller writes zeros) */
    assert_int_equal(plan2(3, 8, 0, EIN_F32, EIN_Q8_0, EIN_F32, 0, &p, &err), 0);
    assert_int_equal(p.path, 0);
    assert_int_equal(plan2(0, 8, 32, EIN_F32, EIN_Q8_0, EIN_F32, 0, &p, &err), 0);
    assert_int_equal(p.path, 0);
    /* a of rank 3 ("bti,oi->bto"): m is the product of its other dims */
    kn_block a = blk(EIN_F16, 3, (int64_t[]){0, 4, 0}, (int64_t[]){2, 7, 64});
    kn_block b = blk(EIN_Q4_0, 2, (int64_t[]){16, 0}, (int64_t[]){48, 64});
    kn_block o = blk(EIN_F32, 3, (int64_t[]){0, 4, 16}, (int64_t[]){2, 7, 48});
    assert_int_equal(kn_qmm_plan_make("bti,oi->bto", &a, &b, &o, 0, &p, &err), 0);
    assert_int_equal(p.m, 6);
    assert_int_equal(p.n, 32);
    assert_int_equal(p.path, KN_QMM_GEMV);
}

static void refused(int rc, int code, const ein_error *err, const char *words)
{
    assert_int_equal(rc, code);
    if (!strstr(err->msg, words))
        fail_msg("message \"%s\" lacks \"%s\"", err->msg, words);
}

static void test_refusals(void **state)
{
    (void)state;
    kn_qmm_plan p;
    ein_error err;
    /* more than 16 rows with no scratch */
    refused(plan2(17, 64, 64, EIN_F32, EIN_Q8_0, EIN_F32, 0, &p, &err), EIN_EUNSUPPORTED, &err,
            "bytes of scratch");
    /* scratch smaller than one dequantised row */
    refused(plan2(17, 64, 64, EIN_F32, EIN_Q8_0, EIN_F32, 255, &p, &err), EIN_EUNSUPPORTED, &err,
            "the context has 255");
    /* cuBLAS's rule on the dequant path: out f32 or a's dtype */
    refused(plan2(17, 64, 64, EIN_BF16, EIN_Q4_0, EIN_F16, 1u << 20, &p, &err),
            EIN_EUNSUPPORTED, &err, "out must be f32 or a's dtype");
    /* ... which the GEMV path does not have */
    assert_int_equal(plan2(16, 64, 64, EIN_BF16, EIN_Q4_0, EIN_F16, 0, &p, &err), 0);
    /* a or out not a float dtype */
    refused(plan2(1, 64, 64, EIN_I32, EIN_Q8_0, EIN_F32, 0, &p, &err), EIN_EINVAL, &err,
            "a is i32");
    refused(plan2(1, 64, 64, EIN_F32, EIN_Q8_0, EIN_Q8_0, 0, &p, &err), EIN_EINVAL, &err,
            "out q8_0");
    /* b not quantized */
    refused(plan2(1, 64, 64, EIN_F32, EIN_F32, EIN_F32, 0, &p, &err), EIN_EINVAL, &err,
            "not a quantized dtype");
    /* another form: weights [in, out], or a transposed out */
    kn_block a = blk(EIN_F32, 2, (int64_t[]){0, 0}, (int64_t[]){4, 64});
    kn_block b = blk(EIN_Q8_0, 2, (int64_t[]){0, 0}, (int64_t[]){64, 64});
    kn_block o = blk(EIN_F32, 2, (int64_t[]){0, 0}, (int64_t[]){4, 64});
    refused(kn_qmm_plan_make("ti,io->to", &a, &b, &o, 0, &p, &err), EIN_EUNSUPPORTED, &err,
            "quantized weights are read only as b");
    refused(kn_qmm_plan_make("ti,oi->ot", &a, &b, &o, 0, &p, &err), EIN_EUNSUPPORTED, &err,
            "q8_0");
    refused(kn_qmm_plan_make("ti,oi", &a, &b, &o, 0, &p, &err), EIN_EINVAL, &err, "");
    /* k off the blocks, boxes that disagree */
    kn_block a2 = blk(EIN_F32, 2, (int64_t[]){0, 16}, (int64_t[]){4, 48});
    kn_block b2 = blk(EIN_Q4_0, 2, (int64_t[]){0, 16}, (int64_t[]){64, 48});
    refused(kn_qmm_plan_make("ti,oi->to", &a2, &b2, &o, 0, &p, &err), EIN_ESHAPE, &err,
            "32-element q4_0 blocks");
    /* on 32-element blocks but not f8e4m3's 128 */
    kn_block a5 = blk(EIN_F32, 2, (int64_t[]){0, 32}, (int64_t[]){4, 160});
    kn_block b5 = blk(EIN_F8E4M3, 2, (int64_t[]){0, 32}, (int64_t[]){64, 160});
    refused(kn_qmm_plan_make("ti,oi->to", &a5, &b5, &o, 0, &p, &err), EIN_ESHAPE, &err,
            "128-element f8e4m3 blocks");
    kn_block o3 = blk(EIN_F32, 2, (int64_t[]){0, 0}, (int64_t[]){4, 32});
    refused(kn_qmm_plan_make("ti,oi->to", &a, &b, &o3, 0, &p, &err), EIN_ESHAPE, &err,
            "disagree on k or n");
    kn_block a4 = blk(EIN_F32, 2, (int64_t[]){0, 0}, (int64_t[]){5, 64});
    refused(kn_qmm_plan_make("ti,oi->to", &a4, &b, &o, 0, &p, &err), EIN_ESHAPE, &err,
            "a and out differ in dim 0");
    kn_block b3 = blk(EIN_Q8_0, 3, (int64_t[]){0, 0, 0}, (int64_t[]){1, 64, 64});
    refused(kn_qmm_plan_make("ti,oi->to", &a, &b3, &o, 0, &p, &err), EIN_ESHAPE, &err,
            "box ranks");
    refused(kn_qmm_plan_make("ti,oi->to", NULL, &b, &o, 0, &p, &err), EIN_EINVAL, &err,
            "missing");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paths),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
