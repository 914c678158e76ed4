/* tests/coordinator/test_co_invariants.c — the checkers asserted at the
 * seams (common/base/ein_invariant.h) catch a planted violation, and accept the
 * structures the code makes:
 *  - co_physical_ok (lowering's entry): a physical plan made for a chain on
 *    3 devices passes; a tuple on a device out of range, two tuples of a
 *    node on one device, a needed block off the devices, an exchange for an
 *    input that is not the consumer's, a tuple count other than the plan's
 *    each fail;
 *  - co_memplan_ok (memory planning's postconditions): a hand-made layout
 *    passes; two live roots sharing a byte, a misaligned root, a buffer past
 *    the segment, an alias outside its root each fail; roots whose lives
 *    do not overlap may share bytes;
 *  - wk_ready_set_ok (the worker's READY set): a sorted set passes; an
 *    unsorted one, a duplicate, this device's own key, a peer out of range,
 *    more entries than capacity each fail. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "coordinator/compile/co_memplan.h"
#include "coordinator/compile/co_physical.h"
#include "planner/pl_optimize.h"
#include "planner/pl_parse.h"
#include "worker/wk_exec_int.h"

static const char CHAIN[] =
    "dims t=48 d=64\ndtype f32\ninput x[t, d]\ninput w1[d, d]\ninput w2[d, d]\n"
    "h1 = matmul(x, w1)\ng1 = silu(h1)\nh2 = matmul(g1, w2)\ny = add(h2, x)\nsave y\n";

static void test_physical_plan(void **state)
{
    (void)state;
    pl_graph *g = NULL;
    pl_plan *plan = NULL;
    co_physical *ph = NULL;
    ein_error err = {0};
    assert_int_equal(pl_ein_parse("chain.ein", CHAIN, strlen(CHAIN), &g, &err), 0);
    assert_int_equal(pl_plan_make(g, 3, PL_SELECT_DP, 3, &plan, &err), 0);
    co_physical_opts po = {.ndev = 3};
    if (co_physical_make(g, plan, &po, &ph, &err) < 0)
        fail_msg("%s", err.msg);
    assert_int_equal(co_physical_ok(ph, g, plan), 1);

    /* a node with two or more tuples, and an exchange with needed blocks */
    int v = -1, x = -1;
    for (int u = 0; u < ph->nnodes && v < 0; u++)
        if (ph->place_at[u + 1] - ph->place_at[u] >= 2)
            v = u;
    for (int e = 0; e < ph->nex && x < 0; e++)
        if (ph->ex[e].nneed > 0 && ph->ex[e].consumer >= 0)
            x = e;
    assert_true(v >= 0 && x >= 0);
    int *t = &ph->place[ph->place_at[v]], t0 = t[0];

    t[0] = ph->ndev; /* a device out of range */
    assert_int_equal(co_physical_ok(ph, g, plan), 0);
    t[0] = t[1];     /* two tuples on one device */
    assert_int_equal(co_physical_ok(ph, g, plan), 0);
    t[0] = t0;
    assert_int_equal(co_physical_ok(ph, g, plan), 1);

    co_exchange *e = &ph->ex[x];
    int site = e->need_site[0], input = e->input;
    e->need_site[0] = -1;
    assert_int_equal(co_physical_ok(ph, g, plan), 0);
    e->need_site[0] = site;
    e->input = g->nodes[e->consumer].ninputs; /* not an input of the consumer */
    assert_int_equal(co_physical_ok(ph, g, plan), 0);
    e->input = input;
    assert_int_equal(co_physical_ok(ph, g, plan), 1);

    int nparts = plan->nodes[v].spec.nparts;
    plan->nodes[v].spec.nparts = nparts - 1; /* the plan and the tuples disagree */
    assert_int_equal(co_physical_ok(ph, g, plan), 0);
    plan->nodes[v].spec.nparts = nparts;
    assert_int_equal(co_physical_ok(ph, g, plan), 1);

    co_physical_free(ph);
    pl_plan_free(plan);
    pl_graph_free(g);
}

/* Four f32 buffers of 16 x 16 (1 KB) and one alias (rows 0..7 of buffer 0),
 * placed by hand: roots 0 and 1 live together in [0, 2 KB), root 2 after
 * root 0's life in root 0's bytes, root 3 unused. */
static void test_memory_plan(void **state)
{
    (void)state;
    ein_program *p = ein_program_new(0, 1);
    assert_non_null(p);
    int64_t sh[2] = {16, 16}, ah[2] = {8, 16};
    ein_box b = ein_box_of_shape(2, sh), a = ein_box_of_shape(2, ah);
    for (int k = 0; k < 4; k++)
        assert_int_equal(ein_program_add_buffer(p, EIN_F32, &b, NULL), k);
    assert_int_equal(ein_program_add_buffer(p, EIN_F32, &a, NULL), 4);
    int root[5] = {0, 1, 2, 3, 0};
    int first[5] = {0, 1, 5, -1, -1}, last[5] = {4, 6, 8, -1, -1};
    uint64_t off[5] = {0, 1024, 0, 2048, 0};
    for (int k = 0; k < 5; k++)
        p->buffers[k].offset = off[k];
    p->segment_bytes = 3072;
    assert_int_equal(co_memplan_ok(p, root, first, last), 1);

    first[2] = 4; /* root 2 written while root 0, in the same bytes, is read */
    assert_int_equal(co_memplan_ok(p, root, first, last), 0);
    first[2] = 5;
    p->buffers[1].offset = 512; /* root 1 over live root 0's second half */
    assert_int_equal(co_memplan_ok(p, root, first, last), 0);
    p->buffers[1].offset = 1024 + 8; /* aligned to its dtype, not to 256 */
    assert_int_equal(co_memplan_ok(p, root, first, last), 0);
    p->buffers[1].offset = 1024;
    p->segment_bytes = 3071; /* root 3 ends past the segment */
    assert_int_equal(co_memplan_ok(p, root, first, last), 0);
    p->segment_bytes = 3072;
    p->buffers[4].offset = 768; /* the alias runs out of its root */
    assert_int_equal(co_memplan_ok(p, root, first, last), 0);
    p->buffers[4].offset = 0;
    assert_int_equal(co_memplan_ok(p, root, first, last), 1);
    ein_program_free(p);
}

#define KEY(peer, buf) ((uint64_t)(peer) << 32 | (uint32_t)(buf))

static void test_ready_set(void **state)
{
    (void)state;
    /* device 1 of 4 */
    uint64_t r[4] = {KEY(0, 3), KEY(0, 7), KEY(2, 1), KEY(3, 0)};
    assert_int_equal(wk_ready_set_ok(r, 4, 4, 4, 1), 1);
    assert_int_equal(wk_ready_set_ok(r, 0, 0, 4, 1), 1);
    assert_int_equal(wk_ready_set_ok(r, 4, 3, 4, 1), 0); /* more than its capacity */
    assert_int_equal(wk_ready_set_ok(r, 4, 4, 3, 1), 0); /* device 3 of 3 */
    assert_int_equal(wk_ready_set_ok(r, 4, 4, 4, 2), 0); /* its own READY */
    r[1] = KEY(0, 3);                                     /* a duplicate */
    assert_int_equal(wk_ready_set_ok(r, 4, 4, 4, 1), 0);
    r[1] = KEY(2, 9);                                     /* out of order */
    assert_int_equal(wk_ready_set_ok(r, 4, 4, 4, 1), 0);
    r[1] = KEY(0, 0x80000000u);                           /* a negative buffer */
    assert_int_equal(wk_ready_set_ok(r, 4, 4, 4, 1), 0);
    r[1] = KEY(0, 7);
    assert_int_equal(wk_ready_set_ok(r, 4, 4, 4, 1), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_physical_plan),
        cmocka_unit_test(test_memory_plan),
        cmocka_unit_test(test_ready_set),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
