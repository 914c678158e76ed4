/* coordinator/compile/co_lower_int.h — the lowering's state, shared by co_lower.c
 * (loads, kernels, stores), co_lower_exchange.c (exchanges) and
 * co_lower_emit.c (the emission helpers co_lw_*, below both); private to
 * those three files. Every function returns a non-negative id or 0 on
 * success, or a negative EIN_E* code with L->err filled. */
#ifndef CO_LOWER_INT_H
#define CO_LOWER_INT_H

#include "coordinator/compile/co_lower.h"

typedef struct load_key {
    int node, dev, buf;
    ein_box box;
} load_key;

typedef struct lw {
    const pl_graph *g;
    const pl_plan *plan;
    const co_physical *ph;
    int next_ex;            /* the next exchange of ph to lower */
    const co_lower_opts *o;
    ein_program **progs;
    int ndev;
    int **producer;     /* [dev][buf] -> instruction writing it */
    int *cap_producer;
    int *partial;       /* [node * ndev + dev] -> kernel output buffer, -1 */
    ein_dtype *xdt;     /* [node] -> dtype of its partial blocks and exchange */
    load_key *loads;
    int nloads, cap_loads;
    co_lower_stats *st;
    ein_error *err;
    struct wset *ws;        /* writer sets (see producer_of) */
    int nws, cap_ws;
    struct vkey *views;     /* this exchange's views (see view_of) */
    int nviews, cap_views;
} lw;

/* A buffer written by several instructions (the chunks of an exchange
 * buffer, each written on its own): producer[dev][buf] is then -2 - i for
 * the writer set ws[i], and a reader depends on all of them. */
typedef struct wset {
    int *id;
    int n, cap;
} wset;

/* A view: rows [r0, r1) of buffer `parent` on `dev` (see view_of). */
typedef struct vkey {
    int dev, parent, view;
    int64_t r0, r1;
} vkey;

/* Room for entry n of the array *a (of *cap entries of `size` bytes). */
int co_lw_grow(lw *L, void *a, int *cap, int n, size_t size);
/* Room in producer[dev] for buffer `id` (no writer yet); returns id. */
int co_lw_track_buf(lw *L, int dev, int id);
/* A new buffer of `dt` over `box` on `dev`; returns its id. */
int co_lw_new_buf(lw *L, int dev, ein_dtype dt, const ein_box *box);
/* Instruction `id` writes (part of) buffer `buf` of `dev` too: readers of
 * the whole buffer depend on it as well as on its other writers. */
int co_lw_add_writer(lw *L, int dev, int buf, int id);
/* Append an instruction whose dependencies are the writers of its
 * sources; returns its id. */
int co_lw_emit(lw *L, int dev, ein_instr *ins);
/* The instruction's op name: "a<-b", or "a". */
void co_lw_set_op(ein_instr *ins, const char *a, const char *b);
/* Lower exchange e as its body says (co_lower_exchange.c); need_buf[b]
 * receives the buffer of block b the consumer reads. */
int co_lw_exchange(lw *L, const co_exchange *e, int *need_buf);

#endif
