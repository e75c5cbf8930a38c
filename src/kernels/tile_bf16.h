/* bf16 tile products with f32 accumulation for the flash forward on bf16
 * inputs (tile_bf16.c): AVX512_BF16's vdpbf16ps, which multiplies pairs of
 * bf16 exactly and adds them to f32 lanes. Operands are packed in pairs
 * along the summed axis; odd lengths are padded with zeros. Each output
 * element is one fixed chain over the pairs in order, so the bits do not
 * depend on how rows are cut, nor on the thread count. Callers check
 * attn__isa_get() >= ATTN__ISA_AVX512_BF16 first.
 *
 * The operands' layout (pairs of k side by side, 16-column halves of
 * 64 bytes) is AMX-BF16's B tile layout too: an AMX product would take the
 * same packed operands behind these functions.
 *
 * Where AMX is present the products run on its tiles (tile_amx.c), over
 * the same packed operands. Who takes them: attn__bf16_tiles_chosen.
 * Internal. */
#ifndef ATTN_TILE_BF16_H
#define ATTN_TILE_BF16_H

#include <stddef.h>
#include <stdint.h>

#include "attn.h"

/* 1 when a call on bf16 inputs with this impl takes the bf16 products:
 * asked for (ATTN_IMPL_FLASH_BF16) on a CPU with AVX512_BF16. AUTO keeps
 * the f32 tiles on every machine, so that its accuracy does not depend on
 * the CPU; on AMX the bf16 products ran at 2-3.6x their speed
 * (docs/performance.md). */
int attn__bf16_tiles_chosen(attn_impl impl);

/* Pairs of k held by each panel of a packed operand: (k + 1) / 2 rounded
 * up to a whole AMX tile (16), the rows past k zero. */
int64_t attn__bf16_pack_pairs(int64_t k);

/* Elements of bf16 (uint16_t) needed by a packed n x k operand. */
size_t attn__bf16_pack_elems(int64_t n, int64_t k);

/* Packs B [n x k] (ldb; rows are the products' columns: K for Q K^T) into
 * panels of 32 columns x pairs of k. */
void attn__bf16_pack_nt(int64_t n, int64_t k, const uint16_t *B, int64_t ldb,
                        uint16_t *pack);

/* Packs B [k x n] (ldb; V for P V) the same way: panels of 32 of its n
 * columns, pairs of its k rows (row k, if odd, padded with zeros). */
void attn__bf16_pack_nn(int64_t k, int64_t n, const uint16_t *B, int64_t ldb,
                        uint16_t *pack);

/* C[m x nc] (ldc) = alpha A B^T over columns c0 .. c0+nc-1 of a B packed
 * by attn__bf16_pack_nt(n, k): A [m x kp] bf16 rows of lda elements (lda
 * even, each row zero-padded to an even kp >= k). */
void attn__bf16_nt(int64_t m, int64_t c0, int64_t nc, int64_t k, float alpha,
                   const uint16_t *A, int64_t lda, const uint16_t *pack,
                   float *C, int64_t ldc);

/* C[m x n] (ldc) += alpha A B over pairs p0 .. p1-1 of B's k rows (packed
 * by attn__bf16_pack_nn(k, n)): A's row r holds the k entries
 * 2 p0 .. 2 p1 - 1 (lda even). The product is summed from 0 first, then
 * scaled and added (one FMA per element). */
void attn__bf16_nn_acc(int64_t m, int64_t n, int64_t k, int64_t p0, int64_t p1,
                       const uint16_t *A, int64_t lda, const uint16_t *pack,
                       float *C, int64_t ldc, float alpha);

/* n floats to bf16, rounded to nearest even (vcvtneps2bf16). */
void attn__bf16_from_f32(const float *x, int64_t n, uint16_t *y);

/* X [nr x nc] (ldx) rounded to bf16 and transposed into the A operand of
 * attn__bf16_nn_acc: row j of Y (ldy) holds w entries, X[r][j] at
 * off + r and zeros around (the backward's P^T and dS^T, whose rows start
 * at an odd query row as often as not). tmp holds nc elements. */
void attn__bf16_pairs_t(int64_t nr, int64_t nc, const float *X, int64_t ldx,
                        int64_t off, int64_t w, uint16_t *Y, int64_t ldy,
                        uint16_t *tmp);

/* The AMX products behind attn__bf16_nt (p0 = 0, p1 = (k + 1) / 2, add 0)
 * and attn__bf16_nn_acc (add 1) when the path is ATTN__ISA_AMX
 * (tile_amx.c): C[m x n] over columns c0.. of the pack of B (k elements
 * along the sum) = or += alpha A B over pairs p0 .. p1-1. */
void attn__amx_bf16_drive(int64_t m, int64_t c0, int64_t n, int64_t p0,
                          int64_t p1, int64_t k, const uint16_t *A, int64_t lda,
                          const uint16_t *B, float *C, int64_t ldc, float alpha,
                          int add);

/* AMX only: the raw sums A B^T of panels q0 .. q1-1 of a pack made by
 * attn__bf16_pack_nt(n, k), rows 0 .. m-1 of A, stored as whole tiles: row
 * r, column q * 32 + c of S (ld lds) for r below m rounded up to 16 (the
 * rows past m hold zeros) and every column of the panels. The flash
 * forward scales them inside its softmax pass. */
void attn__amx_bf16_nt_raw(int64_t m, int64_t q0, int64_t q1, int64_t k,
                           const uint16_t *A, int64_t lda, const uint16_t *B,
                           float *S, int64_t lds);

#endif /* ATTN_TILE_BF16_H */
