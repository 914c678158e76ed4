/* common/io/ein_tokenizer.c — Hugging Face tokenizer.json (the public API is
 * include/einsummable/ein_tokenizer.h; docs/tokenizer.md).
 *
 * The pipeline follows the Rust `tokenizers` crate step by step, so that the
 * ids are the ones a checkpoint was trained with:
 *   1. added tokens with normalized=false are split out of the raw text
 *      (leftmost-longest, with lstrip/rstrip);
 *   2. each other piece is normalized, then the normalized=true added
 *      tokens are split out of it;
 *   3. the pre-tokenizer splits each remaining piece;
 *   4. the BPE model turns each piece into ids (merges by rank, leftmost
 *      first; byte_fallback; unk, fused or not);
 *   5. the post-processor's template adds bos/eos.
 * Decoding maps ids to token strings and runs the decoder chain. */
#include <jansson.h>
#include <stdint.h>
#include <utf8proc.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/ein_error.h"
#include "common/io/ein_file.h"
#include "common/base/ein_vec.h"
#include "common/io/ein_tokenizer_int.h"

#define TK_FILE_CAP ((size_t)256 << 20)

/* ---- strings and growing byte buffers ---- */

typedef struct tk_buf {
    char *p;
    size_t n, cap;
} tk_buf;

static int tk_buf_add(tk_buf *b, const char *s, size_t n)
{
    if (ein_vec_reserve_z(&b->p, &b->cap, b->n + n + 1, 1) < 0) return EIN_ENOMEM;
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

static int tk_buf_cp(tk_buf *b, uint32_t cp)
{
    char u[4];
    size_t n;
    if (cp < 0x80) { u[0] = (char)cp; n = 1; }
    else if (cp < 0x800) { u[0] = (char)(0xC0 | cp >> 6); u[1] = (char)(0x80 | (cp & 63)); n = 2; }
    else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | cp >> 12); u[1] = (char)(0x80 | ((cp >> 6) & 63));
        u[2] = (char)(0x80 | (cp & 63)); n = 3;
    } else {
        u[0] = (char)(0xF0 | cp >> 18); u[1] = (char)(0x80 | ((cp >> 12) & 63));
        u[2] = (char)(0x80 | ((cp >> 6) & 63)); u[3] = (char)(0x80 | (cp & 63)); n = 4;
    }
    return tk_buf_add(b, u, n);
}

/* Length of the well-formed UTF-8 sequence at s[0..n), or 0 if the bytes
 * there do not start one. When `sub` is not NULL it receives the length of
 * the maximal subpart of an ill-formed sequence (at least 1): what one
 * U+FFFD replaces (Unicode 3.9, as Rust's from_utf8_lossy and TextDecoder). */
static size_t tk_utf8_len(const unsigned char *s, size_t n, size_t *sub)
{
    unsigned char c = s[0];
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (sub) *sub = 1;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else return 0;
    for (size_t k = 1; k <= need; k++) {
        unsigned char b = k < n ? s[k] : 0;
        unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
        if (k >= n || b < l || b > h) {
            if (sub) *sub = k;
            return 0;
        }
    }
    return need + 1;
}

static uint32_t tk_utf8_cp(const unsigned char *s, size_t len)
{
    if (len == 1) return s[0];
    if (len == 2) return (uint32_t)(s[0] & 0x1F) << 6 | (s[1] & 63);
    if (len == 3) return (uint32_t)(s[0] & 0x0F) << 12 | (uint32_t)(s[1] & 63) << 6 | (s[2] & 63);
    return (uint32_t)(s[0] & 7) << 18 | (uint32_t)(s[1] & 63) << 12 | (uint32_t)(s[2] & 63) << 6 |
           (s[3] & 63);
}

size_t tk_utf8_len_one(const char *s, size_t n)
{
    return n ? tk_utf8_len((const unsigned char *)s, n, NULL) : 0;
}

/* -1 if valid, else the offset of the first bad byte. */
static long tk_utf8_check(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        size_t l = tk_utf8_len((const unsigned char *)s + i, n - i, NULL);
        if (!l) return (long)i;
        i += l;
    }
    return -1;
}

/* Bytes as UTF-8, each maximal ill-formed subpart as U+FFFD. */
static int tk_buf_lossy(tk_buf *b, const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        size_t sub, l = tk_utf8_len((const unsigned char *)s + i, n - i, &sub);
        int rc = l ? tk_buf_add(b, s + i, l) : tk_buf_add(b, "\xEF\xBF\xBD", 3);
        if (rc < 0) return rc;
        i += l ? l : sub;
    }
    return 0;
}

/* char::is_whitespace: Unicode White_Space. */
static int tk_is_ws(uint32_t c)
{
    return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

/* ---- a hash of strings to ids, and of id pairs to merges ---- */

static uint64_t tk_hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

int tk_smap_grow(tk_smap *m, char **strs, size_t *lens, size_t want)
{
    size_t cap = 64;
    while (cap < want * 2) cap <<= 1;
    if (cap <= m->cap) return 0;
    int32_t *slot = calloc(cap, sizeof *slot);
    if (!slot) return EIN_ENOMEM;
    for (size_t i = 0; i < m->cap; i++) {
        int32_t v = m->slot[i];
        if (!v) continue;
        size_t h = tk_hash(strs[v - 1], lens[v - 1]) & (cap - 1);
        while (slot[h]) h = (h + 1) & (cap - 1);
        slot[h] = v;
    }
    free(m->slot);
    m->slot = slot;
    m->cap = cap;
    return 0;
}

int32_t tk_smap_find(const tk_smap *m, char *const *strs, const size_t *lens,
                            const char *s, size_t n)
{
    if (!m->cap) return -1;
    size_t h = tk_hash(s, n) & (m->cap - 1);
    for (int32_t v; (v = m->slot[h]); h = (h + 1) & (m->cap - 1))
        if (lens[v - 1] == n && !memcmp(strs[v - 1], s, n)) return v - 1;
    return -1;
}

/* Insert id (its string already in strs[id]); the caller has grown it. */
void tk_smap_put(tk_smap *m, char *const *strs, const size_t *lens, int32_t id)
{
    size_t h = tk_hash(strs[id], lens[id]) & (m->cap - 1);
    while (m->slot[h]) h = (h + 1) & (m->cap - 1);
    m->slot[h] = id + 1;
}

tk_pmap_e *tk_pmap_slot(const tk_pmap *m, int32_t a, int32_t b)
{
    uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
    uint64_t x = key * 0x9E3779B97F4A7C15ull;
    size_t h = (size_t)(x ^ (x >> 31)) & (m->cap - 1);
    while (m->e[h].key && m->e[h].key != key) h = (h + 1) & (m->cap - 1);
    return &m->e[h]; /* found, or the empty slot to fill */
}

static const tk_pmap_e *tk_pmap_find(const tk_pmap *m, int32_t a, int32_t b)
{
    if (!m->cap) return NULL;
    const tk_pmap_e *e = tk_pmap_slot(m, a, b);
    return e->key ? e : NULL;
}

/* ---- patterns ---- */

void tk_pat_free(tk_pat *p)
{
    free(p->lit);
    if (p->re) pcre2_code_free(p->re);
}

int tk_re_compile(const char *src, size_t n, pcre2_code **out, const char *where,
                         ein_error *err)
{
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)src, n, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return ein_fail(err, EIN_EPARSE, "tokenizer.json: %s: regex rejected at offset %zu: %s",
                        where, (size_t)eo, (const char *)msg);
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* where the JIT is missing, it interprets */
    *out = re;
    return 0;
}

/* {"String": s} or {"Regex": r} */
int tk_pat_parse(void *jv, tk_pat *p, const char *where, ein_error *err)
{
    json_t *j = jv;
    json_t *s = json_object_get(j, "String"), *r = json_object_get(j, "Regex");
    if (!json_is_object(j) || json_object_size(j) != 1 || !(json_is_string(s) || json_is_string(r)))
        return ein_fail(err, EIN_EPARSE,
                        "tokenizer.json: %s: pattern must be {\"String\": ...} or {\"Regex\": ...}",
                        where);
    if (s) {
        p->lit_len = json_string_length(s);
        if (!p->lit_len)
            return ein_fail(err, EIN_EPARSE, "tokenizer.json: %s: empty String pattern", where);
        p->lit = malloc(p->lit_len + 1);
        if (!p->lit) return ein_fail(err, EIN_ENOMEM, "tokenizer: out of memory");
        memcpy(p->lit, json_string_value(s), p->lit_len + 1);
        return 0;
    }
    return tk_re_compile(json_string_value(r), json_string_length(r), &p->re, where, err);
}

typedef struct tk_range {
    size_t lo, hi;
} tk_range;
typedef EIN_VEC(tk_range) tk_ranges;

/* The non-overlapping matches of `p` in s[0..n), left to right (an empty
 * match moves on by one character). */
static int tk_pat_find(const tk_pat *p, const char *s, size_t n, tk_ranges *out, ein_error *err)
{
    out->n = 0;
    if (p->lit) {
        for (size_t i = 0; i + p->lit_len <= n;) {
            if (!memcmp(s + i, p->lit, p->lit_len)) {
                if (ein_vec_push(out, ((tk_range){i, i + p->lit_len})) < 0) goto nomem;
                i += p->lit_len;
            } else i++;
        }
        return 0;
    }
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(p->re, NULL);
    if (!md) goto nomem;
    size_t at = 0;
    while (at <= n) {
        int rc = pcre2_match(p->re, (PCRE2_SPTR)s, n, at, at ? PCRE2_NO_UTF_CHECK : 0, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            pcre2_match_data_free(md);
            return ein_fail(err, EIN_EINVAL, "tokenizer: regex match failed: %s",
                            (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t lo = ov[0], hi = ov[1];
        if (hi > lo && ein_vec_push(out, ((tk_range){lo, hi})) < 0) {
            pcre2_match_data_free(md);
            goto nomem;
        }
        if (hi > lo) at = hi;
        else {
            if (lo >= n) break;
            size_t l = tk_utf8_len((const unsigned char *)s + lo, n - lo, NULL);
            at = lo + (l ? l : 1);
        }
    }
    pcre2_match_data_free(md);
    return 0;
nomem:
    return ein_fail(err, EIN_ENOMEM, "tokenizer: out of memory");
}

/* Replace every match of `p` in s[0..n) by `with`, into b (emptied first). */
static int tk_pat_replace(const tk_pat *p, const char *s, size_t n, const char *with,
                          size_t wn, tk_buf *b, ein_error *err)
{
    tk_ranges m = {0};
    int rc = tk_pat_find(p, s, n, &m, err);
    size_t at = 0;
    b->n = 0;
    if (rc < 0) return rc;
    for (int i = 0; i < m.n && rc == 0; i++) {
        rc = tk_buf_add(b, s + at, m.v[i].lo - at);
        if (!rc) rc = tk_buf_add(b, with, wn);
        at = m.v[i].hi;
    }
    if (!rc) rc = tk_buf_add(b, s + at, n - at);
    ein_vec_free(&m);
    return rc < 0 ? ein_fail(err, EIN_ENOMEM, "tokenizer: out of memory") : 0;
}

int tk_normalize_dup(const ein_tokenizer *tk, const char *s, size_t n, char **out, size_t *olen,
                     ein_error *err);

/* ---- pieces of text on their way through the pipeline ---- */

typedef struct tk_piece {
    char *s;    /* owned */
    size_t n;
    int32_t id; /* an added token already, or -1 */
    int orig0;  /* starts at offset 0 of the original text */
} tk_piece;
typedef EIN_VEC(tk_piece) tk_pieces;

static void tk_pieces_free(tk_pieces *ps)
{
    for (int i = 0; i < ps->n; i++) free(ps->v[i].s);
    ein_vec_free(ps);
}

static int tk_piece_push(tk_pieces *ps, const char *s, size_t n, int32_t id, int orig0)
{
    tk_piece p = {malloc(n + 1), n, id, orig0};
    if (!p.s) return EIN_ENOMEM;
    memcpy(p.s, s, n);
    p.s[n] = 0;
    if (ein_vec_push(ps, p) < 0) {
        free(p.s);
        return EIN_ENOMEM;
    }
    return 0;
}

/* ---- normalizers ---- */

static int tk_normalize(const ein_tokenizer *tk, const char *s, size_t n, tk_buf *out,
                        ein_error *err)
{
    tk_buf tmp = {0};
    int rc = 0;
    out->n = 0;
    if ((rc = tk_buf_add(out, s, n)) < 0) goto nomem;
    for (int i = 0; i < tk->nnorm; i++) {
        const tk_step *st = &tk->norm[i];
        tmp.n = 0;
        if (st->kind == TK_N_PREPEND) {
            if (!out->n) continue;
            if (tk_buf_add(&tmp, st->str, st->str_len) < 0 || tk_buf_add(&tmp, out->p, out->n) < 0)
                goto nomem;
        } else if (st->kind == TK_N_REPLACE) {
            if ((rc = tk_pat_replace(&st->pat, out->p, out->n, st->str, st->str_len, &tmp, err)) < 0)
                goto done;
        } else if (st->kind == TK_N_UNICODE) { /* NFC, NFD, NFKC, NFKD: st->a is the options */
            utf8proc_uint8_t *dst = NULL;
            utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t *)out->p,
                                              (utf8proc_ssize_t)out->n, &dst,
                                              (utf8proc_option_t)st->a);
            if (m < 0) {
                free(dst);
                rc = ein_fail(err, m == UTF8PROC_ERROR_NOMEM ? EIN_ENOMEM : EIN_EINVAL,
                              "tokenizer: Unicode normalization: %s", utf8proc_errmsg(m));
                goto done;
            }
            rc = tk_buf_add(&tmp, (const char *)dst, (size_t)m);
            free(dst);
            if (rc < 0) goto nomem;
        } else { /* Strip: Unicode whitespace at either end */
            size_t lo = 0, hi = out->n;
            const unsigned char *u = (const unsigned char *)out->p;
            while (st->a && lo < hi) {
                size_t l = tk_utf8_len(u + lo, hi - lo, NULL);
                if (!tk_is_ws(tk_utf8_cp(u + lo, l))) break;
                lo += l;
            }
            while (st->b && hi > lo) {
                size_t k = hi - 1;
                while (k > lo && (u[k] & 0xC0) == 0x80) k--;
                if (!tk_is_ws(tk_utf8_cp(u + k, hi - k))) break;
                hi = k;
            }
            if (tk_buf_add(&tmp, out->p + lo, hi - lo) < 0) goto nomem;
        }
        tk_buf t = *out;
        *out = tmp;
        tmp = t;
    }
    goto done;
nomem:
    rc = ein_fail(err, EIN_ENOMEM, "tokenizer: out of memory");
done:
    free(tmp.p);
    return rc;
}

/* ---- added tokens ---- */

/* Split the text pieces of `in` around the added tokens of one kind
 * (normalized or not), as AddedVocabulary::split_with_indices. With
 * `normalize`, each text piece is normalized first. */
static int tk_split_added(const ein_tokenizer *tk, tk_pieces *ps, int normalized, int normalize,
                          ein_error *err)
{
    tk_pieces out = {0};
    tk_buf nb = {0};
    int rc = 0;
    for (int i = 0; i < ps->n; i++) {
        tk_piece *p = &ps->v[i];
        if (p->id >= 0) {
            if (ein_vec_push(&out, *p) < 0) goto nomem;
            p->s = NULL;
            continue;
        }
        const char *s = p->s;
        size_t n = p->n;
        if (normalize) {
            if ((rc = tk_normalize(tk, p->s, p->n, &nb, err)) < 0) goto done;
            s = nb.p;
            n = nb.n;
        }
        size_t start_off = 0, pos = 0;
        while (pos < n) {
            /* leftmost-longest: the first position where a token starts */
            int best = -1;
            size_t at = pos, blen = 0;
            for (; at < n && best < 0; at++) {
                for (int k = 0; k < tk->nadded; k++) {
                    const tk_added *a = &tk->added[k];
                    if (a->normalized != normalized) continue;
                    const char *c = normalized ? a->norm : a->content;
                    size_t cl = normalized ? a->norm_len : a->len;
                    if (cl && cl <= n - at && cl > blen && s[at] == c[0] && !memcmp(s + at, c, cl)) {
                        best = k;
                        blen = cl;
                    }
                }
                if (best >= 0) break;
            }
            if (best < 0) break;
            const tk_added *a = &tk->added[best];
            size_t mlo = at, mhi = at + blen;
            pos = mhi;
            if (a->lstrip) {
                size_t k = mlo;
                while (k > 0) {
                    size_t j = k - 1;
                    while (j > 0 && ((unsigned char)s[j] & 0xC0) == 0x80) j--;
                    if (!tk_is_ws(tk_utf8_cp((const unsigned char *)s + j, k - j))) break;
                    k = j;
                }
                mlo = k > start_off ? k : start_off;
            }
            if (a->rstrip) {
                while (mhi < n) {
                    size_t l = tk_utf8_len((const unsigned char *)s + mhi, n - mhi, NULL);
                    if (!tk_is_ws(tk_utf8_cp((const unsigned char *)s + mhi, l))) break;
                    mhi += l;
                }
            }
            if (start_off < mlo &&
                tk_piece_push(&out, s + start_off, mlo - start_off, -1, p->orig0 && start_off == 0) < 0)
                goto nomem;
            if (tk_piece_push(&out, s + mlo, mhi - mlo, a->id, 0) < 0) goto nomem;
            start_off = mhi;
        }
        if (start_off < n &&
            tk_piece_push(&out, s + start_off, n - start_off, -1, p->orig0 && start_off == 0) < 0)
            goto nomem;
    }
    goto done;
nomem:
    rc = ein_fail(err, EIN_ENOMEM, "tokenizer: out of memory");
done:
    free(nb.p);
    tk_pieces_free(ps);
    *ps = out;
    if (rc < 0) tk_pieces_free(ps);
    return rc;
}

/* ---- pre-tokenizers ---- */

typedef struct tk_split {
    tk_range r;
    int match;
} tk_split;
typedef EIN_VEC(tk_split) tk_splits;

/* Split piece p by the matches `m` with `behavior` (as the Rust crate's
 * NormalizedString::split), appending the non-empty parts to `out`. */
static int tk_split_by(const tk_piece *p, const tk_ranges *m, int behavior, int invert,
                       tk_pieces *out)
{
    tk_splits sp = {0}, res = {0};
    int rc = EIN_ENOMEM;
    size_t prev = 0;
    for (int i = 0; i < m->n; i++) {
        if (m->v[i].lo > prev && ein_vec_push(&sp, ((tk_split){{prev, m->v[i].lo}, 0})) < 0)
            goto done;
        if (ein_vec_push(&sp, ((tk_split){m->v[i], 1})) < 0) goto done;
        prev = m->v[i].hi;
    }
    if (prev < p->n && ein_vec_push(&sp, ((tk_split){{prev, p->n}, 0})) < 0) goto done;
    if (invert)
        for (int i = 0; i < sp.n; i++) sp.v[i].match = !sp.v[i].match;
    int prevm = 0;
    if (behavior == TK_B_NEXT) {
        for (int i = sp.n - 1; i >= 0; i--) {
            if (sp.v[i].match && !prevm && res.n) res.v[res.n - 1].r.lo = sp.v[i].r.lo;
            else if (ein_vec_push(&res, sp.v[i]) < 0) goto done;
            prevm = sp.v[i].match;
        }
        for (int i = 0; i < res.n / 2; i++) {
            tk_split t = res.v[i];
            res.v[i] = res.v[res.n - 1 - i];
            res.v[res.n - 1 - i] = t;
        }
    } else {
        for (int i = 0; i < sp.n; i++) {
            tk_split x = sp.v[i];
            int merge = 0;
            if (behavior == TK_B_REMOVED && x.match) continue;
            if (behavior == TK_B_PREV) merge = x.match && !prevm;
            if (behavior == TK_B_CONTIG) merge = x.match == prevm;
            if (merge && res.n) res.v[res.n - 1].r.hi = x.r.hi;
            else if (ein_vec_push(&res, x) < 0) goto done;
            prevm = x.match;
        }
    }
    for (int i = 0; i < res.n; i++) {
        tk_range r = res.v[i].r;
        if (r.hi > r.lo && tk_piece_push(out, p->s + r.lo, r.hi - r.lo, -1, p->orig0 && r.lo == 0) < 0)
            goto done;
    }
    rc = 0;
done:
    ein_vec_free(&sp);
    ein_vec_free(&res);
    return rc;
}

static int tk_pre_step(const ein_tokenizer *tk, const tk_step *st, tk_pieces *ps, ein_error *err)
{
    tk_pieces out = {0};
    tk_ranges m = {0};
    tk_buf b = {0};
    int rc = 0;
    for (int i = 0; i < ps->n; i++) {
        tk_piece *p = &ps->v[i];
        if (p->id >= 0) {
            if (ein_vec_push(&out, *p) < 0) goto nomem;
            p->s = NULL;
            continue;
        }
        if (st->kind == TK_P_SPLIT) {
            if ((rc = tk_pat_find(&st->pat, p->s, p->n, &m, err)) < 0) goto done;
            if (tk_split_by(p, &m, st->a, st->b, &out) < 0) goto nomem;
        } else if (st->kind == TK_P_BYTELEVEL) {
            tk_piece q = *p;
            b.n = 0;
            if (st->a && (p->n == 0 || p->s[0] != ' ')) {
                if (tk_buf_add(&b, " ", 1) < 0 || tk_buf_add(&b, p->s, p->n) < 0) goto nomem;
                q.s = b.p;
                q.n = b.n;
            }
            int first = out.n;
            if (st->b) {
                tk_pat pat = {NULL, 0, tk->bl_re};
                if ((rc = tk_pat_find(&pat, q.s, q.n, &m, err)) < 0) goto done;
                if (tk_split_by(&q, &m, TK_B_ISOLATED, 0, &out) < 0) goto nomem;
            } else if (q.n && tk_piece_push(&out, q.s, q.n, -1, q.orig0) < 0) goto nomem;
            /* every byte to its printable stand-in */
            for (int k = first; k < out.n; k++) {
                tk_buf t = {0};
                for (size_t j = 0; j < out.v[k].n; j++)
                    if (tk_buf_cp(&t, tk->byte_cp[(unsigned char)out.v[k].s[j]]) < 0) {
                        free(t.p);
                        goto nomem;
                    }
                free(out.v[k].s);
                out.v[k].s = t.p;
                out.v[k].n = t.n;
            }
        } else { /* Metaspace */
            if ((rc = tk_pat_replace(&(tk_pat){(char *)" ", 1, NULL}, p->s, p->n, st->str,
                                     st->str_len, &b, err)) < 0)
                goto done;
            int starts = b.n >= st->str_len && !memcmp(b.p, st->str, st->str_len);
            if (!starts && (st->a == TK_S_ALWAYS || (st->a == TK_S_FIRST && p->orig0))) {
                tk_buf t = {0};
                if (tk_buf_add(&t, st->str, st->str_len) < 0 || tk_buf_add(&t, b.p, b.n) < 0) {
                    free(t.p);
                    goto nomem;
                }
                free(b.p);
                b = t;
            }
            tk_piece q = {b.p, b.n, -1, p->orig0};
            if (st->b) {
                tk_pat pat = {st->str, st->str_len, NULL};
                if ((rc = tk_pat_find(&pat, q.s, q.n, &m, err)) < 0) goto done;
                if (tk_split_by(&q, &m, TK_B_NEXT, 0, &out) < 0) goto nomem;
            } else if (q.n && tk_piece_push(&out, q.s, q.n, -1, q.orig0) < 0) goto nomem;
        }
    }
    goto done;
nomem:
    rc = ein_fail(err, EIN_ENOMEM, "tokenizer: out of memory");
done:
    ein_vec_free(&m);
    free(b.p);
    tk_pieces_free(ps);
    *ps = out;
    if (rc < 0) tk_pieces_free(ps);
    return rc;
}

/* ---- the BPE model ---- */

typedef struct tk_sym {
    int32_t id;
    int prev, next;
    size_t len; /* bytes of text; 0 once merged into its left neighbour */
} tk_sym;

typedef struct tk_qe {
    int32_t rank, id;
    int pos;
} tk_qe;

static int tk_qe_less(tk_qe a, tk_qe b)
{
    return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos;
}

static void tk_heap_push(tk_qe *h, int *n, tk_qe e)
{
    int i = (*n)++;
    h[i] = e;
    while (i > 0 && tk_qe_less(h[i], h[(i - 1) / 2])) {
        tk_qe t = h[i];
        h[i] = h[(i - 1) / 2];
        h[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
}

static tk_qe tk_heap_pop(tk_qe *h, int *n)
{
    tk_qe top = h[0];
    h[0] = h[--*n];
    for (int i = 0;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < *n && tk_qe_less(h[l], h[m])) m = l;
        if (r < *n && tk_qe_less(h[r], h[m])) m = r;
        if (m == i) break;
        tk_qe t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
    return top;
}

typedef EIN_VEC(int32_t) tk_ids;

static int tk_bpe(const ein_tokenizer *tk, const char *s, size_t n, tk_ids *ids)
{
    if (!n) return 0;
    if (tk->ignore_merges) {
        int32_t id = tk_smap_find(&tk->vocab, tk->vstr, tk->vlen, s, n);
        if (id >= 0) return ein_vec_push(ids, id);
    }
    EIN_VEC(tk_sym) w = {0};
    tk_qe *heap = NULL;
    int rc = EIN_ENOMEM, nheap = 0;
    int32_t unk = -1;
    size_t unk_len = 0;
#define TK_ADD(ID, LEN)                                                              \
    do {                                                                             \
        tk_sym sy_ = {(ID), w.n - 1, w.n + 1, (LEN)};                                \
        if (ein_vec_push(&w, sy_) < 0) goto done;                                    \
    } while (0)
    for (size_t i = 0; i < n;) {
        size_t l = tk_utf8_len((const unsigned char *)s + i, n - i, NULL);
        if (!l) l = 1; /* not reached: the text was checked */
        int32_t id = tk_smap_find(&tk->vocab, tk->vstr, tk->vlen, s + i, l);
        if (id >= 0) {
            if (unk >= 0) {
                TK_ADD(unk, unk_len);
                unk = -1;
            }
            TK_ADD(id, l);
        } else {
            int all = tk->byte_fallback;
            for (size_t k = 0; all && k < l; k++) all = tk->byte_id[(unsigned char)s[i + k]] >= 0;
            if (all) {
                for (size_t k = 0; k < l; k++) TK_ADD(tk->byte_id[(unsigned char)s[i + k]], 1);
            } else if (tk->unk_id >= 0) {
                if (unk >= 0 && tk->fuse_unk) unk_len += l;
                else {
                    if (unk >= 0) TK_ADD(unk, unk_len);
                    unk = tk->unk_id;
                    unk_len = l;
                }
            }
        }
        i += l;
    }
    if (unk >= 0) TK_ADD(unk, unk_len);
#undef TK_ADD
    if (w.n) w.v[w.n - 1].next = -1;
    heap = malloc(sizeof *heap * (size_t)(2 * w.n + 1));
    if (!heap) goto done;
    for (int i = 0; i + 1 < w.n; i++) {
        const tk_pmap_e *e = tk_pmap_find(&tk->merges, w.v[i].id, w.v[i + 1].id);
        if (e) tk_heap_push(heap, &nheap, (tk_qe){e->rank, e->id, i});
    }
    /* Each merge pushes at most two entries and removes a symbol: the
     * heap never holds more than 2 * w.n + 1. */
    while (nheap) {
        tk_qe top = tk_heap_pop(heap, &nheap);
        tk_sym *cur = &w.v[top.pos];
        if (!cur->len || cur->next < 0) continue;
        tk_sym right = w.v[cur->next];
        const tk_pmap_e *e = tk_pmap_find(&tk->merges, cur->id, right.id);
        if (!e || e->id != top.id) continue;
        cur->id = top.id;
        cur->len += right.len;
        w.v[cur->next].len = 0;
        cur->next = right.next;
        if (right.next >= 0) w.v[right.next].prev = top.pos;
        if (cur->prev >= 0 && (e = tk_pmap_find(&tk->merges, w.v[cur->prev].id, cur->id)))
            tk_heap_push(heap, &nheap, (tk_qe){e->rank, e->id, cur->prev});
        if (cur->next >= 0 && (e = tk_pmap_find(&tk->merges, cur->id, w.v[cur->next].id)))
            tk_heap_push(heap, &nheap, (tk_qe){e->rank, e->id, top.pos});
    }
    for (int i = 0; i < w.n; i++)
        if (w.v[i].len && ein_vec_push(ids, w.v[i].id) < 0) goto done;
    rc = 0;
done:
    free(heap);
    ein_vec_free(&w);
    return rc;
}

/* ---- encode ---- */

int ein_tokenizer_encode(const ein_tokenizer *tk, const char *text, size_t len, int add_special,
                         int32_t **ids_out, size_t *n_out, ein_error *err)
{
    if (!tk || (!text && len)) return ein_fail(err, EIN_EINVAL, "tokenizer encode: NULL argument");
    long bad = tk_utf8_check(text, len);
    if (bad >= 0)
        return ein_fail(err, EIN_EINVAL, "tokenizer encode: the text is not UTF-8 (byte %ld)", bad);
    tk_pieces ps = {0};
    tk_ids ids = {0};
    int rc = 0;
    if (len && tk_piece_push(&ps, text, len, -1, 1) < 0) goto nomem;
    if ((rc = tk_split_added(tk, &ps, 0, 0, err)) < 0) goto fail;
    if ((rc = tk_split_added(tk, &ps, 1, 1, err)) < 0) goto fail;
    for (int i = 0; i < tk->npre; i++)
        if ((rc = tk_pre_step(tk, &tk->pre[i], &ps, err)) < 0) goto fail;
    if (add_special)
        for (int i = 0; i < tk->ntpl_pre; i++)
            if (ein_vec_push(&ids, tk->tpl_pre[i]) < 0) goto nomem;
    for (int i = 0; i < ps.n; i++) {
        if (ps.v[i].id >= 0) {
            if (ein_vec_push(&ids, ps.v[i].id) < 0) goto nomem;
        } else if (tk_bpe(tk, ps.v[i].s, ps.v[i].n, &ids) < 0) goto nomem;
    }
    if (add_special)
        for (int i = 0; i < tk->ntpl_post; i++)
            if (ein_vec_push(&ids, tk->tpl_post[i]) < 0) goto nomem;
    if (!ids.v && !(ids.v = malloc(sizeof(int32_t)))) goto nomem;
    tk_pieces_free(&ps);
    *ids_out = ids.v;
    *n_out = (size_t)ids.n;
    return 0;
nomem:
    rc = ein_fail(err, EIN_ENOMEM, "tokenizer encode: out of memory");
fail:
    tk_pieces_free(&ps);
    ein_vec_free(&ids);
    return rc;
}

/* ---- decode ---- */

typedef struct tk_strs {
    tk_buf *v;
    int n, cap;
} tk_strs;

static void tk_strs_free(tk_strs *t)
{
    for (int i = 0; i < t->n; i++) free(t->v[i].p);
    ein_vec_free(t);
}

static int tk_strs_push(tk_strs *t, const char *s, size_t n)
{
    tk_buf b = {0};
    if (tk_buf_add(&b, s, n) < 0) return EIN_ENOMEM;
    if (ein_vec_push(t, b) < 0) {
        free(b.p);
        return EIN_ENOMEM;
    }
    return 0;
}

static int tk_hexv(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int tk_flush_bytes(tk_strs *out, tk_buf *bytes)
{
    int rc = 0;
    if (!bytes->n) return 0;
    if (tk_utf8_check(bytes->p, bytes->n) < 0) rc = tk_strs_push(out, bytes->p, bytes->n);
    else
        for (size_t i = 0; i < bytes->n && !rc; i++) rc = tk_strs_push(out, "\xEF\xBF\xBD", 3);
    bytes->n = 0;
    return rc;
}

/* One decoder of the chain over the token strings `t` (replaced). */
static int tk_dec_step(const ein_tokenizer *tk, const tk_step *st, tk_strs *t, ein_error *err)
{
    tk_strs out = {0};
    tk_buf b = {0}, bytes = {0};
    int rc = 0;
    if (st->kind == TK_D_BYTELEVEL) {
        for (int i = 0; i < t->n; i++) {
            const unsigned char *u = (const unsigned char *)t->v[i].p;
            size_t n = t->v[i].n, start = b.n;
            int all = 1;
            for (size_t j = 0; j < n;) {
                size_t l = tk_utf8_len(u + j, n - j, NULL);
                uint32_t cp = l ? tk_utf8_cp(u + j, l) : 0xFFFF;
                if (!l || cp >= 512 || tk->cp_byte[cp] < 0) {
                    all = 0;
                    break;
                }
                char c = (char)tk->cp_byte[cp];
                if (tk_buf_add(&b, &c, 1) < 0) goto nomem;
                j += l;
            }
            if (!all) {
                b.n = start;
                if (tk_buf_add(&b, t->v[i].p, n) < 0) goto nomem;
            }
        }
        tk_buf s = {0};
        if (tk_buf_lossy(&s, b.p ? b.p : "", b.n) < 0 || ein_vec_push(&out, s) < 0) {
            free(s.p);
            goto nomem;
        }
        if (!s.p && tk_buf_add(&out.v[0], "", 0) < 0) goto nomem;
    } else if (st->kind == TK_D_METASPACE || st->kind == TK_D_REPLACE) {
        for (int i = 0; i < t->n; i++) {
            if (st->kind == TK_D_REPLACE) {
                if ((rc = tk_pat_replace(&st->pat, t->v[i].p, t->v[i].n, st->str, st->str_len, &b,
                                         err)) < 0)
                    goto done;
            } else {
                int drop = i == 0 && st->a != TK_S_NEVER;
                if ((rc = tk_pat_replace(&(tk_pat){st->str, st->str_len, NULL}, t->v[i].p,
                                         t->v[i].n, " ", drop ? 0 : 1, &b, err)) < 0)
                    goto done;
            }
            if (tk_strs_push(&out, b.p ? b.p : "", b.n) < 0) goto nomem;
        }
    } else if (st->kind == TK_D_BYTEFALLBACK) {
        for (int i = 0; i < t->n; i++) {
            const char *s = t->v[i].p;
            int hi, lo;
            if (t->v[i].n == 6 && !memcmp(s, "<0x", 3) && s[5] == '>' && (hi = tk_hexv(s[3])) >= 0 &&
                (lo = tk_hexv(s[4])) >= 0) {
                char c = (char)(hi << 4 | lo);
                if (tk_buf_add(&bytes, &c, 1) < 0) goto nomem;
                continue;
            }
            if (tk_flush_bytes(&out, &bytes) < 0 || tk_strs_push(&out, s, t->v[i].n) < 0) goto nomem;
        }
        if (tk_flush_bytes(&out, &bytes) < 0) goto nomem;
    } else if (st->kind == TK_D_FUSE) {
        for (int i = 0; i < t->n; i++)
            if (tk_buf_add(&b, t->v[i].p, t->v[i].n) < 0) goto nomem;
        if (tk_strs_push(&out, b.p ? b.p : "", b.n) < 0) goto nomem;
    } else { /* Strip: up to a leading and b trailing characters equal to str */
        for (int i = 0; i < t->n; i++) {
            const char *s = t->v[i].p;
            size_t lo = 0, hi = t->v[i].n, cl = st->str_len;
            for (int k = 0; k < st->a && hi - lo >= cl && !memcmp(s + lo, st->str, cl); k++) lo += cl;
            for (int k = 0; k < st->b && hi - lo >= cl && !memcmp(s + hi - cl, st->str, cl); k++)
                hi -= cl;
            if (tk_strs_push(&out, s + lo, hi - lo) < 0) goto nomem;
        }
    }
    goto done;
nomem:
    rc = ein_fail(err, EIN_ENOMEM, "tokenizer decode: out of memory");
done:
    free(b.p);
    free(bytes.p);
    tk_strs_free(t);
    *t = out;
    if (rc < 0) tk_strs_free(t);
    return rc;
}

int ein_tokenizer_decode(const ein_tokenizer *tk, const int32_t *ids, size_t n, int skip_special,
                         char **text, size_t *len, ein_error *err)
{
    if (!tk || (!ids && n)) return ein_fail(err, EIN_EINVAL, "tokenizer decode: NULL argument");
    tk_strs t = {0};
    tk_buf out = {0};
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= tk->nids || !tk->tok[id]) {
            rc = ein_fail(err, EIN_EINVAL,
                          "tokenizer decode: token id %ld (at %zu) is not in the vocabulary "
                          "(%s)",
                          (long)id, i,
                          id < 0 || id >= tk->nids ? "ids are 0 to vocab_size - 1" : "unassigned");
            goto fail;
        }
        if (skip_special && tk->special[id]) continue;
        if (tk_strs_push(&t, tk->tok[id], tk->toklen[id]) < 0) goto nomem;
    }
    if (!tk->has_decoder) {
        for (int i = 0; i < t.n; i++)
            if ((i && tk_buf_add(&out, " ", 1) < 0) || tk_buf_add(&out, t.v[i].p, t.v[i].n) < 0)
                goto nomem;
    } else {
        for (int i = 0; i < tk->ndec; i++)
            if ((rc = tk_dec_step(tk, &tk->dec[i], &t, err)) < 0) goto fail;
        for (int i = 0; i < t.n; i++)
            if (tk_buf_add(&out, t.v[i].p, t.v[i].n) < 0) goto nomem;
    }
    if (!out.p && tk_buf_add(&out, "", 0) < 0) goto nomem;
    tk_strs_free(&t);
    *text = out.p;
    *len = out.n;
    return 0;
nomem:
    rc = ein_fail(err, EIN_ENOMEM, "tokenizer decode: out of memory");
fail:
    tk_strs_free(&t);
    free(out.p);
    return rc;
}

/* ---- streaming decode ----
 *
 * The window holds the ids from the start of the text last returned; the
 * prefix is the decode of its first `read` ids (what was returned before
 * that). A push decodes the window; the part past the prefix is returned
 * once it does not end in U+FFFD (an incomplete character, or bytes later
 * ids may complete), and the window then starts where that text began, so
 * decoders that treat a first token apart (Metaspace, Strip) see the same
 * start in both decodes. With a ByteFallback decoder a run of <0xXX>
 * tokens is held whole: one invalid byte anywhere in a run turns the whole
 * run into U+FFFDs, so no part of it is final before the run ends. */

struct ein_tokstream {
    const ein_tokenizer *tk;
    int skip;
    tk_ids ids;
    size_t read;
    char *prefix;
    size_t prefix_len;
};

int ein_tokstream_new(const ein_tokenizer *tk, int skip_special, ein_tokstream **out,
                      ein_error *err)
{
    if (!tk) return ein_fail(err, EIN_EINVAL, "tokenizer stream: NULL tokenizer");
    ein_tokstream *st = calloc(1, sizeof *st);
    if (!st || !(st->prefix = calloc(1, 1))) {
        free(st);
        return ein_fail(err, EIN_ENOMEM, "tokenizer stream: out of memory");
    }
    st->tk = tk;
    st->skip = skip_special;
    *out = st;
    return 0;
}

static int tk_ends_fffd(const char *s, size_t n)
{
    return n >= 3 && !memcmp(s + n - 3, "\xEF\xBF\xBD", 3);
}

static int tk_is_byte_token(const ein_tokenizer *tk, int32_t id)
{
    const char *s = tk->tok[id];
    return tk->toklen[id] == 6 && !memcmp(s, "<0x", 3) && s[5] == '>' && tk_hexv(s[3]) >= 0 &&
           tk_hexv(s[4]) >= 0;
}

/* Return s past the prefix in *text, and start the window anew. */
static int tk_stream_emit(ein_tokstream *st, const char *s, size_t n, char **text, size_t *len,
                          ein_error *err)
{
    char *p = NULL;
    size_t pn = 0;
    int rc;
    if (n < st->prefix_len || memcmp(s, st->prefix, st->prefix_len))
        return ein_fail(err, EIN_EPROTO,
                        "tokenizer stream: the decoded text no longer starts with what was "
                        "already returned (this decoder cannot be streamed)");
    memmove(st->ids.v, st->ids.v + st->read, sizeof(int32_t) * ((size_t)st->ids.n - st->read));
    st->ids.n -= (int)st->read;
    st->read = (size_t)st->ids.n;
    if ((rc = ein_tokenizer_decode(st->tk, st->ids.v, (size_t)st->ids.n, st->skip, &p, &pn, err)) < 0)
        return rc;
    char *t = malloc(n - st->prefix_len + 1);
    if (!t) {
        free(p);
        return ein_fail(err, EIN_ENOMEM, "tokenizer stream: out of memory");
    }
    memcpy(t, s + st->prefix_len, n - st->prefix_len);
    t[n - st->prefix_len] = 0;
    *text = t;
    *len = n - st->prefix_len;
    free(st->prefix);
    st->prefix = p;
    st->prefix_len = pn;
    return 0;
}

static int tk_stream_step(ein_tokstream *st, int final, char **text, size_t *len, ein_error *err)
{
    char *s = NULL;
    size_t n = 0;
    int rc = 0;
    int k = st->ids.n - 1; /* the last id the decoder sees (skipped specials are not seen) */
    while (k >= 0 && st->skip && st->tk->special[st->ids.v[k]]) k--;
    if (!final && k >= 0 && st->tk->dec_bytefallback && tk_is_byte_token(st->tk, st->ids.v[k]))
        goto nothing;
    if ((rc = ein_tokenizer_decode(st->tk, st->ids.v, (size_t)st->ids.n, st->skip, &s, &n, err)) < 0)
        return rc;
    if (n > st->prefix_len && (final || !tk_ends_fffd(s, n))) {
        rc = tk_stream_emit(st, s, n, text, len, err);
        free(s);
        return rc;
    }
    free(s);
nothing:
    if (!(*text = calloc(1, 1))) return ein_fail(err, EIN_ENOMEM, "tokenizer stream: out of memory");
    *len = 0;
    return 0;
}

int ein_tokstream_push(ein_tokstream *st, int32_t id, char **text, size_t *len, ein_error *err)
{
    if (id < 0 || id >= st->tk->nids || !st->tk->tok[id])
        return ein_fail(err, EIN_EINVAL, "tokenizer stream: token id %ld is not in the vocabulary",
                        (long)id);
    if (ein_vec_push(&st->ids, id) < 0)
        return ein_fail(err, EIN_ENOMEM, "tokenizer stream: out of memory");
    int rc = tk_stream_step(st, 0, text, len, err);
    if (rc < 0) st->ids.n--;
    return rc;
}

int ein_tokstream_flush(ein_tokstream *st, char **text, size_t *len, ein_error *err)
{
    return tk_stream_step(st, 1, text, len, err);
}

void ein_tokstream_free(ein_tokstream *st)
{
    if (!st) return;
    ein_vec_free(&st->ids);
    free(st->prefix);
    free(st);
}

/* ---- small accessors ---- */

int32_t ein_tokenizer_vocab_size(const ein_tokenizer *tk) { return tk->nids; }

int32_t ein_tokenizer_token_to_id(const ein_tokenizer *tk, const char *s, size_t len)
{
    int32_t k = tk_smap_find(&tk->addmap, tk->tok, tk->toklen, s, len);
    if (k >= 0) return k;
    return tk_smap_find(&tk->vocab, tk->vstr, tk->vlen, s, len);
}

const char *ein_tokenizer_id_to_token(const ein_tokenizer *tk, int32_t id, size_t *len)
{
    if (id < 0 || id >= tk->nids || !tk->tok[id]) return NULL;
    if (len) *len = tk->toklen[id];
    return tk->tok[id];
}

int ein_tokenizer_is_special(const ein_tokenizer *tk, int32_t id)
{
    return id >= 0 && id < tk->nids && tk->special[id];
}

int32_t ein_tokenizer_bos_id(const ein_tokenizer *tk)
{
    return tk->ntpl_pre ? tk->tpl_pre[0] : -1;
}

void ein_tokenizer_buf_free(void *buf) { free(buf); }

int tk_normalize_dup(const ein_tokenizer *tk, const char *s, size_t n, char **out, size_t *olen,
                     ein_error *err)
{
    tk_buf b = {0};
    int rc = tk_normalize(tk, s, n, &b, err);
    if (rc < 0) {
        free(b.p);
        return rc;
    }
    *out = b.p;
    *olen = b.n;
    return 0;
}
