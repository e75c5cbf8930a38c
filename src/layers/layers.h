/* Internal helpers shared by the layer files (src/layers); not installed. */
#ifndef ATTN_LAYERS_INTERNAL_H
#define ATTN_LAYERS_INTERNAL_H

#include "attn_layers.h"
#include "../kernels/blas.h"
#include "../kernels/kernels.h"

#include <math.h>
#include <stddef.h>
#include <omp.h>

/* Checks a pointer argument: ATTN_E_INVALID naming it when NULL. */
#define ATTN__NEED(ptr)                                                        \
    do {                                                                       \
        if (!(ptr)) return attn__fail(ATTN_E_INVALID, "%s is NULL", #ptr);     \
    } while (0)

/* n floats of x are finite, else ATTN_E_NONFINITE naming it. */
attn_status attn__check_finite_f32(const float *x, int64_t n, const char *name);

/* Product a*b*c of sizes, 0 if it overflows size_t. */
size_t attn__size3(int64_t a, int64_t b, int64_t c);

/* Lays out a layer's workspace: n consecutive parts of sz[i] floats, part
 * i at *dst[i] (not written when ws is NULL: sizing only). Returns the
 * total floats, 0 when a part is empty (an overflowed size) or the total
 * overflows. */
size_t attn__ws_carve(float *ws, const size_t *sz, float **const *dst, int n);

/* A model's slice table (its *_param_slices with prefix "" and offset 0),
 * in the form the typed files and the helpers below take. */
typedef attn_status (*attn__slices_fn)(const void *cfg, attn_param_slice *sl,
                                       int64_t cap, int64_t *n);
attn_status attn__additive_slices(const void *cfg, attn_param_slice *sl,
                                  int64_t cap, int64_t *n);
attn_status attn__mha_slices(const void *cfg, attn_param_slice *sl, int64_t cap,
                             int64_t *n);
/* The encoder's forward for inference: nothing kept for a backward, so
 * the workspace (attn__encoder_infer_ws_size floats) holds one layer's
 * part, which every layer reuses: a sixth of the memory for BERT's six
 * layers, and none of it touched for the first time per layer. */
attn_status attn__encoder_infer_ws_size(const attn_encoder_config *c, int64_t B,
                                        int64_t L, size_t *floats);
attn_status attn__encoder_infer(const attn_encoder_config *c,
                                const float *params, int64_t B, int64_t L,
                                const float *x, const attn_layer_opts *opts,
                                float *out, float *weights, float *ws);
attn_status attn__encoder_slices(const void *cfg, attn_param_slice *sl,
                                 int64_t cap, int64_t *n);
/* Allocates cfg's slice table into *slices (free with attn__free; NULL on
 * failure before the allocation), n entries. */
attn_status attn__slices_alloc(attn__slices_fn fn, const void *cfg,
                               attn_param_slice **slices, int64_t *n);
/* The *_init functions: the config's errors first, then params NULL, then
 * attn_params_init over its slices. */
attn_status attn__init_by_slices(attn__slices_fn fn, const void *cfg,
                                 float *params, uint64_t seed);

/* Dropout on activations: x[i] (i = 0..n-1 of stream) is zeroed or scaled by
 * 1/(1-p), the decision drawn from Philox keyed by (seed, stream, i). The
 * same call on a gradient applies the derivative. OpenMP inside. */
void attn__dropout_apply(uint64_t seed, uint32_t stream, double p, float *x,
                         int64_t n, int threads);

/* Appends one slice to a table (count always grows; written if < cap). */
void attn__slice_add(attn_param_slice *slices, int64_t cap, int64_t *count,
                     const char *prefix, const char *name, int64_t *offset,
                     int64_t rows, int64_t cols, attn_init_kind init);

/* Activations of the FFN, elementwise: y = act(x); dx = dy * act'(x)
 * (overwritten; dx may be dy). */
void attn__act_forward(attn_activation act, const float *x, float *y, int64_t n,
                       int threads);
void attn__act_backward(attn_activation act, const float *x, const float *dy,
                        float *dx, int64_t n, int threads);

/* attn_layernorm_forward / backward with the caller's OpenMP thread count
 * (0 = the default); rows are independent, so any count gives the same
 * bits. The public functions call these with 0. */
attn_status attn__layernorm_forward(int64_t n, int64_t d, const float *x,
                                    const float *gamma, const float *beta,
                                    double eps, float *y, float *mean,
                                    float *rstd, int threads);
attn_status attn__layernorm_backward(int64_t n, int64_t d, const float *x,
                                     const float *gamma, const float *mean,
                                     const float *rstd, const float *dy,
                                     float *dgamma, float *dbeta, float *dx,
                                     int threads);

/* The rows of attn__layernorm_forward (ln_rows.c), arguments checked by
 * the caller; with a not NULL, the rows normalized are r = x + a (written
 * to r) instead of x. */
void attn__ln_rows(int64_t n, int64_t d, const float *x, const float *a,
                   float *r, const float *gamma, const float *beta, double eps,
                   float *y, float *mean, float *rstd, int threads);

/* Resolved additive config and the (B, Lq, Lk) validation. */
attn_status attn__additive_check_cfg(const attn_additive_config *cfg);
attn_status attn__mha_check_cfg(const attn_mha_config *cfg, int64_t *hd,
                                int64_t *hkv);

/* Weights (B, 1, L, L) of additive attention from the projections saved in
 * its workspace (no dropout). Used by attn_encoder_layer_weights. */
attn_status attn__additive_weights_from_ws(const attn_additive_config *cfg,
                                           const float *params, int64_t B,
                                           int64_t Lq, int64_t Lk,
                                           const attn_layer_opts *opts,
                                           const float *ws, float *weights);
/* The same for multi-head attention: (B, H, Lq, Lk). */
attn_status attn__mha_weights_from_ws(const attn_mha_config *cfg, int64_t B,
                                      int64_t Lq, int64_t Lk,
                                      const attn_layer_opts *opts,
                                      const float *ws, float *weights);

/* Validates layer options against attention shapes (B, H, Lq, Lk). */
attn_status attn__layer_opts_check(const attn_layer_opts *o, int64_t B,
                                   int64_t H, int64_t Lq, int64_t Lk);

/* The encoder's random streams: the attention-weight dropout of layer l
 * uses seed attn__enc_seed(seed, l); dropout of activations at site s
 * (1 attention output, 2 FFN hidden, 3 FFN output) uses stream
 * attn__enc_stream(l, s) of the caller's seed. */
static inline uint64_t attn__enc_seed(uint64_t seed, int64_t layer) {
    return seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(layer + 1));
}
static inline uint32_t attn__enc_stream(int64_t layer, int site) {
    return (uint32_t)(layer * 4 + site);
}

/* OpenMP thread count for a layer call (0 = the default). */
static inline int attn__threads(const attn_layer_opts *o) {
    return o && o->threads > 0 ? o->threads : 0;
}

int attn__linear_bf16_scope(int on);

/* OpenBLAS threads are process-wide, not per call. A layer call asked to
 * run on one thread keeps its sgemms on the calling thread with the
 * kernels' guard (src/kernels/blas.c): otherwise OpenBLAS's idle pool
 * spins beside it (small training steps ran 2-7x slower). Other counts
 * leave the caller's BLAS setting alone. Nested calls are no-ops.
 * impl ATTN_IMPL_FLASH_BF16 also turns the calling thread's bf16 switch on
 * (linear_bf16.c) for the call: the layer's linear maps, forward and
 * backward, run on bf16 products. Returns what attn__layer_end takes. */
static inline int attn__layer_blas_begin(const attn_layer_opts *o) {
    const int was = attn__linear_bf16_scope(1);
    if (!was && !(o && o->impl == ATTN_IMPL_FLASH_BF16))
        attn__linear_bf16_scope(0);
    return (attn__threads(o) == 1 ? attn__blas_single_begin() : 1) * 2 + was;
}
/* Undoes attn__layer_blas_begin. */
static inline void attn__layer_end(int token) {
    attn__linear_bf16_scope(token & 1);
    attn__blas_single_end(token >> 1);
}

/* ---- shared by the encoder and the decoder (sublayer.c) --------------- */

/* The attention configurations of a layer of width E: multi-head (H
 * heads, Hkv key/value heads) and additive (attention width additive_dim,
 * 0: E / 2), and the LayerNorm epsilon (0: 1e-5). */
static inline attn_mha_config attn__layer_mha_cfg(int64_t E, int64_t H,
                                                  int64_t Hkv) {
    attn_mha_config m = {E, H, Hkv, 0, 0, 1};
    return m;
}
static inline attn_additive_config attn__layer_add_cfg(int64_t E,
                                                       int64_t additive_dim) {
    int64_t A = additive_dim ? additive_dim : E / 2;
    attn_additive_config a = {E, E, E, A > 0 ? A : 1, 1, 0};
    return a;
}
static inline double attn__layer_ln_eps(double eps) {
    return eps > 0 ? eps : 1e-5;
}

/* The configuration fields the encoder and the decoder share, and the
 * bounds of the sizes. */
typedef struct {
    int64_t num_layers, d_model, dim_feedforward, additive_dim;
    attn_activation activation;
    int norm_first, final_norm;
    double layer_norm_eps;
    int64_t max_d_model, max_ff;
} attn__stack_fields;
/* ATTN_E_INVALID naming who ("encoder", "decoder") and the values. */
attn_status attn__stack_check(const char *who, const attn__stack_fields *f);

/* RMSNorm (rmsnorm.c): y = x rstd gamma (+ beta if not NULL) over n rows
 * of d, rstd = 1 / sqrt(mean(x^2) + eps) saved per row (or NULL); the
 * backward ADDS into dgamma, dbeta, dx (each may be NULL). */
void attn__rmsnorm_forward(int64_t n, int64_t d, const float *x,
                           const float *gamma, const float *beta, double eps,
                           float *y, float *rstd, int threads);
void attn__rmsnorm_backward(int64_t n, int64_t d, const float *x,
                            const float *gamma, const float *rstd,
                            const float *dy, float *dgamma, float *dbeta,
                            float *dx, int threads);
/* SwiGLU over n rows: pre (n, 2F) holds the gate then the up projection,
 * h (n, F) = silu(gate) * up. The backward turns g (dh, n F) into d pre
 * (n 2F) in place: g must hold n 2F floats. */
void attn__swiglu_forward(int64_t n, int64_t F, const float *pre, float *h,
                          int threads);
void attn__swiglu_backward(int64_t n, int64_t F, const float *pre, float *g);

/* One sublayer's residual connection and LayerNorm around its body:
 * pre-norm out = x + drop(body(LN(x))), post-norm out = LN(x +
 * drop(body(x))), drop the output dropout of stream `stream` of seed. The
 * caller runs the body between the two halves of each direction. */
typedef struct {
    int64_t n, E; /* rows, features                                  */
    int norm_first, th;
    int rms; /* 1: RMSNorm (gamma, beta; mean unused) instead of LayerNorm */
    double eps;
    const float *gamma, *beta;
    float *dgamma, *dbeta; /* added into by backward; NULL: not wanted */
    const float *x;        /* the input (n E), kept until backward     */
    float *lny, *r;        /* saved: the LayerNorm output, x + body     */
    float *mean, *rstd;    /* saved: the norm's statistics (n)          */
    uint64_t seed;
    uint32_t stream;
    double p;
} attn__sublayer;
/* Forward, first half: the body's input (LN(x) or x). */
const float *attn__sublayer_in(const attn__sublayer *s);
/* Second half, after the body wrote a (n E; dropped in place): the
 * sublayer's output (r or lny). */
const float *attn__sublayer_out(const attn__sublayer *s, float *a);
/* Backward, first half: g (n E) holds the gradient of the output. Writes
 * the gradient of the body's output into dy, sets *bin to the body's
 * input, and returns where the body must ADD the gradient of its input
 * (t, zeroed, or g). */
float *attn__sublayer_back_in(const attn__sublayer *s, float *g, float *dy,
                              float *t, const float **bin);
/* Second half, after the body: g holds the gradient of x. */
void attn__sublayer_back_out(const attn__sublayer *s, float *g, const float *t);

/* The feed-forward body: out = W2 drop(act(W1 in + b1)) + b2 over n rows
 * of E, hidden width F, the hidden dropout of stream `stream`. */
typedef struct {
    int64_t n, E, F;
    attn_activation act;
    const float *w_1, *b_1, *w_2, *b_2;
    float *dw_1, *db_1, *dw_2, *db_2; /* backward; NULL: not wanted     */
    float *hpre, *hact; /* saved: (n F) before and after act ((n 2F) hpre
                           for SwiGLU)                               */
    uint64_t seed;
    uint32_t stream;
    double p;
    int th;
} attn__ffn;
attn_status attn__ffn_forward(const attn__ffn *f, const float *in, float *out);
/* dy (n E) -> the gradient of in ADDED into din; gh (n F; n 2F for
 * SwiGLU) is scratch. */
attn_status attn__ffn_backward(const attn__ffn *f, const float *in,
                               const float *dy, float *gh, float *din);

/* ---- parameter tables (ptable.c) -------------------------------------- */

/* One parameter of a layer: its name (after the layer's prefix), shape,
 * init and the byte offset of its float * in the layer's view struct.
 * A layer kind's table, built from its config, drives its count, views
 * (of parameters and of gradients), slices, init and typed files; rows
 * are in block order. */
#define ATTN__PTAB_MAX 32
typedef struct {
    char name[32];
    int64_t rows, cols;
    attn_init_kind init;
    size_t view;
} attn__prow;
typedef struct {
    attn__prow r[ATTN__PTAB_MAX];
    int n; /* ATTN__PTAB_MAX + 1 once a table outgrew the bound */
} attn__ptab;
/* Appends a row named sub + name. */
void attn__ptab_add(attn__ptab *t, const char *sub, const char *name,
                    int64_t rows, int64_t cols, attn_init_kind init,
                    size_t view);
/* A LayerNorm's rows: ln_gamma (E, ones) and ln_beta (E, zeros). */
void attn__ptab_ln(attn__ptab *t, const char *ln, int64_t E, size_t gamma,
                   size_t beta);
/* The tables of the attention layers, their names under sub and their
 * view fields at base + the field's offset in attn_mha_params /
 * attn_additive_params (configs already checked). */
void attn__mha_ptab(attn__ptab *t, const attn_mha_config *c, const char *sub,
                    size_t base);
void attn__additive_ptab(attn__ptab *t, const attn_additive_config *c,
                         const char *sub, size_t base);
/* The feed-forward network's rows w_1 (F1, E), b_1 (F1), w_2 (E, F), b_2
 * (E) at the offsets of the four fields (F1: 2F for SwiGLU). */
void attn__ffn_ptab(attn__ptab *t, int64_t E, int64_t F, int64_t F1,
                    const size_t off[4]);
/* Floats of the table; 0 when a size overflows or passes INT64_MAX / 4. */
int64_t attn__ptab_count(const attn__ptab *t);
/* Points each row's view field at its floats of block (fields of absent
 * rows are left as they are: the caller zeroes the view first). */
void attn__ptab_view(const attn__ptab *t, float *block, void *view);
/* Appends the rows as slices named prefix + name from *offset. */
void attn__ptab_slices(const attn__ptab *t, const char *prefix, int64_t *offset,
                       attn_param_slice *slices, int64_t cap, int64_t *n);
/* Zeroes size bytes of view, then points the rows' fields into block. */
attn_status attn__ptab_view_to(const attn__ptab *t, float *block, void *view,
                               size_t size);
/* A single layer (MHA, additive attention): its name, its config's check
 * and its table (names under "", view fields of its params struct). */
typedef struct {
    const char *who;
    attn_status (*check)(const void *cfg);
    void (*table)(const void *cfg, attn__ptab *t);
} attn__layer_kind;
/* Its public functions: the parameter count (0 for an invalid config or
 * an overflow), the view and the slice table. */
int64_t attn__kind_count(const attn__layer_kind *k, const void *cfg);
attn_status attn__kind_view(const attn__layer_kind *k, const void *cfg,
                            float *block, void *view, size_t size);
attn_status attn__kind_slices(const attn__layer_kind *k, const void *cfg,
                              const char *prefix, int64_t offset,
                              attn_param_slice *slices, int64_t cap,
                              int64_t *count);
/* A stack of layers (the encoder, the decoder): its name, its config's
 * check, the table of one layer, where the config keeps num_layers and
 * d_model (int64) and final_norm (int), and how many characters of a
 * prefix its slice names keep (before "layers.l." and before "norm"). */
typedef struct {
    const char *who;
    attn_status (*check)(const void *cfg);
    void (*layer)(const void *cfg, attn__ptab *t);
    size_t num_layers, d_model, final_norm;
    int cut, norm_cut;
} attn__stack_kind;
/* The stack's public functions: the parameter count (0 for an invalid
 * config or an overflow), a layer's view, the final LayerNorm's view
 * (NULL without final_norm) and the slice table ("<prefix>layers.l."
 * then "<prefix>norm"). */
int64_t attn__stack_count(const attn__stack_kind *k, const void *cfg);
attn_status attn__stack_view(const attn__stack_kind *k, const void *cfg,
                             float *block, int64_t layer, void *view,
                             size_t size);
attn_status attn__stack_norm_view(const attn__stack_kind *k, const void *cfg,
                                  float *block, float **gamma, float **beta);
attn_status attn__stack_slices(const attn__stack_kind *k, const void *cfg,
                               const char *prefix, int64_t offset,
                               attn_param_slice *slices, int64_t cap,
                               int64_t *count);

/* ---- typed parameter files (params.c, docs/params-format.md) ---------- */

/* A config field's place and C type; its word in the file is an int64
 * (the bits of the double for an f64 field). ZERO: a reserved word,
 * written 0 and not read; AGAIN: an int field stored a second time (a
 * consistency check: loading refuses a file where the two differ). */
typedef enum {
    ATTN__CFG_I64,
    ATTN__CFG_INT,
    ATTN__CFG_F64,
    ATTN__CFG_ZERO,
    ATTN__CFG_AGAIN
} attn__cfg_kind;
typedef struct {
    size_t off;
    attn__cfg_kind kind;
} attn__cfg_field;
#define ATTN__CFG(type, member, kind)                                          \
    { offsetof(type, member), kind }

/* A typed file: its kind, its config's fields, and the slice table its
 * config implies (the parameter count is where the slices end). */
typedef struct {
    const char *kind;
    const attn__cfg_field *fields;
    int nfields; /* <= ATTN_PARAMS_MAX_CONFIG */
    size_t size; /* of the config struct */
    attn__slices_fn slices;
} attn__typed_kind;

/* Saves cfg and params with the slice table the config implies. */
attn_status attn__save_kind(const attn__typed_kind *k, const char *path,
                            const void *cfg, const float *params);
/* Loads a typed file into cfg and a newly allocated block, after checking
 * its words (ints, repeats) and that its slices are the ones its config
 * implies. */
attn_status attn__load_kind(const attn__typed_kind *k, const char *path,
                            void *cfg, float **params);

/* ---- linear maps on packed weights (linear_packed.c) ------------------ */

/* A set of weights (W_i: out_i x in_i, row-major, never changed while the
 * set lives) packed once for the f32 linear maps; NULL where attn was
 * built without oneDNN or packing failed (the maps then run on OpenBLAS). */
typedef struct attn__packed_set attn__packed_set;
attn__packed_set *attn__packed_build(int count, const float *const *w,
                                     const int64_t *in, const int64_t *out);
void attn__packed_free(attn__packed_set *s);

/* Sets the calling thread's set (NULL: none) that attn_linear_forward
 * looks its weights up in; returns the previous one, for the caller to
 * restore. */
const attn__packed_set *attn__linear_packed_scope(const attn__packed_set *s);

/* 1 when the calling thread's set holds W (out x in). */
int attn__linear_packed_has(const float *w, int64_t in, int64_t out);

/* y (n, out) = x W^T + b through the scope's packed copy of W, then, when
 * yact is not NULL, yact = act(y) on each block while it is in cache.
 * Returns 1 when done, 0 when W (with a bias) is not in the scope's set or
 * n is too small to gain, -1 on a failure (y is then to be recomputed). */
int attn__linear_packed_forward(int64_t n, int64_t in, int64_t out,
                                const float *x, const float *w, const float *b,
                                float *y, attn_activation act, float *yact);

/* ---- bf16 linear maps (linear_bf16.c) --------------------------------- */

/* Sets the calling thread's switch (1: attn_linear_forward runs on bf16
 * products where the CPU has AVX512_BF16); returns its previous value, for
 * the caller to restore. */
int attn__linear_bf16_scope(int on);

/* 1 when the switch is on and the CPU runs bf16 products. */
int attn__linear_bf16_active(void);

/* y (n, out) = x W^T + b on bf16 products with f32 accumulation (x and W
 * rounded to bf16); sizes checked by the caller. */
attn_status attn__linear_forward_bf16(int64_t n, int64_t in, int64_t out,
                                      const float *x, const float *w,
                                      const float *b, float *y);

/* attn_linear_backward on the same products (dy, W and x rounded to bf16;
 * db summed in f32); arguments checked by the caller. */
attn_status attn__linear_backward_bf16(int64_t n, int64_t in, int64_t out,
                                       const float *x, const float *w,
                                       const float *dy, float *dw, float *db,
                                       float *dx);

#endif
