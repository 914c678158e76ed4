/* tests/exchange/test_baseline.c — ring, double binary tree and direct
 * collectives as ExProg bodies: valid (Def. 5.5) for every shape of
 * preamble (all-reduce, reduce-scatter, all-gather, all-to-all, the
 * paper's Ex. 5.3 and random ones), never below the lower bound, and the
 * pipelined ring close to the bound on a large all-reduce. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "exchange/xp_baseline.h"
#include "exchange/xp_bound.h"
#include "exchange/xp_search.h"
#include "exchange/xp_sim.h"
#include "tests/exchange/xp_testutil.h"

/* Collectives over n GPUs, S bytes per GPU (text). */
static char *collective(const char *kind, int n, const char *size)
{
    static char buf[65536];
    int k = 0;
#define P(...) k += snprintf(buf + k, sizeof buf - (size_t)k, __VA_ARGS__)
    P("IN:");
    if (strcmp(kind, "allreduce") == 0) {
        for (int g = 0; g < n; g++)
            P("%s X%d @ %d (size: %s)", g ? ";" : "", g, g, size);
        P("\nOUT: ");
        for (int g = 0; g < n; g++)
            P("%sX%d", g ? "+" : "", g);
        P(" @ ");
        for (int g = 0; g < n; g++)
            P("%s%d", g ? ", " : "", g);
    } else if (strcmp(kind, "reducescatter") == 0) {
        for (int a = 0; a < n; a++)
            for (int g = 0; g < n; g++)
                P("%s X%d_%d @ %d (size: %s)", a || g ? ";" : "", a, g, g, size);
        P("\nOUT:");
        for (int a = 0; a < n; a++) {
            P("%s ", a ? ";" : "");
            for (int g = 0; g < n; g++)
                P("%sX%d_%d", g ? "+" : "", a, g);
            P(" @ %d", a);
        }
    } else if (strcmp(kind, "allgather") == 0) {
        for (int g = 0; g < n; g++)
            P("%s X%d @ %d (size: %s)", g ? ";" : "", g, g, size);
        P("\nOUT:");
        for (int a = 0; a < n; a++) {
            P("%s X%d @ ", a ? ";" : "", a);
            for (int g = 0; g < n; g++)
                P("%s%d", g ? ", " : "", g);
        }
    } else { /* alltoall */
        for (int s = 0; s < n; s++)
            for (int d = 0; d < n; d++)
                if (s != d)
                    P("%s X%d_%d @ %d (size: %s)", k > 4 ? ";" : "", s, d, s, size);
        P("\nOUT:");
        int first = 1;
        for (int s = 0; s < n; s++)
            for (int d = 0; d < n; d++)
                if (s != d) {
                    P("%s X%d_%d @ %d", first ? "" : ";", s, d, d);
                    first = 0;
                }
    }
    P("\n");
#undef P
    return buf;
}

/* Every kind, pipelines 1 and 4: valid, and not below the bound. */
static void check_all(const xp_program *pre, const xp_topology *t, const char *what)
{
    xp_bound b;
    ein_error err = {0};
    if (xp_bound_compute(pre, t, &b, &err) != 0)
        fail_msg("bound: %s", err.msg);
    for (int k = XP_BASE_RING; k <= XP_BASE_DIRECT; k++)
        for (int pipe = 1; pipe <= 4; pipe *= 4) {
            xp_program *q = NULL;
            int rc = xp_baseline(pre, t, (xp_base_kind)k, pipe, &q, &err);
            if (rc == EIN_EUNSUPPORTED)
                continue;
            if (rc != 0)
                fail_msg("%s on %s, %s x%d: %s", what, t->name, xp_base_name(k), pipe, err.msg);
            if (xp_program_check(q, &err) != 0)
                fail_msg("%s, %s x%d: not valid: %s", what, xp_base_name(k), pipe, err.msg);
            double s;
            if (xp_sim_run(q, t, &s, NULL, &err) != 0)
                fail_msg("%s, %s x%d: simulate: %s", what, xp_base_name(k), pipe, err.msg);
            if (!(s >= b.seconds * (1 - 1e-9)))
                fail_msg("%s on %s, %s x%d: %.6f ms below the bound %.6f ms", what, t->name,
                         xp_base_name(k), pipe, s * 1e3, b.seconds * 1e3);
            xp_program_free(q);
        }
}

static void test_collectives(void **state)
{
    (void)state;
    static const char *kinds[] = {"allreduce", "reducescatter", "allgather", "alltoall"};
    static const char *machines[] = {"dgx-a100", "dgx-v100", "host"};
    for (int m = 0; m < 3; m++) {
        xp_topology *t = xt_topo(machines[m], -1);
        for (int k = 0; k < 4; k++)
            for (int n = 2; n <= 8; n += 3) {
                xp_program *p = xt_parse(collective(kinds[k], n, "64 MB"));
                check_all(p, t, kinds[k]);
                xp_program_free(p);
            }
        xp_topo_free(t);
    }
}

/* The paper's Ex. 5.3 (membership from the naive program) and random
 * preambles: aggregates of some copies wanted at some sites. */
static void test_other_preambles(void **state)
{
    (void)state;
    xp_topology *t = xt_topo("dgx-v100", -1);
    xp_program *pre = xt_parse("GPUS: 0, 1, 2, 3, 4, 5, 6, 7\nPARTITIONS: G1 {size 4} G2 {size 4}\n"
                               "IN: A @ 0; B @ 1; C @ 2; D @ 3; E @ 4; F @ 5; G @ 6; H @ 7\n"
                               "OUT: A+B+E+F @ G1; C+D+G+H @ G2\n");
    xp_program *naive = NULL;
    ein_error err = {0};
    double s;
    assert_int_equal(xp_search_naive(pre, t, &naive, &s, &err), 0);
    check_all(naive, t, "Ex. 5.3");
    xp_program_free(naive);
    xp_program_free(pre);
    unsigned rs = 99;
    for (int rep = 0; rep < 40; rep++) {
        char buf[4096];
        int n = 0, na = 1 + (int)((rs = rs * 1103515245u + 12345u) >> 16) % 8;
        n += snprintf(buf + n, sizeof buf - (size_t)n, "GPUS: 0, 1, 2, 3, 4, 5, 6, 7\nIN:");
        for (int a = 0; a < na; a++) {
            rs = rs * 1103515245u + 12345u;
            n += snprintf(buf + n, sizeof buf - (size_t)n, "%s X%d @ %u (size: %u MB)",
                          a ? ";" : "", a, (rs >> 16) % 8, 1 + (rs >> 8) % 100);
        }
        n += snprintf(buf + n, sizeof buf - (size_t)n, "\nOUT: ");
        int first = 1;
        for (int a = 0; a < na; a++) {
            rs = rs * 1103515245u + 12345u;
            if ((rs >> 16) % 2 || (first && a == na - 1)) {
                n += snprintf(buf + n, sizeof buf - (size_t)n, "%sX%d", first ? "" : "+", a);
                first = 0;
            }
        }
        rs = rs * 1103515245u + 12345u;
        unsigned d0 = (rs >> 16) % 8, d1 = (rs >> 8) % 8;
        if (d0 == d1)
            n += snprintf(buf + n, sizeof buf - (size_t)n, " @ %u\n", d0);
        else
            n += snprintf(buf + n, sizeof buf - (size_t)n, " @ %u, %u\n", d0, d1);
        xp_program *p = xt_parse(buf);
        xp_topology *tt = xt_topo(rep % 2 ? "dgx-v100" : "dgx-h100", -1);
        check_all(p, tt, buf);
        xp_topo_free(tt);
        xp_program_free(p);
    }
    xp_topo_free(t);
}

/* A pipelined ring all-reduce of 8 x 1 GB: within 3% of the bound on the
 * A100 and the V100 (four rings over the NVLinks); the printed program
 * parses back to itself. */
static void test_ring_near_bound(void **state)
{
    (void)state;
    static const char *machines[] = {"dgx-a100", "dgx-v100"};
    for (int m = 0; m < 2; m++) {
        xp_topology *t = xt_topo(machines[m], -1);
        xp_program *p = xt_parse(collective("allreduce", 8, "1 GB")), *q = NULL;
        ein_error err = {0};
        xp_bound b;
        double s;
        assert_int_equal(xp_bound_compute(p, t, &b, &err), 0);
        assert_int_equal(xp_baseline(p, t, XP_BASE_RING, 4, &q, &err), 0);
        assert_int_equal(xp_sim_run(q, t, &s, NULL, &err), 0);
        if (!(s <= b.seconds * 1.03))
            fail_msg("%s: ring %.4f ms, bound %.4f ms", t->name, s * 1e3, b.seconds * 1e3);
        char *txt = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&txt, &len);
        xp_program_print(q, f, NULL, NULL);
        fclose(f);
        xp_program *r = xt_parse(txt);
        assert_true(xp_program_equal(q, r));
        free(txt);
        xp_program_free(r);
        xp_program_free(q);
        xp_program_free(p);
        xp_topo_free(t);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_collectives),
        cmocka_unit_test(test_other_preambles),
        cmocka_unit_test(test_ring_near_bound),
    };
    return cmocka_run_group_tests_name("exchange-baseline", tests, NULL, NULL);
}
