/* Plain double references of the layers for the tests: separate matmuls,
 * explicit softmax, everything materialized. They share nothing with the
 * library's layer code except the mask descriptor's visibility test and
 * the dropout decisions (the random stream is part of the specification). */
#ifndef ATTN_TEST_LAYERS_REF_H
#define ATTN_TEST_LAYERS_REF_H

#include "attn.h"
#include "attn_layers.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* y (n, out) = x (n, in) W^T + b  (b may be NULL) */
static inline void ref_linear(int64_t n, int64_t in, int64_t out,
                              const double *x, const double *w, const double *b,
                              double *y) {
    for (int64_t r = 0; r < n; r++)
        for (int64_t o = 0; o < out; o++) {
            double s = b ? b[o] : 0.0;
            for (int64_t i = 0; i < in; i++) s += x[r * in + i] * w[o * in + i];
            y[r * out + o] = s;
        }
}

/* Softmax over visible entries of a row (s[j] = -inf: masked), dropout
 * applied after; w gets the weights. */
static inline void ref_softmax_row(const double *s, int64_t n,
                                   const attn_layer_opts *o, int64_t b,
                                   int64_t h, int64_t i, double *w) {
    double mx = -INFINITY, sum = 0.0;
    for (int64_t j = 0; j < n; j++)
        if (s[j] > mx) mx = s[j];
    for (int64_t j = 0; j < n; j++) {
        w[j] = (mx > -INFINITY && s[j] > -INFINITY) ? exp(s[j] - mx) : 0.0;
        sum += w[j];
    }
    for (int64_t j = 0; j < n; j++) {
        w[j] = sum > 0 ? w[j] / sum : 0.0;
        if (o->dropout_p > 0 && w[j] != 0.0)
            w[j] = attn_dropout_kept(o->seed, o->dropout_p, b, h, i, j)
                       ? w[j] / (1.0 - o->dropout_p)
                       : 0.0;
    }
}

/* Offset of the slice named name in a slice table (-1 if absent). */
static inline int64_t ref_slice_off(const attn_param_slice *sl, int64_t n,
                                    const char *name) {
    for (int64_t i = 0; i < n; i++)
        if (strcmp(sl[i].name, name) == 0) return sl[i].offset;
    return -1;
}

/* The slice named by fmt (a printf format taking the layer l as long long)
 * in the double block prm; aborts if absent (a bug of the test). */
static inline const double *ref_slice_at(const attn_param_slice *sl, int64_t n,
                                         const double *prm, const char *fmt,
                                         int64_t l) {
    char name[ATTN_SLICE_NAME_MAX];
    snprintf(name, sizeof name, fmt, (long long)l);
    int64_t off = ref_slice_off(sl, n, name);
    if (off < 0) {
        fprintf(stderr, "no slice %s\n", name);
        abort();
    }
    return prm + off;
}

/* Additive attention. prm: the parameter block in double (layout of
 * attn_additive_param_slices). The tanh arguments (Lq, Lk, A) are
 * materialized per batch entry. */
static inline void ref_additive(const attn_additive_config *c,
                                const double *prm, int64_t B, int64_t Lq,
                                int64_t Lk, const double *q, const double *k,
                                const double *v, const attn_layer_opts *o,
                                double *out, double *wts) {
    attn_param_slice sl[5];
    int64_t ns;
    attn_additive_param_slices(c, "", 0, sl, 5, &ns);
    const int64_t A = c->attn_dim, Dq = c->query_dim, Dk = c->key_dim;
    const int64_t Dc = c->context_from_keys ? A : c->value_dim;
    const double *wq = prm + ref_slice_off(sl, ns, "w_q");
    const double *wk = prm + ref_slice_off(sl, ns, "w_k");
    const double *va = prm + ref_slice_off(sl, ns, "v");
    const double *bq = c->bias ? prm + ref_slice_off(sl, ns, "b_q") : NULL;
    const double *bk = c->bias ? prm + ref_slice_off(sl, ns, "b_k") : NULL;
    const double scale = o->scale > 0 ? o->scale : 1.0;
    double *qp = malloc(sizeof(double) * Lq * A),
           *kp = malloc(sizeof(double) * Lk * A);
    double *u = malloc(sizeof(double) * Lq * Lk * A);
    double *s = malloc(sizeof(double) * Lk), *w = malloc(sizeof(double) * Lk);
    for (int64_t b = 0; b < B; b++) {
        ref_linear(Lq, Dq, A, q + b * Lq * Dq, wq, bq, qp);
        ref_linear(Lk, Dk, A, k + b * Lk * Dk, wk, bk, kp);
        for (int64_t i = 0; i < Lq; i++)
            for (int64_t j = 0; j < Lk; j++)
                for (int64_t a = 0; a < A; a++)
                    u[(i * Lk + j) * A + a] =
                        tanh(qp[i * A + a] + kp[j * A + a]);
        for (int64_t i = 0; i < Lq; i++) {
            for (int64_t j = 0; j < Lk; j++) {
                double t = 0;
                for (int64_t a = 0; a < A; a++)
                    t += va[a] * u[(i * Lk + j) * A + a];
                s[j] =
                    attn_mask_visible(&o->mask, b, 0, i, j, Lq, Lk)
                        ? scale * t +
                              (o->mask.bias
                                   ? attn_tensor_get(
                                         o->mask.bias,
                                         o->mask.bias->shape[0] == 1 ? 0 : b, 0,
                                         o->mask.bias->shape[2] == 1 ? 0 : i,
                                         o->mask.bias->shape[3] == 1 ? 0 : j)
                                   : 0.0)
                        : -INFINITY;
            }
            ref_softmax_row(s, Lk, o, b, 0, i, w);
            for (int64_t d = 0; d < Dc; d++) {
                double acc = 0;
                for (int64_t j = 0; j < Lk; j++)
                    acc += w[j] * (c->context_from_keys
                                       ? kp[j * A + d]
                                       : v[(b * Lk + j) * Dc + d]);
                out[(b * Lq + i) * Dc + d] = acc;
            }
            if (wts)
                for (int64_t j = 0; j < Lk; j++)
                    wts[(b * Lq + i) * Lk + j] = w[j];
        }
    }
    free(qp);
    free(kp);
    free(u);
    free(s);
    free(w);
}

/* Multi-head attention; weights per head (B, H, Lq, Lk) if wts. */
static inline void ref_mha(const attn_mha_config *c, const double *prm,
                           int64_t B, int64_t Lq, int64_t Lk,
                           const double *query, const double *key,
                           const double *value, const attn_layer_opts *o,
                           double *out, double *wts) {
    attn_param_slice sl[8];
    int64_t ns;
    attn_mha_param_slices(c, "", 0, sl, 8, &ns);
    const int64_t E = c->d_model, H = c->num_heads;
    const int64_t Hkv = c->num_kv_heads ? c->num_kv_heads : H, hd = E / H;
    const int64_t kd = c->kdim ? c->kdim : E, vd = c->vdim ? c->vdim : E;
#define P_(name)                                                               \
    (ref_slice_off(sl, ns, name) >= 0 ? prm + ref_slice_off(sl, ns, name)      \
                                      : NULL)
    double *Q = malloc(sizeof(double) * B * Lq * E);
    double *K = malloc(sizeof(double) * B * Lk * Hkv * hd);
    double *V = malloc(sizeof(double) * B * Lk * Hkv * hd);
    double *C = malloc(sizeof(double) * B * Lq * E);
    double *s = malloc(sizeof(double) * Lk), *w = malloc(sizeof(double) * Lk);
    ref_linear(B * Lq, E, E, query, P_("w_q"), P_("b_q"), Q);
    ref_linear(B * Lk, kd, Hkv * hd, key, P_("w_k"), P_("b_k"), K);
    ref_linear(B * Lk, vd, Hkv * hd, value, P_("w_v"), P_("b_v"), V);
    if (o->rope) { /* rotary positions i and j (tested in test_rope) */
        attn_tensor tq = attn_tensor_bthd(Q, ATTN_F64, B, Lq, H, hd);
        attn_tensor tk = attn_tensor_bthd(K, ATTN_F64, B, Lk, Hkv, hd);
        attn_rope_forward(o->rope, &tq, NULL, 0, &tq, 1);
        attn_rope_forward(o->rope, &tk, NULL, 0, &tk, 1);
    }
    const double scale = o->scale > 0 ? o->scale : 1.0 / sqrt((double)hd);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            const int64_t g = h / (H / Hkv);
            for (int64_t i = 0; i < Lq; i++) {
                for (int64_t j = 0; j < Lk; j++) {
                    double t = 0;
                    for (int64_t d = 0; d < hd; d++)
                        t += Q[(b * Lq + i) * E + h * hd + d] *
                             K[(b * Lk + j) * Hkv * hd + g * hd + d];
                    double bias = 0;
                    if (o->mask.bias) {
                        const attn_tensor *bt = o->mask.bias;
                        bias = attn_tensor_get(bt, bt->shape[0] == 1 ? 0 : b,
                                               bt->shape[1] == 1 ? 0 : h,
                                               bt->shape[2] == 1 ? 0 : i,
                                               bt->shape[3] == 1 ? 0 : j);
                    }
                    s[j] = attn_mask_visible(&o->mask, b, h, i, j, Lq, Lk)
                               ? scale * t + bias
                               : -INFINITY;
                }
                ref_softmax_row(s, Lk, o, b, h, i, w);
                if (wts)
                    for (int64_t j = 0; j < Lk; j++)
                        wts[((b * H + h) * Lq + i) * Lk + j] = w[j];
                for (int64_t d = 0; d < hd; d++) {
                    double acc = 0;
                    for (int64_t j = 0; j < Lk; j++)
                        acc += w[j] * V[(b * Lk + j) * Hkv * hd + g * hd + d];
                    C[(b * Lq + i) * E + h * hd + d] = acc;
                }
            }
        }
    ref_linear(B * Lq, E, E, C, P_("w_o"), P_("b_o"), out);
#undef P_
    free(Q);
    free(K);
    free(V);
    free(C);
    free(s);
    free(w);
}

/* LayerNorm over the last axis, in place into y. */
static inline void ref_layernorm(int64_t n, int64_t d, const double *x,
                                 const double *g, const double *be, double eps,
                                 double *y) {
    for (int64_t r = 0; r < n; r++) {
        double mu = 0, var = 0;
        for (int64_t c = 0; c < d; c++) mu += x[r * d + c];
        mu /= (double)d;
        for (int64_t c = 0; c < d; c++)
            var += (x[r * d + c] - mu) * (x[r * d + c] - mu);
        var /= (double)d;
        for (int64_t c = 0; c < d; c++)
            y[r * d + c] = (x[r * d + c] - mu) / sqrt(var + eps) * g[c] + be[c];
    }
}

/* RMSNorm over the last axis: x / sqrt(mean(x^2) + eps) * g + be. */
static inline void ref_rmsnorm(int64_t n, int64_t d, const double *x,
                               const double *g, const double *be, double eps,
                               double *y) {
    for (int64_t r = 0; r < n; r++) {
        double ms = 0;
        for (int64_t c = 0; c < d; c++) ms += x[r * d + c] * x[r * d + c];
        ms /= (double)d;
        for (int64_t c = 0; c < d; c++)
            y[r * d + c] = x[r * d + c] / sqrt(ms + eps) * g[c] + be[c];
    }
}

/* Uniform random doubles in [-a, a) (xorshift64*). */
static inline void ref_fill(double *x, int64_t n, double a,
                            unsigned long long *st) {
    for (int64_t i = 0; i < n; i++) {
        unsigned long long z = *st;
        z ^= z >> 12;
        z ^= z << 25;
        z ^= z >> 27;
        *st = z;
        x[i] =
            a * ((double)((z * 2685821657736338717ull) >> 11) * 0x1p-52 - 1.0);
    }
}

/* Rounds a double array to float values (so that the library's f32 inputs
 * and the reference's double inputs are the same numbers). */
static inline void ref_round(double *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = (float)x[i];
}

static inline float *ref_to_f32(const double *x, int64_t n) {
    float *y = malloc(sizeof(float) * (n ? n : 1));
    for (int64_t i = 0; i < n; i++) y[i] = (float)x[i];
    return y;
}

/* Largest |a - b| relative to the largest |b| (and 1e-30). */
static inline double ref_max_rel(const float *a, const double *b, int64_t n) {
    double e = 0, m = 1e-30;
    for (int64_t i = 0; i < n; i++) {
        if (fabs(a[i] - b[i]) > e) e = fabs(a[i] - b[i]);
        if (fabs(b[i]) > m) m = fabs(b[i]);
    }
    return e / m;
}

/* ---- mask kinds for the layer tests ---- */
#include "check.h"

enum {
    M_NONE,
    M_CAUSAL,
    M_CAUSAL_BR,
    M_WINDOW,
    M_KEYLEN,
    M_QLEN,
    M_KEEP,
    M_BIAS,
    M_BLOCK,
    M_RANDOM,
    M_COUNT
};
static const char *const mask_name[M_COUNT] = {
    "none",          "causal", "causal-br", "window", "key-lengths",
    "query-lengths", "keep",   "bias",      "block",  "random"};

typedef struct {
    int64_t kl[8], ql[8];
    uint8_t keep[8 * 4 * 40 * 40];
    float bias[4 * 40 * 40];
    uint8_t layout[4096];
    attn_tensor keep_t, bias_t;
} mask_store;

/* Sets o->mask to kind k for attention (B, H, Lq, Lk); keep and bias need
 * B <= 8, H <= 4, Lq, Lk <= 40; block layouts (Lq/2)(Lk/2) <= 4096. */
static inline void set_mask(attn_layer_opts *o, int k, mask_store *ms,
                            int64_t B, int64_t H, int64_t Lq, int64_t Lk,
                            unsigned long long *st) {
    attn_mask_init(&o->mask);
    attn_mask *m = &o->mask;
    switch (k) {
    case M_CAUSAL: m->causal = 1; break;
    case M_CAUSAL_BR:
        m->causal = 1;
        m->align = ATTN_ALIGN_BOTTOM_RIGHT;
        break;
    case M_WINDOW:
        m->window_left = 1;
        m->window_right = 2;
        break;
    case M_KEYLEN:
        for (int64_t b = 0; b < B; b++) ms->kl[b] = b == 1 ? 0 : Lk - b % Lk;
        m->key_lengths = ms->kl;
        break;
    case M_QLEN:
        for (int64_t b = 0; b < B; b++) ms->ql[b] = Lq - (b + 1) % Lq;
        m->query_lengths = ms->ql;
        break;
    case M_KEEP:
        for (int64_t i = 0; i < B * H * Lq * Lk; i++)
            ms->keep[i] = test_rand(st) > -0.4;
        ms->keep_t = attn_tensor_4d(ms->keep, ATTN_U8, B, H, Lq, Lk);
        m->keep = &ms->keep_t;
        break;
    case M_BIAS: /* (1, H, Lq, Lk), broadcast over batch; some -inf */
        for (int64_t i = 0; i < H * Lq * Lk; i++)
            ms->bias[i] =
                test_rand(st) > 0.8 ? -INFINITY : (float)test_rand(st);
        ms->bias_t = attn_tensor_4d(ms->bias, ATTN_F32, 1, H, Lq, Lk);
        m->bias = &ms->bias_t;
        break;
    case M_BLOCK: {
        m->block_size = 2;
        m->layout_heads = 1;
        int64_t rows = (Lq + 1) / 2, cols = (Lk + 1) / 2;
        for (int64_t i = 0; i < rows * cols; i++) ms->layout[i] = (i % 3) != 1;
        m->layout = ms->layout;
        break;
    }
    case M_RANDOM:
        m->random_block = 2;
        m->random_keep_p = 0.6;
        m->random_seed = 7;
        break;
    default: break;
    }
}

/* Central differences (step 1e-6, in double) of loss() for a spread of
 * entries of x (parameters or an input the loss reads) against the
 * library's f32 gradient g: |g - fd| <= tol * max |fd| over the entries. */
typedef double (*ref_loss_fn)(void *ctx);
static inline void ref_fd_check(const char *what, double *x, int64_t n,
                                const float *g, ref_loss_fn loss, void *ctx,
                                double tol) {
    const double h = 1e-6;
    double *fd = malloc(sizeof(double) * (n ? n : 1));
    /* floor: an exactly-zero gradient (b_k, invariant under softmax) shows
     * f32 noise of ~1e-6 from the flash backward; real gradients are O(0.1) */
    double gmax = 1e-2, worst = 0;
    int64_t stride = n > 40 ? n / 37 : 1, at = 0;
    for (int64_t i = 0; i < n; i += stride) {
        double x0 = x[i];
        x[i] = x0 + h;
        double fp = loss(ctx);
        x[i] = x0 - h;
        double fm = loss(ctx);
        x[i] = x0;
        fd[i] = (fp - fm) / (2 * h);
        if (fabs(fd[i]) > gmax) gmax = fabs(fd[i]);
    }
    for (int64_t i = 0; i < n; i += stride)
        if (fabs(g[i] - fd[i]) > worst) {
            worst = fabs(g[i] - fd[i]);
            at = i;
        }
    CHECK_MSG(worst <= tol * gmax,
              "%s: gradient[%lld] = %g but central "
              "difference %g (max %g)",
              what, (long long)at, g[at], fd[at], gmax);
    free(fd);
}
#endif
