/* coordinator/compile/co_topo.c — probe text and topology detection (co_topo.h). */
#include "coordinator/compile/co_topo.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/io/ein_file.h"
#include "common/base/ein_vec.h"

#define PROBE_MAX_BYTES (64u << 20)

void co_topo_probe_free(co_topo_probe *p)
{
    if (!p)
        return;
    free(p->name);
    free(p->access);
    free(p->rank);
    free(p);
}

/* Decimal integer in [lo, hi], the whole word. */
static int parse_int(const char *s, long lo, long hi, int *v)
{
    char *end;
    if (!*s || (*s != '-' && (*s < '0' || *s > '9')))
        return -1;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (errno || *end || x < lo || x > hi)
        return -1;
    *v = (int)x;
    return 0;
}

/* The matrices, once the gpu lines are over; 0xff marks a pair not seen. */
static int probe_matrices(co_topo_probe *p)
{
    size_t nn = (size_t)p->ngpus * (size_t)p->ngpus;
    if (!(p->access = malloc(nn)) || !(p->rank = calloc(nn, sizeof *p->rank)))
        return -1;
    memset(p->access, 0xff, nn);
    return 0;
}

/* A probe being read: the result so far and where the reader is. */
typedef struct probe_reader {
    co_topo_probe *p;
    const char *file;
    ein_error *err;
    int line, col;     /* of the statement being read, for messages */
    int version;       /* 1 once 'einprobe 1' was read */
    int npeers, cap;   /* peer lines read; capacity of p->name */
} probe_reader;

/* Fail the probe with a parse error at the reader's line and column. */
#define PROBE_BAD(r, ...) ein_fail_at((r)->err, EIN_EPARSE, (r)->file, (r)->line, (r)->col, __VA_ARGS__)

/* Copy the next line of *s into buf (NUL-terminated, '\r' and '\n' cut)
 * and advance *s past it; fails on an overlong line or a control byte. */
static int probe_next_line(probe_reader *r, const char **s, char *buf, size_t bufsz, size_t *len)
{
    const char *nl = strchr(*s, '\n');
    size_t n = nl ? (size_t)(nl - *s) : strlen(*s);
    r->col = 1;
    r->line++;
    if (n >= bufsz)
        return PROBE_BAD(r, "line longer than %zu characters", bufsz - 1);
    memcpy(buf, *s, n);
    buf[n] = 0;
    *s += n + (nl ? 1 : 0);
    if (n && buf[n - 1] == '\r')
        buf[--n] = 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)buf[i] < 0x20 && buf[i] != '\t') {
            r->col = (int)i + 1;
            return PROBE_BAD(r, "control character 0x%02x; a probe is text", (unsigned char)buf[i]);
        }
    *len = n;
    return 0;
}

/* Cut buf into at most 6 words (w); *rest points at the third word, where
 * a gpu line's name starts. Returns the number of words. */
static int probe_words(char *buf, char **w, char **rest)
{
    int nw = 0;
    for (char *c = buf; *c && nw < 6;) {
        while (*c == ' ' || *c == '\t')
            c++;
        if (!*c)
            break;
        if (nw == 2)
            *rest = c; /* gpu ID NAME: the name is the rest of the line */
        w[nw++] = c;
        while (*c && *c != ' ' && *c != '\t')
            c++;
        if (*c)
            *c++ = 0;
    }
    return nw;
}

/* "gpu ID NAME": the next GPU; the name runs from `rest` to buf + len. */
static int probe_gpu(probe_reader *r, char **w, int nw, char *rest, char *buf, size_t len)
{
    co_topo_probe *p = r->p;
    int id;
    if (nw < 3)
        return PROBE_BAD(r, "expected: gpu ID NAME");
    if (p->access)
        return PROBE_BAD(r, "gpu line after the peer lines");
    if (parse_int(w[1], 0, CO_TOPO_MAX_GPUS - 1, &id) < 0 || id != p->ngpus)
        return PROBE_BAD(r, "expected gpu %d next (ids in order from 0), got '%s'", p->ngpus, w[1]);
    /* Undo the tokenizer's cuts inside the name, trim its end. */
    char *end = buf + len;
    for (char *c = rest; c < end; c++)
        if (!*c)
            *c = ' ';
    while (end > rest && (end[-1] == ' ' || end[-1] == '\t'))
        *--end = 0;
    if (strlen(rest) >= CO_TOPO_NAME_MAX)
        return PROBE_BAD(r, "GPU name longer than %d characters", CO_TOPO_NAME_MAX - 1);
    if (ein_vec_reserve(&p->name, &r->cap, (int64_t)p->ngpus + 1, sizeof *p->name) < 0)
        return PROBE_BAD(r, "out of memory");
    memcpy(p->name[p->ngpus++], rest, strlen(rest) + 1);
    return 0;
}

/* "peer A B ACCESS PERF-RANK": one ordered pair of the matrices. */
static int probe_peer(probe_reader *r, char **w, int nw)
{
    co_topo_probe *p = r->p;
    int a, b, acc, rank;
    if (nw != 5)
        return PROBE_BAD(r, "expected: peer A B ACCESS PERF-RANK");
    if (!p->ngpus)
        return PROBE_BAD(r, "peer line before any gpu line");
    if (!p->access && probe_matrices(p) < 0)
        return PROBE_BAD(r, "out of memory");
    if (parse_int(w[1], 0, p->ngpus - 1, &a) < 0 || parse_int(w[2], 0, p->ngpus - 1, &b) < 0)
        return PROBE_BAD(r, "peer %s %s: expected GPU ids from 0 to %d", w[1], w[2], p->ngpus - 1);
    if (a == b)
        return PROBE_BAD(r, "peer %d %d: expected two distinct GPUs", a, b);
    if (strcmp(w[3], "0") != 0 && strcmp(w[3], "1") != 0)
        return PROBE_BAD(r, "peer %d %d: expected ACCESS 0 or 1, got '%s'", a, b, w[3]);
    if (parse_int(w[4], -1000000, 1000000, &rank) < 0)
        return PROBE_BAD(r, "peer %d %d: expected an integer PERF-RANK, got '%s'", a, b, w[4]);
    acc = w[3][0] == '1';
    size_t k = (size_t)a * (size_t)p->ngpus + (size_t)b;
    if (p->access[k] != 0xff)
        return PROBE_BAD(r, "peer %d %d given twice", a, b);
    p->access[k] = (unsigned char)acc;
    p->rank[k] = rank;
    r->npeers++;
    return 0;
}

/* One statement (w[0] is its keyword, at r->col): einprobe, gpu or peer. */
static int probe_statement(probe_reader *r, char **w, int nw, char *rest, char *buf, size_t len)
{
    if (!r->version && strcmp(w[0], "einprobe") != 0)
        return PROBE_BAD(r, "expected 'einprobe 1' first (the output of einworker-cuda --probe)");
    if (strcmp(w[0], "einprobe") == 0) {
        if (r->version)
            return PROBE_BAD(r, "'einprobe' given twice");
        if (nw != 2)
            return PROBE_BAD(r, "expected: einprobe VERSION");
        if (strcmp(w[1], "1") != 0)
            return PROBE_BAD(r, "probe format version '%s'; expected version 1", w[1]);
        r->version = 1;
        return 0;
    }
    if (strcmp(w[0], "gpu") == 0)
        return probe_gpu(r, w, nw, rest, buf, len);
    if (strcmp(w[0], "peer") == 0)
        return probe_peer(r, w, nw);
    return PROBE_BAD(r, "unknown statement '%s' (expected einprobe, gpu or peer)", w[0]);
}

/* After the last line: a version, a GPU and every ordered pair seen. */
static int probe_finish(probe_reader *r)
{
    co_topo_probe *p = r->p;
    if (!r->version)
        return ein_fail_at(r->err, EIN_EPARSE, r->file, r->line ? r->line : 1, 1,
                           "empty probe: expected 'einprobe 1' (the output of einworker-cuda --probe)");
    if (!p->ngpus)
        return ein_fail_at(r->err, EIN_EPARSE, r->file, r->line, 1,
                           "no 'gpu' line: the probe saw no GPU");
    if (!p->access && probe_matrices(p) < 0)
        return ein_fail(r->err, EIN_ENOMEM, "out of memory");
    if (r->npeers != p->ngpus * (p->ngpus - 1)) {
        for (int a = 0; a < p->ngpus; a++)
            for (int b = 0; b < p->ngpus; b++)
                if (a != b && p->access[a * p->ngpus + b] == 0xff)
                    return ein_fail_at(r->err, EIN_EPARSE, r->file, r->line, 1,
                                       "no 'peer %d %d' line (expected one for each of the %d "
                                       "ordered pairs of GPUs)", a, b, p->ngpus * (p->ngpus - 1));
    }
    for (int a = 0; a < p->ngpus; a++)
        p->access[a * p->ngpus + a] = 1;
    return 0;
}

int co_topo_probe_parse(const char *text, const char *file, co_topo_probe **out,
                        ein_error *err)
{
    probe_reader r = {.p = calloc(1, sizeof *r.p), .file = file ? file : "<probe>", .err = err};
    int rc = 0;
    const char *s = text;
    if (!r.p)
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    while (*s) {
        char buf[512], *w[6], *rest = NULL;
        size_t len = 0;
        if ((rc = probe_next_line(&r, &s, buf, sizeof buf, &len)) < 0)
            goto fail;
        int nw = probe_words(buf, w, &rest);
        if (nw == 0 || w[0][0] == '#')
            continue;
        r.col = (int)(w[0] - buf) + 1;
        if ((rc = probe_statement(&r, w, nw, rest, buf, len)) < 0)
            goto fail;
    }
    if ((rc = probe_finish(&r)) < 0)
        goto fail;
    *out = r.p;
    return 0;
fail:
    co_topo_probe_free(r.p);
    return rc;
}

int co_topo_probe_load(const char *path, co_topo_probe **out, ein_error *err)
{
    char *buf;
    size_t n;
    int rc = ein_file_read_all(path, PROBE_MAX_BYTES, "a probe", &buf, &n, err);
    if (rc < 0)
        return rc;
    if (strlen(buf) != n)
        rc = ein_fail(err, EIN_EPARSE, "%s: contains a NUL byte; a probe is text", path);
    else
        rc = co_topo_probe_parse(buf, path, out, err);
    free(buf);
    return rc;
}

/* ---- detection ---- */

/* A GPU family is a built-in machine with `#@ detect` substrings
 * (xp_machines, from topologies/NAME.topo): the machine whose substring
 * in the CUDA device name is the longest (the first of equals) wins, so
 * "GB200" beats "B200" and "GH200" (Grace Hopper) takes the H200's. */
static int family_of(const char *name)
{
    int best = -1;
    size_t best_len = 0;
    for (int f = 0; f < xp_nmachines; f++)
        for (const char *const *s = xp_machines[f].detect; *s; s++)
            if (strlen(*s) > best_len && strstr(name, *s)) {
                best = f;
                best_len = strlen(*s);
            }
    return best;
}

/* A family detected by its peer matrix too (the DGX-1 cube mesh). */
static int is_mesh(int f)
{
    return f >= 0 && xp_machines[f].mesh;
}

/* The machine whose figures serve unknown GPUs (the smallest we have). */
static const xp_machine *fallback(void)
{
    for (int f = 0; f < xp_nmachines; f++)
        if (xp_machines[f].fallback)
            return &xp_machines[f];
    return NULL; /* not reached: the generator checks there is one */
}

/* "NVIDIA H100 PCIe", "Tesla V100-PCIE-32GB": a card without NVSwitch. */
static int is_pcie_card(const char *name)
{
    for (const char *c = name; *c; c++)
        if (strncasecmp(c, "pcie", 4) == 0)
            return 1;
    return 0;
}

/* What a generated topology takes from a built-in text. */
typedef struct figures {
    xp_topology *t;   /* the built-in, parsed */
    double hbm, peak, port;
    double nvlink;    /* the smallest link (one NVLink), 0 if none */
    double pcie;      /* its `shared pcie`, 0 if none */
} figures;

static int figures_load(const char *builtin, figures *F, ein_error *err)
{
    const char *text = xp_topo_builtin_text(builtin);
    memset(F, 0, sizeof *F);
    if (!text)
        return ein_fail(err, EIN_EINVAL, "no built-in topology %s", builtin);
    int rc = xp_topo_parse(text, builtin, &F->t, err);
    if (rc < 0)
        return rc;
    const xp_topology *t = F->t;
    F->hbm = t->hbm;
    F->peak = t->peak;
    F->port = t->port;
    for (int k = 0; k < t->ngpus * t->ngpus; k++)
        if (t->link[k] > 0 && (F->nvlink == 0 || t->link[k] < F->nvlink))
            F->nvlink = t->link[k];
    for (int k = 0; k < t->nshared; k++)
        if (strcmp(t->shared_name[k], "pcie") == 0)
            F->pcie = t->shared_bw[k];
    return 0;
}

static int peer(const co_topo_probe *p, int a, int b)
{
    return p->access[a * p->ngpus + b] && p->access[b * p->ngpus + a];
}

/* A probe of GPUs of mesh family `fam` only, whose peer matrix is the
 * link adjacency of the family's text `t` (8 V100: the DGX-1 cube mesh). */
static int is_dgx1(const co_topo_probe *p, int fam, const xp_topology *t)
{
    if (p->ngpus != t->ngpus)
        return 0;
    for (int a = 0; a < p->ngpus; a++) {
        if (family_of(p->name[a]) != fam)
            return 0;
        for (int b = 0; b < p->ngpus; b++)
            if (a != b && peer(p, a, b) != (t->link[a * p->ngpus + b] > 0))
                return 0;
    }
    return 1;
}

/* "8 x NVIDIA H200", "4 workers on 1 x NVIDIA H200", "1 x A, 1 x B". */
static void summary(const co_topo_probe *p, int nw, const unsigned char *used,
                    int ndistinct, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = 0;
    if (nw != ndistinct)
        n += (size_t)snprintf(buf, len, "%d workers on ", nw);
    for (int g = 0; g < p->ngpus && n < len; g++) {
        if (!used[g])
            continue;
        int first = 1, count = 0;
        for (int h = 0; h < p->ngpus; h++)
            if (used[h] && strcmp(p->name[h], p->name[g]) == 0) {
                first = first && h >= g;
                count++;
            }
        if (first)
            n += (size_t)snprintf(buf + n, len - n, "%s%d x %.80s", n && buf[n - 1] != ' ' ? ", " : "",
                                  count, p->name[g]);
    }
}

static void put_bw(FILE *f, const char *what, double bw)
{
    fprintf(f, "%s%.9g GB/s\n", what, bw / 1e9);
}

enum { M_SWITCH, M_MESH, M_PARTIAL, M_BRIDGE, M_DGX1 };

/* What detection learns about the workers' GPUs, and what it decides. */
typedef struct detection {
    const co_topo_probe *probe;
    const int *gpu_ids;
    int nworkers, n;          /* workers; GPUs in the probe */
    unsigned char *used;      /* [n]: some worker runs on GPU g */
    int ndistinct;            /* GPUs used */
    int fam;                  /* their family, -1 unknown or mixed */
    int mixed, pcie_card, identity;
    int npairs, nonpeer;      /* pairs of used GPUs; of them not peer-accessible */
    char sum[256];            /* summary() of the workers' GPUs */
    figures F, V;             /* the family's figures; the fallback's */
    double pcie;              /* the host bridge, bytes/s */
    const char *pcie_gen, *src, *figs;
    int dgx1;                 /* 8 GPUs of a mesh family with its peer matrix */
    int mode;                 /* M_*, for a generated topology */
    double peer_bw;           /* a peer pair's link */
    int one_gpu;              /* several workers, all on one GPU */
    char line[512];           /* the one-line account, the `why` */
} detection;

/* Survey the workers' GPUs: families, PCIe cards, peer pairs, summary. */
static void detect_survey(detection *d)
{
    const co_topo_probe *probe = d->probe;
    d->fam = -2;
    d->identity = 1;
    for (int k = 0; k < d->nworkers; k++) {
        int g = d->gpu_ids[k];
        d->identity = d->identity && g == k;
        if (d->used[g])
            continue;
        d->used[g] = 1;
        d->ndistinct++;
        int fg = family_of(probe->name[g]);
        d->mixed = d->mixed || (d->fam != -2 && d->fam != fg);
        d->fam = d->fam == -2 || d->fam == fg ? fg : -1; /* -1: unknown or mixed */
        d->pcie_card = d->pcie_card || is_pcie_card(probe->name[g]);
    }
    for (int a = 0; a < d->n; a++)
        for (int b = a + 1; b < d->n; b++)
            if (d->used[a] && d->used[b]) {
                d->npairs++;
                d->nonpeer += !peer(probe, a, b);
            }
    summary(probe, d->nworkers, d->used, d->ndistinct, d->sum, sizeof d->sum);
}

/* Rules 1 and 2: the built-in these GPUs are exactly (writing why), or NULL. */
static const char *detect_builtin(const detection *d, char *why, size_t whylen)
{
    if (d->fam >= 0 && !d->pcie_card && d->nonpeer == 0 && d->F.port > 0 &&
        d->ndistinct == d->nworkers && d->F.t->ngpus == d->nworkers) {
        if (why)
            snprintf(why, whylen, "%s, all pairs peer-accessible: %s", d->sum, d->src);
        return d->src;
    }
    if (d->dgx1 && d->nworkers == 8 && d->identity) {
        if (why)
            snprintf(why, whylen, "%s, peer matrix of the DGX-1 cube mesh: %s", d->sum, d->src);
        return d->src;
    }
    return NULL;
}

/* Rule 3: choose how a generated topology links the workers (d->mode). */
static void detect_mode(detection *d)
{
    d->mode = d->fam < 0 || d->pcie_card ? M_BRIDGE
            : d->dgx1                    ? M_DGX1
            : d->nonpeer == 0            ? (d->F.port > 0 ? M_SWITCH : M_MESH)
                                         : M_PARTIAL;
    d->peer_bw = d->F.port > 0 ? d->F.port : d->F.nvlink;
    d->one_gpu = d->ndistinct == 1 && d->nworkers > 1;
    d->figs = d->src ? d->src : fallback()->name;
}

/* The one-line account of a generated topology, into d->line. */
static void detect_describe(detection *d)
{
    const char *sum = d->sum, *figs = d->figs;
    char *line = d->line;
    size_t m = 0;
    line[0] = 0;
    if (d->one_gpu)
        m = (size_t)snprintf(line, sizeof d->line,
                             "%s: detected, copies between workers inside GPU %d's HBM at hbm/2 "
                             "(%.9g GB/s, shared)", sum, d->gpu_ids[0], d->F.hbm / 2e9);
    else if (d->ndistinct == 1)
        m = (size_t)snprintf(line, sizeof d->line, "%s: detected, one GPU (%s figures)", sum, figs);
    else if (d->mode == M_BRIDGE)
        m = (size_t)snprintf(line, sizeof d->line,
                             "%s: %s: detected, every copy between GPUs via one %s bridge "
                             "(%.9g GB/s, shared), %s figures", sum,
                             d->mixed     ? "mixed GPUs, conservative defaults"
                             : d->fam < 0 ? "unknown GPU, conservative defaults"
                                          : "PCIe cards, no NVSwitch assumed",
                             d->pcie_gen, d->pcie / 1e9, figs);
    else if (d->mode == M_DGX1)
        m = (size_t)snprintf(line, sizeof d->line,
                             "%s of a DGX-1 (peer matrix of its cube mesh): detected, "
                             "the %s links between them", sum, d->src);
    else if (d->mode == M_SWITCH)
        m = (size_t)snprintf(line, sizeof d->line,
                             "%s, all pairs peer-accessible: detected, switch-like, "
                             "port %.9g GB/s per GPU (%s figures)", sum, d->F.port / 1e9, figs);
    else if (d->mode == M_MESH)
        m = (size_t)snprintf(line, sizeof d->line,
                             "%s, all pairs peer-accessible: detected, a %.9g GB/s link "
                             "(one NVLink) per pair (%s figures)", sum, d->F.nvlink / 1e9, figs);
    else
        m = (size_t)snprintf(line, sizeof d->line,
                             "%s, %d of %d pairs not peer-accessible: detected, those via %s "
                             "(%.9g GB/s, shared), %.9g GB/s links for the others (%s figures)",
                             sum, d->nonpeer, d->npairs, d->pcie_gen, d->pcie / 1e9,
                             d->peer_bw / 1e9, figs);
    if (!d->one_gpu && d->ndistinct < d->nworkers && m < sizeof d->line)
        snprintf(line + m, sizeof d->line - m, "; workers sharing a GPU: a %.9g GB/s link (hbm/2)",
                 d->F.hbm / 2e9);
}

/* The comments and figures that open the generated text. */
static void detect_write_header(const detection *d, FILE *f)
{
    int sw = d->mode == M_SWITCH;
    fprintf(f, "# Detected by einrun from a GPU probe: %s\n", d->line);
    fprintf(f, "# Worker k runs on GPU:");
    for (int k = 0; k < d->nworkers; k++)
        fprintf(f, "%s %d", k && k % 16 == 0 ? "\n#  " : "", d->gpu_ids[k]);
    fprintf(f, "\n");
    if (d->ndistinct < d->nworkers && !d->one_gpu)
        fprintf(f, "# Workers on one GPU: a link per pair at hbm/2 (a copy reads and writes the\n"
                   "# same HBM). xp_topo cannot say these links share that HBM%s, nor that\n"
                   "# such workers share it for aggregation%s.\n",
                sw ? " or bypass the\n# NVLink port (here they cross it and are capped by it)" : "",
                sw ? " and share one NVLink port" : "");
    if (d->one_gpu)
        fprintf(f, "# All workers on one GPU: their copies share its HBM at hbm/2 (each byte read\n"
                   "# and written there). xp_topo cannot say that they also share it for\n"
                   "# aggregation: each worker aggregates at the whole hbm here.\n");
    fprintf(f, "name detected\ngpus %d\n", d->nworkers);
    put_bw(f, "hbm ", d->F.hbm);
    if (d->fam >= 0 && d->F.peak > 0)
        fprintf(f, "peak %.9g TFLOP/s\n", d->F.peak / 1e12);
    if (sw && d->ndistinct > 1)
        put_bw(f, "port ", d->F.port);
}

/* The link lines between workers, then how the rest of the copies go. */
static void detect_write_links(const detection *d, FILE *f)
{
    char line[64];
    int via_pcie = 0, n = d->n, mode = d->mode;
    for (int j = 0; j < d->nworkers; j++)
        for (int k = j + 1; k < d->nworkers; k++) {
            int a = d->gpu_ids[j], b = d->gpu_ids[k];
            double bw = 0;
            if (a == b)
                bw = d->one_gpu ? 0 : d->F.hbm / 2;
            else if (mode == M_DGX1)
                bw = d->F.t->link[a * n + b];
            else if (mode == M_MESH || (mode == M_PARTIAL && peer(d->probe, a, b)))
                bw = d->peer_bw;
            if (bw > 0) {
                snprintf(line, sizeof line, "link %d %d ", j, k);
                put_bw(f, line, bw);
            } else if (a != b && mode != M_SWITCH) {
                via_pcie = 1;
            }
        }
    if (d->one_gpu) {
        fprintf(f, "shared hbm-gpu%d ", d->gpu_ids[0]);
        put_bw(f, "", d->F.hbm / 2);
        fprintf(f, "rest via hbm-gpu%d\n", d->gpu_ids[0]);
    } else if (via_pcie) {
        fprintf(f, "# %s: %.9g GB/s per direction, one bridge all such copies share.\n",
                d->pcie_gen, d->pcie / 1e9);
        put_bw(f, "shared pcie ", d->pcie);
        fprintf(f, "rest via pcie\n");
    } else {
        fprintf(f, "rest %s\n", mode == M_SWITCH ? "direct" : "none");
    }
}

/* Write the generated topology text and parse it into *out. */
static int detect_generate(const detection *d, xp_topology **out, ein_error *err)
{
    char *text = NULL;
    size_t textlen = 0;
    FILE *f = open_memstream(&text, &textlen);
    if (!f)
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    detect_write_header(d, f);
    detect_write_links(d, f);
    int rc;
    if (fclose(f) != 0 || !text)
        rc = ein_fail(err, EIN_ENOMEM, "out of memory");
    else
        rc = xp_topo_parse(text, "detected", out, err);
    free(text);
    return rc;
}

int co_topo_detect(const co_topo_probe *probe, const int *gpu_ids, int nworkers,
                   xp_topology **out, char *why, size_t whylen, ein_error *err)
{
    int n = probe->ngpus, rc = 0;
    if (nworkers < 1 || nworkers > CO_TOPO_MAX_GPUS)
        return ein_fail(err, EIN_EINVAL, "%d workers: expected 1 to %d", nworkers, CO_TOPO_MAX_GPUS);
    for (int k = 0; k < nworkers; k++)
        if (gpu_ids[k] < 0 || gpu_ids[k] >= n)
            return ein_fail(err, EIN_EINVAL, "GPU %d is not in the probe, which saw %d GPU%s (0..%d)",
                            gpu_ids[k], n, n == 1 ? "" : "s", n - 1);
    detection *d = calloc(1, sizeof *d);
    if (!d || !(d->used = calloc((size_t)n, 1))) {
        free(d);
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    }
    d->probe = probe;
    d->gpu_ids = gpu_ids;
    d->nworkers = nworkers;
    d->n = n;
    detect_survey(d);
    /* Unknown GPUs get the fallback machine's figures (the smallest). */
    int fam = d->fam;
    const xp_machine *fb = fallback(), *m = fam >= 0 ? &xp_machines[fam] : fb;
    if ((rc = figures_load(m->name, &d->F, err)) < 0 ||
        (rc = figures_load(fb->name, &d->V, err)) < 0)
        goto done;
    d->pcie = m->pcie > 0 ? m->pcie : fam >= 0 ? d->F.pcie : d->V.pcie;
    d->pcie_gen = m->pcie_gen;
    d->src = fam >= 0 ? m->name : NULL;
    d->dgx1 = is_mesh(fam) && is_dgx1(probe, fam, d->F.t);
    detect_mode(d);
    const char *builtin = detect_builtin(d, why, whylen);
    if (builtin) {
        rc = xp_topo_parse(xp_topo_builtin_text(builtin), builtin, out, err);
        goto done;
    }
    detect_describe(d);
    if (why)
        snprintf(why, whylen, "%s", d->line);
    rc = detect_generate(d, out, err);
done:
    xp_topo_free(d->F.t);
    xp_topo_free(d->V.t);
    free(d->used);
    free(d);
    return rc;
}
