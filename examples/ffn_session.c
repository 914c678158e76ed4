/* examples/ffn_session.c — the paper's FFN through the installed library:
 * build the graph, compile it for 4 devices, run it 3 times with new
 * inputs in one session (the weights stay on the devices), print a
 * checksum of each result. Outside the source tree:
 *
 *     export PKG_CONFIG_PATH=$HOME/ein/lib/pkgconfig   (the --prefix of make install)
 *     cc ffn_session.c $(pkg-config --cflags --libs einsummable) \
 *         -Wl,-rpath,$(pkg-config --variable=libdir einsummable) -o ffn_session
 *     ./ffn_session
 *
 * The rpath lets the program find libeinsummable.so where it was installed
 * (without it, outside /usr/lib, it exits 127: "cannot open shared object
 * file"); LD_LIBRARY_PATH=$HOME/ein/lib would do the same.
 */
#include <stdio.h>
#include <stdlib.h>

#include <einsummable/einsummable.h>

enum { TOKENS = 64, D_MODEL = 32, D_FF = 128 };

static void fill(float *a, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        a[i] = (float)(seed >> 8) / (float)(1u << 24) - 0.5f;
    }
}

int main(void)
{
    ein_error err = {0};
    ein_graph *g = ein_graph_create();
    if (!g)
        return 1;
    ein_tensor x = ein_graph_insert_tensor(g, "x", ein_tensor_desc_2d(TOKENS, D_MODEL, EIN_F32), &err);
    ein_tensor w1 = ein_graph_insert_tensor(g, "w1", ein_tensor_desc_2d(D_MODEL, D_FF, EIN_F32), &err);
    ein_tensor w2 = ein_graph_insert_tensor(g, "w2", ein_tensor_desc_2d(D_FF, D_MODEL, EIN_F32), &err);
    ein_tensor act = ein_graph_matmul(g, "act", x, w1, &err);
    ein_tensor hidden = ein_graph_unary(g, "hidden", "relu", 0.0, act, &err);
    ein_tensor y = ein_graph_matmul(g, "y", hidden, w2, &err);
    if (y < 0 || ein_graph_save(g, y, &err) < 0) {
        fprintf(stderr, "ffn_session: %s\n", err.msg);
        return 1;
    }
    ein_compiled *prog = NULL;
    ein_session *s = NULL;
    if (ein_compile(g, 4, NULL, &prog, &err) < 0 || ein_session_open(prog, NULL, &s, &err) < 0) {
        fprintf(stderr, "ffn_session: %s\n", err.msg);
        return 1;
    }
    static float xv[TOKENS * D_MODEL], w1v[D_MODEL * D_FF], w2v[D_FF * D_MODEL];
    static float yv[TOKENS * D_MODEL];
    fill(w1v, sizeof w1v / sizeof *w1v, 1);
    fill(w2v, sizeof w2v / sizeof *w2v, 2);
    int rc = ein_session_set_input(s, "w1", w1v, sizeof w1v, &err);
    if (rc == 0)
        rc = ein_session_set_input(s, "w2", w2v, sizeof w2v, &err);
    for (int run = 0; rc == 0 && run < 3; run++) {
        fill(xv, sizeof xv / sizeof *xv, 100u + (unsigned)run);
        if ((rc = ein_session_set_input(s, "x", xv, sizeof xv, &err)) < 0 ||
            (rc = ein_session_run(s, NULL, &err)) < 0 ||
            (rc = ein_session_get_output(s, "y", yv, sizeof yv, NULL, &err)) < 0)
            break;
        double sum = 0;
        for (size_t i = 0; i < sizeof yv / sizeof *yv; i++)
            sum += yv[i];
        printf("run %d: y [%d, %d] checksum %.6f\n", run, TOKENS, D_MODEL, sum);
    }
    if (rc < 0)
        fprintf(stderr, "ffn_session: %s\n", err.msg);
    ein_session_close(s, NULL);
    ein_compiled_free(prog);
    ein_graph_destroy(g);
    return rc < 0;
}
