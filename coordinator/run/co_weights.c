/* coordinator/run/co_weights.c — see co_weights.h. */
#include "coordinator/run/co_weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ir/ein_box.h"

/* The tensor `name` and its file; NULL if no file has it. A name in two
 * files is EIN_EINVAL (*rc). */
static const ein_st_tensor *find(const ein_safetensors *const *files, int nfiles, const char *name,
                                 const ein_safetensors **file, int *rc, ein_error *err)
{
    const ein_st_tensor *t = NULL;
    *rc = 0;
    for (int f = 0; f < nfiles; f++) {
        const ein_st_tensor *x = ein_safetensors_find(files[f], name);
        if (!x)
            continue;
        if (t) {
            *rc = ein_fail(err, EIN_EINVAL, "tensor '%s' is in both %s and %s", name,
                           (*file)->path, files[f]->path);
            return NULL;
        }
        t = x;
        *file = files[f];
    }
    return t;
}

static int check_pair(const pl_node *nd, const ein_safetensors *file, const ein_st_tensor *t,
                      ein_error *err)
{
    char want[160], got[160];
    ein_shape_format(nd->rank, nd->shape, want, sizeof want);
    ein_shape_format(t->rank, t->shape, got, sizeof got);
    if (t->dtype < 0)
        return ein_fail(err, EIN_ESHAPE, "%s: tensor '%s' is %s, which einsummable does not "
                                         "compute in (%s), for input %s (%s [%s])",
                        file->path, t->name, t->dtype_name,
                        ein_dtype_list((char[96]){0}, 96, -1, -1, EIN_DTYPE_BY_ST), nd->name,
                        ein_dtype_name(nd->dtype), want);
    /* a float tensor for a quantized input is quantized as it loads
     * (issue 36: EIN_LOAD_RAW_*_QUANT) */
    int quant = ein_dtype_is_block((int)nd->dtype) && ein_dtype_is_float(t->dtype);
    int same = t->rank == nd->rank && (t->dtype == (int)nd->dtype || quant);
    for (int d = 0; same && d < nd->rank; d++)
        same = t->shape[d] == nd->shape[d];
    if (!same)
        return ein_fail(err, EIN_ESHAPE, "%s: tensor '%s' is %s [%s] but input %s is %s [%s]",
                        file->path, t->name, t->dtype_name, got, nd->name,
                        ein_dtype_name(nd->dtype), want);
    return 0;
}

int co_weights_bind(const pl_graph *g, const ein_safetensors *const *files, int nfiles,
                    const co_weight_map *map, int nmap, co_input_src *src, int *nbound,
                    ein_error *err)
{
    int rc = 0, n = 0;
    /* Decide everything first, then write src: on error src is unchanged. */
    const ein_st_tensor **pick = calloc((size_t)g->nnodes + 1, sizeof *pick);
    const ein_safetensors **from = calloc((size_t)g->nnodes + 1, sizeof *from);
    if (!pick || !from) {
        rc = ein_fail(err, EIN_ENOMEM, "out of memory binding weights");
        goto done;
    }
    for (int i = 0; i < nmap; i++) {
        int v = pl_graph_find(g, map[i].input);
        const pl_node *nd = v >= 0 ? pl_graph_node(g, v) : NULL;
        if (!nd || nd->kind != PL_INPUT) {
            rc = ein_fail(err, EIN_EINVAL, "map %s=%s: the program has no input named '%s'%s",
                          map[i].input, map[i].tensor, map[i].input,
                          nd ? " (it is computed, not an input)" : "");
            goto done;
        }
        if (pick[v] || src[v].path) {
            rc = ein_fail(err, EIN_EINVAL, "map %s=%s: input %s already has a source%s%s",
                          map[i].input, map[i].tensor, nd->name, pick[v] ? ": tensor " : "",
                          pick[v] ? pick[v]->name : "");
            goto done;
        }
        const ein_safetensors *f = NULL;
        const ein_st_tensor *t = find(files, nfiles, map[i].tensor, &f, &rc, err);
        if (rc < 0)
            goto done;
        if (!t) {
            rc = ein_fail(err, EIN_EINVAL, "map %s=%s: no tensor named '%s' in %s%s",
                          map[i].input, map[i].tensor, map[i].tensor,
                          nfiles == 1 ? files[0]->path : "the weights files",
                          nfiles == 1 ? "" : "");
            goto done;
        }
        if ((rc = check_pair(nd, f, t, err)) < 0)
            goto done;
        pick[v] = t;
        from[v] = f;
    }
    for (int v = 0; v < g->nnodes; v++) {
        const pl_node *nd = pl_graph_node(g, v);
        if (nd->kind != PL_INPUT || nd->state || pick[v] || src[v].path)
            continue;
        const ein_safetensors *f = NULL;
        const ein_st_tensor *t = find(files, nfiles, nd->name, &f, &rc, err);
        if (rc < 0)
            goto done;
        if (!t)
            continue;
        if ((rc = check_pair(nd, f, t, err)) < 0)
            goto done;
        pick[v] = t;
        from[v] = f;
    }
    for (int v = 0; v < g->nnodes; v++)
        if (pick[v]) {
            int q = ein_dtype_is_block((int)pl_graph_node(g, v)->dtype);
            ein_dtype ft = (ein_dtype)pick[v]->dtype;
            ein_load_format f = !q ? EIN_LOAD_RAW : ft == EIN_F16 ? EIN_LOAD_RAW_F16_QUANT
                                : ft == EIN_BF16 ? EIN_LOAD_RAW_BF16_QUANT : EIN_LOAD_RAW_F32_QUANT;
            src[v] = (co_input_src){.path = from[v]->path, .format = f,
                                    .offset = pick[v]->offset};
            n++;
        }
    if (nbound)
        *nbound = n;
done:
    free(pick);
    free(from);
    return rc;
}

int co_weights_none_bound(const pl_graph *g, const ein_safetensors *const *files, int nfiles,
                          ein_error *err)
{
    char names[300] = "", tensors[300] = "";
    for (int v = 0; v < g->nnodes; v++)
        if (pl_graph_node(g, v)->kind == PL_INPUT)
            ein_msg_list_add(names, sizeof names, pl_graph_node(g, v)->name);
    for (int f = 0; f < nfiles; f++)
        for (int t = 0; t < files[f]->ntensors; t++)
            ein_msg_list_add(tensors, sizeof tensors, files[f]->tensors[t].name);
    return ein_fail(err, EIN_EINVAL, "%s: no tensor of %s is named like an input of the "
                    "program, and no map binds one (the inputs: %s; the tensors: %s); map them "
                    "INPUT=TENSOR",
                    nfiles == 1 ? files[0]->path : "the weights files",
                    nfiles == 1 ? "the file" : "them", names[0] ? names : "none",
                    tensors[0] ? tensors : "none");
}

int co_weights_unused(const pl_graph *g, const ein_safetensors *const *files, int nfiles,
                      const co_weight_map *map, int nmap, ein_error *err)
{
    char names[300] = "";
    const char *first = NULL, *file = NULL;
    int n = 0;
    for (int f = 0; f < nfiles; f++)
        for (int t = 0; t < files[f]->ntensors; t++) {
            const char *name = files[f]->tensors[t].name;
            int used = pl_graph_find(g, name) >= 0 &&
                       pl_graph_node(g, pl_graph_find(g, name))->kind == PL_INPUT;
            for (int i = 0; i < nmap && !used; i++)
                used = !strcmp(map[i].tensor, name);
            if (used)
                continue;
            if (!first) {
                first = name;
                file = files[f]->path;
            }
            ein_msg_list_add(names, sizeof names, name);
            n++;
        }
    if (!n)
        return 0;
    return ein_fail(err, EIN_EINVAL, "%s: tensor '%s' is bound to no input of the program "
                    "(%d unused: %s); a program that does not match its checkpoint (another "
                    "num_hidden_layers, a bias or lm_head the config lacks) leaves tensors "
                    "unused: --allow-unused-weights runs anyway", file, first, n, names);
}

int co_weight_map_parse(const char *arg, co_weight_map *out, char **owned, ein_error *err)
{
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg || !eq[1])
        return ein_fail(err, EIN_EINVAL, "map '%s': expected INPUT=TENSOR", arg);
    char *s = strdup(arg);
    if (!s)
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    s[eq - arg] = '\0';
    out->input = s;
    out->tensor = s + (eq - arg) + 1;
    *owned = s;
    return 0;
}

void co_weights_files_free(ein_safetensors **files, int nfiles)
{
    for (int i = 0; files && i < nfiles; i++)
        ein_safetensors_free(files[i]);
    free(files);
}

int co_weights_load(const pl_graph *g, const char *const *paths, int npaths,
                    const char *const *maps, int nmaps, co_input_src *src, int *nbound,
                    ein_safetensors ***files, ein_error *err)
{
    return co_weights_load_ex(g, paths, npaths, maps, nmaps, 1, src, nbound, files, err);
}

int co_weights_load_ex(const pl_graph *g, const char *const *paths, int npaths,
                       const char *const *maps, int nmaps, int allow_unused, co_input_src *src,
                       int *nbound, ein_safetensors ***files, ein_error *err)
{
    int rc = 0;
    ein_safetensors **f = calloc((size_t)npaths + 1, sizeof *f);
    co_weight_map *m = calloc((size_t)nmaps + 1, sizeof *m);
    char **owned = calloc((size_t)nmaps + 1, sizeof *owned);
    *files = NULL;
    if (!f || !m || !owned) {
        rc = ein_fail(err, EIN_ENOMEM, "out of memory");
        goto done;
    }
    if (nmaps && !npaths) {
        rc = ein_fail(err, EIN_EINVAL, "map %s: no weights file to take it from", maps[0]);
        goto done;
    }
    for (int i = 0; i < npaths; i++)
        if ((rc = ein_safetensors_open(paths[i], &f[i], err)) < 0)
            goto done;
    for (int i = 0; i < nmaps; i++)
        if ((rc = co_weight_map_parse(maps[i], &m[i], &owned[i], err)) < 0)
            goto done;
    int n = 0;
    rc = co_weights_bind(g, (const ein_safetensors *const *)f, npaths, m, nmaps, src, &n, err);
    if (rc == 0 && n == 0 && npaths)
        rc = co_weights_none_bound(g, (const ein_safetensors *const *)f, npaths, err);
    if (rc == 0 && !allow_unused)
        rc = co_weights_unused(g, (const ein_safetensors *const *)f, npaths, m, nmaps, err);
    if (rc == 0 && nbound)
        *nbound = n;
done:
    for (int i = 0; owned && i < nmaps; i++)
        free(owned[i]);
    free(owned);
    free(m);
    if (rc == 0)
        *files = f;
    else
        co_weights_files_free(f, npaths);
    return rc;
}
