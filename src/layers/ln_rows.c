/* LayerNorm of one row: the mean and the variance (two passes) summed in
 * double in 16 lanes (element c joins lane c mod 16; the lanes are reduced
 * in a fixed tree), so that the sums vectorize without reassociating:
 * a single running double sum, as before, ran at about 5 ns an element
 * (a sixth of the MiniLM batch's non-product time). The AVX-512 form does
 * the same operations in the same order (no fused multiply-adds), so both
 * give the same bits. */
#include "layers.h"
#include "../kernels/vec.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

enum { LANES = 16 };

static double lanes_sum(double *s) {
    for (int w = LANES / 2; w >= 1; w /= 2)
        for (int j = 0; j < w; j++) s[j] += s[j + w];
    return s[0];
}

static void ln_row_scalar(int64_t d, const float *x, const float *g,
                          const float *b, double eps, float *y, double *mu,
                          double *rs) {
    double s[LANES] = {0};
    for (int64_t c = 0; c < d; c++) s[c % LANES] += (double)x[c];
    const double m = lanes_sum(s) / (double)d;
    double q[LANES] = {0};
    for (int64_t c = 0; c < d; c++) {
        const double t = (double)x[c] - m;
        q[c % LANES] += t * t;
    }
    const double r = 1.0 / sqrt(lanes_sum(q) / (double)d + eps);
    for (int64_t c = 0; c < d; c++)
        y[c] = (float)(((double)x[c] - m) * r) * g[c] + b[c];
    *mu = m;
    *rs = r;
}

#if defined(__x86_64__) || defined(__i386__)
#define T_AVX512 __attribute__((target("avx512f")))
T_AVX512 static void ln_row16(int64_t d, const float *x, const float *g,
                              const float *b, double eps, float *y, double *mu,
                              double *rs) {
    const int64_t dv = d / LANES * LANES;
    double s[LANES], q[LANES];
    __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
    for (int64_t c = 0; c < dv; c += LANES) {
        a0 = _mm512_add_pd(a0, _mm512_cvtps_pd(_mm256_loadu_ps(x + c)));
        a1 = _mm512_add_pd(a1, _mm512_cvtps_pd(_mm256_loadu_ps(x + c + 8)));
    }
    _mm512_storeu_pd(s, a0);
    _mm512_storeu_pd(s + 8, a1);
    for (int64_t c = dv; c < d; c++) s[c % LANES] += (double)x[c];
    const double m = lanes_sum(s) / (double)d;
    const __m512d mv = _mm512_set1_pd(m);
    a0 = _mm512_setzero_pd();
    a1 = _mm512_setzero_pd();
    for (int64_t c = 0; c < dv; c += LANES) {
        const __m512d t0 =
            _mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x + c)), mv);
        const __m512d t1 =
            _mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x + c + 8)), mv);
        a0 = _mm512_add_pd(a0, _mm512_mul_pd(t0, t0));
        a1 = _mm512_add_pd(a1, _mm512_mul_pd(t1, t1));
    }
    _mm512_storeu_pd(q, a0);
    _mm512_storeu_pd(q + 8, a1);
    for (int64_t c = dv; c < d; c++) {
        const double t = (double)x[c] - m;
        q[c % LANES] += t * t;
    }
    const double r = 1.0 / sqrt(lanes_sum(q) / (double)d + eps);
    const __m512d rv = _mm512_set1_pd(r);
    int64_t c = 0;
    for (; c + 8 <= d; c += 8) {
        const __m512d t = _mm512_mul_pd(
            _mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x + c)), mv), rv);
        const __m256 v = _mm256_add_ps(
            _mm256_mul_ps(_mm512_cvtpd_ps(t), _mm256_loadu_ps(g + c)),
            _mm256_loadu_ps(b + c));
        _mm256_storeu_ps(y + c, v);
    }
    for (; c < d; c++) y[c] = (float)(((double)x[c] - m) * r) * g[c] + b[c];
    *mu = m;
    *rs = r;
}
#endif

void attn__ln_rows(int64_t n, int64_t d, const float *x, const float *a,
                   float *r, const float *gamma, const float *beta, double eps,
                   float *y, float *mean, float *rstd, int threads) {
    int wide = 0;
#if defined(__x86_64__) || defined(__i386__)
    wide = attn__vec_get()->level >= ATTN__VEC_AVX512;
#endif
#pragma omp parallel for schedule(static)                                      \
    num_threads(attn__omp_threads(threads))
    for (int64_t i = 0; i < n; i++) {
        const float *xr = x + i * d;
        if (a) { /* the residual sum first: its row is then in L1 */
            float *rr = r + i * d;
            const float *ar = a + i * d;
            for (int64_t c = 0; c < d; c++) rr[c] = xr[c] + ar[c];
            xr = rr;
        }
        double mu, rs;
#if defined(__x86_64__) || defined(__i386__)
        if (wide)
            ln_row16(d, xr, gamma, beta, eps, y + i * d, &mu, &rs);
        else
#endif
            ln_row_scalar(d, xr, gamma, beta, eps, y + i * d, &mu, &rs);
        if (mean) mean[i] = (float)mu;
        if (rstd) rstd[i] = (float)rs;
    }
}
