/* Dropout on the attention weights: the dropped fraction, the 1/(1-p)
 * scaling, the same mask in forward and backward, reruns and thread counts
 * bitwise identical, and p = 0 meaning exactly no dropout. */
#include "attn.h"
#include "check.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* the fraction of a million decisions that drop, straight from the keying */
static void fraction_direct(void) {
    static const double ps[4] = {0.1, 0.3, 0.5, 0.9};
    const int64_t n = 500; /* 2 x 2 x n x n: a million decisions */
    for (int t = 0; t < 4; t++) {
        int64_t dropped = 0, total = 0;
        for (int64_t b = 0; b < 2; b++)
            for (int64_t h = 0; h < 2; h++)
                for (int64_t i = 0; i < n; i++)
                    for (int64_t j = 0; j < n; j++) {
                        dropped += !attn_dropout_kept(77, ps[t], b, h, i, j);
                        total++;
                    }
        double f = (double)dropped / (double)total;
        CHECK_MSG(fabs(f - ps[t]) <= 0.01 * ps[t],
                  "p = %g: dropped fraction %.5f", ps[t], f);
    }
    /* every key of the counter matters */
    int diff_b = 0, diff_h = 0, diff_i = 0, diff_j = 0, diff_s = 0;
    for (int64_t x = 0; x < 256; x++) {
        int k0 = attn_dropout_kept(5, 0.5, 1, 2, 3, x);
        diff_b += k0 != attn_dropout_kept(5, 0.5, 0, 2, 3, x);
        diff_h += k0 != attn_dropout_kept(5, 0.5, 1, 1, 3, x);
        diff_i += k0 != attn_dropout_kept(5, 0.5, 1, 2, 4, x);
        diff_j += k0 != attn_dropout_kept(5, 0.5, 1, 2, 3, x + 1);
        diff_s += k0 != attn_dropout_kept(6, 0.5, 1, 2, 3, x);
    }
    CHECK(diff_b > 64 && diff_h > 64 && diff_i > 64 && diff_j > 64 &&
          diff_s > 64);
    /* p = 0 keeps everything, whatever the seed */
    int all = 1;
    for (int64_t j = 0; j < 1000; j++)
        all &= attn_dropout_kept(j * 7919, 0.0, 1, 1, j, j);
    CHECK(all);
}

/* the fraction of zero weights over a million weights of a forward, and
 * the kept ones scaled by exactly 1 / (1 - p) in double */
static void fraction_forward(void) {
    const int64_t L = 1000, D = 2; /* a million weights */
    const double p = 0.3;
    double *q = malloc(sizeof(double) * L * D),
           *o = malloc(sizeof(double) * L * D);
    double *w = malloc(sizeof(double) * L * L),
           *w0 = malloc(sizeof(double) * L * L);
    unsigned long long s = 9;
    for (int64_t i = 0; i < L * D; i++) q[i] = test_rand(&s);
    attn_tensor Q = attn_tensor_4d(q, ATTN_F64, 1, 1, L, D);
    attn_tensor O = attn_tensor_4d(o, ATTN_F64, 1, 1, L, D);
    attn_tensor W = attn_tensor_4d(w, ATTN_F64, 1, 1, L, L);
    attn_tensor W0 = attn_tensor_4d(w0, ATTN_F64, 1, 1, L, L);
    attn_sdpa_opts opts;
    attn_sdpa_opts_init(&opts);
    opts.impl = ATTN_IMPL_REF;
    opts.seed = 2024;
    CHECK_STATUS(attn_sdpa_forward(&Q, &Q, &Q, &opts, &O, &W0, NULL), ATTN_OK);
    opts.dropout_p = p;
    CHECK_STATUS(attn_sdpa_forward(&Q, &Q, &Q, &opts, &O, &W, NULL), ATTN_OK);
    int64_t zeros = 0, badscale = 0, badmask = 0;
    for (int64_t i = 0; i < L; i++)
        for (int64_t j = 0; j < L; j++) {
            double x = w[i * L + j];
            int kept = attn_dropout_kept(opts.seed, p, 0, 0, i, j);
            zeros += x == 0.0;
            badmask += kept != (x != 0.0);
            if (kept && fabs(x - w0[i * L + j] / (1 - p)) > 1e-15 * fabs(x))
                badscale++;
        }
    double f = (double)zeros / (double)(L * L);
    CHECK_MSG(fabs(f - p) <= 0.01 * p, "forward dropped fraction %.5f", f);
    CHECK_MSG(badmask == 0, "%lld weights disagree with attn_dropout_kept",
              (long long)badmask);
    CHECK_MSG(badscale == 0, "%lld kept weights not scaled by 1/(1-p)",
              (long long)badscale);
    /* p = 0 is exactly no dropout: bitwise the weights without it */
    opts.dropout_p = 0.0;
    opts.seed = 31337;
    CHECK_STATUS(attn_sdpa_forward(&Q, &Q, &Q, &opts, &O, &W, NULL), ATTN_OK);
    CHECK(memcmp(w, w0, sizeof(double) * L * L) == 0);
    free(q);
    free(o);
    free(w);
    free(w0);
}

/* Backward sees the forward's mask: with dout = 1 on query row r only and
 * Dv = 1, dV[j] = W[r, j], the forward's weight after dropout. */
static void same_mask_fwd_bwd(void) {
    enum { B = 2, H = 3, Lq = 16, Lk = 33, Dk = 8 };
    double q[B * H * Lq * Dk], k[B * H * Lk * Dk], v[B * H * Lk];
    double o[B * H * Lq], w[B * H * Lq * Lk], g[B * H * Lq];
    double dq[B * H * Lq * Dk], dk[B * H * Lk * Dk], dv[B * H * Lk];
    unsigned long long s = 4;
    for (int i = 0; i < B * H * Lq * Dk; i++) q[i] = test_rand(&s);
    for (int i = 0; i < B * H * Lk * Dk; i++) k[i] = test_rand(&s);
    for (int i = 0; i < B * H * Lk; i++) v[i] = test_rand(&s);
    attn_tensor Q = attn_tensor_4d(q, ATTN_F64, B, H, Lq, Dk);
    attn_tensor K = attn_tensor_4d(k, ATTN_F64, B, H, Lk, Dk);
    attn_tensor V = attn_tensor_4d(v, ATTN_F64, B, H, Lk, 1);
    attn_tensor O = attn_tensor_4d(o, ATTN_F64, B, H, Lq, 1);
    attn_tensor W = attn_tensor_4d(w, ATTN_F64, B, H, Lq, Lk);
    attn_tensor G = attn_tensor_4d(g, ATTN_F64, B, H, Lq, 1);
    attn_tensor dQ = attn_tensor_4d(dq, ATTN_F64, B, H, Lq, Dk);
    attn_tensor dK = attn_tensor_4d(dk, ATTN_F64, B, H, Lk, Dk);
    attn_tensor dV = attn_tensor_4d(dv, ATTN_F64, B, H, Lk, 1);
    attn_sdpa_opts opts;
    attn_sdpa_opts_init(&opts);
    opts.impl = ATTN_IMPL_REF;
    opts.dropout_p = 0.4;
    opts.seed = 0xfeedfaceull;
    opts.mask.causal = 1;
    opts.mask.align = ATTN_ALIGN_BOTTOM_RIGHT;
    CHECK_STATUS(attn_sdpa_forward(&Q, &K, &V, &opts, &O, &W, NULL), ATTN_OK);
    int64_t zeros = 0, mism = 0;
    for (int r = 0; r < Lq; r++) {
        memset(g, 0, sizeof g);
        for (int bh = 0; bh < B * H; bh++) g[bh * Lq + r] = 1.0;
        memset(dq, 0, sizeof dq);
        memset(dk, 0, sizeof dk);
        memset(dv, 0, sizeof dv);
        CHECK_STATUS(attn_sdpa_backward(&Q, &K, &V, &O, NULL, &G, &opts, &dQ,
                                        &dK, &dV, NULL),
                     ATTN_OK);
        for (int bh = 0; bh < B * H; bh++)
            for (int j = 0; j < Lk; j++) {
                double want = w[(bh * Lq + r) * Lk + j], got = dv[bh * Lk + j];
                zeros += want == 0.0;
                if ((want == 0.0) != (got == 0.0) || fabs(want - got) > 1e-14)
                    mism++;
            }
    }
    CHECK_MSG(mism == 0, "%lld backward weights differ from forward's",
              (long long)mism);
    CHECK(zeros > 0);
}

/* f32 forward + backward: reruns with one seed bitwise identical, another
 * seed different, and 1, 2, 3 threads bitwise identical (AUTO kernel) */
static void reruns_and_threads(attn_impl impl) {
    enum { B = 2, H = 4, Hkv = 2, Lq = 37, Lk = 70, D = 16 };
    size_t nq = (size_t)B * H * Lq * D, nk = (size_t)B * Hkv * Lk * D;
    float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nk * 4);
    float *g = malloc(nq * 4);
    unsigned long long s = 8;
    for (size_t i = 0; i < nq; i++)
        q[i] = (float)test_rand(&s), g[i] = (float)test_rand(&s);
    for (size_t i = 0; i < nk; i++)
        k[i] = (float)test_rand(&s), v[i] = (float)test_rand(&s);
    attn_tensor Q = attn_tensor_4d(q, ATTN_F32, B, H, Lq, D);
    attn_tensor K = attn_tensor_4d(k, ATTN_F32, B, Hkv, Lk, D);
    attn_tensor V = attn_tensor_4d(v, ATTN_F32, B, Hkv, Lk, D);
    attn_tensor G = attn_tensor_4d(g, ATTN_F32, B, H, Lq, D);
    float *res[5][4];
    size_t sz[4] = {nq, nq, nk, nk}; /* out, dq, dk, dv */
    float lse[5][B * H * Lq];
    /* runs: seed A with 1, 2, 3 threads, seed A again, seed B */
    for (int r = 0; r < 5; r++) {
        for (int t = 0; t < 4; t++) res[r][t] = calloc(sz[t], 4);
        attn_sdpa_opts opts;
        attn_sdpa_opts_init(&opts);
        opts.impl = impl;
        opts.dropout_p = 0.25;
        opts.seed = r == 4 ? 43 : 42;
        opts.threads = r < 3 ? r + 1 : 2;
        opts.mask.causal = 1;
        attn_tensor O = attn_tensor_4d(res[r][0], ATTN_F32, B, H, Lq, D);
        attn_tensor dQ = attn_tensor_4d(res[r][1], ATTN_F32, B, H, Lq, D);
        attn_tensor dK = attn_tensor_4d(res[r][2], ATTN_F32, B, Hkv, Lk, D);
        attn_tensor dV = attn_tensor_4d(res[r][3], ATTN_F32, B, Hkv, Lk, D);
        CHECK_STATUS(attn_sdpa_forward(&Q, &K, &V, &opts, &O, NULL, lse[r]),
                     ATTN_OK);
        CHECK_STATUS(attn_sdpa_backward(&Q, &K, &V, &O, lse[r], &G, &opts, &dQ,
                                        &dK, &dV, NULL),
                     ATTN_OK);
    }
    for (int r = 1; r < 4; r++)
        for (int t = 0; t < 4; t++)
            CHECK_MSG(memcmp(res[r][t], res[0][t], sz[t] * 4) == 0,
                      "impl %d run %d tensor %d differs from run 0", (int)impl,
                      r, t);
    for (int t = 0; t < 4; t++)
        CHECK_MSG(memcmp(res[4][t], res[0][t], sz[t] * 4) != 0,
                  "impl %d: another seed gives the same tensor %d", (int)impl,
                  t);
    for (int r = 0; r < 5; r++)
        for (int t = 0; t < 4; t++) free(res[r][t]);
    free(q);
    free(k);
    free(v);
    free(g);
}

int main(void) {
    fraction_direct();
    fraction_forward();
    same_mask_fwd_bwd();
    reruns_and_threads(ATTN_IMPL_REF);
    reruns_and_threads(ATTN_IMPL_AUTO);
    return check_done("test_dropout");
}
