/* The tile products of the flash kernels (tile.c): S = alpha A B^T (the
 * scores Q K^T), C += alpha A B (the output P V) and C += alpha A^T B (the
 * backward's key gradients). On the AVX-512 paths they are
 * register-blocked micro-kernels of tile.c; below, OpenBLAS's
 * single-thread sgemm (bench/tiles/tile_gemm.c measures both, and oneDNN and
 * LIBXSMM, on the attention tile shapes).
 *
 * With the micro-kernels each element is one chain of FMAs over k in
 * order, started from 0, so a product's bits do not depend on how its rows
 * and columns are cut into tiles or bands (OpenBLAS's do: there the
 * forward and the weight pass cut their tiles identically, which they do
 * on every path). Internal: not installed. */
#ifndef ATTN_TILE_H
#define ATTN_TILE_H

#include <stddef.h>
#include <stdint.h>

/* Floats of the packing buffer of an n x k B (64-byte aligned buffers run
 * fastest). */
size_t attn__tile_nt_pack_floats(int64_t n, int64_t k);

/* The B of products A B^T whose columns are rows of B [n x k] (ldb): K for
 * the scores. Prepared once per key tile, used by every block of it. */
typedef struct {
    const float *b;
    int64_t ldb, n, k;
    float *pack; /* panels [k][32] when the micro-kernels run, else unused */
    int packed;
} attn__tile_bt;

/* Prepares t for B; pack holds attn__tile_nt_pack_floats(n, k) floats. */
void attn__tile_bt_prepare(attn__tile_bt *t, int64_t n, int64_t k,
                           const float *B, int64_t ldb, float *pack);

/* C[m x nc] (ldc) = alpha A[m x k] (lda) B[c0 .. c0+nc)^T: columns
 * c0 .. c0+nc-1 of the product with t's B. */
void attn__tile_nt(int64_t m, int64_t c0, int64_t nc, float alpha,
                   const float *A, int64_t lda, const attn__tile_bt *t,
                   float *C, int64_t ldc);

/* As attn__tile_nt, with rmax[r] = the largest value stored in row r
 * (the softmax's row maximum, taken while the scores are in registers),
 * when t's B is packed for the micro-kernels; 0 (and nothing done)
 * otherwise. */
int attn__tile_nt_max(int64_t m, int64_t c0, int64_t nc, float alpha,
                      const float *A, int64_t lda, const attn__tile_bt *t,
                      float *C, int64_t ldc, float *rmax);

/* C[m x n] (ldc) += alpha A[m x k] (lda) B[k x n] (ldb). */
void attn__tile_nn_acc(int64_t m, int64_t n, int64_t k, float alpha,
                       const float *A, int64_t lda, const float *B, int64_t ldb,
                       float *C, int64_t ldc);

/* C[m x n] (ldc) += alpha A^T B: A is [k x m] (lda), B [k x n] (ldb) (the
 * backward's dV += P^T dO, dK += dS^T Q). */
void attn__tile_tn_acc(int64_t m, int64_t n, int64_t k, float alpha,
                       const float *A, int64_t lda, const float *B, int64_t ldb,
                       float *C, int64_t ldc);

/* The implementation the current path uses: "avx512 micro-kernels" or
 * "openblas sgemm". */
const char *attn__tile_impl(void);

/* The AVX-512 micro-kernels themselves, whatever the path (0 when the CPU
 * lacks AVX-512: then they do nothing); for tests and bench/tile_gemm.
 * C[m x n] = alpha A B^T with B [n x k] (pack as above). */
int attn__tile_nt_avx512(int64_t m, int64_t n, int64_t k, float alpha,
                         const float *A, int64_t lda, const float *B,
                         int64_t ldb, float *C, int64_t ldc, float *pack);
/* C += alpha op(A) B, op(A) = A (ta = 0) or A^T (ta = 1, A is k x m). */
int attn__tile_acc_avx512(int ta, int64_t m, int64_t n, int64_t k, float alpha,
                          const float *A, int64_t lda, const float *B,
                          int64_t ldb, float *C, int64_t ldc);

#endif /* ATTN_TILE_H */
