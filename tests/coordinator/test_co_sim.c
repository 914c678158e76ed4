/* tests/coordinator/test_co_sim.c — the plan simulator on hand-built
 * Programs with hand-computed answers: one GEMM, one transfer, a transfer
 * overlapping compute, two copies sharing a port, devices sharing cores,
 * memory peaks and the memory constraint (also on a planned graph);
 * messages with more devices than cores; --objective time's choice; the
 * calibration format; topology memory statements. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "coordinator/predict/co_calib.h"
#include "coordinator/compile/co_lower.h"
#include "coordinator/compile/co_pipeline.h"
#include "coordinator/compile/co_search_fit.h"
#include "coordinator/predict/co_sim.h"
#include "planner/pl_optimize.h"
#include "planner/pl_parse.h"

/* 2..4 GPUs: 1 TFLOP/s, 100 GB/s HBM, 10 GB/s ports, 1 MB of memory. */
static xp_topology *topo(int n)
{
    char text[256];
    snprintf(text, sizeof text,
             "name t\ngpus %d\nhbm 100 GB/s\npeak 1 TFLOP/s\nport 10 GB/s\nrest direct\n"
             "memory 1 MB\n", n);
    xp_topology *t = NULL;
    ein_error err = {0};
    assert_int_equal(xp_topo_parse(text, "t.topo", &t, &err), 0);
    return t;
}

static co_calib calib(const char *extra)
{
    char text[512];
    snprintf(text, sizeof text, "name c\noverhead 0 us\nlatency 0 us\niteration 0 us\n%s", extra);
    co_calib c;
    ein_error err = {0};
    assert_int_equal(co_calib_parse(text, "c.cal", &c, &err), 0);
    return c;
}

static void near(double got, double want)
{
    if (!(fabs(got - want) <= 1e-9 * fabs(want) + 1e-12))
        fail_msg("got %.12g, expected %.12g", got, want);
}

static int buf2(ein_program *p, int64_t r, int64_t c)
{
    int64_t sh[2] = {r, c};
    ein_box b = ein_box_of_shape(2, sh);
    int id = ein_program_add_buffer(p, EIN_F32, &b, NULL);
    assert_true(id >= 0);
    return id;
}

static int load(ein_program *p, int buf)
{
    ein_instr ins = {.kind = EIN_I_LOAD, .dst = buf, .rank = 2};
    ins.shape[0] = p->buffers[buf].box.hi[0];
    ins.shape[1] = p->buffers[buf].box.hi[1];
    strcpy(ins.op, "in");
    int id = ein_program_add_instr(p, &ins, NULL);
    assert_true(id >= 0);
    return id;
}

/* C[m,n] = A[m,k] B[k,n] after deps; returns its id. */
static int gemm(ein_program *p, int64_t m, int64_t k, int64_t n, const int32_t *deps, int ndeps)
{
    int a = buf2(p, m, k), b = buf2(p, k, n), c = buf2(p, m, n);
    int la = load(p, a), lb = load(p, b);
    int32_t d[8] = {la, lb};
    for (int i = 0; i < ndeps; i++)
        d[2 + i] = deps[i];
    int srcs[2] = {a, b};
    ein_instr ins = {.kind = EIN_I_KERNEL, .srcs = srcs, .nsrcs = 2, .dst = c, .deps = d,
                     .ndeps = 2 + ndeps};
    ins.kernel.kind = EIN_KERNEL_EINSUM;
    strcpy(ins.kernel.subscripts, "ij,jk->ik");
    strcpy(ins.op, "mm");
    int id = ein_program_add_instr(p, &ins, NULL);
    assert_true(id >= 0);
    return id;
}

/* Device `from` announces `buf` to `to` (after dep), `to` copies it; the
 * ids of the NOTIFY and the COPY through *nt, *cp. */
static void transfer(ein_program *src, ein_program *dst, int buf, int dep, int *nt, int *cp,
                     const int32_t *cdeps, int ncdeps)
{
    int32_t d[1] = {dep};
    ein_instr n = {.kind = EIN_I_NOTIFY, .srcs = &buf, .nsrcs = 1, .dst = -1,
                   .peer = dst->device, .deps = d, .ndeps = dep >= 0};
    strcpy(n.op, "x");
    *nt = ein_program_add_instr(src, &n, NULL);
    ein_box b = src->buffers[buf].box;
    int y = ein_program_add_buffer(dst, EIN_F32, &b, NULL);
    ein_instr c = {.kind = EIN_I_COPY, .dst = y, .peer = src->device, .peer_buf = buf,
                   .peer_offset = src->buffers[buf].offset, .deps = (int32_t *)cdeps,
                   .ndeps = ncdeps};
    strcpy(c.op, "x");
    *cp = ein_program_add_instr(dst, &c, NULL);
    assert_true(*nt >= 0 && *cp >= 0);
}

static ein_program **progs_new(int n)
{
    ein_program **p = calloc((size_t)n, sizeof *p);
    for (int d = 0; d < n; d++)
        p[d] = ein_program_new(d, n);
    return p;
}

static co_sim_result *run(ein_program **p, int n, const xp_topology *t, const co_calib *c)
{
    co_sim_result *r = NULL;
    ein_error err = {0};
    for (int d = 0; d < n; d++)
        if (ein_program_validate(p[d], &err) < 0)
            fail_msg("device %d: %s", d, err.msg);
    if (co_sim_run(p, n, t, c, &r, &err) < 0)
        fail_msg("%s", err.msg);
    return r;
}

/* 2*100*200*300 = 1.2e7 FLOPs at 1 TFLOP/s = 12 us (the 440 kB at 100 GB/s
 * take 4.4 us: compute-bound), + 5 us overhead, + 7 us per iteration. */
static void test_one_gemm(void **state)
{
    (void)state;
    xp_topology *t = topo(2);
    co_calib c = calib("overhead 5 us\niteration 7 us\n");
    ein_program **p = progs_new(1);
    gemm(p[0], 100, 200, 300, NULL, 0);
    co_sim_result *r = run(p, 1, t, &c);
    near(r->makespan, 17e-6);
    near(r->time, 24e-6);
    near(r->dev[0].compute, 17e-6);
    near(r->dev[0].comm, 0);
    /* Efficiency 0.5 at that size: 24 us of compute. */
    co_calib half = calib("eff gemm 1 0.5\n");
    co_sim_result *r2 = run(p, 1, t, &half);
    near(r2->makespan, 24e-6);
    /* gemm-operands 10 GB/s: the operands A 100x200 and B 200x300 are
     * 80 kB + 240 kB = 320 kB, 32 us at 10 GB/s, ON TOP of the 12 us of
     * FLOPs (not max: a CPU BLAS packs them first): 5 + 12 + 32 = 49 us. */
    co_calib packs = calib("overhead 5 us\ngemm-operands 10 GB/s\n");
    co_sim_result *r3 = run(p, 1, t, &packs);
    near(r3->makespan, 49e-6);
    co_sim_result_free(r3);
    /* Same FLOPs, thinner: 25x800x300 has operands 80 kB + 960 kB = 1040 kB,
     * 104 us: 5 + 12 + 104 = 121 us, the weight packed for 25 rows only. */
    ein_program **q = progs_new(1);
    gemm(q[0], 25, 800, 300, NULL, 0);
    co_sim_result *r4 = run(q, 1, t, &packs);
    near(r4->makespan, 121e-6);
    co_sim_result *r5 = run(q, 1, t, &c); /* without: only the FLOPs, 17 us */
    near(r5->makespan, 17e-6);
    co_sim_result_free(r4);
    co_sim_result_free(r5);
    ein_program_free(q[0]);
    free(q);
    co_sim_result_free(r);
    co_sim_result_free(r2);
    ein_program_free(p[0]);
    free(p);
    xp_topo_free(t);
}

/* 1 MB from device 0 to 1 through two 10 GB/s ports: 100 us; NOTIFY and
 * COPY cost 2 us of overhead each, the READY 10 us: 2 + 10 + 2 + 100. */
static void test_one_transfer(void **state)
{
    (void)state;
    xp_topology *t = topo(2);
    co_calib c = calib("overhead 2 us\nlatency 10 us\n");
    ein_program **p = progs_new(2);
    int x = buf2(p[0], 250, 1000);
    int lx = load(p[0], x), nt, cp;
    transfer(p[0], p[1], x, lx, &nt, &cp, NULL, 0);
    co_sim_result *r = run(p, 2, t, &c);
    near(r->makespan, 114e-6);
    near(r->dev[0].comm, 2e-6);
    near(r->dev[1].comm, 102e-6);
    near(r->dev[1].idle, 12e-6);
    near(r->start[r->first[1] + cp], 12e-6);
    /* The critical path: LOAD, NOTIFY on 0, then the COPY on 1. */
    assert_int_equal(r->npath, 3);
    assert_int_equal(r->path[1].device, 0);
    assert_int_equal(r->path[2].device, 1);
    near(r->path_comm, 104e-6);
    near(r->path_wait, 10e-6);
    co_sim_result_free(r);
    co_programs_free(p, 2);
    xp_topo_free(t);
}

/* Device 0 announces X, then runs a 200 us GEMM (2*1000*1000*100 FLOPs);
 * device 1 copies X (100 us) meanwhile: 200 us, not 300. If device 1 then
 * runs a GEMM of its own that needs X, 100 + 200 = 300 us. */
static void test_overlap(void **state)
{
    (void)state;
    xp_topology *t = topo(2);
    co_calib c = calib("");
    ein_program **p = progs_new(2);
    int x = buf2(p[0], 250, 1000);
    int lx = load(p[0], x), nt, cp;
    transfer(p[0], p[1], x, lx, &nt, &cp, NULL, 0);
    int32_t after[1] = {nt};
    gemm(p[0], 1000, 1000, 100, after, 1);
    co_sim_result *r = run(p, 2, t, &c);
    near(r->makespan, 200e-6);
    near(r->dev[0].compute, 200e-6);
    near(r->dev[1].comm, 100e-6);
    co_sim_result_free(r);
    int32_t need[1] = {cp};
    gemm(p[1], 1000, 1000, 100, need, 1);
    r = run(p, 2, t, &c);
    near(r->makespan, 300e-6);
    near(r->dev[1].idle, 0);
    co_sim_result_free(r);
    co_programs_free(p, 2);
    xp_topo_free(t);
}

/* Devices 1 and 2 copy 1 MB each from device 0 at once: its 10 GB/s egress
 * port is shared, 5 GB/s each, 200 us. With a 4 GB/s copy cap, each
 * copy runs at 4 GB/s: 250 us. */
static void test_shared_port(void **state)
{
    (void)state;
    xp_topology *t = topo(3);
    co_calib c = calib("");
    ein_program **p = progs_new(3);
    int x = buf2(p[0], 250, 1000);
    int lx = load(p[0], x), nt, cp;
    transfer(p[0], p[1], x, lx, &nt, &cp, NULL, 0);
    transfer(p[0], p[2], x, lx, &nt, &cp, NULL, 0);
    co_sim_result *r = run(p, 3, t, &c);
    near(r->makespan, 200e-6);
    co_sim_result_free(r);
    co_calib capped = calib("copy 4 GB/s\n");
    r = run(p, 3, t, &capped);
    near(r->makespan, 250e-6);
    co_sim_result_free(r);
    co_programs_free(p, 3);
    xp_topo_free(t);
}

/* Two independent 200 us GEMMs on two devices: 200 us on their own
 * processors, 400 us sharing one core, 200 us sharing two. */
static void test_shared_cores(void **state)
{
    (void)state;
    xp_topology *t = topo(2);
    ein_program **p = progs_new(2);
    gemm(p[0], 1000, 1000, 100, NULL, 0);
    gemm(p[1], 1000, 1000, 100, NULL, 0);
    co_calib own = calib(""), one = calib("cores 1\n"), two = calib("cores 2\n");
    co_sim_result *r = run(p, 2, t, &own);
    near(r->makespan, 200e-6);
    co_sim_result_free(r);
    r = run(p, 2, t, &one);
    near(r->makespan, 400e-6);
    near(r->dev[0].compute, 400e-6);
    co_sim_result_free(r);
    r = run(p, 2, t, &two);
    near(r->makespan, 200e-6);
    co_sim_result_free(r);
    co_programs_free(p, 2);
    xp_topo_free(t);
}

/* Buffers are laid end to end at 256-byte boundaries and never reused:
 * 1000 B at 0, 400000 B at 1024, 1000 B at 401152 (the boundary after
 * 401024) -> 402152 bytes. Over the 1 MB of memory: two 250x1000 f32,
 * 1000000 B at 0 and at 1000192 -> 2000192 bytes. */
static void test_memory(void **state)
{
    (void)state;
    xp_topology *t = topo(2);
    co_calib c = calib("");
    ein_error err = {0};
    ein_program **p = progs_new(1);
    int a = buf2(p[0], 10, 25), b = buf2(p[0], 100, 1000), d = buf2(p[0], 25, 10);
    load(p[0], a);
    load(p[0], b);
    load(p[0], d);
    co_sim_result *r = run(p, 1, t, &c);
    assert_int_equal((long long)r->dev[0].peak, 402152);
    assert_int_equal(r->dev[0].largest[0], b);
    assert_int_equal(co_sim_check_memory(p, r, t, &err), 0);
    co_sim_result_free(r);
    ein_program_free(p[0]);
    p[0] = ein_program_new(0, 1);
    int big = buf2(p[0], 250, 1000), big2 = buf2(p[0], 250, 1000);
    load(p[0], big);
    load(p[0], big2);
    r = run(p, 1, t, &c);
    assert_int_equal((long long)r->dev[0].peak, 2000192);
    assert_int_equal(co_sim_check_memory(p, r, t, &err), EIN_ELIMIT);
    assert_non_null(strstr(err.msg, "device 0"));
    assert_non_null(strstr(err.msg, "2.00 MB exceeds its capacity 1.00 MB"));
    assert_non_null(strstr(err.msg, "in (1.00 MB)"));
    co_sim_result_free(r);
    ein_program_free(p[0]);
    free(p);
    xp_topo_free(t);
}

/* A planned FFN whose weights do not fit 1 MB per device is rejected with
 * the device, peak, capacity and largest tensors named; with 1 GB it fits. */
static void test_memory_plan(void **state)
{
    (void)state;
    static const char prog[] = "dims t=256 d=256 f=1024\ndtype f32\ninput x[t, d]\n"
                               "input w1[d, f]\ninput w2[f, d]\nh = matmul(x, w1)\n"
                               "y = matmul(h, w2)\nsave y\n";
    pl_graph *g = NULL;
    pl_plan *plan = NULL;
    ein_error err = {0};
    assert_int_equal(pl_ein_parse("ffn.ein", prog, strlen(prog), &g, &err), 0);
    assert_int_equal(pl_plan_make(g, 2, PL_SELECT_DP, 1, &plan, &err), 0);
    xp_topology *t = topo(2);
    co_calib c = calib("");
    ein_program **progs = NULL;
    co_sim_result *r = NULL;
    int rc = co_plan_predict(g, plan, t, &c, 1, 1, NULL, &progs, &r, &err);
    assert_int_equal(rc, EIN_ELIMIT);
    assert_non_null(strstr(err.msg, "predicted peak memory"));
    assert_non_null(strstr(err.msg, "capacity 1.00 MB"));
    assert_non_null(strstr(err.msg, "largest tensors alive: "));
    t->memory = 1e9;
    assert_int_equal(co_plan_predict(g, plan, t, &c, 1, 1, NULL, &progs, &r, &err), 0);
    assert_true(r->time > 0);
    /* 2*256*256*1024*2 FLOPs at 1 TFLOP/s on 2 devices: at least 134 us / 2. */
    assert_true(r->makespan >= 2.0 * 256 * 256 * 1024 * 2 / 1e12 / 2);
    co_sim_result_free(r);
    co_programs_free(progs, 2);
    xp_topo_free(t);
    pl_plan_free(plan);
    pl_graph_free(g);
}

/* The FFN of the objective tests: 512 tokens, d 512, d_ff 2048. */
static const char FFN_PROG[] = "dims t=512 d=512 f=2048\ndtype f32\ninput x[t, d]\n"
                               "input w1[d, f]\ninput w2[f, d]\nh = matmul(x, w1)\n"
                               "r = relu(h)\ny = matmul(r, w2)\nsave y\n";

/* --objective time: refuses missing rates; on the FFN over 4 devices of
 * the test machine its plan is predicted no slower than the comm plan. */
static void test_objective_time(void **state)
{
    (void)state;
    pl_graph *g = NULL;
    pl_plan *comm = NULL, *time = NULL;
    ein_error err = {0};
    pl_objective ob;
    assert_int_equal(pl_objective_parse("time", &ob), 0);
    assert_int_equal(ob, PL_OBJECTIVE_TIME);
    assert_int_equal(pl_objective_parse("fast", &ob), -1);
    assert_int_equal(pl_ein_parse("ffn.ein", FFN_PROG, strlen(FFN_PROG), &g, &err), 0);
    pl_plan_opts o = {.objective = PL_OBJECTIVE_TIME};
    assert_int_equal(pl_plan_make_opts(g, 4, PL_SELECT_DP, 1, &o, &time, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "objective time needs"));
    xp_topology *t = topo(4);
    t->memory = 1e9;
    co_calib c = calib("overhead 5 us\nlatency 20 us\n");
    co_calib_objective_rates(t, &c, &o);
    near(o.peak_flops, 1e12);
    near(o.net_bw, 10e9);
    assert_int_equal(pl_plan_make_opts(g, 4, PL_SELECT_DP, 1, &o, &time, &err), 0);
    assert_int_equal(pl_plan_make(g, 4, PL_SELECT_DP, 1, &comm, &err), 0);
    ein_program **pc = NULL, **pt = NULL;
    co_sim_result *rc = NULL, *rt = NULL;
    assert_int_equal(co_plan_predict(g, comm, t, &c, 1, 1, NULL, &pc, &rc, &err), 0);
    assert_int_equal(co_plan_predict(g, time, t, &c, 1, 1, NULL, &pt, &rt, &err), 0);
    if (!(rt->time <= rc->time * 1.0001))
        fail_msg("objective time predicts %.6g s, comm %.6g s", rt->time, rc->time);
    co_sim_result_free(rc);
    co_sim_result_free(rt);
    co_programs_free(pc, 4);
    co_programs_free(pt, 4);
    pl_plan_free(comm);
    pl_plan_free(time);
    pl_graph_free(g);
    xp_topo_free(t);
}

/* Operand elements one device's blocks of node `name` read (its first
 * block's inputs: every block of these specs is the same size). */
static double block_operands(const pl_graph *g, const pl_plan *plan, const char *name)
{
    for (int v = 0; v < g->nnodes; v++)
        if (strcmp(g->nodes[v].name, name) == 0) {
            const pl_spec *s = &plan->nodes[v].spec;
            double e = 0;
            for (int k = 0; k < s->ninputs; k++)
                e += (double)ein_box_volume(&s->f[0].in[k]);
            return e;
        }
    fail_msg("no node %s", name);
    return 0;
}

/* The DP's time cost with a gemm-operands rate (a CPU BLAS packing both
 * operands): h = x[512, 512] w1[512, 2048] on 8 devices. Split by tokens
 * (t:8) each block reads 64 x 512 + 512 x 2048 = 1,081,344 operand
 * elements; the fewest without splitting the contraction is t:1 x f:8 or
 * t:2 x f:4, 512 x 512 / a + 512 x 2048 / b = 393,216. At 1 GB/s the
 * operands cost 4.3 ms against 1.6 ms, far more than any repartition at
 * 8 x 10 GB/s (4 MB: 0.05 ms), so the DP must read at most 393,216 per
 * block; without the rate every split of h has the same FLOPs. */
static void test_objective_time_operands(void **state)
{
    (void)state;
    pl_graph *g = NULL;
    pl_plan *plain = NULL, *packed = NULL;
    ein_error err = {0};
    assert_int_equal(pl_ein_parse("ffn.ein", FFN_PROG, strlen(FFN_PROG), &g, &err), 0);
    xp_topology *t = topo(8);
    t->memory = 1e9;
    co_calib c = calib("overhead 5 us\nlatency 20 us\n");
    co_calib cp = calib("overhead 5 us\nlatency 20 us\ngemm-operands 1 GB/s\n");
    pl_plan_opts o = {.objective = PL_OBJECTIVE_TIME}, op = o;
    co_calib_objective_rates(t, &c, &o);
    co_calib_objective_rates(t, &cp, &op);
    near(o.gemm_operand_bw, 0);
    near(op.gemm_operand_bw, 1e9);
    assert_int_equal(pl_plan_make_opts(g, 8, PL_SELECT_DP, 1, &o, &plain, &err), 0);
    assert_int_equal(pl_plan_make_opts(g, 8, PL_SELECT_DP, 1, &op, &packed, &err), 0);
    double e = block_operands(g, packed, "h");
    if (!(e <= 393216))
        fail_msg("with gemm-operands h's block reads %.0f operand elements (at most 393216)", e);
    fprintf(stderr, "# h's block operands: %.0f without the rate, %.0f with it\n",
            block_operands(g, plain, "h"), e);
    pl_plan_free(plain);
    pl_plan_free(packed);
    pl_graph_free(g);
    xp_topo_free(t);
}

/* One 1 MB transfer 0 -> 1 (100 us on the 10 GB/s ports), overhead 2 us,
 * notify 5 us, latency 10 us; busy figures notify 20 us, latency 50 us,
 * which apply only while every core computes (co_sim.c, cores_taken).
 * - 2 cores, 2 devices: the quiet figures: 2 + 5, + 10, + 2 + 100 =
 *   119 us, device 0's NOTIFY 7 us.
 * - 1 core, 2 devices, nothing computing: a free core, so the same 119 us.
 * - 1 core, 3 devices, 0 -> 1 and 2 -> 1 at once, nothing computing: both
 *   READYs at 2 + 5 + 10 = 17 us; device 1 copies one (17..119: 2 us
 *   overhead, 100 us), then the other (119..221).
 * - 1 core, 3 devices, device 2 multiplying 1000^3 (2000 us alone) while
 *   device 0 multiplies 100 x 200 x 300 (12 us alone), then sends the
 *   product:
 *   both GEMMs share the core after their 2 us overhead, so device 0's
 *   ends at 2 + 24 = 26 us; its NOTIFY finds the core taken: 2 + 20 =
 *   22 us, to 48; the READY arrives 50 us later, at 98, when device 1's
 *   COPY starts (the core still taken by device 2). */
static void test_oversubscribed(void **state)
{
    (void)state;
    xp_topology *t = topo(3);
    static const char busy[] = "notify 5 us\nlatency-busy 50 us\nnotify-busy 20 us\n";
    char text[256];
    snprintf(text, sizeof text, "overhead 2 us\nlatency 10 us\ncores 2\n%s", busy);
    co_calib two = calib(text);
    snprintf(text, sizeof text, "overhead 2 us\nlatency 10 us\ncores 1\n%s", busy);
    co_calib one = calib(text);
    ein_program **p = progs_new(2);
    int x = buf2(p[0], 250, 1000), nt, cp;
    transfer(p[0], p[1], x, load(p[0], x), &nt, &cp, NULL, 0);
    co_sim_result *r = run(p, 2, t, &two);
    near(r->makespan, 119e-6);
    near(r->dev[0].comm, 7e-6);
    co_sim_result_free(r);
    r = run(p, 2, t, &one);
    near(r->makespan, 119e-6);
    near(r->dev[0].comm, 7e-6);
    near(r->start[r->first[1] + cp], 17e-6);
    co_sim_result_free(r);
    for (int d = 0; d < 2; d++)
        ein_program_free(p[d]);
    free(p);
    p = progs_new(3);
    int a = buf2(p[0], 250, 1000), b = buf2(p[2], 250, 1000), n2, c2;
    transfer(p[0], p[1], a, load(p[0], a), &nt, &cp, NULL, 0);
    transfer(p[2], p[1], b, load(p[2], b), &n2, &c2, NULL, 0);
    r = run(p, 3, t, &one);
    near(r->start[r->first[1] + cp], 17e-6);
    near(r->start[r->first[1] + c2], 119e-6);
    near(r->makespan, 221e-6);
    co_sim_result_free(r);
    for (int d = 0; d < 3; d++)
        ein_program_free(p[d]);
    free(p);
    p = progs_new(3);
    int g0 = gemm(p[0], 100, 200, 300, NULL, 0);
    gemm(p[2], 1000, 1000, 1000, NULL, 0);
    transfer(p[0], p[1], p[0]->instrs[g0].dst, g0, &nt, &cp, NULL, 0);
    r = run(p, 3, t, &one);
    near(r->end[r->first[0] + g0], 26e-6);
    near(r->dev[0].comm, 22e-6);
    near(r->start[r->first[1] + cp], 98e-6);
    co_sim_result_free(r);
    for (int d = 0; d < 3; d++)
        ein_program_free(p[d]);
    free(p);
    xp_topo_free(t);
}

/* co_plan_by_time returns the faster, predicted, of the DP's plans under
 * the time and the comm cost: its prediction is not above either's,
 * computed here from the two plans made directly; deterministic. */
static void test_objective_choice(void **state)
{
    (void)state;
    static const char prog[] =
        "dims a=96 b=512 c=96 d=512 e=96\ndtype f32\ninput m1[a, b]\ninput m2[b, c]\n"
        "input m3[c, d]\ninput m4[d, e]\np1 = matmul(m1, m2)\np2 = matmul(p1, m3)\n"
        "y = matmul(p2, m4)\nsave y\n";
    pl_graph *g = NULL;
    ein_error err = {0};
    assert_int_equal(pl_ein_parse("chain.ein", prog, strlen(prog), &g, &err), 0);
    xp_topology *t = topo(4);
    t->memory = 1e9;
    /* Slow messages with more devices than cores: fewer messages win. */
    co_calib c = calib("overhead 5 us\nlatency 20 us\ncores 2\nlatency-busy 400 us\n"
                       "notify-busy 100 us\n");
    for (int p = 2; p <= 4; p += 2) {
        pl_plan_opts o = {0};
        pl_plan *time = NULL, *comm = NULL, *best = NULL, *again = NULL;
        co_calib_objective_rates(t, &c, &o);
        o.objective = PL_OBJECTIVE_TIME;
        assert_int_equal(pl_plan_make_opts(g, p, PL_SELECT_DP, 1, &o, &time, &err), 0);
        assert_int_equal(pl_plan_make(g, p, PL_SELECT_DP, 1, &comm, &err), 0);
        assert_int_equal(co_plan_by_time(g, p, PL_SELECT_DP, 1, NULL, t, &c, &best, &err), 0);
        assert_int_equal(co_plan_by_time(g, p, PL_SELECT_DP, 1, NULL, t, &c, &again, &err), 0);
        const pl_plan *pl[4] = {time, comm, best, again};
        double pred[4];
        for (int k = 0; k < 4; k++) {
            ein_program **pp = NULL;
            co_sim_result *r = NULL;
            if (co_plan_predict(g, pl[k], t, &c, 1, 1, NULL, &pp, &r, &err) < 0)
                fail_msg("%s", err.msg);
            pred[k] = r->time;
            co_sim_result_free(r);
            co_programs_free(pp, p);
        }
        double lo = pred[0] < pred[1] ? pred[0] : pred[1];
        if (!(pred[2] <= lo * (1 + 1e-12)))
            fail_msg("P=%d: chose %.6g s; time cost's %.6g, comm cost's %.6g", p, pred[2],
                     pred[0], pred[1]);
        near(pred[3], pred[2]);
        pl_plan_free(time);
        pl_plan_free(comm);
        pl_plan_free(best);
        pl_plan_free(again);
    }
    pl_graph_free(g);
    xp_topo_free(t);
}

static void test_calib_format(void **state)
{
    (void)state;
    co_calib c;
    ein_error err = {0};
    const char *ok = "name x\ncores 2\noverhead 3 us\nlatency 0.1 ms\niteration 1 ms\n"
                     "copy 5 GB/s\neff gemm 1e6 0.2\neff gemm 1e8 0.6\n";
    assert_int_equal(co_calib_parse(ok, "x.cal", &c, &err), 0);
    near(c.overhead, 3e-6);
    near(c.latency, 1e-4);
    near(c.copy_bw, 5e9);
    near(c.notify, 0); /* absent: 0, and the busy figures the quiet ones */
    near(c.latency_busy, c.latency);
    near(c.notify_busy, c.notify);
    near(co_calib_eff(&c, CO_WORK_GEMM, 1e7), 0.4);
    near(co_calib_eff(&c, CO_WORK_GEMM, 10), 0.2);
    near(co_calib_eff(&c, CO_WORK_GEMM, 1e12), 0.6);
    near(co_calib_eff(&c, CO_WORK_COPY, 1e3), 1.0);
    static const char *const bad[] = {
        "eff gemm 1e6 0.2\neff gemm 1e5 0.3\n", "eff nope 1 1\n", "eff gemm 1 0\n",
        "overhead 3 weeks\n", "cores -1\n", "frobnicate\n", "copy 0 GB/s\n", "eff gemm nan 1\n",
        "notify-busy 3 weeks\n", "latency-busy -1 us\n", "notify\n",
        "gemm-operands 0 GB/s\n", "gemm-operands 5\n", "gemm-operands 5 GB/s x\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(co_calib_parse(bad[i], "bad.cal", &c, &err), EIN_EPARSE);
        assert_non_null(strstr(err.msg, "bad.cal:"));
    }
    /* Written text parses back to the same table. */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_int_equal(co_calib_parse(ok, "x.cal", &c, &err), 0);
    co_calib_write(&c, f);
    fclose(f);
    co_calib d;
    assert_int_equal(co_calib_parse(buf, "w.cal", &d, &err), 0);
    free(buf);
    near(d.latency, c.latency);
    near(d.latency_busy, c.latency);
    assert_int_equal(d.npts[CO_WORK_GEMM], 2);
    /* The busy figures round-trip too. */
    near(d.gemm_operand_bw, 0); /* absent: a GEMM is priced by the roofline */
    const char *busy = "name y\ncores 2\nlatency 10 us\nnotify 4 us\nlatency-busy 0.5 ms\n"
                       "notify-busy 90 us\ngemm-operands 12.5 GB/s\n";
    assert_int_equal(co_calib_parse(busy, "y.cal", &c, &err), 0);
    near(c.notify, 4e-6);
    near(c.latency_busy, 5e-4);
    near(c.notify_busy, 9e-5);
    buf = NULL;
    f = open_memstream(&buf, &len);
    co_calib_write(&c, f);
    fclose(f);
    assert_int_equal(co_calib_parse(buf, "w.cal", &d, &err), 0);
    free(buf);
    near(d.notify, 4e-6);
    near(d.latency_busy, 5e-4);
    near(d.notify_busy, 9e-5);
    near(d.gemm_operand_bw, 12.5e9);
    /* Every built-in table parses; the host one is topologies/host.cal. */
    static const char *const names[] = {"host", "a100", "h100", "h200", "v100", "b200"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        assert_int_equal(co_calib_load(names[i], &c, &err), 0);
    const char *src = getenv("EIN_SRCDIR") ? getenv("EIN_SRCDIR") : "..";
    char path[4096];
    snprintf(path, sizeof path, "%s/topologies/host.cal", src);
    co_calib h;
    assert_int_equal(co_calib_load("host", &c, &err), 0);
    if (co_calib_load(path, &h, &err) < 0)
        fail_msg("%s", err.msg);
    assert_memory_equal(&c, &h, sizeof c);
}

static void test_topology_memory(void **state)
{
    (void)state;
    xp_topology *t = NULL, *u = NULL;
    ein_error err = {0};
    assert_int_equal(xp_topo_parse("gpus 1\nhbm 1 TB/s\nmemory 80 GB\ncalibration h100\n", "m",
                                   &t, &err), 0);
    near(t->memory, 80e9);
    assert_string_equal(t->calibration, "h100");
    char *text = NULL;
    assert_int_equal(xp_topo_format(t, &text, &err), 0);
    assert_int_equal(xp_topo_parse(text, "f", &u, &err), 0);
    near(u->memory, t->memory);
    assert_string_equal(u->calibration, "h100");
    free(text);
    xp_topo_free(t);
    xp_topo_free(u);
    t = NULL;
    assert_int_equal(xp_topo_parse("gpus 1\nhbm 1 TB/s\nmemory 80 GiB\n", "m", &t, &err),
                     EIN_EPARSE);
    assert_non_null(strstr(err.msg, "m:3:1: bad 'memory' statement"));
    /* Every built-in machine states its memory and a calibration that loads. */
    for (int i = 0; xp_topo_builtin_names[i]; i++) {
        co_calib c;
        assert_int_equal(xp_topo_load(xp_topo_builtin_names[i], &t, &err), 0);
        assert_true(t->memory > 0);
        assert_int_equal(co_sim_calib_of(t, "none", &c, &err), 0);
        xp_topo_free(t);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_gemm),     cmocka_unit_test(test_one_transfer),
        cmocka_unit_test(test_overlap),      cmocka_unit_test(test_shared_port),
        cmocka_unit_test(test_shared_cores), cmocka_unit_test(test_memory),
        cmocka_unit_test(test_memory_plan),  cmocka_unit_test(test_objective_time),
        cmocka_unit_test(test_objective_time_operands),
        cmocka_unit_test(test_oversubscribed), cmocka_unit_test(test_objective_choice),
        cmocka_unit_test(test_calib_format),
        cmocka_unit_test(test_topology_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
