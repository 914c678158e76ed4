/* worker/wk_record.c — recorded device calls (see wk_record.h). */
#include "worker/wk_record.h"

#include <stdlib.h>
#include <string.h>

#include "common/base/ein_vec.h"

typedef enum { REC_KERNEL, REC_AGG, REC_COPY, REC_COPY_BOX } rec_kind;

typedef struct rec_call {
    rec_kind kind;
    const ein_kernel *kernel;
    ein_agg agg;
    kn_block *ins; /* owned */
    int nin;
    kn_block out;
    void *dst;
    const void *src;
    size_t bytes, elem;
    ein_box dst_box, src_box, region;
} rec_call;

struct wk_record {
    rec_call *calls;
    int n, cap;
};

wk_record *wk_record_new(void)
{
    return calloc(1, sizeof(wk_record));
}

void wk_record_free(wk_record *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->n; i++)
        free(r->calls[i].ins);
    free(r->calls);
    free(r);
}

static rec_call *append(wk_record *r, ein_error *err)
{
    if (ein_vec_reserve(&r->calls, &r->cap, (int64_t)r->n + 1, sizeof *r->calls) < 0) {
        ein_fail(err, EIN_ENOMEM, "out of memory recording a graph");
        return NULL;
    }
    rec_call *c = &r->calls[r->n];
    memset(c, 0, sizeof *c);
    return c;
}

static int with_blocks(wk_record *r, rec_call *c, const kn_block *ins, int nin,
                       const kn_block *out, ein_error *err)
{
    if (nin > 0) {
        if (!(c->ins = malloc(sizeof *c->ins * (size_t)nin)))
            return ein_fail(err, EIN_ENOMEM, "out of memory recording a graph");
        memcpy(c->ins, ins, sizeof *c->ins * (size_t)nin);
    }
    c->nin = nin;
    c->out = *out;
    r->n++;
    return 0;
}

int wk_record_kernel(wk_record *r, const ein_kernel *k, const kn_block *ins, int nin,
                     const kn_block *out, ein_error *err)
{
    rec_call *c = append(r, err);
    if (!c)
        return EIN_ENOMEM;
    c->kind = REC_KERNEL;
    c->kernel = k;
    return with_blocks(r, c, ins, nin, out, err);
}

int wk_record_agg(wk_record *r, ein_agg op, const kn_block *srcs, int n, const kn_block *out,
                  ein_error *err)
{
    rec_call *c = append(r, err);
    if (!c)
        return EIN_ENOMEM;
    c->kind = REC_AGG;
    c->agg = op;
    return with_blocks(r, c, srcs, n, out, err);
}

int wk_record_copy(wk_record *r, void *dst, const void *src, size_t bytes, ein_error *err)
{
    rec_call *c = append(r, err);
    if (!c)
        return EIN_ENOMEM;
    c->kind = REC_COPY;
    c->dst = dst;
    c->src = src;
    c->bytes = bytes;
    r->n++;
    return 0;
}

int wk_record_copy_box(wk_record *r, void *dst, const ein_box *dst_box, const void *src,
                       const ein_box *src_box, const ein_box *region, size_t elem,
                       ein_error *err)
{
    rec_call *c = append(r, err);
    if (!c)
        return EIN_ENOMEM;
    c->kind = REC_COPY_BOX;
    c->dst = dst;
    c->src = src;
    c->dst_box = *dst_box;
    c->src_box = *src_box;
    c->region = *region;
    c->elem = elem;
    r->n++;
    return 0;
}

int wk_record_replay(const wk_record *r, wk_backend *be, ein_error *err)
{
    int rc = 0;
    for (int i = 0; i < r->n && rc == 0; i++) {
        rec_call *c = &r->calls[i];
        switch (c->kind) {
        case REC_KERNEL:
            rc = be->dev.kernel(be, c->kernel, c->ins, c->nin, &c->out, err);
            break;
        case REC_AGG:
            rc = be->dev.agg(be, c->agg, c->ins, c->nin, &c->out, err);
            break;
        case REC_COPY:
            rc = be->dev.copy(be, c->dst, c->src, c->bytes, err);
            break;
        case REC_COPY_BOX:
            rc = be->dev.copy_box(be, c->dst, &c->dst_box, c->src, &c->src_box, &c->region, c->elem,
                              err);
            break;
        }
    }
    return rc;
}
