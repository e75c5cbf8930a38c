/* Ring attention (src/dist/) against one process, under mpirun -np P.
 *
 * Every rank builds the same full tensors, computes the one-process flash
 * result and the f64 reference, runs the ring on its shard and gathers the
 * ring's result (unshard + MPI_Allreduce), so that every rank checks the
 * whole result. Tolerance: the repo's rule (tests/test_flash.c) with the
 * one-process flash kernel as the yardstick: the ring's max error against
 * the f64 reference is at most 2x flash's plus 1e-6 (forward O and lse,
 * backward dQ, dK, dV; gradients relative to their largest entry).
 *
 * Cases: odd lengths that P does not divide, Lq != Lk, GQA, Dk != Dv, both
 * layouts, causal top-left and bottom-right, key and query lengths, window,
 * scale, dropout (the f64 reference drops by the same Philox stream, so a
 * single differently dropped weight would fail), f16, contiguous shards of
 * uneven lengths, compute in slices of 7 query rows (odd cases); the
 * skipped steps of a causal contiguous ring. Bad input: ring_bad.c. */
#include "attn_dist.h"
#include "check.h"
#include "ring_test.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int P, R;

/* src/dist/ring_common.c: query rows per compute slice (0 = default) */
extern int64_t attn__ring_slice_override;

enum {
    M_CAUSAL = 1,
    M_BR = 2,
    M_WINDOW = 4,
    M_KLEN = 8,
    M_QLEN = 16,
    M_SOFTCAP = 32,    /* mask.softcap = 0.9 (scores of O(1): the cap bites) */
    M_ALIBI = 64,      /* causal ALiBi with the standard slopes */
    M_ALIBI_SYM = 128, /* symmetric ALiBi with given slopes */
    M_SINKS = 256,     /* per-head sinks, and their gradient */
    M_DOCS = 512,      /* ragged documents (doc_k too when Lq != Lk) */
    M_DOC_SHARDS = 1024, /* one document per contiguous shard (Lq == Lk):
                            every step but the first is skipped */
    M_USCORE = 2048,     /* a user score_mod (not additive: with dscore) */
    M_UMASK = 4096,      /* a head-dependent user mask_mod */
    M_UBLOCK = 8192,     /* and its block mask over the full sequence */
    M_ROPE = 16384,      /* rotary positions at the default positions */
    M_ROPE_POS = 32768   /* at given positions ([B * L]), interleaved, a
                            partial rotary dim and llama3 scaling */
};

/* score_mod: a per-head stretch and a distance penalty at global
 * positions, so that its slope (dscore) and the frame both matter */
int ring_user_score(void *ctx, int64_t b, int64_t h, int64_t i, int64_t j0,
                    int64_t n, double *score, double *dscore) {
    (void)ctx;
    const double a = 1.0 + 0.25 * (double)h;
    for (int64_t t = 0; t < n; t++) {
        const double dist = (double)(i - (j0 + t));
        score[t] = a * score[t] - 0.03 * (double)(b + 1) * fabs(dist);
        if (dscore) dscore[t] = a;
    }
    return 0;
}

/* mask_mod: whole 8 x 8 blocks hidden per head (EMPTY tiles, so the ring
 * skips pairs per head), and a scatter of single pairs (PARTIAL ones) */
static int user_mask(void *ctx, int64_t b, int64_t h, int64_t i, int64_t j0,
                     int64_t n, uint8_t *keep) {
    (void)ctx;
    for (int64_t t = 0; t < n; t++) {
        const int64_t j = j0 + t;
        keep[t] = (j / 8 + i / 8 + h) % 3 != 2 && (i + j + h + b) % 7 != 0;
    }
    return 0;
}

typedef struct {
    int64_t B, H, Hkv, Lq, Lk, Dk, Dv;
    int mask;
    double scale, dropout;
    attn_ring_layout layout;
    int uneven; /* contiguous: rank r gets a share growing with r */
    attn_dtype dt;
} rcase;

/* O, lse, dq, dk, dv, dsinks */
static double max_ring_err[6], max_flash_err[6];

/* Ragged documents of one entry of L positions: cut at pseudo-random
 * places (about nd documents), ids growing by 1 or 2 from b. */
static void make_docs(int64_t *ids, int64_t L, int64_t b, int64_t nd,
                      unsigned long long *seed) {
    int64_t id = b;
    for (int64_t i = 0; i < L; i++) {
        if (i > 0 && test_rand(seed) < 2.0 * (double)nd / (double)L - 1.0)
            id += 1 + (test_rand(seed) > 0.5);
        ids[i] = id;
    }
}

static float *frand(size_t n, unsigned long long *seed) {
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = (float)test_rand(seed);
    return x;
}

/* Runs of this rank: the layout's, or the uneven split (rank r gets a
 * share proportional to r + 1). */
static int my_runs(const rcase *c, int64_t L, int64_t s[2], int64_t l[2]) {
    int n = 0;
    if (!c->uneven) {
        if (attn_ring_runs(c->layout, L, P, R, s, l, &n)) return -1;
        return n;
    }
    int64_t tot = (int64_t)P * (P + 1) / 2, at = 0;
    for (int r = 0; r <= R; r++) {
        int64_t len = r == P - 1 ? L - at : L * (r + 1) / tot;
        if (len < 1) len = 1;
        if (r == R) {
            s[0] = at;
            l[0] = len;
        }
        at += len;
    }
    return 1;
}

static int64_t rows_of(const int64_t l[2], int n) {
    return n == 2 ? l[0] + l[1] : l[0];
}

/* Copies this rank's rows of full into shard (to_full = 0) or back. */
static void copy_runs(float *full, float *shard, int64_t BH, int64_t L,
                      int64_t D, const int64_t s[2], const int64_t l[2], int n,
                      int to_full) {
    int64_t rows = rows_of(l, n);
    for (int64_t bh = 0; bh < BH; bh++) {
        int64_t j = 0;
        for (int x = 0; x < n; x++)
            for (int64_t i = s[x]; i < s[x] + l[x]; i++, j++) {
                float *f = full + (bh * L + i) * D,
                      *sh = shard + (bh * rows + j) * D;
                if (to_full)
                    memcpy(f, sh, (size_t)D * sizeof(float));
                else
                    memcpy(sh, f, (size_t)D * sizeof(float));
            }
    }
}

/* Every rank's rows into one full array on every rank (rows are disjoint). */
static float *gather(float *shard, int64_t BH, int64_t L, int64_t D,
                     const int64_t s[2], const int64_t l[2], int n) {
    size_t sz = (size_t)(BH * L * D);
    float *full = calloc(sz, sizeof(float));
    copy_runs(full, shard, BH, L, D, s, l, n, 1);
    MPI_Allreduce(MPI_IN_PLACE, full, (int)sz, MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
    return full;
}

static double err_f32(const float *a, const double *ref, size_t n) {
    double e = 0;
    for (size_t i = 0; i < n; i++) {
        if (isinf(ref[i]) || isinf(a[i])) {
            if (a[i] != ref[i]) return INFINITY;
            continue;
        }
        double d = fabs((double)a[i] - ref[i]);
        if (!(d <= e)) e = d; /* NaN propagates */
    }
    return e;
}

static double *to_f64(const float *x, size_t n) {
    double *y = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) y[i] = x[i];
    return y;
}

static double absmax(const double *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++)
        if (fabs(x[i]) > m) m = fabs(x[i]);
    return m;
}

static void run_case(const rcase *c, int idx, int64_t *klen, int64_t *qlen) {
    int64_t *docq = NULL, *dock = NULL;
    double slopes[16], sinks[16], gs_ref[16], gs_flash[16], gs_ring[16];
    unsigned long long seed = 1234567 + (unsigned long long)idx * 7919;
    /* odd cases compute in slices of 7 query rows (the default slices
     * only cut runs longer than 512 rows) */
    attn__ring_slice_override = idx % 2 ? 7 : 0;
    const int64_t B = c->B, H = c->H, Hkv = c->Hkv, Lq = c->Lq, Lk = c->Lk;
    const int64_t Dk = c->Dk, Dv = c->Dv;
    const size_t nq = (size_t)(B * H * Lq * Dk),
                 nk = (size_t)(B * Hkv * Lk * Dk);
    const size_t nv = (size_t)(B * Hkv * Lk * Dv),
                 no = (size_t)(B * H * Lq * Dv);
    const size_t nl = (size_t)(B * H * Lq);
    float *q = frand(nq, &seed), *k = frand(nk, &seed), *v = frand(nv, &seed);
    float *dout = frand(no, &seed);
    attn_sdpa_opts o;
    attn_sdpa_opts_init(&o);
    o.threads = 1;
    o.scale = c->scale;
    o.mask.causal = (c->mask & M_CAUSAL) != 0;
    o.mask.align =
        (c->mask & M_BR) ? ATTN_ALIGN_BOTTOM_RIGHT : ATTN_ALIGN_TOP_LEFT;
    if (c->mask & M_WINDOW) {
        o.mask.window_left = Lk / 4 + 2;
        o.mask.window_right = 3;
    }
    for (int64_t b = 0; b < B; b++) {
        klen[b] = Lk - 3 * b - 1 > 1 ? Lk - 3 * b - 1 : 1;
        qlen[b] = Lq - 2 * b > 1 ? Lq - 2 * b : 1;
    }
    if (c->mask & M_KLEN) o.mask.key_lengths = klen;
    if (c->mask & M_QLEN) o.mask.query_lengths = qlen;
    o.dropout_p = c->dropout;
    o.seed = 99 + (uint64_t)idx;
    if (c->mask & M_SOFTCAP) o.mask.softcap = 0.9;
    if (c->mask & M_ALIBI) o.mask.alibi = ATTN_ALIBI_CAUSAL;
    if (c->mask & M_ALIBI_SYM) {
        o.mask.alibi = ATTN_ALIBI_SYMMETRIC;
        for (int64_t h = 0; h < H; h++) slopes[h] = 0.05 + 0.11 * (double)h;
        o.mask.alibi_slopes = slopes;
        o.mask.n_alibi_slopes = H;
    }
    if (c->mask & M_SINKS) {
        for (int64_t h = 0; h < H; h++) sinks[h] = 2.0 * test_rand(&seed);
        o.mask.sinks = sinks;
        o.mask.n_sinks = H;
    }
    if (c->mask & M_DOC_SHARDS) {
        docq = malloc((size_t)(B * Lq) * sizeof(int64_t));
        for (int r = 0; r < P; r++) {
            int64_t s0[2], l0[2];
            int n0 = 0;
            attn_ring_runs(ATTN_RING_CONTIGUOUS, Lq, P, r, s0, l0, &n0);
            for (int64_t b = 0; b < B; b++)
                for (int64_t i = s0[0]; i < s0[0] + l0[0]; i++)
                    docq[b * Lq + i] = r;
        }
        o.mask.doc_q = docq;
        o.mask.n_doc_q = B * Lq;
    }
    attn_block_mask bm;
    uint8_t *bcls = NULL;
    if (c->mask & M_USCORE) o.mask.score_mod = ring_user_score;
    if (c->mask & (M_UMASK | M_UBLOCK)) o.mask.mask_mod = user_mask;
    if (c->mask & M_UBLOCK) {
        int64_t ncls = 0;
        CHECK_STATUS(attn_block_mask_size(B, H, Lq, Lk, 8, 8, &ncls), ATTN_OK);
        bcls = malloc((size_t)ncls);
        CHECK_STATUS(attn_block_mask_build(&bm, user_mask, NULL, B, H, Lq, Lk,
                                           8, 8, bcls, ncls),
                     ATTN_OK);
        o.mask.block_mask = &bm;
    }
    if (c->mask & M_DOCS) {
        docq = malloc((size_t)(B * Lq) * sizeof(int64_t));
        for (int64_t b = 0; b < B; b++)
            make_docs(docq + b * Lq, Lq, b, 4, &seed);
        o.mask.doc_q = docq;
        o.mask.n_doc_q = B * Lq;
        if (Lq != Lk) { /* the same documents, scaled to the keys */
            dock = malloc((size_t)(B * Lk) * sizeof(int64_t));
            for (int64_t b = 0; b < B; b++)
                for (int64_t j = 0; j < Lk; j++)
                    dock[b * Lk + j] = docq[b * Lq + j * Lq / Lk];
            o.mask.doc_k = dock;
            o.mask.n_doc_k = B * Lk;
        }
    }
    attn_rope rope;
    attn_rope_init(&rope);
    int64_t *rqpos = NULL, *rkpos = NULL;
    if (c->mask & (M_ROPE | M_ROPE_POS)) o.rope = &rope;
    if (c->mask & M_ROPE_POS) {
        rope.style = ATTN_ROPE_INTERLEAVED;
        rope.rotary_dim = Dk >= 4 ? Dk - 2 : Dk;
        rope.theta = 500.0;
        rope.scaling = ATTN_ROPE_SCALING_LLAMA3;
        rope.factor = 4.0;
        rope.original_max_position = 64.0;
        rqpos = malloc((size_t)(B * Lq) * sizeof(int64_t));
        rkpos = malloc((size_t)(B * Lk) * sizeof(int64_t));
        for (int64_t b = 0; b < B; b++) {
            for (int64_t i = 0; i < Lq; i++) rqpos[b * Lq + i] = 3 * i + b + 5;
            for (int64_t j = 0; j < Lk; j++) rkpos[b * Lk + j] = 2 * j + 7 * b;
        }
        o.rope_q_positions = rqpos;
        o.n_rope_q_positions = B * Lq;
        o.rope_k_positions = rkpos;
        o.n_rope_k_positions = B * Lk;
    }
    char what[200];
    snprintf(
        what, sizeof what,
        "P %d case %d: B%lld H%lld/%lld Lq %lld Lk %lld D %lld/%lld mask %#x "
        "scale %g p %g %s%s %s",
        P, idx, (long long)B, (long long)H, (long long)Hkv, (long long)Lq,
        (long long)Lk, (long long)Dk, (long long)Dv, c->mask, c->scale,
        c->dropout, c->layout == ATTN_RING_ZIGZAG ? "zigzag" : "contiguous",
        c->uneven ? " uneven" : "", attn_dtype_name(c->dt));

    /* inputs in the case's dtype (f16: the one-process run sees the same
     * rounded values) */
    attn_tensor Q = attn_tensor_4d(q, ATTN_F32, B, H, Lq, Dk);
    attn_tensor K = attn_tensor_4d(k, ATTN_F32, B, Hkv, Lk, Dk);
    attn_tensor V = attn_tensor_4d(v, ATTN_F32, B, Hkv, Lk, Dv);
    uint16_t *qh = NULL, *kh = NULL, *vh = NULL;
    if (c->dt == ATTN_F16) {
        qh = malloc(nq * 2);
        kh = malloc(nk * 2);
        vh = malloc(nv * 2);
        attn_convert(q, ATTN_F32, qh, ATTN_F16, nq);
        attn_convert(k, ATTN_F32, kh, ATTN_F16, nk);
        attn_convert(v, ATTN_F32, vh, ATTN_F16, nv);
        Q = attn_tensor_4d(qh, ATTN_F16, B, H, Lq, Dk);
        K = attn_tensor_4d(kh, ATTN_F16, B, Hkv, Lk, Dk);
        V = attn_tensor_4d(vh, ATTN_F16, B, Hkv, Lk, Dv);
    }

    /* one process: flash, and the f64 reference */
    float *of = malloc(no * sizeof(float)), *lf = malloc(nl * sizeof(float));
    double *oref = malloc(no * sizeof(double));
    float *lref = malloc(nl * sizeof(float));
    attn_tensor Of = attn_tensor_4d(of, ATTN_F32, B, H, Lq, Dv);
    attn_tensor Oref = attn_tensor_4d(oref, ATTN_F64, B, H, Lq, Dv);
    o.impl = ATTN_IMPL_FLASH;
    CHECK_STATUS(attn_sdpa_forward(&Q, &K, &V, &o, &Of, NULL, lf), ATTN_OK);
    o.impl = ATTN_IMPL_REF;
    CHECK_STATUS(attn_sdpa_forward(&Q, &K, &V, &o, &Oref, NULL, lref), ATTN_OK);
    o.impl = ATTN_IMPL_AUTO;

    /* shards */
    int64_t qs[2], ql[2], ks[2], kl[2];
    int nqr = my_runs(c, Lq, qs, ql), nkr = my_runs(c, Lk, ks, kl);
    CHECK(nqr > 0 && nkr > 0);
    if (nqr <= 0 || nkr <= 0) return;
    const int64_t mq = rows_of(ql, nqr), mk = rows_of(kl, nkr);
    const size_t es = attn_dtype_size(c->dt);
    void *qsh = malloc((size_t)(B * H * mq * Dk) * es);
    void *ksh = malloc((size_t)(B * Hkv * mk * Dk) * es);
    void *vsh = malloc((size_t)(B * Hkv * mk * Dv) * es);
    attn_tensor Qs = attn_tensor_4d(qsh, c->dt, B, H, mq, Dk);
    attn_tensor Ks = attn_tensor_4d(ksh, c->dt, B, Hkv, mk, Dk);
    attn_tensor Vs = attn_tensor_4d(vsh, c->dt, B, Hkv, mk, Dv);
    if (c->uneven) {
        copy_runs(q, qsh, B * H, Lq, Dk, qs, ql, nqr, 0);
        copy_runs(k, ksh, B * Hkv, Lk, Dk, ks, kl, nkr, 0);
        copy_runs(v, vsh, B * Hkv, Lk, Dv, ks, kl, nkr, 0);
    } else {
        CHECK_STATUS(attn_ring_shard(c->layout, P, R, &Q, &Qs), ATTN_OK);
        CHECK_STATUS(attn_ring_shard(c->layout, P, R, &K, &Ks), ATTN_OK);
        CHECK_STATUS(attn_ring_shard(c->layout, P, R, &V, &Vs), ATTN_OK);
    }
    float *osh = malloc((size_t)(B * H * mq * Dv) * sizeof(float));
    float *lsh = malloc((size_t)(B * H * mq) * sizeof(float));
    attn_tensor Os = attn_tensor_4d(osh, ATTN_F32, B, H, mq, Dv);
    attn_ring_stats stats;
    memset(&stats, 0, sizeof stats);
    attn_status st = attn_ring_sdpa_forward(MPI_COMM_WORLD, c->layout, &Qs, &Ks,
                                            &Vs, &o, &Os, lsh, &stats);
    CHECK_MSG(st == ATTN_OK, "%s: ring forward: %s", what, attn_last_error());
    CHECK(stats.steps == P);
    if (c->mask == M_CAUSAL && c->layout == ATTN_RING_CONTIGUOUS &&
        !c->uneven &&
        Lq == Lk) /* rank r's queries see nothing of ranks r + 1 .. P - 1 */
        CHECK_MSG(stats.skipped == P - 1 - R, "%s: rank %d skipped %d steps",
                  what, R, stats.skipped);
    if (c->mask & M_DOC_SHARDS) /* no block of another rank is computed */
        CHECK_MSG(stats.skipped == P - 1, "%s: rank %d skipped %d steps", what,
                  R, stats.skipped);
    float *oring = gather(osh, B * H, Lq, Dv, qs, ql, nqr);
    float *lring = gather(lsh, B * H, Lq, 1, qs, ql, nqr);
    double *lref64 = to_f64(lref, nl);
    double e[6], ef[6];
    e[0] = err_f32(oring, oref, no);
    ef[0] = err_f32(of, oref, no);
    e[1] = err_f32(lring, lref64, nl);
    ef[1] = err_f32(lf, lref64, nl);
    CHECK_MSG(e[0] <= 2 * ef[0] + 1e-6, "%s: ring O error %.3g, flash %.3g",
              what, e[0], ef[0]);
    CHECK_MSG(e[1] <= 2 * ef[1] + 1e-6, "%s: ring lse error %.3g, flash %.3g",
              what, e[1], ef[1]);

    /* backward: the ring's own O and lse, against flash's with flash's */
    double *gref = calloc(nq + nk + nv, sizeof(double));
    float *gf = calloc(nq + nk + nv, sizeof(float));
    attn_tensor dO = attn_tensor_4d(dout, ATTN_F32, B, H, Lq, Dv);
    attn_tensor dQr = attn_tensor_4d(gref, ATTN_F64, B, H, Lq, Dk);
    attn_tensor dKr = attn_tensor_4d(gref + nq, ATTN_F64, B, Hkv, Lk, Dk);
    attn_tensor dVr = attn_tensor_4d(gref + nq + nk, ATTN_F64, B, Hkv, Lk, Dv);
    attn_tensor dQf = attn_tensor_4d(gf, ATTN_F32, B, H, Lq, Dk);
    attn_tensor dKf = attn_tensor_4d(gf + nq, ATTN_F32, B, Hkv, Lk, Dk);
    attn_tensor dVf = attn_tensor_4d(gf + nq + nk, ATTN_F32, B, Hkv, Lk, Dv);
    memset(gs_ref, 0, sizeof gs_ref);
    memset(gs_flash, 0, sizeof gs_flash);
    for (int64_t h = 0; h < H; h++) gs_ring[h] = 0.25; /* added into */
    o.impl = ATTN_IMPL_REF;
    if (o.mask.sinks) o.mask.sinks_grad = gs_ref;
    CHECK_STATUS(attn_sdpa_backward(&Q, &K, &V, &Of, lf, &dO, &o, &dQr, &dKr,
                                    &dVr, NULL),
                 ATTN_OK);
    o.impl = ATTN_IMPL_FLASH;
    if (o.mask.sinks) o.mask.sinks_grad = gs_flash;
    CHECK_STATUS(attn_sdpa_backward(&Q, &K, &V, &Of, lf, &dO, &o, &dQf, &dKf,
                                    &dVf, NULL),
                 ATTN_OK);
    o.impl = ATTN_IMPL_AUTO;
    if (o.mask.sinks) o.mask.sinks_grad = gs_ring;
    float *dosh = malloc((size_t)(B * H * mq * Dv) * sizeof(float));
    copy_runs(dout, dosh, B * H, Lq, Dv, qs, ql, nqr, 0);
    float *gsh = calloc((size_t)(B * H * mq * Dk + B * Hkv * mk * (Dk + Dv)),
                        sizeof(float));
    float *dqs = gsh, *dks = gsh + B * H * mq * Dk,
          *dvs = dks + B * Hkv * mk * Dk;
    attn_tensor dOs = attn_tensor_4d(dosh, ATTN_F32, B, H, mq, Dv);
    attn_tensor dQs = attn_tensor_4d(dqs, ATTN_F32, B, H, mq, Dk);
    attn_tensor dKs = attn_tensor_4d(dks, ATTN_F32, B, Hkv, mk, Dk);
    attn_tensor dVs = attn_tensor_4d(dvs, ATTN_F32, B, Hkv, mk, Dv);
    st = attn_ring_sdpa_backward(MPI_COMM_WORLD, c->layout, &Qs, &Ks, &Vs, &Os,
                                 lsh, &dOs, &o, &dQs, &dKs, &dVs, NULL);
    CHECK_MSG(st == ATTN_OK, "%s: ring backward: %s", what, attn_last_error());
    float *dqr = gather(dqs, B * H, Lq, Dk, qs, ql, nqr);
    float *dkr = gather(dks, B * Hkv, Lk, Dk, ks, kl, nkr);
    float *dvr = gather(dvs, B * Hkv, Lk, Dv, ks, kl, nkr);
    const float *gr[3] = {dqr, dkr, dvr};
    const size_t gn[3] = {nq, nk, nv}, go[3] = {0, nq, nq + nk};
    static const char *gname[3] = {"dq", "dk", "dv"};
    for (int g = 0; g < 3; g++) {
        double m = absmax(gref + go[g], gn[g]);
        m = m > 1 ? m : 1;
        e[2 + g] = err_f32(gr[g], gref + go[g], gn[g]) / m;
        ef[2 + g] = err_f32(gf + go[g], gref + go[g], gn[g]) / m;
        CHECK_MSG(e[2 + g] <= 2 * ef[2 + g] + 1e-6,
                  "%s: ring %s error %.3g, flash %.3g (relative to %.3g)", what,
                  gname[g], e[2 + g], ef[2 + g], m);
    }
    e[5] = ef[5] = 0;
    if (o.mask.sinks) {
        /* every rank holds the full gradient (added into its 0.25) */
        double m = 1;
        for (int64_t h = 0; h < H; h++)
            if (fabs(gs_ref[h]) > m) m = fabs(gs_ref[h]);
        for (int64_t h = 0; h < H; h++) {
            double er = fabs(gs_ring[h] - 0.25 - gs_ref[h]) / m,
                   efl = fabs(gs_flash[h] - gs_ref[h]) / m;
            if (!(er <= e[5])) e[5] = er;
            if (efl > ef[5]) ef[5] = efl;
        }
        CHECK_MSG(e[5] <= 2 * ef[5] + 1e-6,
                  "%s: rank %d: ring dsinks error %.3g, flash %.3g", what, R,
                  e[5], ef[5]);
    }
    for (int x = 0; x < 6; x++) {
        if (e[x] > max_ring_err[x]) max_ring_err[x] = e[x];
        if (ef[x] > max_flash_err[x]) max_flash_err[x] = ef[x];
    }
    free(dqr);
    free(dkr);
    free(dvr);
    free(gsh);
    free(dosh);
    free(gref);
    free(gf);
    free(oring);
    free(lring);
    free(lref64);
    free(osh);
    free(lsh);
    free(qsh);
    free(ksh);
    free(vsh);
    free(of);
    free(lf);
    free(oref);
    free(lref);
    free(q);
    free(k);
    free(v);
    free(dout);
    free(qh);
    free(kh);
    free(vh);
    free(docq);
    free(dock);
    free(bcls);
    free(rqpos);
    free(rkpos);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    MPI_Comm_rank(MPI_COMM_WORLD, &R);
    const attn_ring_layout C = ATTN_RING_CONTIGUOUS, Z = ATTN_RING_ZIGZAG;
    /* B, H, Hkv, Lq, Lk, Dk, Dv, mask, scale, dropout, layout, uneven, dtype */
    const rcase cases[] = {
        {1, 2, 2, 37, 37, 16, 16, 0, 0, 0, C, 0, ATTN_F32},
        {1, 2, 2, 37, 37, 16, 16, M_CAUSAL, 0, 0, C, 0, ATTN_F32},
        {1, 2, 2, 37, 37, 16, 16, M_CAUSAL, 0, 0, Z, 0, ATTN_F32},
        {2, 4, 2, 50, 50, 7, 5, M_CAUSAL | M_KLEN, 0.3, 0, Z, 0, ATTN_F32},
        {2, 4, 1, 29, 45, 8, 8, M_CAUSAL | M_BR | M_KLEN, 0, 0, C, 0, ATTN_F32},
        {2, 2, 2, 45, 29, 8, 12, M_CAUSAL | M_BR, 0, 0, C, 1, ATTN_F32},
        {1, 3, 3, 61, 61, 16, 16, M_CAUSAL | M_BR | M_KLEN | M_QLEN, 0, 0, Z, 0,
         ATTN_F32},
        {1, 2, 1, 70, 70, 16, 16, M_WINDOW, 0, 0, C, 0, ATTN_F32},
        {1, 2, 2, 67, 67, 16, 16, M_CAUSAL | M_WINDOW, 0, 0, Z, 0, ATTN_F32},
        {2, 2, 2, 41, 33, 16, 16, M_KLEN | M_QLEN, 0, 0, C, 1, ATTN_F32},
        {1, 2, 2, 300, 300, 32, 32, M_CAUSAL, 0, 0, Z, 0, ATTN_F32},
        {1, 2, 2, 53, 53, 16, 16, M_CAUSAL, 0, 0.25, Z, 0, ATTN_F32},
        {2, 2, 1, 40, 47, 8, 8, M_KLEN, 0, 0.4, C, 0, ATTN_F32},
        {1, 2, 2, 39, 39, 16, 16, M_CAUSAL, 0, 0, Z, 0, ATTN_F16},
        /* score modifiers and documents, one at a time and together */
        {1, 2, 2, 37, 37, 16, 16, M_SOFTCAP, 0, 0, C, 0, ATTN_F32},
        {2, 3, 3, 43, 43, 8, 8, M_CAUSAL | M_SOFTCAP, 0, 0, Z, 0, ATTN_F32},
        {1, 4, 2, 41, 41, 8, 8, M_CAUSAL | M_ALIBI, 0, 0, Z, 0, ATTN_F32},
        {1, 3, 3, 35, 47, 8, 8, M_ALIBI_SYM | M_KLEN, 0, 0, C, 0, ATTN_F32},
        {2, 2, 2, 38, 38, 8, 12, M_SINKS, 0, 0, Z, 0, ATTN_F32},
        {1, 3, 1, 45, 45, 16, 16, M_CAUSAL | M_SINKS | M_QLEN, 0, 0, C, 1,
         ATTN_F32},
        {2, 2, 2, 57, 57, 8, 8, M_DOCS, 0, 0, C, 0, ATTN_F32},
        {2, 2, 1, 61, 61, 8, 8, M_CAUSAL | M_DOCS, 0, 0, Z, 0, ATTN_F32},
        {1, 2, 2, 40, 52, 8, 8, M_CAUSAL | M_BR | M_DOCS, 0, 0, C, 0, ATTN_F32},
        {2, 4, 2, 63, 63, 8, 8,
         M_CAUSAL | M_SOFTCAP | M_DOCS | M_SINKS | M_ALIBI | M_KLEN, 0.4, 0, Z,
         0, ATTN_F32},
        {1, 2, 2, 59, 59, 16, 16,
         M_CAUSAL | M_SOFTCAP | M_DOCS | M_SINKS | M_ALIBI_SYM | M_WINDOW, 0,
         0.2, C, 1, ATTN_F32},
        {1, 2, 2, 47, 47, 16, 16, M_CAUSAL | M_SOFTCAP | M_DOCS | M_SINKS, 0, 0,
         Z, 0, ATTN_F16},
        {2, 2, 2, 45, 45, 8, 8, M_DOC_SHARDS | M_SINKS | M_ALIBI_SYM, 0, 0, C,
         0, ATTN_F32},
        /* user functions: positions are the full sequence's on every rank */
        {1, 2, 2, 41, 41, 8, 8, M_USCORE, 0, 0, C, 0, ATTN_F32},
        {2, 3, 3, 47, 39, 8, 8, M_CAUSAL | M_BR | M_USCORE, 0, 0, Z, 0,
         ATTN_F32},
        {1, 3, 1, 53, 53, 8, 8, M_UMASK, 0, 0, Z, 0, ATTN_F32},
        {2, 2, 2, 50, 50, 8, 8, M_CAUSAL | M_UBLOCK | M_USCORE | M_SINKS, 0, 0,
         C, 1, ATTN_F32},
        {1, 4, 2, 64, 64, 8, 8,
         M_CAUSAL | M_UBLOCK | M_USCORE | M_SOFTCAP | M_DOCS | M_ALIBI, 0, 0.2,
         Z, 0, ATTN_F32},
        /* rotary positions: each rank's rows at their global positions */
        {1, 2, 2, 37, 37, 16, 16, M_CAUSAL | M_ROPE, 0, 0, Z, 0, ATTN_F32},
        {2, 4, 2, 29, 45, 8, 8, M_CAUSAL | M_BR | M_KLEN | M_ROPE, 0, 0, C, 0,
         ATTN_F32},
        {2, 2, 1, 41, 33, 16, 16, M_ROPE_POS | M_KLEN | M_QLEN, 0, 0, C, 1,
         ATTN_F32},
        {1, 2, 2, 47, 47, 16, 16, M_CAUSAL | M_ROPE | M_SINKS, 0, 0, Z, 0,
         ATTN_F16},
        {2, 2, 2, 50, 50, 8, 8, M_CAUSAL | M_ROPE_POS | M_DOCS, 0, 0.2, Z, 0,
         ATTN_F32},
        {1, 3, 3, 61, 61, 16, 16, M_CAUSAL | M_BR | M_QLEN | M_ROPE, 0, 0, Z, 0,
         ATTN_F32},
        {2, 4, 2, 37, 37, 8, 8, M_CAUSAL | M_KLEN | M_ROPE, 0, 0, Z, 0,
         ATTN_F32},
    };
    const int ncases = (int)(sizeof cases / sizeof cases[0]);
    int64_t klen[8], qlen[8];
    for (int i = 0; i < ncases; i++) run_case(&cases[i], i, klen, qlen);
    int bad_checks = 0, bad_failures = 0;
    ring_bad_inputs(P, R, &bad_checks, &bad_failures);
    check_count += bad_checks;
    int mine = check_failures + bad_failures, all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (R == 0) {
        static const char *nm[6] = {"O", "lse", "dq", "dk", "dv", "dsinks"};
        for (int x = 0; x < 6; x++)
            printf("ring P=%d: max %s error %.3g (one-process flash %.3g)\n", P,
                   nm[x], max_ring_err[x], max_flash_err[x]);
        printf("ring_test P=%d: %d checks on rank 0, %d failed on all ranks\n",
               P, check_count, all);
    }
    MPI_Finalize();
    return all ? 1 : 0;
}
