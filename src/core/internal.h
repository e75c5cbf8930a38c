/* Internal helpers shared by the library's source files; not installed. */
#ifndef ATTN_INTERNAL_H
#define ATTN_INTERNAL_H

#include "attn.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Records a detail message for this thread and returns status, so that
 * callers can write `return attn__fail(ATTN_E_SHAPE, "k has %d ...", n);`. */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
attn_status attn__fail(attn_status status, const char *fmt, ...);

/* Copies in to out (cap bytes, NUL-terminated, cut at a whole character)
 * with control bytes, DEL and bytes that are not valid UTF-8 written as
 * \xNN; valid UTF-8 is kept. Returns the length written. attn__fail
 * passes every message through it. */
size_t attn__escape(const char *in, char *out, size_t cap);

/* Internal invariant (never a caller mistake): abort with file and line. */
#define ATTN_ASSERT(cond)                                                     \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "attn: internal error %s:%d: %s\n", __FILE__,     \
                    __LINE__, #cond);                                         \
            abort();                                                          \
        }                                                                     \
    } while (0)

/* Overflow-checked products: return 0 and leave *out untouched on overflow
 * or negative operands. */
static inline int attn__mul_i64(int64_t a, int64_t b, int64_t *out) {
    if (a < 0 || b < 0) return 0;
    if (a != 0 && b > INT64_MAX / a) return 0;
    *out = a * b;
    return 1;
}

static inline int attn__mul_size(size_t a, size_t b, size_t *out) {
    if (a != 0 && b > SIZE_MAX / a) return 0;
    *out = a * b;
    return 1;
}

/* Allocation of n elements of size sz, 64-byte aligned, NULL on overflow or
 * failure (with the message set). Free with attn__free. */
void *attn__alloc(size_t n, size_t sz, const char *what);
void attn__free(void *p);

/* Bytes held through attn__alloc now, and the most held since the last
 * attn__alloc_peak_reset (0 where the C library cannot tell block sizes).
 * The benchmark measures a kernel's extra memory with them. */
size_t attn__alloc_current(void);
size_t attn__alloc_peak(void);
void attn__alloc_peak_reset(void);

/* Element offset of (i0, i1, i2, i3) in a view. */
static inline int64_t attn__off(const attn_tensor *t, int64_t i0, int64_t i1,
                                int64_t i2, int64_t i3) {
    return i0 * t->stride[0] + i1 * t->stride[1] + i2 * t->stride[2] +
           i3 * t->stride[3];
}

/* Loads n contiguous elements of a floating dtype (f32, f16, bf16, f64) at
 * src into f32 dst. */
void attn__load_f32(const void *src, attn_dtype dtype, int64_t n, float *dst);

/* 1 for f32, f16, bf16 and f64. */
int attn__is_float_dtype(attn_dtype d);

/* Element i of a contiguous array of any dtype, as double. */
double attn__load_one(const void *src, attn_dtype d, size_t i);

/* n elements of any dtype at src into a float dtype (f32, f16, bf16, f64)
 * at dst, unchecked: attn_convert validates, then calls this. */
void attn__convert_to_float(const void *src, attn_dtype src_dtype, void *dst,
                            attn_dtype dst_dtype, size_t n);

/* Validated shapes of one attention call. */
typedef struct {
    int64_t B, H, Hkv, Lq, Lk, Dk, Dv, group; /* group = H / Hkv */
    double scale;
} attn__sdpa_dims;

/* Validates q, k, v (and out / weights / lse if not NULL) against each other
 * and against opts; fills dims. Used by every SDPA kernel. allow_f64 lets
 * the reference accept f64 inputs and outputs. */
attn_status attn__sdpa_check(const attn_tensor *q, const attn_tensor *k,
                             const attn_tensor *v, const attn_sdpa_opts *opts,
                             const attn_tensor *out, const attn_tensor *weights,
                             int allow_f64, attn__sdpa_dims *dims);

/* Checks q, k, v for NaN/Inf (ATTN_E_NONFINITE with the first position). */
attn_status attn__check_finite(const attn_tensor *t, const char *name);
/* The same, also giving the largest |element| in *maxabs (0 if none). */
attn_status attn__check_finite_max(const attn_tensor *t, const char *name,
                                   double *maxabs);

/* Reference kernels (double accumulation), kernels/sdpa_ref.c. */
attn_status attn__sdpa_ref_forward(const attn_tensor *q, const attn_tensor *k,
                                   const attn_tensor *v,
                                   const attn_sdpa_opts *opts,
                                   const attn__sdpa_dims *dims,
                                   attn_tensor *out, attn_tensor *weights,
                                   float *lse);

/* Reference backward (double accumulation, P recomputed from q, k, mask
 * and bias; out and lse are not read). Adds into dq, dk, dv, dbias. */
attn_status attn__sdpa_ref_backward(const attn_tensor *q, const attn_tensor *k,
                                    const attn_tensor *v,
                                    const attn_tensor *dout,
                                    const attn_sdpa_opts *opts,
                                    const attn__sdpa_dims *dims,
                                    attn_tensor *dq, attn_tensor *dk,
                                    attn_tensor *dv, attn_tensor *dbias);

/* Flash backward, kernels/sdpa_flash_bwd.c: f32/f16/bf16 inputs, f32
 * out, dout and gradients (added into), lse from the forward. */
attn_status attn__sdpa_flash_backward(const attn_tensor *q, const attn_tensor *k,
                                      const attn_tensor *v,
                                      const attn_tensor *out, const float *lse,
                                      const attn_tensor *dout,
                                      const attn_sdpa_opts *opts,
                                      const attn__sdpa_dims *dims,
                                      attn_tensor *dq, attn_tensor *dk,
                                      attn_tensor *dv, attn_tensor *dbias);

/* Flash kernels, kernels/sdpa_flash.c (issue 3). */
attn_status attn__sdpa_flash_forward(const attn_tensor *q, const attn_tensor *k,
                                     const attn_tensor *v,
                                     const attn_sdpa_opts *opts,
                                     const attn__sdpa_dims *dims,
                                     attn_tensor *out, float *lse);

/* Element (b, h, i, j) of a mask-shaped tensor (keep, bias) whose axes of
 * size 1 broadcast. */
static inline double attn__bcast_get(const attn_tensor *t, int64_t b,
                                     int64_t h, int64_t i, int64_t j) {
    return attn_tensor_get(t, t->shape[0] == 1 ? 0 : b, t->shape[1] == 1 ? 0 : h,
                           t->shape[2] == 1 ? 0 : i, t->shape[3] == 1 ? 0 : j);
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

/* Philox4x32-10 keyed by seed on counter (c0..c3): four 32-bit words. */
void attn__philox4x32(uint64_t seed, const uint32_t ctr[4], uint32_t out[4]);

/* Threshold for dropout decisions: a draw u is kept iff u >= threshold. */
uint32_t attn__dropout_threshold(double p);

/* Tile classes for (query rows [i0, i1), key columns [j0, j1)) of (b, h). */
typedef enum {
    ATTN__TILE_EMPTY = 0, /* no visible pair: skip                          */
    ATTN__TILE_FULL = 1,  /* every pair visible (bias may still apply)       */
    ATTN__TILE_PARTIAL = 2 /* check each pair with attn_mask_visible         */
} attn__tile_class;

attn__tile_class attn__mask_classify(const attn_mask *m, int64_t b, int64_t h,
                                     int64_t i0, int64_t i1, int64_t j0,
                                     int64_t j1, int64_t Lq, int64_t Lk);

/* Effective (query, key) lengths of batch entry b. */
static inline void attn__lengths(const attn_mask *m, int64_t b, int64_t Lq,
                                 int64_t Lk, int64_t *lq, int64_t *lk) {
    *lq = m->query_lengths ? m->query_lengths[b] : Lq;
    *lk = m->key_lengths ? m->key_lengths[b] : Lk;
}

#endif /* ATTN_INTERNAL_H */
