/* tools/bench-kernels.c — CPU kernel benchmark: our einsum GEMM against a
 * raw cblas_sgemm in the same run, and causal GQA attention.
 *
 * Usage: bench-kernels [-r REPS] [-t THREADS] [-w] [-s] [-R ROWS] [-f]
 * -f: the fused kernels of issue 33 (swiglu, add_rmsnorm) against the pairs
 * of kernels they replace, on 512 tokens of an 8B-shaped block, f32 and bf16.
 * -s: a decode step's products instead: 1 to 16 rows by 40 weight matrices
 * [2048, 768] (250 MB of f32, more than the caches), through sgemv, sgemm
 * and kn_cpu_einsum (f32, bf16, f16 weights; [out, in] and [in, out];
 * q8_0, q4_0 and f8e4m3 weights [out, in], issue 36),
 * each against a memcpy of the f32 weights in the same repetitions: GB/s
 * of weights read and the share of memcpy's memory traffic (the copy
 * bound of docs/generation.md). -R ROWS: only that many rows.
 * Every timing is the best of REPS runs (default 3) after one warm-up; the
 * raw and wrapped GEMMs alternate so both see the same machine load. One
 * OpenBLAS thread by default (what a worker uses), and then times are the
 * calling thread's CPU time, which other processes on a shared machine do
 * not inflate (-w: wall-clock time instead, required with -t > 1). Attention FLOPs count
 * the visible (causal) half only: 4 * heads_q * d * T(T+1)/2. */
#include <cblas.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/kn_cpu.h"

static int use_wall;

static double now(void)
{
    struct timespec ts;
    clock_gettime(use_wall ? CLOCK_MONOTONIC : CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n);
    if (!p) {
        fprintf(stderr, "bench-kernels: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

static void fill(float *p, int64_t n, uint64_t seed)
{
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (float)((double)(seed >> 40) / (double)(1 << 24) - 0.5);
    }
}

static void die(const char *what, const ein_error *err)
{
    fprintf(stderr, "bench-kernels: %s: %s\n", what, err->msg);
    exit(1);
}

/* Returns the raw sgemm rate (GFLOP/s). */
static double bench_gemm(int64_t m, int64_t n, int64_t k, int reps)
{
    float *a = xmalloc((size_t)(m * k) * 4), *b = xmalloc((size_t)(k * n) * 4);
    float *c = xmalloc((size_t)(m * n) * 4);
    fill(a, m * k, 1);
    fill(b, k * n, 2);
    kn_block ba = {a, EIN_F32, {2, {0, 0}, {m, k}}}, bb = {b, EIN_F32, {2, {0, 0}, {k, n}}};
    kn_block bc = {c, EIN_F32, {2, {0, 0}, {m, n}}};
    ein_error err = {0};
    double best_raw = INFINITY, best_kn = INFINITY;
    for (int r = 0; r <= reps; r++) {
        double raw = 0, kn = 0;
        for (int which = 0; which < 2; which++) {
            /* alternate which one goes first, so neither always inherits
             * the other's cache state */
            int do_raw = (which == 0) == (r % 2 == 0);
            double t = now();
            if (do_raw)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k,
                            1.0f, a, (int)k, b, (int)n, 0.0f, c, (int)n);
            else if (kn_cpu_einsum("ij,jk->ik", &ba, &bb, &bc, &err) < 0)
                die("einsum", &err);
            t = now() - t;
            *(do_raw ? &raw : &kn) = t;
        }
        if (r > 0) {   /* r == 0 warms caches and page tables */
            best_raw = raw < best_raw ? raw : best_raw;
            best_kn = kn < best_kn ? kn : best_kn;
        }
    }
    double fl = 2.0 * (double)m * (double)n * (double)k;
    double graw = fl / best_raw * 1e-9, gkn = fl / best_kn * 1e-9;
    printf("gemm %" PRId64 "x%" PRId64 "x%" PRId64 " f32: cblas_sgemm %.1f GFLOP/s, "
           "kn_cpu_einsum %.1f GFLOP/s (%.1f%% of sgemm)\n", m, n, k, graw, gkn,
           100.0 * gkn / graw);
    free(a);
    free(b);
    free(c);
    return graw;
}

static void bench_attention(int64_t hq, int64_t hkv, int64_t T, int64_t d, ein_dtype dt,
                            int reps, double gemm_rate)
{
    int64_t nq = hq * T * d, nk = hkv * T * d;
    size_t es = ein_dtype_size(dt);
    float *tmp = xmalloc((size_t)nq * 4);
    void *q = xmalloc((size_t)nq * es), *k = xmalloc((size_t)nk * es);
    void *v = xmalloc((size_t)nk * es), *o = xmalloc((size_t)nq * es);
    fill(tmp, nq, 3);
    ein_dtype_from_f32(dt, tmp, q, (size_t)nq);
    fill(tmp, nk, 4);
    ein_dtype_from_f32(dt, tmp, k, (size_t)nk);
    fill(tmp, nk, 5);
    ein_dtype_from_f32(dt, tmp, v, (size_t)nk);
    kn_block bq = {q, dt, {3, {0, 0, 0}, {hq, T, d}}}, bk = {k, dt, {3, {0, 0, 0}, {hkv, T, d}}};
    kn_block bv = {v, dt, bk.box}, bo = {o, dt, bq.box};
    ein_error err = {0};
    double best = INFINITY;
    for (int r = 0; r <= reps; r++) {
        double t = now();
        if (kn_cpu_attention(hq / hkv, NULL, 0, &bq, &bk, &bv, &bo, &err) < 0)
            die("attention", &err);
        t = now() - t;
        if (r > 0 || reps == 0)
            best = t < best ? t : best;
    }
    double fl = 4.0 * (double)hq * (double)d * (double)T * (double)(T + 1) / 2.0;
    double g = fl / best * 1e-9;
    printf("attention causal %s: %" PRId64 " q heads, %" PRId64 " kv heads, %" PRId64
           " tokens, head dim %" PRId64 ": %.3f s, %.1f GFLOP/s (%.1f%% of the sgemm rate)\n",
           ein_dtype_name(dt), hq, hkv, T, d, best, g, 100.0 * g / gemm_rate);
    free(tmp);
    free(q);
    free(k);
    free(v);
    free(o);
}

/* ---- -s: a decode step's products (a few rows by many weight matrices) -- */

#define ST_NVAR 13
typedef struct st_case {
    const char *name;
    int kind;          /* 0 memcpy, 1 sgemv, 2 sgemm, 3 einsum */
    ein_dtype dt;
    int nk;            /* weights [n, k] (a checkpoint's [out, in]); else [k, n] */
} st_case;

/* nmat weight matrices of [n, k] (or [k, n]) in each dtype, read one after
 * another as a decode step reads its layers' weights: best of reps of
 * each variant, the variants interleaved in each repetition, against a
 * memcpy of the f32 weights' bytes in the same repetitions. */
static void bench_stream(int64_t m, int reps)
{
    const int64_t n = 2048, k = 768, nmat = 40;
    const int64_t per = n * k, tot = per * nmat;
    float *w32 = xmalloc((size_t)tot * 4), *dst = xmalloc((size_t)tot * 4);
    uint16_t *w16 = xmalloc((size_t)tot * 2), *wbf = xmalloc((size_t)tot * 2);
    void *wq8 = xmalloc((size_t)ein_dtype_bytes(EIN_Q8_0, (uint64_t)tot));
    void *wq4 = xmalloc((size_t)ein_dtype_bytes(EIN_Q4_0, (uint64_t)tot));
    void *wf8 = xmalloc((size_t)ein_dtype_bytes(EIN_F8E4M3, (uint64_t)tot));
    float *a = xmalloc((size_t)(m * n) * 4), *c = xmalloc((size_t)(m * n) * 4);
    fill(w32, tot, 7);
    fill(a, m * n, 8);
    ein_dtype_from_f32(EIN_F16, w32, w16, (size_t)tot);
    ein_dtype_from_f32(EIN_BF16, w32, wbf, (size_t)tot);
    ein_dtype_from_f32(EIN_Q8_0, w32, wq8, (size_t)tot);
    ein_dtype_from_f32(EIN_Q4_0, w32, wq4, (size_t)tot);
    ein_dtype_from_f32(EIN_F8E4M3, w32, wf8, (size_t)tot);
    memset(dst, 0, (size_t)tot * 4);
    const st_case cs[ST_NVAR] = {
        {"memcpy of the f32 weights", 0, EIN_F32, 1},
        {"sgemv [out, in]", 1, EIN_F32, 1},
        {"sgemv [in, out]", 1, EIN_F32, 0},
        {"sgemm [out, in]", 2, EIN_F32, 1},
        {"einsum f32 [out, in]", 3, EIN_F32, 1},
        {"einsum f32 [in, out]", 3, EIN_F32, 0},
        {"einsum bf16 [out, in]", 3, EIN_BF16, 1},
        {"einsum f16 [out, in]", 3, EIN_F16, 1},
        {"einsum bf16 [in, out]", 3, EIN_BF16, 0},
        {"einsum f16 [in, out]", 3, EIN_F16, 0},
        {"einsum q8_0 [out, in]", 3, EIN_Q8_0, 1},
        {"einsum q4_0 [out, in]", 3, EIN_Q4_0, 1},
        {"einsum f8e4m3 [out, in]", 3, EIN_F8E4M3, 1},
    };
    double best[ST_NVAR];
    for (int v = 0; v < ST_NVAR; v++)
        best[v] = INFINITY;
    ein_error err = {0};
    for (int r = 0; r <= reps; r++) {
        for (int vi = 0; vi < ST_NVAR; vi++) {
            int v = (vi + r) % ST_NVAR;   /* rotate the order each repetition */
            const st_case *x = &cs[v];
            if (x->kind == 1 && m != 1)
                continue;
            double t = now();
            if (x->kind == 0) {
                memcpy(dst, w32, (size_t)tot * 4);
            } else {
                for (int64_t i = 0; i < nmat; i++) {
                    const float *w = w32 + i * per;
                    void *wd = x->dt == EIN_F32 ? (void *)(w32 + i * per)
                               : x->dt == EIN_F16 ? (void *)(w16 + i * per)
                               : x->dt == EIN_Q8_0
                                   ? (void *)((char *)wq8 + ein_dtype_bytes(EIN_Q8_0, (uint64_t)(i * per)))
                               : x->dt == EIN_Q4_0
                                   ? (void *)((char *)wq4 + ein_dtype_bytes(EIN_Q4_0, (uint64_t)(i * per)))
                               : x->dt == EIN_F8E4M3
                                   ? (void *)((char *)wf8 +
                                              ein_dtype_bytes(EIN_F8E4M3, (uint64_t)(i * per)))
                                   : (void *)(wbf + i * per);
                    if (x->kind == 1)
                        cblas_sgemv(CblasRowMajor, x->nk ? CblasNoTrans : CblasTrans,
                                    x->nk ? (int)n : (int)k, x->nk ? (int)k : (int)n, 1.0f, w,
                                    x->nk ? (int)k : (int)n, a, 1, 0.0f, c, 1);
                    else if (x->kind == 2)
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)n,
                                    (int)k, 1.0f, a, (int)k, w, (int)k, 0.0f, c, (int)n);
                    else {
                        kn_block ba = {a, EIN_F32, {2, {0, 0}, {m, k}}};
                        kn_block bb = {wd, x->dt, {2, {0, 0}, {x->nk ? n : k, x->nk ? k : n}}};
                        kn_block bc = {c, EIN_F32, {2, {0, 0}, {m, n}}};
                        if (kn_cpu_einsum(x->nk ? "ij,kj->ik" : "ij,jk->ik", &ba, &bb, &bc,
                                          &err) < 0)
                            die("einsum", &err);
                    }
                }
            }
            t = now() - t;
            if (r > 0 && t < best[v])
                best[v] = t;
        }
    }
    /* the bound: memcpy's traffic (it reads and writes each byte) */
    double bw = 2.0 * (double)tot * 4 / best[0];
    printf("%" PRId64 " row%s by %" PRId64 " weight matrices of %" PRId64 "x%" PRId64
           " (%.0f MB f32): memcpy %.2f GB/s of traffic\n", m, m == 1 ? "" : "s", nmat, n, k,
           (double)tot * 4e-6, bw * 1e-9);
    for (int v = 1; v < ST_NVAR; v++) {
        if (cs[v].kind == 1 && m != 1)
            continue;
        double bytes = (double)ein_dtype_bytes(cs[v].dt, (uint64_t)tot);
        printf("  %-24s %8.2f ms  %6.2f GB/s read  %5.1f%% of memcpy's traffic  "
               "%.2fx memcpy's time\n", cs[v].name, best[v] * 1e3, bytes / best[v] * 1e-9,
               100.0 * bytes / best[v] / bw, best[0] / best[v]);
    }
    free(w32);
    free(dst);
    free(w16);
    free(wbf);
    free(wq8);
    free(wq4);
    free(wf8);
    free(a);
    free(c);
}

/* The fused kernels of issue 33 against the pairs they replace, on one
 * LLaMA 3 8B-shaped block of `rows` tokens (d 4096, d_ff 14336): swiglu
 * against silu then mul, add_rmsnorm against add then rmsnorm; pair and
 * fused alternate, best of reps each. */
static void bench_fused(int64_t rows, ein_dtype dt, int reps)
{
    const int64_t d = 4096, ff = 14336;
    size_t es = ein_dtype_size(dt);
    ein_box bf = {2, {0, 0}, {rows, ff}}, bd = {2, {0, 0}, {rows, d}}, bw = {1, {0}, {d}};
    ein_box bp = {3, {0, 0, 0}, {2, rows, d}};
    kn_block g = {xmalloc((size_t)(rows * ff) * es), dt, bf}, u = {xmalloc((size_t)(rows * ff) * es), dt, bf};
    kn_block t = {xmalloc((size_t)(rows * ff) * es), dt, bf}, y = {xmalloc((size_t)(rows * ff) * es), dt, bf};
    kn_block a = {xmalloc((size_t)(rows * d) * es), dt, bd}, b = {xmalloc((size_t)(rows * d) * es), dt, bd};
    kn_block h = {xmalloc((size_t)(rows * d) * es), dt, bd}, n = {xmalloc((size_t)(rows * d) * es), dt, bd};
    kn_block w = {xmalloc((size_t)d * es), dt, bw}, pk = {xmalloc((size_t)(2 * rows * d) * es), dt, bp};
    float *tmp = xmalloc(sizeof(float) * (size_t)(rows * ff));
    kn_block *fill_these[] = {&g, &u, &a, &b, &w};
    for (int i = 0; i < 5; i++) {
        int64_t cnt = ein_box_volume(&fill_these[i]->box);
        fill(tmp, cnt, 7 + (uint64_t)i);
        ein_dtype_from_f32(dt, tmp, fill_these[i]->data, (size_t)cnt);
    }
    free(tmp);
    ein_error err = {0};
    double best[4] = {1e30, 1e30, 1e30, 1e30};
    for (int r = 0; r <= reps; r++) {   /* r == 0: warm-up */
        double t0 = now();
        if (kn_cpu_unary(EIN_UN_SILU, 0, &g, &t, &err) < 0 ||
            kn_cpu_binary(EIN_BIN_MUL, &t, &u, &y, &err) < 0)
            die("silu, mul", &err);
        double t1 = now();
        if (kn_cpu_swiglu(&g, &u, &y, &err) < 0)
            die("swiglu", &err);
        double t2 = now();
        if (kn_cpu_binary(EIN_BIN_ADD, &a, &b, &h, &err) < 0 ||
            kn_cpu_rmsnorm(1e-5, &h, &w, &n, &err) < 0)
            die("add, rmsnorm", &err);
        double t3 = now();
        if (kn_cpu_add_rmsnorm(1e-5, &a, &b, &w, &pk, &err) < 0)
            die("add_rmsnorm", &err);
        double t4 = now(), dt4[4] = {t1 - t0, t2 - t1, t3 - t2, t4 - t3};
        for (int k = 0; r > 0 && k < 4; k++)
            if (dt4[k] < best[k])
                best[k] = dt4[k];
    }
    printf("fused %s, %" PRId64 " tokens: silu+mul %.2f ms, swiglu %.2f ms (%.2fx); "
           "add+rmsnorm %.2f ms, add_rmsnorm %.2f ms (%.2fx)\n", ein_dtype_name(dt), rows,
           1e3 * best[0], 1e3 * best[1], best[0] / best[1], 1e3 * best[2], 1e3 * best[3],
           best[2] / best[3]);
    kn_block *all[] = {&g, &u, &t, &y, &a, &b, &h, &n, &w, &pk};
    for (int i = 0; i < 10; i++)
        free(all[i]->data);
}

int main(int argc, char **argv)
{
    int reps = 3, threads = 1, opt, stream = 0, srows = 0, fused = 0;
    while ((opt = getopt(argc, argv, "r:t:wsR:fh")) != -1) {
        switch (opt) {
        case 'r': reps = atoi(optarg); break;
        case 't': threads = atoi(optarg); break;
        case 'w': use_wall = 1; break;
        case 's': stream = 1; break;
        case 'R': stream = 1; srows = atoi(optarg); break;
        case 'f': fused = 1; break;
        default:
            fprintf(stderr, "usage: %s [-r REPS] [-t THREADS] [-w] [-s] [-R ROWS] [-f]\n", argv[0]);
            return opt == 'h' ? 0 : 2;
        }
    }
    if (reps < 1)
        reps = 1;
    if (threads > 1)
        use_wall = 1;   /* other threads' work is not in this thread's CPU time */
    kn_cpu_set_threads(threads);
    printf("bench-kernels: %d OpenBLAS thread%s, best of %d, %s time\n", threads,
           threads == 1 ? "" : "s", reps, use_wall ? "wall-clock" : "thread CPU");
    if (fused) {
        bench_fused(512, EIN_F32, reps);
        bench_fused(512, EIN_BF16, reps);
        return 0;
    }
    if (stream) {
        static const int64_t rows[] = {1, 2, 4, 8, 16};
        if (srows > 0)
            bench_stream(srows, reps);
        else
            for (size_t i = 0; i < sizeof rows / sizeof *rows; i++)
                bench_stream(rows[i], reps);
        return 0;
    }
    double r1 = bench_gemm(1024, 1024, 1024, reps);
    double r2 = bench_gemm(4096, 4096, 1024, reps);
    double rate = r1 > r2 ? r1 : r2;
    bench_attention(8, 2, 2048, 128, EIN_F32, reps, rate);
    bench_attention(8, 2, 2048, 128, EIN_BF16, reps > 1 ? 1 : reps, rate);
    return 0;
}
