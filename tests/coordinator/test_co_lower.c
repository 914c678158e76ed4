/* tests/coordinator/test_co_lower.c — lowering fixed exchange bodies.
 *
 * Issue 15: `h = relu(x[16,48]); y = matmul(h, w[48,64])` on 8 devices
 * (dgx-v100) failed now and then with "program of device 6: ... (agg
 * 'y<-h'): source buffer 10's box or dtype differs from dst's". The body
 * the search had produced under load is kept below: besides a valid
 * exchange it holds `A9_1+A15_7 @ 6 -> 7`, an aggregate of copies of two
 * different atoms that no OUT contains (the search's clean-up pass, cut
 * short by its time budget, had not removed it). Lowering it must give
 * valid Programs: such an action feeds no OUT and is not lowered. An
 * action inside an OUT that still mixes atoms is refused with a clear
 * message, never an internal error. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <math.h>

#include "coordinator/compile/co_lower.h"
#include "coordinator/compile/co_pipeline.h"
#include "exchange/xp_topo.h"
#include "planner/pl_optimize.h"
#include "planner/pl_parse.h"

static const char *RELU_MM = "dims a=16 b=48 c=64\n"
                             "input x[a, b]\n"
                             "input w[b, c]\n"
                             "h = relu(x)\n"
                             "y = matmul(h, w)\n"
                             "save y\n";

/* The preamble of the exchange of h for y (8 devices), as printed. */
#define PRE_H_Y                                                                                    \
    "GPUS: 0, 1, 2, 3, 4, 5, 6, 7\n"                                                               \
    "IN: A0_0 @ 0 (size: 192 bytes); A1_1 @ 1 (size: 192 bytes); A2_2 @ 2 (size: 192 bytes);"      \
    " A3_3 @ 3 (size: 192 bytes); A4_4 @ 4 (size: 192 bytes); A5_5 @ 5 (size: 192 bytes);"         \
    " A6_6 @ 6 (size: 192 bytes); A7_7 @ 7 (size: 192 bytes); A8_0 @ 0 (size: 192 bytes);"         \
    " A9_1 @ 1 (size: 192 bytes); A10_2 @ 2 (size: 192 bytes); A11_3 @ 3 (size: 192 bytes);"       \
    " A12_4 @ 4 (size: 192 bytes); A13_5 @ 5 (size: 192 bytes); A14_6 @ 6 (size: 192 bytes);"      \
    " A15_7 @ 7 (size: 192 bytes)\n"                                                               \
    "OUT: A0_0 @ 0; A1_1 @ 0; A2_2 @ 0; A3_3 @ 0; A4_4 @ 0; A5_5 @ 0; A6_6 @ 0; A7_7 @ 0;"         \
    " A0_0 @ 1; A1_1 @ 1; A2_2 @ 1; A3_3 @ 1; A4_4 @ 1; A5_5 @ 1; A6_6 @ 1; A7_7 @ 1;"             \
    " A0_0 @ 2; A1_1 @ 2; A2_2 @ 2; A3_3 @ 2; A4_4 @ 2; A5_5 @ 2; A6_6 @ 2; A7_7 @ 2;"             \
    " A0_0 @ 3; A1_1 @ 3; A2_2 @ 3; A3_3 @ 3; A4_4 @ 3; A5_5 @ 3; A6_6 @ 3; A7_7 @ 3;"             \
    " A8_0 @ 4; A9_1 @ 4; A10_2 @ 4; A11_3 @ 4; A12_4 @ 4; A13_5 @ 4; A14_6 @ 4; A15_7 @ 4;"       \
    " A8_0 @ 5; A9_1 @ 5; A10_2 @ 5; A11_3 @ 5; A12_4 @ 5; A13_5 @ 5; A14_6 @ 5; A15_7 @ 5;"       \
    " A8_0 @ 6; A9_1 @ 6; A10_2 @ 6; A11_3 @ 6; A12_4 @ 6; A13_5 @ 6; A14_6 @ 6; A15_7 @ 6;"       \
    " A8_0 @ 7; A9_1 @ 7; A10_2 @ 7; A11_3 @ 7; A12_4 @ 7; A13_5 @ 7; A14_6 @ 7; A15_7 @ 7\n"

/* The body that failed (xp_search, seed 1, 700 candidates, clean-up pass
 * cut off), verbatim. */
static const char *FAILED_BODY =
    PRE_H_Y
    "A0_0 @ 0 -> 3\nA0_0 @ 0 -> 1\nA0_0 @ 3 -> 2\nA1_1 @ 1 -> 2\nA1_1 @ 1 -> 0\nA1_1 @ 2 -> 3\n"
    "A2_2 @ 2 -> 1\nA2_2 @ 2 -> 0\nA2_2 @ 2 -> 3\nA3_3 @ 3 -> 0\nA3_3 @ 0 -> 3\nA3_3 @ 3 -> 2\n"
    "A4_4 @ 4 -> 0\nA4_4 @ 0 -> 3\nA4_4 @ 4 -> 0\nA4_4 @ 3 -> 2\nA5_5 @ 5 -> 1\nA5_5 @ 1 -> 2\n"
    "A5_5 @ 3 -> 0\nA5_5 @ 2 -> 3\nA6_6 @ 6 -> 2\nA6_6 @ 2 -> 1\nA6_6 @ 2 -> 0\nA6_6 @ 2 -> 3\n"
    "A7_7 @ 7 -> 3\nA7_7 @ 3 -> 0\nA7_7 @ 0 -> 1\nA7_7 @ 3 -> 2\nA8_0 @ 0 -> 4\nA8_0 @ 4 -> 7\n"
    "A8_0 @ 0 -> 5\nA8_0 @ 4 -> 6\nA9_1 @ 1 -> 5\nA9_1 @ 5 -> 6\nA9_1 @ 5 -> 7\nA10_2 @ 2 -> 6\n"
    "A10_2 @ 6 -> 5\nA10_2 @ 5 -> 4\nA10_2 @ 6 -> 7\nA11_3 @ 3 -> 7\nA11_3 @ 7 -> 4\n"
    "A11_3 @ 4 -> 5\nA11_3 @ 7 -> 6\nA12_4 @ 4 -> 7\nA12_4 @ 4 -> 5\nA12_4 @ 7 -> 6\n"
    "A13_5 @ 5 -> 6\nA13_5 @ 5 -> 4\nA13_5 @ 6 -> 7\nA14_6 @ 6 -> 5\nA14_6 @ 6 -> 4\n"
    "A14_6 @ 6 -> 7\nA15_7 @ 7 -> 4\nA15_7 @ 7 -> 6\nA15_7 @ 7 -> 5\nA3_3 @ 3 -> 1\n"
    "A4_4 @ 0 -> 2 -> 1\nA9_1 @ 7 -> 4\nA9_1+A15_7 @ 6 -> 7\n";

typedef struct fixed_body {
    const char *text;   /* body for the exchange of h for y */
    int used;
} fixed_body;

/* Replace the body of h -> y by the parsed text; the atoms (which blocks
 * the INs are) come from the preamble the lowering built, whose INs the
 * text lists in the same order. */
static int use_fixed(void *ctx, const char *tensor, const char *consumer, xp_program **body,
                     ein_error *err)
{
    fixed_body *fb = ctx;
    if (strcmp(tensor, "h") || strcmp(consumer, "y"))
        return 0;
    xp_program *p = NULL;
    int rc = xp_program_parse(fb->text, "fixed.xp", &p, err);
    if (rc < 0)
        return rc;
    if (p->nin != (*body)->nin) {
        xp_program_free(p);
        return ein_fail(err, EIN_EINVAL, "fixed body has %d INs, the preamble %d", p->nin,
                        (*body)->nin);
    }
    for (int i = 0; i < p->nin; i++) {
        if (p->in[i].site != (*body)->in[i].site) {
            xp_program_free(p);
            return ein_fail(err, EIN_EINVAL, "fixed body: IN %d is at %d, in the preamble at %d",
                            i, p->in[i].site, (*body)->in[i].site);
        }
        p->in[i].atom = (*body)->in[i].atom;
    }
    xp_program_free(*body);
    *body = p;
    fb->used = 1;
    return 0;
}

static int lower_with(const char *text, int ndev, fixed_body *fb, ein_program ***progs,
                      ein_error *err)
{
    pl_graph *g = NULL;
    pl_plan *plan = NULL;
    xp_topology *t = NULL;
    const char **outp = NULL;
    int rc;
    if ((rc = pl_ein_parse("relu_mm.ein", text, strlen(text), &g, err)) < 0 ||
        (rc = pl_plan_make(g, ndev, PL_SELECT_DP, 1, &plan, err)) < 0 ||
        (rc = xp_topo_load("dgx-v100", &t, err)) < 0)
        goto done;
    outp = calloc((size_t)g->nnodes, sizeof *outp);
    assert_non_null(outp);
    for (int v = 0; v < g->nnodes; v++)
        outp[v] = "y.npy";
    co_physical_opts po = {.ndev = ndev, .topo = t, .search = 1, .body_hook = use_fixed,
                           .body_ctx = fb};
    xp_search_opts_default(&po.search_opts);
    co_lower_opts lo = {.seed = 1, .output_path = outp};
    co_lower_stats st;
    co_physical *ph = NULL;
    if ((rc = co_physical_make(g, plan, &po, &ph, err)) == 0)
        rc = co_pipeline_programs(g, plan, ph, &lo, progs, &st, err);
    co_physical_free(ph);
done:
    free(outp);
    xp_topo_free(t);
    pl_plan_free(plan);
    pl_graph_free(g);
    return rc;
}

/* The exact body that failed lowers to valid Programs (co_lower validates
 * every device's Program), and the useless action costs no copy into 7. */
static void test_failed_body_lowers(void **state)
{
    (void)state;
    fixed_body fb = {.text = FAILED_BODY};
    ein_program **progs = NULL;
    ein_error err = {0};
    if (lower_with(RELU_MM, 8, &fb, &progs, &err) < 0)
        fail_msg("lowering the body that failed: %s", err.msg);
    assert_true(fb.used);
    for (int d = 0; d < 8; d++) {
        assert_int_equal(ein_program_validate(progs[d], &err), 0);
        for (int i = 0; i < progs[d]->ninstrs; i++) {
            const ein_instr *ins = &progs[d]->instrs[i];
            if (ins->kind != EIN_I_AGG)
                continue;
            for (int k = 0; k < ins->nsrcs; k++)
                assert_true(ein_box_equal(&progs[d]->buffers[ins->srcs[k]].box,
                                          &progs[d]->buffers[ins->dst].box));
        }
    }
    co_programs_free(progs, 8);
}

/* An action on a set an OUT contains but that mixes atoms cannot be
 * lowered: a one-line error naming the exchange and the action. */
static void test_mixed_atoms_in_out_refused(void **state)
{
    (void)state;
    /* An extra OUT wants A9_1 and A15_7 together at 6 (as if they were
     * partials of one block), but they are copies of different atoms. */
    static char text[8192];
    const char *end = strstr(FAILED_BODY, "A15_7 @ 7\n");
    assert_non_null(end);
    snprintf(text, sizeof text, "%.*s; A9_1+A15_7 @ 6\n%s", (int)(end + 9 - FAILED_BODY),
             FAILED_BODY, end + 10);
    fixed_body fb = {.text = text};
    ein_program **progs = NULL;
    ein_error err = {0};
    int rc = lower_with(RELU_MM, 8, &fb, &progs, &err);
    if (rc == 0)
        co_programs_free(progs, 8);
    assert_int_equal(rc, EIN_EINVAL);
    assert_true(fb.used);
    if (!strstr(err.msg, "aggregates copies of different blocks") || !strstr(err.msg, "'h'"))
        fail_msg("unexpected message: %s", err.msg);
    assert_null(strstr(err.msg, "internal error"));
}

/* A chunked body for h -> y (docs/exprog.md): every atom sent straight to
 * the sites that need it, except A1_1, a stream of 3 chunks multicast from
 * 1 to 0, 2 and 3, and A13_5, a stream of 2 chunks relayed by 4 (which
 * keeps them: it needs A13_5 too) to 6 and 7. */
static char *chunked_body(void)
{
    static char text[16384];
    size_t n = (size_t)snprintf(text, sizeof text, "%s", PRE_H_Y);
    for (int i = 0; i < 16; i++) {
        int site = i % 8, lo = i < 8 ? 0 : 4;
        if (i == 1) {
            n += (size_t)snprintf(text + n, sizeof text - n, "A1_1 [*/3] @ 1 -> 0, 2, 3\n");
            continue;
        }
        if (i == 13) {
            n += (size_t)snprintf(text + n, sizeof text - n, "A13_5 [*/2] @ 5 -> 4 -> 6, 7\n");
            continue;
        }
        for (int d = lo; d < lo + 4; d++)
            if (d != site)
                n += (size_t)snprintf(text + n, sizeof text - n, "A%d_%d @ %d -> %d\n", i, site,
                                      site, d);
    }
    return text;
}

/* The COPYs of device `dev` from device `peer`, in program order. */
static int copies_from(const ein_program *p, int peer, const ein_instr **out, int max)
{
    int n = 0;
    for (int i = 0; i < p->ninstrs; i++)
        if (p->instrs[i].kind == EIN_I_COPY && p->instrs[i].peer == peer && n < max)
            out[n++] = &p->instrs[i];
    return n;
}

/* Index of instruction `ins` in p, and whether instruction k depends on it. */
static int instr_id(const ein_program *p, const ein_instr *ins)
{
    return (int)(ins - p->instrs);
}

static int depends(const ein_instr *k, int id)
{
    for (int i = 0; i < k->ndeps; i++)
        if (k->deps[i] == id)
            return 1;
    return 0;
}

/* Expected by hand. h is [16, 48] f32; A1_1 is rows [2, 4) x cols [0, 24)
 * (2 rows of 96 bytes): chunk c of 3 is rows 2c/3 .. 2(c+1)/3 of it, so
 * chunk 0 is empty (no copy), chunk 1 row 0 (bytes 0..95), chunk 2 row 1
 * (bytes 96..191). A13_5 is rows [10, 12) x cols [24, 48): chunk c of 2 is
 * row c. Each COPY writes a view of the receiver's atom buffer (its offset
 * plus r0 rows), reads the sender's view of the same rows, and whatever
 * reads the whole atom depends on every chunk's COPY. */
static void check_chunk_copies(ein_program **progs, int dev, int peer, int64_t row0,
                               int64_t col0)
{
    const ein_instr *cp[16], *mine[2];
    int n = copies_from(progs[dev], peer, cp, 16), k = 0;
    for (int i = 0; i < n; i++) {
        const ein_box *b = &progs[dev]->buffers[cp[i]->dst].box;
        if (b->lo[1] == col0 && b->lo[0] >= row0 && b->hi[0] <= row0 + 2 && k < 2)
            mine[k++] = cp[i];
    }
    if (k != 2)
        fail_msg("device %d: %d chunk copies from %d, expected 2", dev, k, peer);
    const ein_pbuffer *d0 = &progs[dev]->buffers[mine[0]->dst];
    const ein_pbuffer *d1 = &progs[dev]->buffers[mine[1]->dst];
    const ein_pbuffer *s0 = &progs[peer]->buffers[mine[0]->peer_buf];
    const ein_pbuffer *s1 = &progs[peer]->buffers[mine[1]->peer_buf];
    for (int c = 0; c < 2; c++) {
        const ein_pbuffer *d = c ? d1 : d0, *s = c ? s1 : s0;
        assert_int_equal(d->box.lo[0], row0 + c);
        assert_int_equal(d->box.hi[0], row0 + c + 1);
        assert_int_equal(d->box.lo[1], col0);
        assert_int_equal(d->box.hi[1], col0 + 24);
        assert_int_equal(d->bytes, 96);
        assert_true(ein_box_equal(&s->box, &d->box));
        assert_int_equal((c ? mine[1] : mine[0])->peer_offset, s->offset);
    }
    assert_int_equal(d1->offset, d0->offset + 96);
    assert_int_equal(s1->offset, s0->offset + 96);
    /* The atom's buffer: rows row0 .. row0+2 at d0's offset; its readers
     * wait for both chunks. */
    int atom = -1, readers = 0;
    for (int b = 0; b < progs[dev]->nbuffers && atom < 0; b++) {
        const ein_pbuffer *pb = &progs[dev]->buffers[b];
        if (pb->offset == d0->offset && pb->bytes == 192 && pb->box.lo[0] == row0)
            atom = b;
    }
    assert_true(atom >= 0);
    for (int i = 0; i < progs[dev]->ninstrs; i++) {
        const ein_instr *ins = &progs[dev]->instrs[i];
        for (int j = 0; j < ins->nsrcs; j++)
            if (ins->srcs[j] == atom) {
                readers++;
                assert_true(depends(ins, instr_id(progs[dev], mine[0])));
                assert_true(depends(ins, instr_id(progs[dev], mine[1])));
            }
    }
    assert_true(readers >= 1);
}

static void test_chunked_body_lowers(void **state)
{
    (void)state;
    fixed_body fb = {.text = chunked_body()};
    ein_program **progs = NULL;
    ein_error err = {0};
    if (lower_with(RELU_MM, 8, &fb, &progs, &err) < 0)
        fail_msg("lowering the chunked body: %s", err.msg);
    assert_true(fb.used);
    int dsts[] = {0, 2, 3};
    for (int i = 0; i < 3; i++)
        check_chunk_copies(progs, dsts[i], 1, 2, 0);
    check_chunk_copies(progs, 4, 5, 10, 24);    /* the relay keeps a copy */
    check_chunk_copies(progs, 6, 4, 10, 24);    /* and forwards it chunk by chunk */
    check_chunk_copies(progs, 7, 4, 10, 24);
    /* The multicast's sender notifies each destination of each chunk. */
    int notes = 0;
    for (int i = 0; i < progs[1]->ninstrs; i++) {
        const ein_instr *ins = &progs[1]->instrs[i];
        if (ins->kind == EIN_I_NOTIFY && progs[1]->buffers[ins->srcs[0]].bytes == 96 &&
            progs[1]->buffers[ins->srcs[0]].box.lo[0] >= 2 &&
            progs[1]->buffers[ins->srcs[0]].box.hi[0] <= 4)
            notes++;
    }
    assert_int_equal(notes, 6);
    /* Views do not grow the segment: every buffer lies inside it. */
    for (int d = 0; d < 8; d++)
        for (int b = 0; b < progs[d]->nbuffers; b++)
            assert_true(progs[d]->buffers[b].offset + progs[d]->buffers[b].bytes <=
                        progs[d]->segment_bytes);
    co_programs_free(progs, 8);
}

/* Forced chunks (co_lower_opts.exchange_chunks) on the searched bodies of
 * the 8-device lowering give valid Programs, more COPYs than whole
 * blocks, and the same bytes moved. */
static void test_forced_chunks(void **state)
{
    (void)state;
    pl_graph *g = NULL;
    pl_plan *plan = NULL;
    xp_topology *t = NULL;
    ein_error err = {0};
    assert_int_equal(pl_ein_parse("relu_mm.ein", RELU_MM, strlen(RELU_MM), &g, &err), 0);
    assert_int_equal(pl_plan_make(g, 8, PL_SELECT_DP, 1, &plan, &err), 0);
    assert_int_equal(xp_topo_load("dgx-v100", &t, &err), 0);
    co_lower_stats st[2];
    for (int k = 0; k < 2; k++) {
        co_physical_opts po = {.ndev = 8, .topo = t, .search = 1, .exchange_chunks = k ? 4 : 0};
        xp_search_opts_default(&po.search_opts);
        co_lower_opts lo = {.seed = 1};
        ein_program **progs = NULL;
        co_physical *ph = NULL;
        if (co_physical_make(g, plan, &po, &ph, &err) < 0 ||
            co_pipeline_programs(g, plan, ph, &lo, &progs, &st[k], &err) < 0)
            fail_msg("chunks %d: %s", k ? 4 : 0, err.msg);
        co_physical_free(ph);
        co_programs_free(progs, 8);
    }
    assert_int_equal(st[0].nchunked, 0);
    assert_true(st[1].nchunked >= 1);
    assert_true(st[1].ncopies > st[0].ncopies);
    assert_true(st[1].copy_bytes == st[0].copy_bytes);
    xp_topo_free(t);
    pl_plan_free(plan);
    pl_graph_free(g);
}

/* The physical plan is a value: one exchange per operator input produced
 * by an operator (and per saved operator), in node order, each with a
 * checked body over its preamble, sites on real devices, times that add
 * up to the statistics, and co_lower emitting from it alone. */
static void test_physical_plan(void **state)
{
    (void)state;
    pl_graph *g = NULL;
    pl_plan *plan = NULL;
    xp_topology *t = NULL;
    ein_error err = {0};
    assert_int_equal(pl_ein_parse("relu_mm.ein", RELU_MM, strlen(RELU_MM), &g, &err), 0);
    assert_int_equal(pl_plan_make(g, 8, PL_SELECT_DP, 1, &plan, &err), 0);
    assert_int_equal(xp_topo_load("dgx-v100", &t, &err), 0);
    co_physical_opts po = {.ndev = 8, .topo = t, .search = 1};
    xp_search_opts_default(&po.search_opts);
    po.search_opts.cap_ms = 0;
    co_physical *ph = NULL;
    if (co_physical_make(g, plan, &po, &ph, &err) < 0)
        fail_msg("%s", err.msg);
    int want = 0, prev = -1;
    for (int v = 0; v < g->nnodes; v++) {
        const pl_node *nd = pl_graph_node(g, v);
        if (!plan->nodes[v].planned)
            continue;
        for (int f = 0; f < plan->nodes[v].spec.nparts; f++)
            assert_int_equal(co_physical_place(ph, v, f), f);
        for (int k = 0; k < nd->ninputs; k++)
            want += pl_graph_node(g, nd->inputs[k])->kind != PL_INPUT;
        want += nd->saved;
    }
    assert_int_equal(ph->nex, want);
    assert_int_equal(ph->st.nexchanges, want);
    double naive = 0, chosen = 0;
    for (int i = 0; i < ph->nex; i++) {
        const co_exchange *e = &ph->ex[i];
        int at = e->consumer >= 0 ? e->consumer : e->tensor;
        assert_true(at >= prev); /* emission order: by node */
        prev = at;
        assert_int_equal(xp_program_check(e->body, &err), 0);
        assert_true(e->nneed >= 1 && e->natoms >= 1);
        for (int b = 0; b < e->nneed; b++)
            assert_true(e->need_site[b] >= 0 && e->need_site[b] < 8);
        assert_true(e->chosen_s >= 0 && !(e->chosen_s > e->naive_s * (1 + 1e-9)));
        assert_string_equal(co_exchange_consumer_name(g, e),
                            e->consumer >= 0 ? pl_graph_node(g, e->consumer)->name : "save");
        naive += e->naive_s;
        chosen += e->chosen_s;
    }
    assert_true(!(fabs(naive - ph->st.naive_s) > 1e-12 * (1 + naive)));
    assert_true(!(fabs(chosen - ph->st.synth_s) > 1e-12 * (1 + chosen)));
    /* Lowered twice from the same value: the same Programs, the same
     * exchange statistics as the value's. */
    ein_program **p1 = NULL, **p2 = NULL;
    co_lower_opts lo = {.seed = 1};
    co_lower_stats s1, s2;
    assert_int_equal(co_pipeline_programs(g, plan, ph, &lo, &p1, &s1, &err), 0);
    assert_int_equal(co_pipeline_programs(g, plan, ph, &lo, &p2, &s2, &err), 0);
    assert_int_equal(s1.nexchanges, ph->st.nexchanges);
    assert_int_equal(s1.ninstrs, s2.ninstrs);
    for (int d = 0; d < 8; d++) {
        void *b1 = NULL, *b2 = NULL;
        size_t l1 = 0, l2 = 0;
        assert_int_equal(ein_program_encode(p1[d], &b1, &l1, &err), 0);
        assert_int_equal(ein_program_encode(p2[d], &b2, &l2, &err), 0);
        assert_int_equal(l1, l2);
        assert_memory_equal(b1, b2, l1);
        free(b1);
        free(b2);
    }
    co_programs_free(p1, 8);
    co_programs_free(p2, 8);
    co_physical_free(ph);
    xp_topo_free(t);
    pl_plan_free(plan);
    pl_graph_free(g);
}

/* --exchange-chunks values. */
static void test_chunks_parse(void **state)
{
    (void)state;
    int k = 0;
    ein_error err = {0};
    assert_int_equal(co_exchange_chunks_parse("auto", &k, &err), 0);
    assert_int_equal(k, -1);
    assert_int_equal(co_exchange_chunks_parse("off", &k, &err), 0);
    assert_int_equal(k, 1);
    assert_int_equal(co_exchange_chunks_parse("16", &k, &err), 0);
    assert_int_equal(k, 16);
    assert_int_equal(co_exchange_chunks_parse("0", &k, &err), EIN_EINVAL);
    assert_int_equal(co_exchange_chunks_parse("1025", &k, &err), EIN_EINVAL);
    assert_int_equal(co_exchange_chunks_parse("4x", &k, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "expected auto, off or a chunk count"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_failed_body_lowers),
        cmocka_unit_test(test_mixed_atoms_in_out_refused),
        cmocka_unit_test(test_chunked_body_lowers),
        cmocka_unit_test(test_forced_chunks),
        cmocka_unit_test(test_chunks_parse),
        cmocka_unit_test(test_physical_plan),
    };
    return cmocka_run_group_tests_name("coordinator-lower", tests, NULL, NULL);
}
