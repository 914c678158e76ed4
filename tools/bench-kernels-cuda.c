/* tools/bench-kernels-cuda.c — CUDA kernel benchmark (run by
 * tools/gpu-check): our GEMM wrapper against a plain cublasGemmEx call on
 * the same buffers (f16 and bf16, 8192^3 by default), and the fused causal
 * attention with the LLaMA block's head shapes (32 q heads, 8 kv heads,
 * head dim 128, 8K tokens, bf16).
 *
 * Usage: bench-kernels-cuda [-n GEMM_SIZE] [-t TOKENS] [-r REPS]
 * Times are CUDA events around REPS back-to-back launches after a warm-up.
 * Attention FLOPs count the causal half: 4 * heads_q * d * T(T+1)/2.
 * Attention runs twice: our fused kernel, then cuDNN's SDPA (or why not). */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cuda/kn_cuda.h"

static void ck(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        fprintf(stderr, "bench-kernels-cuda: %s: %s\n", what, cudaGetErrorString(e));
        exit(1);
    }
}

static void ckb(cublasStatus_t s, const char *what)
{
    if (s != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "bench-kernels-cuda: %s: cuBLAS status %d\n", what, (int)s);
        exit(1);
    }
}

static void ckk(int rc, const ein_error *err)
{
    if (rc < 0) {
        fprintf(stderr, "bench-kernels-cuda: %s\n", err->msg);
        exit(1);
    }
}

/* Fill n 16-bit values with small random numbers of dtype dt. */
static void *dev_rand16(ein_dtype dt, size_t n, unsigned seed)
{
    uint16_t *h = malloc(n * 2);
    float *f = malloc(n * sizeof *f);
    if (!h || !f) {
        fprintf(stderr, "bench-kernels-cuda: out of host memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        f[i] = (float)(seed >> 8) / (float)(1 << 24) - 0.5f;
    }
    ein_dtype_from_f32(dt, f, h, n);
    void *d;
    ck(cudaMalloc(&d, n * 2), "cudaMalloc");
    ck(cudaMemcpy(d, h, n * 2, cudaMemcpyHostToDevice), "upload");
    free(h);
    free(f);
    return d;
}

static void bench_gemm(kn_cuda_ctx *ctx, cublasHandle_t hb, cudaStream_t s, ein_dtype dt,
                       int64_t n, int reps)
{
    void *a = dev_rand16(dt, (size_t)(n * n), 1), *b = dev_rand16(dt, (size_t)(n * n), 2), *c;
    ck(cudaMalloc(&c, (size_t)(n * n) * 2), "cudaMalloc");
    cudaEvent_t e0, e1;
    ck(cudaEventCreate(&e0), "event");
    ck(cudaEventCreate(&e1), "event");
    ein_error err = {0};
    kn_cuda_gemm_args g;
    memset(&g, 0, sizeof g);
    g.m = g.n = g.k = n;
    g.batch = 1;
    g.a = a, g.b = b, g.c = c;
    g.ab_dtype = g.c_dtype = dt;
    g.lda = g.ldb = g.ldc = n;
    g.alpha = 1.0f;
    cudaDataType t = dt == EIN_F16 ? CUDA_R_16F : CUDA_R_16BF;
    float alpha = 1.0f, beta = 0.0f, ms_raw = 0, ms_kn = 0;
    ckb(cublasSetStream(hb, s), "cublasSetStream");
    for (int pass = 0; pass < 2; pass++) {   /* pass 0 warms up both */
        for (int which = 0; which < 2; which++) {
            ck(cudaEventRecord(e0, s), "record");
            for (int r = 0; r < (pass ? reps : 1); r++) {
                if (which == 0)
                    ckb(cublasGemmEx(hb, CUBLAS_OP_N, CUBLAS_OP_N, (int)n, (int)n, (int)n, &alpha,
                                     b, t, (int)n, a, t, (int)n, &beta, c, t, (int)n,
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT), "cublasGemmEx");
                else
                    ckk(kn_cuda_gemm(ctx, &g, s, &err), &err);
            }
            ck(cudaEventRecord(e1, s), "record");
            ck(cudaEventSynchronize(e1), "sync");
            float ms;
            ck(cudaEventElapsedTime(&ms, e0, e1), "elapsed");
            if (pass)
                *(which ? &ms_kn : &ms_raw) = ms / (float)reps;
        }
    }
    double fl = 2.0 * (double)n * (double)n * (double)n;
    double traw = fl / (ms_raw * 1e-3) * 1e-12, tkn = fl / (ms_kn * 1e-3) * 1e-12;
    printf("gemm %s %lldx%lldx%lld: cublasGemmEx %.1f TFLOP/s, kn_cuda_gemm %.1f TFLOP/s "
           "(%.1f%%)\n", ein_dtype_name(dt), (long long)n, (long long)n, (long long)n, traw, tkn,
           100.0 * tkn / traw);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
}

/* Our fused kernel (ctx NULL), or cuDNN's SDPA through
 * kn_cuda_attention_auto with EIN_ATTENTION=cudnn (ctx given): a shape
 * cuDNN does not take is reported, not measured. */
static void bench_attention(kn_cuda_ctx *ctx, cudaStream_t s, ein_dtype dt, int64_t hq,
                            int64_t hkv, int64_t T, int64_t d, int reps)
{
    size_t nq = (size_t)(hq * T * d), nk = (size_t)(hkv * T * d);
    void *q = dev_rand16(dt, nq, 3), *k = dev_rand16(dt, nk, 4), *v = dev_rand16(dt, nk, 5), *o;
    ck(cudaMalloc(&o, nq * 2), "cudaMalloc");
    kn_block bq = {q, dt, {3, {0, 0, 0}, {hq, T, d}}}, bk = {k, dt, {3, {0, 0, 0}, {hkv, T, d}}};
    kn_block bv = {v, dt, bk.box}, bo = {o, dt, bq.box};
    ein_error err = {0};
    cudaEvent_t e0, e1;
    ck(cudaEventCreate(&e0), "event");
    ck(cudaEventCreate(&e1), "event");
    const char *impl = ctx ? " (cuDNN SDPA)" : " (our kernel)";
    if (ctx && kn_cuda_attention_auto(ctx, hq / hkv, NULL, 0, &bq, &bk, &bv, &bo, s, &err) < 0) {
        printf("attention causal %s%s: not run: %s\n", ein_dtype_name(dt), impl, err.msg);
        goto out;
    }
    if (!ctx)
        ckk(kn_cuda_attention(hq / hkv, NULL, 0, &bq, &bk, &bv, &bo, s, &err), &err);
    ck(cudaEventRecord(e0, s), "record");
    for (int r = 0; r < reps; r++)
        ckk(ctx ? kn_cuda_attention_auto(ctx, hq / hkv, NULL, 0, &bq, &bk, &bv, &bo, s, &err)
                : kn_cuda_attention(hq / hkv, NULL, 0, &bq, &bk, &bv, &bo, s, &err), &err);
    ck(cudaEventRecord(e1, s), "record");
    ck(cudaEventSynchronize(e1), "sync");
    float ms;
    ck(cudaEventElapsedTime(&ms, e0, e1), "elapsed");
    ms /= (float)reps;
    double fl = 4.0 * (double)hq * (double)d * (double)T * (double)(T + 1) / 2.0;
    printf("attention causal %s%s: %lld q heads, %lld kv heads, %lld tokens, head dim %lld: "
           "%.3f ms, %.1f TFLOP/s\n", ein_dtype_name(dt), impl, (long long)hq, (long long)hkv,
           (long long)T, (long long)d, ms, fl / (ms * 1e-3) * 1e-12);
out:
    cudaFree(q);
    cudaFree(k);
    cudaFree(v);
    cudaFree(o);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
}

int main(int argc, char **argv)
{
    int64_t n = 8192, T = 8192;
    int reps = 10, opt;
    while ((opt = getopt(argc, argv, "n:t:r:h")) != -1) {
        switch (opt) {
        case 'n': n = atoll(optarg); break;
        case 't': T = atoll(optarg); break;
        case 'r': reps = atoi(optarg); break;
        default:
            fprintf(stderr, "usage: %s [-n GEMM_SIZE] [-t TOKENS] [-r REPS]\n", argv[0]);
            return opt == 'h' ? 0 : 2;
        }
    }
    char why[256];
    if (kn_cuda_device_status(why, sizeof why) <= 0) {
        if (kn_cuda_gpu_hardware_present()) {
            printf("bench-kernels-cuda: a GPU is present but CUDA cannot use it: %s\n", why);
            return 1;
        }
        printf("bench-kernels-cuda: no CUDA device (%s)\n", why);
        return 0;
    }
    if (reps < 1)
        reps = 1;
    struct cudaDeviceProp prop;
    ck(cudaGetDeviceProperties(&prop, 0), "device properties");
    printf("bench-kernels-cuda: %s, %d reps\n", prop.name, reps);
    cudaStream_t s;
    ck(cudaStreamCreate(&s), "stream");
    void *ws;
    size_t wsb = (size_t)64 << 20;
    ck(cudaMalloc(&ws, wsb), "cudaMalloc");
    kn_cuda_ctx *ctx;
    ein_error err = {0};
    ckk(kn_cuda_ctx_create(ws, wsb, &ctx, &err), &err);
    cublasHandle_t hb;
    ckb(cublasCreate(&hb), "cublasCreate");
    bench_gemm(ctx, hb, s, EIN_F16, n, reps);
    bench_gemm(ctx, hb, s, EIN_BF16, n, reps);
    bench_attention(NULL, s, EIN_BF16, 32, 8, T, 128, reps);
    setenv("EIN_ATTENTION", "cudnn", 1);
    bench_attention(ctx, s, EIN_BF16, 32, 8, T, 128, reps);
    char note[512];
    kn_cuda_ctx_attention_report(ctx, note, sizeof note);
    printf("%s\n", note);
    cublasDestroy(hb);
    kn_cuda_ctx_destroy(ctx);
    cudaFree(ws);
    cudaStreamDestroy(s);
    return 0;
}
