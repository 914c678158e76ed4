/* common/io/ein_model_config.c — the one reader of transformers' config.json
 * (issue 34; declared in include/einsummable/einsummable.h).
 *
 * Each key of a config is looked up in the table below: implemented (read
 * into ein_model_config), harmless (does not change the logits: versions,
 * token ids of the tokenizer, training-only settings), or refused by name
 * with its value and what is supported. A key the table does not know is
 * refused too: transformers grows keys that change the math, and a config
 * must never run as something it does not say. Defaults are transformers'
 * (LlamaConfig, MistralConfig, Qwen2Config) for the model_type. */
#include "include/einsummable/einsummable.h"
#include "common/base/ein_error.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

/* The model types and what transformers gives them by default. */
typedef struct mc_type {
    const char *name, *arch;
    int64_t vocab, hidden, inter, layers, heads, kv_heads, maxpos, window;
    int qkv_bias, eos;
} mc_type;

static const mc_type mc_types[] = {
    /* LlamaConfig: kv heads default to the heads, eos 2, no window */
    {"llama", "LlamaForCausalLM", 32000, 4096, 11008, 32, 32, 0, 2048, 0, 0, 2},
    /* MistralConfig: 8 kv heads, sliding_window 4096 */
    {"mistral", "MistralForCausalLM", 32000, 4096, 14336, 32, 32, 8, 131072, 4096, 0, 2},
    /* Qwen2Config: q/k/v biases always (Qwen2Attention), no o bias, no eos
     * default; a window only with use_sliding_window */
    {"qwen2", "Qwen2ForCausalLM", 151936, 4096, 22016, 32, 32, 32, 32768, 0, 1, -1},
};

/* Keys that never change the logits. */
static const char *const mc_harmless[] = {
    "transformers_version", "bos_token_id", "pad_token_id", "use_cache",
    "initializer_range", "attention_dropout", "_name_or_path", "name_or_path",
    "output_attentions", "output_hidden_states", "return_dict", "torchscript",
    "tokenizer_class", "max_window_layers",
};

/* Keys read below (their model types: all unless said). */
static const char *const mc_known[] = {
    "model_type", "architectures", "hidden_size", "intermediate_size",
    "num_attention_heads", "num_key_value_heads", "head_dim", "num_hidden_layers",
    "vocab_size", "max_position_embeddings", "rms_norm_eps", "rope_theta", "rope_scaling",
    "hidden_act", "tie_word_embeddings", "torch_dtype", "dtype", "eos_token_id",
    "pretraining_tp", "attention_bias", "mlp_bias", "sliding_window", "use_sliding_window",
};

/* A value as compact JSON for a message (at most ~80 characters). */
static const char *mc_val(const json_t *v, char *buf, size_t n)
{
    char *s = v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    snprintf(buf, n, "%s", s ? s : "?");
    if (s && strlen(s) >= n && n > 4)
        memcpy(buf + n - 4, "...", 4);
    free(s);
    return buf;
}

/* A key as it may appear in a message: itself when printable ASCII, else
 * as an escaped JSON string. */
static const char *mc_key(const char *key, char *buf, size_t n)
{
    int plain = 1;
    for (const unsigned char *c = (const unsigned char *)key; *c && plain; c++)
        plain = *c >= 0x20 && *c < 0x7f;
    if (plain && strlen(key) < n) {
        snprintf(buf, n, "%s", key);
        return buf;
    }
    json_t *s = json_string(key);
    mc_val(s, buf, n);
    json_decref(s);
    return buf;
}

static int mc_refuse(ein_error *err, const char *key, const json_t *v, const char *supported)
{
    char b[96];
    return ein_fail(err, EIN_EUNSUPPORTED, "config: %s %s is not supported (%s)", key,
                    mc_val(v, b, sizeof b), supported);
}

/* An integer key in [lo, hi]: 0 (also when absent or null: *out kept), or
 * an error naming it. */
static int mc_int(json_t *root, const char *key, int64_t lo, int64_t hi, int64_t *out,
                  ein_error *err)
{
    json_t *x = json_object_get(root, key);
    if (!x || json_is_null(x))
        return 0;
    char b[96];
    if (!json_is_integer(x) || json_integer_value(x) < lo || json_integer_value(x) > hi)
        return ein_fail(err, EIN_EINVAL, "config: %s %s: expected a whole number from %" PRId64
                        " to %" PRId64, key, mc_val(x, b, sizeof b), lo, hi);
    *out = (int64_t)json_integer_value(x);
    return 0;
}

static int mc_num(json_t *root, const char *key, double lo, double hi, double *out,
                  ein_error *err)
{
    json_t *x = json_object_get(root, key);
    if (!x || json_is_null(x))
        return 0;
    char b[96];
    if (!json_is_number(x) || !(json_number_value(x) > lo) || !(json_number_value(x) <= hi))
        return ein_fail(err, EIN_EINVAL, "config: %s %s: expected a number in (%g, %g]", key,
                        mc_val(x, b, sizeof b), lo, hi);
    *out = json_number_value(x);
    return 0;
}

static int mc_bool(json_t *root, const char *key, int *out, ein_error *err)
{
    json_t *x = json_object_get(root, key);
    if (!x || json_is_null(x))
        return 0;
    char b[96];
    if (!json_is_boolean(x))
        return ein_fail(err, EIN_EINVAL, "config: %s %s: expected true or false", key,
                        mc_val(x, b, sizeof b));
    *out = json_is_true(x);
    return 0;
}

/* rope_scaling: null, or {"rope_type" (or "type"): "default" | "linear" |
 * "llama3", and that type's numbers}. */
static int mc_rope_scaling(json_t *x, ein_rope_scaling *rs, ein_error *err)
{
    memset(rs, 0, sizeof *rs);
    if (!x || json_is_null(x))
        return 0;
    const char *sup = "supported: null, or rope_type \"default\", \"linear\" (factor) or "
                      "\"llama3\" (factor, low_freq_factor, high_freq_factor, "
                      "original_max_position_embeddings)";
    if (!json_is_object(x))
        return mc_refuse(err, "rope_scaling", x, sup);
    json_t *t = json_object_get(x, "rope_type");
    if (!t)
        t = json_object_get(x, "type");
    if (!t || !json_is_string(t))
        return mc_refuse(err, "rope_scaling", x, sup);
    const char *ty = json_string_value(t);
    char b[96];
    if (!strcmp(ty, "default"))
        rs->type = EIN_ROPE_SCALING_NONE;
    else if (!strcmp(ty, "linear"))
        rs->type = EIN_ROPE_SCALING_LINEAR;
    else if (!strcmp(ty, "llama3"))
        rs->type = EIN_ROPE_SCALING_LLAMA3;
    else {
        char tb[96];
        return ein_fail(err, EIN_EUNSUPPORTED, "config: rope_scaling type %s (%s) is not "
                        "supported (%s)", mc_val(t, tb, sizeof tb), mc_val(x, b, sizeof b), sup);
    }
    struct { const char *key; double *dst; int need; } f[] = {
        {"factor", &rs->factor, rs->type != EIN_ROPE_SCALING_NONE},
        {"low_freq_factor", &rs->low_freq_factor, rs->type == EIN_ROPE_SCALING_LLAMA3},
        {"high_freq_factor", &rs->high_freq_factor, rs->type == EIN_ROPE_SCALING_LLAMA3},
        {"original_max_position_embeddings", &rs->original_max_position,
         rs->type == EIN_ROPE_SCALING_LLAMA3},
    };
    const char *key;
    json_t *v;
    json_object_foreach(x, key, v) {
        int ok = !strcmp(key, "rope_type") || !strcmp(key, "type");
        for (size_t i = 0; i < sizeof f / sizeof f[0] && !ok; i++)
            if (!strcmp(key, f[i].key) && f[i].need) {
                if (!json_is_number(v) || !(json_number_value(v) > 0) ||
                    !(json_number_value(v) < 1e12))
                    return ein_fail(err, EIN_EINVAL, "config: rope_scaling %s %s: expected a "
                                    "positive number", key, mc_val(v, b, sizeof b));
                *f[i].dst = json_number_value(v);
                ok = 1;
            }
        char kb[96];
        if (!ok)
            return ein_fail(err, EIN_EUNSUPPORTED, "config: rope_scaling key %s %s is not "
                            "supported with type \"%s\" (%s)", mc_key(key, kb, sizeof kb),
                            mc_val(v, b, sizeof b), ty, sup);
    }
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].need && *f[i].dst == 0)
            return ein_fail(err, EIN_EINVAL, "config: rope_scaling type \"%s\" needs %s", ty,
                            f[i].key);
    if (rs->type == EIN_ROPE_SCALING_LLAMA3 && !(rs->high_freq_factor > rs->low_freq_factor))
        return ein_fail(err, EIN_EINVAL, "config: rope_scaling high_freq_factor %g must exceed "
                        "low_freq_factor %g", rs->high_freq_factor, rs->low_freq_factor);
    return 0;
}

/* hidden_act: transformers' ACT2FN names whose function a unary computes. */
static int mc_act(json_t *x, char act[16], ein_error *err)
{
    static const char *const map[][2] = {
        {"silu", "silu"}, {"swish", "silu"}, {"gelu", "gelu_exact"},
        {"gelu_pytorch_tanh", "gelu"}, {"gelu_new", "gelu"}, {"gelu_fast", "gelu"},
        {"relu", "relu"},
    };
    if (!x || json_is_null(x))
        return 0;
    for (size_t i = 0; json_is_string(x) && i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(json_string_value(x), map[i][0])) {
            snprintf(act, 16, "%s", map[i][1]);
            return 0;
        }
    return mc_refuse(err, "hidden_act", x, "supported: silu, swish, gelu (exact, erf), "
                     "gelu_pytorch_tanh, gelu_new, gelu_fast (tanh approximation), relu");
}

/* c->sliding_window: the model type's, or as the config sets it. */
static int mc_window(json_t *root, const mc_type *ty, ein_model_config *c, ein_error *err)
{
    int64_t window = ty->window;
    int rc;
    /* the window: Mistral's sliding_window (null: none); Qwen2's only with
     * use_sliding_window */
    json_t *sw = json_object_get(root, "sliding_window");
    if (sw && json_is_null(sw))
        window = 0;
    else if ((rc = mc_int(root, "sliding_window", 1, INT64_C(1) << 40, &window, err)) < 0)
        return rc;
    if (!strcmp(ty->name, "qwen2")) {
        /* Qwen2Attention: the window only with use_sliding_window, and only
         * in layers from max_window_layers (default 28) on */
        int use = 0;
        int64_t from = 28;
        if ((rc = mc_bool(root, "use_sliding_window", &use, err)) < 0 ||
            (rc = mc_int(root, "max_window_layers", 0, 4096, &from, err)) < 0)
            return rc;
        if (!use || from >= c->layers)
            window = 0;
        else if (!sw)
            window = 4096;
        if (window && from > 0)
            return ein_fail(err, EIN_EUNSUPPORTED, "config: use_sliding_window with "
                            "max_window_layers %" PRId64 " of %" PRId64 " layers is not "
                            "supported (a window in some layers only; supported: "
                            "max_window_layers 0 or at least num_hidden_layers)", from,
                            c->layers);
    }
    c->sliding_window = window;
    return 0;
}

/* c->dtype (torch_dtype, else dtype) and c->eos (eos_token_id, else the
 * model type's). */
static int mc_dtype_eos(json_t *root, const mc_type *ty, ein_model_config *c, ein_error *err)
{
    char b[96];
    json_t *dt = json_object_get(root, "torch_dtype");
    if (!dt || json_is_null(dt))
        dt = json_object_get(root, "dtype");
    if (dt && !json_is_null(dt)) {
        const char *d = json_is_string(dt) ? json_string_value(dt) : "";
        c->has_dtype = 1;
        if (!strcmp(d, "float32"))
            c->dtype = EIN_F32;
        else if (!strcmp(d, "float16"))
            c->dtype = EIN_F16;
        else if (!strcmp(d, "bfloat16"))
            c->dtype = EIN_BF16;
        else
            return mc_refuse(err, "torch_dtype", dt, "supported: float32, float16, bfloat16");
    }
    json_t *eos = json_object_get(root, "eos_token_id");
    if (!eos && ty->eos >= 0) {
        c->neos = 1;
        c->eos[0] = ty->eos;
    } else if (eos && json_is_integer(eos)) {
        c->neos = 1;
        c->eos[0] = json_integer_value(eos);
    } else if (eos && json_is_array(eos) && json_array_size(eos) <= EIN_MODEL_MAX_EOS) {
        size_t i;
        json_t *e;
        json_array_foreach(eos, i, e) {
            if (!json_is_integer(e))
                return ein_fail(err, EIN_EINVAL, "config: eos_token_id %s: expected ids",
                                mc_val(eos, b, sizeof b));
            c->eos[c->neos++] = json_integer_value(e);
        }
    } else if (eos && !json_is_null(eos))
        return ein_fail(err, EIN_EINVAL, "config: eos_token_id %s: expected an id, a list of "
                        "at most %d ids, or null", mc_val(eos, b, sizeof b), EIN_MODEL_MAX_EOS);
    return 0;
}

/* Whether `key` is implemented or harmless for model type ty. */
static int mc_key_known(const char *key, const mc_type *ty)
{
    int known = 0;
    for (size_t i = 0; i < sizeof mc_known / sizeof mc_known[0] && !known; i++)
        known = !strcmp(key, mc_known[i]);
    for (size_t i = 0; i < sizeof mc_harmless / sizeof mc_harmless[0] && !known; i++)
        known = !strcmp(key, mc_harmless[i]);
    /* biases are LlamaConfig's keys; a window Mistral's and Qwen2's */
    if ((!strcmp(key, "attention_bias") || !strcmp(key, "mlp_bias")) &&
        strcmp(ty->name, "llama"))
        known = 0;
    if (!strcmp(key, "use_sliding_window") && strcmp(ty->name, "qwen2"))
        known = 0;
    if (!strcmp(key, "max_window_layers") && strcmp(ty->name, "qwen2"))
        known = 0;
    if (!strcmp(key, "sliding_window") && !strcmp(ty->name, "llama"))
        known = 0;
    return known;
}

static int mc_read(json_t *root, ein_model_config *c, ein_error *err)
{
    char b[96];
    int rc;
    if (!json_is_object(root))
        return ein_fail(err, EIN_EPARSE, "config: expected a JSON object");
    json_t *mt = json_object_get(root, "model_type");
    const mc_type *ty = NULL;
    for (size_t i = 0; mt && json_is_string(mt) && i < sizeof mc_types / sizeof mc_types[0]; i++)
        if (!strcmp(json_string_value(mt), mc_types[i].name))
            ty = &mc_types[i];
    if (!mt)
        return ein_fail(err, EIN_EUNSUPPORTED, "config: no model_type (supported: llama, "
                        "mistral, qwen2)");
    if (!ty)
        return mc_refuse(err, "model_type", mt, "supported: llama, mistral, qwen2");

    /* every key: implemented, harmless, or refused */
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        int known = mc_key_known(key, ty);
        if (!strcmp(key, "quantization_config")) {
            /* a pre-quantized checkpoint (GPTQ, AWQ, compressed-tensors, ...):
             * named by its quant_method (issue 36) */
            const json_t *qm = json_is_object(v) ? json_object_get(v, "quant_method") : NULL;
            const char *fmt = qm && json_is_string(qm) ? json_string_value(qm) : "?";
            return ein_fail(err, EIN_EUNSUPPORTED, "config: quantization_config %s: a "
                            "pre-quantized checkpoint (quant_method %s%s) is not supported; "
                            "load its f32, f16 or bf16 weights and quantize at load "
                            "(es.llama.load quantization=\"int8\" or \"q4\", eingen llama "
                            "--quantization)", mc_val(v, b, sizeof b), fmt,
                            !strcmp(fmt, "gptq") ? ": GPTQ" : !strcmp(fmt, "awq") ? ": AWQ"
                            : !strcmp(fmt, "compressed-tensors") ? ": compressed-tensors" : "");
        }
        char kb[96];
        if (!known)
            return ein_fail(err, EIN_EUNSUPPORTED, "config: key %s %s is not supported for "
                            "model_type %s (docs/hf-llama.md lists the supported keys)",
                            mc_key(key, kb, sizeof kb), mc_val(v, b, sizeof b), ty->name);
    }

    memset(c, 0, sizeof *c);
    snprintf(c->model_type, sizeof c->model_type, "%s", ty->name);
    json_t *ar = json_object_get(root, "architectures");
    if (ar && !json_is_null(ar) &&
        (!json_is_array(ar) || json_array_size(ar) != 1 ||
         !json_is_string(json_array_get(ar, 0)) ||
         strcmp(json_string_value(json_array_get(ar, 0)), ty->arch))) {
        char sup[64];
        snprintf(sup, sizeof sup, "supported for model_type %s: [\"%s\"]", ty->name, ty->arch);
        return mc_refuse(err, "architectures", ar, sup);
    }
    c->vocab = ty->vocab;
    c->hidden_size = ty->hidden;
    c->intermediate_size = ty->inter;
    c->layers = ty->layers;
    c->heads = ty->heads;
    c->max_position_embeddings = ty->maxpos;
    c->rms_norm_eps = 1e-6;
    c->rope_theta = 10000.0;
    snprintf(c->act, sizeof c->act, "silu");
    c->qkv_bias = ty->qkv_bias;
    int64_t kv = ty->kv_heads, hd = 0, tp = 1;
    if ((rc = mc_int(root, "vocab_size", 1, INT64_C(1) << 24, &c->vocab, err)) < 0 ||
        (rc = mc_int(root, "hidden_size", 1, INT64_C(1) << 20, &c->hidden_size, err)) < 0 ||
        (rc = mc_int(root, "intermediate_size", 1, INT64_C(1) << 22, &c->intermediate_size,
                     err)) < 0 ||
        (rc = mc_int(root, "num_hidden_layers", 1, 4096, &c->layers, err)) < 0 ||
        (rc = mc_int(root, "num_attention_heads", 1, 4096, &c->heads, err)) < 0 ||
        (rc = mc_int(root, "num_key_value_heads", 1, 4096, &kv, err)) < 0 ||
        (rc = mc_int(root, "head_dim", 2, 4096, &hd, err)) < 0 ||
        (rc = mc_int(root, "max_position_embeddings", 1, INT64_C(1) << 40,
                     &c->max_position_embeddings, err)) < 0 ||
        (rc = mc_int(root, "pretraining_tp", 1, 1024, &tp, err)) < 0 ||
        (rc = mc_num(root, "rms_norm_eps", 0, 1, &c->rms_norm_eps, err)) < 0 ||
        (rc = mc_num(root, "rope_theta", 1, 1e12, &c->rope_theta, err)) < 0 ||
        (rc = mc_bool(root, "tie_word_embeddings", &c->tied, err)) < 0 ||
        (rc = mc_rope_scaling(json_object_get(root, "rope_scaling"), &c->rope_scaling,
                              err)) < 0 ||
        (rc = mc_act(json_object_get(root, "hidden_act"), c->act, err)) < 0)
        return rc;
    if (tp != 1)
        return mc_refuse(err, "pretraining_tp", json_object_get(root, "pretraining_tp"),
                         "supported: 1");
    c->kv_heads = kv ? kv : c->heads;
    if (hd)
        c->head_dim = hd;
    else if (c->hidden_size % c->heads == 0)
        c->head_dim = c->hidden_size / c->heads;
    else
        return ein_fail(err, EIN_EINVAL, "config: hidden_size %" PRId64 " is not a multiple of "
                        "num_attention_heads %" PRId64 " and there is no head_dim",
                        c->hidden_size, c->heads);
    if (c->heads % c->kv_heads || c->head_dim % 2)
        return ein_fail(err, EIN_EINVAL, "config: num_key_value_heads %" PRId64 " must divide "
                        "num_attention_heads %" PRId64 " and head_dim %" PRId64 " be even",
                        c->kv_heads, c->heads, c->head_dim);
    int ab = 0, mb = 0;
    if ((rc = mc_bool(root, "attention_bias", &ab, err)) < 0 ||
        (rc = mc_bool(root, "mlp_bias", &mb, err)) < 0)
        return rc;
    if (ab)
        c->qkv_bias = c->o_bias = 1;
    c->mlp_bias = mb;
    if ((rc = mc_window(root, ty, c, err)) < 0 || (rc = mc_dtype_eos(root, ty, c, err)) < 0)
        return rc;
    return 0;
}

int ein_model_config_read(const char *path, const char *text, ein_model_config *out,
                          ein_error *err)
{
    json_error_t je;
    json_t *root = path ? json_load_file(path, JSON_REJECT_DUPLICATES, &je)
                        : json_loads(text ? text : "", JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        if (path && json_error_code(&je) == json_error_cannot_open_file)
            return ein_fail(err, EIN_EIO, "config %s: %s", path, je.text);
        return ein_fail(err, EIN_EPARSE, "config %s: %s (line %d)", path ? path : "text",
                        je.text, je.line);
    }
    ein_model_config c;
    int rc = mc_read(root, &c, err);
    json_decref(root);
    if (rc == 0)
        *out = c;
    return rc;
}

char *ein_model_config_json(const char *path, const char *text, ein_error *err)
{
    ein_model_config c;
    if (ein_model_config_read(path, text, &c, err) < 0)
        return NULL;
    static const char *const st[] = {"none", "linear", "llama3"};
    static const char *const dt[] = {"f32", "f16", "bf16"};
    const ein_rope_scaling *r = &c.rope_scaling;
    json_t *eos = json_array();
    for (int i = 0; eos && i < c.neos; i++)
        json_array_append_new(eos, json_integer(c.eos[i]));
    json_t *o = json_pack(
        "{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:{s:s, s:f, s:f, s:f, s:f}, "
        "s:s, s:b, s:b, s:b, s:b, s:I, s:o, s:o}",
        "model_type", c.model_type, "hidden_size", (json_int_t)c.hidden_size,
        "intermediate_size", (json_int_t)c.intermediate_size, "heads", (json_int_t)c.heads,
        "kv_heads", (json_int_t)c.kv_heads, "head_dim", (json_int_t)c.head_dim,
        "layers", (json_int_t)c.layers, "vocab", (json_int_t)c.vocab,
        "max_position_embeddings", (json_int_t)c.max_position_embeddings,
        "rms_norm_eps", c.rms_norm_eps, "rope_theta", c.rope_theta,
        "rope_scaling", "type", st[r->type], "factor", r->factor,
        "low_freq_factor", r->low_freq_factor, "high_freq_factor", r->high_freq_factor,
        "original_max_position", r->original_max_position,
        "act", c.act, "tied", c.tied, "qkv_bias", c.qkv_bias, "o_bias", c.o_bias,
        "mlp_bias", c.mlp_bias, "sliding_window", (json_int_t)c.sliding_window,
        "dtype", c.has_dtype ? json_string(dt[c.dtype]) : json_null(),
        "eos", eos ? eos : json_null());
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!s)
        ein_fail(err, EIN_ENOMEM, "config: out of memory");
    return s;
}
