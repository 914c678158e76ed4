/* worker/wk_probe_cuda.c — the GPU probe (wk_probe.h). It only gathers
 * facts; what they mean for the topology is coordinator/compile/co_topo.c's
 * business, where it can be tested without a GPU.
 *
 * STATUS: run on one H200 by tools/gpu-check (2026-12-04): it found the
 * GPU and einrun detected "1 x NVIDIA H200" (hgx-h200 figures). */
#include "worker/wk_probe.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

static int cu_fail(ein_error *err, cudaError_t e, const char *what)
{
    return ein_fail(err, EIN_EDEVICE, "%s: %s (%s)", what, cudaGetErrorString(e),
                    cudaGetErrorName(e));
}

int wk_probe_cuda(FILE *out, ein_error *err)
{
    int n = 0, rc = 0;
    char *text = NULL;
    size_t len = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaErrorNoDevice || (e == cudaSuccess && n == 0))
        return ein_fail(err, EIN_EDEVICE, "no CUDA device visible (cudaGetDeviceCount: %s)",
                        e == cudaSuccess ? "0 devices" : cudaGetErrorString(e));
    if (e == cudaErrorInsufficientDriver)
        return ein_fail(err, EIN_EDEVICE, "no usable NVIDIA driver (cudaGetDeviceCount: %s)",
                        cudaGetErrorString(e));
    if (e != cudaSuccess)
        return cu_fail(err, e, "cudaGetDeviceCount");
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    fprintf(f, "einprobe 1\n");
    for (int g = 0; g < n; g++) {
        struct cudaDeviceProp prop;
        if ((e = cudaGetDeviceProperties(&prop, g)) != cudaSuccess) {
            rc = cu_fail(err, e, "cudaGetDeviceProperties");
            goto done;
        }
        /* One line per GPU whatever the driver puts in the name. */
        char name[sizeof prop.name + 1];
        memcpy(name, prop.name, sizeof prop.name);
        name[sizeof prop.name] = 0;
        for (char *c = name; *c; c++)
            if ((unsigned char)*c < 0x20 || (unsigned char)*c == 0x7f)
                *c = '?';
        fprintf(f, "gpu %d %s\n", g, name[0] ? name : "unnamed");
    }
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++) {
            int access = 0, rank = 0;
            if (a == b)
                continue;
            if ((e = cudaDeviceCanAccessPeer(&access, a, b)) != cudaSuccess) {
                rc = cu_fail(err, e, "cudaDeviceCanAccessPeer");
                goto done;
            }
            e = cudaDeviceGetP2PAttribute(&rank, cudaDevP2PAttrPerformanceRank, a, b);
            if (e != cudaSuccess) {
                /* Without peer access the rank means nothing; say 0. The
                 * error is not sticky, but clear it for what follows. */
                if (access) {
                    rc = cu_fail(err, e, "cudaDeviceGetP2PAttribute(PerformanceRank)");
                    goto done;
                }
                cudaGetLastError();
                rank = 0;
            }
            fprintf(f, "peer %d %d %d %d\n", a, b, access ? 1 : 0, rank);
        }
done:
    if (fclose(f) != 0 && rc == 0)
        rc = ein_fail(err, EIN_ENOMEM, "out of memory");
    if (rc == 0 && (fwrite(text, 1, len, out) != len || fflush(out) != 0))
        rc = ein_fail(err, EIN_EIO, "cannot write the probe: %m");
    free(text);
    return rc;
}
