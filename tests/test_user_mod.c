/* User functions of attn_mask (score_mod, mask_mod) and block masks, and
 * the flash backward's dbias with soft-capping: a user score_mod that
 * reproduces ALiBi and a user mask_mod that reproduces causal give the
 * built-ins' results (reference and flash, forward and backward, with and
 * without a block mask); the block mask's classes and the calls the
 * kernels make (none inside FULL or EMPTY blocks); a mask that hides
 * everything; errors from the functions (NaN, a nonzero status) and from
 * bad block masks; bitwise equality over thread counts; a gradient check
 * in double of a non-additive score_mod through the reference; dbias with
 * soft-capping and with a score_mod, flash against the reference. Sizes
 * 1, 3, 17, 129, Lq != Lk, GQA. */
#include "user_mod_util.h"

static void test_alibi(void) {
    static const int sizes[][2] = {{1, 1},  {3, 3},     {17, 17}, {17, 5},
                                   {5, 17}, {129, 129}, {33, 70}};
    unsigned long long seed = 5;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int combo = 0; combo < 3; combo++) {
            const int Lq = sizes[s][0], Lk = sizes[s][1];
            const int64_t full[4] = {2, 4, Lq, Lk};
            prob p;
            prob_make(&p, 2, 4, combo == 1 ? 2 : 4, Lq, Lk, combo ? 8 : 5,
                      combo == 2 ? full : NULL, seed++);
            double slopes[4] = {0.5, 0.25, 0.125, 0.0625};
            alibi_ctx ac = {slopes, combo == 1, combo == 2, Lq, Lk};
            attn_sdpa_opts bi, us;
            attn_sdpa_opts_init(&bi);
            bi.mask.causal = combo != 1;
            bi.mask.align =
                combo == 2 ? ATTN_ALIGN_BOTTOM_RIGHT : ATTN_ALIGN_TOP_LEFT;
            us = bi;
            bi.mask.alibi =
                combo == 1 ? ATTN_ALIBI_SYMMETRIC : ATTN_ALIBI_CAUSAL;
            bi.mask.alibi_slopes = slopes;
            bi.mask.n_alibi_slopes = 4;
            us.mask.score_mod = u_alibi;
            us.mask.score_ctx = &ac;
            result rb, ru, fb, fu;
            run(&p, &bi, ATTN_IMPL_REF, 0, &rb);
            run(&p, &us, ATTN_IMPL_REF, 0, &ru);
            run(&p, &bi, ATTN_IMPL_FLASH, 0, &fb);
            run(&p, &us, ATTN_IMPL_FLASH, 0, &fu);
            agree(&p, &ru, &rb, 1e-12, 1e-6, "ref: user alibi vs built-in");
            agree(&p, &fu, &fb, 1e-5, 1e-5, "flash: user alibi vs built-in");
            agree(&p, &fu, &ru, floor_f32(&p), 1e-4 * (1 + sqrt((double)Lk)),
                  "user alibi: flash vs ref");
            result_free(&rb), result_free(&ru), result_free(&fb);
            result_free(&fu);
            prob_free(&p);
        }
}

/* ---- a user causal mask gives the built-in's results -------------------- */

/* Brute-force classes of u_causal's blocks against bm. */
static void check_classes(const attn_block_mask *bm, causal_ctx *cc) {
    int bad = 0;
    for (int64_t bi = 0; bi < bm->nq; bi++)
        for (int64_t bj = 0; bj < bm->nk; bj++) {
            int any = 0, all = 1;
            for (int64_t i = bi * bm->block_q;
                 i < (bi + 1) * bm->block_q && i < bm->Lq; i++)
                for (int64_t j = bj * bm->block_k;
                     j < (bj + 1) * bm->block_k && j < bm->Lk; j++) {
                    int kept = j <= i + (cc->br ? cc->Lk - cc->Lq : 0);
                    any |= kept;
                    all &= kept;
                }
            int want = !any  ? ATTN_BLOCK_EMPTY
                       : all ? ATTN_BLOCK_FULL
                             : ATTN_BLOCK_PARTIAL;
            bad += bm->cls[bi * bm->nk + bj] != want;
        }
    CHECK_MSG(bad == 0, "%d block classes wrong (%lld x %lld blocks)", bad,
              (long long)bm->nq, (long long)bm->nk);
}

static void test_causal(void) {
    static const int sizes[][2] = {{1, 1},  {3, 3},     {17, 17}, {17, 5},
                                   {5, 17}, {129, 129}, {33, 70}};
    static const int64_t blocks[][2] = {{8, 8}, {5, 7}, {16, 32}};
    static const int64_t tiles[][2] = {{0, 0}, {16, 16}, {32, 16}};
    unsigned long long seed = 50;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int combo = 0; combo < 3; combo++) {
            const int Lq = sizes[s][0], Lk = sizes[s][1];
            const int64_t bcast[4] = {1, 4, 1, Lk};
            prob p;
            prob_make(&p, 2, 4, combo == 1 ? 1 : 4, Lq, Lk, 4 + combo,
                      combo == 1 ? bcast : NULL, seed++);
            causal_ctx cc = {.br = combo == 2, .Lq = Lq, .Lk = Lk};
            attn_sdpa_opts bi, us;
            attn_sdpa_opts_init(&bi);
            bi.mask.align =
                combo == 2 ? ATTN_ALIGN_BOTTOM_RIGHT : ATTN_ALIGN_TOP_LEFT;
            bi.mask.window_left = combo == 0 ? 6 : -1; /* AND with a window */
            us = bi;
            bi.mask.causal = 1;
            us.mask.mask_mod = u_causal;
            us.mask.mask_ctx = &cc;
            attn_block_mask bm;
            int64_t n;
            const int64_t *bl = blocks[combo];
            CHECK_STATUS(attn_block_mask_size(1, 1, Lq, Lk, bl[0], bl[1], &n),
                         ATTN_OK);
            uint8_t *cls = zalloc((size_t)n);
            CHECK_STATUS(attn_block_mask_build(&bm, u_causal, &cc, 1, 1, Lq, Lk,
                                               bl[0], bl[1], cls, n),
                         ATTN_OK);
            CHECK(atomic_load(&cc.elems) == (long long)Lq * Lk);
            check_classes(&bm, &cc);
            attn_sdpa_opts ub = us;
            ub.mask.block_mask = &bm;
            attn__flash_bq_override = tiles[combo][0];
            attn__flash_bk_override = tiles[combo][1];
            result rb, ru, fb, fu, fbm;
            run(&p, &bi, ATTN_IMPL_REF, 0, &rb);
            run(&p, &us, ATTN_IMPL_REF, 0, &ru);
            run(&p, &bi, ATTN_IMPL_FLASH, 0, &fb);
            run(&p, &us, ATTN_IMPL_FLASH, 0, &fu);
            cc.bm = &bm;
            atomic_store(&cc.outside, 0);
            run(&p, &ub, ATTN_IMPL_FLASH, 0, &fbm);
            CHECK_MSG(atomic_load(&cc.outside) == 0,
                      "%lld keys asked outside PARTIAL blocks",
                      (long long)atomic_load(&cc.outside));
            cc.bm = NULL;
            attn__flash_bq_override = attn__flash_bk_override = 0;
            agree(&p, &ru, &rb, 1e-12, 1e-6, "ref: user causal vs built-in");
            agree(&p, &fu, &fb, 1e-5, 1e-5, "flash: user causal vs built-in");
            agree(&p, &fbm, &fb, 1e-5, 1e-5,
                  "flash: user causal + block mask vs built-in");
            agree(&p, &fbm, &rb, floor_f32(&p), 1e-4 * (1 + sqrt((double)Lk)),
                  "user causal + block mask: flash vs ref");
            result_free(&rb), result_free(&ru), result_free(&fb);
            result_free(&fu), result_free(&fbm);
            free(cls);
            prob_free(&p);
        }
}

/* The forward asks mask_mod only inside PARTIAL blocks, for each row once
 * per such block: exactly sum over rows of the PARTIAL blocks' widths;
 * without a block mask, every pair once. */
static void test_calls(void) {
    static const int64_t cases[][6] = {
        /* Lq, Lk, block_q, block_k, tile q, tile k */
        {64, 64, 16, 16, 0, 0},
        {37, 37, 8, 5, 16, 16},
        {50, 90, 7, 16, 32, 64},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int64_t *x = cases[c];
        const int Lq = (int)x[0], Lk = (int)x[1];
        prob p;
        prob_make(&p, 1, 1, 1, Lq, Lk, 4, NULL, 77 + c);
        causal_ctx cc = {.br = 1, .Lq = Lq, .Lk = Lk};
        int64_t n;
        CHECK_STATUS(attn_block_mask_size(1, 1, Lq, Lk, x[2], x[3], &n),
                     ATTN_OK);
        uint8_t *cls = zalloc((size_t)n);
        attn_block_mask bm;
        CHECK_STATUS(attn_block_mask_build(&bm, u_causal, &cc, 1, 1, Lq, Lk,
                                           x[2], x[3], cls, n),
                     ATTN_OK);
        long long want = 0, partial = 0, full = 0;
        for (int64_t i = 0; i < Lq; i++)
            for (int64_t bj = 0; bj < bm.nk; bj++) {
                uint8_t k = cls[(i / x[2]) * bm.nk + bj];
                int64_t w = Lk - bj * x[3] < x[3] ? Lk - bj * x[3] : x[3];
                if (k == ATTN_BLOCK_PARTIAL) want += w, partial++;
                if (k == ATTN_BLOCK_FULL) full++;
            }
        CHECK(partial > 0 && full > 0);
        attn_sdpa_opts o;
        attn_sdpa_opts_init(&o);
        o.impl = ATTN_IMPL_FLASH;
        o.threads = 1;
        o.mask.mask_mod = u_causal;
        o.mask.mask_ctx = &cc;
        float *out = zalloc((size_t)Lq * 4 * 4);
        attn_tensor Q = attn_tensor_4d(p.qf, ATTN_F32, 1, 1, Lq, 4);
        attn_tensor K = attn_tensor_4d(p.kf, ATTN_F32, 1, 1, Lk, 4);
        attn_tensor O = attn_tensor_4d(out, ATTN_F32, 1, 1, Lq, 4);
        attn__flash_bq_override = x[4];
        attn__flash_bk_override = x[5];
        atomic_store(&cc.elems, 0);
        CHECK_STATUS(attn_sdpa_forward(&Q, &K, &K, &o, &O, NULL, NULL),
                     ATTN_OK);
        CHECK_MSG(atomic_load(&cc.elems) == (long long)Lq * Lk,
                  "no block mask: %lld keys asked, %lld pairs",
                  (long long)atomic_load(&cc.elems), (long long)Lq * Lk);
        o.mask.block_mask = &bm;
        atomic_store(&cc.elems, 0);
        CHECK_STATUS(attn_sdpa_forward(&Q, &K, &K, &o, &O, NULL, NULL),
                     ATTN_OK);
        CHECK_MSG(atomic_load(&cc.elems) == want,
                  "block mask: %lld keys asked, %lld in PARTIAL blocks",
                  (long long)atomic_load(&cc.elems), want);
        attn__flash_bq_override = attn__flash_bk_override = 0;
        printf("calls: L %d/%d blocks %lldx%lld: %lld of %lld pairs asked\n",
               Lq, Lk, (long long)x[2], (long long)x[3], want,
               (long long)Lq * Lk);
        free(out);
        free(cls);
        prob_free(&p);
    }
}

/* ---- a mask that hides everything ---------------------------------------- */

static int all_zero(const double *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (x[i] != 0.0) return 0;
    return 1;
}

static void test_hide_all(void) {
    const int64_t bsh[4] = {1, 1, 17, 5};
    prob p;
    prob_make(&p, 1, 2, 1, 17, 5, 3, bsh, 9);
    int64_t n;
    CHECK_STATUS(attn_block_mask_size(1, 1, 17, 5, 4, 4, &n), ATTN_OK);
    uint8_t *cls = zalloc((size_t)n);
    attn_block_mask bm;
    CHECK_STATUS(
        attn_block_mask_build(&bm, u_none, NULL, 1, 1, 17, 5, 4, 4, cls, n),
        ATTN_OK);
    for (int64_t x = 0; x < n; x++) CHECK(cls[x] == ATTN_BLOCK_EMPTY);
    for (int with_bm = 0; with_bm < 2; with_bm++)
        for (int impl = 1; impl <= 2; impl++) {
            attn_sdpa_opts o;
            attn_sdpa_opts_init(&o);
            o.mask.mask_mod = u_none;
            o.mask.block_mask = with_bm ? &bm : NULL;
            result r;
            run(&p, &o, (attn_impl)impl, 0, &r);
            CHECK_STATUS(r.fst, ATTN_OK);
            CHECK_STATUS(r.bst, ATTN_OK);
            const size_t no = 2 * 17 * 3, nk = 5 * 3;
            CHECK(all_zero(r.out, no) && all_zero(r.w, 2 * 17 * 5));
            CHECK(all_zero(r.dq, no) && all_zero(r.dk, nk) &&
                  all_zero(r.dv, nk) && all_zero(r.db, 17 * 5));
            for (int i = 0; i < 2 * 17; i++) CHECK(r.lse[i] == -INFINITY);
            result_free(&r);
        }
    free(cls);
    prob_free(&p);
}

/* ---- errors --------------------------------------------------------------- */

static attn_status fwd(const prob *p, attn_sdpa_opts *o, int with_w) {
    float *out = zalloc((size_t)p->B * p->H * p->Lq * p->D * 4);
    float *w = zalloc((size_t)p->B * p->H * p->Lq * p->Lk * 4);
    float *lse = zalloc((size_t)p->B * p->H * p->Lq * 4);
    attn_tensor Q = attn_tensor_4d(p->qf, ATTN_F32, p->B, p->H, p->Lq, p->D);
    attn_tensor K = attn_tensor_4d(p->kf, ATTN_F32, p->B, p->Hkv, p->Lk, p->D);
    attn_tensor O = attn_tensor_4d(out, ATTN_F32, p->B, p->H, p->Lq, p->D);
    attn_tensor W = attn_tensor_4d(w, ATTN_F32, p->B, p->H, p->Lq, p->Lk);
    attn_status st =
        attn_sdpa_forward(&Q, &K, &K, o, &O, with_w ? &W : NULL, lse);
    free(out), free(w), free(lse);
    return st;
}

static void test_errors(void) {
    prob p;
    prob_make(&p, 2, 2, 2, 6, 9, 4, NULL, 3);
    attn_sdpa_opts o;
    /* a NaN from score_mod, in every kernel, forward and backward */
    bad_ctx bc = {.mode = 0, .b = 1, .h = 1, .i = 2, .j = 3};
    for (int impl = 1; impl <= 2; impl++)
        for (int bwd = 0; bwd < 2; bwd++) {
            attn_sdpa_opts_init(&o);
            o.mask.score_mod = u_bad;
            o.mask.score_ctx = &bc;
            bc.bwd = bwd;
            result r;
            run(&p, &o, (attn_impl)impl, 0, &r);
            CHECK_STATUS(bwd ? r.bst : r.fst, ATTN_E_NONFINITE);
            if (bwd) CHECK_STATUS(r.fst, ATTN_OK);
            CHECK_MSG(strstr(attn_last_error(), "score_mod") &&
                          strstr(attn_last_error(), "(1, 1, 2, 3)"),
                      "message: %s", attn_last_error());
            result_free(&r);
        }
    attn_sdpa_opts_init(&o);
    o.mask.score_mod = u_bad;
    o.mask.score_ctx = &bc;
    bc.bwd = 0;
    o.impl = ATTN_IMPL_FLASH;
    CHECK_STATUS(fwd(&p, &o, 1), ATTN_E_NONFINITE);
    /* a status from the function is returned; others become INVALID */
    bc.mode = 1;
    bc.rc = ATTN_E_FORMAT;
    for (int impl = 1; impl <= 2; impl++) {
        o.impl = (attn_impl)impl;
        CHECK_STATUS(fwd(&p, &o, 0), ATTN_E_FORMAT);
        CHECK_MSG(strstr(attn_last_error(), "score_mod returned 7"),
                  "message: %s", attn_last_error());
    }
    bc.rc = 42;
    CHECK_STATUS(fwd(&p, &o, 0), ATTN_E_INVALID);
    /* a finite score past f32: an error for the flash kernel only */
    bc.mode = 2;
    o.impl = ATTN_IMPL_FLASH;
    CHECK_STATUS(fwd(&p, &o, 0), ATTN_E_NONFINITE);
    CHECK(strstr(attn_last_error(), "1e+300") != NULL);
    attn_sdpa_opts_init(&o);
    int mrc = ATTN_E_SHAPE;
    o.mask.mask_mod = u_mask_bad;
    o.mask.mask_ctx = &mrc;
    for (int impl = 1; impl <= 2; impl++) {
        o.impl = (attn_impl)impl;
        CHECK_STATUS(fwd(&p, &o, impl == 2), ATTN_E_SHAPE);
        CHECK_MSG(strstr(attn_last_error(), "mask_mod returned 2"),
                  "message: %s", attn_last_error());
    }
    /* a failing function while the block mask is built */
    uint8_t cls[64];
    attn_block_mask bm;
    CHECK_STATUS(
        attn_block_mask_build(&bm, u_mask_bad, &mrc, 1, 1, 6, 9, 3, 3, cls, 64),
        ATTN_E_SHAPE);
    /* block masks that do not fit */
    causal_ctx cc = {.Lq = 6, .Lk = 9};
    CHECK_STATUS(
        attn_block_mask_build(NULL, u_causal, &cc, 1, 1, 6, 9, 3, 3, cls, 64),
        ATTN_E_INVALID);
    CHECK_STATUS(
        attn_block_mask_build(&bm, u_causal, &cc, 1, 1, 6, 9, 3, 0, cls, 64),
        ATTN_E_INVALID);
    CHECK_STATUS(
        attn_block_mask_build(&bm, u_causal, &cc, 2, 2, 6, 9, 1, 1, cls, 64),
        ATTN_E_SHAPE);
    CHECK(strstr(attn_last_error(), "n_cls") != NULL);
    CHECK_STATUS(
        attn_block_mask_build(&bm, u_causal, &cc, 2, 1, 6, 9, 3, 3, cls, 64),
        ATTN_OK);
    attn_mask m;
    attn_mask_init(&m);
    m.block_mask = &bm;
    CHECK_STATUS(attn_mask_check(&m, 2, 2, 6, 9), ATTN_E_INVALID);
    m.mask_mod = u_none;
    CHECK_STATUS(attn_mask_check(&m, 2, 2, 6, 9), ATTN_E_INVALID);
    m.mask_mod = u_causal;
    CHECK_STATUS(attn_mask_check(&m, 2, 2, 6, 9), ATTN_E_INVALID); /* ctx */
    m.mask_ctx = &cc;
    CHECK_STATUS(attn_mask_check(&m, 2, 2, 6, 9), ATTN_OK);
    CHECK_STATUS(attn_mask_check(&m, 3, 2, 6, 9), ATTN_E_SHAPE);
    CHECK_STATUS(attn_mask_check(&m, 2, 2, 7, 9), ATTN_E_SHAPE);
    CHECK(strstr(attn_last_error(), "(2, 1, 6, 9)") != NULL);
    CHECK_STATUS(attn_mask_check(&m, 2, 2, 6, 8), ATTN_E_SHAPE);
    attn_block_mask bad = bm;
    bad.nk = 2;
    m.block_mask = &bad;
    CHECK_STATUS(attn_mask_check(&m, 2, 2, 6, 9), ATTN_E_SHAPE);
    bad = bm;
    bad.cls = NULL;
    CHECK_STATUS(attn_mask_check(&m, 2, 2, 6, 9), ATTN_E_INVALID);
    int64_t n;
    CHECK_STATUS(attn_block_mask_size(1, 1, 0, 5, 1, 1, &n), ATTN_E_INVALID);
    CHECK_STATUS(attn_block_mask_size(1, 1, 5, 5, 1, 1, NULL), ATTN_E_INVALID);
    CHECK_STATUS(attn_block_mask_size(INT64_MAX / 2, 4, 5, 5, 1, 1, &n),
                 ATTN_E_NOMEM);
    /* attn_mask_visible asks mask_mod about the one pair */
    attn_mask_init(&m);
    m.mask_mod = u_causal;
    m.mask_ctx = &cc;
    CHECK(attn_mask_visible(&m, 0, 0, 2, 2, 6, 9) == 1);
    CHECK(attn_mask_visible(&m, 0, 0, 2, 3, 6, 9) == 0);
    /* additive attention cannot call them: refused, named */
    attn_additive_config ac = {4, 4, 4, 3, 1, 0};
    float x[64] = {0}, ws[4096], out[64];
    attn_sdpa_opts_init(&o);
    o.mask.mask_mod = u_none;
    CHECK_STATUS(
        attn_additive_forward(&ac, x, 1, 2, 2, x, x, x, &o, out, NULL, ws),
        ATTN_E_UNSUPPORTED);
    CHECK(strstr(attn_last_error(), "mask_mod") != NULL);
    prob_free(&p);
}

/* ---- thread counts -------------------------------------------------------- */

static void test_threads(void) {
    const int64_t bsh[4] = {2, 1, 129, 70};
    prob p;
    prob_make(&p, 2, 4, 2, 129, 70, 8, bsh, 21);
    double slopes[4] = {0.3, 0.2, 0.1, 0.05};
    alibi_ctx ac = {slopes, 1, 0, 129, 70};
    causal_ctx cc = {.br = 1, .Lq = 129, .Lk = 70};
    int64_t n;
    CHECK_STATUS(attn_block_mask_size(1, 1, 129, 70, 16, 8, &n), ATTN_OK);
    uint8_t *cls = zalloc((size_t)n);
    attn_block_mask bm;
    CHECK_STATUS(
        attn_block_mask_build(&bm, u_causal, &cc, 1, 1, 129, 70, 16, 8, cls, n),
        ATTN_OK);
    attn_sdpa_opts o;
    attn_sdpa_opts_init(&o);
    o.mask.score_mod = u_alibi;
    o.mask.score_ctx = &ac;
    o.mask.mask_mod = u_causal;
    o.mask.mask_ctx = &cc;
    o.mask.block_mask = &bm;
    o.mask.softcap = 3.0;
    attn__flash_bq_override = 32;
    attn__flash_bk_override = 16;
    result r[3];
    for (int t = 0; t < 3; t++) run(&p, &o, ATTN_IMPL_FLASH, t + 1, &r[t]);
    attn__flash_bq_override = attn__flash_bk_override = 0;
    const size_t no = (size_t)2 * 4 * 129 * 8, nk = (size_t)2 * 2 * 70 * 8;
    const size_t nw = (size_t)2 * 4 * 129 * 70, nb = (size_t)2 * 129 * 70;
    for (int t = 1; t < 3; t++) {
        CHECK_STATUS(r[t].bst, ATTN_OK);
        CHECK(memcmp(r[t].out, r[0].out, no * 8) == 0);
        CHECK(memcmp(r[t].w, r[0].w, nw * 8) == 0);
        CHECK(memcmp(r[t].lse, r[0].lse, no / 8 * 4) == 0);
        CHECK(memcmp(r[t].dq, r[0].dq, no * 8) == 0);
        CHECK(memcmp(r[t].dk, r[0].dk, nk * 8) == 0);
        CHECK(memcmp(r[t].dv, r[0].dv, nk * 8) == 0);
        CHECK(memcmp(r[t].db, r[0].db, nb * 8) == 0);
    }
    /* and they agree with the reference */
    result rr;
    run(&p, &o, ATTN_IMPL_REF, 0, &rr);
    agree(&p, &r[0], &rr, floor_f32(&p), 1e-4 * (1 + sqrt(70.0)),
          "threads case: flash vs ref");
    for (int t = 0; t < 3; t++) result_free(&r[t]);
    result_free(&rr);
    free(cls);
    prob_free(&p);
}

/* ---- a non-additive score_mod: gradient check in double -------------------- */

static void test_gradcheck(void) {
    const int64_t bsh[4] = {1, 2, 5, 7};
    prob p;
    prob_make(&p, 1, 2, 1, 5, 7, 3, bsh, 1234);
    for (size_t i = 0; i < 5 * 2 * 3; i++) p.q[i] *= 2; /* the cap bites */
    double cap = 1.3;
    causal_ctx cc = {.br = 1, .Lq = 5, .Lk = 7};
    attn_sdpa_opts o;
    attn_sdpa_opts_init(&o);
    o.impl = ATTN_IMPL_REF;
    o.mask.score_mod = u_cap;
    o.mask.score_ctx = &cap;
    o.mask.mask_mod = u_causal;
    o.mask.mask_ctx = &cc;
    o.mask.softcap = 2.0; /* the built-in cap first, the user's after bias */
    result r;
    run(&p, &o, ATTN_IMPL_REF, 0, &r);
    CHECK_STATUS(r.bst, ATTN_OK);
    double out[2 * 5 * 3];
    attn_tensor Q = attn_tensor_4d(p.q, ATTN_F64, 1, 2, 5, 3);
    attn_tensor K = attn_tensor_4d(p.k, ATTN_F64, 1, 1, 7, 3);
    attn_tensor V = attn_tensor_4d(p.v, ATTN_F64, 1, 1, 7, 3);
    attn_tensor O = attn_tensor_4d(out, ATTN_F64, 1, 2, 5, 3);
    attn_tensor Bt = attn_tensor_4d(p.bias, ATTN_F64, 1, 2, 5, 7);
    o.mask.bias = &Bt;
    double *xs[4] = {p.q, p.k, p.v, p.bias};
    const double *gr[4] = {r.dq, r.dk, r.dv, r.db};
    const int ns[4] = {30, 21, 21, 70};
    const double h = 1e-6;
    double worst = 0;
    for (int a = 0; a < 4; a++)
        for (int t = 0; t < ns[a]; t++) {
            double keep = xs[a][t], l[2];
            for (int sgn = 0; sgn < 2; sgn++) {
                xs[a][t] = keep + (sgn ? -h : h);
                CHECK_STATUS(attn_sdpa_forward(&Q, &K, &V, &o, &O, NULL, NULL),
                             ATTN_OK);
                l[sgn] = 0;
                for (int u = 0; u < 30; u++) l[sgn] += p.g[u] * out[u];
            }
            xs[a][t] = keep;
            double fd = (l[0] - l[1]) / (2 * h), e = fabs(fd - gr[a][t]);
            if (e > worst) worst = e;
            CHECK_MSG(e <= 1e-7 * (1 + fabs(fd)),
                      "grad %d[%d]: fd %.10g analytic %.10g", a, t, fd,
                      gr[a][t]);
        }
    printf("gradcheck user cap: worst %.3g\n", worst);
    result_free(&r);
    prob_free(&p);
}

/* ---- dbias with soft-capping (and a score_mod), flash against ref ---------- */

static void test_dbias_softcap(void) {
    static const int sizes[][2] = {
        {1, 1}, {3, 3}, {17, 5}, {129, 129}, {33, 70}};
    unsigned long long seed = 400;
    double ucap = 2.5;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int shape = 0; shape < 4; shape++) {
            const int Lq = sizes[s][0], Lk = sizes[s][1];
            const int64_t shapes[4][4] = {
                {2, 3, Lq, Lk}, {1, 3, 1, Lk}, {2, 1, Lq, Lk}, {1, 1, Lq, 1}};
            prob p;
            prob_make(&p, 2, 3, shape == 2 ? 1 : 3, Lq, Lk, 6, shapes[shape],
                      seed++);
            attn_sdpa_opts o;
            attn_sdpa_opts_init(&o);
            o.mask.softcap = 1.5 + shape;
            o.mask.causal = shape % 2;
            if (shape == 3) { /* and a user function on top */
                o.mask.score_mod = u_cap;
                o.mask.score_ctx = &ucap;
            }
            result rr, rf;
            run(&p, &o, ATTN_IMPL_REF, 0, &rr);
            run(&p, &o, ATTN_IMPL_FLASH, 0, &rf);
            agree(&p, &rf, &rr, floor_f32(&p) * sqrt(6.0),
                  1e-4 * (1 + sqrt((double)Lk)), "dbias + softcap");
            result_free(&rr), result_free(&rf);
            prob_free(&p);
        }
}

/* ---- a user soft-cap gives the built-in's results (no bias, no ALiBi) ----- */

static void test_user_cap(void) {
    prob p;
    prob_make(&p, 1, 2, 2, 17, 33, 8, NULL, 8);
    for (size_t i = 0; i < 2 * 17 * 8; i++) p.qf[i] *= 2, p.q[i] *= 2;
    double cap = 1.7;
    attn_sdpa_opts bi, us;
    attn_sdpa_opts_init(&bi);
    bi.mask.causal = 1;
    us = bi;
    bi.mask.softcap = cap;
    us.mask.score_mod = u_cap;
    us.mask.score_ctx = &cap;
    result rb, ru, fu;
    run(&p, &bi, ATTN_IMPL_REF, 0, &rb);
    run(&p, &us, ATTN_IMPL_REF, 0, &ru);
    run(&p, &us, ATTN_IMPL_FLASH, 0, &fu);
    agree(&p, &ru, &rb, 1e-12, 1e-6, "ref: user cap vs built-in");
    agree(&p, &fu, &rb, floor_f32(&p), 1e-4 * (1 + sqrt(33.0)),
          "user cap: flash vs ref");
    result_free(&rb), result_free(&ru), result_free(&fu);
    prob_free(&p);
}

int main(void) {
    test_alibi();
    test_causal();
    test_calls();
    test_hide_all();
    test_errors();
    test_threads();
    test_gradcheck();
    test_dbias_softcap();
    test_user_cap();
    return check_done("test_user_mod");
}
