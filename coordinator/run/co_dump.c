/* coordinator/run/co_dump.c — see co_dump.h. */
#include "coordinator/run/co_dump.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/io/ein_npy.h"
#include "common/io/ein_rand.h"
#include "common/io/ein_raw.h"

#define CO_DUMP_SLAB ((size_t)32 << 20)

/* Fill `dst` (dense over `box`) from input v's source. */
static int read_slab(const pl_node *nd, const co_input_src *s, const ein_npy_info *info,
                     uint64_t seed, const ein_box *box, void *dst, ein_error *err)
{
    if (!s || !s->path) {
        ein_rand_fill_box(seed, ein_rand_key(nd->name), nd->shape, box, nd->dtype, dst);
        return 0;
    }
    if (s->format == EIN_LOAD_RAW)
        return ein_raw_read_box(s->path, s->offset, nd->dtype, nd->rank, nd->shape, box, dst,
                                NULL, err);
    return ein_npy_read_box(s->path, info, box, dst, err);
}

static int dump_one(const pl_node *nd, const co_input_src *s, uint64_t seed, const char *path,
                    ein_error *err)
{
    int rc;
    ein_npy_info info = {0};
    if (s && s->path && s->format == EIN_LOAD_NPY) {
        if ((rc = ein_npy_read_info(s->path, &info, err)) < 0)
            return rc;
        if (info.dtype != nd->dtype || info.rank != nd->rank ||
            memcmp(info.shape, nd->shape, sizeof(int64_t) * (size_t)nd->rank))
            return ein_fail(err, EIN_ESHAPE, "%s changed since the run was planned", s->path);
    }
    if ((rc = ein_npy_create(path, nd->dtype, nd->rank, nd->shape, err)) < 0)
        return rc;
    ein_box all = ein_box_of_shape(nd->rank, nd->shape);
    if (ein_box_volume(&all) == 0)
        return 0;
    size_t elem = ein_dtype_size(nd->dtype), row = elem;
    for (int d = 1; d < nd->rank; d++)
        row *= (size_t)nd->shape[d];
    int64_t rows = nd->rank == 0 ? 1 : (int64_t)(CO_DUMP_SLAB / (row ? row : 1));
    if (rows < 1)
        rows = 1;
    int64_t n0 = nd->rank == 0 ? 1 : nd->shape[0];
    size_t cap = (size_t)(rows < n0 ? rows : n0) * row;
    void *buf = malloc(cap ? cap : 1);
    if (!buf)
        return ein_fail(err, EIN_ENOMEM, "%s: out of memory for a %zu-byte slab", path, cap);
    for (int64_t lo = 0; lo < n0 && rc == 0; lo += rows) {
        ein_box b = all;
        if (nd->rank > 0) {
            b.lo[0] = lo;
            b.hi[0] = lo + rows < n0 ? lo + rows : n0;
        }
        if ((rc = read_slab(nd, s, &info, seed, &b, buf, err)) == 0)
            rc = ein_npy_write_box(path, &b, buf, err);
    }
    free(buf);
    return rc;
}

int co_dump_inputs(const pl_graph *g, const co_input_src *src, uint64_t seed, const char *dir,
                   ein_progress *progress, int *ndumped, ein_error *err)
{
    struct stat st;
    int rc = 0, n = 0;
    if (mkdir(dir, 0777) < 0 && errno != EEXIST)
        return ein_fail(err, EIN_EIO, "%s: cannot create the directory: %s", dir,
                        strerror(errno));
    if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
        return ein_fail(err, EIN_EIO, "%s: not a directory", dir);
    for (int v = 0; v < g->nnodes; v++) {
        const pl_node *nd = pl_graph_node(g, v);
        if (nd->kind != PL_INPUT)
            continue;
        if (!nd->name[0] || strchr(nd->name, '/') || !strcmp(nd->name, ".") ||
            !strcmp(nd->name, ".."))
            return ein_fail(err, EIN_EINVAL, "%s: input '%s' cannot be a file name", dir,
                            nd->name);
        size_t len = strlen(dir) + strlen(nd->name) + 6;
        char *path = malloc(len);
        if (!path)
            return ein_fail(err, EIN_ENOMEM, "out of memory");
        snprintf(path, len, "%s/%s.npy", dir, nd->name);
        rc = dump_one(nd, src ? &src[v] : NULL, seed, path, err);
        free(path);
        if (rc < 0)
            return rc;
        ein_progress_step(progress, ++n);
    }
    if (ndumped)
        *ndumped = n;
    return 0;
}
