/* worker/wk_staged.c — device memory between hosts through pinned host
 * buffers (wk_staged.h). */
#include "worker/wk_staged.h"

#include <stdlib.h>

typedef struct sbuf {
    void *p;
    size_t cap;
    int refs;               /* chunks whose sends hold it; 0: free */
    struct sbuf *next;
} sbuf;

struct wk_staged {
    wk_staged_ops ops;
    size_t chunk;
    sbuf *bufs;
};

int wk_staged_new(const wk_staged_ops *ops, size_t chunk, wk_staged **out, ein_error *err)
{
    if (!ops || !ops->to_host || !ops->to_device || !ops->wait || !ops->host_alloc ||
        !ops->host_free)
        return ein_fail(err, EIN_EINVAL, "staging between hosts: incomplete device operations");
    wk_staged *s = calloc(1, sizeof *s);
    if (!s)
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    s->ops = *ops;
    s->chunk = chunk ? chunk : WK_STAGED_CHUNK;
    *out = s;
    return 0;
}

void wk_staged_free(wk_staged *s)
{
    if (!s)
        return;
    for (sbuf *b = s->bufs, *n; b; b = n) {
        n = b->next;
        s->ops.host_free(s->ops.ctx, b->p);
        free(b);
    }
    free(s);
}

size_t wk_staged_nchunks(size_t bytes, size_t chunk)
{
    return bytes == 0 ? 1 : (bytes - 1) / chunk + 1;
}

size_t wk_staged_chunk_len(size_t bytes, size_t chunk, size_t i)
{
    size_t off = i * chunk;
    return off >= bytes ? 0 : bytes - off < chunk ? bytes - off : chunk;
}

int wk_staged_buffers(const wk_staged *s, int *held)
{
    int n = 0, h = 0;
    for (const sbuf *b = s->bufs; b; b = b->next) {
        n++;
        h += b->refs > 0;
    }
    if (held)
        *held = h;
    return n;
}

/* The smallest free buffer of at least `bytes`, else a new one. */
static sbuf *get(wk_staged *s, size_t bytes, ein_error *err)
{
    sbuf *best = NULL;
    for (sbuf *b = s->bufs; b; b = b->next)
        if (b->refs == 0 && b->cap >= bytes && (!best || b->cap < best->cap))
            best = b;
    if (best)
        return best;
    sbuf *b = calloc(1, sizeof *b);
    if (!b) {
        ein_fail(err, EIN_ENOMEM, "out of memory");
        return NULL;
    }
    if (s->ops.host_alloc(s->ops.ctx, bytes, &b->p, err) < 0) {
        free(b);
        return NULL;
    }
    b->cap = bytes;
    b->next = s->bufs;
    s->bufs = b;
    return b;
}

static void release(void *arg)
{
    sbuf *b = arg;
    if (b->refs > 0)
        b->refs--;
}

int wk_staged_send(wk_staged *s, const void *dev, size_t bytes, const wk_staged_net *net,
                   ein_error *err)
{
    size_t n = wk_staged_nchunks(bytes, s->chunk), c = s->chunk;
    sbuf *b = get(s, bytes ? bytes : 1, err);
    if (!b)
        return err ? err->code : EIN_ENOMEM;
    b->refs = (int)n; /* one per chunk, released as each send completes */
    const char *src = dev;
    char *host = b->p;
    int rc = 0;
    size_t i = 0;
    size_t len0 = wk_staged_chunk_len(bytes, c, 0);
    if (len0)
        rc = s->ops.to_host(s->ops.ctx, 0, host, src, len0, err);
    for (; rc == 0 && i < n; i++) {
        /* The next chunk's copy first, so that it runs while this one goes. */
        size_t next = i + 1 < n ? wk_staged_chunk_len(bytes, c, i + 1) : 0;
        if (next && (rc = s->ops.to_host(s->ops.ctx, (int)((i + 1) % WK_STAGED_SLOTS),
                                         host + (i + 1) * c, src + (i + 1) * c, next, err)) < 0)
            break;
        size_t len = wk_staged_chunk_len(bytes, c, i);
        if (len && (rc = s->ops.wait(s->ops.ctx, (int)(i % WK_STAGED_SLOTS), err)) < 0)
            break;
        if ((rc = net->send(net->ctx, host + i * c, len, release, b, err)) < 0)
            break;
    }
    if (rc < 0) {
        /* Chunks never handed to the network hold nothing; copies still
         * enqueued must end before the buffer can be reused. */
        b->refs -= (int)(n - i);
        if (b->refs < 0)
            b->refs = 0;
        for (int k = 0; k < WK_STAGED_SLOTS; k++)
            s->ops.wait(s->ops.ctx, k, NULL);
    }
    return rc;
}

int wk_staged_recv(wk_staged *s, void *dev, size_t bytes, const wk_staged_net *net,
                   ein_error *err)
{
    size_t n = wk_staged_nchunks(bytes, s->chunk), c = s->chunk;
    size_t slot_bytes = bytes < c ? (bytes ? bytes : 1) : c;
    sbuf *b = get(s, slot_bytes * (n > 1 ? WK_STAGED_SLOTS : 1), err);
    if (!b)
        return err ? err->code : EIN_ENOMEM;
    b->refs = 1; /* this call's */
    char *dst = dev;
    int rc = 0, used[WK_STAGED_SLOTS] = {0};
    for (size_t i = 0; rc == 0 && i < n; i++) {
        int slot = (int)(i % WK_STAGED_SLOTS);
        char *p = (char *)b->p + (size_t)slot * slot_bytes;
        size_t len = wk_staged_chunk_len(bytes, c, i);
        /* The slot's previous chunk must be in device memory first. */
        if (used[slot] && (rc = s->ops.wait(s->ops.ctx, slot, err)) < 0)
            break;
        used[slot] = 0;
        if ((rc = net->recv(net->ctx, p, len, err)) < 0)
            break;
        if (len && (rc = s->ops.to_device(s->ops.ctx, slot, dst + i * c, p, len, err)) < 0)
            break;
        used[slot] = len > 0;
    }
    /* Whole before return (and before the buffer is reused). */
    for (int k = 0; k < WK_STAGED_SLOTS; k++)
        if (used[k]) {
            int r = s->ops.wait(s->ops.ctx, k, rc < 0 ? NULL : err);
            if (rc == 0)
                rc = r;
        }
    b->refs = 0;
    return rc;
}
