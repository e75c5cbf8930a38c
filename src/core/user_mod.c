/* User functions of the mask descriptor (score_mod, mask_mod) and the
 * block mask built from a mask function: their checks, the class of a tile
 * under them, and the row helpers every kernel calls, which keep the
 * contract of attn_score_mod_fn in one place (masked entries stay -inf,
 * NaN / +inf is an error, the first failure is recorded for the caller).
 * The contract itself is documented in include/attn.h. */
#include "user_mod.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* Keys per call of a user function on f32 rows (the segment is converted
 * through a stack buffer of doubles). */
#define UFN_CHUNK 64
/* Keys per call of mask_mod on flash rows (a stack buffer of flags). */
#define MASK_CHUNK 256

/* ---- the block mask ----------------------------------------------------- */

static int64_t ceil_div(int64_t a, int64_t b) { return (a - 1) / b + 1; }

attn_status attn_block_mask_size(int64_t B, int64_t H, int64_t Lq, int64_t Lk,
                                 int64_t block_q, int64_t block_k, int64_t *n) {
    if (!n) return attn__fail(ATTN_E_INVALID, "block mask size: n is NULL");
    if (B < 1 || H < 1 || Lq < 1 || Lk < 1 || block_q < 1 || block_k < 1)
        return attn__fail(ATTN_E_INVALID,
                          "block mask: sizes must be >= 1, not B = %lld, H = "
                          "%lld, Lq = %lld, Lk = %lld, block_q = %lld, "
                          "block_k = %lld",
                          (long long)B, (long long)H, (long long)Lq,
                          (long long)Lk, (long long)block_q,
                          (long long)block_k);
    int64_t x;
    if (!attn__mul_i64(B, H, &x) ||
        !attn__mul_i64(x, ceil_div(Lq, block_q), &x) ||
        !attn__mul_i64(x, ceil_div(Lk, block_k), &x))
        return attn__fail(ATTN_E_NOMEM,
                          "block mask: the block count overflows");
    *n = x;
    return ATTN_OK;
}

/* Records a failure in e (the first one wins) and raises its stop flag. */
static int fail(attn__ufn_err *e, int what, int rc, int64_t b, int64_t h,
                int64_t i, int64_t j, double value) {
#pragma omp critical /* unnamed: a named one exports a symbol */
    {
        if (!e->what) {
            e->what = what;
            e->rc = rc;
            e->b = b;
            e->h = h;
            e->i = i;
            e->j = j;
            e->value = value;
        }
    }
#pragma omp atomic write
    e->stop = 1;
    return 1;
}

int attn__ufn_failed(attn__ufn_err *e) {
    int s;
#pragma omp atomic read
    s = e->stop;
    return s;
}

attn_status attn__ufn_status(const attn__ufn_err *e) {
    if (!e->what) return ATTN_OK;
    const long long b = e->b, h = e->h, i = e->i, j = e->j;
    if (e->what == 2 || e->what == 3)
        return attn__fail(ATTN_E_NONFINITE,
                          "mask.score_mod gave %s %g at (b, h, i, j) = "
                          "(%lld, %lld, %lld, %lld)%s",
                          e->what == 2 ? "the score" : "the derivative",
                          e->value, b, h, i, j,
                          e->what == 2 ? " (only -inf may be given, to mask; "
                                         "finite scores must fit in f32 for "
                                         "the flash kernels)"
                                       : "");
    attn_status st = e->rc > 0 && e->rc <= ATTN_E_NONFINITE ? (attn_status)e->rc
                                                            : ATTN_E_INVALID;
    return attn__fail(st,
                      "mask.%s returned %d on the row segment at (b, h, i, "
                      "j0) = (%lld, %lld, %lld, %lld)",
                      e->what == 1 ? "score_mod" : "mask_mod", e->rc, b, h, i,
                      j);
}

attn_status attn_block_mask_build(attn_block_mask *bm, attn_mask_mod_fn fn,
                                  void *ctx, int64_t B, int64_t H, int64_t Lq,
                                  int64_t Lk, int64_t block_q, int64_t block_k,
                                  uint8_t *cls, int64_t n_cls) {
    if (!bm || !fn || !cls)
        return attn__fail(ATTN_E_INVALID, "block mask: %s is NULL",
                          !bm   ? "bm"
                          : !fn ? "fn"
                                : "cls");
    int64_t n;
    attn_status st = attn_block_mask_size(B, H, Lq, Lk, block_q, block_k, &n);
    if (st) return st;
    if (n_cls < n)
        return attn__fail(ATTN_E_SHAPE,
                          "block mask: cls has %lld entries (n_cls) but %lld "
                          "blocks are needed",
                          (long long)n_cls, (long long)n);
    uint8_t *keep = attn__alloc((size_t)block_k, 1, "block mask row");
    if (!keep) return ATTN_E_NOMEM;
    memset(bm, 0, sizeof *bm);
    const int64_t nq = ceil_div(Lq, block_q), nk = ceil_div(Lk, block_k);
    attn__ufn_err e;
    memset(&e, 0, sizeof e);
    /* bit 0: a kept pair seen, bit 1: a hidden pair seen */
    memset(cls, 0, (size_t)n);
    for (int64_t b = 0; b < B && !e.what; b++)
        for (int64_t h = 0; h < H && !e.what; h++)
            for (int64_t i = 0; i < Lq && !e.what; i++) {
                uint8_t *row = cls + ((b * H + h) * nq + i / block_q) * nk;
                for (int64_t bj = 0; bj < nk; bj++) {
                    const int64_t j0 = bj * block_k;
                    const int64_t len = Lk - j0 < block_k ? Lk - j0 : block_k;
                    memset(keep, 1, (size_t)len);
                    int rc = fn(ctx, b, h, i, j0, len, keep);
                    if (rc) {
                        fail(&e, 4, rc, b, h, i, j0, 0);
                        break;
                    }
                    for (int64_t t = 0; t < len; t++)
                        row[bj] |= keep[t] ? 1 : 2;
                }
            }
    attn__free(keep);
    if (e.what) return attn__ufn_status(&e);
    for (int64_t x = 0; x < n; x++)
        cls[x] = cls[x] == 1   ? ATTN_BLOCK_FULL
                 : cls[x] == 2 ? ATTN_BLOCK_EMPTY
                               : ATTN_BLOCK_PARTIAL;
    bm->B = B;
    bm->H = H;
    bm->Lq = Lq;
    bm->Lk = Lk;
    bm->block_q = block_q;
    bm->block_k = block_k;
    bm->nq = nq;
    bm->nk = nk;
    bm->cls = cls;
    bm->mask_mod = fn;
    bm->mask_ctx = ctx;
    return ATTN_OK;
}

attn_status attn__user_mod_check(const attn_mask *m, int64_t B, int64_t H,
                                 int64_t Lq, int64_t Lk) {
    const attn_block_mask *bm = m->block_mask;
    if (!bm) return ATTN_OK;
    if (!m->mask_mod)
        return attn__fail(ATTN_E_INVALID,
                          "mask.block_mask is given but mask.mask_mod is NULL");
    if (bm->mask_mod != m->mask_mod || bm->mask_ctx != m->mask_ctx)
        return attn__fail(ATTN_E_INVALID,
                          "mask.block_mask was built from another mask "
                          "function or context than mask.mask_mod / "
                          "mask.mask_ctx");
    if (!bm->cls || bm->block_q < 1 || bm->block_k < 1)
        return attn__fail(ATTN_E_INVALID,
                          "mask.block_mask is not built (cls NULL or block "
                          "sizes < 1): use attn_block_mask_build");
    if ((bm->B != 1 && bm->B != B) || (bm->H != 1 && bm->H != H) ||
        bm->Lq != Lq || bm->Lk != Lk)
        return attn__fail(ATTN_E_SHAPE,
                          "mask.block_mask was built for (B, H, Lq, Lk) = "
                          "(%lld, %lld, %lld, %lld) but the attention has "
                          "(%lld, %lld, %lld, %lld) (B and H may be 1)",
                          (long long)bm->B, (long long)bm->H, (long long)bm->Lq,
                          (long long)bm->Lk, (long long)B, (long long)H,
                          (long long)Lq, (long long)Lk);
    if (bm->nq != ceil_div(Lq, bm->block_q) ||
        bm->nk != ceil_div(Lk, bm->block_k))
        return attn__fail(ATTN_E_SHAPE,
                          "mask.block_mask has %lld x %lld blocks but blocks "
                          "of %lld x %lld over %lld x %lld need %lld x %lld",
                          (long long)bm->nq, (long long)bm->nk,
                          (long long)bm->block_q, (long long)bm->block_k,
                          (long long)Lq, (long long)Lk,
                          (long long)ceil_div(Lq, bm->block_q),
                          (long long)ceil_div(Lk, bm->block_k));
    return ATTN_OK;
}

/* ---- classes ------------------------------------------------------------ */

/* The row of cells of block row bi of (b, h). */
static const uint8_t *cell_row(const attn_block_mask *bm, int64_t b, int64_t h,
                               int64_t bi) {
    const int64_t bb = bm->B == 1 ? 0 : b, hh = bm->H == 1 ? 0 : h;
    return bm->cls + ((bb * bm->H + hh) * bm->nq + bi) * bm->nk;
}

attn__tile_class attn__user_classify(const attn_mask *m, int64_t b, int64_t h,
                                     int64_t i0, int64_t i1, int64_t j0,
                                     int64_t j1) {
    if (!m->mask_mod) return ATTN__TILE_FULL;
    const attn_block_mask *bm = m->block_mask;
    if (!bm) return ATTN__TILE_PARTIAL;
    int any = 0, all = 1;
    for (int64_t bi = i0 / bm->block_q; bi <= (i1 - 1) / bm->block_q; bi++) {
        const uint8_t *row = cell_row(bm, b, h, bi);
        for (int64_t bj = j0 / bm->block_k; bj <= (j1 - 1) / bm->block_k;
             bj++) {
            any |= row[bj] != ATTN_BLOCK_EMPTY;
            all &= row[bj] == ATTN_BLOCK_FULL;
        }
    }
    return !any ? ATTN__TILE_EMPTY : all ? ATTN__TILE_FULL : ATTN__TILE_PARTIAL;
}

void attn__block_mask_hull(const attn_mask *m, int64_t b, int64_t h, int64_t i0,
                           int64_t i1, int64_t *lo, int64_t *hi) {
    const attn_block_mask *bm = m->block_mask;
    if (!bm || !m->mask_mod || *hi <= *lo || i1 <= i0) return;
    const int64_t c0 = *lo / bm->block_k, c1 = (*hi - 1) / bm->block_k;
    int64_t first = c1 + 1, last = c0 - 1;
    for (int64_t bi = i0 / bm->block_q; bi <= (i1 - 1) / bm->block_q; bi++) {
        const uint8_t *row = cell_row(bm, b, h, bi);
        for (int64_t bj = c0; bj <= c1; bj++)
            if (row[bj] != ATTN_BLOCK_EMPTY) {
                if (bj < first) first = bj;
                if (bj > last) last = bj;
            }
    }
    if (last < first) {
        *hi = *lo;
        return;
    }
    if (first * bm->block_k > *lo) *lo = first * bm->block_k;
    if ((last + 1) * bm->block_k < *hi) *hi = (last + 1) * bm->block_k;
}

/* ---- rows --------------------------------------------------------------- */

int attn__mask_mod_keep(const attn_mask *m, int64_t b, int64_t h, int64_t i,
                        int64_t j0, int64_t n, uint8_t *keep,
                        attn__ufn_err *e) {
    if (n <= 0) return 0;
    memset(keep, 1, (size_t)n);
    if (!m->mask_mod) return 0;
    int rc = m->mask_mod(m->mask_ctx, b, h, i, j0, n, keep);
    return rc ? fail(e, 4, rc, b, h, i, j0, 0) : 0;
}

/* mask_mod on keys [j0, j1) of a flash row, s[0] being key j0. */
static int ask_mask(const attn_mask *m, int64_t b, int64_t h, int64_t i,
                    int64_t j0, int64_t j1, float *s, attn__ufn_err *e) {
    uint8_t keep[MASK_CHUNK];
    for (int64_t j = j0; j < j1; j += MASK_CHUNK) {
        const int64_t n = j1 - j < MASK_CHUNK ? j1 - j : MASK_CHUNK;
        if (attn__mask_mod_keep(m, b, h, i, j, n, keep, e)) return 1;
        for (int64_t t = 0; t < n; t++)
            if (!keep[t]) s[j - j0 + t] = -INFINITY;
    }
    return 0;
}

int attn__mask_mod_row_f(const attn_mask *m, int64_t b, int64_t h, int64_t i,
                         int64_t lo, int64_t hi, float *s, attn__ufn_err *e) {
    if (!m->mask_mod || hi <= lo) return 0;
    const attn_block_mask *bm = m->block_mask;
    if (!bm) return ask_mask(m, b, h, i, lo, hi, s, e);
    const uint8_t *row = cell_row(bm, b, h, i / bm->block_q);
    for (int64_t j = lo; j < hi;) {
        const int64_t bj = j / bm->block_k;
        int64_t end = (bj + 1) * bm->block_k;
        if (end > hi) end = hi;
        if (row[bj] == ATTN_BLOCK_EMPTY) {
            for (int64_t t = j; t < end; t++) s[t - lo] = -INFINITY;
        } else if (row[bj] == ATTN_BLOCK_PARTIAL) {
            if (ask_mask(m, b, h, i, j, end, s + (j - lo), e)) return 1;
        }
        j = end;
    }
    return 0;
}

/* The new score x of a visible entry (b, h, i, j) as f32 in *xf: NaN, +inf
 * and finite values past the f32 range are errors (converting them would
 * be undefined); values below -FLT_MAX mask, as -inf does. */
static int to_f32(attn__ufn_err *e, double x, float *xf, int64_t b, int64_t h,
                  int64_t i, int64_t j) {
    if (isnan(x) || x > FLT_MAX) return fail(e, 2, 0, b, h, i, j, x);
    *xf = x < -FLT_MAX ? -INFINITY : (float)x;
    return 0;
}

int attn__score_mod_row_f(const attn_mask *m, int64_t b, int64_t h, int64_t i,
                          int64_t j0, int64_t n, float *s, float *dmod,
                          attn__ufn_err *e) {
    if (!m->score_mod) return 0;
    double x[UFN_CHUNK], dx[UFN_CHUNK];
    for (int64_t t0 = 0; t0 < n; t0 += UFN_CHUNK) {
        const int64_t c = n - t0 < UFN_CHUNK ? n - t0 : UFN_CHUNK;
        for (int64_t t = 0; t < c; t++) {
            x[t] = s[t0 + t];
            dx[t] = 1.0;
        }
        int rc = m->score_mod(m->score_ctx, b, h, i, j0 + t0, c, x,
                              dmod ? dx : NULL);
        if (rc) return fail(e, 1, rc, b, h, i, j0 + t0, 0);
        for (int64_t t = 0; t < c; t++) {
            float *st = s + t0 + t;
            if (*st == -INFINITY) { /* masked: stays so, no gradient */
                if (dmod) dmod[t0 + t] = 0.0f;
                continue;
            }
            float xf;
            if (to_f32(e, x[t], &xf, b, h, i, j0 + t0 + t)) return 1;
            *st = xf;
            if (dmod) {
                if (!(fabs(dx[t]) <= FLT_MAX))
                    return fail(e, 3, 0, b, h, i, j0 + t0 + t, dx[t]);
                dmod[t0 + t] = xf == -INFINITY ? 0.0f : (float)dx[t];
            }
        }
    }
    return 0;
}

int attn__score_mod_row_d(const attn_mask *m, int64_t b, int64_t h, int64_t i,
                          int64_t j0, int64_t n, double *s, double *dmod,
                          double *old, attn__ufn_err *e) {
    if (!m->score_mod || n <= 0) return 0;
    /* the function writes in place: the masked entries are restored */
    for (int64_t t = 0; t < n && dmod; t++) dmod[t] = 1.0;
    memcpy(old, s, (size_t)n * sizeof(double));
    int rc = m->score_mod(m->score_ctx, b, h, i, j0, n, s, dmod);
    if (rc) return fail(e, 1, rc, b, h, i, j0, 0);
    for (int64_t t = 0; t < n; t++) {
        if (old[t] == -INFINITY) {
            s[t] = -INFINITY;
            if (dmod) dmod[t] = 0.0;
            continue;
        }
        if (isnan(s[t]) || s[t] == INFINITY)
            return fail(e, 2, 0, b, h, i, j0 + t, s[t]);
        if (dmod && !isfinite(dmod[t]))
            return fail(e, 3, 0, b, h, i, j0 + t, dmod[t]);
        if (dmod && s[t] == -INFINITY) dmod[t] = 0.0;
    }
    return 0;
}
