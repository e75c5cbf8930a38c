/* What tests/test_user_mod*.c share: user functions (ALiBi, causal,
 * soft-cap, failing ones) and their contexts, a random problem, running it
 * through attn_sdpa_forward / backward, and comparing two results. */
#ifndef ATTN_USER_MOD_UTIL_H
#define ATTN_USER_MOD_UTIL_H

#include "attn.h"
#include "attn_cache.h"
#include "attn_layers.h"
#include "check.h"

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

extern int64_t attn__flash_bq_override, attn__flash_bk_override;

static inline void *zalloc(size_t n) { return calloc(1, n ? n : 1); }

/* ---- the user functions ------------------------------------------------- */

typedef struct {
    const double *slopes;
    int sym, br;
    int64_t Lq, Lk;
} alibi_ctx;

/* ALiBi as a score_mod: s -= slope_h (c - j), |c - j| when symmetric. */
static inline int u_alibi(void *ctx, int64_t b, int64_t h, int64_t i,
                          int64_t j0, int64_t n, double *s, double *ds) {
    const alibi_ctx *a = ctx;
    (void)b;
    const int64_t c = i + (a->br ? a->Lk - a->Lq : 0);
    for (int64_t t = 0; t < n; t++) {
        double dist = (double)(c - (j0 + t));
        if (a->sym) dist = fabs(dist);
        s[t] -= a->slopes[h] * dist;
        if (ds) ds[t] = 1.0;
    }
    return 0;
}

/* A soft-cap as a score_mod (not additive): s = cap tanh(s / cap). */
static inline int u_cap(void *ctx, int64_t b, int64_t h, int64_t i, int64_t j0,
                        int64_t n, double *s, double *ds) {
    const double cap = *(const double *)ctx;
    (void)b, (void)h, (void)i, (void)j0;
    for (int64_t t = 0; t < n; t++) {
        double th = tanh(s[t] / cap);
        s[t] = cap * th;
        if (ds) ds[t] = 1.0 - th * th;
    }
    return 0;
}

typedef struct {
    int br;
    int64_t Lq, Lk;
    const attn_block_mask *bm; /* if set: every call must lie in PARTIAL */
    atomic_llong calls, elems, outside;
} causal_ctx;

static inline int u_causal(void *ctx, int64_t b, int64_t h, int64_t i,
                           int64_t j0, int64_t n, uint8_t *keep) {
    causal_ctx *c = ctx;
    const int64_t d = i + (c->br ? c->Lk - c->Lq : 0);
    for (int64_t t = 0; t < n; t++)
        if (j0 + t > d) keep[t] = 0;
    atomic_fetch_add(&c->calls, 1);
    atomic_fetch_add(&c->elems, n);
    if (c->bm) {
        const attn_block_mask *bm = c->bm;
        const uint8_t *row =
            bm->cls +
            (((bm->B == 1 ? 0 : b) * bm->H + (bm->H == 1 ? 0 : h)) * bm->nq +
             i / bm->block_q) *
                bm->nk;
        for (int64_t t = 0; t < n; t++)
            if (row[(j0 + t) / bm->block_k] != ATTN_BLOCK_PARTIAL)
                atomic_fetch_add(&c->outside, 1);
    }
    return 0;
}

static inline int u_none(void *ctx, int64_t b, int64_t h, int64_t i, int64_t j0,
                         int64_t n, uint8_t *keep) {
    (void)ctx, (void)b, (void)h, (void)i, (void)j0;
    memset(keep, 0, (size_t)n);
    return 0;
}

/* Fails in the ways ctx says: at (b, h, i, j) a NaN score (mode 0), a
 * status rc (mode 1), a score past f32 (mode 2); only in backward passes
 * (dscore given) when bwd. */
typedef struct {
    int mode, rc, bwd;
    int64_t b, h, i, j;
} bad_ctx;

static inline int u_bad(void *ctx, int64_t b, int64_t h, int64_t i, int64_t j0,
                        int64_t n, double *s, double *ds) {
    const bad_ctx *x = ctx;
    if (x->bwd && !ds) return 0;
    if (b != x->b || h != x->h || i != x->i || x->j < j0 || x->j >= j0 + n)
        return 0;
    if (x->mode == 1) return x->rc;
    s[x->j - j0] = x->mode == 2 ? 1e300 : NAN;
    return 0;
}

static inline int u_mask_bad(void *ctx, int64_t b, int64_t h, int64_t i,
                             int64_t j0, int64_t n, uint8_t *keep) {
    (void)b, (void)h, (void)j0, (void)n, (void)keep;
    return i == 1 ? *(const int *)ctx : 0;
}

/* ---- problems and runs -------------------------------------------------- */

typedef struct {
    int B, H, Hkv, Lq, Lk, D;
    int64_t bshape[4]; /* bias shape, or bshape[0] == 0: none */
    double *q, *k, *v, *g, *bias;
    float *qf, *kf, *vf, *gf, *biasf;
} prob;

static inline size_t nbias(const prob *p) {
    return p->bshape[0] ? (size_t)(p->bshape[0] * p->bshape[1] * p->bshape[2] *
                                   p->bshape[3])
                        : 0;
}

static inline void prob_make(prob *p, int B, int H, int Hkv, int Lq, int Lk,
                             int D, const int64_t *bshape,
                             unsigned long long seed) {
    memset(p, 0, sizeof *p);
    p->B = B, p->H = H, p->Hkv = Hkv, p->Lq = Lq, p->Lk = Lk, p->D = D;
    if (bshape) memcpy(p->bshape, bshape, sizeof p->bshape);
    size_t nq = (size_t)B * H * Lq * D, nk = (size_t)B * Hkv * Lk * D;
    size_t nb = nbias(p);
    p->q = zalloc(nq * 8), p->g = zalloc(nq * 8);
    p->k = zalloc(nk * 8), p->v = zalloc(nk * 8);
    p->bias = zalloc(nb * 8);
    p->qf = zalloc(nq * 4), p->gf = zalloc(nq * 4);
    p->kf = zalloc(nk * 4), p->vf = zalloc(nk * 4);
    p->biasf = zalloc(nb * 4);
    unsigned long long s = seed;
    for (size_t i = 0; i < nq; i++) p->qf[i] = (float)(1.5 * test_rand(&s));
    for (size_t i = 0; i < nk; i++) p->kf[i] = (float)(1.5 * test_rand(&s));
    for (size_t i = 0; i < nk; i++) p->vf[i] = (float)test_rand(&s);
    for (size_t i = 0; i < nq; i++) p->gf[i] = (float)test_rand(&s);
    for (size_t i = 0; i < nb; i++) p->biasf[i] = (float)test_rand(&s);
    for (size_t i = 0; i < nq; i++) p->q[i] = p->qf[i], p->g[i] = p->gf[i];
    for (size_t i = 0; i < nk; i++) p->k[i] = p->kf[i], p->v[i] = p->vf[i];
    for (size_t i = 0; i < nb; i++) p->bias[i] = p->biasf[i];
}

static inline void prob_free(prob *p) {
    free(p->q), free(p->k), free(p->v), free(p->g), free(p->bias);
    free(p->qf), free(p->kf), free(p->vf), free(p->gf), free(p->biasf);
}

/* Everything a call gives, as doubles. */
typedef struct {
    double *out, *w, *dq, *dk, *dv, *db;
    float *lse;
    attn_status fst, bst;
} result;

static inline void result_free(result *r) {
    free(r->out), free(r->w), free(r->dq), free(r->dk), free(r->dv);
    free(r->db), free(r->lse);
}

/* Forward (with weights) and backward of p under opts with impl REF (f64)
 * or FLASH (f32); the bias (if p has one) with its gradient. */
static inline void run(const prob *p, const attn_sdpa_opts *opts,
                       attn_impl impl, int threads, result *r) {
    const int B = p->B, H = p->H, Hkv = p->Hkv, Lq = p->Lq, Lk = p->Lk,
              D = p->D;
    const size_t no = (size_t)B * H * Lq * D, nk = (size_t)B * Hkv * Lk * D;
    const size_t nw = (size_t)B * H * Lq * Lk, nb = nbias(p);
    memset(r, 0, sizeof *r);
    r->out = zalloc(no * 8), r->w = zalloc(nw * 8), r->dq = zalloc(no * 8);
    r->dk = zalloc(nk * 8), r->dv = zalloc(nk * 8), r->db = zalloc(nb * 8);
    r->lse = zalloc((size_t)B * H * Lq * 4);
    const int f64 = impl == ATTN_IMPL_REF;
    const attn_dtype dt = f64 ? ATTN_F64 : ATTN_F32;
    const size_t es = f64 ? 8 : 4;
    void *o = zalloc(no * es), *w = zalloc(nw * es), *dq = zalloc(no * es);
    void *dk = zalloc(nk * es), *dv = zalloc(nk * es), *db = zalloc(nb * es);
    attn_tensor Q = attn_tensor_4d(f64 ? (void *)p->q : p->qf, dt, B, H, Lq, D);
    attn_tensor K =
        attn_tensor_4d(f64 ? (void *)p->k : p->kf, dt, B, Hkv, Lk, D);
    attn_tensor V =
        attn_tensor_4d(f64 ? (void *)p->v : p->vf, dt, B, Hkv, Lk, D);
    attn_tensor G = attn_tensor_4d(f64 ? (void *)p->g : p->gf, dt, B, H, Lq, D);
    attn_tensor O = attn_tensor_4d(o, dt, B, H, Lq, D);
    attn_tensor W = attn_tensor_4d(w, dt, B, H, Lq, Lk);
    attn_tensor dQ = attn_tensor_4d(dq, dt, B, H, Lq, D);
    attn_tensor dK = attn_tensor_4d(dk, dt, B, Hkv, Lk, D);
    attn_tensor dV = attn_tensor_4d(dv, dt, B, Hkv, Lk, D);
    const int64_t *bs = p->bshape;
    attn_tensor Bt = attn_tensor_4d(f64 ? (void *)p->bias : p->biasf, dt, bs[0],
                                    bs[1], bs[2], bs[3]);
    attn_tensor dB = attn_tensor_4d(db, dt, bs[0], bs[1], bs[2], bs[3]);
    attn_sdpa_opts op = *opts;
    op.impl = impl;
    op.threads = threads;
    if (nb) op.mask.bias = &Bt;
    r->fst = attn_sdpa_forward(&Q, &K, &V, &op, &O, &W, r->lse);
    r->bst = r->fst ? r->fst
                    : attn_sdpa_backward(&Q, &K, &V, &O, r->lse, &G, &op, &dQ,
                                         &dK, &dV, nb ? &dB : NULL);
#define TO_D(dst, src, n)                                                      \
    for (size_t t_ = 0; t_ < (n); t_++)                                        \
        (dst)[t_] = f64 ? ((double *)(src))[t_] : ((float *)(src))[t_];
    TO_D(r->out, o, no);
    TO_D(r->w, w, nw);
    TO_D(r->dq, dq, no);
    TO_D(r->dk, dk, nk);
    TO_D(r->dv, dv, nk);
    TO_D(r->db, db, nb);
#undef TO_D
    free(o), free(w), free(dq), free(dk), free(dv), free(db);
}

static inline double maxdiff(const double *a, const double *b, size_t n,
                             double *sc) {
    double e = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]);
        if (!(d <= e)) e = d; /* NaN fails */
        if (fabs(b[i]) > s) s = fabs(b[i]);
    }
    *sc = s;
    return e;
}

/* a against b (the expected result) within tol (relative to 1 + |b|max;
 * lse with tol_l). */
static inline void agree(const prob *p, const result *a, const result *b,
                         double tol, double tol_l, const char *what) {
    CHECK_MSG(a->fst == ATTN_OK && b->fst == ATTN_OK && a->bst == ATTN_OK &&
                  b->bst == ATTN_OK,
              "%s: status %d %d %d %d (%s)", what, a->fst, b->fst, a->bst,
              b->bst, attn_last_error());
    const size_t no = (size_t)p->B * p->H * p->Lq * p->D;
    const size_t nk = (size_t)p->B * p->Hkv * p->Lk * p->D;
    const size_t nw = (size_t)p->B * p->H * p->Lq * p->Lk, nl = nw / p->Lk;
    const double *x[6] = {a->out, a->w, a->dq, a->dk, a->dv, a->db};
    const double *y[6] = {b->out, b->w, b->dq, b->dk, b->dv, b->db};
    const size_t n[6] = {no, nw, no, nk, nk, nbias(p)};
    static const char *const name[6] = {"out", "weights", "dq",
                                        "dk",  "dv",      "dbias"};
    for (int t = 0; t < 6; t++) {
        double sc, e = maxdiff(x[t], y[t], n[t], &sc);
        const double f = t >= 2 ? 5 : 1; /* gradients: a wider floor */
        CHECK_MSG(e <= f * tol * (1 + sc), "%s: %s err %g (scale %g) L %d/%d",
                  what, name[t], e, sc, p->Lq, p->Lk);
    }
    double el = 0;
    for (size_t i = 0; i < nl; i++) {
        double d = a->lse[i] == b->lse[i] ? 0 : fabs(a->lse[i] - b->lse[i]);
        if (!(d <= el)) el = d;
    }
    CHECK_MSG(el <= tol_l, "%s: lse err %g", what, el);
}

/* the usual floors of f32 flash against the f64 reference */
static inline double floor_f32(const prob *p) {
    return 2e-5 * sqrt((double)p->Lk);
}

/* ---- a user ALiBi gives the built-in's results -------------------------- */

#endif
