/* tests/fuzz/fuzz_seeds.c — writes the binary seeds that have no example
 * file in the tree: one msgpack message of every type (a small PROGRAM
 * with every instruction kind among them), a few .npy files and a few
 * .safetensors files.
 *
 *   fuzz_seeds DIR    writes DIR/wire/, DIR/npy/ and DIR/safetensors/ */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/io/ein_npy.h"
#include "common/io/ein_safetensors.h"
#include "common/io/ein_wire.h"

static void put(const char *dir, const char *name, const void *buf, size_t len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, len, f) != len || fclose(f) != 0) {
        fprintf(stderr, "fuzz_seeds: cannot write %s\n", path);
        exit(1);
    }
}

static void put_msg(const char *dir, const char *name, const ein_msg *m)
{
    void *buf = NULL;
    size_t len = 0;
    ein_error err = {0};
    if (ein_msg_encode(m, &buf, &len, &err) < 0) {
        fprintf(stderr, "fuzz_seeds: %s: %s\n", name, err.msg);
        exit(1);
    }
    put(dir, name, buf, len);
    free(buf);
}

static int add(ein_program *p, ein_instr *ins, int32_t *deps, int nd, int32_t *srcs, int ns)
{
    ein_error err = {0};
    ins->deps = deps, ins->ndeps = nd, ins->srcs = srcs, ins->nsrcs = ns;
    int id = ein_program_add_instr(p, ins, &err);
    if (id < 0) {
        fprintf(stderr, "fuzz_seeds: add_instr: %s\n", err.msg);
        exit(1);
    }
    return id;
}

static ein_box box2(int64_t a, int64_t b, int64_t c, int64_t d)
{
    ein_box x = {.rank = 2};
    x.lo[0] = a, x.hi[0] = b, x.lo[1] = c, x.hi[1] = d;
    return x;
}

static ein_program *program(void)
{
    ein_program *p = ein_program_new(0, 2);
    ein_error err = {0};
    ein_box ba = box2(0, 2, 0, 4), bb = box2(0, 4, 0, 2), bc = box2(0, 2, 0, 2),
            bh = box2(0, 1, 0, 2);
    int a = ein_program_add_buffer(p, EIN_F32, &ba, &err);
    int b = ein_program_add_buffer(p, EIN_F32, &bb, &err);
    int c = ein_program_add_buffer(p, EIN_F32, &bc, &err);
    int r = ein_program_add_buffer(p, EIN_F32, &bc, &err);
    int s = ein_program_add_buffer(p, EIN_F32, &bc, &err);
    int h = ein_program_add_buffer(p, EIN_F32, &bh, &err);
    int k = ein_program_add_buffer(p, EIN_F32, &bc, &err);
    if (!p || a < 0 || b < 0 || c < 0 || r < 0 || s < 0 || h < 0 || k < 0) {
        fprintf(stderr, "fuzz_seeds: add_buffer: %s\n", err.msg);
        exit(1);
    }
    ein_instr ins;
    int32_t d[4], x[4];
    memset(&ins, 0, sizeof ins);
    ins.kind = EIN_I_LOAD, ins.dst = a, ins.rank = 2, ins.shape[0] = 2, ins.shape[1] = 4;
    ins.path = "a.npy";
    strcpy(ins.op, "a");
    int i0 = add(p, &ins, NULL, 0, NULL, 0);
    memset(&ins, 0, sizeof ins);
    ins.kind = EIN_I_LOAD, ins.dst = b, ins.rank = 2, ins.shape[0] = 4, ins.shape[1] = 2;
    ins.seed = 7, ins.key = 11;
    int i1 = add(p, &ins, NULL, 0, NULL, 0);
    memset(&ins, 0, sizeof ins);
    ins.kind = EIN_I_KERNEL, ins.dst = c;
    ins.kernel.kind = EIN_KERNEL_EINSUM;
    strcpy(ins.kernel.subscripts, "ij,jk->ik");
    d[0] = i0, d[1] = i1, x[0] = a, x[1] = b;
    int i2 = add(p, &ins, d, 2, x, 2);
    memset(&ins, 0, sizeof ins);
    ins.kind = EIN_I_COPY, ins.dst = r, ins.peer = 1, ins.peer_buf = 2, ins.peer_offset = 512;
    int i3 = add(p, &ins, NULL, 0, NULL, 0);
    memset(&ins, 0, sizeof ins);
    ins.kind = EIN_I_AGG, ins.dst = s, ins.agg = EIN_AGG_SUM;
    d[0] = i2, d[1] = i3, x[0] = c, x[1] = r;
    int i4 = add(p, &ins, d, 2, x, 2);
    memset(&ins, 0, sizeof ins);
    ins.kind = EIN_I_SLICE, ins.dst = h;
    d[0] = i4, x[0] = s;
    int i5 = add(p, &ins, d, 1, x, 1);
    memset(&ins, 0, sizeof ins);
    ins.kind = EIN_I_NOTIFY, ins.dst = -1, ins.peer = 1;
    d[0] = i4, x[0] = s;
    add(p, &ins, d, 1, x, 1);
    memset(&ins, 0, sizeof ins);
    ins.kind = EIN_I_STORE, ins.dst = -1, ins.path = "y.npy", ins.rank = 2;
    ins.shape[0] = 2, ins.shape[1] = 2;
    d[0] = i4, x[0] = s;
    add(p, &ins, d, 1, x, 1);
    memset(&ins, 0, sizeof ins);
    ins.kind = EIN_I_KERNEL, ins.dst = k;
    ins.kernel.kind = EIN_KERNEL_SOFTMAX;
    d[0] = i4, x[0] = s;
    add(p, &ins, d, 1, x, 1);
    (void)i5;
    if (ein_program_validate(p, &err) < 0) {
        fprintf(stderr, "fuzz_seeds: program: %s\n", err.msg);
        exit(1);
    }
    return p;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_seeds DIR\n");
        return 2;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/wire", argv[1]);
    mkdir(argv[1], 0777);
    mkdir(dir, 0777);
    ein_msg m;
    memset(&m, 0, sizeof m);
    m.type = EIN_MSG_HELLO, m.device = 3, m.pid = 12345;
    put_msg(dir, "hello", &m);
    m.type = EIN_MSG_START;
    put_msg(dir, "start", &m);
    m.type = EIN_MSG_READY, m.buffer = 4;
    put_msg(dir, "ready", &m);
    m.type = EIN_MSG_HEARTBEAT, m.instr = 9;
    put_msg(dir, "heartbeat", &m);
    m.type = EIN_MSG_DONE, m.t_total = 1.5, m.t_kernel = 0.5, m.t_copy = 0.25, m.t_wait = 0.125;
    put_msg(dir, "done", &m);
    m.graphs_captured = 3, m.graphs_launched = 12, m.graphs_failed = 1;
    strcpy(m.graph_error, "instructions 4..9: cudaStreamEndCapture: operation not permitted");
    put_msg(dir, "done-graphs", &m);
    m.graphs_captured = m.graphs_launched = m.graphs_failed = 0;
    m.graph_error[0] = '\0';
    m.type = EIN_MSG_ERROR, m.code = -3, m.instr = 2;
    strcpy(m.op, "mm");
    strcpy(m.text, "cannot open a.npy");
    put_msg(dir, "error", &m);
    m.type = EIN_MSG_SHUTDOWN;
    put_msg(dir, "shutdown", &m);
    memset(&m, 0, sizeof m);
    m.type = EIN_MSG_PROGRAM, m.device = 0;
    m.program = program();
    put_msg(dir, "program", &m);
    ein_program_free(m.program);

    snprintf(dir, sizeof dir, "%s/npy", argv[1]);
    mkdir(dir, 0777);
    static const struct { const char *name; ein_dtype t; int rank; int64_t shape[3]; } f[] = {
        {"f32_2x3.npy", EIN_F32, 2, {2, 3}},  {"f16_4.npy", EIN_F16, 1, {4}},
        {"bf16_1x2x2.npy", EIN_BF16, 3, {1, 2, 2}}, {"f32_scalar.npy", EIN_F32, 0, {0}},
        {"f32_empty.npy", EIN_F32, 2, {0, 3}},
    };
    for (size_t i = 0; i < sizeof f / sizeof *f; i++) {
        char path[4200];
        ein_error err = {0};
        unsigned char data[64];
        for (int k = 0; k < 64; k++)
            data[k] = (unsigned char)(k * 7);
        snprintf(path, sizeof path, "%s/%s", dir, f[i].name);
        if (ein_npy_save(path, f[i].t, f[i].rank, f[i].shape, data, &err) < 0) {
            fprintf(stderr, "fuzz_seeds: %s: %s\n", path, err.msg);
            return 1;
        }
    }

    snprintf(dir, sizeof dir, "%s/safetensors", argv[1]);
    mkdir(dir, 0777);
    static unsigned char blob[256];
    for (int k = 0; k < 256; k++)
        blob[k] = (unsigned char)(k * 13 + 1);
    static const int64_t s23[] = {2, 3}, s4[] = {4}, s122[] = {1, 2, 2}, s03[] = {0, 3};
    const ein_st_write_tensor two[] = {
        {"layers.0.wq", EIN_F32, 2, s23, blob}, {"norm", EIN_BF16, 3, s122, blob},
        {"bias", EIN_F16, 1, s4, blob}, {"empty", EIN_F32, 2, s03, blob},
        {"scalar", EIN_F32, 0, s4, blob},
    };
    static const struct { const char *name; int n; } sf[] = {
        {"one.safetensors", 1}, {"five.safetensors", 5}, {"none.safetensors", 0},
    };
    for (size_t i = 0; i < sizeof sf / sizeof *sf; i++) {
        char path[4200];
        ein_error err = {0};
        snprintf(path, sizeof path, "%s/%s", dir, sf[i].name);
        if (ein_safetensors_write(path, two, sf[i].n, &err) < 0) {
            fprintf(stderr, "fuzz_seeds: %s: %s\n", path, err.msg);
            return 1;
        }
    }
    return 0;
}
