/* tests/coordinator/test_co_lower_large.c — lowering large programs.
 *
 * A 20,000-operator chain and a model of 400 identical layers are planned
 * and lowered with exchange search on; the checks count work (instructions,
 * exchanges searched, copied, local), never time: an exchange that moves
 * nothing is not searched, and identical exchanges are searched once. A
 * program too large for one PROGRAM message fails with EIN_ELIMIT. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "coordinator/compile/co_lower.h"
#include "coordinator/compile/co_pipeline.h"
#include "exchange/xp_topo.h"
#include "planner/pl_parse.h"

/* `x0` then N operators x_i = relu(x_{i-1}), save x_N. */
static char *relu_chain(int n)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    fprintf(f, "dims a=64 b=32\ninput x0[a, b]\n");
    for (int i = 1; i <= n; i++)
        fprintf(f, "x%d = relu(x%d)\n", i, i - 1);
    fprintf(f, "save x%d\n", n);
    fclose(f);
    return buf;
}

/* `layers` FFN layers sharing their weights, save the last. */
static char *ffn_layers(int layers)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    fprintf(f, "dims t=37 d=24 f=50\ninput x0[t, d]\ninput w1[d, f]\ninput w2[f, d]\n");
    for (int l = 1; l <= layers; l++)
        fprintf(f, "a%d = matmul(x%d, w1)\nh%d = relu(a%d)\nx%d = matmul(h%d, w2)\n", l, l - 1,
                l, l, l, l);
    fprintf(f, "save x%d\n", layers);
    fclose(f);
    return buf;
}

typedef struct lowered {
    pl_graph *g;
    pl_plan *plan;
    xp_topology *topo;
    const char **in, **out;
    ein_program **progs;
    co_lower_stats st;
    int rc;
    ein_error err;
} lowered;

static void lower(lowered *L, const char *text, int ndev, long long max_bytes)
{
    memset(L, 0, sizeof *L);
    ein_error err = {0};
    if (pl_ein_parse("test.ein", text, strlen(text), &L->g, &err) < 0)
        fail_msg("parse: %s", err.msg);
    if (pl_plan_make(L->g, ndev, PL_SELECT_DP, 1, &L->plan, &err) < 0)
        fail_msg("plan: %s", err.msg);
    if (xp_topo_load("dgx-a100", &L->topo, &err) < 0)
        fail_msg("topology: %s", err.msg);
    L->in = calloc((size_t)L->g->nnodes, sizeof *L->in);
    L->out = calloc((size_t)L->g->nnodes, sizeof *L->out);
    assert_non_null(L->in);
    assert_non_null(L->out);
    for (int v = 0; v < L->g->nnodes; v++)
        if (pl_graph_node(L->g, v)->saved)
            L->out[v] = "unused.npy";
    co_physical_opts po = {.ndev = ndev, .topo = L->topo, .search = 1};
    xp_search_opts_default(&po.search_opts);
    po.search_opts.cap_ms = 0;          /* work budgets only: no wall-clock cap */
    po.search_opts.max_steps = 200;
    po.search_opts.patience = 100;
    co_lower_opts o = {.seed = 1, .input_path = L->in, .output_path = L->out,
                       .max_program_bytes = max_bytes};
    co_physical *ph = NULL;
    L->rc = co_physical_make(L->g, L->plan, &po, &ph, &L->err);
    if (L->rc == 0)
        L->rc = co_pipeline_programs(L->g, L->plan, ph, &o, &L->progs, &L->st, &L->err);
    co_physical_free(ph);
}

static void lowered_free(lowered *L)
{
    if (L->rc == 0)
        co_programs_free(L->progs, L->plan->p);
    free(L->in);
    free(L->out);
    xp_topo_free(L->topo);
    pl_plan_free(L->plan);
    pl_graph_free(L->g);
}

enum { CHAIN = 20000 };

static void chain_20000(void **s)
{
    (void)s;
    char *text = relu_chain(CHAIN);
    for (int ndev = 1; ndev <= 2; ndev++) {
        lowered L;
        lower(&L, text, ndev, 0);
        if (L.rc < 0)
            fail_msg("lowering on %d devices: %s", ndev, L.err.msg);
        /* Every operator keeps the layout: one kernel per device each, and
         * exchanges that move nothing, none of them searched. */
        assert_int_equal(L.st.nexchanges, CHAIN);
        assert_int_equal(L.st.nlocal, CHAIN);
        assert_int_equal(L.st.nsearched, 0);
        assert_int_equal(L.st.ncopies, 0);
        for (int d = 0; d < ndev; d++) {
            const ein_program *p = L.progs[d];
            int kernels = 0, loads = 0, stores = 0;
            for (int i = 0; i < p->ninstrs; i++) {
                kernels += p->instrs[i].kind == EIN_I_KERNEL;
                loads += p->instrs[i].kind == EIN_I_LOAD;
                stores += p->instrs[i].kind == EIN_I_STORE;
            }
            assert_int_equal(kernels, CHAIN);
            assert_int_equal(loads, 1);
            assert_int_equal(stores, 1);
            assert_int_equal(p->ninstrs, CHAIN + 2);
        }
        lowered_free(&L);
    }
    free(text);
}

enum { LAYERS = 400 };

static void identical_layers_searched_once(void **s)
{
    (void)s;
    char *text = ffn_layers(LAYERS);
    for (int ndev = 2; ndev <= 4; ndev++) {
        lowered L;
        lower(&L, text, ndev, 0);
        if (L.rc < 0)
            fail_msg("lowering on %d devices: %s", ndev, L.err.msg);
        assert_int_equal(L.st.nsearched + L.st.nreused + L.st.nlocal, L.st.nexchanges);
        assert_true(L.st.ncopies > 0);   /* the layers do move data */
        /* The first layers differ (inputs come from LOAD), the rest repeat. */
        if (L.st.nsearched > 8)
            fail_msg("%d devices: %d exchanges searched for %d identical layers (%d copied)",
                     ndev, L.st.nsearched, LAYERS, L.st.nreused);
        assert_true(L.st.nreused >= LAYERS - 8);
        lowered_free(&L);
    }
    free(text);
}

static void too_large_is_elimit(void **s)
{
    (void)s;
    char *text = ffn_layers(3);
    lowered L;
    lower(&L, text, 3, 512);
    assert_int_equal(L.rc, EIN_ELIMIT);
    assert_non_null(strstr(L.err.msg, "does not fit in one message of at most 512 bytes"));
    lowered_free(&L);
    /* The same program under the real limit is fine. */
    lower(&L, text, 3, 0);
    assert_int_equal(L.rc, 0);
    lowered_free(&L);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(chain_20000),
        cmocka_unit_test(identical_layers_searched_once),
        cmocka_unit_test(too_large_is_elimit),
    };
    return cmocka_run_group_tests_name("co_lower", tests, NULL, NULL);
}
