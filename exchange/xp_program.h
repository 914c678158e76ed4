/* exchange/xp_program.h — exchange programs (ExProg, paper §5.2), in memory.
 *
 * An exchange program moves and aggregates the partial blocks ("atoms") of
 * one tensor between sites (devices). IN lists every atom copy with the
 * site holding it; an aggregate is a set of IN entries (a bitset), meaning
 * their ⊕; OUT lists the aggregates each site must end up with; actions are
 * `X @ s -> d1, d2` (aggregate X at s, then send it to each d) or `X @ s`
 * (aggregate locally). A program is a set of actions: each fires once it is
 * enabled (Def. 5.5).
 *
 * Version 1 has size-1 partitions only, resolved to their site, so OUT and
 * actions name sites directly; the text printer writes the paper's syntax.
 *
 * Ownership: an xp_program owns all its arrays; xp_program_free releases
 * them. Sets passed to the add functions are copied. */
#ifndef XP_PROGRAM_H
#define XP_PROGRAM_H

#include <stdint.h>
#include <stdio.h>

#include "common/ein_box.h"
#include "common/ein_error.h"

/* A set of IN entries: nwords 64-bit words (nwords is per program). */
typedef uint64_t xp_word;

typedef struct xp_in {
    int atom;        /* which atom (index into the caller's atom list) */
    int site;        /* device holding this copy */
    double bytes;
} xp_in;

typedef struct xp_out {
    xp_word *set;    /* the aggregate required */
    int site;
} xp_out;

typedef struct xp_action {
    xp_word *set;    /* the aggregate formed at src */
    int src;
    int ndst;        /* 0: local aggregation */
    int *dst;
} xp_action;

typedef struct xp_program {
    int ngpus;
    int nwords;      /* words per set = ceil(nin / 64) */
    xp_in *in;
    int nin, cap_in;
    xp_out *out;
    int nout, cap_out;
    xp_action *act;
    int nact, cap_act;
} xp_program;

/* A program over sites 0..ngpus-1 with room for `nin` IN entries (sets
 * are sized from nin, so all IN entries are declared up front). */
xp_program *xp_program_new(int ngpus, int nin);
void xp_program_free(xp_program *p);

int xp_program_add_in(xp_program *p, int atom, int site, double bytes, ein_error *err);
int xp_program_add_out(xp_program *p, const xp_word *set, int site, ein_error *err);
int xp_program_add_action(xp_program *p, const xp_word *set, int src,
                          const int *dst, int ndst, ein_error *err);

/* Set helpers (sets of p->nwords words). */
xp_word *xp_set_new(const xp_program *p);          /* zeroed, malloc'd */
void xp_set_add(xp_word *s, int i);
int xp_set_has(const xp_word *s, int i);
int xp_set_count(const xp_program *p, const xp_word *s);
int xp_set_equal(const xp_program *p, const xp_word *a, const xp_word *b);

/* Validity (Def. 5.5): every action enabled in the closure of IN, every OUT
 * requirement reached. On failure the message names the first action that
 * never becomes enabled or the first OUT that is not reached. */
int xp_program_check(const xp_program *p, ein_error *err);

/* Find aggregates among `have` (n sets, all at one site) that partition
 * `x`: writes their indices to `pick` and returns how many, or -1 if none
 * partition it. */
int xp_partition_find(const xp_program *p, const xp_word *x, xp_word *const *have,
                      int n, int *pick);

/* Write the program in ExProg syntax; atom names come from `atom_name`
 * (NULL: "A<atom>"). */
void xp_program_print(const xp_program *p, FILE *f,
                      const char *(*atom_name)(int atom, void *ctx), void *ctx);

#endif
