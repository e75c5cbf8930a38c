/*
 * attn_transformer.h: the whole Transformer of libattn (issue 15): the
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
    int64_t num_layers;       /* M >= 1                                   */
    int64_t d_model;          /* E                                        */
    int64_t num_heads;        /* H of SA (and of CA when dot)             */
    int64_t num_kv_heads;     /* 0 means H                                */
    int64_t dim_feedforward;  /* F                                        */
    int cross;                /* 1: layers have cross-attention           */
    attn_attention_type cross_attention; /* DOT or ADDITIVE               */
    int64_t additive_dim;     /* A of additive CA; 0 means E / 2          */
    attn_activation activation;
    int norm_first;           /* 0 post-norm, 1 pre-norm                  */
    int final_norm;           /* 1: LayerNorm after the last layer        */
    double layer_norm_eps;    /* 0 means 1e-5                             */
} attn_decoder_config;

/* Defaults: 1 layer, E 512, 8 heads, F 2048, cross-attention (dot),
 * ReLU, post-norm (PyTorch's nn.TransformerDecoderLayer). */
ATTN_API void attn_decoder_config_init(attn_decoder_config *cfg);
ATTN_API attn_status attn_decoder_check(const attn_decoder_config *cfg);

typedef struct {
    attn_mha_params self_attn;       /* SA, with biases                   */
    attn_mha_params cross_mha;       /* CA when dot, else NULLs           */
    attn_additive_params cross_add;  /* CA when additive, else NULLs      */
    float *cross_w_o, *cross_b_o;    /* (E, E), (E): additive CA only     */
    float *ln1_gamma, *ln1_beta;     /* (E)                               */
    float *ln2_gamma, *ln2_beta;     /* (E), NULL without cross           */
    float *ln3_gamma, *ln3_beta;     /* (E)                               */
    float *w_1, *b_1;                /* (F, E), (F)                       */
    float *w_2, *b_2;                /* (E, F), (E)                       */
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
ATTN_API attn_status attn_decoder_workspace_size(
    const attn_decoder_config *cfg, int64_t B, int64_t Lt, int64_t Ls,
    size_t *floats);
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
    const attn_decoder_config *cfg, const float *params, int64_t B,
    int64_t Lt, int64_t Ls, const float *x, const float *memory,
    const int64_t *memory_lengths, const attn_layer_opts *opts, float *out,
    float *self_weights, float *cross_weights, float *ws);
/* dout (B, Lt, E). grads (param_count floats), dx (B, Lt, E) and dmemory
 * (B, Ls, E) ADDED INTO (dx, dmemory may be NULL). The arguments are those
 * of the forward that filled ws. */
ATTN_API attn_status attn_decoder_backward(
    const attn_decoder_config *cfg, const float *params, int64_t B,
    int64_t Lt, int64_t Ls, const float *x, const float *memory,
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
typedef enum {
    ATTN_MODEL_ENCDEC = 0,
    ATTN_MODEL_DECODER = 1
} attn_model_kind;

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
ATTN_API int64_t attn_transformer_param_count(const attn_transformer_config *cfg);
ATTN_API attn_status attn_transformer_param_slices(
    const attn_transformer_config *cfg, attn_param_slice *slices, int64_t cap,
    int64_t *count);
ATTN_API attn_status attn_transformer_init(const attn_transformer_config *cfg,
                                           float *params, uint64_t seed);
ATTN_API attn_status attn_transformer_workspace_size(
    const attn_transformer_config *cfg, int64_t B, int64_t Ls, int64_t Lt,
    size_t *floats);
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

/* Cross-entropy with label smoothing s in [0, 1): the target distribution
 * is (1 - s) one-hot + s / classes (s = 0 is attn_cross_entropy). Mean over
 * the rows whose target is not ignore_index; dlogits (or NULL) overwritten;
 * counted / correct (or NULL) as attn_cross_entropy. */
ATTN_API attn_status attn_cross_entropy_smoothed(
    int64_t n, int64_t classes, const float *logits, const int32_t *targets,
    int32_t ignore_index, double smoothing, double *loss, float *dlogits,
    int64_t *counted, int64_t *correct);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_TRANSFORMER_H */
