/* Ring attention under mpirun -np P: bad input. Every rank must return
 * the same error (no rank left waiting in a collective: ctest's timeout
 * catches a hang). */
#include "attn_dist.h"
#include "check.h"
#include "ring_test.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int P, R;

/* Every rank got status want (and, if given, a message containing frag). */
static void expect_all(attn_status st, attn_status want, const char *frag,
                       const char *what) {
    int bad = st != want || (frag && !strstr(attn_last_error(), frag)), any = 0;
    if (bad)
        fprintf(stderr, "rank %d: %s: status %d (want %d): %s\n", R, what,
                (int)st, (int)want, attn_last_error());
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    CHECK_MSG(!any, "%s: not the same error on every rank", what);
}

void ring_bad_inputs(int nranks, int rank, int *checks, int *failures) {
    P = nranks;
    R = rank;
    const int64_t B = 1, Hkv = 1, D = 4;
    int64_t L = 6 * P + 1, H = 2;
    float *buf = calloc((size_t)(B * 4 * (L + 8) * D), sizeof(float));
    float *out = calloc((size_t)(B * 4 * (L + 8) * D), sizeof(float));
    float *lse = calloc((size_t)(B * 4 * (L + 8)), sizeof(float));
    attn_sdpa_opts o;
    attn_sdpa_opts_init(&o);
    o.mask.causal = 1;
    int64_t n;
    attn_ring_shard_length(ATTN_RING_ZIGZAG, L, P, R, &n);

    /* zigzag shards one row off (rank 0 one more, the last one fewer) */
    if (P >= 2) {
        int64_t m = n + (R == 0) - (R == P - 1);
        attn_tensor q = attn_tensor_4d(buf, ATTN_F32, B, H, m, D);
        attn_tensor kv = attn_tensor_4d(buf, ATTN_F32, B, Hkv, m, D);
        attn_tensor O = attn_tensor_4d(out, ATTN_F32, B, H, m, D);
        attn_status st = attn_ring_sdpa_forward(
            MPI_COMM_WORLD, ATTN_RING_ZIGZAG, &q, &kv, &kv, &o, &O, lse, NULL);
        expect_all(st, ATTN_E_SHAPE, "ring zigzag: rank 0 holds",
                   "zigzag lengths");
    }
    /* the last rank has other heads */
    if (P >= 2) {
        int64_t h = R == P - 1 ? 4 : H;
        attn_tensor q = attn_tensor_4d(buf, ATTN_F32, B, h, n, D);
        attn_tensor kv = attn_tensor_4d(buf, ATTN_F32, B, Hkv, n, D);
        attn_tensor O = attn_tensor_4d(out, ATTN_F32, B, h, n, D);
        attn_status st = attn_ring_sdpa_forward(
            MPI_COMM_WORLD, ATTN_RING_ZIGZAG, &q, &kv, &kv, &o, &O, lse, NULL);
        char frag[100];
        snprintf(frag, sizeof frag,
                 "rank %d has 4 for the number of query heads "
                 "but rank 0 has 2",
                 P - 1);
        expect_all(st, ATTN_E_SHAPE, frag, "heads across ranks");
        /* and the backward */
        attn_tensor G = attn_tensor_4d(out, ATTN_F32, B, h, n, D);
        attn_tensor Gk = attn_tensor_4d(out, ATTN_F32, B, Hkv, n, D);
        st = attn_ring_sdpa_backward(MPI_COMM_WORLD, ATTN_RING_ZIGZAG, &q, &kv,
                                     &kv, &O, lse, &O, &o, &G, &Gk, &Gk, NULL);
        expect_all(st, ATTN_E_SHAPE, frag, "heads across ranks (backward)");
    }
    /* more ranks than positions: the last rank holds nothing */
    if (P >= 2) {
        int64_t m = R == P - 1 ? 0 : 1;
        attn_tensor q = attn_tensor_4d(buf, ATTN_F32, B, H, 1, D);
        q.shape[2] = m;
        attn_tensor kv = attn_tensor_4d(buf, ATTN_F32, B, Hkv, 1, D);
        kv.shape[2] = m;
        attn_tensor O = attn_tensor_4d(out, ATTN_F32, B, H, 1, D);
        O.shape[2] = m;
        attn_status st =
            attn_ring_sdpa_forward(MPI_COMM_WORLD, ATTN_RING_CONTIGUOUS, &q,
                                   &kv, &kv, &o, &O, lse, NULL);
        char frag[120];
        snprintf(frag, sizeof frag,
                 "rank %d holds no queries: %d ranks for a "
                 "sequence of %d queries",
                 P - 1, P, P - 1);
        expect_all(st, ATTN_E_SHAPE, frag, "more ranks than positions");
        /* the layout helper says it too */
        int64_t s2[2], l2[2];
        int nr;
        CHECK_STATUS(
            attn_ring_runs(ATTN_RING_CONTIGUOUS, P - 1, P, R, s2, l2, &nr),
            ATTN_E_SHAPE);
        CHECK_STATUS(
            attn_ring_runs(ATTN_RING_ZIGZAG, 2 * P - 1, P, R, s2, l2, &nr),
            ATTN_E_SHAPE);
    }
    /* rotary settings or positions that differ across ranks */
    if (P >= 2) {
        attn_tensor q = attn_tensor_4d(buf, ATTN_F32, B, H, n, D);
        attn_tensor kv = attn_tensor_4d(buf, ATTN_F32, B, Hkv, n, D);
        attn_tensor O = attn_tensor_4d(out, ATTN_F32, B, H, n, D);
        attn_rope rope;
        attn_rope_init(&rope);
        if (R == P - 1) rope.theta = 500.0;
        attn_sdpa_opts ro = o;
        ro.rope = &rope;
        attn_status st = attn_ring_sdpa_forward(
            MPI_COMM_WORLD, ATTN_RING_ZIGZAG, &q, &kv, &kv, &ro, &O, lse, NULL);
        expect_all(st, ATTN_E_SHAPE, "differ in opts.rope",
                   "rope across ranks");
        rope.theta = 10000.0;
        int64_t *pos = calloc((size_t)L, sizeof(int64_t));
        for (int64_t i = 0; i < L; i++) pos[i] = i + (R == P - 1 && i == 2);
        ro.rope_q_positions = pos;
        ro.n_rope_q_positions = L;
        st = attn_ring_sdpa_forward(MPI_COMM_WORLD, ATTN_RING_ZIGZAG, &q, &kv,
                                    &kv, &ro, &O, lse, NULL);
        expect_all(st, ATTN_E_SHAPE, "pass different opts.rope_q_positions",
                   "rope positions across ranks");
        /* positions of the shard, not of the full sequence */
        for (int64_t i = 0; i < L; i++) pos[i] = i;
        ro.n_rope_q_positions = n;
        st = attn_ring_sdpa_forward(MPI_COMM_WORLD, ATTN_RING_ZIGZAG, &q, &kv,
                                    &kv, &ro, &O, lse, NULL);
        if (n != L)
            expect_all(st, ATTN_E_SHAPE, "n_rope_q_positions",
                       "rope positions of the shard");
        /* a bad rotation is refused before any transfer */
        ro.n_rope_q_positions = L;
        rope.rotary_dim = 3;
        st = attn_ring_sdpa_forward(MPI_COMM_WORLD, ATTN_RING_ZIGZAG, &q, &kv,
                                    &kv, &ro, &O, lse, NULL);
        expect_all(st, ATTN_E_INVALID, "rotary_dim", "odd rotary dim");
        free(pos);
    }
    /* a NaN on the last rank only: every rank reports it, naming the rank */
    {
        float *qb = calloc((size_t)(B * H * n * D), sizeof(float));
        if (R == P - 1) qb[3] = NAN;
        attn_tensor q = attn_tensor_4d(qb, ATTN_F32, B, H, n, D);
        attn_tensor kv = attn_tensor_4d(buf, ATTN_F32, B, Hkv, n, D);
        attn_tensor O = attn_tensor_4d(out, ATTN_F32, B, H, n, D);
        attn_status st = attn_ring_sdpa_forward(
            MPI_COMM_WORLD, ATTN_RING_ZIGZAG, &q, &kv, &kv, &o, &O, lse, NULL);
        char frag[40];
        snprintf(frag, sizeof frag, "ring: rank %d: q[", P - 1);
        expect_all(st, ATTN_E_NONFINITE, frag, "NaN on one rank");
        free(qb);
    }
    /* options that differ: causal on rank 0 only */
    if (P >= 2) {
        attn_sdpa_opts o2 = o;
        o2.mask.causal = R == 0;
        attn_tensor q = attn_tensor_4d(buf, ATTN_F32, B, H, n, D);
        attn_tensor kv = attn_tensor_4d(buf, ATTN_F32, B, Hkv, n, D);
        attn_tensor O = attn_tensor_4d(out, ATTN_F32, B, H, n, D);
        attn_status st = attn_ring_sdpa_forward(
            MPI_COMM_WORLD, ATTN_RING_ZIGZAG, &q, &kv, &kv, &o2, &O, lse, NULL);
        expect_all(st, ATTN_E_SHAPE, "opts.mask.causal", "causal on one rank");
    }
    /* score modifiers and documents that differ across ranks, documents
     * that do not cover the full sequence, decreasing ids */
    {
        attn_tensor q = attn_tensor_4d(buf, ATTN_F32, B, H, n, D);
        attn_tensor kv = attn_tensor_4d(buf, ATTN_F32, B, Hkv, n, D);
        attn_tensor O = attn_tensor_4d(out, ATTN_F32, B, H, n, D);
        attn_sdpa_opts o2 = o;
        double sk[2] = {0.5, R == P - 1 && P > 1 ? 1.5 : 0.5};
        o2.mask.sinks = sk;
        o2.mask.n_sinks = H;
        attn_status st = attn_ring_sdpa_forward(
            MPI_COMM_WORLD, ATTN_RING_ZIGZAG, &q, &kv, &kv, &o2, &O, lse, NULL);
        if (P > 1)
            expect_all(st, ATTN_E_SHAPE, "opts.mask.sinks", "sinks differ");
        /* a user function on some ranks only */
        o2 = o;
        if (R == P - 1) o2.mask.score_mod = ring_user_score;
        st = attn_ring_sdpa_forward(MPI_COMM_WORLD, ATTN_RING_ZIGZAG, &q, &kv,
                                    &kv, &o2, &O, lse, NULL);
        if (P > 1)
            expect_all(st, ATTN_E_SHAPE, "the user functions",
                       "score_mod on one rank");
        int64_t *ids = calloc((size_t)L, sizeof(int64_t));
        for (int64_t i = L / 2; i < L; i++)
            ids[i] = 1 + (R == P - 1 && i == L - 1);
        o2 = o;
        o2.mask.doc_q = ids;
        o2.mask.n_doc_q = L;
        st = attn_ring_sdpa_forward(MPI_COMM_WORLD, ATTN_RING_ZIGZAG, &q, &kv,
                                    &kv, &o2, &O, lse, NULL);
        if (P > 1)
            expect_all(st, ATTN_E_SHAPE,
                       "pass different opts.mask.doc_q (every rank passes "
                       "the full sequence's document ids)",
                       "doc ids differ");
        o2.mask.n_doc_q = L - 1; /* the same on every rank, one short */
        st = attn_ring_sdpa_forward(MPI_COMM_WORLD, ATTN_RING_ZIGZAG, &q, &kv,
                                    &kv, &o2, &O, lse, NULL);
        char frag[120];
        snprintf(frag, sizeof frag,
                 "ring: mask.doc_q has %lld entries (n_doc_q) but the full "
                 "sequence needs B x Lq = 1 x %lld",
                 (long long)(L - 1), (long long)L);
        expect_all(st, ATTN_E_SHAPE, frag, "doc ids one short");
        /* decreasing ids: attn_mask_check's message on every rank */
        for (int64_t i = 0; i < L; i++) ids[i] = i == 3 ? 0 : 1;
        o2.mask.n_doc_q = L;
        st = attn_ring_sdpa_forward(MPI_COMM_WORLD, ATTN_RING_ZIGZAG, &q, &kv,
                                    &kv, &o2, &O, lse, NULL);
        expect_all(st, ATTN_E_INVALID, "mask.doc_q decreases in entry 0",
                   "decreasing doc ids");
        free(ids);
    }
    /* what the ring does not serve: a bias, the reference kernel */
    {
        attn_sdpa_opts o2 = o;
        float bz = 0;
        attn_tensor bias = attn_tensor_4d(&bz, ATTN_F32, 1, 1, 1, 1);
        o2.mask.bias = &bias;
        attn_tensor q = attn_tensor_4d(buf, ATTN_F32, B, H, n, D);
        attn_tensor kv = attn_tensor_4d(buf, ATTN_F32, B, Hkv, n, D);
        attn_tensor O = attn_tensor_4d(out, ATTN_F32, B, H, n, D);
        attn_status st = attn_ring_sdpa_forward(
            MPI_COMM_WORLD, ATTN_RING_ZIGZAG, &q, &kv, &kv, &o2, &O, lse, NULL);
        expect_all(st, ATTN_E_UNSUPPORTED, "mask.bias", "bias");
        o2 = o;
        o2.impl = ATTN_IMPL_REF;
        st = attn_ring_sdpa_forward(MPI_COMM_WORLD, ATTN_RING_ZIGZAG, &q, &kv,
                                    &kv, &o2, &O, lse, NULL);
        expect_all(st, ATTN_E_UNSUPPORTED, "impl", "IMPL_REF");
        /* key lengths beyond the full sequence (checked against it) */
        o2 = o;
        int64_t kl[1] = {L + 1};
        o2.mask.key_lengths = kl;
        st = attn_ring_sdpa_forward(MPI_COMM_WORLD, ATTN_RING_ZIGZAG, &q, &kv,
                                    &kv, &o2, &O, lse, NULL);
        expect_all(st, ATTN_E_SHAPE, "key_lengths[0]", "key lengths");
        /* backward without lse */
        st = attn_ring_sdpa_backward(MPI_COMM_WORLD, ATTN_RING_ZIGZAG, &q, &kv,
                                     &kv, &O, NULL, &O, &o, &O, &O, &O, NULL);
        expect_all(st, ATTN_E_INVALID, "lse is NULL", "backward lse NULL");
    }
    /* the layout helpers: runs, and shard/unshard round trip */
    {
        int64_t s2[2], l2[2], tot = 0;
        int nr;
        for (int r = 0; r < P; r++) {
            CHECK_STATUS(attn_ring_runs(ATTN_RING_ZIGZAG, L, P, r, s2, l2, &nr),
                         ATTN_OK);
            CHECK(nr == 2 && l2[0] >= 1 && l2[1] >= 1 && s2[0] < s2[1]);
            tot += l2[0] + l2[1];
        }
        CHECK(tot == L);
        CHECK_STATUS(attn_ring_runs((attn_ring_layout)7, L, P, R, s2, l2, &nr),
                     ATTN_E_INVALID);
    }
    free(buf);
    free(out);
    free(lse);
    *checks = check_count;
    *failures = check_failures;
}
