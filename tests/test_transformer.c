/* Whole-model gradient checks of tiny encoder-decoder and decoder-only
 * models (shared embeddings, tied head, additive cross-attention, post-
 * and pre-norm, source padding, label smoothing), central differences of
 * the smoothed cross-entropy in double over the f32 model run with the
 * reference kernels; the smoothed loss against its formula; threads. */
#include "attn_transformer.h"
#include "check.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    const attn_transformer_config *c;
    float *prm, *logits, *ws;
    int64_t B, Ls, Lt;
    const int32_t *src, *tgt, *y;
    const int64_t *len;
    attn_layer_opts o;
    double smooth;
} mctx;

static double model_loss(mctx *m, float *dlogits) {
    attn_status st =
        attn_transformer_forward(m->c, m->prm, m->B, m->Ls, m->src, m->len,
                                 m->Lt, m->tgt, &m->o, m->logits, NULL, m->ws);
    CHECK_STATUS(st, ATTN_OK);
    double loss = 0;
    CHECK_STATUS(attn_cross_entropy_smoothed(
                     m->B * m->Lt, m->c->vocab_tgt, m->logits, m->y,
                     ATTN_IGNORE_INDEX, m->smooth, &loss, dlogits, NULL, NULL),
                 ATTN_OK);
    return loss;
}

static void run(attn_transformer_config c, const char *what) {
    unsigned long long st = 11;
    const int64_t B = 2, Ls = 5, Lt = 4, V = c.vocab_tgt;
    c.max_src = 6;
    c.max_tgt = 4;
    const int64_t np = attn_transformer_param_count(&c);
    CHECK_MSG(np > 0, "%s: %s", what, attn_last_error());
    if (np <= 0) return;
    int64_t ns;
    CHECK_STATUS(attn_transformer_param_slices(&c, NULL, 0, &ns), ATTN_OK);
    attn_param_slice *sl = malloc(sizeof *sl * ns);
    attn_transformer_param_slices(&c, sl, ns, &ns);
    float *prm = malloc(sizeof(float) * np);
    CHECK_STATUS(attn_transformer_init(&c, prm, 5), ATTN_OK);
    for (int64_t i = 0; i < np; i++) prm[i] += (float)(0.05 * test_rand(&st));
    int32_t src[2 * 5], tgt[2 * 4], y[2 * 4];
    for (int i = 0; i < B * Ls; i++)
        src[i] = (int32_t)((i * 5 + 3) % c.vocab_src);
    for (int i = 0; i < B * Lt; i++) {
        tgt[i] = (int32_t)((i * 3 + 1) % V);
        y[i] = i == 6 ? ATTN_IGNORE_INDEX : (int32_t)((i * 7 + 2) % V);
    }
    int64_t len[2] = {5, 3};
    size_t wsn;
    CHECK_STATUS(attn_transformer_workspace_size(&c, B, Ls, Lt, &wsn), ATTN_OK);
    float *ws = malloc(sizeof(float) * wsn);
    float *logits = malloc(sizeof(float) * B * Lt * V);
    float *dl = malloc(sizeof(float) * B * Lt * V);
    float *g = calloc(np, sizeof(float)), *g3 = calloc(np, sizeof(float));
    mctx m;
    memset(&m, 0, sizeof m);
    m.c = &c;
    m.prm = prm;
    m.logits = logits;
    m.ws = ws;
    m.B = B;
    m.Ls = Ls;
    m.Lt = Lt;
    m.src = src;
    m.tgt = tgt;
    m.y = y;
    m.len = len;
    m.smooth = 0.1;
    attn_sdpa_opts_init(&m.o);
    m.o.impl = ATTN_IMPL_REF;
    m.o.threads = 1;
    model_loss(&m, dl);
    CHECK_STATUS(attn_transformer_backward(&c, prm, B, Ls, src, len, Lt, tgt,
                                           &m.o, dl, ws, g),
                 ATTN_OK);
    /* threads: the default kernels give the same bits on 1 and 3 threads */
    m.o.impl = ATTN_IMPL_AUTO;
    float *ga = calloc(np, sizeof(float));
    for (int pass = 0; pass < 2; pass++) {
        m.o.threads = pass ? 3 : 1;
        model_loss(&m, dl);
        CHECK_STATUS(attn_transformer_backward(&c, prm, B, Ls, src, len, Lt,
                                               tgt, &m.o, dl, ws,
                                               pass ? g3 : ga),
                     ATTN_OK);
    }
    CHECK_MSG(memcmp(ga, g3, sizeof(float) * np) == 0,
              "%s: 1 and 3 threads differ", what);
    m.o.impl = ATTN_IMPL_REF;
    m.o.threads = 1;
    /* central differences, a spread of entries of every slice */
    const double h = 1e-3;
    for (int64_t s = 0; s < ns; s++) {
        const int64_t n = sl[s].shape[0] * sl[s].shape[1];
        const int64_t stride = n > 12 ? n / 11 : 1;
        double worst = 0, gmax = 1e-2; /* b_k is exactly 0: f32 noise */
        int64_t at = sl[s].offset;
        double fd_at = 0;
        for (int64_t i = 0; i < n; i += stride) {
            const int64_t k = sl[s].offset + i;
            const float x0 = prm[k];
            prm[k] = (float)(x0 + h);
            const double hp = (double)prm[k] - x0;
            double fp = model_loss(&m, NULL);
            prm[k] = (float)(x0 - h);
            const double hm = x0 - (double)prm[k];
            double fm = model_loss(&m, NULL);
            prm[k] = x0;
            double fd = (fp - fm) / (hp + hm);
            gmax = fmax(gmax, fabs(fd));
            if (fabs(fd - g[k]) > worst) {
                worst = fabs(fd - g[k]);
                at = k;
                fd_at = fd;
            }
        }
        CHECK_MSG(worst <= 2e-2 * gmax,
                  "%s %s: grad[%lld] = %g, central "
                  "difference %g (max %g)",
                  what, sl[s].name, (long long)at, g[at], fd_at, gmax);
    }
    free(sl);
    free(prm);
    free(ws);
    free(logits);
    free(dl);
    free(g);
    free(g3);
    free(ga);
}

static void smoothing(void) {
    const float z[2 * 3] = {1.0f, -2.0f, 0.5f, 0.0f, 3.0f, 1.0f};
    const int32_t t[2] = {2, ATTN_IGNORE_INDEX};
    double loss;
    float dz[6];
    CHECK_STATUS(attn_cross_entropy_smoothed(2, 3, z, t, ATTN_IGNORE_INDEX, 0.2,
                                             &loss, dz, NULL, NULL),
                 ATTN_OK);
    double lse = log(exp(1.0) + exp(-2.0) + exp(0.5));
    double want = 0.8 * (lse - 0.5) + 0.2 / 3 * (3 * lse - (1.0 - 2.0 + 0.5));
    CHECK_NEAR(loss, want, 1e-9);
    CHECK_NEAR(dz[0], exp(1.0 - lse) - 0.2 / 3, 1e-6);
    CHECK_NEAR(dz[2], exp(0.5 - lse) - 0.8 - 0.2 / 3, 1e-6);
    CHECK(dz[3] == 0 && dz[4] == 0 && dz[5] == 0);
    CHECK_STATUS(attn_cross_entropy_smoothed(2, 3, z, t, ATTN_IGNORE_INDEX, 1.0,
                                             &loss, dz, NULL, NULL),
                 ATTN_E_INVALID);
}

static void errors(void) {
    attn_transformer_config c;
    attn_transformer_config_init(&c, ATTN_MODEL_ENCDEC);
    CHECK_STATUS(attn_transformer_check(&c), ATTN_E_INVALID); /* no vocab */
    c.vocab_src = 5;
    c.vocab_tgt = 6;
    c.max_src = 4;
    c.max_tgt = 3;
    CHECK_STATUS(attn_transformer_check(&c), ATTN_OK);
    c.share_embeddings = 1;
    CHECK_STATUS(attn_transformer_check(&c), ATTN_E_INVALID);
    c.share_embeddings = 0;
    c.dec.cross = 0;
    CHECK_STATUS(attn_transformer_check(&c), ATTN_E_INVALID);
    c.dec.cross = 1;
    c.enc.d_model = 32;
    CHECK_STATUS(attn_transformer_check(&c), ATTN_E_INVALID);
    c.enc.d_model = 64;
    size_t n;
    CHECK_STATUS(attn_transformer_workspace_size(&c, 1, 5, 3, &n),
                 ATTN_E_SHAPE);
    CHECK_STATUS(attn_transformer_workspace_size(&c, 1, 4, 3, &n), ATTN_OK);
    float *prm = malloc(sizeof(float) * attn_transformer_param_count(&c));
    float *ws = malloc(sizeof(float) * n), lg[3 * 6];
    attn_transformer_init(&c, prm, 1);
    int32_t src[4] = {0, 1, 2, 5}, tgt[3] = {0, 1, 2};
    attn_layer_opts o;
    attn_sdpa_opts_init(&o);
    CHECK_STATUS(attn_transformer_forward(&c, prm, 1, 4, src, NULL, 3, tgt, &o,
                                          lg, NULL, ws),
                 ATTN_E_INVALID);
    src[3] = 4;
    int64_t len = 0;
    CHECK_STATUS(attn_transformer_forward(&c, prm, 1, 4, src, &len, 3, tgt, &o,
                                          lg, NULL, ws),
                 ATTN_E_SHAPE);
    CHECK_STATUS(attn_transformer_forward(&c, prm, 1, 4, src, NULL, 3, tgt, &o,
                                          lg, NULL, ws),
                 ATTN_OK);
    /* save / load round trip; a decoder file is not a transformer file */
    char path[] = "/tmp/attn_tr_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    c.tie_output = 1;
    CHECK_STATUS(attn_transformer_save(path, &c, prm), ATTN_OK);
    attn_transformer_config c2;
    float *p2 = NULL;
    CHECK_STATUS(attn_transformer_load(path, &c2, &p2), ATTN_OK);
    CHECK(p2 && memcmp(&c, &c2, sizeof c) == 0 &&
          memcmp(prm, p2, sizeof(float) * attn_transformer_param_count(&c)) ==
              0);
    attn_params_free(p2);
    CHECK_STATUS(attn_decoder_save(path, &c.dec, prm), ATTN_OK);
    CHECK_STATUS(attn_transformer_load(path, &c2, &p2), ATTN_E_FORMAT);
    unlink(path);
    free(prm);
    free(ws);
}

static attn_transformer_config tiny(attn_model_kind k) {
    attn_transformer_config c;
    attn_transformer_config_init(&c, k);
    c.enc.num_layers = 1;
    c.enc.d_model = 8;
    c.enc.num_heads = 2;
    c.enc.dim_feedforward = 12;
    c.dec.num_layers = 2;
    c.dec.d_model = 8;
    c.dec.num_heads = 2;
    c.dec.dim_feedforward = 12;
    c.vocab_src = 7;
    c.vocab_tgt = 6;
    return c;
}

int main(void) {
    attn_transformer_config c = tiny(ATTN_MODEL_ENCDEC);
    run(c, "encdec");
    c.share_embeddings = 1;
    c.tie_output = 1;
    c.vocab_src = 6;
    run(c, "encdec shared+tied");
    c = tiny(ATTN_MODEL_ENCDEC);
    c.dec.cross_attention = ATTN_ATTENTION_ADDITIVE;
    c.dec.norm_first = 0;
    c.dec.final_norm = 0;
    c.enc.norm_first = 0;
    c.enc.final_norm = 0;
    run(c, "encdec additive post-norm");
    c = tiny(ATTN_MODEL_DECODER);
    run(c, "decoder-only");
    c.tie_output = 1;
    run(c, "decoder-only tied");
    smoothing();
    errors();
    return check_done("test_transformer");
}
