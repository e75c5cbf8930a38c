/* The encoder stack against a plain double reference (post- and pre-norm,
 * dot and additive attention, ReLU and GELU, final norm, padding and
 * look-ahead masks, dropout at every site), central differences in double
 * for every parameter slice and the input, threads, recomputed weights,
 * LayerNorm/linear/positions pieces and the tutorial shape (32, 100, 512). */
#include "attn.h"
#include "attn_layers.h"
#include "check.h"
#include "layers_ref.h"
#include "../layers/layers.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    const attn_encoder_config *c;
    int64_t B, L, ns;
    const attn_param_slice *sl;
    double *prm, *x, *R, *out;
    const attn_layer_opts *o;
} ectx;

static const double *S(const ectx *e, const char *fmt, int64_t l) {
    return ref_slice_at(e->sl, e->ns, e->prm, fmt, l);
}

/* The dropout mask of an activation site, as multipliers. */
static void drop_mask(const attn_layer_opts *o, int64_t l, int site, double *x,
                      int64_t n) {
    float *m = malloc(sizeof(float) * n);
    for (int64_t i = 0; i < n; i++) m[i] = 1.0f;
    attn__dropout_apply(o->seed, attn__enc_stream(l, site), o->dropout_p, m, n,
                        1);
    for (int64_t i = 0; i < n; i++) x[i] *= m[i];
    free(m);
}

static void ref_encoder(ectx *e) {
    const attn_encoder_config *c = e->c;
    const int64_t B = e->B, L = e->L, E = c->d_model, F = c->dim_feedforward;
    const int64_t n = B * L;
    const double eps = c->layer_norm_eps > 0 ? c->layer_norm_eps : 1e-5;
    double *cur = malloc(sizeof(double) * n * E),
           *ain = malloc(sizeof(double) * n * E);
    double *a = malloc(sizeof(double) * n * E),
           *ctx = malloc(sizeof(double) * n * E);
    double *r1 = malloc(sizeof(double) * n * E),
           *fin = malloc(sizeof(double) * n * E);
    double *h = malloc(sizeof(double) * n * F),
           *f = malloc(sizeof(double) * n * E);
    memcpy(cur, e->x, sizeof(double) * n * E);
    for (int64_t l = 0; l < c->num_layers; l++) {
        attn_layer_opts oa = *e->o;
        oa.seed = attn__enc_seed(e->o->seed, l);
        if (c->norm_first)
            ref_layernorm(n, E, cur, S(e, "layers.%lld.ln1_gamma", l),
                          S(e, "layers.%lld.ln1_beta", l), eps, ain);
        else
            memcpy(ain, cur, sizeof(double) * n * E);
        if (c->attention == ATTN_ATTENTION_DOT) {
            attn_mha_config mc = {E, c->num_heads, c->num_kv_heads, 0, 0, 1};
            ref_mha(&mc, S(e, "layers.%lld.attn.w_q", l), B, L, L, ain, ain,
                    ain, &oa, a, NULL);
        } else {
            attn_additive_config ac = {
                E, E, E, c->additive_dim ? c->additive_dim : E / 2, 1, 0};
            ref_additive(&ac, S(e, "layers.%lld.attn.w_q", l), B, L, L, ain,
                         ain, ain, &oa, ctx, NULL);
            ref_linear(n, E, E, ctx, S(e, "layers.%lld.attn.w_o", l),
                       S(e, "layers.%lld.attn.b_o", l), a);
        }
        drop_mask(e->o, l, 1, a, n * E);
        for (int64_t i = 0; i < n * E; i++) r1[i] = cur[i] + a[i];
        if (c->norm_first)
            ref_layernorm(n, E, r1, S(e, "layers.%lld.ln2_gamma", l),
                          S(e, "layers.%lld.ln2_beta", l), eps, fin);
        else
            ref_layernorm(n, E, r1, S(e, "layers.%lld.ln1_gamma", l),
                          S(e, "layers.%lld.ln1_beta", l), eps, fin);
        ref_linear(n, E, F, fin, S(e, "layers.%lld.w_1", l),
                   S(e, "layers.%lld.b_1", l), h);
        for (int64_t i = 0; i < n * F; i++)
            h[i] = c->activation == ATTN_ACT_GELU
                       ? 0.5 * h[i] * (1 + erf(h[i] / sqrt(2.0)))
                       : (h[i] > 0 ? h[i] : 0);
        drop_mask(e->o, l, 2, h, n * F);
        ref_linear(n, F, E, h, S(e, "layers.%lld.w_2", l),
                   S(e, "layers.%lld.b_2", l), f);
        drop_mask(e->o, l, 3, f, n * E);
        if (c->norm_first) {
            for (int64_t i = 0; i < n * E; i++) cur[i] = r1[i] + f[i];
        } else {
            for (int64_t i = 0; i < n * E; i++) f[i] += fin[i];
            ref_layernorm(n, E, f, S(e, "layers.%lld.ln2_gamma", l),
                          S(e, "layers.%lld.ln2_beta", l), eps, cur);
        }
    }
    if (c->final_norm)
        ref_layernorm(n, E, cur, S(e, "norm_gamma", 0), S(e, "norm_beta", 0),
                      eps, e->out);
    else
        memcpy(e->out, cur, sizeof(double) * n * E);
    free(cur);
    free(ain);
    free(a);
    free(ctx);
    free(r1);
    free(fin);
    free(h);
    free(f);
}

static double loss(void *p) {
    ectx *e = p;
    ref_encoder(e);
    double s = 0;
    for (int64_t i = 0; i < e->B * e->L * e->c->d_model; i++)
        s += e->out[i] * e->R[i];
    return s;
}

static void run_case(attn_encoder_config c, int64_t B, int64_t L, int mk,
                     double p, int gradcheck) {
    unsigned long long st =
        99 + (unsigned long long)mk * 5 + (unsigned long long)c.norm_first;
    const int64_t E = c.d_model, n = B * L * E,
                  np = attn_encoder_param_count(&c);
    CHECK(np > 0);
    int64_t ns;
    CHECK_STATUS(attn_encoder_param_slices(&c, "", 0, NULL, 0, &ns), ATTN_OK);
    attn_param_slice *sl = malloc(sizeof *sl * ns);
    attn_encoder_param_slices(&c, "", 0, sl, ns, &ns);
    CHECK(sl[ns - 1].offset + sl[ns - 1].shape[0] * sl[ns - 1].shape[1] == np);
    float *prm = malloc(sizeof(float) * np);
    CHECK_STATUS(attn_encoder_init(&c, prm, 17), ATTN_OK);
    /* perturb everything (zero biases and unit gammas would hide errors) */
    for (int64_t i = 0; i < np; i++) prm[i] += (float)(0.1 * test_rand(&st));
    double *prmd = malloc(sizeof(double) * np);
    for (int64_t i = 0; i < np; i++) prmd[i] = prm[i];
    double *x = malloc(sizeof(double) * n), *R = malloc(sizeof(double) * n);
    double *outd = malloc(sizeof(double) * n);
    ref_fill(x, n, 1.0, &st);
    ref_fill(R, n, 1.0, &st);
    ref_round(x, n);
    ref_round(R, n);
    float *xf = ref_to_f32(x, n), *Rf = ref_to_f32(R, n);
    attn_layer_opts o;
    attn_sdpa_opts_init(&o);
    mask_store *ms = calloc(1, sizeof *ms);
    const int64_t Hw = attn_encoder_weight_heads(&c);
    set_mask(&o, mk, ms, B, Hw, L, L, &st);
    o.dropout_p = p;
    o.seed = 21;
    ectx e = {&c, B, L, ns, sl, prmd, x, R, outd, &o};
    ref_encoder(&e);
    size_t wsn;
    CHECK_STATUS(attn_encoder_workspace_size(&c, B, L, &wsn), ATTN_OK);
    float *ws = malloc(sizeof(float) * wsn), *out = malloc(sizeof(float) * n);
    const int64_t nw = c.num_layers * B * Hw * L * L;
    float *w = malloc(sizeof(float) * nw),
          *w2 = malloc(sizeof(float) * B * Hw * L * L);
    const int64_t ng = np + n;
    float *g1 = calloc(ng, sizeof(float)), *g3 = calloc(ng, sizeof(float));
    float *out3 = malloc(sizeof(float) * n);
    for (int pass = 0; pass < 2; pass++) {
        o.threads = pass ? 3 : 1;
        float *g = pass ? g3 : g1;
        CHECK_STATUS(attn_encoder_forward(&c, prm, B, L, xf, &o,
                                          pass ? out3 : out, w, ws),
                     ATTN_OK);
        CHECK_STATUS(
            attn_encoder_backward(&c, prm, B, L, xf, &o, Rf, ws, g, g + np),
            ATTN_OK);
    }
    o.threads = 0;
    const char *kind = c.attention == ATTN_ATTENTION_DOT ? "dot" : "additive";
    double eo = ref_max_rel(out, outd, n);
    CHECK_MSG(eo <= 5e-5,
              "encoder %s norm_first=%d act=%d final=%d mask=%s p=%g: "
              "out err %g",
              kind, c.norm_first, (int)c.activation, c.final_norm,
              mask_name[mk], p, eo);
    CHECK_MSG(memcmp(out, out3, sizeof(float) * n) == 0 &&
                  memcmp(g1, g3, sizeof(float) * ng) == 0,
              "encoder %s: 1 and 3 threads differ", kind);
    if (p == 0) { /* recomputed weights equal the forward's */
        CHECK_STATUS(attn_encoder_layer_weights(&c, prm, B, L, &o, ws,
                                                c.num_layers - 1, w2),
                     ATTN_OK);
        double ew = 0;
        for (int64_t i = 0; i < B * Hw * L * L; i++)
            ew = fmax(ew,
                      fabs(w2[i] - w[(c.num_layers - 1) * B * Hw * L * L + i]));
        CHECK_MSG(ew <= 1e-6, "encoder %s: recomputed weights differ by %g",
                  kind, ew);
    }
    if (gradcheck) {
        char what[160];
        for (int64_t s = 0; s < ns; s++) {
            snprintf(what, sizeof what, "encoder %s nf=%d mask=%s p=%g %.47s",
                     kind, c.norm_first, mask_name[mk], p, sl[s].name);
            ref_fd_check(what, prmd + sl[s].offset,
                         sl[s].shape[0] * sl[s].shape[1], g1 + sl[s].offset,
                         loss, &e, 5e-4);
        }
        snprintf(what, sizeof what, "encoder %s nf=%d mask=%s dx", kind,
                 c.norm_first, mask_name[mk]);
        ref_fd_check(what, x, n, g1 + np, loss, &e, 5e-4);
    }
    free(sl);
    free(prm);
    free(prmd);
    free(x);
    free(R);
    free(outd);
    free(xf);
    free(Rf);
    free(ms);
    free(ws);
    free(out);
    free(w);
    free(w2);
    free(g1);
    free(g3);
    free(out3);
}

static void tutorial(attn_attention_type at, int64_t B) {
    attn_encoder_config c;
    attn_encoder_config_init(&c);
    c.attention = at;
    const int64_t L = 100, E = 512, n = B * L * E;
    int64_t np = attn_encoder_param_count(&c);
    float *prm = malloc(sizeof(float) * np), *x = malloc(sizeof(float) * n);
    float *out = malloc(sizeof(float) * n);
    unsigned long long st = 5;
    for (int64_t i = 0; i < n; i++) x[i] = (float)(0.5 * test_rand(&st) + 0.5);
    CHECK_STATUS(attn_encoder_init(&c, prm, 1), ATTN_OK);
    size_t wsn;
    CHECK_STATUS(attn_encoder_workspace_size(&c, B, L, &wsn), ATTN_OK);
    float *ws = malloc(sizeof(float) * wsn);
    attn_layer_opts o;
    attn_sdpa_opts_init(&o);
    CHECK_STATUS(attn_encoder_forward(&c, prm, B, L, x, &o, out, NULL, ws),
                 ATTN_OK);
    /* post-norm output rows have mean 0 and variance 1 (gamma 1, beta 0) */
    double worst = 0;
    for (int64_t r = 0; r < B * L; r++) {
        double m = 0, v = 0;
        for (int64_t d = 0; d < E; d++) m += out[r * E + d];
        m /= E;
        for (int64_t d = 0; d < E; d++)
            v += (out[r * E + d] - m) * (out[r * E + d] - m);
        worst = fmax(worst, fmax(fabs(m), fabs(v / E - 1)));
    }
    CHECK_MSG(worst <= 1e-3, "tutorial %d: output rows not normalized (%g)",
              (int)at, worst);
    free(prm);
    free(x);
    free(out);
    free(ws);
}

static void pieces(void) {
    float pe[7 * 6];
    CHECK_STATUS(attn_positional_encoding(7, 6, pe), ATTN_OK);
    double e = 0;
    for (int p = 0; p < 7; p++)
        for (int i = 0; i < 3; i++) {
            double ang = p / pow(10000.0, 2.0 * i / 6);
            e = fmax(e, fabs(pe[p * 6 + 2 * i] - sin(ang)));
            e = fmax(e, fabs(pe[p * 6 + 2 * i + 1] - cos(ang)));
        }
    CHECK_MSG(e <= 1e-6, "positional encoding off by %g", e);
    float x[2 * 7 * 6] = {0};
    CHECK_STATUS(attn_add_positional_encoding(2, 7, 6, x), ATTN_OK);
    CHECK(x[7 * 6 + 13] == pe[13]);
    CHECK_STATUS(attn_positional_encoding(0, 6, pe), ATTN_E_SHAPE);
    /* a length of 0 is a shape error, not an overflow */
    CHECK_STATUS(attn_add_positional_encoding(2, 0, 6, x), ATTN_E_SHAPE);
    CHECK_STATUS(attn_add_positional_encoding(2, 7, -1, x), ATTN_E_SHAPE);
    CHECK_STATUS(attn_linear_forward(2, 0, 3, x, x, NULL, x), ATTN_E_SHAPE);
    CHECK_STATUS(attn_layernorm_forward(2, 3, x, x, x, 0.0, x, NULL, NULL),
                 ATTN_E_INVALID);
    attn_encoder_config c;
    attn_encoder_config_init(&c);
    c.num_heads = 7;
    CHECK(attn_encoder_param_count(&c) == 0);
    size_t n;
    CHECK_STATUS(attn_encoder_workspace_size(&c, 1, 1, &n), ATTN_E_INVALID);
    attn_encoder_config_init(&c);
    c.d_model = 4;
    c.num_heads = 2;
    c.dim_feedforward = 3;
    float prm[512], ws[4096], y[32];
    attn_layer_opts o;
    attn_sdpa_opts_init(&o);
    CHECK_STATUS(attn_encoder_forward(&c, prm, 1, 2, y, &o, y, NULL, ws),
                 ATTN_E_INVALID);
    attn_encoder_layer_params lp;
    CHECK_STATUS(attn_encoder_layer_view(&c, prm, 1, &lp), ATTN_E_INVALID);
}

int main(void) {
    const int san = getenv("ATTN_SANITIZED") != NULL;
    attn_encoder_config c;
    attn_encoder_config_init(&c);
    c.num_layers = 2;
    c.d_model = 6;
    c.num_heads = 2;
    c.dim_feedforward = 7;
    for (int at = 0; at < 2; at++)
        for (int nf = 0; nf < 2; nf++) {
            attn_encoder_config k = c;
            k.attention = at ? ATTN_ATTENTION_ADDITIVE : ATTN_ATTENTION_DOT;
            k.norm_first = nf;
            k.final_norm = nf;
            k.activation = nf ? ATTN_ACT_GELU : ATTN_ACT_RELU;
            k.additive_dim = at ? 5 : 0;
            run_case(k, 2, 5, M_KEYLEN, 0.0, 1);
            run_case(k, 2, 5, M_CAUSAL, 0.25, 1);
            run_case(k, 3, 4, M_NONE, 0.0, nf == 0);
        }
    attn_encoder_config g = c;
    g.num_heads = 2;
    g.num_kv_heads = 1;
    g.num_layers = 1;
    g.layer_norm_eps = 1e-3;
    run_case(g, 1, 3, M_KEEP, 0.0, 1);
    attn_encoder_config big = c;
    big.num_layers = 1;
    big.d_model = 24;
    big.num_heads = 4;
    big.dim_feedforward = 33;
    run_case(big, 2, 37, M_BLOCK, 0.1, 0);
    big.attention = ATTN_ATTENTION_ADDITIVE;
    run_case(big, 2, 37, M_WINDOW, 0.1, 0);
    tutorial(ATTN_ATTENTION_DOT, san ? 2 : 32);
    tutorial(ATTN_ATTENTION_ADDITIVE, san ? 2 : 32);
    pieces();
    return check_done("test_encoder");
}
