/* coordinator/compile/ein_compile.c — the compiled program value of the public API
 * (include/einsummable/einsummable.h): rewrite, plan, topology, exchange
 * synthesis and lowering, kept together so that einrun, einplan, the C
 * callers and Python all compile the same way. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "common/base/ein_knob.h"
#include "common/process/ein_progress.h"
#include "common/process/ein_self.h"
#include "common/base/ein_vec.h"
#include "coordinator/compile/co_lower.h"
#include "coordinator/compile/co_fuse.h"
#include "coordinator/compile/co_memplan.h"
#include "coordinator/compile/co_pipeline.h"
#include "coordinator/compile/co_probe.h"
#include "coordinator/compile/co_search_fit.h"
#include "coordinator/predict/co_sim.h"
#include "coordinator/compile/co_topo.h"
#include "coordinator/compile/ein_compile_int.h"
#include "exchange/xp_program.h"
#include "exchange/xp_topo.h"
#include "planner/ein_api_int.h"
#include "planner/pl_strategy.h"
#include "planner/rewrite/pl_rewrite.h"

int co_find_worker(const char *name, const char *given, char *out, size_t len, ein_error *err)
{
    const char *env = ein_knob_get(EIN_KNOB_EINWORKER);
    if (given || (env && *env)) {
        snprintf(out, len, "%s", given ? given : env);
        if (access(out, X_OK) < 0)
            return ein_fail(err, EIN_EINVAL, "%s %s: %s", given ? "worker" : "$EINWORKER", out,
                            strerror(errno));
        return 0;
    }
    /* Next to the program (einrun in the build tree or installed), next to
     * the build tree's .libs/libeinsummable.so, or in the bin/ beside an
     * installed lib/. */
    const char *rels[] = {"", "../", "../bin/"};
    char rel[256];
    for (size_t i = 0; i < sizeof rels / sizeof *rels; i++) {
        snprintf(rel, sizeof rel, "%s%s", rels[i], name);
        if (ein_self_find(rel, X_OK, out, len) == 0)
            return 0;
    }
    return ein_fail(err, EIN_EINVAL, "cannot find the %s binary next to this program or library; "
                    "name it (the worker option, or $EINWORKER)", name);
}

/* The topology exchanges are synthesised for: o->topology; else, for a
 * probed backend (ein_backend_info.probed: CUDA), a probe of its devices;
 * else `host` with exactly ndev CPU devices. `desc` says where it came
 * from. The messages name the options by their meaning, never a front
 * end's flags: a failed detection is EIN_EDEVICE, after which a front end
 * says how to name a topology. */
int co_topology_for(const ein_compile_options *o, int ndev, xp_topology **out, char *desc,
                    size_t desclen, char *why_out, size_t whylen, ein_error *err)
{
    int rc;
    if (whylen)
        why_out[0] = '\0';
    if (o->topology) {
        if ((rc = xp_topo_load(o->topology, out, err)) < 0)
            return ein_error_prefix(err, "topology %s", o->topology);
        if ((*out)->ngpus < ndev) {
            rc = ein_fail(err, EIN_EINVAL, "topology %s: %s has %d GPUs but the run has %d devices",
                          o->topology, (*out)->name, (*out)->ngpus, ndev);
            xp_topo_free(*out);
            *out = NULL;
            return rc;
        }
        snprintf(desc, desclen, "given as %s", o->topology);
        return 0;
    }
    const ein_backend_info *be = ein_backend_find(o->backend ? o->backend : "cpu");
    if (!be)
        return ein_fail(err, EIN_EINVAL, "backend '%s' (expected %s)", o->backend,
                        ein_backend_names());
    if (be->probed || o->gpu_probe) {
        co_topo_probe *pr = NULL;
        char worker[PATH_MAX] = "", why[512] = "";
        if (o->gpu_probe) {
            rc = co_topo_probe_load(o->gpu_probe, &pr, err);
        } else if ((rc = co_find_worker(be->worker, o->worker, worker, sizeof worker,
                                        err)) < 0) {
            ein_error_prefix(err, "to probe the GPUs");
        } else {
            char *text = NULL, name[PATH_MAX + 16];
            snprintf(name, sizeof name, "%s --probe", worker);
            if ((rc = co_probe_run(worker, &text, err)) == 0)
                rc = co_topo_probe_parse(text, name, &pr, err);
            free(text);
        }
        /* co_topo_detect reads ndev ids; planning alone allows more
         * devices than a machine's GPUs can be named for. */
        int ids[EIN_MAX_DEVICES];
        if (rc == 0 && ndev > EIN_MAX_DEVICES)
            rc = ein_fail(err, EIN_EINVAL, "%d devices: a detected topology names at most %d GPUs",
                          ndev, EIN_MAX_DEVICES);
        for (int d = 0; d < ndev && d < EIN_MAX_DEVICES; d++)
            ids[d] = o->gpu_ids ? o->gpu_ids[d] : d;
        if (rc == 0)
            rc = co_topo_detect(pr, ids, ndev, out, why, sizeof why, err);
        co_topo_probe_free(pr);
        if (rc < 0) {
            if (err) {
                char msg[EIN_ERROR_MSG_MAX];
                snprintf(msg, sizeof msg, "%s", err->msg);
                ein_fail(err, EIN_EDEVICE, "cannot detect the GPU topology: %s", msg);
            }
            return EIN_EDEVICE;
        }
        snprintf(desc, desclen, "detected from %.200s: %.280s",
                 o->gpu_probe ? o->gpu_probe : worker, why);
        snprintf(why_out, whylen, "%s", why);
        return 0;
    }
    const char *text = xp_topo_builtin_text("host");
    const char *gp = text ? strstr(text, "\ngpus ") : NULL;
    if (!gp)
        return ein_fail(err, EIN_EINVAL, "no built-in host topology");
    const char *eol = strchr(gp + 1, '\n');
    char buf[4096];
    snprintf(buf, sizeof buf, "%.*s\ngpus %d%s", (int)(gp - text), text, ndev, eol ? eol : "");
    if ((rc = xp_topo_parse(buf, "host", out, err)) < 0)
        return ein_error_prefix(err, "host topology");
    snprintf(desc, desclen, "host (built in), sized to %d CPU device%s", ndev, ndev == 1 ? "" : "s");
    return 0;
}

static void compiled_free_exchanges(ein_compiled *c)
{
    for (int i = 0; i < c->nex; i++) {
        if (c->ex_text)
            free(c->ex_text[i]);
        if (c->ex_tensor)
            free(c->ex_tensor[i]);
        if (c->ex_consumer)
            free(c->ex_consumer[i]);
    }
    free(c->ex_text);
    free(c->ex_tensor);
    free(c->ex_consumer);
    c->ex_text = c->ex_tensor = c->ex_consumer = NULL;
    c->nex = 0;
}

int co_compiled_exchanges_alloc(ein_compiled *c, int n, ein_error *err)
{
    c->nex = n;
    c->ex_text = calloc((size_t)n + 1, sizeof *c->ex_text);
    c->ex_tensor = calloc((size_t)n + 1, sizeof *c->ex_tensor);
    c->ex_consumer = calloc((size_t)n + 1, sizeof *c->ex_consumer);
    if (!c->ex_text || !c->ex_tensor || !c->ex_consumer)
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    return 0;
}

/* The text and names of every exchange of c->phys (ein_compiled_exchange). */
static int compiled_exchange_texts(ein_compiled *c, ein_error *err)
{
    if (co_compiled_exchanges_alloc(c, c->phys->nex, err) < 0)
        return EIN_ENOMEM;
    for (int i = 0; i < c->nex; i++) {
        const co_exchange *e = &c->phys->ex[i];
        size_t len = 0;
        FILE *f = open_memstream(&c->ex_text[i], &len);
        if (!f)
            return ein_fail(err, EIN_ENOMEM, "out of memory");
        xp_program_print(e->body, f, NULL, NULL);
        if (fclose(f) != 0 || !c->ex_text[i] ||
            !(c->ex_tensor[i] = strdup(pl_graph_node(c->g, e->tensor)->name)) ||
            !(c->ex_consumer[i] = strdup(co_exchange_consumer_name(c->g, e))))
            return ein_fail(err, EIN_ENOMEM, "out of memory");
    }
    return 0;
}

/* Remember how o finds the topology (saved with the program). */
static int compiled_topology_source(ein_compiled *c, const ein_compile_options *o,
                                    ein_error *err)
{
    c->src_backend = ein_backend_index(ein_backend_find(o->backend ? o->backend : "cpu"));
    for (int d = 0; d < c->ndev && d < EIN_MAX_DEVICES; d++)
        c->src_gpu_ids[d] = o->gpu_ids ? o->gpu_ids[d] : d;
    if ((o->topology && !(c->src_topology = strdup(o->topology))) ||
        (o->gpu_probe && !(c->src_gpu_probe = strdup(o->gpu_probe))))
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    return 0;
}

/* Check a compile's device count and options. 0 or a negative code. */
static int compile_check(const ein_compile_options *o, int predict_only, int ndev,
                         ein_error *err)
{
    int max = o->plan_only || predict_only ? 4096 : EIN_MAX_DEVICES;
    if (ndev < 1 || ndev > max)
        return ein_fail(err, EIN_EINVAL, "compile: %d devices (expected 1 to %d%s)", ndev, max,
                        o->plan_only ? "" : "; planning alone allows 4096");
    if (o->search_work < 0 || o->search_work > 1000000000)
        return ein_fail(err, EIN_EINVAL, "compile: search work %ld (expected 0 for the default, "
                        "or 1 to 1000000000)", o->search_work);
    if (o->exchange_chunks < EIN_EXCHANGE_CHUNKS_AUTO || o->exchange_chunks > XP_CHUNKS_MAX)
        return ein_fail(err, EIN_EINVAL, "compile: exchange chunks %d (expected 0 for the "
                        "default, %d for auto, 1 for off or 2 to %d)", o->exchange_chunks,
                        EIN_EXCHANGE_CHUNKS_AUTO, XP_CHUNKS_MAX);
    pl_partials pm;
    if (o->partials && pl_partials_parse(o->partials, &pm) < 0)
        return ein_fail(err, EIN_EINVAL, "compile: partials '%s' (expected f32 or native)",
                        o->partials);
    if (o->backend && !ein_backend_find(o->backend))
        return ein_fail(err, EIN_EINVAL, "compile: backend '%s' (expected %s)", o->backend,
                        ein_backend_names());
    return 0;
}

/* Replace c->g by its rewrite (o->rewrite set), priced with the roofline
 * of c->topo's peak and HBM bandwidth. 0 or a negative code. */
static int compile_rewrite(ein_compiled *c, const ein_compile_options *o, ein_error *err)
{
    pl_rewrite_opts rwo = {.ilp = o->ilp, .peak_flops = c->topo->peak, .hbm_bw = c->topo->hbm};
    char **w = NULL;
    pl_graph *rg = NULL;
    int rc = o->rewrite_weights ? pl_rewrite_weights_parse(o->rewrite_weights, &w, err) : 0;
    rwo.weights = (const char *const *)w;
    if (rc == 0)
        rc = pl_rewrite(c->g, &rwo, &rg, &c->rewrite_stats, err);
    pl_rewrite_weights_free(w);
    if (rc < 0) {
        ein_error_prefix(err, "rewrite");
        return rc;
    }
    c->rewritten = 1;
    pl_graph_free(c->g);
    c->g = rg;
    return 0;
}

/* The objective a compile plans with: o->objective when given, else
 * time where c->topo has a calibration (or o->calibration gives one), the
 * selector is the DP, no strategy is forced and the devices are at most
 * CO_AUTO_TIME_MAX_DEVICES (the search simulates every candidate), else
 * comm. 1 for time. */
#define CO_AUTO_TIME_MAX_DEVICES 128
static int compile_time_objective(const ein_compiled *c, const ein_compile_options *o)
{
    if (o->objective)
        return strcmp(o->objective, "comm") != 0;
    return c->topo && (c->topo->calibration[0] || o->calibration) && !o->strategy &&
           c->ndev <= CO_AUTO_TIME_MAX_DEVICES && c->topo->ngpus >= c->ndev &&
           (!o->selector || !strcmp(o->selector, "dp"));
}

/* c->cal: o->calibration, else c->topo's own, else host's. Any failure is
 * bad input (EIN_EINVAL). */
static int compile_calibration(ein_compiled *c, const ein_compile_options *o, ein_error *err)
{
    int rc = o->calibration ? co_calib_load(o->calibration, &c->cal, err)
                            : co_sim_calib_of(c->topo, "host", &c->cal, err);
    if (rc < 0) {
        if (o->calibration)
            ein_error_prefix(err, "calibration %s", o->calibration);
        return err ? (err->code = EIN_EINVAL) : EIN_EINVAL;
    }
    c->have_cal = 1;
    return 0;
}

/* *pp for the time objective (issues 12, 21): the plan search for the DP
 * with no strategy forced (its report in c->search_rep), else the
 * selector's plan by predicted time (co_plan_by_time); on c->topo capped
 * by the memory limit (c->topo_limited). */
static int compile_plan_time(ein_compiled *c, const ein_compile_options *o,
                             const co_compile_extra *x, pl_selector sel, pl_plan_opts *base,
                             pl_plan **pp, ein_error *err)
{
    int rc = c->have_cal ? 0 : compile_calibration(c, o, err);
    if (rc < 0)
        return rc;
    c->time_objective = 1;
    if (sel == PL_SELECT_DP && !base->force) {
        co_search_opts so = {.work = x ? x->plan_work : 0, .seed = o->plan_seed,
                             .record = x ? x->record : 0};
        c->plan_searched = 1;
        return co_plan_search_fit(c->g, c->ndev, base, &c->topo_limited, &c->cal, &so, pp,
                                  &c->search_rep, &c->whole_search, err);
    }
    return co_plan_by_time(c->g, c->ndev, sel, o->plan_seed, base, &c->topo_limited, &c->cal,
                           pp, err);
}

/* c->plan: c->g planned on c->ndev devices, for communication or
 * predicted time on the topology with its calibration (issues 12, 21;
 * coordinator/predict/co_sim.h, co_search.h), following o->strategy if given.
 * 0 or a negative code. */
static int compile_plan(ein_compiled *c, const ein_compile_options *o, const co_compile_extra *x,
                        ein_error *err)
{
    int rc = 0;
    pl_selector sel = PL_SELECT_DP;
    pl_plan_opts base = {.linear_paths = o->linear_paths};
    pl_plan *pp = NULL;
    ein_progress pg;
    ein_progress_begin(&pg, o->progress && ein_progress_wanted(0), "planning", 0);
    /* The user's memory limit caps the topology's for the plans (a
     * shallow copy, read only; c->topo stays the machine's). */
    c->topo_limited = *c->topo;
    co_topo_limit_memory(&c->topo_limited, o->memory_limit);
    if (o->partials)
        pl_partials_parse(o->partials, &base.partials); /* checked by compile_check */
    if (!(o->memory_limit >= 0)) {
        rc = ein_fail(err, EIN_EINVAL, "memory limit %g: expected 0 (none) or a positive number "
                      "of bytes", o->memory_limit);
    } else if (o->objective && strcmp(o->objective, "comm") && strcmp(o->objective, "time")) {
        rc = ein_fail(err, EIN_EINVAL, "objective '%s': expected comm or time", o->objective);
    } else if (o->selector && pl_selector_parse(o->selector, &sel) < 0) {
        rc = ein_fail(err, EIN_EINVAL, "plan: unknown selector '%s'; expected dp, greedy or "
                      "random", o->selector);
    } else if (o->strategy && pl_strategy_set(o->strategy, &base) < 0) {
        rc = ein_fail(err, EIN_EINVAL, "strategy '%s': expected megatron, ulysses, sequence or "
                      "data", o->strategy);
    } else if (o->strategy && pl_strategy_check(o->strategy, c->g, c->ndev, err) < 0) {
        rc = err ? (err->code = EIN_ENOPLAN) : EIN_ENOPLAN; /* the message names the operator */
    } else if (x && x->predict_only && (rc = compile_calibration(c, o, err)) < 0) {
        ;
    } else if (compile_time_objective(c, o)) {
        rc = compile_plan_time(c, o, x, sel, &base, &pp, err);
    } else if (base.force || base.partials == PL_PARTIALS_NATIVE) {
        /* The paper's DP counting native partials (ein_graph_plan's f32),
         * or a strategy's. */
        rc = pl_plan_make_opts(c->g, c->ndev, sel, o->plan_seed, &base, &pp, err);
    } else {
        ein_plan_options po = {.selector = o->selector, .seed = o->plan_seed,
                               .linear_paths = o->linear_paths};
        rc = ein_graph_plan(c->g, c->ndev, &po, &c->plan, err);
    }
    if (rc == 0 && pp)
        rc = ein_plan_wrap(c->g, pp, &c->plan, err);
    ein_progress_end(&pg);
    return rc;
}

/* c->phys and c->progs: the plan's exchanges synthesised (or naive) as o
 * asks, and lowered to one program per device (co_pipeline.h, steps 1-4).
 * 0 or a negative code. */
static int compile_lower(ein_compiled *c, const ein_compile_options *o, ein_error *err)
{
    co_pipeline p;
    co_pipeline_init(&p, c->g, ein_plan_internal(c->plan), c->topo, o);
    c->search_work = p.po.search_opts.max_work;
    c->search_cap_ms = p.po.search_opts.cap_ms;
    c->searched = !o->naive_exchanges;
    c->no_reuse = p.lo.no_reuse;
    c->reuse_delay_set = p.lo.memplan != NULL;
    if (p.lo.memplan)
        c->reuse_delay = p.mo;
    if (co_pipeline_run(&p, err) < 0)
        return ein_error_prefix(err, "cannot lower the plan");
    c->phys = p.ph;
    c->progs = p.progs;
    c->ls = p.ls;
    return compiled_exchange_texts(c, err);
}

/* Re-deriving a loaded program (co_compiled_rederive): the saved bodies,
 * in emission order, in place of the naive ones. */
typedef struct saved_bodies {
    const ein_compiled *c;
    int next;
} saved_bodies;

/* Does `body` (parsed) declare exactly the preamble `pre`: the same IN
 * entries (sites and sizes, in order) and OUT requirements (sets and
 * sites, in order)? Its IN entries then take the preamble's atoms. */
static int same_preamble(xp_program *body, const xp_program *pre, ein_error *err)
{
    if (body->nin != pre->nin || body->nout != pre->nout || body->nwords != pre->nwords)
        return ein_fail(err, EIN_EPROTO, "its IN or OUT differ from the exchange's (%d and %d "
                        "entries saved, %d and %d needed)", body->nin, body->nout, pre->nin,
                        pre->nout);
    for (int i = 0; i < pre->nin; i++) {
        if (body->in[i].site != pre->in[i].site || body->in[i].bytes != pre->in[i].bytes)
            return ein_fail(err, EIN_EPROTO, "IN entry %d differs from the exchange's", i);
        body->in[i].atom = pre->in[i].atom;
    }
    for (int k = 0; k < pre->nout; k++)
        if (body->out[k].site != pre->out[k].site ||
            !xp_set_equal(pre, body->out[k].set, pre->out[k].set))
            return ein_fail(err, EIN_EPROTO, "OUT entry %d differs from the exchange's", k);
    return 0;
}

static int saved_body_hook(void *ctx, const char *tensor, const char *consumer,
                           xp_program **body, ein_error *err)
{
    saved_bodies *sb = ctx;
    const ein_compiled *c = sb->c;
    int i = sb->next++;
    if (i >= c->nex)
        return ein_fail(err, EIN_EPROTO, "more exchanges than the %d saved", c->nex);
    if (strcmp(c->ex_tensor[i], tensor) != 0 || strcmp(c->ex_consumer[i], consumer) != 0)
        return ein_fail(err, EIN_EPROTO, "exchange %d is of '%s' for '%s', saved as of '%s' "
                        "for '%s'", i, tensor, consumer, c->ex_tensor[i], c->ex_consumer[i]);
    xp_program *p = NULL;
    int rc = xp_program_parse(c->ex_text[i], "saved exchange", &p, err);
    if (rc == 0 && !xp_program_resolved(p))
        rc = ein_fail(err, EIN_EPROTO, "a partition without members");
    if (rc == 0)
        rc = same_preamble(p, *body, err);
    if (rc < 0) {
        xp_program_free(p);
        return rc;
    }
    xp_program_free(*body);
    *body = p;
    return 0;
}

int co_compiled_rederive(ein_compiled *c, ein_error *err)
{
    co_pipeline p = {.g = c->g, .plan = ein_plan_internal(c->plan)};
    p.po = (co_physical_opts){.ndev = c->ndev, .topo = NULL, .search = 0,
                              .body_hook = saved_body_hook};
    saved_bodies sb = {.c = c};
    p.po.body_ctx = &sb;
    xp_search_opts_default(&p.po.search_opts);
    p.lo = (co_lower_opts){.seed = c->seed, .no_reuse = c->no_reuse,
                           .memplan = c->reuse_delay_set ? &c->reuse_delay : NULL};
    int fuse = 1;
    ein_error fe = {0};
    p.lo.no_fuse = co_fuse_knob(&fuse, &fe) < 0 ? -1 : !fuse;
    int rc = co_pipeline_run(&p, err);
    if (rc < 0)
        return rc;
    co_physical *ph = p.ph;
    ein_program **progs = p.progs;
    co_lower_stats ls = p.ls;
    if (sb.next != c->nex) {
        co_physical_free(ph);
        co_programs_free(progs, c->ndev);
        return ein_fail(err, EIN_EPROTO, "%d exchanges saved, %d made", c->nex, sb.next);
    }
    /* The exchange texts again from the bodies used, the programs and
     * what the lowering counts from this derivation; the search's report
     * (searched, reused, predicted times, steps, capped) stays as saved. */
    compiled_free_exchanges(c);
    co_programs_free(c->progs, c->ndev);
    co_physical_free(c->phys);
    c->phys = ph;
    c->progs = progs;
    c->ls.ninstrs = ls.ninstrs;
    c->ls.ncopies = ls.ncopies;
    c->ls.nexchanges = ls.nexchanges;
    c->ls.nlocal = ls.nlocal;
    c->ls.nchunked = ls.nchunked;
    c->ls.copy_bytes = ls.copy_bytes;
    return compiled_exchange_texts(c, err);
}

int ein_compile(const ein_graph *g, int ndev, const ein_compile_options *opts, ein_compiled **out,
                ein_error *err)
{
    return co_compile(g, ndev, opts, NULL, out, err);
}

int co_compile(const ein_graph *g, int ndev, const ein_compile_options *opts,
               const co_compile_extra *x, ein_compiled **out, ein_error *err)
{
    ein_compile_options o;
    if (opts)
        o = *opts;
    else
        ein_compile_options_init(&o);
    if (!g || !out)
        return ein_fail(err, EIN_EINVAL, "compile: NULL graph or output");
    int rc = compile_check(&o, x && x->predict_only, ndev, err);
    if (rc < 0)
        return rc;
    ein_compiled *c = calloc(1, sizeof *c);
    if (!c)
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    c->ndev = ndev;
    c->seed = o.seed;
    if (!(c->g = pl_graph_copy(g))) {
        rc = ein_fail(err, EIN_ENOMEM, "out of memory");
        goto fail;
    }
    if ((rc = compiled_topology_source(c, &o, err)) < 0 ||
        (rc = co_topology_for(&o, ndev, &c->topo, c->topo_desc, sizeof c->topo_desc,
                              c->topo_why, sizeof c->topo_why, err)) < 0 ||
        (o.rewrite && (rc = compile_rewrite(c, &o, err)) < 0) ||
        (rc = compile_plan(c, &o, x, err)) < 0 ||
        (!o.plan_only && (rc = compile_lower(c, &o, err)) < 0))
        goto fail;
    *out = c;
    return 0;
fail:
    ein_compiled_free(c);
    return rc;
}

void ein_compiled_free(ein_compiled *c)
{
    if (!c)
        return;
    co_programs_free(c->progs, c->ndev);
    compiled_free_exchanges(c);
    co_physical_free(c->phys);
    co_search_report_free(&c->search_rep);
    ein_plan_free(c->plan);
    xp_topo_free(c->topo);
    pl_graph_free(c->g);
    free(c->src_topology);
    free(c->src_gpu_probe);
    for (int e = 0; e < c->nentries; e++)
        free(c->entries[e].out);
    free(c);
}

int ein_compiled_ndevices(const ein_compiled *c)
{
    return c ? c->ndev : 0;
}

const ein_graph *ein_compiled_graph(const ein_compiled *c)
{
    return c ? c->g : NULL;
}

const ein_plan *ein_compiled_plan(const ein_compiled *c)
{
    return c ? c->plan : NULL;
}

const char *ein_compiled_topology(const ein_compiled *c, const char **description)
{
    if (description)
        *description = c ? c->topo_desc : NULL;
    return c ? c->topo->name : NULL;
}

int ein_compiled_nexchanges(const ein_compiled *c)
{
    return c ? c->nex : 0;
}

int ein_compiled_exchange(const ein_compiled *c, int i, const char **tensor, const char **consumer,
                          const char **body)
{
    if (!c || i < 0 || i >= c->nex)
        return EIN_EINVAL;
    if (tensor)
        *tensor = c->ex_tensor[i];
    if (consumer)
        *consumer = c->ex_consumer[i];
    if (body)
        *body = c->ex_text[i];
    return 0;
}

int ein_compiled_program(const ein_compiled *c, int d, int *ninstrs, int *nbuffers,
                         uint64_t *segment_bytes)
{
    if (!c || !c->progs || d < 0 || d >= c->ndev)
        return EIN_EINVAL;
    if (ninstrs)
        *ninstrs = c->progs[d]->ninstrs;
    if (nbuffers)
        *nbuffers = c->progs[d]->nbuffers;
    if (segment_bytes)
        *segment_bytes = c->progs[d]->segment_bytes;
    return 0;
}

void ein_compiled_exchange_time(const ein_compiled *c, double *chosen_s, double *naive_s)
{
    if (chosen_s)
        *chosen_s = c ? c->ls.synth_s : 0;
    if (naive_s)
        *naive_s = c ? c->ls.naive_s : 0;
}

char *ein_compiled_explain(const ein_compiled *c, int exchanges)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return NULL;
    fprintf(f, "compiled for %d device%s on topology %s (%s)\n", c->ndev, c->ndev == 1 ? "" : "s",
            c->topo->name, c->topo_desc);
    fprintf(f, "plan: total cost %.6g\n", ein_plan_total_cost(c->plan));
    for (int i = 0; i < ein_plan_nops(c->plan); i++) {
        const char *name, *op;
        char split[256];
        double r, j, a;
        ein_plan_op(c->plan, i, &name, &op, split, sizeof split, &r, &j, &a);
        fprintf(f, "  %-16s %-12s %-32s repartition %.4g join %.4g aggregation %.4g\n", name, op,
                split, r, j, a);
    }
    if (c->progs) {
        fprintf(f, "programs: %d instructions, %d exchanges (%d searched, %d reused, %d local), "
                   "%d copies moving %.0f bytes\n",
                c->ls.ninstrs, c->ls.nexchanges, c->ls.nsearched, c->ls.nreused, c->ls.nlocal,
                c->ls.ncopies, c->ls.copy_bytes);
        fprintf(f, "exchanges simulated on %s: %.6g ms with naive bodies, %.6g ms %s\n",
                c->topo->name, 1e3 * c->ls.naive_s, 1e3 * c->ls.synth_s,
                c->searched ? "as synthesised" : "(naive schedule)");
        for (int d = 0; d < c->ndev; d++)
            fprintf(f, "  device %d: %d instructions, %d buffers, %llu bytes\n", d,
                    c->progs[d]->ninstrs, c->progs[d]->nbuffers,
                    (unsigned long long)c->progs[d]->segment_bytes);
        for (int i = 0; exchanges && i < c->nex; i++)
            fprintf(f, "\n# exchange %d: %s for %s\n%s", i, c->ex_tensor[i], c->ex_consumer[i],
                    c->ex_text[i]);
    }
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}
