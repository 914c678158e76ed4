/* tools/bench-model.c — a whole model's speed against the machine's sgemm,
 * measured in turns so that both see the same machine load.
 *
 *   tools/bench-model [--pairs N] [--iters K] [--devices P] [--threads T]
 *                     [--tokens N] [--blocks B] [--gemm M,N,K] [--trace FILE]
 *                     [--eingen PATH] [--keep DIR] [--no-reuse]
 *                     [--profile | --profile-only]
 *
 * Builds the ~100M-parameter LLaMA (d 768, 12 blocks, 12 heads, d_ff 2048,
 * vocab 32000, tied lm_head, f32) prefilling 512 tokens with
 *   eingen llama --model --seqs 1 --tokens 512 --blocks 12 --heads 12
 *                --kv-heads 12 --head-dim 64 --d-ff 2048 --vocab 32000
 *                --tied --dtype f32
 * compiles it for P CPU devices (default 2, default options: the plan
 * einrun --cpu P chooses), opens a session (workers and weights stay
 * resident) and then, N times (default 5), in turns (which goes first
 * rotates from one turn to the next):
 *   - the model: K iterations (default 2) of the session, the best one;
 *   - sgemm: a child process (this binary, --sgemm-child) times an M x N x K
 *     cblas_sgemm (default 2048 cubed) on T OpenBLAS threads (default P),
 *     best of 3 after one warm-up, and prints its rate (the target's rate);
 *   - P such children of one thread each at once (their rates summed): the
 *     shape of the model's run, P processes of one thread.
 * The sgemm runs in its own processes so that no OpenBLAS thread of it
 * spins while the workers run. Each turn (a "pair") gives a ratio, model
 * GFLOP/s over the T-thread sgemm's GFLOP/s; the result is the median over
 * the turns. On a loaded machine T threads of one sgemm wait for each
 * other's share and lose more than P independent processes do, so there
 * the ratio comes out above what a quiet machine gives; read the CPU-time
 * ratio (below) then.
 *
 * The model's FLOPs per iteration are the graph's (each operator priced by
 * common/ir/ein_kernel_cost.c through the planner, pl_op_flops), not the
 * devices' programs': work a plan repeats on two devices is not counted
 * twice (the programs' sum is printed beside it).
 *
 * A second ratio uses CPU time instead of wall-clock time: the model's FLOPs
 * over the CPU seconds its workers spent (/proc/PID/stat), against sgemm's
 * FLOPs over the CPU seconds of its process. Other processes on a loaded
 * machine stretch wall-clock times but not CPU time (they still share the
 * caches), so that ratio says how efficient the run is when the machine is
 * not quiet; the target is the wall-clock one on a quiet machine.
 *
 * Also printed: the plan simulator's prediction of an iteration (host
 * calibration) and, from the last timed run, each device's time in kernels,
 * copies and waiting. --trace writes the session's Chrome trace (every
 * instruction of every run) at the end.
 *
 * --profile (after the pairs) or --profile-only (instead of them) replays
 * each device's program in this process on one thread, timing every
 * instruction in thread CPU time, and prints the time per operator kind
 * against what a one-thread sgemm would take for the same FLOPs (see
 * profile_device): where the work itself loses against sgemm, measurable
 * on a loaded machine. Not run by `make check`. */
#include <cblas.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/base/ein_clock.h"
#include "common/ir/ein_kernel_cost.h"
#include "common/base/ein_knob.h"
#include "common/process/ein_self.h"
#include "coordinator/compile/ein_compile_int.h"
#include "include/einsummable/einsummable.h"
#include "kernels/kn_cpu.h"
#include "planner/pl_spec.h"

extern char **environ;

#define MAX_PAIRS 64

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const double *v, int n)
{
    double s[MAX_PAIRS];
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

static double cpu_now(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The child: time an m x n x k sgemm on `threads` threads and print
 * "GFLOPS_WALL GFLOPS_CPU" (best wall-clock time of `reps`; process CPU
 * time per call over all of them). */
static int sgemm_child(int threads, int64_t m, int64_t n, int64_t k, int reps)
{
    float *a = malloc((size_t)(m * k) * 4), *b = malloc((size_t)(k * n) * 4);
    float *c = malloc((size_t)(m * n) * 4);
    if (!a || !b || !c) {
        fprintf(stderr, "bench-model: out of memory for the sgemm\n");
        return 1;
    }
    for (int64_t i = 0; i < m * k; i++)
        a[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f;
    for (int64_t i = 0; i < k * n; i++)
        b[i] = (float)((i * 104729) % 1000) * 1e-3f - 0.5f;
    kn_cpu_set_threads(threads);
    double best = INFINITY, cpu = 0;
    for (int r = 0; r <= reps; r++) {
        double c0 = cpu_now(CLOCK_PROCESS_CPUTIME_ID), t = ein_now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k, 1.0f, a,
                    (int)k, b, (int)n, 0.0f, c, (int)n);
        t = ein_now_s() - t;
        if (r > 0) {   /* r == 0 warms caches, page tables and the thread pool */
            best = t < best ? t : best;
            cpu += cpu_now(CLOCK_PROCESS_CPUTIME_ID) - c0;
        }
    }
    double fl = 2.0 * (double)m * (double)n * (double)k;
    printf("%.6f %.6f\n", fl / best * 1e-9, fl / (cpu / reps) * 1e-9);
    free(a);
    free(b);
    free(c);
    return 0;
}

/* Run `nchild` copies of this binary at once as sgemm children of
 * `threads` threads each; *wall gets the sum of their wall-clock rates,
 * *cpu the mean of their CPU-time rates. */
static int sgemm_rates(int nchild, int threads, const int64_t *mnk, double *wall, double *cpu)
{
    char self[4096], a[5][32];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0)
        return -1;
    self[len] = '\0';
    snprintf(a[0], sizeof a[0], "%d", threads);
    for (int i = 0; i < 3; i++)
        snprintf(a[1 + i], sizeof a[1 + i], "%" PRId64, mnk[i]);
    snprintf(a[4], sizeof a[4], "%d", 3);
    char *argv[] = {self, "--sgemm-child", a[0], a[1], a[2], a[3], a[4], NULL};
    pid_t pid[64];
    FILE *out[64];
    int n = 0, bad = 0;
    for (; n < nchild && n < 64; n++) {
        int fd[2];
        if (pipe(fd) < 0)
            break;
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, fd[1], 1);
        posix_spawn_file_actions_addclose(&fa, fd[0]);
        int rc = posix_spawn(&pid[n], self, &fa, NULL, argv, environ);
        posix_spawn_file_actions_destroy(&fa);
        close(fd[1]);
        out[n] = rc == 0 ? fdopen(fd[0], "r") : NULL;
        if (!out[n]) {
            fprintf(stderr, "bench-model: cannot start %s: %s\n", self, strerror(rc ? rc : errno));
            close(fd[0]);
            if (rc == 0)
                kill(pid[n], SIGTERM), waitpid(pid[n], NULL, 0);
            break;
        }
    }
    *wall = 0;
    *cpu = 0;
    for (int i = 0; i < n; i++) {
        double w, c;
        if (fscanf(out[i], "%lf %lf", &w, &c) != 2)
            bad = 1;
        else
            *wall += w, *cpu += c / nchild;
        fclose(out[i]);
        int st;
        while (waitpid(pid[i], &st, 0) < 0 && errno == EINTR)
            ;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            bad = 1;
    }
    return n == nchild && !bad ? 0 : -1;
}

/* CPU seconds (user + system) process `pid` has used, or -1. */
static double proc_cpu_s(long pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');   /* the command name may hold spaces */
    if (!p)
        return -1;
    unsigned long ut = 0, st = 0;
    /* after ")": state, then fields 4..13, then utime (14) and stime (15) */
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static double workers_cpu_s(const ein_run_stats *st)
{
    double s = 0;
    for (int d = 0; d < st->ndev; d++) {
        double c = proc_cpu_s(st->dev[d].pid);
        if (c < 0)
            return -1;
        s += c;
    }
    return s;
}

/* FLOPs of every KERNEL instruction of the devices' programs; *gemm gets
 * those of two-operand einsums (what sgemm would do). */
static double program_flops(const ein_compiled *c, double *gemm)
{
    double all = 0;
    *gemm = 0;
    for (int d = 0; d < c->ndev; d++) {
        const ein_program *p = c->progs[d];
        for (int i = 0; i < p->ninstrs; i++) {
            const ein_instr *ins = &p->instrs[i];
            if (ins->kind != EIN_I_KERNEL || ins->dst < 0)
                continue;
            const ein_box *src[EIN_KERNEL_COST_SRCS];
            int ns = ins->nsrcs < EIN_KERNEL_COST_SRCS ? ins->nsrcs : EIN_KERNEL_COST_SRCS;
            for (int j = 0; j < ns; j++)
                src[j] = &p->buffers[ins->srcs[j]].box;
            double f = ein_kernel_flops(&ins->kernel, &p->buffers[ins->dst].box, src, ns);
            all += f;
            if (ins->kernel.kind == EIN_KERNEL_EINSUM && ins->nsrcs == 2)
                *gemm += f;
        }
    }
    return all;
}

/* ---- --profile: each device's program replayed here, one thread ------
 * Every KERNEL, AGG, SLICE, CONCAT and COPY instruction of device d's
 * program, in program order, on a segment of its size (values 0.01, id
 * inputs 0), timed in this thread's CPU time (best of `passes`; a COPY is a
 * memcpy of its bytes). What a loaded machine does to wall-clock time does
 * not show, and neither do waits, messages and dispatch: this is the work
 * itself, grouped by operator kind, against a one-thread sgemm per CPU
 * second. */
typedef struct prof_row {
    char what[48];
    double s, flops;
    int n;
} prof_row;

static prof_row *prof_row_of(prof_row *rows, int *nrows, int cap, const char *what)
{
    for (int i = 0; i < *nrows; i++)
        if (!strcmp(rows[i].what, what))
            return &rows[i];
    if (*nrows == cap)
        return &rows[cap - 1];
    prof_row *r = &rows[(*nrows)++];
    memset(r, 0, sizeof *r);
    snprintf(r->what, sizeof r->what, "%s", what);
    return r;
}

static int cmp_row(const void *a, const void *b)
{
    double x = ((const prof_row *)a)->s, y = ((const prof_row *)b)->s;
    return x > y ? -1 : x < y;
}

static int profile_device(const ein_compiled *c, int d, int passes, double sgemm_cpu_rate)
{
    const ein_program *p = c->progs[d];
    char *seg = aligned_alloc(64, (p->segment_bytes + 63) / 64 * 64 + 64);
    size_t scratch_bytes = 0;
    for (int i = 0; i < p->ninstrs; i++)
        if (p->instrs[i].kind == EIN_I_COPY && p->buffers[p->instrs[i].dst].bytes > scratch_bytes)
            scratch_bytes = p->buffers[p->instrs[i].dst].bytes;
    char *scratch = malloc(scratch_bytes + 64);
    double *best = malloc((size_t)p->ninstrs * sizeof *best);
    kn_block *blk = malloc(1024 * sizeof *blk);
    if (!seg || !scratch || !best || !blk) {
        fprintf(stderr, "bench-model: out of memory for the profile\n");
        return -1;
    }
    float *f = (float *)seg;
    for (uint64_t i = 0; i < p->segment_bytes / 4; i++)
        f[i] = 0.01f;
    memset(scratch, 0, scratch_bytes + 64);
    for (int i = 0; i < p->ninstrs; i++) {
        const ein_instr *ins = &p->instrs[i];
        if (ins->kind == EIN_I_LOAD && ins->dst >= 0 &&
            (p->buffers[ins->dst].dtype == EIN_I32 || p->buffers[ins->dst].dtype == EIN_I64))
            memset(seg + p->buffers[ins->dst].offset, 0, p->buffers[ins->dst].bytes);
        best[i] = INFINITY;
    }
    kn_cpu_set_threads(1);
    ein_error err = {0};
    for (int pass = 0; pass <= passes; pass++)
        for (int i = 0; i < p->ninstrs; i++) {
            const ein_instr *ins = &p->instrs[i];
            if (ins->nsrcs > 1024)
                continue;
            for (int j = 0; j < ins->nsrcs; j++) {
                const ein_pbuffer *b = &p->buffers[ins->srcs[j]];
                blk[j] = (kn_block){seg + b->offset, b->dtype, b->box};
            }
            const ein_pbuffer *db = ins->dst >= 0 ? &p->buffers[ins->dst] : NULL;
            kn_block out = db ? (kn_block){seg + db->offset, db->dtype, db->box} : (kn_block){0};
            double t = cpu_now(CLOCK_THREAD_CPUTIME_ID);
            int rc = 0;
            switch (ins->kind) {
            case EIN_I_KERNEL: rc = kn_cpu_run(&ins->kernel, blk, ins->nsrcs, &out, &err); break;
            case EIN_I_AGG: rc = kn_cpu_agg(ins->agg, blk, ins->nsrcs, &out, &err); break;
            case EIN_I_SLICE:
            case EIN_I_CONCAT:
                for (int j = 0; j < ins->nsrcs; j++)
                    ein_box_copy(out.data, &db->box, blk[j].data, &blk[j].box,
                                 ins->kind == EIN_I_SLICE ? &db->box : &blk[j].box,
                                 ein_dtype_size(db->dtype));
                break;
            case EIN_I_COPY: memcpy(out.data, scratch, db->bytes); break;
            default: continue;
            }
            t = cpu_now(CLOCK_THREAD_CPUTIME_ID) - t;
            if (rc < 0) {
                fprintf(stderr, "bench-model: profile: device %d instruction %d (%s): %s\n", d,
                        i, ins->op, err.msg);
                return -1;
            }
            if (pass > 0 && t < best[i])   /* pass 0 warms up */
                best[i] = t;
        }
    prof_row rows[64];
    int nrows = 0;
    double total = 0, flops = 0;
    for (int i = 0; i < p->ninstrs; i++) {
        const ein_instr *ins = &p->instrs[i];
        if (!isfinite(best[i]))
            continue;
        char what[48];
        if (ins->kind == EIN_I_KERNEL) {
            int id = pl_graph_find(c->g, ins->op);
            /* a fused kernel (issue 33) is named "a+b" after its two operators */
            const char *op = id >= 0 ? pl_node_op_name(pl_graph_node(c->g, id))
                             : strchr(ins->op, '+') ? "fused" : "?";
            snprintf(what, sizeof what, "%s (%s)", op, ein_kernel_kind_name(ins->kernel.kind));
        } else
            snprintf(what, sizeof what, "%s", ein_instr_kind_name(ins->kind));
        prof_row *r = prof_row_of(rows, &nrows, 64, what);
        double fl = 0;
        if (ins->kind == EIN_I_KERNEL) {
            const ein_box *src[EIN_KERNEL_COST_SRCS];
            int ns = ins->nsrcs < EIN_KERNEL_COST_SRCS ? ins->nsrcs : EIN_KERNEL_COST_SRCS;
            for (int j = 0; j < ns; j++)
                src[j] = &p->buffers[ins->srcs[j]].box;
            fl = ein_kernel_flops(&ins->kernel, &p->buffers[ins->dst].box, src, ns);
        }
        r->s += best[i];
        r->flops += fl;
        r->n++;
        total += best[i];
        flops += fl;
    }
    qsort(rows, (size_t)nrows, sizeof *rows, cmp_row);
    double ideal = flops / (sgemm_cpu_rate * 1e9);
    printf("profile of device %d (one thread, CPU time, best of %d): %.1f ms of work for %.2f "
           "GFLOP: %.1f GFLOP/s, %.1f%% of the one-thread sgemm's %.1f GFLOP/s\n", d, passes,
           total * 1e3, flops * 1e-9, flops / total * 1e-9, 100.0 * ideal / total,
           sgemm_cpu_rate);
    printf("  %-34s %5s %10s %7s %9s %14s\n", "operator (kernel) / instruction", "count", "ms",
           "share", "GFLOP/s", "ms over sgemm");
    for (int i = 0; i < nrows; i++)
        printf("  %-34s %5d %10.2f %6.1f%% %9.1f %14.2f\n", rows[i].what, rows[i].n,
               rows[i].s * 1e3, 100.0 * rows[i].s / total,
               rows[i].flops > 0 ? rows[i].flops / rows[i].s * 1e-9 : 0.0,
               (rows[i].s - rows[i].flops / (sgemm_cpu_rate * 1e9)) * 1e3);
    free(seg);
    free(scratch);
    free(best);
    free(blk);
    return 0;
}

static int usage(int rc)
{
    fprintf(rc ? stderr : stdout,
            "usage: bench-model [--pairs N] [--iters K] [--devices P] [--threads T]\n"
            "                   [--tokens N] [--blocks B] [--gemm M,N,K] [--trace FILE]\n"
            "                   [--eingen PATH] [--keep DIR] [--no-reuse]\n"
            "                   [--profile | --profile-only]\n");
    return rc;
}

int main(int argc, char **argv)
{
    if (argc == 7 && !strcmp(argv[1], "--sgemm-child"))
        return sgemm_child(atoi(argv[2]), atoll(argv[3]), atoll(argv[4]), atoll(argv[5]),
                           atoi(argv[6]));
    setvbuf(stdout, NULL, _IOLBF, 0);   /* lines in order with errors, as they come */
    int pairs = 5, iters = 2, ndev = 2, threads = 0, tokens = 512, blocks = 12, no_reuse = 0;
    int profile = 0;
    int64_t mnk[3] = {2048, 2048, 2048};
    const char *trace = NULL, *eingen = NULL, *keep = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            return usage(0);
        if (!strcmp(a, "--no-reuse") || !strcmp(a, "--profile") || !strcmp(a, "--profile-only")) {
            *(a[2] == 'n' ? &no_reuse : &profile) = strcmp(a, "--profile-only") ? 1 : 2;
            continue;
        }
        if (!v)
            return usage(2);
        i++;
        if (!strcmp(a, "--pairs")) pairs = atoi(v);
        else if (!strcmp(a, "--iters")) iters = atoi(v);
        else if (!strcmp(a, "--devices")) ndev = atoi(v);
        else if (!strcmp(a, "--threads")) threads = atoi(v);
        else if (!strcmp(a, "--tokens")) tokens = atoi(v);
        else if (!strcmp(a, "--blocks")) blocks = atoi(v);
        else if (!strcmp(a, "--trace")) trace = v;
        else if (!strcmp(a, "--eingen")) eingen = v;
        else if (!strcmp(a, "--keep")) keep = v;
        else if (!strcmp(a, "--gemm")) {
            if (sscanf(v, "%" SCNd64 ",%" SCNd64 ",%" SCNd64, &mnk[0], &mnk[1], &mnk[2]) != 3 ||
                mnk[0] < 1 || mnk[1] < 1 || mnk[2] < 1) {
                fprintf(stderr, "bench-model: --gemm wants M,N,K (positive), not '%s'\n", v);
                return 2;
            }
        } else
            return usage(2);
    }
    if (threads <= 0)
        threads = ndev;
    if (pairs < 1 || pairs > MAX_PAIRS || iters < 1 || ndev < 1 || ndev > 64 || tokens < 1 ||
        blocks < 1) {
        fprintf(stderr, "bench-model: bad arguments (pairs 1..%d, iters >= 1, devices 1..64, "
                        "tokens and blocks >= 1)\n", MAX_PAIRS);
        return 2;
    }

    /* the model, written by eingen */
    char gen[4096], dir[4096], file[4352], cmd[9000];
    if (eingen)
        snprintf(gen, sizeof gen, "%s", eingen);
    else if (ein_self_find("../eingen", X_OK, gen, sizeof gen) < 0 &&
             ein_self_find("eingen", X_OK, gen, sizeof gen) < 0) {
        fprintf(stderr, "bench-model: cannot find eingen next to this binary (--eingen PATH)\n");
        return 2;
    }
    if (keep)
        snprintf(dir, sizeof dir, "%s", keep);
    else {
        snprintf(dir, sizeof dir, "%s/bench-model.XXXXXX",
                 ein_knob_get(EIN_KNOB_TMPDIR) ? ein_knob_get(EIN_KNOB_TMPDIR) : "/tmp");
        if (!mkdtemp(dir)) {
            perror("bench-model: mkdtemp");
            return 1;
        }
    }
    snprintf(file, sizeof file, "%s/model.ein", dir);
    snprintf(cmd, sizeof cmd,
             "'%s' llama --model --seqs 1 --tokens %d --blocks %d --heads 12 --kv-heads 12 "
             "--head-dim 64 --d-ff 2048 --vocab 32000 --tied --dtype f32 > '%s'",
             gen, tokens, blocks, file);
    if (system(cmd) != 0) {
        fprintf(stderr, "bench-model: failed: %s\n", cmd);
        return 1;
    }
    ein_error err = {0};
    ein_graph *g = NULL;
    if (ein_graph_parse_file(file, &g, &err) < 0) {
        fprintf(stderr, "bench-model: %s\n", err.msg);
        return 1;
    }
    ein_compile_options co;
    ein_compile_options_init(&co);
    co.no_reuse = no_reuse;
    ein_compiled *c = NULL;
    double t0 = ein_now_s();
    if (ein_compile(g, ndev, &co, &c, &err) < 0) {
        fprintf(stderr, "bench-model: compile: %s\n", err.msg);
        return 1;
    }
    double tcompile = ein_now_s() - t0;

    double model_fl = 0, params = 0;
    for (int i = 0; i < c->g->nnodes; i++) {
        const pl_node *nd = &c->g->nodes[i];
        if (nd->kind == PL_INPUT) {
            double v = 1;
            for (int k = 0; k < nd->rank; k++)
                v *= (double)nd->shape[k];
            if (nd->dtype == EIN_F32)
                params += v;
        } else
            model_fl += pl_op_flops(c->g, i);
    }
    double gemm_fl, prog_fl = program_flops(c, &gemm_fl);
    ein_prediction pred;
    int have_pred = ein_compiled_predict(c, NULL, &pred, &err) == 0;
    printf("bench-model: LLaMA d 768, %d blocks, vocab 32000, f32 (%.1fM parameters), "
           "%d tokens, %d CPU devices%s\n", blocks, params * 1e-6, tokens, ndev,
           no_reuse ? ", --no-reuse" : "");
    printf("  compiled in %.2f s; %.2f GFLOP per iteration (graph), %.2f in the devices' "
           "programs (%.1f%% of them GEMMs)\n", tcompile, model_fl * 1e-9, prog_fl * 1e-9,
           100.0 * gemm_fl / (prog_fl > 0 ? prog_fl : 1));
    for (int d = 0; d < ndev; d++) {
        int ni = 0;
        uint64_t seg = 0;
        ein_compiled_program(c, d, &ni, NULL, &seg);
        printf("  device %d: %d instructions, segment %.1f MB\n", d, ni, (double)seg * 1e-6);
    }
    if (have_pred)
        printf("  predicted (simulator, %s calibration): %.1f ms per iteration, %.1f GFLOP/s\n",
               pred.calibration, pred.time * 1e3, model_fl / pred.time * 1e-9);

    if (profile == 2)
        goto profile;
    ein_session_options so;
    ein_session_options_init(&so);
    so.trace_path = trace;
    ein_session *s = NULL;
    if (ein_session_open(c, &so, &s, &err) < 0) {
        fprintf(stderr, "bench-model: session: %s\n", err.msg);
        return 1;
    }
    ein_run_stats st;
    t0 = ein_now_s();
    for (int w = 0; w < 2; w++)   /* the first run loads the weights */
        if (ein_session_run_ex(s, 0, &st, &err) < 0) {
            fprintf(stderr, "bench-model: warm-up run: %s\n", err.msg);
            return 1;
        }
    printf("  session open, weights generated and loaded, 2 warm-up runs: %.1f s\n",
           ein_now_s() - t0);

    double ratio[MAX_PAIRS], pratio[MAX_PAIRS], cratio[MAX_PAIRS];
    double mrate[MAX_PAIRS], grate[MAX_PAIRS], prate[MAX_PAIRS];
    printf("  sgemm %" PRId64 "x%" PRId64 "x%" PRId64 ", best of 3: one process of %d "
           "threads (the target's rate), and %d processes of 1 thread at once\n",
           mnk[0], mnk[1], mnk[2], threads, ndev);
    printf("  pair | model ms GFLOP/s | sgemm %dthr GFLOP/s | %dx1thr GFLOP/s | ratio | "
           "ratio %dx1 | CPU-time ratio\n", threads, ndev, ndev);
    for (int p = 0; p < pairs; p++) {
        double best = INFINITY, wcpu = 0, gw = 0, gc = 0, pw = 0, pc = 0;
        for (int k = 0; k < 3; k++) {
            int what = (k + p) % 3;   /* rotate which goes first */
            if (what == 0) {
                for (int it = 0; it < iters; it++) {
                    double c0 = workers_cpu_s(&st);
                    double t = ein_now_s();
                    if (ein_session_run_ex(s, 0, &st, &err) < 0) {
                        fprintf(stderr, "bench-model: run: %s\n", err.msg);
                        return 1;
                    }
                    t = ein_now_s() - t;
                    double c1 = workers_cpu_s(&st);
                    best = t < best ? t : best;
                    wcpu += c0 >= 0 && c1 >= 0 ? c1 - c0 : NAN;
                }
            } else if (what == 1 ? sgemm_rates(1, threads, mnk, &gw, &gc) < 0
                                 : sgemm_rates(ndev, 1, mnk, &pw, &pc) < 0) {
                fprintf(stderr, "bench-model: an sgemm child failed\n");
                return 1;
            }
        }
        mrate[p] = model_fl / best * 1e-9;
        grate[p] = gw;
        prate[p] = pw;
        ratio[p] = mrate[p] / gw;
        pratio[p] = mrate[p] / pw;
        /* the model's FLOPs per CPU-second of its workers against a
         * one-thread sgemm's per CPU-second of its process */
        cratio[p] = model_fl / (wcpu / iters) * 1e-9 / pc;
        printf("  %4d | %8.1f %8.1f | %18.1f | %15.1f | %5.3f | %9.3f | %14.3f\n", p + 1,
               best * 1e3, mrate[p], gw, pw, ratio[p], pratio[p], cratio[p]);
        fflush(stdout);
    }
    printf("  last run, per device: ");
    for (int d = 0; d < st.ndev; d++)
        printf("%sdevice %d %.0f ms kernels, %.0f copies, %.0f waiting", d ? "; " : "", d,
               st.dev[d].kernel * 1e3, st.dev[d].copy * 1e3, st.dev[d].wait * 1e3);
    printf("\n");
    printf("model %.1f GFLOP/s, sgemm (%d threads) %.1f GFLOP/s, medians of %d pairs: "
           "ratio %.3f (median of the pairs' ratios; target >= 0.80)\n",
           median(mrate, pairs), threads, median(grate, pairs), pairs, median(ratio, pairs));
    printf("  against %d one-thread sgemm processes (%.1f GFLOP/s): %.3f; CPU-time ratio %.3f\n",
           ndev, median(prate, pairs), median(pratio, pairs), median(cratio, pairs));
    if (ein_session_close(s, &err) < 0)
        fprintf(stderr, "bench-model: close: %s\n", err.msg);
profile:
    if (profile) {
        double w1, c1;
        if (sgemm_rates(1, 1, mnk, &w1, &c1) < 0) {
            fprintf(stderr, "bench-model: the sgemm child failed\n");
            return 1;
        }
        for (int d = 0; d < ndev; d++)
            if (profile_device(c, d, 2, c1) < 0)
                return 1;
    }
    ein_compiled_free(c);
    ein_graph_destroy(g);
    if (!keep) {
        unlink(file);
        rmdir(dir);
    }
    return 0;
}
