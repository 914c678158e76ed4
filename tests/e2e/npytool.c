/* tests/e2e/npytool.c — makes .npy files for the shell tests (which must not
 * depend on NumPy being installed).
 *   npytool write FILE DTYPE SEED D0 [D1 ...]   random values in [-1, 1)
 *   npytool info FILE                           prints "DTYPE D0 D1 ..." */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ein_npy.h"
#include "common/ein_rand.h"

int main(int argc, char **argv)
{
    ein_error err = {0};
    if (argc >= 6 && !strcmp(argv[1], "write")) {
        ein_dtype dt;
        if (ein_dtype_parse(argv[3], strlen(argv[3]), &dt) < 0) {
            fprintf(stderr, "npytool: bad dtype %s\n", argv[3]);
            return 2;
        }
        int rank = argc - 5;
        if (rank > EIN_MAX_RANK)
            return 2;
        int64_t shape[EIN_MAX_RANK];
        for (int i = 0; i < rank; i++)
            shape[i] = atoll(argv[5 + i]);
        ein_box box = ein_box_of_shape(rank, shape);
        void *data = malloc((size_t)ein_box_volume(&box) * ein_dtype_size(dt) + 1);
        if (!data)
            return 1;
        ein_rand_fill_box(strtoull(argv[4], NULL, 10), ein_rand_key(argv[2]), shape, &box, dt, data);
        int rc = ein_npy_save(argv[2], dt, rank, shape, data, &err);
        free(data);
        if (rc < 0) {
            fprintf(stderr, "npytool: %s\n", err.msg);
            return 1;
        }
        return 0;
    }
    if (argc == 3 && !strcmp(argv[1], "info")) {
        ein_npy_info info;
        if (ein_npy_read_info(argv[2], &info, &err) < 0) {
            fprintf(stderr, "npytool: %s\n", err.msg);
            return 1;
        }
        printf("%s", ein_dtype_name(info.dtype));
        for (int i = 0; i < info.rank; i++)
            printf(" %lld", (long long)info.shape[i]);
        printf("\n");
        return 0;
    }
    fprintf(stderr, "usage: npytool write FILE DTYPE SEED D0 [D1 ...] | npytool info FILE\n");
    return 2;
}
