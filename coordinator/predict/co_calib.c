/* coordinator/predict/co_calib.c — calibration tables (format in co_calib.h). */
#include "coordinator/predict/co_calib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/io/ein_file.h"
#include "planner/pl_optimize.h"

static const char *const work_names[CO_WORK_COUNT] = {"gemm",  "attention", "elementwise",
                                                      "copy",  "unary",     "layout"};

const char *co_work_name(co_work w)
{
    return w >= 0 && w < CO_WORK_COUNT ? work_names[w] : "?";
}

double co_calib_eff(const co_calib *c, co_work w, double size)
{
    int n = c->npts[w];
    const double *s = c->size[w], *e = c->eff[w];
    if (n == 0)
        return 1.0;
    if (!(size > s[0]))
        return e[0];
    if (size >= s[n - 1])
        return e[n - 1];
    int i = 1;
    while (s[i] < size)
        i++;
    double f = (log(size) - log(s[i - 1])) / (log(s[i]) - log(s[i - 1]));
    return e[i - 1] + f * (e[i] - e[i - 1]);
}

static int parse_num(const char *s, double *v)
{
    char *end;
    double x = strtod(s, &end);
    if (!*s || *end || !isfinite(x))
        return -1;
    *v = x;
    return 0;
}

static int parse_time(const char *num, const char *unit, double *v)
{
    double x;
    if (parse_num(num, &x) < 0 || x < 0 || x > 1e6)
        return -1;
    if (strcmp(unit, "s") == 0)
        *v = x;
    else if (strcmp(unit, "ms") == 0)
        *v = x * 1e-3;
    else if (strcmp(unit, "us") == 0)
        *v = x * 1e-6;
    else if (strcmp(unit, "ns") == 0)
        *v = x * 1e-9;
    else
        return -1;
    return 0;
}

static int parse_rate(const char *num, const char *unit, double *v)
{
    double x;
    if (parse_num(num, &x) < 0 || !(x > 0) || x > 1e6)
        return -1;
    if (strcmp(unit, "TB/s") == 0)
        *v = x * 1e12;
    else if (strcmp(unit, "GB/s") == 0)
        *v = x * 1e9;
    else if (strcmp(unit, "MB/s") == 0)
        *v = x * 1e6;
    else
        return -1;
    return 0;
}

/* The statements that take a time, in this order. */
enum { T_OVERHEAD, T_LATENCY, T_ITERATION, T_NOTIFY, T_LATENCY_BUSY, T_NOTIFY_BUSY, T_COUNT };
static const char *const time_names[T_COUNT] = {"overhead", "latency",      "iteration",
                                                "notify",   "latency-busy", "notify-busy"};

static int time_stmt(const char *word)
{
    for (int t = 0; t < T_COUNT; t++)
        if (strcmp(word, time_names[t]) == 0)
            return t;
    return -1;
}

static double *time_field(co_calib *c, int t)
{
    double *f[T_COUNT] = {&c->overhead, &c->latency,      &c->iteration,
                          &c->notify,   &c->latency_busy, &c->notify_busy};
    return f[t];
}

int co_calib_parse(const char *text, const char *file, co_calib *out, ein_error *err)
{
    co_calib c;
    memset(&c, 0, sizeof c);
    int line = 0, t;
    unsigned seen = 0;
    const char *p = text;
    file = file ? file : "<calibration>";
    while (*p) {
        char buf[512];
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        line++;
        if (len >= sizeof buf)
            return ein_fail_at(err, EIN_EPARSE, file, line, 1,
                               "line too long; expected at most %d bytes", (int)sizeof buf - 1);
        memcpy(buf, p, len);
        buf[len] = 0;
        p += len + (nl ? 1 : 0);
        char *hash = strchr(buf, '#');
        if (hash)
            *hash = 0;
        char *w[8], *save = NULL;
        int nw = 0;
        for (char *tok = strtok_r(buf, " \t\r", &save); tok && nw < 8;
             tok = strtok_r(NULL, " \t\r", &save))
            w[nw++] = tok;
        if (nw == 0)
            continue;
        int col = (int)(w[0] - buf) + 1;
#define BAD(...) return ein_fail_at(err, EIN_EPARSE, file, line, col, __VA_ARGS__)
        if (strcmp(w[0], "name") == 0) {
            if (nw != 2 || strlen(w[1]) >= sizeof c.name)
                BAD("bad 'name' statement; expected: name NAME (one word under 64 bytes)");
            strcpy(c.name, w[1]);
        } else if (strcmp(w[0], "cores") == 0) {
            double x;
            if (nw != 2 || parse_num(w[1], &x) < 0 || x < 0 || x > 65536)
                BAD("bad 'cores' statement; expected: cores N (0..65536)");
            c.cores = x;
        } else if ((t = time_stmt(w[0])) >= 0) {
            if (nw != 3 || parse_time(w[1], w[2], time_field(&c, t)) < 0)
                BAD("bad '%s' statement; expected: %s TIME UNIT (s, ms, us or ns; 0..1e6)", w[0],
                    w[0]);
            seen |= 1u << t;
        } else if (strcmp(w[0], "copy") == 0) {
            if (nw != 3 || parse_rate(w[1], w[2], &c.copy_bw) < 0)
                BAD("bad 'copy' statement; expected: copy RATE UNIT (TB/s, GB/s or MB/s)");
        } else if (strcmp(w[0], "gemm-operands") == 0) {
            if (nw != 3 || parse_rate(w[1], w[2], &c.gemm_operand_bw) < 0)
                BAD("bad 'gemm-operands' statement; expected: gemm-operands RATE UNIT (TB/s, GB/s "
                    "or MB/s)");
        } else if (strcmp(w[0], "eff") == 0) {
            int k = -1;
            double size, eff;
            for (int i = 0; nw == 4 && i < CO_WORK_COUNT; i++)
                if (strcmp(w[1], work_names[i]) == 0)
                    k = i;
            if (nw != 4 || k < 0 || parse_num(w[2], &size) < 0 || !(size >= 1) ||
                size > 1e18 || parse_num(w[3], &eff) < 0 || !(eff > 0) || eff > 1000)
                BAD("bad 'eff' statement; expected: eff gemm|attention|elementwise|copy|unary|layout SIZE "
                    "EFFICIENCY (SIZE 1..1e18, EFFICIENCY in (0, 1000])");
            if (c.npts[k] == CO_CALIB_MAX_POINTS)
                BAD("too many points for %s; expected at most %d", w[1], CO_CALIB_MAX_POINTS);
            if (c.npts[k] > 0 && !(size > c.size[k][c.npts[k] - 1]))
                BAD("eff %s %g: sizes must increase; expected a size above %g", w[1], size,
                    c.size[k][c.npts[k] - 1]);
            c.size[k][c.npts[k]] = size;
            c.eff[k][c.npts[k]++] = eff;
        } else {
            BAD("unknown statement '%s'; expected name, cores, overhead, latency, iteration, "
                "notify, latency-busy, notify-busy, copy, gemm-operands or eff", w[0]);
        }
#undef BAD
    }
    /* Absent busy figures: the machine is no slower oversubscribed. */
    if (!(seen & 1u << T_LATENCY_BUSY))
        c.latency_busy = c.latency;
    if (!(seen & 1u << T_NOTIFY_BUSY))
        c.notify_busy = c.notify;
    *out = c;
    return 0;
}

/* The built-in tables are the machines' own (topologies/NAME.topo and
 * topologies/NAME.cal, xp_topo.h). */
const char *co_calib_builtin_text(const char *name)
{
    return xp_machine_calibration_text(name);
}

int co_calib_load(const char *name_or_path, co_calib *out, ein_error *err)
{
    const char *text = co_calib_builtin_text(name_or_path);
    if (text)
        return co_calib_parse(text, name_or_path, out, err);
    char *buf = NULL;
    size_t len = 0;
    int rc = ein_file_read_all(name_or_path, 1 << 20, "calibration", &buf, &len, err);
    if (rc < 0)
        return rc;
    rc = co_calib_parse(buf, name_or_path, out, err);
    free(buf);
    return rc;
}

void co_calib_write(const co_calib *c, FILE *f)
{
    fprintf(f, "name %s\n", c->name[0] ? c->name : "unnamed");
    if (c->cores > 0)
        fprintf(f, "cores %.4g\n", c->cores);
    fprintf(f, "overhead %.6g us\nlatency %.6g us\niteration %.6g us\n", c->overhead * 1e6,
            c->latency * 1e6, c->iteration * 1e6);
    if (c->notify > 0)
        fprintf(f, "notify %.6g us\n", c->notify * 1e6);
    if (c->latency_busy != c->latency)
        fprintf(f, "latency-busy %.6g us\n", c->latency_busy * 1e6);
    if (c->notify_busy != c->notify)
        fprintf(f, "notify-busy %.6g us\n", c->notify_busy * 1e6);
    if (c->copy_bw > 0)
        fprintf(f, "copy %.6g GB/s\n", c->copy_bw / 1e9);
    if (c->gemm_operand_bw > 0)
        fprintf(f, "gemm-operands %.6g GB/s\n", c->gemm_operand_bw / 1e9);
    for (int k = 0; k < CO_WORK_COUNT; k++)
        for (int i = 0; i < c->npts[k]; i++)
            fprintf(f, "eff %s %.6g %.6g\n", work_names[k], c->size[k][i], c->eff[k][i]);
}

void co_calib_objective_rates(const xp_topology *topo, const co_calib *cal, pl_plan_opts *o)
{
    double peak = topo->peak > 0 ? topo->peak : 1e15;
    o->peak_flops = peak * co_calib_eff(cal, CO_WORK_GEMM, 1e9);
    o->hbm_bw = topo->hbm * co_calib_eff(cal, CO_WORK_ELEMENTWISE, 1e7);
    o->gemm_operand_bw = cal->gemm_operand_bw;
    double net = INFINITY;
    int res[4], n = topo->ngpus > 1 ? xp_topo_route(topo, 0, 1, res, NULL) : 0;
    for (int k = 0; k < n; k++)
        if (xp_topo_res_bw(topo, res[k]) < net)
            net = xp_topo_res_bw(topo, res[k]);
    if (!(net < INFINITY))
        net = topo->hbm;
    if (cal->copy_bw > 0 && cal->copy_bw < net)
        net = cal->copy_bw;
    o->net_bw = net * co_calib_eff(cal, CO_WORK_COPY, 1e7);
    if (topo->nodes > 1) { /* bytes between hosts at the NIC rate */
        o->host_gpus = topo->local;
        o->nic_bw = topo->nic * co_calib_eff(cal, CO_WORK_COPY, 1e7);
    }
}
