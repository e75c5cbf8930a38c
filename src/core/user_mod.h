/* User functions and block masks (user_mod.c): their checks, the tile
 * classes a block mask gives, and the rows the kernels run them on. Not
 * installed. */
#ifndef ATTN_USER_MOD_H
#define ATTN_USER_MOD_H

#include "mask_rows.h"

/* Checks mask_mod, score_mod and block_mask against the shapes (called by
 * attn__score_mod_check). */
attn_status attn__user_mod_check(const attn_mask *m, int64_t B, int64_t H,
                                 int64_t Lq, int64_t Lk);

/* The first failure of a user function in a call, shared by the threads
 * of a kernel: the row helpers below fill it (once, under a critical
 * section) and raise stop, which the kernels' loops poll to end early.
 * The message is made by attn__ufn_status on the calling thread after the
 * parallel region (the detail message is thread-local). Zero it first. */
typedef struct {
    int what; /* 0 none, 1 score_mod returned rc, 2 score_mod gave value,
                 3 its dscore was not finite, 4 mask_mod returned rc */
    int rc;
    int64_t b, h, i, j;
    double value;
    int stop;
} attn__ufn_err;

/* 1 once any thread recorded a failure in e (an atomic read). */
int attn__ufn_failed(attn__ufn_err *e);

/* ATTN_OK, or the status and message of the failure e holds. */
attn_status attn__ufn_status(const attn__ufn_err *e);

/* Class of rows [i0, i1) x keys [j0, j1) (valid indices) under mask_mod:
 * FULL without one; PARTIAL without a block mask; else the meet of the
 * block mask's cells the box overlaps. */
attn__tile_class attn__user_classify(const attn_mask *m, int64_t b, int64_t h,
                                     int64_t i0, int64_t i1, int64_t j0,
                                     int64_t j1);

/* Narrows [*lo, *hi) to the block columns a block mask has not EMPTY for
 * some row of [i0, i1); no-op without a block mask. */
void attn__block_mask_hull(const attn_mask *m, int64_t b, int64_t h, int64_t i0,
                           int64_t i1, int64_t *lo, int64_t *hi);

/* mask_mod on keys [lo, hi) of row i (b, h): s[0] is key lo; hidden keys
 * become -inf. With a block mask, EMPTY blocks are set to -inf and FULL
 * ones left alone without asking. Returns nonzero (and fills e) when
 * mask_mod fails. No-op without mask_mod. */
int attn__mask_mod_row_f(const attn_mask *m, int64_t b, int64_t h, int64_t i,
                         int64_t lo, int64_t hi, float *s, attn__ufn_err *e);

/* mask_mod over keys [j0, j0+n) of row i into keep (1 = visible), with
 * no block mask shortcuts (the reference). Nonzero on failure (e filled). */
int attn__mask_mod_keep(const attn_mask *m, int64_t b, int64_t h, int64_t i,
                        int64_t j0, int64_t n, uint8_t *keep, attn__ufn_err *e);

/* score_mod on row i (b, h), keys j0 .. j0+n-1 of s (f32 or f64), with
 * the contract of attn_score_mod_fn: -inf entries stay -inf; dmod (NULL
 * in forward) receives the derivatives (0 at masked entries). Nonzero on
 * failure (e filled). No-op without score_mod. The f64 form keeps a copy
 * of the row in old[n]. */
int attn__score_mod_row_f(const attn_mask *m, int64_t b, int64_t h, int64_t i,
                          int64_t j0, int64_t n, float *s, float *dmod,
                          attn__ufn_err *e);
int attn__score_mod_row_d(const attn_mask *m, int64_t b, int64_t h, int64_t i,
                          int64_t j0, int64_t n, double *s, double *dmod,
                          double *old, attn__ufn_err *e);

#endif /* ATTN_USER_MOD_H */
