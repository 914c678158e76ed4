/* planner/rewrite/rw_rules.h — rewrite rule sets (rw_rules.c), apart from
 * pl_rewrite.h so that the rule parser does not include the rewriter that
 * uses it (no file-to-file circle, issue 35). pl_rewrite.h includes this
 * header, so its users see the same declarations. A pl_rw_rules is owned by
 * whoever parsed or loaded it and released with pl_rw_rules_free. */
#ifndef RW_RULES_H
#define RW_RULES_H

#include "common/base/ein_error.h"

/* A rule set, parsed and compiled. Parsing checks the syntax, the operator
 * arities, that every right-side variable is bound on the left, and the
 * shapes: over every assignment of small matrix shapes to the variables
 * under which the left side type-checks (at least one must), the right side
 * must type-check to the same shape. Errors are EIN_EPARSE (syntax) or
 * EIN_ESHAPE, with "file:line:col:" of the offending rule or token. */
typedef struct pl_rw_rules pl_rw_rules;

int pl_rw_rules_parse(const char *text, const char *fname, pl_rw_rules **out, ein_error *err);
/* A file, or every *.rules file of a folder (in name order). */
int pl_rw_rules_load(const char *path, pl_rw_rules **out, ein_error *err);
int pl_rw_rules_count(const pl_rw_rules *r);
void pl_rw_rules_free(pl_rw_rules *r);

#endif
