/* coordinator/ein_compile_int.h — the compiled program value inside the
 * library (the public calls are in include/einsummable/einsummable.h),
 * shared by ein_compile.c and ein_session.c; private to the library. */
#ifndef EIN_COMPILE_INT_H
#define EIN_COMPILE_INT_H

#include "coordinator/co_lower.h"
#include "exchange/xp_topo.h"
#include "include/einsummable/einsummable.h"
#include "planner/pl_graph.h"
#include "planner/rewrite/pl_rewrite.h"

struct ein_compiled {
    int ndev;
    pl_graph *g;                /* the graph compiled (rewritten, if asked) */
    int rewritten;
    pl_rewrite_stats rewrite_stats;
    ein_plan *plan;
    xp_topology *topo;
    char topo_desc[700];        /* where the topology came from */
    char topo_why[512];         /* a detected topology: what was seen, else "" */
    ein_program **progs;        /* ndev, or NULL (plan_only); LOAD paths NULL
                                   (generated from `seed`), STORE paths
                                   "<name>.npy": a session sets both */
    co_lower_stats ls;
    long search_work;
    double search_cap_ms;
    int searched;
    uint64_t seed;
    struct { char *tensor, *consumer, *body; } *ex; /* every exchange body, as text */
    int nex, cap_ex;
};

/* The worker binary `name`: `given`, else $EINWORKER, else next to this
 * program or library (ein_self.h): NAME, ../NAME, ../bin/NAME. Fails with
 * EIN_EINVAL and a message saying how to name it. */
int co_find_worker(const char *name, const char *given, char *out, size_t len, ein_error *err);
/* A GPU device node exists (/dev/nvidia0 or /dev/nvidiactl). */
int co_gpu_visible(void);
/* The topology a compile uses (see ein_compile_options.topology); `desc`
 * says where it came from, `why` (detected ones) what the probe saw.
 * *out is the caller's (xp_topo_free). */
int co_topology_for(const ein_compile_options *o, int ndev, xp_topology **out, char *desc,
                    size_t desclen, char *why, size_t whylen, ein_error *err);

#endif
