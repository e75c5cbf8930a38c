/* Every mask kind alone and combined, through every kernel on this build:
 * masked weights are exactly 0, fully masked rows are exactly 0 with lse
 * -inf, look-ahead and padding equal attention over the truncated key set,
 * both causal alignments, broadcast masks, the tile classifier agrees with
 * the per-pair answer, and the convention builders. */
#include "attn.h"
#include "mask.h"
#include "sdpa_test_util.h"

#include <math.h>

static const attn_impl impls[] = {ATTN_IMPL_REF, ATTN_IMPL_AUTO};

/* Checks a run against the mask: invisible weights exactly 0, rows with no
 * visible key all zero with lse -inf, visible rows summing to 1. */
static void check_against_mask(const test_qkv *t, const attn_sdpa_opts *o,
                               const test_run *r, const char *what) {
    int bad_zero = 0, bad_row = 0, bad_sum = 0;
    for (int64_t b = 0; b < t->B; b++)
        for (int64_t h = 0; h < t->H; h++)
            for (int64_t i = 0; i < t->Lq; i++) {
                int64_t row = (b * t->H + h) * t->Lq + i;
                int any = 0;
                double sum = 0;
                for (int64_t j = 0; j < t->Lk; j++) {
                    int vis =
                        attn_mask_visible(&o->mask, b, h, i, j, t->Lq, t->Lk);
                    if (vis && o->mask.bias &&
                        isinf(attn__bias_at(&o->mask, b, h, i, j)))
                        vis = 0;
                    float w = r->w[row * t->Lk + j];
                    if (!vis && w != 0.0f) bad_zero++;
                    any |= vis;
                    sum += w;
                }
                if (!any) {
                    int nz = 0;
                    for (int64_t d = 0; d < t->Dv; d++)
                        nz |= r->o[row * t->Dv + d] != 0.0f;
                    if (nz || !(isinf(r->lse[row]) && r->lse[row] < 0))
                        bad_row++;
                } else if (fabs(sum - 1) > 1e-5 || !isfinite(r->lse[row])) {
                    bad_sum++;
                }
            }
    CHECK_MSG(bad_zero == 0, "%s: %d masked weights not exactly 0", what,
              bad_zero);
    CHECK_MSG(bad_row == 0, "%s: %d fully masked rows not zero/-inf", what,
              bad_row);
    CHECK_MSG(bad_sum == 0, "%s: %d visible rows do not sum to 1", what,
              bad_sum);
}

/* Runs one mask configuration through every kernel and compares them. */
static void run_config(const char *what, const attn_sdpa_opts *base, int64_t B,
                       int64_t H, int64_t Hkv, int64_t Lq, int64_t Lk,
                       unsigned long long seed) {
    test_qkv t;
    test_qkv_make(&t, B, H, Hkv, Lq, Lk, 8, 5, seed);
    test_run runs[2];
    for (int m = 0; m < 2; m++) {
        attn_sdpa_opts o = *base;
        o.impl = impls[m];
        test_run_sdpa(&runs[m], &t, &o);
        CHECK_MSG(runs[m].st == ATTN_OK, "%s impl %d: %s", what, m,
                  attn_last_error());
        if (runs[m].st == ATTN_OK) check_against_mask(&t, &o, &runs[m], what);
    }
    double worst = 0;
    for (int64_t i = 0; i < B * H * Lq * 5; i++) {
        double d = fabs((double)runs[0].o[i] - runs[1].o[i]);
        if (d > worst) worst = d;
    }
    CHECK_MSG(worst <= 1e-5, "%s: kernels differ by %g", what, worst);
    for (int m = 0; m < 2; m++) test_run_free(&runs[m]);
    test_qkv_free(&t);
}

static void each_kind_alone_and_combined(void) {
    const int64_t B = 2, H = 4, Hkv = 2;
    const int64_t shapes[][2] = {{1, 1},   {3, 17},  {17, 3},
                                 {17, 17}, {33, 70}, {70, 33}};
    int64_t kl[2] = {13, 0}, ql[2] = {2, 30};
    uint8_t layout[4 * 9 * 9];
    unsigned long long s = 7;
    for (size_t i = 0; i < sizeof layout; i++) layout[i] = test_rand(&s) > -0.2;
    uint8_t *keep = malloc(2 * 70 * 70);
    float *bias = malloc(sizeof(float) * 4 * 70 * 70);
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int64_t Lq = shapes[si][0], Lk = shapes[si][1];
        for (int64_t i = 0; i < 2 * Lq * Lk; i++)
            keep[i] = test_rand(&s) > -0.3;
        for (int64_t i = 0; i < 4 * Lq * Lk; i++)
            bias[i] = test_rand(&s) > 0.9 ? -INFINITY : (float)test_rand(&s);
        /* keep (B, 1, Lq, Lk): broadcast over heads by a size-1 axis */
        attn_tensor K = attn_tensor_4d(keep, ATTN_U8, 2, 1, Lq, Lk);
        /* bias (1, H, Lq, Lk): broadcast over batch by stride 0 */
        attn_tensor Bi = attn_tensor_4d(bias, ATTN_F32, 2, 4, Lq, Lk);
        Bi.stride[0] = 0;
        for (int kind = 0; kind < 12; kind++) {
            attn_sdpa_opts o;
            attn_sdpa_opts_init(&o);
            attn_mask *m = &o.mask;
            int64_t kls[2] = {kl[0] < Lk ? kl[0] : Lk, 0};
            int64_t qls[2] = {ql[0] < Lq ? ql[0] : Lq, ql[1] < Lq ? ql[1] : Lq};
            switch (kind) {
            case 0: m->causal = 1; break;
            case 1:
                m->causal = 1;
                m->align = ATTN_ALIGN_BOTTOM_RIGHT;
                break;
            case 2:
                m->window_left = 2;
                m->window_right = 1;
                break;
            case 3:
                m->window_left = 0;
                m->window_right = -1;
                m->align = ATTN_ALIGN_BOTTOM_RIGHT;
                break;
            case 4:
                m->key_lengths = kls;
                m->query_lengths = qls;
                break;
            case 5: m->keep = &K; break;
            case 6: m->bias = &Bi; break;
            case 7:
                m->block_size = 8;
                m->layout = layout;
                m->layout_heads = 4;
                break;
            case 8:
                m->random_block = 5;
                m->random_keep_p = 0.6;
                m->random_seed = 99;
                break;
            case 9: /* everything at once */
                m->causal = 1;
                m->align = ATTN_ALIGN_BOTTOM_RIGHT;
                m->window_left = 9;
                m->key_lengths = kls;
                m->query_lengths = qls;
                m->keep = &K;
                m->bias = &Bi;
                m->block_size = 8;
                m->layout = layout;
                m->layout_heads = 1;
                m->random_block = 3;
                m->random_keep_p = 0.8;
                m->random_seed = 5;
                break;
            case 10: /* causal + padding + window */
                m->causal = 1;
                m->key_lengths = kls;
                m->window_left = 4;
                break;
            case 11: /* sparse + random + keep */
                m->block_size = 4;
                m->layout = layout;
                m->layout_heads = 1;
                m->random_block = 6;
                m->random_keep_p = 0.5;
                m->keep = &K;
                break;
            }
            char what[64];
            snprintf(what, sizeof what, "kind %d Lq %lld Lk %lld", kind,
                     (long long)Lq, (long long)Lk);
            run_config(what, &o, B, H, Hkv, Lq, Lk, 100 + si * 17 + kind);
        }
    }
    free(keep);
    free(bias);
}

/* Attention of query i over keys [0, n) alone, computed on a truncated
 * problem with no mask: the expected result of look-ahead and padding. */
static void truncated_equivalence(void) {
    const int64_t L = 19, D = 6;
    test_qkv t;
    test_qkv_make(&t, 1, 1, 1, L, L, D, D, 5);
    for (int mode = 0; mode < 2; mode++)
        for (size_t mi = 0; mi < 2; mi++) {
            attn_sdpa_opts o;
            attn_sdpa_opts_init(&o);
            o.impl = impls[mi];
            int64_t kl = 11;
            if (mode == 0)
                o.mask.causal = 1;
            else
                o.mask.key_lengths = &kl;
            test_run full;
            test_run_sdpa(&full, &t, &o);
            CHECK(full.st == ATTN_OK);
            double worst = 0;
            for (int64_t i = 0; i < L; i++) {
                int64_t n = mode == 0 ? i + 1 : kl;
                test_qkv part = t;
                part.Lk = n;
                part.K.shape[2] = n;
                part.V.shape[2] = n;
                part.Q.data = t.q + i * D;
                part.Q.shape[2] = 1;
                part.Lq = 1;
                attn_sdpa_opts po;
                attn_sdpa_opts_init(&po);
                po.impl = ATTN_IMPL_REF;
                test_run r;
                test_run_sdpa(&r, &part, &po);
                CHECK(r.st == ATTN_OK);
                for (int64_t d = 0; d < D; d++) {
                    double e = fabs((double)r.o[d] - full.o[i * D + d]);
                    if (e > worst) worst = e;
                }
                test_run_free(&r);
            }
            CHECK_MSG(worst <= 1e-6,
                      "%s impl %zu: differs from truncated "
                      "attention by %g",
                      mode ? "padding" : "look-ahead", mi, worst);
            test_run_free(&full);
        }
    test_qkv_free(&t);
}

/* The two alignments with Lq != Lk, against the definition written out. */
static void alignments(void) {
    const int64_t Lq = 3, Lk = 5;
    attn_mask m;
    attn_mask_init(&m);
    m.causal = 1;
    /* top-left: query i sees keys 0..i */
    for (int64_t i = 0; i < Lq; i++)
        for (int64_t j = 0; j < Lk; j++)
            CHECK(attn_mask_visible(&m, 0, 0, i, j, Lq, Lk) == (j <= i));
    m.align = ATTN_ALIGN_BOTTOM_RIGHT;
    /* bottom-right: the last query sees every key: i sees 0..i+2 */
    for (int64_t i = 0; i < Lq; i++)
        for (int64_t j = 0; j < Lk; j++)
            CHECK(attn_mask_visible(&m, 0, 0, i, j, Lq, Lk) == (j <= i + 2));
    /* more queries than keys, bottom-right: the first two rows see nothing */
    for (int64_t i = 0; i < 5; i++)
        for (int64_t j = 0; j < 3; j++)
            CHECK(attn_mask_visible(&m, 0, 0, i, j, 5, 3) == (j <= i - 2));
    /* bottom-right follows each batch entry's own lengths */
    int64_t kl[2] = {5, 4}, ql[2] = {3, 2};
    m.key_lengths = kl;
    m.query_lengths = ql;
    for (int64_t i = 0; i < 2; i++)
        for (int64_t j = 0; j < 5; j++)
            CHECK(attn_mask_visible(&m, 1, 0, i, j, 3, 5) ==
                  (j < 4 && j <= i + 2));
    for (int64_t j = 0; j < 5; j++)
        CHECK(attn_mask_visible(&m, 1, 0, 2, j, 3, 5) == 0);
}

/* A keep mask given at full shape and the same mask broadcast give the
 * same result. */
static void broadcast_equivalence(void) {
    const int64_t B = 2, H = 3, Lq = 7, Lk = 9;
    uint8_t small[2 * 9], *full = malloc(B * H * Lq * Lk);
    unsigned long long s = 3;
    for (int i = 0; i < 18; i++) small[i] = test_rand(&s) > -0.4;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < Lq; i++)
                for (int64_t j = 0; j < Lk; j++)
                    full[((b * H + h) * Lq + i) * Lk + j] = small[b * Lk + j];
    attn_tensor Ks = attn_tensor_4d(small, ATTN_U8, B, 1, 1, Lk);
    attn_tensor Kz = attn_tensor_4d(small, ATTN_U8, B, H, Lq, Lk);
    Kz.stride[0] = Lk;
    Kz.stride[1] = 0;
    Kz.stride[2] = 0;
    attn_tensor Kf = attn_tensor_4d(full, ATTN_U8, B, H, Lq, Lk);
    test_qkv t;
    test_qkv_make(&t, B, H, H, Lq, Lk, 4, 4, 8);
    const attn_tensor *masks[3] = {&Kf, &Ks, &Kz};
    test_run r[3];
    for (int i = 0; i < 3; i++) {
        attn_sdpa_opts o;
        attn_sdpa_opts_init(&o);
        o.mask.keep = masks[i];
        test_run_sdpa(&r[i], &t, &o);
        CHECK(r[i].st == ATTN_OK);
    }
    CHECK(memcmp(r[0].o, r[1].o, sizeof(float) * B * H * Lq * 4) == 0);
    CHECK(memcmp(r[0].o, r[2].o, sizeof(float) * B * H * Lq * 4) == 0);
    for (int i = 0; i < 3; i++) test_run_free(&r[i]);
    test_qkv_free(&t);
    free(full);
}

/* The tile classifier never claims EMPTY for a tile with a visible pair,
 * nor FULL for one with a hidden pair. */
static void classifier_agrees(void) {
    unsigned long long s = 11;
    uint8_t layout[3 * 6 * 6], keep[2 * 23 * 29];
    for (size_t i = 0; i < sizeof layout; i++) layout[i] = test_rand(&s) > -0.5;
    for (size_t i = 0; i < sizeof keep; i++) keep[i] = test_rand(&s) > -0.9;
    attn_tensor K = attn_tensor_4d(keep, ATTN_U8, 2, 1, 23, 29);
    int64_t kl[2] = {29, 12}, ql[2] = {20, 23};
    int wrong = 0, partial = 0, total = 0;
    for (int trial = 0; trial < 200; trial++) {
        attn_mask m;
        attn_mask_init(&m);
        m.causal = test_rand(&s) > 0;
        m.align =
            test_rand(&s) > 0 ? ATTN_ALIGN_BOTTOM_RIGHT : ATTN_ALIGN_TOP_LEFT;
        if (test_rand(&s) > 0) m.window_left = (int64_t)(4 + 4 * test_rand(&s));
        if (test_rand(&s) > 0)
            m.window_right = (int64_t)(4 + 4 * test_rand(&s));
        if (test_rand(&s) > 0.3) {
            m.key_lengths = kl;
            m.query_lengths = ql;
        }
        if (test_rand(&s) > 0.5) m.keep = &K;
        if (test_rand(&s) > 0.3) {
            m.block_size = 5;
            m.layout = layout;
            m.layout_heads = 3;
        }
        if (test_rand(&s) > 0.3) {
            m.random_block = 3 + (int64_t)(2 * (1 + test_rand(&s)));
            m.random_keep_p = 0.7;
            m.random_seed = (uint64_t)trial;
        }
        int64_t tq = 1 + (int64_t)(4 * (1 + test_rand(&s)));
        int64_t tk = 1 + (int64_t)(4 * (1 + test_rand(&s)));
        for (int64_t b = 0; b < 2; b++)
            for (int64_t h = 0; h < 3; h++)
                for (int64_t i0 = 0; i0 < 23; i0 += tq)
                    for (int64_t j0 = 0; j0 < 29; j0 += tk) {
                        int64_t i1 = i0 + tq < 23 ? i0 + tq : 23;
                        int64_t j1 = j0 + tk < 29 ? j0 + tk : 29;
                        int any = 0, all = 1;
                        for (int64_t i = i0; i < i1; i++)
                            for (int64_t j = j0; j < j1; j++) {
                                int v =
                                    attn_mask_visible(&m, b, h, i, j, 23, 29);
                                any |= v;
                                all &= v;
                            }
                        attn__tile_class c = attn__mask_classify(
                            &m, b, h, i0, i1, j0, j1, 23, 29);
                        total++;
                        partial += c == ATTN__TILE_PARTIAL;
                        if ((c == ATTN__TILE_EMPTY && any) ||
                            (c == ATTN__TILE_FULL && !all))
                            wrong++;
                    }
    }
    CHECK_MSG(wrong == 0, "classifier wrong on %d of %d tiles", wrong, total);
    /* and it is not trivially PARTIAL everywhere */
    CHECK_MSG(partial < total * 9 / 10, "classifier says partial on %d of %d",
              partial, total);
}

static void builders(void) {
    int64_t ids[2 * 4] = {5, 7, 0, 0, 3, 0, 2, 0};
    uint8_t keep[8];
    CHECK_STATUS(attn_mask_padding_from_ids(ids, 2, 4, 0, keep), ATTN_OK);
    const uint8_t want[8] = {1, 1, 0, 0, 1, 0, 1, 0};
    CHECK(memcmp(keep, want, 8) == 0);
    uint8_t la[3 * 4];
    CHECK_STATUS(attn_mask_lookahead(3, 4, la), ATTN_OK);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) CHECK(la[i * 4 + j] == (j <= i));
    float keras[4] = {0, 1, 1, 0};
    uint8_t kk[4];
    CHECK_STATUS(attn_mask_from_keras(keras, ATTN_F32, 4, kk), ATTN_OK);
    CHECK(kk[0] == 1 && kk[1] == 0 && kk[2] == 0 && kk[3] == 1);
    uint8_t torch[3] = {1, 0, 1};
    CHECK_STATUS(attn_mask_from_torch_mha(torch, ATTN_U8, 3, kk), ATTN_OK);
    CHECK(kk[0] == 0 && kk[1] == 1 && kk[2] == 0);
    CHECK_STATUS(attn_mask_from_keras(keras, ATTN_BF16, 4, kk), ATTN_E_DTYPE);
    CHECK_STATUS(attn_mask_lookahead(0, 4, la), ATTN_E_SHAPE);
    CHECK_STATUS(attn_mask_padding_from_ids(NULL, 2, 4, 0, keep),
                 ATTN_E_INVALID);
}

/* The random-block pattern keeps about the requested fraction and depends
 * only on (seed, h, block row, block column). */
static void random_blocks(void) {
    int kept = 0, n = 0;
    for (int h = 0; h < 8; h++)
        for (int bi = 0; bi < 50; bi++)
            for (int bj = 0; bj < 50; bj++, n++)
                kept += attn_random_block_kept(42, 0.3, h, bi, bj);
    CHECK_MSG(fabs((double)kept / n - 0.3) < 0.02, "kept fraction %g",
              (double)kept / n);
    CHECK(attn_random_block_kept(42, 0.3, 1, 2, 3) ==
          attn_random_block_kept(42, 0.3, 1, 2, 3));
    int differ = 0;
    for (int bj = 0; bj < 64; bj++)
        differ += attn_random_block_kept(1, 0.5, 0, 0, bj) !=
                  attn_random_block_kept(2, 0.5, 0, 0, bj);
    CHECK(differ > 10);
    CHECK(attn_random_block_kept(3, 1.0, 0, 0, 0) == 1);
    CHECK(attn_random_block_kept(3, 0.0, 0, 0, 0) == 0);
}

/* One block covers everything when block_size exceeds both lengths, even
 * block_size = INT64_MAX (its block count once overflowed Lq + bs - 1). */
static void huge_block_size(void) {
    for (int keep = 0; keep < 2; keep++) {
        uint8_t layout[1] = {(uint8_t)keep};
        attn_sdpa_opts o;
        attn_sdpa_opts_init(&o);
        o.mask.block_size = INT64_MAX;
        o.mask.layout = layout;
        o.mask.layout_heads = 1;
        CHECK(attn_mask_visible(&o.mask, 0, 1, 16, 2, 17, 3) == keep);
        run_config(keep ? "block_size INT64_MAX, kept"
                        : "block_size INT64_MAX, dropped",
                   &o, 1, 2, 2, 17, 3, 99);
    }
}

/* Windows are c + window_right + 1 and c - window_left in every kernel:
 * a window near INT64_MAX overflowed there, so the check refuses it (with
 * a message); a window wider than the sequence stays valid. */
static void huge_windows(void) {
    attn_sdpa_opts o;
    attn_sdpa_opts_init(&o);
    o.mask.window_right = INT64_MAX;
    CHECK(attn_mask_check(&o.mask, 1, 2, 17, 3) == ATTN_E_INVALID);
    CHECK(strstr(attn_last_error(), "window_right") != NULL);
    o.mask.window_right = -1;
    o.mask.window_left = INT64_MAX;
    o.mask.align = ATTN_ALIGN_BOTTOM_RIGHT;
    CHECK(attn_mask_check(&o.mask, 1, 2, 17, 3) == ATTN_E_INVALID);
    CHECK(strstr(attn_last_error(), "window_left") != NULL);
    o.mask.window_left = 1000;
    o.mask.window_right = 1000;
    CHECK(attn_mask_check(&o.mask, 1, 2, 17, 3) == ATTN_OK);
    run_config("windows wider than the sequence", &o, 1, 2, 2, 17, 3, 7);
}

int main(void) {
    huge_block_size();
    huge_windows();
    each_kind_alone_and_combined();
    truncated_equivalence();
    alignments();
    broadcast_equivalence();
    classifier_agrees();
    builders();
    random_blocks();
    return check_done("test_mask");
}
