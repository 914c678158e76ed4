/* tests/kernels/test_kn_cuda.c — the CUDA kernels against the CPU ones.
 *
 * Without a device (or driver) this prints the TAP plan "1..0 # SKIP no
 * CUDA device" and succeeds: cmocka's skip() would be counted as a failure
 * by Automake's TAP driver, so the check happens before cmocka starts. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "kernels/cuda/kn_cuda.h"
#include "kernels/kn_cpu.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;

static float rnd_float(float scale)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return scale * ((float)(rng >> 40) / (float)(1 << 24) * 2.0f - 1.0f);
}

static cudaStream_t stream;

static void cuda_ok(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        print_error("%s: %s\n", what, cudaGetErrorString(e));
        fail();
    }
}

static float *dev_upload(const float *h, int64_t n)
{
    void *d = NULL;
    cuda_ok(cudaMalloc(&d, (size_t)n * sizeof(float)), "cudaMalloc");
    cuda_ok(cudaMemcpy(d, h, (size_t)n * sizeof(float), cudaMemcpyHostToDevice), "upload");
    return d;
}

static void compare(const char *what, const float *got, const float *want, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        double tol = 1e-6 + 1e-5 * fabs((double)want[i]);
        if (!(fabs((double)got[i] - want[i]) <= tol)) {
            print_error("%s: element %lld is %.8g on the GPU, %.8g on the CPU\n", what,
                        (long long)i, got[i], want[i]);
            fail();
        }
    }
}

static void test_unary(void **state)
{
    (void)state;
    const int64_t sizes[] = {1, 1000, 1048579};   /* the last one needs the grid-stride loop */
    for (int si = 0; si < 3; si++) {
        int64_t n = sizes[si];
        float *x = malloc((size_t)n * sizeof *x), *want = malloc((size_t)n * sizeof *want);
        float *got = malloc((size_t)n * sizeof *got);
        assert_non_null(x);
        assert_non_null(want);
        assert_non_null(got);
        for (int64_t i = 0; i < n; i++)
            x[i] = rnd_float(4.0f);
        float *dx = dev_upload(x, n), *dy = NULL;
        cuda_ok(cudaMalloc((void **)&dy, (size_t)n * sizeof(float)), "cudaMalloc");
        for (int op = 0; op < EIN_UN_COUNT; op++) {
            ein_box box = {1, {5}, {5 + n}};
            kn_block bx = {x, EIN_F32, box}, by = {want, EIN_F32, box};
            assert_int_equal(kn_cpu_unary((ein_unary)op, 0.37, &bx, &by, NULL), 0);
            int rc = kn_cuda_unary((ein_unary)op, 0.37f, dx, dy, n, stream);
            if (rc)
                print_error("%s\n", kn_cuda_last_error());
            assert_int_equal(rc, 0);
            cuda_ok(cudaMemcpyAsync(got, dy, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost,
                                    stream), "download");
            cuda_ok(cudaStreamSynchronize(stream), "sync");
            compare("cuda unary", got, want, n);
        }
        assert_int_equal(kn_cuda_unary(EIN_UN_COUNT, 0, dx, dy, n, stream), EIN_EINVAL);
        cudaFree(dx);
        cudaFree(dy);
        free(x);
        free(want);
        free(got);
    }
}

static void test_agg(void **state)
{
    (void)state;
    const int counts[] = {1, 3, 16, 17, 40};
    const int64_t n = 100003;
    for (int op = EIN_AGG_SUM; op <= EIN_AGG_MAX; op++)
        for (int ci = 0; ci < 5; ci++)
            for (int inplace = 0; inplace < 2; inplace++) {
                int ns = counts[ci];
                float *h[40];
                const float *d[40];
                kn_block blk[40];
                ein_box box = {1, {0}, {n}};
                for (int j = 0; j < ns; j++) {
                    h[j] = malloc((size_t)n * sizeof(float));
                    assert_non_null(h[j]);
                    for (int64_t i = 0; i < n; i++)
                        h[j][i] = rnd_float(3.0f);
                    d[j] = dev_upload(h[j], n);
                    blk[j] = (kn_block){h[j], EIN_F32, box};
                }
                float *want = malloc((size_t)n * sizeof *want), *got = malloc((size_t)n * sizeof *got);
                assert_non_null(want);
                assert_non_null(got);
                kn_block out = {want, EIN_F32, box};
                assert_int_equal(kn_cpu_agg((ein_agg)op, blk, ns, &out, NULL), 0);
                /* In place: dst is the last source, read after the first launch's batch. */
                float *dst = NULL;
                if (inplace)
                    dst = (float *)d[ns - 1];
                else
                    cuda_ok(cudaMalloc((void **)&dst, (size_t)n * sizeof(float)), "cudaMalloc");
                int rc = kn_cuda_agg((ein_agg)op, d, ns, dst, n, stream);
                if (rc)
                    print_error("%s\n", kn_cuda_last_error());
                assert_int_equal(rc, 0);
                cuda_ok(cudaMemcpyAsync(got, dst, (size_t)n * sizeof(float),
                                        cudaMemcpyDeviceToHost, stream), "download");
                cuda_ok(cudaStreamSynchronize(stream), "sync");
                /* The GPU may sum in another order than the CPU. */
                for (int64_t i = 0; i < n; i++)
                    if (!(fabs((double)got[i] - want[i]) <= 1e-5 * (1.0 + 3.0 * ns))) {
                        print_error("cuda agg op %d n %d: element %lld is %.8g, CPU %.8g\n", op,
                                    ns, (long long)i, got[i], want[i]);
                        fail();
                    }
                if (!inplace)
                    cudaFree(dst);
                for (int j = 0; j < ns; j++) {
                    cudaFree((void *)d[j]);
                    free(h[j]);
                }
                free(want);
                free(got);
            }
}

static void test_agg_sum_errors(void **state)
{
    (void)state;
    float *d = NULL;
    cuda_ok(cudaMalloc((void **)&d, 64 * sizeof(float)), "cudaMalloc");
    const float *srcs[1] = {d};
    assert_int_equal(kn_cuda_agg_sum(srcs, 1, d, 64, stream), 0);
    assert_int_equal(kn_cuda_agg_sum(srcs, 0, d, 64, stream), EIN_EINVAL);
    assert_int_equal(kn_cuda_agg(EIN_AGG_NONE, srcs, 1, d, 64, stream), EIN_EINVAL);
    assert_int_equal(kn_cuda_agg_sum(srcs, 1, d, 0, stream), 0);
    cuda_ok(cudaStreamSynchronize(stream), "sync");
    cudaFree(d);
}

static int setup(void **state)
{
    (void)state;
    return cudaStreamCreate(&stream) == cudaSuccess ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    cudaStreamDestroy(stream);
    return 0;
}

int main(void)
{
    if (kn_cuda_device_count() == 0) {
        printf("1..0 # SKIP no CUDA device\n");
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unary),
        cmocka_unit_test(test_agg),
        cmocka_unit_test(test_agg_sum_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
