/* common/base/ein_knob.c — the knob table's getter and printer (ein_knob.h). */
#include "common/base/ein_knob.h"

#include <stdlib.h>

static const ein_knob_row rows[EIN_KNOB_COUNT] = {
#define EIN_KNOB(id, name, unset, reader, doc) {name, unset, reader, doc},
#include "common/base/ein_knobs.def"
#undef EIN_KNOB
};

const char *ein_knob_get(ein_knob_id id)
{
    /* The one getenv of the project's C code. */
    return (int)id >= 0 && id < EIN_KNOB_COUNT ? getenv(rows[id].name) : NULL;
}

const ein_knob_row *ein_knob_info(ein_knob_id id)
{
    return (int)id >= 0 && id < EIN_KNOB_COUNT ? &rows[id] : NULL;
}

void ein_knob_print(FILE *f)
{
    fputs("| variable | when unset | read by | meaning |\n| --- | --- | --- | --- |\n", f);
    for (int k = 0; k < EIN_KNOB_COUNT; k++)
        fprintf(f, "| `%s` | %s | %s | %s |\n", rows[k].name, rows[k].unset, rows[k].reader,
                rows[k].doc);
}
