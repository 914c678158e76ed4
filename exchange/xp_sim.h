/* exchange/xp_sim.h — simulate an exchange program on a topology.
 *
 * Event-driven and flow-level. An action starts the moment its aggregate
 * is partitioned by aggregates held at its source (it uses the partition
 * with the fewest pieces then held). Its aggregation stage, when it has
 * m >= 2 pieces, reads them and writes the result at the source's HBM
 * bandwidth (bytes = sum of pieces + result; aggregations on one GPU share
 * its HBM). Its transfer stage, on every hop, first waits the topology's
 * latency (alpha; latency-inter when a destination is on another host),
 * then runs one flow per destination along the topology's route (egress
 * port, link or shared bridge, ingress port; NIC tx, spine, NIC rx between
 * hosts), which also
 * crosses the HBM of both ends; a relay's next hop starts when the relay
 * has received the whole aggregate (or chunk). Chunked actions move their
 * share of the bytes; a run of chunks is a stream (on every hop chunk c+1
 * starts once chunk c has finished that hop). The timeline reports actions
 * as written (a stream from its first chunk's start to its last's end).
 * At every moment the bandwidth of every resource is shared max-min fairly
 * among the flows crossing it (so a multicast to k destinations gets 1/k
 * of a saturated egress port each). Data lands at a site, and may enable
 * other actions, when its flow completes.
 *
 * xp_sim_run returns 0 and the makespan in seconds (the time the last
 * action completes); the timeline, if asked for, is allocated by the
 * callee and freed with xp_timeline_free(). The program must be resolved
 * (no unassigned partition). On error (an action never enabled, an OUT
 * never reached, no route) returns a negative EIN_E* code, fills `err`,
 * and leaves the outputs untouched. */
#ifndef XP_SIM_H
#define XP_SIM_H

#include <stdio.h>

#include "common/base/ein_error.h"
#include "exchange/xp_program.h"
#include "exchange/xp_topo.h"

enum { XP_SPAN_AGG = 0, XP_SPAN_XFER = 1 };

typedef struct xp_span {
    int action;
    int kind;            /* XP_SPAN_AGG or XP_SPAN_XFER */
    int from, to;        /* aggregation: from = to = the site */
    int pieces;          /* aggregation: aggregates read */
    double bytes;
    double start, end;   /* seconds */
    int res[4], nres;    /* resources crossed (xp_topo ids) */
} xp_span;

typedef struct xp_timeline {
    double makespan;
    double xfer_busy;    /* time during which at least one transfer ran */
    int nact;
    double *act_start, *act_end;   /* per action: enabled, completed */
    xp_span *span;
    int nspan, cap;
    long events;         /* flow completions processed */
} xp_timeline;

int xp_sim_run(const xp_program *p, const xp_topology *t, double *makespan,
               xp_timeline **tl, ein_error *err);
/* Same, also giving the mean completion time of the actions (the search
 * uses it to break ties between programs of one makespan). */
int xp_sim_run_ex(const xp_program *p, const xp_topology *t, double *makespan,
                  double *mean_end, xp_timeline **tl, ein_error *err);
void xp_timeline_free(xp_timeline *tl);
/* Human-readable timeline, one line per stage, times in ms. */
void xp_timeline_print(const xp_program *p, const xp_topology *t, const xp_timeline *tl,
                       FILE *f);
/* Chrome trace JSON (chrome://tracing, Perfetto): one process per GPU,
 * thread 0 its aggregations, thread 1 its outgoing transfers. */
int xp_timeline_write_trace(const xp_program *p, const xp_topology *t,
                            const xp_timeline *tl, FILE *f);

#endif
