/* tests/api/test_model_config.c — the one transformers config reader
 * through the public API (issue 34): transformers' defaults per model
 * type, every supported key read, the refused keys and values named in the
 * message, sliding windows (Qwen2's per-layer ones refused), the JSON
 * form, and rope scaling frequencies against transformers' formula
 * written out here (not the library's). */
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
#include "common/ir/ein_rope.h"

static ein_model_config cfg(const char *text)
{
    ein_model_config c;
    ein_error err = {0};
    int rc = ein_model_config_read(NULL, text, &c, &err);
    if (rc != 0)
        fail_msg("%s: rc %d: %s", text, rc, err.msg);
    return c;
}

static void refused(const char *text, int code, const char *w1, const char *w2)
{
    ein_model_config c;
    ein_error err = {0};
    int rc = ein_model_config_read(NULL, text, &c, &err);
    if (rc != code || !strstr(err.msg, w1) || (w2 && !strstr(err.msg, w2)))
        fail_msg("%s: rc %d, '%s'; want %d naming '%s' '%s'", text, rc, err.msg, code, w1,
                 w2 ? w2 : "");
}

static void test_defaults(void **state)
{
    (void)state;
    ein_model_config c = cfg("{\"model_type\": \"llama\"}");
    assert_string_equal(c.model_type, "llama");
    assert_true(c.rope_theta == 10000.0 && c.rms_norm_eps == 1e-6);
    assert_int_equal(c.hidden_size, 4096);
    assert_int_equal(c.heads, 32);
    assert_int_equal(c.kv_heads, 32);
    assert_int_equal(c.head_dim, 128);
    assert_int_equal(c.intermediate_size, 11008);
    assert_string_equal(c.act, "silu");
    assert_int_equal(c.tied + c.qkv_bias + c.o_bias + c.mlp_bias + c.has_dtype, 0);
    assert_int_equal(c.rope_scaling.type, EIN_ROPE_SCALING_NONE);
    assert_int_equal(c.neos, 1);
    assert_int_equal(c.eos[0], 2);
    c = cfg("{\"model_type\": \"mistral\"}");
    assert_int_equal(c.kv_heads, 8);
    assert_int_equal(c.sliding_window, 4096);
    c = cfg("{\"model_type\": \"qwen2\", \"sliding_window\": 16}");
    assert_int_equal(c.qkv_bias, 1);
    assert_int_equal(c.o_bias, 0);
    assert_int_equal(c.sliding_window, 0);   /* use_sliding_window false */
    assert_int_equal(c.neos, 0);
    c = cfg("{\"model_type\": \"qwen2\", \"use_sliding_window\": true, "
            "\"max_window_layers\": 0}");
    assert_int_equal(c.sliding_window, 4096);
    /* windows in the layers from max_window_layers on: none here (32 >= 32) */
    c = cfg("{\"model_type\": \"qwen2\", \"use_sliding_window\": true, "
            "\"max_window_layers\": 32}");
    assert_int_equal(c.sliding_window, 0);
}

static void test_keys(void **state)
{
    (void)state;
    ein_model_config c = cfg(
        "{\"model_type\": \"llama\", \"architectures\": [\"LlamaForCausalLM\"],"
        " \"hidden_size\": 32, \"intermediate_size\": 40, \"num_attention_heads\": 4,"
        " \"num_key_value_heads\": 2, \"head_dim\": 16, \"num_hidden_layers\": 3,"
        " \"vocab_size\": 61, \"rms_norm_eps\": 1e-5, \"rope_theta\": 500000.0,"
        " \"tie_word_embeddings\": true, \"hidden_act\": \"gelu_pytorch_tanh\","
        " \"attention_bias\": true, \"mlp_bias\": true, \"torch_dtype\": \"bfloat16\","
        " \"eos_token_id\": [128001, 128009], \"pretraining_tp\": 1,"
        " \"transformers_version\": \"4.45\", \"use_cache\": true, \"bos_token_id\": 1,"
        " \"initializer_range\": 0.02, \"attention_dropout\": 0.0,"
        " \"max_position_embeddings\": 131072,"
        " \"rope_scaling\": {\"factor\": 8.0, \"low_freq_factor\": 1.0,"
        " \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192,"
        " \"rope_type\": \"llama3\"}}");
    assert_int_equal(c.hidden_size, 32);
    assert_int_equal(c.head_dim, 16);
    assert_int_equal(c.layers, 3);
    assert_string_equal(c.act, "gelu");
    assert_int_equal(c.tied && c.qkv_bias && c.o_bias && c.mlp_bias, 1);
    assert_int_equal(c.dtype, EIN_BF16);
    assert_int_equal(c.neos, 2);
    assert_int_equal(c.eos[1], 128009);
    assert_int_equal(c.rope_scaling.type, EIN_ROPE_SCALING_LLAMA3);
    assert_true(c.rope_scaling.original_max_position == 8192 && c.rope_scaling.factor == 8);
    assert_string_equal(cfg("{\"model_type\": \"llama\", \"hidden_act\": \"gelu\"}").act,
                        "gelu_exact");
    c = cfg("{\"model_type\": \"llama\", \"rope_scaling\": {\"type\": \"linear\", \"factor\": 4}}");
    assert_int_equal(c.rope_scaling.type, EIN_ROPE_SCALING_LINEAR);
}

static void test_refused(void **state)
{
    (void)state;
    refused("{\"model_type\": \"gemma\"}", EIN_EUNSUPPORTED, "model_type", "gemma");
    refused("{\"hidden_size\": 8}", EIN_EUNSUPPORTED, "no model_type", NULL);
    refused("{\"model_type\": \"llama\", \"rope_scaling\": {\"rope_type\": \"yarn\", "
            "\"factor\": 4}}", EIN_EUNSUPPORTED, "rope_scaling", "yarn");
    refused("{\"model_type\": \"llama\", \"rope_scaling\": {\"type\": \"linear\", "
            "\"factor\": 4, \"finetuned\": true}}", EIN_EUNSUPPORTED, "finetuned", NULL);
    refused("{\"model_type\": \"llama\", \"rope_scaling\": {\"rope_type\": \"llama3\", "
            "\"factor\": 8}}", EIN_EINVAL, "needs low_freq_factor", NULL);
    refused("{\"model_type\": \"llama\", \"quantization_config\": {\"bits\": 4}}",
            EIN_EUNSUPPORTED, "quantization_config", "bits");
    refused("{\"model_type\": \"llama\", \"quantization_config\": {\"quant_method\": \"awq\"}}",
            EIN_EUNSUPPORTED, "AWQ", "quantize at load");
    refused("{\"model_type\": \"llama\", \"quantization_config\": {\"quant_method\": "
            "\"compressed-tensors\"}}", EIN_EUNSUPPORTED, "compressed-tensors", "int8");
    refused("{\"model_type\": \"llama\", \"logit_softcapping\": 30}", EIN_EUNSUPPORTED,
            "logit_softcapping", "30");
    refused("{\"model_type\": \"llama\", \"hidden_act\": \"quick_gelu\"}", EIN_EUNSUPPORTED,
            "hidden_act", "quick_gelu");
    refused("{\"model_type\": \"llama\", \"pretraining_tp\": 2}", EIN_EUNSUPPORTED,
            "pretraining_tp 2", NULL);
    refused("{\"model_type\": \"mistral\", \"mlp_bias\": true}", EIN_EUNSUPPORTED, "mlp_bias",
            "mistral");
    refused("{\"model_type\": \"llama\", \"torch_dtype\": \"float64\"}", EIN_EUNSUPPORTED,
            "torch_dtype", "float64");
    refused("{\"model_type\": \"llama\", \"architectures\": [\"LlamaModel\"]}",
            EIN_EUNSUPPORTED, "architectures", "LlamaModel");
    refused("{\"model_type\": \"llama\", \"hidden_size\": 30}", EIN_EINVAL, "hidden_size 30",
            "head_dim");
    refused("{\"model_type\": \"llama\", \"num_key_value_heads\": 3}", EIN_EINVAL,
            "num_key_value_heads 3", NULL);
    refused("{\"model_type\": \"llama\", \"vocab_size\": 1.5}", EIN_EINVAL, "vocab_size", NULL);
    refused("{\"model_type\": \"llama\"", EIN_EPARSE, "config", NULL);
    refused("[1]", EIN_EPARSE, "JSON object", NULL);
    ein_model_config c;
    ein_error err = {0};
    assert_int_equal(ein_model_config_read("/nonexistent/config.json", NULL, &c, &err), EIN_EIO);
}

static void test_context(void **state)
{
    (void)state;
    ein_model_config c = cfg("{\"model_type\": \"mistral\", \"sliding_window\": 64}");
    assert_int_equal(c.sliding_window, 64);
    c = cfg("{\"model_type\": \"mistral\", \"sliding_window\": null}");
    assert_int_equal(c.sliding_window, 0);
    /* Qwen2's window in some layers only: refused by name */
    refused("{\"model_type\": \"qwen2\", \"use_sliding_window\": true, \"num_hidden_layers\": 4, "
            "\"max_window_layers\": 2}", EIN_EUNSUPPORTED, "max_window_layers 2 of 4", NULL);
}

static void test_json(void **state)
{
    (void)state;
    ein_error err = {0};
    char *s = ein_model_config_json(NULL, "{\"model_type\": \"qwen2\", \"torch_dtype\": "
                                          "\"float16\"}", &err);
    assert_non_null(s);
    assert_non_null(strstr(s, "\"model_type\":\"qwen2\""));
    assert_non_null(strstr(s, "\"qkv_bias\":true"));
    assert_non_null(strstr(s, "\"dtype\":\"f16\""));
    free(s);
    assert_null(ein_model_config_json(NULL, "{\"model_type\": \"x\"}", &err));
    assert_non_null(strstr(err.msg, "model_type"));
}

/* transformers' _compute_llama3_parameters for one frequency, written out. */
static double llama3_ref(double inv, double factor, double lo, double hi, double old)
{
    double wl = 2 * M_PI / inv;
    double l = wl > old / lo ? inv / factor : inv;
    double smooth = (old / wl - lo) / (hi - lo);
    double smoothed = (1 - smooth) * l / factor + smooth * l;
    int medium = !(wl < old / hi) && !(wl > old / lo);
    return medium ? smoothed : l;
}

static void test_freq(void **state)
{
    (void)state;
    ein_rope_scaling s = {EIN_ROPE_SCALING_LLAMA3, 8, 1, 4, 8192};
    int bands[3] = {0, 0, 0};
    for (int i = 0; i < 64; i++) {
        double inv = 1.0 / pow(500000.0, 2.0 * i / 128.0);
        double want = llama3_ref(inv, 8, 1, 4, 8192), got = ein_rope_freq(500000, i, 128, &s);
        if (!(fabs(got - want) <= 1e-15 * want))
            fail_msg("pair %d: %.17g, want %.17g", i, got, want);
        bands[got == inv ? 0 : fabs(got * 8 - inv) <= 1e-12 * inv ? 2 : 1]++;
    }
    assert_true(bands[0] > 0 && bands[1] > 0 && bands[2] > 0);   /* all three bands */
    ein_rope_scaling lin = {EIN_ROPE_SCALING_LINEAR, 4, 0, 0, 0};
    assert_true(ein_rope_freq(10000, 3, 8, &lin) == pow(10000.0, -6.0 / 8.0) / 4);
    assert_true(ein_rope_freq(10000, 3, 8, NULL) == pow(10000.0, -6.0 / 8.0));
    /* the graph API refuses invalid factors and other operators */
    ein_graph *g = ein_graph_create();
    ein_error err = {0};
    ein_tensor x = ein_graph_insert_tensor(g, "x", ein_tensor_desc_2d(4, 8, EIN_F32), &err);
    ein_tensor r = ein_graph_rope_ex(g, "r", x, 4, 10000, NULL, 0, EIN_ROPE_HALF, &err);
    assert_true(r >= 0);
    assert_int_equal(ein_graph_rope_scaling(g, r, &s, &err), 0);
    ein_rope_scaling bad = {EIN_ROPE_SCALING_LLAMA3, 8, 4, 1, 8192};
    assert_int_equal(ein_graph_rope_scaling(g, r, &bad, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "high_freq_factor"));
    assert_int_equal(ein_graph_rope_scaling(g, x, &s, &err), EIN_EINVAL);
    ein_graph_destroy(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults), cmocka_unit_test(test_keys),
        cmocka_unit_test(test_refused),  cmocka_unit_test(test_context),
        cmocka_unit_test(test_json),     cmocka_unit_test(test_freq),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
