/* The Transformer decoder: M layers of masked self-attention, optional
 * cross-attention over a memory (multi-head dot product or additive) and a
 * feed-forward network, each sublayer wrapped in a residual connection and
 * LayerNorm (post-norm or pre-norm), an optional final LayerNorm. Every
 * sublayer goes through one wrapper (sub_forward / sub_backward) around its
 * body, so the residual and norm logic exists once. Forward keeps what
 * backward needs in the caller's workspace; backward walks the sublayers in
 * reverse. */
#include "layers.h"
#include "attn_transformer.h"

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
    c->activation = ATTN_ACT_RELU;
}

static attn_mha_config sa_cfg(const attn_decoder_config *c) {
    attn_mha_config m = {c->d_model, c->num_heads, c->num_kv_heads, 0, 0, 1};
    return m;
}

static attn_additive_config add_cfg(const attn_decoder_config *c) {
    int64_t A = c->additive_dim ? c->additive_dim : c->d_model / 2;
    attn_additive_config a = {c->d_model,    c->d_model, c->d_model,
                              A > 0 ? A : 1, 1,          0};
    return a;
}

static double ln_eps(const attn_decoder_config *c) {
    return c->layer_norm_eps > 0 ? c->layer_norm_eps : 1e-5;
}

static int has_add(const attn_decoder_config *c) {
    return c->cross && c->cross_attention == ATTN_ATTENTION_ADDITIVE;
}

attn_status attn_decoder_check(const attn_decoder_config *c) {
    ATTN__NEED(c);
    if (c->num_layers < 1 || c->d_model < 1 || c->dim_feedforward < 1 ||
        c->additive_dim < 0)
        return attn__fail(ATTN_E_INVALID,
                          "decoder config: num_layers %lld, "
                          "d_model %lld, dim_feedforward %lld must be >= 1 "
                          "(additive_dim %lld >= 0)",
                          (long long)c->num_layers, (long long)c->d_model,
                          (long long)c->dim_feedforward,
                          (long long)c->additive_dim);
    if (!attn__blas_ok(c->dim_feedforward) || c->num_layers > 100000 ||
        c->d_model > (1 << 20) || c->dim_feedforward > (1 << 22))
        return attn__fail(ATTN_E_INVALID, "decoder config sizes out of range");
    if (c->cross != 0 && c->cross != 1)
        return attn__fail(ATTN_E_INVALID,
                          "decoder cross must be 0 or 1, not "
                          "%d",
                          c->cross);
    if (c->cross_attention != ATTN_ATTENTION_DOT &&
        c->cross_attention != ATTN_ATTENTION_ADDITIVE)
        return attn__fail(ATTN_E_INVALID, "decoder cross_attention type is %d",
                          (int)c->cross_attention);
    if (c->activation != ATTN_ACT_RELU && c->activation != ATTN_ACT_GELU)
        return attn__fail(ATTN_E_INVALID, "decoder activation is %d",
                          (int)c->activation);
    if ((c->norm_first != 0 && c->norm_first != 1) ||
        (c->final_norm != 0 && c->final_norm != 1))
        return attn__fail(ATTN_E_INVALID,
                          "decoder norm_first (%d) and "
                          "final_norm (%d) must be 0 or 1",
                          c->norm_first, c->final_norm);
    if (isnan(c->layer_norm_eps) || c->layer_norm_eps < 0 ||
        isinf(c->layer_norm_eps))
        return attn__fail(ATTN_E_INVALID, "decoder layer_norm_eps is %g",
                          c->layer_norm_eps);
    attn_mha_config m = sa_cfg(c);
    attn_status st = attn__mha_check_cfg(&m, NULL, NULL);
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

/* Floats of one cross-attention block (additive includes w_o, b_o). */
static int64_t ca_count(const attn_decoder_config *c) {
    if (!c->cross) return 0;
    if (c->cross_attention == ATTN_ATTENTION_DOT) {
        attn_mha_config m = sa_cfg(c);
        return attn_mha_param_count(&m);
    }
    attn_additive_config a = add_cfg(c);
    return attn_additive_param_count(&a) + c->d_model * (c->d_model + 1);
}

/* The sizes are bounded by attn_decoder_check (E <= 2^20, F <= 2^22), so
 * one layer's count fits int64 without further checks. */
static int64_t layer_count(const attn_decoder_config *c) {
    attn_mha_config m = sa_cfg(c);
    const int64_t E = c->d_model, F = c->dim_feedforward;
    return attn_mha_param_count(&m) + ca_count(c) + 2 * F * E + F + E +
           (c->cross ? 6 : 4) * E;
}

int64_t attn_decoder_param_count(const attn_decoder_config *c) {
    if (attn_decoder_check(c)) return 0;
    int64_t n;
    if (!attn__mul_i64(layer_count(c), c->num_layers, &n) || n > INT64_MAX / 2)
        return 0;
    return n + (c->final_norm ? 2 * c->d_model : 0);
}

attn_status attn_decoder_layer_view(const attn_decoder_config *c, float *block,
                                    int64_t layer,
                                    attn_decoder_layer_params *p) {
    attn_status st = attn_decoder_check(c);
    if (st) return st;
    ATTN__NEED(block);
    ATTN__NEED(p);
    if (layer < 0 || layer >= c->num_layers)
        return attn__fail(ATTN_E_INVALID, "layer %lld is outside [0, %lld)",
                          (long long)layer, (long long)c->num_layers);
    if (!attn_decoder_param_count(c))
        return attn__fail(ATTN_E_NOMEM, "decoder parameter count overflows");
    const int64_t E = c->d_model, F = c->dim_feedforward;
    memset(p, 0, sizeof *p);
    attn_mha_config m = sa_cfg(c);
    float *x = block + layer * layer_count(c);
    attn_mha_params_view(&m, x, &p->self_attn);
    x += attn_mha_param_count(&m);
    if (c->cross && c->cross_attention == ATTN_ATTENTION_DOT) {
        attn_mha_params_view(&m, x, &p->cross_mha);
        x += attn_mha_param_count(&m);
    } else if (c->cross) {
        attn_additive_config a = add_cfg(c);
        attn_additive_params_view(&a, x, &p->cross_add);
        x += attn_additive_param_count(&a);
        p->cross_w_o = x;
        p->cross_b_o = x + E * E;
        x += E * E + E;
    }
    p->ln1_gamma = x;
    p->ln1_beta = x + E;
    x += 2 * E;
    if (c->cross) {
        p->ln2_gamma = x;
        p->ln2_beta = x + E;
        x += 2 * E;
    }
    p->ln3_gamma = x;
    p->ln3_beta = x + E;
    p->w_1 = x + 2 * E;
    p->b_1 = p->w_1 + F * E;
    p->w_2 = p->b_1 + F;
    p->b_2 = p->w_2 + E * F;
    return ATTN_OK;
}

attn_status attn_decoder_final_norm_view(const attn_decoder_config *c,
                                         float *block, float **gamma,
                                         float **beta) {
    attn_status st = attn_decoder_check(c);
    if (st) return st;
    ATTN__NEED(block);
    ATTN__NEED(gamma);
    ATTN__NEED(beta);
    if (!attn_decoder_param_count(c))
        return attn__fail(ATTN_E_NOMEM, "decoder parameter count overflows");
    float *x = block + c->num_layers * layer_count(c);
    *gamma = c->final_norm ? x : NULL;
    *beta = c->final_norm ? x + c->d_model : NULL;
    return ATTN_OK;
}

attn_status attn_decoder_param_slices(const attn_decoder_config *c,
                                      const char *prefix, int64_t offset,
                                      attn_param_slice *slices, int64_t cap,
                                      int64_t *count) {
    attn_status st = attn_decoder_check(c);
    if (st) return st;
    ATTN__NEED(count);
    if (!attn_decoder_param_count(c))
        return attn__fail(ATTN_E_NOMEM, "decoder parameter count overflows");
    const int64_t E = c->d_model, F = c->dim_feedforward;
    const char *px = prefix ? prefix : "";
    attn_mha_config m = sa_cfg(c);
    int64_t n = 0;
    char pre[96];
    for (int64_t l = 0; l < c->num_layers; l++) {
        int64_t k = 0;
        snprintf(pre, sizeof pre, "%.12slayers.%lld.self_attn.", px,
                 (long long)l);
        attn_mha_param_slices(&m, pre, offset,
                              slices && n < cap ? slices + n : NULL,
                              slices && n < cap ? cap - n : 0, &k);
        offset += attn_mha_param_count(&m);
        n += k;
        if (c->cross) {
            snprintf(pre, sizeof pre, "%.12slayers.%lld.cross_attn.", px,
                     (long long)l);
            attn_param_slice *dst = slices && n < cap ? slices + n : NULL;
            int64_t room = slices && n < cap ? cap - n : 0;
            if (c->cross_attention == ATTN_ATTENTION_DOT) {
                attn_mha_param_slices(&m, pre, offset, dst, room, &k);
                offset += attn_mha_param_count(&m);
                n += k;
            } else {
                attn_additive_config a = add_cfg(c);
                attn_additive_param_slices(&a, pre, offset, dst, room, &k);
                offset += attn_additive_param_count(&a);
                n += k;
                attn__slice_add(slices, cap, &n, pre, "w_o", &offset, E, E,
                                ATTN_INIT_XAVIER);
                attn__slice_add(slices, cap, &n, pre, "b_o", &offset, E, 1,
                                ATTN_INIT_ZERO);
            }
        }
        snprintf(pre, sizeof pre, "%.12slayers.%lld.", px, (long long)l);
        attn__slice_add(slices, cap, &n, pre, "ln1_gamma", &offset, E, 1,
                        ATTN_INIT_ONE);
        attn__slice_add(slices, cap, &n, pre, "ln1_beta", &offset, E, 1,
                        ATTN_INIT_ZERO);
        if (c->cross) {
            attn__slice_add(slices, cap, &n, pre, "ln2_gamma", &offset, E, 1,
                            ATTN_INIT_ONE);
            attn__slice_add(slices, cap, &n, pre, "ln2_beta", &offset, E, 1,
                            ATTN_INIT_ZERO);
        }
        attn__slice_add(slices, cap, &n, pre, "ln3_gamma", &offset, E, 1,
                        ATTN_INIT_ONE);
        attn__slice_add(slices, cap, &n, pre, "ln3_beta", &offset, E, 1,
                        ATTN_INIT_ZERO);
        attn__slice_add(slices, cap, &n, pre, "w_1", &offset, F, E,
                        ATTN_INIT_XAVIER);
        attn__slice_add(slices, cap, &n, pre, "b_1", &offset, F, 1,
                        ATTN_INIT_ZERO);
        attn__slice_add(slices, cap, &n, pre, "w_2", &offset, E, F,
                        ATTN_INIT_XAVIER);
        attn__slice_add(slices, cap, &n, pre, "b_2", &offset, E, 1,
                        ATTN_INIT_ZERO);
    }
    if (c->final_norm) {
        attn__slice_add(slices, cap, &n, px, "norm_gamma", &offset, E, 1,
                        ATTN_INIT_ONE);
        attn__slice_add(slices, cap, &n, px, "norm_beta", &offset, E, 1,
                        ATTN_INIT_ZERO);
    }
    *count = n;
    return ATTN_OK;
}

attn_status attn_decoder_init(const attn_decoder_config *c, float *params,
                              uint64_t seed) {
    int64_t n;
    attn_status st = attn_decoder_param_slices(c, "", 0, NULL, 0, &n);
    if (st) return st;
    ATTN__NEED(params);
    attn_param_slice *sl = attn__alloc((size_t)n, sizeof *sl, "slice table");
    if (!sl) return ATTN_E_NOMEM;
    attn_decoder_param_slices(c, "", 0, sl, n, &n);
    st = attn_params_init(sl, n, params, seed);
    attn__free(sl);
    return st;
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
    z->bf = attn__size3(B, Lt, c->dim_feedforward);
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

static void ws_layer(const ws_sizes *z, float *ws, int64_t l, layer_ws *w) {
    float *x = ws + z->per * (size_t)l;
    for (int k = 0; k < 3; k++) {
        sub_ws *s = &w->sub[k];
        s->xin = x;
        x += z->be;
        s->lny = x;
        x += z->be;
        s->r = x;
        x += z->be;
        s->m = x;
        x += z->bl;
        s->s = x;
        x += z->bl;
    }
    w->sa = x;
    x += z->sa;
    w->ca = x;
    x += z->ca;
    w->ctx = x;
    x += z->be;
    w->hpre = x;
    x += z->bf;
    w->hact = x;
}

static void ws_shared(const ws_sizes *z, float *ws, int64_t M, shared_ws *s) {
    float *x = ws + z->per * (size_t)M;
    s->xn = x;
    x += z->be;
    s->mf = x;
    x += z->bl;
    s->sf = x;
    x += z->bl;
    s->a = x;
    x += z->be;
    s->g = x;
    x += z->be;
    s->t1 = x;
    x += z->be;
    s->t2 = x;
    x += z->be;
    s->dc = x;
    x += z->be;
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

static void ln_of(const dctx *d, int k, float **g, float **b,
                  const attn_decoder_layer_params *P) {
    (void)d;
    *g = k == SUB_SA ? P->ln1_gamma : k == SUB_CA ? P->ln2_gamma : P->ln3_gamma;
    *b = k == SUB_SA ? P->ln1_beta : k == SUB_CA ? P->ln2_beta : P->ln3_beta;
}

static int out_site(int k) { return k == SUB_SA ? 1 : k == SUB_CA ? 2 : 4; }

/* The sublayer body: in (B Lt E) -> d->sw.a (B Lt E), before dropout. */
static attn_status body_forward(dctx *d, int k, const float *in) {
    const attn_decoder_config *c = d->c;
    const attn_decoder_layer_params *P = &d->P;
    const int64_t B = d->B, Lt = d->Lt, Ls = d->Ls, E = d->E, F = d->F;
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
    attn_linear_forward(d->n, E, F, in, P->w_1, P->b_1, d->w.hpre);
    attn__act_forward(c->activation, d->w.hpre, d->w.hact, d->n * F, d->th);
    attn__dropout_apply(d->opts->seed, dstream(d->l, 3), d->opts->dropout_p,
                        d->w.hact, d->n * F, d->th);
    return attn_linear_forward(d->n, F, E, d->w.hact, P->w_2, P->b_2, d->sw.a);
}

/* Gradient dy (B Lt E) of the body's output -> ADDED into din. */
static attn_status body_backward(dctx *d, int k, const float *in,
                                 const float *dy, float *din) {
    const attn_decoder_config *c = d->c;
    const attn_decoder_layer_params *P = &d->P, *G = d->grads ? &d->G : NULL;
    const int64_t B = d->B, Lt = d->Lt, Ls = d->Ls, E = d->E, F = d->F;
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
    memset(d->sw.gh, 0, d->z.bf * sizeof(float));
    attn_linear_backward(d->n, F, E, d->w.hact, P->w_2, dy, G ? G->w_2 : NULL,
                         G ? G->b_2 : NULL, d->sw.gh);
    attn__dropout_apply(d->opts->seed, dstream(d->l, 3), d->opts->dropout_p,
                        d->sw.gh, d->n * F, d->th);
    attn__act_backward(c->activation, d->w.hpre, d->sw.gh, d->sw.gh, d->n * F,
                       d->th);
    return attn_linear_backward(d->n, E, F, in, P->w_1, d->sw.gh,
                                G ? G->w_1 : NULL, G ? G->b_1 : NULL, din);
}

/* Residual + norm around a body: returns the sublayer's output in *out
 * (a buffer of the workspace). */
static attn_status sub_forward(dctx *d, int k, const float *in,
                               const float **out) {
    sub_ws *s = &d->w.sub[k];
    const int64_t n = d->n, E = d->E;
    const double eps = ln_eps(d->c);
    float *g, *b;
    ln_of(d, k, &g, &b, &d->P);
    memcpy(s->xin, in, d->z.be * sizeof(float));
    const float *bin = s->xin;
    if (d->c->norm_first) {
        attn__layernorm_forward(n, E, s->xin, g, b, eps, s->lny, s->m, s->s,
                                d->th);
        bin = s->lny;
    }
    attn_status st = body_forward(d, k, bin);
    if (st) return st;
    attn__dropout_apply(d->opts->seed, dstream(d->l, out_site(k)),
                        d->opts->dropout_p, d->sw.a, n * E, d->th);
    for (int64_t i = 0; i < n * E; i++) s->r[i] = s->xin[i] + d->sw.a[i];
    if (d->c->norm_first) {
        *out = s->r;
    } else {
        attn__layernorm_forward(n, E, s->r, g, b, eps, s->lny, s->m, s->s,
                                d->th);
        *out = s->lny;
    }
    return ATTN_OK;
}

/* d->sw.g holds d out of sublayer k on entry and d in on return. */
static attn_status sub_backward(dctx *d, int k) {
    sub_ws *s = &d->w.sub[k];
    shared_ws *w = &d->sw;
    const int64_t n = d->n, E = d->E;
    const size_t be = d->z.be * sizeof(float);
    const double p = d->opts->dropout_p;
    float *g, *b, *dg = NULL, *db = NULL;
    ln_of(d, k, &g, &b, &d->P);
    if (d->grads) ln_of(d, k, &dg, &db, &d->G);
    attn_status st;
    if (d->c->norm_first) {
        /* out = xin + drop(body(LN(xin))): g passes the residual as is */
        memcpy(w->t1, w->g, be);
        attn__dropout_apply(d->opts->seed, dstream(d->l, out_site(k)), p, w->t1,
                            n * E, d->th);
        memset(w->t2, 0, be);
        if ((st = body_backward(d, k, s->lny, w->t1, w->t2))) return st;
        attn__layernorm_backward(n, E, s->xin, g, s->m, s->s, w->t2, dg, db,
                                 w->g, d->th);
    } else {
        /* out = LN(xin + drop(body(xin))) */
        memset(w->t1, 0, be);
        attn__layernorm_backward(n, E, s->r, g, s->m, s->s, w->g, dg, db, w->t1,
                                 d->th);
        memcpy(w->g, w->t1, be);
        attn__dropout_apply(d->opts->seed, dstream(d->l, out_site(k)), p, w->t1,
                            n * E, d->th);
        if ((st = body_backward(d, k, s->xin, w->t1, w->g))) return st;
    }
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
    if ((st = attn__layer_opts_check(&d->osa, B, c->num_heads, Lt, Lt)))
        return st;
    if ((st = attn__check_finite_f32(x, B * Lt * c->d_model, "x"))) return st;
    if (c->cross) {
        ATTN__NEED(memory);
        if (memory_lengths)
            for (int64_t b = 0; b < B; b++)
                if (memory_lengths[b] < 1 || memory_lengths[b] > Ls)
                    return attn__fail(ATTN_E_SHAPE,
                                      "memory_lengths[%lld] is "
                                      "%lld; it must be in [1, Ls = %lld]",
                                      (long long)b,
                                      (long long)memory_lengths[b],
                                      (long long)Ls);
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
        attn__layernorm_forward(d->n, d->E, d->sw.xn, g, b, ln_eps(c), out,
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
    attn__blas_single_end(blas);
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
        attn__layernorm_backward(d->n, d->E, d->sw.xn, g, d->sw.mf, d->sw.sf,
                                 dout, dg, db, d->sw.g, d->th);
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
    attn__blas_single_end(blas);
    return st;
}

/* ---- files ------------------------------------------------------------ */

#define DEC_NCFG 13

attn_status attn_decoder_save(const char *path, const attn_decoder_config *c,
                              const float *params) {
    int64_t ns;
    attn_status st = attn_decoder_param_slices(c, "", 0, NULL, 0, &ns);
    if (st) return st;
    ATTN__NEED(path);
    ATTN__NEED(params);
    attn_param_slice *sl = attn__alloc((size_t)ns, sizeof *sl, "slices");
    if (!sl) return ATTN_E_NOMEM;
    attn_decoder_param_slices(c, "", 0, sl, ns, &ns);
    attn_params_header h;
    memset(&h, 0, sizeof h);
    snprintf(h.kind, sizeof h.kind, "decoder");
    int64_t eps;
    memcpy(&eps, &c->layer_norm_eps, 8);
    const int64_t v[DEC_NCFG] = {c->num_layers,
                                 c->d_model,
                                 c->num_heads,
                                 c->num_kv_heads,
                                 c->dim_feedforward,
                                 c->cross,
                                 (int64_t)c->cross_attention,
                                 c->additive_dim,
                                 (int64_t)c->activation,
                                 c->norm_first,
                                 c->final_norm,
                                 eps,
                                 0};
    h.config_len = DEC_NCFG;
    memcpy(h.config, v, sizeof v);
    st =
        attn_params_save(path, &h, sl, ns, params, attn_decoder_param_count(c));
    attn__free(sl);
    return st;
}

attn_status attn_decoder_load(const char *path, attn_decoder_config *cfg,
                              float **params) {
    ATTN__NEED(path);
    ATTN__NEED(cfg);
    ATTN__NEED(params);
    *params = NULL;
    attn_params_header h;
    attn_param_slice *sl = NULL, *want = NULL;
    int64_t ns, count, nw = 0;
    float *block = NULL;
    attn_status st = attn_params_load(path, &h, &sl, &ns, &block, &count);
    if (st) return st;
    if (strcmp(h.kind, "decoder") != 0 || h.config_len != DEC_NCFG) {
        st = attn__fail(ATTN_E_FORMAT,
                        "%s holds a '%s' model (%d config "
                        "values), not 'decoder'",
                        path, h.kind, (int)h.config_len);
        goto done;
    }
    attn_decoder_config c;
    memset(&c, 0, sizeof c);
    c.num_layers = h.config[0];
    c.d_model = h.config[1];
    c.num_heads = h.config[2];
    c.num_kv_heads = h.config[3];
    c.dim_feedforward = h.config[4];
    c.cross = (int)h.config[5];
    c.cross_attention = (attn_attention_type)h.config[6];
    c.additive_dim = h.config[7];
    c.activation = (attn_activation)h.config[8];
    c.norm_first = (int)h.config[9];
    c.final_norm = (int)h.config[10];
    memcpy(&c.layer_norm_eps, &h.config[11], 8);
    if (attn_decoder_param_slices(&c, "", 0, NULL, 0, &nw)) {
        st = attn__fail(ATTN_E_FORMAT, "%s: invalid decoder config (%s)", path,
                        attn_last_error());
        goto done;
    }
    if (!(want = attn__alloc((size_t)nw, sizeof *want, "slices"))) {
        st = ATTN_E_NOMEM;
        goto done;
    }
    attn_decoder_param_slices(&c, "", 0, want, nw, &nw);
    if (nw != ns || count != attn_decoder_param_count(&c)) {
        st = attn__fail(ATTN_E_FORMAT,
                        "%s: %lld slices and %lld floats, but "
                        "its config implies %lld and %lld",
                        path, (long long)ns, (long long)count, (long long)nw,
                        (long long)attn_decoder_param_count(&c));
        goto done;
    }
    for (int64_t i = 0; i < ns; i++)
        if (strcmp(sl[i].name, want[i].name) ||
            sl[i].offset != want[i].offset ||
            sl[i].shape[0] != want[i].shape[0] ||
            sl[i].shape[1] != want[i].shape[1]) {
            st = attn__fail(ATTN_E_FORMAT,
                            "%s: slice %lld is %.47s, its "
                            "config implies %.47s",
                            path, (long long)i, sl[i].name, want[i].name);
            goto done;
        }
    *cfg = c;
    *params = block;
    block = NULL;
done:
    attn__free(sl);
    attn__free(want);
    attn__free(block);
    return st;
}
