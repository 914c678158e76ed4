/* common/io/ein_tokenizer_int.h — the tokenizer's internals shared by its
 * loader (ein_tokenizer_load.c) and its pipeline (ein_tokenizer.c). The
 * tokenizer owns everything reachable from it; ein_tokenizer_free() frees
 * it all. */
#ifndef EIN_TOKENIZER_INT_H
#define EIN_TOKENIZER_INT_H

#define PCRE2_CODE_UNIT_WIDTH 8

#include <pcre2.h>
#include <stddef.h>
#include <stdint.h>

#include "include/einsummable/ein_tokenizer.h"

typedef struct tk_smap {
    int32_t *slot; /* id + 1, 0 empty */
    size_t cap;    /* a power of two */
} tk_smap;

typedef struct tk_pmap_e {
    uint64_t key; /* a << 32 | b, plus one so that 0 means empty */
    int32_t rank, id;
} tk_pmap_e;

typedef struct tk_pmap {
    tk_pmap_e *e;
    size_t cap;
} tk_pmap;

typedef struct tk_added {
    char *content;
    size_t len;
    char *norm; /* normalized content (normalized=true tokens), else NULL */
    size_t norm_len;
    int32_t id;
    int lstrip, rstrip, normalized, special;
} tk_added;

enum { TK_N_PREPEND, TK_N_REPLACE, TK_N_STRIP, TK_N_UNICODE };
enum { TK_P_SPLIT, TK_P_BYTELEVEL, TK_P_METASPACE };
enum { TK_B_REMOVED, TK_B_ISOLATED, TK_B_PREV, TK_B_NEXT, TK_B_CONTIG };
enum { TK_S_ALWAYS, TK_S_FIRST, TK_S_NEVER };
enum { TK_D_BYTELEVEL, TK_D_METASPACE, TK_D_REPLACE, TK_D_BYTEFALLBACK, TK_D_FUSE, TK_D_STRIP };

/* A pattern: a literal string or a compiled regex. */
typedef struct tk_pat {
    char *lit;
    size_t lit_len;
    pcre2_code *re;
} tk_pat;

typedef struct tk_step {
    int kind;
    tk_pat pat;
    char *str; /* Prepend's / Replace's content, Metaspace's replacement, Strip's char */
    size_t str_len;
    int a, b, c; /* Strip: left, right; Split: behavior, invert; ByteLevel: prefix,
                    use_regex; Metaspace: scheme, split; decoder Strip: start, stop */
} tk_step;

struct ein_tokenizer {
    int32_t nids;
    char **tok; /* id -> token string (NUL-terminated), NULL if unassigned */
    size_t *toklen;
    unsigned char *special;
    tk_smap vocab; /* the model's vocabulary */
    tk_smap addmap; /* the added tokens' contents */
    char **vstr;    /* model id -> its vocabulary string (for vocab lookups) */
    size_t *vlen;
    tk_pmap merges;
    int byte_fallback, fuse_unk, ignore_merges;
    int32_t unk_id;
    int32_t byte_id[256];
    tk_added *added;
    int nadded;
    tk_step *norm, *pre, *dec;
    int nnorm, npre, ndec, has_decoder;
    int dec_bytefallback; /* a ByteFallback decoder is in the chain */
    int32_t *tpl_pre, *tpl_post;
    int ntpl_pre, ntpl_post;
    pcre2_code *bl_re; /* the GPT-2 regex of ByteLevel use_regex */
    uint32_t byte_cp[256];
    int16_t cp_byte[512];
};

/* Shared helpers (ein_tokenizer.c). */
int tk_smap_grow(tk_smap *m, char **strs, size_t *lens, size_t want);
int32_t tk_smap_find(const tk_smap *m, char *const *strs, const size_t *lens, const char *s,
                     size_t n);
void tk_smap_put(tk_smap *m, char *const *strs, const size_t *lens, int32_t id);
tk_pmap_e *tk_pmap_slot(const tk_pmap *m, int32_t a, int32_t b);
int tk_re_compile(const char *src, size_t n, pcre2_code **out, const char *where, ein_error *err);
/* `json` is a json_t *: {"String": s} or {"Regex": r}. */
int tk_pat_parse(void *json, tk_pat *p, const char *where, ein_error *err);
void tk_pat_free(tk_pat *p);
/* Bytes of the first character of s[0..n) if it is well-formed UTF-8, else 0. */
size_t tk_utf8_len_one(const char *s, size_t n);
/* Normalize s[0..n) with the tokenizer's normalizers into *out (malloc'd,
 * NUL-terminated, freed by the caller). */
int tk_normalize_dup(const ein_tokenizer *tk, const char *s, size_t n, char **out, size_t *olen,
                     ein_error *err);

#endif
