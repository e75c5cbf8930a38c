/* bf16 tile products on AVX512_BF16 (see tile_bf16.h).
 *
 * The register blocking of tile.c: 8 rows x 32 columns in 16 zmm
 * accumulators; per pair of k, two 64-byte loads of the packed B (16
 * columns x 2 each) and 8 broadcasts of a 32-bit pair of A, each feeding two
 * vdpbf16ps. Stores are masked to the columns asked for. */
#include "tile_bf16.h"

#include "attn.h"
#include "cpu.h"

#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ATTN_X86 1
#else
#define ATTN_X86 0
#endif

#define NR 32

int attn__bf16_tiles_chosen(attn_impl impl) {
    return impl == ATTN_IMPL_FLASH_BF16 &&
           attn__isa_get() >= ATTN__ISA_AVX512_BF16;
}

int64_t attn__bf16_pack_pairs(int64_t k) {
    const int64_t np = (k + 1) / 2;
    return np > 0 ? (np + 15) / 16 * 16 : 16;
}

size_t attn__bf16_pack_elems(int64_t n, int64_t k) {
    return (size_t)((n + NR - 1) / NR) * (size_t)attn__bf16_pack_pairs(k) * 2 *
           NR;
}

/* element (column c, row x) of B: NT: B[c ldb + x]; NN: B[x ldb + c];
 * the panels before column jf from pair pf on only (pack_fast did the
 * rest) */
static void pack_any(int64_t n, int64_t k, const uint16_t *B, int64_t ldb,
                     int nt, uint16_t *out, int64_t jf, int64_t pf) {
    const int64_t np = attn__bf16_pack_pairs(k);
    for (int64_t j = 0; j < n; j += NR) {
        uint16_t *panel = out + (j / NR) * np * 2 * NR;
        const int64_t w = n - j < NR ? n - j : NR;
        for (int64_t p = j < jf ? pf : 0; p < np; p++) {
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

#if ATTN_X86
/* 16 rows of 16 pairs (32-bit words) at src (row stride ld elements)
 * transposed: pair p of the 16 rows to dst + p * ldd (64 bytes each). */
__attribute__((target("avx512f"))) static void
transpose16(const uint16_t *src, int64_t ld, uint16_t *dst, int64_t ldd) {
    __m512i r[16], a[16], b[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_si512(src + i * ld);
    for (int i = 0; i < 8; i++) {
        a[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        a[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        b[4 * i] = _mm512_unpacklo_epi64(a[4 * i], a[4 * i + 2]);
        b[4 * i + 1] = _mm512_unpackhi_epi64(a[4 * i], a[4 * i + 2]);
        b[4 * i + 2] = _mm512_unpacklo_epi64(a[4 * i + 1], a[4 * i + 3]);
        b[4 * i + 3] = _mm512_unpackhi_epi64(a[4 * i + 1], a[4 * i + 3]);
    }
    /* b[4 i + j] holds, in its 128-bit lane l, pair 4 l + j of rows
     * 4 i .. 4 i + 3: gather the lanes */
    for (int j = 0; j < 4; j++) {
        const __m512i x0 = _mm512_shuffle_i32x4(b[j], b[4 + j], 0x88);
        const __m512i x1 = _mm512_shuffle_i32x4(b[j], b[4 + j], 0xdd);
        const __m512i y0 = _mm512_shuffle_i32x4(b[8 + j], b[12 + j], 0x88);
        const __m512i y1 = _mm512_shuffle_i32x4(b[8 + j], b[12 + j], 0xdd);
        _mm512_storeu_si512(dst + (0 + j) * ldd,
                            _mm512_shuffle_i32x4(x0, y0, 0x88));
        _mm512_storeu_si512(dst + (8 + j) * ldd,
                            _mm512_shuffle_i32x4(x0, y0, 0xdd));
        _mm512_storeu_si512(dst + (4 + j) * ldd,
                            _mm512_shuffle_i32x4(x1, y1, 0x88));
        _mm512_storeu_si512(dst + (12 + j) * ldd,
                            _mm512_shuffle_i32x4(x1, y1, 0xdd));
    }
}

/* The whole panels' pairs of whole rows fast, the rest by pack_any's
 * rule: NT moves 32-bit pairs (a transpose of words), NN interleaves two
 * rows of 32 columns with one permutation per 64 bytes. */
__attribute__((target("avx512f,avx512bw"))) static void
pack_fast(int64_t n, int64_t k, const uint16_t *B, int64_t ldb, int nt,
          uint16_t *out) {
    const int64_t np = attn__bf16_pack_pairs(k), full = k / 2;
    const int64_t nfull = n / NR * NR;
    pack_any(n, k, B, ldb, nt, out, nfull, full); /* edges and padding */
    if (nt) {
        const int64_t f16 = full / 16 * 16;
        for (int64_t j = 0; j < nfull; j += NR) {
            uint16_t *panel = out + (j / NR) * np * 2 * NR;
            for (int64_t half = 0; half < 2; half++)
                for (int64_t p = 0; p < f16; p += 16)
                    transpose16(B + (j + 16 * half) * ldb + 2 * p, ldb,
                                panel + p * 2 * NR + 16 * half * 2, 2 * NR);
            for (int64_t c = 0; c < NR; c++) {
                const uint16_t *src = B + (j + c) * ldb;
                for (int64_t p = f16; p < full; p++) {
                    uint32_t wv;
                    memcpy(&wv, src + 2 * p, sizeof wv);
                    memcpy(panel + p * 2 * NR + 2 * c, &wv, sizeof wv);
                }
            }
        }
        return;
    }
    __m512i lo, hi;
    {
        _Alignas(64) uint16_t il[32], ih[32];
        for (int c = 0; c < 16; c++) {
            il[2 * c] = (uint16_t)c;
            il[2 * c + 1] = (uint16_t)(32 + c);
            ih[2 * c] = (uint16_t)(16 + c);
            ih[2 * c + 1] = (uint16_t)(48 + c);
        }
        lo = _mm512_load_si512(il);
        hi = _mm512_load_si512(ih);
    }
    for (int64_t j = 0; j < nfull; j += NR) {
        uint16_t *panel = out + (j / NR) * np * 2 * NR;
        for (int64_t p = 0; p < full; p++) {
            const __m512i a = _mm512_loadu_si512(B + 2 * p * ldb + j);
            const __m512i b = _mm512_loadu_si512(B + (2 * p + 1) * ldb + j);
            _mm512_storeu_si512(panel + p * 2 * NR,
                                _mm512_permutex2var_epi16(a, lo, b));
            _mm512_storeu_si512(panel + p * 2 * NR + 32,
                                _mm512_permutex2var_epi16(a, hi, b));
        }
    }
}
#endif

static void pack(int64_t n, int64_t k, const uint16_t *B, int64_t ldb, int nt,
                 uint16_t *out) {
#if ATTN_X86
    if (attn__isa_get() >= ATTN__ISA_AVX512) {
        pack_fast(n, k, B, ldb, nt, out);
        return;
    }
#endif
    pack_any(n, k, B, ldb, nt, out, 0, 0);
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
    if (attn__isa_get() == ATTN__ISA_AMX)
        attn__amx_bf16_drive(m, c0, nc, 0, np, k, A, lda, pk, C, ldc, alpha, 0);
    else
        bdrive(m, c0, nc, np, 0, attn__bf16_pack_pairs(k) * 2 * NR, A, lda, pk,
               C, ldc, alpha, 0);
}

void attn__bf16_nn_acc(int64_t m, int64_t n, int64_t k, int64_t p0, int64_t p1,
                       const uint16_t *A, int64_t lda, const uint16_t *pk,
                       float *C, int64_t ldc, float alpha) {
    if (m <= 0 || n <= 0 || p1 <= p0) return;
    if (attn__isa_get() == ATTN__ISA_AMX)
        attn__amx_bf16_drive(m, 0, n, p0, p1, k, A, lda, pk, C, ldc, alpha, 1);
    else
        bdrive(m, 0, n, p1 - p0, p0, attn__bf16_pack_pairs(k) * 2 * NR, A, lda,
               pk, C, ldc, alpha, 1);
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

#if ATTN_X86
/* Rows r .. r+31, columns j .. j+15 of X rounded and transposed into Y:
 * rows taken two at a time as 32-bit words (row r + 2p in the low half,
 * r + 2p + 1 in the high one), then a transpose of words; each column's 32
 * entries land contiguous at Y[j' ldy + off + r]. */
TBF static void pairs_t_block(const float *X, int64_t ldx, uint16_t *Y,
                              int64_t ldy) {
    _Alignas(64) uint16_t w[16 * 32];
    _Alignas(64) static const uint16_t il[32] = {
        0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
        8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    const __m512i idx = _mm512_load_si512(il);
    for (int p = 0; p < 16; p++) {
        const __m512bh b =
            _mm512_cvtne2ps_pbh(_mm512_loadu_ps(X + (2 * p + 1) * ldx),
                                _mm512_loadu_ps(X + 2 * p * ldx));
        _mm512_store_si512(w + p * 32,
                           _mm512_permutexvar_epi16(idx, (__m512i)b));
    }
    transpose16(w, 32, Y, ldy);
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
    int64_t r32 = 0, c16 = 0;
#if ATTN_X86
    r32 = nr / 32 * 32;
    c16 = nc / 16 * 16;
    for (int64_t r = 0; r < r32; r += 32)
        for (int64_t j = 0; j < c16; j += 16)
            pairs_t_block(X + r * ldx + j, ldx, Y + j * ldy + off + r, ldy);
#endif
    for (int64_t r = 0; r < nr; r++) {
        /* the rest a row at a time through the vector rounding, then
         * scattered */
        const int64_t j0 = r < r32 ? c16 : 0;
        if (j0 >= nc) continue;
        attn__bf16_from_f32(X + r * ldx + j0, nc - j0, tmp);
        for (int64_t j = j0; j < nc; j++) Y[j * ldy + off + r] = tmp[j - j0];
    }
}
