/* common/base/ein_knob.h — the environment variables the project reads, one
 * table (common/base/ein_knobs.def: name, value when unset, reader, meaning).
 *
 * ein_knob_get(EIN_KNOB_X) is getenv of X's name: each reader keeps its
 * own parsing and checks, the table keeps the list in one place, and
 * `einrun --help-env` prints it. No other code reads the environment (a
 * test greps the tree for getenv calls).
 *
 * Ownership: returned strings belong to the environment (as getenv's); the
 * table's strings are static. Nothing here fails or allocates. */
#ifndef EIN_KNOB_H
#define EIN_KNOB_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ein_knob_id {
#define EIN_KNOB(id, name, unset, reader, doc) EIN_KNOB_##id,
#include "common/base/ein_knobs.def"
#undef EIN_KNOB
    EIN_KNOB_COUNT
} ein_knob_id;

typedef struct ein_knob_row {
    const char *name, *unset, *reader, *doc;
} ein_knob_row;

/* The variable's value, NULL when unset (or for an id out of range). */
const char *ein_knob_get(ein_knob_id id);
/* The row of a knob (NULL for an id out of range). */
const ein_knob_row *ein_knob_info(ein_knob_id id);
/* The table as a Markdown table, a row a knob: what `einrun --help-env`
 * prints and docs/environment.md holds (a test checks they agree). */
void ein_knob_print(FILE *f);

#ifdef __cplusplus
}
#endif

#endif
