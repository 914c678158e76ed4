/* coordinator/predict/co_sim_print.c — what the plan simulator found, for people and
 * tools: the memory check, the text report, the JSON and the Chrome trace
 * (co_sim.h). */
#include "coordinator/predict/co_sim.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/ir/ein_einsum.h"
#include "common/io/ein_json.h"
#include "common/ir/ein_kernel_cost.h"
#include "common/base/ein_vec.h"

#define CO_SIM_SHOW 12 /* critical-path groups printed at each end */

static void bytes_text(double b, char *buf, size_t len)
{
    if (b >= 1e9)
        snprintf(buf, len, "%.2f GB", b / 1e9);
    else if (b >= 1e6)
        snprintf(buf, len, "%.2f MB", b / 1e6);
    else if (b >= 1e3)
        snprintf(buf, len, "%.1f kB", b / 1e3);
    else
        snprintf(buf, len, "%.0f B", b);
}

/* The operator a buffer belongs to: the first instruction writing it. */
static const char *buffer_op(const ein_program *p, int b)
{
    for (int i = 0; i < p->ninstrs; i++)
        if (p->instrs[i].dst == b)
            return p->instrs[i].op;
    return "?";
}

int co_sim_check_memory(ein_program *const *progs, const co_sim_result *r,
                        const xp_topology *topo, ein_error *err)
{
    if (!(topo->memory > 0))
        return 0;
    for (int d = 0; d < r->ndev; d++) {
        if (!((double)r->dev[d].peak > topo->memory))
            continue;
        char peak[32], cap[32], big[512] = "";
        size_t n = 0;
        bytes_text((double)r->dev[d].peak, peak, sizeof peak);
        bytes_text(topo->memory, cap, sizeof cap);
        for (int k = 0; k < CO_SIM_LARGEST && r->dev[d].largest[k] >= 0 && n < sizeof big; k++) {
            char b[32];
            int id = r->dev[d].largest[k];
            bytes_text((double)progs[d]->buffers[id].bytes, b, sizeof b);
            n += (size_t)snprintf(big + n, sizeof big - n, "%s%s (%s)", k ? ", " : "",
                                  buffer_op(progs[d], id), b);
        }
        return ein_fail(err, EIN_ELIMIT,
                        "device %d: predicted peak memory %s exceeds its capacity %s (topology "
                        "%s); largest tensors alive: %s",
                        d, peak, cap, topo->name, big);
    }
    return 0;
}

static int is_comm(const ein_instr *ins)
{
    return ins->kind == EIN_I_COPY || ins->kind == EIN_I_NOTIFY;
}

int co_sim_print(ein_program *const *progs, const co_sim_result *r, const xp_topology *topo,
                 const co_calib *cal, FILE *f)
{
    fprintf(f, "predicted iteration on %s (calibration %s): %.3f ms (makespan %.3f ms + "
               "%.3f ms per iteration)\n",
            topo->name, cal->name, 1e3 * r->time, 1e3 * r->makespan, 1e3 * cal->iteration);
    fprintf(f, "%-7s %12s %12s %12s %14s %14s %14s\n", "device", "compute ms", "comm ms",
            "idle ms", "peak memory", "without reuse", "inputs");
    double before = 0, after = 0;
    for (int d = 0; d < r->ndev; d++) {
        char peak[32], unpl[32], ld[32];
        bytes_text((double)r->dev[d].peak, peak, sizeof peak);
        bytes_text((double)r->dev[d].unplanned, unpl, sizeof unpl);
        bytes_text((double)r->dev[d].loaded, ld, sizeof ld);
        fprintf(f, "%-7d %12.3f %12.3f %12.3f %14s %14s %14s\n", d, 1e3 * r->dev[d].compute,
                1e3 * r->dev[d].comm, 1e3 * r->dev[d].idle, peak, unpl, ld);
        if ((double)r->dev[d].peak > after)
            after = (double)r->dev[d].peak;
        if ((double)r->dev[d].unplanned > before)
            before = (double)r->dev[d].unplanned;
    }
    if (before > after) {
        char a[32], b[32], c[32];
        bytes_text(after, a, sizeof a);
        bytes_text(before, b, sizeof b);
        bytes_text(before - after, c, sizeof c);
        fprintf(f, "memory reuse: largest peak %s instead of %s (saves %s, %.0f%%)\n", a, b, c,
                100.0 * (before - after) / before);
    } else {
        fprintf(f, "memory reuse: none (every buffer in a place of its own)\n");
    }
    int top = 0;
    for (int d = 1; d < r->ndev; d++)
        if (r->dev[d].peak > r->dev[top].peak)
            top = d;
    char lv[32];
    bytes_text((double)r->dev[top].live, lv, sizeof lv);
    fprintf(f, "device %d's busiest instruction has %s alive; the largest:", top, lv);
    for (int k = 0; k < CO_SIM_LARGEST && r->dev[top].largest[k] >= 0; k++) {
        char b[32];
        int id = r->dev[top].largest[k];
        bytes_text((double)progs[top]->buffers[id].bytes, b, sizeof b);
        fprintf(f, "%s %s (%s)", k ? "," : "", buffer_op(progs[top], id), b);
    }
    fprintf(f, "\n");
    if (topo->memory > 0) {
        char cap[32];
        bytes_text(topo->memory, cap, sizeof cap);
        fprintf(f, "memory per device: %s\n", cap);
    }
    fprintf(f, "critical path: %d instructions, %.3f ms compute, %.3f ms communication, "
               "%.3f ms waiting\n",
            r->npath, 1e3 * r->path_compute, 1e3 * r->path_comm, 1e3 * r->path_wait);
    /* The path by operator: consecutive steps of one operator on one device
     * merged; a long path shows its first and last CO_SIM_SHOW groups. */
    int ngroups = 0;
    for (int k = 0; k < r->npath; ngroups++) {
        const co_sim_step *st = &r->path[k];
        const char *op = progs[st->device]->instrs[st->instr].op;
        int j = k + 1;
        while (j < r->npath && r->path[j].device == st->device &&
               strcmp(progs[st->device]->instrs[r->path[j].instr].op, op) == 0)
            j++;
        k = j;
    }
    for (int k = 0, gi = 0; k < r->npath; gi++) {
        const co_sim_step *st = &r->path[k];
        const ein_instr *ins = &progs[st->device]->instrs[st->instr];
        int j = k + 1, ncomm = is_comm(ins);
        while (j < r->npath && r->path[j].device == st->device &&
               strcmp(progs[st->device]->instrs[r->path[j].instr].op, ins->op) == 0) {
            ncomm += is_comm(&progs[st->device]->instrs[r->path[j].instr]);
            j++;
        }
        if (gi < CO_SIM_SHOW || gi >= ngroups - CO_SIM_SHOW)
            fprintf(f, "  %9.3f ms  device %d  %-20s %d instruction%s%s\n", 1e3 * st->start,
                    st->device, ins->op, j - k, j - k == 1 ? "" : "s",
                    ncomm ? " (with copies)" : "");
        else if (gi == CO_SIM_SHOW)
            fprintf(f, "  ... %d more operators on the path (--json lists every step)\n",
                    ngroups - 2 * CO_SIM_SHOW);
        k = j;
    }
    return ferror(f) ? EIN_EIO : 0;
}

int co_sim_json(ein_program *const *progs, const co_sim_result *r, const xp_topology *topo,
                const co_calib *cal, FILE *f)
{
    fprintf(f, "{\"topology\": ");
    ein_json_str(f, topo->name);
    fprintf(f, ", \"calibration\": ");
    ein_json_str(f, cal->name);
    fprintf(f, ", \"time_s\": %.9g, \"makespan_s\": %.9g, \"memory_bytes\": %.0f, \"devices\": [",
            r->time, r->makespan, topo->memory);
    for (int d = 0; d < r->ndev; d++) {
        fprintf(f, "%s\n  {\"device\": %d, \"compute_s\": %.9g, \"comm_s\": %.9g, "
                   "\"idle_s\": %.9g, \"peak_bytes\": %llu, \"unplanned_bytes\": %llu, "
                   "\"input_bytes\": %llu, \"live_bytes\": %llu, \"largest\": [",
                d ? "," : "", d, r->dev[d].compute, r->dev[d].comm, r->dev[d].idle,
                (unsigned long long)r->dev[d].peak, (unsigned long long)r->dev[d].unplanned,
                (unsigned long long)r->dev[d].loaded, (unsigned long long)r->dev[d].live);
        for (int k = 0; k < CO_SIM_LARGEST && r->dev[d].largest[k] >= 0; k++) {
            int id = r->dev[d].largest[k];
            fprintf(f, "%s{\"op\": ", k ? ", " : "");
            ein_json_str(f, buffer_op(progs[d], id));
            fprintf(f, ", \"bytes\": %llu}", (unsigned long long)progs[d]->buffers[id].bytes);
        }
        fprintf(f, "]}");
    }
    fprintf(f, "\n], \"critical_path\": {\"instructions\": %d, \"compute_s\": %.9g, "
               "\"comm_s\": %.9g, \"wait_s\": %.9g, \"steps\": [",
            r->npath, r->path_compute, r->path_comm, r->path_wait);
    for (int k = 0; k < r->npath; k++) {
        const co_sim_step *st = &r->path[k];
        const ein_instr *ins = &progs[st->device]->instrs[st->instr];
        fprintf(f, "%s\n  {\"device\": %d, \"instr\": %d, \"kind\": \"%s\", \"op\": ",
                k ? "," : "", st->device, st->instr, ein_instr_kind_name(ins->kind));
        ein_json_str(f, ins->op);
        fprintf(f, ", \"start_s\": %.9g, \"end_s\": %.9g}", st->start, st->end);
    }
    fprintf(f, "\n]}}\n");
    return ferror(f) ? EIN_EIO : 0;
}

int co_sim_trace(ein_program *const *progs, const co_sim_result *r, FILE *f)
{
    int n = 0;
    fputs("[\n", f);
    for (int d = 0; d < r->ndev; d++) {
        const ein_program *p = progs[d];
        for (int i = 0; i < p->ninstrs; i++) {
            int g = r->first[d] + i;
            const ein_instr *ins = &p->instrs[i];
            if (r->start[g] < 0 || ins->kind == EIN_I_LOAD || ins->kind == EIN_I_STORE)
                continue;
            char label[160];
            snprintf(label, sizeof label, "%s %s", ein_instr_kind_name(ins->kind), ins->op);
            const char *cat = ins->kind == EIN_I_KERNEL || ins->kind == EIN_I_AGG ? "kernel"
                                                                                  : "copy";
            fprintf(f, "%s{\"name\": ", n++ ? ",\n" : "");
            ein_json_str(f, label);
            fprintf(f, ", \"cat\": \"%s\", \"ph\": \"X\", \"ts\": %.3f, \"dur\": %.3f, "
                       "\"pid\": %d, \"tid\": 0, \"args\": {\"iteration\": 0, "
                       "\"predicted\": true}}",
                    cat, r->start[g] * 1e6, (r->end[g] - r->start[g]) * 1e6, d);
        }
    }
    for (int k = 0; k < r->nwaits; k++) {
        const double *w = &r->waits[3 * k];
        fprintf(f, "%s{\"name\": \"wait peers\", \"cat\": \"wait\", \"ph\": \"X\", "
                   "\"ts\": %.3f, \"dur\": %.3f, \"pid\": %d, \"tid\": 0, "
                   "\"args\": {\"iteration\": 0, \"predicted\": true}}",
                n++ ? ",\n" : "", w[1] * 1e6, (w[2] - w[1]) * 1e6, (int)w[0]);
    }
    fputs("\n]\n", f);
    return ferror(f) ? EIN_EIO : 0;
}
