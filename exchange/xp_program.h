/* exchange/xp_program.h — exchange programs (ExProg, paper §5.2), in memory.
 *
 * An exchange program moves and aggregates the partial blocks ("atoms") of
 * one tensor between sites (devices). IN lists every atom copy with the
 * site holding it; an aggregate is a set of IN entries (a bitset), meaning
 * their ⊕; OUT lists the aggregates each site must end up with; actions are
 * `X @ s -> d1, d2` (aggregate X at s, then send it to each d), relays
 * `X @ s -> r -> d` (r receives X, then forwards it) or `X @ s` (aggregate
 * locally). A program is a set of actions: each fires once it is enabled
 * (Def. 5.5).
 *
 * Partitions. PARTITIONS names groups of sites, with explicit members or
 * by size only (`G1 {size 4}`: membership left to the compiler). An OUT
 * entry or an action naming a partition of k sites is stored as k entries,
 * one per slot of the partition (`part`, `slot`), whose `site` is the
 * member in that slot, or -1 while a size-declared partition is not yet
 * resolved (xp_program_assign resolves it). Entries naming plain sites
 * have part = -1. Programs without partitions (the preamble, the naive
 * body) only ever use the plain fields: in[i].atom/.site/.bytes,
 * out[o].set/.site, act[a].set/.src/.ndst/.dst.
 *
 * Ownership: an xp_program owns all its arrays; xp_program_free releases
 * them. Sets and arrays passed to the add functions are copied. */
#ifndef XP_PROGRAM_H
#define XP_PROGRAM_H

#include <stdint.h>
#include <stdio.h>

#include "common/ir/ein_box.h"
#include "common/base/ein_error.h"

/* A set of IN entries: nwords 64-bit words (nwords is per program). */
typedef uint64_t xp_word;

#define XP_NAME_MAX 64
#define XP_NAME_MAX_STR "63"     /* longest name, for messages */
/* Sites are 0..XP_SITES_MAX-1: the parser refuses larger site numbers, so
 * that a short text cannot declare millions of sites (the printer writes
 * every GPU, and the checker keeps state per site). */
#define XP_SITES_MAX 4096
#define XP_SITES_MAX_STR "4096"

/* The largest IN size the parser accepts, in bytes (1 PB). Below it every
 * size prints in a form that parses back to the same number of bytes. */
#define XP_SIZE_MAX 1e15

/* xp_program_parse_file reads at most this many bytes (a regular file only). */
#define XP_FILE_MAX ((size_t)16 << 20)

typedef struct xp_in {
    int atom;        /* which atom (index into the caller's atom list) */
    int site;        /* device holding this copy */
    double bytes;
} xp_in;

typedef struct xp_out {
    xp_word *set;    /* the aggregate required */
    int site;        /* -1 while its partition is unresolved */
    int part, slot;  /* partition and slot it came from, or -1 */
} xp_out;

typedef struct xp_action {
    xp_word *set;    /* the aggregate formed at src */
    int src;         /* -1 while its partition is unresolved */
    int ndst;        /* 0: local aggregation */
    int *dst;        /* final destinations */
    int nrelay;      /* sites X passes through, in order, before dst */
    int *relay;
    int src_part, src_slot;    /* local action over a partition, or -1 */
    int *dst_part, *dst_slot;  /* per destination: partition and slot, or -1 */
    int line, col;   /* where it was parsed (0: built in memory) */
    /* Chunks: the action moves chunks chunk .. chunk+run-1 of `nchunks`
     * of X — chunk c is the sub-box of the atom's rows
     * [lo + (hi-lo)*c/k, lo + (hi-lo)*(c+1)/k), a fraction 1/k of its
     * bytes — rather than all of it. `[c/k]` in the text is one chunk
     * (run 1); `[a..b/k]` the chunks a to b as a stream (each moves on its
     * own, and on every hop chunk c+1 follows chunk c, so a relay forwards
     * chunk c while chunk c+1 is still arriving); the star form over k
     * (docs/exprog.md) is every chunk, a = 0, b = k-1. nchunks = 1,
     * chunk = 0, run = 1: the whole aggregate. */
    int chunk, run, nchunks;
} xp_action;

/* The most chunks an action may have, and the most the least common
 * multiple of a program's chunk counts may be (the closure counts in
 * units of 1/L of an atom). */
#define XP_CHUNKS_MAX 1024
#define XP_CHUNK_UNITS_MAX ((int64_t)1 << 30)

typedef struct xp_partition {
    char name[XP_NAME_MAX];
    int size;
    int by_size;     /* declared `{size k}`: members chosen by the compiler */
    int *member;     /* size entries; -1 while unresolved */
} xp_partition;

typedef struct xp_program {
    int ngpus;       /* sites are 0..ngpus-1 */
    unsigned char *gpu_ok; /* NULL: every site; else gpu_ok[s] says s is declared */
    int nwords;      /* words per set = ceil(nin / 64) */
    xp_in *in;
    int nin, cap_in;
    char **name;     /* NULL, or per IN entry its ExProg name (NULL: default) */
    xp_out *out;
    int nout, cap_out;
    xp_action *act;
    int nact, cap_act;
    xp_partition *part;
    int npart, cap_part;
} xp_program;

/* A program over sites 0..ngpus-1 with room for `nin` IN entries (sets
 * are sized from nin, so all IN entries are declared up front). */
xp_program *xp_program_new(int ngpus, int nin);
void xp_program_free(xp_program *p);
xp_program *xp_program_copy(const xp_program *p);
/* Structural equality: same IN (names, sites, sizes), partitions, OUT and
 * actions in the same order. */
int xp_program_equal(const xp_program *a, const xp_program *b);

int xp_program_add_in(xp_program *p, int atom, int site, double bytes, ein_error *err);
int xp_program_set_name(xp_program *p, int in, const char *name, ein_error *err);
int xp_program_add_out(xp_program *p, const xp_word *set, int site, ein_error *err);
int xp_program_add_action(xp_program *p, const xp_word *set, int src,
                          const int *dst, int ndst, ein_error *err);
/* A relay: X formed at src, sent through relay[0..nrelay-1] in order, then
 * to every dst. */
int xp_program_add_relay(xp_program *p, const xp_word *set, int src, const int *relay,
                         int nrelay, const int *dst, int ndst, ein_error *err);
void xp_program_remove_action(xp_program *p, int a);
/* Make action a move chunks chunk .. chunk+run-1 of `nchunks` (a stream
 * when run > 1); EIN_EINVAL for a count outside 1..XP_CHUNKS_MAX or chunks
 * outside 0..nchunks-1. */
int xp_action_set_chunk(xp_program *p, int a, int chunk, int run, int nchunks,
                        ein_error *err);
/* Does any action move chunks (nchunks > 1)? */
int xp_program_chunked(const xp_program *p);
/* L: the least common multiple of the actions' chunk counts (1 when none
 * is chunked), or EIN_EUNSUPPORTED above XP_CHUNK_UNITS_MAX. */
int xp_program_chunk_units(const xp_program *p, int64_t *units, ein_error *err);
/* A copy in which every stream of chunks (run > 1) is its run actions
 * [c/k], [c+1/k], ..., in order;
 * *orig (if not NULL) gets, per action of the copy, the action of p it
 * comes from (malloc'd; the caller frees it). */
int xp_program_expand_chunks(const xp_program *p, xp_program **out, int **orig,
                             ein_error *err);

/* Partitions: add one (members NULL: declared by size), then name it in
 * OUT entries and local actions; every slot becomes one entry. */
int xp_program_add_partition(xp_program *p, const char *name, int size, const int *members,
                             ein_error *err);
int xp_program_add_out_part(xp_program *p, const xp_word *set, int part, ein_error *err);
int xp_program_add_local_part(xp_program *p, const xp_word *set, int part, ein_error *err);
/* Fix the members of partition `part` (size entries, or NULL to unresolve
 * a size-declared one) and update every entry that names it. */
int xp_program_assign(xp_program *p, int part, const int *members, ein_error *err);
int xp_program_resolved(const xp_program *p);   /* every partition has members */

/* Set helpers (sets of p->nwords words). */
xp_word *xp_set_new(const xp_program *p);          /* zeroed, malloc'd */
xp_word *xp_set_dup(const xp_program *p, const xp_word *s); /* a malloc'd copy, or NULL */
void xp_set_add(xp_word *s, int i);
int xp_set_has(const xp_word *s, int i);
int xp_set_count(const xp_program *p, const xp_word *s);
int xp_set_equal(const xp_program *p, const xp_word *a, const xp_word *b);
int xp_set_subset(const xp_program *p, const xp_word *a, const xp_word *b);
int xp_set_disjoint(const xp_program *p, const xp_word *a, const xp_word *b);
/* The span of a set: the words that hold its elements, [*first, *last]
 * (an empty set: first 0, last -1). The span versions compare only the
 * words of a's span (a ⊆ b; a = b for sets whose spans are equal), so a
 * set of a few atoms out of thousands is tested in a word or two. */
void xp_set_span(const xp_program *p, const xp_word *s, int *first, int *last);
int xp_set_subset_span(const xp_word *a, const xp_word *b, int first, int last);
int xp_set_equal_span(const xp_word *a, const xp_word *b, int first, int last);
/* Bytes of an aggregate: the largest of its elements (copies of one atom
 * have one size; a ⊕ of blocks is one block). */
double xp_set_bytes(const xp_program *p, const xp_word *s);

/* Validity (Def. 5.5): every action enabled in the closure of IN, every OUT
 * requirement reached, and no action whose path (source, relays,
 * destinations) visits a site twice. On failure the message names the first action that
 * never becomes enabled or the first OUT that is not reached. A program
 * whose size-declared partitions are unresolved is valid if some
 * membership makes it valid (memberships are enumerated). */
int xp_program_check(const xp_program *p, ein_error *err);
/* Same; on success, if `witness` is not NULL, *witness is a copy of the
 * program with the first membership that makes it valid (a copy of p when
 * p is resolved already). */
int xp_program_validate(const xp_program *p, xp_program **witness, ein_error *err);

/* Find aggregates among `have` (n sets, all at one site) that partition
 * `x`: writes their indices to `pick` and returns how many, or -1 if none
 * partition it. */
int xp_partition_find(const xp_program *p, const xp_word *x, xp_word *const *have,
                      int n, int *pick);

/* Write the program in ExProg syntax. Atom names: the program's own names,
 * else `atom_name` (NULL: "A<atom>_<site>", made unique). */
void xp_program_print(const xp_program *p, FILE *f,
                      const char *(*atom_name)(int atom, void *ctx), void *ctx);
/* One action in ExProg syntax (sites, not partition names) into buf. */
char *xp_action_format(const xp_program *p, int a, char *buf, int len);
/* The PARTITIONS line alone ("G1 = {0, 1}, G2 = {2, 3}"), for messages. */
void xp_program_print_membership(const xp_program *p, FILE *f);

/* Parse ExProg text (§5.2). `file` names the source in messages, which
 * read "file:line:col: ...". Returns 0 and a new program, or EIN_EPARSE. */
int xp_program_parse(const char *text, const char *file, xp_program **out, ein_error *err);
int xp_program_parse_file(const char *path, xp_program **out, ein_error *err);

#endif
