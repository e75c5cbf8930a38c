/*
 * attn_tokenizer.h: byte-level BPE tokenizers (GPT-2, Llama 3, Qwen2,
 * SmolLM2), from a Hugging Face tokenizer.json or from the vocabulary,
 * merges and token types that a GGUF file's metadata carries.
 *
 * Encoding follows Hugging Face tokenizers:
 *  0. the text is normalized to NFC when tokenizer.json asks for it
 *     (Qwen2 does), added tokens left as they are;
 *  1. added tokens (the tokenizer's special tokens such as <|im_start|>,
 *     and its other added tokens) are found in the text first, leftmost
 *     and then longest; each is its id. Special ones only when
 *     ATTN_BPE_PARSE_SPECIAL is given (otherwise they are plain text).
 *  2. the text between them is cut into words by the pre-tokenizer's
 *     pattern (matched by hand over Unicode category tables, as the
 *     pattern's \p{L}, \p{N} and \s read them):
 *       "gpt2"      's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+|
 *                   ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *       "smollm"    the same after every digit (\p{N}) is cut out alone
 *       "llama-bpe" (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|
 *                   \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|
 *                   \s+(?!\S)|\s+
 *       "qwen2"     the same with \p{N} one digit at a time
 *  3. each word's UTF-8 bytes start as one symbol a byte (the ByteLevel
 *     alphabet), and the adjacent pair of lowest merge rank is merged,
 *     leftmost first, until no pair has a merge. With ignore_merges (Llama
 *     3) a word that is itself in the vocabulary is that one token.
 *  4. with ATTN_BPE_ADD_SPECIAL, the post-processor's tokens (a BOS where
 *     the tokenizer says so) go around the result.
 * Text that is not UTF-8 is encoded too: each byte that does not start a
 * valid character is a character of its own ("other" to the patterns).
 *
 * Decoding maps each token back to its bytes (the ByteLevel decoder: a
 * token whose characters are all in the byte alphabet is those bytes,
 * any other token is its own UTF-8) and reads the bytes as UTF-8, each
 * invalid sequence (its longest valid start) becoming U+FFFD, as Rust's
 * String::from_utf8_lossy and Python's errors="replace" do. The streaming
 * decoder holds the bytes of an unfinished character until the next token
 * completes it, so that text can be printed token by token.
 *
 * Refused, with a message naming what: other models (WordPiece, Unigram,
 * WordLevel), BPE with byte fallback, dropout or subword affixes
 * (sentencepiece-style), normalizers other than NFC, and pre-tokenizers,
 * patterns and decoders other than the ones above.
 *
 * Example: a tiny tokenizer in the form GGUF metadata gives.
 *
 *     const char *tokens[] = {"a", "b", "ab", "Ġ", "Ġab", "<|end|>"};
 *     const int32_t types[] = {1, 1, 1, 1, 1, 3};    // 3: control (special)
 *     const char *merges[] = {"a b", "Ġ ab"};
 *     attn_bpe_vocab v;
 *     attn_bpe_vocab_init(&v);
 *     v.n_tokens = 6;
 *     v.tokens = tokens;
 *     v.token_types = types;
 *     v.n_merges = 2;
 *     v.merges = merges;
 *     v.pre = "gpt2";
 *     attn_bpe *t;
 *     if (attn_bpe_from_vocab(&v, &t)) {
 *         fprintf(stderr, "%s\n", attn_last_error());
 *         return 1;
 *     }
 *     int32_t ids[8];
 *     int64_t n;
 *     attn_bpe_encode(t, "ab ab<|end|>", 12, ATTN_BPE_PARSE_SPECIAL, ids, 8,
 *                     &n);
 *     printf("%lld ids: %d %d %d\n", (long long)n, ids[0], ids[1], ids[2]);
 *     char text[32];
 *     size_t len;
 *     attn_bpe_decode(t, ids, n, 0, text, sizeof text, &len);
 *     printf("%s\n", text);                       // ab ab<|end|>
 *     attn_bpe_free(t);
 *
 * Conventions are those of attn.h: functions return attn_status with a
 * message in attn_last_error(); the caller owns what it passes. A
 * tokenizer is read-only once made: one may serve many threads.
 */
#ifndef ATTN_TOKENIZER_H
#define ATTN_TOKENIZER_H

#include "attn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct attn_bpe attn_bpe;

/* Flags of attn_bpe_encode. */
#define ATTN_BPE_PARSE_SPECIAL 1u /* special tokens in the text are theirs */
#define ATTN_BPE_ADD_SPECIAL 2u   /* the post-processor's BOS / EOS       */

/* Reads a Hugging Face tokenizer.json (at most 128 MiB). */
ATTN_API attn_status attn_bpe_load(const char *path, attn_bpe **out);
/* The same from len bytes of JSON at json; label names them in messages. */
ATTN_API attn_status attn_bpe_parse(const char *json, size_t len,
                                    const char *label, attn_bpe **out);

/* The form of a GGUF file's tokenizer metadata (tokenizer.ggml.*). */
typedef struct {
    int64_t n_tokens;
    const char *const *tokens;  /* tokens[id], byte-level as in the vocab */
    const int32_t *token_types; /* NULL (all normal) or n_tokens of: 1
                                   normal, 2 unknown, 3 control (special),
                                   4 user-defined (added), 5 unused, 6 byte */
    int64_t n_merges;
    const char *const *merges; /* "left right", rank = index           */
    const char *pre;           /* "gpt2", "smollm", "llama-bpe", "qwen2"  */
    int64_t bos_id;            /* -1: none                                */
    int64_t eos_id;            /* -1: none                                */
    int add_bos;               /* ATTN_BPE_ADD_SPECIAL puts bos_id first  */
    int add_eos;               /* ... and eos_id last                      */
    int ignore_merges;         /* 1 for "llama-bpe" by default (see init) */
} attn_bpe_vocab;

/* Zeros, ids -1, ignore_merges -1 (meaning: 1 for "llama-bpe", as Llama
 * 3's tokenizer.json says, else 0). */
ATTN_API void attn_bpe_vocab_init(attn_bpe_vocab *v);
/* Builds a tokenizer from v (copied: v may go after). Control tokens are
 * special added tokens, user-defined ones plain added tokens, an unknown
 * one is the unknown token (for bytes missing from the vocabulary). */
ATTN_API attn_status attn_bpe_from_vocab(const attn_bpe_vocab *v,
                                         attn_bpe **out);
ATTN_API void attn_bpe_free(attn_bpe *t);

/* Ids run over [0, vocab_size) (0 for NULL); an id may have no token. */
ATTN_API int64_t attn_bpe_vocab_size(const attn_bpe *t);
/* The token of id as the vocabulary writes it (owned by t), or NULL. */
ATTN_API const char *attn_bpe_token(const attn_bpe *t, int64_t id);
/* 1 if id is a special token (skipped by decoding when asked), else 0. */
ATTN_API int attn_bpe_is_special(const attn_bpe *t, int64_t id);
/* The id of token (added tokens first); ATTN_E_INVALID when absent. */
ATTN_API attn_status attn_bpe_id(const attn_bpe *t, const char *token,
                                 int32_t *id);

/* The ids of len bytes of text (flags: ATTN_BPE_*): at most cap written to
 * ids (NULL with cap 0 counts), *n = how many there are: never more than
 * len + 4 (2 * len + 4 with NFC, which may lengthen text). */
ATTN_API attn_status attn_bpe_encode(const attn_bpe *t, const char *text,
                                     size_t len, unsigned flags, int32_t *ids,
                                     int64_t cap, int64_t *n);

/* The text of n ids (skip_special: leave special tokens out): *len = its
 * length in bytes; when cap > *len, out holds it with a NUL after;
 * otherwise out is untouched (call with cap 0 for the length). An id
 * outside [0, vocab_size) is ATTN_E_INVALID naming it; an id without a
 * token decodes to nothing. */
ATTN_API attn_status attn_bpe_decode(const attn_bpe *t, const int32_t *ids,
                                     int64_t n, int skip_special, char *out,
                                     size_t cap, size_t *len);

/* Streaming decoder state: the bytes of a character not yet complete. */
typedef struct {
    unsigned char held[4];
    int n_held;
} attn_bpe_stream;

ATTN_API void attn_bpe_stream_init(attn_bpe_stream *s);
/* The most bytes attn_bpe_stream_next writes for one id. */
ATTN_API size_t attn_bpe_stream_max(const attn_bpe *t);
/* Text completed by one more id: *len bytes at out (cap must be at least
 * attn_bpe_stream_max(t); no NUL is written). The concatenated pieces of
 * a stream, ended by attn_bpe_stream_end, equal attn_bpe_decode. */
ATTN_API attn_status attn_bpe_stream_next(const attn_bpe *t, attn_bpe_stream *s,
                                          int32_t id, int skip_special,
                                          char *out, size_t cap, size_t *len);
/* Ends the stream: an unfinished character left is U+FFFD (3 bytes at
 * out, cap >= 3), and s is ready for a new stream. */
ATTN_API attn_status attn_bpe_stream_end(attn_bpe_stream *s, char *out,
                                         size_t cap, size_t *len);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_TOKENIZER_H */
