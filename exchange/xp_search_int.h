/* exchange/xp_search_int.h — what the files of the exchange search share
 * (not a public header): xp_search.c (costs, membership, the search loop),
 * xp_search_moves.c (body edits), xp_search_starts.c (structured starting
 * programs).
 *
 * Ownership: a returned program is new (xp_program_free); none of these
 * keeps a pointer to its arguments. Nothing here fills an ein_error: a
 * failure is a NULL program, an INFINITY cost or a -1. */
#ifndef XP_SEARCH_INT_H
#define XP_SEARCH_INT_H

#include <stdint.h>

#include "common/io/ein_rand.h"
#include "exchange/xp_program.h"
#include "exchange/xp_topo.h"

/* A uniform integer in [0, n) from the search's generator (0 when n <= 0). */
static inline int xp_rnd(uint64_t *s, int n)
{
    return n > 0 ? (int)(ein_rand_next(s) % (uint64_t)n) : 0;
}

/* ---- xp_search.c ---- */
/* A hash of the set x wanted at `site`. */
unsigned xp_search_set_hash(const xp_program *p, const xp_word *x, int site);
/* Makespan by simulation, INFINITY if the program is not valid
 * (the simulator fires exactly the closure of Def. 5.5). */
double xp_search_sim_cost(const xp_program *p, const xp_topology *t);
/* The same after xp_program_check. */
double xp_search_cost(const xp_program *p, const xp_topology *t);
/* A copy of the program without its actions (its preamble), or NULL. */
xp_program *xp_search_strip(const xp_program *pre);
/* qsort's comparison of ints. */
int xp_search_cmp_int(const void *a, const void *b);

/* ---- xp_search_moves.c ---- */
/* The actions of the current program that end late (on or near its
 * critical path), for the edits to favour: flags[a] for a < n, or n = -1
 * when unknown. Held by the search (struct search); flags grown by
 * xp_search_mark_late, freed by the holder. */
typedef struct xp_late {
    char *flags;
    int cap;   /* bytes of flags */
    int n;     /* actions flagged: the program's nact when they were
                  marked; -1 when none are (not marked, or p not simulated) */
} xp_late;
/* One random edit of c's body, in place, favouring late->flags' actions
 * half of the time when late->n is c's action count: 0 when made (or
 * nothing to edit), negative when the edit does not apply or memory ran
 * out. */
int xp_search_propose(const xp_late *late, xp_program *c, const xp_topology *t, uint64_t *rng);
/* Flag the actions of p that end in the last third of its makespan in
 * late (grown); late->n = -1 when p cannot be simulated. -1 when the flags
 * cannot grow (late->n is then -1). */
int xp_search_mark_late(const xp_program *p, const xp_topology *t, xp_late *late);

/* ---- xp_search_starts.c ---- */
/* The structured body for q's preamble (membership resolved), or NULL. */
xp_program *xp_search_structured(const xp_program *q, const xp_topology *t, uint64_t *rng,
                                 int variant);

#endif
