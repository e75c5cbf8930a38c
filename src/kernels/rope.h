/* Rotary positions inside the kernels' floor (rope.c): the frequencies and
 * the rotated copies of q and k that attention over rotated inputs uses
 * (attn_sdpa_forward / backward / weight tiles and attention over a KV
 * cache). Not installed. */
#ifndef ATTN_ROPE_H
#define ATTN_ROPE_H

#include "internal.h"

/* The rotary dimension (rotary_dim, or head_dim for 0). */
int64_t attn__rope_dim(const attn_rope *rope, int64_t head_dim);

/* inv_freq[rd / 2] of a checked rope. */
void attn__rope_freqs(const attn_rope *rope, int64_t head_dim,
                      double *inv_freq);

/* Rotates one f32 row of head_dim features at position pos in place
 * (freq from attn__rope_freqs). */
void attn__rope_row_f32(const attn_rope *rope, const double *freq,
                        int64_t head_dim, int64_t pos, float *row);

/* Positions given as [L] or [B * L] (or NULL), each in [0, 2^40]. */
attn_status attn__rope_check_positions(const char *name, const int64_t *pos,
                                       int64_t n, int64_t B, int64_t L);

/* The default query positions of attention: the mask's aligned position c
 * of query i of entry b (i, or i + lk - lq under BOTTOM_RIGHT) into
 * out[B * Lq]; key_lens[b] (or Lk when NULL) are the key lengths. */
ATTN__RING_API void attn__rope_query_positions(const attn_mask *mask, int64_t B,
                                               int64_t Lq, int64_t Lk,
                                               const int64_t *key_lens,
                                               int64_t *out);

/* A rotated, contiguous f32 (f64 when src is f64) copy of src (B, H, L, D)
 * at the given positions (NULL: l); *buf holds it (attn__free). */
attn_status attn__rope_copy(const attn_rope *rope, const attn_tensor *src,
                            const int64_t *pos, int64_t n_pos, int threads,
                            attn_tensor *dst, void **buf);

/* opts with the rotation and its positions cleared (the kernels' opts once
 * q and k are rotated copies). */
static inline attn_sdpa_opts attn__opts_without_rope(const attn_sdpa_opts *o) {
    attn_sdpa_opts r = *o;
    r.rope = NULL;
    r.rope_q_positions = r.rope_k_positions = NULL;
    r.n_rope_q_positions = r.n_rope_k_positions = 0;
    return r;
}

/* q and k rotated for attention with opts->rope: copies, the positions
 * used and opts without the rope, for the kernels to run on. */
typedef struct {
    attn_tensor q, k, v; /* v: an f32 copy when q was f16 or bf16 */
    int64_t *qpos;       /* [B * Lq], owned */
    const int64_t *kpos;
    int64_t n_kpos;
    void *qbuf, *kbuf, *vbuf;
    attn_sdpa_opts opts;
} attn__rope_qk;

/* Fills r (q, k, v and shapes already validated by attn__sdpa_check); v
 * may be NULL (weights only). */
attn_status attn__rope_qk_make(const attn_tensor *q, const attn_tensor *k,
                               const attn_tensor *v, const attn_sdpa_opts *opts,
                               attn__rope_qk *r);
void attn__rope_qk_free(attn__rope_qk *r);

#endif /* ATTN_ROPE_H */
