/* exchange/xp_bound.h — a sound lower bound on the makespan of any valid
 * exchange program for a preamble, on the simulator's model.
 *
 * The bound is the largest of (docs/exprog.md, "Lower bound", gives the
 * reasoning):
 *   - per GPU g: the bytes that must enter g (one block per atom that an
 *     OUT at g needs from elsewhere) over g's ingress capacity, the bytes
 *     that must leave g (one block per atom of which g holds a copy that an
 *     OUT elsewhere needs) over its egress capacity, and both together over
 *     its HBM bandwidth (a copy reads HBM at one end and writes it at the
 *     other);
 *   - the total volume: an aggregate over copies held at the sites H and
 *     wanted at the sites D needs at least |H| + |D| - 2 block transfers if
 *     H and D meet, |H| + |D| - 1 if not (the one-way gossip argument),
 *     over the summed egress (and ingress, and link) capacity of the
 *     machine;
 *   - cuts (machines of at most 16 GPUs): for each split of the GPUs into
 *     S and its complement, the blocks that must cross from S over the
 *     capacity from S to the rest;
 *   - on machines of several hosts, the same two arguments one level up,
 *     each host a site and the NICs the only way between hosts: the host
 *     volume (the gossip count over hosts, holder hosts + target hosts - 2
 *     blocks, or - 1, per atom, over the NICs of all GPUs), and the host
 *     cuts (at most 16 hosts): for each split of the hosts into S and the
 *     rest, the blocks that must leave S over the NICs of the smaller side
 *     (|side| x GPUs per host x nic);
 * plus the topology's latency once when anything moves at all.
 *
 * The program's actions are ignored. Size-declared partitions that are not
 * resolved are allowed: their OUT entries count only where the bound holds
 * for every membership. Returns 0 and fills *out, or a negative EIN_E* code
 * with `err` filled (the program uses more sites than the machine has). No
 * allocation is kept; *out is a plain value. */
#ifndef XP_BOUND_H
#define XP_BOUND_H

#include <stdio.h>

#include "common/base/ein_error.h"
#include "exchange/xp_program.h"
#include "exchange/xp_topo.h"

typedef struct xp_bound {
    double seconds;      /* the bound: the largest term, plus latency */
    double per_gpu;      /* the largest per-GPU term (s) */
    int per_gpu_site;    /* the GPU that gives it (-1: none) */
    double volume;       /* the total-volume term (s) */
    double volume_bytes; /* bytes that must be transferred in all */
    double cut;          /* the largest cut term (s; 0 when not computed) */
    double host_volume;  /* the host-level volume term (s; 0 on one host) */
    double host_volume_bytes; /* bytes that must cross between hosts */
    double host_cut;     /* the largest host cut (s; 0 on one host or > 16 hosts) */
    double latency;      /* latency added (s) */
} xp_bound;

int xp_bound_compute(const xp_program *p, const xp_topology *t, xp_bound *out, ein_error *err);
/* The terms, one per line, then `bound: X ms` last. */
void xp_bound_print(const xp_bound *b, FILE *f);

#endif
