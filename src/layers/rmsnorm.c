/* RMSNorm (Zhang and Sennrich, 2019; Llama, Mistral, Qwen2):
 * y = x / sqrt(mean(x^2) + eps) * gamma (+ beta when given), row by row,
 * forward and backward, and SwiGLU, the gated feed-forward activation
 * (Shazeer, 2020): h = silu(gate) * up. Sums in double; rows independent,
 * so any thread count gives the same bits. */
#include "layers.h"
#include "../kernels/vec.h"

#include <math.h>
#include <string.h>

void attn__rmsnorm_forward(int64_t n, int64_t d, const float *x,
                           const float *gamma, const float *beta, double eps,
                           float *y, float *rstd, int threads) {
    /* a decoding step's one row: a parallel region costs more than it */
#pragma omp parallel for schedule(static)                                      \
    num_threads(attn__omp_threads(threads)) if (n > 1)
    for (int64_t r = 0; r < n; r++) {
        const float *xr = x + r * d;
        double s2 = 0;
        for (int64_t c = 0; c < d; c++) s2 += (double)xr[c] * xr[c];
        double rs = 1.0 / sqrt(s2 / (double)d + eps);
        float *yr = y + r * d;
        for (int64_t c = 0; c < d; c++)
            yr[c] = (float)(xr[c] * rs) * gamma[c] + (beta ? beta[c] : 0.0f);
        if (rstd) rstd[r] = (float)rs;
    }
}

/* d/dx of x * rs * gamma with rs = (mean(x^2) + eps)^(-1/2):
 * dx = rs * (g gamma - x rs^2 mean(g gamma x)). */
void attn__rmsnorm_backward(int64_t n, int64_t d, const float *x,
                            const float *gamma, const float *rstd,
                            const float *dy, float *dgamma, float *dbeta,
                            float *dx, int threads) {
    if (dgamma || dbeta) /* column sums, rows in a fixed order */
        for (int64_t r = 0; r < n; r++) {
            const float *xr = x + r * d, *g = dy + r * d;
            for (int64_t c = 0; c < d; c++) {
                if (dgamma) dgamma[c] += g[c] * (xr[c] * rstd[r]);
                if (dbeta) dbeta[c] += g[c];
            }
        }
    if (!dx) return;
#pragma omp parallel for schedule(static)                                      \
    num_threads(attn__omp_threads(threads))
    for (int64_t r = 0; r < n; r++) {
        const float *xr = x + r * d, *g = dy + r * d;
        double rs = rstd[r], a = 0;
        for (int64_t c = 0; c < d; c++) a += (double)g[c] * gamma[c] * xr[c];
        a /= (double)d;
        float *o = dx + r * d;
        for (int64_t c = 0; c < d; c++)
            o[c] +=
                (float)(rs * ((double)g[c] * gamma[c] - xr[c] * rs * rs * a));
    }
}

/* h = silu(gate) * up = gate / (1 + exp(-gate)) * up, in chunks of 256
 * through the kernels' vector exp: a libm exp in double per element cost
 * a tenth of a prompt pass. exp(-gate) overflowing to inf gives -0 (silu's
 * limit), flushing to 0 gives gate. */
static void swiglu_chunk(const float *gate, const float *up, float *h,
                         int64_t n, const attn__vec_ops *vo) {
    float e[256] = {0}; /* n >= 1 always; gcc -O2 -g cannot see it */
    for (int64_t i = 0; i < n; i++) e[i] = -gate[i];
    vo->exp(e, e, n);
    for (int64_t i = 0; i < n; i++) h[i] = gate[i] / (1.0f + e[i]) * up[i];
}

void attn__swiglu_forward(int64_t n, int64_t F, const float *pre, float *h,
                          int threads) {
    const attn__vec_ops *vo = attn__vec_get();
#pragma omp parallel for schedule(static)                                      \
    num_threads(attn__omp_threads(threads)) if (n > 1)
    for (int64_t r = 0; r < n; r++) {
        const float *gate = pre + r * 2 * F, *up = gate + F;
        for (int64_t f = 0; f < F; f += 256)
            swiglu_chunk(gate + f, up + f, h + r * F + f,
                         F - f < 256 ? F - f : 256, vo);
    }
}

/* In place: g holds dh (n F) on entry and d pre (n 2F) on return. Rows go
 * from last to first, and within a row row r's reads (g[rF .. rF + F))
 * never lie past its writes' start 2rF, so nothing is read after being
 * overwritten; single-threaded for that reason (cheap next to the
 * products around it). */
void attn__swiglu_backward(int64_t n, int64_t F, const float *pre, float *g) {
    for (int64_t r = n - 1; r >= 0; r--) {
        const float *gate = pre + r * 2 * F, *up = gate + F;
        for (int64_t f = 0; f < F; f++) {
            double dh = g[r * F + f], v = gate[f];
            double sg = 1.0 / (1.0 + exp(-v));
            double dgate = dh * up[f] * sg * (1.0 + v * (1.0 - sg));
            double dup = dh * v * sg;
            g[r * 2 * F + f] = (float)dgate;
            g[r * 2 * F + F + f] = (float)dup;
        }
    }
}
