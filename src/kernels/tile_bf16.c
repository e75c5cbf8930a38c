/* bf16 tile products on AVX512_BF16 (see tile_bf16.h).
 *
 * The register blocking of tile.c: 8 rows x 32 columns in 16 zmm
 * accumulators; per pair of k, two 64-byte loads of the packed B (16
 * columns x 2 each) and 8 broadcasts of a 32-bit pair of A, each feeding two
 * vdpbf16ps. Stores are masked to the columns asked for. */
#include "tile_bf16.h"

#include "attn.h"

#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ATTN_X86 1
#else
#define ATTN_X86 0
#endif

#define NR 32

size_t attn__bf16_pack_elems(int64_t n, int64_t k) {
    const int64_t np = (k + 1) / 2;
    return (size_t)((n + NR - 1) / NR) * (size_t)(np > 0 ? np : 1) * 2 * NR;
}

/* element (column c, row x) of B: NT: B[c ldb + x]; NN: B[x ldb + c] */
static void pack(int64_t n, int64_t k, const uint16_t *B, int64_t ldb, int nt,
                 uint16_t *out) {
    const int64_t np = (k + 1) / 2;
    for (int64_t j = 0; j < n; j += NR) {
        uint16_t *panel = out + (j / NR) * np * 2 * NR;
        const int64_t w = n - j < NR ? n - j : NR;
        for (int64_t p = 0; p < np; p++) {
            uint16_t *row = panel + p * 2 * NR;
            for (int64_t c = 0; c < NR; c++)
                for (int64_t e = 0; e < 2; e++) {
                    const int64_t x = 2 * p + e;
                    row[2 * c + e] = c < w && x < k ? (nt ? B[(j + c) * ldb + x]
                                                          : B[x * ldb + j + c])
                                                    : 0;
                }
        }
    }
}

void attn__bf16_pack_nt(int64_t n, int64_t k, const uint16_t *B, int64_t ldb,
                        uint16_t *out) {
    pack(n, k, B, ldb, 1, out);
}

void attn__bf16_pack_nn(int64_t k, int64_t n, const uint16_t *B, int64_t ldb,
                        uint16_t *out) {
    pack(n, k, B, ldb, 0, out);
}

#if ATTN_X86
#define TBF __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

static inline int pair(const uint16_t *a) {
    int v;
    memcpy(&v, a, sizeof v);
    return v;
}

TBF static void bmicro_8(int64_t np, const uint16_t *A, int64_t lda,
                         const uint16_t *B, __m512 *out) {
    __m512 c00 = _mm512_setzero_ps(), c01 = c00;
    __m512 c10 = _mm512_setzero_ps(), c11 = c10;
    __m512 c20 = _mm512_setzero_ps(), c21 = c20;
    __m512 c30 = _mm512_setzero_ps(), c31 = c30;
    __m512 c40 = _mm512_setzero_ps(), c41 = c40;
    __m512 c50 = _mm512_setzero_ps(), c51 = c50;
    __m512 c60 = _mm512_setzero_ps(), c61 = c60;
    __m512 c70 = _mm512_setzero_ps(), c71 = c70;
    for (int64_t p = 0; p < np; p++) {
        const __m512bh b0 = (__m512bh)_mm512_loadu_si512(B + p * 64);
        const __m512bh b1 = (__m512bh)_mm512_loadu_si512(B + p * 64 + 32);
        __m512bh a;
        a = (__m512bh)_mm512_set1_epi32(pair(A + 0 * lda + 2 * p));
        c00 = _mm512_dpbf16_ps(c00, a, b0);
        c01 = _mm512_dpbf16_ps(c01, a, b1);
        a = (__m512bh)_mm512_set1_epi32(pair(A + 1 * lda + 2 * p));
        c10 = _mm512_dpbf16_ps(c10, a, b0);
        c11 = _mm512_dpbf16_ps(c11, a, b1);
        a = (__m512bh)_mm512_set1_epi32(pair(A + 2 * lda + 2 * p));
        c20 = _mm512_dpbf16_ps(c20, a, b0);
        c21 = _mm512_dpbf16_ps(c21, a, b1);
        a = (__m512bh)_mm512_set1_epi32(pair(A + 3 * lda + 2 * p));
        c30 = _mm512_dpbf16_ps(c30, a, b0);
        c31 = _mm512_dpbf16_ps(c31, a, b1);
        a = (__m512bh)_mm512_set1_epi32(pair(A + 4 * lda + 2 * p));
        c40 = _mm512_dpbf16_ps(c40, a, b0);
        c41 = _mm512_dpbf16_ps(c41, a, b1);
        a = (__m512bh)_mm512_set1_epi32(pair(A + 5 * lda + 2 * p));
        c50 = _mm512_dpbf16_ps(c50, a, b0);
        c51 = _mm512_dpbf16_ps(c51, a, b1);
        a = (__m512bh)_mm512_set1_epi32(pair(A + 6 * lda + 2 * p));
        c60 = _mm512_dpbf16_ps(c60, a, b0);
        c61 = _mm512_dpbf16_ps(c61, a, b1);
        a = (__m512bh)_mm512_set1_epi32(pair(A + 7 * lda + 2 * p));
        c70 = _mm512_dpbf16_ps(c70, a, b0);
        c71 = _mm512_dpbf16_ps(c71, a, b1);
    }
    out[0] = c00;
    out[1] = c01;
    out[2] = c10;
    out[3] = c11;
    out[4] = c20;
    out[5] = c21;
    out[6] = c30;
    out[7] = c31;
    out[8] = c40;
    out[9] = c41;
    out[10] = c50;
    out[11] = c51;
    out[12] = c60;
    out[13] = c61;
    out[14] = c70;
    out[15] = c71;
}

TBF static void bmicro_4(int64_t np, const uint16_t *A, int64_t lda,
                         const uint16_t *B, __m512 *out) {
    __m512 c00 = _mm512_setzero_ps(), c01 = c00;
    __m512 c10 = _mm512_setzero_ps(), c11 = c10;
    __m512 c20 = _mm512_setzero_ps(), c21 = c20;
    __m512 c30 = _mm512_setzero_ps(), c31 = c30;
    for (int64_t p = 0; p < np; p++) {
        const __m512bh b0 = (__m512bh)_mm512_loadu_si512(B + p * 64);
        const __m512bh b1 = (__m512bh)_mm512_loadu_si512(B + p * 64 + 32);
        __m512bh a;
        a = (__m512bh)_mm512_set1_epi32(pair(A + 0 * lda + 2 * p));
        c00 = _mm512_dpbf16_ps(c00, a, b0);
        c01 = _mm512_dpbf16_ps(c01, a, b1);
        a = (__m512bh)_mm512_set1_epi32(pair(A + 1 * lda + 2 * p));
        c10 = _mm512_dpbf16_ps(c10, a, b0);
        c11 = _mm512_dpbf16_ps(c11, a, b1);
        a = (__m512bh)_mm512_set1_epi32(pair(A + 2 * lda + 2 * p));
        c20 = _mm512_dpbf16_ps(c20, a, b0);
        c21 = _mm512_dpbf16_ps(c21, a, b1);
        a = (__m512bh)_mm512_set1_epi32(pair(A + 3 * lda + 2 * p));
        c30 = _mm512_dpbf16_ps(c30, a, b0);
        c31 = _mm512_dpbf16_ps(c31, a, b1);
    }
    out[0] = c00;
    out[1] = c01;
    out[2] = c10;
    out[3] = c11;
    out[4] = c20;
    out[5] = c21;
    out[6] = c30;
    out[7] = c31;
}

TBF static void bmicro_2(int64_t np, const uint16_t *A, int64_t lda,
                         const uint16_t *B, __m512 *out) {
    __m512 c00 = _mm512_setzero_ps(), c01 = c00;
    __m512 c10 = _mm512_setzero_ps(), c11 = c10;
    for (int64_t p = 0; p < np; p++) {
        const __m512bh b0 = (__m512bh)_mm512_loadu_si512(B + p * 64);
        const __m512bh b1 = (__m512bh)_mm512_loadu_si512(B + p * 64 + 32);
        __m512bh a;
        a = (__m512bh)_mm512_set1_epi32(pair(A + 0 * lda + 2 * p));
        c00 = _mm512_dpbf16_ps(c00, a, b0);
        c01 = _mm512_dpbf16_ps(c01, a, b1);
        a = (__m512bh)_mm512_set1_epi32(pair(A + 1 * lda + 2 * p));
        c10 = _mm512_dpbf16_ps(c10, a, b0);
        c11 = _mm512_dpbf16_ps(c11, a, b1);
    }
    out[0] = c00;
    out[1] = c01;
    out[2] = c10;
    out[3] = c11;
}

TBF static void bmicro_1(int64_t np, const uint16_t *A, int64_t lda,
                         const uint16_t *B, __m512 *out) {
    __m512 c00 = _mm512_setzero_ps(), c01 = c00;
    for (int64_t p = 0; p < np; p++) {
        const __m512bh b0 = (__m512bh)_mm512_loadu_si512(B + p * 64);
        const __m512bh b1 = (__m512bh)_mm512_loadu_si512(B + p * 64 + 32);
        __m512bh a;
        a = (__m512bh)_mm512_set1_epi32(pair(A + 0 * lda + 2 * p));
        c00 = _mm512_dpbf16_ps(c00, a, b0);
        c01 = _mm512_dpbf16_ps(c01, a, b1);
    }
    out[0] = c00;
    out[1] = c01;
}

typedef void (*bmicro_fn)(int64_t, const uint16_t *, int64_t, const uint16_t *,
                          __m512 *);

/* rows [0, m), columns [c0, c0 + n) of the packed panels (np pairs each,
 * starting at pair p0), stored at C[.][0 .. n): C = alpha acc or
 * C += alpha acc (one FMA: alpha = 1 is a plain add) */
TBF static void bdrive(int64_t m, int64_t c0, int64_t n, int64_t np, int64_t p0,
                       int64_t pstride, const uint16_t *A, int64_t lda,
                       const uint16_t *B, float *C, int64_t ldc, float alpha,
                       int add) {
    __m512 acc[16];
    const __m512 al = _mm512_set1_ps(alpha);
    const int64_t q0 = c0 / NR, q1 = (c0 + n + NR - 1) / NR;
    for (int64_t i = 0; i < m;) {
        const int64_t left = m - i;
        const int mr = left >= 8 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
        const bmicro_fn fn = mr == 8   ? bmicro_8
                             : mr == 4 ? bmicro_4
                             : mr == 2 ? bmicro_2
                                       : bmicro_1;
        for (int64_t q = q0; q < q1; q++) {
            const int64_t j = q * NR - c0;
            __mmask32 keep = 0xffffffffu;
            if (j < 0) keep &= 0xffffffffu << (-j);
            if (j + NR > n) keep &= 0xffffffffu >> (j + NR - n);
            const __mmask16 m0 = (__mmask16)keep, m1 = (__mmask16)(keep >> 16);
            fn(np, A + i * lda, lda, B + q * pstride + p0 * 2 * NR, acc);
            for (int r = 0; r < mr; r++) {
                float *c = C + (i + r) * ldc + j;
                if (add) {
                    _mm512_mask_storeu_ps(
                        c, m0,
                        _mm512_fmadd_ps(al, acc[2 * r],
                                        _mm512_maskz_loadu_ps(m0, c)));
                    _mm512_mask_storeu_ps(
                        c + 16, m1,
                        _mm512_fmadd_ps(al, acc[2 * r + 1],
                                        _mm512_maskz_loadu_ps(m1, c + 16)));
                } else {
                    _mm512_mask_storeu_ps(c, m0, _mm512_mul_ps(al, acc[2 * r]));
                    _mm512_mask_storeu_ps(c + 16, m1,
                                          _mm512_mul_ps(al, acc[2 * r + 1]));
                }
            }
        }
        i += mr;
    }
}

TBF static void cvt_avx512bf16(const float *x, int64_t n, uint16_t *y) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256(
            (__m256i *)(void *)(y + i),
            (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + i)));
    if (i < n) {
        const __mmask16 mk = (__mmask16)((1u << (n - i)) - 1);
        _mm256_mask_storeu_epi16(
            y + i, mk,
            (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mk, x + i)));
    }
}

void attn__bf16_nt(int64_t m, int64_t c0, int64_t nc, int64_t k, float alpha,
                   const uint16_t *A, int64_t lda, const uint16_t *pk, float *C,
                   int64_t ldc) {
    if (m <= 0 || nc <= 0) return;
    const int64_t np = (k + 1) / 2;
    bdrive(m, c0, nc, np, 0, np * 2 * NR, A, lda, pk, C, ldc, alpha, 0);
}

void attn__bf16_nn_acc(int64_t m, int64_t n, int64_t k, int64_t p0, int64_t p1,
                       const uint16_t *A, int64_t lda, const uint16_t *pk,
                       float *C, int64_t ldc, float alpha) {
    if (m <= 0 || n <= 0 || p1 <= p0) return;
    const int64_t np = (k + 1) / 2;
    bdrive(m, 0, n, p1 - p0, p0, np * 2 * NR, A, lda, pk, C, ldc, alpha, 1);
}

void attn__bf16_from_f32(const float *x, int64_t n, uint16_t *y) {
    cvt_avx512bf16(x, n, y);
}
#else
void attn__bf16_nt(int64_t m, int64_t c0, int64_t nc, int64_t k, float alpha,
                   const uint16_t *A, int64_t lda, const uint16_t *pk, float *C,
                   int64_t ldc) {
    (void)m, (void)c0, (void)nc, (void)k, (void)alpha, (void)A, (void)lda;
    (void)pk, (void)C, (void)ldc;
}
void attn__bf16_nn_acc(int64_t m, int64_t n, int64_t k, int64_t p0, int64_t p1,
                       const uint16_t *A, int64_t lda, const uint16_t *pk,
                       float *C, int64_t ldc, float alpha) {
    (void)m, (void)n, (void)k, (void)p0, (void)p1, (void)A, (void)lda;
    (void)pk, (void)C, (void)ldc, (void)alpha;
}
void attn__bf16_from_f32(const float *x, int64_t n, uint16_t *y) {
    for (int64_t i = 0; i < n; i++) y[i] = attn_f32_to_bf16(x[i]);
}
#endif

void attn__bf16_pairs_t(int64_t nr, int64_t nc, const float *X, int64_t ldx,
                        int64_t off, int64_t w, uint16_t *Y, int64_t ldy,
                        uint16_t *tmp) {
    for (int64_t j = 0; j < nc; j++) {
        uint16_t *y = Y + j * ldy;
        for (int64_t r = 0; r < off; r++) y[r] = 0;
        for (int64_t r = off + nr; r < w; r++) y[r] = 0;
    }
    for (int64_t r = 0; r < nr; r++) {
        /* a row at a time through the vector rounding, then scattered */
        attn__bf16_from_f32(X + r * ldx, nc, tmp);
        for (int64_t j = 0; j < nc; j++) Y[j * ldy + off + r] = tmp[j];
    }
}
