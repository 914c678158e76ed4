/* coordinator/run/ein_frontend_run.c — ein_frontend.h's calls around a
 * session (einrun): inputs from files and weights, safely written
 * outputs, calibration, topology text, the lowering's figures. */
#include "coordinator/ein_frontend.h"

#include <stdlib.h>
#include <string.h>

#include "coordinator/compile/co_lower.h"
#include "coordinator/compile/ein_compile_int.h"
#include "coordinator/predict/co_calib.h"
#include "coordinator/run/co_calib_run.h"
#include "coordinator/run/co_dump.h"
#include "coordinator/run/co_output.h"
#include "coordinator/run/co_weights.h"
#include "exchange/xp_topo.h"
#include "planner/ein_api_int.h"

int ein_fe_is_saved_program(const char *path)
{
    return co_saved_program_is(path);
}

int ein_fe_hosts_check(const ein_session_options *o, int ndev, ein_error *err)
{
    return co_session_hosts_check(o, ndev, err);
}

int ein_fe_saved_program_ndev(const char *path, int *ndev, ein_error *err)
{
    return co_saved_program_ndev(path, ndev, err);
}

int ein_fe_find_worker(const char *name, const char *given, char *out, size_t len,
                       ein_error *err)
{
    return co_find_worker(name, given, out, len, err);
}

int ein_fe_topology_text(const ein_compile_options *o, int ndev, char **text, char *desc,
                         size_t desclen, char *why, size_t whylen, ein_error *err)
{
    xp_topology *t = NULL;
    *text = NULL;
    int rc = co_topology_for(o, ndev, &t, desc, desclen, why, whylen, err);
    if (rc < 0)
        return rc;
    rc = xp_topo_format(t, text, err);
    xp_topo_free(t);
    return rc;
}

int ein_fe_tensor_is_state(const ein_graph *g, ein_tensor t)
{
    if (!g || t < 0 || t >= g->nnodes)
        return 0;
    return pl_graph_node(g, t)->state != 0;
}

uint64_t ein_fe_output_devices(const ein_compiled *c, const char *name)
{
    int v = pl_graph_find(c->g, name);
    if (v < 0)
        return 0;
    return co_output_devices(c->g, ein_plan_internal(c->plan), v);
}

void ein_fe_compiled_lower_stats(const ein_compiled *c, ein_fe_lower_stats *out)
{
    const co_lower_stats *ls = &c->ls;
    *out = (ein_fe_lower_stats){
        .ninstrs = ls->ninstrs, .ncopies = ls->ncopies, .nexchanges = ls->nexchanges,
        .nlocal = ls->nlocal, .nsearched = ls->nsearched, .nreused = ls->nreused,
        .copy_bytes = ls->copy_bytes, .naive_s = ls->naive_s, .synth_s = ls->synth_s,
        .search_steps = ls->search_steps, .search_ms = ls->search_ms, .ncapped = ls->ncapped,
    };
}

/* ---- inputs ---------------------------------------------------------------- */

struct ein_fe_inputs {
    const pl_graph *g;
    co_input_src *src;          /* by node */
    ein_safetensors **files;    /* weights files open (nfiles) */
    int nfiles;
};

int ein_fe_inputs_create(const ein_graph *g, ein_fe_inputs **out, ein_error *err)
{
    ein_fe_inputs *in = calloc(1, sizeof *in);
    if (in)
        in->src = calloc((size_t)(g->nnodes > 0 ? g->nnodes : 1), sizeof *in->src);
    if (!in || !in->src) {
        free(in);
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    }
    in->g = g;
    *out = in;
    return 0;
}

void ein_fe_inputs_free(ein_fe_inputs *in)
{
    if (!in)
        return;
    co_weights_files_free(in->files, in->nfiles);
    free(in->src);
    free(in);
}

void ein_fe_inputs_set_npy(ein_fe_inputs *in, ein_tensor t, const char *path)
{
    if (t >= 0 && t < in->g->nnodes)
        in->src[t].path = path;
}

int ein_fe_inputs_load_weights(ein_fe_inputs *in, const char *const *paths, int npaths,
                               const char *const *maps, int nmaps, int allow_unused,
                               ein_error *err)
{
    ein_safetensors **files = NULL;
    int rc = co_weights_load_ex(in->g, paths, npaths, maps, nmaps, allow_unused, in->src, NULL,
                                &files, err);
    if (rc < 0)
        return rc;
    co_weights_files_free(in->files, in->nfiles);
    in->files = files;
    in->nfiles = npaths;
    return 0;
}

int ein_fe_inputs_has_value(const ein_fe_inputs *in, ein_tensor t)
{
    return t >= 0 && t < in->g->nnodes && in->src[t].path != NULL;
}

int ein_fe_inputs_apply(const ein_fe_inputs *in, ein_session *s, ein_tensor *bad,
                        ein_error *err)
{
    for (int v = 0; v < in->g->nnodes; v++) {
        const co_input_src *src = &in->src[v];
        if (!src->path)
            continue;
        int rc = ein_session_set_input_source(s, pl_graph_node(in->g, v)->name, src->path,
                                              src->format, src->offset, err);
        if (rc < 0) {
            *bad = v;
            return rc;
        }
    }
    return 0;
}

int ein_fe_inputs_dump(const ein_fe_inputs *in, uint64_t seed, const char *dir,
                       ein_progress *progress, int *ndumped, ein_error *err)
{
    return co_dump_inputs(in->g, in->src, seed, dir, progress, ndumped, err);
}

/* ---- outputs ---------------------------------------------------------------- */

struct ein_fe_outputs {
    co_output *o;
    int n, max;
};

int ein_fe_outputs_create(int max, ein_fe_outputs **out, ein_error *err)
{
    ein_fe_outputs *o = calloc(1, sizeof *o);
    if (o)
        o->o = calloc((size_t)(max > 0 ? max : 1), sizeof *o->o);
    if (!o || !o->o) {
        free(o);
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    }
    o->max = max;
    *out = o;
    return 0;
}

void ein_fe_outputs_free(ein_fe_outputs *o)
{
    if (!o)
        return;
    co_outputs_discard(o->o, o->n);
    free(o->o);
    free(o);
}

int ein_fe_outputs_add(ein_fe_outputs *o, const char *name, const char *path,
                       const ein_tensor_desc *desc)
{
    if (o->n >= o->max || desc->rank < 0 || desc->rank > EIN_MAX_RANK)
        return EIN_EINVAL;
    co_output *out = &o->o[o->n];
    out->name = name;
    out->path = path;
    out->dtype = desc->dtype;
    out->rank = desc->rank;
    for (int a = 0; a < desc->rank; a++)
        out->shape[a] = desc->shape[a];
    return o->n++;
}

int ein_fe_outputs_prepare(ein_fe_outputs *o, int verbose, ein_error *err)
{
    return co_outputs_prepare(o->o, o->n, verbose, err);
}

const char *ein_fe_outputs_tmp(const ein_fe_outputs *o, int i)
{
    return i >= 0 && i < o->n ? o->o[i].tmp : NULL;
}

int ein_fe_outputs_open(ein_fe_outputs *o, ein_error *err)
{
    return co_outputs_create(o->o, o->n, err);
}

int ein_fe_outputs_publish(ein_fe_outputs *o, ein_error *err)
{
    return co_outputs_publish(o->o, o->n, err);
}

/* ---- calibration ------------------------------------------------------------ */

struct ein_fe_calibration {
    xp_topology *topo;
    co_calib cal;
    co_calib_notes notes;
    int measured;
};

int ein_fe_calibration_create(const char *topology, ein_fe_calibration **out, ein_error *err)
{
    ein_fe_calibration *c = calloc(1, sizeof *c);
    if (!c)
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    int rc = xp_topo_load(topology ? topology : "host", &c->topo, err);
    if (rc < 0) {
        free(c);
        return rc;
    }
    *out = c;
    return 0;
}

int ein_fe_calibration_measure(ein_fe_calibration *c, int ndev, const char *worker,
                               ein_error *err)
{
    int rc = co_calib_measure(ndev, worker, c->topo, &c->cal, &c->notes, err);
    c->measured = rc == 0;
    return rc;
}

int ein_fe_calibration_write(FILE *f, const ein_fe_calibration *c, const char *measured_by)
{
    const co_calib_notes *n = &c->notes;
    const xp_topology *topo = c->topo;
    if (!c->measured)
        return EIN_EINVAL;
    fprintf(f, "# measured by %s on %d device%s, against topology %s "
               "(peak %.4g FLOP/s, hbm %.4g B/s); best of %d iterations\n",
            measured_by, n->ndev, n->ndev == 1 ? "" : "s", topo->name, topo->peak, topo->hbm,
            n->iterations);
    /* The table keeps the processors online: the model is the machine's
     * own. What other users' load left during calibration is a comment. */
    if (n->eff_cores > 0)
        fprintf(f, "# %d devices busy at once got %.3g cores of %.4g (other users' load)\n",
                n->par, n->eff_cores, c->cal.cores);
    if (c->cal.latency_busy != c->cal.latency)
        fprintf(f, "# busy figures: %d devices per core in a ring, computing and messaging\n",
                n->ring_per_core);
    co_calib_write(&c->cal, f);
    return ferror(f) ? EIN_EIO : 0;
}

void ein_fe_calibration_free(ein_fe_calibration *c)
{
    if (!c)
        return;
    xp_topo_free(c->topo);
    free(c);
}
