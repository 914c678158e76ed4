/* tests/common/test_tokenizer.c — the C API of the tokenizer
 * (include/einsummable/ein_tokenizer.h) on a SentencePiece-style BPE built
 * here, whose ids are worked out by hand in the comments; errors and
 * refusals. The comparison with the reference implementations over a
 * corpus is tests/python/test_tokenizer.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "include/einsummable/ein_tokenizer.h"

/* <unk> 0, <s> 1, </s> 2, <0x00>..<0xFF> 3..258, then ▁ 259, h 260, i 261,
 * ▁h 262, ▁hi 263, a 264; merges (▁, h) then (▁h, i). */
static char *sp_json(const char *decoder, const char *model_type)
{
    static char buf[16384];
    int n = snprintf(buf, sizeof buf,
                     "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null,"
                     "\"added_tokens\": [{\"id\": 0, \"content\": \"<unk>\", \"single_word\": false,"
                     " \"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": true},"
                     "{\"id\": 1, \"content\": \"<s>\", \"single_word\": false, \"lstrip\": false,"
                     " \"rstrip\": false, \"normalized\": false, \"special\": true}],"
                     "\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": ["
                     "{\"type\": \"Prepend\", \"prepend\": \"\\u2581\"},"
                     "{\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\\u2581\"}]},"
                     "\"pre_tokenizer\": null,"
                     "\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": ["
                     "{\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\","
                     " \"type_id\": 0}}], \"pair\": [], \"special_tokens\": {\"<s>\": {\"id\": \"<s>\","
                     " \"ids\": [1], \"tokens\": [\"<s>\"]}}},"
                     "\"decoder\": %s,"
                     "\"model\": {\"type\": \"%s\", \"dropout\": null, \"unk_token\": \"<unk>\","
                     " \"continuing_subword_prefix\": null, \"end_of_word_suffix\": null,"
                     " \"fuse_unk\": true, \"byte_fallback\": true, \"vocab\": {\"<unk>\": 0, \"<s>\": 1,"
                     " \"</s>\": 2",
                     decoder, model_type);
    for (int b = 0; b < 256; b++)
        n += snprintf(buf + n, sizeof buf - (size_t)n, ", \"<0x%02X>\": %d", b, 3 + b);
    snprintf(buf + n, sizeof buf - (size_t)n,
             ", \"\\u2581\": 259, \"h\": 260, \"i\": 261, \"\\u2581h\": 262, \"\\u2581hi\": 263,"
             " \"a\": 264}, \"merges\": [\"\\u2581 h\", [\"\\u2581h\", \"i\"]]}}");
    return buf;
}

static const char *const LLAMA2_DECODER =
    "{\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": {\"String\":"
    " \"\\u2581\"}, \"content\": \" \"}, {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"},"
    " {\"type\": \"Strip\", \"content\": \" \", \"start\": 1, \"stop\": 0}]}";

static ein_tokenizer *load(void)
{
    ein_tokenizer *tk = NULL;
    ein_error err = {0};
    const char *j = sp_json(LLAMA2_DECODER, "BPE");
    assert_int_equal(ein_tokenizer_load_json(j, strlen(j), &tk, &err), 0);
    return tk;
}

static void expect_ids(ein_tokenizer *tk, const char *text, int special, const int32_t *want,
                       size_t nwant)
{
    int32_t *ids = NULL;
    size_t n = 0;
    ein_error err = {0};
    assert_int_equal(ein_tokenizer_encode(tk, text, strlen(text), special, &ids, &n, &err), 0);
    assert_int_equal(n, nwant);
    for (size_t i = 0; i < n; i++) assert_int_equal(ids[i], want[i]);
    ein_tokenizer_buf_free(ids);
}

static void expect_text(ein_tokenizer *tk, const int32_t *ids, size_t n, int skip, const char *want)
{
    char *text = NULL;
    size_t len = 0;
    ein_error err = {0};
    assert_int_equal(ein_tokenizer_decode(tk, ids, n, skip, &text, &len, &err), 0);
    assert_int_equal(len, strlen(want));
    assert_string_equal(text, want);
    ein_tokenizer_buf_free(text);
}

static void test_encode(void **state)
{
    (void)state;
    ein_tokenizer *tk = load();
    /* "hi" -> "▁hi": ▁ h i, merge (▁,h) then (▁h,i) */
    expect_ids(tk, "hi", 1, (int32_t[]){1, 263}, 2);
    expect_ids(tk, "hi", 0, (int32_t[]){263}, 1);
    /* "hi a" -> "▁hi▁a" */
    expect_ids(tk, "hi a", 1, (int32_t[]){1, 263, 259, 264}, 4);
    /* "hé": é (C3 A9) is not in the vocabulary: bytes <0xC3> = 3 + 0xC3, <0xA9> */
    expect_ids(tk, "h\xc3\xa9", 1, (int32_t[]){1, 262, 3 + 0xC3, 3 + 0xA9}, 4);
    /* "<s>" inside the text is the special token; the piece after it gets its own ▁ */
    expect_ids(tk, "a<s>hi", 0, (int32_t[]){259, 264, 1, 263}, 4);
    expect_ids(tk, "", 1, (int32_t[]){1}, 1);
    expect_ids(tk, "", 0, NULL, 0);
    assert_int_equal(ein_tokenizer_vocab_size(tk), 265);
    assert_int_equal(ein_tokenizer_bos_id(tk), 1);
    assert_int_equal(ein_tokenizer_token_to_id(tk, "\xe2\x96\x81hi", 5), 263);
    assert_int_equal(ein_tokenizer_token_to_id(tk, "nope", 4), -1);
    size_t len = 0;
    assert_string_equal(ein_tokenizer_id_to_token(tk, 1, &len), "<s>");
    assert_null(ein_tokenizer_id_to_token(tk, 265, &len));
    assert_true(ein_tokenizer_is_special(tk, 1));
    assert_false(ein_tokenizer_is_special(tk, 263));
    ein_tokenizer_free(tk);
}

static void test_decode(void **state)
{
    (void)state;
    ein_tokenizer *tk = load();
    int32_t ids[] = {1, 262, 3 + 0xC3, 3 + 0xA9};
    /* "<s>" "▁h" C3 A9 -> Replace: "<s>" " h"; ByteFallback: "é"; Fuse; Strip one
     * leading space (there is none before "<s>") */
    expect_text(tk, ids, 4, 0, "<s> h\xc3\xa9");
    expect_text(tk, ids, 4, 1, "h\xc3\xa9");
    /* a lone C3 is one U+FFFD per byte of the run */
    int32_t bad[] = {263, 3 + 0xC3, 3 + 0x41};
    expect_text(tk, bad, 3, 0, "hi\xef\xbf\xbd\xef\xbf\xbd");
    expect_text(tk, NULL, 0, 0, "");
    char *text = NULL;
    size_t len = 0;
    ein_error err = {0};
    int32_t oor[] = {263, 265};
    assert_int_equal(ein_tokenizer_decode(tk, oor, 2, 0, &text, &len, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "token id 265"));
    assert_null(text);
    ein_tokenizer_free(tk);
}

static void test_stream(void **state)
{
    (void)state;
    ein_tokenizer *tk = load();
    ein_tokstream *st = NULL;
    ein_error err = {0};
    assert_int_equal(ein_tokstream_new(tk, 1, &st, &err), 0);
    int32_t ids[] = {1, 262, 3 + 0xC3, 3 + 0xA9, 259, 264};
    /* skipped <s>; "h"; the byte run is held until it ends; then "é" and the
     * space of ▁; "a" */
    const char *want[] = {"", "h", "", "", "\xc3\xa9 ", "a"};
    for (int i = 0; i < 6; i++) {
        char *t = NULL;
        size_t n = 0;
        assert_int_equal(ein_tokstream_push(st, ids[i], &t, &n, &err), 0);
        assert_string_equal(t, want[i]);
        ein_tokenizer_buf_free(t);
    }
    char *t = NULL;
    size_t n = 0;
    assert_int_equal(ein_tokstream_flush(st, &t, &n, &err), 0);
    assert_string_equal(t, "");
    ein_tokenizer_buf_free(t);
    assert_int_equal(ein_tokstream_push(st, 999, &t, &n, &err), EIN_EINVAL);
    ein_tokstream_free(st);
    ein_tokenizer_free(tk);
}

static void test_errors(void **state)
{
    (void)state;
    ein_tokenizer *tk = NULL;
    ein_error err = {0};
    const char *j = sp_json(LLAMA2_DECODER, "WordPiece");
    assert_int_equal(ein_tokenizer_load_json(j, strlen(j), &tk, &err), EIN_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "model \"WordPiece\" is not supported"));
    assert_null(tk);
    j = sp_json("{\"type\": \"CTC\"}", "BPE");
    assert_int_equal(ein_tokenizer_load_json(j, strlen(j), &tk, &err), EIN_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "decoder \"CTC\""));
    assert_int_equal(ein_tokenizer_load_json("{\"model\": [", 11, &tk, &err), EIN_EPARSE);
    assert_int_equal(ein_tokenizer_load("/nonexistent/tokenizer.json", &tk, &err), EIN_EIO);
    tk = load();
    int32_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(ein_tokenizer_encode(tk, "a\xff", 2, 1, &ids, &n, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "not UTF-8 (byte 1)"));
    assert_null(ids);
    ein_tokenizer_free(tk);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encode),
        cmocka_unit_test(test_decode),
        cmocka_unit_test(test_stream),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
