/* tools/bench-hier.c — exchanges across hosts: the two-level model's targets.
 *
 *   make tools/bench-hier && tools/bench-hier [--machine 2x8|4x8|16x8] [--no-flat]
 *
 * An all-reduce of S per GPU (S = 1 GB and 1 MB) on N x dgx-h100 (the
 * built-in `Nx-dgx-h100`: NVLink 450 GB/s per GPU and direction, NIC
 * 50 GB/s per GPU and direction, alpha 6 us inside a host and 10 us
 * between hosts) for N = 2, 4 and 16 hosts of 8 GPUs. Prints the lower
 * bound (xp_bound), naive, every baseline at its best pipeline depth
 * (ring: NCCL's multi-ring, one ring per rail; hier: reduce-scatter inside,
 * all-reduce per rail across, all-gather inside, pipelined), the
 * synthesised program (default budget, chunks allowed) with its CPU time,
 * and the ratios the targets are stated in: synthesised / bound, flat ring
 * / synthesised, synthesised / naive and / best baseline. --no-flat skips
 * the flat baselines (ring, tree, direct) on 16 x 8, whose generation and
 * simulation over 128 GPUs take tens of seconds.
 * Built by `make check` so it keeps compiling; never run by it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exchange/xp_baseline.h"
#include "exchange/xp_bound.h"
#include "exchange/xp_naive.h"
#include "exchange/xp_program.h"
#include "exchange/xp_search.h"
#include "exchange/xp_sim.h"
#include "exchange/xp_topo.h"

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int row(const char *topo, double S, int flat)
{
    ein_error err = {0};
    xp_topology *t = NULL;
    xp_program *pre = NULL, *naive = NULL, *out = NULL;
    int rc;
    if ((rc = xp_topo_load(topo, &t, &err)) < 0 ||
        (rc = xp_collective_preamble(XP_COLL_ALLREDUCE, t->ngpus, S, &pre, &err)) < 0)
        goto fail;
    xp_bound b;
    double naive_s = 0;
    if ((rc = xp_bound_compute(pre, t, &b, &err)) < 0 ||
        (rc = xp_search_naive(pre, t, &naive, &naive_s, &err)) < 0)
        goto fail;
    printf("%s, all-reduce of %g MB per GPU (%d GPUs)\n", topo, S / 1e6, t->ngpus);
    printf("  bound        %9.3f ms  (per-GPU %.3f, volume %.3f, host volume %.3f, host cut "
           "%.3f, latency %.3f)\n", b.seconds * 1e3, b.per_gpu * 1e3, b.volume * 1e3,
           b.host_volume * 1e3, b.host_cut * 1e3, b.latency * 1e3);
    printf("  naive        %9.3f ms\n", naive_s * 1e3);
    double base[4] = {INFINITY, INFINITY, INFINITY, INFINITY}, best_base = INFINITY;
    for (int k = XP_BASE_RING; k <= XP_BASE_HIER; k++) {
        if (!flat && k != XP_BASE_HIER) {
            printf("  %-6s       (skipped: --no-flat)\n", xp_base_name((xp_base_kind)k));
            continue;
        }
        xp_program *q = NULL;
        double s = 0;
        int pipe = 0;
        double c0 = cpu_s();
        if (xp_baseline_best(pre, t, (xp_base_kind)k, &q, &s, &pipe, &err) < 0) {
            printf("  %-6s       (none: %s)\n", xp_base_name((xp_base_kind)k), err.msg);
            continue;
        }
        base[k] = s;
        if (s < best_base)
            best_base = s;
        printf("  %-6s     %9.3f ms  (pipeline %d; %.2f s CPU)\n", xp_base_name((xp_base_kind)k),
               s * 1e3, pipe, cpu_s() - c0);
        xp_program_free(q);
    }
    xp_search_opts o;
    xp_search_opts_default(&o);
    o.chunks = 1;
    xp_search_stats st;
    double c0 = cpu_s();
    if ((rc = xp_search(pre, t, &o, &out, &st, &err)) < 0)
        goto fail;
    double synth_cpu = cpu_s() - c0;
    printf("  synthesised  %9.3f ms  (%.2f s CPU, work %ld, stop: %s)\n", st.best_s * 1e3,
           synth_cpu, st.work, st.stop);
    printf("  synth/bound %.3f", st.best_s / b.seconds);
    if (isfinite(base[XP_BASE_RING]))
        printf("  ring/synth %.3f", base[XP_BASE_RING] / st.best_s);
    printf("  synth/naive %.3f", st.best_s / naive_s);
    if (isfinite(best_base))
        printf("  synth/best-baseline %.3f", st.best_s / best_base);
    printf("\n\n");
    fflush(stdout);
    xp_program_free(out);
    xp_program_free(naive);
    xp_program_free(pre);
    xp_topo_free(t);
    return 0;
fail:
    fprintf(stderr, "bench-hier: %s: %s\n", topo, err.msg);
    xp_program_free(out);
    xp_program_free(naive);
    xp_program_free(pre);
    xp_topo_free(t);
    return 1;
}

int main(int argc, char **argv)
{
    const char *only = NULL;
    int flat = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--machine") == 0 && i + 1 < argc)
            only = argv[++i];
        else if (strcmp(argv[i], "--no-flat") == 0)
            flat = 0;
        else {
            fprintf(stderr, "usage: bench-hier [--machine 2x8|4x8|16x8] [--no-flat]\n");
            return 2;
        }
    }
    static const struct {
        const char *key, *topo;
    } m[] = {{"2x8", "2x-dgx-h100"}, {"4x8", "4x-dgx-h100"}, {"16x8", "16x-dgx-h100"}};
    int bad = 0;
    for (size_t i = 0; i < sizeof m / sizeof *m; i++) {
        if (only && strcmp(only, m[i].key) != 0)
            continue;
        bad |= row(m[i].topo, 1e9, flat);
        bad |= row(m[i].topo, 1e6, flat);
    }
    return bad;
}
