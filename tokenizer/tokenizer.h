/*
 * tokenizer/tokenizer.h - text <-> token ids, streaming detokenisation, and the token facts
 * the engine and chat templates need. Knows nothing about models or devices.
 *
 * One interface, two implementations behind it (tok_internal.h holds the table of functions):
 * - SentencePiece `.model` files, through the C++ library behind a small C shim (spm.c,
 *   spm_detok.c, spm_shim.cc: the project's one C++ file);
 * - Hugging Face `tokenizer.json` with a BPE model (byte-level BPE as in Llama 3 and Qwen, or
 *   Metaspace/byte-fallback BPE as in Llama 2 and Mistral): hf_*.c, with PCRE2 (JIT) for the
 *   pre-tokenizer regexes and utf8proc for Unicode normalisation. What it supports is listed
 *   in hf.h; anything else in a tokenizer.json is refused at load with PL_ERR_UNSUPPORTED
 *   naming the component and its JSON path, never encoded differently.
 *
 * Invariants
 * - Decoded text is valid UTF-8 and never contains a NUL byte: a NUL that a piece or a byte
 *   token would produce becomes U+FFFD, so every decoded string is a proper C string.
 *   pl_tok_decode and pl_detok agree on this.
 * - A loaded tokenizer is immutable: any number of threads may encode/decode with it at once.
 * - SentencePiece models with a denormalizer (denormalizer_spec with a charsmap) are refused
 *   with PL_ERR_UNSUPPORTED: the streaming detokeniser reproduces the decode piece by piece,
 *   which a whole-text denormalisation pass would break.
 */
#ifndef PL_TOKENIZER_H
#define PL_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pl_tokenizer pl_tokenizer;
typedef struct pl_detok pl_detok;

/* Loads a tokenizer from path, which is one of:
 * - a SentencePiece .model file;
 * - a Hugging Face tokenizer.json file (recognised by its content, a JSON object); its
 *   tokenizer_config.json (and chat_template.jinja) are read from the same folder when present;
 * - a directory holding tokenizer.json (preferred) or tokenizer.model, with
 *   tokenizer_config.json beside it when present;
 * - a GGUF file (recognised by its magic): the vocabulary in its tokenizer.* metadata
 *   (tokenizer.ggml.model "llama" through SentencePiece, "gpt2" through the tokenizer.json
 *   implementation; see gguf_vocab.c), with its chat templates.
 * PL_ERR_IO (cannot open or read, or a directory with neither file; the message names the
 * path), PL_ERR_FORMAT (empty, truncated, not a model, inconsistent: the message names the
 * file and, for JSON, the field), PL_ERR_UNSUPPORTED (a component or option this code does
 * not implement, named with its JSON path), PL_ERR_OUT_OF_MEMORY. On failure *out is
 * untouched and nothing is left to free. */
pl_status pl_tok_load(const char *path, pl_tokenizer **out);
void pl_tok_free(pl_tokenizer *t); /* NULL is a no-op */

/* Adds t's vocabulary to a GGUF file being written as tokenizer.* metadata, the way
 * llama.cpp's converters store it, so that loading the file gives the same ids: a
 * SentencePiece BPE model as "llama" (tokens, scores, token types, add_space_prefix,
 * remove_extra_whitespaces), a byte-level BPE tokenizer.json as "gpt2" (tokens, token types,
 * merges by rank, and tokenizer.ggml.pre naming its pre-tokenizer); BOS/EOS/unknown ids (each
 * unless w has that key already), add_bos/add_eos, and every chat template.
 * PL_ERR_UNSUPPORTED naming what GGUF cannot say (a unigram model, a normalisation map, a
 * pre-tokenizer with no GGUF name, added tokens with lstrip/rstrip), PL_ERR_OUT_OF_MEMORY. */
typedef struct pl_gguf_writer pl_gguf_writer;
pl_status pl_tok_gguf_export(const pl_tokenizer *t, pl_gguf_writer *w);

/* "sentencepiece" or "bpe". */
const char *pl_tok_type(const pl_tokenizer *t);

/* ---- token facts ----------------------------------------------------------------------- */

/* Number of ids: the model vocabulary plus added tokens; ids are 0 .. vocab_size - 1. */
int pl_tok_vocab_size(const pl_tokenizer *t);
/* BOS / EOS ids: tokenizer_config.json's bos_token / eos_token (a string or an object with
 * "content") when given, else the post-processor's leading / trailing special token
 * (tokenizer.json), or the model's <s> / </s> control pieces (SentencePiece); -1 if none. */
int pl_tok_bos_id(const pl_tokenizer *t);
int pl_tok_eos_id(const pl_tokenizer *t);
/* Their strings ("<|begin_of_text|>"); tokenizer-owned, NULL when there is none. */
const char *pl_tok_bos_text(const pl_tokenizer *t);
const char *pl_tok_eos_text(const pl_tokenizer *t);
/* Whether PL_TOK_ADD_SPECIAL puts a BOS first / an EOS last (tokenizer_config.json's
 * add_bos_token / add_eos_token when given, else what the post-processor does). */
bool pl_tok_add_bos(const pl_tokenizer *t);
bool pl_tok_add_eos(const pl_tokenizer *t);
/* The end-of-generation set: the EOS id plus every added (or control) token whose text is a
 * known end-of-turn marker: <|eot_id|>, <|eom_id|>, <|im_end|>, <|end_of_text|>,
 * <|endoftext|>, </s>, <|end|>, <end_of_turn>, <EOT>, _<EOT>, <|return|>, <|call|>,
 * <end_of_utterance> (llama.cpp's list, which also checks tokens of the merged vocabulary;
 * here only added/control tokens count, so plain text spelt like a marker never ends a
 * generation). Sorted, distinct; tokenizer-owned; *out_n may be 0. */
const int32_t *pl_tok_eog_ids(const pl_tokenizer *t, size_t *out_n);
bool pl_tok_is_eog(const pl_tokenizer *t, int32_t id);
/* Special tokens: control pieces (SentencePiece) and added tokens marked "special". They are
 * what PL_TOK_PARSE_SPECIAL finds in text and what PL_TOK_SKIP_SPECIAL drops. */
bool pl_tok_is_special(const pl_tokenizer *t, int32_t id);

/* The piece of id ("▁the", "<0x0A>", "Ġthe", "<|eot_id|>"); tokenizer-owned, valid until
 * pl_tok_free. NULL for an id out of range. */
const char *pl_tok_piece(const pl_tokenizer *t, int32_t id);
/* The id whose piece is exactly token[0..strlen) (added tokens first), or -1. */
int32_t pl_tok_token_id(const pl_tokenizer *t, const char *token);

/* The bytes each token adds to a text it continues (an output after its prompt): the
 * streaming decode of the token before it is made valid UTF-8, so a byte token gives its raw
 * byte and a SentencePiece "▁" a space. Special, control and unknown tokens give none. Token
 * id's bytes are (*out_bytes)[(*out_offsets)[id] .. (*out_offsets)[id + 1]); both pl_malloc'd,
 * the caller frees them (pl_free). PL_ERR_OUT_OF_MEMORY. The grammar engine matches tokens by
 * these bytes (tokenizer/tok_bytes.c says where they differ from a decode). */
pl_status pl_tok_token_bytes(const pl_tokenizer *t, char **out_bytes, uint32_t **out_offsets);

/* Chat templates from tokenizer_config.json ("chat_template": a string, which is named
 * "default", or a list of {"name", "template"}), or chat_template.jinja beside it. name NULL
 * means "default". Tokenizer-owned text, NULL when there is no such template. */
const char *pl_tok_chat_template(const pl_tokenizer *t, const char *name);
size_t pl_tok_chat_template_count(const pl_tokenizer *t);
const char *pl_tok_chat_template_name(const pl_tokenizer *t, size_t i); /* NULL past the end */

/* ---- encode and decode ----------------------------------------------------------------- */

enum {
    /* encode: the special tokens of the tokenizer's rule (BOS/EOS: pl_tok_add_bos/eos). It
     * is 1, so a bool "add_bos" argument keeps its meaning. */
    PL_TOK_ADD_SPECIAL = 1u << 0,
    /* encode: special-token strings in the text become their ids, as Hugging Face's default
     * encode does (which splits every added token out of the text). Without it they are
     * plain text (added tokens not marked special are still matched, as in Hugging Face). */
    PL_TOK_PARSE_SPECIAL = 1u << 1,
    /* decode, detok: special tokens decode to nothing (SentencePiece control pieces never
     * decode to anything). */
    PL_TOK_SKIP_SPECIAL = 1u << 2,
    /* detok: the ids continue a prompt (see pl_detok_create). */
    PL_TOK_AFTER_PROMPT = 1u << 3,
};

/* Encodes text[0..len) (len bytes, UTF-8; NUL bytes and invalid UTF-8 are refused with
 * PL_ERR_INVALID_ARGUMENT and a message giving the byte offset) with flags PL_TOK_ADD_SPECIAL
 * and PL_TOK_PARSE_SPECIAL. *out_ids (*out_n entries, possibly 0) is allocated with pl_malloc
 * and owned by the caller (pl_free). Also PL_ERR_OUT_OF_MEMORY, and PL_ERR_FORMAT if a damaged
 * model fails on valid text (a pre-tokenizer regex past its match limit). On failure the
 * outputs are untouched. Linear in the text for the supported tokenizers: merging uses a heap
 * over a linked list of symbols, so a 1 MB word costs O(n log n). */
pl_status pl_tok_encode(const pl_tokenizer *t, const char *text, size_t len, unsigned flags,
                        int32_t **out_ids, size_t *out_n);

/* Decodes ids[0..n) into a NUL-terminated string (pl_malloc; caller frees with pl_free);
 * flags: PL_TOK_SKIP_SPECIAL.
 * - SentencePiece: the library's rules: the first "▁" of the text is dropped (per the model's
 *   add_dummy_prefix / remove_extra_whitespaces), byte pieces are joined into UTF-8 characters
 *   and each byte of an invalid sequence becomes U+FFFD; control ids decode to nothing, <unk>
 *   to the model's unk surface (" \u2047 " by default).
 * - tokenizer.json: the decoder chain as Hugging Face's tokenizers library runs it (pieces
 *   joined with " " when there is none); invalid UTF-8 from byte tokens becomes one U+FFFD
 *   per maximal invalid subsequence (the Unicode/WHATWG rule of from_utf8_lossy and
 *   TextDecoder; for ByteFallback runs the Rust library writes one U+FFFD per byte of a run
 *   holding any invalid byte, which cannot be streamed: see hf.h). transformers' optional
 *   clean_up_tokenization_spaces pass is not applied.
 * Ids out of range are PL_ERR_INVALID_ARGUMENT (the message names the index). */
pl_status pl_tok_decode(const pl_tokenizer *t, const int32_t *ids, size_t n, unsigned flags,
                        char **out_text);

/* ---- streaming detokenisation ---------------------------------------------------------- */

/* Turns a growing list of output ids into text pieces that concatenate to exactly the full
 * decode, never emitting a broken UTF-8 sequence: bytes of an unfinished character (byte
 * tokens, or byte-level pieces that split an emoji or a CJK character) are held back until
 * the character is complete (or proven invalid, then U+FFFD as decode does). A push costs
 * O(length of the piece): earlier ids are never decoded again.
 *
 * What "the full decode" is (flags: PL_TOK_AFTER_PROMPT, PL_TOK_SKIP_SPECIAL):
 * - without PL_TOK_AFTER_PROMPT: pl_tok_decode(ids pushed so far, flags).
 * - with it (engine outputs): the ids continue a prompt, so rules for the start of the text
 *   (SentencePiece's dropped leading "▁", a Strip or Metaspace decoder's first-token rule)
 *   do not apply. The pieces concatenate to decode(P + ids) minus decode(P) for any prompt P
 *   whose decode is non-empty and does not end inside an incomplete byte sequence (true of
 *   every prompt made by pl_tok_encode from valid text). This is vLLM's prefix-offset
 *   result, computed without decoding the prompt.
 * End of stream: what is still held back (the last bytes of an unfinished character; for a
 * decoder that strips trailing characters, those) is rendered by pl_detok_text as the decode
 * of everything pushed would render it, so the final text is pl_detok_text, and its part past
 * the pushed text is the tail to emit when a request finishes.
 *
 * The state is private to the implementation. PL_ERR_OUT_OF_MEMORY; on failure *out is
 * untouched. */
pl_status pl_detok_create(const pl_tokenizer *t, unsigned flags, pl_detok **out);
void pl_detok_free(pl_detok *d); /* NULL is a no-op */

/* Appends id and sets *out_new / *out_len to the newly completed text (*out_len bytes,
 * detok-owned, valid until the next push or free; may be empty; followed by a NUL until
 * pl_detok_text renders held-back bytes after it). PL_ERR_INVALID_ARGUMENT for an id out of
 * range, PL_ERR_OUT_OF_MEMORY; on failure the state is unchanged and the outputs are
 * untouched. */
pl_status pl_detok_push(pl_detok *d, int32_t id, const char **out_new, size_t *out_len);

/* All text so far, including what is still held back rendered as the end of the text (an
 * incomplete sequence at the very end as U+FFFD, exactly as pl_tok_decode of the same ids);
 * detok-owned, NUL-terminated, valid until the next push or free. Does not change what later
 * pushes return, and never allocates (out_len may be NULL). */
const char *pl_detok_text(pl_detok *d, size_t *out_len);

#ifdef __cplusplus
}
#endif
#endif
