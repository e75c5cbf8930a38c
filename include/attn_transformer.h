/*
 * attn_transformer.h: the whole Transformer of libattn: the
 * decoder layer stack, encoder-decoder and decoder-only models, the
 * generation tasks (date normalization, reverse, sort, add), their trainer
 * with checkpoints, and generation (greedy, sampling, beam search) with a
 * per-layer key/value cache.
 *
 * Conventions are those of attn.h's layers: row-major batch-first f32
 * activations owned by the caller, parameters in one block with named
 * slices, forward saving what backward needs in a caller workspace,
 * backward ADDING into gradients, every function returning attn_status
 * with attn_last_error() naming the argument and the numbers.
 */
#ifndef ATTN_TRANSFORMER_H
#define ATTN_TRANSFORMER_H

#include "attn.h"
#include "attn_cache.h"  /* generation steps through the KV cache */
#include "attn_layers.h" /* the encoder and layer configs */
#include "attn_train.h"  /* tasks, the RNG, AdamW and training stats */

#ifdef __cplusplus
extern "C" {
#endif

/* ===================================================================== */
/* Decoder stack                                                         */
/* ===================================================================== */
/*
 * One layer, post-norm (norm_first = 0, the tutorials, PyTorch default):
 *   x = LN1(x + drop(SA(x)))        masked (causal) self-attention
 *   x = LN2(x + drop(CA(x, mem)))   cross-attention (if cross)
 *   x = LN3(x + drop(FFN(x)))
 * pre-norm (norm_first = 1): x = x + drop(SUB(LN_k(x))) for each sublayer.
 * SA is multi-head attention under a causal mask. CA reads the memory
 * (the encoder's output, (B, Ls, E)) as keys and values: multi-head dot
 * product (cross_attention = ATTN_ATTENTION_DOT) or additive, Bahdanau's
 * cross-attention (out = W_o AddAttn(q = x, k = v = mem) + b_o). Keys of
 * the memory past memory_lengths[b] are masked (key padding). FFN is the
 * encoder's. Dropout of SA and CA weights, of each sublayer's output and
 * of the FFN hidden layer use opts->dropout_p with their own streams.
 * cross = 0 gives the decoder-only stack (no CA, no LN of it).
 */
typedef struct {
    int64_t num_layers;      /* M >= 1                                   */
    int64_t d_model;         /* E                                        */
    int64_t num_heads;       /* H of SA (and of CA when dot)             */
    int64_t num_kv_heads;    /* 0 means H                                */
    int64_t dim_feedforward; /* F                                        */
    int cross;               /* 1: layers have cross-attention           */
    attn_attention_type cross_attention; /* DOT or ADDITIVE               */
    int64_t additive_dim; /* A of additive CA; 0 means E / 2          */
    attn_activation activation;
    int norm_first;        /* 0 post-norm, 1 pre-norm                  */
    int final_norm;        /* 1: LayerNorm after the last layer        */
    double layer_norm_eps; /* 0 means 1e-5                             */

    /* ---- the Llama family's layers (appended; zero: the stack above) --
     * norm ATTN_NORM_RMS: every norm (the final one too) is RMSNorm,
     *   y = x / sqrt(mean(x^2) + eps) * gamma + beta (beta zero in the
     *   Llama family's checkpoints; the slices keep their names);
     * activation ATTN_ACT_SWIGLU (attn_layers.h): the gated feed-forward;
     * attn_bias 0: the self- and cross-attention projections have no
     *   biases (their slices are absent); 1 (as attn_decoder_config_init
     *   sets it): they have;
     * rope.theta > 0: rotary positions on the self-attention's q and k
     *   (attn.h's attn_rope; 0 leaves positions to the caller's inputs);
     * sliding_window W > 0: query i sees keys i - W + 1 .. i (Mistral's
     *   window), 0: all earlier keys. */
    int norm;         /* attn_norm_kind                           */
    int attn_no_bias; /* 0 or 1                                   */
    attn_rope rope;   /* theta 0: none                            */
    int64_t sliding_window;
} attn_decoder_config;

/* Norms of attn_decoder_config.norm. */
typedef enum { ATTN_NORM_LAYER = 0, ATTN_NORM_RMS = 1 } attn_norm_kind;

/* Defaults: 1 layer, E 512, 8 heads, F 2048, cross-attention (dot),
 * ReLU, post-norm (PyTorch's nn.TransformerDecoderLayer), LayerNorm,
 * attention biases, no rotary positions, no window. */
ATTN_API void attn_decoder_config_init(attn_decoder_config *cfg);
ATTN_API attn_status attn_decoder_check(const attn_decoder_config *cfg);

typedef struct {
    attn_mha_params self_attn;      /* SA, with biases                   */
    attn_mha_params cross_mha;      /* CA when dot, else NULLs           */
    attn_additive_params cross_add; /* CA when additive, else NULLs      */
    float *cross_w_o, *cross_b_o;   /* (E, E), (E): additive CA only     */
    float *ln1_gamma, *ln1_beta;    /* (E)                               */
    float *ln2_gamma, *ln2_beta;    /* (E), NULL without cross           */
    float *ln3_gamma, *ln3_beta;    /* (E)                               */
    float *w_1, *b_1;               /* (F, E), (F)                       */
    float *w_2, *b_2;               /* (E, F), (E)                       */
} attn_decoder_layer_params;

/* Block layout, per layer: "layers.l.self_attn." (MHA layout with bias),
 * "layers.l.cross_attn." (MHA, or additive then w_o, b_o) if cross,
 * ln1_*, ln2_* (if cross), ln3_*, w_1, b_1, w_2, b_2; then norm_gamma,
 * norm_beta if final_norm. Slice names carry the caller's prefix. */
ATTN_API int64_t attn_decoder_param_count(const attn_decoder_config *cfg);
ATTN_API attn_status attn_decoder_layer_view(const attn_decoder_config *cfg,
                                             float *block, int64_t layer,
                                             attn_decoder_layer_params *p);
ATTN_API attn_status attn_decoder_final_norm_view(
    const attn_decoder_config *cfg, float *block, float **gamma, float **beta);
ATTN_API attn_status attn_decoder_param_slices(const attn_decoder_config *cfg,
                                               const char *prefix,
                                               int64_t offset,
                                               attn_param_slice *slices,
                                               int64_t cap, int64_t *count);
/* Xavier matrices, zero biases and betas, unit gammas, from seed. */
ATTN_API attn_status attn_decoder_init(const attn_decoder_config *cfg,
                                       float *params, uint64_t seed);
/* Heads of the cross-attention weights: H (dot) or 1 (additive); 0 when
 * the stack has no cross-attention. */
ATTN_API int64_t attn_decoder_cross_heads(const attn_decoder_config *cfg);
/* Workspace for targets of length Lt and a memory of length Ls (Ls is
 * ignored without cross-attention; pass 1). */
ATTN_API attn_status attn_decoder_workspace_size(const attn_decoder_config *cfg,
                                                 int64_t B, int64_t Lt,
                                                 int64_t Ls, size_t *floats);
/*
 *   x (B, Lt, E): the target embeddings (positions added); memory
 *   (B, Ls, E) or NULL without cross; memory_lengths [B] in [1, Ls] or
 *   NULL (all Ls). opts: dropout_p, seed, impl, threads, scale; its mask
 *   applies to the self-attention, with causal forced on (top-left).
 *   out (B, Lt, E) overwritten (may not alias x or memory).
 *   self_weights NULL or (M, B, H, Lt, Lt), cross_weights NULL or
 *   (M, B, Hc, Lt, Ls): every layer's weights after dropout, overwritten.
 */
ATTN_API attn_status attn_decoder_forward(
    const attn_decoder_config *cfg, const float *params, int64_t B, int64_t Lt,
    int64_t Ls, const float *x, const float *memory,
    const int64_t *memory_lengths, const attn_layer_opts *opts, float *out,
    float *self_weights, float *cross_weights, float *ws);
/* dout (B, Lt, E). grads (param_count floats), dx (B, Lt, E) and dmemory
 * (B, Ls, E) ADDED INTO (dx, dmemory may be NULL). The arguments are those
 * of the forward that filled ws. */
ATTN_API attn_status attn_decoder_backward(
    const attn_decoder_config *cfg, const float *params, int64_t B, int64_t Lt,
    int64_t Ls, const float *x, const float *memory,
    const int64_t *memory_lengths, const attn_layer_opts *opts,
    const float *dout, float *ws, float *grads, float *dx, float *dmemory);

/* Parameter files of kind "decoder" (the format of attn_params_save). */
ATTN_API attn_status attn_decoder_save(const char *path,
                                       const attn_decoder_config *cfg,
                                       const float *params);
ATTN_API attn_status attn_decoder_load(const char *path,
                                       attn_decoder_config *cfg,
                                       float **params);

/* ===================================================================== */
/* Models: encoder-decoder and decoder-only                              */
/* ===================================================================== */
/*
 * Token embeddings (times sqrt(E)) plus sinusoidal positions feed an
 * encoder stack (attn.h) and a decoder stack; a linear head (optionally
 * tied to the target embedding: logits = h E_tgt^T + b) gives one
 * distribution over target ids per target position.
 *   ENCDEC:  memory = Encoder(embed_src(src)); h = Decoder(embed_tgt(tgt),
 *            memory) with the source padding masked in the encoder and in
 *            the cross-attention.
 *   DECODER: h = Decoder(embed_tgt(tgt)) without cross-attention (a
 *            causal language model over one vocabulary).
 */
typedef enum { ATTN_MODEL_ENCDEC = 0, ATTN_MODEL_DECODER = 1 } attn_model_kind;

typedef struct {
    attn_model_kind kind;
    attn_encoder_config enc; /* ENCDEC only; enc.d_model == dec.d_model    */
    attn_decoder_config dec; /* dec.cross must be 1 for ENCDEC, 0 else     */
    int64_t vocab_src;       /* source ids (ENCDEC)                        */
    int64_t vocab_tgt;       /* target ids = classes of the head           */
    int64_t max_src;         /* longest source (positions), ENCDEC         */
    int64_t max_tgt;         /* longest decoder input                      */
    int share_embeddings;    /* ENCDEC: one table for both (vocab_src ==
                                vocab_tgt)                                 */
    int tie_output;          /* head.w is the target embedding             */
} attn_transformer_config;

/* Small defaults for the toy tasks: E 64, 4 heads, F 256, 2 + 2 layers,
 * pre-norm with final norms, dot cross-attention; vocabularies and lengths
 * 0 (set them, or let the trainer set them from the task). */
ATTN_API void attn_transformer_config_init(attn_transformer_config *cfg,
                                           attn_model_kind kind);
ATTN_API attn_status attn_transformer_check(const attn_transformer_config *cfg);
ATTN_API const char *attn_model_kind_name(attn_model_kind kind);
/* Block layout: embed.src (vocab_src, E) if ENCDEC and not shared,
 * embed.tgt (vocab_tgt, E), the encoder ("enc.") if ENCDEC, the decoder
 * ("dec."), head.w (vocab_tgt, E) unless tied, head.b (vocab_tgt). */
ATTN_API int64_t
attn_transformer_param_count(const attn_transformer_config *cfg);
ATTN_API attn_status attn_transformer_param_slices(
    const attn_transformer_config *cfg, attn_param_slice *slices, int64_t cap,
    int64_t *count);
ATTN_API attn_status attn_transformer_init(const attn_transformer_config *cfg,
                                           float *params, uint64_t seed);
ATTN_API attn_status
attn_transformer_workspace_size(const attn_transformer_config *cfg, int64_t B,
                                int64_t Ls, int64_t Lt, size_t *floats);
/*
 * Teacher-forced forward.
 *   src (B, Ls) int32 ids in [0, vocab_src) and src_lengths [B] in [1, Ls]
 *   (or NULL: all Ls): ENCDEC only (NULL and Ls ignored for DECODER).
 *   tgt (B, Lt) int32 decoder inputs in [0, vocab_tgt), Lt <= max_tgt.
 *   opts: dropout_p, seed, impl, threads (the mask is set here).
 *   logits (B, Lt, vocab_tgt) overwritten. cross_weights NULL or
 *   (M, B, Hc, Lt, Ls) as attn_decoder_forward. ws saved for backward.
 */
ATTN_API attn_status attn_transformer_forward(
    const attn_transformer_config *cfg, const float *params, int64_t B,
    int64_t Ls, const int32_t *src, const int64_t *src_lengths, int64_t Lt,
    const int32_t *tgt, const attn_layer_opts *opts, float *logits,
    float *cross_weights, float *ws);
/* dlogits (B, Lt, vocab_tgt); grads ADDED INTO. Same arguments as the
 * forward that filled ws. */
ATTN_API attn_status attn_transformer_backward(
    const attn_transformer_config *cfg, const float *params, int64_t B,
    int64_t Ls, const int32_t *src, const int64_t *src_lengths, int64_t Lt,
    const int32_t *tgt, const attn_layer_opts *opts, const float *dlogits,
    float *ws, float *grads);

/* Parameter files of kind "transformer" (the format of attn_params_save):
 * the config (both stacks, vocabularies, lengths, sharing) and the block.
 * Loading checks the slices against the config (ATTN_E_FORMAT). */
ATTN_API attn_status attn_transformer_save(const char *path,
                                           const attn_transformer_config *cfg,
                                           const float *params);
ATTN_API attn_status attn_transformer_load(const char *path,
                                           attn_transformer_config *cfg,
                                           float **params);

/* Cross-entropy with label smoothing s in [0, 1): the target distribution
 * is (1 - s) one-hot + s / classes (s = 0 is attn_cross_entropy). Mean over
 * the rows whose target is not ignore_index; dlogits (or NULL) overwritten;
 * counted / correct (or NULL) as attn_cross_entropy. */
ATTN_API attn_status attn_cross_entropy_smoothed(
    int64_t n, int64_t classes, const float *logits, const int32_t *targets,
    int32_t ignore_index, double smoothing, double *loss, float *dlogits,
    int64_t *counted, int64_t *correct);

/* ===================================================================== */
/* Generation tasks                                                      */
/* ===================================================================== */
/*
 * Seeded generators of string pairs, characters in, characters out:
 *   date     a date between 1950-01-01 and 2049-12-31 written in one of
 *            ATTN_DATE_FORMATS human formats ("tue 3 march 2026",
 *            "03/03/26" (day/month/year), "march 3, 2026", "3.3.2026",
 *            ...) -> "2026-03-03"; different source and target
 *            vocabularies and lengths, and a visible alignment.
 *   reverse  digits (min_len..max_len of them) -> the digits reversed
 *   sort     digits -> the digits sorted ascending
 *   add      "123+456" (operands of min_len..max_len digits) -> "579"
 * Token ids of every vocabulary: ATTN_GEN_PAD, ATTN_GEN_BOS, ATTN_GEN_EOS,
 * ATTN_GEN_SEP (shown as '=': ends a decoder-only prompt), then the
 * characters of the side's charset from ATTN_GEN_FIRST on. Encoding
 * lower-cases ASCII letters.
 *
 * An encoder-decoder reads the source ids; its decoder input is BOS y and
 * its targets y EOS. A decoder-only model reads one sequence over the
 * joint charset, BOS x SEP y, with targets y EOS after the SEP (the
 * prompt's positions are ignored): "123+456=" -> "579".
 */
typedef enum {
    ATTN_GEN_DATE = 0,
    ATTN_GEN_REVERSE = 1,
    ATTN_GEN_SORT = 2,
    ATTN_GEN_ADD = 3
} attn_gen_kind;

#define ATTN_GEN_COUNT 4
#define ATTN_DATE_FORMATS 12
#define ATTN_GEN_PAD 0
#define ATTN_GEN_BOS 1
#define ATTN_GEN_EOS 2
#define ATTN_GEN_SEP 3
#define ATTN_GEN_FIRST 4

/* Sides of a task: source, target, and the joint vocabulary of a
 * decoder-only model. */
typedef enum {
    ATTN_SIDE_SOURCE = 0,
    ATTN_SIDE_TARGET = 1,
    ATTN_SIDE_JOINT = 2
} attn_gen_side;

typedef struct {
    attn_gen_kind kind;
    int64_t min_len; /* digits (reverse, sort) or digits per operand (add);
                        unused by date                                   */
    int64_t max_len;
} attn_gen_task;

/* Defaults: reverse and sort 1..10 digits, add 1..3 digits per operand. */
ATTN_API void attn_gen_task_init(attn_gen_task *task, attn_gen_kind kind);
/* "date", "reverse", "sort", "add" ("?" if unknown). */
ATTN_API const char *attn_gen_task_name(attn_gen_kind kind);
/* ATTN_E_INVALID listing the names if unknown. */
ATTN_API attn_status attn_gen_task_parse(const char *name, attn_gen_kind *kind);
ATTN_API attn_status attn_gen_task_check(const attn_gen_task *task);
/* The characters of a side (NUL-terminated, static), "" if invalid. */
ATTN_API const char *attn_gen_charset(const attn_gen_task *task,
                                      attn_gen_side side);
/* Ids of a side: ATTN_GEN_FIRST + characters (0 if invalid). */
ATTN_API int64_t attn_gen_vocab(const attn_gen_task *task, attn_gen_side side);
/* Longest source / target string of the task, in characters. */
ATTN_API int64_t attn_gen_max_chars(const attn_gen_task *task,
                                    attn_gen_side side);
/* One fresh example from rng: src and tgt NUL-terminated strings (cap
 * bytes each, at least max_chars + 1, else ATTN_E_INVALID). */
ATTN_API attn_status attn_gen_sample(const attn_gen_task *task, attn_rng *rng,
                                     char *src, size_t src_cap, char *tgt,
                                     size_t tgt_cap);
/* attn_gen_sample, and the field of each character (date: 1 year, 2
 * month, 3 day, 0 anything else, e.g. a weekday or a separator; 0 for the
 * other tasks): src_fields and tgt_fields (max_chars bytes each, or NULL)
 * are overwritten for the characters written. The same draws as
 * attn_gen_sample. */
ATTN_API attn_status attn_gen_sample_fields(const attn_gen_task *task,
                                            attn_rng *rng, char *src,
                                            size_t src_cap, char *tgt,
                                            size_t tgt_cap, uint8_t *src_fields,
                                            uint8_t *tgt_fields);
/* text -> ids[0 .. *n) of a side (no BOS/EOS added). Errors name the
 * position: ATTN_E_INVALID for a character outside the side's charset
 * (non-printable bytes escaped), ATTN_E_SHAPE for a text longer than cap
 * ids. */
ATTN_API attn_status attn_gen_encode(const attn_gen_task *task,
                                     attn_gen_side side, const char *text,
                                     int32_t *ids, int64_t cap, int64_t *n);
/* ids -> text, stopping at EOS; specials other than SEP ('=') are left
 * out. Truncates to cap (always NUL-terminated). */
ATTN_API attn_status attn_gen_decode(const attn_gen_task *task,
                                     attn_gen_side side, const int32_t *ids,
                                     int64_t n, char *text, size_t cap);
/* Sets vocabularies and lengths of a model for the task:
 * ENCDEC vocab_src/tgt of the source/target side, max_src = the longest
 * source, max_tgt = the longest target + 1; DECODER vocab_tgt of the joint
 * side, max_tgt = longest source + longest target + 2. */
ATTN_API attn_status attn_gen_model_fit(const attn_gen_task *task,
                                        attn_transformer_config *model);
/* Lengths of a batch: Ls, the source (ENCDEC) or prompt BOS x SEP
 * (DECODER) ids, and Lt, the decoder input. */
ATTN_API attn_status attn_gen_batch_dims(const attn_gen_task *task,
                                         attn_model_kind kind, int64_t *Ls,
                                         int64_t *Lt);
/* B fresh examples as ids: src (B, Ls) padded with PAD and src_lengths
 * [B]; tgt_in (B, Lt) decoder inputs and targets (B, Lt) with
 * ATTN_IGNORE_INDEX where nothing is predicted; all overwritten. answers
 * (B * answer_cap bytes) or NULL: the target strings. */
ATTN_API attn_status attn_gen_batch(const attn_gen_task *task,
                                    attn_model_kind kind, attn_rng *rng,
                                    int64_t B, int32_t *src,
                                    int64_t *src_lengths, int32_t *tgt_in,
                                    int32_t *targets, char *answers,
                                    size_t answer_cap);
/* Source text -> the model's input ids: the source ids (ENCDEC) or the
 * prompt BOS x SEP (DECODER; a trailing '=' of text is dropped). Errors of
 * attn_gen_encode, and ATTN_E_SHAPE naming the model's maximum when the
 * text is longer. */
ATTN_API attn_status attn_gen_input(const attn_gen_task *task,
                                    attn_model_kind kind, const char *text,
                                    int32_t *ids, int64_t cap, int64_t *n);

/* ===================================================================== */
/* Training generation models                                            */
/* ===================================================================== */
/*
 * The trainer of attn.h for the models above: fresh teacher-forced batches
 * of a generation task, label-smoothed cross-entropy, AdamW with warmup
 * and cosine decay, global-norm clipping. Deterministic: the same seed
 * gives bitwise the same model on any thread count, and a run resumed from
 * a checkpoint is bitwise the uninterrupted one.
 */
typedef struct {
    attn_gen_task task;
    attn_transformer_config model; /* vocabularies and lengths follow the
                                      task (attn_gen_model_fit)            */
    attn_adamw_config optim;
    int64_t batch;
    int64_t steps;
    uint64_t seed;
    double dropout;
    double label_smoothing; /* in [0, 1)                            */
    int threads;            /* not stored in checkpoints            */
    /* ATTN_F32 or ATTN_BF16: mixed precision, as attn_train_config.dtype
     * (not stored in checkpoints: attn_gen_trainer_set_dtype) */
    attn_dtype dtype;
} attn_gen_train_config;

/* Task defaults and the model and optimizer settings chosen by experiment
 * (docs/generation.md); the decoder-only add task trains longer. */
ATTN_API void attn_gen_train_config_init(attn_gen_train_config *cfg,
                                         attn_gen_kind task,
                                         attn_model_kind kind);
/* Validates; fits the model's vocabularies and lengths to the task. */
ATTN_API attn_status attn_gen_train_config_check(attn_gen_train_config *cfg);

typedef struct attn_gen_trainer attn_gen_trainer;

ATTN_API attn_status attn_gen_trainer_create(const attn_gen_train_config *cfg,
                                             attn_gen_trainer **out);
/* One step (stats as attn_trainer_step; seq_acc is teacher-forced). A
 * NaN/Inf loss or gradient is ATTN_E_NONFINITE and leaves the model as it
 * was. */
ATTN_API attn_status attn_gen_trainer_step(attn_gen_trainer *tr,
                                           attn_train_stats *stats);
ATTN_API int64_t attn_gen_trainer_steps_done(const attn_gen_trainer *tr);
ATTN_API const attn_gen_train_config *
attn_gen_trainer_config(const attn_gen_trainer *tr);
ATTN_API const float *attn_gen_trainer_params(const attn_gen_trainer *tr);
ATTN_API attn_status attn_gen_trainer_set_threads(attn_gen_trainer *tr,
                                                  int threads);
/* The products' dtype from now on (ATTN_F32 or ATTN_BF16). */
ATTN_API attn_status attn_gen_trainer_set_dtype(attn_gen_trainer *tr,
                                                attn_dtype dtype);
ATTN_API attn_status attn_gen_trainer_set_steps(attn_gen_trainer *tr,
                                                int64_t steps);
/* Checkpoints as attn_trainer_save (atomic, CRC32, bitwise resume), magic
 * "ATTNGENM". Loading another kind of file, an encoder tagger checkpoint
 * of attn_trainer_save included, is ATTN_E_FORMAT saying what it holds. */
ATTN_API attn_status attn_gen_trainer_save(const attn_gen_trainer *tr,
                                           const char *path);
ATTN_API attn_status attn_gen_trainer_load(const char *path,
                                           attn_gen_trainer **out);
ATTN_API void attn_gen_trainer_free(attn_gen_trainer *tr);

/* ===================================================================== */
/* Generation                                                            */
/* ===================================================================== */
/*
 * Autoregressive decoding with a per-layer key/value cache: each step
 * feeds one token per sequence, the self-attention cache of every layer
 * grows by one position, and the cross-attention keys and values of the
 * memory are computed once (ENCDEC). A DECODER model is fed its prompt
 * (BOS x SEP) one token per step through the same cache, then continues.
 * Greedy decoding (argmax, first maximum), sampling (temperature, top-k,
 * top-p, from a seed: each sequence b draws from its own stream, so the
 * result depends on neither the batch nor the thread count), or beam
 * search (width K, length penalty; the caches are reordered by parent
 * beam after each step; K = 1 is greedy). A sequence stops at eos_id or
 * after max_len tokens. Sources of different lengths share a batch
 * (their padding is masked in the encoder and the cross-attention).
 */
typedef struct {
    int64_t max_len;        /* most tokens per sequence, EOS not counted;
                              0 or more than the model allows: as many as
                              its max_tgt allows                          */
    int64_t beam;           /* 1: greedy or sampling; > 1: beam width       */
    double length_penalty;  /* beam: score = log p / ((5 + n) / 6)^alpha,
                              n tokens with EOS (GNMT); 0: plain sum      */
    int sample;             /* 1: sample (needs beam 1)                    */
    double temperature;     /* > 0 (default 1)                             */
    int64_t top_k;          /* keep the k most likely ids; 0: all          */
    double top_p;           /* keep the fewest most likely ids whose mass
                              reaches top_p, in (0, 1]; 1: all            */
    uint64_t seed;          /* sampling                                    */
    int threads;            /* kernels (0: default); results do not depend */
    int recompute;          /* 1: no cache: every step runs the decoder over
                              the whole prefix (the reference of the tests
                              and the benchmark's baseline)               */
    int32_t bos_id, eos_id; /* defaults ATTN_GEN_BOS, ATTN_GEN_EOS         */
    /* NULL, or (B, max_len, vocab_tgt) f32: the logits each step of the
     * chosen path decided on (greedy and sampling only); rows past a
     * sequence's end are not written. */
    float *step_logits;
} attn_generate_opts;

/* Greedy, max_len 0, beam 1, length_penalty 0, temperature 1, top_k 0,
 * top_p 1, seed 0, threads 0, cache on, BOS / EOS of the tasks. */
ATTN_API void attn_generate_opts_init(attn_generate_opts *opts);

/*
 *   src (B, Ls) int32: source ids (ENCDEC) or prompts ending in SEP
 *   (DECODER), left-aligned, padded; src_lengths [B] in [1, Ls] (NULL:
 *   all Ls). A source longer than max_src, or a prompt that leaves no
 *   room to generate within max_tgt, is ATTN_E_SHAPE naming the maximum.
 *   out (B, out_cap) int32 generated ids without EOS (out_cap >= the
 *   effective max_len, else ATTN_E_SHAPE), out_lengths [B] their counts,
 *   scores [B] or NULL: the sum of the model's log-probabilities of the
 *   tokens and of EOS if reached (beam: divided by the length penalty).
 *   All overwritten.
 */
ATTN_API attn_status attn_generate(const attn_transformer_config *cfg,
                                   const float *params, int64_t B, int64_t Ls,
                                   const int32_t *src,
                                   const int64_t *src_lengths,
                                   const attn_generate_opts *opts, int32_t *out,
                                   int64_t out_cap, int64_t *out_lengths,
                                   double *scores);

/* Exact-match accuracy of a trained model on count fresh examples of the
 * task drawn from seed (a stream distinct from training's), generated
 * with opts (NULL: greedy). */
typedef struct {
    int64_t sequences, exact;
    double exact_match;   /* exact / sequences                          */
    double chars_correct; /* fraction of target characters right        */
} attn_gen_eval_result;

ATTN_API attn_status attn_gen_evaluate(const attn_transformer_config *cfg,
                                       const float *params,
                                       const attn_gen_task *task, int64_t count,
                                       uint64_t seed,
                                       const attn_generate_opts *opts,
                                       attn_gen_eval_result *res);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_TRANSFORMER_H */
