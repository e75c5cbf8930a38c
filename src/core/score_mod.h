/* Score modifiers and documents (score_mod.c): soft-capping, ALiBi,
 * sinks and document ids, checked and read. Not installed. */
#ifndef ATTN_SCORE_MOD_H
#define ATTN_SCORE_MOD_H

#include "user_mod.h"

/* Checks the score-modifier and document fields of a mask against the
 * shapes (called by attn_mask_check). */
attn_status attn__score_mod_check(const attn_mask *m, int64_t B, int64_t H,
                                  int64_t Lq, int64_t Lk);

/* ALiBi slope of head h of H (the given slopes or the standard ones). */
double attn__alibi_slope(const attn_mask *m, int64_t H, int64_t h);

/* ALiBi term for query i, key j of (b, h): 0 when alibi is off. */
double attn__alibi_at(const attn_mask *m, int64_t b, int64_t H, int64_t h,
                      int64_t i, int64_t j, int64_t Lq, int64_t Lk);

/* Narrows [*lo, *hi) to the keys of query i's document (entry b); no-op
 * without documents. Ids are sorted, so that is one contiguous range. */
void attn__doc_range(const attn_mask *m, int64_t b, int64_t i, int64_t Lq,
                     int64_t Lk, int64_t *lo, int64_t *hi);

/* Narrows [*lo, *hi) to the keys whose document lies between those of
 * rows i0 and i1 - 1 (the hull of the rows' ranges); no-op without
 * documents. */
void attn__doc_hull(const attn_mask *m, int64_t b, int64_t i0, int64_t i1,
                    int64_t Lq, int64_t Lk, int64_t *lo, int64_t *hi);

/* Class of rows [i0, i1) x keys [j0, j1) (all valid indices) under the
 * documents alone: EMPTY when no row shares a document with a key, FULL
 * when all are in one document. */
attn__tile_class attn__doc_classify(const attn_mask *m, int64_t b, int64_t i0,
                                    int64_t i1, int64_t j0, int64_t j1,
                                    int64_t Lq, int64_t Lk);

#endif /* ATTN_SCORE_MOD_H */
