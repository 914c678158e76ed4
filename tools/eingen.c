/* tools/eingen.c — write the paper's workloads (§6) as .ein programs.
 *
 *   eingen llama (--seqs S --tokens T | --seq-lens L1,L2,...) [--blocks B]
 *                [--dtype f16|bf16|f32] [--quantization int8|q4|fp8]
 *                [--scale F | --heads H --kv-heads K --head-dim D --d-ff N]
 *                [--theta X] [--eps E] [--hf] [--config config.json]
 *                [--model [--vocab V] [--tied] [--logits last|all]]
 *   eingen chain A|B|C|D|E [--dtype ...] [--scale F]
 *
 * llama: B LLaMA blocks (d_model 4096, 32 query heads, 8 kv heads, head
 * dim 128, gated FFN 14336, RMSNorm, rotary embeddings, causal attention)
 * over T tokens packed as S equal sequences (the paper's 1x1K, 1x8K,
 * 1x128K, 8x1K and 128x1K are --seqs 1 --tokens 1024, ...).
 * chain: the matrix chains A..E of PAPER_NOTES §5 with their exact dims
 * and parenthesisations. --scale shrinks either to laptop size; --hf writes
 * llama in Hugging Face's layout (docs/hf-llama.md); --model writes the
 * whole decoder (token ids in, logits out); --config takes the sizes from a
 * transformers config.json. The program goes to stdout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include "include/einsummable/einsummable.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: eingen llama (--seqs S --tokens T | --seq-lens L1,L2,...) [--blocks B]\n"
               "                   [--dtype f16|bf16|f32] [--quantization int8|q4|fp8]\n"
               "                   [--scale F | --heads H --kv-heads K --head-dim D --d-ff N]\n"
               "                   [--theta X] [--eps E] [--hf] [--config config.json]\n"
               "                   [--model [--vocab V] [--tied] [--logits last|all]]\n"
               "       eingen chain A|B|C|D|E [--dtype f16|bf16|f32] [--scale F]\n"
               "\n"
               "--scale F   shrink the model so it runs in seconds on a laptop: llama keeps\n"
               "            head_dim 128 and takes round(32F) query heads, round(8F) kv heads\n"
               "            (at least 1, dividing the query heads) and d_ff round(14336F);\n"
               "            chain multiplies every dimension by F (at least 1). Tokens are\n"
               "            --tokens as given. Explicit --heads/--kv-heads/--head-dim/--d-ff\n"
               "            set those sizes (d_model = heads x head_dim).\n"
               "--hf        Hugging Face layout: projection weights stored [out, in] as in\n"
               "            transformers checkpoints (x times w transposed, an einsum), and\n"
               "            rope(..., style=half); the header lists the --map arguments that\n"
               "            bind a checkpoint's tensors (docs/hf-llama.md).\n"
               "--theta X   rope base (default 500000, LLaMA 3; LLaMA 2 uses 10000; with\n"
               "            --config, the config's, by default transformers' 10000).\n"
               "--eps E     rmsnorm epsilon (default 1e-5; with --config, the config's,\n"
               "            by default transformers' 1e-6).\n"
               "--seq-lens  packed sequences of these lengths (tokens = their sum), instead\n"
               "            of --seqs S equal ones.\n"
               "--model     the whole decoder: i32 token ids `ids[tokens]`, embedding\n"
               "            `embed[vocab, d_model]`, the blocks, a final rmsnorm\n"
               "            (`final_norm`) and lm_head; saves `logits`, of each sequence's\n"
               "            last token ([S, vocab], --logits last, the default) or of\n"
               "            every token ([tokens, vocab], --logits all).\n"
               "--quantization int8|q4|fp8  the projection weights (wq wk wv wo w1 w3 w2)\n"
               "            as q8_0 or q4_0 inputs (ggml's blocks of 32; issue 36) or f8e4m3\n"
               "            (fp8 e4m3 with an f32 scale per 128), declared [out, in] as\n"
               "            quantized weights are (matmul(x, w) is then x w^T); norms,\n"
               "            embedding and lm_head keep --dtype. The dims they contract must\n"
               "            be multiples of the block (32; 128 for fp8).\n"
               "--vocab V   vocabulary rows (default 128256, LLaMA 3).\n"
               "--tied      lm_head is the embedding (tie_word_embeddings); otherwise an\n"
               "            input `lm_head` ([vocab, d_model] with --hf, else [d_model, vocab]).\n"
               "--config F  the model of a transformers config.json, read by the library's\n"
               "            one reader (es.llama's too): LLaMA, Mistral, Qwen2 with their\n"
               "            sizes, rope_theta and rope_scaling (linear, llama3), biases,\n"
               "            hidden_act, tied heads, rms_norm_eps, torch_dtype; transformers'\n"
               "            defaults for keys left out; any key not implemented is refused\n"
               "            by name (docs/hf-llama.md). Options on the command line win.\n");
}

#define MAX_SEQS 512

typedef struct llama_cfg {
    long seqs, tokens;
    long lens[MAX_SEQS];    /* with --seq-lens: each sequence's length */
    int have_lens;
    int blocks;
    const char *dtype;
    const char *quant;      /* --quantization: NULL, "q8_0", "q4_0" or "f8e4m3" */
    long heads, kv_heads, head_dim, d_ff;
    double theta, eps;
    int hf;
    int model, tied, all_logits;
    long vocab;
    long d_model;           /* 0: heads x head_dim; else --config's hidden_size */
    int qkv_bias, o_bias, mlp_bias; /* --config: projections with a .bias */
    const char *act;        /* the MLP's unary (silu unless --config says) */
    ein_rope_scaling scaling;
    const char *config;     /* --config's path, or NULL */
    long window;            /* --config's sliding_window (0: none) */
} llama_cfg;

/* The rows of each sequence's last token, gathered into `lastx` [S, d_model]
 * by slices and concats (at most 16 inputs each, a tree above that). */
static void gather_last(const llama_cfg *c, const char *x)
{
    long n = c->seqs, end = 0;
    char (*names)[40] = malloc((size_t)n * sizeof *names);
    for (long i = 0; i < n; i++) {
        end += c->lens[i];
        snprintf(names[i], sizeof names[i], n == 1 ? "lastx" : "last_%ld", i);
        printf("%s = slice(%s, 0, %ld, %ld)\n", names[i], x, end - 1, end);
    }
    for (int level = 0; n > 1; level++) {
        long m = 0;
        for (long i = 0; i < n; i += 16, m++) {
            long k = n - i < 16 ? n - i : 16;
            char out[40];
            if (n <= 16)
                snprintf(out, sizeof out, "lastx");
            else
                snprintf(out, sizeof out, "cat%d_%ld", level, m);
            if (k == 1) {
                memcpy(names[m], names[i], sizeof names[m]);
                continue;
            }
            printf("%s = concat(", out);
            for (long j = 0; j < k; j++)
                printf("%s, ", names[i + j]);
            printf("0)\n");
            memcpy(names[m], out, sizeof out);
        }
        n = m;
    }
    free(names);
}

/* Whether bias i of llama()'s table (bq bk bv bo b1 b3 b2) is an input. */
static int bias_on(const llama_cfg *c, size_t i)
{
    return i < 3 ? c->qkv_bias : i == 3 ? c->o_bias : c->mlp_bias;
}

static int llama(const llama_cfg *c)
{
    long seqs = c->seqs, tokens = c->tokens;
    int blocks = c->blocks;
    long d_q = c->heads * c->head_dim, d_kv = c->kv_heads * c->head_dim;
    long d_model = c->d_model ? c->d_model : d_q;
    if (c->have_lens)
        printf("# %d LLaMA block%s%s: %ld tokens in %ld packed sequences.\n", blocks,
               blocks == 1 ? "" : "s", c->model ? " (a whole model)" : "", tokens, seqs);
    else
        printf("# %d LLaMA block%s%s (paper section 6): %ldx%ld tokens (sequences x tokens each).\n",
               blocks, blocks == 1 ? "" : "s", c->model ? " (a whole model)" : "", seqs, tokens / seqs);
    if (c->have_lens) {
        printf("# Generated by: eingen llama --seq-lens ");
        for (long i = 0; i < seqs; i++)
            printf("%s%ld", i ? "," : "", c->lens[i]);
        printf(" --blocks %d", blocks);
    } else
        printf("# Generated by: eingen llama --seqs %ld --tokens %ld --blocks %d", seqs, tokens, blocks);
    if (c->heads != 32 || c->kv_heads != 8 || c->head_dim != 128 || c->d_ff != 14336)
        printf(" --heads %ld --kv-heads %ld --head-dim %ld --d-ff %ld", c->heads, c->kv_heads,
               c->head_dim, c->d_ff);
    if (c->theta != 500000)
        printf(" --theta %g", c->theta);
    if (c->eps != 1e-5)
        printf(" --eps %g", c->eps);
    if (strcmp(c->dtype, "f16"))
        printf(" --dtype %s", c->dtype);
    if (c->quant)
        printf(" --quantization %s", !strcmp(c->quant, "q8_0") ? "int8"
                                     : !strcmp(c->quant, "q4_0") ? "q4" : "fp8");
    if (c->model)
        printf(" --model --vocab %ld%s%s", c->vocab, c->tied ? " --tied" : "",
               c->all_logits ? " --logits all" : "");
    if (c->config)
        printf(" --config %s", c->config);
    printf("%s\n", c->hf ? " --hf" : "");
    static const char *const map[][2] = {
        {"attn_norm", "input_layernorm.weight"}, {"wq", "self_attn.q_proj.weight"},
        {"wk", "self_attn.k_proj.weight"},       {"wv", "self_attn.v_proj.weight"},
        {"wo", "self_attn.o_proj.weight"},       {"ffn_norm", "post_attention_layernorm.weight"},
        {"w1", "mlp.gate_proj.weight"},          {"w3", "mlp.up_proj.weight"},
        {"w2", "mlp.down_proj.weight"},
    };
    static const char *const bias[][2] = {
        {"bq", "self_attn.q_proj.bias"}, {"bk", "self_attn.k_proj.bias"},
        {"bv", "self_attn.v_proj.bias"}, {"bo", "self_attn.o_proj.bias"},
        {"b1", "mlp.gate_proj.bias"},    {"b3", "mlp.up_proj.bias"},
        {"b2", "mlp.down_proj.bias"},
    };
    if (c->hf && c->model) {
        printf("# Hugging Face layout: run a transformers checkpoint with\n"
               "#   einrun --weights model.safetensors --input ids=IDS.npy (i32 token ids)\n");
        printf("#   --map 'embed=model.embed_tokens.weight'\n");
        for (int b = 0; b < blocks; b++) {
            char s[16] = "";
            if (blocks > 1)
                snprintf(s, sizeof s, "_%d", b);
            for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
                printf("#   --map '%s%s=model.layers.%d.%s'\n", map[i][0], s, b, map[i][1]);
            for (size_t i = 0; i < sizeof bias / sizeof bias[0]; i++)
                if (bias_on(c, i))
                    printf("#   --map '%s%s=model.layers.%d.%s'\n", bias[i][0], s, b,
                           bias[i][1]);
        }
        printf("#   --map 'final_norm=model.norm.weight'\n");
        if (!c->tied)
            printf("#   --map 'lm_head=lm_head.weight'\n");
        else
            printf("# (tied: lm_head is model.embed_tokens.weight, no lm_head.weight)\n");
    } else if (c->hf) {
        printf("# Hugging Face layout: bind a transformers checkpoint with einrun --weights\n"
               "# model.safetensors and, for block b (inputs suffixed _b when there are\n"
               "# several blocks):\n");
        for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
            printf("#   --map '%s%s=model.layers.b.%s'\n", map[i][0], blocks > 1 ? "_b" : "",
                   map[i][1]);
        for (size_t i = 0; i < sizeof bias / sizeof bias[0]; i++)
            if (bias_on(c, i))
                printf("#   --map '%s%s=model.layers.b.%s'\n", bias[i][0], blocks > 1 ? "_b" : "",
                       bias[i][1]);
        printf("# and x: the token embeddings (model.embed_tokens.weight rows), as --input.\n");
    }
    if (c->d_ff == 14336 && c->heads == 32 && c->kv_heads == 8 && c->head_dim == 128 &&
        d_model == 4096)
        printf("dims tokens=%ld d_model=4096 d_q=4096 d_kv=1024 d_ff=14336 head_dim=128\n", tokens);
    else
        printf("dims tokens=%ld d_model=%ld d_q=%ld d_kv=%ld d_ff=%ld head_dim=%ld\n", tokens,
               d_model, d_q, d_kv, c->d_ff, c->head_dim);
    printf("dtype %s\n", c->dtype);
    printf("seqs [");
    for (long i = 0; i < seqs; i++)
        printf("%s%ld", i ? ", " : "", c->lens[i]);
    printf("]\n");
    const char *prev = "x";
    if (c->model) {
        printf("dims vocab=%ld\n", c->vocab);
        printf("input ids[tokens] i32\ninput embed[vocab, d_model]\nx = embedding(embed, ids)\n");
    } else
        printf("input x[tokens, d_model]\n");
    char cur[32], eps[32], rope[320];
    if (c->eps == 1e-5)
        snprintf(eps, sizeof eps, "1e-5");
    else
        snprintf(eps, sizeof eps, "%g", c->eps);
    const ein_rope_scaling *rs = &c->scaling;
    if (rs->type == EIN_ROPE_SCALING_LINEAR)
        snprintf(rope, sizeof rope, "head_dim, %g%s, scaling=linear, factor=%.17g", c->theta,
                 c->hf ? ", style=half" : "", rs->factor);
    else if (rs->type == EIN_ROPE_SCALING_LLAMA3)
        snprintf(rope, sizeof rope, "head_dim, %g%s, scaling=llama3, factor=%.17g, "
                 "low_freq_factor=%.17g, high_freq_factor=%.17g, original_max_position=%.17g",
                 c->theta, c->hf ? ", style=half" : "", rs->factor, rs->low_freq_factor,
                 rs->high_freq_factor, rs->original_max_position);
    else
        snprintf(rope, sizeof rope, "head_dim, %g%s", c->theta, c->hf ? ", style=half" : "");
    /* x times a weight: [in, out] (matmul) or Hugging Face's [out, in]. */
    const char *mm = c->hf ? "einsum(\"ij,kj->ik\", " : "matmul(";
    for (int b = 0; b < blocks; b++) {
        char s[16] = "";
        if (blocks > 1)
            snprintf(s, sizeof s, "_%d", b);
        printf("\n# block %d\n", b);
        if (c->quant) {   /* [out, in] with the block dtype */
            const char *q = c->quant;
            printf("input attn_norm%s[d_model]\ninput wq%s[d_q, d_model] %s\n"
                   "input wk%s[d_kv, d_model] %s\ninput wv%s[d_kv, d_model] %s\n"
                   "input wo%s[d_model, d_q] %s\ninput ffn_norm%s[d_model]\n"
                   "input w1%s[d_ff, d_model] %s\ninput w3%s[d_ff, d_model] %s\n"
                   "input w2%s[d_model, d_ff] %s\n",
                   s, s, q, s, q, s, q, s, q, s, s, q, s, q, s, q);
        } else if (c->hf)
            printf("input attn_norm%s[d_model]\ninput wq%s[d_q, d_model]\ninput wk%s[d_kv, d_model]\n"
                   "input wv%s[d_kv, d_model]\ninput wo%s[d_model, d_q]\ninput ffn_norm%s[d_model]\n"
                   "input w1%s[d_ff, d_model]\ninput w3%s[d_ff, d_model]\ninput w2%s[d_model, d_ff]\n",
                   s, s, s, s, s, s, s, s, s);
        else
            printf("input attn_norm%s[d_model]\ninput wq%s[d_model, d_q]\ninput wk%s[d_model, d_kv]\n"
                   "input wv%s[d_model, d_kv]\ninput wo%s[d_q, d_model]\ninput ffn_norm%s[d_model]\n"
                   "input w1%s[d_model, d_ff]\ninput w3%s[d_model, d_ff]\ninput w2%s[d_ff, d_model]\n",
                   s, s, s, s, s, s, s, s, s);
        if (c->qkv_bias)
            printf("input bq%s[d_q]\ninput bk%s[d_kv]\ninput bv%s[d_kv]\n", s, s, s);
        if (c->o_bias)
            printf("input bo%s[d_model]\n", s);
        if (c->mlp_bias)
            printf("input b1%s[d_ff]\ninput b3%s[d_ff]\ninput b2%s[d_model]\n", s, s, s);
        printf("xn%s = rmsnorm(%s, attn_norm%s, %s)\n", s, prev, s, eps);
        if (c->qkv_bias)
            printf("q0%s = %sxn%s, wq%s)\nk0%s = %sxn%s, wk%s)\nv0%s = %sxn%s, wv%s)\n"
                   "q%s = add(q0%s, bq%s)\nk%s = add(k0%s, bk%s)\nv%s = add(v0%s, bv%s)\n",
                   s, mm, s, s, s, mm, s, s, s, mm, s, s, s, s, s, s, s, s, s, s, s);
        else
            printf("q%s = %sxn%s, wq%s)\nk%s = %sxn%s, wk%s)\nv%s = %sxn%s, wv%s)\n",
                   s, mm, s, s, s, mm, s, s, s, mm, s, s);
        printf("qr%s = rope(q%s, %s)\nkr%s = rope(k%s, %s)\n", s, s, rope, s, s, rope);
        printf("qh%s = split_heads(qr%s, head_dim)\nkh%s = split_heads(kr%s, head_dim)\n"
               "vh%s = split_heads(v%s, head_dim)\n", s, s, s, s, s, s);
        if (c->window)
            printf("att%s = attention(qh%s, kh%s, vh%s, window=%ld)\n", s, s, s, s, c->window);
        else
            printf("att%s = attention(qh%s, kh%s, vh%s)\n", s, s, s, s);
        if (c->o_bias)
            printf("am%s = merge_heads(att%s)\no0%s = %sam%s, wo%s)\no%s = add(o0%s, bo%s)\n"
                   "h%s = add(%s, o%s)\n", s, s, s, mm, s, s, s, s, s, s, prev, s);
        else
            printf("am%s = merge_heads(att%s)\no%s = %sam%s, wo%s)\nh%s = add(%s, o%s)\n", s,
                   s, s, mm, s, s, s, prev, s);
        printf("hn%s = rmsnorm(h%s, ffn_norm%s, %s)\n", s, s, s, eps);
        if (c->mlp_bias)
            printf("g10%s = %shn%s, w1%s)\ng30%s = %shn%s, w3%s)\ng1%s = add(g10%s, b1%s)\n"
                   "g3%s = add(g30%s, b3%s)\n", s, mm, s, s, s, mm, s, s, s, s, s, s, s, s);
        else
            printf("g1%s = %shn%s, w1%s)\ng3%s = %shn%s, w3%s)\n", s, mm, s, s, s, mm, s, s);
        const char *act = c->act ? c->act : "silu";
        if (c->mlp_bias)
            printf("sg%s = %s(g1%s)\nff%s = mul(sg%s, g3%s)\nf20%s = %sff%s, w2%s)\n"
                   "f2%s = add(f20%s, b2%s)\n", s, act, s, s, s, s, s, mm, s, s, s, s, s);
        else
            printf("sg%s = %s(g1%s)\nff%s = mul(sg%s, g3%s)\nf2%s = %sff%s, w2%s)\n", s, act,
                   s, s, s, s, s, mm, s, s);
        snprintf(cur, sizeof cur, "y%s", s);
        printf("%s = add(h%s, f2%s)\n", cur, s, s);
        static char keep[32];
        memcpy(keep, cur, sizeof keep);
        prev = keep;
    }
    if (c->model) {
        printf("\n# final norm and lm_head\ninput final_norm[d_model]\n");
        printf("xf = rmsnorm(%s, final_norm, %s)\n", prev, eps);
        const char *xl = "xf";
        if (!c->all_logits) {
            printf("# the last token of each sequence\n");
            gather_last(c, "xf");
            xl = "lastx";
        }
        if (c->tied)
            printf("logits = einsum(\"ij,kj->ik\", %s, embed)\n", xl);
        else if (c->hf)
            printf("input lm_head[vocab, d_model]\nlogits = einsum(\"ij,kj->ik\", %s, lm_head)\n", xl);
        else
            printf("input lm_head[d_model, vocab]\nlogits = matmul(%s, lm_head)\n", xl);
        printf("save logits\n");
        return 0;
    }
    printf("save %s\n", prev);
    return 0;
}

/* The model from a transformers config.json (the library's one reader,
 * ein_model_config_read: every key implemented or refused by name); 0, or
 * -1 with a message. */
static int read_config(const char *path, llama_cfg *c)
{
    ein_model_config m;
    ein_error err = {0};
    if (ein_model_config_read(path, NULL, &m, &err) < 0) {
        fprintf(stderr, "eingen: --config %s: %s\n", path, err.msg);
        return -1;
    }
    c->config = path;
    c->heads = m.heads;
    c->kv_heads = m.kv_heads;
    c->head_dim = m.head_dim;
    c->d_model = m.hidden_size;
    c->d_ff = m.intermediate_size;
    c->blocks = (int)m.layers;
    c->vocab = m.vocab;
    c->eps = m.rms_norm_eps;
    c->theta = m.rope_theta;
    c->scaling = m.rope_scaling;
    c->tied = m.tied;
    c->qkv_bias = m.qkv_bias;
    c->o_bias = m.o_bias;
    c->mlp_bias = m.mlp_bias;
    c->window = m.sliding_window;
    static char act[16];
    memcpy(act, m.act, sizeof act);
    c->act = act;
    if (m.has_dtype)
        c->dtype = m.dtype == EIN_BF16 ? "bf16" : m.dtype == EIN_F16 ? "f16" : "f32";
    return 0;
}

typedef struct chain_def {
    char name;
    const char *paren;      /* matrices by number, products in parentheses */
    int ndims;
    long dims[16];
} chain_def;

static const chain_def chains[] = {
    {'A', "(((1 2) ((3 4) ((5 6) (7 8)))) 9)", 10,
     {10240, 16384, 6144, 16384, 6144, 16384, 6144, 16384, 6144, 10240}},
    {'B', "((1 2) ((3 4) 5))", 6, {9216, 20480, 5120, 20480, 5120, 9216}},
    {'C', "(1 (2 3))", 4, {10240, 12288, 32768, 2048}},
    {'D', "((1 (2 (3 (4 (5 (6 (7 8))))))) 9)", 10,
     {24576, 1536, 20480, 20480, 20480, 20480, 20480, 20480, 1536, 24576}},
    {'E', "((1 (2 (3 (4 (5 (6 (7 (8 (9 (10 (11 12))))))))))) 13)", 14,
     {49152, 1024, 20480, 20480, 20480, 20480, 20480, 20480, 20480, 20480, 20480, 20480, 1024,
      49152}},
};

/* Emit the products of one parenthesised expression; returns the tensor
 * name in `out` and its dims range [lo, hi) through *lo, *hi. */
static const char *emit(const char **s, char out[32], int *lo, int *hi, int *count)
{
    while (**s == ' ')
        (*s)++;
    if (**s == '(') {
        char a[32], b[32];
        int l1, h1, l2, h2;
        (*s)++;
        emit(s, a, &l1, &h1, count);
        emit(s, b, &l2, &h2, count);
        while (**s == ' ')
            (*s)++;
        (*s)++;     /* ')' */
        snprintf(out, 32, "P%d", ++*count);
        printf("%s = matmul(%s, %s)   # d%d x d%d times d%d x d%d\n", out, a, b, l1, h1, l2, h2);
        *lo = l1;
        *hi = h2;
        return out;
    }
    int m = (int)strtol(*s, (char **)s, 10);
    snprintf(out, 32, "M%d", m);
    *lo = m - 1;
    *hi = m;
    return out;
}

static int chain(char which, const char *dtype, double scale)
{
    const chain_def *c = NULL;
    for (size_t i = 0; i < sizeof chains / sizeof chains[0]; i++)
        if (chains[i].name == which)
            c = &chains[i];
    if (!c) {
        fprintf(stderr, "eingen: unknown chain '%c'; expected A, B, C, D or E\n", which);
        return 2;
    }
    printf("# Matrix chain %c (paper section 6): %s\n", c->name, c->paren);
    if (scale != 1.0)
        printf("# Generated by: eingen chain %c --scale %g\ndims", c->name, scale);
    else
        printf("# Generated by: eingen chain %c\ndims", c->name);
    for (int i = 0; i < c->ndims; i++) {
        long d = (long)llround((double)c->dims[i] * scale);
        printf(" d%d=%ld", i, d < 1 ? 1 : d);
    }
    printf("\ndtype %s\n", dtype);
    for (int i = 1; i < c->ndims; i++)
        printf("input M%d[d%d, d%d]\n", i, i - 1, i);
    const char *s = c->paren;
    char out[32];
    int lo, hi, count = 0;
    emit(&s, out, &lo, &hi, &count);
    printf("save %s\n", out);
    return 0;
}

/* A number option's value: a whole number in [lo, hi], or -1 with a message. */
static long whole(const char *opt, const char *v, long lo, long hi)
{
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || end == v || x < lo || x > hi) {
        fprintf(stderr, "eingen: %s '%s': expected a whole number from %ld to %ld\n", opt, v, lo, hi);
        return -1;
    }
    return x;
}

int main(int argc, char **argv)
{
    static llama_cfg c = {.blocks = 1, .dtype = "f16", .heads = 32, .kv_heads = 8, .head_dim = 128,
                          .d_ff = 14336, .theta = 500000, .eps = 1e-5, .vocab = 128256};
    double scale = 1.0;
    int explicit_dims = 0;
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(stdout);
        return 0;
    }
    /* --config first: the command line's own options override it. */
    for (int i = 2; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--config")) {
            if (read_config(argv[i + 1], &c) < 0)
                return 2;
            explicit_dims = 1;
        }
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long *dim = !strcmp(a, "--heads") ? &c.heads : !strcmp(a, "--kv-heads") ? &c.kv_heads
                  : !strcmp(a, "--head-dim") ? &c.head_dim : !strcmp(a, "--d-ff") ? &c.d_ff : NULL;
        if (!strcmp(a, "--quantization") && v) {
            const char *q = argv[++i];
            c.quant = !strcmp(q, "int8") ? "q8_0" : !strcmp(q, "q4") ? "q4_0"
                      : !strcmp(q, "fp8") ? "f8e4m3" : NULL;
            if (!c.quant) {
                fprintf(stderr, "eingen: --quantization '%s': expected int8 (q8_0), q4 (q4_0) or "
                                "fp8 (f8e4m3)\n", q);
                return 2;
            }
            continue;
        }
        if (!strcmp(a, "--dtype") && v) {
            c.dtype = argv[++i];
            if (strcmp(c.dtype, "f16") && strcmp(c.dtype, "bf16") && strcmp(c.dtype, "f32")) {
                fprintf(stderr, "eingen: --dtype '%s': expected f16, bf16 or f32\n", c.dtype);
                return 2;
            }
        } else if (!strcmp(a, "--seqs") && v) {
            c.seqs = strtol(argv[++i], NULL, 10);
        } else if (!strcmp(a, "--tokens") && v) {
            c.tokens = strtol(argv[++i], NULL, 10);
        } else if (!strcmp(a, "--blocks") && v) {
            c.blocks = (int)strtol(argv[++i], NULL, 10);
        } else if (dim && v) {
            if ((*dim = whole(a, argv[++i], 1, 1 << 20)) < 0)
                return 2;
            explicit_dims = 1;
        } else if ((!strcmp(a, "--scale") || !strcmp(a, "--theta") || !strcmp(a, "--eps")) && v) {
            char *end;
            double x = strtod(argv[++i], &end);
            int ok = !*end && end != argv[i] && isfinite(x);
            if (!strcmp(a, "--scale") && ok && x > 0 && x <= 1)
                scale = x;
            else if (!strcmp(a, "--theta") && ok && x > 1 && x <= 1e12)
                c.theta = x;
            else if (!strcmp(a, "--eps") && ok && x >= 0 && x < 1)
                c.eps = x;
            else {
                fprintf(stderr, "eingen: %s '%s': expected %s\n", a, argv[i],
                        !strcmp(a, "--scale") ? "a factor in (0, 1], e.g. 0.0625"
                        : !strcmp(a, "--theta") ? "a rope base in (1, 1e12]" : "an epsilon in [0, 1)");
                return 2;
            }
        } else if (!strcmp(a, "--hf")) {
            c.hf = 1;
        } else if (!strcmp(a, "--config") && v) {
            i++; /* read above */
        } else if (!strcmp(a, "--model")) {
            c.model = 1;
        } else if (!strcmp(a, "--tied")) {
            c.tied = 1;
        } else if (!strcmp(a, "--logits") && v && (!strcmp(v, "last") || !strcmp(v, "all"))) {
            c.all_logits = !strcmp(argv[++i], "all");
        } else if (!strcmp(a, "--vocab") && v) {
            if ((c.vocab = whole(a, argv[++i], 1, 1L << 24)) < 0)
                return 2;
        } else if (!strcmp(a, "--seq-lens") && v) {
            const char *p = argv[++i];
            c.seqs = c.tokens = 0;
            c.have_lens = 1;
            for (;;) {
                char *end;
                long x = strtol(p, &end, 10);
                if (end == p || x < 1 || x > (1L << 24) || c.seqs == MAX_SEQS ||
                    (*end && *end != ',')) {
                    fprintf(stderr, "eingen: --seq-lens '%s': expected up to %d lengths from 1 "
                                    "to 2^24 separated by commas, e.g. 5,9,3\n", argv[i], MAX_SEQS);
                    return 2;
                }
                c.lens[c.seqs++] = x;
                c.tokens += x;
                if (!*end)
                    break;
                p = end + 1;
            }
        } else if (!strcmp(argv[1], "chain") && i == 2 && strlen(a) == 1) {
            continue;
        } else {
            fprintf(stderr, "eingen: unexpected argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!strcmp(argv[1], "llama")) {
        if (c.seqs < 1 || c.tokens < 1 || (!c.have_lens && c.tokens % c.seqs) || c.seqs > MAX_SEQS || c.blocks < 1 ||
            c.blocks > 4096) {
            fprintf(stderr, "eingen: llama needs --seqs S and --tokens T with S in 1..512 "
                            "dividing T (or --seq-lens), and --blocks in 1..4096\n");
            return 2;
        }
        if (!c.have_lens)
            for (long i = 0; i < c.seqs; i++)
                c.lens[i] = c.tokens / c.seqs;
        long longest = 0;
        for (long i = 0; i < c.seqs; i++)
            longest = c.lens[i] > longest ? c.lens[i] : longest;
        if (c.window >= longest)
            c.window = 0;   /* a window no sequence fills: full causal attention */
        if ((c.tied || c.all_logits) && !c.model) {
            fprintf(stderr, "eingen: --tied and --logits need --model\n");
            return 2;
        }
        if (scale != 1.0) {
            if (explicit_dims) {
                fprintf(stderr, "eingen: give --scale or explicit --heads/--kv-heads/--head-dim/"
                                "--d-ff, not both\n");
                return 2;
            }
            c.heads = lround(32 * scale) < 1 ? 1 : lround(32 * scale);
            c.kv_heads = lround(8 * scale) < 1 ? 1 : lround(8 * scale);
            c.d_ff = lround(14336 * scale) < 1 ? 1 : lround(14336 * scale);
            while (c.heads % c.kv_heads)
                c.kv_heads--;
        }
        if (c.heads % c.kv_heads || c.head_dim % 2) {
            fprintf(stderr, "eingen: --kv-heads %ld must divide --heads %ld, and --head-dim %ld "
                            "must be even\n", c.kv_heads, c.heads, c.head_dim);
            return 2;
        }
        return llama(&c);
    }
    if (!strcmp(argv[1], "chain") && argc >= 3 && strlen(argv[2]) == 1) {
        if (explicit_dims || c.hf || c.model || c.quant) {
            fprintf(stderr, "eingen: chain takes --dtype and --scale only\n");
            return 2;
        }
        return chain(argv[2][0], c.dtype, scale);
    }
    usage(stderr);
    return 2;
}
