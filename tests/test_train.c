/* Training pieces against plain double references: the whole task model's
 * gradient (central differences in double on a double reference of the
 * model, for dot and additive attention, pre- and post-norm, with padding),
 * the cross-entropy, gradient clipping, AdamW and its schedule, the task
 * generators and their answers, and the model's padding mask. */
#include "attn.h"
#include "attn_layers.h"
#include "attn_train.h"
#include "check.h"
#include "layers_ref.h"

#include <stdlib.h>
#include <string.h>

/* ---- a double reference of the model --------------------------------- */

typedef struct {
    const attn_model_config *c;
    int64_t B, L, ns;
    const attn_param_slice *sl;
    double *prm; /* the parameter block in double */
    const int32_t *tok, *tgt;
    const int64_t *len;
} mctx;

static const double *P(const mctx *m, const char *fmt, int64_t l) {
    return ref_slice_at(m->sl, m->ns, m->prm, fmt, l);
}

/* Mean cross-entropy of the reference model on (tok, tgt). */
static double ref_model_loss(void *p) {
    const mctx *m = p;
    const attn_encoder_config *c = &m->c->enc;
    const int64_t B = m->B, L = m->L, E = c->d_model, F = c->dim_feedforward;
    const int64_t n = B * L, V = m->c->vocab_out;
    const double eps = c->layer_norm_eps > 0 ? c->layer_norm_eps : 1e-5;
    double *cur = malloc(sizeof(double) * n * E),
           *ain = malloc(sizeof(double) * n * E);
    double *a = malloc(sizeof(double) * n * E),
           *ctx = malloc(sizeof(double) * n * E);
    double *r1 = malloc(sizeof(double) * n * E),
           *fin = malloc(sizeof(double) * n * E);
    double *h = malloc(sizeof(double) * n * F),
           *f = malloc(sizeof(double) * n * E);
    double *z = malloc(sizeof(double) * n * V);
    /* embedding times sqrt(E) plus sinusoidal positions */
    const double *emb = P(m, "embed", 0);
    for (int64_t r = 0; r < n; r++)
        for (int64_t k = 0; k < E; k++) {
            double ang =
                (double)(r % L) / pow(10000.0, (double)(k & ~1LL) / (double)E);
            cur[r * E + k] = emb[m->tok[r] * E + k] * sqrt((double)E) +
                             ((k & 1) ? cos(ang) : sin(ang));
        }
    attn_layer_opts o;
    attn_sdpa_opts_init(&o);
    o.mask.key_lengths = m->len;
    for (int64_t l = 0; l < c->num_layers; l++) {
        if (c->norm_first)
            ref_layernorm(n, E, cur, P(m, "enc.layers.%lld.ln1_gamma", l),
                          P(m, "enc.layers.%lld.ln1_beta", l), eps, ain);
        else
            memcpy(ain, cur, sizeof(double) * n * E);
        if (c->attention == ATTN_ATTENTION_DOT) {
            attn_mha_config mc = {E, c->num_heads, c->num_kv_heads, 0, 0, 1};
            ref_mha(&mc, P(m, "enc.layers.%lld.attn.w_q", l), B, L, L, ain, ain,
                    ain, &o, a, NULL);
        } else {
            attn_additive_config ac = {
                E, E, E, c->additive_dim ? c->additive_dim : E / 2, 1, 0};
            ref_additive(&ac, P(m, "enc.layers.%lld.attn.w_q", l), B, L, L, ain,
                         ain, ain, &o, ctx, NULL);
            ref_linear(n, E, E, ctx, P(m, "enc.layers.%lld.attn.w_o", l),
                       P(m, "enc.layers.%lld.attn.b_o", l), a);
        }
        for (int64_t i = 0; i < n * E; i++) r1[i] = cur[i] + a[i];
        ref_layernorm(n, E, r1,
                      P(m,
                        c->norm_first ? "enc.layers.%lld.ln2_gamma"
                                      : "enc.layers.%lld.ln1_gamma",
                        l),
                      P(m,
                        c->norm_first ? "enc.layers.%lld.ln2_beta"
                                      : "enc.layers.%lld.ln1_beta",
                        l),
                      eps, fin);
        ref_linear(n, E, F, fin, P(m, "enc.layers.%lld.w_1", l),
                   P(m, "enc.layers.%lld.b_1", l), h);
        for (int64_t i = 0; i < n * F; i++)
            h[i] = c->activation == ATTN_ACT_GELU
                       ? 0.5 * h[i] * (1 + erf(h[i] / sqrt(2.0)))
                       : (h[i] > 0 ? h[i] : 0);
        ref_linear(n, F, E, h, P(m, "enc.layers.%lld.w_2", l),
                   P(m, "enc.layers.%lld.b_2", l), f);
        if (c->norm_first) {
            for (int64_t i = 0; i < n * E; i++) cur[i] = r1[i] + f[i];
        } else {
            for (int64_t i = 0; i < n * E; i++) f[i] += fin[i];
            ref_layernorm(n, E, f, P(m, "enc.layers.%lld.ln2_gamma", l),
                          P(m, "enc.layers.%lld.ln2_beta", l), eps, cur);
        }
    }
    if (c->final_norm) {
        memcpy(a, cur, sizeof(double) * n * E);
        ref_layernorm(n, E, a, P(m, "enc.norm_gamma", 0),
                      P(m, "enc.norm_beta", 0), eps, cur);
    }
    ref_linear(n, E, V, cur, P(m, "head.w", 0), P(m, "head.b", 0), z);
    double loss = 0;
    int64_t cnt = 0;
    for (int64_t r = 0; r < n; r++) {
        if (m->tgt[r] == ATTN_IGNORE_INDEX) continue;
        double mx = -INFINITY, s = 0;
        for (int64_t k = 0; k < V; k++) mx = fmax(mx, z[r * V + k]);
        for (int64_t k = 0; k < V; k++) s += exp(z[r * V + k] - mx);
        loss += mx + log(s) - z[r * V + m->tgt[r]];
        cnt++;
    }
    free(cur);
    free(ain);
    free(a);
    free(ctx);
    free(r1);
    free(fin);
    free(h);
    free(f);
    free(z);
    return cnt ? loss / (double)cnt : 0.0;
}

/* The library's loss and gradient against the reference's value and its
 * central differences in double, for every slice. */
static void model_gradcheck(attn_attention_type at, int norm_first,
                            attn_activation act) {
    attn_task task;
    attn_task_init(&task, ATTN_TASK_REVERSE);
    task.vocab = 5;
    task.min_len = 3;
    task.max_len = 6;
    attn_model_config c;
    memset(&c, 0, sizeof c);
    attn_encoder_config_init(&c.enc);
    c.enc.num_layers = 2;
    c.enc.d_model = 8;
    c.enc.num_heads = 2;
    c.enc.dim_feedforward = 12;
    c.enc.attention = at;
    c.enc.additive_dim = 6;
    c.enc.activation = act;
    c.enc.norm_first = norm_first;
    c.enc.final_norm = norm_first;
    c.vocab_in = attn_task_vocab_in(&task);
    c.vocab_out = attn_task_vocab_out(&task);
    c.max_len = attn_task_seq_len(&task);
    const int64_t B = 3, L = c.max_len, V = c.vocab_out,
                  np = attn_model_param_count(&c);
    CHECK(np > 0);
    int64_t ns;
    CHECK_STATUS(attn_model_param_slices(&c, NULL, 0, &ns), ATTN_OK);
    attn_param_slice *sl = malloc(sizeof *sl * ns);
    CHECK_STATUS(attn_model_param_slices(&c, sl, ns, &ns), ATTN_OK);
    CHECK(strcmp(sl[0].name, "embed") == 0 &&
          strcmp(sl[ns - 1].name, "head.b") == 0);
    CHECK(sl[ns - 1].offset + sl[ns - 1].shape[0] == np);
    float *prm = malloc(sizeof(float) * np), *g = calloc(np, sizeof(float));
    CHECK_STATUS(attn_model_init(&c, prm, 5), ATTN_OK);
    unsigned long long st =
        77 + (unsigned long long)at * 3 + (unsigned long long)norm_first;
    for (int64_t i = 0; i < np; i++) prm[i] += (float)(0.1 * test_rand(&st));
    double *prmd = malloc(sizeof(double) * np);
    for (int64_t i = 0; i < np; i++) prmd[i] = prm[i];
    int32_t tok[3 * 6], tgt[3 * 6];
    int64_t len[3];
    attn_rng rng;
    attn_rng_seed(&rng, 3);
    CHECK_STATUS(attn_task_batch(&task, &rng, B, tok, tgt, len), ATTN_OK);
    for (int64_t i = len[0]; i < L; i++) tok[i] = (int32_t)(i % task.vocab);
    len[0] = L; /* one full row, the others padded */
    CHECK_STATUS(attn_task_solve(&task, tok, L, tgt), ATTN_OK);
    size_t wsn;
    CHECK_STATUS(attn_model_workspace_size(&c, B, L, &wsn), ATTN_OK);
    float *ws = malloc(sizeof(float) * wsn),
          *z = malloc(sizeof(float) * B * L * V);
    float *dz = malloc(sizeof(float) * B * L * V);
    attn_layer_opts o;
    attn_sdpa_opts_init(&o);
    o.impl = ATTN_IMPL_REF;
    CHECK_STATUS(attn_model_forward(&c, prm, B, L, tok, len, &o, z, NULL, ws),
                 ATTN_OK);
    double loss;
    CHECK_STATUS(attn_cross_entropy(B * L, V, z, tgt, ATTN_IGNORE_INDEX, &loss,
                                    dz, NULL, NULL),
                 ATTN_OK);
    CHECK_STATUS(attn_model_backward(&c, prm, B, L, tok, len, &o, dz, ws, g),
                 ATTN_OK);
    mctx m = {&c, B, L, ns, sl, prmd, tok, tgt, len};
    const double lref = ref_model_loss(&m);
    CHECK_MSG(fabs(loss - lref) <= 1e-5 * fmax(1, fabs(lref)),
              "model loss %.9g, reference %.9g", loss, lref);
    /* f32 forward and backward against double differences: 5e-4 of the
     * largest gradient of a slice covers f32 rounding through two layers
     * (measured errors are ~1e-5 relative) yet catches a missing term */
    for (int64_t s = 0; s < ns; s++) {
        char what[128];
        snprintf(what, sizeof what, "model %s nf=%d act=%d %.47s",
                 at == ATTN_ATTENTION_DOT ? "dot" : "additive", norm_first,
                 (int)act, sl[s].name);
        ref_fd_check(what, prmd + sl[s].offset, sl[s].shape[0] * sl[s].shape[1],
                     g + sl[s].offset, ref_model_loss, &m, 5e-4);
    }
    /* embedding rows of PAD only get gradient from padded query rows, which
     * carry no target: zero; the '+' row is never used by reverse: zero */
    const int64_t E = c.enc.d_model;
    for (int64_t k = 0; k < 2 * E; k++) CHECK(g[(task.vocab) * E + k] == 0.0f);
    free(sl);
    free(prm);
    free(g);
    free(prmd);
    free(ws);
    free(z);
    free(dz);
}

/* ---- loss ------------------------------------------------------------ */

static void loss_tests(void) {
    const int64_t n = 4, C = 3;
    float z[12] = {1, 2, 3, -1, 0.5f, 0.25f, 0, 0, 0, 4, -2, 1};
    int32_t t[4] = {2, ATTN_IGNORE_INDEX, 1, 0};
    float dz[12];
    double loss;
    int64_t cnt, right;
    CHECK_STATUS(attn_cross_entropy(n, C, z, t, ATTN_IGNORE_INDEX, &loss, dz,
                                    &cnt, &right),
                 ATTN_OK);
    double want = 0;
    int64_t rows[3] = {0, 2, 3};
    for (int k = 0; k < 3; k++) {
        const float *r = z + rows[k] * C;
        double s = exp(r[0]) + exp(r[1]) + exp(r[2]);
        want += log(s) - r[t[rows[k]]];
        for (int c = 0; c < C; c++)
            CHECK_NEAR(dz[rows[k] * C + c],
                       (exp(r[c]) / s - (c == t[rows[k]])) / 3, 1e-7);
    }
    CHECK_NEAR(loss, want / 3, 1e-12);
    CHECK(cnt == 3);
    CHECK(right ==
          2); /* row 0 (argmax 2) and row 3 (argmax 0); row 2 ties -> 0 */
    for (int c = 0; c < C; c++) CHECK(dz[C + c] == 0.0f);
    /* every row ignored: loss 0, zero gradient */
    int32_t none[4] = {-1, -1, -1, -1};
    CHECK_STATUS(attn_cross_entropy(n, C, z, none, -1, &loss, dz, &cnt, NULL),
                 ATTN_OK);
    CHECK(loss == 0 && cnt == 0 && dz[0] == 0 && dz[11] == 0);
    /* large logits do not overflow */
    float big[3] = {1000, 0, -1000};
    int32_t t0 = 0;
    CHECK_STATUS(
        attn_cross_entropy(1, 3, big, &t0, -1, &loss, NULL, NULL, NULL),
        ATTN_OK);
    CHECK(loss >= 0 && loss < 1e-30);
    int32_t bad[4] = {2, 3, 0, 0};
    CHECK_STATUS(attn_cross_entropy(n, C, z, bad, -1, &loss, dz, NULL, NULL),
                 ATTN_E_INVALID);
    z[7] = NAN;
    CHECK_STATUS(attn_cross_entropy(n, C, z, t, -1, &loss, dz, NULL, NULL),
                 ATTN_E_NONFINITE);
    CHECK(strstr(attn_last_error(), "NaN") != NULL);
    CHECK_STATUS(attn_cross_entropy(0, C, z, t, -1, &loss, dz, NULL, NULL),
                 ATTN_E_SHAPE);
    CHECK_STATUS(attn_cross_entropy(n, C, NULL, t, -1, &loss, dz, NULL, NULL),
                 ATTN_E_INVALID);
}

/* ---- clipping and AdamW ---------------------------------------------- */

static void optim_tests(void) {
    float g[3] = {3, 4, 0};
    double norm;
    CHECK_STATUS(attn_clip_grad_norm(g, 3, 1.0, &norm), ATTN_OK);
    CHECK_NEAR(norm, 5.0, 1e-12);
    CHECK_NEAR(g[0], 0.6, 1e-7);
    CHECK_NEAR(g[1], 0.8, 1e-7);
    float g2[2] = {0.3f, 0.4f};
    CHECK_STATUS(attn_clip_grad_norm(g2, 2, 1.0, &norm), ATTN_OK);
    CHECK(g2[0] == 0.3f && g2[1] == 0.4f); /* below the limit: unchanged */
    float g3[3] = {1, INFINITY, 2};
    CHECK_STATUS(attn_clip_grad_norm(g3, 3, 1.0, &norm), ATTN_E_NONFINITE);
    CHECK(g3[0] == 1 && g3[2] == 2);
    CHECK(strstr(attn_last_error(), "element 1") != NULL);
    g3[1] = NAN;
    CHECK_STATUS(attn_clip_grad_norm(g3, 3, 0, &norm), ATTN_E_NONFINITE);
    float g4[2] = {3e38f, 3e38f}; /* each finite, the f32 square is not */
    CHECK_STATUS(attn_clip_grad_norm(g4, 2, 1.0, &norm), ATTN_OK);
    CHECK_NEAR(g4[0], sqrt(0.5), 1e-6);

    attn_adamw_config c;
    attn_adamw_config_init(&c);
    CHECK(c.clip_norm == 1.0);
    c.lr = 0.1;
    c.warmup = 4;
    c.decay_steps = 14;
    c.min_lr = 0.01;
    CHECK_NEAR(attn_adamw_lr(&c, 0), 0.025, 1e-15);
    CHECK_NEAR(attn_adamw_lr(&c, 3), 0.1, 1e-15);
    CHECK_NEAR(attn_adamw_lr(&c, 4), 0.1, 1e-15);
    CHECK_NEAR(attn_adamw_lr(&c, 9), 0.055, 1e-12);
    CHECK_NEAR(attn_adamw_lr(&c, 14), 0.01, 1e-15);
    CHECK_NEAR(attn_adamw_lr(&c, 100), 0.01, 1e-15);
    for (int64_t s = 4; s < 14; s++)
        CHECK(attn_adamw_lr(&c, s + 1) <= attn_adamw_lr(&c, s));

    /* two steps of AdamW on a matrix slice (decayed) and a bias (not) */
    attn_param_slice sl[2];
    memset(sl, 0, sizeof sl);
    snprintf(sl[0].name, sizeof sl[0].name, "w");
    sl[0].offset = 0, sl[0].shape[0] = 2, sl[0].shape[1] = 2,
    sl[0].init = ATTN_INIT_XAVIER;
    snprintf(sl[1].name, sizeof sl[1].name, "b");
    sl[1].offset = 4, sl[1].shape[0] = 2, sl[1].shape[1] = 1,
    sl[1].init = ATTN_INIT_ZERO;
    c.weight_decay = 0.5;
    float p[6] = {1, -2, 0.5f, 3, 1, -1}, m[6] = {0}, v[6] = {0};
    double pd[6] = {1, -2, 0.5, 3, 1, -1}, md[6] = {0}, vd[6] = {0};
    const float gr[2][6] = {{0.1f, -0.2f, 0.3f, 0, 1, -0.5f},
                            {0.2f, 0.1f, -0.1f, 0.05f, 0, 2}};
    for (int s = 0; s < 2; s++) {
        CHECK_STATUS(attn_adamw_step(&c, s, sl, 2, 6, p, gr[s], m, v), ATTN_OK);
        double lr = attn_adamw_lr(&c, s);
        for (int i = 0; i < 6; i++) {
            md[i] = c.beta1 * md[i] + (1 - c.beta1) * gr[s][i];
            vd[i] = c.beta2 * vd[i] + (1 - c.beta2) * gr[s][i] * gr[s][i];
            double mh = md[i] / (1 - pow(c.beta1, s + 1));
            double vh = vd[i] / (1 - pow(c.beta2, s + 1));
            if (i < 4) pd[i] *= 1 - lr * c.weight_decay;
            pd[i] -= lr * mh / (sqrt(vh) + c.eps);
        }
    }
    for (int i = 0; i < 6; i++) CHECK_NEAR(p[i], pd[i], 2e-6);
    sl[1].offset = 5; /* outside the 6 parameters */
    CHECK_STATUS(attn_adamw_step(&c, 0, sl, 2, 6, p, gr[0], m, v),
                 ATTN_E_INVALID);
    c.lr = -1;
    CHECK_STATUS(attn_adamw_check(&c), ATTN_E_INVALID);
    c.lr = 0.1;
    c.beta2 = 1;
    CHECK_STATUS(attn_adamw_check(&c), ATTN_E_INVALID);
}

/* ---- tasks ----------------------------------------------------------- */

static int64_t digits_value(const int32_t *d, int64_t n, int64_t base) {
    int64_t v = 0;
    for (int64_t i = n - 1; i >= 0; i--) v = v * base + d[i];
    return v;
}

static void task_tests(void) {
    for (int k = 0; k < ATTN_TASK_COUNT; k++) {
        attn_task t;
        attn_task_init(&t, (attn_task_kind)k);
        attn_task_kind back;
        CHECK_STATUS(attn_task_parse(attn_task_name((attn_task_kind)k), &back),
                     ATTN_OK);
        CHECK(back == (attn_task_kind)k);
        t.min_len = 1;
        t.max_len = k == ATTN_TASK_ADD ? 4 : 17;
        if (k == ATTN_TASK_SORT) t.vocab = 300; /* the large-vocabulary sort */
        const int64_t B = 129, L = attn_task_seq_len(&t);
        CHECK(L == (k == ATTN_TASK_ADD ? 9 : 17));
        CHECK(attn_task_vocab_in(&t) == t.vocab + 2 &&
              attn_task_vocab_out(&t) == t.vocab);
        int32_t *x = malloc(sizeof(int32_t) * B * L * 4);
        int32_t *y = x + B * L, *x2 = y + B * L, *y2 = x2 + B * L;
        int64_t len[129], len2[129];
        attn_rng r1, r2;
        attn_rng_seed(&r1, 42);
        attn_rng_seed(&r2, 42);
        CHECK_STATUS(attn_task_batch(&t, &r1, B, x, y, len), ATTN_OK);
        CHECK_STATUS(attn_task_batch(&t, &r2, B, x2, y2, len2), ATTN_OK);
        CHECK(memcmp(x, x2, sizeof(int32_t) * B * L) == 0 &&
              memcmp(y, y2, sizeof(int32_t) * B * L) == 0);
        int64_t seen_short = 0, seen_long = 0;
        for (int64_t b = 0; b < B; b++) {
            const int32_t *xb = x + b * L, *yb = y + b * L;
            const int64_t n = len[b];
            const int64_t m = k == ATTN_TASK_ADD ? (n - 1) / 2 : n;
            CHECK(m >= t.min_len && m <= t.max_len);
            seen_short += m == t.min_len;
            seen_long += m == t.max_len;
            for (int64_t i = n; i < L; i++)
                CHECK(xb[i] == t.vocab && yb[i] == ATTN_IGNORE_INDEX);
            int32_t ans[17];
            CHECK_STATUS(attn_task_solve(&t, xb, n, ans), ATTN_OK);
            CHECK(memcmp(ans, yb, sizeof(int32_t) * n) == 0);
            if (k == ATTN_TASK_REVERSE)
                for (int64_t i = 0; i < n; i++) CHECK(yb[i] == xb[n - 1 - i]);
            if (k == ATTN_TASK_COPY)
                for (int64_t i = 0; i < n; i++) CHECK(yb[i] == xb[i]);
            if (k == ATTN_TASK_SORT) {
                int64_t hist[300] = {0};
                for (int64_t i = 0; i < n; i++) hist[xb[i]]++, hist[yb[i]]--;
                for (int64_t i = 0; i < 300; i++) CHECK(hist[i] == 0);
                for (int64_t i = 1; i < n; i++) CHECK(yb[i - 1] <= yb[i]);
            }
            if (k == ATTN_TASK_ADD) {
                CHECK(xb[m] == t.vocab + 1);
                int64_t a = digits_value(xb, m, t.vocab);
                int64_t s = digits_value(xb + m + 1, m, t.vocab) + a;
                CHECK(digits_value(yb, m + 1, t.vocab) == s);
                for (int64_t i = m + 1; i < L; i++)
                    CHECK(yb[i] == ATTN_IGNORE_INDEX);
            }
        }
        CHECK(seen_short > 0 && seen_long > 0);
        free(x);
    }
    /* a known sum: 987 + 45 = 1032, least significant digit first */
    attn_task t;
    attn_task_init(&t, ATTN_TASK_ADD);
    int32_t in[7] = {7, 8, 9, 11, 5, 4, 0}, out[7];
    CHECK_STATUS(attn_task_solve(&t, in, 7, out), ATTN_OK);
    CHECK(out[0] == 2 && out[1] == 3 && out[2] == 0 && out[3] == 1 &&
          out[4] == -1);
    in[3] = 5; /* no '+' */
    CHECK_STATUS(attn_task_solve(&t, in, 7, out), ATTN_E_INVALID);
    CHECK_STATUS(attn_task_solve(&t, in, 6, out), ATTN_E_INVALID);
    CHECK_STATUS(attn_task_solve(&t, in, 9, out), ATTN_E_SHAPE);
    attn_task_init(&t, ATTN_TASK_REVERSE);
    int32_t bad[3] = {1, 10, 2};
    CHECK_STATUS(attn_task_solve(&t, bad, 3, out), ATTN_E_INVALID);
    attn_task_kind kind;
    CHECK_STATUS(attn_task_parse("rev", &kind), ATTN_E_INVALID);
    CHECK(strstr(attn_last_error(), "reverse") != NULL);
    t.min_len = 5, t.max_len = 4;
    CHECK_STATUS(attn_task_check(&t), ATTN_E_INVALID);
    t.min_len = 1, t.vocab = 1;
    CHECK_STATUS(attn_task_check(&t), ATTN_E_INVALID);
    attn_task_init(&t, ATTN_TASK_ADD);
    t.vocab = 37;
    CHECK_STATUS(attn_task_check(&t), ATTN_E_INVALID);
    /* rng: a bounded draw covers its range evenly enough */
    attn_rng r;
    attn_rng_seed(&r, 9);
    int64_t hist[7] = {0};
    for (int i = 0; i < 7000; i++) hist[attn_rng_below(&r, 7)]++;
    for (int i = 0; i < 7; i++) CHECK(hist[i] > 850 && hist[i] < 1150);
}

/* ---- the model's padding --------------------------------------------- */

/* Logits at valid positions do not depend on what lies in the padding;
 * the model refuses bad ids and lengths. */
static void padding_tests(void) {
    attn_train_config tc;
    attn_train_config_init(&tc, ATTN_TASK_SORT);
    tc.task.min_len = 2;
    tc.task.max_len = 7;
    tc.model.enc.d_model = 16;
    tc.model.enc.dim_feedforward = 24;
    CHECK_STATUS(attn_train_config_check(&tc), ATTN_OK);
    const attn_model_config *c = &tc.model;
    const int64_t B = 5, L = 7, V = c->vocab_out,
                  np = attn_model_param_count(c);
    float *prm = malloc(sizeof(float) * np);
    CHECK_STATUS(attn_model_init(c, prm, 11), ATTN_OK);
    int32_t tok[35], tgt[35];
    int64_t len[5];
    attn_rng r;
    attn_rng_seed(&r, 1);
    CHECK_STATUS(attn_task_batch(&tc.task, &r, B, tok, tgt, len), ATTN_OK);
    size_t wsn;
    CHECK_STATUS(attn_model_workspace_size(c, B, L, &wsn), ATTN_OK);
    float *ws = malloc(sizeof(float) * wsn),
          *z1 = malloc(sizeof(float) * B * L * V);
    float *z2 = malloc(sizeof(float) * B * L * V);
    attn_layer_opts o;
    attn_sdpa_opts_init(&o);
    CHECK_STATUS(attn_model_forward(c, prm, B, L, tok, len, &o, z1, NULL, ws),
                 ATTN_OK);
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = len[b]; i < L; i++)
            tok[b * L + i] = (int32_t)((b + i) % 10);
    CHECK_STATUS(attn_model_forward(c, prm, B, L, tok, len, &o, z2, NULL, ws),
                 ATTN_OK);
    int same = 1;
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < len[b] * V; i++)
            same &= z1[b * L * V + i] == z2[b * L * V + i];
    CHECK_MSG(same,
              "logits of valid positions changed with the padding's content");
    tok[3] = (int32_t)c->vocab_in;
    CHECK_STATUS(attn_model_forward(c, prm, B, L, tok, len, &o, z2, NULL, ws),
                 ATTN_E_INVALID);
    tok[3] = 0;
    len[2] = 0;
    CHECK_STATUS(attn_model_forward(c, prm, B, L, tok, len, &o, z2, NULL, ws),
                 ATTN_E_SHAPE);
    len[2] = 3;
    CHECK_STATUS(attn_model_workspace_size(c, B, L + 1, &wsn), ATTN_E_SHAPE);
    attn_model_config bad = *c;
    bad.vocab_out = 0;
    CHECK_STATUS(attn_model_check(&bad), ATTN_E_INVALID);
    CHECK(attn_model_param_count(&bad) == 0);
    free(prm);
    free(ws);
    free(z1);
    free(z2);
}

int main(void) {
    loss_tests();
    optim_tests();
    task_tests();
    padding_tests();
    model_gradcheck(ATTN_ATTENTION_DOT, 1, ATTN_ACT_RELU);
    model_gradcheck(ATTN_ATTENTION_ADDITIVE, 0, ATTN_ACT_GELU);
    model_gradcheck(ATTN_ATTENTION_DOT, 0, ATTN_ACT_GELU);
    model_gradcheck(ATTN_ATTENTION_ADDITIVE, 1, ATTN_ACT_RELU);
    return check_done("test_train");
}
