/* tests/coordinator/test_co_memplan.c — buffer placement by liveness
 * (coordinator/compile/co_memplan.h):
 *  - a hand-made chain whose placement, peak and added dependency are
 *    worked out by hand;
 *  - lowered Programs (a 6-layer chain of matmuls on 3 devices, whole and
 *    chunked exchanges): every pair of buffers that share bytes in the plan
 *    but not without it have disjoint lives, and every user of the earlier
 *    one is an ancestor of every writer of the later one in the DAG; a peer's
 *    COPY of a buffer whose bytes are reused is acknowledged (a NOTIFY back
 *    after the COPY, a WAIT before the writer); the plan uses less than
 *    every buffer in a place of its own (no delay before reuse, small
 *    delays, the defaults);
 *  - a buffer overlapping another without lying inside it is refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "coordinator/compile/co_memplan.h"
#include "coordinator/compile/co_pipeline.h"
#include "coordinator/compile/ein_compile_int.h"
#include "planner/pl_optimize.h"
#include "planner/pl_parse.h"

static int buf(ein_program *p, int64_t r, int64_t c)
{
    int64_t sh[2] = {r, c};
    ein_box b = ein_box_of_shape(2, sh);
    int id = ein_program_add_buffer(p, EIN_F32, &b, NULL);
    assert_true(id >= 0);
    return id;
}

static int instr(ein_program *p, ein_instr_kind k, int dst, int src, int dep)
{
    int32_t s = src, d = dep;
    ein_instr ins = {.kind = k, .dst = dst, .srcs = &s, .nsrcs = src >= 0, .deps = &d,
                     .ndeps = dep >= 0};
    if (k == EIN_I_KERNEL)
        ins.kernel = (ein_kernel){.kind = EIN_KERNEL_UNARY, .unary = EIN_UN_SCALE, .scalar = 2};
    if (k == EIN_I_LOAD || k == EIN_I_STORE) {
        ins.rank = 2;
        ins.shape[0] = ins.shape[1] = 16;
        ins.path = k == EIN_I_STORE ? "c.npy" : NULL;
    }
    strcpy(ins.op, "op");
    int id = ein_program_add_instr(p, &ins, NULL);
    assert_true(id >= 0);
    return id;
}

static int has_dep(const ein_instr *ins, int d)
{
    for (int k = 0; k < ins->ndeps; k++)
        if (ins->deps[k] == d)
            return 1;
    return 0;
}

/* X loaded (1 KB), A = 2X, B = 2A, C = 2B, C stored: X keeps its place
 * [0, 1 KB); A at 1 KB; B lives with A (B's writer reads A) so it goes on
 * top at 2 KB; C starts after A's last reader and takes A's bytes. Segment
 * 3 KB instead of 4 KB, and C's writer depends on A's writer and reader. */
static void test_chain_by_hand(void **state)
{
    (void)state;
    ein_program *p = ein_program_new(0, 1);
    int x = buf(p, 16, 16), a = buf(p, 16, 16), b = buf(p, 16, 16), c = buf(p, 16, 16);
    int l = instr(p, EIN_I_LOAD, x, -1, -1);
    int ka = instr(p, EIN_I_KERNEL, a, x, l);
    int kb = instr(p, EIN_I_KERNEL, b, a, ka);
    int kc = instr(p, EIN_I_KERNEL, c, b, kb);
    instr(p, EIN_I_STORE, -1, c, kc);
    ein_error err = {0};
    co_memplan_dev st;
    co_memplan_opts o = {0}; /* no delay: reuse as soon as possible */
    if (co_memplan(&p, 1, &o, &st, &err) < 0)
        fail_msg("%s", err.msg);
    assert_int_equal(ein_program_validate(p, &err), 0);
    assert_int_equal(st.before, 4096);
    assert_int_equal(st.after, 3072);
    assert_int_equal(st.pinned, 1024);
    assert_int_equal(st.live_peak, 3072);
    assert_int_equal(p->segment_bytes, 3072);
    assert_int_equal(p->unplanned_bytes, 4096);
    assert_int_equal(p->buffers[x].offset, 0);
    assert_int_equal(p->buffers[a].offset, 1024);
    assert_int_equal(p->buffers[b].offset, 2048);
    assert_int_equal(p->buffers[c].offset, 1024);
    assert_int_equal(p->ninstrs, 5); /* nothing added on one device */
    assert_true(has_dep(&p->instrs[kc], ka) && has_dep(&p->instrs[kc], kb));
    ein_program_free(p);
}

/* Buffer 1 starts inside buffer 0 and ends past it: refused. */
static void test_partial_overlap(void **state)
{
    (void)state;
    ein_program *p = ein_program_new(0, 1);
    buf(p, 16, 16);
    int b = buf(p, 16, 16);
    p->buffers[b].offset = 512;
    ein_error err = {0};
    assert_int_equal(co_memplan(&p, 1, NULL, NULL, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "overlaps"));
    ein_program_free(p);
}

/* ---- checks on lowered Programs ------------------------------------------ */

/* anc[i * n + j]: instruction j is an ancestor of i (or i itself). */
static unsigned char *ancestors(const ein_program *p)
{
    int n = p->ninstrs;
    unsigned char *a = calloc((size_t)n * (size_t)n + 1, 1);
    assert_non_null(a);
    for (int i = 0; i < n; i++) {
        a[(size_t)i * n + i] = 1;
        for (int k = 0; k < p->instrs[i].ndeps; k++) {
            int d = p->instrs[i].deps[k];
            for (int j = 0; j <= d; j++)
                a[(size_t)i * n + j] |= a[(size_t)d * n + j];
        }
    }
    return a;
}

static int uses(const ein_instr *ins, const int *root, int r)
{
    if (ins->dst >= 0 && root[ins->dst] == r)
        return 1;
    for (int s = 0; s < ins->nsrcs; s++)
        if (root[ins->srcs[s]] == r)
            return 1;
    return 0;
}

/* An acknowledgement: a NOTIFY of a COPY's dst back to the device copied
 * from. It reads nothing (it only says the COPY is done), so the bytes may
 * be reused before it runs. */
static int is_ack(const ein_program *q, int i)
{
    const ein_instr *nt = &q->instrs[i];
    if (nt->kind != EIN_I_NOTIFY)
        return 0;
    for (int c = 0; c < i; c++)
        if (q->instrs[c].kind == EIN_I_COPY && q->instrs[c].dst == nt->srcs[0] &&
            q->instrs[c].peer == nt->peer)
            return 1;
    return 0;
}

static int overlap(const ein_pbuffer *x, const ein_pbuffer *y)
{
    return x->offset < y->offset + y->bytes && y->offset < x->offset + x->bytes;
}

/* The root of each buffer in the unplanned layout `u` (the buffer of
 * largest extent containing it). */
static int *roots_of(const ein_program *u)
{
    int *root = malloc(sizeof(int) * ((size_t)u->nbuffers + 1));
    assert_non_null(root);
    for (int b = 0; b < u->nbuffers; b++) {
        root[b] = b;
        for (int c = 0; c < u->nbuffers; c++) {
            const ein_pbuffer *x = &u->buffers[b], *y = &u->buffers[c];
            if (y->offset <= x->offset && x->offset + x->bytes <= y->offset + y->bytes &&
                y->bytes > u->buffers[root[b]].bytes)
                root[b] = c;
        }
    }
    return root;
}

/* Planned Programs `p` against the same Programs unplanned `u`. */
static void check_plan(ein_program **p, ein_program **u, int ndev, int *reused, int *acked)
{
    for (int d = 0; d < ndev; d++) {
        const ein_program *q = p[d];
        ein_error err = {0};
        if (ein_program_validate(q, &err) < 0)
            fail_msg("device %d: %s", d, err.msg);
        assert_int_equal(q->nbuffers, u[d]->nbuffers);
        int *root = roots_of(u[d]);
        unsigned char *anc = ancestors(q);
        int n = q->ninstrs, nb = q->nbuffers;
        int *first = malloc(sizeof(int) * ((size_t)nb + 1)), *last = malloc(sizeof(int) * ((size_t)nb + 1));
        for (int r = 0; r < nb; r++)
            first[r] = last[r] = -1;
        for (int i = 0; i < n; i++)
            for (int r = 0; r < nb; r++)
                if (root[r] == r && !is_ack(q, i) && uses(&q->instrs[i], root, r)) {
                    if (first[r] < 0)
                        first[r] = i;
                    last[r] = i;
                }
        for (int r1 = 0; r1 < nb; r1++)
            for (int r2 = 0; r2 < nb; r2++) {
                if (root[r1] != r1 || root[r2] != r2 || r1 == r2 || first[r1] < 0 ||
                    first[r2] < 0 || !overlap(&q->buffers[r1], &q->buffers[r2]) ||
                    first[r1] > first[r2])
                    continue;
                ++*reused;
                /* r1 first, then r2 in the same bytes: lives disjoint ... */
                if (!(last[r1] < first[r2]))
                    fail_msg("device %d: buffers %d [%d, %d] and %d [%d, %d] share bytes and "
                             "live at once", d, r1, first[r1], last[r1], r2, first[r2], last[r2]);
                /* ... and every user of r1 before every writer of r2 */
                for (int w = 0; w < n; w++) {
                    if (q->instrs[w].dst < 0 || root[q->instrs[w].dst] != r2)
                        continue;
                    for (int i = 0; i < n; i++)
                        if (uses(&q->instrs[i], root, r1) && !is_ack(q, i) &&
                            !anc[(size_t)w * n + i])
                            fail_msg("device %d: instruction %d writes buffer %d over buffer %d "
                                     "without depending on its user %d", d, w, r2, r1, i);
                    /* a peer's COPY of r1: acknowledged before w */
                    for (int e = 0; e < ndev; e++)
                        for (int c = 0; c < p[e]->ninstrs; c++) {
                            const ein_instr *cp = &p[e]->instrs[c];
                            if (cp->kind != EIN_I_COPY || cp->peer != d || root[cp->peer_buf] != r1)
                                continue;
                            int waited = 0, told = 0;
                            for (int k = 0; k < n && !waited; k++)
                                waited = q->instrs[k].kind == EIN_I_WAIT &&
                                         q->instrs[k].peer == e &&
                                         q->instrs[k].peer_buf == cp->dst &&
                                         anc[(size_t)w * n + k];
                            for (int k = c + 1; k < p[e]->ninstrs && !told; k++)
                                told = p[e]->instrs[k].kind == EIN_I_NOTIFY &&
                                       p[e]->instrs[k].peer == d &&
                                       p[e]->instrs[k].srcs[0] == cp->dst &&
                                       has_dep(&p[e]->instrs[k], c);
                            if (!waited || !told)
                                fail_msg("device %d: instruction %d overwrites buffer %d, which "
                                         "device %d copies (instruction %d), without its "
                                         "acknowledgement (wait %d, notify %d)", d, w, r1, e, c,
                                         waited, told);
                            ++*acked;
                        }
                }
            }
        assert_true(q->segment_bytes < u[d]->segment_bytes);
        assert_int_equal(q->unplanned_bytes, u[d]->segment_bytes);
        free(root);
        free(anc);
        free(first);
        free(last);
    }
}

static const char CHAIN[] =
    "dims t=48 d=64\ndtype f32\ninput x[t, d]\n"
    "input w1[d, d]\ninput w2[d, d]\ninput w3[d, d]\ninput w4[d, d]\ninput w5[d, d]\n"
    "input w6[d, d]\n"
    "h1 = matmul(x, w1)\ng1 = silu(h1)\nh2 = matmul(g1, w2)\ng2 = silu(h2)\n"
    "h3 = matmul(g2, w3)\ng3 = silu(h3)\nh4 = matmul(g3, w4)\ng4 = silu(h4)\n"
    "h5 = matmul(g4, w5)\ng5 = silu(h5)\nh6 = matmul(g5, w6)\ny = add(h6, x)\nsave y\n";

static xp_topology *topo(int n)
{
    char text[256];
    snprintf(text, sizeof text,
             "name t\ngpus %d\nhbm 100 GB/s\npeak 1 TFLOP/s\nport 10 GB/s\nrest direct\n", n);
    xp_topology *t = NULL;
    ein_error err = {0};
    assert_int_equal(xp_topo_parse(text, "t.topo", &t, &err), 0);
    return t;
}

static void lower(const pl_graph *g, const pl_plan *plan, const xp_topology *t, int chunks,
                  int no_reuse, ein_program ***progs)
{
    ein_compile_options o;
    ein_compile_options_init(&o);
    o.exchange_chunks = chunks;
    o.no_reuse = no_reuse;
    o.naive_exchanges = 1;
    co_pipeline p;
    co_pipeline_init(&p, g, plan, t, &o);
    ein_error err = {0};
    if (co_pipeline_run(&p, &err) < 0)
        fail_msg("%s", err.msg);
    *progs = p.progs;
    p.progs = NULL;
    co_pipeline_clear(&p);
}

/* Lower the chain on ndev devices twice without reuse, plan one copy with
 * delays `o` (NULL: the defaults), check it against the other. */
static void check_lowered(int ndev, int chunks, pl_selector sel, const co_memplan_opts *o,
                          int want_acks)
{
    pl_graph *g = NULL;
    pl_plan *plan = NULL;
    ein_error err = {0};
    assert_int_equal(pl_ein_parse("chain.ein", CHAIN, strlen(CHAIN), &g, &err), 0);
    assert_int_equal(pl_plan_make(g, ndev, sel, 3, &plan, &err), 0);
    xp_topology *t = topo(ndev);
    ein_program **p = NULL, **u = NULL;
    lower(g, plan, t, chunks, 1, &p);
    lower(g, plan, t, chunks, 1, &u);
    if (co_memplan(p, ndev, o, NULL, &err) < 0)
        fail_msg("%s", err.msg);
    int reused = 0, acked = 0;
    check_plan(p, u, ndev, &reused, &acked);
    print_message("# %d devices, chunks %d, delays %d/%d: %d pairs share bytes, %d peer copies "
                  "acknowledged\n", ndev, chunks, o ? o->delay_local : CO_MEMPLAN_DELAY_LOCAL,
                  o ? o->delay_remote : CO_MEMPLAN_DELAY_REMOTE, reused, acked);
    assert_true(reused > 0);
    if (want_acks)
        assert_true(acked > 0);
    co_programs_free(p, ndev);
    co_programs_free(u, ndev);
    xp_topo_free(t);
    pl_plan_free(plan);
    pl_graph_free(g);
}

static const co_memplan_opts NODELAY = {0, 0}, SOME = {3, 7};

static void test_lowered_dp(void **state)
{
    (void)state;
    check_lowered(3, 0, PL_SELECT_DP, &NODELAY, 1);
    check_lowered(3, 0, PL_SELECT_DP, &SOME, 0);
    check_lowered(3, 0, PL_SELECT_DP, NULL, 0);
}

static void test_lowered_random_chunked(void **state)
{
    (void)state;
    check_lowered(3, 3, PL_SELECT_RANDOM, &NODELAY, 1);
    check_lowered(4, 2, PL_SELECT_RANDOM, &NODELAY, 1);
    check_lowered(4, 2, PL_SELECT_RANDOM, &SOME, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chain_by_hand),
        cmocka_unit_test(test_partial_overlap),
        cmocka_unit_test(test_lowered_dp),
        cmocka_unit_test(test_lowered_random_chunked),
    };
    return cmocka_run_group_tests_name("co_memplan", tests, NULL, NULL);
}
