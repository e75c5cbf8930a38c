/* Building blocks of the layers: linear maps, LayerNorm, activations,
 * dropout on activations, sinusoidal positions, slice tables and the
 * seeded Xavier initialization. */
#include "layers.h"
#include "../kernels/gemv.h"
#include "../kernels/vec.h"

#include <cblas.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

/* 1 when the n <= 1024 floats at x are finite: their exponent fields
 * ANDed into one word (a loop without exits, which vectorizes); the first
 * bad element is then found by the plain test. */
static int finite_block(const float *x, int64_t n) {
    uint32_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        bad |= (u & 0x7f800000u) == 0x7f800000u;
    }
    return !bad;
}

attn_status attn__check_finite_f32(const float *x, int64_t n,
                                   const char *name) {
    for (int64_t i0 = 0; i0 < n; i0 += 1024) {
        const int64_t k = n - i0 < 1024 ? n - i0 : 1024;
        if (finite_block(x + i0, k)) continue;
        for (int64_t i = i0; i < i0 + k; i++)
            if (!isfinite(x[i]))
                return attn__fail(ATTN_E_NONFINITE, "%s[%lld] is %s", name,
                                  (long long)i, isnan(x[i]) ? "NaN" : "Inf");
    }
    return ATTN_OK;
}

size_t attn__size3(int64_t a, int64_t b, int64_t c) {
    int64_t ab, abc;
    if (!attn__mul_i64(a, b, &ab) || !attn__mul_i64(ab, c, &abc)) return 0;
    if ((uint64_t)abc > SIZE_MAX / sizeof(float)) return 0;
    return (size_t)abc;
}

attn_status attn__slices_alloc(attn__slices_fn fn, const void *cfg,
                               attn_param_slice **slices, int64_t *n) {
    *slices = NULL;
    attn_status st = fn(cfg, NULL, 0, n);
    if (st) return st;
    if (!(*slices = attn__alloc((size_t)*n, sizeof **slices, "slice table")))
        return ATTN_E_NOMEM;
    return fn(cfg, *slices, *n, n);
}

attn_status attn__init_by_slices(attn__slices_fn fn, const void *cfg,
                                 float *params, uint64_t seed) {
    int64_t n;
    attn_status st = fn(cfg, NULL, 0, &n);
    if (st) return st;
    ATTN__NEED(params);
    attn_param_slice *sl = NULL;
    st = attn__slices_alloc(fn, cfg, &sl, &n);
    if (!st) st = attn_params_init(sl, n, params, seed);
    attn__free(sl);
    return st;
}

size_t attn__ws_carve(float *ws, const size_t *sz, float **const *dst, int n) {
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        if (!sz[i] || total > SIZE_MAX / sizeof(float) - sz[i]) return 0;
        if (ws) *dst[i] = ws + total;
        total += sz[i];
    }
    return total;
}

/* ---- linear ----------------------------------------------------------- */

/* OpenBLAS's threaded sgemm cuts the product by the size of its pool, and
 * with some of its kernels the cut changes the bits (seen with OpenBLAS
 * 0.3.21's Zen kernels on Zen 4: 1 and 2 threads differ in most shapes).
 * The layers promise the same bits on any thread count, so each product is
 * cut here into a grid of output blocks that depends on the shape only
 * (never on the thread count), and the blocks run in an OpenMP loop, each
 * an sgemm on its own thread (attn__sgemm: oneDNN's, faster on these
 * blocks, or OpenBLAS's); the bias joins each block while it is in
 * cache. The team is OpenBLAS's setting on entry: the layers set it to one
 * for threads = 1.
 *
 * The grid: about 4M multiply-adds per block, at most 16 blocks (dealt
 * out dynamically, so that a thread slowed by the machine's other work
 * does not hold the rest up), each at least 16 rows and 16 columns wide.
 * Every block packs its rows of one operand and its columns of the other,
 * so the grid's shape minimizes what is packed more than once: a tall
 * product (BERT's 4096 rows) is cut into row blocks, a wide one (a
 * prompt's 512 rows against 3072 columns) into column blocks; cutting 512
 * rows into 64-row blocks made every block pack the whole weight again. */
typedef struct {
    int rows, cols; /* per block (the last ones may be shorter) */
    int nr, nc;     /* blocks down and across                   */
} linear_grid;

static int round16(int64_t v) { return (int)((v + 15) / 16 * 16); }

static linear_grid linear_grid_of(int m, int n, int k) {
    const int64_t work = (int64_t)m * n * k;
    int t = 1;
    while (t < 16 && work >> 22 >= 2 * t) t *= 2;
    linear_grid best = {m, n, 1, 1};
    int64_t cost = -1;
    for (int r = 1; r <= t; r *= 2) {
        const int c = t / r > 1 ? t / r : 1; /* r <= t */
        const int rows = round16((m + r - 1) / r),
                  cols = round16((n + c - 1) / c);
        const linear_grid g = {rows, cols, (m + rows - 1) / rows,
                               (n + cols - 1) / cols};
        /* floats packed: the rows once per block column, and so on */
        const int64_t packed = (int64_t)m * g.nc + (int64_t)n * g.nr;
        if ((r > 1 && rows < 16) || (c > 1 && cols < 16)) continue;
        if (cost < 0 || packed < cost) {
            cost = packed;
            best = g;
        }
    }
    return best;
}

static void linear_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n,
                        int k, const float *a, int lda, const float *b, int ldb,
                        float beta, float *c, int ldc, const float *bias) {
    const int team = openblas_get_num_threads();
    const linear_grid g = linear_grid_of(m, n, k);
    const int blocks = g.nr * g.nc;
    const int saved = attn__blas_single_begin();
#pragma omp parallel for num_threads(team > 1 ? team : 1)                      \
    schedule(dynamic, 1) if (team > 1 && blocks > 1)
    for (int blk = 0; blk < blocks; blk++) {
        const int r0 = blk / g.nc * g.rows, c0 = blk % g.nc * g.cols;
        const int rows = m - r0 < g.rows ? m - r0 : g.rows;
        const int cols = n - c0 < g.cols ? n - c0 : g.cols;
        /* row r of op(A) starts at row r of A, or at column r of A^T;
         * column j of op(B) at row j of B^T, or at column j of B */
        const float *ab =
            ta == CblasNoTrans ? a + (size_t)r0 * (size_t)lda : a + r0;
        const float *bb =
            tb == CblasTrans ? b + (size_t)c0 * (size_t)ldb : b + c0;
        float *cb = c + (size_t)r0 * (size_t)ldc + c0;
        attn__sgemm(ta == CblasTrans, tb == CblasTrans, rows, cols, k, ab, lda,
                    bb, ldb, beta, cb, ldc);
        if (bias)
            for (int r = 0; r < rows; r++)
                for (int j = 0; j < cols; j++)
                    cb[(size_t)r * (size_t)ldc + j] += bias[c0 + j];
    }
    attn__blas_single_end(saved);
}

/* y (n, out) = x W^T for the few rows of a decoding step or a short
 * input: matrix-vector products (kernels/gemv.c), since sgemm packs the
 * whole weight matrix for each call, which costs more than a product of
 * fewer than 8 rows. They read each weight once at the memory's pace and
 * give the same bits on any thread count (OpenBLAS's threaded sgemv did
 * not); the team is OpenBLAS's setting, as for linear_gemm. */
static void linear_gemv(int n, int in, int out, const float *x, const float *w,
                        float *y) {
    attn__gemv_f32(n, out, in, x, w, y, openblas_get_num_threads());
}

static attn_status linear_dims(int64_t n, int64_t in, int64_t out) {
    if (n < 1 || in < 1 || out < 1)
        return attn__fail(ATTN_E_SHAPE,
                          "linear sizes n=%lld in=%lld out=%lld "
                          "must be >= 1",
                          (long long)n, (long long)in, (long long)out);
    if (!attn__blas_ok(n) || !attn__blas_ok(in) || !attn__blas_ok(out))
        return attn__fail(ATTN_E_SHAPE,
                          "linear sizes n=%lld in=%lld out=%lld "
                          "exceed the BLAS int range",
                          (long long)n, (long long)in, (long long)out);
    return ATTN_OK;
}

attn_status attn_linear_forward(int64_t n, int64_t in, int64_t out,
                                const float *x, const float *w, const float *b,
                                float *y) {
    attn_status st = linear_dims(n, in, out);
    if (st) return st;
    ATTN__NEED(x);
    ATTN__NEED(w);
    ATTN__NEED(y);
    if (attn__linear_bf16_active())
        return attn__linear_forward_bf16(n, in, out, x, w, b, y);
    if (attn__linear_packed_forward(n, in, out, x, w, b, y, ATTN_ACT_RELU,
                                    NULL) > 0)
        return ATTN_OK;
    if (n >= 8) {
        linear_gemm(CblasNoTrans, CblasTrans, (int)n, (int)out, (int)in, x,
                    (int)in, w, (int)in, 0.0f, y, (int)out, b);
        return ATTN_OK;
    }
    linear_gemv((int)n, (int)in, (int)out, x, w, y);
    if (b)
        for (int64_t r = 0; r < n; r++)
            for (int64_t c = 0; c < out; c++) y[r * out + c] += b[c];
    return ATTN_OK;
}

attn_status attn_linear_backward(int64_t n, int64_t in, int64_t out,
                                 const float *x, const float *w,
                                 const float *dy, float *dw, float *db,
                                 float *dx) {
    attn_status st = linear_dims(n, in, out);
    if (st) return st;
    ATTN__NEED(dy);
    if (dw) ATTN__NEED(x);
    if (dx) ATTN__NEED(w);
    if (attn__linear_bf16_active())
        return attn__linear_backward_bf16(n, in, out, x, w, dy, dw, db, dx);
    if (dw) {
        linear_gemm(CblasTrans, CblasNoTrans, (int)out, (int)in, (int)n, dy,
                    (int)out, x, (int)in, 1.0f, dw, (int)in, NULL);
    }
    if (db) /* rows in a fixed order: the same sums on any thread count */
        for (int64_t r = 0; r < n; r++)
            for (int64_t c = 0; c < out; c++) db[c] += dy[r * out + c];
    if (dx) {
        linear_gemm(CblasNoTrans, CblasNoTrans, (int)n, (int)in, (int)out, dy,
                    (int)out, w, (int)in, 1.0f, dx, (int)in, NULL);
    }
    return ATTN_OK;
}

/* ---- LayerNorm -------------------------------------------------------- */

attn_status attn_layernorm_forward(int64_t n, int64_t d, const float *x,
                                   const float *gamma, const float *beta,
                                   double eps, float *y, float *mean,
                                   float *rstd) {
    return attn__layernorm_forward(n, d, x, gamma, beta, eps, y, mean, rstd, 0);
}

/* What both directions of LayerNorm check first. */
static attn_status ln_args(int64_t n, int64_t d, const float *x,
                           const float *gamma) {
    if (n < 1 || d < 1)
        return attn__fail(ATTN_E_SHAPE,
                          "layernorm sizes n=%lld d=%lld must "
                          "be >= 1",
                          (long long)n, (long long)d);
    ATTN__NEED(x);
    ATTN__NEED(gamma);
    return ATTN_OK;
}

attn_status attn__layernorm_forward(int64_t n, int64_t d, const float *x,
                                    const float *gamma, const float *beta,
                                    double eps, float *y, float *mean,
                                    float *rstd, int threads) {
    attn_status st = ln_args(n, d, x, gamma);
    if (st) return st;
    ATTN__NEED(beta);
    ATTN__NEED(y);
    if (!(eps > 0) || isinf(eps))
        return attn__fail(ATTN_E_INVALID,
                          "layernorm eps is %g; it must be "
                          "positive",
                          eps);
    attn__ln_rows(n, d, x, NULL, NULL, gamma, beta, eps, y, mean, rstd,
                  threads);
    return ATTN_OK;
}

attn_status attn_layernorm_backward(int64_t n, int64_t d, const float *x,
                                    const float *gamma, const float *mean,
                                    const float *rstd, const float *dy,
                                    float *dgamma, float *dbeta, float *dx) {
    return attn__layernorm_backward(n, d, x, gamma, mean, rstd, dy, dgamma,
                                    dbeta, dx, 0);
}

attn_status attn__layernorm_backward(int64_t n, int64_t d, const float *x,
                                     const float *gamma, const float *mean,
                                     const float *rstd, const float *dy,
                                     float *dgamma, float *dbeta, float *dx,
                                     int threads) {
    attn_status st = ln_args(n, d, x, gamma);
    if (st) return st;
    ATTN__NEED(mean);
    ATTN__NEED(rstd);
    ATTN__NEED(dy);
    if (dgamma || dbeta) /* column sums, rows in a fixed order */
        for (int64_t r = 0; r < n; r++) {
            const float *xr = x + r * d, *g = dy + r * d;
            float mu = mean[r], rs = rstd[r];
            for (int64_t c = 0; c < d; c++) {
                if (dgamma) dgamma[c] += g[c] * ((xr[c] - mu) * rs);
                if (dbeta) dbeta[c] += g[c];
            }
        }
    if (dx) {
#pragma omp parallel for schedule(static)                                      \
    num_threads(attn__omp_threads(threads))
        for (int64_t r = 0; r < n; r++) {
            const float *xr = x + r * d, *g = dy + r * d;
            double mu = mean[r], rs = rstd[r], a = 0, bsum = 0;
            for (int64_t c = 0; c < d; c++) {
                double gx = (double)g[c] * gamma[c];
                a += gx;
                bsum += gx * ((xr[c] - mu) * rs);
            }
            a /= (double)d;
            bsum /= (double)d;
            float *o = dx + r * d;
            for (int64_t c = 0; c < d; c++) {
                double xh = (xr[c] - mu) * rs;
                o[c] += (float)(rs * ((double)g[c] * gamma[c] - a - xh * bsum));
            }
        }
    }
    return ATTN_OK;
}

/* ---- activations and dropout ----------------------------------------- */

/* GELU x Phi(x) on n <= 256 values: erf by Abramowitz & Stegun 7.1.26
 * (|error| <= 1.5e-7), 1 + erf(x) = erfc(-x) formed without cancellation
 * for x < 0, and exp(-z^2) by the kernels' vector exp. A libm erf in
 * double per element cost as much as the model's matrix products (BERT's
 * feed-forward has 4 x d_model activations per token). The AVX-512 form
 * does the same operations in the same order (no fused multiply-adds), so
 * both give the same bits; the scalar one serves the other paths. */
static void gelu_pre(const float *x, float *e, float *t, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float z = fabsf(x[i]) * 0.70710678f;
        e[i] = -z * z;
        t[i] = 1.0f / (1.0f + 0.3275911f * z);
    }
}

static void gelu_post(const float *x, const float *e, const float *t, float *y,
                      int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float u = t[i];
        float q =
            u *
            (0.254829592f + u * (-0.284496736f +
                                 u * (1.421413741f + u * (-1.453152027f +
                                                          u * 1.061405429f)))) *
            e[i]; /* erfc(|z|) */
        y[i] = 0.5f * x[i] * (x[i] < 0 ? q : 2.0f - q);
    }
}

#if defined(__x86_64__) || defined(__i386__)
#define T_AVX512 __attribute__((target("avx512f")))
T_AVX512 static void gelu_pre16(const float *x, float *e, float *t, int64_t n) {
    int64_t i = 0;
    const __m512 c = _mm512_set1_ps(0.70710678f), one = _mm512_set1_ps(1.0f),
                 p = _mm512_set1_ps(0.3275911f);
    for (; i + 16 <= n; i += 16) {
        __m512 z = _mm512_mul_ps(_mm512_abs_ps(_mm512_loadu_ps(x + i)), c);
        _mm512_storeu_ps(
            e + i, _mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(z, z)));
        _mm512_storeu_ps(
            t + i, _mm512_div_ps(one, _mm512_add_ps(one, _mm512_mul_ps(p, z))));
    }
    gelu_pre(x + i, e + i, t + i, n - i);
}

T_AVX512 static void gelu_post16(const float *x, const float *e, const float *t,
                                 float *y, int64_t n) {
    int64_t i = 0;
    const __m512 a1 = _mm512_set1_ps(0.254829592f),
                 a2 = _mm512_set1_ps(-0.284496736f),
                 a3 = _mm512_set1_ps(1.421413741f),
                 a4 = _mm512_set1_ps(-1.453152027f),
                 a5 = _mm512_set1_ps(1.061405429f), h = _mm512_set1_ps(0.5f),
                 two = _mm512_set1_ps(2.0f);
    for (; i + 16 <= n; i += 16) {
        const __m512 u = _mm512_loadu_ps(t + i), xv = _mm512_loadu_ps(x + i);
        __m512 q = _mm512_add_ps(a4, _mm512_mul_ps(u, a5));
        q = _mm512_add_ps(a3, _mm512_mul_ps(u, q));
        q = _mm512_add_ps(a2, _mm512_mul_ps(u, q));
        q = _mm512_add_ps(a1, _mm512_mul_ps(u, q));
        q = _mm512_mul_ps(_mm512_mul_ps(u, q), _mm512_loadu_ps(e + i));
        const __mmask16 neg =
            _mm512_cmp_ps_mask(xv, _mm512_setzero_ps(), _CMP_LT_OQ);
        const __m512 w = _mm512_mask_blend_ps(neg, _mm512_sub_ps(two, q), q);
        _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_mul_ps(h, xv), w));
    }
    gelu_post(x + i, e + i, t + i, y + i, n - i);
}
#endif

static void gelu_chunk(const float *x, float *y, int64_t n,
                       const attn__vec_ops *vo, int wide) {
    float e[256] = {0}, t[256] = {0}; /* (= {0}: gcc cannot see n >= 1) */
#if defined(__x86_64__) || defined(__i386__)
    if (wide) {
        gelu_pre16(x, e, t, n);
        vo->exp(e, e, n);
        gelu_post16(x, e, t, y, n);
        return;
    }
#endif
    (void)wide;
    gelu_pre(x, e, t, n);
    vo->exp(e, e, n);
    gelu_post(x, e, t, y, n);
}

void attn__act_forward(attn_activation act, const float *x, float *y, int64_t n,
                       int threads) {
    if (act == ATTN_ACT_GELU) {
        const attn__vec_ops *vo = attn__vec_get();
        const int wide = vo->level >= ATTN__VEC_AVX512;
        const int64_t chunks = (n + 255) / 256;
#pragma omp parallel for schedule(static)                                      \
    num_threads(attn__omp_threads(threads))
        for (int64_t c = 0; c < chunks; c++) {
            const int64_t i0 = c * 256, k = n - i0 < 256 ? n - i0 : 256;
            gelu_chunk(x + i0, y + i0, k, vo, wide);
        }
        return;
    }
#pragma omp parallel for schedule(static)                                      \
    num_threads(attn__omp_threads(threads))
    for (int64_t i = 0; i < n; i++) y[i] = x[i] > 0 ? x[i] : 0.0f;
}

void attn__act_backward(attn_activation act, const float *x, const float *dy,
                        float *dx, int64_t n, int threads) {
#pragma omp parallel for schedule(static)                                      \
    num_threads(attn__omp_threads(threads))
    for (int64_t i = 0; i < n; i++) {
        double v = x[i], g;
        if (act == ATTN_ACT_GELU) /* Phi(x) + x phi(x) */
            g = 0.5 * (1.0 + erf(v * 0.70710678118654752)) +
                v * 0.39894228040143268 * exp(-0.5 * v * v);
        else
            g = v > 0 ? 1.0 : 0.0;
        dx[i] = (float)(dy[i] * g); /* overwrite: dx may be dy */
    }
}

void attn__dropout_apply(uint64_t seed, uint32_t stream, double p, float *x,
                         int64_t n, int threads) {
    if (!(p > 0)) return;
    const uint32_t thr = attn__dropout_threshold(p);
    const float keep = (float)(1.0 / (1.0 - p));
    const int64_t groups = (n + 3) / 4;
#pragma omp parallel for schedule(static)                                      \
    num_threads(attn__omp_threads(threads))
    for (int64_t g = 0; g < groups; g++) {
        /* counters differ from those of attention weights (b, h, i, j) by
         * the 0xA5D0 tag in the last word */
        uint32_t ctr[4] = {(uint32_t)g, (uint32_t)((uint64_t)g >> 32), stream,
                           0xA5D00000u};
        uint32_t r[4];
        attn__philox4x32(seed, ctr, r);
        for (int t = 0; t < 4 && g * 4 + t < n; t++)
            x[g * 4 + t] = r[t] >= thr ? x[g * 4 + t] * keep : 0.0f;
    }
}

/* ---- positions ------------------------------------------------------- */

static attn_status pe_dims(int64_t L, int64_t d_model) {
    if (L < 1 || d_model < 1)
        return attn__fail(ATTN_E_SHAPE,
                          "positional encoding needs L >= 1 and "
                          "d_model >= 1, not %lld and %lld",
                          (long long)L, (long long)d_model);
    if (!attn__size3(L, d_model, 1))
        return attn__fail(ATTN_E_NOMEM, "L * d_model overflows");
    return ATTN_OK;
}

attn_status attn_positional_encoding(int64_t L, int64_t d_model, float *pe) {
    attn_status st = pe_dims(L, d_model);
    if (st) return st;
    ATTN__NEED(pe);
    /* column by column: one pow per column, not per element */
    for (int64_t c = 0; c < d_model; c++) {
        const double freq =
            pow(10000.0, (double)(c & ~(int64_t)1) / (double)d_model);
        for (int64_t p = 0; p < L; p++) {
            double ang = (double)p / freq;
            pe[p * d_model + c] = (float)((c & 1) ? cos(ang) : sin(ang));
        }
    }
    return ATTN_OK;
}

attn_status attn_add_positional_encoding(int64_t B, int64_t L, int64_t d_model,
                                         float *x) {
    if (B < 1) return attn__fail(ATTN_E_SHAPE, "B is %lld (< 1)", (long long)B);
    attn_status st = pe_dims(L, d_model);
    if (st) return st;
    ATTN__NEED(x);
    if (!attn__size3(B, L, d_model))
        return attn__fail(ATTN_E_NOMEM, "B * L * d_model overflows");
    float *pe = attn__alloc((size_t)(L * d_model), sizeof(float), "positions");
    if (!pe) return ATTN_E_NOMEM;
    st = attn_positional_encoding(L, d_model, pe);
    if (!st)
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < L * d_model; i++)
                x[b * L * d_model + i] += pe[i];
    attn__free(pe);
    return st;
}

/* ---- slices and initialization --------------------------------------- */

void attn__slice_add(attn_param_slice *slices, int64_t cap, int64_t *count,
                     const char *prefix, const char *name, int64_t *offset,
                     int64_t rows, int64_t cols, attn_init_kind init) {
    if (slices && *count < cap) {
        attn_param_slice *s = &slices[*count];
        memset(s, 0, sizeof *s);
        snprintf(s->name, sizeof s->name, "%s%s", prefix ? prefix : "", name);
        s->offset = *offset;
        s->shape[0] = rows;
        s->shape[1] = cols;
        s->init = init;
    }
    (*count)++;
    *offset += rows * cols;
}

attn_status attn_params_init(const attn_param_slice *slices, int64_t nslices,
                             float *block, uint64_t seed) {
    ATTN__NEED(slices);
    ATTN__NEED(block);
    if (nslices < 0)
        return attn__fail(ATTN_E_INVALID, "nslices is %lld",
                          (long long)nslices);
    for (int64_t s = 0; s < nslices; s++) {
        const attn_param_slice *sl = &slices[s];
        int64_t n;
        if (sl->offset < 0 || sl->shape[0] < 1 || sl->shape[1] < 1 ||
            !attn__mul_i64(sl->shape[0], sl->shape[1], &n))
            return attn__fail(ATTN_E_INVALID,
                              "slice %lld (%s) has offset %lld "
                              "and shape (%lld, %lld)",
                              (long long)s, sl->name, (long long)sl->offset,
                              (long long)sl->shape[0], (long long)sl->shape[1]);
        float *dst = block + sl->offset;
        if (sl->init == ATTN_INIT_ZERO || sl->init == ATTN_INIT_ONE) {
            float val = sl->init == ATTN_INIT_ONE ? 1.0f : 0.0f;
            for (int64_t i = 0; i < n; i++) dst[i] = val;
            continue;
        }
        if (sl->init != ATTN_INIT_XAVIER)
            return attn__fail(ATTN_E_INVALID, "slice %s has init kind %d",
                              sl->name, (int)sl->init);
        double bound = sqrt(6.0 / (double)(sl->shape[0] + sl->shape[1]));
        for (int64_t i = 0; i < n; i += 4) {
            uint32_t ctr[4] = {(uint32_t)(i >> 2),
                               (uint32_t)((uint64_t)i >> 34), (uint32_t)s,
                               0x1A17u};
            uint32_t r[4];
            attn__philox4x32(seed, ctr, r);
            for (int t = 0; t < 4 && i + t < n; t++) {
                double u = (r[t] + 0.5) * (1.0 / 4294967296.0); /* (0, 1) */
                dst[i + t] = (float)((2.0 * u - 1.0) * bound);
            }
        }
    }
    return ATTN_OK;
}

attn_status attn__layer_opts_check(const attn_layer_opts *o, int64_t B,
                                   int64_t H, int64_t Lq, int64_t Lk) {
    ATTN__NEED(o);
    if (B < 1 || Lq < 1 || Lk < 1)
        return attn__fail(ATTN_E_SHAPE, "B=%lld Lq=%lld Lk=%lld must be >= 1",
                          (long long)B, (long long)Lq, (long long)Lk);
    if (isnan(o->scale) || o->scale < 0 || isinf(o->scale))
        return attn__fail(ATTN_E_INVALID,
                          "scale is %g; it must be positive "
                          "(or 0 for the default)",
                          o->scale);
    if (!(o->dropout_p >= 0.0 && o->dropout_p < 1.0))
        return attn__fail(ATTN_E_INVALID,
                          "dropout_p is %g; it must be in "
                          "[0, 1)",
                          o->dropout_p);
    if (o->threads < 0)
        return attn__fail(ATTN_E_INVALID, "threads is %d (< 0)", o->threads);
    if (o->impl != ATTN_IMPL_AUTO && o->impl != ATTN_IMPL_REF &&
        o->impl != ATTN_IMPL_FLASH && o->impl != ATTN_IMPL_FLASH_BF16)
        return attn__fail(ATTN_E_INVALID, "impl is %d: not a kernel",
                          (int)o->impl);
    return attn_mask_check(&o->mask, B, H, Lq, Lk);
}
