/* tests/fuzz/fuzz_npy.c — .npy headers and box reads. The input is the
 * file (an in-memory file, /proc/self/fd/N). */
#define _GNU_SOURCE
#include "tests/fuzz/fuzz_util.h"

#include <sys/mman.h>
#include <unistd.h>

#include "common/io/ein_npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("fuzz.npy", 0);
        if (fd < 0)
            abort();
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) < 0 || pwrite(fd, data, size, 0) != (ssize_t)size)
        abort();
    ein_error err = {0};
    ein_npy_info info;
    if (ein_npy_read_info(path, &info, &err) < 0) {
        fuzz_check_msg(&err);
        return 0;
    }
    fuzz_check(info.rank >= 0 && info.rank <= EIN_MAX_RANK, "rank %d", info.rank);
    /* The whole array and its last half along dim 0, when small. */
    ein_box box = ein_box_of_shape(info.rank, info.shape);
    int64_t n = ein_box_volume(&box);
    if (n >= 0 && n <= (1 << 20)) {
        /* Sized by the file's dtype: i64 elements are 8 bytes. */
        size_t esz = ein_dtype_size(info.dtype);
        fuzz_check(esz >= 1 && esz <= 8, "element size %zu", esz);
        void *buf = malloc((size_t)(n ? n : 1) * esz);
        if (!buf)
            abort();
        if (ein_npy_read_box(path, &info, &box, buf, &err) < 0)
            fuzz_check_msg(&err);
        if (info.rank > 0) {
            box.lo[0] = box.hi[0] / 2;
            if (ein_npy_read_box(path, &info, &box, buf, &err) < 0)
                fuzz_check_msg(&err);
            box.hi[0] += 1; /* outside the shape: must be refused */
            fuzz_check(ein_npy_read_box(path, &info, &box, buf, &err) < 0,
                       "box outside the shape accepted");
        }
        free(buf);
        void *all = NULL;
        ein_npy_info i2;
        if (ein_npy_load(path, &i2, &all, &err) == 0)
            free(all);
    }
    return 0;
}
