/* The mask read row by row, inline (no function of src/ behind it): the
 * effective lengths, the visible key range of a query row, reading
 * mask-shaped tensors that broadcast, the document ids of an entry, and
 * the classes of a tile. The mask (mask.c), its score modifiers
 * (score_mod.c) and user functions (user_mod.c) stand on it. Not
 * installed. */
#ifndef ATTN_MASK_ROWS_H
#define ATTN_MASK_ROWS_H

#include "internal.h"

/* Effective (query, key) lengths of batch entry b. */
static inline void attn__lengths(const attn_mask *m, int64_t b, int64_t Lq,
                                 int64_t Lk, int64_t *lq, int64_t *lk) {
    *lq = m->query_lengths ? m->query_lengths[b] : Lq;
    *lk = m->key_lengths ? m->key_lengths[b] : Lk;
}

/* The keys [*lo, *hi) that query row i of batch entry b may see through
 * padding (lengths), causal and window, with the mask's alignment: the
 * diagonal is key c = i (top-left) or i + lk - lq (bottom-right, from the
 * entry's own lengths). Empty (lo >= hi) for a row past its query length.
 * The bounds never decrease with i. The per-element parts (keep, layout,
 * random blocks) may hide more keys inside the range. This is the one
 * place that range is computed: attn_mask_visible, the tile classifier and
 * the flash kernels' row masks and band splits all call it. */
static inline void attn__mask_row_range(const attn_mask *m, int64_t b,
                                        int64_t i, int64_t Lq, int64_t Lk,
                                        int64_t *lo, int64_t *hi) {
    int64_t lq, lk;
    attn__lengths(m, b, Lq, Lk, &lq, &lk);
    int64_t l = 0, h = lk;
    if (i >= lq) h = 0;
    int64_t c = i + (m->align == ATTN_ALIGN_BOTTOM_RIGHT ? lk - lq : 0);
    if (m->causal && c + 1 < h) h = c + 1;
    if (m->window_right >= 0 && c + m->window_right + 1 < h)
        h = c + m->window_right + 1;
    if (m->window_left >= 0 && c - m->window_left > l) l = c - m->window_left;
    *lo = l;
    *hi = h;
}

/* Element (b, h, i, j) of a mask-shaped tensor (keep, bias) whose axes of
 * size 1 broadcast. */
static inline double attn__bcast_get(const attn_tensor *t, int64_t b, int64_t h,
                                     int64_t i, int64_t j) {
    return attn_tensor_get(t, t->shape[0] == 1 ? 0 : b,
                           t->shape[1] == 1 ? 0 : h, t->shape[2] == 1 ? 0 : i,
                           t->shape[3] == 1 ? 0 : j);
}

/* Byte address of element offset off of t's data. */
static inline const char *attn__elem_ptr(const attn_tensor *t, int64_t off) {
    return (const char *)t->data + off * (int64_t)attn_dtype_size(t->dtype);
}

/* Offset of the row (b, h, i) of a mask-shaped tensor whose axes of size 1
 * broadcast, and the stride along keys (0 when that axis broadcasts): the
 * hot loops walk a row with it instead of calling attn__bcast_get. */
static inline int64_t attn__bcast_row(const attn_tensor *t, int64_t b,
                                      int64_t h, int64_t i, int64_t *js) {
    *js = t->shape[3] == 1 ? 0 : t->stride[3];
    return (t->shape[0] == 1 ? 0 : b) * t->stride[0] +
           (t->shape[1] == 1 ? 0 : h) * t->stride[1] +
           (t->shape[2] == 1 ? 0 : i) * t->stride[2];
}

/* Key j of a keep-mask row (attn__elem_ptr of attn__bcast_row), as
 * "visible"; the keep dtypes are those attn_mask_check allows. */
static inline int attn__keep_at(const attn_tensor *t, const char *row,
                                int64_t js, int64_t j) {
    switch (t->dtype) {
    case ATTN_U8: return ((const uint8_t *)(const void *)row)[j * js] != 0;
    case ATTN_I32: return ((const int32_t *)(const void *)row)[j * js] != 0;
    case ATTN_F32: return ((const float *)(const void *)row)[j * js] != 0.0f;
    default: return 1; /* not reached: attn_mask_check allows these three */
    }
}

/* Row of the block-sparse layout (block_size > 0) that query i of head h
 * reads: entry j / block_size of it is key j's block. The block counts are
 * ceil-divided without forming L + block_size - 1, which overflows for a
 * block_size near INT64_MAX. */
static inline const uint8_t *attn__layout_row(const attn_mask *m, int64_t h,
                                              int64_t i, int64_t Lq,
                                              int64_t Lk) {
    const int64_t bs = m->block_size;
    const int64_t rows = (Lq - 1) / bs + 1, cols = (Lk - 1) / bs + 1;
    return m->layout + ((m->layout_heads == 1 ? 0 : h) * rows + i / bs) * cols;
}

/* Bias element for (b, h, i, j) as double (0 if no bias). */
static inline double attn__bias_at(const attn_mask *m, int64_t b, int64_t h,
                                   int64_t i, int64_t j) {
    return m->bias ? attn__bcast_get(m->bias, b, h, i, j) : 0.0;
}

/* Tile classes for (query rows [i0, i1), key columns [j0, j1)) of (b, h).
 * The tile is the mask's question over a box: the flash kernels skip EMPTY
 * tiles and mask only PARTIAL ones, and additive attention does the same. */
typedef enum {
    ATTN__TILE_EMPTY = 0,  /* no visible pair: skip                          */
    ATTN__TILE_FULL = 1,   /* every pair visible (bias may still apply)       */
    ATTN__TILE_PARTIAL = 2 /* check each pair with attn_mask_visible         */
} attn__tile_class;

/* 1 if the mask has a user function (score_mod, mask_mod) or block mask. */
static inline int attn__has_user_mod(const attn_mask *m) {
    return m->score_mod || m->mask_mod || m->block_mask;
}

/* 1 if the mask changes scores beyond visibility and an additive bias:
 * softcap, ALiBi or sinks, or asks user functions (the kernels that
 * refuse the former refuse the latter: the ring path classifies its block
 * pairs on head 0 only). */
static inline int attn__has_score_mod(const attn_mask *m) {
    return m->softcap > 0 || m->alibi != 0 || m->sinks != NULL ||
           attn__has_user_mod(m);
}

/* Document ids of entry b (NULL when documents are off). */
static inline const int64_t *attn__doc_q_row(const attn_mask *m, int64_t b,
                                             int64_t Lq) {
    return m->doc_q ? m->doc_q + b * Lq : NULL;
}
static inline const int64_t *attn__doc_k_row(const attn_mask *m, int64_t b,
                                             int64_t Lk) {
    return m->doc_q ? (m->doc_k ? m->doc_k : m->doc_q) + b * Lk : NULL;
}

#endif /* ATTN_MASK_ROWS_H */
