/* coordinator/run/ein_generate.c — generation through a session (the public
 * calls of include/einsummable/einsummable.h, "generation through a
 * session"): a prefill chunk, a decode step and the whole generate loop
 * over a program with the entry points and tensor names of es.llama
 * (docs/generation.md). */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/io/ein_rand.h"
#include "coordinator/compile/ein_compile_int.h"
#include "include/einsummable/einsummable.h"

/* The shape of tensor `name` of c's graph (rank 1 or 2 expected by the
 * caller), or EIN_EINVAL naming it. */
static int shape_of(const ein_compiled *c, const char *name, int rank, ein_dtype dt,
                    int64_t *dims, ein_error *err)
{
    const ein_graph *g = ein_compiled_graph(c);
    ein_error e = {0};
    ein_tensor t = ein_graph_find(g, name, &e);
    ein_tensor_desc d;
    if (t < 0 || ein_graph_tensor(g, t, NULL, &d, NULL, NULL) < 0 || d.rank != rank ||
        d.dtype != dt)
        return ein_fail(err, EIN_EINVAL, "generate: the program needs %s, a %s tensor of rank "
                        "%d (the names of docs/generation.md)", name, ein_dtype_name(dt), rank);
    for (int a = 0; a < rank; a++)
        dims[a] = d.shape[a];
    return 0;
}

/* Batch B, vocabulary V and, with `chunk`, prefill tokens per sequence C. */
static int geometry(ein_session *s, int64_t *B, int64_t *V, int64_t *C, ein_error *err)
{
    const ein_compiled *c = ein_session_compiled(s);
    int64_t d[2];
    int rc;
    if (!c)
        return ein_fail(err, EIN_EINVAL, "generate: NULL session");
    if ((rc = shape_of(c, "logits", 2, EIN_F32, d, err)) < 0)
        return rc;
    *B = d[0];
    *V = d[1];
    if (!C)
        return 0;
    if ((rc = shape_of(c, "logits_p", 2, EIN_F32, d, err)) < 0)
        return rc;
    if (*B <= 0 || d[0] % *B || d[1] != *V)
        return ein_fail(err, EIN_EINVAL, "generate: logits_p [%lld, %lld] is not [batch*C, "
                        "vocab] of logits [%lld, %lld]", (long long)d[0], (long long)d[1],
                        (long long)*B, (long long)*V);
    *C = d[0] / *B;
    return 0;
}

/* A run needs every input set: the inputs of the entry not run yet get
 * zeros (those the program has). */
static int fill_unset(ein_session *s, int64_t B, int64_t C, ein_error *err)
{
    const char *const names[5] = {"ids", "pos", "ids_p", "pos_p", "rpos_p"};
    const int64_t counts[5] = {B, B, B * C, B, B * C};
    int32_t *z = NULL;
    int rc = 0;
    for (int i = 0; i < 5 && rc == 0; i++) {
        if (ein_session_input_is_set(s, names[i]) != 0)
            continue;   /* set, or not an input */
        if (!z && !(z = calloc((size_t)(B * C + B), sizeof *z)))
            return ein_fail(err, EIN_ENOMEM, "out of memory");
        rc = ein_session_set_input(s, names[i], z, sizeof(int32_t) * (size_t)counts[i], err);
    }
    free(z);
    return rc;
}

int ein_session_decode_step(ein_session *s, const int32_t *ids, const int32_t *pos, int batch,
                            float *logits, size_t nlogits, ein_error *err)
{
    int64_t B, V, C;
    int rc = geometry(s, &B, &V, &C, err);
    if (rc < 0 || (rc = fill_unset(s, B, C, err)) < 0)
        return rc;
    if (batch != B || !ids || !pos || !logits || nlogits != (size_t)(B * V))
        return ein_fail(err, EIN_EINVAL, "decode_step: batch %d and %zu logits given; the "
                        "program's are %lld and %lld x %lld", batch, nlogits, (long long)B,
                        (long long)B, (long long)V);
    size_t ni = sizeof(int32_t) * (size_t)B;
    if ((rc = ein_session_set_input(s, "ids", ids, ni, err)) < 0 ||
        (rc = ein_session_set_input(s, "pos", pos, ni, err)) < 0 ||
        (rc = ein_session_run_entry(s, "decode", 1, NULL, err)) < 0)
        return rc;
    return ein_session_get_output(s, "logits", logits, sizeof(float) * nlogits, NULL, err);
}

int ein_session_prefill(ein_session *s, const int32_t *ids, const int32_t *pos, int batch,
                        float *logits, size_t nlogits, ein_error *err)
{
    int64_t B, V, C;
    int rc = geometry(s, &B, &V, &C, err);
    if (rc < 0 || (rc = fill_unset(s, B, C, err)) < 0)
        return rc;
    if (batch != B || !ids || !pos || (logits && nlogits != (size_t)(B * C * V)))
        return ein_fail(err, EIN_EINVAL, "prefill: batch %d and %zu logits given; the "
                        "program's are %lld and %lld x %lld", batch, nlogits, (long long)B,
                        (long long)(B * C), (long long)V);
    int32_t *rp = malloc(sizeof *rp * (size_t)(B * C));
    if (!rp)
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    for (int64_t i = 0; i < B * C; i++)
        rp[i] = pos[i / C] + (int32_t)(i % C);
    if ((rc = ein_session_set_input(s, "ids_p", ids, sizeof(int32_t) * (size_t)(B * C), err)) ==
            0 &&
        (rc = ein_session_set_input(s, "pos_p", pos, sizeof(int32_t) * (size_t)B, err)) == 0 &&
        ein_session_input_is_set(s, "rpos_p") >= 0)
        rc = ein_session_set_input(s, "rpos_p", rp, sizeof(int32_t) * (size_t)(B * C), err);
    free(rp);
    if (rc == 0)
        rc = ein_session_run_entry(s, "prefill", logits != NULL, NULL, err);
    if (rc == 0 && logits)
        rc = ein_session_get_output(s, "logits_p", logits, sizeof(float) * nlogits, NULL, err);
    return rc;
}

void ein_generate_options_init(ein_generate_options *o)
{
    memset(o, 0, sizeof *o);
    o->max_new_tokens = 32;
}

/* One token from logits[0..V): greedy at temperature 0, else sampled from
 * softmax(logits / temperature) over the top_k most likely (0: all). */
static int32_t pick(const float *lg, int64_t V, const ein_generate_options *o, uint64_t *rng,
                    double *p)
{
    int64_t best = 0;
    for (int64_t v = 1; v < V; v++)
        if (lg[v] > lg[best])
            best = v;
    if (!(o->temperature > 0))
        return (int32_t)best;
    double cut = -INFINITY;
    if (o->top_k > 0 && o->top_k < V) {
        /* the k-th largest: count how many are above each candidate */
        for (int64_t v = 0; v < V; v++) {
            int64_t above = 0;
            for (int64_t u = 0; u < V && above < o->top_k; u++)
                above += lg[u] > lg[v];
            if (above < o->top_k && (cut == -INFINITY || lg[v] < cut))
                cut = lg[v];
        }
    }
    double sum = 0;
    for (int64_t v = 0; v < V; v++) {
        p[v] = lg[v] >= cut ? exp(((double)lg[v] - lg[best]) / o->temperature) : 0;
        sum += p[v];
    }
    double r = (double)(ein_rand_next(rng) >> 11) / 9007199254740992.0 * sum;
    for (int64_t v = 0; v < V; v++) {
        if (r < p[v])
            return (int32_t)v;
        r -= p[v];
    }
    return (int32_t)best;
}

int ein_session_generate(ein_session *s, const int32_t *const *prompts, const int *lens,
                         int batch, const ein_generate_options *opts, int32_t *const *out,
                         int *nout, ein_error *err)
{
    ein_generate_options o;
    if (opts)
        o = *opts;
    else
        ein_generate_options_init(&o);
    int64_t B, V, C;
    int rc = geometry(s, &B, &V, &C, err);
    if (rc < 0)
        return rc;
    if (batch != B || !prompts || !lens || !out || !nout || o.max_new_tokens < 0 ||
        !(o.temperature >= 0) || o.top_k < 0 || o.neos < 0 || (o.neos && !o.eos))
        return ein_fail(err, EIN_EINVAL, "generate: %d prompts for a batch of %lld, or a NULL "
                        "array, or options out of range", batch, (long long)B);
    const pl_graph *g = ein_session_compiled(s)->g;
    int64_t S = -1;   /* the cache length: the first state's rows */
    for (int v = 0; v < g->nnodes && S < 0; v++) {
        const pl_node *nd = pl_graph_node(g, v);
        if (nd->kind == PL_INPUT && nd->state && nd->rank == 4)
            S = nd->shape[2];
    }
    for (int b = 0; b < batch; b++) {
        if (!prompts[b] || lens[b] < 1)
            return ein_fail(err, EIN_EINVAL, "generate: prompt %d is empty", b);
        if (S > 0 && lens[b] + o.max_new_tokens > S)
            return ein_fail(err, EIN_EINVAL, "generate: prompt %d: %d tokens + %d new ones "
                            "exceed the cache length %lld", b, lens[b], o.max_new_tokens,
                            (long long)S);
        for (int i = 0; i < lens[b]; i++)
            if (prompts[b][i] < 0 || prompts[b][i] >= V)
                return ein_fail(err, EIN_EINVAL, "generate: prompt %d token %d is %d, outside "
                                "[0, %lld)", b, i, prompts[b][i], (long long)V);
    }
    int32_t *ids = calloc((size_t)(B * C + B), sizeof *ids), *pos = calloc((size_t)B, sizeof *pos);
    float *lg = malloc(sizeof *lg * (size_t)(B * V));
    double *p = malloc(sizeof *p * (size_t)V);
    int *done = calloc((size_t)B, sizeof *done);
    if (!ids || !pos || !lg || !p || !done) {
        rc = ein_fail(err, EIN_ENOMEM, "out of memory");
        goto out;
    }

    /* Prefill every prompt token but the last, in chunks (es.llama's rule:
     * chunk k starts at k*C, or earlier where the prompt ends sooner, at 0
     * for a prompt shorter than a chunk). */
    int most = 0;
    for (int b = 0; b < batch; b++) {
        most = lens[b] - 1 > most ? lens[b] - 1 : most;
        nout[b] = 0;
        done[b] = o.max_new_tokens == 0;
    }
    for (int k = 0; rc == 0 && (int64_t)k * C < most; k++) {
        for (int b = 0; b < batch; b++) {
            int64_t n = lens[b] - 1, st = (int64_t)k * C;
            if (st > n - C)
                st = n - C > 0 ? n - C : 0;
            pos[b] = (int32_t)st;
            for (int64_t t = 0; t < C; t++)
                ids[b * C + t] = st + t < lens[b] ? prompts[b][st + t] : 0;
        }
        rc = ein_session_prefill(s, ids, pos, batch, NULL, 0, err);
    }
    uint64_t rng = o.seed;
    for (int step = 0; rc == 0; step++) {
        int left = 0;
        for (int b = 0; b < batch; b++)
            left += !done[b];
        if (!left)
            break;
        for (int b = 0; b < batch; b++) {
            ids[b] = done[b] ? 0 : nout[b] ? out[b][nout[b] - 1] : prompts[b][lens[b] - 1];
            pos[b] = lens[b] - 1 + step;
        }
        if ((rc = ein_session_decode_step(s, ids, pos, batch, lg, (size_t)(B * V), err)) < 0)
            break;
        for (int b = 0; b < batch; b++) {
            if (done[b])
                continue;
            int32_t tok = pick(lg + (size_t)b * (size_t)V, V, &o, &rng, p);
            out[b][nout[b]++] = tok;
            done[b] = nout[b] >= o.max_new_tokens;
            for (int e = 0; e < o.neos; e++)
                done[b] |= tok == o.eos[e];
        }
    }
out:
    free(ids);
    free(pos);
    free(lg);
    free(p);
    free(done);
    return rc;
}
