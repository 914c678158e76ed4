/* common/io/ein_json.h — the one JSON string writer (traces, einplan --json).
 *
 * ein_json_str() writes `s` to `f` as a JSON string literal: quotes around
 * it, `"` and `\` escaped, control characters as \u00XX; other bytes are
 * written as they are (the project's names are ASCII). ein_json_strn() does
 * the same for at most `n` bytes of `s` (stopping at a NUL). Neither fails
 * other than as the stream does (check ferror/fclose as usual). */
#ifndef EIN_JSON_H
#define EIN_JSON_H

#include <stddef.h>
#include <stdio.h>

void ein_json_str(FILE *f, const char *s);
void ein_json_strn(FILE *f, const char *s, size_t n);

#endif
