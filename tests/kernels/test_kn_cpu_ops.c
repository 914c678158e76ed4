/* tests/kernels/test_kn_cpu_ops.c — the LLaMA-block CPU kernels (softmax,
 * norms, rope, attention, reduce, concat/slice, heads, broadcasting binary)
 * and kn_cpu_run's dispatch, against naive loops written here.
 *
 * A test tensor is a function of its global coordinates (a hash, rounded to
 * the block's dtype), so a block over any box holds exactly the values the
 * reference reads at the same global coordinates. Blocks have odd extents
 * and non-zero offsets; outputs start as all-ones bytes (NaN in every
 * dtype), so an element a kernel forgets to write fails. References compute
 * in double. EIN_TEST_SEED overrides the seed. */
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

static uint64_t rng = 0x7f4a7c159e3779b9ull;

static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static int64_t rnd_int(int64_t lo, int64_t hi)
{
    return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1));
}

static const ein_dtype dtypes[] = {EIN_F32, EIN_F16, EIN_BF16};

/* ---- tensors as functions of global coordinates ---------------------- */

static uint64_t mix(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}

static float round_to(ein_dtype dt, float v)
{
    if (dt == EIN_F16)
        return ein_f16_to_f32(ein_f32_to_f16(v));
    if (dt == EIN_BF16)
        return ein_bf16_to_f32(ein_f32_to_bf16(v));
    return v;
}

/* A tensor: a key, a value scale, and the dtype blocks of it are stored in. */
typedef struct tten {
    uint64_t key;
    float scale;
    float bias;   /* added to every value (a weight near 1, a divisor away from 0) */
    ein_dtype dt;
} tten;

static tten ten_new(ein_dtype dt, float scale, float bias)
{
    tten t = {rnd(), scale, bias, dt};
    return t;
}

static double tval(const tten *t, int rank, const int64_t *g)
{
    uint64_t h = t->key;
    for (int d = 0; d < rank; d++)
        h = mix(h ^ (uint64_t)(g[d] + 0x9e37 * (d + 1)));
    float u = (float)(mix(h) >> 40) / (float)(1 << 24) * 2.0f - 1.0f;
    return round_to(t->dt, t->scale * u + t->bias);
}

/* A block of a tensor over `box`, filled from the function. */
static kn_block tblk(const tten *t, const ein_box *box)
{
    kn_block b = {NULL, t->dt, *box};
    int64_t n = ein_box_volume(box);
    float *f = malloc((size_t)(n > 0 ? n : 1) * sizeof *f);
    b.data = malloc((size_t)(n > 0 ? n : 1) * ein_dtype_size(t->dt));
    assert_non_null(f);
    assert_non_null(b.data);
    int64_t g[EIN_MAX_RANK];
    for (int d = 0; d < box->rank; d++)
        g[d] = box->lo[d];
    for (int64_t i = 0; i < n; i++) {
        f[i] = (float)tval(t, box->rank, g);
        for (int d = box->rank - 1; d >= 0; d--) {
            if (++g[d] < box->hi[d])
                break;
            g[d] = box->lo[d];
        }
    }
    if (n > 0)
        ein_dtype_from_f32(t->dt, f, b.data, (size_t)n);
    free(f);
    return b;
}

/* An output block poisoned with NaN. */
static kn_block tout(ein_dtype dt, const ein_box *box)
{
    kn_block b = {NULL, dt, *box};
    int64_t n = ein_box_volume(box);
    b.data = malloc((size_t)(n > 0 ? n : 1) * ein_dtype_size(dt));
    assert_non_null(b.data);
    memset(b.data, 0xff, (size_t)(n > 0 ? n : 1) * ein_dtype_size(dt));
    return b;
}

static double tget(const kn_block *b, int64_t i)
{
    float v;
    ein_dtype_to_f32(b->dtype, (const char *)b->data + i * (int64_t)ein_dtype_size(b->dtype),
                     &v, 1);
    return v;
}

static int64_t toff(const ein_box *b, const int64_t *g)
{
    int64_t o = 0;
    for (int d = 0; d < b->rank; d++)
        o = o * (b->hi[d] - b->lo[d]) + (g[d] - b->lo[d]);
    return o;
}

/* Next global index of box b in row-major order; 0 at the end. */
static int next_idx(const ein_box *b, int64_t *g)
{
    for (int d = b->rank - 1; d >= 0; d--) {
        if (++g[d] < b->hi[d])
            return 1;
        g[d] = b->lo[d];
    }
    return 0;
}

static void first_idx(const ein_box *b, int64_t *g)
{
    for (int d = 0; d < b->rank; d++)
        g[d] = b->lo[d];
}

static double tol_rel(ein_dtype dt)
{
    return dt == EIN_F32 ? 2e-5 : dt == EIN_F16 ? 2e-3 : 1e-2;
}

/* |got - want| within the output dtype's rounding plus f32 slack relative
 * to `mag` (the magnitude of the terms that made `want`). */
static void check_val(const char *what, ein_dtype dt, int64_t i, double got, double want,
                      double mag)
{
    double tol = 1e-5 + tol_rel(dt) * fabs(want) + (dt == EIN_F32 ? 1e-5 : 1e-3) * mag;
    if (!(fabs(got - want) <= tol)) {
        print_error("%s (%s): element %lld is %.8g, expected %.8g\n", what, ein_dtype_name(dt),
                    (long long)i, got, want);
        fail();
    }
}

static ein_box box_rnd(int rank, int64_t maxe)
{
    ein_box b;
    memset(&b, 0, sizeof b);
    b.rank = rank;
    for (int d = 0; d < rank; d++) {
        b.lo[d] = rnd_int(1, 40);
        b.hi[d] = b.lo[d] + 2 * rnd_int(0, (maxe - 1) / 2) + 1;
    }
    return b;
}

/* ---- binary with broadcasting ---------------------------------------- */

static double ref_binary(ein_binary op, double a, double b)
{
    switch (op) {
    case EIN_BIN_ADD: return a + b;
    case EIN_BIN_SUB: return a - b;
    case EIN_BIN_MUL: return a * b;
    case EIN_BIN_DIV: return a / b;
    case EIN_BIN_MAX: return a > b ? a : b;
    default: return NAN;
    }
}

/* An operand box for out's box: lower rank (right-aligned) or extent 1
 * (at out's position or elsewhere) along some dimensions. */
static ein_box bcast_box(const ein_box *o, int *drop)
{
    ein_box b;
    memset(&b, 0, sizeof b);
    *drop = (int)rnd_int(0, o->rank);
    if (*drop == o->rank && rnd() % 2)
        *drop = 0;
    b.rank = o->rank - *drop;
    for (int d = 0; d < b.rank; d++) {
        int od = d + *drop;
        b.lo[d] = o->lo[od];
        b.hi[d] = o->hi[od];
        if (rnd() % 3 == 0) {
            b.lo[d] = rnd() % 2 ? rnd_int(0, 50) : o->lo[od];
            b.hi[d] = b.lo[d] + 1;
        }
    }
    return b;
}

static double bval(const tten *t, const ein_box *b, int drop, const int64_t *og)
{
    int64_t g[EIN_MAX_RANK];
    for (int d = 0; d < b->rank; d++)
        g[d] = b->hi[d] - b->lo[d] == 1 ? b->lo[d] : og[d + drop];
    return tval(t, b->rank, g);
}

static void test_binary_broadcast(void **state)
{
    (void)state;
    for (int trial = 0; trial < 60; trial++) {
        ein_binary op = (ein_binary)(trial % EIN_BIN_COUNT);
        ein_dtype dt = dtypes[(trial / EIN_BIN_COUNT) % 3];
        ein_box ob = box_rnd((int)rnd_int(1, 4), 9);
        int da, db;
        ein_box ba = bcast_box(&ob, &da), bb = bcast_box(&ob, &db);
        if (trial % 4 == 0)
            bb = ob, db = 0;
        tten ta = ten_new(dt, 2.0f, 0.0f), tb = ten_new(trial % 2 ? EIN_F32 : dt, 1.0f, 2.0f);
        kn_block a = tblk(&ta, &ba), b = tblk(&tb, &bb), y = tout(dt, &ob);
        ein_error err = {0};
        int rc = kn_cpu_binary(op, &a, &b, &y, &err);
        if (rc)
            print_error("%s\n", err.msg);
        assert_int_equal(rc, 0);
        int64_t g[EIN_MAX_RANK];
        first_idx(&ob, g);
        int64_t i = 0;
        do {
            double want = ref_binary(op, bval(&ta, &ba, da, g), bval(&tb, &bb, db, g));
            check_val("binary broadcast", dt, i, tget(&y, i), want, 0);
            i++;
        } while (next_idx(&ob, g));
        free(a.data);
        free(b.data);
        free(y.data);
    }
}

/* ---- softmax ----------------------------------------------------------- */

static void test_softmax(void **state)
{
    (void)state;
    for (int trial = 0; trial < 24; trial++) {
        ein_dtype dt = dtypes[trial % 3];
        int rank = (int)rnd_int(1, 3), axis = (int)rnd_int(0, rank - 1);
        ein_box xb = box_rnd(rank, 13);
        tten tx = ten_new(dt, 6.0f, 0.0f);
        kn_block x = tblk(&tx, &xb), y = tout(dt, &xb);
        int inplace = trial % 5 == 4;
        ein_error err = {0};
        int rc = kn_cpu_softmax(axis, &x, inplace ? &x : &y, &err);
        if (rc)
            print_error("%s\n", err.msg);
        assert_int_equal(rc, 0);
        kn_block *res = inplace ? &x : &y;
        int64_t g[EIN_MAX_RANK];
        first_idx(&xb, g);
        int64_t i = 0;
        do {
            int64_t h[EIN_MAX_RANK];
            memcpy(h, g, sizeof h);
            double mx = -INFINITY, sum = 0;
            for (h[axis] = xb.lo[axis]; h[axis] < xb.hi[axis]; h[axis]++)
                mx = fmax(mx, tval(&tx, rank, h));
            for (h[axis] = xb.lo[axis]; h[axis] < xb.hi[axis]; h[axis]++)
                sum += exp(tval(&tx, rank, h) - mx);
            check_val("softmax", dt, i, tget(res, i), exp(tval(&tx, rank, g) - mx) / sum, 0);
            i++;
        } while (next_idx(&xb, g));
        free(x.data);
        free(y.data);
    }
}

/* ---- rmsnorm / layernorm ----------------------------------------------- */

static void test_norms(void **state)
{
    (void)state;
    for (int trial = 0; trial < 24; trial++) {
        ein_dtype dt = dtypes[trial % 3];
        int layer = (trial / 3) % 2, rank = (int)rnd_int(1, 3);
        ein_box xb = box_rnd(rank, 9);
        int64_t d = 2 * rnd_int(0, 40) + 1;
        xb.lo[rank - 1] = 0;
        xb.hi[rank - 1] = d;
        ein_box wb = {1, {0}, {d}};
        double eps = 1e-5;
        tten tx = ten_new(dt, 3.0f, 0.5f), tw = ten_new(dt, 0.5f, 1.0f),
             tb = ten_new(EIN_F32, 0.5f, 0.0f);
        kn_block x = tblk(&tx, &xb), w = tblk(&tw, &wb), b = tblk(&tb, &wb), y = tout(dt, &xb);
        ein_error err = {0};
        int rc = layer ? kn_cpu_layernorm(eps, &x, &w, &b, &y, &err)
                       : kn_cpu_rmsnorm(eps, &x, &w, &y, &err);
        if (rc)
            print_error("%s\n", err.msg);
        assert_int_equal(rc, 0);
        int64_t g[EIN_MAX_RANK];
        first_idx(&xb, g);
        int64_t i = 0;
        do {
            int64_t h[EIN_MAX_RANK];
            memcpy(h, g, sizeof h);
            double sum = 0, sq = 0;
            for (h[rank - 1] = 0; h[rank - 1] < d; h[rank - 1]++)
                sum += tval(&tx, rank, h);
            double mean = layer ? sum / (double)d : 0;
            for (h[rank - 1] = 0; h[rank - 1] < d; h[rank - 1]++) {
                double c = tval(&tx, rank, h) - mean;
                sq += c * c;
            }
            double xv = tval(&tx, rank, g) - mean, r = 1 / sqrt(sq / (double)d + eps);
            double want = xv * r * tval(&tw, 1, &g[rank - 1]) +
                          (layer ? tval(&tb, 1, &g[rank - 1]) : 0);
            check_val(layer ? "layernorm" : "rmsnorm", dt, i, tget(&y, i), want, 1e-2);
            i++;
        } while (next_idx(&xb, g));
        free(x.data);
        free(w.data);
        free(b.data);
        free(y.data);
    }
}

/* ---- rope ---------------------------------------------------------------- */

/* Random packed sequence ends over `total` tokens (n == 0: one sequence). */
static int rnd_seqs(int64_t total, int64_t *ends, int max)
{
    if (rnd() % 4 == 0)
        return 0;
    int n = 0;
    int64_t t = 0;
    while (n < max - 1) {
        t += rnd_int(1, total / 2 + 1);
        if (t >= total)
            break;
        ends[n++] = t;
    }
    ends[n++] = total;
    return n;
}

static int64_t ref_start(const int64_t *ends, int n, int64_t t)
{
    int64_t s = 0;
    for (int i = 0; i < n; i++)
        if (ends[i] <= t)
            s = ends[i];
    return s;
}

static void test_rope(void **state)
{
    (void)state;
    for (int trial = 0; trial < 24; trial++) {
        ein_dtype dt = dtypes[trial % 3];
        int64_t D = 2 * rnd_int(1, 8), H = rnd_int(1, 5), T = rnd_int(3, 300);
        int64_t ends[8];
        int nseq = rnd_seqs(T, ends, 8);
        int64_t h0 = rnd_int(0, H - 1), h1 = rnd_int(h0 + 1, H);
        int64_t t0 = rnd_int(0, T - 1), t1 = rnd_int(t0 + 1, T);
        ein_box xb = {2, {t0, h0 * D}, {t1, h1 * D}};
        double theta = trial % 2 ? 10000.0 : 500000.0;
        tten tx = ten_new(dt, 1.0f, 0.0f);
        kn_block x = tblk(&tx, &xb), y = tout(dt, &xb);
        ein_error err = {0};
        int rc = kn_cpu_rope(D, theta, ends, nseq, &x, &y, &err);
        if (rc)
            print_error("%s\n", err.msg);
        assert_int_equal(rc, 0);
        int64_t g[2];
        first_idx(&xb, g);
        int64_t i = 0;
        do {
            int64_t p = g[0] - ref_start(ends, nseq, g[0]), e = g[1] % D, pair = e / 2;
            int64_t g0[2] = {g[0], g[1] - e % 2}, g1[2] = {g[0], g[1] - e % 2 + 1};
            double a = (double)p * pow(theta, -2.0 * (double)pair / (double)D);
            double x0 = tval(&tx, 2, g0), x1 = tval(&tx, 2, g1);
            double want = e % 2 ? x0 * sin(a) + x1 * cos(a) : x0 * cos(a) - x1 * sin(a);
            check_val("rope", dt, i, tget(&y, i), want, 1e-2);
            i++;
        } while (next_idx(&xb, g));
        free(x.data);
        free(y.data);
    }
}

/* ---- attention ------------------------------------------------------------ */

/* One case: total tokens T, heads (kv) HK, group, head dim D; the q block
 * holds kv heads [a, b) and tokens [t0, t1); the k/v block tokens [u0, u1). */
typedef struct acase {
    int64_t T, HK, group, D, a, b, t0, t1, u0, u1;
    int64_t ends[8];
    int nseq;
    ein_dtype dt;
} acase;

static void run_attention(const acase *c)
{
    ein_box qb = {3, {c->group * c->a, c->t0, 0}, {c->group * c->b, c->t1, c->D}};
    ein_box kb = {3, {c->a, c->u0, 0}, {c->b, c->u1, c->D}};
    tten tq = ten_new(c->dt, 2.0f, 0.0f), tk = ten_new(c->dt, 2.0f, 0.0f),
         tv = ten_new(c->dt, 1.0f, 0.0f);
    kn_block q = tblk(&tq, &qb), k = tblk(&tk, &kb), v = tblk(&tv, &kb), y = tout(c->dt, &qb);
    ein_error err = {0};
    int rc = kn_cpu_attention(c->group, c->ends, c->nseq, &q, &k, &v, &y, &err);
    if (rc)
        print_error("%s\n", err.msg);
    assert_int_equal(rc, 0);
    double *p = malloc((size_t)c->T * sizeof *p);
    assert_non_null(p);
    double scale = 1 / sqrt((double)c->D);
    for (int64_t h = qb.lo[0]; h < qb.hi[0]; h++)
        for (int64_t t = c->t0; t < c->t1; t++) {
            int64_t s = ref_start(c->ends, c->nseq, t), hk = h / c->group;
            double mx = -INFINITY, sum = 0;
            for (int64_t u = s; u <= t; u++) {
                double dot = 0;
                for (int64_t e = 0; e < c->D; e++) {
                    int64_t gq[3] = {h, t, e}, gk[3] = {hk, u, e};
                    dot += tval(&tq, 3, gq) * tval(&tk, 3, gk);
                }
                p[u] = dot * scale;
                mx = fmax(mx, p[u]);
            }
            for (int64_t u = s; u <= t; u++) {
                p[u] = exp(p[u] - mx);
                sum += p[u];
            }
            for (int64_t e = 0; e < c->D; e++) {
                double o = 0;
                for (int64_t u = s; u <= t; u++) {
                    int64_t gv[3] = {hk, u, e};
                    o += p[u] * tval(&tv, 3, gv);
                }
                int64_t g[3] = {h, t, e}, i = toff(&qb, g);
                check_val("attention", c->dt, i, tget(&y, i), o / sum, 1e-2);
            }
        }
    free(p);
    free(q.data);
    free(k.data);
    free(v.data);
    free(y.data);
}

/* A random case; `big` makes tiles of the kernel span several blocks. */
static acase rnd_acase(ein_dtype dt, int big)
{
    acase c;
    memset(&c, 0, sizeof c);
    c.dt = dt;
    c.T = big ? rnd_int(300, 700) : rnd_int(1, 60);
    c.HK = rnd_int(1, 3);
    c.group = rnd_int(1, 4);
    c.D = big ? 2 * rnd_int(4, 20) + 1 : 2 * rnd_int(0, 10) + 1;
    c.nseq = rnd_seqs(c.T, c.ends, 8);
    c.a = rnd_int(0, c.HK - 1);
    c.b = rnd_int(c.a + 1, c.HK);
    c.t0 = rnd_int(0, c.T - 1);
    c.t1 = rnd_int(c.t0 + 1, c.T);
    /* The keys: at least [start(t0), t1), often more on either side. */
    int64_t s0 = ref_start(c.ends, c.nseq, c.t0);
    c.u0 = rnd() % 2 ? s0 : rnd_int(0, s0);
    c.u1 = rnd() % 2 ? c.t1 : rnd_int(c.t1, c.T);
    return c;
}

/* Chosen cases: a query box in the middle of the second of three packed
 * sequences with exactly the keys it needs, one straddling a sequence end,
 * GQA with 4 query heads per kv head and a kv head interval not at 0. */
static void test_attention(void **state)
{
    (void)state;
    for (int di = 0; di < 3; di++) {
        acase c = {.T = 90, .HK = 3, .group = 4, .D = 9, .a = 1, .b = 3, .t0 = 47, .t1 = 61,
                   .u0 = 30, .u1 = 61, .ends = {30, 75, 90}, .nseq = 3, .dt = dtypes[di]};
        run_attention(&c);
        c.t0 = 70, c.t1 = 83, c.u0 = 30, c.u1 = 90;   /* across the end at 75 */
        run_attention(&c);
        c.nseq = 0, c.group = 1, c.a = 0, c.b = 1, c.t0 = 0, c.t1 = 1, c.u0 = 0, c.u1 = 1;
        run_attention(&c);                            /* one token */
        c = (acase){.T = 400, .HK = 2, .group = 2, .D = 16, .a = 0, .b = 2, .t0 = 130,
                    .t1 = 399, .u0 = 0, .u1 = 400, .nseq = 0, .dt = dtypes[di]};
        run_attention(&c);                            /* several query and key tiles */
    }
}

static void test_attention_random(void **state)
{
    (void)state;
    for (int trial = 0; trial < 45; trial++) {
        acase c = rnd_acase(dtypes[trial % 3], 0);
        run_attention(&c);
    }
    for (int trial = 0; trial < 6; trial++) {
        acase c = rnd_acase(dtypes[trial % 3], 1);
        run_attention(&c);
    }
}

/* Issue 13: a query block over 400 tokens (one sequence) against key
 * blocks of several tiles (cut at 0, 37, 300, 400, and a block with no
 * key of some rows), merged with kn_cpu_agg (EIN_AGG_LSE) in every order
 * and with the no-key partial, equals kn_cpu_attention. */
static void test_attention_partial(void **state)
{
    (void)state;
    enum { TT = 400, D = 16 };
    ein_error err = {0};
    ein_box qb = {3, {0, 130, 0}, {4, 399, D}}, kall = {3, {0, 0, 0}, {2, TT, D}};
    ein_box ob = ein_agg_box(EIN_AGG_LSE, &qb);
    int64_t nq = ein_box_volume(&qb), no = ein_box_volume(&ob), nk = ein_box_volume(&kall);
    float *q = malloc(sizeof(float) * (size_t)nq), *k = malloc(sizeof(float) * (size_t)nk);
    float *v = malloc(sizeof(float) * (size_t)nk), *full = malloc(sizeof(float) * (size_t)nq);
    float *part[5], *m = malloc(sizeof(float) * (size_t)no);
    for (int64_t i = 0; i < nq; i++)
        q[i] = (float)((int)(rnd() % 2001) - 1000) / 300.0f;
    for (int64_t i = 0; i < nk; i++) {
        k[i] = (float)((int)(rnd() % 2001) - 1000) / 300.0f;
        v[i] = (float)((int)(rnd() % 2001) - 1000) / 1000.0f;
    }
    kn_block Q = {q, EIN_F32, qb}, K = {k, EIN_F32, kall}, V = {v, EIN_F32, kall};
    kn_block F = {full, EIN_F32, qb};
    assert_int_equal(kn_cpu_attention(2, NULL, 0, &Q, &K, &V, &F, &err), 0);
    const int64_t cut[5] = {0, 37, 300, 399, 400};   /* [399, 400): no query sees it */
    kn_block P[5];
    for (int j = 0; j < 5; j++) {
        part[j] = malloc(sizeof(float) * (size_t)no);
        P[j] = (kn_block){part[j], EIN_F32, ob};
        if (j == 4) {   /* no keys at all */
            assert_int_equal(kn_cpu_attention_partial(2, NULL, 0, &Q, NULL, NULL, &P[j], &err), 0);
            for (int64_t r = 0; r < no / (D + 1); r++)
                assert_true(isinf(part[j][r * (D + 1) + D]) && part[j][r * (D + 1) + D] < 0);
            continue;
        }
        ein_box kb = {3, {0, cut[j], 0}, {2, cut[j + 1], D}};
        /* k, v of the block: rows [cut[j], cut[j+1]) of each head */
        int64_t len = cut[j + 1] - cut[j];
        float *kk = malloc(sizeof(float) * (size_t)(2 * len * D));
        float *vv = malloc(sizeof(float) * (size_t)(2 * len * D));
        for (int h = 0; h < 2; h++) {
            memcpy(kk + h * len * D, k + (h * TT + cut[j]) * D, sizeof(float) * (size_t)(len * D));
            memcpy(vv + h * len * D, v + (h * TT + cut[j]) * D, sizeof(float) * (size_t)(len * D));
        }
        kn_block KB = {kk, EIN_F32, kb}, VB = {vv, EIN_F32, kb};
        if (kn_cpu_attention_partial(2, NULL, 0, &Q, &KB, &VB, &P[j], &err) != 0)
            fail_msg("partial %d: %s", j, err.msg);
        free(kk);
        free(vv);
    }
    /* Rows before 300 see no key of [300, 399): -inf there. */
    assert_true(isinf(part[2][D]) && part[2][D] < 0);
    static const int orders[3][5] = {{0, 1, 2, 3, 4}, {4, 2, 0, 3, 1}, {3, 4, 1, 0, 2}};
    for (int o = 0; o < 3; o++) {
        kn_block src[5];
        for (int j = 0; j < 5; j++)
            src[j] = P[orders[o][j]];
        kn_block M = {m, EIN_F32, ob};
        assert_int_equal(kn_cpu_agg(EIN_AGG_LSE, src, 5, &M, &err), 0);
        for (int64_t r = 0; r < nq / D; r++)
            for (int c = 0; c < D; c++) {
                double d = fabs((double)m[r * (D + 1) + c] - full[r * D + c]);
                if (!(d <= 2e-5 + 2e-5 * fabs(full[r * D + c])))
                    fail_msg("order %d row %lld col %d: merged %g, attention %g", o,
                             (long long)r, c, m[r * (D + 1) + c], full[r * D + c]);
            }
    }
    /* Pairwise, in place (out aliases the first source): the same. */
    memcpy(m, part[0], sizeof(float) * (size_t)no);
    for (int j = 1; j < 5; j++) {
        kn_block M = {m, EIN_F32, ob}, two[2] = {M, P[j]};
        assert_int_equal(kn_cpu_agg_lse(two, 2, &M, &err), 0);
    }
    for (int64_t r = 0; r < nq / D; r++)
        for (int c = 0; c < D; c++)
            if (!(fabs((double)m[r * (D + 1) + c] - full[r * D + c]) <= 2e-5 + 2e-5 * fabs(full[r * D + c])))
                fail_msg("pairwise row %lld col %d: %g vs %g", (long long)r, c,
                         m[r * (D + 1) + c], full[r * D + c]);
    /* Bad input: f16 partials, a merge over a box without the extra column. */
    kn_block bad = {m, EIN_F16, ob};
    assert_int_equal(kn_cpu_attention_partial(2, NULL, 0, &Q, &K, &V, &bad, &err), EIN_ESHAPE);
    kn_block nocol = {m, EIN_F32, qb};
    assert_int_equal(kn_cpu_attention_partial(2, NULL, 0, &Q, &K, &V, &nocol, &err), EIN_ESHAPE);
    for (int j = 0; j < 5; j++)
        free(part[j]);
    free(q), free(k), free(v), free(full), free(m);
}

/* ---- reduce ------------------------------------------------------------ */

static void test_reduce(void **state)
{
    (void)state;
    for (int trial = 0; trial < 36; trial++) {
        ein_dtype dt = dtypes[trial % 3];
        ein_agg op = (trial / 3) % 2 ? EIN_AGG_MAX : EIN_AGG_SUM;
        int rank = (int)rnd_int(1, 4);
        ein_box xb = box_rnd(rank, 9);
        uint32_t axes = (uint32_t)rnd_int(0, (1 << rank) - 1);
        ein_box ob;
        memset(&ob, 0, sizeof ob);
        for (int d = 0; d < rank; d++)
            if (!(axes & (1u << d))) {
                ob.lo[ob.rank] = xb.lo[d];
                ob.hi[ob.rank] = xb.hi[d];
                ob.rank++;
            }
        tten tx = ten_new(dt, 2.0f, 0.0f);
        kn_block x = tblk(&tx, &xb), y = tout(dt, &ob);
        ein_error err = {0};
        int rc = kn_cpu_reduce(op, axes, &x, &y, &err);
        if (rc)
            print_error("%s\n", err.msg);
        assert_int_equal(rc, 0);
        int64_t nout = ein_box_volume(&ob);
        double *ref = malloc((size_t)nout * sizeof *ref), *mag = malloc((size_t)nout * sizeof *mag);
        assert_non_null(ref);
        assert_non_null(mag);
        for (int64_t i = 0; i < nout; i++)
            ref[i] = op == EIN_AGG_MAX ? -INFINITY : 0, mag[i] = 0;
        int64_t g[EIN_MAX_RANK];
        first_idx(&xb, g);
        do {
            int64_t og[EIN_MAX_RANK];
            int r = 0;
            for (int d = 0; d < rank; d++)
                if (!(axes & (1u << d)))
                    og[r++] = g[d];
            int64_t o = toff(&ob, og);
            double v = tval(&tx, rank, g);
            ref[o] = op == EIN_AGG_MAX ? fmax(ref[o], v) : ref[o] + v;
            mag[o] += fabs(v);
        } while (next_idx(&xb, g));
        for (int64_t i = 0; i < nout; i++)
            check_val("reduce", dt, i, tget(&y, i), ref[i], mag[i]);
        free(ref);
        free(mag);
        free(x.data);
        free(y.data);
    }
}

/* ---- concat, slice, heads ---------------------------------------------- */

static void test_concat(void **state)
{
    (void)state;
    for (int trial = 0; trial < 36; trial++) {
        ein_dtype dt = dtypes[trial % 3], dout = trial % 4 == 3 ? EIN_F32 : dt;
        int rank = (int)rnd_int(1, 3), axis = (int)rnd_int(0, rank - 1), n = (int)rnd_int(1, 4);
        int64_t offs[5], full[EIN_MAX_RANK];
        offs[0] = 0;
        for (int i = 0; i < n; i++)
            offs[i + 1] = offs[i] + rnd_int(1, 9);
        for (int d = 0; d < rank; d++)
            full[d] = d == axis ? offs[n] : rnd_int(1, 12);
        ein_box ob;
        memset(&ob, 0, sizeof ob);
        ob.rank = rank;
        for (int d = 0; d < rank; d++) {
            ob.lo[d] = rnd_int(0, full[d] - 1);
            ob.hi[d] = rnd_int(ob.lo[d] + 1, full[d]);
        }
        tten tin[4];
        kn_block ins[4];
        for (int i = 0; i < n; i++) {
            tin[i] = ten_new(dt, 1.0f, 0.0f);
            /* Input i's block: its part of out's box, in its own coordinates,
             * sometimes grown (the kernel copies only the overlap). */
            ein_box ib = ob;
            ib.lo[axis] = ob.lo[axis] - offs[i];
            ib.hi[axis] = ob.hi[axis] - offs[i];
            if (ib.lo[axis] < 0)
                ib.lo[axis] = 0;
            if (ib.hi[axis] > offs[i + 1] - offs[i])
                ib.hi[axis] = offs[i + 1] - offs[i];
            if (ib.hi[axis] < ib.lo[axis])
                ib.hi[axis] = ib.lo[axis] = 0;
            if (rnd() % 2 && ib.hi[axis] > ib.lo[axis])
                for (int d = 0; d < rank; d++)
                    if (d != axis)
                        ib.lo[d] = rnd_int(0, ib.lo[d]), ib.hi[d] = rnd_int(ib.hi[d], full[d]);
            ins[i] = tblk(&tin[i], &ib);
        }
        kn_block y = tout(dout, &ob);
        ein_error err = {0};
        int rc = kn_cpu_concat(axis, offs, ins, n, &y, &err);
        if (rc)
            print_error("%s\n", err.msg);
        assert_int_equal(rc, 0);
        int64_t g[EIN_MAX_RANK];
        first_idx(&ob, g);
        int64_t i = 0;
        do {
            int j = 0;
            while (g[axis] >= offs[j + 1])
                j++;
            int64_t h[EIN_MAX_RANK];
            memcpy(h, g, sizeof h);
            h[axis] -= offs[j];
            check_val("concat", dout, i, tget(&y, i), tval(&tin[j], rank, h), 0);
            i++;
        } while (next_idx(&ob, g));
        for (int j = 0; j < n; j++)
            free(ins[j].data);
        free(y.data);
    }
}

static void test_slice(void **state)
{
    (void)state;
    for (int trial = 0; trial < 24; trial++) {
        ein_dtype dt = dtypes[trial % 3], dout = trial % 4 == 3 ? EIN_BF16 : dt;
        int rank = (int)rnd_int(1, 4), axis = (int)rnd_int(0, rank - 1);
        int64_t start = rnd_int(0, 20);
        ein_box ob = box_rnd(rank, 7), xb = ob;
        for (int d = 0; d < rank; d++) {
            int64_t sh = d == axis ? start : 0;
            xb.lo[d] = ob.lo[d] + sh - rnd_int(0, ob.lo[d]);
            xb.hi[d] = ob.hi[d] + sh + rnd_int(0, 3);
        }
        tten tx = ten_new(dt, 1.0f, 0.0f);
        kn_block x = tblk(&tx, &xb), y = tout(dout, &ob);
        ein_error err = {0};
        int rc = kn_cpu_slice(axis, start, &x, &y, &err);
        if (rc)
            print_error("%s\n", err.msg);
        assert_int_equal(rc, 0);
        int64_t g[EIN_MAX_RANK];
        first_idx(&ob, g);
        int64_t i = 0;
        do {
            int64_t h[EIN_MAX_RANK];
            memcpy(h, g, sizeof h);
            h[axis] += start;
            check_val("slice", dout, i, tget(&y, i), tval(&tx, rank, h), 0);
            i++;
        } while (next_idx(&ob, g));
        free(x.data);
        free(y.data);
    }
}

static void test_heads(void **state)
{
    (void)state;
    for (int trial = 0; trial < 18; trial++) {
        ein_dtype dt = dtypes[trial % 3], dout = trial % 6 == 5 ? EIN_F32 : dt;
        int64_t D = rnd_int(1, 9), H = rnd_int(1, 6), T = rnd_int(1, 40);
        int64_t h0 = rnd_int(0, H - 1), h1 = rnd_int(h0 + 1, H);
        int64_t t0 = rnd_int(0, T - 1), t1 = rnd_int(t0 + 1, T);
        ein_box tb = {2, {t0, h0 * D}, {t1, h1 * D}}, hb = {3, {h0, t0, 0}, {h1, t1, D}};
        tten tt = ten_new(dt, 1.0f, 0.0f), th = ten_new(dt, 1.0f, 0.0f);
        kn_block x = tblk(&tt, &tb), y = tout(dout, &hb);
        kn_block x2 = tblk(&th, &hb), y2 = tout(dout, &tb);
        ein_error err = {0};
        assert_int_equal(kn_cpu_split_heads(D, &x, &y, &err), 0);
        assert_int_equal(kn_cpu_merge_heads(D, &x2, &y2, &err), 0);
        int64_t g[3];
        first_idx(&hb, g);
        do {
            int64_t gt[2] = {g[1], g[0] * D + g[2]};
            check_val("split_heads", dout, 0, tget(&y, toff(&hb, g)), tval(&tt, 2, gt), 0);
            check_val("merge_heads", dout, 0, tget(&y2, toff(&tb, gt)), tval(&th, 3, g), 0);
        } while (next_idx(&hb, g));
        free(x.data);
        free(y.data);
        free(x2.data);
        free(y2.data);
    }
}

/* ---- kn_cpu_run: every kind against the direct call ---------------------- */

static void same_as(const kn_block *a, const kn_block *b)
{
    int64_t n = ein_box_volume(&a->box);
    assert_true(ein_box_equal(&a->box, &b->box));
    assert_memory_equal(a->data, b->data, (size_t)n * ein_dtype_size(a->dtype));
}

static void test_run_all_kinds(void **state)
{
    (void)state;
    ein_error err = {0};
    ein_kernel k;
    int64_t ends[2] = {5, 12};
    tten t1 = ten_new(EIN_F32, 1.0f, 0.0f), t2 = ten_new(EIN_F32, 1.0f, 1.0f),
         t3 = ten_new(EIN_F32, 1.0f, 0.0f);
    /* softmax */
    ein_box xb = {2, {2, 3}, {7, 10}};
    kn_block x = tblk(&t1, &xb), y1 = tout(EIN_F32, &xb), y2 = tout(EIN_F32, &xb);
    memset(&k, 0, sizeof k);
    k.kind = EIN_KERNEL_SOFTMAX;
    k.axis = 1;
    assert_int_equal(kn_cpu_run(&k, &x, 1, &y1, &err), 0);
    assert_int_equal(kn_cpu_softmax(1, &x, &y2, &err), 0);
    same_as(&y1, &y2);
    assert_int_equal(kn_cpu_run(&k, &x, 2, &y1, &err), EIN_EINVAL);
    /* reduce */
    ein_box rb = {1, {2}, {7}};
    kn_block r1 = tout(EIN_F32, &rb), r2 = tout(EIN_F32, &rb);
    memset(&k, 0, sizeof k);
    k.kind = EIN_KERNEL_REDUCE;
    k.axes = 2;
    k.reduce = EIN_AGG_MAX;
    assert_int_equal(kn_cpu_run(&k, &x, 1, &r1, &err), 0);
    assert_int_equal(kn_cpu_reduce(EIN_AGG_MAX, 2, &x, &r2, &err), 0);
    same_as(&r1, &r2);
    /* slice */
    ein_box sb = {2, {2, 3}, {7, 6}};
    kn_block s1 = tout(EIN_F32, &sb), s2 = tout(EIN_F32, &sb);
    memset(&k, 0, sizeof k);
    k.kind = EIN_KERNEL_SLICE;
    k.axis = 1;
    k.start = 4;
    assert_int_equal(kn_cpu_run(&k, &x, 1, &s1, &err), 0);
    assert_int_equal(kn_cpu_slice(1, 4, &x, &s2, &err), 0);
    same_as(&s1, &s2);
    /* concat: x's columns [3, 10) placed at 0 and a second input after */
    int64_t offs[2] = {0, 10};
    ein_box cb = {2, {2, 5}, {7, 14}}, ib2 = {2, {2, 0}, {7, 4}};
    kn_block in2[2] = {x, tblk(&t2, &ib2)};
    kn_block c1 = tout(EIN_F32, &cb), c2 = tout(EIN_F32, &cb);
    memset(&k, 0, sizeof k);
    k.kind = EIN_KERNEL_CONCAT;
    k.axis = 1;
    k.list = offs;
    k.nlist = 2;
    assert_int_equal(kn_cpu_run(&k, in2, 2, &c1, &err), 0);
    assert_int_equal(kn_cpu_concat(1, offs, in2, 2, &c2, &err), 0);
    same_as(&c1, &c2);
    k.nlist = 1;
    assert_int_equal(kn_cpu_run(&k, in2, 2, &c1, &err), EIN_EINVAL);
    /* rmsnorm, layernorm */
    ein_box nb = {2, {2, 0}, {7, 6}}, wb = {1, {0}, {6}};
    kn_block nx = tblk(&t1, &nb), w = tblk(&t2, &wb), bias = tblk(&t3, &wb);
    kn_block n1 = tout(EIN_F32, &nb), n2 = tout(EIN_F32, &nb);
    kn_block nin[3] = {nx, w, bias};
    memset(&k, 0, sizeof k);
    k.kind = EIN_KERNEL_RMSNORM;
    k.eps = 1e-6;
    assert_int_equal(kn_cpu_run(&k, nin, 2, &n1, &err), 0);
    assert_int_equal(kn_cpu_rmsnorm(1e-6, &nx, &w, &n2, &err), 0);
    same_as(&n1, &n2);
    assert_int_equal(kn_cpu_run(&k, nin, 3, &n1, &err), EIN_EINVAL);
    k.kind = EIN_KERNEL_LAYERNORM;
    assert_int_equal(kn_cpu_run(&k, nin, 3, &n1, &err), 0);
    assert_int_equal(kn_cpu_layernorm(1e-6, &nx, &w, &bias, &n2, &err), 0);
    same_as(&n1, &n2);
    assert_int_equal(kn_cpu_run(&k, nin, 2, &n1, &err), EIN_EINVAL);
    /* rope (tokens [2, 7) of sequences ending at 5 and 12, head dim 2) */
    memset(&k, 0, sizeof k);
    k.kind = EIN_KERNEL_ROPE;
    k.head_dim = 2;
    k.theta = 10000.0;
    k.list = ends;
    k.nlist = 2;
    assert_int_equal(kn_cpu_run(&k, &nx, 1, &n1, &err), 0);
    assert_int_equal(kn_cpu_rope(2, 10000.0, ends, 2, &nx, &n2, &err), 0);
    same_as(&n1, &n2);
    /* split / merge heads */
    ein_box hb = {3, {0, 2, 0}, {3, 7, 2}};
    kn_block h1 = tout(EIN_F32, &hb), h2 = tout(EIN_F32, &hb);
    memset(&k, 0, sizeof k);
    k.kind = EIN_KERNEL_SPLIT_HEADS;
    k.head_dim = 2;
    assert_int_equal(kn_cpu_run(&k, &nx, 1, &h1, &err), 0);
    assert_int_equal(kn_cpu_split_heads(2, &nx, &h2, &err), 0);
    same_as(&h1, &h2);
    k.kind = EIN_KERNEL_MERGE_HEADS;
    assert_int_equal(kn_cpu_run(&k, &h1, 1, &n1, &err), 0);
    same_as(&n1, &nx);
    /* attention: q [2 heads, tokens 6..12), k/v [1 head, tokens 5..12) */
    ein_box qb = {3, {0, 6, 0}, {2, 12, 4}}, kb = {3, {0, 5, 0}, {1, 12, 4}};
    kn_block qkv[3] = {tblk(&t1, &qb), tblk(&t2, &kb), tblk(&t3, &kb)};
    kn_block a1 = tout(EIN_F32, &qb), a2 = tout(EIN_F32, &qb);
    memset(&k, 0, sizeof k);
    k.kind = EIN_KERNEL_ATTENTION;
    k.group = 2;
    k.list = ends;
    k.nlist = 2;
    assert_int_equal(kn_cpu_run(&k, qkv, 3, &a1, &err), 0);
    assert_int_equal(kn_cpu_attention(2, ends, 2, &qkv[0], &qkv[1], &qkv[2], &a2, &err), 0);
    same_as(&a1, &a2);
    assert_int_equal(kn_cpu_run(&k, qkv, 2, &a1, &err), EIN_EINVAL);
    k.nlist = 0;
    /* one sequence: query 6 would need keys from 0 */
    assert_int_equal(kn_cpu_run(&k, qkv, 3, &a1, &err), EIN_ESHAPE);

    kn_block *all[] = {&x, &y1, &y2, &r1, &r2, &s1, &s2, &in2[1], &c1, &c2, &nx, &w, &bias,
                       &n1, &n2, &h1, &h2, &qkv[0], &qkv[1], &qkv[2], &a1, &a2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        free(all[i]->data);
}

/* ---- errors ------------------------------------------------------------- */

static void test_errors(void **state)
{
    (void)state;
    ein_error err = {0};
    tten t = ten_new(EIN_F32, 1.0f, 0.0f);
    ein_box b23 = {2, {0, 0}, {2, 3}}, b33 = {2, {0, 0}, {3, 3}}, b3 = {1, {0}, {3}};
    ein_box b4 = {1, {0}, {4}}, bodd = {2, {0, 1}, {2, 3}};
    kn_block x = tblk(&t, &b23), y = tout(EIN_F32, &b23), z = tout(EIN_F32, &b33);
    kn_block w3 = tblk(&t, &b3), w4 = tblk(&t, &b4), yo = tout(EIN_F32, &bodd);

    /* binary: neither equal nor broadcast, rank too high */
    assert_int_equal(kn_cpu_binary(EIN_BIN_ADD, &x, &z, &y, &err), EIN_ESHAPE);
    assert_non_null(strstr(err.msg, "binary add"));
    assert_int_equal(kn_cpu_binary(EIN_BIN_ADD, &x, &x, &w3, &err), EIN_ESHAPE);
    assert_int_equal(kn_cpu_binary(EIN_BIN_DIV, &x, &w3, &y, &err), 0);   /* broadcast row */
    assert_int_equal(kn_cpu_binary(EIN_BIN_COUNT, &x, &x, &y, &err), EIN_EINVAL);
    assert_int_equal(kn_cpu_unary(EIN_UN_COUNT, 0, &x, &y, &err), EIN_EINVAL);
    /* softmax */
    assert_int_equal(kn_cpu_softmax(2, &x, &y, &err), EIN_EINVAL);
    assert_int_equal(kn_cpu_softmax(-1, &x, &y, &err), EIN_EINVAL);
    assert_int_equal(kn_cpu_softmax(0, &x, &z, &err), EIN_ESHAPE);
    /* norms: the weight must span x's whole last axis */
    assert_int_equal(kn_cpu_rmsnorm(1e-5, &x, &w4, &y, &err), EIN_ESHAPE);
    assert_int_equal(kn_cpu_rmsnorm(1e-5, &x, &w3, &y, &err), 0);
    kn_block xo = x;
    xo.box = bodd;
    assert_int_equal(kn_cpu_rmsnorm(1e-5, &xo, &w3, &yo, &err), EIN_ESHAPE);
    assert_int_equal(kn_cpu_layernorm(1e-5, &x, &w3, &w4, &y, &err), EIN_ESHAPE);
    assert_int_equal(kn_cpu_layernorm(1e-5, &x, &w3, NULL, &y, &err), EIN_EINVAL);
    /* rope: head_dim odd, hidden not at head boundaries, bad sequence list, tokens past end */
    ein_box rb = {2, {0, 0}, {3, 4}};
    kn_block rx = tblk(&t, &rb), ry = tout(EIN_F32, &rb);
    int64_t bad_ends[2] = {3, 2}, short_ends[1] = {2};
    assert_int_equal(kn_cpu_rope(3, 1e4, NULL, 0, &rx, &ry, &err), EIN_EINVAL);
    assert_int_equal(kn_cpu_rope(4, 1e4, NULL, 0, &rx, &ry, &err), 0);
    assert_int_equal(kn_cpu_rope(8, 1e4, NULL, 0, &rx, &ry, &err), EIN_ESHAPE);
    assert_int_equal(kn_cpu_rope(2, 1e4, bad_ends, 2, &rx, &ry, &err), EIN_EINVAL);
    assert_int_equal(kn_cpu_rope(2, 1e4, short_ends, 1, &rx, &ry, &err), EIN_ESHAPE);
    assert_int_equal(kn_cpu_rope(2, 0.0, NULL, 0, &rx, &ry, &err), EIN_EINVAL);
    /* attention: heads not group-aligned, head dim split, keys missing */
    ein_box qb = {3, {2, 4, 0}, {4, 8, 4}}, kb = {3, {1, 0, 0}, {2, 8, 4}};
    kn_block q = tblk(&t, &qb), k = tblk(&t, &kb), ya = tout(EIN_F32, &qb);
    assert_int_equal(kn_cpu_attention(2, NULL, 0, &q, &k, &k, &ya, &err), 0);
    assert_int_equal(kn_cpu_attention(3, NULL, 0, &q, &k, &k, &ya, &err), EIN_ESHAPE);
    assert_int_equal(kn_cpu_attention(0, NULL, 0, &q, &k, &k, &ya, &err), EIN_EINVAL);
    kn_block kshort = k;
    kshort.box.lo[1] = 1;   /* keys [1, 8) but query 4 sees 0..4 */
    assert_int_equal(kn_cpu_attention(2, NULL, 0, &q, &kshort, &kshort, &ya, &err), EIN_ESHAPE);
    assert_non_null(strstr(err.msg, "keys"));
    int64_t ends[2] = {3, 8};   /* now query 4's sequence starts at 3: fine */
    assert_int_equal(kn_cpu_attention(2, ends, 2, &q, &kshort, &kshort, &ya, &err), 0);
    kn_block khalf = k;
    khalf.box.hi[2] = 2;
    assert_int_equal(kn_cpu_attention(2, NULL, 0, &q, &khalf, &khalf, &ya, &err), EIN_ESHAPE);
    assert_int_equal(kn_cpu_attention(2, NULL, 0, &q, &k, &kshort, &ya, &err), EIN_ESHAPE);
    /* reduce: mask beyond rank, wrong out box */
    assert_int_equal(kn_cpu_reduce(EIN_AGG_SUM, 4, &x, &w3, &err), EIN_EINVAL);
    assert_int_equal(kn_cpu_reduce(EIN_AGG_SUM, 2, &x, &w3, &err), EIN_ESHAPE);
    assert_int_equal(kn_cpu_reduce(EIN_AGG_SUM, 1, &x, &w3, &err), 0);
    assert_int_equal(kn_cpu_reduce(EIN_AGG_NONE, 1, &x, &w3, &err), EIN_EINVAL);
    /* concat: not covering, decreasing offsets */
    int64_t offs[2] = {0, 2}, down[2] = {2, 0};
    kn_block two[2] = {x, x};
    assert_int_equal(kn_cpu_concat(0, offs, two, 1, &z, &err), EIN_ESHAPE);
    assert_non_null(strstr(err.msg, "cover"));
    assert_int_equal(kn_cpu_concat(0, down, two, 2, &z, &err), EIN_EINVAL);
    assert_int_equal(kn_cpu_concat(3, offs, two, 2, &z, &err), EIN_EINVAL);
    /* slice: x does not contain the shifted box */
    assert_int_equal(kn_cpu_slice(1, 1, &x, &y, &err), EIN_ESHAPE);
    assert_int_equal(kn_cpu_slice(1, -1, &x, &y, &err), EIN_EINVAL);
    /* heads: boxes that do not correspond */
    ein_box hb = {3, {0, 0, 0}, {1, 2, 3}};
    kn_block hy = tout(EIN_F32, &hb);
    assert_int_equal(kn_cpu_split_heads(3, &x, &hy, &err), 0);
    assert_int_equal(kn_cpu_split_heads(2, &x, &hy, &err), EIN_ESHAPE);
    assert_int_equal(kn_cpu_merge_heads(3, &hy, &y, &err), 0);
    assert_int_equal(kn_cpu_merge_heads(0, &hy, &y, &err), EIN_EINVAL);
    /* run: unknown kind, missing list */
    ein_kernel kk;
    memset(&kk, 0, sizeof kk);
    kk.kind = EIN_KERNEL_COUNT;
    assert_int_equal(kn_cpu_run(&kk, &x, 1, &y, &err), EIN_EINVAL);
    kk.kind = EIN_KERNEL_CONCAT;
    assert_int_equal(kn_cpu_run(&kk, &x, 1, &y, &err), EIN_EINVAL);
    kk.kind = EIN_KERNEL_ROPE;
    kk.nlist = 3;
    assert_int_equal(kn_cpu_run(&kk, &x, 1, &y, &err), EIN_EINVAL);
    /* a NULL block or invalid dtype */
    kn_block bad = x;
    bad.dtype = (ein_dtype)EIN_DTYPE_COUNT;
    assert_int_equal(kn_cpu_softmax(0, &bad, &y, &err), EIN_EINVAL);
    assert_int_equal(kn_cpu_softmax(0, NULL, &y, &err), EIN_EINVAL);

    kn_block *all[] = {&x, &y, &z, &w3, &w4, &yo, &rx, &ry, &q, &k, &ya, &hy};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        free(all[i]->data);
}

/* embedding: rows gathered, a row block's zeros, i64 ids, f16 table into
 * f32 out, an out-of-range id refused by name before out is written. */
static void test_embedding(void **state)
{
    (void)state;
    enum { V = 7, D = 5, T = 4 };
    float table[V * D], out[T * D];
    uint16_t t16[V * D];
    for (int i = 0; i < V * D; i++)
        table[i] = (float)i * 0.25f - 3.0f;
    ein_dtype_from_f32(EIN_F16, table, t16, V * D);
    int32_t ids[T] = {6, 0, 3, 3};
    int64_t ids64[T] = {6, 0, 3, 3};
    ein_error err = {0};
    ein_kernel k = {.kind = EIN_KERNEL_EMBEDDING, .rows = V};
    /* whole table, tokens [2, 6), columns [0, D) */
    kn_block in[2] = {{table, EIN_F32, {2, {0, 0}, {V, D}}}, {ids, EIN_I32, {1, {2}, {2 + T}}}};
    kn_block o = {out, EIN_F32, {2, {2, 0}, {2 + T, D}}};
    assert_int_equal(kn_cpu_run(&k, in, 2, &o, &err), 0);
    for (int t = 0; t < T; t++)
        for (int j = 0; j < D; j++)
            assert_true(out[t * D + j] == table[ids[t] * D + j]);
    /* rows [3, 7) and columns [1, 4) of an f16 table, i64 ids: ids 0 gives zeros */
    uint16_t b16[4 * 3];
    for (int r = 3; r < 7; r++)
        for (int j = 1; j < 4; j++)
            b16[(r - 3) * 3 + (j - 1)] = t16[r * D + j];
    kn_block in2[2] = {{b16, EIN_F16, {2, {3, 1}, {7, 4}}}, {ids64, EIN_I64, {1, {0}, {T}}}};
    kn_block o2 = {out, EIN_F32, {2, {0, 1}, {T, 4}}};
    assert_int_equal(kn_cpu_run(&k, in2, 2, &o2, &err), 0);
    for (int t = 0; t < T; t++)
        for (int j = 1; j < 4; j++) {
            float want = ids[t] >= 3 ? ein_f16_to_f32(t16[ids[t] * D + j]) : 0.0f;
            assert_true(out[t * 3 + (j - 1)] == want);
        }
    /* an id outside [0, rows): an error naming the token and the id */
    ids[2] = V;
    for (int i = 0; i < T * D; i++)
        out[i] = 42.0f;
    assert_int_equal(kn_cpu_run(&k, in, 2, &o, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "token 4 has id 7, outside the table's rows [0, 7)"));
    assert_true(out[0] == 42.0f); /* nothing written */
    ids[2] = -1;
    assert_int_equal(kn_cpu_run(&k, in, 2, &o, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "has id -1"));
    ids[2] = 3;
    /* float ids, integer table, a table block past rows: refused */
    kn_block bad[2] = {in[0], {table, EIN_F32, {1, {2}, {2 + T}}}};
    assert_true(kn_cpu_run(&k, bad, 2, &o, &err) < 0);
    bad[0].dtype = EIN_I32, bad[1] = in[1];
    assert_true(kn_cpu_run(&k, bad, 2, &o, &err) < 0);
    k.rows = V - 1;
    assert_int_equal(kn_cpu_run(&k, in, 2, &o, &err), EIN_ESHAPE);
}

/* Integer blocks: slice and concat move them bit for bit; arithmetic
 * kernels and conversions to floats refuse them; the validator refuses an
 * integer AGG and an integer operand of a computing kernel. */
static void test_integer_blocks(void **state)
{
    (void)state;
    int64_t x[6] = {1, -2, (int64_t)1 << 40, 4, 5, 6}, y[3] = {0};
    ein_error err = {0};
    kn_block bx = {x, EIN_I64, {1, {0}, {6}}}, by = {y, EIN_I64, {1, {0}, {3}}};
    assert_int_equal(kn_cpu_slice(0, 1, &bx, &by, &err), 0);
    assert_true(y[0] == -2 && y[1] == ((int64_t)1 << 40) && y[2] == 4);
    int64_t offs[2] = {0, 3};
    kn_block parts[2] = {{x, EIN_I64, {1, {0}, {3}}}, {x + 3, EIN_I64, {1, {0}, {3}}}};
    int64_t cat[6] = {0};
    kn_block bc = {cat, EIN_I64, {1, {0}, {6}}};
    assert_int_equal(kn_cpu_concat(0, offs, parts, 2, &bc, &err), 0);
    assert_memory_equal(cat, x, sizeof x);
    float f[3];
    kn_block bf = {f, EIN_F32, {1, {0}, {3}}};
    assert_true(kn_cpu_slice(0, 1, &bx, &bf, &err) < 0);
    assert_non_null(strstr(err.msg, "cannot copy i64 into f32"));
    ein_kernel relu = {.kind = EIN_KERNEL_UNARY, .unary = EIN_UN_RELU};
    assert_true(kn_cpu_run(&relu, &bx, 1, &bx, &err) < 0);
    assert_non_null(strstr(err.msg, "i64"));
    assert_true(kn_cpu_unary(EIN_UN_RELU, 0, &bx, &bx, &err) < 0);
    assert_true(kn_cpu_agg(EIN_AGG_SUM, &bx, 1, &bx, &err) < 0);

    /* The validator: LOAD an i32 block, then an AGG or a kernel on it. */
    int32_t src = 0, dep = 0;
    ein_instr agg = {.kind = EIN_I_AGG, .dst = 1, .srcs = &src, .nsrcs = 1, .deps = &dep,
                     .ndeps = 1, .agg = EIN_AGG_SUM};
    ein_instr un = {.kind = EIN_I_KERNEL, .dst = 1, .srcs = &src, .nsrcs = 1, .deps = &dep,
                    .ndeps = 1, .kernel = {.kind = EIN_KERNEL_UNARY, .unary = EIN_UN_NEG}};
    const ein_instr *second[2] = {&agg, &un};
    const char *why[2] = {"aggregation of i32 buffers", "unary kernel does not take i32 buffer"};
    for (int c = 0; c < 2; c++) {
        ein_program *p = ein_program_new(0, 1);
        assert_non_null(p);
        ein_box b = {1, {0}, {4}};
        assert_int_equal(ein_program_add_buffer(p, EIN_I32, &b, &err), 0);
        assert_int_equal(ein_program_add_buffer(p, EIN_I32, &b, &err), 1);
        ein_instr ld = {.kind = EIN_I_LOAD, .dst = 0, .rank = 1, .shape = {4}};
        strcpy(ld.op, "ids");
        assert_int_equal(ein_program_add_instr(p, &ld, &err), 0);
        ein_instr two = *second[c];
        strcpy(two.op, "x");
        assert_int_equal(ein_program_add_instr(p, &two, &err), 1);
        assert_int_equal(ein_program_validate(p, &err), EIN_EPROTO);
        if (!strstr(err.msg, why[c]))
            fail_msg("validator: '%s' lacks '%s'", err.msg, why[c]);
        ein_program_free(p);
    }
}

int main(void)
{
    const char *seed = getenv("EIN_TEST_SEED");
    if (seed && *seed)
        rng = strtoull(seed, NULL, 0) | 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_binary_broadcast),
        cmocka_unit_test(test_softmax),
        cmocka_unit_test(test_norms),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_attention_random),
        cmocka_unit_test(test_attention_partial),
        cmocka_unit_test(test_reduce),
        cmocka_unit_test(test_concat),
        cmocka_unit_test(test_slice),
        cmocka_unit_test(test_heads),
        cmocka_unit_test(test_run_all_kinds),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_embedding),
        cmocka_unit_test(test_integer_blocks),
    };
    return cmocka_run_group_tests_name("kn_cpu_ops", tests, NULL, NULL);
}
