/* tests/api/test_generate_api.c — generation through the C session API
 * (ein_session_prefill, ein_session_decode_step, ein_session_generate):
 * a tiny attention model with es.llama's entry points and names, on 1 and
 * 2 CPU devices. ein_session_generate (prompts prefilled in chunks of 3,
 * then one token per run at each sequence's own position) gives the same
 * greedy ids as a token-by-token loop of decode steps in lockstep; an eos
 * id stops its sequence; a seed makes sampling reproducible; bad
 * arguments are refused. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "include/einsummable/einsummable.h"
#include "tests/e2e/e2e_util.h"

enum { V = 11, DM = 8, D = 4, KV = 2, B = 2, C = 3, S = 24, NEW = 6 };

/* ids -> embedding x -> heads (q = k = v = x's heads) -> cache_write,
 * decode_attention -> merge -> logits = (x + attention) embed^T. */
static void part(ein_graph *g, ein_tensor embed, ein_tensor kc, ein_tensor vc, int c,
                 const char *sfx)
{
    ein_error err = {0};
    char n[32];
    snprintf(n, sizeof n, "ids%s", sfx);
    ein_tensor ids = ein_graph_insert_tensor(g, n, ein_tensor_desc_1d(B * c, EIN_I32), &err);
    snprintf(n, sizeof n, "pos%s", sfx);
    ein_tensor pos = ein_graph_insert_tensor(g, n, ein_tensor_desc_1d(B, EIN_I32), &err);
    ein_tensor x = ein_graph_embedding(g, NULL, embed, ids, &err);
    ein_tensor h = ein_graph_split_heads(g, NULL, x, D, &err);
    ein_tensor kw = ein_graph_cache_write(g, NULL, kc, h, pos, &err);
    ein_tensor vw = ein_graph_cache_write(g, NULL, vc, h, pos, &err);
    ein_tensor a = ein_graph_decode_attention(g, NULL, h, kw, vw, pos, &err);
    ein_tensor m = ein_graph_merge_heads(g, NULL, a, &err);
    ein_tensor y = ein_graph_binary(g, NULL, "add", x, m, &err);
    snprintf(n, sizeof n, "logits%s", sfx);
    ein_tensor lg = ein_graph_einsum(g, n, "ij,kj->ik", y, embed, &err);
    if (lg < 0 || ein_graph_save(g, lg, &err) < 0)
        fail_msg("graph: %s", err.msg);
}

static ein_session *open_model(int ndev, ein_compiled **cout)
{
    ein_error err = {0};
    ein_graph *g = ein_graph_create();
    ein_tensor embed = ein_graph_insert_tensor(g, "embed", ein_tensor_desc_2d(V, DM, EIN_F32),
                                               &err);
    ein_tensor_desc cd = {.rank = 4, .shape = {KV, B, S, D}, .dtype = EIN_F32};
    ein_tensor kc = ein_graph_state(g, "kcache", cd, &err);
    ein_tensor vc = ein_graph_state(g, "vcache", cd, &err);
    part(g, embed, kc, vc, 1, "");
    part(g, embed, kc, vc, C, "_p");
    ein_compile_options co;
    ein_compile_options_init(&co);
    co.no_reuse = 1;
    ein_compiled *c = NULL;
    if (ein_compile(g, ndev, &co, &c, &err) < 0)
        fail_msg("compile: %s", err.msg);
    ein_graph_destroy(g);
    const char *dec[1] = {"logits"}, *pre[1] = {"logits_p"};
    if (ein_compiled_add_entry(c, "decode", dec, 1, &err) < 0 ||
        ein_compiled_add_entry(c, "prefill", pre, 1, &err) < 0)
        fail_msg("add_entry: %s", err.msg);
    ein_session *s = NULL;
    if (ein_session_open(c, NULL, &s, &err) < 0)
        fail_msg("open: %s", err.msg);
    float w[V * DM];
    unsigned seed = 7;
    for (int i = 0; i < V * DM; i++) {
        seed = seed * 1103515245u + 12345u;
        w[i] = (float)((seed >> 16) % 2001) / 1000.0f - 1.0f;
    }
    if (ein_session_set_input(s, "embed", w, sizeof w, &err) < 0)
        fail_msg("set: %s", err.msg);
    *cout = c;
    return s;
}

static int argmax(const float *x)
{
    int best = 0;
    for (int v = 1; v < V; v++)
        if (x[v] > x[best])
            best = v;
    return best;
}

static void generate_on(int ndev)
{
    ein_compiled *c = NULL;
    ein_session *s = open_model(ndev, &c);
    ein_error err = {0};
    const int32_t p0[8] = {1, 4, 2, 9, 3, 7, 5, 8}, p1[2] = {6, 2};
    const int32_t *prompts[B] = {p0, p1};
    const int lens[B] = {8, 2};
    /* Token by token: decode steps in lockstep (prompt tokens, then the
     * greedy ones), one sequence's position for all. */
    int32_t want[B][NEW];
    int nwant[B] = {0, 0};
    float lg[B * V];
    for (int t = 0; nwant[0] < NEW || nwant[1] < NEW; t++) {
        int32_t ids[B], pos[B] = {t, t};
        for (int b = 0; b < B; b++)
            ids[b] = t < lens[b] ? prompts[b][t] : t - lens[b] < nwant[b] ? want[b][t - lens[b]]
                                                                          : 0;
        if (ein_session_decode_step(s, ids, pos, B, lg, B * V, &err) < 0)
            fail_msg("decode_step: %s", err.msg);
        for (int b = 0; b < B; b++)
            if (t >= lens[b] - 1 && nwant[b] < NEW)
                want[b][nwant[b]++] = argmax(lg + b * V);
    }
    int32_t o0[NEW], o1[NEW];
    int32_t *out[B] = {o0, o1};
    int nout[B];
    ein_generate_options o;
    ein_generate_options_init(&o);
    o.max_new_tokens = NEW;
    if (ein_session_generate(s, prompts, lens, B, &o, out, nout, &err) < 0)
        fail_msg("generate on %d devices: %s", ndev, err.msg);
    for (int b = 0; b < B; b++) {
        assert_int_equal(nout[b], NEW);
        for (int i = 0; i < NEW; i++)
            if (out[b][i] != want[b][i])
                fail_msg("%d devices: prompt %d new id %d is %d, token by token %d", ndev, b, i,
                         out[b][i], want[b][i]);
    }
    /* an eos id stops its sequence, kept as its last id */
    int32_t eos = want[0][2];
    o.eos = &eos;
    o.neos = 1;
    assert_int_equal(ein_session_generate(s, prompts, lens, B, &o, out, nout, &err), 0);
    assert_true(nout[0] <= 3 && out[0][nout[0] - 1] == eos);
    /* sampling: the same seed the same ids */
    o.neos = 0;
    o.temperature = 1.0;
    o.top_k = 4;
    o.seed = 3;
    int32_t a0[NEW], a1[NEW];
    int32_t *again[B] = {a0, a1};
    int nagain[B];
    assert_int_equal(ein_session_generate(s, prompts, lens, B, &o, out, nout, &err), 0);
    assert_int_equal(ein_session_generate(s, prompts, lens, B, &o, again, nagain, &err), 0);
    for (int b = 0; b < B; b++)
        assert_memory_equal(out[b], again[b], sizeof(int32_t) * (size_t)NEW);
    /* refused: another batch, a prompt too long for the cache, a bad id */
    assert_int_equal(ein_session_generate(s, prompts, lens, 1, &o, out, nout, &err), EIN_EINVAL);
    o.max_new_tokens = S;
    assert_int_equal(ein_session_generate(s, prompts, lens, B, &o, out, nout, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "cache length"));
    o.max_new_tokens = 2;
    const int32_t bad[2] = {6, V};
    const int32_t *bp[B] = {p0, bad};
    assert_int_equal(ein_session_generate(s, bp, lens, B, &o, out, nout, &err), EIN_EINVAL);
    ein_session_close(s, &err);
    ein_compiled_free(c);
}

static void test_generate_1(void **state) { (void)state; generate_on(1); }
static void test_generate_2(void **state) { (void)state; generate_on(2); }

int main(void)
{
    setenv("EINWORKER", e2e_bin("einworker"), 1);
    e2e_scratch();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_generate_1),
        cmocka_unit_test(test_generate_2),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
