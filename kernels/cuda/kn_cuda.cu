/* kernels/cuda/kn_cuda.cu — see kn_cuda.h.
 *
 * Grid-stride loops with a bounded grid, so one launch covers any n. The
 * aggregation takes its source pointers by value (a kernel parameter) rather
 * than from device memory, which would need an allocation and a copy; more
 * than KN_CUDA_MAXSRC sources fold in several launches on the same stream,
 * each later one reading the running result from dst. */
extern "C" {
#include "common/base/ein_error.h"
#include "common/ir/ein_program.h"
#include "kernels/kn_block.h"
#include "common/base/ein_knob.h"
}
#include "kernels/cuda/kn_cuda.h"

#include <cuda_runtime.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define KN_CUDA_MAXSRC 16
#define KN_CUDA_BLOCK 256
#define KN_CUDA_MAXGRID 4096

static __thread char kn_cuda_msg[EIN_ERROR_MSG_MAX];

struct kn_cuda_srcs {
    const float *p[KN_CUDA_MAXSRC];
};

static int kn_cuda_fail(int code, const char *what, const char *why)
{
    snprintf(kn_cuda_msg, sizeof kn_cuda_msg, "%s: %s", what, why);
    return code;
}

/* After a launch: the launch error, if any (cleared, so it does not leak
 * into an unrelated later call). */
static int kn_cuda_launched(const char *what)
{
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return kn_cuda_fail(EIN_EDEVICE, what, cudaGetErrorString(e));
    return 0;
}

static unsigned kn_cuda_grid(int64_t n)
{
    int64_t g = (n + KN_CUDA_BLOCK - 1) / KN_CUDA_BLOCK;
    return (unsigned)(g < KN_CUDA_MAXGRID ? g : KN_CUDA_MAXGRID);
}

__global__ void kn_unary_kernel(int op, float s, const float *x, float *y, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float v = x[i], r;
        switch (op) {
#define EIN_UNARY(kind, name, nargs, usage, formula) \
        case EIN_UN_##kind: r = (formula); break;
#include "common/ir/ein_ops.def"
        default: r = v; break; /* op was checked on the host */
        }
        y[i] = r;
    }
}

template <int MAX>
__global__ void kn_agg_kernel(kn_cuda_srcs s, int ns, float *dst, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float v = s.p[0][i];
        for (int j = 1; j < ns; j++)
            v = MAX ? fmaxf(v, s.p[j][i]) : v + s.p[j][i];
        dst[i] = v;
    }
}

extern "C" int kn_cuda_device_count(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

extern "C" int kn_cuda_device_status(char *why, size_t cap)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    (void)cudaGetLastError();
    if (why && cap)
        why[0] = '\0';
    if (e == cudaSuccess && n > 0)
        return n;
    if (e == cudaSuccess)
        e = cudaErrorNoDevice;
    if (why && cap)
        snprintf(why, cap, "%s: %s", cudaGetErrorName(e), cudaGetErrorString(e));
    return e == cudaErrorNoDevice ? 0 : EIN_EDEVICE;
}

extern "C" int kn_cuda_gpu_hardware_present(void)
{
    const char *req = ein_knob_get(EIN_KNOB_REQUIRE_GPU);
    if (req && req[0] == '1')
        return 1;
    if (access("/dev/nvidia0", F_OK) == 0)
        return 1;
    DIR *d = opendir("/proc/driver/nvidia/gpus");
    int found = 0;
    if (d) {
        struct dirent *de;
        while (!found && (de = readdir(d)))
            found = de->d_name[0] != '.';
        closedir(d);
    }
    return found;
}

extern "C" int kn_cuda_unary(ein_unary op, float scalar, const float *x, float *y, int64_t n,
                             void *stream)
{
    if ((int)op < 0 || op >= EIN_UN_COUNT)
        return kn_cuda_fail(EIN_EINVAL, "cuda unary", "unknown op");
    if (n < 0 || (n > 0 && (!x || !y)))
        return kn_cuda_fail(EIN_EINVAL, "cuda unary", "bad buffer or length");
    if (n == 0)
        return 0;
    kn_unary_kernel<<<kn_cuda_grid(n), KN_CUDA_BLOCK, 0, (cudaStream_t)stream>>>(
        (int)op, scalar, x, y, n);
    return kn_cuda_launched("cuda unary");
}

extern "C" int kn_cuda_agg(ein_agg op, const float *const *srcs, int nsrc, float *dst,
                           int64_t n, void *stream)
{
    if (op != EIN_AGG_SUM && op != EIN_AGG_MAX)
        return kn_cuda_fail(EIN_EINVAL, "cuda agg", "op is neither sum nor max");
    if (nsrc < 1 || !srcs || n < 0 || (n > 0 && !dst))
        return kn_cuda_fail(EIN_EINVAL, "cuda agg", "bad sources, buffer or length");
    for (int j = 0; j < nsrc; j++)
        if (n > 0 && !srcs[j])
            return kn_cuda_fail(EIN_EINVAL, "cuda agg", "a source is NULL");
    if (n == 0)
        return 0;
    /* A source that is also dst must be read in the first launch, before
     * dst holds a partial result. */
    int alias = -1;
    for (int j = 0; j < nsrc && alias < 0; j++)
        if (srcs[j] == dst)
            alias = j;
    int next = 0, first = 1;
    while (next < nsrc) {
        kn_cuda_srcs s;
        int ns = 0;
        /* dst first: the aliased source in the first launch, the running
         * result in the later ones. */
        if (!first || alias >= 0)
            s.p[ns++] = dst;
        first = 0;
        for (; ns < KN_CUDA_MAXSRC && next < nsrc; next++)
            if (next != alias)
                s.p[ns++] = srcs[next];
        if (next == alias)
            next++;   /* taken already */
        if (op == EIN_AGG_MAX)
            kn_agg_kernel<1><<<kn_cuda_grid(n), KN_CUDA_BLOCK, 0, (cudaStream_t)stream>>>(
                s, ns, dst, n);
        else
            kn_agg_kernel<0><<<kn_cuda_grid(n), KN_CUDA_BLOCK, 0, (cudaStream_t)stream>>>(
                s, ns, dst, n);
        int rc = kn_cuda_launched("cuda agg");
        if (rc < 0)
            return rc;
    }
    return 0;
}

extern "C" int kn_cuda_agg_sum(const float *const *srcs, int nsrc, float *dst, int64_t n,
                               void *stream)
{
    return kn_cuda_agg(EIN_AGG_SUM, srcs, nsrc, dst, n, stream);
}

extern "C" void kn_cuda_set_msg(const char *msg)
{
    snprintf(kn_cuda_msg, sizeof kn_cuda_msg, "%s", msg);
}

extern "C" const char *kn_cuda_last_error(void)
{
    return kn_cuda_msg;
}
