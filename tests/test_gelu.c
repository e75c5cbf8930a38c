/* The encoder's GELU (src/layers/common.c, erf by Abramowitz & Stegun
 * 7.1.26 and the vector exp) against x Phi(x) in double with libm's erf on
 * [-12, 12] in steps of 1/1024 and odd lengths (chunk edges): absolute
 * error <= 1e-7 (1 + |x|), and no cancellation in the negative tail
 * (relative error <= 1e-2 where |GELU(x)| > 1e-7, about x > -5.3). */
#include "../src/layers/layers.h"
#include "check.h"

int main(void) {
    const int n = 24 * 1024 + 1;
    float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
    for (int i = 0; i < n; i++) x[i] = -12.0f + (float)i / 1024.0f;
    double worst = 0, worst_rel = 0;
    for (int len = 1; len <= n; len = len < 300 ? len + 37 : n) {
        attn__act_forward(ATTN_ACT_GELU, x, y, len, 2);
        for (int i = 0; i < len; i++) {
            double v = x[i], want = 0.5 * v * (1.0 + erf(v / sqrt(2.0)));
            double err = fabs(y[i] - want) / (1.0 + fabs(v));
            if (err > worst) worst = err;
            if (fabs(want) > 1e-7 && v < 0) {
                double rel = fabs(y[i] - want) / fabs(want);
                if (rel > worst_rel) worst_rel = rel;
            }
        }
        if (len == n) break;
    }
    printf(
        "GELU: max abs error / (1 + |x|) %.3g, max relative error in the tail %.3g\n",
        worst, worst_rel);
    CHECK(worst <= 1e-7);
    CHECK(worst_rel <= 1e-2);
    float z[3] = {0.0f, -0.0f, 3.0f}, o[3];
    attn__act_forward(ATTN_ACT_GELU, z, o, 3, 1);
    CHECK(o[0] == 0.0f && o[1] == 0.0f);
    CHECK(fabs(o[2] - 3.0 * 0.5 * (1.0 + erf(3.0 / sqrt(2.0)))) <= 1e-6);
    free(x);
    free(y);
    return check_done("test_gelu");
}
