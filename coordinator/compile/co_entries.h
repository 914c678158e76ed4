/* coordinator/compile/co_entries.h — entry points of one compiled program (issue
 * 25: a prefill and a decode step sharing one session's weights and state
 * tensors).
 *
 * A compiled program may hold several computations over the same weights
 * and states, for example a decode step (one token per sequence) and a
 * prefill chunk (C tokens per sequence) whose cache_writes write the same
 * state. An entry point names a set of saved outputs; a run of that entry
 * runs only the instructions those outputs need: on every device, the
 * backward closure of their STOREs over dependencies, where a COPY or a
 * WAIT also needs the peer's NOTIFY of that buffer, and a cache_write only
 * what makes its sources and the state's LOAD (not the order the lowering
 * puts it in after the state's other writers and their readers). Each
 * instruction's
 * ein_instr.entries gets bit e - 1 for each entry e that needs it; LOADs
 * get 0 (every run: the first run loads every input, later runs only what
 * changed), and an instruction no entry needs gets the entries of its
 * dependencies (0 if none). The worker skips the instructions of other
 * entries (common/io/ein_wire.h's START entry).
 *
 * Programs with entry points must be compiled without memory reuse
 * (no_reuse): reuse orders the users of shared bytes by dependencies that
 * would pull one entry's instructions into another's runs.
 *
 * Ownership: nothing is allocated for the caller; failures are EIN_EINVAL
 * (an unknown or unsaved output, too many entries, a state written twice
 * in one entry) or EIN_ENOMEM with `err` filled. */
#ifndef CO_ENTRIES_H
#define CO_ENTRIES_H

#include "common/base/ein_error.h"
#include "common/ir/ein_program.h"
#include "planner/pl_graph.h"

/* Mark entry `e` (1..EIN_ENTRY_MAX) of progs[0..ndev) as the instructions
 * that the saved outputs outputs[0..n) of graph g need: sets bit e - 1 of
 * each needed instruction's `entries` (LOADs excepted); then, once every
 * entry is marked, co_entries_finish gives the instructions no entry needs
 * their dependencies' entries, and a COPY or WAIT no entry needs also its
 * peer NOTIFY's (it runs only where that NOTIFY does: a replicated
 * operator's copy that nothing on its device reads is fed by one). Refuses an entry that needs two
 * cache_writes of one state (they would write it unordered). */
int co_entries_mark(ein_program *const *progs, int ndev, const pl_graph *g, int e,
                    const char *const *outputs, int n, ein_error *err);
void co_entries_finish(ein_program *const *progs, int ndev);

/* The first state of g written by more than one cache_write (its node id),
 * or -1: a program that only entry points may run. */
int co_entries_shared_state(const pl_graph *g);

#endif
