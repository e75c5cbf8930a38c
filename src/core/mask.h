/* The mask's internals, what kernels, layers and pictures include: the
 * row geometry every one of them asks (mask_rows.h: "which keys does
 * query i see", one answer), the score modifiers and documents
 * (score_mod.h), the user functions (user_mod.h), and the class of a tile
 * (mask.c), which calls down into those. Not installed. */
#ifndef ATTN_MASK_H
#define ATTN_MASK_H

#include "score_mod.h"

attn__tile_class attn__mask_classify(const attn_mask *m, int64_t b, int64_t h,
                                     int64_t i0, int64_t i1, int64_t j0,
                                     int64_t j1, int64_t Lq, int64_t Lk);

#endif /* ATTN_MASK_H */
