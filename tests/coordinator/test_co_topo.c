/* tests/coordinator/test_co_topo.c — GPU probe text (good, malformed,
 * garbage) and topology detection from synthetic probes: the built-ins
 * for whole machines, generated topologies for subsets, missing peer
 * access, workers sharing a GPU, unknown GPUs; and the simulator on what
 * was detected. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "coordinator/compile/co_topo.h"
#include "exchange/xp_program.h"
#include "exchange/xp_sim.h"

/* A probe of n GPUs named `name` (names[g] if given); access(a, b) says
 * whether a can reach b. */
static char *probe_text(int n, const char *name, const char *const *names,
                        int (*access)(int, int))
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    fprintf(f, "einprobe 1\n");
    for (int g = 0; g < n; g++)
        fprintf(f, "gpu %d %s\n", g, names ? names[g] : name);
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++)
            if (a != b)
                fprintf(f, "peer %d %d %d %d\n", a, b, access(a, b), access(a, b) ? 0 : 1);
    fclose(f);
    return buf;
}

static co_topo_probe *probe(int n, const char *name, const char *const *names,
                            int (*access)(int, int))
{
    char *text = probe_text(n, name, names, access);
    co_topo_probe *p = NULL;
    ein_error err = {0};
    if (co_topo_probe_parse(text, "t.probe", &p, &err) != 0)
        fail_msg("probe: %s\n%s", err.msg, text);
    free(text);
    return p;
}

static int all(int a, int b) { (void)a; (void)b; return 1; }
static int none(int a, int b) { (void)a; (void)b; return 0; }
/* Only 0 <-> 1 peer-accessible. */
static int pair01(int a, int b) { return (a == 0 && b == 1) || (a == 1 && b == 0); }

/* The NVLink adjacency of the dgx-v100 text, as a DGX-1V's probe says it. */
static int dgx1(int a, int b)
{
    static xp_topology *v;
    if (!v && xp_topo_load("dgx-v100", &v, NULL) != 0)
        return 0;
    return v->link[a * 8 + b] > 0;
}

static xp_topology *detect(const co_topo_probe *p, const int *ids, int n, char *why)
{
    xp_topology *t = NULL;
    ein_error err = {0};
    if (co_topo_detect(p, ids, n, &t, why, 512, &err) != 0)
        fail_msg("detect: %s", err.msg);
    return t;
}

static int shared_index(const xp_topology *t, const char *name)
{
    for (int k = 0; k < t->nshared; k++)
        if (strcmp(t->shared_name[k], name) == 0)
            return k;
    return -1;
}

static void assert_near(double got, double want)
{
    if (got < want * (1 - 1e-9) || got > want * (1 + 1e-9))
        fail_msg("got %.12g, want %.12g", got, want);
}

static const int ID8[] = {0, 1, 2, 3, 4, 5, 6, 7};

static void test_probe_good(void **state)
{
    (void)state;
    const char *text = "# saved on node7\n"
                       "einprobe 1\r\n"
                       "\n"
                       "gpu 0 NVIDIA H200\n"
                       "gpu 1\tTesla  V100-SXM2-32GB  \n"
                       "peer 0 1 1 0\n"
                       "  peer 1 0 0 -1\n";
    co_topo_probe *p = NULL;
    ein_error err = {0};
    assert_int_equal(co_topo_probe_parse(text, "ok.probe", &p, &err), 0);
    assert_int_equal(p->ngpus, 2);
    assert_string_equal(p->name[0], "NVIDIA H200");
    assert_string_equal(p->name[1], "Tesla  V100-SXM2-32GB");
    assert_int_equal(p->access[0 * 2 + 1], 1);
    assert_int_equal(p->access[1 * 2 + 0], 0);
    assert_int_equal(p->rank[1 * 2 + 0], -1);
    co_topo_probe_free(p);
    /* One GPU: no peer lines at all. */
    assert_int_equal(co_topo_probe_parse("einprobe 1\ngpu 0 X", NULL, &p, &err), 0);
    assert_int_equal(p->ngpus, 1);
    co_topo_probe_free(p);
}

static void test_probe_malformed(void **state)
{
    (void)state;
    static char longline[700], longname[400];
    memset(longline, 'x', sizeof longline - 1);
    snprintf(longname, sizeof longname, "einprobe 1\ngpu 0 %0300d\n", 7);
    static const struct { const char *text, *where, *what; } cases[] = {
        {"", "1:1", "empty probe"},
        {"\n# only a comment\n", "2:1", "empty probe"},
        {"gpu 0 NVIDIA H200\n", "1:1", "expected 'einprobe 1' first"},
        {"einprobe 2\n", "1:1", "version '2'"},
        {"einprobe\n", "1:1", "expected: einprobe VERSION"},
        {"einprobe 1\neinprobe 1\n", "2:1", "given twice"},
        {"einprobe 1\n", "1:1", "no 'gpu' line"},
        {"einprobe 1\ngpu 1 A\n", "2:1", "expected gpu 0 next"},
        {"einprobe 1\ngpu 0 A\ngpu 0 B\n", "3:1", "expected gpu 1 next"},
        {"einprobe 1\ngpu -1 A\n", "2:1", "expected gpu 0 next"},
        {"einprobe 1\ngpu 0\n", "2:1", "expected: gpu ID NAME"},
        {"einprobe 1\npeer 0 1 1 0\n", "2:1", "before any gpu line"},
        {"einprobe 1\ngpu 0 A\ngpu 1 B\npeer 0 1 1 0\n", "4:1", "no 'peer 1 0' line"},
        {"einprobe 1\ngpu 0 A\ngpu 1 B\npeer 0 1 2 0\npeer 1 0 1 0\n", "4:1", "ACCESS 0 or 1"},
        {"einprobe 1\ngpu 0 A\ngpu 1 B\npeer 0 1 yes 0\n", "4:1", "ACCESS 0 or 1"},
        {"einprobe 1\ngpu 0 A\ngpu 1 B\npeer 0 0 1 0\n", "4:1", "two distinct GPUs"},
        {"einprobe 1\ngpu 0 A\ngpu 1 B\npeer 0 5 1 0\n", "4:1", "GPU ids from 0 to 1"},
        {"einprobe 1\ngpu 0 A\ngpu 1 B\npeer 0 1 1 fast\n", "4:1", "integer PERF-RANK"},
        {"einprobe 1\ngpu 0 A\ngpu 1 B\npeer 0 1 1\n", "4:1", "expected: peer A B ACCESS PERF-RANK"},
        {"einprobe 1\ngpu 0 A\ngpu 1 B\npeer 0 1 1 0 9\n", "4:1", "expected: peer A B"},
        {"einprobe 1\ngpu 0 A\ngpu 1 B\npeer 0 1 1 0\npeer 0 1 1 0\n", "5:1", "given twice"},
        {"einprobe 1\ngpu 0 A\ngpu 1 B\npeer 0 1 1 0\ngpu 2 C\n", "5:1", "after the peer lines"},
        {"einprobe 1\ngpu 0 A\nlink 0 1 50 GB/s\n", "3:1", "unknown statement 'link'"},
        {"einprobe 1\ngpu 0 A\x01" "B\n", "2:8", "control character 0x01"},
        {"einprobe 1\n  gpu 0 A\n\x7f\n", "3:1", "unknown statement"},
        {longline, "1:1", "line longer than"},
        {longname, "2:1", "GPU name longer than 255"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        co_topo_probe *p = NULL;
        ein_error err = {0};
        if (co_topo_probe_parse(cases[i].text, "m.probe", &p, &err) != EIN_EPARSE)
            fail_msg("case %zu accepted", i);
        char where[64];
        snprintf(where, sizeof where, "m.probe:%s:", cases[i].where);
        if (strncmp(err.msg, where, strlen(where)) != 0 || !strstr(err.msg, cases[i].what))
            fail_msg("case %zu: got \"%s\", want %s ... %s", i, err.msg, where, cases[i].what);
        assert_null(p);
    }
}

/* Random bytes, and a good probe cut or with a byte changed: accepted or
 * refused with a parse error, never a crash (the sanitizer build checks). */
static void test_probe_garbage(void **state)
{
    (void)state;
    char *good = probe_text(3, "NVIDIA H100 80GB HBM3", NULL, pair01);
    size_t glen = strlen(good);
    uint64_t x = 88172645463325252ULL;
    int accepted = 0;
    for (int i = 0; i < 3000; i++) {
        char buf[1024];
        size_t len;
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        if (i % 3 == 0) {
            len = (size_t)(x % (sizeof buf - 1));
            for (size_t k = 0; k < len; k++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                buf[k] = (char)(x % 255 + 1);
            }
        } else {
            len = i % 3 == 1 ? (size_t)(x % glen) : glen;
            memcpy(buf, good, len);
            if (i % 3 == 2)
                buf[(x >> 20) % glen] = (char)((x >> 40) % 255 + 1);
        }
        buf[len] = 0;
        co_topo_probe *p = NULL;
        ein_error err = {0};
        int rc = co_topo_probe_parse(buf, "g.probe", &p, &err);
        if (rc == 0) {
            accepted++;
            xp_topology *t = NULL;
            int ids[2] = {0, p->ngpus - 1};
            if (co_topo_detect(p, ids, 2, &t, NULL, 0, &err) == 0)
                xp_topo_free(t);
        } else if (rc != EIN_EPARSE || strncmp(err.msg, "g.probe:", 8) != 0) {
            fail_msg("rc %d: %s", rc, err.msg);
        }
        co_topo_probe_free(p);
    }
    assert_true(accepted > 0);
    free(good);
}

static void test_probe_file(void **state)
{
    (void)state;
    char path[] = "/tmp/ein-probe-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "einprobe 1\ngpu 0 A\0B\n", 21), 21);
    close(fd);
    co_topo_probe *p = NULL;
    ein_error err = {0};
    assert_int_equal(co_topo_probe_load(path, &p, &err), EIN_EPARSE);
    assert_non_null(strstr(err.msg, "NUL byte"));
    unlink(path);
    assert_int_equal(co_topo_probe_load(path, &p, &err), EIN_EIO);
    assert_non_null(strstr(err.msg, "cannot open"));
}

static void test_whole_switch_machines(void **state)
{
    (void)state;
    static const struct { const char *gpu, *machine; } m[] = {
        {"NVIDIA H100 80GB HBM3", "dgx-h100"},
        {"NVIDIA H200", "hgx-h200"},
        {"NVIDIA A100-SXM4-80GB", "dgx-a100"},
    };
    for (size_t i = 0; i < sizeof m / sizeof *m; i++) {
        co_topo_probe *p = probe(8, m[i].gpu, NULL, all);
        char why[512], want[512];
        xp_topology *t = detect(p, ID8, 8, why), *b = NULL;
        assert_string_equal(t->name, m[i].machine);
        snprintf(want, sizeof want, "8 x %s, all pairs peer-accessible: %s", m[i].gpu, m[i].machine);
        assert_string_equal(why, want);
        assert_int_equal(xp_topo_load(m[i].machine, &b, NULL), 0);
        assert_true(t->ngpus == 8 && t->port == b->port && t->hbm == b->hbm && t->rest == -1);
        xp_topo_free(t);
        /* Any order of the eight is the same machine. */
        static const int rev[] = {7, 6, 5, 4, 3, 2, 1, 0};
        t = detect(p, rev, 8, why);
        assert_string_equal(t->name, m[i].machine);
        xp_topo_free(t);
        xp_topo_free(b);
        co_topo_probe_free(p);
    }
}

static void test_dgx1(void **state)
{
    (void)state;
    co_topo_probe *p = probe(8, "Tesla V100-SXM2-32GB", NULL, dgx1);
    char why[512];
    xp_topology *t = detect(p, ID8, 8, why);
    assert_string_equal(t->name, "dgx-v100");
    assert_non_null(strstr(why, "DGX-1 cube mesh: dgx-v100"));
    xp_topo_free(t);
    /* --gpus 0,3: the double NVLink between them. */
    int ids[] = {0, 3};
    t = detect(p, ids, 2, why);
    assert_string_equal(t->name, "detected");
    assert_int_equal(t->ngpus, 2);
    assert_true(t->link[0 * 2 + 1] == 50e9 && t->link[1 * 2 + 0] == 50e9);
    assert_non_null(strstr(why, "DGX-1"));
    xp_topo_free(t);
    /* --gpus 0,5: no NVLink, the PCIe bridge of the dgx-v100 text. */
    ids[1] = 5;
    t = detect(p, ids, 2, why);
    assert_true(t->link[1] == 0 && t->rest == shared_index(t, "pcie"));
    assert_true(t->shared_bw[t->rest] == 15.75e9);
    xp_topo_free(t);
    /* Eight in another order: the same links, renumbered. */
    static const int rev[] = {7, 6, 5, 4, 3, 2, 1, 0};
    t = detect(p, rev, 8, why);
    assert_string_equal(t->name, "detected");
    assert_true(t->link[7 * 8 + 3] == 50e9); /* GPUs 0 and 4 */
    assert_true(t->link[7 * 8 + 2] == 0);    /* GPUs 0 and 5 */
    xp_topo_free(t);
    co_topo_probe_free(p);
    /* Four V100 all peer-accessible (no DGX-1): one NVLink per pair. */
    p = probe(4, "Tesla V100-SXM2-16GB", NULL, all);
    t = detect(p, ID8, 4, why);
    assert_int_equal(t->ngpus, 4);
    assert_true(t->link[0 * 4 + 3] == 25e9 && t->port == 0 && t->rest == -2);
    assert_non_null(strstr(why, "25 GB/s link"));
    xp_topo_free(t);
    co_topo_probe_free(p);
}

static void test_switch_subsets(void **state)
{
    (void)state;
    co_topo_probe *p = probe(4, "NVIDIA H200", NULL, all);
    char why[512];
    xp_topology *t = detect(p, ID8, 4, why);
    assert_string_equal(t->name, "detected");
    assert_int_equal(t->ngpus, 4);
    assert_true(t->port == 450e9 && t->hbm == 4.8e12 && t->peak == 989e12 && t->rest == -1);
    assert_non_null(strstr(why, "4 x NVIDIA H200, all pairs peer-accessible: detected, switch-like"));
    xp_topo_free(t);
    co_topo_probe_free(p);
    /* 4 of an 8-GPU H100 board. */
    p = probe(8, "NVIDIA H100 80GB HBM3", NULL, all);
    int ids[] = {4, 5, 6, 7};
    t = detect(p, ids, 4, why);
    assert_true(t->ngpus == 4 && t->port == 450e9 && t->hbm == 3.35e12);
    xp_topo_free(t);
    /* One worker. */
    t = detect(p, ids, 1, why);
    assert_int_equal(t->ngpus, 1);
    assert_non_null(strstr(why, "one GPU"));
    xp_topo_free(t);
    co_topo_probe_free(p);
    /* 8 B200: NVLink 5 figures of gb200-nvl72, generated (it has 72). */
    p = probe(8, "NVIDIA B200", NULL, all);
    t = detect(p, ID8, 8, why);
    assert_true(!strcmp(t->name, "detected") && t->port == 900e9 && t->hbm == 8e12);
    xp_topo_free(t);
    co_topo_probe_free(p);
}

/* A 1 GB transfer 0 -> 1 on t, in seconds. */
static double sim_s(const char *prog, const xp_topology *t)
{
    xp_program *p = NULL, *w = NULL;
    ein_error err = {0};
    double s = 0;
    if (xp_program_parse(prog, "t.xp", &p, &err) != 0 || xp_program_validate(p, &w, &err) != 0 ||
        xp_sim_run(w, t, &s, NULL, &err) != 0)
        fail_msg("%s", err.msg);
    xp_program_free(p);
    xp_program_free(w);
    return s;
}

#define ONE "IN: A @ 0\nOUT: A @ 1\nA @ 0 -> 1\n"
#define TWO "IN: A @ 0; B @ 2\nOUT: A @ 1; B @ 3\nA @ 0 -> 1; B @ 2 -> 3\n"

static void test_no_peer_access(void **state)
{
    (void)state;
    co_topo_probe *p = probe(2, "NVIDIA H100 80GB HBM3", NULL, none);
    char why[512];
    xp_topology *t = detect(p, ID8, 2, why);
    int k = shared_index(t, "pcie");
    assert_true(k >= 0 && t->rest == k && t->link[1] == 0 && t->port == 0);
    assert_true(t->shared_bw[k] == CO_TOPO_PCIE_GEN5);
    assert_non_null(strstr(why, "1 of 1 pairs not peer-accessible"));
    assert_near(sim_s(ONE, t), 1e9 / CO_TOPO_PCIE_GEN5);
    xp_topo_free(t);
    co_topo_probe_free(p);
    /* Access in one direction only is not peer access. */
    static const char *one_way = "einprobe 1\ngpu 0 NVIDIA A100-SXM4-40GB\ngpu 1 NVIDIA A100-SXM4-40GB\n"
                                 "peer 0 1 1 0\npeer 1 0 0 0\n";
    assert_int_equal(co_topo_probe_parse(one_way, NULL, &p, NULL), 0);
    t = detect(p, ID8, 2, why);
    assert_true(t->shared_bw[shared_index(t, "pcie")] == CO_TOPO_PCIE_GEN4);
    xp_topo_free(t);
    co_topo_probe_free(p);
    /* Three A100, only 0-1 peers: a link at the port bandwidth, the rest
     * over one bridge they share. */
    p = probe(3, "NVIDIA A100-SXM4-80GB", NULL, pair01);
    t = detect(p, ID8, 3, why);
    assert_true(t->link[0 * 3 + 1] == 300e9 && t->link[0 * 3 + 2] == 0 && t->link[1 * 3 + 2] == 0);
    assert_non_null(strstr(why, "2 of 3 pairs not peer-accessible"));
    assert_near(sim_s(ONE, t), 1e9 / 300e9);
    assert_near(sim_s("IN: A @ 0; B @ 1\nOUT: A @ 2; B @ 2\nA @ 0 -> 2; B @ 1 -> 2\n", t),
                2e9 / CO_TOPO_PCIE_GEN4);
    xp_topo_free(t);
    co_topo_probe_free(p);
}

static void test_shared_gpu(void **state)
{
    (void)state;
    co_topo_probe *p = probe(1, "NVIDIA H200", NULL, all);
    int ids[] = {0, 0, 0, 0};
    char why[512];
    xp_topology *t = detect(p, ids, 4, why);
    assert_int_equal(t->ngpus, 4);
    int k = shared_index(t, "hbm-gpu0");
    assert_true(k >= 0 && t->rest == k && t->shared_bw[k] == 2.4e12 && t->port == 0);
    assert_non_null(strstr(why, "4 workers on 1 x NVIDIA H200"));
    /* A copy at hbm/2, and two at once share it. */
    assert_near(sim_s(ONE, t), 1e9 / 2.4e12);
    assert_near(sim_s(TWO, t), 2e9 / 2.4e12);
    xp_topo_free(t);
    co_topo_probe_free(p);
    /* Two GPUs, two workers each: NVSwitch between GPUs, a link at hbm/2
     * within one (capped by the port it crosses in xp_topo). */
    p = probe(2, "NVIDIA H200", NULL, all);
    int ids2[] = {0, 0, 1, 1};
    t = detect(p, ids2, 4, why);
    assert_true(t->port == 450e9 && t->rest == -1);
    assert_true(t->link[0 * 4 + 1] == 2.4e12 && t->link[2 * 4 + 3] == 2.4e12 && t->link[0 * 4 + 2] == 0);
    assert_non_null(strstr(why, "workers sharing a GPU"));
    xp_topo_free(t);
    co_topo_probe_free(p);
    /* Two V100 without peer access, workers 0,1 on GPU 0: a link for
     * them, the bridge between GPUs. */
    p = probe(2, "Tesla V100-PCIE-16GB", NULL, none);
    int ids3[] = {0, 0, 1};
    t = detect(p, ids3, 3, why);
    assert_true(t->link[0 * 3 + 1] == 450e9 && t->link[0 * 3 + 2] == 0);
    assert_true(t->shared_bw[t->rest] == 15.75e9);
    xp_topo_free(t);
    co_topo_probe_free(p);
}

static void test_unknown_and_mixed(void **state)
{
    (void)state;
    co_topo_probe *p = probe(2, "Fancy GPU 9000", NULL, all);
    char why[512];
    xp_topology *t = detect(p, ID8, 2, why);
    assert_non_null(strstr(why, "unknown GPU, conservative defaults"));
    assert_true(t->hbm == 900e9 && t->peak == 0 && t->port == 0 && t->link[1] == 0);
    assert_true(t->shared_bw[t->rest] == 15.75e9);
    xp_topo_free(t);
    co_topo_probe_free(p);
    static const char *const names[] = {"NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"};
    p = probe(2, NULL, names, all);
    t = detect(p, ID8, 2, why);
    assert_non_null(strstr(why, "1 x NVIDIA H100 80GB HBM3, 1 x NVIDIA A100-SXM4-80GB: mixed GPUs"));
    assert_true(t->shared_bw[t->rest] == 15.75e9);
    xp_topo_free(t);
    co_topo_probe_free(p);
    /* PCIe cards, even with peer access: no NVSwitch is assumed. */
    p = probe(2, "NVIDIA H100 PCIe", NULL, all);
    t = detect(p, ID8, 2, why);
    assert_non_null(strstr(why, "PCIe cards"));
    assert_true(t->port == 0 && t->shared_bw[t->rest] == CO_TOPO_PCIE_GEN5);
    xp_topo_free(t);
    co_topo_probe_free(p);
}

static void test_bad_ids(void **state)
{
    (void)state;
    co_topo_probe *p = probe(2, "NVIDIA H200", NULL, all);
    xp_topology *t = NULL;
    ein_error err = {0};
    int ids[] = {0, 2};
    char why[64] = "untouched";
    assert_int_equal(co_topo_detect(p, ids, 2, &t, why, sizeof why, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "GPU 2 is not in the probe, which saw 2 GPUs (0..1)"));
    assert_null(t);
    assert_int_equal(co_topo_detect(p, ids, 0, &t, why, sizeof why, &err), EIN_EINVAL);
    /* A short `why` is cut, not overrun. */
    ids[1] = 1;
    assert_int_equal(co_topo_detect(p, ids, 2, &t, why, 8, &err), 0);
    assert_int_equal(strlen(why), 7);
    xp_topo_free(t);
    co_topo_probe_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_probe_good),
        cmocka_unit_test(test_probe_malformed),
        cmocka_unit_test(test_probe_garbage),
        cmocka_unit_test(test_probe_file),
        cmocka_unit_test(test_whole_switch_machines),
        cmocka_unit_test(test_dgx1),
        cmocka_unit_test(test_switch_subsets),
        cmocka_unit_test(test_no_peer_access),
        cmocka_unit_test(test_shared_gpu),
        cmocka_unit_test(test_unknown_and_mixed),
        cmocka_unit_test(test_bad_ids),
    };
    return cmocka_run_group_tests_name("coordinator-topo", tests, NULL, NULL);
}
