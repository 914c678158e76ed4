/* worker/wk_io.c — LOAD and STORE: a buffer read from its input (.npy,
 * raw bytes of a .safetensors file, or generated) or written to its .npy,
 * slab by slab, through a staging buffer where device memory is not host
 * memory (wk_exec_int.h). */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "common/io/ein_npy.h"
#include "common/io/ein_raw.h"
#include "common/io/ein_rand.h"
#include "worker/wk_exec_int.h"

kn_block wk_block_of(wk *w, int buf)
{
    /* ein_program_validate checked every buffer id before anything ran */
    assert(buf >= 0 && buf < w->prog->nbuffers);
    const ein_pbuffer *b = &w->prog->buffers[buf];
    return (kn_block){.data = w->base + b->offset, .dtype = b->dtype, .box = b->box};
}

/* LOAD and STORE move a buffer in slabs of about this many bytes (unless
 * wk_config.slab_bytes says otherwise) and count each one as progress, so
 * that the heartbeat thread keeps beating through a long one (wk_beat.h). */
#define WK_SLAB_BYTES ((size_t)32 << 20)

/* The slabs of a dense block over `box`: ranges of index `*axis` (the first
 * dimension longer than 1; the ones before it have extent 1, so each slab is
 * contiguous), `*rows` of them per slab, `*stride` bytes per row. */
static void slabs_of(const wk *w, const ein_box *box, size_t elem, int *axis, int64_t *rows,
                     size_t *stride)
{
    size_t want = w->cfg->slab_bytes ? w->cfg->slab_bytes : WK_SLAB_BYTES;
    int ax = 0;
    while (ax < box->rank - 1 && box->hi[ax] - box->lo[ax] <= 1)
        ax++;
    size_t row = elem;
    for (int k = ax + 1; k < box->rank; k++)
        row *= (size_t)(box->hi[k] - box->lo[k]);
    int64_t n = row ? (int64_t)(want / row) : 1;
    *axis = ax;
    *rows = n > 0 ? n : 1;
    *stride = row;
}


/* Box s of a raw tensor into p (dense, dtype bt): read as is, or, for a
 * quantizing load (the file's elements ft are a float dtype, bt a block
 * dtype: issue 36), read as ft and quantized row by row (s's rows are
 * whole blocks: the program check keeps block boxes on block bounds). */
static int raw_read(const ein_instr *ins, ein_dtype bt, ein_dtype ft, const ein_box *s, void *p,
                    ein_error *err)
{
    if (ft == bt)
        return ein_raw_read_box(ins->path, ins->offset, bt, ins->rank, ins->shape, s, p, NULL,
                                err);
    size_t n = (size_t)ein_box_volume(s);
    void *tmp = malloc(n * ein_dtype_size(ft) + 1);
    float *f = ft == EIN_F32 ? tmp : malloc(n * sizeof(float) + 1);
    int rc = !tmp || !f ? ein_fail(err, EIN_ENOMEM, "load of %s: out of memory quantizing %zu "
                                   "elements", ins->path, n)
                        : ein_raw_read_box(ins->path, ins->offset, ft, ins->rank, ins->shape, s,
                                           tmp, NULL, err);
    if (rc == 0) {
        if (ft != EIN_F32)
            ein_dtype_to_f32(ft, tmp, f, n);
        ein_dtype_from_f32(bt, f, p, n);
    }
    if (f != tmp)
        free(f);
    free(tmp);
    return rc;
}

/* Fill `dst` (host memory, dense over the buffer's box) from the input. */
static int load_host(wk *w, const ein_instr *ins, const ein_pbuffer *b, void *dst,
                     ein_error *err)
{
    ein_npy_info info;
    int rc;
    int raw;
    const ein_dtype ft = ein_load_file_dtype(ins->format, b->dtype, &raw);
    if (ins->format == EIN_LOAD_ZERO) {   /* a state: zeros, then written in place */
        memset(dst, 0, (size_t)b->bytes);
        return 0;
    }
    if (ins->path && !raw) {
        if ((rc = ein_npy_read_info(ins->path, &info, err)) < 0)
            return rc;
        if (info.dtype != b->dtype || info.rank != ins->rank ||
            memcmp(info.shape, ins->shape, sizeof(int64_t) * (size_t)ins->rank) != 0)
            return ein_fail(err, EIN_ESHAPE, "%s changed since the run was planned", ins->path);
    }
    if (b->box.rank == 0 || ein_box_empty(&b->box)) {
        if (!ins->path) {
            ein_rand_fill_box(ins->seed, ins->key, ins->shape, &b->box, b->dtype, dst);
            return 0;
        }
        if (raw)
            return raw_read(ins, b->dtype, ft, &b->box, dst, err);
        return ein_npy_read_box(ins->path, &info, &b->box, dst, err);
    }
    int ax;
    int64_t rows;
    size_t stride;
    /* Slabs over the box in storage units (a block dtype's last dim in
     * whole blocks: ein_dtype_unit_box), each read as its element box. */
    ein_box ub;
    size_t unit = ein_dtype_unit_box(b->dtype, &b->box, &ub);
    if (unit == 0)
        return ein_fail(err, EIN_ESHAPE, "load of %s: a %s block off its block boundaries",
                        ins->path ? ins->path : "an input", ein_dtype_name(b->dtype));
    slabs_of(w, &ub, unit, &ax, &rows, &stride);
    int64_t f = ax == b->box.rank - 1 ? ein_dtype_block((int)b->dtype) : 1;
    for (int64_t lo = ub.lo[ax]; lo < ub.hi[ax]; lo += rows) {
        ein_box s = b->box;
        s.lo[ax] = lo * f;
        s.hi[ax] = (ub.hi[ax] - lo > rows ? lo + rows : ub.hi[ax]) * f;
        char *p = (char *)dst + (size_t)(lo - ub.lo[ax]) * stride;
        if (!ins->path)
            ein_rand_fill_box(ins->seed, ins->key, ins->shape, &s, b->dtype, p);
        else if (raw && (rc = raw_read(ins, b->dtype, ft, &s, p, err)) < 0)
            return rc;
        else if (!raw && (rc = ein_npy_read_box(ins->path, &info, &s, p, err)) < 0)
            return rc;
        wk_pulse_bump(&w->pulse);
    }
    return 0;
}

/* Write `src` (host memory, dense over box) into `path`, slab by slab. */
static int store_host(wk *w, const char *path, const ein_box *box, ein_dtype dtype,
                      const void *src, ein_error *err)
{
    if (box->rank == 0 || ein_box_empty(box))
        return ein_npy_write_box(path, box, src, err);
    int ax, rc;
    int64_t rows;
    size_t stride;
    slabs_of(w, box, ein_dtype_size(dtype), &ax, &rows, &stride);
    for (int64_t lo = box->lo[ax]; lo < box->hi[ax]; lo += rows) {
        ein_box s = *box;
        s.lo[ax] = lo;
        s.hi[ax] = box->hi[ax] - lo > rows ? lo + rows : box->hi[ax];
        const char *p = (const char *)src + (size_t)(lo - box->lo[ax]) * stride;
        if ((rc = ein_npy_write_box(path, &s, p, err)) < 0)
            return rc;
        wk_pulse_bump(&w->pulse);
    }
    return 0;
}

/* Release the staging buffer (end of an iteration, teardown). */
void wk_stage_drop(wk *w)
{
    if (!w->stage)
        return;
    if (w->stage_pinned)
        w->be->mem.host_free(w->be, w->stage);
    else
        free(w->stage);
    w->stage = NULL;
    w->stage_bytes = 0;
    w->stage_pinned = 0;
}

/* The staging buffer, at least `bytes` long: the one kept from an earlier
 * LOAD or STORE of this iteration if large enough, else a new one, pinned
 * where the backend offers it. Returns NULL (err filled) if out of memory. */
static void *stage_get(wk *w, uint64_t bytes, ein_error *err)
{
    size_t want = bytes ? (size_t)bytes : 1;
    if ((uint64_t)want != (bytes ? bytes : 1)) {
        ein_fail(err, EIN_ENOMEM, "no host memory to stage %llu bytes", (unsigned long long)bytes);
        return NULL;
    }
    if (w->stage && w->stage_bytes >= want)
        return w->stage;
    wk_stage_drop(w);
    ein_error why = {0};
    int prev = wk_pulse_set(&w->pulse, WK_PULSE_BUSY); /* pinning GiBs takes a while */
    if (w->be->mem.host_alloc && w->be->mem.host_alloc(w->be, want, &w->stage, &why) == 0) {
        w->stage_pinned = 1;
    } else {
        w->stage = NULL;
        if (w->be->mem.host_alloc)
            wk_log(w, 1, "staging %zu bytes in pageable memory: %s", want, why.msg);
        w->stage = malloc(want);
    }
    wk_pulse_set(&w->pulse, prev);
    if (!w->stage) {
        ein_fail(err, EIN_ENOMEM, "no host memory to stage %llu bytes", (unsigned long long)bytes);
        return NULL;
    }
    w->stage_bytes = want;
    return w->stage;
}

/* Device memory that is not host memory is filled through a staging copy. */
int wk_io_load(wk *w, const ein_instr *ins, ein_error *err)
{
    const ein_pbuffer *b = &w->prog->buffers[ins->dst];
    if (w->be->mem.host_visible)
        return load_host(w, ins, b, w->base + b->offset, err);
    void *stage = stage_get(w, b->bytes, err);
    if (!stage)
        return EIN_ENOMEM;
    int rc = load_host(w, ins, b, stage, err);
    if (rc == 0) {
        int prev = wk_pulse_set(&w->pulse, WK_PULSE_BUSY);
        rc = w->be->mem.upload(w->be, w->base + b->offset, stage, b->bytes, err);
        wk_pulse_set(&w->pulse, prev);
    }
    return rc;
}

int wk_io_store(wk *w, const ein_instr *ins, ein_error *err)
{
    kn_block s = wk_block_of(w, ins->srcs[0]);
    const ein_pbuffer *b = &w->prog->buffers[ins->srcs[0]];
    if (w->be->mem.host_visible)
        return store_host(w, ins->path, &s.box, b->dtype, s.data, err);
    void *stage = stage_get(w, b->bytes, err);
    if (!stage)
        return EIN_ENOMEM;
    int prev = wk_pulse_set(&w->pulse, WK_PULSE_BUSY);
    int rc = w->be->ord.sync(w->be, err);
    if (rc == 0)
        rc = w->be->mem.download(w->be, stage, s.data, b->bytes, err);
    wk_pulse_set(&w->pulse, prev);
    if (rc == 0)
        rc = store_host(w, ins->path, &s.box, b->dtype, stage, err);
    return rc;
}
