/* common/io/ein_raw.c — see ein_raw.h. */
#include "common/io/ein_raw.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/io/ein_file.h"

typedef struct raw_ctx {
    char *dst;
    const char *src;    /* the mapping */
    uint64_t src_base;  /* file offset of element 0, minus the mapping's start */
    size_t elem, run;   /* bytes per element, per run */
} raw_ctx;

static int copy_run(int64_t dst_off, int64_t src_off, void *vctx)
{
    raw_ctx *c = vctx;
    /* src_base may be "negative" (wrapped): the sum is in range. */
    memcpy(c->dst + (size_t)dst_off * c->elem,
           c->src + (size_t)(c->src_base + (uint64_t)src_off * c->elem), c->run);
    return 0;
}

int ein_raw_read_box(const char *path, uint64_t offset, ein_dtype dtype, int rank,
                     const int64_t *shape, const ein_box *box, void *dst, size_t *mapped,
                     ein_error *err)
{
    char b[256];
    int rc, fd;
    struct stat st;
    if (mapped)
        *mapped = 0;
    if (!ein_dtype_valid((int)dtype) || rank < 0 || rank > EIN_MAX_RANK || box->rank != rank)
        return ein_fail(err, EIN_EINVAL, "%s: bad raw read (dtype %d, rank %d, box rank %d)", path,
                        (int)dtype, rank, box->rank);
    size_t elem = ein_dtype_size(dtype);
    /* A block dtype (q8_0, q4_0) is read in whole blocks: the tensor and the
     * box with their last dim counted in blocks. */
    ein_box ubox;
    int64_t ushape[EIN_MAX_RANK];
    if (ein_dtype_is_block((int)dtype)) {
        int64_t blk = ein_dtype_block((int)dtype);
        if (rank < 1 || shape[rank - 1] % blk != 0 || !(elem = ein_dtype_unit_box(dtype, box, &ubox)))
            return ein_fail(err, EIN_ESHAPE, "%s: a %s tensor and box need a last dim on "
                            "%lld-element blocks (box %s)", path, ein_dtype_name(dtype),
                            (long long)blk, ein_box_format(box, b, sizeof b));
        memcpy(ushape, shape, sizeof(int64_t) * (size_t)rank);
        ushape[rank - 1] /= blk;
        shape = ushape;
        box = &ubox;
    }
    uint64_t volume = 1;
    for (int d = 0; d < rank; d++) {
        if (shape[d] < 0 || __builtin_mul_overflow(volume, (uint64_t)shape[d], &volume))
            return ein_fail(err, EIN_EINVAL, "%s: bad tensor shape", path);
        if (box->lo[d] < 0 || box->hi[d] < box->lo[d] || box->hi[d] > shape[d])
            return ein_fail(err, EIN_ESHAPE, "%s: box %s is not inside the tensor's shape", path,
                            ein_box_format(box, b, sizeof b));
    }
    uint64_t bytes, end;
    if (__builtin_mul_overflow(volume, (uint64_t)elem, &bytes) ||
        __builtin_add_overflow(offset, bytes, &end) || end > (uint64_t)INT64_MAX)
        return ein_fail(err, EIN_EINVAL, "%s: tensor of %llu elements at offset %llu is too large",
                        path, (unsigned long long)volume, (unsigned long long)offset);
    if ((rc = ein_file_open_regular(path, &fd, &st, err)) < 0)
        return rc;
    if ((uint64_t)st.st_size < end) {
        close(fd);
        return ein_fail(err, EIN_ESHAPE, "%s: %lld bytes, too short for a tensor of %llu bytes at "
                                         "offset %llu (changed since the run was planned?)", path,
                        (long long)st.st_size, (unsigned long long)bytes,
                        (unsigned long long)offset);
    }
    if (ein_box_empty(box) && rank > 0) {
        close(fd);
        return 0;
    }
    /* The box's first and last element in the file. */
    int64_t stride[EIN_MAX_RANK];
    int64_t first = 0, last = 0;
    for (int d = rank - 1; d >= 0; d--) {
        stride[d] = d == rank - 1 ? 1 : stride[d + 1] * shape[d + 1];
        first += box->lo[d] * stride[d];
        last += (box->hi[d] - 1) * stride[d];
    }
    uint64_t lo = offset + (uint64_t)first * elem, hi = offset + (uint64_t)last * elem + elem;
    long page = sysconf(_SC_PAGESIZE);
    uint64_t map_lo = lo - lo % (uint64_t)(page > 0 ? page : 4096);
    size_t map_len = (size_t)(hi - map_lo);
    void *m = mmap(NULL, map_len, PROT_READ, MAP_PRIVATE, fd, (off_t)map_lo);
    int e = errno;
    close(fd);
    if (m == MAP_FAILED)
        return ein_fail(err, EIN_EIO, "%s: cannot map bytes %llu..%llu: %s", path,
                        (unsigned long long)map_lo, (unsigned long long)hi, strerror(e));
    if (mapped)
        *mapped = map_len;
    /* Dims after k are covered whole, so each run is contiguous in the file. */
    int k = rank > 0 ? rank - 1 : 0;
    while (k > 0 && box->lo[k] == 0 && box->hi[k] == shape[k])
        k--;
    raw_ctx c = {.dst = dst, .src = m, .src_base = offset - map_lo, .elem = elem};
    if (rank == 0) {
        c.run = elem;
        copy_run(0, 0, &c);
    } else {
        c.run = (size_t)((box->hi[k] - box->lo[k]) * stride[k]) * elem;
        /* A narrow column block touches a few bytes per row: no read-ahead. */
        madvise(m, map_len, k > 0 && c.run * 4 < (size_t)stride[k - 1] * elem ? MADV_RANDOM
                                                                               : MADV_SEQUENTIAL);
        ein_box whole = ein_box_of_shape(rank, shape);
        ein_box_walk(box, &whole, box, k, copy_run, &c);
    }
    munmap(m, map_len);
    return 0;
}
