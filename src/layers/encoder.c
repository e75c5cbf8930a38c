/* The Transformer encoder: N layers of self-attention (multi-head dot
 * product or additive) and a feed-forward network, each wrapped in a
 * residual connection and LayerNorm (post-norm or pre-norm), an optional
 * final LayerNorm. Forward keeps every intermediate backward needs in the
 * caller's workspace; backward walks the layers in reverse. */
#include "layers.h"

#include <string.h>

void attn_encoder_config_init(attn_encoder_config *c) {
    if (!c) return;
    memset(c, 0, sizeof *c);
    c->num_layers = 1;
    c->d_model = 512;
    c->num_heads = 8;
    c->dim_feedforward = 2048;
    c->attention = ATTN_ATTENTION_DOT;
    c->activation = ATTN_ACT_RELU;
}

/* Sub-configurations of one layer's attention. */
static attn_mha_config mha_cfg(const attn_encoder_config *c) {
    return attn__layer_mha_cfg(c->d_model, c->num_heads, c->num_kv_heads);
}
static attn_additive_config add_cfg(const attn_encoder_config *c) {
    return attn__layer_add_cfg(c->d_model, c->additive_dim);
}

static attn_status check_cfg(const attn_encoder_config *c) {
    ATTN__NEED(c);
    const attn__stack_fields f = {
        c->num_layers, c->d_model,    c->dim_feedforward, c->additive_dim,
        c->activation, c->norm_first, c->final_norm,      c->layer_norm_eps,
        INT64_MAX,     INT64_MAX};
    attn_status st = attn__stack_check("encoder", &f);
    if (st) return st;
    if (c->activation == ATTN_ACT_SWIGLU)
        return attn__fail(ATTN_E_UNSUPPORTED,
                          "encoder activation SwiGLU: the gated "
                          "feed-forward is the decoder's");
    if (c->attention != ATTN_ATTENTION_DOT &&
        c->attention != ATTN_ATTENTION_ADDITIVE)
        return attn__fail(ATTN_E_INVALID, "encoder attention type is %d",
                          (int)c->attention);
    if (c->attention == ATTN_ATTENTION_DOT) {
        attn_mha_config m = mha_cfg(c);
        return attn__mha_check_cfg(&m, NULL, NULL);
    }
    attn_additive_config a = add_cfg(c);
    return attn__additive_check_cfg(&a);
}

int64_t attn_encoder_weight_heads(const attn_encoder_config *c) {
    if (check_cfg(c)) return 0;
    return c->attention == ATTN_ATTENTION_DOT ? c->num_heads : 1;
}

/* ---- the parameter table ----------------------------------------------
 * One layer's rows (names after "layers.l.", view fields of
 * attn_encoder_layer_params, in block order) drive the count, the views
 * of parameters and gradients, the slices (and through them the init,
 * the typed files and the BERT name mapping). */
#define LP(f) offsetof(attn_encoder_layer_params, f)
static void layer_table(const attn_encoder_config *c, attn__ptab *t) {
    const int64_t E = c->d_model, F = c->dim_feedforward;
    static const size_t ffn[4] = {LP(w_1), LP(b_1), LP(w_2), LP(b_2)};
    t->n = 0;
    if (c->attention == ATTN_ATTENTION_DOT) {
        attn_mha_config m = mha_cfg(c);
        attn__mha_ptab(t, &m, "attn.", LP(mha));
    } else {
        attn_additive_config a = add_cfg(c);
        attn__additive_ptab(t, &a, "attn.", LP(additive));
        attn__ptab_add(t, "attn.", "w_o", E, E, ATTN_INIT_XAVIER, LP(w_o));
        attn__ptab_add(t, "attn.", "b_o", E, 1, ATTN_INIT_ZERO, LP(b_o));
    }
    attn__ptab_ln(t, "ln1", E, LP(ln1_gamma), LP(ln1_beta));
    attn__ffn_ptab(t, E, F, F, ffn);
    attn__ptab_ln(t, "ln2", E, LP(ln2_gamma), LP(ln2_beta));
}
#undef LP

static attn_status check_any(const void *c) { return check_cfg(c); }
static void table_any(const void *c, attn__ptab *t) { layer_table(c, t); }
static const attn__stack_kind kind = {"encoder",
                                      check_any,
                                      table_any,
                                      offsetof(attn_encoder_config, num_layers),
                                      offsetof(attn_encoder_config, d_model),
                                      offsetof(attn_encoder_config, final_norm),
                                      16,
                                      16};

int64_t attn_encoder_param_count(const attn_encoder_config *c) {
    return attn__stack_count(&kind, c);
}

attn_status attn_encoder_layer_view(const attn_encoder_config *c, float *block,
                                    int64_t layer,
                                    attn_encoder_layer_params *p) {
    return attn__stack_view(&kind, c, block, layer, p, sizeof *p);
}

attn_status attn_encoder_final_norm_view(const attn_encoder_config *c,
                                         float *block, float **gamma,
                                         float **beta) {
    return attn__stack_norm_view(&kind, c, block, gamma, beta);
}

attn_status attn_encoder_param_slices(const attn_encoder_config *c,
                                      const char *prefix, int64_t offset,
                                      attn_param_slice *slices, int64_t cap,
                                      int64_t *count) {
    return attn__stack_slices(&kind, c, prefix, offset, slices, cap, count);
}

attn_status attn__encoder_slices(const void *c, attn_param_slice *sl,
                                 int64_t cap, int64_t *n) {
    return attn_encoder_param_slices(c, "", 0, sl, cap, n);
}

attn_status attn_encoder_init(const attn_encoder_config *c, float *params,
                              uint64_t seed) {
    return attn__init_by_slices(attn__encoder_slices, c, params, seed);
}

/* ---- workspace -------------------------------------------------------- */

/* One layer's saved state. */
typedef struct {
    float *xin, *ln1y, *r1, *ln2y, *r2, *ctx, *hpre, *hact;
    float *m1, *s1, *m2, *s2, *att;
} layer_ws;

/* Shared: the last layer's output xN with its final-norm stats, then
 * scratch a (attention output / dropout copies), f, g, t1, t2 (B L E) and
 * gh (B L F). */
typedef struct {
    float *xn, *mf, *sf, *a, *f, *g, *t1, *t2, *gh;
} shared_ws;

static size_t att_ws_floats(const attn_encoder_config *c, int64_t B,
                            int64_t L) {
    size_t n = 0;
    if (c->attention == ATTN_ATTENTION_DOT) {
        attn_mha_config m = mha_cfg(c);
        if (attn_mha_workspace_size(&m, B, L, L, &n)) return 0;
    } else {
        attn_additive_config a = add_cfg(c);
        if (attn_additive_workspace_size(&a, B, L, L, &n)) return 0;
    }
    return n;
}

/* Lays out the workspace (ws may be NULL to size it); layer l's part is
 * written to *lw when lw is not NULL. Returns the total or 0 on overflow. */
static size_t ws_layout(const attn_encoder_config *c, int64_t B, int64_t L,
                        float *ws, int64_t l, layer_ws *lw, shared_ws *sw) {
    const size_t be = attn__size3(B, L, c->d_model);
    const size_t bf = attn__size3(B, L, c->dim_feedforward);
    const size_t bl = attn__size3(B, L, 1), aw = att_ws_floats(c, B, L);
    if (!be || !bf || !bl || !aw) return 0;
    const size_t lim = SIZE_MAX / sizeof(float) / 4;
    if (be > lim / 16 || bf > lim / 16 || aw > lim / 2) return 0;
    const size_t per = 6 * be + 2 * bf + 4 * bl + aw;
    if (per > lim / (size_t)c->num_layers) return 0;
    size_t total = per * (size_t)c->num_layers;
    if (ws && lw) {
        float *x = ws + per * (size_t)l;
        lw->xin = x;
        x += be;
        lw->ln1y = x;
        x += be;
        lw->r1 = x;
        x += be;
        lw->ln2y = x;
        x += be;
        lw->r2 = x;
        x += be;
        lw->ctx = x;
        x += be;
        lw->hpre = x;
        x += bf;
        lw->hact = x;
        x += bf;
        lw->m1 = x;
        x += bl;
        lw->s1 = x;
        x += bl;
        lw->m2 = x;
        x += bl;
        lw->s2 = x;
        x += bl;
        lw->att = x;
    }
    if (ws && sw) {
        float *x = ws + total;
        sw->xn = x;
        x += be;
        sw->mf = x;
        x += bl;
        sw->sf = x;
        x += bl;
        sw->a = x;
        x += be;
        sw->f = x;
        x += be;
        sw->g = x;
        x += be;
        sw->t1 = x;
        x += be;
        sw->t2 = x;
        x += be;
        sw->gh = x;
    }
    return total + 6 * be + 2 * bl + bf;
}

attn_status attn_encoder_workspace_size(const attn_encoder_config *c, int64_t B,
                                        int64_t L, size_t *floats) {
    attn_status st = check_cfg(c);
    if (st) return st;
    ATTN__NEED(floats);
    if (B < 1 || L < 1)
        return attn__fail(ATTN_E_SHAPE, "B=%lld L=%lld must be >= 1",
                          (long long)B, (long long)L);
    if (!(*floats = ws_layout(c, B, L, NULL, 0, NULL, NULL)))
        return attn__fail(ATTN_E_NOMEM, "encoder workspace size overflows");
    return ATTN_OK;
}

static attn_status check_call(const attn_encoder_config *c, const float *params,
                              int64_t B, int64_t L, const float *x,
                              const attn_layer_opts *o, const float *ws) {
    attn_status st = check_cfg(c);
    if (st) return st;
    ATTN__NEED(params);
    ATTN__NEED(x);
    ATTN__NEED(ws);
    size_t n;
    if ((st = attn_encoder_workspace_size(c, B, L, &n))) return st;
    if ((st = attn__layer_opts_check(o, B, attn_encoder_weight_heads(c), L, L)))
        return st;
    return attn__check_finite_f32(x, B * L * c->d_model, "x");
}

static void norm_parts(attn__sublayer *s, const float *g, const float *b,
                       float *dg, float *db, float *lny, float *r, float *m,
                       float *sd, uint32_t stream) {
    s->gamma = g;
    s->beta = b;
    s->dgamma = dg;
    s->dbeta = db;
    s->lny = lny;
    s->r = r;
    s->mean = m;
    s->rstd = sd;
    s->stream = stream;
}

/* The residual and norm around layer l's attention (s1) and feed-forward
 * network (s2; its input s2->x is s1's output, set by the caller), and
 * the network (f). G NULL: no gradients. */
static void layer_parts(const attn_encoder_config *c,
                        const attn_encoder_layer_params *P,
                        attn_encoder_layer_params *G, const layer_ws *w,
                        int64_t n, const attn_layer_opts *o, int64_t l,
                        attn__sublayer *s1, attn__sublayer *s2, attn__ffn *f) {
    memset(s1, 0, sizeof *s1);
    s1->n = n;
    s1->E = c->d_model;
    s1->norm_first = c->norm_first;
    s1->th = attn__threads(o);
    s1->eps = attn__layer_ln_eps(c->layer_norm_eps);
    s1->seed = o->seed;
    s1->p = o->dropout_p;
    *s2 = *s1;
    norm_parts(s1, P->ln1_gamma, P->ln1_beta, G ? G->ln1_gamma : NULL,
               G ? G->ln1_beta : NULL, w->ln1y, w->r1, w->m1, w->s1,
               attn__enc_stream(l, 1));
    s1->x = w->xin;
    norm_parts(s2, P->ln2_gamma, P->ln2_beta, G ? G->ln2_gamma : NULL,
               G ? G->ln2_beta : NULL, w->ln2y, w->r2, w->m2, w->s2,
               attn__enc_stream(l, 3));
    const attn__ffn ff = {n,
                          c->d_model,
                          c->dim_feedforward,
                          c->activation,
                          P->w_1,
                          P->b_1,
                          P->w_2,
                          P->b_2,
                          G ? G->w_1 : NULL,
                          G ? G->b_1 : NULL,
                          G ? G->w_2 : NULL,
                          G ? G->b_2 : NULL,
                          w->hpre,
                          w->hact,
                          o->seed,
                          attn__enc_stream(l, 2),
                          o->dropout_p,
                          s1->th};
    *f = ff;
}

/* ---- forward ---------------------------------------------------------- */

/* keep 0: nothing is kept for a backward, and every layer runs in the
 * first layer's part of the workspace (laid out for one layer). */
static attn_status encoder_forward_body(const attn_encoder_config *c,
                                        const float *params, int64_t B,
                                        int64_t L, const float *x,
                                        const attn_layer_opts *opts, float *out,
                                        float *weights, float *ws, int keep) {
    attn_encoder_config one = *c;
    one.num_layers = 1;
    const attn_encoder_config *cw = keep ? c : &one; /* the layout's */
    attn_status st = check_cfg(c);
    if (!st) st = check_call(cw, params, B, L, x, opts, ws);
    if (st) return st;
    ATTN__NEED(out);
    if (out == x) return attn__fail(ATTN_E_INVALID, "out may not alias x");
    const int64_t E = c->d_model, n = B * L;
    const int64_t Hw = attn_encoder_weight_heads(c);
    const int th = attn__threads(opts);
    const double eps = attn__layer_ln_eps(c->layer_norm_eps);
    const size_t be = (size_t)(n * E);
    attn_mha_config mc = mha_cfg(c);
    attn_additive_config ac = add_cfg(c);
    shared_ws sw;
    ws_layout(cw, B, L, ws, 0, NULL, &sw);
    const float *cur = x;
    for (int64_t l = 0; l < c->num_layers; l++) {
        layer_ws w;
        attn_encoder_layer_params P;
        ws_layout(cw, B, L, ws, keep ? l : 0, &w, NULL);
        attn_encoder_layer_view(c, (float *)params, l, &P);
        memcpy(w.xin, cur, be * sizeof(float));
        attn__sublayer s1, s2;
        attn__ffn f;
        layer_parts(c, &P, NULL, &w, n, opts, l, &s1, &s2, &f);
        attn_layer_opts oa = *opts;
        oa.seed = attn__enc_seed(opts->seed, l);
        float *wl = weights ? weights + l * B * Hw * L * L : NULL;
        const float *ain = attn__sublayer_in(&s1);
        if (c->attention == ATTN_ATTENTION_DOT) {
            st = attn_mha_forward(&mc, P.mha.w_q, B, L, L, ain, ain, ain, &oa,
                                  sw.a, wl, ATTN_WEIGHTS_PER_HEAD, w.att);
        } else {
            st = attn_additive_forward(&ac, P.additive.w_q, B, L, L, ain, ain,
                                       ain, &oa, w.ctx, wl, w.att);
            if (!st) attn_linear_forward(n, E, E, w.ctx, P.w_o, P.b_o, sw.a);
        }
        if (st) return st;
        s2.x = attn__sublayer_out(&s1, sw.a);
        attn__ffn_forward(&f, attn__sublayer_in(&s2), sw.f);
        cur = attn__sublayer_out(&s2, sw.f);
    }
    memcpy(sw.xn, cur, be * sizeof(float));
    if (c->final_norm) {
        float *g, *b;
        attn_encoder_final_norm_view(c, (float *)params, &g, &b);
        attn__layernorm_forward(n, E, sw.xn, g, b, eps, out, sw.mf, sw.sf, th);
    } else {
        memcpy(out, sw.xn, be * sizeof(float));
    }
    return ATTN_OK;
}

attn_status attn_encoder_forward(const attn_encoder_config *cfg,
                                 const float *params, int64_t B, int64_t L,
                                 const float *x, const attn_layer_opts *opts,
                                 float *out, float *weights, float *ws) {
    const int blas = attn__layer_blas_begin(opts);
    attn_status st =
        encoder_forward_body(cfg, params, B, L, x, opts, out, weights, ws, 1);
    attn__layer_end(blas);
    return st;
}

attn_status attn__encoder_infer_ws_size(const attn_encoder_config *c, int64_t B,
                                        int64_t L, size_t *floats) {
    ATTN__NEED(c);
    attn_encoder_config one = *c;
    one.num_layers = 1;
    return attn_encoder_workspace_size(&one, B, L, floats);
}

attn_status attn__encoder_infer(const attn_encoder_config *cfg,
                                const float *params, int64_t B, int64_t L,
                                const float *x, const attn_layer_opts *opts,
                                float *out, float *weights, float *ws) {
    const int blas = attn__layer_blas_begin(opts);
    attn_status st =
        encoder_forward_body(cfg, params, B, L, x, opts, out, weights, ws, 0);
    attn__layer_end(blas);
    return st;
}

attn_status attn_encoder_layer_weights(const attn_encoder_config *c,
                                       const float *params, int64_t B,
                                       int64_t L, const attn_layer_opts *opts,
                                       const float *ws, int64_t layer,
                                       float *weights) {
    attn_status st = check_cfg(c);
    if (st) return st;
    ATTN__NEED(params);
    ATTN__NEED(ws);
    ATTN__NEED(weights);
    size_t n;
    if ((st = attn_encoder_workspace_size(c, B, L, &n))) return st;
    if ((st = attn__layer_opts_check(opts, B, attn_encoder_weight_heads(c), L,
                                     L)))
        return st;
    if (layer < 0 || layer >= c->num_layers)
        return attn__fail(ATTN_E_INVALID, "layer %lld is outside [0, %lld)",
                          (long long)layer, (long long)c->num_layers);
    layer_ws w;
    ws_layout(c, B, L, (float *)ws, layer, &w, NULL);
    attn_layer_opts oa = *opts;
    oa.seed = attn__enc_seed(opts->seed, layer);
    if (c->attention == ATTN_ATTENTION_DOT) {
        attn_mha_config mc = mha_cfg(c);
        return attn__mha_weights_from_ws(&mc, B, L, L, &oa, w.att, weights);
    }
    attn_encoder_layer_params P;
    attn_encoder_layer_view(c, (float *)params, layer, &P);
    attn_additive_config ac = add_cfg(c);
    return attn__additive_weights_from_ws(&ac, P.additive.w_q, B, L, L, &oa,
                                          w.att, weights);
}

/* ---- backward --------------------------------------------------------- */

/* Backward of the attention block: dy (B L E) is the gradient of its
 * output; the gradient of its input is ADDED into dain. */
static attn_status att_backward(const attn_encoder_config *c,
                                const attn_encoder_layer_params *P,
                                attn_encoder_layer_params *G, int64_t B,
                                int64_t L, const float *ain,
                                const attn_layer_opts *oa, const layer_ws *w,
                                const float *dy, float *dctx, float *dain) {
    const int64_t E = c->d_model, n = B * L;
    if (c->attention == ATTN_ATTENTION_DOT) {
        attn_mha_config mc = mha_cfg(c);
        return attn_mha_backward(&mc, P->mha.w_q, B, L, L, ain, ain, ain, oa,
                                 dy, w->att, G ? G->mha.w_q : NULL, dain, dain,
                                 dain);
    }
    attn_additive_config ac = add_cfg(c);
    memset(dctx, 0, sizeof(float) * (size_t)(n * E));
    attn_linear_backward(n, E, E, w->ctx, P->w_o, dy, G ? G->w_o : NULL,
                         G ? G->b_o : NULL, dctx);
    return attn_additive_backward(&ac, P->additive.w_q, B, L, L, ain, ain, ain,
                                  oa, dctx, w->att, G ? G->additive.w_q : NULL,
                                  dain, dain, dain);
}

static attn_status encoder_backward_body(const attn_encoder_config *c,
                                         const float *params, int64_t B,
                                         int64_t L, const float *x,
                                         const attn_layer_opts *opts,
                                         const float *dout, float *ws,
                                         float *grads, float *dx) {
    attn_status st = check_call(c, params, B, L, x, opts, ws);
    if (st) return st;
    ATTN__NEED(dout);
    const int64_t E = c->d_model, n = B * L;
    const int th = attn__threads(opts);
    const size_t be = (size_t)(n * E) * sizeof(float);
    if ((st = attn__check_finite_f32(dout, n * E, "dout"))) return st;
    shared_ws sw;
    ws_layout(c, B, L, ws, 0, NULL, &sw);
    /* g: gradient of the current layer's output */
    if (c->final_norm) {
        float *gm, *bt, *dg = NULL, *db = NULL;
        attn_encoder_final_norm_view(c, (float *)params, &gm, &bt);
        if (grads) attn_encoder_final_norm_view(c, grads, &dg, &db);
        memset(sw.g, 0, be);
        attn__layernorm_backward(n, E, sw.xn, gm, sw.mf, sw.sf, dout, dg, db,
                                 sw.g, th);
    } else {
        memcpy(sw.g, dout, be);
    }
    for (int64_t l = c->num_layers - 1; l >= 0; l--) {
        layer_ws w;
        /* cppcheck-suppress uninitvar ; G is viewed below when used */
        attn_encoder_layer_params P, G, *Gp = grads ? &G : NULL;
        ws_layout(c, B, L, ws, l, &w, NULL);
        attn_encoder_layer_view(c, (float *)params, l, &P);
        if (grads) attn_encoder_layer_view(c, grads, l, &G);
        attn_layer_opts oa = *opts;
        oa.seed = attn__enc_seed(opts->seed, l);
        attn__sublayer s1, s2;
        attn__ffn f;
        layer_parts(c, &P, Gp, &w, n, opts, l, &s1, &s2, &f);
        s2.x = c->norm_first ? w.r1 : w.ln1y;
        const float *bin;
        float *din = attn__sublayer_back_in(&s2, sw.g, sw.t1, sw.t2, &bin);
        attn__ffn_backward(&f, bin, sw.t1, sw.gh, din);
        attn__sublayer_back_out(&s2, sw.g, sw.t2);
        din = attn__sublayer_back_in(&s1, sw.g, sw.t1, sw.t2, &bin);
        st = att_backward(c, &P, Gp, B, L, bin, &oa, &w, sw.t1, sw.a, din);
        if (st) return st;
        attn__sublayer_back_out(&s1, sw.g, sw.t2);
    }
    if (dx)
        for (int64_t i = 0; i < n * E; i++) dx[i] += sw.g[i];
    return ATTN_OK;
}

attn_status attn_encoder_backward(const attn_encoder_config *cfg,
                                  const float *params, int64_t B, int64_t L,
                                  const float *x, const attn_layer_opts *opts,
                                  const float *dout, float *ws, float *grads,
                                  float *dx) {
    const int blas = attn__layer_blas_begin(opts);
    attn_status st =
        encoder_backward_body(cfg, params, B, L, x, opts, dout, ws, grads, dx);
    attn__layer_end(blas);
    return st;
}
