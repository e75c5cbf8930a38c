/* LayerNorm's rows (src/layers/ln_rows.c): against a float64 reference on
 * odd widths; the AVX-512 and scalar forms give the same bits; 1, 2 and 3
 * threads give the same bits; the fused residual (r = x + a, then its
 * norm) gives the bits of the sum followed by the norm. Where the CPU has
 * no AVX-512 the wide form is reported NOT run. */
#include "../src/kernels/vec.h"
#include "../src/layers/layers.h"
#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float frand(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

int main(void) {
    const int64_t widths[] = {1, 3, 16, 17, 129, 384};
    const int64_t n = 5;
    const int wide = attn__vec_best() >= ATTN__VEC_AVX512;
    printf("AVX-512 rows %s\n", wide ? "run" : "NOT run");
    uint32_t seed = 7;
    for (size_t k = 0; k < sizeof widths / sizeof widths[0]; k++) {
        const int64_t d = widths[k], nd = n * d;
        float *x = malloc(sizeof(float) * (size_t)nd * 9);
        float *a = x + nd, *g = a + nd, *b = g + d, *y = b + d, *y2 = y + nd;
        float *r = y2 + nd, *sum = r + nd, *y3 = sum + nd;
        float m[5], s[5], m2[5], s2[5];
        for (int64_t i = 0; i < nd; i++) {
            x[i] = 3.0f + 4.0f * frand(&seed); /* an offset: the mean counts */
            a[i] = frand(&seed);
        }
        for (int64_t c = 0; c < d; c++) {
            g[c] = 1.0f + 0.5f * frand(&seed);
            b[c] = 0.1f * frand(&seed);
        }
        attn__ln_rows(n, d, x, NULL, NULL, g, b, 1e-5, y, m, s, 1);
        double worst = 0;
        for (int64_t i = 0; i < n; i++) {
            double mu = 0, v = 0;
            for (int64_t c = 0; c < d; c++) mu += x[i * d + c];
            mu /= (double)d;
            for (int64_t c = 0; c < d; c++)
                v += (x[i * d + c] - mu) * (x[i * d + c] - mu);
            const double rs = 1.0 / sqrt(v / (double)d + 1e-5);
            for (int64_t c = 0; c < d; c++) {
                const double want = (x[i * d + c] - mu) * rs * g[c] + b[c];
                worst = fmax(worst, fabs(y[i * d + c] - want));
            }
            CHECK_NEAR(m[i], mu, 1e-6 * fabs(mu));
            CHECK_NEAR(s[i], rs, 1e-6 * rs);
        }
        CHECK_MSG(worst <= 1e-6, "d %lld: off the reference by %.3g",
                  (long long)d, worst);
        for (int t = 2; t <= 3; t++) {
            attn__ln_rows(n, d, x, NULL, NULL, g, b, 1e-5, y2, m2, s2, t);
            CHECK_MSG(!memcmp(y, y2, sizeof(float) * (size_t)nd) &&
                          !memcmp(m, m2, sizeof m) && !memcmp(s, s2, sizeof s),
                      "d %lld: %d threads change the bits", (long long)d, t);
        }
        attn__vec_set_max_level(ATTN__VEC_SCALAR);
        attn__ln_rows(n, d, x, NULL, NULL, g, b, 1e-5, y2, m2, s2, 2);
        attn__vec_set_max_level(ATTN__VEC_AVX512);
        CHECK_MSG(!memcmp(y, y2, sizeof(float) * (size_t)nd) &&
                      !memcmp(m, m2, sizeof m) && !memcmp(s, s2, sizeof s),
                  "d %lld: the scalar rows differ from the wide ones",
                  (long long)d);
        for (int64_t i = 0; i < nd; i++) sum[i] = x[i] + a[i];
        attn__ln_rows(n, d, sum, NULL, NULL, g, b, 1e-5, y2, m2, s2, 2);
        attn__ln_rows(n, d, x, a, r, g, b, 1e-5, y3, m, s, 2);
        CHECK_MSG(!memcmp(r, sum, sizeof(float) * (size_t)nd) &&
                      !memcmp(y2, y3, sizeof(float) * (size_t)nd) &&
                      !memcmp(m, m2, sizeof m) && !memcmp(s, s2, sizeof s),
                  "d %lld: the fused residual changes the bits", (long long)d);
        free(x);
    }
    if (!wide)
        fprintf(stderr, "*** the AVX-512 LayerNorm rows NOT run: this CPU's "
                        "path is below AVX-512 ***\n");
    return check_done("test_ln_rows");
}
