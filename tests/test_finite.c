/* The layers' finiteness check (attn__check_finite_f32), which scans in
 * blocks and then finds the first bad element: every length around the
 * block size, a NaN, +Inf or -Inf at the first, a middle and the last
 * place (the first of two named), and the largest and subnormal finite
 * values accepted. */
#include "../src/layers/layers.h"
#include "check.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
    const int64_t lens[] = {1, 3, 17, 1023, 1024, 1025, 2049, 5000};
    const float bad[3] = {NAN, INFINITY, -INFINITY};
    float *x = malloc(sizeof(float) * 5000);
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        const int64_t n = lens[k];
        for (int64_t i = 0; i < n; i++)
            x[i] = i % 3 ? FLT_MAX : (i % 2 ? -1e-45f : 1.0f);
        CHECK_STATUS(attn__check_finite_f32(x, n, "x"), ATTN_OK);
        const int64_t at[3] = {0, n / 2, n - 1};
        for (int b = 0; b < 3; b++)
            for (int a = 0; a < 3; a++) {
                const float keep = x[at[a]];
                x[at[a]] = bad[b];
                if (a == 0 && n > 1) x[n - 1] = bad[(b + 1) % 3];
                char want[64];
                snprintf(want, sizeof want, "x[%lld] is %s", (long long)at[a],
                         b ? "Inf" : "NaN");
                CHECK_STATUS(attn__check_finite_f32(x, n, "x"),
                             ATTN_E_NONFINITE);
                CHECK_MSG(strstr(attn_last_error(), want) != NULL,
                          "n %lld: \"%s\", not \"%s\"", (long long)n,
                          attn_last_error(), want);
                x[at[a]] = keep;
                x[n - 1] =
                    (n - 1) % 3 ? FLT_MAX : ((n - 1) % 2 ? -1e-45f : 1.0f);
            }
    }
    free(x);
    return check_done("test_finite");
}
