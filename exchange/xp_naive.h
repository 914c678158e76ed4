/* exchange/xp_naive.h — the naive exchange program (Experiment 4).
 *
 * For each OUT requirement X @ d: send every atom copy of X that is not at
 * d to d, then aggregate X at d. Always valid (Thm. 5.6's witness); the
 * search synthesiser of the exchange issue starts from it. */
#ifndef XP_NAIVE_H
#define XP_NAIVE_H

#include "common/base/ein_error.h"
#include "exchange/xp_program.h"

/* Append the naive actions to a program that has its IN and OUT. */
int xp_naive_synthesize(xp_program *p, ein_error *err);

#endif
