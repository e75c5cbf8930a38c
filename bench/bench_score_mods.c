/* attn bench --score-mods (see bench_score_mods.h). B = 1, H = 8, D = 64,
 * f32, causal. */
#include "bench_score_mods.h"
#include "cpu.h"

#include "attn.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

enum { H = 8, D = 64 };

typedef struct {
    float *q, *k, *v, *o, *g, *dq, *dk, *dv, *lse;
} bufs;

static int bufs_make(bufs *b, int64_t L) {
    size_t n = (size_t)(H * L * D);
    memset(b, 0, sizeof *b);
    float **all[9] = {&b->q,  &b->k,  &b->v,  &b->o,  &b->g,
                      &b->dq, &b->dk, &b->dv, &b->lse};
    for (int i = 0; i < 9; i++)
        if (!(*all[i] = calloc(n, sizeof(float)))) return 0;
    uint64_t s = 12345;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        float x = (float)((s >> 40) & 0xffff) / 65536.0f - 0.5f;
        b->q[i] = 2 * x;
        b->k[i] = x * (float)((i * 7) % 5) * 0.5f;
        b->v[i] = x;
        b->g[i] = (float)((i * 13) % 7) * 0.1f - 0.3f;
    }
    return 1;
}

static void bufs_free(bufs *b) {
    free(b->q);
    free(b->k);
    free(b->v);
    free(b->o);
    free(b->g);
    free(b->dq);
    free(b->dk);
    free(b->dv);
    free(b->lse);
}

/* One call on rows [r0, r0 + L) of the (H, Ltot, D) buffers: forward, and
 * backward when back. */
static attn_status call(const bufs *b, int64_t Ltot, int64_t r0, int64_t L,
                        const attn_sdpa_opts *op, int back) {
    attn_tensor Q = attn_tensor_4d(b->q, ATTN_F32, 1, H, Ltot, D);
    Q.shape[2] = L;
    Q.data = b->q + r0 * D;
    attn_tensor K = Q, V = Q, O = Q, G = Q, dQ = Q, dK = Q, dV = Q;
    K.data = b->k + r0 * D;
    V.data = b->v + r0 * D;
    O.data = b->o + r0 * D;
    G.data = b->g + r0 * D;
    dQ.data = b->dq + r0 * D;
    dK.data = b->dk + r0 * D;
    dV.data = b->dv + r0 * D;
    /* lse is contiguous [H * L]: one slab per call at r0 * H */
    float *lse = b->lse + r0 * H;
    attn_status st = attn_sdpa_forward(&Q, &K, &V, op, &O, NULL, lse);
    if (!st && back)
        st = attn_sdpa_backward(&Q, &K, &V, &O, lse, &G, op, &dQ, &dK, &dV,
                                NULL);
    return st;
}

/* The user-function cases: ALiBi as a score_mod (the built-in's formula,
 * ctx = the slopes) and causal as a mask_mod. */
static int user_alibi(void *ctx, int64_t b, int64_t h, int64_t i, int64_t j0,
                      int64_t n, double *score, double *dscore) {
    const double sl = ((const double *)ctx)[h];
    (void)b;
    for (int64_t t = 0; t < n; t++) score[t] -= sl * (double)(i - (j0 + t));
    if (dscore)
        for (int64_t t = 0; t < n; t++) dscore[t] = 1.0;
    return 0;
}

static int user_causal(void *ctx, int64_t b, int64_t h, int64_t i, int64_t j0,
                       int64_t n, uint8_t *keep) {
    (void)ctx, (void)b, (void)h;
    for (int64_t t = 0; t < n; t++) keep[t] = j0 + t <= i;
    return 0;
}

enum { NCASE = 8 };

static int fail(FILE *out, attn_status st) {
    fprintf(out, "bench --score-mods: %s: %s\n", attn_strerror(st),
            attn_last_error());
    return 1;
}

/* The modifiers' table at length L: each case's forward and forward +
 * backward against the plain causal attention. */
static attn_status modifiers_table(FILE *out, const bench_score_mods_opts *o,
                                   const bufs *b, int64_t L) {
    double sinks[H], slopes[H];
    for (int h = 0; h < H; h++) sinks[h] = 0.25 * h - 1.0;
    attn_alibi_slopes(H, slopes);
    attn_status st = ATTN_OK;
    fprintf(out,
            "B=1, H=%d, D=%d, f32, causal, flash, %d threads%s; best of %d; "
            "kernels %s\n\n",
            H, D, o->threads, o->threads ? "" : " (0: OpenMP's default)",
            o->reps, attn__isa_describe());
    fprintf(out,
            "| L = %lld | forward ms | / plain | fwd + bwd ms | / plain |\n"
            "| --- | --- | --- | --- | --- |\n",
            (long long)L);
    static const char *const names[NCASE] = {
        "plain",
        "softcap 30",
        "ALiBi",
        "softcap + ALiBi",
        "sinks",
        "user score_mod (ALiBi)",
        "user mask_mod (causal) + block mask",
        "user mask_mod (causal), no block mask"};
    /* the block mask of the causal mask_mod, built once (64 x 64 blocks) */
    attn_block_mask bm;
    int64_t ncls = 0;
    uint8_t *cls = NULL;
    st = attn_block_mask_size(1, 1, L, L, 64, 64, &ncls);
    if (!st && !(cls = malloc((size_t)ncls))) st = ATTN_E_NOMEM;
    if (!st)
        st = attn_block_mask_build(&bm, user_causal, NULL, 1, 1, L, L, 64, 64,
                                   cls, ncls);
    attn_sdpa_opts op5[NCASE];
    double t5[NCASE][2];
    for (int c = 0; c < NCASE; c++) {
        attn_sdpa_opts *op = &op5[c];
        attn_sdpa_opts_init(op);
        op->impl = ATTN_IMPL_FLASH;
        op->threads = o->threads;
        op->mask.causal = c < 6;
        if (c == 1 || c == 3) op->mask.softcap = 30.0;
        if (c == 2 || c == 3) op->mask.alibi = ATTN_ALIBI_CAUSAL;
        if (c == 4) {
            op->mask.sinks = sinks;
            op->mask.n_sinks = H;
        }
        if (c == 5) {
            op->mask.score_mod = user_alibi;
            op->mask.score_ctx = slopes;
        }
        if (c >= 6) op->mask.mask_mod = user_causal;
        if (c == 6) op->mask.block_mask = &bm;
        t5[c][0] = t5[c][1] = 1e30;
    }
    /* the cases interleaved in each repetition, so that a change of load
     * on a shared machine touches them all alike */
    for (int r = 0; r <= o->reps && !st; r++)
        for (int c = 0; c < NCASE && !st; c++)
            for (int back = 0; back < 2 && !st; back++) {
                double t0 = now();
                st = call(b, L, 0, L, &op5[c], back);
                double dt = now() - t0;
                if (r > 0 && dt < t5[c][back]) t5[c][back] = dt;
            }
    free(cls);
    for (int c = 0; c < NCASE && !st; c++)
        fprintf(out, "| %s | %.2f | %.2f | %.2f | %.2f |\n", names[c],
                1e3 * t5[c][0], t5[c][0] / t5[0][0], 1e3 * t5[c][1],
                t5[c][1] / t5[0][1]);
    return st;
}

/* Packed documents (doc ids) against the documents one by one at Lp
 * positions; 1 when their outputs differ. */
static int documents_table(FILE *out, const bench_score_mods_opts *o,
                           const bufs *b, int64_t Lp) {
    attn_status st = ATTN_OK;
    /* 16 documents of random lengths summing to Lp */
    int64_t len[16], sum = 0;
    uint64_t s = 99;
    for (int d = 0; d < 16; d++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        len[d] = 1 + (int64_t)((s >> 33) % (uint64_t)(Lp / 8));
        sum += len[d];
    }
    int64_t acc = 0;
    for (int d = 0; d < 16; d++) { /* rescale to sum to Lp exactly */
        len[d] = d == 15 ? Lp - acc : len[d] * Lp / sum;
        if (len[d] < 1) len[d] = 1;
        acc += len[d];
    }
    int64_t *ids = malloc(sizeof(int64_t) * (size_t)Lp);
    float *ref = malloc(sizeof(float) * (size_t)(H * Lp * D));
    int rc = 0;
    if (!ids || !ref) {
        free(ids);
        free(ref);
        fprintf(out, "bench --score-mods: out of memory\n");
        return 1;
    }
    for (int64_t d = 0, i = 0; d < 16; d++)
        for (int64_t t = 0; t < len[d]; t++) ids[i++] = d;
    attn_sdpa_opts op;
    attn_sdpa_opts_init(&op);
    op.impl = ATTN_IMPL_FLASH;
    op.threads = o->threads;
    op.mask.causal = 1;
    attn_sdpa_opts packed = op;
    packed.mask.doc_q = ids;
    packed.mask.n_doc_q = Lp;
    /* the documents one by one: each a causal attention over its rows.
     * The (H, Lp, D) buffers are sliced on the position axis; lse slabs of
     * H * len at H * r0 tile [H * Lp] without overlap. */
    double one[2] = {1e30, 1e30}, pk[2] = {1e30, 1e30};
    for (int r = 0; r <= o->reps && !st; r++)
        for (int back = 0; back < 2 && !st; back++) {
            double t0 = now();
            for (int64_t d = 0, r0 = 0; d < 16 && !st; r0 += len[d], d++)
                st = call(b, Lp, r0, len[d], &op, back);
            double dt = now() - t0;
            if (r > 0 && dt < one[back]) one[back] = dt;
            if (!st && r == 0 && back == 0)
                memcpy(ref, b->o, sizeof(float) * (size_t)(H * Lp * D));
            t0 = now();
            if (!st) st = call(b, Lp, 0, Lp, &packed, back);
            dt = now() - t0;
            if (r > 0 && dt < pk[back]) pk[back] = dt;
        }
    if (st) {
        rc = fail(out, st);
    } else {
        double e = 0;
        for (int64_t i = 0; i < H * Lp * D; i++) {
            double x = fabs((double)ref[i] - b->o[i]);
            if (!(x <= e)) e = x;
        }
        fprintf(
            out,
            "\n| %lld positions, 16 documents (%lld .. ) | forward ms | fwd + bwd ms |\n"
            "| --- | --- | --- |\n",
            (long long)Lp, (long long)len[0]);
        fprintf(out, "| one by one (sum) | %.2f | %.2f |\n", 1e3 * one[0],
                1e3 * one[1]);
        fprintf(out, "| packed, doc ids | %.2f | %.2f |\n", 1e3 * pk[0],
                1e3 * pk[1]);
        fprintf(out, "| packed / sum | %.2f | %.2f |\n", pk[0] / one[0],
                pk[1] / one[1]);
        fprintf(out, "\npacked vs one by one: max |diff| of the output %.3g\n",
                e);
        if (!(e <= 1e-5)) {
            fprintf(out, "bench --score-mods: the packed output differs\n");
            rc = 1;
        }
    }
    free(ids);
    free(ref);
    return rc;
}

int bench_score_mods_run(FILE *out, const bench_score_mods_opts *o) {
    const int64_t L = o->l > 0 ? o->l : o->quick ? 1024 : 2048;
    const int64_t Lp = o->lp >= 16 ? o->lp : o->quick ? 4096 : 16384;
    bufs b;
    if (!bufs_make(&b, Lp > L ? Lp : L)) {
        bufs_free(&b);
        fprintf(out, "bench --score-mods: out of memory\n");
        return 1;
    }
    attn_status st = modifiers_table(out, o, &b, L);
    int rc = st ? fail(out, st) : documents_table(out, o, &b, Lp);
    bufs_free(&b);
    return rc;
}
