/* examples/ffn_api.c — the paper's §2 feed-forward network, built with the
 * public C API and planned for 4 devices:
 *
 *     Y = ReLU(X W1) W2,  X: [tokens, d_model], W1: [d_model, d_ff],
 *                         W2: [d_ff, d_model]
 *
 * Build: part of `make check` (examples/ffn_api); run: examples/ffn_api [P]. */
#include <stdio.h>
#include <stdlib.h>

#include "include/einsummable/einsummable.h"

int main(int argc, char **argv)
{
    const int64_t tokens = 8192, d_model = 4096, d_ff = 14336;
    int devices = argc > 1 ? atoi(argv[1]) : 4;
    ein_error err = {0};
    ein_plan *plan = NULL;
    int rc = 1;

    ein_graph *graph = ein_graph_create();
    if (!graph)
        return 1;
    ein_tensor_desc dx = ein_tensor_desc_2d(tokens, d_model, EIN_F32);
    ein_tensor_desc dw1 = ein_tensor_desc_2d(d_model, d_ff, EIN_F32);
    ein_tensor_desc dw2 = ein_tensor_desc_2d(d_ff, d_model, EIN_F32);
    dx.dim_names[0] = "tokens", dx.dim_names[1] = "d_model";
    dw1.dim_names[0] = "d_model", dw1.dim_names[1] = "d_ff";
    dw2.dim_names[0] = "d_ff", dw2.dim_names[1] = "d_model";
    ein_tensor x = ein_graph_insert_tensor(graph, "x", dx, &err);
    ein_tensor w1 = ein_graph_insert_tensor(graph, "w1", dw1, &err);
    ein_tensor w2 = ein_graph_insert_tensor(graph, "w2", dw2, &err);
    ein_tensor act = ein_graph_matmul(graph, "act", x, w1, &err);
    ein_tensor hidden = ein_graph_unary(graph, "hidden", "relu", 0.0, act, &err);
    ein_tensor y = ein_graph_matmul(graph, "y", hidden, w2, &err);
    if (x < 0 || w1 < 0 || w2 < 0 || act < 0 || hidden < 0 || y < 0 ||
        ein_graph_save(graph, y, &err) < 0) {
        fprintf(stderr, "ffn_api: %s\n", err.msg);
        goto done;
    }
    if (ein_graph_plan(graph, devices, NULL, &plan, &err) < 0) {
        fprintf(stderr, "ffn_api: %s\n", err.msg);
        goto done;
    }
    printf("FFN on %d devices: total cost %.0f elements\n", devices, ein_plan_total_cost(plan));
    for (int i = 0; i < ein_plan_nops(plan); i++) {
        const char *name, *op;
        char split[256];
        double r, j, a;
        ein_plan_op(plan, i, &name, &op, split, sizeof split, &r, &j, &a);
        printf("  %-8s %-8s %-30s repartition %.0f join %.0f aggregation %.0f\n", name, op,
               split, r, j, a);
    }
    rc = 0;
done:
    ein_plan_free(plan);
    ein_graph_destroy(graph);
    return rc;
}
