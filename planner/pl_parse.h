/* planner/pl_parse.h — the .ein language, version 1 (see README.md).
 *
 * pl_ein_parse() turns program text into a pl_graph. Errors fail with
 * EIN_EPARSE (syntax) or EIN_ESHAPE (shapes) and a message of the form
 * "FILE:LINE:COL: what was wrong, what was expected"; lines and columns
 * count from 1 (columns in bytes). On success *out is a new graph owned by
 * the caller (pl_graph_free); on error *out is left untouched. */
#ifndef PL_PARSE_H
#define PL_PARSE_H

#include <stddef.h>

#include "common/base/ein_error.h"
#include "planner/pl_graph.h"

int pl_ein_parse(const char *filename, const char *text, size_t len,
                 pl_graph **out, ein_error *err);
int pl_ein_parse_file(const char *path, pl_graph **out, ein_error *err);

#endif
