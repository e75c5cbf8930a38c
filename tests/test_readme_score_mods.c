/* The C lines of docs/masks.md's "Soft-capping, ALiBi, sinks and documents"
 * section, compiled and run here (tests/cli_readme.py checks that the
 * page's block is a part of this file, character for character). */
#include "attn.h"
#include "check.h"

#include <stdint.h>

int main(void) {
    enum { H = 4, L = 6, D = 8 };
    static float q[H * L * D], o[H * L * D];
    for (int i = 0; i < H * L * D; i++) q[i] = (float)((i * 7 % 11) - 5) / 4;
    attn_tensor Q = attn_tensor_4d(q, ATTN_F32, 1, H, L, D);
    attn_tensor O = attn_tensor_4d(o, ATTN_F32, 1, H, L, D);
    double sinks[H] = {0.5, 0.0, -1.0, 2.0}, dsinks[H] = {0};
    float lse[H * L];
    attn_sdpa_opts opts;
    attn_sdpa_opts_init(&opts);
    opts.mask.causal = 1;
    /* README begin */
    opts.mask.softcap = 50.0;                  /* s = 50 tanh(s / 50) (Gemma 2) */
    opts.mask.alibi = ATTN_ALIBI_CAUSAL;       /* -slope_h (i - j), slopes from H */
    opts.mask.sinks = sinks;                   /* double sinks[H]: one logit per head */
    opts.mask.n_sinks = H;
    opts.mask.sinks_grad = dsinks;             /* double dsinks[H]: backward adds dL/dsinks */
    int64_t docs[L] = {0, 0, 0, 1, 1, 2};      /* packed: 3 documents */
    opts.mask.doc_q = docs;                    /* keys use the same ids (Lq == Lk) */
    opts.mask.n_doc_q = L;                     /* B * Lq */
    /* README end */
    CHECK_STATUS(attn_sdpa_forward(&Q, &Q, &Q, &opts, &O, NULL, lse), ATTN_OK);
    /* the first query of document 1 sees only itself and the sink: its
     * output is its own value times a weight in (0, 1) */
    for (int d = 0; d < D; d++)
        if (q[3 * D + d] != 0.0f) {
            double w = o[3 * D + d] / q[3 * D + d];
            CHECK(w > 0.0 && w < 1.0);
            CHECK_NEAR(w, o[3 * D] / q[3 * D], 1e-5);
        }
    return check_done("test_readme_score_mods");
}
