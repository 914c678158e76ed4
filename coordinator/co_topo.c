/* coordinator/co_topo.c — probe text and topology detection (co_topo.h). */
#include "coordinator/co_topo.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/ein_file.h"
#include "common/ein_vec.h"

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

int co_topo_probe_parse(const char *text, const char *file, co_topo_probe **out,
                        ein_error *err)
{
    co_topo_probe *p = calloc(1, sizeof *p);
    int rc = 0, line = 0, version = 0, npeers = 0, cap = 0;
    const char *s = text;
    if (!p)
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    file = file ? file : "<probe>";
    while (*s) {
        char buf[512];
        const char *nl = strchr(s, '\n');
        size_t len = nl ? (size_t)(nl - s) : strlen(s);
        int col = 1;
        line++;
#define BAD(...) do { rc = ein_fail_at(err, EIN_EPARSE, file, line, col, __VA_ARGS__); goto fail; } while (0)
        if (len >= sizeof buf)
            BAD("line longer than %zu characters", sizeof buf - 1);
        memcpy(buf, s, len);
        buf[len] = 0;
        s += len + (nl ? 1 : 0);
        if (len && buf[len - 1] == '\r')
            buf[--len] = 0;
        for (size_t i = 0; i < len; i++)
            if ((unsigned char)buf[i] < 0x20 && buf[i] != '\t') {
                col = (int)i + 1;
                BAD("control character 0x%02x; a probe is text", (unsigned char)buf[i]);
            }
        char *w[6], *rest = NULL;
        int nw = 0;
        for (char *c = buf; *c && nw < 6;) {
            while (*c == ' ' || *c == '\t')
                c++;
            if (!*c)
                break;
            if (nw == 2)
                rest = c; /* gpu ID NAME: the name is the rest of the line */
            w[nw++] = c;
            while (*c && *c != ' ' && *c != '\t')
                c++;
            if (*c)
                *c++ = 0;
        }
        if (nw == 0 || w[0][0] == '#')
            continue;
        col = (int)(w[0] - buf) + 1;
        if (!version && strcmp(w[0], "einprobe") != 0)
            BAD("expected 'einprobe 1' first (the output of einworker-cuda --probe)");
        if (strcmp(w[0], "einprobe") == 0) {
            if (version)
                BAD("'einprobe' given twice");
            if (nw != 2)
                BAD("expected: einprobe VERSION");
            if (strcmp(w[1], "1") != 0)
                BAD("probe format version '%s'; this einrun reads version 1", w[1]);
            version = 1;
        } else if (strcmp(w[0], "gpu") == 0) {
            int id;
            if (nw < 3)
                BAD("expected: gpu ID NAME");
            if (p->access)
                BAD("gpu line after the peer lines");
            if (parse_int(w[1], 0, CO_TOPO_MAX_GPUS - 1, &id) < 0 || id != p->ngpus)
                BAD("expected gpu %d next (ids in order from 0), got '%s'", p->ngpus, w[1]);
            /* Undo the tokenizer's cuts inside the name, trim its end. */
            char *end = buf + len;
            for (char *c = rest; c < end; c++)
                if (!*c)
                    *c = ' ';
            while (end > rest && (end[-1] == ' ' || end[-1] == '\t'))
                *--end = 0;
            if (strlen(rest) >= CO_TOPO_NAME_MAX)
                BAD("GPU name longer than %d characters", CO_TOPO_NAME_MAX - 1);
            if (ein_vec_reserve(&p->name, &cap, (int64_t)p->ngpus + 1, sizeof *p->name) < 0)
                BAD("out of memory");
            memcpy(p->name[p->ngpus++], rest, strlen(rest) + 1);
        } else if (strcmp(w[0], "peer") == 0) {
            int a, b, acc, rank;
            if (nw != 5)
                BAD("expected: peer A B ACCESS PERF-RANK");
            if (!p->ngpus)
                BAD("peer line before any gpu line");
            if (!p->access && probe_matrices(p) < 0)
                BAD("out of memory");
            if (parse_int(w[1], 0, p->ngpus - 1, &a) < 0 || parse_int(w[2], 0, p->ngpus - 1, &b) < 0)
                BAD("peer %s %s: expected GPU ids from 0 to %d", w[1], w[2], p->ngpus - 1);
            if (a == b)
                BAD("peer %d %d: expected two distinct GPUs", a, b);
            if (strcmp(w[3], "0") != 0 && strcmp(w[3], "1") != 0)
                BAD("peer %d %d: expected ACCESS 0 or 1, got '%s'", a, b, w[3]);
            if (parse_int(w[4], -1000000, 1000000, &rank) < 0)
                BAD("peer %d %d: expected an integer PERF-RANK, got '%s'", a, b, w[4]);
            acc = w[3][0] == '1';
            size_t k = (size_t)a * (size_t)p->ngpus + (size_t)b;
            if (p->access[k] != 0xff)
                BAD("peer %d %d given twice", a, b);
            p->access[k] = (unsigned char)acc;
            p->rank[k] = rank;
            npeers++;
        } else {
            BAD("unknown statement '%s' (expected einprobe, gpu or peer)", w[0]);
        }
#undef BAD
    }
    if (!version) {
        rc = ein_fail_at(err, EIN_EPARSE, file, line ? line : 1, 1,
                         "empty probe: expected 'einprobe 1' (the output of einworker-cuda --probe)");
        goto fail;
    }
    if (!p->ngpus) {
        rc = ein_fail_at(err, EIN_EPARSE, file, line, 1, "no 'gpu' line: the probe saw no GPU");
        goto fail;
    }
    if (!p->access && probe_matrices(p) < 0) {
        rc = ein_fail(err, EIN_ENOMEM, "out of memory");
        goto fail;
    }
    if (npeers != p->ngpus * (p->ngpus - 1)) {
        for (int a = 0; a < p->ngpus; a++)
            for (int b = 0; b < p->ngpus; b++)
                if (a != b && p->access[a * p->ngpus + b] == 0xff) {
                    rc = ein_fail_at(err, EIN_EPARSE, file, line, 1,
                                     "no 'peer %d %d' line (expected one for each of the %d "
                                     "ordered pairs of GPUs)", a, b, p->ngpus * (p->ngpus - 1));
                    goto fail;
                }
    }
    for (int a = 0; a < p->ngpus; a++)
        p->access[a * p->ngpus + a] = 1;
    *out = p;
    return 0;
fail:
    co_topo_probe_free(p);
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

typedef struct family {
    const char *substr;   /* in the CUDA device name */
    const char *builtin;  /* the topology text its figures come from */
    const char *pcie_gen; /* its host link */
    double pcie;          /* bytes/s; 0: the built-in's `shared pcie` */
} family;

/* First match wins. "GB200" also contains "B200" (same figures); "GH200"
 * (Grace Hopper) takes the H200's. */
static const family families[] = {
    {"GB200", "gb200-nvl72", "PCIe Gen5 x16", CO_TOPO_PCIE_GEN5},
    {"B200", "gb200-nvl72", "PCIe Gen5 x16", CO_TOPO_PCIE_GEN5},
    {"H200", "hgx-h200", "PCIe Gen5 x16", CO_TOPO_PCIE_GEN5},
    {"H100", "dgx-h100", "PCIe Gen5 x16", CO_TOPO_PCIE_GEN5},
    {"A100", "dgx-a100", "PCIe Gen4 x16", CO_TOPO_PCIE_GEN4},
    {"V100", "dgx-v100", "PCIe Gen3 x16", 0},
};
#define NFAMILIES ((int)(sizeof families / sizeof *families))

static int family_of(const char *name)
{
    for (int f = 0; f < NFAMILIES; f++)
        if (strstr(name, families[f].substr))
            return f;
    return -1;
}

static int is_v100(int f)
{
    return f >= 0 && strcmp(families[f].builtin, "dgx-v100") == 0;
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

/* 8 V100 whose peer matrix is the NVLink adjacency of the dgx-v100 text. */
static int is_dgx1(const co_topo_probe *p, const xp_topology *v100)
{
    if (p->ngpus != v100->ngpus)
        return 0;
    for (int a = 0; a < p->ngpus; a++) {
        if (!is_v100(family_of(p->name[a])))
            return 0;
        for (int b = 0; b < p->ngpus; b++)
            if (a != b && peer(p, a, b) != (v100->link[a * p->ngpus + b] > 0))
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
    unsigned char *used = calloc((size_t)n, 1);
    char *text = NULL, sum[256], line[512];
    size_t textlen = 0;
    figures F = {0}, V = {0};
    FILE *f = NULL;
    if (!used)
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    int ndistinct = 0, fam = -2, mixed = 0, pcie_card = 0, npairs = 0, nonpeer = 0, identity = 1;
    for (int k = 0; k < nworkers; k++) {
        int g = gpu_ids[k];
        identity = identity && g == k;
        if (used[g])
            continue;
        used[g] = 1;
        ndistinct++;
        int fg = family_of(probe->name[g]);
        mixed = mixed || (fam != -2 && fam != fg);
        fam = fam == -2 || fam == fg ? fg : -1; /* -1: unknown or mixed */
        pcie_card = pcie_card || is_pcie_card(probe->name[g]);
    }
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++)
            if (used[a] && used[b]) {
                npairs++;
                nonpeer += !peer(probe, a, b);
            }
    summary(probe, nworkers, used, ndistinct, sum, sizeof sum);
    /* Unknown GPUs get the smallest figures we have: the V100's. */
    if ((rc = figures_load(fam >= 0 ? families[fam].builtin : "dgx-v100", &F, err)) < 0 ||
        (rc = figures_load("dgx-v100", &V, err)) < 0)
        goto done;
    double pcie = fam >= 0 && families[fam].pcie > 0 ? families[fam].pcie : V.pcie;
    const char *pcie_gen = fam >= 0 ? families[fam].pcie_gen : "PCIe Gen3 x16";
    const char *src = fam >= 0 ? families[fam].builtin : NULL;

    /* Rules 1 and 2: a built-in exactly. */
    int dgx1 = is_v100(fam) && is_dgx1(probe, V.t);
    if (fam >= 0 && !pcie_card && nonpeer == 0 && F.port > 0 && ndistinct == nworkers &&
        F.t->ngpus == nworkers) {
        if (why)
            snprintf(why, whylen, "%s, all pairs peer-accessible: %s", sum, src);
        rc = xp_topo_parse(xp_topo_builtin_text(src), src, out, err);
        goto done;
    }
    if (dgx1 && nworkers == 8 && identity) {
        if (why)
            snprintf(why, whylen, "%s, peer matrix of the DGX-1 cube mesh: dgx-v100", sum);
        rc = xp_topo_parse(xp_topo_builtin_text("dgx-v100"), "dgx-v100", out, err);
        goto done;
    }

    /* Rule 3: generated. */
    int mode = fam < 0 || pcie_card ? M_BRIDGE
             : dgx1                 ? M_DGX1
             : nonpeer == 0         ? (F.port > 0 ? M_SWITCH : M_MESH)
                                    : M_PARTIAL;
    double peer_bw = F.port > 0 ? F.port : F.nvlink; /* a peer pair's link */
    int one_gpu = ndistinct == 1 && nworkers > 1;
    const char *figs = src ? src : "dgx-v100";
    size_t m = 0;
    line[0] = 0;
    if (one_gpu)
        m = (size_t)snprintf(line, sizeof line,
                             "%s: detected, copies between workers inside GPU %d's HBM at hbm/2 "
                             "(%.9g GB/s, shared)", sum, gpu_ids[0], F.hbm / 2e9);
    else if (ndistinct == 1)
        m = (size_t)snprintf(line, sizeof line, "%s: detected, one GPU (%s figures)", sum, figs);
    else if (mode == M_BRIDGE)
        m = (size_t)snprintf(line, sizeof line,
                             "%s: %s: detected, every copy between GPUs via one %s bridge "
                             "(%.9g GB/s, shared), %s figures", sum,
                             mixed     ? "mixed GPUs, conservative defaults"
                             : fam < 0 ? "unknown GPU, conservative defaults"
                                       : "PCIe cards, no NVSwitch assumed",
                             pcie_gen, pcie / 1e9, figs);
    else if (mode == M_DGX1)
        m = (size_t)snprintf(line, sizeof line,
                             "%s of a DGX-1 (peer matrix of its cube mesh): detected, "
                             "the dgx-v100 links between them", sum);
    else if (mode == M_SWITCH)
        m = (size_t)snprintf(line, sizeof line,
                             "%s, all pairs peer-accessible: detected, switch-like, "
                             "port %.9g GB/s per GPU (%s figures)", sum, F.port / 1e9, figs);
    else if (mode == M_MESH)
        m = (size_t)snprintf(line, sizeof line,
                             "%s, all pairs peer-accessible: detected, a %.9g GB/s link "
                             "(one NVLink) per pair (%s figures)", sum, F.nvlink / 1e9, figs);
    else
        m = (size_t)snprintf(line, sizeof line,
                             "%s, %d of %d pairs not peer-accessible: detected, those via %s "
                             "(%.9g GB/s, shared), %.9g GB/s links for the others (%s figures)",
                             sum, nonpeer, npairs, pcie_gen, pcie / 1e9, peer_bw / 1e9, figs);
    if (!one_gpu && ndistinct < nworkers && m < sizeof line)
        snprintf(line + m, sizeof line - m, "; workers sharing a GPU: a %.9g GB/s link (hbm/2)",
                 F.hbm / 2e9);
    if (why)
        snprintf(why, whylen, "%s", line);

    if (!(f = open_memstream(&text, &textlen))) {
        rc = ein_fail(err, EIN_ENOMEM, "out of memory");
        goto done;
    }
    fprintf(f, "# Detected by einrun from a GPU probe: %s\n", line);
    fprintf(f, "# Worker k runs on GPU:");
    for (int k = 0; k < nworkers; k++)
        fprintf(f, "%s %d", k && k % 16 == 0 ? "\n#  " : "", gpu_ids[k]);
    fprintf(f, "\n");
    if (ndistinct < nworkers && !one_gpu)
        fprintf(f, "# Workers on one GPU: a link per pair at hbm/2 (a copy reads and writes the\n"
                   "# same HBM). xp_topo cannot say these links share that HBM%s, nor that\n"
                   "# such workers share it for aggregation%s.\n",
                mode == M_SWITCH ? " or bypass the\n# NVLink port (here they cross it and are capped by it)" : "",
                mode == M_SWITCH ? " and share one NVLink port" : "");
    if (one_gpu)
        fprintf(f, "# All workers on one GPU: their copies share its HBM at hbm/2 (each byte read\n"
                   "# and written there). xp_topo cannot say that they also share it for\n"
                   "# aggregation: each worker aggregates at the whole hbm here.\n");
    fprintf(f, "name detected\ngpus %d\n", nworkers);
    put_bw(f, "hbm ", F.hbm);
    if (fam >= 0 && F.peak > 0)
        fprintf(f, "peak %.9g TFLOP/s\n", F.peak / 1e12);
    if (mode == M_SWITCH && ndistinct > 1)
        put_bw(f, "port ", F.port);
    int via_pcie = 0;
    for (int j = 0; j < nworkers; j++)
        for (int k = j + 1; k < nworkers; k++) {
            int a = gpu_ids[j], b = gpu_ids[k];
            double bw = 0;
            if (a == b)
                bw = one_gpu ? 0 : F.hbm / 2;
            else if (mode == M_DGX1)
                bw = V.t->link[a * n + b];
            else if (mode == M_MESH || (mode == M_PARTIAL && peer(probe, a, b)))
                bw = peer_bw;
            if (bw > 0) {
                snprintf(line, sizeof line, "link %d %d ", j, k);
                put_bw(f, line, bw);
            } else if (a != b && mode != M_SWITCH) {
                via_pcie = 1;
            }
        }
    if (one_gpu) {
        fprintf(f, "shared hbm-gpu%d ", gpu_ids[0]);
        put_bw(f, "", F.hbm / 2);
        fprintf(f, "rest via hbm-gpu%d\n", gpu_ids[0]);
    } else if (via_pcie) {
        fprintf(f, "# %s: %.9g GB/s per direction, one bridge all such copies share.\n",
                pcie_gen, pcie / 1e9);
        put_bw(f, "shared pcie ", pcie);
        fprintf(f, "rest via pcie\n");
    } else {
        fprintf(f, "rest %s\n", mode == M_SWITCH ? "direct" : "none");
    }
    if (fclose(f) != 0 || !text) {
        f = NULL;
        rc = ein_fail(err, EIN_ENOMEM, "out of memory");
        goto done;
    }
    f = NULL;
    rc = xp_topo_parse(text, "detected", out, err);
done:
    if (f)
        fclose(f);
    free(text);
    free(used);
    xp_topo_free(F.t);
    xp_topo_free(V.t);
    return rc;
}
