/* Attention of new queries over a KV cache (attn_sdpa_cached): argument
 * checks, the double reference over the stored values, and the split-key
 * kernel.
 *
 * The kernel's unit of work is (batch entry b, KV head hk, key chunk c):
 * the G = H / Hkv query heads of hk and all Lq queries (R = G Lq rows)
 * against keys [c CHUNK, (c + 1) CHUNK), so each K/V row is read from
 * memory once per step. A unit yields, per row, the chunk's max m, sum l
 * and unnormalized output O; the partials of (b, hk) are folded in chunk
 * order, so the result does not depend on how units were spread over
 * threads. CHUNK is fixed, and the units run in rounds of a size set by
 * the shapes (it bounds the partials' memory), so the fold is the same
 * sequence of operations on any thread count. */
#include "attn_cache.h"
#include "decode.h"
#include "../kernels/flash.h"
#include "kv_cache.h"
#include "mask.h"
#include "../kernels/rope.h"
#include "../kernels/cpu.h"
#include "../kernels/tile_bf16.h"

#include <math.h>
#include <omp.h>
#include <string.h>

/* Keys per chunk: 256 rows of K and V (256 KB of f32 at D = 128) stay in
 * L2 while the unit works on them. */
#define CHUNK 256
/* Keys per block of the score pass (and of its V prefetch). */
#define PF_KEYS 32
/* Floats of partial results a round may hold (32 MB). */
#define ROUND_FLOATS ((int64_t)8 << 20)
/* Units a round must hold before its fold runs on the team. */
#define FOLD_TEAM 64
/* Multiply-adds below which a call runs on one thread (tens of
 * microseconds: what a parallel region's start and end cost). */
#define SOLO_WORK ((int64_t)1 << 16)

typedef struct {
    int64_t B, H, Hkv, G, Lq, D, Dv;
    double scale;
} dims_t;

/* ---- checks ------------------------------------------------------------- */

static attn_status check_args(const attn_tensor *q, const attn_kv_cache *c,
                              const attn_sdpa_opts *o, const attn_tensor *out,
                              dims_t *dm) {
    ATTN__NONNULL("q, cache, opts, out", q, c, o, out);
    attn_status st;
    if ((st = attn_tensor_check(q, "q")) ||
        (st = attn_tensor_check(out, "out")))
        return st;
    if (q->dtype != ATTN_F32 && q->dtype != ATTN_F16 && q->dtype != ATTN_BF16)
        return attn__fail(ATTN_E_DTYPE,
                          "q has dtype %s; f32, f16 or bf16 is "
                          "needed",
                          attn_dtype_name(q->dtype));
    if (out->dtype != ATTN_F32)
        return attn__fail(ATTN_E_DTYPE, "out must be f32, not %s",
                          attn_dtype_name(out->dtype));
    const attn_kv_cache_config *cc = &c->cfg;
    int64_t B = q->shape[0], H = q->shape[1], Lq = q->shape[2], D = q->shape[3];
    if (B != cc->batch)
        return attn__fail(ATTN_E_SHAPE,
                          "q has batch %lld but the cache has "
                          "%lld entries",
                          (long long)B, (long long)cc->batch);
    if (D != cc->head_dim)
        return attn__fail(ATTN_E_SHAPE,
                          "q has %lld features but the cache's "
                          "keys have %lld",
                          (long long)D, (long long)cc->head_dim);
    if (H % cc->kv_heads != 0)
        return attn__fail(ATTN_E_SHAPE,
                          "q has %lld heads, not a multiple of "
                          "the cache's %lld KV heads",
                          (long long)H, (long long)cc->kv_heads);
    const int64_t want[4] = {B, H, Lq, cc->value_dim};
    for (int a = 0; a < 4; a++)
        if (out->shape[a] != want[a])
            return attn__fail(
                ATTN_E_SHAPE,
                "out has shape (%lld, %lld, %lld, "
                "%lld) but (%lld, %lld, %lld, %lld) is needed",
                (long long)out->shape[0], (long long)out->shape[1],
                (long long)out->shape[2], (long long)out->shape[3],
                (long long)B, (long long)H, (long long)Lq,
                (long long)cc->value_dim);
    for (int a = 0; a < 4; a++) {
        if (q->stride[a] == 0 && q->shape[a] > 1)
            return attn__fail(ATTN_E_SHAPE,
                              "q may not broadcast (stride 0 on "
                              "axis %d)",
                              a);
        if (out->stride[a] == 0 && out->shape[a] > 1)
            return attn__fail(ATTN_E_SHAPE,
                              "out has stride 0 on axis %d: an "
                              "output cannot broadcast",
                              a);
    }
    if (isnan(o->scale) || o->scale < 0 || isinf(o->scale))
        return attn__fail(ATTN_E_INVALID,
                          "scale is %g; it must be positive "
                          "(or 0 for 1/sqrt(D))",
                          o->scale);
    if (o->threads < 0)
        return attn__fail(ATTN_E_INVALID, "threads is %d (< 0)", o->threads);
    if (o->impl != ATTN_IMPL_AUTO && o->impl != ATTN_IMPL_REF &&
        o->impl != ATTN_IMPL_FLASH && o->impl != ATTN_IMPL_FLASH_BF16)
        return attn__fail(ATTN_E_INVALID, "impl is %d: not a kernel",
                          (int)o->impl);
    const attn_mask *m = &o->mask;
    const char *no = o->dropout_p != 0.0 ? "dropout"
                     : m->key_lengths    ? "mask.key_lengths (the cache's "
                                           "lengths are the key lengths)"
                     : m->keep           ? "a keep mask"
                     : m->bias           ? "a bias"
                     : m->block_size     ? "a block-sparse layout"
                     : m->random_block   ? "random blocks"
                     : m->block_mask     ? "a block mask (give mask_mod "
                                           "alone: the cache grows)"
                                         : NULL;
    if (no)
        return attn__fail(ATTN_E_UNSUPPORTED,
                          "attention over a KV cache "
                          "takes causal, window and query lengths only, not "
                          "%s",
                          no);
    /* documents: mk.doc_k holds the cache's ids (attn_sdpa_cached) */
    if (m->doc_q && !m->doc_k)
        return attn__fail(ATTN_E_INVALID,
                          "mask.doc_q is given but the cache holds no "
                          "document ids (append with "
                          "attn_kv_cache_append_docs)");
    attn_mask mk = *m;
    mk.key_lengths = c->len;
    if ((st = attn_mask_check(&mk, B, H, Lq, cc->capacity))) return st;
    if ((st = attn__check_finite(q, "q"))) return st;
    dm->B = B;
    dm->H = H;
    dm->Hkv = cc->kv_heads;
    dm->G = H / cc->kv_heads;
    dm->Lq = Lq;
    dm->D = D;
    dm->Dv = cc->value_dim;
    dm->scale = o->scale > 0 ? o->scale : 1.0 / sqrt((double)D);
    return ATTN_OK;
}

/* Keys [*lo, *hi) that query i of entry b sees: the mask's one rule
 * (attn__mask_row_range) for the parts a cache takes (padding, causal,
 * window), which always leave an interval; mk carries the cache's lengths
 * as its key lengths. Empty: *lo == *hi. */
static void row_range(const attn_mask *mk, int64_t b, int64_t i, int64_t Lq,
                      int64_t cap, int64_t *lo, int64_t *hi) {
    attn__mask_row_range(mk, b, i, Lq, 0, lo, hi);
    if (*hi < *lo) *hi = *lo;
    /* and to the keys of the query's document: still an interval */
    attn__doc_range(mk, b, i, Lq, cap, lo, hi);
}

/* 1 if query i's keys [lo[i], hi[i]) meet [j0, j1). */
static int sees(const int64_t *lo, const int64_t *hi, int64_t i, int64_t j0,
                int64_t j1) {
    return hi[i] > j0 && lo[i] < j1 && lo[i] < hi[i];
}

static void finish_row(float *orow, int64_t ostride, int64_t Dv, double mx,
                       double sum, const double *acc, float *lse_out) {
    for (int64_t d = 0; d < Dv; d++)
        orow[d * ostride] = mx > -INFINITY ? (float)(acc[d] / sum) : 0.0f;
    if (lse_out) *lse_out = mx > -INFINITY ? (float)(mx + log(sum)) : -INFINITY;
}

/* ---- the reference ------------------------------------------------------- */

/* Materialized scores in double over the stored (dequantized) values, one
 * (b, hk) at a time; plain loops, parallel over (b, hk) only. Visibility
 * is asked pair by pair (attn_mask_visible), not through the kernel's row
 * ranges and chunk runs, so the oracle shares with the kernel only the
 * storage and the mask's one rule. */
static attn_status ref_forward(const attn_tensor *q, const attn_kv_cache *c,
                               const attn_sdpa_opts *o, const dims_t *dm,
                               attn_tensor *out, float *lse) {
    attn_mask mk = o->mask, fixed;
    mk.key_lengths = c->len;
    fixed = mk; /* the pairs' visibility; mask_mod is asked per row below */
    fixed.mask_mod = NULL;
    attn__ufn_err err;
    memset(&err, 0, sizeof err);
    const int64_t Lq = dm->Lq, D = dm->D, Dv = dm->Dv, G = dm->G;
    const int64_t cap = c->cfg.capacity, R = G * Lq;
    const int64_t units = dm->B * dm->Hkv;
    int nt = attn__flash_team_size(o, units);
    /* per thread: the scores, q, the output, and (user functions) a row
     * copy and mask_mod's flags */
    const size_t per = (size_t)(R * cap + D + Dv + 2 * cap),
                 rper = (size_t)(D > Dv ? D : Dv);
    double *buf =
        attn__alloc((size_t)nt * per, sizeof(double), "reference scores");
    /* one stored row as f32, per thread (apart: floats are not doubles) */
    float *rows =
        buf ? attn__alloc((size_t)nt * rper, sizeof(float), "reference rows")
            : NULL;
    if (!rows) {
        attn__free(buf);
        return ATTN_E_NOMEM;
    }
#pragma omp parallel for num_threads(nt) schedule(dynamic)
    for (int64_t u = 0; u < units; u++) {
        double *s = buf + (size_t)omp_get_thread_num() * per;
        double *qd = s + R * cap, *acc = qd + D, *old = acc + Dv;
        uint8_t *keep = (uint8_t *)(old + cap);
        float *row = rows + (size_t)omp_get_thread_num() * rper;
        const int64_t b = u / dm->Hkv, hk = u % dm->Hkv, lk = c->len[b];
        for (int64_t r = 0; r < R && !attn__ufn_failed(&err); r++) {
            const int64_t h = hk * G + r / Lq, i = r % Lq;
            for (int64_t d = 0; d < D; d++)
                qd[d] = attn_tensor_get(q, b, h, i, d);
            double *sr = s + r * cap, mx = -INFINITY, sum = 0.0;
            int64_t ulo, uhi; /* mask_mod is asked within the row's range */
            row_range(&mk, b, i, Lq, cap, &ulo, &uhi);
            if (attn__mask_mod_keep(&mk, b, h, i, ulo, uhi - ulo, keep, &err))
                break;
            for (int64_t j = 0; j < lk; j++) {
                sr[j] = -INFINITY; /* visibility by the mask's own rule */
                if ((mk.mask_mod && (j < ulo || j >= uhi || !keep[j - ulo])) ||
                    !attn_mask_visible(&fixed, b, h, i, j, Lq, cap))
                    continue;
                attn__kv_row_to_f32(c->cfg.dtype, attn__kv_krow(c, b, hk, j),
                                    attn__kv_kscale(c, b, hk, j), D, row);
                double a = 0.0;
                for (int64_t d = 0; d < D; d++) a += qd[d] * row[d];
                double x = dm->scale * a;
                if (mk.softcap > 0) x = mk.softcap * tanh(x / mk.softcap);
                sr[j] = x + attn__alibi_at(&mk, b, dm->H, h, i, j, Lq, cap);
            }
            if (attn__score_mod_row_d(&mk, b, h, i, 0, lk, sr, NULL, old, &err))
                break;
            for (int64_t j = 0; j < lk; j++)
                if (sr[j] > mx) mx = sr[j];
            /* a sink joins the denominator (attn_mask's rule) */
            if (mk.sinks && mk.sinks[h] > mx) mx = mk.sinks[h];
            if (mk.sinks) sum += exp(mk.sinks[h] - mx);
            for (int64_t j = 0; j < lk; j++)
                if (sr[j] > -INFINITY) sum += exp(sr[j] - mx);
            memset(acc, 0, (size_t)Dv * sizeof(double));
            for (int64_t j = 0; j < lk; j++) {
                if (sr[j] == -INFINITY) continue;
                attn__kv_row_to_f32(c->cfg.dtype, attn__kv_vrow(c, b, hk, j),
                                    attn__kv_vscale(c, b, hk, j), Dv, row);
                double w = exp(sr[j] - mx);
                for (int64_t d = 0; d < Dv; d++) acc[d] += w * row[d];
            }
            float *orow = (float *)out->data + attn__off(out, b, h, i, 0);
            finish_row(orow, out->stride[3], Dv, mx, sum, acc,
                       lse ? lse + (b * dm->H + h) * Lq + i : NULL);
        }
    }
    attn__free(rows);
    attn__free(buf);
    return attn__ufn_status(&err);
}

/* ---- the kernel ----------------------------------------------------------- */

/* A unit of work and where its partial goes within a round. */
typedef struct {
    int64_t b, hk, c;
} unit_t;

typedef struct {
    const attn_kv_cache *c;
    const attn_mask *m;
    const dims_t *dm;
    const attn__decode_ops *ops;
    const attn__vec_ops *vec;
    const float *qf; /* (B, H, Lq, D) f32, contiguous */
    /* bf16 tiles (a bf16 cache with ATTN_IMPL_FLASH_BF16): q rounded to
     * bf16, rows of dp (D rounded up to even) elements; NULL otherwise */
    const uint16_t *qb;
    int64_t dp;
    const int64_t *lo, *hi; /* [B * Lq] visible key range of each query */
    attn__ufn_err *err;     /* the first failure of a user function */
} ctx_t;

/* Soft-capping and ALiBi on the visible scores s[0..n) of query i, head h
 * of entry b, keys j0.. (attn_mask's order: cap, then ALiBi). */
static void score_mods(const ctx_t *x, int64_t b, int64_t h, int64_t i,
                       int64_t j0, int64_t n, float *s) {
    const attn_mask *m = x->m;
    if (m->softcap > 0) attn__vec_get()->softcap(s, n, (float)m->softcap, NULL);
    if (m->alibi) {
        int64_t lq, lk; /* m's key lengths are the cache's */
        attn__lengths(m, b, x->dm->Lq, x->c->len[b], &lq, &lk);
        const int64_t c =
            i + (m->align == ATTN_ALIGN_BOTTOM_RIGHT ? lk - lq : 0);
        const float slope = (float)attn__alibi_slope(m, x->dm->H, h);
        for (int64_t j = 0; j < n; j++) {
            float dist = (float)(c - (j0 + j));
            s[j] -=
                slope * (m->alibi == ATTN_ALIBI_SYMMETRIC ? fabsf(dist) : dist);
        }
    }
}

/* o[r Dv + d] += sum_j P[r][j] v_j[d] of rows r0 .. r0 + rlen - 1 on bf16
 * tiles: the weights rounded to bf16 (pb, rows of CHUNK; as FlashAttention
 * rounds P in half precision), the value rows packed once per unit by the
 * caller (vp), f32 sums. */
static void pv_bf16(const ctx_t *x, int64_t r0, int64_t rlen, const float *s,
                    int64_t nk, const uint16_t *vp, uint16_t *pb, float *o) {
    const int64_t Dv = x->dm->Dv;
    for (int64_t r = r0; r < r0 + rlen; r++) {
        attn__bf16_from_f32(s + r * CHUNK, nk, pb + r * CHUNK);
        if (nk & 1) pb[r * CHUNK + nk] = 0; /* the pad of the last pair */
    }
    attn__bf16_nn_acc(rlen, Dv, nk, 0, (nk + 1) / 2, pb + r0 * CHUNK, CHUNK, vp,
                      o + r0 * Dv, Dv, 1.0f);
}

/* Partial of one unit: R rows of O (Dv each), then R maxima, R sums. b16:
 * the thread's bf16 scratch (NULL off the bf16 tiles). */
static void run_unit(const ctx_t *x, const unit_t *u, float *part, float *s,
                     uint16_t *b16) {
    const dims_t *dm = x->dm;
    const int64_t Lq = dm->Lq, G = dm->G, R = G * Lq, Dv = dm->Dv;
    const int64_t b = u->b, hk = u->hk;
    const int64_t j0 = u->c * CHUNK;
    const int64_t lk = x->c->len[b];
    const int64_t j1 = j0 + CHUNK < lk ? j0 + CHUNK : lk;
    float *mo = part + R * Dv, *lo_ = mo + R;
    const int64_t *lo = x->lo + b * Lq, *hi = x->hi + b * Lq;
    /* the queries seeing this chunk: lo and hi grow with i, so they form
     * one run [ia, ib), in which (with documents) a query of a document
     * without cached keys may see nothing: it is masked below */
    int64_t ia = 0, ib = Lq, kmin = j1, kmax = j0;
    while (ia < Lq && !sees(lo, hi, ia, j0, j1)) ia++;
    while (ib > ia && !sees(lo, hi, ib - 1, j0, j1)) ib--;
    for (int64_t r = 0; r < R; r++) mo[r] = -INFINITY;
    if (ia == ib) return;
    for (int64_t i = ia; i < ib; i++) {
        if (!sees(lo, hi, i, j0, j1)) continue;
        if (lo[i] < kmin) kmin = lo[i];
        if (hi[i] > kmax) kmax = hi[i];
    }
    if (kmin < j0) kmin = j0;
    if (kmax > j1) kmax = j1;
    const int64_t nk = kmax - kmin, ni = ib - ia;
    const attn_kv_cache *c = x->c;
    const unsigned char *krow = attn__kv_krow(c, b, hk, kmin);
    const unsigned char *vrow = attn__kv_vrow(c, b, hk, kmin);
    const float *ks = attn__kv_kscale(c, b, hk, kmin);
    const float *vs = attn__kv_vscale(c, b, hk, kmin);
    const float *q0 = x->qf + (b * dm->H + hk * G) * Lq * dm->D;
    /* rows (g, i) are r = g Lq + i: one run over all heads when every query
     * is active (always so in decode), else one run per head */
    const int64_t runs = ni == Lq ? 1 : G, rlen = ni == Lq ? R : ni;
    /* scores by blocks of keys; each block first asks for its V rows, so
     * they arrive while the scores are computed (the weighted sum below
     * walks V by column segments, which the hardware prefetchers do not
     * follow) */
    uint16_t *kp = b16, *vp = NULL, *pb = NULL;
    if (b16) {
        vp = kp + attn__bf16_pack_elems(CHUNK, dm->D);
        pb = vp + attn__bf16_pack_elems(dm->Dv, CHUNK);
        attn__bf16_pack_nt(nk, dm->D, (const uint16_t *)(const void *)krow,
                           (int64_t)(c->row_k / sizeof(uint16_t)), kp);
        for (int64_t g = 0; g < runs; g++)
            attn__bf16_nt(rlen, 0, nk, dm->D, 1.0f,
                          x->qb +
                              ((b * dm->H + hk * G) * Lq + g * Lq + ia) * x->dp,
                          x->dp, kp, s + (g * Lq + ia) * CHUNK, CHUNK);
    }
    for (int64_t j = 0; !b16 && j < nk; j += PF_KEYS) {
        const int64_t n = nk - j < PF_KEYS ? nk - j : PF_KEYS;
        const char *vb = (const char *)vrow + (size_t)j * c->row_v;
        for (size_t off = 0; off < (size_t)n * c->row_v; off += 64)
            __builtin_prefetch(vb + off, 0, 3);
        for (int64_t g = 0; g < runs; g++) {
            int64_t r0 = g * Lq + ia;
            x->ops->dot(q0 + r0 * dm->D, rlen, dm->D,
                        krow + (size_t)j * c->row_k, c->row_k,
                        ks ? ks + j * c->nb_k : NULL, c->nb_k, n, dm->D,
                        s + r0 * CHUNK + j, CHUNK);
        }
    }
    const float scale = (float)dm->scale;
    for (int64_t g = 0; g < G; g++)
        for (int64_t i = ia; i < ib; i++) {
            const int64_t r = g * Lq + i;
            float *sr = s + r * CHUNK;
            int64_t a = lo[i] > kmin ? lo[i] - kmin : 0;
            int64_t e = (hi[i] < kmax ? hi[i] : kmax) - kmin;
            for (int64_t j = 0; j < nk; j++)
                sr[j] = j >= a && j < e ? sr[j] * scale : -INFINITY;
            if (a < e && (x->m->softcap > 0 || x->m->alibi))
                score_mods(x, b, hk * G + g, i, kmin + a, e - a, sr + a);
            /* the user's functions: mask_mod, then score_mod, last */
            if (a < e &&
                (attn__mask_mod_row_f(x->m, b, hk * G + g, i, kmin + a,
                                      kmin + e, sr + a, x->err) ||
                 attn__score_mod_row_f(x->m, b, hk * G + g, i, kmin + a, e - a,
                                       sr + a, NULL, x->err)))
                return;
            float mx = a < e ? x->vec->max(sr + a, e - a) : -INFINITY;
            if (mx == -INFINITY) {
                for (int64_t j = 0; j < nk; j++) sr[j] = 0.0f;
                lo_[r] = 0.0f;
                continue;
            }
            mo[r] = mx;
            lo_[r] = x->vec->exp_sub_sum(sr, nk, mx);
        }
    memset(part, 0, (size_t)(R * Dv) * sizeof(float));
    if (b16)
        attn__bf16_pack_nn(nk, Dv, (const uint16_t *)(const void *)vrow,
                           (int64_t)(c->row_v / sizeof(uint16_t)), vp);
    for (int64_t g = 0; g < runs; g++) {
        int64_t r0 = g * Lq + ia;
        if (b16) {
            pv_bf16(x, r0, rlen, s, nk, vp, pb, part);
            continue;
        }
        x->ops->acc(s + r0 * CHUNK, rlen, CHUNK, vrow, c->row_v, vs, c->nb_v,
                    nk, Dv, part + r0 * Dv, Dv);
    }
}

/* 1 if some query of an entry (ranges lo, hi [Lq]) sees chunk ch. */
static int chunk_seen(const int64_t *lo, const int64_t *hi, int64_t Lq,
                      int64_t ch) {
    for (int64_t i = 0; i < Lq; i++)
        if (sees(lo, hi, i, ch * CHUNK, (ch + 1) * CHUNK)) return 1;
    return 0;
}

/* acc (m, l, O) of one row ⊕= a partial row. */
static void merge_row(float *am, float *al, float *ao, float pm, float pl,
                      const float *po, int64_t Dv) {
    if (pm == -INFINITY) return;
    if (*am == -INFINITY) {
        *am = pm;
        *al = pl;
        memcpy(ao, po, (size_t)Dv * sizeof(float));
        return;
    }
    float mx = pm > *am ? pm : *am;
    float ea = expf(*am - mx), ep = expf(pm - mx);
    *am = mx;
    *al = *al * ea + pl * ep;
    for (int64_t d = 0; d < Dv; d++) ao[d] = ao[d] * ea + po[d] * ep;
}

/* q's rows as f32, (b, h, i) row-major */
static void load_q(const attn_tensor *q, const dims_t *dm, float *qf) {
    const int64_t D = dm->D;
    for (int64_t b = 0, r = 0; b < dm->B; b++)
        for (int64_t h = 0; h < dm->H; h++)
            for (int64_t i = 0; i < dm->Lq; i++, r++) {
                if (q->stride[3] == 1)
                    attn__load_f32(attn__elem_ptr(q, attn__off(q, b, h, i, 0)),
                                   q->dtype, D, qf + r * D);
                else
                    for (int64_t d = 0; d < D; d++)
                        qf[r * D + d] = (float)attn_tensor_get(q, b, h, i, d);
            }
}

/* Folds a round's partials into the rows' accumulators (acc: rows x Dv,
 * then the rows' maxima and sums), each row's in unit (= chunk) order; a
 * step's few units fold faster than a parallel region starts. */
static void fold_round(const unit_t *units, int64_t nu, const float *part,
                       int64_t pfl, const dims_t *dm, float *acc, int nt) {
    const int64_t H = dm->H, Lq = dm->Lq, Dv = dm->Dv, R = dm->G * Lq;
    const int64_t rows = dm->B * H * Lq;
    float *am = acc + rows * Dv, *al = am + rows;
#pragma omp parallel for num_threads(nt) schedule(static) if (nu > FOLD_TEAM)
    for (int64_t u = 0; u < nu; u++) {
        const unit_t *un = &units[u];
        if (u > 0 && units[u - 1].b == un->b && units[u - 1].hk == un->hk)
            continue; /* not the first unit of its (b, hk) in the round */
        for (int64_t w = u;
             w < nu && units[w].b == un->b && units[w].hk == un->hk; w++) {
            const float *p = part + w * pfl, *pm = p + R * Dv, *pl = pm + R;
            for (int64_t r = 0; r < R; r++) {
                int64_t row = (un->b * H + un->hk * dm->G) * Lq + r;
                merge_row(&am[row], &al[row], acc + row * Dv, pm[r], pl[r],
                          p + r * Dv, Dv);
            }
        }
    }
}

/* Divides each row by its sum (with the sink's term) into out, and its
 * log-sum-exp into lse; a row that sees no key is zeros and -inf. */
static void write_rows(const attn_mask *mk, const dims_t *dm, float *acc,
                       attn_tensor *out, float *lse) {
    const int64_t H = dm->H, Lq = dm->Lq, Dv = dm->Dv;
    const int64_t rows = dm->B * H * Lq;
    float *am = acc + rows * Dv, *al = am + rows;
    for (int64_t r = 0; r < rows; r++) {
        const int64_t b = r / (H * Lq), h = (r / Lq) % H, i = r % Lq;
        if (mk->sinks) { /* the sink: one more term of the denominator */
            const float sk = (float)mk->sinks[h];
            const float mx = am[r] > sk ? am[r] : sk;
            const float ea = am[r] > -INFINITY ? expf(am[r] - mx) : 0.0f;
            al[r] = al[r] * ea + expf(sk - mx);
            for (int64_t d = 0; d < Dv; d++) acc[r * Dv + d] *= ea;
            am[r] = mx;
        }
        float *orow = (float *)out->data + attn__off(out, b, h, i, 0);
        const float inv = am[r] > -INFINITY ? 1.0f / al[r] : 0.0f;
        for (int64_t d = 0; d < Dv; d++)
            orow[d * out->stride[3]] =
                am[r] > -INFINITY ? acc[r * Dv + d] * inv : 0.0f;
        if (lse) lse[r] = am[r] > -INFINITY ? am[r] + logf(al[r]) : -INFINITY;
    }
}

static attn_status kernel_forward(const attn_tensor *q, const attn_kv_cache *c,
                                  const attn_sdpa_opts *o, const dims_t *dm,
                                  attn_tensor *out, float *lse) {
    attn_mask mk = o->mask;
    mk.key_lengths = c->len;
    const int64_t B = dm->B, H = dm->H, Hkv = dm->Hkv, Lq = dm->Lq;
    const int64_t D = dm->D, Dv = dm->Dv, R = dm->G * Lq;
    const int64_t rows = B * H * Lq;
    /* units: every (b, hk) and the chunks its queries can see */
    int64_t nunits = 0, work = 0;
    int64_t *range = attn__alloc((size_t)(2 * B * Lq + 2 * B), sizeof(int64_t),
                                 "query ranges");
    if (!range) return ATTN_E_NOMEM;
    int64_t *lo = range, *hi = range + B * Lq, *c0 = hi + B * Lq, *c1 = c0 + B;
    for (int64_t b = 0; b < B; b++) {
        int64_t ulo = INT64_MAX, uhi = 0;
        for (int64_t i = 0; i < Lq; i++) {
            row_range(&mk, b, i, Lq, c->cfg.capacity, &lo[b * Lq + i],
                      &hi[b * Lq + i]);
            if (lo[b * Lq + i] < hi[b * Lq + i]) {
                if (lo[b * Lq + i] < ulo) ulo = lo[b * Lq + i];
                if (hi[b * Lq + i] > uhi) uhi = hi[b * Lq + i];
            }
        }
        c0[b] = ulo < uhi ? ulo / CHUNK : 0;
        c1[b] = ulo < uhi ? (uhi - 1) / CHUNK + 1 : 0;
        work += ulo < uhi ? (uhi - ulo) * Hkv * R * (D + Dv) : 0;
        for (int64_t ch = c0[b]; ch < c1[b]; ch++)
            nunits += Hkv * chunk_seen(lo + b * Lq, hi + b * Lq, Lq, ch);
    }
    const int64_t pfl = R * (Dv + 2); /* floats of one partial */
    int64_t per_round = ROUND_FLOATS / pfl;
    if (per_round < 1) per_round = 1;
    if (per_round > nunits) per_round = nunits > 0 ? nunits : 1;
    /* a short cache's step: one thread ends sooner than a team starts */
    const int nt = work < SOLO_WORK ? 1 : attn__flash_team_size(o, per_round);
    float *qf = attn__alloc((size_t)(rows * D), sizeof(float), "q as f32");
    float *acc =
        attn__alloc((size_t)(rows * (Dv + 2)), sizeof(float), "accumulators");
    float *part =
        attn__alloc((size_t)(per_round * pfl), sizeof(float), "partials");
    float *sbuf =
        attn__alloc((size_t)nt * (size_t)(R * CHUNK), sizeof(float), "scores");
    /* bf16 tiles: a bf16 cache, asked for, on a CPU with AVX512_BF16, and
     * at least the micro-kernel's 8 rows per unit (a prefill chunk): a
     * decode step's few rows would pay for packing each key chunk (2.6x
     * slower measured at Lq = 1), so it stays on the f32 kernel */
    const int tiles =
        c->cfg.dtype == ATTN_BF16 && attn__bf16_tiles_chosen(o->impl) && R >= 8;
    const int64_t dp = (D + 1) & ~(int64_t)1;
    const size_t per16 = attn__bf16_pack_elems(CHUNK, D) +
                         attn__bf16_pack_elems(Dv, CHUNK) + (size_t)(R * CHUNK);
    uint16_t *qb =
        tiles ? attn__alloc((size_t)(rows * dp), sizeof(uint16_t), "q as bf16")
              : NULL;
    uint16_t *b16 =
        tiles ? attn__alloc((size_t)nt * per16, sizeof(uint16_t), "bf16 tiles")
              : NULL;
    unit_t *units =
        attn__alloc((size_t)(nunits > 0 ? nunits : 1), sizeof(unit_t), "units");
    attn_status st = ATTN_OK;
    if (!qf || !acc || !part || !sbuf || !units || (tiles && (!qb || !b16))) {
        st = ATTN_E_NOMEM;
        goto done;
    }
    load_q(q, dm, qf);
    for (int64_t r = 0; qb && r < rows; r++) {
        qb[r * dp + dp - 1] = 0; /* the pad of an odd D */
        attn__bf16_from_f32(qf + r * D, D, qb + r * dp);
    }
    float *am = acc + rows * Dv, *al = am + rows;
    memset(acc, 0, (size_t)(rows * Dv) * sizeof(float));
    for (int64_t r = 0; r < rows; r++) {
        am[r] = -INFINITY;
        al[r] = 0.0f;
    }
    /* units in (b, hk, chunk) order: the fold below follows it */
    for (int64_t b = 0, n = 0; b < B; b++)
        for (int64_t hk = 0; hk < Hkv; hk++)
            for (int64_t ch = c0[b]; ch < c1[b]; ch++) {
                /* chunks no query sees (other documents) are no unit */
                if (!chunk_seen(lo + b * Lq, hi + b * Lq, Lq, ch)) continue;
                units[n].b = b;
                units[n].hk = hk;
                units[n++].c = ch;
            }
    ctx_t x = {c,
               &mk,
               dm,
               attn__decode_ops_get(c->cfg.dtype, attn__vec_best()),
               attn__vec_get(),
               qf,
               qb,
               dp,
               lo,
               hi,
               NULL};
    attn__ufn_err err;
    memset(&err, 0, sizeof err);
    x.err = &err;
    for (int64_t u0 = 0; u0 < nunits; u0 += per_round) {
        const int64_t nu = nunits - u0 < per_round ? nunits - u0 : per_round;
#pragma omp parallel for num_threads(nt) schedule(dynamic)
        for (int64_t u = 0; u < nu; u++)
            if (!attn__ufn_failed(&err))
                run_unit(
                    &x, &units[u0 + u], part + u * pfl,
                    sbuf + (size_t)omp_get_thread_num() * (size_t)(R * CHUNK),
                    b16 ? b16 + (size_t)omp_get_thread_num() * per16 : NULL);
        if (err.what) {
            st = attn__ufn_status(&err);
            goto done;
        }
        fold_round(units + u0, nu, part, pfl, dm, acc, nt);
    }
    write_rows(&mk, dm, acc, out, lse);
done:
    attn__free(range);
    attn__free(qf);
    attn__free(acc);
    attn__free(part);
    attn__free(sbuf);
    attn__free(units);
    attn__free(qb);
    attn__free(b16);
    return st;
}

/* The cache's document ids in logical order, (B, capacity) row-major, as
 * attn_mask's doc_k: positions past an entry's length repeat its last id
 * (never visible, and the ids stay non-decreasing). */
static int64_t *logical_docs(const attn_kv_cache *c) {
    const int64_t B = c->cfg.batch, cap = c->cfg.capacity;
    int64_t *d = attn__alloc((size_t)(B * cap), sizeof(int64_t),
                             "the cache's document ids");
    if (!d) return NULL;
    for (int64_t b = 0; b < B; b++) {
        const int64_t n = c->len[b], *src = attn__kv_doc_row(c, b);
        memcpy(d + b * cap, src, (size_t)n * sizeof(int64_t));
        for (int64_t j = n; j < cap; j++) d[b * cap + j] = n ? src[n - 1] : 0;
    }
    return d;
}

/* Queries rotated at their positions (the keys are stored rotated), then
 * the plain call on the rotated copy. */
static attn_status rope_cached(const attn_tensor *q, const attn_kv_cache *cache,
                               const attn_sdpa_opts *opts, attn_tensor *out,
                               float *lse) {
    dims_t dm;
    attn_status st = check_args(q, cache, opts, out, &dm);
    if (st) return st;
    const int64_t B = q->shape[0], Lq = q->shape[2];
    if ((st = attn__rope_check_positions("rope_q_positions",
                                         opts->rope_q_positions,
                                         opts->n_rope_q_positions, B, Lq)))
        return st;
    const int64_t *pos = opts->rope_q_positions;
    int64_t npos = opts->n_rope_q_positions, *own = NULL;
    if (!pos) {
        own = attn__alloc((size_t)(B * Lq), sizeof(int64_t), "positions");
        if (!own) return ATTN_E_NOMEM;
        attn__rope_query_positions(&opts->mask, B, Lq, cache->cfg.capacity,
                                   cache->len, own);
        pos = own;
        npos = B * Lq;
    }
    attn_tensor qr;
    void *buf = NULL;
    attn_rope rope = cache->rope;
    st = attn__rope_copy(&rope, q, pos, npos, opts->threads, &qr, &buf);
    if (!st) {
        /* the same call without rotation: a shallow copy of the cache
         * whose keys count as given */
        attn_kv_cache plain = *cache;
        plain.rope_freq = NULL;
        st = attn_sdpa_cached(&qr, &plain, opts, out, lse);
    }
    attn__free(buf);
    attn__free(own);
    return st;
}

attn_status attn_sdpa_cached(const attn_tensor *q, const attn_kv_cache *cache,
                             const attn_sdpa_opts *opts, attn_tensor *out,
                             float *lse) {
    if (!opts || !cache) return check_args(q, cache, opts, out, NULL);
    if (opts->mask.doc_k)
        return attn__fail(ATTN_E_UNSUPPORTED,
                          "attention over a KV cache takes the keys' "
                          "document ids from the cache "
                          "(attn_kv_cache_append_docs), not mask.doc_k");
    if (opts->rope)
        return attn__fail(ATTN_E_INVALID,
                          "opts.rope is set for attention over a KV cache: "
                          "the cache's rope rotates keys and queries "
                          "(attn_kv_cache_set_rope)");
    if (cache->rope_freq) return rope_cached(q, cache, opts, out, lse);
    attn_sdpa_opts o = *opts;
    int64_t *docs = NULL;
    if (o.mask.doc_q && cache->doc) {
        if (!(docs = logical_docs(cache))) return ATTN_E_NOMEM;
        o.mask.doc_k = docs;
        o.mask.n_doc_k = cache->cfg.batch * cache->cfg.capacity;
    }
    dims_t dm;
    attn_status st = check_args(q, cache, &o, out, &dm);
    if (!st)
        st = opts->impl == ATTN_IMPL_REF
                 ? ref_forward(q, cache, &o, &dm, out, lse)
                 : kernel_forward(q, cache, &o, &dm, out, lse);
    attn__free(docs);
    return st;
}
