/* tests/e2e/test_e2e_small.c — einrun with operators smaller than the
 * device count (issue 15).
 *
 * A softmax of a [24] vector (no shardable index: one device computes it),
 * a softmax over the rows of a [3, 24] matrix (at most 3 ways) and a
 * softmax of a [37] reduction, mixed with matmuls that split P ways, on 1
 * to 8 CPU devices: devices without a function specification idle for the
 * small operators, their outputs are saved from fewer blocks than devices,
 * graph inputs are loaded in the blocks the small operators want, and
 * their results are repartitioned (multicast) into the P-way operators;
 * and a program whose only operator is small, so that devices 1..P-1 run
 * empty Programs.
 * The reference is computed here in double precision from ein_rand_value
 * (inputs are generated from the seed), never by einrun. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/io/ein_npy.h"
#include "common/io/ein_rand.h"
#include "tests/e2e/e2e_util.h"

enum { N = 24, M = 37, R = 3 };

static const char *PROG =
    "# operators smaller than the device count\n"
    "dims n=24 m=37 r=3\n"
    "input v[n]\n"
    "input A[m, n]\n"
    "input B[n, m]\n"
    "input X[r, n]\n"
    "s = softmax(v)\n"
    "h = mul(A, s)\n"
    "C = matmul(h, B)\n"
    "rs = reduce_sum(C, 1)\n"
    "q = softmax(rs)\n"
    "t = softmax(X)\n"
    "u = matmul(t, B)\n"
    "save s\n"
    "save C\n"
    "save q\n"
    "save t\n"
    "save u\n";

static double *gen(const char *name, int n)
{
    double *d = malloc(sizeof(double) * (size_t)n);
    assert_non_null(d);
    uint64_t key = ein_rand_key(name);
    for (int i = 0; i < n; i++)
        d[i] = ein_rand_value(7, key, (uint64_t)i);
    return d;
}

/* Softmax of each of `rows` rows of length `len`, in place. */
static void softmax_ref(double *x, int rows, int len)
{
    for (int r = 0; r < rows; r++) {
        double *p = x + r * len, mx = p[0], s = 0;
        for (int i = 1; i < len; i++)
            mx = fmax(mx, p[i]);
        for (int i = 0; i < len; i++)
            s += p[i] = exp(p[i] - mx);
        for (int i = 0; i < len; i++)
            p[i] /= s;
    }
}

static void check_output(const char *name, const double *ref, int rank, const int64_t *shape)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s.npy", e2e_scratch(), name);
    ein_npy_info info;
    void *data = NULL;
    ein_error err = {0};
    if (ein_npy_load(path, &info, &data, &err) < 0)
        fail_msg("cannot read %s: %s", path, err.msg);
    assert_int_equal(info.dtype, EIN_F32);
    assert_int_equal(info.rank, rank);
    int64_t n = 1;
    for (int a = 0; a < rank; a++) {
        assert_int_equal(info.shape[a], shape[a]);
        n *= shape[a];
    }
    const float *y = data;
    double scale = 0;
    for (int64_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(ref[i]));
    for (int64_t i = 0; i < n; i++)
        if (!(fabs(y[i] - ref[i]) <= 1e-5 * scale + 1e-6)) /* NaN fails too */
            fail_msg("%s[%lld] = %.7g, expected %.7g", name, (long long)i, y[i], ref[i]);
    free(data);
    unlink(path);
}

static void small_case(int ndev, const char *schedule)
{
    const char *prog = e2e_write_file("small.ein", PROG);
    double *s = gen("v", N), *A = gen("A", M * N), *B = gen("B", N * M), *t = gen("X", R * N);
    double *h = malloc(sizeof(double) * M * N), *C = malloc(sizeof(double) * M * M);
    double *q = calloc(M, sizeof(double)), *u = malloc(sizeof(double) * R * M);
    assert_true(h && C && q && u);
    softmax_ref(s, 1, N);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++)
            h[i * N + j] = A[i * N + j] * s[j];
    e2e_matmul_ref(h, B, C, M, N, M);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < M; j++)
            q[i] += C[i * M + j];
    softmax_ref(q, 1, M);
    softmax_ref(t, R, N);
    e2e_matmul_ref(t, B, u, R, N, M);

    char ndevs[32], out[8192];
    snprintf(ndevs, sizeof ndevs, "%d", ndev);
    char *argv[16];
    int a = 0;
    argv[a++] = (char *)e2e_bin("einrun");
    argv[a++] = "--cpu";
    argv[a++] = ndevs;
    argv[a++] = "--seed";
    argv[a++] = "7";
    argv[a++] = "--timeout";
    argv[a++] = "60";
    argv[a++] = "--schedule";
    argv[a++] = (char *)schedule;
    argv[a++] = (char *)prog;
    argv[a] = NULL;
    int rc = e2e_run(argv, out, sizeof out);
    if (rc != 0)
        fail_msg("einrun on %d devices exited %d:\n%s", ndev, rc, out);
    /* s has one block, so one device writes it whatever P is. */
    if (!strstr(out, "saved s [24] f32 to s.npy (blocks written by device 0)"))
        fail_msg("s must be written by device 0 alone:\n%s", out);
    check_output("s", s, 1, (int64_t[]){N});
    check_output("C", C, 2, (int64_t[]){M, M});
    check_output("q", q, 1, (int64_t[]){M});
    check_output("t", t, 2, (int64_t[]){R, N});
    check_output("u", u, 2, (int64_t[]){R, M});
    char what[4096];
    if (e2e_leftovers(what, sizeof what))
        fail_msg("leftovers after a successful run: %s", what);
    free(s), free(A), free(B), free(t), free(h), free(C), free(q), free(u);
}

/* Every operator smaller than P: devices 1..P-1 get empty Programs. */
static void all_small(void **st)
{
    (void)st;
    const char *prog = e2e_write_file("vec.ein", "dims n=24\ninput v[n]\n"
                                      "s = softmax(v)\nsave s\n");
    double *s = gen("v", N);
    softmax_ref(s, 1, N);
    char out[8192];
    char *argv[] = {(char *)e2e_bin("einrun"), "--cpu", "4", "--seed", "7", "--timeout", "60",
                    (char *)prog, NULL};
    int rc = e2e_run(argv, out, sizeof out);
    if (rc != 0)
        fail_msg("einrun on 4 devices exited %d:\n%s", rc, out);
    check_output("s", s, 1, (int64_t[]){N});
    char what[4096];
    if (e2e_leftovers(what, sizeof what))
        fail_msg("leftovers after a successful run: %s", what);
    free(s);
}

#define CASE(n)                                                             \
    static void search_##n(void **st) { (void)st; small_case(n, "search"); } \
    static void naive_##n(void **st) { (void)st; small_case(n, "naive"); }
CASE(1)
CASE(2)
CASE(3)
CASE(4)
CASE(5)
CASE(7)
CASE(8)

static int teardown(void **st)
{
    (void)st;
    e2e_scratch_remove();
    return 0;
}

#define ENTRY(n) cmocka_unit_test(search_##n), cmocka_unit_test(naive_##n)

int main(void)
{
    e2e_scratch();
    const struct CMUnitTest tests[] = {
        ENTRY(1), ENTRY(2), ENTRY(3), ENTRY(4), ENTRY(5), ENTRY(7), ENTRY(8),
        cmocka_unit_test(all_small),
    };
    return cmocka_run_group_tests_name("e2e_small", tests, NULL, teardown);
}
