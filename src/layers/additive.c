/* Additive (Bahdanau) attention: score(i, j) = v . tanh(W_q q_i + b_q +
 * W_k k_j + b_k). The fast path projects queries and keys once (sgemm),
 * then streams key tiles per query tile with an online softmax, so the
 * (B, Lq, Lk, A) tensor of tanh arguments never exists; the reference does
 * the same arithmetic plainly in double. Backward recomputes the tanh
 * values pair by pair from the saved projections and the log-sum-exp. */
/* Floating-point exception flags are never read here; without this GCC
 * keeps the tanh clamp as branches (it may not select on compares that
 * could trap) and the score loops stay scalar, 5x slower. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
#include "layers.h"

#include <cblas.h>
#include <string.h>

#define TQ 16 /* query rows per tile */
#define TK 64 /* key columns per tile */

/* ---- configuration, parameter layout --------------------------------- */

attn_status attn__additive_check_cfg(const attn_additive_config *c) {
    ATTN__NEED(c);
    if (c->query_dim < 1 || c->key_dim < 1 || c->attn_dim < 1 ||
        (!c->context_from_keys && c->value_dim < 1))
        return attn__fail(ATTN_E_INVALID,
                          "additive config: query_dim %lld, "
                          "key_dim %lld, value_dim %lld, attn_dim %lld must be "
                          ">= 1",
                          (long long)c->query_dim, (long long)c->key_dim,
                          (long long)c->value_dim, (long long)c->attn_dim);
    if (!attn__blas_ok(c->query_dim) || !attn__blas_ok(c->key_dim) ||
        !attn__blas_ok(c->attn_dim) || !attn__blas_ok(c->value_dim))
        return attn__fail(ATTN_E_INVALID, "additive config sizes exceed the "
                                          "BLAS int range");
    if ((c->bias != 0 && c->bias != 1) ||
        (c->context_from_keys != 0 && c->context_from_keys != 1))
        return attn__fail(ATTN_E_INVALID,
                          "additive config: bias (%d) and "
                          "context_from_keys (%d) must be 0 or 1",
                          c->bias, c->context_from_keys);
    return ATTN_OK;
}

int64_t attn_additive_out_dim(const attn_additive_config *c) {
    if (!c) return 0;
    return c->context_from_keys ? c->attn_dim : c->value_dim;
}

#define AP(f) offsetof(attn_additive_params, f)
void attn__additive_ptab(attn__ptab *t, const attn_additive_config *c,
                         const char *sub, size_t base) {
    const int64_t A = c->attn_dim;
    attn__ptab_add(t, sub, "w_q", A, c->query_dim, ATTN_INIT_XAVIER,
                   base + AP(w_q));
    attn__ptab_add(t, sub, "w_k", A, c->key_dim, ATTN_INIT_XAVIER,
                   base + AP(w_k));
    attn__ptab_add(t, sub, "v", 1, A, ATTN_INIT_XAVIER, base + AP(v));
    if (!c->bias) return;
    attn__ptab_add(t, sub, "b_q", A, 1, ATTN_INIT_ZERO, base + AP(b_q));
    attn__ptab_add(t, sub, "b_k", A, 1, ATTN_INIT_ZERO, base + AP(b_k));
}
#undef AP

static attn_status check_any(const void *c) {
    return attn__additive_check_cfg(c);
}
static void table_any(const void *c, attn__ptab *t) {
    attn__additive_ptab(t, c, "", 0);
}
static const attn__layer_kind kind = {"additive", check_any, table_any};

attn_status attn_additive_param_slices(const attn_additive_config *c,
                                       const char *prefix, int64_t offset,
                                       attn_param_slice *slices, int64_t cap,
                                       int64_t *count) {
    return attn__kind_slices(&kind, c, prefix, offset, slices, cap, count);
}

int64_t attn_additive_param_count(const attn_additive_config *c) {
    return attn__kind_count(&kind, c);
}

attn_status attn_additive_params_view(const attn_additive_config *c,
                                      float *block, attn_additive_params *p) {
    return attn__kind_view(&kind, c, block, p, sizeof *p);
}

attn_status attn__additive_slices(const void *c, attn_param_slice *sl,
                                  int64_t cap, int64_t *n) {
    return attn_additive_param_slices(c, "", 0, sl, cap, n);
}

attn_status attn_additive_init(const attn_additive_config *c, float *params,
                               uint64_t seed) {
    return attn__init_by_slices(attn__additive_slices, c, params, seed);
}

/* Workspace: qp (B Lq A), kp (B Lk A), out copy (B Lq Dc), lse (B Lq), then
 * backward scratch dqp (B Lq A), dkp (B Lk A), per-batch dv and tanh rows
 * (2 B A). */
typedef struct {
    float *qp, *kp, *out, *lse, *dqp, *dkp, *dvb, *tb;
} ws_parts;

static size_t ws_layout(const attn_additive_config *c, int64_t B, int64_t Lq,
                        int64_t Lk, float *ws, ws_parts *w) {
    const int64_t A = c->attn_dim, Dc = attn_additive_out_dim(c);
    size_t sz[8] = {attn__size3(B, Lq, A),  attn__size3(B, Lk, A),
                    attn__size3(B, Lq, Dc), attn__size3(B, Lq, 1),
                    attn__size3(B, Lq, A),  attn__size3(B, Lk, A),
                    attn__size3(B, A, 1),   attn__size3(B, A, 1)};
    float **const dst[8] = {&w->qp,  &w->kp,  &w->out, &w->lse,
                            &w->dqp, &w->dkp, &w->dvb, &w->tb};
    return attn__ws_carve(ws, sz, dst, 8);
}

attn_status attn_additive_workspace_size(const attn_additive_config *c,
                                         int64_t B, int64_t Lq, int64_t Lk,
                                         size_t *floats) {
    attn_status st = attn__additive_check_cfg(c);
    if (st) return st;
    ATTN__NEED(floats);
    if (B < 1 || Lq < 1 || Lk < 1)
        return attn__fail(ATTN_E_SHAPE, "B=%lld Lq=%lld Lk=%lld must be >= 1",
                          (long long)B, (long long)Lq, (long long)Lk);
    ws_parts w;
    *floats = ws_layout(c, B, Lq, Lk, NULL, &w);
    if (!*floats)
        return attn__fail(ATTN_E_NOMEM, "additive workspace size overflows");
    return ATTN_OK;
}

/* ---- the score network ------------------------------------------------ */

/* tanh as a [13/6] rational function on [-7.905, 7.905] (saturated
 * beyond): max error 4e-7, branch-free so the loops vectorize. A macro, not
 * a function: a function of the default target cannot be inlined into the
 * AVX2 clones below, and a call would stop vectorization. */
#define TANH_FAST(out, in)                                                     \
    do {                                                                       \
        const float c_ = 7.90531110763549805f;                                 \
        float x_ = (in);                                                       \
        x_ = x_ > c_ ? c_ : (x_ < -c_ ? -c_ : x_);                             \
        const float x2_ = x_ * x_;                                             \
        float p_ = -2.76076847742355e-16f;                                     \
        p_ = p_ * x2_ + 2.00018790482477e-13f;                                 \
        p_ = p_ * x2_ + -8.60467152213735e-11f;                                \
        p_ = p_ * x2_ + 5.12229709037114e-08f;                                 \
        p_ = p_ * x2_ + 1.48572235717979e-05f;                                 \
        p_ = p_ * x2_ + 6.37261928875436e-04f;                                 \
        p_ = p_ * x2_ + 4.89352455891786e-03f;                                 \
        float q_ = 1.19825839466702e-06f;                                      \
        q_ = q_ * x2_ + 1.18534705686654e-04f;                                 \
        q_ = q_ * x2_ + 2.26843463243900e-03f;                                 \
        q_ = q_ * x2_ + 4.89352518554385e-03f;                                 \
        (out) = p_ * x_ / q_;                                                  \
    } while (0)

/* An AVX2+FMA clone picked at load time by ISA level (x86-64-v3), not by
 * CPU model ("arch=haswell" would only match Haswell itself). */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12 &&              \
    defined(__x86_64__)
#define ATTN_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define ATTN_CLONES
#endif

/* s[r * TK + c] = v . tanh(qp_r + kp_c) for a tile; the cost of the layer. */
ATTN_CLONES
static void score_tile(const float *qp, int64_t nq, const float *kp, int64_t nk,
                       const float *v, int64_t A, float *s) {
    for (int64_t r = 0; r < nq; r++)
        for (int64_t c = 0; c < nk; c++) {
            const float *x = qp + r * A, *y = kp + c * A;
            float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
            for (int64_t a = 0; a < A; a++) {
                float t;
                TANH_FAST(t, x[a] + y[a]);
                acc += v[a] * t;
            }
            s[r * TK + c] = acc;
        }
}

/* One pair's backward: t = tanh(u), dvp += g t, du = g v (1 - t^2) added to
 * dq and dk rows. Returns v . t (the unscaled score). */
ATTN_CLONES
static float pair_tanh(const float *x, const float *y, const float *v,
                       int64_t A, float *t) {
    float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
    for (int64_t a = 0; a < A; a++) {
        TANH_FAST(t[a], x[a] + y[a]);
        acc += v[a] * t[a];
    }
    return acc;
}

ATTN_CLONES
static void pair_grad(float g, const float *t, const float *v, int64_t A,
                      float *dvp, float *dx, float *dy) {
#pragma omp simd
    for (int64_t a = 0; a < A; a++) {
        float da = g * v[a] * (1.0f - t[a] * t[a]);
        dvp[a] += g * t[a];
        dx[a] += da;
        dy[a] += da;
    }
}

/* ---- forward ---------------------------------------------------------- */

static attn_status check_call(const attn_additive_config *c,
                              const float *params, int64_t B, int64_t Lq,
                              int64_t Lk, const float *q, const float *k,
                              const float *v, const attn_layer_opts *opts,
                              float *ws) {
    attn_status st = attn__additive_check_cfg(c);
    if (st) return st;
    ATTN__NEED(params);
    ATTN__NEED(q);
    ATTN__NEED(k);
    if (!c->context_from_keys) ATTN__NEED(v);
    ATTN__NEED(ws);
    if (opts && attn__has_user_mod(&opts->mask))
        return attn__fail(ATTN_E_UNSUPPORTED,
                          "additive attention does not call user functions "
                          "(mask.score_mod, mask.mask_mod, mask.block_mask)");
    if (opts && attn__has_score_mod(&opts->mask))
        return attn__fail(ATTN_E_UNSUPPORTED,
                          "additive attention takes masks "
                          "and document ids, not soft-capping, ALiBi or sinks");
    if ((st = attn__layer_opts_check(opts, B, 1, Lq, Lk))) return st;
    size_t n;
    if ((st = attn_additive_workspace_size(c, B, Lq, Lk, &n))) return st;
    if ((st = attn__check_finite_f32(q, B * Lq * c->query_dim, "q")) ||
        (st = attn__check_finite_f32(k, B * Lk * c->key_dim, "k")))
        return st;
    if (!c->context_from_keys &&
        (st = attn__check_finite_f32(v, B * Lk * c->value_dim, "v")))
        return st;
    return ATTN_OK;
}

/* Reference: everything in double from the inputs, one pair at a time. */
static attn_status forward_ref(const attn_additive_config *c,
                               const attn_additive_params *P, int64_t B,
                               int64_t Lq, int64_t Lk, const float *q,
                               const float *k, const float *v,
                               const attn_layer_opts *o, double scale,
                               float *out, float *weights, ws_parts *w) {
    const int64_t A = c->attn_dim, Dq = c->query_dim, Dk = c->key_dim;
    const int64_t Dc = attn_additive_out_dim(c);
    const double p = o->dropout_p, keep = 1.0 / (1.0 - p);
    double *qp = attn__alloc((size_t)(Lq * A), sizeof(double), "reference qp");
    double *kp = attn__alloc((size_t)(Lk * A), sizeof(double), "reference kp");
    double *s = attn__alloc((size_t)Lk, sizeof(double), "reference scores");
    double *acc = attn__alloc((size_t)Dc, sizeof(double), "reference context");
    if (!qp || !kp || !s || !acc) {
        attn__free(qp);
        attn__free(kp);
        attn__free(s);
        attn__free(acc);
        return ATTN_E_NOMEM;
    }
    for (int64_t b = 0; b < B; b++) {
        for (int64_t i = 0; i < Lq; i++)
            for (int64_t a = 0; a < A; a++) {
                double t = P->b_q ? P->b_q[a] : 0.0;
                for (int64_t d = 0; d < Dq; d++)
                    t += (double)P->w_q[a * Dq + d] * q[(b * Lq + i) * Dq + d];
                qp[i * A + a] = t;
                w->qp[(b * Lq + i) * A + a] = (float)t;
            }
        for (int64_t j = 0; j < Lk; j++)
            for (int64_t a = 0; a < A; a++) {
                double t = P->b_k ? P->b_k[a] : 0.0;
                for (int64_t d = 0; d < Dk; d++)
                    t += (double)P->w_k[a * Dk + d] * k[(b * Lk + j) * Dk + d];
                kp[j * A + a] = t;
                w->kp[(b * Lk + j) * A + a] = (float)t;
            }
        for (int64_t i = 0; i < Lq; i++) {
            double mx = -INFINITY, sum = 0.0;
            for (int64_t j = 0; j < Lk; j++) {
                s[j] = -INFINITY;
                if (!attn_mask_visible(&o->mask, b, 0, i, j, Lq, Lk)) continue;
                double t = 0.0;
                for (int64_t a = 0; a < A; a++)
                    t += (double)P->v[a] * tanh(qp[i * A + a] + kp[j * A + a]);
                s[j] = scale * t + attn__bias_at(&o->mask, b, 0, i, j);
                if (s[j] > mx) mx = s[j];
            }
            if (mx > -INFINITY)
                for (int64_t j = 0; j < Lk; j++)
                    if (s[j] > -INFINITY) sum += exp(s[j] - mx);
            memset(acc, 0, (size_t)Dc * sizeof(double));
            for (int64_t j = 0; j < Lk; j++) {
                double wt = 0.0;
                if (mx > -INFINITY && s[j] > -INFINITY) {
                    wt = exp(s[j] - mx) / sum;
                    if (p > 0)
                        wt = attn_dropout_kept(o->seed, p, b, 0, i, j)
                                 ? wt * keep
                                 : 0.0;
                }
                if (weights) weights[(b * Lq + i) * Lk + j] = (float)wt;
                if (wt == 0.0) continue;
                for (int64_t d = 0; d < Dc; d++)
                    acc[d] += wt * (c->context_from_keys
                                        ? kp[j * A + d]
                                        : (double)v[(b * Lk + j) * Dc + d]);
            }
            for (int64_t d = 0; d < Dc; d++) {
                out[(b * Lq + i) * Dc + d] = (float)acc[d];
                w->out[(b * Lq + i) * Dc + d] = (float)acc[d];
            }
            w->lse[b * Lq + i] =
                mx > -INFINITY ? (float)(mx + log(sum)) : -INFINITY;
        }
    }
    attn__free(qp);
    attn__free(kp);
    attn__free(s);
    attn__free(acc);
    return ATTN_OK;
}

/* The tiled pass over (b, query tile); raw scores go to weights (if any)
 * and are normalized afterwards. */
static attn_status forward_tiled(const attn_additive_config *c,
                                 const attn_additive_params *P, int64_t B,
                                 int64_t Lq, int64_t Lk, const float *v,
                                 const attn_layer_opts *o, float scale,
                                 float *out, float *weights, ws_parts *w) {
    const int64_t A = c->attn_dim, Dc = attn_additive_out_dim(c);
    const int nt = attn__omp_threads(o->threads);
    const int64_t tiles_q = (Lq + TQ - 1) / TQ, ntiles = B * tiles_q;
    const double p = o->dropout_p;
    const float keep = (float)(1.0 / (1.0 - p));
    const attn_mask *m = &o->mask;
    /* per thread: the TQ x Dc context accumulator, then TQ x TK scores */
    float *accbuf = attn__alloc((size_t)nt * TQ * (size_t)(Dc + TK),
                                sizeof(float), "additive tile buffers");
    if (!accbuf) return ATTN_E_NOMEM;
    const float *val = c->context_from_keys ? w->kp : v;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
    for (int64_t t = 0; t < ntiles; t++) {
        const int64_t b = t / tiles_q, i0 = (t % tiles_q) * TQ;
        const int64_t nq = Lq - i0 < TQ ? Lq - i0 : TQ;
        float *acc = accbuf + (size_t)omp_get_thread_num() * TQ * (Dc + TK);
        float *s = acc + TQ * Dc; /* TQ x TK scores */
        float mrow[TQ], lrow[TQ];
        memset(acc, 0, sizeof(float) * (size_t)(TQ * Dc));
        for (int r = 0; r < TQ; r++) {
            mrow[r] = -INFINITY;
            lrow[r] = 0.0f;
        }
        const float *qp = w->qp + (b * Lq + i0) * A;
        for (int64_t j0 = 0; j0 < Lk; j0 += TK) {
            const int64_t nk = Lk - j0 < TK ? Lk - j0 : TK;
            attn__tile_class cls =
                attn__mask_classify(m, b, 0, i0, i0 + nq, j0, j0 + nk, Lq, Lk);
            if (cls == ATTN__TILE_EMPTY) {
                if (weights)
                    for (int64_t r = 0; r < nq; r++)
                        for (int64_t cc = 0; cc < nk; cc++)
                            weights[(b * Lq + i0 + r) * Lk + j0 + cc] =
                                -INFINITY;
                continue;
            }
            score_tile(qp, nq, w->kp + (b * Lk + j0) * A, nk, P->v, A, s);
            for (int64_t r = 0; r < nq; r++) {
                float *sr = s + r * TK, mt = -INFINITY;
                for (int64_t cc = 0; cc < nk; cc++) {
                    const int64_t i = i0 + r, j = j0 + cc;
                    if (cls == ATTN__TILE_PARTIAL &&
                        !attn_mask_visible(m, b, 0, i, j, Lq, Lk)) {
                        sr[cc] = -INFINITY;
                    } else {
                        sr[cc] *= scale;
                        if (m->bias)
                            sr[cc] += (float)attn__bias_at(m, b, 0, i, j);
                    }
                    if (weights) weights[(b * Lq + i) * Lk + j] = sr[cc];
                    if (sr[cc] > mt) mt = sr[cc];
                }
                if (mt == -INFINITY) continue;
                const float mnew = mt > mrow[r] ? mt : mrow[r];
                const float alpha = expf(mrow[r] - mnew); /* 0 if -inf */
                float *ar = acc + r * Dc, lsum = 0.0f;
                if (alpha != 1.0f)
                    for (int64_t d = 0; d < Dc; d++) ar[d] *= alpha;
                for (int64_t cc = 0; cc < nk; cc++) {
                    if (sr[cc] == -INFINITY) continue;
                    float pj = expf(sr[cc] - mnew);
                    lsum += pj;
                    if (p > 0)
                        pj =
                            attn_dropout_kept(o->seed, p, b, 0, i0 + r, j0 + cc)
                                ? pj * keep
                                : 0.0f;
                    if (pj == 0.0f) continue;
                    const float *vr = val + (b * Lk + j0 + cc) * Dc;
#pragma omp simd
                    for (int64_t d = 0; d < Dc; d++) ar[d] += pj * vr[d];
                }
                lrow[r] = lrow[r] * alpha + lsum;
                mrow[r] = mnew;
            }
        }
        for (int64_t r = 0; r < nq; r++) {
            const int64_t i = i0 + r;
            float *orow = out + (b * Lq + i) * Dc;
            const float inv = lrow[r] > 0 ? 1.0f / lrow[r] : 0.0f;
            for (int64_t d = 0; d < Dc; d++) orow[d] = acc[r * Dc + d] * inv;
            memcpy(w->out + (b * Lq + i) * Dc, orow,
                   sizeof(float) * (size_t)Dc);
            w->lse[b * Lq + i] =
                lrow[r] > 0 ? mrow[r] + logf(lrow[r]) : -INFINITY;
        }
    }
    attn__free(accbuf);
    if (weights) {
#pragma omp parallel for schedule(static) num_threads(nt)
        for (int64_t r = 0; r < B * Lq; r++) {
            const float l = w->lse[r];
            for (int64_t j = 0; j < Lk; j++) {
                float *x = &weights[r * Lk + j];
                float wt =
                    (l == -INFINITY || *x == -INFINITY) ? 0.0f : expf(*x - l);
                if (p > 0 && wt != 0.0f)
                    wt = attn_dropout_kept(o->seed, p, r / Lq, 0, r % Lq, j)
                             ? wt * keep
                             : 0.0f;
                *x = wt;
            }
        }
    }
    return ATTN_OK;
}

static attn_status additive_forward_body(
    const attn_additive_config *c, const float *params, int64_t B, int64_t Lq,
    int64_t Lk, const float *q, const float *k, const float *v,
    const attn_layer_opts *opts, float *out, float *weights, float *ws) {
    attn_status st = check_call(c, params, B, Lq, Lk, q, k, v, opts, ws);
    if (st) return st;
    ATTN__NEED(out);
    attn_additive_params P;
    attn_additive_params_view(c, (float *)params, &P);
    ws_parts w;
    ws_layout(c, B, Lq, Lk, ws, &w);
    const double scale = opts->scale > 0 ? opts->scale : 1.0;
    if (opts->impl == ATTN_IMPL_REF)
        return forward_ref(c, &P, B, Lq, Lk, q, k, v, opts, scale, out, weights,
                           &w);
    const int64_t A = c->attn_dim;
    attn_linear_forward(B * Lq, c->query_dim, A, q, P.w_q, P.b_q, w.qp);
    attn_linear_forward(B * Lk, c->key_dim, A, k, P.w_k, P.b_k, w.kp);
    return forward_tiled(c, &P, B, Lq, Lk, v, opts, (float)scale, out, weights,
                         &w);
}

attn_status attn_additive_forward(const attn_additive_config *cfg,
                                  const float *params, int64_t B, int64_t Lq,
                                  int64_t Lk, const float *q, const float *k,
                                  const float *v, const attn_layer_opts *opts,
                                  float *out, float *weights, float *ws) {
    const int blas = attn__layer_blas_begin(opts);
    attn_status st = additive_forward_body(cfg, params, B, Lq, Lk, q, k, v,
                                           opts, out, weights, ws);
    attn__layer_end(blas);
    return st;
}

/* ---- backward --------------------------------------------------------- */

static attn_status additive_backward_body(
    const attn_additive_config *c, const float *params, int64_t B, int64_t Lq,
    int64_t Lk, const float *q, const float *k, const float *v,
    const attn_layer_opts *opts, const float *dout, float *ws, float *grads,
    float *dq, float *dk, float *dv) {
    attn_status st = check_call(c, params, B, Lq, Lk, q, k, v, opts, ws);
    if (st) return st;
    ATTN__NEED(dout);
    const int64_t A = c->attn_dim, Dc = attn_additive_out_dim(c);
    if ((st = attn__check_finite_f32(dout, B * Lq * Dc, "dout"))) return st;
    attn_additive_params P, G;
    attn_additive_params_view(c, (float *)params, &P);
    if (grads) attn_additive_params_view(c, grads, &G);
    ws_parts w;
    ws_layout(c, B, Lq, Lk, ws, &w);
    const float scale = (float)(opts->scale > 0 ? opts->scale : 1.0);
    const double p = opts->dropout_p;
    const float keep = (float)(1.0 / (1.0 - p));
    const attn_mask *m = &opts->mask;
    const float *val = c->context_from_keys ? w.kp : v;
    float *dval = c->context_from_keys ? w.dkp : dv; /* NULL: not wanted */
    memset(w.dqp, 0, sizeof(float) * (size_t)(B * Lq * A));
    memset(w.dkp, 0, sizeof(float) * (size_t)(B * Lk * A));
    memset(w.dvb, 0, sizeof(float) * (size_t)(B * A));
    /* One thread owns batch entry b: dkp rows gather from every query, so
     * this ownership keeps the sums in one order on any thread count. */
#pragma omp parallel for schedule(dynamic, 1)                                  \
    num_threads(attn__omp_threads(opts->threads))
    for (int64_t b = 0; b < B; b++) {
        float *t = w.tb + b * A, *dvp = w.dvb + b * A;
        for (int64_t i = 0; i < Lq; i++) {
            const float lse = w.lse[b * Lq + i];
            if (lse == -INFINITY) continue; /* fully masked row: no gradient */
            const float *go = dout + (b * Lq + i) * Dc;
            const float *oi = w.out + (b * Lq + i) * Dc;
            float Di = 0.0f;
#pragma omp simd reduction(+ : Di)
            for (int64_t d = 0; d < Dc; d++) Di += go[d] * oi[d];
            const float *qpi = w.qp + (b * Lq + i) * A;
            float *dqpi = w.dqp + (b * Lq + i) * A;
            for (int64_t j0 = 0; j0 < Lk; j0 += TK) {
                const int64_t nk = Lk - j0 < TK ? Lk - j0 : TK;
                attn__tile_class cls =
                    attn__mask_classify(m, b, 0, i, i + 1, j0, j0 + nk, Lq, Lk);
                if (cls == ATTN__TILE_EMPTY) continue;
                for (int64_t j = j0; j < j0 + nk; j++) {
                    if (cls == ATTN__TILE_PARTIAL &&
                        !attn_mask_visible(m, b, 0, i, j, Lq, Lk))
                        continue;
                    const float *kpj = w.kp + (b * Lk + j) * A;
                    float s = scale * pair_tanh(qpi, kpj, P.v, A, t);
                    if (m->bias) s += (float)attn__bias_at(m, b, 0, i, j);
                    const float Pij = expf(s - lse);
                    float fac = 1.0f;
                    if (p > 0)
                        fac = attn_dropout_kept(opts->seed, p, b, 0, i, j)
                                  ? keep
                                  : 0.0f;
                    const float *vj = val + (b * Lk + j) * Dc;
                    float dPt = 0.0f;
                    if (fac != 0.0f) {
#pragma omp simd reduction(+ : dPt)
                        for (int64_t d = 0; d < Dc; d++) dPt += go[d] * vj[d];
                    }
                    const float dS = Pij * (dPt * fac - Di);
                    if (dval && fac != 0.0f) {
                        float *dvj = dval + (b * Lk + j) * Dc, pw = Pij * fac;
#pragma omp simd
                        for (int64_t d = 0; d < Dc; d++) dvj[d] += pw * go[d];
                    }
                    pair_grad(dS * scale, t, P.v, A, dvp, dqpi,
                              w.dkp + (b * Lk + j) * A);
                }
            }
        }
    }
    if (grads)
        for (int64_t b = 0; b < B; b++)
            for (int64_t a = 0; a < A; a++) G.v[a] += w.dvb[b * A + a];
    attn_linear_backward(B * Lq, c->query_dim, A, q, P.w_q, w.dqp,
                         grads ? G.w_q : NULL, grads ? G.b_q : NULL, dq);
    attn_linear_backward(B * Lk, c->key_dim, A, k, P.w_k, w.dkp,
                         grads ? G.w_k : NULL, grads ? G.b_k : NULL, dk);
    return ATTN_OK;
}

attn_status attn_additive_backward(const attn_additive_config *cfg,
                                   const float *params, int64_t B, int64_t Lq,
                                   int64_t Lk, const float *q, const float *k,
                                   const float *v, const attn_layer_opts *opts,
                                   const float *dout, float *ws, float *grads,
                                   float *dq, float *dk, float *dv) {
    const int blas = attn__layer_blas_begin(opts);
    attn_status st = additive_backward_body(cfg, params, B, Lq, Lk, q, k, v,
                                            opts, dout, ws, grads, dq, dk, dv);
    attn__layer_end(blas);
    return st;
}

/* ---- weights from a saved forward (for the encoder's pictures) ------- */

attn_status attn__additive_weights_from_ws(const attn_additive_config *c,
                                           const float *params, int64_t B,
                                           int64_t Lq, int64_t Lk,
                                           const attn_layer_opts *o,
                                           const float *ws, float *weights) {
    attn_additive_params P;
    attn_additive_params_view(c, (float *)params, &P);
    ws_parts w;
    ws_layout(c, B, Lq, Lk, (float *)ws, &w);
    const float scale = (float)(o->scale > 0 ? o->scale : 1.0);
    const int64_t A = c->attn_dim;
#pragma omp parallel for schedule(static)                                      \
    num_threads(attn__omp_threads(o->threads))
    for (int64_t r = 0; r < B * Lq; r++) {
        const int64_t b = r / Lq, i = r % Lq;
        const float lse = w.lse[r];
        for (int64_t j = 0; j < Lk; j++) {
            float x = 0.0f;
            if (lse != -INFINITY &&
                attn_mask_visible(&o->mask, b, 0, i, j, Lq, Lk)) {
                float s;
                score_tile(w.qp + r * A, 1, w.kp + (b * Lk + j) * A, 1, P.v, A,
                           &s);
                s = s * scale + (float)attn__bias_at(&o->mask, b, 0, i, j);
                x = expf(s - lse);
            }
            weights[r * Lk + j] = x;
        }
    }
    return ATTN_OK;
}
