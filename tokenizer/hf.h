/*
 * tokenizer/hf.h - the Hugging Face tokenizer.json implementation behind tokenizer.h: a BPE
 * model with the normalizers, pre-tokenizers, added tokens, post-processors and decoders that
 * the tokenizers of Llama 2/3, Mistral and Qwen2/2.5/3 use. Internal to tokenizer/.
 *
 * Supported (everything else is PL_ERR_UNSUPPORTED at load, naming the JSON path):
 *   model         BPE: vocab, merges as "a b" strings or ["a", "b"] pairs, unk_token,
 *                 fuse_unk, byte_fallback, ignore_merges; dropout null/0;
 *                 continuing_subword_prefix / end_of_word_suffix null or "".
 *   normalizer    NFC, NFD, NFKC, NFKD (utf8proc), Lowercase, Prepend, Replace (String or
 *                 Regex pattern), Sequence.
 *   pre_tokenizer Split (String or Regex pattern, PCRE2 with JIT; behaviors Removed,
 *                 Isolated, MergedWithPrevious, MergedWithNext, Contiguous; invert), ByteLevel
 *                 (add_prefix_space, use_regex with the GPT-2 pattern; the last step),
 *                 Metaspace (replacement, prepend_scheme always/first/never, split, legacy
 *                 add_prefix_space), Digits (individual_digits), Sequence.
 *   added_tokens  special or not; lstrip, rstrip, single_word, normalized; matched
 *                 leftmost-longest before the model, as AddedVocabulary does (non-normalized
 *                 ones on the raw text, normalized ones on each normalized piece).
 *   post_processor TemplateProcessing (the single-sequence template), ByteLevel, Sequence;
 *                 for tokenizer_class Llama/CodeLlama/Gemma with a tokenizer_config.json, the
 *                 rule transformers rebuilds from add_bos_token / add_eos_token.
 *   decoder       ByteLevel (first), Metaspace, ByteFallback (before any Fuse/ByteLevel),
 *                 Fuse, Strip (stop <= 16), Replace (String pattern of at most 64 bytes),
 *                 Sequence; none (pieces joined with " ").
 *   truncation / padding must be null.
 *
 * Semantics follow the Rust `tokenizers` library (what transformers runs), where it and the
 * oracle of the tests (@lenml/tokenizers, a port of transformers.js) differ:
 * - Split regexes run in PCRE2 with Unicode properties, where \s is Unicode white space
 *   (U+0085 NEL is, U+FEFF is not), as in Oniguruma; JavaScript's \s is the other way round
 *   for those two, so "x \u0085y" splits differently under transformers.js.
 * - Digits splits on every numeric character (\p{N}), not only ASCII digits.
 * - Lowercase maps code points one at a time (no final-sigma rule).
 * - The Metaspace decoder drops every replacement character of the first token (when the
 *   prepend scheme is not "never"), not only a leading one.
 * - ByteFallback runs that hold invalid UTF-8 become one U+FFFD per maximal invalid
 *   subsequence (like TextDecoder) instead of one per byte of the whole run: the Rust rule
 *   needs the whole run before emitting anything, which a stream cannot wait for.
 * - A model without unk_token drops characters it cannot encode (as Rust does).
 */
#ifndef PL_TOKENIZER_HF_H
#define PL_TOKENIZER_HF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer/tok_internal.h"
#include "tokenizer/tok_trie.h"

#define PL_HF_MAX_STEPS 16         /* normalizers / pre-tokenizers / decoder stages, flattened */
#define PL_HF_MAX_DEPTH 8          /* nested Sequence levels */
#define PL_HF_MAX_ADDED_BYTES 1024 /* longest added token */
#define PL_HF_MAX_PIECE_BYTES 4096 /* longest vocabulary token */
#define PL_HF_MAX_REPLACE 64       /* longest Replace decoder pattern / content */
#define PL_HF_MAX_STRIP_STOP 16

// ---- regexes ---------------------------------------------------------------------------------

typedef struct pl_tok_regex {
    pcre2_code *code;
    bool jit;
} pl_tok_regex;

/* What one encode call needs to run regexes (thread-local to the call). */
typedef struct pl_tok_matcher {
    pcre2_general_context *gctx;
    pcre2_match_context *mctx;
    pcre2_match_data *md;
    pcre2_jit_stack *stack;
} pl_tok_matcher;

/* Compiles pattern[0..len) (literal: a String pattern, matched as is) with UTF and Unicode
 * properties. PL_ERR_FORMAT naming file and jpath with PCRE2's message and offset. */
pl_status pl_tok_regex_compile(pl_tok_regex *re, const char *pattern, size_t len, bool literal,
                               const char *file, const char *jpath);
void pl_tok_regex_free(pl_tok_regex *re);
pl_status pl_tok_matcher_init(pl_tok_matcher *m);
void pl_tok_matcher_free(pl_tok_matcher *m);
/* Iterates the matches of a regex over one subject, left to right and non-overlapping; an
 * empty match right where the previous one ended is skipped (Oniguruma's find_iter rule).
 * Start with a zeroed iterator. */
typedef struct pl_tok_regex_iter {
    size_t pos, last_end;
    bool started;
} pl_tok_regex_iter;
/* The next match: *found false when there is none. PL_ERR_FORMAT when the match limit is hit
 * (a pathological pattern), PL_ERR_OUT_OF_MEMORY. */
pl_status pl_tok_regex_next(const pl_tok_regex *re, pl_tok_matcher *m, const char *s, size_t len,
                            pl_tok_regex_iter *it, size_t *out_start, size_t *out_end,
                            bool *found);

// ---- components ------------------------------------------------------------------------------

typedef enum {
    PL_HF_NFC, PL_HF_NFD, PL_HF_NFKC, PL_HF_NFKD, PL_HF_LOWERCASE, PL_HF_PREPEND,
    PL_HF_REPLACE_STR, PL_HF_REPLACE_RE,
} pl_hf_norm_kind;

typedef struct pl_hf_norm {
    pl_hf_norm_kind kind;
    char *str;           /* Prepend: the prefix; Replace: the content */
    size_t str_len;
    char *pat;           /* Replace with a String pattern */
    size_t pat_len;
    pl_tok_regex re;     /* Replace with a Regex pattern */
} pl_hf_norm;

typedef enum {
    PL_HF_REMOVED, PL_HF_ISOLATED, PL_HF_MERGED_PREV, PL_HF_MERGED_NEXT, PL_HF_CONTIGUOUS,
} pl_hf_behavior;

typedef enum { PL_HF_SPLIT, PL_HF_BYTE_LEVEL, PL_HF_METASPACE, PL_HF_DIGITS } pl_hf_pre_kind;
typedef enum { PL_HF_PREPEND_ALWAYS, PL_HF_PREPEND_FIRST, PL_HF_PREPEND_NEVER } pl_hf_prepend;

typedef struct pl_hf_pre {
    pl_hf_pre_kind kind;
    char *pattern;           /* Split: the pattern's text (for describing the tokenizer) */
    size_t pattern_len;
    bool literal;            /* Split: a String pattern */
    pl_tok_regex re;         /* Split; ByteLevel with use_regex (the GPT-2 pattern) */
    pl_hf_behavior behavior; /* Split */
    bool invert;             /* Split */
    bool add_prefix_space;   /* ByteLevel */
    bool use_regex;          /* ByteLevel */
    char repl[4];            /* Metaspace: the replacement character (UTF-8) */
    int repl_len;
    pl_hf_prepend prepend;   /* Metaspace */
    bool split;              /* Metaspace */
    bool individual;         /* Digits */
} pl_hf_pre;

typedef enum {
    PL_HF_DEC_REPLACE, PL_HF_DEC_BYTE_FALLBACK, PL_HF_DEC_FUSE, PL_HF_DEC_STRIP,
    PL_HF_DEC_METASPACE, PL_HF_DEC_BYTE_LEVEL, PL_HF_DEC_JOIN_SPACE,
} pl_hf_dec_kind;

typedef struct pl_hf_dec {
    pl_hf_dec_kind kind;
    char pat[PL_HF_MAX_REPLACE], content[PL_HF_MAX_REPLACE]; /* Replace */
    size_t pat_len, content_len;
    char ch[4];              /* Strip: the content char; Metaspace: the replacement (UTF-8) */
    int ch_len;
    uint32_t start, stop;    /* Strip */
    bool drop_first;         /* Metaspace: prepend_scheme is not "never" */
} pl_hf_dec;

typedef struct pl_hf_added {
    int32_t id;
    const char *content;     /* points into the impl's string arena */
    size_t len;
    char *norm;              /* normalized content (normalized tokens), pl_malloc'd */
    size_t norm_len;
    bool special, lstrip, rstrip, single_word, normalized;
} pl_hf_added;

/* One merge: (left, right) -> (rank, merged id). */
typedef struct pl_hf_pair {
    uint64_t key;            /* (uint64)left << 32 | right; UINT64_MAX = empty slot */
    uint32_t rank;
    int32_t id;
} pl_hf_pair;

typedef struct pl_hf_model {
    int n_vocab;             /* ids of the model's vocabulary: 0 .. n_vocab - 1 */
    bool byte_level;         /* the pre-tokenizer ends with ByteLevel: the model reads bytes */
    bool ignore_merges, byte_fallback, fuse_unk;
    int32_t unk_id;          /* -1 when none */
    int32_t byte_id[256];    /* byte-level: the id of each byte's one-character token, or -1 */
    char byte_char[256][3];  /* byte-level: each byte's character (UTF-8, 2 bytes or 1) */
    uint8_t byte_char_len[256];
    int32_t fb_id[256];      /* byte_fallback: the id of "<0xXX>", or -1 */
    pl_tok_strmap vocab;     /* the model's input form of each token -> id (raw bytes when
                                byte_level, else the token itself) */
    char *keys;              /* byte-level keys' storage */
    pl_hf_pair *pairs;       /* (pair_mask + 1) open addressing */
    size_t pair_mask;
} pl_hf_model;

typedef struct pl_hf {
    char *strings;           /* every vocabulary and added token, NUL-terminated */
    pl_hf_norm norm[PL_HF_MAX_STEPS];
    int n_norm;
    pl_hf_pre pre[PL_HF_MAX_STEPS];
    int n_pre;
    pl_hf_model model;
    pl_hf_added *added;      /* (n_added) */
    size_t n_added;
    pl_tok_trie trie_raw;    /* non-normalized added tokens -> index into added */
    pl_tok_trie trie_norm;   /* normalized ones, by normalized content */
    int32_t *prefix, *suffix; /* the post-processor's ids around the sequence */
    size_t n_prefix, n_suffix;
    pl_hf_dec dec[PL_HF_MAX_STEPS];
    int n_dec;
} pl_hf;

/* Char -> byte of the byte-level alphabet (the inverse of GPT-2's bytes_to_unicode); -1 for
 * a character outside it. */
int pl_hf_byte_of_char(uint32_t cp);
/* The byte-level character of byte b, UTF-8 into out (room for 2); returns its length. */
int pl_hf_char_of_byte(uint8_t b, char *out);

/* The GPT-2 pattern ByteLevel uses when use_regex is true. */
extern const char PL_HF_GPT2_PATTERN[];

/* hf_load.c */
void pl_hf_free(pl_hf *h);

/* A byte-level BPE tokenizer given as parts instead of a tokenizer.json (GGUF's "gpt2"
 * vocabularies): pl_tok_hf_open_parts builds the same pl_hf the JSON loader does (byte-level
 * pre-tokenization after the regex splits, merges by rank, added tokens, a ByteLevel decoder),
 * so encoding and decoding are this implementation's. Tokens are valid UTF-8 without NUL
 * (the caller checks); key names are only for messages. */
typedef struct pl_hf_parts {
    size_t n_tokens;
    const char *const *token;      /* (n_tokens) token strings, byte-level alphabet */
    const size_t *token_len;
    const uint8_t *added;          /* (n_tokens) 0 vocabulary, 1 added, 2 added and special */
    size_t n_model;                /* ids below it form the BPE model's vocabulary */
    size_t n_merges;
    const char *const *merge;      /* (n_merges) "a b", in rank order */
    const size_t *merge_len;
    const char *const *regex;      /* (n_regex) Split (Isolated) patterns, in order */
    size_t n_regex;
    bool nfc;                      /* an NFC normalizer first */
    bool ignore_merges;
    int32_t bos_id, eos_id;        /* -1 when none */
    bool add_bos, add_eos;
    const char *tokens_key, *merges_key, *pre_key; /* for messages */
} pl_hf_parts;
pl_status pl_tok_hf_open_parts(pl_tokenizer *t, const char *file, const pl_hf_parts *parts);

/* hf_normalize.c: applies the normalizer chain to s[0..len), result in out (cleared first). */
pl_status pl_hf_normalize(const pl_hf *h, pl_tok_matcher *m, const char *s, size_t len,
                          pl_tok_buf *out, pl_tok_buf *scratch);

/* hf_bpe.c: the model on one pre-tokenized word; ids appended to out. */
typedef struct pl_hf_bpe_scratch {
    void *syms;
    size_t syms_cap;
    void *heap;
    size_t heap_cap;
} pl_hf_bpe_scratch;
pl_status pl_hf_bpe_word(const pl_hf_model *m, const char *word, size_t len,
                         pl_hf_bpe_scratch *sc, pl_tok_ids *out);
void pl_hf_bpe_scratch_free(pl_hf_bpe_scratch *sc);
pl_status pl_hf_pairs_put(pl_hf_model *m, int32_t left, int32_t right, uint32_t rank, int32_t id);
const pl_hf_pair *pl_hf_pairs_get(const pl_hf_model *m, int32_t left, int32_t right);

/* hf_encode.c / hf_decode.c: the implementation's entries in the ops table. */
pl_status pl_hf_encode(const pl_tokenizer *t, const char *text, size_t len, unsigned flags,
                       pl_tok_ids *out);
pl_status pl_hf_decode(const pl_tokenizer *t, const int32_t *ids, size_t n, unsigned flags,
                       char **out_text);
pl_status pl_hf_detok_create(const pl_tokenizer *t, unsigned flags, pl_detok **out);
void pl_hf_detok_free(pl_detok *d);
pl_status pl_hf_detok_push(pl_detok *d, int32_t id, const char **out_new, size_t *out_len);
const char *pl_hf_detok_text(pl_detok *d, size_t *out_len);

/* Appends b[0..n) to out as UTF-8 with each maximal invalid subsequence as one U+FFFD; a
 * trailing incomplete sequence too (the whole text ends there). */
pl_status pl_hf_lossy_append(pl_tok_buf *out, const unsigned char *b, size_t n);

#endif
