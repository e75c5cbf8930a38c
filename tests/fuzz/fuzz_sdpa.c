/* The SDPA entry points on random valid problems: the input is a recipe
 * (B 1..2, H 1..6 over 1..2 key heads, lengths 1..40, dtype, memory
 * layout, every mask part, scale, magnitudes, seeds, then the score
 * modifiers: soft-cap, ALiBi, sinks, document ids, and user score_mod /
 * mask_mod with or without a block mask; their bytes come last, so older
 * corpus inputs keep their meaning). Properties: no sanitizer report; the reference and the flash
 * kernel return the same status; a row that sees no key is exactly 0 with
 * log-sum-exp -inf in both; flash agrees with the reference within a
 * tolerance scaled by the scores' size; flash on 1 and 2 threads gives the
 * same bits (output, lse, weights). */
#include "fuzz_util.h"

#include <math.h>

typedef struct {
    uint64_t s;
} rng64;

/* User functions driven by the recipe: mask_mod hides pairs by a hash of
 * (b, h, i, j) and a salt, with whole blocks of 4 x 4 hidden per head (so
 * block masks have EMPTY and FULL blocks); score_mod stretches each head
 * and adds a bounded hash term (not additive: its slope matters). */
typedef struct {
    unsigned salt;
    double p_hide;
} user_ctx;

static uint32_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return (uint32_t)x;
}

static int user_mask(void *ctx, int64_t b, int64_t h, int64_t i, int64_t j0,
                     int64_t n, uint8_t *keep) {
    const user_ctx *c = ctx;
    for (int64_t t = 0; t < n; t++) {
        const int64_t j = j0 + t;
        const uint64_t blk =
            (uint64_t)((b * 7 + h) * 64 + i / 4) * 64 + (uint64_t)(j / 4);
        if (mix(blk * 31 + c->salt) % 4 == 0) {
            keep[t] = 0;
            continue;
        }
        const uint64_t key = ((uint64_t)((b * 7 + h) * 64 + i) << 8) ^
                             (uint64_t)j ^ ((uint64_t)c->salt << 40);
        keep[t] = (double)(mix(key) % 1000) / 1000.0 >= c->p_hide;
    }
    return 0;
}

static int user_score(void *ctx, int64_t b, int64_t h, int64_t i, int64_t j0,
                      int64_t n, double *score, double *dscore) {
    const user_ctx *c = ctx;
    const double a = 0.5 + 0.25 * (double)(h % 4);
    for (int64_t t = 0; t < n; t++) {
        const uint64_t key = ((uint64_t)((b * 7 + h) * 64 + i) << 8) ^
                             (uint64_t)(j0 + t) ^ ((uint64_t)c->salt << 40);
        score[t] = a * score[t] + (double)(mix(key) % 2001) / 1000.0 - 1.0;
        if (dscore) dscore[t] = a;
    }
    return 0;
}

static double unit(rng64 *r) { /* uniform in [-1, 1) */
    r->s = r->s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(r->s >> 11) * 0x1p-52 - 1.0;
}

/* A (B, H, L, D) tensor of dtype in one of three memory layouts. */
typedef struct {
    void *buf;
    attn_tensor t;
} owned;

static void make(owned *o, attn_dtype dt, int layout, int64_t B, int64_t H,
                 int64_t L, int64_t D, double mag, rng64 *r) {
    const int64_t pad = layout == 2 ? 3 : 0, row = D + pad;
    const size_t n = (size_t)(B * H * L * row);
    const size_t es = attn_dtype_size(dt);
    o->buf = calloc(n, es);
    int64_t st[4] = {H * L * row, L * row, row, 1};
    if (layout == 1) { /* (B, L, H, D) in memory, as attn_tensor_bthd */
        st[0] = L * H * D;
        st[1] = D;
        st[2] = H * D;
    }
    o->t.data = o->buf;
    o->t.dtype = dt;
    const int64_t sh[4] = {B, H, L, D};
    for (int a = 0; a < 4; a++) {
        o->t.shape[a] = sh[a];
        o->t.stride[a] = st[a];
    }
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < L; i++)
                for (int64_t d = 0; d < D; d++) {
                    const size_t off =
                        (size_t)(b * st[0] + h * st[1] + i * st[2] + d);
                    const float x = (float)(mag * unit(r));
                    if (dt == ATTN_F32)
                        ((float *)o->buf)[off] = x;
                    else if (dt == ATTN_F16)
                        ((uint16_t *)o->buf)[off] = attn_f32_to_f16(x);
                    else
                        ((uint16_t *)o->buf)[off] = attn_f32_to_bf16(x);
                }
}

static double max_abs(const attn_tensor *t) {
    double m = 0;
    for (int64_t a = 0; a < t->shape[0]; a++)
        for (int64_t b = 0; b < t->shape[1]; b++)
            for (int64_t c = 0; c < t->shape[2]; c++)
                for (int64_t d = 0; d < t->shape[3]; d++) {
                    double x = fabs(attn_tensor_get(t, a, b, c, d));
                    m = x > m ? x : m;
                }
    return m;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_bytes in = {data, size, 0};
    const int64_t B = fuzz_range(&in, 1, 2), Hkv = fuzz_range(&in, 1, 2);
    const int64_t H = Hkv * fuzz_range(&in, 1, 3);
    const int64_t Lq = fuzz_range(&in, 1, 40), Lk = fuzz_range(&in, 1, 40);
    const int64_t D = fuzz_range(&in, 1, 20), Dv = fuzz_range(&in, 1, 20);
    static const attn_dtype dts[3] = {ATTN_F32, ATTN_F16, ATTN_BF16};
    const attn_dtype dt = dts[fuzz_u8(&in) % 3];
    const int layout = (int)(fuzz_u8(&in) % 3);
    const double mag = ldexp(1.0, (int)fuzz_range(&in, -6, 3));
    rng64 r = {fuzz_u8(&in) | (uint64_t)fuzz_u8(&in) << 8};
    owned q, k, v;
    make(&q, dt, layout, B, H, Lq, D, mag, &r);
    make(&k, dt, layout, B, Hkv, Lk, D, mag, &r);
    make(&v, dt, layout, B, Hkv, Lk, Dv, 1.0, &r);

    attn_sdpa_opts o;
    attn_sdpa_opts_init(&o);
    const unsigned sc = fuzz_u8(&in);
    if (sc & 1) o.scale = ldexp(1.0, (int)(sc >> 1) % 12 - 6);
    attn_mask *m = &o.mask;
    const unsigned parts = fuzz_u8(&in) | fuzz_u8(&in) << 8;
    m->causal = parts & 1;
    m->align = (parts >> 1) & 1 ? ATTN_ALIGN_BOTTOM_RIGHT : ATTN_ALIGN_TOP_LEFT;
    if (parts & 4) m->window_left = fuzz_range(&in, -1, Lk);
    if (parts & 8) m->window_right = fuzz_range(&in, -1, Lk);
    int64_t klen[2], qlen[2];
    for (int b = 0; b < 2; b++) {
        klen[b] = fuzz_range(&in, 0, Lk);
        qlen[b] = fuzz_range(&in, 0, Lq);
    }
    if (parts & 16) m->key_lengths = klen;
    if (parts & 32) m->query_lengths = qlen;
    uint8_t *keep = NULL, *lay = NULL;
    float *bias = NULL;
    attn_tensor keep_t, bias_t;
    double bmax = 0;
    if (parts & 64) { /* u8 keep mask, each axis broadcast or full */
        const unsigned bc = fuzz_u8(&in);
        const int64_t s[4] = {bc & 1 ? 1 : B, bc & 2 ? 1 : H, bc & 4 ? 1 : Lq,
                              bc & 8 ? 1 : Lk};
        const size_t n = (size_t)(s[0] * s[1] * s[2] * s[3]);
        keep = malloc(n);
        const double p = fuzz_u8(&in) / 255.0;
        for (size_t i = 0; i < n; i++) keep[i] = (unit(&r) + 1) / 2 < p;
        keep_t = attn_tensor_4d(keep, ATTN_U8, s[0], s[1], s[2], s[3]);
        m->keep = &keep_t;
    }
    if (parts & 128) { /* f32 bias in [-4, 4], some -inf */
        const unsigned bc = fuzz_u8(&in);
        const int64_t s[4] = {bc & 1 ? 1 : B, bc & 2 ? 1 : H, bc & 4 ? 1 : Lq,
                              bc & 8 ? 1 : Lk};
        const size_t n = (size_t)(s[0] * s[1] * s[2] * s[3]);
        bias = malloc(n * sizeof *bias);
        const double pinf = fuzz_u8(&in) / 255.0;
        for (size_t i = 0; i < n; i++) {
            bias[i] =
                (unit(&r) + 1) / 2 < pinf ? -INFINITY : (float)(4 * unit(&r));
            if (isfinite(bias[i]) && fabs(bias[i]) > bmax) bmax = fabs(bias[i]);
        }
        bias_t = attn_tensor_4d(bias, ATTN_F32, s[0], s[1], s[2], s[3]);
        m->bias = &bias_t;
    }
    if (parts & 256) { /* block layout, shared or per head */
        const int64_t bs = fuzz_range(&in, 1, 8), heads = parts & 512 ? H : 1;
        const int64_t nq = (Lq + bs - 1) / bs, nk = (Lk + bs - 1) / bs;
        lay = malloc((size_t)(heads * nq * nk));
        for (int64_t i = 0; i < heads * nq * nk; i++) lay[i] = unit(&r) > -0.4;
        m->block_size = bs;
        m->layout = lay;
        m->layout_heads = heads;
    }
    if (parts & 1024) {
        m->random_block = fuzz_range(&in, 1, 8);
        m->random_keep_p = fuzz_u8(&in) / 255.0;
        m->random_seed = fuzz_u8(&in);
    }
    const int want_w = (parts >> 11) & 1;

    /* the score modifiers (bytes after the mask's) */
    const unsigned mods = fuzz_u8(&in) | fuzz_u8(&in) << 8;
    double slopes[6], sinks[6], cap = 0, smod_max = 0;
    int64_t *docq = NULL, *dock = NULL;
    user_ctx uc = {fuzz_u8(&in), fuzz_u8(&in) / 400.0};
    attn_block_mask bm;
    uint8_t *bcls = NULL;
    if (mods & 1) cap = m->softcap = 0.25 * (double)fuzz_range(&in, 1, 32);
    if (mods & 6) {
        m->alibi = mods & 2 ? ATTN_ALIBI_CAUSAL : ATTN_ALIBI_SYMMETRIC;
        if (mods & 8) { /* given slopes, else the standard ones */
            for (int64_t h = 0; h < H; h++)
                slopes[h] = (double)fuzz_range(&in, 0, 64) / 64.0;
            m->alibi_slopes = slopes;
            m->n_alibi_slopes = H;
        }
    }
    if (mods & 16) {
        for (int64_t h = 0; h < H; h++)
            sinks[h] = (double)fuzz_range(&in, -64, 64) / 16.0;
        m->sinks = sinks;
        m->n_sinks = H;
    }
    if (mods & 32) { /* packed documents: ids grow by 0 or 1 */
        docq = malloc(sizeof(int64_t) * (size_t)(B * Lq));
        dock = malloc(sizeof(int64_t) * (size_t)(B * Lk));
        for (int64_t b = 0; b < B; b++) {
            int64_t id = 0;
            for (int64_t i = 0; i < Lq; i++) {
                id += unit(&r) > 0.7;
                docq[b * Lq + i] = id;
            }
            /* keys: the queries' documents stretched to Lk */
            for (int64_t j = 0; j < Lk; j++)
                dock[b * Lk + j] = docq[b * Lq + j * Lq / Lk];
        }
        m->doc_q = docq;
        m->n_doc_q = B * Lq;
        if (Lq != Lk || (mods & 64)) {
            m->doc_k = dock;
            m->n_doc_k = B * Lk;
        }
    }
    if (mods & 128) {
        m->mask_mod = user_mask;
        m->mask_ctx = &uc;
    }
    if ((mods & 128) && (mods & 256)) { /* and its block mask */
        const int64_t bq = fuzz_range(&in, 1, 8), bk = fuzz_range(&in, 1, 8);
        const int64_t bb = mods & 512 ? B : 1, bh = mods & 1024 ? H : 1;
        int64_t ncls = 0;
        FUZZ_CHECK(attn_block_mask_size(bb, bh, Lq, Lk, bq, bk, &ncls) ==
                   ATTN_OK);
        bcls = malloc((size_t)ncls);
        /* built broadcast (B or H of 1) too, but given to the kernels only
         * when full: this mask function depends on b and h */
        FUZZ_CHECK(attn_block_mask_build(&bm, user_mask, &uc, bb, bh, Lq, Lk,
                                         bq, bk, bcls, ncls) == ATTN_OK);
        if (bb == B && bh == H) m->block_mask = &bm;
    }
    if (mods & 2048) {
        m->score_mod = user_score;
        m->score_ctx = &uc;
        smod_max = 1.0;
    }

    const size_t no = (size_t)(B * H * Lq * Dv), nl = (size_t)(B * H * Lq),
                 nw = (size_t)(B * H * Lq * Lk);
    float *out[3], *lse[3], *w[3];
    attn_status st[3];
    for (int c = 0; c < 3; c++) { /* ref; flash on 1 thread; on 2 */
        out[c] = calloc(no, sizeof(float));
        lse[c] = calloc(nl, sizeof(float));
        w[c] = want_w ? calloc(nw, sizeof(float)) : NULL;
        attn_tensor O = attn_tensor_4d(out[c], ATTN_F32, B, H, Lq, Dv);
        attn_tensor W = attn_tensor_4d(w[c], ATTN_F32, B, H, Lq, Lk);
        o.impl = c == 0 ? ATTN_IMPL_REF : ATTN_IMPL_FLASH;
        o.threads = c == 2 ? 2 : 1;
        st[c] = attn_sdpa_forward(&q.t, &k.t, &v.t, &o, &O, want_w ? &W : NULL,
                                  lse[c]);
    }
    FUZZ_CHECK(st[0] == st[1] && st[1] == st[2]);
    if (st[0] == ATTN_OK) {
        FUZZ_CHECK(memcmp(out[1], out[2], no * sizeof(float)) == 0);
        FUZZ_CHECK(memcmp(lse[1], lse[2], nl * sizeof(float)) == 0);
        FUZZ_CHECK(!want_w || memcmp(w[1], w[2], nw * sizeof(float)) == 0);
        const double scale = o.scale > 0 ? o.scale : 1.0 / sqrt((double)D);
        double smax = scale * (double)D * max_abs(&q.t) * max_abs(&k.t);
        if (cap > 0 && cap < smax) smax = cap;
        double amax = 0; /* the largest ALiBi term */
        for (int64_t h = 0; m->alibi && h < H; h++) {
            const double sl = m->alibi_slopes ? slopes[h] : 1.0;
            amax = fmax(amax, sl * (double)(Lq + Lk));
        }
        smax = (m->score_mod ? 1.25 : 1.0) * (smax + bmax + amax) + smod_max;
        const double vmax = max_abs(&v.t);
        const double tol = 1e-5 * (double)D * (smax > 1 ? smax : 1);
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t i = 0; i < Lq; i++) {
                    int seen = 0;
                    for (int64_t j = 0; j < Lk && !seen; j++) {
                        const double bj =
                            m->bias
                                ? attn_tensor_get(&bias_t,
                                                  bias_t.shape[0] > 1 ? b : 0,
                                                  bias_t.shape[1] > 1 ? h : 0,
                                                  bias_t.shape[2] > 1 ? i : 0,
                                                  bias_t.shape[3] > 1 ? j : 0)
                                : 0.0;
                        seen = attn_mask_visible(m, b, h, i, j, Lq, Lk) &&
                               bj != -INFINITY;
                    }
                    const size_t row = (size_t)((b * H + h) * Lq + i);
                    for (int c = 0; c < 3; c++) {
                        /* no key: lse is the sink's logit, or -inf */
                        if (!seen && m->sinks)
                            FUZZ_CHECK(lse[c][row] == (float)sinks[h]);
                        else if (!seen)
                            FUZZ_CHECK(isinf(lse[c][row]) && lse[c][row] < 0);
                        for (int64_t d = 0; d < Dv; d++) {
                            const float x =
                                out[c][row * (size_t)Dv + (size_t)d];
                            if (!seen) FUZZ_CHECK(x == 0.0f);
                            FUZZ_CHECK(
                                fabs(x -
                                     out[0][row * (size_t)Dv + (size_t)d]) <=
                                tol * vmax + 1e-6);
                        }
                        for (int64_t j = 0; want_w && j < Lk; j++) {
                            const float x = w[c][row * (size_t)Lk + (size_t)j];
                            if (!seen) FUZZ_CHECK(x == 0.0f);
                            FUZZ_CHECK(
                                fabs(x - w[0][row * (size_t)Lk + (size_t)j]) <=
                                tol + 1e-6);
                        }
                    }
                }
    }
    for (int c = 0; c < 3; c++) {
        free(out[c]);
        free(lse[c]);
        free(w[c]);
    }
    free(q.buf);
    free(k.buf);
    free(v.buf);
    free(keep);
    free(bias);
    free(lay);
    free(docq);
    free(dock);
    free(bcls);
    return 0;
}
