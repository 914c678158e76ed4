/* tools/exprog.c — check, simulate and synthesise ExProg exchange programs.
 *
 *   exprog check FILE
 *   exprog simulate --topology T [--trace out.json] [--quiet] FILE
 *   exprog synth --topology T [--budget-ms N] [--steps N] [--seed S]
 *                [--trace out.json] FILE
 *
 * T is a built-in machine (dgx-a100, dgx-h100, hgx-h200, dgx-v100,
 * gb200-nvl72, host) or a topology file. `simulate` prints the timeline;
 * its last line is `makespan: X ms`. `synth` reads a preamble (actions in
 * the file are ignored), prints the synthesised program, the naive
 * program's makespan and, last, its own. Exit status: 0 ok, 1 invalid
 * program or failure, 2 usage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exchange/xp_program.h"
#include "exchange/xp_search.h"
#include "exchange/xp_sim.h"
#include "exchange/xp_topo.h"

static int usage(void)
{
    fprintf(stderr,
            "usage: exprog check FILE\n"
            "       exprog simulate --topology T [--trace OUT.json] [--quiet] FILE\n"
            "       exprog synth --topology T [--work N | --steps N] [--patience N]\n"
            "                    [--cap-ms N] [--seed S] [--trace OUT.json] FILE\n"
            "topologies: dgx-a100, dgx-h100, hgx-h200, dgx-v100, gb200-nvl72, host, or a "
            "file\n");
    return 2;
}

static int write_trace(const char *path, const xp_program *p, const xp_topology *t)
{
    xp_timeline *tl = NULL;
    double ms;
    ein_error err = {0};
    if (xp_sim_run(p, t, &ms, &tl, &err) < 0) {
        fprintf(stderr, "exprog: %s\n", err.msg);
        return 1;
    }
    FILE *f = fopen(path, "w");
    int rc = !f || xp_timeline_write_trace(p, t, tl, f) < 0;
    if (f && fclose(f) != 0)
        rc = 1;
    if (rc)
        fprintf(stderr, "exprog: cannot write %s\n", path);
    xp_timeline_free(tl);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage();
    const char *cmd = argv[1], *topo = NULL, *trace = NULL, *file = NULL;
    xp_search_opts opts;
    xp_search_opts_default(&opts);
    int quiet = 0, work_set = 0, steps_set = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--topology") == 0 && v)
            topo = v, i++;
        else if (strcmp(a, "--trace") == 0 && v)
            trace = v, i++;
        else if (strcmp(a, "--cap-ms") == 0 && v)
            opts.cap_ms = atof(v), i++;
        else if (strcmp(a, "--budget-ms") == 0) {
            fprintf(stderr, "exprog: --budget-ms is gone: the budget counts work (--work N, "
                            "default %d, or --steps N candidates); --cap-ms N is a wall-clock "
                            "safety cap\n", XP_SEARCH_DEFAULT_WORK);
            return 2;
        }
        else if (strcmp(a, "--work") == 0 && v)
            opts.max_work = atol(v), work_set = 1, i++;
        else if (strcmp(a, "--steps") == 0 && v)
            opts.max_steps = atol(v), steps_set = 1, i++;
        else if (strcmp(a, "--patience") == 0 && v)
            opts.patience = atol(v), i++;
        else if (strcmp(a, "--seed") == 0 && v)
            opts.seed = strtoull(v, NULL, 10), i++;
        else if (strcmp(a, "--quiet") == 0)
            quiet = 1;
        else if (a[0] == '-' && a[1])
            return usage();
        else if (!file)
            file = a;
        else
            return usage();
    }
    if (!file)
        return usage();
    if (steps_set && !work_set) /* a budget in candidates instead of work */
        opts.max_work = 0;
    int is_check = strcmp(cmd, "check") == 0, is_sim = strcmp(cmd, "simulate") == 0,
        is_synth = strcmp(cmd, "synth") == 0;
    if (!is_check && !is_sim && !is_synth)
        return usage();
    if (!is_check && !topo)
        return usage();

    ein_error err = {0};
    xp_program *p = NULL, *w = NULL, *best = NULL;
    xp_topology *t = NULL;
    int rc = 1;
    if (xp_program_parse_file(file, &p, &err) < 0) {
        fprintf(stderr, "%s\n", err.msg);
        goto done;
    }
    if (topo && xp_topo_load(topo, &t, &err) < 0) {
        fprintf(stderr, "exprog: %s\n", err.msg);
        goto done;
    }
    if (is_check || is_sim) {
        if (xp_program_validate(p, &w, &err) < 0) {
            fprintf(stderr, "%s: %s\n", file, err.msg);
            goto done;
        }
        if (is_check) {
            printf("%s: valid", file);
            if (!xp_program_resolved(p)) {
                printf(" with ");
                xp_program_print_membership(w, stdout);
            }
            printf("\n");
            rc = 0;
            goto done;
        }
        if (!xp_program_resolved(p)) {
            printf("membership: ");
            xp_program_print_membership(w, stdout);
            printf("\n");
        }
        xp_timeline *tl = NULL;
        double s;
        if (xp_sim_run(w, t, &s, &tl, &err) < 0) {
            fprintf(stderr, "%s: %s\n", file, err.msg);
            goto done;
        }
        if (!quiet)
            xp_timeline_print(w, t, tl, stdout);
        xp_timeline_free(tl);
        if (trace && write_trace(trace, w, t))
            goto done;
        printf("makespan: %.4f ms\n", s * 1e3);
        rc = 0;
        goto done;
    }
    xp_search_stats st;
    if (xp_search(p, t, &opts, &best, &st, &err) < 0) {
        fprintf(stderr, "%s: %s\n", file, err.msg);
        goto done;
    }
    xp_program_print(best, stdout, NULL, NULL);
    if (trace && write_trace(trace, best, t))
        goto done;
    printf("# search: %ld candidates, %ld valid, %ld accepted, %ld improvements, work %ld, "
           "%.1f ms, stopped by %s\n", st.steps, st.valid, st.accepted, st.improved, st.work,
           st.elapsed_ms, st.stop ? st.stop : "?");
    if (st.capped) {
        printf("# the wall-clock cap (%g ms) stopped the search: this result depends on the "
               "machine's speed\n", opts.cap_ms);
        fprintf(stderr, "exprog: the wall-clock cap (%g ms) stopped the search after %ld "
                        "candidates: this result depends on the machine's speed (raise "
                        "--cap-ms or lower --steps)\n", opts.cap_ms, st.steps);
    }
    printf("# naive makespan: %.4f ms\n", st.naive_s * 1e3);
    printf("# makespan: %.4f ms\n", st.best_s * 1e3);
    rc = 0;
done:
    xp_program_free(p);
    xp_program_free(w);
    xp_program_free(best);
    xp_topo_free(t);
    return rc;
}
