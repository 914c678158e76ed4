/* tests/coordinator/test_co_lower_small.c — lowering plans whose operators
 * use fewer devices than P (issue 15).
 *
 * Random small programs (vectors and matrices of 1 to 30 elements per dim,
 * softmax, matmul, reduce, broadcast and elementwise binaries) are planned
 * on P = 2..8 devices and lowered with naive exchange bodies. Checked per
 * operator: exactly spec.nparts KERNEL instructions, one on each device
 * i < nparts and none elsewhere, each writing the box of function
 * specification i; per saved tensor: the STOREs' boxes tile it exactly.
 * co_lower itself validates every device's Program (dependencies, buffer
 * boxes, copies), including devices that run nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "coordinator/compile/co_lower.h"
#include "coordinator/compile/co_pipeline.h"

static uint64_t rng = 0x51a11;

static uint64_t rnd(void)
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static int64_t dim(void)
{
    return 1 + (int64_t)(rnd() % 30);
}

static int new_input(pl_graph *g, int rank, const int64_t *shape)
{
    char name[16];
    snprintf(name, sizeof name, "in%d", g->nnodes);
    int id = pl_graph_add_input(g, name, EIN_F32, rank, shape, NULL);
    assert_true(id >= 0);
    return id;
}

/* 2 to 7 random operators; the last and sometimes one more are saved. */
static void random_program(pl_graph *g)
{
    int ids[16], n = 0, nops = 2 + (int)(rnd() % 6);
    int64_t sh[2] = {dim(), dim()};
    ids[n++] = new_input(g, rnd() % 2 ? 1 : 2, sh);
    for (int o = 0; o < nops; o++) {
        int x = ids[rnd() % (uint64_t)n], y;
        const pl_node *xn = pl_graph_node(g, x);
        int64_t last = xn->shape[xn->rank - 1];
        char name[16];
        snprintf(name, sizeof name, "op%d", o);
        switch (rnd() % 5) {
        case 0:
            y = pl_graph_add_softmax(g, name, x, (int)(rnd() % (uint64_t)xn->rank), NULL);
            break;
        case 1:
            y = xn->rank == 2 ? pl_graph_add_matmul(g, name, x,
                                                    new_input(g, 2, (int64_t[]){last, dim()}), NULL)
                              : pl_graph_add_unary(g, name, EIN_UN_SILU, 0, x, NULL);
            break;
        case 2:
            y = xn->rank == 2 ? pl_graph_add_reduce(g, name, rnd() % 2 ? EIN_AGG_SUM : EIN_AGG_MAX,
                                                    1u << (rnd() % 2), x, NULL)
                              : pl_graph_add_softmax(g, name, x, 0, NULL);
            break;
        case 3:
            y = pl_graph_add_binary(g, name, EIN_BIN_ADD, x, new_input(g, 1, &last), NULL);
            break;
        default:
            y = pl_graph_add_binary(g, name, EIN_BIN_MUL, x, x, NULL);
            break;
        }
        assert_true(y >= 0);
        ids[n++] = y;
    }
    pl_graph_save(g, ids[n - 1], NULL);
    if (rnd() % 2)
        pl_graph_save(g, ids[1 + rnd() % (uint64_t)(n - 1)], NULL);
}

static void check_lowering(const pl_graph *g, const pl_plan *plan, ein_program **progs, int p)
{
    for (int v = 0; v < g->nnodes; v++) {
        const pl_choice *c = &plan->nodes[v];
        const pl_node *nd = pl_graph_node(g, v);
        if (!c->planned)
            continue;
        int kernels = 0;
        int64_t stored = 0;
        for (int d = 0; d < p; d++)
            for (int i = 0; i < progs[d]->ninstrs; i++) {
                const ein_instr *ins = &progs[d]->instrs[i];
                if (strcmp(ins->op, nd->name))
                    continue;
                if (ins->kind == EIN_I_KERNEL) {
                    kernels++;
                    if (d >= c->spec.nparts)
                        fail_msg("p=%d: %s (%d parts) runs on device %d", p, nd->name,
                                 c->spec.nparts, d);
                    if (!ein_box_equal(&progs[d]->buffers[ins->dst].box, &c->spec.f[d].out))
                        fail_msg("p=%d: %s on device %d writes another box", p, nd->name, d);
                } else if (ins->kind == EIN_I_STORE) {
                    stored += ein_box_volume(&progs[d]->buffers[ins->srcs[0]].box);
                }
            }
        if (kernels != c->spec.nparts)
            fail_msg("p=%d: %s has %d kernels for %d parts", p, nd->name, kernels,
                     c->spec.nparts);
        ein_box whole = ein_box_of_shape(nd->rank, nd->shape);
        if (nd->saved && stored != ein_box_volume(&whole))
            fail_msg("p=%d: %s stores %lld of %lld elements", p, nd->name, (long long)stored,
                     (long long)ein_box_volume(&whole));
    }
}

static void test_random_small_programs_lower(void **state)
{
    (void)state;
    int lowered = 0, small = 0;
    const char *paths[64];
    for (int i = 0; i < 64; i++)
        paths[i] = "out.npy";
    for (int trial = 0; trial < 120; trial++) {
        pl_graph *g = pl_graph_new();
        random_program(g);
        assert_true(g->nnodes <= 64);
        for (int p = 2; p <= 8; p++) {
            pl_plan *plan = NULL;
            ein_error err = {0};
            if (pl_plan_make(g, p, PL_SELECT_DP, 0, &plan, &err) < 0)
                fail_msg("trial %d p=%d: %s", trial, p, err.msg);
            int fewer = 0;
            for (int v = 0; v < g->nnodes; v++)
                fewer |= plan->nodes[v].planned && plan->nodes[v].spec.nparts < p;
            co_physical_opts po = {.ndev = p};
            co_lower_opts o = {.seed = 1, .output_path = paths};
            ein_program **progs = NULL;
            co_physical *ph = NULL;
            if (co_physical_make(g, plan, &po, &ph, &err) < 0 ||
                co_pipeline_programs(g, plan, ph, &o, &progs, NULL, &err) < 0)
                fail_msg("trial %d p=%d: lowering failed: %s", trial, p, err.msg);
            co_physical_free(ph);
            check_lowering(g, plan, progs, p);
            co_programs_free(progs, p);
            pl_plan_free(plan);
            lowered++;
            small += fewer;
        }
        pl_graph_free(g);
    }
    printf("# lowered %d plans, %d of them with operators on fewer than P devices\n", lowered,
           small);
    assert_true(small > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_small_programs_lower),
    };
    return cmocka_run_group_tests_name("co_lower_small", tests, NULL, NULL);
}
