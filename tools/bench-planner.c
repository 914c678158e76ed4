/* tools/bench-planner.c — planning time of the paper's block workloads.
 *
 *   tools/bench-planner [PATH-TO-EINGEN]      (default ./eingen)
 *
 * Generates the paper's block workloads (1x1K, 1x8K, 1x128K, 8x1K,
 * 128x1K), 32-block stacks and the chains A..E with eingen, and plans each
 * (dp) at P = 8 and P = 72, printing the best of 3 wall-clock planning
 * times (parsing excluded, shown apart). A workload with no plan at some P
 * (one sequence cannot be split 72 ways) prints the planner's message.
 * Targets on a 2-core machine: one block at P=8 under 20 ms; 32 blocks at
 * P=72 under 2 s. Not run by `make check`. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/base/ein_clock.h"
#include "common/io/ein_file.h"
#include "planner/pl_optimize.h"
#include "planner/pl_parse.h"

static double now(void) { return ein_now_s(); }

/* Run `cmd` (an eingen command line) and read its program. */
static char *slurp(const char *cmd, size_t *len)
{
    FILE *f = popen(cmd, "r");
    if (!f)
        return NULL;
    char *buf = NULL;
    int rc = ein_file_read_stream(f, SIZE_MAX - 1, cmd, &buf, len, NULL);
    if (pclose(f) != 0 || rc < 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

static void bench(const char *eingen, const char *args, const char *label, int p)
{
    char cmd[512];
    size_t len;
    snprintf(cmd, sizeof cmd, "%s %s", eingen, args);
    char *text = slurp(cmd, &len);
    if (!text) {
        printf("%-22s P=%-3d  cannot run '%s'\n", label, p, cmd);
        return;
    }
    ein_error err = {0};
    pl_graph *g = NULL;
    double t0 = now();
    if (pl_ein_parse(label, text, len, &g, &err) < 0) {
        printf("%-22s P=%-3d  parse error: %s\n", label, p, err.msg);
        free(text);
        return;
    }
    double tparse = now() - t0, best = 1e30, total = 0;
    int ok = 1;
    for (int rep = 0; rep < 3 && ok; rep++) {
        pl_plan *plan = NULL;
        double t = now();
        if (pl_plan_make(g, p, PL_SELECT_DP, 0, &plan, &err) < 0) {
            printf("%-22s P=%-3d  no plan: %s\n", label, p, err.msg);
            ok = 0;
            break;
        }
        t = now() - t;
        best = t < best ? t : best;
        total = plan->total;
        pl_plan_free(plan);
    }
    if (ok)
        printf("%-22s P=%-3d  %5d nodes  plan %9.2f ms  (parse %6.2f ms)  cost %.4g\n", label, p,
               g->nnodes, best * 1e3, tparse * 1e3, total);
    pl_graph_free(g);
    free(text);
}

int main(int argc, char **argv)
{
    const char *eingen = argc > 1 ? argv[1] : "./eingen";
    static const struct {
        const char *args, *label;
    } w[] = {
        {"llama --seqs 1 --tokens 1024", "llama 1x1K"},
        {"llama --seqs 1 --tokens 8192", "llama 1x8K"},
        {"llama --seqs 1 --tokens 131072", "llama 1x128K"},
        {"llama --seqs 8 --tokens 8192", "llama 8x1K"},
        {"llama --seqs 128 --tokens 131072", "llama 128x1K"},
        {"llama --seqs 128 --tokens 131072 --blocks 32", "32 blocks 128x1K"},
        {"llama --seqs 1 --tokens 131072 --blocks 32", "32 blocks 1x128K"},
        {"chain A", "chain A"},
        {"chain B", "chain B"},
        {"chain C", "chain C"},
        {"chain D", "chain D"},
        {"chain E", "chain E"},
    };
    int ps[2] = {8, 72};
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
        for (int j = 0; j < 2; j++)
            bench(eingen, w[i].args, w[i].label, ps[j]);
    return 0;
}
