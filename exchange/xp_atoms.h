/* exchange/xp_atoms.h — atoms by overlay and the exchange preamble (§5.3).
 *
 * The producer of a tensor left (possibly unaggregated) blocks on known
 * sites; the consumer needs blocks on its own sites. Overlaying both
 * families (every lower and upper bound of each, per dimension) gives a grid
 * whose cells are the atoms: every existing and every required block is a
 * disjoint union of atoms. Only cells inside some required block are kept.
 *
 * xp_preamble_make then writes the program's IN (one entry per copy of
 * each atom, at the copy's site, sized from the dtype) and OUT (for each
 * required block, the aggregate of all copies of each of its atoms at the
 * block's site).
 *
 * Ownership: *atoms is malloc'd and owned by the caller; *prog is a new
 * program (xp_program_free). */
#ifndef XP_ATOMS_H
#define XP_ATOMS_H

#include <stddef.h>

#include "common/ir/ein_box.h"
#include "common/base/ein_error.h"
#include "exchange/xp_program.h"

int xp_atoms_overlay(const ein_box *have, int nhave, const ein_box *need, int nneed,
                     ein_box **atoms, int *natoms, ein_error *err);

int xp_preamble_make(const ein_box *have, const int *have_site, int nhave,
                     const ein_box *need, const int *need_site, int nneed,
                     size_t elem_bytes, int ngpus, ein_box **atoms, int *natoms,
                     xp_program **prog, ein_error *err);

/* The same for a replicated producer (planner/pl_spec.h): every `have`
 * block is a copy of the same values (not a partial), so each OUT takes ONE
 * copy of each atom: the one at the required block's own site when there
 * is one (nothing moves), else the first copy that holds the atom. Never
 * aggregates copies. IN holds every copy given: pass only the copies the
 * consumer can use (the caller's choice). */
int xp_preamble_make_replicas(const ein_box *have, const int *have_site, int nhave,
                              const ein_box *need, const int *need_site, int nneed,
                              size_t elem_bytes, int ngpus, ein_box **atoms, int *natoms,
                              xp_program **prog, ein_error *err);

/* The preamble as §5.3 writes it, placement left to synthesis: IN in
 * producer-block order (one entry per atom copy), PARTITIONS S1..Sn
 * {size 1}, one per consumer block (function specification), and OUT: for
 * each atom of block b, the aggregate of all its copies @ S(b+1). */
int xp_preamble_make_placed(const ein_box *have, const int *have_site, int nhave,
                            const ein_box *need, int nneed, size_t elem_bytes, int ngpus,
                            ein_box **atoms, int *natoms, xp_program **prog, ein_error *err);

#endif
