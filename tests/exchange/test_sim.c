/* tests/exchange/test_sim.c — topologies (built-ins, files, errors) and the
 * simulator: the paper's Examples 5.1-5.3 within 2%, max-min sharing,
 * multicast, relays, aggregation at HBM bandwidth, traces, the topology
 * printer (xp_topo_format). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "exchange/xp_program.h"
#include "exchange/xp_sim.h"
#include "exchange/xp_topo.h"
#include "tests/exchange/xp_testutil.h"

/* xt_topo(name, 0): the machine with alpha = 0, the paper's bandwidth-only
 * model, which the exact figures below (and Examples 5.1-5.3) are
 * computed in; xt_topo(name, -1) keeps its per-action latency. */

static double sim_ms(const char *text, const char *machine, xp_timeline **tl)
{
    xp_program *p = xt_parse(text), *w = NULL;
    xp_topology *t = xt_topo(machine, 0);
    ein_error err = {0};
    double s = 0;
    if (xp_program_validate(p, &w, &err) != 0)
        fail_msg("invalid: %s", err.msg);
    if (xp_sim_run(w, t, &s, tl, &err) != 0)
        fail_msg("simulate: %s", err.msg);
    xp_program_free(p);
    xp_program_free(w);
    xp_topo_free(t);
    return s * 1e3;
}

static void assert_within(double got, double want, double rel)
{
    if (got < want * (1 - rel) || got > want * (1 + rel))
        fail_msg("got %.4f, want %.4f within %.0f%%", got, want, rel * 100);
}

static void test_builtins(void **state)
{
    (void)state;
    static const struct { const char *name; int ngpus; } m[] = {
        {"dgx-a100", 8}, {"dgx-h100", 8}, {"hgx-h200", 8},
        {"dgx-v100", 8}, {"gb200-nvl72", 72}, {"host", 8}};
    for (size_t i = 0; i < sizeof m / sizeof *m; i++) {
        xp_topology *t = xt_topo(m[i].name, 0);
        assert_int_equal(t->ngpus, m[i].ngpus);
        assert_string_equal(t->name, m[i].name);
        xp_topo_free(t);
    }
    xp_topology *t = NULL;
    ein_error err = {0};
    assert_int_equal(xp_topo_load("dgx-z900", &t, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "dgx-v100"));
}

/* The files in topologies/ are the built-ins, byte for byte. */
static void test_builtin_files(void **state)
{
    (void)state;
    const char *src = getenv("EIN_SRCDIR");
    if (!src)
        src = "..";
    for (int i = 0; xp_topo_builtin_names[i]; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/topologies/%s.topo", src, xp_topo_builtin_names[i]);
        FILE *f = fopen(path, "rb");
        if (!f)
            fail_msg("cannot open %s", path);
        static char buf[1 << 16];
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        assert_string_equal(buf, xp_topo_builtin_text(xp_topo_builtin_names[i]));
        xp_topology *t = NULL;
        ein_error err = {0};
        assert_int_equal(xp_topo_load(path, &t, &err), 0);
        xp_topo_free(t);
    }
}

/* DGX-V100 adjacency (PAPER_NOTES §4): six NVLinks per GPU, 8 double
 * pairs, 8 single pairs, 12 pairs over the shared PCIe bridge. */
static void test_v100_adjacency(void **state)
{
    (void)state;
    xp_topology *t = xt_topo("dgx-v100", 0);
    int dbl = 0, sgl = 0, none = 0;
    for (int a = 0; a < 8; a++) {
        double links = 0;
        for (int b = 0; b < 8; b++) {
            if (a == b)
                continue;
            double bw = t->link[a * 8 + b];
            assert_true(bw == t->link[b * 8 + a]);
            links += bw / 25e9;
            if (a < b) {
                dbl += bw == 50e9;
                sgl += bw == 25e9;
                none += bw == 0;
            }
        }
        assert_true(links == 6);
    }
    assert_int_equal(dbl, 8);
    assert_int_equal(sgl, 8);
    assert_int_equal(none, 12);
    assert_true(t->link[0 * 8 + 4] == 50e9 && t->link[0 * 8 + 1] == 25e9);
    assert_true(t->link[0 * 8 + 5] == 0);
    int res[4];
    assert_int_equal(xp_topo_route(t, 0, 5, res, NULL), 1);
    char name[64];
    xp_topo_res_name(t, res[0], name, sizeof name);
    assert_string_equal(name, "pcie");
    assert_true(xp_topo_res_bw(t, res[0]) == 15.75e9);
    xp_topo_free(t);
}

static void test_topology_file_errors(void **state)
{
    (void)state;
    static const struct { const char *text, *where, *what; } cases[] = {
        {"hbm 1 TB/s\n", "1:1", "no 'gpus'"},
        {"gpus 2\n", "1:1", "no 'hbm'"},
        {"gpus 2\nhbm 1 TB/s\nlink 0 2 5 GB/s\n", "3:1", "distinct"},
        {"gpus 2\nhbm 1 TB/s\nlink 0 1 5 GB/s\nlink 1 0 5 GB/s\n", "4:1", "twice"},
        {"gpus 2\nhbm 1 Tb/s\n", "2:1", "UNIT"},
        {"gpus 2\nhbm 1 TB/s\n  rest via bus\n", "3:1", "no shared resource"},
        {"gpus 2\nhbm 1 TB/s\nwarp 9\n", "3:1", "unknown statement"},
        {"link 0 1 5 GB/s\n", "1:1", "'link' before 'gpus'; expected the gpus statement first"},
        {"gpus 2\ngpus 2\n", "2:1", "'gpus' given twice; expected one gpus statement"},
        {"gpus 2\nhbm 1 TB/s\nlink 0 1\n", "3:1", "bad 'link' statement; expected: link A B"},
        {"gpus 0\n", "1:1", "gpus N"},
        {"gpus 2\nhbm 1 TB/s\nrest sideways\n", "3:1", "rest direct"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        xp_topology *t = NULL;
        ein_error err = {0};
        if (xp_topo_parse(cases[i].text, "m.topo", &t, &err) != EIN_EPARSE)
            fail_msg("case %zu accepted", i);
        char where[64];
        snprintf(where, sizeof where, "m.topo:%s:", cases[i].where);
        /* What was wrong, then what was expected. */
        const char *exp = strstr(err.msg, "; expected");
        if (strncmp(err.msg, where, strlen(where)) != 0 || !strstr(err.msg, cases[i].what) ||
            !exp || exp == err.msg + strlen(where))
            fail_msg("case %zu: got \"%s\"", i, err.msg);
    }
    /* A machine with no route between two GPUs cannot run a transfer. */
    xp_topology *t = NULL;
    ein_error err = {0};
    assert_int_equal(xp_topo_parse("gpus 2\nhbm 1 TB/s\nrest none\n", "x", &t, &err), 0);
    xp_program *p = xt_parse("IN: A @ 0\nOUT: A @ 1\nA @ 0 -> 1\n");
    double s;
    assert_true(xp_sim_run(p, t, &s, NULL, &err) < 0);
    assert_non_null(strstr(err.msg, "not connected"));
    xp_program_free(p);
    xp_topo_free(t);
}

static const char *EX51 = "IN: A @ 0; B @ 1\nOUT: A+B @ 0, 1\nA @ 0 -> 1;\nB @ 1 -> 0;\n"
                          "A+B @ 0, 1\n";

/* Ex. 5.1 on DGX-H100: about 3.1 ms, 2.2 ms of it the two transfers. */
static void test_example_5_1(void **state)
{
    (void)state;
    xp_timeline *tl = NULL;
    double ms = sim_ms(EX51, "dgx-h100", &tl);
    assert_within(ms, 3.1, 0.02);
    assert_within(tl->xfer_busy * 1e3, 2.2, 0.02);
    /* The model: 1 GB at 450 GB/s, then read 2 GB + write 1 GB at 3.35 TB/s. */
    assert_within(ms, (1e9 / 450e9 + 3e9 / 3.35e12) * 1e3, 1e-9);
    xp_timeline_free(tl);
}

/* Ex. 5.2 on DGX-H100: about 6.2 ms. */
static void test_example_5_2(void **state)
{
    (void)state;
    double ms = sim_ms("IN: A @ 0; B @ 1; C @ 2; D @ 3\nOUT: A+B+C+D @ 0, 1, 2, 3\n"
                       "A @ 0 -> 1; B @ 1 -> 0\nC @ 2 -> 3; D @ 3 -> 2\n"
                       "A+B @ 0 -> 2; A+B @ 1 -> 3\nC+D @ 2 -> 0; C+D @ 3 -> 1\n"
                       "A+B+C+D @ 0, 1, 2, 3\n",
                       "dgx-h100", NULL);
    assert_within(ms, 6.2, 0.02);
}

/* Ex. 5.3 on DGX-V100: about 67 ms with G1 = {0,1,4,5}, G2 = {2,3,6,7},
 * and no transfer on the PCIe bridge. */
static void test_example_5_3(void **state)
{
    (void)state;
    xp_timeline *tl = NULL;
    double ms = sim_ms("GPUS: 0, 1, 2, 3, 4, 5, 6, 7\nPARTITIONS: G1 {size 4} G2 {size 4}\n"
                       "IN: A @ 0; B @ 1; C @ 2; D @ 3; E @ 4; F @ 5; G @ 6; H @ 7\n"
                       "OUT: A+B+E+F @ G1; C+D+G+H @ G2\n"
                       "A @ 0 -> 1; B @ 1 -> 0; C @ 2 -> 3\nD @ 3 -> 2; E @ 4 -> 5; F @ 5 -> 4\n"
                       "G @ 6 -> 7; H @ 7 -> 6\nA+B @ 0 -> 4; A+B @ 1 -> 5; C+D @ 2 -> 6\n"
                       "C+D @ 3 -> 7; E+F @ 4 -> 0; E+F @ 5 -> 1\nG+H @ 6 -> 2; G+H @ 7 -> 3\n"
                       "A+B+E+F @ G1; C+D+G+H @ G2\n",
                       "dgx-v100", &tl);
    assert_within(ms, 67, 0.02);
    xp_topology *t = xt_topo("dgx-v100", 0);
    int pcie = 3 * 8 + 64;
    int nx = 0;
    for (int s = 0; s < tl->nspan; s++) {
        const xp_span *sp = &tl->span[s];
        if (sp->kind != XP_SPAN_XFER)
            continue;
        nx++;
        for (int k = 0; k < sp->nres; k++)
            assert_int_not_equal(sp->res[k], pcie);
    }
    assert_int_equal(nx, 16);
    xp_timeline_free(tl);
    xp_topo_free(t);
}

/* Max-min fairness at a shared egress port, then the survivor speeds up. */
static void test_max_min_sharing(void **state)
{
    (void)state;
    /* 0 sends 1 GB to 1 and 0.5 GB to 2 on DGX-H100: both at 225 GB/s
     * until the small one ends (2.222 ms), then the rest at 450 GB/s. */
    xp_timeline *tl = NULL;
    double ms = sim_ms("IN: A @ 0; B @ 0 (size: 0.5 GB)\nOUT: A @ 1; B @ 2\n"
                       "A @ 0 -> 1; B @ 0 -> 2\n",
                       "dgx-h100", &tl);
    assert_within(ms, (0.5e9 / 225e9 + 0.5e9 / 450e9) * 1e3, 1e-9);
    assert_within(tl->act_end[1] * 1e3, 0.5e9 / 225e9 * 1e3, 1e-9);
    xp_timeline_free(tl);
    /* Two transfers into one GPU share its ingress port. */
    ms = sim_ms("IN: A @ 0; B @ 1\nOUT: A @ 2; B @ 2\nA @ 0 -> 2; B @ 1 -> 2\n", "dgx-h100",
                NULL);
    assert_within(ms, 2e9 / 450e9 * 1e3, 1e-9);
    /* On the V100 every pair without NVLink shares 15.75 GB/s in total. */
    ms = sim_ms("IN: A @ 0; B @ 1\nOUT: A @ 5; B @ 4\nA @ 0 -> 5; B @ 1 -> 4\n", "dgx-v100",
                NULL);
    assert_within(ms, 2e9 / 15.75e9 * 1e3, 1e-9);
    /* ... while NVLink pairs do not contend with each other. */
    ms = sim_ms("IN: A @ 0; B @ 1\nOUT: A @ 4; B @ 5\nA @ 0 -> 4; B @ 1 -> 5\n", "dgx-v100",
                NULL);
    assert_within(ms, 1e9 / 50e9 * 1e3, 1e-9);
}

/* A multicast to k destinations gets 1/k of the source's egress each. */
static void test_multicast(void **state)
{
    (void)state;
    double ms = sim_ms("IN: A @ 0\nOUT: A @ 1; A @ 2; A @ 3\nA @ 0 -> 1, 2, 3\n", "dgx-a100",
                       NULL);
    assert_within(ms, 3e9 / 300e9 * 1e3, 1e-9);
}

/* A relay forwards after it has received the whole aggregate. */
static void test_relay(void **state)
{
    (void)state;
    xp_timeline *tl = NULL;
    /* 0 -> 4 (50 GB/s) -> 5 (25 GB/s) on the V100: 20 + 40 ms, no PCIe. */
    double ms = sim_ms("IN: A @ 0\nOUT: A @ 5\nA @ 0 -> 4 -> 5\n", "dgx-v100", &tl);
    assert_within(ms, 60, 1e-9);
    assert_int_equal(tl->nspan, 2);
    assert_within(tl->span[1].start * 1e3, 20, 1e-9);
    xp_timeline_free(tl);
    /* The relay site holds the data too: a later action may use it there. */
    ms = sim_ms("IN: A @ 0; B @ 4\nOUT: A+B @ 4\nA @ 0 -> 4 -> 5\nA+B @ 4\n", "dgx-v100", &tl);
    assert_within(ms, 60, 1e-9);
    /* ... sharing 4's HBM with the copy 4 -> 5 reading it at 25 GB/s. */
    assert_within(tl->act_end[1] * 1e3, 20 + 3e9 / 875e9 * 1e3, 1e-9);
    xp_timeline_free(tl);
}

/* Aggregations on one GPU share its HBM; a local aggregation of data
 * already there is free. */
static void test_aggregation(void **state)
{
    (void)state;
    double ms = sim_ms("IN: A @ 0; B @ 0; C @ 0; D @ 0\nOUT: A+B @ 0; C+D @ 0\nA+B @ 0; C+D @ 0\n",
                       "dgx-v100", NULL);
    assert_within(ms, 6e9 / 900e9 * 1e3, 1e-9);
    /* An action fires as soon as it is enabled, from the partition with
     * the fewest pieces then held: A+B+C from A+B and C once C arrives. */
    ms = sim_ms("IN: A @ 0; B @ 0; C @ 1\nOUT: A+B+C @ 0\nC @ 1 -> 0\nA+B @ 0\nA+B+C @ 0\n",
                "dgx-h100", NULL);
    assert_within(ms, (1e9 / 450e9 + 3e9 / 3.35e12) * 1e3, 1e-9);
    /* ... and at once if its atoms are all there (A, B, C: 3 pieces),
     * sharing HBM with A+B @ 0 (3 + 4 GB moved in all). */
    ms = sim_ms("IN: A @ 0; B @ 0; C @ 0\nOUT: A+B+C @ 0\nA+B @ 0\nA+B+C @ 0\n", "dgx-h100",
                NULL);
    assert_within(ms, 7e9 / 3.35e12 * 1e3, 1e-9);
    ms = sim_ms("IN: A @ 0\nOUT: A @ 0\nA @ 0\n", "dgx-h100", NULL);
    assert_true(ms == 0);
}

/* Programs that are not valid are refused by the simulator too. */
static void test_invalid_refused(void **state)
{
    (void)state;
    xp_program *p = xt_parse("IN: A @ 0; B @ 1\nOUT: A+B @ 0\nA+B @ 0\n");
    xp_topology *t = xt_topo("dgx-h100", 0);
    ein_error err = {0};
    double s = -1;
    assert_int_equal(xp_sim_run(p, t, &s, NULL, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "never enabled"));
    assert_true(s == -1);
    xp_program_free(p);
    p = xt_parse("GPUS: 0, 1\nPARTITIONS: G {size 2}\nIN: A @ 0\nOUT: A @ G\nA @ 0 -> 1\n");
    assert_int_equal(xp_sim_run(p, t, &s, NULL, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "resolve"));
    xp_program_free(p);
    xp_topo_free(t);
}

static void test_trace_json(void **state)
{
    (void)state;
    xp_program *p = xt_parse(EX51);
    xp_topology *t = xt_topo("dgx-h100", 0);
    xp_timeline *tl = NULL;
    ein_error err = {0};
    double s;
    assert_int_equal(xp_sim_run(p, t, &s, &tl, &err), 0);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_int_equal(xp_timeline_write_trace(p, t, tl, f), 0);
    fclose(f);
    assert_non_null(strstr(buf, "\"traceEvents\""));
    assert_non_null(strstr(buf, "\"name\": \"0->1 A @ 0 -> 1\""));
    assert_non_null(strstr(buf, "\"cat\": \"aggregate\""));
    assert_non_null(strstr(buf, "\"dur\": 2222.222"));
    /* Balanced brackets, no trailing comma before the closing bracket. */
    int depth = 0;
    for (char *c = buf; *c; c++)
        depth += (*c == '{' || *c == '[') - (*c == '}' || *c == ']');
    assert_int_equal(depth, 0);
    assert_null(strstr(buf, ",\n]"));
    free(buf);
    char *txt = NULL;
    f = open_memstream(&txt, &len);
    xp_timeline_print(p, t, tl, f);
    fclose(f);
    assert_non_null(strstr(txt, "transfer 0 -> 1: 0.000 .. 2.222 ms via egress 0, ingress 1"));
    free(txt);
    xp_timeline_free(tl);
    xp_program_free(p);
    xp_topo_free(t);
}

static void assert_same_topology(const xp_topology *a, const xp_topology *b)
{
    assert_string_equal(a->name, b->name);
    assert_int_equal(a->ngpus, b->ngpus);
    assert_true(a->hbm == b->hbm && a->peak == b->peak && a->port == b->port);
    assert_true(a->memory == b->memory && a->latency == b->latency);
    assert_string_equal(a->calibration, b->calibration);
    for (int k = 0; k < a->ngpus * a->ngpus; k++)
        if (a->link[k] != b->link[k])
            fail_msg("%s: link %d->%d: %.17g vs %.17g", a->name, k / a->ngpus, k % a->ngpus,
                     a->link[k], b->link[k]);
    assert_int_equal(a->nshared, b->nshared);
    for (int k = 0; k < a->nshared; k++) {
        assert_string_equal(a->shared_name[k], b->shared_name[k]);
        assert_true(a->shared_bw[k] == b->shared_bw[k]);
    }
    assert_int_equal(a->rest, b->rest);
}

/* xp_topo_format reads back to the same topology, for every built-in and
 * a few odd ones; printing again gives the same text. */
static void test_format_round_trip(void **state)
{
    (void)state;
    static const char *const odd[] = {
        "gpus 3\nhbm 1.1 TB/s\nlink 0 2 0.1 MB/s\nrest none\n",
        "name x\ngpus 2\nhbm 123456789.123 MB/s\nport 3.3333333333333335 GB/s\nrest direct\n",
        "name y\ngpus 2\nhbm 1 TB/s\nshared a 1 GB/s\nshared b 2 GB/s\nrest via b\n",
    };
    int nb = 0;
    while (xp_topo_builtin_names[nb])
        nb++;
    for (int i = 0; i < nb + 3; i++) {
        const char *text = i < nb ? xp_topo_builtin_text(xp_topo_builtin_names[i]) : odd[i - nb];
        xp_topology *t = NULL, *u = NULL;
        ein_error err = {0};
        char *out = NULL, *again = NULL;
        if (xp_topo_parse(text, "odd.topo", &t, &err) != 0)
            fail_msg("%s", err.msg);
        if (xp_topo_format(t, &out, &err) != 0)
            fail_msg("format: %s", err.msg);
        if (xp_topo_parse(out, "printed", &u, &err) != 0)
            fail_msg("printed text does not parse: %s\n%s", err.msg, out);
        if (i < nb || i > nb)
            assert_same_topology(t, u);
        else
            assert_string_equal(u->name, "odd.topo"); /* no name: the file's */
        assert_int_equal(xp_topo_format(u, &again, &err), 0);
        assert_string_equal(out, again);
        free(out);
        free(again);
        xp_topo_free(t);
        xp_topo_free(u);
    }
    /* The host machine, as einrun prints it. */
    xp_topology *t = xt_topo("host", -1);
    char *out = NULL;
    assert_int_equal(xp_topo_format(t, &out, NULL), 0);
    assert_string_equal(out, "name host\ngpus 8\nhbm 20 GB/s\npeak 80 GFLOP/s\nport 20 GB/s\n"
                             "shared membus 80 GB/s\nrest via membus\nlatency 30 us\n"
                             "memory 2 GB\ncalibration host\n");
    free(out);
    /* One bandwidth per pair: an asymmetric matrix cannot be printed. */
    t->link[0 * 8 + 1] = 1e9;
    ein_error err = {0};
    assert_int_equal(xp_topo_format(t, &out, &err), EIN_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "link 0->1 and 1->0 differ"));
    xp_topo_free(t);
    /* A name taken from a path with blanks is printed with '_'. */
    assert_int_equal(xp_topo_parse("gpus 1\nhbm 1 TB/s\n", "my machine.topo", &t, NULL), 0);
    assert_int_equal(xp_topo_format(t, &out, NULL), 0);
    assert_non_null(strstr(out, "name my_machine.topo\n"));
    free(out);
    xp_topo_free(t);
}

/* Alpha: every hop of a transfer waits the topology's latency first (a
 * relay's second hop too); alpha = 0 gives the examples' figures exactly. */
static void test_latency(void **state)
{
    (void)state;
    xp_program *p = xt_parse("IN: A @ 0\nOUT: A @ 5\nA @ 0 -> 4 -> 5\n");
    xp_topology *t = xt_topo("dgx-v100", -1);
    ein_error err = {0};
    double s = 0;
    assert_within(t->latency, 10e-6, 1e-12);
    assert_int_equal(xp_sim_run(p, t, &s, NULL, &err), 0);
    assert_within(s * 1e3, 60 + 2 * 0.010, 1e-9);
    xp_program_free(p);
    xp_topo_free(t);
    /* Ex. 5.1 on the H100 (6 us): one hop, then the local aggregation. */
    p = xt_parse(EX51);
    t = xt_topo("dgx-h100", -1);
    assert_int_equal(xp_sim_run(p, t, &s, NULL, &err), 0);
    assert_within(s * 1e3, (1e9 / 450e9 + 3e9 / 3.35e12 + 6e-6) * 1e3, 1e-9);
    t->latency = 0;
    assert_int_equal(xp_sim_run(p, t, &s, NULL, &err), 0);
    assert_within(s * 1e3, 3.1177, 1e-4);
    xp_program_free(p);
    xp_topo_free(t);
    /* Many small pieces pay alpha each: 1 KB in 4 sequential relays. */
    assert_int_equal(xp_topo_parse("gpus 3\nhbm 1 TB/s\nport 1 TB/s\nrest direct\n"
                                   "latency 1 ms\n", "a.topo", &t, &err), 0);
    p = xt_parse("IN: A @ 0 (size: 1 KB)\nOUT: A @ 2\nA @ 0 -> 1 -> 2\n");
    assert_int_equal(xp_sim_run(p, t, &s, NULL, &err), 0);
    assert_within(s * 1e3, 2 + 2 * 1e3 / 1e12 * 1e3, 1e-9);
    xp_program_free(p);
    xp_topo_free(t);
    /* Malformed latency statements. */
    assert_int_equal(xp_topo_parse("gpus 1\nhbm 1 TB/s\nlatency 3 parsecs\n", "b.topo", &t,
                                   &err), EIN_EPARSE);
    assert_non_null(strstr(err.msg, "latency TIME UNIT"));
    assert_int_equal(xp_topo_parse("gpus 1\nhbm 1 TB/s\nlatency -1 us\n", "b.topo", &t, &err),
                     EIN_EPARSE);
}

/* A transfer reads HBM at its source and writes it at its destination. */
static void test_hbm_both_ends(void **state)
{
    (void)state;
    xp_topology *t = NULL;
    ein_error err = {0};
    double s = 0;
    assert_int_equal(xp_topo_parse("gpus 3\nhbm 100 GB/s\nport 450 GB/s\nrest direct\n",
                                   "h.topo", &t, &err), 0);
    /* HBM, not the port, limits one copy: 1 GB at 100 GB/s. */
    xp_program *p = xt_parse("IN: A @ 0\nOUT: A @ 1\nA @ 0 -> 1\n");
    assert_int_equal(xp_sim_run(p, t, &s, NULL, &err), 0);
    assert_within(s * 1e3, 10, 1e-9);
    xp_program_free(p);
    /* A swap: each GPU reads one copy and writes the other, 50 GB/s each. */
    p = xt_parse("IN: A @ 0; B @ 1\nOUT: A @ 1; B @ 0\nA @ 0 -> 1; B @ 1 -> 0\n");
    assert_int_equal(xp_sim_run(p, t, &s, NULL, &err), 0);
    assert_within(s * 1e3, 20, 1e-9);
    xp_program_free(p);
    xp_topo_free(t);
}

/* Chunks: an all-chunks relay is a stream (each hop forwards chunk i while
 * chunk i+1 arrives; on a hop chunks follow each other), and halves of an
 * atom move and aggregate on their own. */
static void test_chunks(void **state)
{
    (void)state;
    xp_timeline *tl = NULL;
    /* 0 -> 4 (50 GB/s) -> 5 (25 GB/s), 4 chunks of 250 MB: the first
     * reaches 4 after 5 ms, then 4 -> 5 is busy 4 x 10 ms. */
    double ms = sim_ms("IN: A @ 0\nOUT: A @ 5\nA [*/4] @ 0 -> 4 -> 5\n", "dgx-v100", &tl);
    assert_within(ms, 45, 1e-9);
    assert_int_equal(tl->nact, 1);
    assert_int_equal(tl->nspan, 8);
    assert_within(tl->act_end[0] * 1e3, 45, 1e-9);
    xp_timeline_free(tl);
    /* More chunks: the pipeline fills sooner (5 ms / 64 + 40 ms). */
    ms = sim_ms("IN: A @ 0\nOUT: A @ 5\nA [*/64] @ 0 -> 4 -> 5\n", "dgx-v100", NULL);
    assert_within(ms, 40 + 20.0 / 64, 1e-9);
    /* ... but each chunk-hop pays alpha: with 10 us, 64 chunks cost
     * 64 x 10 us more on the slow hop. */
    xp_program *p = xt_parse("IN: A @ 0\nOUT: A @ 5\nA [*/64] @ 0 -> 4 -> 5\n");
    xp_topology *t = xt_topo("dgx-v100", -1);
    ein_error err = {0};
    double s = 0;
    assert_int_equal(xp_sim_run(p, t, &s, NULL, &err), 0);
    assert_within(s * 1e3, 40 + 20.0 / 64 + 0.010 + 64 * 0.010, 1e-6);
    xp_program_free(p);
    xp_topo_free(t);
    /* Reduce-scatter then all-gather over two H100s, by halves: 0.5 GB
     * each way (1.111 ms), the halves summed (1.5 GB of HBM traffic at
     * 3.35 TB/s), 0.5 GB back. */
    ms = sim_ms("IN: A @ 0; B @ 1\nOUT: A+B @ 0, 1\nA [0/2] @ 0 -> 1; B [1/2] @ 1 -> 0\n"
                "A+B [0/2] @ 1 -> 0\nA+B [1/2] @ 0 -> 1\n", "dgx-h100", NULL);
    assert_within(ms, (2 * 0.5e9 / 450e9 + 1.5e9 / 3.35e12) * 1e3, 1e-9);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_builtins),
        cmocka_unit_test(test_builtin_files),
        cmocka_unit_test(test_v100_adjacency),
        cmocka_unit_test(test_topology_file_errors),
        cmocka_unit_test(test_example_5_1),
        cmocka_unit_test(test_example_5_2),
        cmocka_unit_test(test_example_5_3),
        cmocka_unit_test(test_max_min_sharing),
        cmocka_unit_test(test_multicast),
        cmocka_unit_test(test_relay),
        cmocka_unit_test(test_aggregation),
        cmocka_unit_test(test_invalid_refused),
        cmocka_unit_test(test_trace_json),
        cmocka_unit_test(test_format_round_trip),
        cmocka_unit_test(test_latency),
        cmocka_unit_test(test_hbm_both_ends),
        cmocka_unit_test(test_chunks),
    };
    return cmocka_run_group_tests_name("exchange-sim", tests, NULL, NULL);
}
