/* tools/exprog.c — check, simulate and synthesise ExProg exchange programs.
 *
 *   exprog check FILE
 *   exprog simulate --topology T [--trace out.json] [--quiet] FILE
 *   exprog synth --topology T [--work N] [--steps N] [--patience N]
 *                [--cap-ms N] [--seed S] [--trace out.json] FILE
 *   exprog bound --topology T FILE
 *   exprog baseline ring|tree|direct|hier --topology T [--pipe N] FILE
 *
 * --latency-us N (any command with a topology) replaces the topology's
 * per-action latency (0: the bandwidth-only model of the paper).
 *
 * T is a built-in machine (dgx-a100, dgx-h100, hgx-h200, dgx-v100,
 * gb200-nvl72, host; N hosts of one: Nx-dgx-h100, Nx-hgx-h200, Nx-dgx-a100,
 * Nx-host) or a topology file. `simulate` prints the timeline;
 * its last line is `makespan: X ms`. `synth` reads a preamble (actions in
 * the file are ignored), prints the synthesised program, the naive
 * program's makespan and, last, its own. Exit status, like einrun's: 0 ok;
 * 2 bad usage or bad input (a flag's value, a file that cannot be read or
 * parsed, an invalid program, a topology without a route the program
 * needs); 1 any other failure (out of memory, more partition memberships
 * than the checker tries, a trace not written). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exchange/xp_baseline.h"
#include "exchange/xp_bound.h"
#include "exchange/xp_program.h"
#include "exchange/xp_search.h"
#include "exchange/xp_sim.h"
#include "exchange/xp_topo.h"

/* Exit status for an error code: bad input is 2, the rest 1. */
static int exit_status(int code)
{
    switch (code) {
    case EIN_EINVAL: case EIN_EIO: case EIN_EPARSE: case EIN_ESHAPE: return 2;
    default: return 1;
    }
}

/* An error about FILE: the message, and the exit status for it. */
static int fail_file(const char *file, const ein_error *err)
{
    fprintf(stderr, "%s: %s\n", file, err->msg);
    return exit_status(err->code);
}

static int usage(void)
{
    fprintf(stderr,
            "usage: exprog check FILE\n"
            "       exprog simulate --topology T [--trace OUT.json] [--quiet] FILE\n"
            "       exprog synth --topology T [--work N | --steps N] [--patience N]\n"
            "                    [--cap-ms N] [--seed S] [--no-chunks] [--trace OUT.json] FILE\n"
            "       exprog bound --topology T FILE\n"
            "       exprog baseline ring|tree|direct|hier --topology T [--pipe N] FILE\n"
            "       (--latency-us N replaces the topology's per-action latency)\n"
            "topologies: dgx-a100, dgx-h100, hgx-h200, dgx-v100, gb200-nvl72, host, Nx-dgx-h100,\n"
            "  Nx-hgx-h200, Nx-dgx-a100, Nx-host (N hosts), or a "
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
        return exit_status(err.code);
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

/* A flag's value: the whole of it a number in [0, max] (an integer when
 * `integer`); else a message and -1. */
static int num_arg(const char *flag, const char *v, double max, int integer, double *out)
{
    char *end;
    double x = strtod(v, &end);
    if (!*v || *end || !(x >= 0 && x <= max) || (integer && x != (double)(long long)x)) {
        fprintf(stderr, "exprog: %s '%s': expected %s from 0 to %g\n", flag, v,
                integer ? "an integer" : "a number", max);
        return -1;
    }
    *out = x;
    return 0;
}

/* A flag whose value is a count (an integer from 0 to 1e15). */
typedef struct count_opt {
    const char *flag;
    long *dst;
    int *set;            /* set to 1 when given, or NULL */
} count_opt;

static const count_opt *count_flag(const char *a, const count_opt *c)
{
    for (; c->flag; c++)
        if (strcmp(a, c->flag) == 0)
            return c;
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage();
    const char *cmd = argv[1], *topo = NULL, *trace = NULL, *file = NULL;
    xp_search_opts opts;
    xp_search_opts_default(&opts);
    opts.chunks = 1; /* exprog synthesises chunked bodies unless --no-chunks */
    int quiet = 0, work_set = 0, steps_set = 0, pipe = 0, base = -1;
    double x, latency = -1;
    /* The search's counts: work, candidates, patience. */
    const count_opt counts[] = {{"--work", &opts.max_work, &work_set},
                                {"--steps", &opts.max_steps, &steps_set},
                                {"--patience", &opts.patience, NULL},
                                {NULL, NULL, NULL}};
    const count_opt *cnt;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--topology") == 0 && v)
            topo = v, i++;
        else if (strcmp(a, "--trace") == 0 && v)
            trace = v, i++;
        else if (strcmp(a, "--cap-ms") == 0 && v) {
            if (num_arg(a, v, 1e9, 0, &x) < 0)
                return 2;
            opts.cap_ms = x, i++;
        } else if (strcmp(a, "--budget-ms") == 0) {
            fprintf(stderr, "exprog: --budget-ms is gone: the budget counts work (--work N, "
                            "default %d, or --steps N candidates); --cap-ms N is a wall-clock "
                            "safety cap\n", XP_SEARCH_DEFAULT_WORK);
            return 2;
        } else if ((cnt = count_flag(a, counts)) && v) {
            if (num_arg(a, v, 1e15, 1, &x) < 0)
                return 2;
            *cnt->dst = (long)x, i++;
            if (cnt->set)
                *cnt->set = 1;
        } else if (strcmp(a, "--pipe") == 0 && v) {
            if (num_arg(a, v, XP_CHUNKS_MAX, 1, &x) < 0 || x < 1) {
                if (x < 1)
                    fprintf(stderr, "exprog: --pipe: expected 1 to %d\n", XP_CHUNKS_MAX);
                return 2;
            }
            pipe = (int)x, i++;
        } else if (strcmp(a, "--latency-us") == 0 && v) {
            if (num_arg(a, v, 1e6, 0, &x) < 0)
                return 2;
            latency = x * 1e-6, i++;
        } else if (strcmp(a, "--seed") == 0 && v) {
            char *end;
            opts.seed = strtoull(v, &end, 10);
            if (!*v || *end || *v == '-') {
                fprintf(stderr, "exprog: --seed '%s': expected a non-negative integer\n", v);
                return 2;
            }
            i++;
        } else if (strcmp(a, "--no-chunks") == 0)
            opts.chunks = 0;
        else if (strcmp(a, "--chunks") == 0)
            opts.chunks = 1;
        else if (strcmp(a, "--quiet") == 0)
            quiet = 1;
        else if (a[0] == '-' && a[1])
            return usage();
        else if (strcmp(cmd, "baseline") == 0 && base < 0 && xp_base_parse(a) >= 0)
            base = xp_base_parse(a);
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
        is_synth = strcmp(cmd, "synth") == 0, is_bound = strcmp(cmd, "bound") == 0,
        is_base = strcmp(cmd, "baseline") == 0;
    if (!is_check && !is_sim && !is_synth && !is_bound && !is_base)
        return usage();
    if (is_base && base < 0)
        return usage();
    if (!is_check && !topo)
        return usage();

    ein_error err = {0};
    xp_program *p = NULL, *w = NULL, *best = NULL;
    xp_topology *t = NULL;
    int rc = 1;
    if (xp_program_parse_file(file, &p, &err) < 0) {
        fprintf(stderr, "%s\n", err.msg);
        rc = exit_status(err.code);
        goto done;
    }
    if (topo && xp_topo_load(topo, &t, &err) < 0) {
        fprintf(stderr, "exprog: %s\n", err.msg);
        rc = exit_status(err.code);
        goto done;
    }
    if (t && latency >= 0)
        t->latency = latency;
    if (is_base) {
        /* Size-declared partitions: the naive program's membership. */
        xp_program *pre = p;
        double s;
        int bp = pipe;
        if (!xp_program_resolved(p)) {
            if (xp_search_naive(p, t, &w, &s, &err) < 0) {
                fprintf(stderr, "%s: %s\n", file, err.msg);
                rc = exit_status(err.code);
                goto done;
            }
            pre = w;
        }
        int r = pipe ? xp_baseline(pre, t, (xp_base_kind)base, pipe, &best, &err)
                     : xp_baseline_best(pre, t, (xp_base_kind)base, &best, &s, &bp, &err);
        if (r == 0 && pipe)
            r = xp_sim_run(best, t, &s, NULL, &err);
        if (r < 0) {
            rc = fail_file(file, &err);
            goto done;
        }
        xp_program_print(best, stdout, NULL, NULL);
        if (trace && (rc = write_trace(trace, best, t)) != 0)
            goto done;
        printf("# baseline: %s, pipeline %d\n", xp_base_name((xp_base_kind)base), bp);
        printf("# makespan: %.4f ms\n", s * 1e3);
        rc = 0;
        goto done;
    }
    if (is_bound) {
        xp_bound b;
        if (xp_bound_compute(p, t, &b, &err) < 0) {
            rc = fail_file(file, &err);
            goto done;
        }
        xp_bound_print(&b, stdout);
        rc = 0;
        goto done;
    }
    if (is_check || is_sim) {
        if (xp_program_validate(p, &w, &err) < 0) {
            rc = fail_file(file, &err);
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
            rc = fail_file(file, &err);
            goto done;
        }
        if (!quiet)
            xp_timeline_print(w, t, tl, stdout);
        xp_timeline_free(tl);
        if (trace && (rc = write_trace(trace, w, t)) != 0)
            goto done;
        printf("makespan: %.4f ms\n", s * 1e3);
        rc = 0;
        goto done;
    }
    xp_search_stats st;
    if (xp_search(p, t, &opts, &best, &st, &err) < 0) {
        rc = fail_file(file, &err);
        goto done;
    }
    xp_program_print(best, stdout, NULL, NULL);
    if (trace && (rc = write_trace(trace, best, t)) != 0)
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
