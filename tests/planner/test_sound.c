/* tests/planner/test_sound.c — soundness of every operator's join-agg
 * specs, tested generically (DESIGN.md "Contracts").
 *
 * For every operator, random shapes (sizes not divisible by p, odd sizes,
 * position-restricted indices), every p in 1..8 and every spec the operator
 * produces: check that the spec has prod(counts) = p function
 * specifications, or the same k < p for every spec when the operator cannot
 * be split p ways (issue 15: it runs on devices 0..k-1), and that its
 * distinct output types tile the output; then
 * join (run the CPU reference kernel on each function specification's
 * projected blocks), aggregate outputs of equal type with the spec's op,
 * recompose, and compare with the un-decomposed operator. The number of
 * (op, shape, p, spec) cases is printed as a TAP comment. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kernels/kn_cpu.h"
#include "planner/pl_spec.h"

#define SHAPES 60   /* random shapes per operator */

static uint64_t rng = 0x5eed;
static long total_cases;
static long small_cases;    /* of which specs of k < p parts */

static uint64_t rnd(void)
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static int64_t rint_in(int64_t lo, int64_t hi)     /* [lo, hi] */
{
    return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1));
}

static float *rand_data(int64_t n)
{
    float *d = malloc(sizeof(float) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++)
        d[i] = (float)((double)(rnd() % 2000001) / 1000000.0 - 1.0);
    return d;
}

static int64_t nvol(const pl_node *n)
{
    ein_box b = ein_box_of_shape(n->rank, n->shape);
    return ein_box_volume(&b);
}

/* Run the whole operator once: the reference. */
static float *run_whole(const pl_graph *g, int node, float **in)
{
    const pl_node *nd = pl_graph_node(g, node);
    kn_block ins[PL_MAX_INPUTS];
    for (int k = 0; k < nd->ninputs; k++) {
        const pl_node *u = pl_graph_node(g, nd->inputs[k]);
        ins[k] = (kn_block){.data = in[k], .dtype = u->dtype,
                            .box = ein_box_of_shape(u->rank, u->shape)};
    }
    float *want = calloc((size_t)nvol(nd), sizeof(float));
    kn_block out = {.data = want, .dtype = EIN_F32, .box = ein_box_of_shape(nd->rank, nd->shape)};
    ein_error err = {0};
    if (kn_cpu_run(&nd->kernel, ins, nd->ninputs, &out, &err) < 0)
        fail_msg("%s: the whole operator failed: %s", nd->name, err.msg);
    return want;
}

/* The distinct output types tile the output. */
static void check_tiling(const pl_node *nd, const pl_spec *s)
{
    ein_box whole = ein_box_of_shape(nd->rank, nd->shape);
    pl_tiling t;
    assert_int_equal(pl_tiling_of_outputs(s, &t), 0);
    int64_t vol = 0;
    for (int i = 0; i < t.n; i++) {
        if (!ein_box_contains(&whole, &t.boxes[i]))
            fail_msg("%s: output block outside the output", nd->name);
        vol += ein_box_volume(&t.boxes[i]);
        for (int j = i + 1; j < t.n; j++)
            if (ein_box_intersect(&t.boxes[i], &t.boxes[j], NULL))
                fail_msg("%s: two output types overlap", nd->name);
    }
    if (vol != ein_box_volume(&whole))
        fail_msg("%s: output types cover %lld of %lld elements", nd->name, (long long)vol,
                 (long long)ein_box_volume(&whole));
    pl_tiling_clear(&t);
}

/* Join, aggregate, recompose; compare with want. */
static void check_spec(const pl_graph *g, int node, const pl_spec *s, float **in,
                       const float *want)
{
    const pl_node *nd = pl_graph_node(g, node);
    ein_box whole = ein_box_of_shape(nd->rank, nd->shape);
    int64_t nout = ein_box_volume(&whole);
    float *got = calloc((size_t)nout, sizeof(float));
    int *hits = calloc((size_t)nout, sizeof(int));
    ein_error err = {0};
    char spec[256];
    pl_index idx[PL_MAX_INDICES];
    pl_op_indices(g, node, idx, NULL);
    pl_spec_format_labels(s, idx, spec, sizeof spec);
    /* LSE (attention's key blocks): partials over ein_agg_box, merged by
     * kn_cpu_agg_lse in their own array, rows cut out at the end. */
    int lse = s->agg == EIN_AGG_LSE;
    ein_box wholex = ein_agg_box(s->agg, &whole);
    float *gotx = lse ? calloc((size_t)ein_box_volume(&wholex), sizeof(float)) : NULL;
    if (lse && nd->kernel.kind != EIN_KERNEL_ATTENTION &&
        nd->kernel.kind != EIN_KERNEL_DECODE_ATTENTION)
        fail_msg("%s [%s]: lse aggregation on a %s", nd->name, spec,
                 ein_kernel_kind_name(nd->kernel.kind));
    for (int f = 0; f < s->nparts; f++) {
        kn_block ins[PL_MAX_INPUTS];
        for (int k = 0; k < nd->ninputs; k++) {
            const pl_node *u = pl_graph_node(g, nd->inputs[k]);
            ein_box ub = ein_box_of_shape(u->rank, u->shape);
            const ein_box *b = &s->f[f].in[k];
            if (!ein_box_empty(b) && !ein_box_contains(&ub, b))
                fail_msg("%s [%s]: input %d block outside the input", nd->name, spec, k);
            ins[k].dtype = u->dtype; /* f32, or i32 ids: 4 bytes each */
            ins[k].box = *b;
            ins[k].data = malloc(sizeof(float) * (size_t)ein_box_volume(b) + 4);
            if (!ein_box_empty(b))
                ein_box_copy(ins[k].data, b, in[k], &ub, b, sizeof(float));
        }
        if (ein_box_empty(&s->f[f].out))
            fail_msg("%s [%s]: function specification %d has an empty output", nd->name, spec, f);
        kn_block out = {.dtype = EIN_F32, .box = ein_agg_box(s->agg, &s->f[f].out)};
        int64_t n = ein_box_volume(&out.box);
        out.data = malloc(sizeof(float) * (size_t)n + 4);
        ein_kernel kern = nd->kernel;
        int nin = nd->ninputs;
        if (lse && nd->kernel.kind == EIN_KERNEL_DECODE_ATTENTION) {
            kern.kind = EIN_KERNEL_DECODE_ATTENTION_PARTIAL;
        } else if (lse) {
            kern.kind = EIN_KERNEL_ATTENTION_PARTIAL;
            if (ein_box_empty(&s->f[f].in[1]) != ein_box_empty(&s->f[f].in[2]))
                fail_msg("%s [%s]: k and v blocks differ in emptiness", nd->name, spec);
            if (ein_box_empty(&s->f[f].in[1]))
                nin = 1;
        }
        if (kn_cpu_run(&kern, ins, nin, &out, &err) < 0)
            fail_msg("%s [%s]: function specification %d failed: %s", nd->name, spec, f, err.msg);
        /* Aggregate with the spec's op into the recomposed result. */
        float *blk = malloc(sizeof(float) * (size_t)n + 4);
        if (!lse)
            ein_box_copy(blk, &out.box, got, &whole, &out.box, sizeof(float));
        int fresh = 1;
        for (int e = 0; e < f && fresh; e++)
            fresh = !ein_box_equal(&s->f[e].out, &s->f[f].out);
        if (!fresh && s->agg == EIN_AGG_NONE)
            fail_msg("%s [%s]: output type repeated but no aggregation", nd->name, spec);
        if (lse) {
            kn_block acc = {.data = blk, .dtype = EIN_F32, .box = out.box};
            ein_box_copy(blk, &out.box, gotx, &wholex, &out.box, sizeof(float));
            kn_block two[2] = {acc, out};
            if (fresh)
                memcpy(blk, out.data, sizeof(float) * (size_t)n);
            else if (kn_cpu_agg_lse(two, 2, &acc, &err) < 0)
                fail_msg("%s [%s]: merge failed: %s", nd->name, spec, err.msg);
            ein_box_copy(gotx, &wholex, blk, &out.box, &out.box, sizeof(float));
            free(blk);
            free(out.data);
            for (int k = 0; k < nd->ninputs; k++)
                free(ins[k].data);
            continue;
        }
        for (int64_t i = 0; i < n; i++) {
            float v = ((float *)out.data)[i];
            blk[i] = fresh ? v : s->agg == EIN_AGG_MAX ? fmaxf(blk[i], v) : blk[i] + v;
        }
        ein_box_copy(got, &whole, blk, &out.box, &out.box, sizeof(float));
        free(blk);
        free(out.data);
        for (int k = 0; k < nd->ninputs; k++)
            free(ins[k].data);
    }
    if (lse) {
        ein_box_copy(got, &whole, gotx, &wholex, &whole, sizeof(float));
        free(gotx);
    }
    for (int64_t i = 0; i < nout; i++) {
        double d = fabs((double)got[i] - (double)want[i]);
        if (!(d <= 1e-4 + 1e-4 * fabs((double)want[i]))) /* NaN fails too */
            fail_msg("%s [%s] p=%d: element %lld is %g, expected %g", nd->name, spec, s->nparts,
                     (long long)i, (double)got[i], (double)want[i]);
    }
    free(got);
    free(hits);
}

/* Every p in 1..8 and every spec of `node`; returns the cases run. */
static long check_all(const pl_graph *g, int node)
{
    const pl_node *nd = pl_graph_node(g, node);
    float *in[PL_MAX_INPUTS];
    for (int k = 0; k < nd->ninputs; k++) {
        const pl_node *u = pl_graph_node(g, nd->inputs[k]);
        in[k] = rand_data(nvol(u));
        /* ids of an embedding, positions of a cache (kernel.rows: its
         * length), of an attention over one, or of rope_at: valid ones */
        int64_t rows = nd->kernel.rows;
        if (nd->kind == PL_DECODE_ATTENTION)
            rows = pl_graph_node(g, nd->inputs[1])->shape[2];
        if (nd->kind == PL_CACHE_WRITE) /* a chunk of C tokens fits from pos on */
            rows -= pl_graph_node(g, nd->inputs[1])->shape[1] / nd->shape[1] - 1;
        if (nd->kind == PL_ROPE_AT)
            rows = 100;
        if (nd->kind == PL_DECODE_ATTENTION && nd->kernel.window > 0)
            /* a windowed chunk of C tokens at pos sits inside the cache
             * (cache_write's rule), else its last rows see no key */
            rows -= nd->shape[1] / pl_graph_node(g, nd->inputs[1])->shape[1] - 1;
        if (u->dtype == EIN_I32)
            for (int64_t i = 0; i < nvol(u); i++) {
                int32_t id = (int32_t)rint_in(0, rows - 1);
                memcpy(&in[k][i], &id, sizeof id);
            }
    }
    float *want = run_whole(g, node, in);
    long cases = 0;
    ein_error err = {0};
    for (int p = 1; p <= 8; p++) {
        pl_spec *specs;
        int n;
        assert_int_equal(pl_spec_enumerate(g, node, p, &specs, &n, &err), 0);
        /* Every operator has specs for every p: p parts when it can be
         * split p ways, else the largest k < p (k = 1 at least). */
        if (n < 1)
            fail_msg("%s p=%d: no spec", nd->name, p);
        for (int i = 0; i < n; i++) {
            int64_t prod = 1;
            for (int j = 0; j < specs[i].nidx; j++)
                prod *= specs[i].counts[j];
            assert_int_equal(prod, specs[i].nparts);
            assert_int_equal(specs[i].nparts, specs[0].nparts);
            assert_true(specs[i].nparts <= p);
            if (specs[i].nparts < p)
                small_cases++;
            check_tiling(nd, &specs[i]);
            check_spec(g, node, &specs[i], in, want);
            cases++;
        }
        pl_spec_array_free(specs, n);
    }
    for (int k = 0; k < nd->ninputs; k++)
        free(in[k]);
    free(want);
    return cases;
}

static int input_dt(pl_graph *g, const char *name, ein_dtype dt, int rank, const int64_t *shape)
{
    ein_error err = {0};
    int id = pl_graph_add_input(g, name, dt, rank, shape, &err);
    if (id < 0)
        fail_msg("input %s: %s", name, err.msg);
    return id;
}

static int input(pl_graph *g, const char *name, int rank, const int64_t *shape)
{
    ein_error err = {0};
    int id = pl_graph_add_input(g, name, EIN_F32, rank, shape, &err);
    if (id < 0)
        fail_msg("input %s: %s", name, err.msg);
    return id;
}

static int64_t rdim(void)
{
    return rint_in(1, 9);
}

/* Random packed sequences over `tokens`: 1 to 4 ends, the last = tokens. */
static int rand_seqs(int64_t tokens, int64_t *ends)
{
    int n = (int)rint_in(1, tokens < 4 ? tokens : 4);
    int64_t prev = 0;
    for (int i = 0; i < n - 1; i++) {
        int64_t room = tokens - prev - (n - 1 - i);
        ends[i] = prev + rint_in(1, room);
        prev = ends[i];
    }
    ends[n - 1] = tokens;
    return n;
}

typedef int (*build_fn)(pl_graph *g);

static int b_matmul(pl_graph *g)
{
    int64_t i = rdim(), j = rdim(), k = rdim();
    int a = input(g, "a", 2, (int64_t[]){i, j}), b = input(g, "b", 2, (int64_t[]){j, k});
    return pl_graph_add_matmul(g, "y", a, b, NULL);
}

static int b_einsum(pl_graph *g)
{
    static const char *subs[] = {"bij,bjk->bik", "ji,jk->ik", "ij->j", "ijk->ik", "ij,kj->ik",
                                 "abc,cd->abd"};
    const char *s = subs[rnd() % 6];
    ein_einsum_sub sub;
    ein_einsum_parse(s, &sub, NULL);
    int64_t size[26];
    for (int l = 0; l < 26; l++)
        size[l] = rint_in(1, 7);
    int ids[2] = {-1, -1};
    for (int k = 0; k < sub.nops; k++) {
        int64_t sh[EIN_MAX_RANK];
        for (int a = 0; a < sub.rank[k]; a++)
            sh[a] = size[sub.ops[k][a] - 'a'];
        ids[k] = input(g, k ? "b" : "a", sub.rank[k], sh);
    }
    return pl_graph_add_einsum(g, "y", s, ids[0], ids[1], NULL);
}

static int b_unary(pl_graph *g)
{
    int x = input(g, "x", 2, (int64_t[]){rdim(), rdim()});
    ein_unary op = (ein_unary)(rnd() % EIN_UN_COUNT);
    return pl_graph_add_unary(g, "y", op, 0.75, x, NULL);
}

/* The newest unary function on its own, so that every shape exercises it. */
static int b_gelu_exact(pl_graph *g)
{
    int x = input(g, "x", 2, (int64_t[]){rdim(), rdim()});
    return pl_graph_add_unary(g, "y", EIN_UN_GELU_EXACT, 0.0, x, NULL);
}

static int b_binary(pl_graph *g)
{
    int64_t s[3] = {rdim(), rdim(), rdim()};
    int64_t t[3] = {s[0], s[1], s[2]};
    for (int a = 0; a < 3; a++)
        if (rnd() % 3 == 0)
            t[a] = 1;
    int rb = (int)rint_in(1, 3);
    int a = input(g, "a", 3, s), b = input(g, "b", rb, t + (3 - rb));
    ein_binary op = (ein_binary)(rnd() % EIN_BIN_COUNT);
    return rnd() % 2 ? pl_graph_add_binary(g, "y", op, a, b, NULL)
                     : pl_graph_add_binary(g, "y", op, b, a, NULL);
}

static int b_softmax(pl_graph *g)
{
    int x = input(g, "x", 3, (int64_t[]){rdim(), rdim(), rdim()});
    return pl_graph_add_softmax(g, "y", x, (int)rint_in(0, 2), NULL);
}

/* A vector (no shardable index: one device for every p) or a few rows
 * normalised along the last axis (at most `rows` parts). */
static int b_softmax_small(pl_graph *g)
{
    int x = rnd() % 2 ? input(g, "x", 1, (int64_t[]){rint_in(1, 30)})
                      : input(g, "x", 2, (int64_t[]){rint_in(1, 3), rint_in(1, 30)});
    return pl_graph_add_softmax(g, "y", x, -1, NULL);
}

static int b_rmsnorm(pl_graph *g)
{
    int64_t d = rdim();
    int x = input(g, "x", 3, (int64_t[]){rdim(), rdim(), d}), w = input(g, "w", 1, &d);
    return pl_graph_add_norm(g, "y", x, w, -1, 1e-5, NULL);
}

static int b_layernorm(pl_graph *g)
{
    int64_t d = rint_in(2, 9);
    int x = input(g, "x", 2, (int64_t[]){rdim(), d}), w = input(g, "w", 1, &d);
    int b = input(g, "b", 1, &d);
    return pl_graph_add_norm(g, "y", x, w, b, 1e-5, NULL);
}

static int b_rope(pl_graph *g)
{
    int64_t t = rint_in(1, 11), hd = 2 * rint_in(1, 3), h = rint_in(1, 4), ends[4];
    int x = input(g, "x", 2, (int64_t[]){t, h * hd});
    int n = rand_seqs(t, ends);
    return pl_graph_add_rope(g, "y", x, hd, 10000.0, ends, n, NULL);
}

static int b_attention(pl_graph *g)
{
    /* Half the shapes long enough for query and key blocks (up to the
     * shortest sequence's length, at most 16 each). */
    int64_t hkv = rint_in(1, 4), grp = rint_in(1, 3), d = rint_in(1, 5);
    int64_t s = rnd() % 2 ? rint_in(1, 11) : rint_in(12, 60);
    int64_t ends[4];
    int q = input(g, "q", 3, (int64_t[]){hkv * grp, s, d});
    int k = input(g, "k", 3, (int64_t[]){hkv, s, d});
    int v = input(g, "v", 3, (int64_t[]){hkv, s, d});
    int n = rand_seqs(s, ends);
    return pl_graph_add_attention(g, "y", q, k, v, ends, n, 0, NULL);
}

/* Sliding-window attention (issue 34): a window from 1 to past the
 * sequence length, so some shapes have windows shorter than their
 * sequences and some longer. */
static int b_attention_window(pl_graph *g)
{
    int64_t hkv = rint_in(1, 4), grp = rint_in(1, 3), d = rint_in(1, 5);
    int64_t s = rnd() % 2 ? rint_in(1, 11) : rint_in(12, 60);
    int64_t ends[4];
    int q = input(g, "q", 3, (int64_t[]){hkv * grp, s, d});
    int k = input(g, "k", 3, (int64_t[]){hkv, s, d});
    int v = input(g, "v", 3, (int64_t[]){hkv, s, d});
    int n = rand_seqs(s, ends);
    return pl_graph_add_attention(g, "y", q, k, v, ends, n, rint_in(1, s + 2), NULL);
}

static int b_reduce(pl_graph *g)
{
    int x = input(g, "x", 3, (int64_t[]){rdim(), rdim(), rdim()});
    uint32_t axes = (uint32_t)rint_in(1, 6);        /* never all three */
    return pl_graph_add_reduce(g, "y", rnd() % 2 ? EIN_AGG_SUM : EIN_AGG_MAX, axes, x, NULL);
}

static int b_concat(pl_graph *g)
{
    int axis = (int)rint_in(0, 1), n = (int)rint_in(1, 3), xs[3];
    int64_t other = rdim();
    for (int k = 0; k < n; k++) {
        int64_t sh[2];
        sh[axis] = rint_in(1, 5);
        sh[1 - axis] = other;
        xs[k] = input(g, k == 0 ? "a" : k == 1 ? "b" : "c", 2, sh);
    }
    return pl_graph_add_concat(g, "y", axis, xs, n, NULL);
}

static int b_slice(pl_graph *g)
{
    int64_t s[2] = {rint_in(2, 11), rdim()};
    int x = input(g, "x", 2, s);
    int64_t start = rint_in(0, s[0] - 1), end = rint_in(start + 1, s[0]);
    return pl_graph_add_slice(g, "y", x, 0, start, end, NULL);
}

static int b_split_heads(pl_graph *g)
{
    int64_t d = rint_in(1, 4);
    int x = input(g, "x", 2, (int64_t[]){rdim(), d * rint_in(1, 5)});
    return pl_graph_add_split_heads(g, "y", x, d, NULL);
}

static int b_merge_heads(pl_graph *g)
{
    int x = input(g, "x", 3, (int64_t[]){rint_in(1, 5), rdim(), rint_in(1, 4)});
    return pl_graph_add_merge_heads(g, "y", x, NULL);
}

/* A token embedding: ids [T] i32 into a table [V, D]. */
static int b_embedding(pl_graph *g)
{
    int t = input(g, "table", 2, (int64_t[]){rint_in(1, 11), rdim()});
    int ids = input_dt(g, "ids", EIN_I32, 1, (int64_t[]){rdim()});
    return pl_graph_add_embedding(g, "y", t, ids, NULL);
}

/* Generation (issue 25): a cache [KVH, B, S, D] written at positions,
 * attention of one token per sequence over it, rope at positions. */
static int b_cache_write(pl_graph *g)
{
    int64_t kvh = rint_in(1, 3), b = rint_in(1, 5), len = rdim(), d = rint_in(1, 6);
    ein_error err = {0};
    int st = pl_graph_add_state(g, "cache", EIN_F32, 4, (int64_t[]){kvh, b, len, d}, &err);
    int x = input(g, "x", 3, (int64_t[]){kvh, b, d});
    int pos = input_dt(g, "pos", EIN_I32, 1, (int64_t[]){b});
    return pl_graph_add_cache_write(g, "y", st, x, pos, NULL);
}

static int b_decode_attention(pl_graph *g)
{
    int64_t kvh = rint_in(1, 3), grp = rint_in(1, 3), b = rint_in(1, 4), len = rdim();
    int64_t d = rint_in(1, 6);
    int q = input(g, "q", 3, (int64_t[]){kvh * grp, b, d});
    int k = input(g, "k", 4, (int64_t[]){kvh, b, len, d});
    int v = input(g, "v", 4, (int64_t[]){kvh, b, len, d});
    int pos = input_dt(g, "pos", EIN_I32, 1, (int64_t[]){b});
    return pl_graph_add_decode_attention(g, "y", q, k, v, pos, 0, NULL);
}

/* Prefill chunks: C new tokens per sequence (x and q [.., B*C, D]). */
static int b_cache_write_chunk(pl_graph *g)
{
    int64_t kvh = rint_in(1, 3), b = rint_in(1, 4), c = rint_in(2, 3), d = rint_in(1, 6);
    int64_t len = rdim() + c;
    ein_error err = {0};
    int st = pl_graph_add_state(g, "cache", EIN_F32, 4, (int64_t[]){kvh, b, len, d}, &err);
    int x = input(g, "x", 3, (int64_t[]){kvh, b * c, d});
    int pos = input_dt(g, "pos", EIN_I32, 1, (int64_t[]){b});
    return pl_graph_add_cache_write(g, "y", st, x, pos, NULL);
}

static int b_decode_attention_chunk(pl_graph *g)
{
    int64_t kvh = rint_in(1, 3), grp = rint_in(1, 2), b = rint_in(1, 3), len = rdim();
    int64_t d = rint_in(1, 6), c = rint_in(2, 3);
    int q = input(g, "q", 3, (int64_t[]){kvh * grp, b * c, d});
    int k = input(g, "k", 4, (int64_t[]){kvh, b, len, d});
    int v = input(g, "v", 4, (int64_t[]){kvh, b, len, d});
    int pos = input_dt(g, "pos", EIN_I32, 1, (int64_t[]){b});
    return pl_graph_add_decode_attention(g, "y", q, k, v, pos, 0, NULL);
}

/* decode_attention with a window over a cache longer than the window. */
static int b_decode_attention_window(pl_graph *g)
{
    int64_t kvh = rint_in(1, 3), grp = rint_in(1, 2), b = rint_in(1, 3), len = rdim() + 4;
    int64_t d = rint_in(1, 6), c = rint_in(1, 3);
    int q = input(g, "q", 3, (int64_t[]){kvh * grp, b * c, d});
    int k = input(g, "k", 4, (int64_t[]){kvh, b, len, d});
    int v = input(g, "v", 4, (int64_t[]){kvh, b, len, d});
    int pos = input_dt(g, "pos", EIN_I32, 1, (int64_t[]){b});
    return pl_graph_add_decode_attention(g, "y", q, k, v, pos, rint_in(1, len - 1), NULL);
}

static int b_rope_at(pl_graph *g)
{
    int64_t hd = 2 * rint_in(1, 3), t = rdim();
    int x = input(g, "x", 2, (int64_t[]){t, hd * rint_in(1, 4)});
    int pos = input_dt(g, "pos", EIN_I32, 1, (int64_t[]){t});
    return pl_graph_add_rope_at(g, "y", x, pos, hd, 10000.0, EIN_ROPE_HALF, NULL);
}

static void run_op(const char *name, build_fn build)
{
    long cases = 0;
    for (int i = 0; i < SHAPES; i++) {
        pl_graph *g = pl_graph_new();
        int y = build(g);
        if (y < 0)
            fail_msg("%s: building shape %d failed", name, i);
        cases += check_all(g, y);
        pl_graph_free(g);
    }
    total_cases += cases;
    printf("# %s: %ld (shape, p, spec) cases\n", name, cases);
}

#define OP_TEST(op)                                                                  \
    static void test_##op(void **state)                                              \
    {                                                                                \
        (void)state;                                                                 \
        run_op(#op, b_##op);                                                         \
    }
OP_TEST(matmul)
OP_TEST(einsum)
OP_TEST(unary)
OP_TEST(gelu_exact)
OP_TEST(binary)
OP_TEST(softmax)
OP_TEST(softmax_small)
OP_TEST(rmsnorm)
OP_TEST(layernorm)
OP_TEST(rope)
OP_TEST(attention)
OP_TEST(attention_window)
OP_TEST(decode_attention_window)
OP_TEST(reduce)
OP_TEST(concat)
OP_TEST(slice)
OP_TEST(split_heads)
OP_TEST(merge_heads)
OP_TEST(embedding)
OP_TEST(cache_write)
OP_TEST(decode_attention)
OP_TEST(cache_write_chunk)
OP_TEST(decode_attention_chunk)
OP_TEST(rope_at)

/* Position lists: attention's seq splits only at sequence ends, at most
 * one interval per sequence, and the split points are sequence ends. */
static void test_positions(void **state)
{
    (void)state;
    pl_graph *g = pl_graph_new();
    int64_t ends[3] = {10, 25, 40};
    int q = input(g, "q", 3, (int64_t[]){4, 40, 2});
    int k = input(g, "k", 3, (int64_t[]){2, 40, 2});
    int v = input(g, "v", 3, (int64_t[]){2, 40, 2});
    int y = pl_graph_add_attention(g, "y", q, k, v, ends, 3, 0, NULL);
    assert_true(y >= 0);
    pl_index idx[PL_MAX_INDICES];
    assert_int_equal(pl_op_indices(g, y, idx, NULL), 4);   /* + q_blocks, k_blocks */
    assert_int_equal(pl_index_max_count(&idx[2]), 10);    /* the shortest sequence */
    assert_int_equal(pl_index_max_count(&idx[3]), 10);
    assert_int_equal(pl_index_max_count(&idx[1]), 3);
    int64_t sp[4];
    assert_int_equal(pl_index_splits(&idx[1], 2, sp), 0);
    assert_int_equal(sp[1], 25);            /* closest end to 20 */
    assert_int_equal(pl_index_splits(&idx[1], 3, sp), 0);
    assert_int_equal(sp[1], 10);
    assert_int_equal(sp[2], 25);
    assert_int_equal(pl_index_splits(&idx[1], 4, sp), -1);
    pl_spec *specs;
    int n;
    /* heads_kv <= 2 and seq <= 3 alone give no 8 or 5; query and key
     * blocks do (issue 13). The first spec is the paper's when it exists. */
    assert_int_equal(pl_spec_enumerate(g, y, 8, &specs, &n, NULL), 0);
    assert_true(n > 1);
    for (int i = 0; i < n; i++)
        assert_int_equal(specs[i].nparts, 8);
    pl_spec_array_free(specs, n);
    assert_int_equal(pl_spec_enumerate(g, y, 5, &specs, &n, NULL), 0);
    assert_int_equal(n, 2);                 /* q_blocks:5 or k_blocks:5 */
    assert_int_equal(specs[0].counts[2], 5);
    assert_int_equal(specs[0].agg, EIN_AGG_NONE);
    assert_int_equal(specs[1].counts[3], 5);
    assert_int_equal(specs[1].agg, EIN_AGG_LSE);
    pl_spec_array_free(specs, n);
    assert_int_equal(pl_spec_enumerate(g, y, 6, &specs, &n, NULL), 0);
    assert_int_equal(specs[0].counts[0], 2);  /* heads_kv:2 seq:3 first */
    assert_int_equal(specs[0].counts[1], 3);
    pl_spec_array_free(specs, n);
    pl_graph_free(g);
}

/* Selected larger P (issue 13): one sequence, and packed sequences, on
 * 12, 16, 24 and 72 devices; every spec joined, merged and compared. */
static void test_attention_large_p(void **state)
{
    (void)state;
    static const int ps[] = {12, 16, 24, 72};
    long cases = 0;
    for (int shape = 0; shape < 4; shape++) {
        pl_graph *g = pl_graph_new();
        int64_t hkv = shape % 2 ? 2 : 1, grp = shape < 2 ? 1 : 4, t = 96 + 13 * shape, d = 4;
        int64_t ends[3] = {t};
        int nseq = 1;
        if (shape >= 2) {                    /* packed: 3 sequences */
            ends[0] = t / 3 - 5;
            ends[1] = 2 * t / 3 + 4;
            ends[2] = t;
            nseq = 3;
        }
        int q = input(g, "q", 3, (int64_t[]){hkv * grp, t, d});
        int k = input(g, "k", 3, (int64_t[]){hkv, t, d});
        int v = input(g, "v", 3, (int64_t[]){hkv, t, d});
        int y = pl_graph_add_attention(g, "y", q, k, v, ends, nseq, 0, NULL);
        assert_true(y >= 0);
        const pl_node *nd = pl_graph_node(g, y);
        float *in[3];
        for (int i = 0; i < 3; i++)
            in[i] = rand_data(nvol(pl_graph_node(g, nd->inputs[i])));
        float *want = run_whole(g, y, in);
        for (size_t pi = 0; pi < sizeof ps / sizeof *ps; pi++) {
            pl_spec *specs;
            int n;
            assert_int_equal(pl_spec_enumerate(g, y, ps[pi], &specs, &n, NULL), 0);
            assert_true(n >= 1);
            for (int i = 0; i < n; i++) {
                assert_int_equal(specs[i].nparts, ps[pi]);
                check_tiling(nd, &specs[i]);
                check_spec(g, y, &specs[i], in, want);
                cases++;
            }
            pl_spec_array_free(specs, n);
        }
        for (int i = 0; i < 3; i++)
            free(in[i]);
        free(want);
        pl_graph_free(g);
    }
    total_cases += cases;
    printf("# attention at P = 12, 16, 24, 72: %ld (shape, p, spec) cases\n", cases);
}

/* Balance of the causal work (issue 13) on the 1x128K LLaMA attention
 * (32 query heads, 8 kv heads, head dim 128): for every spec at P = 16
 * and 72, the largest device's (query, key) pairs over the mean. Query
 * and key blocks are cut at whole tokens where the pairs reach equal
 * fractions, so the only imbalance is rounding. */
static void test_attention_balance(void **state)
{
    (void)state;
    pl_graph *g = pl_graph_new();
    int64_t t = 131072, ends[1] = {131072};
    int q = input(g, "q", 3, (int64_t[]){32, t, 128});
    int k = input(g, "k", 3, (int64_t[]){8, t, 128});
    int v = input(g, "v", 3, (int64_t[]){8, t, 128});
    int y = pl_graph_add_attention(g, "y", q, k, v, ends, 1, 0, NULL);
    assert_true(y >= 0);
    const pl_node *nd = pl_graph_node(g, y);
    double all = 32.0 * (double)t * (double)(t + 1) / 2;
    pl_index idx[PL_MAX_INDICES];
    pl_op_indices(g, y, idx, NULL);
    for (int p = 16; p <= 72; p += 56) {
        pl_spec *specs;
        int n;
        assert_int_equal(pl_spec_enumerate(g, y, p, &specs, &n, NULL), 0);
        assert_true(n >= 1);
        for (int i = 0; i < n; i++) {
            double sum = 0, mx = 0;
            for (int f = 0; f < specs[i].nparts; f++) {
                double w = pl_attention_pairs(nd, &specs[i].f[f].in[0], &specs[i].f[f].in[1]);
                sum += w;
                mx = w > mx ? w : mx;
            }
            char buf[256];
            pl_spec_format_labels(&specs[i], idx, buf, sizeof buf);
            printf("# P=%d %-44s max/mean pairs %.5f\n", p, buf, mx / (sum / p));
            if (!(fabs(sum - all) <= 1e-9 * all))
                fail_msg("P=%d %s: the specs hold %.0f pairs, the operator %.0f", p, buf, sum, all);
            /* Heads split unevenly (8 into 3, 6, ...) are unbalanced by
             * construction, as before issue 13: judged only when even. */
            if (8 % specs[i].counts[0] == 0 && !(mx / (sum / p) <= 1.001))
                fail_msg("P=%d %s: max/mean work %.5f", p, buf, mx / (sum / p));
        }
        pl_spec_array_free(specs, n);
    }
    pl_graph_free(g);
}

/* Sliding window (issue 34): one sequence of 4096 tokens, window 256, on
 * 1..8 and 16 devices. The operator's FLOPs are the window's pairs (4 per
 * pair, head and dim); every function specification's k/v block starts
 * no earlier than its first query's window and holds only keys some query
 * of the block sees (the out-of-window key blocks are never formed); the
 * pairs of the specs add up to the window's; and work stays balanced. */
static void test_attention_window_blocks(void **state)
{
    (void)state;
    pl_graph *g = pl_graph_new();
    const int64_t t = 4096, w = 256, hq = 8, hkv = 2, d = 16, ends[1] = {4096};
    int q = input(g, "q", 3, (int64_t[]){hq, t, d});
    int k = input(g, "k", 3, (int64_t[]){hkv, t, d});
    int v = input(g, "v", 3, (int64_t[]){hkv, t, d});
    ein_error err = {0};
    assert_true(pl_graph_add_attention(g, "bad", q, k, v, ends, 1, -1, &err) < 0);
    assert_non_null(strstr(err.msg, "window -1 is negative"));
    int y = pl_graph_add_attention(g, "y", q, k, v, ends, 1, w, NULL);
    int yfull = pl_graph_add_attention(g, "yfull", q, k, v, ends, 1, 0, NULL);
    assert_true(y >= 0 && yfull >= 0);
    const pl_node *nd = pl_graph_node(g, y);
    /* query i sees min(i + 1, w) keys */
    double pairs = (double)w * (double)(w + 1) / 2 + (double)(t - w) * (double)w;
    double full = (double)t * (double)(t + 1) / 2;
    if (!(fabs(pl_op_flops(g, y) - 4.0 * hq * d * pairs) <= 1e-9 * pairs))
        fail_msg("windowed FLOPs %.0f, expected %.0f", pl_op_flops(g, y), 4.0 * hq * d * pairs);
    if (!(fabs(pl_op_flops(g, yfull) - 4.0 * hq * d * full) <= 1e-9 * full))
        fail_msg("full FLOPs %.0f, expected %.0f", pl_op_flops(g, yfull), 4.0 * hq * d * full);
    pl_index idx[PL_MAX_INDICES];
    pl_op_indices(g, y, idx, NULL);
    static const int ps[] = {1, 2, 3, 4, 5, 6, 7, 8, 16};
    long keysplits = 0;
    for (size_t pi = 0; pi < sizeof ps / sizeof *ps; pi++) {
        int p = ps[pi];
        pl_spec *specs;
        int n;
        assert_int_equal(pl_spec_enumerate(g, y, p, &specs, &n, NULL), 0);
        assert_true(n >= 1);
        for (int i = 0; i < n; i++) {
            char buf[256];
            pl_spec_format_labels(&specs[i], idx, buf, sizeof buf);
            double sum = 0, mx = 0;
            keysplits += specs[i].agg == EIN_AGG_LSE;
            for (int f = 0; f < specs[i].nparts; f++) {
                const ein_box *qb = &specs[i].f[f].in[0], *kb = &specs[i].f[f].in[1];
                int64_t first = qb->lo[1] - w + 1 > 0 ? qb->lo[1] - w + 1 : 0;
                if (kb->lo[1] < first || kb->hi[1] > qb->hi[1])
                    fail_msg("P=%d %s: queries [%lld, %lld) get keys [%lld, %lld), outside "
                             "[%lld, %lld)", p, buf, (long long)qb->lo[1], (long long)qb->hi[1],
                             (long long)kb->lo[1], (long long)kb->hi[1], (long long)first,
                             (long long)qb->hi[1]);
                double pw = pl_attention_pairs(nd, qb, kb);
                /* a key block of the window's keys: never one no query sees */
                if (!ein_box_empty(kb) && !(pw > 0))
                    fail_msg("P=%d %s: a key block [%lld, %lld) outside every window", p, buf,
                             (long long)kb->lo[1], (long long)kb->hi[1]);
                sum += pw;
                mx = pw > mx ? pw : mx;
            }
            if (!(fabs(sum - hq * pairs) <= 1e-9 * hq * pairs))
                fail_msg("P=%d %s: the specs hold %.0f pairs, the window %.0f", p, buf, sum,
                         hq * pairs);
            if (hkv % specs[i].counts[0] == 0 && !(mx / (sum / specs[i].nparts) <= 1.02))
                fail_msg("P=%d %s: max/mean windowed work %.5f", p, buf,
                         mx / (sum / specs[i].nparts));
        }
        pl_spec_array_free(specs, n);
    }
    assert_true(keysplits > 0);   /* the key-block split was among them */
    pl_graph_free(g);
}

static int report(void **state)
{
    (void)state;
    printf("# soundness: %ld (op, shape, p, spec) cases in all, %ld of them on fewer "
           "than p devices\n", total_cases, small_cases);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul),      cmocka_unit_test(test_einsum),
        cmocka_unit_test(test_unary),       cmocka_unit_test(test_gelu_exact),
        cmocka_unit_test(test_binary),
        cmocka_unit_test(test_softmax),     cmocka_unit_test(test_softmax_small),
        cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_layernorm),   cmocka_unit_test(test_rope),
        cmocka_unit_test(test_attention),   cmocka_unit_test(test_reduce),
        cmocka_unit_test(test_concat),      cmocka_unit_test(test_slice),
        cmocka_unit_test(test_split_heads), cmocka_unit_test(test_merge_heads),
        cmocka_unit_test(test_embedding),
        cmocka_unit_test(test_cache_write), cmocka_unit_test(test_decode_attention),
        cmocka_unit_test(test_cache_write_chunk), cmocka_unit_test(test_decode_attention_chunk),
        cmocka_unit_test(test_rope_at),
        cmocka_unit_test(test_positions),
        cmocka_unit_test(test_attention_large_p),
        cmocka_unit_test(test_attention_balance),
        cmocka_unit_test(test_attention_window_blocks),
        cmocka_unit_test(test_attention_window), cmocka_unit_test(test_decode_attention_window),
    };
    return cmocka_run_group_tests_name("planner_soundness", tests, NULL, report);
}
