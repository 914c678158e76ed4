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
 * Built by `make check` so it keeps compiling; never run by it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/ein_clock.h"
#include "exchange/xp_atoms.h"
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

int main(int argc, char **argv)
{
    xp_search_opts o;
    xp_search_opts_default(&o);
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--work") == 0)
            o.max_work = atol(argv[i + 1]);
        else if (strcmp(argv[i], "--seed") == 0)
            o.seed = strtoull(argv[i + 1], NULL, 10);
        else {
            fprintf(stderr, "usage: bench-exchange [--work N] [--seed S]\n");
            return 2;
        }
    }
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
