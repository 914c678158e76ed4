/* exchange/xp_atoms.c — atoms by overlay, and the preamble of §5.3. */
#include "exchange/xp_atoms.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ein_vec.h"

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

int xp_preamble_make(const ein_box *have, const int *have_site, int nhave,
                     const ein_box *need, const int *need_site, int nneed,
                     size_t elem_bytes, int ngpus, ein_box **atoms_out, int *natoms_out,
                     xp_program **prog_out, ein_error *err)
{
    ein_box *atoms = NULL;
    int natoms = 0, rc;
    xp_program *p = NULL;
    int *first_in = NULL, *ncopies = NULL;
    xp_word *x = NULL;
    if ((rc = xp_atoms_overlay(have, nhave, need, nneed, &atoms, &natoms, err)) < 0)
        return rc;
    /* IN: one entry per (atom, producer block containing it). */
    int nin = 0;
    for (int a = 0; a < natoms; a++)
        for (int h = 0; h < nhave; h++)
            nin += ein_box_contains(&have[h], &atoms[a]);
    p = xp_program_new(ngpus, nin);
    first_in = calloc((size_t)natoms + 1, sizeof(int));
    ncopies = calloc((size_t)natoms + 1, sizeof(int));
    if (!p || !first_in || !ncopies || !(x = xp_set_new(p))) {
        rc = ein_fail(err, EIN_ENOMEM, "out of memory");
        goto fail;
    }
    for (int a = 0; a < natoms; a++) {
        first_in[a] = p->nin;
        for (int h = 0; h < nhave; h++) {
            if (!ein_box_contains(&have[h], &atoms[a]))
                continue;
            rc = xp_program_add_in(p, a, have_site[h],
                                   (double)ein_box_volume(&atoms[a]) * (double)elem_bytes, err);
            if (rc < 0)
                goto fail;
            ncopies[a]++;
        }
        if (ncopies[a] == 0) {
            char buf[256];
            rc = ein_fail(err, EIN_EINVAL, "atom %s lies in no producer block",
                          ein_box_format(&atoms[a], buf, sizeof buf));
            goto fail;
        }
    }
    /* OUT: each required block wants every one of its atoms, aggregated. */
    for (int b = 0; b < nneed; b++)
        for (int a = 0; a < natoms; a++) {
            if (!ein_box_contains(&need[b], &atoms[a]))
                continue;
            memset(x, 0, sizeof(xp_word) * (size_t)p->nwords);
            for (int c = 0; c < ncopies[a]; c++)
                xp_set_add(x, first_in[a] + c);
            int dup = 0;
            for (int o = 0; o < p->nout && !dup; o++)
                dup = p->out[o].site == need_site[b] && xp_set_equal(p, p->out[o].set, x);
            if (!dup && (rc = xp_program_add_out(p, x, need_site[b], err)) < 0)
                goto fail;
        }
    free(first_in);
    free(ncopies);
    free(x);
    *atoms_out = atoms;
    *natoms_out = natoms;
    *prog_out = p;
    return 0;
fail:
    free(first_in);
    free(ncopies);
    free(x);
    free(atoms);
    xp_program_free(p);
    return rc;
}

int xp_preamble_make_placed(const ein_box *have, const int *have_site, int nhave,
                            const ein_box *need, int nneed, size_t elem_bytes, int ngpus,
                            ein_box **atoms_out, int *natoms_out, xp_program **prog_out,
                            ein_error *err)
{
    ein_box *atoms = NULL;
    int natoms = 0, rc;
    xp_program *p = NULL;
    int *in_of = NULL;   /* [h * natoms + a]: IN entry of atom a in block h, or -1 */
    xp_word *x = NULL;
    if ((rc = xp_atoms_overlay(have, nhave, need, nneed, &atoms, &natoms, err)) < 0)
        return rc;
    int nin = 0;
    for (int h = 0; h < nhave; h++)
        for (int a = 0; a < natoms; a++)
            nin += ein_box_contains(&have[h], &atoms[a]);
    p = xp_program_new(ngpus, nin);
    in_of = malloc(sizeof(int) * ((size_t)nhave * (size_t)natoms + 1));
    if (!p || !in_of || !(x = xp_set_new(p))) {
        rc = ein_fail(err, EIN_ENOMEM, "out of memory");
        goto fail;
    }
    /* IN in the paper's order: producer block by block, atoms within. */
    for (int h = 0; h < nhave; h++)
        for (int a = 0; a < natoms; a++) {
            in_of[h * natoms + a] = -1;
            if (!ein_box_contains(&have[h], &atoms[a]))
                continue;
            rc = xp_program_add_in(p, a, have_site[h],
                                   (double)ein_box_volume(&atoms[a]) * (double)elem_bytes, err);
            if (rc < 0)
                goto fail;
            in_of[h * natoms + a] = rc;
        }
    for (int a = 0; a < natoms; a++) {
        int copies = 0;
        for (int h = 0; h < nhave; h++)
            copies += in_of[h * natoms + a] >= 0;
        if (copies == 0) {
            char buf[256];
            rc = ein_fail(err, EIN_EINVAL, "atom %s lies in no producer block",
                          ein_box_format(&atoms[a], buf, sizeof buf));
            goto fail;
        }
    }
    /* One size-1 partition per consumer block; OUT: each of its atoms,
     * aggregated over all copies, at its partition. */
    for (int b = 0; b < nneed; b++) {
        char name[32];
        snprintf(name, sizeof name, "S%d", b + 1);
        if ((rc = xp_program_add_partition(p, name, 1, NULL, err)) < 0)
            goto fail;
    }
    for (int b = 0; b < nneed; b++)
        for (int a = 0; a < natoms; a++) {
            if (!ein_box_contains(&need[b], &atoms[a]))
                continue;
            memset(x, 0, sizeof(xp_word) * (size_t)p->nwords);
            for (int h = 0; h < nhave; h++)
                if (in_of[h * natoms + a] >= 0)
                    xp_set_add(x, in_of[h * natoms + a]);
            if ((rc = xp_program_add_out_part(p, x, b, err)) < 0)
                goto fail;
        }
    free(in_of);
    free(x);
    *atoms_out = atoms;
    *natoms_out = natoms;
    *prog_out = p;
    return 0;
fail:
    free(in_of);
    free(x);
    free(atoms);
    xp_program_free(p);
    return rc;
}
