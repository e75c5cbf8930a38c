/* The flash kernels' tile products (see tile.h).
 *
 * AVX-512 micro-kernel: 8 rows x 32 columns of C in 16 zmm accumulators;
 * per k, two 16-wide loads of B and 8 broadcasts of A (folded into the FMAs
 * as {1to16} memory operands): 16 FMAs for 2 loads, so the two FMA ports
 * stay busy. For A B^T, B is packed once per call into panels of 32
 * columns, [k][32], the last one padded with zeros; for A B the rows of B
 * are read in place (masked in the last panel). Columns past n are never
 * stored. Rows are taken 8 at a time (then 4, 2, 1), panels innermost so a
 * block of A rows stays in L1 while B streams from L2. */
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

/* Rows [0, MR) x 32 columns: acc = sum_k A(r, k) B[k][0..32) in k order,
 * A(r, k) = A[r sa + k sk] (sa = lda, sk = 1 for A; sa = 1, sk = lda for
 * A^T). B rows are ldb apart; lm0/lm1 mask the loads of the two halves.
 * Written out per MR with named accumulators: arrays of __m512 end up in
 * memory. */
T512 INL static void micro_8(int64_t k, const float *A, int64_t sa, int64_t sk,
                             const float *B, int64_t ldb, __mmask16 lm0,
                             __mmask16 lm1, __m512 *out) {
    __m512 c00 = _mm512_setzero_ps(), c01 = c00;
    __m512 c10 = _mm512_setzero_ps(), c11 = c10;
    __m512 c20 = _mm512_setzero_ps(), c21 = c20;
    __m512 c30 = _mm512_setzero_ps(), c31 = c30;
    __m512 c40 = _mm512_setzero_ps(), c41 = c40;
    __m512 c50 = _mm512_setzero_ps(), c51 = c50;
    __m512 c60 = _mm512_setzero_ps(), c61 = c60;
    __m512 c70 = _mm512_setzero_ps(), c71 = c70;
    const float *A0 = A + 0 * sa;
    const float *A1 = A + 1 * sa;
    const float *A2 = A + 2 * sa;
    const float *A3 = A + 3 * sa;
    const float *A4 = A + 4 * sa;
    const float *A5 = A + 5 * sa;
    const float *A6 = A + 6 * sa;
    const float *A7 = A + 7 * sa;
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
        a = _mm512_set1_ps(A4[o]);
        c40 = _mm512_fmadd_ps(a, b0, c40);
        c41 = _mm512_fmadd_ps(a, b1, c41);
        a = _mm512_set1_ps(A5[o]);
        c50 = _mm512_fmadd_ps(a, b0, c50);
        c51 = _mm512_fmadd_ps(a, b1, c51);
        a = _mm512_set1_ps(A6[o]);
        c60 = _mm512_fmadd_ps(a, b0, c60);
        c61 = _mm512_fmadd_ps(a, b1, c61);
        a = _mm512_set1_ps(A7[o]);
        c70 = _mm512_fmadd_ps(a, b0, c70);
        c71 = _mm512_fmadd_ps(a, b1, c71);
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

/* The micro-kernel of mr rows at row i and panel p, then its store. */
T512 INL static void tile_at(int mr, int64_t i, int64_t p, int64_t c0,
                             int64_t n, int64_t k, const float *A, int64_t sa,
                             int64_t sk, const float *B, int64_t pstride,
                             int64_t ldb, int mask_loads, float *C, int64_t ldc,
                             float alpha, int add, __m512 *vmx) {
    __m512 acc[16];
    /* the panel's columns j .. j+31 relative to c0; keep [0, n) */
    const int64_t j = p * NR - c0;
    __mmask32 keep = 0xffffffffu;
    if (j < 0) keep &= 0xffffffffu << (-j);
    if (j + NR > n) keep &= 0xffffffffu >> (j + NR - n);
    const __mmask16 m0 = (__mmask16)keep, m1 = (__mmask16)(keep >> 16);
    const __mmask16 l0 = mask_loads ? m0 : (__mmask16)0xffff;
    const __mmask16 l1 = mask_loads ? m1 : (__mmask16)0xffff;
    /* a negative j only with packed panels: shift the store base */
    float *Ci = C + i * ldc + j;
    const float *Ai = A + i * sa, *Bp = B + p * pstride;
    if (mr == 8) {
        /* inlined with a constant row count and its store (no call per
         * panel); whole panels with constant masks, which become plain
         * loads (a masked load costs a second micro-op on the FMA ports:
         * 15% of the kernel's speed) */
        if (l0 == 0xffff && l1 == 0xffff)
            micro_8(k, Ai, sa, sk, Bp, ldb, 0xffff, 0xffff, acc);
        else
            micro_8(k, Ai, sa, sk, Bp, ldb, l0, l1, acc);
        store(8, acc, Ci, ldc, m0, m1, alpha, add, vmx);
        return;
    }
    const micro_fn fn = mr == 4 ? micro_4 : mr == 2 ? micro_2 : micro_1;
    fn(k, Ai, sa, sk, Bp, ldb, l0, l1, acc);
    store(mr, acc, Ci, ldc, m0, m1, alpha, add, vmx);
}

/* C rows [0, m) x columns [c0, c0 + n) of B, stored at C[.][0 .. n):
 * panel p of B (its columns 32p ..) starts at B + p * pstride with rows
 * ldb apart. With mask_loads (B read in place, c0 = 0) the loads stop at
 * column n; packed panels are padded, so only the stores are masked.
 * C = alpha A B^T (add = 0) takes rows outer, so that rmax gathers each
 * row's maximum across the panels; C += alpha A B takes panels outer, so
 * that a panel of B read in place stays in L1 across the rows. */
T512 static void drive(int64_t m, int64_t c0, int64_t n, int64_t k,
                       const float *A, int64_t sa, int64_t sk, const float *B,
                       int64_t pstride, int64_t ldb, int mask_loads, float *C,
                       int64_t ldc, float alpha, int add, float *rmax) {
    __m512 vmx[8];
    const int64_t p0 = c0 / NR, p1 = (c0 + n + NR - 1) / NR;
#define ROWS(left) ((left) >= 8 ? 8 : (left) >= 4 ? 4 : (left) >= 2 ? 2 : 1)
    if (add) {
        for (int64_t p = p0; p < p1; p++)
            for (int64_t i = 0; i < m; i += ROWS(m - i))
                tile_at(ROWS(m - i), i, p, c0, n, k, A, sa, sk, B, pstride, ldb,
                        mask_loads, C, ldc, alpha, 1, NULL);
        return;
    }
    for (int64_t i = 0; i < m; i += ROWS(m - i)) {
        const int mr = ROWS(m - i);
        for (int r = 0; r < mr; r++) vmx[r] = _mm512_set1_ps(-INFINITY);
        for (int64_t p = p0; p < p1; p++)
            tile_at(mr, i, p, c0, n, k, A, sa, sk, B, pstride, ldb, mask_loads,
                    C, ldc, alpha, 0, rmax ? vmx : NULL);
        if (rmax)
            for (int r = 0; r < mr; r++)
                rmax[i + r] = _mm512_reduce_max_ps(vmx[r]);
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
