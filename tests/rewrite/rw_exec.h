/* tests/rewrite/rw_exec.h — run a whole pl_graph on the CPU reference
 * kernels (kn_cpu_run), one buffer per node, f32 inputs drawn from a seed
 * and the input's name (so two graphs with the same inputs see the same
 * data). Returns the saved output `name` (malloc'd, caller frees) or NULL. */
#ifndef RW_EXEC_H
#define RW_EXEC_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kn_cpu.h"
#include "planner/pl_graph.h"

static int64_t rw_exec_vol(const pl_node *n)
{
    int64_t v = 1;
    for (int i = 0; i < n->rank; i++)
        v *= n->shape[i];
    return v;
}

static float *rw_exec_run(const pl_graph *g, const char *name, uint64_t seed, int64_t *vol)
{
    float **buf = calloc((size_t)g->nnodes, sizeof *buf);
    float *res = NULL;
    ein_error err = {0};
    for (int i = 0; i < g->nnodes; i++) {
        const pl_node *n = &g->nodes[i];
        int64_t v = rw_exec_vol(n);
        buf[i] = malloc((size_t)v * sizeof(float));
        if (n->kind == PL_INPUT) {
            uint64_t h = seed * 0x9e3779b97f4a7c15ull + 1;
            for (const char *c = n->name; *c; c++)
                h = (h ^ (uint8_t)*c) * 1099511628211ull;
            for (int64_t k = 0; k < v; k++) {
                h ^= h << 13, h ^= h >> 7, h ^= h << 17;
                buf[i][k] = (float)((double)(h >> 11) / 9007199254740992.0 - 0.5);
            }
            continue;
        }
        kn_block ins[PL_MAX_INPUTS], out;
        for (int k = 0; k < n->ninputs; k++) {
            const pl_node *x = &g->nodes[n->inputs[k]];
            ins[k].data = buf[n->inputs[k]];
            ins[k].dtype = EIN_F32;
            ins[k].box = ein_box_of_shape(x->rank, x->shape);
        }
        out.data = buf[i];
        out.dtype = EIN_F32;
        out.box = ein_box_of_shape(n->rank, n->shape);
        if (kn_cpu_run(&n->kernel, ins, n->ninputs, &out, &err) < 0)
            goto out;
    }
    int id = pl_graph_find(g, name);
    if (id >= 0) {
        *vol = rw_exec_vol(&g->nodes[id]);
        res = buf[id];
        buf[id] = NULL;
    }
out:
    for (int i = 0; i < g->nnodes; i++)
        free(buf[i]);
    free(buf);
    return res;
}

#endif
