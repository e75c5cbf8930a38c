/* Linear maps on bf16 products with f32 accumulation (the pretrained
 * model's `dtype` bf16): y = x W^T + b with x and W rounded to bf16 and
 * the products of tile_bf16.h (AVX512_BF16's vdpbf16ps), like PyTorch's
 * autocast to bfloat16 on the linear maps. Everything else (LayerNorm,
 * softmax, activations, residuals) stays f32.
 *
 * The switch is per calling thread (attn__linear_bf16_scope), set by a
 * model's forward around its layers, so the layer code keeps its one call
 * (attn_linear_forward) and other callers are unaffected. */
#include "layers.h"
#include "../kernels/cpu.h"
#include "../kernels/tile_bf16.h"

#include <cblas.h>
#include <string.h>

static _Thread_local int bf16_on;

int attn__linear_bf16_scope(int on) {
    const int was = bf16_on;
    bf16_on = on;
    return was;
}

int attn__linear_bf16_active(void) {
    return bf16_on && attn__isa_get() >= ATTN__ISA_AVX512_BF16;
}

/* Rows of y per task: the shape decides, never the thread count; each
 * element is one fixed chain over the pairs of `in`, so the bits are the
 * same on any thread count. */
#define ROWS 64
#define COLS 256

/* src (n, cols) rounded to bf16 rows of dst with stride ld >= cols, the
 * pad (ld > cols: the products take pairs) zeroed. Called inside a
 * parallel region: its rows are the team's work-shared loop. */
static void rows_to_bf16(int64_t n, int64_t cols, const float *src,
                         uint16_t *dst, int64_t ld) {
#pragma omp for schedule(static)
    for (int64_t r = 0; r < n; r++) {
        dst[r * ld + ld - 1] = 0;
        attn__bf16_from_f32(src + r * cols, cols, dst + r * ld);
    }
}

attn_status attn__linear_forward_bf16(int64_t n, int64_t in, int64_t out,
                                      const float *x, const float *w,
                                      const float *b, float *y) {
    const int64_t ldx = (in + 1) & ~(int64_t)1;
    uint16_t *wb =
        attn__alloc((size_t)(out * in), sizeof(uint16_t), "bf16 weights");
    uint16_t *pk = attn__alloc(attn__bf16_pack_elems(out, in), sizeof(uint16_t),
                               "bf16 packed weights");
    uint16_t *xb =
        attn__alloc((size_t)(n * ldx), sizeof(uint16_t), "bf16 inputs");
    if (!wb || !pk || !xb) {
        attn__free(wb);
        attn__free(pk);
        attn__free(xb);
        return ATTN_E_NOMEM;
    }
    const int team = openblas_get_num_threads();
    const int64_t rb = (n + ROWS - 1) / ROWS, cb = (out + COLS - 1) / COLS;
#pragma omp parallel num_threads(team > 1 ? team : 1)
    {
        rows_to_bf16(out, in, w, wb, in);
        rows_to_bf16(n, in, x, xb, ldx);
#pragma omp single
        attn__bf16_pack_nt(out, in, wb, in, pk);
#pragma omp for collapse(2) schedule(static)
        for (int64_t i = 0; i < rb; i++)
            for (int64_t j = 0; j < cb; j++) {
                const int64_t r0 = i * ROWS, c0 = j * COLS;
                const int64_t m = n - r0 < ROWS ? n - r0 : ROWS;
                const int64_t nc = out - c0 < COLS ? out - c0 : COLS;
                float *yb = y + r0 * out + c0;
                attn__bf16_nt(m, c0, nc, in, 1.0f, xb + r0 * ldx, ldx, pk, yb,
                              out);
                if (b)
                    for (int64_t r = 0; r < m; r++)
                        for (int64_t c = 0; c < nc; c++)
                            yb[r * out + c] += b[c0 + c];
            }
    }
    attn__free(wb);
    attn__free(pk);
    attn__free(xb);
    return ATTN_OK;
}

/* The backward on the same products: dx += dy W and dW += dy^T x with dy,
 * W and x rounded to bf16 and f32 sums (each element one chain over its
 * summed axis in order, whatever the thread count); db in f32, rows in
 * order as the f32 path sums them. */
attn_status attn__linear_backward_bf16(int64_t n, int64_t in, int64_t out,
                                       const float *x, const float *w,
                                       const float *dy, float *dw, float *db,
                                       float *dx) {
    const int64_t ldo = (out + 1) & ~(int64_t)1, ldn = (n + 1) & ~(int64_t)1;
    /* dy rows (for dx), dy^T rows (for dW), an operand in rows and packed */
    uint16_t *dyb = dx ? attn__alloc((size_t)(n * ldo), sizeof(uint16_t),
                                     "bf16 output gradients")
                       : NULL;
    uint16_t *dyt = dw ? attn__alloc((size_t)(out * ldn), sizeof(uint16_t),
                                     "bf16 output gradients, transposed")
                       : NULL;
    uint16_t *tmp =
        dw ? attn__alloc((size_t)out, sizeof(uint16_t), "bf16 row") : NULL;
    const int64_t big = n > out ? n : out;
    uint16_t *ob =
        attn__alloc((size_t)(big * in), sizeof(uint16_t), "bf16 operand");
    uint16_t *pk = attn__alloc(attn__bf16_pack_elems(in, big), sizeof(uint16_t),
                               "bf16 packed operand");
    attn_status st = ATTN_OK;
    if ((dx && !dyb) || (dw && (!dyt || !tmp)) || !ob || !pk) {
        st = ATTN_E_NOMEM;
        goto done;
    }
    if (db)
        for (int64_t r = 0; r < n; r++)
            for (int64_t c = 0; c < out; c++) db[c] += dy[r * out + c];
    const int team0 = openblas_get_num_threads(), team = team0 > 1 ? team0 : 1;
    if (dx) { /* dx (n, in) += dy (n, out) W (out, in) */
        const int64_t np = (out + 1) / 2;
        const int64_t rb = (n + ROWS - 1) / ROWS, cb = (in + COLS - 1) / COLS;
#pragma omp parallel num_threads(team)
        {
            rows_to_bf16(out, in, w, ob, in);
            rows_to_bf16(n, out, dy, dyb, ldo);
#pragma omp single
            attn__bf16_pack_nn(out, in, ob, in, pk);
#pragma omp for collapse(2) schedule(static)
            for (int64_t i = 0; i < rb; i++)
                for (int64_t j = 0; j < cb; j++) {
                    const int64_t r0 = i * ROWS, c0 = j * COLS;
                    const int64_t m = n - r0 < ROWS ? n - r0 : ROWS;
                    const int64_t nc = in - c0 < COLS ? in - c0 : COLS;
                    attn__bf16_nn_acc(m, nc, out, 0, np, dyb + r0 * ldo, ldo,
                                      pk + attn__bf16_pack_elems(c0, out),
                                      dx + r0 * in + c0, in, 1.0f);
                }
        }
    }
    if (dw) { /* dW (out, in) += dy^T (out, n) x (n, in) */
        const int64_t np = (n + 1) / 2;
        const int64_t rb = (out + ROWS - 1) / ROWS, cb = (in + COLS - 1) / COLS;
        attn__bf16_pairs_t(n, out, dy, out, 0, ldn, dyt, ldn, tmp);
#pragma omp parallel num_threads(team)
        {
            rows_to_bf16(n, in, x, ob, in);
#pragma omp single
            attn__bf16_pack_nn(n, in, ob, in, pk);
#pragma omp for collapse(2) schedule(static)
            for (int64_t i = 0; i < rb; i++)
                for (int64_t j = 0; j < cb; j++) {
                    const int64_t r0 = i * ROWS, c0 = j * COLS;
                    const int64_t m = out - r0 < ROWS ? out - r0 : ROWS;
                    const int64_t nc = in - c0 < COLS ? in - c0 : COLS;
                    attn__bf16_nn_acc(m, nc, n, 0, np, dyt + r0 * ldn, ldn,
                                      pk + attn__bf16_pack_elems(c0, n),
                                      dw + r0 * in + c0, in, 1.0f);
                }
        }
    }
done:
    attn__free(dyb);
    attn__free(dyt);
    attn__free(tmp);
    attn__free(ob);
    attn__free(pk);
    return st;
}
