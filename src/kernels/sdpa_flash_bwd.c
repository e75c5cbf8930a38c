/* Flash backward of scaled dot-product attention (FlashAttention-2 style).
 *
 * It lives beside, not inside, sdpa_flash.c (the forward) to keep both
 * files small; the two share flash.h: rows as f32 (f16/bf16 converted),
 * the mask + bias pass on a score row, dropout on a row, the split of a
 * partial tile into row bands, the BLAS threading guard, and vec.h's exp.
 * P is therefore formed exactly as the forward forms it.
 *
 * With P = exp(scale Q K^T + bias - lse) recomputed tile by tile from the
 * forward's lse, Pd = P * Z / (1 - p) the weights after dropout, and
 * D_i = dO_i . O_i (= sum_j P_ij dP_ij, dropout included):
 *   dV = Pd^T dO,  dP = (dO V^T) * Z / (1 - p),  dS = P * (dP - D),
 *   dK = scale dS^T Q,  dQ = scale dS K,  dBias = dS (summed where the bias
 *   broadcasts).
 * A user score_mod multiplies dS by its dscore first; soft-capping then
 * multiplies what dQ and dK see by 1 - tanh^2, after dBias took its copy
 * (dBias is the gradient at the biased score, before the cap).
 * The pass over (batch, kv head, key tile) owns dK and dV of its keys,
 * summing over the heads of the group and all query tiles in a fixed order;
 * the pass over (batch, head, query tile) owns dQ of its rows (and dBias
 * where the bias broadcasts nowhere). When there are enough (batch, kv head)
 * pairs for the threads, one pass over them owns dK, dV and dQ at once and
 * saves recomputing S and dP; it issues the same dQ products in the same
 * order, so the bits do not change. A bias that broadcasts gets a pass over
 * the cells of dBias. No atomics; every output element is summed in one
 * fixed order: bitwise identical on any thread count.
 * bf16 q, k, v with ATTN_IMPL_FLASH_BF16 on AVX512_BF16 take the five
 * products on bf16 operands with f32 accumulation (tile_bf16.h), as
 * FlashAttention does in half precision: P, dS and the softmax statistics
 * in f32; dO, P (after dropout) and dS rounded to bf16 for their products.
 * Each product element is one fixed chain there too, so the schemes and
 * thread counts give the same bits.
 * Empty tiles (mask classification) are skipped in every pass, and partial
 * ones are cut into row bands as in the forward. Extra memory:
 * per-thread tiles and the D vector (B * H * Lq floats).
 */
#include "flash.h"
#include "tile.h"
#include "tile_bf16.h"

#include <limits.h>
#include <math.h>
#include <omp.h>
#include <string.h>

/* ---- tiles ------------------------------------------------------------- */

/* Tile sizes depend on the shapes only, never on the thread count. The
 * backward keeps five bq x bk or b x D arrays live per tile (P, dropped P,
 * dS, the K|V and Q|dO rows) against the forward's two, so its tiles are
 * half as tall and wide as the forward's (measured: 64, 128 and 192 within
 * 5% of each other at L = 2048, D = 64). */
static void bwd_tile_sizes(const attn__sdpa_dims *d, int64_t *bq, int64_t *bk) {
    int64_t t = d->Dk + d->Dv > 256 ? 64 : 128;
    *bq = d->Lq < t ? d->Lq : t;
    *bk = d->Lk < t ? d->Lk : t;
}

/* Rows in the tile that starts at x0 of an axis of length n. */
static int64_t tile_len(int64_t x0, int64_t t, int64_t n) {
    return n - x0 < t ? n - x0 : t;
}

/* Adds the f32 tile src (n x D, packed) into rows r0.. of slice (b, h). */
static void add_rows(attn_tensor *t, int64_t b, int64_t h, int64_t r0,
                     int64_t n, const float *src) {
    const int64_t D = t->shape[3];
    float *base = t->data;
    for (int64_t r = 0; r < n; r++) {
        float *row = base + attn__off(t, b, h, r0 + r, 0);
        for (int64_t c = 0; c < D; c++) row[c * t->stride[3]] += src[r * D + c];
    }
}

/* ---- per-thread workspace ---------------------------------------------- */

typedef struct {
    /* rows of the current tiles as f32 (attn__flash_rows: in place, or in
     * the buffers *b when packed/converted), with their leading dims */
    const float *q, *dout, *k, *v;
    int64_t ldq, ldo, ldk, ldv;
    float *qb, *ob, *kb, *vb; /* bq x Dk, bq x Dv, bk x Dk, bk x Dv      */
    float *kp, *vp;           /* K and V packed for the score products   */
    attn__tile_bt kt, vt;     /* the key tile's K and V as tile.h's B    */
    const float *lse, *dd;    /* lse and D of the query tile's rows      */
    float *p, *pd, *ds;       /* bq x bk: P, P after dropout, dP then dS */
    float *acc;               /* dK|dV (bk x (Dk + Dv)) or dQ (bq x Dk)  */
    float *z;                 /* bk: dropout factors of one row          */
    float *capd;              /* bk: soft-cap derivatives of one row     */
    float *dmod;              /* bk: score_mod derivatives of one row    */
    float *dsb; /* bq x bk: dS at the biased score (dbias with soft-cap) */
    attn__flash_block *blk; /* the blocks of a split tile              */
    double *bacc;           /* bq x bk: dBias sums (when dbias is asked) */
    /* the bf16 path (tile_bf16.h): Q and dO rows, staging for the key
     * tile's rows, the operands packed (K and V for the scores and dP, K
     * for dQ, Q and dO for dK and dV), dS rows, Pd^T and dS^T */
    uint16_t *hq, *ho, *hraw, *hk_nt, *hv_nt, *hk_nn, *hq_nn, *ho_nn;
    uint16_t *hds, *hpt, *hdst, *htmp;
} work;

/* Next n floats of a workspace at f (64-byte steps); with f == NULL only
 * counts them. */
static float *take(float *f, size_t *at, size_t n) {
    size_t off = attn__ws_take(at, n);
    return f ? f + off : NULL;
}

/* Next n bf16 values (two to a float) of a workspace, as take. */
static uint16_t *take16(float *f, size_t *at, size_t n) {
    return (uint16_t *)(void *)take(f, at, n / 2 + 1);
}

/* Leading dimensions of the bf16 path's operands: Q and dO rows padded to
 * an even length; rows of pairs aligned on an odd offset need two more. */
typedef struct {
    int64_t q, o, ds, t; /* Q rows, dO rows, dS rows, Pd^T and dS^T rows */
} bf16_lds;

static bf16_lds bf16_lds_of(const attn__sdpa_dims *d, int64_t bq, int64_t bk) {
    bf16_lds l = {(d->Dk + 1) & ~(int64_t)1, (d->Dv + 1) & ~(int64_t)1,
                  (bk + 3) & ~(int64_t)1, (bq + 3) & ~(int64_t)1};
    return l;
}

/* Carves one thread's workspace out of f; returns its floats (f may be
 * NULL to size it). bf16: the bf16 path's parts too. */
static size_t work_carve(work *w, float *f, int64_t bq, int64_t bk,
                         const attn__sdpa_dims *d, int bf16) {
    size_t at = 0;
    int64_t acc = bk * (d->Dk + d->Dv);
    if (bq * d->Dk > acc) acc = bq * d->Dk;
    w->qb = take(f, &at, (size_t)(bq * d->Dk));
    w->ob = take(f, &at, (size_t)(bq * d->Dv));
    w->kb = take(f, &at, (size_t)(bk * d->Dk));
    w->vb = take(f, &at, (size_t)(bk * d->Dv));
    w->kp = take(f, &at, attn__tile_nt_pack_floats(bk, d->Dk));
    w->vp = take(f, &at, attn__tile_nt_pack_floats(bk, d->Dv));
    w->p = take(f, &at, (size_t)(bq * bk));
    w->pd = take(f, &at, (size_t)(bq * bk));
    w->ds = take(f, &at, (size_t)(bq * bk));
    w->acc = take(f, &at, (size_t)acc);
    w->z = take(f, &at, (size_t)bk);
    w->capd = take(f, &at, (size_t)bk);
    w->dmod = take(f, &at, (size_t)bk);
    w->dsb = take(f, &at, (size_t)(bq * bk));
    w->blk = (attn__flash_block *)(void *)take(
        f, &at, attn__flash_blocks_floats(d, bq));
    if (bf16) {
        const bf16_lds l = bf16_lds_of(d, bq, bk);
        const int64_t D = d->Dk > d->Dv ? d->Dk : d->Dv;
        w->hq = take16(f, &at, (size_t)(bq * l.q));
        w->ho = take16(f, &at, (size_t)(bq * l.o));
        w->hraw = take16(f, &at, (size_t)(bk * D));
        w->hk_nt = take16(f, &at, attn__bf16_pack_elems(bk, d->Dk));
        w->hv_nt = take16(f, &at, attn__bf16_pack_elems(bk, d->Dv));
        w->hk_nn = take16(f, &at, attn__bf16_pack_elems(d->Dk, bk));
        w->hq_nn = take16(f, &at, attn__bf16_pack_elems(d->Dk, bq));
        w->ho_nn = take16(f, &at, attn__bf16_pack_elems(d->Dv, bq));
        w->hds = take16(f, &at, (size_t)(bq * l.ds));
        w->hpt = take16(f, &at, (size_t)(bk * l.t));
        w->hdst = take16(f, &at, (size_t)(bk * l.t));
        w->htmp = take16(f, &at, (size_t)bk);
    }
    return at;
}

/* Everything a tile computation needs to know about the call. */
typedef struct {
    const attn_tensor *q, *k, *v, *dout;
    const attn_sdpa_opts *opts;
    const attn__sdpa_dims *d;
    /* the mask's frame (attn__flash_pos): md has the full sequence's
     * lengths; local query row i and key j are i + qpos, j + kpos in it */
    attn__sdpa_dims md;
    int64_t qpos, kpos;
    const float *lse, *dvec; /* [B * H * Lq] each */
    int64_t bq, bk, nqt, nkt;
    const attn__vec_ops *vec;
    /* dBias reads w->dsb (dS before the cap's slope) instead of w->ds */
    int bias_ds;
    /* bf16 q, k, v with ATTN_IMPL_FLASH_BF16 on AVX512_BF16: the five
     * products on bf16 operands (tile_bf16.h), dO, P and dS rounded */
    int bf16;
    bf16_lds ld16;
    attn__ufn_err *err; /* the first failure of a user function */
} bwd_ctx;

/* Points w at query rows [i0, i0+nq) of head (b, h): q, dO, lse and D. */
static void load_query_tile(const bwd_ctx *c, work *w, int64_t b, int64_t h,
                            int64_t i0, int64_t nq) {
    if (!c->bf16) {
        w->q = attn__flash_rows(c->q, b, h, i0, nq, w->qb, &w->ldq);
        w->dout = attn__flash_rows(c->dout, b, h, i0, nq, w->ob, &w->ldo);
    } else {
        const attn__sdpa_dims *d = c->d;
        attn__flash_bf16_rows(c->q, b, h, i0, nq, w->hq, c->ld16.q);
        /* dO (f32) rounded to bf16, rows zero-padded to an even length */
        int64_t ldo;
        const float *go = attn__flash_rows(c->dout, b, h, i0, nq, w->ob, &ldo);
        for (int64_t r = 0; r < nq; r++) {
            uint16_t *o = w->ho + r * c->ld16.o;
            o[c->ld16.o - 1] = 0;
            attn__bf16_from_f32(go + r * ldo, d->Dv, o);
        }
        attn__bf16_pack_nn(nq, d->Dk, w->hq, c->ld16.q, w->hq_nn);
        attn__bf16_pack_nn(nq, d->Dv, w->ho, c->ld16.o, w->ho_nn);
    }
    const int64_t base = (b * c->d->H + h) * c->d->Lq + i0;
    w->lse = c->lse + base;
    w->dd = c->dvec + base;
}

static void load_key_tile(const bwd_ctx *c, work *w, int64_t b, int64_t hk,
                          int64_t j0, int64_t nk) {
    if (c->bf16) {
        const int64_t Dk = c->d->Dk, Dv = c->d->Dv;
        attn__flash_bf16_rows(c->k, b, hk, j0, nk, w->hraw, Dk);
        attn__bf16_pack_nt(nk, Dk, w->hraw, Dk, w->hk_nt);
        attn__bf16_pack_nn(nk, Dk, w->hraw, Dk, w->hk_nn);
        attn__flash_bf16_rows(c->v, b, hk, j0, nk, w->hraw, Dv);
        attn__bf16_pack_nt(nk, Dv, w->hraw, Dv, w->hv_nt);
        return;
    }
    w->k = attn__flash_rows(c->k, b, hk, j0, nk, w->kb, &w->ldk);
    w->v = attn__flash_rows(c->v, b, hk, j0, nk, w->vb, &w->ldv);
    attn__tile_bt_prepare(&w->kt, nk, c->d->Dk, w->k, w->ldk, w->kp);
    attn__tile_bt_prepare(&w->vt, nk, c->d->Dv, w->v, w->ldv, w->vp);
}

/* The blocks of tile (query tile at i0, key tile at j0) of head (b, h)
 * that hold its visible pairs (attn__flash_split_tile: the causal diagonal
 * and narrow windows in row bands, cut to the columns they see), in w->blk.
 * Returns their number, 0 for a tile the mask hides. */
static int64_t tile_blocks(const bwd_ctx *c, work *w, int64_t b, int64_t h,
                           int64_t i0, int64_t nq, int64_t j0, int64_t nk) {
    const attn_mask *m = &c->opts->mask;
    /* classified and split in the mask's frame, handed back in local rows */
    const int64_t gi = i0 + c->qpos, gj = j0 + c->kpos;
    attn__tile_class cls = attn__mask_classify(m, b, h, gi, gi + nq, gj,
                                               gj + nk, c->md.Lq, c->md.Lk);
    int64_t n =
        attn__flash_split_tile(m, &c->md, b, h, gi, nq, gj, nk, cls, w->blk);
    for (int64_t x = 0; x < n; x++) {
        w->blk[x].r0 -= c->qpos;
        w->blk[x].c0 -= c->kpos;
    }
    return n;
}

/*
 * One block of the loaded tiles (query tile at i0, key tile at j0) of head
 * (b, h): leaves P in w->p, the dropped weights in w->pd (== w->p without
 * dropout, see the return value) and dS in w->ds, each blk->nr x blk->nc
 * with leading dimension bk (and, with c->bias_ds, dS at the biased score
 * in w->dsb). Returns the array holding the weights after dropout, or NULL
 * when a user function failed (recorded in c->err).
 */
static const float *block_ds(const bwd_ctx *c, work *w, int64_t b, int64_t h,
                             int64_t i0, int64_t j0,
                             const attn__flash_block *blk) {
    const attn__sdpa_dims *d = c->d;
    const attn_mask *m = &c->opts->mask;
    const int64_t bk = c->bk, nr = blk->nr, nc = blk->nc;
    const int64_t ro = blk->r0 - i0, co = blk->c0 - j0;
    /* S = scale Q K^T, dP = dO V^T */
    if (c->bf16) {
        attn__bf16_nt(nr, co, nc, d->Dk, (float)d->scale,
                      w->hq + ro * c->ld16.q, c->ld16.q, w->hk_nt, w->p, bk);
        attn__bf16_nt(nr, co, nc, d->Dv, 1.0f, w->ho + ro * c->ld16.o,
                      c->ld16.o, w->hv_nt, w->ds, bk);
    } else {
        attn__tile_nt(nr, co, nc, (float)d->scale, w->q + ro * w->ldq, w->ldq,
                      &w->kt, w->p, bk);
        attn__tile_nt(nr, co, nc, 1.0f, w->dout + ro * w->ldo, w->ldo, &w->vt,
                      w->ds, bk);
    }
    const double p = c->opts->dropout_p;
    const int need_mask = attn__flash_row_needed(m, blk->cls);
    for (int64_t r = 0; r < nr; r++) {
        float *s = w->p + r * bk, *ds = w->ds + r * bk, *pd = w->pd + r * bk;
        const int64_t i = blk->r0 + r;
        const float lse = w->lse[ro + r], dd = w->dd[ro + r];
        if (lse == -INFINITY) { /* fully masked row: no weights, no gradient */
            memset(s, 0, (size_t)nc * sizeof(float));
            memset(ds, 0, (size_t)nc * sizeof(float));
            if (c->bias_ds)
                memset(w->dsb + r * bk, 0, (size_t)nc * sizeof(float));
            if (p > 0) memset(pd, 0, (size_t)nc * sizeof(float));
            continue;
        }
        /* P exactly as the forward forms it: mask + bias, then exp(s - lse) */
        if (need_mask && attn__flash_score_row(m, &c->md, b, h, i + c->qpos,
                                               blk->c0 + c->kpos, nc, blk->cls,
                                               s, w->capd, w->dmod, c->err))
            return NULL;
        c->vec->exp_sub_sum(s, nc, lse);
        if (p > 0) {
            for (int64_t j = 0; j < nc; j++) w->z[j] = 1.0f;
            attn__flash_dropout_row(c->opts->seed, p, b, h, i + c->qpos,
                                    blk->c0 + c->kpos, nc, w->z);
            for (int64_t j = 0; j < nc; j++) {
                pd[j] = s[j] * w->z[j];
                ds[j] *= w->z[j];
            }
        }
        for (int64_t j = 0; j < nc; j++) ds[j] = s[j] * (ds[j] - dd);
        /* through the user's function: dscore per entry */
        if (m->score_mod)
            for (int64_t j = 0; j < nc; j++) ds[j] *= w->dmod[j];
        /* dBias is the gradient at the biased score, before the cap */
        if (c->bias_ds) memcpy(w->dsb + r * bk, ds, (size_t)nc * sizeof(float));
        /* through the cap: d(cap tanh(x / cap)) / dx = 1 - tanh^2 */
        if (m->softcap > 0)
            for (int64_t j = 0; j < nc; j++) ds[j] *= w->capd[j];
    }
    return p > 0 ? w->pd : w->p;
}

/* ---- the passes -------------------------------------------------------- */

/* dQ += scale dS K for the block's rows, straight into dq (b, h): f32 with
 * a unit last stride (attn__sdpa_flash_backward sees to it), owned by the
 * caller's task. Both schemes below issue exactly these calls in the same
 * (key tile, block) order, so they give the same bits. */
static void add_dq(const bwd_ctx *c, const work *w, attn_tensor *dq, int64_t b,
                   int64_t h, int64_t j0, const attn__flash_block *blk) {
    float *row = (float *)dq->data + attn__off(dq, b, h, blk->r0, 0);
    if (c->bf16) {
        /* dS rounded to bf16 in pairs aligned on the packed K's */
        const int64_t co = blk->c0 - j0, p0 = co / 2;
        const int64_t p1 = (co + blk->nc + 1) / 2, ld = c->ld16.ds;
        for (int64_t r = 0; r < blk->nr; r++) {
            uint16_t *o = w->hds + r * ld;
            o[0] = o[2 * (p1 - p0) - 1] = 0;
            attn__bf16_from_f32(w->ds + r * c->bk, blk->nc, o + (co - 2 * p0));
        }
        attn__bf16_nn_acc(blk->nr, c->d->Dk, tile_len(j0, c->bk, c->d->Lk), p0,
                          p1, w->hds, ld, w->hk_nn, row, dq->stride[2],
                          (float)c->d->scale);
        return;
    }
    attn__tile_nn_acc(blk->nr, c->d->Dk, blk->nc, (float)c->d->scale, w->ds,
                      c->bk, w->k + (blk->c0 - j0) * w->ldk, w->ldk, row,
                      dq->stride[2]);
}

/* dBias += dS for a bias that broadcasts nowhere: each entry is fed by one
 * (b, h, i, j), so the task that computes it owns it. */
static void add_dbias_block(const bwd_ctx *c, const work *w, attn_tensor *db,
                            int64_t b, int64_t h,
                            const attn__flash_block *blk) {
    float *base = db->data;
    const float *ds = c->bias_ds ? w->dsb : w->ds;
    for (int64_t r = 0; r < blk->nr; r++)
        for (int64_t j = 0; j < blk->nc; j++)
            base[attn__off(db, b, h, blk->r0 + r, blk->c0 + j)] +=
                ds[r * c->bk + j];
}

/* dV += Pd^T dO and dK += scale dS^T Q on the bf16 path for a block at
 * rows ro.., keys co.. of the tiles (nq query rows): Pd and dS rounded to
 * bf16 and transposed, their pairs aligned on the packed dO's and Q's. */
static void kv_bf16(const bwd_ctx *c, work *w, const attn__flash_block *blk,
                    int64_t ro, int64_t co, int64_t nq, const float *pd,
                    float *dka, float *dva) {
    const int64_t Dk = c->d->Dk, Dv = c->d->Dv, ld = c->ld16.t;
    const int64_t p0 = ro / 2, p1 = (ro + blk->nr + 1) / 2;
    const int64_t off = ro - 2 * p0, wd = 2 * (p1 - p0);
    attn__bf16_pairs_t(blk->nr, blk->nc, pd, c->bk, off, wd, w->hpt, ld,
                       w->htmp);
    attn__bf16_pairs_t(blk->nr, blk->nc, w->ds, c->bk, off, wd, w->hdst, ld,
                       w->htmp);
    attn__bf16_nn_acc(blk->nc, Dv, nq, p0, p1, w->hpt, ld, w->ho_nn,
                      dva + co * Dv, Dv, 1.0f);
    attn__bf16_nn_acc(blk->nc, Dk, nq, p0, p1, w->hdst, ld, w->hq_nn,
                      dka + co * Dk, Dk, (float)c->d->scale);
}

/* Pass over (b, kv head, key tile): owns dK and dV of its keys, summed
 * over the heads of the group, the query tiles and their blocks in a fixed
 * order. In the one-pass scheme (dq != NULL) it also owns dQ of every row
 * of its heads (the task then covers all key tiles, in order) and the
 * unbroadcast dBias. */
static void pass_kv(const bwd_ctx *c, work *w, int64_t task, int64_t nkt_task,
                    attn_tensor *dk, attn_tensor *dv, attn_tensor *dq,
                    attn_tensor *dbias) {
    const attn__sdpa_dims *d = c->d;
    const int64_t per = c->nkt / nkt_task; /* key tiles per task */
    const int64_t kt0 = (task % nkt_task) * per,
                  hk = (task / nkt_task) % d->Hkv;
    const int64_t b = task / (nkt_task * d->Hkv);
    for (int64_t kt = kt0; kt < kt0 + per; kt++) {
        const int64_t j0 = kt * c->bk, nk = tile_len(j0, c->bk, d->Lk);
        float *dka = w->acc, *dva = w->acc + nk * d->Dk;
        int loaded = 0;
        memset(w->acc, 0, (size_t)(nk * (d->Dk + d->Dv)) * sizeof(float));
        for (int64_t h = hk * d->group; h < (hk + 1) * d->group; h++)
            for (int64_t qt = 0; qt < c->nqt; qt++) {
                const int64_t i0 = qt * c->bq, nq = tile_len(i0, c->bq, d->Lq);
                const int64_t nb = tile_blocks(c, w, b, h, i0, nq, j0, nk);
                if (nb == 0) continue;
                if (!loaded) {
                    load_key_tile(c, w, b, hk, j0, nk);
                    loaded = 1;
                }
                load_query_tile(c, w, b, h, i0, nq);
                for (int64_t x = 0; x < nb; x++) {
                    const attn__flash_block *blk = &w->blk[x];
                    const int64_t ro = blk->r0 - i0, co = blk->c0 - j0;
                    const float *pd = block_ds(c, w, b, h, i0, j0, blk);
                    if (!pd) return; /* a user function failed */
                    /* dV += Pd^T dO, dK += scale dS^T Q (rows co.. of the tile) */
                    if (c->bf16)
                        kv_bf16(c, w, blk, ro, co, nq, pd, dka, dva);
                    else {
                        attn__tile_tn_acc(blk->nc, d->Dv, blk->nr, 1.0f, pd,
                                          c->bk, w->dout + ro * w->ldo, w->ldo,
                                          dva + co * d->Dv, d->Dv);
                        attn__tile_tn_acc(blk->nc, d->Dk, blk->nr,
                                          (float)d->scale, w->ds, c->bk,
                                          w->q + ro * w->ldq, w->ldq,
                                          dka + co * d->Dk, d->Dk);
                    }
                    if (dq) add_dq(c, w, dq, b, h, j0, blk);
                    if (dq && dbias) add_dbias_block(c, w, dbias, b, h, blk);
                }
            }
        if (!loaded) continue; /* no visible pair: nothing to add */
        add_rows(dk, b, hk, j0, nk, dka);
        add_rows(dv, b, hk, j0, nk, dva);
    }
}

/* Pass over (b, head, query tile) of the two-pass scheme: owns dQ of its
 * rows and the unbroadcast dBias of its rows. */
static void pass_q(const bwd_ctx *c, work *w, int64_t task, attn_tensor *dq,
                   attn_tensor *dbias) {
    const attn__sdpa_dims *d = c->d;
    const int64_t qt = task % c->nqt, h = (task / c->nqt) % d->H;
    const int64_t b = task / (c->nqt * d->H), hk = h / d->group;
    const int64_t i0 = qt * c->bq, nq = tile_len(i0, c->bq, d->Lq);
    int loaded = 0;
    for (int64_t kt = 0; kt < c->nkt; kt++) {
        const int64_t j0 = kt * c->bk, nk = tile_len(j0, c->bk, d->Lk);
        const int64_t nb = tile_blocks(c, w, b, h, i0, nq, j0, nk);
        if (nb == 0) continue;
        if (!loaded) {
            load_query_tile(c, w, b, h, i0, nq);
            loaded = 1;
        }
        load_key_tile(c, w, b, hk, j0, nk);
        for (int64_t x = 0; x < nb; x++) {
            if (!block_ds(c, w, b, h, i0, j0, &w->blk[x])) return;
            add_dq(c, w, dq, b, h, j0, &w->blk[x]);
            if (dbias) add_dbias_block(c, w, dbias, b, h, &w->blk[x]);
        }
    }
}

/* ---- dBias ------------------------------------------------------------- */

/* Whether the bias broadcasts along axis a (size 1 or stride 0). */
static int bias_bcast(const attn_tensor *t, int a) {
    return t->shape[a] == 1 || t->stride[a] == 0;
}

/* Adds the sums in acc (rows x cols, ld cols; row r = query i0 + r unless
 * the query axis broadcasts, column c = key j0 + c unless the key axis
 * broadcasts) into every entry of dbias they stand for: along an axis where
 * the bias has stride 0 but size > 1, every entry gets the sum. */
static void add_bias_sums(attn_tensor *db, const attn_tensor *bias, int64_t b,
                          int64_t h, int64_t i0, int64_t rows, int64_t j0,
                          int64_t cols, const double *acc) {
    int64_t lo[4] = {b, h, i0, j0},
            hi[4] = {b + 1, h + 1, i0 + rows, j0 + cols};
    for (int a = 0; a < 4; a++)
        if (bias_bcast(bias, a)) {
            lo[a] = 0;
            hi[a] = db->shape[a];
        }
    const int ib = bias_bcast(bias, 2), jb = bias_bcast(bias, 3);
    float *base = db->data;
    for (int64_t x0 = lo[0]; x0 < hi[0]; x0++)
        for (int64_t x1 = lo[1]; x1 < hi[1]; x1++)
            for (int64_t x2 = lo[2]; x2 < hi[2]; x2++)
                for (int64_t x3 = lo[3]; x3 < hi[3]; x3++) {
                    int64_t r = ib ? 0 : x2 - i0, cc = jb ? 0 : x3 - j0;
                    base[attn__off(db, x0, x1, x2, x3)] +=
                        (float)acc[r * cols + cc];
                }
}

/* Folds the dS tile (nq x nk at w->ds) into w->bacc (rows x cols). */
static void fold_ds(const bwd_ctx *c, work *w, const attn_tensor *bias,
                    int64_t r0, int64_t c0, int64_t nq, int64_t nk,
                    int64_t cols) {
    const int ib = bias_bcast(bias, 2), jb = bias_bcast(bias, 3);
    for (int64_t r = 0; r < nq; r++) {
        const float *ds = (c->bias_ds ? w->dsb : w->ds) + r * c->bk;
        double *acc = w->bacc + (ib ? 0 : r0 + r) * cols;
        if (jb) {
            double s = 0;
            for (int64_t j = 0; j < nk; j++) s += ds[j];
            acc[0] += s;
        } else {
            for (int64_t j = 0; j < nk; j++) acc[c0 + j] += ds[j];
        }
    }
}

/* A bias broadcast over batch, heads or queries: one task per cell group
 * of dBias (reduced batch, reduced head, query tile or all queries, key
 * tile or all keys), looping over everything that feeds it in a fixed
 * order. */
static void pass_bias(const bwd_ctx *c, work *w, int64_t task,
                      attn_tensor *dbias) {
    const attn__sdpa_dims *d = c->d;
    const attn_tensor *bias = c->opts->mask.bias;
    const int bb = bias_bcast(bias, 0), hb = bias_bcast(bias, 1);
    const int ib = bias_bcast(bias, 2), jb = bias_bcast(bias, 3);
    const int64_t nkt = jb ? 1 : c->nkt, nqt = ib ? 1 : c->nqt;
    const int64_t nh = hb ? 1 : d->H;
    const int64_t kt = task % nkt, qt = (task / nkt) % nqt;
    const int64_t hh = (task / (nkt * nqt)) % nh, bb0 = task / (nkt * nqt * nh);
    const int64_t rows = ib ? 1 : tile_len(qt * c->bq, c->bq, d->Lq);
    const int64_t cols = jb ? 1 : tile_len(kt * c->bk, c->bk, d->Lk);
    memset(w->bacc, 0, (size_t)(rows * cols) * sizeof(double));
    for (int64_t b = bb ? 0 : bb0; b < (bb ? d->B : bb0 + 1); b++)
        for (int64_t h = hb ? 0 : hh; h < (hb ? d->H : hh + 1); h++)
            for (int64_t q2 = ib ? 0 : qt; q2 < (ib ? c->nqt : qt + 1); q2++)
                for (int64_t k2 = jb ? 0 : kt; k2 < (jb ? c->nkt : kt + 1);
                     k2++) {
                    const int64_t i0 = q2 * c->bq, j0 = k2 * c->bk;
                    const int64_t nq = tile_len(i0, c->bq, d->Lq);
                    const int64_t nk = tile_len(j0, c->bk, d->Lk);
                    const int64_t nb = tile_blocks(c, w, b, h, i0, nq, j0, nk);
                    if (nb == 0) continue;
                    load_key_tile(c, w, b, h / d->group, j0, nk);
                    load_query_tile(c, w, b, h, i0, nq);
                    for (int64_t x = 0; x < nb; x++) {
                        const attn__flash_block *blk = &w->blk[x];
                        if (!block_ds(c, w, b, h, i0, j0, blk)) return;
                        fold_ds(c, w, bias, blk->r0 - i0, blk->c0 - j0, blk->nr,
                                blk->nc, cols);
                    }
                }
    add_bias_sums(dbias, bias, bb ? 0 : bb0, hb ? 0 : hh, ib ? 0 : qt * c->bq,
                  rows, jb ? 0 : kt * c->bk, cols, w->bacc);
}

/* ---- the call ---------------------------------------------------------- */

static attn_status
flash_backward_pos(const attn_tensor *q, const attn_tensor *k,
                   const attn_tensor *v, const attn_tensor *out,
                   const float *lse, const attn_tensor *dout,
                   const attn_sdpa_opts *opts, const attn__sdpa_dims *d,
                   const attn__flash_pos *pos, attn_tensor *dq, attn_tensor *dk,
                   attn_tensor *dv, attn_tensor *dbias);

attn_status attn__sdpa_flash_backward(
    const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
    const attn_tensor *out, const float *lse, const attn_tensor *dout,
    const attn_sdpa_opts *opts, const attn__sdpa_dims *d, attn_tensor *dq,
    attn_tensor *dk, attn_tensor *dv, attn_tensor *dbias) {
    return flash_backward_pos(q, k, v, out, lse, dout, opts, d, NULL, dq, dk,
                              dv, dbias);
}

attn_status attn__flash_backward_at(const attn_tensor *q, const attn_tensor *k,
                                    const attn_tensor *v,
                                    const attn_tensor *out, const float *lse,
                                    const attn_tensor *dout,
                                    const attn_sdpa_opts *opts,
                                    const attn__sdpa_dims *d,
                                    const attn__flash_pos *pos, attn_tensor *dq,
                                    attn_tensor *dk, attn_tensor *dv) {
    return flash_backward_pos(q, k, v, out, lse, dout, opts, d, pos, dq, dk, dv,
                              NULL);
}

static attn_status
flash_backward_pos(const attn_tensor *q, const attn_tensor *k,
                   const attn_tensor *v, const attn_tensor *out,
                   const float *lse, const attn_tensor *dout,
                   const attn_sdpa_opts *opts, const attn__sdpa_dims *d,
                   const attn__flash_pos *pos, attn_tensor *dq, attn_tensor *dk,
                   attn_tensor *dv, attn_tensor *dbias) {
    attn_status st = attn__flash_check_dims(d, "flash backward");
    if (st) return st;
    bwd_ctx c = {.q = q,
                 .k = k,
                 .v = v,
                 .dout = dout,
                 .opts = opts,
                 .d = d,
                 .lse = lse,
                 .vec = attn__vec_get()};
    attn__ufn_err err;
    memset(&err, 0, sizeof err);
    c.err = &err;
    c.bias_ds = dbias && opts->mask.softcap > 0;
    c.bf16 = q->dtype == ATTN_BF16 && k->dtype == ATTN_BF16 &&
             v->dtype == ATTN_BF16 && attn__bf16_tiles_chosen(opts->impl);
    attn__flash_frame(d, pos, &c.md, &c.qpos, &c.kpos);
    bwd_tile_sizes(d, &c.bq, &c.bk);
    c.ld16 = bf16_lds_of(d, c.bq, c.bk);
    c.nqt = (d->Lq + c.bq - 1) / c.bq;
    c.nkt = (d->Lk + c.bk - 1) / c.bk;

    const attn_tensor *bias = opts->mask.bias;
    int bias_direct = dbias != NULL;
    for (int a = 0; a < 4 && dbias; a++)
        if (bias_bcast(bias, a)) bias_direct = 0;
    const int bias_pass = dbias && !bias_direct;

    /* Scheme: with enough (batch, kv head) pairs to keep every thread busy,
     * one pass over them computes dK, dV and dQ together (5 tile products
     * instead of 7); otherwise the key-tile pass and a query-tile pass. The
     * two issue the same dQ products in the same order, so the choice (it
     * depends on the thread count) does not change a bit. dq is accumulated
     * in place, which needs unit-stride rows; other layouts go through a
     * contiguous temporary. */
    const int64_t rows = d->B * d->H * d->Lq;
    const int64_t most = d->B * d->H * (c.nqt > c.nkt ? c.nqt : c.nkt);
    const int nt = attn__flash_team_size(opts, most > rows ? most : rows);
    const int one_pass = d->B * d->Hkv >= 2 * (int64_t)nt;
    const int dq_direct = (dq->stride[3] == 1 || d->Dk == 1) &&
                          (d->Lq == 1 || dq->stride[2] >= d->Dk) &&
                          dq->stride[2] <= INT_MAX;
    work w0;
    const size_t wf = work_carve(&w0, NULL, c.bq, c.bk, d, c.bf16);
    float *dvec = attn__alloc((size_t)rows, sizeof(float), "flash backward D");
    float *ws =
        attn__alloc((size_t)nt * wf, sizeof(float), "flash backward tiles");
    double *wb = NULL;
    float *dqt = NULL;
    if (bias_pass)
        wb = attn__alloc((size_t)nt * (size_t)(c.bq * c.bk), sizeof(double),
                         "flash backward dbias tiles");
    if (!dq_direct)
        dqt = attn__alloc((size_t)(rows * d->Dk), sizeof(float),
                          "flash backward dq (strided layout)");
    if (!dvec || !ws || (bias_pass && !wb) || (!dq_direct && !dqt)) {
        attn__free(dvec);
        attn__free(ws);
        attn__free(wb);
        attn__free(dqt);
        return ATTN_E_NOMEM;
    }
    c.dvec = dvec;
    attn_tensor dqa = *dq;
    if (!dq_direct) {
        memset(dqt, 0, (size_t)(rows * d->Dk) * sizeof(float));
        dqa = attn_tensor_4d(dqt, ATTN_F32, d->B, d->H, d->Lq, d->Dk);
    }
    if (d->Lq == 1) dqa.stride[2] = d->Dk; /* any ldc >= Dk serves one row */

    const int64_t nkt_task = one_pass ? 1 : c.nkt;
    const int64_t n_kv = d->B * d->Hkv * nkt_task;
    const int64_t n_q = one_pass ? 0 : d->B * d->H * c.nqt;
    int64_t n_bias = 0;
    if (bias_pass)
        n_bias = (bias_bcast(bias, 0) ? 1 : d->B) *
                 (bias_bcast(bias, 1) ? 1 : d->H) *
                 (bias_bcast(bias, 2) ? 1 : c.nqt) *
                 (bias_bcast(bias, 3) ? 1 : c.nkt);
    const int blas_saved = attn__blas_single_begin();
#pragma omp parallel num_threads(nt)
    {
        const int tid = omp_get_thread_num();
        work w;
        work_carve(&w, ws + (size_t)tid * wf, c.bq, c.bk, d, c.bf16);
        w.bacc = wb ? wb + (size_t)tid * (size_t)(c.bq * c.bk) : NULL;
        /* D_i = dO_i . O_i, in double for a clean cancellation */
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            const int64_t i = r % d->Lq, h = (r / d->Lq) % d->H;
            const int64_t b = r / (d->Lq * d->H);
            int64_t ld;
            const float *go = attn__flash_rows(dout, b, h, i, 1, w.ob, &ld);
            const float *o = attn__flash_rows(out, b, h, i, 1, w.vb, &ld);
            double s = 0;
            for (int64_t x = 0; x < d->Dv; x++) s += (double)go[x] * o[x];
            dvec[r] = (float)s;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < n_kv; t++)
            if (!attn__ufn_failed(&err))
                pass_kv(&c, &w, t, nkt_task, dk, dv, one_pass ? &dqa : NULL,
                        bias_direct ? dbias : NULL);
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < n_q; t++)
            if (!attn__ufn_failed(&err))
                pass_q(&c, &w, t, &dqa, bias_direct ? dbias : NULL);
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < n_bias; t++)
            if (!attn__ufn_failed(&err)) pass_bias(&c, &w, t, dbias);
    }
    attn__blas_single_end(blas_saved);
    if (err.what) {
        attn__free(dqt);
        attn__free(dvec);
        attn__free(ws);
        attn__free(wb);
        return attn__ufn_status(&err);
    }
    /* dL/dsink_h = -sum_i P_sink,i D_i with P_sink,i = exp(sink_h - lse_i):
     * the sink carries no value, so its dP is 0. One fixed order. */
    if (opts->mask.sinks_grad)
        for (int64_t h = 0; h < d->H; h++) {
            double g = 0, sk = opts->mask.sinks[h];
            for (int64_t b = 0; b < d->B; b++)
                for (int64_t i = 0; i < d->Lq; i++) {
                    int64_t r = (b * d->H + h) * d->Lq + i;
                    g -= exp(sk - (double)lse[r]) * (double)dvec[r];
                }
            opts->mask.sinks_grad[h] += g;
        }
    if (!dq_direct)
        for (int64_t b = 0; b < d->B; b++)
            for (int64_t h = 0; h < d->H; h++)
                add_rows(dq, b, h, 0, d->Lq,
                         dqt + (b * d->H + h) * d->Lq * d->Dk);
    attn__free(dqt);
    attn__free(dvec);
    attn__free(ws);
    attn__free(wb);
    return ATTN_OK;
}
