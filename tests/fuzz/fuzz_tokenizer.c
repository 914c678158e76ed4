/* tests/fuzz/fuzz_tokenizer.c — the tokenizer (common/io/ein_tokenizer*.c). An
 * input starting with '{' is also loaded as a tokenizer.json (refused with a
 * one-line message, or used). Every input is encoded as text by a Llama 3
 * style byte-level tokenizer and a Llama 2 style byte-fallback one built
 * here: invalid UTF-8 is refused, valid text encodes and the byte-level
 * tokenizer decodes it back byte for byte; the input's bytes, read as ids,
 * decode, and streamed one at a time join to the same text. */
#define _GNU_SOURCE /* memmem */
#include "tests/fuzz/fuzz_util.h"

#include "include/einsummable/ein_tokenizer.h"

static ein_tokenizer *tk_bl, *tk_sp;

typedef struct {
    char *p;
    size_t n, cap;
} sbuf;

static void put(sbuf *b, const char *s)
{
    size_t n = strlen(s);
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        if (!(b->p = realloc(b->p, b->cap))) abort();
    }
    memcpy(b->p + b->n, s, n + 1);
    b->n += n;
}

/* GPT-2's stand-in of byte b, as a JSON string body. */
static void put_byte_char(sbuf *b, int c)
{
    static int cp[256];
    if (!cp['!']) {
        for (int x = 0, extra = 0; x < 256; x++) {
            int keep = (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE;
            cp[x] = keep ? x : 256 + extra++;
        }
    }
    char u[8];
    int v = cp[c];
    if (v == '"' || v == '\\') snprintf(u, sizeof u, "\\%c", v);
    else if (v < 0x80) snprintf(u, sizeof u, "%c", v);
    else snprintf(u, sizeof u, "%c%c", 0xC0 | v >> 6, 0x80 | (v & 63));
    put(b, u);
}

static ein_tokenizer *build(int sp)
{
    sbuf b = {0};
    char tmp[64];
    put(&b, "{\"added_tokens\": [{\"id\": 0, \"content\": \"<s>\", \"special\": true,"
            " \"normalized\": false, \"lstrip\": false, \"rstrip\": false, \"single_word\": false},"
            "{\"id\": 1, \"content\": \"<x>\", \"special\": false, \"normalized\": false,"
            " \"lstrip\": true, \"rstrip\": true, \"single_word\": false}],");
    put(&b, "\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\":"
            " {\"id\": \"<s>\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}],"
            " \"special_tokens\": {\"<s>\": {\"id\": \"<s>\", \"ids\": [0], \"tokens\": [\"<s>\"]}}},");
    if (sp) {
        put(&b, "\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFKC\"},"
                " {\"type\": \"Prepend\", \"prepend\": \"\\u2581\"}, {\"type\": \"Replace\", \"pattern\":"
                " {\"String\": \" \"}, \"content\": \"\\u2581\"}]},"
                "\"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\":"
                " {\"String\": \"\\u2581\"}, \"content\": \" \"}, {\"type\": \"ByteFallback\"},"
                " {\"type\": \"Fuse\"}, {\"type\": \"Strip\", \"content\": \" \", \"start\": 1, \"stop\": 0}]},"
                "\"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\", \"fuse_unk\": true,"
                " \"byte_fallback\": true, \"vocab\": {\"<s>\": 0, \"<x>\": 1, \"<unk>\": 2");
        for (int c = 0; c < 256; c++) {
            snprintf(tmp, sizeof tmp, ", \"<0x%02X>\": %d", c, 3 + c);
            put(&b, tmp);
        }
        put(&b, ", \"\\u2581\": 259, \"a\": 260, \"b\": 261, \"\\u2581a\": 262, \"\\u2581ab\": 263},"
                " \"merges\": [\"\\u2581 a\", [\"\\u2581a\", \"b\"]]}}");
    } else {
        put(&b, "\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\","
                " \"pattern\": {\"Regex\": \"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?"
                "\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|"
                "\\\\s+(?!\\\\S)|\\\\s+\"}, \"behavior\": \"Isolated\", \"invert\": false},"
                " {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}]},"
                "\"decoder\": {\"type\": \"ByteLevel\"},"
                "\"model\": {\"type\": \"BPE\", \"ignore_merges\": true, \"vocab\": {\"<s>\": 0,"
                " \"<x>\": 1");
        for (int c = 0; c < 256; c++) {
            put(&b, ", \"");
            put_byte_char(&b, c);
            snprintf(tmp, sizeof tmp, "\": %d", 2 + c);
            put(&b, tmp);
        }
        /* Ġt, Ġth, Ġthe */
        put(&b, ", \"\\u0120t\": 258, \"\\u0120th\": 259, \"\\u0120the\": 260}, \"merges\":"
                " [\"\\u0120 t\", [\"\\u0120t\", \"h\"], \"\\u0120th e\"]}}");
    }
    ein_tokenizer *tk = NULL;
    ein_error err = {0};
    if (ein_tokenizer_load_json(b.p, b.n, &tk, &err) < 0) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", err.msg);
        abort();
    }
    free(b.p);
    return tk;
}

static void check_ids(ein_tokenizer *tk, const int32_t *ids, size_t n)
{
    ein_error err = {0};
    for (int skip = 0; skip < 2; skip++) {
        char *text = NULL, *piece = NULL;
        size_t len = 0, plen = 0;
        fuzz_check(ein_tokenizer_decode(tk, ids, n, skip, &text, &len, &err) == 0, "%s", err.msg);
        ein_tokstream *st = NULL;
        fuzz_check(ein_tokstream_new(tk, skip, &st, &err) == 0, "%s", err.msg);
        char *joined = malloc(len + 1);
        size_t at = 0;
        if (!joined) abort();
        for (size_t i = 0; i <= n; i++) {
            int rc = i < n ? ein_tokstream_push(st, ids[i], &piece, &plen, &err)
                           : ein_tokstream_flush(st, &piece, &plen, &err);
            fuzz_check(rc == 0, "stream: %s", err.msg);
            fuzz_check(at + plen <= len, "stream overruns");
            memcpy(joined + at, piece, plen);
            at += plen;
            ein_tokenizer_buf_free(piece);
        }
        fuzz_check(at == len && !memcmp(joined, text, len), "stream differs from decode");
        free(joined);
        ein_tokstream_free(st);
        ein_tokenizer_buf_free(text);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!tk_bl) {
        tk_bl = build(0);
        tk_sp = build(1);
    }
    ein_error err = {0};
    if (size && data[0] == '{') {
        ein_tokenizer *tk = NULL;
        if (ein_tokenizer_load_json((const char *)data, size, &tk, &err) < 0) {
            fuzz_check_msg(&err);
        } else {
            int32_t *ids = NULL;
            size_t n = 0;
            if (ein_tokenizer_encode(tk, "Hello, world 123", 16, 1, &ids, &n, &err) == 0) {
                check_ids(tk, ids, n);
                ein_tokenizer_buf_free(ids);
            }
            ein_tokenizer_free(tk);
        }
    }
    for (int k = 0; k < 2; k++) {
        ein_tokenizer *tk = k ? tk_sp : tk_bl;
        int32_t *ids = NULL;
        size_t n = 0;
        int rc = ein_tokenizer_encode(tk, (const char *)data, size, 1, &ids, &n, &err);
        if (rc < 0) {
            fuzz_check(rc == EIN_EINVAL && strstr(err.msg, "not UTF-8"), "%s", err.msg);
        } else {
            check_ids(tk, ids, n);
            if (!k && !memmem(data, size, "<x>", 3)) { /* byte-level: the text comes back */
                char *text = NULL;
                size_t len = 0;
                fuzz_check(ein_tokenizer_decode(tk, ids + 1, n - 1, 0, &text, &len, &err) == 0, "%s",
                           err.msg);
                fuzz_check(len == size && !memcmp(text, data, size), "byte-level round trip");
                ein_tokenizer_buf_free(text);
            }
            ein_tokenizer_buf_free(ids);
        }
        /* the bytes as ids, in range */
        int32_t nv = ein_tokenizer_vocab_size(tk);
        size_t m = size / 2;
        int32_t *raw = malloc(sizeof *raw * (m + 1));
        if (!raw) abort();
        for (size_t i = 0; i < m; i++) raw[i] = (int32_t)((data[2 * i] << 8 | data[2 * i + 1]) % nv);
        check_ids(tk, raw, m);
        free(raw);
    }
    return 0;
}
