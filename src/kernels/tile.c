/* The flash kernels' tile products (see tile.h).
 *
 * AVX-512 micro-kernels: 6 (or 4) rows x 64 columns of C in 24 (16) zmm
 * accumulators, from two panels of 32 columns of B; per k, four 16-wide
 * loads of B and one broadcast of A per row (folded into the FMAs as
 * {1to16} memory operands). Edges take 4, 2 or 1 rows x 32 columns. For
 * A B^T, B is packed once per call into panels of 32 columns, [k][32], the
 * last one padded with zeros; for A B the rows of B are read in place
 * (masked in the last panel). Columns past n are never stored. */
#include "tile.h"

#include "cpu.h"

#include <cblas.h>
#include <math.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ATTN_X86 1
#else
#define ATTN_X86 0
#endif

#define NR 32

size_t attn__tile_nt_pack_floats(int64_t n, int64_t k) {
    return (size_t)((n + NR - 1) / NR) * NR * (size_t)(k > 0 ? k : 1);
}

#if ATTN_X86
#define T512 __attribute__((target("avx512f,avx512bw,avx512vl")))
#define INL __attribute__((always_inline)) inline

/* Row r of micro_w: one broadcast of A(r, x), four FMAs. */
#define ROW64(r)                                                               \
    do {                                                                       \
        const __m512 a = _mm512_set1_ps(A##r[o]);                              \
        c##r##0 = _mm512_fmadd_ps(a, b0, c##r##0);                             \
        c##r##1 = _mm512_fmadd_ps(a, b1, c##r##1);                             \
        c##r##2 = _mm512_fmadd_ps(a, b2, c##r##2);                             \
        c##r##3 = _mm512_fmadd_ps(a, b3, c##r##3);                             \
    } while (0)
/* Row r's accumulators out: two to each panel's half. */
#define OUT64(r)                                                               \
    do {                                                                       \
        out0[2 * (r)] = c##r##0;                                               \
        out0[2 * (r) + 1] = c##r##1;                                           \
        out1[2 * (r)] = c##r##2;                                               \
        out1[2 * (r) + 1] = c##r##3;                                           \
    } while (0)
/* Rows [0, mr) x 64 columns, mr = 6 or 4 (a constant where inlined): two
 * panels at once (B0 and B1, rows ldb apart, loads masked by lm0 .. lm3).
 * With 6 rows, 4 loads and 6 broadcasts per 24 FMAs, where 8 rows x 32
 * columns take 2 and 8 per 16: the forward on one core ran 18-23% faster
 * with these (its 16-row chunks as 6 + 6 + 4 rows) than with 8 + 8 rows x
 * 32 columns. Each element is the same chain of FMAs whatever the kernel;
 * out0 gets panel B0's columns, out1 B1's, two accumulators per row. */
T512 INL static void micro_w(int mr, int64_t k, const float *A, int64_t sa,
                             int64_t sk, const float *B0, const float *B1,
                             int64_t ldb, __mmask16 lm0, __mmask16 lm1,
                             __mmask16 lm2, __mmask16 lm3, __m512 *out0,
                             __m512 *out1) {
    __m512 c00 = _mm512_setzero_ps(), c01 = c00, c02 = c00, c03 = c00;
    __m512 c10 = c00, c11 = c00, c12 = c00, c13 = c00;
    __m512 c20 = c00, c21 = c00, c22 = c00, c23 = c00;
    __m512 c30 = c00, c31 = c00, c32 = c00, c33 = c00;
    __m512 c40 = c00, c41 = c00, c42 = c00, c43 = c00;
    __m512 c50 = c00, c51 = c00, c52 = c00, c53 = c00;
    const float *A0 = A, *A1 = A + sa, *A2 = A + 2 * sa, *A3 = A + 3 * sa;
    /* rows 4 and 5 only with mr = 6 (no address past A's rows) */
    const float *A4 = A + (mr > 4 ? 4 : 0) * sa;
    const float *A5 = A + (mr > 4 ? 5 : 0) * sa;
    for (int64_t x = 0; x < k; x++) {
        const __m512 b0 = _mm512_maskz_loadu_ps(lm0, B0 + x * ldb);
        const __m512 b1 = _mm512_maskz_loadu_ps(lm1, B0 + x * ldb + 16);
        const __m512 b2 = _mm512_maskz_loadu_ps(lm2, B1 + x * ldb);
        const __m512 b3 = _mm512_maskz_loadu_ps(lm3, B1 + x * ldb + 16);
        const int64_t o = x * sk;
        ROW64(0);
        ROW64(1);
        ROW64(2);
        ROW64(3);
        if (mr > 4) {
            ROW64(4);
            ROW64(5);
        }
    }
    OUT64(0);
    OUT64(1);
    OUT64(2);
    OUT64(3);
    if (mr > 4) {
        OUT64(4);
        OUT64(5);
    }
}
#undef ROW64
#undef OUT64

/* Rows [0, MR) x 32 columns: acc = sum_k A(r, k) B[k][0..32) in k order,
 * A(r, k) = A[r sa + k sk] (sa = lda, sk = 1 for A; sa = 1, sk = lda for
 * A^T). B rows are ldb apart; lm0/lm1 mask the loads of the two halves.
 * Written out per MR with named accumulators: arrays of __m512 end up in
 * memory. */
T512 static void micro_4(int64_t k, const float *A, int64_t sa, int64_t sk,
                         const float *B, int64_t ldb, __mmask16 lm0,
                         __mmask16 lm1, __m512 *out) {
    __m512 c00 = _mm512_setzero_ps(), c01 = c00;
    __m512 c10 = _mm512_setzero_ps(), c11 = c10;
    __m512 c20 = _mm512_setzero_ps(), c21 = c20;
    __m512 c30 = _mm512_setzero_ps(), c31 = c30;
    const float *A0 = A + 0 * sa;
    const float *A1 = A + 1 * sa;
    const float *A2 = A + 2 * sa;
    const float *A3 = A + 3 * sa;
    for (int64_t x = 0; x < k; x++) {
        const __m512 b0 = _mm512_maskz_loadu_ps(lm0, B + x * ldb);
        const __m512 b1 = _mm512_maskz_loadu_ps(lm1, B + x * ldb + 16);
        const int64_t o = x * sk;
        __m512 a;
        a = _mm512_set1_ps(A0[o]);
        c00 = _mm512_fmadd_ps(a, b0, c00);
        c01 = _mm512_fmadd_ps(a, b1, c01);
        a = _mm512_set1_ps(A1[o]);
        c10 = _mm512_fmadd_ps(a, b0, c10);
        c11 = _mm512_fmadd_ps(a, b1, c11);
        a = _mm512_set1_ps(A2[o]);
        c20 = _mm512_fmadd_ps(a, b0, c20);
        c21 = _mm512_fmadd_ps(a, b1, c21);
        a = _mm512_set1_ps(A3[o]);
        c30 = _mm512_fmadd_ps(a, b0, c30);
        c31 = _mm512_fmadd_ps(a, b1, c31);
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

T512 static void micro_2(int64_t k, const float *A, int64_t sa, int64_t sk,
                         const float *B, int64_t ldb, __mmask16 lm0,
                         __mmask16 lm1, __m512 *out) {
    __m512 c00 = _mm512_setzero_ps(), c01 = c00;
    __m512 c10 = _mm512_setzero_ps(), c11 = c10;
    const float *A0 = A + 0 * sa;
    const float *A1 = A + 1 * sa;
    for (int64_t x = 0; x < k; x++) {
        const __m512 b0 = _mm512_maskz_loadu_ps(lm0, B + x * ldb);
        const __m512 b1 = _mm512_maskz_loadu_ps(lm1, B + x * ldb + 16);
        const int64_t o = x * sk;
        __m512 a;
        a = _mm512_set1_ps(A0[o]);
        c00 = _mm512_fmadd_ps(a, b0, c00);
        c01 = _mm512_fmadd_ps(a, b1, c01);
        a = _mm512_set1_ps(A1[o]);
        c10 = _mm512_fmadd_ps(a, b0, c10);
        c11 = _mm512_fmadd_ps(a, b1, c11);
    }
    out[0] = c00;
    out[1] = c01;
    out[2] = c10;
    out[3] = c11;
}

T512 static void micro_1(int64_t k, const float *A, int64_t sa, int64_t sk,
                         const float *B, int64_t ldb, __mmask16 lm0,
                         __mmask16 lm1, __m512 *out) {
    __m512 c00 = _mm512_setzero_ps(), c01 = c00;
    const float *A0 = A + 0 * sa;
    for (int64_t x = 0; x < k; x++) {
        const __m512 b0 = _mm512_maskz_loadu_ps(lm0, B + x * ldb);
        const __m512 b1 = _mm512_maskz_loadu_ps(lm1, B + x * ldb + 16);
        const int64_t o = x * sk;
        __m512 a;
        a = _mm512_set1_ps(A0[o]);
        c00 = _mm512_fmadd_ps(a, b0, c00);
        c01 = _mm512_fmadd_ps(a, b1, c01);
    }
    out[0] = c00;
    out[1] = c01;
}

typedef void (*micro_fn)(int64_t, const float *, int64_t, int64_t,
                         const float *, int64_t, __mmask16, __mmask16,
                         __m512 *);

/* Stores rows of the accumulators: C = alpha acc, or C += alpha acc (one
 * rounding: an FMA). With vmx (C = alpha acc only), vmx[r] keeps the
 * lane-wise max of the stored values of row r. */
T512 INL static void store(int mr, const __m512 *acc, float *C, int64_t ldc,
                           __mmask16 m0, __mmask16 m1, float alpha, int add,
                           __m512 *vmx) {
    const __m512 al = _mm512_set1_ps(alpha);
    for (int r = 0; r < mr; r++) {
        float *c = C + r * ldc;
        if (add) {
            _mm512_mask_storeu_ps(
                c, m0,
                _mm512_fmadd_ps(al, acc[2 * r], _mm512_maskz_loadu_ps(m0, c)));
            _mm512_mask_storeu_ps(
                c + 16, m1,
                _mm512_fmadd_ps(al, acc[2 * r + 1],
                                _mm512_maskz_loadu_ps(m1, c + 16)));
        } else {
            const __m512 v0 = _mm512_mul_ps(al, acc[2 * r]);
            const __m512 v1 = _mm512_mul_ps(al, acc[2 * r + 1]);
            _mm512_mask_storeu_ps(c, m0, v0);
            _mm512_mask_storeu_ps(c + 16, m1, v1);
            if (vmx) {
                vmx[r] = _mm512_mask_max_ps(vmx[r], m0, vmx[r], v0);
                vmx[r] = _mm512_mask_max_ps(vmx[r], m1, vmx[r], v1);
            }
        }
    }
}

/* The columns of panel p to keep: j .. j+31 relative to c0, kept in
 * [0, n). */
static inline __mmask32 panel_keep(int64_t p, int64_t c0, int64_t n) {
    const int64_t j = p * NR - c0;
    __mmask32 keep = 0xffffffffu;
    if (j < 0) keep &= 0xffffffffu << (-j);
    if (j + NR > n) keep &= 0xffffffffu >> (j + NR - n);
    return keep;
}

/* The mr-row kernel (6 or 4) at row i on panels p and p + 1, then its
 * stores. */
T512 INL static void tile_atw(int mr, int64_t i, int64_t p, int64_t c0,
                              int64_t n, int64_t k, const float *A, int64_t sa,
                              int64_t sk, const float *B, int64_t pstride,
                              int64_t ldb, int mask_loads, float *C,
                              int64_t ldc, float alpha, int add, __m512 *vmx) {
    __m512 acc0[12], acc1[12];
    const __mmask32 k0 = panel_keep(p, c0, n), k1 = panel_keep(p + 1, c0, n);
    const __mmask16 m0 = (__mmask16)k0, m1 = (__mmask16)(k0 >> 16);
    const __mmask16 m2 = (__mmask16)k1, m3 = (__mmask16)(k1 >> 16);
    float *Ci = C + i * ldc + (p * NR - c0);
    const float *Ai = A + i * sa, *Bp = B + p * pstride;
    if (!mask_loads || (k0 & k1) == 0xffffffffu)
        /* constant masks, which become plain loads (a masked load costs a
         * second micro-op on the FMA ports: 15% of the kernel's speed) */
        micro_w(mr, k, Ai, sa, sk, Bp, Bp + pstride, ldb, 0xffff, 0xffff,
                0xffff, 0xffff, acc0, acc1);
    else
        micro_w(mr, k, Ai, sa, sk, Bp, Bp + pstride, ldb, m0, m1, m2, m3, acc0,
                acc1);
    store(mr, acc0, Ci, ldc, m0, m1, alpha, add, vmx);
    store(mr, acc1, Ci + NR, ldc, m2, m3, alpha, add, vmx);
}

/* The micro-kernel of mr rows at row i and panel p, then its store. */
T512 INL static void tile_at(int mr, int64_t i, int64_t p, int64_t c0,
                             int64_t n, int64_t k, const float *A, int64_t sa,
                             int64_t sk, const float *B, int64_t pstride,
                             int64_t ldb, int mask_loads, float *C, int64_t ldc,
                             float alpha, int add, __m512 *vmx) {
    __m512 acc[16];
    const int64_t j = p * NR - c0;
    const __mmask32 keep = panel_keep(p, c0, n);
    const __mmask16 m0 = (__mmask16)keep, m1 = (__mmask16)(keep >> 16);
    const __mmask16 l0 = mask_loads ? m0 : (__mmask16)0xffff;
    const __mmask16 l1 = mask_loads ? m1 : (__mmask16)0xffff;
    /* a negative j only with packed panels: shift the store base */
    float *Ci = C + i * ldc + j;
    const float *Ai = A + i * sa, *Bp = B + p * pstride;
    const micro_fn fn = mr == 4 ? micro_4 : mr == 2 ? micro_2 : micro_1;
    fn(k, Ai, sa, sk, Bp, ldb, l0, l1, acc);
    store(mr, acc, Ci, ldc, m0, m1, alpha, add, vmx);
}

/* Rows i .. i+mr-1 on panel p, or on p and p + 1 (two): the wide kernels
 * on pairs of panels (6 and 4 rows are constants there), 4 + 2 rows of
 * the 32-column kernels on a single one. */
T512 INL static void group(int mr, int64_t i, int64_t p, int two, int64_t c0,
                           int64_t n, int64_t k, const float *A, int64_t sa,
                           int64_t sk, const float *B, int64_t pstride,
                           int64_t ldb, int mask_loads, float *C, int64_t ldc,
                           float alpha, int add, __m512 *vmx) {
    if (mr == 6 && two) {
        tile_atw(6, i, p, c0, n, k, A, sa, sk, B, pstride, ldb, mask_loads, C,
                 ldc, alpha, add, vmx);
        return;
    }
    if (mr == 4 && two) {
        tile_atw(4, i, p, c0, n, k, A, sa, sk, B, pstride, ldb, mask_loads, C,
                 ldc, alpha, add, vmx);
        return;
    }
    for (int64_t q = p; q <= p + two; q++) {
        if (mr == 6) {
            tile_at(4, i, q, c0, n, k, A, sa, sk, B, pstride, ldb, mask_loads,
                    C, ldc, alpha, add, vmx);
            tile_at(2, i + 4, q, c0, n, k, A, sa, sk, B, pstride, ldb,
                    mask_loads, C, ldc, alpha, add, vmx ? vmx + 4 : NULL);
        } else {
            tile_at(mr, i, q, c0, n, k, A, sa, sk, B, pstride, ldb, mask_loads,
                    C, ldc, alpha, add, vmx);
        }
    }
}

/* C rows [0, m) x columns [c0, c0 + n) of B, stored at C[.][0 .. n):
 * panel p of B (its columns 32p ..) starts at B + p * pstride with rows
 * ldb apart. With mask_loads (B read in place, c0 = 0) the loads stop at
 * column n; packed panels are padded, so only the stores are masked.
 * Rows go 6 at a time (then 4, 2, 1), panels two at a time, panels
 * outer so that a pair of panels (16 KiB at k = 64) stays in L1 across the
 * rows: C = alpha A B^T (add = 0) in blocks of 16 rows, whose maxima
 * (rmax) gather across the panels in vmx; C += alpha A B over all rows. */
T512 static void drive(int64_t m, int64_t c0, int64_t n, int64_t k,
                       const float *A, int64_t sa, int64_t sk, const float *B,
                       int64_t pstride, int64_t ldb, int mask_loads, float *C,
                       int64_t ldc, float alpha, int add, float *rmax) {
    __m512 vmx[16];
    const int64_t p0 = c0 / NR, p1 = (c0 + n + NR - 1) / NR;
#define ROWS(left) ((left) >= 6 ? 6 : (left) >= 4 ? 4 : (left) >= 2 ? 2 : 1)
    if (add) {
        for (int64_t p = p0; p < p1; p += 2)
            for (int64_t i = 0; i < m; i += ROWS(m - i))
                group(ROWS(m - i), i, p, p + 1 < p1, c0, n, k, A, sa, sk, B,
                      pstride, ldb, mask_loads, C, ldc, alpha, 1, NULL);
        return;
    }
    for (int64_t i0 = 0; i0 < m; i0 += 16) {
        const int64_t i1 = m - i0 < 16 ? m : i0 + 16;
        for (int r = 0; r < 16; r++) vmx[r] = _mm512_set1_ps(-INFINITY);
        for (int64_t p = p0; p < p1; p += 2)
            for (int64_t i = i0; i < i1; i += ROWS(i1 - i))
                group(ROWS(i1 - i), i, p, p + 1 < p1, c0, n, k, A, sa, sk, B,
                      pstride, ldb, mask_loads, C, ldc, alpha, 0,
                      rmax ? vmx + (i - i0) : NULL);
        if (rmax)
            for (int64_t i = i0; i < i1; i++)
                rmax[i] = _mm512_reduce_max_ps(vmx[i - i0]);
    }
#undef ROWS
}

/* 16 x 16 floats transposed: rows of src (lds apart) become columns of dst
 * (rows ldd apart), by the usual three rounds of lane shuffles. */
T512 static void transpose16(const float *src, int64_t lds, float *dst,
                             int64_t ldd) {
    __m512 r[16], t[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(src + i * lds);
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i]),
                                                   _mm512_castps_pd(t[i + 2])));
        r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(
            _mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
        r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(
            _mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
        r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(
            _mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
    }
    /* r[4q + e] holds, in each 128-bit lane g, element e of rows 4g' ..:
     * gather lane g of the four groups q into one row */
    for (int e = 0; e < 4; e++) {
        const __m512 a = _mm512_shuffle_f32x4(r[e], r[4 + e], 0x88);
        const __m512 b = _mm512_shuffle_f32x4(r[8 + e], r[12 + e], 0x88);
        const __m512 c = _mm512_shuffle_f32x4(r[e], r[4 + e], 0xdd);
        const __m512 d = _mm512_shuffle_f32x4(r[8 + e], r[12 + e], 0xdd);
        t[e] = _mm512_shuffle_f32x4(a, b, 0x88);
        t[8 + e] = _mm512_shuffle_f32x4(a, b, 0xdd);
        t[4 + e] = _mm512_shuffle_f32x4(c, d, 0x88);
        t[12 + e] = _mm512_shuffle_f32x4(c, d, 0xdd);
    }
    for (int i = 0; i < 16; i++) _mm512_storeu_ps(dst + i * ldd, t[i]);
}

/* B [n x k] (ldb) into panels [k][32], zeros past n: whole 16 x 16 blocks
 * by transposes, the edges one value at a time. */
T512 static void pack_nt(int64_t n, int64_t k, const float *B, int64_t ldb,
                         float *pack) {
    for (int64_t j = 0; j < n; j += NR) {
        float *p = pack + (j / NR) * NR * k;
        const int64_t w = n - j < NR ? n - j : NR;
        int64_t x = 0;
        if (w == NR)
            for (; x + 16 <= k; x += 16) {
                transpose16(B + j * ldb + x, ldb, p + x * NR, NR);
                transpose16(B + (j + 16) * ldb + x, ldb, p + x * NR + 16, NR);
            }
        for (; x < k; x++) {
            float *row = p + x * NR;
            for (int64_t c = 0; c < w; c++) row[c] = B[(j + c) * ldb + x];
            for (int64_t c = w; c < NR; c++) row[c] = 0.0f;
        }
    }
}

int attn__tile_nt_avx512(int64_t m, int64_t n, int64_t k, float alpha,
                         const float *A, int64_t lda, const float *B,
                         int64_t ldb, float *C, int64_t ldc, float *pack) {
    if (attn__isa_cpu() < ATTN__ISA_AVX512) return 0;
    if (m <= 0 || n <= 0) return 1;
    pack_nt(n, k, B, ldb, pack);
    drive(m, 0, n, k, A, lda, 1, pack, NR * k, NR, 0, C, ldc, alpha, 0, NULL);
    return 1;
}

static void nt_packed(int64_t m, int64_t c0, int64_t nc, int64_t k, float alpha,
                      const float *A, int64_t lda, const float *pack, float *C,
                      int64_t ldc, float *rmax) {
    drive(m, c0, nc, k, A, lda, 1, pack, NR * k, NR, 0, C, ldc, alpha, 0, rmax);
}

static void pack_b(int64_t n, int64_t k, const float *B, int64_t ldb,
                   float *pack) {
    pack_nt(n, k, B, ldb, pack);
}

int attn__tile_acc_avx512(int ta, int64_t m, int64_t n, int64_t k, float alpha,
                          const float *A, int64_t lda, const float *B,
                          int64_t ldb, float *C, int64_t ldc) {
    if (attn__isa_cpu() < ATTN__ISA_AVX512) return 0;
    if (m <= 0 || n <= 0) return 1;
    drive(m, 0, n, k, A, ta ? 1 : lda, ta ? lda : 1, B, NR, ldb, 1, C, ldc,
          alpha, 1, NULL);
    return 1;
}
#else
static void nt_packed(int64_t m, int64_t c0, int64_t nc, int64_t k, float alpha,
                      const float *A, int64_t lda, const float *pack, float *C,
                      int64_t ldc, float *rmax) {
    (void)m, (void)c0, (void)nc, (void)k, (void)alpha, (void)A, (void)lda;
    (void)pack, (void)C, (void)ldc, (void)rmax;
}
static void pack_b(int64_t n, int64_t k, const float *B, int64_t ldb,
                   float *pack) {
    (void)n, (void)k, (void)B, (void)ldb, (void)pack;
}
int attn__tile_nt_avx512(int64_t m, int64_t n, int64_t k, float alpha,
                         const float *A, int64_t lda, const float *B,
                         int64_t ldb, float *C, int64_t ldc, float *pack) {
    (void)m, (void)n, (void)k, (void)alpha, (void)A, (void)lda, (void)B;
    (void)ldb, (void)C, (void)ldc, (void)pack;
    return 0;
}
int attn__tile_acc_avx512(int ta, int64_t m, int64_t n, int64_t k, float alpha,
                          const float *A, int64_t lda, const float *B,
                          int64_t ldb, float *C, int64_t ldc) {
    (void)ta, (void)m, (void)n, (void)k, (void)alpha, (void)A, (void)lda;
    (void)B, (void)ldb, (void)C, (void)ldc;
    return 0;
}
#endif

static int use_own(void) { return attn__isa_get() >= ATTN__ISA_AVX512; }

const char *attn__tile_impl(void) {
    return use_own() ? "avx512 micro-kernels" : "openblas sgemm";
}

void attn__tile_bt_prepare(attn__tile_bt *t, int64_t n, int64_t k,
                           const float *B, int64_t ldb, float *pack) {
    t->b = B;
    t->ldb = ldb;
    t->n = n;
    t->k = k;
    t->pack = pack;
    t->packed = use_own();
    if (t->packed && n > 0) pack_b(n, k, B, ldb, pack);
}

void attn__tile_nt(int64_t m, int64_t c0, int64_t nc, float alpha,
                   const float *A, int64_t lda, const attn__tile_bt *t,
                   float *C, int64_t ldc) {
    if (m <= 0 || nc <= 0) return;
    if (t->packed) {
        nt_packed(m, c0, nc, t->k, alpha, A, lda, t->pack, C, ldc, NULL);
        return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)nc,
                (int)t->k, alpha, A, (int)lda, t->b + c0 * t->ldb, (int)t->ldb,
                0.0f, C, (int)ldc);
}

int attn__tile_nt_max(int64_t m, int64_t c0, int64_t nc, float alpha,
                      const float *A, int64_t lda, const attn__tile_bt *t,
                      float *C, int64_t ldc, float *rmax) {
    if (!t->packed) return 0;
    if (m > 0 && nc > 0)
        nt_packed(m, c0, nc, t->k, alpha, A, lda, t->pack, C, ldc, rmax);
    return 1;
}

void attn__tile_nn_acc(int64_t m, int64_t n, int64_t k, float alpha,
                       const float *A, int64_t lda, const float *B, int64_t ldb,
                       float *C, int64_t ldc) {
    if (use_own() &&
        attn__tile_acc_avx512(0, m, n, k, alpha, A, lda, B, ldb, C, ldc))
        return;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n,
                (int)k, alpha, A, (int)lda, B, (int)ldb, 1.0f, C, (int)ldc);
}

void attn__tile_tn_acc(int64_t m, int64_t n, int64_t k, float alpha,
                       const float *A, int64_t lda, const float *B, int64_t ldb,
                       float *C, int64_t ldc) {
    if (use_own() &&
        attn__tile_acc_avx512(1, m, n, k, alpha, A, lda, B, ldb, C, ldc))
        return;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)m, (int)n, (int)k,
                alpha, A, (int)lda, B, (int)ldb, 1.0f, C, (int)ldc);
}
