/* tests/worker/test_wk_staged.c — device memory between hosts through
 * pinned host buffers (worker/wk_staged.h), with a CPU stand-in for the
 * GPU and for the network that are as lazy as the real ones may be:
 *
 * - the "device" copies are only queued, in stream order, and done when a
 *   wait() reaches them (as cudaMemcpyAsync runs later on its stream); a
 *   staging that reads a host buffer before its copy was waited for, or
 *   reuses a slot whose copy is still queued, moves the wrong bytes;
 * - the "network" keeps each sent chunk's pointer and reads it only when
 *   the test completes the send (as UCX may for a large message), so a
 *   buffer reused before its sends completed shows as wrong bytes too.
 *
 * Checks: the bytes arrive whole for sizes around the chunk size
 * (0, 1, chunk - 1, chunk, chunk + 1, 5 chunks + 3); chunk count and
 * sizes on the wire; receive slots alternate; buffers are reused once
 * released and not before; a failing network or device copy is reported
 * and leaves no buffer held. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "worker/wk_staged.h"

#define CHUNK 64
#define MAXQ 4096

/* ---- the lazy device ---- */
typedef struct qcopy {
    void *dst;
    const void *src;
    size_t n;
    int slot;
} qcopy;

typedef struct dev {
    qcopy q[MAXQ];
    int head, tail;             /* queued copies [head, tail) */
    int nalloc, nfree;
    int fail_after;             /* to_device/to_host calls before one fails (-1: never) */
    int slots_used[WK_STAGED_SLOTS];
} dev;

static int enqueue(dev *d, int slot, void *dst, const void *src, size_t n, ein_error *err)
{
    if (d->fail_after == 0)
        return ein_fail(err, EIN_EDEVICE, "injected copy failure");
    if (d->fail_after > 0)
        d->fail_after--;
    assert_true(slot >= 0 && slot < WK_STAGED_SLOTS);
    assert_true(d->tail < MAXQ);
    d->q[d->tail++] = (qcopy){dst, src, n, slot};
    d->slots_used[slot]++;
    return 0;
}

static int to_host(void *ctx, int slot, void *host, const void *src, size_t n, ein_error *err)
{
    return enqueue(ctx, slot, host, src, n, err);
}

static int to_device(void *ctx, int slot, void *dst, const void *host, size_t n, ein_error *err)
{
    return enqueue(ctx, slot, dst, host, n, err);
}

/* Run the queue, in order, up to the last copy of `slot`. */
static int dwait(void *ctx, int slot, ein_error *err)
{
    (void)err;
    dev *d = ctx;
    int last = -1;
    for (int i = d->head; i < d->tail; i++)
        if (d->q[i].slot == slot)
            last = i;
    for (; d->head <= last; d->head++)
        memcpy(d->q[d->head].dst, d->q[d->head].src, d->q[d->head].n);
    return 0;
}

static int halloc(void *ctx, size_t n, void **p, ein_error *err)
{
    dev *d = ctx;
    if (!(*p = malloc(n)))
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    memset(*p, 0xEE, n);
    d->nalloc++;
    return 0;
}

static void hfree(void *ctx, void *p)
{
    ((dev *)ctx)->nfree++;
    free(p);
}

/* ---- the lazy network: a FIFO of chunks, read when completed ---- */
typedef struct chunk {
    const void *p;              /* until completed */
    unsigned char *copy;        /* after */
    size_t n;
    void (*done)(void *);
    void *arg;
} chunk;

typedef struct net {
    chunk c[MAXQ];
    int nsent, ncompleted, nrecv;
    int fail_send_at;           /* chunk index whose send fails (-1: none) */
} net;

static int nsend(void *ctx, const void *p, size_t n, void (*done)(void *), void *arg,
                 ein_error *err)
{
    net *t = ctx;
    if (t->nsent == t->fail_send_at)
        return ein_fail(err, EIN_EIO, "injected send failure");
    assert_true(t->nsent < MAXQ);
    t->c[t->nsent++] = (chunk){.p = p, .n = n, .done = done, .arg = arg};
    return 0;
}

/* Complete every send so far: read its bytes now, release its buffer. */
static void complete(net *t)
{
    for (; t->ncompleted < t->nsent; t->ncompleted++) {
        chunk *c = &t->c[t->ncompleted];
        c->copy = malloc(c->n ? c->n : 1);
        assert_non_null(c->copy);
        memcpy(c->copy, c->p, c->n);
        c->done(c->arg);
    }
}

static int nrecv(void *ctx, void *p, size_t n, ein_error *err)
{
    net *t = ctx;
    complete(t);
    if (t->nrecv >= t->nsent)
        return ein_fail(err, EIN_EPROTO, "nothing to receive");
    chunk *c = &t->c[t->nrecv++];
    if (c->n != n)
        return ein_fail(err, EIN_EPROTO, "chunk of %zu bytes, %zu expected", c->n, n);
    memcpy(p, c->copy, n);
    return 0;
}

static void net_clear(net *t)
{
    for (int i = 0; i < t->ncompleted; i++)
        free(t->c[i].copy);
    memset(t, 0, sizeof *t);
    t->fail_send_at = -1;
}

static void net_init(net *t)
{
    memset(t, 0, sizeof *t);
    t->fail_send_at = -1;
}

static wk_staged *new_staged(dev *d)
{
    memset(d, 0, sizeof *d);
    d->fail_after = -1;
    wk_staged_ops ops = {d, to_host, to_device, dwait, halloc, hfree};
    wk_staged *s = NULL;
    ein_error err = {0};
    assert_int_equal(wk_staged_new(&ops, CHUNK, &s, &err), 0);
    return s;
}

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(seed * 131 + i * 7 + (i >> 8));
}

/* Send `bytes` from one "device", receive on another: same bytes. */
static void round_trip(size_t bytes, unsigned seed)
{
    static dev d;
    static net t;
    net_init(&t);
    wk_staged *s = new_staged(&d);
    unsigned char *src = malloc(bytes + 1), *dst = malloc(bytes + 1);
    assert_non_null(src);
    assert_non_null(dst);
    fill(src, bytes, seed);
    memset(dst, 0, bytes + 1);
    wk_staged_net n = {&t, nsend, nrecv};
    ein_error err = {0};
    assert_int_equal(wk_staged_send(s, src, bytes, &n, &err), 0);
    /* The source may change once send returns (its copies are done)... */
    memset(src + (bytes ? 0 : 0), 0x55, bytes);
    fill(src, bytes, seed);
    /* ... and the chunks on the wire are the block's, in order. */
    size_t nch = wk_staged_nchunks(bytes, CHUNK);
    assert_int_equal(t.nsent, (int)nch);
    for (size_t i = 0; i < nch; i++)
        assert_int_equal(t.c[i].n, wk_staged_chunk_len(bytes, CHUNK, i));
    assert_int_equal(wk_staged_recv(s, dst, bytes, &n, &err), 0);
    if (memcmp(src, dst, bytes) != 0)
        fail_msg("%zu bytes: received block differs", bytes);
    assert_int_equal(dst[bytes], 0); /* nothing written past the block */
    assert_int_equal(d.head, d.tail); /* every device copy done */
    int held = -1;
    wk_staged_buffers(s, &held);
    assert_int_equal(held, 0);
    if (nch > 1) /* the receive alternates its two slots */
        assert_true(d.slots_used[0] > 0 && d.slots_used[1] > 0);
    wk_staged_free(s);
    assert_int_equal(d.nalloc, d.nfree);
    net_clear(&t);
    free(src);
    free(dst);
}

static void sizes_round_trip(void **state)
{
    (void)state;
    size_t sizes[] = {0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK, 5 * CHUNK + 3, 100 * CHUNK};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        round_trip(sizes[i], (unsigned)i + 1);
}

static void chunk_arithmetic(void **state)
{
    (void)state;
    assert_int_equal(wk_staged_nchunks(0, 10), 1);
    assert_int_equal(wk_staged_nchunks(1, 10), 1);
    assert_int_equal(wk_staged_nchunks(10, 10), 1);
    assert_int_equal(wk_staged_nchunks(11, 10), 2);
    assert_int_equal(wk_staged_chunk_len(0, 10, 0), 0);
    assert_int_equal(wk_staged_chunk_len(25, 10, 0), 10);
    assert_int_equal(wk_staged_chunk_len(25, 10, 2), 5);
    assert_int_equal(wk_staged_chunk_len(25, 10, 3), 0);
}

/* A buffer is reused once its sends completed, and not before: two
 * blocks in flight at once get two buffers, each with its own bytes. */
static void buffers_reused_only_when_released(void **state)
{
    (void)state;
    static dev d;
    static net t;
    net_init(&t);
    wk_staged *s = new_staged(&d);
    size_t bytes = 3 * CHUNK + 5;
    unsigned char a[3 * CHUNK + 5], b[3 * CHUNK + 5], out[3 * CHUNK + 5];
    fill(a, bytes, 1);
    fill(b, bytes, 2);
    wk_staged_net n = {&t, nsend, nrecv};
    ein_error err = {0};
    assert_int_equal(wk_staged_send(s, a, bytes, &n, &err), 0);
    int held;
    assert_int_equal(wk_staged_buffers(s, &held), 1);
    assert_int_equal(held, 1);
    /* a's chunks not completed: b must not overwrite a's buffer */
    assert_int_equal(wk_staged_send(s, b, bytes, &n, &err), 0);
    assert_int_equal(wk_staged_buffers(s, &held), 2);
    assert_int_equal(held, 2);
    assert_int_equal(wk_staged_recv(s, out, bytes, &n, &err), 0);
    assert_memory_equal(out, a, bytes);
    assert_int_equal(wk_staged_recv(s, out, bytes, &n, &err), 0);
    assert_memory_equal(out, b, bytes);
    wk_staged_buffers(s, &held);
    assert_int_equal(held, 0);
    /* Everything released: a third block reuses a buffer. */
    int before = d.nalloc;
    assert_int_equal(wk_staged_send(s, a, bytes, &n, &err), 0);
    assert_int_equal(d.nalloc, before);
    complete(&t);
    /* A smaller block takes the smallest free buffer that fits. */
    assert_int_equal(wk_staged_send(s, a, 10, &n, &err), 0);
    assert_int_equal(d.nalloc, before);
    complete(&t);
    wk_staged_free(s);
    assert_int_equal(d.nalloc, d.nfree);
    net_clear(&t);
}

/* A send that fails part-way, and a device copy that fails, are reported
 * and hold no buffer (beyond the chunks already handed over). */
static void failures_release(void **state)
{
    (void)state;
    static dev d;
    static net t;
    net_init(&t);
    wk_staged *s = new_staged(&d);
    size_t bytes = 4 * CHUNK;
    unsigned char a[4 * CHUNK], out[4 * CHUNK];
    fill(a, bytes, 3);
    wk_staged_net n = {&t, nsend, nrecv};
    ein_error err = {0};
    t.fail_send_at = 2;
    assert_int_equal(wk_staged_send(s, a, bytes, &n, &err), EIN_EIO);
    assert_non_null(strstr(err.msg, "injected send failure"));
    int held;
    wk_staged_buffers(s, &held);
    assert_int_equal(held, 1); /* chunks 0 and 1 are still on the wire */
    complete(&t);
    wk_staged_buffers(s, &held);
    assert_int_equal(held, 0);
    net_clear(&t);
    d.fail_after = 1; /* the send's second device copy fails: nothing sent */
    assert_int_equal(wk_staged_send(s, a, bytes, &n, &err), EIN_EDEVICE);
    assert_int_equal(t.nsent, 0);
    wk_staged_buffers(s, &held);
    assert_int_equal(held, 0);
    d.fail_after = -1; /* the receive's second device copy fails */
    assert_int_equal(wk_staged_send(s, a, bytes, &n, &err), 0);
    d.fail_after = 1;
    memset(&err, 0, sizeof err);
    assert_int_equal(wk_staged_recv(s, out, bytes, &n, &err), EIN_EDEVICE);
    assert_non_null(strstr(err.msg, "injected copy failure"));
    wk_staged_buffers(s, &held);
    assert_int_equal(held, 0);
    assert_int_equal(d.head, d.tail);
    wk_staged_free(s);
    assert_int_equal(d.nalloc, d.nfree);
    net_clear(&t);
}

static void incomplete_ops_refused(void **state)
{
    (void)state;
    wk_staged_ops ops = {0};
    wk_staged *s = NULL;
    ein_error err = {0};
    assert_int_equal(wk_staged_new(&ops, 0, &s, &err), EIN_EINVAL);
    assert_null(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(chunk_arithmetic),
        cmocka_unit_test(sizes_round_trip),
        cmocka_unit_test(buffers_reused_only_when_released),
        cmocka_unit_test(failures_release),
        cmocka_unit_test(incomplete_ops_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
