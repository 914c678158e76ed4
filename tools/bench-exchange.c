/* tools/bench-exchange.c — exchange synthesis and simulator benchmark.
 *
 *   make tools/bench-exchange && tools/bench-exchange [--work N] [--seed S]
 *
 * 1. Synthesis time (default search budget unless --work) for 8-GPU
 *    preambles of 8, 32 and 64 atoms, on dgx-v100 and dgx-a100: a producer
 *    with four row blocks, each left as two partial copies (a contracted
 *    index split in two) on GPUs 0..7, and a consumer wanting k row blocks
 *    (k = atoms) spread round-robin over the GPUs; fp16 blocks of 1 GB in
 *    total per producer block.
 * 2. The paper's all-reduce of eight 1 GB atoms on dgx-v100 and dgx-a100.
 * 3. Simulator throughput: the naive program of the 64-atom preamble,
 *    simulated repeatedly; actions (and flow completions) per second.
 * 0. Collectives (also alone with --collectives): all-reduce,
 *    reduce-scatter, all-gather and all-to-all at 1 GB and 1 MB per GPU on
 *    dgx-v100, dgx-a100, dgx-h100 and gb200-nvl72 (all 72 GPUs): naive,
 *    the best baseline (ring, tree, direct at their best pipeline depth),
 *    synthesised (default budget, chunks allowed), the lower bound, and
 *    synthesised / bound, with the synthesis CPU time (--machine M: one
 *    machine only; --kind K: one collective only, e.g. all-gather;
 *    --no-baseline: skip the baselines column, to time synthesis alone). Sizes per GPU: an
 *    all-reduce sums n blocks of S; a reduce-scatter n blocks of S split in
 *    n atoms, atom j to GPU j; an all-gather gives every GPU n atoms of
 *    S/n; an all-to-all sends S/n from every GPU to every other.
 * Built by `make check` so it keeps compiling; never run by it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/base/ein_clock.h"
#include "exchange/xp_atoms.h"
#include "exchange/xp_baseline.h"
#include "exchange/xp_bound.h"
#include "exchange/xp_naive.h"
#include "exchange/xp_search.h"
#include "exchange/xp_sim.h"

static double now_ms(void) { return ein_now_s() * 1e3; }

static ein_box rows(int64_t lo, int64_t hi, int64_t cols)
{
    ein_box b;
    memset(&b, 0, sizeof b);
    b.rank = 2;
    b.lo[0] = lo, b.hi[0] = hi, b.hi[1] = cols;
    return b;
}

static xp_program *preamble(int k)
{
    int64_t R = 4096, C = 131072; /* 4 blocks of 1024 x 131072 fp16 = 268 MB */
    ein_box have[8], need[64];
    int hs[8], ns[64];
    for (int i = 0; i < 8; i++) {
        have[i] = rows(R * (i / 2) / 4, R * (i / 2 + 1) / 4, C);
        hs[i] = i;
    }
    for (int i = 0; i < k; i++) {
        need[i] = rows(R * i / k, R * (i + 1) / k, C);
        ns[i] = (i * 3 + 1) % 8;
    }
    ein_box *atoms;
    int na;
    xp_program *p = NULL;
    ein_error err = {0};
    if (xp_preamble_make(have, hs, 8, need, ns, k, 2, 8, &atoms, &na, &p, &err) < 0) {
        fprintf(stderr, "bench-exchange: %s\n", err.msg);
        exit(1);
    }
    free(atoms);
    return p;
}

static double cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* A collective over n GPUs, S bytes per GPU (see the header). */
static xp_program *collective(int kind, int n, double S)
{
    xp_program *p = NULL;
    ein_error err = {0};
    if (xp_collective_preamble((xp_coll_kind)kind, n, S, &p, &err) < 0)
        fprintf(stderr, "bench-exchange: %s\n", err.msg);
    return p;
}

static int bench_collectives(const xp_search_opts *o0, const char *only, const char *kind,
                             int no_base)
{
    static const char *machines[] = {"dgx-v100", "dgx-a100", "dgx-h100", "gb200-nvl72"};
    static const char *kinds[] = {"all-reduce", "reduce-scatter", "all-gather", "all-to-all"};
    static const double sizes[] = {1e9, 1e6};
    xp_search_opts o = *o0;
    o.chunks = 1;
    ein_error err = {0};
    printf("collectives (ms; synthesis: default budget, chunks, seed %llu; CPU ms)\n",
           (unsigned long long)o.seed);
    printf("%-12s %-15s %5s %10s %10s %-12s %10s %10s %7s %8s\n", "topology", "collective",
           "size", "naive", "baseline", "(which)", "synth", "bound", "s/bound", "synth-ms");
    for (int m = 0; m < 4; m++) {
        xp_topology *t = NULL;
        if (only && strcmp(only, machines[m]) != 0)
            continue;
        if (xp_topo_load(machines[m], &t, &err) < 0)
            return fprintf(stderr, "%s\n", err.msg), 1;
        for (int k = 0; k < 4; k++)
            for (int z = 0; z < 2; z++) {
                if (kind && strcmp(kind, kinds[k]) != 0)
                    continue;
                xp_program *pre = collective(k, t->ngpus, sizes[z]), *naive = NULL, *out = NULL;
                double naive_s, base_s = INFINITY, s;
                char which[32] = "-";
                xp_bound b;
                if (!pre || xp_search_naive(pre, t, &naive, &naive_s, &err) < 0 ||
                    xp_bound_compute(pre, t, &b, &err) < 0)
                    return fprintf(stderr, "%s\n", err.msg), 1;
                for (int bk = XP_BASE_RING; !no_base && bk <= XP_BASE_DIRECT; bk++) {
                    xp_program *q = NULL;
                    int pipe;
                    if (xp_baseline_best(pre, t, (xp_base_kind)bk, &q, &s, &pipe, &err) < 0)
                        continue;
                    if (s < base_s) {
                        base_s = s;
                        snprintf(which, sizeof which, "%s x%d", xp_base_name(bk), pipe);
                    }
                    xp_program_free(q);
                }
                xp_search_stats st;
                double c0 = cpu_ms();
                if (xp_search(pre, t, &o, &out, &st, &err) < 0)
                    return fprintf(stderr, "%s\n", err.msg), 1;
                double dt = cpu_ms() - c0;
                printf("%-12s %-15s %5s %10.4f %10.4f %-12s %10.4f %10.4f %7.3f %8.1f%s\n",
                       machines[m], kinds[k], z ? "1MB" : "1GB", naive_s * 1e3, base_s * 1e3,
                       which, st.best_s * 1e3, b.seconds * 1e3, st.best_s / b.seconds, dt,
                       xp_program_chunked(out) ? " chunked" : "");
                fflush(stdout);
                xp_program_free(out);
                xp_program_free(naive);
                xp_program_free(pre);
            }
        xp_topo_free(t);
    }
    return 0;
}

int main(int argc, char **argv)
{
    xp_search_opts o;
    xp_search_opts_default(&o);
    int only_coll = 0, no_base = 0;
    const char *only = NULL, *kind = NULL;
    for (int i = 1; i < argc; i += 2) {
        if (strcmp(argv[i], "--collectives") == 0 || strcmp(argv[i], "--no-baseline") == 0) {
            if (argv[i][2] == 'c')
                only_coll = 1;
            else
                no_base = 1;
            i--;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "usage: bench-exchange [--collectives] [--machine M] [--kind K] [--no-baseline] [--work N] [--seed S]\n");
            return 2;
        }
        if (strcmp(argv[i], "--machine") == 0)
            only = argv[i + 1];
        else if (strcmp(argv[i], "--kind") == 0)
            kind = argv[i + 1];
        else if (strcmp(argv[i], "--work") == 0)
            o.max_work = atol(argv[i + 1]);
        else if (strcmp(argv[i], "--seed") == 0)
            o.seed = strtoull(argv[i + 1], NULL, 10);
        else {
            fprintf(stderr, "usage: bench-exchange [--collectives] [--machine M] [--kind K] [--no-baseline] [--work N] [--seed S]\n");
            return 2;
        }
    }
    if (bench_collectives(&o, only, kind, no_base) != 0)
        return 1;
    if (only_coll)
        return 0;
    const char *machines[] = {"dgx-v100", "dgx-a100"};
    ein_error err = {0};
    printf("synthesis (work %ld, at most %ld steps, patience %ld, cap %.0f ms, seed %llu)\n",
           o.max_work, o.max_steps, o.patience, o.cap_ms, (unsigned long long)o.seed);
    printf("%-10s %6s %4s %8s %10s %12s %12s %8s\n", "topology", "atoms", "IN", "actions",
           "time ms", "naive ms", "synth ms", "gain");
    for (int m = 0; m < 2; m++) {
        xp_topology *t = NULL;
        if (xp_topo_load(machines[m], &t, &err) < 0)
            return fprintf(stderr, "%s\n", err.msg), 1;
        static const int sizes[] = {8, 32, 64};
        for (int s = 0; s < 3; s++) {
            xp_program *pre = preamble(sizes[s]), *out = NULL;
            xp_search_stats st;
            double t0 = now_ms();
            if (xp_search(pre, t, &o, &out, &st, &err) < 0)
                return fprintf(stderr, "%s\n", err.msg), 1;
            double dt = now_ms() - t0;
            printf("%-10s %6d %4d %8d %10.1f %12.3f %12.3f %7.2fx\n", machines[m], sizes[s],
                   pre->nin, out->nact, dt, st.naive_s * 1e3, st.best_s * 1e3,
                   st.naive_s / st.best_s);
            xp_program_free(out);
            xp_program_free(pre);
        }
        /* All-reduce of eight 1 GB atoms. */
        xp_program *ar = NULL, *out = NULL;
        if (xp_program_parse("IN: A @ 0; B @ 1; C @ 2; D @ 3; E @ 4; F @ 5; G @ 6; H @ 7\n"
                             "OUT: A+B+C+D+E+F+G+H @ 0, 1, 2, 3, 4, 5, 6, 7\n",
                             "allreduce", &ar, &err) < 0)
            return fprintf(stderr, "%s\n", err.msg), 1;
        xp_search_stats st;
        double t0 = now_ms();
        if (xp_search(ar, t, &o, &out, &st, &err) < 0)
            return fprintf(stderr, "%s\n", err.msg), 1;
        printf("%-10s %11s %8d %10.1f %12.3f %12.3f %7.2fx\n", machines[m], "all-reduce",
               out->nact, now_ms() - t0, st.naive_s * 1e3, st.best_s * 1e3,
               st.naive_s / st.best_s);
        xp_program_free(out);
        xp_program_free(ar);
        xp_topo_free(t);
    }

    xp_topology *t = NULL;
    xp_topo_load("dgx-v100", &t, &err);
    xp_program *p = preamble(64);
    xp_naive_synthesize(p, &err);
    long runs = 0, events = 0;
    double t0 = now_ms(), ms;
    while (now_ms() - t0 < 1000) {
        xp_timeline *tl = NULL;
        if (xp_sim_run(p, t, &ms, &tl, &err) < 0)
            return fprintf(stderr, "%s\n", err.msg), 1;
        events += tl->events;
        xp_timeline_free(tl);
        runs++;
    }
    double secs = (now_ms() - t0) / 1e3;
    printf("simulator: %d actions per program, %ld runs in %.2f s: %.0f actions/s, "
           "%.0f flow completions/s\n",
           p->nact, runs, secs, runs * (double)p->nact / secs, events / secs);
    xp_program_free(p);
    xp_topo_free(t);
    return 0;
}
