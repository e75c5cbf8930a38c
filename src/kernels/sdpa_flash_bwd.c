/* Flash backward of scaled dot-product attention (FlashAttention-2 style).
 *
 * It lives beside, not inside, sdpa_flash.c (the forward) because that file
 * is already near the size limit; the two share the tile classification of
 * mask.c and the dropout keying of dropout.c.
 *
 * With P = exp(scale Q K^T + bias - lse) recomputed tile by tile from the
 * forward's lse, Pd = P * Z / (1 - p) the weights after dropout, and
 * D_i = dO_i . O_i (= sum_j P_ij dP_ij, dropout included):
 *   dV = Pd^T dO,  dP = (dO V^T) * Z / (1 - p),  dS = P * (dP - D),
 *   dK = scale dS^T Q,  dQ = scale dS K,  dBias = dS (summed where the bias
 *   broadcasts).
 * The pass over (batch, kv head, key tile) owns dK and dV of its keys,
 * summing over the heads of the group and all query tiles in a fixed order;
 * the pass over (batch, head, query tile) owns dQ of its rows (and dBias
 * where the bias broadcasts nowhere). When there are enough (batch, kv head)
 * pairs for the threads, one pass over them owns dK, dV and dQ at once and
 * saves recomputing S and dP; it issues the same dQ products in the same
 * order, so the bits do not change. A bias that broadcasts gets a pass over
 * the cells of dBias. No atomics; every output element is summed in one
 * fixed order: bitwise identical on any thread count.
 * Empty tiles (mask classification) are skipped in every pass. Extra memory:
 * per-thread tiles and the D vector (B * H * Lq floats).
 */
#include "internal.h"

#include <cblas.h>
#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* ---- tiles ------------------------------------------------------------- */

/* Tile sizes depend on the shapes only, never on the thread count. */
static void bwd_tile_sizes(const attn__sdpa_dims *d, int64_t *bq, int64_t *bk) {
    int64_t t = d->Dk + d->Dv > 256 ? 64 : 128;
    *bq = d->Lq < t ? d->Lq : t;
    *bk = d->Lk < t ? d->Lk : t;
}

/* Rows r0 .. r0+n-1 of slice (b, h) of t as f32 into dst (n x shape[3]). */
static void load_rows(const attn_tensor *t, int64_t b, int64_t h, int64_t r0,
                      int64_t n, float *dst) {
    const int64_t D = t->shape[3];
    const size_t es = attn_dtype_size(t->dtype);
    for (int64_t r = 0; r < n; r++) {
        const char *row = (const char *)t->data +
                          (size_t)attn__off(t, b, h, r0 + r, 0) * es;
        if (t->stride[3] == 1)
            attn__load_f32(row, t->dtype, D, dst + r * D);
        else
            for (int64_t c = 0; c < D; c++)
                dst[r * D + c] = (float)attn_tensor_get(t, b, h, r0 + r, c);
    }
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
    float *q, *dout, *k, *v; /* bq x Dk, bq x Dv, bk x Dk, bk x Dv        */
    float *p, *pd, *ds;      /* bq x bk: P, P after dropout, dP then dS   */
    float *lse, *dd;         /* bq: lse and D of the tile's rows          */
    float *acc;              /* dK|dV (bk x (Dk + Dv)) or dQ (bq x Dk)    */
    float *z;                /* bk: dropout factors of one row            */
    double *bacc;            /* bq x bk: dBias sums (when dbias is asked) */
} work;

static size_t work_floats(int64_t bq, int64_t bk, const attn__sdpa_dims *d) {
    int64_t acc = bk * (d->Dk + d->Dv);
    if (bq * d->Dk > acc) acc = bq * d->Dk;
    return (size_t)(bq * d->Dk + bq * d->Dv + bk * d->Dk + bk * d->Dv +
                    3 * bq * bk + 2 * bq + acc + bk);
}

static void work_carve(work *w, float *f, double *bacc, int64_t bq, int64_t bk,
                       const attn__sdpa_dims *d) {
    w->q = f;
    w->dout = w->q + bq * d->Dk;
    w->k = w->dout + bq * d->Dv;
    w->v = w->k + bk * d->Dk;
    w->p = w->v + bk * d->Dv;
    w->pd = w->p + bq * bk;
    w->ds = w->pd + bq * bk;
    w->lse = w->ds + bq * bk;
    w->dd = w->lse + bq;
    w->acc = w->dd + bq;
    int64_t acc = bk * (d->Dk + d->Dv);
    if (bq * d->Dk > acc) acc = bq * d->Dk;
    w->z = w->acc + acc;
    w->bacc = bacc;
}

/* Everything a tile computation needs to know about the call. */
typedef struct {
    const attn_tensor *q, *k, *v, *dout;
    const attn_sdpa_opts *opts;
    const attn__sdpa_dims *d;
    const float *lse, *dvec; /* [B * H * Lq] each */
    int64_t bq, bk, nqt, nkt;
    uint32_t drop_threshold;
    float keep_scale;
} bwd_ctx;

/* Dropout factors of row i (b, h), keys j0 .. j0+n-1: 0 or 1 / (1 - p),
 * with the decisions of attn_dropout_kept (Philox on (j / 4, i, h, b), one
 * call serving four neighbouring keys). */
static void dropout_factors(const bwd_ctx *c, int64_t b, int64_t h, int64_t i,
                            int64_t j0, int64_t n, float *z) {
    uint32_t out[4];
    int64_t have = -1;
    for (int64_t j = j0; j < j0 + n; j++) {
        if ((j >> 2) != have) {
            uint32_t ctr[4] = {(uint32_t)(j >> 2), (uint32_t)i, (uint32_t)h,
                               (uint32_t)b};
            attn__philox4x32(c->opts->seed, ctr, out);
            have = j >> 2;
        }
        z[j - j0] = out[j & 3] >= c->drop_threshold ? c->keep_scale : 0.0f;
    }
}

/* Loads query rows [i0, i0+nq) of head (b, h): q, dO, lse and D. */
static void load_query_tile(const bwd_ctx *c, work *w, int64_t b, int64_t h,
                            int64_t i0, int64_t nq) {
    load_rows(c->q, b, h, i0, nq, w->q);
    load_rows(c->dout, b, h, i0, nq, w->dout);
    const int64_t base = (b * c->d->H + h) * c->d->Lq + i0;
    memcpy(w->lse, c->lse + base, (size_t)nq * sizeof(float));
    memcpy(w->dd, c->dvec + base, (size_t)nq * sizeof(float));
}

static void load_key_tile(const bwd_ctx *c, work *w, int64_t b, int64_t hk,
                          int64_t j0, int64_t nk) {
    load_rows(c->k, b, hk, j0, nk, w->k);
    load_rows(c->v, b, hk, j0, nk, w->v);
}

/*
 * One (query tile, key tile) of head (b, h) with the tiles loaded in w:
 * leaves P in w->p, the dropped weights in w->pd (== w->p without dropout,
 * see the return value) and dS in w->ds, all with leading dimension bk.
 * Returns the array holding the weights after dropout.
 */
static const float *tile_ds(const bwd_ctx *c, work *w, int64_t b, int64_t h,
                            int64_t i0, int64_t nq, int64_t j0, int64_t nk,
                            attn__tile_class cls) {
    const attn__sdpa_dims *d = c->d;
    const attn_mask *m = &c->opts->mask;
    const int64_t bk = c->bk;
    /* S = scale Q K^T, dP = dO V^T */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nq, (int)nk,
                (int)d->Dk, (float)d->scale, w->q, (int)d->Dk, w->k, (int)d->Dk,
                0.0f, w->p, (int)bk);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nq, (int)nk,
                (int)d->Dv, 1.0f, w->dout, (int)d->Dv, w->v, (int)d->Dv, 0.0f,
                w->ds, (int)bk);
    const int drop = c->opts->dropout_p > 0;
    for (int64_t r = 0; r < nq; r++) {
        float *s = w->p + r * bk, *ds = w->ds + r * bk, *pd = w->pd + r * bk;
        const int64_t i = i0 + r;
        const float lse = w->lse[r], dd = w->dd[r];
        if (lse == -INFINITY) { /* fully masked row: no weights, no gradient */
            memset(s, 0, (size_t)nk * sizeof(float));
            memset(ds, 0, (size_t)nk * sizeof(float));
            if (drop) memset(pd, 0, (size_t)nk * sizeof(float));
            continue;
        }
        if (cls == ATTN__TILE_PARTIAL)
            for (int64_t j = 0; j < nk; j++)
                if (!attn_mask_visible(m, b, h, i, j0 + j, d->Lq, d->Lk))
                    s[j] = -INFINITY;
        if (m->bias)
            for (int64_t j = 0; j < nk; j++)
                if (s[j] != -INFINITY)
                    s[j] += (float)attn__bias_at(m, b, h, i, j0 + j);
        for (int64_t j = 0; j < nk; j++) s[j] = expf(s[j] - lse);
        if (drop) {
            dropout_factors(c, b, h, i, j0, nk, w->z);
            for (int64_t j = 0; j < nk; j++) {
                pd[j] = s[j] * w->z[j];
                ds[j] *= w->z[j];
            }
        }
        for (int64_t j = 0; j < nk; j++) ds[j] = s[j] * (ds[j] - dd);
    }
    return drop ? w->pd : w->p;
}

/* ---- the passes -------------------------------------------------------- */

/* dQ += scale dS K straight into rows i0.. of dq (b, h): f32 with a unit
 * last stride (attn__sdpa_flash_backward checks), owned by the caller's
 * task. Both schemes below issue exactly these calls in the same key-tile
 * order, so they give the same bits. */
static void add_dq(const bwd_ctx *c, const work *w, attn_tensor *dq, int64_t b,
                   int64_t h, int64_t i0, int64_t nq, int64_t nk) {
    float *row = (float *)dq->data + attn__off(dq, b, h, i0, 0);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)nq,
                (int)c->d->Dk, (int)nk, (float)c->d->scale, w->ds, (int)c->bk,
                w->k, (int)c->d->Dk, 1.0f, row, (int)dq->stride[2]);
}

/* dBias += dS for a bias that broadcasts nowhere: each entry is fed by one
 * (b, h, i, j), so the task that computes it owns it. */
static void add_dbias_tile(const bwd_ctx *c, const work *w, attn_tensor *db,
                           int64_t b, int64_t h, int64_t i0, int64_t nq,
                           int64_t j0, int64_t nk) {
    float *base = db->data;
    for (int64_t r = 0; r < nq; r++)
        for (int64_t j = 0; j < nk; j++)
            base[attn__off(db, b, h, i0 + r, j0 + j)] += w->ds[r * c->bk + j];
}

/* Pass over (b, kv head, key tile): owns dK and dV of its keys, summed
 * over the heads of the group and the query tiles in a fixed order. In the
 * one-pass scheme (dq != NULL) it also owns dQ of every row of its heads
 * (the task then covers all key tiles, in order) and the unbroadcast dBias. */
static void pass_kv(const bwd_ctx *c, work *w, int64_t task, int64_t nkt_task,
                    attn_tensor *dk, attn_tensor *dv, attn_tensor *dq,
                    attn_tensor *dbias) {
    const attn__sdpa_dims *d = c->d;
    const int64_t per = c->nkt / nkt_task; /* key tiles per task */
    const int64_t kt0 = (task % nkt_task) * per, hk = (task / nkt_task) % d->Hkv;
    const int64_t b = task / (nkt_task * d->Hkv);
    for (int64_t kt = kt0; kt < kt0 + per; kt++) {
        const int64_t j0 = kt * c->bk;
        const int64_t nk = d->Lk - j0 < c->bk ? d->Lk - j0 : c->bk;
        float *dka = w->acc, *dva = w->acc + nk * d->Dk;
        int loaded = 0;
        memset(w->acc, 0, (size_t)(nk * (d->Dk + d->Dv)) * sizeof(float));
        for (int64_t h = hk * d->group; h < (hk + 1) * d->group; h++)
            for (int64_t qt = 0; qt < c->nqt; qt++) {
                const int64_t i0 = qt * c->bq;
                const int64_t nq = d->Lq - i0 < c->bq ? d->Lq - i0 : c->bq;
                attn__tile_class cls =
                    attn__mask_classify(&c->opts->mask, b, h, i0, i0 + nq, j0,
                                        j0 + nk, d->Lq, d->Lk);
                if (cls == ATTN__TILE_EMPTY) continue;
                if (!loaded) {
                    load_key_tile(c, w, b, hk, j0, nk);
                    loaded = 1;
                }
                load_query_tile(c, w, b, h, i0, nq);
                const float *pd = tile_ds(c, w, b, h, i0, nq, j0, nk, cls);
                /* dV += Pd^T dO, dK += scale dS^T Q */
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)nk,
                            (int)d->Dv, (int)nq, 1.0f, pd, (int)c->bk, w->dout,
                            (int)d->Dv, 1.0f, dva, (int)d->Dv);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)nk,
                            (int)d->Dk, (int)nq, (float)d->scale, w->ds,
                            (int)c->bk, w->q, (int)d->Dk, 1.0f, dka, (int)d->Dk);
                if (dq) add_dq(c, w, dq, b, h, i0, nq, nk);
                if (dq && dbias) add_dbias_tile(c, w, dbias, b, h, i0, nq, j0, nk);
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
    const int64_t i0 = qt * c->bq, nq = d->Lq - i0 < c->bq ? d->Lq - i0 : c->bq;
    int loaded = 0;
    for (int64_t kt = 0; kt < c->nkt; kt++) {
        const int64_t j0 = kt * c->bk;
        const int64_t nk = d->Lk - j0 < c->bk ? d->Lk - j0 : c->bk;
        attn__tile_class cls = attn__mask_classify(
            &c->opts->mask, b, h, i0, i0 + nq, j0, j0 + nk, d->Lq, d->Lk);
        if (cls == ATTN__TILE_EMPTY) continue;
        if (!loaded) {
            load_query_tile(c, w, b, h, i0, nq);
            loaded = 1;
        }
        load_key_tile(c, w, b, hk, j0, nk);
        tile_ds(c, w, b, h, i0, nq, j0, nk, cls);
        add_dq(c, w, dq, b, h, i0, nq, nk);
        if (dbias) add_dbias_tile(c, w, dbias, b, h, i0, nq, j0, nk);
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
    int64_t lo[4] = {b, h, i0, j0}, hi[4] = {b + 1, h + 1, i0 + rows, j0 + cols};
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
        const float *ds = w->ds + r * c->bk;
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
    const int64_t rows = ib ? 1 : (d->Lq - qt * c->bq < c->bq ? d->Lq - qt * c->bq : c->bq);
    const int64_t cols = jb ? 1 : (d->Lk - kt * c->bk < c->bk ? d->Lk - kt * c->bk : c->bk);
    memset(w->bacc, 0, (size_t)(rows * cols) * sizeof(double));
    for (int64_t b = bb ? 0 : bb0; b < (bb ? d->B : bb0 + 1); b++)
        for (int64_t h = hb ? 0 : hh; h < (hb ? d->H : hh + 1); h++)
            for (int64_t q2 = ib ? 0 : qt; q2 < (ib ? c->nqt : qt + 1); q2++)
                for (int64_t k2 = jb ? 0 : kt; k2 < (jb ? c->nkt : kt + 1); k2++) {
                    const int64_t i0 = q2 * c->bq, j0 = k2 * c->bk;
                    const int64_t nq = d->Lq - i0 < c->bq ? d->Lq - i0 : c->bq;
                    const int64_t nk = d->Lk - j0 < c->bk ? d->Lk - j0 : c->bk;
                    attn__tile_class cls = attn__mask_classify(
                        &c->opts->mask, b, h, i0, i0 + nq, j0, j0 + nk, d->Lq,
                        d->Lk);
                    if (cls == ATTN__TILE_EMPTY) continue;
                    load_key_tile(c, w, b, h / d->group, j0, nk);
                    load_query_tile(c, w, b, h, i0, nq);
                    tile_ds(c, w, b, h, i0, nq, j0, nk, cls);
                    fold_ds(c, w, bias, 0, 0, nq, nk, cols);
                }
    add_bias_sums(dbias, bias, bb ? 0 : bb0, hb ? 0 : hh, ib ? 0 : qt * c->bq,
                  rows, jb ? 0 : kt * c->bk, cols, w->bacc);
}

/* ---- the call ---------------------------------------------------------- */

attn_status attn__sdpa_flash_backward(const attn_tensor *q, const attn_tensor *k,
                                      const attn_tensor *v,
                                      const attn_tensor *out, const float *lse,
                                      const attn_tensor *dout,
                                      const attn_sdpa_opts *opts,
                                      const attn__sdpa_dims *d, attn_tensor *dq,
                                      attn_tensor *dk, attn_tensor *dv,
                                      attn_tensor *dbias) {
    bwd_ctx c;
    memset(&c, 0, sizeof c);
    c.q = q;
    c.k = k;
    c.v = v;
    c.dout = dout;
    c.opts = opts;
    c.d = d;
    c.lse = lse;
    bwd_tile_sizes(d, &c.bq, &c.bk);
    c.nqt = (d->Lq + c.bq - 1) / c.bq;
    c.nkt = (d->Lk + c.bk - 1) / c.bk;
    c.drop_threshold = attn__dropout_threshold(opts->dropout_p);
    c.keep_scale = (float)(1.0 / (1.0 - opts->dropout_p));

    const attn_tensor *bias = opts->mask.bias;
    int bias_direct = dbias != NULL;
    for (int a = 0; a < 4 && dbias; a++)
        if (bias_bcast(bias, a)) bias_direct = 0;
    const int bias_pass = dbias && !bias_direct;

    int nt = 1;
#ifdef _OPENMP
    nt = opts->threads > 0 ? opts->threads : omp_get_max_threads();
#endif
    /* Scheme: with enough (batch, kv head) pairs to keep every thread busy,
     * one pass over them computes dK, dV and dQ together (5 tile products
     * instead of 7); otherwise the key-tile pass and a query-tile pass. The
     * two issue the same dQ products in the same order, so the choice (it
     * depends on the thread count) does not change a bit. dq is accumulated
     * in place, which needs unit-stride rows; other layouts go through a
     * contiguous temporary. */
    const int one_pass = d->B * d->Hkv >= 2 * (int64_t)nt;
    const int dq_direct = (dq->stride[3] == 1 || d->Dk == 1) &&
                          (d->Lq == 1 || dq->stride[2] >= d->Dk);
    const int64_t rows = d->B * d->H * d->Lq;
    const size_t wf = work_floats(c.bq, c.bk, d);
    float *dvec = attn__alloc((size_t)rows, sizeof(float), "flash backward D");
    float *ws = attn__alloc((size_t)nt * wf, sizeof(float), "flash backward tiles");
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

    const int blas_saved = openblas_get_num_threads();
    openblas_set_num_threads(1); /* BLAS stays on the calling thread */
    const int64_t nkt_task = one_pass ? 1 : c.nkt;
    const int64_t n_kv = d->B * d->Hkv * nkt_task;
    const int64_t n_q = one_pass ? 0 : d->B * d->H * c.nqt;
    int64_t n_bias = 0;
    if (bias_pass)
        n_bias = (bias_bcast(bias, 0) ? 1 : d->B) *
                 (bias_bcast(bias, 1) ? 1 : d->H) *
                 (bias_bcast(bias, 2) ? 1 : c.nqt) *
                 (bias_bcast(bias, 3) ? 1 : c.nkt);
#pragma omp parallel num_threads(nt)
    {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        work w;
        work_carve(&w, ws + (size_t)tid * wf,
                   wb ? wb + (size_t)tid * (size_t)(c.bq * c.bk) : NULL, c.bq,
                   c.bk, d);
        /* D_i = dO_i . O_i, in double for a clean cancellation */
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            const int64_t i = r % d->Lq, h = (r / d->Lq) % d->H;
            const int64_t b = r / (d->Lq * d->H);
            double s = 0;
            for (int64_t x = 0; x < d->Dv; x++)
                s += attn_tensor_get(dout, b, h, i, x) *
                     attn_tensor_get(out, b, h, i, x);
            dvec[r] = (float)s;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < n_kv; t++)
            pass_kv(&c, &w, t, nkt_task, dk, dv, one_pass ? &dqa : NULL,
                    bias_direct ? dbias : NULL);
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < n_q; t++)
            pass_q(&c, &w, t, &dqa, bias_direct ? dbias : NULL);
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < n_bias; t++) pass_bias(&c, &w, t, dbias);
    }
    openblas_set_num_threads(blas_saved);
    if (!dq_direct)
        for (int64_t b = 0; b < d->B; b++)
            for (int64_t h = 0; h < d->H; h++)
                add_rows(dq, b, h, 0, d->Lq, dqt + (b * d->H + h) * d->Lq * d->Dk);
    attn__free(dqt);
    attn__free(dvec);
    attn__free(ws);
    attn__free(wb);
    return ATTN_OK;
}
