/* Additive attention against a plain double reference (every mask kind,
 * odd sizes, dropout, context from values or projected keys), central
 * differences in double for every parameter and input, thread-count
 * determinism and argument errors. */
#include "attn.h"
#include "attn_layers.h"
#include "check.h"
#include "layers_ref.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t B, Lq, Lk, Dq, Dk, Dv, A;
    int bias, ctx_keys;
    double p;
} acase;

static double loss_ref(const attn_additive_config *c, const double *prm,
                       const acase *t, const double *q, const double *k,
                       const double *v, const attn_layer_opts *o,
                       const double *R, double *scratch) {
    ref_additive(c, prm, t->B, t->Lq, t->Lk, q, k, v, o, scratch, NULL);
    int64_t n = t->B * t->Lq * attn_additive_out_dim(c);
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += scratch[i] * R[i];
    return s;
}

/* Central differences of sum(out * R) for entries of x (the params or an
 * input) against the library's gradient g. */
static void fd_check(const char *what, double *x, int64_t n, const float *g,
                     const attn_additive_config *c, double *prm, const acase *t,
                     double *q, double *k, double *v, const attn_layer_opts *o,
                     const double *R, double *scratch) {
    const double h = 1e-6;
    double *fd = malloc(sizeof(double) * n);
    double gmax = 1e-6;
    int64_t stride = n > 40 ? n / 37 : 1; /* a spread of entries when large */
    for (int64_t i = 0; i < n; i += stride) {
        double x0 = x[i];
        x[i] = x0 + h;
        double fp = loss_ref(c, prm, t, q, k, v, o, R, scratch);
        x[i] = x0 - h;
        double fm = loss_ref(c, prm, t, q, k, v, o, R, scratch);
        x[i] = x0;
        fd[i] = (fp - fm) / (2 * h);
        if (fabs(fd[i]) > gmax) gmax = fabs(fd[i]);
    }
    double worst = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < n; i += stride)
        if (fabs(g[i] - fd[i]) > worst) {
            worst = fabs(g[i] - fd[i]);
            at = i;
        }
    CHECK_MSG(worst <= 2e-4 * gmax,
              "%s: gradient[%lld] = %g but central "
              "difference %g (max %g)",
              what, (long long)at, g[at], fd[at], gmax);
    free(fd);
}

static void run_case(const acase *t, int mk, int gradcheck) {
    unsigned long long st =
        1234 + (unsigned long long)mk * 77 + (unsigned long long)t->A;
    attn_additive_config c = {t->Dq, t->Dk, t->Dv, t->A, t->bias, t->ctx_keys};
    const int64_t np = attn_additive_param_count(&c),
                  Dc = attn_additive_out_dim(&c);
    const int64_t nq = t->B * t->Lq * t->Dq, nk = t->B * t->Lk * t->Dk;
    const int64_t nv = t->B * t->Lk * t->Dv, no = t->B * t->Lq * Dc;
    const int64_t nw = t->B * t->Lq * t->Lk;
    float *prm = malloc(sizeof(float) * np);
    CHECK_STATUS(attn_additive_init(&c, prm, 99 + mk), ATTN_OK);
    /* non-zero biases so that their gradients are exercised */
    double *prmd = malloc(sizeof(double) * np);
    for (int64_t i = 0; i < np; i++) prmd[i] = prm[i];
    if (t->bias) {
        attn_additive_params P;
        attn_additive_params_view(&c, prm, &P);
        for (int64_t a = 0; a < t->A; a++) {
            P.b_q[a] = (float)(0.3 * test_rand(&st));
            P.b_k[a] = (float)(0.3 * test_rand(&st));
        }
        for (int64_t i = 0; i < np; i++) prmd[i] = prm[i];
    }
    double *q = malloc(sizeof(double) * nq), *k = malloc(sizeof(double) * nk);
    double *v = malloc(sizeof(double) * (nv ? nv : 1));
    double *R = malloc(sizeof(double) * no);
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
    set_mask(&o, mk, ms, t->B, 1, t->Lq, t->Lk, &st);
    o.dropout_p = t->p;
    o.seed = 5;
    double *outd = malloc(sizeof(double) * no),
           *wd = malloc(sizeof(double) * nw);
    ref_additive(&c, prmd, t->B, t->Lq, t->Lk, q, k, v, &o, outd, wd);
    size_t wsn;
    CHECK_STATUS(attn_additive_workspace_size(&c, t->B, t->Lq, t->Lk, &wsn),
                 ATTN_OK);
    float *ws = malloc(sizeof(float) * wsn), *out = malloc(sizeof(float) * no);
    float *w = malloc(sizeof(float) * nw);
    const float *vin = t->ctx_keys ? NULL : vf;
    for (int impl = 0; impl < 2; impl++) {
        o.impl = impl ? ATTN_IMPL_REF : ATTN_IMPL_AUTO;
        CHECK_STATUS(attn_additive_forward(&c, prm, t->B, t->Lq, t->Lk, qf, kf,
                                           vin, &o, out, w, ws),
                     ATTN_OK);
        double eo = ref_max_rel(out, outd, no), ew = ref_max_rel(w, wd, nw);
        CHECK_MSG(eo <= 2e-5 && ew <= 2e-5,
                  "additive %s mask=%s B%lld Lq%lld "
                  "Lk%lld A%lld: out err %g, weights err %g",
                  impl ? "ref" : "fast", mask_name[mk], (long long)t->B,
                  (long long)t->Lq, (long long)t->Lk, (long long)t->A, eo, ew);
    }
    o.impl = ATTN_IMPL_AUTO;
    /* masked weights exactly 0 */
    int bad = 0;
    for (int64_t b = 0; b < t->B; b++)
        for (int64_t i = 0; i < t->Lq; i++)
            for (int64_t j = 0; j < t->Lk; j++)
                if (!attn_mask_visible(&o.mask, b, 0, i, j, t->Lq, t->Lk) &&
                    w[(b * t->Lq + i) * t->Lk + j] != 0.0f)
                    bad++;
    CHECK_MSG(bad == 0, "mask=%s: %d masked weights not 0", mask_name[mk], bad);

    /* threads: 1 and 3 give the same bits, forward and backward */
    float *g1 = calloc(np + nq + nk + nv + 1, sizeof(float));
    float *g3 = calloc(np + nq + nk + nv + 1, sizeof(float));
    float *out3 = malloc(sizeof(float) * no);
    for (int pass = 0; pass < 2; pass++) {
        o.threads = pass ? 3 : 1;
        float *g = pass ? g3 : g1;
        CHECK_STATUS(attn_additive_forward(&c, prm, t->B, t->Lq, t->Lk, qf, kf,
                                           vin, &o, pass ? out3 : out, NULL,
                                           ws),
                     ATTN_OK);
        CHECK_STATUS(
            attn_additive_backward(&c, prm, t->B, t->Lq, t->Lk, qf, kf, vin, &o,
                                   Rf, ws, g, g + np, g + np + nq,
                                   t->ctx_keys ? NULL : g + np + nq + nk),
            ATTN_OK);
    }
    CHECK_MSG(memcmp(out, out3, sizeof(float) * no) == 0 &&
                  memcmp(g1, g3, sizeof(float) * (np + nq + nk + nv)) == 0,
              "mask=%s: 1 and 3 threads differ", mask_name[mk]);
    o.threads = 0;
    if (gradcheck) {
        double *scr = malloc(sizeof(double) * no);
        attn_param_slice sl[5];
        int64_t ns;
        attn_additive_param_slices(&c, "", 0, sl, 5, &ns);
        char what[512];
        for (int64_t s = 0; s < ns; s++) {
            snprintf(what, sizeof what, "mask=%s %.47s", mask_name[mk],
                     sl[s].name);
            fd_check(what, prmd + sl[s].offset, sl[s].shape[0] * sl[s].shape[1],
                     g1 + sl[s].offset, &c, prmd, t, q, k, v, &o, R, scr);
        }
        snprintf(what, sizeof what, "mask=%s dq", mask_name[mk]);
        fd_check(what, q, nq, g1 + np, &c, prmd, t, q, k, v, &o, R, scr);
        snprintf(what, sizeof what, "mask=%s dk", mask_name[mk]);
        fd_check(what, k, nk, g1 + np + nq, &c, prmd, t, q, k, v, &o, R, scr);
        if (!t->ctx_keys) {
            snprintf(what, sizeof what, "mask=%s dv", mask_name[mk]);
            fd_check(what, v, nv, g1 + np + nq + nk, &c, prmd, t, q, k, v, &o,
                     R, scr);
        }
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
    free(g1);
    free(g3);
    free(out3);
}

static void errors(void) {
    attn_additive_config c = {4, 4, 4, 0, 1, 0};
    float x[64] = {0}, ws[4096], out[64];
    attn_layer_opts o;
    attn_sdpa_opts_init(&o);
    size_t n;
    CHECK_STATUS(attn_additive_workspace_size(&c, 1, 2, 2, &n), ATTN_E_INVALID);
    CHECK(attn_additive_param_count(&c) == 0);
    c.attn_dim = 3;
    CHECK(attn_additive_param_count(&c) == 3 * 4 + 3 * 4 + 3 + 6);
    CHECK_STATUS(
        attn_additive_forward(&c, NULL, 1, 2, 2, x, x, x, &o, out, NULL, ws),
        ATTN_E_INVALID);
    CHECK_STATUS(
        attn_additive_forward(&c, x, 1, 0, 2, x, x, x, &o, out, NULL, ws),
        ATTN_E_SHAPE);
    float bad[8] = {0, 0, 0, NAN, 0, 0, 0, 0};
    CHECK_STATUS(
        attn_additive_forward(&c, x, 1, 2, 2, bad, x, x, &o, out, NULL, ws),
        ATTN_E_NONFINITE);
    o.dropout_p = 1.0;
    CHECK_STATUS(
        attn_additive_forward(&c, x, 1, 2, 2, x, x, x, &o, out, NULL, ws),
        ATTN_E_INVALID);
    o.dropout_p = 0;
    int64_t kl[1] = {3};
    o.mask.key_lengths = kl;
    CHECK_STATUS(
        attn_additive_forward(&c, x, 1, 2, 2, x, x, x, &o, out, NULL, ws),
        ATTN_E_SHAPE);
}

int main(void) {
    const int san = getenv("ATTN_SANITIZED") != NULL;
    /* small shapes for the gradient checks (every mask kind) */
    acase small = {3, 5, 7, 4, 3, 2, 6, 1, 0, 0.0};
    for (int mk = 0; mk < M_COUNT; mk++) run_case(&small, mk, 1);
    acase keys = {2, 3, 4, 3, 5, 0, 5, 0, 1, 0.0};
    run_case(&keys, M_NONE, 1);
    run_case(&keys, M_KEYLEN, 1);
    acase drop = {2, 4, 6, 3, 3, 3, 4, 1, 0, 0.3};
    run_case(&drop, M_CAUSAL, 1);
    acase dropk = {2, 4, 6, 3, 3, 3, 4, 1, 1, 0.25};
    run_case(&dropk, M_WINDOW, 1);
    /* larger odd shapes that span several tiles (forward, threads) */
    acase big = {2, 37, san ? 70 : 129, 17, 9, 5, 33, 1, 0, 0.0};
    for (int mk = 0; mk < M_COUNT; mk++)
        if (mk != M_KEEP && mk != M_BIAS) run_case(&big, mk, 0);
    acase one = {1, 1, 1, 1, 1, 1, 1, 0, 0, 0.0};
    run_case(&one, M_NONE, 1);
    errors();
    return check_done("test_additive");
}
