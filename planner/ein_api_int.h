/* planner/ein_api_int.h — what the library's other public calls (the
 * compiler and the session, coordinator/compile/ein_compile.c) need of the public
 * plan object; private to the library. */
#ifndef EIN_API_INT_H
#define EIN_API_INT_H

#include "include/einsummable/einsummable.h"
#include "planner/pl_optimize.h"

/* The planner's plan inside a public plan (owned by it). */
const pl_plan *ein_plan_internal(const ein_plan *p);

/* The public plan over a planner's plan of g (taken: freed with the
 * result, or on failure). */
int ein_plan_wrap(const pl_graph *g, pl_plan *pp, ein_plan **out, ein_error *err);

#endif
