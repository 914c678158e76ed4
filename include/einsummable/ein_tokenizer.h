/* einsummable/ein_tokenizer.h — Hugging Face tokenizer.json: text to token
 * ids and back (issue 37).
 *
 * What is implemented (docs/tokenizer.md): the BPE model (byte-level as in
 * GPT-2 / Llama 3, SentencePiece-style with byte_fallback and fuse_unk as in
 * Llama 2 / Mistral, merges as "a b" strings or [a, b] pairs, ignore_merges);
 * added and special tokens with their lstrip/rstrip/normalized flags; the
 * normalizers Sequence, Prepend, Replace, Strip, NFC, NFD, NFKC, NFKD
 * (utf8proc); the pre-tokenizers
 * Sequence, Split (Regex through PCRE2 with UTF and UCP, or String; every
 * behavior, invert), ByteLevel, Metaspace; the post-processors
 * TemplateProcessing, ByteLevel and Sequence; the decoders ByteLevel,
 * Metaspace, Replace, ByteFallback, Fuse, Strip and Sequence. Anything else
 * in the file (another model type, a normalizer such as Lowercase, a BPE dropout,
 * a single_word added token, ...) is refused by name when loading.
 *
 * Ownership and lifetime: ein_tokenizer_load*() allocate a tokenizer freed
 * with ein_tokenizer_free(); once loaded it is never changed, so one
 * tokenizer may be used by any number of threads at once. A stream
 * (ein_tokstream) belongs to one thread at a time and must be freed before
 * its tokenizer. Buffers returned through `**out` arguments (ids, text) are
 * malloc'd and freed by the caller with ein_tokenizer_buf_free() (free()).
 *
 * Failure: functions returning int return 0 or a negative EIN_E* code and
 * fill `err`: EIN_EIO (cannot read the file), EIN_EPARSE (malformed JSON, a
 * missing or mistyped field, a merge of tokens not in the vocabulary, a
 * regex PCRE2 rejects), EIN_EUNSUPPORTED (a component named but not
 * implemented), EIN_EINVAL (text that is not UTF-8, an id out of range),
 * EIN_ENOMEM. On failure no `*out` is written. */
#ifndef EINSUMMABLE_TOKENIZER_H
#define EINSUMMABLE_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "ein_types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ein_tokenizer ein_tokenizer;
typedef struct ein_tokstream ein_tokstream;

/* Load a tokenizer.json file (at most 256 MiB) or the same JSON in memory. */
int ein_tokenizer_load(const char *path, ein_tokenizer **out, ein_error *err);
int ein_tokenizer_load_json(const char *json, size_t len, ein_tokenizer **out,
                            ein_error *err);
void ein_tokenizer_free(ein_tokenizer *tk);

/* Encode `len` bytes of UTF-8 `text` (NUL bytes allowed). add_special
 * applies the post-processor's template (the bos of Llama). *ids (freed
 * with ein_tokenizer_buf_free) holds *n ids; an empty result is a valid
 * non-NULL buffer. */
int ein_tokenizer_encode(const ein_tokenizer *tk, const char *text, size_t len,
                         int add_special, int32_t **ids, size_t *n, ein_error *err);

/* Decode `n` ids to UTF-8 text (*text NUL-terminated, *len without the NUL;
 * invalid byte sequences become U+FFFD as the decoder says). An id that is
 * negative, at least ein_tokenizer_vocab_size() or unassigned is EIN_EINVAL.
 * skip_special leaves out the special added tokens. */
int ein_tokenizer_decode(const ein_tokenizer *tk, const int32_t *ids, size_t n,
                         int skip_special, char **text, size_t *len, ein_error *err);

/* One past the largest id of the vocabulary and the added tokens. */
int32_t ein_tokenizer_vocab_size(const ein_tokenizer *tk);
/* The id of token `s` (`len` bytes; added tokens first, then the model's
 * vocabulary), or -1. */
int32_t ein_tokenizer_token_to_id(const ein_tokenizer *tk, const char *s, size_t len);
/* The token of `id` (owned by the tokenizer, *len its bytes), or NULL. */
const char *ein_tokenizer_id_to_token(const ein_tokenizer *tk, int32_t id, size_t *len);
/* 1 if `id` is a special added token, else 0. */
int ein_tokenizer_is_special(const ein_tokenizer *tk, int32_t id);
/* The first special token the post-processor puts before the text (bos),
 * or -1 where it puts none. */
int32_t ein_tokenizer_bos_id(const ein_tokenizer *tk);

void ein_tokenizer_buf_free(void *buf);

/* Streaming decode, one id at a time: ein_tokstream_push() returns in
 * *text (NUL-terminated, freed by the caller, possibly "") only text that
 * is complete: nothing that ends in half a UTF-8 character or in a byte
 * sequence later ids may still complete. ein_tokstream_flush() returns what
 * is held back (as U+FFFD where still invalid). The pushes' texts and the
 * flush's, joined, are the decode of all ids pushed. */
int ein_tokstream_new(const ein_tokenizer *tk, int skip_special, ein_tokstream **out,
                      ein_error *err);
int ein_tokstream_push(ein_tokstream *st, int32_t id, char **text, size_t *len,
                       ein_error *err);
int ein_tokstream_flush(ein_tokstream *st, char **text, size_t *len, ein_error *err);
void ein_tokstream_free(ein_tokstream *st);

#ifdef __cplusplus
}
#endif

#endif
