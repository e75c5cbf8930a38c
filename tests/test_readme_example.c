#include <attn.h>
#include <stdio.h>

int main(void) {
    /* one sequence of 4 tokens with 8 features, shape (B, H, L, D) */
    float x[4 * 8], out[4 * 8];
    for (int i = 0; i < 4 * 8; i++) x[i] = (float)(i % 7) / 7.0f;
    attn_tensor X = attn_tensor_4d(x, ATTN_F32, 1, 1, 4, 8);
    attn_tensor O = attn_tensor_4d(out, ATTN_F32, 1, 1, 4, 8);

    attn_sdpa_opts opts;
    attn_sdpa_opts_init(&opts);  /* scale 1/sqrt(8), no mask, fastest kernel */
    opts.mask.causal = 1;        /* token i attends to tokens 0..i */

    /* self-attention: Q = K = V = X; no weights, no log-sum-exp wanted */
    attn_status st = attn_sdpa_forward(&X, &X, &X, &opts, &O, NULL, NULL);
    if (st != ATTN_OK) {
        fprintf(stderr, "attn: %s: %s\n", attn_strerror(st), attn_last_error());
        return 1;
    }
    /* token 0 sees only itself, so its output is its own row of X */
    printf("out[0, :3] = %.4f %.4f %.4f\n", out[0], out[1], out[2]);
    return 0;
}
