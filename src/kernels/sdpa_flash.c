/* The flash forward kernel: attention in O(threads x tile) memory.
 *
 * For each (batch, head, query tile) -- the unit of OpenMP work -- stream
 * the key/value tiles in a fixed order:
 *   S = scale * Q_t K_t^T                      (attn__tile_nt, tile.h)
 *   mask + bias on S, row by row, only for tiles the mask classifies as
 *   PARTIAL (or when there is a bias); EMPTY tiles are skipped entirely
 *   online softmax per row: m' = max(m, max S), P = exp(S - m'),
 *   l = l e^(m - m') + sum P, O_t *= e^(m - m')
 *   dropout on P (l keeps the un-dropped sum: lse is the softmax's)
 *   O_t += P V_t                               (attn__tile_nn_acc)
 * and finally O = O_t / l, lse = m + log l (a row that saw no visible key
 * keeps m = -inf: O = 0, lse = -inf, and no exp(-inf - -inf) is formed).
 *
 * Each output row is computed by one thread in a fixed key order with tile
 * sizes that depend only on the shapes, so any thread count gives the same
 * bits. */
#include "flash.h"
#include "tile.h"
#include "tile_bf16.h"

#include <limits.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#ifdef ATTN_FLASH_PROFILE
/* Build with -DATTN_FLASH_PROFILE to time the phases of the forward (cycles
 * of a 1-thread call, printed to stderr after it). */
#include <stdio.h>
#include <x86intrin.h>
static unsigned long long prof[8];
static const char *const prof_name[8] = {
    "load+pack", "scores", "softmax (mask, max, exp, sum, rescale)",
    "-",         "-",      "-",
    "P V",       "finish"};
#define PROF_T0() unsigned long long prof_t = __rdtsc()
#define PROF(i)                                                                \
    do {                                                                       \
        unsigned long long prof_n = __rdtsc();                                 \
        prof[i] += prof_n - prof_t;                                            \
        prof_t = prof_n;                                                       \
    } while (0)
static void prof_print(void) {
    /* each phase's least time over the calls so far (a shared machine's
     * preemptions fall on some calls) */
    static unsigned long long best[8];
    unsigned long long tot = 0;
    for (int i = 0; i < 8; i++) {
        if (!best[i] || prof[i] < best[i]) best[i] = prof[i];
        prof[i] = 0;
        tot += best[i];
    }
    for (int i = 0; i < 8; i++)
        fprintf(stderr, "%s %.1f%%  ", prof_name[i],
                tot ? 100.0 * (double)best[i] / (double)tot : 0.0);
    fprintf(stderr, "(%.2f Mcycles)\n", 1e-6 * (double)tot);
}
#else
#define PROF_T0() (void)0
#define PROF(i) (void)0
static void prof_print(void) {}
#endif

/* Floats of one thread's workspace, each part rounded up to 64 bytes. */
typedef struct {
    size_t s, o, m, l, q, k, v, kp, blk, total;
    /* the bf16 path: Q rows, raw K or V rows, packed K and V, P (bf16) */
    size_t qb, raw, kpb, vpb, pb;
    int64_t ldqb, ldpb, lds; /* lds: S's row stride */
} ws_layout;

/* q, k, v rows read in place (qd, kd, vd) need no buffer. */
static ws_layout layout_of(const attn__sdpa_dims *d, int64_t bq, int64_t bk,
                           int qd, int kd, int vd, int bf16) {
    ws_layout w;
    size_t at = 0;
    memset(&w, 0, sizeof w);
    /* the bf16 path takes rows in bands of BF16_ROWS, and AMX stores whole
     * tiles: 32 rows at least, whole panels of 32 keys */
    const int64_t srows = bf16 && bq < 32 ? 32 : bq;
    w.lds = bf16 ? (bk + 31) / 32 * 32 : bk;
    w.s = attn__ws_take(&at, (size_t)(srows * w.lds));
    w.o = attn__ws_take(&at, (size_t)(bq * d->Dv));
    w.m = attn__ws_take(&at, (size_t)bq);
    w.l = attn__ws_take(&at, (size_t)bq);
    w.q = attn__ws_take(&at, qd ? 0 : (size_t)(bq * d->Dk));
    w.k = attn__ws_take(&at, kd ? 0 : (size_t)(bk * d->Dk));
    w.v = attn__ws_take(&at, vd ? 0 : (size_t)(bk * d->Dv));
    w.kp = attn__ws_take(&at, attn__tile_nt_pack_floats(bk, d->Dk));
    w.blk = attn__ws_take(&at, attn__flash_blocks_floats(d, bq));
    if (bf16) {
        /* bf16 counts in floats (two to a float); rows padded to even */
        const int64_t D = d->Dk > d->Dv ? d->Dk : d->Dv;
        w.ldqb = (d->Dk + 1) & ~(int64_t)1;
        w.ldpb = (bk + 3) & ~(int64_t)1;
        w.qb = attn__ws_take(&at, (size_t)(bq * w.ldqb) / 2);
        w.raw = attn__ws_take(&at, (size_t)(bk * D + 1) / 2);
        w.kpb = attn__ws_take(&at, attn__bf16_pack_elems(bk, d->Dk) / 2 + 1);
        w.vpb = attn__ws_take(&at, attn__bf16_pack_elems(d->Dv, bk) / 2 + 1);
        w.pb = attn__ws_take(&at, (size_t)(bq * w.ldpb) / 2);
    }
    w.total = at;
    return w;
}

typedef struct {
    const attn_tensor *q, *k, *v;
    const attn_sdpa_opts *opts;
    const attn__sdpa_dims *d;
    /* the mask's frame (attn__flash_pos): md = d with the full sequence's
     * lengths; query row i and key j are rows i + qpos, j + kpos of it */
    attn__sdpa_dims md;
    int64_t qpos, kpos;
    attn_tensor *out;
    float *lse, *mrow, *lrow;
    int64_t bq, bk, nqt, nkt;
    ws_layout w;
    const attn__vec_ops *vec;
    int bf16; /* bf16 inputs on AVX512_BF16: bf16 products (tile_bf16.h) */
    int amx;  /* ... on AMX: raw scores, the softmax scales and rounds   */
    attn__ufn_err *err; /* the first failure of a user function */
} fwd_ctx;

/* The operands of one key tile's products: f32 rows (Q, K prepared, V) or,
 * on the bf16 path, Q's bf16 rows and the packed K and V of nj keys. */
typedef struct {
    const float *q, *v;
    int64_t ldq, ldv;
    const attn__tile_bt *k;
    const uint16_t *qb, *kpb, *vpb;
    int64_t nj;
} operands;

/* Rows of a block taken at once by the micro-kernels: their scores stay in
 * L1 (16 x 256 floats) from the product through the softmax to P V. */
#define FUSED_ROWS 16
/* ... by the bf16 products: two AMX tiles of rows */
#define BF16_ROWS 32

/* The online softmax's step for a row once its new maximum mnew =
 * max(block maximum, M) (finite) and the block's sum of exp(s - mnew) are
 * known: rescale l and O to the new maximum, add the sum. */
static void online_update(const attn__vec_ops *vec, float mnew, float sum,
                          float *M, float *L, float *O, int64_t Dv) {
    if (mnew != *M) {
        /* the first visible block of a row has M = -inf and O = 0 */
        if (*M != -INFINITY) {
            float corr = expf(*M - mnew);
            *L *= corr;
            vec->scale(O, Dv, corr);
        }
        *M = mnew;
    }
    *L += sum;
}

/* The bf16 path's rows ra .. ra+rn-1 of a block (as fwd_rows): the scores
 * on the bf16 products, the online softmax in f32, P rounded to bf16 in
 * pairs aligned on the packed V's (zeros around), O += P V on the bf16
 * products. On AMX the scores come raw (unscaled, whole tiles) and, where
 * no mask, dropout or negative scale needs them scaled first, one pass
 * takes them to P: exp(scale s - m) rounded, its f32 sum kept for l. */
static int fwd_rows_bf16(const fwd_ctx *c, float *ws, int64_t b, int64_t h,
                         int64_t i0, const attn__flash_block *blk, int64_t j0,
                         const operands *x, int64_t ra, int64_t nr) {
    const attn__sdpa_dims *d = c->d;
    const attn_mask *mask = &c->opts->mask;
    const attn__vec_ops *vec = c->vec;
    const int64_t Dv = d->Dv, lds = c->w.lds, nc = blk->nc;
    const int64_t ro = blk->r0 + ra - i0, co = blk->c0 - j0;
    const double p = c->opts->dropout_p;
    const float alpha = (float)d->scale;
    float *S = ws + c->w.s, *O = ws + c->w.o + ro * Dv;
    float *M = ws + c->w.m + ro, *L = ws + c->w.l + ro;
    const int need_mask = attn__flash_row_needed(mask, blk->cls);
    const int64_t p0 = co / 2, p1 = (co + nc + 1) / 2, ld = c->w.ldpb;
    uint16_t *P = (uint16_t *)(void *)(ws + c->w.pb);
    const int raw = c->amx;
    const int fused = raw && !need_mask && p == 0 && alpha > 0;
    PROF_T0();
    if (raw) {
        attn__amx_bf16_nt_raw(nr, co / 32, (co + nc + 31) / 32, d->Dk,
                              x->qb + ro * c->w.ldqb, c->w.ldqb, x->kpb, S,
                              lds);
        S += co; /* the block's first key */
    } else {
        attn__bf16_nt(nr, co, nc, d->Dk, alpha, x->qb + ro * c->w.ldqb,
                      c->w.ldqb, x->kpb, S, lds);
    }
    PROF(1);
    for (int64_t r = 0; r < nr; r++) {
        float *s = S + r * lds;
        uint16_t *row = P + r * ld, *pr = row + (co - 2 * p0);
        const int64_t gi = blk->r0 + ra + r;
        row[0] = row[2 * (p1 - p0) - 1] = 0;
        if (raw && !fused) vec->scale(s, nc, alpha);
        if (need_mask &&
            attn__flash_score_row(mask, &c->md, b, h, gi, blk->c0, nc, blk->cls,
                                  s, NULL, NULL, c->err))
            return 1;
        const float mx = vec->max(s, nc);
        const float bm = fused ? alpha * mx : mx;
        const float mnew = bm > M[r] ? bm : M[r];
        if (mnew == -INFINITY) {
            /* nothing visible in this row so far: P = 0 */
            memset(pr, 0, (size_t)nc * sizeof *pr);
            continue;
        }
        float sum;
        if (fused) {
            sum = attn__vec_exp_bf16(s, nc, alpha, mnew, pr);
        } else {
            sum = vec->exp_sub_sum(s, nc, mnew);
            if (p > 0)
                attn__flash_dropout_row(c->opts->seed, p, b, h, gi, blk->c0, nc,
                                        s);
            attn__bf16_from_f32(s, nc, pr);
        }
        online_update(vec, mnew, sum, &M[r], &L[r], O + r * Dv, Dv);
    }
    PROF(2);
    attn__bf16_nn_acc(nr, Dv, x->nj, p0, p1, P, ld, x->vpb, O, Dv, 1.0f);
    PROF(6);
    return 0;
}

/* Rows ra .. ra+rn-1 of a block of a tile: S = scale Q K^T over those rows
 * (of the query tile that starts at i0) and the block's keys c0.., the
 * online softmax on them, and O += P V. K and V are the key tile's rows
 * starting at key j0. Rows and keys (i0, j0 and the block's) are positions
 * in the mask's frame. */
static int fwd_rows(const fwd_ctx *c, float *ws, int64_t b, int64_t h,
                    int64_t i0, const attn__flash_block *blk, int64_t j0,
                    const operands *x, int64_t ra, int64_t rn) {
    const attn__sdpa_dims *d = c->d;
    const attn_mask *mask = &c->opts->mask;
    const attn__vec_ops *vec = c->vec;
    const int64_t Dv = d->Dv, lds = c->bk, nr = rn, nc = blk->nc;
    const int64_t ro = blk->r0 + ra - i0, co = blk->c0 - j0;
    const double p = c->opts->dropout_p;
    float *S = ws + c->w.s, *O = ws + c->w.o + ro * Dv;
    float *M = ws + c->w.m + ro, *L = ws + c->w.l + ro;
    const int need_mask = attn__flash_row_needed(mask, blk->cls);
    /* the row maxima from the micro-kernels' registers, when nothing
     * changes the scores after the product */
    float rmax[FUSED_ROWS];
    int have_max = 0;
    PROF_T0();
    if (!need_mask && nr <= FUSED_ROWS)
        have_max =
            attn__tile_nt_max(nr, co, nc, (float)d->scale, x->q + ro * x->ldq,
                              x->ldq, x->k, S, lds, rmax);
    if (!have_max)
        attn__tile_nt(nr, co, nc, (float)d->scale, x->q + ro * x->ldq, x->ldq,
                      x->k, S, lds);
    PROF(1);
    for (int64_t r = 0; r < nr; r++) {
        float *s = S + r * lds;
        const int64_t gi = blk->r0 + ra + r;
        if (need_mask &&
            attn__flash_score_row(mask, &c->md, b, h, gi, blk->c0, nc, blk->cls,
                                  s, NULL, NULL, c->err))
            return 1;
        float mx = have_max ? rmax[r] : vec->max(s, nc);
        float mnew = mx > M[r] ? mx : M[r];
        if (mnew == -INFINITY) {
            /* nothing visible in this row so far: P = 0 (no -inf - -inf) */
            memset(s, 0, (size_t)nc * sizeof(float));
            continue;
        }
        float sum = vec->exp_sub_sum(s, nc, mnew);
        online_update(vec, mnew, sum, &M[r], &L[r], O + r * Dv, Dv);
        if (p > 0)
            attn__flash_dropout_row(c->opts->seed, p, b, h, gi, blk->c0, nc, s);
    }
    PROF(2);
    attn__tile_nn_acc(nr, Dv, nc, 1.0f, S, lds, x->v + co * x->ldv, x->ldv, O,
                      Dv);
    PROF(6);
    return 0;
}

/* One block of a tile. The micro-kernels' bits and the bf16 products' do
 * not depend on how rows are cut (tile.h, tile_bf16.h), so they take the
 * block in chunks of FUSED_ROWS or BF16_ROWS rows; BLAS takes it whole, as
 * the weight pass does. */
static int fwd_block(const fwd_ctx *c, float *ws, int64_t b, int64_t h,
                     int64_t i0, const attn__flash_block *blk, int64_t j0,
                     const operands *x) {
    if (c->bf16) {
        for (int64_t ra = 0; ra < blk->nr; ra += BF16_ROWS)
            if (fwd_rows_bf16(c, ws, b, h, i0, blk, j0, x, ra,
                              blk->nr - ra < BF16_ROWS ? blk->nr - ra
                                                       : BF16_ROWS))
                return 1;
        return 0;
    }
    if (!x->k->packed) return fwd_rows(c, ws, b, h, i0, blk, j0, x, 0, blk->nr);
    for (int64_t ra = 0; ra < blk->nr; ra += FUSED_ROWS)
        if (fwd_rows(c, ws, b, h, i0, blk, j0, x, ra,
                     blk->nr - ra < FUSED_ROWS ? blk->nr - ra : FUSED_ROWS))
            return 1;
    return 0;
}

static void vec_scale_row(float *x, int64_t n, float a) {
    for (int64_t e = 0; e < n; e++) x[e] *= a;
}

/* Rows r0 .. r0+n-1 of a bf16 tensor's (b, h): in place when its rows are
 * contiguous, else copied to buf (ld D). */
static const uint16_t *bf16_rows(const attn_tensor *t, int64_t b, int64_t h,
                                 int64_t r0, int64_t n, uint16_t *buf,
                                 int64_t *ld) {
    const int64_t D = t->shape[3];
    if ((t->stride[3] == 1 || D == 1) && (n == 1 || t->stride[2] >= D)) {
        *ld = n > 1 ? t->stride[2] : D;
        return (const uint16_t *)t->data + attn__off(t, b, h, r0, 0);
    }
    attn__flash_bf16_rows(t, b, h, r0, n, buf, D);
    *ld = D;
    return buf;
}

/* One (b, h, query tile): rows i0 .. i0+ni-1. */
static void fwd_tile(const fwd_ctx *c, float *ws, int64_t b, int64_t h,
                     int64_t qt) {
    const attn__sdpa_dims *d = c->d;
    const attn_mask *mask = &c->opts->mask;
    const int64_t i0 = qt * c->bq;
    const int64_t ni = d->Lq - i0 < c->bq ? d->Lq - i0 : c->bq;
    const int64_t hk = h / d->group, Dv = d->Dv;
    float *O = ws + c->w.o, *M = ws + c->w.m, *L = ws + c->w.l;
    attn__flash_block *blocks = (attn__flash_block *)(void *)(ws + c->w.blk);

    for (int64_t r = 0; r < ni; r++) {
        M[r] = -INFINITY;
        L[r] = 0.0f;
    }
    memset(O, 0, (size_t)(ni * Dv) * sizeof(float));
    const float *Q = NULL;
    int64_t ldq = 0;
    for (int64_t kt = 0; kt < c->nkt; kt++) {
        const int64_t j0 = kt * c->bk;
        const int64_t nj = d->Lk - j0 < c->bk ? d->Lk - j0 : c->bk;
        /* classify and split in the mask's frame (global positions) */
        const int64_t gi = i0 + c->qpos, gj = j0 + c->kpos;
        attn__tile_class cls = attn__mask_classify(mask, b, h, gi, gi + ni, gj,
                                                   gj + nj, c->md.Lq, c->md.Lk);
        int64_t nb = attn__flash_split_tile(mask, &c->md, b, h, gi, ni, gj, nj,
                                            cls, blocks);
        if (nb == 0) continue;
        PROF_T0();
        operands x;
        attn__tile_bt kt;
        memset(&x, 0, sizeof x);
        x.nj = nj;
        if (c->bf16) {
            uint16_t *qb = (uint16_t *)(void *)(ws + c->w.qb);
            uint16_t *raw = (uint16_t *)(void *)(ws + c->w.raw);
            uint16_t *kp = (uint16_t *)(void *)(ws + c->w.kpb);
            uint16_t *vp = (uint16_t *)(void *)(ws + c->w.vpb);
            if (!Q) {
                attn__flash_bf16_rows(c->q, b, h, i0, ni, qb, c->w.ldqb);
                Q = ws; /* loaded */
            }
            int64_t ld;
            const uint16_t *rows = bf16_rows(c->k, b, hk, j0, nj, raw, &ld);
            attn__bf16_pack_nt(nj, d->Dk, rows, ld, kp);
            rows = bf16_rows(c->v, b, hk, j0, nj, raw, &ld);
            attn__bf16_pack_nn(nj, Dv, rows, ld, vp);
            x.qb = qb;
            x.kpb = kp;
            x.vpb = vp;
        } else {
            if (!Q) Q = attn__flash_rows(c->q, b, h, i0, ni, ws + c->w.q, &ldq);
            int64_t ldk;
            const float *K =
                attn__flash_rows(c->k, b, hk, j0, nj, ws + c->w.k, &ldk);
            x.v = attn__flash_rows(c->v, b, hk, j0, nj, ws + c->w.v, &x.ldv);
            attn__tile_bt_prepare(&kt, nj, d->Dk, K, ldk, ws + c->w.kp);
            x.q = Q;
            x.ldq = ldq;
            x.k = &kt;
        }
        PROF(0);
        for (int64_t xb = 0; xb < nb; xb++)
            if (fwd_block(c, ws, b, h, gi, &blocks[xb], gj, &x))
                return; /* a user function failed: the call reports it */
    }
    /* O / l and lse; a row with no visible key stays 0 with lse = -inf */
    PROF_T0();
    attn_tensor *out = c->out;
    float *od = out->data;
    const float sink = attn__flash_sink(mask, h);
    for (int64_t r = 0; r < ni; r++) {
        int64_t i = i0 + r;
        if (sink > -INFINITY) {
            /* the sink joins the denominator: rescale to m = max(M, sink) */
            float mn = M[r] > sink ? M[r] : sink;
            float corr = M[r] > -INFINITY ? expf(M[r] - mn) : 0.0f;
            L[r] = L[r] * corr + expf(sink - mn);
            vec_scale_row(O + r * Dv, Dv, corr);
            M[r] = mn;
        }
        float inv = L[r] > 0.0f ? 1.0f / L[r] : 0.0f;
        float *orow = od + attn__off(out, b, h, i, 0);
        const float *src = O + r * Dv;
        if (out->stride[3] == 1)
            for (int64_t e = 0; e < Dv; e++) orow[e] = src[e] * inv;
        else
            for (int64_t e = 0; e < Dv; e++)
                orow[e * out->stride[3]] = src[e] * inv;
        int64_t row = (b * d->H + h) * d->Lq + i;
        if (c->lse) c->lse[row] = L[r] > 0.0f ? M[r] + logf(L[r]) : -INFINITY;
        if (c->mrow) {
            c->mrow[row] = M[r];
            c->lrow[row] = L[r];
        }
    }
    PROF(7);
}

attn_status attn__sdpa_flash_forward(const attn_tensor *q, const attn_tensor *k,
                                     const attn_tensor *v,
                                     const attn_sdpa_opts *opts,
                                     const attn__sdpa_dims *d, attn_tensor *out,
                                     float *lse) {
    return attn__flash_forward_ml(q, k, v, opts, d, out, lse, NULL, NULL);
}

attn_status attn__flash_forward_ml(const attn_tensor *q, const attn_tensor *k,
                                   const attn_tensor *v,
                                   const attn_sdpa_opts *opts,
                                   const attn__sdpa_dims *d, attn_tensor *out,
                                   float *lse, float *mrow, float *lrow) {
    return attn__flash_forward_at(q, k, v, opts, d, NULL, out, lse, mrow, lrow);
}

attn_status attn__flash_forward_at(const attn_tensor *q, const attn_tensor *k,
                                   const attn_tensor *v,
                                   const attn_sdpa_opts *opts,
                                   const attn__sdpa_dims *d,
                                   const attn__flash_pos *pos, attn_tensor *out,
                                   float *lse, float *mrow, float *lrow) {
    attn_status st = attn__flash_check_dims(d, "flash");
    if (st) return st;
    fwd_ctx c;
    attn__flash_frame(d, pos, &c.md, &c.qpos, &c.kpos);
    c.mrow = mrow;
    c.lrow = lrow;
    c.q = q;
    c.k = k;
    c.v = v;
    c.opts = opts;
    c.d = d;
    c.out = out;
    c.lse = lse;
    attn__flash_tile_sizes(d, &c.bq, &c.bk);
    c.nqt = (d->Lq + c.bq - 1) / c.bq;
    c.nkt = (d->Lk + c.bk - 1) / c.bk;
    /* bf16 products when asked, for bf16 inputs, where the CPU has them;
     * not when the weight pass follows (mrow): it recomputes the scores in
     * f32 */
    c.bf16 = q->dtype == ATTN_BF16 && k->dtype == ATTN_BF16 &&
             v->dtype == ATTN_BF16 && !mrow &&
             attn__bf16_tiles_chosen(opts->impl);
    c.amx = c.bf16 && attn__isa_get() == ATTN__ISA_AMX;
    c.w = layout_of(d, c.bq, c.bk, attn__flash_rows_direct(q) || c.bf16,
                    attn__flash_rows_direct(k) || c.bf16,
                    attn__flash_rows_direct(v) || c.bf16, c.bf16);
    c.vec = attn__vec_get();
    attn__ufn_err err;
    memset(&err, 0, sizeof err);
    c.err = &err;
    int64_t items;
    if (!attn__mul_i64(d->B * d->H, c.nqt, &items))
        return attn__fail(ATTN_E_NOMEM, "flash: too many query tiles");
    int nt = attn__flash_team_size(opts, items);
    float *ws = attn__alloc((size_t)nt * c.w.total, sizeof(float),
                            "flash forward workspace");
    if (!ws) return ATTN_E_NOMEM;
    int saved = attn__blas_single_begin();
#pragma omp parallel num_threads(nt)
    {
        float *mine = ws + (size_t)omp_get_thread_num() * c.w.total;
        /* the longest tiles first (causal: the last query tiles), so that
         * the dynamic schedule ends with short ones */
#pragma omp for schedule(dynamic, 1)
        for (int64_t it = 0; it < items; it++) {
            int64_t qt = c.nqt - 1 - it % c.nqt, bh = it / c.nqt;
            if (!attn__ufn_failed(&err))
                fwd_tile(&c, mine, bh / d->H, bh % d->H, qt);
        }
    }
    attn__blas_single_end(saved);
    attn__free(ws);
    prof_print();
    return attn__ufn_status(&err);
}
