/* The linear maps (src/layers/common.c: products cut into a grid of output
 * blocks fixed by the shape, the bias added per block; matrix-vector
 * products under 8 rows) against a double reference, forward and
 * backward, on odd sizes and on shapes that take row blocks (tall), column
 * blocks (wide), both and none; each bitwise the same on 1, 2 and 3
 * OpenBLAS threads (the layers' team), with the sgemm the blocks take
 * (oneDNN's when the library is built with it, OpenBLAS's under
 * ATTN_SGEMM=openblas: CTest runs both, and oneDNN capped at AVX2). Then
 * the activations around them:
 * GELU on each vector level gives its formula's bits with that level's
 * exp (the AVX-512 passes included), and SwiGLU through
 * the vector exp is within 4 ulp-ish (2e-6 relative) of silu(gate) * up in
 * double, with silu's limits (-0 far left, gate far right). */
#include "../src/kernels/vec.h"
#include "../src/layers/layers.h"
#include "check.h"

#include <cblas.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static float frand(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((*s >> 40) & 0xFFFFFF) / 16777216.0f - 0.5f;
}

static float *rnd(int64_t n, uint64_t seed) {
    float *x = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) x[i] = frand(&seed);
    return x;
}

/* y = x W^T + b in double; the error bound is k eps sum |x||w| */
static void ref_fwd(int64_t n, int64_t in, int64_t out, const float *x,
                    const float *w, const float *b, double *y, double *mag) {
    for (int64_t r = 0; r < n; r++)
        for (int64_t c = 0; c < out; c++) {
            double s = b ? b[c] : 0, m = b ? fabs(b[c]) : 0;
            for (int64_t k = 0; k < in; k++) {
                s += (double)x[r * in + k] * w[c * in + k];
                m += fabs((double)x[r * in + k] * w[c * in + k]);
            }
            y[r * out + c] = s;
            mag[r * out + c] = m;
        }
}

static int near_all(const float *got, const double *want, const double *mag,
                    int64_t n, int64_t k) {
    for (int64_t i = 0; i < n; i++)
        if (!(fabs(got[i] - want[i]) <=
              2e-7 * (double)(k + 2) * mag[i] + 1e-30))
            return 0;
    return 1;
}

static void one_shape(int64_t n, int64_t in, int64_t out) {
    uint64_t seed = (uint64_t)(n * 1000003 + in * 1009 + out);
    float *x = rnd(n * in, seed), *w = rnd(out * in, seed + 1),
          *b = rnd(out, seed + 2), *dy = rnd(n * out, seed + 3);
    double *want = malloc(sizeof(double) * (size_t)(n * out)),
           *mag = malloc(sizeof(double) * (size_t)(n * out));
    ref_fwd(n, in, out, x, w, b, want, mag);
    float *y[3], *dw[3], *db[3], *dx[3];
    const int threads[3] = {1, 2, 3};
    for (int t = 0; t < 3; t++) {
        openblas_set_num_threads(threads[t]);
        y[t] = malloc(sizeof(float) * (size_t)(n * out));
        dw[t] = calloc((size_t)(out * in), sizeof(float));
        db[t] = calloc((size_t)out, sizeof(float));
        dx[t] = calloc((size_t)(n * in), sizeof(float));
        CHECK_STATUS(attn_linear_forward(n, in, out, x, w, b, y[t]), ATTN_OK);
        CHECK_STATUS(
            attn_linear_backward(n, in, out, x, w, dy, dw[t], db[t], dx[t]),
            ATTN_OK);
    }
    CHECK_MSG(near_all(y[0], want, mag, n * out, in),
              "forward n %lld in %lld out %lld", (long long)n, (long long)in,
              (long long)out);
    /* backward: dW = dy^T x (sum over n), dx = dy W (sum over out) */
    double *wdw = malloc(sizeof(double) * (size_t)(out * in)),
           *mdw = malloc(sizeof(double) * (size_t)(out * in)),
           *wdx = malloc(sizeof(double) * (size_t)(n * in)),
           *mdx = malloc(sizeof(double) * (size_t)(n * in));
    for (int64_t o = 0; o < out; o++)
        for (int64_t k = 0; k < in; k++) {
            double s = 0, m = 0;
            for (int64_t r = 0; r < n; r++) {
                s += (double)dy[r * out + o] * x[r * in + k];
                m += fabs((double)dy[r * out + o] * x[r * in + k]);
            }
            wdw[o * in + k] = s;
            mdw[o * in + k] = m;
        }
    for (int64_t r = 0; r < n; r++)
        for (int64_t k = 0; k < in; k++) {
            double s = 0, m = 0;
            for (int64_t o = 0; o < out; o++) {
                s += (double)dy[r * out + o] * w[o * in + k];
                m += fabs((double)dy[r * out + o] * w[o * in + k]);
            }
            wdx[r * in + k] = s;
            mdx[r * in + k] = m;
        }
    CHECK_MSG(near_all(dw[0], wdw, mdw, out * in, n), "dW n %lld in %lld",
              (long long)n, (long long)in);
    CHECK_MSG(near_all(dx[0], wdx, mdx, n * in, out), "dx n %lld out %lld",
              (long long)n, (long long)out);
    int db_ok = 1;
    for (int64_t o = 0; o < out; o++) {
        double s = 0;
        for (int64_t r = 0; r < n; r++) s += dy[r * out + o];
        if (!(fabs(db[0][o] - s) <= 1e-6 * (double)n)) db_ok = 0;
    }
    CHECK(db_ok);
    for (int t = 1; t < 3; t++) {
        CHECK_MSG(!memcmp(y[0], y[t], sizeof(float) * (size_t)(n * out)),
                  "forward bits, %d threads, n %lld in %lld out %lld",
                  threads[t], (long long)n, (long long)in, (long long)out);
        CHECK(!memcmp(dw[0], dw[t], sizeof(float) * (size_t)(out * in)));
        CHECK(!memcmp(db[0], db[t], sizeof(float) * (size_t)out));
        CHECK(!memcmp(dx[0], dx[t], sizeof(float) * (size_t)(n * in)));
    }
    for (int t = 0; t < 3; t++) {
        free(y[t]);
        free(dw[t]);
        free(db[t]);
        free(dx[t]);
    }
    free(x);
    free(w);
    free(b);
    free(dy);
    free(want);
    free(mag);
    free(wdw);
    free(mdw);
    free(wdx);
    free(mdx);
}

/* GELU on the path of level lv against its formula, bit for bit */
static void gelu_level(attn__vec_level lv) {
    const int64_t n = 4099;
    float *x = malloc(sizeof(float) * n), *y1 = malloc(sizeof(float) * n),
          *y2 = malloc(sizeof(float) * n);
    for (int64_t i = 0; i < n; i++) x[i] = -10.0f + 20.0f * (float)i / n;
    x[7] = 0.0f;
    x[8] = -0.0f;
    attn__vec_set_max_level(lv);
    attn__act_forward(ATTN_ACT_GELU, x, y1, n, 2);
    /* the scalar formula with the same exp (chunks of 256, as the layer) */
    const attn__vec_ops *vo = attn__vec_get();
    for (int64_t i0 = 0; i0 < n; i0 += 256) {
        const int64_t k = n - i0 < 256 ? n - i0 : 256;
        float e[256], t[256];
        for (int64_t i = 0; i < k; i++) {
            float z = fabsf(x[i0 + i]) * 0.70710678f;
            e[i] = -z * z;
            t[i] = 1.0f / (1.0f + 0.3275911f * z);
        }
        vo->exp(e, e, k);
        for (int64_t i = 0; i < k; i++) {
            float u = t[i], v = x[i0 + i];
            float q = u *
                      (0.254829592f +
                       u * (-0.284496736f +
                            u * (1.421413741f +
                                 u * (-1.453152027f + u * 1.061405429f)))) *
                      e[i];
            y2[i0 + i] = 0.5f * v * (v < 0 ? q : 2.0f - q);
        }
    }
    printf("GELU: the %s passes against the scalar formula\n",
           vo->level >= ATTN__VEC_AVX512 ? "AVX-512"
           : vo->level == ATTN__VEC_AVX2 ? "scalar (AVX2 exp)"
                                         : "scalar");
    CHECK(!memcmp(y1, y2, sizeof(float) * n));
    attn__vec_set_max_level(ATTN__VEC_AVX512);
    free(x);
    free(y1);
    free(y2);
}

static void activations(void) {
    for (int lv = ATTN__VEC_SCALAR; lv <= ATTN__VEC_AVX512; lv++)
        gelu_level((attn__vec_level)lv);
    /* SwiGLU, rows of odd width, against double */
    const int64_t rows = 3, F = 259;
    float *pre = rnd(rows * 2 * F, 99), *h = malloc(sizeof(float) * rows * F);
    for (int64_t i = 0; i < rows * 2 * F; i++) pre[i] *= 40.0f;
    pre[0] = -100.0f; /* exp(100) overflows: silu's limit -0 */
    pre[1] = 100.0f;  /* exp(-100) flushes: silu = gate      */
    attn__swiglu_forward(rows, F, pre, h, 2);
    double worst = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t f = 0; f < F; f++) {
            double g = pre[r * 2 * F + f], u = pre[r * 2 * F + F + f];
            double want = g / (1.0 + exp(-g)) * u;
            double e = fabs(h[r * F + f] - want) / (fabs(want) + 1e-30);
            if (fabs(want) > 1e-30 && e > worst) worst = e;
        }
    printf("SwiGLU: max relative error %.3g\n", worst);
    CHECK(worst <= 2e-6);
    CHECK(h[0] == 0.0f && h[1] == (float)(100.0 * pre[F + 1]));
    free(pre);
    free(h);
}

/* The sgemm the blocks take is the one the build and this environment ask
 * for: oneDNN's when built with it (ATTN_HAVE_DNNL, as the library is),
 * unless ATTN_SGEMM=openblas. */
static void which_sgemm(void) {
    const char *e = getenv("ATTN_SGEMM");
    const int blas = e && strcmp(e, "openblas") == 0;
#ifdef ATTN_HAVE_DNNL
    const int built = 1;
#else
    const int built = 0;
#endif
    printf("sgemm: %s\n", attn__sgemm_describe());
    CHECK_MSG(attn__sgemm_onednn() == (!blas && built),
              "oneDNN %s, ATTN_SGEMM %s, built %s oneDNN",
              attn__sgemm_onednn() ? "taken" : "not taken", e ? e : "unset",
              built ? "with" : "without");
}

int main(void) {
    which_sgemm();
    const int was = openblas_get_num_threads();
    /* odd sizes; matrix-vector rows (n < 8); one block; tall (row blocks);
     * wide (column blocks); both; a prompt's wide product */
    static const int64_t shapes[][3] = {
        {1, 1, 1},      {3, 17, 129},    {7, 129, 3},     {8, 3, 17},
        {17, 129, 3},   {129, 17, 129},  {129, 129, 17},  {1031, 33, 65},
        {37, 96, 2051}, {300, 130, 260}, {515, 64, 1029}, {512, 576, 192}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        one_shape(shapes[s][0], shapes[s][1], shapes[s][2]);
    openblas_set_num_threads(was);
    activations();
    return check_done("test_linear");
}
