/* Pieces shared by the flash kernels (forward sdpa_flash.c, the weight
 * pass sdpa_weights.c, backward sdpa_flash_bwd.c): tile sizes and bands
 * (flash_tiles.c), loading a tile of rows as f32 (in place, packed or
 * converted from f16/bf16), and the mask + bias pass over one row of a
 * score tile (flash.c). Internal: not installed. */
#ifndef ATTN_FLASH_H
#define ATTN_FLASH_H

#include "blas.h"
#include "kernels.h"
#include "vec.h"

#include <math.h>
#include <stddef.h>

/* ---- tile sizes and bands (flash_tiles.c) ------------------------------ */

/* Query rows and key columns of one tile for these shapes. They depend on
 * the shapes only (never on the thread count), so results are bitwise the
 * same on any number of threads. */
void attn__flash_tile_sizes(const attn__sdpa_dims *d, int64_t *bq, int64_t *bk);

/* Overrides of the tile sizes for tuning runs (0 = the measured default).
 * Not thread-safe: set them while no kernel runs. */
extern int64_t attn__flash_bq_override, attn__flash_bk_override,
    attn__flash_rc_override;

/* A block of a tile that holds all its visible pairs: rows r0 .. r0+nr-1
 * and columns c0 .. c0+nc-1 (absolute indices), with its own class. */
typedef struct {
    int64_t r0, nr, c0, nc;
    attn__tile_class cls;
} attn__flash_block;

/* Splits a PARTIAL tile (rows [i0, i0+ni), columns [j0, j0+nj)) of head
 * (b, h) into bands of at most rc rows (attn__flash_split_rows), each cut
 * to the columns its rows can see through padding, causal and window, so
 * that the diagonal of a causal mask or a window narrower than a tile
 * costs about what is visible. Other classes give the tile itself. Writes
 * at most ceil(ni / rc) blocks (none empty) and returns their number. */
int64_t attn__flash_split_tile(const attn_mask *m, const attn__sdpa_dims *d,
                               int64_t b, int64_t h, int64_t i0, int64_t ni,
                               int64_t j0, int64_t nj, attn__tile_class cls,
                               attn__flash_block *out);

/* Row band of attn__flash_split_tile for these shapes. */
int64_t attn__flash_split_rows(const attn__sdpa_dims *d);

/* ---- carving a thread's workspace ------------------------------------ */

/* Offset in floats of the next part, of n floats, of a workspace being
 * laid out; *at is its running size. Every part starts on 64 bytes. */
static inline size_t attn__ws_take(size_t *at, size_t n) {
    size_t off = *at;
    *at += (n + 15) & ~(size_t)15;
    return off;
}

/* Floats that hold the blocks attn__flash_split_tile writes for a query
 * tile of bq rows (stored as floats' worth of bytes). */
static inline size_t attn__flash_blocks_floats(const attn__sdpa_dims *d,
                                               int64_t bq) {
    int64_t rc = attn__flash_split_rows(d);
    return (size_t)((bq + rc - 1) / rc) * sizeof(attn__flash_block) /
               sizeof(float) +
           1;
}

/* ---- rows as f32 ----------------------------------------------------- */

/* 1 if rows of t can be handed to BLAS in place: f32 with a contiguous last
 * axis and a row stride BLAS accepts. Otherwise rows are packed/converted
 * into a buffer of n x shape[3] floats. */
int attn__flash_rows_direct(const attn_tensor *t);

/* Rows r0 .. r0+n-1 of slice (b, h) of t as f32 rows with leading
 * dimension *ld: a pointer into t (attn__flash_rows_direct) or buf filled
 * with the converted rows (ld = shape[3]). */
const float *attn__flash_rows(const attn_tensor *t, int64_t b, int64_t h,
                              int64_t r0, int64_t n, float *buf, int64_t *ld);

/* n contiguous f16 / bf16 / f32 values to f32 (F16C when the CPU has it). */
void attn__flash_to_f32(const void *src, attn_dtype dtype, int64_t n,
                        float *dst);

/* Rows r0 .. r0+n-1 of slice (b, h) of a bf16 tensor, D values each, into
 * dst rows of ld elements (zeros from D to ld): the bf16 tile products'
 * operands. */
void attn__flash_bf16_rows(const attn_tensor *t, int64_t b, int64_t h,
                           int64_t r0, int64_t n, uint16_t *dst, int64_t ld);

/* ---- limits ---------------------------------------------------------- */

/* ATTN_E_UNSUPPORTED (naming who) when Dk or Dv is beyond what the flash
 * kernels' BLAS calls take (int dimensions, with room for a tile of rows);
 * ATTN_OK otherwise. */
ATTN__RING_API attn_status attn__flash_check_dims(const attn__sdpa_dims *d,
                                                  const char *who);

/* ---- threads ----------------------------------------------------------- */

/* Threads a kernel runs: opts->threads, else OpenMP's default, at least 1
 * and at most items (the number of work units). */
int attn__flash_team_size(const attn_sdpa_opts *opts, int64_t items);

/* ---- mask and bias on a score row ------------------------------------ */

/* Row i of head (b, h), key columns j0 .. j0+nj-1: s holds scale * q.k.
 * For a PARTIAL tile, masked entries become -inf (mask_mod asked there);
 * for any class the bias (if any) is added to the visible ones. Nothing to
 * do (and callers may skip the call) for a FULL tile without bias.
 * Nonzero when mask_mod failed (recorded in err). */
int attn__flash_mask_row(const attn_mask *m, const attn__sdpa_dims *d,
                         int64_t b, int64_t h, int64_t i, int64_t j0,
                         int64_t nj, attn__tile_class cls, float *s,
                         attn__ufn_err *err);

/* The whole score pass on row i of head (b, h), keys j0 .. j0+nj-1, where
 * s holds scale * q.k: soft-capping (keeping 1 - tanh^2 in capd[0..nj)
 * when capd is not NULL, for the backward), then attn__flash_mask_row,
 * then ALiBi, then the user's score_mod (its derivatives in dmod[0..nj)
 * when dmod is not NULL). attn__flash_row_needed says when a caller may
 * skip it. Nonzero when a user function failed (recorded in err: the
 * caller stops and reports attn__ufn_status). */
int attn__flash_score_row(const attn_mask *m, const attn__sdpa_dims *d,
                          int64_t b, int64_t h, int64_t i, int64_t j0,
                          int64_t nj, attn__tile_class cls, float *s,
                          float *capd, float *dmod, attn__ufn_err *err);

static inline int attn__flash_row_needed(const attn_mask *m,
                                         attn__tile_class cls) {
    return cls != ATTN__TILE_FULL || m->bias || m->softcap > 0 || m->alibi ||
           m->score_mod;
}

/* Sink logit of head h (-inf without sinks). */
static inline float attn__flash_sink(const attn_mask *m, int64_t h) {
    return m->sinks ? (float)m->sinks[h] : -INFINITY;
}

/* Applies the dropout of row i (b, h) to p[0..nj) = weights of keys j0..:
 * dropped entries become 0, kept ones are multiplied by 1 / (1 - p). The
 * decisions are attn_dropout_kept's. */
void attn__flash_dropout_row(uint64_t seed, double p, int64_t b, int64_t h,
                             int64_t i, int64_t j0, int64_t nj, float *x);

/* ---- forward with the softmax's row max and sum ----------------------- */

/* attn__sdpa_flash_forward that also stores, when mrow/lrow are not NULL
 * ([B * H * Lq] each), each row's final max m and sum l (lse = m + log l).
 * The weight pass normalizes with them: exp(s - m) / l keeps the accuracy
 * of a plain f32 softmax where exp(s - lse) would carry lse's rounding
 * (|lse| x 6e-8, visible with scores of magnitude 1e4). */
attn_status attn__flash_forward_ml(const attn_tensor *q, const attn_tensor *k,
                                   const attn_tensor *v,
                                   const attn_sdpa_opts *opts,
                                   const attn__sdpa_dims *d, attn_tensor *out,
                                   float *lse, float *mrow, float *lrow);

/* ---- a block of a longer sequence (ring attention, src/dist/) ---------- */

/* Where a call's rows sit in a longer sequence: query row i of q and key j
 * of k are positions qpos + i and kpos + j of a sequence of Lq queries and
 * Lk keys, and the mask (padding lengths, causal alignment, window) and
 * dropout are those of the long sequence at those positions. NULL is the
 * call's own frame ({0, 0, d->Lq, d->Lk}). The mask must have been checked
 * against (Lq, Lk). */
typedef struct {
    int64_t qpos, kpos, Lq, Lk;
} attn__flash_pos;

/* The dims the mask helpers see (d with pos's lengths) and the offsets. */
void attn__flash_frame(const attn__sdpa_dims *d, const attn__flash_pos *pos,
                       attn__sdpa_dims *md, int64_t *qpos, int64_t *kpos);

/* attn__flash_forward_ml for the block pos places in a longer sequence:
 * out, lse, mrow and lrow are of the block's rows, normalized over the
 * block's keys only. */
ATTN__RING_API attn_status
attn__flash_forward_at(const attn_tensor *q, const attn_tensor *k,
                       const attn_tensor *v, const attn_sdpa_opts *opts,
                       const attn__sdpa_dims *d, const attn__flash_pos *pos,
                       attn_tensor *out, float *lse, float *mrow, float *lrow);

/* attn__sdpa_flash_backward for a block: lse, out and dout are the full
 * sequence's (the rows' lse over every key), so the block's P, and its
 * contributions added into dq, dk, dv, are exact parts of the full ones.
 * No bias (dbias) in this form. */
ATTN__RING_API attn_status attn__flash_backward_at(
    const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
    const attn_tensor *out, const float *lse, const attn_tensor *dout,
    const attn_sdpa_opts *opts, const attn__sdpa_dims *d,
    const attn__flash_pos *pos, attn_tensor *dq, attn_tensor *dk,
    attn_tensor *dv);

/* ---- the weight pass (sdpa_weights.c) --------------------------------- */

/* Fills weights (B, H, Lq, Lk) f32 with the normalized weights after
 * dropout, from the rows' m and l saved by attn__flash_forward_ml.
 * Parallel over rows. */
attn_status attn__flash_fill_weights(const attn_tensor *q, const attn_tensor *k,
                                     const attn_sdpa_opts *opts,
                                     const attn__sdpa_dims *d,
                                     const float *mrow, const float *lrow,
                                     attn_tensor *weights);

#endif /* ATTN_FLASH_H */
