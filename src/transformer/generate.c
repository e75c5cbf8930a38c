/* The decoding state of generation: the encoder's memory computed once,
 * the cross-attention keys and values of every layer computed once, and a
 * self-attention history per layer that grows by one position per step
 * (attn__hist over an attn_kv_cache of attn_cache.h: appended, attended
 * with attn_sdpa_cached and reordered through three functions). A step runs the decoder
 * stack on one token per row, sublayer by sublayer, as the decoder's
 * forward does on a whole sequence; with recompute set it instead runs the
 * decoder's forward over the whole prefix (the reference and the
 * baseline of the benchmark). */
#include "transformer.h"

#include <cblas.h>
#include <string.h>

/* ---- the history seam ------------------------------------------------ */

static attn_status hist_init(attn__hist *h, int64_t R, int64_t cap, int64_t Hkv,
                             int64_t hd) {
    memset(h, 0, sizeof *h);
    attn_kv_cache_config cc;
    attn_kv_cache_config_init(&cc);
    cc.batch = R;
    cc.kv_heads = Hkv;
    cc.capacity = cap;
    cc.head_dim = hd;
    cc.dtype = ATTN_F32;
    h->R = R;
    h->Hkv = Hkv;
    h->hd = hd;
    return attn_kv_cache_create(&cc, &h->cache);
}

/* k, v (R, KV): the new position of every row. */
static attn_status hist_append(attn__hist *h, const float *k, const float *v) {
    attn_tensor K =
        attn_tensor_bthd((void *)k, ATTN_F32, h->R, 1, h->Hkv, h->hd);
    attn_tensor V =
        attn_tensor_bthd((void *)v, ATTN_F32, h->R, 1, h->Hkv, h->hd);
    attn_status st = attn_kv_cache_append(h->cache, &K, &V, NULL);
    if (!st) h->len++;
    return st;
}

/* ctx (R, H * hd) = softmax(q K^T / sqrt(hd)) V of each row over L keys
 * at K, V (row r at r * row_stride; position j at j * KV), the first
 * klen[r] of them (NULL: all L). */
static attn_status attend(const float *q, const float *K, const float *V,
                          int64_t R, int64_t H, int64_t Hkv, int64_t hd,
                          int64_t L, int64_t row_stride, const int64_t *klen,
                          int threads, float *ctx) {
    attn_tensor Q = attn_tensor_bthd((void *)q, ATTN_F32, R, 1, H, hd);
    attn_tensor O = attn_tensor_bthd(ctx, ATTN_F32, R, 1, H, hd);
    attn_tensor Kt = attn_tensor_4d((void *)K, ATTN_F32, R, Hkv, L, hd);
    Kt.stride[0] = row_stride;
    Kt.stride[1] = hd;
    Kt.stride[2] = Hkv * hd;
    Kt.stride[3] = 1;
    attn_tensor Vt = Kt;
    Vt.data = (void *)V;
    attn_sdpa_opts o;
    attn_sdpa_opts_init(&o);
    o.threads = threads;
    o.mask.key_lengths = klen;
    return attn_sdpa_forward(&Q, &Kt, &Vt, &o, &O, NULL, NULL);
}

/* ctx (R, H * hd): the new query of every row over its whole history
 * (the query's own position was appended first). */
static attn_status hist_attend(const attn__hist *h, const float *q, int64_t H,
                               int threads, float *ctx) {
    attn_tensor Q = attn_tensor_bthd((void *)q, ATTN_F32, h->R, 1, H, h->hd);
    attn_tensor O = attn_tensor_bthd(ctx, ATTN_F32, h->R, 1, H, h->hd);
    attn_sdpa_opts o;
    attn_sdpa_opts_init(&o);
    o.threads = threads;
    o.mask.causal = 1;
    o.mask.align = ATTN_ALIGN_BOTTOM_RIGHT;
    return attn_sdpa_cached(&Q, h->cache, &o, &O, NULL);
}

/* Beam search: row r takes old row parent[r]. */
static attn_status hist_reorder(attn__hist *h, const int64_t *parent) {
    return attn_kv_cache_reorder(h->cache, parent);
}

/* ---- state ------------------------------------------------------------ */

void attn__gen_free(attn__gen *g) {
    if (!g) return;
    if (g->self)
        for (int64_t l = 0; l < g->M; l++) attn_kv_cache_free(g->self[l].cache);
    attn__free(g->self);
    attn__free(g->ck);
    attn__free(g->mem);
    attn__free(g->klen);
    attn__free(g->add_ws);
    attn__free(g->x);
    attn__free(g->toks);
    attn__free(g->xt);
    attn__free(g->dws);
    attn__free(g->scratch);
    attn__free(g);
}

static attn_additive_config add_of(const attn_decoder_config *d) {
    int64_t A = d->additive_dim ? d->additive_dim : d->d_model / 2;
    attn_additive_config a = {d->d_model,    d->d_model, d->d_model,
                              A > 0 ? A : 1, 1,          0};
    return a;
}

/* The encoder over the B sources, its memory copied to the K rows of
 * each source. */
static attn_status encode(attn__gen *g, int64_t B, int64_t K,
                          const int32_t *src, const int64_t *src_lengths) {
    const attn_transformer_config *c = g->c;
    const int64_t E = g->E, Ls = g->Ls;
    size_t wsn;
    attn_status st = attn_encoder_workspace_size(&c->enc, B, Ls, &wsn);
    if (st) return st;
    const size_t be = attn__size3(B, Ls, E);
    float *x = attn__alloc(2 * be + attn__size3(Ls, E, 1) + wsn, sizeof(float),
                           "encoder buffers");
    if (!x) return ATTN_E_NOMEM;
    float *mem = x + be, *pe = mem + be, *ws = pe + Ls * E;
    attn_layer_opts o;
    attn_sdpa_opts_init(&o);
    o.threads = g->threads;
    o.mask.key_lengths = src_lengths;
    if (!(st = attn_positional_encoding(Ls, E, pe))) {
        attn__embed_rows(g->params + g->m.src, src, B * Ls, Ls, E, pe, NULL, x);
        st = attn_encoder_forward(&c->enc, g->params + g->m.enc, B, Ls, x, &o,
                                  mem, NULL, ws);
    }
    if (!st)
        for (int64_t r = 0; r < g->R; r++) {
            memcpy(g->mem + r * Ls * E, mem + (r / K) * Ls * E,
                   sizeof(float) * (size_t)(Ls * E));
            g->klen[r] = src_lengths ? src_lengths[r / K] : Ls;
        }
    attn__free(x);
    return st;
}

/* Cross keys and values of every layer (dot cross-attention). */
static void cross_kv(attn__gen *g) {
    const size_t per = (size_t)(g->R * g->Ls * g->KV);
    for (int64_t l = 0; l < g->M; l++) {
        attn_decoder_layer_params P;
        attn_decoder_layer_view(&g->c->dec, (float *)g->params + g->m.dec, l,
                                &P);
        attn_linear_forward(g->R * g->Ls, g->E, g->KV, g->mem, P.cross_mha.w_k,
                            P.cross_mha.b_k, g->ck + l * per);
        attn_linear_forward(g->R * g->Ls, g->E, g->KV, g->mem, P.cross_mha.w_v,
                            P.cross_mha.b_v, g->cv + l * per);
    }
}

attn_status attn__gen_create(const attn_transformer_config *c,
                             const float *params, int64_t B, int64_t K,
                             int64_t Ls, const int32_t *src,
                             const int64_t *src_lengths, int64_t cap,
                             int threads, int recompute, attn__gen **out) {
    *out = NULL;
    attn__gen *g = attn__alloc(1, sizeof *g, "generation state");
    if (!g) return ATTN_E_NOMEM;
    memset(g, 0, sizeof *g);
    const attn_decoder_config *d = &c->dec;
    const int ed = c->kind == ATTN_MODEL_ENCDEC;
    g->c = c;
    g->params = params;
    g->m = attn__transformer_layout(c);
    g->R = B * K;
    g->E = d->d_model;
    g->H = d->num_heads;
    g->Hkv = d->num_kv_heads ? d->num_kv_heads : d->num_heads;
    g->hd = g->E / g->H;
    g->KV = g->Hkv * g->hd;
    g->F = d->dim_feedforward;
    g->V = c->vocab_tgt;
    g->Ls = ed ? Ls : 1;
    g->cap = cap;
    g->M = d->num_layers;
    g->threads = threads;
    g->recompute = recompute;
    const int64_t R = g->R, E = g->E, F = g->F;
    attn_status st = ATTN_E_NOMEM;
    const size_t re = attn__size3(R, E, 1), rf = attn__size3(R, F, 1);
    const size_t rv = attn__size3(R, g->V, 1), pe = attn__size3(cap, E, 1);
    if (!re || !rf || !rv || !pe) goto fail;
    if (!(g->x = attn__alloc(7 * re + rf + rv + pe, sizeof(float),
                             "step buffers")))
        goto fail;
    g->y = g->x + re;
    g->q = g->y + re;
    g->kk = g->q + re;
    g->vv = g->kk + re;
    g->ctx = g->vv + re;
    g->a = g->ctx + re;
    g->h = g->a + re;
    g->logits = g->h + rf;
    g->pe = g->logits + rv;
    if ((st = attn_positional_encoding(cap, E, g->pe))) goto fail;
    st = ATTN_E_NOMEM;
    if (!(g->toks =
              attn__alloc(attn__size3(R, cap, 1), sizeof(int32_t), "tokens")) ||
        !(g->scratch = attn__alloc(attn__size3(R, cap, 1), sizeof(int32_t),
                                   "reorder scratch")))
        goto fail;
    if (ed) {
        if (!(g->mem = attn__alloc(attn__size3(R, g->Ls, E), sizeof(float),
                                   "memory")) ||
            !(g->klen =
                  attn__alloc((size_t)R, sizeof(int64_t), "memory lengths")))
            goto fail;
        if ((st = encode(g, B, K, src, src_lengths))) goto fail;
        st = ATTN_E_NOMEM;
    }
    if (recompute) {
        size_t wsn;
        if ((st = attn_decoder_workspace_size(d, R, cap, g->Ls, &wsn)))
            goto fail;
        st = ATTN_E_NOMEM;
        const size_t rce = attn__size3(R, cap, E);
        if (!(g->xt = attn__alloc(2 * rce, sizeof(float), "prefix")) ||
            !(g->dws = attn__alloc(wsn, sizeof(float), "decoder workspace")))
            goto fail;
        g->ht = g->xt + rce;
        *out = g;
        return ATTN_OK;
    }
    if (!(g->self = attn__alloc((size_t)g->M, sizeof *g->self, "caches")))
        goto fail;
    memset(g->self, 0, sizeof *g->self * (size_t)g->M);
    for (int64_t l = 0; l < g->M; l++)
        if ((st = hist_init(&g->self[l], R, cap, g->Hkv, g->hd))) goto fail;
    st = ATTN_E_NOMEM;
    if (ed && d->cross_attention == ATTN_ATTENTION_DOT) {
        const size_t per = attn__size3(R, g->Ls, g->KV);
        if (!per || !(g->ck = attn__alloc(2 * per * (size_t)g->M, sizeof(float),
                                          "cross keys and values")))
            goto fail;
        g->cv = g->ck + per * (size_t)g->M;
        cross_kv(g);
    } else if (ed) {
        attn_additive_config a = add_of(d);
        size_t wsn;
        if ((st = attn_additive_workspace_size(&a, R, 1, g->Ls, &wsn)))
            goto fail;
        st = ATTN_E_NOMEM;
        if (!(g->add_ws =
                  attn__alloc(wsn, sizeof(float), "additive workspace")))
            goto fail;
    }
    *out = g;
    return ATTN_OK;
fail:
    attn__gen_free(g);
    return st;
}

/* ---- one step --------------------------------------------------------- */

/* y (R, out) = x W^T + b for the few rows of a step: matrix-vector
 * products below 8 rows (sgemm would pack the whole weight matrix for
 * each call, which cost more than the product itself), sgemm above. */
static void step_linear(int64_t R, int64_t in, int64_t out, const float *x,
                        const float *w, const float *b, float *y) {
    if (R >= 8) {
        attn_linear_forward(R, in, out, x, w, b, y);
        return;
    }
    for (int64_t r = 0; r < R; r++) {
        float *yr = y + r * out;
        if (b) memcpy(yr, b, sizeof(float) * (size_t)out);
        cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)out, (int)in, 1.0f, w,
                    (int)in, x + r * in, 1, b ? 1.0f : 0.0f, yr, 1);
    }
}

static double eps_of(const attn_decoder_config *d) {
    return d->layer_norm_eps > 0 ? d->layer_norm_eps : 1e-5;
}

/* The input of a sublayer: LN(x) with pre-norm, else x itself. */
static const float *sub_in(attn__gen *g, const float *gm, const float *bt) {
    if (!g->c->dec.norm_first) return g->x;
    attn__layernorm_forward(g->R, g->E, g->x, gm, bt, eps_of(&g->c->dec), g->y,
                            NULL, NULL, g->threads);
    return g->y;
}

/* x <- x + a (pre-norm) or LN(x + a) (post-norm). */
static void sub_out(attn__gen *g, const float *gm, const float *bt) {
    const int64_t n = g->R * g->E;
    for (int64_t i = 0; i < n; i++) g->a[i] += g->x[i];
    if (g->c->dec.norm_first)
        memcpy(g->x, g->a, sizeof(float) * (size_t)n);
    else
        attn__layernorm_forward(g->R, g->E, g->a, gm, bt, eps_of(&g->c->dec),
                                g->x, NULL, NULL, g->threads);
}

static attn_status layer_step(attn__gen *g, int64_t l) {
    const attn_decoder_config *d = &g->c->dec;
    const int64_t R = g->R, E = g->E, KV = g->KV;
    attn_decoder_layer_params P;
    attn_decoder_layer_view(d, (float *)g->params + g->m.dec, l, &P);
    attn_status st;
    /* masked self-attention: the new position attends to the history */
    const float *in = sub_in(g, P.ln1_gamma, P.ln1_beta);
    step_linear(R, E, E, in, P.self_attn.w_q, P.self_attn.b_q, g->q);
    step_linear(R, E, KV, in, P.self_attn.w_k, P.self_attn.b_k, g->kk);
    step_linear(R, E, KV, in, P.self_attn.w_v, P.self_attn.b_v, g->vv);
    if ((st = hist_append(&g->self[l], g->kk, g->vv)) ||
        (st = hist_attend(&g->self[l], g->q, g->H, g->threads, g->ctx)))
        return st;
    step_linear(R, E, E, g->ctx, P.self_attn.w_o, P.self_attn.b_o, g->a);
    sub_out(g, P.ln1_gamma, P.ln1_beta);
    if (d->cross) {
        in = sub_in(g, P.ln2_gamma, P.ln2_beta);
        if (d->cross_attention == ATTN_ATTENTION_DOT) {
            const size_t per = (size_t)(R * g->Ls * KV);
            step_linear(R, E, E, in, P.cross_mha.w_q, P.cross_mha.b_q, g->q);
            st = attend(g->q, g->ck + l * per, g->cv + l * per, R, g->H, g->Hkv,
                        g->hd, g->Ls, g->Ls * KV, g->klen, g->threads, g->ctx);
            if (st) return st;
            step_linear(R, E, E, g->ctx, P.cross_mha.w_o, P.cross_mha.b_o,
                        g->a);
        } else {
            attn_additive_config ac = add_of(d);
            attn_layer_opts o;
            attn_sdpa_opts_init(&o);
            o.threads = g->threads;
            o.mask.key_lengths = g->klen;
            st = attn_additive_forward(&ac, P.cross_add.w_q, R, 1, g->Ls, in,
                                       g->mem, g->mem, &o, g->ctx, NULL,
                                       g->add_ws);
            if (st) return st;
            step_linear(R, E, E, g->ctx, P.cross_w_o, P.cross_b_o, g->a);
        }
        sub_out(g, P.ln2_gamma, P.ln2_beta);
    }
    in = sub_in(g, P.ln3_gamma, P.ln3_beta);
    step_linear(R, E, g->F, in, P.w_1, P.b_1, g->h);
    attn__act_forward(d->activation, g->h, g->h, R * g->F, g->threads);
    step_linear(R, g->F, E, g->h, P.w_2, P.b_2, g->a);
    sub_out(g, P.ln3_gamma, P.ln3_beta);
    return ATTN_OK;
}

/* The decoder's forward over the whole prefix; the last position's output
 * into g->x (already final-normed). */
static attn_status recompute_step(attn__gen *g) {
    const int64_t R = g->R, E = g->E, L = g->t + 1;
    for (int64_t r = 0; r < R; r++)
        for (int64_t j = 0; j < L; j++)
            attn__embed_rows(g->params + g->m.tgt, g->toks + r * g->cap + j, 1,
                             1, E, g->pe, &j, g->xt + (r * L + j) * E);
    attn_layer_opts o;
    attn_sdpa_opts_init(&o);
    o.threads = g->threads;
    attn_status st = attn_decoder_forward(&g->c->dec, g->params + g->m.dec, R,
                                          L, g->Ls, g->xt, g->mem, g->klen, &o,
                                          g->ht, NULL, NULL, g->dws);
    if (st) return st;
    for (int64_t r = 0; r < R; r++)
        memcpy(g->y + r * E, g->ht + (r * L + L - 1) * E,
               sizeof(float) * (size_t)E);
    return ATTN_OK;
}

attn_status attn__gen_step(attn__gen *g, const int32_t *tok) {
    const attn_transformer_config *c = g->c;
    const int64_t R = g->R, E = g->E;
    if (g->t >= g->cap)
        return attn__fail(ATTN_E_SHAPE, "generation ran past %lld steps",
                          (long long)g->cap);
    for (int64_t r = 0; r < R; r++) {
        if (tok[r] < 0 || tok[r] >= g->V)
            return attn__fail(ATTN_E_INVALID,
                              "token %d of row %lld is not an "
                              "id of the model (0..%lld)",
                              tok[r], (long long)r, (long long)g->V - 1);
        g->toks[r * g->cap + g->t] = tok[r];
    }
    attn_status st;
    const float *hout;
    if (g->recompute) {
        if ((st = recompute_step(g))) return st;
        hout = g->y;
    } else {
        int64_t pos = g->t;
        for (int64_t r = 0; r < R; r++)
            attn__embed_rows(g->params + g->m.tgt, tok + r, 1, 1, E, g->pe,
                             &pos, g->x + r * E);
        for (int64_t l = 0; l < g->M; l++)
            if ((st = layer_step(g, l))) return st;
        hout = g->x;
        if (c->dec.final_norm) {
            float *gm, *bt;
            attn_decoder_final_norm_view(&c->dec, (float *)g->params + g->m.dec,
                                         &gm, &bt);
            attn__layernorm_forward(R, E, g->x, gm, bt, eps_of(&c->dec), g->y,
                                    NULL, NULL, g->threads);
            hout = g->y;
        }
    }
    g->t++;
    step_linear(R, E, g->V, hout, g->params + g->m.head_w,
                g->params + g->m.head_b, g->logits);
    return ATTN_OK;
}

attn_status attn__gen_reorder(attn__gen *g, const int64_t *parent) {
    for (int64_t r = 0; r < g->R; r++)
        if (parent[r] < 0 || parent[r] >= g->R)
            return attn__fail(ATTN_E_INVALID, "parent[%lld] is %lld",
                              (long long)r, (long long)parent[r]);
    int32_t *tmp = g->scratch;
    const size_t row = (size_t)g->t;
    for (int64_t r = 0; r < g->R; r++)
        memcpy(tmp + r * row, g->toks + parent[r] * g->cap,
               sizeof(int32_t) * row);
    for (int64_t r = 0; r < g->R; r++)
        memcpy(g->toks + r * g->cap, tmp + r * row, sizeof(int32_t) * row);
    if (!g->recompute)
        for (int64_t l = 0; l < g->M; l++) {
            attn_status st = hist_reorder(&g->self[l], parent);
            if (st) return st;
        }
    return ATTN_OK;
}
