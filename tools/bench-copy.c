/* tools/bench-copy.c — peer-copy bandwidth of a worker backend.
 *
 * A child process creates a device segment and fills it (as a worker
 * would); the parent opens it as a peer and copies it into its own segment
 * with the backend's copy, repeatedly, each copy waited for. The same copy
 * between two buffers of one process is the baseline, measured in the same
 * run.
 *   bench-copy [MiB] [repetitions]          CPU backend: shared memory vs memcpy
 *   bench-copy-cuda --cuda[=GPU] [MiB] [reps]  CUDA backend (worker/wk_backend_cuda.c):
 *       two processes on one GPU, CUDA IPC, vs cudaMemcpy device to device
 *       in one process (tools/gpu-check runs it). The copied bytes are
 *       checked (first and last 4 KiB).
 * Default 256 MiB, 10 repetitions; the median is reported. Exit 0 on
 * success, 1 on a failure (the CUDA error is printed), 2 on bad usage.
 * The parent touches no CUDA API before the fork. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/base/ein_clock.h"
#include "worker/wk_backend.h"

#ifdef EIN_BENCH_CUDA
#include <cuda_runtime_api.h>
#endif

#define CHECK_BYTES 4096

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static wk_backend *backend_new(int cuda, int gpu, ein_error *err)
{
#ifdef EIN_BENCH_CUDA
    if (cuda)
        return wk_backend_cuda_new(2, gpu, err);
#else
    (void)gpu;
    if (cuda) {
        ein_fail(err, EIN_EUNSUPPORTED, "this bench-copy was built without CUDA (use bench-copy-cuda)");
        return NULL;
    }
#endif
    wk_backend *be = wk_backend_cpu_new(2, 0);
    if (!be)
        ein_fail(err, EIN_ENOMEM, "out of memory");
    return be;
}

/* The child: create and fill the segment, say so on `fd` ("ok" or the
 * error), and keep it until the parent closes its end. */
static int child_main(int cuda, int gpu, const char *name, size_t bytes, int fd_out, int fd_in)
{
    ein_error err = {0};
    char msg[sizeof err.msg + 4] = "ok";
    void *base = NULL;
    wk_backend *be = backend_new(cuda, gpu, &err);
    int rc = be ? be->mem.segment_create(be, name, bytes, &base, &err) : -1;
    if (rc == 0) {
        if (be->mem.host_visible) {
            memset(base, 7, bytes);
        } else {
            char *fill = malloc(bytes);
            if (!fill) {
                rc = ein_fail(&err, EIN_ENOMEM, "out of host memory");
            } else {
                memset(fill, 7, bytes);
                rc = be->mem.upload(be, base, fill, bytes, &err);
                free(fill);
            }
        }
    }
    if (rc < 0)
        snprintf(msg, sizeof msg, "%s", err.msg[0] ? err.msg : "cannot create the backend");
    if (write(fd_out, msg, strlen(msg) + 1) < 0)
        rc = -1;
    char c;
    while (rc == 0 && read(fd_in, &c, 1) > 0)
        ; /* until the parent is done */
    if (be)
        be->destroy(be);
    return rc < 0;
}

/* The baseline: a copy between two buffers of this process. */
static int baseline(int cuda, size_t bytes, int reps, double *t, ein_error *err)
{
#ifdef EIN_BENCH_CUDA
    if (cuda) {
        void *a = NULL, *b = NULL;
        cudaError_t e = cudaMalloc(&a, bytes);
        if (e == cudaSuccess)
            e = cudaMalloc(&b, bytes);
        if (e == cudaSuccess)
            e = cudaMemset(a, 3, bytes);
        for (int i = -1; i < reps && e == cudaSuccess; i++) {
            double t0 = ein_now_s();
            e = cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
            if (e == cudaSuccess)
                e = cudaDeviceSynchronize();
            if (i >= 0)
                t[i] = ein_now_s() - t0;
        }
        cudaFree(a);
        cudaFree(b);
        return e == cudaSuccess ? 0
                                : ein_fail(err, EIN_EDEVICE, "cudaMemcpy baseline: %s (%s)",
                                           cudaGetErrorString(e), cudaGetErrorName(e));
    }
#else
    (void)cuda;
#endif
    char *a = malloc(bytes), *b = malloc(bytes);
    if (!a || !b) {
        free(a);
        free(b);
        return ein_fail(err, EIN_ENOMEM, "out of host memory");
    }
    memset(a, 3, bytes);
    memset(b, 0, bytes);
    for (int i = 0; i < reps; i++) {
        double t0 = ein_now_s();
        memcpy(b, a, bytes);
        t[i] = ein_now_s() - t0;
    }
    free(a);
    free(b);
    return 0;
}

/* The first and last CHECK_BYTES of our segment hold the child's 7s. */
static int verify(wk_backend *be, const char *own, size_t bytes, ein_error *err)
{
    unsigned char buf[CHECK_BYTES];
    size_t n = bytes < CHECK_BYTES ? bytes : CHECK_BYTES;
    for (int end = 0; end < 2; end++) {
        const char *src = end ? own + bytes - n : own;
        int rc = be->mem.host_visible ? (memcpy(buf, src, n), 0)
                                      : be->mem.download(be, buf, src, n, err);
        if (rc < 0)
            return rc;
        for (size_t i = 0; i < n; i++)
            if (buf[i] != 7)
                return ein_fail(err, EIN_EDEVICE, "the copied segment is wrong at byte %zu: %d, "
                                "expected 7", (end ? bytes - n : 0) + i, buf[i]);
    }
    return 0;
}

int main(int argc, char **argv)
{
    int cuda = 0, gpu = 0, a = 1;
    if (argc > 1 && !strncmp(argv[1], "--cuda", 6)) {
        cuda = 1;
        if (argv[1][6] == '=')
            gpu = atoi(argv[1] + 7);
        else if (argv[1][6])
            a = argc; /* bad option: usage below */
        a++;
    }
    size_t mib = argc > a ? (size_t)atol(argv[a]) : 256;
    int reps = argc > a + 1 ? atoi(argv[a + 1]) : 10;
    if (argc > a + 2 || mib < 1 || mib > (1u << 20) || reps < 1 || reps > 1000 || gpu < 0) {
        fprintf(stderr, "usage: bench-copy [--cuda[=GPU]] [MiB] [repetitions]\n");
        return 2;
    }
    size_t bytes = mib << 20;
    char name[64], ownname[64];
    snprintf(name, sizeof name, "/ein-bench-%ld-1", (long)getpid());
    snprintf(ownname, sizeof ownname, "/ein-bench-%ld-0", (long)getpid());
    int up[2], down[2];
    if (pipe(up) < 0 || pipe(down) < 0)
        return 1;
    fflush(stdout);
    pid_t child = fork();
    if (child < 0)
        return 1;
    if (child == 0) {
        close(up[0]);
        close(down[1]);
        _exit(child_main(cuda, gpu, name, bytes, up[1], down[0]));
    }
    close(up[1]);
    close(down[0]);
    char msg[600];
    ssize_t got = read(up[0], msg, sizeof msg - 1);
    msg[got > 0 ? got : 0] = '\0';
    ein_error err = {0};
    wk_backend *be = NULL;
    double *tp = NULL, *tm = NULL;
    int rc = 1;
    if (strcmp(msg, "ok")) {
        fprintf(stderr, "bench-copy: the peer process failed: %s\n", got > 0 ? msg : "(no answer)");
        goto out;
    }
    void *own;
    const void *peer;
    size_t pbytes;
    tp = malloc(sizeof(double) * (size_t)reps);
    tm = malloc(sizeof(double) * (size_t)reps);
    if (!tp || !tm || !(be = backend_new(cuda, gpu, &err)) ||
        be->mem.segment_create(be, ownname, bytes, &own, &err) < 0 ||
        be->mem.peer_open(be, 1, name, &peer, &pbytes, &err) < 0) {
        fprintf(stderr, "bench-copy: %s\n", err.msg[0] ? err.msg : "out of memory");
        goto out;
    }
    if (pbytes < bytes) {
        fprintf(stderr, "bench-copy: the peer's segment has %zu bytes, not %zu\n", pbytes, bytes);
        goto out;
    }
    /* The first copy touches both mappings (and opens the IPC mapping). */
    for (int i = -1; i < reps; i++) {
        double t0 = ein_now_s();
        if (be->dev.copy(be, own, peer, bytes, &err) < 0 || be->ord.sync(be, &err) < 0) {
            fprintf(stderr, "bench-copy: %s\n", err.msg);
            goto out;
        }
        if (i >= 0)
            tp[i] = ein_now_s() - t0;
    }
    if (verify(be, own, bytes, &err) < 0 || baseline(cuda, bytes, reps, tm, &err) < 0) {
        fprintf(stderr, "bench-copy: %s\n", err.msg);
        goto out;
    }
    qsort(tp, (size_t)reps, sizeof *tp, cmp);
    qsort(tm, (size_t)reps, sizeof *tm, cmp);
    double gp = (double)bytes / tp[reps / 2] / 1e9, gm = (double)bytes / tm[reps / 2] / 1e9;
    if (cuda) {
        printf("peer copy (CUDA IPC, other process, same GPU): %.2f GB/s (median of %d, %zu MiB, "
               "checked)\n", gp, reps, mib);
        printf("cudaMemcpy device to device in one process:    %.2f GB/s\n", gm);
    } else {
        printf("peer copy (shared memory, other process): %.2f GB/s (median of %d, %zu MiB)\n",
               gp, reps, mib);
        printf("memcpy in one process:                    %.2f GB/s\n", gm);
    }
    printf("ratio: %.0f%% (target >= 70%%)\n", 100.0 * gp / gm);
    rc = 0;
out:
    close(down[1]); /* the child ends */
    close(up[0]);
    waitpid(child, NULL, 0);
    if (be)
        be->destroy(be);
    free(tp);
    free(tm);
    shm_unlink(name); /* in case the child could not */
    return rc;
}
