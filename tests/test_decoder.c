/* The decoder stack against a plain double reference: self-attention under
 * the look-ahead mask, cross-attention (dot and additive) with memory key
 * padding, post- and pre-norm, final norm, dropout at every site, and
 * decoder-only stacks; central differences in double for every parameter
 * slice, the target input and the memory; 1 vs 3 and 5 threads;
 * save/load. */
#include "attn_transformer.h"
#include "check.h"
#include "layers_ref.h"
#include "../layers/layers.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    const attn_decoder_config *c;
    int64_t B, Lt, Ls, ns;
    const attn_param_slice *sl;
    double *prm, *x, *mem, *R, *out;
    const int64_t *mlen;
    const attn_layer_opts *o;
} dref;

static const double *S(const dref *e, const char *fmt, int64_t l) {
    return ref_slice_at(e->sl, e->ns, e->prm, fmt, l);
}

/* Dropout of an activation site as multipliers (stream 8 l + site). */
static void drop_mask(const attn_layer_opts *o, int64_t l, int site, double *x,
                      int64_t n) {
    float *m = malloc(sizeof(float) * n);
    for (int64_t i = 0; i < n; i++) m[i] = 1.0f;
    attn__dropout_apply(o->seed, (uint32_t)(l * 8 + site), o->dropout_p, m, n,
                        1);
    for (int64_t i = 0; i < n; i++) x[i] *= m[i];
    free(m);
}

/* One sublayer with residual and norm: cur <- sub(cur). body(in, a). */
typedef void (*body_fn)(const dref *e, int64_t l, const double *in, double *a);

static void body_sa(const dref *e, int64_t l, const double *in, double *a) {
    const attn_decoder_config *c = e->c;
    attn_mha_config mc = {c->d_model, c->num_heads,    c->num_kv_heads, 0,
                          0,          !c->attn_no_bias};
    attn_layer_opts o = *e->o;
    o.mask.causal = 1;
    if (c->rope.theta != 0) o.rope = &c->rope;
    if (c->sliding_window) o.mask.window_left = c->sliding_window - 1;
    o.seed = attn__enc_seed(e->o->seed, 2 * l);
    ref_mha(&mc, S(e, "layers.%lld.self_attn.w_q", l), e->B, e->Lt, e->Lt, in,
            in, in, &o, a, NULL);
}

static void body_ca(const dref *e, int64_t l, const double *in, double *a) {
    const attn_decoder_config *c = e->c;
    const int64_t E = c->d_model;
    attn_layer_opts o;
    attn_sdpa_opts_init(&o);
    o.dropout_p = e->o->dropout_p;
    o.seed = attn__enc_seed(e->o->seed, 2 * l + 1);
    o.mask.key_lengths = e->mlen;
    if (c->cross_attention == ATTN_ATTENTION_DOT) {
        attn_mha_config mc = {E, c->num_heads,    c->num_kv_heads, 0,
                              0, !c->attn_no_bias};
        ref_mha(&mc, S(e, "layers.%lld.cross_attn.w_q", l), e->B, e->Lt, e->Ls,
                in, e->mem, e->mem, &o, a, NULL);
        return;
    }
    attn_additive_config ac = {
        E, E, E, c->additive_dim ? c->additive_dim : E / 2, 1, 0};
    double *ctx = malloc(sizeof(double) * e->B * e->Lt * E);
    ref_additive(&ac, S(e, "layers.%lld.cross_attn.w_q", l), e->B, e->Lt, e->Ls,
                 in, e->mem, e->mem, &o, ctx, NULL);
    ref_linear(e->B * e->Lt, E, E, ctx, S(e, "layers.%lld.cross_attn.w_o", l),
               S(e, "layers.%lld.cross_attn.b_o", l), a);
    free(ctx);
}

static void body_ff(const dref *e, int64_t l, const double *in, double *a) {
    const attn_decoder_config *c = e->c;
    const int64_t n = e->B * e->Lt, E = c->d_model, F = c->dim_feedforward;
    const int glu = c->activation == ATTN_ACT_SWIGLU;
    double *h = malloc(sizeof(double) * n * F * 2);
    ref_linear(n, E, glu ? 2 * F : F, in, S(e, "layers.%lld.w_1", l),
               S(e, "layers.%lld.b_1", l), h);
    if (glu) /* silu(gate) * up, packed back to (n, F) */
        for (int64_t r = 0; r < n; r++)
            for (int64_t f = 0; f < F; f++) {
                double gt = h[r * 2 * F + f], up = h[r * 2 * F + F + f];
                h[r * F + f] = gt / (1 + exp(-gt)) * up;
            }
    else
        for (int64_t i = 0; i < n * F; i++)
            h[i] = c->activation == ATTN_ACT_GELU
                       ? 0.5 * h[i] * (1 + erf(h[i] / sqrt(2.0)))
                       : (h[i] > 0 ? h[i] : 0);
    drop_mask(e->o, l, 3, h, n * F);
    ref_linear(n, F, E, h, S(e, "layers.%lld.w_2", l),
               S(e, "layers.%lld.b_2", l), a);
    free(h);
}

static void sub(const dref *e, int64_t l, body_fn body, int site,
                const char *ln, double *cur) {
    const int64_t n = e->B * e->Lt * e->c->d_model, rows = e->B * e->Lt;
    const double eps = e->c->layer_norm_eps > 0 ? e->c->layer_norm_eps : 1e-5;
    char g[32], b[32];
    snprintf(g, sizeof g, "layers.%%lld.%s_gamma", ln);
    snprintf(b, sizeof b, "layers.%%lld.%s_beta", ln);
    double *in = malloc(sizeof(double) * n), *a = malloc(sizeof(double) * n);
    void (*norm)(int64_t, int64_t, const double *, const double *,
                 const double *, double, double *) =
        e->c->norm == ATTN_NORM_RMS ? ref_rmsnorm : ref_layernorm;
    if (e->c->norm_first)
        norm(rows, e->c->d_model, cur, S(e, g, l), S(e, b, l), eps, in);
    else
        memcpy(in, cur, sizeof(double) * n);
    body(e, l, in, a);
    drop_mask(e->o, l, site, a, n);
    for (int64_t i = 0; i < n; i++) a[i] += cur[i];
    if (e->c->norm_first)
        memcpy(cur, a, sizeof(double) * n);
    else
        norm(rows, e->c->d_model, a, S(e, g, l), S(e, b, l), eps, cur);
    free(in);
    free(a);
}

static void ref_decoder(dref *e) {
    const attn_decoder_config *c = e->c;
    const int64_t n = e->B * e->Lt * c->d_model;
    const double eps = c->layer_norm_eps > 0 ? c->layer_norm_eps : 1e-5;
    double *cur = malloc(sizeof(double) * n);
    memcpy(cur, e->x, sizeof(double) * n);
    for (int64_t l = 0; l < c->num_layers; l++) {
        sub(e, l, body_sa, 1, "ln1", cur);
        if (c->cross) sub(e, l, body_ca, 2, "ln2", cur);
        sub(e, l, body_ff, 4, "ln3", cur);
    }
    if (c->final_norm)
        (c->norm == ATTN_NORM_RMS ? ref_rmsnorm : ref_layernorm)(
            e->B * e->Lt, c->d_model, cur, S(e, "norm_gamma", 0),
            S(e, "norm_beta", 0), eps, e->out);
    else
        memcpy(e->out, cur, sizeof(double) * n);
    free(cur);
}

static double loss(void *p) {
    dref *e = p;
    ref_decoder(e);
    double s = 0;
    for (int64_t i = 0; i < e->B * e->Lt * e->c->d_model; i++)
        s += e->out[i] * e->R[i];
    return s;
}

static void run_case(attn_decoder_config c, int64_t B, int64_t Lt, int64_t Ls,
                     int pad, double p, int gradcheck) {
    unsigned long long st =
        7 + (unsigned long long)(c.norm_first * 3 + c.cross * 5 +
                                 (int)c.cross_attention * 11);
    const int64_t E = c.d_model, n = B * Lt * E, nm = B * Ls * E;
    const int64_t np = attn_decoder_param_count(&c);
    CHECK(np > 0);
    int64_t ns;
    CHECK_STATUS(attn_decoder_param_slices(&c, "", 0, NULL, 0, &ns), ATTN_OK);
    attn_param_slice *sl = malloc(sizeof *sl * ns);
    attn_decoder_param_slices(&c, "", 0, sl, ns, &ns);
    CHECK(sl[ns - 1].offset + sl[ns - 1].shape[0] * sl[ns - 1].shape[1] == np);
    float *prm = malloc(sizeof(float) * np);
    CHECK_STATUS(attn_decoder_init(&c, prm, 17), ATTN_OK);
    for (int64_t i = 0; i < np; i++) prm[i] += (float)(0.1 * test_rand(&st));
    double *prmd = malloc(sizeof(double) * np);
    for (int64_t i = 0; i < np; i++) prmd[i] = prm[i];
    double *x = malloc(sizeof(double) * n), *R = malloc(sizeof(double) * n);
    double *mem = malloc(sizeof(double) * nm),
           *outd = malloc(sizeof(double) * n);
    ref_fill(x, n, 1.0, &st);
    ref_fill(R, n, 1.0, &st);
    ref_fill(mem, nm, 1.0, &st);
    ref_round(x, n);
    ref_round(R, n);
    ref_round(mem, nm);
    float *xf = ref_to_f32(x, n), *Rf = ref_to_f32(R, n),
          *mf = ref_to_f32(mem, nm);
    int64_t mlen[8];
    for (int64_t b = 0; b < B; b++) mlen[b] = pad ? Ls - (b * 2) % Ls : Ls;
    attn_layer_opts o;
    attn_sdpa_opts_init(&o);
    o.dropout_p = p;
    o.seed = 21;
    dref e = {&c, B, Lt, Ls, ns, sl, prmd, x, mem, R, outd, pad ? mlen : NULL,
              &o};
    ref_decoder(&e);
    size_t wsn;
    CHECK_STATUS(attn_decoder_workspace_size(&c, B, Lt, Ls, &wsn), ATTN_OK);
    float *ws = malloc(sizeof(float) * wsn), *out = malloc(sizeof(float) * n);
    float *out3 = malloc(sizeof(float) * n);
    const int64_t ng = np + n + nm;
    float *g1 = calloc(ng, sizeof(float)), *g3 = calloc(ng, sizeof(float));
    float *out5 = malloc(sizeof(float) * n), *g5 = calloc(ng, sizeof(float));
    const int64_t Hc = attn_decoder_cross_heads(&c);
    float *cw = c.cross
                    ? malloc(sizeof(float) * c.num_layers * B * Hc * Lt * Ls)
                    : NULL;
    for (int pass = 0; pass < 3; pass++) {
        o.threads = 2 * pass + 1;
        float *g = pass == 2 ? g5 : pass ? g3 : g1;
        CHECK_STATUS(attn_decoder_forward(&c, prm, B, Lt, Ls, xf, mf, e.mlen,
                                          &o,
                                          pass == 2 ? out5
                                          : pass    ? out3
                                                    : out,
                                          NULL, cw, ws),
                     ATTN_OK);
        CHECK_STATUS(attn_decoder_backward(&c, prm, B, Lt, Ls, xf, mf, e.mlen,
                                           &o, Rf, ws, g, g + np, g + np + n),
                     ATTN_OK);
    }
    o.threads = 0;
    const char *kind = !c.cross ? "decoder-only"
                       : c.cross_attention == ATTN_ATTENTION_DOT ? "dot"
                                                                 : "additive";
    double eo = ref_max_rel(out, outd, n);
    CHECK_MSG(eo <= 5e-5, "decoder %s nf=%d pad=%d p=%g: out err %g", kind,
              c.norm_first, pad, p, eo);
    CHECK_MSG(memcmp(out, out3, sizeof(float) * n) == 0 &&
                  memcmp(g1, g3, sizeof(float) * ng) == 0,
              "decoder %s: 1 and 3 threads differ", kind);
    CHECK_MSG(memcmp(out, out5, sizeof(float) * n) == 0 &&
                  memcmp(g1, g5, sizeof(float) * ng) == 0,
              "decoder %s: 1 and 5 threads differ", kind);
    if (cw && p == 0) { /* cross weights: rows sum to 1 over visible keys */
        double worst = 0;
        for (int64_t r = 0; r < c.num_layers * B * Hc * Lt; r++) {
            int64_t b = (r / (Hc * Lt)) % B;
            double s = 0, leak = 0;
            for (int64_t j = 0; j < Ls; j++) {
                s += cw[r * Ls + j];
                if (j >= mlen[b] && pad) leak += fabs(cw[r * Ls + j]);
            }
            worst = fmax(worst, fabs(s - 1) + leak);
        }
        CHECK_MSG(worst <= 1e-5, "decoder %s: cross weights off by %g", kind,
                  worst);
    }
    if (gradcheck) {
        char what[160];
        for (int64_t s = 0; s < ns; s++) {
            snprintf(what, sizeof what, "decoder %s nf=%d pad=%d p=%g %.47s",
                     kind, c.norm_first, pad, p, sl[s].name);
            ref_fd_check(what, prmd + sl[s].offset,
                         sl[s].shape[0] * sl[s].shape[1], g1 + sl[s].offset,
                         loss, &e, 5e-4);
        }
        snprintf(what, sizeof what, "decoder %s nf=%d dx", kind, c.norm_first);
        ref_fd_check(what, x, n, g1 + np, loss, &e, 5e-4);
        if (c.cross) {
            snprintf(what, sizeof what, "decoder %s nf=%d dmemory", kind,
                     c.norm_first);
            ref_fd_check(what, mem, nm, g1 + np + n, loss, &e, 5e-4);
        }
    }
    free(sl);
    free(prm);
    free(prmd);
    free(x);
    free(R);
    free(mem);
    free(outd);
    free(xf);
    free(Rf);
    free(mf);
    free(ws);
    free(out);
    free(out3);
    free(out5);
    free(g5);
    free(g1);
    free(g3);
    free(cw);
}

/* Causality: changing target position t changes no output before t. */
static void causal(void) {
    attn_decoder_config c;
    attn_decoder_config_init(&c);
    c.num_layers = 2;
    c.d_model = 8;
    c.num_heads = 2;
    c.dim_feedforward = 9;
    const int64_t B = 1, Lt = 6, Ls = 4, E = 8;
    float *prm = malloc(sizeof(float) * attn_decoder_param_count(&c));
    attn_decoder_init(&c, prm, 3);
    float x[6 * 8], m[4 * 8], o1[6 * 8], o2[6 * 8];
    unsigned long long st = 3;
    for (int i = 0; i < Lt * E; i++) x[i] = (float)test_rand(&st);
    for (int i = 0; i < Ls * E; i++) m[i] = (float)test_rand(&st);
    size_t wsn;
    attn_decoder_workspace_size(&c, B, Lt, Ls, &wsn);
    float *ws = malloc(sizeof(float) * wsn);
    attn_layer_opts o;
    attn_sdpa_opts_init(&o);
    CHECK_STATUS(attn_decoder_forward(&c, prm, B, Lt, Ls, x, m, NULL, &o, o1,
                                      NULL, NULL, ws),
                 ATTN_OK);
    x[4 * E + 1] += 1.0f;
    CHECK_STATUS(attn_decoder_forward(&c, prm, B, Lt, Ls, x, m, NULL, &o, o2,
                                      NULL, NULL, ws),
                 ATTN_OK);
    CHECK(memcmp(o1, o2, sizeof(float) * 4 * E) == 0);
    CHECK(memcmp(o1 + 4 * E, o2 + 4 * E, sizeof(float) * 2 * E) != 0);
    /* errors */
    int64_t bad = 5;
    CHECK_STATUS(attn_decoder_forward(&c, prm, B, Lt, Ls, x, m, &bad, &o, o2,
                                      NULL, NULL, ws),
                 ATTN_E_SHAPE);
    CHECK_STATUS(attn_decoder_forward(&c, prm, B, Lt, Ls, x, NULL, NULL, &o, o2,
                                      NULL, NULL, ws),
                 ATTN_E_INVALID);
    CHECK_STATUS(attn_decoder_forward(&c, prm, B, Lt, Ls, x, m, NULL, &o, x,
                                      NULL, NULL, ws),
                 ATTN_E_INVALID);
    x[3] = NAN;
    CHECK_STATUS(attn_decoder_forward(&c, prm, B, Lt, Ls, x, m, NULL, &o, o2,
                                      NULL, NULL, ws),
                 ATTN_E_NONFINITE);
    attn_decoder_config b = c;
    b.num_heads = 3;
    CHECK(attn_decoder_param_count(&b) == 0);
    CHECK_STATUS(attn_decoder_check(&b), ATTN_E_INVALID);
    b = c;
    b.cross = 2;
    CHECK_STATUS(attn_decoder_check(&b), ATTN_E_INVALID);
    /* save / load round trip, and a file of another kind */
    char path[] = "/tmp/attn_dec_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    CHECK_STATUS(attn_decoder_save(path, &c, prm), ATTN_OK);
    attn_decoder_config c2;
    float *p2 = NULL;
    CHECK_STATUS(attn_decoder_load(path, &c2, &p2), ATTN_OK);
    CHECK(p2 && memcmp(&c, &c2, sizeof c) == 0 &&
          memcmp(prm, p2, sizeof(float) * attn_decoder_param_count(&c)) == 0);
    attn_params_free(p2);
    attn_mha_config mc = {8, 2, 0, 0, 0, 1};
    CHECK_STATUS(attn_mha_save(path, &mc, prm), ATTN_OK);
    p2 = NULL;
    CHECK_STATUS(attn_decoder_load(path, &c2, &p2), ATTN_E_FORMAT);
    CHECK(p2 == NULL);
    unlink(path);
    free(prm);
    free(ws);
}

int main(void) {
    attn_decoder_config c;
    attn_decoder_config_init(&c);
    c.num_layers = 2;
    c.d_model = 6;
    c.num_heads = 2;
    c.dim_feedforward = 7;
    for (int kind = 0; kind < 3; kind++)
        for (int nf = 0; nf < 2; nf++) {
            attn_decoder_config k = c;
            k.cross = kind < 2;
            k.cross_attention =
                kind == 1 ? ATTN_ATTENTION_ADDITIVE : ATTN_ATTENTION_DOT;
            k.additive_dim = kind == 1 ? 5 : 0;
            k.norm_first = nf;
            k.final_norm = nf;
            k.activation = nf ? ATTN_ACT_GELU : ATTN_ACT_RELU;
            run_case(k, 2, 5, 3, 1, 0.0, 1);
            run_case(k, 2, 4, 6, 1, 0.25, 1);
            run_case(k, 3, 1, 1, 0, 0.0, nf == 0);
        }
    attn_decoder_config g = c;
    g.num_layers = 1;
    g.num_kv_heads = 1;
    g.layer_norm_eps = 1e-3;
    run_case(g, 1, 3, 7, 0, 0.0, 1);
    attn_decoder_config big = c;
    big.num_layers = 1;
    big.d_model = 24;
    big.num_heads = 4;
    big.dim_feedforward = 33;
    run_case(big, 2, 17, 29, 1, 0.1, 0);
    big.cross_attention = ATTN_ATTENTION_ADDITIVE;
    run_case(big, 2, 17, 29, 1, 0.1, 0);
    /* the Llama family's layers: RMSNorm, SwiGLU, no attention biases,
     * rotary positions (neox and interleaved), grouped heads, a window */
    attn_decoder_config ll = c;
    ll.cross = 0;
    ll.d_model = 8;
    ll.num_heads = 2;
    ll.num_kv_heads = 1;
    ll.dim_feedforward = 5;
    ll.norm_first = 1;
    ll.final_norm = 1;
    ll.norm = ATTN_NORM_RMS;
    ll.activation = ATTN_ACT_SWIGLU;
    ll.attn_no_bias = 1;
    ll.layer_norm_eps = 1e-6;
    attn_rope_init(&ll.rope);
    ll.rope.theta = 100;
    run_case(ll, 2, 6, 1, 0, 0.0, 1);
    ll.rope.style = ATTN_ROPE_INTERLEAVED;
    ll.rope.rotary_dim = 2;
    ll.sliding_window = 3;
    ll.attn_no_bias = 0; /* Qwen2's q, k, v biases */
    run_case(ll, 2, 7, 1, 0, 0.0, 1);
    run_case(ll, 1, 5, 1, 0, 0.2, 1);
    causal();
    return check_done("test_decoder");
}
