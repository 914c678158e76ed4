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

#include "common/ein_error.h"
#include "common/ein_program.h"
#include "common/ein_rand.h"
#include "common/ein_wire.h"

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
        case EIN_I_KERNEL:
            assert_int_equal(x->kernel.kind, y->kernel.kind);
            if (x->kernel.kind == EIN_KERNEL_EINSUM)
                assert_string_equal(x->kernel.subscripts, y->kernel.subscripts);
            if (x->kernel.kind == EIN_KERNEL_UNARY) {
                assert_int_equal(x->kernel.unary, y->kernel.unary);
                assert_true(x->kernel.scalar == y->kernel.scalar);
            }
            if (x->kernel.kind == EIN_KERNEL_BINARY)
                assert_int_equal(x->kernel.binary, y->kernel.binary);
            break;
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
    assert_int_equal(p->nbuffers, 12);
    assert_int_equal(p->ninstrs, 15);
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
    assert_int_equal(ein_program_add_buffer(p, (ein_dtype)7, &bad, &err), EIN_EINVAL);
    bad.rank = 9;
    assert_int_equal(ein_program_add_buffer(p, EIN_F32, &bad, &err), EIN_EINVAL);
    ein_instr ins = blank(EIN_I_COPY, "", 0);
    ins.ndeps = 2; /* but no array */
    assert_int_equal(ein_program_add_instr(p, &ins, &err), EIN_EINVAL);
    ein_program_free(p);
    ein_program_free(NULL);

    assert_string_equal(ein_instr_kind_name(EIN_I_CONCAT), "concat");
    assert_string_equal(ein_instr_kind_name(EIN_I_NOTIFY), "notify");
    assert_string_equal(ein_instr_kind_name((ein_instr_kind)99), "?");
    assert_string_equal(ein_unary_name(EIN_UN_GELU), "gelu");
    assert_string_equal(ein_binary_name(EIN_BIN_SUB), "sub");
    assert_string_equal(ein_kernel_kind_name(EIN_KERNEL_BINARY), "binary");
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
static void m_src_range(ein_program *p) { p->instrs[5].srcs[0] = 12; }
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
static void m_einsum_extent(ein_program *p) { strcpy(p->instrs[2].kernel.subscripts, "ij,jj->ij"); }
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
    expect_invalid(m_src_range, "source buffer 12 out of range");
    expect_invalid3(m_dst_range, "dst buffer -2", "instrs[5].dst: integer out of range");
    expect_invalid(m_store_dst, "dst must be -1");
    expect_invalid(m_load_src, "1 sources");
    expect_invalid(m_slice_outside, "does not contain");
    expect_invalid(m_concat_outside, "not inside dst");
    expect_invalid(m_agg_box, "differs from dst");
    expect_invalid(m_agg_none, "invalid aggregation");
    expect_invalid(m_einsum_extent, "index 'j' has extents");
    expect_invalid(m_einsum_arrow, "lack '->'");
    expect_invalid(m_einsum_rank, "operand 0 has 3 letters");
    expect_invalid(m_einsum_out, "output index 'z'");
    expect_invalid(m_unary_box, "box differs");
    expect_invalid(m_store_shape, "not inside the tensor's shape");
    expect_invalid(m_load_rank, "rank 2 but the tensor has rank 3");
    expect_invalid(m_store_path, "missing path");
    expect_invalid3(m_op_unterminated, "instr 4: op name not NUL-terminated", "instrs[4].op: string of 64 bytes");
    expect_invalid(m_device, "device 4 of 4");
    expect_invalid(m_binary_arity, "binary kernel takes 2");
}

/* ---- round trips ------------------------------------------------------ */

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
    memset(ms, 0, sizeof(ein_msg) * 9);
    ms[n].type = EIN_MSG_HELLO, ms[n].device = 3, ms[n].pid = 123456789012LL, n++;
    ms[n].type = EIN_MSG_PROGRAM, ms[n].program = sample_program(), n++;
    ms[n].type = EIN_MSG_START, n++;
    ms[n].type = EIN_MSG_READY, ms[n].device = 2, ms[n].buffer = 77, n++;
    ms[n].type = EIN_MSG_HEARTBEAT, ms[n].device = 0, ms[n].instr = -1, n++;
    ms[n].type = EIN_MSG_HEARTBEAT, ms[n].device = 7, ms[n].instr = 1234567, n++;
    ms[n].type = EIN_MSG_DONE, ms[n].device = 5, ms[n].t_total = 1.5, ms[n].t_kernel = 0.25,
    ms[n].t_copy = 1e-9, ms[n].t_wait = 0, n++;
    ms[n].type = EIN_MSG_ERROR, ms[n].device = 6, ms[n].instr = 42, ms[n].code = EIN_EDEVICE;
    strcpy(ms[n].op, "matmul_3");
    strcpy(ms[n].text, "cudaMemcpyAsync: an illegal memory access was encountered");
    n++;
    ms[n].type = EIN_MSG_SHUTDOWN, n++;
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
    assert_int_equal(!a->program, !b->program);
    if (a->program)
        assert_programs_equal(a->program, b->program);
}

static void test_message_roundtrip(void **state)
{
    (void)state;
    ein_msg ms[9];
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
    pk_str(&p, "v"); msgpack_pack_int(&p.pk, 1);
    pk_expect(&p, "'type': expected a string");

    pk_begin(&p); /* unknown type */
    msgpack_pack_map(&p.pk, 2);
    pk_str(&p, "type"); pk_str(&p, "bogus");
    pk_str(&p, "v"); msgpack_pack_int(&p.pk, 1);
    pk_expect(&p, "unknown type 'bogus'");

    pk_begin(&p); /* wrong version */
    msgpack_pack_map(&p.pk, 2);
    pk_str(&p, "type"); pk_str(&p, "start");
    pk_str(&p, "v"); msgpack_pack_int(&p.pk, 2);
    pk_expect(&p, "protocol version 2");

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
    pk_str(&p, "v"); msgpack_pack_int(&p.pk, 1);
    pk_expect(&p, "missing field 'type'");

    pk_begin(&p); /* device as a string */
    msgpack_pack_map(&p.pk, 4);
    pk_str(&p, "type"); pk_str(&p, "hello");
    pk_str(&p, "v"); msgpack_pack_int(&p.pk, 1);
    pk_str(&p, "device"); pk_str(&p, "0");
    pk_str(&p, "pid"); msgpack_pack_int(&p.pk, 99);
    pk_expect(&p, "'device': expected an integer");

    pk_begin(&p); /* missing pid */
    msgpack_pack_map(&p.pk, 3);
    pk_str(&p, "type"); pk_str(&p, "hello");
    pk_str(&p, "v"); msgpack_pack_int(&p.pk, 1);
    pk_str(&p, "device"); msgpack_pack_int(&p.pk, 0);
    pk_expect(&p, "missing field 'pid'");

    pk_begin(&p); /* negative buffer */
    msgpack_pack_map(&p.pk, 4);
    pk_str(&p, "type"); pk_str(&p, "ready");
    pk_str(&p, "v"); msgpack_pack_int(&p.pk, 1);
    pk_str(&p, "device"); msgpack_pack_int(&p.pk, 0);
    pk_str(&p, "buffer"); msgpack_pack_int(&p.pk, -4);
    pk_expect(&p, "'buffer': integer out of range");

    pk_begin(&p); /* device beyond int32 */
    msgpack_pack_map(&p.pk, 4);
    pk_str(&p, "type"); pk_str(&p, "ready");
    pk_str(&p, "v"); msgpack_pack_int(&p.pk, 1);
    pk_str(&p, "device"); msgpack_pack_uint64(&p.pk, UINT64_MAX);
    pk_str(&p, "buffer"); msgpack_pack_int(&p.pk, 4);
    pk_expect(&p, "'device': integer out of range");

    pk_begin(&p); /* field of another type */
    msgpack_pack_map(&p.pk, 3);
    pk_str(&p, "type"); pk_str(&p, "start");
    pk_str(&p, "v"); msgpack_pack_int(&p.pk, 1);
    pk_str(&p, "pid"); msgpack_pack_int(&p.pk, 1);
    pk_expect(&p, "unexpected field 'pid'");

    pk_begin(&p); /* unknown field */
    msgpack_pack_map(&p.pk, 3);
    pk_str(&p, "type"); pk_str(&p, "start");
    pk_str(&p, "v"); msgpack_pack_int(&p.pk, 1);
    pk_str(&p, "colour"); msgpack_pack_int(&p.pk, 1);
    pk_expect(&p, "unknown field 'colour'");

    pk_begin(&p); /* duplicate field */
    msgpack_pack_map(&p.pk, 3);
    pk_str(&p, "type"); pk_str(&p, "start");
    pk_str(&p, "v"); msgpack_pack_int(&p.pk, 1);
    pk_str(&p, "v"); msgpack_pack_int(&p.pk, 1);
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
    pk_str(&p, "v"); msgpack_pack_int(&p.pk, 1);
    pk_str(&p, "device"); msgpack_pack_int(&p.pk, 0);
    pk_str(&p, "instr"); msgpack_pack_int(&p.pk, 0);
    pk_str(&p, "op"); pk_str(&p, "x");
    pk_str(&p, "code"); msgpack_pack_int(&p.pk, -3);
    pk_str(&p, "text"); msgpack_pack_str(&p.pk, 3); msgpack_pack_str_body(&p.pk, "a\0b", 3);
    pk_expect(&p, "'text': string contains a NUL");

    pk_begin(&p);
    msgpack_pack_map(&p.pk, 7);
    pk_str(&p, "type"); pk_str(&p, "error");
    pk_str(&p, "v"); msgpack_pack_int(&p.pk, 1);
    pk_str(&p, "device"); msgpack_pack_int(&p.pk, 0);
    pk_str(&p, "instr"); msgpack_pack_int(&p.pk, 0);
    pk_str(&p, "op"); pk_str(&p, "0123456789012345678901234567890123456789012345678901234567890123");
    pk_str(&p, "code"); msgpack_pack_int(&p.pk, -3);
    pk_str(&p, "text"); pk_str(&p, "");
    pk_expect(&p, "'op': string of 64 bytes is too long");

    pk_begin(&p);
    msgpack_pack_map(&p.pk, 7);
    pk_str(&p, "type"); pk_str(&p, "error");
    pk_str(&p, "v"); msgpack_pack_int(&p.pk, 1);
    pk_str(&p, "device"); msgpack_pack_int(&p.pk, 0);
    pk_str(&p, "instr"); msgpack_pack_int(&p.pk, 0);
    pk_str(&p, "op"); pk_str(&p, "");
    pk_str(&p, "code"); msgpack_pack_int(&p.pk, 3);
    pk_str(&p, "text"); pk_str(&p, "");
    pk_expect(&p, "'code': integer out of range");

    pk_begin(&p);
    msgpack_pack_map(&p.pk, 7);
    pk_str(&p, "type"); pk_str(&p, "done");
    pk_str(&p, "v"); msgpack_pack_int(&p.pk, 1);
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
    pk_str(&p, "v"); msgpack_pack_int8(&p.pk, 1);
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
    pk_str(&p, "v"); msgpack_pack_int(&p.pk, 1);
    pk_str(&p, "program"); msgpack_pack_array(&p.pk, 0);
    pk_expect(&p, "program: expected a map");

    pk_begin(&p);
    msgpack_pack_map(&p.pk, 3);
    pk_str(&p, "type"); pk_str(&p, "program");
    pk_str(&p, "v"); msgpack_pack_int(&p.pk, 1);
    pk_str(&p, "program"); msgpack_pack_map(&p.pk, 1);
    pk_str(&p, "device"); msgpack_pack_int(&p.pk, 0);
    pk_expect(&p, "program: missing field 'ndevices'");
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
    ein_msg ms[9];
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
    ein_msg ms[9];
    void *bufs[9];
    size_t lens[9];
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_builders),
        cmocka_unit_test(test_validate_rejects),
        cmocka_unit_test(test_program_roundtrip),
        cmocka_unit_test(test_message_roundtrip),
        cmocka_unit_test(test_wrong_fields),
        cmocka_unit_test(test_huge_counts),
        cmocka_unit_test(test_garbage),
        cmocka_unit_test(test_every_truncation),
        cmocka_unit_test(test_mutation_fuzz),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
