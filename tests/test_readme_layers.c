/* The C example of docs/layers.md, verbatim between the
 * markers (tests/cli_readme.py checks that), compiled and run: one
 * tutorial-sized encoder layer forward and backward. */
#include "attn.h"
#include "attn_layers.h"
#include "check.h"

#include <stdlib.h>

int main(void) {
    size_t nx = (size_t)32 * 100 * 512;
    float *x = malloc(sizeof(float) * nx), *y = malloc(sizeof(float) * nx);
    float *dy = malloc(sizeof(float) * nx), *dx = calloc(nx, sizeof(float));
    unsigned long long st = 1;
    for (size_t i = 0; i < nx; i++) {
        x[i] = (float)test_rand(&st);
        dy[i] = (float)test_rand(&st);
    }
    /* README BEGIN */
    attn_encoder_config cfg;
    attn_encoder_config_init(&cfg);              /* 1 layer, 512, 8 heads, 2048 */
    cfg.attention = ATTN_ATTENTION_ADDITIVE;     /* or ATTN_ATTENTION_DOT */
    float *params = malloc(sizeof(float) * attn_encoder_param_count(&cfg));
    float *grads = calloc(attn_encoder_param_count(&cfg), sizeof(float));
    attn_encoder_init(&cfg, params, 42);         /* Xavier-uniform, seed 42 */
    size_t n;
    attn_encoder_workspace_size(&cfg, 32, 100, &n);
    float *ws = malloc(sizeof(float) * n);       /* what backward needs */
    attn_layer_opts opts;
    attn_sdpa_opts_init(&opts);                  /* masks, dropout, threads */
    attn_encoder_forward(&cfg, params, 32, 100, x, &opts, y, NULL, ws);
    attn_encoder_backward(&cfg, params, 32, 100, x, &opts, dy, ws, grads, dx);
    /* README END */
    double gx = 0, gy = 0;
    for (size_t i = 0; i < nx; i++) {
        gx += fabs(dx[i]);
        gy += fabs(y[i]);
    }
    CHECK(gx > 0 && isfinite(gx) && gy > 0 && isfinite(gy));
    free(x); free(y); free(dy); free(dx); free(grads); free(params); free(ws);
    return check_done("test_readme_layers");
}
