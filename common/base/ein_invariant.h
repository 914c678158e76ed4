/* common/base/ein_invariant.h — invariants as code at the seams between layers,
 * in SQLite's style: a checker function walks a structure and returns 1
 * if it keeps its invariants, 0 if not, and is called only as
 * EIN_INVARIANT(xxx_ok(...)).
 *
 * EIN_INVARIANT(expr) is assert(expr) in builds configured with
 * --enable-sanitizers (configure defines EIN_INVARIANTS there; CI's
 * sanitizer `make check` runs every test with them), and otherwise does
 * not evaluate expr at all, so a release build pays nothing for a checker
 * however slow it is. The checkers themselves are ordinary functions,
 * compiled in every build, so that tests can call them on a structure with
 * a planted violation (tests/coordinator/test_co_invariants.c). A checker
 * must not change what it reads and must not fail for want of memory
 * (it allocates nothing, or returns 1 when it cannot). */
#ifndef EIN_INVARIANT_H
#define EIN_INVARIANT_H

#include <assert.h>

#ifdef EIN_INVARIANTS
#define EIN_INVARIANT(expr) assert(expr)
#else
#define EIN_INVARIANT(expr) ((void)sizeof((expr) ? 1 : 0))
#endif

#endif
