/* common/io/ein_tokenizer_load.c — read a tokenizer.json into an ein_tokenizer
 * (include/einsummable/ein_tokenizer.h). Every field is checked: a key we
 * do not know, a component type we do not implement, or a value that would
 * change the result in a way we do not reproduce is refused by name. */
#include <jansson.h>
#include <utf8proc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/ein_error.h"
#include "common/io/ein_file.h"
#include "common/io/ein_tokenizer_int.h"
#include "common/base/ein_vec.h"

#define TK_FILE_CAP ((size_t)256 << 20)

/* The pre-tokenizer regex of GPT-2 (ByteLevel with use_regex). */
static const char tk_gpt2_re[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* Refuse any key of `o` not among the NULL-terminated `keys`. */
static int tk_keys(json_t *o, const char *where, const char *const *keys, ein_error *err)
{
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) {
        int ok = 0;
        for (int i = 0; keys[i] && !ok; i++) ok = !strcmp(k, keys[i]);
        if (!ok)
            return ein_fail(err, EIN_EUNSUPPORTED, "tokenizer.json: %s: field \"%s\" is not supported",
                            where, k);
    }
    return 0;
}

/* A boolean field, `def` when absent or null. */
static int tk_bool(json_t *o, const char *key, int def, const char *where, int *out, ein_error *err)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) *out = def;
    else if (json_is_boolean(v)) *out = json_is_true(v);
    else return ein_fail(err, EIN_EPARSE, "tokenizer.json: %s: \"%s\" must be true or false", where, key);
    return 0;
}

/* A string field (required unless `opt`); *out NULL when absent/null. */
static int tk_str(json_t *o, const char *key, int opt, const char *where, const char **out,
                  size_t *len, ein_error *err)
{
    json_t *v = json_object_get(o, key);
    *out = NULL;
    if (len) *len = 0;
    if ((!v || json_is_null(v)) && opt) return 0;
    if (!json_is_string(v))
        return ein_fail(err, EIN_EPARSE, "tokenizer.json: %s: \"%s\" must be a string", where, key);
    *out = json_string_value(v);
    if (len) *len = json_string_length(v);
    return 0;
}

static int tk_dup(const char *s, size_t n, char **out, size_t *olen, ein_error *err)
{
    char *p = malloc(n + 1);
    if (!p) return ein_fail(err, EIN_ENOMEM, "tokenizer: out of memory");
    memcpy(p, s, n);
    p[n] = 0;
    *out = p;
    if (olen) *olen = n;
    return 0;
}

static const char *tk_type(json_t *o)
{
    json_t *t = json_object_get(o, "type");
    return json_is_string(t) ? json_string_value(t) : NULL;
}

static int tk_step_add(tk_step **v, int *n, tk_step st, ein_error *err)
{
    int cap = *n; /* grown one at a time: the chains are a few steps */
    if (ein_vec_reserve(v, &cap, (int64_t)*n + 1, sizeof **v) < 0) {
        tk_pat_free(&st.pat);
        free(st.str);
        return ein_fail(err, EIN_ENOMEM, "tokenizer: out of memory");
    }
    (*v)[(*n)++] = st;
    return 0;
}

static int tk_scheme(json_t *o, const char *where, int *out, ein_error *err)
{
    const char *s;
    int rc, aps = 0;
    if ((rc = tk_str(o, "prepend_scheme", 1, where, &s, NULL, err)) < 0) return rc;
    if (!s) { /* older files: add_prefix_space */
        if ((rc = tk_bool(o, "add_prefix_space", 1, where, &aps, err)) < 0) return rc;
        *out = aps ? TK_S_ALWAYS : TK_S_NEVER;
        return 0;
    }
    if (!strcmp(s, "always")) *out = TK_S_ALWAYS;
    else if (!strcmp(s, "first")) *out = TK_S_FIRST;
    else if (!strcmp(s, "never")) *out = TK_S_NEVER;
    else
        return ein_fail(err, EIN_EUNSUPPORTED, "tokenizer.json: %s: prepend_scheme \"%s\" is not "
                        "supported (always, first, never)", where, s);
    return 0;
}

static int tk_replacement(json_t *o, const char *where, tk_step *st, ein_error *err)
{
    const char *s;
    size_t n;
    int rc = tk_str(o, "replacement", 0, where, &s, &n, err);
    if (rc < 0) return rc;
    if (tk_utf8_len_one(s, n) != n)
        return ein_fail(err, EIN_EPARSE, "tokenizer.json: %s: replacement must be one character",
                        where);
    return tk_dup(s, n, &st->str, &st->str_len, err);
}

/* ---- normalizer ---- */

static int tk_load_norm(ein_tokenizer *tk, json_t *j, ein_error *err)
{
    const char *t = tk_type(j);
    tk_step st = {0};
    int rc;
    if (json_is_null(j)) return 0;
    if (!t) return ein_fail(err, EIN_EPARSE, "tokenizer.json: normalizer: no \"type\"");
    if (!strcmp(t, "Sequence")) {
        static const char *const k[] = {"type", "normalizers", NULL};
        json_t *a = json_object_get(j, "normalizers"), *x;
        size_t i;
        if ((rc = tk_keys(j, "normalizer Sequence", k, err)) < 0) return rc;
        if (!json_is_array(a))
            return ein_fail(err, EIN_EPARSE, "tokenizer.json: normalizer Sequence: no normalizers list");
        json_array_foreach(a, i, x) if ((rc = tk_load_norm(tk, x, err)) < 0) return rc;
        return 0;
    }
    if (!strcmp(t, "Prepend")) {
        static const char *const k[] = {"type", "prepend", NULL};
        const char *s;
        size_t n;
        if ((rc = tk_keys(j, "normalizer Prepend", k, err)) < 0 ||
            (rc = tk_str(j, "prepend", 0, "normalizer Prepend", &s, &n, err)) < 0 ||
            (rc = tk_dup(s, n, &st.str, &st.str_len, err)) < 0)
            return rc;
        st.kind = TK_N_PREPEND;
        return tk_step_add(&tk->norm, &tk->nnorm, st, err);
    }
    if (!strcmp(t, "Replace")) {
        static const char *const k[] = {"type", "pattern", "content", NULL};
        const char *s;
        size_t n;
        if ((rc = tk_keys(j, "normalizer Replace", k, err)) < 0 ||
            (rc = tk_str(j, "content", 0, "normalizer Replace", &s, &n, err)) < 0 ||
            (rc = tk_dup(s, n, &st.str, &st.str_len, err)) < 0)
            return rc;
        if ((rc = tk_pat_parse(json_object_get(j, "pattern"), &st.pat, "normalizer Replace", err)) < 0) {
            free(st.str);
            return rc;
        }
        st.kind = TK_N_REPLACE;
        return tk_step_add(&tk->norm, &tk->nnorm, st, err);
    }
    if (!strcmp(t, "Strip")) {
        static const char *const k[] = {"type", "strip_left", "strip_right", NULL};
        if ((rc = tk_keys(j, "normalizer Strip", k, err)) < 0 ||
            (rc = tk_bool(j, "strip_left", 0, "normalizer Strip", &st.a, err)) < 0 ||
            (rc = tk_bool(j, "strip_right", 0, "normalizer Strip", &st.b, err)) < 0)
            return rc;
        st.kind = TK_N_STRIP;
        return tk_step_add(&tk->norm, &tk->nnorm, st, err);
    }
    static const char *const forms[] = {"NFC", "NFD", "NFKC", "NFKD"};
    static const int opts[] = {
        UTF8PROC_STABLE | UTF8PROC_COMPOSE, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE,
        UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT,
        UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT};
    for (int i = 0; i < 4; i++) {
        if (strcmp(t, forms[i])) continue;
        static const char *const k[] = {"type", NULL};
        if ((rc = tk_keys(j, forms[i], k, err)) < 0) return rc;
        st.kind = TK_N_UNICODE;
        st.a = opts[i];
        return tk_step_add(&tk->norm, &tk->nnorm, st, err);
    }
    return ein_fail(err, EIN_EUNSUPPORTED,
                    "tokenizer.json: normalizer \"%s\" is not supported (Sequence, Prepend, "
                    "Replace, Strip, NFC, NFD, NFKC, NFKD)", t);
}

/* ---- pre-tokenizer ---- */

static int tk_load_pre(ein_tokenizer *tk, json_t *j, ein_error *err)
{
    const char *t = tk_type(j);
    tk_step st = {0};
    int rc;
    if (json_is_null(j)) return 0;
    if (!t) return ein_fail(err, EIN_EPARSE, "tokenizer.json: pre_tokenizer: no \"type\"");
    if (!strcmp(t, "Sequence")) {
        static const char *const k[] = {"type", "pretokenizers", NULL};
        json_t *a = json_object_get(j, "pretokenizers"), *x;
        size_t i;
        if ((rc = tk_keys(j, "pre_tokenizer Sequence", k, err)) < 0) return rc;
        if (!json_is_array(a))
            return ein_fail(err, EIN_EPARSE,
                            "tokenizer.json: pre_tokenizer Sequence: no pretokenizers list");
        json_array_foreach(a, i, x) if ((rc = tk_load_pre(tk, x, err)) < 0) return rc;
        return 0;
    }
    if (!strcmp(t, "Split")) {
        static const char *const k[] = {"type", "pattern", "behavior", "invert", NULL};
        static const char *const beh[] = {"Removed", "Isolated", "MergedWithPrevious",
                                          "MergedWithNext", "Contiguous"};
        const char *b;
        if ((rc = tk_keys(j, "pre_tokenizer Split", k, err)) < 0 ||
            (rc = tk_str(j, "behavior", 0, "pre_tokenizer Split", &b, NULL, err)) < 0 ||
            (rc = tk_bool(j, "invert", 0, "pre_tokenizer Split", &st.b, err)) < 0)
            return rc;
        st.a = -1;
        for (int i = 0; i < 5; i++)
            if (!strcmp(b, beh[i])) st.a = i;
        if (st.a < 0)
            return ein_fail(err, EIN_EUNSUPPORTED,
                            "tokenizer.json: pre_tokenizer Split: behavior \"%s\" is not supported",
                            b);
        if ((rc = tk_pat_parse(json_object_get(j, "pattern"), &st.pat, "pre_tokenizer Split", err)) < 0)
            return rc;
        st.kind = TK_P_SPLIT;
        return tk_step_add(&tk->pre, &tk->npre, st, err);
    }
    if (!strcmp(t, "ByteLevel")) {
        static const char *const k[] = {"type", "add_prefix_space", "trim_offsets", "use_regex", NULL};
        if ((rc = tk_keys(j, "pre_tokenizer ByteLevel", k, err)) < 0 ||
            (rc = tk_bool(j, "add_prefix_space", 1, "pre_tokenizer ByteLevel", &st.a, err)) < 0 ||
            (rc = tk_bool(j, "use_regex", 1, "pre_tokenizer ByteLevel", &st.b, err)) < 0)
            return rc;
        st.kind = TK_P_BYTELEVEL;
        return tk_step_add(&tk->pre, &tk->npre, st, err);
    }
    if (!strcmp(t, "Metaspace")) {
        static const char *const k[] = {"type", "replacement", "prepend_scheme", "split",
                                        "add_prefix_space", "str_rep", NULL};
        if ((rc = tk_keys(j, "pre_tokenizer Metaspace", k, err)) < 0 ||
            (rc = tk_scheme(j, "pre_tokenizer Metaspace", &st.a, err)) < 0 ||
            (rc = tk_bool(j, "split", 1, "pre_tokenizer Metaspace", &st.b, err)) < 0 ||
            (rc = tk_replacement(j, "pre_tokenizer Metaspace", &st, err)) < 0)
            return rc;
        st.kind = TK_P_METASPACE;
        return tk_step_add(&tk->pre, &tk->npre, st, err);
    }
    return ein_fail(err, EIN_EUNSUPPORTED,
                    "tokenizer.json: pre_tokenizer \"%s\" is not supported (Sequence, Split, "
                    "ByteLevel, Metaspace)", t);
}

/* ---- decoder ---- */

static int tk_load_dec(ein_tokenizer *tk, json_t *j, ein_error *err)
{
    const char *t = tk_type(j);
    tk_step st = {0};
    int rc;
    if (json_is_null(j)) return 0;
    tk->has_decoder = 1;
    if (!t) return ein_fail(err, EIN_EPARSE, "tokenizer.json: decoder: no \"type\"");
    if (!strcmp(t, "Sequence")) {
        static const char *const k[] = {"type", "decoders", NULL};
        json_t *a = json_object_get(j, "decoders"), *x;
        size_t i;
        if ((rc = tk_keys(j, "decoder Sequence", k, err)) < 0) return rc;
        if (!json_is_array(a))
            return ein_fail(err, EIN_EPARSE, "tokenizer.json: decoder Sequence: no decoders list");
        json_array_foreach(a, i, x) if ((rc = tk_load_dec(tk, x, err)) < 0) return rc;
        return 0;
    }
    if (!strcmp(t, "ByteLevel")) {
        static const char *const k[] = {"type", "add_prefix_space", "trim_offsets", "use_regex", NULL};
        if ((rc = tk_keys(j, "decoder ByteLevel", k, err)) < 0) return rc;
        st.kind = TK_D_BYTELEVEL;
    } else if (!strcmp(t, "Metaspace")) {
        static const char *const k[] = {"type", "replacement", "prepend_scheme", "split",
                                        "add_prefix_space", "str_rep", NULL};
        if ((rc = tk_keys(j, "decoder Metaspace", k, err)) < 0 ||
            (rc = tk_scheme(j, "decoder Metaspace", &st.a, err)) < 0 ||
            (rc = tk_replacement(j, "decoder Metaspace", &st, err)) < 0)
            return rc;
        st.kind = TK_D_METASPACE;
    } else if (!strcmp(t, "Replace")) {
        static const char *const k[] = {"type", "pattern", "content", NULL};
        const char *s;
        size_t n;
        if ((rc = tk_keys(j, "decoder Replace", k, err)) < 0 ||
            (rc = tk_str(j, "content", 0, "decoder Replace", &s, &n, err)) < 0 ||
            (rc = tk_dup(s, n, &st.str, &st.str_len, err)) < 0)
            return rc;
        if ((rc = tk_pat_parse(json_object_get(j, "pattern"), &st.pat, "decoder Replace", err)) < 0) {
            free(st.str);
            return rc;
        }
        st.kind = TK_D_REPLACE;
    } else if (!strcmp(t, "ByteFallback") || !strcmp(t, "Fuse")) {
        static const char *const k[] = {"type", NULL};
        if ((rc = tk_keys(j, t, k, err)) < 0) return rc;
        st.kind = !strcmp(t, "Fuse") ? TK_D_FUSE : TK_D_BYTEFALLBACK;
        if (st.kind == TK_D_BYTEFALLBACK) tk->dec_bytefallback = 1;
    } else if (!strcmp(t, "Strip")) {
        static const char *const k[] = {"type", "content", "start", "stop", NULL};
        const char *s;
        size_t n;
        json_t *a = json_object_get(j, "start"), *b = json_object_get(j, "stop");
        if ((rc = tk_keys(j, "decoder Strip", k, err)) < 0 ||
            (rc = tk_str(j, "content", 0, "decoder Strip", &s, &n, err)) < 0)
            return rc;
        if (!json_is_integer(a) || !json_is_integer(b) || json_integer_value(a) < 0 ||
            json_integer_value(b) < 0 || json_integer_value(a) > 1 << 20 ||
            json_integer_value(b) > 1 << 20 || tk_utf8_len_one(s, n) != n)
            return ein_fail(err, EIN_EPARSE, "tokenizer.json: decoder Strip: needs one character "
                            "\"content\" and counts \"start\", \"stop\"");
        st.a = (int)json_integer_value(a);
        st.b = (int)json_integer_value(b);
        if ((rc = tk_dup(s, n, &st.str, &st.str_len, err)) < 0) return rc;
        st.kind = TK_D_STRIP;
    } else
        return ein_fail(err, EIN_EUNSUPPORTED,
                        "tokenizer.json: decoder \"%s\" is not supported (Sequence, ByteLevel, "
                        "Metaspace, Replace, ByteFallback, Fuse, Strip)", t);
    return tk_step_add(&tk->dec, &tk->ndec, st, err);
}

/* ---- post-processor ---- */

static int tk_load_post(ein_tokenizer *tk, json_t *j, ein_error *err)
{
    const char *t = tk_type(j);
    int rc;
    if (json_is_null(j)) return 0;
    if (!t) return ein_fail(err, EIN_EPARSE, "tokenizer.json: post_processor: no \"type\"");
    if (!strcmp(t, "Sequence")) {
        static const char *const k[] = {"type", "processors", NULL};
        json_t *a = json_object_get(j, "processors"), *x;
        size_t i;
        if ((rc = tk_keys(j, "post_processor Sequence", k, err)) < 0) return rc;
        if (!json_is_array(a))
            return ein_fail(err, EIN_EPARSE, "tokenizer.json: post_processor Sequence: no processors");
        json_array_foreach(a, i, x) if ((rc = tk_load_post(tk, x, err)) < 0) return rc;
        return 0;
    }
    if (!strcmp(t, "ByteLevel")) { /* changes offsets only */
        static const char *const k[] = {"type", "add_prefix_space", "trim_offsets", "use_regex", NULL};
        return tk_keys(j, "post_processor ByteLevel", k, err);
    }
    if (strcmp(t, "TemplateProcessing"))
        return ein_fail(err, EIN_EUNSUPPORTED,
                        "tokenizer.json: post_processor \"%s\" is not supported (TemplateProcessing, "
                        "ByteLevel, Sequence)", t);
    static const char *const k[] = {"type", "single", "pair", "special_tokens", NULL};
    json_t *single = json_object_get(j, "single"), *sp = json_object_get(j, "special_tokens"), *x;
    size_t i;
    int seen_a = 0;
    if ((rc = tk_keys(j, "post_processor TemplateProcessing", k, err)) < 0) return rc;
    if (tk->ntpl_pre || tk->ntpl_post)
        return ein_fail(err, EIN_EUNSUPPORTED, "tokenizer.json: more than one TemplateProcessing");
    if (!json_is_array(single) || !json_is_object(sp))
        return ein_fail(err, EIN_EPARSE, "tokenizer.json: TemplateProcessing: needs \"single\" "
                        "and \"special_tokens\"");
    json_array_foreach(single, i, x) {
        json_t *seq = json_object_get(x, "Sequence"), *spt = json_object_get(x, "SpecialToken");
        if (json_is_object(seq) && json_object_size(x) == 1) {
            json_t *id = json_object_get(seq, "id");
            if (!json_is_string(id) || strcmp(json_string_value(id), "A") || seen_a)
                return ein_fail(err, EIN_EUNSUPPORTED, "tokenizer.json: TemplateProcessing: "
                                "\"single\" must hold sequence A once");
            seen_a = 1;
            continue;
        }
        json_t *name = json_object_get(spt, "id");
        if (!json_is_object(spt) || json_object_size(x) != 1 || !json_is_string(name))
            return ein_fail(err, EIN_EPARSE, "tokenizer.json: TemplateProcessing: item %zu of "
                            "\"single\" is neither Sequence nor SpecialToken", i);
        json_t *def = json_object_get(sp, json_string_value(name)), *ids = json_object_get(def, "ids"), *v;
        size_t k2;
        if (!json_is_array(ids))
            return ein_fail(err, EIN_EPARSE, "tokenizer.json: TemplateProcessing: special token "
                            "\"%s\" has no ids in special_tokens", json_string_value(name));
        json_array_foreach(ids, k2, v) {
            json_int_t id = json_integer_value(v);
            if (!json_is_integer(v) || id < 0 || id >= tk->nids || !tk->tok[id])
                return ein_fail(err, EIN_EPARSE, "tokenizer.json: TemplateProcessing: special "
                                "token \"%s\": id %lld not in the vocabulary",
                                json_string_value(name), (long long)id);
            int32_t **arr = seen_a ? &tk->tpl_post : &tk->tpl_pre;
            int *n = seen_a ? &tk->ntpl_post : &tk->ntpl_pre, cap = *n;
            if (ein_vec_reserve(arr, &cap, (int64_t)*n + 1, sizeof **arr) < 0)
                return ein_fail(err, EIN_ENOMEM, "tokenizer: out of memory");
            (*arr)[(*n)++] = (int32_t)id;
        }
    }
    if (!seen_a)
        return ein_fail(err, EIN_EUNSUPPORTED,
                        "tokenizer.json: TemplateProcessing: \"single\" has no sequence A");
    return 0;
}

/* ---- model ---- */

/* The BPE merges (a list of "a b" or ["a", "b"]): rank = position. */
static int tk_load_merges(ein_tokenizer *tk, json_t *merges, ein_error *err)
{
    json_t *x;
    size_t i;
    int rc;
    /* merges: rank = position */
    tk->merges.cap = 64;
    while (tk->merges.cap < json_array_size(merges) * 2) tk->merges.cap <<= 1;
    if (!(tk->merges.e = calloc(tk->merges.cap, sizeof *tk->merges.e)))
        return ein_fail(err, EIN_ENOMEM, "tokenizer: out of memory");
    char *cat = NULL;
    size_t catcap = 0;
    json_array_foreach(merges, i, x) {
        const char *a, *b;
        size_t al, bl;
        if (json_is_string(x)) {
            a = json_string_value(x);
            const char *sp = strchr(a, ' ');
            if (!sp || strchr(sp + 1, ' ')) {
                free(cat);
                return ein_fail(err, EIN_EPARSE, "tokenizer.json: merges[%zu] \"%.64s\" is not two "
                                "tokens separated by one space", i, a);
            }
            al = (size_t)(sp - a);
            b = sp + 1;
            bl = strlen(b);
        } else if (json_is_array(x) && json_array_size(x) == 2 &&
                   json_is_string(json_array_get(x, 0)) && json_is_string(json_array_get(x, 1))) {
            a = json_string_value(json_array_get(x, 0));
            al = json_string_length(json_array_get(x, 0));
            b = json_string_value(json_array_get(x, 1));
            bl = json_string_length(json_array_get(x, 1));
        } else {
            free(cat);
            return ein_fail(err, EIN_EPARSE, "tokenizer.json: merges[%zu] is neither \"a b\" nor "
                            "[\"a\", \"b\"]", i);
        }
        if (ein_vec_reserve_z(&cat, &catcap, al + bl + 1, 1) < 0) {
            free(cat);
            return ein_fail(err, EIN_ENOMEM, "tokenizer: out of memory");
        }
        memcpy(cat, a, al);
        memcpy(cat + al, b, bl);
        int32_t ia = tk_smap_find(&tk->vocab, tk->vstr, tk->vlen, a, al);
        int32_t ib = tk_smap_find(&tk->vocab, tk->vstr, tk->vlen, b, bl);
        int32_t ic = tk_smap_find(&tk->vocab, tk->vstr, tk->vlen, cat, al + bl);
        if (ia < 0 || ib < 0 || ic < 0) {
            rc = ein_fail(err, EIN_EPARSE, "tokenizer.json: merges[%zu]: \"%.*s\" is not in the "
                          "vocabulary", i, (int)(ia < 0 ? al : ib < 0 ? bl : al + bl),
                          ia < 0 ? a : ib < 0 ? b : cat);
            free(cat);
            return rc;
        }
        tk_pmap_e *e = tk_pmap_slot(&tk->merges, ia, ib);
        e->key = ((uint64_t)(uint32_t)ia << 32 | (uint32_t)ib) + 1;
        e->rank = (int32_t)i; /* a repeated merge: the later one wins, as in the crate's map */
        e->id = ic;
    }
    free(cat);
    return 0;
}

static int tk_load_model(ein_tokenizer *tk, json_t *m, json_t *added, ein_error *err)
{
    static const char *const k[] = {"type", "dropout", "unk_token", "continuing_subword_prefix",
                                    "end_of_word_suffix", "fuse_unk", "byte_fallback",
                                    "ignore_merges", "vocab", "merges", NULL};
    const char *t = tk_type(m), *s;
    json_t *vocab = json_object_get(m, "vocab"), *merges = json_object_get(m, "merges"), *v, *x;
    const char *key;
    size_t n, i;
    int rc;
    if (!json_is_object(m)) return ein_fail(err, EIN_EPARSE, "tokenizer.json: no \"model\" object");
    if (t ? strcmp(t, "BPE") : !merges)
        return ein_fail(err, EIN_EUNSUPPORTED,
                        "tokenizer.json: model \"%s\" is not supported (BPE only)",
                        t ? t : "without type or merges");
    if ((rc = tk_keys(m, "model BPE", k, err)) < 0) return rc;
    v = json_object_get(m, "dropout");
    if (v && !json_is_null(v) && !(json_is_number(v) && json_number_value(v) == 0))
        return ein_fail(err, EIN_EUNSUPPORTED, "tokenizer.json: model BPE: dropout is not supported");
    for (int w = 0; w < 2; w++) {
        const char *f = w ? "end_of_word_suffix" : "continuing_subword_prefix";
        if ((rc = tk_str(m, f, 1, "model BPE", &s, &n, err)) < 0) return rc;
        if (s && n)
            return ein_fail(err, EIN_EUNSUPPORTED, "tokenizer.json: model BPE: %s is not supported", f);
    }
    if ((rc = tk_bool(m, "fuse_unk", 0, "model BPE", &tk->fuse_unk, err)) < 0 ||
        (rc = tk_bool(m, "byte_fallback", 0, "model BPE", &tk->byte_fallback, err)) < 0 ||
        (rc = tk_bool(m, "ignore_merges", 0, "model BPE", &tk->ignore_merges, err)) < 0)
        return rc;
    if (!json_is_object(vocab) || !json_is_array(merges))
        return ein_fail(err, EIN_EPARSE, "tokenizer.json: model BPE: needs \"vocab\" (an object) "
                        "and \"merges\" (a list)");
    /* the id range: the vocabulary's and the added tokens' */
    json_int_t maxid = -1;
    json_object_foreach(vocab, key, v) {
        json_int_t id = json_integer_value(v);
        if (!json_is_integer(v) || id < 0 || id >= (1 << 30))
            return ein_fail(err, EIN_EPARSE, "tokenizer.json: vocab: \"%.64s\" has no id in 0..2^30",
                            key);
        if (id > maxid) maxid = id;
    }
    json_array_foreach(added, i, x) {
        json_t *id = json_object_get(x, "id");
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= (1 << 30))
            return ein_fail(err, EIN_EPARSE, "tokenizer.json: added_tokens[%zu]: no id in 0..2^30", i);
        if (json_integer_value(id) > maxid) maxid = json_integer_value(id);
    }
    tk->nids = (int32_t)(maxid + 1);
    size_t nn = (size_t)tk->nids ? (size_t)tk->nids : 1;
    tk->tok = calloc(nn, sizeof *tk->tok);
    tk->toklen = calloc(nn, sizeof *tk->toklen);
    tk->vstr = calloc(nn, sizeof *tk->vstr);
    tk->vlen = calloc(nn, sizeof *tk->vlen);
    tk->special = calloc(nn, 1);
    if (!tk->tok || !tk->toklen || !tk->vstr || !tk->vlen || !tk->special ||
        tk_smap_grow(&tk->vocab, tk->vstr, tk->vlen, json_object_size(vocab)) < 0)
        return ein_fail(err, EIN_ENOMEM, "tokenizer: out of memory");
    json_object_foreach(vocab, key, v) {
        int32_t id = (int32_t)json_integer_value(v);
        size_t kl = strlen(key); /* jansson keys are NUL-free unless JSON_ALLOW_NUL */
        if (tk->vstr[id])
            return ein_fail(err, EIN_EPARSE, "tokenizer.json: vocab: id %ld is given to both "
                            "\"%.64s\" and \"%.64s\"", (long)id, tk->vstr[id], key);
        if ((rc = tk_dup(key, kl, &tk->vstr[id], &tk->vlen[id], err)) < 0) return rc;
        tk->tok[id] = tk->vstr[id];
        tk->toklen[id] = kl;
        tk_smap_put(&tk->vocab, tk->vstr, tk->vlen, id);
    }
    if ((rc = tk_load_merges(tk, merges, err)) < 0) return rc;
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        tk->byte_id[b] = tk_smap_find(&tk->vocab, tk->vstr, tk->vlen, name, 6);
    }
    if ((rc = tk_str(m, "unk_token", 1, "model BPE", &s, &n, err)) < 0) return rc;
    tk->unk_id = -1;
    if (s && (tk->unk_id = tk_smap_find(&tk->vocab, tk->vstr, tk->vlen, s, n)) < 0)
        return ein_fail(err, EIN_EPARSE, "tokenizer.json: model BPE: unk_token \"%.64s\" is not in "
                        "the vocabulary", s);
    return 0;
}

static int tk_load_added(ein_tokenizer *tk, json_t *added, ein_error *err)
{
    static const char *const k[] = {"id", "content", "single_word", "lstrip", "rstrip",
                                    "normalized", "special", NULL};
    json_t *x;
    size_t i;
    int rc;
    if (!json_array_size(added)) return 0;
    if (!(tk->added = calloc(json_array_size(added), sizeof *tk->added)) ||
        tk_smap_grow(&tk->addmap, tk->tok, tk->toklen, json_array_size(added)) < 0)
        return ein_fail(err, EIN_ENOMEM, "tokenizer: out of memory");
    json_array_foreach(added, i, x) {
        char where[48];
        const char *s;
        size_t n;
        int sw = 0;
        tk_added *a = &tk->added[tk->nadded];
        snprintf(where, sizeof where, "added_tokens[%zu]", i);
        if (!json_is_object(x))
            return ein_fail(err, EIN_EPARSE, "tokenizer.json: %s is not an object", where);
        if ((rc = tk_keys(x, where, k, err)) < 0 ||
            (rc = tk_str(x, "content", 0, where, &s, &n, err)) < 0 ||
            (rc = tk_bool(x, "single_word", 0, where, &sw, err)) < 0 ||
            (rc = tk_bool(x, "lstrip", 0, where, &a->lstrip, err)) < 0 ||
            (rc = tk_bool(x, "rstrip", 0, where, &a->rstrip, err)) < 0 ||
            (rc = tk_bool(x, "normalized", 0, where, &a->normalized, err)) < 0 ||
            (rc = tk_bool(x, "special", 0, where, &a->special, err)) < 0)
            return rc;
        if (sw)
            return ein_fail(err, EIN_EUNSUPPORTED, "tokenizer.json: %s (\"%.64s\"): single_word is "
                            "not supported", where, s);
        if (!n) return ein_fail(err, EIN_EPARSE, "tokenizer.json: %s: empty content", where);
        if (memchr(s, 0, n))
            return ein_fail(err, EIN_EPARSE, "tokenizer.json: %s: content holds a NUL byte", where);
        if ((rc = tk_dup(s, n, &a->content, &a->len, err)) < 0) return rc;
        tk->nadded++;
        a->id = (int32_t)json_integer_value(json_object_get(x, "id"));
        /* The crate gives an added token that is also in the vocabulary the
         * vocabulary's id, whatever the file says: a file where the two differ
         * was not written by it, and which id is meant cannot be told. */
        int32_t vid = tk_smap_find(&tk->vocab, tk->vstr, tk->vlen, s, n);
        if (vid >= 0 && vid != a->id)
            return ein_fail(err, EIN_EPARSE, "tokenizer.json: %s: \"%.64s\" has id %ld but the "
                            "vocabulary gives it %ld", where, s, (long)a->id, (long)vid);
        if (tk_smap_find(&tk->addmap, tk->tok, tk->toklen, s, n) >= 0)
            return ein_fail(err, EIN_EPARSE, "tokenizer.json: %s: \"%.64s\" is added twice", where, s);
        if (tk->tok[a->id] && tk->tok[a->id] != tk->vstr[a->id])
            return ein_fail(err, EIN_EPARSE, "tokenizer.json: %s: id %ld is given to two added "
                            "tokens", where, (long)a->id);
        tk->tok[a->id] = a->content;
        tk->toklen[a->id] = a->len;
        tk->special[a->id] = (unsigned char)a->special;
        tk_smap_put(&tk->addmap, tk->tok, tk->toklen, a->id);
    }
    return 0;
}

int ein_tokenizer_load_json(const char *json, size_t len, ein_tokenizer **out, ein_error *err)
{
    static const char *const k[] = {"version", "truncation", "padding", "added_tokens",
                                    "normalizer", "pre_tokenizer", "post_processor", "decoder",
                                    "model", NULL};
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je), *added, *v;
    ein_tokenizer *tk = NULL;
    int rc;
    if (!root)
        return ein_fail(err, EIN_EPARSE, "tokenizer.json: line %d column %d: %s", je.line,
                        je.column, je.text);
    if (!json_is_object(root)) {
        rc = ein_fail(err, EIN_EPARSE, "tokenizer.json: not a JSON object");
        goto fail;
    }
    if ((rc = tk_keys(root, "top level", k, err)) < 0) goto fail;
    for (int w = 0; w < 2; w++) {
        const char *f = w ? "padding" : "truncation";
        v = json_object_get(root, f);
        if (v && !json_is_null(v)) {
            rc = ein_fail(err, EIN_EUNSUPPORTED, "tokenizer.json: %s is not supported (must be null)", f);
            goto fail;
        }
    }
    added = json_object_get(root, "added_tokens");
    if (added && !json_is_array(added) && !json_is_null(added)) {
        rc = ein_fail(err, EIN_EPARSE, "tokenizer.json: added_tokens must be a list");
        goto fail;
    }
    if (!(tk = calloc(1, sizeof *tk))) {
        rc = ein_fail(err, EIN_ENOMEM, "tokenizer: out of memory");
        goto fail;
    }
    if ((rc = tk_load_model(tk, json_object_get(root, "model"), added, err)) < 0 ||
        (rc = tk_load_added(tk, added, err)) < 0)
        goto fail;
    if ((v = json_object_get(root, "normalizer")) && (rc = tk_load_norm(tk, v, err)) < 0) goto fail;
    if ((v = json_object_get(root, "pre_tokenizer")) && (rc = tk_load_pre(tk, v, err)) < 0) goto fail;
    if ((v = json_object_get(root, "decoder")) && (rc = tk_load_dec(tk, v, err)) < 0) goto fail;
    if ((v = json_object_get(root, "post_processor")) && (rc = tk_load_post(tk, v, err)) < 0)
        goto fail;
    for (int i = 0; i < tk->nadded; i++) {
        tk_added *a = &tk->added[i];
        if (a->normalized &&
            (rc = tk_normalize_dup(tk, a->content, a->len, &a->norm, &a->norm_len, err)) < 0)
            goto fail;
    }
    if ((rc = tk_re_compile(tk_gpt2_re, sizeof tk_gpt2_re - 1, &tk->bl_re, "ByteLevel", err)) < 0)
        goto fail;
    /* GPT-2's bytes_to_unicode: printable bytes stand for themselves, the
     * others for 256, 257, ... in byte order */
    for (int i = 0; i < 512; i++) tk->cp_byte[i] = -1;
    for (int b = 0, extra = 0; b < 256; b++) {
        int keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        tk->byte_cp[b] = keep ? (uint32_t)b : (uint32_t)(256 + extra++);
        tk->cp_byte[tk->byte_cp[b]] = (int16_t)b;
    }
    json_decref(root);
    *out = tk;
    return 0;
fail:
    json_decref(root);
    ein_tokenizer_free(tk);
    return rc;
}

int ein_tokenizer_load(const char *path, ein_tokenizer **out, ein_error *err)
{
    char *buf;
    size_t len;
    int rc = ein_file_read_all(path, TK_FILE_CAP, "a tokenizer.json", &buf, &len, err);
    if (rc < 0) return rc;
    rc = ein_tokenizer_load_json(buf, len, out, err);
    free(buf);
    if (rc < 0) ein_error_prefix(err, "%s", path);
    return rc;
}

static void tk_steps_free(tk_step *v, int n)
{
    for (int i = 0; i < n; i++) {
        tk_pat_free(&v[i].pat);
        free(v[i].str);
    }
    free(v);
}

void ein_tokenizer_free(ein_tokenizer *tk)
{
    if (!tk) return;
    for (int32_t i = 0; tk->vstr && i < tk->nids; i++) free(tk->vstr[i]);
    for (int i = 0; i < tk->nadded; i++) {
        free(tk->added[i].content);
        free(tk->added[i].norm);
    }
    free(tk->added);
    free(tk->vstr);
    free(tk->vlen);
    free(tk->tok);
    free(tk->toklen);
    free(tk->special);
    free(tk->vocab.slot);
    free(tk->addmap.slot);
    free(tk->merges.e);
    tk_steps_free(tk->norm, tk->nnorm);
    tk_steps_free(tk->pre, tk->npre);
    tk_steps_free(tk->dec, tk->ndec);
    free(tk->tpl_pre);
    free(tk->tpl_post);
    if (tk->bl_re) pcre2_code_free(tk->bl_re);
    free(tk);
}
