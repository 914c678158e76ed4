/* tests/e2e/npytool.c — makes and compares .npy files for the shell tests
 * and tools/gpu-check (which must not depend on NumPy being installed).
 *   npytool write FILE DTYPE SEED D0 [D1 ...]   random values in [-1, 1)
 *   npytool info FILE                           prints "DTYPE D0 D1 ..."
 *   npytool compare A B [TOL]                   A against the reference B
 *
 * compare: both must have the same shape (dtypes may differ: values are
 * compared in double). It prints one line
 *   "compare A B: N elements, bytes identical|differ, max abs err E at I,
 *    max |B| M, scaled err E/M, tolerance T: ok|MISMATCH"
 * and exits 0 when every element is finite in both and max|A-B| <= TOL *
 * max|B| (TOL default 0: bytes must then be identical, dtypes too), 1 on a
 * mismatch, 2 on a usage or read error. The error is scaled by the largest
 * reference magnitude, not per element, because bf16 rounding of
 * intermediates makes small elements' relative errors meaningless. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/io/ein_npy.h"
#include "common/io/ein_rand.h"

static double value_at(ein_dtype dt, const void *data, size_t i)
{
    switch (dt) {
    case EIN_F32: return ((const float *)data)[i];
    case EIN_F16: return ein_f16_to_f32(((const uint16_t *)data)[i]);
    case EIN_BF16: return ein_bf16_to_f32(((const uint16_t *)data)[i]);
    default: return NAN;
    }
}

static int compare(const char *a, const char *b, double tol)
{
    ein_error err = {0};
    ein_npy_info ia, ib;
    void *da = NULL, *db = NULL;
    int rc = 2;
    if (ein_npy_load(a, &ia, &da, &err) < 0 || ein_npy_load(b, &ib, &db, &err) < 0) {
        fprintf(stderr, "npytool: %s\n", err.msg);
        goto out;
    }
    int same = ia.rank == ib.rank;
    size_t n = 1;
    for (int i = 0; same && i < ia.rank; i++) {
        same = ia.shape[i] == ib.shape[i];
        n *= (size_t)ia.shape[i];
    }
    if (!same) {
        fprintf(stderr, "npytool: %s and %s differ in shape\n", a, b);
        goto out;
    }
    int identical = ia.dtype == ib.dtype &&
                    !memcmp(da, db, n * ein_dtype_size(ia.dtype));
    double maxerr = 0, maxref = 0;
    size_t at = 0, bad_at = 0, nonfinite = 0;
    for (size_t i = 0; i < n; i++) {
        double x = value_at(ia.dtype, da, i), y = value_at(ib.dtype, db, i);
        if (!isfinite(x) || !isfinite(y)) {
            if (!nonfinite++)
                bad_at = i;
            continue;
        }
        if (fabs(y) > maxref)
            maxref = fabs(y);
        if (fabs(x - y) > maxerr) {
            maxerr = fabs(x - y);
            at = i;
        }
    }
    double scaled = maxref > 0 ? maxerr / maxref : maxerr;
    int ok = nonfinite == 0 && (tol == 0 ? identical : maxerr <= tol * maxref);
    char bad[96] = "";
    if (nonfinite)
        snprintf(bad, sizeof bad, ", %zu non-finite values (first at %zu)", nonfinite, bad_at);
    printf("compare %s %s: %zu elements, bytes %s, max abs err %.6g at %zu, max |B| %.6g, "
           "scaled err %.3g, tolerance %g%s: %s\n",
           a, b, n, identical ? "identical" : "differ", maxerr, at, maxref, scaled, tol, bad,
           ok ? "ok" : "MISMATCH");
    rc = ok ? 0 : 1;
out:
    free(da);
    free(db);
    return rc;
}

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
    if ((argc == 4 || argc == 5) && !strcmp(argv[1], "compare")) {
        double tol = 0;
        if (argc == 5) {
            char *end;
            tol = strtod(argv[4], &end);
            if (*end || !(tol >= 0)) {
                fprintf(stderr, "npytool: bad tolerance %s\n", argv[4]);
                return 2;
            }
        }
        return compare(argv[2], argv[3], tol);
    }
    fprintf(stderr, "usage: npytool write FILE DTYPE SEED D0 [D1 ...] | npytool info FILE |\n"
                    "       npytool compare A B [TOL]\n");
    return 2;
}
