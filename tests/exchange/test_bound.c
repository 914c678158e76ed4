/* tests/exchange/test_bound.c — the lower bound (xp_bound): hand-computed
 * cases on switch and link machines, latency, unresolved partitions, and
 * soundness: never above the simulated makespan of the naive or the
 * synthesised program for the paper's preambles and random ones. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "exchange/xp_bound.h"
#include "exchange/xp_search.h"
#include "exchange/xp_sim.h"
#include "tests/exchange/xp_testutil.h"

static double bound_ms(const char *text, const char *machine, double latency, xp_bound *out)
{
    xp_program *p = xt_parse(text);
    xp_topology *t = xt_topo(machine, latency);
    xp_bound b;
    ein_error err = {0};
    if (xp_bound_compute(p, t, &b, &err) != 0)
        fail_msg("bound: %s", err.msg);
    xp_program_free(p);
    xp_topo_free(t);
    if (out)
        *out = b;
    return b.seconds * 1e3;
}

static void near(double got, double want)
{
    double d = got - want;
    if (!(fabs(d) <= 1e-9 * fabs(want) + 1e-12))
        fail_msg("got %.9f, want %.9f", got, want);
}

#define ALLREDUCE8 "IN: A @ 0; B @ 1; C @ 2; D @ 3; E @ 4; F @ 5; G @ 6; H @ 7\n" \
                   "OUT: A+B+C+D+E+F+G+H @ 0, 1, 2, 3, 4, 5, 6, 7\n"

static void test_allreduce(void **state)
{
    (void)state;
    xp_bound b;
    /* 8 holders, 8 targets that meet: 14 transfers of 1 GB over 8 ports. */
    near(bound_ms(ALLREDUCE8, "dgx-a100", 0, &b), 14e9 / (8 * 300e9) * 1e3);
    near(b.volume_bytes, 14e9);
    near(b.per_gpu * 1e3, 1e9 / 300e9 * 1e3);
    near(bound_ms(ALLREDUCE8, "dgx-h100", 0, NULL), 14e9 / (8 * 450e9) * 1e3);
    /* With latency: once, on top. */
    near(bound_ms(ALLREDUCE8, "dgx-h100", 6e-6, NULL), (14e9 / (8 * 450e9) + 6e-6) * 1e3);
    /* V100: every transfer crosses an NVLink or the PCIe bridge:
     * 16 pairs of links x 2 directions (8 x 150 GB/s) + 15.75 GB/s. */
    near(bound_ms(ALLREDUCE8, "dgx-v100", 0, NULL), 14e9 / (1200e9 + 15.75e9) * 1e3);
}

static void test_simple(void **state)
{
    (void)state;
    xp_bound b;
    /* Broadcast from 0 on the A100: 0's egress, 1 GB at 300 GB/s. */
    near(bound_ms("IN: A @ 0\nOUT: A @ 1, 2, 3, 4, 5, 6, 7\n", "dgx-a100", 0, &b),
         1e9 / 300e9 * 1e3);
    assert_int_equal(b.per_gpu_site, 0);
    near(b.volume_bytes, 7e9);
    /* Gather of 4 blocks of different atoms into 0: 0's ingress. */
    near(bound_ms("IN: A @ 1; B @ 2; C @ 3; D @ 4\nOUT: A @ 0; B @ 0; C @ 0; D @ 0\n",
                  "dgx-h100", 0, NULL), 4e9 / 450e9 * 1e3);
    /* V100, 0 -> 5 (no NVLink between them): 0's links (150 GB/s) and the
     * bridge (15.75 GB/s) are all it can send on. */
    near(bound_ms("IN: A @ 0\nOUT: A @ 5\n", "dgx-v100", 0, NULL), 1e9 / 165.75e9 * 1e3);
    /* Nothing to move: 0, and no latency. */
    near(bound_ms("IN: A @ 0; B @ 0\nOUT: A+B @ 0\n", "dgx-h100", -1, &b), 0);
    near(b.latency, 0);
    /* HBM limits when it is slower than the port: in and out of GPU 1. */
    xp_topology *t = NULL;
    ein_error err = {0};
    assert_int_equal(xp_topo_parse("gpus 3\nhbm 100 GB/s\nport 450 GB/s\nrest direct\n",
                                   "h.topo", &t, &err), 0);
    xp_program *p = xt_parse("IN: A @ 0; B @ 1\nOUT: A @ 1; B @ 2\n");
    assert_int_equal(xp_bound_compute(p, t, &b, &err), 0);
    near(b.seconds, 2e9 / 100e9);
    xp_program_free(p);
    xp_topo_free(t);
}

/* A cut on the V100: the four atoms of {0,1,2,3} wanted by {4,5,6,7}
 * cross 150 GB/s of NVLink (0-4, 1-5 double; 2-6, 3-7 single) plus the
 * bridge. */
static void test_cut(void **state)
{
    (void)state;
    xp_bound b;
    bound_ms("IN: A @ 0; B @ 1; C @ 2; D @ 3\nOUT: A @ 4; B @ 5; C @ 6; D @ 7\n", "dgx-v100", 0,
             &b);
    near(b.cut * 1e3, 4e9 / (150e9 + 15.75e9) * 1e3);
}

static void check_sound(const xp_program *pre, const xp_topology *t, long steps, uint64_t seed)
{
    xp_bound b;
    ein_error err = {0};
    if (xp_bound_compute(pre, t, &b, &err) != 0)
        fail_msg("bound: %s", err.msg);
    xp_search_opts o;
    xp_search_opts_default(&o);
    o.cap_ms = 0;
    o.max_work = 0;
    o.max_steps = steps;
    o.patience = 0;
    o.seed = seed;
    xp_program *out = NULL;
    xp_search_stats st;
    if (xp_search(pre, t, &o, &out, &st, &err) != 0)
        fail_msg("search: %s", err.msg);
    if (!(b.seconds <= st.best_s * (1 + 1e-9)) || !(b.seconds <= st.naive_s * (1 + 1e-9)))
        fail_msg("bound %.6f ms above a program: synthesised %.6f ms, naive %.6f ms on %s",
                 b.seconds * 1e3, st.best_s * 1e3, st.naive_s * 1e3, t->name);
    xp_program_free(out);
}

static unsigned next_rand(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (*s >> 8) & 0xffffff;
}

static void test_sound(void **state)
{
    (void)state;
    static const char *machines[] = {"dgx-v100", "dgx-a100", "dgx-h100", "host"};
    xp_program *ex53 = xt_parse("GPUS: 0, 1, 2, 3, 4, 5, 6, 7\n"
                                "PARTITIONS: G1 {size 4} G2 {size 4}\n"
                                "IN: A @ 0; B @ 1; C @ 2; D @ 3; E @ 4; F @ 5; G @ 6; H @ 7\n"
                                "OUT: A+B+E+F @ G1; C+D+G+H @ G2\n");
    xp_program *ar = xt_parse(ALLREDUCE8);
    for (int m = 0; m < 4; m++) {
        xp_topology *t = xt_topo(machines[m], -1);
        check_sound(ex53, t, 300, 1);
        check_sound(ar, t, 300, 1);
        xp_topo_free(t);
    }
    xp_program_free(ex53);
    xp_program_free(ar);
    /* Random preambles: atoms of random sizes at random sites, random
     * aggregates wanted at random sites. */
    unsigned rs = 777;
    for (int rep = 0; rep < 60; rep++) {
        char buf[4096];
        int n = 0, na = 2 + (int)(next_rand(&rs) % 8);
        n += snprintf(buf + n, sizeof buf - (size_t)n, "GPUS: 0, 1, 2, 3, 4, 5, 6, 7\nIN:");
        for (int a = 0; a < na; a++)
            n += snprintf(buf + n, sizeof buf - (size_t)n, "%s X%d @ %u (size: %u MB)",
                          a ? ";" : "", a, next_rand(&rs) % 8, 1 + next_rand(&rs) % 900);
        n += snprintf(buf + n, sizeof buf - (size_t)n, "\nOUT:");
        int nout = 1 + (int)(next_rand(&rs) % 4);
        for (int o = 0; o < nout; o++) {
            int first = 1;
            n += snprintf(buf + n, sizeof buf - (size_t)n, "%s ", o ? ";" : "");
            for (int a = 0; a < na; a++)
                if (next_rand(&rs) % 3 == 0 || (first && a == na - 1)) {
                    n += snprintf(buf + n, sizeof buf - (size_t)n, "%sX%d", first ? "" : "+", a);
                    first = 0;
                }
            n += snprintf(buf + n, sizeof buf - (size_t)n, " @ %u", next_rand(&rs) % 8);
            if (next_rand(&rs) % 2)
                n += snprintf(buf + n, sizeof buf - (size_t)n, ", %u", next_rand(&rs) % 8);
        }
        snprintf(buf + n, sizeof buf - (size_t)n, "\n");
        xp_program *p = NULL;
        ein_error err = {0};
        if (xp_program_parse(buf, "r.xp", &p, &err) != 0)
            continue; /* a repeated OUT site: skip */
        xp_topology *t = xt_topo(machines[rep % 4], -1);
        check_sound(p, t, 100, (uint64_t)rep);
        xp_topo_free(t);
        xp_program_free(p);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_allreduce),
        cmocka_unit_test(test_simple),
        cmocka_unit_test(test_cut),
        cmocka_unit_test(test_sound),
    };
    return cmocka_run_group_tests_name("exchange-bound", tests, NULL, NULL);
}
