/* tests/fuzz/fuzz_safetensors.c — .safetensors headers (jansson) and raw box
 * reads by mmap. The input is the whole file, opened through an in-memory
 * file (/proc/self/fd/N) and also parsed from memory: both must agree, and
 * an accepted file's tensors must lie inside it, without overlap, sorted by
 * name, and read back (whole, and their second half) without a fault. */
#define _GNU_SOURCE
#include "tests/fuzz/fuzz_util.h"

#include <sys/mman.h>
#include <unistd.h>

#include "common/io/ein_raw.h"
#include "common/io/ein_safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("fuzz.safetensors", 0);
        if (fd < 0)
            abort();
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) < 0 || pwrite(fd, data, size, 0) != (ssize_t)size)
        abort();
    ein_error err = {0}, err2 = {0};
    ein_safetensors *st = NULL, *sm = NULL;
    int rc = ein_safetensors_open(path, &st, &err);
    int rm = ein_safetensors_parse(data, size, path, &sm, &err2);
    fuzz_check(rc == rm, "open %d but parse %d", rc, rm);
    if (rc < 0) {
        fuzz_check_msg(&err);
        fuzz_check(!strcmp(err.msg, err2.msg), "'%s' vs '%s'", err.msg, err2.msg);
        return 0;
    }
    fuzz_check(st->ntensors == sm->ntensors, "tensor counts differ");
    uint64_t total = 0;
    for (int i = 0; i < st->ntensors; i++) {
        const ein_st_tensor *t = &st->tensors[i];
        fuzz_check(t->offset >= st->data_start && t->offset + t->bytes <= size, "tensor outside");
        fuzz_check(i == 0 || strcmp(st->tensors[i - 1].name, t->name) < 0, "not sorted");
        fuzz_check(ein_safetensors_find(st, t->name) == t, "find");
        total += t->bytes;
        if (t->dtype < 0 || t->bytes > (1u << 16))
            continue;
        void *buf = malloc(t->bytes + 1);
        if (!buf)
            abort();
        ein_box box = ein_box_of_shape(t->rank, t->shape);
        size_t mapped = 0;
        if (ein_raw_read_box(path, t->offset, (ein_dtype)t->dtype, t->rank, t->shape, &box, buf,
                             &mapped, &err) < 0)
            fuzz_check(0, "whole tensor '%s' unreadable: %s", t->name, err.msg);
        fuzz_check(!t->bytes || !memcmp(buf, data + t->offset, t->bytes), "read differs");
        if (t->rank > 0) {
            box.lo[0] = box.hi[0] / 2;
            if (ein_raw_read_box(path, t->offset, (ein_dtype)t->dtype, t->rank, t->shape, &box,
                                 buf, &mapped, &err) < 0)
                fuzz_check(0, "half of '%s' unreadable: %s", t->name, err.msg);
            box.hi[0] += 1;
            fuzz_check(ein_raw_read_box(path, t->offset, (ein_dtype)t->dtype, t->rank, t->shape,
                                        &box, buf, NULL, &err) < 0, "box outside accepted");
        }
        free(buf);
    }
    fuzz_check(st->data_start + total == size, "bytes not all covered");
    ein_safetensors_free(st);
    ein_safetensors_free(sm);
    return 0;
}
