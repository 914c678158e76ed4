/* exchange/xp_atoms.c — atoms by overlay, and the preamble of §5.3. */
#include "exchange/xp_atoms.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/ein_vec.h"

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

int xp_atoms_overlay(const ein_box *have, int nhave, const ein_box *need, int nneed,
                     ein_box **atoms, int *natoms, ein_error *err)
{
    if (nneed == 0) {
        *atoms = NULL;
        *natoms = 0;
        return 0;
    }
    int rank = need[0].rank, rc = 0;
    int64_t *cuts[EIN_MAX_RANK] = {0};
    int ncut[EIN_MAX_RANK] = {0};
    ein_box *out = NULL;
    int nout = 0, cap = 0;
    for (int i = 0; i < nhave; i++)
        if (have[i].rank != rank)
            return ein_fail(err, EIN_EINVAL, "atoms: blocks of rank %d and %d", have[i].rank, rank);
    for (int d = 0; d < rank; d++) {
        cuts[d] = malloc(sizeof(int64_t) * 2 * (size_t)(nhave + nneed));
        if (!cuts[d]) {
            rc = ein_fail(err, EIN_ENOMEM, "out of memory");
            goto done;
        }
        int n = 0;
        for (int i = 0; i < nhave; i++) {
            cuts[d][n++] = have[i].lo[d];
            cuts[d][n++] = have[i].hi[d];
        }
        for (int i = 0; i < nneed; i++) {
            cuts[d][n++] = need[i].lo[d];
            cuts[d][n++] = need[i].hi[d];
        }
        qsort(cuts[d], (size_t)n, sizeof(int64_t), cmp_i64);
        int m = 0;
        for (int i = 0; i < n; i++)
            if (m == 0 || cuts[d][m - 1] != cuts[d][i])
                cuts[d][m++] = cuts[d][i];
        ncut[d] = m;
    }
    /* Within each required block, enumerate the grid cells it contains;
     * a cell shared by several blocks is one atom. */
    for (int b = 0; b < nneed; b++) {
        int first[EIN_MAX_RANK], last[EIN_MAX_RANK], pos[EIN_MAX_RANK];
        for (int d = 0; d < rank; d++) {
            first[d] = last[d] = -1;
            for (int c = 0; c + 1 < ncut[d]; c++) {
                if (cuts[d][c] >= need[b].lo[d] && cuts[d][c + 1] <= need[b].hi[d]) {
                    if (first[d] < 0)
                        first[d] = c;
                    last[d] = c;
                }
            }
            if (first[d] < 0)
                goto next_block; /* empty block */
            pos[d] = first[d];
        }
        for (;;) {
            ein_box cell;
            memset(&cell, 0, sizeof cell);
            cell.rank = rank;
            for (int d = 0; d < rank; d++) {
                cell.lo[d] = cuts[d][pos[d]];
                cell.hi[d] = cuts[d][pos[d] + 1];
            }
            int dup = 0;
            for (int i = 0; i < nout && !dup; i++)
                dup = ein_box_equal(&out[i], &cell);
            if (!dup) {
                if (ein_vec_reserve(&out, &cap, (int64_t)nout + 1, sizeof *out) < 0) {
                    rc = ein_fail(err, EIN_ENOMEM, "out of memory");
                    goto done;
                }
                out[nout++] = cell;
            }
            int d = rank - 1;
            while (d >= 0 && ++pos[d] > last[d]) {
                pos[d] = first[d];
                d--;
            }
            if (d < 0)
                break;
        }
    next_block:;
    }
done:
    for (int d = 0; d < rank; d++)
        free(cuts[d]);
    if (rc < 0) {
        free(out);
        return rc;
    }
    *atoms = out;
    *natoms = nout;
    return 0;
}

/* What both preambles share: the atoms, a program with one IN entry per
 * copy of each atom (atom by atom, copies in producer-block order, when
 * `atom_major`; else producer block by block, atoms within), in_of[h *
 * natoms + a] = the IN entry of atom a in block h or -1, and a scratch set.
 * Fails when an atom lies in no producer block. On error nothing is left
 * allocated. */
typedef struct preamble {
    ein_box *atoms;
    int natoms;
    xp_program *p;
    int *in_of;
    xp_word *x;
} preamble;

static void preamble_free(preamble *pr)
{
    free(pr->atoms);
    xp_program_free(pr->p);
    free(pr->in_of);
    free(pr->x);
    memset(pr, 0, sizeof *pr);
}

static int preamble_in(const ein_box *have, const int *have_site, int nhave, preamble *pr,
                       int h, int a, size_t elem_bytes, ein_error *err)
{
    pr->in_of[h * pr->natoms + a] = -1;
    if (!ein_box_contains(&have[h], &pr->atoms[a]))
        return 0;
    int rc = xp_program_add_in(pr->p, a, have_site[h],
                               (double)ein_box_volume(&pr->atoms[a]) * (double)elem_bytes, err);
    if (rc < 0)
        return rc;
    pr->in_of[h * pr->natoms + a] = rc;
    return 0;
}

static int preamble_begin(const ein_box *have, const int *have_site, int nhave,
                          const ein_box *need, int nneed, size_t elem_bytes, int ngpus,
                          int atom_major, preamble *pr, ein_error *err)
{
    int rc;
    memset(pr, 0, sizeof *pr);
    if ((rc = xp_atoms_overlay(have, nhave, need, nneed, &pr->atoms, &pr->natoms, err)) < 0)
        return rc;
    int natoms = pr->natoms, nin = 0;
    for (int a = 0; a < natoms; a++)
        for (int h = 0; h < nhave; h++)
            nin += ein_box_contains(&have[h], &pr->atoms[a]);
    pr->p = xp_program_new(ngpus, nin);
    pr->in_of = malloc(sizeof(int) * ((size_t)nhave * (size_t)natoms + 1));
    if (!pr->p || !pr->in_of || !(pr->x = xp_set_new(pr->p))) {
        rc = ein_fail(err, EIN_ENOMEM, "out of memory");
        goto fail;
    }
    for (int i = 0; i < (atom_major ? natoms : nhave); i++)
        for (int j = 0; j < (atom_major ? nhave : natoms); j++)
            if ((rc = preamble_in(have, have_site, nhave, pr, atom_major ? j : i,
                                  atom_major ? i : j, elem_bytes, err)) < 0)
                goto fail;
    for (int a = 0; a < natoms; a++) {
        int copies = 0;
        for (int h = 0; h < nhave; h++)
            copies += pr->in_of[h * natoms + a] >= 0;
        if (copies == 0) {
            char buf[256];
            rc = ein_fail(err, EIN_EINVAL, "atom %s lies in no producer block",
                          ein_box_format(&pr->atoms[a], buf, sizeof buf));
            goto fail;
        }
    }
    return 0;
fail:
    preamble_free(pr);
    return rc;
}

/* The scratch set := every copy of atom a. */
static const xp_word *preamble_copies(preamble *pr, int nhave, int a)
{
    memset(pr->x, 0, sizeof(xp_word) * (size_t)pr->p->nwords);
    for (int h = 0; h < nhave; h++)
        if (pr->in_of[h * pr->natoms + a] >= 0)
            xp_set_add(pr->x, pr->in_of[h * pr->natoms + a]);
    return pr->x;
}

/* Hand the atoms and the program to the caller; free the rest. */
static void preamble_end(preamble *pr, ein_box **atoms_out, int *natoms_out,
                         xp_program **prog_out)
{
    *atoms_out = pr->atoms;
    *natoms_out = pr->natoms;
    *prog_out = pr->p;
    pr->atoms = NULL;
    pr->p = NULL;
    preamble_free(pr);
}

/* OUT x @ site, unless the program has it already (a block on a site that
 * already has that OUT adds nothing). */
static int add_out_once(xp_program *p, const xp_word *x, int site, ein_error *err)
{
    for (int o = 0; o < p->nout; o++)
        if (p->out[o].site == site && xp_set_equal(p, p->out[o].set, x))
            return 0;
    return xp_program_add_out(p, x, site, err);
}

int xp_preamble_make(const ein_box *have, const int *have_site, int nhave,
                     const ein_box *need, const int *need_site, int nneed,
                     size_t elem_bytes, int ngpus, ein_box **atoms_out, int *natoms_out,
                     xp_program **prog_out, ein_error *err)
{
    preamble pr;
    int rc = preamble_begin(have, have_site, nhave, need, nneed, elem_bytes, ngpus, 1, &pr, err);
    if (rc < 0)
        return rc;
    xp_program *p = pr.p;
    /* OUT: each required block wants every one of its atoms, aggregated. */
    for (int b = 0; b < nneed; b++)
        for (int a = 0; a < pr.natoms; a++) {
            if (!ein_box_contains(&need[b], &pr.atoms[a]))
                continue;
            const xp_word *x = preamble_copies(&pr, nhave, a);
            if ((rc = add_out_once(p, x, need_site[b], err)) < 0) {
                preamble_free(&pr);
                return rc;
            }
        }
    preamble_end(&pr, atoms_out, natoms_out, prog_out);
    return 0;
}

int xp_preamble_make_replicas(const ein_box *have, const int *have_site, int nhave,
                              const ein_box *need, const int *need_site, int nneed,
                              size_t elem_bytes, int ngpus, ein_box **atoms_out,
                              int *natoms_out, xp_program **prog_out, ein_error *err)
{
    preamble pr;
    int rc = preamble_begin(have, have_site, nhave, need, nneed, elem_bytes, ngpus, 1, &pr, err);
    if (rc < 0)
        return rc;
    xp_program *p = pr.p;
    for (int b = 0; b < nneed; b++)
        for (int a = 0; a < pr.natoms; a++) {
            if (!ein_box_contains(&need[b], &pr.atoms[a]))
                continue;
            /* One copy: the one on the block's site, else the first. */
            int pick = -1;
            for (int h = 0; h < nhave; h++) {
                int i = pr.in_of[h * pr.natoms + a];
                if (i >= 0 && (pick < 0 || have_site[h] == need_site[b]))
                    pick = i;
                if (i >= 0 && have_site[h] == need_site[b])
                    break;
            }
            memset(pr.x, 0, sizeof(xp_word) * (size_t)p->nwords);
            xp_set_add(pr.x, pick);
            if ((rc = add_out_once(p, pr.x, need_site[b], err)) < 0) {
                preamble_free(&pr);
                return rc;
            }
        }
    preamble_end(&pr, atoms_out, natoms_out, prog_out);
    return 0;
}

int xp_preamble_make_placed(const ein_box *have, const int *have_site, int nhave,
                            const ein_box *need, int nneed, size_t elem_bytes, int ngpus,
                            ein_box **atoms_out, int *natoms_out, xp_program **prog_out,
                            ein_error *err)
{
    preamble pr;
    /* IN in the paper's order: producer block by block, atoms within. */
    int rc = preamble_begin(have, have_site, nhave, need, nneed, elem_bytes, ngpus, 0, &pr, err);
    if (rc < 0)
        return rc;
    /* One size-1 partition per consumer block; OUT: each of its atoms,
     * aggregated over all copies, at its partition. */
    for (int b = 0; b < nneed; b++) {
        char name[32];
        snprintf(name, sizeof name, "S%d", b + 1);
        if ((rc = xp_program_add_partition(pr.p, name, 1, NULL, err)) < 0)
            goto fail;
    }
    for (int b = 0; b < nneed; b++)
        for (int a = 0; a < pr.natoms; a++) {
            if (!ein_box_contains(&need[b], &pr.atoms[a]))
                continue;
            if ((rc = xp_program_add_out_part(pr.p, preamble_copies(&pr, nhave, a), b, err)) < 0)
                goto fail;
        }
    preamble_end(&pr, atoms_out, natoms_out, prog_out);
    return 0;
fail:
    preamble_free(&pr);
    return rc;
}
