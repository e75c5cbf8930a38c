/*
 * attn_layers.h: the layers of attn, on top of attn.h.
 *
 * Additive (Bahdanau) attention, multi-head attention with grouped query
 * heads, the Transformer encoder (a stack of layers), and their building
 * blocks: linear, LayerNorm, activations, sinusoidal positions, parameter
 * blocks with named slices, parameter files.
 *
 * Contents:
 *   Conventions      activations, parameter blocks, workspaces, add-into
 *                    gradients, options, errors (below)
 *   Parameters       attn_param_slice, attn_params_init; each layer's
 *                    *_param_count, *_params_view, *_param_slices, *_init
 *   Additive         attn_additive_config, attn_additive_forward/backward
 *   Multi-head       attn_mha_config, attn_mha_forward/backward
 *   Building blocks  attn_linear_*, attn_layernorm_*, positional encodings
 *   Encoder          attn_encoder_config, attn_encoder_forward/backward
 *   Parameter files  attn_params_save/load/free, attn_{additive,mha,
 *                    encoder}_save/load
 *
 * Example: one multi-head self-attention layer (E = 16, 4 heads) forward.
 *
 *     attn_mha_config cfg = {16, 4, 0, 0, 0, 1};   // E, H, Hkv = H, bias
 *     float *params = malloc(sizeof(float) * attn_mha_param_count(&cfg));
 *     float x[2 * 3 * 16], y[2 * 3 * 16];          // B = 2, L = 3, E = 16
 *     for (int i = 0; i < 2 * 3 * 16; i++) x[i] = 0.01f * (float)(i % 11);
 *     size_t n;
 *     attn_layer_opts opts;
 *     attn_sdpa_opts_init(&opts);
 *     opts.mask.causal = 1;
 *     if (attn_mha_init(&cfg, params, 7) ||
 *         attn_mha_workspace_size(&cfg, 2, 3, 3, &n)) {
 *         fprintf(stderr, "%s\n", attn_last_error());
 *         return 1;
 *     }
 *     float *ws = malloc(sizeof(float) * n);       // what backward reads
 *     attn_status st = attn_mha_forward(&cfg, params, 2, 3, 3, x, x, x, &opts,
 *                                       y, NULL, ATTN_WEIGHTS_PER_HEAD, ws);
 *     free(ws);
 *     free(params);
 *     if (st != ATTN_OK) {
 *         fprintf(stderr, "%s\n", attn_last_error());
 *         return 1;
 *     }
 */
#ifndef ATTN_LAYERS_H
#define ATTN_LAYERS_H

#include "attn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ===================================================================== */
/* Layers: additive attention, multi-head attention, encoder   */
/* ===================================================================== */
/*
 * Conventions of the layers:
 *  - Activations are contiguous, row-major, batch-first f32 arrays:
 *    a sequence input is (B, L, features). The caller owns them.
 *  - Parameters of a layer live in ONE contiguous f32 block; the layer's
 *    *_param_count gives its length and *_params_view gives named pointers
 *    (slices) into it. A gradient block has the same layout: view it with
 *    the same function. Matrices are (out_features, in_features), as
 *    PyTorch's nn.Linear: y = x W^T + b.
 *  - Forward writes what backward needs into a caller-owned workspace of
 *    *_workspace_size floats; backward reads it (unchanged since forward,
 *    same params, inputs and opts) and uses the rest as scratch. One
 *    workspace per layer call in flight; reuse it across steps.
 *  - Backward ADDS into the gradient block and into the input gradients
 *    (zero them first for a fresh gradient). Input-gradient pointers may be
 *    NULL (not wanted) and may alias each other (self-attention: dq, dk and
 *    dv the same buffer): contributions are added one after the other.
 *  - Options are attn_layer_opts (= attn_sdpa_opts): the mask over
 *    (B, H, Lq, Lk) (H = 1 for additive attention), dropout_p (> 0 in
 *    training; every dropout site of a layer uses it), the dropout seed,
 *    impl (ATTN_IMPL_REF: double reference paths; AUTO/FLASH: fast paths;
 *    FLASH_BF16: the fast paths on bf16 products with f32 sums, the linear
 *    maps forward and backward and dot-product attention (its q, k, v
 *    rounded to bf16; f32 attention when weights are asked for), on CPUs
 *    with AVX512_BF16, else FLASH: mixed precision, see attn_train.h) and
 *    threads. scale: 0 means 1/sqrt(head_dim) for dot-product and 1 for
 *    additive attention.
 *  - Results are bitwise identical for any thread count.
 *  - Errors: ATTN_E_INVALID (NULL pointers, bad config or options),
 *    ATTN_E_SHAPE (lengths < 1, mask shapes), ATTN_E_NONFINITE (NaN/Inf in
 *    inputs), ATTN_E_NOMEM (size overflow).
 */

typedef attn_sdpa_opts attn_layer_opts;

/* Initial values of a parameter slice (used by attn_params_init). */
typedef enum {
    ATTN_INIT_XAVIER = 0, /* uniform(+-sqrt(6 / (fan_in + fan_out)))       */
    ATTN_INIT_ZERO = 1,   /* biases, LayerNorm beta                       */
    ATTN_INIT_ONE = 2     /* LayerNorm gamma                              */
} attn_init_kind;

#define ATTN_SLICE_NAME_MAX 48

/* One named slice of a parameter block: block[offset .. offset+numel). A
 * vector has shape {n, 1}; fan_in = shape[1], fan_out = shape[0]. */
typedef struct {
    char name[ATTN_SLICE_NAME_MAX]; /* e.g. "layers.0.attn.w_q"            */
    int64_t offset;                 /* in floats from the block's start    */
    int64_t shape[2];               /* (out, in) for a matrix, (n, 1) else */
    attn_init_kind init;
} attn_param_slice;

/* Fills block[0 .. sum of slices) slice by slice from seed: Xavier-uniform
 * drawn from a counter-based generator keyed by (seed, slice index,
 * element), zeros, ones. The same seed gives the same block on any thread
 * count and whatever other slices exist. */
ATTN_API attn_status attn_params_init(const attn_param_slice *slices,
                                      int64_t nslices, float *block,
                                      uint64_t seed);

/* --- Additive (Bahdanau) attention ----------------------------------- */
/*
 * score(i, j) = scale * v . tanh(W_q q_i + b_q + W_k k_j + b_k) (+ mask
 * bias), weights = softmax over visible keys (dropout after), context_i =
 * sum_j weights_ij * val_j where val = V, or the projected keys
 * W_k k_j + b_k when context_from_keys (the tutorial's variant).
 * The fast path streams key tiles with an online softmax and never holds
 * the (B, Lq, Lk, A) tensor; the reference (impl REF) materializes it in
 * double.
 */
typedef struct {
    int64_t query_dim;     /* Dq: features of a query                      */
    int64_t key_dim;       /* Dk: features of a key                        */
    int64_t value_dim;     /* Dv: features of a value (unused if keys)     */
    int64_t attn_dim;      /* A: hidden size of the score network          */
    int bias;              /* 1: b_q and b_k exist                         */
    int context_from_keys; /* 1: context = weights x (W_k k + b_k), size A */
} attn_additive_config;

typedef struct {
    float *w_q; /* (A, Dq)          */
    float *w_k; /* (A, Dk)          */
    float *v;   /* (A)              */
    float *b_q; /* (A), NULL if !bias */
    float *b_k; /* (A), NULL if !bias */
} attn_additive_params;

/* Features of the context: A if context_from_keys, else Dv. */
ATTN_API int64_t attn_additive_out_dim(const attn_additive_config *cfg);
/* Number of floats of the parameter block (0 for an invalid config). */
ATTN_API int64_t attn_additive_param_count(const attn_additive_config *cfg);
/* Named pointers into block (params or gradients) in the layout order
 * w_q, w_k, v, b_q, b_k. */
ATTN_API attn_status attn_additive_params_view(const attn_additive_config *cfg,
                                               float *block,
                                               attn_additive_params *p);
/* Slice table: writes at most cap entries, *count = the number needed.
 * prefix ("" or e.g. "layers.0.attn.") is prepended to names. */
ATTN_API attn_status attn_additive_param_slices(const attn_additive_config *cfg,
                                                const char *prefix,
                                                int64_t offset,
                                                attn_param_slice *slices,
                                                int64_t cap, int64_t *count);
/* Xavier init of the whole block (biases 0) from seed. */
ATTN_API attn_status attn_additive_init(const attn_additive_config *cfg,
                                        float *params, uint64_t seed);
/* Floats of the workspace of one forward + backward with these shapes
 * (B, Lq, Lk >= 1, else ATTN_E_SHAPE; ATTN_E_NOMEM if the size overflows;
 * ATTN_E_INVALID for a bad config or NULL floats). */
ATTN_API attn_status
attn_additive_workspace_size(const attn_additive_config *cfg, int64_t B,
                             int64_t Lq, int64_t Lk, size_t *floats);
/*
 *   q (B, Lq, Dq), k (B, Lk, Dk), v (B, Lk, Dv) (NULL if context_from_keys)
 *   out     (B, Lq, out_dim)  overwritten
 *   weights (B, Lq, Lk) or NULL: weights after dropout, overwritten
 *   ws      workspace_size floats: saved for backward
 * A query row with no visible key gives context 0 and weights 0.
 */
ATTN_API attn_status attn_additive_forward(
    const attn_additive_config *cfg, const float *params, int64_t B, int64_t Lq,
    int64_t Lk, const float *q, const float *k, const float *v,
    const attn_layer_opts *opts, float *out, float *weights, float *ws);
/* dout (B, Lq, out_dim). grads (param_count floats), dq, dk, dv: ADDED
 * INTO; any may be NULL. */
ATTN_API attn_status attn_additive_backward(
    const attn_additive_config *cfg, const float *params, int64_t B, int64_t Lq,
    int64_t Lk, const float *q, const float *k, const float *v,
    const attn_layer_opts *opts, const float *dout, float *ws, float *grads,
    float *dq, float *dk, float *dv);

/* --- Multi-head attention -------------------------------------------- */
/*
 * Q = query W_q^T + b_q split into H heads of hd = d_model / H features;
 * K = key W_k^T + b_k and V = value W_v^T + b_v into Hkv heads (grouped
 * query attention: head h reads kv head h / (H / Hkv)); per head
 * softmax(scale Q K^T + mask) V through attn_sdpa_forward; heads merged
 * and out = merged W_o^T + b_o.
 */
typedef struct {
    int64_t d_model;      /* E: query features = output features           */
    int64_t num_heads;    /* H, divides E; hd = E / H                      */
    int64_t num_kv_heads; /* Hkv, divides H; 0 means H                     */
    int64_t kdim;         /* key features; 0 means E (cross-attention)     */
    int64_t vdim;         /* value features; 0 means E                     */
    int bias;             /* 1: b_q, b_k, b_v, b_o exist                   */
} attn_mha_config;

typedef struct {
    float *w_q; /* (E, E)                           */
    float *w_k; /* (Hkv * hd, kdim)                 */
    float *w_v; /* (Hkv * hd, vdim)                 */
    float *w_o; /* (E, E)                           */
    float *b_q; /* (E), NULL if !bias               */
    float *b_k; /* (Hkv * hd), NULL if !bias        */
    float *b_v; /* (Hkv * hd), NULL if !bias        */
    float *b_o; /* (E), NULL if !bias               */
} attn_mha_params;

/* How attn_mha_forward returns weights. */
typedef enum {
    ATTN_WEIGHTS_PER_HEAD = 0, /* (B, H, Lq, Lk)                          */
    ATTN_WEIGHTS_AVERAGED = 1  /* (B, Lq, Lk), mean over heads             */
} attn_weights_mode;

/* Number of floats of the parameter block (0 for an invalid config). */
ATTN_API int64_t attn_mha_param_count(const attn_mha_config *cfg);
/* Named pointers into block (params or gradients, caller-owned, of
 * attn_mha_param_count floats) in the layout order w_q, w_k, w_v, w_o,
 * b_q, b_k, b_v, b_o (biases NULL if !bias). ATTN_E_INVALID for a bad
 * config or NULL pointers. */
ATTN_API attn_status attn_mha_params_view(const attn_mha_config *cfg,
                                          float *block, attn_mha_params *p);
/* Slice table: writes at most cap entries (slices may be NULL with cap 0),
 * *count = the number needed; names get prefix, offsets start at offset. */
ATTN_API attn_status attn_mha_param_slices(const attn_mha_config *cfg,
                                           const char *prefix, int64_t offset,
                                           attn_param_slice *slices,
                                           int64_t cap, int64_t *count);
/* Xavier init of the whole block (biases 0) from seed; overwrites params. */
ATTN_API attn_status attn_mha_init(const attn_mha_config *cfg, float *params,
                                   uint64_t seed);
/* Floats of the workspace of one forward + backward with these shapes
 * (B, Lq, Lk >= 1, else ATTN_E_SHAPE; ATTN_E_NOMEM if it overflows). */
ATTN_API attn_status attn_mha_workspace_size(const attn_mha_config *cfg,
                                             int64_t B, int64_t Lq, int64_t Lk,
                                             size_t *floats);
/*
 *   query (B, Lq, E), key (B, Lk, kdim), value (B, Lk, vdim); for
 *   self-attention pass the same pointer three times.
 *   out (B, Lq, E) overwritten; weights NULL or (see mode) overwritten,
 *   after dropout; ws: workspace_size floats, saved for backward.
 */
ATTN_API attn_status
attn_mha_forward(const attn_mha_config *cfg, const float *params, int64_t B,
                 int64_t Lq, int64_t Lk, const float *query, const float *key,
                 const float *value, const attn_layer_opts *opts, float *out,
                 float *weights, attn_weights_mode mode, float *ws);
/* dout (B, Lq, E); grads, dquery, dkey, dvalue ADDED INTO (NULL: skip). */
ATTN_API attn_status attn_mha_backward(
    const attn_mha_config *cfg, const float *params, int64_t B, int64_t Lq,
    int64_t Lk, const float *query, const float *key, const float *value,
    const attn_layer_opts *opts, const float *dout, float *ws, float *grads,
    float *dquery, float *dkey, float *dvalue);

/* --- Building blocks: linear, LayerNorm, positions -------------------- */

/* y (n, out) = x (n, in) W^T (W is (out, in)) + b (out, or NULL);
 * overwritten. */
ATTN_API attn_status attn_linear_forward(int64_t n, int64_t in, int64_t out,
                                         const float *x, const float *w,
                                         const float *b, float *y);
/* dW (out, in) += dy^T x; db (out) += column sums of dy; dx (n, in) +=
 * dy W. Any of dw, db, dx may be NULL. */
ATTN_API attn_status attn_linear_backward(int64_t n, int64_t in, int64_t out,
                                          const float *x, const float *w,
                                          const float *dy, float *dw, float *db,
                                          float *dx);
/* y = (x - mean) / sqrt(var + eps) * gamma + beta over the last axis of n
 * rows of d features; mean and rstd (n each) saved for backward. */
ATTN_API attn_status attn_layernorm_forward(int64_t n, int64_t d,
                                            const float *x, const float *gamma,
                                            const float *beta, double eps,
                                            float *y, float *mean, float *rstd);
/* dgamma, dbeta (d) and dx (n, d) ADDED INTO (NULL: skip). */
ATTN_API attn_status attn_layernorm_backward(
    int64_t n, int64_t d, const float *x, const float *gamma, const float *mean,
    const float *rstd, const float *dy, float *dgamma, float *dbeta, float *dx);
/* pe (L, d_model): pe[p, 2i] = sin(p / 10000^(2i / d_model)),
 * pe[p, 2i+1] = cos(same angle); overwritten. */
ATTN_API attn_status attn_positional_encoding(int64_t L, int64_t d_model,
                                              float *pe);
/* x (B, L, d_model) += pe, in place. */
ATTN_API attn_status attn_add_positional_encoding(int64_t B, int64_t L,
                                                  int64_t d_model, float *x);

/* --- Transformer encoder (a stack of N layers) ------------------------ */

typedef enum {
    ATTN_ATTENTION_DOT = 0,     /* multi-head scaled dot-product            */
    ATTN_ATTENTION_ADDITIVE = 1 /* single-head additive + output projection */
} attn_attention_type;

typedef enum {
    ATTN_ACT_RELU = 0,
    ATTN_ACT_GELU = 1, /* exact: x * Phi(x) (erf)                         */
    /* gated: w_1 is (2F, E), gate rows then up rows, and the hidden layer
     * silu(gate) * up (Llama's gate_proj, up_proj); the decoder only    */
    ATTN_ACT_SWIGLU = 2
} attn_activation;

/*
 * One layer, post-norm (norm_first = 0, the tutorials, PyTorch default):
 *   x = LN1(x + drop(SA(x)));  x = LN2(x + drop(FFN(x)))
 * pre-norm (norm_first = 1):
 *   x = x + drop(SA(LN1(x)));  x = x + drop(FFN(LN2(x)))
 * FFN(x) = W_2 drop(act(W_1 x + b_1)) + b_2. SA is multi-head attention
 * (dot) or, for additive, out = W_o (AddAttn(q=k=v=x)) + b_o with the
 * context taken from the values (the inputs themselves). Dropout of
 * attention weights, of SA and FFN outputs and inside the FFN all use
 * opts->dropout_p, each site with its own counter-based stream derived from
 * opts->seed and the layer index (deterministic on any thread count).
 * The stack applies num_layers such layers, then a LayerNorm if
 * final_norm (usual with pre-norm).
 */
typedef struct {
    int64_t num_layers;      /* N >= 1                                  */
    int64_t d_model;         /* E                                       */
    int64_t num_heads;       /* H (dot); ignored for additive (1 head)  */
    int64_t num_kv_heads;    /* 0 means H                               */
    int64_t dim_feedforward; /* F                                       */
    attn_attention_type attention;
    int64_t additive_dim; /* A for additive; 0 means E / 2           */
    attn_activation activation;
    int norm_first;        /* 0 post-norm, 1 pre-norm                 */
    int final_norm;        /* 1: LayerNorm after the last layer       */
    double layer_norm_eps; /* 0 means 1e-5                            */
} attn_encoder_config;

/* Defaults: 1 layer, E 512, 8 heads, F 2048, dot, ReLU, post-norm. */
ATTN_API void attn_encoder_config_init(attn_encoder_config *cfg);

typedef struct {
    attn_mha_params mha;           /* attention == DOT, else all NULL      */
    attn_additive_params additive; /* attention == ADDITIVE, else NULL     */
    float *w_o;                    /* (E, E) additive only, else NULL      */
    float *b_o;                    /* (E)    additive only, else NULL      */
    float *ln1_gamma, *ln1_beta;   /* (E)                                  */
    float *w_1;                    /* (F, E)                               */
    float *b_1;                    /* (F)                                  */
    float *w_2;                    /* (E, F)                               */
    float *b_2;                    /* (E)                                  */
    float *ln2_gamma, *ln2_beta;   /* (E)                                  */
} attn_encoder_layer_params;

/* Block layout: layer 0, layer 1, ..., then final gamma, beta (E each) if
 * final_norm. Each layer: its attention block (MHA layout with bias, or
 * additive layout with bias followed by w_o, b_o), ln1_gamma, ln1_beta,
 * w_1, b_1, w_2, b_2, ln2_gamma, ln2_beta. */
ATTN_API int64_t attn_encoder_param_count(const attn_encoder_config *cfg);
/* Named pointers of layer `layer` (0 .. num_layers - 1, else
 * ATTN_E_INVALID) into block (params or gradients, caller-owned, of
 * attn_encoder_param_count floats). */
ATTN_API attn_status attn_encoder_layer_view(const attn_encoder_config *cfg,
                                             float *block, int64_t layer,
                                             attn_encoder_layer_params *p);
/* gamma, beta of the final norm (NULL if !final_norm). */
ATTN_API attn_status attn_encoder_final_norm_view(
    const attn_encoder_config *cfg, float *block, float **gamma, float **beta);
/* Slice table of the whole block ("layers.0.attn.w_q", ..., "norm_beta"):
 * writes at most cap entries (slices may be NULL with cap 0), *count = the
 * number needed; names get prefix, offsets start at offset. */
ATTN_API attn_status attn_encoder_param_slices(const attn_encoder_config *cfg,
                                               const char *prefix,
                                               int64_t offset,
                                               attn_param_slice *slices,
                                               int64_t cap, int64_t *count);
/* Xavier init of every matrix, biases 0, LayerNorm gamma 1 and beta 0,
 * from seed; overwrites params. */
ATTN_API attn_status attn_encoder_init(const attn_encoder_config *cfg,
                                       float *params, uint64_t seed);
/* Floats of the workspace of one forward + backward over (B, L) (>= 1,
 * else ATTN_E_SHAPE; ATTN_E_NOMEM if it overflows). */
ATTN_API attn_status attn_encoder_workspace_size(const attn_encoder_config *cfg,
                                                 int64_t B, int64_t L,
                                                 size_t *floats);
/* Heads of the attention weights per layer: H (dot) or 1 (additive). */
ATTN_API int64_t attn_encoder_weight_heads(const attn_encoder_config *cfg);
/*
 *   x (B, L, E) input (add positions first if wanted), out (B, L, E)
 *   overwritten (may not alias x). weights NULL or (N, B, Hw, L, L) with
 *   Hw = attn_encoder_weight_heads: every layer's attention weights after
 *   dropout, overwritten. opts->mask is over (B, Hw, L, L): key_lengths for
 *   padding, causal for look-ahead. ws: workspace_size floats.
 */
ATTN_API attn_status attn_encoder_forward(const attn_encoder_config *cfg,
                                          const float *params, int64_t B,
                                          int64_t L, const float *x,
                                          const attn_layer_opts *opts,
                                          float *out, float *weights,
                                          float *ws);
/* The attention weights (B, Hw, L, L) of one layer, recomputed from what
 * the last forward saved in ws (dropout not applied). Overwritten. */
ATTN_API attn_status attn_encoder_layer_weights(const attn_encoder_config *cfg,
                                                const float *params, int64_t B,
                                                int64_t L,
                                                const attn_layer_opts *opts,
                                                const float *ws, int64_t layer,
                                                float *weights);
/* dout (B, L, E); grads (param_count floats) and dx (B, L, E, or NULL)
 * ADDED INTO. */
ATTN_API attn_status attn_encoder_backward(const attn_encoder_config *cfg,
                                           const float *params, int64_t B,
                                           int64_t L, const float *x,
                                           const attn_layer_opts *opts,
                                           const float *dout, float *ws,
                                           float *grads, float *dx);

/* --- Parameter files -------------------------------------------------- */
/*
 * A parameter file holds a kind ("additive", "mha", "encoder", or any
 * short name a caller picks), a config of up to ATTN_PARAMS_MAX_CONFIG
 * int64 values (doubles stored by bit pattern), the slice table and the
 * f32 block, closed by a CRC32; docs/params-format.md gives the layout.
 * Files are written to a temporary name, flushed and renamed (atomic).
 * A truncated, corrupted (CRC), wrong-version or wrong-kind file, or one
 * whose slices disagree with the config, is ATTN_E_FORMAT.
 */
#define ATTN_PARAMS_MAX_CONFIG 32
#define ATTN_PARAMS_KIND_MAX 16

typedef struct {
    char kind[ATTN_PARAMS_KIND_MAX]; /* NUL-terminated                      */
    int32_t config_len;              /* <= ATTN_PARAMS_MAX_CONFIG           */
    int64_t config[ATTN_PARAMS_MAX_CONFIG];
} attn_params_header;

/* Generic: writes header, slices and count floats of block. */
ATTN_API attn_status attn_params_save(const char *path,
                                      const attn_params_header *hdr,
                                      const attn_param_slice *slices,
                                      int64_t nslices, const float *block,
                                      int64_t count);
/* Generic: reads a file; *block and *slices are allocated (free with
 * attn_params_free). */
ATTN_API attn_status attn_params_load(const char *path, attn_params_header *hdr,
                                      attn_param_slice **slices,
                                      int64_t *nslices, float **block,
                                      int64_t *count);
ATTN_API void attn_params_free(void *p);

/* Typed: save a layer's block; load a file of that kind, returning its
 * config and a newly allocated block (attn_params_free). */
ATTN_API attn_status attn_additive_save(const char *path,
                                        const attn_additive_config *cfg,
                                        const float *params);
ATTN_API attn_status attn_additive_load(const char *path,
                                        attn_additive_config *cfg,
                                        float **params);
ATTN_API attn_status attn_mha_save(const char *path, const attn_mha_config *cfg,
                                   const float *params);
ATTN_API attn_status attn_mha_load(const char *path, attn_mha_config *cfg,
                                   float **params);
ATTN_API attn_status attn_encoder_save(const char *path,
                                       const attn_encoder_config *cfg,
                                       const float *params);
ATTN_API attn_status attn_encoder_load(const char *path,
                                       attn_encoder_config *cfg,
                                       float **params);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_LAYERS_H */
