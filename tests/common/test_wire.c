/* tests/common/test_wire.c — the Program IR and the wire format: builders,
 * validation, round trips of every message type (with a program using
 * every instruction kind), and hostile input: garbage, every truncation,
 * huge declared counts, wrong types, invalid programs, and a mutation
 * fuzz loop. A decoder may only answer 0 or EIN_EPROTO, and never leak. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/ein_error.h"
#include "common/ir/ein_program.h"
#include "common/io/ein_rand.h"
#include "common/io/ein_wire.h"

static uint64_t rng_state = 0xa4093822299f31d0ull;
static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static ein_box box2(int64_t lo0, int64_t hi0, int64_t lo1, int64_t hi1)
{
    ein_box b;
    memset(&b, 0, sizeof b);
    b.rank = 2;
    b.lo[0] = lo0, b.hi[0] = hi0, b.lo[1] = lo1, b.hi[1] = hi1;
    return b;
}

static ein_box box1(int64_t lo0, int64_t hi0)
{
    ein_box b;
    memset(&b, 0, sizeof b);
    b.rank = 1;
    b.lo[0] = lo0, b.hi[0] = hi0;
    return b;
}

static ein_box box3(int64_t lo0, int64_t hi0, int64_t lo1, int64_t hi1, int64_t lo2, int64_t hi2)
{
    ein_box b = box2(lo0, hi0, lo1, hi1);
    b.rank = 3;
    b.lo[2] = lo2, b.hi[2] = hi2;
    return b;
}

static int add_buf(ein_program *p, ein_dtype t, ein_box b)
{
    ein_error err = {0};
    int id = ein_program_add_buffer(p, t, &b, &err);
    if (id < 0)
        fail_msg("add_buffer: %s", err.msg);
    return id;
}

static int add_ins(ein_program *p, ein_instr *ins, const int32_t *deps, int nd, const int32_t *srcs, int ns)
{
    ein_error err = {0};
    ins->deps = (int32_t *)deps;
    ins->ndeps = nd;
    ins->srcs = (int32_t *)srcs;
    ins->nsrcs = ns;
    int id = ein_program_add_instr(p, ins, &err);
    if (id < 0)
        fail_msg("add_instr: %s", err.msg);
    return id;
}

static ein_instr blank(ein_instr_kind k, const char *op, int32_t dst)
{
    ein_instr ins;
    memset(&ins, 0, sizeof ins);
    ins.kind = k;
    ins.dst = dst;
    snprintf(ins.op, sizeof ins.op, "%s", op);
    return ins;
}

/* Instructions 15..31 and buffers 12..34 of the sample program: a LLaMA-
 * like stretch using every kernel kind beyond einsum (T = 8 tokens in two
 * sequences [0,3) [3,8), 4 query heads, 2 kv heads, head_dim 4), then
 * spare buffers 30..34 that mutations point kernels at. `scalar` is the
 * rank-0 buffer 10. */
enum {
    S_X = 12, S_W, S_BIAS, S_RMS, S_LN, S_ROPE, S_Q, S_KVFLAT, S_K, S_ATT, S_MERGED, S_SOFT, S_RED, S_DIV,
    S_ROW, S_SUB, S_CAT, S_SIG,
    S_KV_LATE, S_KV_D2, S_Q_D1, S_VEC8, S_Q_LATE,
};
enum {
    I_LOADX = 15, I_LOADW, I_RMS, I_LN, I_ROPE, I_SPLITQ, I_SLICEKV, I_SPLITK, I_ATT, I_MERGE, I_SOFT, I_RED,
    I_DIV, I_SLICEROW, I_SUB, I_CAT, I_SIG, I_NSAMPLE
};

static void add_llama_part(ein_program *p, int scalar)
{
    static int64_t seq_ends[] = {3, 8};
    int64_t offsets[] = {0, 16};
    ein_instr ins;
    int32_t d[4], s[4];
    assert_int_equal(add_buf(p, EIN_F32, box2(0, 8, 0, 16)), S_X);
    assert_int_equal(add_buf(p, EIN_F32, box1(0, 16)), S_W);
    assert_int_equal(add_buf(p, EIN_F16, box1(0, 16)), S_BIAS);
    assert_int_equal(add_buf(p, EIN_F32, box2(0, 8, 0, 16)), S_RMS);
    assert_int_equal(add_buf(p, EIN_BF16, box2(0, 8, 0, 16)), S_LN);
    assert_int_equal(add_buf(p, EIN_F32, box2(0, 8, 0, 16)), S_ROPE);
    assert_int_equal(add_buf(p, EIN_F32, box3(0, 4, 0, 8, 0, 4)), S_Q);
    assert_int_equal(add_buf(p, EIN_F32, box2(0, 8, 0, 8)), S_KVFLAT);
    assert_int_equal(add_buf(p, EIN_F32, box3(0, 2, 0, 8, 0, 4)), S_K);
    assert_int_equal(add_buf(p, EIN_F32, box3(0, 4, 0, 8, 0, 4)), S_ATT);
    assert_int_equal(add_buf(p, EIN_F32, box2(0, 8, 0, 16)), S_MERGED);
    assert_int_equal(add_buf(p, EIN_F32, box2(0, 8, 0, 16)), S_SOFT);
    assert_int_equal(add_buf(p, EIN_F32, box1(0, 16)), S_RED);
    assert_int_equal(add_buf(p, EIN_F32, box2(0, 8, 0, 16)), S_DIV);
    assert_int_equal(add_buf(p, EIN_F32, box2(5, 6, 0, 16)), S_ROW);
    assert_int_equal(add_buf(p, EIN_F32, box2(0, 8, 0, 16)), S_SUB);
    assert_int_equal(add_buf(p, EIN_F32, box2(0, 8, 0, 24)), S_CAT);
    assert_int_equal(add_buf(p, EIN_F32, box2(0, 8, 0, 24)), S_SIG);
    assert_int_equal(add_buf(p, EIN_F32, box3(0, 2, 1, 8, 0, 4)), S_KV_LATE);
    assert_int_equal(add_buf(p, EIN_F32, box3(0, 2, 0, 8, 0, 2)), S_KV_D2);
    assert_int_equal(add_buf(p, EIN_F32, box3(0, 4, 0, 8, 1, 5)), S_Q_D1);
    assert_int_equal(add_buf(p, EIN_F32, box1(0, 8)), S_VEC8);
    assert_int_equal(add_buf(p, EIN_F32, box3(0, 4, 3, 8, 0, 4)), S_Q_LATE);

    ins = blank(EIN_I_LOAD, "x", S_X);
    ins.seed = 7, ins.key = 1, ins.rank = 2, ins.shape[0] = 8, ins.shape[1] = 16;
    assert_int_equal(add_ins(p, &ins, NULL, 0, NULL, 0), I_LOADX);
    ins = blank(EIN_I_LOAD, "w", S_W);
    ins.seed = 7, ins.key = 2, ins.rank = 1, ins.shape[0] = 16;
    assert_int_equal(add_ins(p, &ins, NULL, 0, NULL, 0), I_LOADW);

    ins = blank(EIN_I_KERNEL, "rms", S_RMS);
    ins.kernel.kind = EIN_KERNEL_RMSNORM;
    ins.kernel.eps = 1e-5;
    d[0] = I_LOADX, d[1] = I_LOADW, s[0] = S_X, s[1] = S_W;
    assert_int_equal(add_ins(p, &ins, d, 2, s, 2), I_RMS);
    ins = blank(EIN_I_KERNEL, "ln", S_LN);
    ins.kernel.kind = EIN_KERNEL_LAYERNORM;
    ins.kernel.eps = 0;
    s[2] = S_BIAS;
    assert_int_equal(add_ins(p, &ins, d, 2, s, 3), I_LN);
    ins = blank(EIN_I_KERNEL, "rope", S_ROPE);
    ins.kernel.kind = EIN_KERNEL_ROPE;
    ins.kernel.head_dim = 4, ins.kernel.theta = 10000.0;
    ins.kernel.list = seq_ends, ins.kernel.nlist = 2;
    d[0] = I_RMS, s[0] = S_RMS;
    assert_int_equal(add_ins(p, &ins, d, 1, s, 1), I_ROPE);
    ins = blank(EIN_I_KERNEL, "q", S_Q);
    ins.kernel.kind = EIN_KERNEL_SPLIT_HEADS;
    ins.kernel.head_dim = 4;
    d[0] = I_ROPE, s[0] = S_ROPE;
    assert_int_equal(add_ins(p, &ins, d, 1, s, 1), I_SPLITQ);
    ins = blank(EIN_I_KERNEL, "kvslice", S_KVFLAT);
    ins.kernel.kind = EIN_KERNEL_SLICE;
    ins.kernel.axis = 1, ins.kernel.start = 8; /* hidden [8,16) of ln, as [0,8) */
    d[0] = I_LN, s[0] = S_LN;
    assert_int_equal(add_ins(p, &ins, d, 1, s, 1), I_SLICEKV);
    ins = blank(EIN_I_KERNEL, "k", S_K);
    ins.kernel.kind = EIN_KERNEL_SPLIT_HEADS;
    ins.kernel.head_dim = 4; /* kv heads [0,2) <- hidden [0,8) */
    d[0] = I_SLICEKV, s[0] = S_KVFLAT;
    assert_int_equal(add_ins(p, &ins, d, 1, s, 1), I_SPLITK);
    ins = blank(EIN_I_KERNEL, "att", S_ATT);
    ins.kernel.kind = EIN_KERNEL_ATTENTION;
    ins.kernel.group = 2;
    ins.kernel.list = seq_ends, ins.kernel.nlist = 2;
    d[0] = I_SPLITQ, d[1] = I_SPLITK, s[0] = S_Q, s[1] = S_K, s[2] = S_K;
    assert_int_equal(add_ins(p, &ins, d, 2, s, 3), I_ATT);
    ins = blank(EIN_I_KERNEL, "merge", S_MERGED);
    ins.kernel.kind = EIN_KERNEL_MERGE_HEADS;
    ins.kernel.head_dim = 4;
    d[0] = I_ATT, s[0] = S_ATT;
    assert_int_equal(add_ins(p, &ins, d, 1, s, 1), I_MERGE);
    ins = blank(EIN_I_KERNEL, "soft", S_SOFT);
    ins.kernel.kind = EIN_KERNEL_SOFTMAX;
    ins.kernel.axis = 1;
    d[0] = I_MERGE, s[0] = S_MERGED;
    assert_int_equal(add_ins(p, &ins, d, 1, s, 1), I_SOFT);
    ins = blank(EIN_I_KERNEL, "colmax", S_RED);
    ins.kernel.kind = EIN_KERNEL_REDUCE;
    ins.kernel.axes = 1u << 0, ins.kernel.reduce = EIN_AGG_MAX;
    d[0] = I_SOFT, s[0] = S_SOFT;
    assert_int_equal(add_ins(p, &ins, d, 1, s, 1), I_RED);
    ins = blank(EIN_I_KERNEL, "div", S_DIV);
    ins.kernel.kind = EIN_KERNEL_BINARY;
    ins.kernel.binary = EIN_BIN_DIV; /* [8,16] / [16]: broadcast over rows */
    d[0] = I_SOFT, d[1] = I_RED, s[0] = S_SOFT, s[1] = S_RED;
    assert_int_equal(add_ins(p, &ins, d, 2, s, 2), I_DIV);
    ins = blank(EIN_I_KERNEL, "row", S_ROW);
    ins.kernel.kind = EIN_KERNEL_SLICE;
    ins.kernel.axis = 0, ins.kernel.start = 2; /* row 7 of div lands at 5 */
    d[0] = I_DIV, s[0] = S_DIV;
    assert_int_equal(add_ins(p, &ins, d, 1, s, 1), I_SLICEROW);
    ins = blank(EIN_I_KERNEL, "sub", S_SUB);
    ins.kernel.kind = EIN_KERNEL_BINARY;
    ins.kernel.binary = EIN_BIN_SUB; /* row [5,6) and a rank-0 scalar, both broadcast */
    d[0] = I_SLICEROW, s[0] = S_ROW, s[1] = scalar;
    assert_int_equal(add_ins(p, &ins, d, 1, s, 2), I_SUB);
    ins = blank(EIN_I_KERNEL, "cat", S_CAT);
    ins.kernel.kind = EIN_KERNEL_CONCAT;
    ins.kernel.axis = 1;
    ins.kernel.list = offsets, ins.kernel.nlist = 2;
    d[0] = I_SUB, d[1] = I_SLICEKV, s[0] = S_SUB, s[1] = S_KVFLAT;
    /* input 1, [0,8) along the axis in its own coordinates, at 16 */
    assert_int_equal(add_ins(p, &ins, d, 2, s, 2), I_CAT);
    ins = blank(EIN_I_KERNEL, "sig", S_SIG);
    ins.kernel.kind = EIN_KERNEL_UNARY;
    ins.kernel.unary = EIN_UN_SIGMOID;
    d[0] = I_CAT, s[0] = S_CAT;
    assert_int_equal(add_ins(p, &ins, d, 1, s, 1), I_SIG);
    offsets[0] = 99; /* the program holds its own copy */
}

/* Device 1 of 4: every instruction kind, every kernel kind, all dtypes,
 * a rank-0 buffer, a generated and a file input. */
static ein_program *sample_program(void)
{
    ein_program *p = ein_program_new(1, 4);
    assert_non_null(p);
    int b0 = add_buf(p, EIN_F32, box2(0, 4, 0, 8));
    int b1 = add_buf(p, EIN_F32, box2(0, 8, 0, 6));
    int b2 = add_buf(p, EIN_F32, box2(0, 4, 0, 6));
    int b3 = add_buf(p, EIN_F32, box2(0, 4, 0, 6));
    int b4 = add_buf(p, EIN_F32, box2(0, 4, 0, 6));
    int b5 = add_buf(p, EIN_F32, box2(0, 2, 0, 6));
    int b6 = add_buf(p, EIN_F32, box2(2, 4, 0, 6));
    int b7 = add_buf(p, EIN_F32, box2(0, 4, 0, 6));
    int b8 = add_buf(p, EIN_F32, box2(0, 4, 0, 6));
    int b9 = add_buf(p, EIN_F32, box2(0, 4, 0, 6));
    ein_box scalar;
    memset(&scalar, 0, sizeof scalar);
    int b10 = add_buf(p, EIN_BF16, scalar);
    int b11 = add_buf(p, EIN_F16, box2(16, 20, 3, 5));
    ein_instr ins;
    int32_t d[4], s[4];

    ins = blank(EIN_I_LOAD, "a", b0);
    ins.path = "/data/a.npy";
    ins.rank = 2, ins.shape[0] = 4, ins.shape[1] = 8;
    int i0 = add_ins(p, &ins, NULL, 0, NULL, 0);
    ins = blank(EIN_I_LOAD, "b", b1);
    ins.seed = UINT64_MAX - 3;
    ins.key = ein_rand_key("b");
    ins.rank = 2, ins.shape[0] = 8, ins.shape[1] = 6;
    int i1 = add_ins(p, &ins, NULL, 0, NULL, 0);
    ins = blank(EIN_I_KERNEL, "mm", b2);
    ins.kernel.kind = EIN_KERNEL_EINSUM;
    strcpy(ins.kernel.subscripts, "ij,jk->ik");
    d[0] = i0, d[1] = i1, s[0] = b0, s[1] = b1;
    int i2 = add_ins(p, &ins, d, 2, s, 2);
    ins = blank(EIN_I_KERNEL, "half", b3);
    ins.kernel.kind = EIN_KERNEL_UNARY;
    ins.kernel.unary = EIN_UN_SCALE;
    ins.kernel.scalar = -0.125;
    d[0] = i2, s[0] = b2;
    int i3 = add_ins(p, &ins, d, 1, s, 1);
    ins = blank(EIN_I_KERNEL, "sum", b4);
    ins.kernel.kind = EIN_KERNEL_BINARY;
    ins.kernel.binary = EIN_BIN_MUL;
    d[0] = i2, d[1] = i3, s[0] = b2, s[1] = b3;
    int i4 = add_ins(p, &ins, d, 2, s, 2);
    ins = blank(EIN_I_SLICE, "", b5);
    d[0] = i4, s[0] = b4;
    int i5 = add_ins(p, &ins, d, 1, s, 1);
    ins = blank(EIN_I_SLICE, "", b6);
    int i6 = add_ins(p, &ins, d, 1, s, 1);
    ins = blank(EIN_I_CONCAT, "cat", b7);
    d[0] = i5, d[1] = i6, s[0] = b5, s[1] = b6;
    int i7 = add_ins(p, &ins, d, 2, s, 2);
    ins = blank(EIN_I_NOTIFY, "cat", -1);
    ins.peer = 2, ins.peer_buf = b7;
    d[0] = i7, s[0] = b7;
    add_ins(p, &ins, d, 1, s, 1);
    ins = blank(EIN_I_COPY, "x", b8);
    ins.peer = 0, ins.peer_buf = 3, ins.peer_offset = 4096;
    int i9 = add_ins(p, &ins, NULL, 0, NULL, 0);
    ins = blank(EIN_I_AGG, "red", b9);
    ins.agg = EIN_AGG_MAX;
    d[0] = i7, d[1] = i9, s[0] = b7, s[1] = b8;
    int i10 = add_ins(p, &ins, d, 2, s, 2);
    ins = blank(EIN_I_STORE, "out", -1);
    ins.path = "/out/c.npy";
    ins.rank = 2, ins.shape[0] = 4, ins.shape[1] = 6;
    d[0] = i10, s[0] = b9;
    add_ins(p, &ins, d, 1, s, 1);
    ins = blank(EIN_I_LOAD, "s", b10);
    ins.seed = 1, ins.key = 2, ins.rank = 0;
    add_ins(p, &ins, NULL, 0, NULL, 0);
    ins = blank(EIN_I_LOAD, "h", b11);
    ins.path = "/data/h.npy";
    ins.rank = 2, ins.shape[0] = 32, ins.shape[1] = 5;
    int i13 = add_ins(p, &ins, NULL, 0, NULL, 0);
    ins = blank(EIN_I_KERNEL, "tr", b11);
    ins.kernel.kind = EIN_KERNEL_EINSUM;
    strcpy(ins.kernel.subscripts, "ab->ab");
    d[0] = i13, s[0] = b11;
    add_ins(p, &ins, d, 1, s, 1);
    add_llama_part(p, b10);
    return p;
}

static void assert_programs_equal(const ein_program *a, const ein_program *b)
{
    assert_int_equal(a->device, b->device);
    assert_int_equal(a->ndevices, b->ndevices);
    assert_true(a->segment_bytes == b->segment_bytes);
    assert_int_equal(a->nbuffers, b->nbuffers);
    assert_int_equal(a->ninstrs, b->ninstrs);
    for (int i = 0; i < a->nbuffers; i++) {
        const ein_pbuffer *x = &a->buffers[i], *y = &b->buffers[i];
        assert_int_equal(x->dtype, y->dtype);
        assert_true(ein_box_equal(&x->box, &y->box));
        assert_true(x->offset == y->offset);
        assert_true(x->bytes == y->bytes);
    }
    for (int i = 0; i < a->ninstrs; i++) {
        const ein_instr *x = &a->instrs[i], *y = &b->instrs[i];
        assert_int_equal(x->kind, y->kind);
        assert_int_equal(x->ndeps, y->ndeps);
        assert_int_equal(x->nsrcs, y->nsrcs);
        for (int j = 0; j < x->ndeps; j++)
            assert_int_equal(x->deps[j], y->deps[j]);
        for (int j = 0; j < x->nsrcs; j++)
            assert_int_equal(x->srcs[j], y->srcs[j]);
        assert_int_equal(x->dst, y->dst);
        assert_string_equal(x->op, y->op);
        switch (x->kind) {
        case EIN_I_LOAD:
        case EIN_I_STORE:
            assert_int_equal(!x->path, !y->path);
            if (x->path)
                assert_string_equal(x->path, y->path);
            assert_int_equal(x->rank, y->rank);
            for (int d = 0; d < x->rank; d++)
                assert_int_equal(x->shape[d], y->shape[d]);
            if (x->kind == EIN_I_LOAD) {
                assert_true(x->seed == y->seed);
                assert_true(x->key == y->key);
            }
            break;
        case EIN_I_KERNEL: {
            /* Every field: a kind's unused fields are zero on both sides. */
            const ein_kernel *kx = &x->kernel, *ky = &y->kernel;
            assert_int_equal(kx->kind, ky->kind);
            assert_string_equal(kx->subscripts, ky->subscripts);
            assert_int_equal(kx->unary, ky->unary);
            assert_true(kx->scalar == ky->scalar);
            assert_int_equal(kx->binary, ky->binary);
            assert_int_equal(kx->axis, ky->axis);
            assert_true(kx->axes == ky->axes);
            assert_int_equal(kx->reduce, ky->reduce);
            assert_true(kx->start == ky->start);
            assert_true(kx->eps == ky->eps);
            assert_true(kx->theta == ky->theta);
            assert_true(kx->head_dim == ky->head_dim);
            assert_true(kx->group == ky->group);
            assert_int_equal(kx->nlist, ky->nlist);
            assert_int_equal(!kx->list, !ky->list);
            for (int j = 0; j < kx->nlist; j++)
                assert_true(kx->list[j] == ky->list[j]);
            break;
        }
        case EIN_I_AGG:
            assert_int_equal(x->agg, y->agg);
            break;
        case EIN_I_COPY:
            assert_true(x->peer_offset == y->peer_offset);
            /* fall through */
        case EIN_I_NOTIFY:
            assert_int_equal(x->peer, y->peer);
            assert_int_equal(x->peer_buf, y->peer_buf);
            break;
        default:
            break;
        }
    }
}

/* ---- builders, names, validation ------------------------------------- */

static void test_builders(void **state)
{
    (void)state;
    ein_error err = {0};
    ein_program *p = sample_program();
    if (ein_program_validate(p, &err) != 0)
        fail_msg("sample program invalid: %s", err.msg);
    assert_int_equal(p->nbuffers, S_Q_LATE + 1);
    assert_int_equal(p->ninstrs, I_NSAMPLE);
    uint64_t end = 0;
    for (int b = 0; b < p->nbuffers; b++) {
        assert_int_equal(p->buffers[b].offset % 256, 0);
        assert_true(p->buffers[b].offset >= end); /* appended, disjoint */
        assert_true(p->buffers[b].bytes == (uint64_t)ein_box_volume(&p->buffers[b].box) *
                                               ein_dtype_size(p->buffers[b].dtype));
        end = p->buffers[b].offset + p->buffers[b].bytes;
    }
    assert_true(p->segment_bytes == end);
    /* add_instr copied its arrays and path */
    assert_string_equal(p->instrs[0].path, "/data/a.npy");
    assert_null(p->instrs[1].path);
    assert_int_equal(p->instrs[2].deps[1], 1);
    /* invalid buffers are refused */
    ein_box bad = box2(0, 4, 3, 3);
    assert_int_equal(ein_program_add_buffer(p, EIN_F32, &bad, &err), EIN_EINVAL);
    bad = box2(0, 4, 0, 4);
    assert_int_equal(ein_program_add_buffer(p, (ein_dtype)EIN_DTYPE_COUNT, &bad, &err), EIN_EINVAL);
    bad.rank = 9;
    assert_int_equal(ein_program_add_buffer(p, EIN_F32, &bad, &err), EIN_EINVAL);
    ein_instr ins = blank(EIN_I_COPY, "", 0);
    ins.ndeps = 2; /* but no array */
    assert_int_equal(ein_program_add_instr(p, &ins, &err), EIN_EINVAL);
    /* kernel lists are deep-copied; an empty one is NULL, a bad one refused */
    const ein_kernel *rope = &p->instrs[I_ROPE].kernel, *cat = &p->instrs[I_CAT].kernel;
    assert_int_equal(rope->nlist, 2);
    assert_true(rope->list[0] == 3 && rope->list[1] == 8);
    assert_true(cat->list != rope->list);
    assert_true(cat->list[0] == 0 && cat->list[1] == 16); /* not the caller's later 99 */
    assert_null(p->instrs[I_SOFT].kernel.list);
    int64_t stray = 5;
    ins = blank(EIN_I_KERNEL, "k", 1);
    ins.kernel.kind = EIN_KERNEL_ROPE;
    ins.kernel.list = &stray, ins.kernel.nlist = 0;
    int32_t one = 1;
    ins.srcs = &one, ins.nsrcs = 1;
    int id = ein_program_add_instr(p, &ins, &err);
    assert_true(id >= 0);
    assert_null(p->instrs[id].kernel.list);
    ins.kernel.list = NULL, ins.kernel.nlist = 1;
    assert_int_equal(ein_program_add_instr(p, &ins, &err), EIN_EINVAL);
    ins.kernel.list = &stray, ins.kernel.nlist = -1;
    assert_int_equal(ein_program_add_instr(p, &ins, &err), EIN_EINVAL);
    ins.kernel.nlist = EIN_KERNEL_LIST_MAX + 1;
    assert_int_equal(ein_program_add_instr(p, &ins, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "kernel list"));
    ein_program_free(p);
    ein_program_free(NULL);

    assert_string_equal(ein_instr_kind_name(EIN_I_CONCAT), "concat");
    assert_string_equal(ein_instr_kind_name(EIN_I_NOTIFY), "notify");
    assert_string_equal(ein_instr_kind_name((ein_instr_kind)99), "?");
    assert_string_equal(ein_unary_name(EIN_UN_GELU), "gelu");
    assert_string_equal(ein_binary_name(EIN_BIN_SUB), "sub");
    assert_string_equal(ein_kernel_kind_name(EIN_KERNEL_BINARY), "binary");
    assert_string_equal(ein_kernel_kind_name(EIN_KERNEL_SPLIT_HEADS), "split_heads");
    assert_string_equal(ein_kernel_kind_name(EIN_KERNEL_COUNT), "?");
    assert_string_equal(ein_unary_name(EIN_UN_SQUARE), "square");
    assert_string_equal(ein_unary_name(EIN_UN_GELU_EXACT), "gelu_exact");
    assert_int_equal(ein_unary_by_name("gelu_exact"), EIN_UN_GELU_EXACT);
    assert_int_equal(ein_unary_by_name("gelu_exactly"), -1);
    assert_int_equal(ein_unary_by_name(NULL), -1);
    assert_true(ein_unary_takes_scalar(EIN_UN_SCALE) && ein_unary_takes_scalar(EIN_UN_ADDC));
    assert_false(ein_unary_takes_scalar(EIN_UN_GELU_EXACT) || ein_unary_takes_scalar(EIN_UN_COUNT));
    assert_string_equal(ein_binary_op_name(EIN_BIN_MAX), "maximum");
    assert_int_equal(ein_binary_by_op_name("maximum"), EIN_BIN_MAX);
    assert_int_equal(ein_binary_by_op_name("max"), -1);
    assert_string_equal(ein_unary_name(EIN_UN_COUNT), "?");
    assert_string_equal(ein_binary_name(EIN_BIN_DIV), "div");
    assert_string_equal(ein_binary_name((ein_binary)-1), "?");
    /* every value has a real, distinct name */
    for (int a = 0; a < EIN_KERNEL_COUNT; a++) {
        assert_non_null(ein_kernel_kind_name((ein_kernel_kind)a));
        assert_string_not_equal(ein_kernel_kind_name((ein_kernel_kind)a), "?");
        for (int b = 0; b < a; b++)
            assert_string_not_equal(ein_kernel_kind_name((ein_kernel_kind)a), ein_kernel_kind_name((ein_kernel_kind)b));
    }
    for (int a = 0; a < EIN_UN_COUNT; a++) {
        assert_string_not_equal(ein_unary_name((ein_unary)a), "?");
        for (int b = 0; b < a; b++)
            assert_string_not_equal(ein_unary_name((ein_unary)a), ein_unary_name((ein_unary)b));
    }
    for (int a = 0; a < EIN_BIN_COUNT; a++) {
        assert_string_not_equal(ein_binary_name((ein_binary)a), "?");
        for (int b = 0; b < a; b++)
            assert_string_not_equal(ein_binary_name((ein_binary)a), ein_binary_name((ein_binary)b));
    }
    assert_string_equal(ein_agg_name(EIN_AGG_SUM), "sum");
    assert_string_equal(ein_msg_type_name(EIN_MSG_HEARTBEAT), "heartbeat");
    assert_string_equal(ein_msg_type_name((ein_msg_type)-1), "?");
}

/* Break the sample program with `mutate`; validation must fail naming
 * `needle`, and so must decoding its encoding (naming `dneedle` where the
 * decoder's own type and range checks catch it first). */
static void expect_invalid3(void (*mutate)(ein_program *), const char *needle, const char *dneedle)
{
    ein_error err = {0};
    ein_program *p = sample_program();
    mutate(p);
    int rc = ein_program_validate(p, &err);
    if (rc != EIN_EPROTO || !strstr(err.msg, needle))
        fail_msg("validate: rc %d, message '%s', want '%s'", rc, err.msg, needle);
    ein_msg m;
    memset(&m, 0, sizeof m);
    m.type = EIN_MSG_PROGRAM;
    m.program = p;
    void *buf = NULL;
    size_t len = 0;
    assert_int_equal(ein_msg_encode(&m, &buf, &len, &err), 0); /* encoding does not validate */
    ein_msg out;
    rc = ein_msg_decode(buf, len, &out, &err);
    if (rc != EIN_EPROTO || !strstr(err.msg, dneedle))
        fail_msg("decode: rc %d, message '%s', want '%s'", rc, err.msg, dneedle);
    assert_null(out.program);
    free(buf);
    ein_program_free(p);
}

static void expect_invalid(void (*mutate)(ein_program *), const char *needle)
{
    expect_invalid3(mutate, needle, needle);
}

static void m_dep_forward(ein_program *p) { p->instrs[2].deps[0] = 5; }
static void m_dep_self(ein_program *p) { p->instrs[3].deps[0] = 3; }
static void m_beyond_segment(ein_program *p) { p->segment_bytes -= 1; }
static void m_copy_to_self(ein_program *p) { p->instrs[9].peer = 1; }
static void m_notify_self(ein_program *p) { p->instrs[8].peer = 1; }
static void m_peer_range(ein_program *p) { p->instrs[9].peer = 4; }
static void m_bytes(ein_program *p) { p->buffers[3].bytes += 4; }
static void m_misaligned(ein_program *p) { p->buffers[3].offset += 2; }
static void m_lo_hi(ein_program *p) { p->buffers[3].box.hi[1] = 0; }
static void m_src_range(ein_program *p) { p->instrs[5].srcs[0] = 99; }
static void m_dst_range(ein_program *p) { p->instrs[5].dst = -2; }
static void m_store_dst(ein_program *p) { p->instrs[11].dst = 3; }
static void m_load_src(ein_program *p)
{
    p->instrs[0].srcs = calloc(1, sizeof(int32_t));
    assert_non_null(p->instrs[0].srcs);
    p->instrs[0].nsrcs = 1;
}
static void m_slice_outside(ein_program *p) { p->buffers[5].box.hi[1] = 7; p->buffers[5].bytes += 8; }
static void m_concat_outside(ein_program *p) { p->buffers[7].box.lo[0] = 1; p->buffers[7].bytes -= 24; }
static void m_agg_box(ein_program *p) { p->instrs[10].srcs[1] = 5; }
static void m_agg_none(ein_program *p) { p->instrs[10].agg = EIN_AGG_NONE; }
static void m_einsum_extent(ein_program *p) { strcpy(p->instrs[2].kernel.subscripts, "ij,kj->ik"); }
static void m_einsum_repeat(ein_program *p) { strcpy(p->instrs[2].kernel.subscripts, "ij,jj->ij"); }
static void m_einsum_upper(ein_program *p) { strcpy(p->instrs[2].kernel.subscripts, "Ij,jk->Ik"); }
static void m_einsum_nops(ein_program *p) { strcpy(p->instrs[2].kernel.subscripts, "ij->ij"); }
static void m_einsum_out_extent(ein_program *p) { strcpy(p->instrs[2].kernel.subscripts, "ij,jk->ki"); }
static void m_einsum_arrow(ein_program *p) { strcpy(p->instrs[2].kernel.subscripts, "ij,jk"); }
static void m_einsum_rank(ein_program *p) { strcpy(p->instrs[2].kernel.subscripts, "ijk,jk->ik"); }
static void m_einsum_out(ein_program *p) { strcpy(p->instrs[2].kernel.subscripts, "ij,jk->iz"); }
static void m_unary_box(ein_program *p) { p->instrs[3].srcs[0] = 0; }
static void m_store_shape(ein_program *p) { p->instrs[11].shape[1] = 5; }
static void m_load_rank(ein_program *p) { p->instrs[0].rank = 3; p->instrs[0].shape[2] = 1; }
static void m_store_path(ein_program *p) { free(p->instrs[11].path); p->instrs[11].path = NULL; }
static void m_op_unterminated(ein_program *p) { memset(p->instrs[4].op, 'x', EIN_NAME_MAX); }
static void m_device(ein_program *p) { p->device = 4; }
static void m_binary_arity(ein_program *p) { p->instrs[4].nsrcs = 1; }

static void test_validate_rejects(void **state)
{
    (void)state;
    expect_invalid(m_dep_forward, "dependency 5 is not an earlier instruction");
    expect_invalid(m_dep_self, "dependency 3");
    expect_invalid(m_beyond_segment, "runs past the segment");
    expect_invalid(m_copy_to_self, "is this device");
    expect_invalid(m_notify_self, "is this device");
    expect_invalid(m_peer_range, "peer 4 out of range");
    expect_invalid(m_bytes, "buffer 3");
    expect_invalid(m_misaligned, "not aligned");
    expect_invalid(m_lo_hi, "lo < hi");
    expect_invalid(m_src_range, "source buffer 99 out of range");
    expect_invalid3(m_dst_range, "dst buffer -2", "instrs[5].dst: integer out of range");
    expect_invalid(m_store_dst, "dst must be -1");
    expect_invalid(m_load_src, "1 sources");
    expect_invalid(m_slice_outside, "does not contain");
    expect_invalid(m_concat_outside, "not inside dst");
    expect_invalid(m_agg_box, "differs from dst");
    expect_invalid(m_agg_none, "invalid aggregation");
    expect_invalid(m_einsum_extent, "(kernel 'mm'): einsum 'ij,kj->ik': index 'j' has extents 8 and 6");
    /* Syntax errors: ein_einsum_parse's message after the instruction. */
    expect_invalid(m_einsum_repeat, "(kernel 'mm'): einsum 'ij,jj->ij': index j repeated in operand 2");
    expect_invalid(m_einsum_upper, "(kernel 'mm'): einsum 'Ij,jk->Ik': unexpected character 'I'");
    expect_invalid(m_einsum_arrow, "(kernel 'mm'): einsum 'ij,jk': missing '->'");
    expect_invalid(m_einsum_out, "einsum 'ij,jk->iz': output index z appears in no operand");
    expect_invalid(m_einsum_rank, "operand 0 has 3 letters but its buffer rank 2");
    expect_invalid(m_einsum_nops, "einsum 'ij->ij' has 1 operands but 2 sources");
    expect_invalid(m_einsum_out_extent, "output index 'k' has extent 4, inputs 6");
    expect_invalid(m_unary_box, "box differs");
    expect_invalid(m_store_shape, "not inside the tensor's shape");
    expect_invalid(m_load_rank, "rank 2 but the tensor has rank 3");
    expect_invalid(m_store_path, "missing path");
    expect_invalid3(m_op_unterminated, "instr 4: op name not NUL-terminated", "instrs[4].op: string of 64 bytes");
    expect_invalid(m_device, "device 4 of 4");
    expect_invalid(m_binary_arity, "binary kernel takes 2");
}

/* ---- the kernel kinds of the LLaMA operators -------------------------- */

static void set_srcs(ein_instr *ins, int n, int32_t first)
{
    free(ins->srcs);
    ins->srcs = malloc((size_t)n * sizeof *ins->srcs);
    assert_non_null(ins->srcs);
    for (int j = 0; j < n; j++)
        ins->srcs[j] = first;
    ins->nsrcs = n;
}

static void set_list(ein_kernel *k, int n, const int64_t *v)
{
    free(k->list);
    k->list = n ? malloc((size_t)n * sizeof *k->list) : NULL;
    assert_true(n == 0 || k->list);
    if (n)
        memcpy(k->list, v, (size_t)n * sizeof *v);
    k->nlist = n;
}

static void set_list2(ein_kernel *k, int64_t a, int64_t b)
{
    int64_t v[2] = {a, b};
    set_list(k, 2, v);
}

/* Validation only: for what the encoder cannot send (a list it would not
 * send, or a NULL one it refuses). */
static void expect_rejected(void (*mutate)(ein_program *), const char *needle)
{
    ein_error err = {0};
    ein_program *p = sample_program();
    mutate(p);
    int rc = ein_program_validate(p, &err);
    if (rc != EIN_EPROTO || !strstr(err.msg, needle))
        fail_msg("validate: rc %d, message '%s', want '%s'", rc, err.msg, needle);
    ein_program_free(p);
}

/* The mutated sample stays valid and round-trips. */
static void expect_valid(void (*mutate)(ein_program *))
{
    ein_error err = {0};
    ein_program *p = sample_program(), *q = NULL;
    mutate(p);
    if (ein_program_validate(p, &err) != 0)
        fail_msg("validate: %s", err.msg);
    void *buf = NULL;
    size_t len = 0;
    assert_int_equal(ein_program_encode(p, &buf, &len, &err), 0);
    if (ein_program_decode(buf, len, &q, &err) != 0)
        fail_msg("decode: %s", err.msg);
    assert_programs_equal(p, q);
    free(buf);
    ein_program_free(p);
    ein_program_free(q);
}

#define K(i) (&p->instrs[i].kernel)
static void m_k_kind(ein_program *p) { K(I_SOFT)->kind = EIN_KERNEL_COUNT; }
static void m_einsum_arity(ein_program *p) { set_srcs(&p->instrs[2], 3, 1); }
static void m_rms_arity(ein_program *p) { p->instrs[I_RMS].nsrcs = 1; }
static void m_ln_arity(ein_program *p) { p->instrs[I_LN].nsrcs = 2; }
static void m_att_arity(ein_program *p) { p->instrs[I_ATT].nsrcs = 2; }
static void m_rope_arity(ein_program *p) { set_srcs(&p->instrs[I_ROPE], 2, S_RMS); }
static void m_cat_arity(ein_program *p) { set_srcs(&p->instrs[I_CAT], 17, S_SUB); }
static void m_list_max(ein_program *p)
{
    int64_t *v = malloc((EIN_KERNEL_LIST_MAX + 1) * sizeof *v);
    assert_non_null(v);
    for (int j = 0; j <= EIN_KERNEL_LIST_MAX; j++)
        v[j] = j + 1;
    set_list(K(I_ROPE), EIN_KERNEL_LIST_MAX + 1, v);
    free(v);
}
static void m_list_on_softmax(ein_program *p) { set_list2(K(I_SOFT), 1, 2); }
static void m_list_null(ein_program *p) { free(K(I_ROPE)->list); K(I_ROPE)->list = NULL; }
static void m_list_dangling(ein_program *p) { K(I_ROPE)->nlist = 0; }
static void m_list_on_copy(ein_program *p) { set_list2(K(9), 1, 2); }
static void m_soft_axis(ein_program *p) { K(I_SOFT)->axis = 2; }
static void m_soft_box(ein_program *p) { p->instrs[I_SOFT].srcs[0] = S_KVFLAT; }
static void m_rms_eps(ein_program *p) { K(I_RMS)->eps = -1; }
static void m_rms_eps_nan(ein_program *p) { K(I_RMS)->eps = NAN; }
static void m_rms_w_rank(ein_program *p) { p->instrs[I_RMS].srcs[1] = S_X; }
static void m_rms_w_extent(ein_program *p) { p->instrs[I_RMS].srcs[1] = S_VEC8; }
static void m_rms_rank0(ein_program *p) { p->instrs[I_RMS].srcs[0] = 10; }
static void m_rms_out(ein_program *p) { p->instrs[I_RMS].dst = S_KVFLAT; }
static void m_ln_bias(ein_program *p) { p->instrs[I_LN].srcs[2] = S_VEC8; }
/* x and w both [8,16): equal, but not the whole axis */
static void m_rms_partial(ein_program *p)
{
    p->buffers[S_X].box.lo[1] = 8, p->buffers[S_X].bytes /= 2;
    p->buffers[S_RMS].box.lo[1] = 8, p->buffers[S_RMS].bytes /= 2;
    p->buffers[S_W].box.lo[0] = 8, p->buffers[S_W].bytes /= 2;
    p->instrs[I_LOADX].shape[1] = 16;
}
static void m_rope_hd_odd(ein_program *p) { K(I_ROPE)->head_dim = 3; }
static void m_rope_hd_div(ein_program *p) { K(I_ROPE)->head_dim = 32; }
static void m_rope_theta(ein_program *p) { K(I_ROPE)->theta = 0; }
static void m_rope_desc(ein_program *p) { set_list2(K(I_ROPE), 8, 3); }
static void m_rope_zero(ein_program *p) { set_list2(K(I_ROPE), 0, 8); }
static void m_rope_short(ein_program *p) { set_list2(K(I_ROPE), 3, 7); }
static void m_rope_rank(ein_program *p) { p->instrs[I_ROPE].srcs[0] = p->instrs[I_ROPE].dst = S_RED; }
static void m_rope_box(ein_program *p) { p->instrs[I_ROPE].dst = S_KVFLAT; }
static void m_att_group0(ein_program *p) { K(I_ATT)->group = 0; }
static void m_att_group1(ein_program *p) { K(I_ATT)->group = 1; }
static void m_att_group_big(ein_program *p) { K(I_ATT)->group = INT64_MAX; }
static void m_att_kv(ein_program *p) { p->instrs[I_ATT].srcs[2] = S_Q; }
static void m_att_rank(ein_program *p) { p->instrs[I_ATT].srcs[1] = p->instrs[I_ATT].srcs[2] = S_KVFLAT; }
static void m_att_out(ein_program *p) { p->instrs[I_ATT].dst = S_Q_LATE; }
static void m_att_d(ein_program *p) { p->instrs[I_ATT].srcs[1] = p->instrs[I_ATT].srcs[2] = S_KV_D2; }
static void m_att_d1(ein_program *p) { p->instrs[I_ATT].srcs[0] = p->instrs[I_ATT].dst = S_Q_D1; }
static void m_att_keys(ein_program *p) { p->instrs[I_ATT].srcs[1] = p->instrs[I_ATT].srcs[2] = S_KV_LATE; }
static void m_att_ends(ein_program *p) { set_list2(K(I_ATT), 3, 6); }
/* queries [3,8) start their sequence at 3: k/v [1,8) holds their keys */
static void m_att_late(ein_program *p)
{
    m_att_keys(p);
    p->instrs[I_ATT].srcs[0] = p->instrs[I_ATT].dst = S_Q_LATE;
}
/* ... but not when everything is one sequence from 0 */
static void m_att_late_one_seq(ein_program *p) { m_att_late(p); set_list(K(I_ATT), 0, NULL); }
static void m_red_op(ein_program *p) { K(I_RED)->reduce = EIN_AGG_NONE; }
static void m_red_axes0(ein_program *p) { K(I_RED)->axes = 0; }
static void m_red_axes_high(ein_program *p) { K(I_RED)->axes = 0x5; }
static void m_red_rank(ein_program *p) { p->instrs[I_RED].dst = S_X; }
static void m_red_box(ein_program *p) { p->instrs[I_RED].dst = S_VEC8; }
static void m_red_other_axis(ein_program *p) { K(I_RED)->axes = 0x2; } /* dst [0,16) is not rows [0,8) */
static void m_cat_axis(ein_program *p) { K(I_CAT)->axis = 2; }
static void m_cat_nlist(ein_program *p) { K(I_CAT)->nlist = 1; }
static void m_cat_negative(ein_program *p) { set_list2(K(I_CAT), -1, 16); }
static void m_cat_past(ein_program *p) { set_list2(K(I_CAT), 0, 8); }
static void m_cat_overflow(ein_program *p) { set_list2(K(I_CAT), 0, INT64_MAX); }
static void m_cat_rank(ein_program *p) { p->instrs[I_CAT].srcs[1] = S_RED; }
static void m_slice_neg(ein_program *p) { K(I_SLICEROW)->start = -1; }
static void m_slice_out(ein_program *p) { K(I_SLICEROW)->start = 3; }
static void m_slice_ovf(ein_program *p) { K(I_SLICEROW)->start = INT64_MAX; }
static void m_slice_axis(ein_program *p) { K(I_SLICEROW)->axis = 2; }
static void m_slice_rank(ein_program *p) { p->instrs[I_SLICEROW].dst = S_VEC8; }
static void m_split_hd0(ein_program *p) { K(I_SPLITQ)->head_dim = 0; }
static void m_split_hd8(ein_program *p) { K(I_SPLITQ)->head_dim = 8; }
static void m_split_rank(ein_program *p) { p->instrs[I_SPLITQ].dst = S_KVFLAT; }
static void m_split_tokens(ein_program *p) { p->instrs[I_SPLITK].dst = S_KV_LATE; }
static void m_split_hidden(ein_program *p) { p->instrs[I_SPLITQ].dst = S_K; }
static void m_merge_hd(ein_program *p) { K(I_MERGE)->head_dim = 2; }
static void m_merge_rank(ein_program *p) { p->instrs[I_MERGE].srcs[0] = S_KVFLAT; }
static void m_bin_bcast(ein_program *p) { p->instrs[I_DIV].srcs[1] = S_VEC8; }
static void m_bin_rank(ein_program *p) { p->instrs[I_DIV].srcs[1] = S_Q; }
static void m_bin_op(ein_program *p) { K(I_DIV)->binary = EIN_BIN_COUNT; }
static void m_bin_row_moved(ein_program *p) { p->buffers[S_ROW].box.lo[1] = 1; p->buffers[S_ROW].bytes -= 4; }
static void m_unary_op(ein_program *p) { K(I_SIG)->unary = EIN_UN_COUNT; }
static void m_unary_new_box(ein_program *p) { p->instrs[I_SIG].srcs[0] = S_SUB; }
#undef K

static void test_validate_kernels(void **state)
{
    (void)state;
    char w[64];
    snprintf(w, sizeof w, "invalid kernel kind %d", EIN_KERNEL_COUNT);
    expect_invalid3(m_k_kind, w, "kernel.kind: integer out of range");
    expect_invalid(m_einsum_arity, "einsum kernel takes 1 to 2 sources, has 3");
    expect_invalid(m_rms_arity, "rmsnorm kernel takes 2 sources, has 1");
    expect_invalid(m_ln_arity, "layernorm kernel takes 3 sources, has 2");
    expect_invalid(m_att_arity, "attention kernel takes 3 sources, has 2");
    expect_invalid(m_rope_arity, "rope kernel takes 1 source, has 2");
    expect_invalid(m_cat_arity, "17 sources (want 1..16)");
    expect_invalid3(m_list_max, "kernel list of 65537 entries", "65537 entries exceed 65536");
    expect_rejected(m_list_on_softmax, "softmax kernel takes no list, has 2 entries");
    expect_rejected(m_list_null, "kernel list is NULL but has 2 entries");
    expect_rejected(m_list_dangling, "kernel list is set but has 0 entries");
    expect_rejected(m_list_on_copy, "a copy instruction carries a kernel list");
    expect_invalid(m_soft_axis, "softmax: axis 2 out of range for rank 2");
    expect_invalid(m_soft_box, "differs from x box"); /* the rule's own words (ein_kernel_rules.h) */
    expect_invalid(m_rms_eps, "rmsnorm: eps -1 is not");
    expect_invalid3(m_rms_eps_nan, "rmsnorm: eps nan", "kernel.eps: number is not finite");
    expect_invalid(m_rms_w_rank, "rmsnorm: weight buffer 12 is not rank 1");
    expect_invalid(m_rms_w_extent, "rmsnorm: weight buffer 33 is not rank 1 over x's last interval");
    expect_invalid(m_rms_rank0, "rmsnorm: input has rank 0");
    expect_invalid(m_rms_out, "rmsnorm: source buffer 12's box differs");
    expect_invalid(m_ln_bias, "layernorm: bias buffer 33");
    expect_invalid(m_rms_partial, "rmsnorm: weight buffer 13 is not rank 1 over x's last interval [0, d)");
    expect_invalid(m_rope_hd_odd, "rope: head_dim 3 is not positive and even");
    expect_invalid(m_rope_hd_div, "not at multiples of head_dim 32");
    expect_invalid(m_rope_theta, "rope: theta 0 is not");
    expect_invalid(m_rope_desc, "rope: sequence ends not positive and strictly ascending at entry 1");
    expect_invalid(m_rope_zero, "strictly ascending at entry 0");
    expect_invalid(m_rope_short, "rope: tokens up to 8 but the sequences end at 7");
    expect_invalid(m_rope_rank, "rope: input has rank 1");
    expect_invalid(m_rope_box, "rope: source buffer 15's box differs");
    expect_invalid(m_att_group0, "attention: group 0 below 1");
    expect_invalid(m_att_group1, "q's head interval is not group (1) times k's");
    expect_invalid(m_att_group_big, "q's head interval is not group");
    expect_invalid(m_att_kv, "attention: k and v boxes differ");
    expect_invalid(m_att_rank, "attention: q, k, v must have rank 3");
    expect_invalid(m_att_out, "attention: q buffer 18's box differs");
    expect_invalid(m_att_d, "attention: d is not whole and equal");
    expect_invalid(m_att_d1, "attention: d is not whole and equal");
    expect_invalid(m_att_keys, "attention: k/v tokens [1, 8) miss keys of queries [0, 8)");
    expect_invalid(m_att_ends, "attention: tokens up to 8 but the sequences end at 6");
    expect_valid(m_att_late);
    expect_invalid(m_att_late_one_seq, "k/v tokens [1, 8) miss keys of queries [3, 8)");
    expect_invalid(m_red_op, "reduce: op 0 is not sum or max");
    expect_invalid(m_red_axes0, "reduce: axes 0x0 not a non-empty set");
    expect_invalid(m_red_axes_high, "reduce: axes 0x5");
    expect_invalid(m_red_rank, "reduce: dst rank 2, want 1");
    expect_invalid(m_red_box, "reduce: dst's box is not x's without the reduced axes");
    expect_invalid(m_red_other_axis, "reduce: dst's box is not x's");
    expect_invalid(m_cat_axis, "concat: axis 2 out of range");
    expect_invalid(m_cat_nlist, "concat: 1 offsets for 2 sources");
    expect_invalid(m_cat_negative, "concat: offsets not non-negative and strictly ascending at entry 0");
    expect_invalid(m_cat_past, "concat: source buffer 27 runs past its part of the axis");
    expect_invalid(m_cat_overflow, "concat: source buffer 19 runs past");
    expect_invalid(m_cat_rank, "concat: source buffer 24 has rank 1, dst 2");
    expect_invalid(m_slice_neg, "slice: negative start -1");
    expect_invalid(m_slice_out, "slice: source buffer 25 does not contain dst's box shifted by 3");
    expect_invalid(m_slice_ovf, "does not contain dst's box shifted by");
    expect_invalid(m_slice_axis, "slice: axis 2 out of range");
    expect_invalid(m_slice_rank, "slice: dst rank 1 differs");
    expect_invalid(m_split_hd0, "split_heads: head_dim 0 not positive");
    expect_invalid(m_split_hd8, "split_heads: the head box's last axis is not [0, head_dim)");
    expect_invalid(m_split_rank, "split_heads: needs a rank-2");
    expect_invalid(m_split_tokens, "split_heads: token intervals differ");
    expect_invalid(m_split_hidden, "split_heads: hidden interval is not the heads' interval times head_dim");
    expect_invalid(m_merge_hd, "merge_heads: the head box's last axis");
    expect_invalid(m_merge_rank, "merge_heads: needs a rank-2");
    expect_invalid(m_bin_bcast, "binary: source buffer 33's axis 0 is neither");
    expect_invalid(m_bin_rank, "binary: source buffer 18 has rank 3, above dst's 2");
    snprintf(w, sizeof w, "invalid binary op %d", EIN_BIN_COUNT);
    expect_invalid3(m_bin_op, w, "kernel.binary: integer out of range");
    expect_invalid(m_bin_row_moved, "binary: source buffer 26's axis 1 is neither");
    snprintf(w, sizeof w, "invalid unary op %d", EIN_UN_COUNT);
    expect_invalid3(m_unary_op, w, "kernel.unary: integer out of range");
    expect_invalid(m_unary_new_box, "source buffer 27's box differs");

    /* the encoder refuses a list it cannot read */
    ein_error err = {0};
    ein_program *p = sample_program();
    m_list_null(p);
    void *buf = NULL;
    size_t len = 0;
    assert_int_equal(ein_program_encode(p, &buf, &len, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "bad kernel list"));
    ein_program_free(p);
}

/* ---- round trips ------------------------------------------------------ */

/* Issue 13: ATTENTION_PARTIAL (with and without keys) and AGG LSE are
 * valid, survive the wire, and the rules on their boxes are enforced. */
static ein_program *lse_program(ein_dtype part_dt, int widen, int nsrc_partial)
{
    ein_program *p = ein_program_new(0, 1);
    int64_t ends[2] = {3, 8};
    int q = add_buf(p, EIN_F32, box3(0, 2, 0, 8, 0, 4));
    int k = add_buf(p, EIN_F32, box3(0, 1, 2, 6, 0, 4));
    int v = add_buf(p, EIN_F32, box3(0, 1, 2, 6, 0, 4));
    ein_box pb = box3(0, 2, 0, 8, 0, widen ? 5 : 4);
    int p1 = add_buf(p, part_dt, pb), p2 = add_buf(p, part_dt, pb), m = add_buf(p, part_dt, pb);
    int32_t s3[3] = {q, k, v}, s1[1] = {q}, sp[2] = {p1, p2}, d2[2] = {0, 1};
    ein_instr a = blank(EIN_I_KERNEL, "att", p1);
    a.kernel.kind = EIN_KERNEL_ATTENTION_PARTIAL;
    a.kernel.group = 2;
    a.kernel.list = ends;
    a.kernel.nlist = 2;
    add_ins(p, &a, NULL, 0, s3, nsrc_partial);
    ein_instr b = a;
    b.dst = p2;
    add_ins(p, &b, NULL, 0, s1, 1);
    ein_instr g = blank(EIN_I_AGG, "att", m);
    g.agg = EIN_AGG_LSE;
    add_ins(p, &g, d2, 2, sp, 2);
    return p;
}

static void test_lse_program(void **state)
{
    (void)state;
    ein_error err = {0};
    ein_program *p = lse_program(EIN_F32, 1, 3), *q = NULL;
    if (ein_program_validate(p, &err) != 0)
        fail_msg("lse program invalid: %s", err.msg);
    void *buf = NULL;
    size_t len = 0;
    assert_int_equal(ein_program_encode(p, &buf, &len, &err), 0);
    if (ein_program_decode(buf, len, &q, &err) != 0)
        fail_msg("decode: %s", err.msg);
    assert_programs_equal(p, q);
    assert_int_equal(q->instrs[2].agg, EIN_AGG_LSE);
    assert_int_equal(q->instrs[0].kernel.kind, EIN_KERNEL_ATTENTION_PARTIAL);
    assert_string_equal(ein_agg_name(EIN_AGG_LSE), "lse");
    free(buf);
    ein_program_free(p);
    ein_program_free(q);
    /* partials must be f32 over q's box widened by one column; q, k, v or q alone */
    p = lse_program(EIN_F16, 1, 3);
    assert_int_equal(ein_program_validate(p, &err), EIN_EPROTO);
    ein_program_free(p);
    p = lse_program(EIN_F32, 0, 3);
    assert_int_equal(ein_program_validate(p, &err), EIN_EPROTO);
    assert_non_null(strstr(err.msg, "attention_partial"));
    ein_program_free(p);
    p = lse_program(EIN_F32, 1, 2);
    assert_int_equal(ein_program_validate(p, &err), EIN_EPROTO);
    ein_program_free(p);
    ein_box b = box3(1, 2, 3, 5, 0, 4), w = ein_agg_box(EIN_AGG_LSE, &b);
    assert_int_equal(w.hi[2], 5);
    ein_box back = ein_agg_data_box(EIN_AGG_LSE, &w);
    assert_true(ein_box_equal(&back, &b));
    w = ein_agg_box(EIN_AGG_SUM, &b);
    assert_true(ein_box_equal(&w, &b));
}

static void test_program_roundtrip(void **state)
{
    (void)state;
    ein_error err = {0};
    ein_program *p = sample_program(), *q = NULL;
    void *buf = NULL;
    size_t len = 0;
    assert_int_equal(ein_program_encode(p, &buf, &len, &err), 0);
    if (ein_program_decode(buf, len, &q, &err) != 0)
        fail_msg("decode: %s", err.msg);
    assert_programs_equal(p, q);
    /* a decoded program can be extended like a built one */
    ein_box b = box2(0, 1, 0, 1);
    assert_true(ein_program_add_buffer(q, EIN_F32, &b, &err) == p->nbuffers);
    free(buf);
    ein_program_free(p);
    ein_program_free(q);

    /* the empty program is valid */
    p = ein_program_new(0, 1);
    assert_int_equal(ein_program_encode(p, &buf, &len, &err), 0);
    assert_int_equal(ein_program_decode(buf, len, &q, &err), 0);
    assert_int_equal(q->nbuffers, 0);
    assert_int_equal(q->ninstrs, 0);
    free(buf);
    ein_program_free(p);
    ein_program_free(q);
}

/* One message of each type, filled with distinctive values. */
static int sample_messages(ein_msg *ms)
{
    int n = 0;
    memset(ms, 0, sizeof(ein_msg) * 16);
    ms[n].type = EIN_MSG_HELLO, ms[n].device = 3, ms[n].pid = 123456789012LL, n++;
    ms[n].type = EIN_MSG_PROGRAM, ms[n].program = sample_program(), n++;
    ms[n].type = EIN_MSG_START, n++;
    ms[n].type = EIN_MSG_READY, ms[n].device = 2, ms[n].buffer = 77, n++;
    ms[n].type = EIN_MSG_HEARTBEAT, ms[n].device = 0, ms[n].instr = -1, n++;
    ms[n].type = EIN_MSG_HEARTBEAT, ms[n].device = 7, ms[n].instr = 1234567, n++;
    ms[n].type = EIN_MSG_DONE, ms[n].device = 5, ms[n].t_total = 1.5, ms[n].t_kernel = 0.25,
    ms[n].t_copy = 1e-9, ms[n].t_wait = 0, n++;
    ms[n].type = EIN_MSG_DONE, ms[n].device = 1, ms[n].t_total = 2, ms[n].graphs_captured = 34,
    ms[n].graphs_launched = 136, ms[n].graphs_failed = 2, ms[n].t_device = 1;
    ms[n].graphs_short = 9;
    strcpy(ms[n].graph_error, "instructions 7..19: cudaStreamEndCapture: operation not permitted");
    n++;
    ms[n].type = EIN_MSG_ERROR, ms[n].device = 6, ms[n].instr = 42, ms[n].code = EIN_EDEVICE;
    strcpy(ms[n].op, "matmul_3");
    strcpy(ms[n].text, "cudaMemcpyAsync: an illegal memory access was encountered");
    n++;
    ms[n].type = EIN_MSG_SHUTDOWN, n++;
    ms[n].type = EIN_MSG_CANCEL, n++;
    ms[n].type = EIN_MSG_CANCELLED, ms[n].device = 4, n++;
    /* Runs on several hosts: HELLO with its UCX address, PEERS (owned by
     * the message, as a decoded one's: ein_msg_clear frees them). */
    for (int k = 0; k < 2; k++) {
        int na = k ? 3 : 1;
        ein_bytes *b = calloc((size_t)na, sizeof *b);
        assert_non_null(b);
        for (int a = 0; a < na; a++) {
            b[a].len = a == 1 ? 0 : (uint32_t)(40 - 37 * (a / 2));
            if (b[a].len) {
                b[a].data = malloc(b[a].len);
                assert_non_null(b[a].data);
                for (uint32_t i = 0; i < b[a].len; i++)
                    ((unsigned char *)b[a].data)[i] = (unsigned char)(250 - 3 * i - a);
            }
        }
        ms[n].type = k ? EIN_MSG_PEERS : EIN_MSG_HELLO;
        if (!k)
            ms[n].device = 2, ms[n].pid = 77;
        ms[n].addrs = b, ms[n].naddrs = na, n++;
    }
    return n;
}

static void assert_msgs_equal(const ein_msg *a, const ein_msg *b)
{
    assert_int_equal(a->type, b->type);
    assert_int_equal(a->device, b->device);
    assert_true(a->pid == b->pid);
    assert_int_equal(a->buffer, b->buffer);
    assert_int_equal(a->instr, b->instr);
    assert_int_equal(a->code, b->code);
    assert_string_equal(a->op, b->op);
    assert_string_equal(a->text, b->text);
    assert_true(a->t_total == b->t_total);
    assert_true(a->t_kernel == b->t_kernel);
    assert_true(a->t_copy == b->t_copy);
    assert_true(a->t_wait == b->t_wait);
    assert_int_equal(a->graphs_captured, b->graphs_captured);
    assert_int_equal(a->graphs_launched, b->graphs_launched);
    assert_int_equal(a->graphs_failed, b->graphs_failed);
    assert_int_equal(a->graphs_short, b->graphs_short);
    assert_string_equal(a->graph_error, b->graph_error);
    assert_int_equal(a->t_device, b->t_device);
    assert_int_equal(!a->program, !b->program);
    if (a->program)
        assert_programs_equal(a->program, b->program);
}

/* HELLO's optional address and PEERS (runs on several hosts): bytes
 * survive the trip, empty entries stay empty, HELLO carries exactly one,
 * PEERS needs its list. */
static void test_peer_addresses(void **state)
{
    (void)state;
    ein_error err = {0};
    unsigned char a0[300], a2[5] = {0, 1, 2, 0, 255};
    for (int i = 0; i < 300; i++)
        a0[i] = (unsigned char)(i * 7);
    ein_bytes addrs[3] = {{a0, 300}, {NULL, 0}, {a2, 5}};
    ein_msg m = {.type = EIN_MSG_PEERS, .addrs = addrs, .naddrs = 3}, d;
    void *buf = NULL;
    size_t len = 0;
    assert_int_equal(ein_msg_encode(&m, &buf, &len, &err), 0);
    assert_int_equal(ein_msg_decode(buf, len, &d, &err), 0);
    free(buf);
    assert_int_equal(d.type, EIN_MSG_PEERS);
    assert_int_equal(d.naddrs, 3);
    assert_int_equal(d.addrs[0].len, 300);
    assert_memory_equal(d.addrs[0].data, a0, 300);
    assert_int_equal(d.addrs[1].len, 0);
    assert_int_equal(d.addrs[2].len, 5);
    assert_memory_equal(d.addrs[2].data, a2, 5);
    ein_msg_clear(&d);
    /* HELLO with its address, and without (one host): both decode. */
    ein_msg h = {.type = EIN_MSG_HELLO, .device = 2, .pid = 99, .addrs = addrs, .naddrs = 1};
    assert_int_equal(ein_msg_encode(&h, &buf, &len, &err), 0);
    assert_int_equal(ein_msg_decode(buf, len, &d, &err), 0);
    free(buf);
    assert_int_equal(d.naddrs, 1);
    assert_memory_equal(d.addrs[0].data, a0, 300);
    ein_msg_clear(&d);
    h.naddrs = 0;
    assert_int_equal(ein_msg_encode(&h, &buf, &len, &err), 0);
    assert_int_equal(ein_msg_decode(buf, len, &d, &err), 0);
    free(buf);
    assert_int_equal(d.naddrs, 0);
    assert_null(d.addrs);
    ein_msg_clear(&d);
    /* HELLO with two addresses: refused. */
    h.naddrs = 2;
    assert_int_equal(ein_msg_encode(&h, &buf, &len, &err), 0);
    assert_int_equal(ein_msg_decode(buf, len, &d, &err), EIN_EPROTO);
    assert_non_null(strstr(err.msg, "addrs"));
    free(buf);
    /* PEERS whose list is not an array of bin: refused. */
    static const unsigned char bad[] = {0x83, 0xa4, 't', 'y', 'p', 'e', 0xa5, 'p', 'e', 'e', 'r',
                                        's', 0xa1, 'v', EIN_PROTOCOL_VERSION, 0xa5, 'a', 'd',
                                        'd', 'r', 's', 0x91, 0xa1, 'x'};
    assert_int_equal(ein_msg_decode(bad, sizeof bad, &d, &err), EIN_EPROTO);
    assert_non_null(strstr(err.msg, "address 0"));
}

static void test_message_roundtrip(void **state)
{
    (void)state;
    ein_msg ms[16];
    int n = sample_messages(ms);
    for (int i = 0; i < n; i++) {
        ein_error err = {0};
        void *buf = NULL;
        size_t len = 0;
        if (ein_msg_encode(&ms[i], &buf, &len, &err) != 0)
            fail_msg("encode %s: %s", ein_msg_type_name(ms[i].type), err.msg);
        assert_int_equal(ein_msgpack_prescan(buf, len, &err), 0);
        ein_msg out;
        if (ein_msg_decode(buf, len, &out, &err) != 0)
            fail_msg("decode %s: %s", ein_msg_type_name(ms[i].type), err.msg);
        assert_msgs_equal(&ms[i], &out);
        ein_msg_clear(&out);
        assert_null(out.program);
        free(buf);
    }
    for (int i = 0; i < n; i++)
        ein_msg_clear(&ms[i]);

    /* encoder refusals */
    ein_error err = {0};
    ein_msg m;
    void *buf = NULL;
    size_t len = 0;
    memset(&m, 0, sizeof m);
    m.type = EIN_MSG_PROGRAM;
    assert_int_equal(ein_msg_encode(&m, &buf, &len, &err), EIN_EINVAL);
    m.type = (ein_msg_type)EIN_MSG_COUNT;
    assert_int_equal(ein_msg_encode(&m, &buf, &len, &err), EIN_EINVAL);
    /* an unterminated text is sent truncated, not read past its array */
    m.type = EIN_MSG_ERROR;
    m.code = EIN_EIO;
    memset(m.text, 'z', sizeof m.text);
    assert_int_equal(ein_msg_encode(&m, &buf, &len, &err), 0);
    ein_msg out;
    assert_int_equal(ein_msg_decode(buf, len, &out, &err), 0);
    assert_int_equal(strlen(out.text), EIN_MSG_TEXT_MAX - 1);
    free(buf);
}

/* ---- hand-made msgpack ------------------------------------------------ */

typedef struct packed {
    msgpack_sbuffer sb;
    msgpack_packer pk;
} packed;

static void pk_begin(packed *p)
{
    msgpack_sbuffer_init(&p->sb);
    msgpack_packer_init(&p->pk, &p->sb, msgpack_sbuffer_write);
}

static void pk_str(packed *p, const char *s)
{
    msgpack_pack_str(&p->pk, strlen(s));
    msgpack_pack_str_body(&p->pk, s, strlen(s));
}

/* Decode the packed bytes; expect EIN_EPROTO with `needle` in the message. */
static void pk_expect(packed *p, const char *needle)
{
    ein_error err = {0};
    ein_msg out;
    int rc = ein_msg_decode(p->sb.data, p->sb.size, &out, &err);
    if (rc != EIN_EPROTO || !strstr(err.msg, needle))
        fail_msg("rc %d, message '%s', want '%s'", rc, err.msg, needle);
    assert_null(out.program);
    msgpack_sbuffer_destroy(&p->sb);
}

static void test_wrong_fields(void **state)
{
    (void)state;
    packed p;

    pk_begin(&p); /* type is not a string */
    msgpack_pack_map(&p.pk, 2);
    pk_str(&p, "type"); msgpack_pack_int(&p.pk, 5);
    pk_str(&p, "v"); msgpack_pack_int(&p.pk, EIN_PROTOCOL_VERSION);
    pk_expect(&p, "'type': expected a string");

    pk_begin(&p); /* unknown type */
    msgpack_pack_map(&p.pk, 2);
    pk_str(&p, "type"); pk_str(&p, "bogus");
    pk_str(&p, "v"); msgpack_pack_int(&p.pk, EIN_PROTOCOL_VERSION);
    pk_expect(&p, "unknown type 'bogus'");

    pk_begin(&p); /* wrong version */
    msgpack_pack_map(&p.pk, 2);
    pk_str(&p, "type"); pk_str(&p, "start");
    pk_str(&p, "v"); msgpack_pack_int(&p.pk, 99);
    pk_expect(&p, "protocol version 99");

    pk_begin(&p); /* version as a string */
    msgpack_pack_map(&p.pk, 2);
    pk_str(&p, "type"); pk_str(&p, "start");
    pk_str(&p, "v"); pk_str(&p, "1");
    pk_expect(&p, "'v': expected an integer");

    pk_begin(&p); /* missing version */
    msgpack_pack_map(&p.pk, 1);
    pk_str(&p, "type"); pk_str(&p, "start");
    pk_expect(&p, "missing field 'v'");

    pk_begin(&p); /* missing type */
    msgpack_pack_map(&p.pk, 1);
    pk_str(&p, "v"); msgpack_pack_int(&p.pk, EIN_PROTOCOL_VERSION);
    pk_expect(&p, "missing field 'type'");

    pk_begin(&p); /* device as a string */
    msgpack_pack_map(&p.pk, 4);
    pk_str(&p, "type"); pk_str(&p, "hello");
    pk_str(&p, "v"); msgpack_pack_int(&p.pk, EIN_PROTOCOL_VERSION);
    pk_str(&p, "device"); pk_str(&p, "0");
    pk_str(&p, "pid"); msgpack_pack_int(&p.pk, 99);
    pk_expect(&p, "'device': expected an integer");

    pk_begin(&p); /* missing pid */
    msgpack_pack_map(&p.pk, 3);
    pk_str(&p, "type"); pk_str(&p, "hello");
    pk_str(&p, "v"); msgpack_pack_int(&p.pk, EIN_PROTOCOL_VERSION);
    pk_str(&p, "device"); msgpack_pack_int(&p.pk, 0);
    pk_expect(&p, "missing field 'pid'");

    pk_begin(&p); /* negative buffer */
    msgpack_pack_map(&p.pk, 4);
    pk_str(&p, "type"); pk_str(&p, "ready");
    pk_str(&p, "v"); msgpack_pack_int(&p.pk, EIN_PROTOCOL_VERSION);
    pk_str(&p, "device"); msgpack_pack_int(&p.pk, 0);
    pk_str(&p, "buffer"); msgpack_pack_int(&p.pk, -4);
    pk_expect(&p, "'buffer': integer out of range");

    pk_begin(&p); /* device beyond int32 */
    msgpack_pack_map(&p.pk, 4);
    pk_str(&p, "type"); pk_str(&p, "ready");
    pk_str(&p, "v"); msgpack_pack_int(&p.pk, EIN_PROTOCOL_VERSION);
    pk_str(&p, "device"); msgpack_pack_uint64(&p.pk, UINT64_MAX);
    pk_str(&p, "buffer"); msgpack_pack_int(&p.pk, 4);
    pk_expect(&p, "'device': integer out of range");

    pk_begin(&p); /* field of another type */
    msgpack_pack_map(&p.pk, 3);
    pk_str(&p, "type"); pk_str(&p, "start");
    pk_str(&p, "v"); msgpack_pack_int(&p.pk, EIN_PROTOCOL_VERSION);
    pk_str(&p, "pid"); msgpack_pack_int(&p.pk, 1);
    pk_expect(&p, "unexpected field 'pid'");

    pk_begin(&p); /* unknown field */
    msgpack_pack_map(&p.pk, 3);
    pk_str(&p, "type"); pk_str(&p, "start");
    pk_str(&p, "v"); msgpack_pack_int(&p.pk, EIN_PROTOCOL_VERSION);
    pk_str(&p, "colour"); msgpack_pack_int(&p.pk, 1);
    pk_expect(&p, "unknown field 'colour'");

    pk_begin(&p); /* duplicate field */
    msgpack_pack_map(&p.pk, 3);
    pk_str(&p, "type"); pk_str(&p, "start");
    pk_str(&p, "v"); msgpack_pack_int(&p.pk, EIN_PROTOCOL_VERSION);
    pk_str(&p, "v"); msgpack_pack_int(&p.pk, EIN_PROTOCOL_VERSION);
    pk_expect(&p, "duplicate field 'v'");

    pk_begin(&p); /* non-string key */
    msgpack_pack_map(&p.pk, 1);
    msgpack_pack_int(&p.pk, 1); msgpack_pack_int(&p.pk, 1);
    pk_expect(&p, "key is not a string");

    pk_begin(&p); /* not a map at all */
    msgpack_pack_array(&p.pk, 2);
    pk_str(&p, "type"); pk_str(&p, "start");
    pk_expect(&p, "expected a map");

    pk_begin(&p); /* error text with an embedded NUL, op too long, NaN time */
    msgpack_pack_map(&p.pk, 7);
    pk_str(&p, "type"); pk_str(&p, "error");
    pk_str(&p, "v"); msgpack_pack_int(&p.pk, EIN_PROTOCOL_VERSION);
    pk_str(&p, "device"); msgpack_pack_int(&p.pk, 0);
    pk_str(&p, "instr"); msgpack_pack_int(&p.pk, 0);
    pk_str(&p, "op"); pk_str(&p, "x");
    pk_str(&p, "code"); msgpack_pack_int(&p.pk, -3);
    pk_str(&p, "text"); msgpack_pack_str(&p.pk, 3); msgpack_pack_str_body(&p.pk, "a\0b", 3);
    pk_expect(&p, "'text': string contains a NUL");

    pk_begin(&p);
    msgpack_pack_map(&p.pk, 7);
    pk_str(&p, "type"); pk_str(&p, "error");
    pk_str(&p, "v"); msgpack_pack_int(&p.pk, EIN_PROTOCOL_VERSION);
    pk_str(&p, "device"); msgpack_pack_int(&p.pk, 0);
    pk_str(&p, "instr"); msgpack_pack_int(&p.pk, 0);
    pk_str(&p, "op"); pk_str(&p, "0123456789012345678901234567890123456789012345678901234567890123");
    pk_str(&p, "code"); msgpack_pack_int(&p.pk, -3);
    pk_str(&p, "text"); pk_str(&p, "");
    pk_expect(&p, "'op': string of 64 bytes is too long");

    pk_begin(&p);
    msgpack_pack_map(&p.pk, 7);
    pk_str(&p, "type"); pk_str(&p, "error");
    pk_str(&p, "v"); msgpack_pack_int(&p.pk, EIN_PROTOCOL_VERSION);
    pk_str(&p, "device"); msgpack_pack_int(&p.pk, 0);
    pk_str(&p, "instr"); msgpack_pack_int(&p.pk, 0);
    pk_str(&p, "op"); pk_str(&p, "");
    pk_str(&p, "code"); msgpack_pack_int(&p.pk, 3);
    pk_str(&p, "text"); pk_str(&p, "");
    pk_expect(&p, "'code': integer out of range");

    pk_begin(&p);
    msgpack_pack_map(&p.pk, 7);
    pk_str(&p, "type"); pk_str(&p, "done");
    pk_str(&p, "v"); msgpack_pack_int(&p.pk, EIN_PROTOCOL_VERSION);
    pk_str(&p, "device"); msgpack_pack_int(&p.pk, 0);
    pk_str(&p, "t_total"); msgpack_pack_double(&p.pk, NAN);
    pk_str(&p, "t_kernel"); msgpack_pack_double(&p.pk, 0);
    pk_str(&p, "t_copy"); msgpack_pack_double(&p.pk, 0);
    pk_str(&p, "t_wait"); msgpack_pack_double(&p.pk, 0);
    pk_expect(&p, "'t_total': number is not finite");

    /* integers as the peer might pack them: signed 8-bit, float32 times */
    pk_begin(&p);
    msgpack_pack_map(&p.pk, 7);
    pk_str(&p, "type"); pk_str(&p, "done");
    pk_str(&p, "v"); msgpack_pack_int8(&p.pk, EIN_PROTOCOL_VERSION);
    pk_str(&p, "device"); msgpack_pack_int64(&p.pk, 2);
    pk_str(&p, "t_total"); msgpack_pack_float(&p.pk, 0.5f);
    pk_str(&p, "t_kernel"); msgpack_pack_int(&p.pk, 3);
    pk_str(&p, "t_copy"); msgpack_pack_double(&p.pk, 0);
    pk_str(&p, "t_wait"); msgpack_pack_double(&p.pk, 0);
    ein_error err = {0};
    ein_msg out;
    assert_int_equal(ein_msg_decode(p.sb.data, p.sb.size, &out, &err), 0);
    assert_int_equal(out.type, EIN_MSG_DONE);
    assert_int_equal(out.device, 2);
    assert_true(out.t_total == 0.5 && out.t_kernel == 3.0);
    msgpack_sbuffer_destroy(&p.sb);

    /* a program message whose program is not a map / lacks fields */
    pk_begin(&p);
    msgpack_pack_map(&p.pk, 3);
    pk_str(&p, "type"); pk_str(&p, "program");
    pk_str(&p, "v"); msgpack_pack_int(&p.pk, EIN_PROTOCOL_VERSION);
    pk_str(&p, "program"); msgpack_pack_array(&p.pk, 0);
    pk_expect(&p, "program: expected a map");

    pk_begin(&p);
    msgpack_pack_map(&p.pk, 3);
    pk_str(&p, "type"); pk_str(&p, "program");
    pk_str(&p, "v"); msgpack_pack_int(&p.pk, EIN_PROTOCOL_VERSION);
    pk_str(&p, "program"); msgpack_pack_map(&p.pk, 1);
    pk_str(&p, "device"); msgpack_pack_int(&p.pk, 0);
    pk_expect(&p, "program: missing field 'ndevices'");
}

/* A program message of two [0,8) x [0,16) f32 buffers and one KERNEL
 * instruction 0 -> 1 whose kernel map `kernel` packs. */
static void pk_kernel_program(packed *p, void (*kernel)(msgpack_packer *))
{
    pk_begin(p);
    msgpack_pack_map(&p->pk, 3);
    pk_str(p, "type"); pk_str(p, "program");
    pk_str(p, "v"); msgpack_pack_int(&p->pk, EIN_PROTOCOL_VERSION);
    pk_str(p, "program");
    msgpack_pack_map(&p->pk, 5);
    pk_str(p, "device"); msgpack_pack_int(&p->pk, 0);
    pk_str(p, "ndevices"); msgpack_pack_int(&p->pk, 1);
    pk_str(p, "segment_bytes"); msgpack_pack_int(&p->pk, 1024);
    pk_str(p, "buffers");
    msgpack_pack_array(&p->pk, 2);
    for (int b = 0; b < 2; b++) {
        msgpack_pack_map(&p->pk, 4);
        pk_str(p, "dtype"); msgpack_pack_int(&p->pk, EIN_F32);
        pk_str(p, "box");
        msgpack_pack_array(&p->pk, 2);
        msgpack_pack_array(&p->pk, 2);
        msgpack_pack_int(&p->pk, 0); msgpack_pack_int(&p->pk, 0);
        msgpack_pack_array(&p->pk, 2);
        msgpack_pack_int(&p->pk, 8); msgpack_pack_int(&p->pk, 16);
        pk_str(p, "offset"); msgpack_pack_int(&p->pk, 512 * b);
        pk_str(p, "bytes"); msgpack_pack_int(&p->pk, 512);
    }
    pk_str(p, "instrs");
    msgpack_pack_array(&p->pk, 1);
    msgpack_pack_map(&p->pk, 6);
    pk_str(p, "kind"); msgpack_pack_int(&p->pk, EIN_I_KERNEL);
    pk_str(p, "deps"); msgpack_pack_array(&p->pk, 0);
    pk_str(p, "srcs"); msgpack_pack_array(&p->pk, 1); msgpack_pack_int(&p->pk, 0);
    pk_str(p, "dst"); msgpack_pack_int(&p->pk, 1);
    pk_str(p, "op"); pk_str(p, "k");
    pk_str(p, "kernel");
    kernel(&p->pk);
}

static void pk_cstr(msgpack_packer *pk, const char *s)
{
    msgpack_pack_str(pk, strlen(s));
    msgpack_pack_str_body(pk, s, strlen(s));
}

static void k_softmax(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 2);
    pk_cstr(pk, "kind"); msgpack_pack_int(pk, EIN_KERNEL_SOFTMAX);
    pk_cstr(pk, "axis"); msgpack_pack_int(pk, 1);
}
static int style_value; /* the ROPE kernels' style (0: interleaved) */
/* the ROPE kernels' scaling: [type, factor, low, high, original] (none) */
static double scaling_value[5];
static int scaling_len = 5;
static void pk_scaling(msgpack_packer *pk)
{
    pk_cstr(pk, "scaling");
    msgpack_pack_array(pk, (size_t)scaling_len);
    for (int j = 0; j < scaling_len; j++)
        msgpack_pack_double(pk, scaling_value[j]);
}
static void k_rope(msgpack_packer *pk, int nlist)
{
    msgpack_pack_map(pk, 1 + 4 + (nlist >= 0));
    pk_scaling(pk);
    pk_cstr(pk, "kind"); msgpack_pack_int(pk, EIN_KERNEL_ROPE);
    pk_cstr(pk, "style"); msgpack_pack_int(pk, style_value);
    pk_cstr(pk, "head_dim"); msgpack_pack_int(pk, 4);
    pk_cstr(pk, "theta"); msgpack_pack_double(pk, 10000.0);
    if (nlist >= 0) {
        pk_cstr(pk, "list");
        msgpack_pack_array(pk, (size_t)nlist);
        for (int j = 0; j < nlist; j++)
            msgpack_pack_int(pk, 8 + j);
    }
}
static void k_rope_ok(msgpack_packer *pk) { k_rope(pk, 2); }
static void k_rope_nolist(msgpack_packer *pk) { k_rope(pk, -1); }
static void k_rope_long(msgpack_packer *pk) { k_rope(pk, EIN_KERNEL_LIST_MAX + 1); }
static void k_rope_max(msgpack_packer *pk) { k_rope(pk, EIN_KERNEL_LIST_MAX); }
static void k_extra(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 3);
    pk_cstr(pk, "kind"); msgpack_pack_int(pk, EIN_KERNEL_SOFTMAX);
    pk_cstr(pk, "axis"); msgpack_pack_int(pk, 1);
    pk_cstr(pk, "subscripts"); pk_cstr(pk, "ab->ab");
}
static void k_unknown(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 3);
    pk_cstr(pk, "kind"); msgpack_pack_int(pk, EIN_KERNEL_SOFTMAX);
    pk_cstr(pk, "axis"); msgpack_pack_int(pk, 1);
    pk_cstr(pk, "colour"); msgpack_pack_int(pk, 1);
}
static void k_dup(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 3);
    pk_cstr(pk, "kind"); msgpack_pack_int(pk, EIN_KERNEL_SOFTMAX);
    pk_cstr(pk, "axis"); msgpack_pack_int(pk, 1);
    pk_cstr(pk, "axis"); msgpack_pack_int(pk, 0);
}
static void k_axis_type(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 2);
    pk_cstr(pk, "kind"); msgpack_pack_int(pk, EIN_KERNEL_SOFTMAX);
    pk_cstr(pk, "axis"); msgpack_pack_double(pk, 1.0);
}
static void k_axis_range(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 2);
    pk_cstr(pk, "kind"); msgpack_pack_int(pk, EIN_KERNEL_SOFTMAX);
    pk_cstr(pk, "axis"); msgpack_pack_int64(pk, (int64_t)INT32_MAX + 1);
}
static void k_list_type(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 1 + 5);
    pk_scaling(pk);
    pk_cstr(pk, "kind"); msgpack_pack_int(pk, EIN_KERNEL_ROPE);
    pk_cstr(pk, "style"); msgpack_pack_int(pk, style_value);
    pk_cstr(pk, "head_dim"); msgpack_pack_int(pk, 4);
    pk_cstr(pk, "theta"); msgpack_pack_double(pk, 10000.0);
    pk_cstr(pk, "list"); pk_cstr(pk, "8");
}
static void k_list_elem(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 1 + 5);
    pk_scaling(pk);
    pk_cstr(pk, "kind"); msgpack_pack_int(pk, EIN_KERNEL_ROPE);
    pk_cstr(pk, "style"); msgpack_pack_int(pk, style_value);
    pk_cstr(pk, "head_dim"); msgpack_pack_int(pk, 4);
    pk_cstr(pk, "theta"); msgpack_pack_double(pk, 10000.0);
    pk_cstr(pk, "list");
    msgpack_pack_array(pk, 2);
    msgpack_pack_int(pk, 3);
    pk_cstr(pk, "8");
}
static void k_axes_range(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 3);
    pk_cstr(pk, "kind"); msgpack_pack_int(pk, EIN_KERNEL_REDUCE);
    pk_cstr(pk, "axes"); msgpack_pack_uint64(pk, (uint64_t)UINT32_MAX + 1);
    pk_cstr(pk, "reduce"); msgpack_pack_int(pk, EIN_AGG_SUM);
}
static void k_reduce_range(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 3);
    pk_cstr(pk, "kind"); msgpack_pack_int(pk, EIN_KERNEL_REDUCE);
    pk_cstr(pk, "axes"); msgpack_pack_int(pk, 1);
    pk_cstr(pk, "reduce"); msgpack_pack_int(pk, 3);
}
static void k_theta_inf(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 1 + 5);
    pk_scaling(pk);
    pk_cstr(pk, "kind"); msgpack_pack_int(pk, EIN_KERNEL_ROPE);
    pk_cstr(pk, "style"); msgpack_pack_int(pk, style_value);
    pk_cstr(pk, "head_dim"); msgpack_pack_int(pk, 4);
    pk_cstr(pk, "theta"); msgpack_pack_double(pk, INFINITY);
    pk_cstr(pk, "list"); msgpack_pack_array(pk, 0);
}
static void k_group_type(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 4);
    pk_cstr(pk, "kind"); msgpack_pack_int(pk, EIN_KERNEL_ATTENTION);
    pk_cstr(pk, "group"); msgpack_pack_nil(pk);
    pk_cstr(pk, "list"); msgpack_pack_array(pk, 0);
    pk_cstr(pk, "window"); msgpack_pack_int(pk, 0);
}
/* Issue 34: attention kernels carry "window" (protocol 4); a kernel
 * without it, or with a non-integer one, is refused naming the field. */
static void k_window_missing(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 3);
    pk_cstr(pk, "kind"); msgpack_pack_int(pk, EIN_KERNEL_ATTENTION);
    pk_cstr(pk, "group"); msgpack_pack_int(pk, 1);
    pk_cstr(pk, "list"); msgpack_pack_array(pk, 0);
}
static void k_window_type(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 3);
    pk_cstr(pk, "kind"); msgpack_pack_int(pk, EIN_KERNEL_DECODE_ATTENTION);
    pk_cstr(pk, "group"); msgpack_pack_int(pk, 1);
    pk_cstr(pk, "window"); msgpack_pack_double(pk, 2.5);
}
/* A list header that claims more entries than the bytes that remain. */
static void k_list_huge(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 1 + 5);
    pk_scaling(pk);
    pk_cstr(pk, "kind"); msgpack_pack_int(pk, EIN_KERNEL_ROPE);
    pk_cstr(pk, "style"); msgpack_pack_int(pk, style_value);
    pk_cstr(pk, "head_dim"); msgpack_pack_int(pk, 4);
    pk_cstr(pk, "theta"); msgpack_pack_double(pk, 10000.0);
    pk_cstr(pk, "list");
    msgpack_pack_array(pk, UINT32_MAX);
}

static void expect_kernel_ok(void (*kernel)(msgpack_packer *), ein_kernel_kind kind, int nlist)
{
    packed p;
    ein_error err = {0};
    ein_msg out;
    pk_kernel_program(&p, kernel);
    if (ein_msg_decode(p.sb.data, p.sb.size, &out, &err) != 0)
        fail_msg("decode: %s", err.msg);
    assert_int_equal(out.program->instrs[0].kernel.kind, kind);
    assert_int_equal(out.program->instrs[0].kernel.nlist, nlist);
    ein_msg_clear(&out);
    msgpack_sbuffer_destroy(&p.sb);
}

static void expect_kernel_proto(void (*kernel)(msgpack_packer *), const char *needle)
{
    packed p;
    pk_kernel_program(&p, kernel);
    pk_expect(&p, needle);
}

static void test_kernel_fields(void **state)
{
    (void)state;
    expect_kernel_ok(k_softmax, EIN_KERNEL_SOFTMAX, 0);
    expect_kernel_ok(k_rope_ok, EIN_KERNEL_ROPE, 2);
    expect_kernel_ok(k_rope_max, EIN_KERNEL_ROPE, EIN_KERNEL_LIST_MAX);
    style_value = 1;    /* half */
    expect_kernel_ok(k_rope_ok, EIN_KERNEL_ROPE, 2);
    style_value = 2;
    expect_kernel_proto(k_rope_ok, "rope: style 2 is not interleaved (0) or half (1)");
    style_value = 0;
    /* rope scaling (issue 34): llama3 and linear pass; a bad type, a
     * factor for a type without one, a wrong length are refused */
    double l3[5] = {EIN_ROPE_SCALING_LLAMA3, 8, 1, 4, 8192};
    memcpy(scaling_value, l3, sizeof l3);
    expect_kernel_ok(k_rope_ok, EIN_KERNEL_ROPE, 2);
    double lin[5] = {EIN_ROPE_SCALING_LINEAR, 4, 0, 0, 0};
    memcpy(scaling_value, lin, sizeof lin);
    expect_kernel_ok(k_rope_ok, EIN_KERNEL_ROPE, 2);
    scaling_value[0] = 7;
    expect_kernel_proto(k_rope_ok, "kernel.scaling: type 7 is not a rope scaling type");
    double bad[5] = {EIN_ROPE_SCALING_LINEAR, 4, 1, 0, 0};
    memcpy(scaling_value, bad, sizeof bad);
    expect_kernel_proto(k_rope_ok, "rope: scaling: a factor is not a finite number > 0, or is "
                                   "set for a type that has none");
    memset(scaling_value, 0, sizeof scaling_value);
    scaling_len = 4;
    expect_kernel_proto(k_rope_ok, "kernel.scaling: expected an array of 5 numbers");
    scaling_len = 5;
    expect_kernel_proto(k_rope_nolist, "instrs[0].kernel: missing field 'list'");
    expect_kernel_proto(k_rope_long, "kernel.list: 65537 entries exceed 65536");
    expect_kernel_proto(k_extra, "field 'subscripts' not expected in a softmax kernel");
    expect_kernel_proto(k_unknown, "unknown field 'colour'");
    expect_kernel_proto(k_dup, "duplicate field 'axis'");
    expect_kernel_proto(k_axis_type, "kernel.axis: expected an integer");
    expect_kernel_proto(k_axis_range, "kernel.axis: integer out of range");
    expect_kernel_proto(k_list_type, "kernel.list: expected an array");
    expect_kernel_proto(k_list_elem, "kernel.list[1]: expected an integer");
    expect_kernel_proto(k_axes_range, "kernel.axes: integer out of range");
    expect_kernel_proto(k_reduce_range, "kernel.reduce: integer out of range");
    expect_kernel_proto(k_theta_inf, "kernel.theta: number is not finite");
    expect_kernel_proto(k_group_type, "kernel.group: expected an integer");
    expect_kernel_proto(k_window_missing, "window");
    expect_kernel_proto(k_window_type, "kernel.window: expected an integer");
    expect_kernel_proto(k_list_huge, "array of 4294967295 entries");
}

/* ---- raw bytes: garbage, truncations, huge counts --------------------- */

static void expect_proto(const void *buf, size_t len, const char *needle)
{
    ein_error err = {0};
    ein_msg out;
    int rc = ein_msg_decode(buf, len, &out, &err);
    if (rc != EIN_EPROTO || (needle && !strstr(err.msg, needle)))
        fail_msg("rc %d, message '%s', want '%s'", rc, err.msg, needle ? needle : "");
    assert_null(out.program);
}

static void test_huge_counts(void **state)
{
    (void)state;
    expect_proto("\xdd\xff\xff\xff\xff", 5, "array of 4294967295 entries");
    expect_proto("\xdf\xff\xff\xff\xff", 5, "map of 4294967295 entries");
    expect_proto("\xdb\xff\xff\xff\xff", 5, "length 4294967295");
    expect_proto("\xc6\xff\xff\xff\xff", 5, "length 4294967295");
    expect_proto("\xc9\xff\xff\xff\xff\x01", 6, "length");
    expect_proto("\xdc\x00\x03\x01\x02", 5, "array of 3 entries");
    /* a map of n pairs needs 2n bytes */
    expect_proto("\x82\x01\x02\x03", 4, "map of 2 entries");
    /* the same headers inside a valid-looking envelope */
    expect_proto("\x83\xa4" "type" "\xa5" "hello" "\xa1" "v" "\x01\xa6" "device" "\xdd\xff\xff\xff\xff", 27, "exceeds");
    expect_proto("\xc1", 1, "0xc1");
    expect_proto("", 0, "empty");
    expect_proto("\x80\x80", 2, "trailing");
    expect_proto("\xcb\x00\x00", 3, "needs 8 bytes");
    expect_proto("\xd9", 1, "truncated");

    /* nesting: 32 levels pass the pre-scan, 33 do not */
    unsigned char deep[40];
    memset(deep, 0x91, sizeof deep);
    ein_error err = {0};
    deep[31] = 0x90; /* 31 one-element arrays around an empty one: depth 32 */
    assert_int_equal(ein_msgpack_prescan(deep, 32, &err), 0);
    deep[31] = 0x91, deep[32] = 0x90; /* depth 33 */
    assert_int_equal(ein_msgpack_prescan(deep, 33, &err), EIN_EPROTO);
    assert_non_null(strstr(err.msg, "nesting deeper than 32"));
    expect_proto(deep, 33, "nesting");
    /* every msgpack type passes the pre-scan when well-formed */
    static const unsigned char all_types[] =
        "\xdc\x00\x21\xc0\xc2\xc3\x7f\xe0\xcc\x01\xcd\x01\x02\xce\x01\x02\x03\x04"
        "\xcf\x01\x02\x03\x04\x05\x06\x07\x08"
        "\xd0\x01\xd1\x01\x02\xd2\x01\x02\x03\x04\xd3\x01\x02\x03\x04\x05\x06\x07\x08"
        "\xca\x00\x00\x00\x00\xcb\x00\x00\x00\x00\x00\x00\x00\x00"
        "\xa1x\xd9\x01x\xda\x00\x01x\xdb\x00\x00\x00\x01x\xc4\x01x\xc5\x00\x01x\xc6\x00\x00\x00\x01x"
        "\xd4\x01x\xd8\x01xxxxxxxxxxxxxxxx"
        "\xc7\x01\x05x\xc8\x00\x01\x05x\xc9\x00\x00\x00\x01\x05x"
        "\xd5\x01xx\xd6\x01xxxx\xd7\x01xxxxxxxx"
        "\xde\x00\x01\x01\x02\xdf\x00\x00\x00\x01\x01\x02\xdd\x00\x00\x00\x01\xc0";
    assert_int_equal(ein_msgpack_prescan(all_types, sizeof all_types - 1, &err), 0);
    /* ... and is rejected by the decoder as not a map */
    expect_proto(all_types, sizeof all_types - 1, "expected a map");
}

static void test_garbage(void **state)
{
    (void)state;
    unsigned char buf[256];
    for (int iter = 0; iter < 5000; iter++) {
        size_t len = (size_t)(rng() % sizeof buf);
        for (size_t k = 0; k < len; k++)
            buf[k] = (unsigned char)rng();
        if (len && iter % 2)
            buf[0] = (unsigned char)(0x80 | (rng() & 0x0f)); /* start like a map */
        expect_proto(buf, len, NULL);
    }
}

static void test_every_truncation(void **state)
{
    (void)state;
    ein_msg ms[16];
    int n = sample_messages(ms);
    for (int i = 0; i < n; i++) {
        ein_error err = {0};
        void *buf = NULL;
        size_t len = 0;
        assert_int_equal(ein_msg_encode(&ms[i], &buf, &len, &err), 0);
        for (size_t cut = 0; cut < len; cut++)
            expect_proto(buf, cut, NULL);
        /* and one byte too many */
        unsigned char *more = malloc(len + 1);
        memcpy(more, buf, len);
        more[len] = 0;
        expect_proto(more, len + 1, "trailing");
        free(more);
        free(buf);
        ein_msg_clear(&ms[i]);
    }
}

/* ---- mutation fuzz ---------------------------------------------------- */

static void test_mutation_fuzz(void **state)
{
    (void)state;
    ein_msg ms[16];
    void *bufs[16];
    size_t lens[16];
    int n = sample_messages(ms);
    for (int i = 0; i < n; i++) {
        ein_error err = {0};
        assert_int_equal(ein_msg_encode(&ms[i], &bufs[i], &lens[i], &err), 0);
        ein_msg_clear(&ms[i]);
    }
    /* The program message is the richest target: give it half the runs. */
    int accepted = 0;
    for (int iter = 0; iter < 20000; iter++) {
        int which = iter % 2 ? 1 : (int)(rng() % (uint64_t)n);
        size_t len = lens[which];
        unsigned char *buf = malloc(len + 8);
        assert_non_null(buf);
        memcpy(buf, bufs[which], len);
        int muts = 1 + (int)(rng() % 4);
        for (int k = 0; k < muts; k++) {
            size_t at = (size_t)(rng() % len);
            switch (rng() % 4) {
            case 0: buf[at] ^= (unsigned char)(1u << (rng() % 8)); break;
            case 1: buf[at] = (unsigned char)rng(); break;
            case 2: buf[at] = (unsigned char)(rng() % 2 ? 0xff : 0x00); break;
            default: buf[at] = (unsigned char)(buf[at] + (rng() % 2 ? 1 : -1)); break;
            }
        }
        if (rng() % 8 == 0)
            len = (size_t)(rng() % (len + 1));
        ein_error err = {0};
        ein_msg out;
        int rc = ein_msg_decode(buf, len, &out, &err);
        if (rc != 0 && rc != EIN_EPROTO)
            fail_msg("iteration %d: rc %d: %s", iter, rc, err.msg);
        if (rc == 0) {
            accepted++;
            /* Whatever was accepted is a valid program and re-encodes. */
            if (out.type == EIN_MSG_PROGRAM) {
                assert_int_equal(ein_program_validate(out.program, &err), 0);
                void *again = NULL;
                size_t alen = 0;
                ein_msg back;
                assert_int_equal(ein_msg_encode(&out, &again, &alen, &err), 0);
                assert_int_equal(ein_msg_decode(again, alen, &back, &err), 0);
                assert_programs_equal(out.program, back.program);
                ein_msg_clear(&back);
                free(again);
            }
            ein_msg_clear(&out);
        } else {
            assert_null(out.program);
            assert_true(strlen(err.msg) > 0);
        }
        free(buf);
    }
    /* Some mutations are harmless (a changed value in range). */
    assert_true(accepted > 0);
    for (int i = 0; i < n; i++)
        free(bufs[i]);
}

/* START carries `store` and the inputs to load again ([name, path], ""
 * for generated): both round-trip, and malformed ones are refused. */
/* DONE's optional graph fields: absent from a message that has nothing to
 * say (so it is what an older worker sends), zero when absent, checked
 * when present, refused on other messages. */
static int has_text(const void *buf, size_t len, const char *t)
{
    size_t n = strlen(t);
    for (size_t i = 0; i + n <= len; i++)
        if (!memcmp((const char *)buf + i, t, n))
            return 1;
    return 0;
}

static void test_done_graph_fields(void **state)
{
    (void)state;
    ein_error err = {0};
    ein_msg m, out;
    void *buf = NULL;
    size_t len = 0;
    memset(&m, 0, sizeof m);
    m.type = EIN_MSG_DONE, m.device = 1, m.t_total = 1;
    assert_int_equal(ein_msg_encode(&m, &buf, &len, &err), 0);
    assert_int_equal(((unsigned char *)buf)[0], 0x87); /* type v device + 4 times */
    assert_false(has_text(buf, len, "graph"));
    free(buf);
    m.graphs_launched = 5;
    assert_int_equal(ein_msg_encode(&m, &buf, &len, &err), 0);
    assert_int_equal(((unsigned char *)buf)[0], 0x88); /* only the field that is set */
    assert_int_equal(ein_msg_decode(buf, len, &out, &err), 0);
    assert_int_equal(out.graphs_launched, 5);
    assert_int_equal(out.graphs_captured, 0);
    assert_string_equal(out.graph_error, "");
    free(buf);

    /* an old worker's DONE: seven fields, decodes with zero counts */
    packed p;
    pk_begin(&p);
    msgpack_pack_map(&p.pk, 7);
    pk_str(&p, "type"); pk_str(&p, "done");
    pk_str(&p, "v"); msgpack_pack_int(&p.pk, EIN_PROTOCOL_VERSION);
    pk_str(&p, "device"); msgpack_pack_int(&p.pk, 0);
    pk_str(&p, "t_total"); msgpack_pack_double(&p.pk, 1);
    pk_str(&p, "t_kernel"); msgpack_pack_double(&p.pk, 0);
    pk_str(&p, "t_copy"); msgpack_pack_double(&p.pk, 0);
    pk_str(&p, "t_wait"); msgpack_pack_double(&p.pk, 0);
    memset(&out, 0x55, sizeof out);
    assert_int_equal(ein_msg_decode(p.sb.data, p.sb.size, &out, &err), 0);
    assert_int_equal(out.graphs_captured + out.graphs_launched + out.graphs_failed, 0);
    assert_int_equal(out.graphs_short, 0);
    assert_int_equal(out.t_device, 0);
    assert_string_equal(out.graph_error, "");
    msgpack_sbuffer_destroy(&p.sb);

    /* bad values */
    static const struct { const char *field; int kind; const char *want; } bad[] = {
        {"graphs_captured", 0, "'graphs_captured': integer out of range"},
        {"graphs_launched", 1, "'graphs_launched': expected an integer"},
        {"graphs_failed", 2, "'graphs_failed': integer out of range"},
        {"graph_error", 3, "'graph_error': expected a string"},
        {"graph_error", 4, "'graph_error': string of"},
        {"t_device", 5, "'t_device': integer out of range"},
        {"graphs_short", 0, "'graphs_short': integer out of range"},
        {"graphs_short", 1, "'graphs_short': expected an integer"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        pk_begin(&p);
        msgpack_pack_map(&p.pk, 8);
        pk_str(&p, "type"); pk_str(&p, "done");
        pk_str(&p, "v"); msgpack_pack_int(&p.pk, EIN_PROTOCOL_VERSION);
        pk_str(&p, "device"); msgpack_pack_int(&p.pk, 0);
        pk_str(&p, "t_total"); msgpack_pack_double(&p.pk, 1);
        pk_str(&p, "t_kernel"); msgpack_pack_double(&p.pk, 0);
        pk_str(&p, bad[i].field);
        switch (bad[i].kind) {
        case 0: msgpack_pack_int(&p.pk, -1); break;
        case 1: pk_str(&p, "3"); break;
        case 2: msgpack_pack_int64(&p.pk, (int64_t)INT32_MAX + 1); break;
        case 3: msgpack_pack_int(&p.pk, 3); break;
        case 5: msgpack_pack_int(&p.pk, 2); break;
        default: {
            char big[EIN_MSG_TEXT_MAX + 1];
            memset(big, 'e', sizeof big - 1);
            big[sizeof big - 1] = '\0';
            pk_str(&p, big);
        }
        }
        pk_str(&p, "t_copy"); msgpack_pack_double(&p.pk, 0);
        pk_str(&p, "t_wait"); msgpack_pack_double(&p.pk, 0);
        pk_expect(&p, bad[i].want);
    }
    /* not on other messages */
    pk_begin(&p);
    msgpack_pack_map(&p.pk, 5);
    pk_str(&p, "type"); pk_str(&p, "ready");
    pk_str(&p, "v"); msgpack_pack_int(&p.pk, EIN_PROTOCOL_VERSION);
    pk_str(&p, "device"); msgpack_pack_int(&p.pk, 0);
    pk_str(&p, "buffer"); msgpack_pack_int(&p.pk, 1);
    pk_str(&p, "graphs_captured"); msgpack_pack_int(&p.pk, 1);
    pk_expect(&p, "ready message: unexpected field 'graphs_captured'");
    /* the encoder of another type never sends them */
    memset(&m, 0, sizeof m);
    m.type = EIN_MSG_HEARTBEAT, m.graphs_captured = 4;
    strcpy(m.graph_error, "x");
    assert_int_equal(ein_msg_encode(&m, &buf, &len, &err), 0);
    assert_false(has_text(buf, len, "graph"));
    free(buf);
}

/* Entry points (coordinator/compile/co_entries.h): an instruction's entries and a
 * START's entry travel, only when non-zero; an entry past EIN_ENTRY_MAX is
 * refused. */
static void test_entries(void **state)
{
    (void)state;
    ein_error err = {0};
    ein_program *p = sample_program(), *q = NULL;
    p->instrs[0].entries = 5;
    p->instrs[p->ninstrs - 1].entries = 0x80000000u;
    void *buf = NULL;
    size_t len = 0;
    assert_int_equal(ein_program_encode(p, &buf, &len, &err), 0);
    if (ein_program_decode(buf, len, &q, &err) != 0)
        fail_msg("decode: %s", err.msg);
    free(buf);
    for (int i = 0; i < p->ninstrs; i++)
        assert_int_equal(q->instrs[i].entries, p->instrs[i].entries);
    ein_program_free(p);
    ein_program_free(q);

    ein_msg m = {.type = EIN_MSG_START, .store = 1, .entry = 3}, out;
    assert_int_equal(ein_msg_encode(&m, &buf, &len, &err), 0);
    assert_true(has_text(buf, len, "entry"));
    assert_int_equal(ein_msg_decode(buf, len, &out, &err), 0);
    free(buf);
    assert_int_equal(out.entry, 3);
    ein_msg_clear(&out);
    m.entry = 0;   /* not sent */
    assert_int_equal(ein_msg_encode(&m, &buf, &len, &err), 0);
    assert_false(has_text(buf, len, "entry"));
    free(buf);

    packed pk;
    pk_begin(&pk);
    msgpack_pack_map(&pk.pk, 5);
    pk_str(&pk, "type"); pk_str(&pk, "start");
    pk_str(&pk, "v"); msgpack_pack_int(&pk.pk, EIN_PROTOCOL_VERSION);
    pk_str(&pk, "store"); msgpack_pack_int(&pk.pk, 0);
    pk_str(&pk, "reload"); msgpack_pack_array(&pk.pk, 0);
    pk_str(&pk, "entry"); msgpack_pack_int(&pk.pk, EIN_ENTRY_MAX + 1);
    pk_expect(&pk, "entry");
}

static void test_start_reload(void **state)
{
    (void)state;
    ein_reload rl[2] = {{.name = "x", .path = "/tmp/m.safetensors", .format = EIN_LOAD_RAW,
                         .offset = 4096},
                        {.name = "w1", .path = NULL}};
    ein_msg m = {.type = EIN_MSG_START, .store = 1, .reload = rl, .nreload = 2}, out;
    ein_error err = {0};
    void *buf = NULL;
    size_t len = 0;
    assert_int_equal(ein_msg_encode(&m, &buf, &len, &err), 0);
    assert_int_equal(ein_msg_decode(buf, len, &out, &err), 0);
    free(buf);
    assert_int_equal(out.type, EIN_MSG_START);
    assert_int_equal(out.store, 1);
    assert_int_equal(out.nreload, 2);
    assert_string_equal(out.reload[0].name, "x");
    assert_string_equal(out.reload[0].path, "/tmp/m.safetensors");
    assert_int_equal(out.reload[0].format, EIN_LOAD_RAW);
    assert_int_equal(out.reload[0].offset, 4096);
    assert_string_equal(out.reload[1].name, "w1");
    assert_null(out.reload[1].path);
    ein_msg_clear(&out);

    packed p;
    pk_begin(&p); /* reload not an array */
    msgpack_pack_map(&p.pk, 4);
    pk_str(&p, "type"); pk_str(&p, "start");
    pk_str(&p, "v"); msgpack_pack_int(&p.pk, EIN_PROTOCOL_VERSION);
    pk_str(&p, "store"); msgpack_pack_int(&p.pk, 0);
    pk_str(&p, "reload"); msgpack_pack_int(&p.pk, 3);
    pk_expect(&p, "'reload': expected an array");

    pk_begin(&p); /* an entry of one element */
    msgpack_pack_map(&p.pk, 4);
    pk_str(&p, "type"); pk_str(&p, "start");
    pk_str(&p, "v"); msgpack_pack_int(&p.pk, EIN_PROTOCOL_VERSION);
    pk_str(&p, "store"); msgpack_pack_int(&p.pk, 0);
    pk_str(&p, "reload"); msgpack_pack_array(&p.pk, 1); msgpack_pack_array(&p.pk, 1);
    pk_str(&p, "x");
    pk_expect(&p, "expected [name, path, format, offset]");

    pk_begin(&p); /* an empty name */
    msgpack_pack_map(&p.pk, 4);
    pk_str(&p, "type"); pk_str(&p, "start");
    pk_str(&p, "v"); msgpack_pack_int(&p.pk, EIN_PROTOCOL_VERSION);
    pk_str(&p, "store"); msgpack_pack_int(&p.pk, 1);
    pk_str(&p, "reload"); msgpack_pack_array(&p.pk, 1); msgpack_pack_array(&p.pk, 4);
    pk_str(&p, ""); pk_str(&p, "a.npy"); msgpack_pack_int(&p.pk, 0); msgpack_pack_int(&p.pk, 0);
    pk_expect(&p, "empty name");

    pk_begin(&p); /* an offset into a .npy */
    msgpack_pack_map(&p.pk, 4);
    pk_str(&p, "type"); pk_str(&p, "start");
    pk_str(&p, "v"); msgpack_pack_int(&p.pk, EIN_PROTOCOL_VERSION);
    pk_str(&p, "store"); msgpack_pack_int(&p.pk, 1);
    pk_str(&p, "reload"); msgpack_pack_array(&p.pk, 1); msgpack_pack_array(&p.pk, 4);
    pk_str(&p, "x"); pk_str(&p, "a.npy"); msgpack_pack_int(&p.pk, 0); msgpack_pack_int(&p.pk, 8);
    pk_expect(&p, "an offset for a .npy");

    pk_begin(&p); /* store out of range */
    msgpack_pack_map(&p.pk, 4);
    pk_str(&p, "type"); pk_str(&p, "start");
    pk_str(&p, "v"); msgpack_pack_int(&p.pk, EIN_PROTOCOL_VERSION);
    pk_str(&p, "store"); msgpack_pack_int(&p.pk, 2);
    pk_str(&p, "reload"); msgpack_pack_array(&p.pk, 0);
    pk_expect(&p, "'store'");

    pk_begin(&p); /* START without its fields */
    msgpack_pack_map(&p.pk, 2);
    pk_str(&p, "type"); pk_str(&p, "start");
    pk_str(&p, "v"); msgpack_pack_int(&p.pk, EIN_PROTOCOL_VERSION);
    pk_expect(&p, "missing field 'store'");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_builders),
        cmocka_unit_test(test_lse_program),
        cmocka_unit_test(test_validate_rejects),
        cmocka_unit_test(test_validate_kernels),
        cmocka_unit_test(test_program_roundtrip),
        cmocka_unit_test(test_message_roundtrip),
        cmocka_unit_test(test_wrong_fields),
        cmocka_unit_test(test_kernel_fields),
        cmocka_unit_test(test_huge_counts),
        cmocka_unit_test(test_garbage),
        cmocka_unit_test(test_every_truncation),
        cmocka_unit_test(test_mutation_fuzz),
        cmocka_unit_test(test_start_reload),
        cmocka_unit_test(test_entries),
        cmocka_unit_test(test_done_graph_fields),
        cmocka_unit_test(test_peer_addresses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
