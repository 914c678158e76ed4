/* tools/bench-copy.c — peer-copy bandwidth of the CPU backend.
 *
 * A child process creates a device segment and fills it (as a worker
 * would); the parent maps it as a peer and copies it into its own segment
 * with the backend's copy, repeatedly. The same copy between two buffers of
 * one process (plain memcpy) is the baseline, measured in the same run.
 *   bench-copy [MiB] [repetitions]      (default 256 MiB, 10) */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/ein_clock.h"
#include "worker/wk_backend.h"

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 256;
    int reps = argc > 2 ? atoi(argv[2]) : 10;
    if (mib < 1 || reps < 1 || reps > 1000) {
        fprintf(stderr, "usage: bench-copy [MiB] [repetitions]\n");
        return 2;
    }
    size_t bytes = mib << 20;
    char name[64], ownname[64];
    snprintf(name, sizeof name, "/ein-bench-%ld-1", (long)getpid());
    snprintf(ownname, sizeof ownname, "/ein-bench-%ld-0", (long)getpid());
    int pipefd[2];
    if (pipe(pipefd) < 0)
        return 1;
    pid_t child = fork();
    if (child == 0) {
        wk_backend *be = wk_backend_cpu_new(2, 0);
        void *base;
        ein_error err = {0};
        if (be->segment_create(be, name, bytes, &base, &err) < 0) {
            fprintf(stderr, "bench-copy: %s\n", err.msg);
            _exit(1);
        }
        memset(base, 7, bytes);
        char c = 1;
        if (write(pipefd[1], &c, 1) != 1)
            _exit(1);
        pause(); /* until the parent is done */
        be->destroy(be);
        _exit(0);
    }
    char c;
    if (read(pipefd[0], &c, 1) != 1) {
        fprintf(stderr, "bench-copy: the peer failed\n");
        return 1;
    }
    wk_backend *be = wk_backend_cpu_new(2, 0);
    ein_error err = {0};
    void *own;
    const void *peer;
    size_t pbytes;
    int rc = 1;
    if (be->segment_create(be, ownname, bytes, &own, &err) < 0 ||
        be->peer_open(be, 1, name, &peer, &pbytes, &err) < 0) {
        fprintf(stderr, "bench-copy: %s\n", err.msg);
        goto out;
    }
    char *a = malloc(bytes), *b = malloc(bytes);
    double *tp = malloc(sizeof(double) * (size_t)reps), *tm = malloc(sizeof(double) * (size_t)reps);
    if (!a || !b || !tp || !tm)
        goto out;
    memset(a, 3, bytes);
    memset(b, 0, bytes);
    memset(own, 0, bytes);
    be->copy(be, own, peer, bytes, &err); /* first touch of both mappings */
    for (int i = 0; i < reps; i++) {
        double t0 = ein_now_s();
        be->copy(be, own, peer, bytes, &err);
        double t1 = ein_now_s();
        memcpy(b, a, bytes);
        double t2 = ein_now_s();
        tp[i] = t1 - t0;
        tm[i] = t2 - t1;
    }
    qsort(tp, (size_t)reps, sizeof *tp, cmp);
    qsort(tm, (size_t)reps, sizeof *tm, cmp);
    double gp = (double)bytes / tp[reps / 2] / 1e9, gm = (double)bytes / tm[reps / 2] / 1e9;
    printf("peer copy (shared memory, other process): %.2f GB/s (median of %d, %zu MiB)\n", gp,
           reps, mib);
    printf("memcpy in one process:                    %.2f GB/s\n", gm);
    printf("ratio: %.0f%% (target >= 70%%)\n", 100.0 * gp / gm);
    rc = 0;
    free(a), free(b), free(tp), free(tm);
out:
    kill(child, SIGTERM);
    waitpid(child, NULL, 0);
    be->destroy(be);
    /* The child was killed in pause(): remove its segment for it. */
    shm_unlink(name);
    return rc;
}
