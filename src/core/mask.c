/* The mask descriptor: validation, per-pair visibility, tile classification
 * and builders for other masking conventions. Every kernel asks this file,
 * so there is one answer to "is key j visible from query i". */
#include "mask.h"

#include <math.h>
#include <string.h>

/* The widest window attn_mask_check accepts (2^61). */
#define ATTN__MAX_WINDOW (INT64_C(1) << 61)

void attn_mask_init(attn_mask *mask) {
    if (!mask) return;
    memset(mask, 0, sizeof *mask);
    mask->align = ATTN_ALIGN_TOP_LEFT;
    mask->window_left = -1;
    mask->window_right = -1;
}

static attn_status check_mask_tensor(const attn_tensor *t, const char *name,
                                     int64_t B, int64_t H, int64_t Lq,
                                     int64_t Lk, int is_bias) {
    attn_status st = attn_tensor_check(t, name);
    if (st) return st;
    if (is_bias) {
        if (t->dtype != ATTN_F32 && t->dtype != ATTN_F64)
            return attn__fail(ATTN_E_DTYPE, "%s must be f32 or f64, not %s",
                              name, attn_dtype_name(t->dtype));
    } else if (t->dtype != ATTN_U8 && t->dtype != ATTN_I32 &&
               t->dtype != ATTN_F32) {
        return attn__fail(ATTN_E_DTYPE, "%s must be u8, i32 or f32, not %s",
                          name, attn_dtype_name(t->dtype));
    }
    const int64_t want[4] = {B, H, Lq, Lk};
    static const char *const axis[4] = {"batch", "head", "query", "key"};
    for (int a = 0; a < 4; a++)
        if (t->shape[a] != want[a] && t->shape[a] != 1)
            return attn__fail(ATTN_E_SHAPE,
                              "%s has %lld entries on the %s axis but the "
                              "attention has %lld (1 broadcasts)",
                              name, (long long)t->shape[a], axis[a],
                              (long long)want[a]);
    if (is_bias) {
        for (int64_t a = 0; a < t->shape[0]; a++)
            for (int64_t b = 0; b < t->shape[1]; b++)
                for (int64_t c = 0; c < t->shape[2]; c++)
                    for (int64_t d = 0; d < t->shape[3]; d++) {
                        double x = attn_tensor_get(t, a, b, c, d);
                        if (isnan(x) || x == INFINITY)
                            return attn__fail(
                                ATTN_E_NONFINITE,
                                "%s[%lld, %lld, %lld, %lld] is %s (only -inf "
                                "may be used, to mask)",
                                name, (long long)a, (long long)b, (long long)c,
                                (long long)d, isnan(x) ? "NaN" : "+inf");
                    }
    }
    return ATTN_OK;
}

attn_status attn_mask_check(const attn_mask *m, int64_t B, int64_t H,
                            int64_t Lq, int64_t Lk) {
    if (!m) return attn__fail(ATTN_E_INVALID, "mask is NULL");
    if (m->causal != 0 && m->causal != 1)
        return attn__fail(ATTN_E_INVALID, "mask.causal must be 0 or 1, not %d",
                          m->causal);
    if (m->align != ATTN_ALIGN_TOP_LEFT && m->align != ATTN_ALIGN_BOTTOM_RIGHT)
        return attn__fail(ATTN_E_INVALID,
                          "mask.align is %d: use "
                          "ATTN_ALIGN_TOP_LEFT or ATTN_ALIGN_BOTTOM_RIGHT",
                          (int)m->align);
    /* every kernel forms c + window + 1 and c - window (|c| < 2^62 for
     * addressable lengths): a bound keeps those in int64 */
    if (m->window_left > ATTN__MAX_WINDOW || m->window_right > ATTN__MAX_WINDOW)
        return attn__fail(ATTN_E_INVALID,
                          "mask.window_%s is %lld; it must be at most %lld "
                          "(or < 0 for unbounded)",
                          m->window_left > ATTN__MAX_WINDOW ? "left" : "right",
                          (long long)(m->window_left > ATTN__MAX_WINDOW
                                          ? m->window_left
                                          : m->window_right),
                          (long long)ATTN__MAX_WINDOW);
    for (int64_t b = 0; b < B; b++) {
        if (m->key_lengths && (m->key_lengths[b] < 0 || m->key_lengths[b] > Lk))
            return attn__fail(
                ATTN_E_SHAPE, "key_lengths[%lld] = %lld is outside [0, %lld]",
                (long long)b, (long long)m->key_lengths[b], (long long)Lk);
        if (m->query_lengths &&
            (m->query_lengths[b] < 0 || m->query_lengths[b] > Lq))
            return attn__fail(
                ATTN_E_SHAPE, "query_lengths[%lld] = %lld is outside [0, %lld]",
                (long long)b, (long long)m->query_lengths[b], (long long)Lq);
    }
    attn_status st;
    if (m->keep &&
        (st = check_mask_tensor(m->keep, "mask.keep", B, H, Lq, Lk, 0)))
        return st;
    if (m->bias &&
        (st = check_mask_tensor(m->bias, "mask.bias", B, H, Lq, Lk, 1)))
        return st;
    if (m->block_size < 0)
        return attn__fail(ATTN_E_INVALID, "mask.block_size is %lld (< 0)",
                          (long long)m->block_size);
    if (m->block_size > 0) {
        if (!m->layout)
            return attn__fail(ATTN_E_INVALID,
                              "mask.block_size is %lld but mask.layout is NULL",
                              (long long)m->block_size);
        if (m->layout_heads != 1 && m->layout_heads != H)
            return attn__fail(ATTN_E_SHAPE,
                              "mask.layout_heads is %lld; it must be 1 or the "
                              "number of heads (%lld)",
                              (long long)m->layout_heads, (long long)H);
    }
    if (m->random_block < 0)
        return attn__fail(ATTN_E_INVALID, "mask.random_block is %lld (< 0)",
                          (long long)m->random_block);
    if (m->random_block > 0 &&
        !(m->random_keep_p >= 0.0 && m->random_keep_p <= 1.0))
        return attn__fail(ATTN_E_INVALID,
                          "mask.random_keep_p is %g; it must be in [0, 1]",
                          m->random_keep_p);
    return attn__score_mod_check(m, B, H, Lq, Lk);
}

/* one splitmix64 step: a well-mixed 64-bit hash */
static uint64_t mix64(uint64_t x) {
    return attn__splitmix64_final(x + 0x9e3779b97f4a7c15ull);
}

int attn_random_block_kept(uint64_t seed, double keep_p, int64_t h, int64_t bi,
                           int64_t bj) {
    if (keep_p >= 1.0) return 1;
    if (keep_p <= 0.0) return 0;
    uint64_t x = mix64(seed ^ 0x5f3759dfull);
    x = mix64(x ^ (uint64_t)h);
    x = mix64(x ^ (uint64_t)bi);
    x = mix64(x ^ (uint64_t)bj);
    double u = (double)(x >> 11) * 0x1p-53; /* uniform in [0, 1) */
    return u < keep_p;
}

int attn_mask_visible(const attn_mask *m, int64_t b, int64_t h, int64_t i,
                      int64_t j, int64_t Lq, int64_t Lk) {
    int64_t lo, hi;
    attn__mask_row_range(m, b, i, Lq, Lk, &lo, &hi);
    if (j < lo || j >= hi) return 0;
    if (m->keep && attn__bcast_get(m->keep, b, h, i, j) == 0.0) return 0;
    if (m->block_size > 0 &&
        !attn__layout_row(m, h, i, Lq, Lk)[j / m->block_size])
        return 0;
    if (m->random_block > 0 &&
        !attn_random_block_kept(m->random_seed, m->random_keep_p, h,
                                i / m->random_block, j / m->random_block))
        return 0;
    if (m->doc_q &&
        attn__doc_q_row(m, b, Lq)[i] != attn__doc_k_row(m, b, Lk)[j])
        return 0;
    if (m->mask_mod) {
        /* one pair: a failing function hides it (the kernels report it) */
        uint8_t keep = 1;
        if (m->mask_mod(m->mask_ctx, b, h, i, j, 1, &keep) || !keep) return 0;
    }
    return 1;
}

/* The next index after x on the block grid of either block part. */
static int64_t next_boundary(const attn_mask *m, int64_t x) {
    int64_t n = INT64_MAX;
    if (m->block_size > 0) n = (x / m->block_size + 1) * m->block_size;
    if (m->random_block > 0) {
        int64_t r = (x / m->random_block + 1) * m->random_block;
        if (r < n) n = r;
    }
    return n;
}

/* Combines a part's verdict into the running class. */
static attn__tile_class meet(attn__tile_class a, attn__tile_class b) {
    if (a == ATTN__TILE_EMPTY || b == ATTN__TILE_EMPTY) return ATTN__TILE_EMPTY;
    if (a == ATTN__TILE_FULL && b == ATTN__TILE_FULL) return ATTN__TILE_FULL;
    return ATTN__TILE_PARTIAL;
}

attn__tile_class attn__mask_classify(const attn_mask *m, int64_t b, int64_t h,
                                     int64_t i0, int64_t i1, int64_t j0,
                                     int64_t j1, int64_t Lq, int64_t Lk) {
    int64_t lq, lk;
    attn__lengths(m, b, Lq, Lk, &lq, &lk);
    int64_t ie = i1 < lq ? i1 : lq, je = j1 < lk ? j1 : lk;
    if (ie <= i0 || je <= j0) return ATTN__TILE_EMPTY;
    attn__tile_class cls =
        (ie < i1 || je < j1) ? ATTN__TILE_PARTIAL : ATTN__TILE_FULL;
    /* over rows [i0, ie) and columns [j0, je) of the valid region: the row
     * ranges never move left as the row grows and, one row apart, overlap
     * or touch, so the first and last rows decide: no pair is visible when
     * the last row ends before j0 or the first starts at je or later;
     * every pair is when the last row starts at j0 or before and the first
     * reaches je */
    int64_t lo_first, hi_first, lo_last, hi_last;
    attn__mask_row_range(m, b, i0, Lq, Lk, &lo_first, &hi_first);
    attn__mask_row_range(m, b, ie - 1, Lq, Lk, &lo_last, &hi_last);
    if (hi_last <= j0 || lo_first >= je) return ATTN__TILE_EMPTY;
    if (lo_last > j0 || hi_first < je) cls = ATTN__TILE_PARTIAL;
    if (m->doc_q) {
        cls = meet(cls, attn__doc_classify(m, b, i0, ie, j0, je, Lq, Lk));
        if (cls == ATTN__TILE_EMPTY) return cls;
    }
    if (m->mask_mod) {
        cls = meet(cls, attn__user_classify(m, b, h, i0, ie, j0, je));
        if (cls == ATTN__TILE_EMPTY) return cls;
    }
    if (m->block_size > 0 || m->random_block > 0) {
        /* block-structured parts: look at each covered block */
        int any = 0, all = 1;
        /* step from one boundary of either block grid to the next, so each
         * visited cell lies inside one block of both grids */
        for (int64_t i = i0; i < ie; i = next_boundary(m, i))
            for (int64_t j = j0; j < je; j = next_boundary(m, j)) {
                int kept = 1;
                if (m->block_size > 0 &&
                    !attn__layout_row(m, h, i, Lq, Lk)[j / m->block_size])
                    kept = 0;
                if (kept && m->random_block > 0 &&
                    !attn_random_block_kept(m->random_seed, m->random_keep_p, h,
                                            i / m->random_block,
                                            j / m->random_block))
                    kept = 0;
                any |= kept;
                all &= kept;
            }
        cls = meet(cls, !any ? ATTN__TILE_EMPTY
                             : (all ? ATTN__TILE_FULL : ATTN__TILE_PARTIAL));
        if (cls == ATTN__TILE_EMPTY) return cls;
    }
    if (m->keep) {
        int any = 0, all = 1;
        for (int64_t i = i0; i < ie && (all || !any); i++) {
            int64_t js;
            const char *row =
                attn__elem_ptr(m->keep, attn__bcast_row(m->keep, b, h, i, &js));
            for (int64_t j = j0; j < je; j++) {
                int kept = attn__keep_at(m->keep, row, js, j);
                any |= kept;
                all &= kept;
            }
        }
        cls = meet(cls, !any ? ATTN__TILE_EMPTY
                             : (all ? ATTN__TILE_FULL : ATTN__TILE_PARTIAL));
    }
    return cls;
}

/* ---- builders for other conventions ---------------------------------- */

attn_status attn_mask_padding_from_ids(const int64_t *ids, int64_t B, int64_t L,
                                       int64_t pad_id, uint8_t *keep) {
    int64_t n;
    if (!ids || !keep)
        return attn__fail(ATTN_E_INVALID, "padding mask: %s is NULL",
                          ids ? "keep" : "ids");
    if (B < 1 || L < 1 || !attn__mul_i64(B, L, &n))
        return attn__fail(ATTN_E_SHAPE, "padding mask: bad shape (%lld, %lld)",
                          (long long)B, (long long)L);
    for (int64_t i = 0; i < n; i++) keep[i] = ids[i] != pad_id;
    return ATTN_OK;
}

attn_status attn_mask_lookahead(int64_t Lq, int64_t Lk, uint8_t *keep) {
    int64_t n;
    if (!keep)
        return attn__fail(ATTN_E_INVALID, "look-ahead mask: keep is NULL");
    if (Lq < 1 || Lk < 1 || !attn__mul_i64(Lq, Lk, &n))
        return attn__fail(ATTN_E_SHAPE,
                          "look-ahead mask: bad shape (%lld, %lld)",
                          (long long)Lq, (long long)Lk);
    for (int64_t i = 0; i < Lq; i++)
        for (int64_t j = 0; j < Lk; j++) keep[i * Lk + j] = j <= i;
    return ATTN_OK;
}

/* Writes keep = (src != 0) xor invert, for the integer and float dtypes. */
static attn_status convert_bool(const void *src, attn_dtype dtype, size_t n,
                                uint8_t *keep, int invert, const char *what) {
    if (!src || !keep)
        return attn__fail(ATTN_E_INVALID, "%s: %s is NULL", what,
                          src ? "keep" : "src");
    for (size_t i = 0; i < n; i++) {
        int nz;
        switch (dtype) {
        case ATTN_U8: nz = ((const uint8_t *)src)[i] != 0; break;
        case ATTN_I32: nz = ((const int32_t *)src)[i] != 0; break;
        case ATTN_I64: nz = ((const int64_t *)src)[i] != 0; break;
        case ATTN_F32: nz = ((const float *)src)[i] != 0.0f; break;
        case ATTN_F64: nz = ((const double *)src)[i] != 0.0; break;
        default:
            return attn__fail(ATTN_E_DTYPE, "%s: dtype %s is not a mask dtype",
                              what, attn_dtype_name(dtype));
        }
        keep[i] = (uint8_t)(nz ^ invert);
    }
    return ATTN_OK;
}

attn_status attn_mask_from_keras(const void *src, attn_dtype dtype, size_t n,
                                 uint8_t *keep) {
    return convert_bool(src, dtype, n, keep, 1, "Keras mask");
}

attn_status attn_mask_from_torch_mha(const void *src, attn_dtype dtype,
                                     size_t n, uint8_t *keep) {
    return convert_bool(src, dtype, n, keep, 1, "PyTorch MHA mask");
}
