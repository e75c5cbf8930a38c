/* The kernels' floor (src/kernels): the validated shapes of one attention
 * call, the shared argument check (sdpa_check.c), the entry points of the
 * reference and flash kernels, and the dropout generator. Layers and the
 * training code include it to call a kernel; the flash kernels' own pieces
 * are in flash.h, the BLAS guard in blas.h. Not installed. */
#ifndef ATTN_KERNELS_H
#define ATTN_KERNELS_H

#include "internal.h"
#include "mask.h"

/* Validated shapes of one attention call. */
typedef struct {
    int64_t B, H, Hkv, Lq, Lk, Dk, Dv, group; /* group = H / Hkv */
    double scale;
} attn__sdpa_dims;

/* Validates q, k, v (and out / weights if not NULL) against each other
 * and against opts; fills dims. Used by every SDPA kernel. allow_f64 lets
 * the reference accept f64 inputs and outputs (sdpa_check.c). */
ATTN__RING_API attn_status attn__sdpa_check(
    const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
    const attn_sdpa_opts *opts, const attn_tensor *out,
    const attn_tensor *weights, int allow_f64, attn__sdpa_dims *dims);

/* A view of shape (d0, d1, d2, d3) and dtype f32 (or f64 with allow_f64);
 * written outputs (is_output) may not broadcast. ATTN_E_DTYPE or
 * ATTN_E_SHAPE naming it otherwise. */
ATTN__RING_API attn_status attn__sdpa_check_view(const attn_tensor *t,
                                                 const char *name, int64_t d0,
                                                 int64_t d1, int64_t d2,
                                                 int64_t d3, int allow_f64,
                                                 int is_output);

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
attn_status attn__sdpa_flash_backward(
    const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
    const attn_tensor *out, const float *lse, const attn_tensor *dout,
    const attn_sdpa_opts *opts, const attn__sdpa_dims *dims, attn_tensor *dq,
    attn_tensor *dk, attn_tensor *dv, attn_tensor *dbias);

/* Flash forward, kernels/sdpa_flash.c. */
attn_status attn__sdpa_flash_forward(const attn_tensor *q, const attn_tensor *k,
                                     const attn_tensor *v,
                                     const attn_sdpa_opts *opts,
                                     const attn__sdpa_dims *dims,
                                     attn_tensor *out, float *lse);

/* Philox4x32-10 keyed by seed on counter (c0..c3): four 32-bit words
 * (kernels/dropout.c). */
void attn__philox4x32(uint64_t seed, const uint32_t ctr[4], uint32_t out[4]);

/* Threshold for dropout decisions: a draw u is kept iff u >= threshold. */
uint32_t attn__dropout_threshold(double p);

#endif /* ATTN_KERNELS_H */
