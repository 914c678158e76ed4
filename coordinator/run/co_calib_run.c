/* coordinator/run/co_calib_run.c — einrun --calibrate: measure a calibration
 * table (co_calib_run.h, coordinator/predict/co_calib.h) by running benchmark Programs on the devices.
 *
 * Device 0 runs, one after another, GEMMs, attention blocks, relu, add
 * and SLICE of several sizes (each instruction depending on the
 * previous one, so nothing overlaps); device 1 (if there is one) copies
 * buffers of several sizes from device 0, one at a time, and last a small
 * one device 0 announces only after its kernels, which gives the READY
 * latency. The run has CO_CALIB_ITERS iterations; the first is a warm-up.
 * Each instruction's time is the best over the others, read from the
 * workers' Chrome trace (the same events einrun --trace writes), so it is
 * what the workers measured around each instruction. Efficiencies are
 * relative to the topology's peak and hbm (the host topology for CPU
 * devices). */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coordinator/predict/co_sim.h"
#include "coordinator/run/co_calib_run.h"
#include "coordinator/run/co_run.h"

#define CO_CALIB_ITERS 9
#define MAXB 64

typedef struct bench {
    co_work work;
    double size;        /* FLOPs or bytes */
    double bytes;       /* for the roofline's memory side */
    double operands;    /* GEMM: bytes of its two operands */
    int point;          /* GEMM: gives an `eff gemm` point */
    int dev, instr;
    double t[CO_CALIB_ITERS];
    int nt;
} bench;

static int add_buf(ein_program *p, int rank, const int64_t *shape, ein_error *err)
{
    ein_box b = ein_box_of_shape(rank, shape);
    return ein_program_add_buffer(p, EIN_F32, &b, err);
}

static int add_load(ein_program *p, int buf, int rank, const int64_t *shape, uint64_t key,
                    ein_error *err)
{
    ein_instr ins = {.kind = EIN_I_LOAD, .dst = buf, .seed = 1, .key = key, .rank = rank};
    snprintf(ins.op, sizeof ins.op, "cal_input");
    memcpy(ins.shape, shape, sizeof(int64_t) * (size_t)rank);
    return ein_program_add_instr(p, &ins, err);
}

/* Append a benchmark instruction depending on `prev` (-1: none). */
static int add_bench(ein_program *p, ein_instr *ins, int prev, int nb, bench *b, ein_error *err)
{
    int deps[1] = {prev};
    if (prev >= 0) {
        ins->deps = deps;
        ins->ndeps = 1;
    }
    snprintf(ins->op, sizeof ins->op, "cal_%d", nb);
    int id = ein_program_add_instr(p, ins, err);
    if (id >= 0) {
        b->dev = p->device;
        b->instr = id;
    }
    return id;
}

/* The benchmarks being built: device 0's chain (`prev`: its last
 * instruction, -1 none) and the table they fill (n entries so far). */
typedef struct bench_build {
    ein_program *p;
    bench *b;
    int n, prev;
} bench_build;

/* Append kernel `ins` to device 0's chain as benchmark n of kind w. */
static int chain(bench_build *B, ein_instr *ins, co_work w, double size, double bytes,
                 ein_error *err)
{
    B->b[B->n] = (bench){.work = w, .size = size, .bytes = bytes};
    if ((B->prev = add_bench(B->p, ins, B->prev, B->n, &B->b[B->n], err)) < 0)
        return B->prev;
    B->n++;
    return 0;
}

/* One GEMM m x k x n ("ij,jk->ik") on device 0's chain; `point`: it
 * gives an `eff gemm` point (the squares), else it serves only the
 * operands' fit (efficiencies()). */
static int add_gemm(bench_build *B, int64_t m, int64_t k, int64_t n, int point, ein_error *err)
{
    ein_program *p = B->p;
    int64_t sa[2] = {m, k}, sb[2] = {k, n}, so[2] = {m, n};
    int a = add_buf(p, 2, sa, err), c = a >= 0 ? add_buf(p, 2, sb, err) : a;
    int o = c >= 0 ? add_buf(p, 2, so, err) : c, rc;
    if (o < 0)
        return o;
    int la = add_load(p, a, 2, sa, 11, err), lc = la >= 0 ? add_load(p, c, 2, sb, 12, err) : la;
    if (lc < 0)
        return lc;
    int srcs[2] = {a, c};
    ein_instr ins = {.kind = EIN_I_KERNEL, .srcs = srcs, .nsrcs = 2, .dst = o};
    ins.kernel.kind = EIN_KERNEL_EINSUM;
    strcpy(ins.kernel.subscripts, "ij,jk->ik");
    double fm = (double)m, fk = (double)k, fn = (double)n;
    if ((rc = chain(B, &ins, CO_WORK_GEMM, 2 * fm * fk * fn, 4 * (fm * fk + fk * fn + fm * fn),
                    err)) < 0)
        return rc;
    B->b[B->n - 1].operands = 4 * (fm * fk + fk * fn);
    B->b[B->n - 1].point = point;
    return 0;
}

/* GEMMs n x n x n (the efficiency points), then thin ones (m rows
 * against a k x n weight: what a token split gives each device) for the
 * operands' rate. */
static int build_gemms(bench_build *B, ein_error *err)
{
    static const int64_t gemm_n[] = {16, 64, 128, 256, 512, 1024};
    static const int64_t thin[][3] = {{16, 512, 2048}, {32, 512, 2048}, {64, 512, 2048},
                                      {128, 512, 2048}, {32, 2048, 512}, {64, 2048, 512},
                                      {64, 256, 1024},  {128, 1024, 256}};
    int rc;
    for (size_t k = 0; k < sizeof gemm_n / sizeof gemm_n[0]; k++)
        if ((rc = add_gemm(B, gemm_n[k], gemm_n[k], gemm_n[k], 1, err)) < 0)
            return rc;
    for (size_t k = 0; k < sizeof thin / sizeof thin[0]; k++)
        if ((rc = add_gemm(B, thin[k][0], thin[k][1], thin[k][2], 0, err)) < 0)
            return rc;
    return 0;
}

/* Attention: 4 heads of 64, one causal sequence of T tokens. */
static int build_attention(bench_build *B, ein_error *err)
{
    static const int64_t attn_t[] = {64, 256, 1024};
    ein_program *p = B->p;
    int rc;
    for (size_t k = 0; k < sizeof attn_t / sizeof attn_t[0]; k++) {
        int64_t sh[3] = {4, attn_t[k], 64};
        int bq = add_buf(p, 3, sh, err), bk = bq >= 0 ? add_buf(p, 3, sh, err) : bq;
        int bv = bk >= 0 ? add_buf(p, 3, sh, err) : bk, bo = bv >= 0 ? add_buf(p, 3, sh, err) : bv;
        if (bo < 0)
            return bo;
        if ((rc = add_load(p, bq, 3, sh, 21, err)) < 0 || (rc = add_load(p, bk, 3, sh, 22, err)) < 0 ||
            (rc = add_load(p, bv, 3, sh, 23, err)) < 0)
            return rc;
        int srcs[3] = {bq, bk, bv};
        ein_instr ins = {.kind = EIN_I_KERNEL, .srcs = srcs, .nsrcs = 3, .dst = bo};
        ins.kernel.kind = EIN_KERNEL_ATTENTION;
        ins.kernel.group = 1;
        double t = (double)attn_t[k];
        if ((rc = chain(B, &ins, CO_WORK_ATTENTION, 4.0 * 4 * 64 * t * (t + 1) / 2,
                        16.0 * 4 * t * 64, err)) < 0)
            return rc;
    }
    return 0;
}

/* Per size: relu (unary; the smallest gives the overhead), add
 * (elementwise) and a SLICE of the first half (layout), over n floats. */
static int build_elementwise(bench_build *B, ein_error *err)
{
    static const int64_t elem_n[] = {1, 1024, 16384, 262144, 2097152, 8388608};
    ein_program *p = B->p;
    int rc;
    for (size_t k = 0; k < sizeof elem_n / sizeof elem_n[0]; k++) {
        int64_t sh[1] = {elem_n[k]}, half[1] = {elem_n[k] > 1 ? elem_n[k] / 2 : 1};
        int x = add_buf(p, 1, sh, err), y = x >= 0 ? add_buf(p, 1, sh, err) : x;
        int z = y >= 0 ? add_buf(p, 1, sh, err) : y, h = z >= 0 ? add_buf(p, 1, half, err) : z;
        if (h < 0)
            return h;
        if ((rc = add_load(p, x, 1, sh, 31, err)) < 0)
            return rc;
        double bytes = 4.0 * (double)elem_n[k];
        ein_instr un = {.kind = EIN_I_KERNEL, .srcs = &x, .nsrcs = 1, .dst = y};
        un.kernel.kind = EIN_KERNEL_UNARY;
        un.kernel.unary = EIN_UN_RELU;
        if ((rc = chain(B, &un, CO_WORK_UNARY, 2 * bytes, 2 * bytes, err)) < 0)
            return rc;
        if (elem_n[k] == 1)
            continue;
        int srcs[2] = {x, y};
        ein_instr bi = {.kind = EIN_I_KERNEL, .srcs = srcs, .nsrcs = 2, .dst = z};
        bi.kernel.kind = EIN_KERNEL_BINARY;
        bi.kernel.binary = EIN_BIN_ADD;
        if ((rc = chain(B, &bi, CO_WORK_ELEMENTWISE, 3 * bytes, 3 * bytes, err)) < 0)
            return rc;
        ein_instr sl = {.kind = EIN_I_SLICE, .srcs = &z, .nsrcs = 1, .dst = h};
        if ((rc = chain(B, &sl, CO_WORK_LAYOUT, bytes, bytes, err)) < 0)
            return rc;
    }
    return 0;
}

/* Copies device 0 -> device 1 (`q`), in increasing size, all announced
 * after device 0's kernels (the first gives the READY latency). */
static int build_copies(bench_build *B, ein_program *q, ein_error *err)
{
    static const int64_t copy_n[] = {256, 1024, 65536, 1048576, 8388608};
    ein_program *p = B->p;
    int nc = (int)(sizeof copy_n / sizeof copy_n[0]), cprev = -1, rc;
    for (int k = 0; k < nc; k++) {
        int64_t sh[1] = {copy_n[k]};
        int x = add_buf(p, 1, sh, err), y = x >= 0 ? add_buf(q, 1, sh, err) : x;
        if (y < 0)
            return y;
        int lx = add_load(p, x, 1, sh, 41, err);
        if (lx < 0)
            return lx;
        int deps[2] = {lx, B->prev};
        ein_instr nt = {.kind = EIN_I_NOTIFY, .srcs = &x, .nsrcs = 1, .dst = -1, .peer = 1,
                        .deps = deps, .ndeps = B->prev >= 0 ? 2 : 1};
        snprintf(nt.op, sizeof nt.op, "cal_notify_%d", k);
        if ((rc = ein_program_add_instr(p, &nt, err)) < 0)
            return rc;
        ein_instr cp = {.kind = EIN_I_COPY, .dst = y, .peer = 0, .peer_buf = x,
                        .peer_offset = p->buffers[x].offset};
        double bytes = 4.0 * (double)copy_n[k];
        B->b[B->n] = (bench){.work = CO_WORK_COPY, .size = bytes, .bytes = bytes};
        if ((cprev = add_bench(q, &cp, cprev, B->n, &B->b[B->n], err)) < 0)
            return cprev;
        B->n++;
    }
    return 0;
}

static int build(ein_program **progs, int ndev, bench *b, int *nb, ein_error *err)
{
    bench_build B = {.p = progs[0], .b = b, .n = 0, .prev = -1};
    int rc;
    if ((rc = build_gemms(&B, err)) < 0 || (rc = build_attention(&B, err)) < 0 ||
        (rc = build_elementwise(&B, err)) < 0 ||
        (ndev >= 2 && (rc = build_copies(&B, progs[1], err)) < 0))
        return rc;
    *nb = B.n;
    return 0;
}

/* One worker trace event: {"name": "KIND OP", ..., "ts": T, "dur": D,
 * "pid": DEVICE, ... "iteration": I}. Returns 0 and the fields (times in
 * s; *name points into `line`), or -1 for another kind of line. */
static int trace_event(char *line, const char **name, double *t0, double *dur, int *dev,
                       int *iter)
{
    char *nm = strstr(line, "\"name\": \""), *ts = strstr(line, "\"ts\": "),
         *du = strstr(line, "\"dur\": "), *it = strstr(line, "\"iteration\": "),
         *pid = strstr(line, "\"pid\": ");
    if (!nm || !ts || !du || !it || !pid)
        return -1;
    *name = nm + 9;
    *t0 = strtod(ts + 6, NULL) * 1e-6;
    *dur = strtod(du + 7, NULL) * 1e-6;
    *dev = atoi(pid + 7);
    *iter = atoi(it + 13);
    return *iter >= 0 && *iter < CO_CALIB_ITERS ? 0 : -1;
}

/* What read_trace gathers per iteration besides each benchmark's times. */
typedef struct trace_sums {
    double span_lo[CO_CALIB_ITERS], span_hi[CO_CALIB_ITERS];
    double notify_end[CO_CALIB_ITERS];  /* the first copy's NOTIFY: the latency */
    double probe_start[CO_CALIB_ITERS]; /* the first copy's start */
    double notify_sum[CO_CALIB_ITERS];  /* every NOTIFY's duration */
    int notify_n[CO_CALIB_ITERS];
} trace_sums;

/* read_trace's argument: the benchmarks (NULL: spans only) and the sums. */
typedef struct trace_arg {
    bench *b;
    int nb;
    trace_sums *t;
} trace_arg;

static void read_trace(const char *path, void *arg)
{
    const trace_arg *a = arg;
    bench *b = a->b;
    int nb = a->nb;
    trace_sums *ts = a->t;
    FILE *f = fopen(path, "re");
    char line[1024];
    if (!f)
        return;
    while (fgets(line, sizeof line, f)) {
        const char *nm;
        double t0, d;
        int dev, iter;
        if (trace_event(line, &nm, &t0, &d, &dev, &iter) < 0)
            continue;
        if (ts->span_lo[iter] == 0 || t0 < ts->span_lo[iter])
            ts->span_lo[iter] = t0;
        if (t0 + d > ts->span_hi[iter])
            ts->span_hi[iter] = t0 + d;
        const char *cal = strstr(nm, "cal_");
        if (!cal || !b)
            continue;
        if (strncmp(cal, "cal_notify_", 11) == 0) {
            if (strncmp(cal, "cal_notify_0\"", 13) == 0)
                ts->notify_end[iter] = t0 + d;
            ts->notify_sum[iter] += d;
            ts->notify_n[iter]++;
            continue;
        }
        int k = atoi(cal + 4);
        if (k >= 0 && k < nb && b[k].work == CO_WORK_COPY && (k == 0 || b[k - 1].work != CO_WORK_COPY))
            ts->probe_start[iter] = t0;
        if (k >= 0 && k < nb && b[k].nt < CO_CALIB_ITERS && iter > 0)
            b[k].t[b[k].nt++] = d;
    }
    fclose(f);
}

/* Run the Programs for CO_CALIB_ITERS iterations with a worker trace and
 * hand the trace to `reader` before it is deleted. */
static int run_traced(ein_program **progs, int ndev, const char *worker, double *iter_s,
                      void (*reader)(const char *path, void *arg), void *arg, ein_error *err)
{
    char dir[] = "/tmp/eincalXXXXXX", trace[64];
    if (!mkdtemp(dir))
        return ein_fail(err, EIN_EIO, "cannot create a temporary directory");
    snprintf(trace, sizeof trace, "%s/trace.json", dir);
    co_run_opts ro = {.worker_path = worker, .iterations = CO_CALIB_ITERS};
    ein_session_options_init(&ro.sess); /* worker_timeout 60, instr_timeout 600, ... */
    ro.sess.graphs = 0;
    ro.sess.trace_path = trace;
    int rc = co_run(progs, ndev, &ro, NULL, iter_s, err);
    if (rc == 0)
        reader(trace, arg);
    unlink(trace);
    rmdir(dir);
    return rc;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The best of the samples: the machine's speed with the least
 * interference from other processes (other users' load is not part of
 * the model). */
static double best(double *v, int n)
{
    if (n == 0)
        return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return v[0];
}

/* Append to p a chain of n GEMMs 512 x 512 x 512 (one after another) on
 * two loaded inputs; op "cal_par". Returns the last one's id or a
 * negative code. */
static int gemm_chain(ein_program *p, int n, ein_error *err)
{
    int64_t sh[2] = {512, 512};
    int a = add_buf(p, 2, sh, err), c = a >= 0 ? add_buf(p, 2, sh, err) : a;
    int la = c >= 0 ? add_load(p, a, 2, sh, 51, err) : c;
    int prev = la >= 0 ? add_load(p, c, 2, sh, 52, err) : la;
    for (int k = 0; k < n && prev >= 0; k++) {
        int o = add_buf(p, 2, sh, err), srcs[2] = {a, c};
        if (o < 0)
            return o;
        int32_t deps[2] = {la, prev};
        ein_instr ins = {.kind = EIN_I_KERNEL, .srcs = srcs, .nsrcs = 2, .dst = o,
                         .deps = deps, .ndeps = 2};
        ins.kernel.kind = EIN_KERNEL_EINSUM;
        strcpy(ins.kernel.subscripts, "ij,jk->ik");
        snprintf(ins.op, sizeof ins.op, "cal_par");
        prev = ein_program_add_instr(p, &ins, err);
    }
    return prev;
}

static void read_span(const char *path, void *arg)
{
    trace_arg a = {NULL, 0, arg};
    read_trace(path, &a);
}

/* Effective cores: CO_CALIB_PAR devices each run a chain of
 * CO_CALIB_CHAIN GEMMs 512^3 at once; cores = the work (each GEMM taking
 * `t1` alone) over the best iteration's span, at most the processors
 * online. Under other users' load it is what they leave; it is reported
 * (a comment in the table), not used: the load comes and goes. */
#define CO_CALIB_PAR 4
#define CO_CALIB_CHAIN 6
static int measure_cores(const char *worker, double t1, double *cores, ein_error *err)
{
    ein_program *progs[CO_CALIB_PAR] = {NULL};
    double iter_s[CO_CALIB_ITERS];
    int rc = 0;
    for (int d = 0; d < CO_CALIB_PAR && rc == 0; d++) {
        if (!(progs[d] = ein_program_new(d, CO_CALIB_PAR)))
            rc = ein_fail(err, EIN_ENOMEM, "out of memory");
        else if ((rc = gemm_chain(progs[d], CO_CALIB_CHAIN, err)) > 0)
            rc = 0;
    }
    trace_sums t = {0};
    if (rc == 0)
        rc = run_traced(progs, CO_CALIB_PAR, worker, iter_s, read_span, &t, err);
    double span = INFINITY;
    for (int i = 1; i < CO_CALIB_ITERS; i++)
        if (t.span_hi[i] > t.span_lo[i] && t.span_hi[i] - t.span_lo[i] < span)
            span = t.span_hi[i] - t.span_lo[i];
    if (rc == 0 && span < INFINITY && t1 > 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        double c = CO_CALIB_PAR * CO_CALIB_CHAIN * t1 / span;
        *cores = c < (double)(n > 0 ? n : 1) ? c : (double)(n > 0 ? n : 1);
    }
    for (int d = 0; d < CO_CALIB_PAR; d++)
        ein_program_free(progs[d]);
    return rc;
}

/* Messages with the cores oversubscribed: CO_CALIB_RING_PER_CORE devices
 * per core in a ring, each running CO_CALIB_STAGES stages of one GEMM
 * 256 x 256 x 256, a NOTIFY of its result to the next device and a COPY
 * of the previous device's, which the next stage's GEMM multiplies: every
 * device computes, then messages, like the stages of a split plan. Per
 * iteration: the mean NOTIFY time, and the mean latency (the COPY's start
 * minus its NOTIFY's end) of the messages whose receiver had sent its own
 * NOTIFY of that stage first (it was waiting, not computing); each figure
 * is the best iteration's (the least disturbed by other users), the mean
 * within it (the scheduler's wait is a distribution, and a plan pays its
 * mean). */
#define CO_CALIB_RING_PER_CORE 3
#define CO_CALIB_STAGES 8
#define CO_CALIB_RING_MAX 32
typedef struct ring_trace {
    double nend[CO_CALIB_ITERS][CO_CALIB_RING_MAX][CO_CALIB_STAGES];
    double ndur[CO_CALIB_ITERS][CO_CALIB_RING_MAX][CO_CALIB_STAGES];
    double cstart[CO_CALIB_ITERS][CO_CALIB_RING_MAX][CO_CALIB_STAGES];
} ring_trace;

static void read_ring(const char *path, void *arg)
{
    ring_trace *t = arg;
    FILE *f = fopen(path, "re");
    char line[1024];
    if (!f)
        return;
    while (fgets(line, sizeof line, f)) {
        const char *nm, *op;
        double t0, d;
        int dev, iter;
        if (trace_event(line, &nm, &t0, &d, &dev, &iter) < 0 || dev < 0 ||
            dev >= CO_CALIB_RING_MAX || !(op = strstr(nm, " cal_ring_")))
            continue;
        int k = atoi(op + 10);
        if (k < 0 || k >= CO_CALIB_STAGES)
            continue;
        if (strncmp(nm, "notify ", 7) == 0) {
            t->nend[iter][dev][k] = t0 + d;
            t->ndur[iter][dev][k] = d;
        } else if (strncmp(nm, "copy ", 5) == 0) {
            t->cstart[iter][dev][k] = t0;
        }
    }
    fclose(f);
}

/* measure_busy's Programs: identical on every device, so a buffer has the
 * same id and offset everywhere. */
static int ring(ein_program **progs, int n, ein_error *err)
{
    int64_t sh[2] = {256, 256};
    int w = 0, in = 0, lw = 0, prev = 0, out = 0, rc;
    for (int d = 0; d < n; d++) {
        w = add_buf(progs[d], 2, sh, err);
        in = w >= 0 ? add_buf(progs[d], 2, sh, err) : w;
        lw = in >= 0 ? add_load(progs[d], w, 2, sh, 71, err) : in;
        prev = lw >= 0 ? add_load(progs[d], in, 2, sh, 72, err) : lw;
        if (prev < 0)
            return prev;
    }
    for (int k = 0; k < CO_CALIB_STAGES; k++) {
        int g = 0, cp = 0, nin = 0;
        for (int d = 0; d < n; d++) {
            ein_program *p = progs[d];
            if ((out = add_buf(p, 2, sh, err)) < 0)
                return out;
            int srcs[2] = {in, w};
            int32_t deps[2] = {lw, prev};
            ein_instr ins = {.kind = EIN_I_KERNEL, .srcs = srcs, .nsrcs = 2, .dst = out,
                             .deps = deps, .ndeps = 2};
            ins.kernel.kind = EIN_KERNEL_EINSUM;
            strcpy(ins.kernel.subscripts, "ij,jk->ik");
            snprintf(ins.op, sizeof ins.op, "cal_ring_%d", k);
            if ((g = ein_program_add_instr(p, &ins, err)) < 0)
                return g;
            int32_t dep[1] = {g};
            ein_instr nt = {.kind = EIN_I_NOTIFY, .srcs = &out, .nsrcs = 1, .dst = -1,
                            .peer = (d + 1) % n, .deps = dep, .ndeps = 1};
            snprintf(nt.op, sizeof nt.op, "cal_ring_%d", k);
            if ((rc = ein_program_add_instr(p, &nt, err)) < 0)
                return rc;
        }
        for (int d = 0; d < n; d++) {
            ein_program *p = progs[d];
            if ((nin = add_buf(p, 2, sh, err)) < 0)
                return nin;
            ein_instr c = {.kind = EIN_I_COPY, .dst = nin, .peer = (d + n - 1) % n,
                           .peer_buf = out, .peer_offset = p->buffers[out].offset};
            snprintf(c.op, sizeof c.op, "cal_ring_%d", k);
            if ((cp = ein_program_add_instr(p, &c, err)) < 0)
                return cp;
        }
        in = nin;
        prev = cp;
    }
    return 0;
}

static int measure_busy(const char *worker, double *notify, double *latency, ein_error *err)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int n = (int)(ncpu < 1 ? 1 : ncpu) * CO_CALIB_RING_PER_CORE, rc = 0;
    if (n > CO_CALIB_RING_MAX)
        n = CO_CALIB_RING_MAX;
    ein_program *progs[CO_CALIB_RING_MAX] = {NULL};
    double iter_s[CO_CALIB_ITERS];
    for (int d = 0; d < n && rc == 0; d++)
        if (!(progs[d] = ein_program_new(d, n)))
            rc = ein_fail(err, EIN_ENOMEM, "out of memory");
    if (rc == 0)
        rc = ring(progs, n, err);
    ring_trace *t = rc == 0 ? calloc(1, sizeof *t) : NULL;
    if (rc == 0 && !t)
        rc = ein_fail(err, EIN_ENOMEM, "out of memory");
    if (rc == 0)
        rc = run_traced(progs, n, worker, iter_s, read_ring, t, err);
    double bn = INFINITY, bl = INFINITY, bl_few = INFINITY;
    for (int i = 1; rc == 0 && i < CO_CALIB_ITERS; i++) {
        double sn = 0, sl = 0;
        int nn = 0, nl = 0;
        for (int d = 0; d < n; d++)
            for (int k = 0; k < CO_CALIB_STAGES; k++) {
                double sent = t->nend[i][(d + n - 1) % n][k], own = t->nend[i][d][k];
                if (own > 0) {
                    sn += t->ndur[i][d][k];
                    nn++;
                }
                if (sent > 0 && own > 0 && own <= sent && t->cstart[i][d][k] >= sent) {
                    sl += t->cstart[i][d][k] - sent;
                    nl++;
                }
            }
        if (nn > 0 && sn / nn < bn)
            bn = sn / nn;
        if (nl >= n && sl / nl < bl)
            bl = sl / nl;
        if (nl > 0 && sl / nl < bl_few)
            bl_few = sl / nl;
    }
    if (!(bl < INFINITY))
        bl = bl_few; /* no iteration had n such messages: take what there is */
    if (rc == 0 && bn < INFINITY && bl < INFINITY) {
        *notify = bn;
        *latency = bl;
    }
    free(t);
    for (int d = 0; d < n; d++)
        ein_program_free(progs[d]);
    return rc;
}

/* The quiet figures of the two-device run (co_calib_cli). */
static void quiet_figures(const trace_sums *t, const double *iter_s, int ndev, co_calib *c)
{
    double it[CO_CALIB_ITERS], lat[CO_CALIB_ITERS], nt[CO_CALIB_ITERS];
    int nit = 0, nlat = 0, nnt = 0;
    for (int i = 1; i < CO_CALIB_ITERS; i++) {
        if (t->span_hi[i] > t->span_lo[i] && iter_s[i] > t->span_hi[i] - t->span_lo[i])
            it[nit++] = iter_s[i] - (t->span_hi[i] - t->span_lo[i]);
        /* Latency: the first COPY's start minus its NOTIFY's end. */
        if (ndev >= 2 && t->notify_end[i] > 0 && t->probe_start[i] > t->notify_end[i])
            lat[nlat++] = t->probe_start[i] - t->notify_end[i];
        /* A NOTIFY's cost beyond the overhead: the mean of the iteration's. */
        if (t->notify_n[i] > 0)
            nt[nnt++] = t->notify_sum[i] / t->notify_n[i] - c->overhead;
    }
    c->iteration = nit ? best(it, nit) : 0;
    c->latency = nlat ? best(lat, nlat) : 30e-6;
    c->notify = nnt && best(nt, nnt) > 0 ? best(nt, nnt) : 0;
}

/* The GEMMs' operand rate (co_calib.h, gemm-operands): the least-squares
 * fit, in relative error, of t = a x FLOPs + b x operand bytes over the
 * GEMMs of at least CO_CALIB_FIT_FLOPS (below it the fixed costs
 * dominate); 1 / b, or 0 when the fit gives no positive b. */
#define CO_CALIB_FIT_FLOPS 1e7
static double operand_rate(bench *b, int nb, double overhead)
{
    double ff = 0, fo = 0, oo = 0, sf = 0, so = 0;
    int n = 0;
    for (int k = 0; k < nb; k++) {
        double t = best(b[k].t, b[k].nt) - overhead;
        if (b[k].work != CO_WORK_GEMM || b[k].size < CO_CALIB_FIT_FLOPS || !(t > 0))
            continue;
        double f = b[k].size / t, o = b[k].operands / t;
        ff += f * f, fo += f * o, oo += o * o, sf += f, so += o;
        n++;
    }
    double det = ff * oo - fo * fo;
    if (n < 3 || !(fabs(det) > 0))
        return 0;
    double bcoef = (ff * so - fo * sf) / det;
    return bcoef > 0 ? 1 / bcoef : 0;
}

/* Efficiencies from each benchmark's best time, and the copy cap. */
static void efficiencies(bench *b, int nb, const xp_topology *topo, co_calib *c)
{
    double best_copy = 0;
    c->gemm_operand_bw = operand_rate(b, nb, c->overhead);
    for (int k = 0; k < nb; k++) {
        double t = best(b[k].t, b[k].nt) - c->overhead;
        if (b[k].work == CO_WORK_GEMM && !b[k].point)
            continue; /* the operands' fit only */
        if (b[k].work == CO_WORK_GEMM && c->gemm_operand_bw > 0)
            t -= b[k].operands / c->gemm_operand_bw; /* the FLOPs' share */
        if (!(t > 0) || (b[k].work == CO_WORK_UNARY && b[k].size <= 8))
            continue;
        double e;
        if (b[k].work == CO_WORK_GEMM || b[k].work == CO_WORK_ATTENTION)
            e = b[k].size / (t * topo->peak);
        else if (b[k].work != CO_WORK_COPY)
            e = b[k].size / (t * topo->hbm);
        else {
            e = b[k].size / t; /* a rate for now */
            if (e > best_copy)
                best_copy = e;
        }
        int w = b[k].work;
        if (c->npts[w] < CO_CALIB_MAX_POINTS && e > 0 && (w == CO_WORK_COPY || e <= 1000)) {
            c->size[w][c->npts[w]] = b[k].size;
            c->eff[w][c->npts[w]++] = e;
        }
    }
    if (best_copy > 0) {
        /* One copy alone: min(route, copy cap) x eff; the cap is the best rate seen. */
        int res[4], nres = xp_topo_route(topo, 0, 1, res, NULL);
        double route = INFINITY;
        for (int k = 0; k < nres; k++)
            if (xp_topo_res_bw(topo, res[k]) < route)
                route = xp_topo_res_bw(topo, res[k]);
        c->copy_bw = best_copy < route ? best_copy : 0;
        double base = best_copy < route ? best_copy : route;
        for (int i = 0; i < c->npts[CO_WORK_COPY]; i++)
            c->eff[CO_WORK_COPY][i] /= base;
    }
}

/* The worker next to this executable (einrun's directory). */
static const char *worker_beside(char *wpath, size_t size)
{
    ssize_t n = readlink("/proc/self/exe", wpath, size - 16);
    if (n <= 0)
        return NULL;
    wpath[n] = 0;
    char *slash = strrchr(wpath, '/');
    strcpy(slash ? slash + 1 : wpath, "einworker");
    return wpath;
}

int co_calib_measure(int ndev, const char *worker, const xp_topology *topo, co_calib *out,
                     co_calib_notes *notes, ein_error *err)
{
    ein_program *progs[2] = {NULL, NULL};
    bench b[MAXB];
    int nb = 0, rc = 0;
    char wpath[PATH_MAX];
    double iter_s[CO_CALIB_ITERS];
    if (ndev > 2)
        ndev = 2; /* device 0 computes, device 1 copies */
    if (!worker && !(worker = worker_beside(wpath, sizeof wpath)))
        return ein_fail(err, EIN_EINVAL, "cannot find einworker next to this program");
    for (int d = 0; d < ndev; d++)
        if (!(progs[d] = ein_program_new(d, ndev))) {
            rc = ein_fail(err, EIN_ENOMEM, "out of memory");
            goto done;
        }
    if ((rc = build(progs, ndev, b, &nb, err)) < 0)
        goto done;
    trace_sums t = {0};
    trace_arg arg = {b, nb, &t};
    if ((rc = run_traced(progs, ndev, worker, iter_s, read_trace, &arg, err)) < 0) {
        ein_error_prefix(err, "run failed");
        goto done;
    }
    co_calib c;
    memset(&c, 0, sizeof c);
    snprintf(c.name, sizeof c.name, "%s", topo->name);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    c.cores = cores > 0 ? (double)cores : 1;
    double over[CO_CALIB_ITERS];
    int nover = 0;
    for (int k = 0; k < nb; k++)
        if (b[k].work == CO_WORK_UNARY && b[k].size <= 8)
            for (int i = 0; i < b[k].nt; i++)
                over[nover++] = b[k].t[i];
    c.overhead = nover ? best(over, nover) : 0;
    quiet_figures(&t, iter_s, ndev, &c);
    efficiencies(b, nb, topo, &c);
    c.latency_busy = c.latency;
    c.notify_busy = c.notify;
    double eff_cores = 0, nb_s = 0, lb_s = 0;
    for (int k = 0; k < nb; k++)
        if (b[k].work == CO_WORK_GEMM && b[k].size == 2.0 * 512 * 512 * 512 && b[k].nt > 0 &&
            (rc = measure_cores(worker, best(b[k].t, b[k].nt), &eff_cores, err)) < 0) {
            ein_error_prefix(err, "run failed");
            goto done;
        }
    if (ndev >= 2) {
        if ((rc = measure_busy(worker, &nb_s, &lb_s, err)) < 0) {
            ein_error_prefix(err, "run failed");
            goto done;
        }
        if (lb_s > 0) {
            c.latency_busy = lb_s;
            c.notify_busy = nb_s > c.overhead ? nb_s - c.overhead : 0;
        }
    }
    *out = c;
    *notes = (co_calib_notes){.ndev = ndev, .iterations = CO_CALIB_ITERS - 1,
                              .par = CO_CALIB_PAR, .eff_cores = eff_cores,
                              .ring_per_core = CO_CALIB_RING_PER_CORE};
done:
    for (int d = 0; d < 2; d++)
        ein_program_free(progs[d]);
    return rc < 0 ? rc : 0;
}
