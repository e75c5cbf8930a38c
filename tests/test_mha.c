/* Multi-head attention against a plain double reference: every mask kind,
 * grouped heads, cross-attention (kdim, vdim, Lq != Lk), dropout, weights
 * per head and averaged; central differences in double for every parameter
 * and input; self-attention with aliased gradients; threads; the tutorial
 * shape (1, 10, 512) with 8 heads. */
#include "attn.h"
#include "attn_layers.h"
#include "check.h"
#include "layers_ref.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t B, Lq, Lk, E, H, Hkv, kdim, vdim;
    int bias;
    double p;
} mcase;

typedef struct {
    const attn_mha_config *c;
    const mcase *t;
    double *prm, *q, *k, *v, *R, *scr;
    const attn_layer_opts *o;
} lctx;

static double loss(void *p) {
    lctx *x = p;
    ref_mha(x->c, x->prm, x->t->B, x->t->Lq, x->t->Lk, x->q, x->k, x->v, x->o,
            x->scr, NULL);
    double s = 0;
    for (int64_t i = 0; i < x->t->B * x->t->Lq * x->t->E; i++)
        s += x->scr[i] * x->R[i];
    return s;
}

static void run_case(const mcase *t, int mk, int gradcheck, attn_impl impl) {
    unsigned long long st =
        777 + (unsigned long long)mk * 31 + (unsigned long long)t->E;
    attn_mha_config c = {t->E, t->H, t->Hkv, t->kdim, t->vdim, t->bias};
    const int64_t kd = t->kdim ? t->kdim : t->E, vd = t->vdim ? t->vdim : t->E;
    const int64_t np = attn_mha_param_count(&c);
    const int64_t nq = t->B * t->Lq * t->E, nk = t->B * t->Lk * kd;
    const int64_t nv = t->B * t->Lk * vd, no = nq,
                  nw = t->B * t->H * t->Lq * t->Lk;
    CHECK(np > 0);
    float *prm = malloc(sizeof(float) * np);
    CHECK_STATUS(attn_mha_init(&c, prm, 11 + mk), ATTN_OK);
    attn_mha_params P;
    attn_mha_params_view(&c, prm, &P);
    if (t->bias) { /* non-zero biases */
        int64_t hd = t->E / t->H, KV = (t->Hkv ? t->Hkv : t->H) * hd;
        for (int64_t i = 0; i < t->E; i++) {
            P.b_q[i] = (float)(0.2 * test_rand(&st));
            P.b_o[i] = (float)(0.2 * test_rand(&st));
        }
        for (int64_t i = 0; i < KV; i++) {
            P.b_k[i] = (float)(0.2 * test_rand(&st));
            P.b_v[i] = (float)(0.2 * test_rand(&st));
        }
    }
    double *prmd = malloc(sizeof(double) * np);
    for (int64_t i = 0; i < np; i++) prmd[i] = prm[i];
    double *q = malloc(sizeof(double) * nq), *k = malloc(sizeof(double) * nk);
    double *v = malloc(sizeof(double) * nv), *R = malloc(sizeof(double) * no);
    ref_fill(q, nq, 1.0, &st);
    ref_fill(k, nk, 1.0, &st);
    ref_fill(v, nv, 1.0, &st);
    ref_fill(R, no, 1.0, &st);
    ref_round(q, nq);
    ref_round(k, nk);
    ref_round(v, nv);
    ref_round(R, no);
    float *qf = ref_to_f32(q, nq), *kf = ref_to_f32(k, nk),
          *vf = ref_to_f32(v, nv);
    float *Rf = ref_to_f32(R, no);
    attn_layer_opts o;
    attn_sdpa_opts_init(&o);
    mask_store *ms = calloc(1, sizeof *ms);
    set_mask(&o, mk, ms, t->B, t->H, t->Lq, t->Lk, &st);
    o.dropout_p = t->p;
    o.seed = 9;
    o.impl = impl;
    double *outd = malloc(sizeof(double) * no),
           *wd = malloc(sizeof(double) * nw);
    ref_mha(&c, prmd, t->B, t->Lq, t->Lk, q, k, v, &o, outd, wd);
    size_t wsn;
    CHECK_STATUS(attn_mha_workspace_size(&c, t->B, t->Lq, t->Lk, &wsn),
                 ATTN_OK);
    float *ws = malloc(sizeof(float) * wsn), *out = malloc(sizeof(float) * no);
    float *w = malloc(sizeof(float) * nw), *wa = malloc(sizeof(float) * nw);
    CHECK_STATUS(attn_mha_forward(&c, prm, t->B, t->Lq, t->Lk, qf, kf, vf, &o,
                                  out, wa, ATTN_WEIGHTS_AVERAGED, ws),
                 ATTN_OK);
    CHECK_STATUS(attn_mha_forward(&c, prm, t->B, t->Lq, t->Lk, qf, kf, vf, &o,
                                  out, w, ATTN_WEIGHTS_PER_HEAD, ws),
                 ATTN_OK);
    double eo = ref_max_rel(out, outd, no), ew = ref_max_rel(w, wd, nw);
    CHECK_MSG(eo <= 2e-5 && ew <= 2e-5,
              "mha mask=%s B%lld Lq%lld Lk%lld E%lld "
              "H%lld Hkv%lld: out err %g, weights err %g",
              mask_name[mk], (long long)t->B, (long long)t->Lq,
              (long long)t->Lk, (long long)t->E, (long long)t->H,
              (long long)t->Hkv, eo, ew);
    double eavg = 0;
    for (int64_t b = 0; b < t->B; b++)
        for (int64_t r = 0; r < t->Lq * t->Lk; r++) {
            double s = 0;
            for (int64_t h = 0; h < t->H; h++)
                s += wd[(b * t->H + h) * t->Lq * t->Lk + r];
            double e = fabs(wa[b * t->Lq * t->Lk + r] - s / t->H);
            if (e > eavg) eavg = e;
        }
    CHECK_MSG(eavg <= 1e-5, "averaged weights off by %g", eavg);

    /* gradients; threads 1 and 3 bitwise equal */
    const int64_t ng = np + nq + nk + nv;
    float *g1 = calloc(ng, sizeof(float)), *g3 = calloc(ng, sizeof(float));
    float *out3 = malloc(sizeof(float) * no);
    for (int pass = 0; pass < 2; pass++) {
        o.threads = pass ? 3 : 1;
        float *g = pass ? g3 : g1;
        CHECK_STATUS(attn_mha_forward(&c, prm, t->B, t->Lq, t->Lk, qf, kf, vf,
                                      &o, pass ? out3 : out, NULL,
                                      ATTN_WEIGHTS_PER_HEAD, ws),
                     ATTN_OK);
        CHECK_STATUS(attn_mha_backward(&c, prm, t->B, t->Lq, t->Lk, qf, kf, vf,
                                       &o, Rf, ws, g, g + np, g + np + nq,
                                       g + np + nq + nk),
                     ATTN_OK);
    }
    CHECK_MSG(memcmp(out, out3, sizeof(float) * no) == 0 &&
                  memcmp(g1, g3, sizeof(float) * ng) == 0,
              "mha mask=%s: 1 and 3 threads differ", mask_name[mk]);
    o.threads = 0;
    if (gradcheck) {
        double *scr = malloc(sizeof(double) * no);
        lctx x = {&c, t, prmd, q, k, v, R, scr, &o};
        attn_param_slice sl[8];
        int64_t ns;
        attn_mha_param_slices(&c, "", 0, sl, 8, &ns);
        char what[512];
        for (int64_t s = 0; s < ns; s++) {
            snprintf(what, sizeof what, "mha mask=%s %.47s", mask_name[mk],
                     sl[s].name);
            ref_fd_check(what, prmd + sl[s].offset,
                         sl[s].shape[0] * sl[s].shape[1], g1 + sl[s].offset,
                         loss, &x, 2e-4);
        }
        snprintf(what, sizeof what, "mha mask=%s dquery", mask_name[mk]);
        ref_fd_check(what, q, nq, g1 + np, loss, &x, 2e-4);
        snprintf(what, sizeof what, "mha mask=%s dkey", mask_name[mk]);
        ref_fd_check(what, k, nk, g1 + np + nq, loss, &x, 2e-4);
        snprintf(what, sizeof what, "mha mask=%s dvalue", mask_name[mk]);
        ref_fd_check(what, v, nv, g1 + np + nq + nk, loss, &x, 2e-4);
        free(scr);
    }
    free(prm);
    free(prmd);
    free(q);
    free(k);
    free(v);
    free(R);
    free(qf);
    free(kf);
    free(vf);
    free(Rf);
    free(ms);
    free(outd);
    free(wd);
    free(ws);
    free(out);
    free(w);
    free(wa);
    free(g1);
    free(g3);
    free(out3);
}

/* Self-attention with one buffer for query, key, value and one for their
 * gradients equals the sum of the three separate gradients. */
static void self_alias(void) {
    const int64_t B = 2, L = 5, E = 8, H = 2;
    attn_mha_config c = {E, H, 1, 0, 0, 1};
    int64_t np = attn_mha_param_count(&c), n = B * L * E;
    float *prm = malloc(sizeof(float) * np), x[80], dy[80], a[80] = {0};
    float *gp = calloc(np, sizeof(float)), dq[80] = {0}, dk[80] = {0},
          dv[80] = {0};
    unsigned long long st = 3;
    attn_mha_init(&c, prm, 4);
    for (int64_t i = 0; i < n; i++) {
        x[i] = (float)test_rand(&st);
        dy[i] = (float)test_rand(&st);
    }
    attn_layer_opts o;
    attn_sdpa_opts_init(&o);
    o.mask.causal = 1;
    size_t wsn;
    attn_mha_workspace_size(&c, B, L, L, &wsn);
    float *ws = malloc(sizeof(float) * wsn), out[80];
    CHECK_STATUS(
        attn_mha_forward(&c, prm, B, L, L, x, x, x, &o, out, NULL, 0, ws),
        ATTN_OK);
    CHECK_STATUS(
        attn_mha_backward(&c, prm, B, L, L, x, x, x, &o, dy, ws, gp, a, a, a),
        ATTN_OK);
    CHECK_STATUS(attn_mha_backward(&c, prm, B, L, L, x, x, x, &o, dy, ws, NULL,
                                   dq, dk, dv),
                 ATTN_OK);
    double e = 0;
    for (int64_t i = 0; i < n; i++)
        e = fmax(e, fabs(a[i] - (dq[i] + dk[i] + dv[i])));
    CHECK_MSG(e <= 1e-5, "aliased gradients differ by %g", e);
    free(prm);
    free(gp);
    free(ws);
}

/* The tutorial: d_model 512, 8 heads on (1, 10, 512) -> per-head weights
 * (1, 8, 10, 10) whose rows sum to 1, output (1, 10, 512). */
static void tutorial(void) {
    const int64_t B = 1, L = 10, E = 512, H = 8;
    attn_mha_config c = {E, H, 0, 0, 0, 1};
    int64_t np = attn_mha_param_count(&c);
    CHECK(np == 4 * E * E + 4 * E);
    float *prm = malloc(sizeof(float) * np),
          *x = malloc(sizeof(float) * B * L * E);
    float *out = malloc(sizeof(float) * B * L * E), w[8 * 10 * 10];
    unsigned long long st = 8;
    for (int64_t i = 0; i < B * L * E; i++)
        x[i] = (float)(0.5 * test_rand(&st) + 0.5);
    CHECK_STATUS(attn_mha_init(&c, prm, 2024), ATTN_OK);
    attn_layer_opts o;
    attn_sdpa_opts_init(&o);
    size_t wsn;
    attn_mha_workspace_size(&c, B, L, L, &wsn);
    float *ws = malloc(sizeof(float) * wsn);
    CHECK_STATUS(attn_mha_forward(&c, prm, B, L, L, x, x, x, &o, out, w,
                                  ATTN_WEIGHTS_PER_HEAD, ws),
                 ATTN_OK);
    double worst = 0;
    for (int r = 0; r < H * L; r++) {
        double s = 0;
        for (int j = 0; j < L; j++) s += w[r * L + j];
        worst = fmax(worst, fabs(s - 1));
    }
    CHECK_MSG(worst <= 1e-5, "tutorial weight rows deviate from 1 by %g",
              worst);
    int finite = 1;
    for (int64_t i = 0; i < B * L * E; i++) finite &= isfinite(out[i]) != 0;
    CHECK(finite);
    free(prm);
    free(x);
    free(out);
    free(ws);
}

static void errors(void) {
    attn_mha_config c = {10, 3, 0, 0, 0, 1};
    size_t n;
    CHECK_STATUS(attn_mha_workspace_size(&c, 1, 2, 2, &n), ATTN_E_INVALID);
    c.num_heads = 2;
    c.num_kv_heads = 4;
    CHECK(attn_mha_param_count(&c) == 0);
    c.num_kv_heads = 1;
    CHECK(attn_mha_param_count(&c) == 2 * 100 + 2 * 5 * 10 + 2 * 10 + 2 * 5);
    float x[64] = {0}, ws[1], out[64];
    attn_layer_opts o;
    attn_sdpa_opts_init(&o);
    CHECK_STATUS(
        attn_mha_forward(&c, x, 1, 2, 2, x, x, NULL, &o, out, NULL, 0, ws),
        ATTN_E_INVALID);
    CHECK_STATUS(
        attn_mha_forward(&c, x, 1, 2, 2, x, x, x, &o, out, NULL, 7, ws),
        ATTN_E_INVALID);
}

int main(void) {
    const int san = getenv("ATTN_SANITIZED") != NULL;
    mcase small = {2, 5, 7, 6, 3, 0, 0, 0, 1, 0.0};
    for (int mk = 0; mk < M_COUNT; mk++)
        run_case(&small, mk, 1, ATTN_IMPL_AUTO);
    mcase gqa = {2, 4, 4, 8, 4, 2, 0, 0, 1, 0.0};
    run_case(&gqa, M_CAUSAL, 1, ATTN_IMPL_AUTO);
    run_case(&gqa, M_KEYLEN, 1, ATTN_IMPL_REF);
    mcase mqa = {1, 3, 3, 8, 4, 1, 0, 0, 0, 0.0};
    run_case(&mqa, M_NONE, 1, ATTN_IMPL_AUTO);
    mcase cross = {2, 3, 6, 6, 2, 1, 5, 3, 1, 0.0};
    run_case(&cross, M_NONE, 1, ATTN_IMPL_AUTO);
    run_case(&cross, M_BIAS, 1, ATTN_IMPL_AUTO);
    mcase drop = {2, 4, 5, 4, 2, 0, 3, 7, 1, 0.2};
    run_case(&drop, M_WINDOW, 1, ATTN_IMPL_AUTO);
    mcase big = {2, 17, san ? 40 : 129, 24, 4, 2, 13, 0, 1, 0.0};
    for (int mk = 0; mk < M_COUNT; mk++)
        if (mk != M_KEEP && mk != M_BIAS && (!san || mk % 3 == 0))
            run_case(&big, mk, 0, ATTN_IMPL_AUTO);
    mcase one = {1, 1, 1, 1, 1, 0, 0, 0, 0, 0.0};
    run_case(&one, M_NONE, 1, ATTN_IMPL_AUTO);
    self_alias();
    tutorial();
    errors();
    return check_done("test_mha");
}
