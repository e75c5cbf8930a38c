/* Attention weights from the flash path without the Lq x Lk matrix: a
 * second pass over (query tile, key tile) that recomputes the scores and
 * normalizes them with the log-sum-exp the forward saved,
 *   W = exp(scale * Q K^T + bias - lse)      (masked: 0)
 * (or exp(s - m) / l with the forward's row max m and sum l, which keeps
 * the accuracy of a plain softmax when scores are large)
 * handed tile by tile to a callback (attn_sdpa_weight_tiles), or written
 * with dropout into a weights tensor (attn__flash_fill_weights). */
#include "rope.h"
#include "flash.h"
#include "tile.h"

#include <math.h>
#include <omp.h>
#include <string.h>

typedef struct {
    const attn_tensor *q, *k;
    const attn_sdpa_opts *opts;
    const attn__sdpa_dims *d;
    const float *m, *l; /* per row: exp(s - m) / l; l NULL means 1 */
    int64_t bq, bk;
    size_t s_off, q_off, k_off, b_off, kp_off,
        total; /* floats of a thread's workspace */
    const attn__vec_ops *vec;
    attn__ufn_err err; /* the first failure of a user function */
} wctx;

/* The forward's tile sizes and tile products (tile.h): the scores are
 * recomputed bit for bit. */
static void wctx_init(wctx *c, const attn_tensor *q, const attn_tensor *k,
                      const attn_sdpa_opts *opts, const attn__sdpa_dims *d,
                      const float *m, const float *l) {
    c->q = q;
    c->k = k;
    c->opts = opts;
    c->d = d;
    c->m = m;
    c->l = l;
    attn__flash_tile_sizes(d, &c->bq, &c->bk);
    size_t at = 0;
    c->s_off = attn__ws_take(&at, (size_t)(c->bq * c->bk));
    c->q_off = attn__ws_take(&at, (size_t)(c->bq * d->Dk));
    c->k_off = attn__ws_take(&at, (size_t)(c->bk * d->Dk));
    c->b_off = attn__ws_take(&at, attn__flash_blocks_floats(d, c->bq));
    c->kp_off = attn__ws_take(&at, attn__tile_nt_pack_floats(c->bk, d->Dk));
    c->total = at;
    c->vec = attn__vec_get();
    memset(&c->err, 0, sizeof c->err);
}

/* Weights of rows i0.., keys j0.. into S (ld bk); Q is rows i0.. of q. The
 * tile is split into the forward's blocks, so the scores are recomputed by
 * the same sgemm calls; entries outside the blocks are masked: 0. */
static int weight_tile(wctx *c, float *ws, int64_t b, int64_t h, int64_t i0,
                       int64_t ni, int64_t j0, int64_t nj, const float *Q,
                       int64_t ldq) {
    const attn__sdpa_dims *d = c->d;
    const attn_mask *m = &c->opts->mask;
    float *S = ws + c->s_off;
    attn__flash_block *blocks = (attn__flash_block *)(void *)(ws + c->b_off);
    for (int64_t r = 0; r < ni; r++)
        memset(S + r * c->bk, 0, (size_t)nj * sizeof(float));
    attn__tile_class cls =
        attn__mask_classify(m, b, h, i0, i0 + ni, j0, j0 + nj, d->Lq, d->Lk);
    int64_t nb =
        attn__flash_split_tile(m, d, b, h, i0, ni, j0, nj, cls, blocks);
    if (nb == 0) return 0;
    int64_t ldk;
    const float *K =
        attn__flash_rows(c->k, b, h / d->group, j0, nj, ws + c->k_off, &ldk);
    attn__tile_bt kt;
    attn__tile_bt_prepare(&kt, nj, d->Dk, K, ldk, ws + c->kp_off);
    for (int64_t x = 0; x < nb; x++) {
        const attn__flash_block *bl = &blocks[x];
        int64_t ro = bl->r0 - i0, co = bl->c0 - j0;
        float *Sb = S + ro * c->bk + co;
        attn__tile_nt(bl->nr, co, bl->nc, (float)d->scale, Q + ro * ldq, ldq,
                      &kt, Sb, c->bk);
        for (int64_t r = 0; r < bl->nr; r++) {
            float *s = Sb + r * c->bk;
            int64_t row = (b * d->H + h) * d->Lq + bl->r0 + r;
            float mr = c->m[row];
            if (mr == -INFINITY) { /* fully masked row: weights 0 */
                memset(s, 0, (size_t)bl->nc * sizeof(float));
                continue;
            }
            if (attn__flash_row_needed(m, bl->cls) &&
                attn__flash_score_row(m, d, b, h, bl->r0 + r, bl->c0, bl->nc,
                                      bl->cls, s, NULL, NULL, &c->err))
                return 1;
            c->vec->exp_sub_sum(s, bl->nc, mr);
            if (c->l) c->vec->scale(s, bl->nc, 1.0f / c->l[row]);
        }
    }
    return 0;
}

attn_status attn_sdpa_weight_tiles(const attn_tensor *q, const attn_tensor *k,
                                   const float *lse, const attn_sdpa_opts *opts,
                                   attn_weight_tile_fn fn, void *user) {
    attn__sdpa_dims d;
    /* k stands in for v: only q, k and the mask matter here */
    attn_status st = attn__sdpa_check(q, k, k, opts, NULL, NULL, 0, &d);
    if (st) return st;
    if (!lse) return attn__fail(ATTN_E_INVALID, "lse is NULL");
    if (!fn)
        return attn__fail(ATTN_E_INVALID, "fn (the tile callback) is NULL");
    if ((st = attn__flash_check_dims(&d, "weight tiles"))) return st;
    if (opts->rope) { /* the rotated q and k, then the plain call */
        attn__rope_qk r;
        if ((st = attn__rope_qk_make(q, k, NULL, opts, &r))) return st;
        st = attn_sdpa_weight_tiles(&r.q, &r.k, lse, &r.opts, fn, user);
        attn__rope_qk_free(&r);
        return st;
    }
    wctx c;
    wctx_init(&c, q, k, opts, &d, lse, NULL);
    float *ws = attn__alloc(c.total, sizeof(float), "weight tile workspace");
    if (!ws) return ATTN_E_NOMEM;
    int saved = attn__blas_single_begin();
    int stop = 0;
    for (int64_t b = 0; b < d.B && !stop; b++)
        for (int64_t h = 0; h < d.H && !stop; h++)
            for (int64_t i0 = 0; i0 < d.Lq && !stop; i0 += c.bq) {
                int64_t ni = d.Lq - i0 < c.bq ? d.Lq - i0 : c.bq, ldq;
                const float *Q =
                    attn__flash_rows(q, b, h, i0, ni, ws + c.q_off, &ldq);
                for (int64_t j0 = 0; j0 < d.Lk && !stop; j0 += c.bk) {
                    int64_t nj = d.Lk - j0 < c.bk ? d.Lk - j0 : c.bk;
                    if (weight_tile(&c, ws, b, h, i0, ni, j0, nj, Q, ldq))
                        break;
                    stop =
                        fn(user, b, h, i0, ni, j0, nj, ws + c.s_off, c.bk) != 0;
                }
                stop |= c.err.what != 0;
            }
    attn__blas_single_end(saved);
    attn__free(ws);
    return attn__ufn_status(&c.err);
}

attn_status attn__flash_fill_weights(const attn_tensor *q, const attn_tensor *k,
                                     const attn_sdpa_opts *opts,
                                     const attn__sdpa_dims *d,
                                     const float *mrow, const float *lrow,
                                     attn_tensor *weights) {
    wctx c;
    wctx_init(&c, q, k, opts, d, mrow, lrow);
    const int64_t nqt = (d->Lq + c.bq - 1) / c.bq, items = d->B * d->H * nqt;
    int nt = attn__flash_team_size(opts, items);
    float *ws = attn__alloc((size_t)nt * c.total, sizeof(float),
                            "weight pass workspace");
    if (!ws) return ATTN_E_NOMEM;
    const double p = opts->dropout_p;
    int saved = attn__blas_single_begin();
#pragma omp parallel num_threads(nt)
    {
        float *mine = ws + (size_t)omp_get_thread_num() * c.total;
#pragma omp for schedule(dynamic, 1)
        for (int64_t it = 0; it < items; it++) {
            int64_t bh = it / nqt, b = bh / d->H, h = bh % d->H;
            int64_t i0 = (it % nqt) * c.bq, ldq;
            int64_t ni = d->Lq - i0 < c.bq ? d->Lq - i0 : c.bq;
            if (attn__ufn_failed(&c.err)) continue;
            const float *Q =
                attn__flash_rows(q, b, h, i0, ni, mine + c.q_off, &ldq);
            for (int64_t j0 = 0; j0 < d->Lk; j0 += c.bk) {
                int64_t nj = d->Lk - j0 < c.bk ? d->Lk - j0 : c.bk;
                if (weight_tile(&c, mine, b, h, i0, ni, j0, nj, Q, ldq)) break;
                for (int64_t r = 0; r < ni; r++) {
                    float *s = mine + c.s_off + r * c.bk;
                    if (p > 0)
                        attn__flash_dropout_row(opts->seed, p, b, h, i0 + r, j0,
                                                nj, s);
                    float *w = (float *)weights->data +
                               attn__off(weights, b, h, i0 + r, j0);
                    for (int64_t j = 0; j < nj; j++)
                        w[j * weights->stride[3]] = s[j];
                }
            }
        }
    }
    attn__blas_single_end(saved);
    attn__free(ws);
    return attn__ufn_status(&c.err);
}
