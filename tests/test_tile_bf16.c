/* The bf16 tile products (src/kernels/tile_bf16.c, tile_amx.c) against a
 * double-precision product of the same bf16 operands, on the path this
 * process runs (AMX, AVX512_BF16; ATTN_ISA caps it, and CTest runs this
 * test once more capped at avx512_bf16 so that an AMX machine checks
 * both):
 *   - attn__bf16_nt: C = alpha A B^T over a column range c0 .. c0+nc-1,
 *     and attn__bf16_nn_acc: C += alpha A B over a pair range p0 .. p1-1,
 *     on odd sizes (1, 3, 17, 33, 129 rows; k from 1 to 257; ranges that
 *     start on odd pairs and columns), within f32 summation's bound;
 *   - the bits do not depend on how the rows are cut (the flash kernels
 *     cut them by thread and by band);
 *   - nothing outside the ranges is read into the sums: Inf in B's pairs
 *     past p1 and in A's pad leave the results finite, and C outside the
 *     rows and columns asked for is untouched.
 * Prints the path that ran; without AVX512_BF16 it says NOT run on
 * stderr and exits 77 (CTest's skipped). */
#include "../src/kernels/cpu.h"
#include "../src/kernels/tile_bf16.h"
#include "attn.h"
#include "check.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned long long rng = 88172645463325252ull;

static float uni(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)(rng >> 40) * 0x1p-24f * 2.0f - 1.0f;
}

static float bf(uint16_t h) { return attn_bf16_to_f32(h); }

/* rows x cols of bf16 in [-1, 1), row stride ld, the pad filled with pad */
static uint16_t *gen(int64_t rows, int64_t cols, int64_t ld, uint16_t pad) {
    uint16_t *x = malloc(sizeof(uint16_t) * (size_t)(rows * ld + 1));
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < ld; c++)
            x[r * ld + c] = c < cols ? attn_f32_to_bf16(uni()) : pad;
    x[rows * ld] = pad;
    return x;
}

#define SENTINEL 12345.0f
static const uint16_t BF16_INF = 0x7f80;

/* C = alpha A B^T: A m x k (lda), B n x k, columns c0 .. c0+nc-1 */
static void case_nt(int64_t m, int64_t n, int64_t k, int64_t c0, int64_t nc) {
    const int64_t lda = (k + 1) & ~(int64_t)1, ldc = nc + 3;
    /* A's pad column (odd k) is zero by the contract; B's rows are
     * exactly k long */
    uint16_t *A = gen(m, k, lda, 0), *B = gen(n, k, k, 0);
    uint16_t *pk = malloc(sizeof(uint16_t) * attn__bf16_pack_elems(n, k));
    attn__bf16_pack_nt(n, k, B, k, pk);
    const float alpha = 0.375f;
    float *C = malloc(sizeof(float) * (size_t)((m + 1) * ldc)),
          *C2 = malloc(sizeof(float) * (size_t)((m + 1) * ldc));
    for (int64_t i = 0; i < (m + 1) * ldc; i++) C[i] = C2[i] = SENTINEL;
    attn__bf16_nt(m, c0, nc, k, alpha, A, lda, pk, C, ldc);
    double worst = 0;
    int untouched = 1;
    for (int64_t r = 0; r <= m; r++)
        for (int64_t j = 0; j < ldc; j++) {
            const float got = C[r * ldc + j];
            if (r == m || j >= nc) {
                untouched &= got == SENTINEL;
                continue;
            }
            double s = 0, sa = 0;
            for (int64_t x = 0; x < k; x++) {
                const double p = (double)bf(A[r * lda + x]) *
                                 (double)bf(B[(c0 + j) * k + x]);
                s += p;
                sa += fabs(p);
            }
            const double tol =
                ((double)k / 2 + 4) * 0x1p-23 * alpha * sa + 1e-30;
            const double e = fabs((double)got - alpha * s) / tol;
            if (!(e <= worst)) worst = e;
        }
    CHECK_MSG(worst <= 1.0,
              "nt m %lld n %lld k %lld c0 %lld nc %lld: error "
              "%.3g of the bound",
              (long long)m, (long long)n, (long long)k, (long long)c0,
              (long long)nc, worst);
    CHECK_MSG(untouched, "nt m %lld k %lld: wrote outside the rows/columns",
              (long long)m, (long long)k);
    /* the same rows cut in pieces: the same bits */
    const int64_t cuts[] = {1, 16, 17, 5};
    for (int64_t r = 0, ci = 0; r < m; ci++) {
        const int64_t len = cuts[ci % 4] < m - r ? cuts[ci % 4] : m - r;
        attn__bf16_nt(len, c0, nc, k, alpha, A + r * lda, lda, pk, C2 + r * ldc,
                      ldc);
        r += len;
    }
    CHECK_MSG(!memcmp(C, C2, sizeof(float) * (size_t)(m * ldc)),
              "nt m %lld k %lld: rows cut differently give other bits",
              (long long)m, (long long)k);
    free(A);
    free(B);
    free(pk);
    free(C);
    free(C2);
}

/* C += alpha A B over pairs p0 .. p1-1 of B's k rows (B k x n); A's row r
 * holds the entries 2 p0 .. 2 p1 - 1. B's rows outside the range and A's
 * pad hold Inf: none may reach C. */
static void case_nn(int64_t m, int64_t n, int64_t k, int64_t p0, int64_t p1) {
    const int64_t w = 2 * (p1 - p0), lda = w + 2, ldc = n + 1;
    uint16_t *A = gen(m, w, lda, BF16_INF), *B = gen(k, n, n, 0);
    /* A's entries past k (odd k, last pair) must be zero, as callers pad */
    for (int64_t r = 0; r < m; r++)
        for (int64_t x = 0; x < w; x++)
            if (2 * p0 + x >= k) A[r * lda + x] = 0;
    for (int64_t x = 0; x < k; x++)
        if (x < 2 * p0 || x >= 2 * p1)
            for (int64_t c = 0; c < n; c++) B[x * n + c] = BF16_INF;
    uint16_t *pk = malloc(sizeof(uint16_t) * attn__bf16_pack_elems(n, k));
    attn__bf16_pack_nn(k, n, B, n, pk);
    const float alpha = 1.5f;
    float *C = malloc(sizeof(float) * (size_t)((m + 1) * ldc)),
          *C2 = malloc(sizeof(float) * (size_t)((m + 1) * ldc)),
          *C0 = malloc(sizeof(float) * (size_t)((m + 1) * ldc));
    for (int64_t i = 0; i < (m + 1) * ldc; i++)
        C[i] = C2[i] = C0[i] = i % (ldc) < n && i < m * ldc ? uni() : SENTINEL;
    attn__bf16_nn_acc(m, n, k, p0, p1, A, lda, pk, C, ldc, alpha);
    double worst = 0;
    int untouched = 1;
    for (int64_t r = 0; r <= m; r++)
        for (int64_t j = 0; j < ldc; j++) {
            const float got = C[r * ldc + j];
            if (r == m || j >= n) {
                untouched &= got == SENTINEL;
                continue;
            }
            double s = 0, sa = 0;
            for (int64_t x = 2 * p0; x < 2 * p1 && x < k; x++) {
                const double p = (double)bf(A[r * lda + x - 2 * p0]) *
                                 (double)bf(B[x * n + j]);
                s += p;
                sa += fabs(p);
            }
            const double want = C0[r * ldc + j] + alpha * s;
            const double tol = ((double)(p1 - p0) + 4) * 0x1p-23 *
                                   (alpha * sa + fabs(C0[r * ldc + j])) +
                               1e-30;
            const double e = fabs((double)got - want) / tol;
            if (!(e <= worst)) worst = e;
        }
    CHECK_MSG(worst <= 1.0,
              "nn m %lld n %lld k %lld pairs %lld..%lld: error "
              "%.3g of the bound (Inf read past the range?)",
              (long long)m, (long long)n, (long long)k, (long long)p0,
              (long long)p1, worst);
    CHECK_MSG(untouched, "nn m %lld k %lld: wrote outside the rows/columns",
              (long long)m, (long long)k);
    const int64_t cuts[] = {17, 1, 16, 3};
    for (int64_t r = 0, ci = 0; r < m; ci++) {
        const int64_t len = cuts[ci % 4] < m - r ? cuts[ci % 4] : m - r;
        attn__bf16_nn_acc(len, n, k, p0, p1, A + r * lda, lda, pk, C2 + r * ldc,
                          ldc, alpha);
        r += len;
    }
    CHECK_MSG(!memcmp(C, C2, sizeof(float) * (size_t)(m * ldc)),
              "nn m %lld k %lld: rows cut differently give other bits",
              (long long)m, (long long)k);
    free(A);
    free(B);
    free(pk);
    free(C);
    free(C2);
    free(C0);
}

int main(void) {
    const attn__isa isa = attn__isa_get();
    printf("path %s: bf16 tile products on %s\n", attn__isa_name(isa),
           isa == ATTN__ISA_AMX           ? "AMX (TDPBF16PS)"
           : isa == ATTN__ISA_AVX512_BF16 ? "AVX512_BF16 (vdpbf16ps)"
                                          : "nothing: NOT run");
    if (isa < ATTN__ISA_AVX512_BF16) {
        fprintf(stderr,
                "*** the bf16 tile products NOT run: this process's "
                "path is %s (AVX512_BF16 or AMX needed) ***\n",
                attn__isa_name(isa));
        return 77;
    }
    const int64_t ms[] = {1, 3, 16, 17, 32, 33, 129};
    const int64_t ks[] = {1, 2, 3, 31, 32, 33, 64, 80, 128, 257};
    for (size_t a = 0; a < sizeof ms / sizeof *ms; a++)
        for (size_t b = 0; b < sizeof ks / sizeof *ks; b++) {
            const int64_t m = ms[a], k = ks[b];
            case_nt(m, 70, k, 0, 70);
            case_nt(m, 100, k, 5, 61);
            case_nt(m, 33, k, 32, 1);
            const int64_t np = (k + 1) / 2;
            case_nn(m, 64, k, 0, np);
            case_nn(m, 17, k, np / 3, np - np / 4);
            case_nn(m, 40, k, np > 1 ? 1 : 0, np);
        }
    return check_done("test_tile_bf16");
}
