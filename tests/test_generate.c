/* Generation on small random models (encoder-decoder with dot and
 * additive cross-attention, post- and pre-norm, grouped heads;
 * decoder-only): cached decoding gives the logits of a full forward over
 * the same prefix (within the f32 tolerance) and the same greedy tokens;
 * beam width 1 is greedy; beam search with the cache equals beam search
 * recomputing the prefix; seeded sampling is reproducible and bitwise the
 * same on 1, 2, 3 and 5 threads, and so are greedy and beam search on a
 * model wide enough for OpenBLAS to thread its products; batches of different source lengths give
 * each sequence what it gets alone; bad input is refused. */
#include "attn_transformer.h"
#include "check.h"
#include "../transformer/transformer.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    attn_transformer_config c;
    float *prm;
    int64_t B, Ls;
    int32_t src[4 * 12];
    int64_t len[4];
} model;

static void make(model *m, attn_model_kind kind, int variant) {
    memset(m, 0, sizeof *m);
    attn_transformer_config *c = &m->c;
    attn_transformer_config_init(c, kind);
    c->enc.num_layers = 1;
    c->enc.d_model = 16;
    c->enc.num_heads = 2;
    c->enc.dim_feedforward = 24;
    c->dec.num_layers = 2;
    c->dec.d_model = 16;
    c->dec.num_heads = 4;
    c->dec.dim_feedforward = 24;
    if (variant == 1) {
        c->dec.cross_attention = ATTN_ATTENTION_ADDITIVE;
        c->dec.norm_first = c->enc.norm_first = 0;
        c->dec.final_norm = c->enc.final_norm = 0;
    }
    if (variant == 2) c->dec.num_kv_heads = 2;
    if (variant == 3) { /* wide enough for OpenBLAS to thread a product */
        c->enc.d_model = c->dec.d_model = 128;
        c->enc.dim_feedforward = c->dec.dim_feedforward = 512;
    }
    c->vocab_src = 9;
    c->vocab_tgt = 8;
    c->max_src = 12;
    c->max_tgt = 14;
    c->tie_output = variant == 2;
    m->prm = malloc(sizeof(float) * attn_transformer_param_count(c));
    CHECK_STATUS(attn_transformer_init(c, m->prm, 3 + (uint64_t)variant),
                 ATTN_OK);
    /* larger weights than Xavier so that the random model is not uniform */
    unsigned long long st = 5;
    for (int64_t i = 0; i < attn_transformer_param_count(c); i++)
        m->prm[i] *= (float)(2.0 + 0.5 * test_rand(&st));
    /* head.b (the last vocab_tgt floats): id 0, the EOS of these tests, is
     * never likely, so sequences run to max_len */
    m->prm[attn_transformer_param_count(c) - c->vocab_tgt] = -30.0f;
    m->B = 3;
    m->Ls = 12;
    const int dec = kind == ATTN_MODEL_DECODER;
    for (int64_t b = 0; b < m->B; b++) {
        m->len[b] = dec ? 3 + 2 * b : 12 - 4 * b;
        for (int64_t i = 0; i < m->Ls; i++)
            m->src[b * m->Ls + i] =
                i < m->len[b] ? (int32_t)(dec ? (i == 0 ? ATTN_GEN_BOS
                                                        : 4 + (i * 3 + b) % 4)
                                              : 4 + (i * 5 + b) % 5)
                              : ATTN_GEN_PAD;
        if (dec) m->src[b * m->Ls + m->len[b] - 1] = ATTN_GEN_SEP;
    }
}

static void gen(const model *m, const attn_generate_opts *o, int32_t *out,
                int64_t *len, double *sc) {
    CHECK_STATUS(attn_generate(&m->c, m->prm, m->B, m->Ls, m->src, m->len, o,
                               out, 16, len, sc),
                 ATTN_OK);
}

/* Cached vs recomputed: logits per step, tokens; beam 1 == greedy; beam
 * with and without the cache. */
static void cache_vs_full(attn_model_kind kind, int variant) {
    model m;
    make(&m, kind, variant);
    const int64_t V = m.c.vocab_tgt, B = m.B;
    attn_generate_opts o;
    attn_generate_opts_init(&o);
    o.max_len = 8;
    o.eos_id = 0; /* PAD never comes out of these models: long sequences */
    const int64_t n = B * 8 * V;
    float *l1 = calloc(n, sizeof(float)), *l2 = calloc(n, sizeof(float));
    int32_t t1[3 * 16], t2[3 * 16], t3[3 * 16];
    int64_t n1[3], n2[3], n3[3];
    double s1[3], s2[3], s3[3];
    o.step_logits = l1;
    gen(&m, &o, t1, n1, s1);
    o.step_logits = l2;
    o.recompute = 1;
    gen(&m, &o, t2, n2, s2);
    double err = 0, mx = 0;
    for (int64_t i = 0; i < n; i++) {
        err = fmax(err, fabs(l1[i] - l2[i]));
        mx = fmax(mx, fabs(l2[i]));
    }
    CHECK_MSG(err <= 1e-5 * fmax(mx, 1.0),
              "kind %d variant %d: cached logits "
              "differ from the full forward by %g (max %g)",
              (int)kind, variant, err, mx);
    int same = 1, long_enough = 1;
    for (int64_t b = 0; b < B; b++) {
        same &=
            n1[b] == n2[b] && memcmp(t1 + b * 16, t2 + b * 16, 4 * n1[b]) == 0;
        long_enough &= n1[b] >= 4;
    }
    CHECK_MSG(same, "kind %d variant %d: cached greedy tokens differ",
              (int)kind, variant);
    CHECK(long_enough);
    /* sampled paths vary: the same comparison on them */
    o.sample = 1;
    o.temperature = 2.0;
    o.seed = 9;
    o.recompute = 0;
    o.step_logits = l1;
    gen(&m, &o, t1, n1, s1);
    o.recompute = 1;
    o.step_logits = l2;
    gen(&m, &o, t2, n2, s2);
    err = 0;
    for (int64_t i = 0; i < n; i++) err = fmax(err, fabs(l1[i] - l2[i]));
    CHECK_MSG(err <= 1e-5 * fmax(mx, 1.0),
              "kind %d variant %d: sampled path: "
              "cached logits differ by %g",
              (int)kind, variant, err);
    int varied = 0;
    for (int64_t b = 0; b < B; b++) {
        CHECK(n1[b] == n2[b] &&
              memcmp(t1 + b * 16, t2 + b * 16, 4 * n1[b]) == 0);
        for (int64_t i = 1; i < n1[b]; i++)
            varied |= t1[b * 16 + i] != t1[b * 16];
    }
    CHECK(varied);
    o.sample = 0;
    /* beam width 1 (the beam search code) is greedy, tokens and scores */
    o.step_logits = NULL;
    o.recompute = 0;
    gen(&m, &o, t1, n1, s1);
    attn_generate_opts ob = o;
    CHECK_STATUS(attn__generate(&m.c, m.prm, m.B, m.Ls, m.src, m.len, &ob, t2,
                                16, n2, s2, 1),
                 ATTN_OK);
    for (int64_t b = 0; b < B; b++) {
        CHECK_MSG(n1[b] == n2[b] &&
                      memcmp(t1 + b * 16, t2 + b * 16, 4 * n1[b]) == 0,
                  "kind %d variant %d: beam 1 differs from greedy", (int)kind,
                  variant);
        CHECK_MSG(s1[b] == s2[b], "beam 1 score %.17g, greedy %.17g", s2[b],
                  s1[b]);
    }
    /* beam 3 with and without the cache (the cache is reordered) */
    ob.beam = 3;
    ob.length_penalty = 0.6;
    gen(&m, &ob, t2, n2, s2);
    ob.recompute = 1;
    gen(&m, &ob, t3, n3, s3);
    for (int64_t b = 0; b < B; b++) {
        CHECK_MSG(n2[b] == n3[b] &&
                      memcmp(t2 + b * 16, t3 + b * 16, 4 * n2[b]) == 0,
                  "kind %d variant %d: beam with cache differs from recompute",
                  (int)kind, variant);
        CHECK_NEAR(s2[b], s3[b], 1e-4 * fmax(1, fabs(s3[b])));
    }
    /* each sequence of the batch is what it gets alone */
    for (int64_t b = 0; b < B; b++) {
        model one = m;
        one.B = 1;
        memcpy(one.src, m.src + b * m.Ls, sizeof(int32_t) * (size_t)m.Ls);
        one.len[0] = m.len[b];
        int32_t t[16];
        int64_t nn;
        double sc;
        CHECK_STATUS(attn_generate(&one.c, one.prm, 1, one.Ls, one.src, one.len,
                                   &o, t, 16, &nn, &sc),
                     ATTN_OK);
        CHECK(nn == n1[b] && memcmp(t, t1 + b * 16, 4 * nn) == 0);
    }
    free(l1);
    free(l2);
    free(m.prm);
}

static void sampling(void) {
    model m;
    make(&m, ATTN_MODEL_ENCDEC, 0);
    attn_generate_opts o;
    attn_generate_opts_init(&o);
    o.sample = 1;
    o.temperature = 1.3;
    o.top_k = 5;
    o.top_p = 0.9;
    o.seed = 42;
    o.max_len = 10;
    static const int nth[4] = {1, 2, 3, 5};
    int32_t t[4][3 * 16];
    int64_t n[4][3];
    double s[4][3];
    for (int th = 0; th < 4; th++) {
        o.threads = nth[th];
        gen(&m, &o, t[th], n[th], s[th]);
    }
    for (int th = 1; th < 4; th++)
        for (int64_t b = 0; b < m.B; b++) {
            CHECK(n[0][b] == n[th][b]);
            CHECK(memcmp(t[0] + b * 16, t[th] + b * 16, 4 * n[0][b]) == 0);
            CHECK(memcmp(&s[0][b], &s[th][b], sizeof(double)) == 0);
        }
    /* another seed gives another draw; greedy differs from sampling */
    o.seed = 43;
    int32_t u[3 * 16];
    int64_t nu[3];
    double su[3];
    gen(&m, &o, u, nu, su);
    int differ = 0;
    for (int64_t b = 0; b < m.B; b++)
        differ |=
            nu[b] != n[0][b] || memcmp(u + b * 16, t[0] + b * 16, 4 * nu[b]);
    CHECK(differ);
    /* top_k 1 is greedy */
    attn_generate_opts og;
    attn_generate_opts_init(&og);
    og.max_len = 10;
    o.top_k = 1;
    gen(&m, &o, u, nu, su);
    int32_t g[3 * 16];
    int64_t ng[3];
    double sg[3];
    gen(&m, &og, g, ng, sg);
    for (int64_t b = 0; b < m.B; b++)
        CHECK(nu[b] == ng[b] && memcmp(u + b * 16, g + b * 16, 4 * ng[b]) == 0);
    free(m.prm);
}

/* Greedy, beam search and sampling on 1, 2, 3 and 5 threads, with
 * OpenBLAS's pool of the same size (as on a machine of that many cores):
 * the same tokens and the same bits of the scores. */
static void threads_wide(attn_model_kind kind) {
    model m;
    make(&m, kind, 3);
    const int blas_was = openblas_get_num_threads();
    static const int nth[4] = {1, 2, 3, 5};
    for (int mode = 0; mode < 3; mode++) {
        attn_generate_opts o;
        attn_generate_opts_init(&o);
        o.max_len = 10;
        if (mode == 1) o.beam = 3;
        if (mode == 2) {
            o.sample = 1;
            o.temperature = 1.3;
            o.seed = 7;
        }
        int32_t t[4][3 * 16];
        int64_t n[4][3];
        double s[4][3];
        for (int th = 0; th < 4; th++) {
            openblas_set_num_threads(nth[th]);
            o.threads = nth[th];
            gen(&m, &o, t[th], n[th], s[th]);
        }
        for (int th = 1; th < 4; th++)
            for (int64_t b = 0; b < m.B; b++)
                CHECK_MSG(n[0][b] == n[th][b] &&
                              memcmp(t[0] + b * 16, t[th] + b * 16,
                                     4 * n[0][b]) == 0 &&
                              memcmp(&s[0][b], &s[th][b], sizeof(double)) == 0,
                          "mode %d row %lld: 1 and %d threads differ "
                          "(score %.17g vs %.17g)",
                          mode, (long long)b, nth[th], s[0][b], s[th][b]);
    }
    openblas_set_num_threads(blas_was);
    free(m.prm);
}

static void errors(void) {
    model m;
    make(&m, ATTN_MODEL_ENCDEC, 0);
    attn_generate_opts o;
    attn_generate_opts_init(&o);
    int32_t out[3 * 16];
    int64_t n[3];
    CHECK_STATUS(
        attn_generate(&m.c, m.prm, 1, 13, m.src, NULL, &o, out, 16, n, NULL),
        ATTN_E_SHAPE); /* longer than max_src */
    CHECK_STATUS(attn_generate(&m.c, m.prm, m.B, m.Ls, m.src, m.len, &o, out, 4,
                               n, NULL),
                 ATTN_E_SHAPE); /* out_cap */
    o.beam = 2;
    o.sample = 1;
    CHECK_STATUS(attn_generate(&m.c, m.prm, m.B, m.Ls, m.src, m.len, &o, out,
                               16, n, NULL),
                 ATTN_E_INVALID);
    attn_generate_opts_init(&o);
    o.top_p = 0;
    CHECK_STATUS(attn_generate(&m.c, m.prm, m.B, m.Ls, m.src, m.len, &o, out,
                               16, n, NULL),
                 ATTN_E_INVALID);
    attn_generate_opts_init(&o);
    m.src[3] = 9;
    CHECK_STATUS(attn_generate(&m.c, m.prm, m.B, m.Ls, m.src, m.len, &o, out,
                               16, n, NULL),
                 ATTN_E_INVALID);
    free(m.prm);
    make(&m, ATTN_MODEL_DECODER, 0);
    m.len[0] = 12;
    m.c.max_tgt = 12; /* a prompt of 12 leaves one step */
    CHECK_STATUS(
        attn_generate(&m.c, m.prm, 1, m.Ls, m.src, m.len, &o, out, 16, n, NULL),
        ATTN_OK);
    CHECK(n[0] <= 1);
    m.c.max_tgt = 11;
    CHECK_STATUS(
        attn_generate(&m.c, m.prm, 1, m.Ls, m.src, m.len, &o, out, 16, n, NULL),
        ATTN_E_SHAPE);
    free(m.prm);
}

int main(void) {
    for (int v = 0; v < 3; v++) cache_vs_full(ATTN_MODEL_ENCDEC, v);
    cache_vs_full(ATTN_MODEL_DECODER, 0);
    cache_vs_full(ATTN_MODEL_DECODER, 2);
    sampling();
    threads_wide(ATTN_MODEL_ENCDEC);
    threads_wide(ATTN_MODEL_DECODER);
    errors();
    return check_done("test_generate");
}
