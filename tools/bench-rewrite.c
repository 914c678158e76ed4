/* tools/bench-rewrite.c — time the rewrite stage (docs/rewrite.md).
 *
 *   tools/bench-rewrite [--k-multi K] [--launch-us U] [--ilp] [PATH-TO-EINGEN]
 *                                                   (default ./eingen)
 *
 * Workloads: the 13-matrix chain E written left-deep (built here), and,
 * through eingen, the LLaMA block (8x1K) and a 4-block stack (every input
 * but x is a weight). For each: saturation and extraction time, e-graph
 * size, stop reason, roofline cost before/after (H100 figures) and matmul
 * count. Built by `make check`, not run by it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/io/ein_file.h"
#include "planner/pl_parse.h"
#include "planner/rewrite/pl_rewrite.h"

static pl_graph *chain_e(void)
{
    static const int64_t d[] = {49152, 1024, 20480, 20480, 20480, 20480, 20480, 20480,
                                20480, 20480, 20480, 20480, 1024, 49152};
    ein_error err = {0};
    pl_graph *g = pl_graph_new();
    int acc = -1;
    for (int i = 0; i < 13; i++) {
        char name[16];
        int64_t s[2] = {d[i], d[i + 1]};
        snprintf(name, sizeof name, "M%d", i + 1);
        int id = pl_graph_add_input(g, name, EIN_F16, 2, s, &err);
        if (i > 0) {
            snprintf(name, sizeof name, "P%d", i);
            id = pl_graph_add_matmul(g, name, acc, id, &err);
        }
        acc = id;
    }
    pl_graph_save(g, acc, &err);
    return g;
}

static pl_graph *from_eingen(const char *cmd)
{
    FILE *f = popen(cmd, "r");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t n = 0;
    ein_error err = {0};
    int rc = ein_file_read_stream(f, SIZE_MAX - 1, cmd, &buf, &n, &err);
    int st = pclose(f);
    pl_graph *g = NULL;
    if (rc == 0 && st == 0 && pl_ein_parse(cmd, buf, n, &g, &err) < 0)
        fprintf(stderr, "bench-rewrite: %s\n", err.msg);
    free(buf);
    return g;
}

static int count_kind(const pl_graph *g, pl_node_kind k)
{
    int c = 0;
    for (int i = 0; i < g->nnodes; i++)
        c += g->nodes[i].kind == k;
    return c;
}

static void bench(const char *what, pl_graph *g, pl_rewrite_opts *o, int chain)
{
    const char **w = calloc((size_t)g->nnodes + 1, sizeof *w);
    int nw = 0;
    for (int i = 0; i < g->nnodes && !chain; i++)
        if (g->nodes[i].kind == PL_INPUT && strcmp(g->nodes[i].name, "x") != 0)
            w[nw++] = g->nodes[i].name;
    o->weights = chain ? NULL : w;
    pl_graph *out = NULL;
    pl_rewrite_stats st;
    ein_error err = {0};
    if (pl_rewrite(g, o, &out, &st, &err) < 0) {
        printf("%-14s error: %s\n", what, err.msg);
        free(w);
        return;
    }
    printf("%-14s %5d nodes  %-10s %3d iters  %6d e-nodes %5d e-classes  saturate %8.2f ms"
           "  extract %8.2f ms  cost %9.1f -> %9.1f us  matmuls %d -> %d\n",
           what, g->nnodes, pl_rewrite_stop_name(st.stop), st.iterations, st.enodes, st.eclasses,
           1e3 * st.saturate_s, 1e3 * st.extract_s, 1e6 * st.cost_before, 1e6 * st.cost_after,
           count_kind(g, PL_EINSUM), count_kind(out, PL_EINSUM));
    if (o->ilp)
        printf("%-14s ILP: %s, %s greedy + local search\n", "",
               st.ilp_optimal ? "proved optimal" : "not proved optimal (time limit)",
               st.ilp_improved ? "beat" : "did not beat");
    if (chain) {
        char buf[512];
        for (int i = 0; i < out->nnodes; i++)
            if (out->nodes[i].saved && pl_rewrite_expr(out, i, buf, sizeof buf) == 0)
                printf("%-14s order: %s  (GFLOP %.1f -> %.1f)\n", "", buf,
                       st.flops_before / 1e9, st.flops_after / 1e9);
    }
    pl_graph_free(out);
    free(w);
}

int main(int argc, char **argv)
{
    const char *eingen = "./eingen";
    pl_rewrite_opts o = {.launch_s = 5e-6};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--k-multi") == 0 && i + 1 < argc)
            o.k_multi = atoi(argv[++i]);
        else if (strcmp(argv[i], "--ilp") == 0)
            o.ilp = 1;
        else if (strcmp(argv[i], "--launch-us") == 0 && i + 1 < argc)
            o.launch_s = atof(argv[++i]) * 1e-6;
        else
            eingen = argv[i];
    }
    printf("roofline: 989 TFLOP/s, 3.35 TB/s, launch %.1f us; k_multi %d%s\n", o.launch_s * 1e6,
           o.k_multi ? o.k_multi : 1, o.ilp ? "; ILP (CBC)" : "");
    pl_graph *g = chain_e();
    bench("chain E (13)", g, &o, 1);
    pl_graph_free(g);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "%s llama --seqs 8 --tokens 1024", eingen);
    if ((g = from_eingen(cmd))) {
        bench("llama block", g, &o, 0);
        pl_graph_free(g);
    } else
        printf("llama block    skipped: cannot run %s\n", cmd);
    snprintf(cmd, sizeof cmd, "%s llama --seqs 8 --tokens 1024 --blocks 4", eingen);
    if ((g = from_eingen(cmd))) {
        bench("4-block stack", g, &o, 0);
        pl_graph_free(g);
    } else
        printf("4-block stack  skipped: cannot run %s\n", cmd);
    return 0;
}
