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

/* What every group of bad inputs shares: the buffers, the options (causal),
 * the full length L and this rank's zigzag shard length n. */
typedef struct {
    float *buf, *out, *lse;
    attn_sdpa_opts o;
    int64_t B, Hkv, D, L, H, n;
} bad_ctx;

/* The forward on this rank's shard (H query heads, n rows, zigzag) with
 * the options o. */
static attn_status shard_forward(const bad_ctx *c, const attn_sdpa_opts *o) {
    attn_tensor q = attn_tensor_4d(c->buf, ATTN_F32, c->B, c->H, c->n, c->D);
    attn_tensor kv = attn_tensor_4d(c->buf, ATTN_F32, c->B, c->Hkv, c->n, c->D);
    attn_tensor O = attn_tensor_4d(c->out, ATTN_F32, c->B, c->H, c->n, c->D);
    return attn_ring_sdpa_forward(MPI_COMM_WORLD, ATTN_RING_ZIGZAG, &q, &kv,
                                  &kv, o, &O, c->lse, NULL);
}

/* zigzag shards one row off (rank 0 one more, the last one fewer) */
static void bad_zigzag_lengths(const bad_ctx *c) {
    const int64_t B = c->B, H = c->H, Hkv = c->Hkv, D = c->D;
    int64_t m = c->n + (R == 0) - (R == P - 1);
    attn_tensor q = attn_tensor_4d(c->buf, ATTN_F32, B, H, m, D);
    attn_tensor kv = attn_tensor_4d(c->buf, ATTN_F32, B, Hkv, m, D);
    attn_tensor O = attn_tensor_4d(c->out, ATTN_F32, B, H, m, D);
    attn_status st =
        attn_ring_sdpa_forward(MPI_COMM_WORLD, ATTN_RING_ZIGZAG, &q, &kv, &kv,
                               &c->o, &O, c->lse, NULL);
    expect_all(st, ATTN_E_SHAPE, "ring zigzag: rank 0 holds", "zigzag lengths");
}

/* the last rank has other heads, forward and backward */
static void bad_heads_across_ranks(const bad_ctx *c) {
    const int64_t B = c->B, Hkv = c->Hkv, D = c->D, n = c->n;
    int64_t h = R == P - 1 ? 4 : c->H;
    attn_tensor q = attn_tensor_4d(c->buf, ATTN_F32, B, h, n, D);
    attn_tensor kv = attn_tensor_4d(c->buf, ATTN_F32, B, Hkv, n, D);
    attn_tensor O = attn_tensor_4d(c->out, ATTN_F32, B, h, n, D);
    attn_status st =
        attn_ring_sdpa_forward(MPI_COMM_WORLD, ATTN_RING_ZIGZAG, &q, &kv, &kv,
                               &c->o, &O, c->lse, NULL);
    char frag[100];
    snprintf(frag, sizeof frag,
             "rank %d has 4 for the number of query heads "
             "but rank 0 has 2",
             P - 1);
    expect_all(st, ATTN_E_SHAPE, frag, "heads across ranks");
    attn_tensor G = attn_tensor_4d(c->out, ATTN_F32, B, h, n, D);
    attn_tensor Gk = attn_tensor_4d(c->out, ATTN_F32, B, Hkv, n, D);
    st = attn_ring_sdpa_backward(MPI_COMM_WORLD, ATTN_RING_ZIGZAG, &q, &kv, &kv,
                                 &O, c->lse, &O, &c->o, &G, &Gk, &Gk, NULL);
    expect_all(st, ATTN_E_SHAPE, frag, "heads across ranks (backward)");
}

/* more ranks than positions: the last rank holds nothing */
static void bad_more_ranks_than_positions(const bad_ctx *c) {
    const int64_t B = c->B, H = c->H, Hkv = c->Hkv, D = c->D;
    int64_t m = R == P - 1 ? 0 : 1;
    attn_tensor q = attn_tensor_4d(c->buf, ATTN_F32, B, H, 1, D);
    q.shape[2] = m;
    attn_tensor kv = attn_tensor_4d(c->buf, ATTN_F32, B, Hkv, 1, D);
    kv.shape[2] = m;
    attn_tensor O = attn_tensor_4d(c->out, ATTN_F32, B, H, 1, D);
    O.shape[2] = m;
    attn_status st =
        attn_ring_sdpa_forward(MPI_COMM_WORLD, ATTN_RING_CONTIGUOUS, &q, &kv,
                               &kv, &c->o, &O, c->lse, NULL);
    char frag[120];
    snprintf(frag, sizeof frag,
             "rank %d holds no queries: %d ranks for a "
             "sequence of %d queries",
             P - 1, P, P - 1);
    expect_all(st, ATTN_E_SHAPE, frag, "more ranks than positions");
    /* the layout helper says it too */
    int64_t s2[2], l2[2];
    int nr;
    CHECK_STATUS(attn_ring_runs(ATTN_RING_CONTIGUOUS, P - 1, P, R, s2, l2, &nr),
                 ATTN_E_SHAPE);
    CHECK_STATUS(attn_ring_runs(ATTN_RING_ZIGZAG, 2 * P - 1, P, R, s2, l2, &nr),
                 ATTN_E_SHAPE);
}

/* rotary settings or positions that differ across ranks, positions of the
 * shard instead of the full sequence, an odd rotary dimension */
static void bad_rope(const bad_ctx *c) {
    const int64_t L = c->L, n = c->n;
    attn_rope rope;
    attn_rope_init(&rope);
    if (R == P - 1) rope.theta = 500.0;
    attn_sdpa_opts ro = c->o;
    ro.rope = &rope;
    attn_status st = shard_forward(c, &ro);
    expect_all(st, ATTN_E_SHAPE, "differ in opts.rope", "rope across ranks");
    rope.theta = 10000.0;
    int64_t *pos = calloc((size_t)L, sizeof(int64_t));
    for (int64_t i = 0; i < L; i++) pos[i] = i + (R == P - 1 && i == 2);
    ro.rope_q_positions = pos;
    ro.n_rope_q_positions = L;
    st = shard_forward(c, &ro);
    expect_all(st, ATTN_E_SHAPE, "pass different opts.rope_q_positions",
               "rope positions across ranks");
    /* positions of the shard, not of the full sequence */
    for (int64_t i = 0; i < L; i++) pos[i] = i;
    ro.n_rope_q_positions = n;
    st = shard_forward(c, &ro);
    if (n != L)
        expect_all(st, ATTN_E_SHAPE, "n_rope_q_positions",
                   "rope positions of the shard");
    /* a bad rotation is refused before any transfer */
    ro.n_rope_q_positions = L;
    rope.rotary_dim = 3;
    st = shard_forward(c, &ro);
    expect_all(st, ATTN_E_INVALID, "rotary_dim", "odd rotary dim");
    free(pos);
}

/* a NaN on the last rank only: every rank reports it, naming the rank */
static void bad_nan_on_one_rank(const bad_ctx *c) {
    const int64_t B = c->B, H = c->H, Hkv = c->Hkv, D = c->D, n = c->n;
    float *qb = calloc((size_t)(B * H * n * D), sizeof(float));
    if (R == P - 1) qb[3] = NAN;
    attn_tensor q = attn_tensor_4d(qb, ATTN_F32, B, H, n, D);
    attn_tensor kv = attn_tensor_4d(c->buf, ATTN_F32, B, Hkv, n, D);
    attn_tensor O = attn_tensor_4d(c->out, ATTN_F32, B, H, n, D);
    attn_status st =
        attn_ring_sdpa_forward(MPI_COMM_WORLD, ATTN_RING_ZIGZAG, &q, &kv, &kv,
                               &c->o, &O, c->lse, NULL);
    char frag[40];
    snprintf(frag, sizeof frag, "ring: rank %d: q[", P - 1);
    expect_all(st, ATTN_E_NONFINITE, frag, "NaN on one rank");
    free(qb);
}

/* options that differ: causal on rank 0 only */
static void bad_causal_on_one_rank(const bad_ctx *c) {
    attn_sdpa_opts o2 = c->o;
    o2.mask.causal = R == 0;
    attn_status st = shard_forward(c, &o2);
    expect_all(st, ATTN_E_SHAPE, "opts.mask.causal", "causal on one rank");
}

/* score modifiers that differ across ranks: sinks, a user function on
 * the last rank only */
static void bad_score_mods(const bad_ctx *c) {
    attn_sdpa_opts o2 = c->o;
    double sk[2] = {0.5, R == P - 1 && P > 1 ? 1.5 : 0.5};
    o2.mask.sinks = sk;
    o2.mask.n_sinks = c->H;
    attn_status st = shard_forward(c, &o2);
    if (P > 1) expect_all(st, ATTN_E_SHAPE, "opts.mask.sinks", "sinks differ");
    o2 = c->o;
    if (R == P - 1) o2.mask.score_mod = ring_user_score;
    st = shard_forward(c, &o2);
    if (P > 1)
        expect_all(st, ATTN_E_SHAPE, "the user functions",
                   "score_mod on one rank");
}

/* document ids that differ across ranks, that do not cover the full
 * sequence, that decrease */
static void bad_doc_ids(const bad_ctx *c) {
    const int64_t L = c->L;
    int64_t *ids = calloc((size_t)L, sizeof(int64_t));
    for (int64_t i = L / 2; i < L; i++) ids[i] = 1 + (R == P - 1 && i == L - 1);
    attn_sdpa_opts o2 = c->o;
    o2.mask.doc_q = ids;
    o2.mask.n_doc_q = L;
    attn_status st = shard_forward(c, &o2);
    if (P > 1)
        expect_all(st, ATTN_E_SHAPE,
                   "pass different opts.mask.doc_q (every rank passes "
                   "the full sequence's document ids)",
                   "doc ids differ");
    o2.mask.n_doc_q = L - 1; /* the same on every rank, one short */
    st = shard_forward(c, &o2);
    char frag[120];
    snprintf(frag, sizeof frag,
             "ring: mask.doc_q has %lld entries (n_doc_q) but the full "
             "sequence needs B x Lq = 1 x %lld",
             (long long)(L - 1), (long long)L);
    expect_all(st, ATTN_E_SHAPE, frag, "doc ids one short");
    /* decreasing ids: attn_mask_check's message on every rank */
    for (int64_t i = 0; i < L; i++) ids[i] = i == 3 ? 0 : 1;
    o2.mask.n_doc_q = L;
    st = shard_forward(c, &o2);
    expect_all(st, ATTN_E_INVALID, "mask.doc_q decreases in entry 0",
               "decreasing doc ids");
    free(ids);
}

/* what the ring does not serve (a bias, the reference kernel), key lengths
 * beyond the full sequence, a backward without lse */
static void bad_unserved(const bad_ctx *c) {
    attn_sdpa_opts o2 = c->o;
    float bz = 0;
    attn_tensor bias = attn_tensor_4d(&bz, ATTN_F32, 1, 1, 1, 1);
    o2.mask.bias = &bias;
    attn_status st = shard_forward(c, &o2);
    expect_all(st, ATTN_E_UNSUPPORTED, "mask.bias", "bias");
    o2 = c->o;
    o2.impl = ATTN_IMPL_REF;
    st = shard_forward(c, &o2);
    expect_all(st, ATTN_E_UNSUPPORTED, "impl", "IMPL_REF");
    /* key lengths beyond the full sequence (checked against it) */
    o2 = c->o;
    int64_t kl[1] = {c->L + 1};
    o2.mask.key_lengths = kl;
    st = shard_forward(c, &o2);
    expect_all(st, ATTN_E_SHAPE, "key_lengths[0]", "key lengths");
    /* backward without lse */
    const int64_t B = c->B, H = c->H, Hkv = c->Hkv, D = c->D, n = c->n;
    attn_tensor q = attn_tensor_4d(c->buf, ATTN_F32, B, H, n, D);
    attn_tensor kv = attn_tensor_4d(c->buf, ATTN_F32, B, Hkv, n, D);
    attn_tensor O = attn_tensor_4d(c->out, ATTN_F32, B, H, n, D);
    st = attn_ring_sdpa_backward(MPI_COMM_WORLD, ATTN_RING_ZIGZAG, &q, &kv, &kv,
                                 &O, NULL, &O, &c->o, &O, &O, &O, NULL);
    expect_all(st, ATTN_E_INVALID, "lse is NULL", "backward lse NULL");
}

/* the layout helpers: the runs of every rank cover the sequence once, an
 * unknown layout is refused */
static void check_layout_runs(const bad_ctx *c) {
    int64_t s2[2], l2[2], tot = 0;
    int nr;
    for (int r = 0; r < P; r++) {
        CHECK_STATUS(attn_ring_runs(ATTN_RING_ZIGZAG, c->L, P, r, s2, l2, &nr),
                     ATTN_OK);
        CHECK(nr == 2 && l2[0] >= 1 && l2[1] >= 1 && s2[0] < s2[1]);
        tot += l2[0] + l2[1];
    }
    CHECK(tot == c->L);
    CHECK_STATUS(attn_ring_runs((attn_ring_layout)7, c->L, P, R, s2, l2, &nr),
                 ATTN_E_INVALID);
}

void ring_bad_inputs(int nranks, int rank, int *checks, int *failures) {
    P = nranks;
    R = rank;
    bad_ctx c = {.B = 1, .Hkv = 1, .D = 4, .L = 6 * P + 1, .H = 2};
    size_t rows = (size_t)(c.B * 4 * (c.L + 8));
    c.buf = calloc(rows * (size_t)c.D, sizeof(float));
    c.out = calloc(rows * (size_t)c.D, sizeof(float));
    c.lse = calloc(rows, sizeof(float));
    attn_sdpa_opts_init(&c.o);
    c.o.mask.causal = 1;
    attn_ring_shard_length(ATTN_RING_ZIGZAG, c.L, P, R, &c.n);

    if (P >= 2) {
        bad_zigzag_lengths(&c);
        bad_heads_across_ranks(&c);
        bad_more_ranks_than_positions(&c);
        bad_rope(&c);
    }
    bad_nan_on_one_rank(&c);
    if (P >= 2) bad_causal_on_one_rank(&c);
    bad_score_mods(&c);
    bad_doc_ids(&c);
    bad_unserved(&c);
    check_layout_runs(&c);
    free(c.buf);
    free(c.out);
    free(c.lse);
    *checks = check_count;
    *failures = check_failures;
}
