/* tests/exchange/xp_testutil.h — set-up shared by the exchange tests:
 * parse a program, load a topology, build a collective preamble. Each
 * helper fails the running cmocka test (fail_msg) on error, so it never
 * returns NULL. Ownership: the caller frees what it gets
 * (xp_program_free, xp_topo_free). */
#ifndef XP_TESTUTIL_H
#define XP_TESTUTIL_H

#include "exchange/xp_baseline.h"
#include "exchange/xp_program.h"
#include "exchange/xp_topo.h"

/* A program from ExProg text. */
xp_program *xt_parse(const char *text);
/* A built-in machine or topology file; latency >= 0 replaces its
 * per-action latency (0: the paper's bandwidth-only model), < 0 keeps it. */
xp_topology *xt_topo(const char *name, double latency);

/* A collective's preamble (xp_collective_preamble). */
xp_program *xt_collective(xp_coll_kind kind, int n, double S);

#endif
