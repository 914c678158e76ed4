/* planner/pl_strategy.c — baseline strategies as forced plans (see
 * pl_strategy.h). */
#include "planner/pl_strategy.h"

#include <string.h>

#include "planner/pl_graph.h"

typedef struct strategy {
    const char *name;
    const char *const *prefer;      /* every operator but attention and einsums */
    const char *const *attention;   /* attention */
    const char *const *einsum;      /* einsums (products, the projections) */
} strategy;

static const char *const heads_first[] = {"heads_kv", "heads", "d_q", "d_kv", "d_ff",
                                          "hidden", "tokens", NULL};
/* The head's vocabulary last: split only where tokens cannot be (a decode
 * step's one row per sequence), as Megatron-LM's vocab-parallel head. Not
 * the embedding's: a lookup reads one row, replicated it needs no sum. */
static const char *const heads_first_vocab[] = {"heads_kv", "heads", "d_q", "d_kv", "d_ff",
                                                "hidden", "tokens", "vocab", NULL};
static const char *const heads_only[] = {"heads_kv", "heads", NULL};
static const char *const tokens_only[] = {"tokens", NULL};

static const strategy strategies[] = {
    {"megatron", heads_first, heads_first, heads_first_vocab},
    {"ulysses", tokens_only, heads_only, tokens_only},
    {"sequence", tokens_only, tokens_only, tokens_only},
    {"data", tokens_only, tokens_only, tokens_only},
};

const char *const pl_strategy_names[] = {"megatron", "ulysses", "sequence", "data", NULL};

/* Lexicographic in the preference order (counts capped at 64: base 65),
 * then fewer split indices outside the list. */
static double score(const void *ctx, const pl_graph *g, int node, const pl_index *idx, int nidx,
                    const int *counts)
{
    const strategy *s = ctx;
    pl_node_kind kind = pl_graph_node(g, node)->kind;
    const char *const *pref = kind == PL_ATTENTION ? s->attention
                              : kind == PL_EINSUM  ? s->einsum
                                                   : s->prefer;
    double sc = 0;
    for (int i = 0; pref[i]; i++) {
        int c = 1;
        for (int k = 0; k < nidx; k++)
            if (strcmp(idx[k].label, pref[i]) == 0)
                c = counts[k];
        sc = sc * 65 + (c < 64 ? c : 64);
    }
    int others = 0;
    for (int k = 0; k < nidx; k++) {
        int listed = 0;
        for (int i = 0; pref[i] && !listed; i++)
            listed = strcmp(idx[k].label, pref[i]) == 0;
        others += !listed && counts[k] > 1;
    }
    return sc * 65 + (64 - (others < 64 ? others : 64));
}

int pl_strategy_set(const char *name, pl_plan_opts *opts)
{
    for (size_t i = 0; i < sizeof strategies / sizeof strategies[0]; i++)
        if (strcmp(strategies[i].name, name) == 0) {
            opts->force = score;
            opts->force_ctx = &strategies[i];
            return 0;
        }
    return -1;
}

int pl_strategy_check(const char *name, const pl_graph *g, int p, ein_error *err)
{
    if (strcmp(name, "data") != 0)
        return 0;
    for (int v = 0; v < g->nnodes; v++) {
        const pl_node *nd = pl_graph_node(g, v);
        if (nd->kind != PL_ATTENTION)
            continue;
        int nseq = nd->kernel.nlist > 0 ? nd->kernel.nlist : 1;
        if (nseq < p)
            return ein_fail(err, EIN_EINVAL, "strategy data: attention %s (line %d) has %d "
                                             "sequence%s, fewer than the %d devices",
                            nd->name, nd->line, nseq, nseq == 1 ? "" : "s", p);
    }
    return 0;
}
