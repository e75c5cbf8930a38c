/* The task model: token embedding (times sqrt(E)) plus sinusoidal
 * positions, an encoder stack from the layers, and a linear head giving
 * one distribution over output symbols per position. Forward and backward
 * side by side; every loop of this file runs in a fixed order, so the
 * model is bitwise the same on any thread count (the kernels inside the
 * encoder keep that promise themselves). */
#include "train.h"

#include <math.h>
#include <string.h>

attn_status attn_model_check(const attn_model_config *c) {
    if (!c) return attn__fail(ATTN_E_INVALID, "model config is NULL");
    if (c->vocab_in < 1 || c->vocab_out < 1 || c->max_len < 1 ||
        c->vocab_in > INT32_MAX || c->vocab_out > INT32_MAX)
        return attn__fail(ATTN_E_INVALID,
                          "model vocab_in %lld, vocab_out %lld"
                          " and max_len %lld must be >= 1 (vocabularies "
                          "within int32)",
                          (long long)c->vocab_in, (long long)c->vocab_out,
                          (long long)c->max_len);
    int64_t n;
    attn_status st = attn_encoder_param_slices(&c->enc, "enc.", 0, NULL, 0, &n);
    if (st) return st;
    if (!attn_model_param_count(c))
        return attn__fail(ATTN_E_NOMEM, "model parameter count overflows");
    return ATTN_OK;
}

/* Offsets of the parts of the block; 0 total on overflow. */
typedef struct {
    int64_t embed, enc, head_w, head_b, total;
} model_layout;

static model_layout layout(const attn_model_config *c) {
    model_layout m = {0, 0, 0, 0, 0};
    const int64_t E = c->enc.d_model;
    int64_t emb, head, enc = attn_encoder_param_count(&c->enc);
    if (enc < 1 || !attn__mul_i64(c->vocab_in, E, &emb) ||
        !attn__mul_i64(c->vocab_out, E, &head))
        return m;
    if (emb > INT64_MAX / 4 || enc > INT64_MAX / 4 || head > INT64_MAX / 4 ||
        c->vocab_out > INT64_MAX / 8)
        return m;
    m.enc = emb;
    m.head_w = m.enc + enc;
    m.head_b = m.head_w + head;
    m.total = m.head_b + c->vocab_out;
    return m;
}

int64_t attn_model_param_count(const attn_model_config *c) {
    if (!c || c->vocab_in < 1 || c->vocab_out < 1) return 0;
    return layout(c).total;
}

attn_status attn_model_param_slices(const attn_model_config *c,
                                    attn_param_slice *slices, int64_t cap,
                                    int64_t *count) {
    attn_status st = attn_model_check(c);
    if (st) return st;
    if (!count) return attn__fail(ATTN_E_INVALID, "count is NULL");
    const model_layout m = layout(c);
    const int64_t E = c->enc.d_model;
    int64_t n = 0, off = 0, k = 0;
    attn__slice_add(slices, cap, &n, "", "embed", &off, c->vocab_in, E,
                    ATTN_INIT_XAVIER);
    attn_param_slice *dst = slices && n < cap ? slices + n : NULL;
    st = attn_encoder_param_slices(&c->enc, "enc.", off, dst, dst ? cap - n : 0,
                                   &k);
    if (st) return st;
    n += k;
    off = m.head_w;
    attn__slice_add(slices, cap, &n, "", "head.w", &off, c->vocab_out, E,
                    ATTN_INIT_XAVIER);
    attn__slice_add(slices, cap, &n, "", "head.b", &off, c->vocab_out, 1,
                    ATTN_INIT_ZERO);
    ATTN_ASSERT(off == m.total);
    *count = n;
    return ATTN_OK;
}

static attn_status model_slices(const void *c, attn_param_slice *sl,
                                int64_t cap, int64_t *n) {
    return attn_model_param_slices(c, sl, cap, n);
}

attn_status attn__model_slices_alloc(const attn_model_config *c,
                                     attn_param_slice **slices, int64_t *n) {
    return attn__slices_alloc(model_slices, c, slices, n);
}

attn_status attn_model_init(const attn_model_config *c, float *params,
                            uint64_t seed) {
    return attn__init_by_slices(model_slices, c, params, seed);
}

/* Workspace: x (B L E) the encoder's input, h (B L E) its output, pe
 * (L E), dh and dx (B L E) for backward, then the encoder's own. */
typedef struct {
    float *x, *h, *pe, *dh, *dx, *enc;
} model_ws;

static attn_status ws_layout(const attn_model_config *c, int64_t B, int64_t L,
                             float *ws, model_ws *w, size_t *floats) {
    size_t enc;
    attn_status st = attn_encoder_workspace_size(&c->enc, B, L, &enc);
    if (st) return st;
    const size_t be = attn__size3(B, L, c->enc.d_model);
    const size_t le = attn__size3(L, c->enc.d_model, 1);
    if (!be || !le || be > SIZE_MAX / 64 || enc > SIZE_MAX / 8 - 4 * be - le)
        return attn__fail(ATTN_E_NOMEM, "model workspace size overflows");
    *floats = 4 * be + le + enc;
    if (ws && w) {
        w->x = ws;
        w->h = w->x + be;
        w->dh = w->h + be;
        w->dx = w->dh + be;
        w->pe = w->dx + be;
        w->enc = w->pe + le;
    }
    return ATTN_OK;
}

attn_status attn_model_workspace_size(const attn_model_config *c, int64_t B,
                                      int64_t L, size_t *floats) {
    attn_status st = attn_model_check(c);
    if (st) return st;
    if (!floats) return attn__fail(ATTN_E_INVALID, "floats is NULL");
    if (B < 1 || L < 1 || L > c->max_len)
        return attn__fail(ATTN_E_SHAPE,
                          "B=%lld L=%lld: B must be >= 1 and L "
                          "in [1, max_len %lld]",
                          (long long)B, (long long)L, (long long)c->max_len);
    return ws_layout(c, B, L, NULL, NULL, floats);
}

/* Validates a call and fills the workspace view and the encoder options
 * (the caller's, with key lengths from lengths). */
static attn_status check_call(const attn_model_config *c, const float *params,
                              int64_t B, int64_t L, const int32_t *tokens,
                              const int64_t *lengths,
                              const attn_layer_opts *opts, float *ws,
                              model_ws *w, attn_layer_opts *eo) {
    size_t floats;
    attn_status st = attn_model_workspace_size(c, B, L, &floats);
    if (st) return st;
    ATTN__NONNULL("params, tokens, opts, ws", params, tokens, opts, ws);
    if ((st = attn__ids_check(tokens, B * L, c->vocab_in, "tokens")) ||
        (st = attn__lengths_check(lengths, B, L, "lengths", "")))
        return st;
    ws_layout(c, B, L, ws, w, &floats);
    *eo = *opts;
    eo->mask.key_lengths = lengths;
    return ATTN_OK;
}

static attn_status
model_forward_body(const attn_model_config *c, const float *params, int64_t B,
                   int64_t L, const int32_t *tokens, const int64_t *lengths,
                   const attn_layer_opts *opts, float *logits, float *weights,
                   float *ws) {
    model_ws w;
    attn_layer_opts eo;
    attn_status st =
        check_call(c, params, B, L, tokens, lengths, opts, ws, &w, &eo);
    if (st) return st;
    if (!logits) return attn__fail(ATTN_E_INVALID, "logits is NULL");
    const model_layout m = layout(c);
    const int64_t E = c->enc.d_model;
    const float scale = (float)sqrt((double)E);
    if ((st = attn_positional_encoding(L, E, w.pe))) return st;
    const float *emb = params + m.embed;
    for (int64_t r = 0; r < B * L; r++) {
        const float *e = emb + (int64_t)tokens[r] * E, *pe = w.pe + (r % L) * E;
        float *x = w.x + r * E;
        for (int64_t k = 0; k < E; k++) x[k] = e[k] * scale + pe[k];
    }
    st = attn_encoder_forward(&c->enc, params + m.enc, B, L, w.x, &eo, w.h,
                              weights, w.enc);
    if (st) return st;
    return attn_linear_forward(B * L, E, c->vocab_out, w.h, params + m.head_w,
                               params + m.head_b, logits);
}

attn_status attn_model_forward(const attn_model_config *cfg,
                               const float *params, int64_t B, int64_t L,
                               const int32_t *tokens, const int64_t *lengths,
                               const attn_layer_opts *opts, float *logits,
                               float *weights, float *ws) {
    const int blas = attn__layer_blas_begin(opts);
    attn_status st = model_forward_body(cfg, params, B, L, tokens, lengths,
                                        opts, logits, weights, ws);
    attn__layer_end(blas);
    return st;
}

static attn_status
model_backward_body(const attn_model_config *c, const float *params, int64_t B,
                    int64_t L, const int32_t *tokens, const int64_t *lengths,
                    const attn_layer_opts *opts, const float *dlogits,
                    float *ws, float *grads) {
    model_ws w;
    attn_layer_opts eo;
    attn_status st =
        check_call(c, params, B, L, tokens, lengths, opts, ws, &w, &eo);
    if (st) return st;
    if (!dlogits || !grads)
        return attn__fail(ATTN_E_INVALID, "%s is NULL",
                          dlogits ? "grads" : "dlogits");
    const model_layout m = layout(c);
    const int64_t E = c->enc.d_model, n = B * L;
    memset(w.dh, 0, (size_t)(n * E) * sizeof(float));
    st =
        attn_linear_backward(n, E, c->vocab_out, w.h, params + m.head_w,
                             dlogits, grads + m.head_w, grads + m.head_b, w.dh);
    if (st) return st;
    memset(w.dx, 0, (size_t)(n * E) * sizeof(float));
    st = attn_encoder_backward(&c->enc, params + m.enc, B, L, w.x, &eo, w.dh,
                               w.enc, grads + m.enc, w.dx);
    if (st) return st;
    /* rows in order: tokens that repeat add in the same sequence always */
    const float scale = (float)sqrt((double)E);
    float *gemb = grads + m.embed;
    for (int64_t r = 0; r < n; r++) {
        float *g = gemb + (int64_t)tokens[r] * E;
        const float *d = w.dx + r * E;
        for (int64_t k = 0; k < E; k++) g[k] += d[k] * scale;
    }
    return ATTN_OK;
}

attn_status attn_model_backward(const attn_model_config *cfg,
                                const float *params, int64_t B, int64_t L,
                                const int32_t *tokens, const int64_t *lengths,
                                const attn_layer_opts *opts,
                                const float *dlogits, float *ws, float *grads) {
    const int blas = attn__layer_blas_begin(opts);
    attn_status st = model_backward_body(cfg, params, B, L, tokens, lengths,
                                         opts, dlogits, ws, grads);
    attn__layer_end(blas);
    return st;
}
