/* tests/kernels/test_kn_fused.c — the fused CPU kernels of issue 33
 * (kn_cpu_swiglu, kn_cpu_add_rmsnorm): each must give the same bytes as
 * the pair of kernels it replaces (silu then mul; add then rmsnorm) in
 * f32, f16 and bf16, and agree within a tolerance with a reference
 * written here in double (NaN fails); blocks that do not start at 0;
 * lengths that are not multiples of the kernels' chunks and lanes; and the
 * refusals of boxes that do not fit, through kn_cpu_run as a worker calls
 * it; the validator's rules for the fused kinds and their wire round trip. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kn_cpu.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;

static double urand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / (double)(1ull << 53) * 2.0 - 1.0;
}

static ein_box box2(int64_t r0, int64_t r1, int64_t c0, int64_t c1)
{
    ein_box b = {.rank = 2};
    b.lo[0] = r0;
    b.hi[0] = r1;
    b.lo[1] = c0;
    b.hi[1] = c1;
    return b;
}

/* A block of dtype t over box b with random values scaled by `scale`
 * (their f32 values in *f, rounded to t). */
static kn_block blk(ein_dtype t, ein_box b, double scale, float **f)
{
    int64_t n = ein_box_volume(&b);
    kn_block k = {.data = calloc((size_t)n + 1, ein_dtype_size(t)), .dtype = t, .box = b};
    float *v = malloc(sizeof(float) * ((size_t)n + 1));
    assert_non_null(k.data);
    assert_non_null(v);
    for (int64_t i = 0; i < n; i++)
        v[i] = (float)(urand() * scale);
    ein_dtype_from_f32(t, v, k.data, (size_t)n);
    ein_dtype_to_f32(t, k.data, v, (size_t)n);
    if (f)
        *f = v;
    else
        free(v);
    return k;
}

static kn_block empty(ein_dtype t, ein_box b)
{
    int64_t n = ein_box_volume(&b);
    kn_block k = {.data = calloc((size_t)n + 1, ein_dtype_size(t)), .dtype = t, .box = b};
    assert_non_null(k.data);
    return k;
}

/* got within tol * (1 + |ref|) of ref; NaN fails. */
static void close_to(const float *got, const double *ref, int64_t n, double tol, const char *what)
{
    for (int64_t i = 0; i < n; i++) {
        double d = (double)got[i] - ref[i];
        if (!(fabs(d) <= tol * (1.0 + fabs(ref[i])))) {
            fprintf(stderr, "%s: element %lld: %g, reference %g\n", what, (long long)i,
                    (double)got[i], ref[i]);
            fail();
        }
    }
}

static const ein_dtype dtypes[] = {EIN_F32, EIN_F16, EIN_BF16};
static const double tols[] = {1e-5, 4e-3, 3e-2};

static void test_swiglu(void **state)
{
    (void)state;
    /* 3 x 1031: neither a multiple of the 1024-element chunks nor of 4 lanes;
     * rows [5, 8) and columns [7, 1038) of a larger tensor; gate values
     * past -80 (silu's exact path) included */
    ein_box b = box2(5, 8, 7, 1038);
    int64_t n = ein_box_volume(&b);
    for (size_t t = 0; t < sizeof dtypes / sizeof *dtypes; t++) {
        float *gf, *uf;
        kn_block g = blk(dtypes[t], b, 9.0, &gf), u = blk(dtypes[t], b, 2.0, &uf);
        if (dtypes[t] == EIN_F32) {
            ((float *)g.data)[3] = -95.0f;
            gf[3] = -95.0f;
        }
        kn_block fused = empty(dtypes[t], b), mid = empty(dtypes[t], b), pair = empty(dtypes[t], b);
        ein_error err = {0};
        ein_kernel ks = {.kind = EIN_KERNEL_SWIGLU};
        kn_block in2[2] = {g, u};
        assert_int_equal(kn_cpu_run(&ks, in2, 2, &fused, &err), 0);
        ein_kernel ku = {.kind = EIN_KERNEL_UNARY, .unary = EIN_UN_SILU};
        ein_kernel km = {.kind = EIN_KERNEL_BINARY, .binary = EIN_BIN_MUL};
        assert_int_equal(kn_cpu_run(&ku, &g, 1, &mid, &err), 0);
        kn_block mu[2] = {mid, u};
        assert_int_equal(kn_cpu_run(&km, mu, 2, &pair, &err), 0);
        assert_memory_equal(fused.data, pair.data, (size_t)n * ein_dtype_size(dtypes[t]));
        /* up * silu(gate) in the other order: the same bytes too */
        kn_block um[2] = {u, mid};
        assert_int_equal(kn_cpu_run(&km, um, 2, &pair, &err), 0);
        assert_memory_equal(fused.data, pair.data, (size_t)n * ein_dtype_size(dtypes[t]));
        float *got = malloc(sizeof(float) * (size_t)n);
        double *ref = malloc(sizeof(double) * (size_t)n);
        assert_non_null(got);
        assert_non_null(ref);
        ein_dtype_to_f32(dtypes[t], fused.data, got, (size_t)n);
        for (int64_t i = 0; i < n; i++)
            ref[i] = (double)gf[i] / (1.0 + exp(-(double)gf[i])) * (double)uf[i];
        close_to(got, ref, n, tols[t], ein_dtype_name(dtypes[t]));
        /* in place: out is gate */
        assert_int_equal(kn_cpu_run(&ks, in2, 2, &g, &err), 0);
        assert_memory_equal(g.data, fused.data, (size_t)n * ein_dtype_size(dtypes[t]));
        free(got);
        free(ref);
        free(gf);
        free(uf);
        free(g.data);
        free(u.data);
        free(fused.data);
        free(mid.data);
        free(pair.data);
    }
}

static void test_add_rmsnorm(void **state)
{
    (void)state;
    const int64_t d = 1037;   /* rows longer than a chunk, not a multiple of 8 lanes */
    ein_box b = box2(2, 6, 0, d);
    ein_box w1 = {.rank = 1};
    w1.hi[0] = d;
    ein_box ob = {.rank = 3};
    ob.hi[0] = 2;
    ob.lo[1] = 2;
    ob.hi[1] = 6;
    ob.hi[2] = d;
    int64_t n = ein_box_volume(&b);
    const double eps = 1e-5;
    for (size_t t = 0; t < sizeof dtypes / sizeof *dtypes; t++) {
        size_t es = ein_dtype_size(dtypes[t]);
        float *af, *bf, *wf;
        kn_block a = blk(dtypes[t], b, 3.0, &af), x = blk(dtypes[t], b, 1.0, &bf);
        kn_block w = blk(dtypes[t], w1, 1.5, &wf);
        kn_block fused = empty(dtypes[t], ob), h = empty(dtypes[t], b), hn = empty(dtypes[t], b);
        ein_error err = {0};
        ein_kernel kf = {.kind = EIN_KERNEL_ADD_RMSNORM, .eps = eps};
        kn_block in3[3] = {a, x, w};
        assert_int_equal(kn_cpu_run(&kf, in3, 3, &fused, &err), 0);
        ein_kernel ka = {.kind = EIN_KERNEL_BINARY, .binary = EIN_BIN_ADD};
        ein_kernel kr = {.kind = EIN_KERNEL_RMSNORM, .eps = eps};
        kn_block ab[2] = {a, x};
        assert_int_equal(kn_cpu_run(&ka, ab, 2, &h, &err), 0);
        kn_block hw[2] = {h, w};
        assert_int_equal(kn_cpu_run(&kr, hw, 2, &hn, &err), 0);
        assert_memory_equal(fused.data, h.data, (size_t)n * es);
        assert_memory_equal((char *)fused.data + (size_t)n * es, hn.data, (size_t)n * es);
        /* against double: the sum, then the normalised rows of the rounded sum */
        float *got = malloc(sizeof(float) * 2 * (size_t)n), *hr = malloc(sizeof(float) * (size_t)n);
        double *ref = malloc(sizeof(double) * 2 * (size_t)n);
        assert_non_null(got);
        assert_non_null(hr);
        assert_non_null(ref);
        ein_dtype_to_f32(dtypes[t], fused.data, got, 2 * (size_t)n);
        for (int64_t i = 0; i < n; i++)
            ref[i] = (double)af[i] + (double)bf[i];
        ein_dtype_to_f32(dtypes[t], h.data, hr, (size_t)n);
        for (int64_t r = 0; r < n / d; r++) {
            double sq = 0;
            for (int64_t i = 0; i < d; i++)
                sq += (double)hr[r * d + i] * hr[r * d + i];
            double rs = 1.0 / sqrt(sq / (double)d + eps);
            for (int64_t i = 0; i < d; i++)
                ref[n + r * d + i] = (double)hr[r * d + i] * rs * wf[i];
        }
        close_to(got, ref, 2 * n, tols[t], ein_dtype_name(dtypes[t]));
        free(got);
        free(hr);
        free(ref);
        free(af);
        free(bf);
        free(wf);
        free(a.data);
        free(x.data);
        free(w.data);
        free(fused.data);
        free(h.data);
        free(hn.data);
    }
}

/* Boxes that do not fit are refused with EIN_ESHAPE, naming the kernel. */
static void test_refusals(void **state)
{
    (void)state;
    ein_box b = box2(0, 4, 0, 16), other = box2(0, 4, 0, 8);
    ein_box w1 = {.rank = 1};
    w1.hi[0] = 16;
    kn_block g = blk(EIN_F32, b, 1.0, NULL), u = blk(EIN_F32, other, 1.0, NULL);
    kn_block out = empty(EIN_F32, b), w = blk(EIN_F32, w1, 1.0, NULL);
    ein_error err = {0};
    ein_kernel ks = {.kind = EIN_KERNEL_SWIGLU};
    kn_block gu[2] = {g, u};
    assert_int_equal(kn_cpu_run(&ks, gu, 2, &out, &err), EIN_ESHAPE);
    assert_non_null(strstr(err.msg, "swiglu"));
    kn_block gg[2] = {g, g};
    assert_int_equal(kn_cpu_run(&ks, gg, 1, &out, &err), EIN_EINVAL); /* arity */
    /* add_rmsnorm: out must be [0, 2) x the sources' box */
    ein_kernel kf = {.kind = EIN_KERNEL_ADD_RMSNORM, .eps = 1e-5};
    kn_block in3[3] = {g, g, w};
    memset(&err, 0, sizeof err);
    assert_int_equal(kn_cpu_run(&kf, in3, 3, &out, &err), EIN_ESHAPE);
    assert_non_null(strstr(err.msg, "add_rmsnorm"));
    /* a and b of different boxes */
    ein_box ob = {.rank = 3};
    ob.hi[0] = 2;
    ob.hi[1] = 4;
    ob.hi[2] = 16;
    kn_block o2 = empty(EIN_F32, ob);
    kn_block bad[3] = {g, u, w};
    assert_int_equal(kn_cpu_run(&kf, bad, 3, &o2, &err), EIN_ESHAPE);
    /* a block without the whole last axis */
    ein_box part = box2(0, 4, 4, 20), obp = {.rank = 3};
    obp.hi[0] = 2;
    obp.hi[1] = 4;
    obp.lo[2] = 4;
    obp.hi[2] = 20;
    kn_block p = blk(EIN_F32, part, 1.0, NULL), op = empty(EIN_F32, obp);
    kn_block pp[3] = {p, p, w};
    assert_int_equal(kn_cpu_run(&kf, pp, 3, &op, &err), EIN_ESHAPE);
    free(g.data);
    free(u.data);
    free(out.data);
    free(w.data);
    free(o2.data);
    free(p.data);
    free(op.data);
}

/* The validator's rules for the fused kinds: a well-formed program with
 * both passes and survives encode/decode; a dst box that is not [0, 2) x
 * the sources' and sources of different boxes are refused, naming them. */
static int vprog(ein_kernel_kind kind, ein_box b0, ein_box b1, ein_box out, ein_error *err)
{
    ein_program *p = ein_program_new(0, 1), *q = NULL;
    assert_non_null(p);
    ein_box w = {.rank = 1};
    w.hi[0] = b0.rank ? b0.hi[b0.rank - 1] : 1;
    int a = ein_program_add_buffer(p, EIN_F32, &b0, err), b = ein_program_add_buffer(p, EIN_F32, &b1, err);
    int wb = ein_program_add_buffer(p, EIN_BF16, &w, err), o = ein_program_add_buffer(p, EIN_F32, &out, err);
    assert_true(a >= 0 && b >= 0 && wb >= 0 && o >= 0);
    int32_t srcs[3] = {a, b, wb};
    ein_instr ins = {.kind = EIN_I_KERNEL, .srcs = srcs, .nsrcs = kind == EIN_KERNEL_SWIGLU ? 2 : 3,
                     .dst = o, .op = "f", .kernel = {.kind = kind, .eps = 1e-5}};
    assert_true(ein_program_add_instr(p, &ins, err) >= 0);
    int rc = ein_program_validate(p, err);
    if (rc == 0) {
        void *buf = NULL;
        size_t len = 0;
        assert_int_equal(ein_program_encode(p, &buf, &len, err), 0);
        assert_int_equal(ein_program_decode(buf, len, &q, err), 0);
        assert_int_equal(q->instrs[0].kernel.kind, kind);
        assert_true(q->instrs[0].kernel.eps == (kind == EIN_KERNEL_SWIGLU ? 0.0 : 1e-5));
        free(buf);
        ein_program_free(q);
    }
    ein_program_free(p);
    return rc;
}

static void test_validate(void **state)
{
    (void)state;
    ein_error err = {0};
    ein_box b = box2(4, 9, 0, 16), other = box2(4, 9, 0, 8);
    ein_box pk = {.rank = 3};
    pk.hi[0] = 2;
    pk.lo[1] = 4;
    pk.hi[1] = 9;
    pk.hi[2] = 16;
    assert_int_equal(vprog(EIN_KERNEL_SWIGLU, b, b, b, &err), 0);
    assert_int_equal(vprog(EIN_KERNEL_ADD_RMSNORM, b, b, pk, &err), 0);
    assert_int_equal(vprog(EIN_KERNEL_SWIGLU, b, other, b, &err), EIN_EPROTO);
    assert_non_null(strstr(err.msg, "swiglu: source buffers 0 and 1 have different boxes"));
    assert_int_equal(vprog(EIN_KERNEL_SWIGLU, b, b, other, &err), EIN_EPROTO);
    assert_non_null(strstr(err.msg, "swiglu: source buffer 0's box differs from dst's"));
    assert_int_equal(vprog(EIN_KERNEL_ADD_RMSNORM, b, b, b, &err), EIN_EPROTO);
    assert_non_null(strstr(err.msg, "add_rmsnorm: dst box is not [0, 2) x the sources' box"));
    pk.hi[0] = 3;
    assert_int_equal(vprog(EIN_KERNEL_ADD_RMSNORM, b, b, pk, &err), EIN_EPROTO);
    assert_non_null(strstr(err.msg, "add_rmsnorm: dst box"));
    /* the sources must hold the whole last axis from 0 */
    ein_box part = box2(4, 9, 8, 24), pkp = {.rank = 3};
    pkp.hi[0] = 2;
    pkp.lo[1] = 4;
    pkp.hi[1] = 9;
    pkp.lo[2] = 8;
    pkp.hi[2] = 24;
    assert_int_equal(vprog(EIN_KERNEL_ADD_RMSNORM, part, part, pkp, &err), EIN_EPROTO);
    assert_non_null(strstr(err.msg, "add_rmsnorm: weight buffer 2 is not rank 1 over the sources' "
                           "whole last interval"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_swiglu),
        cmocka_unit_test(test_add_rmsnorm),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_validate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
