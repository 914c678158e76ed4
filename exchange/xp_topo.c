/* exchange/xp_topo.c — topology text format, built-ins, routes. */
#include "exchange/xp_topo.h"

#include <errno.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common/io/ein_file.h"

/* Far more than a 72-GPU machine needs; a bound on what --topology reads. */
#define XP_TOPO_FILE_MAX ((size_t)4 << 20)

int xp_topo_nres(const xp_topology *t)
{
    int n = t->ngpus;
    return 3 * n + n * n + t->nodes * t->nshared + (t->nic > 0 ? 2 * n : 0) +
           (t->spine > 0 ? 1 : 0);
}

int xp_topo_nic_base(const xp_topology *t)
{
    int n = t->ngpus;
    return t->nic > 0 ? 3 * n + n * n + t->nodes * t->nshared : -1;
}

double xp_topo_res_bw(const xp_topology *t, int r)
{
    int n = t->ngpus, x = 3 * n + n * n + t->nodes * t->nshared;
    if (r < n)
        return t->hbm;
    if (r < 3 * n)
        return t->port;
    if (r < 3 * n + n * n)
        return t->link[r - 3 * n];
    if (r < x)
        return t->shared_bw[(r - 3 * n - n * n) % t->nshared];
    if (t->nic > 0 && r < x + 2 * n)
        return t->nic;
    return t->spine;
}

void xp_topo_res_name(const xp_topology *t, int r, char *buf, int len)
{
    int n = t->ngpus, x = 3 * n + n * n + t->nodes * t->nshared;
    if (r < n)
        snprintf(buf, (size_t)len, "hbm %d", r);
    else if (r < 2 * n)
        snprintf(buf, (size_t)len, "egress %d", r - n);
    else if (r < 3 * n)
        snprintf(buf, (size_t)len, "ingress %d", r - 2 * n);
    else if (r < 3 * n + n * n)
        snprintf(buf, (size_t)len, "link %d->%d", (r - 3 * n) / n, (r - 3 * n) % n);
    else if (r < x && t->nodes == 1)
        snprintf(buf, (size_t)len, "%s", t->shared_name[r - 3 * n - n * n]);
    else if (r < x)
        snprintf(buf, (size_t)len, "%s of host %d", t->shared_name[(r - 3 * n - n * n) % t->nshared],
                 (r - 3 * n - n * n) / t->nshared);
    else if (t->nic > 0 && r < x + n)
        snprintf(buf, (size_t)len, "nic-tx %d", r - x);
    else if (t->nic > 0 && r < x + 2 * n)
        snprintf(buf, (size_t)len, "nic-rx %d", r - x - n);
    else
        snprintf(buf, (size_t)len, "spine");
}

double xp_topo_hop_latency(const xp_topology *t, int s, int d)
{
    if (t->latency_inter > 0 && !xp_topo_same_host(t, s, d))
        return t->latency_inter;
    return t->latency;
}

int xp_topo_route(const xp_topology *t, int s, int d, int *res, ein_error *err)
{
    int n = t->ngpus, k = 0;
    if (s < 0 || d < 0 || s >= n || d >= n || s == d)
        return ein_fail(err, EIN_EINVAL, "%s: no route from %d to %d", t->name, s, d);
    if (!xp_topo_same_host(t, s, d)) {
        int x = xp_topo_nic_base(t);
        if (x < 0)
            return ein_fail(err, EIN_EINVAL, "%s: GPUs %d and %d are on different hosts and "
                            "the topology has no nic", t->name, s, d);
        res[k++] = x + s;
        if (t->spine > 0 && s % t->local != d % t->local)
            res[k++] = x + 2 * n;
        res[k++] = x + n + d;
        return k;
    }
    if (t->port > 0)
        res[k++] = n + s;
    if (t->link[s * n + d] > 0)
        res[k++] = 3 * n + s * n + d;
    else if (t->rest >= 0)
        res[k++] = 3 * n + n * n + xp_topo_host(t, s) * t->nshared + t->rest;
    else if (t->rest == -2)
        return ein_fail(err, EIN_EINVAL, "%s: GPUs %d and %d are not connected", t->name, s, d);
    if (t->port > 0)
        res[k++] = 2 * n + d;
    return k;
}

void xp_topo_free(xp_topology *t)
{
    if (!t)
        return;
    free(t->link);
    free(t);
}

/* "450 GB/s" at words[i], words[i+1]. */
static int parse_bw(const char *num, const char *unit, double *bw)
{
    char *end;
    double v = strtod(num, &end);
    if (*end || !(v > 0))
        return -1;
    if (!unit)
        return -1;
    if (strcmp(unit, "TB/s") == 0)
        v *= 1e12;
    else if (strcmp(unit, "GB/s") == 0)
        v *= 1e9;
    else if (strcmp(unit, "MB/s") == 0)
        v *= 1e6;
    else
        return -1;
    *bw = v;
    return 0;
}

/* Dense 16-bit matrix throughput, for the rewriter's roofline. */
static int parse_flops(const char *num, const char *unit, double *f)
{
    char *end;
    double v = strtod(num, &end);
    if (*end || !(v > 0) || !unit)
        return -1;
    if (strcmp(unit, "PFLOP/s") == 0)
        v *= 1e15;
    else if (strcmp(unit, "TFLOP/s") == 0)
        v *= 1e12;
    else if (strcmp(unit, "GFLOP/s") == 0)
        v *= 1e9;
    else
        return -1;
    *f = v;
    return 0;
}

static int parse_bytes(const char *num, const char *unit, double *f)
{
    char *end;
    double v = strtod(num, &end);
    if (!*num || *end || !(v > 0) || v > 1e18)
        return -1;
    if (strcmp(unit, "TB") == 0)
        v *= 1e12;
    else if (strcmp(unit, "GB") == 0)
        v *= 1e9;
    else if (strcmp(unit, "MB") == 0)
        v *= 1e6;
    else
        return -1;
    if (!(v <= 1e18))
        return -1;
    *f = v;
    return 0;
}

/* "10 us": a duration in seconds (0 allowed: no latency). */
static int parse_time(const char *num, const char *unit, double *t)
{
    char *end;
    double v = strtod(num, &end);
    if (!*num || *end || !(v >= 0) || v > 1e12 || !unit)
        return -1;
    if (strcmp(unit, "s") == 0)
        ;
    else if (strcmp(unit, "ms") == 0)
        v *= 1e-3;
    else if (strcmp(unit, "us") == 0)
        v *= 1e-6;
    else if (strcmp(unit, "ns") == 0)
        v *= 1e-9;
    else
        return -1;
    if (v > 1e3) /* at most 1000 s, whatever the unit */
        return -1;
    *t = v;
    return 0;
}

static int parse_int(const char *s, int *v)
{
    char *end;
    long x = strtol(s, &end, 10);
    if (!*s || *end || x < 0 || x > 100000)
        return -1;
    *v = (int)x;
    return 0;
}

/* The state of one topology parse: the topology being filled (owned by
 * xp_topo_parse) and where the statement being read is. */
typedef struct tparse {
    xp_topology *t;
    const char *file;
    ein_error *err;
    int line, col;          /* the statement's first word */
    char rest_name[32];     /* rest via NAME, resolved at the end */
    int rest_line;
    int machine_line;       /* the first statement of the host's machine (0: none) */
    const char *machine_kw; /* its keyword */
    int node_line;          /* the `node` statement (0: none) */
    int depth;              /* 1: parsing the machine a `node` statement names */
} tparse;

static int topo_load(const char *name_or_path, xp_topology **out, ein_error *err, int depth);

/* Fail the statement being read (a parse error at its first word). */
#define BAD(...) return ein_fail_at(T->err, EIN_EPARSE, T->file, T->line, T->col, __VA_ARGS__)

static int topo_gpus(tparse *T, char **w, int nw)
{
    xp_topology *t = T->t;
    if (t->ngpus && T->node_line)
        BAD("'gpus' after 'node' (line %d); expected either node NAME or the machine's own "
            "gpus statement", T->node_line);
    if (t->ngpus)
        BAD("'gpus' given twice; expected one gpus statement");
    if (nw != 2 || parse_int(w[1], &t->ngpus) < 0 || t->ngpus < 1 || t->ngpus > 4096)
        BAD("bad 'gpus' statement; expected: gpus N (1..4096)");
    if (!(t->link = calloc((size_t)t->ngpus * (size_t)t->ngpus, sizeof *t->link)))
        BAD("out of memory");
    return 0;
}

static int topo_link(tparse *T, char **w, int nw)
{
    xp_topology *t = T->t;
    int a, b;
    double bw;
    if (!t->ngpus)
        BAD("'link' before 'gpus'; expected the gpus statement first");
    if (nw != 5 || parse_int(w[1], &a) < 0 || parse_int(w[2], &b) < 0 ||
        parse_bw(w[3], w[4], &bw) < 0)
        BAD("bad 'link' statement; expected: link A B BANDWIDTH UNIT");
    if (a >= t->ngpus || b >= t->ngpus || a == b)
        BAD("link %d %d: GPUs are 0..%d; expected two distinct GPUs of them", a, b,
            t->ngpus - 1);
    if (t->link[a * t->ngpus + b] > 0)
        BAD("link %d %d given twice; expected one link statement per pair", a, b);
    t->link[a * t->ngpus + b] = t->link[b * t->ngpus + a] = bw;
    return 0;
}

static int topo_shared(tparse *T, char **w, int nw)
{
    xp_topology *t = T->t;
    double bw;
    if (nw != 4 || parse_bw(w[2], w[3], &bw) < 0 || strlen(w[1]) >= 32)
        BAD("bad 'shared' statement; expected: shared NAME BANDWIDTH UNIT (a name under "
            "32 bytes)");
    if (t->nshared == XP_TOPO_MAX_SHARED)
        BAD("too many shared resources; expected at most %d", XP_TOPO_MAX_SHARED);
    for (int i = 0; i < t->nshared; i++)
        if (strcmp(t->shared_name[i], w[1]) == 0)
            BAD("shared resource %s given twice; expected distinct names", w[1]);
    strcpy(t->shared_name[t->nshared], w[1]);
    t->shared_bw[t->nshared++] = bw;
    return 0;
}

static int topo_rest(tparse *T, char **w, int nw)
{
    if (nw == 2 && strcmp(w[1], "direct") == 0)
        T->t->rest = -1;
    else if (nw == 2 && strcmp(w[1], "none") == 0)
        T->t->rest = -2;
    else if (nw == 3 && strcmp(w[1], "via") == 0 && strlen(w[2]) < 32) {
        strcpy(T->rest_name, w[2]);
        T->rest_line = T->line;
        T->t->rest = -3; /* resolved at the end: shared may come later */
    } else
        BAD("bad 'rest' statement; expected: rest direct | rest none | rest via NAME");
    return 0;
}

/* The statements that set one number: KEYWORD VALUE UNIT. */
static const struct {
    const char *kw;
    int (*parse)(const char *num, const char *unit, double *v);
    size_t off;             /* the double in xp_topology */
    const char *usage;
    int machine;            /* 1: describes the machine inside a host */
} topo_numbers[] = {
    {"peak", parse_flops, offsetof(xp_topology, peak), "RATE UNIT (PFLOP/s, TFLOP/s or GFLOP/s)", 1},
    {"memory", parse_bytes, offsetof(xp_topology, memory), "SIZE UNIT (TB, GB or MB)", 1},
    {"latency", parse_time, offsetof(xp_topology, latency), "TIME UNIT (s, ms, us or ns)", 1},
    {"hbm", parse_bw, offsetof(xp_topology, hbm), "BANDWIDTH UNIT (TB/s, GB/s or MB/s)", 1},
    {"port", parse_bw, offsetof(xp_topology, port), "BANDWIDTH UNIT (TB/s, GB/s or MB/s)", 1},
    {"nic", parse_bw, offsetof(xp_topology, nic), "BANDWIDTH UNIT (TB/s, GB/s or MB/s), per GPU "
     "and direction", 0},
    {"spine", parse_bw, offsetof(xp_topology, spine), "BANDWIDTH UNIT (TB/s, GB/s or MB/s)", 0},
    {"latency-inter", parse_time, offsetof(xp_topology, latency_inter),
     "TIME UNIT (s, ms, us or ns)", 0},
};

/* nodes N: the number of hosts. */
static int topo_nodes(tparse *T, char **w, int nw)
{
    if (T->t->nodes)
        BAD("'nodes' given twice; expected one nodes statement");
    if (nw != 2 || parse_int(w[1], &T->t->nodes) < 0 || T->t->nodes < 1 || T->t->nodes > 4096)
        BAD("bad 'nodes' statement; expected: nodes N (1..4096 hosts)");
    return 0;
}

/* node NAME|FILE: the machine inside a host, copied from a built-in or a
 * one-host topology file (before any statement of the machine's own). */
static int topo_node(tparse *T, char **w, int nw)
{
    xp_topology *t = T->t, *m = NULL;
    if (nw != 2)
        BAD("bad 'node' statement; expected: node NAME|FILE (the machine inside a host)");
    if (T->node_line)
        BAD("'node' given twice (first on line %d); expected one node statement", T->node_line);
    if (T->machine_line)
        BAD("'node' after '%s' (line %d); expected node before the machine's own statements",
            T->machine_kw, T->machine_line);
    ein_error sub = {0};
    if (T->depth > 0)
        BAD("'node' inside the machine a 'node' statement names; expected a one-host machine "
            "described by its own statements");
    if (topo_load(w[1], &m, &sub, T->depth + 1) < 0)
        BAD("node %s: %s", w[1], sub.msg);
    if (m->nodes > 1) {
        int mn = m->nodes;
        xp_topo_free(m);
        BAD("node %s: a machine of %d hosts; expected a one-host machine", w[1], mn);
    }
    char name[sizeof t->name];
    memcpy(name, t->name, sizeof name);
    int nodes = t->nodes;
    double nic = t->nic, spine = t->spine, li = t->latency_inter;
    free(t->link);
    *t = *m;
    free(m); /* its link matrix now belongs to t */
    memcpy(t->name, name, sizeof name);
    t->nodes = nodes;
    t->nic = nic;
    t->spine = spine;
    t->latency_inter = li;
    T->node_line = T->line;
    return 0;
}

/* KEYWORD NAME into dst (size bytes, 64: one word under 64 bytes). */
static int topo_word(tparse *T, char **w, int nw, char *dst, size_t size)
{
    if (nw != 2 || strlen(w[1]) >= size)
        BAD("bad '%s' statement; expected: %s NAME (one word under %d bytes)", w[0], w[0],
            (int)size);
    strcpy(dst, w[1]);
    return 0;
}

/* One statement, its words w[0..nw) (nw >= 1). */
static int topo_statement(tparse *T, char **w, int nw)
{
    xp_topology *t = T->t;
    static const char *const machine_kw[] = {"gpus", "link", "shared", "rest", "calibration",
                                             "peak", "memory", "latency", "hbm", "port"};
    for (size_t k = 0; k < sizeof machine_kw / sizeof *machine_kw; k++)
        if (strcmp(w[0], machine_kw[k]) == 0 && !T->machine_line) {
            T->machine_line = T->line;
            T->machine_kw = machine_kw[k];
        }
    if (strcmp(w[0], "nodes") == 0)
        return topo_nodes(T, w, nw);
    if (strcmp(w[0], "node") == 0)
        return topo_node(T, w, nw);
    for (size_t k = 0; k < sizeof topo_numbers / sizeof *topo_numbers; k++)
        if (strcmp(w[0], topo_numbers[k].kw) == 0) {
            double *v = (double *)((char *)t + topo_numbers[k].off);
            if (nw != 3 || topo_numbers[k].parse(w[1], w[2], v) < 0)
                BAD("bad '%s' statement; expected: %s %s", w[0], w[0], topo_numbers[k].usage);
            return 0;
        }
    if (strcmp(w[0], "name") == 0)
        return topo_word(T, w, nw, t->name, sizeof t->name);
    if (strcmp(w[0], "calibration") == 0)
        return topo_word(T, w, nw, t->calibration, sizeof t->calibration);
    if (strcmp(w[0], "gpus") == 0)
        return topo_gpus(T, w, nw);
    if (strcmp(w[0], "link") == 0)
        return topo_link(T, w, nw);
    if (strcmp(w[0], "shared") == 0)
        return topo_shared(T, w, nw);
    if (strcmp(w[0], "rest") == 0)
        return topo_rest(T, w, nw);
    BAD("unknown statement '%s'; expected name, gpus, hbm, peak, port, link, shared, "
        "rest, latency, memory, calibration, nodes, node, nic, spine or latency-inter", w[0]);
}
#undef BAD

/* The hosts: `gpus` and `link` were per host; the link matrix becomes
 * the block-diagonal one over nodes * local devices. */
static int topo_expand(tparse *T)
{
    xp_topology *t = T->t;
    if (!t->nodes)
        t->nodes = 1;
    t->local = t->ngpus;
    if (t->nodes == 1)
        return 0;
    if (!(t->nic > 0))
        return ein_fail_at(T->err, EIN_EPARSE, T->file, T->line, 1,
                           "nodes %d without 'nic'; expected: nic BANDWIDTH UNIT (per GPU)",
                           t->nodes);
    if ((long)t->nodes * t->local > 4096)
        return ein_fail_at(T->err, EIN_EPARSE, T->file, T->line, 1,
                           "%d hosts of %d GPUs: %ld devices; expected at most 4096", t->nodes,
                           t->local, (long)t->nodes * t->local);
    int g = t->local, n = t->nodes * g;
    double *link = calloc((size_t)n * (size_t)n, sizeof *link);
    if (!link)
        return ein_fail(T->err, EIN_ENOMEM, "out of memory");
    for (int h = 0; h < t->nodes; h++)
        for (int a = 0; a < g; a++)
            for (int b = 0; b < g; b++)
                link[(size_t)(h * g + a) * (size_t)n + (size_t)(h * g + b)] = t->link[a * g + b];
    free(t->link);
    t->link = link;
    t->ngpus = n;
    return 0;
}

/* After the last line: the required statements, rest via NAME resolved,
 * the name defaulted to the file's. */
static int topo_finish(tparse *T)
{
    xp_topology *t = T->t;
    if (!t->ngpus)
        return ein_fail_at(T->err, EIN_EPARSE, T->file, T->line, 1,
                           "no 'gpus' statement; expected: gpus N (or node NAME)");
    if (!(t->hbm > 0))
        return ein_fail_at(T->err, EIN_EPARSE, T->file, T->line, 1,
                           "no 'hbm' statement; expected: hbm BANDWIDTH UNIT");
    if (t->rest == -3) {
        t->rest = -2;
        for (int i = 0; i < t->nshared; i++)
            if (strcmp(t->shared_name[i], T->rest_name) == 0)
                t->rest = i;
        if (t->rest == -2)
            return ein_fail_at(T->err, EIN_EPARSE, T->file, T->rest_line, 1,
                               "rest via %s: no shared resource of that name; expected the "
                               "name of a shared statement", T->rest_name);
    }
    if (!t->name[0])
        snprintf(t->name, sizeof t->name, "%s", T->file);
    return topo_expand(T);
}

static int topo_parse(const char *text, const char *file, xp_topology **out, ein_error *err,
                      int depth)
{
    tparse T = {.t = calloc(1, sizeof *T.t), .file = file ? file : "<topology>", .err = err,
                .depth = depth};
    int rc = 0;
    const char *p = text;
    if (!T.t)
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    T.t->rest = -2;
    while (*p && rc == 0) {
        char buf[512];
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        T.line++;
        if (len >= sizeof buf) {
            rc = ein_fail_at(err, EIN_EPARSE, T.file, T.line, 1,
                             "line too long; expected at most %d bytes", (int)sizeof buf - 1);
            break;
        }
        memcpy(buf, p, len);
        buf[len] = 0;
        p += len + (nl ? 1 : 0);
        char *hash = strchr(buf, '#');
        if (hash)
            *hash = 0;
        char *w[8];
        int nw = 0;
        for (char *tok = strtok(buf, " \t\r"); tok && nw < 8; tok = strtok(NULL, " \t\r"))
            w[nw++] = tok;
        if (nw == 0)
            continue;
        T.col = (int)(w[0] - buf) + 1;
        rc = topo_statement(&T, w, nw);
    }
    if (rc == 0)
        rc = topo_finish(&T);
    if (rc < 0) {
        xp_topo_free(T.t);
        return rc;
    }
    *out = T.t;
    return 0;
}

int xp_topo_parse(const char *text, const char *file, xp_topology **out, ein_error *err)
{
    return topo_parse(text, file, out, err, 0);
}

static int topo_load_file(const char *path, xp_topology **out, ein_error *err, int depth)
{
    char *buf;
    size_t n;
    int rc = ein_file_read_all(path, XP_TOPO_FILE_MAX, "a topology file", &buf, &n, err);
    if (rc < 0)
        return rc;
    rc = topo_parse(buf, path, out, err, depth);
    free(buf);
    return rc;
}

int xp_topo_load_file(const char *path, xp_topology **out, ein_error *err)
{
    return topo_load_file(path, out, err, 0);
}

const xp_machine *xp_machine_find(const char *name)
{
    for (int i = 0; i < xp_nmachines; i++)
        if (strcmp(xp_machines[i].name, name) == 0)
            return &xp_machines[i];
    return NULL;
}

const char *xp_topo_builtin_text(const char *name)
{
    const xp_machine *m = xp_machine_find(name);
    return m ? m->text : NULL;
}

const char *xp_machine_calibration_text(const char *name)
{
    for (int i = 0; i < xp_nmachines; i++)
        if (xp_machines[i].calibration && xp_machines[i].calibration_text &&
            strcmp(xp_machines[i].calibration, name) == 0)
            return xp_machines[i].calibration_text;
    return NULL;
}

/* The generated multi-host built-ins: N x a machine whose row has NICs. */
int xp_topo_multi_text(const char *name, char *buf, int len)
{
    char *end;
    long nodes = strtol(name, &end, 10);
    if (name[0] < '0' || name[0] > '9' || end[0] != 'x' || end[1] != '-' || nodes < 1 ||
        nodes > 512)
        return -1;
    const xp_machine *m = xp_machine_find(end + 2);
    if (!m || !m->hosts_nic)
        return -1;
    /* Latency between hosts: an estimate (the inter-node small-message
     * floor of nccl-tests over InfiniBand is about 5-15 us). */
    snprintf(buf, (size_t)len,
             "# %ld x %s, GPU i of every host on NIC i (rail-optimised): %s.\n"
             "name %s\nnodes %ld\nnode %s\nnic %s\nlatency-inter %s\n",
             nodes, m->name, m->hosts_why, name, nodes, m->name, m->hosts_nic, m->hosts_latency);
    return 0;
}

static int topo_load(const char *name_or_path, xp_topology **out, ein_error *err, int depth)
{
    const char *text = xp_topo_builtin_text(name_or_path);
    if (text)
        return topo_parse(text, name_or_path, out, err, depth);
    char multi[512];
    if (xp_topo_multi_text(name_or_path, multi, sizeof multi) == 0)
        return topo_parse(multi, name_or_path, out, err, depth);
    if (!strchr(name_or_path, '/') && !strchr(name_or_path, '.')) {
        char names[1024] = "", multis[1024] = "";
        for (int i = 0; i < xp_nmachines; i++) {
            const char *n = xp_machines[i].name;
            size_t l = strlen(names), lm = strlen(multis);
            snprintf(names + l, sizeof names - l, "%s%s", l ? ", " : "", n);
            if (xp_machines[i].hosts_nic)
                snprintf(multis + lm, sizeof multis - lm, "%sNx-%s", lm ? ", " : "", n);
        }
        return ein_fail(err, EIN_EINVAL,
                        "unknown topology '%s' (built in: %s; %s for N hosts; or a file path)",
                        name_or_path, names, multis);
    }
    return topo_load_file(name_or_path, out, err, depth);
}

int xp_topo_load(const char *name_or_path, xp_topology **out, ein_error *err)
{
    return topo_load(name_or_path, out, err, 0);
}

/* The shortest "NUM UNIT" that the parser reads back to exactly `v`:
 * units[i] scales by scale[i]. A unit where the number is in [1, 1000)
 * wins ties; exponent forms only when nothing else is exact. */
static void format_rate(FILE *f, double v, const char *const *units, const double *scale, int nu)
{
    char best[64] = "";
    int best_score = 1 << 30;
    for (int u = 0; u < nu; u++)
        for (int prec = 1; prec <= 17; prec++) {
            char num[40];
            double x = v / scale[u];
            snprintf(num, sizeof num, "%.*g", prec, x);
            if (strtod(num, NULL) * scale[u] != v)
                continue;
            int score = (int)strlen(num) + (strchr(num, 'e') ? 100 : 0) - (x >= 1 && x < 1000);
            if (score < best_score) {
                snprintf(best, sizeof best, "%s %s", num, units[u]);
                best_score = score;
            }
            if (!strchr(num, 'e')) /* more digits might drop the exponent */
                break;
        }
    if (!best[0]) /* no exact form (not seen in practice): the closest one */
        snprintf(best, sizeof best, "%.17g %s", v / scale[nu - 1], units[nu - 1]);
    fputs(best, f);
}

static void format_bw(FILE *f, double v)
{
    static const char *const units[] = {"TB/s", "GB/s", "MB/s"};
    static const double scale[] = {1e12, 1e9, 1e6};
    format_rate(f, v, units, scale, 3);
}

int xp_topo_format(const xp_topology *t, char **text, ein_error *err)
{
    static const char *const funits[] = {"PFLOP/s", "TFLOP/s", "GFLOP/s"};
    static const double fscale[] = {1e15, 1e12, 1e9};
    int n = t->ngpus, g = t->local;
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++)
            if (t->link[a * n + b] != t->link[b * n + a])
                return ein_fail(err, EIN_EUNSUPPORTED,
                                "%s: link %d->%d and %d->%d differ; the topology format has "
                                "one bandwidth per pair", t->name, a, b, b, a);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    char name[sizeof t->name];
    snprintf(name, sizeof name, "%s", t->name[0] ? t->name : "unnamed");
    for (char *c = name; *c; c++)
        if (*c == ' ' || *c == '\t' || *c == '\r' || *c == '\n' || *c == '#')
            *c = '_';
    fprintf(f, "name %s\n", name);
    if (t->nodes > 1)
        fprintf(f, "nodes %d\n", t->nodes);
    fprintf(f, "gpus %d\nhbm ", g);
    format_bw(f, t->hbm);
    if (t->peak > 0) {
        fputs("\npeak ", f);
        format_rate(f, t->peak, funits, fscale, 3);
    }
    if (t->port > 0) {
        fputs("\nport ", f);
        format_bw(f, t->port);
    }
    fputc('\n', f);
    for (int a = 0; a < g; a++) /* per host: host 0's block (all are alike) */
        for (int b = a + 1; b < g; b++)
            if (t->link[a * n + b] > 0) {
                fprintf(f, "link %d %d ", a, b);
                format_bw(f, t->link[a * n + b]);
                fputc('\n', f);
            }
    for (int k = 0; k < t->nshared; k++) {
        fprintf(f, "shared %s ", t->shared_name[k]);
        format_bw(f, t->shared_bw[k]);
        fputc('\n', f);
    }
    if (t->rest >= 0)
        fprintf(f, "rest via %s\n", t->shared_name[t->rest]);
    else
        fprintf(f, "rest %s\n", t->rest == -1 ? "direct" : "none");
    if (t->latency > 0) {
        static const char *const tunits[] = {"s", "ms", "us", "ns"};
        static const double tscale[] = {1, 1e-3, 1e-6, 1e-9};
        fputs("latency ", f);
        format_rate(f, t->latency, tunits, tscale, 4);
        fputc('\n', f);
    }
    if (t->memory > 0) {
        static const char *const munits[] = {"TB", "GB", "MB"};
        static const double mscale[] = {1e12, 1e9, 1e6};
        fputs("memory ", f);
        format_rate(f, t->memory, munits, mscale, 3);
        fputc('\n', f);
    }
    if (t->calibration[0])
        fprintf(f, "calibration %s\n", t->calibration);
    if (t->nic > 0) {
        fputs("nic ", f);
        format_bw(f, t->nic);
        fputc('\n', f);
    }
    if (t->spine > 0) {
        fputs("spine ", f);
        format_bw(f, t->spine);
        fputc('\n', f);
    }
    if (t->latency_inter > 0) {
        static const char *const tunits[] = {"s", "ms", "us", "ns"};
        static const double tscale[] = {1, 1e-3, 1e-6, 1e-9};
        fputs("latency-inter ", f);
        format_rate(f, t->latency_inter, tunits, tscale, 4);
        fputc('\n', f);
    }
    if (fclose(f) != 0 || !buf) {
        free(buf);
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    }
    *text = buf;
    return 0;
}
