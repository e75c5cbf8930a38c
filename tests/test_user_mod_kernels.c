/* User functions in the other entry points: attn_sdpa_weight_tiles (the
 * tiles a callback gets) and attn_sdpa_cached (the decode kernel and its
 * reference) against attn_sdpa_forward's reference, with user score_mod
 * and mask_mod, and their errors there. Helpers: user_mod_util.h. */
#include "user_mod_util.h"

/* ---- attn_sdpa_weight_tiles ------------------------------------------------ */

typedef struct {
    float *w;
    int64_t Lq, Lk;
} tiles_ctx;

static int take_tile(void *user, int64_t b, int64_t h, int64_t q0, int64_t nq,
                     int64_t k0, int64_t nk, const float *w, int64_t ldw) {
    tiles_ctx *t = user;
    (void)b;
    for (int64_t r = 0; r < nq; r++)
        for (int64_t c = 0; c < nk; c++)
            t->w[(h * t->Lq + q0 + r) * t->Lk + k0 + c] = w[r * ldw + c];
    return 0;
}

/* The weight tiles under a user causal mask (with a block mask) and a user
 * ALiBi are the built-ins' weights; a NaN stops them with the error. */
static void test_weight_tiles(void) {
    enum { H = 2, L = 40, D = 4 };
    prob p;
    prob_make(&p, 1, H, H, L, L, D, NULL, 17);
    double slopes[H] = {0.4, 0.2};
    alibi_ctx ac = {slopes, 0, 0, L, L};
    causal_ctx cc = {.Lq = L, .Lk = L};
    uint8_t cls[16];
    attn_block_mask bm;
    CHECK_STATUS(
        attn_block_mask_build(&bm, u_causal, &cc, 1, 1, L, L, 16, 16, cls, 16),
        ATTN_OK);
    attn_sdpa_opts us, bi;
    attn_sdpa_opts_init(&us);
    us.mask.score_mod = u_alibi;
    us.mask.score_ctx = &ac;
    us.mask.mask_mod = u_causal;
    us.mask.mask_ctx = &cc;
    us.mask.block_mask = &bm;
    attn_sdpa_opts_init(&bi);
    bi.mask.causal = 1;
    bi.mask.alibi = ATTN_ALIBI_CAUSAL;
    bi.mask.alibi_slopes = slopes;
    bi.mask.n_alibi_slopes = H;
    attn__flash_bq_override = attn__flash_bk_override = 16;
    result ru, rb;
    run(&p, &us, ATTN_IMPL_FLASH, 0, &ru);
    run(&p, &bi, ATTN_IMPL_FLASH, 0, &rb);
    attn_tensor Q = attn_tensor_4d(p.qf, ATTN_F32, 1, H, L, D);
    attn_tensor K = attn_tensor_4d(p.kf, ATTN_F32, 1, H, L, D);
    tiles_ctx t = {zalloc((size_t)H * L * L * 4), L, L};
    CHECK_STATUS(attn_sdpa_weight_tiles(&Q, &K, ru.lse, &us, take_tile, &t),
                 ATTN_OK);
    double e = 0;
    for (int x = 0; x < H * L * L; x++) e = fmax(e, fabs(t.w[x] - rb.w[x]));
    CHECK_MSG(e < 1e-5, "weight tiles: user vs built-in %g", e);
    bad_ctx bc = {.mode = 0, .b = 0, .h = 1, .i = 30, .j = 5};
    us.mask.score_mod = u_bad;
    us.mask.score_ctx = &bc;
    CHECK_STATUS(attn_sdpa_weight_tiles(&Q, &K, ru.lse, &us, take_tile, &t),
                 ATTN_E_NONFINITE);
    attn__flash_bq_override = attn__flash_bk_override = 0;
    free(t.w);
    result_free(&ru), result_free(&rb);
    prob_free(&p);
}

/* ---- the decode kernel ----------------------------------------------------- */

/* A striped mask: key j hidden when j % 3 == 1, unless it is one of the
 * 40 first keys. */
static int u_stripes(void *ctx, int64_t b, int64_t h, int64_t i, int64_t j0,
                     int64_t n, uint8_t *keep) {
    (void)ctx, (void)b, (void)h, (void)i;
    for (int64_t t = 0; t < n; t++)
        if ((j0 + t) % 3 == 1 && j0 + t >= 40) keep[t] = 0;
    return 0;
}

/* attn_sdpa_cached (kernel and its reference) with user functions against
 * attn_sdpa_forward's reference over the same keys. */
static void test_decode(void) {
    enum { B = 2, HK = 2, H = 4, D = 8, CAP = 300, LQ = 3 };
    const int64_t lens[B] = {290, 37};
    float *k = calloc((size_t)B * HK * CAP * D, 4),
          *v = calloc((size_t)B * HK * CAP * D, 4);
    float q[B * H * LQ * D], o1[B * H * LQ * D], o2[B * H * LQ * D],
        o3[B * H * LQ * D];
    float l1[B * H * LQ], l2[B * H * LQ], l3[B * H * LQ];
    unsigned long long s = 31;
    for (int i = 0; i < B * HK * CAP * D; i++) {
        k[i] = (float)(2 * test_rand(&s));
        v[i] = (float)test_rand(&s);
    }
    for (int i = 0; i < B * H * LQ * D; i++) q[i] = (float)(2 * test_rand(&s));
    attn_kv_cache_config cfg;
    attn_kv_cache_config_init(&cfg);
    cfg.batch = B;
    cfg.kv_heads = HK;
    cfg.capacity = CAP;
    cfg.head_dim = D;
    attn_kv_cache *cache = NULL;
    CHECK_STATUS(attn_kv_cache_create(&cfg, &cache), ATTN_OK);
    attn_tensor K = attn_tensor_4d(k, ATTN_F32, B, HK, CAP, D);
    attn_tensor V = attn_tensor_4d(v, ATTN_F32, B, HK, CAP, D);
    CHECK_STATUS(attn_kv_cache_append(cache, &K, &V, lens), ATTN_OK);
    attn_tensor Q = attn_tensor_4d(q, ATTN_F32, B, H, LQ, D);
    attn_tensor O1 = attn_tensor_4d(o1, ATTN_F32, B, H, LQ, D);
    attn_tensor O2 = attn_tensor_4d(o2, ATTN_F32, B, H, LQ, D);
    attn_tensor O3 = attn_tensor_4d(o3, ATTN_F32, B, H, LQ, D);
    double cap = 1.5;
    attn_sdpa_opts op;
    attn_sdpa_opts_init(&op);
    op.mask.causal = 1;
    op.mask.align = ATTN_ALIGN_BOTTOM_RIGHT;
    op.mask.mask_mod = u_stripes;
    op.mask.score_mod = u_cap;
    op.mask.score_ctx = &cap;
    CHECK_STATUS(attn_sdpa_cached(&Q, cache, &op, &O1, l1), ATTN_OK);
    attn_sdpa_opts rf = op;
    rf.impl = ATTN_IMPL_REF;
    CHECK_STATUS(attn_sdpa_cached(&Q, cache, &rf, &O2, l2), ATTN_OK);
    rf.mask.key_lengths = lens;
    CHECK_STATUS(attn_sdpa_forward(&Q, &K, &V, &rf, &O3, NULL, l3), ATTN_OK);
    double e1 = 0, e2 = 0, el = 0;
    for (int i = 0; i < B * H * LQ * D; i++) {
        e1 = fmax(e1, fabs(o1[i] - o3[i]));
        e2 = fmax(e2, fabs(o2[i] - o3[i]));
    }
    for (int i = 0; i < B * H * LQ; i++)
        el = fmax(el, fmax(fabs(l1[i] - l3[i]), fabs(l2[i] - l3[i])));
    CHECK_MSG(e1 < 2e-5 && e2 < 1e-6 && el < 1e-4,
              "decode: kernel %g, reference %g, lse %g", e1, e2, el);
    /* the same without the user functions differs (they did something) */
    attn_sdpa_opts plain = op;
    plain.mask.mask_mod = NULL;
    plain.mask.score_mod = NULL;
    CHECK_STATUS(attn_sdpa_cached(&Q, cache, &plain, &O2, l2), ATTN_OK);
    double d = 0;
    for (int i = 0; i < B * H * LQ * D; i++) d = fmax(d, fabs(o1[i] - o2[i]));
    CHECK(d > 1e-3);
    /* errors: a NaN, a status, a block mask */
    bad_ctx bc = {.mode = 0, .b = 1, .h = 2, .i = 1, .j = 20};
    op.mask.score_mod = u_bad;
    op.mask.score_ctx = &bc;
    for (int impl = 0; impl <= 1; impl++) {
        op.impl = impl ? ATTN_IMPL_REF : ATTN_IMPL_AUTO;
        CHECK_STATUS(attn_sdpa_cached(&Q, cache, &op, &O1, l1),
                     ATTN_E_NONFINITE);
        CHECK_MSG(strstr(attn_last_error(), "(1, 2, 1, 20)") != NULL,
                  "message: %s", attn_last_error());
    }
    bc.mode = 1;
    bc.rc = ATTN_E_IO;
    CHECK_STATUS(attn_sdpa_cached(&Q, cache, &op, &O1, l1), ATTN_E_IO);
    op.impl = ATTN_IMPL_AUTO;
    CHECK_STATUS(attn_sdpa_cached(&Q, cache, &op, &O1, l1), ATTN_E_IO);
    causal_ctx cc = {.Lq = LQ, .Lk = CAP};
    uint8_t cls[4];
    attn_block_mask bm;
    CHECK_STATUS(attn_block_mask_build(&bm, u_causal, &cc, 1, 1, LQ, CAP, 4,
                                       128, cls, 4),
                 ATTN_OK);
    op.mask.score_mod = NULL;
    op.mask.mask_mod = u_causal;
    op.mask.mask_ctx = &cc;
    op.mask.block_mask = &bm;
    CHECK_STATUS(attn_sdpa_cached(&Q, cache, &op, &O1, l1), ATTN_E_UNSUPPORTED);
    attn_kv_cache_free(cache);
    free(k);
    free(v);
}

int main(void) {
    test_weight_tiles();
    test_decode();
    return check_done("test_user_mod_kernels");
}
