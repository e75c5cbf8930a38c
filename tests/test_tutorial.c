/* The tutorial cases: shapes of the (64, 5, 64) run and the 3-token example
 * whose weights and output are known to six digits. */
#include "attn.h"
#include "check.h"

#include <math.h>
#include <stdlib.h>

static void three_token(attn_impl impl) {
    float q[9] = {1, 0, 1, 0, 1, 1, 1, 1, 0};
    float k[9] = {1, 1, 0, 0, 1, 1, 0, 0, 1};
    float v[6] = {0, 1, 2, 0, 1, 2};
    float o[6], w[9], lse[3];
    attn_tensor Q = attn_tensor_4d(q, ATTN_F32, 1, 1, 3, 3);
    attn_tensor K = attn_tensor_4d(k, ATTN_F32, 1, 1, 3, 3);
    attn_tensor V = attn_tensor_4d(v, ATTN_F32, 1, 1, 3, 2);
    attn_tensor O = attn_tensor_4d(o, ATTN_F32, 1, 1, 3, 2);
    attn_tensor W = attn_tensor_4d(w, ATTN_F32, 1, 1, 3, 3);
    attn_sdpa_opts opts;
    attn_sdpa_opts_init(&opts);
    opts.scale = 1.0 / sqrt(3.0);
    opts.impl = impl;
    CHECK_STATUS(attn_sdpa_forward(&Q, &K, &V, &opts, &O, &W, lse), ATTN_OK);
    const double want_w[9] = {1.0 / 3,  1.0 / 3,  1.0 / 3,  0.264458, 0.471083,
                              0.264458, 0.532897, 0.299160, 0.167943};
    const double want_o[6] = {1, 1, 1.206625, 0.793375, 0.766263, 0.868784};
    for (int i = 0; i < 9; i++) CHECK_NEAR(w[i], want_w[i], 1e-6);
    for (int i = 0; i < 6; i++) CHECK_NEAR(o[i], want_o[i], 1e-6);
}

static void batch64(attn_impl impl) {
    /* random Q, K, V of shape (64, 5, 64): a rank-3 input is (B, 1, L, D) */
    const int B = 64, L = 5, D = 64;
    float *q = malloc(sizeof(float) * B * L * D);
    float *k = malloc(sizeof(float) * B * L * D);
    float *v = malloc(sizeof(float) * B * L * D);
    float *o = malloc(sizeof(float) * B * L * D);
    float *w = malloc(sizeof(float) * B * L * L);
    unsigned long long s = 42;
    for (int i = 0; i < B * L * D; i++) {
        q[i] = (float)(test_rand(&s) * 0.5 + 0.5);
        k[i] = (float)(test_rand(&s) * 0.5 + 0.5);
        v[i] = (float)(test_rand(&s) * 0.5 + 0.5);
    }
    attn_tensor Q = attn_tensor_4d(q, ATTN_F32, B, 1, L, D);
    attn_tensor K = attn_tensor_4d(k, ATTN_F32, B, 1, L, D);
    attn_tensor V = attn_tensor_4d(v, ATTN_F32, B, 1, L, D);
    attn_tensor O = attn_tensor_4d(o, ATTN_F32, B, 1, L, D);
    attn_tensor W = attn_tensor_4d(w, ATTN_F32, B, 1, L, L);
    attn_sdpa_opts opts;
    attn_sdpa_opts_init(&opts);
    opts.impl = impl;
    CHECK_STATUS(attn_sdpa_forward(&Q, &K, &V, &opts, &O, &W, NULL), ATTN_OK);
    CHECK(O.shape[0] == 64 && O.shape[2] == 5 && O.shape[3] == 64);
    double worst = 0;
    for (int r = 0; r < B * L; r++) {
        double sum = 0;
        for (int j = 0; j < L; j++) sum += w[r * L + j];
        if (fabs(sum - 1) > worst) worst = fabs(sum - 1);
    }
    CHECK_MSG(worst <= 1e-6, "row sums deviate by %g", worst);
    free(q);
    free(k);
    free(v);
    free(o);
    free(w);
}

int main(void) {
    three_token(ATTN_IMPL_REF);
    three_token(ATTN_IMPL_AUTO);
    batch64(ATTN_IMPL_REF);
    batch64(ATTN_IMPL_AUTO);
    return check_done("test_tutorial");
}
