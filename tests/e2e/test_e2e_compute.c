/* tests/e2e/test_e2e_compute.c — einrun end to end on CPU devices.
 *
 * The FFN of the paper's §2 and a 3-matrix chain, on 1 to 8 devices, with
 * inputs given as .npy files and generated from the seed, with exchange
 * bodies synthesised (the default) and naive. The
 * reference is computed here with plain loops in double precision (from
 * the .npy data this test wrote, or from ein_rand_value for generated
 * inputs), never by einrun. After every run nothing may be left behind. */
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

/* Odd sizes, so that no split is even. */
enum { T = 37, DM = 24, DF = 50, CA = 19, CB = 33, CC = 7, CD = 29 };

static const char *FFN =
    "# FFN of the paper's section 2, small odd sizes\n"
    "dims tokens=37 d_model=24 d_ff=50\n"
    "dtype f32\n"
    "input x[tokens, d_model]\n"
    "input w1[d_model, d_ff]\n"
    "input w2[d_ff, d_model]\n"
    "act    = matmul(x, w1)\n"
    "hidden = relu(act)\n"
    "y      = matmul(hidden, w2)\n"
    "save y\n";

static const char *CHAIN =
    "# (A B) C with a contraction that is small in the middle\n"
    "dims a=19 b=33 c=7 d=29\n"
    "input A[a, b]\n"
    "input B[b, c]\n"
    "input C[c, d]\n"
    "AB = matmul(A, B)\n"
    "y  = einsum(\"ij,jk->ik\", AB, C)\n"
    "save y\n";

/* Fill an input: random values written to name.npy, or the generator's. */
static double *make_input(const char *name, int r, int c, int as_file, uint64_t seed)
{
    double *d = malloc(sizeof(double) * (size_t)(r * c));
    float *f = malloc(sizeof(float) * (size_t)(r * c));
    assert_non_null(d);
    assert_non_null(f);
    uint64_t key = ein_rand_key(name);
    for (int i = 0; i < r * c; i++) {
        /* Files get different values than the generator would give. */
        f[i] = as_file ? (float)((rand() % 2001) - 1000) / 1000.0f
                       : ein_rand_value(seed, key, (uint64_t)i);
        d[i] = f[i];
    }
    if (as_file) {
        char path[600];
        int64_t shape[2] = {r, c};
        ein_error err = {0};
        snprintf(path, sizeof path, "%s/%s.npy", e2e_scratch(), name);
        assert_int_equal(ein_npy_save(path, EIN_F32, 2, shape, f, &err), 0);
    }
    free(f);
    return d;
}

static void check_output(const char *path, const double *ref, int r, int c)
{
    ein_npy_info info;
    void *data = NULL;
    ein_error err = {0};
    if (ein_npy_load(path, &info, &data, &err) < 0)
        fail_msg("cannot read %s: %s", path, err.msg);
    assert_int_equal(info.dtype, EIN_F32);
    assert_int_equal(info.rank, 2);
    assert_int_equal(info.shape[0], r);
    assert_int_equal(info.shape[1], c);
    const float *y = data;
    double scale = 0;
    for (int i = 0; i < r * c; i++)
        scale = fmax(scale, fabs(ref[i]));
    for (int i = 0; i < r * c; i++)
        if (!(fabs(y[i] - ref[i]) <= 1e-5 * scale + 1e-6)) /* NaN fails too */
            fail_msg("%s[%d][%d] = %.7g, expected %.7g", path, i / c, i % c, y[i], ref[i]);
    free(data);
}

/* --schedule for the next runs (NULL: einrun's default, search), and one
 * more option (NULL: none). */
static const char *schedule, *extra;
/* --objective for einrun: the exchange tests below need the paper's plan
 * (comm), whose exchanges they inspect; the default (time) may have none. */
static const char *objective;
static char last_out[8192];     /* what the last einrun printed */

static void run_einrun(const char *program, int ndev, int as_file, const char **names,
                       int nin, int use_gpus_flag)
{
    char ndevs[32], gpus[32], out[8192];
    char *argv[32];
    int a = 0;
    argv[a++] = (char *)e2e_bin("einrun");
    if (use_gpus_flag) {
        snprintf(gpus, sizeof gpus, "0-%d", ndev - 1);
        argv[a++] = "--gpus";
        argv[a++] = gpus;
    } else {
        snprintf(ndevs, sizeof ndevs, "%d", ndev);
        argv[a++] = "--cpu";
        argv[a++] = ndevs;
    }
    argv[a++] = "--seed";
    argv[a++] = "7";
    argv[a++] = "--timeout";
    argv[a++] = "60";
    if (schedule) {
        argv[a++] = "--schedule";
        argv[a++] = (char *)schedule;
    }
    if (extra)
        argv[a++] = (char *)extra;
    if (objective) {
        argv[a++] = "--objective";
        argv[a++] = (char *)objective;
    }
    char bind[8][64];
    for (int i = 0; as_file && i < nin; i++) {
        snprintf(bind[i], sizeof bind[i], "%s=%s.npy", names[i], names[i]);
        argv[a++] = "--input";
        argv[a++] = bind[i];
    }
    argv[a++] = (char *)program;
    argv[a] = NULL;
    int rc = e2e_run(argv, out, sizeof out);
    snprintf(last_out, sizeof last_out, "%s", out);
    if (rc != 0)
        fail_msg("einrun on %d devices exited %d:\n%s", ndev, rc, out);
    if (!strstr(out, "saved y [") || !strstr(out, "to y.npy"))
        fail_msg("einrun did not say where y went:\n%s", out);
    if (use_gpus_flag && !strstr(out, "CPU device"))
        fail_msg("--gpus without a GPU must say it runs CPU devices:\n%s", out);
    char what[4096];
    if (e2e_leftovers(what, sizeof what))
        fail_msg("leftovers after a successful run: %s", what);
}

static void ffn_case(int ndev, int as_file, int gpus_flag)
{
    const char *prog = e2e_write_file("ffn.ein", FFN);
    const char *names[] = {"x", "w1", "w2"};
    double *x = make_input("x", T, DM, as_file, 7);
    double *w1 = make_input("w1", DM, DF, as_file, 7);
    double *w2 = make_input("w2", DF, DM, as_file, 7);
    double *act = malloc(sizeof(double) * T * DF), *y = malloc(sizeof(double) * T * DM);
    e2e_matmul_ref(x, w1, act, T, DM, DF);
    for (int i = 0; i < T * DF; i++)
        act[i] = act[i] > 0 ? act[i] : 0;
    e2e_matmul_ref(act, w2, y, T, DF, DM);
    run_einrun(prog, ndev, as_file, names, 3, gpus_flag);
    char path[600];
    snprintf(path, sizeof path, "%s/y.npy", e2e_scratch());
    check_output(path, y, T, DM);
    unlink(path);
    free(x), free(w1), free(w2), free(act), free(y);
}

static void chain_case(int ndev, int as_file)
{
    const char *prog = e2e_write_file("chain.ein", CHAIN);
    const char *names[] = {"A", "B", "C"};
    double *A = make_input("A", CA, CB, as_file, 7);
    double *B = make_input("B", CB, CC, as_file, 7);
    double *C = make_input("C", CC, CD, as_file, 7);
    double *AB = malloc(sizeof(double) * CA * CC), *y = malloc(sizeof(double) * CA * CD);
    e2e_matmul_ref(A, B, AB, CA, CB, CC);
    e2e_matmul_ref(AB, C, y, CA, CC, CD);
    run_einrun(prog, ndev, as_file, names, 3, 0);
    char path[600];
    snprintf(path, sizeof path, "%s/y.npy", e2e_scratch());
    check_output(path, y, CA, CD);
    unlink(path);
    free(A), free(B), free(C), free(AB), free(y);
}

#define CASES(n)                                                        \
    static void ffn_file_##n(void **s) { (void)s; ffn_case(n, 1, 0); }   \
    static void ffn_gen_##n(void **s) { (void)s; ffn_case(n, 0, 0); }    \
    static void chain_file_##n(void **s) { (void)s; chain_case(n, 1); }  \
    static void chain_gen_##n(void **s) { (void)s; chain_case(n, 0); }
CASES(1)
CASES(2)
CASES(3)
CASES(4)
CASES(5)
CASES(6)
CASES(7)
CASES(8)

static void naive_schedule(void **s)
{
    (void)s;
    schedule = "naive";
    for (int p = 1; p <= 8; p++) {
        chain_case(p, 0);
        ffn_case(p, 1, 0);
    }
    schedule = NULL;
}

/* A left-deep 4-matrix chain whose best order is A((BC)D): --rewrite
 * reorders it, and the result must not change. */
static const char *CHAIN4 =
    "dims a=21 b=5 c=40 d=3 e=17\n"
    "input A[a, b]\n"
    "input B[b, c]\n"
    "input C[c, d]\n"
    "input D[d, e]\n"
    "ab = matmul(A, B)\n"
    "abc = matmul(ab, C)\n"
    "y = matmul(abc, D)\n"
    "save y\n";

static void chain4_case(int ndev)
{
    const char *prog = e2e_write_file("chain4.ein", CHAIN4);
    const char *names[] = {"A", "B", "C", "D"};
    double *A = make_input("A", 21, 5, 1, 7), *B = make_input("B", 5, 40, 1, 7);
    double *C = make_input("C", 40, 3, 1, 7), *D = make_input("D", 3, 17, 1, 7);
    double *ab = malloc(sizeof(double) * 21 * 40), *abc = malloc(sizeof(double) * 21 * 3);
    double *y = malloc(sizeof(double) * 21 * 17);
    e2e_matmul_ref(A, B, ab, 21, 5, 40);
    e2e_matmul_ref(ab, C, abc, 21, 40, 3);
    e2e_matmul_ref(abc, D, y, 21, 3, 17);
    run_einrun(prog, ndev, 1, names, 4, 0);
    char path[600];
    snprintf(path, sizeof path, "%s/y.npy", e2e_scratch());
    check_output(path, y, 21, 17);
    unlink(path);
    free(A), free(B), free(C), free(D), free(ab), free(abc), free(y);
}

/* The graph rewritten by equality saturation before planning must still
 * compute the same result. */
static void rewritten(void **s)
{
    (void)s;
    extra = "--rewrite";
    for (int p = 1; p <= 4; p++) {
        chain4_case(p);
        ffn_case(p, 0, 0);
    }
    extra = NULL;
}

/* The FFN repeated: every layer has the same exchanges, so the lowering
 * searches the first layers' and copies them for the rest (co_lower.h);
 * the copies must compute the same as the searched ones. */
enum { LAYERS = 4 };

static void ffn_layers(void **s)
{
    (void)s;
    char prog_text[2048];
    size_t n = (size_t)snprintf(prog_text, sizeof prog_text,
                                "dims tokens=37 d_model=24 d_ff=50\n"
                                "input x0[tokens, d_model]\ninput w1[d_model, d_ff]\n"
                                "input w2[d_ff, d_model]\n");
    for (int l = 1; l <= LAYERS; l++) {
        char out[16];
        snprintf(out, sizeof out, l == LAYERS ? "y" : "x%d", l);
        n += (size_t)snprintf(prog_text + n, sizeof prog_text - n,
                              "a%d = matmul(x%d, w1)\nh%d = relu(a%d)\n%s = matmul(h%d, w2)\n",
                              l, l - 1, l, l, out, l);
    }
    snprintf(prog_text + n, sizeof prog_text - n, "save y\n");
    const char *prog = e2e_write_file("layers.ein", prog_text);
    const char *names[] = {"x0", "w1", "w2"};
    double *x = make_input("x0", T, DM, 1, 7);
    double *w1 = make_input("w1", DM, DF, 1, 7);
    double *w2 = make_input("w2", DF, DM, 1, 7);
    double *act = malloc(sizeof(double) * T * DF), *y = malloc(sizeof(double) * T * DM);
    for (int l = 0; l < LAYERS; l++) {
        e2e_matmul_ref(x, w1, act, T, DM, DF);
        for (int i = 0; i < T * DF; i++)
            act[i] = act[i] > 0 ? act[i] : 0;
        e2e_matmul_ref(act, w2, y, T, DF, DM);
        memcpy(x, y, sizeof(double) * T * DM);
    }
    char path[600];
    snprintf(path, sizeof path, "%s/y.npy", e2e_scratch());
    extra = "--verbose";
    objective = "comm";
    for (int p = 2; p <= 5; p++) {
        run_einrun(prog, p, 1, names, 3, 0);
        check_output(path, y, T, DM);
        unlink(path);
        const char *st = strstr(last_out, "exchange bodies: ");
        int searched = -1, reused = -1;
        if (!st || sscanf(st, "exchange bodies: %d searched, %d copied", &searched, &reused) != 2)
            fail_msg("no exchange statistics on %d devices:\n%s", p, last_out);
        if (reused < 1)
            fail_msg("on %d devices no exchange was copied from an identical one:\n%s", p, st);
    }
    extra = NULL;
    objective = NULL;
    free(x), free(w1), free(w2), free(act), free(y);
}

/* Chunked exchanges (docs/exprog.md), set through $EIN_EXCHANGE_CHUNKS
 * (einrun --exchange-chunks). `chunks` for the runs of chunked_case. */
static int bodies_have_chunks(const char *prog, int ndev, const char *topology)
{
    char ndevs[16], topo[64], out[1 << 16];
    snprintf(ndevs, sizeof ndevs, "%d", ndev);
    snprintf(topo, sizeof topo, "--topology=%s", topology ? topology : "host");
    char *argv[] = {(char *)e2e_bin("einplan"), "--devices", ndevs, topo, "--seed", "1",
                    "--objective", "comm", "--exchanges", (char *)prog, NULL};
    int rc = e2e_run(argv, out, sizeof out);
    if (rc != 0)
        fail_msg("einplan --exchanges exited %d:\n%s", rc, out);
    return strstr(out, "] @ ") != NULL; /* "X [c/k] @ s": an action moving chunks */
}

static void ffn_chunked(const char *chunks, int ndev, const char *topology, int as_file)
{
    static char topo[64]; /* extra points here: a failure must not leave it dangling */
    snprintf(topo, sizeof topo, "--topology=%s", topology ? topology : "host");
    setenv("EIN_EXCHANGE_CHUNKS", chunks, 1);
    extra = topo;
    objective = "comm";
    if (!bodies_have_chunks(e2e_write_file("ffn.ein", FFN), ndev, topology))
        fail_msg("EIN_EXCHANGE_CHUNKS=%s on %d devices: no exchange body moves chunks", chunks,
                 ndev);
    ffn_case(ndev, as_file, 0);
    extra = NULL;
    objective = NULL;
    unsetenv("EIN_EXCHANGE_CHUNKS");
}

/* Every action a stream of 4 chunks, on the DGX-1V's bodies and on the
 * host machine's; of 3 chunks, which divide none of the FFN's 37 token
 * rows' blocks evenly (uneven chunks, empty ones for 1-row atoms), with
 * the naive bodies. Same references as the unchunked runs. */
static void ffn_chunks4(void **s)
{
    (void)s;
    ffn_chunked("4", 4, "dgx-v100", 1);
    ffn_chunked("4", 8, "dgx-v100", 0);
    ffn_chunked("4", 4, NULL, 1);
}

static void ffn_chunks3_naive(void **s)
{
    (void)s;
    schedule = "naive";
    for (int p = 2; p <= 8; p += 3)
        ffn_chunked("3", p, NULL, 1);
    schedule = NULL;
}

/* The DGX-1V's topology with no per-action latency (α = 0), written to a
 * file: pieces are free, so the synthesis with chunks allowed picks
 * pipelined bodies even for the megabytes a CPU test moves (with the
 * built-in 10 us, unchunked bodies win at these sizes). */
static const char *v100_no_latency(void)
{
    static char text[1 << 16], fixed[(1 << 16) + 32], path[600];
    char *argv[] = {(char *)e2e_bin("einrun"), "--show-topology", "--topology=dgx-v100", NULL};
    int rc = e2e_run(argv, text, sizeof text);
    if (rc != 0)
        fail_msg("einrun --show-topology exited %d:\n%s", rc, text);
    char *l = strstr(text, "\nlatency ");
    if (!l)
        fail_msg("dgx-v100 states no latency:\n%s", text);
    char *end = strchr(l + 1, '\n');
    *l = '\0';
    snprintf(fixed, sizeof fixed, "%s\nlatency 0 us%s", text, end ? end : "\n");
    snprintf(path, sizeof path, "%s", e2e_write_file("v100-no-latency.topo", fixed));
    return path;
}

/* A reduction over 8 partials on the DGX-1V without latency, where the
 * synthesis with chunks allowed (auto) picks pipelined bodies that move
 * and aggregate chunks at every hop. */
static void reduce_chunks_auto(void **s)
{
    (void)s;
    static char topo[700]; /* extra points here: a failure must not leave it dangling */
    enum { RA = 509, RB = 2048, RC = 509 };
    const char *prog = e2e_write_file("reduce.ein", "dims a=509 b=2048 c=509\n"
                                                    "input x[a, b]\ninput w[b, c]\n"
                                                    "p = matmul(x, w)\ny = relu(p)\nsave y\n");
    setenv("EIN_EXCHANGE_CHUNKS", "auto", 1);
    schedule = NULL; /* the search's bodies, as einplan's below, even after a failed test */
    const char *tfile = v100_no_latency();
    if (!bodies_have_chunks(prog, 8, tfile))
        fail_msg("EIN_EXCHANGE_CHUNKS=auto: the reduction's body moves no chunks");
    double *x = make_input("x", RA, RB, 0, 7), *w = make_input("w", RB, RC, 0, 7);
    double *y = malloc(sizeof(double) * RA * RC);
    assert_non_null(y);
    e2e_matmul_ref(x, w, y, RA, RB, RC);
    for (int i = 0; i < RA * RC; i++)
        y[i] = y[i] > 0 ? y[i] : 0;
    snprintf(topo, sizeof topo, "--topology=%s", tfile);
    extra = topo;
    objective = "comm";
    run_einrun(prog, 8, 0, NULL, 0, 0);
    extra = NULL;
    objective = NULL;
    unsetenv("EIN_EXCHANGE_CHUNKS");
    char path[600];
    snprintf(path, sizeof path, "%s/y.npy", e2e_scratch());
    check_output(path, y, RA, RC);
    unlink(path);
    free(x), free(w), free(y);
}

static void ffn_gpus_flag_4(void **s)
{
    (void)s;
    ffn_case(4, 0, 1);
}

static int teardown(void **s)
{
    (void)s;
    e2e_scratch_remove();
    return 0;
}

#define ENTRY(n) cmocka_unit_test(ffn_file_##n), cmocka_unit_test(ffn_gen_##n), \
                 cmocka_unit_test(chain_file_##n), cmocka_unit_test(chain_gen_##n)

int main(void)
{
    srand(12345);
    e2e_scratch();
    const struct CMUnitTest tests[] = {
        ENTRY(1), ENTRY(2), ENTRY(3), ENTRY(4), ENTRY(5), ENTRY(6), ENTRY(7), ENTRY(8),
        cmocka_unit_test(naive_schedule),
        cmocka_unit_test(rewritten),
        cmocka_unit_test(ffn_gpus_flag_4),
        cmocka_unit_test(ffn_layers),
        cmocka_unit_test(ffn_chunks4),
        cmocka_unit_test(ffn_chunks3_naive),
        cmocka_unit_test(reduce_chunks_auto),
    };
    return cmocka_run_group_tests_name("e2e_compute", tests, NULL, teardown);
}
