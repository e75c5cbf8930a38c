/* Helpers shared by the flash kernels (see flash.h): loading rows as f32,
 * the mask + bias pass on a score row, dropout on a row. */
#include "flash.h"

#include <limits.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ATTN_X86 1
#else
#define ATTN_X86 0
#endif

/* ---- rows as f32 ----------------------------------------------------- */

#if ATTN_X86
__attribute__((target("avx,f16c"))) static void
f16_rows_f16c(const uint16_t *src, int64_t n, float *dst) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i,
                         _mm256_cvtph_ps(_mm_loadu_si128(
                             (const __m128i *)(const void *)(src + i))));
    for (; i < n; i++) dst[i] = attn_f16_to_f32(src[i]);
}
#endif

void attn__flash_to_f32(const void *src, attn_dtype dtype, int64_t n,
                        float *dst) {
    if (dtype == ATTN_F16) {
#if ATTN_X86
        if (attn__isa_get() >= ATTN__ISA_AVX2) {
            f16_rows_f16c(src, n, dst);
            return;
        }
#endif
        const uint16_t *s = src;
        for (int64_t i = 0; i < n; i++) dst[i] = attn_f16_to_f32(s[i]);
    } else if (dtype == ATTN_BF16) {
        /* bf16 is the upper half of an f32: a shift (the loop vectorizes) */
        const uint16_t *s = src;
        uint32_t *d = (uint32_t *)(void *)dst;
        for (int64_t i = 0; i < n; i++) d[i] = (uint32_t)s[i] << 16;
    } else {
        attn__load_f32(src, dtype, n, dst);
    }
}

/* Rows r0 .. r0+n-1 of slice (b, h) of a bf16 tensor, D values each, into
 * dst rows of ld elements (zeros from D to ld). */
void attn__flash_bf16_rows(const attn_tensor *t, int64_t b, int64_t h,
                           int64_t r0, int64_t n, uint16_t *dst, int64_t ld) {
    const int64_t D = t->shape[3];
    const uint16_t *src = t->data;
    for (int64_t r = 0; r < n; r++) {
        const uint16_t *row = src + attn__off(t, b, h, r0 + r, 0);
        uint16_t *o = dst + r * ld;
        if (t->stride[3] == 1)
            memcpy(o, row, (size_t)D * sizeof *o);
        else
            for (int64_t e = 0; e < D; e++) o[e] = row[e * t->stride[3]];
        for (int64_t e = D; e < ld; e++) o[e] = 0;
    }
}

int attn__flash_rows_direct(const attn_tensor *t) {
    int64_t D = t->shape[3];
    if (t->dtype != ATTN_F32) return 0;
    if (t->stride[3] != 1 && D > 1) return 0;
    /* BLAS wants a leading dimension >= the row length, as an int */
    if (t->shape[2] > 1 && (t->stride[2] < D || t->stride[2] > INT_MAX))
        return 0;
    return 1;
}

const float *attn__flash_rows(const attn_tensor *t, int64_t b, int64_t h,
                              int64_t r0, int64_t n, float *buf, int64_t *ld) {
    int64_t D = t->shape[3];
    int64_t base = attn__off(t, b, h, r0, 0);
    if (attn__flash_rows_direct(t)) {
        *ld = t->shape[2] > 1 ? t->stride[2] : D;
        return (const float *)t->data + base;
    }
    size_t es = attn_dtype_size(t->dtype);
    const char *p = (const char *)t->data;
    for (int64_t r = 0; r < n; r++) {
        int64_t o = base + r * t->stride[2];
        float *dst = buf + r * D;
        if (t->stride[3] == 1 || D == 1) {
            attn__flash_to_f32(p + (size_t)o * es, t->dtype, D, dst);
        } else {
            for (int64_t c = 0; c < D; c++)
                attn__flash_to_f32(p + (size_t)(o + c * t->stride[3]) * es,
                                   t->dtype, 1, dst + c);
        }
    }
    *ld = D;
    return buf;
}

/* ---- limits ---------------------------------------------------------- */

attn_status attn__flash_check_dims(const attn__sdpa_dims *d, const char *who) {
    if (d->Dk > INT_MAX / 256 || d->Dv > INT_MAX / 256)
        return attn__fail(ATTN_E_UNSUPPORTED,
                          "%s: head sizes Dk = %lld, Dv = %lld are beyond "
                          "what its BLAS calls take (use the reference)",
                          who, (long long)d->Dk, (long long)d->Dv);
    return ATTN_OK;
}

/* ---- threads ----------------------------------------------------------- */

int attn__flash_team_size(const attn_sdpa_opts *opts, int64_t items) {
    int n = opts->threads > 0 ? opts->threads : omp_get_max_threads();
    if (n < 1) n = 1;
    if (items >= 1 && (int64_t)n > items) n = (int)items;
    return n;
}

/* ---- mask and bias on a score row ------------------------------------ */

int attn__flash_mask_row(const attn_mask *m, const attn__sdpa_dims *d,
                         int64_t b, int64_t h, int64_t i, int64_t j0,
                         int64_t nj, attn__tile_class cls, float *s,
                         attn__ufn_err *err) {
    const int64_t j1 = j0 + nj;
    if (cls != ATTN__TILE_FULL) {
        /* the visible range of the row from padding, causal and window,
         * cut to the tile's columns: [lo, hi) */
        int64_t lo, hi;
        attn__mask_row_range(m, b, i, d->Lq, d->Lk, &lo, &hi);
        if (lo < j0) lo = j0;
        if (hi > j1) hi = j1;
        if (hi < lo) hi = lo;
        attn__doc_range(m, b, i, d->Lq, d->Lk, &lo, &hi);
        for (int64_t j = j0; j < lo && j < j1; j++) s[j - j0] = -INFINITY;
        for (int64_t j = hi > j0 ? hi : j0; j < j1; j++) s[j - j0] = -INFINITY;
        /* the per-element parts inside the range */
        if (lo < hi && m->keep) {
            int64_t js;
            int64_t off = attn__bcast_row(m->keep, b, h, i, &js);
            const char *row = attn__elem_ptr(m->keep, off);
            for (int64_t j = lo; j < hi; j++)
                if (!attn__keep_at(m->keep, row, js, j)) s[j - j0] = -INFINITY;
        }
        if (lo < hi && m->block_size > 0) {
            const int64_t bs = m->block_size;
            const uint8_t *lay = attn__layout_row(m, h, i, d->Lq, d->Lk);
            for (int64_t j = lo; j < hi; j++)
                if (!lay[j / bs]) s[j - j0] = -INFINITY;
        }
        if (lo < hi && m->random_block > 0) {
            int64_t rb = m->random_block;
            for (int64_t j = lo; j < hi;) {
                int64_t end = (j / rb + 1) * rb;
                if (end > hi) end = hi;
                if (!attn_random_block_kept(m->random_seed, m->random_keep_p, h,
                                            i / rb, j / rb))
                    for (int64_t t = j; t < end; t++) s[t - j0] = -INFINITY;
                j = end;
            }
        }
        if (lo < hi && m->mask_mod &&
            attn__mask_mod_row_f(m, b, h, i, lo, hi, s + (lo - j0), err))
            return 1;
    }
    if (m->bias) {
        int64_t js;
        int64_t off = attn__bcast_row(m->bias, b, h, i, &js) + j0 * js;
        if (m->bias->dtype == ATTN_F32) {
            const float *br = (const float *)m->bias->data + off;
            for (int64_t j = 0; j < nj; j++) s[j] += br[j * js];
        } else {
            const double *br = (const double *)m->bias->data + off;
            for (int64_t j = 0; j < nj; j++) s[j] += (float)br[j * js];
        }
    }
    return 0;
}

int attn__flash_score_row(const attn_mask *m, const attn__sdpa_dims *d,
                          int64_t b, int64_t h, int64_t i, int64_t j0,
                          int64_t nj, attn__tile_class cls, float *s,
                          float *capd, float *dmod, attn__ufn_err *err) {
    if (m->softcap > 0)
        attn__vec_get()->softcap(s, nj, (float)m->softcap, capd);
    if (attn__flash_mask_row(m, d, b, h, i, j0, nj, cls, s, err)) return 1;
    if (m->alibi) {
        int64_t lq, lk;
        attn__lengths(m, b, d->Lq, d->Lk, &lq, &lk);
        const int64_t c =
            i + (m->align == ATTN_ALIGN_BOTTOM_RIGHT ? lk - lq : 0);
        const float slope = (float)attn__alibi_slope(m, d->H, h);
        /* distances in float: exact below 2^24 positions; int columns so
         * the conversion vectorizes (nj is a tile's width) */
        const float dist0 = (float)(c - j0);
        const int n = (int)nj;
        if (m->alibi == ATTN_ALIBI_SYMMETRIC)
            for (int j = 0; j < n; j++) s[j] -= slope * fabsf(dist0 - (float)j);
        else
            for (int j = 0; j < n; j++) s[j] -= slope * (dist0 - (float)j);
    }
    /* the user's function last, on the finished scores */
    return attn__score_mod_row_f(m, b, h, i, j0, nj, s, dmod, err);
}

/* ---- dropout --------------------------------------------------------- */

void attn__flash_dropout_row(uint64_t seed, double p, int64_t b, int64_t h,
                             int64_t i, int64_t j0, int64_t nj, float *x) {
    const uint32_t thr = attn__dropout_threshold(p);
    const float keep_scale = (float)(1.0 / (1.0 - p));
    int64_t j1 = j0 + nj;
    /* one Philox call decides four neighbouring keys (as attn_dropout_kept) */
    for (int64_t g = j0 >> 2; g <= (j1 - 1) >> 2; g++) {
        uint32_t ctr[4] = {(uint32_t)g, (uint32_t)i, (uint32_t)h, (uint32_t)b};
        uint32_t r[4];
        attn__philox4x32(seed, ctr, r);
        for (int t = 0; t < 4; t++) {
            int64_t j = g * 4 + t;
            if (j < j0 || j >= j1) continue;
            x[j - j0] = r[t] >= thr ? x[j - j0] * keep_scale : 0.0f;
        }
    }
}

/* ---- a block of a longer sequence ------------------------------------ */

void attn__flash_frame(const attn__sdpa_dims *d, const attn__flash_pos *pos,
                       attn__sdpa_dims *md, int64_t *qpos, int64_t *kpos) {
    *md = *d;
    *qpos = *kpos = 0;
    if (!pos) return;
    md->Lq = pos->Lq;
    md->Lk = pos->Lk;
    *qpos = pos->qpos;
    *kpos = pos->kpos;
}
