/* The Transformer decoder: M layers of masked self-attention, optional
 * cross-attention over a memory (multi-head dot product or additive) and a
 * feed-forward network, each sublayer wrapped in a residual connection and
 * LayerNorm (post-norm or pre-norm), an optional final LayerNorm. Every
 * sublayer goes through one wrapper (sub_forward / sub_backward) around its
 * body, so the residual and norm logic exists once. Forward keeps what
 * backward needs in the caller's workspace; backward walks the sublayers in
 * reverse. */
#include "transformer.h"

#include <limits.h>
#include <string.h>

enum { SUB_SA = 0, SUB_CA = 1, SUB_FF = 2 };

void attn_decoder_config_init(attn_decoder_config *c) {
    if (!c) return;
    memset(c, 0, sizeof *c);
    c->num_layers = 1;
    c->d_model = 512;
    c->num_heads = 8;
    c->dim_feedforward = 2048;
    c->cross = 1;
    c->cross_attention = ATTN_ATTENTION_DOT;
    c->activation = ATTN_ACT_RELU; /* rope all zero: no rotary positions */
}

static attn_mha_config sa_cfg(const attn_decoder_config *c) {
    attn_mha_config m =
        attn__layer_mha_cfg(c->d_model, c->num_heads, c->num_kv_heads);
    m.bias = !c->attn_no_bias;
    return m;
}

/* Rows of w_1: the gate and up projections of SwiGLU, else F. */
static int64_t ffn_rows(const attn_decoder_config *c) {
    return c->activation == ATTN_ACT_SWIGLU ? 2 * c->dim_feedforward
                                            : c->dim_feedforward;
}
static attn_additive_config add_cfg(const attn_decoder_config *c) {
    return attn__layer_add_cfg(c->d_model, c->additive_dim);
}

static int has_add(const attn_decoder_config *c) {
    return c->cross && c->cross_attention == ATTN_ATTENTION_ADDITIVE;
}

attn_status attn_decoder_check(const attn_decoder_config *c) {
    ATTN__NEED(c);
    const attn__stack_fields f = {
        c->num_layers, c->d_model,    c->dim_feedforward, c->additive_dim,
        c->activation, c->norm_first, c->final_norm,      c->layer_norm_eps,
        1 << 20,       1 << 22};
    attn_status st = attn__stack_check("decoder", &f);
    if (st) return st;
    if (c->cross != 0 && c->cross != 1)
        return attn__fail(ATTN_E_INVALID,
                          "decoder cross must be 0 or 1, not "
                          "%d",
                          c->cross);
    if ((c->norm != ATTN_NORM_LAYER && c->norm != ATTN_NORM_RMS) ||
        (c->attn_no_bias != 0 && c->attn_no_bias != 1) || c->sliding_window < 0)
        return attn__fail(ATTN_E_INVALID,
                          "decoder norm %d (0 LayerNorm, 1 RMSNorm), "
                          "attn_no_bias %d (0 or 1), sliding_window %lld "
                          "(>= 0)",
                          c->norm, c->attn_no_bias,
                          (long long)c->sliding_window);
    if (c->rope.theta != 0) {
        if (c->num_heads < 1 || c->d_model % c->num_heads != 0)
            return attn__fail(ATTN_E_INVALID,
                              "decoder d_model %lld is not a multiple of "
                              "num_heads %lld",
                              (long long)c->d_model, (long long)c->num_heads);
        if ((st = attn_rope_check(&c->rope, c->d_model / c->num_heads)))
            return st;
    }
    if (c->cross_attention != ATTN_ATTENTION_DOT &&
        c->cross_attention != ATTN_ATTENTION_ADDITIVE)
        return attn__fail(ATTN_E_INVALID, "decoder cross_attention type is %d",
                          (int)c->cross_attention);
    attn_mha_config m = sa_cfg(c);
    st = attn__mha_check_cfg(&m, NULL, NULL);
    if (st) return st;
    if (has_add(c)) {
        attn_additive_config a = add_cfg(c);
        return attn__additive_check_cfg(&a);
    }
    return ATTN_OK;
}

int64_t attn_decoder_cross_heads(const attn_decoder_config *c) {
    if (attn_decoder_check(c) || !c->cross) return 0;
    return c->cross_attention == ATTN_ATTENTION_DOT ? c->num_heads : 1;
}

/* ---- the parameter table ----------------------------------------------
 * One layer's rows (names after "layers.l.", view fields of
 * attn_decoder_layer_params, in block order) are the one table of the
 * decoder's parameters: the count, the views (of parameters and of
 * gradients), the block's slice names and init, and the typed files all
 * read it. A new kind of sublayer adds its rows here. */
#define LP(f) offsetof(attn_decoder_layer_params, f)
static void layer_table(const attn_decoder_config *c, attn__ptab *t) {
    const int64_t E = c->d_model, F = c->dim_feedforward;
    static const size_t ffn[4] = {LP(w_1), LP(b_1), LP(w_2), LP(b_2)};
    attn_mha_config m = sa_cfg(c);
    t->n = 0;
    attn__mha_ptab(t, &m, "self_attn.", LP(self_attn));
    if (c->cross && c->cross_attention == ATTN_ATTENTION_DOT) {
        attn__mha_ptab(t, &m, "cross_attn.", LP(cross_mha));
    } else if (c->cross) {
        attn_additive_config a = add_cfg(c);
        attn__additive_ptab(t, &a, "cross_attn.", LP(cross_add));
        attn__ptab_add(t, "cross_attn.", "w_o", E, E, ATTN_INIT_XAVIER,
                       LP(cross_w_o));
        attn__ptab_add(t, "cross_attn.", "b_o", E, 1, ATTN_INIT_ZERO,
                       LP(cross_b_o));
    }
    attn__ptab_ln(t, "ln1", E, LP(ln1_gamma), LP(ln1_beta));
    if (c->cross) attn__ptab_ln(t, "ln2", E, LP(ln2_gamma), LP(ln2_beta));
    attn__ptab_ln(t, "ln3", E, LP(ln3_gamma), LP(ln3_beta));
    attn__ffn_ptab(t, E, F, ffn_rows(c), ffn);
}
#undef LP

static attn_status check_any(const void *c) { return attn_decoder_check(c); }
static void table_any(const void *c, attn__ptab *t) { layer_table(c, t); }
static const attn__stack_kind kind = {"decoder",
                                      check_any,
                                      table_any,
                                      offsetof(attn_decoder_config, num_layers),
                                      offsetof(attn_decoder_config, d_model),
                                      offsetof(attn_decoder_config, final_norm),
                                      12,
                                      INT_MAX};

int64_t attn_decoder_param_count(const attn_decoder_config *c) {
    return attn__stack_count(&kind, c);
}

attn_status attn_decoder_layer_view(const attn_decoder_config *c, float *block,
                                    int64_t layer,
                                    attn_decoder_layer_params *p) {
    return attn__stack_view(&kind, c, block, layer, p, sizeof *p);
}

attn_status attn_decoder_final_norm_view(const attn_decoder_config *c,
                                         float *block, float **gamma,
                                         float **beta) {
    return attn__stack_norm_view(&kind, c, block, gamma, beta);
}

attn_status attn_decoder_param_slices(const attn_decoder_config *c,
                                      const char *prefix, int64_t offset,
                                      attn_param_slice *slices, int64_t cap,
                                      int64_t *count) {
    return attn__stack_slices(&kind, c, prefix, offset, slices, cap, count);
}

attn_status attn__decoder_slices(const void *c, attn_param_slice *sl,
                                 int64_t cap, int64_t *n) {
    return attn_decoder_param_slices(c, "", 0, sl, cap, n);
}

attn_status attn_decoder_init(const attn_decoder_config *c, float *params,
                              uint64_t seed) {
    return attn__init_by_slices(attn__decoder_slices, c, params, seed);
}

/* ---- workspace -------------------------------------------------------- */

/* One sublayer's saved state: its input, the LayerNorm output (of the
 * input with pre-norm, of the residual sum with post-norm), the residual
 * sum and the norm statistics. */
typedef struct {
    float *xin, *lny, *r, *m, *s;
} sub_ws;

typedef struct {
    sub_ws sub[3]; /* indexed by SUB_SA, SUB_CA, SUB_FF     */
    float *sa, *ca, *ctx, *hpre, *hact;
} layer_ws;

/* Shared: the last layer's output with its final-norm stats, and scratch
 * a (a sublayer's output), g, t1, t2, dc (B Lt E), gh (B Lt F). */
typedef struct {
    float *xn, *mf, *sf, *a, *g, *t1, *t2, *dc, *gh;
} shared_ws;

typedef struct {
    size_t be, bf, bl, sa, ca, per, total;
} ws_sizes;

static int ws_sizes_of(const attn_decoder_config *c, int64_t B, int64_t Lt,
                       int64_t Ls, ws_sizes *z) {
    memset(z, 0, sizeof *z);
    z->be = attn__size3(B, Lt, c->d_model);
    z->bf = attn__size3(B, Lt, ffn_rows(c));
    z->bl = attn__size3(B, Lt, 1);
    attn_mha_config m = sa_cfg(c);
    if (!z->be || !z->bf || !z->bl ||
        attn_mha_workspace_size(&m, B, Lt, Lt, &z->sa))
        return 0;
    if (c->cross && c->cross_attention == ATTN_ATTENTION_DOT) {
        if (attn_mha_workspace_size(&m, B, Lt, Ls, &z->ca)) return 0;
    } else if (c->cross) {
        attn_additive_config a = add_cfg(c);
        if (attn_additive_workspace_size(&a, B, Lt, Ls, &z->ca)) return 0;
    }
    const size_t lim = SIZE_MAX / sizeof(float) / 64;
    if (z->be > lim || z->bf > lim || z->sa > lim || z->ca > lim) return 0;
    z->per = 3 * (3 * z->be + 2 * z->bl) + z->sa + z->ca + z->be + 2 * z->bf;
    if (z->per > lim * 16 / (size_t)c->num_layers) return 0;
    z->total = z->per * (size_t)c->num_layers + 6 * z->be + 2 * z->bl + z->bf;
    return 1;
}

static float *take(float **x, size_t n) {
    float *p = *x;
    *x += n;
    return p;
}

static void ws_layer(const ws_sizes *z, float *ws, int64_t l, layer_ws *w) {
    float *x = ws + z->per * (size_t)l;
    for (int k = 0; k < 3; k++) {
        sub_ws *s = &w->sub[k];
        s->xin = take(&x, z->be);
        s->lny = take(&x, z->be);
        s->r = take(&x, z->be);
        s->m = take(&x, z->bl);
        s->s = take(&x, z->bl);
    }
    w->sa = take(&x, z->sa);
    w->ca = take(&x, z->ca);
    w->ctx = take(&x, z->be);
    w->hpre = take(&x, z->bf);
    w->hact = x;
}

static void ws_shared(const ws_sizes *z, float *ws, int64_t M, shared_ws *s) {
    float *x = ws + z->per * (size_t)M;
    s->xn = take(&x, z->be);
    s->mf = take(&x, z->bl);
    s->sf = take(&x, z->bl);
    s->a = take(&x, z->be);
    s->g = take(&x, z->be);
    s->t1 = take(&x, z->be);
    s->t2 = take(&x, z->be);
    s->dc = take(&x, z->be);
    s->gh = x;
}

attn_status attn_decoder_workspace_size(const attn_decoder_config *c, int64_t B,
                                        int64_t Lt, int64_t Ls,
                                        size_t *floats) {
    attn_status st = attn_decoder_check(c);
    if (st) return st;
    ATTN__NEED(floats);
    if (!c->cross) Ls = 1;
    if (B < 1 || Lt < 1 || Ls < 1)
        return attn__fail(ATTN_E_SHAPE, "B=%lld Lt=%lld Ls=%lld must be >= 1",
                          (long long)B, (long long)Lt, (long long)Ls);
    ws_sizes z;
    if (!ws_sizes_of(c, B, Lt, Ls, &z))
        return attn__fail(ATTN_E_NOMEM, "decoder workspace size overflows");
    *floats = z.total;
    return ATTN_OK;
}

/* ---- one call's context ---------------------------------------------- */

typedef struct {
    const attn_decoder_config *c;
    const float *params;
    float *grads;
    int64_t B, Lt, Ls, E, F, n;
    const float *mem;
    float *dmem;
    const attn_layer_opts *opts;
    attn_layer_opts osa, oca; /* per layer: seeds set by set_layer      */
    ws_sizes z;
    float *ws;
    shared_ws sw;
    layer_ws w;
    attn_decoder_layer_params P, G;
    int64_t l;
    int th;
    float *self_weights, *cross_weights;
} dctx;

/* Random streams: attention-weight dropout of SA and CA of layer l uses
 * seeds derived from (seed, 2l) and (seed, 2l + 1); activation dropout at
 * site s (1 SA output, 2 CA output, 3 FFN hidden, 4 FFN output) stream
 * 8 l + s of the caller's seed. */
static uint32_t dstream(int64_t l, int site) {
    return (uint32_t)(l * 8 + site);
}

static void set_layer(dctx *d, int64_t l) {
    d->l = l;
    ws_layer(&d->z, d->ws, l, &d->w);
    attn_decoder_layer_view(d->c, (float *)d->params, l, &d->P);
    if (d->grads) attn_decoder_layer_view(d->c, d->grads, l, &d->G);
    d->osa.seed = attn__enc_seed(d->opts->seed, 2 * l);
    d->oca.seed = attn__enc_seed(d->opts->seed, 2 * l + 1);
}

static void ln_of(int k, float **g, float **b,
                  const attn_decoder_layer_params *P) {
    *g = k == SUB_SA ? P->ln1_gamma : k == SUB_CA ? P->ln2_gamma : P->ln3_gamma;
    *b = k == SUB_SA ? P->ln1_beta : k == SUB_CA ? P->ln2_beta : P->ln3_beta;
}

static int out_site(int k) { return k == SUB_SA ? 1 : k == SUB_CA ? 2 : 4; }

/* The feed-forward body of layer d->l (hidden dropout at site 3). */
static attn__ffn ffn_of(const dctx *d) {
    const attn_decoder_layer_params *P = &d->P, *G = d->grads ? &d->G : NULL;
    const attn__ffn f = {d->n,
                         d->E,
                         d->F,
                         d->c->activation,
                         P->w_1,
                         P->b_1,
                         P->w_2,
                         P->b_2,
                         G ? G->w_1 : NULL,
                         G ? G->b_1 : NULL,
                         G ? G->w_2 : NULL,
                         G ? G->b_2 : NULL,
                         d->w.hpre,
                         d->w.hact,
                         d->opts->seed,
                         dstream(d->l, 3),
                         d->opts->dropout_p,
                         d->th};
    return f;
}

/* The residual and norm around sublayer k of layer d->l. */
static attn__sublayer sub_of(const dctx *d, int k) {
    const sub_ws *w = &d->w.sub[k];
    attn__sublayer s;
    memset(&s, 0, sizeof s);
    s.n = d->n;
    s.E = d->E;
    s.norm_first = d->c->norm_first;
    s.rms = d->c->norm == ATTN_NORM_RMS;
    s.th = d->th;
    s.eps = attn__layer_ln_eps(d->c->layer_norm_eps);
    float *g, *b;
    ln_of(k, &g, &b, &d->P);
    s.gamma = g;
    s.beta = b;
    if (d->grads) ln_of(k, &s.dgamma, &s.dbeta, &d->G);
    s.x = w->xin;
    s.lny = w->lny;
    s.r = w->r;
    s.mean = w->m;
    s.rstd = w->s;
    s.seed = d->opts->seed;
    s.stream = dstream(d->l, out_site(k));
    s.p = d->opts->dropout_p;
    return s;
}

/* The sublayer body: in (B Lt E) -> d->sw.a (B Lt E), before dropout. */
static attn_status body_forward(dctx *d, int k, const float *in) {
    const attn_decoder_config *c = d->c;
    const attn_decoder_layer_params *P = &d->P;
    const int64_t B = d->B, Lt = d->Lt, Ls = d->Ls, E = d->E;
    attn_mha_config m = sa_cfg(c);
    if (k == SUB_SA) {
        float *wl = d->self_weights
                        ? d->self_weights + d->l * B * c->num_heads * Lt * Lt
                        : NULL;
        return attn_mha_forward(&m, P->self_attn.w_q, B, Lt, Lt, in, in, in,
                                &d->osa, d->sw.a, wl, ATTN_WEIGHTS_PER_HEAD,
                                d->w.sa);
    }
    if (k == SUB_CA) {
        float *wl = d->cross_weights
                        ? d->cross_weights +
                              d->l * B * attn_decoder_cross_heads(c) * Lt * Ls
                        : NULL;
        if (c->cross_attention == ATTN_ATTENTION_DOT)
            return attn_mha_forward(&m, P->cross_mha.w_q, B, Lt, Ls, in, d->mem,
                                    d->mem, &d->oca, d->sw.a, wl,
                                    ATTN_WEIGHTS_PER_HEAD, d->w.ca);
        attn_additive_config a = add_cfg(c);
        attn_status st =
            attn_additive_forward(&a, P->cross_add.w_q, B, Lt, Ls, in, d->mem,
                                  d->mem, &d->oca, d->w.ctx, wl, d->w.ca);
        if (st) return st;
        return attn_linear_forward(d->n, E, E, d->w.ctx, P->cross_w_o,
                                   P->cross_b_o, d->sw.a);
    }
    const attn__ffn f = ffn_of(d);
    return attn__ffn_forward(&f, in, d->sw.a);
}

/* Gradient dy (B Lt E) of the body's output -> ADDED into din. */
static attn_status body_backward(dctx *d, int k, const float *in,
                                 const float *dy, float *din) {
    const attn_decoder_config *c = d->c;
    const attn_decoder_layer_params *P = &d->P, *G = d->grads ? &d->G : NULL;
    const int64_t B = d->B, Lt = d->Lt, Ls = d->Ls, E = d->E;
    attn_mha_config m = sa_cfg(c);
    if (k == SUB_SA)
        return attn_mha_backward(&m, P->self_attn.w_q, B, Lt, Lt, in, in, in,
                                 &d->osa, dy, d->w.sa,
                                 G ? G->self_attn.w_q : NULL, din, din, din);
    if (k == SUB_CA) {
        if (c->cross_attention == ATTN_ATTENTION_DOT)
            return attn_mha_backward(&m, P->cross_mha.w_q, B, Lt, Ls, in,
                                     d->mem, d->mem, &d->oca, dy, d->w.ca,
                                     G ? G->cross_mha.w_q : NULL, din, d->dmem,
                                     d->dmem);
        attn_additive_config a = add_cfg(c);
        memset(d->sw.dc, 0, d->z.be * sizeof(float));
        attn_linear_backward(d->n, E, E, d->w.ctx, P->cross_w_o, dy,
                             G ? G->cross_w_o : NULL, G ? G->cross_b_o : NULL,
                             d->sw.dc);
        return attn_additive_backward(&a, P->cross_add.w_q, B, Lt, Ls, in,
                                      d->mem, d->mem, &d->oca, d->sw.dc,
                                      d->w.ca, G ? G->cross_add.w_q : NULL, din,
                                      d->dmem, d->dmem);
    }
    const attn__ffn f = ffn_of(d);
    return attn__ffn_backward(&f, in, dy, d->sw.gh, din);
}

/* Sublayer k on in: its output in *out (a buffer of the workspace). */
static attn_status sub_forward(dctx *d, int k, const float *in,
                               const float **out) {
    memcpy(d->w.sub[k].xin, in, d->z.be * sizeof(float));
    const attn__sublayer s = sub_of(d, k);
    attn_status st = body_forward(d, k, attn__sublayer_in(&s));
    if (st) return st;
    *out = attn__sublayer_out(&s, d->sw.a);
    return ATTN_OK;
}

/* d->sw.g holds d out of sublayer k on entry and d in on return. */
static attn_status sub_backward(dctx *d, int k) {
    const attn__sublayer s = sub_of(d, k);
    shared_ws *w = &d->sw;
    const float *bin;
    float *din = attn__sublayer_back_in(&s, w->g, w->t1, w->t2, &bin);
    attn_status st = body_backward(d, k, bin, w->t1, din);
    if (st) return st;
    attn__sublayer_back_out(&s, w->g, w->t2);
    return ATTN_OK;
}

static attn_status setup(dctx *d, const attn_decoder_config *c,
                         const float *params, int64_t B, int64_t Lt, int64_t Ls,
                         const float *x, const float *memory,
                         const int64_t *memory_lengths,
                         const attn_layer_opts *opts, float *ws) {
    attn_status st = attn_decoder_check(c);
    if (st) return st;
    ATTN__NEED(params);
    ATTN__NEED(x);
    ATTN__NEED(ws);
    ATTN__NEED(opts);
    if (!c->cross) Ls = 1;
    size_t nws;
    if ((st = attn_decoder_workspace_size(c, B, Lt, Ls, &nws))) return st;
    memset(d, 0, sizeof *d);
    d->osa = *opts;
    d->osa.mask.causal = 1;
    d->osa.mask.align = ATTN_ALIGN_TOP_LEFT;
    if (c->rope.theta != 0) d->osa.rope = &c->rope;
    if (c->sliding_window > 0) d->osa.mask.window_left = c->sliding_window - 1;
    if ((st = attn__layer_opts_check(&d->osa, B, c->num_heads, Lt, Lt)))
        return st;
    if ((st = attn__check_finite_f32(x, B * Lt * c->d_model, "x"))) return st;
    if (c->cross) {
        ATTN__NEED(memory);
        if ((st = attn__lengths_check(memory_lengths, B, Ls, "memory_lengths",
                                      "Ls = ")))
            return st;
        if ((st =
                 attn__check_finite_f32(memory, B * Ls * c->d_model, "memory")))
            return st;
    }
    attn_sdpa_opts_init(&d->oca);
    d->oca.scale = opts->scale;
    d->oca.dropout_p = opts->dropout_p;
    d->oca.impl = opts->impl;
    d->oca.threads = opts->threads;
    d->oca.mask.key_lengths = memory_lengths;
    d->c = c;
    d->params = params;
    d->B = B;
    d->Lt = Lt;
    d->Ls = Ls;
    d->E = c->d_model;
    d->F = c->dim_feedforward;
    d->n = B * Lt;
    d->mem = memory;
    d->opts = opts;
    d->ws = ws;
    d->th = attn__threads(opts);
    ws_sizes_of(c, B, Lt, Ls, &d->z);
    ws_shared(&d->z, ws, c->num_layers, &d->sw);
    return ATTN_OK;
}

/* ---- forward ---------------------------------------------------------- */

static attn_status decoder_forward_body(dctx *d, const float *x, float *out) {
    const attn_decoder_config *c = d->c;
    const float *cur = x;
    attn_status st;
    for (int64_t l = 0; l < c->num_layers; l++) {
        set_layer(d, l);
        if ((st = sub_forward(d, SUB_SA, cur, &cur))) return st;
        if (c->cross && (st = sub_forward(d, SUB_CA, cur, &cur))) return st;
        if ((st = sub_forward(d, SUB_FF, cur, &cur))) return st;
    }
    memcpy(d->sw.xn, cur, d->z.be * sizeof(float));
    if (c->final_norm) {
        float *g, *b;
        attn_decoder_final_norm_view(c, (float *)d->params, &g, &b);
        if (c->norm == ATTN_NORM_RMS)
            attn__rmsnorm_forward(d->n, d->E, d->sw.xn, g, b,
                                  attn__layer_ln_eps(c->layer_norm_eps), out,
                                  d->sw.sf, d->th);
        else
            attn__layernorm_forward(d->n, d->E, d->sw.xn, g, b,
                                    attn__layer_ln_eps(c->layer_norm_eps), out,
                                    d->sw.mf, d->sw.sf, d->th);
    } else {
        memcpy(out, d->sw.xn, d->z.be * sizeof(float));
    }
    return ATTN_OK;
}

attn_status
attn_decoder_forward(const attn_decoder_config *cfg, const float *params,
                     int64_t B, int64_t Lt, int64_t Ls, const float *x,
                     const float *memory, const int64_t *memory_lengths,
                     const attn_layer_opts *opts, float *out,
                     float *self_weights, float *cross_weights, float *ws) {
    dctx d;
    attn_status st =
        setup(&d, cfg, params, B, Lt, Ls, x, memory, memory_lengths, opts, ws);
    if (st) return st;
    ATTN__NEED(out);
    if (out == x || (cfg->cross && out == memory))
        return attn__fail(ATTN_E_INVALID, "out may not alias x or memory");
    d.self_weights = self_weights;
    d.cross_weights = cfg->cross ? cross_weights : NULL;
    const int blas = attn__layer_blas_begin(opts);
    st = decoder_forward_body(&d, x, out);
    attn__layer_end(blas);
    return st;
}

/* ---- backward --------------------------------------------------------- */

static attn_status decoder_backward_body(dctx *d, const float *dout,
                                         float *dx) {
    const attn_decoder_config *c = d->c;
    const size_t be = d->z.be * sizeof(float);
    attn_status st;
    if (c->final_norm) {
        float *g, *b, *dg = NULL, *db = NULL;
        attn_decoder_final_norm_view(c, (float *)d->params, &g, &b);
        if (d->grads) attn_decoder_final_norm_view(c, d->grads, &dg, &db);
        memset(d->sw.g, 0, be);
        if (c->norm == ATTN_NORM_RMS)
            attn__rmsnorm_backward(d->n, d->E, d->sw.xn, g, d->sw.sf, dout, dg,
                                   db, d->sw.g, d->th);
        else
            attn__layernorm_backward(d->n, d->E, d->sw.xn, g, d->sw.mf,
                                     d->sw.sf, dout, dg, db, d->sw.g, d->th);
    } else {
        memcpy(d->sw.g, dout, be);
    }
    for (int64_t l = c->num_layers - 1; l >= 0; l--) {
        set_layer(d, l);
        if ((st = sub_backward(d, SUB_FF))) return st;
        if (c->cross && (st = sub_backward(d, SUB_CA))) return st;
        if ((st = sub_backward(d, SUB_SA))) return st;
    }
    if (dx)
        for (int64_t i = 0; i < d->n * d->E; i++) dx[i] += d->sw.g[i];
    return ATTN_OK;
}

attn_status
attn_decoder_backward(const attn_decoder_config *cfg, const float *params,
                      int64_t B, int64_t Lt, int64_t Ls, const float *x,
                      const float *memory, const int64_t *memory_lengths,
                      const attn_layer_opts *opts, const float *dout, float *ws,
                      float *grads, float *dx, float *dmemory) {
    dctx d;
    attn_status st =
        setup(&d, cfg, params, B, Lt, Ls, x, memory, memory_lengths, opts, ws);
    if (st) return st;
    ATTN__NEED(dout);
    if ((st = attn__check_finite_f32(dout, B * Lt * cfg->d_model, "dout")))
        return st;
    d.grads = grads;
    d.dmem = cfg->cross ? dmemory : NULL;
    const int blas = attn__layer_blas_begin(opts);
    st = decoder_backward_body(&d, dout, dx);
    attn__layer_end(blas);
    return st;
}

/* ---- typed files (docs/params-format.md) ----------------------------- */

static const attn__cfg_field decoder_cfg[13] = {
    ATTN__CFG(attn_decoder_config, num_layers, ATTN__CFG_I64),
    ATTN__CFG(attn_decoder_config, d_model, ATTN__CFG_I64),
    ATTN__CFG(attn_decoder_config, num_heads, ATTN__CFG_I64),
    ATTN__CFG(attn_decoder_config, num_kv_heads, ATTN__CFG_I64),
    ATTN__CFG(attn_decoder_config, dim_feedforward, ATTN__CFG_I64),
    ATTN__CFG(attn_decoder_config, cross, ATTN__CFG_INT),
    ATTN__CFG(attn_decoder_config, cross_attention, ATTN__CFG_INT),
    ATTN__CFG(attn_decoder_config, additive_dim, ATTN__CFG_I64),
    ATTN__CFG(attn_decoder_config, activation, ATTN__CFG_INT),
    ATTN__CFG(attn_decoder_config, norm_first, ATTN__CFG_INT),
    ATTN__CFG(attn_decoder_config, final_norm, ATTN__CFG_INT),
    ATTN__CFG(attn_decoder_config, layer_norm_eps, ATTN__CFG_F64),
    {0, ATTN__CFG_ZERO}};

static const attn__typed_kind decoder_kind = {"decoder", decoder_cfg, 13,
                                              sizeof(attn_decoder_config),
                                              attn__decoder_slices};

attn_status attn_decoder_save(const char *path, const attn_decoder_config *c,
                              const float *params) {
    if (c && (c->norm || c->attn_no_bias || c->rope.theta != 0 ||
              c->sliding_window || c->activation == ATTN_ACT_SWIGLU))
        return attn__fail(ATTN_E_UNSUPPORTED,
                          "decoder files hold the LayerNorm stack: RMSNorm, "
                          "SwiGLU, attention without biases, rotary "
                          "positions and windows are not written");
    return attn__save_kind(&decoder_kind, path, c, params);
}

attn_status attn_decoder_load(const char *path, attn_decoder_config *cfg,
                              float **params) {
    ATTN__NEED(path);
    if (params) *params = NULL;
    return attn__load_kind(&decoder_kind, path, cfg, params);
}
