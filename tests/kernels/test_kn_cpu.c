/* tests/kernels/test_kn_cpu.c — the CPU kernels against naive loops.
 *
 * Every block is a sub-box with non-zero offsets and odd extents of some
 * larger tensor. The references index by global coordinates and compute in
 * double from exactly the (dtype-rounded) values the kernel reads; outputs
 * start as all-ones bytes (NaN in every dtype), so an element the kernel
 * forgets to write fails the comparison. EIN_TEST_SEED overrides the seed. */
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

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Uniform in [lo, hi]. */
static int64_t rnd_int(int64_t lo, int64_t hi)
{
    return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1));
}

static float rnd_float(float scale)
{
    return scale * ((float)(rnd() >> 40) / (float)(1 << 24) * 2.0f - 1.0f);
}

/* A block plus the f32 values the kernel sees in it. */
typedef struct tblock {
    kn_block b;
    float *f;
} tblock;

static void tb_alloc(tblock *t, ein_dtype dt, const ein_box *box)
{
    int64_t n = ein_box_volume(box);
    t->b.dtype = dt;
    t->b.box = *box;
    t->b.data = malloc((size_t)(n > 0 ? n : 1) * ein_dtype_size(dt));
    t->f = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    assert_non_null(t->b.data);
    assert_non_null(t->f);
}

/* Random input, rounded to dtype. */
static void tb_rand(tblock *t, ein_dtype dt, const ein_box *box, float scale)
{
    tb_alloc(t, dt, box);
    int64_t n = ein_box_volume(box);
    for (int64_t i = 0; i < n; i++)
        t->f[i] = rnd_float(scale);
    ein_dtype_from_f32(dt, t->f, t->b.data, (size_t)n);
    ein_dtype_to_f32(dt, t->b.data, t->f, (size_t)n);
}

/* Output, poisoned with NaN. */
static void tb_out(tblock *t, ein_dtype dt, const ein_box *box)
{
    tb_alloc(t, dt, box);
    memset(t->b.data, 0xff, (size_t)ein_box_volume(box) * ein_dtype_size(dt));
}

/* Read the output back as f32. */
static void tb_read(tblock *t)
{
    ein_dtype_to_f32(t->b.dtype, t->b.data, t->f, (size_t)ein_box_volume(&t->b.box));
}

static void tb_free(tblock *t)
{
    free(t->b.data);
    free(t->f);
    t->b.data = NULL;
    t->f = NULL;
}

/* Relative tolerance of a result stored in dtype (its half ulp and some
 * f32 accumulation slack). */
static double tol_rel(ein_dtype dt)
{
    return dt == EIN_F32 ? 1e-4 : dt == EIN_F16 ? 2e-3 : 1e-2;
}

static const ein_dtype dtypes[] = {EIN_F32, EIN_F16, EIN_BF16};

/* ---- einsum reference ------------------------------------------------ */

typedef struct tsubs {
    int n;               /* operands */
    char op[3][16];      /* a, b, out letters */
} tsubs;

static void tsubs_parse(const char *s, tsubs *t)
{
    memset(t, 0, sizeof *t);
    const char *arrow = strstr(s, "->");
    const char *comma = strchr(s, ',');
    assert_non_null(arrow);
    if (comma && comma < arrow) {
        t->n = 2;
        memcpy(t->op[0], s, (size_t)(comma - s));
        memcpy(t->op[1], comma + 1, (size_t)(arrow - comma - 1));
    } else {
        t->n = 1;
        memcpy(t->op[0], s, (size_t)(arrow - s));
    }
    strcpy(t->op[2], arrow + 2);
}

static ein_box tsubs_box(const char *letters, const int64_t *lo, const int64_t *hi)
{
    ein_box b;
    memset(&b, 0, sizeof b);
    b.rank = (int)strlen(letters);
    for (int d = 0; d < b.rank; d++) {
        b.lo[d] = lo[letters[d] - 'a'];
        b.hi[d] = hi[letters[d] - 'a'];
    }
    return b;
}

/* Flat row-major offset of the global index `g` (per letter) in a block. */
static int64_t toff(const char *letters, const ein_box *box, const int64_t *g)
{
    int64_t o = 0;
    for (int d = 0; d < box->rank; d++)
        o = o * (box->hi[d] - box->lo[d]) + (g[letters[d] - 'a'] - box->lo[d]);
    return o;
}

/* ref[o] = sum a*b, mag[o] = sum |a*b| over every letter's interval. */
static void ref_einsum(const tsubs *t, const tblock *a, const tblock *b, const tblock *out,
                       const int64_t *lo, const int64_t *hi, double *ref, double *mag)
{
    char all[27] = {0};
    int nl = 0;
    for (int x = 0; x < 3; x++)
        for (const char *p = t->op[x]; *p; p++)
            if (!strchr(all, *p))
                all[nl++] = *p;
    int64_t nout = ein_box_volume(&out->b.box);
    for (int64_t i = 0; i < nout; i++)
        ref[i] = mag[i] = 0.0;
    for (int i = 0; i < nl; i++)
        if (hi[all[i] - 'a'] <= lo[all[i] - 'a'])
            return;
    int64_t g[26];
    for (int i = 0; i < nl; i++)
        g[all[i] - 'a'] = lo[all[i] - 'a'];
    for (;;) {
        double v = a->f[toff(t->op[0], &a->b.box, g)];
        if (t->n == 2)
            v *= b->f[toff(t->op[1], &b->b.box, g)];
        int64_t o = toff(t->op[2], &out->b.box, g);
        ref[o] += v;
        mag[o] += fabs(v);
        int i = nl - 1;
        for (; i >= 0; i--) {
            int L = all[i] - 'a';
            if (++g[L] < hi[L])
                break;
            g[L] = lo[L];
        }
        if (i < 0)
            break;
    }
}

/* Run one einsum on random blocks with letter extents in [1, maxe] and
 * compare with the reference. */
static void check_einsum(const char *subs, ein_dtype da, ein_dtype db, ein_dtype dout,
                         const int64_t *lo, const int64_t *hi)
{
    tsubs t;
    tsubs_parse(subs, &t);
    ein_box ba = tsubs_box(t.op[0], lo, hi), bb = tsubs_box(t.op[1], lo, hi),
            bo = tsubs_box(t.op[2], lo, hi);
    tblock a, b, out;
    tb_rand(&a, da, &ba, 1.0f);
    if (t.n == 2)
        tb_rand(&b, db, &bb, 1.0f);
    tb_out(&out, dout, &bo);
    ein_error err = {0};
    int rc = kn_cpu_einsum(subs, &a.b, t.n == 2 ? &b.b : NULL, &out.b, &err);
    if (rc != 0)
        print_error("einsum %s: %s\n", subs, err.msg);
    assert_int_equal(rc, 0);
    int64_t n = ein_box_volume(&bo);
    double *ref = malloc((size_t)(n > 0 ? n : 1) * sizeof *ref);
    double *mag = malloc((size_t)(n > 0 ? n : 1) * sizeof *mag);
    assert_non_null(ref);
    assert_non_null(mag);
    ref_einsum(&t, &a, t.n == 2 ? &b : NULL, &out, lo, hi, ref, mag);
    tb_read(&out);
    double rel = tol_rel(dout);
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)out.f[i] - ref[i]);
        if (!(d <= 1e-6 + rel * mag[i])) {
            char s1[256], s2[256];
            print_error("einsum %s (%s,%s->%s) a %s out %s: element %lld is %.8g, "
                        "expected %.8g (scale %.3g)\n", subs, ein_dtype_name(da),
                        ein_dtype_name(db), ein_dtype_name(dout),
                        ein_box_format(&ba, s1, sizeof s1), ein_box_format(&bo, s2, sizeof s2),
                        (long long)i, out.f[i], ref[i], mag[i]);
            fail();
        }
    }
    free(ref);
    free(mag);
    tb_free(&a);
    if (t.n == 2)
        tb_free(&b);
    tb_free(&out);
}

typedef struct ecase {
    const char *subs;
    int64_t maxe;     /* largest letter extent in random trials */
} ecase;

static void test_einsum_case(void **state)
{
    const ecase *c = *state;
    int64_t lo[26], hi[26];
    for (int di = 0; di < 3; di++) {
        ein_dtype dt = dtypes[di];
        for (int trial = 0; trial < 4; trial++) {
            /* Trial 0 keeps every extent tiny (the plain-loop path). */
            int64_t maxe = trial == 0 ? 3 : c->maxe;
            for (int L = 0; L < 26; L++) {
                lo[L] = rnd_int(0, 50);
                hi[L] = lo[L] + rnd_int(1, maxe);
            }
            check_einsum(c->subs, dt, dt, dt, lo, hi);
        }
    }
    /* Mixed dtypes, all extents > 1 and odd. */
    for (int L = 0; L < 26; L++) {
        lo[L] = rnd_int(1, 40);
        hi[L] = lo[L] + 2 * rnd_int(1, (c->maxe - 1) / 2) + 1;
    }
    check_einsum(c->subs, EIN_F16, EIN_BF16, EIN_F32, lo, hi);
    check_einsum(c->subs, EIN_F32, EIN_F16, EIN_BF16, lo, hi);
}

static const ecase ecases[] = {
    {"ij,jk->ik", 70},        /* matmul */
    {"ij,kj->ik", 70},        /* b transposed */
    {"ji,jk->ik", 70},        /* a transposed */
    {"ji,kj->ki", 70},        /* both, and out transposed */
    {"ij,jk->ki", 70},        /* out transposed */
    {"bij,bjk->bik", 24},     /* batched */
    {"bij,bkj->bki", 24},
    {"ibj,bjk->bik", 24},     /* batch letter not leading */
    {"bhqd,bhkd->bhqk", 11},  /* attention scores */
    {"ik,jk->ijk", 20},       /* batch letter last in out */
    {"ijk,jk->i", 30},        /* two summed letters */
    {"ijk,ikl->jl", 20},      /* summed letters in a different layout */
    {"abc,cd->abd", 16},      /* two M letters */
    {"ij,jk->i", 40},         /* k only in b: pre-summed */
    {"ijl,jk->ik", 20},       /* l only in a: pre-summed */
    {"bijl,bjk->bik", 14},    /* pre-summed with a batch letter */
    {"bijk,bkjl->bil", 12},   /* summed letters in another order in b */
    {"i,j->ij", 70},          /* outer product */
    {"ij,ij->", 50},          /* full contraction to a scalar */
    {"i,i->i", 200},          /* elementwise product */
    {"ij,j->ij", 50},         /* broadcast multiply */
    {"ij->j", 70},            /* one operand: reductions and permutations */
    {"ij->i", 70},
    {"ij->ji", 70},
    {"ij->ij", 70},
    {"ijk->kij", 20},
    {"ijk->ki", 20},
    {"ijk->", 20},
};

/* The example of the brief: a [37:100) x [5:64) block of a larger tensor. */
static void test_einsum_offsets(void **state)
{
    (void)state;
    int64_t lo[26] = {0}, hi[26] = {0};
    lo['i' - 'a'] = 37, hi['i' - 'a'] = 100;
    lo['j' - 'a'] = 5, hi['j' - 'a'] = 64;
    lo['k' - 'a'] = 3, hi['k' - 'a'] = 50;
    for (int di = 0; di < 3; di++) {
        check_einsum("ij,jk->ik", dtypes[di], dtypes[di], dtypes[di], lo, hi);
        check_einsum("ij,kj->ki", dtypes[di], dtypes[di], dtypes[di], lo, hi);
        check_einsum("ij->j", dtypes[di], dtypes[di], dtypes[di], lo, hi);
    }
}

/* A few rows (2 to 16, a batch of decode steps) against a B wide enough
 * for several of kn_einsum's cache blocks of B (256 KiB: 59 rows of 1100
 * floats), in each layout of A and B, and rows at an offset. */
static void test_einsum_few_rows(void **state)
{
    (void)state;
    static const char *const subs[] = {"ij,kj->ik", "ij,jk->ik", "ji,kj->ik", "ji,jk->ik",
                                       "bij,bkj->bik"};
    static const int rows[] = {2, 3, 8, 16, 17};
    for (size_t si = 0; si < sizeof subs / sizeof *subs; si++)
        for (size_t ri = 0; ri < sizeof rows / sizeof *rows; ri++) {
            int64_t lo[26] = {0}, hi[26] = {0};
            lo['i' - 'a'] = 5, hi['i' - 'a'] = 5 + rows[ri];
            lo['j' - 'a'] = 0, hi['j' - 'a'] = 1100;
            lo['k' - 'a'] = 3, hi['k' - 'a'] = 203;
            lo['b' - 'a'] = 0, hi['b' - 'a'] = 2;
            check_einsum(subs[si], EIN_F32, EIN_F32, EIN_F32, lo, hi);
        }
}

/* Large enough that every operand of a batched product is used in place
 * by BLAS, plus letters of extent 1 in the middle of a block. */
static void test_einsum_shapes(void **state)
{
    (void)state;
    int64_t lo[26], hi[26];
    for (int L = 0; L < 26; L++) {
        lo[L] = 7 * L + 1;
        hi[L] = lo[L] + 33 + L;
    }
    check_einsum("bij,bjk->bik", EIN_F32, EIN_F32, EIN_F32, lo, hi);
    hi['j' - 'a'] = lo['j' - 'a'] + 1;   /* a summed letter of extent 1 */
    check_einsum("ijk,jkl->il", EIN_F32, EIN_F32, EIN_F32, lo, hi);
    hi['i' - 'a'] = lo['i' - 'a'] + 1;   /* an output letter of extent 1 */
    check_einsum("ijk,jkl->il", EIN_F32, EIN_F32, EIN_F32, lo, hi);
    check_einsum("kji,kl->li", EIN_BF16, EIN_F32, EIN_F16, lo, hi);
    /* Extent-1 letters inside operands that must be copied. */
    for (int L = 0; L < 26; L++) {
        lo[L] = 3 * L + 2;
        hi[L] = lo[L] + 21 + L;
    }
    hi['z' - 'a'] = lo['z' - 'a'] + 1;
    check_einsum("mizj,jk->ik", EIN_F32, EIN_F16, EIN_F32, lo, hi);
    check_einsum("bzij,bkzj->bki", EIN_F16, EIN_F32, EIN_BF16, lo, hi);
}

/* An empty summed letter gives zeros; an empty output is left alone. */
static void test_einsum_empty(void **state)
{
    (void)state;
    ein_box ba = {2, {0, 5}, {4, 5}}, bb = {2, {5, 0}, {5, 3}}, bo = {2, {0, 0}, {4, 3}};
    tblock a, b, out;
    tb_rand(&a, EIN_F32, &ba, 1.0f);
    tb_rand(&b, EIN_F32, &bb, 1.0f);
    tb_out(&out, EIN_F16, &bo);
    assert_int_equal(kn_cpu_einsum("ij,jk->ik", &a.b, &b.b, &out.b, NULL), 0);
    tb_read(&out);
    for (int i = 0; i < 12; i++)
        assert_true(out.f[i] == 0.0f);
    tb_free(&a);
    tb_free(&b);
    tb_free(&out);
    ein_box ea = {2, {3, 0}, {3, 4}}, eo = {1, {3}, {3}};
    tb_rand(&a, EIN_F32, &ea, 1.0f);
    tb_out(&out, EIN_F32, &eo);
    assert_int_equal(kn_cpu_einsum("ij->i", &a.b, NULL, &out.b, NULL), 0);
    tb_free(&a);
    tb_free(&out);
}

/* ---- elementwise ----------------------------------------------------- */

static ein_box rnd_box(void)
{
    ein_box b;
    memset(&b, 0, sizeof b);
    b.rank = (int)rnd_int(1, 3);
    for (int d = 0; d < b.rank; d++) {
        b.lo[d] = rnd_int(1, 60);
        b.hi[d] = b.lo[d] + 2 * rnd_int(0, 20) + 1;
    }
    return b;
}

static double ref_unary(ein_unary op, double s, double x)
{
    switch (op) {
    case EIN_UN_RELU: return x > 0 ? x : 0;
    case EIN_UN_SILU: return x / (1 + exp(-x));
    case EIN_UN_GELU: return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case EIN_UN_EXP: return exp(x);
    case EIN_UN_NEG: return -x;
    case EIN_UN_SCALE: return x * s;
    case EIN_UN_ADDC: return x + s;
    case EIN_UN_SIGMOID: return 1 / (1 + exp(-x));
    case EIN_UN_TANH: return tanh(x);
    case EIN_UN_SQUARE: return x * x;
    case EIN_UN_GELU_EXACT: return 0.5 * x * (1 + erf(x / sqrt(2)));
    default: return NAN;
    }
}

static void check_close(const char *what, ein_dtype dt, int64_t i, double got, double want)
{
    double tol = 1e-6 + (dt == EIN_F32 ? 1e-5 : tol_rel(dt)) * fabs(want);
    if (dt == EIN_F16)
        tol += 1e-4;
    if (!(fabs(got - want) <= tol)) {
        print_error("%s (%s): element %lld is %.8g, expected %.8g\n", what, ein_dtype_name(dt),
                    (long long)i, got, want);
        fail();
    }
}

static void test_unary(void **state)
{
    (void)state;
    const double scalar = 0.37;
    for (int op = 0; op < EIN_UN_COUNT; op++)
        for (int di = 0; di < 3; di++)
            for (int inplace = 0; inplace < 2; inplace++) {
                ein_dtype dt = dtypes[di];
                ein_box box = rnd_box();
                tblock x, y;
                tb_rand(&x, dt, &box, 4.0f);
                tb_out(&y, dt, &box);
                kn_block *out = inplace ? &x.b : &y.b;
                ein_error err = {0};
                int rc = kn_cpu_unary((ein_unary)op, scalar, &x.b, out, &err);
                if (rc)
                    print_error("%s\n", err.msg);
                assert_int_equal(rc, 0);
                int64_t n = ein_box_volume(&box);
                float *got = malloc((size_t)n * sizeof *got);
                assert_non_null(got);
                ein_dtype_to_f32(dt, out->data, got, (size_t)n);
                for (int64_t i = 0; i < n; i++)
                    check_close("unary", dt, i, got[i],
                                ref_unary((ein_unary)op, (float)scalar, x.f[i]));
                free(got);
                tb_free(&x);
                tb_free(&y);
            }
}

/* silu and sigmoid have a 4-lane path (kn_vexp.h) whose exp is clamped
 * below -87: far out, at the lane boundaries and at the special values
 * they must still be what the formulas give, to a relative 1e-6 (a
 * 2e-38 absolute floor for results that underflow), in place or not. */
static void test_unary_sigmoid_range(void **state)
{
    (void)state;
    static const float v[] = {-1000.0f, -104.0f, -100.0f, -88.0f, -87.5f, -80.5f, -80.0f,
                              -79.5f, -20.0f, -1e-3f, -0.0f, 0.0f, 1e-3f, 0.5f, 20.0f, 80.0f,
                              88.0f, 100.0f, 1000.0f, INFINITY, -INFINITY, NAN, -3.0f};
    const int n = (int)(sizeof v / sizeof v[0]);   /* 23: not a multiple of 4 */
    ein_unary ops[2] = {EIN_UN_SILU, EIN_UN_SIGMOID};
    for (int k = 0; k < 2; k++)
        for (int inplace = 0; inplace < 2; inplace++) {
            float x[32], y[32];
            memcpy(x, v, sizeof v);
            kn_block bx = {x, EIN_F32, {1, {0}, {n}}}, by = {y, EIN_F32, {1, {0}, {n}}};
            ein_error err = {0};
            assert_int_equal(kn_cpu_unary(ops[k], 0.0, &bx, inplace ? &bx : &by, &err), 0);
            const float *got = inplace ? x : y;
            for (int i = 0; i < n; i++) {
                double xi = v[i], want = ops[k] == EIN_UN_SILU ? xi / (1.0 + exp(-xi))
                                                              : 1.0 / (1.0 + exp(-xi));
                if (isnan(want) || isnan(got[i])) {
                    if (!(isnan(want) && isnan(got[i]))) {
                        print_error("%s(%g) is %g, expected %g\n", ops[k] == EIN_UN_SILU ?
                                    "silu" : "sigmoid", xi, got[i], want);
                        fail();
                    }
                    continue;
                }
                if (!(fabs(got[i] - want) <= 2e-38 + 1e-6 * fabs(want)) &&
                    !(isinf(want) && got[i] == want)) {
                    print_error("%s(%g) is %.9g, expected %.9g\n", ops[k] == EIN_UN_SILU ?
                                "silu" : "sigmoid", xi, got[i], want);
                    fail();
                }
            }
        }
}

static void test_binary(void **state)
{
    (void)state;
    for (int op = 0; op < EIN_BIN_COUNT; op++)
        for (int di = 0; di < 4; di++) {
            /* di == 3: mixed dtypes a f16, b bf16, out f32 */
            ein_dtype da = di < 3 ? dtypes[di] : EIN_F16, db = di < 3 ? dtypes[di] : EIN_BF16,
                      dout = di < 3 ? dtypes[di] : EIN_F32;
            ein_box box = rnd_box();
            tblock a, b, y;
            tb_rand(&a, da, &box, 2.0f);
            tb_rand(&b, db, &box, 2.0f);
            tb_out(&y, dout, &box);
            ein_error err = {0};
            int rc = kn_cpu_binary((ein_binary)op, &a.b, &b.b, &y.b, &err);
            if (rc)
                print_error("%s\n", err.msg);
            assert_int_equal(rc, 0);
            tb_read(&y);
            int64_t n = ein_box_volume(&box);
            for (int64_t i = 0; i < n; i++) {
                double va = a.f[i], vb = b.f[i];
                double want = op == EIN_BIN_ADD ? va + vb : op == EIN_BIN_SUB ? va - vb
                            : op == EIN_BIN_MUL ? va * vb : op == EIN_BIN_DIV ? va / vb
                            : (va > vb ? va : vb);
                check_close("binary", dout, i, y.f[i], want);
            }
            tb_free(&a);
            tb_free(&b);
            tb_free(&y);
        }
}

static void test_agg(void **state)
{
    (void)state;
    const int counts[] = {1, 2, 5};
    for (int op = EIN_AGG_SUM; op <= EIN_AGG_MAX; op++)
        for (int di = 0; di < 3; di++)
            for (int ci = 0; ci < 3; ci++)
                for (int inplace = 0; inplace < 2; inplace++) {
                    ein_dtype dt = dtypes[di];
                    int ns = counts[ci];
                    ein_box box = rnd_box();
                    tblock s[5], y;
                    kn_block blk[5];
                    for (int j = 0; j < ns; j++) {
                        tb_rand(&s[j], dt, &box, 3.0f);
                        blk[j] = s[j].b;
                    }
                    tb_out(&y, dt, &box);
                    kn_block *out = inplace ? &s[0].b : &y.b;
                    ein_error err = {0};
                    int rc = kn_cpu_agg((ein_agg)op, blk, ns, out, &err);
                    if (rc)
                        print_error("%s\n", err.msg);
                    assert_int_equal(rc, 0);
                    int64_t n = ein_box_volume(&box);
                    float *got = malloc((size_t)n * sizeof *got);
                    assert_non_null(got);
                    ein_dtype_to_f32(dt, out->data, got, (size_t)n);
                    for (int64_t i = 0; i < n; i++) {
                        double want = s[0].f[i];
                        for (int j = 1; j < ns; j++)
                            want = op == EIN_AGG_SUM ? want + s[j].f[i]
                                                     : fmax(want, s[j].f[i]);
                        check_close("agg", dt, i, got[i], want);
                    }
                    free(got);
                    for (int j = 0; j < ns; j++)
                        tb_free(&s[j]);
                    tb_free(&y);
                }
}

/* kn_cpu_run gives the same result as the kernels it dispatches to. */
static void test_run_dispatch(void **state)
{
    (void)state;
    ein_box ba = {2, {3, 10}, {40, 31}}, bb = {2, {10, 7}, {31, 52}}, bo = {2, {3, 7}, {40, 52}};
    tblock in[2], y1, y2;
    tb_rand(&in[0], EIN_F32, &ba, 1.0f);
    tb_rand(&in[1], EIN_BF16, &bb, 1.0f);
    kn_block ins[2] = {in[0].b, in[1].b};
    tb_out(&y1, EIN_F32, &bo);
    tb_out(&y2, EIN_F32, &bo);
    int64_t n = ein_box_volume(&bo);

    ein_kernel k;
    memset(&k, 0, sizeof k);
    k.kind = EIN_KERNEL_EINSUM;
    strcpy(k.subscripts, "ij,jk->ik");
    assert_int_equal(kn_cpu_run(&k, ins, 2, &y1.b, NULL), 0);
    assert_int_equal(kn_cpu_einsum("ij,jk->ik", &ins[0], &ins[1], &y2.b, NULL), 0);
    assert_memory_equal(y1.b.data, y2.b.data, (size_t)n * 4);

    memset(&k, 0, sizeof k);
    k.kind = EIN_KERNEL_UNARY;
    k.unary = EIN_UN_SCALE;
    k.scalar = -1.5;
    assert_int_equal(kn_cpu_run(&k, &y2.b, 1, &y1.b, NULL), 0);
    for (int64_t i = 0; i < n; i++)
        assert_true(((float *)y1.b.data)[i] == -1.5f * ((float *)y2.b.data)[i]);

    memset(&k, 0, sizeof k);
    k.kind = EIN_KERNEL_BINARY;
    k.binary = EIN_BIN_SUB;
    kn_block pair[2] = {y1.b, y2.b};
    tblock y3;
    tb_out(&y3, EIN_F32, &bo);
    assert_int_equal(kn_cpu_run(&k, pair, 2, &y3.b, NULL), 0);
    for (int64_t i = 0; i < n; i++)
        assert_true(((float *)y3.b.data)[i] ==
                    ((float *)y1.b.data)[i] - ((float *)y2.b.data)[i]);
    tb_free(&in[0]);
    tb_free(&in[1]);
    tb_free(&y1);
    tb_free(&y2);
    tb_free(&y3);
}

/* ---- errors ---------------------------------------------------------- */

static void test_einsum_bad_subscripts(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "ij,jk", "iJ->i", "ii->i", "ij->ii", "ij->k", "ij,jk,kl->il", "", "i j->ij",
        "ij->i->j", "ij,jk-ik", "abcdefghi->a", "i1->i",
    };
    const int ranks[2] = {2, 2};
    ein_box b2 = {2, {0, 0}, {3, 3}}, b1 = {1, {0}, {3}};
    float da[9] = {0}, db[9] = {0}, dout[9];
    kn_block a = {da, EIN_F32, b2}, b = {db, EIN_F32, b2}, out = {dout, EIN_F32, b1};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ein_error err = {0};
        int rc = kn_einsum_check(bad[i], 2, ranks, 2, &err);
        if (rc != EIN_EINVAL)
            print_error("check \"%s\" gave %d (%s)\n", bad[i], rc, err.msg);
        assert_int_equal(rc, EIN_EINVAL);
        assert_true(err.msg[0] != '\0');
        assert_int_equal(kn_cpu_einsum(bad[i], &a, &b, &out, NULL), EIN_EINVAL);
    }
    assert_int_equal(kn_einsum_check(NULL, 1, ranks, 1, NULL), EIN_EINVAL);
    assert_int_equal(kn_cpu_einsum(NULL, &a, NULL, &out, NULL), EIN_EINVAL);
}

static void test_einsum_check(void **state)
{
    (void)state;
    const int r22[2] = {2, 2}, r32[2] = {3, 2}, r3[1] = {3};
    assert_int_equal(kn_einsum_check("ij,jk->ik", 2, r22, 2, NULL), 0);
    assert_int_equal(kn_einsum_check("bij,jk->bik", 2, r32, 3, NULL), 0);
    assert_int_equal(kn_einsum_check("ijk->", 1, r3, 0, NULL), 0);
    assert_int_equal(kn_einsum_check("ij,jk->ik", 1, r22, 2, NULL), EIN_EINVAL);
    assert_int_equal(kn_einsum_check("ijk->i", 2, r32, 1, NULL), EIN_EINVAL);
    assert_int_equal(kn_einsum_check("ij,jk->ik", 2, r32, 2, NULL), EIN_ESHAPE);
    assert_int_equal(kn_einsum_check("ij,jk->ik", 2, r22, 3, NULL), EIN_ESHAPE);
}

static void test_einsum_mismatch(void **state)
{
    (void)state;
    ein_box ba = {2, {0, 0}, {8, 64}}, bb = {2, {0, 0}, {32, 16}}, bo = {2, {0, 0}, {8, 16}};
    tblock a, b, out;
    tb_rand(&a, EIN_F32, &ba, 1.0f);
    tb_rand(&b, EIN_F32, &bb, 1.0f);
    tb_out(&out, EIN_F32, &bo);
    ein_error err = {0};
    assert_int_equal(kn_cpu_einsum("ij,jk->ik", &a.b, &b.b, &out.b, &err), EIN_ESHAPE);
    assert_non_null(strstr(err.msg, "einsum ij,jk->ik: letter j is [0:64) in a but [0:32) in b"));

    /* The output's interval differs from the inputs'. */
    b.b.box.hi[0] = 64;
    out.b.box.lo[0] = 1;
    out.b.box.hi[0] = 9;
    memset(&err, 0, sizeof err);
    assert_int_equal(kn_cpu_einsum("ij,jk->ik", &a.b, &b.b, &out.b, &err), EIN_ESHAPE);
    assert_non_null(strstr(err.msg, "letter i is [0:8) in a but [1:9) in out"));

    /* Rank of a block and its letters disagree. */
    out.b.box = bo;
    out.b.box.rank = 3;
    assert_int_equal(kn_cpu_einsum("ij,jk->ik", &a.b, &b.b, &out.b, &err), EIN_ESHAPE);
    out.b.box = bo;

    /* Wrong operand counts. */
    assert_int_equal(kn_cpu_einsum("ij,jk->ik", &a.b, NULL, &out.b, &err), EIN_EINVAL);
    assert_int_equal(kn_cpu_einsum("ij->i", &a.b, &b.b, &out.b, &err), EIN_EINVAL);
    tb_free(&a);
    tb_free(&b);
    tb_free(&out);
}

/* One arity check for the validator and both kernel sets: the registry's
 * range for every kind, ATTENTION_PARTIAL q alone or q, k, v. */
static void test_arity_registry(void **state)
{
    (void)state;
    ein_error err = {0};
    assert_int_equal(ein_kernel_check_arity(EIN_KERNEL_EINSUM, 1, &err), 0);
    assert_int_equal(ein_kernel_check_arity(EIN_KERNEL_EINSUM, 2, &err), 0);
    assert_int_equal(ein_kernel_check_arity(EIN_KERNEL_EINSUM, 3, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "einsum kernel takes 1 to 2 sources, has 3"));
    assert_int_equal(ein_kernel_check_arity(EIN_KERNEL_LAYERNORM, 2, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "layernorm kernel takes 3 sources, has 2"));
    assert_int_equal(ein_kernel_check_arity(EIN_KERNEL_ATTENTION_PARTIAL, 1, &err), 0);
    assert_int_equal(ein_kernel_check_arity(EIN_KERNEL_ATTENTION_PARTIAL, 3, &err), 0);
    assert_int_equal(ein_kernel_check_arity(EIN_KERNEL_ATTENTION_PARTIAL, 2, &err), EIN_EINVAL);
    assert_int_equal(ein_kernel_check_arity(EIN_KERNEL_CONCAT, 0, &err), EIN_EINVAL);
    assert_int_equal(ein_kernel_check_arity(EIN_KERNEL_CONCAT, EIN_KERNEL_MAX_INPUTS, &err), 0);
    assert_int_equal(ein_kernel_check_arity(EIN_KERNEL_COUNT, 1, &err), EIN_EINVAL);
    assert_int_equal(ein_kernel_check_arity((ein_kernel_kind)-1, 1, &err), EIN_EINVAL);
    /* The dispatcher says what the registry says. */
    ein_box box = {1, {0}, {4}};
    tblock x, y;
    tb_rand(&x, EIN_F32, &box, 1.0f);
    tb_out(&y, EIN_F32, &box);
    kn_block two[2] = {x.b, x.b};
    ein_kernel k;
    memset(&k, 0, sizeof k);
    k.kind = EIN_KERNEL_SOFTMAX;
    assert_int_equal(kn_cpu_run(&k, two, 2, &y.b, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "softmax kernel takes 1 source, has 2"));
    tb_free(&x);
    tb_free(&y);
}

static void test_run_errors(void **state)
{
    (void)state;
    ein_box box = {1, {2}, {9}};
    tblock x[3], y;
    for (int i = 0; i < 3; i++)
        tb_rand(&x[i], EIN_F32, &box, 1.0f);
    tb_out(&y, EIN_F32, &box);
    kn_block ins[3] = {x[0].b, x[1].b, x[2].b};
    ein_kernel k;
    ein_error err;

    memset(&k, 0, sizeof k);
    k.kind = EIN_KERNEL_EINSUM;
    strcpy(k.subscripts, "i,i->i");
    assert_int_equal(kn_cpu_run(&k, ins, 2, &y.b, &err), 0);
    assert_int_equal(kn_cpu_run(&k, ins, 3, &y.b, &err), EIN_EINVAL);
    assert_int_equal(kn_cpu_run(&k, ins, 0, &y.b, &err), EIN_EINVAL);
    assert_int_equal(kn_cpu_run(&k, ins, 1, &y.b, &err), EIN_EINVAL);
    memset(k.subscripts, 'i', sizeof k.subscripts);   /* unterminated */
    assert_int_equal(kn_cpu_run(&k, ins, 1, &y.b, &err), EIN_EINVAL);

    memset(&k, 0, sizeof k);
    k.kind = EIN_KERNEL_UNARY;
    k.unary = EIN_UN_RELU;
    assert_int_equal(kn_cpu_run(&k, ins, 1, &y.b, &err), 0);
    assert_int_equal(kn_cpu_run(&k, ins, 2, &y.b, &err), EIN_EINVAL);
    k.unary = EIN_UN_COUNT;
    assert_int_equal(kn_cpu_run(&k, ins, 1, &y.b, &err), EIN_EINVAL);

    memset(&k, 0, sizeof k);
    k.kind = EIN_KERNEL_BINARY;
    k.binary = EIN_BIN_MUL;
    assert_int_equal(kn_cpu_run(&k, ins, 2, &y.b, &err), 0);
    assert_int_equal(kn_cpu_run(&k, ins, 1, &y.b, &err), EIN_EINVAL);
    assert_int_equal(kn_cpu_run(&k, ins, 3, &y.b, &err), EIN_EINVAL);
    k.binary = (ein_binary)7;
    assert_int_equal(kn_cpu_run(&k, ins, 2, &y.b, &err), EIN_EINVAL);

    k.kind = EIN_KERNEL_COUNT;
    assert_int_equal(kn_cpu_run(&k, ins, 2, &y.b, &err), EIN_EINVAL);
    assert_int_equal(kn_cpu_run(NULL, ins, 2, &y.b, &err), EIN_EINVAL);

    /* Box and dtype mismatches in the elementwise kernels. */
    ein_box other = {1, {3}, {10}};
    kn_block shifted = {x[1].b.data, EIN_F32, other};
    assert_int_equal(kn_cpu_unary(EIN_UN_EXP, 0, &shifted, &y.b, &err), EIN_ESHAPE);
    assert_non_null(strstr(err.msg, "unary exp"));
    assert_int_equal(kn_cpu_binary(EIN_BIN_ADD, &x[0].b, &shifted, &y.b, &err), EIN_ESHAPE);
    kn_block pair[2] = {x[0].b, shifted};
    assert_int_equal(kn_cpu_agg(EIN_AGG_SUM, pair, 2, &y.b, &err), EIN_ESHAPE);
    kn_block half = x[1].b;
    half.dtype = EIN_F16;
    pair[1] = half;
    assert_int_equal(kn_cpu_agg(EIN_AGG_MAX, pair, 2, &y.b, &err), EIN_ESHAPE);
    assert_int_equal(kn_cpu_agg(EIN_AGG_SUM, ins, 0, &y.b, &err), EIN_EINVAL);
    assert_int_equal(kn_cpu_agg(EIN_AGG_NONE, ins, 1, &y.b, &err), EIN_EINVAL);

    for (int i = 0; i < 3; i++)
        tb_free(&x[i]);
    tb_free(&y);
}

int main(void)
{
    const char *seed = getenv("EIN_TEST_SEED");
    if (seed && *seed)
        rng = strtoull(seed, NULL, 0) | 1;

    const struct CMUnitTest rest[] = {
        cmocka_unit_test(test_einsum_offsets),
        cmocka_unit_test(test_einsum_shapes),
        cmocka_unit_test(test_einsum_few_rows),
        cmocka_unit_test(test_einsum_empty),
        cmocka_unit_test(test_unary),
        cmocka_unit_test(test_unary_sigmoid_range),
        cmocka_unit_test(test_binary),
        cmocka_unit_test(test_agg),
        cmocka_unit_test(test_run_dispatch),
        cmocka_unit_test(test_einsum_bad_subscripts),
        cmocka_unit_test(test_einsum_check),
        cmocka_unit_test(test_einsum_mismatch),
        cmocka_unit_test(test_run_errors),
        cmocka_unit_test(test_arity_registry),
    };
    enum { NE = sizeof ecases / sizeof *ecases, NR = sizeof rest / sizeof *rest };
    struct CMUnitTest tests[NE + NR];
    for (int i = 0; i < NE; i++) {
        tests[i] = (struct CMUnitTest)cmocka_unit_test_prestate(test_einsum_case,
                                                                (void *)&ecases[i]);
        tests[i].name = ecases[i].subs;
    }
    size_t nt = NE;
    for (size_t i = 0; i < NR; i++)
        tests[nt++] = rest[i];
    return _cmocka_run_group_tests("kn_cpu", tests, nt, NULL, NULL);
}
