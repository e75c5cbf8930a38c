/* The decoder as generation runs it: one new position of every row per
 * step. The decoding state is built once: the parameter views of every
 * layer, a KV cache per layer for the self-attention, and, for dot
 * cross-attention, the keys and values of the memory appended once into a
 * cache of their own (checked once, then attended every step without a
 * second look). A step runs each layer's sublayers through the code of the
 * forward pass (attn__sublayer for the residual and norm, attn__ffn for
 * the feed-forward body) with attn_sdpa_cached as the attention.
 *
 * A prompt enters in one pass (attn__dec_prefill): the linear maps are
 * products over all its positions, the keys enter the caches rotated at
 * their positions, and the attention is causal over the cache; long
 * prompts go in pieces (PIECE positions unless told), which bounds the
 * buffers. A
 * step with a few rows may take the linear maps of the self-attention and
 * the SwiGLU feed-forward from weights kept in a block format (attn__qmat,
 * set by attn__dec_state_set_quant): the products read the blocks in
 * place. */
#include "transformer.h"
#include "../cache/kv_cache.h"
#include "../kernels/rope.h"

#include <string.h>

struct attn__dec_state {
    const attn_decoder_config *c;
    int64_t R, E, H, Hkv, hd, KV, F, Ls, M;
    int th;
    attn_decoder_layer_params *P;  /* [M] views of the parameters     */
    float *norm_g, *norm_b;        /* the final norm (NULL: none)     */
    attn_kv_cache **self, **cross; /* [M] each; cross: dot only       */
    const attn__qmat *qw;          /* [M][ATTN__DEC_NQ] or NULL       */
    int64_t L, rows_cap;           /* positions per row now; buffers  */
    const float *mem;              /* (R, Ls, E): additive attention  */
    const int64_t *klen;           /* [R] memory lengths, NULL: Ls    */
    float *add_ws;                 /* additive attention's workspace  */
    float *q, *k, *v, *ctx, *a, *lny, *r, *y, *hpre, *hact;
};

enum { PIECE = 512 };

/* The step buffers for n = R L rows (kept when large enough). */
static attn_status buffers(attn__dec_state *s, int64_t n) {
    if (n <= s->rows_cap) return ATTN_OK;
    /* SwiGLU's hidden layer before the gate is 2F wide */
    const int64_t F1 = s->c->activation == ATTN_ACT_SWIGLU ? 2 * s->F : s->F;
    const size_t re = attn__size3(n, s->E, 1), rf = attn__size3(n, F1, 1);
    float *q = re && rf
                   ? attn__alloc(8 * re + 2 * rf, sizeof(float), "step buffers")
                   : NULL;
    if (!q) return ATTN_E_NOMEM;
    attn__free(s->q);
    s->q = q;
    s->k = s->q + re;
    s->v = s->k + re;
    s->ctx = s->v + re;
    s->a = s->ctx + re;
    s->lny = s->a + re;
    s->r = s->lny + re;
    s->y = s->r + re;
    s->hpre = s->y + re;
    s->hact = s->hpre + rf;
    s->rows_cap = n;
    return ATTN_OK;
}

void attn__dec_state_set_quant(attn__dec_state *s, const attn__qmat *qw) {
    s->qw = qw;
}

void attn__dec_state_free(attn__dec_state *s) {
    if (!s) return;
    for (int64_t l = 0; l < s->M; l++) {
        if (s->self) attn_kv_cache_free(s->self[l]);
        if (s->cross) attn_kv_cache_free(s->cross[l]);
    }
    attn__free(s->self);
    attn__free(s->cross);
    attn__free(s->P);
    attn__free(s->add_ws);
    attn__free(s->q);
    attn__free(s);
}

static attn_status cache_of(const attn__dec_state *s, int64_t cap,
                            attn_kv_cache **out) {
    attn_kv_cache_config cc;
    attn_kv_cache_config_init(&cc);
    cc.batch = s->R;
    cc.kv_heads = s->Hkv;
    cc.capacity = cap;
    cc.head_dim = s->hd;
    cc.dtype = ATTN_F32;
    return attn_kv_cache_create(&cc, out);
}

/* The memory's keys and values of every layer into the cross caches. */
static attn_status cross_fill(attn__dec_state *s) {
    const int64_t R = s->R, Ls = s->Ls, KV = s->KV;
    const size_t per = attn__size3(R, Ls, KV);
    float *kv = per ? attn__alloc(2 * per, sizeof(float), "memory keys") : NULL;
    if (!kv) return ATTN_E_NOMEM;
    attn_status st = ATTN_OK;
    for (int64_t l = 0; l < s->M && !st; l++) {
        const attn_mha_params *P = &s->P[l].cross_mha;
        if ((st = cache_of(s, Ls, &s->cross[l])) ||
            (st = attn_linear_forward(R * Ls, s->E, KV, s->mem, P->w_k, P->b_k,
                                      kv)) ||
            (st = attn_linear_forward(R * Ls, s->E, KV, s->mem, P->w_v, P->b_v,
                                      kv + per)))
            break;
        attn_tensor K = attn_tensor_bthd(kv, ATTN_F32, R, Ls, s->Hkv, s->hd);
        attn_tensor V =
            attn_tensor_bthd(kv + per, ATTN_F32, R, Ls, s->Hkv, s->hd);
        st = attn_kv_cache_append(s->cross[l], &K, &V, s->klen);
    }
    attn__free(kv);
    return st;
}

attn_status attn__dec_state_create(const attn_decoder_config *c,
                                   const float *params, int64_t R, int64_t cap,
                                   const float *mem, int64_t Ls,
                                   const int64_t *klen, int threads,
                                   attn__dec_state **out) {
    *out = NULL;
    attn_status st = attn_decoder_check(c);
    if (st) return st;
    attn__dec_state *s = attn__alloc(1, sizeof *s, "decoding state");
    if (!s) return ATTN_E_NOMEM;
    memset(s, 0, sizeof *s);
    s->c = c;
    s->R = R;
    s->E = c->d_model;
    s->H = c->num_heads;
    s->Hkv = c->num_kv_heads ? c->num_kv_heads : c->num_heads;
    s->hd = s->E / s->H;
    s->KV = s->Hkv * s->hd;
    s->F = c->dim_feedforward;
    s->Ls = c->cross ? Ls : 1;
    s->M = c->num_layers;
    s->th = threads;
    s->mem = c->cross ? mem : NULL;
    s->klen = klen;
    s->L = 1;
    st = ATTN_E_NOMEM;
    if (!(s->P = attn__alloc((size_t)s->M, sizeof *s->P, "layer views")) ||
        !(s->self = attn__alloc((size_t)s->M, sizeof *s->self, "caches")))
        goto fail;
    memset(s->self, 0, sizeof *s->self * (size_t)s->M);
    if ((st = buffers(s, R))) goto fail;
    for (int64_t l = 0; l < s->M; l++)
        if ((st = attn_decoder_layer_view(c, (float *)params, l, &s->P[l])) ||
            (st = cache_of(s, cap, &s->self[l])) ||
            /* rotary positions: keys stored rotated at their positions */
            (c->rope.theta != 0 &&
             (st = attn_kv_cache_set_rope(s->self[l], &c->rope))))
            goto fail;
    if ((st = attn_decoder_final_norm_view(c, (float *)params, &s->norm_g,
                                           &s->norm_b)))
        goto fail;
    if (s->mem && c->cross_attention == ATTN_ATTENTION_DOT) {
        st = ATTN_E_NOMEM;
        if (!(s->cross = attn__alloc((size_t)s->M, sizeof *s->cross, "caches")))
            goto fail;
        memset(s->cross, 0, sizeof *s->cross * (size_t)s->M);
        if ((st = cross_fill(s))) goto fail;
    } else if (s->mem) {
        const attn_additive_config a =
            attn__layer_add_cfg(s->E, c->additive_dim);
        size_t wsn;
        if ((st = attn_additive_workspace_size(&a, R, 1, s->Ls, &wsn)))
            goto fail;
        st = ATTN_E_NOMEM;
        if (!(s->add_ws =
                  attn__alloc(wsn, sizeof(float), "additive workspace")))
            goto fail;
    }
    *out = s;
    return ATTN_OK;
fail:
    attn__dec_state_free(s);
    return st;
}

/* A prompt's piece of at least FLASH_ROWS positions attends through the
 * flash kernel (attn_sdpa_forward: tile products) rather than the decode
 * kernel, whose dot products per query and key suit a step's few rows:
 * the keys and values are the cache's own f32 rows, viewed in place, and
 * the queries are rotated at their positions here as the cache would. */
enum { FLASH_ROWS = 16 };

static int flash_fits(const attn__dec_state *s, const attn_kv_cache *c,
                      int causal) {
    return causal && s->R == 1 && s->L >= FLASH_ROWS &&
           c->cfg.dtype == ATTN_F32 && !c->doc && c->len[0] >= s->L;
}

static attn_status attend_flash(const attn__dec_state *s,
                                const attn_kv_cache *c, const attn_tensor *Q,
                                attn_sdpa_opts *o, attn_tensor *O) {
    const int64_t len = c->len[0], cap = c->cfg.capacity, hd = s->hd;
    attn_tensor K = {(void *)attn__kv_krow(c, 0, 0, 0),
                     ATTN_F32,
                     {1, s->Hkv, len, hd},
                     {s->Hkv * cap * hd, cap * hd, hd, 1}};
    attn_tensor V = K;
    V.data = (void *)attn__kv_vrow(c, 0, 0, 0);
    if (!c->rope_freq) return attn_sdpa_forward(Q, &K, &V, o, O, NULL, NULL);
    int64_t *pos = attn__alloc((size_t)s->L, sizeof(int64_t), "positions");
    if (!pos) return ATTN_E_NOMEM;
    for (int64_t i = 0; i < s->L; i++) pos[i] = len - s->L + i;
    attn_tensor qr;
    void *buf = NULL;
    attn_status st = attn__rope_copy(&c->rope, Q, pos, s->L, s->th, &qr, &buf);
    if (!st) st = attn_sdpa_forward(&qr, &K, &V, o, O, NULL, NULL);
    attn__free(buf);
    attn__free(pos);
    return st;
}

/* ctx (R, L, H hd): the new queries q over cache c; causal (bottom-right:
 * the new positions are the cache's last L) for the self-attention. */
static attn_status attend(const attn__dec_state *s, const attn_kv_cache *c,
                          int causal) {
    attn_tensor Q = attn_tensor_bthd(s->q, ATTN_F32, s->R, s->L, s->H, s->hd);
    attn_tensor O = attn_tensor_bthd(s->ctx, ATTN_F32, s->R, s->L, s->H, s->hd);
    attn_sdpa_opts o;
    attn_sdpa_opts_init(&o);
    o.threads = s->th;
    o.mask.causal = causal;
    o.mask.align = ATTN_ALIGN_BOTTOM_RIGHT;
    if (causal && s->c->sliding_window > 0)
        o.mask.window_left = s->c->sliding_window - 1;
    if (flash_fits(s, c, causal)) return attend_flash(s, c, &Q, &o, &O);
    return attn_sdpa_cached(&Q, c, &o, &O, NULL);
}

enum { SUB_SA = 0, SUB_CA = 1, SUB_FF = 2 };

/* y (n, out) = x (n, in) W^T + b for matrix j of layer l: from its blocks
 * when the state has them and n is a step's few rows, else from the f32
 * weights w. Rows of y are ldy apart. */
static attn_status lin(const attn__dec_state *s, int64_t l, int j, int64_t n,
                       int64_t in, int64_t out, const float *x, const float *w,
                       const float *b, float *y, int64_t ldy) {
    const attn__qmat *q = s->qw ? &s->qw[l * ATTN__DEC_NQ + j] : NULL;
    if (!q || !q->data || n >= 8 || q->rows != out || q->cols != in) {
        if (ldy == out) return attn_linear_forward(n, in, out, x, w, b, y);
        for (int64_t r = 0; r < n; r++) {
            attn_status st =
                attn_linear_forward(1, in, out, x + r * in, w, b, y + r * ldy);
            if (st) return st;
        }
        return ATTN_OK;
    }
    const int64_t per = ldy == out ? n : 1; /* rows a product takes */
    for (int64_t r = 0; r < n; r += per)
        if (attn__gemv_q_many(per, 1, q, x + r * in, &(float *){y + r * ldy},
                              s->th))
            return ATTN_E_NOMEM;
    if (b)
        for (int64_t r = 0; r < n; r++)
            for (int64_t c = 0; c < out; c++) y[r * ldy + c] += b[c];
    return ATTN_OK;
}

/* Whether matrices j0 .. j0 + k of layer l (outputs outs[m], inputs in)
 * can be one product over n rows: all in blocks and n a step's few. */
static int fusable(const attn__dec_state *s, int64_t l, int j0, int k,
                   int64_t n, int64_t in, const int64_t *outs) {
    if (!s->qw || n >= 8) return 0;
    for (int m = 0; m < k; m++) {
        const attn__qmat *q = &s->qw[l * ATTN__DEC_NQ + j0 + m];
        if (!q->data || q->rows != outs[m] || q->cols != in) return 0;
    }
    return 1;
}

/* y[m] (n, outs[m]) = in W_m^T + b_m for the fusable matrices j0 .. j0 + k
 * of layer l: x quantized once, one parallel region. */
static attn_status lin_many(const attn__dec_state *s, int64_t l, int j0, int k,
                            int64_t n, const float *in, const int64_t *outs,
                            float *const *y, const float *const *b) {
    if (attn__gemv_q_many(n, k, &s->qw[l * ATTN__DEC_NQ + j0], in, y, s->th))
        return ATTN_E_NOMEM;
    for (int m = 0; m < k; m++)
        if (b[m])
            for (int64_t r = 0; r < n; r++)
                for (int64_t c = 0; c < outs[m]; c++)
                    y[m][r * outs[m] + c] += b[m][c];
    return ATTN_OK;
}

/* The feed-forward body on in (n, E) -> s->a. */
static attn_status ffn(attn__dec_state *s, int64_t l, int64_t n,
                       const float *in) {
    const attn_decoder_layer_params *P = &s->P[l];
    const int64_t E = s->E, F = s->F;
    if (!s->qw || s->c->activation != ATTN_ACT_SWIGLU || n >= 8) {
        const attn__ffn f = {n,       E,       F,      s->c->activation,
                             P->w_1,  P->b_1,  P->w_2, P->b_2,
                             NULL,    NULL,    NULL,   NULL,
                             s->hpre, s->hact, 0,      0,
                             0.0,     s->th};
        return attn__ffn_forward(&f, in, s->a);
    }
    /* w_1 (2F, E): the gate's rows, then the up projection's */
    attn_status st;
    const int64_t outs[2] = {F, F};
    if (n == 1 && fusable(s, l, ATTN__DEC_Q_GATE, 2, n, E, outs)) {
        float *const y[2] = {s->hpre, s->hpre + F};
        const float *const b[2] = {P->b_1, P->b_1 ? P->b_1 + F : NULL};
        if ((st = lin_many(s, l, ATTN__DEC_Q_GATE, 2, n, in, outs, y, b)))
            return st;
    } else if ((st = lin(s, l, ATTN__DEC_Q_GATE, n, E, F, in, P->w_1, P->b_1,
                         s->hpre, 2 * F)) ||
               (st = lin(s, l, ATTN__DEC_Q_UP, n, E, F, in, P->w_1 + F * E,
                         P->b_1 ? P->b_1 + F : NULL, s->hpre + F, 2 * F)))
        return st;
    attn__swiglu_forward(n, F, s->hpre, s->hact, s->th);
    return lin(s, l, ATTN__DEC_Q_DOWN, n, F, E, s->hact, P->w_2, P->b_2, s->a,
               E);
}

/* The body of sublayer k of layer l on in (R L, E) -> s->a. */
static attn_status body(attn__dec_state *s, int64_t l, int k, const float *in) {
    const attn_decoder_layer_params *P = &s->P[l];
    const int64_t R = s->R, E = s->E, KV = s->KV, n = s->R * s->L;
    attn_status st;
    if (k == SUB_SA) {
        const attn_mha_params *W = &P->self_attn;
        attn_tensor K =
            attn_tensor_bthd(s->k, ATTN_F32, R, s->L, s->Hkv, s->hd);
        attn_tensor V =
            attn_tensor_bthd(s->v, ATTN_F32, R, s->L, s->Hkv, s->hd);
        const int64_t outs[3] = {E, KV, KV};
        float *const y[3] = {s->q, s->k, s->v};
        const float *const b[3] = {W->b_q, W->b_k, W->b_v};
        if (fusable(s, l, ATTN__DEC_Q_Q, 3, n, E, outs))
            st = lin_many(s, l, ATTN__DEC_Q_Q, 3, n, in, outs, y, b);
        else if (!(st = lin(s, l, ATTN__DEC_Q_Q, n, E, E, in, W->w_q, W->b_q,
                            s->q, E)) &&
                 !(st = lin(s, l, ATTN__DEC_Q_K, n, E, KV, in, W->w_k, W->b_k,
                            s->k, KV)))
            st = lin(s, l, ATTN__DEC_Q_V, n, E, KV, in, W->w_v, W->b_v, s->v,
                     KV);
        if (st || (st = attn_kv_cache_append(s->self[l], &K, &V, NULL)) ||
            (st = attend(s, s->self[l], 1)))
            return st;
        return lin(s, l, ATTN__DEC_Q_O, n, E, E, s->ctx, W->w_o, W->b_o, s->a,
                   E);
    }
    if (k == SUB_CA && s->cross) {
        const attn_mha_params *W = &P->cross_mha;
        if ((st = attn_linear_forward(n, E, E, in, W->w_q, W->b_q, s->q)) ||
            (st = attend(s, s->cross[l], 0)))
            return st;
        return attn_linear_forward(n, E, E, s->ctx, W->w_o, W->b_o, s->a);
    }
    if (k == SUB_CA) {
        const attn_additive_config ac =
            attn__layer_add_cfg(E, s->c->additive_dim);
        attn_layer_opts o;
        attn_sdpa_opts_init(&o);
        o.threads = s->th;
        o.mask.key_lengths = s->klen;
        if ((st = attn_additive_forward(&ac, P->cross_add.w_q, R, 1, s->Ls, in,
                                        s->mem, s->mem, &o, s->ctx, NULL,
                                        s->add_ws)))
            return st;
        return attn_linear_forward(R, E, E, s->ctx, P->cross_w_o, P->cross_b_o,
                                   s->a);
    }
    return ffn(s, l, n, in);
}

/* One pass of L positions of every row (L = 1: a step; the additive
 * cross-attention's workspace holds one position). */
static attn_status run(attn__dec_state *s, const float *x, int64_t L,
                       const float **out) {
    const attn_decoder_config *c = s->c;
    const float *cur = x;
    const int64_t n = s->R * L;
    attn_status st0 = buffers(s, n);
    if (st0) return st0;
    s->L = L;
    for (int64_t l = 0; l < s->M; l++) {
        const attn_decoder_layer_params *P = &s->P[l];
        for (int k = SUB_SA; k <= SUB_FF; k++) {
            if (k == SUB_CA && !s->mem) continue;
            attn__sublayer sl;
            memset(&sl, 0, sizeof sl);
            sl.n = n;
            sl.E = s->E;
            sl.norm_first = c->norm_first;
            sl.rms = c->norm == ATTN_NORM_RMS;
            sl.th = s->th;
            sl.eps = attn__layer_ln_eps(c->layer_norm_eps);
            sl.gamma = k == SUB_SA   ? P->ln1_gamma
                       : k == SUB_CA ? P->ln2_gamma
                                     : P->ln3_gamma;
            sl.beta = k == SUB_SA   ? P->ln1_beta
                      : k == SUB_CA ? P->ln2_beta
                                    : P->ln3_beta;
            sl.x = cur;
            sl.lny = s->lny;
            sl.r = s->r;
            attn_status st = body(s, l, k, attn__sublayer_in(&sl));
            if (st) return st;
            cur = attn__sublayer_out(&sl, s->a);
        }
    }
    if (s->norm_g && c->norm == ATTN_NORM_RMS) {
        attn__rmsnorm_forward(n, s->E, cur, s->norm_g, s->norm_b,
                              attn__layer_ln_eps(c->layer_norm_eps), s->y, NULL,
                              s->th);
        cur = s->y;
    } else if (s->norm_g) {
        attn__layernorm_forward(n, s->E, cur, s->norm_g, s->norm_b,
                                attn__layer_ln_eps(c->layer_norm_eps), s->y,
                                NULL, NULL, s->th);
        cur = s->y;
    }
    *out = cur;
    return ATTN_OK;
}

attn_status attn__dec_step(attn__dec_state *s, const float *x,
                           const float **out) {
    return run(s, x, 1, out);
}

attn_status attn__dec_prefill(attn__dec_state *s, const float *x, int64_t L,
                              int64_t piece, const float **out) {
    if (s->R != 1)
        return attn__fail(ATTN_E_SHAPE, "a prompt pass takes one row, not %lld",
                          (long long)s->R);
    if (s->add_ws) { /* position by position */
        for (int64_t t = 0; t < L; t++) {
            attn_status st = run(s, x + t * s->E, 1, out);
            if (st) return st;
        }
        return ATTN_OK;
    }
    if (piece < 1) piece = PIECE;
    for (int64_t t0 = 0; t0 < L; t0 += piece) {
        const int64_t len = L - t0 < piece ? L - t0 : piece;
        attn_status st = run(s, x + t0 * s->E, len, out);
        if (st) return st;
        *out += (len - 1) * s->E; /* the last position's row */
    }
    return ATTN_OK;
}

attn_status attn__dec_prefill_rows(attn__dec_state *s, const float *x,
                                   int64_t L, const float **rows) {
    if (s->R != 1 || s->add_ws)
        return attn__fail(ATTN_E_SHAPE,
                          "a prompt's rows come from one row without "
                          "additive cross-attention");
    return run(s, x, L, rows);
}

attn_status attn__dec_reorder(attn__dec_state *s, const int64_t *parent) {
    for (int64_t l = 0; l < s->M; l++) {
        attn_status st = attn_kv_cache_reorder(s->self[l], parent);
        if (st) return st;
    }
    return ATTN_OK;
}
