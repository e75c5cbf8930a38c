/* The C code of docs/masks.md's "User score and mask functions",
 * compiled and run here (tests/cli_readme.py checks that the page's
 * block is the part of this file between its markers, character for
 * character): a user ALiBi and a user causal mask with a block mask give
 * the built-ins' results. */
#include "attn.h"
#include "check.h"

#include <math.h>
#include <stdint.h>

/* README begin */
/* score_mod: ALiBi by hand, on one row segment (keys j0 .. j0 + n - 1) */
static int my_alibi(void *ctx, int64_t b, int64_t h, int64_t i, int64_t j0,
                    int64_t n, double *score, double *dscore) {
    const double *slopes = ctx;
    (void)b;
    for (int64_t t = 0; t < n; t++) {
        score[t] -= slopes[h] * (double)(i - (j0 + t)); /* -inf stays -inf */
        if (dscore) dscore[t] = 1.0; /* backward: d(new) / d(old) */
    }
    return 0; /* nonzero: the call fails with this status */
}

/* mask_mod: causal by hand (keep[t] = 0 hides key j0 + t) */
static int my_causal(void *ctx, int64_t b, int64_t h, int64_t i, int64_t j0,
                     int64_t n, uint8_t *keep) {
    (void)ctx, (void)b, (void)h;
    for (int64_t t = 0; t < n; t++) keep[t] = j0 + t <= i;
    return 0;
}

static attn_status use_them(attn_sdpa_opts *opts, double *slopes, int64_t L,
                            attn_block_mask *bm, uint8_t *cls, int64_t n_cls) {
    opts->mask.score_mod = my_alibi;
    opts->mask.score_ctx = slopes;
    opts->mask.mask_mod = my_causal;
    /* once per mask: 64 x 64 blocks EMPTY / FULL / PARTIAL (B = H = 1:
     * the same for every entry and head); n_cls from attn_block_mask_size */
    attn_status st = attn_block_mask_build(bm, my_causal, NULL, 1, 1, L, L,
                                           64, 64, cls, n_cls);
    opts->mask.block_mask = bm; /* EMPTY tiles skipped, FULL ones not asked */
    return st;
}
/* README end */

int main(void) {
    enum { H = 4, L = 150, D = 8 };
    static float q[H * L * D], o1[H * L * D], o2[H * L * D];
    for (int i = 0; i < H * L * D; i++) q[i] = (float)((i * 7 % 11) - 5) / 4;
    attn_tensor Q = attn_tensor_4d(q, ATTN_F32, 1, H, L, D);
    attn_tensor O1 = attn_tensor_4d(o1, ATTN_F32, 1, H, L, D);
    attn_tensor O2 = attn_tensor_4d(o2, ATTN_F32, 1, H, L, D);
    double slopes[H];
    CHECK_STATUS(attn_alibi_slopes(H, slopes), ATTN_OK);
    attn_sdpa_opts user, builtin;
    attn_sdpa_opts_init(&user);
    attn_sdpa_opts_init(&builtin);
    int64_t n_cls;
    CHECK_STATUS(attn_block_mask_size(1, 1, L, L, 64, 64, &n_cls), ATTN_OK);
    uint8_t cls[9];
    CHECK(n_cls == 9);
    attn_block_mask bm;
    CHECK_STATUS(use_them(&user, slopes, L, &bm, cls, n_cls), ATTN_OK);
    CHECK(cls[0] == ATTN_BLOCK_PARTIAL && cls[1] == ATTN_BLOCK_EMPTY &&
          cls[3] == ATTN_BLOCK_FULL);
    builtin.mask.causal = 1;
    builtin.mask.alibi = ATTN_ALIBI_CAUSAL;
    CHECK_STATUS(attn_sdpa_forward(&Q, &Q, &Q, &user, &O1, NULL, NULL),
                 ATTN_OK);
    CHECK_STATUS(attn_sdpa_forward(&Q, &Q, &Q, &builtin, &O2, NULL, NULL),
                 ATTN_OK);
    double e = 0;
    for (int i = 0; i < H * L * D; i++) e = fmax(e, fabs(o1[i] - o2[i]));
    CHECK_MSG(e < 1e-5, "user vs built-in: %g", e);
    return check_done("test_readme_user_mods");
}
