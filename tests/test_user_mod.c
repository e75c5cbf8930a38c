/* User functions of attn_mask (score_mod, mask_mod) and block masks, and
 * the flash backward's dbias with soft-capping: a user score_mod that
 * reproduces ALiBi and a user mask_mod that reproduces causal give the
 * built-ins' results (reference and flash, forward and backward, with and
 * without a block mask); the block mask's classes and the calls the
 * kernels make (none inside FULL or EMPTY blocks); a mask that hides
 * everything; errors from the functions (NaN, a nonzero status) and from
 * bad block masks; bitwise equality over thread counts; a gradient check
 * in double of a non-additive score_mod through the reference; dbias with
 * soft-capping and with a score_mod, flash against the reference. Sizes
 * 1, 3, 17, 129, Lq != Lk, GQA. */
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

static void *zalloc(size_t n) { return calloc(1, n ? n : 1); }

/* ---- the user functions ------------------------------------------------- */

typedef struct {
    const double *slopes;
    int sym, br;
    int64_t Lq, Lk;
} alibi_ctx;

/* ALiBi as a score_mod: s -= slope_h (c - j), |c - j| when symmetric. */
static int u_alibi(void *ctx, int64_t b, int64_t h, int64_t i, int64_t j0,
                   int64_t n, double *s, double *ds) {
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
static int u_cap(void *ctx, int64_t b, int64_t h, int64_t i, int64_t j0,
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

static int u_causal(void *ctx, int64_t b, int64_t h, int64_t i, int64_t j0,
                    int64_t n, uint8_t *keep) {
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

static int u_none(void *ctx, int64_t b, int64_t h, int64_t i, int64_t j0,
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

static int u_bad(void *ctx, int64_t b, int64_t h, int64_t i, int64_t j0,
                 int64_t n, double *s, double *ds) {
    const bad_ctx *x = ctx;
    if (x->bwd && !ds) return 0;
    if (b != x->b || h != x->h || i != x->i || x->j < j0 || x->j >= j0 + n)
        return 0;
    if (x->mode == 1) return x->rc;
    s[x->j - j0] = x->mode == 2 ? 1e300 : NAN;
    return 0;
}

static int u_mask_bad(void *ctx, int64_t b, int64_t h, int64_t i, int64_t j0,
                      int64_t n, uint8_t *keep) {
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

static size_t nbias(const prob *p) {
    return p->bshape[0] ? (size_t)(p->bshape[0] * p->bshape[1] * p->bshape[2] *
                                   p->bshape[3])
                        : 0;
}

static void prob_make(prob *p, int B, int H, int Hkv, int Lq, int Lk, int D,
                      const int64_t *bshape, unsigned long long seed) {
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

static void prob_free(prob *p) {
    free(p->q), free(p->k), free(p->v), free(p->g), free(p->bias);
    free(p->qf), free(p->kf), free(p->vf), free(p->gf), free(p->biasf);
}

/* Everything a call gives, as doubles. */
typedef struct {
    double *out, *w, *dq, *dk, *dv, *db;
    float *lse;
    attn_status fst, bst;
} result;

static void result_free(result *r) {
    free(r->out), free(r->w), free(r->dq), free(r->dk), free(r->dv);
    free(r->db), free(r->lse);
}

/* Forward (with weights) and backward of p under opts with impl REF (f64)
 * or FLASH (f32); the bias (if p has one) with its gradient. */
static void run(const prob *p, const attn_sdpa_opts *opts, attn_impl impl,
                int threads, result *r) {
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

static double maxdiff(const double *a, const double *b, size_t n, double *sc) {
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
static void agree(const prob *p, const result *a, const result *b, double tol,
                  double tol_l, const char *what) {
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
static double floor_f32(const prob *p) { return 2e-5 * sqrt((double)p->Lk); }

/* ---- a user ALiBi gives the built-in's results -------------------------- */

static void test_alibi(void) {
    static const int sizes[][2] = {{1, 1},  {3, 3},     {17, 17}, {17, 5},
                                   {5, 17}, {129, 129}, {33, 70}};
    unsigned long long seed = 5;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int combo = 0; combo < 3; combo++) {
            const int Lq = sizes[s][0], Lk = sizes[s][1];
            const int64_t full[4] = {2, 4, Lq, Lk};
            prob p;
            prob_make(&p, 2, 4, combo == 1 ? 2 : 4, Lq, Lk, combo ? 8 : 5,
                      combo == 2 ? full : NULL, seed++);
            double slopes[4] = {0.5, 0.25, 0.125, 0.0625};
            alibi_ctx ac = {slopes, combo == 1, combo == 2, Lq, Lk};
            attn_sdpa_opts bi, us;
            attn_sdpa_opts_init(&bi);
            bi.mask.causal = combo != 1;
            bi.mask.align =
                combo == 2 ? ATTN_ALIGN_BOTTOM_RIGHT : ATTN_ALIGN_TOP_LEFT;
            us = bi;
            bi.mask.alibi =
                combo == 1 ? ATTN_ALIBI_SYMMETRIC : ATTN_ALIBI_CAUSAL;
            bi.mask.alibi_slopes = slopes;
            bi.mask.n_alibi_slopes = 4;
            us.mask.score_mod = u_alibi;
            us.mask.score_ctx = &ac;
            result rb, ru, fb, fu;
            run(&p, &bi, ATTN_IMPL_REF, 0, &rb);
            run(&p, &us, ATTN_IMPL_REF, 0, &ru);
            run(&p, &bi, ATTN_IMPL_FLASH, 0, &fb);
            run(&p, &us, ATTN_IMPL_FLASH, 0, &fu);
            agree(&p, &ru, &rb, 1e-12, 1e-6, "ref: user alibi vs built-in");
            agree(&p, &fu, &fb, 1e-5, 1e-5, "flash: user alibi vs built-in");
            agree(&p, &fu, &ru, floor_f32(&p), 1e-4 * (1 + sqrt((double)Lk)),
                  "user alibi: flash vs ref");
            result_free(&rb), result_free(&ru), result_free(&fb);
            result_free(&fu);
            prob_free(&p);
        }
}

/* ---- a user causal mask gives the built-in's results -------------------- */

/* Brute-force classes of u_causal's blocks against bm. */
static void check_classes(const attn_block_mask *bm, causal_ctx *cc) {
    int bad = 0;
    for (int64_t bi = 0; bi < bm->nq; bi++)
        for (int64_t bj = 0; bj < bm->nk; bj++) {
            int any = 0, all = 1;
            for (int64_t i = bi * bm->block_q;
                 i < (bi + 1) * bm->block_q && i < bm->Lq; i++)
                for (int64_t j = bj * bm->block_k;
                     j < (bj + 1) * bm->block_k && j < bm->Lk; j++) {
                    int kept = j <= i + (cc->br ? cc->Lk - cc->Lq : 0);
                    any |= kept;
                    all &= kept;
                }
            int want = !any  ? ATTN_BLOCK_EMPTY
                       : all ? ATTN_BLOCK_FULL
                             : ATTN_BLOCK_PARTIAL;
            bad += bm->cls[bi * bm->nk + bj] != want;
        }
    CHECK_MSG(bad == 0, "%d block classes wrong (%lld x %lld blocks)", bad,
              (long long)bm->nq, (long long)bm->nk);
}

static void test_causal(void) {
    static const int sizes[][2] = {{1, 1},  {3, 3},     {17, 17}, {17, 5},
                                   {5, 17}, {129, 129}, {33, 70}};
    static const int64_t blocks[][2] = {{8, 8}, {5, 7}, {16, 32}};
    static const int64_t tiles[][2] = {{0, 0}, {16, 16}, {32, 16}};
    unsigned long long seed = 50;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int combo = 0; combo < 3; combo++) {
            const int Lq = sizes[s][0], Lk = sizes[s][1];
            const int64_t bcast[4] = {1, 4, 1, Lk};
            prob p;
            prob_make(&p, 2, 4, combo == 1 ? 1 : 4, Lq, Lk, 4 + combo,
                      combo == 1 ? bcast : NULL, seed++);
            causal_ctx cc = {.br = combo == 2, .Lq = Lq, .Lk = Lk};
            attn_sdpa_opts bi, us;
            attn_sdpa_opts_init(&bi);
            bi.mask.align =
                combo == 2 ? ATTN_ALIGN_BOTTOM_RIGHT : ATTN_ALIGN_TOP_LEFT;
            bi.mask.window_left = combo == 0 ? 6 : -1; /* AND with a window */
            us = bi;
            bi.mask.causal = 1;
            us.mask.mask_mod = u_causal;
            us.mask.mask_ctx = &cc;
            attn_block_mask bm;
            int64_t n;
            const int64_t *bl = blocks[combo];
            CHECK_STATUS(attn_block_mask_size(1, 1, Lq, Lk, bl[0], bl[1], &n),
                         ATTN_OK);
            uint8_t *cls = zalloc((size_t)n);
            CHECK_STATUS(attn_block_mask_build(&bm, u_causal, &cc, 1, 1, Lq, Lk,
                                               bl[0], bl[1], cls, n),
                         ATTN_OK);
            CHECK(atomic_load(&cc.elems) == (long long)Lq * Lk);
            check_classes(&bm, &cc);
            attn_sdpa_opts ub = us;
            ub.mask.block_mask = &bm;
            attn__flash_bq_override = tiles[combo][0];
            attn__flash_bk_override = tiles[combo][1];
            result rb, ru, fb, fu, fbm;
            run(&p, &bi, ATTN_IMPL_REF, 0, &rb);
            run(&p, &us, ATTN_IMPL_REF, 0, &ru);
            run(&p, &bi, ATTN_IMPL_FLASH, 0, &fb);
            run(&p, &us, ATTN_IMPL_FLASH, 0, &fu);
            cc.bm = &bm;
            atomic_store(&cc.outside, 0);
            run(&p, &ub, ATTN_IMPL_FLASH, 0, &fbm);
            CHECK_MSG(atomic_load(&cc.outside) == 0,
                      "%lld keys asked outside PARTIAL blocks",
                      (long long)atomic_load(&cc.outside));
            cc.bm = NULL;
            attn__flash_bq_override = attn__flash_bk_override = 0;
            agree(&p, &ru, &rb, 1e-12, 1e-6, "ref: user causal vs built-in");
            agree(&p, &fu, &fb, 1e-5, 1e-5, "flash: user causal vs built-in");
            agree(&p, &fbm, &fb, 1e-5, 1e-5,
                  "flash: user causal + block mask vs built-in");
            agree(&p, &fbm, &rb, floor_f32(&p), 1e-4 * (1 + sqrt((double)Lk)),
                  "user causal + block mask: flash vs ref");
            result_free(&rb), result_free(&ru), result_free(&fb);
            result_free(&fu), result_free(&fbm);
            free(cls);
            prob_free(&p);
        }
}

/* The forward asks mask_mod only inside PARTIAL blocks, for each row once
 * per such block: exactly sum over rows of the PARTIAL blocks' widths;
 * without a block mask, every pair once. */
static void test_calls(void) {
    static const int64_t cases[][6] = {
        /* Lq, Lk, block_q, block_k, tile q, tile k */
        {64, 64, 16, 16, 0, 0},
        {37, 37, 8, 5, 16, 16},
        {50, 90, 7, 16, 32, 64},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int64_t *x = cases[c];
        const int Lq = (int)x[0], Lk = (int)x[1];
        prob p;
        prob_make(&p, 1, 1, 1, Lq, Lk, 4, NULL, 77 + c);
        causal_ctx cc = {.br = 1, .Lq = Lq, .Lk = Lk};
        int64_t n;
        CHECK_STATUS(attn_block_mask_size(1, 1, Lq, Lk, x[2], x[3], &n),
                     ATTN_OK);
        uint8_t *cls = zalloc((size_t)n);
        attn_block_mask bm;
        CHECK_STATUS(attn_block_mask_build(&bm, u_causal, &cc, 1, 1, Lq, Lk,
                                           x[2], x[3], cls, n),
                     ATTN_OK);
        long long want = 0, partial = 0, full = 0;
        for (int64_t i = 0; i < Lq; i++)
            for (int64_t bj = 0; bj < bm.nk; bj++) {
                uint8_t k = cls[(i / x[2]) * bm.nk + bj];
                int64_t w = Lk - bj * x[3] < x[3] ? Lk - bj * x[3] : x[3];
                if (k == ATTN_BLOCK_PARTIAL) want += w, partial++;
                if (k == ATTN_BLOCK_FULL) full++;
            }
        CHECK(partial > 0 && full > 0);
        attn_sdpa_opts o;
        attn_sdpa_opts_init(&o);
        o.impl = ATTN_IMPL_FLASH;
        o.threads = 1;
        o.mask.mask_mod = u_causal;
        o.mask.mask_ctx = &cc;
        float *out = zalloc((size_t)Lq * 4 * 4);
        attn_tensor Q = attn_tensor_4d(p.qf, ATTN_F32, 1, 1, Lq, 4);
        attn_tensor K = attn_tensor_4d(p.kf, ATTN_F32, 1, 1, Lk, 4);
        attn_tensor O = attn_tensor_4d(out, ATTN_F32, 1, 1, Lq, 4);
        attn__flash_bq_override = x[4];
        attn__flash_bk_override = x[5];
        atomic_store(&cc.elems, 0);
        CHECK_STATUS(attn_sdpa_forward(&Q, &K, &K, &o, &O, NULL, NULL),
                     ATTN_OK);
        CHECK_MSG(atomic_load(&cc.elems) == (long long)Lq * Lk,
                  "no block mask: %lld keys asked, %lld pairs",
                  (long long)atomic_load(&cc.elems), (long long)Lq * Lk);
        o.mask.block_mask = &bm;
        atomic_store(&cc.elems, 0);
        CHECK_STATUS(attn_sdpa_forward(&Q, &K, &K, &o, &O, NULL, NULL),
                     ATTN_OK);
        CHECK_MSG(atomic_load(&cc.elems) == want,
                  "block mask: %lld keys asked, %lld in PARTIAL blocks",
                  (long long)atomic_load(&cc.elems), want);
        attn__flash_bq_override = attn__flash_bk_override = 0;
        printf("calls: L %d/%d blocks %lldx%lld: %lld of %lld pairs asked\n",
               Lq, Lk, (long long)x[2], (long long)x[3], want,
               (long long)Lq * Lk);
        free(out);
        free(cls);
        prob_free(&p);
    }
}

/* ---- a mask that hides everything ---------------------------------------- */

static int all_zero(const double *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (x[i] != 0.0) return 0;
    return 1;
}

static void test_hide_all(void) {
    const int64_t bsh[4] = {1, 1, 17, 5};
    prob p;
    prob_make(&p, 1, 2, 1, 17, 5, 3, bsh, 9);
    int64_t n;
    CHECK_STATUS(attn_block_mask_size(1, 1, 17, 5, 4, 4, &n), ATTN_OK);
    uint8_t *cls = zalloc((size_t)n);
    attn_block_mask bm;
    CHECK_STATUS(
        attn_block_mask_build(&bm, u_none, NULL, 1, 1, 17, 5, 4, 4, cls, n),
        ATTN_OK);
    for (int64_t x = 0; x < n; x++) CHECK(cls[x] == ATTN_BLOCK_EMPTY);
    for (int with_bm = 0; with_bm < 2; with_bm++)
        for (int impl = 1; impl <= 2; impl++) {
            attn_sdpa_opts o;
            attn_sdpa_opts_init(&o);
            o.mask.mask_mod = u_none;
            o.mask.block_mask = with_bm ? &bm : NULL;
            result r;
            run(&p, &o, (attn_impl)impl, 0, &r);
            CHECK_STATUS(r.fst, ATTN_OK);
            CHECK_STATUS(r.bst, ATTN_OK);
            const size_t no = 2 * 17 * 3, nk = 5 * 3;
            CHECK(all_zero(r.out, no) && all_zero(r.w, 2 * 17 * 5));
            CHECK(all_zero(r.dq, no) && all_zero(r.dk, nk) &&
                  all_zero(r.dv, nk) && all_zero(r.db, 17 * 5));
            for (int i = 0; i < 2 * 17; i++) CHECK(r.lse[i] == -INFINITY);
            result_free(&r);
        }
    free(cls);
    prob_free(&p);
}

/* ---- errors --------------------------------------------------------------- */

static attn_status fwd(const prob *p, attn_sdpa_opts *o, int with_w) {
    float *out = zalloc((size_t)p->B * p->H * p->Lq * p->D * 4);
    float *w = zalloc((size_t)p->B * p->H * p->Lq * p->Lk * 4);
    float *lse = zalloc((size_t)p->B * p->H * p->Lq * 4);
    attn_tensor Q = attn_tensor_4d(p->qf, ATTN_F32, p->B, p->H, p->Lq, p->D);
    attn_tensor K = attn_tensor_4d(p->kf, ATTN_F32, p->B, p->Hkv, p->Lk, p->D);
    attn_tensor O = attn_tensor_4d(out, ATTN_F32, p->B, p->H, p->Lq, p->D);
    attn_tensor W = attn_tensor_4d(w, ATTN_F32, p->B, p->H, p->Lq, p->Lk);
    attn_status st =
        attn_sdpa_forward(&Q, &K, &K, o, &O, with_w ? &W : NULL, lse);
    free(out), free(w), free(lse);
    return st;
}

static void test_errors(void) {
    prob p;
    prob_make(&p, 2, 2, 2, 6, 9, 4, NULL, 3);
    attn_sdpa_opts o;
    /* a NaN from score_mod, in every kernel, forward and backward */
    bad_ctx bc = {.mode = 0, .b = 1, .h = 1, .i = 2, .j = 3};
    for (int impl = 1; impl <= 2; impl++)
        for (int bwd = 0; bwd < 2; bwd++) {
            attn_sdpa_opts_init(&o);
            o.mask.score_mod = u_bad;
            o.mask.score_ctx = &bc;
            bc.bwd = bwd;
            result r;
            run(&p, &o, (attn_impl)impl, 0, &r);
            CHECK_STATUS(bwd ? r.bst : r.fst, ATTN_E_NONFINITE);
            if (bwd) CHECK_STATUS(r.fst, ATTN_OK);
            CHECK_MSG(strstr(attn_last_error(), "score_mod") &&
                          strstr(attn_last_error(), "(1, 1, 2, 3)"),
                      "message: %s", attn_last_error());
            result_free(&r);
        }
    attn_sdpa_opts_init(&o);
    o.mask.score_mod = u_bad;
    o.mask.score_ctx = &bc;
    bc.bwd = 0;
    o.impl = ATTN_IMPL_FLASH;
    CHECK_STATUS(fwd(&p, &o, 1), ATTN_E_NONFINITE);
    /* a status from the function is returned; others become INVALID */
    bc.mode = 1;
    bc.rc = ATTN_E_FORMAT;
    for (int impl = 1; impl <= 2; impl++) {
        o.impl = (attn_impl)impl;
        CHECK_STATUS(fwd(&p, &o, 0), ATTN_E_FORMAT);
        CHECK_MSG(strstr(attn_last_error(), "score_mod returned 7"),
                  "message: %s", attn_last_error());
    }
    bc.rc = 42;
    CHECK_STATUS(fwd(&p, &o, 0), ATTN_E_INVALID);
    /* a finite score past f32: an error for the flash kernel only */
    bc.mode = 2;
    o.impl = ATTN_IMPL_FLASH;
    CHECK_STATUS(fwd(&p, &o, 0), ATTN_E_NONFINITE);
    CHECK(strstr(attn_last_error(), "1e+300") != NULL);
    attn_sdpa_opts_init(&o);
    int mrc = ATTN_E_SHAPE;
    o.mask.mask_mod = u_mask_bad;
    o.mask.mask_ctx = &mrc;
    for (int impl = 1; impl <= 2; impl++) {
        o.impl = (attn_impl)impl;
        CHECK_STATUS(fwd(&p, &o, impl == 2), ATTN_E_SHAPE);
        CHECK_MSG(strstr(attn_last_error(), "mask_mod returned 2"),
                  "message: %s", attn_last_error());
    }
    /* a failing function while the block mask is built */
    uint8_t cls[64];
    attn_block_mask bm;
    CHECK_STATUS(
        attn_block_mask_build(&bm, u_mask_bad, &mrc, 1, 1, 6, 9, 3, 3, cls, 64),
        ATTN_E_SHAPE);
    /* block masks that do not fit */
    causal_ctx cc = {.Lq = 6, .Lk = 9};
    CHECK_STATUS(
        attn_block_mask_build(NULL, u_causal, &cc, 1, 1, 6, 9, 3, 3, cls, 64),
        ATTN_E_INVALID);
    CHECK_STATUS(
        attn_block_mask_build(&bm, u_causal, &cc, 1, 1, 6, 9, 3, 0, cls, 64),
        ATTN_E_INVALID);
    CHECK_STATUS(
        attn_block_mask_build(&bm, u_causal, &cc, 2, 2, 6, 9, 1, 1, cls, 64),
        ATTN_E_SHAPE);
    CHECK(strstr(attn_last_error(), "n_cls") != NULL);
    CHECK_STATUS(
        attn_block_mask_build(&bm, u_causal, &cc, 2, 1, 6, 9, 3, 3, cls, 64),
        ATTN_OK);
    attn_mask m;
    attn_mask_init(&m);
    m.block_mask = &bm;
    CHECK_STATUS(attn_mask_check(&m, 2, 2, 6, 9), ATTN_E_INVALID);
    m.mask_mod = u_none;
    CHECK_STATUS(attn_mask_check(&m, 2, 2, 6, 9), ATTN_E_INVALID);
    m.mask_mod = u_causal;
    CHECK_STATUS(attn_mask_check(&m, 2, 2, 6, 9), ATTN_E_INVALID); /* ctx */
    m.mask_ctx = &cc;
    CHECK_STATUS(attn_mask_check(&m, 2, 2, 6, 9), ATTN_OK);
    CHECK_STATUS(attn_mask_check(&m, 3, 2, 6, 9), ATTN_E_SHAPE);
    CHECK_STATUS(attn_mask_check(&m, 2, 2, 7, 9), ATTN_E_SHAPE);
    CHECK(strstr(attn_last_error(), "(2, 1, 6, 9)") != NULL);
    CHECK_STATUS(attn_mask_check(&m, 2, 2, 6, 8), ATTN_E_SHAPE);
    attn_block_mask bad = bm;
    bad.nk = 2;
    m.block_mask = &bad;
    CHECK_STATUS(attn_mask_check(&m, 2, 2, 6, 9), ATTN_E_SHAPE);
    bad = bm;
    bad.cls = NULL;
    CHECK_STATUS(attn_mask_check(&m, 2, 2, 6, 9), ATTN_E_INVALID);
    int64_t n;
    CHECK_STATUS(attn_block_mask_size(1, 1, 0, 5, 1, 1, &n), ATTN_E_INVALID);
    CHECK_STATUS(attn_block_mask_size(1, 1, 5, 5, 1, 1, NULL), ATTN_E_INVALID);
    CHECK_STATUS(attn_block_mask_size(INT64_MAX / 2, 4, 5, 5, 1, 1, &n),
                 ATTN_E_NOMEM);
    /* attn_mask_visible asks mask_mod about the one pair */
    attn_mask_init(&m);
    m.mask_mod = u_causal;
    m.mask_ctx = &cc;
    CHECK(attn_mask_visible(&m, 0, 0, 2, 2, 6, 9) == 1);
    CHECK(attn_mask_visible(&m, 0, 0, 2, 3, 6, 9) == 0);
    /* additive attention cannot call them: refused, named */
    attn_additive_config ac = {4, 4, 4, 3, 1, 0};
    float x[64] = {0}, ws[4096], out[64];
    attn_sdpa_opts_init(&o);
    o.mask.mask_mod = u_none;
    CHECK_STATUS(
        attn_additive_forward(&ac, x, 1, 2, 2, x, x, x, &o, out, NULL, ws),
        ATTN_E_UNSUPPORTED);
    CHECK(strstr(attn_last_error(), "mask_mod") != NULL);
    prob_free(&p);
}

/* ---- thread counts -------------------------------------------------------- */

static void test_threads(void) {
    const int64_t bsh[4] = {2, 1, 129, 70};
    prob p;
    prob_make(&p, 2, 4, 2, 129, 70, 8, bsh, 21);
    double slopes[4] = {0.3, 0.2, 0.1, 0.05};
    alibi_ctx ac = {slopes, 1, 0, 129, 70};
    causal_ctx cc = {.br = 1, .Lq = 129, .Lk = 70};
    int64_t n;
    CHECK_STATUS(attn_block_mask_size(1, 1, 129, 70, 16, 8, &n), ATTN_OK);
    uint8_t *cls = zalloc((size_t)n);
    attn_block_mask bm;
    CHECK_STATUS(
        attn_block_mask_build(&bm, u_causal, &cc, 1, 1, 129, 70, 16, 8, cls, n),
        ATTN_OK);
    attn_sdpa_opts o;
    attn_sdpa_opts_init(&o);
    o.mask.score_mod = u_alibi;
    o.mask.score_ctx = &ac;
    o.mask.mask_mod = u_causal;
    o.mask.mask_ctx = &cc;
    o.mask.block_mask = &bm;
    o.mask.softcap = 3.0;
    attn__flash_bq_override = 32;
    attn__flash_bk_override = 16;
    result r[3];
    for (int t = 0; t < 3; t++) run(&p, &o, ATTN_IMPL_FLASH, t + 1, &r[t]);
    attn__flash_bq_override = attn__flash_bk_override = 0;
    const size_t no = (size_t)2 * 4 * 129 * 8, nk = (size_t)2 * 2 * 70 * 8;
    const size_t nw = (size_t)2 * 4 * 129 * 70, nb = (size_t)2 * 129 * 70;
    for (int t = 1; t < 3; t++) {
        CHECK_STATUS(r[t].bst, ATTN_OK);
        CHECK(memcmp(r[t].out, r[0].out, no * 8) == 0);
        CHECK(memcmp(r[t].w, r[0].w, nw * 8) == 0);
        CHECK(memcmp(r[t].lse, r[0].lse, no / 8 * 4) == 0);
        CHECK(memcmp(r[t].dq, r[0].dq, no * 8) == 0);
        CHECK(memcmp(r[t].dk, r[0].dk, nk * 8) == 0);
        CHECK(memcmp(r[t].dv, r[0].dv, nk * 8) == 0);
        CHECK(memcmp(r[t].db, r[0].db, nb * 8) == 0);
    }
    /* and they agree with the reference */
    result rr;
    run(&p, &o, ATTN_IMPL_REF, 0, &rr);
    agree(&p, &r[0], &rr, floor_f32(&p), 1e-4 * (1 + sqrt(70.0)),
          "threads case: flash vs ref");
    for (int t = 0; t < 3; t++) result_free(&r[t]);
    result_free(&rr);
    free(cls);
    prob_free(&p);
}

/* ---- a non-additive score_mod: gradient check in double -------------------- */

static void test_gradcheck(void) {
    const int64_t bsh[4] = {1, 2, 5, 7};
    prob p;
    prob_make(&p, 1, 2, 1, 5, 7, 3, bsh, 1234);
    for (size_t i = 0; i < 5 * 2 * 3; i++) p.q[i] *= 2; /* the cap bites */
    double cap = 1.3;
    causal_ctx cc = {.br = 1, .Lq = 5, .Lk = 7};
    attn_sdpa_opts o;
    attn_sdpa_opts_init(&o);
    o.impl = ATTN_IMPL_REF;
    o.mask.score_mod = u_cap;
    o.mask.score_ctx = &cap;
    o.mask.mask_mod = u_causal;
    o.mask.mask_ctx = &cc;
    o.mask.softcap = 2.0; /* the built-in cap first, the user's after bias */
    result r;
    run(&p, &o, ATTN_IMPL_REF, 0, &r);
    CHECK_STATUS(r.bst, ATTN_OK);
    double out[2 * 5 * 3];
    attn_tensor Q = attn_tensor_4d(p.q, ATTN_F64, 1, 2, 5, 3);
    attn_tensor K = attn_tensor_4d(p.k, ATTN_F64, 1, 1, 7, 3);
    attn_tensor V = attn_tensor_4d(p.v, ATTN_F64, 1, 1, 7, 3);
    attn_tensor O = attn_tensor_4d(out, ATTN_F64, 1, 2, 5, 3);
    attn_tensor Bt = attn_tensor_4d(p.bias, ATTN_F64, 1, 2, 5, 7);
    o.mask.bias = &Bt;
    double *xs[4] = {p.q, p.k, p.v, p.bias};
    const double *gr[4] = {r.dq, r.dk, r.dv, r.db};
    const int ns[4] = {30, 21, 21, 70};
    const double h = 1e-6;
    double worst = 0;
    for (int a = 0; a < 4; a++)
        for (int t = 0; t < ns[a]; t++) {
            double keep = xs[a][t], l[2];
            for (int sgn = 0; sgn < 2; sgn++) {
                xs[a][t] = keep + (sgn ? -h : h);
                CHECK_STATUS(attn_sdpa_forward(&Q, &K, &V, &o, &O, NULL, NULL),
                             ATTN_OK);
                l[sgn] = 0;
                for (int u = 0; u < 30; u++) l[sgn] += p.g[u] * out[u];
            }
            xs[a][t] = keep;
            double fd = (l[0] - l[1]) / (2 * h), e = fabs(fd - gr[a][t]);
            if (e > worst) worst = e;
            CHECK_MSG(e <= 1e-7 * (1 + fabs(fd)),
                      "grad %d[%d]: fd %.10g analytic %.10g", a, t, fd,
                      gr[a][t]);
        }
    printf("gradcheck user cap: worst %.3g\n", worst);
    result_free(&r);
    prob_free(&p);
}

/* ---- dbias with soft-capping (and a score_mod), flash against ref ---------- */

static void test_dbias_softcap(void) {
    static const int sizes[][2] = {
        {1, 1}, {3, 3}, {17, 5}, {129, 129}, {33, 70}};
    unsigned long long seed = 400;
    double ucap = 2.5;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int shape = 0; shape < 4; shape++) {
            const int Lq = sizes[s][0], Lk = sizes[s][1];
            const int64_t shapes[4][4] = {
                {2, 3, Lq, Lk}, {1, 3, 1, Lk}, {2, 1, Lq, Lk}, {1, 1, Lq, 1}};
            prob p;
            prob_make(&p, 2, 3, shape == 2 ? 1 : 3, Lq, Lk, 6, shapes[shape],
                      seed++);
            attn_sdpa_opts o;
            attn_sdpa_opts_init(&o);
            o.mask.softcap = 1.5 + shape;
            o.mask.causal = shape % 2;
            if (shape == 3) { /* and a user function on top */
                o.mask.score_mod = u_cap;
                o.mask.score_ctx = &ucap;
            }
            result rr, rf;
            run(&p, &o, ATTN_IMPL_REF, 0, &rr);
            run(&p, &o, ATTN_IMPL_FLASH, 0, &rf);
            agree(&p, &rf, &rr, floor_f32(&p) * sqrt(6.0),
                  1e-4 * (1 + sqrt((double)Lk)), "dbias + softcap");
            result_free(&rr), result_free(&rf);
            prob_free(&p);
        }
}

/* ---- a user soft-cap gives the built-in's results (no bias, no ALiBi) ----- */

static void test_user_cap(void) {
    prob p;
    prob_make(&p, 1, 2, 2, 17, 33, 8, NULL, 8);
    for (size_t i = 0; i < 2 * 17 * 8; i++) p.qf[i] *= 2, p.q[i] *= 2;
    double cap = 1.7;
    attn_sdpa_opts bi, us;
    attn_sdpa_opts_init(&bi);
    bi.mask.causal = 1;
    us = bi;
    bi.mask.softcap = cap;
    us.mask.score_mod = u_cap;
    us.mask.score_ctx = &cap;
    result rb, ru, fu;
    run(&p, &bi, ATTN_IMPL_REF, 0, &rb);
    run(&p, &us, ATTN_IMPL_REF, 0, &ru);
    run(&p, &us, ATTN_IMPL_FLASH, 0, &fu);
    agree(&p, &ru, &rb, 1e-12, 1e-6, "ref: user cap vs built-in");
    agree(&p, &fu, &rb, floor_f32(&p), 1e-4 * (1 + sqrt(33.0)),
          "user cap: flash vs ref");
    result_free(&rb), result_free(&ru), result_free(&fu);
    prob_free(&p);
}

/* ---- attn_sdpa_weight_tiles ------------------------------------------------ */

typedef struct {
    float *w;
    int64_t Lq, Lk;
} tiles_ctx;

static int take_tile(void *user, int64_t b, int64_t h, int64_t q0, int64_t nq,
                     int64_t k0, int64_t nk, const float *w, int64_t ldw) {
    tiles_ctx *t = user;
    (void)b;
    for (int64_t r = 0; r < nq; r++)
        for (int64_t c = 0; c < nk; c++)
            t->w[(h * t->Lq + q0 + r) * t->Lk + k0 + c] = w[r * ldw + c];
    return 0;
}

/* The weight tiles under a user causal mask (with a block mask) and a user
 * ALiBi are the built-ins' weights; a NaN stops them with the error. */
static void test_weight_tiles(void) {
    enum { H = 2, L = 40, D = 4 };
    prob p;
    prob_make(&p, 1, H, H, L, L, D, NULL, 17);
    double slopes[H] = {0.4, 0.2};
    alibi_ctx ac = {slopes, 0, 0, L, L};
    causal_ctx cc = {.Lq = L, .Lk = L};
    uint8_t cls[16];
    attn_block_mask bm;
    CHECK_STATUS(
        attn_block_mask_build(&bm, u_causal, &cc, 1, 1, L, L, 16, 16, cls, 16),
        ATTN_OK);
    attn_sdpa_opts us, bi;
    attn_sdpa_opts_init(&us);
    us.mask.score_mod = u_alibi;
    us.mask.score_ctx = &ac;
    us.mask.mask_mod = u_causal;
    us.mask.mask_ctx = &cc;
    us.mask.block_mask = &bm;
    attn_sdpa_opts_init(&bi);
    bi.mask.causal = 1;
    bi.mask.alibi = ATTN_ALIBI_CAUSAL;
    bi.mask.alibi_slopes = slopes;
    bi.mask.n_alibi_slopes = H;
    attn__flash_bq_override = attn__flash_bk_override = 16;
    result ru, rb;
    run(&p, &us, ATTN_IMPL_FLASH, 0, &ru);
    run(&p, &bi, ATTN_IMPL_FLASH, 0, &rb);
    attn_tensor Q = attn_tensor_4d(p.qf, ATTN_F32, 1, H, L, D);
    attn_tensor K = attn_tensor_4d(p.kf, ATTN_F32, 1, H, L, D);
    tiles_ctx t = {zalloc((size_t)H * L * L * 4), L, L};
    CHECK_STATUS(attn_sdpa_weight_tiles(&Q, &K, ru.lse, &us, take_tile, &t),
                 ATTN_OK);
    double e = 0;
    for (int x = 0; x < H * L * L; x++) e = fmax(e, fabs(t.w[x] - rb.w[x]));
    CHECK_MSG(e < 1e-5, "weight tiles: user vs built-in %g", e);
    bad_ctx bc = {.mode = 0, .b = 0, .h = 1, .i = 30, .j = 5};
    us.mask.score_mod = u_bad;
    us.mask.score_ctx = &bc;
    CHECK_STATUS(attn_sdpa_weight_tiles(&Q, &K, ru.lse, &us, take_tile, &t),
                 ATTN_E_NONFINITE);
    attn__flash_bq_override = attn__flash_bk_override = 0;
    free(t.w);
    result_free(&ru), result_free(&rb);
    prob_free(&p);
}

/* ---- the decode kernel ----------------------------------------------------- */

/* A striped mask: key j hidden when j % 3 == 1, unless it is one of the
 * 40 first keys. */
static int u_stripes(void *ctx, int64_t b, int64_t h, int64_t i, int64_t j0,
                     int64_t n, uint8_t *keep) {
    (void)ctx, (void)b, (void)h, (void)i;
    for (int64_t t = 0; t < n; t++)
        if ((j0 + t) % 3 == 1 && j0 + t >= 40) keep[t] = 0;
    return 0;
}

/* attn_sdpa_cached (kernel and its reference) with user functions against
 * attn_sdpa_forward's reference over the same keys. */
static void test_decode(void) {
    enum { B = 2, HK = 2, H = 4, D = 8, CAP = 300, LQ = 3 };
    const int64_t lens[B] = {290, 37};
    float *k = calloc((size_t)B * HK * CAP * D, 4),
          *v = calloc((size_t)B * HK * CAP * D, 4);
    float q[B * H * LQ * D], o1[B * H * LQ * D], o2[B * H * LQ * D],
        o3[B * H * LQ * D];
    float l1[B * H * LQ], l2[B * H * LQ], l3[B * H * LQ];
    unsigned long long s = 31;
    for (int i = 0; i < B * HK * CAP * D; i++) {
        k[i] = (float)(2 * test_rand(&s));
        v[i] = (float)test_rand(&s);
    }
    for (int i = 0; i < B * H * LQ * D; i++) q[i] = (float)(2 * test_rand(&s));
    attn_kv_cache_config cfg;
    attn_kv_cache_config_init(&cfg);
    cfg.batch = B;
    cfg.kv_heads = HK;
    cfg.capacity = CAP;
    cfg.head_dim = D;
    attn_kv_cache *cache = NULL;
    CHECK_STATUS(attn_kv_cache_create(&cfg, &cache), ATTN_OK);
    attn_tensor K = attn_tensor_4d(k, ATTN_F32, B, HK, CAP, D);
    attn_tensor V = attn_tensor_4d(v, ATTN_F32, B, HK, CAP, D);
    CHECK_STATUS(attn_kv_cache_append(cache, &K, &V, lens), ATTN_OK);
    attn_tensor Q = attn_tensor_4d(q, ATTN_F32, B, H, LQ, D);
    attn_tensor O1 = attn_tensor_4d(o1, ATTN_F32, B, H, LQ, D);
    attn_tensor O2 = attn_tensor_4d(o2, ATTN_F32, B, H, LQ, D);
    attn_tensor O3 = attn_tensor_4d(o3, ATTN_F32, B, H, LQ, D);
    double cap = 1.5;
    attn_sdpa_opts op;
    attn_sdpa_opts_init(&op);
    op.mask.causal = 1;
    op.mask.align = ATTN_ALIGN_BOTTOM_RIGHT;
    op.mask.mask_mod = u_stripes;
    op.mask.score_mod = u_cap;
    op.mask.score_ctx = &cap;
    CHECK_STATUS(attn_sdpa_cached(&Q, cache, &op, &O1, l1), ATTN_OK);
    attn_sdpa_opts rf = op;
    rf.impl = ATTN_IMPL_REF;
    CHECK_STATUS(attn_sdpa_cached(&Q, cache, &rf, &O2, l2), ATTN_OK);
    rf.mask.key_lengths = lens;
    CHECK_STATUS(attn_sdpa_forward(&Q, &K, &V, &rf, &O3, NULL, l3), ATTN_OK);
    double e1 = 0, e2 = 0, el = 0;
    for (int i = 0; i < B * H * LQ * D; i++) {
        e1 = fmax(e1, fabs(o1[i] - o3[i]));
        e2 = fmax(e2, fabs(o2[i] - o3[i]));
    }
    for (int i = 0; i < B * H * LQ; i++)
        el = fmax(el, fmax(fabs(l1[i] - l3[i]), fabs(l2[i] - l3[i])));
    CHECK_MSG(e1 < 2e-5 && e2 < 1e-6 && el < 1e-4,
              "decode: kernel %g, reference %g, lse %g", e1, e2, el);
    /* the same without the user functions differs (they did something) */
    attn_sdpa_opts plain = op;
    plain.mask.mask_mod = NULL;
    plain.mask.score_mod = NULL;
    CHECK_STATUS(attn_sdpa_cached(&Q, cache, &plain, &O2, l2), ATTN_OK);
    double d = 0;
    for (int i = 0; i < B * H * LQ * D; i++) d = fmax(d, fabs(o1[i] - o2[i]));
    CHECK(d > 1e-3);
    /* errors: a NaN, a status, a block mask */
    bad_ctx bc = {.mode = 0, .b = 1, .h = 2, .i = 1, .j = 20};
    op.mask.score_mod = u_bad;
    op.mask.score_ctx = &bc;
    for (int impl = 0; impl <= 1; impl++) {
        op.impl = impl ? ATTN_IMPL_REF : ATTN_IMPL_AUTO;
        CHECK_STATUS(attn_sdpa_cached(&Q, cache, &op, &O1, l1),
                     ATTN_E_NONFINITE);
        CHECK_MSG(strstr(attn_last_error(), "(1, 2, 1, 20)") != NULL,
                  "message: %s", attn_last_error());
    }
    bc.mode = 1;
    bc.rc = ATTN_E_IO;
    CHECK_STATUS(attn_sdpa_cached(&Q, cache, &op, &O1, l1), ATTN_E_IO);
    op.impl = ATTN_IMPL_AUTO;
    CHECK_STATUS(attn_sdpa_cached(&Q, cache, &op, &O1, l1), ATTN_E_IO);
    causal_ctx cc = {.Lq = LQ, .Lk = CAP};
    uint8_t cls[4];
    attn_block_mask bm;
    CHECK_STATUS(attn_block_mask_build(&bm, u_causal, &cc, 1, 1, LQ, CAP, 4,
                                       128, cls, 4),
                 ATTN_OK);
    op.mask.score_mod = NULL;
    op.mask.mask_mod = u_causal;
    op.mask.mask_ctx = &cc;
    op.mask.block_mask = &bm;
    CHECK_STATUS(attn_sdpa_cached(&Q, cache, &op, &O1, l1), ATTN_E_UNSUPPORTED);
    attn_kv_cache_free(cache);
    free(k);
    free(v);
}

int main(void) {
    test_weight_tiles();
    test_decode();
    test_alibi();
    test_causal();
    test_calls();
    test_hide_all();
    test_errors();
    test_threads();
    test_gradcheck();
    test_dbias_softcap();
    test_user_cap();
    return check_done("test_user_mod");
}
