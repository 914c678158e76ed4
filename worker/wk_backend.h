/* worker/wk_backend.h — what a device backend provides to the executor.
 *
 * The executor (wk_exec.c) runs a Program against this interface and cannot
 * tell which backend it drives. The CPU backend keeps the device segment in
 * POSIX shared memory (peers map it read-only to copy from it) and runs
 * kernels with OpenBLAS; the CUDA backend (runtime issue) will export one
 * cudaMalloc region over IPC instead.
 *
 * Ownership: wk_backend_cpu_new returns a backend freed with be->destroy(),
 * which also unmaps every segment it created or opened and unlinks the one
 * it created. */
#ifndef WK_BACKEND_H
#define WK_BACKEND_H

#include <stddef.h>

#include "common/ein_error.h"
#include "common/ein_program.h"
#include "kernels/kn_cpu.h"

typedef struct wk_backend wk_backend;

struct wk_backend {
    const char *name;
    /* Create this device's segment of `bytes` under `name` and map it. */
    int (*segment_create)(wk_backend *be, const char *name, size_t bytes, void **base,
                          ein_error *err);
    /* Map a peer's segment (read-only), once; later calls return the cache. */
    int (*peer_open)(wk_backend *be, int peer, const char *name, const void **base,
                     size_t *bytes, ein_error *err);
    int (*copy)(wk_backend *be, void *dst, const void *src, size_t bytes, ein_error *err);
    int (*kernel)(wk_backend *be, const ein_kernel *k, const kn_block *ins, int nin,
                  kn_block *out, ein_error *err);
    int (*agg)(wk_backend *be, ein_agg op, const kn_block *srcs, int n, kn_block *out,
               ein_error *err);
    void (*destroy)(wk_backend *be);
};

wk_backend *wk_backend_cpu_new(int ndevices);

#endif
