/* coordinator/run/co_run_opts.c — what every worker of a run is told
 * (co_run_opts.h). */
#include "coordinator/run/co_run_opts.h"

void co_run_worker_args(const co_run_opts *o, int ndev, ein_worker_args *a)
{
    ein_worker_args_init(a);
    a->ndevices = ndev;
    a->iterations = o->iterations;
    a->instr_timeout_s = o->sess.instr_timeout;
    a->log_level = o->sess.log_level;
    a->graphs = o->sess.graphs != 0;
    if (o->backend)
        a->backend = o->backend;
    if (o->nhosts > 0) { /* several hosts: blocks between them, and their deadlines */
        a->transport = o->sess.transport;
        a->link_bw = o->link_bw > 0 ? o->link_bw : 0.0;
        a->link_lat = o->link_bw > 0 && o->link_lat > 0 ? o->link_lat : 0.0;
    }
}
