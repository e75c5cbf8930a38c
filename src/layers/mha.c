/* Multi-head attention: project (sgemm), view the projections as heads
 * without copying (batch-first strides), run the SDPA kernels, merge and
 * project out. Grouped-query attention and cross-attention come from the
 * SDPA contract (H % Hkv == 0, Lq != Lk) and the kdim/vdim inputs. */
#include "layers.h"
#include "../kernels/cpu.h"
#include "../kernels/tile_bf16.h"

#include <string.h>

attn_status attn__mha_check_cfg(const attn_mha_config *c, int64_t *hd,
                                int64_t *hkv) {
    ATTN__NEED(c);
    if (c->d_model < 1 || c->num_heads < 1 || c->num_kv_heads < 0 ||
        c->kdim < 0 || c->vdim < 0)
        return attn__fail(
            ATTN_E_INVALID,
            "mha config: d_model %lld, "
            "num_heads %lld (>= 1), num_kv_heads %lld, kdim %lld, "
            "vdim %lld (>= 0)",
            (long long)c->d_model, (long long)c->num_heads,
            (long long)c->num_kv_heads, (long long)c->kdim, (long long)c->vdim);
    if (c->d_model % c->num_heads != 0)
        return attn__fail(ATTN_E_INVALID,
                          "mha config: d_model %lld is not a "
                          "multiple of num_heads %lld",
                          (long long)c->d_model, (long long)c->num_heads);
    int64_t kv = c->num_kv_heads ? c->num_kv_heads : c->num_heads;
    if (c->num_heads % kv != 0)
        return attn__fail(ATTN_E_INVALID,
                          "mha config: num_heads %lld is not a "
                          "multiple of num_kv_heads %lld",
                          (long long)c->num_heads, (long long)kv);
    if (!attn__blas_ok(c->d_model) || !attn__blas_ok(c->kdim) ||
        !attn__blas_ok(c->vdim))
        return attn__fail(ATTN_E_INVALID, "mha config sizes exceed the BLAS "
                                          "int range");
    if (c->bias != 0 && c->bias != 1)
        return attn__fail(ATTN_E_INVALID,
                          "mha config: bias must be 0 or 1, "
                          "not %d",
                          c->bias);
    if (hd) *hd = c->d_model / c->num_heads;
    if (hkv) *hkv = kv;
    return ATTN_OK;
}

static int64_t kdim_of(const attn_mha_config *c) {
    return c->kdim ? c->kdim : c->d_model;
}
static int64_t vdim_of(const attn_mha_config *c) {
    return c->vdim ? c->vdim : c->d_model;
}

#define MP(f) offsetof(attn_mha_params, f)
void attn__mha_ptab(attn__ptab *t, const attn_mha_config *c, const char *sub,
                    size_t base) {
    const int64_t E = c->d_model, hd = E / c->num_heads;
    const int64_t KV = (c->num_kv_heads ? c->num_kv_heads : c->num_heads) * hd;
    attn__ptab_add(t, sub, "w_q", E, E, ATTN_INIT_XAVIER, base + MP(w_q));
    attn__ptab_add(t, sub, "w_k", KV, kdim_of(c), ATTN_INIT_XAVIER,
                   base + MP(w_k));
    attn__ptab_add(t, sub, "w_v", KV, vdim_of(c), ATTN_INIT_XAVIER,
                   base + MP(w_v));
    attn__ptab_add(t, sub, "w_o", E, E, ATTN_INIT_XAVIER, base + MP(w_o));
    if (!c->bias) return;
    attn__ptab_add(t, sub, "b_q", E, 1, ATTN_INIT_ZERO, base + MP(b_q));
    attn__ptab_add(t, sub, "b_k", KV, 1, ATTN_INIT_ZERO, base + MP(b_k));
    attn__ptab_add(t, sub, "b_v", KV, 1, ATTN_INIT_ZERO, base + MP(b_v));
    attn__ptab_add(t, sub, "b_o", E, 1, ATTN_INIT_ZERO, base + MP(b_o));
}
#undef MP

static attn_status check_any(const void *c) {
    return attn__mha_check_cfg(c, NULL, NULL);
}
static void table_any(const void *c, attn__ptab *t) {
    attn__mha_ptab(t, c, "", 0);
}
static const attn__layer_kind kind = {"mha", check_any, table_any};

attn_status attn_mha_param_slices(const attn_mha_config *c, const char *prefix,
                                  int64_t offset, attn_param_slice *slices,
                                  int64_t cap, int64_t *count) {
    return attn__kind_slices(&kind, c, prefix, offset, slices, cap, count);
}

int64_t attn_mha_param_count(const attn_mha_config *c) {
    return attn__kind_count(&kind, c);
}

attn_status attn_mha_params_view(const attn_mha_config *c, float *block,
                                 attn_mha_params *p) {
    return attn__kind_view(&kind, c, block, p, sizeof *p);
}

attn_status attn__mha_slices(const void *c, attn_param_slice *sl, int64_t cap,
                             int64_t *n) {
    return attn_mha_param_slices(c, "", 0, sl, cap, n);
}

attn_status attn_mha_init(const attn_mha_config *c, float *params,
                          uint64_t seed) {
    return attn__init_by_slices(attn__mha_slices, c, params, seed);
}

/* Workspace: Q (B Lq E), K, V (B Lk KV), merged context C (B Lq E), lse
 * (B H Lq); backward scratch dQ, dK, dV, dC of the same sizes. */
typedef struct {
    float *q, *k, *v, *c, *lse, *dq, *dk, *dv, *dc;
} ws_parts;

static size_t ws_layout(const attn_mha_config *c, int64_t B, int64_t Lq,
                        int64_t Lk, float *ws, ws_parts *w) {
    int64_t hd = 0, kv = 0; /* set by attn__mha_check_cfg */
    attn__mha_check_cfg(c, &hd, &kv);
    const int64_t E = c->d_model, KV = kv * hd;
    size_t sz[9] = {attn__size3(B, Lq, E),
                    attn__size3(B, Lk, KV),
                    attn__size3(B, Lk, KV),
                    attn__size3(B, Lq, E),
                    attn__size3(B, c->num_heads, Lq),
                    attn__size3(B, Lq, E),
                    attn__size3(B, Lk, KV),
                    attn__size3(B, Lk, KV),
                    attn__size3(B, Lq, E)};
    float **const dst[9] = {&w->q,  &w->k,  &w->v,  &w->c, &w->lse,
                            &w->dq, &w->dk, &w->dv, &w->dc};
    return attn__ws_carve(ws, sz, dst, 9);
}

attn_status attn_mha_workspace_size(const attn_mha_config *c, int64_t B,
                                    int64_t Lq, int64_t Lk, size_t *floats) {
    attn_status st = attn__mha_check_cfg(c, NULL, NULL);
    if (st) return st;
    ATTN__NEED(floats);
    if (B < 1 || Lq < 1 || Lk < 1)
        return attn__fail(ATTN_E_SHAPE, "B=%lld Lq=%lld Lk=%lld must be >= 1",
                          (long long)B, (long long)Lq, (long long)Lk);
    ws_parts w;
    if (!(*floats = ws_layout(c, B, Lq, Lk, NULL, &w)))
        return attn__fail(ATTN_E_NOMEM, "mha workspace size overflows");
    return ATTN_OK;
}

/* The heads as (B, H, L, hd) views of batch-first buffers. */
typedef struct {
    attn_tensor q, k, v, c;
} head_views;

static head_views views(const attn_mha_config *c, int64_t B, int64_t Lq,
                        int64_t Lk, float *q, float *k, float *v, float *ctx) {
    int64_t hd = 0, kv = 0; /* set by attn__mha_check_cfg */
    attn__mha_check_cfg(c, &hd, &kv);
    head_views h;
    h.q = attn_tensor_bthd(q, ATTN_F32, B, Lq, c->num_heads, hd);
    h.k = attn_tensor_bthd(k, ATTN_F32, B, Lk, kv, hd);
    h.v = attn_tensor_bthd(v, ATTN_F32, B, Lk, kv, hd);
    h.c = attn_tensor_bthd(ctx, ATTN_F32, B, Lq, c->num_heads, hd);
    return h;
}

/* impl ATTN_IMPL_FLASH_BF16 on a CPU with AVX512_BF16 (and no weights
 * asked for): the attention runs on bf16 tiles, on copies of the
 * projections rounded to bf16 (the forward and the backward round the
 * same f32 values, so both see the same operands). Sets *buf (free with
 * attn__free; NULL: the f32 views stay) and retypes hv's q, k, v. */
static attn_status bf16_heads(const attn_layer_opts *o, int weights,
                              const ws_parts *w, int64_t nq, int64_t nkv,
                              head_views *hv, uint16_t **buf) {
    *buf = NULL;
    if (o->impl != ATTN_IMPL_FLASH_BF16 || weights ||
        attn__isa_get() < ATTN__ISA_AVX512_BF16)
        return ATTN_OK;
    uint16_t *b =
        attn__alloc((size_t)(nq + 2 * nkv), sizeof(uint16_t), "bf16 heads");
    if (!b) return ATTN_E_NOMEM;
    const float *src[3] = {w->q, w->k, w->v};
    const int64_t n[3] = {nq, nkv, nkv};
    attn_tensor *t[3] = {&hv->q, &hv->k, &hv->v};
    uint16_t *dst = b;
    for (int i = 0; i < 3; i++) {
        attn__bf16_from_f32(src[i], n[i], dst);
        t[i]->data = dst;
        t[i]->dtype = ATTN_BF16;
        dst += n[i];
    }
    *buf = b;
    return ATTN_OK;
}

static attn_status check_call(const attn_mha_config *c, const float *params,
                              int64_t B, int64_t Lq, int64_t Lk,
                              const float *query, const float *key,
                              const float *value, const attn_layer_opts *o,
                              const float *ws) {
    attn_status st = attn__mha_check_cfg(c, NULL, NULL);
    if (st) return st;
    ATTN__NEED(params);
    ATTN__NEED(query);
    ATTN__NEED(key);
    ATTN__NEED(value);
    ATTN__NEED(ws);
    if ((st = attn__layer_opts_check(o, B, c->num_heads, Lq, Lk))) return st;
    size_t n;
    if ((st = attn_mha_workspace_size(c, B, Lq, Lk, &n))) return st;
    if ((st = attn__check_finite_f32(query, B * Lq * c->d_model, "query")) ||
        (key != query &&
         (st = attn__check_finite_f32(key, B * Lk * kdim_of(c), "key"))) ||
        (value != query && value != key &&
         (st = attn__check_finite_f32(value, B * Lk * vdim_of(c), "value"))))
        return st;
    return ATTN_OK;
}

/* Self-attention whose W_q, W_k, W_v (and biases) lie one after the
 * other and are packed as one (linear_packed.c, a loaded model's): one
 * product of 3 E outputs per row into the workspace's Q, K, V (B L E each,
 * consecutive), read as strided heads. Returns 1 when done (hv retargeted),
 * 0 when the three products are to run. Not for the bf16 heads, which
 * convert Q, K, V as contiguous buffers. */
static int qkv_fused(const attn_mha_config *c, const attn_mha_params *P,
                     int64_t B, int64_t Lq, int64_t Lk, const float *query,
                     const float *key, const float *value,
                     const attn_layer_opts *o, const ws_parts *w,
                     head_views *hv) {
    const int64_t E = c->d_model, n = B * Lq;
    if (query != key || key != value || Lq != Lk ||
        o->impl == ATTN_IMPL_FLASH_BF16 || hv->k.shape[1] != c->num_heads ||
        w->k != w->q + n * E || w->v != w->k + n * E || !P->b_q ||
        P->w_k != P->w_q + E * E || P->w_v != P->w_k + E * E ||
        P->b_k != P->b_q + E || P->b_v != P->b_k + E ||
        !attn__linear_packed_has(P->w_q, E, 3 * E) ||
        attn__linear_packed_forward(n, E, 3 * E, query, P->w_q, P->b_q, w->q,
                                    ATTN_ACT_RELU, NULL) <= 0)
        return 0;
    attn_tensor *t[3] = {&hv->q, &hv->k, &hv->v};
    for (int i = 0; i < 3; i++) {
        t[i]->data = w->q + i * E;
        t[i]->stride[2] = 3 * E;
        t[i]->stride[0] = Lq * 3 * E;
    }
    return 1;
}

static attn_status
mha_forward_body(const attn_mha_config *c, const float *params, int64_t B,
                 int64_t Lq, int64_t Lk, const float *query, const float *key,
                 const float *value, const attn_layer_opts *opts, float *out,
                 float *weights, attn_weights_mode mode, float *ws) {
    attn_status st =
        check_call(c, params, B, Lq, Lk, query, key, value, opts, ws);
    if (st) return st;
    ATTN__NEED(out);
    if (mode != ATTN_WEIGHTS_PER_HEAD && mode != ATTN_WEIGHTS_AVERAGED)
        return attn__fail(ATTN_E_INVALID, "weights mode is %d", (int)mode);
    int64_t hd = 0, kv = 0; /* set by attn__mha_check_cfg */
    attn__mha_check_cfg(c, &hd, &kv);
    const int64_t E = c->d_model, H = c->num_heads, KV = kv * hd;
    attn_mha_params P;
    attn_mha_params_view(c, (float *)params, &P);
    ws_parts w;
    ws_layout(c, B, Lq, Lk, ws, &w);
    head_views hv = views(c, B, Lq, Lk, w.q, w.k, w.v, w.c);
    if (!qkv_fused(c, &P, B, Lq, Lk, query, key, value, opts, &w, &hv)) {
        attn_linear_forward(B * Lq, E, E, query, P.w_q, P.b_q, w.q);
        attn_linear_forward(B * Lk, kdim_of(c), KV, key, P.w_k, P.b_k, w.k);
        attn_linear_forward(B * Lk, vdim_of(c), KV, value, P.w_v, P.b_v, w.v);
    }
    float *wbuf = NULL;
    attn_tensor W;
    if (weights) {
        wbuf = weights;
        if (mode == ATTN_WEIGHTS_AVERAGED && H > 1) {
            size_t n = attn__size3(B * H, Lq, Lk);
            if (!n ||
                !(wbuf = attn__alloc(n, sizeof(float), "per-head weights")))
                return ATTN_E_NOMEM;
        }
        W = attn_tensor_4d(wbuf, ATTN_F32, B, H, Lq, Lk);
    }
    uint16_t *b16 = NULL;
    st = bf16_heads(opts, weights != NULL, &w, B * Lq * E, B * Lk * KV, &hv,
                    &b16);
    if (!st)
        st = attn_sdpa_forward(&hv.q, &hv.k, &hv.v, opts, &hv.c,
                               weights ? &W : NULL, w.lse);
    attn__free(b16);
    if (!st && weights && wbuf != weights) {
        /* mean over heads, in head order */
        for (int64_t b = 0; b < B; b++)
            for (int64_t r = 0; r < Lq * Lk; r++) {
                float s = 0.0f;
                for (int64_t h = 0; h < H; h++)
                    s += wbuf[(b * H + h) * Lq * Lk + r];
                weights[b * Lq * Lk + r] = s / (float)H;
            }
    }
    if (wbuf != weights) attn__free(wbuf);
    if (st) return st;
    return attn_linear_forward(B * Lq, E, E, w.c, P.w_o, P.b_o, out);
}

attn_status attn_mha_forward(const attn_mha_config *cfg, const float *params,
                             int64_t B, int64_t Lq, int64_t Lk,
                             const float *query, const float *key,
                             const float *value, const attn_layer_opts *opts,
                             float *out, float *weights, attn_weights_mode mode,
                             float *ws) {
    const int blas = attn__layer_blas_begin(opts);
    attn_status st = mha_forward_body(cfg, params, B, Lq, Lk, query, key, value,
                                      opts, out, weights, mode, ws);
    attn__layer_end(blas);
    return st;
}

static attn_status
mha_backward_body(const attn_mha_config *c, const float *params, int64_t B,
                  int64_t Lq, int64_t Lk, const float *query, const float *key,
                  const float *value, const attn_layer_opts *opts,
                  const float *dout, float *ws, float *grads, float *dquery,
                  float *dkey, float *dvalue) {
    attn_status st =
        check_call(c, params, B, Lq, Lk, query, key, value, opts, ws);
    if (st) return st;
    ATTN__NEED(dout);
    int64_t hd = 0, kv = 0; /* set by attn__mha_check_cfg */
    attn__mha_check_cfg(c, &hd, &kv);
    const int64_t E = c->d_model, KV = kv * hd;
    if ((st = attn__check_finite_f32(dout, B * Lq * E, "dout"))) return st;
    attn_mha_params P, G;
    attn_mha_params_view(c, (float *)params, &P);
    if (grads) attn_mha_params_view(c, grads, &G);
    ws_parts w;
    ws_layout(c, B, Lq, Lk, ws, &w);
    memset(w.dc, 0, sizeof(float) * (size_t)(B * Lq * E));
    memset(w.dq, 0, sizeof(float) * (size_t)(B * Lq * E));
    memset(w.dk, 0, sizeof(float) * (size_t)(B * Lk * KV));
    memset(w.dv, 0, sizeof(float) * (size_t)(B * Lk * KV));
    attn_linear_backward(B * Lq, E, E, w.c, P.w_o, dout, grads ? G.w_o : NULL,
                         grads ? G.b_o : NULL, w.dc);
    head_views hv = views(c, B, Lq, Lk, w.q, w.k, w.v, w.c);
    head_views gv = views(c, B, Lq, Lk, w.dq, w.dk, w.dv, w.dc);
    uint16_t *b16 = NULL;
    st = bf16_heads(opts, 0, &w, B * Lq * E, B * Lk * KV, &hv, &b16);
    if (!st)
        st = attn_sdpa_backward(&hv.q, &hv.k, &hv.v, &hv.c, w.lse, &gv.c, opts,
                                &gv.q, &gv.k, &gv.v, NULL);
    attn__free(b16);
    if (st) return st;
    attn_linear_backward(B * Lq, E, E, query, P.w_q, w.dq, grads ? G.w_q : NULL,
                         grads ? G.b_q : NULL, dquery);
    attn_linear_backward(B * Lk, kdim_of(c), KV, key, P.w_k, w.dk,
                         grads ? G.w_k : NULL, grads ? G.b_k : NULL, dkey);
    attn_linear_backward(B * Lk, vdim_of(c), KV, value, P.w_v, w.dv,
                         grads ? G.w_v : NULL, grads ? G.b_v : NULL, dvalue);
    return ATTN_OK;
}

attn_status attn_mha_backward(const attn_mha_config *cfg, const float *params,
                              int64_t B, int64_t Lq, int64_t Lk,
                              const float *query, const float *key,
                              const float *value, const attn_layer_opts *opts,
                              const float *dout, float *ws, float *grads,
                              float *dquery, float *dkey, float *dvalue) {
    const int blas = attn__layer_blas_begin(opts);
    attn_status st =
        mha_backward_body(cfg, params, B, Lq, Lk, query, key, value, opts, dout,
                          ws, grads, dquery, dkey, dvalue);
    attn__layer_end(blas);
    return st;
}

attn_status attn__mha_weights_from_ws(const attn_mha_config *c, int64_t B,
                                      int64_t Lq, int64_t Lk,
                                      const attn_layer_opts *opts,
                                      const float *ws, float *weights) {
    ws_parts w;
    ws_layout(c, B, Lq, Lk, (float *)ws, &w);
    size_t n = attn__size3(B, Lq, c->d_model);
    float *tmp = attn__alloc(n, sizeof(float), "recomputed context");
    if (!tmp) return ATTN_E_NOMEM;
    head_views hv = views(c, B, Lq, Lk, w.q, w.k, w.v, tmp);
    attn_tensor W = attn_tensor_4d(weights, ATTN_F32, B, c->num_heads, Lq, Lk);
    attn_layer_opts o = *opts;
    o.dropout_p = 0.0;
    attn_status st =
        attn_sdpa_forward(&hv.q, &hv.k, &hv.v, &o, &hv.c, &W, NULL);
    attn__free(tmp);
    return st;
}
