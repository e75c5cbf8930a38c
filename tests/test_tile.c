/* The flash kernels' tile products (src/kernels/tile.c) against a double
 * reference, on every instruction-set path this CPU has: odd sizes,
 * column windows of a prepared B (with the micro-kernels, bitwise the
 * columns of the whole product), leading dimensions past the row, and guard values
 * around C that must survive. */
#include "../src/kernels/cpu.h"
#include "../src/kernels/tile.h"
#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GUARD 1234.5f

static void fill(float *x, size_t n, unsigned long long seed) {
    for (size_t i = 0; i < n; i++) x[i] = (float)test_rand(&seed);
}

/* C = alpha A B^T, columns [c0, c0 + nc), against double; then the same
 * window must equal the whole product's columns bit for bit. */
static void case_nt(int64_t m, int64_t n, int64_t k, int64_t c0, int64_t nc,
                    const char *path) {
    const int64_t lda = k + 3, ldb = k + 1, ldc = nc + 5;
    float *A = malloc(sizeof(float) * (size_t)(m * lda + 1));
    float *B = malloc(sizeof(float) * (size_t)(n * ldb + 1));
    float *C = malloc(sizeof(float) * (size_t)((m + 2) * ldc));
    float *F = malloc(sizeof(float) * (size_t)(m * n + 1));
    float *pack = malloc(sizeof(float) * attn__tile_nt_pack_floats(n, k));
    fill(A, (size_t)(m * lda), 7 + (unsigned long long)(m * 131 + k));
    fill(B, (size_t)(n * ldb), 9 + (unsigned long long)(n * 17 + k));
    for (int64_t i = 0; i < (m + 2) * ldc; i++) C[i] = GUARD;
    attn__tile_bt t;
    attn__tile_bt_prepare(&t, n, k, B, ldb, pack);
    float *Cm = C + ldc; /* a guard row above and below */
    attn__tile_nt(m, c0, nc, 0.5f, A, lda, &t, Cm, ldc);
    double err = 0;
    int guards = 1;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < ldc; j++) {
            if (j >= nc) {
                guards &= Cm[i * ldc + j] == GUARD;
                continue;
            }
            double r = 0;
            for (int64_t x = 0; x < k; x++)
                r += (double)A[i * lda + x] * B[(c0 + j) * ldb + x];
            double e = fabs(0.5 * r - Cm[i * ldc + j]);
            if (!(e <= err)) err = e;
        }
    for (int64_t j = 0; j < ldc; j++)
        guards &= C[j] == GUARD && C[(m + 1) * ldc + j] == GUARD;
    CHECK_MSG(err <= 1e-6 * (double)(k + 1),
              "%s nt %lldx%lldx%lld [%lld+%lld]: err %g", path, (long long)m,
              (long long)n, (long long)k, (long long)c0, (long long)nc, err);
    CHECK_MSG(guards, "%s nt: wrote outside C", path);
    attn__tile_nt(m, 0, n, 0.5f, A, lda, &t, F, n);
    /* OpenBLAS (the lower paths) makes no such promise: the flash kernels
     * cut its products identically instead */
    int same = 1;
    if (attn__isa_get() >= ATTN__ISA_AVX512)
        for (int64_t i = 0; i < m; i++)
            same &= !memcmp(Cm + i * ldc, F + i * n + c0,
                            sizeof(float) * (size_t)nc);
    CHECK_MSG(same,
              "%s nt %lldx%lldx%lld: window [%lld+%lld] differs from "
              "the whole product",
              path, (long long)m, (long long)n, (long long)k, (long long)c0,
              (long long)nc);
    /* the same window with the row maxima: the same bits, and each row's
     * largest value (where the micro-kernels run; elsewhere it declines) */
    float *X = malloc(sizeof(float) * (size_t)(m * nc + 1));
    float *mx = malloc(sizeof(float) * (size_t)m);
    const int got = attn__tile_nt_max(m, c0, nc, 0.5f, A, lda, &t, X, nc, mx);
    CHECK_MSG(got == (attn__isa_get() >= ATTN__ISA_AVX512), "%s nt_max: ran %d",
              path, got);
    int max_ok = 1;
    for (int64_t i = 0; got && i < m; i++) {
        float want = -INFINITY;
        for (int64_t j = 0; j < nc; j++)
            if (Cm[i * ldc + j] > want) want = Cm[i * ldc + j];
        max_ok &=
            !memcmp(X + i * nc, Cm + i * ldc, sizeof(float) * (size_t)nc) &&
            mx[i] == want;
    }
    CHECK_MSG(max_ok,
              "%s nt_max %lldx%lldx%lld [%lld+%lld]: wrong values or maxima",
              path, (long long)m, (long long)n, (long long)k, (long long)c0,
              (long long)nc);
    free(X);
    free(mx);
    free(A);
    free(B);
    free(C);
    free(F);
    free(pack);
}

/* C += alpha op(A) B against double (C starts random), guards around C;
 * op(A) = A [m x k] or, with ta, A^T for A [k x m]. */
static void case_acc(int ta, int64_t m, int64_t n, int64_t k,
                     const char *path) {
    const int64_t lda = (ta ? m : k) + 2, ldb = n + 3, ldc = n + 4;
    const int64_t arows = ta ? k : m;
    const float alpha = ta ? 0.25f : 1.0f;
    float *A = malloc(sizeof(float) * (size_t)(arows * lda + 1));
    float *B = malloc(sizeof(float) * (size_t)(k * ldb + 1));
    float *C = malloc(sizeof(float) * (size_t)((m + 2) * ldc));
    float *C0 = malloc(sizeof(float) * (size_t)(m * ldc + 1));
    fill(A, (size_t)(arows * lda), 11 + (unsigned long long)(m + k));
    fill(B, (size_t)(k * ldb), 13 + (unsigned long long)(n + k));
    for (int64_t i = 0; i < (m + 2) * ldc; i++) C[i] = GUARD;
    float *Cm = C + ldc;
    fill(C0, (size_t)(m * ldc), 5);
    for (int64_t i = 0; i < m; i++)
        memcpy(Cm + i * ldc, C0 + i * ldc, sizeof(float) * (size_t)n);
    if (ta)
        attn__tile_tn_acc(m, n, k, alpha, A, lda, B, ldb, Cm, ldc);
    else
        attn__tile_nn_acc(m, n, k, alpha, A, lda, B, ldb, Cm, ldc);
    double err = 0;
    int guards = 1;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < ldc; j++) {
            if (j >= n) {
                guards &= Cm[i * ldc + j] == GUARD;
                continue;
            }
            double r = 0;
            for (int64_t x = 0; x < k; x++)
                r += (double)(ta ? A[x * lda + i] : A[i * lda + x]) *
                     B[x * ldb + j];
            r = C0[i * ldc + j] + (double)alpha * r;
            double e = fabs(r - Cm[i * ldc + j]);
            if (!(e <= err)) err = e;
        }
    for (int64_t j = 0; j < ldc; j++)
        guards &= C[j] == GUARD && C[(m + 1) * ldc + j] == GUARD;
    CHECK_MSG(err <= 1e-6 * (double)(k + 1), "%s %s %lldx%lldx%lld: err %g",
              path, ta ? "tn" : "nn", (long long)m, (long long)n, (long long)k,
              err);
    CHECK_MSG(guards, "%s %s: wrote outside C", path, ta ? "tn" : "nn");
    free(A);
    free(B);
    free(C);
    free(C0);
}

int main(void) {
    static const int64_t sizes[] = {1, 3, 17, 33, 64, 129};
    const int ns = (int)(sizeof sizes / sizeof sizes[0]);
    const attn__isa cpu = attn__isa_cpu();
    printf("paths run:");
    for (int p = ATTN__ISA_SCALAR; p <= (int)cpu; p++) {
        attn__isa_set_max((attn__isa)p);
        const char *name = attn__isa_name((attn__isa)p);
        printf(" %s (%s)", name, attn__tile_impl());
        for (int a = 0; a < ns; a++)
            for (int b = 0; b < ns; b++)
                for (int c = 0; c < ns; c += 2) {
                    const int64_t m = sizes[a], n = sizes[b], k = sizes[c];
                    case_acc(0, m, n, k, name);
                    case_acc(1, m, n, k, name);
                    case_nt(m, n, k, 0, n, name);
                    if (n > 2) {
                        case_nt(m, n, k, 1, n - 2, name);
                        case_nt(m, n, k, n / 2, n - n / 2, name);
                    }
                }
        attn__isa_set_max(ATTN__ISA_AMX);
    }
    printf("\n");
    if (cpu < ATTN__ISA_AVX512)
        fprintf(stderr,
                "*** the AVX-512 micro-kernels NOT run: this CPU's "
                "path is %s ***\n",
                attn__isa_name(cpu));
    return check_done("test_tile");
}
