/* tools/bench-session.c — per-run overhead of a library session against a
 * whole einrun process, for the same tiny graph on the same devices.
 *
 *   bench-session [--devices P] [--runs N] [--processes M]
 *
 * Session: one compile, one ein_session_open, then N runs of the already
 * loaded program (an input changed before each, the output read back).
 * Process: M runs of `einrun --cpu P` on the same graph as a .ein file
 * (next to this binary or $EIN_BUILDDIR). Prints both per-run medians and
 * their ratio. Needs the einworker binary ($EINWORKER or next to it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/base/ein_clock.h"
#include "common/base/ein_knob.h"
#include "include/einsummable/einsummable.h"

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static const char *prog_text =
    "input x[16, 16]\ninput w[16, 16]\ny = matmul(x, w)\nz = relu(y)\nsave z\n";

int main(int argc, char **argv)
{
    int ndev = 2, runs = 200, procs = 10;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--devices")) ndev = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--runs")) runs = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--processes")) procs = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: bench-session [--devices P] [--runs N] [--processes M]\n");
            return 2;
        }
    }
    if (ndev < 1 || ndev > 64 || runs < 1 || procs < 1) {
        fprintf(stderr, "bench-session: bad arguments\n");
        return 2;
    }
    char dir[] = "/tmp/bench-session.XXXXXX", file[64], einrun[4096];
    if (!mkdtemp(dir))
        return 1;
    snprintf(file, sizeof file, "%s/tiny.ein", dir);
    FILE *f = fopen(file, "w");
    if (!f)
        return 1;
    fputs(prog_text, f);
    fclose(f);
    /* The build directory, absolute: the einrun runs below start in dir. */
    static char cwd[4096];
    const char *bd = ein_knob_get(EIN_KNOB_BUILDDIR);
    if (!bd)
        bd = getcwd(cwd, sizeof cwd);
    snprintf(einrun, sizeof einrun, "%s/einrun", bd ? bd : ".");
    if (!ein_knob_get(EIN_KNOB_EINWORKER)) {
        static char w[4096];
        snprintf(w, sizeof w, "%s/einworker", bd ? bd : ".");
        setenv("EINWORKER", w, 1);
    }
    ein_error err = {0};
    ein_graph *g = NULL;
    ein_compiled *c = NULL;
    ein_session *s = NULL;
    if (ein_graph_parse_file(file, &g, &err) < 0 || ein_compile(g, ndev, NULL, &c, &err) < 0 ||
        ein_session_open(c, NULL, &s, &err) < 0) {
        fprintf(stderr, "bench-session: %s\n", err.msg);
        return 1;
    }
    double *ts = calloc((size_t)runs, sizeof *ts), *tp = calloc((size_t)procs, sizeof *tp);
    float x[256], z[256];
    for (int r = 0; r < runs; r++) {
        for (int i = 0; i < 256; i++)
            x[i] = (float)((i * 7 + r) % 13) - 6.0f;
        double t0 = ein_now_s();
        if (ein_session_set_input(s, "x", x, sizeof x, &err) < 0 ||
            ein_session_run(s, NULL, &err) < 0 ||
            ein_session_get_output(s, "z", z, sizeof z, NULL, &err) < 0) {
            fprintf(stderr, "bench-session: run %d: %s\n", r, err.msg);
            return 1;
        }
        ts[r] = ein_now_s() - t0;
    }
    ein_session_close(s, NULL);
    for (int p = 0; p < procs; p++) {
        char cmd[8192];
        snprintf(cmd, sizeof cmd, "cd %s && %s --cpu %d tiny.ein >/dev/null 2>&1", dir, einrun, ndev);
        double t0 = ein_now_s();
        int rc = system(cmd);
        tp[p] = ein_now_s() - t0;
        if (rc != 0) {
            fprintf(stderr, "bench-session: %s failed (%d)\n", cmd, rc);
            return 1;
        }
    }
    qsort(ts, (size_t)runs, sizeof *ts, cmp);
    qsort(tp, (size_t)procs, sizeof *tp, cmp);
    printf("tiny graph (16x16 matmul + relu) on %d CPU devices\n", ndev);
    printf("session run (set input, run, read output): median %.3f ms over %d runs\n",
           1e3 * ts[runs / 2], runs);
    printf("whole einrun process:                      median %.3f ms over %d runs\n",
           1e3 * tp[procs / 2], procs);
    printf("session is %.1fx cheaper per run\n", tp[procs / 2] / ts[runs / 2]);
    char rm[128];
    snprintf(rm, sizeof rm, "rm -rf %s", dir);
    if (system(rm) != 0)
        return 1;
    free(ts);
    free(tp);
    ein_compiled_free(c);
    ein_graph_destroy(g);
    return 0;
}
