/* The generation models: an encoder-decoder (source and target
 * embeddings, optionally shared; an encoder stack; a decoder stack with
 * cross-attention) and a decoder-only causal model, each with a linear
 * head optionally tied to the target embedding. Teacher-forced forward and
 * backward side by side, and the label-smoothed cross-entropy. Loops run in
 * a fixed order, so results are the same bits on any thread count. */
#include "transformer.h"

#include <math.h>
#include <string.h>

/* Seed of the decoder's dropout streams, distinct from the encoder's. */
#define DEC_SEED_MIX 0xD1CE5EEDF00DBA5Eull

const char *attn_model_kind_name(attn_model_kind k) {
    return k == ATTN_MODEL_ENCDEC    ? "encdec"
           : k == ATTN_MODEL_DECODER ? "decoder"
                                     : "?";
}

void attn_transformer_config_init(attn_transformer_config *c,
                                  attn_model_kind kind) {
    if (!c) return;
    memset(c, 0, sizeof *c);
    c->kind = kind;
    attn_encoder_config *e = &c->enc;
    attn_encoder_config_init(e);
    e->num_layers = 2;
    e->d_model = 64;
    e->num_heads = 4;
    e->dim_feedforward = 256;
    e->norm_first = 1;
    e->final_norm = 1;
    attn_decoder_config *d = &c->dec;
    attn_decoder_config_init(d);
    d->num_layers = 2;
    d->d_model = 64;
    d->num_heads = 4;
    d->dim_feedforward = 256;
    d->norm_first = 1;
    d->final_norm = 1;
    d->cross = kind == ATTN_MODEL_ENCDEC;
}

static int is_encdec(const attn_transformer_config *c) {
    return c->kind == ATTN_MODEL_ENCDEC;
}

attn_status attn_transformer_check(const attn_transformer_config *c) {
    if (!c) return attn__fail(ATTN_E_INVALID, "model config is NULL");
    if (c->kind != ATTN_MODEL_ENCDEC && c->kind != ATTN_MODEL_DECODER)
        return attn__fail(ATTN_E_INVALID,
                          "model kind is %d (encdec 0, "
                          "decoder 1)",
                          (int)c->kind);
    attn_status st = attn_decoder_check(&c->dec);
    if (st) return st;
    const attn_decoder_config *d = &c->dec;
    if (d->norm || d->attn_no_bias || d->rope.theta != 0 || d->sliding_window ||
        d->activation == ATTN_ACT_SWIGLU)
        return attn__fail(ATTN_E_UNSUPPORTED,
                          "the task models use the LayerNorm decoder with "
                          "sinusoidal positions: RMSNorm, SwiGLU, attention "
                          "without biases, rotary positions and windows are "
                          "the pretrained Llama family's (attn_llama_*)");
    if (c->dec.cross != is_encdec(c))
        return attn__fail(ATTN_E_INVALID,
                          "a%s model needs dec.cross = %d, not "
                          "%d",
                          is_encdec(c) ? "n encdec" : " decoder-only",
                          is_encdec(c), c->dec.cross);
    if (c->vocab_tgt < 1 || c->vocab_tgt > INT32_MAX || c->max_tgt < 1 ||
        c->max_tgt > (1 << 24))
        return attn__fail(ATTN_E_INVALID,
                          "model vocab_tgt %lld and max_tgt "
                          "%lld must be >= 1 (vocab within int32, length <= "
                          "2^24)",
                          (long long)c->vocab_tgt, (long long)c->max_tgt);
    if ((c->share_embeddings != 0 && c->share_embeddings != 1) ||
        (c->tie_output != 0 && c->tie_output != 1))
        return attn__fail(ATTN_E_INVALID,
                          "share_embeddings (%d) and "
                          "tie_output (%d) must be 0 or 1",
                          c->share_embeddings, c->tie_output);
    if (is_encdec(c)) {
        int64_t k;
        if ((st = attn_encoder_param_slices(&c->enc, "", 0, NULL, 0, &k)))
            return st;
        if (c->enc.d_model != c->dec.d_model)
            return attn__fail(ATTN_E_INVALID,
                              "enc.d_model %lld differs from "
                              "dec.d_model %lld",
                              (long long)c->enc.d_model,
                              (long long)c->dec.d_model);
        if (c->vocab_src < 1 || c->vocab_src > INT32_MAX || c->max_src < 1 ||
            c->max_src > (1 << 24))
            return attn__fail(ATTN_E_INVALID,
                              "model vocab_src %lld and "
                              "max_src %lld must be >= 1",
                              (long long)c->vocab_src, (long long)c->max_src);
        if (c->share_embeddings && c->vocab_src != c->vocab_tgt)
            return attn__fail(ATTN_E_INVALID,
                              "shared embeddings need "
                              "vocab_src (%lld) == vocab_tgt (%lld)",
                              (long long)c->vocab_src, (long long)c->vocab_tgt);
    } else if (c->share_embeddings) {
        return attn__fail(ATTN_E_INVALID, "share_embeddings needs an encdec "
                                          "model");
    }
    if (!attn_transformer_param_count(c))
        return attn__fail(ATTN_E_NOMEM, "model parameter count overflows");
    return ATTN_OK;
}

/* Offsets of the parts of the block (src == tgt when shared; head_w ==
 * tgt when tied); total 0 on overflow. */
typedef attn__tlayout tlayout;
static tlayout layout(const attn_transformer_config *c);

attn__tlayout attn__transformer_layout(const attn_transformer_config *c) {
    return layout(c);
}

static tlayout layout(const attn_transformer_config *c) {
    tlayout m;
    memset(&m, 0, sizeof m);
    const int64_t E = c->dec.d_model;
    int64_t es = 0, et, enc = 0, dec = attn_decoder_param_count(&c->dec);
    if (dec < 1 || !attn__mul_i64(c->vocab_tgt, E, &et)) return m;
    if (is_encdec(c)) {
        enc = attn_encoder_param_count(&c->enc);
        if (enc < 1 || !attn__mul_i64(c->vocab_src, E, &es)) return m;
        if (c->share_embeddings) es = 0;
    }
    const int64_t lim = INT64_MAX / 8;
    if (es > lim || et > lim || enc > lim || dec > lim) return m;
    int64_t off = 0;
    m.src = off;
    off += es;
    m.tgt = off;
    off += et;
    if (c->share_embeddings) m.src = m.tgt;
    m.enc = off;
    off += enc;
    m.dec = off;
    off += dec;
    m.head_w = c->tie_output ? m.tgt : off;
    if (!c->tie_output) off += et;
    m.head_b = off;
    m.total = off + c->vocab_tgt;
    return m;
}

int64_t attn_transformer_param_count(const attn_transformer_config *c) {
    if (!c || c->vocab_tgt < 1 || (is_encdec(c) && c->vocab_src < 1)) return 0;
    return layout(c).total;
}

attn_status attn_transformer_param_slices(const attn_transformer_config *c,
                                          attn_param_slice *slices, int64_t cap,
                                          int64_t *count) {
    attn_status st = attn_transformer_check(c);
    if (st) return st;
    if (!count) return attn__fail(ATTN_E_INVALID, "count is NULL");
    const tlayout m = layout(c);
    const int64_t E = c->dec.d_model;
    int64_t n = 0, off = 0, k = 0;
    if (is_encdec(c) && !c->share_embeddings)
        attn__slice_add(slices, cap, &n, "", "embed.src", &off, c->vocab_src, E,
                        ATTN_INIT_XAVIER);
    attn__slice_add(slices, cap, &n, "", "embed.tgt", &off, c->vocab_tgt, E,
                    ATTN_INIT_XAVIER);
    if (is_encdec(c)) {
        st = attn_encoder_param_slices(&c->enc, "enc.", off,
                                       slices && n < cap ? slices + n : NULL,
                                       slices && n < cap ? cap - n : 0, &k);
        if (st) return st;
        n += k;
    }
    off = m.dec;
    st = attn_decoder_param_slices(&c->dec, "dec.", off,
                                   slices && n < cap ? slices + n : NULL,
                                   slices && n < cap ? cap - n : 0, &k);
    if (st) return st;
    n += k;
    off = m.dec + attn_decoder_param_count(&c->dec);
    if (!c->tie_output)
        attn__slice_add(slices, cap, &n, "", "head.w", &off, c->vocab_tgt, E,
                        ATTN_INIT_XAVIER);
    attn__slice_add(slices, cap, &n, "", "head.b", &off, c->vocab_tgt, 1,
                    ATTN_INIT_ZERO);
    ATTN_ASSERT(off == m.total);
    *count = n;
    return ATTN_OK;
}

static attn_status tr_slices(const void *c, attn_param_slice *sl, int64_t cap,
                             int64_t *n) {
    return attn_transformer_param_slices(c, sl, cap, n);
}

attn_status attn__transformer_slices_alloc(const attn_transformer_config *c,
                                           attn_param_slice **slices,
                                           int64_t *n) {
    return attn__slices_alloc(tr_slices, c, slices, n);
}

attn_status attn_transformer_init(const attn_transformer_config *c,
                                  float *params, uint64_t seed) {
    return attn__init_by_slices(tr_slices, c, params, seed);
}

/* ---- workspace -------------------------------------------------------- */

typedef struct {
    float *xs, *mem, *dmem, *dxs, *xt, *h, *dh, *dxt, *pe, *enc, *dec;
} tws;

static attn_status ws_layout(const attn_transformer_config *c, int64_t B,
                             int64_t Ls, int64_t Lt, float *ws, tws *w,
                             size_t *floats) {
    const int ed = is_encdec(c);
    if (!ed) Ls = 1;
    size_t enc = 0, dec;
    attn_status st;
    if (ed && (st = attn_encoder_workspace_size(&c->enc, B, Ls, &enc)))
        return st;
    if ((st = attn_decoder_workspace_size(&c->dec, B, Lt, Ls, &dec))) return st;
    const int64_t E = c->dec.d_model, Lm = Ls > Lt ? Ls : Lt;
    const size_t bs = ed ? attn__size3(B, Ls, E) : 0,
                 bt = attn__size3(B, Lt, E);
    const size_t pe = attn__size3(Lm, E, 1), lim = SIZE_MAX / 64;
    if ((ed && !bs) || !bt || !pe || bs > lim || bt > lim || pe > lim ||
        enc > lim || dec > lim)
        return attn__fail(ATTN_E_NOMEM, "model workspace size overflows");
    *floats = 4 * bs + 4 * bt + pe + enc + dec;
    if (ws && w) {
        float *x = ws;
        w->xs = x;
        x += bs;
        w->mem = x;
        x += bs;
        w->dmem = x;
        x += bs;
        w->dxs = x;
        x += bs;
        w->xt = x;
        x += bt;
        w->h = x;
        x += bt;
        w->dh = x;
        x += bt;
        w->dxt = x;
        x += bt;
        w->pe = x;
        x += pe;
        w->enc = x;
        x += enc;
        w->dec = x;
    }
    return ATTN_OK;
}

attn_status attn_transformer_workspace_size(const attn_transformer_config *c,
                                            int64_t B, int64_t Ls, int64_t Lt,
                                            size_t *floats) {
    attn_status st = attn_transformer_check(c);
    if (st) return st;
    if (!floats) return attn__fail(ATTN_E_INVALID, "floats is NULL");
    if (B < 1 || Lt < 1 || Lt > c->max_tgt ||
        (is_encdec(c) && (Ls < 1 || Ls > c->max_src)))
        return attn__fail(ATTN_E_SHAPE,
                          "B=%lld Ls=%lld Lt=%lld: B must be >= "
                          "1, Lt in [1, max_tgt %lld]%s",
                          (long long)B, (long long)Ls, (long long)Lt,
                          (long long)c->max_tgt,
                          is_encdec(c) ? " and Ls in [1, max_src]" : "");
    return ws_layout(c, B, Ls, Lt, NULL, NULL, floats);
}

static attn_status check_call(const attn_transformer_config *c,
                              const float *params, int64_t B, int64_t Ls,
                              const int32_t *src, const int64_t *src_lengths,
                              int64_t Lt, const int32_t *tgt,
                              const attn_layer_opts *opts, float *ws, tws *w) {
    size_t floats;
    attn_status st = attn_transformer_workspace_size(c, B, Ls, Lt, &floats);
    if (st) return st;
    if (!params || !tgt || !opts || !ws || (is_encdec(c) && !src))
        return attn__fail(ATTN_E_INVALID, "%s is NULL",
                          !params ? "params"
                          : !tgt  ? "tgt"
                          : !opts ? "opts"
                          : !ws   ? "ws"
                                  : "src");
    if ((st = attn__ids_check(tgt, B * Lt, c->vocab_tgt, "tgt"))) return st;
    if (is_encdec(c) &&
        ((st = attn__ids_check(src, B * Ls, c->vocab_src, "src")) ||
         (st = attn__lengths_check(src_lengths, B, Ls, "src_lengths", ""))))
        return st;
    return ws_layout(c, B, Ls, Lt, ws, w, &floats);
}

void attn__embed_rows(const float *table, const int32_t *ids, int64_t n,
                      int64_t L, int64_t E, const float *pe,
                      const int64_t *positions, float *x) {
    const float scale = (float)sqrt((double)E);
    for (int64_t r = 0; r < n; r++) {
        const int64_t at = positions ? positions[r] : r % L;
        const float *e = table + (int64_t)ids[r] * E, *p = pe + at * E;
        float *y = x + r * E;
        for (int64_t k = 0; k < E; k++) y[k] = e[k] * scale + p[k];
    }
}

/* x (B L E) = table[ids] * sqrt(E) + pe[position]. */
static void embed(const float *table, const int32_t *ids, int64_t B, int64_t L,
                  int64_t E, const float *pe, float *x) {
    attn__embed_rows(table, ids, B * L, L, E, pe, NULL, x);
}

/* Rows in order: repeated tokens always add in the same sequence. */
static void embed_backward(float *gtable, const int32_t *ids, int64_t n,
                           int64_t E, const float *dx) {
    const float scale = (float)sqrt((double)E);
    for (int64_t r = 0; r < n; r++) {
        float *g = gtable + (int64_t)ids[r] * E;
        const float *d = dx + r * E;
        for (int64_t k = 0; k < E; k++) g[k] += d[k] * scale;
    }
}

static void sub_opts(const attn_layer_opts *opts, const int64_t *key_lengths,
                     uint64_t seed, attn_layer_opts *o) {
    attn_sdpa_opts_init(o);
    o->dropout_p = opts->dropout_p;
    o->impl = opts->impl;
    o->threads = opts->threads;
    o->seed = seed;
    o->mask.key_lengths = key_lengths;
}

static attn_status forward_body(const attn_transformer_config *c,
                                const float *params, int64_t B, int64_t Ls,
                                const int32_t *src, const int64_t *src_lengths,
                                int64_t Lt, const int32_t *tgt,
                                const attn_layer_opts *opts, float *logits,
                                float *cross_weights, float *ws) {
    tws w;
    attn_status st =
        check_call(c, params, B, Ls, src, src_lengths, Lt, tgt, opts, ws, &w);
    if (st) return st;
    if (!logits) return attn__fail(ATTN_E_INVALID, "logits is NULL");
    const tlayout m = layout(c);
    const int64_t E = c->dec.d_model;
    attn_layer_opts eo, dopt;
    sub_opts(opts, src_lengths, opts->seed, &eo);
    sub_opts(opts, NULL, opts->seed ^ DEC_SEED_MIX, &dopt);
    const int64_t Lm = is_encdec(c) && Ls > Lt ? Ls : Lt;
    if ((st = attn_positional_encoding(Lm, E, w.pe))) return st;
    if (is_encdec(c)) {
        embed(params + m.src, src, B, Ls, E, w.pe, w.xs);
        st = attn_encoder_forward(&c->enc, params + m.enc, B, Ls, w.xs, &eo,
                                  w.mem, NULL, w.enc);
        if (st) return st;
    }
    embed(params + m.tgt, tgt, B, Lt, E, w.pe, w.xt);
    st = attn_decoder_forward(&c->dec, params + m.dec, B, Lt, Ls, w.xt,
                              is_encdec(c) ? w.mem : NULL, src_lengths, &dopt,
                              w.h, NULL, cross_weights, w.dec);
    if (st) return st;
    return attn_linear_forward(B * Lt, E, c->vocab_tgt, w.h, params + m.head_w,
                               params + m.head_b, logits);
}

attn_status attn_transformer_forward(const attn_transformer_config *cfg,
                                     const float *params, int64_t B, int64_t Ls,
                                     const int32_t *src,
                                     const int64_t *src_lengths, int64_t Lt,
                                     const int32_t *tgt,
                                     const attn_layer_opts *opts, float *logits,
                                     float *cross_weights, float *ws) {
    const int blas = attn__layer_blas_begin(opts);
    attn_status st = forward_body(cfg, params, B, Ls, src, src_lengths, Lt, tgt,
                                  opts, logits, cross_weights, ws);
    attn__layer_end(blas);
    return st;
}

static attn_status
backward_body(const attn_transformer_config *c, const float *params, int64_t B,
              int64_t Ls, const int32_t *src, const int64_t *src_lengths,
              int64_t Lt, const int32_t *tgt, const attn_layer_opts *opts,
              const float *dlogits, float *ws, float *grads) {
    tws w;
    attn_status st =
        check_call(c, params, B, Ls, src, src_lengths, Lt, tgt, opts, ws, &w);
    if (st) return st;
    if (!dlogits || !grads)
        return attn__fail(ATTN_E_INVALID, "%s is NULL",
                          dlogits ? "grads" : "dlogits");
    const tlayout m = layout(c);
    const int64_t E = c->dec.d_model, nt = B * Lt;
    attn_layer_opts eo, dopt;
    sub_opts(opts, src_lengths, opts->seed, &eo);
    sub_opts(opts, NULL, opts->seed ^ DEC_SEED_MIX, &dopt);
    memset(w.dh, 0, (size_t)(nt * E) * sizeof(float));
    st =
        attn_linear_backward(nt, E, c->vocab_tgt, w.h, params + m.head_w,
                             dlogits, grads + m.head_w, grads + m.head_b, w.dh);
    if (st) return st;
    memset(w.dxt, 0, (size_t)(nt * E) * sizeof(float));
    if (is_encdec(c)) memset(w.dmem, 0, (size_t)(B * Ls * E) * sizeof(float));
    st = attn_decoder_backward(&c->dec, params + m.dec, B, Lt, Ls, w.xt,
                               is_encdec(c) ? w.mem : NULL, src_lengths, &dopt,
                               w.dh, w.dec, grads + m.dec, w.dxt,
                               is_encdec(c) ? w.dmem : NULL);
    if (st) return st;
    embed_backward(grads + m.tgt, tgt, nt, E, w.dxt);
    if (is_encdec(c)) {
        memset(w.dxs, 0, (size_t)(B * Ls * E) * sizeof(float));
        st = attn_encoder_backward(&c->enc, params + m.enc, B, Ls, w.xs, &eo,
                                   w.dmem, w.enc, grads + m.enc, w.dxs);
        if (st) return st;
        embed_backward(grads + m.src, src, B * Ls, E, w.dxs);
    }
    return ATTN_OK;
}

attn_status attn_transformer_backward(
    const attn_transformer_config *cfg, const float *params, int64_t B,
    int64_t Ls, const int32_t *src, const int64_t *src_lengths, int64_t Lt,
    const int32_t *tgt, const attn_layer_opts *opts, const float *dlogits,
    float *ws, float *grads) {
    const int blas = attn__layer_blas_begin(opts);
    attn_status st = backward_body(cfg, params, B, Ls, src, src_lengths, Lt,
                                   tgt, opts, dlogits, ws, grads);
    attn__layer_end(blas);
    return st;
}

/* ---- loss ------------------------------------------------------------- */

attn_status attn_cross_entropy_smoothed(int64_t n, int64_t classes,
                                        const float *logits,
                                        const int32_t *targets,
                                        int32_t ignore_index, double s,
                                        double *loss, float *dlogits,
                                        int64_t *counted, int64_t *correct) {
    if (!(s >= 0 && s < 1))
        return attn__fail(ATTN_E_INVALID,
                          "label smoothing is %g; it must be "
                          "in [0, 1)",
                          s);
    /* validation, the plain loss, argmax counts and the s = 0 gradient */
    int64_t cnt = 0;
    attn_status st =
        attn_cross_entropy(n, classes, logits, targets, ignore_index, loss,
                           dlogits, &cnt, correct);
    if (st) return st;
    if (counted) *counted = cnt;
    if (s == 0 || cnt == 0) return ATTN_OK;
    const double inv = 1.0 / (double)cnt, u = s / (double)classes;
    double sum = 0;
    for (int64_t r = 0; r < n; r++) {
        const int32_t t = targets[r];
        if (t == ignore_index) continue;
        const float *z = logits + r * classes;
        double mx = z[0], se = 0, zs = 0;
        for (int64_t k = 1; k < classes; k++) mx = z[k] > mx ? z[k] : mx;
        for (int64_t k = 0; k < classes; k++) {
            se += exp((double)z[k] - mx);
            zs += z[k];
        }
        /* cppcheck-suppress invalidFunctionArg ; se >= 1 (the max's term) */
        const double lse = mx + log(se);
        /* -(1 - s) log p_t - (s / K) sum_k log p_k */
        sum += (1 - s) * (lse - z[t]) + u * ((double)classes * lse - zs);
        if (dlogits) {
            float *dz = dlogits + r * classes;
            for (int64_t k = 0; k < classes; k++)
                dz[k] =
                    (float)((exp((double)z[k] - lse) - (1 - s) * (k == t) - u) *
                            inv);
        }
    }
    *loss = sum * inv;
    return ATTN_OK;
}

/* ---- files ------------------------------------------------------------ */

#define TR_NCFG 31
#define TC(member, kind) ATTN__CFG(attn_transformer_config, member, kind)

/* The config as words (params.c's typed files), in the file's order. */
static const attn__cfg_field tr_cfg[TR_NCFG] = {
    TC(kind, ATTN__CFG_INT),
    TC(enc.num_layers, ATTN__CFG_I64),
    TC(enc.d_model, ATTN__CFG_I64),
    TC(enc.num_heads, ATTN__CFG_I64),
    TC(enc.num_kv_heads, ATTN__CFG_I64),
    TC(enc.dim_feedforward, ATTN__CFG_I64),
    TC(enc.attention, ATTN__CFG_INT),
    TC(enc.additive_dim, ATTN__CFG_I64),
    TC(enc.activation, ATTN__CFG_INT),
    TC(enc.norm_first, ATTN__CFG_INT),
    TC(enc.final_norm, ATTN__CFG_INT),
    TC(enc.layer_norm_eps, ATTN__CFG_F64),
    TC(dec.num_layers, ATTN__CFG_I64),
    TC(dec.d_model, ATTN__CFG_I64),
    TC(dec.num_heads, ATTN__CFG_I64),
    TC(dec.num_kv_heads, ATTN__CFG_I64),
    TC(dec.dim_feedforward, ATTN__CFG_I64),
    TC(dec.cross, ATTN__CFG_INT),
    TC(dec.cross_attention, ATTN__CFG_INT),
    TC(dec.additive_dim, ATTN__CFG_I64),
    TC(dec.activation, ATTN__CFG_INT),
    TC(dec.norm_first, ATTN__CFG_INT),
    TC(dec.final_norm, ATTN__CFG_INT),
    TC(dec.layer_norm_eps, ATTN__CFG_F64),
    TC(vocab_src, ATTN__CFG_I64),
    TC(vocab_tgt, ATTN__CFG_I64),
    TC(max_src, ATTN__CFG_I64),
    TC(max_tgt, ATTN__CFG_I64),
    TC(share_embeddings, ATTN__CFG_INT),
    TC(tie_output, ATTN__CFG_INT),
    TC(kind, ATTN__CFG_AGAIN)}; /* repeated: a cheap consistency check */
#undef TC

_Static_assert(sizeof(attn_model_kind) == sizeof(int),
               "the model kind is int-sized");

static const attn__typed_kind tr_kind = {
    "transformer", tr_cfg, TR_NCFG, sizeof(attn_transformer_config), tr_slices};

attn_status attn_transformer_save(const char *path,
                                  const attn_transformer_config *cfg,
                                  const float *params) {
    return attn__save_kind(&tr_kind, path, cfg, params);
}

attn_status attn_transformer_load(const char *path,
                                  attn_transformer_config *cfg,
                                  float **params) {
    ATTN__NONNULL("path, cfg, params", path, cfg, params);
    *params = NULL;
    return attn__load_kind(&tr_kind, path, cfg, params);
}
