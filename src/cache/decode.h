/* Inner loops of the decode kernel (decode.c): scores of a block of
 * query rows against a run of cached key rows, and the weighted sum of a
 * run of cached value rows, reading the rows in their storage dtype and
 * converting them in registers. One table per (storage dtype, vector
 * level); decode_ops.c holds them. Internal: not installed. */
#ifndef ATTN_DECODE_H
#define ATTN_DECODE_H

#include "attn_cache.h"
#include "internal.h"
#include "../kernels/vec.h"

#include <stddef.h>

/* Value d of a stored row (dtype of the cache, sc its q8 scales) as f32. */
static inline float attn__decode_elem(attn_dtype dt, const unsigned char *row,
                                      const float *sc, int64_t d) {
    switch (dt) {
    case ATTN_F16:
        return attn_f16_to_f32(((const uint16_t *)(const void *)row)[d]);
    case ATTN_BF16:
        return attn_bf16_to_f32(((const uint16_t *)(const void *)row)[d]);
    case ATTN_Q8:
        return (float)((const int8_t *)row)[d] * sc[d / ATTN_Q8_BLOCK];
    default: return ((const float *)(const void *)row)[d];
    }
}

typedef struct {
    /* s[r * lds + j] = q_r . k_j for r < nr, j < nk: q_r = q + r * ldq (D
     * floats), k_j the stored row at k + j * rowb (with the nb scales at
     * ks + j * nb for q8; ks is NULL otherwise). */
    void (*dot)(const float *q, int64_t nr, int64_t ldq, const unsigned char *k,
                size_t rowb, const float *ks, int64_t nb, int64_t nk, int64_t D,
                float *s, int64_t lds);
    /* o_r[d] += sum_j p[r * ldp + j] v_j[d] for r < nr, d < Dv, j < nk:
     * o_r = o + r * ldo, v_j as k_j above. */
    void (*acc)(const float *p, int64_t nr, int64_t ldp, const unsigned char *v,
                size_t rowb, const float *vs, int64_t nb, int64_t nk,
                int64_t Dv, float *o, int64_t ldo);
} attn__decode_ops;

/* The table for a storage dtype (f32, f16, bf16, q8) at a vector level: a
 * level the CPU lacks (or, for f16 with AVX2, without F16C) falls back to
 * the next lower one. Results depend on the level, never on threads. */
const attn__decode_ops *attn__decode_ops_get(attn_dtype dtype,
                                             attn__vec_level level);

/* decode_simd.c: the vector table of a level, NULL where the CPU lacks it
 * (attn__decode_ops_get then tries the level below). */
const attn__decode_ops *attn__decode_simd_ops(attn_dtype dtype,
                                              attn__vec_level level);

#endif /* ATTN_DECODE_H */
