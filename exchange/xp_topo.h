/* exchange/xp_topo.h — machine topologies for the exchange simulator.
 *
 * A topology is a set of bandwidth resources (bytes/s): per GPU its HBM
 * (local aggregation), optionally an egress and an ingress port (switch
 * machines: the only contention is at endpoints), point-to-point links
 * with a bandwidth per direction, and named shared resources (a PCIe
 * bridge, a memory bus). A transfer s -> d takes the route: egress(s) if
 * ports exist, the link s->d if there is one, else the shared resource
 * that `rest via NAME` names (or nothing more with `rest direct`), then
 * ingress(d). Text format (one statement a line, # comments):
 *
 *   name dgx-v100
 *   gpus 8
 *   hbm 900 GB/s            # per GPU
 *   peak 125 TFLOP/s        # optional: dense 16-bit FLOP/s per GPU
 *   port 450 GB/s           # optional: egress and ingress per GPU
 *   link 0 3 50 GB/s        # point-to-point, this much in each direction
 *   shared pcie 15.75 GB/s  # a resource every route through it shares
 *   rest via pcie           # pairs without a link: via pcie | direct | none
 *   latency 10 us           # optional: per-action cost alpha (s, ms, us, ns):
 *                           # launch, notification and synchronisation
 *   memory 80 GB            # optional: device memory capacity (TB, GB, MB)
 *   calibration host        # optional: the kernel-rate table the plan
 *                           # simulator uses (coordinator/predict/co_calib.h): a
 *                           # built-in name or a file path
 *
 * Several hosts (two levels; a file without `nodes` is one host):
 *
 *   name 2x-dgx-h100
 *   nodes 2                 # hosts; device d is GPU d mod G of host d div G
 *   node dgx-h100           # the machine inside a host: a built-in or a
 *                           # file; or its statements inline (gpus G, hbm,
 *                           # port, link, shared, ...: per host, local ids)
 *   nic 50 GB/s             # per GPU, each direction; GPU i on NIC i (rail i)
 *   spine 3.2 TB/s          # optional: capacity of the spine that carries
 *                           # cross-rail traffic (default: non-blocking)
 *   latency-inter 10 us     # optional: alpha of a hop between hosts
 *                           # (default: the host's latency)
 *
 * A transfer between hosts takes nic-tx(s), the spine if the rails differ
 * and the spine is finite, nic-rx(d); inside a host the routes are the
 * host's own (its shared resources are one per host). `node` comes before
 * the machine's own statements (which then override the node's values).
 * Built-ins `Nx-NAME` (N hosts of NAME: dgx-h100 and hgx-h200 with
 * 8 x 400 Gb/s, dgx-a100 with 8 x 200 Gb/s, host with 10 Gb/s per device)
 * are generated for any N >= 1.
 *
 * Units: TB/s, GB/s, MB/s (powers of 10).
 *
 * Built-in machines: one file each, topologies/NAME.topo, is the whole
 * machine. Its text is the built-in topology, and its `#@` lines (comments
 * to the parser) are the rest of its row: the GPU names that detect it,
 * its PCIe link, its NICs for `Nx-NAME`, its calibration table.
 * exchange/xp_machines.awk turns the files into `xp_machines` at build
 * time (xp_topo_builtin.c; the statements are listed there), so adding a
 * machine is adding its file.
 * Ownership: xp_topo_free releases a topology; the machine rows are static. */
#ifndef XP_TOPO_H
#define XP_TOPO_H

#include "common/base/ein_error.h"

#define XP_TOPO_MAX_SHARED 8

typedef struct xp_topology {
    char name[64];
    int ngpus;
    double hbm;          /* bytes/s, per GPU */
    double peak;         /* dense 16-bit FLOP/s per GPU (optional, 0: unknown);
                            used by the rewriter's roofline, not the simulator */
    double port;         /* bytes/s per direction per GPU; 0: no port limit */
    double *link;        /* ngpus*ngpus, [s*ngpus+d] bytes/s s->d; 0: no link */
    int nshared;
    char shared_name[XP_TOPO_MAX_SHARED][32];
    double shared_bw[XP_TOPO_MAX_SHARED];
    int rest;            /* -1: direct, -2: no route, k >= 0: via shared k */
    double memory;       /* bytes of memory per GPU (optional, 0: unknown) */
    double latency;      /* seconds per action hop (alpha; optional, 0: none) */
    char calibration[64]; /* calibration table name or path ("": none) */
    /* Two levels (nodes = 1, local = ngpus: one host, as before). */
    int nodes;           /* hosts */
    int local;           /* GPUs per host; ngpus = nodes * local */
    double nic;          /* bytes/s per GPU per direction between hosts (0: none) */
    double spine;        /* bytes/s of the spine for cross-rail traffic (0: non-blocking) */
    double latency_inter; /* seconds per hop between hosts (0: as `latency`) */
} xp_topology;

/* Resource ids: hbm(g) = g, egress(g) = n+g, ingress(g) = 2n+g,
 * link(s,d) = 3n + s*n + d, shared k of host h = 3n + n*n + h*nshared + k,
 * then (nic > 0) nic-tx(g) = X + g and nic-rx(g) = X + n + g with
 * X = 3n + n*n + nodes*nshared, then (spine > 0) the spine = X + 2n. */
int xp_topo_nres(const xp_topology *t);
/* The host of device d, and whether two devices share one. */
static inline int xp_topo_host(const xp_topology *t, int d) { return d / t->local; }
static inline int xp_topo_same_host(const xp_topology *t, int a, int b)
{
    return a / t->local == b / t->local;
}
/* The alpha of a hop s -> d: latency_inter between hosts (if set), else latency. */
double xp_topo_hop_latency(const xp_topology *t, int s, int d);
/* Id of the first NIC resource (nic-tx of device 0), -1 without NICs. */
int xp_topo_nic_base(const xp_topology *t);
double xp_topo_res_bw(const xp_topology *t, int r);
/* Human name of a resource ("NVLink 0->3", "pcie", "egress 2"). */
void xp_topo_res_name(const xp_topology *t, int r, char *buf, int len);
/* The resources a transfer s -> d crosses (at most 4); returns how many,
 * or a negative code (no route). */
int xp_topo_route(const xp_topology *t, int s, int d, int *res, ein_error *err);

int xp_topo_parse(const char *text, const char *file, xp_topology **out, ein_error *err);
/* A regular file of at most 4 MiB (a FIFO or device is refused unread). */
int xp_topo_load_file(const char *path, xp_topology **out, ein_error *err);
/* A built-in machine by name, or else a file path. */
int xp_topo_load(const char *name_or_path, xp_topology **out, ein_error *err);
/* The topology as text that xp_topo_parse reads back to the same topology
 * (every rate is printed in the unit whose shortest decimal form parses to
 * the same double). Comments are not kept. A name with blanks or '#' (one
 * taken from a file path) is printed with '_' in their place. *text is
 * allocated by the callee, freed by the caller with free(). Fails with
 * EIN_EUNSUPPORTED for a link matrix that is not symmetric (the format has
 * one bandwidth per pair). */
int xp_topo_format(const xp_topology *t, char **text, ein_error *err);
/* A built-in machine's row, from topologies/NAME.topo. */
typedef struct xp_machine {
    const char *name;          /* its topology's name (and file name) */
    const char *text;          /* the whole file: its topology text */
    const char *const *detect; /* CUDA device-name substrings that pick its
                                  figures, NULL-terminated (none: never) */
    const char *pcie_gen;      /* "PCIe Gen5 x16": its GPUs' host link (NULL
                                  when not detected) */
    double pcie;               /* that link's bytes/s; 0: the text's `shared pcie` */
    int mesh;                  /* also detected by a peer matrix equal to its
                                  link adjacency (8 GPUs, co_topo.h rule 2) */
    int fallback;              /* its figures serve unknown GPUs (one machine) */
    const char *hosts_nic;     /* `Nx-NAME`: NIC per device ("50 GB/s"), NULL: none */
    const char *hosts_latency; /* alpha between hosts ("10 us") */
    const char *hosts_why;     /* what the NICs are, for the text's comment */
    const char *calibration;   /* the table its `calibration` names (NULL: none) */
    const char *calibration_text; /* that table's text (NULL: not built in) */
} xp_machine;

/* The rows (xp_nmachines of them, sorted by name) and their names
 * (NULL-terminated). */
extern const xp_machine xp_machines[];
extern const int xp_nmachines;
extern const char *const xp_topo_builtin_names[];
/* A machine by name; NULL if there is none. */
const xp_machine *xp_machine_find(const char *name);
/* The built-in calibration table called `name` (a machine's
 * `calibration`); NULL if none is built in. */
const char *xp_machine_calibration_text(const char *name);
/* The text of a built-in machine (NULL if unknown). The generated `Nx-NAME`
 * machines are not listed; xp_topo_multi_text writes one's text into buf
 * (len bytes) and returns 0, or -1 when `name` is not of that form. */
int xp_topo_multi_text(const char *name, char *buf, int len);
const char *xp_topo_builtin_text(const char *name);
void xp_topo_free(xp_topology *t);

#endif
