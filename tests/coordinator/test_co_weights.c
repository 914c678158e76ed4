/* tests/coordinator/test_co_weights.c — co_weights_bind, the one function
 * that binds .safetensors tensors to graph inputs (einrun --weights, the
 * session API, Python): default by name, --map, sharded files, every
 * refusal leaving the sources untouched; and ein_progress's line. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/types.h>

#include "common/process/ein_progress.h"
#include "coordinator/run/co_weights.h"

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "%s", "/tmp/ein-cow-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static ein_safetensors *make(const char *name, const ein_st_write_tensor *t, int n)
{
    char p[128];
    ein_error err = {0};
    ein_safetensors *st = NULL;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    assert_int_equal(ein_safetensors_write(p, t, n, &err), 0);
    if (ein_safetensors_open(p, &st, &err) < 0)
        fail_msg("%s", err.msg);
    return st;
}

static void test_bind(void **state)
{
    (void)state;
    static float zero[64];
    static const int64_t s48[] = {4, 8}, s84[] = {8, 4}, s8[] = {8};
    /* Two shards: a.safetensors has x and norm (bf16), b.safetensors has
     * the projection under a checkpoint name and a wrong-shape 'w'. */
    ein_st_write_tensor ta[] = {{"x", EIN_F32, 2, s48, zero}, {"norm", EIN_BF16, 1, s8, zero}};
    ein_st_write_tensor tb[] = {{"layers.0.proj", EIN_F32, 2, s84, zero},
                                {"w", EIN_F32, 2, s48, zero}};
    ein_safetensors *files[2] = {make("a.safetensors", ta, 2), make("b.safetensors", tb, 2)};
    const ein_safetensors *const *fs = (const ein_safetensors *const *)files;
    pl_graph *g = pl_graph_new();
    ein_error err = {0};
    int x = pl_graph_add_input(g, "x", EIN_F32, 2, s48, &err);
    int w = pl_graph_add_input(g, "w", EIN_F32, 2, s84, &err);
    int nm = pl_graph_add_input(g, "norm", EIN_BF16, 1, s8, &err);
    int other = pl_graph_add_input(g, "bias", EIN_F32, 1, s8, &err);
    assert_true(x >= 0 && w >= 0 && nm >= 0 && other >= 0);
    co_input_src src[8], before[8];
    memset(src, 0, sizeof src);

    /* Default by name: w in b.safetensors has the wrong shape. */
    memcpy(before, src, sizeof src);
    assert_int_equal(co_weights_bind(g, fs, 2, NULL, 0, src, NULL, &err), EIN_ESHAPE);
    assert_non_null(strstr(err.msg, "b.safetensors: tensor 'w' is F32 [4, 8] but input w is f32 [8, 4]"));
    assert_memory_equal(src, before, sizeof src);

    /* --map w=layers.0.proj fixes it; x and norm bind by name, bias stays. */
    co_weight_map m[] = {{"w", "layers.0.proj"}};
    int nb = 0;
    if (co_weights_bind(g, fs, 2, m, 1, src, &nb, &err) < 0)
        fail_msg("%s", err.msg);
    assert_int_equal(nb, 3);
    assert_ptr_equal(src[x].path, files[0]->path);
    assert_int_equal(src[x].format, EIN_LOAD_RAW);
    assert_int_equal(src[x].offset, ein_safetensors_find(files[0], "x")->offset);
    assert_ptr_equal(src[w].path, files[1]->path);
    assert_int_equal(src[w].offset, ein_safetensors_find(files[1], "layers.0.proj")->offset);
    assert_ptr_equal(src[nm].path, files[0]->path);
    assert_null(src[other].path);

    /* An input that already has a source is not rebound by name, and a map of it is refused. */
    memset(src, 0, sizeof src);
    src[x].path = "x.npy";
    assert_int_equal(co_weights_bind(g, fs, 2, m, 1, src, &nb, &err), 0);
    assert_string_equal(src[x].path, "x.npy");
    assert_int_equal(src[x].format, EIN_LOAD_NPY);
    memset(src, 0, sizeof src);
    src[w].path = "w.npy";
    memcpy(before, src, sizeof src);
    assert_int_equal(co_weights_bind(g, fs, 2, m, 1, src, NULL, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "input w already has a source"));
    assert_memory_equal(src, before, sizeof src);

    /* Maps to nothing, twice, or to a dtype of the wrong kind. */
    memset(src, 0, sizeof src);
    co_weight_map bad1[] = {{"w", "nope"}}, bad2[] = {{"zz", "x"}},
                  bad3[] = {{"w", "layers.0.proj"}, {"w", "layers.0.proj"}},
                  bad4[] = {{"bias", "norm"}};
    assert_int_equal(co_weights_bind(g, fs, 2, bad1, 1, src, NULL, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "no tensor named 'nope' in the weights files"));
    assert_int_equal(co_weights_bind(g, fs, 2, bad2, 1, src, NULL, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "no input named 'zz'"));
    assert_int_equal(co_weights_bind(g, fs, 2, bad3, 2, src, NULL, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "already has a source: tensor layers.0.proj"));
    assert_int_equal(co_weights_bind(g, fs, 2, bad4, 1, src, NULL, &err), EIN_ESHAPE);
    assert_non_null(strstr(err.msg, "a.safetensors: tensor 'norm' is BF16 [8] but input bias is f32 [8]"));
    for (int v = 0; v < 8; v++)
        assert_null(src[v].path);

    /* A name in two shards is ambiguous. */
    ein_safetensors *dup = make("c.safetensors", ta, 1);
    const ein_safetensors *const two[] = {files[0], dup};
    assert_int_equal(co_weights_bind(g, two, 2, NULL, 0, src, NULL, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "tensor 'x' is in both"));

    /* co_weight_map_parse. */
    co_weight_map pm;
    char *owned = NULL;
    assert_int_equal(co_weight_map_parse("wq=model.layers.0.q=x", &pm, &owned, &err), 0);
    assert_string_equal(pm.input, "wq");
    assert_string_equal(pm.tensor, "model.layers.0.q=x");
    free(owned);
    assert_int_equal(co_weight_map_parse("=x", &pm, &owned, &err), EIN_EINVAL);
    assert_int_equal(co_weight_map_parse("wq=", &pm, &owned, &err), EIN_EINVAL);
    ein_safetensors_free(dup);
    ein_safetensors_free(files[0]);
    ein_safetensors_free(files[1]);
    pl_graph_free(g);
}

static void test_progress_line(void **state)
{
    (void)state;
    ein_progress p;
    char line[192];
    ein_progress_begin(&p, 0, "planning", 40);     /* silent: draws nothing */
    assert_null(p.out);
    p.t0 = 100.0;
    p.done = 10;
    ein_progress_format(&p, 102.0, line, sizeof line);
    assert_string_equal(line, "planning: 10/40 (25%), 2.0 s, about 6.0 s left");
    p.done = 40;
    ein_progress_format(&p, 104.0, line, sizeof line);
    assert_string_equal(line, "planning: 40/40 (100%), 4.0 s");
    p.total = 0;
    ein_progress_format(&p, 101.5, line, sizeof line);
    assert_string_equal(line, "planning: 1.5 s");
    ein_progress_step(&p, 3);   /* silent: no-ops */
    ein_progress_end(&p);
    ein_progress_step(NULL, 1);
    ein_progress_end(NULL);
}

/* begin_after: nothing before `after` seconds (a quick step never
 * flickers), the line at once with 0, and erased at the end. stderr is
 * sent to a file for the test (enabled = 1 draws whatever stderr is). */
static void test_progress_after(void **state)
{
    (void)state;
    char path[] = "/tmp/ein-progress.XXXXXX", buf[256];
    int fd = mkstemp(path), saved = dup(2);
    assert_true(fd >= 0 && saved >= 0);
    fflush(stderr);
    assert_true(dup2(fd, 2) == 2);
    ein_progress p;
    ein_progress_begin_after(&p, 1, "running", 0, 3600);
    ein_progress_tick(&p);
    ein_progress_step(&p, 5);
    ein_progress_end(&p);
    fflush(stderr);
    off_t quiet = lseek(fd, 0, SEEK_END);
    ein_progress_begin_after(&p, 1, "running", 0, 0);
    ein_progress_tick(&p);
    ein_progress_end(&p);
    fflush(stderr);
    assert_true(dup2(saved, 2) == 2);
    close(saved);
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    close(fd);
    unlink(path);
    assert_int_equal(quiet, 0);
    assert_true(n > 0);
    buf[n] = '\0';
    assert_true(strncmp(buf, "\r\033[Krunning: ", 13) == 0);
    assert_true(n >= 4 && strcmp(buf + n - 4, "\r\033[K") == 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bind),
        cmocka_unit_test(test_progress_line),
        cmocka_unit_test(test_progress_after),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
